// RunHistory: what the learned job order (sched/plugins/learned) learns
// from, as engine state derived from the journal's events.
//   - The GPU-time of the jobs that ended on their own (succeeded or
//     failed), binned on the learned order's log-spaced bins (factor sqrt 2
//     of GPU-seconds), and the sums of their log GPU-seconds.
//   - Sweeps: jobs submitted together (same queue and GPU count, each at
//     most kSweepWindow after the sweep's last) share a distribution, so a
//     sweep's finished jobs say how long its others will run. Every job
//     belongs to one (JobRecord::sweep: the id of its first job; a job alone
//     is a sweep of one). A sweep is kept while it has live jobs or may
//     still take new ones (it is the latest of its queue and GPU count), so
//     memory follows the live jobs, not the store.
// Every number is an integer (log values in fixed point), so the same
// events in any order of finishing give the same history, bit for bit.
// ClusterState keeps it (Apply); a journal snapshot carries it whole
// (the RunHistoryState event), so a restart resumes it exactly.
#pragma once

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstdint>
#include <map>
#include <string>
#include <utility>

#include "base/clock.h"
#include "core/job.h"

namespace rota {

struct RunHistory {
  static constexpr int kBins = 64;
  // Bin i holds GPU-seconds in [Edge(i), Edge(i + 1)): Edge(i) = 2^(i/2);
  // bin 0 also holds everything below 1, the last everything above.
  // (An odd edge is sqrt 2, correctly rounded, times a power of 2: exact,
  // what std::pow(2.0, i / 2.0) gave here with glibc, and no guard of a
  // static to pass.)
  static constexpr std::array<double, kBins + 1> kEdges = [] {
    std::array<double, kBins + 1> e{};
    double power = 1;
    for (int i = 0; i <= kBins; i += 2, power *= 2) {
      e[i] = power;
      if (i < kBins) e[i + 1] = power * 1.4142135623730951;
    }
    return e;
  }();
  static const std::array<double, kBins + 1>& Edges() { return kEdges; }
  static double Edge(int i) { return kEdges[i]; }
  static int Bin(double gpu_seconds) {
    const auto& e = kEdges;
    // Between 1 and the last bin, from the exponent: 2^k <= x < 2^(k+1) is
    // Edge(2k) <= x < Edge(2k + 2) (powers of 2 are exact), so x is in bin
    // 2k or 2k + 1 (a learned order asks for every job's bin every cycle).
    if (gpu_seconds >= 1 && gpu_seconds < e[kBins - 1]) {
      // (The exponent of a normal double: std::ilogb's, without its call.)
      const int k = static_cast<int>(std::bit_cast<uint64_t>(gpu_seconds) >> 52 & 0x7ff) - 1023;
      return gpu_seconds >= e[2 * k + 1] ? 2 * k + 1 : 2 * k;
    }
    // The last edge not above it (bin 0 below 1).
    const int i = static_cast<int>(std::upper_bound(e.begin(), e.begin() + kBins, gpu_seconds) - e.begin()) - 1;
    return std::clamp(i, 0, kBins - 1);
  }
  // Log values are kept as llround(value * kLogScale).
  static constexpr double kLogScale = 1 << 20;
  static constexpr Duration kSweepWindow = 60 * kMicrosPerSecond;

  int64_t count[kBins] = {};        // jobs ended on their own, per bin
  int64_t gpu_seconds[kBins] = {};  // their GPU-seconds (rounded), per bin
  int64_t finished = 0;
  int64_t log_sum = 0;  // of log(max(1, GPU-seconds)), fixed point
  int64_t log_sq = 0;   // of its square, fixed point

  struct Sweep {
    int64_t live = 0;      // its jobs not ended
    int64_t finished = 0;  // its jobs ended on their own
    int64_t log_sum = 0, log_sq = 0;
    bool operator==(const Sweep&) const = default;
  };
  std::map<uint64_t, Sweep> sweeps;  // by sweep id
  // The latest sweep of each (queue, GPUs): a job submitted within the
  // window of its last job joins it.
  struct Open {
    JobId sweep;
    JobId last;  // its latest job
    TimePoint last_submit = 0;
    bool operator==(const Open&) const = default;
  };
  std::map<std::pair<std::string, int64_t>, Open> open;

  // The sweep of new job `id` (queue and GPU count `key`, submitted `at`):
  // `given` if not none (a journal snapshot's), else the open sweep's if
  // `at` is within its window, else a new one (`id`). Counts the job live.
  JobId Join(const std::pair<std::string, int64_t>& key, JobId id, TimePoint at, JobId given, int64_t jobs = 1);
  // A job of `sweep` ended: on its own (`finished`, after `gpu_time`
  // GPU-seconds) or not (cancelled).
  void End(JobId sweep, bool finished, double gpu_time);

  bool operator==(const RunHistory& o) const;

 private:
  // Drops `sweep` if it has no live job and is not open.
  void MaybeDrop(JobId sweep);
};

}  // namespace rota
