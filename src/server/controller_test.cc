#include "server/controller.h"

#include <atomic>
#include <gtest/gtest.h>

#include <cmath>
#include <sqlite3.h>
#include <unistd.h>

#include <bit>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>

#include "core/test_util.h"
#include "store/memory_store.h"
#include "store/sqlite_store.h"
#include "server/recovery.h"
#include "server/services.h"
#include "server/views.h"

namespace rota::server {
namespace {

ClusterConfig TwoNodes() {
  ClusterConfig c;
  c.node_groups.push_back({.name = "n", .count = 2, .gpus = 8, .gpu_model = "H100", .cpu = 64000, .memory = 512 * 1024});
  c.queues.push_back({.name = "team", .children = {{.name = "a"}, {.name = "b", .users = {"bob"}}}});
  return c;
}

JobSpec Job(const std::string& name, int replicas, int gpus, const std::string& queue = "team/a") {
  JobSpec s;
  s.name = name;
  s.queue = queue;
  s.tasks.push_back({.name = "w", .replicas = replicas, .gpus = gpus, .command = {"true"}});
  return s;
}

const Principal kAlice{"alice", Role::kUser, ""};
const Principal kBob{"bob", Role::kUser, ""};
const Principal kAdmin{"admin", Role::kAdmin, ""};

class ControllerTest : public ::testing::Test {
 protected:
  ManualClock clock{1'000'000};
  std::unique_ptr<Controller> Make(std::unique_ptr<Store> store) {
    ControllerOptions o{.config = TwoNodes(), .clock = &clock};
    auto c = std::make_unique<Controller>(o, std::move(store));
    EXPECT_TRUE(c->Start().ok());
    return c;
  }
  // A gang of two 8-GPU replicas, one on each node (both agents registered),
  // restarted on failure, running: its id (none if it is not) and which
  // replica is on n-0 and which on n-1.
  struct Pair {
    std::optional<JobId> id;
    uint32_t on0 = 0, on1 = 0;
  };
  Pair RunPair(Controller& c, const Principal& agent1) {
    EXPECT_TRUE(c.RegisterNode(agent0, c.snapshot().FindNode("n-0")->spec, true, "").ok());
    EXPECT_TRUE(c.RegisterNode(agent1, c.snapshot().FindNode("n-1")->spec, true, "").ok());
    JobSpec spec = Job("pair", 2, 8);
    spec.restart = {RestartPolicy::kOnFailure, 3};
    auto id = c.Submit(kAlice, spec);
    if (!id.ok()) return {};
    c.ScheduleNow();
    const JobRecord* job = c.snapshot().FindJob(*id);
    if (job == nullptr || job->state != JobState::kRunning) return {};
    const uint32_t on0 = job->placement[0].node.value() == 0 ? job->placement[0].replica : job->placement[1].replica;
    return {*id, on0, 1 - on0};
  }
  // Started on SQLite at `db`, forgetting jobs an hour after they end.
  std::unique_ptr<Controller> MakeForgetting(const std::string& db) {
    auto c = std::make_unique<Controller>(
        ControllerOptions{.config = TwoNodes(), .clock = &clock, .job_retention = 3600 * kMicrosPerSecond},
        std::move(SqliteStore::Open(db)).value());
    EXPECT_TRUE(c->Start().ok());
    return c;
  }
  // Started on SQLite at `db`, with no pass of the scheduling loop but
  // ScheduleNow's (one on its own, on real time, would find nodes silent
  // and give their gangs up first: see ATakeOverOfANodeRequeuesItsGangs).
  std::unique_ptr<Controller> MakeStill(const std::string& db) {
    auto c = std::make_unique<Controller>(
        ControllerOptions{.config = TwoNodes(), .clock = &clock, .schedule_interval = 3600 * kMicrosPerSecond,
                          .cycle_on_change = false},
        std::move(SqliteStore::Open(db)).value());
    EXPECT_TRUE(c->Start().ok());
    return c;
  }
  // Two nodes of 80 GiB GPUs (what right-sizing compares peaks with), n-0's
  // agent registered.
  const Principal agent0{"n-0", Role::kAgent, "n-0"};
  std::unique_ptr<Controller> MakeMeasured(std::unique_ptr<Store> store) {
    ClusterConfig config = TwoNodes();
    for (auto& g : config.node_groups) g.gpu_memory = 80 * 1024;
    auto c = std::make_unique<Controller>(ControllerOptions{.config = config, .clock = &clock}, std::move(store));
    EXPECT_TRUE(c->Start().ok());
    EXPECT_TRUE(c->RegisterNode(agent0, c->snapshot().FindNode("n-0")->spec, true, "").ok());
    return c;
  }
  // Submits one 1-GPU, 2-CPU job on n-0 per case (its `name`), schedules
  // them, and notes each one's `id` and `gpu`.
  template <typename Cases>
  ::testing::AssertionResult RunOnN0(Controller& c, Cases& cases) {
    for (auto& k : cases) {
      JobSpec spec = Job(k.name, 1, 1);
      spec.tasks[0].cpu = 2000;
      spec.node_selector = {{"hostname", "n-0"}};
      auto id = c.Submit(kAlice, spec);
      if (!id.ok()) return ::testing::AssertionFailure() << k.name << ": " << id.status().ToString();
      k.id = *id;
    }
    c.ScheduleNow();
    for (auto& k : cases) k.gpu = std::countr_zero(c.snapshot().FindJob(k.id)->placement[0].gpu_mask);
    return ::testing::AssertionSuccess();
  }
};

TEST_F(ControllerTest, SubmitSchedulesAndBindsAGang) {
  auto c = Make(std::make_unique<MemoryStore>());
  auto id = c->Submit(kAlice, Job("train", 2, 8));
  ASSERT_TRUE(id.ok()) << id.status().ToString();
  c->ScheduleNow();
  const JobRecord* job = c->snapshot().FindJob(*id);
  ASSERT_NE(job, nullptr);
  EXPECT_EQ(job->state, JobState::kRunning);
  EXPECT_EQ(job->placement.size(), 2u);
  EXPECT_EQ(job->user, "alice");
}

TEST_F(ControllerTest, RefusesBadSubmissionsAndChangesNothing) {
  auto c = Make(std::make_unique<MemoryStore>());
  EXPECT_EQ(c->Submit(kAlice, Job("x", 1, 16)).status().code(), StatusCode::kOutOfRange);  // 16 > 8 per node
  EXPECT_EQ(c->Submit(kAlice, Job("x", 1, 1, "nope")).status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(c->Submit(kAlice, Job("x", 1, 1, "team/b")).status().code(), StatusCode::kPermissionDenied);
  EXPECT_TRUE(c->Submit(kBob, Job("x", 1, 1, "team/b")).ok());
  EXPECT_EQ(c->Submit({"n-0", Role::kAgent, "n-0"}, Job("x", 1, 1)).status().code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(c->snapshot().jobs().size(), 1u);
}

// A priority goes ahead of every queue's fair share and may evict: a user
// may not name a class kept from them (the built-in critical is the
// admins'), nor a number above the highest class open to them.
TEST_F(ControllerTest, AUserAsksOnlyForThePrioritiesOpenToThem) {
  auto c = Make(std::make_unique<MemoryStore>());
  auto with = [](std::string_view priority) {
    JobSpec spec = Job("x", 1, 1);
    EXPECT_TRUE(SetPriority(priority, &spec).ok());
    return spec;
  };
  EXPECT_TRUE(c->Submit(kAlice, with("high")).ok());
  EXPECT_TRUE(c->Submit(kAlice, with("2000")).ok());  // (inference, the services' class)
  auto critical = c->Submit(kAlice, with("critical"));
  EXPECT_EQ(critical.status().code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(critical.status().message(), "priority: class 'critical' is open only to admins (priority_classes[].users)");
  auto number = c->Submit(kAlice, with("1000000000"));
  EXPECT_EQ(number.status().code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(number.status().message(),
            "priority: 1000000000 is above the highest priority class open to user 'alice' (inference, 2000)");
  EXPECT_EQ(c->snapshot().jobs().size(), 2u);  // (refused: nothing changed)
  EXPECT_TRUE(c->Submit(kAdmin, with("critical")).ok());
  EXPECT_TRUE(c->Submit(kAdmin, with("1000000000")).ok());

  // A config's own classes: open to whom it says.
  ClusterConfig config = TwoNodes();
  config.priority_classes = {{"normal", 500}, {"urgent", 5000, false, true, {"bob"}}};
  auto own = std::make_unique<Controller>(ControllerOptions{.config = config, .clock = &clock}, std::make_unique<MemoryStore>());
  ASSERT_TRUE(own->Start().ok());
  EXPECT_TRUE(own->Submit(kBob, with("urgent")).ok());
  EXPECT_TRUE(own->Submit(kBob, with("5000")).ok());
  EXPECT_EQ(own->Submit(kAlice, with("urgent")).status().message(),
            "priority: class 'urgent' is open only to admins and bob (priority_classes[].users)");
  EXPECT_EQ(own->Submit(kAlice, with("501")).status().message(),
            "priority: 501 is above the highest priority class open to user 'alice' (normal, 500)");
  // The built-in inference (2000), which this config does not list: a
  // service's default, but not a way past the highest class for a batch job.
  EXPECT_EQ(own->Submit(kAlice, with("inference")).status().message(),
            "priority: 2000 is above the highest priority class open to user 'alice' (normal, 500)");
}

// A queue's max_priority holds every user's job below it (a team kept from
// `high` on its queue, whatever classes are open to its users); the lowest
// on the path holds; admins may ask for any.
TEST_F(ControllerTest, AQueueHoldsItsJobsToItsMaxPriority) {
  ClusterConfig config = TwoNodes();
  QueueConfig research{.name = "research"}, vision{.name = "vision"}, prod{.name = "prod"};
  research.max_priority = "normal, 500";
  research.max_priority_value = 500;
  vision.max_priority = "800";
  vision.max_priority_value = 800;
  research.children = {vision};
  config.queues = {research, prod};
  auto c = std::make_unique<Controller>(ControllerOptions{.config = config, .clock = &clock}, std::make_unique<MemoryStore>());
  ASSERT_TRUE(c->Start().ok());
  auto in = [](const std::string& queue, std::string_view priority) {
    JobSpec spec = Job("x", 1, 1);
    spec.queue = queue;
    EXPECT_TRUE(SetPriority(priority, &spec).ok());
    return spec;
  };
  EXPECT_TRUE(c->Submit(kAlice, in("research/vision", "normal")).ok());
  EXPECT_TRUE(c->Submit(kAlice, in("research/vision", "500")).ok());
  EXPECT_TRUE(c->Submit(kAlice, in("research/vision", "low")).ok());
  auto high = c->Submit(kAlice, in("research/vision", "high"));
  EXPECT_EQ(high.status().code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(high.status().message(), "priority: high (1000) is above queue research's max_priority (normal, 500) for 'research/vision'");
  EXPECT_EQ(c->Submit(kBob, in("research/vision", "501")).status().message(),
            "priority: 501 is above queue research's max_priority (normal, 500) for 'research/vision'");
  EXPECT_EQ(c->snapshot().jobs().size(), 3u);  // (refused: nothing changed)
  EXPECT_TRUE(c->Submit(kAlice, in("prod", "high")).ok());
  EXPECT_TRUE(c->Submit(kAdmin, in("research/vision", "high")).ok());
  // An array too.
  EXPECT_EQ(c->SubmitArray(kAlice, in("research/vision", "high"), 10).status().code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(c->snapshot().jobs().size(), 5u);
}

TEST_F(ControllerTest, UsersCancelOnlyTheirOwnJobs) {
  auto c = Make(std::make_unique<MemoryStore>());
  auto id = c->Submit(kAlice, Job("mine", 1, 1));
  ASSERT_TRUE(id.ok());
  EXPECT_EQ(c->Cancel(kBob, *id).code(), StatusCode::kNotFound);
  EXPECT_TRUE(c->Cancel(kAlice, *id).ok());
  EXPECT_EQ(c->snapshot().FindJob(*id)->state, JobState::kCancelled);
  EXPECT_EQ(c->Cancel(kAdmin, *id).code(), StatusCode::kFailedPrecondition);
}

// Two agents of one node would both run its tasks (a second one started by
// mistake, a cloned machine): the one that registered and reports keeps
// the node; another is refused, and takes it over only once the first has
// been silent for the node timeout; the one it replaced is refused then.
// The same agent restarted (its instance kept in its state directory)
// registers again at once; an older agent (no instance) is not checked.
TEST_F(ControllerTest, ASecondAgentOfANodeIsRefusedWhileTheFirstReports) {
  auto c = Make(std::make_unique<MemoryStore>());
  const NodeSpec spec = c->snapshot().FindNode("n-0")->spec;
  ASSERT_TRUE(c->RegisterNode(agent0, spec, true, "", false, "aaaa").ok());
  ASSERT_TRUE(c->Heartbeat(agent0, {.node = "n-0", .instance = "aaaa"}).ok());
  const Status second = c->RegisterNode(agent0, spec, true, "", false, "bbbb");
  EXPECT_EQ(second.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(second.message().find("node 'n-0' has another agent (instance aaaa, last report"), std::string::npos)
      << second.message();
  EXPECT_EQ(c->Heartbeat(agent0, {.node = "n-0", .instance = "bbbb"}).status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(c->CheckAgentInstance("n-0", "bbbb").code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(c->RegisterNode(agent0, spec, true, "", false, "aaaa").ok()) << "the same agent, restarted";
  EXPECT_TRUE(c->RegisterNode(agent0, spec, true, "", false, "").ok()) << "(an older agent)";
  EXPECT_TRUE(c->Heartbeat(agent0, {.node = "n-0", .instance = "aaaa"}).ok());
  // Silent past the node timeout, but not yet past its tasks' fence and the
  // margin (30 s + 2 s): they may still run, so not yet.
  clock.Advance(31 * kMicrosPerSecond);
  EXPECT_EQ(c->RegisterNode(agent0, spec, true, "", false, "bbbb").code(), StatusCode::kFailedPrecondition);
  // Past them: the other takes the node over, and the first is refused.
  clock.Advance(2 * kMicrosPerSecond);
  EXPECT_TRUE(c->RegisterNode(agent0, spec, true, "", false, "bbbb").ok());
  EXPECT_EQ(c->AgentInstanceOf("n-0"), "bbbb");
  const auto replaced = c->Heartbeat(agent0, {.node = "n-0", .instance = "aaaa"});
  EXPECT_EQ(replaced.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(replaced.status().message().find("this one was replaced"), std::string::npos) << replaced.status().message();
  EXPECT_EQ(c->RegisterNode(agent0, spec, true, "", false, "aaaa").code(), StatusCode::kFailedPrecondition);
  EXPECT_TRUE(c->Heartbeat(agent0, {.node = "n-0", .instance = "bbbb"}).ok());
}

// A new agent that takes a node over (the old one silent past its tasks'
// fence) gives up the node's gangs in its registration, as a lost node's:
// before, one that registered before the next node check was handed the
// old attempt's rank and started it again while the gang's other ranks
// went on.
TEST_F(ControllerTest, ATakeOverOfANodeRequeuesItsGangs) {
  // (No pass of the scheduling loop but ScheduleNow's: one on its own, on
  // real time, would find n-0 silent and give its gang up first.)
  auto c = std::make_unique<Controller>(ControllerOptions{.config = TwoNodes(), .clock = &clock,
                                                          .schedule_interval = 3600 * kMicrosPerSecond,
                                                          .cycle_on_change = false},
                                        std::make_unique<MemoryStore>());
  ASSERT_TRUE(c->Start().ok());
  const Principal agent1{"n-1", Role::kAgent, "n-1"};
  const NodeSpec spec0 = c->snapshot().FindNode("n-0")->spec;
  ASSERT_TRUE(c->RegisterNode(agent0, spec0, true, "", false, "aaaa").ok());
  const Pair pair = RunPair(*c, agent1);
  ASSERT_TRUE(pair.id.has_value());
  ASSERT_TRUE(c->Heartbeat(agent0, {.node = "n-0", .tasks = {{*pair.id, 0, pair.on0, 0}}, .instance = "aaaa"}).ok());
  clock.Advance(33 * kMicrosPerSecond);
  ASSERT_TRUE(c->Heartbeat(agent1, {.node = "n-1", .tasks = {{*pair.id, 0, pair.on1, 0}}}).ok());
  // (No node check runs between: the registration alone.)
  ASSERT_TRUE(c->RegisterNode(agent0, spec0, true, "", false, "bbbb").ok());
  const JobRecord* job = c->snapshot().FindJob(*pair.id);
  EXPECT_NE(job->state, JobState::kRunning) << "the gang went on with n-0's rank handed to the new agent";
  EXPECT_NE(job->last_requeue_reason.find("taken over by another agent (instance bbbb)"), std::string::npos)
      << job->last_requeue_reason;
  c->Stop();
}

// A server started again (or a standby that took the lead) still knows
// which agent held each node: the journal names it. Another instance is
// refused until the first has been silent since the start for as long as
// its tasks take to fence themselves; before, it was taken at once, handed
// the running gang's rank and started it beside the old one.
TEST_F(ControllerTest, AfterARestartANodeIsStillItsAgentsUntilItsTasksFenced) {
  const testing::TempDir tmp("rota-ctl");
  const std::string& dir = tmp.path();
  const Principal agent1{"n-1", Role::kAgent, "n-1"};
  auto make = [&] { return MakeStill(dir + "/rota.db"); };
  Pair pair;
  {
    auto c = make();
    ASSERT_TRUE(c->RegisterNode(agent0, c->snapshot().FindNode("n-0")->spec, true, "", false, "aaaa").ok());
    pair = RunPair(*c, agent1);
    ASSERT_TRUE(pair.id.has_value());
    ASSERT_TRUE(c->Heartbeat(agent0, {.node = "n-0", .tasks = {{*pair.id, 0, pair.on0, 0}}, .instance = "aaaa"}).ok());
    c->Stop();
  }
  const NodeSpec spec0 = [&] {
    auto c = make();
    EXPECT_EQ(c->snapshot().FindNode("n-0")->agent, "aaaa");
    const NodeSpec spec = c->snapshot().FindNode("n-0")->spec;
    const Status other = c->RegisterNode(agent0, spec, true, "", false, "bbbb");
    EXPECT_EQ(other.code(), StatusCode::kFailedPrecondition);
    EXPECT_NE(other.message().find("has another agent (instance aaaa, not heard since this server started"),
              std::string::npos)
        << other.message();
    // Its reports are told to register, not that it was replaced.
    EXPECT_EQ(c->Heartbeat(agent0, {.node = "n-0", .instance = "bbbb"}).status().code(), StatusCode::kNotFound);
    // The agent that held it comes back: it keeps the node and its rank.
    EXPECT_TRUE(c->RegisterNode(agent0, spec, true, "", false, "aaaa").ok());
    EXPECT_TRUE(c->Heartbeat(agent0, {.node = "n-0", .tasks = {{*pair.id, 0, pair.on0, 0}}, .instance = "aaaa"}).ok());
    EXPECT_EQ(c->snapshot().FindJob(*pair.id)->state, JobState::kRunning);
    c->Stop();
    return spec;
  }();
  // Started again, and the agent that held n-0 never comes back: another
  // takes it over once the first's tasks have fenced themselves, and the
  // gang is given up, not handed to it.
  auto c = make();
  ASSERT_TRUE(c->RegisterNode(agent1, c->snapshot().FindNode("n-1")->spec, true, "").ok());
  clock.Advance(31 * kMicrosPerSecond);
  ASSERT_TRUE(c->Heartbeat(agent1, {.node = "n-1", .tasks = {{*pair.id, 0, pair.on1, 0}}}).ok());
  EXPECT_EQ(c->RegisterNode(agent0, spec0, true, "", false, "bbbb").code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(c->snapshot().FindJob(*pair.id)->state, JobState::kRunning);
  clock.Advance(2 * kMicrosPerSecond);
  ASSERT_TRUE(c->Heartbeat(agent1, {.node = "n-1", .tasks = {{*pair.id, 0, pair.on1, 0}}}).ok());
  ASSERT_TRUE(c->RegisterNode(agent0, spec0, true, "", false, "bbbb").ok());
  const JobRecord* job = c->snapshot().FindJob(*pair.id);
  EXPECT_NE(job->state, JobState::kRunning) << "n-0's rank was handed to the new agent";
  EXPECT_NE(job->last_requeue_reason.find("taken over by another agent (instance bbbb)"), std::string::npos)
      << job->last_requeue_reason;
  EXPECT_EQ(c->snapshot().FindNode("n-0")->agent, "bbbb");
  EXPECT_EQ(c->Heartbeat(agent0, {.node = "n-0", .instance = "aaaa"}).status().code(), StatusCode::kFailedPrecondition);
  c->Stop();
}

// The address an agent gave (its peers reach it there) is journaled with
// its instance: after a restart, a gang's host list names it by its address
// before it registers again, as the ranks that started before named it.
// Before, ranks told their tasks after a restart got its node name as the
// gang's master address while the others had its address.
TEST_F(ControllerTest, AGangsHostsKeepTheirAddressesAcrossARestart) {
  const testing::TempDir tmp("rota-ctl");
  const std::string& dir = tmp.path();
  const Principal agent1{"n-1", Role::kAgent, "n-1"};
  auto make = [&] { return MakeStill(dir + "/rota.db"); };
  JobId id;
  std::vector<std::string> hosts;
  {
    auto c = make();
    ASSERT_TRUE(c->RegisterNode(agent0, c->snapshot().FindNode("n-0")->spec, true, "10.0.0.5", false, "aaaa").ok());
    ASSERT_TRUE(c->RegisterNode(agent1, c->snapshot().FindNode("n-1")->spec, true, "10.0.0.6", false, "cccc").ok());
    id = *c->Submit(kAlice, Job("pair", 2, 8));
    c->ScheduleNow();
    auto tasks = c->Heartbeat(agent1, {.node = "n-1", .instance = "cccc"});
    ASSERT_TRUE(tasks.ok() && tasks->size() == 1u) << tasks.status().ToString();
    hosts = (*tasks)[0].hosts;
    ASSERT_EQ(hosts.size(), 2u);
    c->Stop();
  }
  auto c = make();
  EXPECT_EQ(c->snapshot().FindNode("n-0")->agent_address, "10.0.0.5");
  // n-1's agent comes back first; n-0's has not registered again.
  ASSERT_TRUE(c->RegisterNode(agent1, c->snapshot().FindNode("n-1")->spec, true, "10.0.0.6", false, "cccc").ok());
  auto tasks = c->Heartbeat(agent1, {.node = "n-1", .instance = "cccc"});
  ASSERT_TRUE(tasks.ok() && tasks->size() == 1u) << tasks.status().ToString();
  EXPECT_EQ((*tasks)[0].hosts, hosts);
  EXPECT_EQ((*tasks)[0].master_addr, hosts[0]);
  EXPECT_EQ(c->snapshot().FindJob(id)->state, JobState::kRunning);
  // An agent that comes back at another address is journaled there.
  ASSERT_TRUE(c->RegisterNode(agent0, c->snapshot().FindNode("n-0")->spec, true, "10.0.0.9", false, "aaaa").ok());
  EXPECT_EQ(c->snapshot().FindNode("n-0")->agent_address, "10.0.0.9");
  c->Stop();
}

// A gang's rendezvous port is keyed with the key the store keeps: its
// replicas share it, another key gives another port for the same job and
// attempt, and nothing a user sees (the job id, the attempt) is enough to
// compute it (before: 20000 + (id x 7 + attempt) mod 20000). A gang attempt
// that began before the key was made (by a server of an older version)
// keeps that old port, which its running ranks meet at.
TEST_F(ControllerTest, AGangsRendezvousPortIsKeyedWithTheStoresKey) {
  // A two-replica gang bound on n-0 of a controller on `store`: its id and
  // the two replicas' ports.
  struct Bound {
    JobId id;
    TimePoint began = 0;
    int32_t ports[2] = {0, 0};
  };
  auto bind_gang = [&](std::unique_ptr<MemoryStore> store, Bound* out) {
    auto c = Make(std::move(store));
    ASSERT_TRUE(c->RegisterNode(agent0, c->snapshot().FindNode("n-0")->spec, true, "127.0.0.1").ok());
    auto id = c->Submit(kAlice, Job("pair", 2, 4));
    ASSERT_TRUE(id.ok());
    c->ScheduleNow();
    auto tasks = c->Heartbeat(agent0, {"n-0", {}, {}});
    ASSERT_TRUE(tasks.ok()) << tasks.status().ToString();
    ASSERT_EQ(tasks->size(), 2u);
    *out = {*id, c->snapshot().FindJob(*id)->started_at, {(*tasks)[0].master_port, (*tasks)[1].master_port}};
  };
  auto store = std::make_unique<MemoryStore>();
  const RendezvousKey key = *LoadRendezvousKey(*store, clock.Now());
  Bound gang;
  bind_gang(std::move(store), &gang);
  const JobId id = gang.id;
  const TimePoint began = gang.began;
  EXPECT_EQ(gang.ports[0], RendezvousPort(key, id, 0, began));
  EXPECT_EQ(gang.ports[1], gang.ports[0]);
  // The same job and attempt under other keys: spread over the range.
  std::set<int32_t> ports;
  for (uint64_t k = 1; k <= 64; ++k) {
    const int32_t p = RendezvousPort(RendezvousKey{{k, 0}, 0}, id, 0, began);
    EXPECT_GE(p, kRendezvousPorts.first);
    EXPECT_LE(p, kRendezvousPorts.second);
    ports.insert(p);
  }
  EXPECT_GE(ports.size(), 60u);
  EXPECT_NE(RendezvousPort(RendezvousKey{{1, 0}, 0}, id, 0, began), RendezvousPort(RendezvousKey{{1, 1}, 0}, id, 0, began));
  int moved = 0;  // (a new gang attempt, a new port: mostly)
  for (int a = 1; a <= 16; ++a) moved += RendezvousPort(key, id, a, began) != RendezvousPort(key, id, a - 1, began);
  EXPECT_GE(moved, 15);
  // Begun before the key was made: the old port.
  EXPECT_EQ(RendezvousPort(key, JobId(3), 2, key.since - 1), 20000 + (3 * 7 + 2));
  auto older = std::make_unique<MemoryStore>();
  ASSERT_TRUE(older->Keep("rendezvous_since", static_cast<uint64_t>(clock.Now() + 3600 * kMicrosPerSecond)).ok());
  Bound old_gang;
  bind_gang(std::move(older), &old_gang);
  EXPECT_EQ(old_gang.ports[0], 20000 + static_cast<int32_t>(old_gang.id.value() * 7 % 20000));
}

// A key first made by a server whose clock is behind the last leader's (an
// upgrade: the older leader made none) is dated after the gangs it
// recovers, which keep the port their ranks met at.
TEST_F(ControllerTest, AKeyMadeBehindTheLastLeadersClockLeavesItsGangsTheirPort) {
  const testing::TempDir tmp("rota-ctl");
  const std::string db = tmp.path() + "/rota.db";
  JobId id;
  {
    clock.Advance(3600 * kMicrosPerSecond);  // the older leader's clock, an hour ahead
    auto c = Make(std::move(SqliteStore::Open(db)).value());
    ASSERT_TRUE(c->RegisterNode(agent0, c->snapshot().FindNode("n-0")->spec, true, "").ok());
    auto submitted = c->Submit(kAlice, Job("pair", 2, 4));
    ASSERT_TRUE(submitted.ok());
    id = *submitted;
    c->ScheduleNow();
    ASSERT_EQ(c->snapshot().FindJob(id)->state, JobState::kRunning);
    c->Stop();
  }
  {
    // (What an older server leaves: no key.)
    sqlite3* handle = nullptr;
    ASSERT_EQ(sqlite3_open(db.c_str(), &handle), SQLITE_OK);
    EXPECT_EQ(sqlite3_exec(handle, "DELETE FROM meta WHERE key LIKE 'kept:%'", nullptr, nullptr, nullptr), SQLITE_OK);
    sqlite3_close(handle);
  }
  clock.Advance(-3600 * kMicrosPerSecond);
  auto c = Make(std::move(SqliteStore::Open(db)).value());
  ASSERT_TRUE(c->RegisterNode(agent0, c->snapshot().FindNode("n-0")->spec, true, "").ok());
  auto tasks = c->Heartbeat(agent0, {"n-0", {}, {}});
  ASSERT_TRUE(tasks.ok()) << tasks.status().ToString();
  ASSERT_EQ(tasks->size(), 2u);
  EXPECT_EQ((*tasks)[0].master_port, 20000 + static_cast<int32_t>(id.value() * 7 % 20000));
}

TEST_F(ControllerTest, AgentsGetTheirTasksAndReportExits) {
  auto c = Make(std::make_unique<MemoryStore>());
  NodeSpec spec = c->snapshot().FindNode("n-0")->spec;
  ASSERT_TRUE(c->RegisterNode(agent0, spec, true, "127.0.0.1").ok());
  EXPECT_EQ(c->RegisterNode(agent0, c->snapshot().FindNode("n-1")->spec, true, "").code(), StatusCode::kPermissionDenied);
  auto id = c->Submit(kAlice, Job("pair", 2, 4));
  ASSERT_TRUE(id.ok());
  c->ScheduleNow();
  auto tasks = c->Heartbeat(agent0, {"n-0", {{0, 50, 1000, 60, 300, true, ""}}, {}});
  ASSERT_TRUE(tasks.ok()) << tasks.status().ToString();
  ASSERT_EQ(tasks->size(), 2u);  // both replicas fit on n-0
  EXPECT_EQ((*tasks)[0].world_size, 2);
  EXPECT_EQ((*tasks)[1].rank, 1);
  EXPECT_EQ((*tasks)[1].local_rank, 1);
  EXPECT_EQ((*tasks)[0].master_addr, "127.0.0.1");
  EXPECT_EQ(c->Heartbeat(agent0, {"n-1", {}, {}}).status().code(), StatusCode::kPermissionDenied);
  // Reports for replicas this node does not run, or that do not exist, change nothing.
  ASSERT_TRUE(c->Heartbeat(agent0, {"n-0", {}, {{*id, 7, 0, 0, true, 1}, {*id, 0, 9, 0, true, 1}}}).ok());
  EXPECT_EQ(c->snapshot().FindJob(*id)->state, JobState::kRunning);
  // One replica exits 0: still running. The other exits 0: succeeded.
  ASSERT_TRUE(c->Heartbeat(agent0, {"n-0", {}, {{*id, 0, 0, 0, true, 0}}}).ok());
  EXPECT_EQ(c->snapshot().FindJob(*id)->state, JobState::kRunning);
  tasks = c->Heartbeat(agent0, {"n-0", {}, {{*id, 0, 1, 0, true, 0}}});
  ASSERT_TRUE(tasks.ok());
  EXPECT_TRUE(tasks->empty());
  EXPECT_EQ(c->snapshot().FindJob(*id)->state, JobState::kSucceeded);
  EXPECT_EQ(c->snapshot().FindNode("n-0")->allocated_mask, 0u);
}

TEST_F(ControllerTest, ALostNodesGangsAreRequeuedAndRunElsewhere) {
  auto c = Make(std::make_unique<MemoryStore>());
  const Principal agent1{"n-1", Role::kAgent, "n-1"};
  ASSERT_TRUE(c->RegisterNode(agent0, c->snapshot().FindNode("n-0")->spec, true, "").ok());
  ASSERT_TRUE(c->RegisterNode(agent1, c->snapshot().FindNode("n-1")->spec, true, "").ok());
  auto id = c->Submit(kAlice, Job("eight", 1, 8));
  ASSERT_TRUE(id.ok());
  c->ScheduleNow();
  const NodeId first = c->snapshot().FindJob(*id)->placement[0].node;
  const Principal& stays = first.value() == 0 ? agent1 : agent0;
  clock.Advance(31 * kMicrosPerSecond);  // past the 30 s node timeout: lost, but its tasks may still run
  ASSERT_TRUE(c->Heartbeat(stays, {stays.node, {}, {}}).ok());
  c->ScheduleNow();
  c->ScheduleNow();
  {
    // No replacement before the silent node's tasks have fenced themselves
    // (fence_after = the node timeout, plus kFenceMargin).
    Snapshot early = c->snapshot();
    EXPECT_TRUE(early.node(first).lost);
    EXPECT_EQ(early.FindJob(*id)->restarts, 0);
    EXPECT_EQ(early.FindJob(*id)->placement[0].node, first);
  }
  clock.Advance(2 * kMicrosPerSecond);  // past the fence deadline and its margin
  ASSERT_TRUE(c->Heartbeat(stays, {stays.node, {}, {}}).ok());
  c->ScheduleNow();  // notices the silent node, requeues; the next cycle places the gang
  c->ScheduleNow();
  Snapshot snap = c->snapshot();
  const JobRecord* job = snap.FindJob(*id);
  EXPECT_TRUE(snap.node(first).lost);
  EXPECT_EQ(job->restarts, 1);
  EXPECT_EQ(job->state, JobState::kRunning);
  EXPECT_NE(job->placement[0].node, first);
  EXPECT_NE(job->last_requeue_reason.find("lost"), std::string::npos) << job->last_requeue_reason;
}

// A rank never runs beside its own next attempt: a gang whose rank failed
// keeps its other rank's GPUs while that one stops, and is placed again only
// once the other's node has reported it stopped: its exit, or a full list of
// its tasks (as of an answer since the stop) that no longer holds it.
TEST_F(ControllerTest, AGangRestartsOnlyOnceItsOtherRanksHaveStopped) {
  auto c = Make(std::make_unique<MemoryStore>());
  const Principal agent1{"n-1", Role::kAgent, "n-1"};
  const Pair pair = RunPair(*c, agent1);
  ASSERT_TRUE(pair.id.has_value());
  const JobId* id = &*pair.id;
  const uint32_t on0 = pair.on0, on1 = pair.on1;
  const JobRecord* job = nullptr;
  uint64_t before = 0;
  ASSERT_TRUE(c->Heartbeat(agent1, {.node = "n-1", .tasks = {{*id, 0, on1, 0}}}, &before).ok());
  // Its rank on n-0 fails.
  ASSERT_TRUE(c->Heartbeat(agent0, {"n-0", {}, {{*id, 0, on0, 0, true, 1}}}).ok());
  c->ScheduleNow();
  job = c->snapshot().FindJob(*id);
  EXPECT_EQ(job->state, JobState::kPreempting);
  EXPECT_EQ(job->placement.size(), 2u);
  EXPECT_EQ(job->restarts, 0);
  // n-1's lists: one as of an answer from before the stop (the agent may yet
  // start the rank it missed), and one without a revision, prove nothing.
  uint64_t after = 0;
  auto answer = c->Heartbeat(agent1, {.node = "n-1", .revision = before}, &after);
  ASSERT_TRUE(answer.ok());
  EXPECT_TRUE(answer->empty());  // its rank is no longer wanted there
  EXPECT_GT(after, before);
  ASSERT_TRUE(c->Heartbeat(agent1, {.node = "n-1"}).ok());
  c->ScheduleNow();
  EXPECT_EQ(c->snapshot().FindJob(*id)->state, JobState::kPreempting);
  // One as of that answer, still running it: still stopping.
  ASSERT_TRUE(c->Heartbeat(agent1, {.node = "n-1", .tasks = {{*id, 0, on1, 0}}, .revision = after}).ok());
  c->ScheduleNow();
  EXPECT_EQ(c->snapshot().FindJob(*id)->state, JobState::kPreempting);
  // Then without it: it stopped, and the gang runs again, the failure counted.
  ASSERT_TRUE(c->Heartbeat(agent1, {.node = "n-1", .revision = after}).ok());
  c->ScheduleNow();
  job = c->snapshot().FindJob(*id);
  EXPECT_EQ(job->state, JobState::kRunning);
  EXPECT_EQ(job->restarts, 1);
  EXPECT_EQ(job->failed_restarts, 1);
  EXPECT_TRUE(job->preempted_at.empty());
}

// A stopping replica is "seen running" (which holds its stop open past the
// grace) only by the node it is placed on: another node's agent listing it,
// every 5 s, holds nothing, and the stop ends when it is overdue.
TEST_F(ControllerTest, OnlyAReplicasOwnNodeKeepsItsStopOpen) {
  auto c = Make(std::make_unique<MemoryStore>());
  const Principal agent1{"n-1", Role::kAgent, "n-1"};
  const Pair pair = RunPair(*c, agent1);
  ASSERT_TRUE(pair.id.has_value());
  const JobId* id = &*pair.id;
  const uint32_t on0 = pair.on0, on1 = pair.on1;
  ASSERT_TRUE(c->Heartbeat(agent0, {"n-0", {}, {{*id, 0, on0, 0, true, 1}}}).ok());  // its rank on n-0 fails
  c->ScheduleNow();
  ASSERT_EQ(c->snapshot().FindJob(*id)->state, JobState::kPreempting);
  // Its own node seeing it running for a minute (no full list) holds the stop.
  for (int s = 5; s <= 60; s += 5) {
    clock.Advance(5 * kMicrosPerSecond);
    ASSERT_TRUE(c->Heartbeat(agent1, {.node = "n-1", .tasks = {{*id, 0, on1, 0}}}).ok());
    ASSERT_TRUE(c->Heartbeat(agent0, {.node = "n-0"}).ok());
    c->ScheduleNow();
  }
  ASSERT_EQ(c->snapshot().FindJob(*id)->state, JobState::kPreempting);
  for (int s = 5; s <= 120 && c->snapshot().FindJob(*id)->restarts == 0; s += 5) {
    clock.Advance(5 * kMicrosPerSecond);
    ASSERT_TRUE(c->Heartbeat(agent1, {.node = "n-1"}).ok());  // alive; no full list
    ASSERT_TRUE(c->Heartbeat(agent0, {.node = "n-0", .tasks = {{*id, 0, on1, 0}}}).ok());  // n-1's rank, "running" on n-0
    c->ScheduleNow();
  }
  EXPECT_EQ(c->snapshot().FindJob(*id)->restarts, 1) << "n-0's listings of n-1's rank held the stop open";
}

// A clock whose wall time can be stepped (NTP) apart from its steady time.
class SteppedClock final : public Clock {
 public:
  TimePoint Now() const override { return wall; }
  TimePoint Steady() const override { return steady; }
  void Advance(Duration d) {
    wall += d;
    steady += d;
  }
  TimePoint wall = 1'000'000'000, steady = 5'000;
};

// The server's wall clock stepped forward an hour (NTP): its nodes, which
// reported a second ago, were declared lost, and their gangs requeued beside
// their running ranks. How long a node has been silent is steady time.
TEST_F(ControllerTest, AStepOfTheWallClockDeclaresNoNodeLost) {
  SteppedClock stepped;
  auto c = std::make_unique<Controller>(ControllerOptions{.config = TwoNodes(), .clock = &stepped},
                                        std::make_unique<MemoryStore>());
  ASSERT_TRUE(c->Start().ok());
  const Principal agent1{"n-1", Role::kAgent, "n-1"};
  const Pair pair = RunPair(*c, agent1);
  ASSERT_TRUE(pair.id.has_value());
  stepped.Advance(kMicrosPerSecond);
  ASSERT_TRUE(c->Heartbeat(agent0, {.node = "n-0", .tasks = {{*pair.id, 0, pair.on0, 0}}}).ok());
  ASSERT_TRUE(c->Heartbeat(agent1, {.node = "n-1", .tasks = {{*pair.id, 0, pair.on1, 0}}}).ok());
  stepped.wall += 3600 * kMicrosPerSecond;  // the step
  stepped.steady += kMicrosPerSecond;
  c->ScheduleNow();
  const Snapshot snap = c->snapshot();
  EXPECT_FALSE(snap.FindNode("n-0")->lost);
  EXPECT_FALSE(snap.FindNode("n-1")->lost);
  EXPECT_EQ(snap.FindJob(*pair.id)->state, JobState::kRunning);
  EXPECT_EQ(snap.FindJob(*pair.id)->restarts, 0);
  // And a node that is silent is lost on the steady clock, whatever the wall says.
  stepped.steady += 10 * 60 * kMicrosPerSecond;
  ASSERT_TRUE(c->Heartbeat(agent0, {.node = "n-0", .tasks = {{*pair.id, 0, pair.on0, 0}}}).ok());
  c->ScheduleNow();
  EXPECT_TRUE(c->snapshot().FindNode("n-1")->lost);
  EXPECT_FALSE(c->snapshot().FindNode("n-0")->lost);
  c->Stop();
}

// A server restarted while a gang stops: the gang goes on stopping, and the
// first full list of its other node's tasks (as of an answer of the new
// server) that misses the rank ends the stop, long before the grace would.
TEST_F(ControllerTest, AGangStoppingThroughAServerRestartRestartsOnItsNodesList) {
  const testing::TempDir tmp("rota-ctl");
  const std::string& dir = tmp.path();
  const Principal agent1{"n-1", Role::kAgent, "n-1"};
  JobId id;
  uint32_t on1 = 0;
  {
    auto c = Make(std::move(SqliteStore::Open(dir + "/rota.db")).value());
    ASSERT_TRUE(c->RegisterNode(agent0, c->snapshot().FindNode("n-0")->spec, true, "").ok());
    ASSERT_TRUE(c->RegisterNode(agent1, c->snapshot().FindNode("n-1")->spec, true, "").ok());
    JobSpec spec = Job("pair", 2, 8);
    spec.checkpoint.grace = 600 * kMicrosPerSecond;
    auto submitted = c->Submit(kAlice, spec);
    ASSERT_TRUE(submitted.ok());
    id = *submitted;
    c->ScheduleNow();
    const JobRecord* job = c->snapshot().FindJob(id);
    ASSERT_EQ(job->state, JobState::kRunning);
    on1 = job->placement[0].node.value() == 1 ? job->placement[0].replica : job->placement[1].replica;
    ASSERT_TRUE(c->Requeue(kAlice, id).ok());
    ASSERT_EQ(c->snapshot().FindJob(id)->state, JobState::kPreempting);
    // n-0's rank stops; n-1's is still saving when the server stops.
    ASSERT_TRUE(c->Heartbeat(agent0, {"n-0", {}, {{id, 0, 1 - on1, 0, true, 143}}}).ok());
    c->Stop();
  }
  auto c = Make(std::move(SqliteStore::Open(dir + "/rota.db")).value());
  EXPECT_EQ(c->snapshot().FindJob(id)->state, JobState::kPreempting);
  ASSERT_TRUE(c->RegisterNode(agent0, c->snapshot().FindNode("n-0")->spec, true, "").ok());
  ASSERT_TRUE(c->RegisterNode(agent1, c->snapshot().FindNode("n-1")->spec, true, "").ok());
  uint64_t revision = 0;
  ASSERT_TRUE(c->Heartbeat(agent1, {.node = "n-1", .tasks = {{id, 0, on1, 0}}}, &revision).ok());
  ASSERT_TRUE(c->Heartbeat(agent1, {.node = "n-1", .tasks = {{id, 0, on1, 0}}, .revision = revision}).ok());
  EXPECT_EQ(c->snapshot().FindJob(id)->state, JobState::kPreempting);  // still saving
  // n-0 lists nothing: its rank is gone (its exit went to the server before).
  ASSERT_TRUE(c->Heartbeat(agent0, {.node = "n-0", .revision = revision}).ok());
  EXPECT_EQ(c->snapshot().FindJob(id)->state, JobState::kPreempting);
  ASSERT_TRUE(c->Heartbeat(agent1, {.node = "n-1", .revision = revision}).ok());
  c->ScheduleNow();
  const JobRecord* job = c->snapshot().FindJob(id);
  EXPECT_EQ(job->state, JobState::kRunning);
  EXPECT_EQ(job->restarts, 1);
  EXPECT_EQ(job->failed_restarts, 0);
  c->Stop();
}

// A job's tasks run their checkpoint grace after a stop signal, and a
// task that ignores the signal keeps its GPUs all that time, though a
// cancelled or failed job's GPUs are free on the server at once: the grace
// a job may ask is the admin's limit. A job stored before the limit was
// lowered gets the limit, on the node and in its stop's wait.
TEST_F(ControllerTest, ACheckpointGraceIsAtMostTheLimit) {
  const testing::TempDir tmp("rota-ctl");
  const std::string& dir = tmp.path();
  ClusterConfig config = TwoNodes();
  EXPECT_EQ(config.limits.max_checkpoint_grace, 15 * 60 * kMicrosPerSecond);  // (the default)
  JobSpec service = Job("svc", 1, 1);
  service.kind = JobKind::kService;
  service.priority_class = "inference";
  service.service.min_replicas = service.service.max_replicas = service.elastic_min_replicas = 1;
  service.service.port = 8000;
  service.checkpoint.grace = 15 * 60 * kMicrosPerSecond;
  JobId id;
  {
    auto c = std::make_unique<Controller>(ControllerOptions{.config = config, .clock = &clock},
                                          std::move(SqliteStore::Open(dir + "/rota.db")).value());
    ASSERT_TRUE(c->Start().ok());
    JobSpec spec = Job("saver", 1, 1);
    spec.checkpoint.grace = 16 * 60 * kMicrosPerSecond;
    auto refused = c->Submit(kAlice, spec);
    ASSERT_FALSE(refused.ok());
    EXPECT_EQ(refused.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(refused.status().message().find("checkpoint.grace: 16m is past the limit 15m (limits.max_checkpoint_grace)"),
              std::string::npos)
        << refused.status().ToString();
    EXPECT_TRUE(c->snapshot().live_jobs().empty());
    spec.checkpoint.grace = 15 * 60 * kMicrosPerSecond;
    auto submitted = c->Submit(kAlice, spec);
    ASSERT_TRUE(submitted.ok()) << submitted.status().ToString();
    id = *submitted;
    ASSERT_TRUE(c->Submit(kAlice, service).ok());
    c->Stop();
  }
  config.limits.max_checkpoint_grace = 2 * 60 * kMicrosPerSecond;
  auto c = std::make_unique<Controller>(ControllerOptions{.config = config, .clock = &clock},
                                        std::move(SqliteStore::Open(dir + "/rota.db")).value());
  ASSERT_TRUE(c->Start().ok());
  // rota apply of the live service keeps the grace it was admitted with (as
  // its priority); a new, still longer one is refused.
  service.tasks[0].env["V"] = "2";
  const auto kept = c->UpdateService(kAlice, service);
  EXPECT_TRUE(kept.ok()) << kept.status().ToString();
  service.checkpoint.grace = 20 * 60 * kMicrosPerSecond;
  EXPECT_EQ(c->UpdateService(kAlice, service).status().code(), StatusCode::kInvalidArgument);
  ASSERT_TRUE(c->RegisterNode(agent0, c->snapshot().FindNode("n-0")->spec, true, "").ok());
  ASSERT_TRUE(c->RegisterNode(Principal{"n-1", Role::kAgent, "n-1"}, c->snapshot().FindNode("n-1")->spec, true, "").ok());
  c->ScheduleNow();
  const JobRecord* job = c->snapshot().FindJob(id);
  ASSERT_EQ(job->state, JobState::kRunning);
  const std::string node = c->snapshot().node(job->placement[0].node).spec.name;
  auto tasks = c->NodeTasks(node);
  ASSERT_TRUE(tasks.ok());
  int found = 0;
  for (const TaskAssignment& a : *tasks) {
    if (a.job != id) continue;
    ++found;
    EXPECT_EQ(a.checkpoint_grace, 2 * 60 * kMicrosPerSecond);
  }
  EXPECT_EQ(found, 1);
  c->Stop();
}

// A node whose agent comes back with other GPUs (fewer: one fell off the
// bus, an Xid 79; more; another model) is refused, saying what to do: the
// agent numbers the GPUs it finds from 0, so one missing in the middle
// would have the server's indices name other devices. What runs stays.
TEST_F(ControllerTest, ANodeWhoseGpusChangedIsRefusedSayingWhatToDo) {
  auto c = Make(std::make_unique<MemoryStore>());
  const NodeSpec spec = c->snapshot().FindNode("n-0")->spec;
  ASSERT_TRUE(c->RegisterNode(agent0, spec, true, "").ok());
  JobSpec whole = Job("whole", 1, 8);
  whole.node_selector = {{"hostname", "n-0"}};
  auto id = c->Submit(kAlice, whole);
  ASSERT_TRUE(id.ok());
  c->ScheduleNow();
  ASSERT_EQ(c->snapshot().FindJob(*id)->state, JobState::kRunning);
  for (auto change : std::vector<std::function<void(NodeSpec&)>>{
           [](NodeSpec& s) { s.gpus = 7; }, [](NodeSpec& s) { s.gpus = 9; }, [](NodeSpec& s) { s.gpu_model = "B200"; }}) {
    NodeSpec other = spec;
    change(other);
    const Status refused = c->RegisterNode(agent0, other, true, "");
    EXPECT_EQ(refused.code(), StatusCode::kFailedPrecondition);
    EXPECT_NE(refused.message().find("drain it (rota node drain n-0) and run its agent with another --name"),
              std::string::npos)
        << refused.message();
  }
  EXPECT_EQ(c->snapshot().FindNode("n-0")->spec.gpus, 8);
  EXPECT_EQ(c->snapshot().FindNode("n-0")->healthy_mask, 0xFFu);
  EXPECT_EQ(c->snapshot().FindJob(*id)->state, JobState::kRunning);
  EXPECT_TRUE(c->RegisterNode(agent0, spec, true, "").ok());
}

JobSpec Service(const std::string& name, int32_t min, int32_t max) {
  JobSpec s = Job(name, max, 4);
  s.kind = JobKind::kService;
  s.priority_class = "inference";
  s.service.min_replicas = min;
  s.service.max_replicas = max;
  s.service.port = 8000;
  s.elastic_min_replicas = min;
  return s;
}

// A rolling update's extra replica goes once every replica is on the new
// spec, also where the server stopped (or a full disk refused the scale
// back) between the last replacement and it: the next server's first tick
// finds the extra asked for with no update under way, and scales back.
TEST_F(ControllerTest, ARollingUpdatesExtraReplicaGoesAfterARestartToo) {
  auto c = Make(std::make_unique<MemoryStore>());
  auto id = c->Submit(kAlice, Service("svc", 1, 3));
  ASSERT_TRUE(id.ok()) << id.status().ToString();
  c->ScheduleNow();
  const int32_t base = c->snapshot().FindJob(*id)->DesiredReplicas();
  ASSERT_LT(base, 3);
  ASSERT_TRUE(c->ScaleService(*id, base + 1, "rolling update: one replica over while replicas are replaced").ok());
  ServiceManager services(c.get(), nullptr);  // (the next server's: no update of its own under way)
  services.Tick();
  const JobRecord* job = c->snapshot().FindJob(*id);
  EXPECT_EQ(job->DesiredReplicas(), base);
  EXPECT_EQ(job->last_scale_reason, "rolling update done");
}

// One tenant cannot take the node port space: the ports its live services
// claim (port + replica, kept from every other service) are capped per user,
// on submit and on an apply that grows a service; admins are not.
TEST_F(ControllerTest, AUsersServicesClaimAtMostTheirShareOfPorts) {
  ControllerOptions o{.config = TwoNodes(), .clock = &clock};
  o.config.limits.max_service_ports_per_user = 3;
  auto c = std::make_unique<Controller>(o, std::make_unique<MemoryStore>());
  ASSERT_TRUE(c->Start().ok());
  ASSERT_TRUE(c->Submit(kAlice, Service("a", 1, 2)).ok());
  JobSpec b = Service("b", 1, 2);
  b.service.port = 9000;
  const auto refused = c->Submit(kAlice, b);
  EXPECT_EQ(refused.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(refused.status().message().find("limits.max_service_ports_per_user: 3"), std::string::npos)
      << refused.status().message();
  // A dry run (POST /v1/jobs?dry_run=true) runs the same checks.
  EXPECT_EQ(c->CheckTenantLimits(kAlice, b, 1).code(), StatusCode::kResourceExhausted);
  JobSpec taken = Service("a", 1, 1);
  taken.service.port = 9300;
  EXPECT_EQ(c->CheckTenantLimits(kBob, taken, 1).code(), StatusCode::kAlreadyExists);
  EXPECT_EQ(c->CheckTenantLimits(kBob, Service("e", 1, 1), 1).code(), StatusCode::kAlreadyExists);  // port 8000 is a's
  EXPECT_TRUE(c->CheckTenantLimits(kBob, b, 1).ok());
  EXPECT_TRUE(c->Submit(kBob, b).ok()) << "another user's share is their own";
  JobSpec one = Service("c", 1, 1);
  one.service.port = 9100;
  ASSERT_TRUE(c->Submit(kAlice, one).ok());
  // Growing one past the share through rota apply is refused too.
  JobSpec grown = one;
  grown.service.max_replicas = 2;
  grown.tasks[0].replicas = 2;
  EXPECT_EQ(c->UpdateService(kAlice, grown).status().code(), StatusCode::kResourceExhausted);
  JobSpec admins = Service("d", 1, 4);
  admins.service.port = 9200;
  EXPECT_TRUE(c->Submit(kAdmin, admins).ok());
  c->Stop();
}

// Under job_visibility: own, another user's job is as if it did not exist:
// a service name or port another tenant's service holds is refused without
// its job id (or, for ports, its name); its owner and admins are told both.
TEST_F(ControllerTest, AServiceCollisionTellsNoOtherTenantTheJobUnderVisibilityOwn) {
  ControllerOptions o{.config = TwoNodes(), .clock = &clock};
  o.config.job_visibility = "own";
  auto c = std::make_unique<Controller>(o, std::make_unique<MemoryStore>());
  ASSERT_TRUE(c->Start().ok());
  auto id = c->Submit(kAlice, Service("secret-model", 1, 2));
  ASSERT_TRUE(id.ok()) << id.status().ToString();
  const std::string job = "job " + std::to_string(id->value());
  const Status name = c->Submit(kBob, Service("secret-model", 1, 1)).status();
  EXPECT_EQ(name.code(), StatusCode::kAlreadyExists);
  EXPECT_NE(name.message().find("service 'secret-model' exists already (another user's)"), std::string::npos) << name.message();
  EXPECT_EQ(name.message().find(job), std::string::npos) << name.message();
  JobSpec ports = Service("mine", 1, 1);
  ports.service.port = 8001;
  const Status port = c->CheckTenantLimits(kBob, ports, 1);
  EXPECT_EQ(port.code(), StatusCode::kAlreadyExists);
  EXPECT_NE(port.message().find("overlap another user's service, ports 8000..8001"), std::string::npos) << port.message();
  EXPECT_EQ(port.message().find("secret-model"), std::string::npos) << port.message();
  EXPECT_EQ(port.message().find(job), std::string::npos) << port.message();
  // Its owner and an admin see which job holds them.
  for (const Principal& who : {kAlice, kAdmin}) {
    const Status again = c->CheckTenantLimits(who, ports, 1);
    EXPECT_NE(again.message().find("overlap service 'secret-model' (" + job + ")"), std::string::npos) << again.message();
  }
  c->Stop();
}

// A service: one a name; a replica that exits (0 or not) restarts alone,
// forever; a lost node's replicas are dropped and placed elsewhere while
// the others run on (no restart of the service).
TEST_F(ControllerTest, AServiceRestartsReplicasForeverAndSurvivesANodeLoss) {
  auto c = Make(std::make_unique<MemoryStore>());
  const Principal agent1{"n-1", Role::kAgent, "n-1"};
  ASSERT_TRUE(c->RegisterNode(agent0, c->snapshot().FindNode("n-0")->spec, true, "").ok());
  ASSERT_TRUE(c->RegisterNode(agent1, c->snapshot().FindNode("n-1")->spec, true, "").ok());
  auto id = c->Submit(kAlice, Service("svc", 1, 3));
  ASSERT_TRUE(id.ok()) << id.status().ToString();
  EXPECT_EQ(c->Submit(kBob, Service("svc", 1, 1)).status().code(), StatusCode::kAlreadyExists);
  // Ports 8000..8002 are svc's (port + replica): another service's may not overlap them.
  JobSpec other = Service("other", 1, 1);
  other.service.port = 8002;
  auto overlap = c->Submit(kBob, other);
  EXPECT_EQ(overlap.status().code(), StatusCode::kAlreadyExists);
  EXPECT_NE(overlap.status().message().find("service.port: ports 8002..8002 (port + replica) overlap service 'svc'"),
            std::string::npos)
      << overlap.status().message();
  EXPECT_EQ(c->snapshot().FindJob(*id)->spec().priority, 2000);  // the inference class
  c->ScheduleNow();
  ASSERT_TRUE(c->ScaleService(*id, 3, "in flight 12.0 (target 4/replica): 3").ok());
  c->ScheduleNow();
  const JobRecord* job = c->snapshot().FindJob(*id);
  ASSERT_EQ(job->placement.size(), 3u);  // 4 GPUs each: two on one node, one on the other
  EXPECT_EQ(job->restarts, 0);
  // Replica 0 exits with 0 (a batch job's replica would be done): restarted.
  const ReplicaPlacement r0 = job->placement[0];
  const Principal& on0 = r0.node.value() == 0 ? agent0 : agent1;
  ASSERT_TRUE(c->Heartbeat(on0, {on0.node, {}, {{*id, 0, 0, job->ReplicaAttempt(0), true, 0}}}).ok());
  job = c->snapshot().FindJob(*id);
  EXPECT_EQ(job->state, JobState::kRunning);
  EXPECT_EQ(job->rank_restarts, 1);
  // The node holding one replica goes silent past the node timeout and fence.
  NodeId single;
  for (uint32_t n = 0; n < 2; ++n) {
    int on = 0;
    for (const ReplicaPlacement& r : job->placement) on += r.node.value() == n;
    if (on == 1) single = NodeId(n);
  }
  const Principal& stays = single.value() == 0 ? agent1 : agent0;
  std::map<uint32_t, int32_t> before;
  for (const ReplicaPlacement& r : job->placement) {
    if (r.node != single) before[r.replica] = job->ReplicaAttempt(r.replica);
  }
  clock.Advance(33 * kMicrosPerSecond);
  ASSERT_TRUE(c->Heartbeat(stays, {stays.node, {}, {}}).ok());
  c->ScheduleNow();
  c->ScheduleNow();
  Snapshot snap = c->snapshot();
  job = snap.FindJob(*id);
  EXPECT_TRUE(snap.node(single).lost);
  EXPECT_EQ(job->restarts, 0) << job->last_requeue_reason;  // not requeued
  EXPECT_EQ(job->state, JobState::kRunning);
  EXPECT_NE(job->last_resize_reason.find("dropped: node"), std::string::npos) << job->last_resize_reason;
  // The others kept their attempts (their processes); none is on the lost node.
  for (const auto& [replica, attempt] : before) EXPECT_EQ(job->ReplicaAttempt(replica), attempt);
  for (const ReplicaPlacement& r : job->placement) EXPECT_NE(r.node, single);
  EXPECT_EQ(job->placement.size(), 2u);  // the third does not fit on the one node left (8 GPUs)
}

TEST_F(ControllerTest, CrashedReplicaRestartsPerPolicyThenFails) {
  auto c = Make(std::make_unique<MemoryStore>());
  ASSERT_TRUE(c->RegisterNode(agent0, c->snapshot().FindNode("n-0")->spec, true, "").ok());
  JobSpec spec = Job("crashy", 1, 1);
  spec.restart = {RestartPolicy::kOnFailure, 1};
  spec.node_selector = {{"hostname", "n-0"}};
  auto id = c->Submit(kAlice, spec);
  ASSERT_TRUE(id.ok());
  c->ScheduleNow();
  // Attempt 0 fails: requeued and placed again as attempt 1.
  ASSERT_TRUE(c->Heartbeat(agent0, {"n-0", {}, {{*id, 0, 0, 0, true, 2}}}).ok());
  c->ScheduleNow();
  EXPECT_EQ(c->snapshot().FindJob(*id)->restarts, 1);
  EXPECT_EQ(c->snapshot().FindJob(*id)->state, JobState::kRunning);
  // A stale report from attempt 0 changes nothing.
  ASSERT_TRUE(c->Heartbeat(agent0, {"n-0", {}, {{*id, 0, 0, 0, true, 2}}}).ok());
  EXPECT_EQ(c->snapshot().FindJob(*id)->state, JobState::kRunning);
  // Attempt 1 fails: no restarts left.
  auto tasks = c->Heartbeat(agent0, {"n-0", {}, {{*id, 0, 0, 1, true, 2}}});
  ASSERT_TRUE(tasks.ok());
  EXPECT_EQ(c->snapshot().FindJob(*id)->state, JobState::kFailed);
}

// Only failed attempts use up restart.max_restarts: a requeue by hand (and
// likewise a preemption or a lost node) restarts the job without it, so a
// job requeued twice still has its one restart after a crash; and the count
// survives a journal snapshot.
TEST_F(ControllerTest, ARequeueByHandDoesNotUseUpTheRestartPolicy) {
  auto c = Make(std::make_unique<MemoryStore>());
  ASSERT_TRUE(c->RegisterNode(agent0, c->snapshot().FindNode("n-0")->spec, true, "").ok());
  JobSpec spec = Job("requeued", 1, 1);
  spec.restart = {RestartPolicy::kOnFailure, 1};
  spec.node_selector = {{"hostname", "n-0"}};
  auto id = c->Submit(kAlice, spec);
  ASSERT_TRUE(id.ok());
  c->ScheduleNow();
  for (int i = 0; i < 2; ++i) {
    ASSERT_TRUE(c->Requeue(kAlice, *id).ok());
    // It stops first (its task leaves the answer; the agent stops it and
    // reports the exit), then runs again.
    EXPECT_EQ(c->snapshot().FindJob(*id)->state, JobState::kPreempting);
    ASSERT_TRUE(c->Heartbeat(agent0, {"n-0", {}, {{*id, 0, 0, i, true, 143}}}).ok());
    c->ScheduleNow();
    ASSERT_EQ(c->snapshot().FindJob(*id)->state, JobState::kRunning);
  }
  EXPECT_EQ(c->snapshot().FindJob(*id)->restarts, 2);
  EXPECT_EQ(c->snapshot().FindJob(*id)->failed_restarts, 0);
  // Attempt 2 fails: its one restart.
  ASSERT_TRUE(c->Heartbeat(agent0, {"n-0", {}, {{*id, 0, 0, 2, true, 2}}}).ok());
  c->ScheduleNow();
  const JobRecord* job = c->snapshot().FindJob(*id);
  EXPECT_EQ(job->state, JobState::kRunning) << job->end_reason;
  EXPECT_EQ(job->restarts, 3);
  EXPECT_EQ(job->failed_restarts, 1);
  ClusterState replay;
  for (const Event& e : CompactState(c->snapshot())) ASSERT_TRUE(replay.Apply(e).ok());
  EXPECT_EQ(replay.GetSnapshot().FindJob(*id)->failed_restarts, 1);
  // Attempt 3 fails: none left.
  ASSERT_TRUE(c->Heartbeat(agent0, {"n-0", {}, {{*id, 0, 0, 3, true, 2}}}).ok());
  EXPECT_EQ(c->snapshot().FindJob(*id)->state, JobState::kFailed);
}

// A node's version (what its watch and a long poll wait on) moves with each
// change to the tasks it runs: a job bound there, the job's next attempt
// there after a failure (requeued and bound again), its end; a node whose
// tasks did not change keeps its version.
TEST_F(ControllerTest, ANodesVersionMovesWhenItsTasksChangeAndOnlyThen) {
  auto c = Make(std::make_unique<MemoryStore>());
  ASSERT_TRUE(c->RegisterNode(agent0, c->snapshot().FindNode("n-0")->spec, true, "").ok());
  const uint64_t other = c->NodeVersion("n-1");
  JobSpec spec = Job("restarts", 1, 1);
  spec.restart = {RestartPolicy::kOnFailure, 1};
  spec.node_selector = {{"hostname", "n-0"}};
  uint64_t version = c->NodeVersion("n-0");
  auto id = c->Submit(kAlice, spec);
  ASSERT_TRUE(id.ok());
  c->ScheduleNow();
  ASSERT_EQ(c->snapshot().FindJob(*id)->state, JobState::kRunning);
  EXPECT_GT(c->NodeVersion("n-0"), version);
  auto tasks = c->NodeTasks("n-0");
  ASSERT_TRUE(tasks.ok());
  ASSERT_EQ(tasks->size(), 1u);
  const int32_t attempt = (*tasks)[0].attempt;
  // Its attempt fails: the next one runs on the same node.
  version = c->NodeVersion("n-0");
  ASSERT_TRUE(c->Heartbeat(agent0, {"n-0", {}, {{*id, 0, 0, attempt, true, 2}}}).ok());
  c->ScheduleNow();
  ASSERT_EQ(c->snapshot().FindJob(*id)->state, JobState::kRunning);
  EXPECT_GT(c->NodeVersion("n-0"), version);
  tasks = c->NodeTasks("n-0");
  ASSERT_TRUE(tasks.ok());
  ASSERT_EQ(tasks->size(), 1u);
  EXPECT_GT((*tasks)[0].attempt, attempt);
  // A heartbeat that changes nothing moves nothing.
  version = c->NodeVersion("n-0");
  ASSERT_TRUE(c->Heartbeat(agent0, {"n-0", {}, {{*id, 0, 0, (*tasks)[0].attempt, false, 0}}}).ok());
  EXPECT_EQ(c->NodeVersion("n-0"), version);
  // It ends: no task left there.
  ASSERT_TRUE(c->Heartbeat(agent0, {"n-0", {}, {{*id, 0, 0, (*tasks)[0].attempt, true, 0}}}).ok());
  EXPECT_EQ(c->snapshot().FindJob(*id)->state, JobState::kSucceeded);
  EXPECT_GT(c->NodeVersion("n-0"), version);
  tasks = c->NodeTasks("n-0");
  ASSERT_TRUE(tasks.ok());
  EXPECT_TRUE(tasks->empty());
  EXPECT_EQ(c->NodeVersion("n-1"), other);
}

// An agent that registers again with corrected labels gets them (they were
// dropped before, so a mistake could not be fixed); labels that put a rack
// in two spines are refused with the nodes named, and change nothing.
TEST_F(ControllerTest, ReRegistrationReplacesANodesLabels) {
  auto c = Make(std::make_unique<MemoryStore>());
  NodeSpec spec = c->snapshot().FindNode("n-0")->spec;
  const Labels declared = spec.labels;  // the config's: hostname, gpu_model, rack, spine
  // An agent sends only its own labels: the declared ones stay.
  NodeSpec from_agent = spec;
  from_agent.labels = {{"hostname", "n-0"}, {"gpu_model", "H100"}};
  ASSERT_TRUE(c->RegisterNode(agent0, from_agent, true, "").ok());
  EXPECT_EQ(c->snapshot().FindNode("n-0")->spec.labels, declared);
  from_agent.labels["gpu-class"] = "big";
  ASSERT_TRUE(c->RegisterNode(agent0, from_agent, true, "").ok());
  spec.labels["gpu-class"] = "big";
  EXPECT_EQ(c->snapshot().FindNode("n-0")->spec.labels, spec.labels);
  EXPECT_EQ(c->snapshot().FindNode("n-0")->spec.labels.at("rack"), declared.at("rack"));
  // Not the config's labels, nor the built-in ones: an agent cannot move a
  // declared node to another rack, nor pass for another node.
  NodeSpec hostile = from_agent;
  hostile.labels["rack"] = "elsewhere";
  hostile.labels["hostname"] = "n-1";
  ASSERT_TRUE(c->RegisterNode(agent0, hostile, true, "").ok());
  EXPECT_EQ(c->snapshot().FindNode("n-0")->spec.labels, spec.labels);
  // A node the config does not declare takes its agent's labels; labels that
  // put a rack in two spines are refused with the other node named, and
  // change nothing.
  NodeSpec extra = spec;
  extra.name = "x-0";
  extra.labels = {{"rack", "solo"}};
  ASSERT_TRUE(c->RegisterNode(kAdmin, extra, true, "").ok());
  EXPECT_EQ(c->snapshot().FindNode("x-0")->spec.labels.at("hostname"), "x-0");
  extra.labels = {{"rack", declared.at("rack")}, {"spine", "elsewhere"}};
  const Status refused = c->RegisterNode(kAdmin, extra, true, "");
  EXPECT_EQ(refused.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(refused.message().find("but node 'n-0' has it in"), std::string::npos) << refused.message();
  EXPECT_EQ(c->snapshot().FindNode("x-0")->spec.labels.at("rack"), "solo");
}

// One heartbeat reporting several exits (short jobs on a busy node): each
// ends its job, and the answer lists the node's remaining tasks - the
// node's record is re-read after every change (it once pointed into a
// released snapshot, and later exits in the same report were dropped).
TEST_F(ControllerTest, OneHeartbeatEndsManyJobs) {
  auto c = Make(std::make_unique<MemoryStore>());
  ASSERT_TRUE(c->RegisterNode(agent0, c->snapshot().FindNode("n-0")->spec, true, "").ok());
  std::vector<JobId> ids;
  for (int i = 0; i < 5; ++i) {
    JobSpec spec = Job("short-" + std::to_string(i), 1, 1);
    spec.node_selector = {{"hostname", "n-0"}};
    auto id = c->Submit(kAlice, spec);
    ASSERT_TRUE(id.ok());
    ids.push_back(*id);
  }
  c->ScheduleNow();
  HeartbeatReport report{"n-0", {}, {}};
  // A checkpoint first (its change moves the state on before the exits), then four exits.
  TaskReport ckpt{ids[4], 0, 0, 0, false, 0};
  ckpt.checkpoint_path = "/ckpt/1";
  clock.Advance(kMicrosPerSecond);
  ckpt.checkpoint_at = clock.Now();
  report.tasks.push_back(ckpt);
  for (size_t i = 0; i < 4; ++i) report.tasks.push_back({ids[i], 0, 0, 0, true, 0});
  auto tasks = c->Heartbeat(agent0, report);
  ASSERT_TRUE(tasks.ok());
  for (size_t i = 0; i < 4; ++i) EXPECT_EQ(c->snapshot().FindJob(ids[i])->state, JobState::kSucceeded) << i;
  ASSERT_EQ(tasks->size(), 1u);  // the fifth, still running there
  EXPECT_EQ((*tasks)[0].job, ids[4]);
  EXPECT_EQ(c->snapshot().FindJob(ids[4])->last_checkpoint_path, "/ckpt/1");
}

// An agent whose disk cannot take new tasks (HeartbeatReport::disk_problem)
// has its node drained with the reason, and undrained when it reports the
// disk fine again; its running job runs on. A drain an admin gave since is
// the admin's to lift; an admin's undrain while the problem lasts does not hold.
TEST_F(ControllerTest, AnAgentsDiskProblemDrainsItsNodeUntilItClears) {
  auto c = Make(std::make_unique<MemoryStore>());
  ASSERT_TRUE(c->RegisterNode(agent0, c->snapshot().FindNode("n-0")->spec, true, "").ok());
  JobSpec spec = Job("running", 1, 1);
  spec.node_selector = {{"hostname", "n-0"}};
  auto running = c->Submit(kAlice, spec);
  ASSERT_TRUE(running.ok());
  c->ScheduleNow();
  ASSERT_EQ(c->snapshot().FindJob(*running)->state, JobState::kRunning);
  const uint64_t before = c->snapshot().revision();
  HeartbeatReport report{"n-0", {}, {}};
  report.tasks.push_back({*running, 0, 0, 0, false, 0});
  report.disk_problem = "only 3 MiB free in /var/lib/rota (the agent keeps 64 MiB: --disk-reserve)";
  ASSERT_TRUE(c->Heartbeat(agent0, report).ok());
  const NodeState* n = c->snapshot().FindNode("n-0");
  EXPECT_TRUE(n->drained);
  EXPECT_EQ(n->drain_reason, "disk: " + report.disk_problem);
  EXPECT_EQ(c->snapshot().FindJob(*running)->state, JobState::kRunning);
  // Said again: nothing more is journaled.
  const uint64_t drained_at = c->snapshot().revision();
  EXPECT_GT(drained_at, before);
  ASSERT_TRUE(c->Heartbeat(agent0, report).ok());
  EXPECT_EQ(c->snapshot().revision(), drained_at);
  // A new job waits: the node is drained.
  JobSpec next = Job("next", 1, 1);
  next.node_selector = {{"hostname", "n-0"}};
  auto waiting = c->Submit(kAlice, next);
  ASSERT_TRUE(waiting.ok());
  c->ScheduleNow();
  EXPECT_EQ(c->snapshot().FindJob(*waiting)->state, JobState::kPending);
  auto why = c->pending_reason(*waiting);
  ASSERT_TRUE(why.has_value());
  EXPECT_NE(why->message.find("all 1 matching node is drained (n-0: disk: only 3 MiB free in /var/lib/rota"),
            std::string::npos)
      << why->message;
  // An admin may not give a drain the agent's prefix (the agent would lift it).
  Status refused = c->SetDrain(kAdmin, "n-0", true, "disk: replacing nvme0");
  EXPECT_EQ(refused.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(refused.message().find("reason: may not begin with 'disk: '"), std::string::npos) << refused.ToString();
  // Cleared: undrained, and the job starts.
  report.disk_problem.clear();
  ASSERT_TRUE(c->Heartbeat(agent0, report).ok());
  EXPECT_FALSE(c->snapshot().FindNode("n-0")->drained);
  c->ScheduleNow();
  EXPECT_EQ(c->snapshot().FindJob(*waiting)->state, JobState::kRunning);
  // An admin's undrain while the problem lasts: drained again at the next report.
  report.disk_problem = "/var/lib/rota is on a read-only file system";
  ASSERT_TRUE(c->Heartbeat(agent0, report).ok());
  ASSERT_TRUE(c->SetDrain(kAdmin, "n-0", false, "").ok());
  ASSERT_TRUE(c->Heartbeat(agent0, report).ok());
  EXPECT_EQ(c->snapshot().FindNode("n-0")->drain_reason, "disk: /var/lib/rota is on a read-only file system");
  // An admin's drain stays when the disk clears.
  ASSERT_TRUE(c->SetDrain(kAdmin, "n-0", true, "PSU swap").ok());
  report.disk_problem.clear();
  ASSERT_TRUE(c->Heartbeat(agent0, report).ok());
  EXPECT_TRUE(c->snapshot().FindNode("n-0")->drained);
  EXPECT_EQ(c->snapshot().FindNode("n-0")->drain_reason, "PSU swap");
}

// An agent whose task runtime cannot take new tasks (its starts hang in
// exec, its container runtime's deletes hang: HeartbeatReport::
// runtime_problem) has its node drained as for a disk problem, with the
// reason "runtime: ..."; a disk problem said beside it goes first, and
// the drain's reason follows which of the two is said.
TEST_F(ControllerTest, AnAgentsRuntimeProblemDrainsItsNodeUntilItClears) {
  auto c = Make(std::make_unique<MemoryStore>());
  ASSERT_TRUE(c->RegisterNode(agent0, c->snapshot().FindNode("n-0")->spec, true, "").ok());
  HeartbeatReport report{"n-0", {}, {}};
  report.runtime_problem = "3 starts in a row, of 2 users, did not exec their program within 10 s (a hung file system?)";
  ASSERT_TRUE(c->Heartbeat(agent0, report).ok());
  EXPECT_TRUE(c->snapshot().FindNode("n-0")->drained);
  EXPECT_EQ(c->snapshot().FindNode("n-0")->drain_reason, "runtime: " + report.runtime_problem);
  // Said in other words: nothing more is journaled.
  const uint64_t drained_at = c->snapshot().revision();
  report.runtime_problem = "4 starts in a row, of 2 users, did not exec their program within 10 s (a hung file system?)";
  ASSERT_TRUE(c->Heartbeat(agent0, report).ok());
  EXPECT_EQ(c->snapshot().revision(), drained_at);
  // The disk's problem goes first, and the runtime's comes back when it clears.
  report.disk_problem = "no inodes left in /var/lib/rota";
  ASSERT_TRUE(c->Heartbeat(agent0, report).ok());
  EXPECT_EQ(c->snapshot().FindNode("n-0")->drain_reason, "disk: no inodes left in /var/lib/rota");
  report.disk_problem.clear();
  ASSERT_TRUE(c->Heartbeat(agent0, report).ok());
  EXPECT_EQ(c->snapshot().FindNode("n-0")->drain_reason, "runtime: " + report.runtime_problem);
  // An admin may not give a drain the agent's prefix.
  Status refused = c->SetDrain(kAdmin, "n-0", true, "runtime: crun upgrade");
  EXPECT_EQ(refused.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(refused.message().find("reason: may not begin with 'runtime: '"), std::string::npos) << refused.ToString();
  // An admin's undrain while the problem lasts: drained again at the next report.
  ASSERT_TRUE(c->SetDrain(kAdmin, "n-0", false, "").ok());
  ASSERT_TRUE(c->Heartbeat(agent0, report).ok());
  EXPECT_EQ(c->snapshot().FindNode("n-0")->drain_reason, "runtime: " + report.runtime_problem);
  // Cleared: undrained.
  report.runtime_problem.clear();
  ASSERT_TRUE(c->Heartbeat(agent0, report).ok());
  EXPECT_FALSE(c->snapshot().FindNode("n-0")->drained);
  // An admin's drain is not the agent's to change or lift, and the agent's
  // reports journal nothing while it stands.
  ASSERT_TRUE(c->SetDrain(kAdmin, "n-0", true, "PSU swap").ok());
  const uint64_t admin_drained_at = c->snapshot().revision();
  report.runtime_problem = "the OCI runtime could not delete a container (its delete hung, killed after 30 s)";
  ASSERT_TRUE(c->Heartbeat(agent0, report).ok());
  EXPECT_EQ(c->snapshot().FindNode("n-0")->drain_reason, "PSU swap");
  report.runtime_problem.clear();
  ASSERT_TRUE(c->Heartbeat(agent0, report).ok());
  EXPECT_EQ(c->snapshot().FindNode("n-0")->drain_reason, "PSU swap");
  EXPECT_EQ(c->snapshot().revision(), admin_drained_at);
}

// The agent's drains are journaled as its (NodeDrainChanged::by_agent) and
// survive a restart so; a drain an admin gave with a reason that looks like
// an agent's, journaled before drains carried the flag, is not lifted by the
// agent's reports (a disk drain of that time, known by its prefix, is).
TEST_F(ControllerTest, OnlyTheAgentsOwnDrainIsLiftedByItsReports) {
  const testing::TempDir tmp("rota-ctl");
  const std::string db = tmp.path() + "/rota.db";
  const Principal agent1{"n-1", Role::kAgent, "n-1"};
  {
    auto c = Make(std::move(SqliteStore::Open(db)).value());
    ASSERT_TRUE(c->RegisterNode(agent0, c->snapshot().FindNode("n-0")->spec, true, "").ok());
    HeartbeatReport report{"n-0", {}, {}};
    report.runtime_problem = "the OCI runtime could not delete a container (its delete hung, killed after 30 s)";
    ASSERT_TRUE(c->Heartbeat(agent0, report).ok());
    ASSERT_TRUE(c->snapshot().FindNode("n-0")->drained_by_agent);
  }
  // (As an older server journaled them: no flag.)
  auto journal = [&](const NodeDrainChanged& e) {
    auto store = std::move(SqliteStore::Open(db)).value();
    ASSERT_TRUE(store->Append({e}).ok());
  };
  journal(NodeDrainChanged{"n-1", true, "runtime: crun upgrade"});
  auto start = [&] {
    auto c = Make(std::move(SqliteStore::Open(db)).value());
    EXPECT_TRUE(c->RegisterNode(agent0, c->snapshot().FindNode("n-0")->spec, true, "").ok());
    EXPECT_TRUE(c->RegisterNode(agent1, c->snapshot().FindNode("n-1")->spec, true, "").ok());
    return c;
  };
  {
    auto c = start();
    EXPECT_TRUE(c->snapshot().FindNode("n-0")->drained_by_agent);
    ASSERT_TRUE(c->Heartbeat(agent0, HeartbeatReport{"n-0", {}, {}}).ok());
    EXPECT_FALSE(c->snapshot().FindNode("n-0")->drained);
    ASSERT_TRUE(c->Heartbeat(agent1, HeartbeatReport{"n-1", {}, {}}).ok());
    EXPECT_TRUE(c->snapshot().FindNode("n-1")->drained);
    EXPECT_EQ(c->snapshot().FindNode("n-1")->drain_reason, "runtime: crun upgrade");
  }
  journal(NodeDrainChanged{"n-1", true, "disk: only 3 MiB free in /var/lib/rota"});
  auto c = start();
  ASSERT_TRUE(c->Heartbeat(agent1, HeartbeatReport{"n-1", {}, {}}).ok());
  EXPECT_FALSE(c->snapshot().FindNode("n-1")->drained);
}

// An elastic job's failed rank restarts alone (a new attempt of that replica
// only), counted against its restart policy with gang restarts.
TEST_F(ControllerTest, ElasticRankRestartsAlone) {
  auto c = Make(std::make_unique<MemoryStore>());
  ASSERT_TRUE(c->RegisterNode(agent0, c->snapshot().FindNode("n-0")->spec, true, "").ok());
  JobSpec spec = Job("elastic", 2, 1);
  spec.elastic_min_replicas = 1;
  spec.restart = {RestartPolicy::kOnFailure, 2};
  spec.node_selector = {{"hostname", "n-0"}};
  auto id = c->Submit(kAlice, spec);
  ASSERT_TRUE(id.ok());
  c->ScheduleNow();
  const std::vector<ReplicaPlacement> placed = c->snapshot().FindJob(*id)->placement;
  ASSERT_EQ(placed.size(), 2u);
  const uint64_t version = c->NodeVersion("n-0");
  auto attempts = [&](const std::vector<TaskAssignment>& tasks) {
    std::map<uint32_t, int32_t> out;
    for (const TaskAssignment& a : tasks) out[a.replica] = a.attempt;
    return out;
  };
  // Rank 1 fails: it alone gets a new attempt; rank 0 keeps its own.
  auto tasks = c->Heartbeat(agent0, {"n-0", {}, {{*id, 0, 1, 0, true, 3}}});
  ASSERT_TRUE(tasks.ok());
  const JobRecord* job = c->snapshot().FindJob(*id);
  EXPECT_EQ(job->state, JobState::kRunning);
  EXPECT_EQ(job->rank_restarts, 1);
  EXPECT_EQ(job->restarts, 0);
  EXPECT_EQ(attempts(*tasks), (std::map<uint32_t, int32_t>{{0, 0}, {1, 1}}));
  // On the same nodes, yet the node's version moves: its watch must hear of
  // the new attempt at once (a batch touches the nodes of every job it
  // changes, not only of those that moved).
  EXPECT_EQ(job->placement, placed);
  EXPECT_GT(c->NodeVersion("n-0"), version);
  // A late report from rank 1's first attempt changes nothing.
  ASSERT_TRUE(c->Heartbeat(agent0, {"n-0", {}, {{*id, 0, 1, 0, true, 3}}}).ok());
  EXPECT_EQ(c->snapshot().FindJob(*id)->rank_restarts, 1);
  // Again: the second and last restart the policy allows.
  tasks = c->Heartbeat(agent0, {"n-0", {}, {{*id, 0, 1, 1, true, 3}}});
  ASSERT_TRUE(tasks.ok());
  EXPECT_EQ(attempts(*tasks), (std::map<uint32_t, int32_t>{{0, 0}, {1, 2}}));
  // A third failure: no restarts left, the job fails.
  ASSERT_TRUE(c->Heartbeat(agent0, {"n-0", {}, {{*id, 0, 1, 2, true, 3}}}).ok());
  EXPECT_EQ(c->snapshot().FindJob(*id)->state, JobState::kFailed);
}

TEST_F(ControllerTest, FlagsIdleAndOverProvisionedJobs) {
  auto c = MakeMeasured(std::make_unique<MemoryStore>());
  JobSpec busy = Job("busy", 1, 1);
  busy.node_selector = {{"hostname", "n-0"}};
  JobSpec idle = busy;
  idle.name = "idle";
  auto busy_id = c->Submit(kAlice, busy);
  auto idle_id = c->Submit(kAlice, idle);
  ASSERT_TRUE(busy_id.ok() && idle_id.ok());
  c->ScheduleNow();
  const JobRecord* b = c->snapshot().FindJob(*busy_id);
  const int32_t busy_gpu = std::countr_zero(b->placement[0].gpu_mask);
  const int32_t idle_gpu = std::countr_zero(c->snapshot().FindJob(*idle_id)->placement[0].gpu_mask);
  // Every 10 s for 45 minutes: a node silent for minutes of the test's clock
  // could be declared lost by the scheduling loop's own pass (which runs on
  // real time, whenever it likes) and its jobs requeued, so not running.
  for (int second = 10; second <= 45 * 60; second += 10) {
    clock.Advance(10 * kMicrosPerSecond);
    ASSERT_TRUE(c->Heartbeat(agent0, {"n-0",
                                       {{busy_gpu, 90, 60 * 1024, 70, 500, true, ""},
                                        {idle_gpu, 0, 2 * 1024, 35, 60, true, ""}},
                                       {}})
                    .ok());
  }
  Snapshot snap = c->snapshot();
  EXPECT_TRUE(c->job_flags(*snap.FindJob(*busy_id)).empty());
  auto flags = c->job_flags(*snap.FindJob(*idle_id));
  ASSERT_EQ(flags.size(), 2u);
  EXPECT_EQ(flags[0], "idle: its GPUs have been below 5% utilisation for 45m");
  EXPECT_EQ(flags[1], "over-provisioned: peak GPU memory 2Gi of 80Gi per GPU");
}

// Three jobs on one node, reporting every 10 s: one whose GPU waits (5%)
// on a CPU at its 2-CPU limit, one compute-bound (GPU 95%, CPU at its limit
// too) and one idle (GPU 0%, CPU 1%). Only the first is input-bound, from
// its first minute; its usage record, once it ends, holds what was reported.
TEST_F(ControllerTest, AJobWhoseGpusAreFedSlowlyOverPcieIsInputBoundToo) {
  // GPUs at 5%, CPUs at 60% of their limit (busy, not saturated): input-bound
  // only where PCIe says little reaches the GPUs; not where data streams in,
  // nor where PCIe was not measured.
  auto c = MakeMeasured(std::make_unique<MemoryStore>());
  struct Case {
    const char* name;
    int32_t rx_kbps;
    JobId id;
    int32_t gpu = 0;
  } cases[] = {{"trickle", 2'000}, {"streaming", 4'000'000}, {"unmeasured", -1}};
  ASSERT_TRUE(RunOnN0(*c, cases));
  auto flags = [&](const Case& k) { return c->job_flags(*c->snapshot().FindJob(k.id)); };
  for (int s = 10; s <= 60; s += 10) {
    clock.Advance(10 * kMicrosPerSecond);
    HeartbeatReport report{"n-0", {}, {}};
    for (const Case& k : cases) {
      GpuTelemetry g{.index = k.gpu, .utilization_pct = 5, .memory_used = 3000, .power_w = 100};
      g.samples = 10;
      g.activity.assign(ActivityHistogram::kBuckets, 0);
      g.activity[ActivityHistogram::Bucket(5)] = 10;
      g.pcie_rx_kbps = k.rx_kbps;
      g.pcie_tx_kbps = k.rx_kbps < 0 ? -1 : 100;
      report.gpus.push_back(g);
      TaskReport t{k.id, 0, 0, 0, false, 0};
      t.cpu_used_us = 1'200'000LL * s;  // 1.2 of its 2 CPUs
      report.tasks.push_back(t);
    }
    ASSERT_TRUE(c->Heartbeat(agent0, report).ok());
  }
  ASSERT_EQ(flags(cases[0]).size(), 1u);
  EXPECT_EQ(flags(cases[0])[0],
            "input-bound: GPU activity 8% with 2.0 MB/s PCIe input while its CPU runs at 60% of its limit, for 1m");
  EXPECT_TRUE(flags(cases[1]).empty()) << flags(cases[1])[0];
  EXPECT_TRUE(flags(cases[2]).empty()) << flags(cases[2])[0];
}

// A node's report counts CPU only for the job's replicas placed on it, at
// their attempt: replicas and attempts of the agent's choosing grew the
// job's table (and its measured CPU) without end.
TEST_F(ControllerTest, AReportCountsCpuOnlyOfThePlacedReplicasAttempt) {
  auto c = MakeMeasured(std::make_unique<MemoryStore>());
  struct Case {
    const char* name;
    JobId id;
    int32_t gpu = 0;
  } cases[] = {{"measured"}};
  ASSERT_TRUE(RunOnN0(*c, cases));
  clock.Advance(10 * kMicrosPerSecond);
  HeartbeatReport report{"n-0", {}, {}};
  TaskReport real{cases[0].id, 0, 0, 0, false, 0};
  real.cpu_used_us = 1'000'000;
  report.tasks.push_back(real);
  for (uint32_t attempt = 1; attempt <= 50; ++attempt) {
    TaskReport forged{cases[0].id, 0, 0, attempt, false, 0};  // attempts it never had
    forged.cpu_used_us = 1'000'000'000;
    report.tasks.push_back(forged);
    TaskReport other{cases[0].id, 0, 7 + attempt, 0, false, 0};  // replicas it does not have
    other.cpu_used_us = 1'000'000'000;
    report.tasks.push_back(other);
  }
  ASSERT_TRUE(c->Heartbeat(agent0, report).ok());
  const Snapshot snap = c->snapshot();
  EXPECT_EQ(c->PeekUsage(snap, *snap.FindJob(cases[0].id)).cpu_used_us, 1'000'000);
  c->Stop();
}

TEST_F(ControllerTest, FlagsAnInputBoundJobAndRecordsItsUsage) {
  auto c = MakeMeasured(std::make_unique<MemoryStore>());
  struct Case {
    const char* name;
    int32_t gpu_pct;
    int64_t cpu_per_s_us;  // CPU time a second
    JobId id;
    int32_t gpu = 0;
  } cases[] = {{"starved", 5, 2'000'000}, {"compute", 95, 2'000'000}, {"idle", 0, 20'000}};
  ASSERT_TRUE(RunOnN0(*c, cases));
  auto flags = [&](const Case& k) { return c->job_flags(*c->snapshot().FindJob(k.id)); };
  int64_t energy = 0;
  for (int s = 10; s <= 60; s += 10) {
    clock.Advance(10 * kMicrosPerSecond);
    HeartbeatReport report{"n-0", {}, {}};
    for (const Case& k : cases) {
      GpuTelemetry g{.index = k.gpu, .utilization_pct = k.gpu_pct, .memory_used = 3000, .power_w = 100};
      g.samples = 10;
      g.activity.assign(ActivityHistogram::kBuckets, 0);
      g.activity[ActivityHistogram::Bucket(k.gpu_pct)] = 10;
      g.memory_peak = 4000 + s;
      g.energy_mj = 1'000'000;
      report.gpus.push_back(g);
      TaskReport t{k.id, 0, 0, 0, false, 0};
      t.cpu_used_us = k.cpu_per_s_us * s;
      t.cpu_throttled_us = k.cpu_per_s_us > 1'000'000 ? 100'000 * s : 0;
      t.memory_peak = 512;
      report.tasks.push_back(t);
    }
    energy += 1'000'000;
    ASSERT_TRUE(c->Heartbeat(agent0, report).ok());
    if (s == 50) {
      EXPECT_TRUE(flags(cases[0]).empty()) << flags(cases[0])[0];
    }
  }
  ASSERT_EQ(flags(cases[0]).size(), 1u);
  EXPECT_EQ(flags(cases[0])[0], "input-bound: GPU activity 8% while its CPU runs at 100% of its limit, for 1m");
  EXPECT_TRUE(flags(cases[1]).empty()) << flags(cases[1])[0];
  EXPECT_TRUE(flags(cases[2]).empty()) << flags(cases[2])[0];

  // Running, each shows its measure so far; ended, the record is stored.
  auto running = c->Usage(kAlice, 0, clock.Now() + 1, true);
  ASSERT_TRUE(running.ok()) << running.status().ToString();
  ASSERT_EQ(running->size(), 3u);
  EXPECT_EQ((*running)[0].end, "running");
  ASSERT_TRUE(c->Cancel(kAlice, cases[0].id).ok());
  auto all = c->Usage(kAlice, 0, clock.Now() + 1, true);
  ASSERT_TRUE(all.ok());
  ASSERT_EQ(all->size(), 3u);
  const UsageRecord& r = (*all)[0];  // stored records come first, then the running
  EXPECT_EQ(r.job, cases[0].id);
  EXPECT_EQ(r.end, "cancelled");
  EXPECT_EQ(r.user, "alice");
  EXPECT_EQ(r.queue, "team/a");
  EXPECT_EQ(r.gpu_model, "H100");
  EXPECT_EQ(r.gpus, 1);
  EXPECT_EQ(r.cpu, 2000);
  EXPECT_EQ(r.seconds(), 60);
  EXPECT_EQ(r.activity.total(), 60);
  EXPECT_EQ(r.activity.Percentile(90), 10);
  EXPECT_EQ(r.energy_mj, energy);
  EXPECT_EQ(r.gpu_memory_peak, 4060);
  EXPECT_EQ(r.cpu_used_us, 120'000'000);
  EXPECT_EQ(r.cpu_throttled_us, 6'000'000);
  EXPECT_EQ(r.memory_peak, 512);
  EXPECT_EQ((*all)[1].end, "running");
  // Another user sees none of alice's; an admin sees them all.
  EXPECT_TRUE(c->Usage(kBob, 0, clock.Now() + 1, true)->empty());
  EXPECT_EQ(c->Usage(kAdmin, 0, clock.Now() + 1, true)->size(), 3u);
  // [since, until): the record that ended at `until` is not in it; without
  // the running attempts, none.
  EXPECT_TRUE(c->Usage(kAdmin, 0, clock.Now(), false)->empty());
  EXPECT_EQ(c->Usage(kAdmin, 0, clock.Now() + 1, false)->size(), 1u);
  EXPECT_EQ(c->Usage(kAdmin, 0, clock.Now() + 1, true)->front().end, "cancelled");
}

// Six minutes of a job using 5% of its GPU and 2 GiB of its 80: the family
// (alice's jobs of that name) fits a MIG instance, and says so after a
// restart too (read back from the store's records).
TEST_F(ControllerTest, AFamilysRightSizeSurvivesARestart) {
  const testing::TempDir tmp("rota-ctl");
  const std::string& dir = tmp.path();
  {
    auto c = MakeMeasured(std::move(SqliteStore::Open(dir + "/rota.db")).value());
    JobSpec spec = Job("small", 1, 1);
    spec.node_selector = {{"hostname", "n-0"}};
    auto id = c->Submit(kAlice, spec);
    ASSERT_TRUE(id.ok());
    c->ScheduleNow();
    const int32_t gpu = std::countr_zero(c->snapshot().FindJob(*id)->placement[0].gpu_mask);
    EXPECT_FALSE(c->FamilyShape("alice", "small").recommended);  // nothing has ended yet
    for (int s = 10; s <= 360; s += 10) {
      clock.Advance(10 * kMicrosPerSecond);
      GpuTelemetry g{.index = gpu, .utilization_pct = 5, .memory_used = 2048};
      g.samples = 10;
      g.activity = {0, 10};  // the [5, 10) bucket
      g.memory_peak = 2048;
      ASSERT_TRUE(c->Heartbeat(agent0, {"n-0", {g}, {}}).ok());
    }
    ASSERT_TRUE(c->Cancel(kAlice, *id).ok());
    const RightSize shape = c->FamilyShape("alice", "small");
    EXPECT_EQ(shape.shape, "gpu: {mig: 1g.10gb}") << shape.summary;
    EXPECT_FALSE(c->FamilyShape("bob", "small").recommended);
    c->Stop();
  }
  auto c = MakeMeasured(std::move(SqliteStore::Open(dir + "/rota.db")).value());
  EXPECT_EQ(c->FamilyShape("alice", "small").shape, "gpu: {mig: 1g.10gb}");
  c->Stop();
}

TEST_F(ControllerTest, JobsEndAtTheirTimeLimit) {
  auto c = Make(std::make_unique<MemoryStore>());
  JobSpec spec = Job("timed", 1, 1);
  spec.time_limit = 60 * kMicrosPerSecond;
  auto id = c->Submit(kAlice, spec);
  ASSERT_TRUE(id.ok());
  c->ScheduleNow();
  ASSERT_EQ(c->snapshot().FindJob(*id)->state, JobState::kRunning);
  clock.Advance(61 * kMicrosPerSecond);
  c->ScheduleNow();
  const JobRecord* job = c->snapshot().FindJob(*id);
  EXPECT_EQ(job->state, JobState::kFailed);
  EXPECT_EQ(job->end_reason, "time limit 1m reached");
}

// A job array commits whole, under consecutive ids, durably; a bad array
// changes nothing.
TEST_F(ControllerTest, JobArraysCommitWholeAndDurably) {
  const testing::TempDir tmp("rota-ctl");
  const std::string& dir = tmp.path();
  {
    auto c = Make(std::move(SqliteStore::Open(dir + "/rota.db")).value());
    EXPECT_EQ(c->SubmitArray(kAlice, Job("x", 1, 16), 10).status().code(), StatusCode::kOutOfRange);
    EXPECT_EQ(c->SubmitArray(kAlice, Job("x", 1, 1), 0).status().code(), StatusCode::kInvalidArgument);
    EXPECT_EQ(c->SubmitArray(kAlice, Job("x", 1, 1), Controller::kMaxArray + 1).status().code(),
              StatusCode::kInvalidArgument);
    EXPECT_EQ(c->SubmitArray(kAlice, Job("x", 1, 1, "team/b"), 5).status().code(), StatusCode::kPermissionDenied);
    EXPECT_TRUE(c->snapshot().jobs().empty());
    ASSERT_TRUE(c->Submit(kAlice, Job("one", 1, 1)).ok());
    auto first = c->SubmitArray(kAlice, Job("sweep", 1, 1), 500);
    ASSERT_TRUE(first.ok()) << first.status().ToString();
    EXPECT_EQ(first->value(), 2u);
    EXPECT_EQ(c->snapshot().jobs().size(), 501u);
    EXPECT_EQ(c->snapshot().FindJob(JobId(501))->spec().name, "sweep");
    EXPECT_EQ(c->snapshot().FindJob(JobId(501))->user, "alice");
    c->Stop();
  }
  auto c = Make(std::move(SqliteStore::Open(dir + "/rota.db")).value());
  EXPECT_EQ(c->snapshot().jobs().size(), 501u);  // acknowledged means journaled
  EXPECT_EQ(c->Submit(kAlice, Job("next", 1, 1))->value(), 502u);
  c->Stop();
}

// Fair share survives a restart: a server started on a journal whose job
// has held 8 GPUs of queue team/a for a day starts from that usage (decayed
// by the 7-day half-life: 8 * (1 - 2^(-1/7)) average GPUs), not from zero.
TEST_F(ControllerTest, FairShareUsageGoesOnAfterARestart) {
  const testing::TempDir tmp("rota-ctl");
  const std::string& dir = tmp.path();
  {
    auto c = Make(std::move(SqliteStore::Open(dir + "/rota.db")).value());
    auto id = c->Submit(kAlice, Job("day", 1, 8));
    ASSERT_TRUE(id.ok()) << id.status().ToString();
    c->ScheduleNow();
    ASSERT_EQ(c->snapshot().FindJob(*id)->state, JobState::kRunning);
    c->Stop();
  }
  clock.Advance(24 * 3600 * kMicrosPerSecond);
  auto c = Make(std::move(SqliteStore::Open(dir + "/rota.db")).value());
  const std::map<std::string, double> usage = c->usage_history();
  ASSERT_TRUE(usage.count("team/a")) << "the restarted server's fair share started from zero";
  EXPECT_NEAR(usage.at("team/a"), 8 * (1 - std::exp2(-1.0 / 7)), 0.001);
  EXPECT_EQ(usage.count("team/b") ? usage.at("team/b") : 0.0, 0.0);
  c->Stop();
}

// An agent that reads MIG layouts from the driver re-registers with the
// driver's current ones (after `nvidia-smi mig` and an agent restart).
TEST_F(ControllerTest, ReRegistrationTakesTheDriversNewMigLayout) {
  auto c = Make(std::make_unique<MemoryStore>());
  const Principal agent{"m-0", Role::kAgent, "m-0"};
  NodeSpec spec = rota::testing::A100Node("m-0", 2);
  ASSERT_TRUE(c->RegisterNode(agent, spec, false, "").ok());
  EXPECT_EQ(c->snapshot().FindNode("m-0")->mig_mask, 0u);
  spec.mig = {{1, "3g.40gb@0,3g.40gb@4"}};
  spec.mig_fixed = true;
  ASSERT_TRUE(c->RegisterNode(agent, spec, false, "").ok());
  EXPECT_EQ(c->snapshot().FindNode("m-0")->mig_mask, 0b10u);
  EXPECT_TRUE(c->snapshot().FindNode("m-0")->spec.mig_fixed);
  spec.mig = {{1, "7g.80gb@0"}};
  ASSERT_TRUE(c->RegisterNode(agent, spec, false, "").ok());
  EXPECT_EQ(c->snapshot().FindNode("m-0")->spec.mig.at(1), "7g.80gb@0");
  EXPECT_EQ(c->snapshot().FindNode("m-0")->mig_layout[1].size(), 1u);
}

TEST_F(ControllerTest, RecoversEverythingFromTheStore) {
  const testing::TempDir tmp("rota-ctl");
  const std::string& dir = tmp.path();
  JobId running, pending;
  {
    auto c = Make(std::move(SqliteStore::Open(dir + "/rota.db")).value());
    auto token = c->CreateToken(kAdmin, "carol", Role::kUser, "");
    ASSERT_TRUE(token.ok());
    running = *c->Submit(kAlice, Job("big", 2, 8));
    pending = *c->Submit(kAlice, Job("waits", 1, 8));
    c->ScheduleNow();
    ASSERT_TRUE(c->SetDrain(kAdmin, "n-1", true).ok());
    c->Stop();
  }
  auto c = Make(std::move(SqliteStore::Open(dir + "/rota.db")).value());
  Snapshot snap = c->snapshot();
  EXPECT_EQ(snap.FindJob(running)->state, JobState::kRunning);
  EXPECT_EQ(snap.FindJob(pending)->state, JobState::kPending);
  EXPECT_EQ(snap.FindNode("n-0")->allocated_mask | snap.FindNode("n-1")->allocated_mask, 0xFFu);
  EXPECT_TRUE(snap.FindNode("n-1")->drained);
  EXPECT_EQ(snap.nodes().size(), 2u);  // declared nodes are not added twice
  EXPECT_EQ(c->auth().size(), 1u);
  // New ids continue after the recovered ones.
  auto next = c->Submit(kAlice, Job("next", 1, 1));
  ASSERT_TRUE(next.ok());
  EXPECT_GT(next->value(), pending.value());
  c->Stop();
}

// A retried submission with the same Idempotency-Key returns the jobs it
// made the first time, also after a restart and after a snapshot; reused for
// another spec or count, or by another user, it makes nothing twice.
TEST_F(ControllerTest, AnIdempotencyKeyMakesItsJobsOnce) {
  const testing::TempDir tmp("rota-ctl");
  const std::string& dir = tmp.path();
  JobId one, array;
  {
    auto c = Make(std::move(SqliteStore::Open(dir + "/rota.db")).value());
    bool replayed = true;
    one = *c->SubmitArray(kAlice, Job("one", 1, 1), 1, "key-1", &replayed);
    EXPECT_FALSE(replayed);
    EXPECT_EQ(*c->SubmitArray(kAlice, Job("one", 1, 1), 1, "key-1", &replayed), one);
    EXPECT_TRUE(replayed);
    // An array larger than one chunk: the key covers every part.
    array = *c->SubmitArray(kAlice, Job("sweep", 1, 1), Controller::kArrayChunk + 5, "key-2", &replayed);
    EXPECT_FALSE(replayed);
    EXPECT_EQ(c->snapshot().FindJob(JobId(array.value() + Controller::kArrayChunk + 4))->request_id, "key-2");
    // Another user's key of the same name is theirs.
    auto bobs = c->SubmitArray(kBob, Job("one", 1, 1, "team/b"), 1, "key-1", &replayed);
    ASSERT_TRUE(bobs.ok());
    EXPECT_FALSE(replayed);
    EXPECT_NE(*bobs, one);
    c->Stop();
  }
  auto c = Make(std::move(SqliteStore::Open(dir + "/rota.db")).value());
  const size_t jobs = c->snapshot().jobs().size();
  EXPECT_EQ(jobs, 1u + Controller::kArrayChunk + 5 + 1);
  bool replayed = false;
  EXPECT_EQ(*c->SubmitArray(kAlice, Job("sweep", 1, 1), Controller::kArrayChunk + 5, "key-2", &replayed), array);
  EXPECT_TRUE(replayed);
  auto changed = c->SubmitArray(kAlice, Job("other", 1, 1), 1, "key-1", &replayed);
  EXPECT_EQ(changed.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(changed.status().message().find("was used before for job " + std::to_string(one.value())),
            std::string::npos)
      << changed.status().ToString();
  EXPECT_EQ(c->SubmitArray(kAlice, Job("sweep", 1, 1), 3, "key-2", &replayed).status().code(),
            StatusCode::kFailedPrecondition);
  EXPECT_EQ(c->snapshot().jobs().size(), jobs);  // nothing made twice
  // Compacted into a snapshot, the keys survive too.
  const std::vector<Event> compacted = CompactState(c->snapshot());
  ClusterState again;
  for (const Event& e : compacted) ASSERT_TRUE(again.Apply(e).ok());
  EXPECT_EQ(again.GetSnapshot().FindJob(one)->request_id, "key-1");
  EXPECT_EQ(again.GetSnapshot().FindJob(JobId(array.value() + 7))->request_id, "key-2");
  // Parts of one array seen out of order (a snapshot lists ended jobs
  // first): the key still covers the whole array.
  RequestIds ids;
  NoteRequestId(ids, "alice", "k", JobId(11), 1);  // ended: listed first
  NoteRequestId(ids, "alice", "k", JobId(10), 1);
  NoteRequestId(ids, "alice", "k", JobId(12), 1);
  EXPECT_EQ(ids.at("alice\nk"), (std::pair<JobId, int64_t>{JobId(10), 3}));
  c->Stop();
}

// An array is journaled chunk by chunk and answered after the last: a
// server (or its leader) stopped between chunks never answered it. At the
// next start what was committed is cancelled, with the reason, and its key
// dropped, so that the client's retry with its Idempotency-Key submits the
// whole array (before, the retry was answered as a replay of every element
// of it, of which only the first chunks existed).
TEST_F(ControllerTest, AnArrayCutShortByAStopIsCancelledAndItsRetrySubmitsItWhole) {
  const testing::TempDir tmp("rota-ctl");
  const std::string& dir = tmp.path();
  const int64_t count = Controller::kArrayChunk + 5;
  JobSpec spec = Job("sweep", 1, 1);
  ASSERT_TRUE(ResolveJobPolicy(TwoNodes(), &spec).ok());
  {
    auto store = std::move(SqliteStore::Open(dir + "/rota.db")).value();
    // Its first chunk alone, as a stop after it leaves the journal, and
    // another submission committed between its chunks (a busy server: its
    // id is past the array's reserved range).
    ASSERT_TRUE(store->Append({JobsSubmitted{.first = JobId(1), .count = Controller::kArrayChunk, .spec = spec,
                                             .at = clock.Now(), .user = "alice", .request_id = "key-3",
                                             .array = JobId(1), .array_count = count},
                               JobSubmitted{.id = JobId(static_cast<uint64_t>(count) + 1), .spec = spec, .at = clock.Now(),
                                            .user = "bob"}})
                    .ok());
  }
  auto c = Make(std::move(SqliteStore::Open(dir + "/rota.db")).value());
  const JobRecord* cut = c->snapshot().FindJob(JobId(1));
  ASSERT_NE(cut, nullptr);
  EXPECT_EQ(cut->state, JobState::kCancelled);
  EXPECT_NE(cut->end_reason.find("cut short by a stop of the server before all " + std::to_string(count) + " elements"),
            std::string::npos)
      << cut->end_reason;
  EXPECT_EQ(c->snapshot().live_jobs().size(), 1u);  // (bob's)
  bool replayed = true;
  auto retried = c->SubmitArray(kAlice, Job("sweep", 1, 1), count, "key-3", &replayed);
  ASSERT_TRUE(retried.ok()) << retried.status().ToString();
  EXPECT_FALSE(replayed);
  EXPECT_NE(*retried, JobId(1));
  EXPECT_EQ(c->snapshot().live_jobs().size(), static_cast<size_t>(count) + 1);
  // And once whole, its retry is a replay.
  EXPECT_EQ(*c->SubmitArray(kAlice, Job("sweep", 1, 1), count, "key-3", &replayed), *retried);
  EXPECT_TRUE(replayed);
  c->Stop();
  // A restart cancels nothing more.
  auto again = Make(std::move(SqliteStore::Open(dir + "/rota.db")).value());
  EXPECT_EQ(again->snapshot().live_jobs().size(), static_cast<size_t>(count) + 1);
  again->Stop();
}

// A config that drops a queue still holding live jobs is refused at start,
// naming the queue and its jobs (they would run outside every queue's
// quota, fair share and listing); nothing changes, and the previous config
// starts as before.
TEST_F(ControllerTest, AConfigThatDropsAQueueWithLiveJobsIsRefused) {
  const testing::TempDir tmp("rota-ctl");
  const std::string& dir = tmp.path();
  ClusterConfig both = TwoNodes();
  both.queues = {QueueConfig{.name = "a"}, QueueConfig{.name = "b"}};
  {
    auto c = std::make_unique<Controller>(ControllerOptions{.config = both, .clock = &clock},
                                          std::move(SqliteStore::Open(dir + "/rota.db")).value());
    ASSERT_TRUE(c->Start().ok());
    ASSERT_TRUE(c->Submit(kAlice, Job("x", 1, 1, "b")).ok());
    c->Stop();
  }
  ClusterConfig fewer = both;
  fewer.queues.pop_back();
  {
    auto c = std::make_unique<Controller>(ControllerOptions{.config = fewer, .clock = &clock},
                                          std::move(SqliteStore::Open(dir + "/rota.db")).value());
    const Status s = c->Start();
    EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
    EXPECT_EQ(s.message(),
              "queues: live jobs are in queues that are no longer leaf queues of the config: 'b' holds 1 live job (1). Keep those queues "
              "until their jobs end, or cancel the jobs first (with the previous config)");
  }
  auto c = std::make_unique<Controller>(ControllerOptions{.config = both, .clock = &clock},
                                        std::move(SqliteStore::Open(dir + "/rota.db")).value());
  ASSERT_TRUE(c->Start().ok());
  EXPECT_EQ(c->snapshot().live_jobs().size(), 1u);
  c->Stop();
}

// Compacts the stopped server's journal at `path` into a snapshot, as the
// server does every snapshot_every events.
::testing::AssertionResult CompactJournal(const std::string& path) {
  auto store = std::move(SqliteStore::Open(path)).value();
  Recovered replayed({"nvlink", "node", "rack", "spine"});
  if (Status s = store->Replay([&](const Event& e) { return replayed.Apply(e); }); !s.ok()) {
    return ::testing::AssertionFailure() << s.ToString();
  }
  const Snapshot snap = replayed.state->GetSnapshot();
  if (Status s = store->WriteSnapshot(store->last_seq(), [&](const EventSink& sink) { return CompactState(snap, sink); });
      !s.ok()) {
    return ::testing::AssertionFailure() << s.ToString();
  }
  return ::testing::AssertionSuccess();
}

// An array's key stays while any of its elements is held: a retry after its
// first elements were forgotten gets the array back, before and after a
// restart from a journal snapshot.
TEST_F(ControllerTest, AnArraysKeyOutlivesItsForgottenElements) {
  const testing::TempDir tmp("rota-ctl");
  const std::string& dir = tmp.path();
  const Duration minute = 60 * kMicrosPerSecond;
  bool replayed = false;
  JobId array;
  {
    auto c = MakeForgetting(dir + "/rota.db");
    array = *c->SubmitArray(kAlice, Job("sweep", 1, 1), 3, "key-a", &replayed);
    ASSERT_TRUE(c->Cancel(kAlice, array).ok());
    clock.Advance(61 * minute);
    c->ScheduleNow();
    ASSERT_EQ(c->snapshot().FindJob(array), nullptr);
    ASSERT_NE(c->snapshot().FindJob(JobId(array.value() + 1)), nullptr);
    auto again = c->SubmitArray(kAlice, Job("sweep", 1, 1), 3, "key-a", &replayed);
    ASSERT_TRUE(again.ok()) << again.status().ToString();
    EXPECT_EQ(*again, array);
    EXPECT_TRUE(replayed);
    c->Stop();
  }
  ASSERT_TRUE(CompactJournal(dir + "/rota.db"));
  auto c = MakeForgetting(dir + "/rota.db");
  replayed = false;
  auto again = c->SubmitArray(kAlice, Job("sweep", 1, 1), 3, "key-a", &replayed);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_EQ(*again, array);
  EXPECT_TRUE(replayed);
  EXPECT_EQ(c->snapshot().jobs().size(), 2u);  // nothing made twice
  c->Stop();
}

// An array whose last element ended first (cancelled, or a short run) and
// was kept past the retention while its others run: the last stays until
// none of them lives. Before, it was forgotten, and the next restart took
// the array for one a stop cut short and cancelled its running elements.
TEST_F(ControllerTest, ARestartKeepsAnArrayWhoseLastElementEndedFirst) {
  const testing::TempDir tmp("rota-ctl");
  const std::string& dir = tmp.path();
  const Duration minute = 60 * kMicrosPerSecond;
  bool replayed = false;
  JobId first;
  {
    auto c = MakeForgetting(dir + "/rota.db");
    first = *c->SubmitArray(kAlice, Job("sweep", 1, 8), 3, "key-l", &replayed);
    c->ScheduleNow();
    const JobId last(first.value() + 2);
    ASSERT_EQ(c->snapshot().FindJob(first)->state, JobState::kRunning);
    ASSERT_EQ(c->snapshot().FindJob(last)->state, JobState::kPending);  // (two nodes)
    ASSERT_TRUE(c->Cancel(kAlice, last).ok());
    clock.Advance(61 * minute);
    c->ScheduleNow();
    EXPECT_NE(c->snapshot().FindJob(last), nullptr) << "the last element was forgotten while two others ran";
    c->Stop();
  }
  {
    auto c = MakeForgetting(dir + "/rota.db");
    for (uint64_t k = 0; k < 2; ++k) {
      EXPECT_EQ(c->snapshot().FindJob(JobId(first.value() + k))->state, JobState::kRunning) << "element " << k;
    }
    // Once none lives, all go.
    ASSERT_TRUE(c->Cancel(kAlice, first).ok());
    ASSERT_TRUE(c->Cancel(kAlice, JobId(first.value() + 1)).ok());
    clock.Advance(61 * minute);
    c->ScheduleNow();
    EXPECT_EQ(c->snapshot().jobs().size(), 0u);
    c->Stop();
  }
}

// A job that ended job_retention ago leaves the state (and its key with
// it), checked as time passes; a live job and one that ended since stay.
// A restart from a journal snapshot that holds none of them (the highest
// id among them) keeps them gone and never issues a forgotten id again.
TEST_F(ControllerTest, EndedJobsAreForgottenAfterTheRetention) {
  const testing::TempDir tmp("rota-ctl");
  const std::string& dir = tmp.path();
  const Duration minute = 60 * kMicrosPerSecond;
  ControllerOptions o{.config = TwoNodes(), .clock = &clock, .job_retention = 60 * minute};
  JobId running, late, early;
  {
    auto c = std::make_unique<Controller>(o, std::move(SqliteStore::Open(dir + "/rota.db")).value());
    ASSERT_TRUE(c->Start().ok());
    running = *c->Submit(kAlice, Job("runs", 1, 8));
    late = *c->Submit(kAlice, Job("late", 1, 1));
    bool replayed = true;
    early = *c->SubmitArray(kAlice, Job("early", 1, 1), 1, "key-e", &replayed);
    ASSERT_FALSE(replayed);
    c->ScheduleNow();
    ASSERT_EQ(c->snapshot().FindJob(running)->state, JobState::kRunning);
    ASSERT_TRUE(c->Cancel(kAlice, early).ok());
    clock.Advance(30 * minute);
    ASSERT_TRUE(c->Cancel(kAlice, late).ok());
    clock.Advance(29 * minute);
    c->ScheduleNow();
    EXPECT_NE(c->snapshot().FindJob(early), nullptr);  // 59 minutes: not yet
    clock.Advance(2 * minute);
    c->ScheduleNow();
    Snapshot snap = c->snapshot();
    EXPECT_EQ(snap.FindJob(early), nullptr);
    EXPECT_NE(snap.FindJob(late), nullptr);
    EXPECT_EQ(snap.FindJob(running)->state, JobState::kRunning);
    EXPECT_EQ(snap.issued_below(), early.value() + 1);
    // The key went with its job: a new submission under it makes a new job.
    auto again = c->SubmitArray(kAlice, Job("early", 1, 1), 1, "key-e", &replayed);
    ASSERT_TRUE(again.ok());
    EXPECT_FALSE(replayed);
    EXPECT_GT(again->value(), early.value());
    ASSERT_TRUE(c->Cancel(kAlice, *again).ok());
    clock.Advance(61 * minute);
    c->ScheduleNow();
    EXPECT_EQ(c->snapshot().FindJob(late), nullptr);
    EXPECT_EQ(c->snapshot().FindJob(*again), nullptr);
    EXPECT_EQ(c->snapshot().jobs().size(), 1u);
    // A journal snapshot of this state: nothing of the forgotten jobs but
    // the ids they took.
    Recovered from_snapshot({"nvlink", "node", "rack", "spine"});
    for (const Event& e : CompactState(c->snapshot())) ASSERT_TRUE(from_snapshot.Apply(e).ok());
    EXPECT_EQ(from_snapshot.next_job_id, again->value() + 1);
    EXPECT_EQ(from_snapshot.state->GetSnapshot().jobs().size(), 1u);
    EXPECT_TRUE(from_snapshot.request_ids.empty());
    c->Stop();
  }
  // What is left of the forgotten jobs is the snapshot's JobsForgotten
  // (none of their JobSubmitted).
  ASSERT_TRUE(CompactJournal(dir + "/rota.db"));
  auto c = std::make_unique<Controller>(o, std::move(SqliteStore::Open(dir + "/rota.db")).value());
  ASSERT_TRUE(c->Start().ok());
  EXPECT_EQ(c->snapshot().jobs().size(), 1u);
  EXPECT_EQ(c->snapshot().FindJob(early), nullptr);
  auto next = c->Submit(kAlice, Job("next", 1, 1));
  ASSERT_TRUE(next.ok());
  EXPECT_EQ(next->value(), early.value() + 2);
  c->Stop();
}

// The logs the server kept of a job (shipped by its agents) go when the job
// is forgotten, and those of jobs forgotten before a restart (a crash
// between the two) once after the start. Only the logs: no link is
// followed, and what else the directory holds (in `rota up`, the local
// agent's job directory with the task's work/) stays.
TEST_F(ControllerTest, AForgottenJobsLogsAreRemoved) {
  const testing::TempDir tmp("rota-ctl");
  const std::string& dir = tmp.path();
  const std::string logs = dir + "/logs";
  const Duration minute = 60 * kMicrosPerSecond;
  auto write = [](const std::string& path) {
    std::filesystem::create_directories(std::filesystem::path(path).parent_path());
    std::ofstream(path) << "line\n";
  };
  // Before the start: the logs of a job this journal does not hold (forgotten before a crash).
  write(logs + "/99/main-0.log");
  write(dir + "/outside.log");
  std::filesystem::create_symlink(dir + "/outside.log", logs + "/99/link.log");
  ControllerOptions o{.config = TwoNodes(), .clock = &clock, .job_retention = 60 * minute, .logs_dir = logs};
  auto c = std::make_unique<Controller>(o, std::move(SqliteStore::Open(dir + "/rota.db")).value());
  ASSERT_TRUE(c->Start().ok());
  const JobId kept = *c->Submit(kAlice, Job("kept", 1, 1));
  const JobId ended = *c->Submit(kAlice, Job("ended", 1, 1));
  const JobId capped = *c->Submit(kAlice, Job("capped", 1, 1));
  write(logs + "/" + std::to_string(kept.value()) + "/main-0.log");
  write(logs + "/" + std::to_string(ended.value()) + "/main-0.log");
  write(logs + "/" + std::to_string(ended.value()) + "/work/data");
  write(logs + "/" + std::to_string(capped.value()) + "/main-0.log");
  write(logs + "/" + std::to_string(capped.value()) + "/.log-capped");  // (StoreLogs' mark)
  c->ScheduleNow();
  EXPECT_FALSE(std::filesystem::exists(logs + "/99")) << "the logs of a job the state does not hold stay";
  EXPECT_TRUE(std::filesystem::exists(dir + "/outside.log")) << "a link was followed";
  ASSERT_TRUE(c->Cancel(kAlice, ended).ok());
  ASSERT_TRUE(c->Cancel(kAlice, capped).ok());
  clock.Advance(61 * minute);
  c->ScheduleNow();
  ASSERT_EQ(c->snapshot().FindJob(ended), nullptr);
  EXPECT_FALSE(std::filesystem::exists(logs + "/" + std::to_string(capped.value())));
  EXPECT_FALSE(std::filesystem::exists(logs + "/" + std::to_string(ended.value()) + "/main-0.log"));
  EXPECT_TRUE(std::filesystem::exists(logs + "/" + std::to_string(ended.value()) + "/work/data"));
  EXPECT_TRUE(std::filesystem::exists(logs + "/" + std::to_string(kept.value()) + "/main-0.log"));
  c->Stop();
}

}  // namespace
}  // namespace rota::server

namespace rota::server {
namespace {

// A job its queue could never admit is refused at submission, saying how to
// get in (issue: it used to be accepted, then cancelled as unresolvable).
TEST(ControllerSubmit, AJobOverItsQueuesLimitIsRefusedWithTheFix) {
  ManualClock clock{1'000'000};
  ClusterConfig config = TwoNodes();
  config.queues = {{.name = "small", .quota = {{"H100", 4}}, .borrowing_limit = {{"H100", 8}}}};
  Controller c({.config = config, .clock = &clock}, std::make_unique<MemoryStore>());
  ASSERT_TRUE(c.Start().ok());
  auto over = c.Submit(kAlice, Job("big", 1, 8, "small"));
  ASSERT_EQ(over.status().code(), StatusCode::kOutOfRange) << over.status().ToString();
  EXPECT_NE(over.status().message().find("ExceedsQueueLimit: needs 8 GPUs; queue small"), std::string::npos)
      << over.status().message();
  EXPECT_NE(over.status().message().find("set `preemptible: true`"), std::string::npos) << over.status().message();
  JobSpec borrowing = Job("big", 1, 8, "small");
  borrowing.preemptible = true;
  EXPECT_TRUE(c.Submit(kAlice, borrowing).ok());  // within 4 + 8 borrowable
  EXPECT_EQ(c.Submit(kAlice, Job("huge", 2, 8, "small")).status().code(), StatusCode::kOutOfRange);  // 16 > 12
  EXPECT_EQ(c.snapshot().jobs().size(), 1u);
  c.Stop();
}

// A server with no node at all accepts work and says why it waits.
TEST(ControllerSubmit, BeforeAnyNodeRegistersAJobWaitsAndSaysWhy) {
  ManualClock clock{1'000'000};
  ClusterConfig config;  // no node groups: nodes come from agents
  Controller c({.config = config, .clock = &clock}, std::make_unique<MemoryStore>());
  ASSERT_TRUE(c.Start().ok());
  JobSpec spec = Job("early", 1, 1, "default");
  auto id = c.Submit(kAlice, spec);
  ASSERT_TRUE(id.ok()) << id.status().ToString();
  c.ScheduleNow();
  const JobRecord* job = c.snapshot().FindJob(*id);
  ASSERT_NE(job, nullptr);
  EXPECT_EQ(job->state, JobState::kPending);
  auto why = c.pending_reason(*id);
  ASSERT_TRUE(why.has_value());
  EXPECT_EQ(why->message, "the cluster has no nodes yet: it waits for one to register");
  c.Stop();
}

}  // namespace
// A queue's status, as the dashboard colours it and `rota queues` prints it.
TEST_F(ControllerTest, AQueuesStatusSaysStarvedBorrowingOrOverItsShare) {
  EXPECT_EQ(QueueStatus(/*pending=*/2, /*held=*/1, /*guaranteed=*/4, /*borrowed=*/0, true, 8), "starved");
  EXPECT_EQ(QueueStatus(0, 1, 4, 0, true, 8), "ok") << "below its guarantee with nothing waiting is not starved";
  EXPECT_EQ(QueueStatus(0, 6, 4, 2, true, 8), "borrowing");
  EXPECT_EQ(QueueStatus(0, 6, 0, 6, false, 8), "ok") << "without a quota, holding is not borrowing";
  EXPECT_EQ(QueueStatus(1, 12, 0, 12, false, 8), "over_share");
  EXPECT_EQ(QueueStatus(0, 8, 0, 8, false, 8), "ok") << "at its share exactly";
  auto c = Make(std::make_unique<MemoryStore>());
  const auto queues = QueuesView(*c, c->snapshot());
  ASSERT_EQ(queues.size(), 2u);
  for (const auto& q : queues) EXPECT_EQ(q["status"], "ok") << q.dump();
}

// A drained node whose agent goes silent shows as lost (the drain stays in its view).
TEST_F(ControllerTest, ADrainedNodeThatGoesSilentShowsAsLost) {
  auto c = Make(std::make_unique<MemoryStore>());
  ASSERT_TRUE(c->RegisterNode(agent0, c->snapshot().FindNode("n-0")->spec, true, "").ok());
  ASSERT_TRUE(c->SetDrain(kAdmin, "n-0", true, "PSU swap").ok());
  Snapshot snap = c->snapshot();
  EXPECT_EQ(NodeStateName(*c, *snap.FindNode("n-0"), c->nodes_live()), "drained");
  EXPECT_EQ(NodeStateName(*c, *snap.FindNode("n-1"), c->nodes_live()), "declared");
  clock.Advance(31 * kMicrosPerSecond);  // past the 30 s node timeout
  EXPECT_EQ(NodeStateName(*c, *snap.FindNode("n-0"), c->nodes_live()), "lost");
  const auto view = NodeView(*c, snap, *snap.FindNode("n-0"), c->nodes_live());
  EXPECT_EQ(view["drained"], true);
  EXPECT_EQ(view["drain_reason"], "PSU swap");
}

// A store whose journal refuses every append (a full disk) once `full`, and
// whose first append after Arm() waits for Release (so that later calls queue
// into one batch); with RefuseLaterParts, it refuses a batch that holds an
// array's later part (the disk fills in the middle of an array). In memory,
// or over `inner`.
class FullDiskStore final : public Store {
 public:
  explicit FullDiskStore(std::unique_ptr<Store> inner = std::make_unique<MemoryStore>()) : inner_(std::move(inner)) {}
  StatusOr<uint64_t> Append(const std::vector<Event>& events) override {
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (armed_ && !held_once_) {
        held_once_ = true;
        waiting_ = true;
        cv_.notify_all();
        cv_.wait(lock, [&] { return go_; });
      }
      if (full_) return Status(StatusCode::kInsufficientStorage, "disk full");
    }
    if (refuse_later_parts_) {
      for (const Event& e : events) {
        const auto* part = std::get_if<JobsSubmitted>(&e);
        if (part != nullptr && part->first != part->array) {
          if (full_after_refusal_) Full(true);
          return Status(StatusCode::kInsufficientStorage, "disk full");
        }
      }
    }
    return inner_->Append(events);
  }
  Status Replay(const std::function<Status(const Event&)>& fn) override { return inner_->Replay(fn); }
  Status WriteSnapshot(uint64_t seq, const EventSource& compacted) override {
    return inner_->WriteSnapshot(seq, compacted);
  }
  uint64_t last_seq() const override { return inner_->last_seq(); }
  Status PutToken(const TokenRecord& token) override { return inner_->PutToken(token); }
  StatusOr<std::vector<TokenRecord>> Tokens() override { return inner_->Tokens(); }
  StatusOr<uint64_t> Keep(const std::string& name, uint64_t value) override { return inner_->Keep(name, value); }
  StatusOr<std::optional<uint64_t>> Kept(const std::string& name) override { return inner_->Kept(name); }
  Status PutUsage(const std::vector<UsageRecord>& records) override { return inner_->PutUsage(records); }
  StatusOr<std::vector<UsageRecord>> Usage(TimePoint since, TimePoint until) override { return inner_->Usage(since, until); }
  StatusOr<std::vector<UsageRecord>> UsageOfJob(JobId job) override { return inner_->UsageOfJob(job); }
  StatusOr<int64_t> DropUsage(TimePoint before) override { return inner_->DropUsage(before); }
  Status PutGpuHistory(const std::vector<GpuHistoryBlock>& blocks) override {
    if (history_full_) return Status(StatusCode::kInsufficientStorage, "disk full");
    return inner_->PutGpuHistory(blocks);
  }
  void HistoryFull(bool full) { history_full_ = full; }
  void Full(bool full) {
    std::lock_guard<std::mutex> lock(mu_);
    full_ = full;
  }
  void RefuseLaterParts(bool refuse, bool then_full = false) {
    refuse_later_parts_ = refuse;
    full_after_refusal_ = then_full;
  }
  StatusOr<std::vector<GpuHistoryBlock>> GpuHistory(const std::string& node, int32_t step_s, TimePoint since,
                                                    TimePoint until) override {
    return inner_->GpuHistory(node, step_s, since, until);
  }
  StatusOr<int64_t> DropGpuHistory(int32_t step_s, TimePoint before) override {
    return inner_->DropGpuHistory(step_s, before);
  }
  void Arm() {
    std::lock_guard<std::mutex> lock(mu_);
    armed_ = true;
  }
  void WaitHeld() {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [&] { return waiting_; });
  }
  void Release(bool full) {
    std::lock_guard<std::mutex> lock(mu_);
    full_ = full;
    go_ = true;
    cv_.notify_all();
  }

 private:
  std::unique_ptr<Store> inner_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool armed_ = false, held_once_ = false, waiting_ = false, go_ = false, full_ = false;
  std::atomic<bool> history_full_ = false, refuse_later_parts_ = false;
  std::atomic<bool> full_after_refusal_ = false;  // (RefuseLaterParts: the disk is full from then on)
};

// A takeover of a node that the disk refused (full) is not half made: the
// node's table of live agents is put back with the state, so the next try
// is a takeover again and gives the old gang up. Before, the refused try
// left the new agent in that table, and the retry, no longer "another"
// agent, was handed the old attempt's rank beside the gang's other ranks.
TEST_F(ControllerTest, ATakeOverTheDiskRefusedIsATakeOverWhenRetried) {
  auto owned = std::make_unique<FullDiskStore>();
  FullDiskStore* store = owned.get();
  auto c = std::make_unique<Controller>(ControllerOptions{.config = TwoNodes(), .clock = &clock,
                                                          .schedule_interval = 3600 * kMicrosPerSecond,
                                                          .cycle_on_change = false},
                                        std::move(owned));
  ASSERT_TRUE(c->Start().ok());
  const Principal agent1{"n-1", Role::kAgent, "n-1"};
  const NodeSpec spec0 = c->snapshot().FindNode("n-0")->spec;
  ASSERT_TRUE(c->RegisterNode(agent0, spec0, true, "", false, "aaaa").ok());
  const Pair pair = RunPair(*c, agent1);
  ASSERT_TRUE(pair.id.has_value());
  clock.Advance(33 * kMicrosPerSecond);
  ASSERT_TRUE(c->Heartbeat(agent1, {.node = "n-1", .tasks = {{*pair.id, 0, pair.on1, 0}}}).ok());
  store->Full(true);
  EXPECT_EQ(c->RegisterNode(agent0, spec0, true, "", false, "bbbb").code(), StatusCode::kInsufficientStorage);
  store->Full(false);
  EXPECT_EQ(c->snapshot().FindJob(*pair.id)->state, JobState::kRunning);
  EXPECT_EQ(c->snapshot().FindNode("n-0")->agent, "aaaa");
  ASSERT_TRUE(c->RegisterNode(agent0, spec0, true, "", false, "bbbb").ok());
  const JobRecord* job = c->snapshot().FindJob(*pair.id);
  EXPECT_NE(job->state, JobState::kRunning) << "the retried takeover handed n-0's rank to the new agent";
  EXPECT_NE(job->last_requeue_reason.find("taken over by another agent (instance bbbb)"), std::string::npos)
      << job->last_requeue_reason;
  EXPECT_EQ(c->snapshot().FindNode("n-0")->agent, "bbbb");
  c->Stop();
}

// GPU history on a full disk: the blocks the store refuses are kept and
// written by a later flush; nothing is lost meanwhile, and the server runs on.
// /metrics, sample by sample, as printf's %g and %d write the numbers:
// the per-GPU families, the job holding a GPU whole in dcgm-exporter's
// labels (none on a free GPU), and GPM as a ratio.
TEST_F(ControllerTest, MetricsWriteEachGpusSamplesExactly) {
  auto c = MakeMeasured(std::make_unique<MemoryStore>());
  struct Case {
    std::string name;
    JobId id;
    int32_t gpu = 0;
  } cases[] = {{"held", {}, 0}};
  ASSERT_TRUE(RunOnN0(*c, cases));
  const int32_t held = cases[0].gpu, free = held == 0 ? 1 : 0;
  GpuTelemetry a{.index = held, .utilization_pct = 47, .memory_used = 3000, .temperature_c = 61, .power_w = 250};
  a.sm_active_pct = 33;
  GpuTelemetry b{.index = free, .utilization_pct = 100, .memory_used = 0, .temperature_c = 30, .power_w = 1000};
  ASSERT_TRUE(c->Heartbeat(agent0, HeartbeatReport{"n-0", {a, b}, {}}).ok());
  const std::string out = RenderMetrics(*c);
  const std::string h = std::to_string(held), f = std::to_string(free), job = std::to_string(cases[0].id.value());
  for (const std::string& line : std::vector<std::string>{
           "rota_gpu_utilization_ratio{node=\"n-0\",gpu=\"" + h + "\",simulated=\"true\"} 0.47\n",
           "rota_gpu_utilization_ratio{node=\"n-0\",gpu=\"" + f + "\",simulated=\"true\"} 1\n",
           "rota_gpu_memory_used_bytes{node=\"n-0\",gpu=\"" + h + "\",simulated=\"true\"} 3.14573e+09\n",
           "rota_gpu_power_watts{node=\"n-0\",gpu=\"" + f + "\",simulated=\"true\"} 1000\n",
           "DCGM_FI_DEV_FB_USED{gpu=\"" + h + "\",device=\"nvidia" + h + "\",model_name=\"H100\",hostname=\"n-0\",job=\"" + job +
               "\"} 3000\n",
           "DCGM_FI_DEV_GPU_TEMP{gpu=\"" + f + "\",device=\"nvidia" + f + "\",model_name=\"H100\",hostname=\"n-0\"} 30\n",
           "DCGM_FI_PROF_SM_ACTIVE{gpu=\"" + h + "\",device=\"nvidia" + h + "\",model_name=\"H100\",hostname=\"n-0\",job=\"" +
               job + "\"} 0.33\n",
           std::string("rota_node_gpus_allocated{node=\"n-0\"} 1\n"),
       }) {
    EXPECT_NE(out.find(line), std::string::npos) << line << out;
  }
  // A GPU without GPM has no GPM sample.
  EXPECT_EQ(out.find("DCGM_FI_PROF_SM_ACTIVE{gpu=\"" + f + "\""), std::string::npos);
  c->Stop();
}

TEST_F(ControllerTest, GpuHistoryRefusedByAFullDiskIsWrittenLater) {
  auto owned = std::make_unique<FullDiskStore>();
  FullDiskStore* store = owned.get();
  ClusterConfig config = TwoNodes();
  auto c = std::make_unique<Controller>(ControllerOptions{.config = config, .clock = &clock, .history_flush = 0},
                                        std::move(owned));
  ASSERT_TRUE(c->Start().ok());
  ASSERT_TRUE(c->RegisterNode(agent0, c->snapshot().FindNode("n-0")->spec, true, "").ok());
  auto report = [&](int32_t index) {
    GpuTelemetry g{.index = index, .utilization_pct = 40};
    g.samples = 10;
    g.activity.assign(ActivityHistogram::kBuckets, 0);
    g.activity[ActivityHistogram::Bucket(40)] = 10;
    g.energy_mj = 2'000'000;
    return HeartbeatReport{"n-0", {g}, {}};
  };
  ASSERT_TRUE(c->Heartbeat(agent0, report(0)).ok());
  ASSERT_TRUE(c->Heartbeat(agent0, report(99)).ok());  // a GPU n-0 does not have
  clock.Advance(120 * kMicrosPerSecond);
  store->HistoryFull(true);
  c->FlushHistory();
  const TimePoint hour = BlockStart(GpuHistoryBlock::kMinute, clock.Now() - 120 * kMicrosPerSecond);
  EXPECT_TRUE(store->GpuHistory("n-0", 60, hour, hour + 1)->empty());
  store->HistoryFull(false);
  c->FlushHistory();
  auto written = store->GpuHistory("n-0", 60, hour, hour + 1);
  ASSERT_TRUE(written.ok());
  ASSERT_EQ(written->size(), 1u);  // GPU 0's hour; not GPU 99's
  EXPECT_EQ((*written)[0].gpu, 0);
  int64_t samples = 0;
  for (const GpuPoint& p : (*written)[0].points) samples += p.samples;
  EXPECT_EQ(samples, 10);
  c->Stop();
}

// The first admin token is stored beside the journal, not in it: a batch
// that a full disk refuses (a submission, a cycle's binds) must not refuse it
// too, or a server restarted on a full disk exits at once.
TEST_F(ControllerTest, TheBootstrapTokenIsNotRefusedWithABatchAFullDiskRefused) {
  auto raw = std::make_unique<FullDiskStore>();
  FullDiskStore* store = raw.get();
  ControllerOptions o{.config = TwoNodes(), .clock = &clock};
  auto c = std::make_unique<Controller>(o, std::move(raw));
  ASSERT_TRUE(c->Start().ok());
  store->Arm();
  // The next journaled batch (job 1) holds the actor in Append.
  std::thread first([&] { (void)c->Submit(kAlice, Job("first", 1, 1)); });
  store->WaitHeld();
  StatusOr<JobId> second = InternalError("not run");
  StatusOr<std::string> token = InternalError("not run");
  std::thread both([&] {
    std::thread t([&] { second = c->Submit(kAlice, Job("second", 1, 1)); });
    token = c->BootstrapAdminToken();
    t.join();
  });
  // Both queue behind the held append (they go in one batch), then the disk fills.
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  store->Release(/*full=*/true);
  first.join();
  both.join();
  EXPECT_EQ(second.status().code(), StatusCode::kInsufficientStorage);
  ASSERT_TRUE(token.ok()) << token.status().ToString();
  EXPECT_FALSE(token->empty());
  EXPECT_TRUE(c->Authenticate("Bearer " + *token).ok());
}

// The bootstrap token is saved where the admin finds it before the store
// has it: a save that fails (a full disk) stores nothing, so the next start
// makes one again, rather than a token nobody holds locking the admin out.
TEST_F(ControllerTest, TheBootstrapTokenIsStoredOnlyOnceSaved) {
  auto c = Make(std::make_unique<MemoryStore>());
  auto refused = c->BootstrapAdminToken([](const std::string&) { return UnavailableError("admin.token: cannot write"); });
  EXPECT_EQ(refused.status().message(), "admin.token: cannot write");
  std::string saved;
  auto token = c->BootstrapAdminToken([&](const std::string& t) {
    saved = t;
    return Status::Ok();
  });
  ASSERT_TRUE(token.ok()) << token.status().ToString();
  EXPECT_EQ(*token, saved);
  EXPECT_TRUE(c->Authenticate("Bearer " + saved).ok());
  EXPECT_EQ(*c->BootstrapAdminToken(), "");  // (a store with a token makes none again)
}

// A forget pass that a full disk refuses changes nothing: the job, its
// Idempotency-Key and the ids issued stay as they were, and the server runs
// on. Once the disk has room, the next pass (a minute on) forgets the job.
TEST_F(ControllerTest, AForgetPassAFullDiskRefusesChangesNothing) {
  auto owned = std::make_unique<FullDiskStore>();
  FullDiskStore* store = owned.get();
  const Duration minute = 60 * kMicrosPerSecond;
  auto c = std::make_unique<Controller>(
      ControllerOptions{.config = TwoNodes(), .clock = &clock, .job_retention = 60 * minute}, std::move(owned));
  ASSERT_TRUE(c->Start().ok());
  bool replayed = true;
  const JobId ended = *c->SubmitArray(kAlice, Job("ended", 1, 1), 1, "key-f", &replayed);
  ASSERT_FALSE(replayed);
  ASSERT_TRUE(c->Cancel(kAlice, ended).ok());
  const uint64_t issued = c->snapshot().issued_below();
  store->Release(/*full=*/true);  // (before the clock moves: the loop may run a pass of its own at any time)
  clock.Advance(61 * minute);
  c->ScheduleNow();  // the pass: refused
  ASSERT_NE(c->snapshot().FindJob(ended), nullptr);
  EXPECT_EQ(c->snapshot().FindJob(ended)->state, JobState::kCancelled);
  EXPECT_EQ(c->snapshot().issued_below(), issued);
  auto retried = c->SubmitArray(kAlice, Job("ended", 1, 1), 1, "key-f", &replayed);  // (journals nothing)
  ASSERT_TRUE(retried.ok()) << retried.status().ToString();
  EXPECT_TRUE(replayed);
  EXPECT_EQ(*retried, ended);
  EXPECT_EQ(c->Submit(kAlice, Job("more", 1, 1)).status().code(), StatusCode::kInsufficientStorage);
  store->Release(/*full=*/false);
  c->ScheduleNow();  // within the minute: no pass
  EXPECT_NE(c->snapshot().FindJob(ended), nullptr);
  clock.Advance(minute);
  c->ScheduleNow();
  EXPECT_EQ(c->snapshot().FindJob(ended), nullptr);
  EXPECT_EQ(c->snapshot().issued_below(), ended.value() + 1);  // (the refused submission took no id)
  auto fresh = c->SubmitArray(kAlice, Job("ended", 1, 1), 1, "key-f", &replayed);
  ASSERT_TRUE(fresh.ok()) << fresh.status().ToString();
  EXPECT_FALSE(replayed);  // the key went with its job
  EXPECT_EQ(fresh->value(), ended.value() + 1);
  c->Stop();
}

// A large array refused by a full disk holds nothing against the pending
// limits: its rest was reserved on the actor beside the state the refusal
// restores (three such refusals held 6,015 jobs, and the same array was
// then refused with 429 once the disk had room).
TEST_F(ControllerTest, AnArrayAFullDiskRefusedReservesNothing) {
  ClusterConfig config = TwoNodes();
  config.limits.max_pending_per_user = 3 * Controller::kArrayChunk;
  auto owned = std::make_unique<FullDiskStore>();
  FullDiskStore* store = owned.get();
  auto c = std::make_unique<Controller>(ControllerOptions{.config = config, .clock = &clock}, std::move(owned));
  ASSERT_TRUE(c->Start().ok());
  const int64_t count = 2 * Controller::kArrayChunk + 5;
  store->Full(true);
  for (int i = 0; i < 3; ++i) {
    EXPECT_EQ(c->SubmitArray(kAlice, Job("sweep", 1, 1), count).status().code(), StatusCode::kInsufficientStorage);
  }
  store->Full(false);
  auto accepted = c->SubmitArray(kAlice, Job("sweep", 1, 1), count);
  EXPECT_TRUE(accepted.ok()) << accepted.status().ToString();
}

// A submission refused on the actor (no node could hold it, a limit) keeps
// no Idempotency-Key: before, the key was noted before the checks, and where
// the refused call shared its batch with another that journaled something,
// it named the ids the next submission took: the client's retry with a
// fixed spec was refused ("used before ... with a different job spec") or
// handed another user's job.
TEST_F(ControllerTest, ARefusedSubmissionKeepsNoIdempotencyKey) {
  auto c = Make(std::make_unique<MemoryStore>());
  for (int round = 0; round < 20; ++round) {
    const std::string key = "retry-" + std::to_string(round);
    std::vector<std::thread> others;
    for (int k = 0; k < 8; ++k) {
      others.emplace_back([&] { EXPECT_TRUE(c->Submit(kBob, Job("other", 1, 1)).ok()); });
    }
    bool replayed = false;
    const auto refused = c->SubmitArray(kAlice, Job("huge", 1, 64), 1, key, &replayed);  // (8-GPU nodes)
    for (std::thread& t : others) t.join();
    ASSERT_EQ(refused.status().code(), StatusCode::kOutOfRange) << refused.status().ToString();
    const auto retried = c->SubmitArray(kAlice, Job("fixed", 1, 1), 1, key, &replayed);
    ASSERT_TRUE(retried.ok()) << "round " << round << ": " << retried.status().ToString();
    EXPECT_FALSE(replayed) << "round " << round;
    EXPECT_EQ(c->snapshot().FindJob(*retried)->user, "alice");
    EXPECT_EQ(c->snapshot().FindJob(*retried)->spec().name, "fixed");
  }
  c->Stop();
}

// A user's pending specs are bounded in bytes, not only in count: 100,000
// pending jobs with a 1 MiB environment each (the body limit) would be
// 100 GiB of server memory. An array's elements share one spec: it counts
// once. Another user is not held back; a job that starts or ends frees its
// part.
TEST_F(ControllerTest, AUsersPendingSpecsAreBoundedInBytes) {
  ClusterConfig config = TwoNodes();
  config.limits.max_pending_bytes_per_user = 1 << 20;
  // (Nothing is scheduled but by ScheduleNow: the jobs stay pending.)
  auto c = std::make_unique<Controller>(ControllerOptions{.config = config, .clock = &clock,
                                                          .schedule_interval = 3600 * kMicrosPerSecond,
                                                          .cycle_on_change = false},
                                        std::make_unique<MemoryStore>());
  ASSERT_TRUE(c->Start().ok());
  JobSpec heavy = Job("heavy", 1, 1);
  for (const char* name : {"A", "B", "C"}) heavy.tasks[0].env[name] = std::string(100 << 10, 'x');  // (300 KiB)
  std::vector<JobId> ids;
  for (int i = 0; i < 3; ++i) {
    auto id = c->Submit(kAlice, heavy);
    ASSERT_TRUE(id.ok()) << id.status().ToString();
    ids.push_back(*id);
  }
  EXPECT_GE(c->snapshot().PendingBytesOfUser("alice"), 900 << 10);
  const auto refused = c->Submit(kAlice, heavy);
  EXPECT_EQ(refused.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(refused.status().message().find("more would pass the limit (limits.max_pending_bytes_per_user: 1 MiB)"),
            std::string::npos)
      << refused.status().message();
  EXPECT_TRUE(c->Submit(kBob, heavy).ok()) << "another user is not held back";
  // One cancelled frees its part; then 1,000 copies in one array count once.
  ASSERT_TRUE(c->Cancel(kAlice, ids[0]).ok());
  auto array = c->SubmitArray(kAlice, heavy, 1000);
  ASSERT_TRUE(array.ok()) << array.status().ToString();
  EXPECT_LT(c->snapshot().PendingBytesOfUser("alice"), 1 << 20);
  EXPECT_EQ(c->Submit(kAlice, heavy).status().code(), StatusCode::kResourceExhausted);
  // Started jobs are not pending: their part is free again.
  c->ScheduleNow();
  EXPECT_LT(c->snapshot().PendingBytesOfUser("alice"), 700 << 10);
  EXPECT_TRUE(c->Submit(kAlice, heavy).ok());
  c->Stop();
}

// An array a later part of which the store refuses, and then its take-back
// too (the disk stays full): its committed elements never start (they wait
// for a last element that will not come) and are cancelled once the store
// writes again. Before, they started between the chunks, and waited on as
// accepted work after the client was told the array failed.
TEST_F(ControllerTest, AnArrayWhoseTakeBackWasRefusedIsCancelledOnceTheStoreWrites) {
  auto owned = std::make_unique<FullDiskStore>();
  FullDiskStore* store = owned.get();
  auto c = std::make_unique<Controller>(ControllerOptions{.config = TwoNodes(), .clock = &clock}, std::move(owned));
  ASSERT_TRUE(c->Start().ok());
  store->RefuseLaterParts(true, /*then_full=*/true);
  bool replayed = false;
  auto refused = c->SubmitArray(kAlice, Job("sweep", 1, 1), Controller::kArrayChunk + 5, "k", &replayed);
  ASSERT_EQ(refused.status().code(), StatusCode::kInsufficientStorage);
  EXPECT_NE(refused.status().message().find("could not be taken back yet"), std::string::npos) << refused.status().ToString();
  store->RefuseLaterParts(false);
  c->ScheduleNow();  // (the disk still full: nothing changes, nothing starts)
  const Snapshot held = c->snapshot();
  ASSERT_NE(held.FindJob(JobId(1)), nullptr);
  EXPECT_EQ(held.FindJob(JobId(1))->state, JobState::kPending);
  store->Full(false);
  c->ScheduleNow();
  const Snapshot after = c->snapshot();
  for (uint64_t id : {uint64_t{1}, uint64_t{Controller::kArrayChunk}}) {
    ASSERT_NE(after.FindJob(JobId(id)), nullptr) << id;
    EXPECT_EQ(after.FindJob(JobId(id))->state, JobState::kCancelled) << id;
  }
  EXPECT_TRUE(c->Submit(kAlice, Job("after", 1, 1)).ok());
  c->Stop();
}

// An array a later part of which the store refuses is not accepted: the
// parts committed before it are cancelled, and its Idempotency-Key goes with
// them, on the running server and after a restart from a journal snapshot
// alike, so a retry makes the array anew (not the cancelled jobs back).
TEST_F(ControllerTest, AnArrayNotAcceptedLeavesNoKeyBehind) {
  const testing::TempDir tmp("rota-ctl");
  const std::string& dir = tmp.path();
  const ControllerOptions o{.config = TwoNodes(), .clock = &clock};
  const int64_t count = Controller::kArrayChunk + 5;  // two parts
  bool replayed = true;
  JobId live_retry;
  {
    auto owned = std::make_unique<FullDiskStore>(std::move(SqliteStore::Open(dir + "/rota.db")).value());
    FullDiskStore* store = owned.get();
    auto c = std::make_unique<Controller>(o, std::move(owned));
    ASSERT_TRUE(c->Start().ok());
    store->RefuseLaterParts(true);
    for (const char* key : {"k-live", "k-restart"}) {
      auto refused = c->SubmitArray(kAlice, Job("sweep", 1, 1), count, key, &replayed);
      ASSERT_EQ(refused.status().code(), StatusCode::kInsufficientStorage) << key;
      EXPECT_NE(refused.status().message().find("array not accepted"), std::string::npos) << refused.status().ToString();
    }
    store->RefuseLaterParts(false);
    auto retried = c->SubmitArray(kAlice, Job("sweep", 1, 1), count, "k-live", &replayed);
    ASSERT_TRUE(retried.ok()) << retried.status().ToString();
    EXPECT_FALSE(replayed);
    live_retry = *retried;
    EXPECT_NE(c->snapshot().FindJob(live_retry)->state, JobState::kCancelled);  // (pending, or bound already)
    c->Stop();
  }
  ASSERT_TRUE(CompactJournal(dir + "/rota.db"));
  auto c = std::make_unique<Controller>(o, std::move(SqliteStore::Open(dir + "/rota.db")).value());
  ASSERT_TRUE(c->Start().ok());
  auto again = c->SubmitArray(kAlice, Job("sweep", 1, 1), count, "k-restart", &replayed);
  ASSERT_TRUE(again.ok()) << again.status().ToString();
  EXPECT_FALSE(replayed);
  EXPECT_GT(again->value(), live_retry.value());
  EXPECT_NE(c->snapshot().FindJob(*again)->state, JobState::kCancelled);
  // The retry made on the running server keeps its key.
  auto kept = c->SubmitArray(kAlice, Job("sweep", 1, 1), count, "k-live", &replayed);
  ASSERT_TRUE(kept.ok()) << kept.status().ToString();
  EXPECT_TRUE(replayed);
  EXPECT_EQ(*kept, live_retry);
  c->Stop();
}

// Like Slurm's: an admin's hold only an admin releases; the owner's own hold the owner may.
TEST_F(ControllerTest, AnAdminsHoldOnlyAnAdminReleases) {
  auto c = Make(std::make_unique<MemoryStore>());
  ASSERT_TRUE(c->Submit(kBob, Job("all", 2, 8, "team/b")).ok());  // every GPU
  c->ScheduleNow();
  auto id = c->Submit(kAlice, Job("next", 1, 1));  // pending behind it
  ASSERT_TRUE(id.ok());
  ASSERT_TRUE(c->SetHold(kAdmin, *id, true).ok());
  EXPECT_EQ(c->SetHold(kAlice, *id, false).code(), StatusCode::kPermissionDenied);
  EXPECT_EQ(c->SetHold(kBob, *id, true).code(), StatusCode::kNotFound);  // not bob's
  ASSERT_TRUE(c->SetHold(kAdmin, *id, false).ok());
  ASSERT_TRUE(c->SetHold(kAlice, *id, true).ok());
  EXPECT_TRUE(c->SetHold(kAlice, *id, false).ok());
}

}  // namespace rota::server
