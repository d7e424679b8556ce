// Replica: one rota server of several on one PostgreSQL database. At most
// one leads: it holds the lease (PgLease, timed on the database's clock) and
// writes with its epoch as the fence (PgStore::SetFence). The others are
// standbys:
//   - they answer every request but /healthz with 503 and the leader's
//     address (header Rota-Leader), so clients with several server addresses
//     move to the leader;
//   - they try for the lease every lease / 6;
//   - they keep a warm state: one replay of the store, then the journal
//     applied as the leader appends it (woken by its NOTIFY), so a takeover
//     replays only the tail since the last notification.
//
// Replica::Run is a server's whole life: standby until it takes the lease,
// leader (the caller's `lead` builds the controller and the API on the
// fenced store) until it loses the lease, its store is fenced, or it is
// told to stop; then standby again. A leader renews every lease / 3 and
// steps down by itself once a renewal has not succeeded within 5/6 of a
// lease of being sent (its own monotonic clock, which runs on while the
// process is stopped: a paused leader wakes up knowing it may no longer
// lead, and its writes are fenced in any case).
//
// A server whose address is the lease's holder, and which could bind its
// port, takes the lease back at once (its old process cannot be serving
// there) instead of waiting for it to run out.
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "server/http_transport.h"
#include "server/recovery.h"
#include "store/pg_store.h"

namespace rota::server {

struct ReplicaOptions {
  std::string conninfo;   // libpq connection string or URI
  std::string advertise;  // this server's URL, as clients reach it; recorded in the lease
  Duration lease = 3 * kMicrosPerSecond;
  HttpTransportOptions http;  // where the standby listens (the leader's API takes the same port)
  std::vector<std::string> topology = {"nvlink", "node", "rack", "spine"};  // the cluster's levels (a warm state's)
};

// What a term of leadership runs; returned by Replica's `lead` callback.
class Term {
 public:
  virtual ~Term() = default;
  virtual void Stop() = 0;  // stops serving and writing
};

class Replica {
 public:
  // `lead(store, epoch, warm)` starts a term on `store` (fenced with
  // `epoch`) from the standby's warm state (null: replay the store), or
  // fails (the replica releases the lease and stays standby for a lease).
  using LeadFn = std::function<StatusOr<std::unique_ptr<Term>>(std::unique_ptr<PgStore> store, int64_t epoch,
                                                                std::unique_ptr<Recovered> warm)>;

  explicit Replica(ReplicaOptions options) : options_(std::move(options)) {}

  // Runs until Shutdown() (a database that is down is waited for); an
  // error only if the standby cannot listen.
  Status Run(const LeadFn& lead);
  // From any thread (a signal handler's thread).
  void Shutdown();

  // The leader's URL as last seen ("" if none), this replica's role and epoch.
  std::string leader() const;
  bool leading() const { return epoch_ > 0; }
  int64_t epoch() const { return epoch_; }
  const std::string& advertise() const { return options_.advertise; }
  // Every replica heard from in the last minute, as of the last lease check.
  std::vector<ReplicaRow> replicas() const;

 private:
  // Follows the journal until it takes the lease: the epoch (0 after
  // Shutdown), with the store and the warm state (null if it has none).
  int64_t WaitForLease(std::unique_ptr<PgStore>* store, std::unique_ptr<Recovered>* warm);
  // Applies the journal's new events to `warm` (replaying from the snapshot
  // when it has none); on any failure drops it, so the next try replays.
  void CatchUp(PgStore& store, std::unique_ptr<Recovered>* warm);
  // Records this replica's role and position; reads the leader and the replicas.
  void Refresh(const std::string& role, uint64_t seq);
  // Renews until the lease is lost, the store is fenced or Shutdown.
  void HoldLease(int64_t epoch, const PgStore& store);
  bool SleepFor(Duration d);  // false once Shutdown was called
  bool stopping() const;

  ReplicaOptions options_;
  std::unique_ptr<PgLease> lease_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;
  std::string leader_;
  std::vector<ReplicaRow> replicas_;
  std::atomic<int64_t> epoch_ = 0;  // > 0 while leading
};

// The HTTP front end of a standby: /healthz says "standby" (200: the process
// is alive); everything else is 503 naming the leader.
StatusOr<std::unique_ptr<HttpTransport>> StartStandbyServer(const HttpTransportOptions& options, const Replica* replica);

}  // namespace rota::server
