#include "base/slab.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <stdexcept>
#include <string_view>

namespace rota {

namespace {

constexpr size_t kHugePage = size_t{2} << 20;

}  // namespace

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

void* SlabPool::Allocate() {
  std::lock_guard<std::mutex> lock(mu_);
  if (free_ != nullptr) {
    FreeSlot* s = free_;
    free_ = s->next;
    return s;
  }
  if (next_ == nullptr || static_cast<size_t>(end_ - next_) < slot_) {
    // A new slab, on a huge-page boundary so that all of it can be huge
    // pages. Address space only: the kernel backs what is touched.
    void* p = mmap(nullptr, kSlabBytes + kHugePage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) throw std::bad_alloc();
    const uintptr_t start = (reinterpret_cast<uintptr_t>(p) + kHugePage - 1) & ~(kHugePage - 1);
    // With transparent huge pages `never` (or a kernel without them) the
    // slab is ordinary pages. With the usual defrag setting (`madvise`), a
    // fault here may compact memory first.
    madvise(reinterpret_cast<void*>(start), kSlabBytes, MADV_HUGEPAGE);
    // The unaligned head and tail of the mapping go back.
    char* const base = static_cast<char*>(p);
    char* const first = reinterpret_cast<char*>(start);
    if (first > base) munmap(base, static_cast<size_t>(first - base));
    munmap(first + kSlabBytes, static_cast<size_t>(base + kHugePage - first));
    next_ = reinterpret_cast<char*>(start);
    end_ = next_ + kSlabBytes;
    ++slabs_;
  }
  void* out = next_;
  next_ += slot_;
  return out;
}

void SlabPool::Free(void* p) noexcept {
  if (p == nullptr) return;
  std::lock_guard<std::mutex> lock(mu_);
  free_ = new (p) FreeSlot{free_};
}

size_t SlabPool::slabs() const {
  std::lock_guard<std::mutex> lock(mu_);
  return slabs_;
}

}  // namespace rota
