// PendingReason: why a job is not running, as a code a program can act on and
// a message with the numbers a person needs, e.g.
//   Fragmented: "needs 2 replicas x 8 GPUs on one node each; free per node:
//   7, 7, 8 (1 node fits)".
// Explain computes it from the cycle's workspace after a placement failed.
#pragma once

#include <memory>
#include <ostream>
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
  kArrayLimit,         // its job array runs as many elements as it may at once (--count 0-99%8), or is not whole yet
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

// A reason's text, shared by its copies: a cycle gives thousands of waiting
// jobs one reason (and the server keeps each waiting job's), so copying it
// must not allocate. Reads like a const std::string; += makes a new text
// (copies made before keep theirs).
class ReasonText {
 public:
  ReasonText() = default;
  ReasonText(std::string text)  // NOLINT: implicit, as a std::string field was
      : text_(text.empty() ? nullptr : std::make_shared<const std::string>(std::move(text))) {}
  ReasonText(const char* text) : ReasonText(std::string(text)) {}  // NOLINT
  operator const std::string&() const { return str(); }  // NOLINT
  const std::string& str() const { return text_ ? *text_ : Empty(); }
  // The same shared text (not merely equal): copying it would change nothing.
  bool SameText(const ReasonText& other) const { return text_ == other.text_; }
  bool empty() const { return str().empty(); }
  size_t size() const { return str().size(); }
  const char* c_str() const { return str().c_str(); }
  size_t find(std::string_view what, size_t pos = 0) const { return str().find(what, pos); }
  ReasonText& operator+=(std::string_view more) {
    *this = ReasonText(str() + std::string(more));
    return *this;
  }
  friend std::string operator+(const ReasonText& a, const std::string& b) { return a.str() + b; }
  friend std::string operator+(const ReasonText& a, const char* b) { return a.str() + b; }
  friend std::string operator+(const std::string& a, const ReasonText& b) { return a + b.str(); }
  friend std::string operator+(const char* a, const ReasonText& b) { return a + b.str(); }
  friend bool operator==(const ReasonText& a, const ReasonText& b) { return a.str() == b.str(); }
  friend bool operator==(const ReasonText& a, const std::string& b) { return a.str() == b; }
  friend bool operator==(const ReasonText& a, const char* b) { return a.str() == b; }
  friend std::ostream& operator<<(std::ostream& os, const ReasonText& t) { return os << t.str(); }

 private:
  static const std::string& Empty() {
    static const std::string kEmpty;
    return kEmpty;
  }
  std::shared_ptr<const std::string> text_;
};

struct PendingReason {  // (CycleResult::Wait writes each field: add a field there too)
  ReasonCode code = ReasonCode::kNone;
  ReasonText message;
  TimePoint expected_start = 0;  // when a reservation gives one
  bool ok() const { return code == ReasonCode::kNone; }
};

class PlaceContext;

// Static check: could the job fit if the cluster were empty and undrained?
// kNone if yes, else an Unresolvable reason.
PendingReason ExplainUnresolvable(PlaceContext& ctx, const JobRequest& job);

// Why the job did not fit now. REQUIRES: ExplainUnresolvable(ctx, job).ok(),
// called just before on this unchanged request (whose answers about each
// node's static fit this reads again: PlaceContext::StaticFits).
PendingReason ExplainPending(PlaceContext& ctx, const JobRequest& job);

}  // namespace rota::sched
