// CycleResult: what one scheduling cycle decided, in the order the actions
// decided it. Drivers turn it into events with ToEvents (to_events.h).
#pragma once

#include <string>
#include <vector>

#include "core/cluster_state.h"
#include "sched/reason.h"

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

// GPUs held for a blocked job from the time enough running jobs will have
// ended (by their time limits). Lower jobs backfill around it: on other GPUs,
// or on these if their own time limit ends before `start`.
struct Reservation {
  JobId job;
  TimePoint start = 0;
  std::vector<ReplicaPlacement> replicas;
};

// Evict `victim` (a whole gang) to make room for `preemptor`: send it its
// checkpoint signal, wait the grace period, stop it and requeue it.
struct Preemption {
  JobId victim;
  JobId preemptor;
  std::string reason;
  std::string signal;
  Duration grace = 0;
};

// Re-partition an idle MIG GPU (none of its instances in use) to `layout`
// (core/mig.h text), so that a pending MIG request fits. Applied before the
// placements that use it.
struct Reconfiguration {
  NodeId node;
  int32_t gpu = 0;
  std::string layout;
  std::string before;  // the layout it replaces
};

// Change a running elastic job's gang to `replicas` (its whole new
// placement): shrink it (down to its min_replicas) so that `for_job` fits, or
// grow it into GPUs nothing else wanted this cycle.
struct Resize {
  JobId job;
  std::vector<ReplicaPlacement> replicas;
  std::string reason;
  JobId for_job;  // the job a shrink makes room for (none for a growth)
};

struct CycleResult {
  uint64_t revision = 0;  // of the snapshot the decisions were made on
  std::vector<Placed> placed;
  std::vector<ReplicaPlacement> replicas;
  std::vector<Waiting> pending;       // Unschedulable: may fit later
  std::vector<Waiting> unresolvable;  // can never fit this cluster: reject
  std::vector<Reservation> reservations;
  std::vector<Preemption> preemptions;
  std::vector<Reconfiguration> reconfigurations;
  std::vector<Resize> resizes;  // applied before placements
  void Clear() {
    placed.clear();
    replicas.clear();
    pending.clear();
    unresolvable.clear();
    reservations.clear();
    preemptions.clear();
    reconfigurations.clear();
    resizes.clear();
  }
};

}  // namespace rota::sched
