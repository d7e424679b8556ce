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

// (Moved from engine_test.cc with the engine redesign.)
// 40 GPUs; queues a and b with the given weights each submit 100 1-GPU jobs,
// a first (FIFO alone would give a all 40). Returns the GPUs each gets in one
// cycle, with `history` as their decayed past usage.
std::pair<int, int> ShareOfForty(int32_t weight_a, int32_t weight_b, const std::map<std::string, double>& history) {
  ClusterConfig c;
  c.node_groups.push_back(Group("n", 5, 8));
  c.queues = {{.name = "a", .weight = weight_a}, {.name = "b", .weight = weight_b}};
  ClusterState st = MakeCluster(c);
  uint64_t id = 1;
  for (const char* q : {"a", "b"}) {
    for (int i = 0; i < 100; ++i, ++id) {
      JobSpec j = GpuJob("j", 1, 1);
      j.queue = q;
      EXPECT_TRUE(st.Apply(JobSubmitted{JobId(id), j, static_cast<TimePoint>(id)}).ok());
    }
  }
  auto s = testing::MakeScheduler(c);
  s->SetUsageHistory(history);
  CycleResult r;
  s->RunCycle(st.GetSnapshot(), &r);
  int a = 0, b = 0;
  for (const Placed& p : r.placed) (p.job.value() <= 100 ? a : b)++;
  return {a, b};
}

TEST(FairShare, ConvergesToQueueWeightsUnderContention) {
  auto [a, b] = ShareOfForty(1, 3, {});
  EXPECT_EQ(a + b, 40);
  EXPECT_EQ(a, 10);  // weights 1:3 of 40 GPUs
  EXPECT_EQ(b, 30);
}

TEST(FairShare, PastUsageCountsAgainstAQueue) {
  // Queue a averaged 20 GPUs over the decay window; b nothing. Equal weights:
  // shares meet when a holds 10 and b 30 (10 + 20 = 30 + 0).
  auto [a, b] = ShareOfForty(1, 1, {{"a", 20.0}});
  EXPECT_EQ(a, 10);
  EXPECT_EQ(b, 30);
}

}  // namespace
}  // namespace rota::sched
