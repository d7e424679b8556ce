#include <utility>  // (before Asio: its awaitable.hpp uses std::exchange)

#include "server/router.h"

#include "base/thread_name.h"

#include <atomic>
#include <cerrno>
#include <sys/socket.h>

#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include <algorithm>
#include <climits>
#include <limits>
#include <cmath>
#include <cstdlib>
#include <chrono>
#include <future>
#include <optional>
#include <thread>

namespace rota::server {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;
using asio::awaitable;
using asio::use_awaitable;
using Steady = std::chrono::steady_clock;

namespace {

constexpr size_t kLatencies = 2048;
constexpr size_t kIdlePerBackend = 32;
constexpr uint64_t kFetchLimit = 4 << 20;  // a readiness or metrics answer, at most

// At most 30 days (above any duration a spec may give: a startup of 7d):
// Asio's timers count nanoseconds, in which a spec's duration of years
// would overflow into the past (a timer that is always due: a probe loop
// with no pause).
std::chrono::microseconds Micros(Duration d) {
  return std::chrono::microseconds(std::clamp<Duration>(d, 0, 30 * 86'400'000'000LL));
}

// Drops a message's hop-by-hop fields (RFC 9110 7.6.1): they are about one
// connection, the client's or the replica's, not the other. Those its
// Connection names (but the framing, Host and an Upgrade, which that cannot
// take away), and Keep-Alive, Proxy-Connection, TE and the proxy
// credentials (meant for a proxy, not for the service behind it).
template <bool isRequest, class Fields>
void DropHopByHop(boost::beast::http::header<isRequest, Fields>& h) {
  namespace http = boost::beast::http;
  std::vector<std::string> named;
  for (const auto& token : http::token_list(h[http::field::connection])) named.emplace_back(token);
  bool upgrade = false;
  for (const std::string& name : named) {
    const http::field f = http::string_to_field(name);
    upgrade = upgrade || f == http::field::upgrade;
    if (f == http::field::host || f == http::field::content_length || f == http::field::transfer_encoding ||
        f == http::field::upgrade) {
      continue;
    }
    h.erase(name);
  }
  h.erase(http::field::connection);
  if (upgrade) h.set(http::field::connection, "upgrade");
  for (const http::field f : {http::field::keep_alive, http::field::proxy_connection, http::field::te,
                              http::field::proxy_authorization, http::field::proxy_authenticate}) {
    h.erase(f);
  }
}

// A probe's path as a request target: what is not visible ASCII
// percent-encoded (a service stored before its paths were checked could
// hold a CR/LF, which would end the request line).
std::string RequestTarget(const std::string& path) {
  std::string out;
  for (const char c : path) {
    const auto u = static_cast<unsigned char>(c);
    if (u > 0x20 && u < 0x7f) {
      out += c;
    } else {
      static const char* kHex = "0123456789ABCDEF";
      out += {'%', kHex[u >> 4], kHex[u & 15]};
    }
  }
  return out;
}

bool Idempotent(http::verb v) {
  return v == http::verb::get || v == http::verb::head || v == http::verb::put || v == http::verb::delete_ ||
         v == http::verb::options;
}

http::response<http::string_body> Error(unsigned status, const std::string& message, unsigned version) {
  http::response<http::string_body> res{static_cast<http::status>(status), version};
  res.set(http::field::content_type, "application/json");
  std::string escaped;
  for (char c : message) {
    if (c == '"' || c == '\\') escaped += '\\';
    escaped += c;
  }
  res.body() = "{\"error\":\"" + escaped + "\"}\n";
  res.prepare_payload();
  return res;
}

}  // namespace

struct Router::Impl {
  struct Backend {
    RouterBackend b;
    bool ready = false;
    bool ever_ready = false;
    bool gone = false;
    bool reported = false;  // told unhealthy already
    bool draining = false;  // no new requests (a rolling update replaces it)
    int failures = 0;
    int64_t outstanding = 0;
    Steady::time_point seen = Steady::now(), last_ready = Steady::now();
    std::vector<std::unique_ptr<beast::tcp_stream>> idle;
    std::map<std::string, double> metrics;  // its last reading of RouterService::metrics
  };
  struct Service {
    RouterService info;
    std::map<std::string, std::shared_ptr<Backend>> backends;  // by job/replica/attempt
    int64_t inflight = 0, queued = 0;
    double integral = 0;  // in-flight x seconds since window_start
    Steady::time_point last_change = Steady::now(), window_start = Steady::now();
    uint64_t requests = 0, failed = 0, retried = 0, abandoned = 0;
    std::vector<double> latencies;  // ms, a ring of kLatencies
    size_t next_latency = 0;
    size_t turn = 0;
    void Count(int64_t delta) {
      const auto now = Steady::now();
      integral += static_cast<double>(inflight) * std::chrono::duration<double>(now - last_change).count();
      last_change = now;
      inflight += delta;
    }
  };

  explicit Impl(RouterOptions o) : options(std::move(o)) {}

  RouterOptions options;
  // (Declared before the loop: a coroutine frame the io_context destroys
  // at the end gives its bytes back here, which must still be alive.)
  size_t buffered = 0;        // (loop thread) body bytes held: options.max_buffered_bytes bounds it
  std::map<std::string, size_t> buffered_by_address;  // (loop thread) of those, per client address
  uint64_t refused_full = 0;  // (loop thread) requests refused for it
  asio::io_context ioc{1};
  // Between Start and Stop: other threads (the API's) read it to know
  // whether the loop takes their calls (the thread object is not theirs).
  std::atomic<bool> running{false};
  std::optional<tcp::acceptor> acceptor;
  std::thread loop;
  bool stopping = false;  // (loop thread)
  size_t connections = 0;
  std::map<std::string, size_t> per_address;  // open connections by client address

  // Body bytes counted in `buffered`, and in its client address's share,
  // while it lives.
  struct Held {
    size_t& total;
    size_t& address;
    size_t bytes = 0;
    Held(size_t& t, size_t& a) : total(t), address(a) {}
    Held(const Held&) = delete;
    Held& operator=(const Held&) = delete;
    ~Held() { Set(0); }
    void Set(size_t n) {
      total = total - bytes + n;
      address = address - bytes + n;
      bytes = n;
    }
    // Whether holding `n` instead keeps within `budget` in all, and within a
    // quarter of it from one client address (so one client cannot take it all).
    bool Fits(size_t n, size_t budget) const {
      return total - bytes + n <= budget && address - bytes + n <= budget / 4;
    }
  };
  http::response<http::string_body> BuffersFull(unsigned version) {
    ++refused_full;
    auto res = Error(503, "the router holds " + std::to_string(buffered >> 20) + " MiB of request and answer bodies, its limit (" +
                              std::to_string(options.max_buffered_bytes >> 20) + " MiB): retry shortly",
                     version);
    res.set(http::field::retry_after, "1");
    res.keep_alive(false);
    return res;
  }
  // Reads and drops what a refused request still sends (up to `left`
  // bytes, for 2 s at most), so that the client reads the refusal rather
  // than a reset; memory stays constant.
  static awaitable<void> Drain(beast::tcp_stream& client, size_t left) {
    client.expires_after(std::chrono::seconds(2));
    char sink[16384];
    try {
      while (left > 0) {
        left -= std::min(left, co_await client.async_read_some(asio::buffer(sink, std::min(left, sizeof sink)),
                                                               use_awaitable));
      }
    } catch (const std::exception&) {
    }
  }
  std::map<std::string, std::shared_ptr<Service>> services;  // (loop thread) by name
  std::vector<RouterUnhealthy> unhealthy;                    // (loop thread)

  // Runs `fn` on the loop thread and waits for its result.
  template <typename F>
  auto OnLoop(F fn) -> decltype(fn()) {
    std::packaged_task<decltype(fn())()> task(std::move(fn));
    auto result = task.get_future();
    asio::post(ioc, [&task] { task(); });
    return result.get();
  }

  // A replica's answer, its header read and its body still to come on
  // `stream` (relayed to the client as it arrives), or the router's own
  // (`error`). Until Finish, it counts in its service's in-flight and its
  // replica's outstanding requests.
  struct Answer {
    std::optional<http::response<http::string_body>> error;
    std::unique_ptr<http::response_parser<http::buffer_body>> parser;
    std::unique_ptr<beast::tcp_stream> stream;
    beast::flat_buffer buf;
    std::shared_ptr<Service> svc;
    std::shared_ptr<Backend> backend;
    Steady::time_point started;
    bool router_error = false;
    bool replica_keep_alive = false;  // what the replica's header said
    bool no_body = false;  // an answer to HEAD, or a 204 or 304: its header alone
    bool client_gone = false;  // the client hung up before it began (Hangup)
    // The body's first bytes, read with the header: a replica that fails
    // before them has sent the client nothing (so a retry is still safe).
    std::unique_ptr<char[]> chunk;
    size_t first = 0;
  };
  static constexpr size_t kChunk = 16384;
  enum class Relayed { kWhole, kReplicaFailed, kClientFailed };

  // A request's client, watched while the request waits (queued for a
  // ready replica, or for the replica's answer): one that hangs up ends the
  // wait, and the replica's connection is closed (an inference server, as
  // vLLM, stops generating for it), so a client cannot leave work running
  // for no one by sending requests and closing.
  struct Hangup {
    bool gone = false;  // the client closed its connection
    bool done = false;  // the wait is over: the watch ends
    beast::tcp_stream* upstream = nullptr;  // the replica exchange in progress
  };
  awaitable<void> WatchHangup(tcp::socket& client, std::shared_ptr<Hangup> h);

  void Apply(std::vector<RouterService> list);
  awaitable<void> Accept();
  awaitable<void> Serve(tcp::socket socket, std::string remote);
  awaitable<Answer> Forward(http::request<http::string_body> req, std::string remote, Hangup* hangup);
  // One exchange with a backend up to its answer's header and the first
  // bytes of its body; false if it failed before those (*a then unchanged).
  awaitable<bool> Exchange(Backend& b, const http::request<http::string_body>& req, Answer* a, Hangup* hangup);
  // Writes the answer's header and relays its body as the replica sends it.
  // Cut short on either side, the client's connection is then closed: an
  // answer cut short is not passed off as whole.
  awaitable<Relayed> Relay(beast::tcp_stream& client, Answer& a, unsigned version, bool keep);
  // Ends a request: the counts, the latency, the replica's connection kept
  // for the next request if it is clean.
  void Finish(Answer& a, bool replica_failed);
  awaitable<void> Probe(std::shared_ptr<Service> svc, std::shared_ptr<Backend> b);
  // GET `path` with `timeout`: its status (0 = no answer), *body its body.
  awaitable<unsigned> Fetch(const RouterBackend& b, const std::string& path, Duration timeout, std::string* body);
  std::shared_ptr<Backend> Pick(Service& svc, const Backend* exclude);
  void MarkDown(Backend& b) {
    b.ready = false;
    b.failures = std::max(b.failures, 1);
  }
};

void Router::Impl::Apply(std::vector<RouterService> list) {
  std::map<std::string, std::shared_ptr<Service>> next;
  for (RouterService& s : list) {
    auto it = services.find(s.name);
    std::shared_ptr<Service> svc =
        it != services.end() && it->second->info.job == s.job ? it->second : std::make_shared<Service>();
    std::map<std::string, std::shared_ptr<Backend>> keep;
    for (const RouterBackend& b : s.backends) {
      const std::string key = std::to_string(b.job.value()) + "/" + std::to_string(b.task) + "/" +
                              std::to_string(b.replica) + "/" + std::to_string(b.attempt) + "@" + b.host + ":" +
                              std::to_string(b.port);
      auto found = svc->backends.find(key);
      if (found != svc->backends.end()) {
        keep[key] = found->second;
        continue;
      }
      auto backend = std::make_shared<Backend>();
      backend->b = b;
      keep[key] = backend;
      asio::co_spawn(ioc, Probe(svc, backend), asio::detached);
    }
    for (auto& [key, b] : svc->backends) {
      if (!keep.count(key)) b->gone = true;
    }
    svc->backends = std::move(keep);
    svc->info = std::move(s);
    next[svc->info.name] = svc;
  }
  for (auto& [name, svc] : services) {
    if (next.count(name) && next[name] == svc) continue;
    for (auto& [key, b] : svc->backends) b->gone = true;
  }
  services = std::move(next);
}

std::shared_ptr<Router::Impl::Backend> Router::Impl::Pick(Service& svc, const Backend* exclude) {
  // Fewest outstanding; ties in turn (the n-th tie after a rotating start).
  // No allocation: it runs for every request.
  auto usable = [&](const Backend& b) { return b.ready && !b.gone && !b.draining && &b != exclude; };
  size_t ready = 0;
  int64_t fewest = INT64_MAX;
  for (const auto& [key, b] : svc.backends) {
    if (!usable(*b)) continue;
    ++ready;
    fewest = std::min(fewest, b->outstanding);
  }
  if (ready == 0) return nullptr;
  size_t ties = 0;
  for (const auto& [key, b] : svc.backends) ties += usable(*b) && b->outstanding == fewest;
  size_t nth = svc.turn++ % ties;
  for (const auto& [key, b] : svc.backends) {
    if (usable(*b) && b->outstanding == fewest && nth-- == 0) return b;
  }
  return nullptr;  // (not reached)
}

awaitable<unsigned> Router::Impl::Fetch(const RouterBackend& b, const std::string& path, Duration timeout,
                                        std::string* body) {
  try {
    auto ex = co_await asio::this_coro::executor;
    tcp::resolver resolver(ex);
    beast::tcp_stream s(ex);
    s.expires_after(Micros(timeout));
    auto results = co_await resolver.async_resolve(b.host, std::to_string(b.port), use_awaitable);
    co_await s.async_connect(results, use_awaitable);
    http::request<http::empty_body> req{http::verb::get, RequestTarget(path), 11};
    req.set(http::field::host, b.host + ":" + std::to_string(b.port));
    req.set(http::field::user_agent, "rota-router-probe");
    req.keep_alive(false);
    co_await http::async_write(s, req, use_awaitable);
    beast::flat_buffer buf;
    http::response_parser<http::string_body> parser;
    parser.body_limit(kFetchLimit);
    // The header first, its length checked here: Boost 1.74's async_read
    // (eager) drops the body_limit error of a huge Content-Length whose
    // first body bytes came with the header, then reserves and reads it all
    // (a replica's endless /metrics grew the control plane ~15 MB/s).
    co_await http::async_read_header(s, buf, parser, use_awaitable);
    if (parser.content_length() && *parser.content_length() > kFetchLimit) co_return 0;
    // A deadline of the read's own as well (with the eager read above, one
    // scrape of a 1 s timeout was seen open for 30 s while data kept coming).
    // (`read`: the read ended, so the stream may be gone by the time a
    // deadline that fired meanwhile is handled.)
    auto read = std::make_shared<bool>(false);
    asio::steady_timer deadline(ex);
    deadline.expires_after(Micros(timeout));
    deadline.async_wait([&s, read](const beast::error_code& e) {
      if (!e && !*read) s.socket().close();
    });
    try {
      co_await http::async_read(s, buf, parser, use_awaitable);
    } catch (...) {
      *read = true;
      throw;
    }
    *read = true;
    deadline.cancel();
    const unsigned status = parser.get().result_int();
    if (body != nullptr) *body = std::move(parser.get().body());
    beast::error_code ignored;
    s.socket().shutdown(tcp::socket::shutdown_both, ignored);
    co_return status;
  } catch (const std::exception&) {
    co_return 0;
  }
}

awaitable<void> Router::Impl::Probe(std::shared_ptr<Service> svc, std::shared_ptr<Backend> b) {
  auto ex = co_await asio::this_coro::executor;
  asio::steady_timer timer(ex);
  while (!stopping && !b->gone) {
    const ProbeSpec p = svc->info.readiness;
    const unsigned status = co_await Fetch(b->b, p.path, p.timeout, nullptr);
    const bool ok = status >= 200 && status < 400;
    if (stopping || b->gone) break;
    if (ok && !svc->info.metrics.empty()) {
      std::string text;
      const std::vector<std::string> names = svc->info.metrics;
      const unsigned got = co_await Fetch(b->b, svc->info.metrics_path, p.timeout, &text);
      if (stopping || b->gone) break;
      if (got >= 200 && got < 300) b->metrics = SumPrometheus(text, names);
      else b->metrics.clear();
    }
    const auto now = Steady::now();
    if (ok) {
      b->failures = 0;
      b->ready = b->ever_ready = true;
      b->last_ready = now;
    } else {
      ++b->failures;
      // Before its first success it is starting (not ready); after, it is
      // out once failure_threshold probes in a row fail.
      if (!b->ever_ready || b->failures >= p.failure_threshold) b->ready = false;
      if (b->ready) b->last_ready = now;
    }
    if (!b->ready && !b->reported && now - std::max(b->seen, b->last_ready) > Micros(p.startup)) {
      b->reported = true;
      unhealthy.push_back({b->b.job, b->b.task, b->b.replica, b->b.attempt,
                           std::string(b->ever_ready ? "not ready again within " : "not ready within its startup allowance of ") +
                               FormatSpan(p.startup) + "; restarted"});
    }
    timer.expires_after(Micros(p.period));
    beast::error_code ec;
    co_await timer.async_wait(asio::redirect_error(use_awaitable, ec));
  }
}

awaitable<void> Router::Impl::WatchHangup(tcp::socket& client, std::shared_ptr<Hangup> h) {
  beast::error_code ec;
  co_await client.async_wait(tcp::socket::wait_read, asio::redirect_error(use_awaitable, ec));
  if (h->done || ec) co_return;  // (the wait ended first: cancelled, and the socket may be gone)
  // Readable: the end of the stream (or a reset), or more bytes (a
  // pipelined request: then the client is there, and no longer watched).
  char byte;
  const ssize_t n = ::recv(client.native_handle(), &byte, 1, MSG_PEEK | MSG_DONTWAIT);
  if (n > 0 || (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR))) co_return;
  h->gone = true;
  // Closed, not cancelled: every later operation on it fails at once (a
  // connect to the next address too, a read whose data had come already).
  if (h->upstream != nullptr) h->upstream->close();
}

awaitable<bool> Router::Impl::Exchange(Backend& b, const http::request<http::string_body>& req, Answer* a,
                                       Hangup* hangup) {
  auto ex = co_await asio::this_coro::executor;
  // A kept-alive connection first; one the replica closed meanwhile fails
  // before any answer, and then a fresh one is tried.
  for (int fresh = 0; fresh < 2; ++fresh) {
    std::unique_ptr<beast::tcp_stream> s;
    const bool reused = !b.idle.empty() && fresh == 0;
    bool answered = false;  // a header came back: the request reached the replica
    if (reused) {
      s = std::move(b.idle.back());
      b.idle.pop_back();
    } else {
      fresh = 1;
      s = std::make_unique<beast::tcp_stream>(ex);
    }
    // The client's hang-up closes `s`: what waits on it fails.
    struct Watched {
      Hangup* h;
      ~Watched() {
        if (h != nullptr) h->upstream = nullptr;
      }
    } watched{hangup};
    if (hangup != nullptr) hangup->upstream = s.get();
    try {
      if (hangup != nullptr && hangup->gone) co_return false;
      if (!reused) {
        tcp::resolver resolver(ex);
        s->expires_after(std::chrono::seconds(5));
        auto results = co_await resolver.async_resolve(b.b.host, std::to_string(b.b.port), use_awaitable);
        if (hangup != nullptr && hangup->gone) co_return false;  // (not waiting on `s` then)
        co_await s->async_connect(results, use_awaitable);
        s->socket().set_option(tcp::no_delay(true));  // (small answers must not wait on delayed ACKs)
      }
      s->expires_after(Micros(options.request_timeout));
      co_await http::async_write(*s, req, use_awaitable);
      beast::flat_buffer buf;
      std::unique_ptr<http::response_parser<http::buffer_body>> parser;
      for (;;) {
        parser = std::make_unique<http::response_parser<http::buffer_body>>();
        // Relayed as it comes: nothing is held, so no limit. (Not boost::none:
        // Debian 12's Beast compares a Content-Length against it as "more".)
        parser->body_limit(std::numeric_limits<std::uint64_t>::max());
        if (req.method() == http::verb::head) parser->skip(true);  // (no body follows its Content-Length)
        co_await http::async_read_header(*s, buf, *parser, use_awaitable);
        answered = true;
        // An interim answer (103 Early Hints, ...) is not the answer: dropped.
        const unsigned status = parser->get().result_int();
        if (status < 100 || status >= 200 || status == 101) break;
      }
      const unsigned status = parser->get().result_int();
      a->no_body = req.method() == http::verb::head || status == 204 || status == 304;
      auto chunk = std::make_unique<char[]>(kChunk);
      size_t first = 0;
      while (!parser->is_done() && first == 0) {  // (a chunk's size line alone is no byte of the body)
        parser->get().body().data = chunk.get();
        parser->get().body().size = kChunk;
        beast::error_code ec;
        co_await http::async_read_some(*s, buf, *parser, asio::redirect_error(use_awaitable, ec));
        if (ec && ec != http::error::need_buffer) throw boost::system::system_error(ec);
        first = kChunk - parser->get().body().size;
      }
      // (After 101 Switching Protocols the connection is no longer HTTP: not kept.)
      a->replica_keep_alive = parser->get().keep_alive() && status != 101;
      a->chunk = std::move(chunk);
      a->first = first;
      a->parser = std::move(parser);
      a->stream = std::move(s);
      a->buf = std::move(buf);
      co_return true;
    } catch (const boost::system::system_error& e) {
      // A kept-alive connection the replica had closed fails at once with
      // EOF or a reset, before the request reached it: then a fresh one.
      // Anything else (a timeout, a replica that failed before its header,
      // or one that answered and then broke) is the replica's failure: not
      // sent again here.
      const auto code = e.code();
      const bool stale = code == http::error::end_of_stream || code == asio::error::eof ||
                         code == asio::error::connection_reset || code == asio::error::broken_pipe;
      if (!reused || !stale || answered || (hangup != nullptr && hangup->gone)) co_return false;
    } catch (const std::exception&) {
      co_return false;
    }
  }
  co_return false;
}

awaitable<Router::Impl::Answer> Router::Impl::Forward(http::request<http::string_body> req, std::string remote,
                                                       Hangup* hangup) {
  const unsigned version = req.version();
  Answer a;
  const std::string target(req.target());
  // /NAME/rest?query -> service NAME, /rest?query
  if (target.size() < 2 || target[0] != '/') {
    a.error = Error(400, "the path must start with /SERVICE/", version);
    co_return a;
  }
  const size_t end = target.find_first_of("/?", 1);
  const std::string name = target.substr(1, end == std::string::npos ? std::string::npos : end - 1);
  std::string rest = end == std::string::npos ? "/" : target.substr(end);
  if (rest[0] == '?') rest = "/" + rest;
  auto it = services.find(name);
  if (it == services.end()) {
    a.error = Error(404, "no service '" + name + "'", version);
    co_return a;
  }
  std::shared_ptr<Service> svc = it->second;
  try {
    req.target(rest);
    req.version(11);
    DropHopByHop(req);  // (before the router's own fields: a client cannot name those away)
    req.keep_alive(true);
    req.set("X-Forwarded-For", remote);
    req.set("X-Forwarded-Prefix", "/" + name);
    // The body is here already: a replica's interim "100 Continue" would be
    // read as its answer (and the real one as the next request's).
    req.erase(http::field::expect);
    // And whole: it goes with its length, not chunked (a replica that reads
    // only Content-Length, as Python's http.server, left the chunks on the
    // kept connection, where they broke the next client's request).
    req.chunked(false);
    req.erase(http::field::trailer);
    req.prepare_payload();
  } catch (const std::exception& e) {
    // (A TRACE with a body, which Beast will not write.) Refused before it
    // is counted in flight: a request counted and then thrown out of here
    // was never finished, and each one held the service's load up for good.
    a.error = Error(400, std::string("the request cannot be forwarded: ") + e.what(), version);
    co_return a;
  }
  a.svc = svc;
  a.started = Steady::now();
  svc->Count(+1);
  auto ex = co_await asio::this_coro::executor;
  asio::steady_timer wait(ex);
  const Backend* failed = nullptr;
  for (int attempt = 0; attempt < 2; ++attempt) {
    std::shared_ptr<Backend> b = Pick(*svc, failed);
    if (b == nullptr && attempt == 0) {
      // Wait (queued) for a replica to become ready.
      svc->queued++;
      while (b == nullptr && !stopping && !hangup->gone && Steady::now() - a.started < Micros(options.queue_timeout)) {
        wait.expires_after(std::chrono::milliseconds(10));
        beast::error_code ec;
        co_await wait.async_wait(asio::redirect_error(use_awaitable, ec));
        b = Pick(*svc, nullptr);
      }
      svc->queued--;
    }
    if (hangup->gone) break;
    if (b == nullptr) {
      if (attempt == 0) {
        const size_t starting = svc->backends.size();
        a.error = Error(503, "no ready replica of service '" + name + "' within " + FormatSpan(options.queue_timeout) +
                                 " (" + std::to_string(starting) + " starting or failing)",
                        version);
        a.router_error = true;
        co_return a;
      }
      break;
    }
    b->outstanding++;
    if (co_await Exchange(*b, req, &a, hangup)) {
      a.backend = std::move(b);  // (outstanding until Finish)
      co_return a;
    }
    b->outstanding--;
    if (hangup->gone) break;  // (not the replica's failure)
    MarkDown(*b);  // out of the router until a probe succeeds again
    failed = b.get();
    if (!Idempotent(req.method())) break;
    if (attempt == 0) svc->retried++;
  }
  if (hangup->gone) {
    a.client_gone = true;
    a.error = Error(499, "the client closed its connection", version);  // (written to no one)
    svc->abandoned++;
    co_return a;
  }
  a.error = Error(502, "service '" + name + "': the replica failed before answering", version);
  a.router_error = true;
  co_return a;
}

awaitable<Router::Impl::Relayed> Router::Impl::Relay(beast::tcp_stream& client, Answer& a, unsigned version,
                                                      bool keep) {
  http::response_parser<http::buffer_body>& p = *a.parser;
  http::response<http::buffer_body>& res = p.get();
  // A body the replica ends by closing its connection (no length, not
  // chunked) goes to an HTTP/1.1 client chunked, so its connection stays
  // open; an HTTP/1.0 client reads no chunks: it gets the body as it
  // comes, to the close.
  const bool delimited = p.is_done() || res.chunked() || p.content_length().has_value();
  res.version(version);
  if (version >= 11 && !delimited) res.chunked(true);
  if (version < 11 && (res.chunked() || !delimited)) {
    res.chunked(false);
    keep = false;
  }
  // (The replica's connection's fields are not the client's; keep_alive
  // below says the client's own.)
  DropHopByHop(res);
  res.keep_alive(keep);
  // Every service is served from the router's one origin (/NAME/...): a
  // replica may not widen a service worker's scope past its own path, where
  // it would sit in front of every other tenant's service in that browser.
  res.erase("Service-Worker-Allowed");
  http::response_serializer<http::buffer_body> sr{res};
  if (a.no_body) {
    // Its header alone, whatever it says of a body (chunked, a length).
    beast::error_code ec;
    client.expires_after(std::chrono::seconds(30));
    co_await http::async_write_header(client, sr, asio::redirect_error(use_awaitable, ec));
    co_return ec ? Relayed::kClientFailed : Relayed::kWhole;
  }
  char* chunk = a.chunk.get();
  bool primed = true;  // the header and the body's first bytes (Exchange read them)
  try {
    do {
      if (primed) {
        primed = false;
        res.body().data = a.first > 0 ? chunk : nullptr;
        res.body().size = a.first;
        res.body().more = !p.is_done();
      } else if (!p.is_done()) {
        res.body().data = chunk;
        res.body().size = kChunk;
        a.stream->expires_after(Micros(options.request_timeout));  // (between a replica's writes)
        beast::error_code ec;
        co_await http::async_read_some(*a.stream, a.buf, p, asio::redirect_error(use_awaitable, ec));
        if (ec == http::error::need_buffer) ec = {};
        if (ec) co_return Relayed::kReplicaFailed;
        res.body().size = kChunk - res.body().size;
        // (No bytes: no buffer. An empty one is written as an empty chunk,
        // which ends a chunked answer - a second end, when this read ended it.)
        res.body().data = res.body().size > 0 ? chunk : nullptr;
        res.body().more = !p.is_done();
        // (Nothing of the body yet, e.g. only a chunk's size line: an empty
        // chunk written now would end the answer.)
        if (res.body().size == 0 && !p.is_done()) continue;
      } else {
        res.body().data = nullptr;
        res.body().size = 0;
        res.body().more = false;
      }
      client.expires_after(std::chrono::seconds(30));
      beast::error_code ec;
      co_await http::async_write(client, sr, asio::redirect_error(use_awaitable, ec));
      if (ec == http::error::need_buffer) ec = {};
      if (ec) co_return Relayed::kClientFailed;
    } while (!p.is_done() || !sr.is_done());
  } catch (const std::exception&) {
    co_return p.is_done() ? Relayed::kClientFailed : Relayed::kReplicaFailed;
  }
  co_return Relayed::kWhole;
}

void Router::Impl::Finish(Answer& a, bool replica_failed) {
  if (a.svc == nullptr) return;  // (not for a service, or finished already: nothing counted)
  const std::shared_ptr<Service> held = std::move(a.svc);  // (finished once: Serve's guard may call again)
  Service& svc = *held;
  if (a.backend != nullptr) {
    a.backend->outstanding--;
    if (replica_failed) {
      MarkDown(*a.backend);
    } else if (a.parser->is_done() && a.replica_keep_alive && a.backend->idle.size() < kIdlePerBackend &&
               !a.backend->gone && a.buf.size() == 0) {
      a.stream->expires_never();
      a.backend->idle.push_back(std::move(a.stream));
    }
  }
  svc.Count(-1);
  if (a.client_gone) return;  // (no answer: counted as abandoned)
  svc.requests++;
  if (a.router_error || replica_failed) svc.failed++;
  const double ms = std::chrono::duration<double, std::milli>(Steady::now() - a.started).count();
  if (svc.latencies.size() < kLatencies) svc.latencies.push_back(ms);
  else svc.latencies[svc.next_latency++ % kLatencies] = ms;
}

awaitable<void> Router::Impl::Serve(tcp::socket socket, std::string remote) {
  beast::tcp_stream client(std::move(socket));
  beast::error_code ec;
  client.socket().set_option(tcp::no_delay(true), ec);
  beast::flat_buffer buf;
  try {
    while (!stopping) {
      if (buf.size() == 0) {
        // Idle (kept alive) until its next request's first bytes...
        client.expires_after(Micros(options.idle_timeout));
        const size_t n = co_await client.async_read_some(buf.prepare(4096), use_awaitable);
        buf.commit(n);
      }
      // ... then its header whole, soon, and all of it within the idle
      // timeout of its first bytes (a body sent a byte at a time too).
      const Steady::time_point began = Steady::now();
      client.expires_after(Micros(options.header_timeout));
      http::request_parser<http::string_body> parser;
      parser.body_limit(options.max_body_bytes);
      parser.header_limit(64 << 10);
      co_await http::async_read_header(client, buf, parser, use_awaitable);
      // The body is taken from the buffer budget before it is read (a
      // chunked one as the most it may be), in all and from this client
      // address: past either, 503, and the connection closes once what the
      // client still sends is drained.
      Held held(buffered, buffered_by_address[remote]);
      const size_t declared = parser.chunked() ? options.max_body_bytes : parser.content_length().value_or(0);
      if (declared > 0 && !held.Fits(declared, options.max_buffered_bytes)) {
        http::response<http::string_body> res = BuffersFull(parser.get().version());
        co_await http::async_write(client, res, use_awaitable);
        co_await Drain(client, declared > buf.size() ? declared - buf.size() : 0);
        break;
      }
      held.Set(declared);
      if (beast::iequals(parser.get()[http::field::expect], "100-continue")) {
        // The client waits for this before it sends the body it declared.
        http::response<http::empty_body> go{http::status::continue_, parser.get().version()};
        co_await http::async_write(client, go, use_awaitable);
      }
      client.expires_at(began + Micros(options.idle_timeout));
      co_await http::async_read(client, buf, parser, use_awaitable);
      http::request<http::string_body> req = parser.release();
      held.Set(req.body().size());
      const bool keep = req.keep_alive();
      const unsigned version = req.version();
      client.expires_never();
      auto hangup = std::make_shared<Hangup>();
      asio::co_spawn(ioc, WatchHangup(client.socket(), hangup), asio::detached);
      Answer a = co_await Forward(std::move(req), remote, hangup.get());
      // Finished however this request ends, a throw included (Finish does
      // it once): an unfinished one stays counted in flight, which the
      // autoscaler reads as load.
      struct Finishing {
        Impl* impl;
        Answer& a;
        ~Finishing() { impl->Finish(a, false); }
      } finishing{this, a};
      hangup->done = true;
      if (!hangup->gone) client.socket().cancel(ec);  // (the watch ends; nothing else waits on the client now)
      held.Set(0);  // (the request's body is gone; an answer's is relayed, not held)
      if (a.client_gone) {
        Finish(a, false);
        break;
      }
      if (a.error) {
        a.error->keep_alive(keep);
        Finish(a, false);
        client.expires_after(std::chrono::seconds(30));
        co_await http::async_write(client, *a.error, use_awaitable);
        if (!keep) break;
        continue;
      }
      // The replica's answer as it comes (a token stream is passed on token
      // by token). Cut short on either side: the client's connection closes.
      const Relayed relayed = co_await Relay(client, a, version, keep);
      Finish(a, relayed == Relayed::kReplicaFailed);
      if (relayed != Relayed::kWhole || !a.parser->get().keep_alive()) break;
    }
  } catch (const std::exception&) {
  }
  client.socket().shutdown(tcp::socket::shutdown_both, ec);
  --connections;
  if (--per_address[remote] == 0) {
    per_address.erase(remote);
    buffered_by_address.erase(remote);  // (its last connection's Held is gone)
  }
}

awaitable<void> Router::Impl::Accept() {
  while (!stopping) {
    beast::error_code ec;
    tcp::socket socket = co_await acceptor->async_accept(asio::redirect_error(use_awaitable, ec));
    if (ec) {
      if (stopping || ec == asio::error::operation_aborted) break;
      continue;
    }
    const auto peer = socket.remote_endpoint(ec);
    const std::string remote = ec ? "" : peer.address().to_string();
    // Past the caps (in all, or from one client address): closed at once.
    if (connections >= options.max_connections) continue;
    if (per_address[remote] >= options.max_connections_per_address) continue;
    ++connections;
    ++per_address[remote];
    asio::co_spawn(ioc, Serve(std::move(socket), remote), asio::detached);
  }
}

std::map<std::string, double> SumPrometheus(std::string_view text, const std::vector<std::string>& names) {
  std::map<std::string, double> out;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(pos, end - pos);
    pos = end + 1;
    if (line.empty() || line[0] == '#') continue;
    size_t i = 0;
    while (i < line.size() && line[i] != '{' && line[i] != ' ' && line[i] != '\t') ++i;
    const std::string_view name = line.substr(0, i);
    if (std::find(names.begin(), names.end(), name) == names.end()) continue;
    if (i < line.size() && line[i] == '{') {  // labels: to the closing brace outside quotes
      bool quoted = false;
      for (++i; i < line.size(); ++i) {
        if (quoted && line[i] == '\\') ++i;
        else if (line[i] == '"') quoted = !quoted;
        else if (!quoted && line[i] == '}') break;
      }
      ++i;
    }
    while (i < line.size() && (line[i] == ' ' || line[i] == '\t')) ++i;
    const std::string value(line.substr(i, line.find_first_of(" \t", i) - i));
    char* parsed = nullptr;
    const double v = std::strtod(value.c_str(), &parsed);
    if (value.empty() || parsed != value.c_str() + value.size() || !std::isfinite(v)) continue;
    out[std::string(name)] += v;
  }
  return out;
}

Router::Router(RouterOptions options) : impl_(std::make_unique<Impl>(std::move(options))) {}

Router::~Router() { Stop(); }

StatusOr<int> Router::Start() {
  Impl& d = *impl_;
  beast::error_code ec;
  const auto address = asio::ip::make_address(d.options.host, ec);
  if (ec) return InvalidArgumentError("router: '" + d.options.host + "' is not an IP address");
  const tcp::endpoint endpoint(address, static_cast<uint16_t>(d.options.port));
  d.acceptor.emplace(d.ioc);
  d.acceptor->open(endpoint.protocol(), ec);
  if (!ec) d.acceptor->set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) d.acceptor->bind(endpoint, ec);
  if (!ec) d.acceptor->listen(asio::socket_base::max_listen_connections, ec);
  if (ec) {
    d.acceptor.reset();
    return Status(StatusCode::kUnavailable, "router: cannot listen on " + d.options.host + ":" +
                                                std::to_string(d.options.port) + ": " + ec.message());
  }
  const int port = d.acceptor->local_endpoint().port();
  asio::co_spawn(d.ioc, d.Accept(), asio::detached);
  d.loop = NamedThread("rota-router", [&d] { d.ioc.run(); });
  d.running = true;
  return port;
}

void Router::Stop() {
  Impl& d = *impl_;
  if (!d.loop.joinable()) return;
  d.running = false;
  asio::post(d.ioc, [&d] {
    d.stopping = true;
    beast::error_code ec;
    if (d.acceptor) d.acceptor->close(ec);
  });
  // Probes and requests end within their timers; the loop is then stopped.
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  d.ioc.stop();
  d.loop.join();
}

void Router::Update(std::vector<RouterService> services) {
  if (!impl_->running) return;
  impl_->OnLoop([this, &services] { impl_->Apply(std::move(services)); });
}

std::map<std::string, RouterStats> Router::TakeStats() {
  if (!impl_->running) return {};
  return impl_->OnLoop([this] {
    std::map<std::string, RouterStats> out;
    const auto now = Steady::now();
    for (auto& [name, svc] : impl_->services) {
      RouterStats& st = out[name];
      svc->Count(0);
      const double span = std::chrono::duration<double>(now - svc->window_start).count();
      st.inflight_avg = span > 0 ? svc->integral / span : static_cast<double>(svc->inflight);
      svc->integral = 0;
      svc->window_start = now;
      st.inflight = svc->inflight;
      st.queued = svc->queued;
      for (auto& [key, b] : svc->backends) {
        st.replicas++;
        if (!b->ready || b->draining) continue;
        st.ready++;
        for (const auto& [metric, v] : b->metrics) st.metrics[metric] += v;
      }
      st.requests = svc->requests;
      st.failed = svc->failed;
      st.retried = svc->retried;
      st.abandoned = svc->abandoned;
      std::vector<double> l = svc->latencies;
      if (!l.empty()) {
        std::sort(l.begin(), l.end());
        st.p50_ms = l[l.size() / 2];
        st.p99_ms = l[std::min(l.size() - 1, l.size() * 99 / 100)];
      }
    }
    return out;
  });
}

std::vector<RouterEndpoint> Router::Endpoints(const std::string& service) const {
  if (!impl_->running) return {};
  return impl_->OnLoop([this, &service] {
    std::vector<RouterEndpoint> out;
    auto it = impl_->services.find(service);
    if (it == impl_->services.end()) return out;
    for (auto& [key, b] : it->second->backends) {
      out.push_back({b->b.replica, b->b.attempt, b->b.host + ":" + std::to_string(b->b.port), b->ready, b->draining,
                     b->outstanding});
    }
    std::sort(out.begin(), out.end(), [](const RouterEndpoint& a, const RouterEndpoint& b) { return a.replica < b.replica; });
    return out;
  });
}

void Router::Drain(JobId job, uint32_t replica, int32_t attempt) {
  if (!impl_->running) return;
  impl_->OnLoop([&] {
    for (auto& [name, svc] : impl_->services) {
      for (auto& [key, b] : svc->backends) {
        if (b->b.job == job && b->b.replica == replica && b->b.attempt == attempt) b->draining = true;
      }
    }
    return 0;
  });
}

std::vector<RouterUnhealthy> Router::TakeUnhealthy() {
  if (!impl_->running) return {};
  return impl_->OnLoop([this] { return std::exchange(impl_->unhealthy, {}); });
}

size_t Router::buffered_bytes() const {
  if (!impl_->running) return 0;
  return impl_->OnLoop([this] { return impl_->buffered; });
}

uint64_t Router::refused_for_buffers() const {
  if (!impl_->running) return 0;
  return impl_->OnLoop([this] { return impl_->refused_full; });
}

}  // namespace rota::server
