#include "base/slab.h"

#include <sys/mman.h>
#include <unistd.h>

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

// Pages of [p, p + bytes) the kernel holds in memory (mincore).
size_t ResidentPages(void* p, size_t bytes) {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  std::vector<unsigned char> in((bytes + page - 1) / page);
  if (mincore(p, bytes, in.data()) != 0) return SIZE_MAX;
  size_t n = 0;
  for (unsigned char c : in) n += c & 1;
  return n;
}

TEST(SlabPool, EmptySlabsGoBackToTheKernelButOneIsKeptAndAllAreReused) {
  // 1 MiB slots: 32 a slab. Four slabs filled and written.
  const size_t slot = size_t{1} << 20;
  SlabPool pool(slot);
  std::vector<char*> slots;
  for (int i = 0; i < 4 * 32; ++i) {
    slots.push_back(static_cast<char*>(pool.Allocate()));
    std::memset(slots.back(), 0x5a, slot);
  }
  ASSERT_EQ(pool.slabs(), 4u);
  char* slab[4];
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  for (int k = 0; k < 4; ++k) {
    slab[k] = slots[static_cast<size_t>(32 * k)];
    ASSERT_EQ(reinterpret_cast<uintptr_t>(slab[k]) % SlabPool::kSlabBytes, 0u) << k;  // aligned to its size
    // (Written a moment ago; a machine short of memory may have swapped
    // some out already, and then residency says nothing here.)
    if (ResidentPages(slab[k], SlabPool::kSlabBytes) * page != SlabPool::kSlabBytes) {
      for (char* p : slots) pool.Free(p);
      GTEST_SKIP() << "slab " << k << " not wholly resident after being written (memory pressure)";
    }
  }
  // Slabs 1, 2 and 3 emptied (one slot of slab 0 freed too). 1 MiB slots
  // have the whole slab as their group: the first to empty is kept as the
  // spare, the other two go back, whole.
  pool.Free(slots[5]);
  for (size_t i = 32; i < slots.size(); ++i) pool.Free(slots[i]);
  EXPECT_EQ(pool.released(), 2u);
  EXPECT_EQ(pool.released_groups(), 2u);
  EXPECT_GT(ResidentPages(slab[1], SlabPool::kSlabBytes), 0u);  // the spare
  EXPECT_EQ(ResidentPages(slab[2], SlabPool::kSlabBytes), 0u);
  EXPECT_EQ(ResidentPages(slab[3], SlabPool::kSlabBytes), 0u);
  EXPECT_EQ(slab[0][6 * slot], 0x5a);  // slab 0's live slots are untouched

  // Reuse: slab 0's free slot first (the oldest slab with room), then the
  // spare, then the released slabs from their start; no new mapping, every
  // slot distinct and writable.
  EXPECT_EQ(pool.Allocate(), slots[5]);
  auto in = [&](const char* p, int k) { return p >= slab[k] && p < slab[k] + SlabPool::kSlabBytes; };
  std::set<void*> again;
  for (int i = 0; i < 3 * 32; ++i) {
    char* p = static_cast<char*>(pool.Allocate());
    ASSERT_TRUE(again.insert(p).second) << i;
    // The spare's 32 slots, then slab 2's from its start, then slab 3's.
    if (i < 32) {
      EXPECT_TRUE(in(p, 1)) << i;
    } else if (i == 32) {
      EXPECT_EQ(p, slab[2]);
    } else if (i == 64) {
      EXPECT_EQ(p, slab[3]);
    }
    std::memset(p, 0x3c, slot);
  }
  EXPECT_EQ(pool.slabs(), 4u);
  EXPECT_EQ(pool.released(), 2u);

  // One slot made and freed over and over in an otherwise empty pool: the
  // spare stays, nothing is given back each time.
  for (void* p : again) pool.Free(p);
  for (size_t i = 0; i < 32; ++i) {
    if (i != 5) pool.Free(slots[i]);
  }
  pool.Free(slots[5]);
  const size_t before = pool.released();
  for (int i = 0; i < 1000; ++i) pool.Free(pool.Allocate());
  EXPECT_EQ(pool.released(), before);
}

TEST(SlabPool, AGroupWhoseObjectsAreAllDroppedGoesBackThoughItsSlabHoldsOthers) {
  // 64 KiB slots: 32 a group, 16 groups a slab. Three groups filled and written.
  const size_t slot = size_t{64} << 10;
  SlabPool pool(slot);
  ASSERT_EQ(pool.group_bytes(), size_t{2} << 20);
  ASSERT_EQ(pool.slots_per_group(), 32u);
  std::vector<char*> slots;
  for (int i = 0; i < 3 * 32; ++i) {
    slots.push_back(static_cast<char*>(pool.Allocate()));
    std::memset(slots.back(), 0x5a, slot);
  }
  ASSERT_EQ(pool.slabs(), 1u);
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  const size_t group = pool.group_bytes();
  char* g[3] = {slots[0], slots[32], slots[64]};
  for (int k = 0; k < 3; ++k) {
    ASSERT_EQ(g[k], slots[0] + k * group) << k;  // each group on its own huge page, in order
    if (ResidentPages(g[k], group) * page != group) {
      for (char* p : slots) pool.Free(p);
      GTEST_SKIP() << "group " << k << " not wholly resident after being written (memory pressure)";
    }
  }
  // Groups 1 and 2 emptied while group 0 lives on: the first to empty is
  // kept as the spare, the other goes back; the slab does not.
  for (size_t i = 32; i < slots.size(); ++i) pool.Free(slots[i]);
  EXPECT_EQ(pool.released_groups(), 1u);
  EXPECT_EQ(pool.released(), 0u);
  EXPECT_EQ(ResidentPages(g[1], group) * page, group);  // the spare
  EXPECT_EQ(ResidentPages(g[2], group), 0u);
  EXPECT_EQ(ResidentPages(g[0], group) * page, group);
  EXPECT_EQ(g[0][5 * slot + 7], 0x5a);  // group 0's live slots are untouched

  // A slot freed in group 0 comes back first, then the spare's, then
  // group 2's from its start (zeroed by the kernel).
  pool.Free(slots[9]);
  EXPECT_EQ(pool.Allocate(), slots[9]);
  std::set<char*> spare;
  for (int i = 0; i < 32; ++i) spare.insert(static_cast<char*>(pool.Allocate()));
  EXPECT_EQ(spare, std::set<char*>(slots.begin() + 32, slots.begin() + 64));  // (its free list's order)
  char* again = static_cast<char*>(pool.Allocate());
  EXPECT_EQ(again, g[2]);
  EXPECT_EQ(again[slot - 1], 0);  // (past where a free slot keeps its link)
  EXPECT_EQ(pool.released_groups(), 1u);

  // One slot made and freed over and over beside a live group: the spare
  // stays, nothing more is given back.
  pool.Free(again);
  for (int i = 0; i < 32; ++i) pool.Free(g[1] + i * slot);
  const size_t before = pool.released_groups();
  for (int i = 0; i < 1000; ++i) pool.Free(pool.Allocate());
  EXPECT_EQ(pool.released_groups(), before);
  for (int i = 0; i < 32; ++i) pool.Free(slots[i]);
}

TEST(SlabPool, LargeSlotsHaveTheWholeSlabAsTheirGroup) {
  SlabPool pool((size_t{2} << 20) + 16);
  EXPECT_EQ(pool.group_bytes(), SlabPool::kSlabBytes);
  EXPECT_EQ(pool.slots_per_group(), 15u);
  SlabPool mid((size_t{1} << 20) + 16);  // in 2 MiB groups: one a group, 16 a slab; whole: 31
  EXPECT_EQ(mid.slots_per_group(), 31u);
  EXPECT_EQ(SlabPool(size_t{256} << 10).group_bytes(), size_t{2} << 20);
  // Two slabs filled and emptied: the first is the spare, the second goes back whole.
  std::vector<void*> big;
  for (int i = 0; i < 30; ++i) big.push_back(pool.Allocate());
  for (void* p : big) pool.Free(p);
  EXPECT_EQ(pool.released(), 1u);
  EXPECT_EQ(pool.released_groups(), 1u);
  SlabPool small(48);
  EXPECT_EQ(small.slots_per_group(), (size_t{2} << 20) / 48);  // none crosses a group's end
  std::vector<void*> slots;
  for (size_t i = 0; i <= small.slots_per_group(); ++i) slots.push_back(small.Allocate());
  EXPECT_EQ(reinterpret_cast<uintptr_t>(slots.back()) % (size_t{2} << 20), 0u);  // the next group's first
  for (void* p : slots) small.Free(p);
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
