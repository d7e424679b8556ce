// Actions: the steps of a scheduling cycle, named in order by the profile's
// `actions` list and run over one Session (Volcano's actions). They are
// plugins of the same registry, of three kinds:
//   CycleAction    - runs once a cycle: `allocate` (the pending jobs in
//                    order), `grow-elastic` (what is left free).
//   MakeRoomAction - inside allocate, for a job that does not fit as it is:
//                    frees room and places the job in the Txn
//                    (`shrink-elastic`). What it changed is recorded in the
//                    session (resizes), so that a refusal by quota undoes it.
//   BlockedAction  - inside allocate, for a job that still waits: acts for
//                    it (`preempt`, `reserve`, Kubernetes' PostFilter and
//                    Reserve points). True when it recorded the job's
//                    pending reason; it may amend `reason` either way.
//                    One that ActsOverQuota is asked for a job its
//                    queue's limits refuse as well.
// Make-room and blocked actions run in the order the list names them. An
// action keeps no state of its own: what a cycle remembers is the
// session's.
#pragma once

#include "sched/reason.h"

namespace rota::sched {

class Session;

class CycleAction : public virtual Plugin {
 public:
  virtual void Execute(Session& s) const = 0;
};

class MakeRoomAction : public virtual Plugin {
 public:
  // REQUIRES: s.request() is `job`'s and does not fit now. True: it fits,
  // placed in the Txn (kept).
  virtual bool MakeRoom(Session& s, const JobRecord& job) const = 0;
};

class BlockedAction : public virtual Plugin {
 public:
  // REQUIRES: s.request() is `job`'s; `reason` says why it waits (a
  // Unschedulable reason, not a rejection).
  virtual bool Blocked(Session& s, const JobRecord& job, PendingReason* reason) const = 0;
  // Whether it is asked for a job its queue's limits refuse too (`reason`
  // then Quota): `preempt`, which evicts gangs of the job's own queue that
  // it goes before, where that admits it (Kueue's withinClusterQueue:
  // LowerPriority). Others act only for a job that does not fit.
  virtual bool ActsOverQuota() const { return false; }
};

}  // namespace rota::sched
