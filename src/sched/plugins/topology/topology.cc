// topology: packs a gang into the smallest topology domain that holds it, so
// all-reduce stays on the fastest links. It tries one node first, then each
// domain level from the innermost up: up to the requested level when the
// constraint is required (then the job waits), up to the whole cluster when
// it is preferred or absent. At each level it tries the candidate domains
// tightest first (fewest free GPUs that could still hold the gang; the
// domain histograms rule out the rest without touching their nodes) and
// places replica by replica with the profile's filters and scores. Inside a
// node, GPUs come from one NVLink island where they fit (Workspace::ChooseGpus).
#include <algorithm>

#include "sched/place_context.h"
#include "sched/plugins/builtin.h"

namespace rota::sched {
namespace {

class TopologyPlacer final : public PlacerPlugin {
 public:
  std::string_view name() const override { return "topology"; }

  bool Place(PlaceContext& ctx, const JobRequest& job) const override {
    const int32_t root = static_cast<int32_t>(ctx.topology().domain_levels().size());
    const int32_t top = job.required ? job.level : root;
    if (TryOneNode(ctx, job)) return true;
    if (job.total_replicas == 1) return false;  // one node was the whole search
    for (int32_t level = 0; level <= top; ++level) {
      if (TryLevel(ctx, job, level)) return true;
    }
    return false;
  }

 private:
  static bool PlaceInRange(PlaceContext& ctx, const JobRequest& job, uint32_t begin, uint32_t end) {
    for (const TaskRequest& task : job.tasks) {
      for (int32_t r = 0; r < task.replicas; ++r) {
        const uint32_t pos = ctx.SelectNode(job, task, begin, end);
        if (pos == end) return false;
        ctx.Bind(task, static_cast<uint32_t>(r), pos);
      }
    }
    return true;
  }

  // The whole gang on one node: find a node for the summed request, then bind
  // replica by replica there (each replica still gets its own island).
  static bool TryOneNode(PlaceContext& ctx, const JobRequest& job) {
    Workspace& ws = ctx.workspace();
    if (job.total_replicas == 1) return PlaceInRange(ctx, job, 0, ws.size());
    if (job.total_gpus > ws.max_capacity()) return false;
    TaskRequest sum = job.tasks[0];
    sum.gpus = 0;
    sum.cpu = 0;
    sum.memory = 0;
    for (const TaskRequest& t : job.tasks) {
      if (t.model != sum.model) return false;  // mixed models never share a node
      sum.gpus += t.gpus * t.replicas;
      sum.cpu += t.cpu * t.replicas;
      sum.memory += t.memory * t.replicas;
      sum.gpu_memory = std::max(sum.gpu_memory, t.gpu_memory);
    }
    const uint32_t pos = ctx.SelectNode(job, sum, 0, ws.size());
    if (pos == ws.size()) return false;
    for (const TaskRequest& task : job.tasks) {
      for (int32_t r = 0; r < task.replicas; ++r) ctx.Bind(task, static_cast<uint32_t>(r), pos);
    }
    return true;
  }

  static bool TryLevel(PlaceContext& ctx, const JobRequest& job, int32_t level) {
    Workspace& ws = ctx.workspace();
    const Topology& topo = ctx.topology();
    auto& candidates = ctx.scratch();
    candidates.clear();
    for (int32_t d : topo.domains_at(level)) {
      const int64_t free = ws.DomainFreeGpus(d);
      if (free < job.total_gpus) continue;
      bool enough = true;
      for (const TaskRequest& t : job.tasks) {
        if (t.gpus > 0 && ws.DomainReplicaBound(d, t.gpus) < t.replicas) {
          enough = false;
          break;
        }
      }
      if (enough) candidates.emplace_back(free, d);
    }
    std::sort(candidates.begin(), candidates.end());
    Txn& txn = ctx.txn();
    for (const auto& [free, d] : candidates) {
      const Topology::Domain& dom = topo.domains()[d];
      const size_t mark = txn.Mark();
      if (PlaceInRange(ctx, job, dom.begin, dom.end)) return true;
      txn.RollbackTo(mark);
    }
    return false;
  }
};

}  // namespace

void RegisterTopology(Registry& r) {
  r.Register("topology", [] { return std::make_unique<TopologyPlacer>(); });
}

}  // namespace rota::sched
