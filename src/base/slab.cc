#include "base/slab.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <stdexcept>
#include <string_view>

namespace rota {

// Slots are whole multiples of max_align_t, so each is aligned for anything.
SlabPool::SlabPool(size_t slot_bytes)
    : slot_((std::max(slot_bytes, sizeof(FreeSlot)) + alignof(std::max_align_t) - 1) / alignof(std::max_align_t) *
            alignof(std::max_align_t)) {
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
    return &s;
  } catch (...) {
    slabs_.erase(start);
    munmap(first, kSlabBytes);
    throw;
  }
}

void* SlabPool::Allocate() {
  std::lock_guard<std::mutex> lock(mu_);
  // The oldest slab in use with room, else the spare, else the oldest slab
  // given back, else a new one.
  Slab* pick = !room_.empty()            ? room_.begin()->second
               : spare_ != nullptr        ? spare_
               : !released_slabs_.empty() ? released_slabs_.begin()->second
                                          : NewSlab();
  Slab& s = *pick;
  if (s.live == 0) {
    if (spare_ == &s) spare_ = nullptr;
    if (s.released_node.empty()) s.released_node = released_slabs_.extract({s.seq, &s});
  }
  void* out;
  if (s.free != nullptr) {
    out = s.free;
    s.free = s.free->next;
  } else {
    out = s.base + s.used;
    s.used += slot_;
  }
  ++s.live;
  const bool listed = s.room_node.empty();
  if (HasRoom(s) && !listed) {
    room_.insert(std::move(s.room_node));
  } else if (!HasRoom(s) && listed) {
    s.room_node = room_.extract({s.seq, &s});
  }
  return out;
}

void SlabPool::Free(void* p) noexcept {
  if (p == nullptr) return;
  const uintptr_t base = reinterpret_cast<uintptr_t>(p) & ~(kSlabBytes - 1);
  std::lock_guard<std::mutex> lock(mu_);
  auto it = slabs_.find(base);
  if (it == slabs_.end()) return;  // not one of this pool's slots: a caller's bug, left alone
  Slab& s = it->second;
  s.free = new (p) FreeSlot{s.free};
  if (--s.live > 0) {
    if (!s.room_node.empty()) room_.insert(std::move(s.room_node));
    return;
  }
  if (s.room_node.empty()) s.room_node = room_.extract({s.seq, &s});
  if (spare_ == nullptr) {
    spare_ = &s;
    return;
  }
  // Empty, and a spare is kept already: its memory goes back; its slots
  // are handed out afresh (from the start) when it is used again. (Under
  // the lock: a few hundred microseconds, a rare event.)
  madvise(s.base, kSlabBytes, MADV_DONTNEED);
  s.free = nullptr;
  s.used = 0;
  released_slabs_.insert(std::move(s.released_node));
  ++released_;
}

size_t SlabPool::slabs() const {
  std::lock_guard<std::mutex> lock(mu_);
  return slabs_.size();
}

size_t SlabPool::released() const {
  std::lock_guard<std::mutex> lock(mu_);
  return released_;
}

}  // namespace rota
