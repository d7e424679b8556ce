// UsageTracker: what the agents' GPU telemetry says of each running job's
// use (the last time its GPUs were busy, its peak GPU memory), and the
// right-sizing flags that follow from it ("idle: ...", "over-provisioned:
// ..."). Only whole GPUs count: a shared GPU's telemetry is the whole GPU's.
//
// Thread-safety: thread-safe (its own lock). Heartbeats fold into it from the
// event loop and the actor; views read it.
#pragma once

#include <map>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "api/agent_protocol.h"
#include "core/cluster_state.h"

namespace rota::server {

struct RightSizing {
  // A running job whose GPUs stay below `idle_utilization_pct` for
  // `idle_after` is idle; one whose peak GPU memory stays under
  // `overprovisioned_pct` of its GPUs' memory that long, over-provisioned.
  int32_t idle_utilization_pct = 5;
  Duration idle_after = 30 * 60 * kMicrosPerSecond;
  int32_t overprovisioned_pct = 25;
};

class UsageTracker {
 public:
  explicit UsageTracker(RightSizing settings) : settings_(settings) {}

  // Folds `gpus` (a report from `node` at `now`) into the use of the running
  // jobs among `jobs` (those indexed on the node).
  void Fold(const Snapshot& snap, const NodeState& node, const std::set<JobId>& jobs,
            const std::vector<api::GpuTelemetry>& gpus, TimePoint now);
  // The job's flags at `now`; none until telemetry arrived for its GPUs.
  std::vector<std::string> Flags(const Snapshot& snap, const JobRecord& job, TimePoint now) const;

 private:
  struct JobUsage {
    TimePoint last_busy = 0;
    MemoryMiB peak_memory = 0;
    bool seen = false;  // telemetry arrived for its GPUs
  };
  const RightSizing settings_;
  mutable std::mutex mu_;
  std::map<JobId, JobUsage> usage_;
};

}  // namespace rota::server
