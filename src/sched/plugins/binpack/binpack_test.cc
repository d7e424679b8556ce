#include <gtest/gtest.h>

#include "sched/registry.h"

namespace rota::sched {
namespace {

const ScorePlugin& Scorer(const char* name) {
  static std::vector<std::unique_ptr<Plugin>> keep;
  keep.push_back(BuiltinRegistry().Create(name));
  return *dynamic_cast<const ScorePlugin*>(keep.back().get());
}

TEST(Binpack, PrefersTheFullestNodeAfterPlacement) {
  const ScorePlugin& b = Scorer("binpack");
  EXPECT_EQ(b.Score({8, 1, 1}), 100);  // fills the node
  EXPECT_EQ(b.Score({8, 8, 1}), 12);   // 1 of 8 used
  EXPECT_GT(b.Score({8, 2, 1}), b.Score({8, 5, 1}));
  EXPECT_EQ(b.Score({0, 0, 0}), 0);
}

TEST(Spread, PrefersTheEmptiestNodeAfterPlacement) {
  const ScorePlugin& s = Scorer("spread");
  EXPECT_EQ(s.Score({8, 8, 0}), 100);
  EXPECT_EQ(s.Score({8, 1, 1}), 0);
  EXPECT_GT(s.Score({8, 5, 1}), s.Score({8, 2, 1}));
}

}  // namespace
}  // namespace rota::sched
