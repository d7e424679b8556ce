#include "sched/bitset_index.h"

#include <gtest/gtest.h>

#include <set>

#include "base/rng.h"

namespace rota::sched {
namespace {

TEST(TwoLevelBitset, FindNextMatchesASetAcrossSummaryWords) {
  const uint32_t n = 20000;
  TwoLevelBitset b;
  b.Resize(n);
  std::set<uint32_t> ref;
  Rng rng(3);
  for (int i = 0; i < 3000; ++i) {
    uint32_t pos = static_cast<uint32_t>(rng.Uniform(n));
    if (rng.Uniform(3) == 0) {
      b.Clear(pos);
      ref.erase(pos);
    } else {
      b.Set(pos);
      ref.insert(pos);
    }
    uint32_t from = static_cast<uint32_t>(rng.Uniform(n));
    uint32_t end = from + static_cast<uint32_t>(rng.Uniform(n - from + 1));
    auto it = ref.lower_bound(from);
    uint32_t want = (it == ref.end() || *it >= end) ? end : *it;
    ASSERT_EQ(b.FindNext(from, end), want) << "from " << from << " end " << end;
  }
}

TEST(TwoLevelBitset, EmptyRangesAndEdges) {
  TwoLevelBitset b;
  b.Resize(130);
  EXPECT_EQ(b.FindNext(0, 130), 130u);
  b.Set(129);
  EXPECT_EQ(b.FindNext(0, 130), 129u);
  EXPECT_EQ(b.FindNext(0, 129), 129u);
  EXPECT_EQ(b.FindNext(5, 5), 5u);
  b.Set(64);
  EXPECT_EQ(b.FindNext(0, 130), 64u);
  b.Clear(64);
  EXPECT_EQ(b.FindNext(0, 130), 129u);
}

}  // namespace
}  // namespace rota::sched
