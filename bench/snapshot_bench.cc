// What a journal snapshot of a large store costs in memory: a state of N
// ended jobs (default 1,000,000: a busy month) written to a SQLite store the
// way the server writes it (events streamed into parts of about 1 MiB),
// beside the baseline of materializing the compacted events and their
// encoding whole (how snapshots were written before parts). Each figure is
// the rise of the process's peak RSS (VmHWM, reset between phases through
// /proc/self/clear_refs) over its RSS before. Also: the time of each, the
// snapshot's size, and the time to read it back (Store::Replay).
//
// usage: snapshot_bench [--jobs 1000000]
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "core/cluster_config.h"
#include "core/cluster_state.h"
#include "store/records.h"
#include "store/sqlite_store.h"

namespace rota {
namespace {

double Since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// kB from /proc/self/status.
int64_t ProcKb(const char* field) {
  std::ifstream f("/proc/self/status");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind(field, 0) == 0) return std::stoll(line.substr(std::string(field).size()));
  }
  return -1;
}

bool ResetPeak() {
  std::ofstream f("/proc/self/clear_refs");
  f << "5";
  f.flush();
  return static_cast<bool>(f);
}

JobSpec Job(int i) {
  JobSpec s;
  s.name = "train-" + std::to_string(i);
  s.tasks.push_back({.name = "worker", .replicas = 1, .gpus = 1, .cpu = 4000, .memory = 16 * 1024,
                     .command = {"python3", "train.py", "--config", "configs/run.yaml", "--seed", std::to_string(i)}});
  s.tasks[0].env = {{"DATASET", "/data/imagenet"}, {"EPOCHS", "90"}, {"WANDB_PROJECT", "vision"}};
  return s;
}

}  // namespace
}  // namespace rota

int main(int argc, char** argv) {
  using namespace rota;
  int jobs = 1'000'000;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::string(argv[i]) == "--jobs") jobs = std::atoi(argv[i + 1]);
  }
  char tmpl[] = "/tmp/rota-snapshot-bench-XXXXXX";
  const std::string dir = mkdtemp(tmpl);

  ClusterConfig config;
  config.node_groups.push_back({.name = "n", .count = 64, .gpus = 8, .gpu_model = "H100", .cpu = 64000,
                                .memory = 512 * 1024, .nodes_per_rack = 8});
  ClusterState state(config.topology);
  const std::vector<NodeSpec> nodes = std::move(ExpandNodes(config)).value();
  for (const NodeSpec& n : nodes) (void)state.Apply(NodeAdded{n}).ok();
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 1; i <= jobs; ++i) {
    const TimePoint at = int64_t{i} * 1'000'000;
    (void)state.Apply(JobSubmitted{JobId(i), Job(i), at, "user-" + std::to_string(i % 50)}).ok();
    (void)state.Apply(JobBound{JobId(i), {{0, 0, NodeId(static_cast<uint32_t>(i % 64)), 1}}, at + 1000}).ok();
    (void)state.Apply(JobFinished{JobId(i), JobOutcome::kSucceeded, at + 600'000'000}).ok();
  }
  const Snapshot snap = state.GetSnapshot();
  std::printf("snapshot_bench: %d ended jobs built in %.1f s; RSS %lld MiB\n", jobs, Since(t0),
              static_cast<long long>(ProcKb("VmRSS:") / 1024));
  if (!ResetPeak()) std::printf("(cannot reset the peak RSS here: the figures below are upper bounds)\n");

  auto store = std::move(SqliteStore::Open(dir + "/rota.db")).value();
  int64_t before = ProcKb("VmRSS:");
  t0 = std::chrono::steady_clock::now();
  Status written = store->WriteSnapshot(1, [&](const EventSink& sink) { return CompactState(snap, sink); });
  const double streamed_s = Since(t0);
  const int64_t streamed_peak = ProcKb("VmHWM:") - before;
  if (!written.ok()) {
    std::printf("WRITE FAILED: %s\n", written.ToString().c_str());
    return 1;
  }
  const auto bytes = std::filesystem::file_size(dir + "/rota.db.snap");

  ResetPeak();
  before = ProcKb("VmRSS:");
  t0 = std::chrono::steady_clock::now();
  size_t body_bytes = 0;
  {
    const std::vector<Event> compacted = CompactState(snap);
    const std::string body = EncodeSnapshotBody(compacted);
    body_bytes = body.size();
  }
  const double whole_s = Since(t0);
  const int64_t whole_peak = ProcKb("VmHWM:") - before;

  ResetPeak();
  before = ProcKb("VmRSS:");
  t0 = std::chrono::steady_clock::now();
  int64_t events = 0;
  Status read = store->Replay([&](const Event&) {
    ++events;
    return Status::Ok();
  });
  const double replay_s = Since(t0);
  const int64_t replay_peak = ProcKb("VmHWM:") - before;

  std::printf("%-44s %8.0f MiB  %6.2f s  (%.0f MiB on disk)\n", "snapshot streamed in parts: peak RSS rise",
              streamed_peak / 1024.0, streamed_s, bytes / 1048576.0);
  std::printf("%-44s %8.0f MiB  %6.2f s  (a %.0f MiB body%s)\n", "baseline: events and encoding whole", whole_peak / 1024.0,
              whole_s, body_bytes / 1048576.0, body_bytes > 1'000'000'000 ? ", over SQLite's 1 GB limit" : "");
  std::printf("%-44s %8.1fx\n", "ratio", static_cast<double>(whole_peak) / std::max<int64_t>(streamed_peak, 1));
  std::printf("%-44s %8.0f MiB  %6.2f s  (%lld events%s)\n", "read back (Replay): peak RSS rise", replay_peak / 1024.0,
              replay_s, static_cast<long long>(events), read.ok() ? "" : (", FAILED: " + read.ToString()).c_str());
  store.reset();
  std::filesystem::remove_all(dir);
  return read.ok() ? 0 : 1;
}
