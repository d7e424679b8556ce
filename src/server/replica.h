// Replica: one rota server of several on one PostgreSQL database. At most
// one leads: it holds the lease (PgLease, timed on the database's clock) and
// writes with its epoch as the fence (PgStore::SetFence). The others are
// standbys, each with a Term: a controller following the journal (one replay,
// then the events the leader appends, woken by its NOTIFY) and the API in
// standby mode:
//   - reads are answered from that state (header Rota-Role: standby);
//   - writes and agents get 503 with the leader's address (Rota-Leader), so
//     clients with several server addresses move to the leader;
//   - every lease / 6 the standby tries for the lease.
// When it takes the lease, it applies the tail it has not seen, fences its
// store with the new epoch and starts the same controller: the API goes on
// from the same port, now leading.
//
// Replica::Run is a server's whole life: standby until it takes the lease,
// leader until it loses the lease, its store goes stale (fenced, or a commit
// whose outcome is unknown) or it is told to stop; then a new Term, standby
// again. A leader renews every lease / 3 and steps down by itself once a
// renewal has not succeeded within 5/6 of a lease of being sent (its own
// monotonic clock, which runs on while the process is stopped: a paused
// leader wakes up knowing it may no longer lead, and its writes are fenced in
// any case).
//
// A server whose address is the lease's holder, and which could bind its
// port, takes the lease back at once (its old process cannot be serving
// there) instead of waiting for it to run out.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "store/pg_store.h"

namespace rota::server {

struct ReplicaOptions {
  std::string conninfo;   // libpq connection string or URI
  std::string advertise;  // this server's URL, as clients reach it; recorded in the lease
  Duration lease = 3 * kMicrosPerSecond;
};

// A controller and its API on one store: following the journal as a
// standby, then, once, leading. Made by the caller (Replica's MakeTerm).
class Term {
 public:
  virtual ~Term() = default;
  // Standby: applies what the leader appended since; an error other than
  // Unavailable means the state cannot go on (the replica makes a new Term).
  virtual Status CatchUp() = 0;
  virtual Status ReloadTokens() = 0;
  // The takeover: starts the controller (the store is fenced already).
  virtual Status Lead(int64_t epoch) = 0;
  // Stops serving and writing.
  virtual void Stop() = 0;
};

class Replica {
 public:
  // Builds a Term on `store`: replays it, publishes the state and starts the
  // API in standby mode (it asks this replica for its role and the leader).
  using MakeTerm = std::function<StatusOr<std::unique_ptr<Term>>(std::unique_ptr<PgStore> store)>;

  explicit Replica(ReplicaOptions options) : options_(std::move(options)) {}

  // Runs until Shutdown() (a database that is down is waited for).
  Status Run(const MakeTerm& make);
  // From any thread (a signal handler's thread).
  void Shutdown();

  // The leader's URL as last seen ("" if none), this replica's role and epoch.
  std::string leader() const;
  // True while this replica leads and its lease, by its own clock, has not
  // run out: past that the API refuses writes and agents at once, even while
  // a renewal is still on its way.
  bool leading() const;
  int64_t epoch() const { return epoch_; }
  const std::string& advertise() const { return options_.advertise; }
  // Every replica heard from in the last minute, as of the last lease check.
  std::vector<ReplicaRow> replicas() const;

 private:
  // Follows the journal until it takes the lease: the epoch; 0 after
  // Shutdown; -1 if the term's state cannot go on.
  int64_t WaitForLease(PgStore& store, Term& term);
  // Records this replica's role and position; reads the leader and the replicas.
  void Refresh(const std::string& role, uint64_t seq);
  // Renews until the lease is lost, the store goes stale or Shutdown.
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
  std::atomic<int64_t> valid_until_ = 0;  // steady clock (ns): the lease's end by this replica's reckoning
  std::chrono::steady_clock::time_point acquired_sent_{};  // when the TryAcquire that won was sent
  bool first_try_ = true;  // the process's first TryAcquire may reclaim an earlier process's lease
};

}  // namespace rota::server
