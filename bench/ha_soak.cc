// ha_soak: randomized leader failures under load, on a real PostgreSQL (one
// this program starts with initdb + pg_ctl) and real `rota server` replicas
// and `rota agent`s.
//
// Three replicas, two agents (4 GPUs each), a sentinel job that runs the
// whole time, and submitters that send one-GPU jobs (each under its own
// Idempotency-Key, retried across the replicas until acknowledged). Then,
// again and again, the leader is killed (kill -9), paused past its lease
// (SIGSTOP, then SIGCONT) or stopped cleanly (SIGTERM), and restarted. At
// the end:
//   lost         acknowledged submissions whose job is not in the store
//   duplicated   keys that made more than one job
//   double-held  (node, GPU) pairs two running jobs held at once (sampled
//                every 200 ms through the run)
//   sentinel     restarts of the job that ran throughout (and whether its
//                process is the one it started as)
// and the failover time (fault to the next acknowledged write) p50/p99/max
// by fault.
//
// usage: ha_soak [--events 100] [--submitters 4] [--lease 3s] [--keep 1] [--only kill|stop|term]
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <httplib.h>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "store/pg_test_server.h"

extern char** environ;

namespace {

using nlohmann::json;
using Clock = std::chrono::steady_clock;

double Seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

int FreePort() { return rota::TestPostgres::FreePort(); }

pid_t Spawn(std::vector<std::string> args, const std::string& log) {
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  posix_spawn_file_actions_adddup2(&fa, 1, 2);
  pid_t pid = 0;
  if (posix_spawn(&pid, argv[0], &fa, nullptr, argv.data(), environ) != 0) pid = 0;
  posix_spawn_file_actions_destroy(&fa);
  return pid;
}

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

double Percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[std::min(v.size() - 1, static_cast<size_t>(p * static_cast<double>(v.size() - 1) + 0.5))];
}

class Soak {
 public:
  bool keep_ = false;  // --keep 1: leave the logs
  std::string only_;   // --only kill|stop|term: one kind of fault

  Soak(std::string rota, int submitters, std::string lease) : rota_(std::move(rota)), submitters_(submitters), lease_(lease) {}

  bool Start() {
    std::string error;
    pg_ = rota::TestPostgres::Start(&error);
    if (!pg_) {
      std::fprintf(stderr, "ha_soak: %s\n", error.c_str());
      return false;
    }
    pg_->CreateDatabase("rota");
    char tmpl[] = "/tmp/rota-ha-soak-XXXXXX";
    dir_ = mkdtemp(tmpl);
    store_ = "postgresql://rota@127.0.0.1:" + std::to_string(pg_->port()) + "/rota";
    for (int i = 0; i < 3; ++i) {
      ports_.push_back(FreePort());
      pids_.push_back(0);
      list_ += (i ? "," : "") + Url(i);
    }
    for (int i = 0; i < 3; ++i) StartReplica(i);
    const int leader = Leader(30);
    if (leader < 0) {
      std::fprintf(stderr, "ha_soak: no leader: %s\n", ReadAll(Dir(0) + ".log").c_str());
      return false;
    }
    for (int i = 0; i < 200 && token_.empty(); ++i) {
      token_ = ReadAll(Dir(leader) + "/admin.token");
      while (!token_.empty() && token_.back() == '\n') token_.pop_back();
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    for (int a = 0; a < 2; ++a) {
      const std::string name = "s" + std::to_string(a);
      auto r = Send("POST", "/v1/tokens", json{{"user", name}, {"role", "agent"}, {"node", name}}.dump(), "", 20);
      if (r.first != 201) {
        std::fprintf(stderr, "ha_soak: agent token: %d %s\n", r.first, r.second.c_str());
        return false;
      }
      std::ofstream(dir_ + "/" + name + ".token") << json::parse(r.second)["token"].get<std::string>() << "\n";
      agents_.push_back(Spawn({rota_, "agent", "--server", list_, "--token-file", dir_ + "/" + name + ".token", "--name",
                               name, "--address", "127.0.0.1", "--gpus", "4xH100:80Gi", "--logs-dir", dir_ + "/logs-" + name},
                              dir_ + "/" + name + ".log"));
    }
    for (int i = 0; i < 400; ++i) {
      auto nodes = Send("GET", "/v1/nodes", "", "", 5);
      int ready = 0;
      if (nodes.first == 200) {
        const json doc = json::parse(nodes.second, nullptr, false);
        if (doc.is_object()) {
          for (const auto& n : doc["nodes"]) ready += n["state"] == "ready";
        }
      }
      if (ready == 2) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    sentinel_arg_ = "99" + std::to_string(getpid());
    auto r = Send("POST", "/v1/jobs",
                  "name: sentinel\ntasks: [{name: w, replicas: 1, gpus: 1, command: [sleep, \"" + sentinel_arg_ + "\"]}]\n",
                  "sentinel", 30);
    if (r.first != 201) {
      std::fprintf(stderr, "ha_soak: sentinel: %d %s\n", r.first, r.second.c_str());
      return false;
    }
    sentinel_ = json::parse(r.second)["id"];
    for (int i = 0; i < 400 && SentinelPids().empty(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    sentinel_pids_ = SentinelPids();
    return sentinel_pids_.size() == 1;
  }

  void Run(int events) {
    running_ = true;
    for (int t = 0; t < submitters_; ++t) threads_.emplace_back([this, t] { Submit(t); });
    threads_.emplace_back([this] { Sample(); });
    std::mt19937 rng(12345);
    std::this_thread::sleep_for(std::chrono::seconds(2));
    for (int e = 0; e < events; ++e) {
      const int leader = Leader(30);
      if (leader < 0) {
        std::fprintf(stderr, "ha_soak: no leader after event %d\n", e);
        break;
      }
      const int pick = std::uniform_int_distribution<int>(0, 9)(rng);
      std::string fault = pick < 6 ? "kill -9" : pick < 8 ? "SIGSTOP" : "SIGTERM";
      if (!only_.empty()) fault = only_;
      const Clock::time_point at = Clock::now();
      if (fault == "kill -9") {
        kill(pids_[leader], SIGKILL);
        waitpid(pids_[leader], nullptr, 0);
      } else if (fault == "SIGTERM") {
        kill(pids_[leader], SIGTERM);
        waitpid(pids_[leader], nullptr, 0);
      } else {
        kill(pids_[leader], SIGSTOP);
      }
      // The first write another replica acknowledged after the fault.
      Clock::time_point acked = at + std::chrono::hours(1);
      while (Clock::now() - at < std::chrono::seconds(60) && acked > Clock::now()) {
        {
          std::lock_guard<std::mutex> lock(mu_);
          for (const auto& [t, by] : acked_by_) {
            if (t > at && by != leader) {
              acked = std::min(acked, t);
            }
          }
        }
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
      failover_[fault].push_back(Seconds(acked - at));
      if (fault == "SIGSTOP") {
        std::this_thread::sleep_for(std::chrono::milliseconds(500));
        kill(pids_[leader], SIGCONT);
      } else {
        StartReplica(leader);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(1500));
      if (sentinel_lost_at_.empty() && SentinelPids() != sentinel_pids_) {
        sentinel_lost_at_ = "event " + std::to_string(e + 1) + " (" + fault + ")";
        std::fprintf(stderr, "ha_soak: the sentinel's process changed after %s\n", sentinel_lost_at_.c_str());
      }
      if ((e + 1) % 10 == 0) {
        std::fprintf(stderr, "ha_soak: %d events, %zu acknowledged\n", e + 1, Acks());
      }
    }
    running_ = false;
    for (auto& t : threads_) t.join();
  }

  int Report() {
    // Every acknowledged key exactly once.
    std::map<std::string, std::vector<uint64_t>> by_key;
    uint64_t after = 0;
    while (true) {
      auto r = Send("GET", "/v1/jobs?all=true&limit=10000&after=" + std::to_string(after), "", "", 30);
      if (r.first != 200) {
        std::printf("cannot list the jobs: %d %s\n", r.first, r.second.c_str());
        return 1;
      }
      const json page = json::parse(r.second);
      for (const auto& j : page["jobs"]) {
        if (j.contains("request_id")) by_key[j["request_id"]].push_back(j["id"]);
      }
      if (!page.contains("next_after")) break;
      after = page["next_after"];
    }
    size_t lost = 0, duplicated = 0;
    for (const auto& [key, ids] : by_key) duplicated += ids.size() > 1;
    for (const auto& [key, id] : acks_) {
      auto it = by_key.find(key);
      if (it == by_key.end() || std::find(it->second.begin(), it->second.end(), id) == it->second.end()) ++lost;
    }
    auto sentinel = Send("GET", "/v1/jobs/" + std::to_string(sentinel_), "", "", 30);
    const json s = json::parse(sentinel.second, nullptr, false);
    std::printf("ha_soak: %d events on 3 replicas, lease %s, %d submitters, %s\n", Events(), lease_.c_str(), submitters_,
                "PostgreSQL 15 (synchronous_commit=on)");
    std::printf("%-28s %zu (never acknowledged: %zu)\n", "acknowledged submissions", acks_.size(), unacked_);
    std::printf("%-28s %zu\n", "lost", lost);
    std::printf("%-28s %zu\n", "duplicated", duplicated);
    std::printf("%-28s %zu (in %zu samples)\n", "GPUs held twice", double_held_, samples_);
    std::printf("%-28s %d restarts, state %s, process %s\n", "sentinel job",
                s.is_object() ? s.value("restarts", -1) : -1,
                s.is_object() ? s.value("state", std::string("?")).c_str() : "?",
                SentinelPids() == sentinel_pids_ ? "the original" : ("REPLACED after " + sentinel_lost_at_).c_str());
    std::printf("%-10s %6s %8s %8s %8s %8s\n", "fault", "count", "p50 s", "p90 s", "p99 s", "max s");
    std::vector<double> all;
    for (const auto& [fault, times] : failover_) {
      std::printf("%-10s %6zu %8.2f %8.2f %8.2f %8.2f\n", fault.c_str(), times.size(), Percentile(times, 0.5),
                  Percentile(times, 0.9), Percentile(times, 0.99), Percentile(times, 1.0));
      all.insert(all.end(), times.begin(), times.end());
    }
    std::printf("%-10s %6zu %8.2f %8.2f %8.2f %8.2f\n", "all", all.size(), Percentile(all, 0.5), Percentile(all, 0.9),
                Percentile(all, 0.99), Percentile(all, 1.0));
    return lost == 0 && duplicated == 0 && double_held_ == 0 ? 0 : 1;
  }

  void Stop() {
    for (pid_t p : agents_) {
      kill(p, SIGTERM);
      waitpid(p, nullptr, 0);
    }
    for (pid_t p : pids_) {
      if (p <= 0) continue;
      kill(p, SIGCONT);
      kill(p, SIGKILL);
      waitpid(p, nullptr, 0);
    }
    for (pid_t p : SentinelPids()) kill(p, SIGKILL);
    if (keep_) {
      std::printf("ha_soak: logs kept in %s\n", dir_.c_str());
      return;
    }
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }

 private:
  std::string Url(int i) const { return "http://127.0.0.1:" + std::to_string(ports_[i]); }
  std::string Dir(int i) const { return dir_ + "/replica" + std::to_string(i); }
  int Events() const {
    int n = 0;
    for (const auto& [f, t] : failover_) n += static_cast<int>(t.size());
    return n;
  }
  size_t Acks() {
    std::lock_guard<std::mutex> lock(mu_);
    return acks_.size();
  }

  void StartReplica(int i) {
    pids_[i] = Spawn({rota_, "server", "--data-dir", Dir(i), "--listen", "127.0.0.1:" + std::to_string(ports_[i]),
                      "--store", store_, "--rate-limit", "0", "--min-runtime", "0s", "--lease", lease_},
                     Dir(i) + ".log");
  }

  std::string Role(int i) {
    httplib::Client c("127.0.0.1", ports_[i]);
    c.set_connection_timeout(0, 300000);
    c.set_read_timeout(1, 0);
    auto r = c.Get("/healthz");
    return r && r->status == 200 ? r->get_header_value("Rota-Role") : "";
  }
  int Leader(int seconds) {
    for (int n = 0; n < seconds * 20; ++n) {
      for (int i = 0; i < 3; ++i) {
        if (Role(i) == "leader") return i;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return -1;
  }

  // One request to the leader, following standbys' Rota-Leader, retried
  // (same key) for up to `seconds`.
  std::pair<int, std::string> Send(const std::string& method, const std::string& path, const std::string& body,
                                   const std::string& key, int seconds) {
    int ignored;
    return Send(method, path, body, key, seconds, ignored);
  }
  std::pair<int, std::string> Send(const std::string& method, const std::string& path, const std::string& body,
                                   const std::string& key, int seconds, int& answered_by) {
    const auto deadline = Clock::now() + std::chrono::seconds(seconds);
    int at = route_;
    Clock::time_point failed_at[3] = {};
    while (Clock::now() < deadline) {
      httplib::Client c("127.0.0.1", ports_[at]);
      c.set_bearer_token_auth(token_);
      c.set_connection_timeout(1, 0);
      c.set_read_timeout(3, 0);
      httplib::Headers h;
      if (!key.empty()) h.emplace("Idempotency-Key", key);
      auto r = method == "GET" ? c.Get(path, h) : c.Post(path, h, body, "application/yaml");
      if (r && r->status != 503) {
        route_ = at;
        answered_by = at;
        return {r->status, r->body};
      }
      // Like the CLI and the agents (api::ServerList): on to the next one,
      // or to the leader a standby names, unless that one just failed us
      // (the standby has not seen it go yet).
      if (!r) failed_at[at] = Clock::now();
      int next = (at + 1) % 3;
      if (r && r->has_header("Rota-Leader")) {
        for (int i = 0; i < 3; ++i) {
          if (Url(i) == r->get_header_value("Rota-Leader") && Clock::now() - failed_at[i] > std::chrono::seconds(2)) {
            next = i;
          }
        }
      }
      if (next == at || !r) std::this_thread::sleep_for(std::chrono::milliseconds(50));
      at = next;
    }
    return {0, ""};
  }

  void Submit(int t) {
    for (int n = 0; running_; ++n) {
      const std::string key = "soak-" + std::to_string(t) + "-" + std::to_string(n);
      int by = -1;
      auto r = Send("POST", "/v1/jobs", "name: s\ntasks: [{name: w, replicas: 1, gpus: 1, command: [\"true\"]}]\n", key,
                    60, by);
      std::lock_guard<std::mutex> lock(mu_);
      if (r.first == 200 || r.first == 201) {
        acks_[key] = json::parse(r.second)["id"].get<uint64_t>();
        acked_by_.emplace_back(Clock::now(), by);
      } else {
        ++unacked_;
      }
      // A steady load, not a flood: about 50 submissions/s in all.
      std::this_thread::sleep_for(std::chrono::milliseconds(20 * submitters_));
    }
  }

  // Every 200 ms: no (node, GPU) held by two running jobs.
  void Sample() {
    while (running_) {
      auto r = Send("GET", "/v1/jobs?state=running&limit=10000", "", "", 5);
      if (r.first == 200) {
        const json page = json::parse(r.second, nullptr, false);
        std::set<std::string> held;
        size_t twice = 0;
        if (page.is_object()) {
          for (const auto& j : page["jobs"]) {
            for (const auto& p : j["placement"]) {
              for (const auto& g : p["gpus"]) {
                if (!held.insert(p["node"].get<std::string>() + "/" + g.dump()).second) ++twice;
              }
            }
          }
        }
        std::lock_guard<std::mutex> lock(mu_);
        double_held_ += twice;
        ++samples_;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
  }

  std::set<pid_t> SentinelPids() {
    std::set<pid_t> out;
    const std::string want = std::string("sleep") + '\0' + sentinel_arg_ + '\0';
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator("/proc", ec)) {
      const std::string name = e.path().filename().string();
      if (name.find_first_not_of("0123456789") != std::string::npos) continue;
      if (ReadAll(e.path().string() + "/cmdline") == want) out.insert(std::stoi(name));
    }
    return out;
  }

  std::string rota_;
  int submitters_;
  std::string lease_;
  std::unique_ptr<rota::TestPostgres> pg_;
  std::string dir_, store_, list_, token_, sentinel_arg_;
  std::vector<int> ports_;
  std::vector<pid_t> pids_, agents_;
  std::atomic<int> route_{0};
  std::atomic<bool> running_{false};
  std::vector<std::thread> threads_;
  std::mutex mu_;
  std::map<std::string, uint64_t> acks_;
  std::vector<std::pair<Clock::time_point, int>> acked_by_;  // when, and which replica answered
  size_t unacked_ = 0, double_held_ = 0, samples_ = 0;
  uint64_t sentinel_ = 0;
  std::set<pid_t> sentinel_pids_;
  std::string sentinel_lost_at_;
  std::map<std::string, std::vector<double>> failover_;
};

}  // namespace

int main(int argc, char** argv) {
  int events = 100, submitters = 4;
  std::string lease = "3s";
  std::string rota = ROTA_BINARY_PATH;
  bool keep = false;
  std::string only;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    if (a == "--events") events = std::atoi(argv[i + 1]);
    else if (a == "--submitters") submitters = std::max(1, std::atoi(argv[i + 1]));
    else if (a == "--lease") lease = argv[i + 1];
    else if (a == "--rota") rota = argv[i + 1];
    else if (a == "--keep") keep = std::string(argv[i + 1]) == "1";
    else if (a == "--only") {
      const std::string f = argv[i + 1];
      only = f == "kill" ? "kill -9" : f == "stop" ? "SIGSTOP" : f == "term" ? "SIGTERM" : "";
      if (only.empty()) {
        std::fprintf(stderr, "ha_soak: --only: kill, stop or term, not '%s'\n", f.c_str());
        return 2;
      }
    }
  }
  signal(SIGPIPE, SIG_IGN);
  Soak soak(rota, submitters, lease);
  soak.keep_ = keep;
  soak.only_ = only;
  if (!soak.Start()) {
    std::fprintf(stderr, "ha_soak: the cluster did not start\n");
    soak.Stop();
    return 1;
  }
  soak.Run(events);
  const int rc = soak.Report();
  soak.Stop();
  return rc;
}
