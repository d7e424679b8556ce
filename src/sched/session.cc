#include "sched/session.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <iterator>
#include <limits>
#include <map>
#include <tuple>

namespace rota::sched {

Session::Session(const Profile* profile, const EngineOptions* options, QueueBook* book)
    : profile_(profile), options_(options), book_(book), txn_(&ws_), ctx_(profile, &ws_, &txn_) {
  for (const JobOrderPlugin* o : profile_->job_orders()) {
    if (o->ranks()) {
      ranker_ = o;
      rank_state_ = o->NewRankState();
    }
  }
  size_t keys = 0;
  keyed_ = true;
  for (const JobOrderPlugin* o : profile_->job_orders()) {
    keyed_ = keyed_ && (o == ranker_ || o->keyed());
    ++keys;
  }
  keyed_ = keyed_ && keys <= kOrderKeys;
  // OrderSpares compares the keys of the orders up to the ranker: it needs
  // those before it keyed.
  const auto& orders = profile_->job_orders();
  for (size_t o = 0; o < orders.size() && ranker_ != nullptr; ++o) {
    if (orders[o] == ranker_) {
      ranker_at_ = o;
      spares_ = o < kOrderKeys;
      break;
    }
    if (!orders[o]->keyed()) break;
  }
}

int64_t Session::RankKey(double d) {
  if (std::isnan(d)) return std::numeric_limits<int64_t>::max();
  if (d == 0) d = 0;
  // A double's bits are sign and magnitude: a negative one's are flipped.
  const int64_t b = std::bit_cast<int64_t>(d);
  return b < 0 ? b ^ std::numeric_limits<int64_t>::max() : b;
}

Session::Ordered Session::MakeOrdered(const JobRecord& job) const {
  Ordered o{job.id, &job};
  if (keyed_) {
    size_t k = 0;
    for (const JobOrderPlugin* p : profile_->job_orders()) o.keys[k++] = OrderKey(p, job);
  }
  return o;
}

int64_t Session::OrderKey(const JobOrderPlugin* order, const JobRecord& job) const {
  return order == ranker_ ? RankKey(RankOf(job)) : order->Key(job, now_);
}

void Session::RankJobs(const Snapshot& snap) {
  if (ranker_ == nullptr) return;
  rank_jobs_.clear();
  for (const ChunkJobs& c : chunks_) rank_jobs_.insert(rank_jobs_.end(), c.pending.begin(), c.pending.end());
  rank_jobs_.insert(rank_jobs_.end(), running_.begin(), running_.end());
  ranker_->Rank(snap, now_, rank_jobs_, rank_state_.get(), &rank_values_);
  uint64_t lo = UINT64_MAX, hi = 0;
  for (const JobRecord* j : rank_jobs_) {
    lo = std::min(lo, j->id.value());
    hi = std::max(hi, j->id.value());
  }
  rank_base_ = lo;
  // Only the ranked jobs' entries are written (the range between may be
  // wide: one old job still running); RankOf reads only ranked jobs.
  if (!rank_jobs_.empty() && ranks_.size() < hi - lo + 1) ranks_.resize(hi - lo + 1);
  if (checkpoint_marks_.size() < ranks_.size()) checkpoint_marks_.resize(ranks_.size(), 0);
  ++cycle_stamp_;  // (a mark of an earlier cycle, whatever job its slot was then, is not this one)
  for (size_t i = 0; i < rank_jobs_.size(); ++i) ranks_[rank_jobs_[i]->id.value() - lo] = rank_values_[i];
}

double Session::RankOf(const JobRecord& job) const {
  // REQUIRES: `job` was ranked this cycle (pending and not held, or running).
  const uint64_t k = job.id.value() - rank_base_;  // (wraps below the base)
  return k < ranks_.size() ? ranks_[k] : 0;
}

void Session::BeginProbe(const Snapshot& snap) {
  snap_ = &snap;
  request_spec_ = nullptr;
  find_memo_ = {};
  ws_.Reset(snap);
  released_by_leaf_.clear();
  ctx_.NewCycle();
}

void Session::Begin(const Snapshot& snap, const TimePoint* now, CycleResult* out) {
  BeginProbe(snap);
  has_now_ = now != nullptr;
  now_ = has_now_ ? *now : 0;
  out_ = out;
  out->Clear();
  out->revision = snap.revision();
  failures_.clear();
  failure_index_.clear();
  find_memo_ = {};
  if (shape_classes_.size() > kMaxShapeClasses) {  // (specs seen long ago: start again)
    shape_classes_.clear();
    shapes_.clear();
  }
  endings_built_ = false;
  preemption_searches_ = 0;
  wake_ = std::numeric_limits<TimePoint>::max();
  victim_set_.clear();
  held_.clear();
  promised_.clear();
  first_reservation_ = 0;
  resized_.clear();
  mig_demand_built_ = false;
  typical_built_ = false;
  making_room_for_.clear();
  may_yield_.clear();
  quota_held_.clear();
  ReadLiveJobs(snap);
  running_.clear();
  elastic_running_.clear();
  array_running_.clear();
  for (const ChunkJobs& c : chunks_) {
    running_.insert(running_.end(), c.running.begin(), c.running.end());
    elastic_running_.insert(elastic_running_.end(), c.elastic_running.begin(), c.elastic_running.end());
    for (const auto& [preemptor, victim] : c.making_room) making_room_for_.emplace(preemptor, victim);
    for (JobId array : c.limited_arrays) ++array_running_[array];
  }
  // Pending elements of limited arrays that are about to start count toward
  // their array's limit: room is being made for them, or GPUs nominated.
  array_starting_.clear();
  array_reason_.clear();
  array_unwhole_.clear();
  auto starting = [&](const JobRecord* j) {
    if (j != nullptr && j->state == JobState::kPending && j->array_max_running > 0 && array_starting_.insert(j->id).second) {
      ++array_running_[j->array];
    }
  };
  for (const auto& [preemptor, victim] : making_room_for_) starting(snap.FindJob(preemptor));
  for (const ChunkJobs& c : chunks_) {
    for (const JobRecord* j : c.nominated) starting(j);
  }
  RankJobs(snap);
  OrderPending();
  if (fair()) book_->Reset(snap);

  // Nominations: GPUs freed for a preemptor stay out of the pool for jobs of
  // lower priority while gangs are still stopping for it (and a little after).
  nominations_.clear();
  if (has_now_) {
    const Topology& t = snap.topology();
    // The pending jobs with a nomination, in job order (a few of order_).
    nominated_.clear();
    for (const ChunkJobs& c : chunks_) {
      for (const JobRecord* j : c.nominated) nominated_.push_back(MakeOrdered(*j));
    }
    std::sort(nominated_.begin(), nominated_.end(), [this](const Ordered& a, const Ordered& b) { return Before(a, b); });
    for (const Ordered& o : nominated_) {
      const JobRecord* j = o.job;
      if (making_room_for_.count(j->id) == 0) {
        if (now_ - j->nominated_at >= options_->nomination_ttl) continue;
        WakeAt(j->nominated_at + options_->nomination_ttl);  // then its GPUs go back to everyone
      }
      Nomination n{j, {}, false};
      for (const ReplicaPlacement& p : j->nominated) {
        const uint32_t pos = t.position_of(p.node);
        const uint64_t mask = p.gpu_mask & ws_.free_mask(pos);
        if (mask == 0) continue;
        ws_.Take(pos, mask, 0, 0);
        n.held.push_back({pos, mask});
      }
      if (!n.held.empty()) nominations_.push_back(std::move(n));
    }
  }
}

void Session::ReadLiveJobs(const Snapshot& snap) {
  const JobTable& live = snap.live_jobs();
  const size_t n = live.chunk_count();
  if (!read_) chunks_.clear();  // nothing kept yet
  changed_.assign(std::max(n, chunks_.size()), 0);
  for (size_t c = n; c < chunks_.size(); ++c) changed_[c] = 1;  // (a smaller table: another state's)
  chunks_.resize(n);
  shapes_.resize(n);
  for (size_t c = 0; c < n; ++c) {
    ChunkJobs& cj = chunks_[c];
    const uint64_t version = live.chunk_version(c);
    if (read_ && version == cj.version) continue;
    changed_[c] = 1;
    shapes_[c].clear();
    cj.version = version;
    cj.pending.clear();
    cj.running.clear();
    cj.elastic_running.clear();
    cj.nominated.clear();
    cj.making_room.clear();
    cj.limited_arrays.clear();
    live.ForEachInChunk(c, [&cj](JobId id, const std::shared_ptr<const JobRecord>& job) {
      if (job->state == JobState::kPending && !job->held) {  // held: not scheduled
        cj.pending.push_back(job.get());
        if (!job->nominated.empty()) cj.nominated.push_back(job.get());
      }
      // A running service's scale-up preempted for GPUs (grow-elastic places it).
      if (job->state == JobState::kRunning && job->spec().is_service() && !job->nominated.empty()) {
        cj.nominated.push_back(job.get());
      }
      if (job->state == JobState::kRunning) cj.running.push_back(job.get());
      if (job->state == JobState::kRunning && job->spec().elastic()) cj.elastic_running.push_back(job.get());
      // (A gang stopping to restart makes room for no one.)
      if (job->state == JobState::kPreempting && !job->restarting) cj.making_room.emplace_back(job->preempted_for, id);
      if (job->array_max_running > 0 && (job->state == JobState::kRunning || job->state == JobState::kPreempting)) {
        cj.limited_arrays.push_back(job->array);
      }
    });
  }
  read_ = true;
}

bool Session::Before(const Ordered& a, const Ordered& b) const {
  if (keyed_) return KeysBefore(a, b);
  for (const JobOrderPlugin* o : profile_->job_orders()) {
    if (o == ranker_) {
      const double ra = RankOf(*a.job), rb = RankOf(*b.job);
      if (ra != rb) return ra < rb;
      continue;
    }
    if (int c = o->Compare(*a.job, *b.job, now_); c != 0) return c < 0;
  }
  return a.id < b.id;
}

void Session::OrderPending() {
  if (keyed_) {
    OrderPendingBy([](const Ordered& a, const Ordered& b) { return KeysBefore(a, b); });
  } else {
    OrderPendingBy([this](const Ordered& a, const Ordered& b) { return Before(a, b); });
  }
}

template <typename Less>
void Session::OrderPendingBy(Less before) {
  bool stable = true;
  for (const JobOrderPlugin* o : profile_->job_orders()) stable = stable && o->stable();
  // The last order without the changed chunks' jobs, and those chunks'
  // pending jobs sorted and merged in. With stable job orders the kept jobs'
  // keys are as they were (done in place, below); otherwise (a ranking
  // order, keys that move with time) they are read again (kept_), and
  // the kept jobs are sorted again only if they are no longer in order:
  // between rebuilds of its estimates, a ranking order leaves most waiting
  // jobs where they were, and a check costs n comparisons, a sort n log n.
  // (Ids break ties, so the order is total: any of these gives the same.)
  fresh_.clear();
  for (size_t c = 0; c < chunks_.size(); ++c) {
    if (!changed_[c]) continue;
    for (const JobRecord* j : chunks_[c].pending) fresh_.push_back(MakeOrdered(*j));
  }
  // (Collected in id order, which is often the order already: one
  // priority, first come first served.)
  if (!std::is_sorted(fresh_.begin(), fresh_.end(), before)) std::sort(fresh_.begin(), fresh_.end(), before);
  const bool keys_kept = stable && sorted_kept_;
  if (keys_kept) {
    // In place: the changed chunks' jobs leave (a pass that moves only what
    // follows the first of them), theirs merge in from the back (moving only
    // what follows the first insertion), and order_ is rewritten from the
    // first position that changed. A new job in a long first-come queue
    // lands at its end: a cycle then copies almost nothing.
    const size_t n = sorted_.size();
    size_t first = n, w = 0;
    for (size_t r = 0; r < n; ++r) {
      if (changed_[sorted_[r].id.value() / JobTable::kChunk]) {
        if (first == n) first = r;
        continue;
      }
      if (w != r) sorted_[w] = sorted_[r];
      ++w;
    }
    sorted_.resize(w + fresh_.size());
    size_t i = w, j = fresh_.size(), out = sorted_.size();
    while (j > 0) {
      if (i > 0 && before(fresh_[j - 1], sorted_[i - 1])) sorted_[--out] = sorted_[--i];
      else sorted_[--out] = fresh_[--j];
    }
    first = std::min(first, i);  // below it, nothing moved
    order_.resize(sorted_.size());
    for (size_t p = first; p < sorted_.size(); ++p) order_[p] = sorted_[p].job;
    return;
  }
  kept_.clear();
  for (const Ordered& o : sorted_) {
    if (changed_[o.id.value() / JobTable::kChunk]) continue;
    kept_.push_back(MakeOrdered(*o.job));
  }
  if (!std::is_sorted(kept_.begin(), kept_.end(), before)) std::sort(kept_.begin(), kept_.end(), before);
  sorted_.clear();
  if (fresh_.size() * 16 < kept_.size()) {
    auto from = kept_.begin();
    for (const Ordered& f : fresh_) {
      auto at = std::upper_bound(from, kept_.end(), f, before);
      sorted_.insert(sorted_.end(), from, at);
      sorted_.push_back(f);
      from = at;
    }
    sorted_.insert(sorted_.end(), from, kept_.end());
  } else {
    std::merge(kept_.begin(), kept_.end(), fresh_.begin(), fresh_.end(), std::back_inserter(sorted_), before);
  }
  sorted_kept_ = stable;
  order_.clear();
  order_.reserve(sorted_.size());
  for (const Ordered& o : sorted_) order_.push_back(o.job);
}

bool Session::ArrayWaits(const JobRecord& job, PendingReason* why) const {
  if (job.array_count > 1 && job.array.value() != 0) {
    auto [it, added] = array_unwhole_.try_emplace(job.array);
    if (added) {
      const uint64_t last_id = job.array.value() + static_cast<uint64_t>(job.array_count) - 1;
      const JobRecord* last = snap_->FindJob(JobId(last_id));
      if (last == nullptr || last->array != job.array) {
        it->second = PendingReason{ReasonCode::kArrayLimit,
                                   "its array " + std::to_string(job.array.value()) + " of " +
                                       std::to_string(job.array_count) +
                                       " elements is still being submitted: none starts before all are accepted"};
      }
    }
    if (it->second) {
      *why = *it->second;
      return true;
    }
  }
  if (job.array_max_running <= 0) return false;
  auto it = array_running_.find(job.array);
  // (Itself not counted: an element about to start is not in its own way.)
  const int32_t running = (it == array_running_.end() ? 0 : it->second) - (array_starting_.count(job.id) ? 1 : 0);
  if (running < job.array_max_running) return false;
  auto& [named, reason] = array_reason_[job.array];
  if (reason.message.empty() || named != running) {
    named = running;
    reason = {ReasonCode::kArrayLimit, "its array " + std::to_string(job.array.value()) + " runs " +
                                           std::to_string(running) + " of its elements, as many as it may at once (%" +
                                           std::to_string(job.array_max_running) + "); it starts when one ends"};
  }
  *why = reason;  // (a shared text: no allocation per waiting element)
  return true;
}

void Session::CountArrayStart(const JobRecord& job) {
  if (job.array_max_running > 0 && array_starting_.insert(job.id).second) ++array_running_[job.array];  // once
}

// What evicting running job `r` for `job` at `now` would cost: its GPUs
// (at least one, as the job orders count a CPU-only job) x the time since
// it last saved (its start, or its last checkpoint of this run; nothing if
// it saves on the eviction signal, within its checkpoint grace), and x the
// time since it started; whether it holds more GPUs than `job` asks for.
static JobOrderPlugin::VictimWork WorkOf(const JobRecord& r, const JobRecord& job, TimePoint now) {
  const int64_t held = r.spec().GpuEquivalent();
  const double gpus = static_cast<double>(std::max<int64_t>(1, held));
  const auto since = [&](TimePoint t) { return gpus * static_cast<double>(std::max<Duration>(0, now - t)) / kMicrosPerSecond; };
  const double run = since(r.started_at);
  return {r.spec().checkpoint.grace > 0 ? 0.0 : since(r.SavedAt()), run, held > job.spec().GpuEquivalent()};
}

const JobOrderPlugin* Session::DecidingOrder(const JobRecord& job, const JobRecord& r, bool* first,
                                             JobOrderPlugin::VictimWork* weighed) const {
  for (const JobOrderPlugin* o : profile_->job_orders()) {
    if (o == ranker_) {
      const double a = RankOf(job), b = RankOf(r);
      if (a == b) continue;
      *first = false;
      if (a < b) {
        const JobOrderPlugin::VictimWork work = WorkOf(r, job, now_);
        *first = o->RankEvicts(a, b, work);
        if (weighed != nullptr) *weighed = work;
      }
      return o;
    }
    if (int c = o->Compare(job, r, now_); c != 0) {
      *first = c < 0;
      return o;
    }
  }
  return nullptr;
}

Session::SpareKeys Session::SpareKeysOf(const JobRecord& job, bool add_queue) {
  SpareKeys k;
  const std::string_view queue = job.spec().queue;
  if (last_spare_index_ >= 0 && queue == last_spare_queue_) {
    k.queue = last_spare_index_;
  } else {
    if (add_queue) {
      k.queue = spare_queues_.try_emplace(queue, static_cast<int32_t>(spare_queues_.size())).first->second;
    } else if (auto it = spare_queues_.find(queue); it != spare_queues_.end()) {
      k.queue = it->second;
    }
    if (k.queue >= 0) {
      last_spare_queue_ = queue;
      last_spare_index_ = k.queue;
    }
  }
  k.priority = job.spec().priority;
  const auto& orders = profile_->job_orders();
  for (size_t o = 0; o <= ranker_at_; ++o) k.keys[o] = OrderKey(orders[o], job);
  return k;
}

const std::vector<uint8_t>& Session::OrderSpares(const JobRecord& job) {
  spared_.assign(running_.size(), 0);
  if (!spares_) return spared_;
  if (spare_stamp_ != cycle_stamp_) {  // (a cycle's running gangs and ranks stay as they are)
    spare_stamp_ = cycle_stamp_;
    spare_queues_.clear();
    last_spare_index_ = -1;
    spare_keys_.clear();
    for (const JobRecord* r : running_) spare_keys_.push_back(SpareKeysOf(*r, true));
  }
  // (A job of a queue no gang runs in: -1, which spares none.)
  const SpareKeys me = SpareKeysOf(job, false);
  for (size_t i = 0; i < spare_keys_.size(); ++i) {
    const SpareKeys& r = spare_keys_[i];
    if (r.queue != me.queue || r.priority != me.priority) continue;
    // Tied up to the ranker, which puts the job after the gang: DecidingOrder
    // returns the ranker with `first` false, unweighed. (Equal rank keys tie
    // on to later orders; a NaN rank's key is the largest: the job's spares,
    // as DecidingOrder's comparisons do; the gang's, none.)
    bool tied = true;
    for (size_t o = 0; o < ranker_at_ && tied; ++o) tied = r.keys[o] == me.keys[o];
    spared_[i] = tied && me.keys[ranker_at_] > r.keys[ranker_at_];
  }
  return spared_;
}

bool Session::OrderEvicts(const JobRecord& job, const JobRecord& r) {
  bool first = false;
  JobOrderPlugin::VictimWork work;
  work.unsaved = -1;  // (not weighed)
  const JobOrderPlugin* o = DecidingOrder(job, r, &first, &work);
  if (o == nullptr || !o->preemptive()) return false;
  if (first) return true;
  // Spared only for the work it would lose? Then its next checkpoint may
  // change the answer (once a cycle, not once a search).
  const uint64_t k = r.id.value() - rank_base_;  // (r is ranked: running)
  if (work.unsaved > 0 && k < checkpoint_marks_.size() && checkpoint_marks_[k] != cycle_stamp_) {
    work.unsaved = 0;
    if (o->RankEvicts(RankOf(job), RankOf(r), work)) {
      checkpoint_marks_[k] = cycle_stamp_;
      out_->waits_on_checkpoint.push_back(r.id);
    }
  }
  return false;
}

TimePoint Session::UnchangedUntil() const {
  if (!has_now_ || (fair() && options_->fair_share_half_life > 0)) return 0;  // decayed usage moves with time
  TimePoint until = wake_;
  for (const JobOrderPlugin* o : profile_->job_orders()) {
    if (o == ranker_) {
      const TimePoint ranks = rank_state_ != nullptr ? rank_state_->changes_at : 0;
      if (ranks <= now_) return 0;
      until = std::min(until, ranks);
    } else if (!o->timeless()) {
      return 0;
    }
  }
  return until > now_ ? until : 0;
}

std::string Session::JobName(const JobRecord& job) const {
  return options_->name_jobs ? job.spec().name : std::to_string(job.id.value());
}

std::string Session::JobName(JobId job) const {
  const JobRecord* j = options_->name_jobs ? snap_->FindJob(job) : nullptr;
  return j != nullptr ? j->spec().name : std::to_string(job.value());
}

std::string Session::MakingRoomFor(JobId job) const {
  std::string ids;
  for (auto [it, end] = making_room_for_.equal_range(job); it != end; ++it) {
    ids += (ids.empty() ? "" : ", ") + JobName(it->second);
  }
  return ids;
}

void Session::CommitPlacement() {
  const Topology& topo = snap_->topology();
  out_->placed.push_back({request_.job->id, static_cast<uint32_t>(out_->replicas.size()),
                          static_cast<uint32_t>(txn_.steps().size())});
  for (const Txn::Step& s : txn_.steps()) out_->replicas.push_back({s.task, s.replica, topo.node_at(s.pos), s.mask});
}

int16_t Session::RequestModel() const {
  int16_t model = snap_->gpu_models().size() == 1 ? 0 : -1;
  for (const TaskRequest& t : request_.tasks) {
    if (t.gpus > 0 && t.model >= 0) model = t.model;
  }
  if (model < 0 && request_.quota_barred_models != 0) {
    // Of no named model, but its queue's limits admit it on one model alone.
    const size_t models = std::min<size_t>(snap_->gpu_models().size(), 64);
    const uint64_t all = models == 64 ? ~uint64_t{0} : (uint64_t{1} << models) - 1;
    const uint64_t open = all & ~request_.quota_barred_models;
    if (std::popcount(open) == 1) model = static_cast<int16_t>(std::countr_zero(open));
  }
  return model;
}

void Session::Charge(int32_t leaf, const QueueBook::ModelGpus& add) {
  book_->Charge(leaf, add);
  ChargeResources(leaf);
}

void Session::Reserve(JobId job, TimePoint start, const std::vector<Txn::Step>& steps) {
  const Topology& topo = snap_->topology();
  Reservation r{job, start, {}};
  for (const Txn::Step& st : steps) {
    r.replicas.push_back({st.task, st.replica, topo.node_at(st.pos), st.mask});
    promised_[st.pos] |= st.mask;
    const uint64_t free_now = st.mask & ws_.free_mask(st.pos);
    if (free_now != 0) {
      ws_.Take(st.pos, free_now, 0, 0);
      held_.push_back({st.pos, free_now});
    }
  }
  first_reservation_ = out_->reservations.empty() ? start : std::min(first_reservation_, start);
  out_->reservations.push_back(std::move(r));
}

const std::vector<ReplicaPlacement>* Session::resized(JobId job) const {
  auto it = resized_.find(job);
  return it == resized_.end() ? nullptr : &it->second;
}

void Session::UndoResizes(size_t mark) {
  CycleResult* out = out_;
  while (out->resizes.size() > mark) {
    const Resize& r = out->resizes.back();
    const JobRecord* job = snap_->FindJob(r.job);
    // Back to what it held before this resize: the previous resize of it this cycle, or the snapshot's.
    std::vector<ReplicaPlacement> before = job->placement;
    for (size_t i = mark; i-- > 0;) {
      if (out->resizes[i].job == r.job) {
        before = out->resizes[i].replicas;
        break;
      }
    }
    std::vector<ReplicaPlacement> removed;
    for (const ReplicaPlacement& p : before) {
      if (std::find(r.replicas.begin(), r.replicas.end(), p) == r.replicas.end()) removed.push_back(p);
    }
    SetReplicasReleased(job->spec(), removed.data(), removed.size(), false);
    if (before == job->placement) resized_.erase(r.job);
    else resized_[r.job] = before;
    out->resizes.pop_back();
  }
}

const Session::Failure* Session::FindFailure(const JobRecord& job, bool ends_first) const {
  if (failures_.empty()) return nullptr;
  // A job's shape is its spec's (a service's also its desired count).
  const JobSpec* spec = job.spec().is_service() ? nullptr : job.shared_spec.get();
  const FindMemo& m = find_memo_;
  if (spec != nullptr && spec == m.spec && ends_first == m.ends_first && held_.size() == m.held &&
      failures_.size() == m.failures) {
    return m.found;
  }
  const Failure* found = nullptr;
  for (auto [it, end] = failure_index_.equal_range(ShapeOf(job)); it != end; ++it) {
    const Failure& f = failures_[it->second];
    if (f.ends_first == ends_first && f.held == held_.size()) {  // (of its class: the same shape)
      found = &f;
      break;
    }
  }
  find_memo_ = {spec, ends_first, held_.size(), failures_.size(), found};
  return found;
}

const std::vector<Session::Ending>& Session::Endings() {
  if (!endings_built_) {
    endings_built_ = true;
    endings_.clear();
    for (const JobRecord* job : running_) {  // the running jobs, not every live one
      if (job->spec().time_limit <= 0) continue;
      endings_.push_back({std::max(now_, job->started_at + job->spec().time_limit), job});
    }
    std::sort(endings_.begin(), endings_.end(), [](const Ending& a, const Ending& b) {
      return std::tie(a.end, a.job->id) < std::tie(b.end, b.job->id);
    });
  }
  return endings_;
}

const std::vector<const std::string*>& Session::MigDemand() {
  if (!mig_demand_built_) {
    mig_demand_built_ = true;
    mig_demand_.clear();
    for (const JobRecord* j : order_) {
      for (const TaskGroupSpec& t : j->spec().tasks) {
        for (int32_t r = 0; r < t.replicas && !t.gpu_share.mig_profile.empty() && mig_demand_.size() < 64; ++r) {
          mig_demand_.push_back(&t.gpu_share.mig_profile);
        }
      }
      if (mig_demand_.size() >= 64) break;
    }
  }
  return mig_demand_;
}

bool Session::BuildRequest(const JobRecord& job, PendingReason* why) {
  const Snapshot& snap = *snap_;
  const JobSpec& spec = job.spec();
  request_.job = &job;
  if (job.shared_spec.get() == request_spec_) return true;  // the same spec asks the same
  request_spec_ = nullptr;
  const Topology& topo = snap.topology();
  request_.selector = spec.node_selector.empty() ? &empty_labels_ : &spec.node_selector;
  request_.tasks.clear();
  request_.total_gpus = 0;
  request_.total_replicas = 0;
  request_.fractional = false;
  bool whole = false;
  for (size_t i = 0; i < spec.tasks.size(); ++i) {
    const TaskGroupSpec& t = spec.tasks[i];
    request_.fractional = request_.fractional || t.gpu_share.shared();
    if (t.gpu_share.shared() && !spec.topology.level.empty() && spec.topology.mode == TopologyMode::kRequired) {
      *why = {ReasonCode::kUnsupported,
              "topology: a required level for a job with GPU fractions or MIG slices is not scheduled yet; make it "
              "preferred or drop it"};
      return false;
    }
    whole = whole || t.gpus > 0;
    if (request_.fractional && whole) {
      *why = {ReasonCode::kUnsupported, "tasks[" + std::to_string(i) +
                                            "]: a job with GPU fractions or MIG slices may not also ask for whole GPUs "
                                            "(not scheduled yet)"};
      return false;
    }
    TaskRequest r;
    r.task = static_cast<uint16_t>(i);
    r.replicas = t.replicas;
    if (spec.is_service() && spec.elastic()) {
      // A service asks for what its autoscaler wants (allocate starts it
      // smaller, down to its min, rather than not at all).
      r.replicas = std::clamp(job.DesiredReplicas(), std::max(1, spec.service.min_replicas), t.replicas);
    }
    r.gpus = t.gpus;
    r.cpu = t.cpu;
    r.memory = t.memory;
    r.gpu_memory = t.gpu_memory;
    r.milli = t.gpu_share.fraction_milli;
    r.share_memory = t.gpu_share.memory;
    r.mig = t.gpu_share.mig_profile.empty() ? nullptr : &t.gpu_share.mig_profile;
    if (!t.gpu_model.empty()) {
      r.model = snap.ModelIndex(t.gpu_model);
      r.model_missing = r.model < 0;
    }
    request_.tasks.push_back(r);
    request_.total_gpus += static_cast<int64_t>(r.replicas) * t.gpus;
    request_.total_replicas += r.replicas;
  }
  BarModelsOverQuota(job);
  const int32_t root = static_cast<int32_t>(topo.domain_levels().size());
  if (spec.topology.level.empty()) {
    request_.level = root;
    request_.required = false;
  } else {
    request_.level = topo.DomainLevelIndex(spec.topology.level);
    request_.required = spec.topology.mode == TopologyMode::kRequired;
    if (request_.level < -1) {
      std::string levels = "node";
      for (const auto& l : topo.domain_levels()) levels += ", " + l;
      *why = {ReasonCode::kInvalid, "topology.level: the cluster has no level '" + spec.topology.level +
                                        "' (levels: " + levels + ", cluster)"};
      return false;
    }
  }
  if (!spec.is_service()) request_spec_ = job.shared_spec.get();  // a service's asks its desired count
  return true;
}

bool Session::PlacesAdmitted(const JobRecord& job) {
  const int32_t leaf = Leaf(job);
  if (leaf < 0 || (RequestModel() >= 0 && !quota_search_)) return TryPlace(false);  // (its model's quota came first: allocate)
  if (!TryPlace(true)) return false;
  // What the placement adds, less what its own queue's released gangs (the
  // victims, the jobs that will have ended) no longer hold.
  QueueBook::ModelGpus add = TxnGpusByModel();
  for (const auto& [key, gpus] : released_by_leaf_) {
    if (key.first != leaf || gpus == 0) continue;
    auto it = std::find_if(add.begin(), add.end(), [&](const auto& e) { return e.first == key.second; });
    if (it != add.end()) it->second -= gpus;
    else add.push_back({key.second, -gpus});
  }
  const bool admitted = QuotaAdmits(job, leaf, add);
  txn_.Rollback();
  return admitted;
}

int64_t Session::LeastGpus(const JobRecord& job) const {
  const JobSpec& spec = job.spec();
  int64_t whole = 0, milli = 0;
  for (const TaskRequest& t : request_.tasks) {
    const int64_t replicas = spec.elastic() ? std::min(t.replicas, std::max(1, spec.elastic_min_replicas)) : t.replicas;
    whole += replicas * t.gpus;
    milli += replicas * spec.tasks[t.task].gpu_share.milli();
  }
  return whole + (milli + 999) / 1000;
}

bool Session::SomeSplitAdmits(const JobRecord& job, int32_t leaf, bool may_borrow) const {
  const int64_t need = LeastGpus(job);
  std::string ignored;
  // Each model's most (monotone in the count: binary search), in whole
  // replicas of its smallest task group (a share: a GPU), summed.
  int64_t unit = 0;
  for (const TaskRequest& t : request_.tasks) {
    if (t.gpus > 0) unit = unit == 0 ? t.gpus : std::min<int64_t>(unit, t.gpus);
  }
  if (unit == 0) unit = 1;
  int64_t most = 0;
  for (size_t m = 0; m < snap_->gpu_models().size() && m < 64 && most < need; ++m) {
    if (request_.quota_barred_models >> m & 1) continue;
    int64_t lo = 0, hi = need;
    while (lo < hi) {
      const int64_t mid = lo + (hi - lo + 1) / 2;
      if (Admitted(leaf, {{static_cast<int16_t>(m), mid}}, may_borrow, /*empty=*/true, &ignored)) lo = mid;
      else hi = mid - 1;
    }
    most += lo / unit * unit;
  }
  return most >= need;
}

void Session::BarModelsOverQuota(const JobRecord& job) {
  request_.quota_barred_models = 0;
  request_.quota_barred_why.clear();
  const Snapshot& snap = *snap_;
  if (!fair() || snap.gpu_models().size() < 2) return;
  const JobSpec& spec = job.spec();
  // The least a model gets if it gets any of the job: one replica of its
  // smallest task group (a gang may span models); a share, rounded up to a
  // GPU (admission may count a share's memory as more: never less).
  int64_t least = 0;
  for (const TaskRequest& t : request_.tasks) {
    if ((t.gpus > 0 || t.milli > 0 || t.mig != nullptr) && t.model >= 0) return;  // (its model's own admission decides)
    const int64_t one = t.gpus > 0 ? t.gpus : (t.milli > 0 || t.mig != nullptr) ? 1 : 0;
    if (one > 0) least = least == 0 ? one : std::min(least, one);
  }
  if (least <= 0) return;
  const int32_t leaf = Leaf(job);
  if (leaf < 0) return;
  const bool may_borrow = book_->MayBorrow(spec);
  book_->SetModels(snap);
  for (size_t m = 0; m < snap.gpu_models().size() && m < 64; ++m) {
    std::string why;
    if (Admitted(leaf, {{static_cast<int16_t>(m), least}}, may_borrow, /*empty=*/true, &why)) continue;
    request_.quota_barred_models |= uint64_t{1} << m;
    if (request_.quota_barred_why.empty()) request_.quota_barred_why = std::move(why);
  }
}

uint64_t Session::ShapeHash(const JobSpec& spec) const {
  // FNV-1a over the fields SameSpecShape compares.
  uint64_t h = 1469598103934665603ULL;
  auto mix = [&h](std::string_view bytes) {
    for (unsigned char c : bytes) {
      h ^= c;
      h *= 1099511628211ULL;
    }
    h ^= 0xff;
    h *= 1099511628211ULL;
  };
  auto num = [&h](int64_t v) {  // a word at a time (numbers are most of a shape)
    h ^= static_cast<uint64_t>(v) + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2);
    h *= 1099511628211ULL;
  };
  mix(spec.topology.level);
  num(static_cast<int64_t>(spec.topology.mode));
  mix(spec.queue);
  num(spec.priority);
  num(spec.preemptible);
  num(spec.elastic_min_replicas);
  for (const auto& [k, v] : spec.node_selector) {
    mix(k);
    mix(v);
  }
  for (const TaskGroupSpec& t : spec.tasks) {
    num(t.replicas);
    num(t.gpus);
    num(t.cpu);
    num(t.memory);
    num(t.gpu_memory);
    mix(t.gpu_model);
  }
  return h;
}

uint64_t Session::ShapeOf(const JobRecord& job) const {
  // (kOwnClass in the cache: a job with a GPU share, like no other, itself
  // included: a new class at each call.)
  constexpr uint64_t kOwnClass = ~uint64_t{0};
  const uint64_t c = job.id.value() / JobTable::kChunk;
  uint64_t* cached = nullptr;
  if (c < shapes_.size()) {
    std::vector<uint64_t>& chunk = shapes_[c];
    if (chunk.empty()) chunk.assign(JobTable::kChunk, 0);
    cached = &chunk[job.id.value() % JobTable::kChunk];
    if (*cached == kOwnClass) return next_shape_++;
    if (*cached != 0) return *cached;
  }
  const JobSpec& spec = job.spec();
  for (const TaskGroupSpec& t : spec.tasks) {
    if (!t.gpu_share.shared()) continue;
    if (cached != nullptr) *cached = kOwnClass;
    return next_shape_++;
  }
  const int32_t desired = spec.is_service() ? job.DesiredReplicas() : -1;
  const uint64_t h = ShapeHash(spec);
  uint64_t id = 0;
  for (auto [it, end] = shape_classes_.equal_range(h); it != end; ++it) {
    if (it->second.desired == desired && SameSpecShape(*it->second.spec, spec)) {
      id = it->second.id;
      break;
    }
  }
  if (id == 0) {
    id = next_shape_++;
    shape_classes_.emplace(h, ShapeClass{job.shared_spec, desired, id});
  }
  if (cached != nullptr) *cached = id;
  return id;
}

bool Session::SameSpecShape(const JobSpec& x, const JobSpec& y) {
  if (x.tasks.size() != y.tasks.size() || x.node_selector != y.node_selector ||
      x.topology.level != y.topology.level || x.topology.mode != y.topology.mode ||
      // What decides whether it may preempt, and whom:
      x.queue != y.queue || x.priority != y.priority || x.preemptible != y.preemptible ||
      x.elastic_min_replicas != y.elastic_min_replicas || x.is_service() != y.is_service()) {
    return false;
  }
  for (size_t i = 0; i < x.tasks.size(); ++i) {
    const TaskGroupSpec& s = x.tasks[i];
    const TaskGroupSpec& t = y.tasks[i];
    if (s.replicas != t.replicas || s.gpus != t.gpus || s.cpu != t.cpu || s.memory != t.memory ||
        s.gpu_model != t.gpu_model || s.gpu_memory != t.gpu_memory || s.gpu_share.shared() || t.gpu_share.shared()) {
      return false;
    }
  }
  return true;
}

void Session::RecordFailure(const JobRecord* job, const PendingReason& reason, bool unresolvable, bool ends_first) {
  failure_index_.emplace(ShapeOf(*job), failures_.size());
  failures_.push_back({job, reason, unresolvable, ends_first, held_.size()});
}

bool Session::TryPlace(bool keep) {
  txn_.Begin();
  bool ok = profile_->placer().Place(ctx_, request_);
  for (const JobReadyPlugin* r : profile_->job_ready()) {
    ok = ok && r->Ready(request_, static_cast<int64_t>(txn_.steps().size()));
  }
  if (!ok || !keep) txn_.Rollback();
  return ok;
}

void Session::HoldNomination(Nomination& n, bool hold) {
  for (auto& [pos, mask] : n.held) {
    if (hold) {
      mask &= ws_.free_mask(pos);  // what was used meanwhile is gone
      ws_.Take(pos, mask, 0, 0);
    } else {
      ws_.Give(pos, mask, 0, 0);
    }
  }
  n.released = !hold;
}

void Session::ReleaseHeld() {
  for (const auto& [pos, mask] : held_) ws_.Give(pos, mask, 0, 0);
}

void Session::RetakeHeld() {
  for (auto& [pos, mask] : held_) {
    mask &= ws_.free_mask(pos);  // a backfilled job may have taken some: it ends first
    ws_.Take(pos, mask, 0, 0);
  }
}

void Session::SetReleased(const JobRecord& job, bool release) {
  auto it = resized_.find(job.id);
  const std::vector<ReplicaPlacement>& placement = it != resized_.end() ? it->second : job.placement;
  SetReplicasReleased(job.spec(), placement.data(), placement.size(), release);
}

void Session::SetReplicasReleased(const JobSpec& spec, const ReplicaPlacement* first, size_t count, bool release) {
  const Topology& topo = snap_->topology();
  // (With quotas: what its queue would no longer hold, by model, for PlacesAdmitted.)
  const int32_t leaf = fair() && (snap_->gpu_models().size() > 1 || quota_search_) ? book_->LeafIndex(spec.queue) : -1;
  for (const ReplicaPlacement* r = first; r != first + count; ++r) {
    if (r->shares_gpu()) continue;  // a shared or MIG GPU is not freed whole by one sharer ending
    const TaskGroupSpec& t = spec.tasks[r->task];
    const uint32_t pos = topo.position_of(r->node);
    const uint64_t mask = r->gpu_mask & ws_.node(pos).healthy_mask;  // a failed GPU stays out of use
    if (release) ws_.Give(pos, mask, t.cpu, t.memory);
    else ws_.Take(pos, mask, t.cpu, t.memory);
    if (leaf >= 0 && ws_.node(pos).model >= 0) {
      released_by_leaf_[{leaf, ws_.node(pos).model}] += (release ? 1 : -1) * std::popcount(r->gpu_mask);
    }
  }
}

bool Session::HoldsReservedGpus(const JobRecord& job) const {
  const std::vector<Reservation>& reservations = out_->reservations;
  for (const Reservation& res : reservations) {
    for (const ReplicaPlacement& rp : res.replicas) {
      for (const ReplicaPlacement& mine : job.placement) {
        if (rp.node == mine.node && (rp.gpu_mask & mine.gpu_mask) != 0) return true;
      }
    }
  }
  return false;
}

QueueBook::ModelGpus Session::TxnGpusByModel() const {
  QueueBook::ModelGpus add;  // GPUs per model, summed over the gang
  for (const Txn::Step& st : txn_.steps()) {
    const int16_t model = ws_.node(st.pos).model;
    if (model < 0 || st.mask == 0) continue;
    auto it = std::find_if(add.begin(), add.end(), [&](const auto& e) { return e.first == model; });
    if (it == add.end()) add.push_back({model, std::popcount(st.mask)});
    else it->second += std::popcount(st.mask);
  }
  return add;
}

bool Session::QuotaAdmits(const JobRecord& job, int32_t leaf) const { return QuotaAdmits(job, leaf, TxnGpusByModel()); }

bool Session::QuotaAdmits(const JobRecord& job, int32_t leaf, const QueueBook::ModelGpus& add) const {
  if (!book_->configured() || leaf < 0) return true;
  std::string why;
  return Admitted(leaf, add, book_->MayBorrow(job.spec()), /*empty=*/false, &why);
}

bool Session::Admitted(int32_t leaf, const QueueBook::ModelGpus& add, bool may_borrow, bool empty, std::string* why) const {
  for (const AdmitPlugin* a : profile_->admit()) {
    if (!a->Admits(*book_, leaf, add, may_borrow, empty, why)) return false;
  }
  return true;
}

void Session::SetElasticReplicas(int32_t k) {
  request_spec_ = nullptr;  // no longer what the spec asks
  TaskRequest& t = request_.tasks[0];
  t.replicas = k;
  request_.total_replicas = k;
  request_.total_gpus = static_cast<int64_t>(k) * t.gpus;
}

int32_t Session::MostReplicasThatFit(const JobRecord& job, int32_t lo, int32_t hi) {
  const int32_t leaf = Leaf(job);
  int32_t best = 0;
  // Placement and quota are both monotone in the count: binary search.
  while (lo <= hi) {
    const int32_t mid = lo + (hi - lo) / 2;
    SetElasticReplicas(mid);
    const bool ok = TryPlace(true) && QuotaAdmits(job, leaf);
    txn_.Rollback();
    if (ok) {
      best = mid;
      lo = mid + 1;
    } else {
      hi = mid - 1;
    }
  }
  return best;
}

void Session::HoldQuota(int32_t leaf, const JobRecord& job) {
  if (QuotaHeldFor(leaf) != nullptr) return;  // (the first holder's, as it was read)
  quota_held_.push_back({leaf, {ReasonCode::kQuota, "queue " + job.spec().queue + "'s quota is held for job " +
                                                        JobName(job) + ", over it until the gangs it preempted have stopped"}});
}

bool Session::RefuseOverQuota(const JobRecord& job, int32_t leaf, const QueueBook::ModelGpus& add) {
  PendingReason quota;
  bool never = false;
  if (!QuotaRefuses(job, leaf, add, &quota, &never)) return false;
  out_->Wait(job.id, quota, never);
  return true;
}

bool Session::OwnQueueMayYield(const JobRecord& job) {
  const int32_t leaf = Leaf(job), priority = job.spec().priority;
  for (const MayYield& m : may_yield_) {
    if (m.leaf == leaf && m.priority == priority) return m.yes;
  }
  const bool yes = std::any_of(running_.begin(), running_.end(), [&](const JobRecord* r) {
    return r->id != job.id && r->spec().queue == job.spec().queue && r->spec().priority <= priority &&
           book_->MayBorrow(r->spec());
  });
  may_yield_.push_back({leaf, priority, yes});
  return yes;
}

bool Session::QuotaRefuses(const JobRecord& job, int32_t leaf, const QueueBook::ModelGpus& add, PendingReason* reason,
                           bool* never_admitted) {
  const bool may_borrow = book_->MayBorrow(job.spec());
  std::string why_not, never;
  // The first Admit plugin that refuses says why (AND: every one must agree).
  const AdmitPlugin* refused = nullptr;
  for (const AdmitPlugin* a : profile_->admit()) {
    if (!a->Admits(*book_, leaf, add, may_borrow, /*empty=*/false, &why_not)) {
      refused = a;
      break;
    }
  }
  if (refused == nullptr) return false;
  bool impossible = !refused->Admits(*book_, leaf, add, may_borrow, /*empty=*/true, &never);
  if (impossible && RequestModel() < 0 && snap_->gpu_models().size() > 1) {
    // Of no named model, refused as placed: it may fit its queue's limits
    // placed otherwise (on another model, or split). Never, only where all
    // models' limits together cannot hold it (before, it was cancelled).
    impossible = !SomeSplitAdmits(job, leaf, may_borrow);
  }
  int64_t gpus = 0;  // what admission counts: whole GPUs, shares rounded up
  for (const auto& [model, n] : add) gpus += n;
  std::string hint;
  if (!may_borrow && impossible) {
    // Could it be admitted by borrowing? Then say how.
    std::string ignored;
    if (refused->Admits(*book_, leaf, add, /*may_borrow=*/true, /*empty=*/true, &ignored)) {
      hint = "; set `preemptible: true` (or a preemptible priority class) to borrow beyond the guarantee";
    }
  }
  *reason = {impossible ? ReasonCode::kExceedsQuota : ReasonCode::kQuota,
             "needs " + std::to_string(gpus) + (request_.fractional ? " GPU(s), its shares rounded up; " : " GPUs; ") +
                 (impossible ? never : why_not) + hint};
  *never_admitted = impossible;
  return true;
}

void Session::ChargeResources(int32_t leaf) {
  MilliCpu cpu = 0;
  MemoryMiB memory = 0;
  for (const TaskRequest& t : request_.tasks) {
    cpu += t.cpu * t.replicas;
    memory += t.memory * t.replicas;
  }
  book_->ChargeResources(leaf, cpu, memory);
}

bool Session::ShareCouldFit(const TaskRequest& task, uint32_t pos) const {
  const NodeState& n = ws_.node(pos);
  if (task.mig != nullptr) {
    if (n.mig_mask == 0 || n.mig_geometry->ProfileIndex(*task.mig) < 0) return false;
    if (task.model >= 0 && n.model != task.model) return false;
  }
  if ((task.milli > 0 || task.mig != nullptr) && task.model < 0 && n.model >= 0 && n.model < 64 &&
      (request_.quota_barred_models >> n.model & 1)) {
    return false;  // (its queue's limits could never admit it on that model)
  }
  if (task.milli > 0) {
    if (n.spec.gpus == 0) return false;
    if (task.model >= 0 && n.model != task.model) return false;
    if (task.gpu_memory > 0 && n.spec.gpu_memory < task.gpu_memory) return false;
    if (task.share_memory > 0 && n.spec.gpu_memory > 0 && n.spec.gpu_memory < task.share_memory) return false;
  }
  TaskRequest cpu_part = task;  // the filters see the replica's CPU and memory, no whole GPUs
  cpu_part.gpus = 0;
  cpu_part.model = -1;
  for (const FilterPlugin* f : profile_->filters()) {
    if (f->Filter(request_, cpu_part, ws_.View(pos)).fit == FilterResult::kNever) return false;
  }
  return n.spec.cpu >= task.cpu && n.spec.memory >= task.memory;
}

const std::vector<TypicalTask>& Session::TypicalMix() {
  if (typical_built_) return typical_;
  typical_built_ = true;
  typical_.clear();
  // The live jobs' task shapes, weighted by replicas: what FGD expects to
  // have to place next. The 32 most common.
  std::map<std::tuple<int64_t, int32_t, int32_t, int16_t>, int64_t> weight;
  for (const auto& [id, j] : snap_->live_jobs()) {
    for (const TaskGroupSpec& t : j->spec().tasks) {
      if (!t.gpu_share.mig_profile.empty()) continue;  // MIG instances live on MIG GPUs
      const int32_t milli = t.gpu_share.fraction_milli > 0 ? t.gpu_share.fraction_milli : (t.gpus > 0 ? 1000 : 0);
      const int32_t num = t.gpu_share.fraction_milli > 0 ? 1 : t.gpus;
      const int16_t model = t.gpu_model.empty() ? -1 : snap_->ModelIndex(t.gpu_model);
      weight[{t.cpu, milli, num, model}] += t.replicas;
    }
  }
  std::vector<std::pair<int64_t, std::tuple<int64_t, int32_t, int32_t, int16_t>>> shapes;
  for (const auto& [shape, w] : weight) shapes.push_back({w, shape});
  std::stable_sort(shapes.begin(), shapes.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  if (shapes.size() > 32) shapes.resize(32);
  int64_t kept = 0;
  for (const auto& s : shapes) kept += s.first;
  for (const auto& [w, shape] : shapes) {
    const auto& [cpu, milli, num, model] = shape;
    TypicalTask t{cpu, milli, num, std::vector<bool>(snap_->gpu_models().size(), model < 0),
                  static_cast<double>(w) / static_cast<double>(kept)};
    if (model >= 0) t.access[model] = true;
    typical_.push_back(std::move(t));
  }
  return typical_;
}

}  // namespace rota::sched
