#include "sched/registry.h"

#include <gtest/gtest.h>

#include "base/rng.h"

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

// A keyed job order's keys order jobs exactly as its Compare does (the
// session sorts on the keys): every built-in one, on random jobs, some
// running (their attained service grows with the time), at random times.
TEST(JobOrders, KeysOrderJobsAsCompareDoes) {
  Rng rng(7);
  std::vector<JobRecord> jobs(200);
  for (size_t i = 0; i < jobs.size(); ++i) {
    JobRecord& j = jobs[i];
    j.id = JobId(i + 1);
    JobSpec spec;
    spec.priority = static_cast<int32_t>(rng.Uniform(5)) - 2;
    spec.tasks.push_back({.name = "w", .replicas = static_cast<int32_t>(1 + rng.Uniform(3)),
                          .gpus = static_cast<int32_t>(rng.Uniform(3)), .command = {"x"}});
    j.SetSpec(std::move(spec));
    j.submitted_at = static_cast<TimePoint>(rng.Uniform(4)) * kMicrosPerSecond;  // (ties too)
    j.attained = static_cast<Duration>(rng.Uniform(3)) * 3000 * kMicrosPerSecond;
    if (rng.Uniform(2) == 0) {
      j.state = JobState::kRunning;
      j.started_at = static_cast<TimePoint>(rng.Uniform(10'000)) * kMicrosPerSecond;
    }
  }
  int keyed = 0;
  for (const std::string& name : BuiltinRegistry().Names()) {
    std::unique_ptr<Plugin> plugin = BuiltinRegistry().Create(name);
    const auto* order = dynamic_cast<const JobOrderPlugin*>(plugin.get());
    if (order == nullptr || !order->keyed()) continue;
    ++keyed;
    for (int t = 0; t < 5; ++t) {
      const TimePoint now = static_cast<TimePoint>(rng.Uniform(20'000)) * kMicrosPerSecond;
      for (const JobRecord& a : jobs) {
        for (const JobRecord& b : jobs) {
          const int c = order->Compare(a, b, now);
          const int64_t ka = order->Key(a, now), kb = order->Key(b, now);
          ASSERT_EQ(c < 0, ka < kb) << name << " jobs " << a.id.value() << ", " << b.id.value();
          ASSERT_EQ(c > 0, ka > kb) << name << " jobs " << a.id.value() << ", " << b.id.value();
        }
      }
    }
  }
  EXPECT_EQ(keyed, 5);  // priority, fifo, las, tiresias, smallest-first
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
