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
