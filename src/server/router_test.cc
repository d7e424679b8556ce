#include "server/router.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

namespace rota::server {
namespace {

// A TCP connection to 127.0.0.1:port whose reads give up after `timeout_s`.
int OpenLoopback(int port, int timeout_s) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
  timeval tv{timeout_s, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  return fd;
}

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
  auto open = [&] { return OpenLoopback(*port, 2); };
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

// The bodies the router holds in all are bounded: a request to a service
// with no ready replica waits holding its body; a second whose body would
// pass the budget gets 503 with Retry-After before its body is read, while
// a request without a body is still taken; when the first is answered its
// bytes are given back.
TEST(Router, RefusesABodyPastItsBufferBudget) {
  RouterOptions o;
  o.max_buffered_bytes = 1 << 20;
  o.queue_timeout = 2 * kMicrosPerSecond;
  Router router(o);
  auto port = router.Start();
  ASSERT_TRUE(port.ok()) << port.status().ToString();
  // A service whose one replica never answers (nothing listens there).
  RouterService cold{.name = "cold", .job = JobId(1)};
  cold.readiness.path = "/ready";
  cold.backends.push_back({JobId(1), 0, 0, 0, "127.0.0.1", 9});
  router.Update({cold});
  auto open = [&] { return OpenLoopback(*port, 5); };
  auto send_all = [](int fd, const std::string& data) {
    for (size_t at = 0; at < data.size();) {
      const ssize_t n = write(fd, data.data() + at, data.size() - at);
      if (n <= 0) return false;
      at += static_cast<size_t>(n);
    }
    return true;
  };
  auto answer = [](int fd) {
    std::string got;
    char buf[4096];
    for (ssize_t n; got.find("\r\n\r\n") == std::string::npos && (n = read(fd, buf, sizeof buf)) > 0;) got.append(buf, n);
    return got;
  };
  const std::string body(700 << 10, 'x');
  const std::string post = "POST /cold/x HTTP/1.1\r\nHost: r\r\nContent-Length: " + std::to_string(body.size()) + "\r\n\r\n";
  const int first = open();
  ASSERT_TRUE(send_all(first, post + body));
  for (int i = 0; i < 200 && router.buffered_bytes() < body.size(); ++i) usleep(10 * 1000);
  ASSERT_EQ(router.buffered_bytes(), body.size()) << "the first request waits, holding its body";
  // The second would pass 1 MiB: refused before its body is read.
  const int second = open();
  ASSERT_TRUE(send_all(second, post));
  const std::string refused = answer(second);
  EXPECT_EQ(refused.rfind("HTTP/1.1 503", 0), 0u) << refused;
  EXPECT_NE(refused.find("Retry-After: 1"), std::string::npos) << refused;
  EXPECT_EQ(router.refused_for_buffers(), 1u);
  close(second);
  // A request without a body still waits its turn (and times out: no replica).
  const int small = open();
  const std::string get = "GET /cold/y HTTP/1.1\r\nHost: r\r\n\r\n";
  ASSERT_TRUE(send_all(small, get));
  const std::string waited = answer(small);
  EXPECT_NE(waited.find("no ready replica"), std::string::npos) << waited;
  close(small);
  // The first is answered (no replica within 2 s): its bytes are given back.
  const std::string first_answer = answer(first);
  EXPECT_EQ(first_answer.rfind("HTTP/1.1 503", 0), 0u) << first_answer;
  close(first);
  for (int i = 0; i < 200 && router.buffered_bytes() != 0; ++i) usleep(10 * 1000);
  EXPECT_EQ(router.buffered_bytes(), 0u);
  EXPECT_EQ(router.refused_for_buffers(), 1u);
  router.Stop();
}

}  // namespace
}  // namespace rota::server
