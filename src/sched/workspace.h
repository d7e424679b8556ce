// Workspace: the engine's mutable view of one cycle. Built from a Snapshot
// (O(nodes)), it tracks tentative allocations on top of it and keeps two
// indexes current as they change:
//   - buckets: for each node class (GPU model, GPU capacity) and free-GPU
//     count, the set of node positions, so "best node with >= g free GPUs in
//     positions [b, e)" touches a handful of words instead of every node;
//   - per topology domain, a histogram of nodes by free GPUs, so a domain
//     that cannot hold a gang is skipped without looking at its nodes.
// Drained nodes are in neither. Positions are Topology positions, so every
// domain is a contiguous range.
//
// Thread-safety: one owner (the scheduler's cycle).
#pragma once

#include <bit>
#include <cstdint>
#include <unordered_map>
#include <vector>

#include "sched/bitset_index.h"
#include "sched/framework.h"

namespace rota::sched {

struct NodeClass {
  int16_t model;
  int32_t capacity;  // physical GPUs
};

class Workspace {
 public:
  // Rebuilds from `snap`. Reuses memory from the previous cycle.
  void Reset(const Snapshot& snap);

  uint32_t size() const { return static_cast<uint32_t>(nodes_.size()); }
  const Topology& topology() const { return *topology_; }
  const NodeState& node(uint32_t pos) const { return *nodes_[pos]; }
  NodeView View(uint32_t pos) const {
    return {nodes_[pos], free_mask_[pos], free_cpu_[pos], free_memory_[pos], class_[pos] >= 0};
  }
  uint64_t free_mask(uint32_t pos) const { return free_mask_[pos]; }
  int32_t free_gpus(uint32_t pos) const { return std::popcount(free_mask_[pos]); }
  bool schedulable(uint32_t pos) const { return class_[pos] >= 0; }

  // Tentative allocation and its reverse; keep both indexes current.
  // REQUIRES: mask is free on pos (Take), allocated by this cycle (Give).
  void Take(uint32_t pos, uint64_t mask, MilliCpu cpu, MemoryMiB memory);
  void Give(uint32_t pos, uint64_t mask, MilliCpu cpu, MemoryMiB memory);

  // Chooses `count` free GPUs on `pos`: the NVLink island that fits them
  // most tightly; if none holds them all, the fullest-free islands first.
  uint64_t ChooseGpus(uint32_t pos, int32_t count) const;

  const std::vector<NodeClass>& classes() const { return classes_; }
  int32_t node_class(uint32_t pos) const { return class_[pos]; }
  // Next position >= from and < end in class `cls` with exactly `free` GPUs.
  uint32_t FindNext(int32_t cls, int32_t free, uint32_t from, uint32_t end) const {
    return buckets_[bucket_offset_[cls] + free].FindNext(from, end);
  }
  // True if the class set differs from the previous Reset (caches keyed by class must go).
  bool classes_changed() const { return classes_changed_; }

  int32_t max_capacity() const { return max_capacity_; }
  int64_t DomainFreeGpus(int32_t domain) const { return domain_free_[domain]; }
  // Nodes in `domain` with exactly `free` free GPUs (schedulable ones only).
  int32_t DomainNodesWithFree(int32_t domain, int32_t free) const {
    return hist_[static_cast<size_t>(domain) * (max_capacity_ + 1) + free];
  }
  // Upper bound on replicas of `gpus` GPUs that fit in `domain` by GPU count.
  // REQUIRES: gpus > 0.
  int64_t DomainReplicaBound(int32_t domain, int32_t gpus) const;

  // GPU sharing. A GPU's fractions in use and its MIG layout and instances
  // in use, where this cycle changed them (only a Txn changes them, so that
  // a rollback undoes shares and MIG instances with the whole GPUs).
  struct GpuShare {
    int32_t milli = 0;
    MemoryMiB memory = 0;
  };
  struct MigUse {
    MigLayout layout;
    uint8_t used = 0;  // start slots of instances in use
  };
  // A GPU's layout and instances in use as this cycle sees them (no copy;
  // valid until the next change).
  struct MigView {
    const MigLayout* layout;
    uint8_t used;
  };
  static uint64_t GpuKey(uint32_t pos, int32_t gpu) { return static_cast<uint64_t>(pos) << 6 | static_cast<uint64_t>(gpu); }
  // Null when this cycle placed no share on it yet (the snapshot's count).
  const GpuShare* share(uint32_t pos, int32_t gpu) const {
    auto it = shares_.find(GpuKey(pos, gpu));
    return it == shares_.end() ? nullptr : &it->second;
  }
  MigView mig(uint32_t pos, int32_t gpu) const {
    if (auto it = migs_.find(GpuKey(pos, gpu)); it != migs_.end()) return {&it->second.layout, it->second.used};
    return {&nodes_[pos]->mig_layout[gpu], nodes_[pos]->mig_used[gpu]};
  }

 private:
  friend class Txn;
  std::unordered_map<uint64_t, GpuShare> shares_;  // GpuKey -> its shares, where this cycle placed some
  std::unordered_map<uint64_t, MigUse> migs_;      // GpuKey -> its MIG state, where this cycle changed it

  void IndexNode(uint32_t pos, int32_t free, int delta);

  const Topology* topology_ = nullptr;
  std::vector<const NodeState*> nodes_;
  std::vector<uint64_t> free_mask_;
  std::vector<MilliCpu> free_cpu_;
  std::vector<MemoryMiB> free_memory_;
  std::vector<int32_t> class_;  // -1 = not schedulable
  std::vector<NodeClass> classes_;
  bool classes_changed_ = true;
  std::vector<uint32_t> bucket_offset_;
  std::vector<TwoLevelBitset> buckets_;
  int32_t max_capacity_ = 0;
  int32_t num_levels_ = 0;  // domain levels + root
  std::vector<int64_t> domain_free_;
  std::vector<int32_t> hist_;
};

// Txn: the tentative allocations of one gang. Place records an allocation in
// the workspace and in an undo log; RollbackTo undoes back to a mark, in
// reverse order; Commit keeps them (the caller reads steps() for bindings).
// GPU shares and MIG instances (SetShare, SetMig) are in the same undo log:
// Rollback undoes them too. Reuse one Txn across jobs: Begin() clears
// without freeing memory.
class Txn {
 public:
  struct Step {
    uint16_t task;
    uint32_t replica;
    uint32_t pos;
    uint64_t mask;
    MilliCpu cpu;
    MemoryMiB memory;
  };

  explicit Txn(Workspace* ws) : ws_(ws) {}
  void Begin() {
    steps_.clear();
    share_undo_.clear();
  }
  void Place(const Step& step) {
    ws_->Take(step.pos, step.mask, step.cpu, step.memory);
    steps_.push_back(step);
  }
  // The GPU's shares in use become `use` / its MIG state becomes `use`.
  void SetShare(uint32_t pos, int32_t gpu, Workspace::GpuShare use);
  void SetMig(uint32_t pos, int32_t gpu, Workspace::MigUse use);
  size_t Mark() const { return steps_.size(); }
  void RollbackTo(size_t mark) {
    while (steps_.size() > mark) {
      const Step& s = steps_.back();
      ws_->Give(s.pos, s.mask, s.cpu, s.memory);
      steps_.pop_back();
    }
  }
  // Undoes every step and every share and MIG change since Begin.
  void Rollback();
  // Keeps them: a later Rollback (before the next Begin) undoes nothing.
  void Commit() {
    steps_.clear();
    share_undo_.clear();
  }
  const std::vector<Step>& steps() const { return steps_; }

 private:
  struct ShareUndo {
    bool mig;
    uint64_t key;
    bool existed;
    Workspace::GpuShare share;
    Workspace::MigUse mig_use;
  };
  Workspace* ws_;
  std::vector<Step> steps_;
  std::vector<ShareUndo> share_undo_;
};

}  // namespace rota::sched
