// PendingReason: why a job is not running, as a code a program can act on and
// a message with the numbers a person needs, e.g.
//   Fragmented: "needs 2 replicas x 8 GPUs on one node each; free per node:
//   7, 7, 8 (1 node fits)".
// Explain computes it from the cycle's workspace after a placement failed.
#pragma once

#include <string>
#include <string_view>

#include "sched/framework.h"

namespace rota::sched {

enum class ReasonCode {
  kNone,
  // Unschedulable: could fit later, or after preemption.
  kInsufficientGpus,   // fewer free GPUs than the gang needs on matching nodes
  kFragmented,         // enough free GPUs in total, but not enough on each node
  kInsufficientCpu,
  kInsufficientMemory,
  kNodesUnavailable,   // matching nodes exist but are drained
  kTopology,           // fits the cluster, but not within one domain of the level
  kUnschedulable,      // the search found no complete placement
  kReserved,           // fits now only on GPUs reserved for a higher job, and would not end before it starts
  kQuota,              // its queue (or an ancestor) is at its guarantee plus borrowing limit
  kPreempting,         // room is being made for it: its victims are checkpointing
  kExceedsQuota,       // Unresolvable: more than its queue may ever hold
  // Unresolvable: no node or domain of this cluster could ever hold it.
  kNoMatchingNodes,
  kExceedsNodeCapacity,
  kExceedsDomainCapacity,
  kInvalid,            // the request names something the cluster lacks (a level)
  kUnsupported,        // a feature this scheduler does not schedule yet
};

std::string_view ReasonCodeName(ReasonCode code);
bool IsUnresolvable(ReasonCode code);

struct PendingReason {
  ReasonCode code = ReasonCode::kNone;
  std::string message;
  TimePoint expected_start = 0;  // when a reservation gives one
  bool ok() const { return code == ReasonCode::kNone; }
};

class PlaceContext;

// Static check: could the job fit if the cluster were empty and undrained?
// kNone if yes, else an Unresolvable reason.
PendingReason ExplainUnresolvable(PlaceContext& ctx, const JobRequest& job);

// Why the job did not fit now. REQUIRES: ExplainUnresolvable(job).ok().
PendingReason ExplainPending(PlaceContext& ctx, const JobRequest& job);

}  // namespace rota::sched
