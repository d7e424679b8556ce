#include "server/views.h"

#include <gtest/gtest.h>

#include "sched/test_util.h"

namespace rota::server {
namespace {

using sched::testing::GpuJob;
using sched::testing::Group;
using sched::testing::MakeCluster;

// Jobs 1 and 3 are alice's, 2 and 4 bob's.
ClusterState Jobs() {
  ClusterConfig config;
  config.node_groups.push_back(Group("n", 1, 8));
  ClusterState st = MakeCluster(config);
  for (uint64_t id = 1; id <= 4; ++id) {
    EXPECT_TRUE(st.Apply(JobSubmitted{.id = JobId(id), .spec = GpuJob("j", 1, 1), .at = 0, .user = id % 2 ? "alice" : "bob"}).ok());
  }
  return st;
}

// Under job_visibility: own, the engine's reasons tell a user other users'
// jobs as theirs, not by id (their ids are a 404 to that user); the user's
// own ids, and every id for a viewer who sees all, stay.
TEST(ReasonFor, OtherUsersJobsAreToldAsTheirsNotByIdUnderVisibilityOwn) {
  ClusterState st = Jobs();
  const Snapshot snap = st.GetSnapshot();
  const std::string bob = "bob";
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"preempting job 1 to make room; it starts when they have checkpointed and stopped",
       "preempting another user's job to make room; it starts when they have checkpointed and stopped"},
      {"preempted for job 3 (priority 1000 > 100)", "preempted for another user's job (priority 1000 > 100)"},
      {"preempting jobs 1, 2 to make room", "preempting jobs 2 and another user's to make room"},
      {"waiting for preempted job(s) 1, 3 to checkpoint and stop", "waiting for preempted other users' jobs to checkpoint and stop"},
      {"waiting for preempted job(s) 4, 2 to checkpoint", "waiting for preempted job(s) 4, 2 to checkpoint"},
      {"job 1 has run 3m of its 10m minimum runtime", "another user's job has run 3m of its 10m minimum runtime"},
      {"shrunk by 2 replica(s) to 2 for job 99", "shrunk by 2 replica(s) to 2 for job 99"},  // (forgotten: whose is not known)
      {"preempted to scale up service 3 (priority 2000) to 4 replicas: in flight 9.7 (target 2.0/replica)",
       "preempted to scale up another user's service (priority 2000) to 4 replicas"},
      {"preempted to scale up service 3 (priority 2000) to 4 replicas: load 9 (did not stop within its grace period)",
       "preempted to scale up another user's service (priority 2000) to 4 replicas (did not stop within its grace period)"},
      {"job-12 and myjob 1 are names, not ids", "job-12 and myjob 1 are names, not ids"},
      {"job 2 ends at job 1", "job 2 ends at another user's job"},
      {"job 1", "another user's job"},
      {"job ", "job "},
  };
  for (const auto& [text, told] : cases) {
    EXPECT_EQ(ReasonFor(snap, text, true, &bob), told) << text;
    EXPECT_EQ(ReasonFor(snap, text, true, nullptr), text) << "job_visibility: all";
  }
}

// A job's end, as read by another user (job_visibility: all): not what its
// spec told the agent (a replica that did not start names its program,
// PATH, mounts); what the lifecycle said after it stays. Its owner reads it whole.
TEST(ReasonFor, AnotherUserIsNotToldWhatTheSpecToldTheAgent) {
  ClusterState st = Jobs();
  const Snapshot snap = st.GetSnapshot();
  const std::string text = "main-0 did not start: cannot start '/home/alice/private/tool': No such file or directory; no restarts left";
  EXPECT_EQ(ReasonFor(snap, text, /*owner=*/true, nullptr), text);
  EXPECT_EQ(ReasonFor(snap, text, /*owner=*/false, nullptr), "main-0 did not start (its owner's log says why); no restarts left");
  EXPECT_EQ(ReasonFor(snap, "main-1 did not start: 'x' is not in the image's PATH (/opt/secret/bin)", false, nullptr),
            "main-1 did not start (its owner's log says why)");
  EXPECT_EQ(ReasonFor(snap, "main-0 exited with code 3; no restarts left", false, nullptr),
            "main-0 exited with code 3; no restarts left");
  // (Each suffix the lifecycle wrote stays, however many: LifecycleSuffix.)
  EXPECT_EQ(ReasonFor(snap, "w-2 did not start: cannot start '/home/alice/x': Permission denied; restarted alone", false,
                      nullptr),
            "w-2 did not start (its owner's log says why); restarted alone");
  EXPECT_EQ(LifecycleSuffix("w-2 did not start: x (did not stop within its grace period); no restarts left"),
            " (did not stop within its grace period); no restarts left");
  EXPECT_EQ(LifecycleSuffix("main-0 exited with code 3"), "");
}

}  // namespace
}  // namespace rota::server
