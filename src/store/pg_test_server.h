// TestPostgres: a real PostgreSQL server for tests, started with initdb and
// pg_ctl in a fresh temporary directory on a free loopback port, and stopped
// (and its directory removed) when the object goes. Run as root (CI), the
// server runs as the `postgres` account, since PostgreSQL refuses root.
//
// Header-only and free of rota's own headers, so that both the store's unit
// tests and the integration tests (which drive the rota binary) use it.
//
// Example:
//   std::string error;
//   auto pg = TestPostgres::Start(&error);
//   ASSERT_TRUE(pg) << error;
//   auto store = PgStore::Open(pg->CreateDatabase("t1"));
#pragma once

#include <netinet/in.h>
#include <pwd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>

namespace rota {

class TestPostgres {
 public:
  static std::unique_ptr<TestPostgres> Start(std::string* error) {
    std::unique_ptr<TestPostgres> pg(new TestPostgres);
    pg->bin_ = FindBinDir();
    if (pg->bin_.empty()) {
      *error = "no PostgreSQL server binaries under /usr/lib/postgresql/*/bin (apt-get install postgresql)";
      return nullptr;
    }
    char tmpl[] = "/tmp/rota-pg-XXXXXX";
    if (mkdtemp(tmpl) == nullptr) {
      *error = "mkdtemp failed";
      return nullptr;
    }
    pg->dir_ = tmpl;
    if (geteuid() == 0) {
      if (getpwnam("postgres") == nullptr) {
        *error = "running as root, and there is no postgres account to run PostgreSQL as";
        return nullptr;
      }
      pg->as_ = "runuser -u postgres -- ";
      if (std::system(("chown postgres " + pg->dir_).c_str()) != 0) {
        *error = "cannot chown " + pg->dir_ + " to postgres";
        return nullptr;
      }
    }
    pg->port_ = FreePort();
    if (!pg->Run(pg->bin_ + "/initdb -D " + pg->dir_ + "/data -A trust -U rota -E UTF8 --no-sync > " + pg->dir_ +
                 "/initdb.log 2>&1")) {
      *error = "initdb failed (see " + pg->dir_ + "/initdb.log)";
      return nullptr;
    }
    if (!pg->StartServer()) {
      *error = "pg_ctl start failed (see " + pg->dir_ + "/server.log)";
      return nullptr;
    }
    return pg;
  }

  ~TestPostgres() {
    if (!bin_.empty() && !dir_.empty()) Stop();
    if (!dir_.empty()) {
      std::error_code ec;
      std::filesystem::remove_all(dir_, ec);
    }
  }

  int port() const { return port_; }

  // A loopback TCP port nothing listens on now (tests start servers on it).
  static int FreePort() {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
    socklen_t len = sizeof(addr);
    getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
    close(fd);
    return ntohs(addr.sin_port);
  }


  const std::string& dir() const { return dir_; }

  // A libpq connection string for database `db`.
  std::string Conninfo(const std::string& db) const {
    return "host=127.0.0.1 port=" + std::to_string(port_) + " user=rota dbname=" + db + " connect_timeout=5";
  }

  // Creates an empty database `db` and returns its connection string.
  std::string CreateDatabase(const std::string& db) {
    Sql("postgres", "CREATE DATABASE " + db);
    return Conninfo(db);
  }

  // Runs `sql` with psql on database `db`; true if it succeeded.
  bool Sql(const std::string& db, const std::string& sql) {
    return std::system((bin_ + "/psql -X -q -h 127.0.0.1 -p " + std::to_string(port_) + " -U rota -d " + db +
                        " -v ON_ERROR_STOP=1 -c \"" + sql + "\" >/dev/null 2>&1")
                           .c_str()) == 0;
  }

  // A streaming replica of this server (pg_basebackup -R), started on its
  // own port, made synchronous: from then on a commit returns only once the
  // replica has it. Null (and *error) if it cannot be made.
  std::unique_ptr<TestPostgres> StartSynchronousReplica(std::string* error) {
    std::unique_ptr<TestPostgres> r(new TestPostgres);
    r->bin_ = bin_;
    r->as_ = as_;
    char tmpl[] = "/tmp/rota-pg-replica-XXXXXX";
    if (mkdtemp(tmpl) == nullptr) {
      *error = "mkdtemp failed";
      return nullptr;
    }
    r->dir_ = tmpl;
    if (!as_.empty() && std::system(("chown postgres " + r->dir_).c_str()) != 0) {
      *error = "cannot chown " + r->dir_;
      return nullptr;
    }
    r->port_ = FreePort();
    if (!r->Run(bin_ + "/pg_basebackup -h 127.0.0.1 -p " + std::to_string(port_) + " -U rota -D " + r->dir_ +
                "/data -R -X stream -c fast > " + r->dir_ + "/basebackup.log 2>&1")) {
      *error = "pg_basebackup failed (see " + r->dir_ + "/basebackup.log)";
      return nullptr;
    }
    if (!r->StartServer()) {
      *error = "the replica did not start (see " + r->dir_ + "/server.log)";
      return nullptr;
    }
    if (!Sql("postgres", "ALTER SYSTEM SET synchronous_standby_names = '*'") || !Sql("postgres", "SELECT pg_reload_conf()")) {
      *error = "cannot make the replica synchronous";
      return nullptr;
    }
    // Synchronous from here on: the primary says so.
    for (int i = 0; i < 200; ++i) {
      if (Sql("postgres", "DO \\$\\$ BEGIN IF NOT EXISTS (SELECT 1 FROM pg_stat_replication WHERE sync_state = 'sync')"
                          " THEN RAISE EXCEPTION 'not yet'; END IF; END \\$\\$")) {
        return r;
      }
      usleep(50 * 1000);
    }
    *error = "the replica never became synchronous";
    return nullptr;
  }

  // A replica becomes the primary.
  bool Promote() { return Run(bin_ + "/pg_ctl -D " + dir_ + "/data -w promote >/dev/null 2>&1"); }

  // Stops the server at once (like a crash: no checkpoint), then starts it.
  bool Restart() {
    Stop();
    return StartServer();
  }

  void Stop() { Run(bin_ + "/pg_ctl -D " + dir_ + "/data -m immediate -w stop >/dev/null 2>&1"); }

  bool StartServer() {
    return Run(bin_ + "/pg_ctl -D " + dir_ + "/data -w -t 30 -l " + dir_ + "/server.log -o \"-p " +
               std::to_string(port_) + " -k " + dir_ + " -c listen_addresses=127.0.0.1 -c max_connections=200\" start" +
               " >/dev/null 2>&1");
  }

 private:
  TestPostgres() = default;

  bool Run(const std::string& command) { return std::system((as_ + command).c_str()) == 0; }

  static std::string FindBinDir() {
    std::string best;
    std::error_code ec;
    for (const auto& entry : std::filesystem::directory_iterator("/usr/lib/postgresql", ec)) {
      const std::string bin = entry.path().string() + "/bin";
      if (std::filesystem::exists(bin + "/initdb") && bin > best) best = bin;
    }
    return best;
  }

  std::string bin_, dir_, as_;
  int port_ = 0;
};

}  // namespace rota
