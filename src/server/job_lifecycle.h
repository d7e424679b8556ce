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

#include <atomic>
#include <limits>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "api/agent_protocol.h"
#include "base/clock.h"
#include "server/batch.h"

namespace rota::server {

// What the lifecycle appends to a reason it journals, after the words that
// tell what happened: a replica restarted (a service's, or an elastic
// job's rank alone), a job failed for want of restarts, a stop that
// overran its grace. views.cc keeps them when it cuts the words before
// them from what another user sees.
inline constexpr std::string_view kRestartedSuffix = "; restarted";
inline constexpr std::string_view kRestartedAloneSuffix = "; restarted alone";
inline constexpr std::string_view kNoRestartsLeftSuffix = "; no restarts left";
inline constexpr std::string_view kGraceOverrunSuffix = " (did not stop within its grace period)";
inline constexpr std::string_view kLifecycleSuffixes[] = {kNoRestartsLeftSuffix, kRestartedAloneSuffix,
                                                          kRestartedSuffix, kGraceOverrunSuffix};
// The suffixes of kLifecycleSuffixes that `reason` ends with, in order
// (each after the words before it): "" if none.
std::string_view LifecycleSuffix(std::string_view reason);

// Whether `job` has replica (task, replica) of `t` on `node`: a node's
// report counts only for what runs where it comes from.
bool PlacedOn(const JobRecord& job, NodeId node, const api::TaskReport& t);

class JobLifecycle {
 public:
  // `fenced_after`: how long after its last answered report a silent node's
  // tasks have surely stopped themselves (the agents' fence plus a margin);
  // `max_grace`: the most checkpoint grace a job's tasks get (StopGrace).
  JobLifecycle(const Clock* clock, Duration preempt_slack, Duration fenced_after = 0,
               Duration max_grace = INT64_MAX)
      : clock_(clock), preempt_slack_(preempt_slack), fenced_after_(fenced_after), max_grace_(max_grace) {}

  // `node`'s task reports: checkpoints, then exits. With `revision` (the
  // last answer its agent applied, HeartbeatReport::revision; 0 = unknown)
  // they are all the node runs: a stopping job's replica there that they
  // miss, once an answer since it began stopping was applied, has stopped.
  void OnTaskReports(Batch& batch, const std::string& node, const std::vector<api::TaskReport>& tasks,
                     uint64_t revision = 0);
  // `job` began stopping (JobPreempting) at the state's `revision`.
  void NoteStopping(JobId job, uint64_t revision) {
    const TimePoint steady = clock_->Steady();
    stopping_[job] = {revision, steady};
    // (Its grace is not known here: looked at from its slack on, when
    // EndOverdue finds its time.)
    const TimePoint first = steady + preempt_slack_ + 1;
    if (first < next_steady_limit_.load(std::memory_order_relaxed)) next_steady_limit_.store(first, std::memory_order_relaxed);
  }
  // The job was bound at `started_at` (the journal's time): its time limit
  // is measured on this server's steady clock too (EndOverdue).
  void NoteStarted(const Snapshot& snap, JobId job, TimePoint started_at);
  bool Stopping(JobId job) const { return stopping_.count(job) > 0; }
  // A GPU of `node` whose health differs from the state's: journals it, and
  // requeues the running gangs on it if it failed.
  void OnGpuHealth(Batch& batch, const std::string& node, const api::GpuTelemetry& gpu);

  // The jobs among `ids` past their time limit, and the stopping ones past
  // their grace (plus slack, and at least a fence: a silent node's replica
  // has stopped itself by then), at `now` (read from a snapshot, off the actor).
  struct Overdue {
    std::vector<JobId> expired;
    std::vector<JobId> unstopped;
    bool empty() const { return expired.empty() && unstopped.empty(); }
  };
  // `seen_running`: when a report last listed one of a stopping job's
  // replicas running (on the wall clock, and on the steady one); its time
  // runs from then (for at most kStopHold past the stop's start: a process
  // the kernel cannot kill holds it no longer).
  static constexpr Duration kStopHold = 600 * kMicrosPerSecond;
  struct SeenRunning {
    TimePoint wall = 0;
    TimePoint steady = 0;
  };
  using SeenRunningMap = std::map<JobId, SeenRunning>;
  Overdue FindOverdue(const Snapshot& snap, const std::vector<JobId>& ids, TimePoint now,
                      const SeenRunningMap* seen_running = nullptr) const;
  // Ends (or requeues) them, if they still are so in the batch's state;
  // with `steady_now` (the clock's Steady()), a stop only once its grace has
  // passed on that clock too, from when this server saw it begin. What this
  // server bound or saw begin to stop goes by the steady clock alone: a job
  // ends at its time limit, and a stop at its grace, on that clock
  // (SteadyDue) though the wall clock was stepped back.
  void EndOverdue(Batch& batch, const Overdue& overdue, TimePoint now, TimePoint steady_now = 0,
                  const SeenRunningMap* seen_running = nullptr);
  // Whether a job this server bound may be past its time limit, or a stop it
  // saw begin past its grace, on the steady clock at `steady_now` (then
  // EndOverdue ends it); read off the actor.
  bool SteadyDue(TimePoint steady_now) const { return steady_now >= next_steady_limit_.load(std::memory_order_relaxed); }

  // Requeues (or fails, past the restart limit) a running job. A rank never
  // runs beside its own next attempt: while any replica of this attempt may
  // still run, the gang first stops (JobPreempting with restart: it keeps
  // its GPUs, its tasks leave their agents' answers and get their checkpoint
  // signal and grace) and is requeued once every replica has exited or been
  // fenced (or its grace ran out: EndOverdue). `at`: when it ended, if every
  // replica has (0: now).
  void Requeue(Batch& batch, const JobRecord& job, const std::string& reason, bool counts_against_policy,
               TimePoint at = 0);
  // `node` (`why`) is lost past its fence: `job`'s replicas there have
  // stopped. A running job restarts (as Requeue, not counted against its
  // policy); a stopping one is requeued if that was its last replica.
  void NodeFenced(Batch& batch, const JobRecord& job, NodeId node, const std::string& why);
  // Whether the job's restart policy allows one more restart.
  static bool RestartAllowed(const JobRecord& job);
  // The job's gang changed (resized) or it ended elsewhere (cancelled): the
  // replicas seen exiting are forgotten.
  void Forget(JobId job) {
    exited_.erase(job);
    stopping_.erase(job);
    // (Not started_: a resize keeps its attempt's start and time limit, and
    // an entry of an ended attempt is told apart by its start, and swept.)
  }

 private:
  // Ends `id` (running) for its time limit `limit`, at `at`.
  void EndAtTimeLimit(Batch& batch, JobId id, Duration limit, TimePoint at);
  void OnCheckpoint(Batch& batch, NodeId node, const JobRecord& job, const api::TaskReport& t);
  // One exit of a replica the reporting node runs, of its current attempt.
  void OnExit(Batch& batch, const JobRecord& job, const api::TaskReport& t);

  // A stopping job's last replica stopped: requeued, as its JobPreempting said.
  void Stopped(Batch& batch, const JobRecord& job, const std::string& reason);
  // A stopping job's grace ran out (EndOverdue): requeued, its reason says so.
  void StoppedOverdue(Batch& batch, const JobRecord& job);
  // How long a stop of `job` may take, on either clock: its grace (at most
  // the cap) and the slack, or a silent node's fence.
  Duration StopAllowance(const JobRecord& job) const;
  // When a stop's time runs from, on one clock: its start, or when a replica
  // was last `seen` running (0: not), at most kStopHold after the start.
  static TimePoint StopRunsFrom(TimePoint began, TimePoint seen) {
    return seen > began ? std::min(seen, began + kStopHold) : began;
  }
  static const SeenRunning* Seen(const SeenRunningMap* seen_running, JobId id);
  bool AllExited(const JobRecord& job) const;

  const Clock* clock_;
  const Duration preempt_slack_;
  const Duration fenced_after_;
  const Duration max_grace_;
  // A live job's replicas (task, replica) that have exited this attempt,
  // and when the last of them ended (TaskReport::ended_ago, within the attempt).
  struct Exited {
    std::set<std::pair<uint16_t, uint32_t>> replicas;
    TimePoint last = 0;
  };
  std::map<JobId, Exited> exited_;
  // Stopping jobs: the revision they began at (NoteStopping), and when this
  // server saw them begin on its steady clock (EndOverdue).
  struct Stop {
    uint64_t revision = 0;
    TimePoint steady_at = 0;
  };
  std::map<JobId, Stop> stopping_;
  // Running jobs with a time limit bound while this server led: their
  // attempt's start (the journal's) and when this server bound it on its
  // steady clock (NoteStarted). Jobs that ended otherwise are swept as it grows.
  struct Start {
    TimePoint wall_at = 0;
    TimePoint steady_at = 0;
  };
  std::map<JobId, Start> started_;
  size_t started_swept_at_ = 0;  // started_'s size after the last sweep
  // No entry of started_ reaches its time limit on the steady clock before
  // this (it may be earlier than the first that does: EndOverdue makes it exact).
  std::atomic<TimePoint> next_steady_limit_{std::numeric_limits<TimePoint>::max()};
  // `node`'s full list `tasks` (as of answer `revision`) misses stopping
  // jobs' replicas there: they have stopped.
  void NoteMissing(Batch& batch, NodeId node, const std::vector<api::TaskReport>& tasks, uint64_t revision);
  // The replicas the report being read holds exits of (OnTaskReports).
  std::map<JobId, std::set<std::pair<uint16_t, uint32_t>>> reporting_;
};

}  // namespace rota::server
