// The preempt action's victim search, for the actions that evict for
// something other than a pending job: grow-elastic, for a service's
// scale-up.
#pragma once

#include <string>
#include <vector>

namespace rota {
struct JobRecord;
}  // namespace rota

namespace rota::sched {

class Session;

// The cheapest set of running gangs (the profile's VictimOrder) whose
// eviction lets s.request(), `job`'s, fit now, under the preempt action's
// rules (priority or the job order, preemptible, min_runtime, evictions per
// hour, no cycles, no reserved GPUs); empty if none does. Leaves the
// workspace as it found it. REQUIRES: s.has_clock().
std::vector<const JobRecord*> ChooseVictims(Session& s, const JobRecord& job);

// Records the eviction of `victims` for `job` (each gets its checkpoint
// signal and grace), each with `cause`.
void Evict(Session& s, const JobRecord& job, const std::vector<const JobRecord*>& victims, const std::string& cause);

}  // namespace rota::sched
