#include "sched/share_place.h"

#include <gtest/gtest.h>

#include "sched/test_util.h"

namespace rota::sched {
namespace {

using testing::Group;
using testing::MakeCluster;
using testing::MakeScheduler;

JobSpec Fraction(std::string name, int32_t replicas, int32_t milli) {
  JobSpec s;
  s.name = std::move(name);
  s.tasks.push_back({.name = "w", .replicas = replicas, .gpu_share = {.fraction_milli = milli}, .cpu = 1000});
  return s;
}

// Two 2-GPU nodes; job 1 holds 0.6 of n-0 GPU 0.
struct Shared {
  ClusterConfig config = Config();
  ClusterState st = MakeCluster(config);
  static ClusterConfig Config() {
    ClusterConfig c;
    c.node_groups.push_back(Group("n", 2, 2));
    return c;
  }
  Shared() {
    EXPECT_TRUE(st.Apply(JobSubmitted{JobId(1), Fraction("held", 1, 600), 0}).ok());
    EXPECT_TRUE(st.Apply(JobBound{JobId(1), {{0, 0, NodeId(0), 1, 600}}, 1}).ok());
  }
};

TEST(PlaceShares, AFractionFillsASharedGpuBeforeSplittingAFreeOne) {
  for (const char* placer : {"fgd", "bestfit"}) {
    Shared c;
    c.config.profile.share_placement = placer;
    ASSERT_TRUE(c.st.Apply(JobSubmitted{JobId(2), Fraction("small", 1, 300), 2}).ok());
    CycleResult r;
    MakeScheduler(c.config)->RunCycle(c.st.GetSnapshot(), &r);
    ASSERT_EQ(r.placed.size(), 1u) << placer;
    ASSERT_EQ(r.replicas.size(), 1u);
    EXPECT_EQ(r.replicas[0].node, NodeId(0)) << placer;
    EXPECT_EQ(r.replicas[0].gpu_mask, 1u) << placer;  // onto the 0.6, leaving 0.1
    EXPECT_EQ(r.replicas[0].gpu_milli, 300);
  }
}

TEST(PlaceShares, AGangThatDoesNotAllFitChangesNothingAndSaysHowManyDid) {
  Shared c;
  // 5 x 0.9: one per GPU, and n-0 GPU 0 has only 0.4 left: 3 fit, not 5.
  ASSERT_TRUE(c.st.Apply(JobSubmitted{JobId(2), Fraction("wide", 5, 900), 2}).ok());
  ASSERT_TRUE(c.st.Apply(JobSubmitted{JobId(3), Fraction("after", 1, 300), 3}).ok());
  CycleResult r;
  MakeScheduler(c.config)->RunCycle(c.st.GetSnapshot(), &r);
  ASSERT_EQ(r.pending.size(), 1u);
  EXPECT_EQ(r.pending[0].job, JobId(2));
  EXPECT_EQ(r.pending[0].reason.code, ReasonCode::kInsufficientGpus);
  EXPECT_NE(r.pending[0].reason.message.find("3 fit now on shared or free GPUs"), std::string::npos)
      << r.pending[0].reason.message;
  // Its tentative shares were rolled back: the next job sees n-0 GPU 0 at 0.6.
  ASSERT_EQ(r.placed.size(), 1u);
  EXPECT_EQ(r.placed[0].job, JobId(3));
  EXPECT_EQ(r.replicas[r.placed[0].first].gpu_mask, 1u);
}

TEST(PlaceShares, NoMatchingGpuAnywhereIsUnresolvable) {
  ClusterConfig c;
  c.node_groups.push_back(Group("cpu", 1, 0));
  ClusterState st = MakeCluster(c);
  ASSERT_TRUE(st.Apply(JobSubmitted{JobId(1), Fraction("f", 1, 250), 0}).ok());
  CycleResult r;
  MakeScheduler(c)->RunCycle(st.GetSnapshot(), &r);
  ASSERT_EQ(r.unresolvable.size(), 1u);
  EXPECT_EQ(r.unresolvable[0].reason.code, ReasonCode::kNoMatchingNodes);
}

}  // namespace
}  // namespace rota::sched
