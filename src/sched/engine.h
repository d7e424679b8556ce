// Scheduler: the engine. A pure function of its inputs: a Snapshot, a time
// (or none) and a profile in, decisions out. No I/O, no clock, no threads
// of its own; the server, `rota plan` and the simulator are drivers of the
// same RunCycle.
//
// One cycle is the profile's actions over one Session (session.h): by
// default `allocate` (the pending jobs in order, each placed as a gang in a
// Txn or told why it waits; inside it `shrink-elastic` makes room, and for a
// job that still waits `preempt` and `reserve` act), then `grow-elastic`.
// Plugins hook in at the named points (framework.h). Capacity bound earlier
// in the cycle is taken for later jobs.
//
// Thread-safety: one owner. Reuses its memory across cycles: at steady state
// a placement does not allocate.
//
// Example:
//   ROTA_ASSIGN_OR_RETURN(auto scheduler, Scheduler::Create(config, EngineOptions::FromConfig(config)));
//   CycleResult result;
//   scheduler->RunCycle(state.GetSnapshot(), now, &result);
#pragma once

#include <map>
#include <memory>
#include <string>

#include "sched/cycle_result.h"
#include "sched/options.h"
#include "sched/queues.h"
#include "sched/reason.h"
#include "sched/registry.h"
#include "sched/session.h"

namespace rota::sched {

class Scheduler {
 public:
  // The profile, queues, quotas and priority classes from `config`; every
  // other setting from `options`.
  static StatusOr<std::unique_ptr<Scheduler>> Create(const ClusterConfig& config, const EngineOptions& options,
                                                     const Registry& registry = BuiltinRegistry());
  // With EngineOptions::FromConfig(config).
  static StatusOr<std::unique_ptr<Scheduler>> Create(const ClusterConfig& config) {
    return Create(config, EngineOptions::FromConfig(config));
  }

  // Decides placements for the snapshot's pending jobs at time `now`: the
  // first `reservation_depth` blocked jobs (in order) get reservations from
  // the running jobs' time limits, and later jobs backfill around them;
  // blocked jobs may preempt. With queues and a fair-share half-life, the
  // queues' decayed usage moves on to `now` first. `out` is cleared first.
  void RunCycle(const Snapshot& snap, TimePoint now, CycleResult* out);
  // Without a time: greedy in order; no reservations, preemption or
  // nominations (what-if tools and throughput benchmarks that have no clock).
  void RunCycle(const Snapshot& snap, CycleResult* out);

  const EngineOptions& options() const { return options_; }
  // Replaces every setting at once (a driver that changes one between
  // cycles, e.g. the simulator's jobs per cycle).
  void SetOptions(const EngineOptions& options) { options_ = options; }

  // Decayed past usage per leaf queue (average GPUs over the decay window).
  // RunCycle with a time keeps it itself, from what the queues hold at each
  // cycle (H <- H * 2^(-dt / half_life) + held * dt); this replaces it (a
  // driver restoring it, tests).
  void SetUsageHistory(const std::map<std::string, double>& average_gpus);
  // The same as it stands after the last cycle (empty without queues or a
  // half-life): what a projection of the queue starts from.
  std::map<std::string, double> UsageHistory() const;
  // Rebuilds the decayed usage at `now` from the jobs' own records: each
  // attempt a job remembers (JobRecord::attempts, the last kMaxAttempts)
  // and the one running now, on as many GPUs as its placement holds,
  // decayed continuously (the cycles' sum, without its steps), and the
  // GPU-time of the jobs it forgot, by day (Snapshot::forgotten_usage). What a
  // restarted server, or a standby taking over, starts from: the fair share
  // the queues had earned goes on rather than starting from zero.
  void RestoreUsage(const Snapshot& snap, TimePoint now);

  // Checks a job against the cluster as if it were empty: OK, or the reason
  // no node or domain could ever hold it, or its queue could never admit it
  // (for rejecting at submission). A cluster with no node at all judges
  // nothing: OK.
  PendingReason CheckResolvable(const Snapshot& snap, const JobRecord& job);

  const Profile& profile() const { return profile_; }

 private:
  Scheduler(Profile profile, const ClusterConfig& config, const EngineOptions& options);
  void Run(const Snapshot& snap, const TimePoint* now, CycleResult* out);
  void DecayUsage(const Snapshot& snap, TimePoint now);
  // Why the job's queue could never admit it, even empty (OK if it could).
  // REQUIRES: the session's request is the job's.
  PendingReason NeverAdmitted(const Snapshot& snap, const JobRecord& job);

  Profile profile_;
  EngineOptions options_;
  QueueBook book_;
  Session session_;
  // Fair share: per leaf queue, GPU-microseconds decayed by the half-life.
  std::map<std::string, double> decayed_usage_;
  TimePoint decayed_at_ = 0;
};

}  // namespace rota::sched
