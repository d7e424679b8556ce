// Session: one scheduling cycle, what every action and plugin works on
// (Volcano's Session). It holds the cycle's inputs (the snapshot, the time
// if the driver has one, the options, the profile, the queue book), the
// workspace and its Txn (whole GPUs, shares and MIG instances), the request
// being placed, the decisions made so far (CycleResult) and the bookkeeping
// that lets later decisions respect earlier ones: GPUs held for
// reservations and nominations, gangs chosen as victims or resized, shapes
// that already failed.
//
// The primitives the actions share live here, once: build a request, try
// it in the Txn, release a running gang's resources as if it had ended,
// admit and charge a placement against the queues, commit a placement.
// Actions (actions/*.cc) decide; the session records.
//
// Thread-safety: one owner (the scheduler's cycle). Reused across cycles
// (Begin clears without freeing memory).
//
// Example (an action):
//   void GrowElastic::Execute(Session& s) const {
//     for (const JobRecord* r : s.elastic_running()) {
//       if (!s.BuildRequest(*r, &why)) continue;
//       if (s.TryPlace(/*keep=*/true)) ...
#pragma once

#include <algorithm>
#include <array>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "sched/cycle_result.h"
#include "sched/options.h"
#include "sched/place_context.h"
#include "sched/queues.h"
#include "sched/reason.h"
#include "sched/registry.h"
#include "sched/workspace.h"

namespace rota::sched {

class Session {
 public:
  Session(const Profile* profile, const EngineOptions* options, QueueBook* book);
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  // Starts a cycle on `snap` at `now` (null: no clock, so no reservations,
  // preemption or nominations) writing into `out` (cleared). Orders the
  // pending jobs by the profile's job orders.
  void Begin(const Snapshot& snap, const TimePoint* now, CycleResult* out);
  // Only the workspace, for checking one job against the whole cluster.
  void BeginProbe(const Snapshot& snap);

  // --- The cycle's inputs.
  const Snapshot& snap() const { return *snap_; }
  const Topology& topology() const { return snap_->topology(); }
  bool has_clock() const { return has_now_; }
  // Whether the profile's job order puts pending `job` before running `r`
  // by a preemptive JobOrder (the first plugin that does not tie decides;
  // framework.h): then `job` may evict `r` though their priorities are equal.
  // A ranking order that would let it if `r` had nothing unsaved puts `r` in
  // the cycle's waits_on_checkpoint.
  bool OrderEvicts(const JobRecord& job, const JobRecord& r);
  // A decision of this cycle turned on the time: at `t` it may go otherwise
  // (CycleResult::unchanged_until).
  void WakeAt(TimePoint t) { wake_ = std::min(wake_, t); }
  // CycleResult::unchanged_until, at the end of a cycle.
  TimePoint UnchangedUntil() const;
  // The job order that decides between pending `job` and running `r` (the
  // first that does not tie; nullptr if all do), and in `first` whether it
  // puts `job` first (a ranking order: far enough ahead to evict, its
  // RankEvicts, given `weighed`: what evicting `r` would cost, where the
  // ranking order weighed it). OrderEvicts and an eviction's reason read it.
  const JobOrderPlugin* DecidingOrder(const JobRecord& job, const JobRecord& r, bool* first,
                                      JobOrderPlugin::VictimWork* weighed = nullptr) const;
  // Per running gang (running(), by position): 1 where the job order spares
  // it from `job` for certain, without weighing it: a gang of the job's
  // queue and priority, the orders before the ranker keyed and tied (the
  // same keys), and the ranker ranking the job after it. OrderEvicts(job,
  // r) is then false and marks nothing, so a victim search may pass the
  // gang by unread (a search reads every running gang; most are ranked
  // ahead of the waiting job). All 0 without a ranker, or when an order
  // before it is not keyed (or it comes after kOrderKeys orders). Valid
  // until the next call.
  const std::vector<uint8_t>& OrderSpares(const JobRecord& job);
  TimePoint now() const { return now_; }  // REQUIRES: has_clock()
  const TimePoint* now_or_null() const { return has_now_ ? &now_ : nullptr; }
  const EngineOptions& options() const { return *options_; }
  const Profile& profile() const { return *profile_; }
  QueueBook& book() { return *book_; }
  const QueueBook& book() const { return *book_; }
  bool fair() const { return book_->configured(); }
  // The job's leaf queue; -1 without queues (or for an unknown path).
  int32_t Leaf(const JobRecord& job) const { return fair() ? book_->LeafIndex(job.spec().queue) : -1; }
  // TryPlace(false), and for a job of no known model (RequestModel) with
  // quotas, the placement admitted by its queue's limits as they are: the
  // preempt and reserve actions' test (an eviction or a reservation for a
  // placement its queue then refuses is of no use). Within a
  // QuotaEvictionSearch, for a job of a known model too.
  bool PlacesAdmitted(const JobRecord& job);
  // While one lives: a victim search for a job its queue's limits refuse
  // (allocate's EvictsForQuota). PlacesAdmitted then asks the limits
  // whatever the job's model, crediting the gangs of its queue the search
  // releases. (Without it, a job of a known model had its quota checked
  // before placing, and a search only asked whether it fits.)
  bool quota_search() const { return quota_search_; }
  class QuotaEvictionSearch {
   public:
    explicit QuotaEvictionSearch(Session& s) : s_(s) { s_.quota_search_ = true; }
    ~QuotaEvictionSearch() { s_.quota_search_ = false; }
    QuotaEvictionSearch(const QuotaEvictionSearch&) = delete;
    QuotaEvictionSearch& operator=(const QuotaEvictionSearch&) = delete;

   private:
    Session& s_;
  };
  // The GPUs the request needs at least, as quotas count them: an elastic
  // job's (or a service's) minimum; shares summed and rounded up.
  int64_t LeastGpus(const JobRecord& job) const;
  // Whether its queue's limits, with the queues empty, could admit the job
  // (at its minimum) split over the models as they may take it.
  bool SomeSplitAdmits(const JobRecord& job, int32_t leaf, bool may_borrow) const;
  // Sets request_'s quota_barred_models (BuildRequest).
  void BarModelsOverQuota(const JobRecord& job);
  // Sets request_'s quota_skipped_models (0: none).
  void SkipModelsForQuota(uint64_t models) { request_.quota_skipped_models = models; }

  // --- Jobs, as this cycle found them.
  const std::vector<const JobRecord*>& order() const { return order_; }  // pending, in job order
  const std::vector<const JobRecord*>& running() const { return running_; }
  const std::vector<const JobRecord*>& elastic_running() const { return elastic_running_; }
  // How reasons refer to a job: its id, or its name (options().name_jobs).
  std::string JobName(JobId job) const;
  std::string JobName(const JobRecord& job) const;
  // Running gangs being preempted to make room for `job`, as JobName lists them.
  std::string MakingRoomFor(JobId job) const;
  // Every preempting gang stopping to make room for a job (preemptor ->
  // victim), from the snapshot.
  const std::unordered_multimap<JobId, JobId>& making_room() const { return making_room_for_; }
  bool room_being_made(JobId job) const { return making_room_for_.count(job) > 0; }
  // A job array with a limit on its running elements (`--count 0-99%8`):
  // how many of them run or stop now, or are about to start (room is being
  // made for them, GPUs are nominated for them, or this cycle placed them,
  // preempted or reserved for them). ArrayWaits says why `job` waits for
  // its array (false for a job of no array, or one it holds back in
  // nothing): its array is not whole yet (an array is journaled in chunks,
  // and none of its elements starts before its last is: a stop between two
  // chunks cancels what was committed of it, and a retry submits it again,
  // so an element that had run would run twice), or is at its limit without
  // it. CountArrayStart counts `job` in (once).
  bool ArrayWaits(const JobRecord& job, PendingReason* why) const;
  void CountArrayStart(const JobRecord& job);

  // --- The workspace and the request being placed.
  Workspace& ws() { return ws_; }
  const Workspace& ws() const { return ws_; }
  Txn& txn() { return txn_; }
  PlaceContext& ctx() { return ctx_; }
  JobRequest& request() { return request_; }
  const JobRequest& request() const { return request_; }
  CycleResult& out() { return *out_; }

  // Fills request() for `job`; false (with *why) if it cannot be scheduled at all.
  bool BuildRequest(const JobRecord& job, PendingReason* why);
  // Tries the current request (the placer, then every JobReady plugin) in
  // the Txn; rolls back unless `keep`. True if it fits.
  bool TryPlace(bool keep);
  // The current (elastic) request with k replicas of its one task group.
  void SetElasticReplicas(int32_t k);
  // The most replicas in [lo, hi] that fit now, placement and quota (0 =
  // none); leaves the workspace as it was.
  int32_t MostReplicasThatFit(const JobRecord& job, int32_t lo, int32_t hi);
  // Records the Txn's steps as the placement of the current request.
  void CommitPlacement();

  // Frees (or takes back) a running job's resources in the workspace, as if
  // it had ended; only its healthy GPUs come free. A job resized this cycle
  // frees what it holds after the resize.
  void SetReleased(const JobRecord& job, bool release);
  void SetReplicasReleased(const JobSpec& spec, const ReplicaPlacement* first, size_t count, bool release);

  // --- Admission (the queue book).
  // GPUs per model of the Txn's steps.
  QueueBook::ModelGpus TxnGpusByModel() const;
  // The model of the request's whole GPUs when known without placing (it
  // names one, the cluster has one, or its queue's limits admit it on one
  // alone: quota_barred_models); -1 otherwise.
  int16_t RequestModel() const;
  bool QuotaAdmits(const JobRecord& job, int32_t leaf) const;
  bool QuotaAdmits(const JobRecord& job, int32_t leaf, const QueueBook::ModelGpus& add) const;
  // Whether every Admit plugin admits `add` to `leaf` (with `empty`: as if
  // the queues held nothing); *why: the first refusal's reason.
  bool Admitted(int32_t leaf, const QueueBook::ModelGpus& add, bool may_borrow, bool empty, std::string* why) const;
  // Records why `job` waits (or is rejected) if adding `add` to its queue
  // would break a quota; true if so.
  bool RefuseOverQuota(const JobRecord& job, int32_t leaf, const QueueBook::ModelGpus& add);
  // Whether a running gang of `job`'s queue, of its priority or lower, may
  // be evicted at all (it is preemptible): the cheap test before a victim
  // search for a job its queue's limits refuse. Once a cycle per queue and
  // priority.
  bool OwnQueueMayYield(const JobRecord& job);
  // The quota of a leaf queue held, for the rest of the cycle, for a job of
  // it that evicts (or waits for) gangs of its queue to be admitted
  // (allocate's EvictsForQuota): later jobs of the queue wait, so that what
  // the evictions give back is not taken by them before it starts (then it
  // would evict again, and again). QuotaHeldFor: why they wait (made once
  // per hold, not for each of a long queue's waiting jobs), or nullptr: not
  // held.
  void HoldQuota(int32_t leaf, const JobRecord& job);
  const PendingReason* QuotaHeldFor(int32_t leaf) const {
    for (const QuotaHold& h : quota_held_) {
      if (h.leaf == leaf) return &h.reason;
    }
    return nullptr;
  }
  // RefuseOverQuota's test and reason, recorded nowhere: true if adding
  // `add` would break a quota, with *reason and *never (no state of the
  // queues could admit it).
  bool QuotaRefuses(const JobRecord& job, int32_t leaf, const QueueBook::ModelGpus& add, PendingReason* reason,
                    bool* never);
  // Charges `add` and the current request's CPU and memory to `leaf`.
  void Charge(int32_t leaf, const QueueBook::ModelGpus& add);
  // Only the current request's CPU and memory (dominant shares).
  void ChargeResources(int32_t leaf);

  // --- Reservations: GPUs held for blocked jobs this cycle.
  bool holding() const { return !held_.empty(); }
  size_t held_count() const { return held_.size(); }
  TimePoint first_reservation() const { return first_reservation_; }
  // Gives the held GPUs back to the pool (a job that ends before the first
  // reservation may use them) / takes back what is still free of them.
  void ReleaseHeld();
  void RetakeHeld();
  // Adds a reservation for `job` at `start` on `steps` (taking what is free
  // of them out of the pool).
  void Reserve(JobId job, TimePoint start, const std::vector<Txn::Step>& steps);
  // GPUs some reservation of this cycle counts on, by position.
  const std::unordered_map<uint32_t, uint64_t>& promised() const { return promised_; }
  // Whether a running gang holds GPUs a reservation of this cycle counts on:
  // evicting or shrinking it would hand them to a job the reservation's
  // owner goes before.
  bool HoldsReservedGpus(const JobRecord& job) const;

  // --- Time limits: running jobs with one, by when they reach it (at
  // least now), what reservations count on. Built on first use.
  // REQUIRES: has_clock().
  struct Ending {
    TimePoint end;
    const JobRecord* job;
  };
  const std::vector<Ending>& Endings();
  // One more victim search this cycle, if options().max_preemption_searches allows.
  bool TakePreemptionSearch() { return preemption_searches_++ < options_->max_preemption_searches; }
  bool PreemptionSearchesLeft() const { return preemption_searches_ < options_->max_preemption_searches; }

  // --- Nominations: GPUs freed by preemption for a pending job, out of the
  // pool for jobs of lower priority while its victims are stopping.
  struct Nomination {
    const JobRecord* job;
    std::vector<std::pair<uint32_t, uint64_t>> held;
    bool released = false;  // given back to the pool
  };
  std::vector<Nomination>& nominations() { return nominations_; }
  void HoldNomination(Nomination& n, bool hold);

  // --- Gangs changed this cycle.
  bool is_victim(JobId job) const { return victim_set_.count(job) > 0; }
  void AddVictim(JobId job) { victim_set_.insert(job); }
  // Placements of elastic jobs resized this cycle (their current gangs).
  const std::vector<ReplicaPlacement>* resized(JobId job) const;
  void SetResized(JobId job, std::vector<ReplicaPlacement> placement) { resized_[job] = std::move(placement); }
  void ClearResized(JobId job) { resized_.erase(job); }
  // Takes back the resizes recorded in out().resizes from `mark` on.
  void UndoResizes(size_t mark);

  // --- Shapes that failed this cycle: nothing is freed within a cycle, so
  // a job of the same shape (and the same view of held GPUs) fails again.
  struct Failure {
    const JobRecord* job;
    PendingReason reason;
    bool unresolvable;
    bool ends_first;  // tried with the reserved GPUs available
    size_t held;      // how many held ranges existed then (more reservations, other room)
  };
  const Failure* FindFailure(const JobRecord& job, bool ends_first) const;
  void RecordFailure(const JobRecord* job, const PendingReason& reason, bool unresolvable, bool ends_first);

  // --- Sharing.
  // MIG profiles the cycle's pending jobs ask for, in order (at most 64).
  const std::vector<const std::string*>& MigDemand();
  // The live jobs' task shapes, weighted by replicas (FGD's typical mix).
  const std::vector<TypicalTask>& TypicalMix();
  // Whether a replica of `task` (a share or CPU only) could ever run on `pos`.
  bool ShareCouldFit(const TaskRequest& task, uint32_t pos) const;

  // A rank (JobOrderPlugin::Rank's double) as an integer in the same order:
  // -0 and +0 alike, NaN last. (The session sorts on it with the keyed orders' keys.)
  static int64_t RankKey(double rank);

 private:
  uint64_t ShapeHash(const JobSpec& spec) const;
  // A live job's shape class (never 0): two jobs are of one class exactly
  // when they have the same shape (SameSpecShape, and for a service the
  // same desired replicas), so the failures are indexed by class and a
  // lookup compares no fields. Kept per chunk of the live jobs while the
  // chunk is unchanged (a deep queue's waiting jobs are looked up every
  // cycle). A job with a GPU share is of a class of its own at each call
  // (SameSpecShape never holds for it).
  uint64_t ShapeOf(const JobRecord& job) const;
  static bool SameSpecShape(const JobSpec& x, const JobSpec& y);
  mutable std::vector<std::vector<uint64_t>> shapes_;  // as chunks_: per id in the chunk, 0 = not yet
  struct ShapeClass {
    std::shared_ptr<const JobSpec> spec;  // one of its jobs' (kept alive: compared with later ones)
    int32_t desired = -1;                 // a service's desired replicas (-1: not a service)
    uint64_t id = 0;
  };
  mutable std::unordered_multimap<uint64_t, ShapeClass> shape_classes_;  // ShapeHash -> its classes
  mutable uint64_t next_shape_ = 1;
  static constexpr size_t kMaxShapeClasses = 1 << 16;  // then forgotten (and shapes_ with them) at a Begin

  const Profile* profile_;
  const EngineOptions* options_;
  QueueBook* book_;
  const Snapshot* snap_ = nullptr;
  bool has_now_ = false;
  TimePoint now_ = 0;
  CycleResult* out_ = nullptr;

  Workspace ws_;
  Txn txn_;
  PlaceContext ctx_;
  JobRequest request_;
  // The spec request_ was built from, while it still says what that spec
  // asks (not a service's, not made smaller): the next job holding the same
  // spec (an array's elements share one) reuses it. nullptr: build anew.
  const JobSpec* request_spec_ = nullptr;
  Labels empty_labels_;

  std::vector<const JobRecord*> order_;
  std::vector<const JobRecord*> running_;
  std::vector<const JobRecord*> elastic_running_;
  std::unordered_multimap<JobId, JobId> making_room_for_;  // preemptor -> its preempting victims

  // --- Kept between cycles, so that a cycle's set-up costs what changed:
  // what Begin read from each chunk of the live jobs (JobTable), and the
  // pending jobs in job order. A chunk of the version read last is
  // unchanged (JobTable::chunk_version), so only changed chunks are
  // read again, and only their pending jobs are sorted and merged into the
  // kept order (with job orders that are not stable, framework.h, the kept
  // jobs' keys are read again and they are sorted again if out of order).
  struct ChunkJobs {
    uint64_t version = 0;
    std::vector<const JobRecord*> pending, running, elastic_running;
    std::vector<const JobRecord*> nominated;  // pending (not held), or a running service, with GPUs nominated for it
    std::vector<std::pair<JobId, JobId>> making_room;  // preemptor, victim
    std::vector<JobId> limited_arrays;  // per running or stopping element of an array with a limit, its array
  };
  // Up to kOrderKeys job orders, each keyed or the ranker, are compared by
  // the keys an Ordered holds (keyed_); otherwise by calling them.
  static constexpr size_t kOrderKeys = 3;
  struct Ordered {
    JobId id;
    const JobRecord* job;
    std::array<int64_t, kOrderKeys> keys{};  // keyed_: each job order's key, in the profile's order
  };
  Ordered MakeOrdered(const JobRecord& job) const;
  // `job`'s key under a keyed `order` (the ranker's: RankKey of its rank).
  int64_t OrderKey(const JobOrderPlugin* order, const JobRecord& job) const;
  bool keyed_ = false;

  // The profile's ranking job order (framework.h), its state, and this
  // cycle's ranks of the pending and running jobs.
  void RankJobs(const Snapshot& snap);
  double RankOf(const JobRecord& job) const;
  const JobOrderPlugin* ranker_ = nullptr;
  std::unique_ptr<JobOrderPlugin::RankState> rank_state_;
  // Ranks by job id (from rank_base_): the live jobs' ids are dense.
  std::vector<double> ranks_;
  uint64_t rank_base_ = 0;
  std::vector<const JobRecord*> rank_jobs_;
  // Per ranked job (as ranks_), the cycle (cycle_stamp_) that put it in
  // waits_on_checkpoint: once a cycle, not once a search.
  std::vector<uint64_t> checkpoint_marks_;
  uint64_t cycle_stamp_ = 0;
  // OrderSpares': per running gang, what it compares, read at the cycle's
  // first search (cycle_stamp_); each queue name as a number (spare_queues_).
  struct SpareKeys {
    int32_t queue = -1;
    int32_t priority = 0;
    std::array<int64_t, kOrderKeys> keys{};  // the orders' up to the ranker's (OrderKey)
  };
  // `add_queue`: a queue not met yet gets the next index (else -1).
  SpareKeys SpareKeysOf(const JobRecord& job, bool add_queue);
  bool spares_ = false;   // a ranker, every order before it keyed
  size_t ranker_at_ = 0;  // the ranker's place among the job orders
  std::vector<SpareKeys> spare_keys_;
  std::unordered_map<std::string_view, int32_t> spare_queues_;  // (views of the running gangs' specs)
  // The queue SpareKeysOf last numbered, and its number (most gangs are in
  // a few queues: compared before the name is hashed).
  std::string_view last_spare_queue_;
  int32_t last_spare_index_ = -1;
  uint64_t spare_stamp_ = 0;
  std::vector<uint8_t> spared_;
  std::vector<double> rank_values_;
  // Reads the live jobs' changed chunks; marks them in changed_.
  void ReadLiveJobs(const Snapshot& snap);
  // order_: the pending jobs (not held) in job order.
  void OrderPending();
  template <typename Less>
  void OrderPendingBy(Less before);
  bool Before(const Ordered& a, const Ordered& b) const;  // in job order, ties by id
  static bool KeysBefore(const Ordered& a, const Ordered& b) {  // keyed_: Before, inline
    for (size_t k = 0; k < kOrderKeys; ++k) {
      if (a.keys[k] != b.keys[k]) return a.keys[k] < b.keys[k];
    }
    return a.id < b.id;
  }
  std::vector<ChunkJobs> chunks_;
  std::vector<uint8_t> changed_;  // per chunk: read again this cycle
  bool read_ = false;  // chunks_ holds what a snapshot's chunks held
  std::vector<Ordered> sorted_, kept_, fresh_, nominated_;
  bool sorted_kept_ = false;  // sorted_'s keys may be used again: stable job orders made it

  std::unordered_map<JobId, int32_t> array_running_;  // arrays with a limit: elements running, stopping or starting
  std::unordered_set<JobId> array_starting_;          // pending elements counted in array_running_
  // Per limited array, the last ArrayLimit reason and the count it names: a
  // 100,000-element array's waiting elements share one text (ReasonText).
  mutable std::unordered_map<JobId, std::pair<int32_t, PendingReason>> array_reason_;
  // Arrays not whole yet (their last element not journaled): why theirs wait; none if whole.
  mutable std::unordered_map<JobId, std::optional<PendingReason>> array_unwhole_;
  std::vector<std::pair<uint32_t, uint64_t>> held_;  // taken out of the pool for reservations (free when taken)
  TimePoint first_reservation_ = 0;
  std::unordered_map<uint32_t, uint64_t> promised_;
  std::vector<Nomination> nominations_;
  std::unordered_set<JobId> victim_set_;
  std::unordered_map<JobId, std::vector<ReplicaPlacement>> resized_;
  // GPUs released in the workspace (SetReplicasReleased) by (leaf queue,
  // model), with quotas and several models: PlacesAdmitted's credit.
  std::map<std::pair<int32_t, int16_t>, int64_t> released_by_leaf_;
  bool quota_search_ = false;  // a QuotaEvictionSearch lives
  struct MayYield {
    int32_t leaf, priority;
    bool yes;
  };
  std::vector<MayYield> may_yield_;  // OwnQueueMayYield's, this cycle
  struct QuotaHold {
    int32_t leaf;
    PendingReason reason;
  };
  std::vector<QuotaHold> quota_held_;  // HoldQuota's, this cycle

  std::vector<Ending> endings_;
  bool endings_built_ = false;
  int32_t preemption_searches_ = 0;
  TimePoint wake_ = std::numeric_limits<TimePoint>::max();  // WakeAt's earliest
  std::vector<Failure> failures_;
  std::unordered_multimap<uint64_t, size_t> failure_index_;  // ShapeOf (the shape class) -> failures_ index
  // The last FindFailure: its answer holds for the next job of the same
  // spec while no failure was added and the held GPUs are the same.
  struct FindMemo {
    const JobSpec* spec = nullptr;
    bool ends_first = false;
    size_t held = 0;
    size_t failures = 0;
    const Failure* found = nullptr;
  };
  mutable FindMemo find_memo_;

  std::vector<const std::string*> mig_demand_;
  bool mig_demand_built_ = false;
  std::vector<TypicalTask> typical_;
  bool typical_built_ = false;
};

}  // namespace rota::sched
