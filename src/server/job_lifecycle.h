// JobLifecycle: what happens to a job after it is bound, from what its
// node's agent and the clock report:
//   - exits: a job ends when every replica has exited (all zero:
//     succeeded); a failed replica ends the attempt at once, and the gang
//     restarts if its restart policy allows (an elastic job restarts only the
//     failed rank), else the job fails; an evicted gang is requeued once all
//     of its replicas have stopped;
//   - checkpoints newer than the job's last are recorded;
//   - a GPU that turns unhealthy takes no work, and the gangs on it restart
//     elsewhere;
//   - a job past its time limit ends; an evicted gang that has not stopped
//     within its grace (plus a slack) is requeued anyway.
// Only a replica a node runs, of its current attempt, can be reported by it.
//
// Thread-safety: actor-owned (one thread). It changes state only through the
// Batch it is handed.
#pragma once

#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "api/agent_protocol.h"
#include "base/clock.h"
#include "server/batch.h"

namespace rota::server {

class JobLifecycle {
 public:
  JobLifecycle(const Clock* clock, Duration preempt_slack) : clock_(clock), preempt_slack_(preempt_slack) {}

  // `node`'s task reports: checkpoints, then exits.
  void OnTaskReports(Batch& batch, const std::string& node, const std::vector<api::TaskReport>& tasks);
  // A GPU of `node` whose health differs from the state's: journals it, and
  // requeues the running gangs on it if it failed.
  void OnGpuHealth(Batch& batch, const std::string& node, const api::GpuTelemetry& gpu);

  // The jobs among `ids` past their time limit, and the evicted ones past
  // their grace, at `now` (read from a snapshot, off the actor).
  struct Overdue {
    std::vector<JobId> expired;
    std::vector<JobId> unstopped;
    bool empty() const { return expired.empty() && unstopped.empty(); }
  };
  Overdue FindOverdue(const Snapshot& snap, const std::vector<JobId>& ids, TimePoint now) const;
  // Ends (or requeues) them, if they still are so in the batch's state.
  void EndOverdue(Batch& batch, const Overdue& overdue, TimePoint now);

  // Requeues (or fails, past the restart limit) a running job.
  // `at`: when (0: now).
  void Requeue(Batch& batch, const JobRecord& job, const std::string& reason, bool counts_against_policy,
               TimePoint at = 0);
  // Whether the job's restart policy allows one more restart.
  static bool RestartAllowed(const JobRecord& job);
  // The job's gang changed (resized) or it ended elsewhere (cancelled): the
  // replicas seen exiting are forgotten.
  void Forget(JobId job) { exited_.erase(job); }

 private:
  void OnCheckpoint(Batch& batch, NodeId node, const JobRecord& job, const api::TaskReport& t);
  // One exit of a replica the reporting node runs, of its current attempt.
  void OnExit(Batch& batch, const JobRecord& job, const api::TaskReport& t);

  const Clock* clock_;
  const Duration preempt_slack_;
  // A live job's replicas (task, replica) that have exited this attempt,
  // and when the last of them ended (TaskReport::ended_ago, within the attempt).
  struct Exited {
    std::set<std::pair<uint16_t, uint32_t>> replicas;
    TimePoint last = 0;
  };
  std::map<JobId, Exited> exited_;
};

}  // namespace rota::server
