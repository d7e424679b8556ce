#include "sched/registry.h"

#include <gtest/gtest.h>

namespace rota::sched {
namespace {

TEST(Profile, DefaultProfileHasOnePlacerAndOrderedPlugins) {
  auto p = Profile::Create({}, BuiltinRegistry());
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(p->placer().name(), "topology");
  ASSERT_EQ(p->job_orders().size(), 2u);
  EXPECT_EQ(p->job_orders()[0]->name(), "priority");
  EXPECT_EQ(p->filters().size(), 1u);
  EXPECT_EQ(p->scores().size(), 1u);
}

TEST(Profile, RejectsUnknownDuplicateAndTwoPlacers) {
  ProfileConfig c;
  c.plugins = {{"topology", 1}, {"nope", 1}};
  auto p = Profile::Create(c, BuiltinRegistry());
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("profile.plugins[1]: unknown plugin 'nope'"), std::string::npos);
  c.plugins = {{"topology", 1}, {"scan", 1}};
  EXPECT_FALSE(Profile::Create(c, BuiltinRegistry()).ok());
  c.plugins = {{"binpack", 1}};
  EXPECT_EQ(Profile::Create(c, BuiltinRegistry()).status().message(), "profile.plugins: no placer enabled (e.g. topology)");
  c.plugins = {{"topology", 1}, {"topology", 1}};
  EXPECT_FALSE(Profile::Create(c, BuiltinRegistry()).ok());
  c.plugins = {{"topology", 1}, {"binpack", 101}};
  EXPECT_FALSE(Profile::Create(c, BuiltinRegistry()).ok());
}

TEST(Profile, ScoresAreAWeightedSum) {
  ProfileConfig c;
  c.plugins = {{"topology", 1}, {"binpack", 3}, {"spread", 1}};
  auto p = Profile::Create(c, BuiltinRegistry());
  ASSERT_TRUE(p.ok());
  // 8 GPUs, 2 free, 1 asked: binpack 100*7/8=87, spread 100*1/8=12.
  EXPECT_EQ(p->Score({8, 2, 1}), 3 * 87 + 12);
}

}  // namespace
}  // namespace rota::sched

namespace rota::sched {
namespace {

TEST(Profile, PointsLeftUnnamedGetTheirDefaults) {
  auto p = Profile::Create({}, BuiltinRegistry());
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(p->queue_order().name(), "drf");
  ASSERT_EQ(p->admit().size(), 1u);
  EXPECT_EQ(p->admit()[0]->name(), "quota");
  EXPECT_EQ(p->victim_order().name(), "lost-work");
  EXPECT_EQ(p->share_placer().name(), "fgd");
  EXPECT_EQ(p->action_names(), DefaultActions());
  ASSERT_EQ(p->actions().size(), 2u);  // allocate, grow-elastic; the rest run inside allocate
  EXPECT_EQ(p->make_room().size(), 1u);
  EXPECT_EQ(p->when_blocked().size(), 2u);
}

}  // namespace
}  // namespace rota::sched
