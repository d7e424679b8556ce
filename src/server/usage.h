// UsageTracker: what the agents' reports say of each running job's use, per
// attempt: its GPUs' 1 Hz activity (a histogram), memory peak and energy,
// its tasks' CPU time and throttling, and the flags that follow from them:
// "idle: ...", "over-provisioned: ...", and "input-bound: ..." (GPUs that
// wait on a CPU saturated against its limit: a data pipeline that cannot
// feed them). When an attempt ends, Close turns its measure and allocation
// into a UsageRecord for the store. Only whole GPUs are measured: a shared
// GPU's telemetry is the whole GPU's.
//
// Thread-safety: thread-safe (its own lock). Heartbeats fold into it from the
// event loop and the actor; views read it; the actor closes attempts.
#pragma once

#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "api/agent_protocol.h"
#include "core/cluster_state.h"
#include "core/usage_record.h"

namespace rota::server {

struct RightSizing {
  // A running job whose GPUs stay below `idle_utilization_pct` for
  // `idle_after` is idle; one whose peak GPU memory stays under
  // `overprovisioned_pct` of its GPUs' memory that long, over-provisioned.
  int32_t idle_utilization_pct = 5;
  Duration idle_after = 30 * 60 * kMicrosPerSecond;
  int32_t overprovisioned_pct = 25;
  // Input-bound: GPU activity under `starved_gpu_pct` while the tasks' CPU
  // runs at `starved_cpu_pct` of their limit or more, for `starved_after`.
  int32_t starved_gpu_pct = 30;
  int32_t starved_cpu_pct = 90;
  Duration starved_after = 60 * kMicrosPerSecond;
  // Or: GPU activity that low while the CPU is busy (`starved_busy_cpu_pct`
  // of its limit) and the GPUs receive under `starved_pcie_kbps` a GPU over
  // PCIe: a pipeline that waits on its disk or network, not its CPU.
  int32_t starved_busy_cpu_pct = 50;
  int32_t starved_pcie_kbps = 50'000;
};

class UsageTracker {
 public:
  // `price` says what a GPU-hour on a node (by name and GPU model) costs, in
  // millionths (-1 = none): records carry their cost.
  using Price = std::function<int64_t(const std::string& node, const std::string& model)>;
  explicit UsageTracker(RightSizing settings, Price price = nullptr) : settings_(settings), price_(std::move(price)) {}

  // Folds `report` (from `node`, at `now`) into the use of the running jobs
  // among `jobs` (those indexed on the node).
  void Fold(const Snapshot& snap, const NodeState& node, const std::set<JobId>& jobs, const api::HeartbeatReport& report,
            TimePoint now);
  // The job's flags at `now`; none until telemetry arrived for its GPUs.
  std::vector<std::string> Flags(const Snapshot& snap, const JobRecord& job, TimePoint now) const;
  // The running attempt's measure so far, as a record ending at `now`
  // (for describe and the report of jobs still running).
  UsageRecord Peek(const Snapshot& snap, const JobRecord& job, TimePoint now) const;
  // The attempt `job` (as it was, running, in `snap`) ended at `at` with
  // `end`: its record; its measure is dropped.
  UsageRecord Close(const Snapshot& snap, const JobRecord& job, std::string end, std::string reason, TimePoint at);

 private:
  struct ReplicaCpu {
    int64_t cpu_us = 0, throttled_us = 0;  // cumulative, as last reported
    TimePoint at = 0;                      // when
  };
  struct JobUsage {
    TimePoint last_busy = 0;
    MemoryMiB peak_memory = 0;
    bool seen = false;  // telemetry arrived for its GPUs
    ActivityHistogram activity;
    int64_t energy_mj = 0;
    std::map<std::tuple<uint16_t, uint32_t, int32_t>, ReplicaCpu> cpu;  // by task, replica, attempt
    MemoryMiB host_peak = 0;
    // Input-bound: since when (0 = not now), and the last window's numbers.
    TimePoint starved_since = 0;
    int32_t starved_gpu = 0, starved_cpu = 0;
    int32_t starved_rx_kbps = -1;  // the PCIe input it was flagged by (-1 = by its CPU)
  };
  UsageRecord Record(const Snapshot& snap, const JobRecord& job, const JobUsage* u, TimePoint at) const;
  const RightSizing settings_;
  const Price price_;
  mutable std::mutex mu_;
  std::map<JobId, JobUsage> usage_;
};

}  // namespace rota::server
