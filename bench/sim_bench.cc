// Simulator speed on the real traces in ../shared/traces, each beside its
// baseline in the same run:
//
//   openb:  one FGD experiment (openb default trace, 1,213 nodes, inflated to
//           130% of capacity, 10.8k arrivals) for each placement. Baseline: the
//           same run scoring every feasible node for every pod (no score cache,
//           as the FGD artifact's simulator does). The FGD Go simulator itself
//           took 3,747 s for one such run on this kind of machine (see
//           fgd-expected-results/reproduced_default_seed42/README.txt).
//   philly: the whole Philly trace (82,247 jobs, 109 days) on 512 GPUs, in
//           simulated days per wall second, for non-preemptive and preemptive
//           policies, counting GPUs and through the engine, and through the
//           production profile (--policy profile).
//   whatif: a live state of 1,250 nodes (10,000 GPUs, full) and 10,000
//           pending jobs projected forward (Project, what GET /v1/whatif
//           runs), beside one engine cycle over the same state.
//
// usage: sim_bench [--traces DIR] [--only openb|philly|whatif]
#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include "base/rng.h"
#include "sched/engine.h"
#include "sim/openb.h"
#include "sim/profile_sim.h"
#include "sim/time_sim.h"

namespace rota::sim {
namespace {

std::string Read(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

int WhatIf();

int Main(int argc, char** argv) {
  std::string traces = "../shared/traces", only;
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::string(argv[i]) == "--traces") traces = argv[i + 1];
    if (std::string(argv[i]) == "--only") only = argv[i + 1];
  }
  if (only == "whatif") return WhatIf();
  auto nodes = ParseNodeList(Read(traces + "/alibaba-v2023/openb_node_list_gpu_node.csv"), "nodes");
  auto pods = ParseTrace(TraceFormat::kOpenb, Read(traces + "/alibaba-v2023/openb_pod_list_default.csv"), "pods");
  if (!nodes.ok() || !pods.ok()) {
    std::fprintf(stderr, "sim_bench: cannot read the openb traces under %s\n", traces.c_str());
    return 1;
  }
  if (only.empty() || only == "openb") {
  std::printf("openb default, 130%%, seed 42: wall seconds per experiment\n");
  std::printf("%-10s %10s %12s %9s %12s\n", "placement", "rota_s", "baseline_s", "speedup", "alloc%@130");
  for (const char* placement : {"rota", "fgd", "bestfit", "packing", "dotprod"}) {
    OpenbOptions options;
    options.placement = placement;
    auto fast = RunOpenb(*nodes, *pods, options);
    options.cache_scores = false;
    auto slow = RunOpenb(*nodes, *pods, options);
    if (!fast.ok() || !slow.ok()) return 1;
    if (fast->steps.back().used_milli != slow->steps.back().used_milli) {
      std::fprintf(stderr, "sim_bench: %s: the cache changed the result\n", placement);
      return 1;
    }
    std::printf("%-10s %10.3f %12.3f %8.1fx %12.2f\n", placement, fast->wall_s, slow->wall_s, slow->wall_s / fast->wall_s,
                fast->alloc_pct_by_arrived[130]);
  }
  }
  if (only == "openb") return 0;

  auto philly = ParseTrace(TraceFormat::kPhilly, Read(traces + "/philly/philly_jobs_pollux.csv"), "philly");
  if (!philly.ok()) return 1;
  std::vector<NodeSpec> cluster;
  for (int i = 0; i < 64; ++i) {
    NodeSpec n;
    n.name = "n" + std::to_string(i);
    n.gpu_model = "V100";
    n.gpus = 8;
    n.cpu = 64000;
    n.memory = 524288;
    n.labels = {{"hostname", n.name}, {"gpu_model", "V100"}, {"rack", "r" + std::to_string(i / 16)}, {"spine", "s0"}};
    cluster.push_back(n);
  }
  std::printf("\nPhilly, 82,247 jobs on 512 GPUs: simulated days per wall second\n");
  std::printf("%-10s %-9s %10s %12s %12s\n", "policy", "placement", "wall_s", "sim_days/s", "avg_jct_s");
  for (const char* placement : {"count", "topology"}) {
    for (const char* policy : {"fifo", "sjf", "tiresias", "rota", "profile"}) {
      if (std::string(policy) == "profile" && std::string(placement) == "count") continue;
      TimeSimOptions options;
      options.policy = policy;
      options.placement = placement;
      ClusterConfig config;
      config.topology = {"nvlink", "node", "rack", "spine"};
      auto r = RunTimeSim(config, cluster, *philly, options);
      if (!r.ok()) return 1;
      std::printf("%-10s %-9s %10.2f %12.1f %12.0f\n", policy, placement, r->summary.wall_s, r->summary.sim_days_per_wall_s,
                  r->summary.avg_jct_s);
    }
  }
  return WhatIf();
}

// The what-if target: 10,000 pending jobs on 1,250 nodes answered in 2 s.
int WhatIf() {
  ClusterConfig config;
  config.topology = {"nvlink", "node", "rack", "spine"};
  config.node_groups.push_back({.name = "n", .count = 1250, .gpus = 8, .gpu_model = "H100", .cpu = 128000,
                                .memory = 1024 * 1024, .nodes_per_rack = 32});
  auto nodes = ExpandNodes(config);
  if (!nodes.ok()) return 1;
  ClusterState state(config.topology);
  for (const NodeSpec& n : *nodes) {
    if (!state.Apply(NodeAdded{n}).ok()) return 1;
  }
  const TimePoint now = 100LL * 24 * 3600 * kMicrosPerSecond;
  Rng rng(1);
  uint64_t id = 1;
  auto spec = [&](int32_t gpus, bool limited) {
    JobSpec s;
    s.name = "j" + std::to_string(id);
    s.tasks.push_back({.name = "w", .replicas = 1, .gpus = gpus, .command = {"x"}});
    if (limited) s.time_limit = static_cast<Duration>(1800 + rng.Uniform(24 * 3600)) * kMicrosPerSecond;
    s.preemptible = rng.Uniform(2) == 0;
    return s;
  };
  // Every node full: two 4-GPU jobs each, with time limits, started in the last day.
  for (const NodeState& n : state.GetSnapshot().nodes()) {
    for (uint64_t half : {uint64_t{0x0f}, uint64_t{0xf0}}) {
      JobSpec s = spec(4, true);
      const TimePoint started = now - static_cast<TimePoint>(rng.Uniform(static_cast<uint64_t>(s.time_limit)));
      if (!state.Apply(JobSubmitted{.id = JobId(id), .spec = std::move(s), .at = started - 1, .user = "u"}).ok()) return 1;
      ReplicaPlacement r;
      r.node = n.id;
      r.gpu_mask = half;
      if (!state.Apply(JobBound{JobId(id), {r}, started}).ok()) return 1;
      ++id;
    }
  }
  static const int32_t kGpus[] = {1, 1, 2, 4, 8};
  for (int i = 0; i < 10'000; ++i) {
    JobSpec s = spec(kGpus[rng.Uniform(5)], rng.Uniform(10) < 7);
    if (!state.Apply(JobSubmitted{.id = JobId(id++), .spec = std::move(s), .at = now - 1000 + i, .user = "u"}).ok()) return 1;
  }
  const Snapshot snap = state.GetSnapshot();
  auto scheduler = sched::Scheduler::Create(config);
  if (!scheduler.ok()) return 1;
  sched::CycleResult cycle;
  const auto c0 = std::chrono::steady_clock::now();
  (*scheduler)->RunCycle(snap, now, &cycle);
  const double cycle_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - c0).count();
  std::printf("\nwhatif: 1,250 nodes, 2,500 running, 10,000 pending\n");
  std::printf("%-22s %10s %8s %12s %10s\n", "projection", "wall_s", "steps", "started", "cycles");
  for (bool more : {false, true}) {
    ProjectOptions options;
    if (more) options.change.add_nodes = {{"n", 125}};
    auto p = Project(config, snap, now, options);
    if (!p.ok()) {
      std::fprintf(stderr, "sim_bench: %s\n", p.status().ToString().c_str());
      return 1;
    }
    size_t started = 0;
    for (const ProjectedStart& j : p->jobs) started += j.start >= 0;
    std::printf("%-22s %10.3f %8ld %12zu %9.0fx\n", more ? "with 125 more nodes" : "as is", p->wall_s,
                static_cast<long>(p->steps), started, p->wall_s / cycle_s);
  }
  std::printf("(one engine cycle over the same state: %.1f ms)\n", cycle_s * 1000);
  return 0;
}

}  // namespace
}  // namespace rota::sim

int main(int argc, char** argv) { return rota::sim::Main(argc, argv); }
