// SqliteStore: the embedded default Store. One SQLite file in WAL mode with
// synchronous=FULL, so a committed Append survives kill -9 and power loss.
// Events are stored as one JSON document each (api/json_codec.h), each with
// a CRC-32 of its sequence number and body; a meta row records the last
// committed sequence number in the same transaction.
//
// Nothing is lost silently: Open refuses (DataLoss, naming the frame or the
// event) a WAL with a corrupt frame followed by committed transactions, a
// database that fails SQLite's quick_check, or a journal shorter than what
// was committed; Replay refuses a gap in the sequence or a record that fails
// its checksum. A write the disk refuses (full, read-only, I/O error) is
// InsufficientStorage and changes nothing.
//
// Snapshots go to a second database beside it (PATH.snap) through their own
// connection: WriteSnapshot may run on another thread while the owner
// appends, and never holds the journal's write lock for long.
//
// Example:
//   ROTA_ASSIGN_OR_RETURN(auto store, SqliteStore::Open(data_dir + "/rota.db"));
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <string>

#include "store/store.h"

struct sqlite3;
struct sqlite3_stmt;

namespace rota {

class SqliteStore final : public Store {
 public:
  static StatusOr<std::unique_ptr<SqliteStore>> Open(const std::string& path);
  ~SqliteStore() override;

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

 private:
  SqliteStore(sqlite3* db, std::string path) : db_(db), path_(std::move(path)) {}
  Status Exec(const char* sql);
  Status Error(const std::string& what) const { return Error(what, db_); }
  // `what` failed on connection `db`: InsufficientStorage where the disk is
  // full, read-only, failing or cannot open a file, else Unavailable.
  Status Error(const std::string& what, sqlite3* db) const;
  StatusOr<int64_t> Meta(const char* key);  // -1 if unset; an error if it cannot be read
  Status SetMeta(const char* key, int64_t value);
  // DataLoss unless column `crc_col` of `row` is the record's checksum
  // (records from before checksums, below checked_from_, pass).
  Status CheckRecord(const char* what, uint64_t seq, std::string_view body, sqlite3_stmt* row, int crc_col);
  // Usage records from a prepared query's first column (usage_read_mu_ held).
  StatusOr<std::vector<UsageRecord>> ReadUsageRows(sqlite3_stmt* st);

  // Calls `fn` with the events of the `parts` parts of the snapshot at `seq`
  // in `source`, checking each part's checksum and that none is missing.
  Status ReplayParts(sqlite3* source, uint64_t seq, int64_t parts, const std::function<Status(const Event&)>& fn);

  // Opens a WAL connection to `path` (quick-checked): the journal, snapshots, accounting.
  static Status OpenSide(const std::string& path, sqlite3** out);

  sqlite3* db_;
  sqlite3* snap_db_ = nullptr;  // PATH.snap: snapshots, written off the appender's thread
  sqlite3* usage_db_ = nullptr;  // PATH.usage: accounting records (usage_mu_)
  std::mutex usage_mu_;
  // A second connection to PATH.usage for the reports' reads: a long read
  // (a year's report) never holds up the records' writes, which the
  // controller's actor makes as jobs end (WAL: a reader and the writer
  // proceed together).
  sqlite3* usage_read_db_ = nullptr;
  std::mutex usage_read_mu_;
  std::mutex snapshot_mu_;
  std::string path_;
  uint64_t last_seq_ = 0;
  int64_t checked_from_ = 1;
  // The journal is trimmed behind the latest snapshot (trim_to_, set by
  // WriteSnapshot and Open) by the appends, at least kTrimBatch events each
  // (Append; trimmed_to_, what has been committed, is the appender's own).
  static constexpr int64_t kTrimBatch = 2'000;
  std::atomic<uint64_t> trim_to_{0};
  uint64_t trimmed_to_ = 0;
  // Why no append can be made any more ("" while they can): a COMMIT whose
  // sync failed may be in the journal or not (its frames are in the WAL,
  // which a restart's recovery may replay), so the state beside it cannot
  // be told; only a restart, replaying what the journal holds, can.
  std::string stale_;
};

// DataLoss if the WAL file at `wal_path` holds a frame that fails SQLite's
// checksum with committed transactions after it (which SQLite would drop
// without a word); OK for a missing, empty or cleanly torn WAL.
Status CheckWalFile(const std::string& wal_path);

}  // namespace rota
