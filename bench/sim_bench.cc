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
//           policies, counting GPUs and through the engine.
//
// usage: sim_bench [--traces DIR]
#include <chrono>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include "sim/openb.h"
#include "sim/time_sim.h"

namespace rota::sim {
namespace {

std::string Read(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

int Main(int argc, char** argv) {
  std::string traces = "../shared/traces";
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::string(argv[i]) == "--traces") traces = argv[i + 1];
  }
  auto nodes = ParseNodeList(Read(traces + "/alibaba-v2023/openb_node_list_gpu_node.csv"), "nodes");
  auto pods = ParseTrace(TraceFormat::kOpenb, Read(traces + "/alibaba-v2023/openb_pod_list_default.csv"), "pods");
  if (!nodes.ok() || !pods.ok()) {
    std::fprintf(stderr, "sim_bench: cannot read the openb traces under %s\n", traces.c_str());
    return 1;
  }
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
    for (const char* policy : {"fifo", "sjf", "tiresias", "rota"}) {
      TimeSimOptions options;
      options.policy = policy;
      options.placement = placement;
      auto r = RunTimeSim(ClusterConfig{}, cluster, *philly, options);
      if (!r.ok()) return 1;
      std::printf("%-10s %-9s %10.2f %12.1f %12.0f\n", policy, placement, r->summary.wall_s, r->summary.sim_days_per_wall_s,
                  r->summary.avg_jct_s);
    }
  }
  return 0;
}

}  // namespace
}  // namespace rota::sim

int main(int argc, char** argv) { return rota::sim::Main(argc, argv); }
