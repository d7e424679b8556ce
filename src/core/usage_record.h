// Accounting: what one attempt of a job held (its allocation) and what it
// used (its GPUs' measured activity, memory and energy; its CPU), written to
// the store when the attempt ends (a run to its end, a preemption, a requeue,
// a resize of an elastic gang or a service). `rota report` reads these.
//
// GPU activity travels as a histogram of 1 Hz samples (ActivityHistogram):
// histograms of any number of GPUs and attempts merge exactly, so the
// percentiles of a week of a job family are those of its samples.
//
// Integers throughout (accounting never holds a double): seconds, MiB,
// millijoules, microseconds of CPU.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "base/clock.h"
#include "base/quantity.h"
#include "core/job.h"

namespace rota {

// Samples of GPU utilisation in 5% buckets: bucket b holds samples in
// [5b, 5b+5); the last (20) holds 100%.
struct ActivityHistogram {
  static constexpr int kBuckets = 21;
  std::array<int64_t, kBuckets> counts{};

  static int Bucket(int32_t pct) { return pct <= 0 ? 0 : pct >= 100 ? 20 : pct / 5; }
  void Add(int32_t pct, int64_t samples = 1) { counts[Bucket(pct)] += samples; }
  void Merge(const ActivityHistogram& other) {
    for (int b = 0; b < kBuckets; ++b) counts[b] += other.counts[b];
  }
  int64_t total() const;
  // The `p`th percentile (0..100) as the upper edge of its bucket (a bound:
  // 90% of samples were at or below it); -1 with no samples.
  int32_t Percentile(int32_t p) const;
  // The mean, from the bucket middles; -1 with no samples.
  int32_t Mean() const;
  bool operator==(const ActivityHistogram&) const = default;
};

struct UsageRecord {
  JobId job;
  int32_t attempt = 0;  // JobRecord::attempt() of the attempt that ended
  std::string name, user, queue;
  JobId array;                // the job's array (0 = none): its family
  std::string end;            // "succeeded", "failed", "cancelled", "preempted", "requeued", "resized"
  std::string reason;         // why it failed, was cancelled or requeued ("" = none)
  TimePoint started_at = 0, ended_at = 0;
  // Allocation: the GPUs it held (whole, or a share of one), by model.
  std::string gpu_model;
  MemoryMiB gpu_memory = 0;   // per GPU, of the model it ran on
  int32_t gpus = 0;           // whole GPUs over all replicas
  int32_t gpu_milli = 0;      // shares: thousandths of a GPU over all replicas
  std::string mig_profile;    // a MIG instance's profile ("" = none)
  MilliCpu cpu = 0;           // requested, over all replicas
  MemoryMiB memory = 0;
  int32_t replicas = 0;
  int32_t restarts = 0, preemptions = 0;
  int64_t lost_work_s = 0;    // a preemption's or requeue's run since the last checkpoint
  // Measured (whole GPUs only: a shared GPU's telemetry is the whole GPU's).
  ActivityHistogram activity;  // 1 Hz samples over all its GPUs
  MemoryMiB gpu_memory_peak = 0;  // the highest of any of its GPUs
  int64_t energy_mj = 0;       // its GPUs' energy
  int64_t cpu_used_us = 0;     // its tasks' CPU time
  int64_t cpu_throttled_us = 0;
  MemoryMiB memory_peak = 0;   // its tasks' host memory, the highest replica
  // Its GPUs at their nodes' price per GPU-hour (ClusterConfig::GpuHourPrice),
  // in millionths of the accounting currency; -1 = no node it ran on has a price.
  int64_t cost_micros = -1;
  bool measured() const { return activity.total() > 0; }

  int64_t seconds() const { return ended_at > started_at ? (ended_at - started_at) / kMicrosPerSecond : 0; }
  // GPU-seconds held, in thousandths (a quarter GPU for 4 s = 1000).
  int64_t gpu_milli_seconds() const { return (int64_t{gpus} * 1000 + gpu_milli) * seconds(); }
  bool operator==(const UsageRecord&) const = default;
};

}  // namespace rota
