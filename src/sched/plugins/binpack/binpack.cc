// binpack: prefer the node that is fullest after the replica lands, keeping
// whole nodes free for the gangs that need them. Score = 100 x used / capacity.
#include "sched/plugins/builtin.h"

namespace rota::sched {
namespace {

class Binpack final : public ScorePlugin {
 public:
  std::string_view name() const override { return "binpack"; }
  int32_t Score(const NodeFit& fit) const override {
    if (fit.gpu_capacity == 0) return 0;
    return 100 * (fit.gpu_capacity - fit.gpu_free + fit.gpus) / fit.gpu_capacity;
  }
};

}  // namespace

void RegisterBinpack(Registry& r) {
  r.Register("binpack", [] { return std::make_unique<Binpack>(); });
}

}  // namespace rota::sched
