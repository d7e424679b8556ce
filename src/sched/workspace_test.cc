#include "sched/workspace.h"

#include <gtest/gtest.h>

#include "sched/test_util.h"

namespace rota::sched {
namespace {

using testing::Group;
using testing::MakeCluster;

TEST(Txn, RollbackUndoesSharesAndMigInstancesWithTheGpus) {
  ClusterConfig c;
  NodeGroupConfig mig = Group("a", 1, 2, "A100");
  mig.gpu_memory = 80 * 1024;
  mig.has_mig = true;
  mig.mig = {"3g.40gb", "3g.40gb"};
  c.node_groups.push_back(mig);
  ClusterState st = MakeCluster(c);
  Snapshot snap = st.GetSnapshot();
  Workspace ws;
  ws.Reset(snap);
  Txn txn(&ws);
  txn.Begin();
  EXPECT_EQ(ws.share(0, 1), nullptr);
  const Workspace::MigView before = ws.mig(0, 0);
  const MigLayout layout = *before.layout;
  txn.SetShare(0, 1, {250, 1024});
  txn.SetShare(0, 1, {500, 2048});  // a second share on the same GPU
  txn.SetMig(0, 0, {layout, 1});     // the instance at slot 0 in use
  txn.Place({0, 0, 0, 0, 1000, 1024});
  ASSERT_NE(ws.share(0, 1), nullptr);
  EXPECT_EQ(ws.share(0, 1)->milli, 500);
  EXPECT_EQ(ws.mig(0, 0).used, 1);
  const MilliCpu cpu = ws.View(0).free_cpu;
  txn.Rollback();
  EXPECT_EQ(ws.share(0, 1), nullptr);
  EXPECT_EQ(ws.mig(0, 0).used, before.used);
  EXPECT_EQ(ws.View(0).free_cpu, cpu + 1000);
  // Kept changes survive the next gang's Begin and rollback.
  txn.Begin();
  txn.SetShare(0, 1, {250, 0});
  txn.Begin();
  txn.SetShare(0, 1, {750, 0});
  txn.Rollback();
  ASSERT_NE(ws.share(0, 1), nullptr);
  EXPECT_EQ(ws.share(0, 1)->milli, 250);
  // A new cycle starts from the snapshot.
  ws.Reset(snap);
  EXPECT_EQ(ws.share(0, 1), nullptr);
}

}  // namespace
}  // namespace rota::sched
