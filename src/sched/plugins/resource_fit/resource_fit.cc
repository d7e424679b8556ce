// resource-fit: a replica fits a node if the node is schedulable and has the
// GPU model, GPU memory, selector labels, and enough free healthy GPUs, CPU
// and memory. Static mismatches (model, selector, a node too small even when
// empty) are kNever, which makes a job unresolvable if no node escapes them.
#include <bit>

#include "sched/plugins/builtin.h"

namespace rota::sched {
namespace {

class ResourceFit final : public FilterPlugin {
 public:
  std::string_view name() const override { return "resource-fit"; }

  FilterResult Filter(const JobRequest& job, const TaskRequest& task, const NodeView& view) const override {
    const NodeState& n = *view.node;
    if (task.gpus > 0 || task.gpu_memory > 0) {
      if (task.model_missing || (task.model >= 0 && n.model != task.model)) return {FilterResult::kNever, Shortfall::kGpuModel};
      if (task.model < 0 && n.model >= 0 && n.model < 64 && (job.quota_barred_models >> n.model & 1)) {
        return {FilterResult::kNever, Shortfall::kQueueLimit};
      }
      if (task.model < 0 && n.model >= 0 && n.model < 64 && (job.quota_skipped_models >> n.model & 1)) {
        return {FilterResult::kNotNow, Shortfall::kQueueLimit};
      }
      if (task.gpu_memory > 0 && n.spec.gpu_memory < task.gpu_memory) return {FilterResult::kNever, Shortfall::kGpuMemory};
    }
    for (const auto& [key, value] : *job.selector) {
      auto it = n.spec.labels.find(key);
      if (it == n.spec.labels.end() || it->second != value) return {FilterResult::kNever, Shortfall::kSelector};
    }
    if (n.spec.gpus < task.gpus) return {FilterResult::kNever, Shortfall::kGpus};
    if (n.spec.cpu < task.cpu) return {FilterResult::kNever, Shortfall::kCpu};
    if (n.spec.memory < task.memory) return {FilterResult::kNever, Shortfall::kMemory};
    if (!view.schedulable) return {FilterResult::kNotNow, Shortfall::kUnavailable};
    if (std::popcount(view.free_mask) < task.gpus) {
      // Unhealthy GPUs may be repaired, so this is "not now".
      return {FilterResult::kNotNow, Shortfall::kGpus};
    }
    if (view.free_cpu < task.cpu) return {FilterResult::kNotNow, Shortfall::kCpu};
    if (view.free_memory < task.memory) return {FilterResult::kNotNow, Shortfall::kMemory};
    return {};
  }
};

}  // namespace

void RegisterResourceFit(Registry& r) {
  r.Register("resource-fit", [] { return std::make_unique<ResourceFit>(); });
}

}  // namespace rota::sched
