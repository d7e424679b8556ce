#include "store/pg_store.h"

#include <dlfcn.h>
#include <libpq-fe.h>
#include <poll.h>

#include <algorithm>
#include <cstdio>
#include <chrono>
#include <cstring>
#include <initializer_list>
#include <random>
#include <thread>

#include "api/json_codec.h"
#include "api/usage_codec.h"
#include "base/base64.h"
#include "base/random_hex.h"
#include "store/records.h"

namespace rota {
namespace pg {
namespace {

// libpq, loaded when a PostgreSQL store or lease is first opened, not
// linked: with its two dozen libraries (Kerberos, LDAP, SASL, GnuTLS) it
// cost every rota process about 250 page faults at start, a third of a CLI
// command's start on this machine. Calls go through Pq().
#define ROTA_PQ_FUNCTIONS(X) \
  X(PQbackendPID) \
  X(PQclear) \
  X(PQcmdTuples) \
  X(PQconnectdbParams) \
  X(PQconninfoFree) \
  X(PQconninfoParse) \
  X(PQconsumeInput) \
  X(PQdb) \
  X(PQerrorMessage) \
  X(PQexec) \
  X(PQexecParams) \
  X(PQfinish) \
  X(PQfreemem) \
  X(PQgetisnull) \
  X(PQgetlength) \
  X(PQgetvalue) \
  X(PQhost) \
  X(PQnotifies) \
  X(PQntuples) \
  X(PQport) \
  X(PQresultErrorField) \
  X(PQresultErrorMessage) \
  X(PQresultStatus) \
  X(PQsetNoticeReceiver) \
  X(PQsocket) \
  X(PQstatus) \
  X(PQtransactionStatus)

struct Libpq {
#define ROTA_PQ_POINTER(name) decltype(&::name) name = nullptr;
  ROTA_PQ_FUNCTIONS(ROTA_PQ_POINTER)
#undef ROTA_PQ_POINTER
  std::string error;  // why it could not be loaded ("" if it was)
};

const Libpq& Pq() {
  static const Libpq lib = [] {
    Libpq l;
    void* h = dlopen("libpq.so.5", RTLD_NOW | RTLD_LOCAL);
    if (h == nullptr) {
      const char* why = dlerror();
      l.error = why != nullptr ? why : "libpq.so.5: not found";
      return l;
    }
#define ROTA_PQ_LOAD(name)                                                  \
  l.name = reinterpret_cast<decltype(&::name)>(dlsym(h, #name));            \
  if (l.name == nullptr && l.error.empty()) l.error = "libpq.so.5 has no " #name;
    ROTA_PQ_FUNCTIONS(ROTA_PQ_LOAD)
#undef ROTA_PQ_LOAD
    return l;
  }();
  return lib;
}
#undef ROTA_PQ_FUNCTIONS

// Before anything of libpq's is used: whether it could be loaded.
Status LoadLibpq() {
  const std::string& error = Pq().error;
  if (error.empty()) return Status::Ok();
  return UnavailableError("PostgreSQL: cannot load libpq (Debian package libpq5): " + error);
}

}  // namespace

// A query's result; cleared on scope exit.
class Result {
 public:
  explicit Result(PGresult* r) : r_(r) {}
  Result(Result&& o) noexcept : r_(std::exchange(o.r_, nullptr)) {}
  Result& operator=(Result&& o) noexcept {
    std::swap(r_, o.r_);
    return *this;
  }
  ~Result() {
    if (r_ != nullptr) Pq().PQclear(r_);
  }
  int rows() const { return Pq().PQntuples(r_); }
  bool null(int row, int col) const { return Pq().PQgetisnull(r_, row, col) != 0; }
  std::string_view text(int row, int col) const {
    return {Pq().PQgetvalue(r_, row, col), static_cast<size_t>(Pq().PQgetlength(r_, row, col))};
  }
  int64_t int64(int row, int col) const { return std::strtoll(Pq().PQgetvalue(r_, row, col), nullptr, 10); }
  // Rows an INSERT, UPDATE or DELETE changed.
  int64_t affected() const { return std::strtoll(Pq().PQcmdTuples(r_), nullptr, 10); }
  PGresult* get() const { return r_; }

 private:
  PGresult* r_;
};

// One connection that opens itself on first use and again after it breaks.
// Every session runs with synchronous_commit=on and bounded waits: a
// transaction left idle (its client paused or gone) is ended by the server,
// so it cannot hold the lease row's lock.
class Conn {
 public:
  // `tcp_user_timeout_ms`: how long the peer may leave sent data
  // unacknowledged before a call fails.
  Conn(std::string conninfo, std::string settings, int tcp_user_timeout_ms = 5000)
      : conninfo_(std::move(conninfo)),
        settings_(std::move(settings)),
        tcp_user_timeout_(std::to_string(tcp_user_timeout_ms)) {}
  ~Conn() {
    if (c_ != nullptr) Pq().PQfinish(c_);
  }

  PGconn* raw() { return c_; }

  // "postgres HOST:PORT/DB", never the conninfo (it may carry a password).
  std::string Where() const {
    if (c_ == nullptr || Pq().PQhost(c_) == nullptr) return "postgres";
    return std::string("postgres ") + Pq().PQhost(c_) + ":" + Pq().PQport(c_) + "/" + Pq().PQdb(c_);
  }

  Status Ensure() {
    if (c_ != nullptr && Pq().PQstatus(c_) == CONNECTION_OK) return Status::Ok();
    Pq().PQfinish(c_);
    // Bounded waits on the network too: a connect gives up after 5 s, and a
    // peer that stops acknowledging (a dropped link) fails the call within
    // 5 s instead of the kernel's quarter of an hour. The user's conninfo,
    // expanded last, overrides any of these.
    const char* keys[] = {"connect_timeout", "keepalives",         "keepalives_idle", "keepalives_interval",
                          "keepalives_count", "tcp_user_timeout", "dbname",          nullptr};
    const char* values[] = {"5", "1", "5", "2", "2", tcp_user_timeout_.c_str(), conninfo_.c_str(), nullptr};
    c_ = Pq().PQconnectdbParams(keys, values, /*expand_dbname=*/1);
    if (Pq().PQstatus(c_) != CONNECTION_OK) {
      std::string msg = Pq().PQerrorMessage(c_);
      while (!msg.empty() && (msg.back() == '\n' || msg.back() == ' ')) msg.pop_back();
      Status s = UnavailableError(Where() + ": cannot connect: " + msg);
      Pq().PQfinish(c_);
      c_ = nullptr;
      return s;
    }
    // Notices are not errors, but a WARNING is remembered: a COMMIT whose
    // wait for a synchronous replica was cancelled succeeds with one.
    Pq().PQsetNoticeReceiver(
        c_,
        [](void* self, const PGresult* r) {
          const char* severity = Pq().PQresultErrorField(r, PG_DIAG_SEVERITY_NONLOCALIZED);
          if (severity != nullptr && std::strcmp(severity, "WARNING") == 0) static_cast<Conn*>(self)->warned_ = true;
        },
        this);
    if (!settings_.empty()) {
      PGresult* r = Pq().PQexec(c_, settings_.c_str());
      const bool ok = Pq().PQresultStatus(r) == PGRES_COMMAND_OK || Pq().PQresultStatus(r) == PGRES_TUPLES_OK;
      std::string msg = Pq().PQresultErrorMessage(r);
      Pq().PQclear(r);
      if (!ok) {
        // Never a session without its settings (durability, timeouts).
        Status s = UnavailableError(Where() + ": " + msg);
        Pq().PQfinish(c_);
        c_ = nullptr;
        return s;
      }
    }
    return Status::Ok();
  }

  // True if a WARNING came since the last call (and forgets it).
  bool TakeWarning() { return std::exchange(warned_, false); }

  // Runs `sql` with text parameters. A refused statement is an error naming
  // `what` and PostgreSQL's reason: a full disk on the database is
  // InsufficientStorage (nothing changed), everything else Unavailable.
  StatusOr<Result> Exec(const std::string& what, const char* sql, std::initializer_list<std::string_view> params = {}) {
    ROTA_RETURN_IF_ERROR(Ensure());
    std::vector<std::string> owned(params.begin(), params.end());
    std::vector<const char*> values;
    std::vector<int> lengths;
    for (const std::string& p : owned) {
      values.push_back(p.c_str());
      lengths.push_back(static_cast<int>(p.size()));
    }
    // Outside a transaction a statement that meets a dead connection (the
    // database restarted since the last call) ran nowhere: open a new one and
    // send it once more. Inside one, the transaction is gone with it.
    const bool outside = Pq().PQtransactionStatus(c_) == PQTRANS_IDLE;
    Result r(Pq().PQexecParams(c_, sql, static_cast<int>(values.size()), nullptr, values.data(), lengths.data(), nullptr, 0));
    if (outside && Pq().PQstatus(c_) == CONNECTION_BAD) {
      ROTA_RETURN_IF_ERROR(Ensure());
      r = Result(Pq().PQexecParams(c_, sql, static_cast<int>(values.size()), nullptr, values.data(), lengths.data(), nullptr, 0));
    }
    const ExecStatusType st = Pq().PQresultStatus(r.get());
    if (st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK) return r;
    return Error(what, r.get());
  }

  // Runs several statements without parameters (a schema).
  Status Script(const std::string& what, const char* sql) {
    ROTA_RETURN_IF_ERROR(Ensure());
    Result r(Pq().PQexec(c_, sql));
    const ExecStatusType st = Pq().PQresultStatus(r.get());
    if (st == PGRES_COMMAND_OK || st == PGRES_TUPLES_OK) return Status::Ok();
    return Error(what, r.get());
  }

  Status Error(const std::string& what, PGresult* r) {
    const char* state = r ? Pq().PQresultErrorField(r, PG_DIAG_SQLSTATE) : nullptr;
    std::string msg = r ? Pq().PQresultErrorMessage(r) : "";
    if (msg.empty()) msg = Pq().PQerrorMessage(c_);
    while (!msg.empty() && (msg.back() == '\n' || msg.back() == ' ')) msg.pop_back();
    std::string full = Where() + ": " + what + ": " + msg;
    if (state != nullptr) full += std::string(" (SQLSTATE ") + state + ")";
    // SQLSTATE class 53: insufficient resources (53100 disk_full).
    if (state != nullptr && std::strncmp(state, "53", 2) == 0) return InsufficientStorageError(std::move(full));
    return UnavailableError(std::move(full));
  }

  void Rollback() {
    if (c_ != nullptr && Pq().PQstatus(c_) == CONNECTION_OK) Pq().PQclear(Pq().PQexec(c_, "ROLLBACK"));
  }

 private:
  std::string conninfo_, settings_, tcp_user_timeout_;
  PGconn* c_ = nullptr;
  bool warned_ = false;
};

}  // namespace pg

namespace {


// Sessions of the store: durable commits; a transaction left idle for 2 s (a
// paused or vanished server) is ended by PostgreSQL, which frees its locks.
constexpr const char* kStoreSettings =
    "SET synchronous_commit = on; SET idle_in_transaction_session_timeout = '2s'; SET statement_timeout = 0;"
    " SET client_min_messages = warning;";
// The lease's session: never waits long (an election retries; a leader
// whose renewal cannot finish in time steps down): a lock for a quarter of
// the lease, a statement for half.
std::string LeaseSettings(Duration lease) {
  const int64_t ms = std::max<int64_t>(lease / 1000, 400);
  return "SET synchronous_commit = on; SET lock_timeout = '" + std::to_string(ms / 4) +
         "ms'; SET statement_timeout = '" + std::to_string(ms / 2) + "ms'; SET client_min_messages = warning;";
}

// Creates the tables once, under an advisory lock (two servers starting
// together would otherwise race on CREATE TABLE IF NOT EXISTS).
Status EnsureSchema(pg::Conn& c) {
  ROTA_RETURN_IF_ERROR(c.Exec("create tables", "BEGIN").status());
  Status done = c.Script("create tables",
                     "SELECT pg_advisory_xact_lock(7070700);"
                     "CREATE TABLE IF NOT EXISTS rota_events (seq bigint PRIMARY KEY, body text NOT NULL, crc bigint NOT NULL);"
                     "CREATE TABLE IF NOT EXISTS rota_snapshots (seq bigint PRIMARY KEY, body text NOT NULL, crc bigint NOT NULL);"
                     "CREATE TABLE IF NOT EXISTS rota_snapshot_parts (seq bigint NOT NULL, part bigint NOT NULL,"
                     " body text NOT NULL, crc bigint NOT NULL, PRIMARY KEY (seq, part));"
                     "CREATE TABLE IF NOT EXISTS rota_tokens (hash text PRIMARY KEY, username text NOT NULL,"
                     " role text NOT NULL, node text NOT NULL, created_at bigint NOT NULL,"
                     " expires_at bigint NOT NULL DEFAULT 0, revoked boolean NOT NULL DEFAULT false);"
                     "CREATE TABLE IF NOT EXISTS rota_meta (key text PRIMARY KEY, value bigint NOT NULL);"
                     "CREATE TABLE IF NOT EXISTS rota_leader (id int PRIMARY KEY CHECK (id = 1), epoch bigint NOT NULL,"
                     " holder text NOT NULL, expires_at timestamptz NOT NULL);"
                     "CREATE TABLE IF NOT EXISTS rota_replicas (url text PRIMARY KEY, role text NOT NULL,"
                     " seq bigint NOT NULL, seen_at timestamptz NOT NULL);"
                     // The epoch is a key: changing it (an election) conflicts with the
                     // writers' FOR KEY SHARE; renewing the expiry does not.
                     "CREATE UNIQUE INDEX IF NOT EXISTS rota_leader_epoch ON rota_leader (epoch);"
                     "ALTER TABLE rota_leader ADD COLUMN IF NOT EXISTS instance text NOT NULL DEFAULT '';"
                     "CREATE TABLE IF NOT EXISTS rota_usage (job bigint NOT NULL, attempt int NOT NULL,"
                     " ended_at bigint NOT NULL, body text NOT NULL, PRIMARY KEY (job, attempt));"
                     "CREATE INDEX IF NOT EXISTS rota_usage_ended ON rota_usage (ended_at);"
                     "CREATE TABLE IF NOT EXISTS rota_gpu_history (node text NOT NULL, gpu int NOT NULL,"
                     " step int NOT NULL, start bigint NOT NULL, points text NOT NULL,"
                     " PRIMARY KEY (node, gpu, step, start));"
                     "CREATE INDEX IF NOT EXISTS rota_gpu_history_start ON rota_gpu_history (step, start);"
                     "COMMIT");
  if (!done.ok()) c.Rollback();
  return done;
}

// A text[] literal of `items`: each quoted, its quotes and backslashes escaped.
std::string ArrayLiteral(const std::vector<std::string>& items) {
  std::string out = "{";
  for (size_t i = 0; i < items.size(); ++i) {
    if (i > 0) out.push_back(',');
    out.push_back('"');
    for (char ch : items[i]) {
      if (ch == '"' || ch == '\\') out.push_back('\\');
      out.push_back(ch);
    }
    out.push_back('"');
  }
  out.push_back('}');
  return out;
}

}  // namespace

Status CheckConninfo(const std::string& conninfo) {
  ROTA_RETURN_IF_ERROR(pg::LoadLibpq());
  char* err = nullptr;
  PQconninfoOption* options = pg::Pq().PQconninfoParse(conninfo.c_str(), &err);
  if (options == nullptr) {
    std::string why = err != nullptr ? err : "out of memory";
    pg::Pq().PQfreemem(err);
    while (!why.empty() && (why.back() == '\n' || why.back() == ' ')) why.pop_back();
    return InvalidArgumentError("not a PostgreSQL connection URL: " + why);
  }
  bool password = false;
  for (PQconninfoOption* o = options; o->keyword != nullptr; ++o) {
    if (std::strcmp(o->keyword, "password") == 0 && o->val != nullptr && *o->val != '\0') password = true;
  }
  pg::Pq().PQconninfoFree(options);
  if (password) {
    return InvalidArgumentError(
        "the URL carries a password, which every user of this machine can read (ps): put it in PGPASSWORD or "
        "~/.pgpass (PGPASSFILE) instead");
  }
  return Status::Ok();
}

PgStore::PgStore(std::string conninfo)
    : conninfo_(std::move(conninfo)),
      db_(std::make_unique<pg::Conn>(conninfo_, kStoreSettings)),
      snap_db_(std::make_unique<pg::Conn>(conninfo_, kStoreSettings)),
      listen_db_(std::make_unique<pg::Conn>(conninfo_, "LISTEN rota_journal")),
      usage_db_(std::make_unique<pg::Conn>(conninfo_, kStoreSettings)),
      usage_read_db_(std::make_unique<pg::Conn>(conninfo_, kStoreSettings)) {}

PgStore::~PgStore() = default;

StatusOr<std::unique_ptr<PgStore>> PgStore::Open(const std::string& conninfo) {
  ROTA_RETURN_IF_ERROR(pg::LoadLibpq());
  std::unique_ptr<PgStore> store(new PgStore(conninfo));
  pg::Conn& c = *store->db_;
  ROTA_RETURN_IF_ERROR(EnsureSchema(c));
  ROTA_ASSIGN_OR_RETURN(pg::Result r, c.Exec("read sequence",
                                            "SELECT (SELECT max(seq) FROM rota_events), (SELECT max(seq) FROM rota_snapshots),"
                                            " (SELECT value FROM rota_meta WHERE key = 'last_seq')"));
  const uint64_t events = r.null(0, 0) ? 0 : static_cast<uint64_t>(r.int64(0, 0));
  const uint64_t snaps = r.null(0, 1) ? 0 : static_cast<uint64_t>(r.int64(0, 1));
  const uint64_t committed = r.null(0, 2) ? 0 : static_cast<uint64_t>(r.int64(0, 2));
  store->last_seq_ = std::max(events, snaps);
  if (committed > store->last_seq_) {
    return DataLossError(c.Where() + ": the journal ends at event " + std::to_string(store->last_seq_) +
                         " but events through " + std::to_string(committed) + " were committed: event " +
                         std::to_string(store->last_seq_ + 1) + " is missing");
  }
  return store;
}

std::string PgStore::stale_reason() const {
  std::lock_guard<std::mutex> lock(reason_mu_);
  return stale_reason_;
}

void PgStore::MarkStale(std::string reason) {
  {
    std::lock_guard<std::mutex> lock(reason_mu_);
    if (stale_reason_.empty()) stale_reason_ = std::move(reason);
  }
  fenced_ = true;
}

Status PgStore::CheckFence(pg::Conn& c) {
  const int64_t mine = fence_epoch_;
  if (mine == 0) return Status::Ok();
  // FOR KEY SHARE: an election (which changes `epoch`, a unique key) waits
  // for this transaction; the leader's renewals (which change only
  // `expires_at`) do not.
  ROTA_ASSIGN_OR_RETURN(pg::Result r, c.Exec("check the lease", "SELECT epoch FROM rota_leader WHERE id = 1 FOR KEY SHARE"));
  const int64_t now = r.rows() == 0 ? 0 : r.int64(0, 0);
  if (now == mine) return Status::Ok();
  Status refused = FailedPreconditionError("another rota server leads now (lease epoch " + std::to_string(now) +
                                           ", this one's " + std::to_string(mine) + "): this server no longer writes");
  MarkStale(std::string(refused.message()));
  return refused;
}

// After a COMMIT whose answer was lost: what became of transaction `xid`
// (begun on backend `pid`). "committed", "aborted" or "" (unknown: the
// database cannot be asked, or the transaction is still running after the
// old backend was told to end).
std::string ResolveCommit(pg::Conn& c, const std::string& xid, int pid) {
  for (int i = 0; i < 200; ++i) {  // up to 10 s
    auto r = c.Exec("resolve a lost commit", "SELECT txid_status($1::bigint)", {xid});
    if (!r.ok()) {
      if (i >= 100) return "";
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
      continue;
    }
    const std::string status = r->null(0, 0) ? "" : std::string(r->text(0, 0));
    if (status == "committed" || status == "aborted") return status;
    if (status.empty()) return "";  // too old to know
    // Still running on the old backend (our end of its connection broke,
    // not the backend): after a second, end it.
    if (i == 20 && pid > 0) {
      c.Exec("end the old backend", "SELECT pg_terminate_backend($1::int)", {std::to_string(pid)}).status().IgnoreError();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return "";
}

// A write whose COMMIT waits for the synchronous replicas: once it returns
// without a warning, everything committed before it is on them too.
bool ConfirmReplicated(pg::Conn& c) {
  c.TakeWarning();
  auto r = c.Exec("confirm replication", "UPDATE rota_meta SET value = value WHERE key = 'last_seq'");
  return r.ok() && !c.TakeWarning();
}

StatusOr<uint64_t> PgStore::Append(const std::vector<Event>& events) {
  std::lock_guard<std::mutex> lock(mu_);
  if (events.empty()) return last_seq_.load();
  pg::Conn& c = *db_;
  std::vector<std::string> seqs, bodies, crcs;
  uint64_t seq = last_seq_;
  for (const Event& e : events) {
    std::string body = api::EncodeEvent(e);
    ++seq;
    crcs.push_back(std::to_string(RecordCrc(seq, body)));
    seqs.push_back(std::to_string(seq));
    bodies.push_back(std::move(body));
  }
  const std::string last = std::to_string(seq);
  auto fail = [&](Status s) {
    c.Rollback();
    return s;
  };
  ROTA_RETURN_IF_ERROR(c.Exec("append", "BEGIN").status());
  const int pid = pg::Pq().PQbackendPID(c.raw());
  auto xid = c.Exec("append", "SELECT txid_current()");
  if (!xid.ok()) return fail(xid.status());
  const std::string txid(xid->text(0, 0));
  if (Status s = CheckFence(c); !s.ok()) return fail(s);
  if (auto r = c.Exec("append",
                      "INSERT INTO rota_events (seq, body, crc)"
                      " SELECT * FROM unnest($1::bigint[], $2::text[], $3::bigint[])",
                      {ArrayLiteral(seqs), ArrayLiteral(bodies), ArrayLiteral(crcs)});
      !r.ok()) {
    if (r.status().message().find("(SQLSTATE 23505)") != std::string_view::npos) {  // unique_violation
      // Events this store never wrote sit where its next ones go.
      MarkStale("the journal already holds event " + seqs.front() + ": it grew behind this server's back");
    }
    return fail(r.status());
  }
  if (auto r = c.Exec("append",
                      "INSERT INTO rota_meta (key, value) VALUES ('last_seq', $1::bigint)"
                      " ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value",
                      {last});
      !r.ok()) {
    return fail(r.status());
  }
  c.TakeWarning();
  auto committed = c.Exec("commit", "COMMIT");
  bool durable = committed.ok() && !c.TakeWarning();
  if (committed.ok() && !durable) {
    // Committed here, but its wait for the synchronous replicas was cancelled.
    durable = ConfirmReplicated(c);
  } else if (!committed.ok()) {
    // The answer to COMMIT was lost (the connection broke): ask the database
    // what became of the transaction.
    const std::string outcome = ResolveCommit(c, txid, pid);
    if (outcome == "aborted") return committed.status();  // not made: the callers are refused, rightly
    durable = outcome == "committed" && ConfirmReplicated(c);
  }
  if (!durable) {
    // Nobody can say yet whether it is (durably) made: refuse it, and have
    // the owner replay once the database answers (a guess either way could
    // leave the server's state and the journal apart).
    MarkStale("the outcome of a commit is unknown (" +
              (committed.ok() ? std::string("its replication was not confirmed") : std::string(committed.status().message())) +
              ")");
    return UnavailableError("the outcome of the commit of events " + seqs.front() + ".." + last + " is unknown");
  }
  last_seq_ = seq;
  // Wakes the standbys (they poll anyway: a failure here costs only latency).
  c.Exec("notify", "SELECT pg_notify('rota_journal', $1)", {last}).status().IgnoreError();
  return seq;
}

namespace {

// Calls `fn` with the events of the `parts` parts of the snapshot at `seq`,
// read a few at a time through a cursor of the caller's transaction.
Status ReplayParts(pg::Conn& c, uint64_t seq, int64_t parts, const std::function<Status(const Event&)>& fn) {
  SnapshotPartReader reader(c.Where() + ": snapshot at event " + std::to_string(seq), seq, parts);
  ROTA_RETURN_IF_ERROR(c.Exec("read snapshot",
                              "DECLARE snapshot_parts NO SCROLL CURSOR FOR SELECT part, body, crc FROM rota_snapshot_parts"
                              " WHERE seq = $1::bigint ORDER BY part",
                              {std::to_string(seq)})
                           .status());
  while (!reader.done()) {
    ROTA_ASSIGN_OR_RETURN(pg::Result r, c.Exec("read snapshot", "FETCH 8 FROM snapshot_parts"));
    if (r.rows() == 0) break;
    for (int i = 0; i < r.rows() && !reader.done(); ++i) {
      ROTA_RETURN_IF_ERROR(reader.Read(r.int64(i, 0), r.text(i, 1), r.int64(i, 2), fn));
    }
  }
  ROTA_RETURN_IF_ERROR(reader.Finish());
  return c.Exec("read snapshot", "CLOSE snapshot_parts").status();
}

}  // namespace

Status PgStore::Replay(const std::function<Status(const Event&)>& fn) {
  std::lock_guard<std::mutex> lock(mu_);
  pg::Conn& c = *db_;
  // One consistent view of the snapshot and the journal after it, read in
  // pages through a cursor (a million-job journal never sits in memory whole).
  ROTA_RETURN_IF_ERROR(c.Exec("replay", "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY").status());
  auto run = [&]() -> Status {
    // Applying a large snapshot keeps this read-only transaction idle for
    // seconds, as PostgreSQL sees it: not a paused writer.
    ROTA_RETURN_IF_ERROR(c.Exec("replay", "SET LOCAL idle_in_transaction_session_timeout = 0").status());
    uint64_t snap_seq = 0;
    {
      ROTA_ASSIGN_OR_RETURN(pg::Result r, c.Exec("read snapshot",
                                                "SELECT seq, body, crc FROM rota_snapshots ORDER BY seq DESC LIMIT 1"));
      if (r.rows() == 1) {
        snap_seq = static_cast<uint64_t>(r.int64(0, 0));
        std::string_view body = r.text(0, 1);
        if (r.int64(0, 2) != RecordCrc(snap_seq, body)) {
          return DataLossError(c.Where() + ": snapshot at event " + std::to_string(snap_seq) +
                               " fails its checksum (the record was changed)");
        }
        if (std::optional<int64_t> parts = SnapshotParts(body)) {
          ROTA_RETURN_IF_ERROR(ReplayParts(c, snap_seq, *parts, fn));
        } else {
          ROTA_RETURN_IF_ERROR(DecodeSnapshotBody(body, fn));
        }
      }
    }
    ROTA_RETURN_IF_ERROR(c.Exec("read journal",
                                "DECLARE journal NO SCROLL CURSOR FOR SELECT seq, body, crc FROM rota_events"
                                " WHERE seq > $1::bigint ORDER BY seq",
                                {std::to_string(snap_seq)})
                             .status());
    uint64_t expected = snap_seq + 1;
    while (true) {
      ROTA_ASSIGN_OR_RETURN(pg::Result r, c.Exec("read journal", "FETCH 5000 FROM journal"));
      if (r.rows() == 0) break;
      for (int i = 0; i < r.rows(); ++i) {
        const auto seq = static_cast<uint64_t>(r.int64(i, 0));
        if (seq != expected) {
          return DataLossError(c.Where() + ": journal event " + std::to_string(expected) + " is missing (the next is " +
                               std::to_string(seq) + ")");
        }
        ++expected;
        std::string_view body = r.text(i, 1);
        if (r.int64(i, 2) != RecordCrc(seq, body)) {
          return DataLossError(c.Where() + ": journal event " + std::to_string(seq) +
                               " fails its checksum (the record was changed)");
        }
        auto e = api::DecodeEvent(body);
        if (!e.ok()) return e.status().WithPrefix(c.Where() + ": journal event " + std::to_string(seq));
        ROTA_RETURN_IF_ERROR(fn(*e));
      }
    }
    last_seq_ = std::max<uint64_t>(last_seq_, expected - 1);
    return Status::Ok();
  };
  Status s = run();
  if (!s.ok()) {
    c.Rollback();
    return s;
  }
  return c.Exec("replay", "COMMIT").status();
}

StatusOr<uint64_t> PgStore::Follow(uint64_t seq, const std::function<Status(const Event&)>& fn) {
  std::lock_guard<std::mutex> lock(mu_);
  pg::Conn& c = *db_;
  while (true) {
    ROTA_ASSIGN_OR_RETURN(pg::Result r, c.Exec("follow the journal",
                                              "SELECT seq, body, crc FROM rota_events WHERE seq > $1::bigint"
                                              " ORDER BY seq LIMIT 5000",
                                              {std::to_string(seq)}));
    if (r.rows() > 0 && static_cast<uint64_t>(r.int64(0, 0)) != seq + 1) {
      return DataLossError(c.Where() + ": journal events after " + std::to_string(seq) +
                           " were compacted into a snapshot; replay from the snapshot");
    }
    if (r.rows() == 0) {
      ROTA_ASSIGN_OR_RETURN(pg::Result s, c.Exec("follow the journal", "SELECT max(seq) FROM rota_snapshots"));
      if (!s.null(0, 0) && static_cast<uint64_t>(s.int64(0, 0)) > seq) {
        return DataLossError(c.Where() + ": journal events after " + std::to_string(seq) +
                             " were compacted into a snapshot; replay from the snapshot");
      }
      if (seq > last_seq_) last_seq_ = seq;
      return seq;
    }
    for (int i = 0; i < r.rows(); ++i) {
      const auto at = static_cast<uint64_t>(r.int64(i, 0));
      if (at != seq + 1) return DataLossError(c.Where() + ": journal event " + std::to_string(seq + 1) + " is missing");
      std::string_view body = r.text(i, 1);
      if (r.int64(i, 2) != RecordCrc(at, body)) {
        return DataLossError(c.Where() + ": journal event " + std::to_string(at) + " fails its checksum");
      }
      ROTA_ASSIGN_OR_RETURN(Event e, api::DecodeEvent(body));
      ROTA_RETURN_IF_ERROR(fn(e));
      seq = at;
    }
  }
}

bool PgStore::WaitForAppend(Duration timeout) {
  std::lock_guard<std::mutex> lock(listen_mu_);
  pg::Conn& c = *listen_db_;
  if (!c.Ensure().ok()) {
    // The database is down: wait out the timeout here, so that a caller's
    // loop does not spin on reconnecting.
    std::this_thread::sleep_for(std::chrono::microseconds(timeout));
    return false;
  }
  auto drain = [&] {
    bool any = false;
    pg::Pq().PQconsumeInput(c.raw());
    while (PGnotify* n = pg::Pq().PQnotifies(c.raw())) {
      any = true;
      pg::Pq().PQfreemem(n);
    }
    return any;
  };
  if (drain()) return true;
  pollfd p{pg::Pq().PQsocket(c.raw()), POLLIN, 0};
  if (poll(&p, 1, static_cast<int>(timeout / 1000)) <= 0) return false;
  return drain();
}

Status PgStore::WriteSnapshot(uint64_t seq, const EventSource& compacted) {
  std::lock_guard<std::mutex> lock(snapshot_mu_);  // its own connection: the appender goes on
  pg::Conn& c = *snap_db_;
  const std::string at = std::to_string(seq);
  ROTA_RETURN_IF_ERROR(c.Exec("write snapshot", "BEGIN").status());
  auto run = [&]() -> Status {
    // The state is encoded between the parts' inserts, inside the
    // transaction: a pause of a few seconds there (a starved machine) is not
    // a vanished server. Not unbounded: a paused old leader's snapshot must
    // not hold its rows from the next one's for ever.
    ROTA_RETURN_IF_ERROR(c.Exec("write snapshot", "SET LOCAL idle_in_transaction_session_timeout = '30s'").status());
    // The parts as they are encoded (each its own short statement), then
    // the record that names them.
    ROTA_ASSIGN_OR_RETURN(
        int64_t parts, EncodeSnapshotParts(compacted, kSnapshotPartBytes, [&](int64_t part, std::string_view body) {
          const std::string text(body);
          return c.Exec("write snapshot",
                        "INSERT INTO rota_snapshot_parts (seq, part, body, crc)"
                        " VALUES ($1::bigint, $2::bigint, $3, $4::bigint)"
                        " ON CONFLICT (seq, part) DO UPDATE SET body = EXCLUDED.body, crc = EXCLUDED.crc",
                        {at, std::to_string(part), text, std::to_string(SnapshotPartCrc(seq, part, body))})
              .status();
        }));
    const std::string body = SnapshotHeader(parts);
    ROTA_RETURN_IF_ERROR(c.Exec("write snapshot",
                                "INSERT INTO rota_snapshots (seq, body, crc) VALUES ($1::bigint, $2, $3::bigint)"
                                " ON CONFLICT (seq) DO UPDATE SET body = EXCLUDED.body, crc = EXCLUDED.crc",
                                {at, body, std::to_string(RecordCrc(seq, body))})
                             .status());
    // The snapshot and the trim of the journal behind it commit together.
    ROTA_RETURN_IF_ERROR(c.Exec("write snapshot", "DELETE FROM rota_snapshots WHERE seq < $1::bigint", {at}).status());
    ROTA_RETURN_IF_ERROR(c.Exec("write snapshot",
                                "DELETE FROM rota_snapshot_parts WHERE seq < $1::bigint OR"
                                " (seq = $1::bigint AND part >= $2::bigint)",
                                {at, std::to_string(parts)})
                             .status());
    ROTA_RETURN_IF_ERROR(c.Exec("write snapshot", "DELETE FROM rota_events WHERE seq <= $1::bigint", {at}).status());
    // The fence last, so that an election waits on this transaction only
    // for its commit, not for the whole snapshot's writing.
    ROTA_RETURN_IF_ERROR(CheckFence(c));
    return c.Exec("write snapshot", "COMMIT").status();
  };
  Status s = run();
  if (!s.ok()) c.Rollback();
  return s;
}

StatusOr<std::optional<uint64_t>> PgStore::Kept(const std::string& name) {
  std::lock_guard<std::mutex> lock(mu_);
  ROTA_ASSIGN_OR_RETURN(pg::Result r, db_->Exec("read a kept value", "SELECT value FROM rota_meta WHERE key = $1",
                                                {"kept:" + name}));
  if (r.rows() == 0) return std::optional<uint64_t>();
  return std::optional<uint64_t>(static_cast<uint64_t>(r.int64(0, 0)));
}

StatusOr<uint64_t> PgStore::Keep(const std::string& name, uint64_t value) {
  // Written by whichever replica asks first; every other reads that one.
  // (Not fenced: it is only ever inserted where absent, never changed.)
  const std::string key = "kept:" + name;
  {
    std::lock_guard<std::mutex> lock(mu_);
    ROTA_RETURN_IF_ERROR(db_->Exec("keep a value",
                                   "INSERT INTO rota_meta (key, value) VALUES ($1, $2::bigint) ON CONFLICT (key) DO NOTHING",
                                   {key, std::to_string(value & uint64_t{INT64_MAX})})
                             .status());
  }
  ROTA_ASSIGN_OR_RETURN(const std::optional<uint64_t> kept, Kept(name));
  if (!kept) return DataLossError("rota_meta: '" + name + "' is not there after it was written");
  return *kept;
}

Status PgStore::PutToken(const TokenRecord& t) {
  // (libpq sends text parameters as C strings: a NUL would cut one short.)
  for (const std::string* field : {&t.hash, &t.user, &t.role, &t.node}) {
    if (field->find('\0') != std::string::npos) return InvalidArgumentError("token: a field holds a NUL character");
  }
  std::lock_guard<std::mutex> lock(mu_);
  pg::Conn& c = *db_;
  ROTA_RETURN_IF_ERROR(c.Exec("put token", "BEGIN").status());
  auto run = [&]() -> Status {
    ROTA_RETURN_IF_ERROR(CheckFence(c));
    ROTA_RETURN_IF_ERROR(c.Exec("put token",
                                "INSERT INTO rota_tokens (hash, username, role, node, created_at, expires_at, revoked)"
                                " VALUES ($1, $2, $3, $4, $5::bigint, $6::bigint, $7::boolean) ON CONFLICT (hash) DO UPDATE"
                                " SET username = EXCLUDED.username, role = EXCLUDED.role, node = EXCLUDED.node,"
                                " created_at = EXCLUDED.created_at, expires_at = EXCLUDED.expires_at,"
                                " revoked = EXCLUDED.revoked",
                                {t.hash, t.user, t.role, t.node, std::to_string(t.created_at),
                                 std::to_string(t.expires_at), t.revoked ? "true" : "false"})
                             .status());
    return c.Exec("put token", "COMMIT").status();
  };
  Status s = run();
  if (!s.ok()) c.Rollback();
  return s;
}

StatusOr<std::vector<TokenRecord>> PgStore::Tokens() {
  std::lock_guard<std::mutex> lock(mu_);
  ROTA_ASSIGN_OR_RETURN(pg::Result r, db_->Exec("read tokens",
                                               "SELECT hash, username, role, node, created_at, expires_at, revoked"
                                               " FROM rota_tokens ORDER BY created_at, hash"));
  std::vector<TokenRecord> out;
  for (int i = 0; i < r.rows(); ++i) {
    out.push_back({std::string(r.text(i, 0)), std::string(r.text(i, 1)), std::string(r.text(i, 2)),
                   std::string(r.text(i, 3)), r.int64(i, 4), r.int64(i, 5), r.text(i, 6) == "t"});
  }
  return out;
}

Status PgStore::PutUsage(const std::vector<UsageRecord>& records) {
  if (records.empty()) return Status::Ok();
  // One statement for the lot: arrays of the columns, unnested.
  std::string jobs = "{", attempts = "{", ended = "{";
  std::vector<std::string> bodies;
  for (size_t i = 0; i < records.size(); ++i) {
    const UsageRecord& r = records[i];
    const char* sep = i == 0 ? "" : ",";
    jobs += sep + std::to_string(r.job.value());
    attempts += sep + std::to_string(r.attempt);
    ended += sep + std::to_string(r.ended_at);
    bodies.push_back(api::EncodeUsage(r));
    if (bodies.back().find('\0') != std::string::npos) return InvalidArgumentError("usage record: holds a NUL character");
  }
  jobs += "}";
  attempts += "}";
  ended += "}";
  std::lock_guard<std::mutex> lock(usage_mu_);
  return usage_db_
      ->Exec("put usage",
             "INSERT INTO rota_usage (job, attempt, ended_at, body)"
             " SELECT * FROM unnest($1::bigint[], $2::int[], $3::bigint[], $4::text[]) ON CONFLICT (job, attempt) DO NOTHING",
             {jobs, attempts, ended, ArrayLiteral(bodies)})
      .status();
}

namespace {

// Usage records from a query's first column (one body a row).
StatusOr<std::vector<UsageRecord>> DecodeUsageRows(const pg::Result& r) {
  std::vector<UsageRecord> out;
  out.reserve(static_cast<size_t>(r.rows()));
  for (int i = 0; i < r.rows(); ++i) {
    ROTA_ASSIGN_OR_RETURN(UsageRecord u, api::DecodeUsage(r.text(i, 0)));
    out.push_back(std::move(u));
  }
  return out;
}

}  // namespace

StatusOr<std::vector<UsageRecord>> PgStore::Usage(TimePoint since, TimePoint until) {
  std::lock_guard<std::mutex> lock(usage_read_mu_);
  ROTA_ASSIGN_OR_RETURN(pg::Result r, usage_read_db_->Exec("read usage",
                                                     "SELECT body FROM rota_usage WHERE ended_at >= $1::bigint AND"
                                                     " ended_at < $2::bigint ORDER BY ended_at, job, attempt",
                                                     {std::to_string(since), std::to_string(until)}));
  return DecodeUsageRows(r);
}

StatusOr<std::vector<UsageRecord>> PgStore::UsageOfJob(JobId job) {
  std::lock_guard<std::mutex> lock(usage_read_mu_);
  ROTA_ASSIGN_OR_RETURN(pg::Result r, usage_read_db_->Exec("read usage",
                                                     "SELECT body FROM rota_usage WHERE job = $1::bigint ORDER BY attempt",
                                                     {std::to_string(job.value())}));
  return DecodeUsageRows(r);
}

StatusOr<int64_t> PgStore::DropUsage(TimePoint before) {
  std::lock_guard<std::mutex> lock(usage_mu_);
  ROTA_ASSIGN_OR_RETURN(pg::Result r, usage_db_->Exec("drop usage", "DELETE FROM rota_usage WHERE ended_at < $1::bigint",
                                                     {std::to_string(before)}));
  return r.affected();
}

Status PgStore::PutGpuHistory(const std::vector<GpuHistoryBlock>& blocks) {
  if (blocks.empty()) return Status::Ok();
  // The points as base64 text (the codec's bytes are binary), in one
  // statement for the lot; a later block replaces the stored one.
  std::vector<std::string> nodes, points;
  std::string gpus = "{", steps = "{", starts = "{";
  for (size_t i = 0; i < blocks.size(); ++i) {
    const GpuHistoryBlock& b = blocks[i];
    const char* sep = i == 0 ? "" : ",";
    nodes.push_back(b.node);
    if (b.node.find('\0') != std::string::npos) return InvalidArgumentError("gpu history: node: holds a NUL character");
    gpus += sep + std::to_string(b.gpu);
    steps += sep + std::to_string(b.step_s);
    starts += sep + std::to_string(b.start);
    points.push_back(Base64Encode(EncodeGpuPoints(b.points)));
  }
  gpus += "}";
  steps += "}";
  starts += "}";
  std::lock_guard<std::mutex> lock(usage_mu_);
  return usage_db_
      ->Exec("put gpu history",
             "INSERT INTO rota_gpu_history (node, gpu, step, start, points)"
             " SELECT * FROM unnest($1::text[], $2::int[], $3::int[], $4::bigint[], $5::text[])"
             " ON CONFLICT (node, gpu, step, start) DO UPDATE SET points = EXCLUDED.points",
             {ArrayLiteral(nodes), gpus, steps, starts, ArrayLiteral(points)})
      .status();
}

StatusOr<std::vector<GpuHistoryBlock>> PgStore::GpuHistory(const std::string& node, int32_t step_s, TimePoint since,
                                                           TimePoint until) {
  std::lock_guard<std::mutex> lock(usage_read_mu_);
  ROTA_ASSIGN_OR_RETURN(
      pg::Result r,
      usage_read_db_->Exec("read gpu history",
                      "SELECT node, gpu, start, points FROM rota_gpu_history WHERE ($1 = '' OR node = $1) AND"
                      " step = $2::int AND start >= $3::bigint AND start < $4::bigint ORDER BY node, gpu, start",
                      {node, std::to_string(step_s), std::to_string(since), std::to_string(until)}));
  std::vector<GpuHistoryBlock> out;
  out.reserve(static_cast<size_t>(r.rows()));
  for (int i = 0; i < r.rows(); ++i) {
    GpuHistoryBlock b;
    b.node = std::string(r.text(i, 0));
    b.gpu = static_cast<int32_t>(r.int64(i, 1));
    b.step_s = step_s;
    b.start = r.int64(i, 2);
    std::optional<std::string> bytes = Base64Decode(r.text(i, 3));
    auto points = bytes ? DecodeGpuPoints(*bytes, b.size()) : DataLossError("gpu history: points: not base64");
    if (!points.ok()) {  // one damaged block is skipped, not every read refused
      std::fprintf(stderr, "rota: rota_gpu_history: %s GPU %d at %lld skipped: %s\n", b.node.c_str(), b.gpu,
                   static_cast<long long>(b.start), points.status().ToString().c_str());
      continue;
    }
    b.points = std::move(*points);
    out.push_back(std::move(b));
  }
  return out;
}

StatusOr<int64_t> PgStore::DropGpuHistory(int32_t step_s, TimePoint before) {
  std::lock_guard<std::mutex> lock(usage_mu_);
  ROTA_ASSIGN_OR_RETURN(pg::Result r,
                        usage_db_->Exec("drop gpu history",
                                        "DELETE FROM rota_gpu_history WHERE step = $1::int AND start < $2::bigint",
                                        {std::to_string(step_s), std::to_string(before)}));
  return r.affected();
}

// ---- the lease ----

PgLease::PgLease(std::unique_ptr<pg::Conn> db, std::string holder, std::string instance)
    : db_(std::move(db)), holder_(std::move(holder)), instance_(std::move(instance)) {}
PgLease::~PgLease() = default;

StatusOr<std::unique_ptr<PgLease>> PgLease::Open(const std::string& conninfo, std::string holder, Duration lease) {
  ROTA_RETURN_IF_ERROR(pg::LoadLibpq());
  auto db = std::make_unique<pg::Conn>(conninfo, LeaseSettings(lease),
                                       static_cast<int>(std::max<int64_t>(lease / 2000, 200)));
  ROTA_RETURN_IF_ERROR(EnsureSchema(*db));
  return std::unique_ptr<PgLease>(new PgLease(std::move(db), std::move(holder), RandomHex(16)));
}

StatusOr<int64_t> PgLease::TryAcquire(Duration lease, bool at_startup) {
  // Expired, or held at this address by this process (it stepped down), or
  // by an earlier process at this address, on this process's first try (it
  // bound the port: that one is gone).
  ROTA_ASSIGN_OR_RETURN(
      pg::Result r,
      db_->Exec("take the lease",
                "INSERT INTO rota_leader (id, epoch, holder, expires_at, instance)"
                " VALUES (1, 1, $1, clock_timestamp() + $2::bigint * interval '1 microsecond', $4)"
                " ON CONFLICT (id) DO UPDATE SET epoch = rota_leader.epoch + 1, holder = EXCLUDED.holder,"
                " expires_at = EXCLUDED.expires_at, instance = EXCLUDED.instance"
                " WHERE rota_leader.expires_at < clock_timestamp()"
                " OR (rota_leader.holder = EXCLUDED.holder AND (rota_leader.instance = EXCLUDED.instance OR $3::boolean))"
                " RETURNING epoch",
                {holder_, std::to_string(lease), at_startup ? "true" : "false", instance_}));
  return r.rows() == 1 ? r.int64(0, 0) : int64_t{0};
}

StatusOr<bool> PgLease::Renew(int64_t epoch, Duration lease) {
  ROTA_ASSIGN_OR_RETURN(pg::Result r,
                        db_->Exec("renew the lease",
                                  "UPDATE rota_leader SET expires_at = clock_timestamp() + $2::bigint * interval '1 microsecond'"
                                  " WHERE id = 1 AND epoch = $1::bigint RETURNING 1",
                                  {std::to_string(epoch), std::to_string(lease)}));
  return r.rows() == 1;
}

Status PgLease::Release(int64_t epoch) {
  return db_->Exec("release the lease",
                   "UPDATE rota_leader SET expires_at = clock_timestamp() - interval '1 second'"
                   " WHERE id = 1 AND epoch = $1::bigint",
                   {std::to_string(epoch)})
      .status();
}

StatusOr<LeaderInfo> PgLease::Current() {
  ROTA_ASSIGN_OR_RETURN(pg::Result r,
                        db_->Exec("read the lease",
                                  "SELECT epoch, holder, (extract(epoch FROM expires_at - clock_timestamp()) * 1000000)::bigint"
                                  " FROM rota_leader WHERE id = 1"));
  if (r.rows() == 0) return LeaderInfo{};
  return LeaderInfo{r.int64(0, 0), std::string(r.text(0, 1)), r.int64(0, 2)};
}

Status PgLease::Report(const std::string& role, uint64_t seq) {
  return db_->Exec("report this replica",
                   "INSERT INTO rota_replicas (url, role, seq, seen_at) VALUES ($1, $2, $3::bigint, clock_timestamp())"
                   " ON CONFLICT (url) DO UPDATE SET role = EXCLUDED.role, seq = EXCLUDED.seq, seen_at = EXCLUDED.seen_at",
                   {holder_, role, std::to_string(seq)})
      .status();
}

StatusOr<std::vector<ReplicaRow>> PgLease::Replicas() {
  ROTA_ASSIGN_OR_RETURN(pg::Result r,
                        db_->Exec("read the replicas",
                                  "SELECT url, role, seq, (extract(epoch FROM clock_timestamp() - seen_at) * 1000000)::bigint"
                                  " FROM rota_replicas WHERE seen_at > clock_timestamp() - interval '1 minute' ORDER BY url"));
  std::vector<ReplicaRow> out;
  for (int i = 0; i < r.rows(); ++i) {
    out.push_back({std::string(r.text(i, 0)), std::string(r.text(i, 1)), static_cast<uint64_t>(r.int64(i, 2)),
                   r.int64(i, 3)});
  }
  return out;
}

}  // namespace rota
