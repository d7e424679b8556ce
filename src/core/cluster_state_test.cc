#include "core/cluster_state.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <set>
#include <vector>

namespace rota {
namespace {

NodeSpec Node(std::string name, int gpus) {
  NodeSpec n;
  n.name = std::move(name);
  n.gpus = gpus;
  n.gpu_model = "H100";
  n.cpu = 64000;
  n.memory = 512 * 1024;
  n.labels = {{"rack", "r0"}, {"spine", "s0"}};
  return n;
}

JobSpec Job(int replicas, int gpus) {
  JobSpec s;
  s.name = "j";
  s.tasks.push_back({.name = "w", .replicas = replicas, .gpus = gpus, .cpu = 1000});
  return s;
}

// A service of 1-GPU replicas, 1..`max`, on port 8000.
JobSpec Service(int max) {
  JobSpec s = Job(max, 1);
  s.kind = JobKind::kService;
  s.service.min_replicas = 1;
  s.service.max_replicas = max;
  s.service.port = 8000;
  s.elastic_min_replicas = 1;
  return s;
}

TEST(ClusterState, BindsAndReleasesAWholeGang) {
  ClusterState st;
  ASSERT_TRUE(st.Apply(NodeAdded{Node("n0", 8)}).ok());
  ASSERT_TRUE(st.Apply(JobSubmitted{JobId(1), Job(2, 4), 10}).ok());
  Snapshot before = st.GetSnapshot();
  ASSERT_TRUE(st.Apply(JobBound{JobId(1), {{0, 0, NodeId(0), 0x0F}, {0, 1, NodeId(0), 0xF0}}, 20}).ok());
  Snapshot after = st.GetSnapshot();
  // The earlier snapshot is immutable.
  EXPECT_EQ(before.node(NodeId(0)).allocated_mask, 0u);
  EXPECT_EQ(before.FindJob(JobId(1))->state, JobState::kPending);
  EXPECT_EQ(after.node(NodeId(0)).allocated_mask, 0xFFu);
  EXPECT_EQ(after.node(NodeId(0)).cpu_allocated, 2000);
  EXPECT_EQ(after.FindJob(JobId(1))->state, JobState::kRunning);
  ASSERT_TRUE(st.Apply(JobFinished{JobId(1), JobOutcome::kSucceeded, 30}).ok());
  EXPECT_EQ(st.GetSnapshot().node(NodeId(0)).allocated_mask, 0u);
  EXPECT_EQ(st.GetSnapshot().PendingJobs().size(), 0u);
}

JobSpec Fraction(int32_t milli, MemoryMiB memory) {
  JobSpec s;
  s.name = "f";
  TaskGroupSpec t;
  t.name = "w";
  t.gpu_share.fraction_milli = milli;
  t.gpu_share.memory = memory;
  s.tasks.push_back(t);
  return s;
}

TEST(ClusterState, GpuFractionsShareAGpuWithinItsCapacityAndMemory) {
  ClusterState st;
  NodeSpec n = Node("n0", 2);
  n.gpu_memory = 16 * 1024;
  ASSERT_TRUE(st.Apply(NodeAdded{n}).ok());
  ASSERT_TRUE(st.Apply(JobSubmitted{JobId(1), Fraction(600, 8192), 1}).ok());
  ASSERT_TRUE(st.Apply(JobSubmitted{JobId(2), Fraction(400, 8192), 1}).ok());
  ASSERT_TRUE(st.Apply(JobSubmitted{JobId(3), Fraction(100, 1024), 1}).ok());
  ASSERT_TRUE(st.Apply(JobSubmitted{JobId(4), Job(1, 1), 1}).ok());
  ASSERT_TRUE(st.Apply(JobBound{JobId(1), {{0, 0, NodeId(0), 0x1, 600}}, 2}).ok());
  // A whole-GPU job cannot take the shared GPU; a wrong share is refused.
  EXPECT_FALSE(st.Apply(JobBound{JobId(4), {{0, 0, NodeId(0), 0x1}}, 2}).ok());
  EXPECT_FALSE(st.Apply(JobBound{JobId(2), {{0, 0, NodeId(0), 0x1, 500}}, 2}).ok());
  ASSERT_TRUE(st.Apply(JobBound{JobId(2), {{0, 0, NodeId(0), 0x1, 400}}, 2}).ok());
  Snapshot full = st.GetSnapshot();
  EXPECT_EQ(full.node(NodeId(0)).milli_used(0), 1000);
  EXPECT_EQ(full.node(NodeId(0)).memory_shared(0), 16 * 1024);
  EXPECT_EQ(full.node(NodeId(0)).free_mask(), 0x2u);
  // Past the whole GPU (and past its memory): refused, nothing changes.
  EXPECT_FALSE(st.Apply(JobBound{JobId(3), {{0, 0, NodeId(0), 0x1, 100}}, 3}).ok());
  EXPECT_EQ(st.GetSnapshot().node(NodeId(0)).milli_used(0), 1000);
  ASSERT_TRUE(st.Apply(JobBound{JobId(4), {{0, 0, NodeId(0), 0x2}}, 3}).ok());
  // Ending one sharer returns its share; the last one frees the GPU.
  ASSERT_TRUE(st.Apply(JobFinished{JobId(1), JobOutcome::kSucceeded, 4}).ok());
  EXPECT_EQ(st.GetSnapshot().node(NodeId(0)).milli_used(0), 400);
  ASSERT_TRUE(st.Apply(JobBound{JobId(3), {{0, 0, NodeId(0), 0x1, 100}}, 5}).ok());
  ASSERT_TRUE(st.Apply(JobFinished{JobId(2), JobOutcome::kSucceeded, 6}).ok());
  ASSERT_TRUE(st.Apply(JobFinished{JobId(3), JobOutcome::kSucceeded, 6}).ok());
  EXPECT_EQ(st.GetSnapshot().node(NodeId(0)).shared_mask, 0u);
  EXPECT_EQ(st.GetSnapshot().node(NodeId(0)).free_mask(), 0x1u);
  // Replaying the compacted state rebuilds the shares.
  ClusterState replay;
  for (const Event& e : CompactState(st.GetSnapshot())) ASSERT_TRUE(replay.Apply(e).ok());
  EXPECT_EQ(replay.GetSnapshot().node(NodeId(0)).allocated_mask, 0x2u);
}

// A job array keeps its id, size and each element's index through a
// journal snapshot, whether its elements run (one event each) or wait (one
// run), and a run never merges two arrays or an array with lone jobs.
TEST(CompactState, KeepsJobArrays) {
  ClusterState st;
  ASSERT_TRUE(st.Apply(NodeAdded{Node("n0", 8)}).ok());
  ASSERT_TRUE(st.Apply(JobsSubmitted{JobId(1), 3, Job(1, 1), 1, "u", "", JobId(1), 5}).ok());
  ASSERT_TRUE(st.Apply(JobsSubmitted{JobId(4), 2, Job(1, 1), 1, "u", "", JobId(1), 5}).ok());  // the second part
  ASSERT_TRUE(st.Apply(JobSubmitted{.id = JobId(6), .spec = Job(1, 1), .at = 1, .user = "u"}).ok());  // alone
  ASSERT_TRUE(st.Apply(JobBound{JobId(2), {{0, 0, NodeId(0), 0x01}}, 2}).ok());
  EXPECT_FALSE(st.Apply(JobsSubmitted{JobId(7), 3, Job(1, 1), 1, "u", "", JobId(7), 2}).ok());  // beyond its array
  ClusterState replay;
  for (const Event& e : CompactState(st.GetSnapshot())) ASSERT_TRUE(replay.Apply(e).ok());
  for (uint64_t id = 1; id <= 5; ++id) {
    const JobRecord* j = replay.GetSnapshot().FindJob(JobId(id));
    ASSERT_NE(j, nullptr);
    EXPECT_EQ(j->array, JobId(1)) << id;
    EXPECT_EQ(j->array_count, 5) << id;
    EXPECT_EQ(j->array_index(), static_cast<int64_t>(id - 1));
  }
  EXPECT_EQ(replay.GetSnapshot().FindJob(JobId(6))->array_count, 0);
}

// `--count 10-14%2`: indices from 10 and the limit on running elements
// survive a journal snapshot; nonsense is refused.
TEST(CompactState, KeepsAnArraysIndicesAndLimit) {
  ClusterState st;
  ASSERT_TRUE(st.Apply(NodeAdded{Node("n0", 8)}).ok());
  ASSERT_TRUE(st.Apply(JobsSubmitted{JobId(1), 5, Job(1, 1), 1, "u", "", JobId(1), 5, 10, 2}).ok());
  ASSERT_TRUE(st.Apply(JobBound{JobId(3), {{0, 0, NodeId(0), 0x01}}, 2}).ok());
  EXPECT_FALSE(st.Apply(JobsSubmitted{JobId(6), 1, Job(1, 1), 1, "u", "", JobId(6), 1, -1, 0}).ok());
  EXPECT_FALSE(st.Apply(JobSubmitted{.id = JobId(6), .spec = Job(1, 1), .at = 1, .user = "u",
                                     .array_max_running = 2}).ok());  // a limit with no array
  ClusterState replay;
  for (const Event& e : CompactState(st.GetSnapshot())) ASSERT_TRUE(replay.Apply(e).ok());
  for (uint64_t id = 1; id <= 5; ++id) {
    const JobRecord* j = replay.GetSnapshot().FindJob(JobId(id));
    ASSERT_NE(j, nullptr);
    EXPECT_EQ(j->array_index(), static_cast<int64_t>(id + 9)) << id;
    EXPECT_EQ(j->array_max_running, 2) << id;
  }
}

TEST(CompactState, ReplaysAPreemptingJobOnce) {
  ClusterState st;
  ASSERT_TRUE(st.Apply(NodeAdded{Node("n0", 8)}).ok());
  ASSERT_TRUE(st.Apply(JobSubmitted{JobId(1), Job(1, 4), 1}).ok());
  ASSERT_TRUE(st.Apply(JobBound{JobId(1), {{0, 0, NodeId(0), 0x0F}}, 2}).ok());
  ASSERT_TRUE(st.Apply(JobCheckpointed{JobId(1), 3, "/ckpt/1"}).ok());
  ASSERT_TRUE(st.Apply(JobPreempting{JobId(1), 4, JobId(2), "for 2"}).ok());
  ClusterState replay;
  for (const Event& e : CompactState(st.GetSnapshot())) ASSERT_TRUE(replay.Apply(e).ok());
  const JobRecord* j = replay.GetSnapshot().FindJob(JobId(1));
  ASSERT_NE(j, nullptr);
  EXPECT_EQ(j->state, JobState::kPreempting);
  EXPECT_EQ(j->last_checkpoint_path, "/ckpt/1");
  EXPECT_EQ(replay.GetSnapshot().node(NodeId(0)).allocated_mask, 0x0Fu);
}

// What a record remembers of its past survives a journal snapshot: the
// evictions (no two jobs evict each other by rule), the requeue reason and
// placement, the nomination of freed GPUs for the preemptor, the last resize.
TEST(CompactState, KeepsEvictionsNominationsAndResizes) {
  ClusterState st;
  ASSERT_TRUE(st.Apply(NodeAdded{Node("n0", 8)}).ok());
  ASSERT_TRUE(st.Apply(JobSubmitted{JobId(1), Job(1, 4), 1}).ok());
  ASSERT_TRUE(st.Apply(JobSubmitted{JobId(2), Job(1, 8), 2}).ok());
  JobSpec elastic = Job(2, 2);
  elastic.elastic_min_replicas = 1;
  ASSERT_TRUE(st.Apply(JobSubmitted{JobId(3), elastic, 3}).ok());
  ASSERT_TRUE(st.Apply(JobBound{JobId(1), {{0, 0, NodeId(0), 0x0F}}, 4}).ok());
  ASSERT_TRUE(st.Apply(JobBound{JobId(3), {{0, 0, NodeId(0), 0x30}, {0, 1, NodeId(0), 0xC0}}, 4}).ok());
  ASSERT_TRUE(st.Apply(JobPreempting{JobId(1), 5, JobId(2), "preempted for job 2"}).ok());
  ASSERT_TRUE(st.Apply(JobRequeued{JobId(1), 6, "preempted for job 2"}).ok());
  ASSERT_TRUE(st.Apply(JobResized{JobId(3), {{0, 0, NodeId(0), 0x30}}, 7, "shrank for job 2"}).ok());
  const Snapshot before = st.GetSnapshot();
  ASSERT_FALSE(before.FindJob(JobId(2))->nominated.empty());
  ClusterState replay;
  for (const Event& e : CompactState(before)) ASSERT_TRUE(replay.Apply(e).ok());
  const Snapshot after = replay.GetSnapshot();
  for (uint64_t id : {1, 2, 3}) {
    const JobRecord& a = *before.FindJob(JobId(id));
    const JobRecord& b = *after.FindJob(JobId(id));
    EXPECT_EQ(a.preempted_at, b.preempted_at) << id;
    EXPECT_EQ(a.preempted_by, b.preempted_by) << id;
    EXPECT_EQ(a.last_requeue_reason, b.last_requeue_reason) << id;
    EXPECT_EQ(a.last_placement, b.last_placement) << id;
    EXPECT_EQ(a.nominated, b.nominated) << id;
    EXPECT_EQ(a.nominated_at, b.nominated_at) << id;
    EXPECT_EQ(a.resized_at, b.resized_at) << id;
    EXPECT_EQ(a.last_resize_reason, b.last_resize_reason) << id;
  }
  EXPECT_EQ(after.FindJob(JobId(1))->preempted_by, std::vector<JobId>{JobId(2)});
  EXPECT_EQ(after.FindJob(JobId(3))->resized_at, 7);
  // A history for no such job, or with a placement on no such node, changes nothing.
  EXPECT_FALSE(replay.Apply(JobHistory{JobId(9)}).ok());
  EXPECT_FALSE(replay.Apply(JobHistory{JobId(1), {}, {}, "", {{0, 0, NodeId(5), 1}}}).ok());
}

// GPUs nominated for a job are its evicted victims' replicas: their task
// indices are the victims' own. A gang of two task groups evicted for a job
// of one still gives a snapshot that loads. Before, every later snapshot
// failed to load ("a placement names no such node or task") while the
// nominee lived or was kept, and no server could start again.
TEST(CompactState, LoadsGpusNominatedFromAGangOfMoreTaskGroups) {
  ClusterState st;
  ASSERT_TRUE(st.Apply(NodeAdded{Node("n0", 8)}).ok());
  JobSpec two = Job(1, 2);
  two.tasks.push_back({.name = "ps", .replicas = 1, .gpus = 2, .cpu = 1000});
  ASSERT_TRUE(st.Apply(JobSubmitted{JobId(1), two, 1}).ok());
  ASSERT_TRUE(st.Apply(JobSubmitted{JobId(2), Job(1, 8), 2}).ok());
  ASSERT_TRUE(st.Apply(JobBound{JobId(1), {{0, 0, NodeId(0), 0x03}, {1, 0, NodeId(0), 0x0C}}, 5}).ok());
  ASSERT_TRUE(st.Apply(JobPreempting{JobId(1), 6, JobId(2), "preempted for job 2"}).ok());
  ASSERT_TRUE(st.Apply(JobRequeued{JobId(1), 7, "preempted for job 2"}).ok());
  const auto nominated = st.GetSnapshot().FindJob(JobId(2))->nominated;
  ASSERT_EQ(nominated.size(), 2u);
  EXPECT_EQ(nominated[1].task, 1);  // (job 1's second task group; job 2 has one)
  ClusterState replay;
  for (const Event& e : CompactState(st.GetSnapshot())) {
    const Status s = replay.Apply(e);
    ASSERT_TRUE(s.ok()) << s.ToString();
  }
  EXPECT_EQ(replay.GetSnapshot().FindJob(JobId(2))->nominated, nominated);
  // A nomination on no such node is still refused.
  EXPECT_FALSE(replay.Apply(JobHistory{JobId(2), {}, {}, "", {}, {{0, 0, NodeId(5), 1}}}).ok());
}

// A projection's state (live_only) keeps an array's last element where it
// ended before the others: without it, the engine would take the array for
// one not all journaled yet and start none of the rest.
TEST(CompactState, LiveOnlyKeepsTheLastElementOfALiveArray) {
  ClusterState st;
  ASSERT_TRUE(st.Apply(NodeAdded{Node("n0", 8)}).ok());
  ASSERT_TRUE(st.Apply(JobsSubmitted{JobId(1), 3, Job(1, 1), 1, "a", "", JobId(1), 3}).ok());
  ASSERT_TRUE(st.Apply(JobCancelled{JobId(3), 2, "by a"}).ok());
  ASSERT_TRUE(st.Apply(JobSubmitted{JobId(4), Job(1, 1), 3}).ok());
  ASSERT_TRUE(st.Apply(JobCancelled{JobId(4), 4, "by a"}).ok());  // (no array: left out)
  ClusterState replay;
  for (const Event& e : CompactState(st.GetSnapshot(), /*live_only=*/true)) {
    const Status s = replay.Apply(e);
    ASSERT_TRUE(s.ok()) << s.ToString();
  }
  const Snapshot after = replay.GetSnapshot();
  ASSERT_NE(after.FindJob(JobId(3)), nullptr);
  EXPECT_EQ(after.FindJob(JobId(3))->state, JobState::kCancelled);
  EXPECT_EQ(after.FindJob(JobId(1))->state, JobState::kPending);
  EXPECT_EQ(after.FindJob(JobId(4)), nullptr);
}

TEST(ClusterState, RefusesConflictingBindAndChangesNothing) {
  ClusterState st;
  ASSERT_TRUE(st.Apply(NodeAdded{Node("n0", 8)}).ok());
  ASSERT_TRUE(st.Apply(JobSubmitted{JobId(1), Job(1, 4), 0}).ok());
  ASSERT_TRUE(st.Apply(JobSubmitted{JobId(2), Job(2, 4), 0}).ok());
  ASSERT_TRUE(st.Apply(JobBound{JobId(1), {{0, 0, NodeId(0), 0x0F}}, 0}).ok());
  const uint64_t rev = st.revision();
  // Replica 1 overlaps job 1's GPUs: the whole bind is refused.
  Status s = st.Apply(JobBound{JobId(2), {{0, 0, NodeId(0), 0xF0}, {0, 1, NodeId(0), 0x0F}}, 0});
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(st.revision(), rev);
  EXPECT_EQ(st.GetSnapshot().node(NodeId(0)).allocated_mask, 0x0Fu);
  EXPECT_EQ(st.GetSnapshot().FindJob(JobId(2))->state, JobState::kPending);
  // Partial gangs are refused too.
  EXPECT_FALSE(st.Apply(JobBound{JobId(2), {{0, 0, NodeId(0), 0xF0}}, 0}).ok());
}

TEST(ClusterState, RefusesDuplicateNodeAndRackInTwoSpines) {
  ClusterState st;
  ASSERT_TRUE(st.Apply(NodeAdded{Node("n0", 8)}).ok());
  EXPECT_EQ(st.Apply(NodeAdded{Node("n0", 8)}).code(), StatusCode::kAlreadyExists);
  NodeSpec other = Node("n1", 8);
  other.labels["spine"] = "s1";
  EXPECT_EQ(st.Apply(NodeAdded{other}).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(st.GetSnapshot().nodes().size(), 1u);
}

// Nodes are shared between states in chunks of 256 (copy-on-write): a state
// taken before a change keeps what it saw across the chunk boundary, when a
// node is added to a shared chunk, when a node of a shared chunk changes, and
// the rack-to-spine index is its own after a copy.
TEST(ClusterState, ASnapshotKeepsItsNodesAcrossSharedChunks) {
  ClusterState st;
  auto unlabelled = [](int i) {
    NodeSpec n = Node("n" + std::to_string(i), 8);
    n.labels = {{"rack", "r" + std::to_string(i)}};  // each rack its own spine
    return n;
  };
  for (int i = 0; i < 256; ++i) ASSERT_TRUE(st.Apply(NodeAdded{unlabelled(i)}).ok());
  const Snapshot full_chunk = st.GetSnapshot();
  for (int i = 256; i < 300; ++i) ASSERT_TRUE(st.Apply(NodeAdded{unlabelled(i)}).ok());
  const Snapshot part_chunk = st.GetSnapshot();
  ASSERT_TRUE(st.Apply(NodeAdded{unlabelled(300)}).ok());  // into the chunk part_chunk shares
  ASSERT_TRUE(st.Apply(NodeDrainChanged{"n260", true, "fan"}).ok());
  ASSERT_TRUE(st.Apply(NodeDrainChanged{"n3", true, "psu"}).ok());

  EXPECT_EQ(full_chunk.nodes().size(), 256u);
  EXPECT_EQ(part_chunk.nodes().size(), 300u);
  EXPECT_EQ(st.GetSnapshot().nodes().size(), 301u);
  EXPECT_EQ(part_chunk.nodes()[299].spec.name, "n299");
  EXPECT_FALSE(part_chunk.FindNode("n260")->drained);
  EXPECT_FALSE(full_chunk.FindNode("n3")->drained);
  EXPECT_FALSE(part_chunk.FindNode("n3")->drained);
  EXPECT_TRUE(st.GetSnapshot().FindNode("n260")->drained);
  EXPECT_TRUE(st.GetSnapshot().FindNode("n3")->drained);
  int seen = 0;
  for (const NodeState& n : part_chunk.nodes()) seen += n.spec.name == "n" + std::to_string(seen) ? 1 : 0;
  EXPECT_EQ(seen, 300);

  // A copy's joins and the original's are checked against their own racks.
  ClusterState copy = st;
  NodeSpec a = Node("a", 8);
  a.labels = {{"rack", "shared"}, {"spine", "s-copy"}};
  ASSERT_TRUE(copy.Apply(NodeAdded{a}).ok());
  NodeSpec b = Node("b", 8);
  b.labels = {{"rack", "shared"}, {"spine", "s-original"}};
  EXPECT_TRUE(st.Apply(NodeAdded{b}).ok()) << "the copy's rack leaked into the original";
  NodeSpec c = Node("c", 8);
  c.labels = {{"rack", "shared"}, {"spine", "s-original"}};
  EXPECT_EQ(copy.Apply(NodeAdded{c}).code(), StatusCode::kInvalidArgument) << "the copy forgot its own rack";
}

// Nodes in one rack with no spine label share a spine ('~r1'), rather than
// each being refused after the first; and an agent's corrected labels
// replace the old ones when it registers again (refused, changing nothing,
// if they would put a rack in two spines), surviving a journal snapshot.
TEST(ClusterState, ARackWithoutASpineIsItsOwnAndLabelsCanBeCorrected) {
  ClusterState st;
  for (const char* name : {"a", "b"}) {
    NodeSpec n = Node(name, 8);
    n.labels = {{"rack", "r1"}};
    ASSERT_TRUE(st.Apply(NodeAdded{n}).ok()) << name;
  }
  ASSERT_TRUE(st.Apply(NodeAdded{Node("c", 8)}).ok());  // rack r0, spine s0
  const Snapshot before = st.GetSnapshot();
  EXPECT_EQ(before.topology().domains_at(before.topology().DomainLevelIndex("spine")).size(), 2u);  // '~r1', s0
  // c moves to rack r1: r1 is in spine '~r1' (a, b), c says s0.
  const Status two = st.Apply(NodeLabelsChanged{"c", {{"rack", "r1"}, {"spine", "s0"}}});
  EXPECT_EQ(two.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(two.message(), "node 'c': labels {rack=r1, spine=s0} put rack 'r1' in spine 's0', but node 'a' has it in '~r1'");
  EXPECT_EQ(st.GetSnapshot().FindNode("c")->spec.labels.at("spine"), "s0");
  // Without the spine it joins a and b; a node selector sees the new label.
  ASSERT_TRUE(st.Apply(NodeLabelsChanged{"c", {{"rack", "r1"}, {"gpu-class", "big"}}}).ok());
  const Snapshot snap = st.GetSnapshot();
  EXPECT_EQ(snap.FindNode("c")->spec.labels.at("gpu-class"), "big");
  EXPECT_EQ(snap.FindNode("c")->spec.labels.count("spine"), 0u);
  const Topology& after = snap.topology();
  const int32_t rack = after.DomainLevelIndex("rack");
  for (const char* name : {"a", "b", "c"}) {
    const NodeState* n = snap.FindNode(name);
    EXPECT_EQ(after.domains()[after.DomainOf(after.position_of(n->id), rack)].name, "r1") << name;
  }
  ClusterState replay;
  for (const Event& e : CompactState(snap)) ASSERT_TRUE(replay.Apply(e).ok());
  EXPECT_EQ(replay.GetSnapshot().FindNode("c")->spec.labels, snap.FindNode("c")->spec.labels);
  EXPECT_EQ(st.Apply(NodeLabelsChanged{"nope", {}}).code(), StatusCode::kNotFound);
}

// The agent that registered a node last is journaled, and a journal
// snapshot keeps it (a server started again knows who held the node).
TEST(ClusterState, ANodesAgentOutlivesACompaction) {
  ClusterState st;
  ASSERT_TRUE(st.Apply(NodeAdded{Node("a", 8)}).ok());
  ASSERT_TRUE(st.Apply(NodeAdded{Node("b", 8)}).ok());
  ASSERT_TRUE(st.Apply(NodeAgentChanged{"a", "0123abcd", "10.0.0.5"}).ok());
  EXPECT_EQ(st.Apply(NodeAgentChanged{"nope", "x"}).code(), StatusCode::kNotFound);
  ClusterState replay;
  for (const Event& e : CompactState(st.GetSnapshot())) ASSERT_TRUE(replay.Apply(e).ok());
  EXPECT_EQ(replay.GetSnapshot().FindNode("a")->agent, "0123abcd");
  EXPECT_EQ(replay.GetSnapshot().FindNode("a")->agent_address, "10.0.0.5");
  EXPECT_EQ(replay.GetSnapshot().FindNode("b")->agent, "");
}

TEST(ClusterState, UnhealthyGpuCannotBeBound) {
  ClusterState st;
  ASSERT_TRUE(st.Apply(NodeAdded{Node("n0", 8)}).ok());
  ASSERT_TRUE(st.Apply(GpuHealthChanged{"n0", 3, false}).ok());
  ASSERT_TRUE(st.Apply(JobSubmitted{JobId(1), Job(1, 4), 0}).ok());
  EXPECT_FALSE(st.Apply(JobBound{JobId(1), {{0, 0, NodeId(0), 0x0F}}, 0}).ok());
  EXPECT_TRUE(st.Apply(JobBound{JobId(1), {{0, 0, NodeId(0), 0xF0}}, 0}).ok());
  EXPECT_EQ(st.Apply(GpuHealthChanged{"n0", 9, false}).code(), StatusCode::kOutOfRange);
}

}  // namespace
}  // namespace rota

namespace rota {
namespace {

TEST(CompactState, ReplayRebuildsTheSameState) {
  ClusterState st;
  ASSERT_TRUE(st.Apply(NodeAdded{Node("n0", 8)}).ok());
  ASSERT_TRUE(st.Apply(NodeAdded{Node("n1", 8)}).ok());
  // Job 1 ran on GPUs 0-3 of n0 and finished; job 2 now holds those GPUs.
  ASSERT_TRUE(st.Apply(JobSubmitted{JobId(1), Job(1, 4), 1, "a"}).ok());
  ASSERT_TRUE(st.Apply(JobSubmitted{JobId(2), Job(1, 4), 2, "b"}).ok());
  ASSERT_TRUE(st.Apply(JobSubmitted{JobId(3), Job(1, 8), 3, "c"}).ok());
  ASSERT_TRUE(st.Apply(JobBound{JobId(1), {{0, 0, NodeId(0), 0x0F}}, 4}).ok());
  ASSERT_TRUE(st.Apply(JobFinished{JobId(1), JobOutcome::kSucceeded, 5}).ok());
  ASSERT_TRUE(st.Apply(JobBound{JobId(2), {{0, 0, NodeId(0), 0x0F}}, 6}).ok());
  ASSERT_TRUE(st.Apply(JobCancelled{JobId(3), 7, "by c"}).ok());
  ASSERT_TRUE(st.Apply(GpuHealthChanged{"n1", 2, false}).ok());
  ASSERT_TRUE(st.Apply(NodeDrainChanged{"n1", true}).ok());

  ClusterState copy;
  for (const Event& e : CompactState(st.GetSnapshot())) ASSERT_TRUE(copy.Apply(e).ok());
  Snapshot a = st.GetSnapshot(), b = copy.GetSnapshot();
  ASSERT_EQ(a.nodes().size(), b.nodes().size());
  for (size_t i = 0; i < a.nodes().size(); ++i) {
    EXPECT_EQ(a.nodes()[i].allocated_mask, b.nodes()[i].allocated_mask);
    EXPECT_EQ(a.nodes()[i].healthy_mask, b.nodes()[i].healthy_mask);
    EXPECT_EQ(a.nodes()[i].drained, b.nodes()[i].drained);
    EXPECT_EQ(a.nodes()[i].cpu_allocated, b.nodes()[i].cpu_allocated);
  }
  for (const auto& [id, job] : a.jobs()) {
    const JobRecord* other = b.FindJob(id);
    ASSERT_NE(other, nullptr);
    EXPECT_EQ(other->state, job->state);
    EXPECT_EQ(other->user, job->user);
    EXPECT_EQ(other->placement, job->placement);
    EXPECT_EQ(other->finished_at, job->finished_at);
    EXPECT_EQ(other->end_reason, job->end_reason);
  }
}

// A run of jobs journaled as one event is exactly that many JobSubmitted;
// it takes all of its ids or none; a snapshot writes such a run back as one.
TEST(ClusterState, JobsSubmittedIsARunOfJobSubmitted) {
  ClusterState one, run;
  for (ClusterState* st : {&one, &run}) ASSERT_TRUE(st->Apply(NodeAdded{Node("n0", 8)}).ok());
  for (uint64_t id = 1; id <= 5; ++id) ASSERT_TRUE(one.Apply(JobSubmitted{JobId(id), Job(1, 1), 9, "a"}).ok());
  ASSERT_TRUE(run.Apply(JobsSubmitted{JobId(1), 5, Job(1, 1), 9, "a"}).ok());
  Snapshot a = one.GetSnapshot(), b = run.GetSnapshot();
  ASSERT_EQ(b.jobs().size(), 5u);
  EXPECT_EQ(b.PendingOfUser("a"), 5);
  for (const auto& [id, job] : a.jobs()) {
    const JobRecord* other = b.FindJob(id);
    ASSERT_NE(other, nullptr);
    EXPECT_EQ(other->spec(), job->spec());
    EXPECT_EQ(other->submitted_at, job->submitted_at);
    EXPECT_EQ(other->user, job->user);
    EXPECT_EQ(other->state, JobState::kPending);
  }
  // Overlapping ids (5 is taken): refused whole, nothing added.
  Status overlap = run.Apply(JobsSubmitted{JobId(5), 3, Job(1, 1), 10, "b"});
  EXPECT_EQ(overlap.code(), StatusCode::kAlreadyExists);
  EXPECT_EQ(run.GetSnapshot().jobs().size(), 5u);
  EXPECT_EQ(run.GetSnapshot().PendingOfUser("b"), 0);
  EXPECT_FALSE(run.Apply(JobsSubmitted{JobId(6), 0, Job(1, 1), 10, "b"}).ok());  // count 0
  // Job 3 runs: the snapshot writes 1-2 and 4-5 as runs, 3 on its own.
  ASSERT_TRUE(run.Apply(JobBound{JobId(3), {{0, 0, NodeId(0), 0x01}}, 11}).ok());
  int runs = 0, singles = 0;
  ClusterState copy;
  for (const Event& e : CompactState(run.GetSnapshot())) {
    runs += std::holds_alternative<JobsSubmitted>(e);
    singles += std::holds_alternative<JobSubmitted>(e);
    ASSERT_TRUE(copy.Apply(e).ok());
  }
  EXPECT_EQ(runs, 2);
  EXPECT_EQ(singles, 1);
  EXPECT_EQ(copy.GetSnapshot().jobs().size(), 5u);
  EXPECT_EQ(copy.GetSnapshot().FindJob(JobId(3))->state, JobState::kRunning);
  EXPECT_EQ(copy.GetSnapshot().FindJob(JobId(5))->state, JobState::kPending);
}

// A record for the job table with just its id.
std::shared_ptr<const JobRecord> Rec(uint64_t id) {
  auto j = std::make_shared<JobRecord>();
  j->id = JobId(id);
  return j;
}

// The job table iterates in id order across its chunks, finds and skips
// gaps, and a copy is not changed by writes to the original.
TEST(JobTable, IteratesInOrderAcrossChunksAndCopiesOnWrite) {
  JobTable t;
  for (uint64_t id : {1u, 2u, 1023u, 1024u, 5000u}) t.Put(JobId(id), Rec(id));
  std::vector<uint64_t> seen;
  for (const auto& [id, job] : t) seen.push_back(id.value());
  EXPECT_EQ(seen, (std::vector<uint64_t>{1, 2, 1023, 1024, 5000}));
  EXPECT_EQ(t.size(), 5u);
  EXPECT_EQ(t.find(JobId(3)), t.end());
  EXPECT_EQ(t.upper_bound(JobId(2))->first, JobId(1023));
  EXPECT_EQ(t.upper_bound(JobId(1024))->first, JobId(5000));
  EXPECT_EQ(t.upper_bound(JobId(5000)), t.end());
  JobTable copy = t;
  t.Erase(JobId(1024));
  t.Put(JobId(2), Rec(2));
  EXPECT_EQ(copy.size(), 5u);
  EXPECT_NE(copy.find(JobId(1024)), copy.end());
  EXPECT_EQ(t.size(), 4u);
  EXPECT_EQ(t.find(JobId(1024)), t.end());
  t.Erase(JobId(5000));  // its chunk empties and goes
  EXPECT_EQ(t.upper_bound(JobId(1023)), t.end());
}

// ForEachNotIn gives the jobs one table holds and another does not (the
// ended ones: all jobs against the live), in id order, across chunks the
// other lacks, shorter or longer tables and words of 64 ids.
TEST(JobTable, ForEachNotInGivesWhatOnlyThisTableHolds) {
  JobTable all, live;
  for (uint64_t id : {1u, 2u, 63u, 64u, 65u, 127u, 128u, 700u, 5000u, 9000u}) all.Put(JobId(id), Rec(id));
  for (uint64_t id : {2u, 64u, 127u, 128u, 5000u}) live.Put(JobId(id), Rec(id));
  live.Put(JobId(20000), Rec(20000));  // (beyond all's chunks)
  std::vector<uint64_t> seen;
  all.ForEachNotIn(live, [&](JobId id, const std::shared_ptr<const JobRecord>& job) {
    EXPECT_EQ(job->id, id);
    seen.push_back(id.value());
  });
  EXPECT_EQ(seen, (std::vector<uint64_t>{1, 63, 65, 700, 9000}));
  seen.clear();
  all.ForEachNotIn(JobTable(), [&](JobId id, const auto&) { seen.push_back(id.value()); });
  EXPECT_EQ(seen.size(), all.size());
  seen.clear();
  all.ForEachNotIn(all, [&](JobId id, const auto&) { seen.push_back(id.value()); });
  EXPECT_TRUE(seen.empty());
}

// A chunk's version changes with every write to it, shared or not, and
// never comes back: a reader that kept what it derived from a version may
// use it only while the version is the same (the engine keeps no old
// snapshot alive for this, so the state writes its chunks in place).
TEST(JobTable, AWriteGivesItsChunkAVersionNeverSeenBefore) {
  JobTable t;
  EXPECT_EQ(t.chunk_count(), 0u);
  t.Put(JobId(1), Rec(1));
  t.Put(JobId(200), Rec(200));
  ASSERT_EQ(t.chunk_count(), 2u);
  const uint64_t first = t.chunk_version(0), second = t.chunk_version(1);
  EXPECT_NE(first, 0u);
  EXPECT_NE(first, second);
  t.Put(JobId(2), Rec(2));  // unshared: changed in place, a new version
  EXPECT_NE(t.chunk_version(0), first);
  EXPECT_EQ(t.chunk_version(1), second);  // the other chunk is as it was
  const uint64_t in_place = t.chunk_version(0);
  JobTable copy = t;
  EXPECT_EQ(copy.chunk_version(0), in_place);  // shared: the same chunk
  copy.Put(JobId(3), Rec(3));
  EXPECT_EQ(t.chunk_version(0), in_place);
  EXPECT_NE(copy.chunk_version(0), in_place);
  const std::set<uint64_t> seen = {first, second, in_place, copy.chunk_version(0)};
  EXPECT_EQ(seen.size(), 4u);
  t.Erase(JobId(200));  // its chunk empties and goes
  EXPECT_EQ(t.chunk_version(1), 0u);
  t.Put(JobId(200), Rec(200));
  EXPECT_EQ(seen.count(t.chunk_version(1)), 0u);
}

}  // namespace
// Attained service: the run time of a job's ended attempts, plus the
// running one's so far; it survives a journal snapshot.
TEST(ClusterState, AJobsAttainedServiceAddsUpItsAttempts) {
  ClusterState st;
  ASSERT_TRUE(st.Apply(NodeAdded{NodeSpec{.name = "n", .gpu_model = "H100", .gpus = 8, .cpu = 64000, .memory = 1 << 20}}).ok());
  ASSERT_TRUE(st.Apply(JobSubmitted{JobId(1), Job(1, 8), 0}).ok());
  ASSERT_TRUE(st.Apply(JobBound{JobId(1), {{0, 0, NodeId(0), 0xff}}, 100}).ok());
  EXPECT_EQ(st.GetSnapshot().FindJob(JobId(1))->AttainedAt(130), 30);
  ASSERT_TRUE(st.Apply(JobRequeued{JobId(1), 150, "node lost"}).ok());
  EXPECT_EQ(st.GetSnapshot().FindJob(JobId(1))->attained, 50);
  EXPECT_EQ(st.GetSnapshot().FindJob(JobId(1))->AttainedAt(1000), 50);  // pending: nothing more
  ASSERT_TRUE(st.Apply(JobBound{JobId(1), {{0, 0, NodeId(0), 0xff}}, 200}).ok());
  ClusterState replay;
  for (const Event& e : CompactState(st.GetSnapshot())) ASSERT_TRUE(replay.Apply(e).ok());
  EXPECT_EQ(replay.GetSnapshot().FindJob(JobId(1))->AttainedAt(260), 110);
  ASSERT_TRUE(st.Apply(JobFinished{JobId(1), JobOutcome::kSucceeded, 300}).ok());
  EXPECT_EQ(st.GetSnapshot().FindJob(JobId(1))->attained, 150);
  // Each attempt, with its times and how it ended, through a snapshot too.
  const std::vector<JobAttempt> want = {{100, 150, "requeued: node lost"}, {200, 300, "succeeded"}};
  EXPECT_EQ(st.GetSnapshot().FindJob(JobId(1))->attempts, want);
  ClusterState again;
  for (const Event& e : CompactState(st.GetSnapshot())) ASSERT_TRUE(again.Apply(e).ok());
  EXPECT_EQ(again.GetSnapshot().FindJob(JobId(1))->attempts, want);
  EXPECT_EQ(again.GetSnapshot().FindJob(JobId(1))->attained, 150);  // not its last attempt twice
}

// Jobs that ended are forgotten (the server's job retention): all the ids
// named or none, only ended ones; what they ran stays, by queue and day, and
// the ids issued outlive them through a journal snapshot.
TEST(ClusterState, ForgetsEndedJobsAndKeepsWhatTheyRan) {
  ClusterState st;
  ASSERT_TRUE(st.Apply(NodeAdded{Node("n0", 8)}).ok());
  const Duration h = 3600 * kMicrosPerSecond;
  const TimePoint day = kForgottenUsageDay;
  JobSpec research = Job(1, 4);
  research.queue = "research";
  ASSERT_TRUE(st.Apply(JobSubmitted{JobId(1), research, 10 * day}).ok());
  ASSERT_TRUE(st.Apply(JobSubmitted{JobId(2), Job(1, 2), 10 * day}).ok());
  ASSERT_TRUE(st.Apply(JobSubmitted{JobId(3), Job(1, 2), 10 * day}).ok());
  ASSERT_TRUE(st.Apply(JobSubmitted{JobId(4), Job(1, 2), 10 * day}).ok());
  ASSERT_TRUE(st.Apply(JobSubmitted{JobId(5), Job(1, 1), 10 * day}).ok());
  // 1: two attempts on 4 GPUs, the second across midnight; 2: cancelled
  // waiting; 3 runs; 4 waits; 5 succeeds on 1 GPU.
  ASSERT_TRUE(st.Apply(JobBound{JobId(1), {{0, 0, NodeId(0), 0x0F}}, 10 * day + 1 * h}).ok());
  ASSERT_TRUE(st.Apply(JobRequeued{JobId(1), 10 * day + 3 * h, "node lost"}).ok());
  ASSERT_TRUE(st.Apply(JobBound{JobId(1), {{0, 0, NodeId(0), 0x0F}}, 10 * day + 22 * h}).ok());
  ASSERT_TRUE(st.Apply(JobFinished{JobId(1), JobOutcome::kFailed, 11 * day + 1 * h}).ok());
  ASSERT_TRUE(st.Apply(JobCancelled{JobId(2), 10 * day + 5 * h, "cancelled by alice"}).ok());
  ASSERT_TRUE(st.Apply(JobBound{JobId(3), {{0, 0, NodeId(0), 0x30}}, 10 * day}).ok());
  ASSERT_TRUE(st.Apply(JobBound{JobId(5), {{0, 0, NodeId(0), 0x40}}, 10 * day}).ok());
  ASSERT_TRUE(st.Apply(JobFinished{JobId(5), JobOutcome::kSucceeded, 10 * day + 2 * h}).ok());
  const RunHistory history = st.GetSnapshot().history();
  const Snapshot before = st.GetSnapshot();

  // Refused, changing nothing: a live job among them, an id out of order,
  // one not held, a next id not above them, negative usage.
  Status live = st.Apply(JobsForgotten{{JobId(1), JobId(3)}, 20 * day, 6});
  EXPECT_EQ(live.code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(live.message(), "job 3 is running: only a job that ended is forgotten");
  EXPECT_EQ(st.Apply(JobsForgotten{{JobId(4)}, 20 * day, 6}).message(),
            "job 4 is pending: only a job that ended is forgotten");
  EXPECT_EQ(st.Apply(JobsForgotten{{JobId(2), JobId(1)}, 20 * day, 6}).message(),
            "jobs forgotten: ids are not ascending at job 1");
  EXPECT_EQ(st.Apply(JobsForgotten{{JobId(1), JobId(9)}, 20 * day, 10}).code(), StatusCode::kNotFound);
  EXPECT_EQ(st.Apply(JobsForgotten{{JobId(1), JobId(5)}, 20 * day, 5}).message(),
            "jobs forgotten: next_id 5 is not above job 5");
  EXPECT_EQ(st.Apply(JobsForgotten{{}, 20 * day, 6, {{"q", {{3, -1}}}}}).message(),
            "jobs forgotten: usage of queue 'q' on day 3 is out of range");
  EXPECT_EQ(st.Apply(JobsForgotten{{}, 20 * day, 6, {{"q", {{-3, 1}}}}}).message(),
            "jobs forgotten: usage of queue 'q': day -3 is out of range");
  EXPECT_EQ(st.Apply(JobsForgotten{{JobId(1)}, 20 * day, (uint64_t{1} << 40) + 1}).message(),
            "jobs forgotten: next_id 1099511627777 is out of range");
  EXPECT_EQ(st.revision(), before.revision());
  EXPECT_NE(st.GetSnapshot().FindJob(JobId(1)), nullptr);
  EXPECT_TRUE(st.GetSnapshot().forgotten_usage().empty());

  ASSERT_TRUE(st.Apply(JobsForgotten{{JobId(1), JobId(2), JobId(5)}, 20 * day, 6}).ok());
  Snapshot after = st.GetSnapshot();
  EXPECT_EQ(after.FindJob(JobId(1)), nullptr);
  EXPECT_EQ(after.FindJob(JobId(2)), nullptr);
  EXPECT_EQ(after.FindJob(JobId(5)), nullptr);
  EXPECT_EQ(after.jobs().size(), 2u);  // 3 and 4, as they were
  EXPECT_EQ(after.FindJob(JobId(3)), before.FindJob(JobId(3)));
  EXPECT_EQ(after.live_jobs().size(), 2u);
  EXPECT_EQ(after.issued_below(), 6u);
  EXPECT_TRUE(after.history() == history);  // the learned order's history is its own
  EXPECT_EQ(before.FindJob(JobId(1))->id, JobId(1));  // an older snapshot keeps its own
  // Job 1: 2 h on day 10 and 2 h on day 10 again, 1 h on day 11, on 4
  // GPUs; job 5: 2 h on 1 GPU; job 2 never ran.
  const ForgottenUsage want = {{"research", {{10, 4 * 4 * h}, {11, 4 * 1 * h}}}, {"default", {{10, 2 * h}}}};
  EXPECT_EQ(after.forgotten_usage(), want);

  // A journal snapshot carries the ids issued and the usage, not the jobs.
  ClusterState replay;
  for (const Event& e : CompactState(after)) ASSERT_TRUE(replay.Apply(e).ok());
  EXPECT_EQ(replay.GetSnapshot().jobs().size(), 2u);
  EXPECT_EQ(replay.GetSnapshot().issued_below(), 6u);
  EXPECT_EQ(replay.GetSnapshot().forgotten_usage(), want);
  // A later forget adds to it, and days 400 before it go.
  ASSERT_TRUE(replay.Apply(JobFinished{JobId(3), JobOutcome::kSucceeded, 12 * day}).ok());
  ASSERT_TRUE(replay.Apply(JobsForgotten{{JobId(3)}, 411 * day, 7}).ok());
  EXPECT_EQ(replay.GetSnapshot().forgotten_usage(),
            (ForgottenUsage{{"research", {{11, 4 * 1 * h}}}, {"default", {{11, 2 * 24 * h}}}}));
  EXPECT_EQ(replay.GetSnapshot().issued_below(), 7u);
}

// The learned order's history: jobs a minute apart with the same queue and
// GPU count are one sweep; a job that ends on its own is learned (its
// GPU-time binned, its sweep's count), a cancelled one only leaves; a sweep
// with no live job that can take no more is dropped.
TEST(ClusterState, RunHistoryLearnsFinishedJobsAndTheirSweeps) {
  ClusterState st;
  ASSERT_TRUE(st.Apply(NodeAdded{Node("n", 8)}).ok());
  const TimePoint s = kMicrosPerSecond;
  ASSERT_TRUE(st.Apply(JobSubmitted{JobId(1), Job(1, 2), 0}).ok());
  ASSERT_TRUE(st.Apply(JobSubmitted{JobId(2), Job(1, 2), 50 * s}).ok());   // within a minute of 1
  ASSERT_TRUE(st.Apply(JobSubmitted{JobId(3), Job(1, 4), 60 * s}).ok());   // other GPUs: its own
  ASSERT_TRUE(st.Apply(JobSubmitted{JobId(4), Job(1, 2), 105 * s}).ok());  // within a minute of 2
  ASSERT_TRUE(st.Apply(JobSubmitted{JobId(5), Job(1, 2), 400 * s}).ok());  // a new sweep
  Snapshot snap = st.GetSnapshot();
  EXPECT_EQ(snap.FindJob(JobId(2))->sweep, JobId(1));
  EXPECT_EQ(snap.FindJob(JobId(3))->sweep, JobId(3));
  EXPECT_EQ(snap.FindJob(JobId(4))->sweep, JobId(1));
  EXPECT_EQ(snap.FindJob(JobId(5))->sweep, JobId(5));
  // Job 1 runs 100 s on 2 GPUs and succeeds: 200 GPU-seconds.
  ASSERT_TRUE(st.Apply(JobBound{JobId(1), {{0, 0, NodeId(0), 0x3}}, 500 * s}).ok());
  ASSERT_TRUE(st.Apply(JobFinished{JobId(1), JobOutcome::kSucceeded, 600 * s}).ok());
  const RunHistory& h = st.GetSnapshot().history();
  EXPECT_EQ(h.finished, 1);
  EXPECT_EQ(h.count[RunHistory::Bin(200)], 1);
  EXPECT_EQ(h.gpu_seconds[RunHistory::Bin(200)], 200);
  EXPECT_EQ(h.log_sum, std::llround(std::log(200.0) * RunHistory::kLogScale));
  ASSERT_EQ(h.sweeps.count(1), 1u);
  EXPECT_EQ(h.sweeps.at(1).finished, 1);
  EXPECT_EQ(h.sweeps.at(1).live, 2);  // 2 and 4
  EXPECT_EQ(snap.history().finished, 0);  // an older snapshot keeps its own
  // Cancelled jobs are not learned; sweep 1, no longer open, goes with its last.
  ASSERT_TRUE(st.Apply(JobCancelled{JobId(2), 700 * s, "cancelled by alice"}).ok());
  ASSERT_TRUE(st.Apply(JobCancelled{JobId(4), 700 * s, "cancelled by alice"}).ok());
  EXPECT_EQ(st.GetSnapshot().history().finished, 1);
  EXPECT_EQ(st.GetSnapshot().history().sweeps.count(1), 0u);
  // Sweep 5 is open: it stays with no live job, and a job within its minute joins it.
  ASSERT_TRUE(st.Apply(JobCancelled{JobId(5), 420 * s, "cancelled by alice"}).ok());
  EXPECT_EQ(st.GetSnapshot().history().sweeps.count(5), 1u);
  ASSERT_TRUE(st.Apply(JobSubmitted{JobId(6), Job(1, 2), 450 * s}).ok());
  EXPECT_EQ(st.GetSnapshot().FindJob(JobId(6))->sweep, JobId(5));
  // One submitted before the sweep's last (an old snapshot's live job
  // replayed after newer ended ones) does not join it.
  ASSERT_TRUE(st.Apply(JobSubmitted{JobId(7), Job(1, 2), 440 * s}).ok());
  EXPECT_EQ(st.GetSnapshot().FindJob(JobId(7))->sweep, JobId(7));
  // A job without whole GPUs (CPU only) teaches nothing of GPU-time.
  ASSERT_TRUE(st.Apply(JobSubmitted{JobId(8), Job(1, 0), 800 * s}).ok());
  ASSERT_TRUE(st.Apply(JobBound{JobId(8), {{0, 0, NodeId(0), 0}}, 800 * s}).ok());
  ASSERT_TRUE(st.Apply(JobFinished{JobId(8), JobOutcome::kSucceeded, 900 * s}).ok());
  EXPECT_EQ(st.GetSnapshot().history().finished, 1);
}

// A journal snapshot replays ended jobs before live ones, so the history is
// carried whole: a restart resumes it bit for bit, with every job's sweep
// and the GPU-time of every ended job's last attempt counted once.
TEST(CompactState, KeepsTheRunHistoryAndSweeps) {
  ClusterState st;
  ASSERT_TRUE(st.Apply(NodeAdded{Node("n", 8)}).ok());
  const TimePoint s = kMicrosPerSecond;
  ASSERT_TRUE(st.Apply(JobSubmitted{JobId(1), Job(1, 1), 0}).ok());
  ASSERT_TRUE(st.Apply(JobSubmitted{JobId(2), Job(1, 1), 50 * s}).ok());
  ASSERT_TRUE(st.Apply(JobsSubmitted{JobId(3), 3, Job(1, 1), 100 * s, "", "", JobId(3), 3}).ok());
  ASSERT_TRUE(st.Apply(JobSubmitted{JobId(6), Job(1, 1), 130 * s}).ok());
  ASSERT_TRUE(st.Apply(JobBound{JobId(1), {{0, 0, NodeId(0), 0x1}}, 200 * s}).ok());
  ASSERT_TRUE(st.Apply(JobBound{JobId(6), {{0, 0, NodeId(0), 0x2}}, 200 * s}).ok());
  ASSERT_TRUE(st.Apply(JobFinished{JobId(1), JobOutcome::kSucceeded, 300 * s}).ok());
  ASSERT_TRUE(st.Apply(JobFinished{JobId(6), JobOutcome::kFailed, 1000 * s, "exit 1"}).ok());
  const Snapshot before = st.GetSnapshot();
  ASSERT_EQ(before.history().finished, 2);
  ClusterState replay;
  for (const Event& e : CompactState(before)) ASSERT_TRUE(replay.Apply(e).ok());
  const Snapshot after = replay.GetSnapshot();
  EXPECT_TRUE(after.history() == before.history());
  for (uint64_t id = 1; id <= 6; ++id) {
    EXPECT_EQ(after.FindJob(JobId(id))->sweep, before.FindJob(JobId(id))->sweep) << id;
    EXPECT_EQ(after.FindJob(JobId(id))->sweep, JobId(1)) << id;  // each within a minute of the last
    EXPECT_EQ(after.FindJob(JobId(id))->attained, before.FindJob(JobId(id))->attained) << id;
  }
  // Replayed, the history goes on as the original's does.
  for (ClusterState* c : {&st, &replay}) {
    ASSERT_TRUE(c->Apply(JobBound{JobId(2), {{0, 0, NodeId(0), 0x1}}, 2000 * s}).ok());
    ASSERT_TRUE(c->Apply(JobFinished{JobId(2), JobOutcome::kSucceeded, 2500 * s}).ok());
  }
  EXPECT_TRUE(replay.GetSnapshot().history() == st.GetSnapshot().history());
  EXPECT_EQ(st.GetSnapshot().history().sweeps.at(1).finished, 3);
}

// A gang evicted for a running service's scale-up nominates its GPUs for
// the service; a later eviction's replace those of an older one (which the
// service no longer waits for), while one eviction's victims add up.
TEST(ClusterState, AScalingServiceIsNominatedTheGpusOfItsLatestVictims) {
  ClusterState st;
  ASSERT_TRUE(st.Apply(NodeAdded{Node("n", 8)}).ok());
  ASSERT_TRUE(st.Apply(JobSubmitted{JobId(1), Service(4), 0}).ok());
  ASSERT_TRUE(st.Apply(JobBound{JobId(1), {{0, 0, NodeId(0), 0x01}}, 1}).ok());
  for (uint64_t id = 2; id <= 4; ++id) {
    ASSERT_TRUE(st.Apply(JobSubmitted{JobId(id), Job(1, 2), 0}).ok());
    ASSERT_TRUE(st.Apply(JobBound{JobId(id), {{0, 0, NodeId(0), uint64_t{0x6} << (2 * (id - 2))}}, 1}).ok());
  }
  // One scale-up evicts jobs 2 and 3: both gangs' GPUs are nominated.
  ASSERT_TRUE(st.Apply(JobPreempting{JobId(2), 100, JobId(1), "scale up"}).ok());
  ASSERT_TRUE(st.Apply(JobPreempting{JobId(3), 100, JobId(1), "scale up"}).ok());
  ASSERT_TRUE(st.Apply(JobRequeued{JobId(2), 110, "preempted"}).ok());
  ASSERT_TRUE(st.Apply(JobRequeued{JobId(3), 120, "preempted"}).ok());
  EXPECT_EQ(st.GetSnapshot().FindJob(JobId(1))->nominated.size(), 2u);
  // A later one (job 4) replaces them.
  ASSERT_TRUE(st.Apply(JobPreempting{JobId(4), 500, JobId(1), "scale up"}).ok());
  ASSERT_TRUE(st.Apply(JobRequeued{JobId(4), 510, "preempted"}).ok());
  const JobRecord* s1 = st.GetSnapshot().FindJob(JobId(1));
  ASSERT_EQ(s1->nominated.size(), 1u);
  EXPECT_EQ(s1->nominated[0].gpu_mask, uint64_t{0x6} << 4);
  // When its autoscaler last decided to go down (not up, not the same),
  // kept by a journal snapshot.
  EXPECT_EQ(s1->scaled_down_at, 0);
  ASSERT_TRUE(st.Apply(ServiceScaled{JobId(1), 600, 3, "up"}).ok());
  ASSERT_TRUE(st.Apply(ServiceScaled{JobId(1), 700, 2, "down"}).ok());
  ASSERT_TRUE(st.Apply(ServiceScaled{JobId(1), 800, 4, "up"}).ok());
  EXPECT_EQ(st.GetSnapshot().FindJob(JobId(1))->scaled_down_at, 700);
  ClusterState replay;
  for (const Event& e : CompactState(st.GetSnapshot())) ASSERT_TRUE(replay.Apply(e).ok());
  EXPECT_EQ(replay.GetSnapshot().FindJob(JobId(1))->scaled_down_at, 700);
  EXPECT_EQ(replay.GetSnapshot().FindJob(JobId(1))->DesiredReplicas(), 4);
}

// A hold: only a pending job, once; it survives a journal snapshot.
TEST(ClusterState, HoldsAPendingJobUntilReleased) {
  ClusterState st;
  ASSERT_TRUE(st.Apply(NodeAdded{NodeSpec{.name = "n", .gpu_model = "H100", .gpus = 8, .cpu = 64000, .memory = 1 << 20}}).ok());
  ASSERT_TRUE(st.Apply(JobSubmitted{JobId(1), Job(1, 8), 0}).ok());
  ASSERT_TRUE(st.Apply(JobSubmitted{JobId(2), Job(1, 8), 0}).ok());
  ASSERT_TRUE(st.Apply(JobBound{JobId(1), {{0, 0, NodeId(0), 0xff}}, 10}).ok());
  EXPECT_EQ(st.Apply(JobHoldChanged{JobId(1), true, 11, "bob"}).code(), StatusCode::kFailedPrecondition);  // running
  EXPECT_EQ(st.Apply(JobHoldChanged{JobId(2), false, 11, "bob"}).code(), StatusCode::kFailedPrecondition);  // not held
  ASSERT_TRUE(st.Apply(JobHoldChanged{JobId(2), true, 12, "bob"}).ok());
  EXPECT_EQ(st.Apply(JobHoldChanged{JobId(2), true, 13, "bob"}).code(), StatusCode::kFailedPrecondition);
  ClusterState replay;
  for (const Event& e : CompactState(st.GetSnapshot())) ASSERT_TRUE(replay.Apply(e).ok());
  EXPECT_TRUE(replay.GetSnapshot().FindJob(JobId(2))->held);
  EXPECT_EQ(replay.GetSnapshot().FindJob(JobId(2))->held_by, "bob");
  ASSERT_TRUE(st.Apply(JobHoldChanged{JobId(2), false, 14, "admin"}).ok());
  EXPECT_FALSE(st.GetSnapshot().FindJob(JobId(2))->held);
  // A held job is never bound (a cycle that decided before the hold), and a
  // held job cancelled is held no more: its journal snapshot replays.
  ASSERT_TRUE(st.Apply(JobHoldChanged{JobId(2), true, 15, "bob"}).ok());
  ASSERT_TRUE(st.Apply(JobFinished{JobId(1), JobOutcome::kSucceeded, 16}).ok());
  EXPECT_EQ(st.Apply(JobBound{JobId(2), {{0, 0, NodeId(0), 0xff}}, 17}).code(), StatusCode::kFailedPrecondition);
  ASSERT_TRUE(st.Apply(JobCancelled{JobId(2), 18, "cancelled by bob"}).ok());
  EXPECT_FALSE(st.GetSnapshot().FindJob(JobId(2))->held);
  ClusterState after;
  for (const Event& e : CompactState(st.GetSnapshot())) ASSERT_TRUE(after.Apply(e).ok());
  EXPECT_EQ(after.GetSnapshot().FindJob(JobId(2))->state, JobState::kCancelled);
  // An admin's hold stays an admin's through a snapshot.
  ASSERT_TRUE(st.Apply(JobSubmitted{JobId(3), Job(1, 8), 20}).ok());
  ASSERT_TRUE(st.Apply(JobHoldChanged{JobId(3), true, 21, "root", true}).ok());
  ClusterState later;
  for (const Event& e : CompactState(st.GetSnapshot())) ASSERT_TRUE(later.Apply(e).ok());
  EXPECT_TRUE(later.GetSnapshot().FindJob(JobId(3))->held_by_admin);
}

// An array's elements hold one spec between them: as submitted in parts,
// after a journal snapshot that replays some one by one (element 2 ran), and
// until one element's spec is replaced (the others keep theirs).
TEST(ClusterState, AnArraysElementsShareOneSpec) {
  ClusterState st;
  ASSERT_TRUE(st.Apply(NodeAdded{Node("n0", 8)}).ok());
  ASSERT_TRUE(st.Apply(JobsSubmitted{JobId(1), 3, Job(1, 1), 1, "u", "", JobId(1), 5}).ok());
  ASSERT_TRUE(st.Apply(JobsSubmitted{JobId(4), 2, Job(1, 1), 1, "u", "", JobId(1), 5}).ok());
  ASSERT_TRUE(st.Apply(JobSubmitted{.id = JobId(6), .spec = Job(1, 1), .at = 1, .user = "u"}).ok());  // alone
  ASSERT_TRUE(st.Apply(JobBound{JobId(2), {{0, 0, NodeId(0), 0x01}}, 2}).ok());
  auto shared = [](const Snapshot& snap, uint64_t a, uint64_t b) {
    return snap.FindJob(JobId(a))->shared_spec == snap.FindJob(JobId(b))->shared_spec;
  };
  const Snapshot snap = st.GetSnapshot();
  for (uint64_t id = 2; id <= 5; ++id) EXPECT_TRUE(shared(snap, 1, id)) << id;
  EXPECT_FALSE(shared(snap, 5, 6));  // not of the array
  ClusterState replay;
  for (const Event& e : CompactState(snap)) ASSERT_TRUE(replay.Apply(e).ok());
  const Snapshot again = replay.GetSnapshot();
  for (uint64_t id = 2; id <= 5; ++id) EXPECT_TRUE(shared(again, 1, id)) << id;
  EXPECT_EQ(again.FindJob(JobId(3))->spec(), Job(1, 1));
  JobRecord copy = *again.FindJob(JobId(3));
  JobSpec changed = copy.spec();
  changed.priority = 7;
  copy.SetSpec(std::move(changed));
  EXPECT_EQ(copy.spec().priority, 7);
  EXPECT_EQ(again.FindJob(JobId(3))->spec().priority, Job(1, 1).priority);
  EXPECT_TRUE(shared(again, 1, 3));
  // Elements forgotten between others (they end in any order): the ones
  // left still share one spec after a journal snapshot.
  ASSERT_TRUE(replay.Apply(JobCancelled{JobId(2), 3, "cancelled"}).ok());
  ASSERT_TRUE(replay.Apply(JobCancelled{JobId(4), 3, "cancelled"}).ok());
  ASSERT_TRUE(replay.Apply(JobsForgotten{{JobId(2), JobId(4)}, 4, 7}).ok());
  ClusterState gaps;
  for (const Event& e : CompactState(replay.GetSnapshot())) ASSERT_TRUE(gaps.Apply(e).ok());
  const Snapshot left = gaps.GetSnapshot();
  ASSERT_EQ(left.FindJob(JobId(2)), nullptr);
  EXPECT_TRUE(shared(left, 1, 3));
  EXPECT_TRUE(shared(left, 1, 5));
  EXPECT_FALSE(shared(left, 5, 6));
  // An element of the array whose spec differs (replaced while it ran) keeps its own.
  ClusterState mixed;
  JobSpec other = Job(1, 1);
  other.priority = 9;
  ASSERT_TRUE(mixed.Apply(JobSubmitted{.id = JobId(1), .spec = Job(1, 1), .at = 1, .user = "u", .array = JobId(1),
                                       .array_count = 5}).ok());
  ASSERT_TRUE(mixed.Apply(JobSubmitted{.id = JobId(3), .spec = other, .at = 1, .user = "u", .array = JobId(1),
                                       .array_count = 5}).ok());
  ASSERT_TRUE(mixed.Apply(JobSubmitted{.id = JobId(5), .spec = Job(1, 1), .at = 1, .user = "u", .array = JobId(1),
                                       .array_count = 5}).ok());
  const Snapshot m = mixed.GetSnapshot();
  EXPECT_FALSE(shared(m, 1, 3));
  EXPECT_EQ(m.FindJob(JobId(3))->spec().priority, 9);
  EXPECT_EQ(m.FindJob(JobId(5))->spec(), Job(1, 1));
}

// The live services are listed without a walk over every job: a service is
// listed from its submission until it ends, and earlier snapshots keep theirs.
TEST(ClusterState, ListsItsLiveServices) {
  ClusterState st;
  ASSERT_TRUE(st.Apply(NodeAdded{Node("n0", 8)}).ok());
  const JobSpec svc = Service(1);
  ASSERT_TRUE(st.Apply(JobSubmitted{JobId(1), Job(1, 1), 0}).ok());
  const Status submitted = st.Apply(JobSubmitted{JobId(2), svc, 0});
  ASSERT_TRUE(submitted.ok()) << submitted.message();
  ASSERT_TRUE(st.Apply(JobSubmitted{JobId(3), svc, 0}).ok());
  Snapshot both = st.GetSnapshot();
  ASSERT_EQ(both.LiveServices().size(), 2u);
  EXPECT_EQ(both.LiveServices()[0]->id, JobId(2));
  EXPECT_EQ(both.LiveServices()[1]->id, JobId(3));
  ASSERT_TRUE(st.Apply(JobBound{JobId(2), {{0, 0, NodeId(0), 0x1}}, 1}).ok());
  ASSERT_TRUE(st.Apply(JobCancelled{JobId(3), 2, "cancelled"}).ok());
  ASSERT_TRUE(st.Apply(JobCancelled{JobId(1), 2, "cancelled"}).ok());
  Snapshot one = st.GetSnapshot();
  ASSERT_EQ(one.LiveServices().size(), 1u);
  EXPECT_EQ(one.LiveServices()[0]->id, JobId(2));
  EXPECT_EQ(one.LiveServices()[0]->state, JobState::kRunning);
  EXPECT_EQ(both.LiveServices().size(), 2u);
  ClusterState replay;
  for (const Event& e : CompactState(one)) ASSERT_TRUE(replay.Apply(e).ok());
  ASSERT_EQ(replay.GetSnapshot().LiveServices().size(), 1u);
  EXPECT_EQ(replay.GetSnapshot().LiveServices()[0]->id, JobId(2));
}

// The largest id the table holds, across chunks and after erasures.
TEST(JobTable, MaxIdIsTheLargestHeld) {
  JobTable t;
  EXPECT_EQ(t.max_id(), JobId());
  for (uint64_t id : {3, 1500, 2047, 2048}) t.Put(JobId(id), std::make_shared<JobRecord>());
  EXPECT_EQ(t.max_id(), JobId(2048));
  t.Erase(JobId(2048));
  EXPECT_EQ(t.max_id(), JobId(2047));
  t.Erase(JobId(2047));
  t.Erase(JobId(1500));
  EXPECT_EQ(t.max_id(), JobId(3));
  size_t seen = 0;
  for (const auto& [id, job] : t) seen += id == JobId(3);
  EXPECT_EQ(seen, 1u);
}

}  // namespace rota

namespace rota {
namespace {

// The edges are 2^(i/2), correctly rounded: powers of 2, and sqrt 2 (as
// std::sqrt rounds it) times them.
TEST(RunHistory, EdgesAreTheHalfPowersOfTwo) {
  for (int i = 0; i <= RunHistory::kBins; ++i) {
    EXPECT_EQ(RunHistory::Edge(i), std::ldexp(i % 2 == 1 ? std::sqrt(2.0) : 1.0, i / 2)) << i;
  }
}

// Bin's shortcut from the exponent gives what its definition gives: the
// last edge not above the value (bin 0 below 1, the last bin above it),
// at every edge, a hair either side of it, and in between.
TEST(RunHistory, BinIsTheLastEdgeNotAboveIt) {
  auto by_definition = [](double x) {
    const auto& e = RunHistory::Edges();
    const int i = static_cast<int>(std::upper_bound(e.begin(), e.begin() + RunHistory::kBins, x) - e.begin()) - 1;
    return std::clamp(i, 0, RunHistory::kBins - 1);
  };
  std::vector<double> xs = {0, -1, 0.5, 1, 1.5, 2, 1e12, HUGE_VAL, std::nan("")};
  for (int i = 0; i <= RunHistory::kBins; ++i) {
    const double e = RunHistory::Edge(i);
    xs.insert(xs.end(), {e, std::nextafter(e, 0.0), std::nextafter(e, HUGE_VAL), e * 1.1, e * 1.3});
  }
  uint64_t seed = 42;
  for (int k = 0; k < 100000; ++k) {
    seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
    // Log-uniform from 2^-3 to 2^34: every exponent about as often.
    xs.push_back(std::ldexp(1.0 + std::ldexp(static_cast<double>(seed >> 11), -53), static_cast<int>(seed % 37) - 3));
  }
  for (double x : xs) EXPECT_EQ(RunHistory::Bin(x), by_definition(x)) << x;
}

}  // namespace
}  // namespace rota
