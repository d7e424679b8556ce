// A rank never runs twice, through real agents and the process table: an
// agent killed and restarted adopts its tasks; one gone past the timeout
// fences its tasks before the gang restarts elsewhere; SIGTERM leaves the
// tasks for adoption; a hung agent (SIGSTOP) is fenced and, woken, starts
// nothing stale; `rota up` killed and restarted adopts its tasks; cancel
// leaves no process behind.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mount.h>

#include <atomic>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>

#include "harness.h"

namespace rota::testing {
namespace {

using nlohmann::json;

// The live processes running `sleep <arg>` as rota tasks, by "job/rank".
std::map<std::string, std::set<pid_t>> Census(const std::string& arg) {
  std::map<std::string, std::set<pid_t>> out;
  ForEachLiveProcess({"sleep", arg}, [&](pid_t pid, const std::string& dir) {
    const std::string env = ReadAll(dir + "/environ");
    auto var = [&](const std::string& key) {
      const size_t at = env.find(std::string(1, '\0') + key + "=");
      if (at == std::string::npos) return std::string();
      const size_t from = at + key.size() + 2;
      return env.substr(from, env.find('\0', from) - from);
    };
    out[var("ROTA_JOB_ID") + "/" + var("RANK")].insert(pid);
  });
  return out;
}

// Samples the census every 10 ms while it lives: the most processes any
// one rank ever had at once.
class RankWatch {
 public:
  explicit RankWatch(std::string arg) : arg_(std::move(arg)), thread_([this] { Run(); }) {}
  ~RankWatch() { Stop(); }
  void Stop() {
    stop_ = true;
    if (thread_.joinable()) thread_.join();
  }
  int max_copies() {
    std::lock_guard<std::mutex> lock(mu_);
    return max_;
  }
  std::string worst() {
    std::lock_guard<std::mutex> lock(mu_);
    return worst_;
  }

 private:
  void Run() {
    while (!stop_) {
      for (const auto& [rank, pids] : Census(arg_)) {
        std::lock_guard<std::mutex> lock(mu_);
        if (static_cast<int>(pids.size()) > max_) {
          max_ = static_cast<int>(pids.size());
          worst_ = rank + " had " + std::to_string(pids.size()) + " processes at once";
        }
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
  }
  std::string arg_;
  std::mutex mu_;
  int max_ = 0;
  std::string worst_;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

std::set<pid_t> AllPids(const std::map<std::string, std::set<pid_t>>& census) {
  std::set<pid_t> out;
  for (const auto& [rank, pids] : census) out.insert(pids.begin(), pids.end());
  return out;
}

// Waits until `pred` holds (up to `seconds`); false if it never did.
bool Eventually(const std::function<bool()>& pred, int seconds = 20) {
  for (int i = 0; i < seconds * 50; ++i) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return false;
}

// Task records (*.json) in an agent's state directory of tasks that run
// (a record is written before the launch, and again with the supervisor's pid).
int Records(const std::string& state_dir) {
  int n = 0;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(state_dir + "/tasks", ec)) {
    if (e.path().extension() != ".json") continue;
    const json r = json::parse(ReadAll(e.path().string()), nullptr, false);
    n += !r.is_discarded() && r.value("shim", 0) != 0;
  }
  return n;
}

class Fencing : public AgentCluster {
 protected:
  // A gang of two ranks, one per node; returns the node of rank 0 and its agent's index.
  std::pair<std::string, int> StartGang(const std::string& arg) {
    const std::string spec = "name: g\ntasks: [{name: w, replicas: 2, gpus: 2, command: [sleep, \"" + arg + "\"]}]\n";
    EXPECT_EQ(server_->Admin().Post("/v1/jobs", spec, "application/yaml")->status, 201);
    json j = WaitJob(1, [](const json& x) { return x["state"] == "running"; });
    EXPECT_TRUE(Eventually([&] { return Census(arg).size() == 2; })) << "the gang's processes never appeared";
    const std::string node = j["placement"][0]["node"];
    const int index = std::stoi(node.substr(1));
    // Recorded (the agent writes the record once the task runs; a kill
    // before that leaves an unrecorded task, which the next agent stops).
    EXPECT_TRUE(Eventually([&] { return Records(LogsDir(index) + "/.agent-state") == 1; }));
    return {node, index};
  }
  void KillAgent(int index, int sig) {
    kill(agents_[index], sig);
    if (sig == SIGKILL || sig == SIGTERM) {
      waitpid(agents_[index], nullptr, 0);
      agents_[index] = 0;
    }
  }
  // Restarts agent `index` (with the same logs and state directory).
  void RestartAgent(int index) {
    const size_t before = agents_.size();
    StartAgent(index);
    agents_[index] = agents_.back();
    if (agents_.size() > before) agents_.pop_back();
  }
  std::string NodeState(const std::string& node) {
    const json doc = json::parse(server_->Admin().Get("/v1/nodes")->body);
    for (const auto& n : doc["nodes"]) {
      if (n["name"] == node) return n["state"];
    }
    return "";
  }
  void CancelLeavesNothing(const std::string& arg) {
    ASSERT_EQ(server_->Admin().Post("/v1/jobs/1/cancel", "", "application/json")->status, 200);
    EXPECT_TRUE(Eventually([&] { return Census(arg).empty(); }, 15)) << "processes left after cancel";
  }
};

TEST_F(Fencing, AnAgentKilledAndRestartedWithinTheTimeoutAdoptsItsRanks) {
  RankWatch watch("3601");
  const auto [node, index] = StartGang("3601");
  const std::set<pid_t> before = AllPids(Census("3601"));
  KillAgent(index, SIGKILL);
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  RestartAgent(index);
  // Past the node timeout (2 s) and the fence deadline: nothing was lost or restarted.
  std::this_thread::sleep_for(std::chrono::seconds(5));
  const json j = Job(1);
  EXPECT_EQ(j["state"], "running") << j.dump();
  EXPECT_EQ(j["restarts"], 0) << j.dump();
  EXPECT_EQ(j["placement"][0]["node"], node);
  EXPECT_EQ(NodeState(node), "ready");
  EXPECT_EQ(AllPids(Census("3601")), before) << "the ranks were not adopted";
  CancelLeavesNothing("3601");
  watch.Stop();
  EXPECT_LE(watch.max_copies(), 1) << watch.worst();
}

// An agent killed after it recorded a launch but before it recorded the
// launch's supervisor: its supervisor never heard the word, so nothing ran.
// (Made here by killing the agent, its rank's supervisor and task, and
// taking the supervisor out of the record, as the agent had written it
// before the launch.) The next agent forgets the record rather than report
// the rank lost, and the server's answer starts it once, the same attempt:
// no restart.
TEST_F(Fencing, ALaunchWhoseSupervisorWasNeverRecordedRanNothingAndStartsOnce) {
  RankWatch watch("3607");
  const auto [node, index] = StartGang("3607");
  // (The record holds the shim before the task's pid: wait for both.)
  const std::string tasks = LogsDir(index) + "/.agent-state/tasks";
  auto pid_recorded = [&] {
    for (const auto& e : std::filesystem::directory_iterator(tasks)) {
      if (e.path().extension() != ".json") continue;
      const json r = json::parse(ReadAll(e.path().string()), nullptr, false);
      if (!r.is_discarded() && r.value("pid", 0) > 0) return true;
    }
    return false;
  };
  ASSERT_TRUE(Eventually(pid_recorded));
  KillAgent(index, SIGKILL);
  int edited = 0;
  for (const auto& e : std::filesystem::directory_iterator(tasks)) {
    if (e.path().extension() != ".json") continue;
    json r = json::parse(ReadAll(e.path().string()));
    ASSERT_TRUE(r.value("recorded_first", false)) << r.dump();
    const pid_t shim = r["shim"].get<pid_t>(), pid = r["pid"].get<pid_t>();
    ASSERT_GT(shim, 0);
    ASSERT_GT(pid, 0);  // (never kill(-0): this test's own group)
    kill(shim, SIGKILL);
    kill(-pid, SIGKILL);
    r["shim"] = 0;
    r["pid"] = 0;
    r["shim_start"] = 0;
    // And no cgroup, as for a container's launch or an agent without
    // cgroups: nothing to clear it by, where an agent that could not know
    // it never ran would have to report it lost.
    r["cgroup"] = "";
    std::ofstream(e.path()) << r.dump();
    ++edited;
  }
  ASSERT_EQ(edited, 1);
  ASSERT_TRUE(Eventually([&] { return Census("3607").size() == 1; })) << "the rank was not stopped";
  RestartAgent(index);
  ASSERT_TRUE(Eventually([&] { return Census("3607").size() == 2; }, 10)) << "the rank was not started again";
  std::this_thread::sleep_for(std::chrono::seconds(1));
  const json j = Job(1);
  EXPECT_EQ(j["state"], "running") << j.dump();
  EXPECT_EQ(j["restarts"], 0) << j.dump();  // not reported lost: the same attempt, started once
  CancelLeavesNothing("3607");
  watch.Stop();
  EXPECT_LE(watch.max_copies(), 1) << watch.worst();
}

TEST_F(Fencing, AnAgentGonePastTheTimeoutFencesItsRanksBeforeTheGangMoves) {
  RankWatch watch("3602");
  const auto [node, index] = StartGang("3602");
  const std::set<pid_t> before = AllPids(Census("3602"));
  KillAgent(index, SIGKILL);
  json j = WaitJob(1, [&](const json& x) {
    if (x["state"] != "running" || x["restarts"] != 1) return false;
    for (const auto& p : x["placement"]) {
      if (p["node"] == node) return false;
    }
    return true;
  });
  EXPECT_NE(j.value("last_requeue_reason", "").find("fenced themselves"), std::string::npos) << j.dump();
  ASSERT_TRUE(Eventually([&] { return Census("3602").size() == 2; }));
  for (pid_t p : AllPids(Census("3602"))) EXPECT_EQ(before.count(p), 0u) << "an old rank still runs: " << p;
  // The agent comes back: it starts nothing of the old attempt.
  RestartAgent(index);
  std::this_thread::sleep_for(std::chrono::seconds(2));
  EXPECT_EQ(Census("3602").size(), 2u);
  EXPECT_EQ(Job(1)["restarts"], 1);
  CancelLeavesNothing("3602");
  watch.Stop();
  EXPECT_LE(watch.max_copies(), 1) << watch.worst();
}

TEST_F(Fencing, SigtermLeavesTheRanksRunningForTheNextAgent) {
  RankWatch watch("3603");
  const auto [node, index] = StartGang("3603");
  const std::set<pid_t> before = AllPids(Census("3603"));
  KillAgent(index, SIGTERM);
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  EXPECT_EQ(AllPids(Census("3603")), before) << "SIGTERM of the agent stopped a rank";
  RestartAgent(index);
  std::this_thread::sleep_for(std::chrono::seconds(5));
  const json j = Job(1);
  EXPECT_EQ(j["state"], "running") << j.dump();
  EXPECT_EQ(j["restarts"], 0) << j.dump();
  EXPECT_EQ(AllPids(Census("3603")), before);
  CancelLeavesNothing("3603");
  watch.Stop();
  EXPECT_LE(watch.max_copies(), 1) << watch.worst();
}

TEST_F(Fencing, AHungAgentIsFencedAndWokenStartsNothingStale) {
  RankWatch watch("3604");
  const auto [node, index] = StartGang("3604");
  KillAgent(index, SIGSTOP);
  json j = WaitJob(1, [&](const json& x) {
    if (x["state"] != "running" || x["restarts"] != 1) return false;
    for (const auto& p : x["placement"]) {
      if (p["node"] == node) return false;
    }
    return true;
  });
  kill(agents_[index], SIGCONT);
  std::this_thread::sleep_for(std::chrono::seconds(3));
  EXPECT_EQ(Census("3604").size(), 2u);
  EXPECT_EQ(Job(1)["restarts"], 1);
  EXPECT_EQ(NodeState(node), "ready");  // back, and fenced, it may take work again
  CancelLeavesNothing("3604");
  watch.Stop();
  EXPECT_LE(watch.max_copies(), 1) << watch.worst();
}

// The server gone past the fence (killed, restarted later): each rank's
// supervisor killed it at its lease's deadline, as it must (the server may
// have moved the gang). That is not the program's failure: the gang is
// requeued as for a lost node, and a job that may not restart
// (restart: never, the default) runs again rather than failing.
TEST_F(Fencing, AServerAwayPastTheFenceRequeuesTheGangWithoutFailingIt) {
  RankWatch watch("3605");
  StartGang("3605");
  const std::set<pid_t> before = AllPids(Census("3605"));
  server_->Kill(SIGKILL);
  ASSERT_TRUE(Eventually([&] { return Census("3605").empty(); }, 10)) << "the fence did not stop the ranks";
  server_->Restart();
  json j = WaitJob(1, [&](const json& x) {
    return (x["state"] == "running" && x["restarts"] == 1) || x["state"] == "failed" || x["state"] == "succeeded";
  });
  EXPECT_EQ(j["state"], "running") << j.dump();
  EXPECT_EQ(j["restarts"], 1) << j.dump();
  EXPECT_NE(j.value("last_requeue_reason", "").find("was stopped by its node's fence"), std::string::npos) << j.dump();
  ASSERT_TRUE(Eventually([&] { return Census("3605").size() == 2; }));
  for (pid_t p : AllPids(Census("3605"))) EXPECT_EQ(before.count(p), 0u);
  CancelLeavesNothing("3605");
  watch.Stop();
  EXPECT_LE(watch.max_copies(), 1) << watch.worst();
}

// A server away for less than the fence (a restart, an upgrade) stops
// nothing: a job that does not save on its checkpoint signal (no grace)
// is not sent it before the fence (it would end a program that does not
// handle it, and the server may answer in time).
class ShortServerOutage : public Fencing {
 protected:
  std::vector<std::string> ExtraServerArgs() override { return {"--node-timeout", "9s"}; }
};

TEST_F(ShortServerOutage, AServerAwayForLessThanTheFenceStopsNothing) {
  StartGang("3606");
  const std::set<pid_t> before = AllPids(Census("3606"));
  server_->Kill(SIGKILL);
  std::this_thread::sleep_for(std::chrono::seconds(5));  // (the warning came 4.5 s before the 9 s fence)
  EXPECT_EQ(AllPids(Census("3606")), before) << "the ranks were stopped while the server was away";
  server_->Restart();
  std::this_thread::sleep_for(std::chrono::seconds(2));
  const json j = Job(1);
  EXPECT_EQ(j["state"], "running") << j.dump();
  EXPECT_EQ(j["restarts"], 0) << j.dump();
  EXPECT_EQ(AllPids(Census("3606")), before);
  CancelLeavesNothing("3606");
}

// A second agent started for a node that has one (by mistake, or a cloned
// machine: the same token and name, its own directories) is refused while
// the first reports, and runs nothing: no rank runs twice.
TEST_F(Fencing, ASecondAgentOfANodeRunsNothing) {
  RankWatch watch("3607");
  const auto [node, index] = StartGang("3607");
  const std::set<pid_t> before = AllPids(Census("3607"));
  const std::string copy_log = tmp.path() + "/copy.log";
  const pid_t copy = SpawnLogged({RotaBinary(), "agent", "--server", server_->url(), "--token-file",
                                  tmp.path() + "/" + node + ".token", "--name", node, "--address", "127.0.0.1", "--gpus",
                                  "2xH100:80Gi", "--logs-dir", tmp.path() + "/logs-copy", "--heartbeat-ms", "200"},
                                 copy_log);
  ASSERT_GT(copy, 0);
  EXPECT_TRUE(Eventually([&] { return ReadAll(copy_log).find("register refused (409") != std::string::npos; }, 10))
      << ReadAll(copy_log);
  std::this_thread::sleep_for(std::chrono::seconds(2));
  EXPECT_EQ(AllPids(Census("3607")), before);
  EXPECT_NE(ReadAll(copy_log).find("has another agent"), std::string::npos) << ReadAll(copy_log);
  EXPECT_EQ(ReadAll(copy_log).find("started job"), std::string::npos) << ReadAll(copy_log);
  kill(copy, SIGTERM);
  waitpid(copy, nullptr, 0);
  const json j = Job(1);
  EXPECT_EQ(j["state"], "running") << j.dump();
  EXPECT_EQ(j["restarts"], 0) << j.dump();
  CancelLeavesNothing("3607");
  watch.Stop();
  EXPECT_LE(watch.max_copies(), 1) << watch.worst();
}

// Agents whose logs and state live on small file systems of their own (a
// 4 MiB tmpfs each, unmounted at the end), which a test fills.
class FullAgentDisk : public Fencing {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "mounting a tmpfs needs root";
    for (int i = 0; i < 3; ++i) {
      std::filesystem::create_directories(LogsDir(i));
      if (mount("tmpfs", LogsDir(i).c_str(), "tmpfs", 0, "size=4m") != 0) GTEST_SKIP() << "cannot mount a tmpfs here";
      mounted_.push_back(LogsDir(i));
    }
    Fencing::SetUp();
  }
  void TearDown() override {
    Fencing::TearDown();
    for (const std::string& m : mounted_) umount2(m.c_str(), MNT_DETACH);
  }
  // (The default reserve, 64 MiB, is more than these disks hold.)
  std::vector<std::string> ExtraAgentArgs() override { return {"--disk-reserve", "1Mi"}; }
  std::string DrainReason(const std::string& node) {
    const json doc = json::parse(server_->Admin().Get("/v1/nodes")->body);
    for (const auto& n : doc["nodes"]) {
      if (n["name"] == node) return n.value("drain_reason", "");
    }
    return "";
  }
  // Fills agent `index`'s file system to the brim.
  void Fill(int index) {
    std::ofstream fill(LogsDir(index) + "/fill", std::ios::binary);
    std::string chunk(64 * 1024, 'x');
    while (fill.write(chunk.data(), static_cast<std::streamsize>(chunk.size()))) {
    }
    fill.clear();
    std::string byte(1, 'x');
    while (fill.write(byte.data(), 1)) fill.flush();
  }
  std::vector<std::string> mounted_;
};

// A node's disk fills while its task runs (a task's log, or anything else,
// can fill the file system under the agent's state). The agent still renews
// its tasks' lease (written over in place): without that, the task would
// fence itself two seconds later on a node that is well. Killed and
// restarted there, the agent adopts the task, and the task's exit status,
// written over the room made for it at the start, reaches the server: the
// job succeeds, once, rather than being reported lost and run again. And
// the node is drained while its disk is full (new work would only fail
// there), with the reason, and ready again once space returns.
TEST_F(FullAgentDisk, ATaskOutlivesAFullDiskAndItsExitIsReported) {
  const std::string go = tmp.path() + "/go", pid_file = tmp.path() + "/task.pid";
  const json spec = {{"name", "full"},
                     {"tasks", {{{"name", "w"}, {"gpus", 2},
                                 {"command", {"sh", "-c", "echo $$ > " + pid_file + "; while [ ! -e " + go +
                                                               " ]; do sleep 0.1; done; exit 0"}}}}}};
  ASSERT_EQ(server_->Admin().Post("/v1/jobs", spec.dump(), "application/json")->status, 201);
  const json j = WaitJob(1, [](const json& x) { return x["state"] == "running"; });
  const std::string node = j["placement"][0]["node"];
  const int index = std::stoi(node.substr(1));
  ASSERT_TRUE(Eventually([&] { return Records(LogsDir(index) + "/.agent-state") == 1; }));
  ASSERT_TRUE(Eventually([&] { return !ReadAll(pid_file).empty(); }));
  const pid_t task = std::stoi(ReadAll(pid_file));
  Fill(index);
  // Past the fence deadline (the node timeout, 2 s) several times over.
  std::this_thread::sleep_for(std::chrono::seconds(5));
  EXPECT_EQ(kill(task, 0), 0) << "the task fenced itself on a node whose disk is full:\n"
                              << ReadAll(tmp.path() + "/a" + std::to_string(index) + ".log");
  EXPECT_EQ(Job(1)["state"], "running");
  EXPECT_EQ(Job(1)["restarts"], 0);
  EXPECT_EQ(NodeState(node), "drained");
  EXPECT_NE(DrainReason(node).find("disk: only 0 MiB free in " + LogsDir(index)), std::string::npos) << DrainReason(node);
  KillAgent(index, SIGKILL);
  RestartAgent(index);
  std::this_thread::sleep_for(std::chrono::seconds(1));
  EXPECT_EQ(kill(task, 0), 0) << "the task was not adopted";
  std::ofstream(go) << "go\n";
  const json done = WaitJob(1, [](const json& x) { return x["state"] != "running"; });
  EXPECT_EQ(done["state"], "succeeded") << done.dump() << "\n"
                                        << ReadAll(tmp.path() + "/a" + std::to_string(index) + ".log");
  EXPECT_EQ(done["restarts"], 0) << done.dump();
  // Space returns: the node takes work again.
  std::filesystem::remove(LogsDir(index) + "/fill");
  EXPECT_TRUE(Eventually([&] { return NodeState(node) == "ready"; }, 5)) << NodeState(node) << ": " << DrainReason(node);
}

TEST(UpFencing, KillNineOfRotaUpAndARestartAdoptTheTask) {
  TempDir tmp;
  RankWatch watch("3605");
  RotaProcess up("up", tmp.path() + "/data", {"--gpus", "2xH100:80Gi", "--name", "local"});
  ASSERT_EQ(up.Admin().Post("/v1/jobs", "name: one\ntasks: [{gpus: 1, command: [sleep, \"3605\"]}]\n", "application/yaml")->status,
            201);
  ASSERT_TRUE(Eventually([&] { return Census("3605").size() == 1; }));
  ASSERT_TRUE(Eventually([&] { return Records(tmp.path() + "/data/agent-state") == 1; }));
  const std::set<pid_t> before = AllPids(Census("3605"));
  up.Kill(SIGKILL);
  up.Restart();
  std::this_thread::sleep_for(std::chrono::seconds(2));
  const json j = json::parse(up.Admin().Get("/v1/jobs/1")->body);
  EXPECT_EQ(j["state"], "running") << j.dump();
  EXPECT_EQ(j["restarts"], 0) << j.dump();
  EXPECT_EQ(AllPids(Census("3605")), before);
  ASSERT_EQ(up.Admin().Post("/v1/jobs/1/cancel", "", "application/json")->status, 200);
  EXPECT_TRUE(Eventually([&] { return Census("3605").empty(); }, 15)) << "processes left after cancel";
  watch.Stop();
  EXPECT_LE(watch.max_copies(), 1) << watch.worst();
}

}  // namespace
}  // namespace rota::testing
