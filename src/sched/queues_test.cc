#include "sched/queues.h"

#include <gtest/gtest.h>

#include "sched/test_util.h"

namespace rota::sched {
namespace {

using testing::GpuJob;
using testing::Group;
using testing::MakeCluster;
using testing::StartJob;

// research (quota 16: nlp 8, vision 8) and prod (quota 16) on 32 H100.
struct Tree {
  ClusterConfig config;
  ClusterState st = MakeCluster(Config());
  QueueBook book;
  static ClusterConfig Config() {
    ClusterConfig c;
    c.node_groups.push_back(Group("n", 4, 8));
    c.queues = {{.name = "research",
                 .quota = {{"H100", 16}},
                 .children = {{.name = "nlp", .quota = {{"H100", 8}}}, {.name = "vision", .quota = {{"H100", 8}}}}},
                {.name = "prod", .quota = {{"H100", 16}}}};
    return c;
  }
  Tree() { config = Config(); }
  void Run(uint64_t id, const std::string& queue, uint32_t node) {
    JobSpec s = GpuJob("j", 1, 8);
    s.queue = queue;
    s.preemptible = true;
    StartJob(st, id, s, {node}, 0xff, 0);
  }
  void Book() {
    book.Configure(config);
    book.Reset(st.GetSnapshot());
  }
  int32_t Leaf(const std::string& path) const { return book.LeafIndex(path); }
};

// A job's shares of GPUs count as whole GPUs per model, each model's rounded
// up (two quarters on two models: one GPU of each), and a MIG slice as its
// compute share (three 1g slices: 3/7 of a GPU, one GPU), not a GPU each.
TEST(QueueBook, SharesCountAsWholeGpusPerModelAndMigSlicesAsTheirComputeShare) {
  ClusterConfig c;
  c.node_groups.push_back(Group("h", 1, 2, "H100"));
  NodeGroupConfig a = Group("a", 1, 2, "A100");
  a.gpu_memory = 80 * 1024;
  a.has_mig = true;
  a.mig_gpus = 1;  // GPU 0 in MIG mode, GPU 1 whole
  a.mig = {"1g.10gb", "1g.10gb", "1g.10gb", "1g.10gb", "1g.10gb", "1g.10gb", "1g.10gb"};
  c.node_groups.push_back(a);
  c.queues = {{.name = "q", .quota = {{"H100", 10}, {"A100", 10}}}};
  ClusterState st = MakeCluster(c);
  JobSpec quarters;
  quarters.name = "quarters";
  quarters.queue = "q";
  quarters.tasks.push_back({.name = "w", .replicas = 2, .gpu_share = {.fraction_milli = 250}});
  ASSERT_TRUE(st.Apply(JobSubmitted{JobId(1), quarters, 0}).ok());
  ASSERT_TRUE(st.Apply(JobBound{JobId(1), {{0, 0, NodeId(0), 1, 250}, {0, 1, NodeId(1), 2, 250}}, 1}).ok());
  JobSpec slices;
  slices.name = "slices";
  slices.queue = "q";
  slices.tasks.push_back({.name = "w", .replicas = 3, .gpu_share = {.mig_profile = "1g.10gb"}});
  ASSERT_TRUE(st.Apply(JobSubmitted{JobId(2), slices, 0}).ok());
  const Status bound =
      st.Apply(JobBound{JobId(2), {{0, 0, NodeId(1), 1, 0, 0}, {0, 1, NodeId(1), 1, 0, 1}, {0, 2, NodeId(1), 1, 0, 2}}, 1});
  ASSERT_TRUE(bound.ok()) << bound.message();
  QueueBook book;
  book.Configure(c);
  book.Reset(st.GetSnapshot());
  const Snapshot snap = st.GetSnapshot();
  const int32_t q = book.LeafIndex("q");
  EXPECT_EQ(book.HeldWithinGuarantees(q, snap.ModelIndex("H100")), 1);
  EXPECT_EQ(book.HeldWithinGuarantees(q, snap.ModelIndex("A100")), 2);  // a quarter, and 3/7 of a GPU
}

TEST(QueueBook, AParentHoldsItsChildrensGpusUpToEachGuarantee) {
  Tree t;
  t.Run(1, "research/vision", 0);
  t.Run(2, "research/vision", 1);
  t.Run(3, "research/vision", 2);  // vision 24 of its 8
  t.Book();
  const int32_t research = t.book.LeafIndex("research");  // not a leaf
  EXPECT_EQ(research, -1);
  EXPECT_EQ(t.book.HeldWithinGuarantees(t.Leaf("research/vision"), 0), 24);
  EXPECT_TRUE(t.book.Borrowing(t.Leaf("research/vision")));
  EXPECT_FALSE(t.book.Borrowing(t.Leaf("research/nlp")));
}

TEST(QueueBook, ReclaimIsJudgedBelowTheCommonAncestor) {
  Tree t;
  t.Run(1, "research/vision", 0);
  t.Run(2, "research/vision", 1);
  t.Run(3, "research/vision", 2);  // research holds 24 > 16: over its own quota
  t.Run(4, "prod", 3);
  t.Book();
  const int32_t nlp = t.Leaf("research/nlp"), vision = t.Leaf("research/vision"), prod = t.Leaf("prod");
  const QueueBook::ModelGpus eight = {{0, 8}};
  EXPECT_TRUE(t.book.MayReclaim(nlp, vision, eight));    // inside research: only nlp is checked
  EXPECT_FALSE(t.book.MayReclaim(nlp, prod, eight));     // prod does not borrow
  EXPECT_TRUE(t.book.MayReclaim(prod, vision, eight));   // prod 8 + 8 <= 16; vision borrows
  EXPECT_FALSE(t.book.MayReclaim(vision, nlp, eight));   // vision is over its guarantee
  EXPECT_FALSE(t.book.MayReclaim(nlp, vision, {{0, 16}}));  // beyond nlp's guarantee
}

TEST(QueueBook, AGuaranteedJobIsNotHeldBackBySiblingsBorrowing) {
  Tree t;
  t.Run(1, "research/vision", 0);
  t.Run(2, "research/vision", 1);
  t.Book();
  std::string why;
  // research holds 16 (all of its quota) but 8 of it is vision's borrowing:
  // a non-preemptible nlp job of 8 stays within the guarantees.
  EXPECT_TRUE(t.book.Admits(t.Leaf("research/nlp"), {{0, 8}}, /*may_borrow=*/false, &why)) << why;
  EXPECT_FALSE(t.book.Admits(t.Leaf("research/nlp"), {{0, 16}}, false, &why));
  EXPECT_NE(why.find("queue research/nlp holds 0 H100 GPUs and would hold 16"), std::string::npos) << why;
}

TEST(QueueBook, NoQueueHoldsMoreThanItsCeilingWhateverIsReclaimable) {
  Tree t;
  t.config.queues[0].borrowing_limit = {{"H100", 8}};  // research at most 24
  t.Run(1, "research/vision", 0);
  t.Run(2, "research/vision", 1);
  t.Run(3, "research/vision", 2);
  t.Book();
  std::string why;
  EXPECT_FALSE(t.book.Admits(t.Leaf("research/nlp"), {{0, 8}}, false, &why));
  EXPECT_NE(why.find("queue research holds 24 H100 GPUs and would hold 32; its limit is 16 guaranteed + 8 borrowable"),
            std::string::npos)
      << why;
}

}  // namespace
}  // namespace rota::sched
