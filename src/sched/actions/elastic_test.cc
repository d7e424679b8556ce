#include <gtest/gtest.h>

#include "sched/test_util.h"
#include "sched/to_events.h"

namespace rota::sched {
namespace {

using testing::GpuJob;
using testing::Group;
using testing::kMinute;
using testing::MakeCluster;
using testing::MakeScheduler;
using testing::StartJob;

// A service of 1-GPU replicas, min 1 and max `max`, on port 8000.
JobSpec Service(int32_t max, int32_t priority = 0) {
  JobSpec s = GpuJob("svc", max, 1);
  s.kind = JobKind::kService;
  s.priority = priority;
  s.service.min_replicas = 1;
  s.service.max_replicas = max;
  s.service.port = 8000;
  s.elastic_min_replicas = 1;
  return s;
}

// One cycle at `now`, its decisions applied to `st`.
CycleResult Cycle(Scheduler& s, ClusterState& st, TimePoint now) {
  CycleResult r;
  s.RunCycle(st.GetSnapshot(), now, &r);
  for (Event& e : ToEvents(r, st.GetSnapshot(), now)) EXPECT_TRUE(st.Apply(std::move(e)).ok());
  return r;
}

JobSpec Elastic(std::string name, int32_t replicas, int32_t min, int32_t priority) {
  JobSpec s = GpuJob(std::move(name), replicas, 1);
  s.elastic_min_replicas = min;
  s.priority = priority;
  return s;
}


// An elastic job (8 x 1 GPU, min 2) fills the node; `priority` arrives wanting 4 GPUs.
struct Full {
  ClusterConfig config = testing::Nodes(1);
  ClusterState st = MakeCluster(config);
  Full(int32_t newcomer_priority, TimePoint started) {
    JobSpec el = Elastic("el", 8, 2, 500);
    EXPECT_TRUE(st.Apply(JobSubmitted{JobId(1), el, started - 1}).ok());
    std::vector<ReplicaPlacement> p;
    for (uint32_t r = 0; r < 8; ++r) p.push_back({0, r, NodeId(0), uint64_t{1} << r});
    EXPECT_TRUE(st.Apply(JobBound{JobId(1), p, started}).ok());
    JobSpec job = GpuJob("new", 1, 4);
    job.priority = newcomer_priority;
    EXPECT_TRUE(st.Apply(JobSubmitted{JobId(2), job, started}).ok());
  }
};

TEST(ShrinkElastic, AHigherJobTakesSurplusReplicasAtOnce) {
  Full c(/*newcomer*/ 1000, /*started*/ 99 * kMinute);
  CycleResult r;
  MakeScheduler(c.config)->RunCycle(c.st.GetSnapshot(), 100 * kMinute, &r);
  ASSERT_EQ(r.resizes.size(), 1u);
  EXPECT_EQ(r.resizes[0].job, JobId(1));
  EXPECT_EQ(r.resizes[0].replicas.size(), 4u);  // gives up only as many as needed
  EXPECT_EQ(r.resizes[0].for_job, JobId(2));
  ASSERT_EQ(r.placed.size(), 1u);
  EXPECT_EQ(r.placed[0].job, JobId(2));
}

TEST(ShrinkElastic, AnEqualJobWaitsForTheMinimumRuntime) {
  Full young(/*newcomer*/ 500, /*started*/ 95 * kMinute);
  CycleResult r;
  MakeScheduler(young.config)->RunCycle(young.st.GetSnapshot(), 100 * kMinute, &r);
  EXPECT_TRUE(r.resizes.empty());
  EXPECT_TRUE(r.placed.empty());
  Full old(/*newcomer*/ 500, /*started*/ 80 * kMinute);
  MakeScheduler(old.config)->RunCycle(old.st.GetSnapshot(), 100 * kMinute, &r);
  ASSERT_EQ(r.resizes.size(), 1u);
  EXPECT_EQ(r.placed.size(), 1u);
}

TEST(ShrinkElastic, AProfileWithoutItLeavesElasticGangsWhole) {
  Full c(/*newcomer*/ 1000, /*started*/ 99 * kMinute);
  c.config.profile.actions = {"allocate", "grow-elastic"};
  CycleResult r;
  MakeScheduler(c.config)->RunCycle(c.st.GetSnapshot(), 100 * kMinute, &r);
  EXPECT_TRUE(r.resizes.empty());
  EXPECT_TRUE(r.placed.empty());
}

TEST(GrowElastic, ARunningGangGrowsIntoWhatIsLeftFree) {
  ClusterConfig c = testing::Nodes(1);
  ClusterState st = MakeCluster(c);
  JobSpec el = Elastic("el", 6, 2, 500);
  ASSERT_TRUE(st.Apply(JobSubmitted{JobId(1), el, 0}).ok());
  ASSERT_TRUE(st.Apply(JobBound{JobId(1), {{0, 0, NodeId(0), 1}, {0, 1, NodeId(0), 2}}, 1}).ok());
  CycleResult r;
  auto s = MakeScheduler(c);
  s->RunCycle(st.GetSnapshot(), 5 * kMinute, &r);  // within its minimum runtime: not yet
  EXPECT_TRUE(r.resizes.empty());
  s->RunCycle(st.GetSnapshot(), 20 * kMinute, &r);
  ASSERT_EQ(r.resizes.size(), 1u);
  EXPECT_EQ(r.resizes[0].replicas.size(), 6u);  // its 6 replicas, on the node's free GPUs
  EXPECT_EQ(r.resizes[0].for_job, JobId());
  c.profile.actions = {"allocate"};
  MakeScheduler(c)->RunCycle(st.GetSnapshot(), 20 * kMinute, &r);
  EXPECT_TRUE(r.resizes.empty());
}

// A service (min 1, max 4, 1 GPU a replica) goes to what its autoscaler
// wants in the cycle after it decided, both ways, and the replicas it keeps
// keep their attempt (their processes).
TEST(ScaleService, ItGoesToItsDesiredCountAndKeepsRunningReplicas) {
  ClusterConfig c = testing::Nodes(1);
  ClusterState st = MakeCluster(c);
  const JobSpec svc = Service(4);
  ASSERT_TRUE(ValidateNewJobSpec(svc).ok()) << ValidateNewJobSpec(svc).message();
  ASSERT_TRUE(st.Apply(JobSubmitted{JobId(1), svc, 0}).ok());
  auto s = MakeScheduler(c);
  auto cycle = [&](TimePoint now) { return Cycle(*s, st, now); };
  CycleResult r = cycle(kMinute);
  for (const auto& p : r.pending) ADD_FAILURE() << p.reason.message;
  for (const auto& p : r.unresolvable) ADD_FAILURE() << p.reason.message;
  ASSERT_EQ(r.placed.size(), 1u);
  EXPECT_EQ(st.GetSnapshot().FindJob(JobId(1))->placement.size(), 1u);  // its min: nothing decided yet
  const int32_t first = st.GetSnapshot().FindJob(JobId(1))->ReplicaAttempt(0);

  ASSERT_TRUE(st.Apply(ServiceScaled{JobId(1), kMinute + 1, 3, "in flight 11.0 (target 4/replica): 3"}).ok());
  r = cycle(kMinute + 2);  // within any min_runtime: a service does not wait
  ASSERT_EQ(r.resizes.size(), 1u);
  EXPECT_NE(r.resizes[0].reason.find("scaled up by 2 replica(s) to 3: in flight 11.0"), std::string::npos)
      << r.resizes[0].reason;
  const JobRecord* job = st.GetSnapshot().FindJob(JobId(1));
  ASSERT_EQ(job->placement.size(), 3u);
  EXPECT_EQ(job->ReplicaAttempt(0), first);  // replica 0 kept running
  EXPECT_NE(job->ReplicaAttempt(1), first);

  ASSERT_TRUE(st.Apply(ServiceScaled{JobId(1), kMinute + 3, 1, "in flight 0.0 (target 4/replica): 1"}).ok());
  r = cycle(kMinute + 4);
  ASSERT_EQ(r.resizes.size(), 1u);
  job = st.GetSnapshot().FindJob(JobId(1));
  ASSERT_EQ(job->placement.size(), 1u);
  EXPECT_EQ(job->placement[0].replica, 0u);
  EXPECT_EQ(job->ReplicaAttempt(0), first);
  EXPECT_EQ(st.GetSnapshot().node(NodeId(0)).allocated_mask, job->placement[0].gpu_mask);

  // A new spec must fit what runs: replica 0 runs, so max may not drop below 1,
  // and min may not rise above the 1 that runs.
  JobSpec next = job->spec();
  next.service.min_replicas = next.elastic_min_replicas = 2;
  EXPECT_FALSE(st.Apply(ServiceUpdated{JobId(1), kMinute + 4, next, "alice"}).ok());
  next.service.min_replicas = next.elastic_min_replicas = 1;
  next.tasks[0].cpu = 4000;
  EXPECT_FALSE(st.Apply(ServiceUpdated{JobId(1), kMinute + 4, next, "alice"}).ok());  // resources stay
  next.tasks[0].cpu = job->spec().tasks[0].cpu;
  next.tasks[0].env = {{"VERSION", "2"}};
  ASSERT_TRUE(st.Apply(ServiceUpdated{JobId(1), kMinute + 4, next, "alice"}).ok());
  job = st.GetSnapshot().FindJob(JobId(1));
  EXPECT_TRUE(job->OnOldSpec(0));  // runs the old spec until the rolling update replaces it
  EXPECT_EQ(job->spec().tasks[0].env.at("VERSION"), "2");

  // Out of its range is refused, and changes nothing.
  EXPECT_FALSE(st.Apply(ServiceScaled{JobId(1), kMinute + 5, 5, ""}).ok());
  EXPECT_EQ(st.GetSnapshot().FindJob(JobId(1))->DesiredReplicas(), 1);
  r = cycle(kMinute + 6);
  EXPECT_TRUE(r.resizes.empty());
}


// A scale-up that free GPUs cannot hold evicts lower-priority preemptible
// training through the checkpoint protocol, as a pending job would; the
// GPUs the gang frees are nominated for the service, so a waiting training
// job does not take them, and the next pass places the new replicas there.
TEST(ScaleService, AScaleUpEvictsLowerTrainingAndTakesItsGpus) {
  ClusterConfig c = testing::Nodes(1);
  ClusterState st = MakeCluster(c);
  const JobSpec svc = Service(8, 1000);
  ASSERT_TRUE(ValidateNewJobSpec(svc).ok()) << ValidateNewJobSpec(svc).message();
  JobSpec train = GpuJob("train", 1, 7);
  train.priority = 100;
  train.preemptible = true;
  train.checkpoint.grace = 60 * kMicrosPerSecond;
  ASSERT_TRUE(st.Apply(JobSubmitted{JobId(1), svc, 0}).ok());
  ASSERT_TRUE(st.Apply(JobSubmitted{JobId(2), train, 0}).ok());
  auto s = MakeScheduler(c);
  auto cycle = [&](TimePoint now) { return Cycle(*s, st, now); };
  CycleResult r = cycle(kMinute);
  ASSERT_EQ(r.placed.size(), 2u);  // the service's one replica and the 7-GPU gang: the node is full
  JobSpec small = GpuJob("small", 1, 2);
  small.priority = 100;
  small.preemptible = true;
  ASSERT_TRUE(st.Apply(JobSubmitted{JobId(3), small, kMinute + 1}).ok());

  // Wanting 3 replicas, within the gang's minimum run time: nothing yet.
  ASSERT_TRUE(st.Apply(ServiceScaled{JobId(1), 5 * kMinute, 3, "in flight 11.0 (target 4/replica): 3"}).ok());
  r = cycle(5 * kMinute);
  EXPECT_TRUE(r.preemptions.empty());
  EXPECT_TRUE(r.resizes.empty());
  // Past it: the gang is evicted for the service, with its grace.
  r = cycle(20 * kMinute);
  ASSERT_EQ(r.preemptions.size(), 1u);
  EXPECT_EQ(r.preemptions[0].victim, JobId(2));
  EXPECT_EQ(r.preemptions[0].preemptor, JobId(1));
  EXPECT_EQ(r.preemptions[0].grace, 60 * kMicrosPerSecond);
  EXPECT_NE(r.preemptions[0].reason.find("preempted to scale up service 1 (priority 1000) to 3 replicas"),
            std::string::npos)
      << r.preemptions[0].reason;
  EXPECT_EQ(st.GetSnapshot().FindJob(JobId(2))->state, JobState::kPreempting);
  // While it checkpoints, no second search evicts anything else.
  r = cycle(20 * kMinute + 10 * kMicrosPerSecond);
  EXPECT_TRUE(r.preemptions.empty());
  // It stopped: its GPUs are the service's, not the waiting 2-GPU job's.
  ASSERT_TRUE(st.Apply(JobRequeued{JobId(2), 20 * kMinute + 30 * kMicrosPerSecond, "preempted"}).ok());
  EXPECT_EQ(st.GetSnapshot().FindJob(JobId(1))->nominated.size(), 1u);
  r = cycle(20 * kMinute + 31 * kMicrosPerSecond);
  for (const Placed& p : r.placed) EXPECT_NE(p.job, JobId(3));
  ASSERT_EQ(r.resizes.size(), 1u);
  const JobRecord* job = st.GetSnapshot().FindJob(JobId(1));
  EXPECT_EQ(job->placement.size(), 3u);
  EXPECT_TRUE(job->nominated.empty());
  // What is left goes to the waiting job next.
  r = cycle(20 * kMinute + 32 * kMicrosPerSecond);
  ASSERT_EQ(r.placed.size(), 1u);
  EXPECT_EQ(r.placed[0].job, JobId(3));
  // Wanting 6 (the 3 free GPUs), then 7 a minute after that resize: a rise
  // in steps evicts at each step (the 2-GPU job has run its minimum).
  ASSERT_TRUE(st.Apply(ServiceScaled{JobId(1), 31 * kMinute, 6, "in flight 23.0 (target 4/replica): 6"}).ok());
  r = cycle(31 * kMinute);
  EXPECT_TRUE(r.preemptions.empty());
  ASSERT_EQ(r.resizes.size(), 1u);
  EXPECT_EQ(st.GetSnapshot().FindJob(JobId(1))->placement.size(), 6u);
  ASSERT_TRUE(st.Apply(ServiceScaled{JobId(1), 32 * kMinute, 7, "in flight 27.0 (target 4/replica): 7"}).ok());
  r = cycle(32 * kMinute);
  ASSERT_EQ(r.preemptions.size(), 1u);
  EXPECT_EQ(r.preemptions[0].victim, JobId(3));
}

TEST(ScaleService, WithinMinRuntimeOfGoingDownItsScaleUpDoesNotEvict) {
  // An autoscaler that swings (down, then up again) does not evict training
  // on every swing: not within min_runtime (10 minutes) of its last
  // decision to go down; past it, the scale-up evicts.
  ClusterConfig c = testing::Nodes(1);
  ClusterState st = MakeCluster(c);
  JobSpec train = GpuJob("train", 1, 6);
  train.priority = 100;
  train.preemptible = true;
  ASSERT_TRUE(st.Apply(JobSubmitted{JobId(1), Service(8, 1000), 0}).ok());
  ASSERT_TRUE(st.Apply(JobSubmitted{JobId(2), train, 0}).ok());
  ASSERT_TRUE(st.Apply(ServiceScaled{JobId(1), 0, 2, "in flight 7.0 (target 4/replica): 2"}).ok());
  auto s = MakeScheduler(c);
  auto cycle = [&](TimePoint now) { return Cycle(*s, st, now); };
  CycleResult r = cycle(kMinute);
  ASSERT_EQ(r.placed.size(), 2u);  // the service's 2 replicas and the 6-GPU gang: the node is full
  ASSERT_TRUE(st.Apply(ServiceScaled{JobId(1), 15 * kMinute, 1, "in flight 2.0 (target 4/replica): 1"}).ok());
  r = cycle(15 * kMinute);
  ASSERT_EQ(r.resizes.size(), 1u);
  EXPECT_EQ(st.GetSnapshot().FindJob(JobId(1))->placement.size(), 1u);
  // Up to 3 a minute later: the free GPU now, no eviction (the gang has run
  // 15 minutes, past its own minimum).
  ASSERT_TRUE(st.Apply(ServiceScaled{JobId(1), 16 * kMinute, 3, "in flight 11.0 (target 4/replica): 3"}).ok());
  r = cycle(16 * kMinute);
  EXPECT_TRUE(r.preemptions.empty());
  ASSERT_EQ(r.resizes.size(), 1u);
  EXPECT_EQ(st.GetSnapshot().FindJob(JobId(1))->placement.size(), 2u);
  r = cycle(24 * kMinute);
  EXPECT_TRUE(r.preemptions.empty());
  r = cycle(25 * kMinute + 1);
  ASSERT_EQ(r.preemptions.size(), 1u);
  EXPECT_EQ(r.preemptions[0].victim, JobId(2));
}

// A service of `share` replicas (a fraction, or a MIG profile), min 1, max `max`.
JobSpec SharingService(int32_t max, GpuShare share) {
  JobSpec s = Service(max);
  s.tasks[0].gpus = 0;
  s.tasks[0].gpu_share = std::move(share);
  return s;
}

// Milli-GPU in use on each GPU of node 0.
std::vector<int32_t> SharedMilli(ClusterState& st) {
  const NodeState& n = st.GetSnapshot().node(NodeId(0));
  std::vector<int32_t> out;
  for (int32_t g = 0; g < n.spec.gpus; ++g) out.push_back(n.milli_used(g));
  return out;
}

// A service on quarters of a GPU scales like one on whole GPUs: up onto the
// GPU its replicas already share (then the next), in the cycle after its
// autoscaler decided, keeping its running replicas; down, giving the shares
// back. A resize that would put a fifth quarter on a GPU is refused.
TEST(ScaleService, OnGpuFractionsItScalesOntoSharedGpusAndGivesTheSharesBack) {
  ClusterConfig c = testing::Nodes(1);
  ClusterState st = MakeCluster(c);
  const JobSpec svc = SharingService(6, {.fraction_milli = 250});
  ASSERT_TRUE(ValidateNewJobSpec(svc).ok()) << ValidateNewJobSpec(svc).message();
  ASSERT_TRUE(st.Apply(JobSubmitted{JobId(1), svc, 0}).ok());
  auto s = MakeScheduler(c);
  auto cycle = [&](TimePoint now) { return Cycle(*s, st, now); };
  CycleResult r = cycle(kMinute);
  ASSERT_EQ(r.placed.size(), 1u);
  EXPECT_EQ(SharedMilli(st), (std::vector<int32_t>{250, 0, 0, 0, 0, 0, 0, 0}));
  const int32_t first = st.GetSnapshot().FindJob(JobId(1))->ReplicaAttempt(0);

  ASSERT_TRUE(st.Apply(ServiceScaled{JobId(1), kMinute + 1, 5, "in flight 19.0 (target 4/replica): 5"}).ok());
  r = cycle(kMinute + 2);
  ASSERT_EQ(r.resizes.size(), 1u);
  EXPECT_NE(r.resizes[0].reason.find("scaled up by 4 replica(s) to 5: in flight 19.0"), std::string::npos)
      << r.resizes[0].reason;
  const JobRecord* job = st.GetSnapshot().FindJob(JobId(1));
  ASSERT_EQ(job->placement.size(), 5u);
  for (const ReplicaPlacement& p : job->placement) EXPECT_EQ(p.gpu_milli, 250);
  EXPECT_EQ(SharedMilli(st), (std::vector<int32_t>{1000, 250, 0, 0, 0, 0, 0, 0}));  // GPU 0 filled first
  EXPECT_EQ(job->ReplicaAttempt(0), first);                                         // replica 0 kept running
  EXPECT_NE(job->ReplicaAttempt(4), first);
  EXPECT_EQ(job->HeldGpus(), 2);  // 1.25 GPUs, rounded up

  // A fifth quarter on GPU 0 (a hand-made resize) is refused and changes nothing.
  std::vector<ReplicaPlacement> over = job->placement;
  over.push_back({0, 5, NodeId(0), 1, 250});
  EXPECT_FALSE(st.Apply(JobResized{JobId(1), over, kMinute + 3, "too many"}).ok());
  EXPECT_EQ(SharedMilli(st), (std::vector<int32_t>{1000, 250, 0, 0, 0, 0, 0, 0}));

  ASSERT_TRUE(st.Apply(ServiceScaled{JobId(1), kMinute + 4, 2, "in flight 5.0 (target 4/replica): 2"}).ok());
  r = cycle(kMinute + 5);
  ASSERT_EQ(r.resizes.size(), 1u);
  job = st.GetSnapshot().FindJob(JobId(1));
  ASSERT_EQ(job->placement.size(), 2u);
  EXPECT_EQ(job->ReplicaAttempt(0), first);
  EXPECT_EQ(SharedMilli(st), (std::vector<int32_t>{500, 0, 0, 0, 0, 0, 0, 0}));
  EXPECT_EQ(st.GetSnapshot().node(NodeId(0)).shared_mask, 1u);  // GPU 1 whole again
  EXPECT_EQ(st.GetSnapshot().node(NodeId(0)).cpu_allocated, 2 * svc.tasks[0].cpu);
}

// A service that cannot have all it wants starts with what fits, down to its
// min; its queue's quota admits its growth in whole GPUs, shares rounded up.
TEST(ScaleService, OnGpuFractionsItStartsWithWhatFitsAndGrowsWithinItsQuota) {
  ClusterConfig c = testing::Nodes(1);
  c.queues = {{.name = "inference", .quota = {{"H100", 2}}, .borrowing_limit = {{"H100", 0}}}, {.name = "default"}};
  ClusterState st = MakeCluster(c);
  JobSpec svc = SharingService(8, {.fraction_milli = 500});
  svc.queue = "inference";
  ASSERT_TRUE(ValidateNewJobSpec(svc).ok()) << ValidateNewJobSpec(svc).message();
  testing::StartJob(st, 2, GpuJob("big", 1, 7), {0}, 0x7f, 1);  // GPU 7 left free
  auto s = MakeScheduler(c);
  // Its max (4 GPUs) is past the quota (2): it is admitted at its min all the same.
  JobRecord probe;
  probe.id = JobId(1);
  probe.SetSpec(svc);
  const PendingReason why = s->CheckResolvable(st.GetSnapshot(), probe);
  EXPECT_NE(why.code, ReasonCode::kExceedsQuota) << why.message;
  ASSERT_TRUE(st.Apply(JobSubmitted{JobId(1), svc, 0}).ok());
  ASSERT_TRUE(st.Apply(ServiceScaled{JobId(1), 1, 4, "in flight 15.0 (target 4/replica): 4"}).ok());
  CycleResult r = Cycle(*s, st, kMinute);
  for (const auto& p : r.pending) ADD_FAILURE() << p.reason.message;
  ASSERT_EQ(r.placed.size(), 1u);
  EXPECT_EQ(st.GetSnapshot().FindJob(JobId(1))->placement.size(), 2u);  // two halves of the free GPU
  // The big job ends: it grows to 4 (2 GPUs, its quota), not to 6.
  ASSERT_TRUE(st.Apply(JobFinished{JobId(2), JobOutcome::kSucceeded, 2 * kMinute}).ok());
  ASSERT_TRUE(st.Apply(ServiceScaled{JobId(1), 2 * kMinute, 6, "in flight 23.0 (target 4/replica): 6"}).ok());
  r = Cycle(*s, st, 2 * kMinute + 1);
  ASSERT_EQ(r.resizes.size(), 1u);
  EXPECT_EQ(st.GetSnapshot().FindJob(JobId(1))->placement.size(), 4u);
  EXPECT_EQ(st.GetSnapshot().FindJob(JobId(1))->HeldGpus(), 2);
}

// A service on GPU fractions whose autoscaler asks more than its queue's
// quota admits starts with what the quota admits (down to its min), where
// capacity would hold it all: it is not refused, nor cancelled as past the
// limit for good (its min is within it).
TEST(ScaleService, OnGpuFractionsAskingPastItsQuotaItStartsWithWhatTheQuotaAdmits) {
  ClusterConfig c = testing::Nodes(1);
  c.queues = {{.name = "inference", .quota = {{"H100", 1}}, .borrowing_limit = {{"H100", 0}}}, {.name = "default"}};
  ClusterState st = MakeCluster(c);
  JobSpec svc = SharingService(8, {.fraction_milli = 500});
  svc.queue = "inference";
  auto s = MakeScheduler(c);
  ASSERT_TRUE(st.Apply(JobSubmitted{JobId(1), svc, 0}).ok());
  ASSERT_TRUE(st.Apply(ServiceScaled{JobId(1), 1, 4, "in flight 15.0 (target 4/replica): 4"}).ok());
  CycleResult r = Cycle(*s, st, kMinute);
  for (const auto& u : r.unresolvable) ADD_FAILURE() << "cancelled: " << u.reason.message;
  for (const auto& p : r.pending) ADD_FAILURE() << p.reason.message;
  ASSERT_EQ(r.placed.size(), 1u);
  EXPECT_EQ(st.GetSnapshot().FindJob(JobId(1))->HeldGpus(), 1);  // two halves: its quota
}

// A service on MIG slices scales up onto free instances of its profile, then
// re-partitions an idle MIG GPU in the same pass (the reconfiguration is
// journaled before the resize that uses it); down, its instances are free.
// (Two MIG GPUs, partitioned on demand: the first start makes GPU 0 two
// 3g.40gb instances.)
TEST(ScaleService, OnMigSlicesItScalesUpRePartitioningAnIdleGpu) {
  ClusterConfig c;
  NodeGroupConfig mig = Group("a", 1, 2, "A100");
  mig.gpu_memory = 80 * 1024;
  mig.has_mig = true;
  mig.mig = {};
  c.node_groups.push_back(mig);
  ClusterState st = MakeCluster(c);
  const JobSpec svc = SharingService(4, {.mig_profile = "3g.40gb"});
  ASSERT_TRUE(ValidateNewJobSpec(svc).ok()) << ValidateNewJobSpec(svc).message();
  ASSERT_TRUE(st.Apply(JobSubmitted{JobId(1), svc, 0}).ok());
  auto s = MakeScheduler(c);
  CycleResult r = Cycle(*s, st, kMinute);
  for (const auto& p : r.pending) ADD_FAILURE() << p.reason.message;
  ASSERT_EQ(r.placed.size(), 1u);
  ASSERT_TRUE(st.Apply(ServiceScaled{JobId(1), kMinute + 1, 4, "vllm:num_requests_waiting 30 (target 8/replica): 4"}).ok());
  r = Cycle(*s, st, kMinute + 2);
  ASSERT_EQ(r.reconfigurations.size(), 1u);  // GPU 1, idle, made two 3g.40gb instances
  EXPECT_EQ(r.reconfigurations[0].gpu, 1);
  EXPECT_EQ(r.reconfigurations[0].layout, "3g.40gb@0,3g.40gb@4");
  ASSERT_EQ(r.resizes.size(), 1u);
  const JobRecord* job = st.GetSnapshot().FindJob(JobId(1));
  ASSERT_EQ(job->placement.size(), 4u);
  const NodeState& n = st.GetSnapshot().node(NodeId(0));
  EXPECT_EQ(n.mig_used[0], 0b10001);
  EXPECT_EQ(n.mig_used[1], 0b10001);
  EXPECT_EQ(job->HeldGpus(), 2);  // 4 x 3/7 of a GPU, rounded up
  ASSERT_TRUE(st.Apply(ServiceScaled{JobId(1), kMinute + 3, 1, "vllm:num_requests_waiting 0 (target 8/replica): 1"}).ok());
  r = Cycle(*s, st, kMinute + 4);
  ASSERT_EQ(r.resizes.size(), 1u);
  const NodeState& after = st.GetSnapshot().node(NodeId(0));
  EXPECT_EQ(std::popcount(after.mig_used[0]) + std::popcount(after.mig_used[1]), 1);
}

}  // namespace
}  // namespace rota::sched
