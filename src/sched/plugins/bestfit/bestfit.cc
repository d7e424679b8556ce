// bestfit: every GPU costs the same, so a GPU fraction goes to the GPU left
// fullest after it (the framework's tie-break): shared GPUs fill up before
// a free one is split.
#include "sched/plugins/builtin.h"

namespace rota::sched {
namespace {

class BestFitPlacer final : public SharePlacerPlugin {
 public:
  std::string_view name() const override { return "bestfit"; }
  void Costs(const ShareNode& node, const bool* candidate, int32_t, MilliCpu, double* cost) const override {
    for (int32_t g = 0; g < node.gpus; ++g) {
      if (candidate[g]) cost[g] = 0;
    }
  }
};

}  // namespace

void RegisterBestFit(Registry& r) {
  r.Register("bestfit", [] { return std::make_unique<BestFitPlacer>(); });
}

}  // namespace rota::sched
