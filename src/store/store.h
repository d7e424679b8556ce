// Store: durable state. An append-only journal of events plus snapshots (a
// compacted event list covering the journal up to a sequence number), and
// the API tokens. Append returns only once the events are durable; a crash
// after it returns loses nothing.
//
// Implementations: SqliteStore (the default, embedded); MemoryStore (tests).
// Both pass the same contract suite (store_contract_test.cc).
//
// Thread-safety: one owner (the controller's actor thread), except that
// WriteSnapshot may run on another thread concurrently with the other calls
// (the controller compacts and writes snapshots off its actor).
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "core/event.h"
#include "core/gpu_history.h"
#include "core/usage_record.h"
#include "store/records.h"

namespace rota {

struct TokenRecord {
  std::string hash;  // SHA-256 of the token, hex; the token itself is never stored
  std::string user;
  std::string role;  // admin | user | agent
  std::string node;  // agents: the node it may report for
  TimePoint created_at = 0;
  TimePoint expires_at = 0;  // 0 = never
  bool revoked = false;
};

class Store;
// Gives `to` the values `names` of `from` that `from` keeps (Store::Kept; it
// is only read); FailedPrecondition, with nothing written, if `to` keeps
// another value under one of them.
Status CopyKept(Store& from, Store& to, const std::vector<std::string>& names);

class Store {
 public:
  virtual ~Store() = default;

  // Appends `events` in order in one durable transaction; returns the
  // sequence number of the last one (the first event ever is 1).
  virtual StatusOr<uint64_t> Append(const std::vector<Event>& events) = 0;

  // Calls `fn` with the latest snapshot's events, then every journal event
  // after it, in order. Stops at the first error and returns it.
  virtual Status Replay(const std::function<Status(const Event&)>& fn) = 0;

  // Records the events `compacted` produces as the state after journal event
  // `seq`, atomically, and drops the journal up to it (PgStore in the same
  // transaction; SqliteStore with the appends after it, a batch each: replay
  // starts after the snapshot either way). The events are written
  // as they are produced (a large state is never in memory twice); an error
  // from the source writes nothing and is returned.
  virtual Status WriteSnapshot(uint64_t seq, const EventSource& compacted) = 0;

  // Sequence number of the last appended event (0 if none).
  virtual uint64_t last_seq() const = 0;

  // A standby's view of a journal another process appends to: calls `fn`
  // with every event after `seq`, in order, and returns the last one's
  // sequence number (`seq` if none). DataLoss if those events were compacted
  // into a snapshot. Only stores that several servers share have it.
  virtual StatusOr<uint64_t> Follow(uint64_t /*seq*/, const std::function<Status(const Event&)>& /*fn*/) {
    return UnimplementedError("this store is not shared: there is no journal to follow");
  }

  virtual Status PutToken(const TokenRecord& token) = 0;
  virtual StatusOr<std::vector<TokenRecord>> Tokens() = 0;

  // A value (0..INT64_MAX) kept for good under `name`: the one kept, or
  // `value` where none is yet (the first caller's wins, among the replicas
  // of a shared store too). The keys of gangs' rendezvous ports and when
  // they were made (Controller's RendezvousKey).
  virtual StatusOr<uint64_t> Keep(const std::string& name, uint64_t value) = 0;
  // The value kept under `name`, if any (nothing is written).
  virtual StatusOr<std::optional<uint64_t>> Kept(const std::string& name) = 0;

  // Accounting (core/usage_record.h): one record per ended attempt, kept
  // apart from the journal (never compacted into a snapshot), dropped only
  // by DropUsage. A record already stored (the same job and attempt) is left
  // as it is. Safe beside the owner's other calls (reports read from the
  // API's threads).
  virtual Status PutUsage(const std::vector<UsageRecord>& records) = 0;
  // The records of attempts that ended in [since, until), by end time.
  virtual StatusOr<std::vector<UsageRecord>> Usage(TimePoint since, TimePoint until) = 0;
  // The records of one job's attempts, by attempt (a job the state forgot
  // still has them).
  virtual StatusOr<std::vector<UsageRecord>> UsageOfJob(JobId job) = 0;
  // Drops the records of attempts that ended before `before`; how many.
  virtual StatusOr<int64_t> DropUsage(TimePoint before) = 0;

  // Per-GPU history (core/gpu_history.h), beside the usage records: a block
  // replaces the one stored for the same node, GPU, step and start (blocks
  // are written again as they fill).
  virtual Status PutGpuHistory(const std::vector<GpuHistoryBlock>& blocks) = 0;
  // The blocks of `step_s` that start in [since, until), of `node` ("" =
  // every node), by node, GPU and start.
  virtual StatusOr<std::vector<GpuHistoryBlock>> GpuHistory(const std::string& node, int32_t step_s, TimePoint since,
                                                            TimePoint until) = 0;
  // Drops the blocks of `step_s` that start before `before`; how many.
  virtual StatusOr<int64_t> DropGpuHistory(int32_t step_s, TimePoint before) = 0;
};

}  // namespace rota
