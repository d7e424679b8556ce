#include <gtest/gtest.h>

#include "sched/plugins/builtin.h"
#include "sched/test_util.h"

namespace rota::sched {
namespace {

using testing::GpuJob;
using testing::Group;
using testing::kMinute;
using testing::MakeCluster;
using testing::MakeScheduler;
using testing::StartJob;

// `job` in queue `queue`.
JobSpec In(JobSpec job, const char* queue) {
  job.queue = queue;
  return job;
}

// Each waiting job's reason in `r`.
std::map<JobId, PendingReason> Reasons(const CycleResult& r) {
  std::map<JobId, PendingReason> why;
  for (const Waiting& w : r.pending) why[w.job] = w.reason;
  return why;
}

JobSpec Low(std::string name, int32_t gpus) {
  JobSpec s = GpuJob(std::move(name), 1, gpus);
  s.priority = 100;
  s.preemptible = true;
  return s;
}

JobSpec High(std::string name, int32_t gpus) {
  JobSpec s = GpuJob(std::move(name), 1, gpus);
  s.priority = 1000;
  return s;
}

// One 8-GPU node held by two 4-GPU low jobs; a high 4-GPU job arrives.

struct TwoLow {
  ClusterConfig config = testing::Nodes(1);
  ClusterState st = MakeCluster(config);
  TimePoint now = 1000 * kMinute;
  TwoLow(TimePoint first_started, TimePoint second_started) {
    StartJob(st, 1, Low("old", 4), {0}, 0x0f, first_started);
    StartJob(st, 2, Low("young", 4), {0}, 0xf0, second_started);
    EXPECT_TRUE(st.Apply(JobSubmitted{JobId(3), High("urgent", 4), now - 1}).ok());
  }
};

TEST(Preempt, EvictsTheGangThatLosesTheLeastWork) {
  TwoLow c(/*old*/ 900 * kMinute, /*young*/ 980 * kMinute);  // 4 x 100m vs 4 x 20m
  CycleResult r;
  MakeScheduler(c.config)->RunCycle(c.st.GetSnapshot(), c.now, &r);
  ASSERT_EQ(r.preemptions.size(), 1u);
  EXPECT_EQ(r.preemptions[0].victim, JobId(2));
  EXPECT_EQ(r.preemptions[0].preemptor, JobId(3));
  ASSERT_EQ(r.pending.size(), 1u);
  EXPECT_EQ(r.pending[0].reason.code, ReasonCode::kPreempting);
}

TEST(Preempt, ACheckpointMakesAnOldGangTheCheaperVictim) {
  // Without checkpoints young loses less (4 x 50m against 4 x 100m).
  TwoLow c(/*old*/ 900 * kMinute, /*young*/ 950 * kMinute);
  CycleResult r;
  MakeScheduler(c.config)->RunCycle(c.st.GetSnapshot(), c.now, &r);
  ASSERT_EQ(r.preemptions.size(), 1u);
  EXPECT_EQ(r.preemptions[0].victim, JobId(2));
  // old saved a minute ago: it loses 4 x 1m now, and goes instead.
  ASSERT_TRUE(c.st.Apply(JobCheckpointed{JobId(1), 999 * kMinute, ""}).ok());
  MakeScheduler(c.config)->RunCycle(c.st.GetSnapshot(), c.now, &r);
  ASSERT_EQ(r.preemptions.size(), 1u);
  EXPECT_EQ(r.preemptions[0].victim, JobId(1));
}

// A VictimOrder plugin replaces lost work: here the oldest gang goes first.
class OldestFirst final : public VictimOrderPlugin {
 public:
  std::string_view name() const override { return "oldest-first"; }
  int64_t Cost(const JobRecord& victim, TimePoint) const override { return victim.started_at; }
};

TEST(Preempt, TheProfilesVictimOrderDecidesWhoGoes) {
  TwoLow c(/*old*/ 900 * kMinute, /*young*/ 980 * kMinute);  // lost work: young is cheaper
  Registry registry;
  RegisterBuiltinPlugins(registry);
  registry.Register("oldest-first", [] { return std::make_unique<OldestFirst>(); });
  c.config.profile.plugins = DefaultProfileConfig().plugins;
  c.config.profile.plugins.push_back({"oldest-first", 1});
  auto s = Scheduler::Create(c.config, {}, registry);
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  CycleResult r;
  (*s)->RunCycle(c.st.GetSnapshot(), c.now, &r);
  ASSERT_EQ(r.preemptions.size(), 1u);
  EXPECT_EQ(r.preemptions[0].victim, JobId(1));
}

// Under a preemptive job order (las), a newcomer evicts a gang of its own
// priority that has run longer; under the default order (fifo) it waits.
TEST(Preempt, APreemptiveOrderEvictsEqualPriorityGangsItPutsLater) {
  ClusterConfig config = testing::Nodes(1);
  ClusterState st = MakeCluster(config);
  const TimePoint now = 1000 * kMinute;
  StartJob(st, 1, Low("long", 8), {0}, 0xff, 880 * kMinute);  // has run 2 h
  ASSERT_TRUE(st.Apply(JobSubmitted{JobId(2), Low("new", 8), now - 1}).ok());
  CycleResult r;
  MakeScheduler(config)->RunCycle(st.GetSnapshot(), now, &r);
  EXPECT_TRUE(r.preemptions.empty());
  for (const char* order : {"las", "tiresias"}) {
    SCOPED_TRACE(order);
    ClusterConfig c = config;
    c.profile.plugins = {{"priority", 1}, {order, 1}, {"fifo", 1}, {"resource-fit", 1}, {"gang", 1}, {"topology", 1}, {"binpack", 1}};
    MakeScheduler(c)->RunCycle(st.GetSnapshot(), now, &r);
    ASSERT_EQ(r.preemptions.size(), 1u);
    EXPECT_EQ(r.preemptions[0].victim, JobId(1));
    EXPECT_EQ(r.preemptions[0].preemptor, JobId(2));
    // The reason says what decided: the order, not a priority (it said
    // "priority 100 > 100").
    const std::string& why = r.preemptions[0].reason;
    EXPECT_NE(why.find(std::string("for both; the ") + order + " job order puts it first"), std::string::npos) << why;
    EXPECT_EQ(why.find(" > "), std::string::npos) << why;
  }
  // Not a job that has run less than the newcomer has attained (las), nor
  // one in the same tiresias queue (below 3,250 GPU-seconds: 8 GPUs x 6 min).
  ClusterState young = MakeCluster(config);
  StartJob(young, 1, Low("short", 8), {0}, 0xff, 994 * kMinute);
  ASSERT_TRUE(young.Apply(JobSubmitted{JobId(2), Low("new", 8), now - 1}).ok());
  ClusterConfig c = config;
  c.profile.plugins = {{"priority", 1}, {"tiresias", 1}, {"fifo", 1}, {"resource-fit", 1}, {"gang", 1}, {"topology", 1}, {"binpack", 1}};
  MakeScheduler(c, {.min_runtime = kMinute})->RunCycle(young.GetSnapshot(), now, &r);
  EXPECT_TRUE(r.preemptions.empty());
  // A higher-priority gang never yields to the order.
  ClusterState high = MakeCluster(config);
  JobSpec h = Low("long-high", 8);
  h.priority = 900;
  StartJob(high, 1, h, {0}, 0xff, 880 * kMinute);
  ASSERT_TRUE(high.Apply(JobSubmitted{JobId(2), Low("new", 8), now - 1}).ok());
  c.profile.plugins[1] = {"las", 1};
  MakeScheduler(c)->RunCycle(high.GetSnapshot(), now, &r);
  EXPECT_TRUE(r.preemptions.empty());
}

TEST(Preempt, NeverBeforeTheMinimumRuntimeNorWithoutAClock) {
  TwoLow c(/*old*/ 995 * kMinute, /*young*/ 996 * kMinute);  // 5 and 4 minutes
  CycleResult r;
  auto s = MakeScheduler(c.config);
  s->RunCycle(c.st.GetSnapshot(), c.now, &r);
  EXPECT_TRUE(r.preemptions.empty());
  ASSERT_EQ(r.pending.size(), 1u);
  EXPECT_EQ(r.pending[0].reason.code, ReasonCode::kInsufficientGpus);
  // With a 3-minute minimum both may go; without a clock, never.
  auto short_min = MakeScheduler(c.config, {.min_runtime = 3 * kMinute});
  short_min->RunCycle(c.st.GetSnapshot(), c.now, &r);
  EXPECT_EQ(r.preemptions.size(), 1u);
  short_min->RunCycle(c.st.GetSnapshot(), &r);
  EXPECT_TRUE(r.preemptions.empty());
}

TEST(Preempt, AtMostThePerHourCapOfEvictionsOfOneGang) {
  TwoLow c(/*old*/ 900 * kMinute, /*young*/ 900 * kMinute);
  CycleResult r;
  // Cap 0: no gang may be evicted at all.
  MakeScheduler(c.config, {.max_preemptions_per_hour = 0})->RunCycle(c.st.GetSnapshot(), c.now, &r);
  EXPECT_TRUE(r.preemptions.empty());
  MakeScheduler(c.config, {.max_preemptions_per_hour = 1})->RunCycle(c.st.GetSnapshot(), c.now, &r);
  EXPECT_EQ(r.preemptions.size(), 1u);
}

TEST(Preempt, TheSearchBudgetBoundsHowManyBlockedJobsLookForVictims) {
  TwoLow c(/*old*/ 900 * kMinute, /*young*/ 900 * kMinute);
  CycleResult r;
  MakeScheduler(c.config, {.max_preemption_searches = 0})->RunCycle(c.st.GetSnapshot(), c.now, &r);
  EXPECT_TRUE(r.preemptions.empty());
}

TEST(Preempt, AProfileWithoutItNeverEvicts) {
  TwoLow c(/*old*/ 900 * kMinute, /*young*/ 900 * kMinute);
  c.config.profile.actions = {"allocate", "reserve"};
  CycleResult r;
  MakeScheduler(c.config)->RunCycle(c.st.GetSnapshot(), c.now, &r);
  EXPECT_TRUE(r.preemptions.empty());
  ASSERT_EQ(r.pending.size(), 1u);
  EXPECT_EQ(r.pending[0].reason.code, ReasonCode::kInsufficientGpus);
}

TEST(Preempt, ANonPreemptibleGangIsNeverAVictim) {
  ClusterConfig config;
  config.node_groups.push_back(Group("n", 1, 8));
  ClusterState st = MakeCluster(config);
  JobSpec pinned = GpuJob("pinned", 1, 8);
  pinned.priority = 100;  // low, but not preemptible
  StartJob(st, 1, pinned, {0}, 0xff, 0);
  ASSERT_TRUE(st.Apply(JobSubmitted{JobId(2), High("urgent", 8), 10}).ok());
  CycleResult r;
  MakeScheduler(config)->RunCycle(st.GetSnapshot(), 1000 * kMinute, &r);
  EXPECT_TRUE(r.preemptions.empty());
}

// (Moved from engine_test.cc with the engine redesign.)
// Capacity freed for a preemptor is nominated for it: while the rest of its
// victims checkpoint, a lower-priority job does not take the GPUs the first
// victim freed (and is told why); once all have stopped, the preemptor gets
// the whole node.
TEST(Preemption, FreedGpusAreNominatedForThePreemptor) {
  ClusterConfig c;
  c.node_groups.push_back(Group("n", 1, 8));
  ClusterState st = MakeCluster(c);
  auto s = MakeScheduler(c);
  const Duration minute = 60 * kMicrosPerSecond;
  TimePoint now = 100 * minute;
  auto job = [](const char* name, int32_t gpus, int32_t priority, bool preemptible) {
    JobSpec j = GpuJob(name, 1, gpus);
    j.priority = priority;
    j.preemptible = preemptible;
    j.checkpoint.grace = 5 * 60 * kMicrosPerSecond;
    return j;
  };
  ASSERT_TRUE(st.Apply(JobSubmitted{JobId(1), job("v1", 4, 100, true), 0}).ok());
  ASSERT_TRUE(st.Apply(JobSubmitted{JobId(2), job("v2", 4, 100, true), 0}).ok());
  ASSERT_TRUE(st.Apply(JobBound{JobId(1), {{0, 0, NodeId(0), 0x0F}}, 0}).ok());
  ASSERT_TRUE(st.Apply(JobBound{JobId(2), {{0, 0, NodeId(0), 0xF0}}, 0}).ok());
  ASSERT_TRUE(st.Apply(JobSubmitted{JobId(3), job("p", 8, 1000, false), now}).ok());
  ASSERT_TRUE(st.Apply(JobSubmitted{JobId(4), job("y", 4, 500, false), now}).ok());
  CycleResult r;
  s->RunCycle(st.GetSnapshot(), now, &r);
  ASSERT_EQ(r.preemptions.size(), 2u);
  for (const Preemption& p : r.preemptions) {
    EXPECT_EQ(p.preemptor, JobId(3));
    ASSERT_TRUE(st.Apply(JobPreempting{p.victim, now, p.preemptor, p.reason}).ok());
  }
  // v1 checkpoints and stops first: its GPUs are nominated for p.
  now += minute / 2;
  ASSERT_TRUE(st.Apply(JobRequeued{JobId(1), now, "stopped"}).ok());
  EXPECT_EQ(st.GetSnapshot().FindJob(JobId(3))->nominated.size(), 1u);
  s->RunCycle(st.GetSnapshot(), now, &r);
  EXPECT_TRUE(r.placed.empty()) << "job " << r.placed[0].job.value() << " took GPUs nominated for p";
  EXPECT_TRUE(r.preemptions.empty());
  std::map<JobId, PendingReason> why = Reasons(r);
  EXPECT_EQ(why[JobId(3)].code, ReasonCode::kPreempting) << why[JobId(3)].message;
  EXPECT_EQ(why[JobId(4)].code, ReasonCode::kReserved) << why[JobId(4)].message;
  EXPECT_NE(why[JobId(4)].message.find("freed by preemption for higher-priority job(s) 3"), std::string::npos)
      << why[JobId(4)].message;
  // A job of the preemptor's priority or higher is not held back by it.
  ClusterState st2 = st;
  ASSERT_TRUE(st2.Apply(JobSubmitted{JobId(5), job("z", 2, 1000, false), now}).ok());
  s->RunCycle(st2.GetSnapshot(), now, &r);
  ASSERT_EQ(r.placed.size(), 1u);
  EXPECT_EQ(r.placed[0].job, JobId(5));
  // v2 stops: p takes the whole node.
  now += minute / 2;
  ASSERT_TRUE(st.Apply(JobRequeued{JobId(2), now, "stopped"}).ok());
  s->RunCycle(st.GetSnapshot(), now, &r);
  ASSERT_EQ(r.placed.size(), 1u);
  EXPECT_EQ(r.placed[0].job, JobId(3));
  ASSERT_TRUE(st.Apply(JobBound{JobId(3), {r.replicas.begin(), r.replicas.end()}, now}).ok());
  EXPECT_TRUE(st.GetSnapshot().FindJob(JobId(3))->nominated.empty());
  // Without a preemptor waiting, nothing is held: y runs once p ends.
  ASSERT_TRUE(st.Apply(JobFinished{JobId(3), JobOutcome::kSucceeded, now + minute}).ok());
  s->RunCycle(st.GetSnapshot(), now + minute, &r);
  ASSERT_FALSE(r.placed.empty());
  EXPECT_EQ(r.placed[0].job, JobId(4));
}

// GPUs a reclaim freed are held for the reclaiming job against jobs of its
// priority in other queues too: before, the borrowing queue (examined first,
// by its lower fair share) took them back with a job of the same priority,
// the reclaimer evicted again after min_runtime, and never started.
TEST(Preemption, GpusAReclaimFreedAreNotTakenBackByTheBorrowingQueue) {
  ClusterConfig c = testing::Nodes(4);
  c.queues = {{.name = "a", .quota = {{"H100", 24}}}, {.name = "b", .quota = {{"H100", 8}}}};
  ClusterState st = MakeCluster(c);
  auto s = MakeScheduler(c);
  const TimePoint now = 1000 * kMinute;
  auto job = [](const char* name, const char* queue, bool preemptible) {
    JobSpec j = GpuJob(name, 1, 8);
    j.queue = queue;
    j.preemptible = preemptible;
    return j;
  };
  StartJob(st, 1, job("a1", "a", false), {0}, 0xff, 0);
  StartJob(st, 2, job("a2", "a", false), {1}, 0xff, 0);
  StartJob(st, 3, job("b1", "b", false), {2}, 0xff, 0);
  StartJob(st, 4, job("v", "b", true), {3}, 0xff, 0);  // b borrows n-3 from a
  ASSERT_TRUE(st.Apply(JobSubmitted{JobId(5), job("p", "a", false), now - 1}).ok());
  ASSERT_TRUE(st.Apply(JobSubmitted{JobId(6), job("q", "b", true), now - 1}).ok());
  CycleResult r;
  s->RunCycle(st.GetSnapshot(), now, &r);
  ASSERT_EQ(r.preemptions.size(), 1u);
  EXPECT_EQ(r.preemptions[0].victim, JobId(4));
  EXPECT_EQ(r.preemptions[0].preemptor, JobId(5));
  ASSERT_TRUE(st.Apply(JobPreempting{JobId(4), now, JobId(5), r.preemptions[0].reason}).ok());
  ASSERT_TRUE(st.Apply(JobRequeued{JobId(4), now + kMinute, "stopped"}).ok());
  s->RunCycle(st.GetSnapshot(), now + kMinute, &r);
  ASSERT_EQ(r.placed.size(), 1u) << "nothing placed on the freed node";
  EXPECT_EQ(r.placed[0].job, JobId(5)) << "the borrowing queue took the reclaimed node back";
}

// A job its queue's limits refuse evicts gangs of its own queue of lower
// priority, where that admits it, even with free GPUs elsewhere (before, it
// waited for them to end, however long they ran: QuotaExceeded). While they
// stop, later jobs of the queue wait: a job that may borrow would otherwise
// take what the evictions give back, and the preemptor would evict again.
TEST(Preemption, AJobOverItsQueuesQuotaEvictsItsQueuesLowerGangsAndTheQuotaIsHeldForIt) {
  ClusterConfig c = testing::Nodes(3);  // 24 H100, one node free
  c.queues = {{.name = "q", .quota = {{"H100", 8}}, .borrowing_limit = {{"H100", 8}}},
              {.name = "o", .quota = {{"H100", 16}}}};
  ClusterState st = MakeCluster(c);
  auto s = MakeScheduler(c);
  TimePoint now = 1000 * kMinute;
  JobSpec low = In(Low("low", 8), "q");
  StartJob(st, 1, low, {0}, 0xff, 0);
  JobSpec other = In(GpuJob("other", 1, 8), "o");
  StartJob(st, 2, other, {1}, 0xff, 0);
  JobSpec urgent = In(High("urgent", 8), "q");  // not preemptible: within q's guarantee only
  ASSERT_TRUE(st.Apply(JobSubmitted{JobId(3), urgent, now - 1}).ok());
  CycleResult r;
  s->RunCycle(st.GetSnapshot(), now, &r);
  ASSERT_EQ(r.preemptions.size(), 1u) << (r.pending.empty() ? "" : r.pending[0].reason.message.str());
  EXPECT_EQ(r.preemptions[0].victim, JobId(1));
  EXPECT_EQ(r.preemptions[0].preemptor, JobId(3));
  EXPECT_NE(r.preemptions[0].reason.find("priority 1000 > 100"), std::string::npos) << r.preemptions[0].reason;
  ASSERT_TRUE(st.Apply(JobPreempting{JobId(1), now, JobId(3), r.preemptions[0].reason}).ok());
  // While it stops, a job of q that may borrow (it would fit n-2 and q's
  // borrowing limit) waits for the quota held for the preemptor; another
  // queue's job does not.
  JobSpec borrower = In(Low("borrower", 4), "q");
  ASSERT_TRUE(st.Apply(JobSubmitted{JobId(4), borrower, now}).ok());
  now += kMinute;
  s->RunCycle(st.GetSnapshot(), now, &r);
  EXPECT_TRUE(r.placed.empty()) << "job " << r.placed[0].job.value() << " started";
  EXPECT_TRUE(r.preemptions.empty());
  std::map<JobId, PendingReason> why = Reasons(r);
  EXPECT_EQ(why[JobId(3)].code, ReasonCode::kPreempting) << why[JobId(3)].message;
  EXPECT_EQ(why[JobId(4)].code, ReasonCode::kQuota) << why[JobId(4)].message;
  EXPECT_EQ(why[JobId(4)].message.str(),
            "queue q's quota is held for job 3, over it until the gangs it preempted have stopped");
  // It stops: the preemptor starts.
  ASSERT_TRUE(st.Apply(JobRequeued{JobId(1), now, "stopped"}).ok());
  s->RunCycle(st.GetSnapshot(), now, &r);
  ASSERT_FALSE(r.placed.empty());
  EXPECT_EQ(r.placed[0].job, JobId(3));
}

// The quota stays held once it admits the preemptor but the GPUs it waits
// for are still being given back: p (q, 8 GPUs on one node) evicted low1
// and low2 (n-0); low1 has stopped, so q's quota admits p, which waits for
// low2. A job of q that fits the 4 GPUs free on n-3 waits too (before, it
// started there; had it been larger, p would be over quota again once low2
// stopped, with a gang too young to evict in its way).
TEST(Preemption, TheQuotaStaysHeldWhileThePreemptorWaitsForItsQueuesGangs) {
  ClusterConfig c = testing::Nodes(4);
  c.queues = {{.name = "q", .quota = {{"H100", 16}}}, {.name = "o", .quota = {{"H100", 16}}}};
  ClusterState st = MakeCluster(c);
  auto s = MakeScheduler(c);
  TimePoint now = 1000 * kMinute;
  StartJob(st, 1, In(Low("low1", 4), "q"), {0}, 0x0f, 0);
  StartJob(st, 2, In(Low("low2", 4), "q"), {0}, 0xf0, 0);
  StartJob(st, 3, In(GpuJob("mid", 1, 4), "q"), {1}, 0x0f, 0);  // not preemptible
  StartJob(st, 4, In(GpuJob("o1", 1, 4), "o"), {1}, 0xf0, 0);
  StartJob(st, 5, In(GpuJob("o2", 1, 8), "o"), {2}, 0xff, 0);
  StartJob(st, 6, In(GpuJob("o3", 1, 4), "o"), {3}, 0x0f, 0);  // n-3's other 4 GPUs free
  ASSERT_TRUE(st.Apply(JobSubmitted{JobId(7), In(High("p", 8), "q"), now - 1}).ok());
  CycleResult r;
  s->RunCycle(st.GetSnapshot(), now, &r);
  ASSERT_EQ(r.preemptions.size(), 2u) << (r.pending.empty() ? "" : r.pending[0].reason.message.str());
  for (const Preemption& p : r.preemptions) {
    EXPECT_EQ(p.preemptor, JobId(7));
    ASSERT_TRUE(st.Apply(JobPreempting{p.victim, now, p.preemptor, p.reason}).ok());
  }
  now += kMinute;
  ASSERT_TRUE(st.Apply(JobRequeued{JobId(1), now, "stopped"}).ok());
  ASSERT_TRUE(st.Apply(JobSubmitted{JobId(8), In(Low("small", 4), "q"), now}).ok());
  s->RunCycle(st.GetSnapshot(), now, &r);
  EXPECT_TRUE(r.placed.empty()) << "job " << r.placed[0].job.value() << " started";
  std::map<JobId, PendingReason> why = Reasons(r);
  EXPECT_EQ(why[JobId(7)].code, ReasonCode::kPreempting) << why[JobId(7)].message;
  EXPECT_EQ(why[JobId(8)].code, ReasonCode::kQuota) << why[JobId(8)].message;
  ASSERT_TRUE(st.Apply(JobRequeued{JobId(2), now, "stopped"}).ok());
  s->RunCycle(st.GetSnapshot(), now, &r);
  ASSERT_FALSE(r.placed.empty());
  EXPECT_EQ(r.placed[0].job, JobId(7));
}

// Not for a gang of its queue of higher priority, nor one that may not be
// preempted: it waits for quota as before, and takes none of the cycle's
// victim searches.
TEST(Preemption, AJobOverItsQueuesQuotaLeavesHigherAndUnpreemptibleGangs) {
  ClusterConfig c = testing::Nodes(2);
  c.queues = {{.name = "q", .quota = {{"H100", 8}}}, {.name = "o", .quota = {{"H100", 8}}}};
  ClusterState st = MakeCluster(c);
  auto s = MakeScheduler(c);
  const TimePoint now = 1000 * kMinute;
  JobSpec held = In(High("held", 4), "q");
  StartJob(st, 1, held, {0}, 0x0f, 0);
  JobSpec kept = In(GpuJob("kept", 1, 4), "q");  // priority 500, not preemptible
  StartJob(st, 2, kept, {0}, 0xf0, 0);
  JobSpec mid = In(GpuJob("mid", 1, 4), "q");
  mid.priority = 500;
  ASSERT_TRUE(st.Apply(JobSubmitted{JobId(3), mid, now - 1}).ok());
  CycleResult r;
  s->RunCycle(st.GetSnapshot(), now, &r);
  EXPECT_TRUE(r.preemptions.empty());
  ASSERT_EQ(r.pending.size(), 1u);
  EXPECT_EQ(r.pending[0].reason.code, ReasonCode::kQuota) << r.pending[0].reason.message;
}

// A reclaim takes from a borrowing queue no more than it borrows. b holds 20
// of its 16 (b2, b3 on n-2; b4 on n-3 beside 4 free GPUs); p (a, within its
// guarantee) needs a whole node. Before, the cheapest prefix that fit was
// b2 and b3 (8 GPUs: b left 4 below its guarantee); now b3 is past what b
// borrows, and the search finds b4 instead. While b4 stops, b borrows
// nothing more: another job of a evicts nothing (before, b2 and b3 went
// too, b still counted as borrowing with b4 on its books).
TEST(Preemption, AReclaimTakesNoMoreThanTheQueueBorrows) {
  ClusterConfig c = testing::Nodes(4);
  c.queues = {{.name = "a", .quota = {{"H100", 16}}}, {.name = "b", .quota = {{"H100", 16}}}};
  ClusterState st = MakeCluster(c);
  auto s = MakeScheduler(c);
  TimePoint now = 1000 * kMinute;
  auto job = [](const char* name, const char* queue, int32_t gpus, bool preemptible) {
    JobSpec j = GpuJob(name, 1, gpus);
    j.queue = queue;
    j.preemptible = preemptible;
    return j;
  };
  StartJob(st, 1, job("b1", "b", 8, false), {0}, 0xff, 0);
  StartJob(st, 2, job("a1", "a", 8, false), {1}, 0xff, 0);
  StartJob(st, 3, job("b2", "b", 4, true), {2}, 0x0f, 0);
  StartJob(st, 4, job("b3", "b", 4, true), {2}, 0xf0, 0);
  StartJob(st, 5, job("b4", "b", 4, true), {3}, 0x0f, 0);
  ASSERT_TRUE(st.Apply(JobSubmitted{JobId(6), job("p", "a", 8, false), now - 1}).ok());
  CycleResult r;
  s->RunCycle(st.GetSnapshot(), now, &r);
  ASSERT_EQ(r.preemptions.size(), 1u) << (r.pending.empty() ? "" : r.pending[0].reason.message.str());
  EXPECT_EQ(r.preemptions[0].victim, JobId(5));
  EXPECT_EQ(r.preemptions[0].preemptor, JobId(6));
  ASSERT_TRUE(st.Apply(JobPreempting{JobId(5), now, JobId(6), r.preemptions[0].reason}).ok());
  ASSERT_TRUE(st.Apply(JobSubmitted{JobId(7), job("p2", "a", 8, false), now}).ok());
  now += kMinute;
  s->RunCycle(st.GetSnapshot(), now, &r);
  EXPECT_TRUE(r.preemptions.empty()) << "job " << r.preemptions[0].victim.value() << " evicted for job "
                                     << r.preemptions[0].preemptor.value();
}

// Nor a model it does not borrow: b borrows H100s beyond its guarantee and
// holds just its A100 guarantee; a job of a on A100s (a holds none of its
// 16) takes none of b's A100 gangs (before, b's borrowing of any model made
// every gang of b a candidate).
TEST(Preemption, AReclaimTakesOnlyAModelTheQueueBorrows) {
  ClusterConfig c;
  c.node_groups.push_back(Group("h", 2, 8));
  c.node_groups.push_back(Group("x", 2, 8, "A100"));
  c.queues = {{.name = "a", .quota = {{"H100", 8}, {"A100", 16}}}, {.name = "b", .quota = {{"H100", 8}, {"A100", 16}}}};
  ClusterState st = MakeCluster(c);
  auto s = MakeScheduler(c);
  const TimePoint now = 1000 * kMinute;
  auto job = [](const char* name, const char* model) {
    JobSpec j = GpuJob(name, 1, 8);
    j.queue = "b";
    j.preemptible = true;
    j.tasks[0].gpu_model = model;
    return j;
  };
  StartJob(st, 1, job("bh1", "H100"), {0}, 0xff, 0);
  StartJob(st, 2, job("bh2", "H100"), {1}, 0xff, 0);  // b borrows 8 H100
  StartJob(st, 3, job("ba1", "A100"), {2}, 0xff, 0);
  StartJob(st, 4, job("ba2", "A100"), {3}, 0xff, 0);  // and holds its 16 A100
  JobSpec p = In(GpuJob("p", 1, 8), "a");
  p.tasks[0].gpu_model = "A100";
  ASSERT_TRUE(st.Apply(JobSubmitted{JobId(5), p, now - 1}).ok());
  CycleResult r;
  s->RunCycle(st.GetSnapshot(), now, &r);
  EXPECT_TRUE(r.preemptions.empty()) << "job " << r.preemptions[0].victim.value() << " evicted";
}

}  // namespace
}  // namespace rota::sched
