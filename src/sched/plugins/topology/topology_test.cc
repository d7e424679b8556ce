#include <gtest/gtest.h>

#include <set>

#include "sched/engine.h"
#include "sched/test_util.h"

namespace rota::sched {
namespace {

using testing::GpuJob;
using testing::Group;
using testing::MakeCluster;

// Two racks of 4 nodes x 8 GPUs; rack r0 has 2 GPUs busy on each node.
ClusterState TwoRacks() {
  ClusterConfig c;
  NodeGroupConfig g = Group("n", 8, 8);
  g.nodes_per_rack = 4;
  c.node_groups.push_back(g);
  ClusterState st = MakeCluster(c);
  JobSpec busy = GpuJob("busy", 4, 2);
  EXPECT_TRUE(st.Apply(JobSubmitted{JobId(100), busy, 0}).ok());
  EXPECT_TRUE(st.Apply(JobBound{JobId(100),
                                {{0, 0, NodeId(0), 3}, {0, 1, NodeId(1), 3}, {0, 2, NodeId(2), 3}, {0, 3, NodeId(3), 3}},
                                0})
                  .ok());
  return st;
}

std::set<std::string> RacksOf(const Snapshot& snap, const CycleResult& r, size_t placed) {
  std::set<std::string> racks;
  for (uint32_t i = 0; i < r.placed[placed].count; ++i) {
    racks.insert(snap.node(r.replicas[r.placed[placed].first + i].node).spec.labels.at("rack"));
  }
  return racks;
}

TEST(TopologyPlacer, PacksAGangIntoTheTightestRackThatFits) {
  ClusterState st = TwoRacks();
  // 4 x 6 GPUs: rack n-r0 (24 free) fits exactly and is tighter than n-r1 (32 free).
  ASSERT_TRUE(st.Apply(JobSubmitted{JobId(1), GpuJob("g", 4, 6), 1}).ok());
  CycleResult r;
  auto s = Scheduler::Create({});
  ASSERT_TRUE(s.ok());
  (*s)->RunCycle(st.GetSnapshot(), &r);
  ASSERT_EQ(r.placed.size(), 1u);
  EXPECT_EQ(RacksOf(st.GetSnapshot(), r, 0), std::set<std::string>{"n-r0"});
}

TEST(TopologyPlacer, RequiredRackWaitsPreferredFallsBack) {
  ClusterState st = TwoRacks();
  // Also take 4 GPUs on each node of rack n-r1: every node now has 6 or 4 free.
  JobSpec more = GpuJob("more", 4, 4);
  ASSERT_TRUE(st.Apply(JobSubmitted{JobId(101), more, 0}).ok());
  ASSERT_TRUE(st.Apply(JobBound{JobId(101),
                                {{0, 0, NodeId(4), 0xF}, {0, 1, NodeId(5), 0xF}, {0, 2, NodeId(6), 0xF},
                                 {0, 3, NodeId(7), 0xF}},
                                0})
                  .ok());
  // 6 x 4 GPUs: each rack holds only 4 such replicas now (one per node), the
  // cluster 8. Required waits with a topology reason; preferred spans racks.
  JobSpec req = GpuJob("req", 6, 4);
  req.topology = {"rack", TopologyMode::kRequired};
  ASSERT_TRUE(st.Apply(JobSubmitted{JobId(1), req, 1}).ok());
  auto s = Scheduler::Create({});
  ASSERT_TRUE(s.ok());
  CycleResult r;
  (*s)->RunCycle(st.GetSnapshot(), &r);
  ASSERT_TRUE(r.placed.empty());
  ASSERT_EQ(r.pending.size(), 1u);
  EXPECT_EQ(r.pending[0].reason.code, ReasonCode::kTopology);
  EXPECT_EQ(r.pending[0].reason.message, "needs 6 replicas x 4 GPUs within one rack; the best rack (n-r0) fits 4 now");

  JobSpec pref = req;
  pref.name = "pref";
  pref.topology.mode = TopologyMode::kPreferred;
  ASSERT_TRUE(st.Apply(JobCancelled{JobId(1), 2}).ok());
  ASSERT_TRUE(st.Apply(JobSubmitted{JobId(2), pref, 3}).ok());
  (*s)->RunCycle(st.GetSnapshot(), &r);
  ASSERT_EQ(r.placed.size(), 1u);
  EXPECT_EQ(r.placed[0].count, 6u);
  EXPECT_EQ(RacksOf(st.GetSnapshot(), r, 0), (std::set<std::string>{"n-r0", "n-r1"}));
}

TEST(TopologyPlacer, RequiredRackBeyondAnyRackIsUnresolvable) {
  ClusterState st = TwoRacks();
  JobSpec j = GpuJob("huge", 5, 8);
  j.topology = {"rack", TopologyMode::kRequired};
  ASSERT_TRUE(st.Apply(JobSubmitted{JobId(1), j, 1}).ok());
  CycleResult r;
  auto s = Scheduler::Create({});
  ASSERT_TRUE(s.ok());
  (*s)->RunCycle(st.GetSnapshot(), &r);
  ASSERT_EQ(r.unresolvable.size(), 1u);
  EXPECT_EQ(r.unresolvable[0].reason.code, ReasonCode::kExceedsDomainCapacity);
  EXPECT_EQ(r.unresolvable[0].reason.message,
            "needs 5 replicas x 8 GPUs within one rack; the largest rack (n-r0) holds 4 even when empty");
}

TEST(TopologyPlacer, SmallGangLandsOnOneNode) {
  ClusterState st = TwoRacks();
  // 2 x 3 GPUs fits on one node: n-0 has 6 free (tightest).
  ASSERT_TRUE(st.Apply(JobSubmitted{JobId(1), GpuJob("pair", 2, 3), 1}).ok());
  CycleResult r;
  auto s = Scheduler::Create({});
  ASSERT_TRUE(s.ok());
  (*s)->RunCycle(st.GetSnapshot(), &r);
  ASSERT_EQ(r.placed.size(), 1u);
  EXPECT_EQ(r.replicas[0].node, r.replicas[1].node);
  EXPECT_EQ(r.replicas[0].gpu_mask & r.replicas[1].gpu_mask, 0u);
}

}  // namespace
}  // namespace rota::sched
