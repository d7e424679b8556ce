// Replica: one rota server of several on one PostgreSQL database. At most
// one leads: it holds the lease (PgLease, timed on the database's clock) and
// writes with its epoch as the fence (PgStore::SetFence). The others are
// standbys: they answer every request but /healthz with 503 and the
// leader's address (header Rota-Leader), so clients with several server
// addresses move to the leader, and they try for the lease every
// lease / 6.
//
// Replica::Run is a server's whole life: standby until it takes the lease,
// leader (the caller's `lead` builds the controller and the API on the
// fenced store) until it loses the lease, its store is fenced, or it is
// told to stop; then standby again. A leader renews every lease / 3 and
// steps down by itself once a renewal has not succeeded within lease - 1/6
// lease of being sent (its own monotonic clock: a paused server wakes up
// knowing it may no longer lead, before it serves anything stale).
//
// A restarted server whose address is the lease's holder, and which could
// bind its port, takes the lease back at once (its old process cannot be
// serving there) instead of waiting for it to run out.
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>

#include "server/http_transport.h"
#include "store/pg_store.h"

namespace rota::server {

struct ReplicaOptions {
  std::string conninfo;   // libpq connection string or URI
  std::string advertise;  // this server's URL, as clients reach it; recorded in the lease
  Duration lease = 3 * kMicrosPerSecond;
  HttpTransportOptions http;  // where the standby listens (the leader's API takes the same port)
};

// What a term of leadership runs; returned by Replica's `lead` callback.
class Term {
 public:
  virtual ~Term() = default;
  virtual void Stop() = 0;  // stops serving and writing
};

class Replica {
 public:
  // `lead(store, epoch)` starts a term on `store` (fenced with `epoch`): it
  // replays the store and serves, or fails (the replica releases the lease
  // and stays standby for a lease's time).
  using LeadFn = std::function<StatusOr<std::unique_ptr<Term>>(std::unique_ptr<PgStore> store, int64_t epoch)>;

  explicit Replica(ReplicaOptions options) : options_(std::move(options)) {}

  // Runs until Shutdown(); an error only if the database cannot be reached
  // at the start.
  Status Run(const LeadFn& lead);
  // From any thread (a signal handler's thread).
  void Shutdown();

  // The leader's URL as last seen ("" if none), this replica's role and epoch.
  std::string leader() const;
  bool leading() const { return epoch_ > 0; }
  int64_t epoch() const { return epoch_; }

 private:
  StatusOr<int64_t> WaitForLease();
  // Renews until the lease is lost, the store is fenced or Shutdown.
  void HoldLease(int64_t epoch, const PgStore& store);
  bool SleepFor(Duration d);  // false once Shutdown was called

  ReplicaOptions options_;
  std::unique_ptr<PgLease> lease_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  std::string leader_;
  std::atomic<int64_t> epoch_ = 0;  // > 0 while leading
};

// The HTTP front end of a standby: /healthz says "standby" (200: the process
// is alive); everything else is 503 naming the leader.
StatusOr<std::unique_ptr<HttpTransport>> StartStandbyServer(const HttpTransportOptions& options, const Replica* replica);

}  // namespace rota::server
