// Time simulation: replays a job trace in virtual time. Every arrival,
// completion, demotion and failure is an event; at each event the policy
// orders the jobs and the placement starts (or, for preemptive policies,
// re-plans) what runs.
//
// Policies (job order):
//   fifo      submit order; the head blocks the queue (no backfill)
//   sjf       fewest GPUs first, preemptive
//   srtf      shortest remaining time first (oracle: knows durations)
//   srtf-gpu  shortest remaining GPU-time first (oracle)
//   las       discretized least attained service (3 queues on seconds)
//   tiresias  discretized 2D-LAS (3 queues on GPU-seconds: 3,250 / 7,200)
//   gittins   2D-Gittins: tiresias' queues, Gittins index inside each
//   rota      rota's default: see RotaOrder in time_sim.cc; non-clairvoyant
//   profile   the config's profile, as the server runs it: the engine's
//             actions over one session (priorities, queues, quotas and
//             borrowing, fair share, backfill reservations, preemption
//             through the checkpoint protocol, elastic), the server's job
//             lifecycle and a model of its agents (profile_sim.h). The
//             policies above are the research baselines.
// Placements:
//   count     GPU counting only (no nodes), free preemption: the Tiresias
//             simulator's `count` scheme
//   topology  the engine's default placer (packs by topology), through
//             ClusterState::Apply and Scheduler::RunCycle
//   bestfit   the engine with the binpack scorer; spread: the spread scorer
//
// Semantics of the count scheme follow the Tiresias simulator exactly (event
// order: completions, arrivals, then one plan; preemptive policies re-plan
// the whole runnable set greedily in order, skipping what does not fit;
// inside a tiresias queue running jobs stay ahead of waiting ones), except
// that demotion wake-ups are at the exact GPU-time crossing.
#pragma once

#include <chrono>
#include <functional>
#include <string>
#include <vector>

#include "core/cluster_config.h"
#include "core/node.h"
#include "sim/metrics.h"
#include "sim/service_model.h"
#include "sim/trace.h"

namespace rota::sim {

struct TimeSimOptions {
  std::string policy = "rota";
  std::string placement = "topology";
  uint64_t seed = 42;
  // GPU failures per GPU-hour (a quarter of them take the whole node); a
  // failed GPU is repaired after `repair_time`.
  double failure_rate = 0;
  Duration repair_time = 3600 * kMicrosPerSecond;
  // For jobs whose trace gives none; 0 = no checkpoints.
  Duration checkpoint_interval = 1800 * kMicrosPerSecond;
  // Gittins: attained GPU-seconds of finished jobs of the target workload.
  // Empty: learnt online from the jobs that finish in this run.
  std::vector<int64_t> gittins_samples;
  // Called now and then with the fraction of jobs finished.
  std::function<void(double)> progress;

  // The production profile (policy "profile"; profile_sim.h):
  // A cycle runs at every event and at least this often while jobs wait,
  // except ticks before the engine's CycleResult::unchanged_until (and the
  // next checkpoint of a gang in its waits_on_checkpoint) after a cycle
  // that decided nothing: those would decide nothing either, so the run's
  // decisions are the same without them. `every_tick` runs them anyway.
  Duration tick = 60 * kMicrosPerSecond;
  bool every_tick = false;
  // As the server's (ControllerOptions): a gang runs this long before it
  // can be evicted; an evicted gang is requeued this long past its grace.
  Duration min_runtime = 10 * 60 * kMicrosPerSecond;
  Duration preempt_slack = 30 * kMicrosPerSecond;
  // Trace jobs' checkpoint grace (their spec's checkpoint.grace), and how
  // long a job takes to save on the signal within it.
  Duration grace = 0;
  Duration save_time = 30 * kMicrosPerSecond;
  // Trace jobs may be preempted (and so borrow beyond their queue's guarantee).
  bool preemptible = true;
  // Services and their requests (ServiceModel), beside the trace; the run
  // lasts until the trace is done and the last service's load has ended.
  std::vector<ServiceLoad> services;
};

struct TimeSimResult {
  std::vector<JobResult> jobs;  // in trace order
  std::vector<Sample> samples;
  Summary summary;
  int64_t total_gpus = 0;
  std::vector<double> cycle_ms;  // engine cycle wall times
  int64_t cycles_skipped = 0;    // profile: steps whose cycle would have decided nothing
  std::vector<std::string> never;  // jobs no node could ever hold: "name: why"
  std::vector<ServiceResult> services;  // in options.services' order
};

// Fills `result->summary` from its jobs, samples and cycle times, with the
// wall time since `start` (both drivers of a time simulation end so).
void FinishSummary(TimeSimResult* result, int64_t total_gpus, std::chrono::steady_clock::time_point start);

// Known names, for help and errors.
const std::vector<std::string>& TimePolicies();
const std::vector<std::string>& TimePlacements();

// `nodes` are the cluster; `config` gives topology levels, queues and
// priority classes for the engine placements. Errors: unknown policy or
// placement, a job no node could ever hold under a node placement (it is
// reported, not dropped silently: the run fails with its name).
StatusOr<TimeSimResult> RunTimeSim(const ClusterConfig& config, const std::vector<NodeSpec>& nodes,
                                   const std::vector<TraceJob>& jobs, const TimeSimOptions& options);

// The Gittins index of a job with `attained` GPU-seconds, given the sorted
// samples of the workload's total GPU-seconds and the quantum `delta`: the
// probability of finishing within the next `delta` over the expected service
// spent until then. Higher goes first.
class GittinsTable {
 public:
  GittinsTable() = default;
  GittinsTable(std::vector<int64_t> samples, int64_t delta);
  double Index(double attained) const;
  bool empty() const { return data_.empty(); }

 private:
  std::vector<int64_t> data_;  // sorted, with a sentinel
  std::vector<double> index_;
};


}  // namespace rota::sim
