#include "sched/workspace.h"

#include <algorithm>

namespace rota::sched {

void Workspace::Reset(const Snapshot& snap) {
  topology_ = &snap.topology();
  shares_.clear();
  migs_.clear();
  const uint32_t n = static_cast<uint32_t>(topology_->num_nodes());
  nodes_.resize(n);
  free_mask_.resize(n);
  free_cpu_.resize(n);
  free_memory_.resize(n);
  class_.resize(n);

  std::vector<NodeClass> classes;
  classes.reserve(classes_.size());
  int32_t max_cap = 0;
  for (uint32_t pos = 0; pos < n; ++pos) {
    const NodeState& node = snap.node(topology_->node_at(pos));
    nodes_[pos] = &node;
    free_mask_[pos] = node.free_mask();
    free_cpu_[pos] = node.spec.cpu - node.cpu_allocated;
    free_memory_[pos] = node.spec.memory - node.memory_allocated;
    max_cap = std::max(max_cap, node.spec.gpus);
    if (!node.schedulable()) {
      class_[pos] = -1;
      continue;
    }
    int32_t cls = -1;
    for (size_t c = 0; c < classes.size(); ++c) {
      if (classes[c].model == node.model && classes[c].capacity == node.spec.gpus) {
        cls = static_cast<int32_t>(c);
        break;
      }
    }
    if (cls < 0) {
      cls = static_cast<int32_t>(classes.size());
      classes.push_back({node.model, node.spec.gpus});
    }
    class_[pos] = cls;
  }
  classes_changed_ = classes.size() != classes_.size() ||
                     !std::equal(classes.begin(), classes.end(), classes_.begin(), [](const NodeClass& a, const NodeClass& b) {
                       return a.model == b.model && a.capacity == b.capacity;
                     });
  classes_ = std::move(classes);
  max_capacity_ = max_cap;

  bucket_offset_.resize(classes_.size());
  uint32_t total = 0;
  for (size_t c = 0; c < classes_.size(); ++c) {
    bucket_offset_[c] = total;
    total += classes_[c].capacity + 1;
  }
  if (buckets_.size() < total) buckets_.resize(total);
  for (uint32_t b = 0; b < total; ++b) buckets_[b].Resize(n);

  num_levels_ = static_cast<int32_t>(topology_->domain_levels().size()) + 1;
  const size_t domains = topology_->domains().size();
  domain_free_.assign(domains, 0);
  hist_.assign(domains * (max_capacity_ + 1), 0);
  for (uint32_t pos = 0; pos < n; ++pos) {
    if (class_[pos] >= 0) IndexNode(pos, std::popcount(free_mask_[pos]), +1);
  }
}

void Workspace::IndexNode(uint32_t pos, int32_t free, int delta) {
  TwoLevelBitset& bucket = buckets_[bucket_offset_[class_[pos]] + free];
  if (delta > 0) bucket.Set(pos);
  else bucket.Clear(pos);
  for (int32_t level = 0; level < num_levels_; ++level) {
    const int32_t d = topology_->DomainOf(pos, level);
    domain_free_[d] += delta * free;
    hist_[static_cast<size_t>(d) * (max_capacity_ + 1) + free] += delta;
  }
}

void Workspace::Take(uint32_t pos, uint64_t mask, MilliCpu cpu, MemoryMiB memory) {
  const bool indexed = class_[pos] >= 0;
  if (indexed) IndexNode(pos, std::popcount(free_mask_[pos]), -1);
  free_mask_[pos] &= ~mask;
  free_cpu_[pos] -= cpu;
  free_memory_[pos] -= memory;
  if (indexed) IndexNode(pos, std::popcount(free_mask_[pos]), +1);
}

void Workspace::Give(uint32_t pos, uint64_t mask, MilliCpu cpu, MemoryMiB memory) {
  const bool indexed = class_[pos] >= 0;
  if (indexed) IndexNode(pos, std::popcount(free_mask_[pos]), -1);
  free_mask_[pos] |= mask;
  free_cpu_[pos] += cpu;
  free_memory_[pos] += memory;
  if (indexed) IndexNode(pos, std::popcount(free_mask_[pos]), +1);
}

uint64_t Workspace::ChooseGpus(uint32_t pos, int32_t count) const {
  if (count == 0) return 0;
  const NodeState& node = *nodes_[pos];
  const uint64_t free = free_mask_[pos];
  const int32_t islands = node.spec.nvlink_islands;
  // Best fit: the island with the fewest free GPUs that still holds them all.
  int32_t best = -1;
  int32_t best_free = 1 << 30;
  for (int32_t i = 0; i < islands; ++i) {
    const int32_t f = std::popcount(free & IslandMask(node.spec.gpus, islands, i));
    if (f >= count && f < best_free) {
      best = i;
      best_free = f;
    }
  }
  auto take_lowest = [](uint64_t avail, int32_t k) {
    uint64_t out = 0;
    for (; k > 0 && avail != 0; --k) {
      const uint64_t bit = avail & (~avail + 1);
      out |= bit;
      avail &= avail - 1;
    }
    return out;
  };
  if (best >= 0) return take_lowest(free & IslandMask(node.spec.gpus, islands, best), count);
  // Spans islands: take the islands with the most free GPUs first.
  uint64_t out = 0;
  int32_t need = count;
  uint64_t used_islands = 0;
  while (need > 0) {
    int32_t pick = -1;
    int32_t pick_free = 0;
    for (int32_t i = 0; i < islands; ++i) {
      if ((used_islands >> i) & 1) continue;
      const int32_t f = std::popcount(free & IslandMask(node.spec.gpus, islands, i));
      if (f > pick_free) {
        pick = i;
        pick_free = f;
      }
    }
    if (pick < 0) break;
    used_islands |= 1ULL << pick;
    const uint64_t got = take_lowest(free & IslandMask(node.spec.gpus, islands, pick), need);
    out |= got;
    need -= std::popcount(got);
  }
  return out;
}

int64_t Workspace::DomainReplicaBound(int32_t domain, int32_t gpus) const {
  int64_t total = 0;
  const int32_t* h = &hist_[static_cast<size_t>(domain) * (max_capacity_ + 1)];
  for (int32_t f = gpus; f <= max_capacity_; ++f) total += static_cast<int64_t>(h[f]) * (f / gpus);
  return total;
}

void Txn::SetShare(uint32_t pos, int32_t gpu, Workspace::GpuShare use) {
  const uint64_t key = Workspace::GpuKey(pos, gpu);
  auto it = ws_->shares_.find(key);
  share_undo_.push_back({false, key, it != ws_->shares_.end(), it != ws_->shares_.end() ? it->second : Workspace::GpuShare{}, {}});
  ws_->shares_[key] = use;
}

void Txn::SetMig(uint32_t pos, int32_t gpu, Workspace::MigUse use) {
  const uint64_t key = Workspace::GpuKey(pos, gpu);
  auto it = ws_->migs_.find(key);
  const bool existed = it != ws_->migs_.end();
  share_undo_.push_back({true, key, existed, {}, existed ? std::move(it->second) : Workspace::MigUse{}});
  ws_->migs_[key] = std::move(use);
}

void Txn::Rollback() {
  RollbackTo(0);
  while (!share_undo_.empty()) {
    ShareUndo& u = share_undo_.back();
    if (u.mig) {
      if (u.existed) ws_->migs_[u.key] = std::move(u.mig_use);
      else ws_->migs_.erase(u.key);
    } else {
      if (u.existed) ws_->shares_[u.key] = u.share;
      else ws_->shares_.erase(u.key);
    }
    share_undo_.pop_back();
  }
}

}  // namespace rota::sched
