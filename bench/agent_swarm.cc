// agent_swarm: N emulated nodes in one process that speak the real agent
// protocol over real sockets (like Kubernetes' kubemark or KWOK): each
// registers with its own agent token, long-polls /v1/agents/heartbeat with
// telemetry for its GPUs, "runs" the tasks it is given for --run-ms and
// reports their exits at once. Meanwhile it submits a job array of 1-GPU
// jobs, samples /healthz, and reads the server's CPU and RSS from /proc.
//
// usage: agent_swarm --server URL --token ADMIN_TOKEN --server-pid PID
//                    [--nodes 1250] [--gpus 8] [--heartbeat-ms 1000]
//                    [--jobs 2000] [--run-ms 1000] [--idle-s 10] [--timeout-s 300]
// Prints RESULT lines; exits 1 if a node was declared lost or the array did
// not finish (so a test can run it small).
#include <utility>  // before Boost 1.74's asio, which needs std::exchange under C++20

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <httplib.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using nlohmann::json;
using Clock = std::chrono::steady_clock;

namespace {

struct Options {
  std::string host = "127.0.0.1";
  std::string port = "7070";
  std::string token;
  int server_pid = 0;
  int nodes = 1250;
  int gpus = 8;
  int heartbeat_ms = 1000;
  int jobs = 2000;
  int run_ms = 1000;
  int idle_s = 10;
  int timeout_s = 300;
};

double Ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

// Latency samples, thread-safe.
class Samples {
 public:
  void Add(double ms) {
    std::lock_guard<std::mutex> lock(mu_);
    v_.push_back(ms);
  }
  std::string Summary() {
    std::lock_guard<std::mutex> lock(mu_);
    if (v_.empty()) return "n=0";
    std::sort(v_.begin(), v_.end());
    char buf[128];
    std::snprintf(buf, sizeof(buf), "n=%zu p50=%.1fms p99=%.1fms max=%.1fms", v_.size(), v_[v_.size() / 2],
                  v_[std::min(v_.size() - 1, v_.size() * 99 / 100)], v_.back());
    return buf;
  }
  void Clear() {
    std::lock_guard<std::mutex> lock(mu_);
    v_.clear();
  }

 private:
  std::mutex mu_;
  std::vector<double> v_;
};

struct Shared {
  Options opt;
  asio::io_context& ioc;
  tcp::endpoint server;
  Samples heartbeat_rtt;    // answers to heartbeats that did not wait (exit reports)
  Samples bind_to_agent;    // array submitted -> assignment seen by its node
  std::atomic<int64_t> exits{0};
  std::atomic<int64_t> started{0};
  std::atomic<int64_t> errors{0};
  std::atomic<int> registered{0};
  std::atomic<bool> stop{false};
  Clock::time_point array_at{};
  std::atomic<bool> array_submitted{false};
};

// One emulated node: a long-poll connection and a report connection.
class Node : public std::enable_shared_from_this<Node> {
 public:
  Node(Shared& s, int index, std::string token)
      : s_(s), name_("swarm-" + std::to_string(index)), token_(std::move(token)), poll_(s.ioc), report_(s.ioc),
        timer_(s.ioc) {}

  void Start() { Register(); }

 private:
  struct Conn {
    explicit Conn(asio::io_context& ioc) : stream(ioc) {}
    beast::tcp_stream stream;
    beast::flat_buffer buffer;
    http::request<http::string_body> req;
    http::response<http::string_body> res;
    bool open = false;
    bool busy = false;
  };

  // POST `body` to `target` on `c`, then `done(status, body)` (status 0: transport error).
  void Post(Conn& c, const std::string& target, std::string body, int timeout_ms,
            std::function<void(int, const std::string&)> done) {
    c.busy = true;
    c.req = {http::verb::post, target, 11};
    c.req.set(http::field::host, s_.opt.host);
    c.req.set(http::field::authorization, "Bearer " + token_);
    c.req.set(http::field::content_type, "application/json");
    c.req.keep_alive(true);
    c.req.body() = std::move(body);
    c.req.prepare_payload();
    auto self = shared_from_this();
    auto send = [this, self, &c, timeout_ms, done] {
      c.stream.expires_after(std::chrono::milliseconds(timeout_ms));
      http::async_write(c.stream, c.req, [this, self, &c, done](beast::error_code ec, std::size_t) {
        if (ec) return Failed(c, done);
        c.res = {};
        http::async_read(c.stream, c.buffer, c.res, [this, self, &c, done](beast::error_code e, std::size_t) {
          if (e) return Failed(c, done);
          c.busy = false;
          if (!c.res.keep_alive()) {
            beast::error_code ignored;
            c.stream.socket().close(ignored);
            c.open = false;
          }
          done(static_cast<int>(c.res.result_int()), c.res.body());
        });
      });
    };
    if (c.open) return send();
    c.stream.expires_after(std::chrono::seconds(10));
    c.stream.async_connect(s_.server, [this, self, &c, send, done](beast::error_code ec) {
      if (ec) return Failed(c, done);
      c.open = true;
      send();
    });
  }
  void Failed(Conn& c, const std::function<void(int, const std::string&)>& done) {
    beast::error_code ignored;
    c.stream.socket().close(ignored);
    c.open = false;
    c.busy = false;
    c.buffer.clear();
    ++s_.errors;
    done(0, "");
  }

  void After(int ms, std::function<void()> fn) {
    auto t = std::make_shared<asio::steady_timer>(s_.ioc, std::chrono::milliseconds(ms));
    t->async_wait([t, fn = std::move(fn)](beast::error_code) { fn(); });
  }

  void Register() {
    json node{{"name", name_},          {"gpu_model", "H100"}, {"gpus", s_.opt.gpus}, {"gpu_memory", "80Gi"},
              {"nvlink_islands", 1},    {"cpu", "128"},       {"memory", "1Ti"},
              {"labels", {{"hostname", name_}, {"gpu_model", "H100"}}}};
    Post(poll_, "/v1/agents/register", json{{"node", node}, {"simulated", true}, {"address", "127.0.0.1"}}.dump(), 10000,
         [this, self = shared_from_this()](int status, const std::string&) {
           if (status != 200) return After(1000, [this, self] { Register(); });
           ++s_.registered;
           Poll();
         });
  }

  json Report() {
    json gpus = json::array();
    for (int g = 0; g < s_.opt.gpus; ++g) {
      gpus.push_back({{"index", g}, {"utilization_pct", busy_.count(g) ? 90 : 0}, {"memory_used_mib", 0},
                      {"temperature_c", 40}, {"power_w", 100}, {"healthy", true}, {"health_reason", ""}});
    }
    json tasks = json::array();
    for (const auto& [key, t] : tasks_) {
      tasks.push_back({{"job", t.job}, {"task", t.task}, {"replica", t.replica}, {"attempt", t.attempt},
                       {"state", t.exited ? "exited" : "running"}, {"exit_code", 0}, {"exit_reason", ""}});
    }
    return json{{"node", name_}, {"gpus", gpus}, {"tasks", tasks}};
  }

  // The long poll: held by the server until this node's tasks change.
  void Poll() {
    if (s_.stop) return;
    json body = Report();
    body["wait_ms"] = s_.opt.heartbeat_ms;
    Post(poll_, "/v1/agents/heartbeat", body.dump(), s_.opt.heartbeat_ms + 15000,
         [this, self = shared_from_this()](int status, const std::string& text) {
           if (status == 200) Apply(text);
           if (status == 404) return Register();
           if (status != 200) return After(s_.opt.heartbeat_ms, [this, self] { Poll(); });
           After(10, [this, self] { Poll(); });
         });
  }

  // An exit is reported at once, on the second connection.
  void ReportNow() {
    if (report_.busy) {
      again_ = true;
      return;
    }
    json body = Report();
    body["wait_ms"] = 0;
    const auto t0 = Clock::now();
    Post(report_, "/v1/agents/heartbeat", body.dump(), 15000,
         [this, self = shared_from_this(), t0](int status, const std::string& text) {
           if (status == 200) {
             s_.heartbeat_rtt.Add(Ms(Clock::now() - t0));
             Apply(text);
           }
           if (again_ || status != 200) {
             again_ = false;
             After(status == 200 ? 0 : 200, [this, self] { ReportNow(); });
           }
         });
  }

  struct Task {
    uint64_t job = 0;
    int task = 0;
    int replica = 0;
    int attempt = 0;
    std::vector<int> gpus;
    bool exited = false;
  };

  void Apply(const std::string& text) {
    json body = json::parse(text, nullptr, false);
    if (body.is_discarded()) return;
    const uint64_t revision = body.value("revision", uint64_t{0});
    if (revision < revision_) return;
    revision_ = revision;
    std::set<std::string> wanted;
    for (const auto& a : body.value("tasks", json::array())) {
      const std::string key = std::to_string(a.value("job", uint64_t{0})) + "/" + std::to_string(a.value("task", 0)) + "/" +
                              std::to_string(a.value("replica", 0)) + "/" + std::to_string(a.value("attempt", 0));
      wanted.insert(key);
      if (tasks_.count(key) || done_.count(key)) continue;
      Task t{a.value("job", uint64_t{0}), a.value("task", 0), a.value("replica", 0), a.value("attempt", 0), {}, false};
      for (int g : a.value("gpus", std::vector<int>{})) {
        t.gpus.push_back(g);
        busy_.insert(g);
      }
      tasks_[key] = t;
      ++s_.started;
      if (s_.array_submitted) s_.bind_to_agent.Add(Ms(Clock::now() - s_.array_at));
      After(s_.opt.run_ms, [this, self = shared_from_this(), key] {
        auto it = tasks_.find(key);
        if (it == tasks_.end() || it->second.exited) return;
        it->second.exited = true;
        for (int g : it->second.gpus) busy_.erase(g);
        ++s_.exits;
        ReportNow();
      });
    }
    // Forget what the server no longer lists (reported and ended).
    for (auto it = tasks_.begin(); it != tasks_.end();) {
      if (!wanted.count(it->first) && it->second.exited) {
        done_.insert(it->first);
        it = tasks_.erase(it);
      } else {
        ++it;
      }
    }
  }

  Shared& s_;
  std::string name_;
  std::string token_;
  Conn poll_, report_;
  asio::steady_timer timer_;
  std::map<std::string, Task> tasks_;
  std::set<std::string> done_;
  std::set<int> busy_;
  uint64_t revision_ = 0;
  bool again_ = false;
};

// utime + stime of `pid` in seconds, and its RSS in MiB.
std::pair<double, double> CpuAndRss(int pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  std::getline(stat, line);
  const size_t close = line.rfind(')');
  std::istringstream rest(close == std::string::npos ? "" : line.substr(close + 2));
  std::string f;
  double ut = 0, st = 0;
  for (int i = 0; i < 11; ++i) rest >> f;
  rest >> ut >> st;
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  double rss = 0;
  while (std::getline(status, line)) {
    if (line.rfind("VmRSS:", 0) == 0) rss = std::stod(line.substr(6)) / 1024;
  }
  const double tick = static_cast<double>(sysconf(_SC_CLK_TCK));
  return {(ut + st) / tick, rss};
}

int LostNodes(httplib::Client& admin) {
  auto r = admin.Get("/v1/nodes");
  if (!r || r->status != 200) return -1;
  int lost = 0;
  json doc = json::parse(r->body, nullptr, false);
  if (doc.is_discarded()) return -1;
  for (const auto& n : doc["nodes"]) lost += n.value("state", "") == "lost";
  return lost;
}

}  // namespace

int main(int argc, char** argv) {
  setvbuf(stdout, nullptr, _IOLBF, 0);
  Options opt;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i], v = argv[i + 1];
    if (a == "--server") {
      const size_t colon = v.rfind(':');
      opt.host = v.substr(v.find("//") + 2, colon - v.find("//") - 2);
      opt.port = v.substr(colon + 1);
    } else if (a == "--token") opt.token = v;
    else if (a == "--server-pid") opt.server_pid = std::stoi(v);
    else if (a == "--nodes") opt.nodes = std::stoi(v);
    else if (a == "--gpus") opt.gpus = std::stoi(v);
    else if (a == "--heartbeat-ms") opt.heartbeat_ms = std::stoi(v);
    else if (a == "--jobs") opt.jobs = std::stoi(v);
    else if (a == "--run-ms") opt.run_ms = std::stoi(v);
    else if (a == "--idle-s") opt.idle_s = std::stoi(v);
    else if (a == "--timeout-s") opt.timeout_s = std::stoi(v);
    else {
      std::fprintf(stderr, "agent_swarm: unknown flag %s\n", a.c_str());
      return 2;
    }
  }
  httplib::Client admin(opt.host, std::stoi(opt.port));
  admin.set_bearer_token_auth(opt.token);
  admin.set_read_timeout(60, 0);

  // One agent token per node, as real agents have (and rate buckets per node).
  std::vector<std::string> tokens(static_cast<size_t>(opt.nodes));
  {
    std::atomic<int> next{0};
    std::vector<std::thread> makers;
    for (int w = 0; w < 8; ++w) {
      makers.emplace_back([&] {
        httplib::Client c(opt.host, std::stoi(opt.port));
        c.set_bearer_token_auth(opt.token);
        for (int i; (i = next++) < opt.nodes;) {
          const std::string name = "swarm-" + std::to_string(i);
          auto r = c.Post("/v1/tokens", json{{"user", name}, {"role", "agent"}, {"node", name}}.dump(), "application/json");
          if (r && r->status == 201) tokens[static_cast<size_t>(i)] = json::parse(r->body)["token"];
        }
      });
    }
    for (auto& t : makers) t.join();
  }
  asio::io_context ioc;
  Shared s{opt, ioc, {}};
  s.server = tcp::endpoint(asio::ip::make_address(opt.host == "localhost" ? "127.0.0.1" : opt.host),
                           static_cast<unsigned short>(std::stoi(opt.port)));
  std::vector<std::shared_ptr<Node>> nodes;
  for (int i = 0; i < opt.nodes; ++i) {
    nodes.push_back(std::make_shared<Node>(s, i, tokens[static_cast<size_t>(i)]));
    nodes.back()->Start();
  }
  std::thread io([&] {
    auto guard = asio::make_work_guard(ioc);
    ioc.run();
  });

  const auto t0 = Clock::now();
  while (s.registered < opt.nodes && Clock::now() - t0 < std::chrono::seconds(opt.timeout_s)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  std::printf("RESULT nodes=%d registered=%d in %.1fs\n", opt.nodes, s.registered.load(), Ms(Clock::now() - t0) / 1000);

  // /healthz sampled every 50 ms throughout.
  Samples healthz;
  std::atomic<bool> sampling{true};
  std::thread sampler([&] {
    httplib::Client h(opt.host, std::stoi(opt.port));
    while (sampling) {
      const auto a = Clock::now();
      auto r = h.Get("/healthz");
      if (r && r->status == 200) healthz.Add(Ms(Clock::now() - a));
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  });

  // Idle: connected, heartbeating, nothing to do.
  auto [cpu0, rss0] = CpuAndRss(opt.server_pid);
  std::this_thread::sleep_for(std::chrono::seconds(opt.idle_s));
  auto [cpu1, rss1] = CpuAndRss(opt.server_pid);
  const int lost_idle = LostNodes(admin);
  std::printf("RESULT idle server_cpu=%.1f%% rss=%.0fMiB lost_nodes=%d healthz %s\n",
              100.0 * (cpu1 - cpu0) / opt.idle_s, rss1, lost_idle, healthz.Summary().c_str());
  healthz.Clear();

  // Load: an array of 1-GPU jobs that each "run" run_ms.
  s.array_at = Clock::now();
  s.array_submitted = true;
  auto r = admin.Post("/v1/jobs?count=" + std::to_string(opt.jobs),
                      json{{"name", "swarm"}, {"tasks", {{{"gpus", 1}, {"command", {"true"}}}}}}.dump(), "application/json");
  if (!r || r->status != 201) {
    std::printf("RESULT array refused: %s\n", r ? r->body.c_str() : "no answer");
    sampling = false;
    sampler.join();
    s.stop = true;
    ioc.stop();
    io.join();
    return 1;
  }
  const auto accepted = Clock::now();
  const int64_t first = json::parse(r->body).value("id", int64_t{0});
  (void)first;
  while (s.exits < opt.jobs && Clock::now() - s.array_at < std::chrono::seconds(opt.timeout_s)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  const double seconds = Ms(Clock::now() - s.array_at) / 1000;
  auto [cpu2, rss2] = CpuAndRss(opt.server_pid);
  // All exits reported: wait until the server shows nothing pending or running.
  int64_t live = -1;
  for (int i = 0; i < 400; ++i) {
    auto m = admin.Get("/metrics");
    if (m && m->status == 200) {
      live = 0;
      std::istringstream lines(m->body);
      std::string line;
      while (std::getline(lines, line)) {
        if (line.rfind("rota_queue_pending_jobs{", 0) == 0 || line.rfind("rota_queue_running_jobs{", 0) == 0) {
          live += std::stoll(line.substr(line.rfind(' ') + 1));
        }
      }
    }
    if (live == 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  const int64_t finished = live == 0 ? opt.jobs : -1;
  const int lost_load = LostNodes(admin);
  std::printf("RESULT array jobs=%d accepted_in=%.2fs done_in=%.2fs jobs_per_s=%.0f exits_reported=%lld "
              "server_finished=%lld server_cpu=%.1f%% rss=%.0fMiB lost_nodes=%d transport_errors=%lld\n",
              opt.jobs, Ms(accepted - s.array_at) / 1000, seconds, opt.jobs / seconds, static_cast<long long>(s.exits.load()),
              static_cast<long long>(finished), 100.0 * (cpu2 - cpu1) / std::max(0.001, seconds), rss2, lost_load,
              static_cast<long long>(s.errors.load()));
  std::printf("RESULT bind_to_agent %s\n", s.bind_to_agent.Summary().c_str());
  std::printf("RESULT exit_report_rtt %s\n", s.heartbeat_rtt.Summary().c_str());
  std::printf("RESULT healthz_under_load %s\n", healthz.Summary().c_str());
  sampling = false;
  sampler.join();
  s.stop = true;
  ioc.stop();
  io.join();
  const bool ok = lost_idle == 0 && lost_load == 0 && s.exits >= opt.jobs && finished >= opt.jobs;
  return ok ? 0 : 1;
}
