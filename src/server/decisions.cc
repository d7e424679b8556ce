#include "server/decisions.h"

#include <utility>
#include <variant>

namespace rota::server {

AppliedDecisions ApplyDecisions(Batch& batch, std::vector<Event>& events, JobLifecycle& lifecycle) {
  AppliedDecisions out;
  for (Event& e : events) {
    if (const auto* c = std::get_if<JobCancelled>(&e)) {
      const JobRecord* job = batch.state->GetSnapshot().FindJob(c->id);
      if (job == nullptr || job->state != JobState::kPending) continue;
    }
    const auto* resized = std::get_if<JobResized>(&e);
    const JobId resized_job = resized != nullptr ? resized->id : JobId();
    if (const auto* p = std::get_if<JobPreempting>(&e)) {
      // Not for a preemptor held (or gone) since the snapshot: a pending
      // job, or a running service scaling up.
      const JobRecord* preemptor = batch.state->GetSnapshot().FindJob(p->preemptor);
      const bool scaling_service = preemptor != nullptr && preemptor->state == JobState::kRunning &&
                                   preemptor->spec().is_service();
      if (preemptor == nullptr || preemptor->held || (preemptor->state != JobState::kPending && !scaling_service)) {
        continue;
      }
    }
    const bool preempting = std::holds_alternative<JobPreempting>(e);
    const JobId evicted = preempting ? std::get<JobPreempting>(e).id : JobId();
    const bool cancel = std::holds_alternative<JobCancelled>(e);
    const auto* bound = std::get_if<JobBound>(&e);
    const JobId bound_job = bound != nullptr ? bound->id : JobId();
    const TimePoint bound_at = bound != nullptr ? bound->at : 0;
    if (!batch.Apply(std::move(e)).ok()) {
      if (!preempting && !cancel) out.retry = true;
      continue;
    }
    if (resized_job != JobId()) lifecycle.Forget(resized_job);  // it restarts with its new world size
    if (bound_job != JobId()) {
      const Snapshot snap = batch.state->GetSnapshot();
      const JobRecord* job = snap.FindJob(bound_job);
      if (job != nullptr && job->spec().time_limit > 0) lifecycle.NoteStarted(snap, bound_job, bound_at);
    }
    if (preempting) {
      ++out.preemptions;
      lifecycle.NoteStopping(evicted, batch.state->GetSnapshot().revision());
    }
  }
  return out;
}

}  // namespace rota::server
