// Trust on a shared cluster, through the real binary: a user's task runs as
// that user's account, sees nothing of the agent's environment, cannot read
// the admin token nor open another GPU's device node, and a mount or rootfs
// outside the admin's rules is refused at submission.
#include <gtest/gtest.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>

#include <algorithm>
#include <cerrno>
#include <functional>
#include <initializer_list>
#include <nlohmann/json.hpp>

#include "harness.h"

namespace rota::testing {
namespace {

using nlohmann::json;

// A `rota agent` of its own for node `name` of `server` (a remote one: it
// ships its tasks' logs, where rota up's writes them in place), with a token
// of its own, its logs under `dir`/agent-logs and its own log at
// `dir`/agent.log; stopped (SIGTERM, waited for) when this goes.
class RemoteAgent {
 public:
  RemoteAgent(RotaProcess& server, const std::string& dir, const std::string& gpus, int heartbeat_ms) {
    auto r = server.Admin().Post("/v1/tokens", json{{"user", "w0"}, {"role", "agent"}, {"node", "w0"}}.dump(),
                                 "application/json");
    EXPECT_EQ(r->status, 201);
    const std::string token_file = dir + "/w0.token";
    std::ofstream(token_file) << json::parse(r->body)["token"].get<std::string>() << "\n";
    pid_ = SpawnLogged({RotaBinary(), "agent", "--server", server.url(), "--token-file", token_file, "--name", "w0",
                        "--gpus", gpus, "--logs-dir", dir + "/agent-logs", "--heartbeat-ms", std::to_string(heartbeat_ms)},
                       dir + "/agent.log");
    EXPECT_GT(pid_, 0);
    for (int i = 0; i < 200 && server.Admin().Get("/v1/nodes")->body.find("\"w0\"") == std::string::npos; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(25));
    }
  }
  ~RemoteAgent() {
    if (pid_ <= 0) return;
    kill(pid_, SIGTERM);
    waitpid(pid_, nullptr, 0);
  }
  RemoteAgent(const RemoteAgent&) = delete;
  RemoteAgent& operator=(const RemoteAgent&) = delete;

 private:
  pid_t pid_ = -1;
};

class Trust : public ::testing::Test {
 protected:
  void SetUp() override {
    // Tasks of other accounts must pass through the test's directory to their own.
    chmod(tmp.path().c_str(), 0711);
  }
  std::string Write(const std::string& name, const std::string& text) {
    const std::string path = tmp.path() + "/" + name;
    std::ofstream(path) << text;
    return path;
  }
  // A user token for `user`, from the admin.
  static std::string UserToken(RotaProcess& up, const std::string& user) {
    auto r = up.Admin().Post("/v1/tokens", json{{"user", user}, {"role", "user"}}.dump(), "application/json");
    EXPECT_EQ(r->status, 201) << r->body;
    return json::parse(r->body)["token"];
  }
  static json WaitEnded(RotaProcess& up, int id) {
    json j;
    for (int i = 0; i < 400; ++i) {
      j = json::parse(up.Admin().Get("/v1/jobs/" + std::to_string(id))->body);
      const std::string s = j.value("state", "");
      if (s == "succeeded" || s == "failed" || s == "cancelled") break;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return j;
  }
  static std::string Logs(RotaProcess& up, int id) { return up.Admin().Get("/v1/jobs/" + std::to_string(id) + "/logs")->body; }
  // Submits `job` as `user` and waits for it to end: its record and its log.
  static std::pair<json, std::string> RunToEnd(RotaProcess& up, const std::string& user, const json& job) {
    auto r = up.Http(UserToken(up, user)).Post("/v1/jobs", job.dump(), "application/json");
    if (!r || r->status != 201) {
      ADD_FAILURE() << "not accepted: " << (r ? r->body : httplib::to_string(r.error()));
      return {json::object(), ""};
    }
    const int id = json::parse(r->body)["id"];
    return {WaitEnded(up, id), Logs(up, id)};
  }
  // A busybox image at tmp/image (its rootfs/ with `commands` and the
  // directories `dirs`): the path to give as a rootfs.
  std::string BusyboxImage(std::initializer_list<const char*> commands, std::initializer_list<const char*> dirs = {}) {
    const std::string rootfs = tmp.path() + "/image/rootfs";
    std::filesystem::create_directories(rootfs + "/bin");
    for (const char* d : dirs) std::filesystem::create_directories(rootfs + d);
    std::filesystem::copy_file("/bin/busybox", rootfs + "/bin/busybox");
    for (const char* c : commands) std::filesystem::create_symlink("busybox", rootfs + "/bin/" + c);
    return tmp.path() + "/image";
  }
  // The OCI runtimes installed here, of runc and crun.
  static std::vector<std::string> OciRuntimes() {
    std::vector<std::string> out;
    for (const char* runtime : {"runc", "crun"}) {
      if (access((std::string("/usr/sbin/") + runtime).c_str(), X_OK) == 0 ||
          access((std::string("/usr/bin/") + runtime).c_str(), X_OK) == 0) {
        out.push_back(runtime);
      }
    }
    return out;
  }
  TempDir tmp;
};

TEST_F(Trust, AUsersTaskRunsAsItsAccountAndCannotReadTheAdminToken) {
  const std::string data = tmp.path() + "/data";
  const std::string config = Write("cluster.yaml", "node_groups: []\naccounts: [{user: alice, uid: 65534, gid: 65534}]\n");
  // Something of the agent's own environment that must not reach a task.
  setenv("ROTA_TEST_AGENT_SECRET", "leaked", 1);
  RotaProcess up("up", data, {"--gpus", "2xH100:80Gi", "--name", "local", "--config", config});
  unsetenv("ROTA_TEST_AGENT_SECRET");
  auto alice = up.Http(UserToken(up, "alice"));
  const std::string job = json{{"name", "whoami"},
                               {"tasks", {{{"name", "w"},
                                           {"gpus", 1},
                                           {"command", {"sh", "-c",
                                                        "echo uid=$(id -u) gid=$(id -g) user=$USER; "
                                                        "echo secret=${ROTA_TEST_AGENT_SECRET:-none}; "
                                                        "cat " + data + "/admin.token 2>/dev/null && echo TOKEN-READ || echo token-denied; "
                                                        "cat " + data + "/rota.db >/dev/null 2>&1 && echo DB-READ || echo db-denied; "
                                                        "echo ckpt > $ROTA_CHECKPOINT_FILE && echo work-ok"}}}}}}
                              .dump();
  auto r = alice.Post("/v1/jobs", job, "application/json");
  ASSERT_EQ(r->status, 201) << r->body;
  const int id = json::parse(r->body)["id"];
  EXPECT_EQ(WaitEnded(up, id)["state"], "succeeded");
  const std::string logs = Logs(up, id);
  EXPECT_NE(logs.find("uid=65534 gid=65534 user=nobody"), std::string::npos) << logs;
  EXPECT_NE(logs.find("secret=none"), std::string::npos) << logs;
  EXPECT_NE(logs.find("token-denied"), std::string::npos) << logs;
  EXPECT_NE(logs.find("db-denied"), std::string::npos) << logs;
  EXPECT_NE(logs.find("work-ok"), std::string::npos) << logs;
  EXPECT_EQ(logs.find(up.token()), std::string::npos) << "the admin token leaked into a user's log";
}

// A user's container on a root agent: the runtime runs as root (it must,
// to make the namespaces and cgroups), the container's process as the
// user's account; nothing of the job's environment steers the runtime.
TEST_F(Trust, AUsersContainerRunsAsItsAccount) {
  if (geteuid() != 0) GTEST_SKIP() << "a root agent's containers";
  if (access("/bin/busybox", X_OK) != 0) GTEST_SKIP() << "no static busybox to build a rootfs from (busybox-static)";
  const std::string image = BusyboxImage({"sh", "id", "cat"});
  const std::string config = Write("cluster.yaml", "node_groups: []\naccounts: [{user: alice, uid: 65534, gid: 65534}]\n"
                                                   "allowed_mounts: [{prefix: " + image + "}]\n");
  const std::vector<std::string> runtimes = OciRuntimes();
  if (runtimes.empty()) GTEST_SKIP() << "neither runc nor crun is installed";
  for (const std::string& runtime : runtimes) {
    RotaProcess up("up", tmp.path() + "/data-" + runtime,
                   {"--gpus", "2xH100:80Gi", "--name", "local", "--config", config, "--oci-runtime", runtime});
    const json job = {{"name", "boxed"},
                      {"tasks", {{{"gpus", 1}, {"rootfs", image},
                                  {"env", {{"XDG_RUNTIME_DIR", tmp.path() + "/steer"}}},
                                  {"command", {"/bin/sh", "-c", "echo inside uid=$(id -u) gid=$(id -g) pid1=$(cat /proc/1/comm)"}}}}}};
    const auto [j, logs] = RunToEnd(up, "alice", job);
    EXPECT_EQ(j["state"], "succeeded") << runtime << ": " << j.dump() << "\n" << logs;
    EXPECT_NE(logs.find("inside uid=65534 gid=65534 pid1=sh"), std::string::npos) << runtime << ": " << logs;
    EXPECT_FALSE(std::filesystem::exists(tmp.path() + "/steer")) << runtime << ": the job's env steered the runtime";
    // Its log on the node is its account's, as a process task's is.
    int logs_owned = 0;
    for (const auto& e : std::filesystem::recursive_directory_iterator(tmp.path() + "/data-" + runtime)) {
      if (e.path().extension() != ".log" || ReadAll(e.path().string()).find("inside uid=") == std::string::npos) continue;
      struct stat st {};
      ASSERT_EQ(stat(e.path().c_str(), &st), 0);
      EXPECT_EQ(st.st_uid, 65534u) << e.path();
      ++logs_owned;
    }
    EXPECT_EQ(logs_owned, 1) << runtime;
  }
}

// Two agents on one machine (two clusters' nodes, or tests side by side)
// each run their job 1 in a container at once: a container's id names its
// cgroup (/rota/<id>), so it carries the agent's tag as a process task's
// group does. Before, the second runtime found the first's cgroup busy
// ("cannot start an already running container") and the job failed.
TEST_F(Trust, TwoAgentsOnOneMachineRunTheirJobOnesContainersAtOnce) {
  if (geteuid() != 0) GTEST_SKIP() << "a root agent's containers";
  if (access("/bin/busybox", X_OK) != 0) GTEST_SKIP() << "no static busybox to build a rootfs from (busybox-static)";
  const std::vector<std::string> runtimes = OciRuntimes();
  if (runtimes.empty()) GTEST_SKIP() << "neither runc nor crun is installed";
  const std::string image = BusyboxImage({"sh", "sleep", "cat"});
  const std::string config = Write("cluster.yaml", "node_groups: []\naccounts: [{user: alice, uid: 65534, gid: 65534}]\n"
                                                   "allowed_mounts: [{prefix: " + image + "}]\n");
  RotaProcess first("up", tmp.path() + "/data-a", {"--gpus", "1xH100:80Gi", "--name", "local", "--config", config,
                                                   "--oci-runtime", runtimes[0]});
  RotaProcess second("up", tmp.path() + "/data-b", {"--gpus", "1xH100:80Gi", "--name", "local", "--config", config,
                                                    "--oci-runtime", runtimes[0]});
  const std::string job = json{{"name", "boxed"},
                               {"tasks", {{{"gpus", 1}, {"rootfs", image},
                                           {"command", {"/bin/sh", "-c", "sleep 2; echo done-$(cat /proc/1/comm)"}}}}}}
                              .dump();
  std::vector<int> ids;
  for (RotaProcess* up : {&first, &second}) {
    auto r = up->Http(UserToken(*up, "alice")).Post("/v1/jobs", job, "application/json");
    ASSERT_EQ(r->status, 201) << r->body;
    ids.push_back(json::parse(r->body)["id"].get<int>());
  }
  EXPECT_EQ(ids, (std::vector<int>{1, 1}));
  for (size_t k = 0; k < 2; ++k) {
    RotaProcess& up = k == 0 ? first : second;
    const json j = WaitEnded(up, ids[k]);
    const std::string logs = Logs(up, ids[k]);
    EXPECT_EQ(j["state"], "succeeded") << k << ": " << j.dump() << "\n" << logs;
    EXPECT_NE(logs.find("done-sh"), std::string::npos) << k << ": " << logs;
  }
}

// A read-only data mount is read-only all the way down: a file system
// mounted below its source (a scratch tmpfs in a dataset directory) is not
// writable through it either. (A bind mount's "ro" alone covers its top
// only: with it, the container wrote into the tmpfs.)
TEST_F(Trust, AReadOnlyMountIsReadOnlyBelowItsTopToo) {
  if (geteuid() != 0) GTEST_SKIP() << "a root agent's containers, and mounting a tmpfs";
  if (access("/bin/busybox", X_OK) != 0) GTEST_SKIP() << "no static busybox to build a rootfs from (busybox-static)";
  const std::vector<std::string> runtimes = OciRuntimes();
  if (runtimes.empty()) GTEST_SKIP() << "neither runc nor crun is installed";
  const std::string image = BusyboxImage({"sh", "touch"}, {"/data"}), data = tmp.path() + "/data-set";
  std::filesystem::create_directories(data + "/scratch");
  if (mount("tmpfs", (data + "/scratch").c_str(), "tmpfs", 0, "size=1m,mode=1777") != 0) {
    GTEST_SKIP() << "cannot mount a tmpfs here: " << std::strerror(errno);
  }
  struct Unmount {
    std::string path;
    ~Unmount() { umount2(path.c_str(), MNT_DETACH); }
  } unmount{data + "/scratch"};
  const std::string config = Write("cluster.yaml", "node_groups: []\naccounts: [{user: alice, uid: 65534, gid: 65534}]\n"
                                                   "allowed_mounts: [{prefix: " + image + "}, {prefix: " + data + "}]\n");
  for (const std::string& runtime : runtimes) {
    RotaProcess up("up", tmp.path() + "/state-" + runtime,
                   {"--gpus", "2xH100:80Gi", "--name", "local", "--config", config, "--oci-runtime", runtime});
    const json job = {{"name", "reader"},
                      {"mounts", {{{"source", data}, {"target", "/data"}, {"read_only", true}}}},
                      {"tasks", {{{"gpus", 1}, {"rootfs", image},
                                  {"command", {"/bin/sh", "-c", "touch /data/top 2>&1; touch /data/scratch/" + runtime +
                                                                    " 2>&1; echo end"}}}}}};
    const auto [j, logs] = RunToEnd(up, "alice", job);
    EXPECT_EQ(j["state"], "succeeded") << runtime << ": " << j.dump() << "\n" << logs;
    EXPECT_NE(logs.find("/data/top: Read-only file system"), std::string::npos) << runtime << ": " << logs;
    EXPECT_NE(logs.find("/data/scratch/" + runtime + ": Read-only file system"), std::string::npos) << runtime << ": " << logs;
    EXPECT_FALSE(std::filesystem::exists(data + "/scratch/" + runtime)) << runtime << ": written below the read-only mount";
  }
}

// allowed_mounts is checked on the path as written: a symbolic link under
// an allowed prefix (which an earlier job may make: h -> /, owned by its
// user) must not bind what it points to. Such a mount fails to start, saying why; a real
// directory is bound.
TEST_F(Trust, AMountThroughASymbolicLinkUnderAnAllowedPrefixIsRefusedOnTheNode) {
  if (geteuid() != 0) GTEST_SKIP() << "a root agent's containers";
  if (access("/bin/busybox", X_OK) != 0) GTEST_SKIP() << "no static busybox to build a rootfs from (busybox-static)";
  const std::vector<std::string> runtimes = OciRuntimes();
  if (runtimes.empty()) GTEST_SKIP() << "neither runc nor crun is installed";
  const std::string image = BusyboxImage({"sh", "cat", "ls"}, {"/d", "/host"}), data = tmp.path() + "/scratch";
  std::filesystem::create_directories(data + "/real");
  std::ofstream(data + "/real/marker") << "the real directory\n";
  std::filesystem::create_symlink("/", data + "/h");
  ASSERT_EQ(lchown((data + "/h").c_str(), 65534, 65534), 0);  // (a job's link: its user's, not root's)
  const std::string config = Write("cluster.yaml", "node_groups: []\naccounts: [{user: alice, uid: 65534, gid: 65534}]\n"
                                                   "allowed_mounts: [{prefix: " + image + "}, {prefix: " + data + "}]\n");
  for (const std::string& runtime : runtimes) {
    RotaProcess up("up", tmp.path() + "/state-" + runtime,
                   {"--gpus", "2xH100:80Gi", "--name", "local", "--config", config, "--oci-runtime", runtime});
    auto alice = up.Http(UserToken(up, "alice"));
    auto run = [&](const std::string& source, const std::string& target, const std::string& command) {
      const json job = {{"name", "m"},
                        {"mounts", {{{"source", source}, {"target", target}, {"read_only", true}}}},
                        {"tasks", {{{"gpus", 1}, {"rootfs", image}, {"command", {"/bin/sh", "-c", command}}}}}};
      auto r = alice.Post("/v1/jobs", job.dump(), "application/json");
      EXPECT_TRUE(r && r->status == 201) << (r ? r->body : "no answer");
      const int id = r && r->status == 201 ? json::parse(r->body)["id"].get<int>() : 0;
      return std::pair<json, std::string>{WaitEnded(up, id), Logs(up, id)};
    };
    const auto [linked, linked_logs] = run(data + "/h", "/host", "ls /host/etc; echo listed");
    EXPECT_EQ(linked["state"], "failed") << runtime << ": " << linked.dump() << "\n" << linked_logs;
    EXPECT_NE(linked_logs.find("mount source '" + data + "/h' goes through a symbolic link"), std::string::npos)
        << runtime << ": " << linked_logs;
    EXPECT_EQ(linked_logs.find("listed"), std::string::npos) << runtime << ": the host's / was bound: " << linked_logs;
    const auto [real, real_logs] = run(data + "/real", "/d", "cat /d/marker");
    EXPECT_EQ(real["state"], "succeeded") << runtime << ": " << real.dump() << "\n" << real_logs;
    EXPECT_NE(real_logs.find("the real directory"), std::string::npos) << runtime << ": " << real_logs;
  }
}

// A job's usage is its owner's: another user's /metrics holds the
// cluster's series but none of that job's (nor its id on the GPU it holds);
// the admin's (a scraper's) holds them.
TEST_F(Trust, MetricsShowAUserOnlyTheirOwnJobs) {
  RotaProcess up("up", tmp.path() + "/data", {"--gpus", "2xH100:80Gi", "--name", "local"});
  auto r = up.Admin().Post("/v1/jobs", R"({"name": "admins", "tasks": [{"gpus": 1, "command": ["sleep", "30"]}]})",
                           "application/json");
  ASSERT_EQ(r->status, 201) << r->body;
  const int id = json::parse(r->body)["id"];
  const std::string series = "rota_job_idle{job=\"" + std::to_string(id) + "\"";
  std::string admin;
  for (int i = 0; i < 200 && admin.find(series) == std::string::npos; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    admin = up.Admin().Get("/metrics")->body;
  }
  ASSERT_NE(admin.find(series), std::string::npos) << admin.substr(0, 2000);
  auto bob = up.Http(UserToken(up, "bob"));
  auto mine = bob.Get("/metrics");
  ASSERT_EQ(mine->status, 200);
  EXPECT_NE(mine->body.find("rota_store_writable 1"), std::string::npos) << mine->body.substr(0, 2000);
  EXPECT_EQ(mine->body.find("job=\"" + std::to_string(id) + "\""), std::string::npos) << mine->body;
  up.Admin().Post("/v1/jobs/" + std::to_string(id) + "/cancel", "{}", "application/json");
}

// Under job_visibility: own, another user's job is a 404, and /v1/nodes
// does not name it on the GPU it holds either; the admin's view does.
TEST_F(Trust, NodesDoNotNameJobsAUserMayNotSee) {
  const std::string config = Write("cluster.yaml", "node_groups: []\njob_visibility: own\n");
  RotaProcess up("up", tmp.path() + "/data", {"--gpus", "2xH100:80Gi", "--name", "local", "--config", config});
  auto r = up.Admin().Post("/v1/jobs", R"({"name": "admins", "tasks": [{"gpus": 1, "command": ["sleep", "30"]}]})",
                           "application/json");
  ASSERT_EQ(r->status, 201) << r->body;
  const int id = json::parse(r->body)["id"];
  const std::string named = "\"job\": " + std::to_string(id);
  std::string admin;
  for (int i = 0; i < 200 && admin.find(named) == std::string::npos; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    admin = up.Admin().Get("/v1/nodes")->body;
  }
  ASSERT_NE(admin.find(named), std::string::npos) << admin;
  auto bob = up.Http(UserToken(up, "bob"));
  EXPECT_EQ(bob.Get("/v1/jobs/" + std::to_string(id))->status, 404);
  const std::string nodes = bob.Get("/v1/nodes")->body;
  EXPECT_NE(nodes.find("\"local\""), std::string::npos) << nodes;
  EXPECT_EQ(nodes.find(named), std::string::npos) << nodes;
  up.Admin().Post("/v1/jobs/" + std::to_string(id) + "/cancel", "{}", "application/json");
}

TEST_F(Trust, AUserWithoutAnAccountOnTheNodeIsRefusedWithTheReason) {
  RotaProcess up("up", tmp.path() + "/data", {"--gpus", "2xH100:80Gi", "--name", "local"});
  auto ghost = up.Http(UserToken(up, "no-such-account-rota"));
  auto r = ghost.Post("/v1/jobs", R"({"name": "x", "tasks": [{"gpus": 1, "command": ["true"]}]})", "application/json");
  ASSERT_EQ(r->status, 201) << r->body;
  const int id = json::parse(r->body)["id"];
  const json ended = WaitEnded(up, id);
  EXPECT_EQ(ended["state"], "failed");
  const std::string logs = Logs(up, id);
  EXPECT_NE(logs.find("user 'no-such-account-rota' has no Unix account on node 'local'"), std::string::npos) << logs;
  // And in its end reason: not "exited with code 127", which a program may exit with itself.
  EXPECT_NE(ended.value("end_reason", "").find("main-0 did not start: cannot start the task: user 'no-such-account-rota' "
                                               "has no Unix account on node 'local'"),
            std::string::npos)
      << ended.dump();
}

TEST_F(Trust, RootOnlyWhereAQueueAllowsIt) {
  const std::string config = Write("cluster.yaml",
                                   "node_groups: []\n"
                                   "accounts: [{user: mallory, uid: 0}]\n"
                                   "queues:\n"
                                   "  - {name: ops, allow_root: true, users: [mallory]}\n"
                                   "  - {name: research}\n");
  RotaProcess up("up", tmp.path() + "/data", {"--gpus", "2xH100:80Gi", "--name", "local", "--config", config});
  auto mallory = up.Http(UserToken(up, "mallory"));
  auto submit = [&](const std::string& queue) {
    auto r = mallory.Post("/v1/jobs",
                          json{{"name", "r"}, {"queue", queue}, {"tasks", {{{"gpus", 1}, {"command", {"sh", "-c", "id -u"}}}}}}.dump(),
                          "application/json");
    EXPECT_EQ(r->status, 201) << r->body;
    return json::parse(r->body)["id"].get<int>();
  };
  const int refused = submit("research");
  EXPECT_EQ(WaitEnded(up, refused)["state"], "failed");
  EXPECT_NE(Logs(up, refused).find("maps to uid 0"), std::string::npos) << Logs(up, refused);
  const int allowed = submit("ops");
  EXPECT_EQ(WaitEnded(up, allowed)["state"], "succeeded");
  EXPECT_NE(Logs(up, allowed).find("0\n"), std::string::npos) << Logs(up, allowed);
}

TEST_F(Trust, AProcessTaskOpensItsOwnGpuAndNoOther) {
  if (access("/sys/fs/cgroup/devices", W_OK) != 0) GTEST_SKIP() << "no writable cgroup v1 devices hierarchy here";
  // Stand-ins for /dev/nvidia0 and /dev/nvidia1: character devices with the
  // numbers of /dev/full and /dev/random, which any process may read.
  const std::string dev = tmp.path() + "/dev";
  std::filesystem::create_directories(dev);
  ASSERT_EQ(mknod((dev + "/nvidia0").c_str(), S_IFCHR | 0666, makedev(1, 7)), 0) << std::strerror(errno);
  ASSERT_EQ(mknod((dev + "/nvidia1").c_str(), S_IFCHR | 0666, makedev(1, 8)), 0) << std::strerror(errno);
  RotaProcess up("up", tmp.path() + "/data", {"--gpus", "2xH100:80Gi", "--name", "local", "--device-dir", dev});
  auto admin = up.Admin();
  // Even as root, and with CUDA_VISIBLE_DEVICES overridden: the devices cgroup decides.
  const std::string probe = "export CUDA_VISIBLE_DEVICES=0,1; echo gpus=$ROTA_REPLICA; "
                            "for g in 0 1; do head -c1 " + dev + "/nvidia$g >/dev/null 2>&1 && echo open-$g || echo denied-$g; done";
  auto r = admin.Post("/v1/jobs", json{{"name", "dev"}, {"tasks", {{{"gpus", 1}, {"command", {"sh", "-c", probe}}}}}}.dump(),
                      "application/json");
  ASSERT_EQ(r->status, 201) << r->body;
  const int id = json::parse(r->body)["id"];
  const json j = WaitEnded(up, id);
  EXPECT_EQ(j["state"], "succeeded");
  const std::string logs = Logs(up, id);
  // The job got GPU 0 (the first free one).
  EXPECT_NE(logs.find("open-0"), std::string::npos) << logs;
  EXPECT_NE(logs.find("denied-1"), std::string::npos) << logs;
  // A job with no GPUs opens none.
  r = admin.Post("/v1/jobs", json{{"name", "cpu"}, {"tasks", {{{"gpus", 0}, {"cpu", 1}, {"command", {"sh", "-c", probe}}}}}}.dump(),
                 "application/json");
  ASSERT_EQ(r->status, 201) << r->body;
  const int cpu_only = json::parse(r->body)["id"];
  EXPECT_EQ(WaitEnded(up, cpu_only)["state"], "succeeded");
  const std::string cpu_logs = Logs(up, cpu_only);
  EXPECT_NE(cpu_logs.find("denied-0"), std::string::npos) << cpu_logs;
  EXPECT_NE(cpu_logs.find("denied-1"), std::string::npos) << cpu_logs;
}

// Where no device controller can keep a task off the node's other GPUs (no
// cgroups this agent may use), another account's task that does not hold
// every GPU does not start, saying why; --allow-unisolated-gpus runs it
// anyway. Before, it ran and could open every /dev/nvidiaN.
TEST_F(Trust, WithoutDeviceIsolationAnotherAccountsTaskDoesNotStart) {
  if (geteuid() != 0) GTEST_SKIP() << "an agent that sets its tasks' identities runs as root";
  const std::string dev = tmp.path() + "/dev";
  std::filesystem::create_directories(dev);
  ASSERT_EQ(mknod((dev + "/nvidia0").c_str(), S_IFCHR | 0666, makedev(1, 7)), 0) << std::strerror(errno);
  ASSERT_EQ(mknod((dev + "/nvidia1").c_str(), S_IFCHR | 0666, makedev(1, 8)), 0) << std::strerror(errno);
  const std::string config = Write("cluster.yaml", "accounts: [{user: alice, uid: 65534, gid: 65534}, "
                                                   "{user: bob, uid: 60001, gid: 60001}]\n");
  RotaProcess server("server", tmp.path() + "/data", {"--config", config});
  auto r = server.Admin().Post("/v1/tokens", json{{"user", "w0"}, {"role", "agent"}, {"node", "w0"}}.dump(),
                               "application/json");
  ASSERT_EQ(r->status, 201);
  const std::string token_file = tmp.path() + "/w0.token";
  std::ofstream(token_file) << json::parse(r->body)["token"].get<std::string>() << "\n";
  auto run = [&](const std::string& user, std::vector<std::string> extra) {
    std::vector<std::string> argv = {RotaBinary(), "agent", "--server", server.url(), "--token-file", token_file,
                                     "--name", "w0", "--gpus", "2xH100:80Gi", "--logs-dir", tmp.path() + "/agent-logs",
                                     "--heartbeat-ms", "200", "--device-dir", dev, "--cgroup-root", "none"};
    argv.insert(argv.end(), extra.begin(), extra.end());
    const pid_t agent = SpawnLogged(argv, tmp.path() + "/agent-" + user + ".log");
    EXPECT_GT(agent, 0);
    auto ended = RunToEnd(server, user, json{{"name", "j"}, {"tasks", {{{"gpus", 1}, {"command", {"sh", "-c", "echo ran"}}}}}});
    kill(agent, SIGTERM);
    waitpid(agent, nullptr, 0);
    return ended;
  };
  const auto [refused, refused_log] = run("alice", {});
  EXPECT_EQ(refused["state"], "failed") << refused.dump();
  EXPECT_NE(refused.value("end_reason", "").find("this node cannot keep it off the GPUs it was not given"), std::string::npos)
      << refused.dump();
  EXPECT_EQ(refused_log.find("ran"), std::string::npos) << refused_log;
  const auto [allowed, allowed_log] = run("bob", {"--allow-unisolated-gpus"});
  EXPECT_EQ(allowed["state"], "succeeded") << allowed.dump();
  EXPECT_NE(allowed_log.find("ran"), std::string::npos) << allowed_log;
}

// A task's cgroup holds it to --task-pids-max processes and threads: a fork
// bomb takes down its own task, not the node (a user's processes were held
// only by their account's RLIMIT_NPROC, 96,367 here).
TEST_F(Trust, ATaskHoldsNoMoreProcessesThanTheAgentAllows) {
  if (access("/sys/fs/cgroup/pids", W_OK) != 0 && access("/sys/fs/cgroup/cgroup.controllers", R_OK) != 0) {
    GTEST_SKIP() << "no pids controller here";
  }
  RotaProcess up("up", tmp.path() + "/data", {"--gpus", "2xH100:80Gi", "--name", "local", "--task-pids-max", "32"});
  auto admin = up.Admin();  // (the agent's groups are root's alone to read: the admin's task, as root, reads its own)
  // Its pids.max (v1: the pids hierarchy; v2: its one group), then 100 sleeps at once.
  const std::string probe = "p=$(grep -E '^[0-9]+:pids:|^0::' /proc/self/cgroup | head -1 | cut -d: -f3); "
                            "echo max=$(cat /sys/fs/cgroup/pids$p/pids.max 2>/dev/null || cat /sys/fs/cgroup$p/pids.max); "
                            "n=0; for i in $(seq 100); do sleep 3 & n=$((n+1)); done; echo started=$n";
  auto r = admin.Post("/v1/jobs", json{{"name", "forks"}, {"tasks", {{{"cpu", 1}, {"command", {"sh", "-c", probe}}}}}}.dump(),
                      "application/json");
  ASSERT_EQ(r->status, 201) << r->body;
  const int id = json::parse(r->body)["id"];
  const json ended = WaitEnded(up, id);
  const std::string logs = Logs(up, id);
  EXPECT_NE(logs.find("max=32\n"), std::string::npos) << logs;
  EXPECT_EQ(logs.find("started=100"), std::string::npos) << "100 processes started past a limit of 32: " << logs;
  EXPECT_EQ(ended["state"], "failed") << ended.dump();  // (the shell could not fork, and said so)
}

// A task's log is its own file, and the kernel lets a file's owner take a
// lease on it. A task that did, and ignored the lease's break signal, held
// the root agent in its next open of the log (to ship a piece) for the
// kernel's lease-break time, 45 s, with the node's lock held: no task of the
// node started or stopped, and every task's fence ran out. The agent opens
// a task's files without waiting (O_NONBLOCK): that piece waits, the node
// goes on.
TEST_F(Trust, ALeaseATaskTakesOnItsLogDoesNotStallTheAgent) {
  const std::string config = Write("cluster.yaml", "accounts: [{user: alice, uid: 65534, gid: 65534}]\n");
  RotaProcess server("server", tmp.path() + "/data", {"--config", config});
  RemoteAgent agent(server, tmp.path(), "2xH100:80Gi", 200);
  auto alice = server.Http(UserToken(server, "alice"));
  // The lease on its stdout (the log), then a checkpoint: reported at once,
  // by a report that ships the log's next piece.
  const std::string lease =
      "import fcntl, os, signal, time\n"
      "signal.signal(signal.SIGIO, signal.SIG_IGN)\n"
      "fcntl.fcntl(1, fcntl.F_SETLEASE, fcntl.F_WRLCK)\n"
      "print('lease held', flush=True)\n"
      "open(os.environ['ROTA_CHECKPOINT_FILE'], 'w').write('/ckpt/leased')\n"
      "time.sleep(300)\n";
  auto r = alice.Post("/v1/jobs", json{{"name", "lease"}, {"tasks", {{{"gpus", 1}, {"command", {"python3", "-c", lease}}}}}}.dump(),
                 "application/json");
  ASSERT_EQ(r->status, 201) << r->body;
  const int holder = json::parse(r->body)["id"];
  json j;
  for (int i = 0; i < 300; ++i) {  // (15 s: the report is due within a second)
    j = json::parse(server.Admin().Get("/v1/jobs/" + std::to_string(holder))->body);
    const std::string state = j.value("state", "");
    if (j.contains("last_checkpoint") || (state != "running" && state != "pending")) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_TRUE(j.contains("last_checkpoint")) << "the checkpoint report waited on the task's lease: " << j.dump() << "\n"
                                             << Logs(server, holder);
  // The node goes on: another task starts and ends while the lease is held.
  r = alice.Post("/v1/jobs", json{{"name", "next"}, {"tasks", {{{"gpus", 1}, {"command", {"true"}}}}}}.dump(),
                 "application/json");
  ASSERT_EQ(r->status, 201) << r->body;
  const json other = WaitEnded(server, json::parse(r->body)["id"]);
  EXPECT_EQ(other["state"], "succeeded") << other.dump();
  j = json::parse(server.Admin().Get("/v1/jobs/" + std::to_string(holder))->body);
  EXPECT_EQ(j["state"], "running") << "the lease was not taken: " << j.dump() << "\n" << Logs(server, holder);
  // Once the task ends (and with it the lease) its log ships whole.
  server.Admin().Post("/v1/jobs/" + std::to_string(holder) + "/cancel", "{}", "application/json");
  WaitEnded(server, holder);
  std::string logs;
  for (int i = 0; i < 100 && logs.find("lease held") == std::string::npos; ++i) {
    logs = Logs(server, holder);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_NE(logs.find("lease held"), std::string::npos) << logs;
}

// A job id names a directory on the node for good, but a server installed
// afresh (a new data directory, the same agents) numbers its jobs from 1
// again: its job 1, another user's, got the old job 1's work directory
// (given to its account) and appended to its log. The agent moves a job
// directory that holds another account's files aside first.
TEST_F(Trust, AJobIdUsedAgainByAFreshServerGetsNoneOfTheEarlierJobsFiles) {
  const std::string config = Write("cluster.yaml", "accounts: [{user: alice, uid: 65534, gid: 65534}, "
                                                   "{user: bob, uid: 60001, gid: 60001}]\n");
  const std::string logs = tmp.path() + "/agent-logs";
  // One server, its agent, and a job of `user` (the first: id 1) to its end.
  auto run = [&](const std::string& data, const std::string& user, const std::string& script) {
    RotaProcess server("server", data, {"--config", config});
    auto r = server.Admin().Post("/v1/tokens", json{{"user", "w0"}, {"role", "agent"}, {"node", "w0"}}.dump(),
                                 "application/json");
    EXPECT_EQ(r->status, 201);
    const std::string token_file = tmp.path() + "/w0.token";
    std::ofstream(token_file) << json::parse(r->body)["token"].get<std::string>() << "\n";
    const pid_t agent = SpawnLogged({RotaBinary(), "agent", "--server", server.url(), "--token-file", token_file,
                                     "--name", "w0", "--gpus", "1xH100:80Gi", "--logs-dir", logs, "--heartbeat-ms", "200"},
                                    tmp.path() + "/agent-" + user + ".log");
    EXPECT_GT(agent, 0);
    auto [ended, log] = RunToEnd(server, user, json{{"name", "j"}, {"tasks", {{{"gpus", 1}, {"command", {"sh", "-c", script}}}}}});
    EXPECT_EQ(ended["id"], 1);
    kill(agent, SIGTERM);
    waitpid(agent, nullptr, 0);
    return std::make_pair(ended, log);
  };
  auto [first, first_log] = run(tmp.path() + "/data-1", "alice", "echo alice-secret > secret; echo alice-was-here");
  EXPECT_EQ(first["state"], "succeeded") << first.dump();
  ASSERT_NE(first_log.find("alice-was-here"), std::string::npos) << first_log;
  auto [second, second_log] =
      run(tmp.path() + "/data-2", "bob", "cat secret 2>/dev/null || echo no-secret; cat ../main-0.log 2>/dev/null; echo bob-ran");
  EXPECT_EQ(second["state"], "succeeded") << second.dump();
  EXPECT_NE(second_log.find("bob-ran"), std::string::npos) << second_log;
  EXPECT_NE(second_log.find("no-secret"), std::string::npos) << second_log;
  EXPECT_EQ(second_log.find("alice"), std::string::npos) << "the earlier job's files reached the new one's user: " << second_log;
}

TEST_F(Trust, MountsAndRootfsOnlyFromTheAdminsPrefixes) {
  const std::string datasets = tmp.path() + "/datasets";
  std::filesystem::create_directories(datasets + "/c4");
  const std::string config = Write("cluster.yaml", "node_groups: []\naccounts: [{user: alice, uid: 65534}]\n"
                                                   "allowed_mounts: [{prefix: " + datasets + "}]\n");
  RotaProcess up("up", tmp.path() + "/data", {"--gpus", "2xH100:80Gi", "--name", "local", "--config", config});
  auto alice = up.Http(UserToken(up, "alice"));
  struct Case {
    std::string spec;
    int status;
    std::string says;
  };
  const std::string task = R"("tasks": [{"gpus": 1, "command": ["true"]}])";
  const std::vector<Case> cases = {
      {R"({"name": "a", "mounts": [{"source": "/", "target": "/host"}], )" + task + "}", 403, "mounts[0].source: '/' is not under an allowed prefix"},
      {R"({"name": "a", "mounts": [{"source": ")" + datasets + R"(/../../etc", "target": "/x", "read_only": true}], )" + task + "}", 403, "is not under an allowed prefix"},
      {R"({"name": "a", "mounts": [{"source": ")" + datasets + R"(/c4", "target": "/data"}], )" + task + "}", 403, "may only be mounted read-only"},
      {R"({"name": "a", "tasks": [{"gpus": 1, "rootfs": "/", "command": ["true"]}]})", 403, "tasks[0].rootfs: '/' is not under an allowed prefix"},
      // (a NUL: "/\0/../DATASETS/c4" reads as DATASETS/c4 to the prefix check and as "/" to the kernel)
      {R"({"name": "a", "mounts": [{"source": "/\u0000/..)" + datasets + R"(/c4", "target": "/data", "read_only": true}], )" + task + "}",
       400, "mounts[0].source: must not hold control characters"},
      {R"({"name": "a", "mounts": [{"source": ")" + datasets + R"(/c4", "target": "/data", "read_only": true}], )" + task + "}", 201, ""},
  };
  for (const Case& c : cases) {
    auto r = alice.Post("/v1/jobs", c.spec, "application/json");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, c.status) << c.spec << "\n" << r->body;
    if (!c.says.empty()) {
      EXPECT_NE(r->body.find(c.says), std::string::npos) << r->body;
    }
  }
  // Refusals changed nothing: only the allowed job exists.
  auto jobs = json::parse(up.Admin().Get("/v1/jobs?all=true")->body)["jobs"];
  EXPECT_EQ(jobs.size(), 1u) << jobs.dump();
  // The admin may mount what it likes.
  auto r = up.Admin().Post("/v1/jobs", cases[0].spec, "application/json");
  EXPECT_EQ(r->status, 201) << r->body;
}

}  // namespace
}  // namespace rota::testing

namespace rota::testing {
namespace {

// A data directory on a 4 MiB tmpfs of its own, unmounted at the end.
class SmallDisk : public ::testing::Test {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "mounting a tmpfs needs root";
    mnt = tmp.path() + "/disk";
    std::filesystem::create_directories(mnt);
    if (mount("tmpfs", mnt.c_str(), "tmpfs", 0, "size=4m") != 0) GTEST_SKIP() << "cannot mount a tmpfs here";
    mounted = true;
    // A declared node, so that jobs are accepted with no agent running.
    config = tmp.path() + "/cluster.yaml";
    std::ofstream(config) << "node_groups: [{name: n, count: 1, gpus: 1, gpu_model: H100, gpu_memory: 80Gi, cpu: 8, memory: 16Gi}]\n";
  }
  void TearDown() override {
    if (mounted) umount2(mnt.c_str(), MNT_DETACH);
  }
  // Fills the disk to the brim.
  void Fill() {
    std::ofstream fill(mnt + "/fill", std::ios::binary);
    std::string chunk(64 * 1024, 'x');
    while (fill.write(chunk.data(), static_cast<std::streamsize>(chunk.size()))) {
    }
    std::string byte(1, 'x');
    while (fill.write(byte.data(), 1)) fill.flush();
  }
  TempDir tmp;
  std::string mnt, config;
  bool mounted = false;
};

TEST_F(SmallDisk, AFullDiskRefusesWritesWith507AndKeepsServingThenResumes) {
  RotaProcess server("server", mnt + "/data", {"--config", config});
  auto admin = server.Admin();
  std::vector<int> acknowledged;
  auto submit = [&](int pad) {
    const std::string job = json{{"name", "j"}, {"tasks", {{{"gpus", 0}, {"cpu", 1}, {"command", {"true"}},
                                                            {"env", {{"PAD", std::string(static_cast<size_t>(pad), 'p')}}}}}}}
                                .dump();
    auto r = admin.Post("/v1/jobs", job, "application/json");
    if (r && r->status == 201) acknowledged.push_back(json::parse(r->body)["id"]);
    return r;
  };
  for (int i = 0; i < 5; ++i) ASSERT_EQ(submit(100)->status, 201);
  Fill();
  // Writes are refused with the reason, over and over, and the server stays up.
  int refused = 0;
  for (int i = 0; i < 20; ++i) {
    auto r = submit(64 * 1024);
    ASSERT_TRUE(r) << "the server went away on a full disk:\n" << ReadAll(server.log());
    if (r->status == 507) {
      ++refused;
      EXPECT_NE(r->body.find("the store cannot write"), std::string::npos) << r->body;
    }
  }
  EXPECT_GT(refused, 0) << "the disk never filled";
  // Reads work; health and metrics say the store is degraded.
  auto jobs = admin.Get("/v1/jobs?all=true");
  ASSERT_TRUE(jobs);
  EXPECT_EQ(jobs->status, 200);
  EXPECT_EQ(json::parse(jobs->body)["jobs"].size(), acknowledged.size());
  auto health = admin.Get("/healthz");
  ASSERT_TRUE(health);
  EXPECT_NE(health->body.find("degraded: store refuses writes"), std::string::npos) << health->body;
  EXPECT_NE(admin.Get("/metrics")->body.find("rota_store_writable 0"), std::string::npos);
  // Space returns: writes resume, health is ok again.
  std::filesystem::remove(mnt + "/fill");
  ASSERT_EQ(submit(100)->status, 201);
  EXPECT_EQ(admin.Get("/healthz")->body, "ok\n");
  // Every acknowledged job survives kill -9, and only those.
  server.Kill(SIGKILL);
  server.Restart();
  auto after = json::parse(server.Admin().Get("/v1/jobs?all=true")->body)["jobs"];
  std::vector<int> ids;
  for (const auto& j : after) ids.push_back(j["id"]);
  std::sort(ids.begin(), ids.end());
  EXPECT_EQ(ids, acknowledged);
}

TEST_F(SmallDisk, AServerRestartedOnAFullDiskServesReads) {
  RotaProcess server("server", mnt + "/data", {"--config", config});
  ASSERT_EQ(server.Admin().Post("/v1/jobs", R"({"name": "a", "tasks": [{"gpus": 0, "cpu": 1, "command": ["true"]}]})",
                                "application/json")->status,
            201);
  server.Kill(SIGKILL);
  Fill();
  server.Restart();
  auto jobs = server.Admin().Get("/v1/jobs?all=true");
  ASSERT_TRUE(jobs) << ReadAll(server.log());
  EXPECT_EQ(json::parse(jobs->body)["jobs"].size(), 1u);
}

TEST_F(SmallDisk, AReadOnlyDataDirectoryFailsTheStartWithTheReason) {
  { RotaProcess first("server", mnt + "/data"); }
  ASSERT_EQ(mount(nullptr, mnt.c_str(), nullptr, MS_REMOUNT | MS_RDONLY, nullptr), 0) << std::strerror(errno);
  CommandResult r = RunRota({"server", "--data-dir", mnt + "/data", "--listen", "127.0.0.1:0"}, {}, tmp.path());
  EXPECT_EQ(r.exit_code, 1) << r.out << r.err;
  EXPECT_NE(r.err.find("is not writable: Read-only file system"), std::string::npos) << r.err;
}

TEST(OneServer, ASecondServerOnTheSameDirectoryOrPortExitsAtOnce) {
  TempDir tmp;
  RotaProcess first("server", tmp.path() + "/data");
  CommandResult same_dir = RunRota({"server", "--data-dir", tmp.path() + "/data", "--listen", "127.0.0.1:0"}, {}, tmp.path());
  EXPECT_EQ(same_dir.exit_code, 1);
  EXPECT_NE(same_dir.err.find("is in use by another rota server (pid "), std::string::npos) << same_dir.err;
  const std::string port = first.url().substr(first.url().rfind(':') + 1);
  CommandResult same_port = RunRota({"server", "--data-dir", tmp.path() + "/other", "--listen", "127.0.0.1:" + port}, {},
                                    tmp.path());
  EXPECT_EQ(same_port.exit_code, 1);
  EXPECT_NE(same_port.err.find("cannot listen on 127.0.0.1:" + port), std::string::npos) << same_port.err;
  EXPECT_TRUE(first.Healthy());
}

}  // namespace
}  // namespace rota::testing

namespace rota::testing {
namespace {

TEST(Tokens, ExpireAreListedRevokedAndBoundToOneUser) {
  TempDir tmp;
  RotaProcess server("server", tmp.path() + "/data");
  auto admin = server.Admin();
  auto create = [&](const json& body) { return admin.Post("/v1/tokens", body.dump(), "application/json"); };
  auto r = create({{"user", "alice"}, {"role", "user"}, {"ttl", "1s"}});
  ASSERT_EQ(r->status, 201) << r->body;
  const json short_lived = json::parse(r->body);
  EXPECT_TRUE(short_lived.contains("expires_at"));
  EXPECT_EQ(server.Http(short_lived["token"]).Get("/v1/jobs")->status, 200);
  // A second person called alice does not get alice's identity by accident.
  r = create({{"user", "alice"}, {"role", "user"}});
  EXPECT_EQ(r->status, 409) << r->body;
  EXPECT_NE(r->body.find("'alice' is an existing user"), std::string::npos) << r->body;
  r = create({{"user", "alice"}, {"role", "user"}, {"existing", true}});
  ASSERT_EQ(r->status, 201) << r->body;
  const json lasting = json::parse(r->body);
  EXPECT_EQ(create({{"user", "nobody-yet"}, {"existing", true}})->status, 404);
  EXPECT_EQ(create({{"user", "bob"}, {"ttl", "soon"}})->status, 400);
  // Agents rotate tokens for their node freely.
  EXPECT_EQ(create({{"user", "n-0"}, {"role", "agent"}, {"node", "n-0"}})->status, 201);
  EXPECT_EQ(create({{"user", "n-0"}, {"role", "agent"}, {"node", "n-0"}})->status, 201);
  std::this_thread::sleep_for(std::chrono::milliseconds(1200));
  auto expired = server.Http(short_lived["token"]).Get("/v1/jobs");
  EXPECT_EQ(expired->status, 401);
  EXPECT_NE(expired->body.find("expired at"), std::string::npos) << expired->body;
  // Listed with their state; revocation takes effect at once and survives a restart.
  CommandResult list = RunRota({"token", "list"}, server.ClientEnv(), tmp.path());
  ASSERT_EQ(list.exit_code, 0) << list.err;
  EXPECT_NE(list.out.find(short_lived["id"].get<std::string>()), std::string::npos) << list.out;
  EXPECT_NE(list.out.find("expired"), std::string::npos) << list.out;
  EXPECT_EQ(list.out.find(lasting["token"].get<std::string>()), std::string::npos) << "list shows secrets";
  CommandResult revoke = RunRota({"token", "revoke", lasting["id"]}, server.ClientEnv(), tmp.path());
  EXPECT_EQ(revoke.exit_code, 0) << revoke.err;
  auto revoked = server.Http(lasting["token"]).Get("/v1/jobs");
  EXPECT_EQ(revoked->status, 401);
  EXPECT_NE(revoked->body.find("was revoked"), std::string::npos) << revoked->body;
  EXPECT_EQ(server.Http(server.token()).Post("/v1/tokens/000000000000/revoke", "{}", "application/json")->status, 404);
  server.Kill(SIGKILL);
  server.Restart();
  EXPECT_EQ(server.Http(lasting["token"]).Get("/v1/jobs")->status, 401);
  EXPECT_EQ(server.Http(short_lived["token"]).Get("/v1/jobs")->status, 401);
  // Only admins list or revoke.
  r = server.Admin().Post("/v1/tokens", json{{"user", "carol"}}.dump(), "application/json");
  auto carol = server.Http(json::parse(r->body)["token"]);
  EXPECT_EQ(carol.Get("/v1/tokens")->status, 403);
  EXPECT_EQ(carol.Post("/v1/tokens/" + lasting["id"].get<std::string>() + "/revoke", "{}", "application/json")->status, 403);
}

}  // namespace
}  // namespace rota::testing

namespace rota::testing {
namespace {

class Limits : public ::testing::Test {
 protected:
  std::string Config(const std::string& extra) {
    const std::string path = tmp.path() + "/cluster.yaml";
    // A drained declared node: jobs are accepted and stay pending.
    std::ofstream(path) << "node_groups: [{name: n, count: 1, gpus: 8, gpu_model: H100, gpu_memory: 80Gi, cpu: 8, memory: 16Gi}]\n"
                        << "drained: [n-0]\n"
                        << extra;
    return path;
  }
  static std::string UserToken(RotaProcess& p, const std::string& user) {
    auto r = p.Admin().Post("/v1/tokens", json{{"user", user}}.dump(), "application/json");
    return json::parse(r->body)["token"];
  }
  TempDir tmp;
};

TEST_F(Limits, PendingArrayAndRateLimitsAnswer429NamingTheLimit) {
  RotaProcess server("server", tmp.path() + "/data",
                     {"--config", Config("limits: {max_pending_per_user: 5, max_array: 3}\n"
                                         "queues: [{name: small, max_pending: 2}, {name: big}]\n")});
  auto alice = server.Http(UserToken(server, "alice"));
  auto bob = server.Http(UserToken(server, "bob"));
  const std::string job = R"({"name": "j", "queue": "big", "tasks": [{"gpus": 1, "command": ["true"]}]})";
  auto r = alice.Post("/v1/jobs?count=4", job, "application/json");
  EXPECT_EQ(r->status, 429);
  EXPECT_NE(r->body.find("limits.max_array: 3"), std::string::npos) << r->body;
  EXPECT_EQ(alice.Post("/v1/jobs?count=3", job, "application/json")->status, 201);
  EXPECT_EQ(alice.Post("/v1/jobs?count=2", job, "application/json")->status, 201);
  r = alice.Post("/v1/jobs", job, "application/json");
  EXPECT_EQ(r->status, 429);
  EXPECT_NE(r->body.find("user 'alice' has 5 pending jobs"), std::string::npos) << r->body;
  EXPECT_NE(r->body.find("limits.max_pending_per_user: 5"), std::string::npos) << r->body;
  // Another tenant is not affected; a queue's own limit holds for everyone.
  EXPECT_EQ(bob.Post("/v1/jobs", job, "application/json")->status, 201);
  const std::string small = R"({"name": "s", "queue": "small", "tasks": [{"gpus": 1, "command": ["true"]}]})";
  EXPECT_EQ(bob.Post("/v1/jobs?count=2", small, "application/json")->status, 201);
  r = bob.Post("/v1/jobs", small, "application/json");
  EXPECT_EQ(r->status, 429);
  EXPECT_NE(r->body.find("queue small max_pending: 2"), std::string::npos) << r->body;
  // Refusals changed nothing.
  EXPECT_EQ(json::parse(server.Admin().Get("/v1/jobs?all=true")->body)["jobs"].size(), 8u);
}

// A dry run answers what the submission would, limits included (429
// naming the limit), and takes nothing: not the rate budget, not a
// pending slot.
TEST_F(Limits, ADryRunIsRefusedByTheLimitsAsTheSubmissionWouldBe) {
  RotaProcess server("server", tmp.path() + "/data",
                     {"--config", Config("limits: {max_pending_per_user: 2, max_array: 3, submit_rate: 1}\n")});
  auto alice = server.Http(UserToken(server, "alice"));
  const std::string job = R"({"name": "j", "tasks": [{"gpus": 1, "command": ["true"]}]})";
  auto r = alice.Post("/v1/jobs?dry_run=true&count=4", job, "application/json");
  EXPECT_EQ(r->status, 429);
  EXPECT_NE(r->body.find("limits.max_array: 3"), std::string::npos) << r->body;
  r = alice.Post("/v1/jobs?dry_run=true&count=3", job, "application/json");
  EXPECT_EQ(r->status, 429);  // 3 would pass max_pending_per_user
  EXPECT_NE(r->body.find("limits.max_pending_per_user: 2"), std::string::npos) << r->body;
  for (int i = 0; i < 3; ++i) {  // dry runs take no budget (the burst is 3)
    r = alice.Post("/v1/jobs?dry_run=true&count=2", job, "application/json");
    EXPECT_EQ(r->status, 200) << r->body;
  }
  EXPECT_EQ(alice.Post("/v1/jobs?count=2", job, "application/json")->status, 201);
  r = alice.Post("/v1/jobs?dry_run=true", job, "application/json");
  EXPECT_EQ(r->status, 429);
  EXPECT_NE(r->body.find("user 'alice' has 2 pending jobs"), std::string::npos) << r->body;
  EXPECT_EQ(json::parse(server.Admin().Get("/v1/jobs?all=true")->body)["jobs"].size(), 2u);
}

TEST_F(Limits, ArrayElementsCountAgainstTheSubmissionRate) {
  RotaProcess server("server", tmp.path() + "/data", {"--config", Config("limits: {submit_rate: 1, max_array: 4}\n")});
  auto alice = server.Http(UserToken(server, "alice"));
  const std::string job = R"({"name": "j", "tasks": [{"gpus": 1, "command": ["true"]}]})";
  EXPECT_EQ(alice.Post("/v1/jobs?count=4", job, "application/json")->status, 201);  // the burst: one max_array
  auto r = alice.Post("/v1/jobs?count=2", job, "application/json");
  EXPECT_EQ(r->status, 429);
  EXPECT_NE(r->body.find("limits.submit_rate: 1 jobs/s, array elements count one each"), std::string::npos) << r->body;
  auto bob = server.Http(UserToken(server, "bob"));
  EXPECT_EQ(bob.Post("/v1/jobs", job, "application/json")->status, 201);
}

TEST_F(Limits, HostileBodiesAreRefusedBeforeTheyAreParsed) {
  RotaProcess server("server", tmp.path() + "/data", {"--config", Config("")});
  auto admin = server.Admin();
  auto deep = admin.Post("/v1/jobs", std::string(1 << 20, '['), "application/json");
  ASSERT_TRUE(deep);
  EXPECT_EQ(deep->status, 400);
  EXPECT_NE(deep->body.find("nested deeper than 64 levels"), std::string::npos) << deep->body;
  std::string wide = "[";
  for (int i = 0; i < 200000; ++i) wide += "1,";
  wide += "1]";
  auto many = admin.Post("/v1/jobs", wide, "application/json");
  ASSERT_TRUE(many);
  EXPECT_EQ(many->status, 400);
  EXPECT_NE(many->body.find("more than 50000 values"), std::string::npos) << many->body;
  // A YAML flow sequence nested past the parser's own guard, hidden behind a quote.
  std::string yaml = "name: \"x\ntasks: " + std::string(5000, '[');
  auto hidden = admin.Post("/v1/jobs", yaml, "application/yaml");
  ASSERT_TRUE(hidden);
  EXPECT_EQ(hidden->status, 400) << hidden->body;
  EXPECT_TRUE(server.Healthy());
}

TEST_F(Limits, ShippedLogsAreCappedPerJobAndSaySo) {
  RotaProcess server("server", tmp.path() + "/data", {"--config", Config("limits: {log_cap: 1Mi}\n")});
  auto r = server.Admin().Post("/v1/tokens", json{{"user", "w0"}, {"role", "agent"}, {"node", "w0"}}.dump(),
                               "application/json");
  ASSERT_EQ(r->status, 201);
  const std::string token_file = tmp.path() + "/w0.token";
  std::ofstream(token_file) << json::parse(r->body)["token"].get<std::string>() << "\n";
  const pid_t agent = SpawnLogged({RotaBinary(), "agent", "--server", server.url(), "--token-file", token_file, "--name",
                                   "w0", "--gpus", "1xH100:80Gi", "--logs-dir", tmp.path() + "/agent-logs",
                                   "--heartbeat-ms", "100"},
                                  tmp.path() + "/agent.log");
  ASSERT_GT(agent, 0);
  for (int i = 0; i < 200 && server.Admin().Get("/v1/nodes")->body.find("\"w0\"") == std::string::npos; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(25));
  }
  r = server.Admin().Post("/v1/jobs",
                          R"({"name": "loud", "node_selector": {"hostname": "w0"}, "tasks": [{"gpus": 1, "command": ["sh", "-c", "head -c 3000000 /dev/zero | tr '\\0' x; echo"]}]})",
                          "application/json");
  ASSERT_EQ(r->status, 201) << r->body;
  const int id = json::parse(r->body)["id"];
  std::string logs;
  for (int i = 0; i < 300 && logs.find("log truncated") == std::string::npos; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    logs = server.Admin().Get("/v1/jobs/" + std::to_string(id) + "/logs")->body;
  }
  kill(agent, SIGTERM);
  waitpid(agent, nullptr, 0);
  EXPECT_NE(logs.find("[rota: log truncated: job " + std::to_string(id) + " reached the server's log cap of 1Mi"),
            std::string::npos)
      << logs.substr(logs.size() > 300 ? logs.size() - 300 : 0);
  EXPECT_LE(logs.size(), (1u << 20) + 400u);
  EXPECT_GE(logs.size(), (1u << 20) - 400u * 1024u);
}

// A report ships at most 384 KiB of logs. The files took it in a fixed
// order, each until it was shipped whole, and a task may make its log a
// sparse terabyte at no cost: six such replicas of one job held every
// other job's log on the node back for good. The files take turns now,
// and one past the server's log cap (which the answers carry) ships no more.
TEST_F(Limits, OneJobsLogsDoNotHoldBackTheOthersOnItsNode) {
  RotaProcess server("server", tmp.path() + "/data", {"--config", Config("limits: {log_cap: 1Mi}\n")});
  RemoteAgent agent(server, tmp.path(), "1xH100:80Gi", 100);
  // Six replicas whose logs are a terabyte of zeros each.
  const json sparse_job = {
      {"name", "sparse"},
      {"node_selector", {{"hostname", "w0"}}},
      {"tasks", {{{"replicas", 6},
                  {"cpu", "100m"},
                  {"command", {"python3", "-c", "import os, time\nos.ftruncate(1, 1 << 40)\ntime.sleep(300)\n"}}}}}};
  auto r = server.Admin().Post("/v1/jobs", sparse_job.dump(), "application/json");
  ASSERT_EQ(r->status, 201) << r->body;
  const int sparse = json::parse(r->body)["id"];
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  r = server.Admin().Post("/v1/jobs",
                          json{{"name", "small"},
                               {"node_selector", {{"hostname", "w0"}}},
                               {"tasks", {{{"cpu", "100m"}, {"command", {"sh", "-c", "echo small-was-shipped"}}}}}}
                              .dump(),
                          "application/json");
  ASSERT_EQ(r->status, 201) << r->body;
  const int small = json::parse(r->body)["id"];
  std::string logs;
  for (int i = 0; i < 150 && logs.find("small-was-shipped") == std::string::npos; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    logs = server.Admin().Get("/v1/jobs/" + std::to_string(small) + "/logs")->body;
  }
  EXPECT_NE(logs.find("small-was-shipped"), std::string::npos) << "the small job's log was held back: " << logs;
  const json j = json::parse(server.Admin().Get("/v1/jobs/" + std::to_string(sparse))->body);
  EXPECT_EQ(j["state"], "running") << j.dump();
}

// An agent ships logs only of replicas that ran on its node: another
// node's agent (token w1) cannot write lines into a running elastic job's
// log, nor fill it to its cap and silence it.
TEST_F(Limits, AnAgentCannotWriteIntoTheLogsOfAJobOnAnotherNode) {
  RotaProcess server("server", tmp.path() + "/data", {"--config", Config("limits: {log_cap: 1Mi}\n")});
  auto agent_token = [&](const std::string& node) {
    auto r = server.Admin().Post("/v1/tokens", json{{"user", node}, {"role", "agent"}, {"node", node}}.dump(),
                                 "application/json");
    EXPECT_EQ(r->status, 201) << r->body;
    return json::parse(r->body)["token"].get<std::string>();
  };
  const std::string token_file = tmp.path() + "/w0.token";
  std::ofstream(token_file) << agent_token("w0") << "\n";
  const pid_t agent = SpawnLogged({RotaBinary(), "agent", "--server", server.url(), "--token-file", token_file, "--name",
                                   "w0", "--gpus", "2xH100:80Gi", "--logs-dir", tmp.path() + "/agent-logs",
                                   "--heartbeat-ms", "100"},
                                  tmp.path() + "/agent.log");
  ASSERT_GT(agent, 0);
  for (int i = 0; i < 200 && server.Admin().Get("/v1/nodes")->body.find("\"w0\"") == std::string::npos; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(25));
  }
  auto r = server.Admin().Post("/v1/jobs",
                               R"({"name": "elastic", "node_selector": {"hostname": "w0"}, "elastic": {"min_replicas": 1},
                                   "tasks": [{"name": "w", "replicas": 2, "gpus": 1, "command": ["sh", "-c", "echo genuine; sleep 30"]}]})",
                               "application/json");
  ASSERT_EQ(r->status, 201) << r->body;
  const int id = json::parse(r->body)["id"];
  std::string logs;
  for (int i = 0; i < 200 && logs.find("genuine") == std::string::npos; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    logs = server.Admin().Get("/v1/jobs/" + std::to_string(id) + "/logs")->body;
  }
  ASSERT_NE(logs.find("genuine"), std::string::npos) << logs;
  // Node w1 registers (its own token) and ships a "log" of job's replica 0.
  auto w1 = server.Http(agent_token("w1"));
  r = w1.Post("/v1/agents/register", R"({"node": {"name": "w1", "gpu_model": "H100", "gpus": 1, "gpu_memory": "80Gi"}})",
              "application/json");
  ASSERT_EQ(r->status, 200) << r->body;
  r = w1.Post("/v1/agents/heartbeat",
              json{{"node", "w1"},
                   {"tasks", {{{"job", id}, {"task", 0}, {"replica", 0}, {"attempt", 0}, {"log_b64", "Rk9SR0VEIGJ5IHcxCg=="},  // "FORGED by w1\n"
                               {"log_offset", 0}}}}}
                  .dump(),
              "application/json");
  ASSERT_EQ(r->status, 200) << r->body;
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  logs = server.Admin().Get("/v1/jobs/" + std::to_string(id) + "/logs")->body;
  kill(agent, SIGTERM);
  waitpid(agent, nullptr, 0);
  EXPECT_EQ(logs.find("FORGED"), std::string::npos) << logs;
}

}  // namespace
}  // namespace rota::testing

namespace rota::testing {
namespace {

// A TCP connection to the server that sends `prefix` and then nothing.
int Connect(int port, const std::string& prefix) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return -1;
  }
  if (!prefix.empty()) {
    [[maybe_unused]] ssize_t n = send(fd, prefix.data(), prefix.size(), MSG_NOSIGNAL);
  }
  return fd;
}

class Sockets : public AgentCluster {};

TEST_F(Sockets, IdleAndSlowHeaderSocketsDoNotStallTheApiOrLoseNodes) {
  ASSERT_EQ(server_->Admin().Post("/v1/jobs", "name: g\ntasks: [{name: w, replicas: 3, gpus: 2, command: [sleep, \"3700\"]}]\n",
                                  "application/yaml")->status,
            201);
  WaitJob(1, [](const json& x) { return x["state"] == "running"; });
  const int port = std::stoi(server_->url().substr(server_->url().rfind(':') + 1));
  std::vector<int> idle, slow;
  for (int i = 0; i < 1000; ++i) idle.push_back(Connect(port, ""));
  for (int i = 0; i < 200; ++i) slow.push_back(Connect(port, "GET /healthz HTTP/1.1\r\nHost: x\r\n"));
  EXPECT_EQ(std::count(idle.begin(), idle.end(), -1), 0);
  EXPECT_EQ(std::count(slow.begin(), slow.end(), -1), 0);
  // Held for 8 s (four node timeouts), the slow ones dribbling a header byte
  // every half second, while agents heartbeat and /healthz is measured.
  std::vector<double> ms;
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(8);
  auto next_dribble = std::chrono::steady_clock::now();
  httplib::Client health("127.0.0.1", port);
  health.set_keep_alive(false);
  while (std::chrono::steady_clock::now() < until) {
    if (std::chrono::steady_clock::now() >= next_dribble) {
      for (int fd : slow) {
        if (fd >= 0) [[maybe_unused]] ssize_t n = send(fd, "X", 1, MSG_NOSIGNAL);
      }
      next_dribble += std::chrono::milliseconds(500);
    }
    const auto t0 = std::chrono::steady_clock::now();
    auto r = health.Get("/healthz");
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    EXPECT_TRUE(r && r->status == 200);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  std::sort(ms.begin(), ms.end());
  const double p99 = ms[ms.size() * 99 / 100];
  std::printf("healthz under 1000 idle + 200 slow-header sockets: n=%zu p50=%.2f ms p99=%.2f ms max=%.2f ms\n",
              ms.size(), ms[ms.size() / 2], p99, ms.back());
  EXPECT_LT(p99, 50.0);
  for (int fd : idle) close(fd);
  for (int fd : slow) close(fd);
  // No node was declared lost, no gang restarted.
  const json nodes = json::parse(server_->Admin().Get("/v1/nodes")->body);
  for (const auto& n : nodes["nodes"]) EXPECT_EQ(n["state"], "ready") << n.dump();
  const json j = Job(1);
  EXPECT_EQ(j["state"], "running");
  EXPECT_EQ(j["restarts"], 0) << j.dump();
}

// Agents send their reports (here every 200 ms) on a kept-alive connection:
// three agents' 2 s of reports, 30 of them, take a few new connections at
// most, not one each (each a TCP, and with TLS a handshake, for the server).
TEST_F(Sockets, AgentsReportOnKeptAliveConnections) {
  auto accepted = [&] {
    httplib::Client admin = server_->Admin();
    admin.set_keep_alive(true);
    const auto r = admin.Get("/metrics");
    const std::string key = "\nrota_http_connections_accepted_total ";
    const size_t at = r ? r->body.find(key) : std::string::npos;
    return at == std::string::npos ? -1.0 : std::stod(r->body.substr(at + key.size()));
  };
  const double before = accepted();
  ASSERT_GE(before, 0);
  std::this_thread::sleep_for(std::chrono::seconds(2));
  const double after = accepted();
  std::printf("connections accepted in 2 s of reports from 3 agents: %.0f\n", after - before - 1);
  // (The second scrape's own, and a few for reports that timed out on a
  // loaded machine: a new connection each way would be 30.)
  EXPECT_LE(after - before, 1 + 12);
}

// One node's token opening watch after watch holds at most four: each
// one past that closes the oldest (a reconnecting agent replaces its dead
// watch the same way).
TEST_F(Sockets, WatchesPerNodeAreCappedOldestClosedFirst) {
  auto admin = server_->Admin();
  ASSERT_EQ(admin.Post("/v1/agents/register",
                       R"({"node": {"name": "w0", "gpus": 1, "gpu_model": "H100", "gpu_memory": "80Gi", "cpu": "8",
                          "memory": "64Gi"}, "simulated": true})",
                       "application/json")->status,
            200);
  const int port = std::stoi(server_->url().substr(server_->url().rfind(':') + 1));
  const std::string request = "GET /v1/agents/watch?node=w0 HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer " +
                              server_->token() + "\r\n\r\n";
  // Reads until the first event line, so that watch i is open before i+1.
  auto open_watch = [&] {
    const int fd = Connect(port, request);
    std::string got;
    char buf[4096];
    timeval tv{5, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    while (got.find("\"tasks\"") == std::string::npos) {
      const ssize_t n = recv(fd, buf, sizeof(buf), 0);
      if (n <= 0) break;
      got.append(buf, static_cast<size_t>(n));
    }
    EXPECT_NE(got.find("200 OK"), std::string::npos) << got;
    return fd;
  };
  std::vector<int> fds;
  for (int i = 0; i < 6; ++i) fds.push_back(open_watch());
  // Closed by the server: the first two (EOF, after a last chunk); open: the last four.
  auto closed = [](int fd) {
    char buf[4096];
    timeval tv{0, 300'000};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    while (true) {
      const ssize_t n = recv(fd, buf, sizeof(buf), 0);
      if (n == 0) return true;   // EOF
      if (n < 0) return errno != EAGAIN && errno != EWOULDBLOCK;  // reset: closed too; timeout: open
    }
  };
  for (int i = 0; i < 6; ++i) EXPECT_EQ(closed(fds[static_cast<size_t>(i)]), i < 2) << "watch " << i;
  for (int fd : fds) close(fd);
}

}  // namespace
}  // namespace rota::testing

namespace rota::testing {
namespace {

// `rota up` run as nobody (uid 65534) on a data directory under `dir`
// (which must be 0711): its pid, port (0 if it did not come up), admin token.
struct UpAsNobody {
  explicit UpAsNobody(const std::string& dir) : log(dir + "/up.log") {
    const std::string data = dir + "/data";
    std::filesystem::create_directories(data);
    if (chown(data.c_str(), 65534, 65534) != 0) return;
    pid = Spawn({"/usr/bin/setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", RotaBinary(), "up", "--data-dir",
                 data, "--listen", "127.0.0.1:0", "--gpus", "2xH100:80Gi", "--name", "local"},
                log, log, /*append=*/false);
    for (int i = 0; i < 500 && pid > 0 && port == 0; ++i) {
      const std::string text = ReadAll(log);
      const size_t at = text.rfind("serving http://127.0.0.1:");
      if (at != std::string::npos) port = std::stoi(text.substr(at + 25));
      else std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    token = ReadAll(data + "/admin.token");
    while (!token.empty() && token.back() == '\n') token.pop_back();
  }
  std::string log;
  pid_t pid = 0;
  int port = 0;
  std::string token;
};

// `rota up` started by a user who is not root: the admin token is that
// user's, tasks run as that user, and it serves without cgroups.
TEST(NotRoot, RotaUpAsAnOrdinaryUserRunsTasksAsThatUser) {
  if (geteuid() != 0 || access("/usr/bin/setpriv", X_OK) != 0) GTEST_SKIP() << "needs root and setpriv to become nobody";
  TempDir tmp;
  chmod(tmp.path().c_str(), 0711);
  UpAsNobody up(tmp.path());
  ASSERT_GT(up.port, 0) << ReadAll(up.log);
  httplib::Client c("127.0.0.1", up.port);
  c.set_bearer_token_auth(up.token);
  auto r = c.Post("/v1/jobs", R"J({"name": "me", "tasks": [{"gpus": 1, "command": ["sh", "-c", "echo as $(id -un) $(id -u)"]}]})J",
                  "application/json");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 201) << r->body;
  std::string logs;
  for (int i = 0; i < 200 && logs.find("as ") == std::string::npos; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    logs = c.Get("/v1/jobs/1/logs")->body;
  }
  EXPECT_NE(logs.find("as nobody 65534"), std::string::npos) << logs << ReadAll(up.log);
  const json job = json::parse(c.Get("/v1/jobs/1")->body);
  EXPECT_EQ(job["user"], "nobody") << job.dump();
  kill(up.pid, SIGTERM);
  waitpid(up.pid, nullptr, 0);
}

// The same user's job naming a rootfs runs in a rootless container: root
// inside a user namespace is that user outside and nothing else; the
// runtime's state is in the agent's own directory, not root's /run.
TEST(NotRoot, RotaUpAsAnOrdinaryUserRunsContainersRootless) {
  if (geteuid() != 0 || access("/usr/bin/setpriv", X_OK) != 0) GTEST_SKIP() << "needs root and setpriv to become nobody";
  if (access("/bin/busybox", X_OK) != 0) GTEST_SKIP() << "no static busybox to build a rootfs from (busybox-static)";
  if (access("/usr/sbin/runc", X_OK) != 0 && access("/usr/bin/runc", X_OK) != 0 && access("/usr/bin/crun", X_OK) != 0) {
    GTEST_SKIP() << "neither runc nor crun is installed";
  }
  TempDir tmp;
  chmod(tmp.path().c_str(), 0711);
  const std::string rootfs = tmp.path() + "/image/rootfs";
  std::filesystem::create_directories(rootfs + "/bin");
  std::filesystem::copy_file("/bin/busybox", rootfs + "/bin/busybox");
  for (const char* c : {"sh", "cat", "id"}) std::filesystem::create_symlink("busybox", rootfs + "/bin/" + c);
  // As an image has them: a rootless runtime cannot make a mount point in a
  // root filesystem it does not own.
  for (const char* d : {"proc", "dev", "sys", "rota"}) std::filesystem::create_directories(rootfs + "/" + d);
  UpAsNobody up(tmp.path());
  ASSERT_GT(up.port, 0) << ReadAll(up.log);
  httplib::Client c("127.0.0.1", up.port);
  c.set_bearer_token_auth(up.token);
  const json spec = {{"name", "boxed"},
                     {"tasks", {{{"gpus", 1}, {"memory", "64Mi"}, {"rootfs", tmp.path() + "/image"},
                                 {"command", {"sh", "-c", "echo \"inside=$(id -u) pid1=$(cat /proc/1/comm)\"; "
                                                          "echo map $(cat /proc/self/uid_map)"}}}}}};
  auto r = c.Post("/v1/jobs", spec.dump(), "application/json");
  ASSERT_TRUE(r);
  ASSERT_EQ(r->status, 201) << r->body;
  json job;
  for (int i = 0; i < 200; ++i) {
    job = json::parse(c.Get("/v1/jobs/1")->body);
    if (job["state"] == "succeeded" || job["state"] == "failed") break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  const std::string logs = c.Get("/v1/jobs/1/logs")->body;
  EXPECT_EQ(job["state"], "succeeded") << job.dump() << "\n" << logs << ReadAll(up.log);
  EXPECT_NE(logs.find("inside=0 pid1=sh"), std::string::npos) << logs;
  EXPECT_NE(logs.find("map 0 65534 1"), std::string::npos) << logs;  // root inside is nobody outside, alone
  EXPECT_NE(logs.find("running without limits"), std::string::npos) << logs;  // it asked for 64Mi: said, not silent
  kill(up.pid, SIGTERM);
  waitpid(up.pid, nullptr, 0);
}

}  // namespace
}  // namespace rota::testing
