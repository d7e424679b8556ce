#include "server/job_lifecycle.h"

#include <algorithm>
#include <optional>

namespace rota::server {

bool PlacedOn(const JobRecord& job, NodeId node, const api::TaskReport& t) {
  return std::any_of(job.placement.begin(), job.placement.end(), [&](const ReplicaPlacement& r) {
    return r.task == t.task && r.replica == t.replica && r.node == node;
  });
}

std::string_view LifecycleSuffix(std::string_view reason) {
  size_t start = reason.size();
  for (bool found = true; found;) {
    found = false;
    for (std::string_view tail : kLifecycleSuffixes) {
      if (reason.substr(0, start).ends_with(tail)) {
        start -= tail.size();
        found = true;
        break;
      }
    }
  }
  return reason.substr(start);
}

namespace {

// How a replica's exit reads after its name: " exited with code N", or for
// one that did not start, " did not start: why" (the agent's words).
std::string ExitText(const api::TaskReport& t) {
  const std::string_view why = t.exit_reason;
  if (why.substr(0, api::kCouldNotStart.size()) == api::kCouldNotStart) {
    return " did not start: " + std::string(why.substr(api::kCouldNotStart.size()));
  }
  if (why == api::kFenced) return " was stopped by its node's fence (the server answered none of the node's reports in time)";
  return " exited with code " + std::to_string(t.exit_code);
}

}  // namespace

void JobLifecycle::OnTaskReports(Batch& batch, const std::string& node_name,
                                 const std::vector<api::TaskReport>& tasks, uint64_t revision) {
  // No snapshot is held across a change: one held across Apply would make
  // each change copy the whole state (copy-on-write). Record pointers stay
  // valid through the batch (the published state holds them).
  NodeId node;
  {
    Snapshot snap = batch.state->GetSnapshot();
    const NodeState* n = snap.FindNode(node_name);
    if (n == nullptr) return;
    node = n->id;
  }
  for (const api::TaskReport& t : tasks) {
    if (t.checkpoint_at == 0 || t.checkpoint_path.empty()) continue;
    const JobRecord* job = batch.state->GetSnapshot().FindJob(t.job);
    if (job != nullptr) OnCheckpoint(batch, node, *job, t);
  }
  // The exits this report holds count as one: a node whose ranks all ended
  // together restarts the gang at once, not after stopping the others.
  for (const api::TaskReport& t : tasks) {
    if (!t.exited) continue;
    const JobRecord* job = batch.state->GetSnapshot().FindJob(t.job);
    if (job == nullptr || t.attempt != job->ReplicaAttempt(t.replica) || !PlacedOn(*job, node, t)) continue;
    reporting_[t.job].insert({t.task, t.replica});
  }
  for (const api::TaskReport& t : tasks) {
    if (!t.exited) continue;
    const JobRecord* job = batch.state->GetSnapshot().FindJob(t.job);
    if (job == nullptr || t.attempt != job->ReplicaAttempt(t.replica) || !PlacedOn(*job, node, t)) continue;
    OnExit(batch, *job, t);
  }
  reporting_.clear();
  if (revision > 0 && !stopping_.empty()) NoteMissing(batch, node, tasks, revision);
}

void JobLifecycle::NoteMissing(Batch& batch, NodeId node, const std::vector<api::TaskReport>& tasks,
                               uint64_t revision) {
  std::vector<JobId> stopped;
  for (auto it = stopping_.begin(); it != stopping_.end();) {
    const JobRecord* job = batch.state->GetSnapshot().FindJob(it->first);
    if (job == nullptr || job->state != JobState::kPreempting) {
      it = stopping_.erase(it);  // (ended or requeued meanwhile)
      continue;
    }
    // An answer from before it began stopping may still have it start.
    if (revision >= it->second.revision) {
      auto& exited = exited_[job->id].replicas;
      for (const ReplicaPlacement& r : job->placement) {
        if (r.node != node) continue;
        // (An exit listed is an ended process: this attempt's, OnExit
        // counted; an earlier one's, not this replica.)
        if (!api::ListsRunning(tasks, job->id, r.task, r.replica)) exited.insert({r.task, r.replica});
      }
      if (AllExited(*job)) stopped.push_back(job->id);
    }
    ++it;
  }
  for (JobId id : stopped) {
    const JobRecord* job = batch.state->GetSnapshot().FindJob(id);
    if (job != nullptr) Stopped(batch, *job, job->last_requeue_reason);
  }
}

void JobLifecycle::OnCheckpoint(Batch& batch, NodeId node, const JobRecord& job, const api::TaskReport& t) {
  // A time ahead of ours counts as now, once: the same path again is not new.
  const TimePoint at = std::min(t.checkpoint_at, clock_->Now());
  if (at <= job.last_checkpoint_at) return;
  if (t.checkpoint_at > at && t.checkpoint_path == job.last_checkpoint_path) return;
  if (job.state != JobState::kRunning && job.state != JobState::kPreempting) return;
  if (!PlacedOn(job, node, t)) return;
  batch.Apply(JobCheckpointed{t.job, at, t.checkpoint_path}).IgnoreError();
}

void JobLifecycle::OnExit(Batch& batch, const JobRecord& job, const api::TaskReport& t) {
  const TimePoint now = clock_->Now();
  if (job.state == JobState::kPreempting) {
    // A stopping gang is requeued once all of its replicas have stopped.
    exited_[t.job].replicas.insert({t.task, t.replica});
    if (AllExited(job)) Stopped(batch, job, job.last_requeue_reason);
    return;
  }
  if (job.state != JobState::kRunning) return;
  Exited& exited = exited_[t.job];
  auto& exits = exited.replicas;
  exits.insert({t.task, t.replica});
  const TaskGroupSpec& spec = job.spec().tasks[t.task];
  const std::string replica_name = spec.name + "-" + std::to_string(t.replica);
  // A service's replica restarts alone, whatever its exit, forever (the
  // agent backs off one that keeps failing, as the kubelet does); an
  // elastic job's failed rank alone, as its policy allows; the others keep running.
  if (job.spec().is_service() ||
      (t.exit_code != 0 && t.exit_reason != api::kFenced && job.spec().elastic() && RestartAllowed(job))) {
    const std::string then(job.spec().is_service() ? kRestartedSuffix : kRestartedAloneSuffix);
    exits.erase({t.task, t.replica});
    batch.Apply(RankRestarted{t.job, t.task, t.replica, now,
                              t.exit_reason == "oom" ? replica_name + " was OOM-killed" + then
                                                     : replica_name + ExitText(t) + then})
        .IgnoreError();
    return;
  }
  // When it ended: at the report, unless the agent found it ended earlier
  // (it ended while no agent ran: ended_ago); within the attempt (since its
  // last start or resize), never ahead of now. The gang's attempt ends with
  // its last replica: a failure while others may still run ends it now.
  const TimePoint began = std::min(std::max(job.started_at, job.resized_at), now);
  TimePoint& last = exited.last;
  last = std::max(last, std::clamp(now - t.ended_ago, began, now));
  if (t.exit_reason == api::kFenced) {
    // As for a lost node: the gang goes back to the queue, resumes from its
    // last checkpoint, and uses none of its restarts (it did not fail).
    Requeue(batch, job, replica_name + ExitText(t), false, exits.size() == job.placement.size() ? last : now);
    return;
  }
  if (t.exit_code != 0) {
    Requeue(batch, job,
            t.exit_reason == "oom" ? replica_name + " was OOM-killed at its memory limit (" + FormatMemoryMiB(spec.memory) + ")"
                                   : replica_name + ExitText(t),
            true, exits.size() == job.placement.size() ? last : now);
    return;
  }
  if (exits.size() != job.placement.size()) return;
  if (job.spec().restart.policy == RestartPolicy::kAlways) {
    Requeue(batch, job, "all replicas exited; restart policy always", true, last);
  } else {
    batch.Apply(JobFinished{t.job, JobOutcome::kSucceeded, last}).IgnoreError();
    Forget(t.job);
  }
}

void JobLifecycle::OnGpuHealth(Batch& batch, const std::string& node_name, const api::GpuTelemetry& g) {
  std::vector<const JobRecord*> on_gpu;  // the running gangs on it
  {
    Snapshot snap = batch.state->GetSnapshot();
    const NodeState* node = snap.FindNode(node_name);
    if (node == nullptr || g.index < 0 || g.index >= node->spec.gpus) return;
    const bool was = (node->healthy_mask >> g.index) & 1;
    if (was == g.healthy) return;
    if (!g.healthy) {
      for (const auto& [id, job] : snap.live_jobs()) {
        if (job->state != JobState::kRunning) continue;
        for (const ReplicaPlacement& r : job->placement) {
          if (r.node == node->id && ((r.gpu_mask >> g.index) & 1)) {
            on_gpu.push_back(job.get());
            break;
          }
        }
      }
    }
  }
  batch.Apply(GpuHealthChanged{node_name, g.index, g.healthy}).IgnoreError();
  for (const JobRecord* job : on_gpu) {
    Requeue(batch, *job, "GPU " + std::to_string(g.index) + " on " + node_name + " failed (" + g.health_reason + ")",
            false);
  }
}

JobLifecycle::Overdue JobLifecycle::FindOverdue(const Snapshot& snap, const std::vector<JobId>& ids,
                                               TimePoint now, const SeenRunningMap* seen_running) const {
  Overdue out;
  for (JobId id : ids) {
    const JobRecord* job = snap.FindJob(id);
    if (job == nullptr) continue;
    if (job->state == JobState::kRunning && job->spec().time_limit > 0 && now - job->started_at > job->spec().time_limit) {
      out.expired.push_back(id);
    }
    if (job->state == JobState::kPreempting) {
      // Its replicas had their grace (and slack) and a silent node's its
      // fence: from the stop's start, or from when one was last seen running.
      const SeenRunning* seen = Seen(seen_running, id);
      if (now - StopRunsFrom(job->preempting_since, seen ? seen->wall : 0) > StopAllowance(*job)) {
        out.unstopped.push_back(id);
      }
    }
  }
  return out;
}

Duration JobLifecycle::StopAllowance(const JobRecord& job) const {
  return std::max(std::min(job.spec().checkpoint.grace, max_grace_) + preempt_slack_, fenced_after_);
}

const JobLifecycle::SeenRunning* JobLifecycle::Seen(const SeenRunningMap* seen_running, JobId id) {
  if (seen_running == nullptr) return nullptr;
  auto it = seen_running->find(id);
  return it == seen_running->end() ? nullptr : &it->second;
}

void JobLifecycle::NoteStarted(const Snapshot& snap, JobId job, TimePoint started_at) {
  const TimePoint steady = clock_->Steady();
  started_[job] = {started_at, steady};
  if (const JobRecord* j = snap.FindJob(job); j != nullptr && j->spec().time_limit > 0) {
    const TimePoint limit = steady + j->spec().time_limit + 1;  // (past it: as FindOverdue's `>`)
    if (limit < next_steady_limit_.load(std::memory_order_relaxed)) next_steady_limit_.store(limit, std::memory_order_relaxed);
  }
  if (started_.size() < 2 * started_swept_at_ + 1024) return;
  // (Bounded: those that ended since, or run another attempt, go now and then.)
  std::erase_if(started_, [&](const auto& entry) {
    const JobRecord* j = snap.FindJob(entry.first);
    return j == nullptr || j->state != JobState::kRunning || j->started_at != entry.second.wall_at;
  });
  started_swept_at_ = started_.size();
}

void JobLifecycle::EndAtTimeLimit(Batch& batch, JobId id, Duration limit, TimePoint at) {
  Forget(id);
  batch.Apply(JobFinished{id, JobOutcome::kFailed, at, "time limit " + FormatDuration(limit) + " reached"}).IgnoreError();
}

void JobLifecycle::EndOverdue(Batch& batch, const Overdue& overdue, TimePoint now, TimePoint steady_now,
                              const SeenRunningMap* seen_running) {
  for (JobId id : overdue.expired) {
    const JobRecord* job = batch.state->GetSnapshot().FindJob(id);
    if (job == nullptr || job->state != JobState::kRunning) continue;
    // One this server bound goes by its steady clock alone, below: a step
    // of the wall clock (the journal's times) does not end it early. One
    // bound before this server started (or led) has only the journal's times.
    if (auto s = started_.find(id); steady_now != 0 && s != started_.end() && s->second.wall_at == job->started_at) continue;
    EndAtTimeLimit(batch, id, job->spec().time_limit, now);
  }
  // Those this server bound, on its steady clock alone: a wall clock stepped
  // back (FindOverdue reads the journal's times) keeps none past its limit.
  if (steady_now != 0 && SteadyDue(steady_now)) {
    TimePoint next = std::numeric_limits<TimePoint>::max();
    // (Each ends at its start plus what it ran on the steady clock, where the
    // wall clock now reads earlier: its usage is what it ran, never negative.)
    struct End {
      JobId id;
      Duration limit;
      TimePoint at;
    };
    std::vector<End> ended;
    std::vector<JobId> unstopped;
    {  // (let go of before an Apply: a snapshot held across one copies the state)
      const Snapshot snap = batch.state->GetSnapshot();
      for (const auto& [id, start] : started_) {
        const JobRecord* job = snap.FindJob(id);
        if (job == nullptr || job->state != JobState::kRunning || job->started_at != start.wall_at ||
            job->spec().time_limit <= 0) {
          continue;
        }
        if (steady_now - start.steady_at > job->spec().time_limit) {
          ended.push_back({id, job->spec().time_limit, std::max(now, start.wall_at + (steady_now - start.steady_at))});
        }
        else next = std::min(next, start.steady_at + job->spec().time_limit + 1);
      }
      // Stops this server saw begin, past their grace on its steady clock
      // (from when a replica was last seen running, as FindOverdue's): a wall
      // clock stepped back keeps none stopping longer, its GPUs held.
      // (FindOverdue's, by the wall clock, are below.)
      for (const auto& [id, stop] : stopping_) {
        const JobRecord* job = snap.FindJob(id);
        if (job == nullptr || job->state != JobState::kPreempting) continue;
        const SeenRunning* seen = Seen(seen_running, id);
        const TimePoint from = StopRunsFrom(stop.steady_at, seen ? seen->steady : 0);
        const Duration allowed = StopAllowance(*job);
        if (steady_now - from > allowed) unstopped.push_back(id);
        else next = std::min(next, from + allowed + 1);
      }
    }
    next_steady_limit_.store(next, std::memory_order_relaxed);
    // (Not journaled after all, the state put back: looked at again at the next check.)
    if (!ended.empty() || !unstopped.empty()) {
      batch.undo.push_back([this] { next_steady_limit_.store(0, std::memory_order_relaxed); });
    }
    for (const End& e : ended) EndAtTimeLimit(batch, e.id, e.limit, e.at);
    for (JobId id : unstopped) {
      const JobRecord* job = batch.state->GetSnapshot().FindJob(id);
      if (job != nullptr && job->state == JobState::kPreempting) StoppedOverdue(batch, *job);
    }
  }
  for (JobId id : overdue.unstopped) {
    const JobRecord* job = batch.state->GetSnapshot().FindJob(id);
    if (job == nullptr || job->state != JobState::kPreempting) continue;
    // One this server saw begin goes by its steady clock alone, above: a
    // step of the wall clock (the journal's times) does not end a stop while
    // its replicas may still be saving, and so start the next attempt beside
    // them. One begun before this server started (or led) has only the
    // journal's times.
    if (steady_now != 0 && stopping_.count(id) > 0) continue;
    StoppedOverdue(batch, *job);
  }
}

void JobLifecycle::StoppedOverdue(Batch& batch, const JobRecord& job) {
  // (Not journaled after all, the state put back: its stop's record too.)
  if (auto s = stopping_.find(job.id); s != stopping_.end()) {
    batch.undo.push_back([this, id = job.id, stop = s->second] { stopping_[id] = stop; });
  }
  Stopped(batch, job, job.last_requeue_reason + std::string(kGraceOverrunSuffix));
}

bool JobLifecycle::RestartAllowed(const JobRecord& job) {
  const RestartSpec& r = job.spec().restart;
  // Gang restarts and elastic ranks restarted alone count alike.
  return r.policy != RestartPolicy::kNever &&
         (r.max_restarts == 0 ? r.policy == RestartPolicy::kAlways : job.failed_restarts + job.rank_restarts < r.max_restarts);
}

void JobLifecycle::Requeue(Batch& batch, const JobRecord& job, const std::string& reason, bool counts_against_policy,
                           TimePoint at) {
  const TimePoint now = at != 0 ? at : clock_->Now();
  if (counts_against_policy && !RestartAllowed(job)) {
    // (No next attempt: the agents stop the other replicas, nothing starts.)
    Forget(job.id);
    batch.Apply(JobFinished{job.id, JobOutcome::kFailed, now, reason + std::string(kNoRestartsLeftSuffix)}).IgnoreError();
    return;
  }
  if (job.state == JobState::kRunning && !AllExited(job)) {
    // Kept until they stop (replicas exited so far stay counted).
    const JobId id = job.id;
    if (batch.Apply(JobPreempting{id, clock_->Now(), JobId(), reason, /*restart=*/true, counts_against_policy}).ok()) {
      NoteStopping(id, batch.state->GetSnapshot().revision());
    }
    return;
  }
  Forget(job.id);
  batch.Apply(JobRequeued{job.id, now, reason, counts_against_policy}).IgnoreError();
}

void JobLifecycle::NodeFenced(Batch& batch, const JobRecord& job, NodeId node, const std::string& why) {
  if (job.state != JobState::kRunning && job.state != JobState::kPreempting) return;
  auto& exited = exited_[job.id].replicas;
  for (const ReplicaPlacement& r : job.placement) {
    if (r.node == node) exited.insert({r.task, r.replica});
  }
  if (job.state == JobState::kRunning) {
    Requeue(batch, job, why, /*counts_against_policy=*/false);
  } else if (AllExited(job)) {
    Stopped(batch, job, job.last_requeue_reason);
  }
}

bool JobLifecycle::AllExited(const JobRecord& job) const {
  auto exited = exited_.find(job.id);
  auto reporting = reporting_.find(job.id);
  return std::all_of(job.placement.begin(), job.placement.end(), [&](const ReplicaPlacement& r) {
    return (exited != exited_.end() && exited->second.replicas.count({r.task, r.replica}) > 0) ||
           (reporting != reporting_.end() && reporting->second.count({r.task, r.replica}) > 0);
  });
}

void JobLifecycle::Stopped(Batch& batch, const JobRecord& job, const std::string& reason) {
  Forget(job.id);
  batch.Apply(JobRequeued{job.id, clock_->Now(), reason, job.restarting && job.restart_failed}).IgnoreError();
}

}  // namespace rota::server
