#include "sim/agent_model.h"

#include "api/agent_protocol.h"

#include <algorithm>
#include <map>
#include <tuple>

namespace rota::sim {
namespace {

constexpr char kProgressPrefix[] = "progress-";

// The progress a checkpoint path names; -1 if it names none.
Duration PathProgress(const std::string& path) {
  if (path.rfind(kProgressPrefix, 0) != 0) return -1;
  try {
    return std::stoll(path.substr(sizeof(kProgressPrefix) - 1));
  } catch (...) {
    return -1;
  }
}

}  // namespace

AgentModel::AgentModel(std::function<ModelWork(JobId)> work, Duration save_time)
    : work_(std::move(work)), save_time_(save_time) {}

void AgentModel::Push(JobId id, const Run& run) {
  const TimePoint next = run.Next();
  if (next != kNever) due_.push({next, id.value(), run.generation});
  if (run.next_checkpoint != kNever) checkpoints_.push({run.next_checkpoint, id.value(), run.generation});
}

void AgentModel::Start(JobId id, const std::vector<ReplicaPlacement>& placement, TimePoint at) {
  Run run;
  run.placement = placement;
  run.work = work_(id);
  run.started = at;
  auto saved = saved_.find(id.value());
  run.from = saved == saved_.end() ? 0 : std::min(saved->second, run.work.duration);
  run.finish = at + (run.work.duration - run.from);
  if (run.work.checkpoint_interval > 0 && at + run.work.checkpoint_interval < run.finish) {
    run.next_checkpoint = at + run.work.checkpoint_interval;
  }
  run.generation = ++generation_;
  Push(id, run);
  runs_[id.value()] = std::move(run);
}

void AgentModel::Apply(const Event& e) {
  if (const auto* b = std::get_if<JobBound>(&e)) {
    if (!b->ended) Start(b->id, b->placement, b->at);  // (an ended job's, from a snapshot: nothing runs)
  } else if (const auto* r = std::get_if<JobResized>(&e)) {
    Start(r->id, r->placement, r->at);
  } else if (const auto* p = std::get_if<JobPreempting>(&e)) {
    auto it = runs_.find(p->id.value());
    if (it == runs_.end()) return;
    Run& run = it->second;
    run.save_on_stop = run.work.checkpoint_interval > 0 && run.work.grace > 0;
    run.stop_at = p->at + (run.save_on_stop ? std::min(run.work.grace, save_time_) : kStopTime);
    run.generation = ++generation_;
    Push(p->id, run);
  } else if (const auto* c = std::get_if<JobCheckpointed>(&e)) {
    if (const Duration progress = PathProgress(c->path); progress >= 0) saved_[c->id.value()] = progress;
  } else if (const auto* q = std::get_if<JobRequeued>(&e)) {
    auto it = runs_.find(q->id.value());
    if (it == runs_.end()) return;
    const Duration kept = saved_.count(q->id.value()) ? saved_[q->id.value()] : 0;
    // (Work stops when its process exits, not when the requeue is journaled.)
    const Duration done = it->second.ProgressAt(std::min(q->at, it->second.exited_at));
    if (done > kept) {
      lost_[q->id.value()] += static_cast<double>(done - kept) * static_cast<double>(it->second.work.gpus) / kMicrosPerSecond;
    }
    runs_.erase(it);
  } else if (const auto* f = std::get_if<JobFinished>(&e)) {
    runs_.erase(f->id.value());
    saved_.erase(f->id.value());
  } else if (const auto* x = std::get_if<JobCancelled>(&e)) {
    runs_.erase(x->id.value());
    saved_.erase(x->id.value());
  }
}

TimePoint AgentModel::NextReport() {
  while (!due_.empty()) {
    const Due& d = due_.top();
    auto it = runs_.find(d.job);
    if (it != runs_.end() && it->second.generation == d.generation && it->second.Next() == d.at) return d.at;
    due_.pop();
  }
  return kNever;
}

void AgentModel::TakeDue(const Snapshot& snap, TimePoint now,
                         std::vector<std::pair<std::string, std::vector<api::TaskReport>>>* out) {
  out->clear();
  // (node name) -> (checkpoint reports, exit reports)
  std::map<std::string, std::pair<std::vector<api::TaskReport>, std::vector<api::TaskReport>>> by_node;
  std::vector<uint64_t> jobs;
  while (NextReport() <= now) {
    jobs.push_back(due_.top().job);
    due_.pop();
  }
  while (!checkpoints_.empty() && checkpoints_.top().at <= now) {
    const Due d = checkpoints_.top();
    checkpoints_.pop();
    auto it = runs_.find(d.job);
    if (it != runs_.end() && it->second.generation == d.generation && it->second.next_checkpoint == d.at) {
      jobs.push_back(d.job);
    }
  }
  std::sort(jobs.begin(), jobs.end());
  jobs.erase(std::unique(jobs.begin(), jobs.end()), jobs.end());
  for (uint64_t id : jobs) {
    Run& run = runs_.at(id);
    const JobRecord* job = snap.FindJob(JobId(id));
    if (job == nullptr || run.placement.empty()) continue;
    auto node_name = [&](const ReplicaPlacement& r) -> const std::string& { return snap.nodes()[r.node.value()].spec.name; };
    const ReplicaPlacement& first = run.placement.front();
    auto report = [&](const ReplicaPlacement& r) {
      api::TaskReport t;
      t.job = JobId(id);
      t.task = r.task;
      t.replica = r.replica;
      t.attempt = job->ReplicaAttempt(r.replica);
      return t;
    };
    const TimePoint exit_at = std::min(run.finish, run.stop_at);
    // Periodic checkpoints due by now (one report: the latest).
    TimePoint checkpoint = -1;
    while (run.next_checkpoint <= now && run.next_checkpoint < exit_at) {
      checkpoint = run.next_checkpoint;
      run.next_checkpoint += run.work.checkpoint_interval;
    }
    if (run.next_checkpoint >= run.finish) run.next_checkpoint = kNever;
    if (exit_at <= now && run.save_on_stop && run.stop_at < run.finish) checkpoint = run.stop_at;
    if (checkpoint >= 0) {
      api::TaskReport t = report(first);
      t.checkpoint_at = checkpoint;
      t.checkpoint_path = kProgressPrefix + std::to_string(run.ProgressAt(checkpoint));
      by_node[node_name(first)].first.push_back(std::move(t));
    }
    if (exit_at <= now) {
      for (const ReplicaPlacement& r : run.placement) {
        api::TaskReport t = report(r);
        t.exited = true;
        t.exit_code = 0;
        by_node[node_name(r)].second.push_back(std::move(t));
      }
      run.exited_at = exit_at;
      run.finish = run.stop_at = run.next_checkpoint = kNever;  // reported: nothing more until the journal says
    }
    run.generation = ++generation_;
    Push(JobId(id), run);
  }
  for (auto& [node, reports] : by_node) {
    auto order = [](const api::TaskReport& a, const api::TaskReport& b) {
      return std::tie(a.job, a.task, a.replica) < std::tie(b.job, b.task, b.replica);
    };
    std::sort(reports.first.begin(), reports.first.end(), order);
    std::sort(reports.second.begin(), reports.second.end(), order);
    std::vector<api::TaskReport> all = std::move(reports.first);
    all.insert(all.end(), reports.second.begin(), reports.second.end());
    out->emplace_back(node, std::move(all));
  }
}

double AgentModel::lost_gpu_seconds(JobId id) const {
  auto it = lost_.find(id.value());
  return it == lost_.end() ? 0 : it->second;
}

}  // namespace rota::sim
