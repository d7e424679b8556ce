// scan: the straightforward placer, kept as the baseline that benchmarks and
// differential tests measure `topology` against. For each replica it looks at
// every node, filters, scores and picks the best (PlaceContext::
// SelectNodeByScan): per-replica greedy. A required topology level is
// honoured by trying each domain of that level in order; a preferred one is
// ignored.
#include "sched/place_context.h"
#include "sched/plugins/builtin.h"

namespace rota::sched {
namespace {

class ScanPlacer final : public PlacerPlugin {
 public:
  std::string_view name() const override { return "scan"; }

  bool Place(PlaceContext& ctx, const JobRequest& job) const override {
    const Topology& topo = ctx.topology();
    const int32_t root = static_cast<int32_t>(topo.domain_levels().size());
    if (!job.required || job.level == root) return PlaceInRange(ctx, job, 0, ctx.workspace().size());
    Txn& txn = ctx.txn();
    if (job.level < 0) {  // one node
      for (uint32_t pos = 0; pos < ctx.workspace().size(); ++pos) {
        const size_t mark = txn.Mark();
        if (PlaceInRange(ctx, job, pos, pos + 1)) return true;
        txn.RollbackTo(mark);
      }
      return false;
    }
    for (int32_t d : topo.domains_at(job.level)) {
      const size_t mark = txn.Mark();
      if (PlaceInRange(ctx, job, topo.domains()[d].begin, topo.domains()[d].end)) return true;
      txn.RollbackTo(mark);
    }
    return false;
  }

 private:
  static bool PlaceInRange(PlaceContext& ctx, const JobRequest& job, uint32_t begin, uint32_t end) {
    for (const TaskRequest& task : job.tasks) {
      for (int32_t r = 0; r < task.replicas; ++r) {
        const uint32_t pos = ctx.SelectNodeByScan(job, task, begin, end);
        if (pos == end) return false;
        ctx.Bind(task, static_cast<uint32_t>(r), pos);
      }
    }
    return true;
  }
};

}  // namespace

void RegisterScan(Registry& r) {
  r.Register("scan", [] { return std::make_unique<ScanPlacer>(); });
}

}  // namespace rota::sched
