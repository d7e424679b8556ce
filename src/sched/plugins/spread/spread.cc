// spread: prefer the node that keeps the most GPUs free after the replica
// lands (less interference, more headroom). Score = 100 x free after / capacity.
#include "sched/plugins/builtin.h"

namespace rota::sched {
namespace {

class Spread final : public ScorePlugin {
 public:
  std::string_view name() const override { return "spread"; }
  int32_t Score(const NodeFit& fit) const override {
    if (fit.gpu_capacity == 0) return 0;
    return 100 * (fit.gpu_free - fit.gpus) / fit.gpu_capacity;
  }
};

}  // namespace

void RegisterSpread(Registry& r) {
  r.Register("spread", [] { return std::make_unique<Spread>(); });
}

}  // namespace rota::sched
