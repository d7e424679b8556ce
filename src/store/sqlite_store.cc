#include "store/sqlite_store.h"

#include <sqlite3.h>

#include "api/json_codec.h"

namespace rota {
namespace {

// Finalizes a prepared statement on scope exit.
struct Stmt {
  sqlite3_stmt* s = nullptr;
  ~Stmt() { sqlite3_finalize(s); }
};

}  // namespace

Status SqliteStore::Error(const std::string& what) const {
  return UnavailableError(path_ + ": " + what + ": " + sqlite3_errmsg(db_));
}

Status SqliteStore::Exec(const char* sql) {
  char* err = nullptr;
  if (sqlite3_exec(db_, sql, nullptr, nullptr, &err) != SQLITE_OK) {
    std::string msg = err ? err : "unknown error";
    sqlite3_free(err);
    return UnavailableError(path_ + ": " + msg);
  }
  return Status::Ok();
}

StatusOr<std::unique_ptr<SqliteStore>> SqliteStore::Open(const std::string& path) {
  sqlite3* db = nullptr;
  if (sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_FULLMUTEX, nullptr) !=
      SQLITE_OK) {
    std::string msg = db ? sqlite3_errmsg(db) : "out of memory";
    sqlite3_close(db);
    return UnavailableError(path + ": cannot open: " + msg);
  }
  std::unique_ptr<SqliteStore> store(new SqliteStore(db, path));
  sqlite3_busy_timeout(db, 5000);
  ROTA_RETURN_IF_ERROR(store->Exec("PRAGMA journal_mode=WAL;"));
  ROTA_RETURN_IF_ERROR(store->Exec("PRAGMA synchronous=FULL;"));
  ROTA_RETURN_IF_ERROR(store->Exec(
      "CREATE TABLE IF NOT EXISTS events (seq INTEGER PRIMARY KEY, body TEXT NOT NULL);"
      "CREATE TABLE IF NOT EXISTS snapshots (seq INTEGER PRIMARY KEY, body TEXT NOT NULL);"
      "CREATE TABLE IF NOT EXISTS tokens (hash TEXT PRIMARY KEY, user TEXT NOT NULL, role TEXT NOT NULL,"
      " node TEXT NOT NULL, created_at INTEGER NOT NULL);"));
  Stmt st;
  if (sqlite3_prepare_v2(db, "SELECT MAX(seq) FROM (SELECT seq FROM events UNION ALL SELECT seq FROM snapshots)", -1,
                         &st.s, nullptr) != SQLITE_OK) {
    return store->Error("read sequence");
  }
  if (sqlite3_step(st.s) == SQLITE_ROW) store->last_seq_ = static_cast<uint64_t>(sqlite3_column_int64(st.s, 0));
  return store;
}

SqliteStore::~SqliteStore() { sqlite3_close(db_); }

StatusOr<uint64_t> SqliteStore::Append(const std::vector<Event>& events) {
  if (events.empty()) return last_seq_;
  ROTA_RETURN_IF_ERROR(Exec("BEGIN IMMEDIATE;"));
  Stmt st;
  if (sqlite3_prepare_v2(db_, "INSERT INTO events (seq, body) VALUES (?, ?)", -1, &st.s, nullptr) != SQLITE_OK) {
    Exec("ROLLBACK;").IgnoreError();
    return Error("prepare append");
  }
  uint64_t seq = last_seq_;
  for (const Event& e : events) {
    const std::string body = api::EncodeEvent(e);
    sqlite3_bind_int64(st.s, 1, static_cast<sqlite3_int64>(++seq));
    sqlite3_bind_text(st.s, 2, body.data(), static_cast<int>(body.size()), SQLITE_TRANSIENT);
    if (sqlite3_step(st.s) != SQLITE_DONE) {
      Status s = Error("append");
      Exec("ROLLBACK;").IgnoreError();
      return s;
    }
    sqlite3_reset(st.s);
  }
  ROTA_RETURN_IF_ERROR(Exec("COMMIT;"));
  last_seq_ = seq;
  return seq;
}

Status SqliteStore::Replay(const std::function<Status(const Event&)>& fn) {
  uint64_t snap_seq = 0;
  {
    Stmt st;
    if (sqlite3_prepare_v2(db_, "SELECT seq, body FROM snapshots ORDER BY seq DESC LIMIT 1", -1, &st.s, nullptr) !=
        SQLITE_OK) {
      return Error("read snapshot");
    }
    if (sqlite3_step(st.s) == SQLITE_ROW) {
      snap_seq = static_cast<uint64_t>(sqlite3_column_int64(st.s, 0));
      std::string_view body(reinterpret_cast<const char*>(sqlite3_column_text(st.s, 1)),
                            static_cast<size_t>(sqlite3_column_bytes(st.s, 1)));
      size_t start = 0;
      while (start < body.size()) {
        size_t end = body.find('\n', start);
        if (end == std::string_view::npos) end = body.size();
        ROTA_ASSIGN_OR_RETURN(Event e, api::DecodeEvent(body.substr(start, end - start)));
        ROTA_RETURN_IF_ERROR(fn(e));
        start = end + 1;
      }
    }
  }
  Stmt st;
  if (sqlite3_prepare_v2(db_, "SELECT seq, body FROM events WHERE seq > ? ORDER BY seq", -1, &st.s, nullptr) !=
      SQLITE_OK) {
    return Error("read journal");
  }
  sqlite3_bind_int64(st.s, 1, static_cast<sqlite3_int64>(snap_seq));
  int rc;
  while ((rc = sqlite3_step(st.s)) == SQLITE_ROW) {
    std::string_view body(reinterpret_cast<const char*>(sqlite3_column_text(st.s, 1)),
                          static_cast<size_t>(sqlite3_column_bytes(st.s, 1)));
    auto e = api::DecodeEvent(body);
    if (!e.ok()) {
      return e.status().WithPrefix(path_ + ": journal event " + std::to_string(sqlite3_column_int64(st.s, 0)));
    }
    ROTA_RETURN_IF_ERROR(fn(*e));
  }
  return rc == SQLITE_DONE ? Status::Ok() : Error("read journal");
}

Status SqliteStore::WriteSnapshot(uint64_t seq, const std::vector<Event>& compacted) {
  std::string body;
  for (const Event& e : compacted) {
    if (!body.empty()) body += '\n';
    body += api::EncodeEvent(e);
  }
  ROTA_RETURN_IF_ERROR(Exec("BEGIN IMMEDIATE;"));
  Stmt ins, del, old;
  bool ok = sqlite3_prepare_v2(db_, "INSERT OR REPLACE INTO snapshots (seq, body) VALUES (?, ?)", -1, &ins.s, nullptr) ==
                SQLITE_OK &&
            sqlite3_prepare_v2(db_, "DELETE FROM events WHERE seq <= ?", -1, &del.s, nullptr) == SQLITE_OK &&
            sqlite3_prepare_v2(db_, "DELETE FROM snapshots WHERE seq < ?", -1, &old.s, nullptr) == SQLITE_OK;
  if (ok) {
    sqlite3_bind_int64(ins.s, 1, static_cast<sqlite3_int64>(seq));
    sqlite3_bind_text(ins.s, 2, body.data(), static_cast<int>(body.size()), SQLITE_TRANSIENT);
    sqlite3_bind_int64(del.s, 1, static_cast<sqlite3_int64>(seq));
    sqlite3_bind_int64(old.s, 1, static_cast<sqlite3_int64>(seq));
    ok = sqlite3_step(ins.s) == SQLITE_DONE && sqlite3_step(del.s) == SQLITE_DONE && sqlite3_step(old.s) == SQLITE_DONE;
  }
  if (!ok) {
    Status s = Error("write snapshot");
    Exec("ROLLBACK;").IgnoreError();
    return s;
  }
  return Exec("COMMIT;");
}

Status SqliteStore::PutToken(const TokenRecord& t) {
  Stmt st;
  if (sqlite3_prepare_v2(db_, "INSERT OR REPLACE INTO tokens (hash, user, role, node, created_at) VALUES (?,?,?,?,?)",
                         -1, &st.s, nullptr) != SQLITE_OK) {
    return Error("prepare token");
  }
  sqlite3_bind_text(st.s, 1, t.hash.c_str(), -1, SQLITE_TRANSIENT);
  sqlite3_bind_text(st.s, 2, t.user.c_str(), -1, SQLITE_TRANSIENT);
  sqlite3_bind_text(st.s, 3, t.role.c_str(), -1, SQLITE_TRANSIENT);
  sqlite3_bind_text(st.s, 4, t.node.c_str(), -1, SQLITE_TRANSIENT);
  sqlite3_bind_int64(st.s, 5, t.created_at);
  return sqlite3_step(st.s) == SQLITE_DONE ? Status::Ok() : Error("put token");
}

StatusOr<std::vector<TokenRecord>> SqliteStore::Tokens() {
  Stmt st;
  if (sqlite3_prepare_v2(db_, "SELECT hash, user, role, node, created_at FROM tokens ORDER BY created_at", -1, &st.s,
                         nullptr) != SQLITE_OK) {
    return Error("read tokens");
  }
  std::vector<TokenRecord> out;
  while (sqlite3_step(st.s) == SQLITE_ROW) {
    auto col = [&](int i) { return std::string(reinterpret_cast<const char*>(sqlite3_column_text(st.s, i))); };
    out.push_back({col(0), col(1), col(2), col(3), sqlite3_column_int64(st.s, 4)});
  }
  return out;
}

}  // namespace rota
