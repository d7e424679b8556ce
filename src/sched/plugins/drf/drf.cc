// drf: among queues whose head jobs have equal priority, the one with the
// lowest weighted dominant share goes next (QueueBook::Share: its largest
// share of GPUs, CPU and memory, decayed past usage included, over its
// hierarchical weight).
#include "sched/plugins/builtin.h"
#include "sched/queues.h"

namespace rota::sched {
namespace {

class Drf final : public QueueOrderPlugin {
 public:
  std::string_view name() const override { return "drf"; }
  int Compare(const QueueBook& book, int32_t a, int32_t b) const override {
    const double sa = book.Share(a);
    const double sb = book.Share(b);
    return sa < sb ? -1 : sa > sb ? 1 : 0;
  }
};

}  // namespace

void RegisterDrf(Registry& r) {
  r.Register("drf", [] { return std::make_unique<Drf>(); });
}

}  // namespace rota::sched
