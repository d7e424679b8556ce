#include "base/slab.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <set>
#include <string>
#include <thread>
#include <vector>

namespace rota {
namespace {

TEST(SlabPool, SlotsAreDistinctAlignedAndAFreedOneIsReused) {
  SlabPool pool(40);
  std::set<uintptr_t> seen;
  std::vector<void*> slots;
  for (int i = 0; i < 10000; ++i) {
    void* p = pool.Allocate();
    ASSERT_EQ(reinterpret_cast<uintptr_t>(p) % alignof(std::max_align_t), 0u) << i;
    ASSERT_TRUE(seen.insert(reinterpret_cast<uintptr_t>(p)).second) << "slot " << i << " handed out twice";
    std::memset(p, 0xab, 40);  // each slot is writable, and all of it
    slots.push_back(p);
  }
  // 40 bytes round to 48 (max_align_t): 10,000 slots in one 32 MiB slab.
  EXPECT_EQ(pool.slabs(), 1u);
  pool.Free(slots[17]);
  pool.Free(slots[4242]);
  EXPECT_EQ(pool.Allocate(), slots[4242]);
  EXPECT_EQ(pool.Allocate(), slots[17]);
  for (void* p : slots) pool.Free(p);
}

TEST(SlabPool, ASlabThatFillsUpIsFollowedByAnother) {
  SlabPool pool(size_t{1} << 20);  // 32 slots a slab
  std::vector<void*> slots;
  for (int i = 0; i < 40; ++i) slots.push_back(pool.Allocate());
  EXPECT_EQ(pool.slabs(), 2u);
  std::set<void*> distinct(slots.begin(), slots.end());
  EXPECT_EQ(distinct.size(), slots.size());
  for (void* p : slots) pool.Free(p);
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
