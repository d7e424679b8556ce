// CycleResult: what one scheduling cycle decided, in the order the actions
// decided it. Drivers turn it into events with ToEvents (to_events.h).
#pragma once

#include <algorithm>
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
  // Whether the cycle placed, evicted, resized, reconfigured or rejected anything.
  bool decided() const {
    return !placed.empty() || !preemptions.empty() || !resizes.empty() || !reconfigurations.empty() ||
           !unresolvable.empty();
  }
  // When a cycle that decided nothing may next decide something while the
  // state stays as it is (0: at any time; no promise): the earliest time a
  // gang's minimum run time or hourly eviction cap runs out for a job it
  // was weighed against, a nomination expires, an elastic gang may shrink
  // or grow again, a blocked job's earliest start comes within the
  // reservation window, a job that may backfill no longer ends before the
  // reservation, or the ranking order's ranks change. Not promised where time
  // moves the order (an order that is not timeless) or fair share (decayed
  // usage). A checkpoint of a gang in `waits_on_checkpoint` may change it
  // sooner: the job order kept a job from evicting it only for the work
  // it would lose.
  TimePoint unchanged_until = 0;
  std::vector<JobId> waits_on_checkpoint;
  // A waiting job and why, in `pending` (or `unresolvable`). The cycle
  // writes `pending` over the entries it held before (Clear keeps them;
  // Seal drops what is left over), and a reason an entry holds already is
  // not copied again: a long queue that waits as it did costs no reference
  // counting (with a million pending jobs, two atomic operations each).
  void Wait(JobId job, const PendingReason& why) {
    if (written_ < pending.size()) {
      Waiting& w = pending[written_];
      w.job = job;
      w.reason.code = why.code;
      w.reason.expected_start = why.expected_start;
      ReasonText& text = w.reason.message;
      if (!text.SameText(why.message)) {
        // A reason made again each cycle (a shape's failure) is a new text
        // with the old words: keep the old text. The last pair found equal
        // is remembered (held, so that neither address is reused meanwhile).
        if (!(text.SameText(equal_old_) && why.message.SameText(equal_new_))) {
          if (text.str() == why.message.str()) {
            equal_old_ = text;
            equal_new_ = why.message;
          } else {
            text = why.message;
          }
        }
      }
    } else {
      pending.push_back({job, why});
    }
    ++written_;
  }
  void Wait(JobId job, const PendingReason& why, bool never) {
    if (never) unresolvable.push_back({job, why});
    else Wait(job, why);
  }
  void Clear() {
    placed.clear();
    replicas.clear();
    written_ = 0;  // (the entries are written over, then sealed)
    unresolvable.clear();
    reservations.clear();
    preemptions.clear();
    reconfigurations.clear();
    resizes.clear();
    unchanged_until = 0;
    waits_on_checkpoint.clear();
  }
  // The end of a cycle: `pending` holds this cycle's waiting jobs only.
  void Seal() { pending.resize(std::min(written_, pending.size())); }

 private:
  size_t written_ = 0;  // entries of `pending` this cycle wrote
  ReasonText equal_old_, equal_new_;
};

}  // namespace rota::sched
