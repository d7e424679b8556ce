// quota: a placement is admitted only within its queues' guarantees plus
// their borrowing limits (only the guarantees for jobs that may not be
// preempted), and within what the top-level queues may lend
// (QueueBook::Admits).
#include "sched/plugins/builtin.h"
#include "sched/queues.h"

namespace rota::sched {
namespace {

class Quota final : public AdmitPlugin {
 public:
  std::string_view name() const override { return "quota"; }
  bool Admits(const QueueBook& book, int32_t leaf, const std::vector<std::pair<int16_t, int64_t>>& add, bool may_borrow,
              bool empty, std::string* why) const override {
    return book.Admits(leaf, add, may_borrow, why, empty);
  }
};

}  // namespace

void RegisterQuota(Registry& r) {
  r.Register("quota", [] { return std::make_unique<Quota>(); });
}

}  // namespace rota::sched
