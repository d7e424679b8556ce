// Test harness for integration tests against the real `rota` binary: starts
// `rota up` / `rota server` on a free loopback port with a fresh data
// directory, runs CLI commands, and talks HTTP to the server.
#pragma once

#include <gtest/gtest.h>
#include <httplib.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace rota::testing {

inline std::string RotaBinary() {
  const char* b = std::getenv("ROTA_BINARY");
  return b ? b : ROTA_BINARY_PATH;
}

inline std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The last `n` bytes of `s` (a log's end, for a failure's message).
inline std::string Tail(const std::string& s, size_t n) { return s.size() > n ? s.substr(s.size() - n) : s; }

// Calls `fn(pid, "/proc/PID")` for each live (not zombie) process whose
// command line is `argv` (its arguments joined by NULs), e.g. {"sleep", "77"}.
inline void ForEachLiveProcess(const std::vector<std::string>& argv,
                               const std::function<void(pid_t, const std::string&)>& fn) {
  std::string want;
  for (const std::string& a : argv) want += a + '\0';
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/proc", ec)) {
    const std::string name = e.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    if (ReadAll(e.path().string() + "/cmdline") != want) continue;
    const std::string stat = ReadAll(e.path().string() + "/stat");
    const size_t paren = stat.rfind(')');
    if (paren == std::string::npos || paren + 2 >= stat.size() || stat[paren + 2] == 'Z') continue;
    fn(std::stoi(name), e.path().string());
  }
}

struct CommandResult {
  int exit_code = -1;
  std::string out;
  std::string err;
};

class TempDir {
 public:
  TempDir() {
    char tmpl[] = "/tmp/rota-it-XXXXXX";
    path_ = mkdtemp(tmpl);
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// Starts `args` (argv[0] a path) with stdout to `out` and stderr to `err`
// (appended, or truncated first), in `envp` (null: this process's); the pid,
// or 0 if it could not start.
inline pid_t Spawn(std::vector<std::string> args, const std::string& out, const std::string& err, bool append,
                   char** envp = nullptr) {
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  const int mode = O_WRONLY | O_CREAT | (append ? O_APPEND : O_TRUNC);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, out.c_str(), mode, 0644);
  if (err == out) {
    posix_spawn_file_actions_adddup2(&fa, 1, 2);
  } else {
    posix_spawn_file_actions_addopen(&fa, 2, err.c_str(), mode, 0644);
  }
  pid_t pid = 0;
  if (posix_spawn(&pid, argv[0], &fa, nullptr, argv.data(), envp != nullptr ? envp : environ) != 0) pid = 0;
  posix_spawn_file_actions_destroy(&fa);
  return pid;
}

// Starts `args` with stdout and stderr appended to `log`.
inline pid_t SpawnLogged(std::vector<std::string> args, const std::string& log) {
  return Spawn(std::move(args), log, log, /*append=*/true);
}

// Runs `argv` to completion with extra environment (and none of this
// process's ROTA_ variables), its output in files under `scratch`.
inline CommandResult RunWithEnv(std::vector<std::string> argv_s, const std::vector<std::string>& env,
                                const std::string& scratch) {
  static int counter = 0;
  const std::string out = scratch + "/cmd" + std::to_string(++counter) + ".out";
  const std::string err = out + ".err";
  std::vector<std::string> env_s = env;
  for (char** e = environ; *e; ++e) {
    std::string kv = *e;
    if (kv.rfind("ROTA_", 0) != 0) env_s.push_back(kv);
  }
  std::vector<char*> envp;
  for (auto& e : env_s) envp.push_back(e.data());
  envp.push_back(nullptr);
  CommandResult r;
  const pid_t pid = Spawn(argv_s, out, err, /*append=*/false, envp.data());
  if (pid == 0) return r;
  int status = 0;
  waitpid(pid, &status, 0);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  r.out = ReadAll(out);
  r.err = ReadAll(err);
  return r;
}

// Runs `rota args...` so.
inline CommandResult RunRota(const std::vector<std::string>& args, const std::vector<std::string>& env,
                             const std::string& scratch) {
  std::vector<std::string> argv{RotaBinary()};
  argv.insert(argv.end(), args.begin(), args.end());
  return RunWithEnv(std::move(argv), env, scratch);
}

// Runs `sh -c command` (a pipeline around the rota binary) so.
inline CommandResult RunShell(const std::string& command, const std::vector<std::string>& env,
                              const std::string& scratch) {
  return RunWithEnv({"/bin/sh", "-c", command}, env, scratch);
}

// A running `rota up` or `rota server`.
class RotaProcess {
 public:
  RotaProcess(const std::string& mode, const std::string& data_dir, std::vector<std::string> extra = {})
      : data_dir_(data_dir), log_(data_dir + ".log") {
    Start(mode, std::move(extra));
  }
  ~RotaProcess() { Kill(SIGTERM); }

  void Start(const std::string& mode, std::vector<std::string> extra) {
    mode_ = mode;
    extra_ = extra;
    std::vector<std::string> args{RotaBinary(), mode, "--data-dir", data_dir_, "--listen",
                                  port_ ? "127.0.0.1:" + std::to_string(port_) : "127.0.0.1:0"};
    args.insert(args.end(), extra.begin(), extra.end());
    // (The log is appended to: only this start's lines count.)
    const size_t logged = ReadAll(log_).size();
    pid_ = SpawnLogged(args, log_);
    ASSERT_GT(pid_, 0) << "cannot start " << args[0];
    // Wait for "serving http://127.0.0.1:PORT".
    bool announced = false;
    for (int i = 0; i < 500; ++i) {
      const std::string all = ReadAll(log_);
      const std::string log = all.size() > logged ? all.substr(logged) : "";
      const size_t at = log.rfind("serving http://127.0.0.1:");
      if (at != std::string::npos) {
        announced = true;
        port_ = std::stoi(log.substr(at + 25));
        if (Healthy()) break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    ASSERT_TRUE(announced) << "this start never served:\n" << ReadAll(log_).substr(logged);
    ASSERT_GT(port_, 0) << ReadAll(log_);
    token_ = ReadAll(data_dir_ + "/admin.token");
    while (!token_.empty() && (token_.back() == '\n')) token_.pop_back();
  }

  bool Healthy() {
    httplib::Client c("127.0.0.1", port_);
    c.set_connection_timeout(0, 200000);
    auto r = c.Get("/healthz");
    return r && r->status == 200;
  }

  void Kill(int sig) {
    if (pid_ <= 0) return;
    kill(pid_, sig);
    int status;
    waitpid(pid_, &status, 0);
    pid_ = 0;
  }
  void Restart() { Start(mode_, extra_); }

  httplib::Client Http(const std::string& token) const {
    httplib::Client c("127.0.0.1", port_);
    if (!token.empty()) c.set_bearer_token_auth(token);
    c.set_connection_timeout(2, 0);
    c.set_read_timeout(10, 0);
    return c;
  }
  httplib::Client Admin() const { return Http(token_); }
  std::string url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  const std::string& token() const { return token_; }
  // Its resident memory (VmRSS), in MiB; -1 once it is gone.
  double RssMiB() const { return Status("VmRSS:"); }
  // The most it has held resident (VmHWM), in MiB; -1 once it is gone.
  double PeakRssMiB() const { return Status("VmHWM:"); }
  const std::string& log() const { return log_; }
  // A figure of /proc/PID/status, in MiB; -1 once it is gone.
  double Status(const std::string& key) const {
    std::ifstream in("/proc/" + std::to_string(pid_) + "/status");
    for (std::string line; std::getline(in, line);) {
      if (line.rfind(key, 0) == 0) return std::stod(line.substr(key.size())) / 1024;
    }
    return -1;
  }
  std::vector<std::string> ClientEnv() const { return {"ROTA_SERVER=" + url(), "ROTA_TOKEN=" + token_}; }

 private:
  std::string data_dir_;
  std::string log_;
  std::string mode_;
  std::vector<std::string> extra_;
  pid_t pid_ = 0;
  int port_ = 0;
  std::string token_;
};

// A server and three agents (2 simulated GPUs each) as separate processes,
// the server with a 2 s node timeout.
class AgentCluster : public ::testing::Test {
 protected:
  using json = nlohmann::json;
  TempDir tmp;
  // More flags for the server (a fixture's --config: ConfigArgs).
  virtual std::vector<std::string> ExtraServerArgs() { return {}; }
  // --config of a cluster file holding `yaml` (written in the fixture's directory).
  std::vector<std::string> ConfigArgs(const std::string& yaml) {
    const std::string path = tmp.path() + "/cluster.yaml";
    std::ofstream(path) << yaml;
    return {"--config", path};
  }
  // More flags for every agent.
  virtual std::vector<std::string> ExtraAgentArgs() { return {}; }
  void SetUp() override {
    std::vector<std::string> args{"--rate-limit", "0", "--node-timeout", "2s", "--min-runtime", "0s"};
    for (std::string& a : ExtraServerArgs()) args.push_back(std::move(a));
    server_ = std::make_unique<RotaProcess>("server", tmp.path() + "/data", std::move(args));
    if (HasFatalFailure()) return;
    for (int i = 0; i < 3; ++i) {
      StartAgent(i);
      if (HasFatalFailure()) return;  // (a helper's ASSERT returns from the helper only)
    }
    // All three ready.
    for (int i = 0; i < 200; ++i) {
      auto r = server_->Admin().Get("/v1/nodes");
      if (r && r->status == 200) {
        int ready = 0;
        const json doc = json::parse(r->body);  // named: a range-for over a temporary's member dangles
        for (const auto& n : doc["nodes"]) ready += n["state"] == "ready";
        if (ready == 3) return;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    std::string states;
    auto last = server_->Admin().Get("/v1/nodes");
    ASSERT_TRUE(last) << "the server stopped answering";
    const json doc = json::parse(last->body);
    for (const auto& n : doc["nodes"]) states += n["name"].get<std::string>() + "=" + n["state"].get<std::string>() + " ";
    FAIL() << "agents did not become ready: " << states;
  }
  void TearDown() override {
    for (pid_t p : agents_) {
      if (p > 0) {
        kill(p, SIGTERM);
        waitpid(p, nullptr, 0);
      }
    }
  }
  void StartAgent(int i, std::vector<std::string> extra = {}) {
    const std::string name = "a" + std::to_string(i);
    // (A loaded machine may refuse or drop a connection to a server that
    // has just started: a few tries, then what its log says.)
    auto ask = [&] {
      return server_->Admin().Post("/v1/tokens", json{{"user", name}, {"role", "agent"}, {"node", name}}.dump(),
                                   "application/json");
    };
    httplib::Result r = ask();
    for (int attempt = 1; attempt < 5 && !r; ++attempt) {
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
      r = ask();
    }
    ASSERT_TRUE(r) << "the server did not answer a token request (" << httplib::to_string(r.error())
                   << "); its log ends:\n" << Tail(ReadAll(server_->log()), 3000);
    ASSERT_EQ(r->status, 201);
    const std::string token = json::parse(r->body)["token"];
    const std::string token_file = tmp.path() + "/" + name + ".token";
    std::ofstream(token_file) << token << "\n";
    std::vector<std::string> args{RotaBinary(), "agent",       "--server", server_->url(), "--token-file", token_file,
                                  "--name",     name,          "--address", "127.0.0.1",   "--gpus",  "2xH100:80Gi",
                                  "--logs-dir", LogsDir(i),    "--heartbeat-ms", "200"};
    args.insert(args.end(), extra.begin(), extra.end());
    for (std::string& a : ExtraAgentArgs()) args.push_back(std::move(a));
    const pid_t pid = SpawnLogged(args, tmp.path() + "/" + name + ".log");
    ASSERT_GT(pid, 0);
    agents_.push_back(pid);
  }
  std::string LogsDir(int i) { return tmp.path() + "/logs-a" + std::to_string(i); }
  json Job(int id) {
    auto r = server_->Admin().Get("/v1/jobs/" + std::to_string(id));
    if (!r) {
      ADD_FAILURE() << "the server did not answer GET /v1/jobs/" << id << " (" << httplib::to_string(r.error()) << ")";
      return json::object();
    }
    return json::parse(r->body, nullptr, /*allow_exceptions=*/false);
  }
  // Waits until `pred(job)` holds.
  json WaitJob(int id, const std::function<bool(const json&)>& pred, int seconds = 20) {
    json j;
    for (int i = 0; i < seconds * 20; ++i) {
      j = Job(id);
      if (pred(j)) return j;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    ADD_FAILURE() << "job " << id << " never reached the expected state: " << j.dump();
    return j;
  }
  std::unique_ptr<RotaProcess> server_;
  std::vector<pid_t> agents_;
};

}  // namespace rota::testing
