#include "server/recovery.h"

#include <algorithm>

namespace rota::server {

void NoteRequestId(RequestIds& ids, const std::string& user, const std::string& key, JobId first, int64_t count) {
  auto [it, added] = ids.try_emplace(user + '\n' + key, first, count);
  if (added) return;
  // Another part of the same array, in any order (a snapshot lists ended
  // jobs before live ones): the key covers the lowest id to the highest.
  const uint64_t lo = std::min(it->second.first.value(), first.value());
  const uint64_t hi = std::max(it->second.first.value() + static_cast<uint64_t>(it->second.second),
                               first.value() + static_cast<uint64_t>(count));
  it->second = {JobId(lo), static_cast<int64_t>(hi - lo)};
}

const JobRecord* FirstHeld(const Snapshot& snap, JobId first, int64_t count) {
  auto it = snap.jobs().upper_bound(JobId(first.value() - 1));
  if (it == snap.jobs().end() || it->first.value() >= first.value() + static_cast<uint64_t>(count)) return nullptr;
  return it->second.get();
}

void ForgetRequestIds(RequestIds& ids, const JobsForgotten& forgotten, const Snapshot& before, const Snapshot& after) {
  // Once a key (an array's elements are forgotten together, in id order):
  // whether it goes depends on `after` alone.
  const JobRecord* last = nullptr;
  for (JobId id : forgotten.ids) {
    const JobRecord* job = before.FindJob(id);
    if (job == nullptr || job->request_id.empty()) continue;
    if (last != nullptr && job->request_id == last->request_id && job->user == last->user) continue;
    last = job;
    auto it = ids.find(job->user + '\n' + job->request_id);
    if (it == ids.end()) continue;
    if (FirstHeld(after, it->second.first, it->second.second) == nullptr) ids.erase(it);
  }
}

void DropFailedArrayKey(RequestIds& ids, const JobCancelled& cancelled, const Snapshot& before) {
  if (!cancelled.reason.starts_with(kArrayFailed)) return;
  const JobRecord* job = before.FindJob(cancelled.id);
  if (job == nullptr || job->request_id.empty()) return;
  auto it = ids.find(job->user + '\n' + job->request_id);
  // (Only the failed array's: a retry's array under the same key has other ids.)
  if (it != ids.end() && it->second.first == (job->array_count > 0 ? job->array : job->id)) ids.erase(it);
}

// The range of ids a submission's key covers: an array element's, its whole
// array (a journal snapshot may hold only some of its elements: the others
// forgotten).
static void NoteSubmitted(RequestIds& ids, const std::string& user, const std::string& key, JobId first, int64_t count,
                          JobId array, int64_t array_count) {
  if (key.empty()) return;
  const bool whole = array.value() != 0 && array_count > 0;
  NoteRequestId(ids, user, key, whole ? array : first, whole ? array_count : count);
}

Status Recovered::Apply(const Event& e) {
  if (auto* f = std::get_if<JobsForgotten>(&e)) {
    next_job_id = std::max(next_job_id, f->next_id);
    const Snapshot before = state->GetSnapshot();
    ROTA_RETURN_IF_ERROR(state->Apply(e).WithPrefix("replaying the journal"));
    ForgetRequestIds(request_ids, *f, before, state->GetSnapshot());
    return Status::Ok();
  }
  if (auto* s = std::get_if<JobSubmitted>(&e)) {
    next_job_id = std::max(next_job_id, s->id.value() + 1);
    NoteSubmitted(request_ids, s->user, s->request_id, s->id, 1, s->array, s->array_count);
  }
  if (auto* s = std::get_if<JobsSubmitted>(&e)) {
    next_job_id = std::max(next_job_id, s->first.value() + static_cast<uint64_t>(s->count));
    NoteSubmitted(request_ids, s->user, s->request_id, s->first, s->count, s->array, s->array_count);
  }
  if (auto* c = std::get_if<JobCancelled>(&e)) DropFailedArrayKey(request_ids, *c, state->GetSnapshot());
  return state->Apply(e).WithPrefix("replaying the journal");
}

}  // namespace rota::server
