#pragma once

#include <cstddef>
#include <memory>
#include <mutex>
#include <new>
#include <utility>

namespace rota {

// Fixed-size slots cut from large slabs that the kernel may back with
// transparent huge pages (madvise(MADV_HUGEPAGE)): a million objects made at
// once (a restart replaying a million-job array) take a few hundred 2 MiB
// page faults, not 200,000 4 KiB ones. A freed slot goes on a free list and
// is the next one handed out; slabs are never given back (the objects come
// and go in the millions over a server's life, so the memory is reused).
// Thread-safe: objects are made on one thread and often freed on another.
class SlabPool {
 public:
  static constexpr size_t kSlabBytes = size_t{32} << 20;

  explicit SlabPool(size_t slot_bytes);
  SlabPool(const SlabPool&) = delete;
  SlabPool& operator=(const SlabPool&) = delete;

  void* Allocate();
  void Free(void* p) noexcept;

  size_t slot_bytes() const { return slot_; }
  // Slabs mapped so far (for tests).
  size_t slabs() const;

  // The process's pool for slots of `bytes` (aligned for max_align_t); one
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
  mutable std::mutex mu_;
  const size_t slot_;
  char* next_ = nullptr;  // the current slab's first unused byte
  char* end_ = nullptr;
  FreeSlot* free_ = nullptr;
  size_t slabs_ = 0;
};

// An allocator for std::allocate_shared that takes single objects from the
// SlabPool of their size (the control block and the object together), and
// anything else from operator new. Under AddressSanitizer it is operator new
// throughout, so that leaks and overruns are still seen.
template <class T>
struct SlabAllocator {
  using value_type = T;
  SlabAllocator() = default;
  template <class U>
  SlabAllocator(const SlabAllocator<U>&) noexcept {}  // NOLINT: allocators convert implicitly

  T* allocate(size_t n) {
#if !defined(__SANITIZE_ADDRESS__)
    if (n == 1 && alignof(T) <= alignof(std::max_align_t)) {
      return static_cast<T*>(SlabPool::For<SlotBytes()>().Allocate());
    }
#endif
    return static_cast<T*>(::operator new(n * sizeof(T), std::align_val_t(alignof(T))));
  }
  void deallocate(T* p, size_t n) noexcept {
#if !defined(__SANITIZE_ADDRESS__)
    if (n == 1 && alignof(T) <= alignof(std::max_align_t)) {
      SlabPool::For<SlotBytes()>().Free(p);
      return;
    }
#endif
    ::operator delete(p, n * sizeof(T), std::align_val_t(alignof(T)));
  }
  friend bool operator==(const SlabAllocator&, const SlabAllocator&) { return true; }

 private:
  static constexpr size_t SlotBytes() {
    constexpr size_t a = alignof(std::max_align_t);
    return (sizeof(T) + a - 1) / a * a;
  }
};

// std::make_shared, with the object and its count in a slab slot.
template <class T, class... Args>
std::shared_ptr<T> MakeSlabShared(Args&&... args) {
  return std::allocate_shared<T>(SlabAllocator<T>(), std::forward<Args>(args)...);
}

}  // namespace rota
