#include "core/mig.h"

#include <gtest/gtest.h>

#include "core/cluster_state.h"
#include "core/test_util.h"

namespace rota {
namespace {

const MigGeometry& A100_80() { return *MigGeometryFor("NVIDIA A100-SXM4-80GB", 80 * 1024); }

TEST(MigGeometry, MatchesModelsByNameAndMemory) {
  EXPECT_EQ(MigGeometryFor("A100", 40 * 1024)->name, "A100-40GB");
  EXPECT_EQ(MigGeometryFor("a100", 80 * 1024)->name, "A100-80GB");
  EXPECT_EQ(MigGeometryFor("NVIDIA H100 80GB HBM3", 0)->name, "H100-80GB");
  EXPECT_EQ(MigGeometryFor("H200", 141 * 1024)->name, "H200-141GB");
  EXPECT_EQ(MigGeometryFor("T4", 16 * 1024), nullptr);
  EXPECT_EQ(MigGeometryFor("H100", 94 * 1024), nullptr);  // H100 NVL has other profiles
  EXPECT_EQ(MigGeometryFor("A100", 40 * 1024)->ProfileIndex("1g.5gb"), 0);
  EXPECT_EQ(MigGeometryFor("A100", 80 * 1024)->ProfileIndex("1g.5gb"), -1);
}

TEST(MigLayout, ValidLayoutsFromNvidiaDocs) {
  const MigGeometry& g = A100_80();
  for (const char* text : {"7g.80gb@0", "4g.40gb@0,3g.40gb@4", "3g.40gb@0,3g.40gb@4", "2g.20gb@0,2g.20gb@2,2g.20gb@4,1g.10gb@6",
                           "1g.10gb@0,1g.10gb@1,1g.10gb@2,1g.10gb@3,1g.10gb@4,1g.10gb@5,1g.10gb@6",
                           "3g.40gb@0,2g.20gb@4,1g.10gb@6", "1g.20gb@0,1g.20gb@2,1g.20gb@4,1g.20gb@6"}) {
    auto layout = ParseMigLayout(g, text);
    ASSERT_TRUE(layout.ok()) << text << ": " << layout.status().ToString();
    EXPECT_EQ(FormatMigLayout(g, *layout), text);
  }
}

TEST(MigLayout, InvalidLayoutsNameTheReason) {
  const MigGeometry& g = A100_80();
  auto error = [&](const char* text) { return std::string(ParseMigLayout(g, text).status().message()); };
  EXPECT_NE(error("3g.40gb@2").find("only at slot 0, 4"), std::string::npos) << error("3g.40gb@2");
  EXPECT_NE(error("4g.40gb@0,2g.20gb@2").find("overlaps"), std::string::npos);
  EXPECT_NE(error("1g.5gb").find("not a MIG profile of A100-80GB"), std::string::npos);
  EXPECT_NE(error("1g.10gb@9").find("0..7"), std::string::npos);
  EXPECT_NE(error("1g.10gb,,1g.10gb").find("empty entry"), std::string::npos);
  // 4g at 0 leaves 4..7: a 4g cannot start at 4.
  EXPECT_FALSE(ParseMigLayout(g, "4g.40gb,4g.40gb").ok());
}

TEST(MigLayout, UnplacedEntriesFindAValidLayout) {
  const MigGeometry& g = A100_80();
  // Biggest first at 0 would strand the second 1g (1g.10gb cannot start at 7):
  // the search puts 3g at 4 instead.
  auto layout = ParseMigLayout(g, "1g.10gb, 1g.10gb, 3g.40gb, 2g.20gb");
  ASSERT_TRUE(layout.ok()) << layout.status().ToString();
  EXPECT_EQ(FormatMigLayout(g, *layout), "2g.20gb@0,1g.10gb@2,1g.10gb@3,3g.40gb@4");
  auto three = ParseMigLayout(g, "3g.40gb,2g.20gb,1g.10gb");
  ASSERT_TRUE(three.ok());
  EXPECT_EQ(FormatMigLayout(g, *three), "3g.40gb@0,2g.20gb@4,1g.10gb@6");
  // Fixed starts are kept; the rest fit around them.
  auto mixed = ParseMigLayout(g, "3g.40gb@4,1g.10gb,1g.10gb,1g.10gb,1g.10gb");
  ASSERT_TRUE(mixed.ok()) << mixed.status().ToString();
  EXPECT_EQ(FormatMigLayout(g, *mixed), "1g.10gb@0,1g.10gb@1,1g.10gb@2,1g.10gb@3,3g.40gb@4");
  EXPECT_NE(std::string(ParseMigLayout(g, "7g.80gb,1g.10gb").status().message()).find("does not fit"), std::string::npos);
}

TEST(MigProfileName, ComputeSlices) {
  EXPECT_EQ(MigProfileCompute("1g.10gb"), 1);
  EXPECT_EQ(MigProfileCompute("7g.141gb"), 7);
  EXPECT_EQ(MigProfileCompute("8g.10gb"), 0);
  EXPECT_EQ(MigProfileCompute("2g.20"), 0);
  EXPECT_EQ(MigProfileCompute("big"), 0);
}

NodeSpec MigNode() {
  NodeSpec n = testing::A100Node("a0", 2);
  n.labels = {{"rack", "r0"}, {"spine", "s0"}};
  n.mig = {{1, "3g.40gb@0,3g.40gb@4"}};
  return n;
}

JobSpec MigJob(const char* profile, int replicas = 1) {
  JobSpec s;
  s.name = "m";
  s.tasks.push_back({.name = "w", .replicas = replicas, .gpu_share = {.mig_profile = profile}, .cpu = 1000});
  return s;
}

TEST(ClusterStateMig, BindsInstancesAndReconfiguresOnlyIdleGpus) {
  ClusterState st;
  ASSERT_TRUE(st.Apply(NodeAdded{MigNode()}).ok());
  const NodeState& n0 = st.GetSnapshot().node(NodeId(0));
  EXPECT_EQ(n0.mig_mask, 0b10u);
  EXPECT_EQ(n0.free_mask(), 0b01u);  // the MIG GPU is never free whole
  ASSERT_TRUE(st.Apply(JobSubmitted{JobId(1), MigJob("3g.40gb", 2), 1}).ok());
  // No such instance: 3g at slot 2 does not exist.
  Status bad = st.Apply(JobBound{JobId(1), {{0, 0, NodeId(0), 0b10, 0, 0}, {0, 1, NodeId(0), 0b10, 0, 2}}, 2});
  EXPECT_NE(bad.message().find("no 3g.40gb instance at slot 2"), std::string::npos) << bad.ToString();
  // The same instance twice.
  bad = st.Apply(JobBound{JobId(1), {{0, 0, NodeId(0), 0b10, 0, 4}, {0, 1, NodeId(0), 0b10, 0, 4}}, 2});
  EXPECT_NE(bad.message().find("in use"), std::string::npos) << bad.ToString();
  // Not a MIG GPU.
  bad = st.Apply(JobBound{JobId(1), {{0, 0, NodeId(0), 0b01, 0, 0}, {0, 1, NodeId(0), 0b10, 0, 4}}, 2});
  EXPECT_NE(bad.message().find("not in MIG mode"), std::string::npos) << bad.ToString();
  ASSERT_TRUE(st.Apply(JobBound{JobId(1), {{0, 0, NodeId(0), 0b10, 0, 0}, {0, 1, NodeId(0), 0b10, 0, 4}}, 2}).ok());
  EXPECT_EQ(st.GetSnapshot().node(NodeId(0)).mig_used[1], 0b10001u);
  EXPECT_EQ(st.GetSnapshot().node(NodeId(0)).busy_mask(), 0b10u);
  // A whole-GPU job cannot take the MIG GPU.
  JobSpec whole;
  whole.name = "w";
  whole.tasks.push_back({.name = "w", .gpus = 1, .cpu = 1000});
  ASSERT_TRUE(st.Apply(JobSubmitted{JobId(2), whole, 3}).ok());
  EXPECT_FALSE(st.Apply(JobBound{JobId(2), {{0, 0, NodeId(0), 0b10}}, 4}).ok());
  // In use: not re-partitioned.
  EXPECT_FALSE(st.Apply(GpuReconfigured{"a0", 1, "7g.80gb@0"}).ok());
  EXPECT_FALSE(st.Apply(GpuReconfigured{"a0", 0, "7g.80gb@0"}).ok());  // not in MIG mode
  ASSERT_TRUE(st.Apply(JobFinished{JobId(1), JobOutcome::kSucceeded, 5}).ok());
  EXPECT_EQ(st.GetSnapshot().node(NodeId(0)).mig_used[1], 0u);
  EXPECT_FALSE(st.Apply(GpuReconfigured{"a0", 1, "3g.40gb@2"}).ok());  // invalid layout
  ASSERT_TRUE(st.Apply(GpuReconfigured{"a0", 1, "7g.80gb"}).ok());
  EXPECT_EQ(FormatMigLayout(A100_80(), st.GetSnapshot().node(NodeId(0)).mig_layout[1]), "7g.80gb@0");

  // A journal snapshot replays: the ended job's instances existed in an older layout.
  ASSERT_TRUE(st.Apply(JobSubmitted{JobId(3), MigJob("7g.80gb"), 6}).ok());
  ASSERT_TRUE(st.Apply(JobBound{JobId(3), {{0, 0, NodeId(0), 0b10, 0, 0}}, 7}).ok());
  ClusterState replay;
  for (const Event& e : CompactState(st.GetSnapshot())) ASSERT_TRUE(replay.Apply(e).ok());
  const NodeState& r = replay.GetSnapshot().node(NodeId(0));
  EXPECT_EQ(FormatMigLayout(A100_80(), r.mig_layout[1]), "7g.80gb@0");
  EXPECT_EQ(r.mig_used[1], 0b1u);
  EXPECT_EQ(replay.GetSnapshot().FindJob(JobId(1))->state, JobState::kSucceeded);
}

// A node whose agent reads MIG layouts from the driver re-registers with the
// driver's current ones: GPUs nothing holds change; one in use does not; and
// a journal snapshot of such a node replays.
// A GPU that changed MIG mode after jobs on it ended: a journal snapshot
// still loads (an ended job's bind takes nothing: JobBound::ended), with the
// ended jobs' placements as they were. Before, the whole-GPU job's bind was
// refused on the MIG GPU ("GPU already allocated") and no server could start.
TEST(ClusterStateMig, ASnapshotLoadsAfterAGpuChangedModeUnderEndedJobs) {
  NodeSpec n = MigNode();
  n.mig_fixed = true;
  ClusterState st;
  ASSERT_TRUE(st.Apply(NodeAdded{n}).ok());
  JobSpec whole;
  whole.name = "whole";
  whole.tasks.push_back({.name = "w", .replicas = 1, .gpus = 1, .cpu = 1000});
  ASSERT_TRUE(st.Apply(JobSubmitted{JobId(1), whole, 1}).ok());
  ASSERT_TRUE(st.Apply(JobBound{JobId(1), {{0, 0, NodeId(0), 0b01}}, 2}).ok());  // GPU 0, whole
  ASSERT_TRUE(st.Apply(JobFinished{JobId(1), JobOutcome::kSucceeded, 3}).ok());
  ASSERT_TRUE(st.Apply(JobSubmitted{JobId(2), MigJob("3g.40gb"), 4}).ok());
  ASSERT_TRUE(st.Apply(JobBound{JobId(2), {{0, 0, NodeId(0), 0b10, 0, 4}}, 5}).ok());  // an instance on GPU 1
  ASSERT_TRUE(st.Apply(JobCancelled{JobId(2), 6, "by a"}).ok());
  // GPU 0 goes into MIG mode, GPU 1 out of it (both idle now); job 3 runs on GPU 1 whole.
  ASSERT_TRUE(st.Apply(NodeMigChanged{"a0", {{0, "7g.80gb@0"}}, true}).ok());
  ASSERT_TRUE(st.Apply(JobSubmitted{JobId(3), whole, 7}).ok());
  ASSERT_TRUE(st.Apply(JobBound{JobId(3), {{0, 0, NodeId(0), 0b10}}, 8}).ok());
  ClusterState replay;
  for (const Event& e : CompactState(st.GetSnapshot())) { const Status s = replay.Apply(e); ASSERT_TRUE(s.ok()) << s.ToString(); }
  const Snapshot a = st.GetSnapshot(), b = replay.GetSnapshot();
  for (uint64_t id = 1; id <= 3; ++id) {
    EXPECT_EQ(b.FindJob(JobId(id))->state, a.FindJob(JobId(id))->state) << id;
    EXPECT_EQ(b.FindJob(JobId(id))->placement, a.FindJob(JobId(id))->placement) << id;
    EXPECT_EQ(b.FindJob(JobId(id))->attempts.size(), a.FindJob(JobId(id))->attempts.size()) << id;
  }
  const NodeState& before = a.node(NodeId(0));
  const NodeState& after = b.node(NodeId(0));
  EXPECT_EQ(after.mig_mask, before.mig_mask);
  EXPECT_EQ(after.allocated_mask, 0b10u);  // job 3's, and nothing the ended jobs took
  EXPECT_EQ(after.mig_used, before.mig_used);
  EXPECT_EQ(after.cpu_allocated, before.cpu_allocated);
  EXPECT_EQ(FormatMigLayout(A100_80(), after.mig_layout[0]), "7g.80gb@0");
}

TEST(ClusterStateMig, DriversLayoutsChangeOnlyOnIdleGpus) {
  NodeSpec n = MigNode();
  n.mig_fixed = true;
  ClusterState st;
  ASSERT_TRUE(st.Apply(NodeAdded{n}).ok());
  ASSERT_TRUE(st.Apply(JobSubmitted{JobId(1), MigJob("3g.40gb"), 1}).ok());
  ASSERT_TRUE(st.Apply(JobBound{JobId(1), {{0, 0, NodeId(0), 0b10, 0, 4}}, 2}).ok());
  // GPU 1 has an instance in use: its layout cannot change under it.
  Status s = st.Apply(NodeMigChanged{"a0", {{1, "7g.80gb@0"}}, true});
  EXPECT_NE(s.message().find("GPU 1 on 'a0' changed MIG mode or layout while work holds it"), std::string::npos)
      << s.ToString();
  // GPU 0 (idle, whole) goes into MIG mode; GPU 1 keeps its layout and its instance in use.
  ASSERT_TRUE(st.Apply(NodeMigChanged{"a0", {{0, "1g.10gb,1g.10gb"}, {1, "3g.40gb@0,3g.40gb@4"}}, true}).ok());
  const NodeState& a = st.GetSnapshot().node(NodeId(0));
  EXPECT_EQ(a.mig_mask, 0b11u);
  EXPECT_EQ(FormatMigLayout(A100_80(), a.mig_layout[0]), "1g.10gb@0,1g.10gb@1");
  EXPECT_EQ(a.mig_used[1], 0b10000u);
  EXPECT_EQ(a.free_mask(), 0u);
  EXPECT_FALSE(st.Apply(NodeMigChanged{"a0", {{0, "9g.1gb"}}, true}).ok());  // not a layout
  EXPECT_FALSE(st.Apply(NodeMigChanged{"ghost", {}, false}).ok());
  ClusterState replay;
  for (const Event& e : CompactState(st.GetSnapshot())) ASSERT_TRUE(replay.Apply(e).ok());
  EXPECT_TRUE(replay.GetSnapshot().node(NodeId(0)).spec.mig_fixed);
  EXPECT_EQ(replay.GetSnapshot().node(NodeId(0)).mig_used[1], 0b10000u);
  n.mig.clear();
  EXPECT_NE(ValidateNodeSpec(n).message().find("mig_fixed: no GPU is in MIG mode"), std::string::npos);
}

TEST(ClusterStateMig, RefusesNodesWithImpossibleLayouts) {
  NodeSpec n = MigNode();
  n.mig = {{1, "4g.40gb,4g.40gb"}};
  EXPECT_FALSE(ValidateNodeSpec(n).ok());
  n.mig = {{2, ""}};
  EXPECT_NE(ValidateNodeSpec(n).message().find("no GPU 2"), std::string::npos);
  n.mig = {{0, ""}};
  n.gpu_model = "T4";
  EXPECT_NE(ValidateNodeSpec(n).message().find("no MIG geometry for T4"), std::string::npos);
}

TEST(JobSpecMig, ValidatesProfileNamesAndCountsComputeAsGpus) {
  JobSpec s = MigJob("3g.40gb", 3);
  EXPECT_TRUE(ValidateJobSpec(s).ok());
  EXPECT_EQ(s.GpuEquivalent(), 2);  // 3 x 3/7 = 9/7, rounded up
  s.tasks[0].gpu_share.mig_profile = "half";
  EXPECT_NE(ValidateNewJobSpec(s).message().find("tasks[0].gpu.mig: 'half' is not a MIG profile name"), std::string::npos);
  EXPECT_TRUE(ValidateJobSpec(s).ok());  // a journal from before MIG scheduling still replays
  s = MigJob("3g.40gb");
  s.tasks[0].rootfs = "/images/pytorch";
  s.tasks[0].command = {"python3", "train.py"};
  EXPECT_NE(ValidateNewJobSpec(s).message().find("tasks[0].rootfs: a MIG instance runs as a process"), std::string::npos)
      << ValidateNewJobSpec(s).message();
}

}  // namespace
}  // namespace rota

namespace rota {
namespace {

TEST(JobSpecElastic, NewRulesAtSubmissionOldJournalsStillReplay) {
  JobSpec s;
  s.name = "e";
  s.elastic_min_replicas = 1;
  s.tasks.push_back({.name = "a", .replicas = 2, .gpus = 1});
  s.tasks.push_back({.name = "b", .replicas = 1, .gpus = 1});
  EXPECT_TRUE(ValidateJobSpec(s).ok());  // as journals from before elastic scheduling hold it
  EXPECT_FALSE(s.elastic());             // and it runs as a plain gang
  EXPECT_NE(ValidateNewJobSpec(s).message().find("elastic: an elastic job has one task group"), std::string::npos);
  s.tasks.pop_back();
  EXPECT_TRUE(ValidateNewJobSpec(s).ok());
  EXPECT_TRUE(s.elastic());
}

}  // namespace
}  // namespace rota
