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
// on every change). Tenant limits (submit rate, pending limits) are not
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

}  // namespace rota::sim
