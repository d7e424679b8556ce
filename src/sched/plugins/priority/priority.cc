// priority: jobs with a higher priority value go first.
#include "sched/plugins/builtin.h"

namespace rota::sched {
namespace {

class Priority final : public JobOrderPlugin {
 public:
  std::string_view name() const override { return "priority"; }
  bool stable() const override { return true; }
  bool timeless() const override { return true; }
  int Compare(const JobRecord& a, const JobRecord& b, TimePoint) const override {
    if (a.spec().priority != b.spec().priority) return a.spec().priority > b.spec().priority ? -1 : 1;
    return 0;
  }
  bool keyed() const override { return true; }
  int64_t Key(const JobRecord& j, TimePoint) const override { return -static_cast<int64_t>(j.spec().priority); }
};

}  // namespace

void RegisterPriority(Registry& r) {
  r.Register("priority", [] { return std::make_unique<Priority>(); });
}

}  // namespace rota::sched
