// ClusterState: nodes, jobs and allocations, mutated only by Apply(Event).
// Snapshot: an immutable view of the state at one revision.
//
// Apply validates first and changes nothing on error (a bind to a GPU that is
// taken is FailedPrecondition). Snapshot() is O(1): the state is copy-on-
// write, so the first Apply after a snapshot copies the node table and the
// job index (job records themselves are shared until changed).
//
// Thread-safety: ClusterState has one owner. A Snapshot may be read by any
// number of threads while the owner keeps applying events.
//
// Example:
//   ClusterState state;
//   ROTA_RETURN_IF_ERROR(state.Apply(NodeAdded{spec}));
//   Snapshot snap = state.GetSnapshot();
#pragma once

#include <algorithm>
#include <array>
#include <bit>
#include <functional>
#include <iterator>
#include <map>
#include <atomic>
#include <memory>
#include <mutex>
#include <optional>
#include <shared_mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/event.h"
#include "core/mig.h"
#include "core/topology.h"

namespace rota {

// kPreempting: still holds its GPUs while its tasks checkpoint and stop.
enum class JobState { kPending, kRunning, kPreempting, kSucceeded, kFailed, kCancelled };
std::string_view JobStateName(JobState state);
// Not ended: waiting, running or stopping.
constexpr bool Live(JobState s) { return s == JobState::kPending || s == JobState::kRunning || s == JobState::kPreempting; }

// A node with its live state.
struct NodeState {
  NodeId id;
  NodeSpec spec;
  int16_t model = -1;          // interned gpu_model, -1 for none
  uint64_t all_mask = 0;       // bits 0..gpus-1
  uint64_t healthy_mask = 0;   // GPUs that may take work
  uint64_t allocated_mask = 0;  // whole GPUs held
  // GPUs shared by fractional replicas: their milli-GPU and memory in use
  // (index = GPU; empty until the node has a shared GPU). A shared GPU is not
  // free for whole-GPU work.
  uint64_t shared_mask = 0;
  std::vector<int32_t> shared_milli;
  std::vector<MemoryMiB> shared_memory;
  // GPUs in MIG mode (never free whole): their current layouts and, per GPU,
  // the start slots (bit s) of the instances in use. Sized to the GPUs when
  // the node has any MIG GPU; mig_geometry is null when it has none.
  uint64_t mig_mask = 0;
  const MigGeometry* mig_geometry = nullptr;
  std::vector<MigLayout> mig_layout;
  std::vector<uint8_t> mig_used;
  MilliCpu cpu_allocated = 0;
  MemoryMiB memory_allocated = 0;
  bool drained = false;
  std::string drain_reason;  // why, as the admin gave it ("" = none)
  bool drained_by_agent = false;  // its agent asked for the drain (NodeDrainChanged::by_agent)
  bool lost = false;  // its agent stopped heartbeating
  std::string agent;  // the instance of the agent that registered it last ("": none, or an older agent)
  std::string agent_address;  // and the address it gave (NodeAgentChanged::address)

  bool schedulable() const { return !drained && !lost; }
  uint64_t free_mask() const { return healthy_mask & ~allocated_mask & ~shared_mask & ~mig_mask; }
  // GPUs some job uses: whole, shared by fractions, or with a MIG instance in use.
  uint64_t busy_mask() const {
    uint64_t m = allocated_mask | shared_mask;
    for (int32_t g = 0; g < static_cast<int32_t>(mig_used.size()); ++g) {
      if (mig_used[g] != 0) m |= uint64_t{1} << g;
    }
    return m;
  }
  int32_t milli_used(int32_t gpu) const { return shared_milli.empty() ? 0 : shared_milli[gpu]; }
  MemoryMiB memory_shared(int32_t gpu) const { return shared_memory.empty() ? 0 : shared_memory[gpu]; }
};

struct JobRecord {
  JobId id;
  // What was submitted, shared: by the elements of one array (a million
  // jobs from one submission hold one spec) and by the copies of this record
  // that other states keep. spec() reads it; SetSpec replaces this record's
  // alone.
  const JobSpec& spec() const { return *shared_spec; }
  void SetSpec(JobSpec s) { shared_spec = std::make_shared<const JobSpec>(std::move(s)); }
  void SetSpec(std::shared_ptr<const JobSpec> s) { shared_spec = std::move(s); }
  std::shared_ptr<const JobSpec> shared_spec = EmptySpec();
  // Its spec's JobSpec::Bytes, an array element's share of its array's
  // (the state sets it with the spec: Snapshot::PendingBytesOfUser).
  int64_t spec_bytes = 0;
  static const std::shared_ptr<const JobSpec>& EmptySpec() {
    static const std::shared_ptr<const JobSpec> kEmpty = std::make_shared<const JobSpec>();
    return kEmpty;
  }
  std::string user;
  std::string request_id;  // the submission's Idempotency-Key ("" = none)
  // A job array's element: the array's id (its first job's), its index in it
  // (array_first_index + id - array) and the array's size; array 0 for a job
  // submitted alone. At most array_max_running of an array's elements run
  // (or stop) at once; 0 = no limit.
  JobId array;
  int64_t array_count = 0;
  int64_t array_first_index = 0;
  int32_t array_max_running = 0;
  // The jobs submitted with it (RunHistory: same queue and GPU count, a
  // minute apart), by its first job's id: the learned order's sweep.
  JobId sweep;
  int64_t array_index() const { return array_first_index + static_cast<int64_t>(id.value() - array.value()); }
  JobState state = JobState::kPending;
  TimePoint submitted_at = 0;
  TimePoint started_at = 0;
  TimePoint finished_at = 0;
  std::vector<ReplicaPlacement> placement;  // where it runs or ran (kept after it ends)
  std::string end_reason;                   // why it was cancelled or failed
  // Its ended attempts, the last kMaxAttempts (the job's timeline).
  static constexpr size_t kMaxAttempts = 16;
  std::vector<JobAttempt> attempts;
  // Held (pending, not scheduled until released: JobHoldChanged), and by whom.
  bool held = false;
  std::string held_by;
  bool held_by_admin = false;
  // While preempting: it stops to be restarted, not evicted (JobPreempting's
  // restart), and whether that restart counts against its policy.
  bool restarting = false;
  bool restart_failed = false;
  int32_t restarts = 0;                     // times requeued after it started
  // Of those, the restarts its restart policy made (after a failed attempt;
  // with `always`, after any exit): what restart.max_restarts counts
  // (preemptions, lost nodes and requeues by hand do not).
  int32_t failed_restarts = 0;
  // Run time of its ended attempts (a running attempt adds now - started_at):
  // the attained service that least-attained-service orders read.
  Duration attained = 0;
  Duration AttainedAt(TimePoint now) const {
    return attained + ((state == JobState::kRunning || state == JobState::kPreempting) && now > started_at ? now - started_at : 0);
  }
  std::vector<ReplicaPlacement> last_placement;  // where the attempt before a requeue ran
  JobId preempted_for;          // while preempting: the job it makes room for
  TimePoint preempting_since = 0;
  std::vector<TimePoint> preempted_at;  // recent evictions (the last few), against thrash
  std::vector<JobId> preempted_by;      // the jobs those evictions made room for (same order)
  std::string last_requeue_reason;
  TimePoint last_checkpoint_at = 0;  // 0 = none reported; kept across requeues
  std::string last_checkpoint_path;
  // GPUs freed by evicting gangs for this (pending) job: nominated for it,
  // so that nothing else takes them while the rest of its room is being made
  // (cleared when it binds; the engine lets a nomination lapse after a while).
  std::vector<ReplicaPlacement> nominated;
  TimePoint nominated_at = 0;
  int32_t resizes = 0;       // elastic: times its gang was resized
  TimePoint resized_at = 0;  // the last resize (0 = never)
  std::string last_resize_reason;
  // Elastic: failed ranks restarted alone (the others kept running), and the
  // attempt each of those ranks is on; the gang's attempt for the rest.
  int32_t rank_restarts = 0;
  std::map<uint32_t, int32_t> rank_attempt;
  int32_t gang_attempt = 0;
  // A service: the replicas its autoscaler wants (0 = none decided: its
  // min), when and why it last decided.
  int32_t desired_replicas = 0;
  TimePoint scaled_at = 0;
  std::string last_scale_reason;
  TimePoint scaled_down_at = 0;  // its last decision to go down (0 = never)
  // A service: its spec was last replaced (rota apply) at this attempt();
  // a replica on an attempt up to it runs the spec from before (-1: never).
  int32_t spec_attempt = -1;
  int32_t spec_updates = 0;
  bool OnOldSpec(uint32_t replica) const { return ReplicaAttempt(replica) <= spec_attempt; }
  int32_t DesiredReplicas() const {
    return desired_replicas > 0 ? desired_replicas : spec().service.min_replicas;
  }
  // A generation that grows with every restart, resize and rank restart.
  int32_t attempt() const { return restarts + resizes + rank_restarts; }
  // The attempt replica `replica` runs as: a new one is a new process.
  // When its running gang last saved: its start, or its last checkpoint if
  // that came later (one of an earlier attempt saved nothing of this one).
  TimePoint SavedAt() const { return std::max(started_at, last_checkpoint_at); }
  // The GPUs its placement holds, its shares of GPUs (fractions, MIG
  // slices) summed and rounded up: what fair share counts it holding.
  int64_t HeldGpus() const;
  // The same for `replicas` of this job (a past attempt's placement).
  int64_t GpusOf(const std::vector<ReplicaPlacement>& replicas) const;
  // The GPUs fair share counts each of its recorded attempts at: those it
  // holds (running, or the last attempt of an ended job), else where it ran
  // before its requeue (an elastic job's resizes are not recorded).
  int64_t AttemptGpus() const {
    const int64_t holds = HeldGpus();
    return holds > 0 ? holds : GpusOf(last_placement);
  }
  int32_t ReplicaAttempt(uint32_t replica) const {
    auto it = rank_attempt.find(replica);
    return it != rank_attempt.end() ? it->second : gang_attempt;
  }
};

// The nodes of a state, each shared between the snapshots that have not
// changed it, in chunks of kChunk: copying a state copies one pointer per
// chunk, and a write copies only the chunk and the node it changes
// (copy-on-write), so a batch that touches a few nodes of 12,500 costs a
// few node copies and 49 pointers, not 12,500 of each. Reads look like a
// vector of NodeState.
class NodeTable {
 public:
  static constexpr size_t kChunk = 256;
  using Chunk = std::vector<std::shared_ptr<NodeState>>;

  class const_iterator {
   public:
    using iterator_category = std::random_access_iterator_tag;
    using value_type = NodeState;
    using difference_type = std::ptrdiff_t;
    using pointer = const NodeState*;
    using reference = const NodeState&;
    const_iterator() = default;
    const_iterator(const NodeTable* table, size_t i) : table_(table), i_(i) {}
    reference operator*() const { return (*table_)[i_]; }
    pointer operator->() const { return &(*table_)[i_]; }
    const_iterator& operator++() {
      ++i_;
      return *this;
    }
    const_iterator operator++(int) { return const_iterator(table_, i_++); }
    difference_type operator-(const const_iterator& o) const {
      return static_cast<difference_type>(i_) - static_cast<difference_type>(o.i_);
    }
    const_iterator operator+(difference_type n) const { return const_iterator(table_, i_ + n); }
    bool operator==(const const_iterator& o) const { return i_ == o.i_; }
    bool operator!=(const const_iterator& o) const { return i_ != o.i_; }

   private:
    const NodeTable* table_ = nullptr;
    size_t i_ = 0;
  };

  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  const NodeState& operator[](size_t i) const { return *(*chunks_[i / kChunk])[i % kChunk]; }
  const_iterator begin() const { return const_iterator(this, 0); }
  const_iterator end() const { return const_iterator(this, size_); }
  void push_back(NodeState n) {
    if (size_ % kChunk == 0) chunks_.push_back(std::make_shared<Chunk>());
    MutChunk(size_ / kChunk).push_back(std::make_shared<NodeState>(std::move(n)));
    ++size_;
  }
  // The node to change, copied first (and its chunk) if another state
  // shares it. Only the state's writer calls this (the cluster state's one
  // thread).
  NodeState& Mut(size_t i) {
    std::shared_ptr<NodeState>& node = MutChunk(i / kChunk)[i % kChunk];
    if (node.use_count() > 1) {
      node = std::make_shared<NodeState>(*node);
    } else {
      // (use_count is a relaxed load: order the last reader's reads, on the
      // thread that dropped its snapshot, before this write.)
      std::atomic_thread_fence(std::memory_order_acquire);
    }
    return *node;
  }

 private:
  Chunk& MutChunk(size_t c) {
    if (chunks_[c].use_count() > 1) {
      chunks_[c] = std::make_shared<Chunk>(*chunks_[c]);
    } else {
      std::atomic_thread_fence(std::memory_order_acquire);  // (as in Mut)
    }
    return *chunks_[c];
  }

  std::vector<std::shared_ptr<Chunk>> chunks_;
  size_t size_ = 0;
};

// Jobs by id, in id order, shared between states in chunks of kChunk
// consecutive ids (ids are issued densely): copying a state copies one
// pointer per chunk, and a write copies only the chunk it changes. With a
// million jobs a batch that changes a few thousand costs a few chunks, not
// a million map nodes. Reads look like a std::map<JobId, ...>. (128: a
// write copies 4 KiB, and the engine re-reads one chunk's live jobs; 1,024
// made the whole Philly replay 10% slower, and 64 was no faster than 128.)
class JobTable {
 public:
  static constexpr uint64_t kChunk = 128;
  using value_type = std::pair<const JobId, std::shared_ptr<const JobRecord>>;

  class const_iterator {
   public:
    using iterator_category = std::forward_iterator_tag;
    using value_type = JobTable::value_type;
    using difference_type = std::ptrdiff_t;
    using pointer = const value_type*;
    using reference = const value_type&;
    const_iterator() = default;
    reference operator*() const;
    pointer operator->() const { return &**this; }
    const_iterator& operator++() {
      ++slot_;
      Settle();
      return *this;
    }
    bool operator==(const const_iterator& o) const { return chunk_ == o.chunk_ && slot_ == o.slot_; }
    bool operator!=(const const_iterator& o) const { return !(*this == o); }

   private:
    friend class JobTable;
    const_iterator(const JobTable* table, size_t chunk, size_t slot) : table_(table), chunk_(chunk), slot_(slot) {
      Settle();
    }
    // Moves to the first occupied slot at or after here (or the end).
    void Settle();
    const JobTable* table_ = nullptr;
    size_t chunk_ = 0;
    size_t slot_ = 0;
  };

  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  const_iterator begin() const { return const_iterator(this, 0, 0); }
  const_iterator end() const { return const_iterator(this, chunks_.size(), 0); }
  const_iterator find(JobId id) const;
  // The first job with an id above `id`.
  const_iterator upper_bound(JobId id) const;
  size_t count(JobId id) const { return find(id) != end() ? 1 : 0; }
  // The largest id held (JobId() if none).
  JobId max_id() const;
  // Adds or replaces; copies the chunk first if another state shares it.
  void Put(JobId id, std::shared_ptr<const JobRecord> job);
  void Erase(JobId id);

  // Chunk by chunk (chunk c: ids c * kChunk up to (c + 1) * kChunk), for a
  // reader that keeps what it derived from each: every write gives the
  // chunk it changes a version no chunk of any table had before (a chunk
  // another table shares is copied first; one no other shares is changed
  // in place), so two tables hold chunks of the same version only if they
  // hold the same, unchanged chunk (records are immutable). The reader need
  // not keep the older table alive: what it derived from a chunk whose
  // version is unchanged points into the table it reads now.
  size_t chunk_count() const { return chunks_.size(); }
  uint64_t chunk_version(size_t c) const { return chunks_[c] != nullptr ? chunks_[c]->version : 0; }  // 0: none of its ids held
  // f(id, record) for the jobs of chunk c, in id order.
  template <typename F>
  void ForEachInChunk(size_t c, F&& f) const;
  // f(id, record) for the jobs this table holds and `other` does not, in id
  // order, by the chunks' occupancy (the jobs both hold are never read: the
  // ended jobs among a million live ones cost a word per 64 ids).
  template <typename F>
  void ForEachNotIn(const JobTable& other, F&& f) const;

 private:
  struct Chunk {
    std::array<std::optional<value_type>, kChunk> slots;
    // Which slots hold a job: iterating a chunk whose jobs are mostly gone
    // (old long jobs keep it alive) skips 64 empty slots a step.
    std::array<uint64_t, kChunk / 64> occupied{};
    size_t used = 0;
    uint64_t version = 0;  // chunk_version
  };
  // Chunk `c` to change (created or copied as needed), with a new version.
  Chunk& Mut(size_t c);
  std::vector<std::shared_ptr<Chunk>> chunks_;  // null: no job in that range
  size_t size_ = 0;
};

template <typename F>
void JobTable::ForEachInChunk(size_t c, F&& f) const {
  const Chunk* chunk = chunks_[c].get();
  if (chunk == nullptr) return;
  for (size_t w = 0; w < chunk->occupied.size(); ++w) {
    for (uint64_t bits = chunk->occupied[w]; bits != 0; bits &= bits - 1) {
      const value_type& slot = *chunk->slots[w * 64 + static_cast<size_t>(std::countr_zero(bits))];
      f(slot.first, slot.second);
    }
  }
}

template <typename F>
void JobTable::ForEachNotIn(const JobTable& other, F&& f) const {
  for (size_t c = 0; c < chunks_.size(); ++c) {
    const Chunk* chunk = chunks_[c].get();
    if (chunk == nullptr) continue;
    const Chunk* theirs = c < other.chunks_.size() ? other.chunks_[c].get() : nullptr;
    for (size_t w = 0; w < chunk->occupied.size(); ++w) {
      for (uint64_t bits = chunk->occupied[w] & ~(theirs != nullptr ? theirs->occupied[w] : 0); bits != 0; bits &= bits - 1) {
        const value_type& slot = *chunk->slots[w * 64 + static_cast<size_t>(std::countr_zero(bits))];
        f(slot.first, slot.second);
      }
    }
  }
}

inline JobTable::const_iterator::reference JobTable::const_iterator::operator*() const {
  return *table_->chunks_[chunk_]->slots[slot_];
}

class Snapshot {
 public:
  uint64_t revision() const { return data_->revision; }
  const NodeTable& nodes() const { return data_->nodes; }
  const NodeState& node(NodeId id) const { return data_->nodes[id.value()]; }
  const NodeState* FindNode(const std::string& name) const;
  // Built on first use after a node was added (once, whichever thread asks).
  const Topology& topology() const;
  const std::vector<std::string>& gpu_models() const { return data_->gpu_models; }
  // -1 if no node has this model.
  int16_t ModelIndex(const std::string& model) const;
  const JobRecord* FindJob(JobId id) const;
  // Pending jobs in submission order.
  std::vector<const JobRecord*> PendingJobs() const;
  const JobTable& jobs() const { return data_->jobs; }
  int64_t PendingOfUser(const std::string& user) const;
  // What the user's pending jobs' specs hold (JobSpec::Bytes), an array's
  // shared spec counted once: each element counts its share.
  int64_t PendingBytesOfUser(const std::string& user) const;
  // A record's part of its spec (JobRecord::spec_bytes): the spec's bytes,
  // an array element's share of its array's.
  static int64_t SpecBytes(const JobSpec& spec, JobId array, int64_t array_count) {
    const int64_t elements = array.value() != 0 ? std::max<int64_t>(1, array_count) : 1;
    return (spec.Bytes() + elements - 1) / elements;
  }
  int64_t PendingInQueue(const std::string& queue) const;
  // Only the jobs that have not ended (pending, running, preempting).
  const JobTable& live_jobs() const { return data_->live; }
  // The live services (kind: service), in id order: a few among a million
  // jobs, so what looks after services does not walk every job.
  std::vector<const JobRecord*> LiveServices() const;
  // What the learned job order learns from (finished jobs' GPU-time, sweeps).
  const RunHistory& history() const { return *data_->history; }
  // Every job id below this was issued, as far as forgotten jobs tell (0:
  // none forgotten); the jobs held tell the rest.
  uint64_t issued_below() const { return data_->issued_below; }
  // The GPU-time forgotten jobs' attempts held, by queue and day (the last
  // kForgottenUsageDays before the latest forget): what fair share's
  // decayed usage adds for them.
  const ForgottenUsage& forgotten_usage() const { return *data_->forgotten_usage; }

 private:
  friend class ClusterState;
  struct Data {
    uint64_t revision = 0;
    std::vector<std::string> levels;
    NodeTable nodes;
    // Node names to ids, shared by every state of one lineage and only
    // ever added to (ids are positions in `nodes`): a state sees a name only
    // if its id is below its own node count, so a later (or undone) add is
    // invisible to it, and adding a node costs one insert, not a copy.
    struct NameIndex {
      mutable std::shared_mutex mu;
      std::unordered_map<std::string, NodeId> ids;
    };
    std::shared_ptr<NameIndex> node_by_name = std::make_shared<NameIndex>();
    std::vector<std::string> gpu_models;
    // The topology of these nodes, built when first read: states that
    // differ only in allocations share it; adding a node starts a new one.
    struct LazyTopology {
      std::once_flag once;
      std::unique_ptr<const Topology> built;
    };
    std::shared_ptr<LazyTopology> topology = std::make_shared<LazyTopology>();
    // Per domain level: domain name -> its parent's name, to refuse a node
    // whose labels would put one rack in two spines. Shared between states
    // and copied only when a node joins or is relabelled: with 12,500
    // unlabelled nodes (each rack its own) it holds 12,500 names, and
    // copying it with every batch was most of a batch's copy.
    using DomainParents = std::vector<std::unordered_map<std::string, std::string>>;
    // (Always made non-const, so its writer may change it when it holds the
    // only reference.)
    std::shared_ptr<const DomainParents> domain_parent = std::make_shared<DomainParents>();
    JobTable jobs;
    JobTable live;  // the subset not ended
    std::vector<JobId> live_services;  // the live subset of kind service, sorted
    // Pending jobs per user and per (leaf) queue, kept as jobs change, for
    // the tenant limits.
    std::unordered_map<std::string, int64_t> pending_by_user;
    std::unordered_map<std::string, int64_t> pending_by_queue;
    // And the bytes of the user's pending specs (PendingBytes).
    std::unordered_map<std::string, int64_t> pending_bytes_by_user;
    // Shared between states; copied by the first change after a copy
    // (always made non-const, as domain_parent).
    std::shared_ptr<const RunHistory> history = std::make_shared<RunHistory>();
    uint64_t issued_below = 0;  // JobsForgotten's next_id, the largest: ids below it were issued
    // What forgotten jobs ran (JobsForgotten), shared as `history`.
    std::shared_ptr<const ForgottenUsage> forgotten_usage = std::make_shared<ForgottenUsage>();
  };
  explicit Snapshot(std::shared_ptr<const Data> data) : data_(std::move(data)) {}
  std::shared_ptr<const Data> data_;
};

class ClusterState {
 public:
  // `levels`: topology level names, innermost first (see Topology).
  explicit ClusterState(std::vector<std::string> levels = {"nvlink", "node", "rack", "spine"});
  // Copies are independent states (their own node-name index).
  ClusterState(const ClusterState& other);
  ClusterState& operator=(const ClusterState& other);
  ClusterState(ClusterState&&) = default;
  ClusterState& operator=(ClusterState&&) = default;

  Status Apply(const Event& event);
  Snapshot GetSnapshot();
  uint64_t revision() const { return data_->revision; }
  // Puts the state back to `snap` (taken from this state earlier): what a
  // batch applied is undone when its journal write fails. Copy-on-write
  // makes this O(1); the next Apply copies before it writes.
  void Restore(const Snapshot& snap);

 private:
  Snapshot::Data& Mutable();
  // The job or node an event names, or NotFound ("no job 7", "no node named 'x'").
  StatusOr<std::shared_ptr<const JobRecord>> JobOf(JobId id) const;
  StatusOr<uint32_t> NodeIndexOf(const std::string& name) const;
  Status ApplyOne(const NodeAdded& e);
  Status ApplyOne(const NodeDrainChanged& e);
  Status ApplyOne(const GpuHealthChanged& e);
  Status ApplyOne(const JobSubmitted& e);
  Status ApplyOne(const JobsSubmitted& e);
  Status ApplyOne(const JobBound& e);
  Status ApplyOne(const JobFinished& e);
  Status ApplyOne(const JobCancelled& e);
  Status ApplyOne(const JobHoldChanged& e);
  Status ApplyOne(const JobRequeued& e);
  Status ApplyOne(const NodeLostChanged& e);
  Status ApplyOne(const NodeAgentChanged& e);
  Status ApplyOne(const JobPreempting& e);
  Status ApplyOne(const JobCheckpointed& e);
  Status ApplyOne(const GpuReconfigured& e);
  Status ApplyOne(const NodeMigChanged& e);
  Status ApplyOne(const NodeLabelsChanged& e);
  Status ApplyOne(const JobHistory& e);
  Status ApplyOne(const JobResized& e);
  Status ApplyOne(const RankRestarted& e);
  Status ApplyOne(const ServiceScaled& e);
  Status ApplyOne(const ServiceUpdated& e);
  Status ApplyOne(const RunHistoryState& e);
  Status ApplyOne(const JobsForgotten& e);
  // The state's history, copied first if another state shares it.
  static RunHistory& MutHistory(Snapshot::Data& d);
  // Checks `placement` for `job` against the current state, as if the GPUs,
  // CPU and memory of `replacing` (the job's own placement, on a resize) were
  // free. Error names what does not fit.
  Status CheckPlacement(const JobRecord& job, const std::vector<ReplicaPlacement>& placement,
                        const std::vector<ReplicaPlacement>& replacing, const std::string& who) const;
  void Release(const JobRecord& job);
  // `spec` for job `id` of `array`: an earlier element's if it holds the same.
  std::shared_ptr<const JobSpec> ArraySpec(JobId id, JobId array, const JobSpec& spec);
  // The array and spec ArraySpec gave last (a cache: elements replayed with
  // gaps between them share it).
  std::pair<JobId, std::shared_ptr<const JobSpec>> last_array_spec_;
  // Ended jobs replayed from a snapshot (JobBound::ended) between their bind
  // and their end: they took nothing of their nodes, and so release nothing.
  std::vector<JobId> unoccupied_;
  // Stores `job` (new or updated) in jobs and, while it has not ended, live.
  static void Put(Snapshot::Data& d, std::shared_ptr<const JobRecord> job);

  std::shared_ptr<Snapshot::Data> data_;
};

// Events that rebuild the snapshot's state from empty (a journal snapshot):
// replaying them gives the same nodes, jobs, allocations and history. With
// `live_only`, jobs that ended are left out (a projection of what is live),
// but the last element of an array with a live element (the engine starts
// an array's elements once its last is there).
// Each event goes to `sink` as it is made; stops at the sink's first error.
Status CompactState(const Snapshot& snap, const std::function<Status(const Event&)>& sink, bool live_only = false);
// The same, collected.
std::vector<Event> CompactState(const Snapshot& snap, bool live_only = false);

}  // namespace rota
