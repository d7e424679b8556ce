#include "base/slab.h"

#include <sys/mman.h>

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstdlib>
#include <stdexcept>
#include <string_view>

namespace rota {

// Slots are whole multiples of max_align_t, so each is aligned for anything.
// A slot larger than an eighth of a group (256 KiB) has the whole slab as
// its group: in 2 MiB groups, the room left at each group's end, too small
// for a slot, could be up to half the group.
SlabPool::SlabPool(size_t slot_bytes)
    : slot_((std::max(slot_bytes, sizeof(FreeSlot)) + alignof(std::max_align_t) - 1) / alignof(std::max_align_t) *
            alignof(std::max_align_t)),
      group_(slot_ <= kGroupBytes / 8 ? kGroupBytes : kSlabBytes),
      per_group_(group_ / slot_),
      groups_(static_cast<int>(kSlabBytes / group_)) {
  if (slot_ > kSlabBytes) throw std::invalid_argument("slab slot larger than a slab");
}

bool SlabsOn() {
  const char* v = std::getenv("ROTA_SLABS");
  return v == nullptr || std::string_view(v) != "off";
}

SlabPool::Slab* SlabPool::NewSlab() {
  // On a boundary of its own size (so that a slot finds its slab, and all of
  // it can be huge pages). Address space only: the kernel backs what is
  // touched.
  void* p = mmap(nullptr, 2 * kSlabBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) throw std::bad_alloc();
  const uintptr_t start = (reinterpret_cast<uintptr_t>(p) + kSlabBytes - 1) & ~(kSlabBytes - 1);
  // With transparent huge pages `never` (or a kernel without them) the
  // slab is ordinary pages. With the usual defrag setting (`madvise`), a
  // fault here may compact memory first.
  madvise(reinterpret_cast<void*>(start), kSlabBytes, MADV_HUGEPAGE);
  // The unaligned head and tail of the mapping go back.
  char* const base = static_cast<char*>(p);
  char* const first = reinterpret_cast<char*>(start);
  if (first > base) munmap(base, static_cast<size_t>(first - base));
  munmap(first + kSlabBytes, static_cast<size_t>(base + kSlabBytes - first));
  try {
    Slab& s = slabs_[start];
    s.base = first;
    s.seq = slabs_.size();
    Order nodes;
    nodes.emplace(s.seq, &s);
    s.room_node = nodes.extract(nodes.begin());
    nodes.emplace(s.seq, &s);
    s.released_node = nodes.extract(nodes.begin());
    // All its groups as if given back: used after those in use and the spare.
    s.released = (uint32_t{1} << groups_) - 1;
    released_slabs_.insert(std::move(s.released_node));
    return &s;
  } catch (...) {
    slabs_.erase(start);
    munmap(first, kSlabBytes);
    throw;
  }
}

void SlabPool::Mark(Slab& s, uint32_t Slab::*mask, Order::node_type Slab::*node, Order& order, int g, bool on) {
  const uint32_t bit = uint32_t{1} << g;
  const bool listed = (s.*mask) != 0;
  s.*mask = on ? (s.*mask | bit) : (s.*mask & ~bit);
  if ((s.*mask != 0) == listed) return;
  if (listed) {
    s.*node = order.extract({s.seq, &s});
  } else {
    order.insert(std::move(s.*node));
  }
}

void* SlabPool::Allocate() {
  std::lock_guard<std::mutex> lock(mu_);
  // The lowest group in use with room, oldest slab first; else the spare;
  // else the lowest group given back, oldest slab first; else a new slab's.
  Slab* s;
  int g;
  if (!room_.empty()) {
    s = room_.begin()->second;
    g = std::countr_zero(s->room);
  } else if (spare_ != nullptr) {
    s = spare_;
    g = spare_group_;
    spare_ = nullptr;
  } else {
    s = !released_slabs_.empty() ? released_slabs_.begin()->second : NewSlab();
    g = std::countr_zero(s->released);
    Mark(*s, &Slab::released, &Slab::released_node, released_slabs_, g, false);
  }
  Group& group = s->groups[g];
  void* out;
  if (group.free != nullptr) {
    out = group.free;
    group.free = group.free->next;
  } else {
    out = s->base + static_cast<size_t>(g) * group_ + group.bumped * slot_;
    ++group.bumped;
  }
  ++group.live;
  Mark(*s, &Slab::room, &Slab::room_node, room_, g, HasRoom(group));
  return out;
}

void SlabPool::Free(void* p) noexcept {
  if (p == nullptr) return;
  const uintptr_t base = reinterpret_cast<uintptr_t>(p) & ~(kSlabBytes - 1);
  std::lock_guard<std::mutex> lock(mu_);
  auto it = slabs_.find(base);
  if (it == slabs_.end()) return;  // not one of this pool's slots: a caller's bug, left alone
  Slab& s = it->second;
  const int g = static_cast<int>((reinterpret_cast<uintptr_t>(p) - base) / group_);
  Group& group = s.groups[g];
  group.free = new (p) FreeSlot{group.free};
  if (--group.live > 0) {
    Mark(s, &Slab::room, &Slab::room_node, room_, g, true);
    return;
  }
  Mark(s, &Slab::room, &Slab::room_node, room_, g, false);
  if (spare_ == nullptr) {
    spare_ = &s;
    spare_group_ = g;
    return;
  }
  // Empty, and a spare is kept already: its memory goes back; its slots
  // are handed out afresh (from the start) when it is used again. (Under
  // the lock: tens of microseconds, once per group's worth of frees.)
  madvise(s.base + static_cast<size_t>(g) * group_, group_, MADV_DONTNEED);
  group = Group{};
  Mark(s, &Slab::released, &Slab::released_node, released_slabs_, g, true);
  ++released_groups_;
  if (std::popcount(s.released) == groups_) ++released_;
}

size_t SlabPool::slabs() const {
  std::lock_guard<std::mutex> lock(mu_);
  return slabs_.size();
}

size_t SlabPool::released() const {
  std::lock_guard<std::mutex> lock(mu_);
  return released_;
}

size_t SlabPool::released_groups() const {
  std::lock_guard<std::mutex> lock(mu_);
  return released_groups_;
}

}  // namespace rota
