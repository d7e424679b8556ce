// Control-plane benchmarks on this machine, each beside its baseline:
//
//   submit:   sustained durable submissions/s through the real HTTP API and
//             SQLite journal (group commit), from 16 keep-alive clients for 5 s.
//             Baseline: the same server committing each submission in its own
//             transaction (no group commit). Also shown: the store alone, one
//             fsync'd transaction per submission, no HTTP (a ceiling, not a rival).
//   recovery: time for Controller::Start to recover 100k jobs after kill -9
//             (latest journal snapshot + the events after it, as the server
//             leaves them). Baseline: replaying the same history without a
//             snapshot.
//
// With --postgres, the same on PostgreSQL (a server this benchmark starts
// with initdb + pg_ctl in a temporary directory), beside SQLite in the same
// run: submissions/s through HTTP on PgStore, and a standby's takeover of
// the 100k-job history: the tail it has not followed yet plus the
// controller's start from its warm state, against a cold replay from the
// database.
//
// usage: server_bench [--jobs 100000] [--seconds 5] [--clients 16] [--postgres]
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <httplib.h>
#include <string>
#include <thread>
#include <unistd.h>
#include <vector>

#include "server/http_api.h"
#include "store/pg_store.h"
#include "store/pg_test_server.h"
#include "store/sqlite_store.h"

namespace rota {
namespace {

double Since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

ClusterConfig Cluster() {
  ClusterConfig c;
  c.node_groups.push_back({.name = "n", .count = 64, .gpus = 8, .gpu_model = "H100", .cpu = 64000,
                           .memory = 512 * 1024, .nodes_per_rack = 8});
  return c;
}

JobSpec Job(int i) {
  JobSpec s;
  s.name = "job-" + std::to_string(i);
  s.tasks.push_back({.name = "w", .replicas = 1, .gpus = 1, .cpu = 1000, .memory = 1024, .command = {"true"}});
  return s;
}

struct SubmitResult {
  double per_second = 0;
  int64_t total = 0;
};

SubmitResult BenchSubmit(std::unique_ptr<Store> store, double seconds, int clients, size_t max_batch) {
  SystemClock clock;
  server::ControllerOptions o{.config = Cluster(), .clock = &clock, .max_batch = max_batch};
  server::Controller c(o, std::move(store));
  if (!c.Start().ok()) return {};
  const std::string token = *c.BootstrapAdminToken();
  auto http = std::move(server::StartHttpServer(&c, {.port = 0, .rate_per_second = 0})).value();
  std::atomic<int64_t> done{0};
  std::atomic<bool> stop{false};
  std::vector<std::thread> threads;
  const auto t0 = std::chrono::steady_clock::now();
  for (int t = 0; t < clients; ++t) {
    threads.emplace_back([&, t] {
      httplib::Client cl("127.0.0.1", http->port());
      cl.set_bearer_token_auth(token);
      cl.set_keep_alive(true);
      cl.set_tcp_nodelay(true);
      for (int i = 0; !stop; ++i) {
        const std::string body = "name: c" + std::to_string(t) + "-" + std::to_string(i) +
                                 "\ntasks: [{gpus: 1, command: [\"true\"]}]\n";
        auto r = cl.Post("/v1/jobs", body, "application/yaml");
        if (r && r->status == 201) done++;
      }
    });
  }
  std::this_thread::sleep_for(std::chrono::duration<double>(seconds));
  stop = true;
  for (auto& t : threads) t.join();
  const double elapsed = Since(t0);
  http->Stop();
  c.Stop();
  return {static_cast<double>(done) / elapsed, done};
}

double BaselineSubmit(const std::string& dir, double seconds) {
  auto store = std::move(SqliteStore::Open(dir + "/base.db")).value();
  const auto t0 = std::chrono::steady_clock::now();
  int64_t n = 0;
  while (Since(t0) < seconds) {
    if (!store->Append({JobSubmitted{JobId(n + 1), Job(static_cast<int>(n)), 0, "admin"}}).ok()) break;
    ++n;
  }
  return static_cast<double>(n) / Since(t0);
}

SubmitResult BenchSubmit(const std::string& dir, double seconds, int clients, size_t max_batch) {
  return BenchSubmit(std::move(SqliteStore::Open(dir + "/rota-" + std::to_string(max_batch) + ".db")).value(), seconds,
                     clients, max_batch);
}

// Writes the history of `jobs` submissions (every 20th bound and finished)
// the way the server does: a snapshot every 10,000 events if `snapshots`.
void WriteHistory(std::unique_ptr<Store> store, int jobs, bool snapshots) {
  ClusterState state(Cluster().topology);
  std::vector<Event> batch;
  const std::vector<NodeSpec> nodes = std::move(ExpandNodes(Cluster())).value();
  for (const NodeSpec& n : nodes) batch.push_back(NodeAdded{n});
  uint64_t last_snapshot = 0;
  auto flush = [&] {
    for (const Event& e : batch) (void)state.Apply(e).ok();
    const uint64_t seq = *store->Append(batch);
    batch.clear();
    if (snapshots && seq - last_snapshot >= 10'000) {
      (void)store->WriteSnapshot(seq, [&](const EventSink& sink) { return CompactState(state.GetSnapshot(), sink); }).ok();
      last_snapshot = seq;
    }
  };
  flush();
  for (int i = 1; i <= jobs; ++i) {
    batch.push_back(JobSubmitted{JobId(i), Job(i), i, "admin"});
    if (i % 20 == 0) {
      batch.push_back(JobBound{JobId(i), {{0, 0, NodeId(static_cast<uint32_t>(i / 20 % 64)), 1}}, i});
      batch.push_back(JobFinished{JobId(i), JobOutcome::kSucceeded, i});
    }
    if (batch.size() >= 1000) flush();
  }
  flush();
}

void WriteHistory(const std::string& path, int jobs, bool snapshots) {
  WriteHistory(std::move(SqliteStore::Open(path)).value(), jobs, snapshots);
}

double BenchRecovery(std::unique_ptr<Store> store, int jobs) {
  SystemClock clock;
  server::ControllerOptions o{.config = Cluster(), .clock = &clock};
  const auto t0 = std::chrono::steady_clock::now();
  server::Controller c(o, std::move(store));
  if (!c.Start().ok()) return -1;
  const double seconds = Since(t0);
  const size_t recovered = c.snapshot().jobs().size();
  if (recovered != static_cast<size_t>(jobs)) std::printf("RECOVERY MISMATCH: %zu of %d jobs\n", recovered, jobs);
  c.Stop();
  return seconds;
}

double BenchRecovery(const std::string& path, int jobs) {
  return BenchRecovery(std::move(SqliteStore::Open(path)).value(), jobs);
}

// A standby's takeover, through the path a replica takes: its controller
// followed the 100k-job history (StartFollowing), then the leader appended
// 1,000 more submissions it has not seen, then the leader went. Timed: the
// tail (CatchUp) and the start of the same controller (Start).
double BenchTakeover(const std::string& conninfo, int jobs) {
  SystemClock clock;
  server::ControllerOptions o{.config = Cluster(), .clock = &clock};
  server::Controller c(o, std::move(PgStore::Open(conninfo)).value());
  if (!c.StartFollowing().ok()) return -1;
  {
    auto leader = std::move(PgStore::Open(conninfo)).value();
    std::vector<Event> more;
    for (int i = 1; i <= 1000; ++i) more.push_back(JobSubmitted{JobId(jobs + i), Job(jobs + i), 0, "admin"});
    if (!leader->Append(more).ok()) return -1;
  }
  const auto t0 = std::chrono::steady_clock::now();
  if (Status s = c.CatchUp(); !s.ok()) return -1;
  if (Status s = c.Start(); !s.ok()) {
    std::printf("TAKEOVER FAILED: %s\n", s.ToString().c_str());
    return -1;
  }
  const double seconds = Since(t0);
  const size_t recovered = c.snapshot().jobs().size();
  if (recovered != static_cast<size_t>(jobs + 1000)) {
    std::printf("TAKEOVER MISMATCH: %zu of %d jobs\n", recovered, jobs + 1000);
  }
  c.Stop();
  return seconds;
}

}  // namespace
}  // namespace rota

int main(int argc, char** argv) {
  int jobs = 100'000, clients = 16;
  double seconds = 5;
  bool postgres = false;
  for (int i = 1; i < argc; ++i) {
    if (std::string(argv[i]) == "--postgres") postgres = true;
  }
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--postgres") {
      --i;
      continue;
    }
    if (a == "--jobs") jobs = std::atoi(argv[i + 1]);
    else if (a == "--seconds") seconds = std::atof(argv[i + 1]);
    else if (a == "--clients") clients = std::atoi(argv[i + 1]);
  }
  char tmpl[] = "/tmp/rota-server-bench-XXXXXX";
  const std::string dir = mkdtemp(tmpl);
  std::printf("server_bench on %u cores, data in %s\n", std::thread::hardware_concurrency(), dir.c_str());

  const double store_only = rota::BaselineSubmit(dir, seconds);
  const auto submit = rota::BenchSubmit(dir, seconds, clients, 0);
  const auto single = rota::BenchSubmit(dir, seconds, clients, 1);
  std::printf("%-34s %12.0f /s   (%lld in %.0f s, %d clients)\n", "submit: rota HTTP + group commit", submit.per_second,
              static_cast<long long>(submit.total), seconds, clients);
  std::printf("%-34s %12.0f /s\n", "baseline: one transaction each", single.per_second);
  std::printf("%-34s %12.1fx\n", "ratio", submit.per_second / single.per_second);
  std::printf("%-34s %12.0f /s\n", "store alone, no HTTP (ceiling)", store_only);

  rota::WriteHistory(dir + "/snap.db", jobs, true);
  rota::WriteHistory(dir + "/full.db", jobs, false);
  const double snap = rota::BenchRecovery(dir + "/snap.db", jobs);
  const double full = rota::BenchRecovery(dir + "/full.db", jobs);
  std::printf("%-34s %12.3f s   (%d jobs)\n", "recovery: snapshot + journal tail", snap, jobs);
  std::printf("%-34s %12.3f s\n", "baseline: replay the whole journal", full);
  std::printf("%-34s %12.1fx\n", "ratio", full / snap);

  if (postgres) {
    std::string error;
    auto pg = rota::TestPostgres::Start(&error);
    if (!pg) {
      std::printf("postgres: %s\n", error.c_str());
      return 1;
    }
    const auto on_pg = rota::BenchSubmit(std::move(rota::PgStore::Open(pg->CreateDatabase("submit"))).value(), seconds,
                                         clients, 0);
    std::printf("%-34s %12.0f /s   (%lld in %.0f s, %d clients)\n", "submit: rota HTTP on PostgreSQL",
                on_pg.per_second, static_cast<long long>(on_pg.total), seconds, clients);
    std::printf("%-34s %12.2fx\n", "ratio to SQLite (same run)", on_pg.per_second / submit.per_second);
    const std::string history = pg->CreateDatabase("history");
    rota::WriteHistory(std::move(rota::PgStore::Open(history)).value(), jobs, true);
    const double cold = rota::BenchRecovery(std::move(rota::PgStore::Open(history)).value(), jobs);
    const double takeover = rota::BenchTakeover(history, jobs);
    std::printf("%-34s %12.3f s   (%d jobs)\n", "takeover: warm standby + tail", takeover, jobs);
    std::printf("%-34s %12.3f s\n", "baseline: cold replay from PG", cold);
    std::printf("%-34s %12.1fx\n", "ratio", cold / takeover);
  }
  std::filesystem::remove_all(dir);
  return 0;
}
