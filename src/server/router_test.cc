#include "server/router.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

namespace rota::server {
namespace {

TEST(SumPrometheus, SumsANamesSeriesOverTheirLabels) {
  const std::string text = R"(# HELP vllm:num_requests_waiting Requests waiting.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{model_name="llama",engine="0"} 3
vllm:num_requests_waiting{model_name="a} b \" c",engine="1"} 2.5 1700000000000
vllm:num_requests_waiting_total 100
vllm:gpu_cache_usage_perc 0.75
other 9
vllm:gpu_cache_usage_perc{x="1"} NaN
vllm:gpu_cache_usage_perc{x="2"} oops
)";
  const auto sums = SumPrometheus(text, {"vllm:num_requests_waiting", "vllm:gpu_cache_usage_perc", "absent"});
  EXPECT_EQ(sums.size(), 2u);
  EXPECT_DOUBLE_EQ(sums.at("vllm:num_requests_waiting"), 5.5);
  EXPECT_DOUBLE_EQ(sums.at("vllm:gpu_cache_usage_perc"), 0.75);  // NaN and junk skipped
  EXPECT_FALSE(sums.count("absent"));
}

// One client address cannot hold every connection: past its cap a new one
// is closed at once, and the others still work.
TEST(Router, CapsConnectionsPerClientAddress) {
  RouterOptions o;
  o.max_connections_per_address = 3;
  Router router(o);
  auto port = router.Start();
  ASSERT_TRUE(port.ok()) << port.status().ToString();
  auto open = [&] {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(*port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    timeval tv{2, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    return fd;
  };
  std::vector<int> held;
  for (int i = 0; i < 3; ++i) held.push_back(open());
  usleep(100 * 1000);  // (accepted in turn)
  const int extra = open();
  char byte;
  EXPECT_EQ(read(extra, &byte, 1), 0) << "the fourth connection from one address is closed";
  close(extra);
  // One of the three still gets an answer (404: no such service).
  const std::string get = "GET /none/x HTTP/1.1\r\nHost: r\r\n\r\n";
  ASSERT_EQ(write(held[0], get.data(), get.size()), static_cast<ssize_t>(get.size()));
  char buf[256] = {};
  ASSERT_GT(read(held[0], buf, sizeof buf - 1), 0);
  EXPECT_EQ(std::string(buf).rfind("HTTP/1.1 404", 0), 0u) << buf;
  for (int fd : held) close(fd);
  router.Stop();
}

}  // namespace
}  // namespace rota::server
