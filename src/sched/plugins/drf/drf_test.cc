#include <gtest/gtest.h>

#include "sched/queues.h"
#include "sched/registry.h"
#include "sched/test_util.h"

namespace rota::sched {
namespace {

using testing::GpuJob;
using testing::Group;
using testing::MakeCluster;
using testing::StartJob;

TEST(Drf, TheQueueWithTheLowerWeightedShareGoesFirst) {
  ClusterConfig c;
  c.node_groups.push_back(Group("n", 1, 8));
  c.queues = {{.name = "a", .weight = 1}, {.name = "b", .weight = 3}};
  ClusterState st = MakeCluster(c);
  JobSpec in_a = GpuJob("a", 1, 2);
  in_a.queue = "a";
  JobSpec in_b = GpuJob("b", 1, 4);
  in_b.queue = "b";
  StartJob(st, 1, in_a, {0}, 0x03, 0);
  StartJob(st, 2, in_b, {0}, 0xf0, 0);
  QueueBook book;
  book.Configure(c);
  book.Reset(st.GetSnapshot());
  auto plugin = BuiltinRegistry().Create("drf");
  const auto& drf = dynamic_cast<const QueueOrderPlugin&>(*plugin);
  const int32_t a = book.LeafIndex("a"), b = book.LeafIndex("b");
  // a: 2/8 over weight 1/4 = 1.0; b: 4/8 over 3/4 = 0.67: b goes first.
  EXPECT_GT(drf.Compare(book, a, b), 0);
  EXPECT_LT(drf.Compare(book, b, a), 0);
  EXPECT_EQ(drf.Compare(book, a, a), 0);
  // Past usage counts too: b averaged 6 GPUs lately (6 + 4 = 10 of 8, / 0.75).
  book.SetHistory({{"b", 6.0}});
  EXPECT_LT(drf.Compare(book, a, b), 0);
}

}  // namespace
}  // namespace rota::sched
