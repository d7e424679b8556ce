// ApplyDecisions: one scheduling cycle's decisions (sched::ToEvents' events)
// applied to a batch, the one rule the server's scheduling loop and the
// simulator's production profile share (sim/profile_sim.h), so that what is
// simulated is what runs.
//
// In ToEvents' order: MIG re-partitions (refused if an instance came into use
// since the snapshot: those binds fail too), resizes, placements, evictions,
// rejections. A decision refused because its job or its GPUs changed since
// the snapshot is dropped; the next cycle decides again. A rejection
// (JobCancelled) applies only to a job still pending, an eviction only for a
// preemptor still pending and not held.
#pragma once

#include <cstdint>
#include <vector>

#include "server/batch.h"
#include "server/job_lifecycle.h"

namespace rota::server {

struct AppliedDecisions {
  int64_t preemptions = 0;  // evictions journaled
  bool retry = false;       // a placement or resize was refused: decide again soon
};

AppliedDecisions ApplyDecisions(Batch& batch, std::vector<Event>& events, JobLifecycle& lifecycle);

}  // namespace rota::server
