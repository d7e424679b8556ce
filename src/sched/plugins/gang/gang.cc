// gang: a job commits only with every replica of every task group placed;
// a partial gang never holds anything.
#include "sched/plugins/builtin.h"

namespace rota::sched {
namespace {

class Gang final : public JobReadyPlugin {
 public:
  std::string_view name() const override { return "gang"; }
  bool Ready(const JobRequest& job, int64_t placed) const override { return placed == job.total_replicas; }
};

}  // namespace

void RegisterGang(Registry& r) {
  r.Register("gang", [] { return std::make_unique<Gang>(); });
}

}  // namespace rota::sched
