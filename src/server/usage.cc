#include "server/usage.h"

#include <algorithm>

namespace rota::server {

void UsageTracker::Fold(const Snapshot& snap, const NodeState& node, const std::set<JobId>& jobs,
                        const std::vector<api::GpuTelemetry>& gpus, TimePoint now) {
  if (gpus.empty()) return;
  std::lock_guard<std::mutex> lock(mu_);
  for (JobId id : jobs) {
    const JobRecord* job = snap.FindJob(id);
    if (job == nullptr || job->state != JobState::kRunning) continue;
    for (const ReplicaPlacement& r : job->placement) {
      // A shared GPU's telemetry is the whole GPU's (several jobs', or
      // none at all in MIG mode): it says nothing of one job's use.
      if (r.node != node.id || r.shares_gpu()) continue;
      for (const api::GpuTelemetry& g : gpus) {
        if (g.index < 0 || g.index >= 64 || !((r.gpu_mask >> g.index) & 1)) continue;
        JobUsage& u = usage_[id];
        u.seen = true;
        u.peak_memory = std::max(u.peak_memory, g.memory_used);
        if (g.utilization_pct >= settings_.idle_utilization_pct) u.last_busy = now;
      }
    }
  }
}

std::vector<std::string> UsageTracker::Flags(const Snapshot& snap, const JobRecord& job, TimePoint now) const {
  std::vector<std::string> flags;
  if (job.state != JobState::kRunning) return flags;
  JobUsage u;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = usage_.find(job.id);
    if (it == usage_.end() || !it->second.seen) return flags;
    u = it->second;
  }
  const Duration idle = now - std::max(job.started_at, u.last_busy);
  if (idle >= settings_.idle_after) {
    flags.push_back("idle: its GPUs have been below " + std::to_string(settings_.idle_utilization_pct) +
                    "% utilisation for " + FormatDuration(idle / kMicrosPerSecond * kMicrosPerSecond));
  }
  MemoryMiB per_gpu = 0;
  if (!job.placement.empty()) per_gpu = snap.node(job.placement[0].node).spec.gpu_memory;
  if (per_gpu > 0 && now - job.started_at >= settings_.idle_after &&
      u.peak_memory * 100 < per_gpu * settings_.overprovisioned_pct) {
    flags.push_back("over-provisioned: peak GPU memory " + FormatMemoryMiB(u.peak_memory) + " of " +
                    FormatMemoryMiB(per_gpu) + " per GPU");
  }
  return flags;
}

}  // namespace rota::server
