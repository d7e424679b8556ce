// Services through the real binary: a small HTTP service (Python's
// http.server) as kind: service with 1..4 replicas behind the server's
// router, on two agents. Load raises the requests in flight: it scales up;
// a replica killed mid-load is out of the router within 1 s and replaced;
// a rolling update (rota apply) moves every replica onto a new spec; no
// request fails; the load stops: it scales down after the delay.
#include <gtest/gtest.h>

#include <atomic>
#include <mutex>
#include <nlohmann/json.hpp>

#include "harness.h"

namespace rota::testing {
namespace {

using nlohmann::json;

constexpr const char* kServer = R"(import http.server, os, socketserver, time
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_GET(self):
        if self.path.startswith("/slow"):
            time.sleep(0.2)
        body = ("replica %s path %s\n" % (os.environ["ROTA_REPLICA"], self.path)).encode()
        if self.path == "/metrics":
            # Replica 0 reports the queue the test writes; the others none.
            queue = open(os.environ["QUEUE_FILE"]).read().strip() if os.environ["ROTA_REPLICA"] == "0" else "0"
            body = ("# TYPE fake:queue_waiting gauge\nfake:queue_waiting{model=\"m\"} %s\n" % queue).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a): pass
class S(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True
S(("127.0.0.1", int(os.environ["PORT"])), H).serve_forever()
)";

class Services : public ::testing::Test {
 protected:
  TempDir tmp;
  std::unique_ptr<RotaProcess> server;
  std::vector<pid_t> agents;
  int router_port = 0;
  int base_port = 0;

  // More server flags, for a fixture of its own.
  virtual std::vector<std::string> MoreServerArgs() const { return {}; }

  void SetUp() override {
    std::vector<std::string> args = {"--rate-limit", "0", "--node-timeout", "5s", "--router", "127.0.0.1:0"};
    for (const std::string& a : MoreServerArgs()) args.push_back(a);
    server = std::make_unique<RotaProcess>("server", tmp.path() + "/data", args);
    for (int i = 0; i < 2; ++i) {
      const std::string name = "s" + std::to_string(i);
      auto r = server->Admin().Post("/v1/tokens", json{{"user", name}, {"role", "agent"}, {"node", name}}.dump(),
                                    "application/json");
      ASSERT_EQ(r->status, 201);
      const std::string token_file = tmp.path() + "/" + name + ".token";
      std::ofstream(token_file) << json::parse(r->body)["token"].get<std::string>() << "\n";
      const pid_t pid = SpawnLogged({RotaBinary(), "agent", "--server", server->url(), "--token-file", token_file,
                                     "--name", name, "--address", "127.0.0.1", "--gpus", "2xH100:80Gi", "--logs-dir",
                                     tmp.path() + "/logs-" + name, "--heartbeat-ms", "200"},
                                    tmp.path() + "/" + name + ".log");
      ASSERT_GT(pid, 0);
      agents.push_back(pid);
    }
    auto r = server->Admin().Get("/v1/services");
    ASSERT_EQ(r->status, 200);
    const std::string url = json::parse(r->body)["router"];
    ASSERT_EQ(url.rfind("http://127.0.0.1:", 0), 0u) << url;
    router_port = std::stoi(url.substr(17));
    // Replicas listen on base + r; a range no other test uses at once.
    // (Below the kernel's ephemeral ports, 32768 up: a client socket there
    // could hold a replica's port; 20000..27996, not the dashboard test's 28400.)
    base_port = 20000 + static_cast<int>(getpid() % 2000) * 4;
    for (int i = 0; i < 200 && Ready() < 2; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  void TearDown() override {
    for (pid_t p : agents) {
      kill(p, SIGTERM);
      waitpid(p, nullptr, 0);
    }
    // Their replicas outlive the agents (supervised) until fenced: end them now.
    RunShell("pkill -9 -f " + tmp.path() + "/serve.py", {}, tmp.path());
  }
  int Ready() {
    auto r = server->Admin().Get("/v1/nodes");
    int ready = 0;
    if (r && r->status == 200) {
      const json doc = json::parse(r->body);
      for (const auto& n : doc["nodes"]) ready += n["state"] == "ready";
    }
    return ready;
  }
  json Service(const std::string& name) {
    auto r = server->Admin().Get("/v1/services");
    const json doc = json::parse(r->body);
    for (const auto& s : doc["services"]) {
      if (s["name"] == name) return s;
    }
    return json();
  }
  json Endpoints(const std::string& name) {
    return json::parse(server->Admin().Get("/v1/services/" + name + "/endpoints")->body);
  }
  // Waits until `pred(service)` holds; the last view either way.
  json WaitService(const std::string& name, const std::function<bool(const json&)>& pred, int seconds) {
    json s;
    for (int i = 0; i < seconds * 10; ++i) {
      s = Service(name);
      if (!s.is_null() && pred(s)) return s;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    ADD_FAILURE() << "service " << name << " never reached the expected state: " << s.dump();
    return s;
  }
  // Submits service `name` of kServer replicas (1..max, `gpus` each, or
  // `fraction` of a GPU), scaled on the fake:queue_waiting the test writes
  // to queue_file() (target 1 a replica; `spare` more), and waits for its
  // first replica to be ready.
  void SubmitQueueScaled(const std::string& name, int max, int gpus, const std::string& scale_down_delay, int spare = 0,
                         const std::string& fraction = "") {
    const std::string script = tmp.path() + "/serve.py";
    std::ofstream(script) << kServer;
    std::ofstream(queue_file()) << "0\n";
    const std::string spec = tmp.path() + "/" + name + ".yaml";
    std::ofstream(spec) << "name: " << name << "\nkind: service\nservice:\n  port: " << base_port
                        << "\n  replicas: {min: 1, max: " << max << "}\n  readiness: {path: /health, period: 200ms}\n"
                        << "  autoscale:\n    metrics: [{name: 'fake:queue_waiting', target: 1}]\n"
                        << "    stable_window: 4s\n    panic_window: 2s\n    spare: " << spare
                        << "\n    scale_down_delay: " << scale_down_delay
                        << "\ntasks:\n  - name: server\n" << (gpus > 0 ? "    gpus: " + std::to_string(gpus) + "\n" : "")
                        << (fraction.empty() ? "" : "    gpu: {fraction: " + fraction + "}\n")
                        << "    cpu: 100m\n    env: {QUEUE_FILE: " << queue_file() << "}\n    command: [python3, "
                        << script << "]\n";
    CommandResult submit = RunRota({"submit", spec}, server->ClientEnv(), tmp.path());
    ASSERT_EQ(submit.exit_code, 0) << submit.err;
    WaitService(name, [](const json& sv) { return sv["replicas"]["ready"] == 1; }, 40);
  }
  std::string queue_file() const { return tmp.path() + "/queue"; }
};

TEST_F(Services, ScaleUpUnderLoadSurviveAKilledReplicaAndScaleDown) {
  const std::string script = tmp.path() + "/serve.py";
  std::ofstream(script) << kServer;
  const std::string spec = tmp.path() + "/svc.yaml";
  std::ofstream(spec) << "name: echo\nkind: service\nservice:\n  port: " << base_port
                      << "\n  replicas: {min: 1, max: 4}\n  readiness: {path: /health, period: 200ms}\n"
                         "  autoscale: {target_inflight: 2, stable_window: 10s, panic_window: 2s, scale_down_delay: 5s}\n"
                         "tasks:\n  - name: server\n    cpu: 100m\n    command: [python3, "
                      << script << "]\n";
  const auto env = server->ClientEnv();
  CommandResult submit = RunRota({"submit", spec}, env, tmp.path());
  ASSERT_EQ(submit.exit_code, 0) << submit.err;
  // One live service a name: a second is refused, naming the first.
  CommandResult again = RunRota({"submit", spec}, env, tmp.path());
  EXPECT_EQ(again.exit_code, 5) << again.out << again.err;
  EXPECT_NE(again.err.find("name: service 'echo' exists already (job 1)"), std::string::npos) << again.err;

  // A replica at 100m of CPU takes seconds to start Python; more on a loaded machine.
  WaitService("echo", [](const json& s) { return s["replicas"]["ready"] == 1; }, 40);
  httplib::Client direct("127.0.0.1", router_port);
  direct.set_read_timeout(10, 0);
  auto hello = direct.Get("/echo/hello?x=1");
  ASSERT_TRUE(hello);
  EXPECT_EQ(hello->status, 200);
  EXPECT_EQ(hello->body, "replica 0 path /hello?x=1\n");
  auto missing = direct.Get("/nope/x");
  ASSERT_TRUE(missing);
  EXPECT_EQ(missing->status, 404);
  EXPECT_NE(missing->body.find("no service 'nope'"), std::string::npos);

  // Load: 8 clients, each one request of 0.2 s at a time (8 in flight, target 2 a replica).
  std::atomic<bool> stop{false};
  std::atomic<int> ok{0}, failed{0};
  std::mutex mu;
  std::string failures;
  std::vector<std::thread> clients;
  struct Join {  // (an assertion that returns early still ends the load)
    std::atomic<bool>& stop;
    std::vector<std::thread>& clients;
    ~Join() {
      stop = true;
      for (std::thread& t : clients) {
        if (t.joinable()) t.join();
      }
    }
  } join{stop, clients};
  for (int i = 0; i < 8; ++i) {
    clients.emplace_back([&] {
      httplib::Client c("127.0.0.1", router_port);
      c.set_keep_alive(true);
      c.set_read_timeout(30, 0);
      while (!stop) {
        auto r = c.Get("/echo/slow");
        if (r && r->status == 200) {
          ++ok;
        } else {
          ++failed;
          std::lock_guard<std::mutex> lock(mu);
          failures += (r ? std::to_string(r->status) + " " + r->body : std::string("no answer")) + "\n";
        }
      }
    });
  }
  const json up = WaitService("echo", [](const json& s) { return s["replicas"]["ready"] == 4; }, 30);
  EXPECT_EQ(up["replicas"]["desired"], 4);
  EXPECT_NE(up["last_scale"]["reason"].get<std::string>().find("in flight"), std::string::npos) << up.dump();

  // Kill replica 1's process: it is out of the router within 1 s, then replaced.
  const int32_t attempt = [&] {
    const json eps = Endpoints("echo");  // (named: a range-for over a temporary's member dangles)
    for (const auto& e : eps["endpoints"]) {
      if (e["replica"] == 1) return e["attempt"].get<int32_t>();
    }
    return -1;
  }();
  ASSERT_GE(attempt, 0) << Endpoints("echo").dump();
  CommandResult killed = RunShell("for p in $(pgrep -f " + script + "); do tr '\\0' '\\n' < /proc/$p/environ | grep -qx PORT=" +
                                      std::to_string(base_port + 1) + " && kill -9 $p && echo $p; done",
                                  {}, tmp.path());
  ASSERT_FALSE(killed.out.empty()) << "no process of replica 1";
  const auto killed_at = std::chrono::steady_clock::now();
  bool out = false;
  while (!out && std::chrono::steady_clock::now() - killed_at < std::chrono::seconds(1)) {
    const json eps = Endpoints("echo");
    for (const auto& e : eps["endpoints"]) {
      if (e["replica"] == 1 && (e["attempt"] != attempt || !e["ready"].get<bool>())) out = true;
    }
    if (!out) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_TRUE(out) << "replica 1 still in the router 1 s after it was killed: " << Endpoints("echo").dump();
  bool replaced = false;
  for (int i = 0; i < 150 && !replaced; ++i) {
    const json eps = Endpoints("echo");
    for (const auto& e : eps["endpoints"]) {
      if (e["replica"] == 1 && e["attempt"] != attempt && e["ready"].get<bool>()) replaced = true;
    }
    if (!replaced) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_TRUE(replaced) << Endpoints("echo").dump();

  // A rolling update under the load (a new env): every replica moves onto
  // it, each drained before it is replaced.
  std::string spec_text = ReadAll(spec);
  spec_text.replace(spec_text.find("    cpu: 100m\n"), 13, "    cpu: 100m\n    env: {VERSION: '2'}\n");
  const std::string spec2 = tmp.path() + "/svc2.yaml";
  std::ofstream(spec2) << spec_text;
  CommandResult applied = RunRota({"apply", spec2}, env, tmp.path());
  ASSERT_EQ(applied.exit_code, 0) << applied.err;
  EXPECT_NE(applied.out.find("updated service echo (job 1)"), std::string::npos) << applied.out;
  bool rolled = false;
  for (int i = 0; i < 300 && !rolled; ++i) {
    const json s = Service("echo");
    const json eps = Endpoints("echo");
    rolled = !s.contains("rollout") && eps["endpoints"].size() == 4;
    for (const auto& e : eps["endpoints"]) rolled = rolled && e["spec"] == "current" && e["ready"].get<bool>();
    if (!rolled) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  EXPECT_TRUE(rolled) << Service("echo").dump() << Endpoints("echo").dump();
  CommandResult versions = RunShell("for p in $(pgrep -f " + script + "); do tr '\\0' '\\n' < /proc/$p/environ | grep -x VERSION=2; done",
                                    {}, tmp.path());
  EXPECT_EQ(versions.out, "VERSION=2\nVERSION=2\nVERSION=2\nVERSION=2\n");
  // What may not change in a running service is refused, naming the field.
  spec_text.replace(spec_text.find("cpu: 100m"), 9, "cpu: 200m");
  std::ofstream(spec2, std::ios::trunc) << spec_text;
  CommandResult refused = RunRota({"apply", spec2}, env, tmp.path());
  EXPECT_EQ(refused.exit_code, 2) << refused.out << refused.err;
  EXPECT_NE(refused.err.find("tasks[0].cpu: does not change in a running service"), std::string::npos) << refused.err;
  std::this_thread::sleep_for(std::chrono::seconds(1));
  stop = true;
  for (std::thread& t : clients) t.join();
  clients.clear();
  EXPECT_GT(ok.load(), 100);
  EXPECT_EQ(failed.load(), 0) << failures;

  // Quiet: down to its min once the panic and the scale-down delay have passed.
  // (The decision first, its placement in the scheduling pass after it.)
  const json down = WaitService("echo", [](const json& s) { return s["replicas"]["desired"] == 1 && s["replicas"]["placed"] == 1; }, 60);
  EXPECT_EQ(down["replicas"]["placed"], 1);
  const std::string metrics = server->Admin().Get("/metrics")->body;
  EXPECT_NE(metrics.find("rota_service_replicas{service=\"echo\",kind=\"desired\"} 1"), std::string::npos);
  EXPECT_NE(metrics.find("rota_service_requests_total{service=\"echo\",result=\"router_error\"} 0"), std::string::npos);
  CommandResult listed = RunRota({"services"}, env, tmp.path());
  EXPECT_EQ(listed.exit_code, 0) << listed.err;
  EXPECT_NE(listed.out.find("echo"), std::string::npos) << listed.out;
  CommandResult endpoints = RunRota({"endpoints", "echo"}, env, tmp.path());
  EXPECT_EQ(endpoints.exit_code, 0) << endpoints.err;
  EXPECT_NE(endpoints.out.find("/echo/"), std::string::npos) << endpoints.out;
}

// Scaling on a metric the service exposes itself (as vLLM's
// vllm:num_requests_waiting): 3 waiting at a target of 1 a replica gives 3
// replicas; none waiting, back to 1 after the delay.
TEST_F(Services, ScalesOnTheServicesOwnMetric) {
  SubmitQueueScaled("queued", 4, 0, "3s");
  const std::string queue = queue_file();
  std::ofstream(queue, std::ios::trunc) << "3\n";
  const json up = WaitService("queued", [](const json& s) { return s["replicas"]["ready"] == 3; }, 40);
  EXPECT_EQ(up["replicas"]["desired"], 3);
  EXPECT_NE(up["last_scale"]["reason"].get<std::string>().find("fake:queue_waiting 3.0 (target 1.0/replica)"),
            std::string::npos)
      << up.dump();
  EXPECT_EQ(up["signals"]["metrics"]["fake:queue_waiting"], 3.0) << up.dump();
  std::ofstream(queue, std::ios::trunc) << "0\n";
  WaitService("queued", [](const json& s) { return s["replicas"]["desired"] == 1 && s["replicas"]["placed"] == 1; }, 30);
}

// autoscale.spare: one replica beyond what the load asks, through the real
// server (the spec's field, the journal, the autoscaler, the engine).
TEST_F(Services, ASpareReplicaRidesOnTopOfTheLoad) {
  SubmitQueueScaled("spared", 4, 0, "3s", 1);
  const std::string queue = queue_file();
  std::ofstream(queue, std::ios::trunc) << "2\n";  // the load asks 2: it runs 3
  const json up = WaitService("spared", [](const json& s) { return s["replicas"]["ready"] == 3; }, 40);
  EXPECT_EQ(up["replicas"]["desired"], 3);
  EXPECT_NE(up["last_scale"]["reason"].get<std::string>().find("fake:queue_waiting"), std::string::npos) << up.dump();
  EXPECT_NE(up["last_scale"]["reason"].get<std::string>().find("+ 1 spare"), std::string::npos) << up.dump();
  std::ofstream(queue, std::ios::trunc) << "0\n";  // nothing asked: the spare alone (its min, 1)
  WaitService("spared", [](const json& s) { return s["replicas"]["desired"] == 1 && s["replicas"]["placed"] == 1; }, 30);
}

// Replicas on a quarter of a GPU scale like whole-GPU ones: 3 waiting at a
// target of 1 gives 3 replicas, packed onto the GPU the first one shares
// (each told its share); none waiting, back to 1, its shares given back.
TEST_F(Services, OnQuarterGpusItScalesOntoTheSharedGpu) {
  SubmitQueueScaled("quarters", 4, 0, "3s", 0, "0.25");
  const std::string queue = queue_file();
  std::ofstream(queue, std::ios::trunc) << "3\n";
  const json up = WaitService("quarters", [](const json& s) { return s["replicas"]["ready"] == 3; }, 40);
  EXPECT_EQ(up["replicas"]["desired"], 3) << up.dump();
  const json job = json::parse(server->Admin().Get("/v1/jobs/" + std::to_string(up["job"].get<int>()))->body);
  ASSERT_EQ(job["placement"].size(), 3u) << job.dump();
  for (const json& p : job["placement"]) {
    EXPECT_EQ(p["node"], job["placement"][0]["node"]) << job.dump();
    EXPECT_EQ(p["gpus"], job["placement"][0]["gpus"]) << job.dump();
    EXPECT_EQ(p["gpu_fraction"], "0.25") << job.dump();
  }
  std::ofstream(queue, std::ios::trunc) << "0\n";
  WaitService("quarters", [](const json& s) { return s["replicas"]["desired"] == 1 && s["replicas"]["placed"] == 1; }, 30);
  // The GPU holds one quarter again.
  const json nodes = json::parse(server->Admin().Get("/v1/nodes")->body);
  int32_t shared = -1;
  for (const json& n : nodes["nodes"]) {
    if (n["name"] != job["placement"][0]["node"]) continue;
    for (const json& g : n["gpu_list"]) {
      if (g["index"] == job["placement"][0]["gpus"][0]) shared = g.value("shared_milli", 0);
    }
  }
  EXPECT_EQ(shared, 250) << nodes.dump();
}

// A scale-up that the free GPUs cannot hold evicts lower-priority
// preemptible training through the checkpoint protocol (the gang gets its
// signal and grace, and is requeued), and the new replicas start on the
// GPUs it freed; the training job waits. Services are of the `inference`
// class (2000), above training's `low` (100). A 1 s minimum run time.
class ServicesPreempting : public Services {
 protected:
  std::vector<std::string> MoreServerArgs() const override { return {"--min-runtime", "1s"}; }
};

TEST_F(ServicesPreempting, AScaleUpEvictsLowerTrainingForItsGpus) {
  SubmitQueueScaled("gpusvc", 3, 1, "60s");
  const std::string queue = queue_file();
  // Training takes the other 3 GPUs (of 2 nodes x 2).
  const std::string train = tmp.path() + "/train.yaml";
  std::ofstream(train) << "name: train\npriority: low\npreemptible: true\ncheckpoint: {signal: SIGTERM, grace: 5s}\n"
                          "tasks:\n  - name: worker\n    replicas: 3\n    gpus: 1\n    cpu: 100m\n"
                          "    command: [sleep, '600']\n";
  CommandResult trained = RunRota({"submit", "-o", "json", train}, server->ClientEnv(), tmp.path());
  ASSERT_EQ(trained.exit_code, 0) << trained.err;
  const int train_id = json::parse(trained.out)["id"];
  auto state = [&] { return json::parse(server->Admin().Get("/v1/jobs/" + std::to_string(train_id))->body); };
  for (int i = 0; i < 200 && state()["state"] != "running"; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  ASSERT_EQ(state()["state"], "running") << state().dump();
  std::this_thread::sleep_for(std::chrono::milliseconds(1200));  // past its minimum run time
  // Three waiting requests at a target of 1: three replicas, two on the gang's GPUs.
  std::ofstream(queue, std::ios::trunc) << "3\n";
  const json up = WaitService("gpusvc", [](const json& s) { return s["replicas"]["ready"] == 3; }, 60);
  EXPECT_EQ(up["replicas"]["desired"], 3) << up.dump();
  const json job = state();
  EXPECT_EQ(job["state"], "pending") << job.dump();
  EXPECT_NE(job.value("last_requeue_reason", std::string()).find("preempted to scale up service"), std::string::npos)
      << job.dump();
}

}  // namespace
}  // namespace rota::testing
