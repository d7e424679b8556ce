// The REST API under /v1/, /metrics and /healthz, served over HTTP (or HTTPS
// with a certificate). Every request but /healthz needs a bearer token. Bad
// input gets a 4xx with the field and the reason and changes nothing:
//   400 malformed, 401 no or unknown token, 403 not allowed, 404 unknown,
//   409 conflicting state, 413 body over the limit, 422 a request this
//   cluster could never hold, 429 over the rate limit or a tenant limit,
//   507 while the store cannot write.
// Served by HttpTransport (event-driven, Boost.Beast; its deadlines and caps
// are in http_transport.h); request bodies deeper than 64 levels or with more
// than 50,000 values are refused before any parser sees them.
#pragma once

#include <memory>
#include <string>

#include "server/controller.h"

namespace rota::server {

class Replica;

class ServiceManager;

struct HttpOptions {
  std::string host = "127.0.0.1";
  int port = 7070;  // 0 = any free port
  std::string tls_cert;  // both set = HTTPS
  std::string tls_key;
  size_t max_body_bytes = 1 << 20;
  double rate_per_second = 200;  // per token (or client address), burst of twice that
  std::string logs_dir;          // task logs: the local agent writes here, remote agents ship theirs ("" = none)
  double queue_sample_seconds = 10;  // queue usage history for the dashboard (GET /v1/queues/history)
  // A replica of a replicated control plane (server/replica.h; null: a
  // single server). While it stands by, reads are answered from its
  // following state and every write or agent request gets 503 naming the
  // leader; /healthz, /metrics and GET /v1/replicas show its role, the
  // leader's epoch and the standbys.
  const Replica* replica = nullptr;
  // Services (server/services.h; null: none are watched): GET /v1/services,
  // /v1/services/NAME/endpoints and their series on /metrics. `router_url`
  // is where the router listens ("" = no router).
  const ServiceManager* services = nullptr;
  std::string router_url;
};

class HttpServer {
 public:
  virtual ~HttpServer() = default;
  virtual int port() const = 0;
  virtual void Stop() = 0;
};

// Binds and starts serving on a background thread.
StatusOr<std::unique_ptr<HttpServer>> StartHttpServer(Controller* controller, const HttpOptions& options);

// The HTTP status for a Status code (OutOfRange, the engine's
// "unresolvable", is 422).
int HttpStatusFor(StatusCode code);

}  // namespace rota::server
