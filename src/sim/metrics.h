// Metrics of a simulated run: what happened to each job, the cluster over
// time, and the summary numbers `rota sim` prints (the JSON keys are the
// field names below).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "base/quantity.h"

namespace rota::sim {

struct JobResult {
  std::string name;
  std::string queue;
  int64_t gpus = 0;  // over all replicas
  TimePoint submit = 0;
  TimePoint first_start = -1;  // -1: never started
  TimePoint end = -1;          // -1: did not finish
  Duration duration = 0;       // its run time alone
  int32_t preemptions = 0;
  int32_t restarts = 0;         // after failures
  double lost_gpu_seconds = 0;  // work redone after preemptions and failures
  Duration jct() const { return end - submit; }
};

// The cluster at one instant, recorded at every change.
struct Sample {
  TimePoint t = 0;
  int64_t allocated_gpus = 0;
  int32_t pending = 0;
  int32_t running = 0;
};

struct Summary {
  int64_t jobs = 0;
  int64_t unfinished = 0;  // never finished (could not fit the cluster, or the run was cut)
  double avg_jct_s = 0;
  double p50_jct_s = 0;
  double p95_jct_s = 0;
  double p99_jct_s = 0;
  double avg_queue_s = 0;  // time not running: JCT minus run time
  double makespan_s = 0;   // last end - first submit
  double gpu_alloc_pct_mean = 0;  // time-weighted, over the makespan
  double jain = 1;                // of queues' mean speed (run time / JCT)
  // Fragmentation in time: the unallocated share of the GPUs, time-weighted
  // over the periods when jobs were waiting (0 = waiting only when full).
  double idle_while_waiting_pct = 0;
  int64_t preemptions = 0;
  int64_t restarts = 0;
  double lost_gpu_hours = 0;
  double goodput_pct = 100;  // useful GPU time / allocated GPU time
  double wall_s = 0;
  double sim_days_per_wall_s = 0;
  double cycle_p50_ms = 0;  // engine cycle latency (wall time; not deterministic)
  double cycle_p99_ms = 0;
  int64_t cycles = 0;
  int64_t cycles_skipped = 0;  // profile: steps whose cycle would have decided nothing (not run)
};

// Nearest-rank percentile of `values` (sorted in place), p in [0, 100].
double Percentile(std::vector<double>& values, double p);

// Jain's fairness index of `x`: (sum x)^2 / (n sum x^2); 1 = equal.
double Jain(const std::vector<double>& x);

Summary Summarize(const std::vector<JobResult>& jobs, const std::vector<Sample>& samples, int64_t total_gpus);

}  // namespace rota::sim
