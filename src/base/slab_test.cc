#include "base/slab.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace rota {
namespace {

TEST(SlabPool, SlotsAreDistinctAlignedAndAFreedOneIsReused) {
  SlabPool pool(40);
  EXPECT_EQ(pool.slot_bytes(), 48u);  // a whole number of max_align_t
  std::set<uintptr_t> seen;
  std::vector<void*> slots;
  for (int i = 0; i < 10000; ++i) {
    void* p = pool.Allocate();
    ASSERT_EQ(reinterpret_cast<uintptr_t>(p) % alignof(std::max_align_t), 0u) << i;
    ASSERT_TRUE(seen.insert(reinterpret_cast<uintptr_t>(p)).second) << "slot " << i << " handed out twice";
    std::memset(p, 0xab, 48);  // each slot is writable, and all of it
    slots.push_back(p);
  }
  // The slab starts on a huge-page boundary; 10,000 slots fit in one.
  EXPECT_EQ(reinterpret_cast<uintptr_t>(slots[0]) % (size_t{2} << 20), 0u);
  EXPECT_EQ(pool.slabs(), 1u);
  pool.Free(slots[17]);
  pool.Free(slots[4242]);
  EXPECT_EQ(pool.Allocate(), slots[4242]);
  EXPECT_EQ(pool.Allocate(), slots[17]);
  for (void* p : slots) pool.Free(p);
}

TEST(SlabPool, ASlabThatFillsUpIsFollowedByAnother) {
  // 3 MiB + 16 does not divide 32 MiB: 10 slots a slab, 2 MiB - 160 left over.
  const size_t slot = (size_t{3} << 20) + 16;
  SlabPool pool(slot);
  std::vector<void*> slots;
  for (int i = 0; i < 10; ++i) slots.push_back(pool.Allocate());
  EXPECT_EQ(pool.slabs(), 1u);
  slots.push_back(pool.Allocate());
  EXPECT_EQ(pool.slabs(), 2u);
  for (int i = 0; i < 9; ++i) slots.push_back(pool.Allocate());
  EXPECT_EQ(pool.slabs(), 2u);
  for (void* p : slots) std::memset(p, 0xcd, slot);  // every byte of every slot is mapped and its own
  std::set<void*> distinct(slots.begin(), slots.end());
  EXPECT_EQ(distinct.size(), slots.size());
  for (void* p : slots) pool.Free(p);
  EXPECT_THROW(SlabPool(SlabPool::kSlabBytes + 1), std::invalid_argument);
}

struct Unusual {  // a size no other object in this test program has
  char bytes[4000] = {};
};

TEST(SlabAllocator, SingleObjectsComeFromThePoolOfTheirSize) {
  if (!SlabsOn()) GTEST_SKIP() << "ROTA_SLABS=off";
#if defined(ROTA_SLABS_OFF)
  GTEST_SKIP() << "a build that checks memory: operator new throughout";
#endif
  SlabPool& pool = SlabPool::For<4016>();  // the object and its count (16 bytes in libstdc++)
  EXPECT_EQ(pool.slabs(), 0u);
  auto a = MakeSlabShared<Unusual>();
  EXPECT_EQ(pool.slabs(), 1u);  // the control block and the object: one 4,016-byte slot
  SlabAllocator<Unusual> alloc;
  Unusual* arr = alloc.allocate(3);  // more than one: operator new
  alloc.deallocate(arr, 3);
  a.reset();
  EXPECT_EQ(pool.slabs(), 1u);
}

struct Counted {
  static inline std::atomic<int> live = 0;
  explicit Counted(std::string s) : name(std::move(s)) { ++live; }
  Counted(const Counted& o) : name(o.name) { ++live; }
  ~Counted() { --live; }
  std::string name;
  char payload[200] = {};
};

TEST(SlabPool, SharedObjectsAreBuiltAndDestroyedAcrossThreads) {
  // Objects made on one thread and dropped on others (as snapshots are):
  // every one destroyed exactly once, none corrupted.
  std::vector<std::shared_ptr<Counted>> made;
  for (int i = 0; i < 20000; ++i) made.push_back(MakeSlabShared<Counted>("job-" + std::to_string(i)));
  EXPECT_EQ(Counted::live, 20000);
  for (int i = 0; i < 20000; ++i) ASSERT_EQ(made[i]->name, "job-" + std::to_string(i));
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    std::vector<std::shared_ptr<Counted>> mine(made.begin() + t * 5000, made.begin() + (t + 1) * 5000);
    threads.emplace_back([mine = std::move(mine)]() mutable {
      for (int i = 0; i < 1000; ++i) {
        auto copy = MakeSlabShared<Counted>(*mine[i]);  // a copy-on-write, then dropped
        mine[i] = copy;
      }
      mine.clear();
    });
  }
  made.clear();
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(Counted::live, 0);
}

}  // namespace
}  // namespace rota
