#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <set>
#include <utility>

namespace rota {

// Fixed-size slots cut from large slabs that the kernel may back with
// transparent huge pages (madvise(MADV_HUGEPAGE)): a million objects made at
// once (a restart replaying a million-job array) take a few hundred 2 MiB
// page faults, not 200,000 4 KiB ones. Each slab keeps its own free list and
// count of live slots; a slot comes from the oldest slab in use with room (a
// slot just freed there is reused before a newer slab grows), so that live
// objects gather in the oldest slabs and the newer ones empty; an empty slab
// is used last. A slab whose last slot is freed gives its memory back to the
// kernel (madvise(MADV_DONTNEED): RSS falls when a slab's objects are all
// dropped, e.g. the old versions of records that changed together), except
// one empty slab kept ready, so that one object made and freed over and over
// does not fault a slab in each time. Objects are never moved, so one that
// outlives its neighbours keeps its slab resident. Slabs stay mapped
// (address space only) and are reused.
// Thread-safe: objects are made on one thread and often freed on another.
class SlabPool {
 public:
  static constexpr size_t kSlabBytes = size_t{32} << 20;

  // REQUIRES: slot_bytes <= kSlabBytes; the pool outlives its slots (its
  // slabs are never unmapped).
  explicit SlabPool(size_t slot_bytes);
  SlabPool(const SlabPool&) = delete;
  SlabPool& operator=(const SlabPool&) = delete;

  void* Allocate();
  void Free(void* p) noexcept;

  size_t slot_bytes() const { return slot_; }
  // Slabs mapped so far (for tests).
  size_t slabs() const;
  // Times a slab's memory went back to the kernel (for tests).
  size_t released() const;

  // The process's pool for slots of `kBytes` (aligned for max_align_t); one
  // per size, made on first use and never destroyed (objects may be freed
  // from static destructors).
  template <size_t kBytes>
  static SlabPool& For() {
    static SlabPool* pool = new SlabPool(kBytes);
    return *pool;
  }

 private:
  struct FreeSlot {
    FreeSlot* next;
  };
  // A slab (aligned to kSlabBytes, so a slot's slab is its address rounded
  // down): slots handed out from the bump offset `used`, freed ones on `free`.
  struct Slab;
  // Slabs by age (seq), oldest first.
  using Order = std::set<std::pair<size_t, Slab*>>;
  struct Slab {
    char* base = nullptr;
    size_t seq = 0;  // the order it was mapped in
    size_t used = 0;
    size_t live = 0;
    FreeSlot* free = nullptr;
    // Its entries in room_ and released_slabs_, made with the slab: held
    // here while it is not listed (empty while it is), so that listing and
    // unlisting never allocate (Free is noexcept).
    Order::node_type room_node, released_node;
  };
  bool HasRoom(const Slab& s) const { return s.free != nullptr || s.used + slot_ <= kSlabBytes; }
  Slab* NewSlab();  // REQUIRES: mu_ held

  mutable std::mutex mu_;
  const size_t slot_;
  std::map<uintptr_t, Slab> slabs_;  // by base address
  // Those in use with a free slot, and the empty ones whose memory went back.
  Order room_, released_slabs_;
  Slab* spare_ = nullptr;  // the one empty slab kept resident, if any
  size_t released_ = 0;
};

// Whether this build checks memory (AddressSanitizer, LeakSanitizer,
// MemorySanitizer, HWASan): then records come from operator new, so that
// overruns, uses after free and leaks are still seen. GCC defines
// __SANITIZE_ADDRESS__; Clang answers __has_feature (nested: GCC before 14
// has no __has_feature).
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_HWADDRESS__)
#define ROTA_SLABS_OFF 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(hwaddress_sanitizer) || __has_feature(leak_sanitizer) || \
    __has_feature(memory_sanitizer)
#define ROTA_SLABS_OFF 1
#endif
#endif

// Whether objects go in slabs: not in a build that checks memory, nor where
// the environment says ROTA_SLABS=off (for valgrind's memcheck, which sees a
// slab as one block). Read once.
bool SlabsOn();

// An allocator for std::allocate_shared that takes single objects of up to
// kMaxSlot bytes (with their count) from the SlabPool of their size, and
// anything else from operator new.
inline constexpr size_t kMaxSlot = size_t{64} << 10;
template <class T>
struct SlabAllocator {
  using value_type = T;
  SlabAllocator() = default;
  template <class U>
  SlabAllocator(const SlabAllocator<U>&) noexcept {}  // NOLINT: allocators convert implicitly

  T* allocate(size_t n) {
    if (Pooled(n)) return static_cast<T*>(SlabPool::For<SlotBytes()>().Allocate());
    if (n > SIZE_MAX / sizeof(T)) throw std::bad_array_new_length();
    return static_cast<T*>(::operator new(n * sizeof(T), std::align_val_t(alignof(T))));
  }
  void deallocate(T* p, size_t n) noexcept {
    if (Pooled(n)) {
      SlabPool::For<SlotBytes()>().Free(p);
      return;
    }
    (void)n;
    ::operator delete(p, std::align_val_t(alignof(T)));
  }
  template <class U>
  friend bool operator==(const SlabAllocator&, const SlabAllocator<U>&) {
    return true;
  }

 private:
  static constexpr size_t SlotBytes() {
    constexpr size_t a = alignof(std::max_align_t);
    return (sizeof(T) + a - 1) / a * a;
  }
  static bool Pooled(size_t n) {
#if defined(ROTA_SLABS_OFF)
    (void)n;
    return false;
#else
    static const bool on = SlabsOn();  // (per T: allocate and deallocate agree)
    return n == 1 && SlotBytes() <= kMaxSlot && alignof(T) <= alignof(std::max_align_t) && on;
#endif
  }
};

// std::make_shared, with the object and its count in a slab slot.
template <class T, class... Args>
std::shared_ptr<T> MakeSlabShared(Args&&... args) {
  return std::allocate_shared<T>(SlabAllocator<T>(), std::forward<Args>(args)...);
}

}  // namespace rota
