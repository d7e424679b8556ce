// agent_swarm: N emulated nodes in one process that speak the real agent
// protocol over real sockets (like Kubernetes' kubemark or KWOK): each
// registers with its own agent token and, with --transport watch (what
// `rota agent` does), holds a watch stream (/v1/agents/watch) and sends a
// heartbeat with telemetry for its GPUs every --heartbeat-ms; with
// --transport poll it long-polls /v1/agents/heartbeat instead (the older
// transport). It "runs" the tasks it is given for --run-ms and reports
// their exits at once. Meanwhile it submits a job array of 1-GPU jobs,
// samples /healthz, and reads the server's CPU and RSS from /proc.
//
// With --restart-cmd, it then starts a 2-node gang that runs until the end,
// runs the command (which must kill -9 the server and start it again on the
// same port and data, printing the new server's PID as its last line), and
// measures how long until every node is registered and watching again,
// then whether any node was declared lost or the gang restarted after one
// --grace-s (the node timeout, plus a margin).
//
// Nodes connect from 127.0.1.1..127.0.1.50 (loopback), so that 25,000
// connections fit the ephemeral ports and the server's per-address cap.
//
// usage: agent_swarm --server URL --token ADMIN_TOKEN --server-pid PID
//                    [--nodes 1250] [--gpus 8] [--transport watch|poll] [--heartbeat-ms 10000]
//                    [--reports keep|fresh]
//                    [--jobs 2000] [--run-ms 1000] [--idle-s 10] [--timeout-s 300]
//                    [--restart-cmd CMD] [--grace-s 35]
// Prints RESULT lines; exits 1 if a node was declared lost, the array did
// not finish, or (with --restart-cmd) a node was not back or the gang
// restarted (so a test can run it small).
#include <utility>  // before Boost 1.74's asio, which needs std::exchange under C++20

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <httplib.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <limits>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
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
  int heartbeat_ms = 10000;
  bool watch = true;
  bool keep_reports = true;  // --reports keep|fresh
  std::string restart_cmd;
  int grace_s = 35;
  int max_reports = 4000;
  int idle_sockets = 0;  // held open without a request, throughout
  int slow_sockets = 0;  // held open sending a header byte a second, throughout
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
  Samples bind_to_agent;    // bound on the server (bound_at_us) -> assignment seen by its node
  Samples submit_to_agent;  // array submitted -> assignment seen by its node
  std::atomic<int64_t> exits{0};
  std::atomic<int64_t> started{0};
  std::atomic<int64_t> errors{0};
  std::atomic<int> registered{0};
  std::atomic<int> watching{0};       // nodes whose watch stream is open
  std::atomic<int> synced{0};         // of those, nodes that have applied the stream's first event
  // The most this process's own loop ran late (a timer every 20 ms; ms):
  // its share of every latency it measures (TakeLag starts a new window).
  std::atomic<double> lag_max{0};
  double TakeLag() { return lag_max.exchange(0); }
  std::atomic<int> reregistered{0};   // registrations since the restart
  std::atomic<bool> restarted{false};
  std::atomic<bool> stop{false};
  Clock::time_point array_at{};
  // Reports in flight across the swarm are capped (--max-reports): the
  // emulator's own descriptors are limited (12,500 nodes are 12,500
  // machines, each with its own), and a node never has two in flight.
  int max_reports = 4000;
  int reports_in_flight = 0;
  std::deque<std::function<void()>> report_queue;
  void Acquire(std::function<void()> fn) {
    if (reports_in_flight < max_reports) {
      ++reports_in_flight;
      return fn();
    }
    report_queue.push_back(std::move(fn));
  }
  void Release() {
    --reports_in_flight;
    if (report_queue.empty()) return;
    ++reports_in_flight;
    asio::post(ioc, std::move(report_queue.front()));
    report_queue.pop_front();
  }
  std::atomic<bool> array_submitted{false};
};

// One emulated node: a long-poll connection and a report connection.
class Node : public std::enable_shared_from_this<Node> {
 public:
  Node(Shared& s, int index, std::string token)
      : s_(s), name_("swarm-" + std::to_string(index)), token_(std::move(token)), poll_(s.ioc), report_(s.ioc),
        timer_(s.ioc), watch_(s.ioc),
        source_(asio::ip::make_address_v4("127.0.1." + std::to_string(1 + index % 50))) {
    // Each node's own stream, seeded through a seed sequence: minstd_rand
    // seeded with the index itself makes its first draw 48271 x index, so
    // the nodes' first heartbeats (and so every later one) fell within 0-2.8 s
    // of their registrations in index order, and 12,500 nodes reported in
    // 4-second bursts every 10 s instead of 1,250 a second.
    std::seed_seq seed{static_cast<unsigned>(index), 0x5eedu};
    rng_.seed(seed);
  }

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
    // In watch mode reports go on a kept-alive connection, as `rota agent`
    // sends them (--reports fresh: a new connection each, as it did before;
    // a node then holds one socket, its watch, between reports), and the
    // registration on a fresh one.
    c.req.keep_alive(!s_.opt.watch || (&c == &report_ && s_.opt.keep_reports));
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
    if (!Open(c.stream)) return Failed(c, done);
    c.stream.expires_after(std::chrono::seconds(10));
    c.stream.async_connect(s_.server, [this, self, &c, send, done](beast::error_code ec) {
      if (ec) return Failed(c, done);
      c.open = true;
      send();
    });
  }

  // Opens the socket from this node's loopback source address.
  bool Open(beast::tcp_stream& stream) {
    beast::error_code ec;
    stream.socket().close(ec);
    stream.socket().open(tcp::v4(), ec);
    if (ec) return false;
    const int one = 1;
    setsockopt(stream.socket().native_handle(), IPPROTO_IP, 24 /* IP_BIND_ADDRESS_NO_PORT */, &one, sizeof(one));
    stream.socket().bind(tcp::endpoint(source_, 0), ec);
    return !ec;
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
    if (registering_) return;
    registering_ = true;
    json node{{"name", name_},          {"gpu_model", "H100"}, {"gpus", s_.opt.gpus}, {"gpu_memory", "80Gi"},
              {"nvlink_islands", 1},    {"cpu", "128"},       {"memory", "1Ti"},
              {"labels", {{"hostname", name_}, {"gpu_model", "H100"}}}};
    Post(poll_, "/v1/agents/register", json{{"node", node}, {"simulated", true}, {"address", "127.0.0.1"}}.dump(), 10000,
         [this, self = shared_from_this()](int status, const std::string&) {
           registering_ = false;
           if (status != 200) return After(Backoff(failures_++), [this, self] { Register(); });
           failures_ = 0;
           if (!ever_registered_) ++s_.registered;
           ever_registered_ = true;
           if (s_.restarted) ++s_.reregistered;
           if (!s_.opt.watch) return Poll();
           Watch();
           if (!beating_) {
             beating_ = true;
             After(std::uniform_int_distribution<int>(0, s_.opt.heartbeat_ms)(rng_), [this, self] { Beat(); });
           }
         });
  }

  // 100 ms doubling to 5 s, jittered +-50% (what `rota agent` does).
  int Backoff(int failures) {
    const int base = std::min(5000, 100 << std::min(failures, 6));
    return std::uniform_int_distribution<int>(base / 2, base + base / 2)(rng_);
  }

  // The periodic heartbeat (watch transport): a report on the report connection.
  void Beat() {
    if (s_.stop) return;
    ReportNow();
    After(s_.opt.heartbeat_ms, [this, self = shared_from_this()] { Beat(); });
  }

  // The watch: one GET whose chunked answer carries a line per change.
  void Watch() {
    if (watch_open_ || s_.stop) return;
    watch_open_ = true;
    watch_parser_.emplace();
    watch_parser_->body_limit(std::numeric_limits<std::uint64_t>::max());
    watch_buffer_.clear();
    watch_req_ = {http::verb::get, "/v1/agents/watch?node=" + name_, 11};
    watch_req_.set(http::field::host, s_.opt.host);
    watch_req_.set(http::field::authorization, "Bearer " + token_);
    auto self = shared_from_this();
    if (!Open(watch_.stream)) return WatchFailed();
    watch_.stream.expires_after(std::chrono::seconds(10));
    watch_.stream.async_connect(s_.server, [this, self](beast::error_code ec) {
      if (ec) return WatchFailed();
      http::async_write(watch_.stream, watch_req_, [this, self](beast::error_code e, std::size_t) {
        if (e) return WatchFailed();
        http::async_read_header(watch_.stream, watch_buffer_, *watch_parser_, [this, self](beast::error_code e2, std::size_t) {
          if (e2) return WatchFailed();
          const unsigned status = watch_parser_->get().result_int();
          if (status == 404) {
            CloseWatch();
            return Register();
          }
          if (status != 200) return WatchFailed();
          ++s_.watching;
          counted_ = true;
          ReadWatch();
        });
      });
    });
  }

  void ReadWatch() {
    watch_.stream.expires_after(std::chrono::seconds(75));  // the server writes every 20 s at least
    http::async_read_some(watch_.stream, watch_buffer_, *watch_parser_,
                          [this, self = shared_from_this()](beast::error_code ec, std::size_t) {
                            std::string& body = watch_parser_->get().body();
                            size_t nl;
                            while ((nl = body.find('\n')) != std::string::npos) {
                              const std::string line = body.substr(0, nl);
                              body.erase(0, nl + 1);
                              if (!line.empty()) {
                                watch_failures_ = 0;
                                Apply(line);
                                if (counted_ && !synced_) ++s_.synced;
                                synced_ = counted_;
                              }
                            }
                            if (ec || watch_parser_->is_done()) return WatchFailed();
                            ReadWatch();
                          });
  }

  void CloseWatch() {
    beast::error_code ignored;
    watch_.stream.socket().close(ignored);
    watch_open_ = false;
    if (counted_) --s_.watching;
    if (synced_) --s_.synced;
    counted_ = false;
    synced_ = false;
  }

  void WatchFailed() {
    CloseWatch();
    if (s_.stop) return;
    ++s_.errors;
    After(Backoff(watch_failures_++), [this, self = shared_from_this()] { Watch(); });
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
    if (report_.busy || queued_) {
      again_ = true;
      return;
    }
    queued_ = true;
    s_.Acquire([this, self = shared_from_this()] {
      queued_ = false;
      SendReport();
    });
  }

  void SendReport() {
    json body = Report();
    body["wait_ms"] = 0;
    const auto t0 = Clock::now();
    Post(report_, "/v1/agents/heartbeat", body.dump(), 15000,
         [this, self = shared_from_this(), t0](int status, const std::string& text) {
           s_.Release();
           if (status == 200) {
             s_.heartbeat_rtt.Add(Ms(Clock::now() - t0));
             Apply(text);
           }
           if (status == 404) {
             again_ = false;
             return Register();  // the server restarted: the watch finds out too
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
      if (s_.array_submitted) {
        s_.submit_to_agent.Add(Ms(Clock::now() - s_.array_at));
        // The server's clock and this one are the same machine's.
        const int64_t bound = a.value("bound_at_us", int64_t{0});
        const int64_t now_us = std::chrono::duration_cast<std::chrono::microseconds>(
                                   std::chrono::system_clock::now().time_since_epoch()).count();
        if (bound > 0) s_.bind_to_agent.Add(static_cast<double>(now_us - bound) / 1000);
      }
      if (a.value("job_name", std::string()) == "hold") continue;  // runs until the end (the restart's gang)
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
  Conn watch_;
  asio::ip::address_v4 source_;
  std::minstd_rand rng_;
  http::request<http::empty_body> watch_req_;
  beast::flat_buffer watch_buffer_;
  std::optional<http::response_parser<http::string_body>> watch_parser_;
  bool watch_open_ = false;
  bool counted_ = false;
  bool registering_ = false;
  bool ever_registered_ = false;
  bool synced_ = false;  // counted in s_.synced
  bool beating_ = false;
  bool queued_ = false;  // a report waits for one of the swarm's report slots
  int failures_ = 0;
  int watch_failures_ = 0;
};

// A client that holds a connection without finishing a request (what a
// hostile or broken client does): an idle one sends nothing, a slow one a
// header byte a second. The server closes each at its header deadline;
// it reconnects at once, so that the swarm always holds its count of them.
class Pest : public std::enable_shared_from_this<Pest> {
 public:
  Pest(Shared& s, bool slow, std::atomic<int>& held) : s_(s), slow_(slow), held_(held), stream_(s.ioc), timer_(s.ioc) {}

  void Start() {
    if (s_.stop) return;
    beast::error_code ec;
    stream_.socket().close(ec);
    stream_.socket().open(tcp::v4(), ec);
    const int one = 1;
    setsockopt(stream_.socket().native_handle(), IPPROTO_IP, 24 /* IP_BIND_ADDRESS_NO_PORT */, &one, sizeof(one));
    stream_.socket().bind(tcp::endpoint(asio::ip::make_address_v4("127.0.2.1"), 0), ec);
    stream_.socket().async_connect(s_.server, [self = shared_from_this()](beast::error_code e) {
      if (e) return self->Again();
      ++self->held_;
      self->connected_ = true;
      self->stream_.socket().async_read_some(asio::buffer(self->sink_), [self](beast::error_code, std::size_t) {
        self->Again();  // the server closed it (or answered): take another
      });
      if (self->slow_) self->Drip(true);
    });
  }

 private:
  void Drip(bool first) {
    auto text = std::make_shared<std::string>(first ? "GET /healthz HTTP/1.1\r\nX-Slow: " : "a");
    asio::async_write(stream_.socket(), asio::buffer(*text), [self = shared_from_this(), text](beast::error_code e, std::size_t) {
      if (e) return;
      self->timer_.expires_after(std::chrono::seconds(1));
      self->timer_.async_wait([self](beast::error_code w) {
        if (!w && self->connected_) self->Drip(false);
      });
    });
  }
  void Again() {
    if (connected_) --held_;
    connected_ = false;
    timer_.cancel();
    timer_.expires_after(std::chrono::milliseconds(50));
    timer_.async_wait([self = shared_from_this()](beast::error_code) { self->Start(); });
  }

  Shared& s_;
  bool slow_;
  std::atomic<int>& held_;
  beast::tcp_stream stream_;
  asio::steady_timer timer_;
  std::array<char, 512> sink_{};
  bool connected_ = false;
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

// The most the server's HTTP loop ran late since the last call (its
// /metrics gauge, which each scrape resets), in ms; -1 if unknown. Tells the
// server's own delays from the client's in a health check's latency.
// `scrape` gets how long the scrape took (ms) and its size (MB): at 12,500
// nodes a cost of its own.
// `body` gets the scrape (for HistogramSummary).
double LoopLagMs(httplib::Client& admin, std::pair<double, double>* scrape = nullptr, std::string* body = nullptr) {
  const auto a = Clock::now();
  auto r = admin.Get("/metrics");
  if (!r || r->status != 200) return -1;
  if (scrape != nullptr) *scrape = {Ms(Clock::now() - a), static_cast<double>(r->body.size()) / 1e6};
  if (body != nullptr) *body = r->body;
  const std::string key = "\nrota_http_loop_lag_max_seconds ";
  const size_t at = r->body.find(key);
  return at == std::string::npos ? -1 : 1000 * std::atof(r->body.c_str() + at + key.size());
}

// A server histogram (`name`, in seconds) between two scrapes: its count,
// mean, and p50/p99 interpolated within buckets (as Prometheus'
// histogram_quantile does), in ms. `before` may be empty (from the start).
std::string HistogramSummary(const std::string& name, const std::string& before, const std::string& after) {
  auto read = [&](const std::string& metrics, std::vector<std::pair<double, double>>* buckets, double* sum) {
    const std::string key = "\n" + name + "_bucket{le=\"";
    for (size_t at = metrics.find(key); at != std::string::npos; at = metrics.find(key, at + 1)) {
      const char* le = metrics.c_str() + at + key.size();
      const size_t close = metrics.find("} ", at);
      if (close == std::string::npos) break;
      const double bound = std::strncmp(le, "+Inf", 4) == 0 ? HUGE_VAL : std::atof(le);
      buckets->emplace_back(bound, std::atof(metrics.c_str() + close + 2));  // (le, cumulative count)
    }
    const std::string sum_key = "\n" + name + "_sum ";
    const size_t sum_at = metrics.find(sum_key);
    if (sum_at == std::string::npos) return false;
    *sum = std::atof(metrics.c_str() + sum_at + sum_key.size());
    return !buckets->empty();
  };
  std::vector<std::pair<double, double>> buckets, base;
  double sum = 0, base_sum = 0;
  if (!read(after, &buckets, &sum)) return "unknown";
  const bool windowed = read(before, &base, &base_sum) && base.size() == buckets.size();
  if (windowed) {
    for (size_t i = 0; i < buckets.size(); ++i) buckets[i].second -= base[i].second;
    sum -= base_sum;
  }
  if (buckets.back().second == 0) return "n=0";
  const double n = buckets.back().second;
  auto quantile = [&](double q) {
    const double rank = q * n;
    double lo = 0, below = 0;
    for (const auto& [le, count] : buckets) {
      if (count >= rank) {
        if (std::isinf(le)) return lo;  // past the last bound: its bound, as Prometheus
        return lo + (le - lo) * (count > below ? (rank - below) / (count - below) : 1);
      }
      lo = le;
      below = count;
    }
    return lo;
  };
  char out[160];
  std::snprintf(out, sizeof out, "n=%.0f mean=%.1fms p50~%.1fms p99~%.1fms%s", n, n > 0 ? 1000 * sum / n : 0,
                1000 * quantile(0.5), 1000 * quantile(0.99), windowed ? "" : " (since the server started)");
  return out;
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
    else if (a == "--transport") opt.watch = v == "watch";
    else if (a == "--reports") opt.keep_reports = v == "keep";
    else if (a == "--restart-cmd") opt.restart_cmd = v;
    else if (a == "--grace-s") opt.grace_s = std::stoi(v);
    else if (a == "--idle-sockets") opt.idle_sockets = std::stoi(v);
    else if (a == "--max-reports") opt.max_reports = std::stoi(v);
    else if (a == "--slow-sockets") opt.slow_sockets = std::stoi(v);
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
  s.max_reports = opt.max_reports;
  s.server = tcp::endpoint(asio::ip::make_address(opt.host == "localhost" ? "127.0.0.1" : opt.host),
                           static_cast<unsigned short>(std::stoi(opt.port)));
  std::vector<std::shared_ptr<Node>> nodes;
  for (int i = 0; i < opt.nodes; ++i) {
    nodes.push_back(std::make_shared<Node>(s, i, tokens[static_cast<size_t>(i)]));
    nodes.back()->Start();
  }
  asio::steady_timer lag_timer(ioc);
  std::function<void()> lag_tick = [&] {
    lag_timer.expires_after(std::chrono::milliseconds(20));
    lag_timer.async_wait([&](beast::error_code ec) {
      if (ec || s.stop) return;
      const double late = Ms(Clock::now() - lag_timer.expiry());
      double seen = s.lag_max.load();
      while (late > seen && !s.lag_max.compare_exchange_weak(seen, late)) {
      }
      lag_tick();
    });
  };
  asio::post(ioc, lag_tick);
  std::thread io([&] {
    auto guard = asio::make_work_guard(ioc);
    ioc.run();
  });

  const auto t0 = Clock::now();
  while (s.registered < opt.nodes && Clock::now() - t0 < std::chrono::seconds(opt.timeout_s)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  std::printf("RESULT nodes=%d registered=%d in %.1fs\n", opt.nodes, s.registered.load(), Ms(Clock::now() - t0) / 1000);
  // The idle figures are the steady state: every watch open and its first
  // event (the node's tasks) applied, not the connection burst.
  if (opt.watch) {
    while (s.synced < opt.nodes && Clock::now() - t0 < std::chrono::seconds(opt.timeout_s)) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    std::printf("RESULT watching=%d synced=%d in %.1fs\n", s.watching.load(), s.synced.load(), Ms(Clock::now() - t0) / 1000);
  }

  // Hostile clients, held from here to the end.
  std::atomic<int> pests_held{0};
  std::vector<std::shared_ptr<Pest>> pests;
  for (int i = 0; i < opt.idle_sockets + opt.slow_sockets; ++i) {
    pests.push_back(std::make_shared<Pest>(s, i >= opt.idle_sockets, pests_held));
    asio::post(ioc, [p = pests.back()] { p->Start(); });
  }
  if (!pests.empty()) {
    std::this_thread::sleep_for(std::chrono::seconds(1));
    std::printf("RESULT pests idle=%d slow=%d held=%d\n", opt.idle_sockets, opt.slow_sockets, pests_held.load());
  }

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

  // Idle: connected, heartbeating, nothing to do. The /healthz window opens
  // after the scrape that resets the server's lag gauge and closes before
  // the swarm's own scrape and node listing (at 12,500 nodes 66 and 28 MB):
  // what those do to /healthz is reported on its own (admin_reads).
  LoopLagMs(admin);
  s.TakeLag();
  healthz.Clear();
  auto [cpu0, rss0] = CpuAndRss(opt.server_pid);
  std::this_thread::sleep_for(std::chrono::seconds(opt.idle_s));
  auto [cpu1, rss1] = CpuAndRss(opt.server_pid);
  int lost_idle = 0;
  std::string before_array;  // the server's metrics then
  {
    const std::string summary = healthz.Summary();
    healthz.Clear();
    std::pair<double, double> scrape{-1, -1};
    const double server_lag = LoopLagMs(admin, &scrape), swarm_lag = s.TakeLag();
    const auto listed_at = Clock::now();
    lost_idle = LostNodes(admin);
    const double list_ms = Ms(Clock::now() - listed_at);
    // (Their lags too: the lags under load then start from the loop's own.)
    const double reads_lag = LoopLagMs(admin, nullptr, &before_array), reads_swarm_lag = s.TakeLag();
    std::printf("RESULT idle server_cpu=%.1f%% rss=%.0fMiB lost_nodes=%d healthz %s loop_lag_max=%.1fms swarm_lag_max=%.1fms\n",
                100.0 * (cpu1 - cpu0) / opt.idle_s, rss1, lost_idle, summary.c_str(), server_lag, swarm_lag);
    std::printf("RESULT admin_reads metrics_scrape=%.0fms/%.1fMB node_list=%.0fms healthz meanwhile %s loop_lag_max=%.1fms "
                "swarm_lag_max=%.1fms\n",
                scrape.first, scrape.second, list_ms, healthz.Summary().c_str(), reads_lag, reads_swarm_lag);
  }
  healthz.Clear();

  // Load: an array of 1-GPU jobs that each "run" run_ms. (The server's CPU
  // under load counts from here: not the admin reads' above.)
  const double cpu_load0 = CpuAndRss(opt.server_pid).first;
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
  // All exits reported: wait until the server shows nothing pending or
  // running (from /v1/queues: /metrics renders every GPU of 12,500 nodes,
  // a cost of its own that a 20 ms poll would add to what is measured).
  int64_t live = -1;
  for (int i = 0; i < 400; ++i) {
    auto q = admin.Get("/v1/queues");
    if (q && q->status == 200) {
      const json queues = json::parse(q->body, nullptr, false);
      if (queues.is_object() && queues.contains("queues")) {
        live = 0;
        for (const json& queue : queues["queues"]) live += queue.value("pending", 0) + queue.value("running", 0);
      }
    }
    if (live == 0) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  const double server_seconds = Ms(Clock::now() - s.array_at) / 1000;
  const int64_t finished = live == 0 ? opt.jobs : -1;
  // (The window under load closes here: before the node listing.)
  const std::string load_healthz = healthz.Summary();
  std::string loaded;  // the server's metrics now
  const double load_lag = LoopLagMs(admin, nullptr, &loaded), load_swarm_lag = s.TakeLag();
  const int lost_load = LostNodes(admin);
  std::printf("RESULT array jobs=%d accepted_in=%.2fs done_in=%.2fs jobs_per_s=%.0f e2e_done_in=%.2fs e2e_jobs_per_s=%.0f "
              "exits_reported=%lld "
              "server_finished=%lld server_cpu=%.1f%% rss=%.0fMiB lost_nodes=%d transport_errors=%lld\n",
              opt.jobs, Ms(accepted - s.array_at) / 1000, seconds, opt.jobs / seconds, server_seconds,
              opt.jobs / server_seconds, static_cast<long long>(s.exits.load()),
              static_cast<long long>(finished), 100.0 * (cpu2 - cpu_load0) / std::max(0.001, seconds), rss2, lost_load,
              static_cast<long long>(s.errors.load()));
  std::printf("RESULT bind_to_agent %s\n", s.bind_to_agent.Summary().c_str());
  // Of which the server's: bind to its watch push (the rest is its loop's
  // writes and the swarm reading them).
  std::printf("RESULT bind_to_push (server) %s\n",
              HistogramSummary("rota_watch_push_seconds", before_array, loaded).c_str());
  // Its phases under the array: the cycles (bind), the controller's batches
  // (apply, journal, publish) and of those the journal's writes.
  std::printf("RESULT server_phases cycle %s | batch %s | append %s\n",
              HistogramSummary("rota_scheduling_cycle_seconds", before_array, loaded).c_str(),
              HistogramSummary("rota_actor_batch_seconds", before_array, loaded).c_str(),
              HistogramSummary("rota_journal_append_seconds", before_array, loaded).c_str());
  std::printf("RESULT submit_to_agent %s\n", s.submit_to_agent.Summary().c_str());
  std::printf("RESULT exit_report_rtt %s\n", s.heartbeat_rtt.Summary().c_str());
  std::printf("RESULT healthz_under_load %s loop_lag_max=%.1fms swarm_lag_max=%.1fms\n", load_healthz.c_str(), load_lag,
              load_swarm_lag);
  if (!pests.empty()) std::printf("RESULT pests held=%d (of %zu)\n", pests_held.load(), pests.size());
  bool restart_ok = true;
  if (!opt.restart_cmd.empty()) {
    // A gang across two nodes that runs through the restart.
    auto g = admin.Post("/v1/jobs",
                        json{{"name", "hold"},
                             {"tasks", {{{"name", "rank"}, {"replicas", 2}, {"gpus", opt.gpus}, {"command", {"true"}}}}}}
                            .dump(),
                        "application/json");
    const int64_t gang = g && g->status == 201 ? json::parse(g->body).value("id", int64_t{0}) : 0;
    auto job_state = [&](int64_t* restarts) {
      auto j = admin.Get("/v1/jobs/" + std::to_string(gang));
      if (!j || j->status != 200) return std::string("?");
      json doc = json::parse(j->body, nullptr, false);
      if (doc.is_discarded()) return std::string("?");
      if (restarts != nullptr) *restarts = doc.value("restarts", int64_t{-1});
      return doc.value("state", std::string("?"));
    };
    for (int i = 0; i < 200 && job_state(nullptr) != "running"; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    const std::string before = job_state(nullptr);
    healthz.Clear();
    s.reregistered = 0;
    s.restarted = true;
    const auto killed_at = Clock::now();
    std::string last;
    // The new server is the command's child: it must not inherit the
    // swarm's sockets (12,500 of them would count against its descriptors
    // and keep the old server's connections half-open).
    for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd")) {
      const int fd = std::atoi(entry.path().filename().c_str());
      if (fd > 2) fcntl(fd, F_SETFD, FD_CLOEXEC);
    }
    if (FILE* p = popen(opt.restart_cmd.c_str(), "r")) {
      char line[256];
      while (fgets(line, sizeof(line), p) != nullptr) last = line;
      pclose(p);
    }
    opt.server_pid = std::atoi(last.c_str());
    const auto restarted_at = Clock::now();
    while ((s.reregistered < opt.nodes || (opt.watch && s.watching < opt.nodes)) &&
           Clock::now() - killed_at < std::chrono::seconds(opt.timeout_s)) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    const double back_in = Ms(Clock::now() - restarted_at) / 1000;
    const int back = s.reregistered.load(), watching = s.watching.load();
    auto [cpu3, rss3] = CpuAndRss(opt.server_pid);
    const auto back_at = Clock::now();
    const auto settle = killed_at + std::chrono::seconds(opt.grace_s);
    std::this_thread::sleep_until(settle);
    auto [cpu4, rss4] = CpuAndRss(opt.server_pid);
    const int lost_after = LostNodes(admin);
    int64_t restarts = -1;
    const std::string after = job_state(&restarts);
    std::printf("RESULT restart server_pid=%d restart_took=%.2fs all_back_in=%.2fs registered=%d/%d watching=%d "
                "lost_nodes_after_%ds=%d gang %s->%s restarts=%lld settled_cpu=%.1f%% rss=%.0fMiB healthz %s\n",
                opt.server_pid, Ms(restarted_at - killed_at) / 1000, back_in, back, opt.nodes, watching, opt.grace_s,
                lost_after, before.c_str(), after.c_str(), static_cast<long long>(restarts),
                100.0 * (cpu4 - cpu3) / std::max(0.001, Ms(settle - back_at) / 1000),
                rss4, healthz.Summary().c_str());
    restart_ok = back >= opt.nodes && lost_after == 0 && before == "running" && after == "running" && restarts == 0;
  }
  sampling = false;
  sampler.join();
  s.stop = true;
  ioc.stop();
  io.join();
  // The hostile clients must really have been held (else the run proves nothing about them).
  const bool pests_ok = pests.empty() || pests_held >= static_cast<int>(pests.size()) * 9 / 10;
  const bool ok = lost_idle == 0 && lost_load == 0 && s.exits >= opt.jobs && finished >= opt.jobs && restart_ok && pests_ok;
  return ok ? 0 : 1;
}
