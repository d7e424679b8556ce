#include "core/cluster_state.h"

#include "base/slab.h"

#include <algorithm>
#include <atomic>
#include <bit>
#include <map>
#include <set>
#include <optional>

namespace rota {

std::string_view JobStateName(JobState state) {
  switch (state) {
    case JobState::kPending: return "pending";
    case JobState::kRunning: return "running";
    case JobState::kPreempting: return "preempting";
    case JobState::kSucceeded: return "succeeded";
    case JobState::kFailed: return "failed";
    case JobState::kCancelled: return "cancelled";
  }
  return "unknown";
}

const NodeState* Snapshot::FindNode(const std::string& name) const {
  std::shared_lock<std::shared_mutex> lock(data_->node_by_name->mu);
  auto it = data_->node_by_name->ids.find(name);
  if (it == data_->node_by_name->ids.end() || it->second.value() >= data_->nodes.size()) return nullptr;
  const NodeState& n = data_->nodes[it->second.value()];
  return n.spec.name == name ? &n : nullptr;  // (an undone add's id may be another node's now)
}

int16_t Snapshot::ModelIndex(const std::string& model) const {
  for (size_t i = 0; i < data_->gpu_models.size(); ++i) {
    if (data_->gpu_models[i] == model) return static_cast<int16_t>(i);
  }
  return -1;
}

void JobTable::const_iterator::Settle() {
  const auto& chunks = table_->chunks_;
  while (chunk_ < chunks.size()) {
    const Chunk* c = chunks[chunk_].get();
    if (c != nullptr) {
      while (slot_ < kChunk) {
        const uint64_t word = c->occupied[slot_ / 64] >> (slot_ % 64);
        if (word != 0) {
          slot_ += static_cast<size_t>(std::countr_zero(word));
          return;
        }
        slot_ = (slot_ / 64 + 1) * 64;
      }
    }
    ++chunk_;
    slot_ = 0;
  }
  slot_ = 0;  // end(): (chunks.size(), 0)
}

JobTable::const_iterator JobTable::find(JobId id) const {
  const uint64_t c = id.value() / kChunk, slot = id.value() % kChunk;
  if (c >= chunks_.size() || chunks_[c] == nullptr || !chunks_[c]->slots[slot]) return end();
  return const_iterator(this, c, slot);
}

JobTable::const_iterator JobTable::upper_bound(JobId id) const {
  if (id.value() >= chunks_.size() * kChunk) return end();  // (also: no wrap past the largest id)
  const uint64_t next = id.value() + 1;
  if (next / kChunk >= chunks_.size()) return end();
  return const_iterator(this, next / kChunk, next % kChunk);
}

JobId JobTable::max_id() const {
  for (size_t c = chunks_.size(); c-- > 0;) {
    const Chunk* chunk = chunks_[c].get();
    if (chunk == nullptr) continue;
    for (size_t w = chunk->occupied.size(); w-- > 0;) {
      if (chunk->occupied[w] != 0) return JobId(c * kChunk + w * 64 + 63 - static_cast<size_t>(std::countl_zero(chunk->occupied[w])));
    }
  }
  return JobId();
}

JobTable::Chunk& JobTable::Mut(size_t c) {
  // (Shared by every table of every state: a version is never issued twice.)
  static std::atomic<uint64_t> versions{0};
  if (c >= chunks_.size()) chunks_.resize(c + 1);
  if (chunks_[c] == nullptr) chunks_[c] = std::make_shared<Chunk>();
  else if (chunks_[c].use_count() > 1) chunks_[c] = std::make_shared<Chunk>(*chunks_[c]);
  chunks_[c]->version = versions.fetch_add(1, std::memory_order_relaxed) + 1;
  return *chunks_[c];
}

void JobTable::Put(JobId id, std::shared_ptr<const JobRecord> job) {
  Chunk& c = Mut(id.value() / kChunk);
  auto& slot = c.slots[id.value() % kChunk];
  if (!slot) {
    ++c.used;
    ++size_;
    c.occupied[id.value() % kChunk / 64] |= uint64_t{1} << (id.value() % 64);
  }
  slot.emplace(id, std::move(job));
}

void JobTable::Erase(JobId id) {
  const uint64_t c = id.value() / kChunk;
  if (c >= chunks_.size() || chunks_[c] == nullptr || !chunks_[c]->slots[id.value() % kChunk]) return;
  Chunk& chunk = Mut(c);
  chunk.slots[id.value() % kChunk].reset();
  chunk.occupied[id.value() % kChunk / 64] &= ~(uint64_t{1} << (id.value() % 64));
  --size_;
  if (--chunk.used == 0) chunks_[c] = nullptr;
}

const JobRecord* Snapshot::FindJob(JobId id) const {
  auto it = data_->jobs.find(id);
  return it == data_->jobs.end() ? nullptr : it->second.get();
}

std::vector<const JobRecord*> Snapshot::PendingJobs() const {
  std::vector<const JobRecord*> out;
  for (const auto& [id, job] : data_->live) {
    if (job->state == JobState::kPending) out.push_back(job.get());
  }
  return out;  // JobIds are issued in submission order
}

ClusterState::ClusterState(std::vector<std::string> levels) : data_(std::make_shared<Snapshot::Data>()) {
  data_->levels = std::move(levels);
}

ClusterState::ClusterState(const ClusterState& other) : data_(std::make_shared<Snapshot::Data>(*other.data_)) {
  // A copy is a new lineage: it adds nodes of its own, so it gets its own name index.
  auto names = std::make_shared<Snapshot::Data::NameIndex>();
  {
    std::shared_lock<std::shared_mutex> lock(other.data_->node_by_name->mu);
    names->ids = other.data_->node_by_name->ids;
  }
  data_->node_by_name = std::move(names);
}

ClusterState& ClusterState::operator=(const ClusterState& other) {
  if (this != &other) *this = ClusterState(other);
  return *this;
}

const Topology& Snapshot::topology() const {
  Data::LazyTopology& lazy = *data_->topology;
  std::call_once(lazy.once, [&] {
    std::vector<NodeSpec> specs;
    specs.reserve(data_->nodes.size());
    for (const auto& n : data_->nodes) specs.push_back(n.spec);
    // Labels were checked node by node in Apply, so the build cannot fail on them.
    StatusOr<Topology> topo = Topology::Build(data_->levels, specs);
    lazy.built = std::make_unique<const Topology>(topo.ok() ? std::move(topo).value() : Topology());
  });
  return *lazy.built;
}

Snapshot ClusterState::GetSnapshot() {
  return Snapshot(data_);
}

int64_t Snapshot::PendingOfUser(const std::string& user) const {
  auto it = data_->pending_by_user.find(user);
  return it == data_->pending_by_user.end() ? 0 : it->second;
}

int64_t Snapshot::PendingBytesOfUser(const std::string& user) const {
  auto it = data_->pending_bytes_by_user.find(user);
  return it == data_->pending_bytes_by_user.end() ? 0 : it->second;
}

int64_t Snapshot::PendingInQueue(const std::string& queue) const {
  auto it = data_->pending_by_queue.find(queue);
  return it == data_->pending_by_queue.end() ? 0 : it->second;
}

void ClusterState::Put(Snapshot::Data& d, std::shared_ptr<const JobRecord> job) {
  const JobId id = job->id;
  auto count = [&](const JobRecord& j, int64_t delta) {
    if (j.state != JobState::kPending) return;
    if ((d.pending_by_user[j.user] += delta) == 0) d.pending_by_user.erase(j.user);
    if ((d.pending_by_queue[j.spec().queue] += delta) == 0) d.pending_by_queue.erase(j.spec().queue);
    if ((d.pending_bytes_by_user[j.user] += delta * j.spec_bytes) == 0) d.pending_bytes_by_user.erase(j.user);
  };
  const bool live = Live(job->state);
  if (auto old = d.jobs.find(id); old != d.jobs.end()) {
    count(*old->second, -1);
    if (!live && Live(old->second->state)) {
      // It ended: the learned order learns its GPU-time if it ended on its
      // own and held whole GPUs (a CPU-only or fractional job has none).
      const int64_t gpus = job->spec().TotalGpus();
      const bool own = (job->state == JobState::kSucceeded || job->state == JobState::kFailed) && gpus > 0;
      const double gpu_seconds = static_cast<double>(job->attained) * static_cast<double>(gpus) / kMicrosPerSecond;
      MutHistory(d).End(job->sweep, own, gpu_seconds);
    }
  }
  count(*job, +1);
  if (live) {
    d.live.Put(id, job);
  } else {
    d.live.Erase(id);
  }
  if (job->spec().is_service()) {
    auto at = std::lower_bound(d.live_services.begin(), d.live_services.end(), id);
    const bool listed = at != d.live_services.end() && *at == id;
    if (live && !listed) d.live_services.insert(at, id);
    if (!live && listed) d.live_services.erase(at);
  }
  d.jobs.Put(id, std::move(job));
}

std::vector<const JobRecord*> Snapshot::LiveServices() const {
  std::vector<const JobRecord*> out;
  out.reserve(data_->live_services.size());
  for (JobId id : data_->live_services) {
    if (const JobRecord* j = FindJob(id)) out.push_back(j);
  }
  return out;
}

void ClusterState::Restore(const Snapshot& snap) {
  // Shared with `snap` (and whoever else holds it): Mutable() copies first.
  data_ = std::const_pointer_cast<Snapshot::Data>(snap.data_);
}

namespace {

// What `p` points to, for writing: copied first if another state shares it
// (copy-on-write; `p` always points to a non-const object).
template <typename T>
T& Owned(std::shared_ptr<const T>& p) {
  if (p.use_count() == 1) {
    std::atomic_thread_fence(std::memory_order_acquire);  // (as in NodeTable::Mut)
  } else {
    p = std::make_shared<T>(*p);
  }
  return const_cast<T&>(*p);
}

}  // namespace

RunHistory& ClusterState::MutHistory(Snapshot::Data& d) { return Owned(d.history); }

Status ClusterState::ApplyOne(const RunHistoryState& e) {
  Mutable().history = std::make_shared<RunHistory>(e.history);
  return Status::Ok();
}

Status ClusterState::ApplyOne(const JobsForgotten& e) {
  // All or nothing: every id is checked before any goes.
  for (size_t i = 0; i < e.ids.size(); ++i) {
    const std::string name = "job " + std::to_string(e.ids[i].value());
    if (i > 0 && e.ids[i] <= e.ids[i - 1]) return InvalidArgumentError("jobs forgotten: ids are not ascending at " + name);
    ROTA_ASSIGN_OR_RETURN(std::shared_ptr<const JobRecord> job, JobOf(e.ids[i]));
    if (Live(job->state)) {
      return FailedPreconditionError(name + " is " + std::string(JobStateName(job->state)) +
                                     ": only a job that ended is forgotten");
    }
  }
  if (e.next_id > (uint64_t{1} << 40)) {
    return InvalidArgumentError("jobs forgotten: next_id " + std::to_string(e.next_id) + " is out of range");
  }
  if (!e.ids.empty() && e.next_id <= e.ids.back().value()) {
    return InvalidArgumentError("jobs forgotten: next_id " + std::to_string(e.next_id) + " is not above job " +
                                std::to_string(e.ids.back().value()));
  }
  for (const auto& [queue, days] : e.usage) {
    for (const auto& [day, gpu_us] : days) {
      // (Days of the epoch up to the ids' and times' range: nothing to overflow.)
      if (day < 0 || day > kMaxForgottenUsageDay) {
        return InvalidArgumentError("jobs forgotten: usage of queue '" + queue + "': day " + std::to_string(day) +
                                    " is out of range");
      }
      // (A day's GPU-microseconds: under 2^53 for 100 million GPUs.)
      if (gpu_us < 0 || gpu_us > kMaxDayGpuMicros) {
        return InvalidArgumentError("jobs forgotten: usage of queue '" + queue + "' on day " + std::to_string(day) +
                                    " is out of range");
      }
    }
  }
  Snapshot::Data& d = Mutable();
  ForgottenUsage& usage = Owned(d.forgotten_usage);
  for (const auto& [queue, days] : e.usage) {
    for (const auto& [day, gpu_us] : days) {
      int64_t& sum = usage[queue][day];
      sum = std::min(sum + gpu_us, kMaxDayGpuMicros);
    }
  }
  // Days before `oldest` weigh nothing against any half-life fair share
  // would use: not walked, and dropped below. Days are those of
  // 0..kMaxForgottenUsageDay, as an event's must be.
  const int64_t oldest = e.at > 0 ? e.at / kForgottenUsageDay - kForgottenUsageDays : 0;
  const TimePoint kept_from = std::max<TimePoint>(0, oldest * kForgottenUsageDay);
  const TimePoint kept_to = (kMaxForgottenUsageDay + 1) * kForgottenUsageDay;
  for (JobId id : e.ids) {
    const JobRecord& job = *d.jobs.find(id)->second;
    // The attempts fair share's restore would read (Scheduler::RestoreUsage),
    // on the GPUs it would count them at.
    if (const int64_t gpus = job.AttemptGpus(); gpus > 0) {
      std::map<int64_t, int64_t>& days = usage[job.spec().queue];
      for (const JobAttempt& a : job.attempts) {
        for (TimePoint t = std::max(a.started_at, kept_from); t < std::min(a.ended_at, kept_to);) {
          const int64_t day = t / kForgottenUsageDay;
          const TimePoint end = std::min(a.ended_at, (day + 1) * kForgottenUsageDay);
          int64_t& sum = days[day];
          sum = std::min(sum + gpus * (end - t), kMaxDayGpuMicros);
          t = end;
        }
      }
    }
    d.jobs.Erase(id);
  }
  // (A queue with no day left goes.)
  for (auto it = usage.begin(); it != usage.end();) {
    it->second.erase(it->second.begin(), it->second.lower_bound(oldest));
    it = it->second.empty() ? usage.erase(it) : std::next(it);
  }
  d.issued_below = std::max(d.issued_below, e.next_id);
  return Status::Ok();
}

Snapshot::Data& ClusterState::Mutable() {
  if (data_.use_count() > 1) data_ = std::make_shared<Snapshot::Data>(*data_);
  return *data_;
}

Status ClusterState::Apply(const Event& event) {
  Status s = std::visit([this](const auto& e) { return ApplyOne(e); }, event);
  if (s.ok()) ++Mutable().revision;  // (shared data is copied first: see Restore)
  return s;
}

Status ClusterState::ApplyOne(const NodeAdded& e) {
  ROTA_RETURN_IF_ERROR(ValidateNodeSpec(e.spec));
  if (Snapshot(data_).FindNode(e.spec.name) != nullptr) return AlreadyExistsError("node '" + e.spec.name + "' already exists");
  ROTA_RETURN_IF_ERROR(Topology::ValidateLevels(data_->levels));
  // Check the node's place in the tree before touching anything.
  auto node_it = std::find(data_->levels.begin(), data_->levels.end(), "node");
  const std::vector<std::string> domain_levels(node_it + 1, data_->levels.end());
  std::vector<std::string> path;  // domain names, innermost level first
  for (size_t l = 0; l < domain_levels.size(); ++l) path.push_back(Topology::DomainName(domain_levels, e.spec, l));
  const Snapshot::Data::DomainParents& known_parents = *data_->domain_parent;
  for (size_t l = 0; l + 1 < path.size() && l < known_parents.size(); ++l) {
    auto known = known_parents[l].find(path[l]);
    if (known != known_parents[l].end() && known->second != path[l + 1]) {
      return InvalidArgumentError("node '" + e.spec.name + "': " + *(node_it + 1 + l) + " '" + path[l] +
                                  "' is already in " + *(node_it + 2 + l) + " '" + known->second + "', not '" +
                                  path[l + 1] + "'");
    }
  }

  Snapshot::Data& d = Mutable();
  // Copied if another state shares it (once per batch of joins: after that
  // this state holds the only copy).
  Snapshot::Data::DomainParents& parents = Owned(d.domain_parent);
  parents.resize(std::max(parents.size(), path.size()));
  for (size_t l = 0; l + 1 < path.size(); ++l) parents[l].emplace(path[l], path[l + 1]);
  NodeState n;
  n.id = NodeId(static_cast<uint32_t>(d.nodes.size()));
  n.spec = e.spec;
  if (!e.spec.gpu_model.empty()) {
    auto it = std::find(d.gpu_models.begin(), d.gpu_models.end(), e.spec.gpu_model);
    n.model = static_cast<int16_t>(it - d.gpu_models.begin());
    if (it == d.gpu_models.end()) d.gpu_models.push_back(e.spec.gpu_model);
  }
  n.all_mask = e.spec.gpus >= 64 ? ~0ULL : ((1ULL << e.spec.gpus) - 1);
  n.healthy_mask = n.all_mask;
  if (!e.spec.mig.empty()) {  // ValidateNodeSpec checked the geometry and layouts
    n.mig_geometry = MigGeometryFor(e.spec.gpu_model, e.spec.gpu_memory);
    n.mig_layout.assign(e.spec.gpus, {});
    n.mig_used.assign(e.spec.gpus, 0);
    for (const auto& [gpu, layout] : e.spec.mig) {
      n.mig_mask |= uint64_t{1} << gpu;
      n.mig_layout[gpu] = ParseMigLayout(*n.mig_geometry, layout).value();
    }
  }
  {
    std::unique_lock<std::shared_mutex> lock(d.node_by_name->mu);
    d.node_by_name->ids[e.spec.name] = n.id;  // (replaces an undone add's id)
  }
  d.nodes.push_back(std::move(n));
  d.topology = std::make_shared<Snapshot::Data::LazyTopology>();
  return Status::Ok();
}

StatusOr<std::shared_ptr<const JobRecord>> ClusterState::JobOf(JobId id) const {
  auto it = data_->jobs.find(id);
  if (it == data_->jobs.end()) return NotFoundError("no job " + std::to_string(id.value()));
  return it->second;
}

StatusOr<uint32_t> ClusterState::NodeIndexOf(const std::string& name) const {
  std::shared_lock<std::shared_mutex> lock(data_->node_by_name->mu);
  auto it = data_->node_by_name->ids.find(name);
  if (it == data_->node_by_name->ids.end() || it->second.value() >= data_->nodes.size() ||
      data_->nodes[it->second.value()].spec.name != name) {
    return NotFoundError("no node named '" + name + "'");
  }
  return it->second.value();
}

Status ClusterState::ApplyOne(const NodeDrainChanged& e) {
  ROTA_ASSIGN_OR_RETURN(const uint32_t index, NodeIndexOf(e.node));
  NodeState& n = Mutable().nodes.Mut(index);
  n.drained = e.drained;
  n.drain_reason = e.drained ? e.reason : "";
  n.drained_by_agent = e.drained && e.by_agent;
  return Status::Ok();
}

Status ClusterState::ApplyOne(const GpuHealthChanged& e) {
  ROTA_ASSIGN_OR_RETURN(const uint32_t index, NodeIndexOf(e.node));
  const NodeState& n = data_->nodes[index];
  if (e.gpu < 0 || e.gpu >= n.spec.gpus) {
    return OutOfRangeError("node '" + e.node + "' has no GPU " + std::to_string(e.gpu));
  }
  NodeState& m = Mutable().nodes.Mut(index);
  if (e.healthy) m.healthy_mask |= 1ULL << e.gpu;
  else m.healthy_mask &= ~(1ULL << e.gpu);
  return Status::Ok();
}

namespace {

// A job array's element `id`: within the array it names.
Status CheckArray(JobId id, JobId array, int64_t array_count, int64_t first_index, int32_t max_running,
                  int64_t count = 1) {
  if (first_index < 0 || first_index > kMaxArrayIndex || max_running < 0) {
    return InvalidArgumentError("job " + std::to_string(id.value()) + ": array index from " + std::to_string(first_index) +
                                ", at most " + std::to_string(max_running) + " running: out of range");
  }
  if (array_count == 0 && array.value() == 0) {
    if (first_index != 0 || max_running != 0) {
      return InvalidArgumentError("job " + std::to_string(id.value()) + " has array indices but no array");
    }
    return Status::Ok();
  }
  if (array_count < 1 || array.value() == 0 || id.value() < array.value() ||
      id.value() + static_cast<uint64_t>(count) > array.value() + static_cast<uint64_t>(array_count)) {
    return InvalidArgumentError("job " + std::to_string(id.value()) + " is not within array " +
                                std::to_string(array.value()) + " of " + std::to_string(array_count));
  }
  return Status::Ok();
}

}  // namespace

std::shared_ptr<const JobSpec> ClusterState::ArraySpec(JobId id, JobId array, const JobSpec& spec) {
  if (array.value() == 0) return std::make_shared<const JobSpec>(spec);
  // An element before, of the same array and spec: share its. A journal
  // snapshot replays an array's elements one by one once some have run, in
  // id order, with gaps where elements were forgotten (they end in any
  // order): the last array spec made or shared covers those; the element
  // just before covers an array submitted in parts.
  auto& [last_array, last_spec] = last_array_spec_;
  if (last_spec != nullptr && last_array == array && *last_spec == spec) return last_spec;
  std::shared_ptr<const JobSpec> share;
  if (id.value() > 1) {
    auto prev = data_->jobs.find(JobId(id.value() - 1));
    if (prev != data_->jobs.end() && prev->second->array == array && prev->second->spec() == spec) {
      share = prev->second->shared_spec;
    }
  }
  if (share == nullptr) share = std::make_shared<const JobSpec>(spec);
  last_array_spec_ = {array, share};
  return share;
}

Status ClusterState::ApplyOne(const JobSubmitted& e) {
  ROTA_RETURN_IF_ERROR(ValidateJobSpec(e.spec));
  ROTA_RETURN_IF_ERROR(CheckArray(e.id, e.array, e.array_count, e.array_first_index, e.array_max_running));
  // Ids are issued densely from 1 (the job table is indexed by them).
  if (e.id.value() == 0 || e.id.value() >= (uint64_t{1} << 40)) {
    return InvalidArgumentError("job id " + std::to_string(e.id.value()) + " is out of range");
  }
  if (data_->jobs.count(e.id)) return AlreadyExistsError("job " + std::to_string(e.id.value()) + " already exists");
  auto job = MakeSlabShared<JobRecord>();
  job->id = e.id;
  job->SetSpec(ArraySpec(e.id, e.array, e.spec));
  job->submitted_at = e.at;
  job->user = e.user;
  job->restarts = e.restarts;
  job->failed_restarts = e.failed_restarts;
  job->attained = e.attained;
  job->resizes = e.resizes;
  job->rank_restarts = e.rank_restarts;
  job->gang_attempt = e.gang_attempt;
  job->rank_attempt = e.rank_attempt;
  job->request_id = e.request_id;
  job->array = e.array;
  job->array_count = e.array_count;
  job->array_first_index = e.array_first_index;
  job->array_max_running = e.array_max_running;
  job->spec_bytes = Snapshot::SpecBytes(job->spec(), e.array, e.array_count);
  Snapshot::Data& d = Mutable();
  job->sweep = MutHistory(d).Join({job->spec().queue, job->spec().TotalGpus()}, e.id, e.at, e.sweep);
  Put(d, std::move(job));
  return Status::Ok();
}

Status ClusterState::ApplyOne(const JobsSubmitted& e) {
  if (e.count < 1 || e.count > kMaxJobsPerRun) {
    return InvalidArgumentError("jobs submitted: count " + std::to_string(e.count) + " is not 1.." +
                                std::to_string(kMaxJobsPerRun));
  }
  ROTA_RETURN_IF_ERROR(ValidateJobSpec(e.spec));
  ROTA_RETURN_IF_ERROR(
      CheckArray(e.first, e.array, e.array_count, e.array_first_index, e.array_max_running, e.count));
  const uint64_t first = e.first.value();
  if (first == 0 || first + static_cast<uint64_t>(e.count) > (uint64_t{1} << 40)) {
    return InvalidArgumentError("job ids " + std::to_string(first) + ".." + std::to_string(first + e.count - 1) +
                                " are out of range");
  }
  // All or nothing: every id must be free before any is taken.
  for (int64_t i = 0; i < e.count; ++i) {
    if (data_->jobs.count(JobId(first + static_cast<uint64_t>(i)))) {
      return AlreadyExistsError("job " + std::to_string(first + i) + " already exists");
    }
  }
  Snapshot::Data& d = Mutable();
  const auto spec = ArraySpec(JobId(first), e.array, e.spec);  // one for the run
  const JobId sweep = MutHistory(d).Join({spec->queue, spec->TotalGpus()}, e.first, e.at, e.sweep, e.count);
  const int64_t spec_bytes = Snapshot::SpecBytes(*spec, e.array, e.array_count);
  for (int64_t i = 0; i < e.count; ++i) {
    auto job = MakeSlabShared<JobRecord>();
    job->id = JobId(first + static_cast<uint64_t>(i));
    job->SetSpec(spec);
    job->submitted_at = e.at;
    job->user = e.user;
    job->request_id = e.request_id;
    job->array = e.array;
    job->array_count = e.array_count;
    job->array_first_index = e.array_first_index;
    job->array_max_running = e.array_max_running;
    job->spec_bytes = spec_bytes;
    job->sweep = sweep;
    Put(d, std::move(job));
  }
  return Status::Ok();
}

namespace {

// What a replica holds on its node: whole GPUs, a share of one GPU (milli-GPU
// and memory) or a MIG instance, and its CPU and memory. (Release undoes it.)
void Occupy(NodeState& n, const ReplicaPlacement& r, const TaskGroupSpec& task) {
  if (r.mig_start >= 0) {
    n.mig_used[std::countr_zero(r.gpu_mask)] |= static_cast<uint8_t>(1u << r.mig_start);
  } else if (r.gpu_milli > 0) {
    const int32_t g = std::countr_zero(r.gpu_mask);
    if (n.shared_milli.empty()) {
      n.shared_milli.assign(n.spec.gpus, 0);
      n.shared_memory.assign(n.spec.gpus, 0);
    }
    n.shared_milli[g] += r.gpu_milli;
    n.shared_memory[g] += task.gpu_share.memory;
    n.shared_mask |= r.gpu_mask;
  } else {
    n.allocated_mask |= r.gpu_mask;
  }
  n.cpu_allocated += task.cpu;
  n.memory_allocated += task.memory;
}

}  // namespace

Status ClusterState::CheckPlacement(const JobRecord& job, const std::vector<ReplicaPlacement>& placement,
                                    const std::vector<ReplicaPlacement>& replacing, const std::string& who) const {
  const int64_t n_placed = static_cast<int64_t>(placement.size());
  if (job.spec().elastic()) {
    if (n_placed < job.spec().elastic_min_replicas || n_placed > job.spec().TotalReplicas()) {
      return FailedPreconditionError(who + ": " + std::to_string(n_placed) + " placements for an elastic job of " +
                                     std::to_string(job.spec().elastic_min_replicas) + ".." +
                                     std::to_string(job.spec().TotalReplicas()) + " replicas");
    }
  } else if (n_placed != job.spec().TotalReplicas()) {
    return FailedPreconditionError(who + ": " + std::to_string(n_placed) + " placements for " +
                                   std::to_string(job.spec().TotalReplicas()) + " replicas (a gang binds whole)");
  }
  // What `replacing` holds per node counts as free: whole GPUs, shares of
  // a GPU (milli-GPU and memory, by node and GPU), MIG instances.
  std::unordered_map<uint32_t, uint64_t> own_gpus;
  std::unordered_map<uint32_t, std::pair<MilliCpu, MemoryMiB>> own;
  std::map<std::pair<uint32_t, int32_t>, std::pair<int32_t, MemoryMiB>> own_shares;
  std::map<std::pair<uint32_t, int32_t>, uint8_t> own_mig;
  for (const ReplicaPlacement& r : replacing) {
    const TaskGroupSpec& task = job.spec().tasks[r.task];
    const std::pair<uint32_t, int32_t> gpu{r.node.value(), std::countr_zero(r.gpu_mask)};
    if (r.mig_start >= 0) {
      own_mig[gpu] |= static_cast<uint8_t>(1u << r.mig_start);
    } else if (r.gpu_milli > 0) {
      own_shares[gpu].first += r.gpu_milli;
      own_shares[gpu].second += task.gpu_share.memory;
    } else {
      own_gpus[r.node.value()] |= r.gpu_mask;
    }
    own[r.node.value()].first += task.cpu;
    own[r.node.value()].second += task.memory;
  }
  // Validate every replica against the current state plus the earlier replicas of this gang.
  std::unordered_map<uint32_t, uint64_t> gpus_taken;
  std::unordered_map<uint32_t, uint64_t> gpus_shared;  // by earlier fractional replicas of this gang
  std::unordered_map<uint32_t, std::pair<MilliCpu, MemoryMiB>> taken;
  std::vector<std::vector<bool>> seen(job.spec().tasks.size());
  for (size_t t = 0; t < job.spec().tasks.size(); ++t) seen[t].assign(job.spec().tasks[t].replicas, false);
  for (const ReplicaPlacement& r : placement) {
    if (r.task >= job.spec().tasks.size() || r.replica >= static_cast<uint32_t>(job.spec().tasks[r.task].replicas) ||
        seen[r.task][r.replica]) {
      return FailedPreconditionError(who + ": bad or duplicate replica " + std::to_string(r.task) + "/" +
                                     std::to_string(r.replica));
    }
    seen[r.task][r.replica] = true;
    if (r.node.value() >= data_->nodes.size()) return NotFoundError(who + ": no node id " + std::to_string(r.node.value()));
    const NodeState& n = data_->nodes[r.node.value()];
    const TaskGroupSpec& task = job.spec().tasks[r.task];
    const int32_t fraction = task.gpu_share.fraction_milli;
    const bool mig = !task.gpu_share.mig_profile.empty();
    if (mig) {
      const int32_t g = std::countr_zero(r.gpu_mask);
      if (std::popcount(r.gpu_mask) != 1 || r.gpu_milli != 0 || r.mig_start < 0 || r.mig_start >= kMigSlots) {
        return FailedPreconditionError(who + ": a MIG replica binds one instance of one GPU");
      }
      if (((n.mig_mask >> g) & 1) == 0) {
        return FailedPreconditionError(who + ": GPU " + std::to_string(g) + " on '" + n.spec.name + "' is not in MIG mode");
      }
      const int32_t profile = n.mig_geometry->ProfileIndex(task.gpu_share.mig_profile);
      const MigInstance want{static_cast<int8_t>(profile), static_cast<int8_t>(r.mig_start)};
      const MigLayout& layout = n.mig_layout[g];
      if (profile < 0 || std::find(layout.begin(), layout.end(), want) == layout.end()) {
        return FailedPreconditionError(who + ": GPU " + std::to_string(g) + " on '" + n.spec.name + "' has no " +
                                       task.gpu_share.mig_profile + " instance at slot " + std::to_string(r.mig_start) +
                                       " (layout: " + FormatMigLayout(*n.mig_geometry, layout) + ")");
      }
      const auto mine_before = own_mig.find({r.node.value(), g});
      const uint8_t in_use = n.mig_used[g] & ~(mine_before == own_mig.end() ? 0 : mine_before->second);
      bool twice = ((in_use >> r.mig_start) & 1) != 0;
      for (const ReplicaPlacement& o : placement) {
        if (&o == &r) break;
        twice = twice || (o.node == r.node && o.gpu_mask == r.gpu_mask && o.mig_start == r.mig_start);
      }
      if (twice) {
        return FailedPreconditionError(who + ": the " + task.gpu_share.mig_profile + " instance at slot " +
                                       std::to_string(r.mig_start) + " of GPU " + std::to_string(g) + " on '" +
                                       n.spec.name + "' is in use");
      }
    } else if (r.mig_start >= 0) {
      return FailedPreconditionError(who + ": only a replica asking for a MIG profile binds a MIG instance");
    } else if (fraction > 0) {
      if (std::popcount(r.gpu_mask) != 1 || r.gpu_milli != fraction) {
        return FailedPreconditionError(who + ": a replica with a GPU fraction binds one GPU for " + std::to_string(fraction) +
                                       " milli-GPU");
      }
    } else if (std::popcount(r.gpu_mask) != task.gpus || r.gpu_milli != 0) {
      return FailedPreconditionError(who + ": replica needs " + std::to_string(task.gpus) + " GPUs, got " +
                                     std::to_string(std::popcount(r.gpu_mask)));
    }
    if ((r.gpu_mask & ~n.all_mask) != 0) return FailedPreconditionError(who + ": node '" + n.spec.name + "' lacks a GPU index");
    if ((r.gpu_mask & ~n.healthy_mask) != 0) return FailedPreconditionError(who + ": GPU unhealthy on '" + n.spec.name + "'");
    uint64_t& mine = gpus_taken[r.node.value()];
    if (mig) {
      // Checked above, instance by instance.
    } else if (fraction > 0) {
      // Shares this GPU with other fractions: never past the whole GPU or its memory.
      const int32_t g = std::countr_zero(r.gpu_mask);
      int32_t milli = n.milli_used(g) + fraction;
      MemoryMiB mem = n.memory_shared(g) + task.gpu_share.memory;
      if (auto it = own_shares.find({r.node.value(), g}); it != own_shares.end()) {
        milli -= it->second.first;
        mem -= it->second.second;
      }
      for (const ReplicaPlacement& o : placement) {
        if (&o == &r) break;
        if (o.node == r.node && o.gpu_mask == r.gpu_mask && o.gpu_milli > 0) {
          milli += o.gpu_milli;
          mem += job.spec().tasks[o.task].gpu_share.memory;
        }
      }
      if ((r.gpu_mask & (n.allocated_mask | n.mig_mask | mine)) != 0 || milli > 1000 ||
          (n.spec.gpu_memory > 0 && mem > n.spec.gpu_memory)) {
        return FailedPreconditionError(who + ": GPU " + std::to_string(g) + " on '" + n.spec.name +
                                       "' has no room for " + std::to_string(fraction) + " milli-GPU");
      }
      gpus_shared[r.node.value()] |= r.gpu_mask;
    } else {
      const uint64_t allocated = n.allocated_mask & ~own_gpus[r.node.value()];
      if ((r.gpu_mask & (allocated | n.shared_mask | n.mig_mask | mine | gpus_shared[r.node.value()])) != 0) {
        return FailedPreconditionError(who + ": GPU already allocated on '" + n.spec.name + "'");
      }
      mine |= r.gpu_mask;
    }
    auto& [cpu, mem] = taken[r.node.value()];
    cpu += task.cpu;
    mem += task.memory;
    const auto& [own_cpu, own_mem] = own[r.node.value()];
    if (n.cpu_allocated - own_cpu + cpu > n.spec.cpu || n.memory_allocated - own_mem + mem > n.spec.memory) {
      return FailedPreconditionError(who + ": CPU or memory exhausted on '" + n.spec.name + "'");
    }
  }
  return Status::Ok();
}

Status ClusterState::ApplyOne(const JobBound& e) {
  ROTA_ASSIGN_OR_RETURN(std::shared_ptr<const JobRecord> found, JobOf(e.id));
  const JobRecord& job = *found;
  const std::string who = "bind job " + std::to_string(e.id.value());
  if (job.state != JobState::kPending) {
    return FailedPreconditionError(who + ": job is " + std::string(JobStateName(job.state)) + ", not pending");
  }
  // (A cycle decided on a snapshot from before the hold.)
  if (job.held) return FailedPreconditionError(who + ": job is held by " + job.held_by);
  if (e.ended) {
    // An ended job's attempt, from a snapshot: only what it names must exist
    // (its nodes may hold other GPUs, or another MIG mode, by now).
    for (const ReplicaPlacement& r : e.placement) {
      if (r.node.value() >= data_->nodes.size() || r.task >= job.spec().tasks.size()) {
        return InvalidArgumentError(who + ": a placement names no such node or task");
      }
    }
    unoccupied_.push_back(e.id);
  } else {
    ROTA_RETURN_IF_ERROR(CheckPlacement(job, e.placement, {}, who));
  }
  Snapshot::Data& d = Mutable();
  if (!e.ended) {
    for (const ReplicaPlacement& r : e.placement) Occupy(d.nodes.Mut(r.node.value()), r, job.spec().tasks[r.task]);
  }
  auto updated = MakeSlabShared<JobRecord>(job);
  updated->state = JobState::kRunning;
  updated->started_at = e.at;
  updated->placement = e.placement;
  updated->nominated.clear();
  updated->nominated_at = 0;
  Put(d, std::move(updated));
  return Status::Ok();
}

int64_t JobRecord::HeldGpus() const { return GpusOf(placement); }

int64_t JobRecord::GpusOf(const std::vector<ReplicaPlacement>& replicas) const {
  int64_t whole = 0, milli = 0;
  for (const ReplicaPlacement& r : replicas) {
    if (r.shares_gpu()) milli += spec().tasks[r.task].gpu_share.milli();
    else whole += std::popcount(r.gpu_mask);
  }
  return whole + (milli + 999) / 1000;
}

void ClusterState::Release(const JobRecord& job) {
  if (auto it = std::find(unoccupied_.begin(), unoccupied_.end(), job.id); it != unoccupied_.end()) {
    unoccupied_.erase(it);  // (took nothing: JobBound::ended)
    return;
  }
  Snapshot::Data& d = Mutable();
  for (const ReplicaPlacement& r : job.placement) {
    NodeState& n = d.nodes.Mut(r.node.value());
    const TaskGroupSpec& task = job.spec().tasks[r.task];
    if (r.mig_start >= 0 && !n.mig_used.empty()) {
      n.mig_used[std::countr_zero(r.gpu_mask)] &= static_cast<uint8_t>(~(1u << r.mig_start));
    } else if (r.gpu_milli > 0 && !n.shared_milli.empty()) {
      const int32_t g = std::countr_zero(r.gpu_mask);
      n.shared_milli[g] -= r.gpu_milli;
      n.shared_memory[g] -= task.gpu_share.memory;
      if (n.shared_milli[g] <= 0) {
        n.shared_milli[g] = 0;
        n.shared_memory[g] = 0;
        n.shared_mask &= ~r.gpu_mask;
      }
    } else {
      n.allocated_mask &= ~r.gpu_mask;
    }
    n.cpu_allocated -= task.cpu;
    n.memory_allocated -= task.memory;
  }
}

namespace {

// Records the attempt `job` ends at `at`.
void EndAttempt(JobRecord& job, TimePoint at, std::string end) {
  job.attempts.push_back({job.started_at, at, std::move(end)});
  if (job.attempts.size() > JobRecord::kMaxAttempts) job.attempts.erase(job.attempts.begin());
}

}  // namespace

Status ClusterState::ApplyOne(const JobFinished& e) {
  ROTA_ASSIGN_OR_RETURN(std::shared_ptr<const JobRecord> found, JobOf(e.id));
  if (found->state != JobState::kRunning && found->state != JobState::kPreempting) {
    return FailedPreconditionError("job " + std::to_string(e.id.value()) + " is not running");
  }
  std::shared_ptr<const JobRecord> old = found;
  Release(*old);
  auto updated = MakeSlabShared<JobRecord>(*old);
  updated->state = e.outcome == JobOutcome::kSucceeded ? JobState::kSucceeded : JobState::kFailed;
  updated->attained += std::max<Duration>(0, e.at - old->started_at);
  EndAttempt(*updated, e.at, e.outcome == JobOutcome::kSucceeded ? "succeeded" : "failed: " + e.reason);
  updated->finished_at = e.at;
  updated->end_reason = e.reason;
  Put(Mutable(), std::move(updated));
  return Status::Ok();
}

Status ClusterState::ApplyOne(const JobRequeued& e) {
  ROTA_ASSIGN_OR_RETURN(std::shared_ptr<const JobRecord> found, JobOf(e.id));
  std::shared_ptr<const JobRecord> old = found;
  if (old->state != JobState::kRunning && old->state != JobState::kPreempting) {
    return FailedPreconditionError("job " + std::to_string(e.id.value()) + " is not running");
  }
  Release(*old);
  auto updated = MakeSlabShared<JobRecord>(*old);
  updated->state = JobState::kPending;
  updated->attained += std::max<Duration>(0, e.at - old->started_at);
  EndAttempt(*updated, e.at, "requeued: " + e.reason);
  updated->preempted_for = JobId();
  updated->preempting_since = 0;
  updated->restarting = false;
  updated->restart_failed = false;
  updated->started_at = 0;
  updated->last_placement = std::move(updated->placement);
  updated->placement.clear();
  updated->restarts++;
  if (e.failed) updated->failed_restarts++;
  updated->gang_attempt = updated->attempt();
  updated->rank_attempt.clear();
  updated->last_requeue_reason = e.reason;
  Snapshot::Data& d = Mutable();
  // An evicted gang's whole GPUs are nominated for the job it made room
  // for: a pending job, or a running service scaling up.
  if (old->state == JobState::kPreempting) {
    auto nominee = d.jobs.find(old->preempted_for);
    if (nominee != d.jobs.end() &&
        (nominee->second->state == JobState::kPending ||
         (nominee->second->state == JobState::kRunning && nominee->second->spec().is_service()))) {
      auto n = MakeSlabShared<JobRecord>(*nominee->second);
      // A running service keeps a nomination until it resizes: one from
      // before this gang's eviction began is an older scale-up's, gone stale.
      if (n->state == JobState::kRunning && n->nominated_at < old->preempting_since) n->nominated.clear();
      for (const ReplicaPlacement& r : updated->last_placement) {
        if (!r.shares_gpu() && r.gpu_mask != 0) n->nominated.push_back(r);
      }
      n->nominated_at = e.at;
      Put(d, std::move(n));
    }
  }
  Put(d, std::move(updated));
  return Status::Ok();
}

Status ClusterState::ApplyOne(const JobCheckpointed& e) {
  ROTA_ASSIGN_OR_RETURN(std::shared_ptr<const JobRecord> found, JobOf(e.id));
  const JobState st = found->state;
  if (st != JobState::kRunning && st != JobState::kPreempting && st != JobState::kPending) {
    return FailedPreconditionError("job " + std::to_string(e.id.value()) + " has ended");
  }
  if (e.path.size() > 4096) return InvalidArgumentError("checkpoint path: longer than 4096 bytes");
  auto updated = MakeSlabShared<JobRecord>(*found);
  updated->last_checkpoint_at = e.at;
  updated->last_checkpoint_path = e.path;
  Put(Mutable(), std::move(updated));
  return Status::Ok();
}

Status ClusterState::ApplyOne(const JobResized& e) {
  ROTA_ASSIGN_OR_RETURN(std::shared_ptr<const JobRecord> found, JobOf(e.id));
  std::shared_ptr<const JobRecord> old = found;
  const std::string who = "resize job " + std::to_string(e.id.value());
  if (!old->spec().elastic()) return FailedPreconditionError(who + ": not an elastic job");
  if (old->state != JobState::kRunning) {
    return FailedPreconditionError(who + ": job is " + std::string(JobStateName(old->state)) + ", not running");
  }
  ROTA_RETURN_IF_ERROR(CheckPlacement(*old, e.placement, old->placement, who));
  Release(*old);
  Snapshot::Data& d = Mutable();
  for (const ReplicaPlacement& r : e.placement) Occupy(d.nodes.Mut(r.node.value()), r, old->spec().tasks[r.task]);
  auto updated = MakeSlabShared<JobRecord>(*old);
  updated->placement = e.placement;
  updated->resizes++;
  updated->gang_attempt = updated->attempt();
  updated->rank_attempt.clear();
  if (old->spec().is_service()) {
    // A service's replicas are independent: those kept where they ran keep
    // their attempt (their processes), new ones start as the new attempt.
    for (const ReplicaPlacement& r : e.placement) {
      const bool kept = std::any_of(old->placement.begin(), old->placement.end(), [&](const ReplicaPlacement& o) {
        return o.replica == r.replica && o.node == r.node && o.gpu_mask == r.gpu_mask && o.gpu_milli == r.gpu_milli &&
               o.mig_start == r.mig_start;
      });
      if (kept) updated->rank_attempt[r.replica] = old->ReplicaAttempt(r.replica);
    }
  }
  updated->resized_at = e.at;
  updated->nominated.clear();  // (a service's, for its scale-up: now placed)
  updated->nominated_at = 0;
  updated->last_resize_reason = e.reason;
  Put(d, std::move(updated));
  return Status::Ok();
}

Status ClusterState::ApplyOne(const RankRestarted& e) {
  ROTA_ASSIGN_OR_RETURN(std::shared_ptr<const JobRecord> found, JobOf(e.id));
  const JobRecord& job = *found;
  const std::string who = "restart a rank of job " + std::to_string(e.id.value());
  if (!job.spec().elastic() && !job.spec().is_service()) {
    return FailedPreconditionError(who + ": only an elastic job or a service restarts ranks alone");
  }
  if (job.state != JobState::kRunning) return FailedPreconditionError(who + ": job is not running");
  const bool placed = std::any_of(job.placement.begin(), job.placement.end(), [&](const ReplicaPlacement& r) {
    return r.task == e.task && r.replica == e.replica;
  });
  if (!placed) return FailedPreconditionError(who + ": replica " + std::to_string(e.replica) + " is not running");
  auto updated = MakeSlabShared<JobRecord>(job);
  updated->rank_restarts++;
  updated->rank_attempt[e.replica] = updated->attempt();
  updated->last_requeue_reason = e.reason;
  Put(Mutable(), std::move(updated));
  return Status::Ok();
}

Status ClusterState::ApplyOne(const JobHistory& e) {
  ROTA_ASSIGN_OR_RETURN(std::shared_ptr<const JobRecord> found, JobOf(e.id));
  const JobRecord* job = found.get();
  if (e.preempted_at.size() != e.preempted_by.size()) {
    return InvalidArgumentError("job " + std::to_string(e.id.value()) + ": preempted_at and preempted_by differ in length");
  }
  for (const ReplicaPlacement& r : e.last_placement) {
    if (r.node.value() >= data_->nodes.size() || r.task >= job->spec().tasks.size()) {
      return InvalidArgumentError("job " + std::to_string(e.id.value()) + ": a placement names no such node or task");
    }
  }
  // (GPUs nominated for it are other jobs' replicas: their task indices are
  // those jobs', not this one's. Before, a gang of two task groups evicted
  // for a job of one made every later snapshot fail to load.)
  for (const ReplicaPlacement& r : e.nominated) {
    if (r.node.value() >= data_->nodes.size()) {
      return InvalidArgumentError("job " + std::to_string(e.id.value()) + ": a nominated placement names no such node");
    }
  }
  auto updated = MakeSlabShared<JobRecord>(*job);
  updated->preempted_at = e.preempted_at;
  updated->preempted_by = e.preempted_by;
  updated->attempts = e.attempts;
  updated->attained = e.attained;
  updated->last_requeue_reason = e.last_requeue_reason;
  updated->last_placement = e.last_placement;
  updated->nominated = e.nominated;
  updated->nominated_at = e.nominated_at;
  updated->resized_at = e.resized_at;
  updated->last_resize_reason = e.last_resize_reason;
  updated->scaled_down_at = e.scaled_down_at;
  Put(Mutable(), std::move(updated));
  return Status::Ok();
}

Status ClusterState::ApplyOne(const NodeLabelsChanged& e) {
  ROTA_ASSIGN_OR_RETURN(const uint32_t index, NodeIndexOf(e.node));
  NodeSpec changed = data_->nodes[index].spec;
  changed.labels = e.labels;
  ROTA_RETURN_IF_ERROR(ValidateNodeSpec(changed));
  // Every node's place in the tree again, this one's with its new labels.
  auto node_it = std::find(data_->levels.begin(), data_->levels.end(), "node");
  const std::vector<std::string> domain_levels(node_it + 1, data_->levels.end());
  std::vector<std::unordered_map<std::string, std::string>> parents(domain_levels.size());
  std::vector<std::unordered_map<std::string, uint32_t>> parent_from(domain_levels.size());  // the node that said so
  for (uint32_t i = 0; i < data_->nodes.size(); ++i) {
    const NodeSpec& n = i == index ? changed : data_->nodes[i].spec;
    for (size_t l = 0; l + 1 < domain_levels.size(); ++l) {
      const std::string inner = Topology::DomainName(domain_levels, n, l);
      const std::string outer = Topology::DomainName(domain_levels, n, l + 1);
      auto [it, added] = parents[l].emplace(inner, outer);
      if (added) parent_from[l][inner] = i;
      if (added || it->second == outer) continue;
      // Name the other node: the one whose place this one's labels contradict.
      const uint32_t other = i == index ? parent_from[l][inner] : i;
      const std::string mine = i == index ? outer : it->second;
      const std::string theirs = i == index ? it->second : outer;
      std::string shown;
      for (const auto& [k, v] : e.labels) shown += (shown.empty() ? "" : ", ") + k + "=" + v;
      return InvalidArgumentError("node '" + e.node + "': labels {" + shown + "} put " + domain_levels[l] + " '" +
                                  inner + "' in " + domain_levels[l + 1] + " '" + mine + "', but node '" +
                                  data_->nodes[other].spec.name + "' has it in '" + theirs + "'");
    }
  }
  Snapshot::Data& d = Mutable();
  d.nodes.Mut(index).spec.labels = e.labels;
  d.domain_parent = std::make_shared<Snapshot::Data::DomainParents>(std::move(parents));
  d.topology = std::make_shared<Snapshot::Data::LazyTopology>();
  return Status::Ok();
}

Status ClusterState::ApplyOne(const NodeMigChanged& e) {
  ROTA_ASSIGN_OR_RETURN(const uint32_t index, NodeIndexOf(e.node));
  const NodeState& n = data_->nodes[index];
  NodeSpec spec = n.spec;
  spec.mig = e.mig;
  spec.mig_fixed = e.mig_fixed;
  ROTA_RETURN_IF_ERROR(ValidateNodeSpec(spec));
  const MigGeometry* geo = spec.mig.empty() ? nullptr : MigGeometryFor(spec.gpu_model, spec.gpu_memory);
  std::vector<MigLayout> layouts(spec.mig.empty() ? 0 : spec.gpus);
  uint64_t mig_mask = 0;
  for (const auto& [gpu, layout] : spec.mig) {
    mig_mask |= uint64_t{1} << gpu;
    layouts[gpu] = ParseMigLayout(*geo, layout).value();  // ValidateNodeSpec parsed it
  }
  // Only GPUs that nothing holds change mode or layout.
  for (int32_t g = 0; g < spec.gpus; ++g) {
    const bool was = (n.mig_mask >> g) & 1, is = (mig_mask >> g) & 1;
    const bool changed = was != is || (is && n.mig_layout[g] != layouts[g]);
    const bool held = ((n.allocated_mask | n.shared_mask) >> g) & 1 || (was && n.mig_used[g] != 0);
    if (changed && held) {
      return FailedPreconditionError("GPU " + std::to_string(g) + " on '" + e.node +
                                     "' changed MIG mode or layout while work holds it");
    }
  }
  NodeState& m = Mutable().nodes.Mut(index);
  std::vector<uint8_t> used(spec.mig.empty() ? 0 : spec.gpus, 0);
  for (int32_t g = 0; g < static_cast<int32_t>(used.size()) && g < static_cast<int32_t>(m.mig_used.size()); ++g) {
    if ((mig_mask >> g) & 1) used[g] = m.mig_used[g];  // unchanged GPUs keep their instances in use
  }
  m.spec = std::move(spec);
  m.mig_mask = mig_mask;
  m.mig_geometry = geo;
  m.mig_layout = std::move(layouts);
  m.mig_used = std::move(used);
  return Status::Ok();
}

Status ClusterState::ApplyOne(const GpuReconfigured& e) {
  ROTA_ASSIGN_OR_RETURN(const uint32_t index, NodeIndexOf(e.node));
  const NodeState& n = data_->nodes[index];
  const std::string where = "GPU " + std::to_string(e.gpu) + " on '" + e.node + "'";
  if (e.gpu < 0 || e.gpu >= n.spec.gpus) return OutOfRangeError("node '" + e.node + "' has no GPU " + std::to_string(e.gpu));
  if (((n.mig_mask >> e.gpu) & 1) == 0) return FailedPreconditionError(where + " is not in MIG mode");
  if (n.mig_used[e.gpu] != 0) {
    return FailedPreconditionError(where + " has MIG instances in use; only an idle GPU is re-partitioned");
  }
  StatusOr<MigLayout> layout = ParseMigLayout(*n.mig_geometry, e.layout);
  if (!layout.ok()) return InvalidArgumentError(where + ": " + std::string(layout.status().message()));
  Mutable().nodes.Mut(index).mig_layout[e.gpu] = std::move(layout).value();
  return Status::Ok();
}

Status ClusterState::ApplyOne(const JobPreempting& e) {
  ROTA_ASSIGN_OR_RETURN(std::shared_ptr<const JobRecord> found, JobOf(e.id));
  if (found->state != JobState::kRunning) {
    return FailedPreconditionError("job " + std::to_string(e.id.value()) + " is not running");
  }
  auto updated = MakeSlabShared<JobRecord>(*found);
  updated->state = JobState::kPreempting;
  updated->preempted_for = e.restart ? JobId() : e.preemptor;
  updated->preempting_since = e.at;
  updated->last_requeue_reason = e.reason;
  updated->restarting = e.restart;
  updated->restart_failed = e.restart && e.failed;
  if (e.restart) {
    Put(Mutable(), std::move(updated));
    return Status::Ok();
  }
  updated->preempted_at.push_back(e.at);
  updated->preempted_by.push_back(e.preemptor);
  if (updated->preempted_at.size() > 8) {
    updated->preempted_at.erase(updated->preempted_at.begin());
    updated->preempted_by.erase(updated->preempted_by.begin());
  }
  Put(Mutable(), std::move(updated));
  return Status::Ok();
}

Status ClusterState::ApplyOne(const NodeLostChanged& e) {
  ROTA_ASSIGN_OR_RETURN(const uint32_t index, NodeIndexOf(e.node));
  Mutable().nodes.Mut(index).lost = e.lost;
  return Status::Ok();
}

Status ClusterState::ApplyOne(const NodeAgentChanged& e) {
  ROTA_ASSIGN_OR_RETURN(const uint32_t index, NodeIndexOf(e.node));
  NodeState& n = Mutable().nodes.Mut(index);
  n.agent = e.instance;
  n.agent_address = e.address;
  return Status::Ok();
}

Status ClusterState::ApplyOne(const JobHoldChanged& e) {
  ROTA_ASSIGN_OR_RETURN(std::shared_ptr<const JobRecord> found, JobOf(e.id));
  if (e.held && found->state != JobState::kPending) {
    return FailedPreconditionError("job " + std::to_string(e.id.value()) + " is " +
                                   std::string(JobStateName(found->state)) + ": only a pending job can be held");
  }
  if (e.held == found->held) {
    return FailedPreconditionError("job " + std::to_string(e.id.value()) + (e.held ? " is held already" : " is not held"));
  }
  auto updated = MakeSlabShared<JobRecord>(*found);
  updated->held = e.held;
  updated->held_by = e.held ? e.by : "";
  updated->held_by_admin = e.held && e.admin;
  Put(Mutable(), std::move(updated));
  return Status::Ok();
}

Status ClusterState::ApplyOne(const ServiceScaled& e) {
  ROTA_ASSIGN_OR_RETURN(std::shared_ptr<const JobRecord> found, JobOf(e.id));
  const std::string who = "scale job " + std::to_string(e.id.value());
  if (!found->spec().is_service()) return FailedPreconditionError(who + ": not a service");
  if (!Live(found->state)) {
    return FailedPreconditionError(who + ": it is " + std::string(JobStateName(found->state)));
  }
  const ServiceSpec& sv = found->spec().service;
  if (e.desired < sv.min_replicas || e.desired > sv.max_replicas) {
    return InvalidArgumentError(who + ": desired " + std::to_string(e.desired) + " is outside its replicas " +
                                std::to_string(sv.min_replicas) + ".." + std::to_string(sv.max_replicas));
  }
  if (e.reason.size() > 4096) return InvalidArgumentError(who + ": reason longer than 4096 bytes");
  auto updated = MakeSlabShared<JobRecord>(*found);
  if (e.desired < found->DesiredReplicas()) updated->scaled_down_at = e.at;
  updated->desired_replicas = e.desired;
  updated->scaled_at = e.at;
  updated->last_scale_reason = e.reason;
  Put(Mutable(), std::move(updated));
  return Status::Ok();
}

Status ClusterState::ApplyOne(const ServiceUpdated& e) {
  ROTA_ASSIGN_OR_RETURN(std::shared_ptr<const JobRecord> found, JobOf(e.id));
  const std::string who = "update service job " + std::to_string(e.id.value());
  if (!found->spec().is_service()) return FailedPreconditionError(who + ": not a service");
  if (!Live(found->state)) {
    return FailedPreconditionError(who + ": it is " + std::string(JobStateName(found->state)));
  }
  ROTA_RETURN_IF_ERROR(ValidateJobSpec(e.spec));
  ROTA_RETURN_IF_ERROR(ServiceUpdateAllowed(found->spec(), e.spec));
  // The replicas it runs must fit the new range (indices below max, at least min).
  const ServiceSpec& next = e.spec.service;
  if (found->state == JobState::kRunning || found->state == JobState::kPreempting) {
    for (const ReplicaPlacement& r : found->placement) {
      if (static_cast<int32_t>(r.replica) >= next.max_replicas) {
        return InvalidArgumentError("service.replicas.max: replica " + std::to_string(r.replica) +
                                    " runs; lower max only once the service runs fewer (rota services)");
      }
    }
    if (static_cast<int32_t>(found->placement.size()) < next.min_replicas) {
      return InvalidArgumentError("service.replicas.min: it runs " + std::to_string(found->placement.size()) +
                                  " replicas; raise min only up to what runs, then let it scale");
    }
  }
  auto updated = MakeSlabShared<JobRecord>(*found);
  updated->SetSpec(e.spec);
  updated->spec_bytes = Snapshot::SpecBytes(updated->spec(), updated->array, updated->array_count);
  // A pending service's next start is on the new spec already: nothing to roll.
  updated->spec_attempt = e.spec_attempt >= 0                 ? e.spec_attempt
                          : found->state == JobState::kPending ? found->spec_attempt
                                                               : found->attempt();
  updated->spec_updates++;
  if (updated->desired_replicas > 0) {
    updated->desired_replicas = std::clamp(updated->desired_replicas, e.spec.service.min_replicas, e.spec.service.max_replicas);
  }
  Put(Mutable(), std::move(updated));
  return Status::Ok();
}

Status ClusterState::ApplyOne(const JobCancelled& e) {
  ROTA_ASSIGN_OR_RETURN(std::shared_ptr<const JobRecord> found, JobOf(e.id));
  std::shared_ptr<const JobRecord> old = found;
  if (!Live(old->state)) {
    return FailedPreconditionError("job " + std::to_string(e.id.value()) + " is already " +
                                   std::string(JobStateName(old->state)));
  }
  if (old->state == JobState::kRunning || old->state == JobState::kPreempting) Release(*old);
  auto updated = MakeSlabShared<JobRecord>(*old);
  if (old->state == JobState::kRunning || old->state == JobState::kPreempting) {
    updated->attained += std::max<Duration>(0, e.at - old->started_at);
    EndAttempt(*updated, e.at, e.reason);
  }
  updated->held = false;  // an ended job is held no more
  updated->held_by.clear();
  updated->held_by_admin = false;
  updated->state = JobState::kCancelled;
  updated->finished_at = e.at;
  updated->end_reason = e.reason;
  Put(Mutable(), std::move(updated));
  return Status::Ok();
}

}  // namespace rota

namespace rota {

Status CompactState(const Snapshot& snap, const std::function<Status(const Event&)>& sink, bool live_only) {
  // Each event goes to the sink as it is made: a large state is never
  // materialized as events (a million ended jobs' specs, copied).
  Status status;
  auto emit = [&](Event e) {
    if (status.ok()) status = sink(e);
  };
  for (const NodeState& n : snap.nodes()) emit(NodeAdded{n.spec});
  auto emit_job = [&](const JobRecord& j) {
    // An ended job's last attempt is added again as it replays (JobBound,
    // then JobFinished or JobCancelled): it starts without it, so that it
    // ends with the GPU-time it had (the history learns from that).
    Duration attained = j.attained;
    if (!j.placement.empty() && j.state != JobState::kPending && j.state != JobState::kRunning &&
        j.state != JobState::kPreempting) {
      attained -= std::max<Duration>(0, j.finished_at - j.started_at);
    }
    emit(JobSubmitted{j.id, j.spec(), j.submitted_at, j.user, j.restarts, j.resizes, j.rank_restarts,
                               j.gang_attempt, j.rank_attempt, j.request_id, j.array, j.array_count, attained,
                               j.failed_restarts, j.array_first_index, j.array_max_running, j.sweep});
    if (!j.placement.empty()) emit(JobBound{j.id, j.placement, j.started_at, /*ended=*/!Live(j.state)});
    if (j.last_checkpoint_at != 0) emit(JobCheckpointed{j.id, j.last_checkpoint_at, j.last_checkpoint_path});
    if (j.state == JobState::kPreempting) {
      emit(JobPreempting{j.id, j.preempting_since, j.preempted_for, j.last_requeue_reason, j.restarting,
                         j.restart_failed});
    }
    if (j.state == JobState::kSucceeded || j.state == JobState::kFailed) {
      emit(JobFinished{j.id, j.state == JobState::kSucceeded ? JobOutcome::kSucceeded : JobOutcome::kFailed,
                                j.finished_at, j.end_reason});
    } else if (j.state == JobState::kCancelled) {
      emit(JobCancelled{j.id, j.finished_at, j.end_reason});
    }
    if (j.held && j.state == JobState::kPending) emit(JobHoldChanged{j.id, true, j.submitted_at, j.held_by, j.held_by_admin});
    if (j.spec_attempt >= 0 && (j.state == JobState::kPending || j.state == JobState::kRunning ||
                                j.state == JobState::kPreempting)) {
      // (Its spec is the new one already; this keeps which replicas run the old.)
      emit(ServiceUpdated{j.id, j.submitted_at, j.spec(), "", j.spec_attempt});
    }
    if (j.desired_replicas > 0 && (j.state == JobState::kPending || j.state == JobState::kRunning ||
                                   j.state == JobState::kPreempting)) {
      emit(ServiceScaled{j.id, j.scaled_at, j.desired_replicas, j.last_scale_reason});
    }
    // Last, so that nothing replayed above overwrites it.
    if (!j.preempted_at.empty() || !j.last_requeue_reason.empty() || !j.last_placement.empty() ||
        !j.nominated.empty() || j.resized_at != 0 || !j.attempts.empty() || j.attained != 0 || j.scaled_down_at != 0) {
      // (attained too: replaying an ended job's last attempt above added it again.)
      emit(JobHistory{j.id, j.preempted_at, j.preempted_by, j.last_requeue_reason, j.last_placement,
                               j.nominated, j.nominated_at, j.resized_at, j.last_resize_reason, j.attempts, j.attained,
                               j.scaled_down_at});
    }
  };
  // Ended jobs first. Their binds (JobBound::ended) take nothing and are
  // not checked against the nodes as they are now: a node's GPUs or MIG
  // mode may have changed since (before, a GPU switched to MIG mode, or one
  // gone, after a job on it ended made the snapshot one no server could load).
  if (live_only) {
    // Of the ended jobs, only the last element of each array with a live
    // element: the engine starts no element of an array whose last is not
    // there (Session::ArrayWaits: not all journaled yet).
    std::set<uint64_t> lasts;
    for (const auto& [id, job] : snap.live_jobs()) {
      if (job->array_count > 1 && job->array.value() != 0) {
        lasts.insert(job->array.value() + static_cast<uint64_t>(job->array_count) - 1);
      }
    }
    for (uint64_t last : lasts) {
      const JobRecord* job = snap.FindJob(JobId(last));
      if (job == nullptr || Live(job->state)) continue;
      emit_job(*job);
      if (!status.ok()) return status;
    }
  }
  for (const auto& [id, job] : snap.jobs()) {
    if (live_only) break;
    if (!Live(job->state)) {
      emit_job(*job);
      if (!status.ok()) return status;
    }
  }
  for (const NodeState& n : snap.nodes()) {
    for (int32_t g = 0; g < static_cast<int32_t>(n.mig_layout.size()); ++g) {
      if (((n.mig_mask >> g) & 1) == 0) continue;
      emit(GpuReconfigured{n.spec.name, g, FormatMigLayout(*n.mig_geometry, n.mig_layout[g])});
    }
  }
  // Live jobs. A run of pending jobs that have never run, with consecutive
  // ids and the same spec, owner and submission time (a job array's) is one
  // JobsSubmitted: read back with one spec decoded, not one per job.
  std::optional<JobsSubmitted> run;
  auto flush = [&] {
    if (!run) return;
    if (run->count == 1) {
      emit(JobSubmitted{.id = run->first, .spec = std::move(run->spec), .at = run->at, .user = run->user,
                                 .request_id = run->request_id, .array = run->array, .array_count = run->array_count,
                                 .array_first_index = run->array_first_index,
                                 .array_max_running = run->array_max_running, .sweep = run->sweep});
    }
    else emit(std::move(*run));
    run.reset();
  };
  std::shared_ptr<const JobSpec> run_spec;  // the spec the run's first job holds
  auto plain = [](const JobRecord& j) {
    return j.state == JobState::kPending && !j.held && j.restarts == 0 && j.attained == 0 && j.attempts.empty() && j.resizes == 0 && j.rank_restarts == 0 &&
           j.gang_attempt == 0 && j.rank_attempt.empty() && j.placement.empty() && j.last_checkpoint_at == 0 &&
           j.preempted_at.empty() && j.last_requeue_reason.empty() && j.last_placement.empty() && j.nominated.empty() &&
           j.resized_at == 0 && j.spec_attempt < 0 && j.desired_replicas == 0 && j.scaled_down_at == 0;
  };
  for (const auto& [id, job] : snap.live_jobs()) {
    if (plain(*job)) {
      if (run && run->count < kMaxJobsPerRun && run->first.value() + static_cast<uint64_t>(run->count) == id.value() &&
          run->at == job->submitted_at && run->user == job->user && run->request_id == job->request_id &&
          run->array == job->array && run->array_count == job->array_count &&
          run->array_first_index == job->array_first_index && run->array_max_running == job->array_max_running &&
          run->sweep == job->sweep &&
          (job->shared_spec == run_spec || run->spec == job->spec())) {  // an array's elements share theirs
        ++run->count;
        continue;
      }
      flush();
      run = JobsSubmitted{id,           1,           job->spec(),      job->submitted_at,        job->user,
                          job->request_id, job->array, job->array_count, job->array_first_index, job->array_max_running,
                          job->sweep};
      run_spec = job->shared_spec;
      continue;
    }
    flush();
    emit_job(*job);
    if (!status.ok()) return status;
  }
  flush();
  for (const NodeState& n : snap.nodes()) {
    if (n.drained) emit(NodeDrainChanged{n.spec.name, true, n.drain_reason, n.drained_by_agent});
    if (n.lost) emit(NodeLostChanged{n.spec.name, true});
    if (!n.agent.empty()) emit(NodeAgentChanged{n.spec.name, n.agent, n.agent_address});
    for (int32_t g = 0; g < n.spec.gpus; ++g) {
      if (!((n.healthy_mask >> g) & 1)) emit(GpuHealthChanged{n.spec.name, g, false});
    }
  }
  emit(RunHistoryState{snap.history()});
  if (snap.issued_below() > 0 || !snap.forgotten_usage().empty()) {
    emit(JobsForgotten{{}, 0, snap.issued_below(), snap.forgotten_usage()});  // (what they leave, not the jobs)
  }
  return status;
}

std::vector<Event> CompactState(const Snapshot& snap, bool live_only) {
  std::vector<Event> out;
  CompactState(
      snap,
      [&](const Event& e) {
        out.push_back(e);
        return Status::Ok();
      },
      live_only)
      .IgnoreError();  // (the sink never fails)
  return out;
}

}  // namespace rota
