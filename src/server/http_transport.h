// HttpTransport: the server's event-driven HTTP/1.1 (and HTTPS) front end,
// on Boost.Beast and Boost.Asio. Connections cost a socket and a buffer, not
// a thread: idle keep-alive connections, slow clients and thousands of agent
// watches wait in one event loop, while handlers run on a pool of workers
// (a handler may block, e.g. an agent's long poll or a submission waiting
// for its group commit; the loop never does).
//
// A handler may instead answer with a stream (HttpStream): the connection
// then carries chunks the server pushes, with no worker held.
//
// Each connection has deadlines: the request line and headers must arrive
// within `header_timeout` of the first byte being awaited, the body within
// `body_timeout`, and an idle keep-alive connection closes after
// `idle_timeout`. Headers are capped at `max_header_bytes`, bodies at
// `max_body_bytes` (413), connections per client address and in all (new
// ones past a cap are closed at once). The listen backlog is the kernel's
// maximum; the socket has SO_REUSEADDR only (never SO_REUSEPORT), so a
// second server on the port fails to start.
//
// Routing is httplib's model (the routes and their tests predate this
// transport): a method and a regular expression matched against the whole
// decoded path, the captures in HttpRequest::matches; an error handler sees
// every response with status >= 400.
//
// Beast stays inside http_transport.cc. Thread-safety: Start and Stop from
// one thread; handlers run concurrently on the workers; each connection's
// reads, writes and timers run on its own strand of the loop threads.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "base/status.h"

namespace rota::server {

struct HttpRequest {
  std::string method;
  std::string path;  // decoded, without the query
  std::string body;
  std::string remote_addr;
  std::vector<std::pair<std::string, std::string>> headers;
  std::multimap<std::string, std::string> params;  // the decoded query
  std::vector<std::string> matches;                // [0] the whole path, then the route's captures

  // The first header of that name (case-insensitive), or "".
  std::string get_header_value(const std::string& name) const;
  bool has_param(const std::string& key) const { return params.count(key) > 0; }
  std::string get_param_value(const std::string& key) const;
};

// A response that stays open (an agent's watch): chunks go out with chunked
// transfer encoding as the server pushes them, until either side closes.
// Thread-safe. Writes are queued on the connection's loop; a client that
// falls more than 1 MiB behind, or does not take a chunk within the write
// timeout, is disconnected (it reconnects and resumes). Send and Close
// must not be called after HttpTransport::Stop.
class HttpStream {
 public:
  virtual ~HttpStream() = default;
  // Queues one chunk; false once the stream is closed (by either side).
  virtual bool Send(std::string chunk) = 0;
  // Ends the stream after what is queued.
  virtual void Close() = 0;
  // Runs `fn` on the loop once the chunks sent before it have been queued
  // there (never, if the transport stops first: `fn` is then destroyed).
  // A writer of many streams uses it to pace itself to the loop.
  virtual void Then(std::function<void()> fn) = 0;
  virtual bool open() const = 0;
};

struct HttpResponse {
  int status = -1;  // unset: 200
  std::string body;
  std::vector<std::pair<std::string, std::string>> headers;
  // Set by a handler (with status 200) to answer with a stream: the status
  // line and headers go out, then `stream` is called once with the handle
  // (on the loop thread: it must only hand the handle on).
  std::function<void(std::shared_ptr<HttpStream>)> stream;
  // Set by a handler to answer later without holding a worker: called once,
  // after the handler, with `respond`, which any thread then calls once
  // with the answer. The owner must see every respond called (or dropped)
  // before the transport is destroyed.
  std::function<void(std::function<void(HttpResponse)> respond)> deferred;
  // Set by a handler on the loop (PostInline) that would block: the rest of
  // it, run on a worker, which fills the response (or sets `deferred`) as a
  // worker's handler would (an exception is a 500; an error status goes
  // through the error handler). What the handler wrote before is its
  // starting point. A worker's route that sets it has it run at once.
  std::function<void(HttpResponse&)> offload;

  void set_content(std::string content, std::string content_type);
  void set_header(std::string key, std::string value);
};

using HttpHandler = std::function<void(const HttpRequest&, HttpResponse&)>;

struct HttpTransportOptions {
  std::string host = "127.0.0.1";
  int port = 0;  // 0 = any free port
  std::string tls_cert, tls_key;  // both set = HTTPS
  size_t max_body_bytes = 1 << 20;
  size_t max_header_bytes = 16 << 10;
  int header_timeout_ms = 10'000;
  int body_timeout_ms = 30'000;
  int idle_timeout_ms = 60'000;
  int write_timeout_ms = 30'000;
  // Past it, an idle kept-alive connection closes for each new one (none:
  // the new one is refused). Out of descriptors, idle ones close too.
  size_t max_connections = 50'000;
  size_t max_connections_per_address = 20'000;
  int workers = 96;
  // Event-loop threads (each connection stays on one strand; a busy loop
  // thread does not delay another's connections). 0 = one per 4 cores (at
  // least one: on 2 cores a second loop thread cost more in switches than
  // it gave).
  int io_threads = 0;
};

class HttpTransport {
 public:
  HttpTransport();
  ~HttpTransport();
  HttpTransport(const HttpTransport&) = delete;
  HttpTransport& operator=(const HttpTransport&) = delete;

  void Get(const std::string& pattern, HttpHandler handler);
  // A GET answered on the event loop itself, never queued behind the
  // workers (health checks under load): the handler must not block.
  void GetInline(const std::string& pattern, HttpHandler handler);
  void Post(const std::string& pattern, HttpHandler handler);
  // A POST handled on the event loop, for what is cheap: no worker is woken
  // and none wakes the loop back (agents' reports, over a thousand a second
  // at 12,500 nodes). The handler must not block: it answers, sets
  // `deferred` (respond from any thread), or hands what would block to a
  // worker with `offload`. Register it before the worker routes: each
  // request is matched on the loop against the routes up to the last
  // inline one.
  void PostInline(const std::string& pattern, HttpHandler handler);
  void Delete(const std::string& pattern, HttpHandler handler);
  void set_error_handler(HttpHandler handler);

  // Binds and starts serving; returns the port. InvalidArgument for a bad
  // certificate, Unavailable when the address is taken.
  StatusOr<int> Start(const HttpTransportOptions& options);
  // Closes the listener and every connection, waits for running handlers.
  void Stop();

  // Connections open now (for tests and metrics).
  size_t connections() const;
  // The most the loop ran late (a timer due every 20 ms, in microseconds)
  // since the last call, which starts the next window: how long a request
  // or a health check waited for the loop at worst.
  int64_t TakeLoopLagMax();
  // Idle kept-alive connections closed to make room for new ones (out of
  // connections or descriptors), since the start.
  uint64_t idle_closed() const;
  // Connections still on their first header after 2 s closed to make room
  // for new ones (no idle one left to close), since the start.
  uint64_t slow_closed() const;
  // Connections accepted since the start (those refused at a cap too).
  uint64_t accepted() const;

  struct Impl;  // opaque: Beast stays in the .cc

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace rota::server
