// fifo: earlier submissions go first.
#include "sched/plugins/builtin.h"

namespace rota::sched {
namespace {

class Fifo final : public JobOrderPlugin {
 public:
  std::string_view name() const override { return "fifo"; }
  bool stable() const override { return true; }
  bool timeless() const override { return true; }
  int Compare(const JobRecord& a, const JobRecord& b, TimePoint) const override {
    if (a.submitted_at != b.submitted_at) return a.submitted_at < b.submitted_at ? -1 : 1;
    return 0;
  }
  bool keyed() const override { return true; }
  int64_t Key(const JobRecord& j, TimePoint) const override { return j.submitted_at; }
};

}  // namespace

void RegisterFifo(Registry& r) {
  r.Register("fifo", [] { return std::make_unique<Fifo>(); });
}

}  // namespace rota::sched
