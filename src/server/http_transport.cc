#include "server/http_transport.h"

#include "base/thread_name.h"

#include <boost/asio.hpp>
#include <boost/asio/ssl.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <boost/beast/ssl.hpp>

#include <pthread.h>
#include <sched.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <regex>
#include <string_view>
#include <thread>
#include <unordered_map>

namespace rota::server {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = asio::ip::tcp;

namespace {

// Workers run under SCHED_BATCH: a worker the loop wakes (each request it
// hands over) then does not preempt the loop on its CPU (the scheduler's
// wakeup preemption), which otherwise answers /healthz and every socket a
// worker's time slice late. Their share of the CPU is unchanged, and no
// privilege is needed. ROTA_WORKERS_BATCH=0 leaves them as they are (to
// compare).
void MarkWorker() {
  NameThisThread("rota-worker");
  const char* batch = std::getenv("ROTA_WORKERS_BATCH");
  if (batch != nullptr && std::string_view(batch) == "0") return;
  sched_param param{};
  param.sched_priority = 0;
  pthread_setschedparam(pthread_self(), SCHED_BATCH, &param);  // (refused: they stay as they are)
}

bool EqualsIgnoreCase(const std::string& a, const std::string& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(a[i])) != std::tolower(static_cast<unsigned char>(b[i]))) return false;
  }
  return true;
}

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// Percent-decoding (and '+' as a space in a query).
std::string Decode(std::string_view s, bool query) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size()) {
      const int hi = HexValue(s[i + 1]);
      const int lo = HexValue(s[i + 2]);
      if (hi >= 0 && lo >= 0) {
        out += static_cast<char>(hi * 16 + lo);
        i += 2;
        continue;
      }
    }
    out += query && s[i] == '+' ? ' ' : s[i];
  }
  return out;
}

struct Route {
  Route(std::string m, const std::string& p, HttpHandler h, bool in = false)
      : method(std::move(m)), pattern(p), handler(std::move(h)), inline_(in) {
    if (p.find_first_of(".[]{}()\\*+?^$|") == std::string::npos) literal = p;
  }
  // Whether `path` is this route's; if so, `captures` (when given) gets the
  // whole path and then each group.
  bool Match(const std::string& path, std::vector<std::string>* captures) const {
    if (!literal.empty()) {
      if (path != literal) return false;
      if (captures != nullptr) *captures = {path};
      return true;
    }
    if (captures == nullptr) return std::regex_match(path, pattern);
    std::smatch m;
    if (!std::regex_match(path, m, pattern)) return false;
    captures->clear();
    for (const auto& sub : m) captures->push_back(sub.str());
    return true;
  }

  std::string method;
  std::regex pattern;
  std::string literal;  // the pattern when it has no metacharacters: matched by comparison
  HttpHandler handler;
  bool inline_ = false;  // runs on the loop (GetInline)
};

}  // namespace

std::string HttpRequest::get_header_value(const std::string& name) const {
  for (const auto& [k, v] : headers) {
    if (EqualsIgnoreCase(k, name)) return v;
  }
  return "";
}

std::string HttpRequest::get_param_value(const std::string& key) const {
  auto it = params.find(key);
  return it == params.end() ? "" : it->second;
}

void HttpResponse::set_content(std::string content, std::string content_type) {
  body = std::move(content);
  set_header("Content-Type", std::move(content_type));
}

void HttpResponse::set_header(std::string key, std::string value) {
  for (auto& [k, v] : headers) {
    if (EqualsIgnoreCase(k, key)) {
      v = std::move(value);
      return;
    }
  }
  headers.emplace_back(std::move(key), std::move(value));
}

struct HttpTransport::Impl {
  // Declared before the io_context, so destroyed after it: sessions still
  // queued in it release their counts (and use the TLS context) as it goes.
  std::vector<Route> routes;
  size_t inline_end = 0;  // routes past the last inline one cannot make a request inline
  HttpHandler error_handler;
  HttpTransportOptions options;
  mutable std::mutex mu;  // guards the connection counts
  std::unordered_map<std::string, size_t> per_address;
  size_t open = 0;
  // Connections that may be closed for a new one, oldest first: each with
  // when it was noted and what closes it (`close(id)`, id: what Note gave).
  class Sheddable {
   public:
    using Steady = std::chrono::steady_clock;
    uint64_t Note(std::function<void(uint64_t)> close) {
      std::lock_guard<std::mutex> lock(mu_);
      by_age_.emplace(next_, std::make_pair(Steady::now(), std::move(close)));
      return next_++;
    }
    void Forget(uint64_t id) {
      std::lock_guard<std::mutex> lock(mu_);
      by_age_.erase(id);
    }
    // Asks up to `n` of the oldest, noted no later than `by`, to close; how
    // many it asked.
    size_t Shed(size_t n, Steady::time_point by = Steady::time_point::max()) {
      std::vector<std::pair<uint64_t, std::function<void(uint64_t)>>> shed;
      {
        std::lock_guard<std::mutex> lock(mu_);
        while (shed.size() < n && !by_age_.empty() && by_age_.begin()->second.first <= by) {
          shed.emplace_back(by_age_.begin()->first, std::move(by_age_.begin()->second.second));
          by_age_.erase(by_age_.begin());
        }
      }
      for (auto& [id, close] : shed) close(id);
      return shed.size();
    }

   private:
    std::mutex mu_;
    std::map<uint64_t, std::pair<Steady::time_point, std::function<void(uint64_t)>>> by_age_;
    uint64_t next_ = 1;
  };
  // Idle kept-alive connections (NoteIdle), and how many were closed (ShedIdle).
  Sheddable idle;
  std::atomic<uint64_t> shed_total{0};
  // Connections still on their first request's header (NoteFresh), and how
  // many were closed as slow (ShedSlow).
  Sheddable fresh;
  std::atomic<uint64_t> slow_total{0};
  std::atomic<uint64_t> accepted_total{0};  // connections accepted (refused ones too)
  std::atomic<bool> stopping{false};
  std::optional<asio::ssl::context> ssl;
  asio::io_context ioc;
  std::optional<tcp::acceptor> acceptor;
  std::optional<asio::steady_timer> accept_retry;  // on the accept strand
  int accepts_waiting = 0;  // accepts that failed, to start again when it fires (loop thread only)
  std::optional<asio::thread_pool> workers;
  std::vector<std::thread> io_threads;
  // The listener's own strand: its accepts complete here, one at a time,
  // whichever loop thread runs them.
  std::optional<asio::strand<asio::io_context::executor_type>> accept_strand;

  // Whether `req`'s route runs on the loop.
  // Run on the loop for every request, so only the routes up to the last
  // inline one are tried, literal ones by comparison.
  bool Inline(const HttpRequest& req) const {
    for (size_t i = 0; i < inline_end; ++i) {
      const Route& r = routes[i];
      if (r.method == req.method && r.Match(req.path, nullptr)) return r.inline_;
    }
    return false;
  }

  // Runs the route for `req` on a worker thread; fills `res`.
  void Dispatch(HttpRequest& req, HttpResponse& res) const {
    bool found = false;
    for (const Route& r : routes) {
      if (r.method != req.method) continue;
      if (!r.Match(req.path, &req.matches)) continue;
      found = true;
      try {
        r.handler(req, res);
      } catch (const std::exception& e) {
        res.status = 500;
        res.body.clear();
      }
      break;
    }
    if (!found) res.status = 404;
    if (!res.offload) Conclude(req, res);  // (else once the offload has run: Offload)
  }

  // A handler's answer as sent: no status is 200, and an error goes
  // through the error handler.
  void Conclude(const HttpRequest& req, HttpResponse& res) const {
    if (res.status == -1) res.status = 200;
    if (res.status >= 400 && error_handler) error_handler(req, res);
  }

  // On a worker: the rest of a handler that set `offload`, caught and
  // concluded as the handler itself is (Dispatch).
  void Offload(const HttpRequest& req, HttpResponse& res) const {
    auto offload = std::move(res.offload);
    res.offload = nullptr;
    try {
      offload(res);
    } catch (const std::exception&) {
      res.status = 500;
      res.body.clear();
    }
    Conclude(req, res);
  }

  // A response for a request the transport refused itself (413, 431, 400).
  HttpResponse Refusal(int status, const std::string& path) const {
    HttpRequest req;
    req.method = "?";
    req.path = path;
    HttpResponse res;
    res.status = status;
    if (error_handler) error_handler(req, res);
    return res;
  }

  // Counts a new connection from `address` in, or says no: past the
  // address's cap, or the server's where no kept-alive connection waits
  // idle (one that does is closed for it: ShedIdle).
  bool Admit(const std::string& address) {
    {
      std::lock_guard<std::mutex> lock(mu);
      const auto mine = per_address.find(address);
      if ((mine == per_address.end() ? 0 : mine->second) >= options.max_connections_per_address) return false;
      if (open < options.max_connections) return Count(address);
    }
    // (Over the cap by the connections being closed until they are, and by
    // one whose next request began before its close came: it stays.)
    if (ShedIdle(1) == 0 && ShedSlow(1) == 0) return false;
    std::lock_guard<std::mutex> lock(mu);
    return Count(address);
  }
  // REQUIRES: mu held.
  bool Count(const std::string& address) {
    ++per_address[address];
    ++open;
    return true;
  }
  void Release(const std::string& address) {
    std::lock_guard<std::mutex> lock(mu);
    --open;
    if (--per_address[address] == 0) per_address.erase(address);
  }

  // Kept-alive connections waiting for their next request, oldest first,
  // each with what closes it: the first to go when the server is out of
  // connections (max_connections) or descriptors, as nginx reuses its
  // keep-alive connections, so that a new client (a health check, an
  // agent's report) is served rather than refused or left in the backlog.
  // A client whose idle connection closes sends again on a new one (HTTP
  // lets a server close an idle connection at any time). Streams and
  // requests in progress are never closed for this.
  // Notes a connection idle; `close(id)` closes it (id: what this returns).
  uint64_t NoteIdle(std::function<void(uint64_t)> close) { return idle.Note(std::move(close)); }
  void NoteBusy(uint64_t id) { idle.Forget(id); }
  // Asks up to `n` of the longest idle to close; how many it asked (one
  // whose next request has begun by then stays open: Session::CloseIdle).
  size_t ShedIdle(size_t n) { return idle.Shed(n); }

  // Connections on their first header, oldest first: at the cap, with no
  // idle connection to close, the oldest of them that has taken over
  // kSlowHeader closes for a new client. An honest client sends its header
  // within milliseconds of connecting (a TLS handshake within a few round
  // trips); one trickling it (slowloris) would otherwise hold its place
  // for the whole header timeout, and a few addresses' worth of them every
  // place, refusing agents and health checks alike.
  static constexpr auto kSlowHeader = std::chrono::seconds(2);
  uint64_t NoteFresh(std::function<void(uint64_t)> close) { return fresh.Note(std::move(close)); }
  void NoteHeard(uint64_t id) { fresh.Forget(id); }
  // Asks up to `n` of the oldest slow ones to close; how many it asked.
  size_t ShedSlow(size_t n) { return fresh.Shed(n, std::chrono::steady_clock::now() - kSlowHeader); }

  // The loop's lag: a timer every kLagTick, and the most it ran late
  // (TakeLoopLagMax).
  static constexpr auto kLagTick = std::chrono::milliseconds(20);
  std::optional<asio::steady_timer> lag_timer;
  std::atomic<int64_t> lag_max_us{0};
  void LagTick() {
    lag_timer->expires_after(kLagTick);
    lag_timer->async_wait([this](beast::error_code ec) {
      if (ec || stopping) return;
      const auto late = std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now() -
                                                                              lag_timer->expiry()).count();
      int64_t seen = lag_max_us.load();
      while (late > seen && !lag_max_us.compare_exchange_weak(seen, late)) {
      }
      LagTick();
    });
  }

  void Accept();
  // Takes an accept that failed out of turn; the retry timer re-arms it (on
  // the accept strand).
  void RetrySoon(bool out_of_descriptors);
  // Starts a session on an accepted connection, or closes it past a cap.
  void Serve(tcp::socket socket);
  // Connections an accept takes from the backlog after its own.
  static constexpr int kDrainPerAccept = 64;
};

namespace {

// One connection: read a request (deadlines on headers and body), hand it to
// a worker, write the answer, and again while the client keeps it alive.
template <class Stream>
class Session : public std::enable_shared_from_this<Session<Stream>> {
 public:
  template <class... Args>
  Session(HttpTransport::Impl& impl, std::string address, Args&&... args)
      : impl_(impl), address_(std::move(address)), stream_(std::forward<Args>(args)...) {}
  ~Session() {
    if (idle_id_ != 0) impl_.NoteBusy(idle_id_);
    if (fresh_id_ != 0) impl_.NoteHeard(fresh_id_);
    impl_.Release(address_);
  }

  void Run() {
    fresh_id_ = impl_.NoteFresh([weak = this->weak_from_this(), executor = Lowest().get_executor()](uint64_t id) {
      asio::post(executor, [weak, id] {
        if (auto self = weak.lock()) self->CloseSlow(id);
      });
    });
    if constexpr (kTls) {
      Lowest().expires_after(std::chrono::milliseconds(impl_.options.header_timeout_ms));
      stream_.async_handshake(asio::ssl::stream_base::server,
                              [self = this->shared_from_this()](beast::error_code ec) {
                                if (!ec) self->ReadHeader(true);
                              });
    } else {
      ReadHeader(true);
    }
  }

 private:
  static constexpr bool kTls = !std::is_same_v<Stream, beast::tcp_stream>;
  beast::tcp_stream& Lowest() { return beast::get_lowest_layer(stream_); }

  void ReadHeader(bool first) {
    parser_.emplace();
    parser_->header_limit(static_cast<std::uint32_t>(impl_.options.max_header_bytes));
    parser_->body_limit(impl_.options.max_body_bytes);
    // A fresh connection has the header deadline; a kept-alive one waits for
    // its next request up to the idle timeout.
    Lowest().expires_after(std::chrono::milliseconds(first ? impl_.options.header_timeout_ms
                                                           : impl_.options.idle_timeout_ms));
    // (A kept-alive connection with part of its next request already read
    // is not idle.)
    if (!first && buffer_.size() == 0) {
      idle_id_ = impl_.NoteIdle([weak = this->weak_from_this(), executor = Lowest().get_executor()](uint64_t id) {
        asio::post(executor, [weak, id] {
          if (auto self = weak.lock()) self->CloseIdle(id);
        });
      });
    }
    http::async_read_header(stream_, buffer_, *parser_,
                            [self = this->shared_from_this()](beast::error_code ec, std::size_t) {
                              if (self->idle_id_ != 0) self->impl_.NoteBusy(std::exchange(self->idle_id_, 0));
                              if (self->fresh_id_ != 0) self->impl_.NoteHeard(std::exchange(self->fresh_id_, 0));
                              // (Closed as idle after the loop had read a request: not run; the
                              // client sees the connection closed before any answer.)
                              if (self->shed_) return self->Close();
                              self->OnHeader(ec);
                            });
  }

  // Shed (Impl::ShedIdle) while idle as `id`: closed unless its next
  // request began meanwhile.
  void CloseIdle(uint64_t id) {
    beast::error_code ec;
    if (idle_id_ != id || buffer_.size() != 0 || Lowest().socket().available(ec) > 0 || ec) return;
    idle_id_ = 0;  // (its entry is gone)
    shed_ = true;
    ++impl_.shed_total;
    Lowest().socket().shutdown(tcp::socket::shutdown_both, ec);
    Lowest().socket().close(ec);
  }

  // Shed (Impl::ShedSlow) while still on its first header as `id`.
  void CloseSlow(uint64_t id) {
    if (fresh_id_ != id) return;
    fresh_id_ = 0;  // (its entry is gone)
    ++impl_.slow_total;
    beast::error_code ec;
    Lowest().socket().shutdown(tcp::socket::shutdown_both, ec);
    Lowest().socket().close(ec);
  }

  void OnHeader(beast::error_code ec) {
    if (ec) return Fail(ec);
    Lowest().expires_after(std::chrono::milliseconds(impl_.options.body_timeout_ms));
    http::async_read(stream_, buffer_, *parser_, [self = this->shared_from_this()](beast::error_code e, std::size_t) {
      self->OnBody(e);
    });
  }

  // Refuses what the parser refused with an answer, and closes.
  void Fail(beast::error_code ec) {
    if (ec == http::error::body_limit) return Refuse(413);
    if (ec == http::error::header_limit) return Refuse(431);
    if (ec == http::error::end_of_stream || ec == beast::error::timeout || ec == asio::error::operation_aborted ||
        ec == asio::error::connection_reset || ec == asio::error::eof || ec.category() == asio::error::get_ssl_category()) {
      return Close();
    }
    if (ec.category() == http::make_error_code(http::error::bad_target).category()) return Refuse(400);  // malformed HTTP
    Close();
  }

  void Refuse(int status) {
    keep_alive_ = false;
    refused_ = true;
    Write(impl_.Refusal(status, parser_ && parser_->is_header_done() ? std::string(parser_->get().target()) : "/"));
  }

  void OnBody(beast::error_code ec) {
    if (ec) return Fail(ec);
    auto& msg = parser_->get();
    keep_alive_ = msg.keep_alive();
    auto req = std::make_shared<HttpRequest>();
    req->method = std::string(msg.method_string());
    const std::string_view target(msg.target().data(), msg.target().size());
    const size_t q = target.find('?');
    req->path = Decode(target.substr(0, q), false);
    if (q != std::string_view::npos) {
      std::string_view query = target.substr(q + 1);
      while (!query.empty()) {
        const size_t amp = query.find('&');
        const std::string_view pair = query.substr(0, amp);
        const size_t eq = pair.find('=');
        req->params.emplace(Decode(pair.substr(0, eq), true),
                            eq == std::string_view::npos ? std::string() : Decode(pair.substr(eq + 1), true));
        if (amp == std::string_view::npos) break;
        query = query.substr(amp + 1);
      }
    }
    for (const auto& field : msg) req->headers.emplace_back(std::string(field.name_string()), std::string(field.value()));
    req->body = std::move(msg.body());
    req->remote_addr = address_;
    // Handlers may block (long polls, group commits): on a worker, never
    // here, but for inline routes (which hand what would block to one).
    Lowest().expires_never();
    if (impl_.Inline(*req)) {
      auto res = std::make_shared<HttpResponse>();
      impl_.Dispatch(*req, *res);
      if (!res->offload) return Answer(req, std::move(res), true);
      asio::post(*impl_.workers, [self = this->shared_from_this(), req, res] {
        OnWorker();
        self->impl_.Offload(*req, *res);
        self->Answer(req, res, false);
      });
      return;
    }
    asio::post(*impl_.workers, [self = this->shared_from_this(), req] {
      OnWorker();
      auto res = std::make_shared<HttpResponse>();
      self->impl_.Dispatch(*req, *res);
      if (res->offload) self->impl_.Offload(*req, *res);  // (a worker's route: here and now)
      self->Answer(req, std::move(res), false);
    });
  }

  // Names the worker thread and sets its policy (MarkWorker), on its first request.
  static void OnWorker() {
    static thread_local const bool kNamed = (MarkWorker(), true);
    (void)kNamed;
  }

  // After the handler (`on_loop`: it ran on this session's loop thread):
  // writes the answer, starts the stream, or hands `deferred` its respond.
  void Answer(const std::shared_ptr<HttpRequest>& req, std::shared_ptr<HttpResponse> res, bool on_loop) {
    auto self = this->shared_from_this();
    if (res->deferred) {
      auto deferred = std::move(res->deferred);
      return deferred([self, req](HttpResponse r) {
        self->impl_.Conclude(*req, r);
        auto answer = std::make_shared<HttpResponse>(std::move(r));
        asio::post(self->Lowest().get_executor(), [self, answer] { self->Write(std::move(*answer)); });
      });
    }
    auto write = [self, res] {
      if (res->stream && res->status == 200) return self->StartStream(std::move(*res));
      self->Write(std::move(*res));
    };
    if (on_loop) return write();
    asio::post(Lowest().get_executor(), std::move(write));
  }

  // The handle a stream's owner holds; the session it writes to may be gone.
  class Handle final : public HttpStream {
   public:
    Handle(std::weak_ptr<Session> session, asio::any_io_executor executor)
        : session_(std::move(session)), executor_(std::move(executor)) {}
    bool Send(std::string chunk) override {
      if (!open_) return false;
      asio::post(executor_, [s = session_, chunk = std::move(chunk)]() mutable {
        if (auto p = s.lock()) p->Enqueue(std::move(chunk));
      });
      return true;
    }
    void Then(std::function<void()> fn) override { asio::post(executor_, std::move(fn)); }
    void Close() override {
      if (!open_.exchange(false)) return;
      asio::post(executor_, [s = session_] {
        if (auto p = s.lock()) p->EndStream();
      });
    }
    bool open() const override { return open_; }
    std::atomic<bool> open_{true};

   private:
    std::weak_ptr<Session> session_;
    asio::any_io_executor executor_;
  };

  // Streams: the header now, chunks as they are queued, the client's side
  // read only to notice it going away.
  void StartStream(HttpResponse r) {
    auto header = std::make_shared<http::response<http::empty_body>>();
    header->version(11);
    header->result(http::status::ok);
    for (auto& [k, v] : r.headers) header->set(k, v);
    header->set(http::field::cache_control, "no-store");
    header->keep_alive(false);
    header->chunked(true);
    auto sr = std::make_shared<http::response_serializer<http::empty_body>>(*header);
    handle_ = std::make_shared<Handle>(this->weak_from_this(), Lowest().get_executor());
    writing_ = true;
    Lowest().expires_after(std::chrono::milliseconds(impl_.options.write_timeout_ms));
    http::async_write_header(stream_, *sr, [self = this->shared_from_this(), header, sr, start = std::move(r.stream)](
                                               beast::error_code ec, std::size_t) {
      self->writing_ = false;
      if (ec) return self->Abort();
      self->WatchPeer();
      start(self->handle_);
      self->Flush();
    });
  }

  void WatchPeer() {
    Lowest().expires_never();
    peer_.resize(512);
    stream_.async_read_some(asio::buffer(peer_), [self = this->shared_from_this()](beast::error_code ec, std::size_t) {
      if (ec) return self->Abort();  // the client went away (or spoke out of turn: ignored)
      self->WatchPeer();
    });
  }

  static constexpr size_t kMaxQueuedBytes = 1 << 20;

  void Enqueue(std::string chunk) {
    if (aborted_ || ending_) return;
    if (queued_bytes_ + chunk.size() > kMaxQueuedBytes) return Abort();  // too far behind
    queued_bytes_ += chunk.size();
    queue_.push_back(std::make_shared<std::string>(std::move(chunk)));
    if (!writing_) Flush();
  }

  void EndStream() {
    ending_ = true;
    if (!writing_) Flush();
  }

  void Flush() {
    if (aborted_ || writing_) return;
    if (queue_.empty()) {
      if (!ending_) return;
      writing_ = true;
      Lowest().expires_after(std::chrono::milliseconds(impl_.options.write_timeout_ms));
      asio::async_write(stream_, http::make_chunk_last(), [self = this->shared_from_this()](beast::error_code, std::size_t) {
        self->writing_ = false;
        self->Abort();
      });
      return;
    }
    auto data = queue_.front();
    writing_ = true;
    Lowest().expires_after(std::chrono::milliseconds(impl_.options.write_timeout_ms));
    asio::async_write(stream_, http::make_chunk(asio::buffer(*data)),
                      [self = this->shared_from_this(), data](beast::error_code ec, std::size_t) {
                        self->writing_ = false;
                        // Aborted while this write was in flight (the peer's
                        // close can be handled before a write that had
                        // already completed): the queue is gone, not popped.
                        if (ec || self->aborted_) return self->Abort();
                        self->queued_bytes_ -= data->size();
                        self->queue_.pop_front();
                        self->Flush();
                      });
  }

  void Abort() {
    if (aborted_) return;
    aborted_ = true;
    if (handle_) handle_->open_ = false;
    queue_.clear();
    beast::error_code ignored;
    Lowest().socket().shutdown(tcp::socket::shutdown_both, ignored);
    Lowest().socket().close(ignored);
  }

  void Write(HttpResponse r) {
    auto res = std::make_shared<http::response<http::string_body>>();
    res->version(11);
    res->result(static_cast<unsigned>(r.status < 0 ? 200 : r.status));
    for (auto& [k, v] : r.headers) res->set(k, v);
    res->keep_alive(keep_alive_ && !impl_.stopping);
    res->body() = std::move(r.body);
    res->prepare_payload();
    Lowest().expires_after(std::chrono::milliseconds(impl_.options.write_timeout_ms));
    http::async_write(stream_, *res, [self = this->shared_from_this(), res](beast::error_code ec, std::size_t) {
      if (ec) return self->Close();
      if (self->refused_) return self->Linger();
      if (!res->keep_alive()) return self->Close();
      self->ReadHeader(false);
    });
  }

  // After refusing a request whose body is still arriving: stop sending,
  // read and drop what comes (up to 16 MiB or 2 s), then close, so the
  // client reads the answer instead of a reset (a lingering close).
  void Linger() {
    if constexpr (!kTls) {
      beast::error_code ignored;
      Lowest().socket().shutdown(tcp::socket::shutdown_send, ignored);
      Lowest().expires_after(std::chrono::seconds(2));
      Drain();
    } else {
      Close();
    }
  }
  void Drain() {
    drain_.resize(64 * 1024);
    Lowest().async_read_some(asio::buffer(drain_), [self = this->shared_from_this()](beast::error_code ec, std::size_t n) {
      self->drained_ += n;
      if (!ec && self->drained_ < (16u << 20)) self->Drain();
    });
  }

  void Close() {
    beast::error_code ignored;
    if constexpr (kTls) {
      Lowest().expires_after(std::chrono::seconds(1));
      stream_.async_shutdown([self = this->shared_from_this()](beast::error_code) {
        beast::error_code e;
        self->Lowest().socket().shutdown(tcp::socket::shutdown_both, e);
      });
    } else {
      Lowest().socket().shutdown(tcp::socket::shutdown_send, ignored);
    }
  }

  HttpTransport::Impl& impl_;
  std::string address_;
  Stream stream_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  bool keep_alive_ = false;
  bool refused_ = false;
  uint64_t idle_id_ = 0;  // while kept alive and idle: its Impl::idle entry
  bool shed_ = false;     // closed as idle (CloseIdle)
  uint64_t fresh_id_ = 0;  // its entry among those on their first header (Impl::NoteFresh), 0 once heard
  std::vector<char> drain_;
  size_t drained_ = 0;
  // Streaming (all on the connection's loop).
  std::shared_ptr<Handle> handle_;
  std::deque<std::shared_ptr<std::string>> queue_;
  size_t queued_bytes_ = 0;
  bool writing_ = false;
  bool ending_ = false;
  bool aborted_ = false;
  std::vector<char> peer_;
};

}  // namespace

void HttpTransport::Impl::Accept() {
  acceptor->async_accept(asio::make_strand(ioc), asio::bind_executor(*accept_strand, [this](beast::error_code ec, tcp::socket socket) {
    if (ec) {
      if (ec == asio::error::operation_aborted || stopping) return;
      return RetrySoon(ec == asio::error::no_descriptors || ec.value() == ENFILE);
    }
    Serve(std::move(socket));
    // Then whatever else waits in the backlog, without a trip through the
    // loop's queue each: the listener only comes round once per pass of
    // that queue, and at 16 connections a pass a storm of connections
    // (12,500 nodes registering at once) overflowed the kernel's backlog,
    // whose dropped connections their clients retry only a second later.
    // accept4 itself, not Asio's synchronous accept: that one waits in
    // poll() without a timeout after ECONNABORTED or EPROTO.
    const int listener = acceptor->native_handle();
    const tcp protocol = acceptor->local_endpoint().protocol();
    for (int i = 0; i < kDrainPerAccept; ++i) {
      const int fd = ::accept4(listener, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) {
        if (errno == ECONNABORTED || errno == EPROTO || errno == EINTR) continue;  // that one is gone; the next
        if (errno == EAGAIN || errno == EWOULDBLOCK) break;                      // the backlog is empty
        // Out of descriptors (or memory): this accept waits with the others.
        return RetrySoon(errno == EMFILE || errno == ENFILE);
      }
      tcp::socket next(asio::make_strand(ioc));
      beast::error_code assign_ec;
      next.assign(protocol, fd, assign_ec);
      if (assign_ec) {
        ::close(fd);
        continue;
      }
      Serve(std::move(next));
    }
    Accept();
  }));
}

void HttpTransport::Impl::RetrySoon(bool out_of_descriptors) {
  // Out of descriptors (or memory): the pending connection stays in the
  // backlog, so retrying at once would spin. Serve the open ones and try
  // again shortly. (One timer for all the accepts that failed: it re-arms
  // each.) Out of descriptors, up to kDrainPerAccept idle kept-alive
  // connections close first, once a round (and, short of that many, slow
  // first headers: ShedSlow).
  if (accepts_waiting++ > 0) return;
  if (out_of_descriptors && ShedIdle(kDrainPerAccept) < kDrainPerAccept) ShedSlow(kDrainPerAccept);
  accept_retry->expires_after(std::chrono::milliseconds(50));
  accept_retry->async_wait([this](beast::error_code e) {
    const int n = accepts_waiting;
    accepts_waiting = 0;
    if (e || stopping) return;
    for (int i = 0; i < n; ++i) Accept();
  });
}

void HttpTransport::Impl::Serve(tcp::socket socket) {
  ++accepted_total;
  beast::error_code addr_ec;
  const auto endpoint = socket.remote_endpoint(addr_ec);
  const std::string address = addr_ec ? "?" : endpoint.address().to_string();
  socket.set_option(tcp::no_delay(true), addr_ec);  // small JSON replies: no Nagle + delayed-ACK stalls
  if (!Admit(address)) {
    socket.close(addr_ec);  // over a connection cap: refused at once
  } else if (ssl) {
    std::make_shared<Session<beast::ssl_stream<beast::tcp_stream>>>(*this, address, std::move(socket), *ssl)->Run();
  } else {
    std::make_shared<Session<beast::tcp_stream>>(*this, address, std::move(socket))->Run();
  }
}

HttpTransport::HttpTransport() : impl_(std::make_unique<Impl>()) {}
HttpTransport::~HttpTransport() { Stop(); }

void HttpTransport::Get(const std::string& pattern, HttpHandler handler) {
  impl_->routes.emplace_back("GET", pattern, std::move(handler));
}
void HttpTransport::GetInline(const std::string& pattern, HttpHandler handler) {
  impl_->routes.emplace_back("GET", pattern, std::move(handler), true);
  impl_->inline_end = impl_->routes.size();
}
void HttpTransport::Post(const std::string& pattern, HttpHandler handler) {
  impl_->routes.emplace_back("POST", pattern, std::move(handler));
}
void HttpTransport::PostInline(const std::string& pattern, HttpHandler handler) {
  impl_->routes.emplace_back("POST", pattern, std::move(handler), true);
  impl_->inline_end = impl_->routes.size();
}
void HttpTransport::Delete(const std::string& pattern, HttpHandler handler) {
  impl_->routes.emplace_back("DELETE", pattern, std::move(handler));
}
void HttpTransport::set_error_handler(HttpHandler handler) { impl_->error_handler = std::move(handler); }

int64_t HttpTransport::TakeLoopLagMax() { return impl_->lag_max_us.exchange(0); }
uint64_t HttpTransport::idle_closed() const { return impl_->shed_total.load(); }
uint64_t HttpTransport::slow_closed() const { return impl_->slow_total.load(); }
uint64_t HttpTransport::accepted() const { return impl_->accepted_total.load(); }

size_t HttpTransport::connections() const {
  std::lock_guard<std::mutex> lock(impl_->mu);
  return impl_->open;
}

StatusOr<int> HttpTransport::Start(const HttpTransportOptions& options) {
  Impl& d = *impl_;
  d.options = options;
  // Connections stop short of the descriptors the process may open (a
  // tenth of them, at least 64 and at most 1,024, left for the store, logs
  // and proxied requests; half of a limit of 512 or less), so that idle
  // kept-alive connections close for new ones at the cap rather than
  // accepts failing.
  if (rlimit files{}; getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_cur != RLIM_INFINITY) {
    const size_t n = static_cast<size_t>(files.rlim_cur);
    const size_t usable = n <= 512 ? n / 2 : n - std::clamp<size_t>(n / 10, 64, 1024);
    d.options.max_connections = std::min(d.options.max_connections, std::max<size_t>(1, usable));
  }
  if (!options.tls_cert.empty() || !options.tls_key.empty()) {
    if (options.tls_cert.empty() || options.tls_key.empty()) return InvalidArgumentError("--tls-cert and --tls-key go together");
    d.ssl.emplace(asio::ssl::context::tls_server);
    beast::error_code ec;
    d.ssl->set_options(asio::ssl::context::default_workarounds | asio::ssl::context::no_sslv2 |
                       asio::ssl::context::no_sslv3 | asio::ssl::context::no_tlsv1 | asio::ssl::context::no_tlsv1_1);
    d.ssl->use_certificate_chain_file(options.tls_cert, ec);
    if (!ec) d.ssl->use_private_key_file(options.tls_key, asio::ssl::context::pem, ec);
    if (ec) return InvalidArgumentError("cannot load TLS certificate or key: " + ec.message());
  }
  const std::string where = options.host + ":" + std::to_string(options.port);
  beast::error_code ec;
  tcp::resolver resolver(d.ioc);
  auto endpoints = resolver.resolve(options.host, std::to_string(options.port), ec);
  if (ec || endpoints.empty()) return UnavailableError("cannot listen on " + where + ": " + ec.message());
  const tcp::endpoint endpoint = endpoints.begin()->endpoint();
  d.accept_strand.emplace(asio::make_strand(d.ioc));
  d.acceptor.emplace(*d.accept_strand);
  d.accept_retry.emplace(*d.accept_strand);
  d.acceptor->open(endpoint.protocol(), ec);
  if (!ec) d.acceptor->set_option(asio::socket_base::reuse_address(true), ec);
  if (!ec) d.acceptor->bind(endpoint, ec);
  if (!ec) d.acceptor->listen(asio::socket_base::max_listen_connections, ec);
  if (!ec) d.acceptor->non_blocking(true, ec);  // Accept's accept4 drain must never block
  if (ec) {
    d.acceptor.reset();
    return UnavailableError("cannot listen on " + where + " (in use?): " + ec.message());
  }
  const int port = d.acceptor->local_endpoint().port();
  d.workers.emplace(static_cast<size_t>(std::max(1, options.workers)));
  // Several accepts outstanding: each wakeup of the listener takes up to
  // this many connections, so a reconnect storm drains the backlog fast
  // (a full backlog drops SYNs, which clients retry only after a second).
  asio::post(*d.accept_strand, [&d] {
    for (int i = 0; i < 16; ++i) d.Accept();
  });
  d.lag_timer.emplace(d.ioc);
  d.LagTick();
  const int loops = options.io_threads > 0 ? options.io_threads
                                            : std::max(1, static_cast<int>(std::thread::hardware_concurrency() / 4));
  for (int i = 0; i < loops; ++i) d.io_threads.push_back(NamedThread("rota-http", [&d] { d.ioc.run(); }));
  return port;
}

void HttpTransport::Stop() {
  Impl& d = *impl_;
  if (d.stopping.exchange(true) || !d.acceptor) return;
  d.ioc.stop();
  for (std::thread& t : d.io_threads) t.join();
  d.io_threads.clear();
  beast::error_code ec;
  d.acceptor->close(ec);  // the loop is stopped: no other thread touches it now
  if (d.workers) d.workers->join();  // handlers running now finish; their writes are queued, never run
  d.acceptor.reset();
  // Sessions still queued in the loop go with it (~Impl), counts and TLS
  // context still alive.
}

}  // namespace rota::server
