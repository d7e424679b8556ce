// PgStore: a Store in PostgreSQL, through libpq. The same journal, snapshots
// and tokens as SqliteStore, in tables of their own (rota_events,
// rota_snapshots, rota_tokens, rota_meta), each record with the same CRC-32 of
// its sequence number and body. Every connection runs with
// synchronous_commit=on, so an Append returns only once PostgreSQL has made
// the transaction durable (and, where the database has synchronous replicas,
// reached them).
//
// Several rota servers share one database; one of them leads (PgLease
// below). **Fencing:** once SetFence(epoch) is called, every write checks in
// its own transaction that the lease's epoch is still `epoch`, holding the
// lease row FOR KEY SHARE (the epoch is a unique key), so an election (which
// changes the epoch) waits for any write in flight and every later write of
// the old leader is refused (FailedPrecondition, and fenced() turns true),
// while the leader's renewals (the expiry only) never wait on its writes. A
// paused or partitioned ex-leader can never write.
//
// After each append commits, a NOTIFY on channel rota_journal wakes the
// standbys (Follow).
//
// A connection that breaks is opened again on the next call. A COMMIT whose
// answer was lost is resolved by asking the database what became of its
// transaction (txid_status; the old backend is ended if it lingers); one
// committed with a warning (its wait for a synchronous replica cancelled) is
// confirmed by a write that waits for the replicas. An outcome nobody can
// learn makes the store stale (fenced()): its owner must replay.
//
// Example:
//   ROTA_ASSIGN_OR_RETURN(auto store, PgStore::Open("postgresql://rota@db:5432/rota"));
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <string>

#include "base/clock.h"
#include "store/store.h"

typedef struct pg_conn PGconn;

namespace rota {

namespace pg {
class Conn;  // one libpq connection that reopens itself (pg_store.cc)
}

class PgStore final : public Store {
 public:
  // `conninfo`: a libpq connection string or URI (postgres://...). Creates the
  // tables if they are missing.
  static StatusOr<std::unique_ptr<PgStore>> Open(const std::string& conninfo);
  ~PgStore() override;

  StatusOr<uint64_t> Append(const std::vector<Event>& events) override;
  Status Replay(const std::function<Status(const Event&)>& fn) override;
  Status WriteSnapshot(uint64_t seq, const EventSource& compacted) override;
  uint64_t last_seq() const override { return last_seq_; }
  Status PutToken(const TokenRecord& token) override;
  StatusOr<std::vector<TokenRecord>> Tokens() override;
  StatusOr<uint64_t> Keep(const std::string& name, uint64_t value) override;
  StatusOr<std::optional<uint64_t>> Kept(const std::string& name) override;
  Status PutUsage(const std::vector<UsageRecord>& records) override;
  StatusOr<std::vector<UsageRecord>> Usage(TimePoint since, TimePoint until) override;
  StatusOr<std::vector<UsageRecord>> UsageOfJob(JobId job) override;
  StatusOr<int64_t> DropUsage(TimePoint before) override;
  Status PutGpuHistory(const std::vector<GpuHistoryBlock>& blocks) override;
  StatusOr<std::vector<GpuHistoryBlock>> GpuHistory(const std::string& node, int32_t step_s, TimePoint since,
                                                    TimePoint until) override;
  StatusOr<int64_t> DropGpuHistory(int32_t step_s, TimePoint before) override;

  // From now on every write requires the lease's epoch to be `epoch`.
  void SetFence(int64_t epoch) { fence_epoch_ = epoch; }
  // True once this store's view of the journal may differ from the
  // database's, so that its owner must stop writing and replay: a write was
  // refused because another server took the lease, a COMMIT's outcome could
  // not be learned (its connection broke and the database could not be
  // asked), or the journal grew behind this store's back. stale_reason() says which.
  bool fenced() const { return fenced_; }
  std::string stale_reason() const;

  // Standbys: calls `fn` with every journal event after `seq`, in order, and
  // returns the sequence number of the last (or `seq` if none); last_seq()
  // follows it. DataLoss if
  // the events after `seq` were compacted into a newer snapshot (the caller
  // replays from scratch).
  StatusOr<uint64_t> Follow(uint64_t seq, const std::function<Status(const Event&)>& fn) override;
  // Blocks up to `timeout` for an append's notification; false on timeout.
  bool WaitForAppend(Duration timeout);

 private:
  explicit PgStore(std::string conninfo);
  Status CheckFence(pg::Conn& c);

  std::string conninfo_;
  std::unique_ptr<pg::Conn> db_;      // appends, replay, tokens (mu_)
  std::unique_ptr<pg::Conn> snap_db_;  // snapshots, off the appender's thread (snapshot_mu_)
  std::unique_ptr<pg::Conn> listen_db_;  // LISTEN rota_journal (listen_mu_)
  std::unique_ptr<pg::Conn> usage_db_;   // accounting records (usage_mu_): reports never wait on appends
  // The reports' reads (usage_read_mu_): a long read never holds up the
  // records' writes, which the controller's actor makes as jobs end.
  std::unique_ptr<pg::Conn> usage_read_db_;
  std::mutex mu_, snapshot_mu_, listen_mu_, usage_mu_, usage_read_mu_;
  std::atomic<uint64_t> last_seq_ = 0;
  std::atomic<int64_t> fence_epoch_ = 0;  // 0 = no fencing (a single server, tests)
  std::atomic<bool> fenced_ = false;
  mutable std::mutex reason_mu_;
  std::string stale_reason_;
  void MarkStale(std::string reason);
};

// InvalidArgument if `conninfo` does not parse, or carries a password (on a
// command line every user of the machine reads it: libpq takes it from
// PGPASSWORD or ~/.pgpass instead).
Status CheckConninfo(const std::string& conninfo);

// The leader's lease: one row (rota_leader) timed on the database's clock,
// with an epoch that grows at every election.
struct LeaderInfo {
  int64_t epoch = 0;       // 0 = nobody has ever led
  std::string holder;      // the leader's advertised URL
  Duration expires_in = 0;  // by the database's clock; <= 0 = expired
};

// One replica as it last reported itself (rota_replicas).
struct ReplicaRow {
  std::string url;
  std::string role;   // leader | standby
  uint64_t seq = 0;   // the journal event its state is at
  Duration age = 0;   // since it reported, by the database's clock
};

class PgLease {
 public:
  // `lease`: the lease's length, which bounds this session's waits (locks a
  // quarter of it, statements half).
  static StatusOr<std::unique_ptr<PgLease>> Open(const std::string& conninfo, std::string holder,
                                                 Duration lease = 3 * kMicrosPerSecond);
  ~PgLease();

  // Takes the lease for `lease` if it has expired, or is already this
  // holder's: this process's own (it stepped down and comes back), or, on
  // `at_startup`, an earlier process's at the same address (the caller bound
  // that address's port, so that process cannot be serving). The new epoch,
  // or 0 if another holds it.
  StatusOr<int64_t> TryAcquire(Duration lease, bool at_startup);
  // Extends the lease; false if `epoch` is no longer the leader's.
  StatusOr<bool> Renew(int64_t epoch, Duration lease);
  // Ends the lease at once (a clean shutdown), so a standby need not wait.
  Status Release(int64_t epoch);
  StatusOr<LeaderInfo> Current();

  // Records this replica's role and position (every few seconds), and the
  // replicas heard from in the last minute.
  Status Report(const std::string& role, uint64_t seq);
  StatusOr<std::vector<ReplicaRow>> Replicas();

 private:
  PgLease(std::unique_ptr<pg::Conn> db, std::string holder, std::string instance);
  std::unique_ptr<pg::Conn> db_;
  std::string holder_;
  std::string instance_;  // this process's (random): which holder at this address it is
};

}  // namespace rota
