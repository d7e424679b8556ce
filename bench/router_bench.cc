// The services' router's added latency on loopback, beside its baseline in
// the same run: an open-loop load at a fixed rate (default 2,000 requests/s
// from 16 keep-alive clients, each request at its scheduled time) for a few
// seconds, first straight to a replica (an HTTP server in this process
// answering at once), then through server::Router to the same replica.
// The two alternate in 1 s rounds (seconds of each). Reported: p50/p99/max
// latency of each over all rounds, and the router's added p50/p99 (its
// quantile minus the direct one), over all and as the median of the
// rounds'. Target: added p99 <= 1 ms at 2,000/s.
//
// usage: router_bench [--rate 2000] [--seconds 9] [--clients 16]
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <httplib.h>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "server/router.h"

namespace rota {
namespace {

using Clock = std::chrono::steady_clock;

struct Result {
  std::vector<double> ms;
  int failed = 0;
  double Quantile(double q) const {
    if (ms.empty()) return 0;
    std::vector<double> s = ms;
    std::sort(s.begin(), s.end());
    return s[std::min(s.size() - 1, static_cast<size_t>(q * static_cast<double>(s.size())))];
  }
};

// `clients` connections, each sending at rate/clients per second on its own
// schedule (open loop: a late answer does not delay the next send's time;
// latency is counted from the scheduled time, so queueing shows).
using Clients = std::vector<std::unique_ptr<httplib::Client>>;

Clients Connect(int port, int n) {
  Clients out;
  for (int i = 0; i < n; ++i) {
    out.push_back(std::make_unique<httplib::Client>("127.0.0.1", port));
    out.back()->set_keep_alive(true);
    out.back()->set_tcp_nodelay(true);
    out.back()->set_read_timeout(10, 0);
  }
  return out;
}

// (The same connections for every round: a replica's thread-per-connection
// server would otherwise hold workers on the last round's idle ones.)
Result Load(Clients& pool, const std::string& path, double rate, double seconds) {
  const int clients = static_cast<int>(pool.size());
  Result all;
  std::mutex mu;
  std::vector<std::thread> threads;
  const auto start = Clock::now() + std::chrono::milliseconds(50);
  const double interval = clients / rate;  // seconds between one client's sends
  for (int c = 0; c < clients; ++c) {
    threads.emplace_back([&, c] {
      httplib::Client& client = *pool[c];
      Result mine;
      const int n = static_cast<int>(seconds / interval);
      for (int i = 0; i < n; ++i) {
        const auto at = start + std::chrono::duration_cast<Clock::duration>(
                                    std::chrono::duration<double>(interval * (i + static_cast<double>(c) / clients)));
        std::this_thread::sleep_until(at);
        auto r = client.Get(path);
        if (!r || r->status != 200) {
          ++mine.failed;
          continue;
        }
        mine.ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - at).count());
      }
      std::lock_guard<std::mutex> lock(mu);
      all.ms.insert(all.ms.end(), mine.ms.begin(), mine.ms.end());
      all.failed += mine.failed;
    });
  }
  for (auto& t : threads) t.join();
  return all;
}

void Print(const char* name, const Result& r, double seconds) {
  std::printf("%-8s %7zu ok %4d failed  %7.0f/s  p50 %6.3f ms  p99 %6.3f ms  max %7.3f ms\n", name, r.ms.size(),
              r.failed, static_cast<double>(r.ms.size()) / seconds, r.Quantile(0.5), r.Quantile(0.99),
              r.ms.empty() ? 0 : *std::max_element(r.ms.begin(), r.ms.end()));
}

int Main(int argc, char** argv) {
  double rate = 2000, seconds = 9;
  int clients = 16;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!std::strcmp(argv[i], "--rate")) rate = std::atof(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--seconds")) seconds = std::atof(argv[i + 1]);
    else if (!std::strcmp(argv[i], "--clients")) clients = std::atoi(argv[i + 1]);
  }
  // The replica: answers at once.
  httplib::Server replica;
  replica.set_tcp_nodelay(true);
  replica.set_keep_alive_max_count(1'000'000);
  // A worker per connection (httplib): enough for both pools of clients and the router's.
  replica.new_task_queue = [clients] { return new httplib::ThreadPool(4 * clients + 64); };
  replica.Get(R"(/.*)", [](const httplib::Request&, httplib::Response& res) { res.set_content("ok\n", "text/plain"); });
  const int replica_port = replica.bind_to_any_port("127.0.0.1");
  std::thread serving([&] { replica.listen_after_bind(); });

  server::Router router({});
  auto port = router.Start();
  if (!port.ok()) {
    std::fprintf(stderr, "router: %s\n", std::string(port.status().message()).c_str());
    return 1;
  }
  ProbeSpec probe;
  probe.period = 100'000;
  router.Update({{"bench", JobId(1), probe, {{JobId(1), 0, 0, 0, "127.0.0.1", replica_port}}}});
  for (int i = 0; i < 100 && router.Endpoints("bench").empty(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  for (int i = 0; i < 100 && !router.Endpoints("bench")[0].ready; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));

  std::printf("router_bench: %.0f requests/s for %.0f s from %d keep-alive clients, open loop, on loopback\n", rate,
              seconds, clients);
  Clients to_replica = Connect(replica_port, clients), to_router = Connect(*port, clients);
  Load(to_replica, "/warm", rate, 0.5);  // warm-up (connections, threads)
  Load(to_router, "/bench/warm", rate, 0.5);
  // Rounds of 1 s each way, interleaved, so that the machine's own drift
  // (other processes, a 2-core VM's steal) falls on both alike; each
  // round's quantiles, and their medians.
  Result direct, routed;
  std::vector<double> direct_p99, routed_p99, added_p99, added_p50;
  for (int round = 0; round < static_cast<int>(seconds); ++round) {
    const Result d = Load(to_replica, "/x", rate, 1);
    const Result r = Load(to_router, "/bench/x", rate, 1);
    direct_p99.push_back(d.Quantile(0.99));
    routed_p99.push_back(r.Quantile(0.99));
    added_p99.push_back(r.Quantile(0.99) - d.Quantile(0.99));
    added_p50.push_back(r.Quantile(0.5) - d.Quantile(0.5));
    direct.ms.insert(direct.ms.end(), d.ms.begin(), d.ms.end());
    direct.failed += d.failed;
    routed.ms.insert(routed.ms.end(), r.ms.begin(), r.ms.end());
    routed.failed += r.failed;
  }
  auto median = [](std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v.empty() ? 0 : v[v.size() / 2];
  };
  Print("direct", direct, seconds);
  Print("router", routed, seconds);
  std::printf("added (all requests)  p50 %.3f ms  p99 %.3f ms\n", routed.Quantile(0.5) - direct.Quantile(0.5),
              routed.Quantile(0.99) - direct.Quantile(0.99));
  std::printf("per round (median of %zu)  direct p99 %.3f ms  router p99 %.3f ms  added p50 %.3f ms  added p99 %.3f ms"
              "  (target: added p99 <= 1 ms at 2000/s)\n",
              added_p99.size(), median(direct_p99), median(routed_p99), median(added_p50), median(added_p99));
  to_replica.clear();
  to_router.clear();
  router.Stop();
  replica.stop();
  serving.join();
  return direct.failed + routed.failed == 0 ? 0 : 1;
}

}  // namespace
}  // namespace rota

int main(int argc, char** argv) { return rota::Main(argc, argv); }
