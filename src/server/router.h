// Router: the stable endpoint of rota's services. A reverse proxy (real
// HTTP/1.1, keep-alive on both sides) on its own listener: a request for
// http://ROUTER/NAME/rest goes to a ready replica of service NAME as /rest.
//
//   - Readiness: each replica is probed (HTTP GET of its readiness path on
//     its host and port, every period, within the timeout); it takes
//     requests once a probe succeeds and stops after failure_threshold
//     probes fail in a row, or at once when a request to it fails to
//     connect or breaks before its answer (then a probe must succeed again).
//     A replica not ready for longer than its startup allowance, since it
//     started or since it was last ready, is reported unhealthy once
//     (TakeUnhealthy): the server restarts it. A ready replica's own
//     metrics (RouterService::metrics) are read at each probe too.
//   - Balancing: the ready replica with the fewest requests outstanding
//     (ties in turn). An idempotent request (GET, HEAD, PUT, DELETE, OPTIONS)
//     that fails on a replica before any answer (its header and the first
//     bytes of its body) is retried once on another.
//     With no ready replica a request waits (queued) up to queue_timeout,
//     then gets 503.
//   - Signals, per service: requests in flight (and their average over time,
//     for the autoscaler), queued, totals, latency p50/p99 over the last
//     2,048 requests.
//
// Answers are streamed: the header and each piece of the body go to the
// client as the replica writes them (a token stream's events one by one),
// through a 16 KiB buffer per request, with no limit on their length. A
// body the replica ends by closing goes to an HTTP/1.1 client chunked. An
// answer cut short by the replica (after its first bytes were passed on)
// closes the client's connection, counts as failed, and takes the replica
// out until a probe succeeds. Request bodies are buffered whole, up to
// max_body_bytes, and bounded in all: a request whose body would take the
// request bodies buffered now (queued or in flight) past
// max_buffered_bytes gets 503 with Retry-After before its body is read
// (one with no declared length, once read), so a flood of large requests
// to a cold service cannot take the server's memory.
//
// Beast and Asio stay in router.cc. Thread-safety: thread-safe; the proxy
// runs on one event-loop thread of its own, and every call from another
// thread is handed to it.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "base/clock.h"
#include "base/status.h"
#include "core/job.h"

namespace rota::server {

struct RouterBackend {
  JobId job;
  uint16_t task = 0;
  uint32_t replica = 0;
  int32_t attempt = 0;  // a new attempt is a new process: probed from the start
  std::string host;
  int32_t port = 0;
};

struct RouterService {
  std::string name;
  JobId job;
  ProbeSpec readiness;
  std::vector<RouterBackend> backends;
  // The service's own metrics to read (Prometheus text on metrics_path) at
  // each probe of a ready replica; summed over each replica's series.
  std::string metrics_path = "/metrics";
  std::vector<std::string> metrics;
};

// Sums of `names`' samples in Prometheus text (each over its label sets);
// a name with no sample is absent.
std::map<std::string, double> SumPrometheus(std::string_view text, const std::vector<std::string>& names);

struct RouterStats {
  double inflight_avg = 0;  // time-weighted, since the last TakeStats
  int64_t inflight = 0;     // now
  int64_t queued = 0;       // now: waiting for a ready replica
  int32_t ready = 0;
  int32_t replicas = 0;
  uint64_t requests = 0;  // answered, in all (replicas' answers of any status)
  uint64_t failed = 0;    // answered by the router itself with 502/503/504, or cut short by the replica
  uint64_t retried = 0;
  // Clients that hung up before their answer began (queued, or waiting on
  // the replica): the replica's request was closed, not answered to no one.
  uint64_t abandoned = 0;
  double p50_ms = 0, p99_ms = 0;
  // RouterService::metrics summed over the ready replicas that reported
  // them (a metric none reported is absent).
  std::map<std::string, double> metrics;
};

struct RouterEndpoint {
  uint32_t replica = 0;
  int32_t attempt = 0;
  std::string address;  // host:port
  bool ready = false;
  bool draining = false;
  int64_t outstanding = 0;
};

struct RouterUnhealthy {
  JobId job;
  uint16_t task = 0;
  uint32_t replica = 0;
  int32_t attempt = 0;
  std::string reason;
};

struct RouterOptions {
  std::string host = "127.0.0.1";
  int port = 0;  // 0 = any free port
  Duration queue_timeout = 30 * kMicrosPerSecond;
  Duration request_timeout = 300 * kMicrosPerSecond;  // a replica's answer
  size_t max_body_bytes = 16 << 20;  // a request's (answers are streamed)
  size_t max_buffered_bytes = 256 << 20;  // all bodies held at once (see above)
  size_t max_connections = 4'096;
  size_t max_connections_per_address = 512;  // one client cannot take them all
  // A connection may idle this long between requests; a request's header,
  // once begun, must be whole within header_timeout (a client that sends a
  // header a byte at a time holds no connection for long).
  Duration idle_timeout = 60 * kMicrosPerSecond;
  Duration header_timeout = 10 * kMicrosPerSecond;
};

class Router {
 public:
  explicit Router(RouterOptions options);
  ~Router();
  Router(const Router&) = delete;
  Router& operator=(const Router&) = delete;

  // Binds and starts the proxy; returns the port (Unavailable if taken).
  StatusOr<int> Start();
  void Stop();

  // The services and their replicas now (what is not listed is dropped).
  void Update(std::vector<RouterService> services);
  // Per service name, its signals; the averages restart from now.
  std::map<std::string, RouterStats> TakeStats();
  std::vector<RouterEndpoint> Endpoints(const std::string& service) const;
  // Sends no new request to that replica's attempt (a rolling update takes
  // it out once its outstanding requests are answered).
  void Drain(JobId job, uint32_t replica, int32_t attempt);
  // Replicas past their startup allowance without being ready (each once).
  std::vector<RouterUnhealthy> TakeUnhealthy();
  // Body bytes held now, and requests refused for the buffer budget so far.
  size_t buffered_bytes() const;
  uint64_t refused_for_buffers() const;

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace rota::server
