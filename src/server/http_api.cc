#include "server/http_api.h"

#include "base/base64.h"
#include "base/quantity.h"
#include "base/strings.h"
#include "base/thread_name.h"
#include "base/version.h"
#include "server/web_assets.h"

#include "server/histogram.h"
#include "server/http_transport.h"
#include "server/log_read.h"
#include "server/recovery.h"
#include "server/replica.h"
#include "server/report.h"
#include "server/services.h"

#include <array>
#include <atomic>
#include <algorithm>
#include <charconv>
#include <condition_variable>
#include <exception>
#include <filesystem>
#include <fstream>
#include <future>
#include <optional>
#include <set>
#include <sstream>
#include <system_error>
#include <thread>
#include <unordered_map>

#include "api/agent_protocol.h"
#include "api/json_codec.h"
#include "api/yaml_codec.h"
#include "server/views.h"
#include "sim/profile_sim.h"

namespace rota::server {

using nlohmann::json;
using nlohmann::ordered_json;

int HttpStatusFor(StatusCode code) {
  switch (code) {
    case StatusCode::kOk: return 200;
    case StatusCode::kInvalidArgument: return 400;
    case StatusCode::kUnauthenticated: return 401;
    case StatusCode::kPermissionDenied: return 403;
    case StatusCode::kNotFound: return 404;
    case StatusCode::kAlreadyExists: return 409;
    case StatusCode::kFailedPrecondition: return 409;
    case StatusCode::kOutOfRange: return 422;
    case StatusCode::kResourceExhausted: return 429;
    case StatusCode::kUnimplemented: return 501;
    case StatusCode::kInsufficientStorage: return 507;
    case StatusCode::kUnavailable: return 503;
    case StatusCode::kDeadlineExceeded: return 504;
    case StatusCode::kInternal: return 500;
    case StatusCode::kDataLoss: return 500;
  }
  return 500;
}

namespace {

// A request body's nesting and size in values, before any parser builds a
// tree of it: at most kMaxDepth levels of JSON nesting (YAML's own parser
// stops at 2000) and kMaxValues separators (',' ':' or a new line, counted
// wherever they are, strings too: base64 logs have none), so a 1 MiB body
// costs a parser a few MiB, not gigabytes.
constexpr int kMaxDepth = 64;
constexpr int64_t kMaxValues = 50'000;
Status CheckBodyShape(std::string_view body) {
  int depth = 0;
  int64_t values = 0;
  bool in_string = false;
  for (size_t i = 0; i < body.size(); ++i) {
    const char ch = body[i];
    if (ch == ',' || ch == ':' || ch == '\n') {
      if (++values > kMaxValues) {
        return InvalidArgumentError("request body: more than " + std::to_string(kMaxValues) + " values");
      }
    }
    if (in_string) {
      if (ch == '\\') ++i;
      else if (ch == '"') in_string = false;
      continue;
    }
    if (ch == '"') {
      in_string = true;
    } else if (ch == '[' || ch == '{') {
      if (++depth > kMaxDepth) {
        return InvalidArgumentError("request body: nested deeper than " + std::to_string(kMaxDepth) + " levels");
      }
    } else if ((ch == ']' || ch == '}') && depth > 0) {
      --depth;
    }
  }
  return Status::Ok();
}

// Token buckets per caller.
class RateLimiter {
 public:
  explicit RateLimiter(double rate) : rate_(rate) {}
  bool Allow(const std::string& key) {
    if (rate_ <= 0) return true;
    const double now = std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
    std::lock_guard<std::mutex> lock(mu_);
    if (buckets_.size() >= next_sweep_) {
      // A bucket idle 2 s is full again, as a new one: dropped, so that
      // callers from ever new addresses do not grow the table without end.
      std::erase_if(buckets_, [&](const auto& kv) { return now - kv.second.last >= 2.0; });
      next_sweep_ = std::max<size_t>(4096, 2 * buckets_.size());
    }
    Bucket& b = buckets_[key];
    if (b.last == 0) b = {2 * rate_, now};
    b.tokens = std::min(2 * rate_, b.tokens + (now - b.last) * rate_);
    b.last = now;
    if (b.tokens < 1) return false;
    b.tokens -= 1;
    return true;
  }

 private:
  struct Bucket {
    double tokens = 0;
    double last = 0;
  };
  double rate_;
  std::mutex mu_;
  std::map<std::string, Bucket> buckets_;
  size_t next_sweep_ = 4096;  // the table's size at which idle buckets are dropped
};

void Reply(HttpResponse& res, int status, const ordered_json& body) {
  res.status = status;
  res.set_content(body.dump(2, ' ', false, ordered_json::error_handler_t::replace) + "\n", "application/json");
}

void ReplyError(HttpResponse& res, const Status& s) {
  ordered_json body{{"error", {{"code", std::string(StatusCodeName(s.code()))}, {"message", std::string(s.message())}}}};
  Reply(res, HttpStatusFor(s.code()), body);
}

// `rota submit --name/--queue/--priority/--gpus` (like sbatch's flags over
// the script's #SBATCH lines): ?name=, ?queue=, ?priority= (a class name or
// a number) and ?gpus= (whole GPUs per replica, for a job of one task group)
// replace what the spec says. Checked with the spec afterwards.
Status ApplyOverrides(const HttpRequest& req, JobSpec* spec) {
  if (req.has_param("name")) spec->name = req.get_param_value("name");
  if (req.has_param("queue")) spec->queue = req.get_param_value("queue");
  if (req.has_param("priority")) ROTA_RETURN_IF_ERROR(SetPriority(req.get_param_value("priority"), spec));
  if (req.has_param("gpus")) {
    const std::string g = req.get_param_value("gpus");
    int32_t gpus = 0;
    auto [end, ec] = std::from_chars(g.data(), g.data() + g.size(), gpus);
    if (g.empty() || ec != std::errc() || end != g.data() + g.size() || gpus < 0) {
      return InvalidArgumentError("gpus: '" + g + "' is not a whole number of GPUs");
    }
    if (spec->tasks.size() != 1) {
      return InvalidArgumentError("gpus: the job has " + std::to_string(spec->tasks.size()) +
                                  " task groups; set each one's gpus in the file");
    }
    if (spec->tasks[0].gpu_share.shared()) {
      return InvalidArgumentError("gpus: tasks[0] asks for a GPU share (gpu:); set whole GPUs in the file instead");
    }
    spec->tasks[0].gpus = gpus;
  }
  return Status::Ok();
}

// A job submitted (or a service applied) through the API runs something in
// every task group: one without a command would hold its GPUs doing nothing
// until cancelled. (Job files for `rota plan` and traces for `rota sim` need
// none: nothing runs there.)
Status RequireCommands(const JobSpec& spec) {
  for (size_t i = 0; i < spec.tasks.size(); ++i) {
    if (spec.tasks[i].command.empty()) {
      return InvalidArgumentError("request body: tasks[" + std::to_string(i) +
                                  "].command: required: what each replica runs (a list, e.g. [python, train.py]; "
                                  "to hold GPUs on purpose, [sleep, infinity])");
    }
  }
  return Status::Ok();
}

// ?since=DURATION (7d, 24h, 30m) into *since, if given; refused unless positive.
Status SinceParam(const HttpRequest& req, Duration* since) {
  if (!req.has_param("since")) return Status::Ok();
  auto d = ParseDuration(req.get_param_value("since"));
  if (!d.ok() || *d <= 0) {
    return InvalidArgumentError("since: '" + req.get_param_value("since") + "' is not a positive duration (7d, 24h, 30m)");
  }
  *since = *d;
  return Status::Ok();
}

StatusOr<uint64_t> ParseId(const std::string& text) {
  uint64_t v = 0;
  auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || p != text.data() + text.size() || v == 0) {
    return InvalidArgumentError("job id: '" + text + "' is not a job id");
  }
  return v;
}

std::string TaskKey(JobId job, uint16_t task, uint32_t replica, int32_t attempt) {
  return std::to_string(job.value()) + "/" + std::to_string(task) + "/" + std::to_string(replica) + "/" +
         std::to_string(attempt);
}

// What the server tells an agent, in a heartbeat's answer and in each
// event of its watch stream (api/agent_protocol.h).
// Its text (api::AnswerText, the bytes AnswerToJson's tree would dump):
// compact for a watch event, as Reply pretty-prints for a heartbeat's answer.
std::string AgentAnswer(const Controller& c, std::vector<TaskAssignment> tasks, uint64_t revision, int indent) {
  return api::AnswerText({.tasks = std::move(tasks),
                          .revision = revision,
                          .fence_after_ms = c.FenceAfter() / 1000,
                          .heartbeat_interval_ms = c.heartbeat_interval() / 1000,
                          .log_cap_bytes = c.config().limits.log_cap_bytes,
                          .server = c.server_id()},
                         indent);
}

// Reply with an agent's answer (the same bytes as Reply with its tree).
void ReplyAnswer(HttpResponse& res, const Controller& c, std::vector<TaskAssignment> tasks, uint64_t revision) {
  res.status = 200;
  res.set_content(AgentAnswer(c, std::move(tasks), revision, 2) + "\n", "application/json");
}

// Agents' watch streams: per node, the open streams. After each commit
// the controller names the nodes whose tasks changed; the hub's thread
// reads each such node's tasks from the published state (O(that node's
// jobs)) and pushes one event line to its streams. A stream gets the
// node's current tasks at once when it opens, so a reconnecting agent
// resumes from whatever it missed; every kKeepalive an empty line keeps
// idle streams (and the proxies between) alive and finds dead ones.
//
// The writes are paced to the transport's loop: after every kBatch
// streams the hub waits until the loop has taken them, and keepalives go
// to a twentieth of the nodes each second. So an event for every node
// (a 20,000-job array bound across 12,500 nodes) or a keepalive round
// never queues thousands of writes ahead of a health check or a
// heartbeat's answer.
class WatchHub {
  // A node's watch, and the agent's instance that opened it.
  struct Watch {
    std::shared_ptr<HttpStream> stream;
    std::string instance;
  };

 public:
  static constexpr auto kKeepalive = std::chrono::seconds(20);
  static constexpr int kKeepaliveSlices = 20;  // one slice of the nodes each kKeepalive / kKeepaliveSlices
  static constexpr size_t kBatch = 128;

  explicit WatchHub(Controller* c) : c_(c) {}
  ~WatchHub() { Stop(); }

  void Start() {
    started_at_ = c_->clock().Now();
    c_->SetNodeListener([this](const std::vector<std::string>& nodes) { Changed(nodes); });
    thread_ = NamedThread("rota-watches", [this] { Loop(); });
  }
  // Before the transport stops: no stream is written to after this.
  void Stop() {
    c_->SetNodeListener(nullptr);
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (stopping_) return;
      stopping_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
    std::lock_guard<std::mutex> lock(mu_);
    for (auto& [node, streams] : watchers_) {
      for (auto& w : streams) w.stream->Close();
    }
    watchers_.clear();
  }

  // A node's agent needs one watch (two while a reconnect overlaps the
  // dead one): past kMaxPerNode the oldest is closed, so a token that opens
  // watch after watch holds at most this many.
  static constexpr size_t kMaxPerNode = 4;

  // `instance`: the watching agent's (AgentInstance; "" from an older agent).
  void Add(const std::string& node, std::shared_ptr<HttpStream> stream, std::string instance) {
    std::lock_guard<std::mutex> lock(mu_);
    if (stopping_) return stream->Close();
    auto& streams = watchers_[node];
    std::erase_if(streams, [](const Watch& w) { return !w.stream->open(); });
    while (streams.size() >= kMaxPerNode) {
      streams.front().stream->Close();
      streams.erase(streams.begin());
    }
    streams.push_back({std::move(stream), std::move(instance)});
    dirty_.insert(node);
    cv_.notify_one();
  }

  size_t streams() const {
    std::lock_guard<std::mutex> lock(mu_);
    size_t n = 0;
    for (const auto& [node, streams] : watchers_) n += streams.size();
    return n;
  }

  // rota_watch_push_seconds: from the cycle that bound a task to the hub
  // handing it to the HTTP loop for its node's watch (the first time; the
  // loop's own delay is rota_http_loop_lag_max_seconds). The server's share
  // of a start's latency: commit, publish, this hub's queue and pass.
  static constexpr double kPushBuckets[] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5};
  std::string Metrics() const {
    std::lock_guard<std::mutex> lock(delays_mu_);
    std::string m =
        "# HELP rota_watch_push_seconds From the cycle that bound a task to its first push down its node's watch "
        "(handed to the HTTP loop).\n# TYPE rota_watch_push_seconds histogram\n";
    AppendHistogram(m, "rota_watch_push_seconds", kPushBuckets, push_buckets_, push_sum_, 6);
    return m;
  }

 private:
  void Changed(const std::vector<std::string>& nodes) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (const std::string& n : nodes) {
        if (watchers_.count(n)) dirty_.insert(n);
      }
    }
    cv_.notify_one();
  }

  void Loop() {
    constexpr auto kTick = kKeepalive / kKeepaliveSlices;
    auto next_tick = std::chrono::steady_clock::now() + kTick;
    int slice = 0;
    std::unique_lock<std::mutex> lock(mu_);
    while (!stopping_) {
      cv_.wait_until(lock, next_tick, [this] { return stopping_ || !dirty_.empty(); });
      if (stopping_) break;
      std::set<std::string> dirty;
      dirty.swap(dirty_);
      lock.unlock();
      size_t sent = 0;
      for (const std::string& node : dirty) {
        uint64_t revision = 0;
        auto tasks = c_->NodeTasks(node, &revision);
        std::vector<TimePoint>& bounds = bounds_;  // when each was bound (Pushed)
        bounds.clear();
        if (tasks.ok()) {
          for (const TaskAssignment& t : *tasks) bounds.push_back(t.bound_at);
        }
        std::string line = tasks.ok() ? AgentAnswer(*c_, std::move(*tasks), revision, -1)
                                      : ordered_json{{"error", std::string(tasks.status().message())}}.dump();
        line += '\n';
        std::shared_ptr<HttpStream> last;
        // (Read before the hub's lock: the controller's is never taken under it.)
        const std::string current = c_->AgentInstanceOf(node);
        {
          std::lock_guard<std::mutex> relock(mu_);
          if (stopping_) break;
          auto it = watchers_.find(node);
          if (it == watchers_.end() || it->second.empty()) continue;
          last = it->second.back().stream;
          if (!Send(it, line, current)) continue;  // every stream had closed: not pushed
        }
        Pushed(node, bounds);
        if (++sent % kBatch == 0) Pace(*last);
      }
      // Every slice whose second has come (a pass slowed by a burst of
      // events must not stretch each node's keepalive beyond kKeepalive
      // much: agents give up on a silent watch after 75 s).
      int slices = 0;
      const auto now = std::chrono::steady_clock::now();
      while (now >= next_tick && slices < kKeepaliveSlices) {
        ++slices;
        next_tick += kTick;
      }
      if (next_tick <= now) next_tick = now + kTick;  // a whole round was due: in step again from here
      if (slices > 0) {
        std::vector<std::shared_ptr<HttpStream>> due;
        lock.lock();
        for (auto it = watchers_.begin(); it != watchers_.end();) {
          auto next = std::next(it);
          if ((static_cast<int>(std::hash<std::string>{}(it->first) % kKeepaliveSlices) - slice + kKeepaliveSlices) %
                  kKeepaliveSlices < slices) {
            std::erase_if(it->second, [](const Watch& w) { return !w.stream->open(); });
            for (const Watch& w : it->second) due.push_back(w.stream);
            if (it->second.empty()) watchers_.erase(it);
          }
          it = next;
        }
        lock.unlock();
        for (size_t i = 0; i < due.size() && !stopping_; ++i) {
          due[i]->Send("\n");
          if ((i + 1) % kBatch == 0) Pace(*due[i]);
        }
        slice = (slice + slices) % kKeepaliveSlices;
      }
      lock.lock();
    }
  }

  // Counts the tasks bound since the node's last push (by the hub's
  // thread; those bound before the hub started are not this server's).
  void Pushed(const std::string& node, const std::vector<TimePoint>& bounds) {
    if (bounds.empty()) return;
    const TimePoint bound = *std::max_element(bounds.begin(), bounds.end());
    TimePoint& last = pushed_bound_[node];
    if (bound <= last) return;
    const TimePoint now = c_->clock().Now(), since = std::max(last, started_at_);
    last = bound;
    std::lock_guard<std::mutex> lock(delays_mu_);
    for (TimePoint bound_at : bounds) {
      if (bound_at <= since) continue;
      const double seconds = static_cast<double>(std::max<TimePoint>(0, now - bound_at)) / kMicrosPerSecond;
      ++push_buckets_[BucketOf(kPushBuckets, seconds)];
      push_sum_ += seconds;
    }
  }

  // Waits (at most a second, without mu_) until the loop has taken what
  // was sent to `stream` so far.
  static void Pace(HttpStream& stream) {
    auto taken = std::make_shared<std::promise<void>>();
    std::future<void> done = taken->get_future();
    stream.Then([taken] { taken->set_value(); });
    done.wait_for(std::chrono::seconds(1));
  }

  // REQUIRES: mu_ held. Sends `line` to a node's streams, dropping closed
  // ones; false if none was open.
  // To every stream of the node but another agent's than `current` (the
  // agent that registered the node last: one it replaced gets nothing more,
  // and its stream is closed).
  bool Send(std::unordered_map<std::string, std::vector<Watch>>::iterator it, const std::string& line,
            const std::string& current) {
    auto& streams = it->second;
    std::erase_if(streams, [&](const Watch& w) {
      if (!w.instance.empty() && !current.empty() && w.instance != current) {
        w.stream->Close();
        return true;
      }
      return !w.stream->Send(line);
    });
    if (!streams.empty()) return true;
    watchers_.erase(it);
    return false;
  }

  Controller* c_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::atomic<bool> stopping_{false};  // set under mu_; read without it between paced writes
  std::unordered_map<std::string, std::vector<Watch>> watchers_;
  std::set<std::string> dirty_;
  std::thread thread_;
  // The push delays (Pushed): per node, the newest bind pushed (the hub's
  // thread only); the histogram, under delays_mu_.
  TimePoint started_at_ = 0;
  std::unordered_map<std::string, TimePoint> pushed_bound_;
  std::vector<TimePoint> bounds_;  // scratch
  mutable std::mutex delays_mu_;
  std::array<uint64_t, std::size(kPushBuckets) + 1> push_buckets_{};
  double push_sum_ = 0;
};

// Requests may wait in a long poll; the pool keeps room for everything else.
constexpr int kThreads = 96;
constexpr int kMaxLongPolls = 64;
// A report larger than this is parsed on a worker, not on the event loop: a
// heartbeat with 8 GPUs' telemetry is a few KB, and a 1 MiB body would hold
// every other connection for the length of its parse.
constexpr size_t kLoopReportBytes = 64 << 10;
// The most jobs one listing answers (GET /v1/jobs?limit=).
constexpr size_t kMaxPage = 10'000;
// Listings one identity may have answered at once: a page of 10,000 jobs
// is tens of MB while it is built; 400 at once from one user (200 at a
// time) held 3.9 GB and starved the agents' reports until their tasks'
// fences ran out. Past it: 429 (Kubernetes' API Priority and Fairness
// likewise gives each flow a share of the server's seats).
constexpr int kListingsAtOnce = 4;
constexpr size_t kSmallPage = 1000;  // a page of at most this many is not counted
// Usage reports read every record in their window (a year's is every
// tenant's year): a few at a time per user too.
constexpr int kReportsAtOnce = 2;

// How many of something each identity has in progress, at most `cap`.
class PerIdentity {
 public:
  explicit PerIdentity(int cap) : cap_(cap) {}
  // Whether `key` may start one more (then End it).
  bool Begin(const std::string& key) {
    std::lock_guard<std::mutex> lock(mu_);
    int& n = running_[key];
    if (n >= cap_) return false;
    ++n;
    return true;
  }
  void End(const std::string& key) {
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = running_.find(key); it != running_.end() && --it->second <= 0) running_.erase(it);
  }
  // One of `key`'s places while it lives (Begin, then End when it goes);
  // `held` false if none was free.
  class Seat {
   public:
    Seat(PerIdentity& of, std::string key) : of_(of), key_(std::move(key)), held(of.Begin(key_)) {}
    ~Seat() {
      if (held) of_.End(key_);
    }
    Seat(const Seat&) = delete;
    Seat& operator=(const Seat&) = delete;

   private:
    PerIdentity& of_;
    const std::string key_;

   public:
    const bool held;
  };

 private:
  const int cap_;
  std::mutex mu_;
  std::unordered_map<std::string, int> running_;
};

class HttpServerImpl final : public HttpServer {
 public:
  HttpServerImpl(Controller* c, HttpOptions o)
      : c_(c), options_(std::move(o)), limiter_(options_.rate_per_second), watches_(c) {}
  ~HttpServerImpl() override { Stop(); }

  Status Start() {
    server_ = std::make_unique<HttpTransport>();
    Routes();
    HttpTransportOptions transport{.host = options_.host,
                                   .port = options_.port,
                                   .tls_cert = options_.tls_cert,
                                   .tls_key = options_.tls_key,
                                   .max_body_bytes = options_.max_body_bytes,
                                   .workers = kThreads};
    watches_.Start();
    ROTA_ASSIGN_OR_RETURN(port_, server_->Start(transport));
    sampler_ = NamedThread("rota-sampler", [this] { SampleQueues(); });
    return Status::Ok();
  }

  int port() const override { return port_; }
  void Stop() override {
    watches_.Stop();  // first: nothing writes to a stream once the transport stops
    if (server_) server_->Stop();
    {
      // Answers still on their way from the controller (it runs on, and
      // answers or refuses each): none may outlive the transport.
      std::unique_lock<std::mutex> lock(async_mu_);
      async_cv_.wait(lock, [this] { return async_pending_ == 0; });
    }
    {
      std::lock_guard<std::mutex> lock(history_mu_);
      stopping_ = true;
    }
    history_cv_.notify_all();
    if (sampler_.joinable()) sampler_.join();
  }

 private:
  using Handler = std::function<void(const Principal&, const HttpRequest&, HttpResponse&)>;

  // Who may call a route: people (user, admin) or node agents (agent, admin).
  enum class Access { kPeople, kAgents };

  // Authenticates, rate-limits, checks the role and guards a handler: no
  // input reaches a 500.
  HttpHandler Guard(Handler h, Access access = Access::kPeople) {
    return [this, h, access](const HttpRequest& req, HttpResponse& res) {
      try {
        if (Standby()) {
          // Reads from the state this standby follows; the rest is the leader's.
          const std::string leader = options_.replica->leader();
          res.set_header("Rota-Role", "standby");
          if (!leader.empty()) res.set_header("Rota-Leader", leader);
          if (req.method != "GET" || access == Access::kAgents) {
            res.set_header("Retry-After", "1");
            return ReplyError(res, UnavailableError("this rota server is a standby; " +
                                                    (leader.empty() ? std::string("no leader is known yet, retry shortly")
                                                                    : "send writes to the leader, " + leader)));
          }
        }
        auto who = c_->Authenticate(req.get_header_value("Authorization"));
        // One bucket per identity: each node's agent its own, each user theirs.
        const std::string key = !who.ok()                   ? "addr:" + req.remote_addr
                                : who->role == Role::kAgent ? "node:" + who->node
                                                            : "user:" + who->user;
        if (!limiter_.Allow(key)) {
          res.set_header("Retry-After", "1");
          return ReplyError(res, Status(StatusCode::kResourceExhausted, "rate limit exceeded; retry later"));
        }
        if (!who.ok()) return ReplyError(res, who.status());
        if (Status shape = CheckBodyShape(req.body); !shape.ok()) return ReplyError(res, shape);
        if (access == Access::kPeople && who->role == Role::kAgent) {
          return ReplyError(res, Status(StatusCode::kPermissionDenied, "agent tokens may only register and heartbeat"));
        }
        if (access == Access::kAgents && who->role == Role::kUser) {
          return ReplyError(res, Status(StatusCode::kPermissionDenied, "only node agents (or admins) use /v1/agents"));
        }
        h(*who, req, res);
      } catch (const std::exception& e) {
        ReplyError(res, InvalidArgumentError(std::string("bad request: ") + e.what()));
      }
    };
  }

  void Routes() {
    HttpTransport& srv = *server_;
    // Alive and serving; a store that refuses writes is reported, not hidden
    // (reads still work, so this stays 200).
    srv.GetInline("/healthz", [this](const HttpRequest&, HttpResponse& res) {
      res.set_header("Rota-Version", kVersion);
      if (Standby()) {
        const std::string leader = options_.replica->leader();
        res.set_header("Rota-Role", "standby");
        if (!leader.empty()) res.set_header("Rota-Leader", leader);
        res.set_content("standby: the leader is " + (leader.empty() ? std::string("not known yet") : leader) + "\n",
                        "text/plain");
        return;
      }
      if (options_.replica != nullptr) {
        res.set_header("Rota-Role", "leader");
        res.set_header("Rota-Epoch", std::to_string(options_.replica->epoch()));
      }
      const std::string store = c_->StoreError();
      res.set_content(store.empty() ? "ok\n" : "degraded: store refuses writes: " + store + "\n", "text/plain");
    });
    // Agents' reports: on the loop (PostInline), since most are answered at
    // once (a quiet heartbeat) or by the actor (deferred); a report that
    // carries logs (files to write), a long poll or a large body (a parse
    // that would hold every other connection) goes on to a worker.
    srv.PostInline("/v1/agents/heartbeat", Guard([this](const Principal& who, const HttpRequest& req, HttpResponse& res) {
      if (req.body.size() <= kLoopReportBytes) return Report(who, req, res, true);
      // (The transport keeps `req` until the offload has run.)
      res.offload = [this, who, &req](HttpResponse& out) { Report(who, req, out, false); };
    }, Access::kAgents));

    srv.Post("/v1/jobs", Guard([this](const Principal& who, const HttpRequest& req, HttpResponse& res) {
      // ?count=N (or A-B, with %K for at most K running): a job array,
      // committed together.
      ArrayRange array;
      if (req.has_param("count")) {
        StatusOr<ArrayRange> parsed = ParseArrayRange(req.get_param_value("count"));
        if (!parsed.ok()) return ReplyError(res, parsed.status());
        array = *parsed;
      }
      const int64_t count = array.count;
      // Idempotency-Key: a retry of a submission whose answer was lost (or
      // whose server failed over) returns the jobs it made, with 200.
      const std::string request_id = req.get_header_value("Idempotency-Key");
      if (request_id.size() > 128 || std::any_of(request_id.begin(), request_id.end(), [](char ch) {
            return static_cast<unsigned char>(ch) < 0x21 || static_cast<unsigned char>(ch) > 0x7e;
          })) {
        return ReplyError(res, InvalidArgumentError("Idempotency-Key: must be 1..128 visible ASCII characters"));
      }
      auto spec = api::ParseJobSpec(req.body, "request body");
      if (!spec.ok()) return ReplyError(res, spec.status());
      if (Status s = ApplyOverrides(req, &*spec); !s.ok()) return ReplyError(res, s);
      if (Status s = RequireCommands(*spec); !s.ok()) return ReplyError(res, s);
      if (req.get_param_value("dry_run") == "true") return DryRun(who, std::move(*spec), array, res);
      bool replayed = false;
      auto id = c_->SubmitArray(who, std::move(*spec), array, request_id, &replayed);
      if (!id.ok()) return ReplyError(res, id.status());
      Snapshot snap = c_->snapshot();
      // (A retried array's first element may be forgotten, its others held.)
      const JobRecord* made = FirstHeld(snap, *id, count);
      if (made == nullptr) {
        // A retried key whose jobs ended long ago, forgotten since the retry
        // found them (the job retention).
        return ReplyError(res, FailedPreconditionError("Idempotency-Key '" + request_id + "' was used before for job " +
                                                       std::to_string(id->value()) +
                                                       ", forgotten since; use a new key for a new submission"));
      }
      ordered_json view = JobView(*c_, snap, *made, /*owner=*/true, false, Viewer(who));  // (its submitter)
      // One shape for one job and for an array: the first job's view, and
      // the ids and count of all (an array's also under "array").
      view["ids"] = {{"first", id->value()}, {"last", id->value() + static_cast<uint64_t>(count) - 1}};
      view["count"] = count;
      // A job like ones that under-used what they held: say what fits.
      if (const RightSize shape = c_->FamilyShape(made->user, made->spec().name); shape.recommended) {
        const TaskGroupSpec& first = made->spec().tasks.front();
        if (!first.gpu_share.shared() && first.gpus == shape.gpus_per_replica) {
          view["note"] = "your jobs named '" + made->spec().name + "' used less than they held (" + shape.summary +
                         "); see rota report job " + std::to_string(id->value());
        }
      }
      if (replayed) res.set_header("Idempotent-Replayed", "true");
      Reply(res, replayed ? 200 : 201, view);
    }));

    // Listings page: ?limit=N (1..10000, default 10000) jobs with ids above ?after=ID, in
    // id order, filtered by ?state=, ?queue=, ?user= (admins; others see
    // their own). A page cut short by the limit names where the next
    // starts ("next_after"). The scan starts at `after` and stops at the
    // limit: the first page of a million jobs costs one page.
    srv.Get("/v1/jobs", Guard([this](const Principal& who, const HttpRequest& req, HttpResponse& res) {
      Snapshot snap = c_->snapshot();
      const std::string state = req.get_param_value("state");
      const std::string queue = req.get_param_value("queue");
      const std::string user = req.get_param_value("user");
      const bool all = req.get_param_value("all") == "true";
      uint64_t array = 0;  // ?array=ID: one job array's elements
      if (req.has_param("array")) {
        auto a = ParseId(req.get_param_value("array"));
        if (!a.ok() || *a == 0) return ReplyError(res, InvalidArgumentError("array: must be an array's id (its first job's)"));
        array = *a;
      }
      if (!state.empty()) {
        bool known = false;
        for (JobState st : {JobState::kPending, JobState::kRunning, JobState::kPreempting, JobState::kSucceeded,
                            JobState::kFailed, JobState::kCancelled}) {
          known = known || JobStateName(st) == state;
        }
        if (!known) {
          return ReplyError(res, InvalidArgumentError("state: '" + state +
                                                      "' is not one of pending, running, preempting, succeeded, "
                                                      "failed, cancelled"));
        }
      }
      // Without ?limit a page is the largest one: no request builds an
      // answer of a million jobs (a gigabyte) in the server's memory.
      size_t limit = kMaxPage;
      if (req.has_param("limit")) {
        auto n = ParseId(req.get_param_value("limit"));
        if (!n.ok() || *n > kMaxPage) return ReplyError(res, InvalidArgumentError("limit: must be 1..10000"));
        limit = *n;
      }
      // Large pages (the costly ones) a few at a time per user.
      const bool large = limit > kSmallPage;
      std::optional<PerIdentity::Seat> seat;
      if (large && !seat.emplace(listings_, who.user).held) {
        res.set_header("Retry-After", "1");
        return ReplyError(res, Status(StatusCode::kResourceExhausted,
                                      "too many large job listings at once for user '" + who.user + "' (at most " +
                                          std::to_string(kListingsAtOnce) + " of over " + std::to_string(kSmallPage) +
                                          " jobs); retry when one has been answered"));
      }
      uint64_t after = 0;
      if (req.has_param("after")) {
        const std::string text = req.get_param_value("after");
        auto [p, ec] = std::from_chars(text.data(), text.data() + text.size(), after);
        if (ec != std::errc() || p != text.data() + text.size()) {
          return ReplyError(res, InvalidArgumentError("after: '" + text + "' is not a job id"));
        }
      }
      ordered_json jobs = ordered_json::array();
      // Without ?all or a state, only the jobs that have not ended (their index).
      const bool live_only = !all && (state.empty() || state == "pending" || state == "running" || state == "preempting");
      const auto& index = live_only ? snap.live_jobs() : snap.jobs();
      std::optional<uint64_t> next_after;
      if (array > 0) after = std::max(after, array - 1);  // its elements start at its id
      for (auto it = index.upper_bound(JobId(after)); it != index.end(); ++it) {
        const JobRecord& job = *it->second;
        if (array > 0 && job.array.value() != array) {
          if (job.id.value() > array) break;  // past it: an array's ids are consecutive
          continue;
        }
        if (!Sees(who, job)) continue;
        if (!user.empty() && job.user != user) continue;
        if (!state.empty() && JobStateName(job.state) != state) continue;
        if (!queue.empty() && job.spec().queue != queue) continue;
        if (jobs.size() == limit) {
          next_after = jobs.back()["id"].get<uint64_t>();
          break;
        }
        jobs.push_back(JobView(*c_, snap, job, /*owner=*/Owns(who, job), false, Viewer(who)));
      }
      ordered_json body{{"jobs", std::move(jobs)}};
      if (next_after) body["next_after"] = *next_after;
      Reply(res, 200, body);
    }));

    srv.Get(R"(/v1/jobs/([^/]+))", Guard([this](const Principal& who, const HttpRequest& req, HttpResponse& res) {
      const JobRecord* job = nullptr;
      Snapshot snap = c_->snapshot();
      bool owner = false;
      if (Status s = FindVisible(who, snap, req.matches[1], &job, &owner); !s.ok()) return ReplyError(res, s);
      ordered_json j = JobView(*c_, snap, *job, owner, /*with_spec=*/owner, Viewer(who));
      j["events"] = Timeline(snap, *job, owner, Viewer(who));
      // What it used, and the shape its family's last attempts fit.
      if (job->started_at > 0) {
        const TimePoint now = c_->clock().Now();
        auto records = c_->JobUsage(who, job->id, job->user, job->spec().name, job);
        if (records.ok()) {
          ordered_json usage = BuildJobReport(*records, job->id, now, ReportOptions{.currency = c_->config().accounting.currency});
          usage.erase("attempts");
          if (usage.contains("recommendation")) j["usage"] = std::move(usage);
        }
      }
      Reply(res, 200, j);
    }));

    // A job's accounting (seff-like, GPUs included): every attempt's
    // allocation and measured use, and its family's right size.
    srv.Get(R"(/v1/jobs/([^/]+)/usage)", Guard([this](const Principal& who, const HttpRequest& req, HttpResponse& res) {
      const JobRecord* job = nullptr;
      Snapshot snap = c_->snapshot();
      bool owner = false;
      const TimePoint now = c_->clock().Now();
      if (Status s = FindVisible(who, snap, req.matches[1], &job, &owner); !s.ok()) {
        // A job the state forgot (the job retention): its records, which
        // outlive it, if they are `who`'s to see (else the same 404).
        const StatusOr<uint64_t> parsed = ParseId(req.matches[1]);
        const uint64_t id = parsed.ok() ? *parsed : 0;
        if (s.code() != StatusCode::kNotFound || id == 0 || id >= snap.issued_below()) return ReplyError(res, s);
        auto own = c_->UsageOfJob(who, JobId(id));
        if (!own.ok()) return ReplyError(res, own.status());
        if (own->empty()) return ReplyError(res, s);
        auto records = c_->JobUsage(who, JobId(id), own->front().user, own->front().name);  // (its family's right size)
        if (!records.ok()) return ReplyError(res, records.status());
        Reply(res, 200, TheirReasons(BuildJobReport(*records, JobId(id), now, ReportOptions{.currency = c_->config().accounting.currency}), snap, who));
        return;
      }
      auto records = c_->JobUsage(who, job->id, job->user, job->spec().name, job);
      if (!records.ok()) return ReplyError(res, records.status());
      Reply(res, 200, TheirReasons(BuildJobReport(*records, job->id, now, ReportOptions{.currency = c_->config().accounting.currency}), snap, who));
    }));

    // Accounting over a period (sreport-like): ?since=7d (default; at most
    // the retention), ?by=user|queue|model. A user's own jobs only, unless
    // an admin asks.
    srv.Get("/v1/usage/report", Guard([this](const Principal& who, const HttpRequest& req, HttpResponse& res) {
      Duration since = 7 * 24 * 3600 * kMicrosPerSecond;
      if (Status s = SinceParam(req, &since); !s.ok()) return ReplyError(res, s);
      ReportOptions options;
      options.currency = c_->config().accounting.currency;
      const std::string by = req.has_param("by") ? req.get_param_value("by") : "user";
      if (by == "queue") options.by = ReportBy::kQueue;
      else if (by == "model") options.by = ReportBy::kModel;
      else if (by != "user") return ReplyError(res, InvalidArgumentError("by: '" + by + "' is not one of user, queue, model"));
      const PerIdentity::Seat seat(reports_, who.user);
      if (!seat.held) {
        res.set_header("Retry-After", "1");
        return ReplyError(res, Status(StatusCode::kResourceExhausted,
                                      "too many usage reports at once for user '" + who.user + "' (at most " +
                                          std::to_string(kReportsAtOnce) + "); retry when one has been answered"));
      }
      const TimePoint now = c_->clock().Now();
      auto records = c_->Usage(who, now - since, now + 1, true);
      if (!records.ok()) return ReplyError(res, records.status());
      Reply(res, 200, BuildReport(*records, now - since, now, now, options));
    }));

    srv.Get(R"(/v1/jobs/([^/]+)/events)", Guard([this](const Principal& who, const HttpRequest& req, HttpResponse& res) {
      const JobRecord* job = nullptr;
      Snapshot snap = c_->snapshot();
      bool owner = false;
      if (Status s = FindVisible(who, snap, req.matches[1], &job, &owner); !s.ok()) return ReplyError(res, s);
      Reply(res, 200, {{"events", Timeline(snap, *job, owner, Viewer(who))}});
    }));

    // Many cancels in one request, journaled together: {"ids": [1, 2, ...]}
    // (at most 10,000). Each id is answered as POST /v1/jobs/ID/cancel would
    // be: "cancelled" lists those it cancelled ({id, name}), "failed" the
    // others ({id, status, error}: the HTTP status and message that request
    // would have had).
    srv.Post("/v1/jobs/cancel", Guard([this](const Principal& who, const HttpRequest& req, HttpResponse& res) {
      const json body = json::parse(req.body, nullptr, /*allow_exceptions=*/false);
      if (body.is_discarded() || !body.is_object()) {
        return ReplyError(res, InvalidArgumentError("request body: must be a JSON object {\"ids\": [job ids]}"));
      }
      for (const auto& [key, value] : body.items()) {
        if (key != "ids") return ReplyError(res, InvalidArgumentError("request body: unknown field '" + key + "'"));
      }
      if (!body.contains("ids") || !body["ids"].is_array() || body["ids"].empty()) {
        return ReplyError(res, InvalidArgumentError("ids: must be a non-empty list of job ids"));
      }
      if (body["ids"].size() > Controller::kMaxCancelMany) {
        return ReplyError(res, InvalidArgumentError("ids: at most " + std::to_string(Controller::kMaxCancelMany) +
                                                    " jobs a request, got " + std::to_string(body["ids"].size())));
      }
      std::vector<JobId> ids;
      ids.reserve(body["ids"].size());
      for (size_t i = 0; i < body["ids"].size(); ++i) {
        const json& id = body["ids"][i];
        if (!id.is_number_unsigned() || id.get<uint64_t>() == 0) {
          return ReplyError(res, InvalidArgumentError("ids[" + std::to_string(i) + "]: not a job id: " + id.dump()));
        }
        ids.push_back(JobId(id.get<uint64_t>()));
      }
      auto results = c_->CancelMany(who, ids, AllSeeAll());
      if (!results.ok()) return ReplyError(res, results.status());
      const Snapshot snap = c_->snapshot();
      ordered_json cancelled = ordered_json::array(), failed = ordered_json::array();
      for (size_t i = 0; i < ids.size(); ++i) {
        const Status& s = (*results)[i];
        if (s.ok()) {
          const JobRecord* job = snap.FindJob(ids[i]);
          cancelled.push_back({{"id", ids[i].value()}, {"name", job != nullptr ? job->spec().name : std::string()}});
        } else {
          failed.push_back({{"id", ids[i].value()}, {"status", HttpStatusFor(s.code())}, {"error", std::string(s.message())}});
        }
      }
      Reply(res, 200, ordered_json{{"cancelled", std::move(cancelled)}, {"failed", std::move(failed)}});
    }));

    srv.Post(R"(/v1/jobs/([^/]+)/cancel)", Guard([this](const Principal& who, const HttpRequest& req, HttpResponse& res) {
      auto id = ParseId(req.matches[1]);
      if (!id.ok()) return ReplyError(res, id.status());
      // (Another's job where all are visible: refused as such, not "no job".)
      auto one = c_->CancelMany(who, {JobId(*id)}, AllSeeAll());
      if (!one.ok()) return ReplyError(res, one.status());
      if (!one->front().ok()) return ReplyError(res, one->front());
      ReplyJob(res, JobId(*id), who);
    }));

    // hold, release (scontrol hold/release) and requeue (scontrol requeue).
    for (const char* verb : {"hold", "release", "requeue"}) {
      const std::string v = verb;
      srv.Post(std::string(R"(/v1/jobs/([^/]+)/)") + verb, Guard([this, v](const Principal& who, const HttpRequest& req, HttpResponse& res) {
        const JobRecord* job = nullptr;
        JobId id;
        {
          const Snapshot snap = c_->snapshot();
          if (Status s = Find(who, snap, req.matches[1], &job); !s.ok()) return ReplyError(res, s);
          id = job->id;
        }
        const Status s = v == "requeue" ? c_->Requeue(who, id) : c_->SetHold(who, id, v == "hold");
        if (!s.ok()) return ReplyError(res, s);
        ReplyJob(res, id, who);
      }));
    }

    srv.Post(R"(/v1/jobs/([^/]+)/checkpoint)", Guard([this](const Principal& who, const HttpRequest& req, HttpResponse& res) {
      const json body = json::parse(req.body, nullptr, false);
      if (body.is_discarded() || !body.is_object()) return ReplyError(res, InvalidArgumentError("body: must be a JSON object"));
      if (!body.contains("path") || !body["path"].is_string()) {
        return ReplyError(res, InvalidArgumentError("path: required, a string"));
      }
      const JobRecord* job = nullptr;
      Snapshot snap = c_->snapshot();
      if (Status s = Find(who, snap, req.matches[1], &job); !s.ok()) return ReplyError(res, s);
      if (Status s = c_->Checkpoint(who, job->id, body["path"].get<std::string>()); !s.ok()) return ReplyError(res, s);
      ReplyJob(res, job->id, who);
    }));

    srv.Get(R"(/v1/jobs/([^/]+)/logs)", Guard([this](const Principal& who, const HttpRequest& req, HttpResponse& res) {
      const JobRecord* job = nullptr;
      Snapshot snap = c_->snapshot();
      if (Status s = Find(who, snap, req.matches[1], &job); !s.ok()) return ReplyError(res, s);
      if (options_.logs_dir.empty()) {
        return ReplyError(res, UnimplementedError("this server has no local agent logs (rota up serves them)"));
      }
      // ?task=NAME (a task group) or NAME-REPLICA (one replica); ?tail=N: the
      // last N lines of each replica's log.
      const std::string only = req.get_param_value("task");
      size_t tail = 0;
      if (req.has_param("tail")) {
        auto n = ParseId(req.get_param_value("tail"));
        if (!n.ok() || *n == 0 || *n > 1000000) return ReplyError(res, InvalidArgumentError("tail: must be 1..1000000 lines"));
        tail = *n;
      }
      // ?offset=B with one replica's ?task=NAME-REPLICA: its log from byte B
      // on (what `rota logs -f` has not seen); Rota-Log-Size says how long it
      // is now. A log shorter than B (it started over) comes back whole.
      std::optional<uint64_t> offset;
      if (req.has_param("offset")) {
        const std::string text = req.get_param_value("offset");
        uint64_t b = 0;
        auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), b);
        if (ec != std::errc() || end != text.data() + text.size()) {
          return ReplyError(res, InvalidArgumentError("offset: '" + text + "' is not a byte offset"));
        }
        offset = b;
      }
      uint64_t size = 0, replicas = 0;
      std::string out;
      // Where it runs or ran; a requeued job's last attempt until it is placed again.
      const auto& placement = job->placement.empty() ? job->last_placement : job->placement;
      const std::string dir = options_.logs_dir + "/" + std::to_string(job->id.value());
      bool matched = only.empty();
      // An answer holds at most 8 MiB of logs, shared by the replicas it
      // shows (64 KiB each at least, while the 8 MiB last: the replicas
      // past that are counted, not shown): the end of each where it is longer.
      constexpr size_t kAnswer = 8 << 20;
      size_t shown = 0, budget = kAnswer, left = 0;
      for (const ReplicaPlacement& r : placement) {
        const std::string& group = job->spec().tasks[r.task].name;
        shown += only.empty() || only == group || only == group + "-" + std::to_string(r.replica);
      }
      const size_t share = std::max<size_t>(64 << 10, kAnswer / std::max<size_t>(shown, 1));
      // The job's directory, listed once: the logs shipped from nodes (NAME@NODE.log).
      std::vector<std::string> listed;
      {
        std::error_code ec;
        for (const auto& f : std::filesystem::directory_iterator(dir, ec)) listed.push_back(f.path().filename().string());
        std::sort(listed.begin(), listed.end());
      }
      for (const ReplicaPlacement& r : placement) {
        const std::string name = job->spec().tasks[r.task].name + "-" + std::to_string(r.replica);
        if (!only.empty() && only != name && only != job->spec().tasks[r.task].name) continue;
        matched = true;
        // Written here by the local agent, and shipped by remote agents (one file per node).
        std::vector<std::string> files;
        if (std::binary_search(listed.begin(), listed.end(), name + ".log")) files.push_back(dir + "/" + name + ".log");
        for (auto it = std::lower_bound(listed.begin(), listed.end(), name + "@");
             it != listed.end() && it->rfind(name + "@", 0) == 0; ++it) {
          if (it->size() > 4 && it->substr(it->size() - 4) == ".log") files.push_back(dir + "/" + *it);
        }
        if (files.empty()) continue;
        if (budget < std::min<size_t>(share, 64 << 10)) {  // (spent: a few bytes more would say little)
          ++left;
          continue;
        }
        if (placement.size() > 1 && (only.empty() || only == job->spec().tasks[r.task].name)) {
          out += "==> " + name + " <==\n";
        }
        const size_t cap = std::min(share, budget);
        LogRead log = ReadLog(files, offset.value_or(0), tail, cap);
        size += log.size;
        ++replicas;
        if (log.cut) {
          out += "[rota: only the last " + std::to_string(cap >> 10) +
                 " KiB of what was asked for are shown (an answer holds at most 8 MiB of logs)]\n";
          res.set_header("Rota-Log-Cut", "1");
        }
        budget -= std::min(budget, log.text.size());
        out += log.text;
      }
      if (left > 0) {
        out += "[rota: " + std::to_string(left) + " more replicas not shown (an answer holds at most 8 MiB of logs): " +
               "ask for one with ?task=NAME-REPLICA (rota logs --task)]\n";
        res.set_header("Rota-Log-Cut", "1");
      }
      if (offset && replicas > 1) {
        return ReplyError(res, InvalidArgumentError("offset: needs ?task=NAME-REPLICA (one replica's log)"));
      }
      res.set_header("Rota-Log-Size", std::to_string(size));
      if (!matched) {
        std::string names;
        for (const ReplicaPlacement& r : placement) {
          names += (names.empty() ? "" : ", ") + job->spec().tasks[r.task].name + "-" + std::to_string(r.replica);
        }
        return ReplyError(res, NotFoundError("task: job " + std::to_string(job->id.value()) + " has no task or replica '" +
                                             only + "'" + (names.empty() ? "" : " (replicas: " + names + ")")));
      }
      res.set_content(out, "text/plain");
    }));

    srv.Get("/v1/queues", Guard([this](const Principal&, const HttpRequest&, HttpResponse& res) {
      Reply(res, 200, {{"queues", QueuesView(*c_, c_->snapshot())}});
    }));

    srv.Get("/v1/queues/history", Guard([this](const Principal&, const HttpRequest&, HttpResponse& res) {
      ordered_json samples = ordered_json::array();
      {
        std::lock_guard<std::mutex> lock(history_mu_);
        for (const auto& h : history_) samples.push_back(h);
      }
      Reply(res, 200, {{"interval_s", options_.queue_sample_seconds}, {"samples", std::move(samples)}});
    }));

    // The dashboard: static files, no data (every number comes from the API
    // with the token the page asks for).
    srv.Get(R"(/|/[A-Za-z0-9_-]+\.(html|js|css))", [this](const HttpRequest& req, HttpResponse& res) {
      if (Standby() && !options_.replica->leader().empty() && options_.replica->leader() != options_.replica->advertise()) {
        // A browser opening a standby's dashboard goes to the leader's (live telemetry, reasons).
        res.status = 307;
        res.set_header("Location", options_.replica->leader() + req.path);
        res.set_content("the leader is " + options_.replica->leader() + "\n", "text/plain");
        return;
      }
      const WebAsset* asset = FindWebAsset(req.path);
      if (asset == nullptr) {
        res.status = 404;
        res.set_content("not found\n", "text/plain");
        return;
      }
      res.set_header("Content-Security-Policy",
                     "default-src 'self'; img-src 'self' data:; style-src 'self' 'unsafe-inline'; script-src 'self'; "
                     "object-src 'none'; "
                     "frame-ancestors 'none'");
      res.set_header("X-Content-Type-Options", "nosniff");
      res.set_header("Cache-Control", "no-cache");
      res.set_content(std::string(asset->data, asset->size), std::string(asset->content_type));
    });

    // What-if on today's queue: the live state projected forward with this
    // server's profile (sim/profile_sim.h Project): every pending job's
    // expected start, and with ?add_nodes=GROUP=N[,GROUP=N] and
    // ?drain=NODE[,NODE] the same beside it, from one snapshot. ?horizon=
    // bounds it (default 30d, at most 90d). The jobs are those the caller
    // may see; the projection runs all of them. One projection at a time.
    srv.Get("/v1/whatif", Guard([this](const Principal& who, const HttpRequest& req, HttpResponse& res) {
      WhatIf(who, req, nullptr, "", res);
    }));
    // The same with a variant policy: the body is a cluster config whose
    // queues, quotas, priority classes, profile, fair share and backfill
    // replace the server's in the variant (its node groups serve
    // ?add_nodes); with ?only=profile, its profile alone replaces the
    // server's. The running and queued jobs are the live ones, as they were
    // admitted (their priorities already resolved). Admins only: a config
    // is an operator's to try, and costs what it describes.
    srv.Post("/v1/whatif", Guard([this](const Principal& who, const HttpRequest& req, HttpResponse& res) {
      if (!who.admin()) {
        return ReplyError(res, Status(StatusCode::kPermissionDenied,
                                      "a what-if under another config is for admins (GET /v1/whatif is for everyone)"));
      }
      const std::string only = req.get_param_value("only");
      if (!only.empty() && only != "profile") {
        return ReplyError(res, InvalidArgumentError("only: must be profile (or absent: the whole config), got '" + only + "'"));
      }
      StatusOr<ClusterConfig> body = api::ParseClusterConfig(req.body, "request body");
      if (!body.ok()) return ReplyError(res, body.status());
      ClusterConfig variant = *body;
      if (only == "profile") {
        variant = c_->config();
        variant.profile = body->profile;
      }
      variant.topology = c_->config().topology;  // the cluster's, as its nodes are labelled
      int64_t nodes = 0;
      for (const NodeGroupConfig& g : variant.node_groups) nodes += g.count;
      if (nodes > kMaxWhatIfNodes) {
        return ReplyError(res, InvalidArgumentError("node_groups: " + std::to_string(nodes) + " nodes; a what-if config " +
                                                    "declares at most " + std::to_string(kMaxWhatIfNodes)));
      }
      // Refused before any projection runs (and takes the one slot).
      if (Status s = sched::Scheduler::Create(variant).status(); !s.ok()) return ReplyError(res, s);
      WhatIf(who, req, &variant, only == "profile" ? "the body's profile" : "the body's config", res);
    }));

    srv.Get("/v1/nodes", Guard([this](const Principal& who, const HttpRequest&, HttpResponse& res) {
      Snapshot snap = c_->snapshot();
      const auto live = c_->nodes_live();
      ordered_json nodes = ordered_json::array();
      const std::string* viewer = Viewer(who);  // (job ids as /v1/jobs shows them)
      for (const NodeState& n : snap.nodes()) nodes.push_back(NodeView(*c_, snap, n, live, viewer));
      Reply(res, 200, {{"nodes", nodes}});
    }));

    // Each of a node's GPUs over time: ?since=24h (default), ?step=minute
    // (the default up to 2 days back) or hour.
    srv.Get(R"(/v1/nodes/([^/]+)/history)", Guard([this](const Principal&, const HttpRequest& req, HttpResponse& res) {
      const std::string node = req.matches[1];
      if (c_->snapshot().FindNode(node) == nullptr) return ReplyError(res, NotFoundError("no node named '" + node + "'"));
      Duration since = 24 * 3600 * kMicrosPerSecond;
      if (Status s = SinceParam(req, &since); !s.ok()) return ReplyError(res, s);
      int32_t step = since <= 48 * 3600 * kMicrosPerSecond ? GpuHistoryBlock::kMinute : GpuHistoryBlock::kHour;
      if (req.has_param("step")) {
        const std::string v = req.get_param_value("step");
        if (v == "minute") step = GpuHistoryBlock::kMinute;
        else if (v == "hour") step = GpuHistoryBlock::kHour;
        else return ReplyError(res, InvalidArgumentError("step: '" + v + "' is not one of minute, hour"));
      }
      const TimePoint now = c_->clock().Now();
      const TimePoint from = now - since;
      // Blocks that start before `from` may hold points after it.
      const TimePoint span = int64_t{step == GpuHistoryBlock::kMinute ? 3600 : 86400} * kMicrosPerSecond;
      auto blocks = c_->GpuHistory(node, step, BlockStart(step, from), now + span);
      if (!blocks.ok()) return ReplyError(res, blocks.status());
      std::map<int32_t, ordered_json> gpus;
      for (const GpuHistoryBlock& b : *blocks) {
        ordered_json& points = gpus[b.gpu];
        if (points.is_null()) points = ordered_json::array();
        for (size_t i = 0; i < b.points.size(); ++i) {
          const GpuPoint& p = b.points[i];
          const TimePoint t = b.start + static_cast<TimePoint>(i) * b.step_s * kMicrosPerSecond;
          if (p.samples <= 0 || t + int64_t{b.step_s} * kMicrosPerSecond <= from || t > now) continue;
          points.push_back({t / kMicrosPerSecond, p.samples, p.activity, p.memory_peak, p.energy_j,
                            p.energy_j / std::max(1, b.step_s)});
        }
      }
      ordered_json list = ordered_json::array();
      for (auto& [index, points] : gpus) list.push_back({{"index", index}, {"points", std::move(points)}});
      Reply(res, 200,
            {{"node", node},
             {"step_s", step},
             {"since", from / kMicrosPerSecond},
             {"until", now / kMicrosPerSecond},
             {"columns", {"t", "samples", "activity_pct", "memory_peak_mib", "energy_j", "power_w"}},
             {"gpus", std::move(list)}});
    }));

    for (const bool drain : {true, false}) {
      srv.Post(std::string(R"(/v1/nodes/([^/]+)/)") + (drain ? "drain" : "undrain"),
             Guard([this, drain](const Principal& who, const HttpRequest& req, HttpResponse& res) {
               // ?reason= (or a JSON body {"reason": ...}): why it is drained.
               std::string reason = req.get_param_value("reason");
               if (reason.empty() && !req.body.empty()) {
                 const auto body = nlohmann::json::parse(req.body, nullptr, false);
                 if (body.is_object() && body.contains("reason") && body["reason"].is_string()) reason = body["reason"];
               }
               if (Status s = c_->SetDrain(who, req.matches[1], drain, reason); !s.ok()) return ReplyError(res, s);
               Snapshot snap = c_->snapshot();
               Reply(res, 200, NodeView(*c_, snap, *snap.FindNode(req.matches[1]), c_->nodes_live({req.matches[1]})));
             }));
    }

    srv.Post("/v1/agents/register", Guard([this](const Principal& who, const HttpRequest& req, HttpResponse& res) {
      json body = json::parse(req.body, nullptr, false);
      if (body.is_discarded() || !body.is_object() || !body.contains("node")) {
        return ReplyError(res, InvalidArgumentError("request body: must be {\"node\": {...}, \"simulated\": bool}"));
      }
      for (const char* flag : {"simulated", "mps"}) {
        if (body.contains(flag) && !body[flag].is_boolean()) {
          return ReplyError(res, InvalidArgumentError(std::string(flag) + ": must be true or false"));
        }
      }
      for (const char* text : {"address", "instance"}) {
        if (body.contains(text) && !body[text].is_string()) {
          return ReplyError(res, InvalidArgumentError(std::string(text) + ": must be a string"));
        }
      }
      auto spec = api::NodeSpecFromJson(body["node"], "node");
      if (!spec.ok()) return ReplyError(res, spec.status());
      if (Status s = api::CheckNodeText(*spec, "node"); !s.ok()) return ReplyError(res, s);
      const bool simulated = body.value("simulated", false);
      const std::string address =
          body.contains("address") && body["address"].is_string() ? body["address"].get<std::string>() : "";
      if (Status s = api::CheckAddress(address, "address"); !s.ok()) return ReplyError(res, s);
      const std::string instance =
          body.contains("instance") && body["instance"].is_string() ? body["instance"].get<std::string>() : "";
      if (Status s = api::CheckInstance(instance, "instance"); !s.ok()) return ReplyError(res, s);
      if (Status s = c_->RegisterNode(who, *spec, simulated, address, body.value("mps", false), instance); !s.ok()) {
        return ReplyError(res, s);
      }
      Reply(res, 200, {{"node", spec->name}, {"server", c_->server_id()}});
    }, Access::kAgents));


    // The agent's watch: a stream of its node's tasks, one JSON line per
    // change (the same object a heartbeat answers), empty lines between.
    srv.Get("/v1/agents/watch", Guard([this](const Principal& who, const HttpRequest& req, HttpResponse& res) {
      const std::string node = req.get_param_value("node");
      if (node.empty()) return ReplyError(res, InvalidArgumentError("node: required (?node=NAME)"));
      if (!who.admin() && who.node != node) {
        return ReplyError(res, Status(StatusCode::kPermissionDenied,
                                      "an agent token may only watch its own node ('" + who.node + "')"));
      }
      if (!c_->NodeRegistered(node)) {
        return ReplyError(res, NotFoundError("node '" + node + "' must register again"));
      }
      if (Status s = api::CheckInstance(req.get_param_value("instance"), "instance"); !s.ok()) return ReplyError(res, s);
      if (Status s = c_->CheckAgentInstance(node, req.get_param_value("instance")); !s.ok()) return ReplyError(res, s);
      res.set_header("Content-Type", "application/x-ndjson");
      res.stream = [this, node, instance = req.get_param_value("instance")](std::shared_ptr<HttpStream> stream) {
        watches_.Add(node, std::move(stream), instance);
      };
    }, Access::kAgents));

    srv.Post("/v1/tokens", Guard([this](const Principal& who, const HttpRequest& req, HttpResponse& res) {
      json body = json::parse(req.body, nullptr, false);
      if (body.is_discarded() || !body.is_object()) return ReplyError(res, InvalidArgumentError("request body: not a JSON object"));
      // (A field it does not know is refused: "tll" for "ttl" made a token
      // that never expires.)
      for (const auto& [key, value] : body.items()) {
        if (key != "user" && key != "role" && key != "node" && key != "ttl" && key != "existing") {
          return ReplyError(res, InvalidArgumentError("request body: unknown field '" + key + "'"));
        }
      }
      for (const char* field : {"user", "role", "node", "ttl"}) {
        if (body.contains(field) && !body[field].is_string()) {
          return ReplyError(res, InvalidArgumentError(std::string(field) + ": must be a string"));
        }
      }
      if (body.contains("existing") && !body["existing"].is_boolean()) {
        return ReplyError(res, InvalidArgumentError("existing: must be true or false"));
      }
      auto role = ParseRole(body.value("role", std::string("user")));
      if (!role.ok()) return ReplyError(res, role.status());
      Duration ttl = 0;
      if (body.contains("ttl")) {
        auto parsed = ParseDuration(body["ttl"].get<std::string>());
        if (!parsed.ok() || *parsed <= 0) {
          return ReplyError(res, InvalidArgumentError("ttl: must be a positive duration like 30d or 12h" +
                                                      (parsed.ok() ? std::string() : ": " + std::string(parsed.status().message()))));
        }
        ttl = *parsed;
      }
      auto token = c_->CreateToken(who, body.value("user", std::string()), *role, body.value("node", std::string()), ttl,
                                   body.value("existing", false));
      if (!token.ok()) return ReplyError(res, token.status());
      ordered_json out{{"token", *token}, {"id", Sha256Hex(*token).substr(0, 12)}, {"user", body.value("user", std::string())},
                       {"role", std::string(RoleName(*role))}};
      if (ttl > 0) out["expires_at"] = FormatTime(c_->clock().Now() + ttl);
      Reply(res, 201, out);
    }));

    // Who the token is (the dashboard shows the actions this caller may take).
    srv.Get("/v1/whoami", Guard([this](const Principal& who, const HttpRequest&, HttpResponse& res) {
      Reply(res, 200, {{"user", who.user}, {"role", std::string(RoleName(who.role))}, {"sees_all_jobs", who.admin() || AllSeeAll()}});
    }));

    srv.Get("/v1/tokens", Guard([this](const Principal& who, const HttpRequest&, HttpResponse& res) {
      auto tokens = c_->ListTokens(who);
      if (!tokens.ok()) return ReplyError(res, tokens.status());
      const TimePoint now = c_->clock().Now();
      ordered_json out = ordered_json::array();
      for (const TokenRecord& t : *tokens) {
        const bool expired = t.expires_at > 0 && now >= t.expires_at;
        out.push_back({{"id", TokenId(t)}, {"user", t.user}, {"role", t.role}, {"node", t.node},
                       {"created_at", FormatTime(t.created_at)},
                       {"expires_at", t.expires_at > 0 ? FormatTime(t.expires_at) : std::string()},
                       {"state", t.revoked ? "revoked" : expired ? "expired" : "active"}});
      }
      Reply(res, 200, {{"tokens", out}});
    }));

    srv.Post(R"(/v1/tokens/([0-9a-f]{1,64})/revoke)", Guard([this](const Principal& who, const HttpRequest& req, HttpResponse& res) {
      if (Status s = c_->RevokeToken(who, req.matches[1]); !s.ok()) return ReplyError(res, s);
      Reply(res, 200, {{"id", std::string(req.matches[1])}, {"state", "revoked"}});
    }));

    // ?labels=dcgm: dcgm-exporter's own label names (a scrape job's params).
    // Everything for an admin (a scraper's token); a user gets the cluster's
    // series, their own jobs' and the services they may see, as the API
    // shows them.
    srv.Get("/metrics", Guard([this](const Principal& who, const HttpRequest& req, HttpResponse& res) {
      const std::string labels = req.get_param_value("labels");
      if (!labels.empty() && labels != "dcgm") {
        return ReplyError(res, InvalidArgumentError("labels: '" + labels + "' is not dcgm"));
      }
      res.set_content(RenderMetrics(*c_, labels == "dcgm", who.admin() ? nullptr : &who.user) + ReplicaMetrics() +
                          ServiceMetrics(who) + TransportMetrics() + watches_.Metrics(),
                      "text/plain; version=0.0.4");
    }));

    // Services: desired, placed and ready replicas, the router's signals
    // and the autoscaler's last decision (visible as their jobs are).
    srv.Get("/v1/services", Guard([this](const Principal& who, const HttpRequest&, HttpResponse& res) {
      Snapshot snap = c_->snapshot();
      const auto status = options_.services != nullptr ? options_.services->status() : std::map<JobId, ServiceStatus>{};
      ordered_json list = ordered_json::array();
      for (const JobRecord* job : snap.LiveServices()) {
        if (!Sees(who, *job)) continue;
        auto it = status.find(job->id);
        list.push_back(ServiceView(snap, who, *job, it != status.end() ? &it->second : nullptr));
      }
      Reply(res, 200, {{"router", options_.router_url}, {"services", list}});
    }));
    // rota apply: the live service of the spec's name takes the new spec
    // (the name in the path must be the spec's); its replicas roll onto it.
    srv.Post(R"(/v1/services/([^/]+)/apply)", Guard([this](const Principal& who, const HttpRequest& req,
                                                           HttpResponse& res) {
      auto spec = api::ParseJobSpec(req.body, "request body");
      if (!spec.ok()) return ReplyError(res, spec.status());
      if (spec->name != req.matches[1]) {
        return ReplyError(res, InvalidArgumentError("name: the spec names '" + spec->name + "', the path '" +
                                                    req.matches[1] + "'"));
      }
      if (Status s = RequireCommands(*spec); !s.ok()) return ReplyError(res, s);
      auto id = c_->UpdateService(who, std::move(*spec));
      if (!id.ok()) return ReplyError(res, id.status());
      ReplyJob(res, *id, who);
    }));
    srv.Get(R"(/v1/services/([^/]+)/endpoints)", Guard([this](const Principal& who, const HttpRequest& req,
                                                              HttpResponse& res) {
      Snapshot snap = c_->snapshot();
      const JobRecord* found = nullptr;
      for (const JobRecord* job : snap.LiveServices()) {
        if (job->spec().name == req.matches[1]) found = job;
      }
      if (found == nullptr || !Sees(who, *found)) {
        return ReplyError(res, NotFoundError("no service '" + req.matches[1] + "'"));
      }
      ordered_json endpoints = ordered_json::array();
      Router* router = options_.services != nullptr ? options_.services->router() : nullptr;
      if (router != nullptr) {
        for (const RouterEndpoint& e : router->Endpoints(found->spec().name)) {
          endpoints.push_back({{"replica", e.replica}, {"attempt", e.attempt}, {"address", e.address},
                               {"ready", e.ready}, {"draining", e.draining}, {"outstanding", e.outstanding},
                               {"spec", e.attempt <= found->spec_attempt ? "old" : "current"}});
        }
      }
      Reply(res, 200, {{"service", found->spec().name},
                       {"job", found->id.value()},
                       {"url", options_.router_url.empty() ? "" : options_.router_url + "/" + found->spec().name + "/"},
                       {"endpoints", endpoints}});
    }));

    // The control plane's replicas: the leader, its epoch, and each standby
    // with how far its warm state is behind the journal (events).
    srv.Get("/v1/replicas", Guard([this](const Principal&, const HttpRequest&, HttpResponse& res) {
      Reply(res, 200, ReplicasView());
    }));

    srv.set_error_handler([](const HttpRequest& req, HttpResponse& res) {
      if (!res.body.empty()) return;
      const int status = res.status;
      if (status == 404) ReplyError(res, NotFoundError("no route " + req.method + " " + req.path));
      else if (status == 413) ReplyError(res, InvalidArgumentError("request body is over the size limit"));
      else if (status == 400) ReplyError(res, InvalidArgumentError("malformed HTTP request (a POST needs Content-Length)"));
      else ReplyError(res, Status(StatusCode::kInvalidArgument, "request refused"));
      res.status = status;
    });
  }

  bool Standby() const { return options_.replica != nullptr && !options_.replica->leading(); }

  ordered_json ServiceView(const Snapshot& snap, const Principal& who, const JobRecord& job, const ServiceStatus* st) const {
    const ServiceSpec& sv = job.spec().service;
    ordered_json v{{"name", job.spec().name},
                   {"job", job.id.value()},
                   {"user", job.user},
                   {"state", std::string(JobStateName(job.state))},
                   {"url", options_.router_url.empty() ? "" : options_.router_url + "/" + job.spec().name + "/"},
                   {"replicas",
                    {{"min", sv.min_replicas},
                     {"max", sv.max_replicas},
                     {"desired", job.DesiredReplicas()},
                     {"placed", job.state == JobState::kRunning ? job.placement.size() : 0},
                     {"ready", st != nullptr ? st->signals.ready : 0}}},
                   {"autoscale", sv.autoscale.enabled()}};
    if (st != nullptr) {
      v["signals"] = {{"inflight", st->signals.inflight},
                      {"inflight_avg", st->signals.inflight_avg},
                      {"queued", st->signals.queued},
                      {"requests", st->signals.requests},
                      {"failed", st->signals.failed},
                      {"retried", st->signals.retried},
                      {"abandoned", st->signals.abandoned},
                      {"p50_ms", st->signals.p50_ms},
                      {"p99_ms", st->signals.p99_ms}};
      if (st->gpu_memory >= 0) v["signals"]["gpu_memory"] = st->gpu_memory;
      if (!st->signals.metrics.empty()) v["signals"]["metrics"] = st->signals.metrics;
      if (st->last.panic) v["panic"] = true;
      if (!st->rollout.empty()) v["rollout"] = st->rollout;
    }
    if (job.scaled_at != 0) {
      v["last_scale"] = {{"at", FormatTime(job.scaled_at)}, {"to", job.desired_replicas}, {"reason", job.last_scale_reason}};
    }
    if (job.state == JobState::kPending) {
      if (auto why = c_->pending_reason(job.id)) v["reason"] = ReasonFor(snap, why->message.str(), Owns(who, job), Viewer(who));
    }
    return v;
  }

  std::string ServiceMetrics(const Principal& who) const {
    if (options_.services == nullptr) return "";
    Snapshot snap = c_->snapshot();
    std::string m =
        "# HELP rota_service_replicas A service's replicas: desired by its autoscaler, placed, ready in the router.\n"
        "# TYPE rota_service_replicas gauge\n"
        "# HELP rota_service_inflight_requests Requests a service's replicas are answering now (router).\n"
        "# TYPE rota_service_inflight_requests gauge\n"
        "# HELP rota_service_queued_requests Requests waiting for a ready replica (router).\n"
        "# TYPE rota_service_queued_requests gauge\n"
        "# HELP rota_service_requests_total Requests the router answered, and those it failed itself (502/503).\n"
        "# TYPE rota_service_requests_total counter\n"
        "# HELP rota_service_latency_seconds The router's latency over the last 2048 requests.\n"
        "# TYPE rota_service_latency_seconds gauge\n";
    if (const Router* router = options_.services->router(); router != nullptr) {
      m += "# HELP rota_router_buffered_bytes Request and answer bodies the router holds now (--router-buffer bounds it).\n"
           "# TYPE rota_router_buffered_bytes gauge\n"
           "rota_router_buffered_bytes " + std::to_string(router->buffered_bytes()) + "\n"
           "# HELP rota_router_buffer_refusals_total Requests refused with 503 because the router's buffers were full.\n"
           "# TYPE rota_router_buffer_refusals_total counter\n"
           "rota_router_buffer_refusals_total " + std::to_string(router->refused_for_buffers()) + "\n";
    }
    for (const auto& [id, st] : options_.services->status()) {
      const JobRecord* job = snap.FindJob(id);
      if (job == nullptr || !Sees(who, *job)) continue;  // (as /v1/services)
      std::string name = job->spec().name;  // (names are letters, digits, '-', '_', '.')
      const std::string l = "{service=\"" + name + "\"";
      auto num = [](double v) {
        char buf[32];
        std::snprintf(buf, sizeof buf, "%.6g", v);
        return std::string(buf);
      };
      m += "rota_service_replicas" + l + ",kind=\"desired\"} " + std::to_string(job->DesiredReplicas()) + "\n";
      m += "rota_service_replicas" + l + ",kind=\"placed\"} " +
           std::to_string(job->state == JobState::kRunning ? job->placement.size() : 0) + "\n";
      m += "rota_service_replicas" + l + ",kind=\"ready\"} " + std::to_string(st.signals.ready) + "\n";
      m += "rota_service_inflight_requests" + l + "} " + std::to_string(st.signals.inflight) + "\n";
      m += "rota_service_queued_requests" + l + "} " + std::to_string(st.signals.queued) + "\n";
      m += "rota_service_requests_total" + l + ",result=\"all\"} " + std::to_string(st.signals.requests) + "\n";
      m += "rota_service_requests_total" + l + ",result=\"router_error\"} " + std::to_string(st.signals.failed) + "\n";
      m += "rota_service_latency_seconds" + l + ",quantile=\"0.5\"} " + num(st.signals.p50_ms / 1000) + "\n";
      m += "rota_service_latency_seconds" + l + ",quantile=\"0.99\"} " + num(st.signals.p99_ms / 1000) + "\n";
    }
    return m;
  }

  ordered_json ReplicasView() const {
    ordered_json out{{"store", options_.replica == nullptr ? "sqlite" : "postgres"},
                     {"leader", options_.replica == nullptr ? "" : options_.replica->leader()},
                     {"epoch", options_.replica == nullptr ? 0 : options_.replica->epoch()},
                     {"answered_by", options_.replica == nullptr ? "" : options_.replica->advertise()},
                     {"replicas", ordered_json::array()}};
    if (options_.replica == nullptr) return out;
    const std::vector<ReplicaRow> rows = options_.replica->replicas();
    // The leader's position is the journal's head.
    const std::string leader = options_.replica->leader();
    uint64_t head = 0;
    for (const ReplicaRow& r : rows) {
      if (r.url == leader) head = r.seq;
    }
    for (const ReplicaRow& r : rows) {
      const bool is_leader = r.url == leader;
      out["replicas"].push_back({{"url", r.url},
                                 {"role", is_leader ? "leader" : r.role == "leader" ? "stale leader" : r.role},
                                 {"seq", r.seq},
                                 {"lag_events", head > r.seq ? head - r.seq : 0},
                                 {"seen_ms_ago", r.age / 1000}});
    }
    out["journal_seq"] = head;
    return out;
  }

  // The HTTP front end: connections and how far its loop fell behind.
  std::string TransportMetrics() {
    char lag[64];
    std::snprintf(lag, sizeof lag, "%.6f", static_cast<double>(server_->TakeLoopLagMax()) / 1e6);
    return "# HELP rota_http_connections Connections open to the API (agents' watches included).\n"
           "# TYPE rota_http_connections gauge\n"
           "rota_http_connections " + std::to_string(server_->connections()) + "\n"
           "# HELP rota_http_loop_lag_max_seconds The most the HTTP event loop ran behind since the last scrape "
           "(a timer due every 20 ms): how long a request waited for the loop at worst.\n"
           "# TYPE rota_http_loop_lag_max_seconds gauge\n"
           "rota_http_loop_lag_max_seconds " + std::string(lag) + "\n"
           "# HELP rota_http_idle_connections_closed_total Idle kept-alive connections closed to make room for new "
           "ones (out of connections or descriptors).\n"
           "# TYPE rota_http_idle_connections_closed_total counter\n"
           "rota_http_idle_connections_closed_total " + std::to_string(server_->idle_closed()) + "\n"
           "# HELP rota_http_slow_connections_closed_total Connections still on their first request's header after 2 s "
           "closed to make room for new ones (no idle one left to close).\n"
           "# TYPE rota_http_slow_connections_closed_total counter\n"
           "rota_http_slow_connections_closed_total " + std::to_string(server_->slow_closed()) + "\n"
           "# HELP rota_http_connections_accepted_total Connections accepted (those then refused at a cap too).\n"
           "# TYPE rota_http_connections_accepted_total counter\n"
           "rota_http_connections_accepted_total " + std::to_string(server_->accepted()) + "\n";
  }

  std::string ReplicaMetrics() const {
    if (options_.replica == nullptr) return "";
    const ordered_json view = ReplicasView();
    std::string m =
        "# HELP rota_replica_epoch The lease epoch this leader holds.\n# TYPE rota_replica_epoch gauge\n"
        "rota_replica_epoch " + std::to_string(options_.replica->epoch()) + "\n"
        "# HELP rota_replica_lag_events Journal events a replica's state is behind the leader's.\n"
        "# TYPE rota_replica_lag_events gauge\n";
    for (const auto& r : view["replicas"]) {
      std::string url = r["url"].get<std::string>();
      std::erase_if(url, [](char ch) { return ch == '"' || ch == '\\' || ch == '\n'; });
      m += "rota_replica_lag_events{replica=\"" + url + "\",role=\"" + r["role"].get<std::string>() + "\"} " +
           std::to_string(r["lag_events"].get<uint64_t>()) + "\n";
    }
    return m;
  }

  // The job `id_text` names, if `who` may act on it (its owner, an admin).
  // With job_visibility: all, a job `who` may only see is refused with
  // PermissionDenied (it is no secret that it exists); otherwise NotFound.
  Status Find(const Principal& who, const Snapshot& snap, const std::string& id_text, const JobRecord** job) {
    ROTA_ASSIGN_OR_RETURN(uint64_t id, ParseId(id_text));
    *job = snap.FindJob(JobId(id));
    if (*job == nullptr) return NoJob(snap, id);
    if (!who.admin() && (*job)->user != who.user) {
      if (!AllSeeAll()) return NoJob(snap, id);
      return Status(StatusCode::kPermissionDenied, "job " + std::to_string(id) + " is " + (*job)->user +
                                                       "'s: only its owner or an admin may do that");
    }
    return Status::Ok();
  }
  // The job, if `who` may see it; *owner: whether `who` may also act on it
  // (see its spec and logs, cancel it).
  Status FindVisible(const Principal& who, const Snapshot& snap, const std::string& id_text, const JobRecord** job,
                     bool* owner) {
    ROTA_ASSIGN_OR_RETURN(uint64_t id, ParseId(id_text));
    *job = snap.FindJob(JobId(id));
    *owner = *job != nullptr && Owns(who, **job);
    if (*job == nullptr || (!*owner && !AllSeeAll())) return NoJob(snap, id);
    return Status::Ok();
  }
  // 200 with job `id` as it is now, after a change to it; 404 if it is gone
  // since (a job that ended can be forgotten at any time after the job
  // retention, which may be short).
  void ReplyJob(HttpResponse& res, JobId id, const Principal& who) const {
    const Snapshot snap = c_->snapshot();
    const JobRecord* job = snap.FindJob(id);
    if (job == nullptr) return ReplyError(res, NoJob(snap, id.value()));
    // (Only its owner or an admin changes it.)
    Reply(res, 200, JobView(*c_, snap, *job, /*owner=*/true, false, Viewer(who)));
  }
  // NotFound for job `id`. An id below those forgotten jobs had (it may be
  // one) says that ended jobs are forgotten; another's job hidden there says
  // the same, so the answer tells nothing of whose it is.
  Status NoJob(const Snapshot& snap, uint64_t id) const {
    std::string message = "no job " + std::to_string(id);
    if (id < snap.issued_below()) {
      const std::string report = "rota report job " + std::to_string(id) + " shows what it used";
      message += c_->job_retention() > 0
                     ? " (a job is forgotten " + FormatDuration(c_->job_retention()) + " after it ends; " + report + ")"
                     : " (a job that ended may have been forgotten; " + report + ")";
    }
    return NotFoundError(message);
  }
  bool AllSeeAll() const { return c_->config().job_visibility == "all"; }
  // Whether `who` sees `job` in listings (Controller::Sees), and owns it (or is an admin).
  bool Sees(const Principal& who, const JobRecord& job) const { return c_->Sees(who, job); }
  static bool Owns(const Principal& who, const JobRecord& job) { return who.admin() || job.user == who.user; }
  // The user reasons are told to as one who sees only their own jobs (ReasonFor), or nullptr: all.
  const std::string* Viewer(const Principal& who) const { return who.admin() || AllSeeAll() ? nullptr : &who.user; }
  // A job report's attempts with their end reasons as `who` may read them
  // (a job's usage is its owner's: only other users' job ids are told so).
  ordered_json TheirReasons(ordered_json report, const Snapshot& snap, const Principal& who) const {
    if (Viewer(who) == nullptr || !report.contains("attempts")) return report;
    for (auto& a : report["attempts"]) {
      if (a.contains("reason") && a["reason"].is_string()) a["reason"] = ReasonFor(snap, a["reason"].get<std::string>(), true, Viewer(who));
    }
    return report;
  }

  // A projection with this server's engine settings.
  // A projection runs at most kProjectionBudget of wall time: a bigger queue
  // is projected as far as that reaches ("complete": false). A what-if with
  // changes runs two side by side, on two cores where the host has them.
  static constexpr Duration kProjectionBudget = 10 * kMicrosPerSecond;
  // GET (and POST) /v1/whatif: the baseline under this server's config and,
  // with changes (?add_nodes, ?drain, and given `variant`, that config's
  // policy in place of the server's, named `variant_name`), the same beside it.
  void WhatIf(const Principal& who, const HttpRequest& req, const ClusterConfig* variant, const std::string& variant_name,
              HttpResponse& res) {
    sim::ProjectOptions options = ProjectionOptions();
    if (req.has_param("horizon")) {
      auto h = ParseDuration(req.get_param_value("horizon"));
      if (!h.ok() || *h <= 0 || *h > 90LL * 24 * 3600 * kMicrosPerSecond) {
        return ReplyError(res, InvalidArgumentError("horizon: must be a duration from 1s to 90d, got '" +
                                                    req.get_param_value("horizon") + "'"));
      }
      options.horizon = *h;
    }
    sim::WhatIfChange change;
    for (const std::string& item : SplitList(req.get_param_value("add_nodes"))) {
      const size_t eq = item.find('=');
      int32_t n = 0;
      const char* begin = item.data() + (eq == std::string::npos ? 0 : eq + 1);
      auto [end, ec] = std::from_chars(begin, item.data() + item.size(), n);
      if (eq == std::string::npos || eq == 0 || ec != std::errc() || end != item.data() + item.size() || n < 1) {
        return ReplyError(res, InvalidArgumentError("add_nodes: '" + item + "' is not GROUP=N (N >= 1)"));
      }
      change.add_nodes.emplace_back(item.substr(0, eq), n);
    }
    change.drain = SplitList(req.get_param_value("drain"));
    const auto slot = TakeProjectionSlot(res);
    if (slot == nullptr) return;
    const Snapshot snap = c_->snapshot();
    const TimePoint now = c_->clock().Now();
    auto view = [&](const sim::Projection& p) {
      ordered_json jobs = ordered_json::array();
      for (const sim::ProjectedStart& s : p.jobs) {
        const JobRecord* job = snap.FindJob(s.job);
        if (job == nullptr || !Sees(who, *job)) continue;
        ordered_json j = {{"id", s.job.value()}, {"name", job->spec().name}, {"user", job->user}, {"queue", job->spec().queue}};
        j["expected_start"] = s.start >= 0 ? ordered_json(FormatTime(s.start)) : ordered_json(nullptr);
        j["starts_in_s"] = s.start >= 0 ? ordered_json((s.start - now) / kMicrosPerSecond) : ordered_json(nullptr);
        j["estimate"] = s.estimate;
        if (job->held) j["held"] = true;  // not scheduled until released
        if (!s.why.empty()) j["why"] = ReasonFor(snap, s.why, Owns(who, *job), Viewer(who));
        jobs.push_back(std::move(j));
      }
      return ordered_json{{"jobs", jobs},       {"default_run_s", p.default_run / kMicrosPerSecond},
                          {"learned", p.learned}, {"steps", p.steps}, {"wall_ms", p.wall_s * 1000},
                          {"complete", !p.cut_short}};
    };
    // With changes, the two projections (of the one snapshot) run side by
    // side, the changed one on a thread of its own: the answer comes in the
    // time of the longer, not of both (each is within its budget).
    const bool side_by_side = !change.empty() || variant != nullptr;
    sim::ProjectOptions changed_options = options;
    changed_options.change = change;
    std::optional<StatusOr<sim::Projection>> changed;
    auto project_changed = [&] {
      changed.emplace(sim::Project(variant != nullptr ? *variant : c_->config(), snap, now, changed_options));
    };
    // What the changed projection threw (bad_alloc, say), thrown again here
    // once it is joined: the request fails alone, as with one projection.
    std::exception_ptr side_error;
    std::jthread side;  // (declared after what it reads: joined first, also when the baseline throws)
    if (side_by_side) {
      try {
        side = std::jthread([&] {
          NameThisThread("rota-whatif");
          try {
            project_changed();
          } catch (...) {
            side_error = std::current_exception();
          }
        });
      } catch (const std::system_error&) {  // (no thread to be had: one after the other)
      }
    }
    StatusOr<sim::Projection> base = sim::Project(c_->config(), snap, now, options);
    if (side.joinable()) side.join();
    if (side_error) std::rethrow_exception(side_error);
    if (side_by_side && !changed.has_value()) project_changed();
    if (!base.ok()) return ReplyError(res, base.status());
    ordered_json out = {{"now", FormatTime(now)}, {"horizon_s", options.horizon / kMicrosPerSecond}, {"baseline", view(*base)}};
    if (side_by_side) {
      if (!changed->ok()) return ReplyError(res, changed->status().WithPrefix("with changes"));
      ordered_json v = view(**changed);
      ordered_json adds = ordered_json::object();
      for (const auto& [group, n] : change.add_nodes) adds[group] = n;
      v["add_nodes"] = adds;
      v["drain"] = change.drain;
      if (variant != nullptr) v["policy"] = variant_name;
      out["with_changes"] = std::move(v);
    }
    Reply(res, 200, out);
  }

  static constexpr int64_t kMaxWhatIfNodes = 100'000;
  sim::ProjectOptions ProjectionOptions() const {
    sim::ProjectOptions options;
    options.sim.min_runtime = c_->min_runtime();
    options.sim.preempt_slack = c_->preempt_slack();
    options.wall_budget = kProjectionBudget;
    options.usage_history = c_->usage_history();
    return options;
  }
  // One projection request at a time (each may take a core, or two side by
  // side, for a second): the slot,
  // released when it goes, or null with a 429 written to `res`.
  struct ProjectionSlot {
    explicit ProjectionSlot(std::atomic<bool>* f) : flag(f) {}
    ProjectionSlot(const ProjectionSlot&) = delete;
    ProjectionSlot& operator=(const ProjectionSlot&) = delete;
    ~ProjectionSlot() { flag->store(false); }
    std::atomic<bool>* flag;
  };
  std::unique_ptr<ProjectionSlot> TakeProjectionSlot(HttpResponse& res) {
    bool expected = false;
    if (!projecting_.compare_exchange_strong(expected, true)) {
      res.set_header("Retry-After", "1");
      ReplyError(res, Status(StatusCode::kResourceExhausted, "a what-if projection is already running; retry shortly"));
      return nullptr;
    }
    return std::make_unique<ProjectionSlot>(&projecting_);
  }

  // POST /v1/jobs?dry_run=true (like sbatch --test-only): whether the job
  // would be accepted, and where and when it would start, from the live
  // state projected forward with it added (as GET /v1/whatif projects);
  // nothing is journaled. An array's `count` copies are projected together.
  void DryRun(const Principal& who, JobSpec spec, const ArrayRange& array, HttpResponse& res) {
    const int64_t count = array.count;
    if (count < 1 || count > 10'000) return ReplyError(res, InvalidArgumentError("count: a dry run takes 1..10000 copies"));
    // The projection holds a copy of the spec per element: a spec near the
    // body limit 10,000 times over would be gigabytes.
    const size_t spec_bytes = static_cast<size_t>(spec.Bytes());
    if (constexpr size_t kDryRunBytes = 64 << 20; static_cast<size_t>(count) * spec_bytes > kDryRunBytes) {
      return ReplyError(res, InvalidArgumentError("count: a dry run of " + std::to_string(count) + " copies of this spec (" +
                                                  std::to_string(spec_bytes >> 10) + " KiB of spec: commands, environment and the rest) " +
                                                  "would hold too much; at most " +
                                                  std::to_string(std::max<size_t>(1, kDryRunBytes / spec_bytes)) +
                                                  " copies of it"));
    }
    if (Status s = c_->CheckSubmission(who, &spec); !s.ok()) return ReplyError(res, s);
    if (Status s = c_->CheckTenantLimits(who, spec, count); !s.ok()) return ReplyError(res, s);  // as a submission would
    const auto slot = TakeProjectionSlot(res);
    if (slot == nullptr) return;
    sim::ProjectOptions options = ProjectionOptions();
    options.user = who.user;
    options.submit.assign(static_cast<size_t>(count), spec);
    options.submit_array = array;
    const Snapshot snap = c_->snapshot();
    const TimePoint now = c_->clock().Now();
    StatusOr<sim::Projection> p = sim::Project(c_->config(), snap, now, options);
    if (!p.ok()) return ReplyError(res, p.status());
    const sim::ProjectedStart& first = p->jobs[p->jobs.size() - static_cast<size_t>(count)];
    const sim::ProjectedStart& last = p->jobs.back();
    if (!first.why.empty()) {  // the projection's cycle rejected it (its queue could never admit it)
      return ReplyError(res, Status(StatusCode::kOutOfRange, first.why));
    }
    ordered_json out = {{"dry_run", true}, {"name", spec.name}, {"queue", spec.queue}, {"count", count}};
    out["expected_start"] = first.start >= 0 ? ordered_json(FormatTime(first.start)) : ordered_json(nullptr);
    out["starts_in_s"] = first.start >= 0 ? ordered_json((first.start - now) / kMicrosPerSecond) : ordered_json(nullptr);
    out["estimate"] = first.estimate;
    ordered_json placement = ordered_json::array();
    for (const ReplicaPlacement& r : first.placement) {
      ordered_json gpus = ordered_json::array();
      for (int32_t g = 0; g < 64; ++g) {
        if ((r.gpu_mask >> g) & 1) gpus.push_back(g);
      }
      const bool known = r.node.value() < snap.nodes().size();
      placement.push_back({{"node", known ? snap.nodes()[r.node.value()].spec.name : std::to_string(r.node.value())},
                           {"task", spec.tasks[r.task].name}, {"replica", r.replica}, {"gpus", gpus}});
    }
    out["placement"] = placement;
    if (count > 1) out["last_starts_in_s"] = last.start >= 0 ? ordered_json((last.start - now) / kMicrosPerSecond) : ordered_json(nullptr);
    out["default_run_s"] = p->default_run / kMicrosPerSecond;
    out["learned"] = p->learned;
    out["complete"] = !p->cut_short;
    Reply(res, 200, out);
  }

  // An agent's report (POST /v1/agents/heartbeat). `on_loop`: on the event
  // loop, which hands what would block (log pieces to write, a long poll,
  // the controller's lock while another holds it) to a worker (`offload`)
  // rather than do it.
  void Report(const Principal& who, const HttpRequest& req, HttpResponse& res, bool on_loop) {
    json body = json::parse(req.body, nullptr, false);
    if (body.is_discarded() || !body.is_object()) return ReplyError(res, InvalidArgumentError("request body: not a JSON object"));
    auto report = api::HeartbeatFromJson(body);
    if (!report.ok()) return ReplyError(res, report.status());
    if (report->wait_ms == 0) {
      // A report (the watch transport's heartbeats, exits, checkpoints):
      // answered once durable, without holding a worker meanwhile.
      if (Status s = c_->CheckReporter(who, *report); !s.ok()) return ReplyError(res, s);
      auto answer = [this, who](HeartbeatReport parsed) {
        return [this, who, parsed = std::move(parsed)](std::function<void(HttpResponse)> respond) mutable {
          AsyncBegin();
          c_->HeartbeatAsync(who, std::move(parsed), [this, respond = std::move(respond)](
                                                         StatusOr<std::vector<TaskAssignment>> tasks, uint64_t revision) {
            HttpResponse out;
            if (!tasks.ok()) ReplyError(out, tasks.status());
            else ReplyAnswer(out, *c_, std::move(*tasks), revision);
            respond(std::move(out));
            AsyncEnd();
          });
        };
      };
      if (!on_loop || (!HasLogs(*report) && !c_->Busy())) {
        StoreLogs(*report);  // (on the loop: none to write)
        res.deferred = answer(std::move(*report));
        return;
      }
      res.offload = [this, answer, report = std::move(*report)](HttpResponse& out) mutable {
        StoreLogs(report);
        out.deferred = answer(std::move(report));
      };
      return;
    }
    if (!on_loop) return LongPoll(who, *report, res);
    res.offload = [this, who, report = std::move(*report)](HttpResponse& out) mutable { LongPoll(who, report, out); };
  }

  // The long-poll transport's heartbeat (on a worker): the answer held
  // until the node's tasks change or wait_ms passes.
  void LongPoll(const Principal& who, HeartbeatReport& report, HttpResponse& res) {
    const int64_t wait_ms = report.wait_ms;
    const uint64_t version = c_->NodeVersion(report.node);
    uint64_t revision = 0;
    auto tasks = c_->Heartbeat(who, report, &revision);
    if (!tasks.ok()) return ReplyError(res, tasks.status());
    StoreLogs(report);
    // Long poll: when nothing changed for this agent, hold the answer until
    // its tasks change or wait_ms passes, so new work starts at once.
    // Nothing to do for the agent = every wanted task is running or has
    // exited already; if its exits changed anything, the node's version
    // moved and the wait returns at once.
    std::set<std::string> running, exited, wanted;
    for (const TaskReport& t : report.tasks) {
      (t.exited ? exited : running).insert(TaskKey(t.job, t.task, t.replica, t.attempt));
    }
    for (const TaskAssignment& a : *tasks) {
      const std::string key = TaskKey(a.job, a.task, a.replica, a.attempt);
      if (!exited.count(key)) wanted.insert(key);
    }
    const bool idle = running == wanted;
    if (wait_ms > 0 && idle && long_polls_.fetch_add(1) < kMaxLongPolls) {
      const bool changed = c_->WaitNodeChange(report.node, version, wait_ms * 1000);
      long_polls_.fetch_sub(1);
      if (changed) {
        report.tasks.clear();  // (so it lists nothing: no longer a full report)
        report.revision = 0;
        report.gpus.clear();
        tasks = c_->Heartbeat(who, report, &revision);
        if (!tasks.ok()) return ReplyError(res, tasks.status());
      }
    } else if (wait_ms > 0 && idle) {
      long_polls_.fetch_sub(1);
    }
    ReplyAnswer(res, *c_, std::move(*tasks), revision);
  }

  // Whether the report carries pieces of logs StoreLogs would write.
  bool HasLogs(const HeartbeatReport& report) const {
    return !options_.logs_dir.empty() &&
           std::any_of(report.tasks.begin(), report.tasks.end(), [](const TaskReport& t) { return !t.log.empty(); });
  }
  // Appends the log pieces a (remote) agent shipped to the server's log
  // directory, where `rota logs` reads them. Only replicas that run or ran on
  // the reporting node; a piece sent twice (a lost reply) is not written twice.
  void StoreLogs(const HeartbeatReport& report) {
    if (!HasLogs(report)) return;
    std::lock_guard<std::mutex> lock(logs_mu_);  // two reports of one node may carry the same piece
    Snapshot snap = c_->snapshot();
    const NodeState* node = snap.FindNode(report.node);
    if (node == nullptr) return;
    for (const TaskReport& t : report.tasks) {
      if (t.log.empty()) continue;
      const JobRecord* job = snap.FindJob(t.job);
      if (job == nullptr || t.task >= job->spec().tasks.size()) continue;
      // Whether the reporting node holds this replica (or, `any`, one of the
      // job's replicas) in its placement now or before its last requeue.
      auto here = [&](bool any) {
        auto match = [&](const ReplicaPlacement& r) {
          return r.node == node->id && (any || (r.task == t.task && r.replica == t.replica));
        };
        return std::ranges::any_of(job->placement, match) || std::ranges::any_of(job->last_placement, match);
      };
      // One file per node the replica ran on: the agent's offsets are into its own file.
      const std::string dir = options_.logs_dir + "/" + std::to_string(job->id.value());
      const std::string path = dir + "/" + job->spec().tasks[t.task].name + "-" + std::to_string(t.replica) + "@" +
                               report.node + ".log";
      std::error_code ec;
      // An elastic job's replica shrunk away is in neither placement any
      // more: the rest of its log comes from a node that shipped part of it
      // already (its file), or that holds another of the job's replicas
      // (where a resize leaves it), not from any node at all.
      const bool shrunk = job->spec().elastic() && t.replica < static_cast<uint32_t>(job->spec().tasks[t.task].replicas) &&
                          (std::filesystem::exists(path, ec) || here(/*any=*/true));
      if (!here(/*any=*/false) && !shrunk) continue;
      std::filesystem::create_directories(dir, ec);
      // Each job's logs are capped on the server (limits.log_cap): past it,
      // one line says so and the rest is dropped.
      const std::string capped = dir + "/.log-capped";
      if (std::filesystem::exists(capped, ec)) continue;
      const auto size = static_cast<int64_t>(std::filesystem::exists(path, ec) ? std::filesystem::file_size(path, ec) : 0);
      const int64_t end = t.log_offset + static_cast<int64_t>(t.log.size());
      if (end <= size) continue;  // already have it
      const size_t skip = static_cast<size_t>(std::max<int64_t>(0, size - t.log_offset));
      int64_t job_bytes = 0;
      for (const auto& f : std::filesystem::directory_iterator(dir, ec)) {
        if (f.is_regular_file(ec)) job_bytes += static_cast<int64_t>(f.file_size(ec));
      }
      const int64_t cap = c_->config().limits.log_cap_bytes;
      const int64_t room = std::max<int64_t>(0, cap - job_bytes);
      const auto n = static_cast<int64_t>(t.log.size() - skip);
      std::ofstream out(path, std::ios::app | std::ios::binary);
      out.write(t.log.data() + skip, static_cast<std::streamsize>(std::min(n, room)));
      if (n > room) {
        out << "\n[rota: log truncated: job " << job->id.value() << " reached the server's log cap of "
            << FormatMemoryMiB(cap / (1024 * 1024)) << " (limits.log_cap); the rest was dropped]\n";
        std::ofstream(capped) << "capped\n";
      }
    }
  }

  // `owner` and `viewer`: as JobView's (the checkpoint path is its owner's; reasons go through ReasonFor).
  static ordered_json Timeline(const Snapshot& snap, const JobRecord& job, bool owner, const std::string* viewer) {
    auto reason = [&](std::string_view text) { return ReasonFor(snap, text, owner, viewer); };
    ordered_json ev = ordered_json::array();
    ev.push_back({{"at", TimeText(job.submitted_at)}, {"event", "submitted"}, {"detail", "by " + job.user}});
    // One start and one end per attempt (the last JobRecord::kMaxAttempts):
    // when each was bound and how it ended.
    // Whether the job ended while it ran (its last attempt is its end).
    const bool ended_running =
        job.finished_at != 0 && !job.attempts.empty() && job.attempts.back().ended_at == job.finished_at;
    const int64_t earlier = static_cast<int64_t>(job.restarts) + (ended_running ? 1 : 0) -
                            static_cast<int64_t>(job.attempts.size());
    if (earlier > 0) {
      ev.push_back({{"at", ""}, {"event", "requeued"},
                    {"detail", std::to_string(earlier) + " earlier attempt(s) not kept"}});
    }
    const bool live = job.state == JobState::kRunning || job.state == JobState::kPreempting;
    for (size_t i = 0; i < job.attempts.size(); ++i) {
      const JobAttempt& a = job.attempts[i];
      // An ended job's last attempt is its end, below.
      const bool last_end = !live && ended_running && i + 1 == job.attempts.size();
      const int64_t number = std::max<int64_t>(earlier, 0) + static_cast<int64_t>(i) + 1;
      ev.push_back({{"at", TimeText(a.started_at)}, {"event", "bound"}, {"detail", "attempt " + std::to_string(number)}});
      if (!last_end) {
        const bool requeued = a.end.rfind("requeued: ", 0) == 0;
        ev.push_back({{"at", TimeText(a.ended_at)}, {"event", requeued ? "requeued" : "ended"},
                      {"detail", reason(requeued ? a.end.substr(10) : a.end)}});
      }
    }
    // The running attempt (or the one start of a job whose attempts a journal
    // from before them does not hold).
    if (job.started_at != 0 && (live || job.attempts.empty())) {
      ev.push_back({{"at", TimeText(job.started_at)}, {"event", "bound"},
                    {"detail", std::to_string(job.placement.size()) + " replicas placed"}});
    }
    if (job.last_checkpoint_at != 0) {
      ev.push_back({{"at", TimeText(job.last_checkpoint_at)}, {"event", "checkpoint"}, {"detail", owner ? job.last_checkpoint_path : ""}});
    }
    if (job.rank_restarts > 0) {
      ev.push_back({{"at", ""}, {"event", "rank restarted"},
                    {"detail", std::to_string(job.rank_restarts) + " rank(s) restarted alone; last: " +
                                   reason(job.last_requeue_reason)}});
    }
    if (job.resizes > 0) {
      ev.push_back({{"at", TimeText(job.resized_at)}, {"event", "resized"},
                    {"detail", std::to_string(job.resizes) + " resize(s); now " + std::to_string(job.placement.size()) +
                                   " replicas; last: " + reason(job.last_resize_reason)}});
    }
    if (job.finished_at != 0) {
      ev.push_back({{"at", TimeText(job.finished_at)}, {"event", std::string(JobStateName(job.state))},
                    {"detail", reason(job.end_reason)}});
    }
    return ev;
  }

  Controller* c_;
  HttpOptions options_;
  RateLimiter limiter_;
  PerIdentity listings_{kListingsAtOnce};  // GET /v1/jobs in progress, by user
  PerIdentity reports_{kReportsAtOnce};    // GET /v1/usage/report in progress, by user
  std::atomic<int> long_polls_{0};
  std::atomic<bool> projecting_{false};  // a /v1/whatif projection runs
  // Deferred answers not yet handed to the transport.
  void AsyncBegin() {
    std::lock_guard<std::mutex> lock(async_mu_);
    ++async_pending_;
  }
  void AsyncEnd() {
    std::lock_guard<std::mutex> lock(async_mu_);
    if (--async_pending_ == 0) async_cv_.notify_all();
  }
  std::mutex async_mu_;
  std::condition_variable async_cv_;
  int64_t async_pending_ = 0;
  WatchHub watches_;
  std::unique_ptr<HttpTransport> server_;
  // Queue usage over time for the dashboard: a sample every
  // options_.queue_sample_seconds, the last 24 hours' worth.
  void SampleQueues() {
    std::unique_lock<std::mutex> lock(history_mu_);
    while (!stopping_) {
      lock.unlock();
      ordered_json sample{{"t", FormatTime(c_->clock().Now())}, {"queues", ordered_json::object()}};
      for (const auto& q : QueuesView(*c_, c_->snapshot())) {
        sample["queues"][q["name"].get<std::string>()] = {{"running", q["running"]},
                                                           {"pending", q["pending"]},
                                                           {"gpus_allocated", q["gpus_allocated"]}};
      }
      lock.lock();
      history_.push_back(std::move(sample));
      const size_t keep = static_cast<size_t>(86400 / std::max(1.0, options_.queue_sample_seconds));
      while (history_.size() > keep) history_.pop_front();
      history_cv_.wait_for(lock, std::chrono::duration<double>(options_.queue_sample_seconds), [this] { return stopping_; });
    }
  }
  std::thread sampler_;
  std::mutex history_mu_;
  std::mutex logs_mu_;  // StoreLogs: one writer at a time
  std::condition_variable history_cv_;
  bool stopping_ = false;
  std::deque<ordered_json> history_;
  int port_ = 0;
};

}  // namespace

StatusOr<std::unique_ptr<HttpServer>> StartHttpServer(Controller* controller, const HttpOptions& options) {
  auto server = std::make_unique<HttpServerImpl>(controller, options);
  ROTA_RETURN_IF_ERROR(server->Start());
  return std::unique_ptr<HttpServer>(std::move(server));
}

}  // namespace rota::server
