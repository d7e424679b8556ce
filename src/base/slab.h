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
// page faults, not 200,000 4 KiB ones. A slab is cut into groups of one huge
// page each (2 MiB; one group of the whole slab for slots larger than 256
// KiB), and no slot crosses a group's end. Each group keeps its own free
// list and count of live slots. A slot comes from the lowest group in use
// with room, oldest slab first (a slot just freed there is reused before a
// newer group grows), so that live objects gather low and the higher groups
// empty; else from the spare (below); else from the lowest empty group. A
// group whose last slot is freed gives its memory back to the kernel
// (madvise(MADV_DONTNEED), one whole huge page): RSS falls when the objects
// in it are all dropped, e.g. the old versions of a hundred thousand records
// that changed together, though others live in the same slab. One empty
// group is kept ready instead (the spare), so that one object made and freed
// over and over does not fault a group in each time. Objects are never
// moved, so one that outlives its neighbours keeps its group resident. Slabs
// stay mapped (address space only) and are reused.
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
  // Times a slab's memory went back to the kernel, all of it (its last
  // resident group released), and times a group's did (for tests).
  size_t released() const;
  size_t released_groups() const;
  // The bytes of a group (2 MiB, or the whole slab for slots larger than
  // 256 KiB), and the slots in one.
  size_t group_bytes() const { return group_; }
  size_t slots_per_group() const { return per_group_; }

  // The process's pool for slots of `kBytes` (aligned for max_align_t); one
  // per size, made on first use and never destroyed (objects may be freed
  // from static destructors).
  template <size_t kBytes>
  static SlabPool& For() {
    static SlabPool* pool = new SlabPool(kBytes);
    return *pool;
  }

 private:
  static constexpr size_t kGroupBytes = size_t{2} << 20;
  static constexpr int kMaxGroups = static_cast<int>(kSlabBytes / kGroupBytes);
  struct FreeSlot {
    FreeSlot* next;
  };
  // A group: slots handed out from its start (the first `bumped`), freed
  // ones on `free`.
  struct Group {
    FreeSlot* free = nullptr;
    uint32_t bumped = 0;
    uint32_t live = 0;
  };
  // A slab (aligned to kSlabBytes, so a slot's slab is its address rounded
  // down, and each group is a huge page).
  struct Slab;
  // Slabs by age (seq), oldest first.
  using Order = std::set<std::pair<size_t, Slab*>>;
  struct Slab {
    char* base = nullptr;
    size_t seq = 0;  // the order it was mapped in
    Group groups[kMaxGroups];
    // Its groups in use with room, and its empty groups whose memory went
    // back (or never came: a new slab's), a bit each.
    uint32_t room = 0, released = 0;
    // Its entries in room_ (while `room` has a bit) and released_slabs_
    // (while `released` has), made with the slab: held here while it is not
    // listed (empty while it is), so that listing and unlisting never
    // allocate (Free is noexcept).
    Order::node_type room_node, released_node;
  };
  bool HasRoom(const Group& g) const { return g.free != nullptr || g.bumped < per_group_; }
  Slab* NewSlab();  // REQUIRES: mu_ held
  // Sets or clears group `g`'s bit in `mask` (s.room or s.released), listing
  // the slab in `order` while the mask is not 0.
  static void Mark(Slab& s, uint32_t Slab::*mask, Order::node_type Slab::*node, Order& order, int g, bool on);

  mutable std::mutex mu_;
  const size_t slot_;
  const size_t group_;      // bytes
  const size_t per_group_;  // slots
  const int groups_;        // a slab's
  std::map<uintptr_t, Slab> slabs_;  // by base address
  // Those with a group in use with room, and those with a group given back.
  Order room_, released_slabs_;
  Slab* spare_ = nullptr;  // the one empty group kept resident, if any: its slab
  int spare_group_ = 0;    // and which
  size_t released_ = 0, released_groups_ = 0;
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
