// lost-work: evicting a gang costs the work it would lose: its GPUs (shares
// counted as whole GPUs rounded up) x the time since it last saved (its
// start, or its last reported checkpoint in this run).
#include <algorithm>

#include "sched/plugins/builtin.h"

namespace rota::sched {
namespace {

class LostWork final : public VictimOrderPlugin {
 public:
  std::string_view name() const override { return "lost-work"; }
  int64_t Cost(const JobRecord& victim, TimePoint now) const override {
    return victim.spec().GpuEquivalent() * std::max<Duration>(0, now - victim.SavedAt());
  }
};

}  // namespace

void RegisterLostWork(Registry& r) {
  r.Register("lost-work", [] { return std::make_unique<LostWork>(); });
}

}  // namespace rota::sched
