// The control plane through the real binary: CLI round trips, bad input,
// durability under kill -9, metrics, and a job run by `rota up`'s local agent.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <mutex>
#include <nlohmann/json.hpp>
#include <fstream>
#include <functional>
#include <set>
#include <sstream>

#include "harness.h"

#include <pwd.h>

namespace rota::testing {
namespace {

using nlohmann::json;

class Integration : public ::testing::Test {
 protected:
  TempDir tmp;
  std::string Write(const std::string& name, const std::string& text) {
    const std::string path = tmp.path() + "/" + name;
    std::ofstream(path) << text;
    return path;
  }
};

// Job `id` once `done(job)` holds (or as it is after 20 s).
json WaitJob(httplib::Client& admin, int id, const std::function<bool(const json&)>& done) {
  json j;
  for (int i = 0; i < 400; ++i) {
    j = json::parse(admin.Get("/v1/jobs/" + std::to_string(id))->body);
    if (done(j)) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return j;
}

int CountJobs(RotaProcess& p) {
  auto r = p.Admin().Get("/v1/jobs?all=true");
  return r ? static_cast<int>(json::parse(r->body)["jobs"].size()) : -1;
}

TEST_F(Integration, UpRunsAJobThroughTheCliEndToEnd) {
  RotaProcess up("up", tmp.path() + "/data", {"--gpus", "4xH100:80Gi", "--name", "local"});
  const auto env = up.ClientEnv();
  const std::string job = Write("job.yaml", R"(
name: hello
tasks:
  - name: w
    replicas: 2
    gpus: 2
    command: [sh, -c, 'echo "rank=$RANK/$WORLD_SIZE gpus=$CUDA_VISIBLE_DEVICES job=$ROTA_JOB_ID"']
)");
  CommandResult submit = RunRota({"submit", job}, env, tmp.path());
  ASSERT_EQ(submit.exit_code, 0) << submit.err;
  EXPECT_EQ(submit.out, "submitted job 1 (hello) to queue default\n");
  // Wait until it has run.
  std::string state;
  for (int i = 0; i < 200 && state != "succeeded"; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    CommandResult d = RunRota({"describe", "1", "-o", "json"}, env, tmp.path());
    ASSERT_EQ(d.exit_code, 0) << d.err;
    state = json::parse(d.out)["state"];
  }
  ASSERT_EQ(state, "succeeded");
  CommandResult logs = RunRota({"logs", "1"}, env, tmp.path());
  EXPECT_NE(logs.out.find("rank=0/2 gpus=0,1 job=1"), std::string::npos) << logs.out;
  EXPECT_NE(logs.out.find("rank=1/2 gpus=2,3 job=1"), std::string::npos) << logs.out;
  CommandResult jobs = RunRota({"jobs", "--all"}, env, tmp.path());
  // The admin token is the Unix user's who started `rota up` (the column is as wide as the name or "USER").
  const std::string owner = getpwuid(geteuid())->pw_name;
  const std::string pad(owner.size() < 4 ? 4 - owner.size() : 0, ' ');
  EXPECT_NE(jobs.out.find("hello  " + owner + pad + "  default  succeeded"), std::string::npos) << jobs.out;
  CommandResult nodes = RunRota({"nodes"}, env, tmp.path());
  EXPECT_NE(nodes.out.find("local"), std::string::npos);
  EXPECT_NE(nodes.out.find("yes"), std::string::npos) << "simulated GPUs must say so:\n" << nodes.out;
  // Cancel a job that holds GPUs; exit codes for the error cases.
  const std::string hold = Write("hold.yaml", "name: hold\ntasks: [{gpus: 4, command: [sleep, '600']}]\n");
  ASSERT_EQ(RunRota({"submit", hold}, env, tmp.path()).exit_code, 0);
  CommandResult cancel = RunRota({"cancel", "2"}, env, tmp.path());
  EXPECT_EQ(cancel.exit_code, 0) << cancel.err;
  EXPECT_EQ(RunRota({"cancel", "2"}, env, tmp.path()).exit_code, 5);   // already cancelled: conflict
  EXPECT_EQ(RunRota({"describe", "99"}, env, tmp.path()).exit_code, 3);  // not found
  EXPECT_EQ(RunRota({"submit", Write("bad.yaml", "name: x\ntasks: [{gpus: two}]\n")}, env, tmp.path()).exit_code, 2);
  EXPECT_EQ(RunRota({"jobs"}, {"ROTA_SERVER=" + up.url(), "ROTA_TOKEN=wrong"}, tmp.path()).exit_code, 4);
}

// rota cancel --name/--user/--state, like scancel: every live job matching all of them.
TEST_F(Integration, CancelSelectsJobsByNameUserAndState) {
  RotaProcess up("up", tmp.path() + "/data", {"--gpus", "2xH100:80Gi", "--name", "local"});
  const auto env = up.ClientEnv();
  const std::string sweep = Write("sweep.yaml", "name: sweep\ntasks: [{gpus: 1, command: [sleep, '600']}]\n");
  const std::string other = Write("other.yaml", "name: other\ntasks: [{gpus: 1, command: [sleep, '600']}]\n");
  for (int i = 0; i < 3; ++i) ASSERT_EQ(RunRota({"submit", sweep}, env, tmp.path()).exit_code, 0);
  ASSERT_EQ(RunRota({"submit", other}, env, tmp.path()).exit_code, 0);
  CommandResult none = RunRota({"cancel", "--name", "nothing"}, env, tmp.path());
  EXPECT_EQ(none.exit_code, 0);
  EXPECT_NE(none.err.find("no live job matches --name nothing"), std::string::npos) << none.err;
  EXPECT_EQ(RunRota({"cancel", "--state", "bogus"}, env, tmp.path()).exit_code, 2);
  CommandResult c = RunRota({"cancel", "--name", "sweep"}, env, tmp.path());
  ASSERT_EQ(c.exit_code, 0) << c.err;
  EXPECT_NE(c.out.find("cancelled job 1 (sweep)"), std::string::npos) << c.out;
  EXPECT_NE(c.out.find("cancelled job 3 (sweep)"), std::string::npos) << c.out;
  EXPECT_EQ(c.out.find("other"), std::string::npos) << c.out;
  CommandResult jobs = RunRota({"jobs", "-o", "json"}, env, tmp.path());
  ASSERT_EQ(jobs.exit_code, 0);
  const json live = json::parse(jobs.out)["jobs"];
  ASSERT_EQ(live.size(), 1u) << jobs.out;
  EXPECT_EQ(live[0]["name"], "other");
  // rota top --watch shows it again every 2 s until interrupted.
  CommandResult top = RunShell("timeout 5 '" + RotaBinary() + "' top --watch", env, tmp.path());
  EXPECT_EQ(top.exit_code, 124) << top.err;
  size_t shown = 0;
  for (size_t at = top.out.find("GPUs allocated: 1/2"); at != std::string::npos; at = top.out.find("GPUs allocated: 1/2", at + 1)) {
    ++shown;
  }
  EXPECT_GE(shown, 2u) << top.out;  // at 0, 2 (and 4) s
}

// rota hold, release and requeue, like scontrol's.
TEST_F(Integration, HoldReleaseAndRequeue) {
  RotaProcess up("up", tmp.path() + "/data", {"--gpus", "1xH100:80Gi", "--name", "local"});
  const auto env = up.ClientEnv();
  const std::string job = Write("job.yaml", "name: j\ntasks: [{gpus: 1, command: [sleep, '600']}]\n");
  ASSERT_EQ(RunRota({"submit", job}, env, tmp.path()).exit_code, 0);
  ASSERT_EQ(RunRota({"submit", job}, env, tmp.path()).exit_code, 0);
  auto admin = up.Admin();
  auto running = [](const json& j) { return j.value("state", "") == "running"; };
  ASSERT_EQ(WaitJob(admin, 1, running)["state"], "running");
  CommandResult h = RunRota({"hold", "2"}, env, tmp.path());
  ASSERT_EQ(h.exit_code, 0) << h.err;
  EXPECT_EQ(h.out, "held job 2 (j)\n");
  CommandResult again = RunRota({"hold", "2"}, env, tmp.path());
  EXPECT_EQ(again.exit_code, 5);
  EXPECT_NE(again.err.find("is held already"), std::string::npos) << again.err;
  CommandResult not_pending = RunRota({"hold", "1"}, env, tmp.path());
  EXPECT_EQ(not_pending.exit_code, 5);
  EXPECT_NE(not_pending.err.find("only a pending job can be held"), std::string::npos) << not_pending.err;
  // Held: the GPU frees up, and it still waits, saying why.
  ASSERT_EQ(RunRota({"cancel", "1"}, env, tmp.path()).exit_code, 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  json held = json::parse(admin.Get("/v1/jobs/2")->body);
  EXPECT_EQ(held["state"], "pending");
  EXPECT_EQ(held["pending_reason"]["code"], "Held") << held.dump();
  EXPECT_NE(held["pending_reason"]["message"].get<std::string>().find("rota release 2"), std::string::npos);
  ASSERT_EQ(RunRota({"release", "2"}, env, tmp.path()).exit_code, 0);
  EXPECT_EQ(WaitJob(admin, 2, running)["state"], "running");
  EXPECT_EQ(RunRota({"release", "2"}, env, tmp.path()).exit_code, 5);  // not held
  // Requeue: back to the queue, and placed again (a new attempt).
  CommandResult rq = RunRota({"requeue", "2"}, env, tmp.path());
  ASSERT_EQ(rq.exit_code, 0) << rq.err;
  EXPECT_EQ(rq.out, "requeued job 2 (j)\n");
  json again_running = WaitJob(admin, 2, running);
  EXPECT_EQ(again_running["state"], "running");
  EXPECT_EQ(again_running.value("restarts", 0), 1) << again_running.dump();
  // One start and one end per attempt, each with its time.
  const json events = json::parse(admin.Get("/v1/jobs/2/events")->body)["events"];
  int bound = 0;
  bool requeued = false;
  for (const auto& e : events) {
    bound += e["event"] == "bound";
    if (e["event"] == "requeued") {
      requeued = true;
      EXPECT_NE(e["detail"].get<std::string>().find("requeued by"), std::string::npos) << events.dump();
      EXPECT_FALSE(e["at"].get<std::string>().empty()) << events.dump();
    }
  }
  EXPECT_EQ(bound, 2) << events.dump();
  EXPECT_TRUE(requeued) << events.dump();
  EXPECT_EQ(RunRota({"requeue", "1"}, env, tmp.path()).exit_code, 5);  // cancelled
  EXPECT_EQ(RunRota({"hold", "99"}, env, tmp.path()).exit_code, 3);
}

// rota whatif --profile FILE / --config FILE: today's queue under another
// policy, beside today's. A 4-GPU job holds the node for an hour; "big"
// (4 GPUs, 30m) was queued before "small" (1 GPU, 10m). First come first
// served: big at 1h, small when it ends (1h30m). Smallest first: small at
// 1h, big when it ends (1h10m).
TEST_F(Integration, WhatIfTriesAnotherProfileOrConfigOnTodaysQueue) {
  RotaProcess up("up", tmp.path() + "/data", {"--gpus", "4xH100:80Gi", "--name", "local"});
  const auto env = up.ClientEnv();
  auto submit = [&](const std::string& name, int gpus, const std::string& limit) {
    const std::string file = Write(name + ".yaml", "name: " + name + "\ntime_limit: " + limit + "\ntasks: [{gpus: " +
                                                       std::to_string(gpus) + ", command: [sleep, '600']}]\n");
    CommandResult r = RunRota({"submit", file}, env, tmp.path());
    ASSERT_EQ(r.exit_code, 0) << r.err;
  };
  submit("holds", 4, "1h");
  auto admin = up.Admin();
  ASSERT_EQ(WaitJob(admin, 1, [](const json& j) { return j.value("state", "") == "running"; })["state"], "running");
  submit("big", 4, "30m");
  submit("small", 1, "10m");
  const std::string profile = Write("smallest.yaml",
      "profile: {plugins: [priority, smallest-first, fifo, resource-fit, gang, topology, binpack]}\n");
  auto starts = [](const json& side) {
    std::map<std::string, int64_t> at;
    for (const json& j : side["jobs"]) at[j["name"]] = j["starts_in_s"].get<int64_t>();
    return at;
  };
  for (const char* flag : {"--profile", "--config"}) {
    CommandResult w = RunRota({"whatif", flag, profile, "-o", "json"}, env, tmp.path());
    ASSERT_EQ(w.exit_code, 0) << w.err;
    const json j = json::parse(w.out);
    auto base = starts(j["baseline"]), variant = starts(j["with_changes"]);
    EXPECT_NEAR(base["big"], 3600, 120) << w.out;
    EXPECT_NEAR(base["small"], 5400, 300) << w.out;
    EXPECT_NEAR(variant["small"], 3600, 120) << w.out;
    EXPECT_NEAR(variant["big"], 4200, 300) << w.out;
    EXPECT_EQ(j["with_changes"]["policy"], std::string(flag) == "--profile" ? "the body's profile" : "the body's config");
  }
  // The table says which side is which; a profile that cannot be built is
  // refused, naming the plugin and the file.
  CommandResult t = RunRota({"whatif", "--profile", profile}, env, tmp.path());
  ASSERT_EQ(t.exit_code, 0) << t.err;
  EXPECT_NE(t.out.find("EXPECTED START  WITH CHANGES"), std::string::npos) << t.out;
  const std::string bad = Write("bad.yaml", "profile: {plugins: [priority, quickest-first]}\n");
  CommandResult refused = RunRota({"whatif", "--profile", bad}, env, tmp.path());
  EXPECT_EQ(refused.exit_code, 2) << refused.out;
  EXPECT_NE(refused.err.find("quickest-first"), std::string::npos) << refused.err;
  const std::string typo = Write("typo.yaml", "profil: {}\n");
  CommandResult unknown = RunRota({"whatif", "--config", typo}, env, tmp.path());
  EXPECT_EQ(unknown.exit_code, 2);
  EXPECT_NE(unknown.err.find(typo + ":1:1: profil: unknown field"), std::string::npos) << unknown.err;
  // Another policy is an admin's to try (a config costs what it describes); a
  // user has today's projection.
  auto minted = admin.Post("/v1/tokens", R"({"user": "bob"})", "application/json");
  ASSERT_EQ(minted->status, 201) << minted->body;
  const std::vector<std::string> bob = {"ROTA_SERVER=" + up.url(), "ROTA_TOKEN=" + json::parse(minted->body)["token"].get<std::string>()};
  CommandResult denied = RunRota({"whatif", "--profile", profile}, bob, tmp.path());
  EXPECT_EQ(denied.exit_code, 4) << denied.err;
  EXPECT_NE(denied.err.find("for admins"), std::string::npos) << denied.err;
  EXPECT_EQ(RunRota({"whatif"}, bob, tmp.path()).exit_code, 0);
  const std::string huge = Write("huge.yaml", "node_groups: [{name: g, count: 1000000, gpus: 8, gpu_model: H100}]\n");
  CommandResult big = RunRota({"whatif", "--config", huge}, env, tmp.path());
  EXPECT_EQ(big.exit_code, 2);
  EXPECT_NE(big.err.find("a what-if config declares at most 100000"), std::string::npos) << big.err;
}

// rota whatif: the live queue projected forward by the server's own profile.
TEST_F(Integration, WhatIfGivesEveryPendingJobAnExpectedStart) {
  RotaProcess up("up", tmp.path() + "/data", {"--gpus", "4xH100:80Gi", "--name", "local"});
  const auto env = up.ClientEnv();
  auto submit = [&](const std::string& name, const std::string& limit) {
    const std::string file = Write(name + ".yaml", "name: " + name + "\n" + (limit.empty() ? "" : "time_limit: " + limit + "\n") +
                                                       "tasks: [{gpus: 4, command: [sleep, '600']}]\n");
    CommandResult r = RunRota({"submit", file}, env, tmp.path());
    ASSERT_EQ(r.exit_code, 0) << r.err;
  };
  submit("holds", "1h");
  auto admin = up.Admin();  // running before the others come
  ASSERT_EQ(WaitJob(admin, 1, [](const json& j) { return j.value("state", "") == "running"; })["state"], "running");
  submit("next", "30m");
  submit("open", "");
  submit("last", "10m");
  CommandResult w = RunRota({"whatif", "-o", "json"}, env, tmp.path());
  ASSERT_EQ(w.exit_code, 0) << w.err;
  const json j = json::parse(w.out);
  const json& jobs = j["baseline"]["jobs"];
  ASSERT_EQ(jobs.size(), 3u) << w.out;
  // "next" when "holds" reaches its hour, "open" 30 minutes later, "last"
  // after "open"'s estimated hour (no finished job yet: 1 h).
  EXPECT_EQ(jobs[0]["name"], "next");
  EXPECT_GE(jobs[0]["starts_in_s"].get<int64_t>(), 3500);
  EXPECT_LE(jobs[0]["starts_in_s"].get<int64_t>(), 3660);
  EXPECT_FALSE(jobs[0]["estimate"].get<bool>());
  // (Steps further ahead are coarser: a 32nd of the distance.)
  const int64_t gap1 = jobs[1]["starts_in_s"].get<int64_t>() - jobs[0]["starts_in_s"].get<int64_t>();
  EXPECT_GE(gap1, 1800) << w.out;
  EXPECT_LE(gap1, 1800 + 180) << w.out;
  EXPECT_FALSE(jobs[1]["estimate"].get<bool>());
  const int64_t gap2 = jobs[2]["starts_in_s"].get<int64_t>() - jobs[1]["starts_in_s"].get<int64_t>();
  EXPECT_GE(gap2, 3600 - 180) << w.out;
  EXPECT_LE(gap2, 3600 + 300) << w.out;
  EXPECT_TRUE(jobs[2]["estimate"].get<bool>());
  EXPECT_EQ(j["baseline"]["default_run_s"], 3600);
  // The table, and the same with the node drained, side by side.
  CommandResult t = RunRota({"whatif", "--drain", "local"}, env, tmp.path());
  ASSERT_EQ(t.exit_code, 0) << t.err;
  EXPECT_NE(t.out.find("EXPECTED START  WITH CHANGES"), std::string::npos) << t.out;
  EXPECT_NE(t.out.find("beyond horizon"), std::string::npos) << t.out;
  EXPECT_NE(t.out.find("~in "), std::string::npos) << t.out;
  // rota jobs --start: the same projection in the listing.
  CommandResult listing = RunRota({"jobs", "--start"}, env, tmp.path());
  ASSERT_EQ(listing.exit_code, 0) << listing.err;
  EXPECT_NE(listing.out.find("START"), std::string::npos) << listing.out;
  EXPECT_NE(listing.out.find("~in "), std::string::npos) << listing.out;
  CommandResult listing_json = RunRota({"jobs", "--start", "-o", "json"}, env, tmp.path());
  ASSERT_EQ(listing_json.exit_code, 0) << listing_json.err;
  const json lj = json::parse(listing_json.out);
  ASSERT_EQ(lj["jobs"].size(), 4u);
  EXPECT_FALSE(lj["jobs"][0].contains("starts_in_s"));  // running
  EXPECT_EQ(lj["jobs"][1]["starts_in_s"], jobs[0]["starts_in_s"]);
  // rota submit --dry-run: where and when, nothing submitted.
  const std::string dry = Write("dry.yaml", "name: dry\ntime_limit: 10m\ntasks: [{gpus: 2, command: [sleep, '1']}]\n");
  CommandResult d = RunRota({"submit", dry, "--dry-run"}, env, tmp.path());
  ASSERT_EQ(d.exit_code, 0) << d.err;
  EXPECT_NE(d.out.find("dry run: dry would be accepted into queue default and start in about "), std::string::npos) << d.out;
  EXPECT_NE(d.out.find(" on local[0,1]"), std::string::npos) << d.out;
  EXPECT_NE(d.out.find("(nothing was submitted)"), std::string::npos) << d.out;
  CommandResult dj = RunRota({"submit", dry, "--dry-run", "-o", "json"}, env, tmp.path());
  ASSERT_EQ(dj.exit_code, 0) << dj.err;
  // After "last" (it holds all 4 GPUs for its 10 minutes).
  const int64_t dry_in = json::parse(dj.out)["starts_in_s"].get<int64_t>();
  EXPECT_GE(dry_in, jobs[2]["starts_in_s"].get<int64_t>() + 600) << dj.out;
  EXPECT_LE(dry_in, jobs[2]["starts_in_s"].get<int64_t>() + 900) << dj.out;
  EXPECT_EQ(RunRota({"submit", Write("big.yaml", "name: big\ntasks: [{gpus: 8, command: [sleep, '600']}]\n"), "--dry-run"}, env, tmp.path()).exit_code, 2);
  CommandResult noq = RunRota({"submit", dry, "--dry-run", "--queue", "nope"}, env, tmp.path());
  EXPECT_EQ(noq.exit_code, 2);
  EXPECT_NE(noq.err.find("queue"), std::string::npos) << noq.err;
  EXPECT_EQ(CountJobs(up), 4);  // nothing was submitted
  // Bad changes: the field and the reason, exit 2.
  CommandResult bad = RunRota({"whatif", "--add-nodes", "gpu=2"}, env, tmp.path());
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("add_nodes: no node group 'gpu'"), std::string::npos) << bad.err;
  bad = RunRota({"whatif", "--add-nodes", "gpu"}, env, tmp.path());
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("is not GROUP=N"), std::string::npos) << bad.err;
  bad = RunRota({"whatif", "--horizon", "1y"}, env, tmp.path());
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("horizon: must be a duration"), std::string::npos) << bad.err;
}

// Two half-GPU jobs share the one GPU and run at once; a third waits; each
// task sees its GPU and its share; describe states the share and isolation.
TEST_F(Integration, GpuFractionsShareOneGpu) {
  RotaProcess up("up", tmp.path() + "/data", {"--gpus", "1xT4:16Gi", "--name", "edge"});
  const auto env = up.ClientEnv();
  auto admin = up.Admin();
  const std::string half = R"(tasks: [{gpu: {fraction: 0.5, memory: 6Gi},
                   command: [sh, -c, 'echo "gpus=$CUDA_VISIBLE_DEVICES share=$ROTA_GPU_FRACTION mem=$ROTA_GPU_MEMORY_LIMIT_MIB"; sleep 30']}])";
  for (const char* name : {"infer-a", "infer-b", "infer-c"}) {
    auto r = admin.Post("/v1/jobs", std::string("name: ") + name + "\n" + half + "\n", "application/yaml");
    ASSERT_EQ(r->status, 201) << r->body;
  }
  json a, c;
  for (int i = 0; i < 400; ++i) {  // until a and b run and c has been looked at
    a = json::parse(admin.Get("/v1/jobs/1")->body);
    c = json::parse(admin.Get("/v1/jobs/3")->body);
    const json b = json::parse(admin.Get("/v1/jobs/2")->body);
    if (a["state"] == "running" && b["state"] == "running" && c["pending_reason"]["code"] != "NotYetScheduled") break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_EQ(a["state"], "running") << a.dump();
  EXPECT_EQ(json::parse(admin.Get("/v1/jobs/2")->body)["state"], "running");
  EXPECT_EQ(c["state"], "pending") << c.dump();
  EXPECT_EQ(c["pending_reason"]["code"], "InsufficientGpus") << c.dump();
  ASSERT_EQ(a["placement"].size(), 1u);
  EXPECT_EQ(a["placement"][0]["gpus"], json::array({0}));
  EXPECT_EQ(a["placement"][0]["gpu_fraction"], "0.5");
  EXPECT_NE(a["placement"][0]["isolation"].get<std::string>().find("none"), std::string::npos);
  // The node shows its GPU shared by both.
  const json node = json::parse(admin.Get("/v1/nodes")->body)["nodes"][0];
  EXPECT_EQ(node["gpu_list"][0]["shared_milli"], 1000);
  EXPECT_EQ(node["gpu_list"][0]["jobs"].size(), 2u);
  // The task got its GPU and its limits.
  std::string logs;
  for (int i = 0; i < 400 && logs.find("share=") == std::string::npos; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    logs = RunRota({"logs", "1"}, env, tmp.path()).out;
  }
  EXPECT_NE(logs.find("gpus=0 share=0.5 mem=6144"), std::string::npos) << logs;
  // describe states the share and its isolation.
  const std::string described = RunRota({"describe", "1"}, env, tmp.path()).out;
  EXPECT_NE(described.find("0.5"), std::string::npos) << described;
  EXPECT_NE(described.find("none (shared GPU"), std::string::npos) << described;
  // When one ends, the waiting one takes its share.
  ASSERT_EQ(RunRota({"cancel", "1"}, env, tmp.path()).exit_code, 0);
  for (int i = 0; i < 400 && c["state"] != "running"; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    c = json::parse(admin.Get("/v1/jobs/3")->body);
  }
  EXPECT_EQ(c["state"], "running");
  // A whole-GPU job cannot take a shared GPU; a share beyond its memory is rejected.
  auto whole = admin.Post("/v1/jobs", "name: whole\ntasks: [{gpus: 1, command: [sleep, '600']}]\n", "application/yaml");
  ASSERT_EQ(whole->status, 201);
  auto hog = admin.Post("/v1/jobs", "name: hog\ntasks: [{gpu: {fraction: 0.2, memory: 32Gi}, command: [sleep, '600']}]\n", "application/yaml");
  EXPECT_EQ(hog->status, 422) << hog->body;
  json w;
  for (int i = 0; i < 400; ++i) {
    w = json::parse(admin.Get("/v1/jobs/4")->body);
    if (w["pending_reason"]["code"] != "NotYetScheduled") break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_EQ(w["state"], "pending") << w.dump();
}

// MIG through the real binary: a declared A100 whose GPU 0 is in MIG mode
// (two 3g.40gb). A 3g job gets an instance with hardware isolation; a 1g job
// waits while GPU 0 has an instance in use (only idle GPUs are re-partitioned)
// and starts once it is idle again, on the new layout; the layout survives a
// kill -9 of the server.
TEST_F(Integration, MigInstancesAndRepartitioning) {
  RotaProcess up("up", tmp.path() + "/data",
                 {"--gpus", "2xA100:80Gi", "--mig", "3g.40gb,3g.40gb", "--mig-gpus", "1", "--name", "mig",
                  "--nvlink-islands", "2"});
  const auto env = up.ClientEnv();
  auto admin = up.Admin();
  auto wait_for = [&](int id, const std::function<bool(const json&)>& done) { return WaitJob(admin, id, done); };
  auto r = admin.Post("/v1/jobs", R"(name: m3
tasks: [{gpu: {mig: 3g.40gb}, command: [sh, -c, 'echo "mig=$ROTA_MIG_INSTANCE cuda=$CUDA_VISIBLE_DEVICES"; sleep 60']}])",
                      "application/yaml");
  ASSERT_EQ(r->status, 201) << r->body;
  json m3 = wait_for(1, [](const json& j) { return j["state"] == "running"; });
  ASSERT_EQ(m3["state"], "running") << m3.dump();
  EXPECT_EQ(m3["placement"][0]["gpus"], json::array({0}));
  EXPECT_EQ(m3["placement"][0]["mig"], "3g.40gb@0");
  EXPECT_EQ(m3["placement"][0]["isolation"], "hardware (MIG instance)");
  std::string logs;
  for (int i = 0; i < 400 && logs.find("mig=") == std::string::npos; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    logs = RunRota({"logs", "1"}, env, tmp.path()).out;
  }
  EXPECT_NE(logs.find("mig=0:3g.40gb@0 cuda=MIG-simulated-0:3g.40gb@0"), std::string::npos) << logs;
  const std::string described = RunRota({"describe", "1"}, env, tmp.path()).out;
  EXPECT_NE(described.find("MIG 3g.40gb@0"), std::string::npos) << described;
  // A whole-GPU job takes GPU 1, never the MIG GPU.
  ASSERT_EQ(admin.Post("/v1/jobs", "name: whole\ntasks: [{gpus: 1, command: [sleep, '60']}]\n", "application/yaml")->status, 201);
  json whole = wait_for(2, [](const json& j) { return j["state"] == "running"; });
  EXPECT_EQ(whole["placement"][0]["gpus"], json::array({1})) << whole.dump();
  // No 1g instance and GPU 0 is not idle: it waits.
  ASSERT_EQ(admin.Post("/v1/jobs", "name: m1\ntasks: [{gpu: {mig: 1g.10gb}, command: [sleep, '61']}]\n",
                       "application/yaml")->status, 201);
  json m1 = wait_for(3, [](const json& j) { return j.contains("pending_reason") && j["pending_reason"]["code"] != "NotYetScheduled"; });
  EXPECT_EQ(m1["state"], "pending") << m1.dump();
  EXPECT_NE(m1["pending_reason"]["message"].get<std::string>().find("re-partition"), std::string::npos) << m1.dump();
  json node = json::parse(admin.Get("/v1/nodes")->body)["nodes"][0];
  EXPECT_EQ(node["gpu_list"][0]["mig"], "3g.40gb@0*,3g.40gb@4") << node.dump();
  EXPECT_EQ(node["gpus_allocated"], 2);
  EXPECT_EQ(node["nvlink_islands"], 2);  // declared with --nvlink-islands
  const std::string top = RunRota({"top"}, env, tmp.path()).out;
  EXPECT_NE(top.find("3g.40gb@0*,3g.40gb@4"), std::string::npos) << top;
  // A profile no GPU offers is refused at submission.
  auto a40 = admin.Post("/v1/jobs", "name: a40\ntasks: [{gpu: {mig: 1g.5gb}, command: [sleep, '600']}]\n", "application/yaml");
  EXPECT_EQ(a40->status, 422) << a40->body;
  EXPECT_NE(a40->body.find("MIG-mode GPU offering that profile"), std::string::npos) << a40->body;
  // GPU 0 idle again: re-partitioned for the 1g job (the rest filled with the largest that fit).
  ASSERT_EQ(RunRota({"cancel", "1"}, env, tmp.path()).exit_code, 0);
  m1 = wait_for(3, [](const json& j) { return j["state"] == "running"; });
  ASSERT_EQ(m1["state"], "running") << m1.dump();
  EXPECT_EQ(m1["placement"][0]["mig"], "1g.10gb@0");
  node = json::parse(admin.Get("/v1/nodes")->body)["nodes"][0];
  EXPECT_EQ(node["gpu_list"][0]["mig"], "1g.10gb@0*,1g.10gb@1,2g.20gb@2,3g.40gb@4") << node.dump();
  // Durable: the new layout and the instance in use come back from the journal.
  // (Killed once its task runs: "running" is the server's word, and a kill
  // while the agent still launched it could leave it lost, so failed.)
  bool started = false;
  for (int i = 0; i < 200 && !started; ++i) {
    ForEachLiveProcess({"sleep", "61"}, [&](pid_t, const std::string& dir) {
      const std::string env = std::string(1, '\0') + ReadAll(dir + "/environ");
      if (env.find(std::string(1, '\0') + "ROTA_JOB_ID=3" + std::string(1, '\0')) != std::string::npos) {
        started = true;
      }
    });
    if (!started) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_TRUE(started) << "job 3's task never started";
  up.Kill(SIGKILL);
  up.Restart();
  node = json::parse(up.Admin().Get("/v1/nodes")->body)["nodes"][0];
  EXPECT_EQ(node["gpu_list"][0]["mig"], "1g.10gb@0*,1g.10gb@1,2g.20gb@2,3g.40gb@4") << node.dump();
}

// A task that ends while rota up is down is found ended by the restarted
// agent: the job ends when the task did (its supervisor's exit file says
// when), not when it was found. (It read 10 s for a task of 2 s, and the
// GPU-hours were charged for the server's downtime.)
TEST_F(Integration, ATaskThatEndedWhileTheAgentWasDownEndsWhenItDid) {
  RotaProcess up("up", tmp.path() + "/data", {"--gpus", "2xH100:80Gi", "--name", "local"});
  auto admin = up.Admin();
  auto r = admin.Post("/v1/jobs", R"({"name": "short", "tasks": [{"gpus": 1, "command": ["sh", "-c", "echo started; sleep 2"]}]})",
                      "application/json");
  ASSERT_EQ(r->status, 201) << r->body;
  // Killed once the task runs (before, its supervisor would not have started it: the next agent would).
  std::string logs;
  for (int i = 0; i < 200 && logs.find("started") == std::string::npos; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    if (auto l = admin.Get("/v1/jobs/1/logs"); l && l->status == 200) logs = l->body;
  }
  ASSERT_NE(logs.find("started"), std::string::npos);
  up.Kill(SIGKILL);
  std::this_thread::sleep_for(std::chrono::seconds(6));  // (the task ends 2 s in, alone)
  up.Restart();
  auto again = up.Admin();
  const json ended = WaitJob(again, 1, [](const json& j) { return j["state"] == "succeeded" || j["state"] == "failed"; });
  EXPECT_EQ(ended["state"], "succeeded") << ended.dump();
  EXPECT_LE(ended.value("elapsed_s", -1), 4) << ended.dump();
  EXPECT_GE(ended.value("elapsed_s", -1), 1) << ended.dump();
  // And its usage record (what rota report charges) ends then too.
  auto usage = again.Get("/v1/jobs/1/usage");
  ASSERT_TRUE(usage);
  const json attempts = json::parse(usage->body)["attempts"];
  ASSERT_EQ(attempts.size(), 1u) << usage->body;
  EXPECT_LE(attempts[0].value("seconds", -1), 4) << usage->body;
  EXPECT_EQ(attempts[0]["ended_at"], ended["finished_at"]) << usage->body;
}

// Elastic through the real binary: a 1..4 x 1-GPU job starts with the 2 GPUs
// free, gives one up to a higher-priority job (its gang restarts with world
// size 1), and grows to 4 once the GPUs are free and it has run the minimum
// runtime; every attempt sees its world size.
TEST_F(Integration, ElasticJobStartsSmallShrinksAndGrows) {
  RotaProcess up("up", tmp.path() + "/data", {"--gpus", "4xH100:80Gi", "--name", "el", "--min-runtime", "1s"});
  const auto env = up.ClientEnv();
  auto admin = up.Admin();
  auto wait_for = [&](int id, const std::function<bool(const json&)>& done) { return WaitJob(admin, id, done); };
  auto logs_have = [&](int id, const std::string& text) {
    std::string logs;
    for (int i = 0; i < 400 && logs.find(text) == std::string::npos; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      logs = RunRota({"logs", std::to_string(id)}, env, tmp.path()).out;
    }
    EXPECT_NE(logs.find(text), std::string::npos) << logs;
  };
  ASSERT_EQ(admin.Post("/v1/jobs", "name: blocker\ntasks: [{gpus: 2, command: [sleep, '60']}]\n", "application/yaml")->status, 201);
  ASSERT_EQ(wait_for(1, [](const json& j) { return j["state"] == "running"; })["state"], "running");
  auto r = admin.Post("/v1/jobs", R"(name: el
elastic: {min_replicas: 1}
tasks: [{replicas: 4, gpus: 1, command: [sh, -c, 'echo "world=$WORLD_SIZE rank=$RANK"; trap "exit 0" USR1; sleep 60 & wait']}])",
                      "application/yaml");
  ASSERT_EQ(r->status, 201) << r->body;
  json el = wait_for(2, [](const json& j) { return j["state"] == "running"; });
  ASSERT_EQ(el["state"], "running") << el.dump();
  EXPECT_EQ(el["placement"].size(), 2u) << el.dump();
  EXPECT_EQ(el["elastic"]["running"], 2);
  logs_have(2, "world=2 rank=1");
  // A higher-priority 1-GPU job: el gives up one replica (it is above its minimum).
  ASSERT_EQ(admin.Post("/v1/jobs", "name: hi\npriority: high\ntasks: [{gpus: 1, command: [sleep, '60']}]\n",
                       "application/yaml")->status, 201);
  json hi = wait_for(3, [](const json& j) { return j["state"] == "running"; });
  EXPECT_EQ(hi["state"], "running") << hi.dump();
  el = json::parse(admin.Get("/v1/jobs/2")->body);
  EXPECT_EQ(el["placement"].size(), 1u) << el.dump();
  EXPECT_EQ(el["state"], "running");
  logs_have(2, "world=1 rank=0");
  const std::string described = RunRota({"describe", "2"}, env, tmp.path()).out;
  EXPECT_NE(described.find("1 running of 1..4 replicas (1 resizes)"), std::string::npos) << described;
  EXPECT_NE(described.find("shrunk by 1 replica(s) to 1 for job 3"), std::string::npos) << described;
  // The GPUs free up: it grows back to all 4 replicas.
  ASSERT_EQ(RunRota({"cancel", "1"}, env, tmp.path()).exit_code, 0);
  ASSERT_EQ(RunRota({"cancel", "3"}, env, tmp.path()).exit_code, 0);
  el = wait_for(2, [](const json& j) { return j["placement"].size() == 4; });
  EXPECT_EQ(el["placement"].size(), 4u) << el.dump();
  EXPECT_EQ(el["elastic"]["resizes"], 2);
  logs_have(2, "world=4 rank=3");
}

// An elastic job's crashing rank restarts alone: rank 0 runs once, start to
// end, while rank 1 fails its first attempt and succeeds on its second.
TEST_F(Integration, ElasticRankRestartsAlone) {
  RotaProcess up("up", tmp.path() + "/data", {"--gpus", "2xH100:80Gi", "--name", "ranks"});
  auto admin = up.Admin();
  const std::string marker = tmp.path() + "/rank1-failed-once";
  auto r = admin.Post("/v1/jobs", "name: ranks\nelastic: {min_replicas: 1}\nrestart: {policy: on-failure, max_restarts: 2}\n"
                                  "tasks: [{replicas: 2, gpus: 1, command: [sh, -c, 'echo \"start rank=$RANK\"; "
                                  "if [ \"$RANK\" = 1 ] && [ ! -f " + marker + " ]; then touch " + marker +
                                  "; echo failing; exit 3; fi; sleep 2; echo \"done rank=$RANK\"']}]\n",
                      "application/yaml");
  ASSERT_EQ(r->status, 201) << r->body;
  json j = WaitJob(admin, 1, [](const json& x) { return x["state"] == "succeeded" || x["state"] == "failed"; });
  ASSERT_EQ(j["state"], "succeeded") << j.dump();
  EXPECT_EQ(j["rank_restarts"], 1) << j.dump();
  EXPECT_EQ(j["restarts"], 0) << j.dump();
  const std::string logs = RunRota({"logs", "1"}, up.ClientEnv(), tmp.path()).out;
  const size_t rank0 = logs.find("==> main-0 <=="), rank1 = logs.find("==> main-1 <==");
  ASSERT_NE(rank0, std::string::npos) << logs;
  ASSERT_NE(rank1, std::string::npos) << logs;
  const std::string log0 = logs.substr(rank0, rank1 > rank0 ? rank1 - rank0 : std::string::npos);
  const std::string log1 = logs.substr(rank1, rank0 > rank1 ? rank0 - rank1 : std::string::npos);
  auto count = [](const std::string& text, const std::string& what) {
    size_t n = 0;
    for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
    return n;
  };
  EXPECT_EQ(count(log0, "start rank=0"), 1u) << "rank 0 was restarted: " << logs;
  EXPECT_EQ(count(log0, "done rank=0"), 1u) << logs;
  EXPECT_EQ(count(log1, "start rank=1"), 2u) << logs;
  EXPECT_EQ(count(log1, "failing"), 1u) << logs;
  EXPECT_EQ(count(log1, "done rank=1"), 1u) << logs;
}

// A gang's rank 0 is not started on its rendezvous port while another
// process holds it (PortTaken): here an elastic job's rank 0, restarted
// alone at its gang attempt's port, which the test took meanwhile (as
// another user's task on the node could, had it learned the port). The
// start fails, saying why, rather than run a rank 0 that cannot listen
// while the other ranks may meet whoever does.
TEST_F(Integration, ARankZeroIsNotStartedOnARendezvousPortAnotherProcessHolds) {
  RotaProcess up("up", tmp.path() + "/data", {"--gpus", "2xH100:80Gi", "--name", "ranks"});
  auto admin = up.Admin();
  const std::string port_file = tmp.path() + "/port", go = tmp.path() + "/go";
  auto r = admin.Post("/v1/jobs", "name: ranks\nelastic: {min_replicas: 1}\nrestart: {policy: on-failure, max_restarts: 1}\n"
                                  "tasks: [{replicas: 2, gpus: 1, command: [sh, -c, 'if [ \"$RANK\" = 0 ]; then "
                                  "echo $MASTER_PORT > " + port_file + ".tmp && mv " + port_file + ".tmp " + port_file +
                                  "; while [ ! -f " + go + " ]; do sleep 0.05; done; exit 3; fi; sleep 30']}]\n",
                      "application/yaml");
  ASSERT_EQ(r->status, 201) << r->body;
  for (int i = 0; i < 400 && ReadAll(port_file).empty(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  const int port = std::atoi(ReadAll(port_file).c_str());
  ASSERT_GE(port, 20000) << ReadAll(port_file);
  ASSERT_LE(port, 32767);
  // Taken, then rank 0 fails and restarts alone at the same port.
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_ANY);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0) << std::strerror(errno);
  ASSERT_EQ(listen(fd, 1), 0);
  std::ofstream(go) << "";
  json j = WaitJob(admin, 1, [](const json& x) { return x["state"] == "succeeded" || x["state"] == "failed"; });
  close(fd);
  EXPECT_EQ(j["state"], "failed") << j.dump();
  EXPECT_NE(j.value("end_reason", "").find("main-0 did not start: cannot start the task: its rendezvous port (MASTER_PORT) is "
                                           "held by another process on this node (IPv4 port " + std::to_string(port) +
                                           ": Address already in use)"),
            std::string::npos)
      << j.dump();
  // (Its other rank is stopped with it.)
  RunRota({"cancel", "1"}, up.ClientEnv(), tmp.path());
}

// OCI containers through the real binary, with each runtime installed: a
// task naming a rootfs (a static busybox) runs in a container (its own PID 1)
// with the job's data mount read-only, its world size, and the job directory
// at /rota (a checkpoint written there reaches the server).
TEST_F(Integration, TasksRunInOciContainers) {
  if (geteuid() != 0) GTEST_SKIP() << "OCI containers need root here (runc/crun create namespaces and cgroups)";
  const std::string busybox = "/bin/busybox";
  if (access(busybox.c_str(), X_OK) != 0) GTEST_SKIP() << "no static busybox to build a rootfs from (busybox-static)";
  const std::string rootfs = tmp.path() + "/image/rootfs";
  std::filesystem::create_directories(rootfs + "/bin");
  std::filesystem::copy_file(busybox, rootfs + "/bin/busybox");
  for (const char* c : {"sh", "cat", "echo", "head", "tr"}) std::filesystem::create_symlink("busybox", rootfs + "/bin/" + c);
  std::filesystem::create_directories(tmp.path() + "/data");
  std::ofstream(tmp.path() + "/data/f") << "hello-data\n";
  int ran = 0;
  for (const char* runtime : {"runc", "crun"}) {
    if (access((std::string("/usr/sbin/") + runtime).c_str(), X_OK) != 0 &&
        access((std::string("/usr/bin/") + runtime).c_str(), X_OK) != 0) {
      std::printf("%s is not installed: skipping its part\n", runtime);
      continue;
    }
    ++ran;
    RotaProcess up("up", tmp.path() + "/data-" + runtime,
                   {"--gpus", "2xH100:80Gi", "--name", std::string("oci-") + runtime, "--oci-runtime", runtime});
    auto admin = up.Admin();
    const std::string job = "name: boxed\nmounts: [{source: " + tmp.path() + "/data, target: /data, read_only: true}]\n"
        "tasks: [{gpus: 1, memory: 256Mi, rootfs: " + tmp.path() + "/image, command: [sh, -c, "
        "'echo \"pid1=$(cat /proc/1/comm) rank=$RANK world=$WORLD_SIZE\"; cat /data/f; "
        "(echo x > /data/g) 2>/dev/null || echo ro-ok; (echo x > /rota/planted) 2>/dev/null || echo jobdir-ro; "
        "echo /ckpt/c1 > $ROTA_CHECKPOINT_FILE; sleep 1']}]\n";
    auto r = admin.Post("/v1/jobs", job, "application/yaml");
    ASSERT_EQ(r->status, 201) << r->body;
    json j = WaitJob(admin, 1, [](const json& x) { return x["state"] == "succeeded" || x["state"] == "failed"; });
    const std::string logs = RunRota({"logs", "1"}, up.ClientEnv(), tmp.path()).out;
    EXPECT_EQ(j["state"], "succeeded") << runtime << ": " << j.dump() << "\n" << logs;
    EXPECT_NE(logs.find("pid1=sh rank=0 world=1"), std::string::npos) << runtime << ": " << logs;
    EXPECT_NE(logs.find("hello-data"), std::string::npos) << runtime << ": " << logs;
    EXPECT_NE(logs.find("ro-ok"), std::string::npos) << runtime << ": " << logs;
    // The job's directory is the agent's (hostfile, logs, bundles): read-only
    // inside even to a container's root; only work/ is the task's.
    EXPECT_NE(logs.find("jobdir-ro"), std::string::npos) << runtime << ": " << logs;
    EXPECT_EQ(j["last_checkpoint"]["path"], "/ckpt/c1") << runtime << ": " << j.dump();
    // A rootfs the node lacks fails the task with the reason in its log.
    auto bad = admin.Post("/v1/jobs", "name: nofs\ntasks: [{rootfs: /no/such/rootfs, cpu: 1, command: [true]}]\n",
                          "application/yaml");
    ASSERT_EQ(bad->status, 201) << bad->body;
    j = WaitJob(admin, 2, [](const json& x) { return x["state"] == "failed"; });
    EXPECT_EQ(j["state"], "failed") << j.dump();
    const std::string bad_logs = RunRota({"logs", "2"}, up.ClientEnv(), tmp.path()).out;
    EXPECT_NE(bad_logs.find("rootfs '/no/such/rootfs' is not a directory on this node"), std::string::npos) << bad_logs;
    EXPECT_NE(j.value("end_reason", "").find("main-0 did not start: cannot start the container: rootfs '/no/such/rootfs'"),
              std::string::npos)
        << j.dump();
    // Past its memory limit inside the container: reported as an OOM kill.
    auto hog = admin.Post("/v1/jobs", "name: hog\ntasks: [{memory: 32Mi, rootfs: " + tmp.path() +
                                          "/image, command: [sh, -c, 'a=$(head -c 100000000 /dev/zero | tr \"\\\\0\" x); echo survived']}]\n",
                          "application/yaml");
    ASSERT_EQ(hog->status, 201) << hog->body;
    j = WaitJob(admin, 3, [](const json& x) { return x["state"] == "failed" || x["state"] == "succeeded"; });
    EXPECT_EQ(j["state"], "failed") << runtime << ": " << j.dump();
    EXPECT_NE(j.value("end_reason", "").find("OOM-killed"), std::string::npos) << runtime << ": " << j.dump();
    // A program the image lacks does not start, and says so (the runtime
    // would exit 1 with it, as if the program had).
    auto missing = admin.Post("/v1/jobs", "name: typo\ntasks: [{cpu: 1, rootfs: " + tmp.path() + "/image, command: [shh]}]\n",
                              "application/yaml");
    ASSERT_EQ(missing->status, 201) << missing->body;
    j = WaitJob(admin, 4, [](const json& x) { return x["state"] == "failed" || x["state"] == "succeeded"; });
    EXPECT_EQ(j["state"], "failed") << runtime << ": " << j.dump();
    EXPECT_NE(j.value("end_reason", "").find("main-0 did not start: cannot start the container: 'shh' is not in the image's PATH"),
              std::string::npos)
        << runtime << ": " << j.dump();
  }
  if (ran == 0) GTEST_SKIP() << "neither runc nor crun is installed";
}

// `rota up` with a stand-in crun first in PATH: the real crun, but each
// delete writes its pid and container id to `deletes` and runs `on_delete`
// (shell, $id the container) instead, and each run writes its container's
// id to `runs`. With a rootfs of a static busybox in `image`. At the end,
// whatever failed, the stand-in's deletes still running end and the real
// runtime deletes what they left. Skips where this machine cannot run it.
class StandInCrun {
 public:
  StandInCrun(const std::string& dir, const std::string& on_delete) : dir_(dir) {
    for (const char* d : {"/usr/bin/", "/usr/sbin/"}) {
      if (access((std::string(d) + "crun").c_str(), X_OK) == 0) crun_ = std::string(d) + "crun";
    }
    if (geteuid() != 0) why_not_ = "OCI containers need root here (runc/crun create namespaces and cgroups)";
    else if (access("/bin/busybox", X_OK) != 0) why_not_ = "no static busybox to build a rootfs from (busybox-static)";
    else if (crun_.empty()) why_not_ = "crun is not installed";
    if (!why_not_.empty()) return;
    const std::string rootfs = dir + "/image/rootfs";
    std::filesystem::create_directories(rootfs + "/bin");
    // The runtime's mount points, as an image has them: else two containers
    // started at once race to make them ("cannot mkdir `proc`: File exists").
    for (const char* d : {"/proc", "/dev", "/sys", "/tmp"}) std::filesystem::create_directories(rootfs + d);
    std::filesystem::copy_file("/bin/busybox", rootfs + "/bin/busybox");
    for (const char* c : {"sh", "sleep", "echo"}) std::filesystem::create_symlink("busybox", rootfs + "/bin/" + c);
    std::filesystem::create_directories(dir + "/bin");
    std::ofstream(dir + "/bin/crun") << "#!/bin/sh\nfor id; do :; done\nfor a in \"$@\"; do\n"
                                     << "  if [ \"$a\" = delete ]; then echo $$ $id >> " << deletes() << "; " << on_delete
                                     << "; fi\n  if [ \"$a\" = run ]; then echo $id >> " << runs() << "; fi\ndone\nexec "
                                     << crun_ << " \"$@\"\n";
    std::filesystem::permissions(dir + "/bin/crun", std::filesystem::perms::owner_all);
  }
  ~StandInCrun() {
    std::stringstream lines(ReadAll(deletes()));
    pid_t pid;
    std::string id;
    while (lines >> pid >> id) {
      if (ReadAll("/proc/" + std::to_string(pid) + "/cmdline").starts_with("sleep")) kill(pid, SIGKILL);
      std::system((crun_ + " delete --force " + id + " >/dev/null 2>&1").c_str());
    }
  }
  const std::string& why_not() const { return why_not_; }
  std::string deletes() const { return dir_ + "/deletes"; }
  std::string runs() const { return dir_ + "/runs"; }
  std::string image() const { return dir_ + "/image"; }
  // `rota up` with `extra`, its agent finding the stand-in first.
  std::unique_ptr<RotaProcess> Up(std::vector<std::string> extra) {
    const char* path = getenv("PATH");
    const std::string before = path != nullptr ? path : "/usr/bin:/bin";
    setenv("PATH", (dir_ + "/bin:" + before).c_str(), 1);
    extra.insert(extra.end(), {"--oci-runtime", "crun"});
    auto up = std::make_unique<RotaProcess>("up", dir_ + "/data", extra);
    setenv("PATH", before.c_str(), 1);
    return up;
  }

 private:
  std::string dir_, crun_, why_not_;
};

// Whether a node of `admin`'s server shows as lost at any time in the next `seconds`.
bool LostWithin(httplib::Client& admin, int seconds) {
  bool lost = false;
  for (int i = 0; i < seconds * 5; ++i) {
    // (The parsed document kept: a range over a temporary's member would
    // outlive the temporary.)
    const json doc = json::parse(admin.Get("/v1/nodes")->body);
    for (const json& n : doc["nodes"]) lost = lost || n["state"] == "lost";
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  return lost;
}

// The OCI runtime's delete of a container that outlived its stop is not
// waited for with the agent's lock held: one that hangs (a runtime stuck on
// the container's cgroup; here a stand-in crun whose delete sleeps) leaves
// the agent reporting and starting tasks. Before, the agent waited on it
// for good: no report went out, the node was declared lost (and its lease
// fenced every task on it); with each wait cut at 5 s it was lost all the
// same, every pass of the reap loop waiting again. A delete killed after
// 30 s drains the node, with the reason, until a delete of the container
// succeeds (the agent tries again).
TEST_F(Integration, AHungRuntimeDeleteDoesNotHoldTheAgent) {
  // (Its deletes hang while the file `hang` is there, then delete.)
  const std::string hang = tmp.path() + "/hang";
  std::ofstream(hang) << "";
  StandInCrun crun(tmp.path(), "while [ -e " + hang + " ]; do sleep 0.2; done");
  if (!crun.why_not().empty()) GTEST_SKIP() << crun.why_not();
  auto up = crun.Up({"--gpus", "2xH100:80Gi", "--node-timeout", "4s"});
  auto admin = up->Admin();
  // Two containers that ignore their stop signal: killed after the agent's
  // grace, then deleted (each delete cut at 5 s with the lock held, the two
  // outlasted the node's timeout).
  for (int k = 1; k <= 2; ++k) {
    auto r = admin.Post("/v1/jobs", "name: stubborn\ntasks: [{gpus: 1, rootfs: " + crun.image() +
                                        ", command: [sh, -c, 'trap \"\" TERM; echo up; sleep 100']}]\n",
                        "application/yaml");
    ASSERT_EQ(r->status, 201) << r->body;
  }
  json j;
  for (int k = 1; k <= 2; ++k) {
    j = WaitJob(admin, k, [](const json& x) { return x["state"] != "pending"; });
    ASSERT_EQ(j["state"], "running") << j.dump() << "\n" << RunRota({"logs", std::to_string(k)}, up->ClientEnv(), tmp.path()).out
                                     << "\n" << ReadAll(tmp.path() + "/data.log");
  }
  std::this_thread::sleep_for(std::chrono::seconds(1));
  ASSERT_EQ(RunRota({"cancel", "--name", "stubborn"}, up->ClientEnv(), tmp.path()).exit_code, 0);
  for (int i = 0; i < 400 && ReadAll(crun.deletes()).empty(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  ASSERT_FALSE(ReadAll(crun.deletes()).empty()) << "the runtime's delete never ran";
  // While it hangs: the node stays reported (its timeout is 4 s) and runs the next job.
  auto next = admin.Post("/v1/jobs", "name: next\ntasks: [{cpu: 1, command: [sh, -c, 'echo second']}]\n", "application/yaml");
  ASSERT_EQ(next->status, 201) << next->body;
  EXPECT_FALSE(LostWithin(admin, 8)) << "the node was declared lost while the runtime's delete hung";
  j = WaitJob(admin, 3, [](const json& x) { return x["state"] == "succeeded" || x["state"] == "failed"; });
  EXPECT_EQ(j["state"], "succeeded") << j.dump();
  for (int k = 1; k <= 2; ++k) {
    j = WaitJob(admin, k, [](const json& x) { return x["state"] == "cancelled"; });
    EXPECT_EQ(j["state"], "cancelled") << j.dump() << "\n" << RunRota({"logs", std::to_string(k)}, up->ClientEnv(), tmp.path()).out;
  }
  // Once a delete is killed after 30 s, the agent reports its runtime's
  // trouble and the server drains the node (RuntimeTrouble): new tasks
  // would only meet the same runtime.
  auto drain_reason = [&] {
    const json doc = json::parse(admin.Get("/v1/nodes")->body);
    return doc["nodes"][0].value("drain_reason", "");
  };
  std::string reason;
  for (int i = 0; i < 600 && reason.empty(); ++i) {
    reason = drain_reason();
    if (reason.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  // (No job or container named: every user reads a drain's reason. One
  // container or two: the reason is as the drain began, and the two deletes
  // may be killed on two passes of the agent, a report between.)
  EXPECT_TRUE(reason.starts_with("runtime: the OCI runtime could not delete ")) << reason << "\n"
                                                                               << ReadAll(tmp.path() + "/data.log");
  EXPECT_EQ(reason.find("rota-"), std::string::npos) << reason;
  // A new job waits, saying why.
  ASSERT_EQ(admin.Post("/v1/jobs", "name: later\ntasks: [{cpu: 1, command: [sh, -c, 'echo later']}]\n", "application/yaml")->status,
            201);
  j = WaitJob(admin, 4, [](const json& x) {
    return x.contains("pending_reason") && x["pending_reason"]["code"] != "NotYetScheduled";
  });
  EXPECT_EQ(j["state"], "pending") << j.dump();
  EXPECT_NE(j["pending_reason"].value("message", "").find("runtime: the OCI runtime could not delete"), std::string::npos)
      << j.dump();
  // The runtime comes back: the next try deletes them, the node is undrained
  // and the job runs.
  std::filesystem::remove(hang);
  for (int i = 0; i < 300 && !drain_reason().empty(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  EXPECT_EQ(drain_reason(), "") << ReadAll(tmp.path() + "/data.log");
  j = WaitJob(admin, 4, [](const json& x) { return x["state"] == "succeeded" || x["state"] == "failed"; });
  EXPECT_EQ(j["state"], "succeeded") << j.dump();
  EXPECT_FALSE(LostWithin(admin, 1));
}

// A container's start whose name a stale container still holds (an agent
// killed while it launched that attempt) waits for the runtime's delete of
// it without holding the agent: the node stays reported while the delete
// takes 8 s, and the container starts once it has ended. Before, the agent
// waited for the delete with its lock held (for good, then for 5 s).
TEST_F(Integration, AContainerStartWaitsForTheDeleteOfAStaleOneOfItsName) {
  // (The delete takes 8 s, then removes the stale state and deletes as crun does.)
  StandInCrun crun(tmp.path(), "sleep 8; rm -rf /run/crun/$id");
  if (!crun.why_not().empty()) GTEST_SKIP() << crun.why_not();
  auto up = crun.Up({"--gpus", "1xH100:80Gi", "--node-timeout", "4s"});
  auto admin = up->Admin();
  const std::string box = ", rootfs: " + crun.image() + ", command: [sh, -c, 'echo boxed']}]\n";
  ASSERT_EQ(admin.Post("/v1/jobs", "name: first\ntasks: [{gpus: 1" + box, "application/yaml")->status, 201);
  json j = WaitJob(admin, 1, [](const json& x) { return x["state"] == "succeeded" || x["state"] == "failed"; });
  ASSERT_EQ(j["state"], "succeeded") << j.dump();
  // Job 2's container name: job 1's, with its number (the agent's tag after it).
  std::string first;
  std::stringstream(ReadAll(crun.runs())) >> first;
  ASSERT_TRUE(first.starts_with("rota-1-0-0-0")) << first;
  const std::string stale = "rota-2-0-0-0" + first.substr(12);
  std::filesystem::create_directories("/run/crun/" + stale);  // (what the runtime's state directory says)
  const auto submitted = std::chrono::steady_clock::now();
  ASSERT_EQ(admin.Post("/v1/jobs", "name: second\ntasks: [{gpus: 1" + box, "application/yaml")->status, 201);
  EXPECT_FALSE(LostWithin(admin, 6)) << "the node was declared lost while the stale container's delete ran";
  j = WaitJob(admin, 2, [](const json& x) { return x["state"] == "succeeded" || x["state"] == "failed"; });
  EXPECT_EQ(j["state"], "succeeded") << j.dump() << "\n" << ReadAll(tmp.path() + "/data.log");
  EXPECT_GE(std::chrono::steady_clock::now() - submitted, std::chrono::seconds(8));
  EXPECT_NE(ReadAll(crun.deletes()).find(stale), std::string::npos) << ReadAll(crun.deletes());
  // Started once, after the delete.
  const std::string runs = ReadAll(crun.runs());
  EXPECT_EQ(std::count(runs.begin(), runs.end(), '\n'), 2) << runs;
  std::filesystem::remove_all("/run/crun/" + stale);
}

// A data directory given relative (rota up --data-dir data) still hands
// tasks paths that work where they run (their job's work directory): the
// checkpoint file and the hostfile.
TEST_F(Integration, ARelativeDataDirectoryStillGivesTasksPathsThatWork) {
  const std::string relative = std::filesystem::relative(tmp.path() + "/rel-data").string();
  ASSERT_NE(relative[0], '/');
  RotaProcess up("up", relative, {"--gpus", "1xA100:40Gi", "--name", "box", "--router", "off"});
  auto admin = up.Admin();
  // (It runs until its checkpoint is recorded, then ends: nothing of it
  // outlives the test.)
  auto r = admin.Post("/v1/jobs", R"({"name": "rel", "tasks": [{"name": "main", "gpus": 1,
      "command": ["sh", "-c", "cat $ROTA_HOSTFILE && echo /ckpt/rel > $ROTA_CHECKPOINT_FILE && echo $ROTA_CHECKPOINT_FILE && sleep 3"]}]})",
                      "application/json");
  ASSERT_EQ(r->status, 201) << r->body;
  const json job = WaitJob(admin, 1, [](const json& x) { return x["state"] == "succeeded" || x["state"] == "failed"; });
  const std::string logs = RunRota({"logs", "1"}, up.ClientEnv(), tmp.path()).out;
  ASSERT_TRUE(job.contains("last_checkpoint")) << job.dump() << "\n" << logs;
  EXPECT_EQ(job["last_checkpoint"]["path"], "/ckpt/rel");
  EXPECT_EQ(job["state"], "succeeded") << job.dump() << "\n" << logs;
  EXPECT_NE(logs.find(tmp.path() + "/rel-data/"), std::string::npos) << "not absolute: " << logs;
  EXPECT_EQ(logs.find("No such file"), std::string::npos) << logs;
}

// A task reports checkpoints by writing the path to $ROTA_CHECKPOINT_FILE;
// owners may also report one through the API. Both show in describe and
// the job's events, and survive a restart of the server.
TEST_F(Integration, JobsReportCheckpoints) {
  RotaProcess up("up", tmp.path() + "/data", {"--gpus", "2xA100:40Gi", "--name", "box"});
  auto admin = up.Admin();
  auto r = admin.Post("/v1/jobs", R"({"name": "trainer", "tasks": [{"name": "main", "gpus": 1,
      "command": ["sh", "-c", "sleep 0.2; echo /ckpt/step-100 > $ROTA_CHECKPOINT_FILE; sleep 30"]}]})",
                      "application/json");
  ASSERT_EQ(r->status, 201) << r->body;
  json job;
  for (int i = 0; i < 400; ++i) {
    job = json::parse(admin.Get("/v1/jobs/1")->body);
    if (job.contains("last_checkpoint")) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_TRUE(job.contains("last_checkpoint")) << job.dump();
  EXPECT_EQ(job["last_checkpoint"]["path"], "/ckpt/step-100");
  // Through the API.
  auto c = admin.Post("/v1/jobs/1/checkpoint", R"({"path": "s3://bucket/run/step-200"})", "application/json");
  ASSERT_EQ(c->status, 200) << c->body;
  EXPECT_EQ(json::parse(c->body)["last_checkpoint"]["path"], "s3://bucket/run/step-200");
  EXPECT_EQ(admin.Post("/v1/jobs/1/checkpoint", R"({"where": 1})", "application/json")->status, 400);
  EXPECT_EQ(admin.Post("/v1/jobs/1/checkpoint", "nope", "application/json")->status, 400);
  // (The next attempt gets the path in its environment: no NUL.)
  auto nul = admin.Post("/v1/jobs/1/checkpoint", R"({"path": "/ck\u0000LD_PRELOAD=/x.so"})", "application/json");
  EXPECT_EQ(nul->status, 400);
  EXPECT_NE(nul->body.find("path: must not hold a NUL byte"), std::string::npos) << nul->body;
  EXPECT_EQ(admin.Post("/v1/jobs/99/checkpoint", R"({"path": "x"})", "application/json")->status, 404);
  const json events = json::parse(admin.Get("/v1/jobs/1/events")->body)["events"];
  bool seen = false;
  for (const auto& e : events) seen = seen || (e["event"] == "checkpoint" && e["detail"] == "s3://bucket/run/step-200");
  EXPECT_TRUE(seen) << events.dump();
  // A restarted attempt is told where to resume.
  auto r2 = admin.Post("/v1/jobs", R"({"name": "resumer", "restart": {"policy": "on-failure", "max_restarts": 1},
      "tasks": [{"name": "main", "gpus": 1, "command": ["sh", "-c",
      "if [ -n \"$ROTA_LAST_CHECKPOINT\" ]; then echo resumed-from=$ROTA_LAST_CHECKPOINT; exit 0; fi; echo /ckpt/r-7 > $ROTA_CHECKPOINT_FILE; sleep 3; exit 3"]}]})",
                       "application/json");
  ASSERT_EQ(r2->status, 201) << r2->body;
  json resumer;
  for (int i = 0; i < 400; ++i) {
    resumer = json::parse(admin.Get("/v1/jobs/2")->body);
    if (resumer["state"] == "succeeded" || resumer["state"] == "failed") break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_EQ(resumer["state"], "succeeded") << resumer.dump();
  EXPECT_EQ(resumer["restarts"], 1);
  const std::string out = RunRota({"logs", "2"}, up.ClientEnv(), tmp.path()).out;
  EXPECT_NE(out.find("resumed-from=/ckpt/r-7"), std::string::npos) << out;
  // Durable: the journal has it.
  up.Kill(SIGKILL);
  up.Restart();
  job = json::parse(up.Admin().Get("/v1/jobs/1")->body);
  EXPECT_EQ(job["last_checkpoint"]["path"], "s3://bucket/run/step-200") << job.dump();
}

TEST_F(Integration, BadInputGetsAPrecise4xxAndChangesNothing) {
  RotaProcess server("server", tmp.path() + "/data", {"--config", Write("c.yaml", R"(
node_groups: [{name: n, count: 2, gpus: 8, gpu_model: H100, cpu: 64, memory: 512Gi}]
queues: [{name: team, children: [{name: a}, {name: secret, users: [carol]}]}]
job_visibility: own
)")});
  auto admin = server.Admin();
  auto user_token = json::parse(admin.Post("/v1/tokens", R"({"user": "bob", "role": "user"})", "application/json")->body)["token"];
  auto agent_token =
      json::parse(admin.Post("/v1/tokens", R"({"user": "n-0", "role": "agent", "node": "n-0"})", "application/json")->body)["token"];
  auto bob = server.Http(user_token);
  auto agent = server.Http(agent_token);
  auto anon = server.Http("");
  auto wrong = server.Http("rota_0000");

  struct Case {
    httplib::Client* client;
    std::string path;
    std::string body;
    int status;
    std::string message;  // substring
  };
  const std::string big(2 << 20, 'x');
  const std::string pad(100 << 10, ' ');
  std::vector<Case> cases = {
      {&anon, "/v1/jobs", "name: j\ntasks: [{gpus: 1, command: [sleep, '600']}]\n", 401, "missing Authorization"},
      {&wrong, "/v1/jobs", "name: j\ntasks: [{gpus: 1, command: [sleep, '600']}]\n", 401, "unknown token"},
      {&bob, "/v1/jobs", "{{{ not yaml", 400, "not valid YAML"},
      {&bob, "/v1/jobs", "name: j\nqueue: team/a\ntasks: [{gpus: 1, colour: red, command: [sleep, '600']}]\n", 400, "tasks[0].colour: unknown field"},
      {&bob, "/v1/jobs", "name: j\nqueue: team/a\ntasks: [{gpus: -3, command: [sleep, '600']}]\n", 400, "tasks[0].gpus: must be between 0 and 64"},
      {&bob, "/v1/jobs", "name: j\nqueue: team/a\ntasks: [{replicas: 99999999, gpus: 1, command: [sleep, '600']}]\n", 400, "tasks[0].replicas"},
      {&bob, "/v1/jobs", "name: j\nqueue: nope\ntasks: [{gpus: 1, command: [sleep, '600']}]\n", 400, "queue: unknown leaf queue 'nope'"},
      {&bob, "/v1/jobs", "name: j\nqueue: team/secret\ntasks: [{gpus: 1, command: [sleep, '600']}]\n", 403, "may not submit"},
      {&bob, "/v1/jobs", "name: j\nqueue: team/a\ntasks: [{gpus: 16, command: [sleep, '600']}]\n", 422, "largest matching node has 8"},
      {&bob, "/v1/jobs", "name: j\nqueue: team/a\ntasks: [{replicas: 3, gpus: 8, command: [sleep, '600']}]\n", 422, "the cluster holds 2"},
      {&bob, "/v1/jobs", big, 413, "size limit"},
      {&bob, "/v1/jobs?count=lots", "name: j\nqueue: team/a\ntasks: [{gpus: 1, command: [sleep, '600']}]\n", 400, "count: 'lots' is not a whole number"},
      {&bob, "/v1/jobs?count=0", "name: j\nqueue: team/a\ntasks: [{gpus: 1, command: [sleep, '600']}]\n", 400, "count: must be 1..100000"},
      {&bob, "/v1/jobs?count=5", "name: j\nqueue: team/a\ntasks: [{gpus: 16, command: [sleep, '600']}]\n", 422, "largest matching node has 8"},
      {&agent, "/v1/jobs", "name: j\nqueue: team/a\ntasks: [{gpus: 1, command: [sleep, '600']}]\n", 403, "agent tokens may only register"},
      {&bob, "/v1/nodes/n-0/drain", "{}", 403, "admin role"},
      {&bob, "/v1/tokens", R"({"user": "eve", "role": "admin"})", 403, "admin role"},
      {&agent, "/v1/agents/heartbeat", R"({"node": "n-1"})", 403, "its own node"},
      {&agent, "/v1/agents/heartbeat", R"({"node": 5})", 400, "node: wrong type"},
      {&agent, "/v1/agents/heartbeat", R"({"node": "n-0", "tasks": [{"job": "x"}]})", 400, "tasks[0].job: wrong type"},
      // Reports over 64 KiB are parsed on a worker, not the event loop: the same answers.
      {&agent, "/v1/agents/heartbeat", R"({"node": "n-1")" + pad + "}", 403, "its own node"},
      {&agent, "/v1/agents/heartbeat", R"({"node": 5)" + pad + "}", 400, "node: wrong type"},
      {&agent, "/v1/agents/register", R"({"node": {"name": "n-0", "gpus": "eight"}})", 400, "gpus: wrong type"},
      // Counts that do not fit are refused, not cast (2^32 + 8 GPUs were 8), and flags name themselves.
      {&agent, "/v1/agents/register", R"({"node": {"name": "n-0", "gpus": 4294967304, "gpu_model": "H100"}})", 400,
       "node: gpus: out of range"},
      {&agent, "/v1/agents/register", R"({"node": {"name": "n-0", "gpus": 8, "gpu_model": "H100"}, "simulated": "false"})",
       400, "simulated: must be true or false"},
      // A misspelt field is refused: "tll" made a token that never expires.
      {&admin, "/v1/tokens", R"({"user": "ci", "tll": "1h"})", 400, "unknown field 'tll'"},
      {&admin, "/v1/jobs/abc/cancel", "{}", 400, "not a job id"},
      {&bob, "/v1/jobs", "name: j\nqueue: team/a\ntasks: [{gpus: 1, command: [\"\xff\xfe\"]}]\n", 400, "must be valid UTF-8"},
      {&admin, "/v1/jobs/42/cancel", "{}", 404, "no job 42"},
      {&admin, "/v1/nodes/ghost/drain", "{}", 404, "no node named 'ghost'"},
  };
  for (const Case& c : cases) {
    auto r = c.client->Post(c.path, c.body, "application/yaml");
    ASSERT_TRUE(r) << c.path;
    EXPECT_EQ(r->status, c.status) << c.path << " " << c.body.substr(0, 60) << "\n" << r->body;
    EXPECT_NE(r->body.find(c.message), std::string::npos) << c.path << ": " << r->body;
  }
  EXPECT_EQ(CountJobs(server), 0);
  // A path that is not UTF-8 gets a clean 404, and the server lives on.
  auto odd = anon.Get("/%FF%FE");
  ASSERT_TRUE(odd);
  EXPECT_EQ(odd->status, 404);
  EXPECT_TRUE(server.Healthy());
  auto nodes = json::parse(admin.Get("/v1/nodes")->body)["nodes"];
  for (const auto& n : nodes) EXPECT_EQ(n["state"], "declared");
  // Users see only their own jobs.
  ASSERT_EQ(admin.Post("/v1/jobs", "name: mine\nqueue: team/a\ntasks: [{gpus: 1, command: [sleep, '600']}]\n", "application/yaml")->status, 201);
  EXPECT_EQ(json::parse(bob.Get("/v1/jobs?all=true")->body)["jobs"].size(), 0u);
  EXPECT_EQ(bob.Get("/v1/jobs/1")->status, 404);
  EXPECT_EQ(bob.Post("/v1/jobs/1/cancel", "{}", "application/json")->status, 404);
  // A job array: all its copies, consecutive ids.
  auto array = bob.Post("/v1/jobs?count=3", "name: sweep\nqueue: team/a\ntasks: [{gpus: 1, command: [sleep, '600']}]\n", "application/yaml");
  ASSERT_EQ(array->status, 201) << array->body;
  EXPECT_EQ(json::parse(array->body)["ids"], json::parse(R"({"first": 2, "last": 4})"));
  EXPECT_EQ(json::parse(bob.Get("/v1/jobs?all=true")->body)["jobs"].size(), 3u);
  // Listings page in id order: ?limit, ?after, "next_after" while more remain; filters by user.
  const json first = json::parse(admin.Get("/v1/jobs?limit=2")->body);
  ASSERT_EQ(first["jobs"].size(), 2u);
  EXPECT_EQ(first["jobs"][0]["id"], 1);
  EXPECT_EQ(first["jobs"][1]["id"], 2);
  EXPECT_EQ(first["next_after"], 2);
  const json second = json::parse(admin.Get("/v1/jobs?limit=2&after=2")->body);
  ASSERT_EQ(second["jobs"].size(), 2u);
  EXPECT_EQ(second["jobs"][0]["id"], 3);
  EXPECT_EQ(second["jobs"][1]["id"], 4);
  EXPECT_FALSE(second.contains("next_after"));  // the last page
  EXPECT_EQ(json::parse(admin.Get("/v1/jobs?user=bob")->body)["jobs"].size(), 3u);
  EXPECT_EQ(json::parse(admin.Get("/v1/jobs?user=bob&after=3")->body)["jobs"].size(), 1u);
  for (const auto& [path, message] : std::vector<std::pair<std::string, std::string>>{
           {"/v1/jobs?limit=0", "limit: must be 1..10000"},
           {"/v1/jobs?limit=20000", "limit: must be 1..10000"},
           {"/v1/jobs?after=x", "after: 'x' is not a job id"},
           {"/v1/jobs?state=sleeping", "state: 'sleeping' is not one of"}}) {
    auto r = admin.Get(path);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 400) << path;
    EXPECT_NE(r->body.find(message), std::string::npos) << path << ": " << r->body;
  }
}

// A listing without ?limit is one page of at most 10,000 jobs, never the
// whole store (a million jobs would be a gigabyte built in the server).
TEST_F(Integration, AListingIsAtMostOnePage) {
  RotaProcess server("server", tmp.path() + "/data", {"--config", Write("c.yaml", R"(
node_groups: [{name: n, count: 1, gpus: 8, gpu_model: H100, cpu: 64, memory: 512Gi}]
limits: {submit_rate: 1000000}
)")});
  auto admin = server.Admin();
  auto r = admin.Post("/v1/jobs?count=10005", "name: many\ntasks: [{gpus: 1, command: [sleep, '600']}]\n", "application/yaml");
  ASSERT_EQ(r->status, 201) << r->body;
  const json page = json::parse(admin.Get("/v1/jobs")->body);
  EXPECT_EQ(page["jobs"].size(), 10000u);
  EXPECT_EQ(page["next_after"], 10000);
  const json rest = json::parse(admin.Get("/v1/jobs?after=10000")->body);
  EXPECT_EQ(rest["jobs"].size(), 5u);
  EXPECT_FALSE(rest.contains("next_after"));
}

TEST_F(Integration, AuthMatrixOfRolesAndEndpoints) {
  RotaProcess server("server", tmp.path() + "/data", {"--rate-limit", "0", "--config", Write("c.yaml",
      "node_groups: [{name: n, count: 1, gpus: 8, gpu_model: H100, cpu: 64, memory: 512Gi}]\njob_visibility: own\n")});
  auto admin = server.Admin();
  auto token = [&](const std::string& body) {
    return json::parse(admin.Post("/v1/tokens", body, "application/json")->body)["token"].get<std::string>();
  };
  const std::string user = token(R"({"user": "bob", "role": "user"})");
  const std::string agent = token(R"({"user": "n-0", "role": "agent", "node": "n-0"})");
  ASSERT_EQ(admin.Post("/v1/jobs", "name: admins\ntasks: [{gpus: 1, command: [sleep, '600']}]\n", "application/yaml")->status, 201);
  const std::string node = R"({"node": {"name": "n-0", "gpu_model": "H100", "gpus": 8, "cpu": "64", "memory": "512Gi"}})";
  struct Row {
    std::string method, path, body;
    int none, user, agent, admin;
  };
  const std::vector<Row> rows = {
      {"POST", "/v1/jobs", "name: j\ntasks: [{gpus: 1, command: [sleep, '600']}]\n", 401, 201, 403, 201},
      {"GET", "/v1/jobs", "", 401, 200, 403, 200},
      {"GET", "/v1/jobs/1", "", 401, 404, 403, 200},
      {"GET", "/v1/jobs/1/events", "", 401, 404, 403, 200},
      {"GET", "/v1/jobs/1/logs", "", 401, 404, 403, 200},
      {"GET", "/v1/queues", "", 401, 200, 403, 200},
      {"GET", "/v1/nodes", "", 401, 200, 403, 200},
      {"POST", "/v1/nodes/n-0/drain", "{}", 401, 403, 403, 200},
      {"POST", "/v1/nodes/n-0/undrain", "{}", 401, 403, 403, 200},
      {"POST", "/v1/agents/register", node, 401, 403, 200, 200},
      {"POST", "/v1/agents/heartbeat", R"({"node": "n-0"})", 401, 403, 200, 200},
      // (Over 64 KiB: parsed on a worker, not the event loop; the same answers.)
      {"POST", "/v1/agents/heartbeat", R"({"node": "n-0")" + std::string(100 << 10, ' ') + "}", 401, 403, 200, 200},
      {"POST", "/v1/tokens", R"({"user": "x", "role": "user"})", 401, 403, 403, 201},
      {"GET", "/metrics", "", 401, 200, 403, 200},
      {"POST", "/v1/jobs/1/cancel", "{}", 401, 404, 403, 200},
  };
  const std::vector<std::pair<std::string, std::string>> roles = {
      {"none", ""}, {"user", user}, {"agent", agent}, {"admin", server.token()}};
  for (const Row& row : rows) {
    const int want[] = {row.none, row.user, row.agent, row.admin};
    for (size_t r = 0; r < roles.size(); ++r) {
      auto c = server.Http(roles[r].second);
      auto res = row.method == "GET" ? c.Get(row.path) : c.Post(row.path, row.body, "application/yaml");
      ASSERT_TRUE(res);
      EXPECT_EQ(res->status, want[r]) << row.method << " " << row.path << " as " << roles[r].first << ": " << res->body;
    }
  }
}

TEST_F(Integration, RandomGarbageNeverGetsA500) {
  RotaProcess server("server", tmp.path() + "/data", {"--rate-limit", "0"});
  auto admin = server.Admin();
  uint64_t seed = 12345;
  auto next = [&] {
    seed ^= seed << 13;
    seed ^= seed >> 7;
    seed ^= seed << 17;
    return seed;
  };
  const std::vector<std::string> fragments = {"{", "}", "[", "]", "\"", ":", ",", "name", "tasks", "gpus", "-1",
                                              "99999999999999999999", "null", "true", "\n", "  - ", "{{", "\\u0000",
                                              "node", "job", "replica", "1e308", "\xff\xfe", "&", "*a", "!!binary"};
  int count = 0;
  for (const std::string path : {"/v1/jobs", "/v1/agents/register", "/v1/agents/heartbeat", "/v1/tokens"}) {
    for (int i = 0; i < 150; ++i) {
      std::string body;
      const int n = static_cast<int>(next() % 12);
      for (int k = 0; k < n; ++k) body += fragments[next() % fragments.size()];
      auto r = admin.Post(path, body, "application/json");
      ASSERT_TRUE(r);
      ASSERT_GE(r->status, 200) << path << " " << body;
      ASSERT_LT(r->status, 500) << path << " body: " << body << "\n" << r->body;
      ++count;
    }
  }
  EXPECT_EQ(count, 600);
  EXPECT_TRUE(server.Healthy());
}

TEST_F(Integration, RateLimitAnswers429) {
  RotaProcess server("server", tmp.path() + "/data", {"--rate-limit", "5"});
  auto admin = server.Admin();
  int limited = 0;
  for (int i = 0; i < 40; ++i) {
    auto r = admin.Get("/v1/jobs");
    ASSERT_TRUE(r);
    if (r->status == 429) ++limited;
  }
  EXPECT_GT(limited, 0);  // burst is 10, refill 5/s: 40 quick requests must hit the limit
}

// One user's listings run at most four at a time (a page of 10,000 jobs is
// tens of MB while it is built: 400 at once held 3.9 GB and starved the
// agents' reports); past that, 429 with Retry-After, and another user's
// listing is answered meanwhile.
TEST_F(Integration, OneUsersListingsRunAFewAtATime) {
  RotaProcess server("server", tmp.path() + "/data", {"--rate-limit", "0"});
  auto admin = server.Admin();
  ASSERT_EQ(admin.Post("/v1/jobs?count=10000", "name: many\ntasks: [{gpus: 0, cpu: 1, command: [\"true\"]}]\n",
                       "application/yaml")->status, 201);
  auto bob = admin.Post("/v1/tokens", R"({"user": "bob"})", "application/json");
  ASSERT_EQ(bob->status, 201);
  const std::string bob_token = json::parse(bob->body)["token"];
  std::atomic<int> ok{0}, limited{0}, other{0};
  std::atomic<bool> retry_after{true};
  std::vector<std::thread> clients;
  for (int t = 0; t < 32; ++t) {
    clients.emplace_back([&] {
      auto c = server.Admin();
      c.set_read_timeout(60, 0);
      auto r = c.Get("/v1/jobs?limit=10000");
      if (!r) return ++other, void();
      if (r->status == 200) ++ok;
      else if (r->status == 429) {
        ++limited;
        retry_after = retry_after && r->get_header_value("Retry-After") == "1";
      } else {
        ++other;
      }
    });
  }
  auto b = server.Http(bob_token);
  b.set_read_timeout(60, 0);
  auto theirs = b.Get("/v1/jobs?limit=10");
  for (auto& t : clients) t.join();
  ASSERT_TRUE(theirs);
  EXPECT_EQ(theirs->status, 200) << theirs->body;
  EXPECT_GT(limited.load(), 0) << "32 listings of 10,000 jobs at once, all answered together";
  EXPECT_GE(ok.load(), 4);
  EXPECT_EQ(other.load(), 0);
  EXPECT_TRUE(retry_after.load());
  // One at a time, each is answered.
  for (int i = 0; i < 6; ++i) EXPECT_EQ(admin.Get("/v1/jobs?limit=10000")->status, 200);
}

TEST_F(Integration, KillNineDuringABurstLosesNoAcknowledgedJob) {
  const std::string config = Write("c.yaml", "node_groups: [{name: n, count: 4, gpus: 8, gpu_model: H100, cpu: 64, memory: 512Gi}]\n");
  RotaProcess server("server", tmp.path() + "/data", {"--config", config, "--rate-limit", "0"});
  std::mutex mu;
  std::vector<uint64_t> acked;
  std::vector<std::string> acked_names;
  std::atomic<bool> stop{false};
  std::vector<std::thread> clients;
  for (int t = 0; t < 8; ++t) {
    clients.emplace_back([&, t] {
      auto c = server.Admin();
      for (int i = 0; !stop; ++i) {
        const std::string body = "name: c" + std::to_string(t) + "-" + std::to_string(i) + "\ntasks: [{gpus: 1, command: [sleep, '600']}]\n";
        auto r = c.Post("/v1/jobs", body, "application/yaml");
        if (!r) break;  // the server is gone
        if (r->status == 201) {
          std::lock_guard<std::mutex> lock(mu);
          acked.push_back(json::parse(r->body)["id"]);
          acked_names.push_back("c" + std::to_string(t) + "-" + std::to_string(i));
        }
      }
    });
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  server.Kill(SIGKILL);
  stop = true;
  for (auto& c : clients) c.join();
  ASSERT_GT(acked.size(), 20u) << "too few submissions to mean anything";

  server.Restart();
  auto admin = server.Admin();
  for (uint64_t id : acked) {
    auto r = admin.Get("/v1/jobs/" + std::to_string(id));
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << "acknowledged job " << id << " was lost";
  }
  // None is duplicated: each submission (a unique name) is there once.
  // A listing pages (at most 10,000 jobs; a fast machine acknowledges more
  // than that in the burst), so this follows next_after to the end.
  std::map<std::string, int> seen;
  size_t listed = 0;
  for (std::string after = "0";;) {
    auto listing = admin.Get("/v1/jobs?all=true&limit=1000&after=" + after);
    ASSERT_TRUE(listing) << "listing failed: " << httplib::to_string(listing.error());
    ASSERT_EQ(listing->status, 200) << listing->body.substr(0, 300);
    const json page = json::parse(listing->body);
    for (const auto& j : page["jobs"]) seen[j["name"].get<std::string>()]++;
    listed += page["jobs"].size();
    if (!page.contains("next_after")) break;
    after = std::to_string(page["next_after"].get<uint64_t>());
  }
  ASSERT_GE(listed, acked.size());
  for (const auto& [name, n] : seen) EXPECT_EQ(n, 1) << name << " appears " << n << " times";
  for (const auto& name : acked_names) EXPECT_EQ(seen[name], 1) << name;
  // No GPU is held by two running jobs, and at most the 32 GPUs are held.
  admin.Post("/v1/jobs", "name: poke\ntasks: [{gpus: 1, command: [sleep, '600']}]\n", "application/yaml");
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  auto jobs = json::parse(admin.Get("/v1/jobs?state=running")->body)["jobs"];
  std::set<std::string> held;
  for (const auto& j : jobs) {
    for (const auto& p : j["placement"]) {
      for (const auto& g : p["gpus"]) {
        EXPECT_TRUE(held.insert(p["node"].get<std::string>() + "/" + g.dump()).second) << "GPU allocated twice";
      }
    }
  }
  EXPECT_EQ(held.size(), std::min<size_t>(32, acked.size() + 1));
  std::printf("kill -9 test: %zu acknowledged submissions from 8 clients, all recovered\n", acked.size());
}

// --job-retention: a job that ended that long ago is forgotten (404, saying
// so, through the API and `rota describe`); live jobs stay; a restart (from
// the journal: a journal snapshot's part is ControllerTest's) keeps it gone
// and issues its id to no other job.
TEST_F(Integration, EndedJobsAreForgottenAfterTheJobRetention) {
  const std::string config = Write("c.yaml", "node_groups: [{name: n, count: 1, gpus: 8, gpu_model: H100, cpu: 64, memory: 512Gi}]\n");
  RotaProcess server("server", tmp.path() + "/data", {"--config", config, "--rate-limit", "0", "--job-retention", "2s"});
  auto admin = server.Admin();
  auto submit = [&](const std::string& name) -> uint64_t {
    auto r = admin.Post("/v1/jobs", "name: " + name + "\ntasks: [{gpus: 1, command: [sleep, '600']}]\n", "application/yaml");
    EXPECT_TRUE(r && r->status == 201) << (r ? r->body : "no answer");
    return r && r->status == 201 ? json::parse(r->body)["id"].get<uint64_t>() : 0;
  };
  const uint64_t live = submit("live");
  const uint64_t ended = submit("ended");
  ASSERT_GT(ended, live);
  auto cancel = admin.Post("/v1/jobs/" + std::to_string(ended) + "/cancel", "{}", "application/json");
  ASSERT_TRUE(cancel && cancel->status == 200) << (cancel ? cancel->body : "no answer");
  ASSERT_EQ(admin.Get("/v1/jobs/" + std::to_string(ended))->status, 200);  // ended, not yet forgotten
  int status = 200;
  for (int i = 0; i < 100 && status == 200; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    status = admin.Get("/v1/jobs/" + std::to_string(ended))->status;
  }
  ASSERT_EQ(status, 404) << "job " << ended << " was not forgotten within 10 s of a 2 s retention";
  const std::string error = json::parse(admin.Get("/v1/jobs/" + std::to_string(ended))->body)["error"]["message"];
  EXPECT_EQ(error, "no job " + std::to_string(ended) +
                       " (a job is forgotten 2s after it ends; rota report job " + std::to_string(ended) +
                       " shows what it used)");
  EXPECT_EQ(admin.Get("/v1/jobs/" + std::to_string(live))->status, 200);
  // An id never issued says nothing of retention.
  EXPECT_EQ(json::parse(admin.Get("/v1/jobs/999")->body)["error"]["message"], "no job 999");
  CommandResult described = RunRota({"describe", std::to_string(ended)}, server.ClientEnv(), tmp.path());
  EXPECT_NE(described.exit_code, 0);
  EXPECT_NE(described.err.find("is forgotten 2s after it ends"), std::string::npos) << described.err;
  const json listed = json::parse(admin.Get("/v1/jobs?all=true")->body)["jobs"];
  ASSERT_EQ(listed.size(), 1u) << listed.dump();
  EXPECT_EQ(listed[0]["id"], live);
  // An array whose first element is forgotten, the other held: a retry of
  // its submission (same Idempotency-Key) gets the array back.
  const std::string sweep = "name: sweep\ntasks: [{gpus: 1, command: [sleep, '600']}]\n";
  auto array = admin.Post("/v1/jobs?count=2", {{"Idempotency-Key", "k-sweep"}}, sweep, "application/yaml");
  ASSERT_TRUE(array && array->status == 201) << (array ? array->body : "no answer");
  const uint64_t first = json::parse(array->body)["id"];
  ASSERT_EQ(admin.Post("/v1/jobs/" + std::to_string(first) + "/cancel", "{}", "application/json")->status, 200);
  for (int i = 0; i < 100 && admin.Get("/v1/jobs/" + std::to_string(first))->status == 200; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  ASSERT_EQ(admin.Get("/v1/jobs/" + std::to_string(first))->status, 404);
  auto retried = admin.Post("/v1/jobs?count=2", {{"Idempotency-Key", "k-sweep"}}, sweep, "application/yaml");
  ASSERT_TRUE(retried) << "no answer";
  EXPECT_EQ(retried->status, 200) << retried->body;
  EXPECT_EQ(retried->get_header_value("Idempotent-Replayed"), "true");
  EXPECT_EQ(json::parse(retried->body)["ids"]["first"], first) << retried->body;
  EXPECT_EQ(json::parse(retried->body)["id"], first + 1) << retried->body;  // (the view: the first held)

  server.Kill(SIGKILL);
  server.Restart();
  auto restarted = server.Admin();
  EXPECT_EQ(restarted.Get("/v1/jobs/" + std::to_string(ended))->status, 404);
  EXPECT_EQ(restarted.Get("/v1/jobs/" + std::to_string(live))->status, 200);
  auto next = restarted.Post("/v1/jobs", "name: next\ntasks: [{gpus: 1, command: [sleep, '600']}]\n", "application/yaml");
  ASSERT_TRUE(next && next->status == 201) << (next ? next->body : "no answer");
  EXPECT_EQ(json::parse(next->body)["id"].get<uint64_t>(), first + 2);
}

// A --server that is not rota's API (the services' router, a proxy): the
// CLI reads its error bodies ({"error": "..."}) and says when an answer has
// another shape, with an exit code; before, both aborted it (an uncaught
// JSON type error, exit 134).
TEST_F(Integration, TheCliSaysWhatAServerThatIsNotRotaAnswered) {
  httplib::Server other;
  other.Get("/v1/jobs", [](const httplib::Request&, httplib::Response& res) {
    res.set_content("\"a list elsewhere\"", "application/json");
  });
  other.Post("/v1/tokens", [](const httplib::Request&, httplib::Response& res) {
    res.status = 404;
    res.set_content("{\"error\":\"no service answers here\"}\n", "application/json");
  });
  const int port = other.bind_to_any_port("127.0.0.1");
  ASSERT_GT(port, 0);
  std::thread serving([&] { other.listen_after_bind(); });
  while (!other.is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  const std::vector<std::string> env{"ROTA_SERVER=http://127.0.0.1:" + std::to_string(port), "ROTA_TOKEN=t"};
  const CommandResult created = RunRota({"token", "create", "--user", "alice"}, env, tmp.path());
  EXPECT_EQ(created.exit_code, 3) << created.err;  // not found
  EXPECT_NE(created.err.find("no service answers here (HTTP 404)"), std::string::npos) << created.err;
  const CommandResult listed = RunRota({"jobs"}, env, tmp.path());
  EXPECT_EQ(listed.exit_code, 1) << listed.err;
  EXPECT_NE(listed.err.find("rota jobs: the server's answer is not what this client expects"), std::string::npos)
      << listed.err;
  other.stop();
  serving.join();
}

TEST_F(Integration, MetricsPassPromtool) {
  RotaProcess up("up", tmp.path() + "/data", {"--gpus", "2xA100:40Gi", "--name", "m"});
  auto admin = up.Admin();
  ASSERT_EQ(admin.Post("/v1/jobs", "name: j\ntasks: [{gpus: 1, command: [sleep, '600']}]\n", "application/yaml")->status, 201);
  std::this_thread::sleep_for(std::chrono::milliseconds(1200));  // a heartbeat with telemetry
  auto r = admin.Get("/metrics");
  // Energy needs two of the meter's samples: a report or two more.
  for (int i = 0; i < 100 && r && r->body.find("rota_job_gpu_energy_joules_total{") == std::string::npos; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    r = admin.Get("/metrics");
  }
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 200);
  EXPECT_NE(r->body.find("rota_queue_running_jobs{queue=\"default\"} 1"), std::string::npos) << r->body;
  EXPECT_NE(r->body.find("rota_gpu_utilization_ratio{node=\"m\",gpu=\"0\",simulated=\"true\"}"), std::string::npos);
  EXPECT_NE(r->body.find("rota_scheduling_cycle_seconds_count"), std::string::npos);
  // The controller's journaled batches (the submission's at least), each
  // counted once in the whole batch's time and once in its journal write's.
  auto count_of = [&](const std::string& name) -> int64_t {
    const size_t at = r->body.find("\n" + name + "_count ");
    return at == std::string::npos ? -1 : std::stoll(r->body.substr(at + name.size() + 8));
  };
  EXPECT_GE(count_of("rota_actor_batch_seconds"), 1) << r->body;
  EXPECT_EQ(count_of("rota_actor_batch_seconds"), count_of("rota_journal_append_seconds")) << r->body;
  // The front end's own: at least this connection, and the loop's lag (a number of seconds).
  EXPECT_NE(r->body.find("\nrota_http_connections "), std::string::npos) << r->body;
  EXPECT_EQ(r->body.find("\nrota_http_connections 0\n"), std::string::npos) << r->body;
  const size_t lag = r->body.find("\nrota_http_loop_lag_max_seconds ");
  ASSERT_NE(lag, std::string::npos) << r->body;
  EXPECT_GE(std::stod(r->body.substr(lag + 32)), 0.0);
  // The job's one task went down the agent's watch once, the bind to the
  // push measured (the histogram promtool checks below).
  EXPECT_NE(r->body.find("\nrota_watch_push_seconds_count 1\n"), std::string::npos) << r->body;
  EXPECT_NE(r->body.find("\nrota_watch_push_seconds_bucket{le=\"+Inf\"} 1\n"), std::string::npos) << r->body;
  // dcgm-exporter's names, the job on the GPU labelled; the input-bound flag per job.
  EXPECT_NE(r->body.find("DCGM_FI_DEV_GPU_UTIL{gpu=\"0\",device=\"nvidia0\",model_name=\"A100\",hostname=\"m\",job=\"1\"} 100"),
            std::string::npos) << r->body;
  EXPECT_NE(r->body.find("DCGM_FI_DEV_POWER_USAGE{gpu=\"1\",device=\"nvidia1\",model_name=\"A100\",hostname=\"m\"} 60"),
            std::string::npos) << r->body;
  EXPECT_NE(r->body.find("rota_job_input_bound{job=\"1\",queue=\"default\"} 0"), std::string::npos) << r->body;
  // Energy per GPU (dcgm-exporter's counter and rota's) and per job.
  EXPECT_NE(r->body.find("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{gpu=\"0\",device=\"nvidia0\",model_name=\"A100\","
                         "hostname=\"m\",job=\"1\"} "),
            std::string::npos) << r->body;
  EXPECT_NE(r->body.find("rota_gpu_energy_joules_total{node=\"m\",gpu=\"0\"} "), std::string::npos) << r->body;
  EXPECT_NE(r->body.find("rota_job_gpu_activity_ratio{job=\"1\",queue=\"default\"} 1\n"), std::string::npos) << r->body;
  EXPECT_NE(r->body.find("rota_job_gpu_energy_joules_total{job=\"1\",queue=\"default\"} "), std::string::npos);
  // dcgm-exporter's own label names, for its dashboards, when a scrape asks.
  auto exact = admin.Get("/metrics?labels=dcgm");
  ASSERT_TRUE(exact);
  EXPECT_NE(exact->body.find("DCGM_FI_DEV_GPU_UTIL{gpu=\"0\",device=\"nvidia0\",modelName=\"A100\",Hostname=\"m\",job=\"1\"} 100"),
            std::string::npos) << exact->body;
  EXPECT_NE(exact->body.find("# TYPE DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION counter\n"), std::string::npos);
  EXPECT_EQ(admin.Get("/metrics?labels=prometheus")->status, 400);
  const std::string path = tmp.path() + "/metrics.txt";
  std::ofstream(path) << r->body;
  ASSERT_EQ(system("command -v promtool >/dev/null"), 0) << "promtool is missing (Debian package prometheus)";
  const int rc = system(("promtool check metrics < " + path + " > " + path + ".out 2>&1").c_str());
  EXPECT_EQ(rc, 0) << ReadAll(path + ".out");
  EXPECT_EQ(up.Http("").Get("/metrics")->status, 401);
}

}  // namespace
}  // namespace rota::testing

namespace rota::testing {
namespace {

// An HTTPS `rota server` (data and a throwaway self-signed certificate for
// 127.0.0.1 in `dir`) on a free loopback port: its pid, port, admin token
// and certificate file; port 0, with a failure added, if it did not start.
struct TlsServer {
  pid_t pid = 0;
  int port = 0;
  std::string token, cert;
};
TlsServer StartTlsServer(const std::string& dir, const std::vector<std::string>& extra = {}) {
  TlsServer s;
  s.cert = dir + "/cert.pem";
  const std::string key = dir + "/key.pem";
  if (system(("openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=127.0.0.1 -keyout " + key + " -out " +
              s.cert + " > /dev/null 2>&1")
                 .c_str()) != 0) {
    ADD_FAILURE() << "openssl could not make a test certificate";
    return s;
  }
  // The harness looks for "serving http://"; an HTTPS server says "serving https://".
  const std::string data = dir + "/data", log = data + ".log";
  std::vector<std::string> args{RotaBinary(), "server", "--data-dir", data, "--listen", "127.0.0.1:0",
                                "--tls-cert", s.cert, "--tls-key", key};
  args.insert(args.end(), extra.begin(), extra.end());
  s.pid = SpawnLogged(args, log);
  if (s.pid <= 0) {
    ADD_FAILURE() << "could not start the server";
    return s;
  }
  for (int i = 0; i < 250 && s.port == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    const std::string text = ReadAll(log);
    const size_t at = text.find("serving https://127.0.0.1:");
    if (at != std::string::npos) s.port = std::stoi(text.substr(at + 26));
  }
  if (s.port == 0) {
    ADD_FAILURE() << ReadAll(log);
    return s;
  }
  s.token = ReadAll(data + "/admin.token");
  if (!s.token.empty()) s.token.pop_back();
  return s;
}

TEST_F(Integration, ServesHttpsWithACertificate) {
  const TlsServer srv = StartTlsServer(tmp.path());
  ASSERT_GT(srv.port, 0);
  const pid_t pid = srv.pid;
  const int port = srv.port;
  const std::string& token = srv.token;
  httplib::SSLClient c("127.0.0.1", port);
  c.enable_server_certificate_verification(false);
  c.set_bearer_token_auth(token);
  auto r = c.Get("/v1/nodes");
  ASSERT_TRUE(r) << "no TLS answer";
  EXPECT_EQ(r->status, 200);
  httplib::Client plain("127.0.0.1", port);  // plain HTTP to a TLS port gets no answer
  auto p = plain.Get("/healthz");
  EXPECT_TRUE(!p || p->status != 200);
  kill(pid, SIGTERM);
  int status;
  waitpid(pid, &status, 0);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "graceful shutdown on SIGTERM";
}

// A --ca-cert the agent could not trust anything with is refused at once,
// the flag named: one that cannot be read, one with no PEM certificate, and
// one given with --insecure-skip-tls-verify.
TEST_F(Integration, AgentRefusesACaCertItCannotUse) {
  const std::string text = tmp.path() + "/not-a-cert";
  std::ofstream(text) << "hello\n";
  std::ofstream(tmp.path() + "/pem") << "-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n";
  const std::vector<std::string> env{"ROTA_TOKEN=x"};
  const std::vector<std::string> base{"agent", "--server", "https://127.0.0.1:1", "--ca-cert"};
  auto run = [&](const std::string& file, std::vector<std::string> more) {
    std::vector<std::string> args = base;
    args.push_back(file);
    args.insert(args.end(), more.begin(), more.end());
    return RunRota(args, env, tmp.path());
  };
  const CommandResult missing = run(tmp.path() + "/none", {});
  EXPECT_EQ(missing.exit_code, 2);
  EXPECT_NE(missing.err.find("--ca-cert: " + tmp.path() + "/none: cannot open file"), std::string::npos) << missing.err;
  const CommandResult not_pem = run(text, {});
  EXPECT_EQ(not_pem.exit_code, 2);
  EXPECT_NE(not_pem.err.find("no PEM certificate in it"), std::string::npos) << not_pem.err;
  const CommandResult both = run(tmp.path() + "/pem", {"--insecure-skip-tls-verify"});
  EXPECT_EQ(both.exit_code, 2);
  EXPECT_NE(both.err.find("--ca-cert and --insecure-skip-tls-verify contradict each other"), std::string::npos)
      << both.err;
}

// An agent verifies an https server's certificate: with --ca-cert it
// registers and reports (on one kept-alive TLS connection); without it a
// self-signed server is not trusted, the agent says why, and no node of its
// name appears (its token would have gone to whoever answered).
TEST_F(Integration, AgentsVerifyTheServersCertificate) {
  const TlsServer srv = StartTlsServer(tmp.path(), {"--rate-limit", "0"});
  ASSERT_GT(srv.port, 0);
  const pid_t pid = srv.pid;
  const int port = srv.port;
  const std::string& admin = srv.token;
  const std::string& cert = srv.cert;
  httplib::SSLClient c("127.0.0.1", port);
  c.enable_server_certificate_verification(false);
  c.set_bearer_token_auth(admin);
  std::vector<pid_t> agents;
  struct Stop {  // (also when an assertion ends the test early)
    std::vector<pid_t>& agents;
    pid_t server;
    ~Stop() {
      for (pid_t a : agents) {
        kill(a, SIGTERM);
        waitpid(a, nullptr, 0);
      }
      kill(server, SIGTERM);
      waitpid(server, nullptr, 0);
    }
  } stop{agents, pid};
  auto start_agent = [&](const std::string& name, std::vector<std::string> extra) {
    auto ask = [&] {
      return c.Post("/v1/tokens", nlohmann::json{{"user", name}, {"role", "agent"}, {"node", name}}.dump(),
                    "application/json");
    };
    httplib::Result r = ask();
    for (int attempt = 1; attempt < 5 && !r; ++attempt) {  // (a loaded machine, a server just started)
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
      r = ask();
    }
    ASSERT_TRUE(r && r->status == 201);
    const std::string token_file = tmp.path() + "/" + name + ".token";
    std::ofstream(token_file) << nlohmann::json::parse(r->body)["token"].get<std::string>() << "\n";
    std::vector<std::string> args{RotaBinary(), "agent", "--server", "https://127.0.0.1:" + std::to_string(port),
                                  "--token-file", token_file, "--name", name, "--address", "127.0.0.1",
                                  "--gpus", "2xH100:80Gi", "--logs-dir", tmp.path() + "/logs-" + name,
                                  "--heartbeat-ms", "200"};
    args.insert(args.end(), extra.begin(), extra.end());
    agents.push_back(SpawnLogged(args, tmp.path() + "/" + name + ".log"));
  };
  start_agent("trusting", {"--ca-cert", cert});
  start_agent("untrusting", {});
  auto nodes = [&] {
    std::set<std::string> names;
    auto r = c.Get("/v1/nodes");
    if (r && r->status == 200) {
      const auto doc = nlohmann::json::parse(r->body);
      for (const auto& n : doc["nodes"]) names.insert(n["name"].get<std::string>());
    }
    return names;
  };
  bool seen = false;
  for (int i = 0; i < 200 && !seen; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    seen = nodes().count("trusting") > 0;
  }
  EXPECT_TRUE(seen) << ReadAll(tmp.path() + "/trusting.log");
  // A job runs on it, over TLS.
  auto job = c.Post("/v1/jobs", "name: t\ntasks: [{name: w, gpus: 1, command: [\"true\"]}]\n", "application/yaml");
  ASSERT_TRUE(job && job->status == 201);
  std::string state;
  for (int i = 0; i < 300 && state != "succeeded"; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    auto r = c.Get("/v1/jobs/1");
    if (r && r->status == 200) state = nlohmann::json::parse(r->body)["state"];
  }
  EXPECT_EQ(state, "succeeded");
  EXPECT_EQ(nodes().count("untrusting"), 0u);
  EXPECT_NE(ReadAll(tmp.path() + "/untrusting.log").find("--ca-cert"), std::string::npos)
      << ReadAll(tmp.path() + "/untrusting.log");
}

}  // namespace
}  // namespace rota::testing

namespace rota::testing {
namespace {

// A server and three agents (2 simulated GPUs each) as separate processes.
class Cluster3 : public AgentCluster {
 protected:
  void NextAttemptStartsOnlyOnceTheLastRankHasStopped();
};

TEST_F(Cluster3, TwoNodeGangRanksMeetAndAllReduce) {
  const std::string demo = std::getenv("ROTA_ALLREDUCE") ? std::getenv("ROTA_ALLREDUCE") : ROTA_ALLREDUCE_PATH;
  // 2 replicas x 2 GPUs: each replica takes a whole node.
  const std::string spec = "name: allreduce\ntasks: [{name: rank, replicas: 2, gpus: 2, command: [\"" + demo + "\"]}]\n";
  ASSERT_EQ(server_->Admin().Post("/v1/jobs", spec, "application/yaml")->status, 201);
  json j = WaitJob(1, [](const json& x) { return x["state"] != "pending" && x["state"] != "running"; });
  ASSERT_EQ(j["state"], "succeeded") << j.dump();
  std::set<std::string> nodes;
  std::string out;
  for (const auto& p : j["placement"]) {
    nodes.insert(p["node"].get<std::string>());
    const int agent = std::stoi(p["node"].get<std::string>().substr(1));
    out += ReadAll(LogsDir(agent) + "/1/rank-" + p["replica"].dump() + ".log");
  }
  EXPECT_EQ(nodes.size(), 2u) << "the two ranks should be on two nodes";
  EXPECT_NE(out.find("rank 0 of 2: sum 3"), std::string::npos) << out;
  EXPECT_NE(out.find("rank 1 of 2: sum 3"), std::string::npos) << out;
  // The agents ship their logs with their heartbeats: `rota logs` on the server has both ranks.
  std::string served;
  for (int i = 0; i < 200 && served.find("rank 1 of 2: sum 3") == std::string::npos; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    served = RunRota({"logs", "1"}, server_->ClientEnv(), tmp.path()).out;
  }
  EXPECT_NE(served.find("==> rank-0 <==\nrank 0 of 2: sum 3"), std::string::npos) << served;
  EXPECT_NE(served.find("==> rank-1 <==\nrank 1 of 2: sum 3"), std::string::npos) << served;
}

TEST_F(Cluster3, KillingAnAgentRestartsItsGangOnOtherNodes) {
  ASSERT_EQ(server_->Admin().Post("/v1/jobs", "name: long\ntasks: [{name: w, replicas: 2, gpus: 2, command: [sleep, \"60\"]}]\n",
                                  "application/yaml")->status, 201);
  json j = WaitJob(1, [](const json& x) { return x["state"] == "running"; });
  const std::string victim = j["placement"][0]["node"];
  const int index = std::stoi(victim.substr(1));
  kill(agents_[index], SIGKILL);
  waitpid(agents_[index], nullptr, 0);
  agents_[index] = 0;
  // Lost after 2 s without heartbeats; the gang restarts on the two live nodes.
  j = WaitJob(1, [&](const json& x) {
    if (x["state"] != "running" || x["restarts"] != 1) return false;
    for (const auto& p : x["placement"]) {
      if (p["node"] == victim) return false;
    }
    return true;
  });
  EXPECT_NE(j.value("last_requeue_reason", ""), "") << j.dump();
  EXPECT_NE(j["last_requeue_reason"].get<std::string>().find("node " + victim + " lost"), std::string::npos);
  auto nodes = json::parse(server_->Admin().Get("/v1/nodes")->body)["nodes"];
  for (const auto& n : nodes) {
    if (n["name"] == victim) {
      EXPECT_EQ(n["state"], "lost");
    }
  }
}

TEST_F(Cluster3, CrashedRankRestartsTheGangPerPolicyThenFails) {
  // Rank 1 fails every time: on-failure with 2 restarts = 3 attempts, then failed.
  const std::string spec =
      "name: crashy\nrestart: {policy: on-failure, max_restarts: 2}\n"
      "tasks: [{name: w, replicas: 2, gpus: 1, command: [sh, -c, 'if [ $RANK = 1 ]; then exit 3; fi; sleep 30']}]\n";
  ASSERT_EQ(server_->Admin().Post("/v1/jobs", spec, "application/yaml")->status, 201);
  json j = WaitJob(1, [](const json& x) { return x["state"] == "failed"; });
  EXPECT_EQ(j["restarts"], 2);
  EXPECT_NE(j.value("last_requeue_reason", "").find("w-1 exited with code 3"), std::string::npos) << j.dump();
}

TEST_F(Cluster3, MemoryLimitIsEnforcedAndAnOomKillIsReported) {
  const std::string spec =
      "name: hungry\ntasks: [{name: w, gpus: 1, memory: 64Mi, cpu: 0.5, command: [sh, -c, "
      "'cat /proc/self/cgroup; x=$(head -c 300000000 /dev/zero | tr \"\\\\0\" a); echo survived']}]\n";
  auto r = server_->Admin().Post("/v1/jobs", spec, "application/yaml");
  ASSERT_EQ(r->status, 201) << r->body;
  json j = WaitJob(1, [](const json& x) { return x["state"] == "failed" || x["state"] == "succeeded"; }, 60);
  if (j.value("end_reason", "").find("OOM") == std::string::npos &&
      ReadAll(tmp.path() + "/a0.log").find("WITHOUT CPU and memory limits") != std::string::npos) {
    GTEST_SKIP() << "no writable cgroup hierarchy here: " << ReadAll(tmp.path() + "/a0.log");
  }
  EXPECT_EQ(j["state"], "failed") << j.dump();
  EXPECT_NE(j.value("end_reason", "").find("w-0 was OOM-killed at its memory limit (64Mi)"), std::string::npos) << j.dump();
  const std::string node = j["placement"][0]["node"];
  const std::string log = ReadAll(LogsDir(std::stoi(node.substr(1))) + "/1/w-0.log");
  EXPECT_NE(log.find("rota/" + node + "/1-0-0-0"), std::string::npos) << log;
  EXPECT_EQ(log.find("survived"), std::string::npos) << log;
}

// A preemptible low-priority job of `replicas` x 2 GPUs in `queue` that
// checkpoints on SIGUSR1 (and says so in its log) and exits.
std::string CheckpointingLowJob(const std::string& queue, int replicas) {
  return "name: low\nqueue: " + queue + "\npriority: low\npreemptible: true\ncheckpoint: {signal: SIGUSR1, grace: 5s}\n"
         "tasks: [{name: w, replicas: " + std::to_string(replicas) + ", gpus: 2, command: [sh, -c, "
         "'trap \"echo checkpointed at $(date +%s); exit 0\" USR1; sleep 60 & wait']}]\n";
}

TEST_F(Cluster3, HigherPriorityPreemptsACheckpointingGang) {
  // The low gang fills all 6 GPUs; it checkpoints on SIGUSR1 and exits.
  const std::string low = CheckpointingLowJob("default", 3);
  ASSERT_EQ(server_->Admin().Post("/v1/jobs", low, "application/yaml")->status, 201);
  json j = WaitJob(1, [](const json& x) { return x["state"] == "running"; });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // the traps are set
  ASSERT_EQ(server_->Admin().Post("/v1/jobs", "name: high\npriority: high\ntasks: [{name: w, gpus: 2, command: [sleep, \"60\"]}]\n",
                                  "application/yaml")->status, 201);
  json high = WaitJob(2, [](const json& x) { return x["state"] == "running"; });
  j = Job(1);
  EXPECT_EQ(j["state"], "pending") << j.dump();  // requeued; no room for all 3 replicas now
  EXPECT_EQ(j["restarts"], 1);
  EXPECT_NE(j.value("last_requeue_reason", "").find("preempted for job 2"), std::string::npos) << j.dump();
  // The victim got its checkpoint signal before it was stopped.
  std::string logs;
  for (int i = 0; i < 3; ++i) {
    for (int r = 0; r < 3; ++r) logs += ReadAll(LogsDir(i) + "/1/w-" + std::to_string(r) + ".log");
  }
  EXPECT_NE(logs.find("checkpointed at"), std::string::npos) << logs;
  auto metrics = server_->Admin().Get("/metrics")->body;
  EXPECT_NE(metrics.find("rota_preemptions_total 1"), std::string::npos);
}

// Three agents of 2 GPUs under queues with quotas: q is guaranteed 2 GPUs.
class QueueQuotas : public AgentCluster {
 protected:
  std::vector<std::string> ExtraServerArgs() override {
    return ConfigArgs("queues:\n  - {name: q, quota: {H100: 2}}\n  - {name: o, quota: {H100: 4}}\n");
  }
};

// A job its queue's quota refuses evicts the queue's lower-priority gang,
// which checkpoints first, though 4 GPUs stand free (before, it waited
// QuotaExceeded for the gang to end): through the real server and agents.
TEST_F(QueueQuotas, AHigherJobOverItsQueuesQuotaPreemptsItsQueuesLowerGang) {
  const std::string low = CheckpointingLowJob("q", 1);
  ASSERT_EQ(server_->Admin().Post("/v1/jobs", low, "application/yaml")->status, 201);
  json j = WaitJob(1, [](const json& x) { return x["state"] == "running"; });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));  // the trap is set
  ASSERT_EQ(server_->Admin().Post("/v1/jobs", "name: high\nqueue: q\npriority: high\ntasks: [{name: w, gpus: 2, command: [sleep, \"60\"]}]\n",
                                  "application/yaml")->status, 201);
  json high = WaitJob(2, [](const json& x) { return x["state"] == "running"; });
  // (Requeued, it may start again at once on o's idle guarantee: it may borrow.)
  j = Job(1);
  EXPECT_EQ(j["restarts"], 1) << j.dump();
  EXPECT_NE(j.value("last_requeue_reason", "").find("preempted for job 2 (priority 1000 > 100)"), std::string::npos)
      << j.dump();
  std::string logs;
  for (int i = 0; i < 3; ++i) logs += ReadAll(LogsDir(i) + "/1/w-0.log");
  EXPECT_NE(logs.find("checkpointed at"), std::string::npos) << logs;
}

// A rank never runs beside its own next attempt: rank 0 fails while rank 1
// takes 2 s to stop (its checkpoint signal's handler); the gang's next
// attempt, which the spare node could take at once, starts only after rank 1
// of the attempt before has ended. (Before, the next attempt started on the
// spare node at once, beside the old rank 1.)
void Cluster3::NextAttemptStartsOnlyOnceTheLastRankHasStopped() {
  const std::string trace = tmp.path() + "/trace";
  const std::string failed = tmp.path() + "/failed";
  const std::string script =
      "a=0; [ -e " + failed + " ] && a=1; echo \"start $a $RANK $(date +%s%N)\" >> " + trace + "; "
      "if [ $a = 0 ] && [ $RANK = 0 ]; then sleep 3; touch " + failed + "; exit 3; fi; "
      "trap 'sleep 2; echo \"stop $a $RANK $(date +%s%N)\" >> " + trace + "; exit 0' TERM; "
      "while true; do sleep 0.1; done";
  const json spec = {{"name", "ranks"},
                     {"restart", {{"policy", "on-failure"}, {"max_restarts", 2}}},
                     {"checkpoint", {{"signal", "SIGTERM"}, {"grace", "20s"}}},
                     {"tasks", json::array({{{"name", "w"}, {"replicas", 2}, {"gpus", 2},
                                             {"command", json::array({"sh", "-c", script})}}})}};
  ASSERT_EQ(server_->Admin().Post("/v1/jobs", spec.dump(), "application/json")->status, 201);
  // (While rank 1 stops, the job shows why it waits: checked below.)
  json stopping;
  WaitJob(1, [&](const json& x) {
    if (x["state"] == "preempting" && x.contains("stopping")) stopping = x["stopping"];
    return x["state"] == "running" && x["restarts"] == 1;
  });
  // Both ranks of the next attempt have started.
  std::string lines;
  for (int i = 0; i < 200; ++i) {
    lines = ReadAll(trace);
    if (lines.find("start 1 0 ") != std::string::npos && lines.find("start 1 1 ") != std::string::npos) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  int64_t stopped = 0, first_start = INT64_MAX;
  std::istringstream in(lines);
  for (std::string what, a, rank, ns; in >> what >> a >> rank >> ns;) {
    if (what == "stop" && a == "0") stopped = std::max<int64_t>(stopped, std::stoll(ns));
    if (what == "start" && a == "1") first_start = std::min<int64_t>(first_start, std::stoll(ns));
  }
  ASSERT_GT(stopped, 0) << "rank 1 of the first attempt never said it stopped:\n" << lines;
  ASSERT_LT(first_start, INT64_MAX) << "the next attempt never started:\n" << lines;
  EXPECT_GT(first_start, stopped) << "a rank of the next attempt started " << (stopped - first_start) / 1000000
                                  << " ms before the last rank of the one before stopped:\n" << lines;
  ASSERT_FALSE(stopping.is_null()) << "the job never showed as stopping";
  EXPECT_EQ(stopping["then"], "restart");
  EXPECT_NE(stopping["reason"].get<std::string>().find("w-0 exited with code 3"), std::string::npos) << stopping.dump();
}

TEST_F(Cluster3, AGangsNextAttemptStartsOnlyOnceItsLastRankHasStopped) {
  NextAttemptStartsOnlyOnceTheLastRankHasStopped();
}

// The same through the older transport, the long poll (whose second report
// of a call lists nothing, and so must prove nothing stopped).
TEST_F(Cluster3, AGangsNextAttemptWaitsForItsLastRankUnderTheLongPollToo) {
  TearDown();
  agents_.clear();
  for (int i = 0; i < 3; ++i) StartAgent(i, {"--transport", "poll"});
  NextAttemptStartsOnlyOnceTheLastRankHasStopped();
}

TEST_F(Cluster3, UnhealthyGpuMovesTheGang) {
  ASSERT_EQ(server_->Admin().Post("/v1/jobs", "name: g\ntasks: [{name: w, gpus: 2, command: [sleep, \"60\"]}]\n",
                                  "application/yaml")->status, 201);
  json j = WaitJob(1, [](const json& x) { return x["state"] == "running"; });
  const std::string node = j["placement"][0]["node"];
  TearDown();  // restart the agents, the one on `node` with GPU 1 reported bad
  agents_.clear();
  const int bad = std::stoi(node.substr(1));
  std::ofstream(tmp.path() + "/health-" + node) << "1 xid 79\n";
  for (int i = 0; i < 3; ++i) {
    if (i == bad) StartAgent(i, {"--health-file", tmp.path() + "/health-" + node});
    else StartAgent(i);
  }
  j = WaitJob(1, [&](const json& x) {
    return x["state"] == "running" && x["restarts"] == 1 && x["placement"][0]["node"] != node;
  });
  EXPECT_NE(j["last_requeue_reason"].get<std::string>().find("GPU 1 on " + node + " failed (xid 79)"), std::string::npos)
      << j.dump();
  const json doc = json::parse(server_->Admin().Get("/v1/nodes")->body);
  for (const auto& n : doc["nodes"]) {
    if (n["name"] == node) {
      EXPECT_EQ(n["gpus_unhealthy"], 1);
      EXPECT_EQ(n["gpu_list"][1].value("health_reason", ""), "xid 79") << n.dump();  // why, as the agent said
      EXPECT_FALSE(n["gpu_list"][0].contains("health_reason")) << n.dump();
    }
  }
}

}  // namespace
}  // namespace rota::testing

namespace rota::testing {
namespace {

// The CLI finds a `rota up` started with --listen and --data-dir from the
// data directory alone, and a 401 says where a token comes from.
TEST_F(Integration, TheCliFindsARotaUpByItsDataDirectory) {
  const std::string data = tmp.path() + "/data";
  {
    RotaProcess up("up", data, {"--gpus", "1xH100:80Gi", "--name", "local"});  // a random port
    CommandResult jobs = RunRota({"jobs"}, {"ROTA_DATA_DIR=" + data, "HOME=" + tmp.path()}, tmp.path());
    EXPECT_EQ(jobs.exit_code, 0) << jobs.err;
    CommandResult version = RunRota({"version"}, {"ROTA_DATA_DIR=" + data, "HOME=" + tmp.path()}, tmp.path());
    EXPECT_NE(version.out.find("server: rota "), std::string::npos) << version.out;
    EXPECT_NE(version.out.find(" at " + up.url()), std::string::npos) << version.out;
    CommandResult denied = RunRota({"jobs", "--server", up.url()}, {"HOME=" + tmp.path()}, tmp.path());
    EXPECT_EQ(denied.exit_code, 4) << denied.err;
    EXPECT_NE(denied.err.find("give a token with --token, ROTA_TOKEN or a `token:` line in"), std::string::npos)
        << denied.err;
    EXPECT_NE(ReadAll(data + ".log").find("the CLI finds this server with ROTA_DATA_DIR=" + data), std::string::npos);
    // A parse error names the user's file, not the request body.
    const std::string bad = Write("bad job.yaml", "name: x\ntasks: [{gpus: two}]\n");
    CommandResult refused = RunRota({"submit", bad}, {"ROTA_DATA_DIR=" + data, "HOME=" + tmp.path()}, tmp.path());
    EXPECT_EQ(refused.exit_code, 2);
    EXPECT_NE(refused.err.find(bad + ":2:"), std::string::npos) << refused.err;
    EXPECT_EQ(refused.err.find("request body"), std::string::npos) << refused.err;
  }
  // Stopped cleanly: the address is gone, and the CLI says where it looked.
  CommandResult gone = RunRota({"jobs"}, {"ROTA_DATA_DIR=" + data, "HOME=" + tmp.path()}, tmp.path());
  EXPECT_EQ(gone.exit_code, 1);
  EXPECT_NE(gone.err.find("cannot reach http://127.0.0.1:7070"), std::string::npos) << gone.err;
  // An address file others may write is not trusted (it could send this user's token elsewhere).
  std::ofstream(data + "/server.url") << "http://127.0.0.1:9\n";
  chmod((data + "/server.url").c_str(), 0666);
  CommandResult planted = RunRota({"jobs"}, {"ROTA_DATA_DIR=" + data, "HOME=" + tmp.path()}, tmp.path());
  EXPECT_NE(planted.err.find("cannot reach http://127.0.0.1:7070"), std::string::npos) << planted.err;
  chmod((data + "/server.url").c_str(), 0600);
  CommandResult own = RunRota({"jobs"}, {"ROTA_DATA_DIR=" + data, "HOME=" + tmp.path()}, tmp.path());
  EXPECT_NE(own.err.find("cannot reach http://127.0.0.1:9"), std::string::npos) << own.err;
}

// A job array: one id, each element knows its index (ROTA_ARRAY_*), listed
// and cancelled by the array; one JSON shape for one job and for an array.
TEST_F(Integration, AJobArrayHasAnIdAndEachTaskItsIndex) {
  RotaProcess up("up", tmp.path() + "/data", {"--gpus", "4xH100:80Gi", "--name", "local"});
  const auto env = up.ClientEnv();
  const std::string job = Write("array.yaml", R"(
name: sweep
tasks:
  - {name: w, gpus: 1, command: [sh, -c, 'echo "array=$ROTA_ARRAY_ID index=$ROTA_ARRAY_INDEX of $ROTA_ARRAY_COUNT"']}
)");
  CommandResult submit = RunRota({"submit", job, "--count", "3"}, env, tmp.path());
  ASSERT_EQ(submit.exit_code, 0) << submit.err;
  EXPECT_EQ(submit.out, "submitted 3 jobs (array 1: ids 1..3)\n");
  for (int id = 1; id <= 3; ++id) {
    std::string out;
    for (int i = 0; i < 200 && out.find("index=") == std::string::npos; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      out = RunRota({"logs", std::to_string(id)}, env, tmp.path()).out;
    }
    EXPECT_NE(out.find("array=1 index=" + std::to_string(id - 1) + " of 3"), std::string::npos) << id << ": " << out;
  }
  CommandResult listed = RunRota({"jobs", "--all", "--array", "1", "-o", "json"}, env, tmp.path());
  ASSERT_EQ(listed.exit_code, 0) << listed.err;
  const json page = json::parse(listed.out);
  ASSERT_EQ(page["jobs"].size(), 3u);
  EXPECT_EQ(page["jobs"][2]["array"], json({{"id", 1}, {"index", 2}, {"count", 3}}));
  // A long array, cancelled by its id; a single job answers in the same shape.
  const std::string hold =
      Write("hold.yaml", "name: hold\ntime_limit: 10m\ntasks: [{gpus: 1, command: [sleep, '600']}]\n");
  CommandResult second = RunRota({"submit", hold, "--count", "2", "-o", "json"}, env, tmp.path());
  ASSERT_EQ(second.exit_code, 0) << second.err;
  CommandResult one = RunRota({"submit", hold, "-o", "json"}, env, tmp.path());
  ASSERT_EQ(one.exit_code, 0) << one.err;
  const json single = json::parse(one.out);
  EXPECT_EQ(single["ids"], json({{"first", 6}, {"last", 6}}));
  EXPECT_EQ(single["count"], 1);
  EXPECT_FALSE(single.contains("array"));
  // Times as people read them: waited, elapsed, the limit and what is left of it.
  std::string described;
  for (int i = 0; i < 100 && described.find("elapsed:") == std::string::npos; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    described = RunRota({"describe", "6"}, env, tmp.path()).out;
  }
  EXPECT_NE(described.find("waited:"), std::string::npos) << described;
  EXPECT_NE(described.find("time limit:"), std::string::npos) << described;
  EXPECT_NE(described.find(" 10m ("), std::string::npos) << described;  // "10m (9m58s left)"
  EXPECT_NE(described.find(" left)"), std::string::npos) << described;
  const std::string element = RunRota({"describe", "4"}, env, tmp.path()).out;
  EXPECT_NE(element.find(" 4 (element 0 of 0..1)"), std::string::npos) << element;
  CommandResult table = RunRota({"jobs"}, env, tmp.path());
  EXPECT_NE(table.out.find("WAITED  TIME"), std::string::npos) << table.out;
  EXPECT_NE(table.out.find("10m"), std::string::npos) << table.out;
  CommandResult cancel = RunRota({"cancel", "--array", "4"}, env, tmp.path());
  EXPECT_EQ(cancel.exit_code, 0) << cancel.err;
  EXPECT_NE(cancel.out.find("cancelled job 4 (hold)"), std::string::npos) << cancel.out;
  EXPECT_NE(cancel.out.find("cancelled job 5 (hold)"), std::string::npos) << cancel.out;
  CommandResult two = RunRota({"cancel", "6", "99"}, env, tmp.path());
  EXPECT_EQ(two.exit_code, 3) << two.err;  // 6 cancelled, 99 not found: the first failure's code
  EXPECT_NE(two.out.find("cancelled job 6 (hold)"), std::string::npos) << two.out;
}

// `--count 5-9%2` (sbatch --array=5-9%2): indices 5..9 in ROTA_ARRAY_INDEX,
// and never more than two elements running at once; the others wait with
// the reason ArrayLimit.
TEST_F(Integration, AnArrayRangeRunsAtMostItsLimitAtOnce) {
  RotaProcess up("up", tmp.path() + "/data", {"--gpus", "4xH100:80Gi", "--name", "local"});
  const auto env = up.ClientEnv();
  const std::string job = Write("range.yaml", R"(
name: range
tasks:
  - {name: w, gpus: 1, command: [sh, -c, 'echo "index=$ROTA_ARRAY_INDEX of $ROTA_ARRAY_COUNT"; sleep 1']}
)");
  CommandResult submit = RunRota({"submit", job, "--count", "5-9%2"}, env, tmp.path());
  ASSERT_EQ(submit.exit_code, 0) << submit.err;
  EXPECT_EQ(submit.out, "submitted 5 jobs (array 1: ids 1..5, indices 5..9, at most 2 at once)\n");
  int most_running = 0, succeeded = 0;
  bool saw_limit = false;
  for (int i = 0; i < 600 && succeeded < 5; ++i) {
    CommandResult listed = RunRota({"jobs", "--all", "--array", "1", "-o", "json"}, env, tmp.path());
    ASSERT_EQ(listed.exit_code, 0) << listed.err;
    const json page = json::parse(listed.out);
    int running = 0;
    succeeded = 0;
    for (const json& j : page["jobs"]) {
      running += j["state"] == "running";
      succeeded += j["state"] == "succeeded";
      if (j["state"] == "pending" && j.contains("pending_reason")) {
        saw_limit = saw_limit || j["pending_reason"]["code"] == "ArrayLimit";
      }
    }
    most_running = std::max(most_running, running);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_EQ(succeeded, 5);
  EXPECT_EQ(most_running, 2);  // 4 GPUs free, but two at a time
  EXPECT_TRUE(saw_limit);
  for (int id = 1; id <= 5; ++id) {
    const std::string out = RunRota({"logs", std::to_string(id)}, env, tmp.path()).out;
    EXPECT_NE(out.find("index=" + std::to_string(id + 4) + " of 5"), std::string::npos) << id << ": " << out;
  }
  const std::string element = RunRota({"describe", "2"}, env, tmp.path()).out;
  EXPECT_NE(element.find(" 1 (element 6 of 5..9, at most 2 at once)"), std::string::npos) << element;
  // Nonsense is refused before anything is sent, naming the flag.
  CommandResult bad = RunRota({"submit", job, "--count", "9-5%2"}, env, tmp.path());
  EXPECT_EQ(bad.exit_code, 2);
  EXPECT_NE(bad.err.find("rota submit: --count: '9-5%2' runs backwards"), std::string::npos) << bad.err;
}

// Every error of a job file at once, each with its line; a job that would
// run nothing is refused, naming the task group.
TEST_F(Integration, SubmitReportsEveryErrorOfTheFileAndWantsACommand) {
  RotaProcess up("up", tmp.path() + "/data", {"--gpus", "1xH100:80Gi", "--name", "local"});
  const auto env = up.ClientEnv();
  const std::string bad = Write("bad.yaml", "name: j\ntasks:\n  - gpus: two\n    comand: [x]\ntime_limit: soon\n");
  CommandResult r = RunRota({"submit", bad}, env, tmp.path());
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find(bad + ":3:11: tasks[0].gpus: must be a whole number, got 'two'\n" + bad +
                       ":4:5: tasks[0].comand: unknown field"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find(bad + ":5:13: time_limit:"), std::string::npos) << r.err;
  const std::string idle = Write("idle.yaml", "name: idle\ntasks: [{gpus: 1}]\n");
  CommandResult none = RunRota({"submit", idle}, env, tmp.path());
  EXPECT_EQ(none.exit_code, 2);
  EXPECT_NE(none.err.find(idle + ": tasks[0].command: required"), std::string::npos) << none.err;
  EXPECT_EQ(RunRota({"jobs", "--all", "-o", "json"}, env, tmp.path()).out.find("\"id\""), std::string::npos);
}

// A task decides how long its log is, and can make it sparse: 4 GiB that
// take no disk. Reading its end costs the server what it answers, not the
// log (read whole, `--tail 1` of 2 GiB had held 6 GB of the server).
TEST_F(Integration, AHugeLogIsReadOnlyWhereTheAnswerIs) {
  RotaProcess up("up", tmp.path() + "/data", {"--gpus", "2xH100:80Gi", "--name", "local"});
  const auto env = up.ClientEnv();
  const std::string job = Write("sparse.yaml", R"(
name: sparse
tasks:
  - {cpu: 1, command: [sh, -c, 'truncate -s 4G /proc/self/fd/1 && echo && echo LAST']}
)");
  ASSERT_EQ(RunRota({"submit", job}, env, tmp.path()).exit_code, 0);
  auto admin = up.Admin();
  const json ended = WaitJob(admin, 1, [](const json& x) { return x["state"] == "succeeded" || x["state"] == "failed"; });
  ASSERT_EQ(ended["state"], "succeeded") << ended.dump();
  CommandResult tail = RunRota({"logs", "1", "--tail", "1"}, env, tmp.path());
  EXPECT_EQ(tail.out, "LAST\n");
  auto whole = admin.Get("/v1/jobs/1/logs");
  ASSERT_TRUE(whole);
  EXPECT_EQ(whole->get_header_value("Rota-Log-Size"), std::to_string((int64_t{4} << 30) + 6));
  EXPECT_EQ(whole->get_header_value("Rota-Log-Cut"), "1");
  EXPECT_LT(whole->body.size(), size_t{9} << 20);
  EXPECT_EQ(whole->body.rfind("[rota: only the last 8192 KiB of what was asked for are shown", 0), 0u) << whole->body.substr(0, 200);
  EXPECT_EQ(whole->body.substr(whole->body.size() - 6), "\nLAST\n");
  EXPECT_LT(up.PeakRssMiB(), 512) << "the most the server held resident";
}

// rota logs: one replica's, the last lines, and following to the end.
TEST_F(Integration, LogsByTaskTailAndFollow) {
  RotaProcess up("up", tmp.path() + "/data", {"--gpus", "2xH100:80Gi", "--name", "local"});
  const auto env = up.ClientEnv();
  const std::string job = Write("lines.yaml", R"(
name: lines
tasks:
  - {name: w, replicas: 2, gpus: 1, command: [sh, -c, 'echo "$RANK one"; echo "$RANK two"; sleep 1; echo "$RANK three"']}
)");
  ASSERT_EQ(RunRota({"submit", job}, env, tmp.path()).exit_code, 0);
  // -f returns once the job has ended, with every line.
  CommandResult followed = RunRota({"logs", "1", "-f"}, env, tmp.path());
  EXPECT_EQ(followed.exit_code, 0) << followed.err;
  EXPECT_NE(followed.out.find("0 three"), std::string::npos) << followed.out;
  EXPECT_NE(followed.out.find("1 three"), std::string::npos) << followed.out;
  // Each line once: -f asks each replica for what it has not seen (a replica's log growing in
  // the middle of the combined output is not printed again).
  for (const char* line : {"0 one\n", "1 one\n", "0 three\n", "1 three\n"}) {
    size_t n = 0;
    for (size_t at = followed.out.find(line); at != std::string::npos; at = followed.out.find(line, at + 1)) ++n;
    EXPECT_EQ(n, 1u) << line << " in:\n" << followed.out;
  }
  auto from = up.Admin().Get("/v1/jobs/1/logs?task=w-0&offset=6");  // past "0 one\n"
  ASSERT_TRUE(from);
  EXPECT_EQ(from->body, "0 two\n0 three\n");
  EXPECT_EQ(from->get_header_value("Rota-Log-Size"), "20");
  EXPECT_EQ(up.Admin().Get("/v1/jobs/1/logs?offset=6")->status, 400);  // two replicas: which one?
  CommandResult tail = RunRota({"logs", "1", "--tail", "1"}, env, tmp.path());
  EXPECT_EQ(tail.out, "==> w-0 <==\n0 three\n==> w-1 <==\n1 three\n") << tail.out;
  CommandResult one = RunRota({"logs", "1", "--task", "w-1"}, env, tmp.path());
  EXPECT_EQ(one.out, "1 one\n1 two\n1 three\n") << one.out;
  CommandResult none = RunRota({"logs", "1", "--task", "x"}, env, tmp.path());
  EXPECT_EQ(none.exit_code, 3);
  EXPECT_NE(none.err.find("has no task or replica 'x' (replicas: w-0, w-1)"), std::string::npos) << none.err;
  // rota jobs -o wide names each replica's GPUs; --watch lists again every 2 s until stopped.
  CommandResult wide = RunRota({"jobs", "--all", "-o", "wide"}, env, tmp.path());
  EXPECT_NE(wide.out.find("PRIORITY  SUBMITTED"), std::string::npos) << wide.out;
  EXPECT_NE(wide.out.find("local[0],local[1]"), std::string::npos) << wide.out;
  CommandResult watched = RunShell("timeout 3 " + RotaBinary() + " jobs --all --watch", env, tmp.path());
  EXPECT_EQ(watched.exit_code, 124);  // stopped by timeout, not ended by itself
  size_t listings = 0;
  for (size_t at = watched.out.find("ID  NAME"); at != std::string::npos; at = watched.out.find("ID  NAME", at + 1)) ++listings;
  EXPECT_GE(listings, 2u) << watched.out;
}

// sbatch's habits: --wrap 'CMD', a job from stdin, flags over the file.
TEST_F(Integration, SubmitWrapsACommandReadsStdinAndOverrides) {
  RotaProcess up("up", tmp.path() + "/data", {"--gpus", "2xH100:80Gi", "--name", "local"});
  const auto env = up.ClientEnv();
  CommandResult wrapped =
      RunRota({"submit", "--wrap", "echo wrapped on $CUDA_VISIBLE_DEVICES", "--gpus", "1", "--name", "w1"}, env, tmp.path());
  ASSERT_EQ(wrapped.exit_code, 0) << wrapped.err;
  EXPECT_EQ(wrapped.out, "submitted job 1 (w1) to queue default\n");
  std::string out;
  for (int i = 0; i < 100 && out.find("wrapped on") == std::string::npos; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    out = RunRota({"logs", "1"}, env, tmp.path()).out;
  }
  EXPECT_EQ(out, "wrapped on 0\n");
  // From stdin, with the priority and GPUs replaced.
  const std::string file = Write("two.yaml", "name: two\ntasks: [{gpus: 2, command: [sleep, '60']}]\n");
  CommandResult piped =
      RunShell("cat '" + file + "' | " + RotaBinary() + " submit - --priority high --gpus 1 -o json", env, tmp.path());
  ASSERT_EQ(piped.exit_code, 0) << piped.err;
  const json j = json::parse(piped.out);
  EXPECT_EQ(j["name"], "two");
  EXPECT_EQ(j["priority"], 1000);
  EXPECT_EQ(j["gpus"], 1);
  const std::string multi = Write("multi.yaml", "name: m\ntasks: [{name: a, gpus: 1}, {name: b, gpus: 1}]\n");
  CommandResult refused = RunRota({"submit", multi, "--gpus", "2"}, env, tmp.path());
  EXPECT_EQ(refused.exit_code, 2);
  EXPECT_NE(refused.err.find("gpus: the job has 2 task groups; set each one's gpus in the file"), std::string::npos)
      << refused.err;
}

// rota node drain with a reason everyone sees, undrain, describe.
TEST_F(Integration, NodeDrainWithAReasonAndDescribe) {
  RotaProcess up("up", tmp.path() + "/data", {"--gpus", "2xH100:80Gi", "--name", "box"});
  const auto env = up.ClientEnv();
  CommandResult drain = RunRota({"node", "drain", "box", "--reason", "PSU swap"}, env, tmp.path());
  ASSERT_EQ(drain.exit_code, 0) << drain.err;
  EXPECT_EQ(drain.out, "drained box (PSU swap)\n");
  CommandResult nodes = RunRota({"nodes"}, env, tmp.path());
  EXPECT_NE(nodes.out.find("drained"), std::string::npos) << nodes.out;
  EXPECT_NE(nodes.out.find("PSU swap"), std::string::npos) << nodes.out;
  CommandResult described = RunRota({"node", "describe", "box"}, env, tmp.path());
  ASSERT_EQ(described.exit_code, 0) << described.err;
  EXPECT_NE(described.out.find("PSU swap"), std::string::npos) << described.out;
  EXPECT_NE(described.out.find("GPUs"), std::string::npos) << described.out;
  // The reason survives a restart (it is journaled).
  up.Kill(SIGTERM);
  up.Restart();
  EXPECT_NE(RunRota({"node", "describe", "box", "-o", "json"}, up.ClientEnv(), tmp.path()).out.find("PSU swap"),
            std::string::npos);
  CommandResult undrain = RunRota({"node", "undrain", "box"}, up.ClientEnv(), tmp.path());
  EXPECT_EQ(undrain.exit_code, 0) << undrain.err;
  EXPECT_EQ(RunRota({"node", "describe", "nope"}, up.ClientEnv(), tmp.path()).exit_code, 3);
}

// job_visibility: all: every user sees the whole queue (whom they wait
// behind), but only the owner (or an admin) sees a job's spec and logs or
// cancels it.
TEST_F(Integration, WithVisibilityAllUsersSeeTheQueueNotEachOthersSpecs) {
  RotaProcess server("server", tmp.path() + "/data", {"--config", Write("c.yaml", R"(
node_groups: [{name: n, count: 1, gpus: 8, gpu_model: H100, cpu: 64, memory: 512Gi}]
job_visibility: all
)")});
  auto admin = server.Admin();
  auto token = [&](const std::string& user) {
    return json::parse(admin.Post("/v1/tokens", R"({"user": ")" + user + R"(", "role": "user"})", "application/json")->body)["token"]
        .get<std::string>();
  };
  auto alice = server.Http(token("alice"));
  auto bob = server.Http(token("bob"));
  ASSERT_EQ(alice.Post("/v1/jobs", {{"Idempotency-Key", "alices-key"}},
                       "name: hers\ntasks: [{gpus: 8, env: {SECRET: s3}, command: [sleep, '600']}]\n", "application/yaml")
                ->status,
            201);
  const json listed = json::parse(bob.Get("/v1/jobs")->body)["jobs"];
  ASSERT_EQ(listed.size(), 1u);
  EXPECT_EQ(listed[0]["user"], "alice");
  EXPECT_EQ(listed[0]["name"], "hers");
  EXPECT_FALSE(listed[0].contains("request_id")) << listed[0].dump();
  auto theirs = bob.Get("/v1/jobs/1");
  ASSERT_EQ(theirs->status, 200);
  EXPECT_FALSE(json::parse(theirs->body).contains("spec")) << theirs->body;
  EXPECT_EQ(theirs->body.find("s3"), std::string::npos);
  // Her request id (a retry key others could replay nothing with, but hers) is hers and admins' only.
  EXPECT_EQ(theirs->body.find("alices-key"), std::string::npos) << theirs->body;
  const json hers = json::parse(alice.Get("/v1/jobs/1")->body);
  EXPECT_TRUE(hers.contains("spec"));
  EXPECT_EQ(hers.value("request_id", ""), "alices-key") << hers.dump();
  EXPECT_EQ(json::parse(alice.Get("/v1/jobs")->body)["jobs"][0].value("request_id", ""), "alices-key");
  EXPECT_EQ(json::parse(admin.Get("/v1/jobs/1")->body).value("request_id", ""), "alices-key");
  // Where she saves checkpoints is hers too: not in the view, nor in its events.
  ASSERT_EQ(alice.Post("/v1/jobs/1/checkpoint", R"({"path": "/scratch/alice/ckpt-900"})", "application/json")->status, 200);
  for (const std::string path : {"/v1/jobs/1", "/v1/jobs/1/events"}) {
    const std::string body = bob.Get(path)->body;
    EXPECT_EQ(body.find("/scratch/alice"), std::string::npos) << path << ": " << body;
    EXPECT_NE(alice.Get(path)->body.find("/scratch/alice/ckpt-900"), std::string::npos) << path;
  }
  auto cancel = bob.Post("/v1/jobs/1/cancel", "{}", "application/json");
  EXPECT_EQ(cancel->status, 403) << cancel->body;
  EXPECT_NE(cancel->body.find("job 1 is alice's: only its owner or an admin may do that"), std::string::npos);
  EXPECT_EQ(bob.Get("/v1/jobs/1/logs")->status, 403);
  EXPECT_EQ(bob.Get("/v1/jobs/99")->status, 404);
  auto many = bob.Post("/v1/jobs/cancel", R"({"ids": [1]})", "application/json");
  ASSERT_EQ(many->status, 200) << many->body;
  EXPECT_EQ(json::parse(many->body)["failed"],
            json::parse(R"([{"id": 1, "status": 403, "error": "job 1 is alice's: only its owner or an admin may do that"}])"));
  EXPECT_EQ(alice.Post("/v1/jobs/1/cancel", "{}", "application/json")->status, 200);
}

// A server older than the client has no POST /v1/jobs/cancel (404): the
// CLI cancels the jobs one by one instead, as it did before.
TEST_F(Integration, ManyCancelsFallBackToOneByOneOnAServerWithoutTheRoute) {
  httplib::Server old;
  std::atomic<int> bulk = 0, single = 0;
  old.Post("/v1/jobs/cancel", [&](const httplib::Request&, httplib::Response& res) {
    ++bulk;
    res.status = 404;
  });
  old.Post(R"(/v1/jobs/(\d+)/cancel)", [&](const httplib::Request& req, httplib::Response& res) {
    ++single;
    if (req.matches[1] == "8") {
      res.status = 409;
      res.set_content(R"({"error": {"code": "FAILED_PRECONDITION", "message": "job 8 is already cancelled"}})", "application/json");
      return;
    }
    res.set_content(R"({"id": )" + std::string(req.matches[1]) + R"(, "name": "old"})", "application/json");
  });
  const int port = old.bind_to_any_port("127.0.0.1");
  ASSERT_GT(port, 0);
  std::thread serving([&] { old.listen_after_bind(); });
  CommandResult r = RunRota({"cancel", "7", "8", "9"}, {"ROTA_SERVER=http://127.0.0.1:" + std::to_string(port), "ROTA_TOKEN=t"},
                            tmp.path());
  old.stop();
  serving.join();
  EXPECT_EQ(bulk, 1);
  EXPECT_EQ(single, 3);
  EXPECT_EQ(r.exit_code, 5) << r.err;
  EXPECT_EQ(r.out, "cancelled job 7 (old)\ncancelled job 9 (old)\n");
  EXPECT_NE(r.err.find("rota cancel 8: job 8 is already cancelled (HTTP 409)"), std::string::npos) << r.err;
}

// POST /v1/jobs/cancel: many cancels in one request and one journal write,
// each id answered as its own cancel would be; a malformed request is
// refused whole, naming the field, and cancels nothing.
TEST_F(Integration, ManyCancelsInOneRequestAnswerEachIdAndSurviveARestart) {
  auto server = std::make_unique<RotaProcess>("server", tmp.path() + "/data", std::vector<std::string>{"--rate-limit", "0"});
  auto admin = server->Admin();
  const std::string bob_token =
      json::parse(admin.Post("/v1/tokens", R"({"user": "bob", "role": "user"})", "application/json")->body)["token"];
  auto bob = server->Http(bob_token);
  const std::string spec = "name: sweep\ntasks: [{gpus: 1, command: [sleep, '600']}]\n";
  ASSERT_EQ(admin.Post("/v1/jobs", "name: admins\ntasks: [{gpus: 1, command: [sleep, '600']}]\n", "application/yaml")->status, 201);
  ASSERT_EQ(bob.Post("/v1/jobs?count=4", spec, "application/yaml")->status, 201);  // jobs 2..5
  std::string too_many = R"({"ids": [)";
  for (int i = 1; i <= 10'001; ++i) too_many += (i > 1 ? "," : "") + std::to_string(i);
  too_many += "]}";
  const std::vector<std::pair<std::string, std::string>> refused = {
      {"not json", "request body: must be a JSON object"},
      {"[2, 3]", "request body: must be a JSON object"},
      {R"({"ids": [2], "force": true})", "request body: unknown field 'force'"},
      {R"({"ids": []})", "ids: must be a non-empty list of job ids"},
      {R"({"ids": "2,3"})", "ids: must be a non-empty list of job ids"},
      {R"({"ids": [2, "3"]})", R"(ids[1]: not a job id: \"3\")"},
      {R"({"ids": [2, -3]})", "ids[1]: not a job id: -3"},
      {R"({"ids": [2, 0]})", "ids[1]: not a job id: 0"},
      {too_many, "ids: at most 10000 jobs a request, got 10001"},
  };
  for (const auto& [body, message] : refused) {
    auto r = bob.Post("/v1/jobs/cancel", body, "application/json");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 400) << body.substr(0, 40) << ": " << r->body;
    EXPECT_NE(r->body.find(message), std::string::npos) << body.substr(0, 40) << ": " << r->body;
  }
  EXPECT_EQ(json::parse(bob.Get("/v1/jobs?state=pending&user=bob")->body)["jobs"].size(), 4u);  // nothing cancelled

  // Job 1 is the admin's (bob sees it: job_visibility is `all` by default,
  // but may not cancel it), 99 does not exist, 3 is named twice.
  auto r = bob.Post("/v1/jobs/cancel", R"({"ids": [2, 3, 1, 99, 3]})", "application/json");
  ASSERT_EQ(r->status, 200) << r->body;
  const json answer = json::parse(r->body);
  EXPECT_EQ(answer["cancelled"], json::parse(R"([{"id": 2, "name": "sweep"}, {"id": 3, "name": "sweep"}])"));
  const std::string admin_user = json::parse(admin.Get("/v1/whoami")->body)["user"];
  EXPECT_EQ(answer["failed"],
            (json{{{"id", 1}, {"status", 403}, {"error", "job 1 is " + admin_user + "'s: only its owner or an admin may do that"}},
                  {{"id", 99}, {"status", 404}, {"error", "no job 99"}},
                  {{"id", 3}, {"status", 409}, {"error", "job 3 is already cancelled"}}}));
  // The CLI: many ids go in one request; the exit code is the first failure's.
  const std::vector<std::string> env = {"ROTA_SERVER=" + server->url(), "ROTA_TOKEN=" + bob_token};
  CommandResult cli = RunRota({"cancel", "4", "99", "1", "5"}, env, tmp.path());
  EXPECT_EQ(cli.exit_code, 3) << cli.err;  // 99's 404 before 1's 403
  EXPECT_EQ(cli.out, "cancelled job 4 (sweep)\ncancelled job 5 (sweep)\n");
  EXPECT_NE(cli.err.find("rota cancel 99: no job 99 (HTTP 404)"), std::string::npos) << cli.err;
  EXPECT_NE(cli.err.find("rota cancel 1: job 1 is " + admin_user + "'s"), std::string::npos) << cli.err;

  // Acknowledged means journaled: after kill -9, bob's four are cancelled and the admin's is not.
  server->Kill(SIGKILL);
  server = std::make_unique<RotaProcess>("server", tmp.path() + "/data", std::vector<std::string>{"--rate-limit", "0"});
  auto again = server->Admin();
  const json jobs = json::parse(again.Get("/v1/jobs?all=true")->body)["jobs"];
  ASSERT_EQ(jobs.size(), 5u);
  for (const json& j : jobs) EXPECT_EQ(j["state"], j["id"] == 1 ? "pending" : "cancelled") << j.dump();
}

TEST_F(Integration, AnIdleServerGivesBackWhatABurstUsed) {
  // 50,000 pending jobs cancelled by `rota cancel --state pending` (pages
  // of the listing, then 10,000 a request): the burst's transient memory
  // (requests, answers, the journal batches) and the records' old
  // versions are freed. Once the server is idle, its RSS comes back to
  // near what it was before the cancel: here 80 MiB before, 256 MiB right
  // after, 122 MiB within 7 s. (Without jemalloc's background thread, it
  // stayed 150 MiB above for good: the allocator purged only inside later
  // allocations.)
  const std::string config = Write("cluster.yaml",
                                   "limits: {max_pending_per_user: 1000000, max_pending_per_queue: 1000000, "
                                   "submit_rate: 1000000}\n");
  RotaProcess server("server", tmp.path() + "/data", {"--rate-limit", "0", "--config", config});
  auto admin = server.Admin();
  auto r = admin.Post("/v1/jobs?count=50000", "name: j\ntasks: [{gpus: 1, command: ['true']}]\n", "application/yaml");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 201) << r->body;
  // Settled first: two readings a second apart within 2 MiB (the array's own
  // burst given back, its snapshot written).
  double before = server.RssMiB();
  for (int i = 0; i < 20; ++i) {
    std::this_thread::sleep_for(std::chrono::seconds(1));
    const double next = server.RssMiB();
    const bool settled = std::abs(next - before) < 2;
    before = next;
    if (settled) break;
  }
  ASSERT_GT(before, 0) << "the server is gone";
  const CommandResult cancel = RunRota({"cancel", "--state", "pending"}, server.ClientEnv(), tmp.path());
  ASSERT_EQ(cancel.exit_code, 0) << cancel.err;
  auto left = admin.Get("/v1/jobs?state=pending&limit=1");
  ASSERT_TRUE(left);
  ASSERT_EQ(json::parse(left->body)["jobs"].size(), 0u);
  const double peak = server.RssMiB();
  ASSERT_GT(peak, 0) << "the server is gone";
  // Given back: within 80 MiB of before, or at least half of what the
  // cancels added.
  auto back = [&](double rss) { return rss - before <= std::max(80.0, (peak - before) / 2); };
  double now = peak;
  for (int i = 0; i < 60 && !back(now); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(500));
    now = server.RssMiB();
    ASSERT_GT(now, 0) << "the server is gone";
  }
  EXPECT_TRUE(back(now)) << "RSS " << before << " MiB before the cancels, " << peak << " right after, " << now
                         << " 30 s later";
}

}  // namespace
}  // namespace rota::testing

