// Recovered: what replaying a journal builds, the cluster state and what the
// controller derives from the events beside it (the next job id, the
// submissions' idempotency keys). The controller replays into one at start
// (Controller::Start), or, on a standby, once and then as the leader appends
// (StartFollowing, CatchUp), so that a takeover replays only the tail.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>

#include "core/cluster_state.h"

namespace rota::server {

// "user\nkey" -> the first job and the count its submission made.
using RequestIds = std::unordered_map<std::string, std::pair<JobId, int64_t>>;

// Records that `user`'s submission with key `key` made jobs first..first+count-1
// (another part of the same array, seen in any order, widens it).
void NoteRequestId(RequestIds& ids, const std::string& user, const std::string& key, JobId first, int64_t count);

// The first job `snap` holds of ids first..first+count-1 (null: none; the
// others may have been forgotten).
const JobRecord* FirstHeld(const Snapshot& snap, JobId first, int64_t count);

// Drops the keys of the jobs `forgotten` names (read in `before`, the state
// that held them) that made no job `after` still holds: a key is kept while
// a job it made is, as a restart (which rebuilds the keys from the jobs)
// would keep it.
void ForgetRequestIds(RequestIds& ids, const JobsForgotten& forgotten, const Snapshot& before, const Snapshot& after);

// The reason an array's committed parts are cancelled with when a later
// part is refused (the store's message follows): the array was not accepted.
inline constexpr std::string_view kArrayFailed = "array submission failed: ";

// Drops the key of an array that was not accepted, at the cancel of one of
// its parts (`cancelled`, read in `before`): its key made nothing that
// stands, so a retry makes the array anew, on the running server and after a
// restart alike.
void DropFailedArrayKey(RequestIds& ids, const JobCancelled& cancelled, const Snapshot& before);

struct Recovered {
  explicit Recovered(std::vector<std::string> levels) : state(std::make_unique<ClusterState>(std::move(levels))) {}

  // Applies one journal event (a replay's or a follower's).
  Status Apply(const Event& e);

  std::unique_ptr<ClusterState> state;
  uint64_t next_job_id = 1;
  RequestIds request_ids;
  uint64_t seq = 0;  // the journal's sequence number the state is at (followers)
};

}  // namespace rota::server
