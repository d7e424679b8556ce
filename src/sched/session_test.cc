#include "sched/session.h"

#include <gtest/gtest.h>

#include <algorithm>

#include "sched/plugins/builtin.h"
#include "sched/test_util.h"

namespace rota::sched {
namespace {

using testing::GpuJob;
using testing::kMinute;
using testing::MakeCluster;
using testing::StartJob;

constexpr Duration kSecond = kMicrosPerSecond;

JobSpec Spec(std::string name, int32_t gpus, std::string queue = "default", int32_t priority = 100) {
  JobSpec s = GpuJob(std::move(name), 1, gpus);
  s.queue = std::move(queue);
  s.priority = priority;
  s.preemptible = true;
  return s;
}

// A job order that ties every pair and has no keys: the session must call it.
class Unkeyed final : public JobOrderPlugin {
 public:
  std::string_view name() const override { return "unkeyed"; }
  int Compare(const JobRecord&, const JobRecord&, TimePoint) const override { return 0; }
};

// Four 8-GPU nodes under the learned order, after a history of 30 jobs
// of 100 GPU-seconds and 10 of 100,000 (a newcomer is likely short, a gang
// that has run long likely long), each its own sweep; then running gangs
// that have run from 2 minutes to 3 hours (some saved a minute ago), of
// two queues and two priorities, and waiting jobs: newcomers and one that
// has run before.
struct Scene {
  ClusterConfig config = testing::Nodes(4);
  ClusterState st = MakeCluster(config);
  TimePoint now = 0;
  explicit Scene(std::vector<std::string> orders) {
    for (const std::string& o : orders) config.profile.plugins.push_back({o, 1});
    for (const char* p : {"resource-fit", "gang", "topology", "binpack"}) config.profile.plugins.push_back({p, 1});
    TimePoint t = kMinute;
    uint64_t id = 1;
    for (int k = 0; k < 40; ++k, ++id) {
      const Duration run = k < 30 ? 100 * kSecond : 100'000 * kSecond;
      EXPECT_TRUE(st.Apply(JobSubmitted{JobId(id), Spec("past", 1), t}).ok());
      EXPECT_TRUE(st.Apply(JobBound{JobId(id), {{0, 0, NodeId(0), 0x1}}, t + kSecond}).ok());
      EXPECT_TRUE(st.Apply(JobFinished{JobId(id), JobOutcome::kSucceeded, t + kSecond + run}).ok());
      t += run + 2 * kMinute;
    }
    now = t + 6 * 3600 * kSecond;
    // One that ran 10 minutes and was stopped.
    StartJob(st, id, Spec("again", 1), {0}, 0x1, now - 5 * 3600 * kSecond);
    EXPECT_TRUE(st.Apply(JobRequeued{JobId(id), now - 5 * 3600 * kSecond + 10 * kMinute, "preempted"}).ok());
    ++id;
    const Duration ran[] = {2 * kMinute, 20 * kMinute, 50 * kMinute, 3 * 3600 * kSecond};
    // Per node: 4 one-GPU gangs (GPUs 0-3), one 4-GPU gang (GPUs 4-7).
    for (uint32_t node = 0; node < 4; ++node) {
      for (uint32_t g = 0; g < 4; ++g, ++id) {
        const std::string queue = g == 3 ? "other" : "default";
        const int32_t priority = node == 3 ? 50 : 100;
        StartJob(st, id, Spec("r", 1, queue, priority), {node}, uint64_t{1} << g, now - ran[(node + g) % 4]);
        if (g % 2 == 0) {
          EXPECT_TRUE(st.Apply(JobCheckpointed{JobId(id), now - kMinute, ""}).ok());
        }
      }
      StartJob(st, id, Spec("r4", 4), {node}, 0xf0, now - ran[node]);
      EXPECT_TRUE(st.Apply(JobCheckpointed{JobId(id), now - kMinute, ""}).ok());
      ++id;
    }
    for (int k = 0; k < 3; ++k, ++id) {
      EXPECT_TRUE(st.Apply(JobSubmitted{JobId(id), Spec("new", k == 2 ? 4 : 1, k == 1 ? "other" : "default"),
                                        now - (k + 1) * 3 * kMinute})
                      .ok());
    }
  }
  // One cycle's session over the scene, begun: its profile from `registry`.
  struct Cycle {
    Profile profile;
    EngineOptions options;
    QueueBook book;
    Snapshot snap;
    CycleResult out;
    std::unique_ptr<Session> s;
  };
  std::unique_ptr<Cycle> Begin(const Registry& registry = BuiltinRegistry()) {
    auto profile = Profile::Create(config.profile, registry);
    EXPECT_TRUE(profile.ok()) << profile.status().ToString();
    if (!profile.ok()) return nullptr;
    auto c = std::make_unique<Cycle>(Cycle{.profile = std::move(profile).value(), .snap = st.GetSnapshot()});
    c->book.Configure(config);
    c->s = std::make_unique<Session>(&c->profile, &c->options, &c->book);
    c->s->Begin(c->snap, &now, &c->out);
    return c;
  }
};

// OrderSpares is a shortcut for the victim searches: every gang it spares
// is one the job order decides against without weighing it (DecidingOrder:
// not first, no VictimWork), so OrderEvicts neither evicts it nor puts it
// in waits_on_checkpoint. It spares only gangs of the job's own queue and
// priority. With priority before the ranker, the scene has all three kinds:
// gangs spared, gangs the order evicts for a newcomer, gangs it weighs and
// keeps; with las before it (keyed, preemptive: it puts newcomers first), a
// spare must also be tied by las.
TEST(Session, OrderSparesOnlyGangsTheOrderNeitherEvictsNorWeighs) {
  for (const std::vector<std::string>& orders :
       {std::vector<std::string>{"priority", "learned", "fifo"}, std::vector<std::string>{"las", "learned", "fifo"}}) {
    Scene scene(orders);
    const auto cycle = scene.Begin();
    ASSERT_NE(cycle, nullptr);
    Session& s = *cycle->s;
    ASSERT_EQ(s.running().size(), 20u);
    ASSERT_EQ(s.order().size(), 4u);
    int spared = 0, evicted = 0, kept = 0;
    for (const JobRecord* job : s.order()) {
      const std::vector<uint8_t> spares = s.OrderSpares(*job);
      ASSERT_EQ(spares.size(), s.running().size());
      for (size_t k = 0; k < spares.size(); ++k) {
        const JobRecord& r = *s.running()[k];
        bool first = true;
        JobOrderPlugin::VictimWork weighed;
        weighed.unsaved = -1;
        const JobOrderPlugin* by = s.DecidingOrder(*job, r, &first, &weighed);
        if (spares[k] != 0) {
          ++spared;
          EXPECT_NE(by, nullptr) << orders[0] << ": " << job->id.value() << " " << r.id.value();
          EXPECT_FALSE(first) << orders[0] << ": " << job->id.value() << " " << r.id.value();
          EXPECT_EQ(weighed.unsaved, -1) << orders[0] << ": weighed " << r.id.value();
          EXPECT_FALSE(s.OrderEvicts(*job, r));
          EXPECT_EQ(r.spec().queue, job->spec().queue);
          EXPECT_EQ(r.spec().priority, job->spec().priority);
        } else if (r.spec().queue == job->spec().queue && r.spec().priority == job->spec().priority) {
          s.OrderEvicts(*job, r) ? ++evicted : ++kept;
        }
      }
    }
    EXPECT_GT(evicted, 0) << orders[0];
    if (orders[0] == "priority") {
      EXPECT_GT(spared, 0);
      EXPECT_GT(kept, 0);
    }
  }
}

// An order before the ranker that has no keys (it must be asked) or no
// ranker at all: nothing is spared unread.
TEST(Session, OrderSparesNothingWithoutKeysUpToTheRanker) {
  Registry registry = BuiltinRegistry();
  registry.Register("unkeyed", [] { return std::make_unique<Unkeyed>(); });
  for (const std::vector<std::string>& orders :
       {std::vector<std::string>{"unkeyed", "learned", "fifo"}, std::vector<std::string>{"priority", "las", "fifo"}}) {
    Scene scene(orders);
    const auto cycle = scene.Begin(registry);
    ASSERT_NE(cycle, nullptr);
    Session& s = *cycle->s;
    ASSERT_FALSE(s.order().empty());
    for (const JobRecord* job : s.order()) {
      const std::vector<uint8_t>& spares = s.OrderSpares(*job);
      EXPECT_EQ(std::count(spares.begin(), spares.end(), 1), 0) << orders[0] << ", " << orders[1];
    }
  }
}

}  // namespace
}  // namespace rota::sched
