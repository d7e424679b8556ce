// Event: every change to the cluster's state. ClusterState::Apply is the only
// mutator; the store journals events; replaying them rebuilds the state.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <type_traits>
#include <variant>
#include <vector>

#include "core/job.h"
#include "core/node.h"
#include "core/run_history.h"

namespace rota {

// Where one replica runs: a node and the GPUs (bit i = GPU index i). A
// replica with a GPU fraction holds `gpu_milli` of the one GPU in its mask,
// which other fractions may share; a MIG replica holds the instance of its
// task's profile that starts at slot `mig_start` of the one MIG GPU in its
// mask. Whole-GPU replicas have gpu_milli 0 and mig_start -1.
struct ReplicaPlacement {
  uint16_t task = 0;     // index into JobSpec::tasks
  uint32_t replica = 0;  // 0..replicas-1 within the task group
  NodeId node;
  uint64_t gpu_mask = 0;
  int32_t gpu_milli = 0;
  int32_t mig_start = -1;
  bool shares_gpu() const { return gpu_milli > 0 || mig_start >= 0; }
  friend bool operator==(const ReplicaPlacement&, const ReplicaPlacement&) = default;
};

struct NodeAdded {
  NodeSpec spec;
};
struct NodeDrainChanged {
  std::string node;
  bool drained = true;
  std::string reason;  // why it is drained ("" = none given), like scontrol's Reason=
  // The node's agent asked for it (a disk or runtime problem it reports),
  // and lifts it: an admin's drain is never the agent's to lift.
  bool by_agent = false;
};
struct GpuHealthChanged {
  std::string node;
  int32_t gpu = 0;
  bool healthy = true;
};
struct JobSubmitted {
  JobId id;
  JobSpec spec;
  TimePoint at = 0;
  std::string user;  // who submitted it; owns it
  int32_t restarts = 0;  // non-zero only in journal snapshots (CompactState)
  int32_t resizes = 0;   // likewise, with the elastic rank restarts and attempts
  int32_t rank_restarts = 0;
  int32_t gang_attempt = 0;
  std::map<uint32_t, int32_t> rank_attempt;
  // The client's Idempotency-Key ("" = none): a retried submission with the
  // same key from the same user returns this job instead of a second one.
  std::string request_id;
  // A job array's element: the array's id (its first job's) and size; none
  // (id 0) for a job submitted alone. Its indices start at
  // array_first_index (`--count 5-9`: 5..9); at most array_max_running of
  // its elements run at once (`--count 0-99%8`: 8; 0 = no limit).
  JobId array;
  int64_t array_count = 0;
  Duration attained = 0;  // journal snapshots only: JobRecord::attained
  int32_t failed_restarts = 0;  // likewise: JobRecord::failed_restarts
  int64_t array_first_index = 0;  // with array, as above
  int32_t array_max_running = 0;
  // Journal snapshots only: its sweep (JobRecord::sweep); none: found as
  // the job joins (RunHistory::Join).
  JobId sweep;
};
// `count` jobs with ids first..first+count-1, each exactly as a
// JobSubmitted with that id and these fields: a job array's part (or a
// snapshot's run of identical pending jobs) journaled, and read back, once.
inline constexpr int64_t kMaxJobsPerRun = 1'000'000;  // the most one JobsSubmitted holds
struct JobsSubmitted {
  JobId first;
  int64_t count = 0;
  JobSpec spec;
  TimePoint at = 0;
  std::string user;
  std::string request_id;  // as JobSubmitted's (every part of one array carries it)
  // The array these jobs belong to, as JobSubmitted's (an array is
  // journaled in parts: each names the whole); none for a snapshot's run of
  // jobs submitted alone.
  JobId array;
  int64_t array_count = 0;
  int64_t array_first_index = 0;
  int32_t array_max_running = 0;
  JobId sweep;  // as JobSubmitted's
};
// The whole gang is bound at once: one replica placement per replica (an
// elastic job: at least min_replicas of them).
struct JobBound {
  JobId id;
  std::vector<ReplicaPlacement> placement;
  TimePoint at = 0;
  // An ended job's attempt, replayed from a journal snapshot (CompactState):
  // its placement and start come back, its nodes' resources are neither
  // checked nor taken (the nodes may have changed since it ended: a GPU
  // gone, MIG mode switched); the job's end follows.
  bool ended = false;
};
enum class JobOutcome { kSucceeded, kFailed };
struct JobFinished {
  JobId id;
  JobOutcome outcome = JobOutcome::kSucceeded;
  TimePoint at = 0;
  std::string reason;  // why it failed
};
// A running gang goes back to pending (its node was lost, a GPU failed, a
// replica crashed and the restart policy allows another try). Its resources
// are released; its restart count goes up.
struct JobRequeued {
  JobId id;
  TimePoint at = 0;
  std::string reason;
  // An attempt its restart policy restarts (it failed, or any exit under
  // `always`): counts against restart.max_restarts (a preemption, a lost
  // node or `rota requeue` does not).
  bool failed = false;
};
// A running gang is being evicted for `preemptor`: its tasks get their
// checkpoint signal and grace period; it keeps its GPUs until they stop, then
// it is requeued (JobRequeued).
//
// Or, with `restart`, it stops to be restarted (a rank failed, a node was
// lost, a GPU failed, `rota requeue`): no preemptor, not counted as an
// eviction; its requeue, once every replica has stopped, is `failed` (counts
// against its restart policy) as this says. A rank never runs beside its own
// next attempt.
struct JobPreempting {
  JobId id;
  TimePoint at = 0;
  JobId preemptor;
  std::string reason;
  bool restart = false;
  bool failed = false;
};
// A node stopped (or resumed) heartbeating. A lost node takes no work.
struct NodeLostChanged {
  std::string node;
  bool lost = true;
};
// A job saved a checkpoint (reported by its node's agent, its owner, or a
// jobs file): on a restart it resumes from there, and preempting it loses
// only the work since.
struct JobCheckpointed {
  JobId id;
  TimePoint at = 0;
  std::string path;
};
// A running elastic job's gang changes size: `placement` replaces its
// placement (replicas kept where they were, new ones added, surplus ones
// released); between elastic.min_replicas and its replicas. The gang
// restarts with the new world size.
struct JobResized {
  JobId id;
  std::vector<ReplicaPlacement> placement;
  TimePoint at = 0;
  std::string reason;
};
// One failed replica of a running elastic job restarts alone (a new attempt
// of that replica); the other replicas keep running.
struct RankRestarted {
  JobId id;
  uint16_t task = 0;
  uint32_t replica = 0;
  TimePoint at = 0;
  std::string reason;
};
// A MIG GPU was re-partitioned (only while none of its instances is in
// use): `layout` is its new instance list ("3g.40gb@0,3g.40gb@4"; core/mig.h).
struct GpuReconfigured {
  std::string node;
  int32_t gpu = 0;
  std::string layout;
};
// A node's agent re-registered with GPUs in or out of MIG mode, or (for
// layouts read from the driver, NodeSpec::mig_fixed) with new layouts; only
// GPUs that nothing holds may change. `mig` and `mig_fixed` replace the spec's.
struct NodeMigChanged {
  std::string node;
  std::map<int32_t, std::string> mig;
  bool mig_fixed = false;
};
// A node's agent re-registered with other labels (a corrected rack, a new
// label for node selectors): they replace the spec's, and the topology is
// built again. Refused if they would put one domain in two parents.
struct NodeLabelsChanged {
  std::string node;
  std::map<std::string, std::string> labels;
};
// A node's agent registered as another instance (its state directory's
// AgentInstance) than the one the journal names: a server started again, or
// a standby that took the lead, still knows which agent holds the node, so
// that another does not take it over while the first one's tasks may run.
struct NodeAgentChanged {
  std::string node;
  std::string instance;
  // Where its peers reach it (the agent's --address; "": its node's name):
  // gangs bound before it registers again after a restart still name it so.
  std::string address = {};
};
// One ended attempt of a job: when it was bound and ended, and how
// ("requeued: node n-3 lost", "succeeded", "cancelled by bob").
struct JobAttempt {
  TimePoint started_at = 0;
  TimePoint ended_at = 0;
  std::string end;
  bool operator==(const JobAttempt&) const = default;
};
// Journal snapshots only (CompactState): what a job's record remembers of
// its past that its other events do not carry: recent evictions and whom
// they made room for, the last requeue reason and placement, a nomination
// of freed GPUs, and its last resize. Replaces those fields.
struct JobHistory {
  JobId id;
  std::vector<TimePoint> preempted_at;
  std::vector<JobId> preempted_by;
  std::string last_requeue_reason;
  std::vector<ReplicaPlacement> last_placement;
  std::vector<ReplicaPlacement> nominated;
  TimePoint nominated_at = 0;
  TimePoint resized_at = 0;
  std::string last_resize_reason;
  std::vector<JobAttempt> attempts;
  Duration attained = 0;
  TimePoint scaled_down_at = 0;  // a service: its autoscaler's last decision to go down
};
struct JobCancelled {
  JobId id;
  TimePoint at = 0;
  std::string reason;  // "cancelled by alice", "unresolvable: ..."
};
// A pending job is held (it is not scheduled until released), or released,
// like Slurm's scontrol hold/release. `by`: who did it; `admin`: an admin's
// hold (like Slurm's, its owner may not release it).
struct JobHoldChanged {
  JobId id;
  bool held = true;
  TimePoint at = 0;
  std::string by;
  bool admin = false;
};
// A service's desired replica count, as its autoscaler decided (between its
// min and max); the engine places (or removes) replicas toward it.
struct ServiceScaled {
  JobId id;
  TimePoint at = 0;
  int32_t desired = 0;
  std::string reason;
};
// A service's spec replaced (rota apply): replicas running an attempt from
// before it (ReplicaAttempt <= spec_attempt) run the old one until the
// rolling update restarts them. spec_attempt < 0: the job's attempt() now.
struct ServiceUpdated {
  JobId id;
  TimePoint at = 0;
  JobSpec spec;
  std::string by;
  int32_t spec_attempt = -1;
};

// Journal snapshots only (CompactState), last: the learned order's history
// as it was (replaying the jobs before it cannot rebuild it exactly: ended
// jobs replay before live ones). Replaces the state's.
struct RunHistoryState {
  RunHistory history;
};

// What forgotten jobs ran, for fair share's decayed usage (which a restart
// rebuilds from the jobs' attempts): per queue, per day since the epoch
// (UTC), the GPU-microseconds their attempts held in it.
using ForgottenUsage = std::map<std::string, std::map<int64_t, int64_t>>;
inline constexpr Duration kForgottenUsageDay = 24LL * 3600 * 1'000'000;
inline constexpr int64_t kForgottenUsageDays = 400;  // kept after the latest forget
inline constexpr int64_t kMaxForgottenUsageDay = 1'000'000;  // (the year 4707)
inline constexpr int64_t kMaxDayGpuMicros = int64_t{1} << 53;  // a day's, in a queue

// Jobs that ended long enough ago (the server's job retention) leave the
// state, and the memory they held with them. What they ran stays in the
// accounting records, in the learned order's history and, folded by day,
// in the state's forgotten usage. Every id below `next_id` was issued: a
// state rebuilt without these jobs never issues one of them again. A
// journal snapshot carries one with no ids, for `next_id` and `usage`
// alone (a journal event's usage is empty: replaying it folds the jobs'
// attempts again).
struct JobsForgotten {
  std::vector<JobId> ids;  // ended jobs, ascending
  TimePoint at = 0;
  uint64_t next_id = 0;  // above every id in `ids`
  ForgottenUsage usage;  // added to the state's
};

using Event = std::variant<NodeAdded, NodeDrainChanged, GpuHealthChanged, JobSubmitted, JobBound, JobFinished,
                           JobCancelled, JobRequeued, NodeLostChanged, JobPreempting, JobCheckpointed, GpuReconfigured, JobResized, RankRestarted, NodeMigChanged, JobHistory, JobsSubmitted, JobHoldChanged, ServiceScaled, ServiceUpdated, NodeLabelsChanged, RunHistoryState, JobsForgotten, NodeAgentChanged>;

// The job an event is about: its `id` (JobId() for node events, and for
// JobsSubmitted, which names a range).
inline JobId EventJob(const Event& e) {
  return std::visit(
      [](const auto& ev) -> JobId {
        if constexpr (requires { ev.id; }) {
          if constexpr (std::is_same_v<std::decay_t<decltype(ev.id)>, JobId>) return ev.id;
        }
        return JobId();
      },
      e);
}

}  // namespace rota
