// Scheduler: the engine. A pure function of its inputs: a Snapshot and a
// Profile in, decisions out. No I/O, no clock, no threads of its own; the
// server and the simulator are two drivers of the same RunCycle.
//
// One cycle: order the pending jobs (JobOrder plugins), then for each job
// build its request, let the placer bind every replica inside a Txn, and
// commit the gang only if every JobReady plugin agrees; otherwise roll back
// and explain why it waits. Capacity bound earlier in the cycle is taken for
// later jobs. A job whose shape already failed this cycle fails again without
// a search (nothing is freed within a cycle).
//
// Thread-safety: one owner. Reuses its memory across cycles: at steady state
// a placement does not allocate.
//
// Example:
//   ROTA_ASSIGN_OR_RETURN(auto scheduler, Scheduler::Create(config.profile));
//   CycleResult result;
//   scheduler->RunCycle(state.GetSnapshot(), &result);
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "sched/place_context.h"
#include "sched/reason.h"
#include "sched/registry.h"
#include "sched/workspace.h"

namespace rota::sched {

// A gang bound this cycle: replicas [first, first + count) of CycleResult::replicas.
struct Placed {
  JobId job;
  uint32_t first = 0;
  uint32_t count = 0;
};

struct Waiting {
  JobId job;
  PendingReason reason;
};

struct CycleResult {
  uint64_t revision = 0;  // of the snapshot the decisions were made on
  std::vector<Placed> placed;
  std::vector<ReplicaPlacement> replicas;
  std::vector<Waiting> pending;       // Unschedulable: may fit later
  std::vector<Waiting> unresolvable;  // can never fit this cluster: reject
  void Clear() {
    placed.clear();
    replicas.clear();
    pending.clear();
    unresolvable.clear();
  }
};

class Scheduler {
 public:
  static StatusOr<std::unique_ptr<Scheduler>> Create(const ProfileConfig& config,
                                                     const Registry& registry = BuiltinRegistry());

  // Decides placements for the snapshot's pending jobs. `out` is cleared first.
  void RunCycle(const Snapshot& snap, CycleResult* out);

  // Checks a job against the cluster as if it were empty: OK, or the reason
  // no node or domain could ever hold it (for rejecting at submission).
  PendingReason CheckResolvable(const Snapshot& snap, const JobRecord& job);

  const Profile& profile() const { return profile_; }

 private:
  explicit Scheduler(Profile profile);
  // Fills request_ for `job`; false (with *why) if it cannot be scheduled at all.
  bool BuildRequest(const Snapshot& snap, const JobRecord& job, PendingReason* why);
  bool SameShape(const JobRecord& a, const JobRecord& b) const;

  Profile profile_;
  Workspace ws_;
  Txn txn_;
  PlaceContext ctx_;
  JobRequest request_;
  Labels empty_labels_;
  std::vector<const JobRecord*> order_;
  struct Failure {
    const JobRecord* job;
    PendingReason reason;
    bool unresolvable;
  };
  std::vector<Failure> failures_;  // shapes that failed this cycle
};

}  // namespace rota::sched
