// Scheduling engine benchmarks. Each case runs the indexed engine (profile
// with the `topology` placer) and the straightforward baseline (`scan`: look
// at every node, filter, score, pick the best; per-replica greedy for gangs)
// on the same snapshot, and the summary prints the speed-up ratio.
//
// Cases (clusters of 8-GPU nodes, 16 nodes per rack, 8 racks per spine):
//   stream/10k, stream/100k: 1,000 pending 1-GPU jobs per cycle on 10k
//     (1,250 nodes) and 100k (12,500 nodes) GPUs at 50% background occupancy.
//   gangs/10k, gangs/100k: 100 rack-required gangs of 8-64 GPUs per cycle
//     (replicas of 1, 2 or 4 GPUs), same backgrounds.
//   big-gang: one 1,024-GPU gang (128 x 8 GPUs) on 16,384 GPUs where 80% of
//     the nodes are fully busy; reports p50/p99 cycle latency.
//   big-gang-1gpu: one 1,024 x 1-GPU gang on 16,384 GPUs, 80% of GPUs busy
//     at random.
// Every iteration is one RunCycle on the same snapshot (decisions are not
// applied), so every iteration does the same work. Heap allocations made in
// the timed loop are counted and reported per placement.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "base/rng.h"
#include "core/cluster_config.h"
#include "sched/engine.h"

namespace {
std::atomic<int64_t> g_allocations{0};
}  // namespace

void* operator new(size_t n) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(n ? n : 1)) return p;
  throw std::bad_alloc();
}
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }

namespace rota::sched {
namespace {

enum class Background { kRandomGpus, kWholeNodes };

struct Setup {
  std::unique_ptr<ClusterState> state;
  Snapshot snapshot() { return state->GetSnapshot(); }
};

JobSpec Gang(const std::string& name, int32_t replicas, int32_t gpus, const char* level) {
  JobSpec s;
  s.name = name;
  s.tasks.push_back({.name = "w", .replicas = replicas, .gpus = gpus, .cpu = 1000, .memory = 1024});
  if (level != nullptr) s.topology = {level, TopologyMode::kRequired};
  return s;
}

// A cluster of `nodes` x 8 GPUs with `occupancy` (0..1) of GPUs busy.
std::unique_ptr<ClusterState> MakeCluster(int32_t nodes, double occupancy, Background bg, uint64_t seed) {
  ClusterConfig c;
  c.node_groups.push_back({.name = "g", .count = nodes, .gpus = 8, .gpu_model = "H100", .cpu = 128000,
                           .memory = 2 * 1024 * 1024, .nodes_per_rack = 16, .racks_per_spine = 8});
  auto state = std::make_unique<ClusterState>(c.topology);
  std::vector<NodeSpec> specs = std::move(ExpandNodes(c)).value();
  for (auto& n : specs) (void)state->Apply(NodeAdded{std::move(n)}).ok();
  Rng rng(seed);
  uint64_t id = 1'000'000;
  for (int32_t i = 0; i < nodes; ++i) {
    int32_t busy;
    if (bg == Background::kWholeNodes) {
      busy = rng.UniformDouble() < occupancy ? 8 : 0;
    } else {
      // Binomial(8, occupancy): each GPU busy with probability `occupancy`.
      busy = 0;
      for (int g = 0; g < 8; ++g) busy += rng.UniformDouble() < occupancy;
    }
    if (busy == 0) continue;
    JobSpec bgjob = Gang("bg", 1, busy, nullptr);
    (void)state->Apply(JobSubmitted{JobId(id), bgjob, 0}).ok();
    (void)state->Apply(JobBound{JobId(id), {{0, 0, NodeId(i), (1ULL << busy) - 1}}, 0}).ok();
    ++id;
  }
  return state;
}

std::unique_ptr<Scheduler> MakeScheduler(const char* placer, ClusterConfig config = {}, int32_t max_jobs = 0) {
  config.profile.plugins = {{"priority", 1}, {"fifo", 1}, {"resource-fit", 1}, {"gang", 1}, {placer, 1}, {"binpack", 1}};
  EngineOptions options = EngineOptions::FromConfig(config);
  options.max_jobs_per_cycle = max_jobs;
  return std::move(Scheduler::Create(config, options)).value();
}

// Caches one cluster + pending set per case so baseline and indexed runs share it.
Setup& CaseSetup(const std::string& name) {
  static std::map<std::string, Setup> cache;
  auto it = cache.find(name);
  if (it != cache.end()) return it->second;
  Setup s;
  if (name.rfind("stream/", 0) == 0) {
    const int32_t nodes = name == "stream/10k" ? 1250 : 12500;
    s.state = MakeCluster(nodes, 0.5, Background::kRandomGpus, 1);
    for (uint64_t j = 1; j <= 1000; ++j) (void)s.state->Apply(JobSubmitted{JobId(j), Gang("s", 1, 1, nullptr), 1}).ok();
  } else if (name.rfind("gangs/", 0) == 0) {
    const int32_t nodes = name == "gangs/10k" ? 1250 : 12500;
    s.state = MakeCluster(nodes, 0.5, Background::kRandomGpus, 2);
    Rng rng(5);
    const int32_t totals[] = {8, 16, 32, 64};
    const int32_t sizes[] = {1, 2, 4};
    for (uint64_t j = 1; j <= 100; ++j) {
      const int32_t total = totals[rng.Uniform(4)];
      const int32_t g = sizes[rng.Uniform(3)];
      (void)s.state->Apply(JobSubmitted{JobId(j), Gang("g", total / g, g, "rack"), 1}).ok();
    }
  } else if (name == "big-gang") {
    s.state = MakeCluster(2048, 0.8, Background::kWholeNodes, 3);
    (void)s.state->Apply(JobSubmitted{JobId(1), Gang("big", 128, 8, nullptr), 1}).ok();
  } else {  // big-gang-1gpu
    s.state = MakeCluster(2048, 0.8, Background::kRandomGpus, 4);
    (void)s.state->Apply(JobSubmitted{JobId(1), Gang("big", 1024, 1, nullptr), 1}).ok();
  }
  return cache.emplace(name, std::move(s)).first->second;
}

void RunCase(benchmark::State& state, const std::string& name, const char* placer) {
  Setup& setup = CaseSetup(name);
  Snapshot snap = setup.snapshot();
  auto scheduler = MakeScheduler(placer);
  CycleResult result;
  scheduler->RunCycle(snap, &result);  // warm-up: buffers reach their size
  const size_t placed_per_cycle = result.placed.size();
  const size_t decided_per_cycle = result.placed.size() + result.pending.size() + result.unresolvable.size();
  std::vector<double> latencies;
  latencies.reserve(1 << 20);  // so the timed loop does not allocate for it
  const int64_t allocs_before = g_allocations.load();
  for (auto _ : state) {
    auto t0 = std::chrono::steady_clock::now();
    scheduler->RunCycle(snap, &result);
    latencies.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    benchmark::DoNotOptimize(result.replicas.data());
  }
  const int64_t allocs = g_allocations.load() - allocs_before;
  std::sort(latencies.begin(), latencies.end());
  auto pct = [&](double p) { return latencies[std::min(latencies.size() - 1, static_cast<size_t>(p * latencies.size()))]; };
  state.counters["placed/cycle"] = static_cast<double>(placed_per_cycle);
  state.counters["placements/s"] =
      benchmark::Counter(static_cast<double>(placed_per_cycle), benchmark::Counter::kIsIterationInvariantRate);
  state.counters["jobs/s"] =
      benchmark::Counter(static_cast<double>(decided_per_cycle), benchmark::Counter::kIsIterationInvariantRate);
  state.counters["p50_ms"] = pct(0.50);
  state.counters["p99_ms"] = pct(0.99);
  state.counters["allocs/placement"] =
      static_cast<double>(allocs) / static_cast<double>(std::max<size_t>(1, placed_per_cycle * state.iterations()));
}

// Collects results for the ratio table printed after the run.
class RatioReporter : public benchmark::ConsoleReporter {
 public:
  void ReportRuns(const std::vector<Run>& runs) override {
    ConsoleReporter::ReportRuns(runs);
    for (const Run& r : runs) results_[r.run_name.function_name] = r;
  }
  void PrintSummary() const {
    std::printf("\n%-16s %14s %14s %8s %10s %10s %10s\n", "case", "rota/s", "baseline/s", "speedup", "p99 ms",
                "base p99", "allocs/pl");
    for (const char* c : {"stream/10k", "stream/100k", "gangs/10k", "gangs/100k", "big-gang", "big-gang-1gpu",
                          "policy-pass"}) {
      auto fast = results_.find(std::string("rota/") + c);
      auto slow = results_.find(std::string("baseline/") + c);
      if (fast == results_.end() || slow == results_.end()) continue;
      const bool gangs = std::string(c).rfind("gangs", 0) == 0 || std::string(c) == "policy-pass";
      const char* metric = gangs ? "jobs/s" : "placements/s";
      const double f = fast->second.counters.at(metric);
      const double s = slow->second.counters.at(metric);
      auto counter = [](const Run& r, const char* name) {
        auto it = r.counters.find(name);
        return it == r.counters.end() ? 0.0 : it->second.value;
      };
      std::printf("%-16s %14.0f %14.0f %7.1fx %10.3f %10.3f %10.4f\n", c, f, s, f / s, counter(fast->second, "p99_ms"),
                  counter(slow->second, "p99_ms"), counter(fast->second, "allocs/placement"));
    }
    std::printf("(stream: 1-GPU jobs placed/s; gangs and policy-pass: jobs examined/s; big-gang: 1,024-GPU gangs placed/s;\n"
                " allocs per placed job; policy-pass baseline examines 500 jobs a pass, as Slurm's backfill)\n");
  }

 private:
  std::map<std::string, Run> results_;
};

// One full policy pass: 100k pending gangs (1 to 1,024 GPUs), 10k running
// jobs with time limits, 100k GPUs in three queues with quotas, with
// reservations, backfill and preemption search on. Baseline: the same engine
// examining at most 500 jobs a pass, as Slurm's backfill does by default.
void PolicyPass(benchmark::State& state, int32_t max_jobs) {
  static std::unique_ptr<ClusterState> st;
  static ClusterConfig config;
  const Duration minute = 60 * kMicrosPerSecond;
  const TimePoint now = 100000 * minute;
  if (!st) {
    config.node_groups.push_back({.name = "g", .count = 12500, .gpus = 8, .gpu_model = "H100", .cpu = 128000,
                                  .memory = 2 * 1024 * 1024, .nodes_per_rack = 16, .racks_per_spine = 8});
    config.queues = {{.name = "a", .weight = 1, .quota = {{"H100", 30000}}, .borrowing_limit = {{"H100", 30000}}},
                     {.name = "b", .weight = 2, .quota = {{"H100", 40000}}},
                     {.name = "c", .weight = 1, .quota = {{"H100", 30000}}, .borrowing_limit = {{"H100", 70000}}}};
    st = std::make_unique<ClusterState>(config.topology);
    std::vector<NodeSpec> specs = std::move(ExpandNodes(config)).value();
    for (auto& n : specs) (void)st->Apply(NodeAdded{std::move(n)}).ok();
    Rng rng(77);
    // Time limits: heavy-tailed like Philly/Helios (most under an hour, a few days).
    auto limit = [&] {
      const double u = rng.UniformDouble();
      return static_cast<Duration>((u < 0.6 ? 5 + rng.Uniform(55) : u < 0.9 ? 60 + rng.Uniform(600) : 600 + rng.Uniform(4000))) * minute;
    };
    // 10k running 8-GPU jobs on whole nodes (80k of 100k GPUs busy).
    uint64_t id = 1;
    for (uint32_t n = 0; n < 10000; ++n, ++id) {
      JobSpec j = Gang("run", 1, 8, nullptr);
      j.queue = std::string(1, static_cast<char>('a' + n % 3));
      j.preemptible = n % 2 == 0;
      j.time_limit = limit();
      (void)st->Apply(JobSubmitted{JobId(id), j, now - 2000 * minute}).ok();
      (void)st->Apply(JobBound{JobId(id), {{0, 0, NodeId(n), 0xFF}}, now - static_cast<Duration>(rng.Uniform(600)) * minute}).ok();
    }
    static const int32_t kSizes[] = {1, 1, 1, 2, 4, 8, 8, 16, 32, 64, 128, 256, 1024};
    for (int i = 0; i < 100000; ++i, ++id) {
      const int32_t gpus = kSizes[rng.Uniform(std::size(kSizes))];
      JobSpec j = gpus > 8 ? Gang("p", gpus / 8, 8, nullptr) : Gang("p", 1, gpus, nullptr);
      j.queue = std::string(1, static_cast<char>('a' + rng.Uniform(3)));
      j.priority = rng.Uniform(10) == 0 ? 1000 : 500;
      j.preemptible = rng.Uniform(2) == 0;  // may borrow beyond the guarantee
      j.time_limit = limit();
      (void)st->Apply(JobSubmitted{JobId(id), j, now - static_cast<TimePoint>(100000 - i)}).ok();
    }
  }
  auto scheduler = MakeScheduler("topology", config, max_jobs);
  Snapshot snap = st->GetSnapshot();
  CycleResult result;
  size_t examined = 0;
  for (auto _ : state) {
    scheduler->RunCycle(snap, now, &result);
    examined = result.placed.size() + result.pending.size() + result.unresolvable.size();
  }
  state.counters["examined/pass"] = static_cast<double>(examined);
  state.counters["jobs/s"] = benchmark::Counter(static_cast<double>(examined), benchmark::Counter::kIsIterationInvariantRate);
  state.counters["placed"] = static_cast<double>(result.placed.size());
  state.counters["reserved"] = static_cast<double>(result.reservations.size());
  state.counters["preempt"] = static_cast<double>(result.preemptions.size());
}

void Register() {
  benchmark::RegisterBenchmark("rota/policy-pass", [](benchmark::State& s) { PolicyPass(s, 0); })
      ->Unit(benchmark::kMillisecond)
      ->Iterations(3);
  benchmark::RegisterBenchmark("baseline/policy-pass", [](benchmark::State& s) { PolicyPass(s, 500); })
      ->Unit(benchmark::kMillisecond)
      ->Iterations(3);
  for (const char* c : {"stream/10k", "stream/100k", "gangs/10k", "gangs/100k", "big-gang", "big-gang-1gpu"}) {
    for (const char* placer : {"topology", "scan"}) {
      const std::string name = std::string(placer == std::string("topology") ? "rota/" : "baseline/") + c;
      benchmark::RegisterBenchmark(name.c_str(), [c, placer](benchmark::State& s) { RunCase(s, c, placer); })
          ->Unit(benchmark::kMillisecond)
          ->MinTime(0.3);
    }
  }
}

}  // namespace
}  // namespace rota::sched

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  rota::sched::Register();
  rota::sched::RatioReporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  reporter.PrintSummary();
  benchmark::Shutdown();
  return 0;
}
