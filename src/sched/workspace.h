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

 private:
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
// Reuse one Txn across jobs: Begin() clears without freeing memory.
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
  void Begin() { steps_.clear(); }
  void Place(const Step& step) {
    ws_->Take(step.pos, step.mask, step.cpu, step.memory);
    steps_.push_back(step);
  }
  size_t Mark() const { return steps_.size(); }
  void RollbackTo(size_t mark) {
    while (steps_.size() > mark) {
      const Step& s = steps_.back();
      ws_->Give(s.pos, s.mask, s.cpu, s.memory);
      steps_.pop_back();
    }
  }
  void Rollback() { RollbackTo(0); }
  const std::vector<Step>& steps() const { return steps_; }

 private:
  Workspace* ws_;
  std::vector<Step> steps_;
};

}  // namespace rota::sched
