// A replicated control plane, end to end: a real PostgreSQL (started here),
// three `rota server --store postgres://...` replicas, two real agents given
// every replica's address, and a submitter that retries each submission
// (with its Idempotency-Key) across the replicas until one is acknowledged.
// Through a kill -9 of the leader, a paused leader, its database sessions
// killed and a restart of PostgreSQL itself: every acknowledged job exists
// exactly once, a standby serves writes within seconds, a paused ex-leader
// writes nothing and steps down, and running tasks are never restarted.
#include <gtest/gtest.h>
#include <signal.h>

#include <atomic>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>

#include "harness.h"
#include "store/pg_test_server.h"

namespace rota::testing {
namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

int FreePort() { return TestPostgres::FreePort(); }

// Ends a spawned process when the test ends, however it ends (a failed
// ASSERT returns early: the process must not outlive the test).
struct Reaped {
  pid_t pid;
  ~Reaped() {
    if (pid <= 0) return;
    kill(pid, SIGTERM);
    waitpid(pid, nullptr, 0);
  }
};

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// The pids of live `sleep ARG` processes.
std::set<pid_t> Sleepers(const std::string& arg) {
  std::set<pid_t> out;
  ForEachLiveProcess({"sleep", arg}, [&](pid_t pid, const std::string&) { out.insert(pid); });
  return out;
}

class Replicated : public ::testing::Test {
 protected:
  static constexpr int kReplicas = 3;

  void SetUp() override {
    std::string error;
    pg_ = TestPostgres::Start(&error);
    ASSERT_TRUE(pg_) << error;
    pg_->CreateDatabase("rota");
    store_ = "postgresql://rota@127.0.0.1:" + std::to_string(pg_->port()) + "/rota";
    for (int i = 0; i < kReplicas; ++i) {
      ports_.push_back(FreePort());
      router_ports_.push_back(FreePort());
      pids_.push_back(0);
      if (!list_.empty()) list_ += ",";
      list_ += Url(i);
    }
    for (int i = 0; i < kReplicas; ++i) StartReplica(i);
    const int leader = WaitForLeader(-1, 20);
    ASSERT_GE(leader, 0) << ReadAll(Log(0));
    // The first leader made the admin token, in its own data directory.
    for (int i = 0; i < 100 && token_.empty(); ++i) {
      token_ = ReadAll(Dir(leader) + "/admin.token");
      while (!token_.empty() && token_.back() == '\n') token_.pop_back();
      if (token_.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    ASSERT_FALSE(token_.empty());
    for (int i = 0; i < 2; ++i) StartAgent(i);
    ASSERT_TRUE(Eventually([&] { return ReadyNodes() == 2; }, 20)) << "agents did not become ready";
  }

  void TearDown() override {
    StopSubmitter();
    for (pid_t p : agents_) {
      kill(p, SIGTERM);
      waitpid(p, nullptr, 0);
    }
    for (int i = 0; i < kReplicas; ++i) Kill(i, SIGKILL);
    for (const std::string& arg : sleep_args_) {
      for (pid_t p : Sleepers(arg)) kill(p, SIGKILL);
    }
  }

  std::string Url(int i) const { return "http://127.0.0.1:" + std::to_string(ports_[i]); }
  std::string Dir(int i) const { return tmp_.path() + "/replica" + std::to_string(i); }
  std::string Log(int i) const { return Dir(i) + ".log"; }

  void StartReplica(int i) {
    pids_[i] = SpawnLogged({RotaBinary(), "server", "--data-dir", Dir(i), "--listen", "127.0.0.1:" + std::to_string(ports_[i]),
                            "--store", store_, "--rate-limit", "0", "--min-runtime", "0s", "--lease", "3s",
                            "--router", "127.0.0.1:" + std::to_string(router_ports_[i])},
                           Log(i));
    ASSERT_GT(pids_[i], 0);
  }
  void Kill(int i, int sig) {
    if (pids_[i] <= 0) return;
    kill(pids_[i], sig);
    if (sig == SIGKILL || sig == SIGTERM) {
      if (sig == SIGKILL) kill(pids_[i], SIGCONT);
      waitpid(pids_[i], nullptr, 0);
      pids_[i] = 0;
    }
  }

  // "leader", "standby" or "" (no answer), from /healthz.
  std::string Role(int i) {
    httplib::Client c("127.0.0.1", ports_[i]);
    c.set_connection_timeout(0, 300000);
    c.set_read_timeout(1, 0);
    auto r = c.Get("/healthz");
    if (!r || r->status != 200) return "";
    return r->get_header_value("Rota-Role");
  }
  // The index of a replica other than `not_this` that answers as the leader, or -1.
  int WaitForLeader(int not_this, int seconds) {
    for (int n = 0; n < seconds * 20; ++n) {
      for (int i = 0; i < kReplicas; ++i) {
        if (i != not_this && pids_[i] > 0 && Role(i) == "leader") return i;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return -1;
  }

  void StartAgent(int i) {
    const std::string name = "h" + std::to_string(i);
    auto r = Post("/v1/tokens", json{{"user", name}, {"role", "agent"}, {"node", name}}.dump(), "");
    ASSERT_EQ(r.first, 201) << r.second;
    const std::string token_file = tmp_.path() + "/" + name + ".token";
    std::ofstream(token_file) << json::parse(r.second)["token"].get<std::string>() << "\n";
    const pid_t pid = SpawnLogged({RotaBinary(), "agent", "--server", list_, "--token-file", token_file, "--name", name,
                                   "--address", "127.0.0.1", "--gpus", "4xH100:80Gi", "--logs-dir",
                                   tmp_.path() + "/logs-" + name},
                                  tmp_.path() + "/" + name + ".log");
    ASSERT_GT(pid, 0);
    agents_.push_back(pid);
  }

  // One request to whichever replica leads: tries each, follows a standby's
  // Rota-Leader, for up to `seconds`. The status and body (0 if none answered).
  std::pair<int, std::string> Send(const std::string& method, const std::string& path, const std::string& body,
                                   const std::string& key, int seconds = 20) {
    const auto deadline = Clock::now() + std::chrono::seconds(seconds);
    int at = 0;
    {
      std::lock_guard<std::mutex> lock(route_mu_);
      at = route_;
    }
    while (Clock::now() < deadline) {
      httplib::Client c("127.0.0.1", ports_[at]);
      c.set_bearer_token_auth(token_);
      c.set_connection_timeout(1, 0);
      c.set_read_timeout(3, 0);  // (a paused leader accepts, and never answers)
      httplib::Headers h;
      if (!key.empty()) h.emplace("Idempotency-Key", key);
      auto r = method == "GET" ? c.Get(path, h) : c.Post(path, h, body, "application/yaml");
      if (r && r->status != 503) {
        std::lock_guard<std::mutex> lock(route_mu_);
        route_ = at;
        return {r->status, r->body};
      }
      int next = (at + 1) % kReplicas;
      if (r && r->has_header("Rota-Leader")) {
        for (int i = 0; i < kReplicas; ++i) {
          if (Url(i) == r->get_header_value("Rota-Leader")) next = i;
        }
      }
      if (next == at || !r) std::this_thread::sleep_for(std::chrono::milliseconds(50));
      at = next;
    }
    return {0, ""};
  }
  std::pair<int, std::string> Post(const std::string& path, const std::string& body, const std::string& key) {
    return Send("POST", path, body, key);
  }
  json Get(const std::string& path) {
    auto r = Send("GET", path, "", "");
    EXPECT_EQ(r.first, 200) << path << ": " << r.second;
    return json::parse(r.second, nullptr, false);
  }

  // The leader's answer to GET `path` ("" if none answers). Node states are
  // the leader's to know: a standby hears no agent, and shows every node
  // "declared".
  std::string LeaderGet(const std::string& path) {
    const int leader = WaitForLeader(-1, 2);
    if (leader < 0) return "";
    httplib::Client c("127.0.0.1", ports_[leader]);
    c.set_bearer_token_auth(token_);
    c.set_connection_timeout(1, 0);
    c.set_read_timeout(3, 0);
    auto r = c.Get(path);
    return r && r->status == 200 ? r->body : "";
  }

  int ReadyNodes() {
    const json doc = json::parse(LeaderGet("/v1/nodes"), nullptr, false);
    if (!doc.is_object()) return 0;
    int ready = 0;
    for (const auto& n : doc["nodes"]) ready += n["state"] == "ready";
    return ready;
  }

  bool Eventually(const std::function<bool()>& pred, int seconds) {
    for (int i = 0; i < seconds * 20; ++i) {
      if (pred()) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return false;
  }

  // A running one-GPU job `sleep ARG`; its id, once its process runs.
  uint64_t StartLongJob(const std::string& arg) {
    sleep_args_.push_back(arg);
    auto r = Post("/v1/jobs", "name: long\ntasks: [{name: w, replicas: 1, gpus: 1, command: [sleep, \"" + arg + "\"]}]\n",
                  "long-" + arg);
    EXPECT_EQ(r.first, 201) << r.second;
    const uint64_t id = json::parse(r.second)["id"];
    EXPECT_TRUE(Eventually([&] { return Sleepers(arg).size() == 1; }, 20)) << "job " << id << " never started";
    return id;
  }

  // The submitter: short jobs, each under its own key, retried (same key)
  // until acknowledged. Records the id of every acknowledgement and when.
  void StartSubmitter() {
    submitting_ = true;
    submitter_ = std::thread([this] {
      for (int n = 0; submitting_; ++n) {
        const std::string key = "burst-" + std::to_string(n);
        auto r = Send("POST", "/v1/jobs", "name: b\ntasks: [{name: w, replicas: 1, gpus: 0, cpu: 10m, command: [true]}]\n",
                      key, 30);
        if (r.first == 200 || r.first == 201) {
          std::lock_guard<std::mutex> lock(acks_mu_);
          acks_[key] = json::parse(r.second)["id"].get<uint64_t>();
          ack_times_.push_back(Clock::now());
        } else {
          std::lock_guard<std::mutex> lock(acks_mu_);
          refused_.push_back(key + ": " + std::to_string(r.first) + " " + r.second);
        }
      }
    });
  }
  void StopSubmitter() {
    submitting_ = false;
    if (submitter_.joinable()) submitter_.join();
  }
  size_t Acks() {
    std::lock_guard<std::mutex> lock(acks_mu_);
    return acks_.size();
  }
  // The first acknowledgement after `t`, or `t` + 1 h if none.
  Clock::time_point FirstAckAfter(Clock::time_point t) {
    std::lock_guard<std::mutex> lock(acks_mu_);
    for (const auto& at : ack_times_) {
      if (at > t) return at;
    }
    return t + std::chrono::hours(1);
  }

  // The longest time without an acknowledgement from `t` on: how long writes were unavailable.
  double LongestGapAfter(Clock::time_point t) {
    std::lock_guard<std::mutex> lock(acks_mu_);
    double worst = 0;
    Clock::time_point last = t;
    for (const auto& at : ack_times_) {
      if (at <= t) continue;
      worst = std::max(worst, Seconds(at - last));
      last = at;
    }
    return worst;
  }

  // Every acknowledged job exists exactly once, under the id acknowledged;
  // no key made two jobs.
  void ExpectEveryAckExactlyOnce() {
    std::map<std::string, std::vector<uint64_t>> by_key;
    uint64_t after = 0;
    while (true) {
      const json page = Get("/v1/jobs?all=true&limit=1000&after=" + std::to_string(after));
      for (const auto& j : page["jobs"]) {
        if (j.contains("request_id")) by_key[j["request_id"]].push_back(j["id"]);
      }
      if (!page.contains("next_after")) break;
      after = page["next_after"];
    }
    std::lock_guard<std::mutex> lock(acks_mu_);
    EXPECT_TRUE(refused_.empty()) << refused_.size() << " submissions never acknowledged, e.g. " << refused_.front();
    for (const auto& [key, ids] : by_key) EXPECT_EQ(ids.size(), 1u) << key << " made " << ids.size() << " jobs";
    for (const auto& [key, id] : acks_) {
      auto it = by_key.find(key);
      ASSERT_NE(it, by_key.end()) << "acknowledged " << key << " (job " << id << ") is lost";
      EXPECT_EQ(it->second, std::vector<uint64_t>{id}) << key;
    }
  }

  TempDir tmp_;
  std::unique_ptr<TestPostgres> pg_;
  std::string store_, list_, token_;
  std::vector<int> ports_, router_ports_;  // each replica's API and services' router
  std::vector<pid_t> pids_, agents_;
  std::vector<std::string> sleep_args_;
  std::mutex route_mu_;
  int route_ = 0;
  std::atomic<bool> submitting_{false};
  std::thread submitter_;
  std::mutex acks_mu_;
  std::map<std::string, uint64_t> acks_;
  std::vector<Clock::time_point> ack_times_;
  std::vector<std::string> refused_;
};

TEST_F(Replicated, KillingTheLeaderMidBurstLosesNothingAndRestartsNothing) {
  const std::string arg = "4101" + std::to_string(getpid() % 1000);
  const uint64_t long_job = StartLongJob(arg);
  const std::set<pid_t> before = Sleepers(arg);
  StartSubmitter();
  ASSERT_TRUE(Eventually([&] { return Acks() >= 20; }, 20));
  const int leader = WaitForLeader(-1, 5);
  ASSERT_GE(leader, 0);
  std::ofstream(tmp_.path() + "/cli.yaml") << "name: cli\ntasks: [{name: w, replicas: 1, gpus: 0, cpu: 10m, command: [true]}]\n";
  const auto killed = Clock::now();
  Kill(leader, SIGKILL);
  // The CLI, given every replica, follows the leader through the failover.
  const CommandResult cli = RunRota({"submit", "-o", "json", tmp_.path() + "/cli.yaml"},
                                    {"ROTA_SERVER=" + list_, "ROTA_TOKEN=" + token_}, tmp_.path());
  EXPECT_EQ(cli.exit_code, 0) << cli.err;
  const int successor = WaitForLeader(leader, 20);
  ASSERT_GE(successor, 0) << ReadAll(Log((leader + 1) % kReplicas));
  ASSERT_TRUE(Eventually([&] { return FirstAckAfter(killed) < killed + std::chrono::hours(1); }, 20));
  const double failover = Seconds(FirstAckAfter(killed) - killed);
  std::printf("failover: a standby acknowledged a write %.2f s after the leader was killed\n", failover);
  EXPECT_LT(failover, 6.0);  // target 5 s: a 3 s lease, a lease check, a retry
  const size_t at_kill = Acks();
  ASSERT_TRUE(Eventually([&] { return Acks() >= at_kill + 20; }, 20));
  StopSubmitter();
  ExpectEveryAckExactlyOnce();
  // The running task was never touched: the same process, no restart.
  EXPECT_EQ(Sleepers(arg), before);
  const json job = Get("/v1/jobs/" + std::to_string(long_job));
  EXPECT_EQ(job["state"], "running") << job.dump();
  EXPECT_EQ(job.value("restarts", 0), 0) << job.dump();
  // The nodes are all there, none declared lost.
  EXPECT_TRUE(Eventually([&] { return ReadyNodes() == 2; }, 10)) << LeaderGet("/v1/nodes");
}

// Services on a replicated control plane: the leader runs the router and
// the autoscalers. After the leader is killed, the new leader's router
// serves the same replica (its process untouched), and a standby's router
// port takes nothing.
TEST_F(Replicated, TheLeadersRouterServesServicesThroughAFailover) {
  const int leader = WaitForLeader(-1, 5);
  ASSERT_GE(leader, 0);
  const int port = FreePort();
  const std::vector<std::string> server = {"python3", "-m", "http.server", "--bind", "127.0.0.1", std::to_string(port)};
  auto r = Post("/v1/jobs",
                "name: web\nkind: service\nservice: {port: " + std::to_string(port) +
                    ", readiness: {path: /, period: 200ms}}\n"
                    "tasks: [{name: s, cpu: 1, command: [sh, -c, 'exec python3 -m http.server --bind 127.0.0.1 $PORT']}]\n",
                "web");
  ASSERT_EQ(r.first, 201) << r.second;
  auto through = [&](int replica) {
    httplib::Client c("127.0.0.1", router_ports_[replica]);
    c.set_connection_timeout(1, 0);
    c.set_read_timeout(5, 0);
    auto got = c.Get("/web/");
    return got ? got->status : 0;
  };
  ASSERT_TRUE(Eventually([&] { return through(leader) == 200; }, 40)) << "the leader's router never served web";
  std::set<pid_t> serving;
  ForEachLiveProcess(server, [&](pid_t pid, const std::string&) { serving.insert(pid); });
  ASSERT_EQ(serving.size(), 1u);
  for (int i = 0; i < kReplicas; ++i) {
    if (i != leader) {
      EXPECT_EQ(through(i), 0) << "standby " << i << "'s router port answered";
    }
  }
  const json services = Get("/v1/services");
  EXPECT_EQ(services["router"], "http://127.0.0.1:" + std::to_string(router_ports_[leader])) << services.dump();
  Kill(leader, SIGKILL);
  const int successor = WaitForLeader(leader, 20);
  ASSERT_GE(successor, 0);
  const auto failed_over = Clock::now();
  ASSERT_TRUE(Eventually([&] { return through(successor) == 200; }, 30)) << ReadAll(Log(successor));
  std::printf("services: the new leader's router served web %.2f s after it led\n", Seconds(Clock::now() - failed_over));
  std::set<pid_t> after;
  ForEachLiveProcess(server, [&](pid_t pid, const std::string&) { after.insert(pid); });
  EXPECT_EQ(after, serving) << "the replica's process was restarted";
  // (A service runs until cancelled: this one ends with the test.)
  const std::string id = std::to_string(json::parse(r.second)["id"].get<uint64_t>());
  EXPECT_EQ(Post("/v1/jobs/" + id + "/cancel", "{}", "").first, 200);
  EXPECT_TRUE(Eventually([&] {
    std::set<pid_t> left;
    ForEachLiveProcess(server, [&](pid_t pid, const std::string&) { left.insert(pid); });
    return left.empty();
  }, 20));
}

// A standby answers reads from the state it follows (a job submitted on the
// leader appears there within moments), sends writes, agents and browsers to
// the leader, and `rota status` shows every replica.
TEST_F(Replicated, StandbysAnswerReadsAndSendTheRestToTheLeader) {
  const int leader = WaitForLeader(-1, 5);
  ASSERT_GE(leader, 0);
  const int standby = (leader + 1) % kReplicas;
  auto submitted = Post("/v1/jobs", "name: seen\ntasks: [{name: w, replicas: 1, gpus: 0, cpu: 10m, command: [true]}]\n",
                        "seen-1");
  ASSERT_EQ(submitted.first, 201) << submitted.second;
  const uint64_t id = json::parse(submitted.second)["id"];
  httplib::Client c("127.0.0.1", ports_[standby]);
  c.set_bearer_token_auth(token_);
  EXPECT_TRUE(Eventually([&] {
    auto r = c.Get("/v1/jobs/" + std::to_string(id));
    return r && r->status == 200 && r->get_header_value("Rota-Role") == "standby" &&
           json::parse(r->body)["name"] == "seen";
  }, 5));
  auto write = c.Post("/v1/jobs", "name: no\ntasks: [{name: w, replicas: 1, gpus: 0, cpu: 10m, command: [true]}]\n",
                      "application/yaml");
  ASSERT_TRUE(write);
  EXPECT_EQ(write->status, 503) << write->body;
  EXPECT_EQ(write->get_header_value("Rota-Leader"), Url(leader));
  EXPECT_NE(write->body.find("send writes to the leader"), std::string::npos) << write->body;
  auto watch = c.Get("/v1/agents/watch?node=h0");
  ASSERT_TRUE(watch);
  EXPECT_EQ(watch->status, 503);
  auto page = c.Get("/");
  ASSERT_TRUE(page);
  EXPECT_EQ(page->status, 307);
  EXPECT_EQ(page->get_header_value("Location"), Url(leader) + "/");
  EXPECT_TRUE(Eventually([&] {
    auto r = c.Get("/v1/replicas");
    if (!r || r->status != 200) return false;
    const json v = json::parse(r->body);
    bool all_caught_up = v["replicas"].size() == static_cast<size_t>(kReplicas);
    for (const auto& row : v["replicas"]) all_caught_up = all_caught_up && row["lag_events"] == 0;
    return v["leader"] == Url(leader) && all_caught_up;
  }, 10));
  // Node states are the leader's: `rota nodes` pointed at a standby (which
  // hears no agent, and shows every node declared) asks the leader it names.
  {
    auto from_standby = c.Get("/v1/nodes");
    ASSERT_TRUE(from_standby);
    EXPECT_EQ(json::parse(from_standby->body)["nodes"][0]["state"], "declared") << from_standby->body;
    const CommandResult nodes = RunRota({"nodes", "-o", "json"}, {"ROTA_SERVER=" + Url(standby), "ROTA_TOKEN=" + token_}, tmp_.path());
    ASSERT_EQ(nodes.exit_code, 0) << nodes.out << nodes.err;
    const json doc = json::parse(nodes.out, nullptr, false);
    ASSERT_TRUE(doc.is_object()) << nodes.out;
    for (const auto& n : doc["nodes"]) EXPECT_EQ(n["state"], "ready") << nodes.out;
  }
  // The leader's view of the replicas is as of its last renewal (every second).
  CommandResult status;
  EXPECT_TRUE(Eventually([&] {
    status = RunRota({"status"}, {"ROTA_SERVER=" + list_, "ROTA_TOKEN=" + token_}, tmp_.path());
    return status.exit_code == 0 && status.out.find("standby") != std::string::npos;
  }, 10)) << status.out << status.err;
  EXPECT_NE(status.out.find("leader  " + Url(leader)), std::string::npos) << status.out;
}

TEST_F(Replicated, APausedLeaderIsFencedAndStepsDown) {
  const int leader = WaitForLeader(-1, 5);
  ASSERT_GE(leader, 0);
  Kill(leader, SIGSTOP);
  const auto paused = Clock::now();
  const int successor = WaitForLeader(leader, 20);
  ASSERT_GE(successor, 0);
  std::printf("takeover from a paused leader: %.2f s\n", Seconds(Clock::now() - paused));
  StartSubmitter();
  ASSERT_TRUE(Eventually([&] { return Acks() >= 10; }, 20));
  // The CLI given the paused leader first passes over it (it accepts and
  // never answers) to the replica that leads now: a read and a submission.
  // (Before, each waited 30 s for the paused one and gave up.)
  std::string paused_first = Url(leader);
  for (int i = 0; i < kReplicas; ++i) {
    if (i != leader) paused_first += "," + Url(i);
  }
  for (const std::vector<std::string>& command :
       {std::vector<std::string>{"jobs", "--limit", "1"}, std::vector<std::string>{"submit", "--wrap", "true", "--gpus", "0"}}) {
    const auto asked = Clock::now();
    const CommandResult done = RunRota(command, {"ROTA_SERVER=" + paused_first, "ROTA_TOKEN=" + token_}, tmp_.path());
    EXPECT_EQ(done.exit_code, 0) << command[0] << ": " << done.out << done.err;
    EXPECT_LT(Seconds(Clock::now() - asked), 15) << command[0];
    std::printf("rota %s past a paused leader: %.2f s\n", command[0].c_str(), Seconds(Clock::now() - asked));
  }
  // The old leader wakes and is asked to write, directly: refused.
  Kill(leader, SIGCONT);
  const auto resumed = Clock::now();
  httplib::Client old("127.0.0.1", ports_[leader]);
  old.set_bearer_token_auth(token_);
  old.set_read_timeout(10, 0);
  auto r = old.Post("/v1/jobs", {{"Idempotency-Key", "stale-write"}},
                    "name: stale\ntasks: [{name: w, replicas: 1, gpus: 0, cpu: 10m, command: [true]}]\n",
                    "application/yaml");
  // (Refused, or cut off as it steps down: never accepted.)
  if (r) {
    EXPECT_EQ(r->status, 503) << r->body;
  }
  std::printf("the write to the woken ex-leader ended after %.2f s\n", Seconds(Clock::now() - resumed));
  const auto woken = Clock::now();
  // It steps down and follows the new leader.
  EXPECT_TRUE(Eventually([&] { return Role(leader) == "standby"; }, 10)) << ReadAll(Log(leader));
  std::printf("the woken ex-leader answered %s and was a standby %.2f s later\n",
              r ? std::to_string(r->status).c_str() : "nothing", Seconds(Clock::now() - woken));
  EXPECT_TRUE(Eventually([&] { return ReadAll(Log(leader)).find("stepping down") != std::string::npos; }, 10))
      << ReadAll(Log(leader));
  StopSubmitter();
  ExpectEveryAckExactlyOnce();
  const json stale = Get("/v1/jobs?all=true&limit=10000");
  for (const auto& j : stale["jobs"]) EXPECT_NE(j.value("request_id", ""), "stale-write") << j.dump();
  EXPECT_EQ(WaitForLeader(-1, 1), successor);  // one leader
}

TEST_F(Replicated, KilledDatabaseSessionsAndARestartedDatabaseLoseNothing) {
  const std::string arg = "4102" + std::to_string(getpid() % 1000);
  StartLongJob(arg);
  const std::set<pid_t> before = Sleepers(arg);
  StartSubmitter();
  ASSERT_TRUE(Eventually([&] { return Acks() >= 20; }, 20));
  // Every rota session ended by the database (an operator's
  // pg_terminate_backend): the servers reconnect.
  ASSERT_TRUE(pg_->Sql("postgres",
                       "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = 'rota' AND pid <> pg_backend_pid()"));
  auto cut = Clock::now();
  ASSERT_TRUE(Eventually([&] { return FirstAckAfter(cut) < cut + std::chrono::hours(1); }, 20));
  std::printf("writes resumed %.2f s after the sessions were terminated\n", Seconds(FirstAckAfter(cut) - cut));
  // PostgreSQL itself restarted mid-burst (an immediate stop: a crash).
  size_t acked = Acks();
  cut = Clock::now();
  ASSERT_TRUE(pg_->Restart());
  const double down = Seconds(Clock::now() - cut);
  ASSERT_TRUE(Eventually([&] { return Acks() >= acked + 20; }, 30));
  std::printf("writes were unavailable for at most %.2f s around a restart of PostgreSQL (which took %.2f s)\n",
              LongestGapAfter(cut), down);
  StopSubmitter();
  ExpectEveryAckExactlyOnce();
  EXPECT_GE(WaitForLeader(-1, 10), 0);
  EXPECT_EQ(Sleepers(arg), before);
  EXPECT_TRUE(Eventually([&] { return ReadyNodes() == 2; }, 10)) << LeaderGet("/v1/nodes");
}

// `rota store migrate` moves a stopped SQLite server's store into
// PostgreSQL: the jobs, their ids, the tokens; a replica started on it
// serves them, and new ids continue after the old ones. It refuses while the
// server runs, and into a database that holds a store already.
TEST(StoreMigrate, MovesASqliteStoreIntoPostgres) {
  TempDir tmp;
  std::string error;
  auto pg = TestPostgres::Start(&error);
  ASSERT_TRUE(pg) << error;
  pg->CreateDatabase("moved");
  const std::string url = "postgresql://rota@127.0.0.1:" + std::to_string(pg->port()) + "/moved";
  const std::string data = tmp.path() + "/data";
  std::string token;
  const std::string config = tmp.path() + "/cluster.yaml";
  std::ofstream(config) << "node_groups:\n  - {name: n, count: 2, gpus: 8, gpu_model: H100, cpu: 64, memory: 256Gi}\n";
  {
    RotaProcess server("server", data, {"--rate-limit", "0", "--config", config});
    token = server.token();
    for (int i = 0; i < 3; ++i) {
      auto r = server.Admin().Post("/v1/jobs", "name: j" + std::to_string(i) +
                                                   "\ntasks: [{name: w, replicas: 1, gpus: 0, cpu: 10m, command: [true]}]\n",
                                   "application/yaml");
      ASSERT_EQ(r->status, 201) << r->body;
    }
    const CommandResult busy = RunRota({"store", "migrate", "--data-dir", data, "--to", url}, {}, tmp.path());
    EXPECT_EQ(busy.exit_code, 1);
    EXPECT_NE(busy.err.find("in use by a running rota server"), std::string::npos) << busy.err;
  }
  // A password in the URL would be on every user's `ps`: refused, nothing started.
  const CommandResult leaky = RunRota({"store", "migrate", "--data-dir", data, "--to",
                                       "postgresql://rota:secret@127.0.0.1:" + std::to_string(pg->port()) + "/moved"},
                                      {}, tmp.path());
  EXPECT_EQ(leaky.exit_code, 2);
  EXPECT_NE(leaky.err.find("PGPASSWORD"), std::string::npos) << leaky.err;
  const CommandResult leaky_server = RunRota({"server", "--data-dir", tmp.path() + "/x", "--store",
                                              "postgresql://rota:secret@127.0.0.1:1/moved"},
                                             {}, tmp.path());
  EXPECT_EQ(leaky_server.exit_code, 2);
  EXPECT_NE(leaky_server.err.find("--store: the URL carries a password"), std::string::npos) << leaky_server.err;
  const CommandResult moved = RunRota({"store", "migrate", "--data-dir", data, "--to", url}, {}, tmp.path());
  ASSERT_EQ(moved.exit_code, 0) << moved.err;
  EXPECT_NE(moved.out.find("moved 3 jobs"), std::string::npos) << moved.out;
  const CommandResult again = RunRota({"store", "migrate", "--data-dir", data, "--to", url}, {}, tmp.path());
  EXPECT_EQ(again.exit_code, 1);
  EXPECT_NE(again.err.find("already holds a rota store"), std::string::npos) << again.err;

  // A replica on the moved store: the old token works, the jobs are there.
  const int port = FreePort();
  const pid_t pid = SpawnLogged({RotaBinary(), "server", "--data-dir", tmp.path() + "/replica", "--listen",
                                 "127.0.0.1:" + std::to_string(port), "--store", url, "--config", config},
                                tmp.path() + "/replica.log");
  ASSERT_GT(pid, 0);
  const Reaped reaped{pid};
  httplib::Client c("127.0.0.1", port);
  c.set_bearer_token_auth(token);
  std::string body;
  for (int i = 0; i < 200; ++i) {
    auto r = c.Get("/v1/jobs?all=true");
    if (r && r->status == 200) {
      body = r->body;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_FALSE(body.empty()) << ReadAll(tmp.path() + "/replica.log");
  EXPECT_EQ(json::parse(body)["jobs"].size(), 3u) << body;
  // Reads are served while the replica still follows; a write waits for it
  // to lead (a standby's 503 changes nothing).
  auto post = [&] {
    return c.Post("/v1/jobs", "name: after\ntasks: [{name: w, replicas: 1, gpus: 0, cpu: 10m, command: [true]}]\n",
                  "application/yaml");
  };
  auto next = post();
  for (int i = 0; i < 200 && next && next->status == 503; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    next = post();
  }
  ASSERT_TRUE(next);
  EXPECT_EQ(next->status, 201) << next->body;
  EXPECT_EQ(json::parse(next->body)["id"], 4) << next->body;
}

// PostgreSQL's own failover: a synchronous streaming replica promoted after
// its primary crashed. rota, given both hosts with
// target_session_attrs=read-write, reconnects to the new primary, and every
// submission it acknowledged is there exactly once.
TEST(PostgresFailover, APromotedSynchronousReplicaLosesNothing) {
  TempDir tmp;
  std::string error;
  auto primary = TestPostgres::Start(&error);
  ASSERT_TRUE(primary) << error;
  primary->CreateDatabase("rota");
  auto replica = primary->StartSynchronousReplica(&error);
  ASSERT_TRUE(replica) << error;
  const std::string url = "postgresql://rota@127.0.0.1:" + std::to_string(primary->port()) + ",127.0.0.1:" +
                          std::to_string(replica->port()) + "/rota?target_session_attrs=read-write&connect_timeout=2";
  const std::string config = tmp.path() + "/cluster.yaml";
  std::ofstream(config) << "node_groups:\n  - {name: n, count: 2, gpus: 8, gpu_model: H100, cpu: 64, memory: 256Gi}\n";
  const int port = FreePort();
  const pid_t server = SpawnLogged({RotaBinary(), "server", "--data-dir", tmp.path() + "/data", "--listen",
                                    "127.0.0.1:" + std::to_string(port), "--store", url, "--config", config,
                                    "--rate-limit", "0"},
                                   tmp.path() + "/server.log");
  ASSERT_GT(server, 0);
  const Reaped reaped{server};
  std::string token;
  for (int i = 0; i < 200 && token.empty(); ++i) {
    token = ReadAll(tmp.path() + "/data/admin.token");
    while (!token.empty() && token.back() == '\n') token.pop_back();
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_FALSE(token.empty()) << ReadAll(tmp.path() + "/server.log");
  std::mutex mu;
  std::map<std::string, uint64_t> acks;
  std::vector<Clock::time_point> times;
  std::atomic<bool> running{true};
  std::thread submitter([&] {
    for (int n = 0; running; ++n) {
      const std::string key = "pg-" + std::to_string(n);
      for (int attempt = 0; attempt < 300 && running; ++attempt) {
        httplib::Client c("127.0.0.1", port);
        c.set_bearer_token_auth(token);
        c.set_read_timeout(5, 0);
        auto r = c.Post("/v1/jobs", {{"Idempotency-Key", key}},
                        "name: p\ntasks: [{name: w, replicas: 1, gpus: 0, cpu: 10m, command: [true]}]\n",
                        "application/yaml");
        if (r && (r->status == 200 || r->status == 201)) {
          std::lock_guard<std::mutex> lock(mu);
          acks[key] = json::parse(r->body)["id"];
          times.push_back(Clock::now());
          break;
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(50));
      }
    }
  });
  struct Joined {  // the submitter ends with the test, however it ends
    std::atomic<bool>& running;
    std::thread& thread;
    ~Joined() {
      running = false;
      if (thread.joinable()) thread.join();
    }
  } joined{running, submitter};
  auto count = [&] {
    std::lock_guard<std::mutex> lock(mu);
    return acks.size();
  };
  for (int i = 0; i < 200 && count() < 30; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  ASSERT_GE(count(), 30u);
  // The primary crashes; the operator (or Patroni) promotes the replica.
  const auto crashed = Clock::now();
  primary->Stop();
  const double stopped = Seconds(Clock::now() - crashed);
  ASSERT_TRUE(replica->Promote());
  std::printf("the primary stopped in %.2f s, the replica was promoted %.2f s after\n", stopped,
              Seconds(Clock::now() - crashed) - stopped);
  const size_t at_crash = count();
  for (int i = 0; i < 600 && count() < at_crash + 30; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  running = false;
  submitter.join();
  ASSERT_GE(count(), at_crash + 30) << ReadAll(tmp.path() + "/server.log");
  double gap = 0;
  Clock::time_point last = crashed;
  for (const auto& t : times) {
    if (t <= crashed) continue;
    gap = std::max(gap, Seconds(t - last));
    last = t;
  }
  std::printf("writes were unavailable for at most %.2f s around the crash and the promotion\n", gap);
  // Every acknowledgement is on the promoted replica, once.
  httplib::Client c("127.0.0.1", port);
  c.set_bearer_token_auth(token);
  auto r = c.Get("/v1/jobs?all=true&limit=10000");
  ASSERT_TRUE(r && r->status == 200);
  std::map<std::string, std::vector<uint64_t>> by_key;
  const json listing = json::parse(r->body);  // named: a range-for over a temporary's member dangles
  for (const auto& j : listing["jobs"]) {
    if (j.contains("request_id")) by_key[j["request_id"]].push_back(j["id"]);
  }
  size_t lost = 0;
  std::string example;
  for (const auto& [key, id] : acks) {
    if (by_key[key] == std::vector<uint64_t>{id}) continue;
    ++lost;
    if (example.empty()) {
      example = key + " acknowledged as job " + std::to_string(id) + ", listed as " + std::to_string(by_key[key].size()) + " jobs";
      for (uint64_t other : by_key[key]) example += " " + std::to_string(other);
    }
  }
  EXPECT_EQ(lost, 0u) << "of " << acks.size() << " acknowledged, e.g. " << example << "; the server's log:\n"
                      << ReadAll(tmp.path() + "/server.log");
}

}  // namespace
}  // namespace rota::testing
