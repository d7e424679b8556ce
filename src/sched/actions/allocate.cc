// allocate: the pending jobs in order, each placed as a gang or told why it
// waits. The order is the profile's: priority first; with queues, among
// equal priorities the queue its QueueOrder plugin (drf) picks; then the job
// orders. For each job:
//   1. its request (a job no cluster could run is rejected);
//   2. GPU fractions and MIG slices go the sharing path (share_place.h),
//      then admission;
//   3. whole GPUs: quota first when the model is known without placing, a
//      shape that failed this cycle fails again without a search, then the
//      placer (an elastic job starts smaller rather than not at all), the
//      profile's make-room actions, and admission by the queues;
//   4. a job that still waits is explained (reserved or nominated GPUs
//      named), and the profile's blocked actions act for it (preempt,
//      reserve) in order.
// An element of a job array already running as many elements as it may
// (`--count 0-99%8`) waits before any of that: it neither places, preempts
// nor reserves.
// A job that ends before the first reservation starts may backfill onto the
// reserved GPUs; any other job goes around them.
#include "sched/actions/action.h"
#include "sched/plugins/builtin.h"
#include "sched/session.h"
#include "sched/share_place.h"

namespace rota::sched {
namespace {

// The pending jobs in the order they are examined: by job order alone, or
// with queues by fair share among equal priorities (jobs of no known queue
// first).
class JobCursor {
 public:
  explicit JobCursor(const Session& s) : s_(s), order_(s.order()) {
    if (!s.fair()) return;
    by_queue_.clear();
    for (uint32_t i = 0; i < order_.size(); ++i) {
      const int32_t leaf = s.Leaf(*order_[i]);
      if (leaf < 0) {
        no_queue_.push_back(i);
        continue;
      }
      if (by_queue_.size() <= static_cast<size_t>(leaf)) by_queue_.resize(leaf + 1);
      by_queue_[leaf].push_back(i);
    }
    head_.assign(by_queue_.size(), 0);
  }

  const JobRecord* Next() {
    if (!s_.fair()) return next_ < order_.size() ? order_[next_++] : nullptr;
    if (no_queue_head_ < no_queue_.size()) return order_[no_queue_[no_queue_head_++]];
    // Highest priority first; among equals, the queue order; then the
    // earlier job in job order.
    const QueueOrderPlugin& queues = s_.profile().queue_order();
    int32_t best = -1;
    for (size_t q = 0; q < by_queue_.size(); ++q) {
      if (head_[q] >= by_queue_[q].size()) continue;
      if (best < 0) {
        best = static_cast<int32_t>(q);
        continue;
      }
      const uint32_t a = by_queue_[q][head_[q]];
      const uint32_t b = by_queue_[best][head_[best]];
      if (order_[a]->spec().priority != order_[b]->spec().priority) {
        if (order_[a]->spec().priority > order_[b]->spec().priority) best = static_cast<int32_t>(q);
        continue;
      }
      if (const int c = queues.Compare(s_.book(), static_cast<int32_t>(q), best); c != 0) {
        if (c < 0) best = static_cast<int32_t>(q);
        continue;
      }
      if (a < b) best = static_cast<int32_t>(q);
    }
    if (best < 0) return nullptr;
    return order_[by_queue_[best][head_[best]++]];
  }

 private:
  const Session& s_;
  const std::vector<const JobRecord*>& order_;
  size_t next_ = 0;
  std::vector<std::vector<uint32_t>> by_queue_;  // per leaf queue, positions into order_
  std::vector<size_t> head_;
  std::vector<uint32_t> no_queue_;
  size_t no_queue_head_ = 0;
};

// The current (elastic) request with fewer replicas: the most that fit now,
// at least min_replicas; kept in the Txn. False (with the request set to
// min_replicas, what it needs at least) if not even that fits.
bool PlaceSmaller(Session& s, const JobRecord& job) {
  const int32_t best = s.MostReplicasThatFit(job, job.spec().elastic_min_replicas, s.request().tasks[0].replicas - 1);
  if (best == 0) {
    s.SetElasticReplicas(job.spec().elastic_min_replicas);
    return false;
  }
  s.SetElasticReplicas(best);
  return s.TryPlace(true);
}

// A job of no named model placed (in the Txn) where its queue cannot take
// it now: placed again on the other models' nodes, where it may be
// admitted (before, it waited with free GPUs of a model its queue had room
// on while the placer kept choosing the full one). Else its first placement
// again, whose refusal says why. False only if that fails.
bool OtherModels(Session& s, const JobRecord& job, int32_t leaf) {
  uint64_t skipped = 0;
  bool ok = true;
  while (ok && !s.QuotaAdmits(job, leaf)) {
    uint64_t refused = 0;
    for (const auto& [model, gpus] : s.TxnGpusByModel()) {
      if (model >= 0 && model < 64 && !s.QuotaAdmits(job, leaf, {{model, gpus}})) refused |= uint64_t{1} << model;
    }
    if ((refused & ~skipped) == 0) break;
    skipped |= refused;
    s.txn().Rollback();
    s.SkipModelsForQuota(skipped);
    ok = s.TryPlace(/*keep=*/true);
  }
  if (skipped == 0) return ok;
  s.SkipModelsForQuota(0);
  if (ok && s.QuotaAdmits(job, leaf)) return true;
  if (ok) s.txn().Rollback();
  return s.TryPlace(/*keep=*/true);
}

class Allocate final : public CycleAction {
 public:
  std::string_view name() const override { return "allocate"; }
  void Execute(Session& s) const override;

 private:
  // One job; `nominee` is its nomination if it has one.
  void AllocateOne(Session& s, const JobRecord& job, bool nominee) const;
  // The sharing path: placed and admitted, or its reason recorded.
  void AllocateShares(Session& s, const JobRecord& job) const;
  // Whole GPUs: placed (kept in the Txn) and admitted. False with *refused
  // if a quota refused it (*quota and *never: why, and whether no state of
  // the queues could admit it; not recorded).
  bool PlaceWhole(Session& s, const JobRecord& job, bool ends_first, bool* refused, PendingReason* quota,
                  bool* never) const;
  // A job its queue's limits refuse (`quota`, Quota: they could admit it)
  // may evict gangs of its own queue that it goes before (a lower priority,
  // or a preemptive job order's), where their GPUs given back admit it: the
  // blocked actions that act over quota search with PlacesAdmitted asking
  // the limits (Session::QuotaEvictionSearch). True if one did, or room is
  // being made for it already (its reason recorded); else the caller
  // records `quota`. Before, such a job waited for its own queue's
  // low-priority gangs to end, however long they ran.
  bool EvictsForQuota(Session& s, const JobRecord& job, PendingReason quota) const;
  // Whether gangs of `job`'s own queue (with quotas) are stopping for it:
  // once its quota admits it and it waits only for their GPUs, the queue's
  // later jobs still wait for it (else they take what the victims give
  // back, and it is over quota again when they have stopped).
  static bool MakesRoomInItsQueue(Session& s, const JobRecord& job);
  // Gangs are stopping to make room for it: it waits for them (its reason
  // names them), with `hold_quota` holding its queue's quota for it. False
  // if none are.
  static bool WaitsForRoom(Session& s, const JobRecord& job, bool hold_quota);
  // Why a job that did not fit waits, with held GPUs named.
  PendingReason Explain(Session& s, const JobRecord& job, bool ends_first, bool nominee, bool* unresolvable) const;
};

void Allocate::Execute(Session& s) const {
  JobCursor cursor(s);
  int32_t examined = 0;
  // Jobs are examined by priority: a nomination is let go for the first job
  // of its nominee's priority or higher (its nominee included). The nominee
  // examined last holds its GPUs again, for lower jobs, unless it was placed
  // or all of its victims have stopped (then holding would only idle them).
  Session::Nomination* nominee = nullptr;
  auto settle_nominee = [&] {
    if (nominee == nullptr) return;
    const bool placed = !s.out().placed.empty() && s.out().placed.back().job == nominee->job->id;
    if (!placed && s.room_being_made(nominee->job->id)) s.HoldNomination(*nominee, true);
    nominee = nullptr;
  };
  const int32_t max_jobs = s.options().max_jobs_per_cycle;
  while (const JobRecord* job = cursor.Next()) {
    settle_nominee();
    if (max_jobs > 0 && examined++ >= max_jobs) break;
    for (Session::Nomination& n : s.nominations()) {
      // A running service's (its scale-up's, which grow-elastic places) is
      // let go only for a job of higher priority, and only for that job. A
      // pending job's, for one of higher priority, or of its own priority
      // in its own queue: not for another queue's of its priority (the
      // borrowing queue a reclaim took them from took them back, and the
      // evictions came again every min_runtime).
      const bool service = n.job->state == JobState::kRunning;
      const int32_t mine = n.job->spec().priority, theirs = job->spec().priority;
      const bool same_queue = n.job->spec().queue == job->spec().queue;
      if (!n.released && (service ? mine < theirs : mine < theirs || (mine == theirs && same_queue))) {
        s.HoldNomination(n, false);
      }
      if (n.job == job) nominee = &n;
    }
    AllocateOne(s, *job, nominee != nullptr);
    for (Session::Nomination& n : s.nominations()) {
      if (n.released && n.job->state == JobState::kRunning) s.HoldNomination(n, true);
    }
  }
  settle_nominee();
}

void Allocate::AllocateOne(Session& s, const JobRecord& job, bool nominee) const {
  CycleResult& out = s.out();
  PendingReason why;
  if (!s.BuildRequest(job, &why)) {
    out.unresolvable.push_back({job.id, std::move(why)});
    return;
  }
  if (s.ws().size() == 0) {  // a fresh cluster: nothing could be judged, nothing is rejected
    out.Wait(job.id, {ReasonCode::kNodesUnavailable, "the cluster has no nodes yet: it waits for one to register"});
    return;
  }
  if (s.ArrayWaits(job, &why)) {
    out.Wait(job.id, why);
    return;
  }
  if (const PendingReason* held = s.fair() && !nominee ? s.QuotaHeldFor(s.Leaf(job)) : nullptr; held != nullptr) {
    out.Wait(job.id, *held);  // (a shared text: no allocation per waiting job)
    return;
  }
  if (s.request().fractional) return AllocateShares(s, job);
  // Quota first when the GPU model is known without placing (the job names
  // it, or the cluster has one): a job over its queue's limit waits for
  // quota, whatever capacity frees up.
  // (An elastic job by its minimum: it starts smaller rather than not at all.)
  const int32_t leaf = s.Leaf(job);
  const int16_t model = s.RequestModel();
  const int64_t least = s.LeastGpus(job);
  if (leaf >= 0 && model >= 0 && least > 0) {
    PendingReason quota;
    bool never = false;
    if (s.QuotaRefuses(job, leaf, {{model, least}}, &quota, &never)) {
      // (An elastic job's request is its whole size here: a search would
      // evict for more than its minimum. It waits for quota, as before.)
      if (!never && !job.spec().elastic() && EvictsForQuota(s, job, quota)) return;
      out.Wait(job.id, quota, never);
      return;
    }
  }
  // Backfill: a job that ends before the first reservation starts may use
  // the reserved GPUs; any other job must go around them.
  const bool ends_first = s.holding() && s.has_clock() && job.spec().time_limit > 0 &&
                          s.now() + job.spec().time_limit <= s.first_reservation();
  // (It may backfill until its limit would reach past the reservation.)
  if (ends_first) s.WakeAt(s.first_reservation() - job.spec().time_limit + 1);
  // A placement shape that already failed this cycle fails again (nothing
  // is freed within a cycle) - after its quota check, which is its own.
  if (const Session::Failure* seen = s.FindFailure(job, ends_first);
      seen != nullptr && !s.room_being_made(job.id) && !nominee) {
    out.Wait(job.id, seen->reason, seen->unresolvable);
    return;
  }
  bool refused = false, never = false;
  PendingReason quota;
  if (PlaceWhole(s, job, ends_first, &refused, &quota, &never)) {
    s.CommitPlacement();
    s.CountArrayStart(job);
    return;
  }
  if (refused) {
    if (!never && EvictsForQuota(s, job, quota)) return;
    out.Wait(job.id, quota, never);
    return;
  }
  bool unresolvable = false;
  PendingReason reason = Explain(s, job, ends_first, nominee, &unresolvable);
  if (!unresolvable) {
    // Room already being made for it: wait for those gangs to stop (and
    // where they are of its own queue, its queue's quota is held for it:
    // what they give back is its).
    if (WaitsForRoom(s, job, MakesRoomInItsQueue(s, job))) return;
    for (const BlockedAction* a : s.profile().when_blocked()) {
      if (a->Blocked(s, job, &reason)) {
        s.CountArrayStart(job);  // it will start: its array's other elements wait behind it
        return;
      }
    }
  }
  s.RecordFailure(&job, reason, unresolvable, ends_first);
  out.Wait(job.id, reason, unresolvable);
}

void Allocate::AllocateShares(Session& s, const JobRecord& job) const {
  CycleResult& out = s.out();
  PendingReason why;
  bool never = false;
  const size_t first = out.replicas.size();
  const size_t first_reconf = out.reconfigurations.size();
  if (!PlaceShares(s, &why, &never)) {
    out.Wait(job.id, why, never);
    return;
  }
  const int32_t placed = static_cast<int32_t>(out.replicas.size() - first);
  if (placed < s.request().total_replicas) s.SetElasticReplicas(placed);  // a service started smaller
  if (!s.fair()) {
    s.CountArrayStart(job);
    return s.txn().Commit();
  }
  // Admission: its shares count as whole GPUs of the models they landed on (rounded up per model).
  const int32_t leaf = s.Leaf(job);
  auto placed_gpus = [&] {
    QueueBook::ModelGpus shares;
    for (size_t i = first; i < out.replicas.size(); ++i) {
      const NodeState& node = s.ws().node(s.topology().position_of(out.replicas[i].node));
      AddShare(&shares, node.model, ChargedMilli(job.spec().tasks[out.replicas[i].task].gpu_share, node.spec.gpu_memory));
    }
    return SharesAsGpus(shares);
  };
  QueueBook::ModelGpus add = placed_gpus();
  const JobSpec& spec = job.spec();
  if (leaf >= 0 && !add.empty() && spec.is_service() && spec.elastic() && !s.QuotaAdmits(job, leaf, add)) {
    // A service asking past what its queue admits starts with the most
    // replicas it admits, down to its min (before, the whole ask was
    // refused, and one past the limit even when empty was cancelled).
    auto undo = [&] {
      s.txn().Rollback();
      out.replicas.resize(first);
      out.reconfigurations.resize(first_reconf);
      out.placed.pop_back();
    };
    int32_t lo = std::max(1, spec.elastic_min_replicas), hi = placed - 1, best = 0;
    while (lo <= hi) {
      const int32_t mid = lo + (hi - lo) / 2;
      undo();
      s.SetElasticReplicas(mid);
      const bool fits = PlaceShares(s, &why, &never);
      const bool ok = fits && s.QuotaAdmits(job, leaf, placed_gpus());
      if (ok) best = mid;
      if (ok) lo = mid + 1;
      else hi = mid - 1;
      if (!fits) {
        // (PlaceShares undid itself: place anything again for the next undo.)
        s.SetElasticReplicas(placed);
        if (!PlaceShares(s, &why, &never)) return out.Wait(job.id, why, never);
      }
    }
    undo();
    s.SetElasticReplicas(best > 0 ? best : std::max(1, spec.elastic_min_replicas));
    if (!PlaceShares(s, &why, &never)) return out.Wait(job.id, why, never);
    add = placed_gpus();
  }
  if (leaf >= 0 && !add.empty() && s.RefuseOverQuota(job, leaf, add)) {
    // Undo the placement: the Txn (shares and MIG instances too) and the output.
    s.txn().Rollback();
    out.replicas.resize(first);
    out.reconfigurations.resize(first_reconf);
    out.placed.pop_back();
    return;
  }
  if (leaf >= 0 && !add.empty()) s.book().Charge(leaf, add);
  if (leaf >= 0) s.ChargeResources(leaf);
  s.CountArrayStart(job);
  s.txn().Commit();
}

bool Allocate::WaitsForRoom(Session& s, const JobRecord& job, bool hold_quota) {
  const std::string making_room = s.MakingRoomFor(job.id);
  if (making_room.empty()) return false;
  s.out().Wait(job.id, {ReasonCode::kPreempting, "waiting for preempted job(s) " + making_room + " to checkpoint and stop"});
  if (hold_quota) s.HoldQuota(s.Leaf(job), job);
  return true;
}

bool Allocate::MakesRoomInItsQueue(Session& s, const JobRecord& job) {
  if (!s.fair() || s.Leaf(job) < 0 || !s.book().Limited(s.Leaf(job))) return false;
  for (auto [it, end] = s.making_room().equal_range(job.id); it != end; ++it) {
    const JobRecord* victim = s.snap().FindJob(it->second);
    if (victim != nullptr && victim->spec().queue == job.spec().queue) return true;
  }
  return false;
}

bool Allocate::EvictsForQuota(Session& s, const JobRecord& job, PendingReason quota) const {
  if (WaitsForRoom(s, job, /*hold_quota=*/true)) return true;
  if (!s.OwnQueueMayYield(job)) return false;  // (no gang of its queue could go: no search)
  const Session::QuotaEvictionSearch search(s);
  for (const BlockedAction* a : s.profile().when_blocked()) {
    if (a->ActsOverQuota() && a->Blocked(s, job, &quota)) {
      s.CountArrayStart(job);  // it will start: its array's other elements wait behind it
      s.HoldQuota(s.Leaf(job), job);
      return true;
    }
  }
  return false;
}

bool Allocate::PlaceWhole(Session& s, const JobRecord& job, bool ends_first, bool* refused, PendingReason* quota,
                          bool* never) const {
  if (ends_first) s.ReleaseHeld();
  const int32_t leaf = s.Leaf(job);
  bool ok = s.TryPlace(/*keep=*/true);
  // An elastic job starts smaller rather than not at all: where it does not
  // fit, or where its queue's limits do not admit it whole (before, that
  // refusal came first, and one past the limit even when empty was
  // cancelled though its minimum was within it).
  bool over_quota = false;  // it fits, but not within its queue's limits whole
  if (ok && job.spec().elastic() && leaf >= 0 && !s.QuotaAdmits(job, leaf)) {
    // (Of no named model: whole on other models' nodes first, before smaller.)
    const bool elsewhere = s.RequestModel() < 0 && OtherModels(s, job, leaf) && s.QuotaAdmits(job, leaf);
    if (!elsewhere) {
      s.txn().Rollback();
      ok = false;
      over_quota = true;
    }
  }
  if (!ok && job.spec().elastic()) ok = PlaceSmaller(s, job);
  if (!ok && over_quota) {
    // No smaller count is admitted either: placed at its minimum (PlaceSmaller
    // left it there), so that the admission below refuses it for quota, as
    // a job of one size, rather than the make-room actions evicting for a
    // job that still could not start (or a reservation saying it does not fit).
    ok = s.TryPlace(/*keep=*/true);
  }
  if (ok && leaf >= 0 && s.RequestModel() < 0) ok = OtherModels(s, job, leaf);
  const size_t resize_mark = s.out().resizes.size();
  for (const MakeRoomAction* a : s.profile().make_room()) {
    if (ok) break;
    ok = a->MakeRoom(s, job);
  }
  if (ok && leaf >= 0) {
    // Admission: the placement must fit the queues' quotas too.
    const QueueBook::ModelGpus add = s.TxnGpusByModel();
    if (s.QuotaRefuses(job, leaf, add, quota, never)) {
      // Undo first, so reserved GPUs it had taken go back to being held.
      s.txn().Rollback();
      s.UndoResizes(resize_mark);
      if (ends_first) s.RetakeHeld();
      *refused = true;
      return false;
    }
    s.Charge(leaf, add);
  }
  if (ends_first) s.RetakeHeld();
  return ok;
}

PendingReason Allocate::Explain(Session& s, const JobRecord& job, bool ends_first, bool nominee,
                                bool* unresolvable) const {
  PendingReason reason = ExplainUnresolvable(s.ctx(), s.request());
  *unresolvable = !reason.ok();
  if (*unresolvable) return reason;
  reason = ExplainPending(s.ctx(), s.request());
  // Held back only by a reservation?
  if (s.holding() && !ends_first) {
    s.ReleaseHeld();
    const bool would_fit = s.TryPlace(false);
    s.RetakeHeld();
    if (would_fit) {
      const Duration gap = s.first_reservation() - s.now();
      reason = {ReasonCode::kReserved, "fits now only on GPUs reserved for a higher job that starts in " +
                                           FormatSpan(gap) + "; a time_limit of at most " + FormatSpan(gap) +
                                           " would let it backfill"};
    }
  }
  // Held back only by GPUs nominated for a higher job that preempted for them?
  if (reason.code != ReasonCode::kReserved && !nominee) {
    std::string for_jobs;
    bool higher = true;  // (else one of its priority, of another queue: a reclaim's)
    for (Session::Nomination& n : s.nominations()) {
      if (n.released) continue;
      s.HoldNomination(n, false);
      n.released = false;  // only looked at
      for_jobs += (for_jobs.empty() ? "" : ", ") + s.JobName(*n.job);
      higher = higher && n.job->spec().priority > job.spec().priority;
    }
    if (!for_jobs.empty()) {
      const bool would_fit = s.TryPlace(false);
      for (Session::Nomination& n : s.nominations()) {
        if (!n.released) s.HoldNomination(n, true);
      }
      if (would_fit) {
        reason = {ReasonCode::kReserved, "fits now only on GPUs freed by preemption for " +
                                             std::string(higher ? "higher-priority " : "") + "job(s) " + for_jobs +
                                             ", held for them until they start"};
      }
    }
  }
  return reason;
}

}  // namespace

void RegisterAllocate(Registry& r) {
  r.Register("allocate", [] { return std::make_unique<Allocate>(); });
}

}  // namespace rota::sched
