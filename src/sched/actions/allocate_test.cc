#include <gtest/gtest.h>

#include <map>

#include "sched/plugins/builtin.h"
#include "sched/test_util.h"

namespace rota::sched {
namespace {

using testing::GpuJob;
using testing::Group;
using testing::kMinute;
using testing::MakeCluster;
using testing::MakeScheduler;
using testing::Nodes;
using testing::StartJob;


TEST(Allocate, PlacesInJobOrderAndExplainsOrRejectsTheRest) {
  ClusterConfig c = Nodes(1);
  ClusterState st = MakeCluster(c);
  JobSpec first = GpuJob("first", 1, 4), second = GpuJob("second", 1, 4), third = GpuJob("third", 1, 4);
  second.priority = 1000;  // goes first
  ASSERT_TRUE(st.Apply(JobSubmitted{JobId(1), first, 1}).ok());
  ASSERT_TRUE(st.Apply(JobSubmitted{JobId(2), second, 2}).ok());
  ASSERT_TRUE(st.Apply(JobSubmitted{JobId(3), third, 3}).ok());
  ASSERT_TRUE(st.Apply(JobSubmitted{JobId(4), GpuJob("huge", 1, 16), 4}).ok());
  CycleResult r;
  MakeScheduler(c)->RunCycle(st.GetSnapshot(), &r);
  ASSERT_EQ(r.placed.size(), 2u);
  EXPECT_EQ(r.placed[0].job, JobId(2));
  EXPECT_EQ(r.placed[1].job, JobId(1));
  ASSERT_EQ(r.pending.size(), 1u);
  EXPECT_EQ(r.pending[0].job, JobId(3));
  EXPECT_EQ(r.pending[0].reason.code, ReasonCode::kInsufficientGpus);
  ASSERT_EQ(r.unresolvable.size(), 1u);
  EXPECT_EQ(r.unresolvable[0].job, JobId(4));
}

TEST(Allocate, ExaminesAtMostMaxJobsPerCycle) {
  ClusterConfig c = Nodes(1);
  ClusterState st = MakeCluster(c);
  for (uint64_t id = 1; id <= 4; ++id) ASSERT_TRUE(st.Apply(JobSubmitted{JobId(id), GpuJob("j", 1, 1), 0}).ok());
  CycleResult r;
  MakeScheduler(c, {.max_jobs_per_cycle = 3})->RunCycle(st.GetSnapshot(), &r);
  EXPECT_EQ(r.placed.size(), 3u);
}

TEST(Allocate, AnElasticJobStartsSmallerRatherThanNotAtAll) {
  ClusterConfig c = Nodes(1);
  ClusterState st = MakeCluster(c);
  StartJob(st, 1, GpuJob("busy", 1, 5), {0}, 0x1f, 0);
  JobSpec el = GpuJob("el", 6, 1);
  el.elastic_min_replicas = 2;
  ASSERT_TRUE(st.Apply(JobSubmitted{JobId(2), el, 1}).ok());
  CycleResult r;
  MakeScheduler(c)->RunCycle(st.GetSnapshot(), &r);
  ASSERT_EQ(r.placed.size(), 1u);
  EXPECT_EQ(r.placed[0].count, 3u);  // the 3 free GPUs
}

// A blocked high job that could both evict a low gang and reserve: the
// profile's order of blocked actions decides which acts.
TEST(Allocate, BlockedActionsActInTheProfilesOrder) {
  ClusterConfig c = Nodes(1);
  ClusterState st = MakeCluster(c);
  JobSpec low = GpuJob("low", 1, 8);
  low.priority = 100;
  low.preemptible = true;
  low.time_limit = 120 * kMinute;
  StartJob(st, 1, low, {0}, 0xff, 0);
  JobSpec high = GpuJob("high", 1, 8);
  high.priority = 1000;
  ASSERT_TRUE(st.Apply(JobSubmitted{JobId(2), high, 1}).ok());
  CycleResult r;
  MakeScheduler(c)->RunCycle(st.GetSnapshot(), 60 * kMinute, &r);  // default: preempt, then reserve
  EXPECT_EQ(r.preemptions.size(), 1u);
  EXPECT_TRUE(r.reservations.empty());
  c.profile.actions = {"allocate", "reserve", "preempt"};
  MakeScheduler(c)->RunCycle(st.GetSnapshot(), 60 * kMinute, &r);
  EXPECT_TRUE(r.preemptions.empty());
  ASSERT_EQ(r.reservations.size(), 1u);
  EXPECT_EQ(r.reservations[0].start, 120 * kMinute);
}

// Admit plugins AND with the quotas: here no placement of more than 4 GPUs.
class AtMostFour final : public AdmitPlugin {
 public:
  std::string_view name() const override { return "at-most-four"; }
  bool Admits(const QueueBook&, int32_t, const std::vector<std::pair<int16_t, int64_t>>& add, bool, bool,
              std::string* why) const override {
    int64_t n = 0;
    for (const auto& [model, gpus] : add) n += gpus;
    if (n <= 4) return true;
    *why = "at most 4 GPUs a job here";
    return false;
  }
};

TEST(Allocate, EveryAdmitPluginMustAgree) {
  ClusterConfig c = Nodes(1);
  c.queues = {{.name = "q"}};
  ClusterState st = MakeCluster(c);
  for (uint64_t id = 1; id <= 2; ++id) {
    JobSpec j = GpuJob(id == 1 ? "big" : "small", 1, id == 1 ? 6 : 2);
    j.queue = "q";
    ASSERT_TRUE(st.Apply(JobSubmitted{JobId(id), j, static_cast<TimePoint>(id)}).ok());
  }
  Registry registry;
  RegisterBuiltinPlugins(registry);
  registry.Register("at-most-four", [] { return std::make_unique<AtMostFour>(); });
  c.profile.plugins = DefaultProfileConfig().plugins;
  c.profile.plugins.push_back({"quota", 1});
  c.profile.plugins.push_back({"at-most-four", 1});
  auto s = Scheduler::Create(c, {}, registry);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  CycleResult r;
  (*s)->RunCycle(st.GetSnapshot(), &r);
  ASSERT_EQ(r.placed.size(), 1u);
  EXPECT_EQ(r.placed[0].job, JobId(2));
  ASSERT_EQ(r.unresolvable.size(), 1u);  // refused even on empty queues: never
  EXPECT_EQ(r.unresolvable[0].reason.code, ReasonCode::kExceedsQuota);
  EXPECT_NE(r.unresolvable[0].reason.message.find("at most 4 GPUs a job here"), std::string::npos);
}

TEST(Allocate, ProfilesRejectUnknownDuplicateAndMisplacedActions) {
  ClusterConfig c = Nodes(1);
  c.profile.actions = {"allocate", "nope"};
  auto s = Scheduler::Create(c);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("profile.actions[1]: unknown action 'nope' (known: allocate"), std::string::npos)
      << s.status().message();
  c.profile.actions = {"allocate", "allocate"};
  EXPECT_NE(Scheduler::Create(c).status().message().find("listed twice"), std::string::npos);
  c.profile.actions = {"allocate", "binpack"};
  EXPECT_NE(Scheduler::Create(c).status().message().find("unknown action 'binpack'"), std::string::npos);
  c.profile.actions = {};
  c.profile.plugins = {{"topology", 1}, {"preempt", 1}};
  EXPECT_NE(Scheduler::Create(c).status().message().find("'preempt' is an action; list it under profile.actions"),
            std::string::npos);
  c.profile.plugins = {{"topology", 1}, {"fgd", 1}};
  EXPECT_NE(Scheduler::Create(c).status().message().find("choose it with profile.share_placement"), std::string::npos);
  c.profile.plugins = {};
  c.profile.share_placement = "topology";
  EXPECT_NE(Scheduler::Create(c).status().message().find("profile.share_placement: 'topology' is not fgd or bestfit"),
            std::string::npos);
}

}  // namespace
}  // namespace rota::sched

namespace rota::sched {
namespace {

TEST(Allocate, TimesInReasonsReadAsPeopleReadThem) {
  // A gang reserved 19m57.993s ahead (a running job's limit ends then):
  // the reason says "in 19m57s", not "1197993ms".
  ClusterConfig c = Nodes(1);
  ClusterState st = MakeCluster(c);
  JobSpec running = GpuJob("running", 1, 8);
  running.time_limit = 1197993 * 1000;
  StartJob(st, 1, running, {0}, 0xff, 0);
  ASSERT_TRUE(st.Apply(JobSubmitted{JobId(2), GpuJob("next", 1, 8), 1}).ok());
  CycleResult r;
  MakeScheduler(c)->RunCycle(st.GetSnapshot(), 1, &r);
  ASSERT_EQ(r.pending.size(), 1u);
  EXPECT_NE(r.pending[0].reason.message.find("reserved: expected to start in 19m57s"), std::string::npos)
      << r.pending[0].reason.message;
}

TEST(Allocate, AShareOverItsQueuesLimitCountsItsGpusRoundedUp) {
  ClusterConfig c = Nodes(1);
  c.queues = {{.name = "q", .quota = {{"H100", 0}}}};
  ClusterState st = MakeCluster(c);
  JobSpec half;
  half.name = "half";
  half.queue = "q";
  half.tasks.push_back({.name = "w", .gpu_share = {.fraction_milli = 500}, .cpu = 1000});
  ASSERT_TRUE(st.Apply(JobSubmitted{JobId(1), half, 1}).ok());
  auto s = MakeScheduler(c);
  JobRecord probe;
  probe.id = JobId(1);
  probe.SetSpec(half);
  const PendingReason why = s->CheckResolvable(st.GetSnapshot(), probe);
  EXPECT_EQ(why.code, ReasonCode::kExceedsQuota);
  EXPECT_NE(why.message.find("needs 1 GPU(s), its shares rounded up"), std::string::npos) << why.message;
  EXPECT_EQ(why.message.find("needs 0 GPUs"), std::string::npos) << why.message;
}

// A share that bounds its GPU memory holds that much of the GPU: a
// thousandth of a GPU with all its memory leaves no room beside it, and
// counts against its queue as the whole GPU (it counted as a thousandth:
// 64 such replicas held 64 GPUs against a quota charged 1).
TEST(Allocate, AShareCountsAsItsGpuMemoryWhereThatIsMore) {
  ClusterConfig c;
  NodeGroupConfig g = Group("n", 1, 8);
  g.gpu_memory = 80 * 1024;
  c.node_groups.push_back(g);
  c.queues = {{.name = "q", .quota = {{"H100", 2}}}};
  ClusterState st = MakeCluster(c);
  auto memory_bound = [](const std::string& name, int32_t replicas) {
    JobSpec s;
    s.name = name;
    s.queue = "q";
    s.tasks.push_back({.name = "w", .replicas = replicas,
                       .gpu_share = {.fraction_milli = 10, .memory = 80 * 1024}, .cpu = 1000});
    return s;
  };
  ASSERT_TRUE(st.Apply(JobSubmitted{JobId(1), memory_bound("three", 3), 1}).ok());
  CycleResult r;
  MakeScheduler(c)->RunCycle(st.GetSnapshot(), 1, &r);
  EXPECT_TRUE(r.placed.empty()) << "3 GPUs' memory placed against a quota of 2";
  ClusterState st2 = MakeCluster(c);
  ASSERT_TRUE(st2.Apply(JobSubmitted{JobId(1), memory_bound("two", 2), 1}).ok());
  CycleResult r2;
  MakeScheduler(c)->RunCycle(st2.GetSnapshot(), 1, &r2);
  ASSERT_EQ(r2.placed.size(), 1u);
  // And the queue's book, rebuilt from the state, holds the two GPUs.
  const Placed& p = r2.placed[0];
  ASSERT_TRUE(st2.Apply(JobBound{p.job, {r2.replicas.begin() + p.first, r2.replicas.begin() + p.first + p.count}, 2}).ok());
  QueueBook book;
  book.Configure(c);
  book.Reset(st2.GetSnapshot());
  EXPECT_EQ(book.HeldWithinGuarantees(book.LeafIndex("q"), 0), 2);
}

TEST(Allocate, ACycleWithNoNodesRejectsNothing) {
  ClusterConfig c;
  ClusterState st(c.topology);
  ASSERT_TRUE(st.Apply(JobSubmitted{JobId(1), GpuJob("early", 1, 1), 0}).ok());
  CycleResult r;
  auto s = MakeScheduler(c);
  s->RunCycle(st.GetSnapshot(), &r);
  EXPECT_TRUE(r.unresolvable.empty());
  ASSERT_EQ(r.pending.size(), 1u);
  EXPECT_EQ(r.pending[0].reason.code, ReasonCode::kNodesUnavailable);
  JobRecord probe;
  probe.SetSpec(GpuJob("early", 1, 1));
  EXPECT_TRUE(s->CheckResolvable(st.GetSnapshot(), probe).ok());
}

// `--count 0-5%2`: at most two of the array's elements run at once; the
// others wait with their reason and neither place, preempt nor reserve. A
// job of no array, and an array without a limit, are not held back.
TEST(Allocate, AJobArrayRunsAtMostItsLimitAtOnce) {
  ClusterConfig c = Nodes(1);
  ClusterState st = MakeCluster(c);
  JobsSubmitted array{JobId(1), 6, GpuJob("sweep", 1, 1), 0, "alice", "", JobId(1), 6, 0, 2};
  ASSERT_TRUE(st.Apply(array).ok());
  ASSERT_TRUE(st.Apply(JobSubmitted{JobId(7), GpuJob("alone", 1, 1), 1}).ok());
  ASSERT_TRUE(st.Apply(JobsSubmitted{JobId(8), 3, GpuJob("free", 1, 1), 1, "bob", "", JobId(8), 3}).ok());
  auto s = MakeScheduler(c);
  CycleResult r;
  s->RunCycle(st.GetSnapshot(), kMinute, &r);
  std::vector<uint64_t> placed;
  for (const auto& p : r.placed) placed.push_back(p.job.value());
  EXPECT_EQ(placed, (std::vector<uint64_t>{1, 2, 7, 8, 9, 10}));
  ASSERT_EQ(r.pending.size(), 4u);
  for (const auto& p : r.pending) {
    EXPECT_EQ(p.reason.code, ReasonCode::kArrayLimit);
    EXPECT_EQ(p.reason.message.str(),
              "its array 1 runs 2 of its elements, as many as it may at once (%2); it starts when one ends");
  }
  EXPECT_TRUE(r.reservations.empty());
  EXPECT_TRUE(r.preemptions.empty());

  // Bound: the next cycle starts none of them; one stopping for a
  // preemption still counts; one ends, and one more starts.
  for (uint64_t id : {1, 2}) {
    ASSERT_TRUE(st.Apply(JobBound{JobId(id), {{0, 0, NodeId(0), uint64_t{1} << id}}, kMinute}).ok());
  }
  auto array_placed = [&] {
    std::vector<uint64_t> ids;
    for (const auto& p : r.placed) {
      if (p.job.value() <= 6) ids.push_back(p.job.value());
    }
    return ids;
  };
  s->RunCycle(st.GetSnapshot(), 2 * kMinute, &r);
  EXPECT_TRUE(array_placed().empty());
  ASSERT_TRUE(st.Apply(JobPreempting{JobId(2), 2 * kMinute, JobId(7), "test"}).ok());
  s->RunCycle(st.GetSnapshot(), 3 * kMinute, &r);
  EXPECT_TRUE(array_placed().empty());
  ASSERT_TRUE(st.Apply(JobFinished{JobId(1), JobOutcome::kSucceeded, 4 * kMinute}).ok());
  s->RunCycle(st.GetSnapshot(), 5 * kMinute, &r);
  EXPECT_EQ(array_placed(), (std::vector<uint64_t>{3}));
}

// An array is journaled in chunks (2,000 elements each): none of its
// elements starts before its last is journaled. A stop between two chunks
// cancels what was committed, and the client's retry submits the whole
// array again: an element that had run, or finished, would run twice. A job
// of no array is not held back.
TEST(Allocate, NoElementOfAnArrayStartsBeforeTheWholeArrayIsJournaled) {
  ClusterConfig c = Nodes(1);
  ClusterState st = MakeCluster(c);
  ASSERT_TRUE(st.Apply(JobsSubmitted{JobId(1), 2, GpuJob("sweep", 1, 1), 0, "alice", "k", JobId(1), 4}).ok());
  ASSERT_TRUE(st.Apply(JobSubmitted{JobId(5), GpuJob("alone", 1, 1), 0}).ok());  // (a job after its ids)
  auto s = MakeScheduler(c);
  CycleResult r;
  s->RunCycle(st.GetSnapshot(), kMinute, &r);
  ASSERT_EQ(r.placed.size(), 1u);
  EXPECT_EQ(r.placed[0].job, JobId(5));
  ASSERT_EQ(r.pending.size(), 2u);
  for (const auto& p : r.pending) {
    EXPECT_EQ(p.reason.code, ReasonCode::kArrayLimit);
    EXPECT_EQ(p.reason.message.str(), "its array 1 of 4 elements is still being submitted: none starts before all are accepted");
  }
  EXPECT_TRUE(r.preemptions.empty());
  EXPECT_TRUE(r.reservations.empty());
  ASSERT_TRUE(st.Apply(JobsSubmitted{JobId(3), 2, GpuJob("sweep", 1, 1), 0, "alice", "k", JobId(1), 4}).ok());
  s->RunCycle(st.GetSnapshot(), 2 * kMinute, &r);
  std::vector<uint64_t> placed;
  for (const auto& p : r.placed) placed.push_back(p.job.value());
  EXPECT_EQ(placed, (std::vector<uint64_t>{1, 2, 3, 4, 5}));  // the whole array, now (and 5, not bound above)
}

// An element that preempts (or reserves) is about to start: with %1 the
// array's next element neither preempts nor reserves beside it, in that
// cycle or the next, while the first is not held back by its own count.
TEST(Allocate, AJobArraysLimitCountsAnElementThatPreemptsForRoom) {
  ClusterConfig c = Nodes(2);
  ClusterState st = MakeCluster(c);
  JobSpec low = GpuJob("low", 1, 8);
  low.priority = 100;
  low.preemptible = true;
  StartJob(st, 1, low, {0}, 0xff, 0);
  StartJob(st, 2, low, {1}, 0xff, 0);
  JobSpec high = GpuJob("sweep", 1, 8);
  high.priority = 1000;
  ASSERT_TRUE(st.Apply(JobsSubmitted{JobId(3), 2, high, 1, "alice", "", JobId(3), 2, 0, 1}).ok());
  auto s = MakeScheduler(c);
  CycleResult r;
  s->RunCycle(st.GetSnapshot(), 60 * kMinute, &r);
  ASSERT_EQ(r.preemptions.size(), 1u);  // not one per element
  EXPECT_EQ(r.preemptions[0].preemptor, JobId(3));
  EXPECT_TRUE(r.reservations.empty());
  ASSERT_EQ(r.pending.size(), 2u);
  EXPECT_EQ(r.pending[1].job, JobId(4));
  EXPECT_EQ(r.pending[1].reason.code, ReasonCode::kArrayLimit);
  // The victim stops for element 3: 3 waits for it, 4 still for the limit.
  const Preemption p = r.preemptions[0];
  ASSERT_TRUE(st.Apply(JobPreempting{p.victim, 60 * kMinute, p.preemptor, p.reason}).ok());
  s->RunCycle(st.GetSnapshot(), 61 * kMinute, &r);
  EXPECT_TRUE(r.preemptions.empty());
  std::map<uint64_t, ReasonCode> why;
  for (const auto& w : r.pending) why[w.job.value()] = w.reason.code;
  EXPECT_EQ(why[3], ReasonCode::kPreempting);
  EXPECT_EQ(why[4], ReasonCode::kArrayLimit);
}

// An element given a reservation is about to start too: with %1 and two
// reservations allowed, the array's next element waits for the limit, not
// for a second reservation.
TEST(Allocate, AJobArraysLimitCountsAnElementThatReserves) {
  ClusterConfig c = Nodes(1);
  ClusterState st = MakeCluster(c);
  JobSpec running = GpuJob("running", 1, 8);
  running.time_limit = 60 * kMinute;  // not preemptible: the array waits for its end
  StartJob(st, 1, running, {0}, 0xff, 0);
  JobSpec element = GpuJob("sweep", 1, 8);
  element.time_limit = 30 * kMinute;
  ASSERT_TRUE(st.Apply(JobsSubmitted{JobId(2), 2, element, 1, "alice", "", JobId(2), 2, 0, 1}).ok());
  CycleResult r;
  MakeScheduler(c, {.reservation_depth = 2})->RunCycle(st.GetSnapshot(), kMinute, &r);
  ASSERT_EQ(r.reservations.size(), 1u);
  EXPECT_EQ(r.reservations[0].job, JobId(2));
  std::map<uint64_t, ReasonCode> why;
  for (const auto& w : r.pending) why[w.job.value()] = w.reason.code;
  EXPECT_EQ(why[3], ReasonCode::kArrayLimit);
}

}  // namespace
}  // namespace rota::sched
