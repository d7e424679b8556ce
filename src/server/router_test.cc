#include "server/router.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <cctype>
#include <cstdio>
#include <functional>
#include <mutex>
#include <thread>

namespace rota::server {
namespace {

// A TCP connection to 127.0.0.1:port whose reads give up after `timeout_s`,
// from loopback address `from` (127.0.0.1 unless given: another client).
int OpenLoopback(int port, int timeout_s, const char* from = nullptr) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (from != nullptr) {
    sockaddr_in local{};
    local.sin_family = AF_INET;
    inet_pton(AF_INET, from, &local.sin_addr);
    EXPECT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&local), sizeof local), 0) << from;
  }
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

// The bodies the router holds are bounded, in all and per client address (a
// quarter): requests to a service with no ready replica wait holding their
// bodies; one whose body would pass either bound gets 503 with Retry-After
// (its body drained, so the client reads the answer, not a reset), a
// chunked one counts as the most it may be, and a request without a body is
// still taken; when the first are answered their bytes are given back.
TEST(Router, RefusesABodyPastItsBufferBudget) {
  RouterOptions o;
  o.max_buffered_bytes = 1 << 20;  // 256 KiB from one address
  o.queue_timeout = 2 * kMicrosPerSecond;
  Router router(o);
  auto port = router.Start();
  ASSERT_TRUE(port.ok()) << port.status().ToString();
  // A service whose one replica never answers (nothing listens there).
  RouterService cold{.name = "cold", .job = JobId(1)};
  cold.readiness.path = "/ready";
  cold.backends.push_back({JobId(1), 0, 0, 0, "127.0.0.1", 9});
  router.Update({cold});
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
  auto post = [](size_t bytes) {
    return "POST /cold/x HTTP/1.1\r\nHost: r\r\nContent-Length: " + std::to_string(bytes) + "\r\n\r\n" +
           std::string(bytes, 'x');
  };
  auto refused = [&](const std::string& got) {
    return got.rfind("HTTP/1.1 503", 0) == 0 && got.find("Retry-After: 1") != std::string::npos;
  };
  // Five clients hold 200 KiB each (1,000 KiB of the 1,024).
  std::vector<int> held;
  const char* clients[] = {"127.0.0.2", "127.0.0.3", "127.0.0.4", "127.0.0.5", "127.0.0.6"};
  for (const char* from : clients) {
    held.push_back(OpenLoopback(*port, 5, from));
    ASSERT_TRUE(send_all(held.back(), post(200 << 10)));
  }
  for (int i = 0; i < 200 && router.buffered_bytes() < 5 * (200u << 10); ++i) usleep(10 * 1000);
  ASSERT_EQ(router.buffered_bytes(), 5 * (200u << 10)) << "the requests wait, holding their bodies";
  // The first client again: 400 KiB would pass its quarter.
  const int again = OpenLoopback(*port, 5, "127.0.0.2");
  ASSERT_TRUE(send_all(again, post(200 << 10)));
  const std::string own = answer(again);
  EXPECT_TRUE(refused(own)) << own;
  close(again);
  // Another client: 100 KiB would pass the 1,024 in all.
  const int other = OpenLoopback(*port, 5, "127.0.0.7");
  ASSERT_TRUE(send_all(other, post(100 << 10)));
  const std::string all = answer(other);
  EXPECT_TRUE(refused(all)) << all;
  EXPECT_NE(all.find("its limit (1 MiB)"), std::string::npos) << all;
  close(other);
  // A chunked body counts as the most it may be (16 MiB): refused.
  const int chunked = OpenLoopback(*port, 5, "127.0.0.8");
  ASSERT_TRUE(send_all(chunked, "POST /cold/x HTTP/1.1\r\nHost: r\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n"));
  const std::string big = answer(chunked);
  EXPECT_TRUE(refused(big)) << big;
  close(chunked);
  EXPECT_EQ(router.refused_for_buffers(), 3u);
  // A request without a body still waits its turn (and times out: no replica).
  const int small = OpenLoopback(*port, 5, "127.0.0.7");
  ASSERT_TRUE(send_all(small, "GET /cold/y HTTP/1.1\r\nHost: r\r\n\r\n"));
  const std::string waited = answer(small);
  EXPECT_NE(waited.find("no ready replica"), std::string::npos) << waited;
  close(small);
  // The first are answered (no replica within 2 s): their bytes are given back.
  for (int fd : held) {
    const std::string got = answer(fd);
    EXPECT_EQ(got.rfind("HTTP/1.1 503", 0), 0u) << got;
    EXPECT_EQ(got.find("Retry-After"), std::string::npos) << got;  // (the queue's 503, not the budget's)
    close(fd);
  }
  for (int i = 0; i < 200 && router.buffered_bytes() != 0; ++i) usleep(10 * 1000);
  EXPECT_EQ(router.buffered_bytes(), 0u);
  router.Stop();
}

// A replica on a loopback port of its own: each connection's requests go
// to `answer(fd, head)` (its body, by Content-Length, read and dropped),
// which writes what it likes and returns false to close the connection.
// GET /ready is answered 200 (the router's probe).
class FakeReplica {
 public:
  explicit FakeReplica(std::function<bool(int, const std::string&)> answer) : answer_(std::move(answer)) {
    listener_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    EXPECT_EQ(::bind(listener_, reinterpret_cast<sockaddr*>(&a), sizeof a), 0);
    EXPECT_EQ(listen(listener_, 16), 0);
    socklen_t len = sizeof a;
    getsockname(listener_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    thread_ = std::thread([this] {
      for (int fd; (fd = accept(listener_, nullptr, nullptr)) >= 0;) {
        std::thread([this, fd] {
          std::string in;
          char buf[4096];
          for (;;) {
            size_t end;
            while ((end = in.find("\r\n\r\n")) == std::string::npos) {
              const ssize_t n = read(fd, buf, sizeof buf);
              if (n <= 0) return (void)close(fd);
              in.append(buf, n);
            }
            const std::string head = in.substr(0, end);
            std::string lower = head;
            for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
            size_t body = 0;
            if (auto at = lower.find("content-length: "); at != std::string::npos) body = std::stoul(lower.substr(at + 16));
            while (in.size() < end + 4 + body) {
              const ssize_t n = read(fd, buf, sizeof buf);
              if (n <= 0) return (void)close(fd);
              in.append(buf, n);
            }
            in.erase(0, end + 4 + body);  // (its body read and dropped)
            // (readiness probes: 200 and close)
            if (head.rfind("GET /ready", 0) == 0) {
              const std::string ok = "HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
              (void)!write(fd, ok.data(), ok.size());
              return (void)close(fd);
            }
            if (!answer_(fd, head)) return (void)close(fd);
          }
        }).detach();
      }
    });
  }
  ~FakeReplica() {
    shutdown(listener_, SHUT_RDWR);
    close(listener_);
    thread_.join();
  }
  int port() const { return port_; }

 private:
  std::function<bool(int, const std::string&)> answer_;
  int listener_ = -1;
  int port_ = 0;
  std::thread thread_;
};

// A router with service "svc" on `replica` (probed every `period`), its replica ready.
std::unique_ptr<Router> RouterFor(const FakeReplica& replica, int* port, Duration period = 100'000) {
  auto router = std::make_unique<Router>(RouterOptions{});
  auto started = router->Start();
  EXPECT_TRUE(started.ok()) << started.status().ToString();
  *port = started.ok() ? *started : 0;
  RouterService svc{.name = "svc", .job = JobId(1)};
  svc.readiness.path = "/ready";
  svc.readiness.period = period;
  svc.backends.push_back({JobId(1), 0, 0, 0, "127.0.0.1", replica.port()});
  router->Update({svc});
  for (int i = 0; i < 100 && (router->Endpoints("svc").empty() || !router->Endpoints("svc")[0].ready); ++i) {
    usleep(20 * 1000);
  }
  return router;
}

// Reads from `fd` until `want` has come (or the read times out / the
// connection closes); what came.
std::string ReadUntil(int fd, const std::string& want) {
  std::string got;
  char buf[4096];
  for (ssize_t n; got.find(want) == std::string::npos && (n = read(fd, buf, sizeof buf)) > 0;) got.append(buf, n);
  return got;
}

void Send(int fd, const std::string& data) {
  ASSERT_EQ(write(fd, data.data(), data.size()), static_cast<ssize_t>(data.size()));
}

// Expect: 100-continue. The router tells the client to go on once it
// takes the body, and does not pass the header on: a replica that answered
// "100 Continue" to it would have its interim answer taken for the real one.
TEST(Router, AnswersExpectContinueItselfAndDoesNotForwardIt) {
  // A replica that sends "100 Continue" first whenever a request asks for it.
  std::atomic<int> saw_expect{0};
  FakeReplica replica([&](int fd, const std::string& head) {
    std::string lower = head;
    for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    std::string out;
    if (lower.find("expect:") != std::string::npos) {
      ++saw_expect;
      out += "HTTP/1.1 100 Continue\r\n\r\n";
    }
    out += "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";
    return write(fd, out.data(), out.size()) >= 0;
  });
  const int backend_port = replica.port();
  RouterOptions o;
  Router router(o);
  auto port = router.Start();
  ASSERT_TRUE(port.ok()) << port.status().ToString();
  RouterService svc{.name = "svc", .job = JobId(1)};
  svc.readiness.path = "/ready";
  svc.readiness.period = 100'000;
  svc.backends.push_back({JobId(1), 0, 0, 0, "127.0.0.1", backend_port});
  router.Update({svc});
  for (int i = 0; i < 100 && (router.Endpoints("svc").empty() || !router.Endpoints("svc")[0].ready); ++i) usleep(20 * 1000);
  const int fd = OpenLoopback(*port, 5);
  const std::string head = "POST /svc/x HTTP/1.1\r\nHost: r\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n";
  ASSERT_EQ(write(fd, head.data(), head.size()), static_cast<ssize_t>(head.size()));
  char buf[1024] = {};
  ASSERT_GT(read(fd, buf, sizeof buf - 1), 0);
  EXPECT_EQ(std::string(buf).rfind("HTTP/1.1 100 Continue", 0), 0u) << buf;
  ASSERT_EQ(write(fd, "hello", 5), 5);
  std::string got;
  for (ssize_t n; got.find("ok") == std::string::npos && (n = read(fd, buf, sizeof buf)) > 0;) got.append(buf, n);
  EXPECT_EQ(got.rfind("HTTP/1.1 200 OK", 0), 0u) << got;
  EXPECT_EQ(saw_expect.load(), 0) << "the router passed Expect on";
  close(fd);
  router.Stop();
}

// A chunked request's body, read whole, goes to the replica with its length:
// a replica that reads only Content-Length (Python's http.server) left the
// chunks on the kept connection, where they broke the next client's request.
TEST(Router, AChunkedRequestGoesToTheReplicaWithItsLength) {
  std::atomic<int> chunked{0}, lengths{0};
  FakeReplica replica([&](int fd, const std::string& head) {
    std::string lower = head;
    for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (lower.find("transfer-encoding") != std::string::npos) ++chunked;
    if (lower.find("content-length: 5") != std::string::npos) ++lengths;
    const std::string out = lower.rfind("post", 0) == 0 || lower.rfind("get", 0) == 0
                                ? "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"
                                : "HTTP/1.1 400 Bad Request\r\nContent-Length: 3\r\n\r\nbad";
    return write(fd, out.data(), out.size()) >= 0;
  });
  int port = 0;
  auto router = RouterFor(replica, &port);
  const int fd = OpenLoopback(port, 5);
  Send(fd, "POST /svc/x HTTP/1.1\r\nHost: r\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n");
  const std::string first = ReadUntil(fd, "ok");
  EXPECT_EQ(first.rfind("HTTP/1.1 200 OK", 0), 0u) << first;
  close(fd);
  // Another client's request, on the router's kept connection to the replica.
  const int other = OpenLoopback(port, 5);
  Send(other, "GET /svc/y HTTP/1.1\r\nHost: r\r\n\r\n");
  const std::string second = ReadUntil(other, "\r\n\r\n");
  EXPECT_EQ(second.rfind("HTTP/1.1 200 OK", 0), 0u) << second;
  close(other);
  EXPECT_EQ(chunked.load(), 0);
  EXPECT_EQ(lengths.load(), 1);
  router->Stop();
}

// A replica's /metrics (and readiness) answer is read up to 4 MiB and
// within the probe's timeout, whatever the replica sends: an endless body
// with a huge Content-Length whose first bytes come with the header (Boost
// 1.74's eager read dropped the limit's error for it, and the control plane
// grew ~15 MB/s), and a body that trickles in both end the read; a small
// answer is read.
TEST(Router, AReplicasMetricsAreReadOnlyUpToTheirLimitAndTimeout) {
  std::atomic<int64_t> flooded{0};   // bytes the endless answers got written
  std::atomic<int> trickles_ended{0};
  std::atomic<int> mode{0};          // 0: flood, 1: trickle, 2: a small answer
  FakeReplica replica([&](int fd, const std::string& head) {
    if (head.rfind("GET /metrics", 0) != 0) return false;
    if (mode == 2) {
      const std::string ok = "HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nq 7\n";
      return write(fd, ok.data(), ok.size()) >= 0;
    }
    if (mode == 1) {
      const std::string h = "HTTP/1.1 200 OK\r\nContent-Length: 3000000\r\n\r\n";
      if (write(fd, h.data(), h.size()) < 0) return false;
      for (int i = 0; i < 3000; ++i) {  // 1 byte each 10 ms: 30 s
        if (write(fd, "q", 1) < 0) break;
        usleep(10 * 1000);
      }
      ++trickles_ended;
      return false;
    }
    std::string chunk(64 << 10, 'x');
    const std::string first = "HTTP/1.1 200 OK\r\nContent-Length: 1099511627776\r\n\r\n" + chunk;
    if (write(fd, first.data(), first.size()) < 0) return false;
    flooded += static_cast<int64_t>(first.size());
    while (flooded < (1LL << 30)) {
      const ssize_t n = write(fd, chunk.data(), chunk.size());
      if (n <= 0) break;
      flooded += n;
    }
    return false;
  });
  signal(SIGPIPE, SIG_IGN);
  auto router = std::make_unique<Router>(RouterOptions{});
  auto started = router->Start();
  ASSERT_TRUE(started.ok()) << started.status().ToString();
  RouterService svc{.name = "svc", .job = JobId(1)};
  svc.readiness.path = "/ready";
  svc.readiness.period = 200'000;
  svc.readiness.timeout = 500'000;
  svc.metrics = {"q"};
  svc.backends.push_back({JobId(1), 0, 0, 0, "127.0.0.1", replica.port()});
  router->Update({svc});
  std::this_thread::sleep_for(std::chrono::seconds(2));
  EXPECT_LT(flooded.load(), 64LL << 20) << "the router read on past its limit";
  mode = 1;
  std::this_thread::sleep_for(std::chrono::seconds(3));
  EXPECT_GE(trickles_ended.load(), 1) << "a trickling answer held the read past its timeout";
  mode = 2;
  double q = -1;
  for (int i = 0; i < 100 && q != 7; ++i) {
    usleep(50 * 1000);
    const auto stats = router->TakeStats();
    if (auto it = stats.find("svc"); it != stats.end() && it->second.metrics.count("q")) q = it->second.metrics.at("q");
  }
  EXPECT_EQ(q, 7);
  router->Stop();
}

// A token stream (server-sent events, chunked) is passed on as the replica
// writes it: the client has the first event while the replica still holds
// the second, which it sends only once the client saw the first. A
// buffering router would hold the first until the answer ended: the read
// would time out.
// A client that hangs up while its request waits on the replica: the
// router closes the replica's connection (an inference server stops
// generating for no one) instead of waiting out its answer; one that hangs
// up while queued for a ready replica leaves the queue at once. Neither is
// counted as answered or failed, both as abandoned.
// A request Beast will not write (a TRACE with a body) is refused with 400
// before it counts in flight: thrown out after it was counted, it was never
// finished, and each one held the service's load up for good (an
// unauthenticated client could pin a service's autoscaler at its max).
TEST(Router, ARequestItCannotForwardIsRefusedAndNotLeftInFlight) {
  FakeReplica replica([&](int fd, const std::string&) {
    const std::string ok = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";
    return write(fd, ok.data(), ok.size()) >= 0;
  });
  int port = 0;
  auto router = RouterFor(replica, &port);
  for (int i = 0; i < 3; ++i) {
    const int fd = OpenLoopback(port, 5);
    Send(fd, "TRACE /svc/ HTTP/1.1\r\nHost: r\r\nContent-Length: 1\r\n\r\nx");
    char buf[512] = {};
    ASSERT_GT(read(fd, buf, sizeof buf - 1), 0);
    EXPECT_EQ(std::string(buf).rfind("HTTP/1.1 400", 0), 0u) << buf;
    close(fd);
  }
  usleep(100 * 1000);
  EXPECT_EQ(router->TakeStats().at("svc").inflight, 0);
  // And the service still answers.
  const int fd = OpenLoopback(port, 5);
  Send(fd, "GET /svc/x HTTP/1.1\r\nHost: r\r\n\r\n");
  char buf[512] = {};
  ASSERT_GT(read(fd, buf, sizeof buf - 1), 0);
  EXPECT_EQ(std::string(buf).rfind("HTTP/1.1 200", 0), 0u) << buf;
  close(fd);
}

TEST(Router, AClientThatHangsUpEndsItsRequestAtTheReplica) {
  std::atomic<int64_t> closed_after_ms{-1};
  FakeReplica replica([&](int fd, const std::string& head) {
    if (head.find("/models") != std::string::npos) {
      const std::string ok = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";
      return write(fd, ok.data(), ok.size()) >= 0;
    }
    // A slow answer (a long generation): 5 s, unless the router hangs up.
    const auto began = std::chrono::steady_clock::now();
    for (int i = 0; i < 500; ++i) {
      pollfd p{fd, POLLIN, 0};
      if (poll(&p, 1, 10) == 1) {
        char c;
        if (read(fd, &c, 1) <= 0) {
          closed_after_ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - began).count();
          return false;
        }
      }
    }
    const std::string ok = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";
    return write(fd, ok.data(), ok.size()) >= 0;
  });
  int port = 0;
  auto router = RouterFor(replica, &port);
  int fd = OpenLoopback(port, 3);
  Send(fd, "POST /svc/v1/completions HTTP/1.1\r\nHost: r\r\nContent-Length: 2\r\n\r\n{}");
  usleep(300 * 1000);
  EXPECT_EQ(router->TakeStats().at("svc").inflight, 1);
  close(fd);
  for (int i = 0; i < 300 && closed_after_ms < 0; ++i) usleep(10 * 1000);
  EXPECT_GE(closed_after_ms, 0) << "the replica's request was not closed when its client hung up";
  EXPECT_LT(closed_after_ms, 2000);
  RouterStats st = router->TakeStats().at("svc");
  for (int i = 0; i < 100 && st.inflight != 0; ++i) {
    usleep(10 * 1000);
    st = router->TakeStats().at("svc");
  }
  EXPECT_EQ(st.inflight, 0);
  EXPECT_EQ(st.abandoned, 1u);
  EXPECT_EQ(st.requests, 0u);
  EXPECT_EQ(st.failed, 0u);
  // The replica is not taken for failed: the next request is answered.
  closed_after_ms = -1;
  fd = OpenLoopback(port, 8);
  Send(fd, "GET /svc/v1/models HTTP/1.1\r\nHost: r\r\n\r\n");
  EXPECT_NE(ReadUntil(fd, "ok").find("200 OK"), std::string::npos);
  close(fd);
  router->Stop();

  // Queued: a service none of whose replicas is ready.
  Router queued{RouterOptions{}};
  auto started = queued.Start();
  ASSERT_TRUE(started.ok());
  RouterService svc{.name = "down", .job = JobId(2)};
  svc.readiness.path = "/ready";
  svc.backends.push_back({JobId(2), 0, 0, 0, "127.0.0.1", 1});  // (nothing listens on port 1)
  queued.Update({svc});
  fd = OpenLoopback(*started, 3);
  Send(fd, "GET /down/x HTTP/1.1\r\nHost: r\r\n\r\n");
  for (int i = 0; i < 100 && queued.TakeStats().at("down").queued == 0; ++i) usleep(10 * 1000);
  EXPECT_EQ(queued.TakeStats().at("down").queued, 1);
  close(fd);
  RouterStats q = queued.TakeStats().at("down");
  for (int i = 0; i < 100 && q.queued != 0; ++i) {
    usleep(10 * 1000);
    q = queued.TakeStats().at("down");
  }
  EXPECT_EQ(q.queued, 0) << "a hung-up client stayed queued";
  EXPECT_EQ(q.abandoned, 1u);
  queued.Stop();
}

// A client that begins a header and sends it a byte at a time holds its
// connection for the header timeout, not the idle one; a connection that
// idles between requests is kept for the idle timeout.
TEST(Router, AHalfSentHeaderIsDroppedAfterTheHeaderTimeout) {
  Router router{RouterOptions{.idle_timeout = 3 * kMicrosPerSecond, .header_timeout = 500'000}};
  auto port = router.Start();
  ASSERT_TRUE(port.ok());
  const int idle = OpenLoopback(*port, 5);
  const int slow = OpenLoopback(*port, 5);
  Send(slow, "GET /svc/x HTTP/1.1\r\nHo");
  const auto began = std::chrono::steady_clock::now();
  char c;
  EXPECT_EQ(read(slow, &c, 1), 0);  // closed by the router
  const auto held = std::chrono::steady_clock::now() - began;
  EXPECT_LT(held, std::chrono::milliseconds(2000));
  EXPECT_GE(held, std::chrono::milliseconds(400));
  // The idle one is still open (a request on it is answered), past the header timeout.
  usleep(700 * 1000);
  Send(idle, "GET /none/x HTTP/1.1\r\nHost: r\r\n\r\n");
  EXPECT_NE(ReadUntil(idle, "no service").find("404"), std::string::npos);
  close(slow);
  close(idle);
  router.Stop();
}

TEST(Router, StreamsAnAnswerAsTheReplicaWritesIt) {
  std::atomic<bool> client_saw_first{false};
  FakeReplica replica([&](int fd, const std::string&) {
    const std::string head =
        "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n";
    const std::string first = "data: one\n\n";
    std::string out = head;
    char size[16];
    std::snprintf(size, sizeof size, "%zx\r\n", first.size());
    out += size + first + "\r\n";
    if (write(fd, out.data(), out.size()) < 0) return false;
    for (int i = 0; i < 500 && !client_saw_first; ++i) usleep(10 * 1000);
    const std::string second = "data: two\n\n";
    std::snprintf(size, sizeof size, "%zx\r\n", second.size());
    out = size + second + "\r\n0\r\n\r\n";
    return write(fd, out.data(), out.size()) >= 0;
  });
  int port = 0;
  auto router = RouterFor(replica, &port);
  const int fd = OpenLoopback(port, 3);
  Send(fd, "GET /svc/v1/completions HTTP/1.1\r\nHost: r\r\n\r\n");
  const std::string first = ReadUntil(fd, "data: one");
  ASSERT_NE(first.find("data: one"), std::string::npos) << "the first event did not come before the answer ended: "
                                                         << first;
  EXPECT_EQ(first.rfind("HTTP/1.1 200 OK", 0), 0u) << first;
  EXPECT_EQ(first.find("data: two"), std::string::npos);
  client_saw_first = true;
  const std::string rest = ReadUntil(fd, "0\r\n\r\n");
  EXPECT_NE(rest.find("data: two"), std::string::npos) << rest;
  // Ended once: the last chunk, and nothing after it.
  EXPECT_EQ(rest.size(), rest.find("\r\n0\r\n\r\n") + 7) << rest;
  // The connection stays open for the next request, on the same replica
  // connection (the stream ended cleanly), and its answer starts clean.
  client_saw_first = true;
  Send(fd, "GET /svc/v1/completions HTTP/1.1\r\nHost: r\r\n\r\n");
  const std::string again = ReadUntil(fd, "0\r\n\r\n");
  EXPECT_EQ(again.rfind("HTTP/1.1 200 OK", 0), 0u) << again;
  EXPECT_NE(again.find("data: two"), std::string::npos);
  close(fd);
  RouterStats st = router->TakeStats().at("svc");
  for (int i = 0; i < 100 && st.inflight != 0; ++i) {  // (the client may read the end before the router counts it)
    usleep(10 * 1000);
    st = router->TakeStats().at("svc");
  }
  EXPECT_EQ(st.requests, 2u);
  EXPECT_EQ(st.failed, 0u);
  EXPECT_EQ(st.inflight, 0);
  router->Stop();
}

// A replica that dies in the middle of its answer: the client's connection
// is closed (an answer cut short is not passed off as whole), the request
// counts as failed, and the replica is out of the router until a probe
// succeeds again. An answer that ends with the replica's connection (no
// length, not chunked) goes to an HTTP/1.1 client chunked, and its
// connection stays open; an HTTP/1.0 client reads it to the close.
TEST(Router, AnAnswerCutShortClosesTheClientAndOneEndedByCloseIsChunked) {
  FakeReplica replica([&](int fd, const std::string& head) {
    if (head.find("/cut") != std::string::npos) {
      const std::string part = "HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nonly this much";
      (void)!write(fd, part.data(), part.size());
      return false;  // (closed 86 bytes short)
    }
    const std::string all = "HTTP/1.1 200 OK\r\nConnection: close\r\n\r\nuntil the end";
    (void)!write(fd, all.data(), all.size());
    return false;
  });
  int port = 0;
  auto router = RouterFor(replica, &port, kMicrosPerSecond);  // (no probe puts it back before it is looked at)
  int fd = OpenLoopback(port, 3);
  Send(fd, "GET /svc/cut HTTP/1.1\r\nHost: r\r\n\r\n");
  std::string got = ReadUntil(fd, "never");
  EXPECT_NE(got.find("only this much"), std::string::npos) << got;
  EXPECT_NE(got.find("Content-Length: 100"), std::string::npos) << got;  // (the client sees it is short)
  close(fd);
  RouterStats st = router->TakeStats().at("svc");
  EXPECT_EQ(st.failed, 1u);
  EXPECT_EQ(st.ready, 0);  // out until a probe succeeds
  for (int i = 0; i < 200 && !router->Endpoints("svc")[0].ready; ++i) usleep(20 * 1000);
  fd = OpenLoopback(port, 3);
  Send(fd, "GET /svc/closed HTTP/1.1\r\nHost: r\r\n\r\n");
  got = ReadUntil(fd, "0\r\n\r\n");
  EXPECT_NE(got.find("Transfer-Encoding: chunked"), std::string::npos) << got;
  EXPECT_NE(got.find("until the end"), std::string::npos) << got;
  Send(fd, "GET /svc/closed HTTP/1.1\r\nHost: r\r\n\r\n");  // the same connection
  EXPECT_NE(ReadUntil(fd, "0\r\n\r\n").find("until the end"), std::string::npos);
  close(fd);
  fd = OpenLoopback(port, 3);
  Send(fd, "GET /svc/closed HTTP/1.0\r\nHost: r\r\n\r\n");
  got = ReadUntil(fd, "never");  // (to the close)
  EXPECT_EQ(got.rfind("HTTP/1.0 200 OK", 0), 0u) << got;
  EXPECT_EQ(got.find("chunked"), std::string::npos) << got;
  EXPECT_NE(got.find("\r\n\r\nuntil the end"), std::string::npos) << got;
  close(fd);
  router->Stop();
}

// An answer to HEAD that says it is chunked is its header alone (no end
// chunk follows it to the client), and an interim answer (103 Early Hints)
// is not taken for the answer: the client's next request on the connection
// reads its own answer, from its first byte.
TEST(Router, HeaderOnlyAndInterimAnswersLeaveTheConnectionClean) {
  FakeReplica replica([&](int fd, const std::string& head) {
    std::string out;
    if (head.rfind("HEAD", 0) == 0) {
      out = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n";
    } else {
      out = "HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload\r\n\r\n"
            "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";
    }
    return write(fd, out.data(), out.size()) >= 0;
  });
  int port = 0;
  auto router = RouterFor(replica, &port);
  const int fd = OpenLoopback(port, 3);
  Send(fd, "HEAD /svc/x HTTP/1.1\r\nHost: r\r\n\r\n");
  const std::string headed = ReadUntil(fd, "\r\n\r\n");
  EXPECT_EQ(headed.rfind("HTTP/1.1 200 OK", 0), 0u) << headed;
  EXPECT_EQ(headed.size(), headed.find("\r\n\r\n") + 4) << headed;  // nothing after the header
  Send(fd, "GET /svc/x HTTP/1.1\r\nHost: r\r\n\r\n");
  const std::string got = ReadUntil(fd, "ok");
  EXPECT_EQ(got.rfind("HTTP/1.1 200 OK", 0), 0u) << got;
  EXPECT_EQ(got.find("103"), std::string::npos) << got;
  EXPECT_NE(got.find("ok"), std::string::npos) << got;
  close(fd);
  router->Stop();
}

// Hop-by-hop fields are about one connection, not forwarded (RFC 9110
// 7.6.1): those a client's Connection names, Keep-Alive, Proxy-Connection,
// TE and its proxy credentials do not reach the replica, nor a replica's
// Keep-Alive the client; a client cannot name the router's own fields
// (X-Forwarded-For) away. Before, all of them went through.
TEST(Router, HopByHopFieldsAreNotForwarded) {
  std::mutex mu;
  std::string seen;
  FakeReplica replica([&](int fd, const std::string& head) {
    if (head.rfind("GET /x", 0) == 0) {
      std::lock_guard<std::mutex> lock(mu);
      seen = head;
    }
    const std::string out = "HTTP/1.1 200 OK\r\nContent-Length: 2\r\nKeep-Alive: timeout=1\r\nX-Replica: 1\r\n\r\nok";
    return write(fd, out.data(), out.size()) >= 0;
  });
  int port = 0;
  auto router = RouterFor(replica, &port);
  const int fd = OpenLoopback(port, 5);
  Send(fd, "GET /svc/x HTTP/1.1\r\nHost: r\r\nConnection: keep-alive, X-Private, X-Forwarded-For\r\n"
           "X-Private: secret\r\nKeep-Alive: timeout=9\r\nProxy-Connection: keep-alive\r\nTE: trailers\r\n"
           "Proxy-Authorization: Basic dXNlcjpwYXNz\r\nX-Kept: yes\r\n\r\n");
  const std::string got = ReadUntil(fd, "ok");
  EXPECT_EQ(got.rfind("HTTP/1.1 200 OK", 0), 0u) << got;
  EXPECT_NE(got.find("X-Replica: 1"), std::string::npos) << got;
  EXPECT_EQ(got.find("Keep-Alive: timeout=1"), std::string::npos) << got;
  close(fd);
  router->Stop();
  std::lock_guard<std::mutex> lock(mu);
  std::string lower = seen;
  for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  EXPECT_NE(lower.find("x-kept: yes"), std::string::npos) << seen;
  EXPECT_NE(lower.find("x-forwarded-for: 127.0.0.1"), std::string::npos) << seen;
  for (const char* gone : {"x-private", "keep-alive: timeout", "proxy-connection", "te: trailers", "proxy-authorization"}) {
    EXPECT_EQ(lower.find(gone), std::string::npos) << gone << " reached the replica:\n" << seen;
  }
}

}  // namespace
}  // namespace rota::server
