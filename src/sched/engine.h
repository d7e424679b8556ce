// Scheduler: the engine. A pure function of its inputs: a Snapshot and a
// Profile in, decisions out. No I/O, no clock, no threads of its own; the
// server and the simulator are two drivers of the same RunCycle.
//
// One cycle: order the pending jobs (JobOrder plugins), then for each job
// build its request, let the placer bind every replica inside a Txn, and
// commit the gang only if every JobReady plugin agrees; otherwise roll back
// and explain why it waits. Capacity bound earlier in the cycle is taken for
// later jobs. A job whose shape already failed this cycle fails again without
// a search (nothing is freed within a cycle).
//
// Thread-safety: one owner. Reuses its memory across cycles: at steady state
// a placement does not allocate.
//
// Example:
//   ROTA_ASSIGN_OR_RETURN(auto scheduler, Scheduler::Create(config.profile));
//   CycleResult result;
//   scheduler->RunCycle(state.GetSnapshot(), &result);
#pragma once

#include <memory>
#include <unordered_map>
#include <unordered_set>
#include <string>
#include <vector>

#include "sched/fgd.h"
#include "sched/place_context.h"
#include "sched/queues.h"
#include "sched/reason.h"
#include "sched/registry.h"
#include "sched/workspace.h"

namespace rota::sched {

// A gang bound this cycle: replicas [first, first + count) of CycleResult::replicas.
struct Placed {
  JobId job;
  uint32_t first = 0;
  uint32_t count = 0;
};

struct Waiting {
  JobId job;
  PendingReason reason;
};

// GPUs held for a blocked job from the time enough running jobs will have
// ended (by their time limits). Lower jobs backfill around it: on other GPUs,
// or on these if their own time limit ends before `start`.
struct Reservation {
  JobId job;
  TimePoint start = 0;
  std::vector<ReplicaPlacement> replicas;
};

// Evict `victim` (a whole gang) to make room for `preemptor`: send it its
// checkpoint signal, wait the grace period, stop it and requeue it.
struct Preemption {
  JobId victim;
  JobId preemptor;
  std::string reason;
  std::string signal;
  Duration grace = 0;
};

// Re-partition an idle MIG GPU (none of its instances in use) to `layout`
// (core/mig.h text), so that a pending MIG request fits. Applied before the
// placements that use it.
struct Reconfiguration {
  NodeId node;
  int32_t gpu = 0;
  std::string layout;
  std::string before;  // the layout it replaces
};

// Change a running elastic job's gang to `replicas` (its whole new
// placement): shrink it (down to its min_replicas) so that `for_job` fits, or
// grow it into GPUs nothing else wanted this cycle.
struct Resize {
  JobId job;
  std::vector<ReplicaPlacement> replicas;
  std::string reason;
  JobId for_job;  // the job a shrink makes room for (none for a growth)
};

struct CycleResult {
  uint64_t revision = 0;  // of the snapshot the decisions were made on
  std::vector<Placed> placed;
  std::vector<ReplicaPlacement> replicas;
  std::vector<Waiting> pending;       // Unschedulable: may fit later
  std::vector<Waiting> unresolvable;  // can never fit this cluster: reject
  std::vector<Reservation> reservations;
  std::vector<Preemption> preemptions;
  std::vector<Reconfiguration> reconfigurations;
  std::vector<Resize> resizes;  // applied before placements
  void Clear() {
    placed.clear();
    replicas.clear();
    pending.clear();
    unresolvable.clear();
    reservations.clear();
    preemptions.clear();
    reconfigurations.clear();
    resizes.clear();
  }
};

class Scheduler {
 public:
  static StatusOr<std::unique_ptr<Scheduler>> Create(const ProfileConfig& config,
                                                     const Registry& registry = BuiltinRegistry());

  // Decides placements for the snapshot's pending jobs at time `now`: the
  // first `reservation_depth` blocked jobs (in order) get reservations from
  // the running jobs' time limits, and later jobs backfill around them.
  // `out` is cleared first.
  void RunCycle(const Snapshot& snap, TimePoint now, CycleResult* out);
  // Without a time: greedy in order, no reservations (what-if tools and
  // throughput benchmarks that have no clock).
  void RunCycle(const Snapshot& snap, CycleResult* out);

  // Queues, quotas and priority classes from the cluster config. With queues,
  // jobs go in priority order, then the queue with the lowest weighted share
  // first, then the profile's job orders; a placement is admitted only within
  // its queues' guarantees plus borrowing limits.
  void SetQueues(const ClusterConfig& config) { book_.Configure(config); }
  // Decayed past usage per leaf queue (average GPUs over the decay window).
  void SetUsageHistory(const std::map<std::string, double>& average_gpus) { book_.SetHistory(average_gpus); }

  // With a time, a blocked job may evict preemptible running gangs: of lower
  // priority in its queue, or borrowing from a queue that is over its
  // guarantee while the job's queue is under its own. A gang is never
  // evicted before it has run `min_runtime`.
  void set_preemption(bool on) { preemption_ = on; }
  void set_min_runtime(Duration d) { min_runtime_ = d; }
  // Pending jobs examined per cycle, in order (0 = all). A Slurm-style limit
  // (its backfill tests at most bf_max_job_test = 500 jobs a pass).
  void set_max_jobs_per_cycle(int32_t n) { max_jobs_ = n; }
  // Blocked jobs per cycle that may search for victims (each search places
  // the job a few times).
  void set_max_preemption_searches(int32_t n) { max_preemption_searches_ = n; }
  // At most this many evictions of one job in any hour.
  void set_max_preemptions_per_hour(int32_t n) { max_per_hour_ = n; }
  // GPUs freed by evicting gangs for a job are held for it (nothing else
  // takes them) while more of its victims are stopping, and for this long
  // after the last of them was freed; once all have stopped and it still
  // does not fit, they are let go.
  void set_nomination_ttl(Duration d) { nomination_ttl_ = d; }

  // Blocked jobs that get a reservation each cycle (default 1; 0 = none).
  void set_reservation_depth(int32_t depth) { reservation_depth_ = depth; }
  // A blocked job whose earliest start is further than this gets no
  // reservation (0 = no limit): far-off starts should not hold GPUs idle.
  void set_reservation_window(Duration window) { reservation_window_ = window; }
  // Depth and window from the config's `backfill:`.
  void SetBackfill(const ClusterConfig& config) {
    reservation_depth_ = config.reservation_depth;
    reservation_window_ = config.reservation_window;
  }

  // Checks a job against the cluster as if it were empty: OK, or the reason
  // no node or domain could ever hold it (for rejecting at submission).
  PendingReason CheckResolvable(const Snapshot& snap, const JobRecord& job);

  const Profile& profile() const { return profile_; }

 private:
  explicit Scheduler(Profile profile);
  // Fills request_ for `job`; false (with *why) if it cannot be scheduled at all.
  bool BuildRequest(const Snapshot& snap, const JobRecord& job, PendingReason* why);
  bool SameShape(const JobRecord& a, const JobRecord& b) const;
  void Run(const Snapshot& snap, const TimePoint* now, CycleResult* out);
  // Tries the current request; rolls back unless `keep`. True if it fits.
  bool TryPlace(bool keep);
  // Places every replica of the current (sharing) request: fractions best fit
  // onto GPUs already shared, then free ones; MIG slices onto a free instance
  // of their profile on the fullest MIG GPU, else re-partition an idle MIG GPU
  // (a Reconfiguration). Commits into `out` or changes nothing and explains
  // (`never`: no node could ever hold it).
  bool PlaceFractional(const Topology& topo, CycleResult* out, PendingReason* why, bool* never);
  // Undoes the shares and reconfigurations recorded since `mark` (and the Txn).
  void RollbackShares(size_t mark);
  // Best MIG instance for `task` on `pos`: (gpu, start, used slots after); false if none.
  bool FindMigInstance(const TaskRequest& task, uint32_t pos, int32_t* gpu, int32_t* start, int32_t* fullness) const;
  // An idle MIG GPU on `pos` to re-partition for `task`, and its new layout.
  bool PlanMigLayout(const TaskRequest& task, uint32_t pos, int32_t* gpu, MigLayout* layout);
  // Whether a replica of `task` (a share or CPU only) could ever run on `pos`.
  bool ShareCouldFit(const TaskRequest& task, uint32_t pos) const;
  // Charges the current request's CPU and memory to `leaf` (dominant shares).
  void ChargeResources(int32_t leaf);
  struct FracUse {
    int32_t milli = 0;
    MemoryMiB memory = 0;
  };
  std::unordered_map<uint64_t, FracUse> frac_;  // (position << 6 | GPU) -> its shares, this cycle
  struct MigUse {
    MigLayout layout;
    uint8_t used = 0;  // start slots of instances in use
  };
  // (position << 6 | GPU) -> its MIG layout and instances in use, where this cycle changed them.
  std::unordered_map<uint64_t, MigUse> mig_;
  // A GPU's layout and instances in use as this cycle sees them (no copy;
  // valid until mig_ changes).
  struct MigView {
    const MigLayout* layout;
    uint8_t used;
  };
  MigView MigState(uint32_t pos, int32_t gpu) const;
  struct ShareUndo {
    bool mig;
    uint64_t key;
    FracUse frac;
    MigUse mig_use;
    bool existed;
  };
  std::vector<ShareUndo> share_undo_;
  // MIG profiles the cycle's pending jobs ask for, in order (a few dozen): a
  // re-partitioned GPU gets instances for them too.
  std::vector<const std::string*> mig_demand_;
  bool mig_demand_built_ = false;
  // The earliest time the current request fits, releasing running jobs in
  // order of their time-limit ends; fills *steps with where. False if never.
  bool EarliestStart(const Snapshot& snap, TimePoint now, TimePoint* start, std::vector<Txn::Step>* steps);
  // Finds the cheapest set of victims whose eviction lets the current request
  // fit; empty if none does. Leaves the workspace as it found it.
  // Gangs holding GPUs that one of `reservations` counts on are not candidates.
  std::vector<const JobRecord*> ChooseVictims(const Snapshot& snap, const JobRecord& job, TimePoint now,
                                              const std::vector<Reservation>* reservations);
  // Frees (or takes back) a running job's resources in the workspace, as if
  // it had ended; only its healthy GPUs come free. A job resized this cycle
  // frees what it holds after the resize.
  void SetReleased(const Topology& topo, const JobRecord& job, bool release);
  void SetReplicasReleased(const Topology& topo, const JobSpec& spec, const ReplicaPlacement* first, size_t count,
                           bool release);
  // Elastic jobs. The current request (an elastic job's) with fewer replicas:
  // the most that fit now, at least min_replicas; kept in the Txn. False (with
  // the request set to min_replicas) if not even that fits.
  bool PlaceSmaller(const JobRecord& job);
  // The current (elastic) request with k replicas of its one task group.
  void SetElasticReplicas(int32_t k);
  // The most replicas in [lo, hi] that fit now, placement and quota (0 = none);
  // leaves the workspace as it was.
  int32_t MostReplicasThatFit(const JobRecord& job, int32_t lo, int32_t hi);
  // Frees surplus replicas (above min) of running elastic jobs until the
  // current request fits, and places it (kept in the Txn); records the shrinks
  // in out->resizes. False (nothing changed) if that is not enough. Gangs of
  // lower priority give way at once; of equal priority, only once they have
  // run min_runtime since they started or last resized (never without a clock).
  bool ShrinkElastic(const Snapshot& snap, const JobRecord& job, const TimePoint* now, CycleResult* out);
  // Takes back the shrinks recorded in out->resizes from `mark` on.
  void UndoShrinks(const Snapshot& snap, size_t mark, CycleResult* out);
  // Grows running elastic jobs into the GPUs left free at the end of a cycle
  // (each at most once per min_runtime: a resize restarts the gang).
  void GrowElastic(const Snapshot& snap, const TimePoint* now, CycleResult* out);
  // Quota admission of the Txn's GPUs for `leaf` (no side effects).
  bool QuotaAdmits(const JobRecord& job, int32_t leaf);
  QueueBook::ModelGpus TxnGpusByModel() const;
  // Whether a running gang holds GPUs one of `reservations` counts on: evicting
  // or shrinking it would hand them to a job the reservation's owner goes before.
  static bool HoldsReservedGpus(const JobRecord& job, const std::vector<Reservation>& reservations);
  // Placements of elastic jobs resized this cycle (their current gangs).
  std::unordered_map<JobId, std::vector<ReplicaPlacement>> resized_;
  // GPU fractions: FGD (profile share_placement: fgd, the default) or best fit.
  bool fgd_ = true;
  const Snapshot* snap_ = nullptr;  // this cycle's
  std::vector<TypicalTask> typical_;  // FGD's typical task mix: the live jobs' shapes
  bool typical_built_ = false;
  void BuildTypicalMix();
  void ReleaseHeld();
  void RetakeHeld();

  Profile profile_;
  Workspace ws_;
  Txn txn_;
  PlaceContext ctx_;
  JobRequest request_;
  Labels empty_labels_;
  std::vector<const JobRecord*> order_;
  struct Failure {
    const JobRecord* job;
    PendingReason reason;
    bool unresolvable;
    bool ends_first;  // tried with the reserved GPUs available
    size_t held;      // how many held ranges existed then (more reservations, other room)
  };
  std::vector<Failure> failures_;  // shapes that failed this cycle
  std::unordered_multimap<uint64_t, size_t> failure_index_;  // ShapeHash -> failures_ index
  uint64_t ShapeHash(const JobSpec& spec) const;
  void RecordFailure(const JobRecord* job, const PendingReason& reason, bool unresolvable, bool ends_first);
  int32_t preemption_searches_ = 0;  // this cycle; bounded so a deep backlog cannot stall a cycle
  QueueBook book_;
  // Fair-share ordering: per leaf queue, positions into order_.
  std::vector<std::vector<uint32_t>> by_queue_;
  std::vector<size_t> queue_head_;
  std::vector<uint32_t> no_queue_;
  // Records why `job` waits (or is rejected) if adding `add` to its queue
  // would break a quota; true if so.
  bool RefuseOverQuota(const JobRecord& job, int32_t leaf, const QueueBook::ModelGpus& add, CycleResult* out);
  // The next job in fair-share order, or null when none is left.
  const JobRecord* NextFair();
  int32_t reservation_depth_ = 1;
  Duration reservation_window_ = 0;
  bool preemption_ = true;
  Duration min_runtime_ = 10 * 60 * kMicrosPerSecond;
  int32_t max_per_hour_ = 3;
  int32_t max_preemption_searches_ = 32;
  int32_t max_jobs_ = 0;
  Duration nomination_ttl_ = 60 * kMicrosPerSecond;
  // GPUs nominated for pending jobs (JobRecord::nominated), out of the free
  // pool this cycle for jobs of lower priority than their nominee.
  struct Nomination {
    const JobRecord* job;
    std::vector<std::pair<uint32_t, uint64_t>> held;
    bool released = false;  // given back to the pool
  };
  std::vector<Nomination> nominations_;
  void HoldNomination(Nomination& n, bool hold);
  std::vector<JobId> victims_;  // chosen this cycle
  std::unordered_set<JobId> victim_set_;
  std::unordered_multimap<JobId, JobId> making_room_for_;  // preemptor -> its preempting victims
  std::vector<const JobRecord*> running_;                  // this cycle's running jobs
  std::vector<const JobRecord*> elastic_running_;          // the elastic ones among them
  // GPUs taken out of the free pool for reservations this cycle (free when taken).
  std::vector<std::pair<uint32_t, uint64_t>> held_;
  TimePoint first_reservation_ = 0;
  // Every GPU a reservation of this cycle counts on (free now or not), by position.
  std::unordered_map<uint32_t, uint64_t> promised_;
  struct Ending {
    TimePoint end;
    const JobRecord* job;
  };
  std::vector<Ending> endings_;
};

}  // namespace rota::sched
