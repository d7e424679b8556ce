#include "store/sqlite_store.h"

#include <sqlite3.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <mutex>
#include <vector>

#include "api/json_codec.h"
#include "api/usage_codec.h"
#include "store/records.h"

namespace rota {
namespace {

// Finalizes a prepared statement on scope exit.
struct Stmt {
  sqlite3_stmt* s = nullptr;
  ~Stmt() { sqlite3_finalize(s); }
};


uint32_t Get32(const unsigned char* p, bool big_endian) {
  return big_endian ? (uint32_t{p[0]} << 24 | uint32_t{p[1]} << 16 | uint32_t{p[2]} << 8 | p[3])
                    : (uint32_t{p[3]} << 24 | uint32_t{p[2]} << 16 | uint32_t{p[1]} << 8 | p[0]);
}

// SQLite's WAL checksum over `n` bytes (a multiple of 8), continuing s[0], s[1].
void WalChecksum(const unsigned char* p, size_t n, bool big_endian, uint32_t s[2]) {
  for (size_t i = 0; i + 8 <= n; i += 8) {
    s[0] += Get32(p + i, big_endian) + s[1];
    s[1] += Get32(p + i + 4, big_endian) + s[0];
  }
}

}  // namespace

Status CheckWalFile(const std::string& wal_path) {
  std::ifstream in(wal_path, std::ios::binary);
  if (!in) return Status::Ok();  // no WAL: nothing to lose
  std::vector<unsigned char> data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (data.size() < 32) return Status::Ok();
  auto be32 = [&](size_t at) { return Get32(&data[at], true); };
  const uint32_t magic = be32(0);
  if (magic != 0x377f0682 && magic != 0x377f0683) return Status::Ok();  // not a WAL SQLite would read either
  const bool big_endian = (magic & 1) != 0;
  const uint32_t page_size = be32(8);
  if (page_size < 512 || page_size > 65536 || (page_size & (page_size - 1)) != 0) return Status::Ok();
  uint32_t sum[2] = {0, 0};
  WalChecksum(data.data(), 24, big_endian, sum);
  if (sum[0] != be32(24) || sum[1] != be32(28)) return Status::Ok();  // a header SQLite ignores: an empty WAL
  const uint32_t salt1 = be32(16), salt2 = be32(20);
  const size_t frame_size = 24 + page_size;
  const size_t frames = (data.size() - 32) / frame_size;
  for (size_t f = 0; f < frames; ++f) {
    const size_t at = 32 + f * frame_size;
    if (be32(at + 8) != salt1 || be32(at + 12) != salt2) return Status::Ok();  // the end of this WAL's frames
    WalChecksum(&data[at], 8, big_endian, sum);
    WalChecksum(&data[at + 24], page_size, big_endian, sum);
    if (sum[0] == be32(at + 16) && sum[1] == be32(at + 20)) continue;
    // A bad frame. SQLite would stop reading here and silently drop every
    // transaction after it. The transaction it belongs to may be torn by a
    // power loss (its frames written, the fsync never done, so never
    // acknowledged): that one ends at the first commit frame from here. Only
    // commits after it were acknowledged and would be lost.
    size_t committed_after = 0;
    bool own_commit_seen = false;
    for (size_t g = f; g < frames; ++g) {
      const size_t later = 32 + g * frame_size;
      if (be32(later + 8) != salt1 || be32(later + 12) != salt2 || be32(later + 4) == 0) continue;
      if (!own_commit_seen) {
        own_commit_seen = true;
        continue;
      }
      ++committed_after;
    }
    if (committed_after == 0) return Status::Ok();
    return DataLossError(wal_path + ": WAL frame " + std::to_string(f + 1) + " of " + std::to_string(frames) +
                         " fails its checksum, and " + std::to_string(committed_after) +
                         " committed transaction(s) follow it: opening the store would silently drop them. "
                         "Restore the data directory from a backup (or move the WAL aside to accept the loss)");
  }
  return Status::Ok();
}

Status SqliteStore::Error(const std::string& what, sqlite3* db) const {
  const int code = sqlite3_errcode(db) & 0xff;
  std::string message = path_ + ": " + what + ": " + sqlite3_errmsg(db);
  // The disk is full, read-only or failing: the write was refused, nothing changed.
  if (code == SQLITE_FULL || code == SQLITE_READONLY || code == SQLITE_IOERR || code == SQLITE_CANTOPEN) {
    return InsufficientStorageError(std::move(message));
  }
  return UnavailableError(std::move(message));
}

Status SqliteStore::Exec(const char* sql) {
  char* err = nullptr;
  if (sqlite3_exec(db_, sql, nullptr, nullptr, &err) != SQLITE_OK) {
    std::string msg = err ? err : "unknown error";
    sqlite3_free(err);
    return Error(msg);
  }
  return Status::Ok();
}

StatusOr<int64_t> SqliteStore::Meta(const char* key) {
  Stmt st;
  if (sqlite3_prepare_v2(db_, "SELECT value FROM meta WHERE key = ?", -1, &st.s, nullptr) != SQLITE_OK) {
    return Error("read meta");
  }
  sqlite3_bind_text(st.s, 1, key, -1, SQLITE_STATIC);
  const int rc = sqlite3_step(st.s);
  if (rc == SQLITE_ROW) return static_cast<int64_t>(sqlite3_column_int64(st.s, 0));
  if (rc == SQLITE_DONE) return int64_t{-1};
  return Error("read meta");  // (busy, I/O: not "unset", which would be taken for a fresh store's)
}

Status SqliteStore::SetMeta(const char* key, int64_t value) {
  Stmt st;
  if (sqlite3_prepare_v2(db_, "INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", -1, &st.s, nullptr) !=
      SQLITE_OK) {
    return Error("prepare meta");
  }
  sqlite3_bind_text(st.s, 1, key, -1, SQLITE_STATIC);
  sqlite3_bind_int64(st.s, 2, value);
  return sqlite3_step(st.s) == SQLITE_DONE ? Status::Ok() : Error("write meta");
}

StatusOr<std::unique_ptr<SqliteStore>> SqliteStore::Open(const std::string& path) {
  // Before SQLite reads the WAL: a corrupt frame in the middle would make it
  // drop every later transaction without a word.
  ROTA_RETURN_IF_ERROR(CheckWalFile(path + "-wal"));
  sqlite3* db = nullptr;
  // WAL, synchronous=FULL, and the pages themselves checked: a damaged
  // b-tree stops the start with the reason.
  if (Status opened = OpenSide(path, &db); !opened.ok()) {
    sqlite3_close(db);
    return opened;
  }
  std::unique_ptr<SqliteStore> store(new SqliteStore(db, path));
  ROTA_RETURN_IF_ERROR(store->Exec(
      "CREATE TABLE IF NOT EXISTS events (seq INTEGER PRIMARY KEY, body TEXT NOT NULL, crc INTEGER);"
      "CREATE TABLE IF NOT EXISTS snapshots (seq INTEGER PRIMARY KEY, body TEXT NOT NULL, crc INTEGER);"
      "CREATE TABLE IF NOT EXISTS tokens (hash TEXT PRIMARY KEY, user TEXT NOT NULL, role TEXT NOT NULL,"
      " node TEXT NOT NULL, created_at INTEGER NOT NULL);"
      "CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value INTEGER NOT NULL);"));
  // Stores from before checksums and token expiry: add the columns (their
  // rows stay unchecked; their tokens never expire).
  const std::pair<const char*, const char*> added[] = {{"events", "crc INTEGER"},
                                                       {"snapshots", "crc INTEGER"},
                                                       {"tokens", "expires_at INTEGER NOT NULL DEFAULT 0"},
                                                       {"tokens", "revoked INTEGER NOT NULL DEFAULT 0"}};
  for (const auto& [table, column] : added) {
    Stmt st;
    const std::string name = std::string(column).substr(0, std::string(column).find(' '));
    const std::string sql = "SELECT " + name + " FROM " + table + " LIMIT 0";
    if (sqlite3_prepare_v2(db, sql.c_str(), -1, &st.s, nullptr) != SQLITE_OK) {
      ROTA_RETURN_IF_ERROR(store->Exec((std::string("ALTER TABLE ") + table + " ADD COLUMN " + column + ";").c_str()));
    }
  }
  // Snapshots live in a database of their own (PATH.snap), written off the
  // appender's thread through their own connection, so that a snapshot of a
  // large state never holds the journal's write lock; the appender trims
  // the journal behind them, a batch inside each of its transactions (Append).
  ROTA_RETURN_IF_ERROR(CheckWalFile(path + ".snap-wal"));
  ROTA_RETURN_IF_ERROR(OpenSide(path + ".snap", &store->snap_db_));
  {
    char* err = nullptr;
    if (sqlite3_exec(store->snap_db_,
                     "CREATE TABLE IF NOT EXISTS snapshots (seq INTEGER PRIMARY KEY, body TEXT NOT NULL, crc INTEGER);"
                     "CREATE TABLE IF NOT EXISTS snapshot_parts (seq INTEGER NOT NULL, part INTEGER NOT NULL,"
                     " body TEXT NOT NULL, crc INTEGER NOT NULL, PRIMARY KEY (seq, part));",
                     nullptr, nullptr, &err) != SQLITE_OK) {
      std::string msg = err ? err : "unknown error";
      sqlite3_free(err);
      return UnavailableError(path + ".snap: " + msg);
    }
  }
  {
    // The journal behind the latest snapshot is the appends' to trim (a
    // crash may have come before they did).
    Stmt latest;
    if (sqlite3_prepare_v2(store->snap_db_, "SELECT MAX(seq) FROM snapshots", -1, &latest.s, nullptr) == SQLITE_OK &&
        sqlite3_step(latest.s) == SQLITE_ROW && sqlite3_column_type(latest.s, 0) != SQLITE_NULL) {
      store->trim_to_ = static_cast<uint64_t>(sqlite3_column_int64(latest.s, 0));
    }
  }
  // Accounting records in a database of their own (PATH.usage): a week's
  // report reads there without holding up the journal's appends.
  ROTA_RETURN_IF_ERROR(CheckWalFile(path + ".usage-wal"));
  ROTA_RETURN_IF_ERROR(OpenSide(path + ".usage", &store->usage_db_));
  {
    char* err = nullptr;
    if (sqlite3_exec(store->usage_db_,
                     "CREATE TABLE IF NOT EXISTS usage (job INTEGER NOT NULL, attempt INTEGER NOT NULL,"
                     " ended_at INTEGER NOT NULL, body TEXT NOT NULL, PRIMARY KEY (job, attempt));"
                     "CREATE INDEX IF NOT EXISTS usage_ended ON usage (ended_at);"
                     "CREATE TABLE IF NOT EXISTS gpu_history (node TEXT NOT NULL, gpu INTEGER NOT NULL,"
                     " step INTEGER NOT NULL, start INTEGER NOT NULL, points BLOB NOT NULL,"
                     " PRIMARY KEY (node, gpu, step, start));"
                     "CREATE INDEX IF NOT EXISTS gpu_history_start ON gpu_history (step, start);",
                     nullptr, nullptr, &err) != SQLITE_OK) {
      std::string msg = err ? err : "unknown error";
      sqlite3_free(err);
      return UnavailableError(path + ".usage: " + msg);
    }
  }
  // (Checked and in WAL mode already, by the writer's connection.)
  if (sqlite3_open_v2((path + ".usage").c_str(), &store->usage_read_db_, SQLITE_OPEN_READWRITE | SQLITE_OPEN_FULLMUTEX,
                      nullptr) != SQLITE_OK) {
    return UnavailableError(path + ".usage: cannot open: " +
                            (store->usage_read_db_ ? sqlite3_errmsg(store->usage_read_db_) : "out of memory"));
  }
  sqlite3_busy_timeout(store->usage_read_db_, 5000);
  Stmt st;
  if (sqlite3_prepare_v2(db, "SELECT MAX(seq) FROM (SELECT seq FROM events UNION ALL SELECT seq FROM snapshots)", -1,
                         &st.s, nullptr) != SQLITE_OK) {
    return store->Error("read sequence");
  }
  if (sqlite3_step(st.s) == SQLITE_ROW) store->last_seq_ = static_cast<uint64_t>(sqlite3_column_int64(st.s, 0));
  {
    Stmt snap;
    if (sqlite3_prepare_v2(store->snap_db_, "SELECT MAX(seq) FROM snapshots", -1, &snap.s, nullptr) == SQLITE_OK &&
        sqlite3_step(snap.s) == SQLITE_ROW) {
      store->last_seq_ = std::max(store->last_seq_, static_cast<uint64_t>(sqlite3_column_int64(snap.s, 0)));
    }
  }
  ROTA_ASSIGN_OR_RETURN(int64_t committed, store->Meta("last_seq"));
  ROTA_ASSIGN_OR_RETURN(store->checked_from_, store->Meta("checked_from"));
  if (store->checked_from_ < 0) {
    // The first seq written with a checksum and a committed mark.
    store->checked_from_ = static_cast<int64_t>(store->last_seq_) + 1;
    ROTA_RETURN_IF_ERROR(store->SetMeta("checked_from", store->checked_from_));
    committed = static_cast<int64_t>(store->last_seq_);
    ROTA_RETURN_IF_ERROR(store->SetMeta("last_seq", committed));
  }
  if (committed > static_cast<int64_t>(store->last_seq_)) {
    return DataLossError(path + ": the journal ends at event " + std::to_string(store->last_seq_) +
                         " but events through " + std::to_string(committed) +
                         " were committed: event " + std::to_string(store->last_seq_ + 1) + " is missing");
  }
  return store;
}

SqliteStore::~SqliteStore() {
  sqlite3_close(usage_read_db_);
  sqlite3_close(usage_db_);
  sqlite3_close(snap_db_);
  sqlite3_close(db_);
}

Status SqliteStore::OpenSide(const std::string& path, sqlite3** out) {
  sqlite3* db = nullptr;
  if (sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX, nullptr) !=
      SQLITE_OK) {
    std::string msg = db ? sqlite3_errmsg(db) : "out of memory";
    sqlite3_close(db);
    return UnavailableError(path + ": cannot open: " + msg);
  }
  *out = db;  // the caller closes it, also on an error below
  sqlite3_busy_timeout(db, 5000);
  char* err = nullptr;
  if (sqlite3_exec(db, "PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL;", nullptr, nullptr, &err) != SQLITE_OK) {
    std::string msg = err ? err : "unknown error";
    sqlite3_free(err);
    return UnavailableError(path + ": " + msg);
  }
  Stmt st;
  if (sqlite3_prepare_v2(db, "PRAGMA quick_check", -1, &st.s, nullptr) == SQLITE_OK) {
    while (sqlite3_step(st.s) == SQLITE_ROW) {
      const std::string line = reinterpret_cast<const char*>(sqlite3_column_text(st.s, 0));
      if (line != "ok") return DataLossError(path + ": integrity check failed: " + line);
    }
  }
  return Status::Ok();
}

StatusOr<uint64_t> SqliteStore::Append(const std::vector<Event>& events) {
  if (events.empty()) return last_seq_;
  if (!stale_.empty()) {
    return UnavailableError(path_ + ": no more writes since " + stale_ +
                            ": restart the server, which goes on from what the journal holds");
  }
  ROTA_RETURN_IF_ERROR(Exec("BEGIN IMMEDIATE;"));
  auto fail = [&](const std::string& what) {
    Status s = Error(what);
    Exec("ROLLBACK;").IgnoreError();
    return s;
  };
  // The journal behind the last snapshot goes a batch at a time inside these
  // appends' own transactions (no fsync of its own), so the snapshot's thread
  // never holds the journal's write lock (it runs at nice 19: trimming on a
  // connection of its own under load, it made every commit wait behind it).
  // At least twice what this append adds, so the trim keeps up with any
  // rate. First, so that a trim that fails (and may roll the transaction
  // back) costs only itself: the append goes on without it.
  uint64_t trimmed = trimmed_to_;
  if (const uint64_t to = trim_to_.load(); to > trimmed_to_) {
    const int64_t batch = std::max<int64_t>(kTrimBatch, 2 * static_cast<int64_t>(events.size()));
    Stmt trim;
    if (sqlite3_prepare_v2(db_, "DELETE FROM events WHERE seq IN (SELECT seq FROM events WHERE seq <= ? LIMIT ?)", -1,
                           &trim.s, nullptr) == SQLITE_OK) {
      sqlite3_bind_int64(trim.s, 1, static_cast<sqlite3_int64>(to));
      sqlite3_bind_int64(trim.s, 2, batch);
      if (sqlite3_step(trim.s) == SQLITE_DONE && sqlite3_changes(db_) < batch) {
        trimmed = to;  // (once this commits)
        Stmt legacy;  // snapshots from before PATH.snap
        if (sqlite3_prepare_v2(db_, "DELETE FROM snapshots WHERE seq < ?", -1, &legacy.s, nullptr) == SQLITE_OK) {
          sqlite3_bind_int64(legacy.s, 1, static_cast<sqlite3_int64>(to));
          sqlite3_step(legacy.s);
        }
      }
    }
    if (sqlite3_get_autocommit(db_)) {  // a failed statement rolled it back: again, without the trim
      trimmed = trimmed_to_;
      ROTA_RETURN_IF_ERROR(Exec("BEGIN IMMEDIATE;"));
    }
  }
  Stmt st;
  if (sqlite3_prepare_v2(db_, "INSERT INTO events (seq, body, crc) VALUES (?, ?, ?)", -1, &st.s, nullptr) != SQLITE_OK) {
    return fail("prepare append");
  }
  uint64_t seq = last_seq_;
  for (const Event& e : events) {
    const std::string body = api::EncodeEvent(e);
    sqlite3_bind_int64(st.s, 1, static_cast<sqlite3_int64>(++seq));
    sqlite3_bind_text(st.s, 2, body.data(), static_cast<int>(body.size()), SQLITE_TRANSIENT);
    sqlite3_bind_int64(st.s, 3, RecordCrc(seq, body));
    if (sqlite3_step(st.s) != SQLITE_DONE) return fail("append");
    sqlite3_reset(st.s);
  }
  if (Status s = SetMeta("last_seq", static_cast<int64_t>(seq)); !s.ok()) {
    Exec("ROLLBACK;").IgnoreError();
    return s;
  }
  if (sqlite3_exec(db_, "COMMIT;", nullptr, nullptr, nullptr) != SQLITE_OK) {
    const int code = sqlite3_extended_errcode(db_);  // (before the rollback's)
    Status s = fail("commit");
    // A COMMIT that reports an error may still have reached the log: after
    // the rollback, what the journal holds says which it was.
    Stmt max;
    if (sqlite3_prepare_v2(db_, "SELECT MAX(seq) FROM events", -1, &max.s, nullptr) == SQLITE_OK &&
        sqlite3_step(max.s) == SQLITE_ROW && sqlite3_column_type(max.s, 0) != SQLITE_NULL &&
        static_cast<uint64_t>(sqlite3_column_int64(max.s, 0)) == seq) {
      last_seq_ = seq;
      trimmed_to_ = trimmed;
      return seq;  // committed after all
    }
    if (code == SQLITE_IOERR_FSYNC || code == SQLITE_IOERR_DIR_FSYNC) {
      // The WAL holds its frames, commit mark and all, but the sync failed
      // (EIO; EDQUOT or ENOSPC found only at the sync on NFS or a thin
      // volume): a restart's recovery may replay them or may not, and this
      // connection cannot tell. Told "not made", a client could find it made.
      const std::string events = "events " + std::to_string(last_seq_ + 1) + ".." + std::to_string(seq);
      stale_ = "the commit of " + events + " could not be synced (" + std::string(s.message()) + ")";
      const std::string unknown = "the outcome of the commit of " + events + " is unknown (" + std::string(s.message()) +
                                  "): no more writes; restart the server, which goes on from what the journal holds";
      std::fprintf(stderr, "rota: %s: %s\n", path_.c_str(), unknown.c_str());
      return UnavailableError(path_ + ": " + unknown);
    }
    return s;
  }
  last_seq_ = seq;
  trimmed_to_ = trimmed;
  return seq;
}

Status SqliteStore::CheckRecord(const char* what, uint64_t seq, std::string_view body, sqlite3_stmt* row, int crc_col) {
  if (static_cast<int64_t>(seq) < checked_from_) return Status::Ok();  // written before checksums
  if (sqlite3_column_type(row, crc_col) == SQLITE_NULL || sqlite3_column_int64(row, crc_col) != RecordCrc(seq, body)) {
    return DataLossError(path_ + ": " + what + " " + std::to_string(seq) + " fails its checksum (the record was changed)");
  }
  return Status::Ok();
}

Status SqliteStore::ReplayParts(sqlite3* source, uint64_t seq, int64_t parts,
                                const std::function<Status(const Event&)>& fn) {
  SnapshotPartReader reader(path_ + ": snapshot at event " + std::to_string(seq), seq, parts);
  Stmt st;
  if (sqlite3_prepare_v2(source, "SELECT part, body, crc FROM snapshot_parts WHERE seq = ? ORDER BY part", -1, &st.s,
                         nullptr) != SQLITE_OK) {
    return Error("read snapshot", source);
  }
  sqlite3_bind_int64(st.s, 1, static_cast<sqlite3_int64>(seq));
  int rc = SQLITE_ROW;
  while (!reader.done() && (rc = sqlite3_step(st.s)) == SQLITE_ROW) {
    std::string_view body(reinterpret_cast<const char*>(sqlite3_column_text(st.s, 1)),
                          static_cast<size_t>(sqlite3_column_bytes(st.s, 1)));
    ROTA_RETURN_IF_ERROR(reader.Read(sqlite3_column_int64(st.s, 0), body, sqlite3_column_int64(st.s, 2), fn));
  }
  // A read that failed (a damaged or unreadable file) is that, not a part missing.
  if (rc != SQLITE_ROW && rc != SQLITE_DONE) return Error("read snapshot", source);
  return reader.Finish();
}

Status SqliteStore::Replay(const std::function<Status(const Event&)>& fn) {
  uint64_t snap_seq = 0;
  // The newest snapshot: in the snapshot database, or (stores from before
  // it) in the journal's own table.
  sqlite3* source = db_;
  for (sqlite3* candidate : {db_, snap_db_}) {
    Stmt st;
    if (sqlite3_prepare_v2(candidate, "SELECT MAX(seq) FROM snapshots", -1, &st.s, nullptr) == SQLITE_OK &&
        sqlite3_step(st.s) == SQLITE_ROW && sqlite3_column_type(st.s, 0) != SQLITE_NULL &&
        static_cast<uint64_t>(sqlite3_column_int64(st.s, 0)) >= snap_seq) {
      snap_seq = static_cast<uint64_t>(sqlite3_column_int64(st.s, 0));
      source = candidate;
    }
  }
  snap_seq = 0;
  {
    Stmt st;
    if (sqlite3_prepare_v2(source, "SELECT seq, body, crc FROM snapshots ORDER BY seq DESC LIMIT 1", -1, &st.s, nullptr) !=
        SQLITE_OK) {
      return Error("read snapshot", source);
    }
    const int rc = sqlite3_step(st.s);
    if (rc != SQLITE_ROW && rc != SQLITE_DONE) return Error("read snapshot", source);
    if (rc == SQLITE_ROW) {
      snap_seq = static_cast<uint64_t>(sqlite3_column_int64(st.s, 0));
      std::string_view body(reinterpret_cast<const char*>(sqlite3_column_text(st.s, 1)),
                            static_cast<size_t>(sqlite3_column_bytes(st.s, 1)));
      ROTA_RETURN_IF_ERROR(CheckRecord("snapshot at event", snap_seq, body, st.s, 2));
      if (std::optional<int64_t> parts = SnapshotParts(body)) {
        ROTA_RETURN_IF_ERROR(ReplayParts(source, snap_seq, *parts, fn));
      } else {
        ROTA_RETURN_IF_ERROR(DecodeSnapshotBody(body, fn));
      }
    }
  }
  Stmt st;
  if (sqlite3_prepare_v2(db_, "SELECT seq, body, crc FROM events WHERE seq > ? ORDER BY seq", -1, &st.s, nullptr) !=
      SQLITE_OK) {
    return Error("read journal");
  }
  sqlite3_bind_int64(st.s, 1, static_cast<sqlite3_int64>(snap_seq));
  int rc;
  uint64_t expected = snap_seq + 1;
  while ((rc = sqlite3_step(st.s)) == SQLITE_ROW) {
    const auto seq = static_cast<uint64_t>(sqlite3_column_int64(st.s, 0));
    // Every event from the snapshot on: a gap is a lost (or deleted) event,
    // and replaying past it would build a state that never was.
    if (seq != expected) {
      return DataLossError(path_ + ": journal event " + std::to_string(expected) + " is missing (the next is " +
                           std::to_string(seq) + ")");
    }
    ++expected;
    std::string_view body(reinterpret_cast<const char*>(sqlite3_column_text(st.s, 1)),
                          static_cast<size_t>(sqlite3_column_bytes(st.s, 1)));
    ROTA_RETURN_IF_ERROR(CheckRecord("journal event", seq, body, st.s, 2));
    auto e = api::DecodeEvent(body);
    if (!e.ok()) {
      return e.status().WithPrefix(path_ + ": journal event " + std::to_string(seq));
    }
    ROTA_RETURN_IF_ERROR(fn(*e));
  }
  return rc == SQLITE_DONE ? Status::Ok() : Error("read journal");
}

Status SqliteStore::WriteSnapshot(uint64_t seq, const EventSource& compacted) {
  std::lock_guard<std::mutex> lock(snapshot_mu_);  // one snapshot at a time; its own connections
  auto fail = [&](sqlite3* db, const std::string& what) {
    Status error = Error(what, db);  // (before the rollback resets its error)
    sqlite3_exec(db, "ROLLBACK;", nullptr, nullptr, nullptr);
    return error;
  };
  // Only this connection writes the snapshot database: its parts are written
  // inside the transaction as they are encoded, and the journal's appender
  // never waits on it.
  if (sqlite3_exec(snap_db_, "BEGIN IMMEDIATE;", nullptr, nullptr, nullptr) != SQLITE_OK) {
    return fail(snap_db_, "write snapshot");
  }
  Stmt part, ins, old, old_parts;
  if (sqlite3_prepare_v2(snap_db_, "INSERT OR REPLACE INTO snapshot_parts (seq, part, body, crc) VALUES (?, ?, ?, ?)",
                         -1, &part.s, nullptr) != SQLITE_OK) {
    return fail(snap_db_, "write snapshot");
  }
  bool step_failed = false;
  StatusOr<int64_t> parts = EncodeSnapshotParts(compacted, kSnapshotPartBytes, [&](int64_t i, std::string_view body) {
    sqlite3_reset(part.s);
    sqlite3_bind_int64(part.s, 1, static_cast<sqlite3_int64>(seq));
    sqlite3_bind_int64(part.s, 2, i);
    sqlite3_bind_text(part.s, 3, body.data(), static_cast<int>(body.size()), SQLITE_STATIC);
    sqlite3_bind_int64(part.s, 4, SnapshotPartCrc(seq, i, body));
    if (sqlite3_step(part.s) == SQLITE_DONE) return Status::Ok();
    step_failed = true;
    return UnavailableError("write snapshot part");
  });
  if (!parts.ok()) {
    if (step_failed) return fail(snap_db_, "write snapshot");
    sqlite3_exec(snap_db_, "ROLLBACK;", nullptr, nullptr, nullptr);
    return parts.status();
  }
  const std::string body = SnapshotHeader(*parts);
  bool ok = sqlite3_prepare_v2(snap_db_, "INSERT OR REPLACE INTO snapshots (seq, body, crc) VALUES (?, ?, ?)", -1,
                               &ins.s, nullptr) == SQLITE_OK &&
            sqlite3_prepare_v2(snap_db_, "DELETE FROM snapshots WHERE seq < ?", -1, &old.s, nullptr) == SQLITE_OK &&
            sqlite3_prepare_v2(snap_db_, "DELETE FROM snapshot_parts WHERE seq < ? OR (seq = ? AND part >= ?)", -1,
                               &old_parts.s, nullptr) == SQLITE_OK;
  if (ok) {
    sqlite3_bind_int64(ins.s, 1, static_cast<sqlite3_int64>(seq));
    sqlite3_bind_text(ins.s, 2, body.data(), static_cast<int>(body.size()), SQLITE_STATIC);
    sqlite3_bind_int64(ins.s, 3, RecordCrc(seq, body));
    sqlite3_bind_int64(old.s, 1, static_cast<sqlite3_int64>(seq));
    sqlite3_bind_int64(old_parts.s, 1, static_cast<sqlite3_int64>(seq));
    sqlite3_bind_int64(old_parts.s, 2, static_cast<sqlite3_int64>(seq));
    sqlite3_bind_int64(old_parts.s, 3, *parts);
    ok = sqlite3_step(ins.s) == SQLITE_DONE && sqlite3_step(old.s) == SQLITE_DONE &&
         sqlite3_step(old_parts.s) == SQLITE_DONE;
  }
  if (!ok || sqlite3_exec(snap_db_, "COMMIT;", nullptr, nullptr, nullptr) != SQLITE_OK) {
    return fail(snap_db_, "write snapshot");
  }
  // The snapshot is durable: the appender trims the journal behind it (Append).
  trim_to_.store(std::max(trim_to_.load(), seq));
  return Status::Ok();
}

StatusOr<std::optional<uint64_t>> SqliteStore::Kept(const std::string& name) {
  // (Kept values are 0..INT64_MAX: -1 is none.)
  ROTA_ASSIGN_OR_RETURN(const int64_t value, Meta(("kept:" + name).c_str()));
  if (value < 0) return std::optional<uint64_t>();
  return std::optional<uint64_t>(static_cast<uint64_t>(value));
}

StatusOr<uint64_t> SqliteStore::Keep(const std::string& name, uint64_t value) {
  const std::string key = "kept:" + name;
  Stmt st;
  if (sqlite3_prepare_v2(db_, "INSERT OR IGNORE INTO meta (key, value) VALUES (?, ?)", -1, &st.s, nullptr) != SQLITE_OK) {
    return Error("prepare meta");
  }
  sqlite3_bind_text(st.s, 1, key.c_str(), -1, SQLITE_TRANSIENT);
  sqlite3_bind_int64(st.s, 2, static_cast<int64_t>(value & uint64_t{INT64_MAX}));
  if (sqlite3_step(st.s) != SQLITE_DONE) return Error("write meta");
  ROTA_ASSIGN_OR_RETURN(const std::optional<uint64_t> kept, Kept(name));
  if (!kept) return DataLossError("meta: '" + name + "' is not there after it was written");
  return *kept;
}

Status SqliteStore::PutToken(const TokenRecord& t) {
  Stmt st;
  if (sqlite3_prepare_v2(db_,
                         "INSERT OR REPLACE INTO tokens (hash, user, role, node, created_at, expires_at, revoked)"
                         " VALUES (?,?,?,?,?,?,?)",
                         -1, &st.s, nullptr) != SQLITE_OK) {
    return Error("prepare token");
  }
  sqlite3_bind_text(st.s, 1, t.hash.c_str(), -1, SQLITE_TRANSIENT);
  sqlite3_bind_text(st.s, 2, t.user.c_str(), -1, SQLITE_TRANSIENT);
  sqlite3_bind_text(st.s, 3, t.role.c_str(), -1, SQLITE_TRANSIENT);
  sqlite3_bind_text(st.s, 4, t.node.c_str(), -1, SQLITE_TRANSIENT);
  sqlite3_bind_int64(st.s, 5, t.created_at);
  sqlite3_bind_int64(st.s, 6, t.expires_at);
  sqlite3_bind_int(st.s, 7, t.revoked ? 1 : 0);
  return sqlite3_step(st.s) == SQLITE_DONE ? Status::Ok() : Error("put token");
}

StatusOr<std::vector<TokenRecord>> SqliteStore::Tokens() {
  Stmt st;
  if (sqlite3_prepare_v2(db_,
                         "SELECT hash, user, role, node, created_at, expires_at, revoked FROM tokens ORDER BY created_at",
                         -1, &st.s, nullptr) != SQLITE_OK) {
    return Error("read tokens");
  }
  std::vector<TokenRecord> out;
  int rc;
  while ((rc = sqlite3_step(st.s)) == SQLITE_ROW) {
    auto col = [&](int i) {
      const auto* text = reinterpret_cast<const char*>(sqlite3_column_text(st.s, i));
      return std::string(text == nullptr ? "" : text);
    };
    out.push_back({col(0), col(1), col(2), col(3), sqlite3_column_int64(st.s, 4), sqlite3_column_int64(st.s, 5),
                   sqlite3_column_int(st.s, 6) != 0});
  }
  // A read cut short (busy, I/O, corruption) is an error, not fewer tokens:
  // agents would get 401 and their tasks fence, and an empty list would make
  // a new admin token.
  if (rc != SQLITE_DONE) return Error("read tokens");
  return out;
}

Status SqliteStore::PutUsage(const std::vector<UsageRecord>& records) {
  if (records.empty()) return Status::Ok();
  std::lock_guard<std::mutex> lock(usage_mu_);
  auto fail = [&](const char* what) {
    const int code = sqlite3_extended_errcode(usage_db_);
    std::string msg = path_ + ".usage: " + what + ": " + sqlite3_errmsg(usage_db_);
    sqlite3_exec(usage_db_, "ROLLBACK", nullptr, nullptr, nullptr);
    if ((code & 0xff) == SQLITE_FULL) return InsufficientStorageError(std::move(msg));
    return UnavailableError(std::move(msg));
  };
  if (sqlite3_exec(usage_db_, "BEGIN IMMEDIATE", nullptr, nullptr, nullptr) != SQLITE_OK) return fail("begin");
  Stmt st;
  if (sqlite3_prepare_v2(usage_db_, "INSERT OR IGNORE INTO usage (job, attempt, ended_at, body) VALUES (?, ?, ?, ?)", -1,
                         &st.s, nullptr) != SQLITE_OK) {
    return fail("prepare");
  }
  for (const UsageRecord& r : records) {
    const std::string body = api::EncodeUsage(r);
    sqlite3_bind_int64(st.s, 1, static_cast<sqlite3_int64>(r.job.value()));
    sqlite3_bind_int64(st.s, 2, r.attempt);
    sqlite3_bind_int64(st.s, 3, r.ended_at);
    sqlite3_bind_text(st.s, 4, body.data(), static_cast<int>(body.size()), SQLITE_TRANSIENT);
    if (sqlite3_step(st.s) != SQLITE_DONE) return fail("insert");
    sqlite3_reset(st.s);
  }
  if (sqlite3_exec(usage_db_, "COMMIT", nullptr, nullptr, nullptr) != SQLITE_OK) return fail("commit");
  return Status::Ok();
}

StatusOr<std::vector<UsageRecord>> SqliteStore::ReadUsageRows(sqlite3_stmt* st) {
  std::vector<UsageRecord> out;
  int rc;
  while ((rc = sqlite3_step(st)) == SQLITE_ROW) {
    const auto* text = reinterpret_cast<const char*>(sqlite3_column_text(st, 0));
    ROTA_ASSIGN_OR_RETURN(UsageRecord r, api::DecodeUsage(std::string_view(text, sqlite3_column_bytes(st, 0))));
    out.push_back(std::move(r));
  }
  if (rc != SQLITE_DONE) return UnavailableError(path_ + ".usage: read: " + sqlite3_errmsg(usage_read_db_));
  return out;
}

StatusOr<std::vector<UsageRecord>> SqliteStore::Usage(TimePoint since, TimePoint until) {
  std::lock_guard<std::mutex> lock(usage_read_mu_);
  Stmt st;
  if (sqlite3_prepare_v2(usage_read_db_, "SELECT body FROM usage WHERE ended_at >= ? AND ended_at < ? ORDER BY ended_at", -1,
                         &st.s, nullptr) != SQLITE_OK) {
    return UnavailableError(path_ + ".usage: read: " + sqlite3_errmsg(usage_read_db_));
  }
  sqlite3_bind_int64(st.s, 1, since);
  sqlite3_bind_int64(st.s, 2, until);
  return ReadUsageRows(st.s);
}

StatusOr<std::vector<UsageRecord>> SqliteStore::UsageOfJob(JobId job) {
  std::lock_guard<std::mutex> lock(usage_read_mu_);
  Stmt st;
  if (sqlite3_prepare_v2(usage_read_db_, "SELECT body FROM usage WHERE job = ? ORDER BY attempt", -1, &st.s, nullptr) !=
      SQLITE_OK) {
    return UnavailableError(path_ + ".usage: read: " + sqlite3_errmsg(usage_read_db_));
  }
  sqlite3_bind_int64(st.s, 1, static_cast<sqlite3_int64>(job.value()));
  return ReadUsageRows(st.s);
}

StatusOr<int64_t> SqliteStore::DropUsage(TimePoint before) {
  std::lock_guard<std::mutex> lock(usage_mu_);
  Stmt st;
  if (sqlite3_prepare_v2(usage_db_, "DELETE FROM usage WHERE ended_at < ?", -1, &st.s, nullptr) != SQLITE_OK) {
    return UnavailableError(path_ + ".usage: drop: " + sqlite3_errmsg(usage_db_));
  }
  sqlite3_bind_int64(st.s, 1, before);
  if (sqlite3_step(st.s) != SQLITE_DONE) return UnavailableError(path_ + ".usage: drop: " + sqlite3_errmsg(usage_db_));
  return static_cast<int64_t>(sqlite3_changes(usage_db_));
}

Status SqliteStore::PutGpuHistory(const std::vector<GpuHistoryBlock>& blocks) {
  if (blocks.empty()) return Status::Ok();
  std::lock_guard<std::mutex> lock(usage_mu_);
  auto fail = [&](const char* what) {
    std::string msg = path_ + ".usage: " + what + ": " + sqlite3_errmsg(usage_db_);
    sqlite3_exec(usage_db_, "ROLLBACK", nullptr, nullptr, nullptr);
    return UnavailableError(std::move(msg));
  };
  if (sqlite3_exec(usage_db_, "BEGIN IMMEDIATE", nullptr, nullptr, nullptr) != SQLITE_OK) return fail("begin");
  Stmt st;
  if (sqlite3_prepare_v2(usage_db_,
                         "INSERT OR REPLACE INTO gpu_history (node, gpu, step, start, points) VALUES (?, ?, ?, ?, ?)", -1,
                         &st.s, nullptr) != SQLITE_OK) {
    return fail("put gpu history");
  }
  for (const GpuHistoryBlock& b : blocks) {
    const std::string points = EncodeGpuPoints(b.points);
    sqlite3_reset(st.s);
    sqlite3_bind_text(st.s, 1, b.node.data(), static_cast<int>(b.node.size()), SQLITE_STATIC);
    sqlite3_bind_int(st.s, 2, b.gpu);
    sqlite3_bind_int(st.s, 3, b.step_s);
    sqlite3_bind_int64(st.s, 4, b.start);
    sqlite3_bind_blob(st.s, 5, points.data(), static_cast<int>(points.size()), SQLITE_TRANSIENT);
    if (sqlite3_step(st.s) != SQLITE_DONE) return fail("put gpu history");
  }
  if (sqlite3_exec(usage_db_, "COMMIT", nullptr, nullptr, nullptr) != SQLITE_OK) return fail("commit");
  return Status::Ok();
}

StatusOr<std::vector<GpuHistoryBlock>> SqliteStore::GpuHistory(const std::string& node, int32_t step_s,
                                                               TimePoint since, TimePoint until) {
  std::lock_guard<std::mutex> lock(usage_read_mu_);
  Stmt st;
  const char* sql = node.empty()
                        ? "SELECT node, gpu, start, points FROM gpu_history WHERE step = ?2 AND start >= ?3 AND start < ?4"
                          " ORDER BY node, gpu, start"
                        : "SELECT node, gpu, start, points FROM gpu_history WHERE node = ?1 AND step = ?2 AND start >= ?3"
                          " AND start < ?4 ORDER BY gpu, start";
  if (sqlite3_prepare_v2(usage_read_db_, sql, -1, &st.s, nullptr) != SQLITE_OK) {
    return UnavailableError(path_ + ".usage: read gpu history: " + sqlite3_errmsg(usage_read_db_));
  }
  if (!node.empty()) sqlite3_bind_text(st.s, 1, node.data(), static_cast<int>(node.size()), SQLITE_STATIC);
  sqlite3_bind_int(st.s, 2, step_s);
  sqlite3_bind_int64(st.s, 3, since);
  sqlite3_bind_int64(st.s, 4, until);
  std::vector<GpuHistoryBlock> out;
  int rc;
  while ((rc = sqlite3_step(st.s)) == SQLITE_ROW) {
    GpuHistoryBlock b;
    b.node = reinterpret_cast<const char*>(sqlite3_column_text(st.s, 0));
    b.gpu = sqlite3_column_int(st.s, 1);
    b.step_s = step_s;
    b.start = sqlite3_column_int64(st.s, 2);
    const auto* data = static_cast<const char*>(sqlite3_column_blob(st.s, 3));
    auto points = DecodeGpuPoints(
        std::string_view(data == nullptr ? "" : data, static_cast<size_t>(sqlite3_column_bytes(st.s, 3))), b.size());
    if (!points.ok()) {  // one damaged block is skipped, not every read refused
      std::fprintf(stderr, "rota: %s.usage: gpu history of %s GPU %d at %lld skipped: %s\n", path_.c_str(), b.node.c_str(),
                   b.gpu, static_cast<long long>(b.start), points.status().ToString().c_str());
      continue;
    }
    b.points = std::move(*points);
    out.push_back(std::move(b));
  }
  if (rc != SQLITE_DONE) return UnavailableError(path_ + ".usage: read gpu history: " + sqlite3_errmsg(usage_read_db_));
  return out;
}

StatusOr<int64_t> SqliteStore::DropGpuHistory(int32_t step_s, TimePoint before) {
  std::lock_guard<std::mutex> lock(usage_mu_);
  Stmt st;
  if (sqlite3_prepare_v2(usage_db_, "DELETE FROM gpu_history WHERE step = ? AND start < ?", -1, &st.s, nullptr) !=
      SQLITE_OK) {
    return UnavailableError(path_ + ".usage: drop gpu history: " + sqlite3_errmsg(usage_db_));
  }
  sqlite3_bind_int(st.s, 1, step_s);
  sqlite3_bind_int64(st.s, 2, before);
  if (sqlite3_step(st.s) != SQLITE_DONE) {
    return UnavailableError(path_ + ".usage: drop gpu history: " + sqlite3_errmsg(usage_db_));
  }
  return static_cast<int64_t>(sqlite3_changes(usage_db_));
}

}  // namespace rota
