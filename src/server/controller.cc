#include "server/controller.h"

#include "base/random_hex.h"
#include "base/thread_name.h"
#include "server/auth.h"
#include "server/histogram.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <future>
#include <set>


namespace rota::server {

StatusOr<RendezvousKey> LoadRendezvousKey(Store& store, TimePoint now) {
  // When first (a crash between leaves a time before the key: no gang was
  // bound meanwhile), then the key's halves.
  RendezvousKey k;
  ROTA_ASSIGN_OR_RETURN(const uint64_t since,
                        store.Keep(kRendezvousKeyNames[0], static_cast<uint64_t>(std::max<TimePoint>(0, now))));
  k.since = static_cast<TimePoint>(since);
  for (int i = 0; i < 2; ++i) {
    ROTA_ASSIGN_OR_RETURN(k.key[i], store.Keep(kRendezvousKeyNames[1 + i], SecureRandom63()));
  }
  return k;
}

int32_t RendezvousPort(const RendezvousKey& key, JobId job, int64_t gang_attempt, TimePoint began) {
  // (The old port: what an older server gave the attempt.)
  if (began < key.since) return 20000 + static_cast<int32_t>((job.value() * 7 + static_cast<uint64_t>(gang_attempt)) % 20000);
  // (Fixed-width fields, in the machine's order: key and message are only
  // ever made here. Every heartbeat's answer asks, a few microseconds a
  // task: OpenSSL's one-shot HMAC fetches SHA-256 and makes a context.)
  const uint64_t message[2] = {job.value(), static_cast<uint64_t>(gang_attempt)};
  const uint64_t mac = HmacSha256Prefix(std::string_view(reinterpret_cast<const char*>(key.key), sizeof(key.key)),
                                        std::string_view(reinterpret_cast<const char*>(message), sizeof(message)));
  const auto span = static_cast<uint64_t>(kRendezvousPorts.second - kRendezvousPorts.first + 1);
  return kRendezvousPorts.first + static_cast<int32_t>(mac % span);
}

Controller::Controller(ControllerOptions options, std::unique_ptr<Store> store)
    : options_(std::move(options)),
      store_(std::move(store)),
      recovered_(std::make_unique<Recovered>(options_.config.topology)),
      state_(*recovered_->state),
      lifecycle_(options_.clock, options_.preempt_slack, FenceAfter() + kFenceMargin,
                 options_.config.limits.max_checkpoint_grace),
      usage_(RightSizing{options_.idle_utilization_pct, options_.idle_after, options_.overprovisioned_pct},
             [this](const std::string& node, const std::string& model) {
               return options_.config.GpuHourPrice(node, model);
             }) {}

Controller::~Controller() { Stop(); }

Status Controller::Start() {
  sched::EngineOptions engine = sched::EngineOptions::FromConfig(options_.config);
  engine.min_runtime = options_.min_runtime;
  ROTA_ASSIGN_OR_RETURN(scheduler_, sched::Scheduler::Create(options_.config, engine));
  ROTA_ASSIGN_OR_RETURN(probe_, sched::Scheduler::Create(options_.config, engine));
  // Recover: the latest snapshot plus the journal after it (a following
  // standby applied them already: StartFollowing, CatchUp).
  if (warm_ && recovered_->seq != store_->last_seq()) {
    return FailedPreconditionError("the warm state is at event " + std::to_string(recovered_->seq) +
                                   " but the journal ends at " + std::to_string(store_->last_seq()));
  }
  if (!warm_) ROTA_RETURN_IF_ERROR(store_->Replay([this](const Event& e) { return recovered_->Apply(e); }));
  {
    // Dated after every gang the recovered state holds, whatever this
    // host's clock says: one an older leader bound (by its own clock, ahead
    // of this one) keeps the port its ranks met at.
    TimePoint since = options_.clock->Now();
    for (const auto& [id, job] : state_.GetSnapshot().live_jobs()) {
      since = std::max(since, std::max(job->started_at, job->resized_at) + 1);
    }
    ROTA_ASSIGN_OR_RETURN(rendezvous_key_, LoadRendezvousKey(*store_, since));
  }
  next_job_id_ = recovered_->next_job_id;
  request_ids_ = std::move(recovered_->request_ids);
  last_snapshot_seq_ = store_->last_seq();
  ROTA_RETURN_IF_ERROR(ReloadTokens());
  // The job families' last attempts, for submissions' right-size notes.
  {
    const TimePoint now = options_.clock->Now();
    auto recent = store_->Usage(now - 30LL * 24 * 3600 * kMicrosPerSecond, now + 1);
    if (recent.ok()) {
      for (const UsageRecord& r : *recent) NoteFamilyUsage(r);
    }
    // The GPUs' hour and day so far, to extend rather than overwrite.
    for (const int32_t step : {GpuHistoryBlock::kMinute, GpuHistoryBlock::kHour}) {
      auto current = store_->GpuHistory("", step, BlockStart(step, now), now + 1);
      if (current.ok()) {
        history_.Warm(*current, now);
      } else {
        std::fprintf(stderr, "rota: gpu history of the current %s not read back (it starts again): %s\n",
                     step == GpuHistoryBlock::kMinute ? "hour" : "day", current.status().ToString().c_str());
      }
    }
  }

  // Every live job's queue is still in the config: one the config dropped
  // would hold jobs outside every queue's quota, fair share and listing.
  {
    const std::vector<std::string> leaves = LeafQueuePaths(options_.config);
    std::map<std::string, std::vector<uint64_t>> orphans;
    Snapshot snap = state_.GetSnapshot();
    for (const auto& [id, job] : snap.live_jobs()) {
      if (std::find(leaves.begin(), leaves.end(), job->spec().queue) == leaves.end()) {
        orphans[job->spec().queue].push_back(id.value());
      }
    }
    if (!orphans.empty()) {
      std::string what;
      for (const auto& [queue, ids] : orphans) {
        what += (what.empty() ? "" : "; ") + std::string("'") + queue + "' holds " + std::to_string(ids.size()) +
                (ids.size() == 1 ? " live job (" : " live jobs (");
        for (size_t i = 0; i < ids.size() && i < 5; ++i) what += (i == 0 ? "" : ", ") + std::to_string(ids[i]);
        what += ids.size() > 5 ? ", ...)" : ")";
      }
      return FailedPreconditionError(
          "queues: live jobs are in queues that are no longer leaf queues of the config: " + what +
          ". Keep those queues until their jobs end, or cancel the jobs first (with the previous config)");
    }
  }
  // Declared nodes from the config that the journal does not have yet.
  ROTA_ASSIGN_OR_RETURN(std::vector<NodeSpec> declared, ExpandNodes(options_.config));
  for (const NodeSpec& n : declared) declared_labels_[n.name] = n.labels;
  std::vector<Event> added;
  {
    Snapshot snap = state_.GetSnapshot();
    std::set<std::string> drained(options_.config.drained.begin(), options_.config.drained.end());
    for (NodeSpec& n : declared) {
      if (snap.FindNode(n.name) != nullptr) continue;
      const bool drain = drained.count(n.name) > 0;
      const std::string name = n.name;
      added.push_back(NodeAdded{std::move(n)});
      if (drain) added.push_back(NodeDrainChanged{name, true});
    }
  }
  for (const Event& e : added) ROTA_RETURN_IF_ERROR(state_.Apply(e));
  if (!added.empty()) ROTA_RETURN_IF_ERROR(store_->Append(added).status());
  ROTA_RETURN_IF_ERROR(CancelCutArrays());
  // Nodes running work from before a restart must heartbeat again within the
  // timeout, or their gangs are requeued. The agent the journal names for a
  // node keeps it as if it had reported at this start: another instance
  // takes the node over only once the first's tasks have fenced themselves
  // (RegisterNode), not at once because this server forgot who held it.
  {
    Snapshot snap = state_.GetSnapshot();
    for (const NodeState& n : snap.nodes()) {
      if (n.agent.empty()) continue;
      NodeLive& live = live_[n.spec.name];
      live.instance = n.agent;
      live.address = n.agent_address;  // (peers' host lists name it so before it registers again)
      live.last_heartbeat = options_.clock->Steady();
    }
    for (const auto& [id, job] : snap.live_jobs()) {
      if (job->state != JobState::kRunning) continue;
      for (const ReplicaPlacement& r : job->placement) {
        NodeLive& live = live_[snap.node(r.node).spec.name];
        live.expected = true;
        live.last_heartbeat = options_.clock->Steady();
      }
    }
  }
  Publish();
  {
    Snapshot snap = state_.GetSnapshot();
    // Fair share goes on from what the queues' jobs held (their recorded
    // attempts), not from zero (before the scheduling thread starts).
    scheduler_->RestoreUsage(snap, options_.clock->Now());
    std::lock_guard<std::mutex> lock(mu_);
    usage_history_ = scheduler_->UsageHistory();
    for (const auto& [id, job] : snap.live_jobs()) Reindex(id, PlacedNodes(snap, id));
  }
  actor_ = NamedThread("rota-actor", [this] { ActorLoop(); });
  scheduler_thread_ = NamedThread("rota-schedule", [this] { SchedulerLoop(); });
  snapshot_thread_ = NamedThread("rota-snapshot", [this] { SnapshotLoop(); });
  history_thread_ = NamedThread("rota-history", [this] { HistoryLoop(); });
  Trigger();
  return Status::Ok();
}

Status Controller::CancelCutArrays() {
  // An array's chunks are journaled one by one, in id order, and its answer
  // comes after the last. An array whose last element was never journaled
  // was cut short by a stop of this server (or its leader) and never
  // answered. (Its last element is forgotten only once no other of its
  // elements lives: ForgetEnded; and no other job takes an id of its range
  // meanwhile.)
  std::vector<Event> cancelled;
  std::set<uint64_t> arrays;
  {
    const Snapshot snap = state_.GetSnapshot();  // (gone before the cancels apply: nothing is copied)
    std::map<uint64_t, bool> whole;  // by array id
    auto cut = [&](JobId array, int64_t count) {
      auto [it, added] = whole.try_emplace(array.value(), true);
      if (added) {
        const JobRecord* last = snap.FindJob(JobId(array.value() + static_cast<uint64_t>(count) - 1));
        it->second = last != nullptr && last->array == array;
      }
      return !it->second;
    };
    const TimePoint now = options_.clock->Now();
    for (const auto& [id, job] : snap.live_jobs()) {
      if (job->array_count <= 1 || job->array.value() == 0 || !cut(job->array, job->array_count)) continue;
      arrays.insert(job->array.value());
      cancelled.push_back(JobCancelled{
          id, now,
          std::string(kArrayFailed) + "cut short by a stop of the server before all " + std::to_string(job->array_count) +
              " elements were committed (a retry with its Idempotency-Key submits it whole)"});
    }
    // Their keys go, even where none of the part committed still runs: a
    // retry is a new submission, not a replay of jobs that never were.
    std::erase_if(request_ids_, [&](const auto& entry) {
      const auto& [first, count] = entry.second;
      const JobRecord* held = count > 1 ? FirstHeld(snap, first, count) : nullptr;
      return held != nullptr && held->array == first && cut(first, count);
    });
  }
  if (cancelled.empty()) return Status::Ok();
  std::fprintf(stderr, "rota: %zu job arrays cut short by the last stop are cancelled (%zu jobs): all or none\n",
               arrays.size(), cancelled.size());
  for (const Event& e : cancelled) ROTA_RETURN_IF_ERROR(state_.Apply(e));
  return store_->Append(cancelled).status();
}

Status Controller::StartFollowing() {
  ROTA_RETURN_IF_ERROR(store_->Replay([this](const Event& e) { return recovered_->Apply(e); }));
  // (Not the rendezvous key: a standby answers no agent, and one of a newer
  // version would date the key while an older leader still binds gangs
  // at the old port. Start loads it on taking over.)
  recovered_->seq = store_->last_seq();
  warm_ = true;
  ROTA_RETURN_IF_ERROR(ReloadTokens());
  Snapshot snap = state_.GetSnapshot();
  std::lock_guard<std::mutex> lock(mu_);
  published_ = snap;
  for (const auto& [id, job] : snap.live_jobs()) Reindex(id, PlacedNodes(snap, id));
  return Status::Ok();
}

Status Controller::CatchUp() {
  std::vector<Event> applied;
  auto seq = store_->Follow(recovered_->seq, [&](const Event& e) {
    ROTA_RETURN_IF_ERROR(recovered_->Apply(e));
    ++recovered_->seq;
    applied.push_back(e);
    return Status::Ok();
  });
  if (!applied.empty()) PublishBatch(applied);
  return seq.status();
}

Status Controller::ReloadTokens() {
  ROTA_ASSIGN_OR_RETURN(std::vector<TokenRecord> tokens, store_->Tokens());
  for (const TokenRecord& t : tokens) auth_.Add(t);
  return Status::Ok();
}

void Controller::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return;
    stopping_ = true;
  }
  cv_.notify_all();
  cycle_cv_.notify_all();
  node_cv_.notify_all();
  if (scheduler_thread_.joinable()) scheduler_thread_.join();
  if (actor_.joinable()) actor_.join();
  {
    std::lock_guard<std::mutex> lock(snapshot_mu_);
    snapshot_stop_ = true;
  }
  snapshot_cv_.notify_all();
  if (snapshot_thread_.joinable()) snapshot_thread_.join();
  {
    std::lock_guard<std::mutex> lock(history_mu_);
    history_stop_ = true;
  }
  history_cv_.notify_all();
  if (history_thread_.joinable()) {
    history_thread_.join();
    FlushHistory(/*all=*/true);  // the hour so far, to the last minute, for the next start to extend
  }
}

void Controller::HistoryLoop() {
  std::unique_lock<std::mutex> lock(history_mu_);
  while (!history_stop_) {
    if (options_.history_flush <= 0) {
      history_cv_.wait(lock, [this] { return history_stop_; });
      return;
    }
    history_cv_.wait_for(lock, std::chrono::microseconds(options_.history_flush), [this] { return history_stop_; });
    if (history_stop_) return;
    lock.unlock();
    FlushHistory();
    lock.lock();
  }
}

void Controller::FlushHistory(bool all) {
  const TimePoint now = options_.clock->Now();
  std::lock_guard<std::mutex> lock(history_mu_);  // one flush at a time: writes land in order
  std::vector<GpuHistoryBlock> taken = history_.Take(now, all);
  // Earlier blocks the store refused first, then what was taken now; a
  // block once only, its latest (one statement may not write a row twice).
  std::vector<GpuHistoryBlock> blocks;
  {
    std::set<std::tuple<std::string, int32_t, int32_t, TimePoint>> seen;
    std::vector<GpuHistoryBlock> pending = std::move(unwritten_history_);
    unwritten_history_.clear();
    pending.insert(pending.end(), std::make_move_iterator(taken.begin()), std::make_move_iterator(taken.end()));
    for (auto it = pending.rbegin(); it != pending.rend(); ++it) {
      if (seen.insert({it->node, it->gpu, it->step_s, it->start}).second) blocks.push_back(std::move(*it));
    }
    std::reverse(blocks.begin(), blocks.end());
  }
  if (!blocks.empty()) {
    if (Status s = store_->PutGpuHistory(blocks); !s.ok()) {
      std::fprintf(stderr, "rota: gpu history not written (will retry): %s\n", s.ToString().c_str());
      if (blocks.size() > 100'000) blocks.erase(blocks.begin(), blocks.end() - 100'000);
      unwritten_history_ = std::move(blocks);
    }
  }
  if (now - history_trimmed_at_ >= 3600 * kMicrosPerSecond) {
    history_trimmed_at_ = now;
    if (options_.history_minutes > 0) {
      store_->DropGpuHistory(GpuHistoryBlock::kMinute, now - options_.history_minutes).status().IgnoreError();
    }
    if (options_.history_hours > 0) {
      store_->DropGpuHistory(GpuHistoryBlock::kHour, now - options_.history_hours).status().IgnoreError();
    }
  }
}

StatusOr<std::vector<GpuHistoryBlock>> Controller::GpuHistory(const std::string& node, int32_t step_s, TimePoint since,
                                                              TimePoint until) const {
  ROTA_ASSIGN_OR_RETURN(std::vector<GpuHistoryBlock> stored, store_->GpuHistory(node, step_s, since, until));
  // The blocks still filling replace what was written of them.
  std::map<std::pair<int32_t, TimePoint>, GpuHistoryBlock> by_key;
  for (GpuHistoryBlock& b : stored) by_key[{b.gpu, b.start}] = std::move(b);
  for (GpuHistoryBlock& b : history_.Current(node, step_s, options_.clock->Now())) {
    if (b.start >= since && b.start < until) by_key[{b.gpu, b.start}] = std::move(b);
  }
  std::vector<GpuHistoryBlock> out;
  out.reserve(by_key.size());
  for (auto& [key, b] : by_key) out.push_back(std::move(b));
  return out;
}

void Controller::SnapshotLoop() {
  // Compaction is background work: at nice 19 it takes what the actor, the
  // scheduler and the HTTP threads leave (under a 20,000-job array on
  // 12,500 nodes it was a fifth of the server's CPU, snapshots every
  // snapshot_every events), and a snapshot delayed by load is taken when
  // the load passes (the journal's tail grows meanwhile). No request waits
  // for it, and it holds no lock another thread takes: it writes a database
  // of its own, and the appender trims the journal behind it (SqliteStore).
  // Raising one's own nice needs no privilege. ROTA_SNAPSHOT_NICE sets
  // another, absolute (0: as the other threads; below the server's own it
  // needs CAP_SYS_NICE).
  const char* nice = std::getenv("ROTA_SNAPSHOT_NICE");
  const int level = nice != nullptr ? std::atoi(nice) : 19;
  if (setpriority(PRIO_PROCESS, static_cast<id_t>(gettid()), level) != 0) {
    std::fprintf(stderr, "rota: the snapshot thread stays at its nice value (nice %d: %s)\n", level, std::strerror(errno));
  }
  while (true) {
    uint64_t seq = 0;
    std::optional<Snapshot> snap;
    {
      std::unique_lock<std::mutex> lock(snapshot_mu_);
      snapshot_cv_.wait(lock, [this] { return snapshot_stop_ || snapshot_pending_.has_value(); });
      if (!snapshot_pending_) return;
      seq = snapshot_pending_->first;
      snap = snapshot_pending_->second;
    }
    if (Status s = store_->WriteSnapshot(seq, [&](const EventSink& sink) { return CompactState(*snap, sink); }); s.ok()) {
      last_snapshot_seq_ = seq;
    } else {
      std::fprintf(stderr, "rota: journal snapshot failed (will retry): %s\n", s.ToString().c_str());
    }
    std::lock_guard<std::mutex> lock(snapshot_mu_);
    snapshot_pending_.reset();
    if (snapshot_stop_) return;
  }
}

std::string Controller::StoreError() const {
  std::lock_guard<std::mutex> lock(store_error_mu_);
  return store_error_;
}

void Controller::NoteBatch(double append_seconds, double batch_seconds) {
  metrics_.append_buckets.resize(std::size(kBatchBuckets) + 1);
  metrics_.batch_buckets.resize(std::size(kBatchBuckets) + 1);
  metrics_.append_buckets[BucketOf(kBatchBuckets, append_seconds)]++;
  metrics_.batch_buckets[BucketOf(kBatchBuckets, batch_seconds)]++;
  metrics_.append_sum_seconds += append_seconds;
  metrics_.batch_sum_seconds += batch_seconds;
}

void Controller::Publish() {
  Snapshot snap = state_.GetSnapshot();
  std::lock_guard<std::mutex> lock(mu_);
  published_ = snap;
}

std::vector<std::string> Controller::PlacedNodes(const Snapshot& snap, JobId id) {
  std::vector<std::string> nodes;
  const JobRecord* job = snap.FindJob(id);
  if (job == nullptr || (job->state != JobState::kRunning && job->state != JobState::kPreempting)) return nodes;
  for (const ReplicaPlacement& r : job->placement) {
    const std::string& n = snap.node(r.node).spec.name;
    if (std::find(nodes.begin(), nodes.end(), n) == nodes.end()) nodes.push_back(n);
  }
  return nodes;
}

void Controller::Reindex(JobId id, std::vector<std::string> nodes) {
  auto old = job_nodes_.find(id);
  if (old != job_nodes_.end()) {
    for (const std::string& n : old->second) {
      auto it = node_jobs_.find(n);
      if (it == node_jobs_.end()) continue;
      it->second.erase(id);
      if (it->second.empty()) node_jobs_.erase(it);
    }
    job_nodes_.erase(old);
  }
  for (const std::string& n : nodes) node_jobs_[n].insert(id);
  if (!nodes.empty()) job_nodes_[id] = std::move(nodes);
}

const std::set<JobId>* Controller::JobsOn(const std::string& node) const {
  auto it = node_jobs_.find(node);
  return it == node_jobs_.end() ? nullptr : &it->second;
}

void Controller::PublishBatch(const std::vector<Event>& events) {
  // The published state and the node index change under one lock: a reader
  // of both (NodeTasks, a quiet heartbeat) never sees one without the other.
  Snapshot snap = state_.GetSnapshot();
  std::set<JobId> jobs;
  for (const Event& e : events) {
    if (const JobId id = EventJob(e); id.value() != 0) jobs.insert(id);
  }
  // Worked out before taking the lock (only this thread writes the index):
  // a 20,000-job batch is mostly jobs that were and stay unplaced, and the
  // event loop's heartbeats wait on this lock. A job's event touches the
  // nodes it left and joined, and those it holds where they stay the same
  // (running to preempting changes their tasks).
  std::set<std::string> touched;
  std::vector<std::pair<JobId, std::vector<std::string>>> moved;
  for (JobId id : jobs) {
    std::vector<std::string> nodes = PlacedNodes(snap, id);
    touched.insert(nodes.begin(), nodes.end());
    auto old = job_nodes_.find(id);
    if (old == job_nodes_.end() ? nodes.empty() : old->second == nodes) continue;
    if (old != job_nodes_.end()) touched.insert(old->second.begin(), old->second.end());
    moved.emplace_back(id, std::move(nodes));
  }
  std::optional<Snapshot> previous(std::move(snap));  // freed after the lock, not under it
  {
    std::lock_guard<std::mutex> lock(mu_);
    published_.swap(previous);
    for (auto& [id, nodes] : moved) Reindex(id, std::move(nodes));
    for (const std::string& n : touched) ++node_versions_[n];
  }
  if (touched.empty()) return;
  node_cv_.notify_all();
  std::lock_guard<std::mutex> lock(listener_mu_);
  if (node_listener_) node_listener_(std::vector<std::string>(touched.begin(), touched.end()));
}

void Controller::RecordUsage(const std::vector<Event>& events) {
  // Each job whose attempt ended or changed, and when (the event's time: a
  // task found ended late ended before now, JobLifecycle).
  std::map<JobId, TimePoint> jobs;
  for (const Event& e : events) {
    std::visit([&](const auto& ev) {
      if constexpr (std::is_same_v<std::decay_t<decltype(ev)>, JobFinished> ||
                    std::is_same_v<std::decay_t<decltype(ev)>, JobRequeued> ||
                    std::is_same_v<std::decay_t<decltype(ev)>, JobCancelled> ||
                    std::is_same_v<std::decay_t<decltype(ev)>, JobResized>) {
        jobs.emplace(ev.id, ev.at);
      }
    }, e);
  }
  if (jobs.empty() && unwritten_usage_.empty()) return;
  const Snapshot before = [&] {
    std::lock_guard<std::mutex> lock(mu_);
    return *published_;
  }();
  const Snapshot after = state_.GetSnapshot();
  const TimePoint now = options_.clock->Now();
  for (const auto& [id, at] : jobs) {
    const JobRecord* was = before.FindJob(id);
    if (was == nullptr || (was->state != JobState::kRunning && was->state != JobState::kPreempting) ||
        was->placement.empty()) {
      continue;
    }
    const JobRecord* is = after.FindJob(id);
    std::string end, reason;
    if (is == nullptr) {
      end = "cancelled";
    } else if (is->state == JobState::kSucceeded) {
      end = "succeeded";
    } else if (is->state == JobState::kFailed || is->state == JobState::kCancelled) {
      end = is->state == JobState::kFailed ? "failed" : "cancelled";
      reason = is->end_reason;
    } else if (is->state == JobState::kPending) {
      end = is->preempted_at.size() > was->preempted_at.size() ||
                    (was->state == JobState::kPreempting && !was->restarting)
                ? "preempted"
                : "requeued";
      reason = is->last_requeue_reason;
    } else if (is->placement != was->placement) {
      end = "resized";
      reason = is->last_resize_reason;
    } else {
      continue;  // still running where it ran
    }
    unwritten_usage_.push_back(usage_.Close(before, *was, std::move(end), std::move(reason), at != 0 ? std::min(at, now) : now));
    NoteFamilyUsage(unwritten_usage_.back());
  }
  if (unwritten_usage_.empty()) return;
  // The journal holds the job's history either way; a store that cannot
  // write the records now gets them with a later batch (at most 100,000 wait).
  if (store_->PutUsage(unwritten_usage_).ok()) {
    unwritten_usage_.clear();
  } else if (unwritten_usage_.size() > 100'000) {
    unwritten_usage_.erase(unwritten_usage_.begin(), unwritten_usage_.end() - 100'000);
  }
}

void Controller::NoteFamilyUsage(const UsageRecord& record) {
  std::lock_guard<std::mutex> lock(family_mu_);
  auto& family = family_usage_[record.user + '\n' + record.name];
  family.push_back(record);
  if (family.size() > 8) family.pop_front();
  if (family_usage_.size() > 20'000) {
    // Bounded: drop another family (the first by name; it comes back with its next attempt).
    auto victim = family_usage_.begin();
    if (&victim->second == &family) ++victim;
    family_usage_.erase(victim);
  }
}

std::deque<UsageRecord> Controller::FamilyAttempts(const std::string& user, const std::string& name) const {
  std::lock_guard<std::mutex> lock(family_mu_);
  auto it = family_usage_.find(user + '\n' + name);
  return it == family_usage_.end() ? std::deque<UsageRecord>{} : it->second;
}

RightSize Controller::FamilyShape(const std::string& user, const std::string& name) const {
  const std::deque<UsageRecord> family = FamilyAttempts(user, name);
  if (family.empty()) return {};
  std::vector<const UsageRecord*> records;
  for (const UsageRecord& r : family) records.push_back(&r);
  return RecommendShape(records, options_.clock->Now(), {});
}

StatusOr<std::vector<UsageRecord>> Controller::Usage(const Principal& who, TimePoint since, TimePoint until,
                                                     bool with_running) const {
  const TimePoint now = options_.clock->Now();
  // (Nothing older is kept past the next hourly trim: a window of years reads no more.)
  if (options_.usage_retention > 0) since = std::max(since, now - options_.usage_retention - 3600 * kMicrosPerSecond);
  ROTA_ASSIGN_OR_RETURN(std::vector<UsageRecord> records, store_->Usage(since, until));
  if (with_running) {
    // The attempts still running, measured so far.
    const Snapshot snap = snapshot();
    std::vector<JobId> running;
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (const auto& [id, nodes] : job_nodes_) running.push_back(id);
    }
    for (JobId id : running) {
      const JobRecord* job = snap.FindJob(id);
      if (job == nullptr || job->state != JobState::kRunning) continue;
      UsageRecord r = usage_.Peek(snap, *job, now);
      r.end = "running";
      records.push_back(std::move(r));
    }
  }
  if (!who.admin()) std::erase_if(records, [&](const UsageRecord& r) { return r.user != who.user; });
  return records;
}

StatusOr<std::vector<UsageRecord>> Controller::UsageOfJob(const Principal& who, JobId job) const {
  ROTA_ASSIGN_OR_RETURN(std::vector<UsageRecord> records, store_->UsageOfJob(job));
  if (!who.admin()) std::erase_if(records, [&](const UsageRecord& r) { return r.user != who.user; });
  return records;
}

StatusOr<std::vector<UsageRecord>> Controller::JobUsage(const Principal& who, JobId id, const std::string& user,
                                                        const std::string& name, const JobRecord* job) const {
  if (!who.admin() && user != who.user) return std::vector<UsageRecord>{};
  ROTA_ASSIGN_OR_RETURN(std::vector<UsageRecord> records, store_->UsageOfJob(id));
  if (job != nullptr && job->state == JobState::kRunning) {
    UsageRecord r = usage_.Peek(snapshot(), *job, options_.clock->Now());
    r.end = "running";
    records.push_back(std::move(r));
  }
  for (UsageRecord& r : FamilyAttempts(user, name)) {
    if (r.job != id) records.push_back(std::move(r));
  }
  return records;
}

void Controller::SetNodeListener(std::function<void(const std::vector<std::string>&)> listener) {
  std::lock_guard<std::mutex> lock(listener_mu_);
  node_listener_ = std::move(listener);
}

StatusOr<std::vector<TaskAssignment>> Controller::NodeTasks(const std::string& node_name, uint64_t* revision) const {
  std::lock_guard<std::mutex> lock(mu_);
  const Snapshot& snap = *published_;
  const NodeState* node = snap.FindNode(node_name);
  if (node == nullptr) return NotFoundError("node '" + node_name + "' is not registered");
  if (revision != nullptr) *revision = snap.revision();
  std::vector<TaskAssignment> tasks;
  if (const std::set<JobId>* ids = JobsOn(node_name)) {
    for (JobId id : *ids) {
      const JobRecord* job = snap.FindJob(id);
      if (job == nullptr || job->state != JobState::kRunning) continue;
      for (size_t i = 0; i < job->placement.size(); ++i) {
        if (job->placement[i].node == node->id) tasks.push_back(Assignment(snap, *job, i));
      }
    }
  }
  return tasks;
}

uint64_t Controller::NodeVersion(const std::string& node) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = node_versions_.find(node);
  return it == node_versions_.end() ? 0 : it->second;
}

bool Controller::WaitNodeChange(const std::string& node, uint64_t version, Duration timeout) const {
  std::unique_lock<std::mutex> lock(mu_);
  return node_cv_.wait_for(lock, std::chrono::microseconds(timeout), [&] {
    if (stopping_) return true;
    auto it = node_versions_.find(node);
    return (it == node_versions_.end() ? 0 : it->second) != version;
  });
}

void Controller::Trigger() {
  if (!options_.cycle_on_change) return;
  {
    std::lock_guard<std::mutex> lock(mu_);
    trigger_ = true;
  }
  cv_.notify_all();
}

Snapshot Controller::snapshot() const {
  std::lock_guard<std::mutex> lock(mu_);
  return *published_;
}

bool Controller::Busy() const {
  std::unique_lock<std::mutex> lock(mu_, std::try_to_lock);
  return !lock.owns_lock();
}

std::optional<sched::PendingReason> Controller::pending_reason(JobId id) const {
  std::lock_guard<std::mutex> lock(reasons_mu_);
  auto by_id = [](const sched::Waiting& a, const sched::Waiting& b) { return a.job < b.job; };
  if (!reasons_by_id_) {  // (in job order, often id order already: a check costs n comparisons)
    if (!std::is_sorted(reasons_.begin(), reasons_.end(), by_id)) std::sort(reasons_.begin(), reasons_.end(), by_id);
    reasons_by_id_ = true;
  }
  auto it = std::lower_bound(reasons_.begin(), reasons_.end(), id,
                             [](const sched::Waiting& w, JobId job) { return w.job < job; });
  if (it == reasons_.end() || it->job != id) return std::nullopt;
  return it->reason;
}

std::vector<std::string> Controller::job_flags(const JobRecord& job) const {
  if (job.state != JobState::kRunning) return {};
  return usage_.Flags(snapshot(), job, options_.clock->Now());
}

std::map<std::string, NodeLive> Controller::nodes_live() const {
  std::lock_guard<std::mutex> lock(mu_);
  return live_;
}

std::map<std::string, NodeLive> Controller::nodes_live(const std::vector<std::string>& names) const {
  std::map<std::string, NodeLive> out;
  std::lock_guard<std::mutex> lock(mu_);
  for (const std::string& name : names) {
    if (auto it = live_.find(name); it != live_.end()) out.emplace(name, it->second);
  }
  return out;
}

bool Controller::NodeRegistered(const std::string& node) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = live_.find(node);
  return it != live_.end() && it->second.registered;
}

ControllerMetrics Controller::metrics() const {
  std::lock_guard<std::mutex> lock(mu_);
  return metrics_;
}

template <typename T>
void Controller::CallAsync(std::function<StatusOr<T>(Batch&)> fn, std::function<void(StatusOr<T>)> done, bool standalone) {
  {
    std::unique_lock<std::mutex> lock(mu_);
    if (stopping_) {
      lock.unlock();
      return done(UnavailableError("the server is shutting down"));
    }
    inbox_.push_back([fn = std::move(fn), done = std::move(done), standalone](Batch& batch) {
      std::shared_ptr<StatusOr<T>> result;
      try {
        result = std::make_shared<StatusOr<T>>(fn(batch));
      } catch (const std::exception& e) {
        result = std::make_shared<StatusOr<T>>(InternalError(std::string("controller: ") + e.what()));
      }
      batch.standalone.push_back(standalone);
      batch.done.push_back([done, result](const Status& committed) {
        if (!committed.ok()) done(committed);
        else done(std::move(*result));
      });
    });
  }
  cv_.notify_all();
}

template <typename T>
StatusOr<T> Controller::Call(std::function<StatusOr<T>(Batch&)> fn, bool standalone) {
  auto promise = std::make_shared<std::promise<StatusOr<T>>>();
  auto future = promise->get_future();
  CallAsync<T>(std::move(fn), [promise](StatusOr<T> r) { promise->set_value(std::move(r)); }, standalone);
  return future.get();
}

void Controller::ActorLoop() {
  while (true) {
    std::deque<std::function<void(Batch&)>> work;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [this] { return stopping_ || !inbox_.empty(); });
      if (inbox_.empty() && stopping_) break;
      if (options_.max_batch == 0 || inbox_.size() <= options_.max_batch) {
        work.swap(inbox_);
      } else {
        for (size_t i = 0; i < options_.max_batch; ++i) {
          work.push_back(std::move(inbox_.front()));
          inbox_.pop_front();
        }
      }
    }
    const auto taken_at = std::chrono::steady_clock::now();
    Batch batch{&state_, {}, {}, {}};
    const uint64_t next_job_id = next_job_id_;  // restored with the state if the batch cannot be journaled
    for (auto& message : work) {
      try {
        message(batch);
      } catch (const std::exception& e) {
        // Unreachable by design (inputs are validated first); a message that
        // throws anyway fails alone instead of taking the server down.
        std::fprintf(stderr, "rota: request failed inside the controller: %s\n", e.what());
      }
    }
    Status committed;
    if (!batch.events.empty()) {
      const auto append_at = std::chrono::steady_clock::now();
      auto seq = store_->Append(batch.events);
      const auto appended_at = std::chrono::steady_clock::now();
      if (!seq.ok()) {
        // The disk refused the batch (full, read-only, failing): undo it in
        // memory and refuse every caller in it. The server keeps serving
        // reads; the next batch tries the disk again.
        {
          std::lock_guard<std::mutex> lock(mu_);
          state_.Restore(*published_);
          std::lock_guard<std::mutex> error_lock(store_error_mu_);
          store_error_ = std::string(seq.status().message());
        }
        next_job_id_ = next_job_id;
        for (auto it = batch.undo.rbegin(); it != batch.undo.rend(); ++it) (*it)();
        if (store_failures_.fetch_add(1) == 0) {
          std::fprintf(stderr, "rota: journal writes failing, changes refused: %s\n", seq.status().ToString().c_str());
        }
        const StatusCode code = seq.status().code() == StatusCode::kInsufficientStorage ? StatusCode::kInsufficientStorage
                                                                                        : StatusCode::kUnavailable;
        // (A commit whose outcome the store cannot tell is not "not made".)
        const bool unknown = std::string_view(seq.status().message()).find(" is unknown") != std::string_view::npos;
        const Status refused(code, std::string(unknown ? "the change may or may not have been made" : "the change was not made") +
                                       ": the store cannot write (" + std::string(seq.status().message()) + ")");
        // A message that journals nothing and reads no state (tokens) keeps
        // its own result; everyone else in the batch is refused.
        for (size_t i = 0; i < batch.done.size(); ++i) batch.done[i](batch.standalone[i] ? Status::Ok() : refused);
        continue;
      }
      if (store_failures_.exchange(0) > 0) {
        std::lock_guard<std::mutex> lock(store_error_mu_);
        store_error_.clear();
        std::fprintf(stderr, "rota: journal writes work again\n");
      }
      for (const auto& [key, jobs] : batch.request_ids) {
        const size_t nl = key.find('\n');
        NoteRequestId(request_ids_, key.substr(0, nl), key.substr(nl + 1), jobs.first, jobs.second);
      }
      for (const Event& e : batch.events) {
        // (The published state is still the one before the batch.)
        if (const auto* f = std::get_if<JobsForgotten>(&e)) ForgetRequestIds(request_ids_, *f, *published_, state_.GetSnapshot());
        if (const auto* c = std::get_if<JobCancelled>(&e)) DropFailedArrayKey(request_ids_, *c, *published_);
      }
      RecordUsage(batch.events);
      PublishBatch(batch.events);
      Trigger();
      if (*seq - last_snapshot_seq_ >= options_.snapshot_every) {
        // Compacted, encoded and written on the snapshot thread, from this
        // immutable view: the actor never waits for a snapshot.
        std::lock_guard<std::mutex> lock(snapshot_mu_);
        if (!snapshot_pending_) {
          snapshot_pending_ = std::make_pair(*seq, state_.GetSnapshot());
          snapshot_cv_.notify_one();
        }
      }
      const double append = std::chrono::duration<double>(appended_at - append_at).count();
      const double whole = std::chrono::duration<double>(std::chrono::steady_clock::now() - taken_at).count();
      std::lock_guard<std::mutex> lock(mu_);
      NoteBatch(append, whole);
    }
    for (auto& done : batch.done) done(committed);
  }
  // Refuse whatever arrived while stopping.
  std::deque<std::function<void(Batch&)>> rest;
  {
    std::lock_guard<std::mutex> lock(mu_);
    rest.swap(inbox_);
  }
  Batch batch{&state_, {}, {}, {}};
  for (auto& message : rest) message(batch);
  for (auto& done : batch.done) done(UnavailableError("the server is shutting down"));
}

void Controller::CheckTimes(TimePoint now) {
  // Evicted gangs that outlived their grace period (plus slack) are requeued;
  // jobs past their time limit end (reservations count on time limits).
  // Only running and preempting jobs can be over time: those the node index
  // holds (not every pending job of a million).
  std::vector<JobId> placed;
  JobLifecycle::SeenRunningMap seen;
  const Snapshot snap = snapshot();
  {
    std::lock_guard<std::mutex> lock(mu_);
    placed.reserve(job_nodes_.size());
    for (const auto& [id, nodes] : job_nodes_) placed.push_back(id);
    std::erase_if(stop_seen_, [&](const auto& entry) {
      const JobRecord* job = snap.FindJob(entry.first);
      return job == nullptr || job->state != JobState::kPreempting;
    });
    seen = stop_seen_;
  }
  const JobLifecycle::Overdue overdue = lifecycle_.FindOverdue(snap, placed, now, &seen);
  if (overdue.empty() && !lifecycle_.SteadyDue(options_.clock->Steady())) return;
  Call<bool>([&](Batch& batch) -> StatusOr<bool> {
    lifecycle_.EndOverdue(batch, overdue, now, options_.clock->Steady(), &seen);
    return true;
  }).status().IgnoreError();
}

void Controller::CancelArrayPart(Batch& batch, const CutArray& cut) {
  for (int64_t i = 0; i < cut.committed; ++i) {
    // (One its owner cancelled since is refused, and left as it is.)
    batch.Apply(JobCancelled{JobId(cut.first + static_cast<uint64_t>(i)), options_.clock->Now(),
                             std::string(kArrayFailed) + cut.why})
        .IgnoreError();
  }
}

void Controller::TakeBackCutArrays() {
  std::vector<CutArray> cut;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (cut_arrays_.empty()) return;
    cut.swap(cut_arrays_);
  }
  auto undone = Call<bool>([&](Batch& batch) -> StatusOr<bool> {
    for (const CutArray& a : cut) CancelArrayPart(batch, a);
    return true;
  });
  if (!undone.ok()) {
    std::lock_guard<std::mutex> lock(mu_);  // (the next pass tries again)
    cut_arrays_.insert(cut_arrays_.end(), cut.begin(), cut.end());
  }
}

std::vector<JobId> Controller::ForgetEnded(TimePoint now) {
  // At most once a minute, or four times a retention if that is shorter.
  if (options_.job_retention <= 0 ||
      (now >= jobs_forgotten_at_ &&  // (a clock stepped back: at once)
       now - jobs_forgotten_at_ < std::clamp<Duration>(options_.job_retention / 4, kCheckEvery, 60 * kMicrosPerSecond))) {
    return {};
  }
  jobs_forgotten_at_ = now;
  // Read on a snapshot, off the actor (a walk of the ended records); forgotten on
  // the actor in parts, so that no journal write and no other writer waits
  // long, and at most kPass a pass, so that the scheduling loop (which runs
  // this) is not held long either: a backlog (the first start with a
  // retention, over a million ended jobs) goes over the next passes.
  constexpr size_t kPart = 10'000, kPass = 50'000;
  std::vector<JobId> ended, forgot;
  {
    // (The ended jobs are those not in the live table: found by the
    // tables' occupancy, without reading a live record. 4.5 ms with a
    // million pending jobs, 66 ms reading every record.)
    const Snapshot snap = snapshot();
    snap.jobs().ForEachNotIn(snap.live_jobs(), [&](JobId id, const std::shared_ptr<const JobRecord>& job) {
      if (ended.size() >= kPass || now - job->finished_at < options_.job_retention) return;
      // An array's last element stays while another of its elements lives:
      // a restart takes an array without its last for one a stop cut short
      // (CancelCutArrays), and would cancel the rest.
      if (job->array_count > 1 && id.value() == job->array.value() + static_cast<uint64_t>(job->array_count) - 1) {
        const auto live = snap.live_jobs().upper_bound(JobId(job->array.value() - 1));
        if (live != snap.live_jobs().end() && live->first.value() < id.value()) return;
      }
      ended.push_back(id);
    });
  }
  for (size_t from = 0; from < ended.size(); from += kPart) {
    const auto first = ended.begin() + static_cast<ptrdiff_t>(from);
    const auto last = ended.begin() + static_cast<ptrdiff_t>(std::min(ended.size(), from + kPart));
    std::vector<JobId> part(first, last);
    auto forgotten = Call<bool>([&](Batch& batch) -> StatusOr<bool> {
      // (An ended job stays ended: nothing on the actor can have changed them.)
      const uint64_t next_id = std::max(next_job_id_, part.back().value() + 1);
      ROTA_RETURN_IF_ERROR(batch.Apply(JobsForgotten{std::move(part), now, next_id}));
      return true;
    });
    if (!forgotten.ok()) {
      // (The store refuses, most likely: the next pass tries again.)
      std::fprintf(stderr, "rota: forgetting jobs past the job retention failed: %s\n",
                   forgotten.status().ToString().c_str());
      return forgot;
    }
    forgot.insert(forgot.end(), first, last);
  }
  return forgot;
}

void Controller::DropForgottenLogs() {
  if (options_.logs_dir.empty()) return;
  // The directories first, then the state: a job made after the listing
  // cannot be taken for a forgotten one.
  std::vector<JobId> ids;
  if (DIR* d = opendir(options_.logs_dir.c_str())) {
    while (const dirent* e = readdir(d)) {
      uint64_t id = 0;
      const std::string_view name = e->d_name;
      auto [end, ec] = std::from_chars(name.data(), name.data() + name.size(), id);
      if (ec == std::errc() && end == name.data() + name.size() && name[0] != '0') ids.push_back(JobId(id));
    }
    closedir(d);
  }
  if (ids.empty()) return;
  const Snapshot snap = snapshot();
  std::erase_if(ids, [&](JobId id) { return snap.FindJob(id) != nullptr; });
  DropLogsOf(ids);
}

void Controller::DropLogsOf(const std::vector<JobId>& ids) const {
  if (options_.logs_dir.empty()) return;
  for (JobId id : ids) {
    const std::string dir = options_.logs_dir + "/" + std::to_string(id.value());
    const int fd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) continue;
    std::vector<std::string> logs;  // its logs, and the mark of a capped one (StoreLogs)
    if (DIR* d = fdopendir(dup(fd))) {
      while (const dirent* e = readdir(d)) {
        const std::string_view name = e->d_name;
        if ((name.size() > 4 && name.ends_with(".log")) || name == ".log-capped") logs.emplace_back(name);
      }
      closedir(d);
    }
    for (const std::string& name : logs) unlinkat(fd, name.c_str(), 0);  // (a link is removed, not followed)
    close(fd);
    rmdir(dir.c_str());
  }
}

void Controller::GiveUpGangsOn(Batch& batch, const std::string& name, const std::string& why) {
  // What to change, read first; the snapshot goes before the changes (one
  // held across Apply makes each change copy the state).
  std::vector<const JobRecord*> held;  // its running gangs (records outlive the batch's changes to others)
  NodeId lost_id;
  {
    Snapshot snap = batch.state->GetSnapshot();
    const NodeState* node = snap.FindNode(name);
    if (node == nullptr) return;
    lost_id = node->id;
    std::lock_guard<std::mutex> lock(mu_);
    if (const std::set<JobId>* ids = JobsOn(name)) {
      for (JobId id : *ids) {
        const JobRecord* job = snap.FindJob(id);
        if (job == nullptr || (job->state != JobState::kRunning && job->state != JobState::kPreempting)) continue;
        if (std::any_of(job->placement.begin(), job->placement.end(),
                        [&](const ReplicaPlacement& r) { return r.node == lost_id; })) {
          held.push_back(job);
        }
      }
    }
  }
  for (const JobRecord* job : held) {
    // A service keeps its replicas elsewhere running (its floor allowing):
    // those on the node are dropped, and the engine replaces them.
    if (job->spec().is_service() && job->spec().elastic() && job->state == JobState::kRunning) {
      std::vector<ReplicaPlacement> kept;
      for (const ReplicaPlacement& r : job->placement) {
        if (r.node != lost_id) kept.push_back(r);
      }
      if (!kept.empty() && static_cast<int32_t>(kept.size()) >= job->spec().elastic_min_replicas &&
          batch.Apply(JobResized{job->id, kept, options_.clock->Now(),
                                 std::to_string(job->placement.size() - kept.size()) + " replica(s) dropped: " + why})
              .ok()) {
        continue;
      }
    }
    lifecycle_.NodeFenced(batch, *job, lost_id, why);
  }
}

void Controller::CheckNodes() {
  const TimePoint now = options_.clock->Now();
  CheckTimes(now);
  // Accounting retention, once an hour.
  if (options_.usage_retention > 0 && now - usage_trimmed_at_ >= 3600 * kMicrosPerSecond) {
    usage_trimmed_at_ = now;
    store_->DropUsage(now - options_.usage_retention).status().IgnoreError();
  }
  // A node silent for node_timeout shows as lost; its gangs are requeued
  // only once its tasks have fenced themselves (fence_after, plus a margin
  // for the agent's clock and the supervisors' tick), so a partitioned or
  // hung node never runs a rank beside its replacement.
  const Duration requeue_after = FenceAfter() + kFenceMargin;
  std::vector<std::string> silent;
  {
    Snapshot snap = snapshot();
    const TimePoint steady = options_.clock->Steady();
    std::lock_guard<std::mutex> lock(mu_);
    for (const auto& [name, live] : live_) {
      if (!(live.registered || live.expected) || steady - live.last_heartbeat <= options_.node_timeout) continue;
      const NodeState* node = snap.FindNode(name);
      if (node == nullptr) continue;
      const bool holds = steady - live.last_heartbeat > requeue_after && JobsOn(name) != nullptr;
      if (!node->lost || holds) silent.push_back(name);
    }
  }
  if (silent.empty()) return;
  Call<bool>([&](Batch& batch) -> StatusOr<bool> {
    for (const std::string& name : silent) {
      Duration silence;
      {
        // A heartbeat may have arrived since the scan.
        std::lock_guard<std::mutex> lock(mu_);
        silence = options_.clock->Steady() - live_[name].last_heartbeat;
      }
      if (silence <= options_.node_timeout) continue;
      {
        Snapshot snap = batch.state->GetSnapshot();
        const NodeState* node = snap.FindNode(name);
        if (node == nullptr) continue;
        if (!node->lost) batch.Apply(NodeLostChanged{name, true}).IgnoreError();
      }
      if (silence <= requeue_after) continue;
      GiveUpGangsOn(batch, name,
                    "node " + name + " lost (no heartbeat for " +
                        FormatDuration(silence / kMicrosPerSecond * kMicrosPerSecond) + "; its tasks fenced themselves after " +
                        FormatDuration(FenceAfter()) + ")");
    }
    return true;
  }).status().IgnoreError();
}

void Controller::ScheduleNow() {
  uint64_t ticket;
  {
    std::lock_guard<std::mutex> lock(mu_);
    ticket = ++cycles_requested_;
    trigger_ = true;
  }
  cv_.notify_all();
  std::unique_lock<std::mutex> lock(mu_);
  cycle_cv_.wait(lock, [&] { return stopping_ || cycles_done_ >= ticket; });
}

StatusOr<JobId> Controller::Submit(const Principal& who, JobSpec spec) { return SubmitArray(who, std::move(spec), 1); }

Status Controller::CheckSubmission(const Principal& who, JobSpec* spec, const JobSpec* kept) const {
  if (who.role == Role::kAgent) return Status(StatusCode::kPermissionDenied, "agents cannot submit jobs");
  ROTA_RETURN_IF_ERROR(ValidateNewJobSpec(*spec));
  ROTA_RETURN_IF_ERROR(ResolveJobPolicy(options_.config, spec));
  ROTA_RETURN_IF_ERROR(QueueAllows(options_.config, spec->queue, who.user, who.admin()));
  ROTA_RETURN_IF_ERROR(PriorityAllowed(options_.config, *spec, who.user, who.admin(), kept != nullptr ? kept->priority : -1));
  if (kept == nullptr || spec->checkpoint.grace != kept->checkpoint.grace) {
    ROTA_RETURN_IF_ERROR(GraceAllowed(options_.config, *spec));
  }
  return MountsAllowed(options_.config, *spec, who.admin());
}

// The pending limits for `count` more of `spec` from `who`, counting the
// parts of arrays still being committed (reserved). On the actor.
Status Controller::PendingLimits(const Principal& who, const JobSpec& spec, int64_t count, const Snapshot& snap) {
  const TenantLimits& limits = options_.config.limits;
  const int64_t user_pending = snap.PendingOfUser(who.user) + array_reserved_user_[who.user];
  if (user_pending + count > limits.max_pending_per_user) {
    return ResourceExhaustedError("user '" + who.user + "' has " + std::to_string(user_pending) +
                                  " pending jobs; " + std::to_string(count) + " more would pass the limit " +
                                  "(limits.max_pending_per_user: " + std::to_string(limits.max_pending_per_user) + ")");
  }
  // (An array's elements share one spec: it counts once.)
  const int64_t bytes = snap.PendingBytesOfUser(who.user), more = spec.Bytes();
  if (bytes + more > limits.max_pending_bytes_per_user) {
    return ResourceExhaustedError("user '" + who.user + "' has " + std::to_string(bytes >> 10) +
                                  " KiB of pending job specs; " + std::to_string(more >> 10) +
                                  " KiB more would pass the limit (limits.max_pending_bytes_per_user: " +
                                  std::to_string(limits.max_pending_bytes_per_user >> 20) + " MiB)");
  }
  int64_t queue_limit = limits.max_pending_per_queue;
  std::string limit_name = "limits.max_pending_per_queue";
  for (const QueueConfig* q : QueuesOnPath(options_.config, spec.queue)) {
    if (q->max_pending > 0) {
      queue_limit = q->max_pending;
      limit_name = "queue " + q->name + " max_pending";
    }
  }
  const int64_t queue_pending = snap.PendingInQueue(spec.queue) + array_reserved_queue_[spec.queue];
  if (queue_pending + count > queue_limit) {
    return ResourceExhaustedError("queue '" + spec.queue + "' has " + std::to_string(queue_pending) +
                                  " pending jobs; " + std::to_string(count) + " more would pass the limit (" +
                                  limit_name + ": " + std::to_string(queue_limit) + ")");
  }
  return Status::Ok();
}

Status Controller::ArrayLimit(int64_t count) const {
  const TenantLimits& limits = options_.config.limits;
  if (count > limits.max_array) {
    return ResourceExhaustedError("count: " + std::to_string(count) + " is over the array limit (limits.max_array: " +
                                  std::to_string(limits.max_array) + ")");
  }
  return Status::Ok();
}

// What a submission of `count` copies would be refused for by the tenant
// limits (array size, submission rate, pending jobs), taking nothing: a dry
// run says what the real submission would.
Status Controller::CheckTenantLimits(const Principal& who, const JobSpec& spec, int64_t count) {
  ROTA_RETURN_IF_ERROR(ArrayLimit(count));
  ROTA_RETURN_IF_ERROR(TakeSubmitBudget(who.user, count, /*take=*/false));
  return Call<bool>([&](Batch& batch) -> StatusOr<bool> {
           const Snapshot snap = batch.state->GetSnapshot();
           ROTA_RETURN_IF_ERROR(ServiceSubmittable(snap, spec, who, count));  // (a dry run's too)
           ROTA_RETURN_IF_ERROR(PendingLimits(who, spec, count, snap));
           return true;
         })
      .status();
}

// A service is found by its name (its endpoint): one live service a name,
// submitted once, on ports no other live service holds, within its user's
// share of ports.
Status Controller::ServiceSubmittable(const Snapshot& snap, const JobSpec& spec, const Principal& who,
                                      int64_t count) const {
  if (!spec.is_service()) return Status::Ok();
  if (count != 1) return InvalidArgumentError("count: a service is submitted once; its replicas are service.replicas");
  for (const JobRecord* job : snap.LiveServices()) {
    if (job->spec().name == spec.name) {
      // (Its job only where `who` may see it: with `own`, another's is as if it did not exist.)
      return Status(StatusCode::kAlreadyExists,
                    "name: service '" + spec.name + "' exists already (" +
                        (Sees(who, *job) ? "job " + std::to_string(job->id.value()) : "another user's") +
                        "); cancel it or pick another name");
    }
  }
  ROTA_RETURN_IF_ERROR(PortsFree(snap, spec, JobId(), who));
  return PortsWithinLimit(snap, spec, who, JobId());
}

Status Controller::TakeSubmitBudget(const std::string& user, int64_t jobs, bool take) {
  const TenantLimits& limits = options_.config.limits;
  const double rate = static_cast<double>(limits.submit_rate);
  const double burst = std::max<double>(static_cast<double>(limits.max_array), rate);
  const TimePoint now = options_.clock->Now();
  std::lock_guard<std::mutex> lock(mu_);
  SubmitBucket& b = submit_budget_[user];
  if (b.last == 0) b = {burst, now};
  b.tokens = std::min(burst, b.tokens + static_cast<double>(now - b.last) / kMicrosPerSecond * rate);
  b.last = now;
  if (jobs < 0) {  // a refund
    b.tokens = std::min(burst, b.tokens - static_cast<double>(jobs));
    return Status::Ok();
  }
  if (b.tokens < static_cast<double>(jobs)) {
    const double wait = (static_cast<double>(jobs) - b.tokens) / rate;
    return ResourceExhaustedError("user '" + user + "' is over the submission rate (limits.submit_rate: " +
                                  std::to_string(limits.submit_rate) + " jobs/s, array elements count one each); " +
                                  "retry in " + std::to_string(static_cast<int64_t>(wait) + 1) + "s");
  }
  if (take) b.tokens -= static_cast<double>(jobs);
  return Status::Ok();
}

StatusOr<JobId> Controller::SubmitArray(const Principal& who, JobSpec spec, int64_t count) {
  bool replayed = false;
  return SubmitArray(who, std::move(spec), count, "", &replayed);
}

StatusOr<JobId> Controller::SubmitArray(const Principal& who, JobSpec spec, int64_t count, const std::string& request_id,
                                        bool* replayed) {
  return SubmitArray(who, std::move(spec), ArrayRange{.count = count}, request_id, replayed);
}

StatusOr<JobId> Controller::SubmitArray(const Principal& who, JobSpec spec, const ArrayRange& array,
                                        const std::string& request_id, bool* replayed) {
  *replayed = false;
  const int64_t count = array.count;
  if (who.role == Role::kAgent) return Status(StatusCode::kPermissionDenied, "agents cannot submit jobs");
  if (count < 1 || count > kMaxArray) {
    return InvalidArgumentError("count: must be 1.." + std::to_string(kMaxArray) + ", got " + std::to_string(count));
  }
  ROTA_RETURN_IF_ERROR(ArrayLimit(count));
  ROTA_RETURN_IF_ERROR(CheckSubmission(who, &spec));
  ROTA_RETURN_IF_ERROR(TakeSubmitBudget(who.user, count));
  // A large array goes in chunks, each its own batch, so that other writers
  // are never held behind it for long; its ids are reserved up front.
  const TimePoint now = options_.clock->Now();
  const int64_t chunk = std::min(count, kArrayChunk);
  bool reserved = false;  // set on the actor: the rest of the array is reserved
  auto first_id = Call<JobId>([&](Batch& batch) -> StatusOr<JobId> {
    const JobId first(next_job_id_);
    Snapshot snap = batch.state->GetSnapshot();
    if (!request_id.empty()) {
      // A retried submission (its answer was lost, or its server failed
      // over): the jobs the key made the first time, not new ones.
      const std::string key = who.user + '\n' + request_id;
      const std::pair<JobId, int64_t>* prior = nullptr;
      if (auto it = request_ids_.find(key); it != request_ids_.end()) prior = &it->second;
      for (const auto& [k, jobs] : batch.request_ids) {
        if (k == key) prior = &jobs;
      }
      if (prior != nullptr) {
        // (The first of them still held: earlier ones may have been forgotten.)
        const JobRecord* job = FirstHeld(snap, prior->first, prior->second);
        const std::string made = prior->second == 1 ? "job " + std::to_string(prior->first.value())
                                                    : "jobs " + std::to_string(prior->first.value()) + ".." +
                                                          std::to_string(prior->first.value() + prior->second - 1);
        const bool same_array = job != nullptr && (job->array_count > 0) == array.is_array() &&
                                job->array_first_index == array.first_index &&
                                job->array_max_running == array.max_running;
        if (prior->second != count || job == nullptr || !(job->spec() == spec) || !same_array) {
          return FailedPreconditionError(
              "Idempotency-Key '" + request_id + "' was used before for " + made +
              (prior->second != count     ? ", with count " + std::to_string(prior->second)
               : job == nullptr            ? ", and they are gone"
               : !(job->spec() == spec)    ? ", with a different job spec"
                                           : ", with other array indices or limit") +
              "; use a new key for a new submission");
        }
        *replayed = true;
        return prior->first;
      }
    }
    // Reject what no node or domain of this cluster could ever hold.
    JobRecord probe;
    probe.id = first;
    probe.SetSpec(spec);
    sched::PendingReason why = probe_->CheckResolvable(snap, probe);
    if (!why.ok()) {
      return Status(StatusCode::kOutOfRange,
                    std::string(sched::ReasonCodeName(why.code)) + ": " + why.message);
    }
    ROTA_RETURN_IF_ERROR(ServiceSubmittable(snap, spec, who, count));
    // Tenant limits, counted against what is pending now (on the actor, so
    // concurrent submissions cannot both slip under a limit).
    ROTA_RETURN_IF_ERROR(PendingLimits(who, spec, count, snap));
    // Copies of a spec that validated, under fresh ids: none can be refused.
    if (!array.is_array()) {
      ROTA_RETURN_IF_ERROR(
          batch.Apply(JobSubmitted{.id = first, .spec = spec, .at = now, .user = who.user, .request_id = request_id}));
    } else {
      // One event for the part.
      ROTA_RETURN_IF_ERROR(batch.Apply(JobsSubmitted{first, chunk, spec, now, who.user, request_id, first, count,
                                                     array.first_index, array.max_running}));
    }
    // (The key once the jobs are made: one a refused submission recorded
    // named the ids the next submission took, anyone's.)
    if (!request_id.empty()) batch.request_ids.push_back({who.user + '\n' + request_id, {first, count}});
    next_job_id_ = first.value() + static_cast<uint64_t>(count);
    array_reserved_user_[who.user] += count - chunk;
    array_reserved_queue_[spec.queue] += count - chunk;
    reserved = true;
    return first;
  });
  if (!first_id.ok() && reserved && count > chunk) {
    // Its batch was refused (a full disk): the state is restored, not these
    // counts, which live beside it. (Else every retry of a large array while
    // the disk is full would hold its rest against the pending limits.)
    Call<bool>([&](Batch&) -> StatusOr<bool> {
      array_reserved_user_[who.user] -= count - chunk;
      array_reserved_queue_[spec.queue] -= count - chunk;
      return true;
    }).status().IgnoreError();
  }
  if (!first_id.ok() || *replayed) {
    TakeSubmitBudget(who.user, -count).IgnoreError();  // refused, or made before: nothing new was submitted
    return first_id;
  }
  const uint64_t first = first_id->value();
  for (int64_t done = chunk; done < count; done += kArrayChunk) {
    const int64_t n = std::min(kArrayChunk, count - done);
    bool moved = false;  // set on the actor: this chunk's n left the reservation
    auto more = Call<bool>([&](Batch& batch) -> StatusOr<bool> {
      ROTA_RETURN_IF_ERROR(
          batch.Apply(JobsSubmitted{JobId(first + static_cast<uint64_t>(done)), n, spec, now, who.user, request_id,
                                    JobId(first), count, array.first_index, array.max_running}));
      array_reserved_user_[who.user] -= n;  // pending now, no longer reserved
      array_reserved_queue_[spec.queue] -= n;
      moved = true;
      return true;
    });
    if (!more.ok()) {
      // The rest of the array will not come (this chunk too: a refused batch
      // restores the state, not these counts, which live beside it).
      const int64_t give_back = moved ? count - done - n : count - done;
      Call<bool>([&](Batch&) -> StatusOr<bool> {
        array_reserved_user_[who.user] -= give_back;
        array_reserved_queue_[spec.queue] -= give_back;
        return true;
      }).status().IgnoreError();
      // All or nothing: take back the chunks already committed.
      const CutArray cut{first, done, std::string(more.status().message())};
      auto undone = Call<bool>([&](Batch& batch) -> StatusOr<bool> {
        CancelArrayPart(batch, cut);
        return true;  // (once journaled, its key goes: DropFailedArrayKey)
      });
      if (!undone.ok()) {
        {
          std::lock_guard<std::mutex> lock(mu_);
          cut_arrays_.push_back(cut);
        }
        return Status(more.status().code(), "array partly committed: jobs " + std::to_string(first) + ".." +
                                                std::to_string(first + static_cast<uint64_t>(done) - 1) +
                                                " were accepted and could not be taken back yet (" +
                                                std::string(undone.status().message()) +
                                                "); none of them starts, and they are cancelled once the store "
                                                "writes again; the rest failed: " +
                                                std::string(more.status().message()));
      }
      return more.status().WithPrefix("array not accepted (nothing of it remains)");
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  metrics_.jobs_submitted += count;
  return JobId(first);
}

Status Controller::Cancel(const Principal& who, JobId id) {
  ROTA_ASSIGN_OR_RETURN(std::vector<Status> one, CancelMany(who, {id}));
  return one.front();
}

StatusOr<std::vector<Status>> Controller::CancelMany(const Principal& who, const std::vector<JobId>& ids,
                                                     bool others_visible) {
  if (ids.size() > kMaxCancelMany) {
    return InvalidArgumentError("ids: at most " + std::to_string(kMaxCancelMany) + " jobs a request, got " +
                                std::to_string(ids.size()));
  }
  return Call<std::vector<Status>>([&](Batch& batch) -> StatusOr<std::vector<Status>> {
    // Owners do not change in a batch: one view for the lookups, so that
    // each cancel does not copy the state's top for a fresh snapshot.
    const Snapshot before = batch.state->GetSnapshot();
    const TimePoint now = options_.clock->Now();
    std::vector<Status> out;
    out.reserve(ids.size());
    for (const JobId id : ids) {
      const JobRecord* job = before.FindJob(id);
      if (job == nullptr || (!who.admin() && job->user != who.user && !others_visible)) {
        out.push_back(NotFoundError("no job " + std::to_string(id.value())));
      } else if (!who.admin() && job->user != who.user) {
        out.push_back(Status(StatusCode::kPermissionDenied, "job " + std::to_string(id.value()) + " is " + job->user +
                                                                "'s: only its owner or an admin may do that"));
      } else if (Status s = batch.Apply(JobCancelled{id, now, "cancelled by " + who.user}); !s.ok()) {
        out.push_back(std::move(s));
      } else {
        lifecycle_.Forget(id);
        out.push_back(Status::Ok());
      }
    }
    return out;
  });
}

Status Controller::SetHold(const Principal& who, JobId id, bool held) {
  return Call<bool>([&](Batch& batch) -> StatusOr<bool> {
           const JobRecord* job = batch.state->GetSnapshot().FindJob(id);
           if (job == nullptr || (!who.admin() && job->user != who.user)) {
             return NotFoundError("no job " + std::to_string(id.value()));
           }
           if (!held && job->held_by_admin && !who.admin()) {
             return Status(StatusCode::kPermissionDenied, "job " + std::to_string(id.value()) + " was held by admin " +
                                                             job->held_by + ": only an admin may release it");
           }
           ROTA_RETURN_IF_ERROR(batch.Apply(JobHoldChanged{id, held, options_.clock->Now(), who.user, held && who.admin()}));
           return true;
         })
      .status();
}

Status Controller::Requeue(const Principal& who, JobId id) {
  return Call<bool>([&](Batch& batch) -> StatusOr<bool> {
           const JobRecord* job = batch.state->GetSnapshot().FindJob(id);
           if (job == nullptr || (!who.admin() && job->user != who.user)) {
             return NotFoundError("no job " + std::to_string(id.value()));
           }
           if (job->state != JobState::kRunning) {
             return FailedPreconditionError("job " + std::to_string(id.value()) + " is " +
                                            std::string(JobStateName(job->state)) + ": only a running job can be requeued");
           }
           // (It stops first: lifecycle_ requeues it once its replicas have.)
           lifecycle_.Requeue(batch, *job, "requeued by " + who.user, /*counts_against_policy=*/false);
           return true;
         })
      .status();
}

Status Controller::ScaleService(JobId id, int32_t desired, const std::string& reason) {
  return Call<bool>([&](Batch& batch) -> StatusOr<bool> {
           const JobRecord* job = batch.state->GetSnapshot().FindJob(id);
           if (job == nullptr) return NotFoundError("no job " + std::to_string(id.value()));
           if (job->DesiredReplicas() == desired) return false;
           ROTA_RETURN_IF_ERROR(batch.Apply(ServiceScaled{id, options_.clock->Now(), desired, reason}));
           return true;
         })
      .status();
}

// Replica r of a service listens on port + r on whatever node it lands:
// two live services' ranges never overlap, so no service's replica can
// answer (or be probed, or be sent requests) for another's.
Status Controller::PortsWithinLimit(const Snapshot& snap, const JobSpec& spec, const Principal& who, JobId self) const {
  if (who.admin()) return Status::Ok();
  const int64_t limit = options_.config.limits.max_service_ports_per_user;
  int64_t held = 0;
  for (const JobRecord* job : snap.LiveServices()) {
    if (job->id != self && job->user == who.user) held += job->spec().service.max_replicas;
  }
  if (held + spec.service.max_replicas <= limit) return Status::Ok();
  return Status(StatusCode::kResourceExhausted,
                "service.replicas.max: user '" + who.user + "' has services holding " + std::to_string(held) +
                    " ports (port + replica, kept from every other service); " +
                    std::to_string(spec.service.max_replicas) + " more would pass the limit " +
                    "(limits.max_service_ports_per_user: " + std::to_string(limit) + ")");
}

bool Controller::Sees(const Principal& who, const JobRecord& job) const {
  return who.admin() || job.user == who.user || options_.config.job_visibility == "all";
}

Status Controller::PortsFree(const Snapshot& snap, const JobSpec& spec, JobId self, const Principal& who) const {
  const int32_t lo = spec.service.port, hi = spec.service.port + spec.service.max_replicas - 1;
  for (const JobRecord* job : snap.LiveServices()) {
    const JobId id = job->id;
    if (id == self) continue;
    const int32_t a = job->spec().service.port, b = a + job->spec().service.max_replicas - 1;
    if (lo <= b && a <= hi) {
      // (Its name only where its job may be seen: with `own`, the ports are
      // all another tenant learns, which it needs to pick others.)
      const std::string other = Sees(who, *job) ? "service '" + job->spec().name + "' (job " + std::to_string(id.value()) + ")"
                                                : "another user's service";
      return Status(StatusCode::kAlreadyExists, "service.port: ports " + std::to_string(lo) + ".." + std::to_string(hi) +
                                                    " (port + replica) overlap " + other + ", ports " + std::to_string(a) +
                                                    ".." + std::to_string(b) + "; pick another port");
    }
  }
  return Status::Ok();
}

StatusOr<JobId> Controller::UpdateService(const Principal& who, JobSpec spec) {
  // The priority and grace the live service has (admitted before a cap
  // came or was lowered) it keeps.
  std::optional<JobSpec> kept;
  {
    const Snapshot snap = snapshot();
    for (const JobRecord* job : snap.LiveServices()) {
      if (job->spec().name == spec.name && (who.admin() || job->user == who.user)) kept = job->spec();
    }
  }
  ROTA_RETURN_IF_ERROR(CheckSubmission(who, &spec, kept ? &*kept : nullptr));
  if (!spec.is_service()) return InvalidArgumentError("kind: rota apply updates a service (kind: service)");
  return Call<JobId>([&](Batch& batch) -> StatusOr<JobId> {
    Snapshot snap = batch.state->GetSnapshot();
    const JobRecord* found = nullptr;
    for (const JobRecord* job : snap.LiveServices()) {
      if (job->spec().name == spec.name) found = job;
    }
    if (found == nullptr || (!who.admin() && found->user != who.user)) {
      return NotFoundError("no service '" + spec.name + "' of yours (rota submit starts one)");
    }
    if (found->spec() == spec) return found->id;  // nothing to change
    ROTA_RETURN_IF_ERROR(ServiceUpdateAllowed(found->spec(), spec));
    ROTA_RETURN_IF_ERROR(PortsFree(snap, spec, found->id, who));
    // (Counted for the service's owner: an admin's apply to it changes whose ports it is not.)
    if (spec.service.max_replicas > found->spec().service.max_replicas) {
      ROTA_RETURN_IF_ERROR(PortsWithinLimit(snap, spec, Principal{found->user, who.admin() ? Role::kAdmin : Role::kUser, ""}, found->id));
    }
    const JobId id = found->id;
    ROTA_RETURN_IF_ERROR(batch.Apply(ServiceUpdated{id, options_.clock->Now(), spec, who.user}));
    return id;
  });
}

Status Controller::RestartReplica(JobId id, uint16_t task, uint32_t replica, int32_t attempt, const std::string& reason) {
  return Call<bool>([&](Batch& batch) -> StatusOr<bool> {
           const JobRecord* job = batch.state->GetSnapshot().FindJob(id);
           if (job == nullptr || job->state != JobState::kRunning) return false;
           if (job->ReplicaAttempt(replica) != attempt) return false;  // restarted since
           const std::string name = job->spec().tasks[task].name + "-" + std::to_string(replica);
           ROTA_RETURN_IF_ERROR(batch.Apply(RankRestarted{id, task, replica, options_.clock->Now(), name + " " + reason}));
           return true;
         })
      .status();
}

Status Controller::Checkpoint(const Principal& who, JobId id, const std::string& path) {
  if (path.empty() || path.size() > 4096 || !IsValidUtf8(path)) {
    return InvalidArgumentError("path: required, UTF-8, at most 4096 bytes");
  }
  // (The next attempt gets it in its environment, which holds no NUL.)
  if (path.find('\0') != std::string::npos) return InvalidArgumentError("path: must not hold a NUL byte");
  return Call<bool>([&](Batch& batch) -> StatusOr<bool> {
           const JobRecord* job = batch.state->GetSnapshot().FindJob(id);
           if (job == nullptr || (!who.admin() && job->user != who.user)) {
             return NotFoundError("no job " + std::to_string(id.value()));
           }
           ROTA_RETURN_IF_ERROR(batch.Apply(JobCheckpointed{id, options_.clock->Now(), path}));
           return true;
         })
      .status();
}

namespace {

// A drain the node's agent asked for: its disk cannot take new tasks
// (HeartbeatReport::disk_problem), or its task runtime cannot
// (runtime_problem). Lifted when the agent reports the node fine again,
// unless an admin drained the node since (another reason); while the agent
// reports a problem an undrained node is drained again, and one the agent
// drained for the other problem takes this one's reason (the disk's goes
// first). The reason is the problem as it was when the drain began: a
// report that says it in other words ("only 3 MiB free", then 2) journals
// nothing. (An admin's reason may not begin so: SetDrain.)
constexpr std::string_view kDiskDrain = "disk: ";
constexpr std::string_view kRuntimeDrain = "runtime: ";
// Whether the node's agent drained it, for the problem whose reasons begin
// with `prefix`. (A disk drain journaled before drains carried by_agent is
// known by its prefix alone, which an admin's reason could not have.)
bool AgentDrained(const NodeState& node, std::string_view prefix) {
  return node.drained && node.drain_reason.starts_with(prefix) &&
         (node.drained_by_agent || prefix == kDiskDrain);
}
bool AgentDrained(const NodeState& node) { return AgentDrained(node, kDiskDrain) || AgentDrained(node, kRuntimeDrain); }
// The drain reason `report` asks for ("" = none).
std::string AgentDrainReason(const HeartbeatReport& report) {
  if (!report.disk_problem.empty()) return std::string(kDiskDrain) + report.disk_problem;
  if (!report.runtime_problem.empty()) return std::string(kRuntimeDrain) + report.runtime_problem;
  return "";
}
// Whether `report` drains the node, changes why the agent drained it, or
// lifts the agent's drain.
bool AgentDrainChanges(const NodeState& node, const HeartbeatReport& report) {
  if (report.disk_problem.empty() && report.runtime_problem.empty()) return AgentDrained(node);
  if (!node.drained) return true;
  const std::string_view prefix = report.disk_problem.empty() ? kRuntimeDrain : kDiskDrain;
  return AgentDrained(node) && !AgentDrained(node, prefix);
}

}  // namespace

Status Controller::SetDrain(const Principal& who, const std::string& node, bool drained, const std::string& reason) {
  if (!who.admin()) return Status(StatusCode::kPermissionDenied, "draining nodes needs the admin role");
  if (reason.size() > 512) return InvalidArgumentError("reason: at most 512 bytes");
  for (std::string_view prefix : {kDiskDrain, kRuntimeDrain}) {
    if (drained && reason.starts_with(prefix)) {
      return InvalidArgumentError("reason: may not begin with '" + std::string(prefix) +
                                  "': that is how the drains a node's agent asks for begin, which it lifts itself");
    }
  }
  return Call<bool>([&](Batch& batch) -> StatusOr<bool> {
           ROTA_RETURN_IF_ERROR(batch.Apply(NodeDrainChanged{node, drained, reason}));
           return true;
         })
      .status();
}

namespace {

// Whether a re-registering node's MIG state differs from what rota holds:
// GPUs in or out of MIG mode, or the driver's layouts (mig_fixed). A declared
// MIG GPU's layout is rota's to change, so its registered text is not compared.
bool MigChanged(const NodeState& known, const NodeSpec& spec) {
  uint64_t mask = 0;
  for (const auto& [gpu, layout] : spec.mig) mask |= uint64_t{1} << gpu;
  if (mask != known.mig_mask || spec.mig_fixed != known.spec.mig_fixed) return true;
  if (!spec.mig_fixed) return false;
  for (const auto& [gpu, layout] : spec.mig) {
    auto parsed = ParseMigLayout(*known.mig_geometry, layout);
    if (!parsed.ok() || *parsed != known.mig_layout[gpu]) return true;
  }
  return false;
}

}  // namespace

Status Controller::RegisterNode(const Principal& who, const NodeSpec& spec, bool simulated, const std::string& address,
                                bool mps, const std::string& instance) {
  if (!who.admin() && !(who.role == Role::kAgent && who.node == spec.name)) {
    return Status(StatusCode::kPermissionDenied, "an agent token may only register its own node ('" + who.node + "')");
  }
  ROTA_RETURN_IF_ERROR(ValidateNodeSpec(spec));
  // The built-in labels are the server's: an agent cannot pass for another
  // node (hostname) or another GPU model in a node selector.
  NodeSpec sent = spec;
  sent.labels["hostname"] = spec.name;
  sent.labels["gpu_model"] = spec.gpu_model;
  return Call<bool>([&](Batch& batch) -> StatusOr<bool> {
           std::string replaced;  // the instance this registration takes the node over from
           {
             // Two agents for one node would both run its tasks: the one that
             // reports keeps it (the same agent restarted keeps its instance).
             std::lock_guard<std::mutex> lock(mu_);
             auto it = live_.find(spec.name);
             const TimePoint now = options_.clock->Steady();
             // Taken over only once the other's tasks have fenced themselves
             // and their gangs were requeued (as for a lost node).
             const Duration takeover = std::max(options_.node_timeout, FenceAfter() + kFenceMargin);
             // (Not yet registered since this server started: the agent
             // the journal names, counted from the start.)
             const bool another = it != live_.end() && !instance.empty() && !it->second.instance.empty() &&
                                  it->second.instance != instance;
             if (another && now - it->second.last_heartbeat < takeover) {
               const std::string heard = it->second.registered
                                             ? "last report " + FormatDuration(now - it->second.last_heartbeat) + " ago"
                                             : "not heard since this server started " +
                                                   FormatDuration(now - it->second.last_heartbeat) + " ago";
               return Status(StatusCode::kFailedPrecondition,
                             "node '" + spec.name + "' has another agent (instance " + it->second.instance.substr(0, 8) +
                                 ", " + heard + "): two agents of one node would both run its tasks; stop one (this one "
                                 "takes the node over once the other has not reported for " + FormatDuration(takeover) +
                                 ", when its tasks have fenced themselves)");
             }
             if (another) replaced = it->second.instance;
           }
           const NodeState* known = batch.state->GetSnapshot().FindNode(spec.name);
           const bool new_agent = !instance.empty() && (known == nullptr || known->agent != instance);
           const bool moved = !instance.empty() && known != nullptr && known->agent_address != address;
           if (known == nullptr) {
             ROTA_RETURN_IF_ERROR(batch.Apply(NodeAdded{sent}));
           } else if (known->spec.gpus != spec.gpus || known->spec.gpu_model != spec.gpu_model) {
             // (Fewer GPUs cannot simply go on: the agent numbers the GPUs
             // it finds from 0, so one missing in the middle renumbers the
             // rest, and the server's indices would name other devices.)
             return Status(StatusCode::kFailedPrecondition,
                           "node '" + spec.name + "' is registered with " + std::to_string(known->spec.gpus) + " x " +
                               known->spec.gpu_model + "; it now reports " + std::to_string(spec.gpus) + " x " +
                               spec.gpu_model + ": a node's GPUs cannot change under its name; drain it (rota node "
                               "drain " + spec.name + ") and run its agent with another --name");
           } else {
             // The labels the agent sends replace those keys (a corrected
             // rack), except what the config declares for the node (the
             // admin's rack, spine and group labels); others stay.
             Labels labels = known->spec.labels;
             const auto declared = declared_labels_.find(spec.name);
             for (const auto& [k, v] : sent.labels) {
               if (declared == declared_labels_.end() || declared->second.count(k) == 0) labels[k] = v;
             }
             // (Kept keys and sent ones together are bounded too: an agent
             // re-registering with new keys each time would grow them.)
             if (labels.size() > known->spec.labels.size() && labels.size() > 4 * api::kMaxNodeLabels) {
               return InvalidArgumentError("node.labels: node '" + spec.name + "' would hold " +
                                           std::to_string(labels.size()) + " labels with those it has; at most " +
                                           std::to_string(4 * api::kMaxNodeLabels));
             }
             // The labels before the MIG layouts (a registration refused for
             // its labels journaled a MIG change first; one refused for its
             // layouts keeps only the labels it asked for).
             const bool remig = MigChanged(*known, spec);
             if (labels != known->spec.labels) ROTA_RETURN_IF_ERROR(batch.Apply(NodeLabelsChanged{spec.name, labels}));
             if (remig) ROTA_RETURN_IF_ERROR(batch.Apply(NodeMigChanged{spec.name, spec.mig, spec.mig_fixed}));
           }
           // The replaced agent's tasks have fenced themselves by now (it was
           // silent that long): their gangs are given up here, as for a lost
           // node, whether or not CheckNodes came first. Else the new agent
           // would be handed the old attempt's ranks and start them again
           // while the gang's other ranks went on.
           if (new_agent || moved) {
             ROTA_RETURN_IF_ERROR(batch.Apply(NodeAgentChanged{spec.name, instance, address}));
           }
           if (!replaced.empty()) {
             GiveUpGangsOn(batch, spec.name,
                           "node " + spec.name + " taken over by another agent (instance " + instance.substr(0, 8) +
                               "); the replaced one's (" + replaced.substr(0, 8) + ") tasks fenced themselves");
           }
           std::lock_guard<std::mutex> lock(mu_);
           // (Put back if the batch is not journaled: a registration refused
           // for a full disk must not count as the agent's, or its takeover
           // would be taken for done and skip giving up the old gangs.)
           std::optional<NodeLive> before;
           if (auto it = live_.find(spec.name); it != live_.end()) before = it->second;
           batch.undo.push_back([this, name = spec.name, before = std::move(before)] {
             std::lock_guard<std::mutex> undo_lock(mu_);
             if (before) live_[name] = *before;
             else live_.erase(name);
           });
           NodeLive& live = live_[spec.name];
           live.registered = true;
           live.simulated = simulated;
           live.mps = mps;
           live.address = address;
           if (!instance.empty()) live.instance = instance;  // (an older agent's registration keeps the check)
           live.last_heartbeat = options_.clock->Steady();
           return true;
         })
      .status();
}

TaskAssignment Controller::Assignment(const Snapshot& snap, const JobRecord& job, size_t index) const {
  const ReplicaPlacement& r = job.placement[index];
  const TaskGroupSpec& task = job.spec().tasks[r.task];
  TaskAssignment a;
  a.job = job.id;
  a.job_name = job.spec().name;
  a.task = r.task;
  a.task_name = task.name;
  a.replica = r.replica;
  for (int32_t g = 0; g < 64; ++g) {
    if ((r.gpu_mask >> g) & 1) a.gpus.push_back(g);
  }
  a.gpu_milli = r.gpu_milli;
  a.gpu_memory_limit = task.gpu_share.memory;
  if (r.mig_start >= 0) {
    a.mig_profile = task.gpu_share.mig_profile;
    a.mig_start = r.mig_start;
  }
  a.last_checkpoint = job.last_checkpoint_path;
  a.command = task.command;
  a.env = task.env;
  if (job.array_count > 0) {
    // A job array's element knows which it is (Slurm's SLURM_ARRAY_TASK_ID).
    a.env["ROTA_ARRAY_ID"] = std::to_string(job.array.value());
    a.env["ROTA_ARRAY_INDEX"] = std::to_string(job.array_index());
    a.env["ROTA_ARRAY_COUNT"] = std::to_string(job.array_count);
  }
  if (job.spec().is_service()) {
    // Replica r listens on port + r: replicas sharing a node do not collide.
    const std::string port = std::to_string(job.spec().service.port + static_cast<int32_t>(r.replica));
    a.env["PORT"] = port;
    a.env["ROTA_SERVICE_PORT"] = port;
    a.service = true;
  }
  a.rootfs = task.rootfs;
  a.mounts = job.spec().mounts;
  a.cpu = task.cpu;
  a.memory = task.memory;
  a.world_size = static_cast<int32_t>(job.placement.size());
  a.rank = static_cast<int32_t>(index);
  std::vector<NodeId> node_order;
  for (size_t i = 0; i < job.placement.size(); ++i) {
    const NodeId n = job.placement[i].node;
    if (std::find(node_order.begin(), node_order.end(), n) == node_order.end()) node_order.push_back(n);
    if (i < index && n == r.node) a.local_rank++;
    auto live = live_.find(snap.node(n).spec.name);
    a.hosts.push_back(live != live_.end() && !live->second.address.empty() ? live->second.address : snap.node(n).spec.name);
  }
  a.node_rank = static_cast<int32_t>(std::find(node_order.begin(), node_order.end(), r.node) - node_order.begin());
  a.master_addr = a.hosts[0];
  // A rank restarted alone rejoins the gang's master: the port follows the gang's attempt.
  a.bound_at = std::max(job.started_at, job.resized_at);  // a resize starts a new attempt
  a.master_port = RendezvousPort(rendezvous_key_, job.id, job.gang_attempt, a.bound_at);
  a.attempt = job.ReplicaAttempt(r.replica);
  a.checkpoint_signal = job.spec().checkpoint.signal;
  a.checkpoint_grace = StopGrace(options_.config, job.spec());
  // Who it runs as: the job's user, by name on the node unless the config
  // maps it to a uid; root only for the server's own user or where a queue allows it.
  a.user = job.user;
  for (const AccountConfig& account : options_.config.accounts) {
    if (account.user == job.user) {
      a.uid = account.uid;
      a.gid = account.gid;
    }
  }
  a.allow_root = (!options_.owner.empty() && job.user == options_.owner) ||
                 RootAllowedOnPath(options_.config, job.spec().queue);
  return a;
}

StatusOr<std::vector<TaskAssignment>> Controller::Heartbeat(const Principal& who, const HeartbeatReport& report,
                                                            uint64_t* revision) {
  // The same path as HeartbeatAsync, waited for.
  std::promise<std::pair<StatusOr<std::vector<TaskAssignment>>, uint64_t>> answered;
  auto answer = answered.get_future();
  HeartbeatAsync(who, report, [&answered](StatusOr<std::vector<TaskAssignment>> tasks, uint64_t at) {
    answered.set_value({std::move(tasks), at});
  });
  auto [tasks, at] = answer.get();
  if (revision != nullptr) *revision = at;
  return std::move(tasks);
}

Status Controller::CheckReporter(const Principal& who, const HeartbeatReport& report) const {
  if (!who.admin() && !(who.role == Role::kAgent && who.node == report.node)) {
    return Status(StatusCode::kPermissionDenied, "an agent token may only report for its own node ('" + who.node + "')");
  }
  return CheckAgentInstance(report.node, report.instance);
}

std::string Controller::AgentInstanceOf(const std::string& node) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = live_.find(node);
  return it != live_.end() ? it->second.instance : std::string();
}

namespace {

// FailedPrecondition unless `instance` ("" from an older agent: any) is the
// one `live` registered last.
Status SameAgent(const NodeLive& live, const std::string& node, const std::string& instance) {
  if (instance.empty() || live.instance.empty() || live.instance == instance) return Status::Ok();
  return Status(StatusCode::kFailedPrecondition, "node '" + node + "' is another agent's now (instance " +
                                                     live.instance.substr(0, 8) +
                                                     "): this one was replaced; its tasks stop at their fence");
}

}  // namespace

Status Controller::CheckAgentInstance(const std::string& node, const std::string& instance) const {
  if (instance.empty()) return Status::Ok();
  std::lock_guard<std::mutex> lock(mu_);
  auto it = live_.find(node);
  // (One not registered since this server started must register first: it
  // is told so, not that it was replaced.)
  return it == live_.end() || !it->second.registered ? Status::Ok() : SameAgent(it->second, node, instance);
}

void Controller::HeartbeatAsync(const Principal& who, HeartbeatReport report,
                                std::function<void(StatusOr<std::vector<TaskAssignment>>, uint64_t)> done) {
  if (Status s = CheckReporter(who, report); !s.ok()) return done(s, 0);
  // Most heartbeats change nothing journaled: answered without the actor.
  uint64_t quiet_revision = 0;
  if (std::vector<TaskAssignment> quiet; QuietHeartbeat(report, &quiet, &quiet_revision)) {
    return done(std::move(quiet), quiet_revision);
  }
  auto shared = std::make_shared<HeartbeatReport>(std::move(report));
  auto revision = std::make_shared<uint64_t>(0);
  CallAsync<std::vector<TaskAssignment>>(
      [this, shared, revision](Batch& batch) { return HeartbeatOnActor(batch, *shared, revision.get()); },
      [done = std::move(done), revision](StatusOr<std::vector<TaskAssignment>> tasks) { done(std::move(tasks), *revision); });
}

StatusOr<std::vector<TaskAssignment>> Controller::HeartbeatOnActor(Batch& batch, const HeartbeatReport& report,
                                                                   uint64_t* revision) {
  // Each part in turn, on the working state: the node registry (alive, no
  // longer lost) and usage; the job lifecycle (GPU health, checkpoints,
  // exits); the binder (the node's tasks).
  std::vector<GpuTelemetry> health;
  ROTA_RETURN_IF_ERROR(NoteAlive(batch, report, &health));
  for (const GpuTelemetry& g : health) lifecycle_.OnGpuHealth(batch, report.node, g);
  {
    // A stopping job the lifecycle does not know stopping (this server
    // started, or a failed write rolled its stop back and forth): as of now.
    Snapshot snap = batch.state->GetSnapshot();
    std::lock_guard<std::mutex> lock(mu_);
    if (const std::set<JobId>* ids = JobsOn(report.node)) {
      for (JobId id : *ids) {
        const JobRecord* job = snap.FindJob(id);
        if (job != nullptr && job->state == JobState::kPreempting && !lifecycle_.Stopping(id)) {
          lifecycle_.NoteStopping(id, snap.revision());
        }
      }
    }
  }
  lifecycle_.OnTaskReports(batch, report.node, report.tasks, report.revision);
  return TasksFor(batch, report.node, revision);
}

Status Controller::NoteAlive(Batch& batch, const HeartbeatReport& report, std::vector<GpuTelemetry>* health_changes) {
  bool lost = false;
  bool drain_changes = false;
  {
    // No snapshot is held across a change (one held across Apply would make
    // each change copy the whole state).
    Snapshot snap = batch.state->GetSnapshot();
    const NodeState* node = snap.FindNode(report.node);
    if (node == nullptr) return NotFoundError("node '" + report.node + "' is not registered");
    std::lock_guard<std::mutex> lock(mu_);
    NodeLive& live = live_[report.node];
    if (!live.registered) return NotFoundError("node '" + report.node + "' must register again");
    // (Again here, on the actor: another agent may have taken the node over
    // since the report was first checked.)
    ROTA_RETURN_IF_ERROR(SameAgent(live, report.node, report.instance));
    live.last_heartbeat = options_.clock->Steady();
    live.Note(report.gpus, node->spec.gpus);
    lost = node->lost;
    drain_changes = AgentDrainChanges(*node, report);
    // Usage of each running job's GPUs, for right-sizing.
    FoldUsage(snap, *node, report);
    NoteSeenRunning(snap, report);
    for (const GpuTelemetry& g : report.gpus) {
      if (g.index < 0 || g.index >= node->spec.gpus) continue;
      if (static_cast<bool>((node->healthy_mask >> g.index) & 1) != g.healthy) health_changes->push_back(g);
    }
  }
  if (lost) batch.Apply(NodeLostChanged{report.node, false}).IgnoreError();
  if (drain_changes) {
    const std::string reason = AgentDrainReason(report);
    batch.Apply(NodeDrainChanged{report.node, !reason.empty(), reason, /*by_agent=*/true}).IgnoreError();
  }
  return Status::Ok();
}

std::vector<TaskAssignment> Controller::TasksFor(Batch& batch, const std::string& node_name, uint64_t* revision) {
  // From the working state, at its revision: the jobs indexed on the node
  // (as of the last commit) and those this batch bound or resized so far,
  // so that the answer holds everything its revision claims.
  const Snapshot snap = batch.state->GetSnapshot();
  const NodeState* node = snap.FindNode(node_name);
  std::vector<TaskAssignment> tasks;
  if (node == nullptr) return tasks;
  std::set<JobId> ids;
  for (const Event& e : batch.events) {
    if (const auto* b = std::get_if<JobBound>(&e)) ids.insert(b->id);
    if (const auto* r = std::get_if<JobResized>(&e)) ids.insert(r->id);
  }
  std::lock_guard<std::mutex> lock(mu_);
  if (revision != nullptr) *revision = snap.revision();
  if (const std::set<JobId>* indexed = JobsOn(node_name)) ids.insert(indexed->begin(), indexed->end());
  for (JobId id : ids) {
    const JobRecord* job = snap.FindJob(id);
    if (job == nullptr || job->state != JobState::kRunning) continue;
    for (size_t i = 0; i < job->placement.size(); ++i) {
      if (job->placement[i].node == node->id) tasks.push_back(Assignment(snap, *job, i));
    }
  }
  return tasks;
}

void Controller::NoteSeenRunning(const Snapshot& snap, const HeartbeatReport& report) {
  const NodeState* node = snap.FindNode(report.node);
  if (node == nullptr) return;
  for (const TaskReport& t : report.tasks) {
    if (t.exited) continue;
    const JobRecord* job = snap.FindJob(t.job);
    if (job != nullptr && job->state == JobState::kPreempting && PlacedOn(*job, node->id, t)) {
      stop_seen_[t.job] = {options_.clock->Now(), options_.clock->Steady()};
    }
  }
}

void Controller::FoldUsage(const Snapshot& snap, const NodeState& node, const HeartbeatReport& report) {
  const std::set<JobId>* ids = JobsOn(node.spec.name);
  const TimePoint now = options_.clock->Now();
  if (ids != nullptr) usage_.Fold(snap, node, *ids, report, now);
  history_.Fold(node.spec.name, node.spec.gpus, report.gpus, now);
}

bool Controller::QuietHeartbeat(const HeartbeatReport& report, std::vector<TaskAssignment>* tasks, uint64_t* revision) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    const Snapshot& snap = *published_;
    const NodeState* node = snap.FindNode(report.node);
    auto live = live_.find(report.node);
    if (node == nullptr || node->lost || live == live_.end() || !live->second.registered) return false;
    if (!SameAgent(live->second, report.node, report.instance).ok()) return false;  // (the actor refuses it)
    // Overdue: CheckNodes may be declaring it lost right now; the actor
    // orders the two.
    if (options_.clock->Steady() - live->second.last_heartbeat > options_.node_timeout) return false;
    if (AgentDrainChanges(*node, report)) return false;
    for (const GpuTelemetry& g : report.gpus) {
      if (g.index < 0 || g.index >= node->spec.gpus) continue;
      if (static_cast<bool>((node->healthy_mask >> g.index) & 1) != g.healthy) return false;
    }
    for (const TaskReport& t : report.tasks) {
      const JobRecord* job = snap.FindJob(t.job);
      if (job == nullptr) continue;
      if (t.exited && (job->state == JobState::kRunning || job->state == JobState::kPreempting)) return false;
      // (NoteSeenRunning's, in the one pass: a report that goes on to the actor notes all there.)
      if (!t.exited && job->state == JobState::kPreempting && PlacedOn(*job, node->id, t)) {
        stop_seen_[t.job] = {options_.clock->Now(), options_.clock->Steady()};
      }
      // A checkpoint the actor would journal (the same test as there).
      if (t.checkpoint_at != 0 && !t.checkpoint_path.empty()) {
        const TimePoint now = options_.clock->Now();
        const TimePoint at = std::min(t.checkpoint_at, now);
        const bool stale = at <= job->last_checkpoint_at ||
                           (t.checkpoint_at > at && t.checkpoint_path == job->last_checkpoint_path);
        if (!stale) return false;
      }
    }
    // A full list that misses a stopping job's replica here: it stopped
    // (JobLifecycle::OnTaskReports decides, on the actor).
    if (const std::set<JobId>* ids = JobsOn(report.node); ids != nullptr && report.revision > 0) {
      for (JobId id : *ids) {
        const JobRecord* job = snap.FindJob(id);
        if (job == nullptr || job->state != JobState::kPreempting) continue;
        for (const ReplicaPlacement& r : job->placement) {
          if (r.node == node->id && !api::ListsRunning(report.tasks, id, r.task, r.replica)) return false;
        }
      }
    }
    live->second.last_heartbeat = options_.clock->Steady();
    live->second.Note(report.gpus, node->spec.gpus);
    FoldUsage(snap, *node, report);
  }
  auto answer = NodeTasks(report.node, revision);
  if (!answer.ok()) return false;
  *tasks = std::move(*answer);
  return true;
}

StatusOr<std::string> Controller::CreateToken(const Principal& who, const std::string& user, Role role,
                                              const std::string& node, Duration ttl, bool existing) {
  if (!who.admin()) return Status(StatusCode::kPermissionDenied, "creating tokens needs the admin role");
  if (user.empty()) return InvalidArgumentError("user: must not be empty");
  if (role == Role::kAgent && node.empty()) return InvalidArgumentError("node: an agent token names its node");
  if (ttl < 0) return InvalidArgumentError("ttl: must not be negative");
  const std::string token = NewToken();
  const TimePoint now = options_.clock->Now();
  TokenRecord record{Sha256Hex(token), user, std::string(RoleName(role)), node, now, ttl > 0 ? now + ttl : 0, false};
  return Call<std::string>([&](Batch&) -> StatusOr<std::string> {
    // Checked on the actor: two concurrent creations of one new name cannot both pass.
    if (role != Role::kAgent) {
      const bool known = auth_.UserExists(user);
      if (known && !existing) {
        return Status(StatusCode::kAlreadyExists, "user: '" + user +
                                                      "' is an existing user; to issue another token for that same "
                                                      "user, say so (existing: true, rota token create --existing)");
      }
      if (!known && existing) return NotFoundError("user: no user '" + user + "' has been issued a token yet");
    }
    ROTA_RETURN_IF_ERROR(store_->PutToken(record));
    auth_.Add(record);
    return token;
  }, /*standalone=*/true);
}

StatusOr<std::vector<TokenRecord>> Controller::ListTokens(const Principal& who) const {
  if (!who.admin()) return Status(StatusCode::kPermissionDenied, "listing tokens needs the admin role");
  return auth_.List();
}

Status Controller::RevokeToken(const Principal& who, const std::string& id) {
  if (!who.admin()) return Status(StatusCode::kPermissionDenied, "revoking tokens needs the admin role");
  return Call<bool>([&](Batch&) -> StatusOr<bool> {
           ROTA_ASSIGN_OR_RETURN(TokenRecord record, auth_.Find(id));
           if (record.revoked) return true;
           record.revoked = true;
           ROTA_RETURN_IF_ERROR(store_->PutToken(record));
           auth_.Add(record);
           return true;
         }, /*standalone=*/true)
      .status();
}

StatusOr<std::string> Controller::BootstrapAdminToken(const std::function<Status(const std::string&)>& save) {
  return Call<std::string>([&](Batch&) -> StatusOr<std::string> {
    if (auth_.size() > 0) return std::string();
    const std::string token = NewToken();
    if (save) ROTA_RETURN_IF_ERROR(save(token));
    // The admin is the Unix user who started the server: its tasks run as that user.
    TokenRecord record{Sha256Hex(token), options_.owner.empty() ? "admin" : options_.owner, "admin", "",
                       options_.clock->Now()};
    ROTA_RETURN_IF_ERROR(store_->PutToken(record));
    auth_.Add(record);
    return token;
  }, /*standalone=*/true);  // journals nothing: a batch refused by a full disk (a cycle's binds beside it) must not refuse it
}

}  // namespace rota::server
