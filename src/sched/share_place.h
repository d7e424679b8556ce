// The sharing path of `allocate`: GPU fractions and MIG slices, placed
// replica by replica (a sharing gang is small: a few replicas).
//   - A fraction goes to the GPU the profile's SharePlacer plugin ranks
//     cheapest (fgd: the one whose share least grows the node's
//     fragmentation for the live jobs' task mix; bestfit: all equal), ties
//     to the GPU left fullest: GPUs already shared, or free ones.
//   - A MIG slice goes to a free instance of its profile on the fullest MIG
//     GPU; with none, an idle MIG GPU is re-partitioned (a Reconfiguration
//     applied before the placements that use it), its new layout made for
//     the request, then the cycle's other pending MIG demand.
// Every share and MIG change is in the session's Txn.
#pragma once

#include "sched/session.h"

namespace rota::sched {

// Places every replica of the session's current (sharing) request: commits
// into out() (placed, replicas, reconfigurations), or changes nothing and
// explains why (*never: no node could ever hold it).
// A service starts with as many as fit, down to its min.
bool PlaceShares(Session& s, PendingReason* why, bool* never);

// Places up to `count` more replicas of the running sharing service `job`
// (the session's request built for it), one by one, on the lowest replica
// indices it lacks, each admitted by its queue's quota; committed (MIG
// re-partitions in out().reconfigurations). Returns the new replicas.
std::vector<ReplicaPlacement> GrowShares(Session& s, const JobRecord& job, int32_t count);

}  // namespace rota::sched
