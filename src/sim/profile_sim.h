// The production profile in virtual time: `rota sim --policy profile`. The
// simulator drives what the server drives, in the server's order:
//   1. the agents' reports due now (AgentModel: exits, checkpoints), through
//      the server's JobLifecycle (server/job_lifecycle.h);
//   2. the jobs submitted now, admitted as the server admits them
//      (ValidateNewJobSpec, ResolveJobPolicy, Scheduler::CheckResolvable;
//      a refused one never runs and is reported);
//   3. time limits and evicted gangs past their grace (JobLifecycle);
//   4. one engine cycle with the config's profile at the virtual time
//      (Scheduler::RunCycle), its decisions through sched::ToEvents and
//      server::ApplyDecisions.
// Steps come at every arrival, report, time limit and grace expiry, and at
// least every `tick` while a job waits (the server cycles every second and
// on every change). With services (TimeSimOptions::services), a step comes
// every second while any service's load runs: step 2 then also takes each
// service's autoscaler decision on what its ServiceModel measured (as the
// server's ServiceManager), and a service whose load ended is cancelled. Tenant limits (submit rate, pending limits) are not
// simulated.
//
// The same trace through the real controller, with emulated agents from the
// same model at the same step times, journals the same job events
// (differential_test.cc).
#pragma once

#include <vector>

#include "core/cluster_config.h"
#include "core/event.h"
#include "sim/agent_model.h"
#include "sim/time_sim.h"
#include "sim/trace.h"

namespace rota::sim {

// What one run did, for comparing drivers: its step times and the events it
// journaled, in order.
struct ProfileRecord {
  std::vector<TimePoint> steps;
  std::vector<Event> events;
};

// The job a trace job's user would submit: one task group "worker" of its
// replicas and GPUs (its model when it names one), its queue if the config
// has that leaf (else "default"), its priority as a number, its time limit,
// `options.preemptible` and a checkpoint grace of `options.grace`. Named
// "j<index>" (trace names need not be valid job names).
JobSpec ProfileJobSpec(const ClusterConfig& config, const TraceJob& job, size_t index, const TimeSimOptions& options);
// What the agent model runs for it.
ModelWork ProfileWork(const TraceJob& job, const TimeSimOptions& options);

// REQUIRES: options.policy == "profile". `record`, if not null, gets the steps and events.
StatusOr<TimeSimResult> RunProfileSim(const ClusterConfig& config, const std::vector<NodeSpec>& nodes,
                                      const std::vector<TraceJob>& jobs, const TimeSimOptions& options,
                                      ProfileRecord* record = nullptr);

// What-if on today's queue: a live state (a server's snapshot) projected
// forward with the same driver from `now`, nothing more submitted. Each job
// runs to its time limit; one without a limit for `default_run` (the median
// run time of the state's finished jobs, else an hour), and a running one
// for at least a tenth of that more. A start that comes after any such
// estimated end is marked an estimate. Steps are rounded up to whole
// `resolution`s (reports due inside one are taken together), coarser further
// ahead (a 32nd of the distance from now: 8 hours ahead, 15 minutes). Fair share
// starts from what the queues hold now (the server's decayed history is not
// in the snapshot).
struct WhatIfChange {
  std::vector<std::pair<std::string, int32_t>> add_nodes;  // more nodes of a config node group
  std::vector<std::string> drain;                          // nodes to drain
  bool empty() const { return add_nodes.empty() && drain.empty(); }
};
struct ProjectOptions {
  TimeSimOptions sim;  // tick, min_runtime, preempt_slack, save_time, checkpoint_interval
  Duration horizon = 30LL * 24 * 3600 * kMicrosPerSecond;
  Duration resolution = 60 * kMicrosPerSecond;
  Duration default_run = 0;  // 0: from the state's finished jobs
  // Wall time the projection may take (0 = any): past it, it stops and says
  // so (Projection::cut_short); starts not reached are left at -1.
  Duration wall_budget = 0;
  WhatIfChange change;
  // Jobs submitted at `now` by `user` (a dry run: where and when a job would
  // start), admitted as the server admits them; after the state's pending
  // jobs in Projection::jobs, with ids after the state's.
  std::vector<JobSpec> submit;
  // With is_array(), `submit` is one job array of this shape (its limit on
  // running elements holds in the projection too).
  ArrayRange submit_array;
  std::string user;
  // The queues' decayed past usage (average GPUs) the live scheduler has
  // now (sched::Scheduler::UsageHistory): fair share in the projection
  // starts from it, not from nothing.
  std::map<std::string, double> usage_history;
};
struct ProjectedStart {
  JobId job;
  TimePoint start = -1;  // -1: not within the horizon (or never: see why)
  bool estimate = false;
  std::string why;  // a job rejected in the projection (its queue or the changed cluster could never hold it)
  std::vector<ReplicaPlacement> placement;  // where it starts
};
struct Projection {
  std::vector<ProjectedStart> jobs;  // every pending job of the state, in id order
  // Jobs without a time limit run what the learned history expects
  // (sched::EstimateGpuSeconds; `learned` of them), else `default_run`.
  Duration default_run = 0;
  int64_t learned = 0;
  int64_t steps = 0;
  double wall_s = 0;
  bool cut_short = false;  // stopped by the wall budget, not by the horizon
};
// Errors: a change naming an unknown node group or node (InvalidArgument); a
// submitted job the server would refuse (its error).
StatusOr<Projection> Project(const ClusterConfig& config, const Snapshot& snap, TimePoint now, const ProjectOptions& options);

}  // namespace rota::sim
