// ToEvents: a cycle's decisions as the events that carry them out, in the
// one order every driver (the server, `rota plan`, the simulator) applies
// them:
//   1. GpuReconfigured - MIG GPUs re-partitioned for this cycle's placements;
//   2. JobResized      - elastic gangs shrink (freeing GPUs the placements
//                        use) or grow; each restarts with its new size;
//   3. JobBound        - the placements, in decision order, started at `now`;
//   4. JobPreempting   - the evictions (victims get their checkpoint signal);
//   5. JobCancelled    - jobs no node could ever hold ("unresolvable: ...").
// Pending reasons and reservations are the cycle's explanation, not events.
// A driver applies the events against its current state: one refused there
// (the job or its GPUs changed since the snapshot) is dropped, and the next
// cycle decides again.
//
// Example:
//   for (Event& e : ToEvents(result, snap, now)) state.Apply(std::move(e)).IgnoreError();
#pragma once

#include <vector>

#include "core/event.h"
#include "sched/cycle_result.h"

namespace rota::sched {

// REQUIRES: `result` was decided on `snap`.
std::vector<Event> ToEvents(const CycleResult& result, const Snapshot& snap, TimePoint now);
// The same into `*events` (cleared first; its memory reused: a driver that
// runs cycles in a loop allocates nothing at steady state).
void ToEvents(const CycleResult& result, const Snapshot& snap, TimePoint now, std::vector<Event>* events);

}  // namespace rota::sched
