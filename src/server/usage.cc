#include "server/usage.h"

#include <algorithm>
#include <bit>
#include <cstdio>

#include "core/mig.h"
#include "server/job_lifecycle.h"

namespace rota::server {

// Products of prices, GPU-thousandths and seconds overflow 64 bits.
__extension__ typedef __int128 Wide;

namespace {

// The GPUs of `job` on `node` that it holds whole.
uint64_t WholeGpusOn(const JobRecord& job, NodeId node) {
  uint64_t mask = 0;
  for (const ReplicaPlacement& r : job.placement) {
    if (r.node == node && !r.shares_gpu()) mask |= r.gpu_mask;
  }
  return mask;
}

}  // namespace

void UsageTracker::Fold(const Snapshot& snap, const NodeState& node, const std::set<JobId>& jobs,
                        const api::HeartbeatReport& report, TimePoint now) {
  if (report.gpus.empty() && report.tasks.empty()) return;
  std::lock_guard<std::mutex> lock(mu_);
  for (JobId id : jobs) {
    const JobRecord* job = snap.FindJob(id);
    if (job == nullptr || job->state != JobState::kRunning) continue;
    const uint64_t mask = WholeGpusOn(*job, node.id);
    JobUsage* u = nullptr;
    // Its GPUs' window: activity, memory, energy.
    ActivityHistogram window;
    int64_t rx_sum = 0, rx_gpus = 0;  // its GPUs' PCIe input, where measured
    for (const api::GpuTelemetry& g : report.gpus) {
      if (g.index < 0 || g.index >= 64 || !((mask >> g.index) & 1)) continue;
      if (g.samples > 0 && g.pcie_rx_kbps >= 0) {
        rx_sum += g.pcie_rx_kbps;
        ++rx_gpus;
      }
      if (u == nullptr) u = &usage_[id];
      u->seen = true;
      u->peak_memory = std::max({u->peak_memory, g.memory_used, g.memory_peak});
      if (g.utilization_pct >= settings_.idle_utilization_pct) u->last_busy = now;
      u->energy_mj += g.energy_mj;
      for (size_t b = 0; b < g.activity.size() && b < ActivityHistogram::kBuckets; ++b) window.counts[b] += g.activity[b];
      // A busy second in the window counts as busy (the instant may not be).
      if (window.total() > 0 && window.Percentile(100) > settings_.idle_utilization_pct) u->last_busy = now;
    }
    if (u != nullptr) u->activity.Merge(window);
    // Its tasks' CPU: cumulative per replica attempt; the rate over the
    // window is against the replicas' limits.
    int64_t cpu_delta_us = 0;
    int64_t limit_us = 0;  // CPU-microseconds the limits allowed over the window
    TimePoint window_from = now;
    for (const api::TaskReport& t : report.tasks) {
      if (t.job != id || t.exited || t.cpu_used_us < 0) continue;
      // Only the replicas placed on this node, at their attempt: a report
      // cannot grow the job's table with replicas or attempts of its choosing.
      if (!PlacedOn(*job, node.id, t) || t.attempt != job->ReplicaAttempt(t.replica)) continue;
      if (u == nullptr) u = &usage_[id];
      ReplicaCpu& c = u->cpu[{t.task, t.replica, t.attempt}];
      // Its first report counts from the attempt's start (its CPU time is
      // since then), so a starved job shows from its first minute.
      const TimePoint began = std::max(job->started_at, job->resized_at);
      if (c.at == 0 && began > 0 && began < now) c.at = began;
      const TaskGroupSpec* group = t.task < job->spec().tasks.size() ? &job->spec().tasks[t.task] : nullptr;
      if (c.at > 0 && now > c.at && t.cpu_used_us >= c.cpu_us && group != nullptr && group->cpu > 0) {
        cpu_delta_us += t.cpu_used_us - c.cpu_us;
        limit_us += (now - c.at) * group->cpu / 1000;
        window_from = std::min(window_from, c.at);
      }
      c.cpu_us = std::max(c.cpu_us, t.cpu_used_us);
      c.throttled_us = std::max(c.throttled_us, t.cpu_throttled_us);
      c.at = now;
      u->host_peak = std::max(u->host_peak, t.memory_peak);
    }
    if (u == nullptr) continue;
    // Input-bound: this window's GPUs were mostly waiting while the CPU ran
    // at its limit. A window without both measures says nothing.
    if (window.total() > 0 && limit_us > 0) {
      const int32_t gpu = window.Mean();
      const int32_t cpu = static_cast<int32_t>(cpu_delta_us * 100 / limit_us);
      const int32_t rx = rx_gpus > 0 ? static_cast<int32_t>(rx_sum / rx_gpus) : -1;
      const bool saturated = cpu >= settings_.starved_cpu_pct;
      const bool fed_slowly = rx >= 0 && rx < settings_.starved_pcie_kbps && cpu >= settings_.starved_busy_cpu_pct;
      if (gpu < settings_.starved_gpu_pct && (saturated || fed_slowly)) {
        if (u->starved_since == 0) u->starved_since = window_from;
        u->starved_gpu = gpu;
        u->starved_cpu = cpu;
        u->starved_rx_kbps = saturated ? -1 : rx;
      } else {
        u->starved_since = 0;
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
  if (u.starved_since > 0 && now - u.starved_since >= settings_.starved_after) {
    char input[64] = "";
    if (u.starved_rx_kbps >= 0) {
      std::snprintf(input, sizeof input, " with %.1f MB/s PCIe input", u.starved_rx_kbps / 1000.0);
    }
    flags.push_back("input-bound: GPU activity " + std::to_string(u.starved_gpu) + "%" + input + " while its CPU runs at " +
                    std::to_string(u.starved_cpu) + "% of its limit, for " + FormatSpan(now - u.starved_since));
  }
  return flags;
}

UsageRecord UsageTracker::Record(const Snapshot& snap, const JobRecord& job, const JobUsage* u, TimePoint at) const {
  UsageRecord r;
  r.job = job.id;
  r.attempt = job.attempt();
  r.name = job.spec().name;
  r.user = job.user;
  r.queue = job.spec().queue;
  r.array = job.array;
  r.started_at = std::max(job.started_at, job.resized_at);
  r.ended_at = std::max(at, r.started_at);
  r.restarts = job.restarts;
  r.replicas = static_cast<int32_t>(job.placement.size());
  for (const ReplicaPlacement& p : job.placement) {
    const NodeState& node = snap.node(p.node);
    if (r.gpu_model.empty()) {
      r.gpu_model = node.spec.gpu_model;
      r.gpu_memory = node.spec.gpu_memory;
    }
    const int64_t milli_before = int64_t{r.gpus} * 1000 + r.gpu_milli;
    if (p.mig_start >= 0) {
      r.gpu_milli += 1000 * MigProfileCompute(job.spec().tasks[p.task].gpu_share.mig_profile) / kMigComputeSlices;
      r.mig_profile = job.spec().tasks[p.task].gpu_share.mig_profile;
    } else if (p.gpu_milli > 0) {
      r.gpu_milli += p.gpu_milli;
    } else {
      r.gpus += std::popcount(p.gpu_mask);
    }
    if (const int64_t price = price_ ? price_(node.spec.name, node.spec.gpu_model) : -1; price >= 0) {
      // This replica's thousandths of a GPU, for its seconds, at its node's price.
      const Wide milli = int64_t{r.gpus} * 1000 + r.gpu_milli - milli_before;
      r.cost_micros = std::max<int64_t>(r.cost_micros, 0) +
                      static_cast<int64_t>(milli * r.seconds() * price / (1000 * 3600));
    }
    if (p.task < job.spec().tasks.size()) {
      r.cpu += job.spec().tasks[p.task].cpu;
      r.memory += job.spec().tasks[p.task].memory;
    }
  }
  if (u != nullptr) {
    r.activity = u->activity;
    r.gpu_memory_peak = u->peak_memory;
    r.energy_mj = u->energy_mj;
    for (const auto& [key, c] : u->cpu) {
      r.cpu_used_us += c.cpu_us;
      r.cpu_throttled_us += std::max<int64_t>(0, c.throttled_us);
    }
    r.memory_peak = u->host_peak;
  }
  return r;
}

UsageRecord UsageTracker::Peek(const Snapshot& snap, const JobRecord& job, TimePoint now) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = usage_.find(job.id);
  return Record(snap, job, it == usage_.end() ? nullptr : &it->second, now);
}

UsageRecord UsageTracker::Close(const Snapshot& snap, const JobRecord& job, std::string end, std::string reason,
                                TimePoint at) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = usage_.find(job.id);
  UsageRecord r = Record(snap, job, it == usage_.end() ? nullptr : &it->second, at);
  if (it != usage_.end()) usage_.erase(it);
  r.end = std::move(end);
  r.reason = std::move(reason);
  if (r.end == "preempted") r.preemptions = 1;
  // Work lost: what ran since its last checkpoint (or since it started).
  if (r.end == "preempted" || r.end == "requeued") {
    r.lost_work_s = (r.ended_at - std::max(r.started_at, std::min(job.last_checkpoint_at, r.ended_at))) / kMicrosPerSecond;
  }
  return r;
}

}  // namespace rota::server
