// fgd: a GPU fraction goes where it least grows the node's fragmentation
// for the live jobs' typical task mix (sched/fgd.h; Weng et al., ATC'23).
// The cost of a GPU is the growth; the framework breaks ties by the GPU
// left fullest (best fit).
#include <algorithm>

#include "sched/plugins/builtin.h"

namespace rota::sched {
namespace {

class FgdPlacer final : public SharePlacerPlugin {
 public:
  std::string_view name() const override { return "fgd"; }
  bool needs_task_mix() const override { return true; }
  void Costs(const ShareNode& node, const bool* candidate, int32_t milli, MilliCpu cpu, double* cost) const override {
    int32_t left[kMaxGpusPerNode];
    std::copy(node.left, node.left + node.gpus, left);
    const double before = NodeFragmentation(*node.mix, node.free_cpu, left, node.gpus, node.model);
    for (int32_t g = 0; g < node.gpus; ++g) {
      if (!candidate[g]) continue;
      left[g] -= milli;
      cost[g] = NodeFragmentation(*node.mix, node.free_cpu - cpu, left, node.gpus, node.model) - before;
      left[g] += milli;
    }
  }
};

}  // namespace

void RegisterFgd(Registry& r) {
  r.Register("fgd", [] { return std::make_unique<FgdPlacer>(); });
}

}  // namespace rota::sched
