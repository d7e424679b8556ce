// The scheduling framework's extension points.
//
// Each extension point is a small interface; a plugin implements the ones it
// needs and is registered by name (registry.h). A profile enables plugins and
// weights scorers. The framework owns the combination rules, written once:
//   JobOrder  - the first plugin that does not tie decides; then JobId. A
//               preemptive one (las, tiresias, smallest-first, learned) also
//               lets a job it puts first evict running gangs of equal
//               priority. One (learned) may rank all jobs at once.
//   Filter    - AND: a node fits if every filter says so.
//   Score     - weighted sum of 0..100 scores; higher is better.
//   Placer    - exactly one; places a whole gang inside a Txn.
//   JobReady  - AND: the gang commits only if every one agrees.
//   SharePlacer - exactly one (fgd by default); ranks the GPUs of a node for
//               one replica's GPU fraction, the lowest cost first (ties go
//               to the GPU left fullest, then the lower node and GPU).
//   QueueOrder - exactly one (drf by default) when queues are configured;
//               which queue's head job goes next among equal priorities.
//   Admit     - AND (quota by default): a placement is admitted only if
//               every one agrees; one that refuses even on empty queues
//               rejects the job.
//   VictimOrder - exactly one (lost-work by default): what evicting a
//               running gang costs; preempt takes the cheapest first.
//
// Plugins read const views; only the Txn they are handed changes tentative
// allocations; only ClusterState::Apply commits anything.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "sched/fgd.h"

#include "core/cluster_state.h"

namespace rota::sched {

// One task group's per-replica request, resolved against the snapshot.
struct TaskRequest {
  uint16_t task = 0;  // index into JobSpec::tasks
  int32_t replicas = 0;
  int32_t gpus = 0;
  MilliCpu cpu = 0;
  MemoryMiB memory = 0;
  MemoryMiB gpu_memory = 0;  // least memory per GPU
  int16_t model = -1;        // interned gpu model; -1 = any
  bool model_missing = false;  // asked for a model no node has
  int32_t milli = 0;           // a share of one GPU per replica (gpu: {fraction}); 0 = whole GPUs
  MemoryMiB share_memory = 0;  // GPU memory bound of that share
  const std::string* mig = nullptr;  // a MIG profile per replica (gpu: {mig}); null = none
};

// A job's request for one cycle. Reused across jobs (no allocation per job).
struct JobRequest {
  const JobRecord* job = nullptr;
  std::vector<TaskRequest> tasks;
  const Labels* selector = nullptr;  // never null; may be empty
  // Topology constraint: a domain level (Topology::DomainLevelIndex), -1 for
  // "node"; the root level means "anywhere". `required` false = preferred.
  int32_t level = 0;
  bool required = false;
  int64_t total_gpus = 0;
  int64_t total_replicas = 0;
  bool fractional = false;  // some task asks for a GPU fraction or MIG slice (placed by the engine's sharing path)
  // For whole GPUs of no named model, with quotas: the models (bit =
  // interned index) its queue's limits could never admit it on, even with
  // the queues empty, and why for the first (its nodes are no candidates:
  // a placement there was refused as over quota for good, and the job was
  // cancelled, though another model's nodes would have held it).
  uint64_t quota_barred_models = 0;
  std::string quota_barred_why;
  // Models its queue cannot take it on now, skipped by a placement that
  // looks on other models' nodes (allocate's; 0 otherwise).
  uint64_t quota_skipped_models = 0;
  // Why it can never run where every node it could use is of a barred model.
  std::string QuotaBarredReason() const {
    return quota_barred_why + " (its queue's limits admit no replica of it on any GPU model that could hold it)";
  }
};

// A node's capacity during a cycle: the snapshot minus tentative allocations.
struct NodeView {
  const NodeState* node = nullptr;
  uint64_t free_mask = 0;  // healthy and unallocated GPUs
  MilliCpu free_cpu = 0;
  MemoryMiB free_memory = 0;
  bool schedulable = false;  // not drained
};

// Why a node does not fit, for pending reasons.
enum class Shortfall : uint8_t { kNone, kGpuModel, kGpuMemory, kSelector, kGpus, kCpu, kMemory, kUnavailable, kQueueLimit };

struct FilterResult {
  // kNever: no change of allocations could make this node fit (wrong model,
  // too small, selector mismatch); the job may be unresolvable.
  enum Fit : uint8_t { kFits, kNotNow, kNever } fit = kFits;
  Shortfall shortfall = Shortfall::kNone;
};

// What a scorer sees: a node's GPU capacity and its free GPUs before the
// replica lands. Scores are a function of these alone, so the placer can rank
// whole buckets of equivalent nodes instead of every node (the way YuniKorn
// keeps nodes sorted by its ordering policy); ties go to the lower position.
struct NodeFit {
  int32_t gpu_capacity = 0;
  int32_t gpu_free = 0;   // before placing
  int32_t gpus = 0;       // requested by the replica
};

class Plugin {
 public:
  virtual ~Plugin() = default;
  virtual std::string_view name() const = 0;
};

class JobOrderPlugin : public virtual Plugin {
 public:
  // < 0: a before b; > 0: b before a; 0: tie. `now` is the cycle's time (0
  // without a clock): orders by attained service read a running job's as of
  // then (JobRecord::AttainedAt).
  virtual int Compare(const JobRecord& a, const JobRecord& b, TimePoint now) const = 0;
  // Whether a blocked job this order puts ahead of a running gang of its own
  // queue and priority may evict it (least attained service: a newcomer goes
  // before a gang that has run long), within the preempt action's limits
  // (minimum run time, evictions per hour, no eviction cycles).
  virtual bool preemptive() const { return false; }
  // Whether Compare of two pending jobs reads only those two records (not
  // the time, not state outside them): then a pending job keeps its place
  // in the order until it or a job it is compared with changes, and the
  // session keeps the order between cycles, re-sorting only what changed.
  virtual bool stable() const { return false; }
  // Whether Compare never reads the time (`now`): of any two jobs, pending
  // or running, the order puts the same first until one of them changes.
  // A cycle whose every order is timeless (or the ranker, which says when
  // its ranks may change) can say when its decisions may next change
  // (CycleResult::unchanged_until).
  virtual bool timeless() const { return false; }
  // Whether the order is by one number a job has: Key(a, now) < Key(b, now)
  // exactly when Compare(a, b, now) < 0 (equal keys: a tie). The session then
  // reads each job's key once a cycle and sorts on the keys, instead of a
  // virtual Compare per comparison (a deep queue's sort is most of a cycle).
  virtual bool keyed() const { return false; }
  virtual int64_t Key(const JobRecord& /*job*/, TimePoint /*now*/) const { return 0; }

  // A JobOrder that ranks the cycle's jobs together rather than two at a
  // time (the learned order reads the history and every job of a sweep).
  // Once a cycle, Rank gives each of `jobs` (the pending and the running)
  // a number, lower first; the session compares those and never calls
  // Compare. `state` is this plugin's, made by NewRankState and kept by the
  // session between cycles (caches). A profile has at most one.
  struct RankState {
    virtual ~RankState() = default;
    // Rank's: no job's rank changes before this time while the state
    // stays as it is (0: it may at any time). Rank sets it every cycle.
    TimePoint changes_at = 0;
  };
  virtual bool ranks() const { return false; }
  virtual std::unique_ptr<RankState> NewRankState() const { return nullptr; }
  virtual void Rank(const Snapshot& /*snap*/, TimePoint /*now*/, const std::vector<const JobRecord*>& jobs,
                    RankState* /*state*/, std::vector<double>* ranks) const {
    ranks->assign(jobs.size(), 0);
  }
  // Whether a pending job ranked `job` goes far enough ahead of a running
  // one ranked `running` (job < running) to evict it, if preemptive;
  // `victim`: what evicting the running gang would cost (GPU-seconds,
  // counting a CPU-only gang as one GPU). As a gang runs on without saving
  // (its unsaved and run growing by the same amount) the answer may only
  // turn from yes to no: the engine counts on that to say when its
  // decisions may next change (CycleResult::unchanged_until).
  struct VictimWork {
    double unsaved = 0;  // it would lose: its GPUs x the time since it last saved (0 if it saves on the signal)
    double run = 0;      // its GPUs x the time since it started
    bool larger = false;  // it holds more GPUs than the job asks for
  };
  virtual bool RankEvicts(double job, double running, const VictimWork& /*victim*/) const { return job < running; }
};

class FilterPlugin : public virtual Plugin {
 public:
  virtual FilterResult Filter(const JobRequest& job, const TaskRequest& task, const NodeView& node) const = 0;
};

class ScorePlugin : public virtual Plugin {
 public:
  // 0..100.
  virtual int32_t Score(const NodeFit& fit) const = 0;
};

class PlaceContext;

class PlacerPlugin : public virtual Plugin {
 public:
  // Places every replica of `job` through ctx.Bind, or returns false. The
  // framework rolls back whatever was bound if the gang is not complete.
  virtual bool Place(PlaceContext& ctx, const JobRequest& job) const = 0;
};

class JobReadyPlugin : public virtual Plugin {
 public:
  virtual bool Ready(const JobRequest& job, int64_t placed_replicas) const = 0;
};

// What a share placer sees of one node: each GPU's milli-GPU left for
// shares (0 when it takes none: held whole, MIG or unhealthy), the node's
// free CPU, and the live jobs' typical task mix (the shapes the next
// placements will likely ask for).
struct ShareNode {
  const int32_t* left = nullptr;  // [gpus]
  int32_t gpus = 0;
  MilliCpu free_cpu = 0;
  int16_t model = -1;
  const std::vector<TypicalTask>* mix = nullptr;  // when needs_task_mix()
};

class SharePlacerPlugin : public virtual Plugin {
 public:
  // Whether Costs reads ShareNode::mix (built once a cycle, on first use).
  virtual bool needs_task_mix() const { return false; }
  // For each GPU g with candidate[g], the cost of giving it a share of
  // `milli` (and `cpu` of the node's): written to cost[g]. Lower is better.
  virtual void Costs(const ShareNode& node, const bool* candidate, int32_t milli, MilliCpu cpu, double* cost) const = 0;
};

class QueueBook;

class AdmitPlugin : public virtual Plugin {
 public:
  // Whether a placement adding `add` GPUs (per interned model) to leaf queue
  // `leaf` may be admitted now (false, with *why, if not). With `empty`, as
  // if the queues held nothing: false then means never (the job is rejected).
  virtual bool Admits(const QueueBook& book, int32_t leaf, const std::vector<std::pair<int16_t, int64_t>>& add,
                      bool may_borrow, bool empty, std::string* why) const = 0;
};

class VictimOrderPlugin : public virtual Plugin {
 public:
  // What evicting running gang `victim` at `now` costs; the cheapest go first.
  virtual int64_t Cost(const JobRecord& victim, TimePoint now) const = 0;
};

class QueueOrderPlugin : public virtual Plugin {
 public:
  // < 0: queue a's head job before queue b's; > 0: after; 0: tie (the
  // earlier job in job order goes first). Both heads have equal priority.
  virtual int Compare(const QueueBook& book, int32_t a, int32_t b) const = 0;
};

}  // namespace rota::sched
