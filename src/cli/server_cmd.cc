#include "cli/server_cmd.h"

#include <fcntl.h>
#include <pwd.h>
#include <sys/file.h>
#include <sys/resource.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstring>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <thread>

#include "agent/agent.h"
#include "agent/launcher.h"
#include "agent/nvml.h"
#include "api/agent_protocol.h"
#include "api/yaml_codec.h"
#include "cli/client.h"
#include "server/http_api.h"
#include "server/replica.h"
#include "server/router.h"
#include "server/services.h"
#include "store/pg_store.h"
#include "store/sqlite_store.h"

namespace rota::cli {
namespace {

constexpr const char* kServerUsage =
    "usage: rota server [--data-dir DIR] [--listen HOST:PORT] [--config CLUSTER.yaml]\n"
    "                   [--tls-cert FILE --tls-key FILE] [--rate-limit N] [--node-timeout 30s]\n"
    "                   [--fence-after DURATION (default: the node timeout)]\n"
    "                   [--min-runtime 10m] [--history-interval 10s]\n"
    "                   [--idle-after 30m] [--idle-utilization 5] [--usage-retention 400d]\n"
    "                   [--job-retention 14d] [--gpu-history-minutes 8d] [--gpu-history-hours 400d]\n"
    "                   [--store sqlite | postgres://USER@HOST:PORT/DB] [--advertise URL] [--lease 3s]\n"
    "                   [--router HOST:PORT | off (default: off)] [--router-buffer 256Mi]\n"
    "\n"
    "--router: the services' stable endpoint, a reverse proxy: http://HOST:PORT/NAME/...\n"
    "goes to a ready replica of service NAME (docs/services.md); with --store postgres the\n"
    "leader runs it (a fixed port: each replica's own address). --router-buffer: the\n"
    "request and answer bodies it holds at once, in all; past it a request gets 503.\n"
    "\n"
    "--store postgres://...: the journal lives in PostgreSQL, and several servers\n"
    "may share it: one leads (a lease in the database, fenced by its epoch), the\n"
    "others stand by, answer 503 naming the leader, and take over when its lease\n"
    "runs out. --advertise is the URL clients reach this server at (default: the\n"
    "--listen address). Keep the password out of the URL: libpq reads PGPASSWORD\n"
    "or ~/.pgpass (a URL with a password in it is refused).\n";
constexpr const char* kUpUsage =
    "usage: rota up [--data-dir DIR] [--listen HOST:PORT] [--config CLUSTER.yaml]\n"
    "               [--gpus COUNTxMODEL[:MEMORY]] [--mig LAYOUT [--mig-gpus N]] [--name NODE]\n"
    "               [--nvlink-islands N] [--oci-runtime auto|runc|crun] [--device-dir /dev] [--disk-reserve 64Mi]\n"
    "               [--task-pids-max 32768] [--min-runtime 10m] [--idle-after 30m] [--idle-utilization 5] [--usage-retention 400d]\n"
    "               [--job-retention 14d] [--gpu-history-minutes 8d] [--gpu-history-hours 400d]\n"
    "               [--node-timeout 30s] [--fence-after DURATION]\n"
    "               [--router HOST:PORT | off (default: 127.0.0.1:7071; skipped if taken)] [--router-buffer 256Mi]\n"
    "\n"
    "Runs the server and a local agent in one process, with an embedded SQLite\n"
    "store in DIR (default $ROTA_DATA_DIR or ~/.local/share/rota). Without an\n"
    "NVIDIA driver the agent declares a simulated inventory (default 8xH100:80Gi).\n";
constexpr const char* kAgentUsage =
    "usage: rota agent --server URL --token-file FILE [--name NODE] [--address ADDR]\n"
    "                  [--gpus COUNTxMODEL[:MEMORY]] [--mig LAYOUT [--mig-gpus N]] [--nvlink-islands N]\n"
    "                  [--logs-dir DIR] [--label k=v ...] [--oci-runtime auto|runc|crun]\n"
    "                  [--heartbeat-ms N] [--meter-ms 1000] [--transport watch|poll] [--health-file FILE]\n"
    "                  [--device-dir /dev] [--state-dir DIR] [--disk-reserve 64Mi] [--task-pids-max 32768]\n"
    "                  [--ca-cert FILE | --insecure-skip-tls-verify] [--cgroup-root DIR|none]\n"
    "                  [--allow-unisolated-gpus]\n"
    "       (an https server's certificate is verified against --ca-cert, a PEM file of the CA\n"
    "        that signed it or of the server's own certificate, else the system's CAs)\n"
    "       (--heartbeat-ms: default the server's interval, its node timeout / 3;\n"
    "        --transport poll: long-poll the heartbeat for new work instead of watching;\n"
    "        --meter-ms: the GPU meter's sampling interval, 0 = off;\n"
    "        --disk-reserve: free space the state and logs directories keep; below it the\n"
    "        server drains the node until it clears, 0 = off;\n"
    "        --task-pids-max: the processes and threads one task may hold at once, 0 = no limit;\n"
    "        --cgroup-root: where tasks' groups go (default /sys/fs/cgroup; none: no limits);\n"
    "        --allow-unisolated-gpus: run other accounts' tasks where no device controller can\n"
    "        keep them off the GPUs they were not given; by default they do not start)\n"
    "       (the token comes from --token-file or $ROTA_TOKEN, never the command line,\n"
    "        where every user of the node could read it)\n"
    "       rota agent --probe [--gpus ...]   (print what this node would register, and one telemetry sample)\n";

// The value after args[*i] (and moves *i to it), or exits with usage error 2.
std::string FlagValue(const std::vector<std::string>& args, size_t* i, const char* program) {
  if (*i + 1 >= args.size()) {
    std::cerr << program << ": " << args[*i] << " needs a value\n";
    std::exit(kExitBadInput);
  }
  return args[++*i];
}

// --disk-reserve's value (a size such as 64Mi, or 0: off) in MiB, or exits
// with usage error 2.
int64_t DiskReserveFlag(const std::vector<std::string>& args, size_t* i, const char* program) {
  const std::string text = FlagValue(args, i, program);
  StatusOr<MemoryMiB> mib = text == "0" ? StatusOr<MemoryMiB>(MemoryMiB{0}) : ParseMemoryMiB(text);
  if (!mib.ok() || *mib < 0 || (*mib == 0 && text != "0")) {
    std::cerr << program << ": --disk-reserve must be a size of at least 1Mi (e.g. 64Mi, 1Gi) or 0, got '" << text
              << "'\n";
    std::exit(kExitBadInput);
  }
  return *mib;
}

// --task-pids-max's value (0: no limit; else at least 16, so that a shell
// and what it runs fit), or exits with usage error 2.
int64_t PidsFlag(const std::vector<std::string>& args, size_t* i, const char* program) {
  const std::string text = FlagValue(args, i, program);
  int64_t n = -1;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), n);
  if (ec != std::errc() || end != text.data() + text.size() || (n != 0 && (n < 16 || n > 4194304))) {
    std::cerr << program << ": --task-pids-max must be 0 (no limit) or 16..4194304, got '" << text << "'\n";
    std::exit(kExitBadInput);
  }
  return n;
}

// A duration flag (e.g. --node-timeout 30s), or exits with usage error 2.
Duration DurationFlag(const std::vector<std::string>& args, size_t* i, const char* program) {
  const std::string flag = args[*i];
  auto d = ParseDuration(FlagValue(args, i, program));
  if (!d.ok() || *d < 0) {
    std::cerr << program << ": " << flag << ": " << (d.ok() ? "must not be negative" : d.status().message()) << "\n";
    std::exit(kExitBadInput);
  }
  return *d;
}

// Blocks until SIGINT or SIGTERM. REQUIRES: both blocked in every thread.
void WaitForSignal() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  int sig = 0;
  sigwait(&set, &sig);
}

void BlockSignals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigaddset(&set, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
  signal(SIGPIPE, SIG_IGN);
}

// `secret` and a newline to `path` (0600), whole or not at all: every write
// checked (a full disk's ENOSPC), synced before the rename that puts it in
// place, and the directory synced after it.
Status WriteSecret(const std::string& path, const std::string& secret) {
  const std::string tmp = path + ".tmp";
  auto failed = [&](const std::string& what, int fd) {
    const int err = errno;
    if (fd >= 0) close(fd);
    unlink(tmp.c_str());
    return UnavailableError(what + ": cannot write: " + std::strerror(err));
  };
  const int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) return failed(tmp, -1);
  const std::string text = secret + "\n";
  for (size_t done = 0; done < text.size();) {
    const ssize_t n = write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n == 0) errno = EIO;  // (write made no progress: errno says nothing)
    if (n <= 0) return failed(tmp, fd);
    done += static_cast<size_t>(n);
  }
  if (fchmod(fd, 0600) != 0 || fsync(fd) != 0) return failed(tmp, fd);
  if (close(fd) != 0) return failed(tmp, -1);
  if (rename(tmp.c_str(), path.c_str()) != 0) return failed(path, -1);
  const std::string dir = std::filesystem::path(path).parent_path().string();
  if (const int d = open(dir.empty() ? "." : dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC); d >= 0) {
    fsync(d);
    close(d);
  }
  return Status::Ok();
}

std::string ReadFirstLine(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  while (!line.empty() && (line.back() == '\n' || line.back() == '\r' || line.back() == ' ')) line.pop_back();
  return line;
}

bool SplitListen(const std::string& listen, std::string* host, int* port) {
  const size_t colon = listen.rfind(':');
  if (colon == std::string::npos) return false;
  *host = listen.substr(0, colon);
  try {
    *port = std::stoi(listen.substr(colon + 1));
  } catch (...) {
    return false;
  }
  return *port >= 0 && *port < 65536 && !host->empty();
}

// MIG flags of a declared inventory: --mig LAYOUT (e.g. 3g.40gb,3g.40gb) and
// --mig-gpus N (the first N GPUs; default all).
struct MigFlags {
  bool set = false;
  std::string layout;
  int32_t gpus = -1;
  int32_t islands = 0;  // --nvlink-islands N of a declared inventory (0 = not given)
};

StatusOr<agent::Inventory> LocalInventory(const std::string& gpus_flag, const MigFlags& mig = {}) {
  StatusOr<agent::Inventory> inv = InternalError("unset");
  if (gpus_flag.empty()) {
    inv = agent::DiscoverNvml();
    if (!inv.ok()) {
      std::cerr << "rota: " << inv.status().message() << "; declaring a simulated inventory (--gpus 8xH100:80Gi)\n";
      inv = agent::ParseGpuFlag("8xH100:80Gi");
    }
  } else {
    inv = agent::ParseGpuFlag(gpus_flag);
  }
  if (inv.ok() && mig.set) ROTA_RETURN_IF_ERROR(agent::DeclareMig(&*inv, mig.layout, mig.gpus));
  if (inv.ok() && mig.islands != 0) {
    if (!inv->simulated) return InvalidArgumentError("--nvlink-islands: NVML reports this machine's NVLink islands");
    if (mig.islands < 1 || inv->gpus % mig.islands != 0) {
      return InvalidArgumentError("--nvlink-islands: " + std::to_string(inv->gpus) + " GPUs do not split into " +
                                  std::to_string(mig.islands) + " equal islands");
    }
    inv->nvlink_islands = mig.islands;
  }
  if (!inv.ok() || mig.set || mig.gpus < 0) return inv;
  return InvalidArgumentError("--mig-gpus: set --mig too (the MIG layout of those GPUs)");
}

// The account this process runs as ("uid N" where NSS has no name for it).
std::string UnixUserName() {
  struct passwd pw {};
  struct passwd* found = nullptr;
  char buf[4096];
  if (getpwuid_r(geteuid(), &pw, buf, sizeof(buf), &found) == 0 && found != nullptr) return pw.pw_name;
  return "uid " + std::to_string(geteuid());
}

std::string HostName() {
  char buf[256] = {};
  gethostname(buf, sizeof(buf) - 1);
  return buf;
}

// Writes the bootstrap admin token (made only while the store has no
// tokens) to DATA_DIR/admin.token and says where.
Status WriteAdminToken(server::Controller& controller, const std::string& data_dir) {
  const std::string path = data_dir + "/admin.token";
  ROTA_ASSIGN_OR_RETURN(std::string admin, controller.BootstrapAdminToken([&](const std::string& token) {
    return WriteSecret(path, token);  // (before the store has it)
  }));
  if (admin.empty()) return Status::Ok();
  std::cout << "rota: admin token written to " << path << " (mode 0600)" << std::endl;
  return Status::Ok();
}

// A replica's term: the controller following the store, the API in standby
// mode on it, then (once) the same controller leading.
// One term of a replica: its controller and API, and, while it leads, the
// services' router and autoscalers (a standby neither listens as the router
// nor scales: the leader's router is the services' endpoint, as its API is
// the clients').
class ReplicaTerm final : public server::Term {
 public:
  ReplicaTerm(std::unique_ptr<server::Controller> controller, std::unique_ptr<server::Router> router,
              std::unique_ptr<server::ServiceManager> services, std::string data_dir, std::string advertise)
      : controller_(std::move(controller)),
        router_(std::move(router)),
        services_(std::move(services)),
        data_dir_(std::move(data_dir)),
        advertise_(std::move(advertise)) {}
  // The API serves from the standby's first moment (it answers reads and
  // names the leader): started after the term is made, with its services.
  void Serve(std::unique_ptr<server::HttpServer> http) { http_ = std::move(http); }
  server::ServiceManager* services() { return services_.get(); }

  Status CatchUp() override { return controller_->CatchUp(); }
  Status ReloadTokens() override { return controller_->ReloadTokens(); }
  Status Lead(int64_t) override {
    ROTA_RETURN_IF_ERROR(controller_->Start());
    ROTA_RETURN_IF_ERROR(WriteAdminToken(*controller_, data_dir_));
    if (router_ != nullptr) {
      if (auto port = router_->Start(); port.ok()) {
        std::cout << "rota: services' router listening on port " << *port << std::endl;
      } else {
        std::cerr << "rota: warning: " << port.status().message() << "; services get no endpoint on this leader\n";
      }
    }
    services_->Start();
    std::cout << "rota: serving " << advertise_ << " as the leader" << std::endl;
    return Status::Ok();
  }
  // The API first (its handlers call the services and the router), then
  // what it called.
  void Stop() override {
    if (http_ != nullptr) http_->Stop();
    services_->Stop();
    if (router_ != nullptr) router_->Stop();
    controller_->Stop();
  }

 private:
  std::unique_ptr<server::Controller> controller_;
  std::unique_ptr<server::Router> router_;
  std::unique_ptr<server::ServiceManager> services_;
  std::unique_ptr<server::HttpServer> http_;
  std::string data_dir_, advertise_;
};

// `rota server --store postgres://...`: one replica of several on one
// database (server/replica.h), until SIGINT or SIGTERM.
int ReplicatedServer(const std::string& conninfo, std::string advertise, Duration lease,
                     const server::ControllerOptions& options, const server::HttpOptions& http,
                     const std::optional<server::RouterOptions>& router, const std::string& data_dir) {
  const std::string scheme = http.tls_cert.empty() ? "http" : "https";
  if (advertise.empty()) {
    const std::string host = http.host == "0.0.0.0" || http.host == "::" ? HostName() : http.host;
    advertise = scheme + "://" + host + ":" + std::to_string(http.port);
  }
  if (http.port == 0) {
    std::cerr << "rota: --store postgres: --listen needs a fixed port (it is the replica's address)\n";
    return kExitBadInput;
  }
  // The tasks' lease on their agents runs from the last answered heartbeat
  // (every fence / 3) and warns them (the checkpoint signal) at half the
  // fence: a failover (a lease, a lease check, a reconnect) must fit in
  // what is left.
  const Duration fence = options.fence_after > 0 ? options.fence_after : options.node_timeout;
  if (lease * 7 / 6 + kMicrosPerSecond > fence / 6) {
    // (The rule above, solved for the lease, and for the fence.)
    const Duration most = (fence / 6 - kMicrosPerSecond) * 6 / 7 / 100'000 * 100'000;  // (down to a tenth of a second)
    const Duration least = ((lease * 7 / 6 + kMicrosPerSecond) * 6 + kMicrosPerSecond - 1) / kMicrosPerSecond * kMicrosPerSecond;
    std::cerr << "rota: warning: --lease " << FormatDuration(lease) << " is long for a fence of " << FormatDuration(fence)
              << ": tasks may get their checkpoint signal during a failover ("
              << (most >= 500 * 1000 ? "keep --lease at most " + FormatDuration(most) + ", or " : std::string())
              << "raise --node-timeout (or --fence-after) to " << FormatDuration(least) << " or more)\n";
  }
  server::Replica replica({.conninfo = conninfo, .advertise = advertise, .lease = lease});
  std::thread signals([&] {
    WaitForSignal();
    std::cout << "rota: shutting down" << std::endl;
    replica.Shutdown();
  });
  std::cout << "rota: replica " << advertise << " on PostgreSQL (data in " << data_dir << "), standing by" << std::endl;
  Status run = replica.Run([&](std::unique_ptr<PgStore> store) -> StatusOr<std::unique_ptr<server::Term>> {
    auto controller = std::make_unique<server::Controller>(options, std::move(store));
    ROTA_RETURN_IF_ERROR(controller->StartFollowing());
    std::unique_ptr<server::Router> proxy = router ? std::make_unique<server::Router>(*router) : nullptr;
    auto services = std::make_unique<server::ServiceManager>(controller.get(), proxy.get());
    server::Controller* c = controller.get();
    auto term = std::make_unique<ReplicaTerm>(std::move(controller), std::move(proxy), std::move(services), data_dir,
                                              advertise);
    server::HttpOptions api = http;
    api.logs_dir = data_dir + "/logs";
    api.replica = &replica;
    api.services = term->services();
    if (router) api.router_url = "http://" + router->host + ":" + std::to_string(router->port);
    ROTA_ASSIGN_OR_RETURN(std::unique_ptr<server::HttpServer> server, server::StartHttpServer(c, api));
    term->Serve(std::move(server));
    return std::unique_ptr<server::Term>(std::move(term));
  });
  if (!run.ok()) {
    std::cerr << "rota: " << run.message() << "\n";
    std::exit(kExitError);  // the signal thread waits in sigwait: end the process from here
  }
  signals.join();
  return kExitOk;
}

// Every task starts through rota-shim (agent::CheckShim): an agent without
// it could start nothing, so it does not start.
bool ShimInstalled(const char* who) {
  const Status s = agent::CheckShim(agent::DefaultShimPath());
  if (!s.ok()) std::cerr << who << ": " << s.message() << "\n";
  return s.ok();
}

}  // namespace

int ServerMain(std::vector<std::string> args, bool with_local_agent) {
  std::string data_dir = DefaultDataDir(), listen = "127.0.0.1:7070", config_path, gpus, name, tls_cert, tls_key;
  double rate = 200;
  MigFlags mig;
  std::string oci_runtime = "auto", device_dir;
  int64_t disk_reserve_mib = agent::AgentOptions().disk_reserve_mib;
  int64_t task_pids_max = agent::AgentOptions().task_pids_max;
  Duration node_timeout = 30 * kMicrosPerSecond;
  Duration fence_after = 0;  // = node_timeout
  Duration min_runtime = 10 * 60 * kMicrosPerSecond;
  Duration idle_after = 30 * 60 * kMicrosPerSecond;  // right-sizing window
  Duration usage_retention = 400LL * 24 * 3600 * kMicrosPerSecond;  // accounting records kept
  Duration job_retention = 14LL * 24 * 3600 * kMicrosPerSecond;     // ended jobs kept in the state
  Duration gpu_minutes = 8LL * 24 * 3600 * kMicrosPerSecond;         // per-GPU minute points kept
  Duration gpu_hours = 400LL * 24 * 3600 * kMicrosPerSecond;         // per-GPU hour points kept
  int32_t idle_pct = 5;
  Duration history_interval = 10 * kMicrosPerSecond;  // queue usage samples for the dashboard
  std::string store_url = "sqlite", advertise;
  Duration lease = 3 * kMicrosPerSecond;
  std::string router_listen = with_local_agent ? "127.0.0.1:7071" : "off";
  bool router_given = false;
  std::string router_buffer;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    auto value = [&] { return FlagValue(args, &i, "rota"); };
    if (a == "--data-dir") data_dir = value();
    else if (a == "--listen") listen = value();
    else if (a == "--config") config_path = value();
    else if (a == "--tls-cert") tls_cert = value();
    else if (a == "--tls-key") tls_key = value();
    else if (a == "--rate-limit") rate = std::atof(value().c_str());
    else if (a == "--min-runtime") min_runtime = DurationFlag(args, &i, "rota");
    else if (a == "--idle-after") idle_after = DurationFlag(args, &i, "rota");
    else if (a == "--usage-retention") usage_retention = DurationFlag(args, &i, "rota");
    else if (a == "--job-retention") job_retention = DurationFlag(args, &i, "rota");
    else if (a == "--gpu-history-minutes") gpu_minutes = DurationFlag(args, &i, "rota");
    else if (a == "--gpu-history-hours") gpu_hours = DurationFlag(args, &i, "rota");
    else if (a == "--idle-utilization") {
      const std::string v = value();
      auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), idle_pct);
      if (ec != std::errc() || end != v.data() + v.size()) idle_pct = -1;  // refused below
    }
    else if (a == "--node-timeout") node_timeout = DurationFlag(args, &i, "rota");
    else if (a == "--fence-after") fence_after = DurationFlag(args, &i, "rota");
    else if (a == "--history-interval") history_interval = DurationFlag(args, &i, "rota");
    else if (a == "--router") router_listen = value(), router_given = true;
    else if (a == "--router-buffer") router_buffer = value();
    else if (!with_local_agent && a == "--store") store_url = value();
    else if (!with_local_agent && a == "--advertise") advertise = value();
    else if (!with_local_agent && a == "--lease") lease = DurationFlag(args, &i, "rota");
    else if (with_local_agent && a == "--gpus") gpus = value();
    else if (with_local_agent && a == "--mig") mig.set = true, mig.layout = value();
    else if (with_local_agent && a == "--mig-gpus") mig.gpus = std::atoi(value().c_str());
    else if (with_local_agent && a == "--nvlink-islands") mig.islands = std::atoi(value().c_str());
    else if (with_local_agent && a == "--oci-runtime") oci_runtime = value();
    else if (with_local_agent && a == "--name") name = value();
    else if (with_local_agent && a == "--device-dir") device_dir = value();
    else if (with_local_agent && a == "--disk-reserve") disk_reserve_mib = DiskReserveFlag(args, &i, "rota");
    else if (with_local_agent && a == "--task-pids-max") task_pids_max = PidsFlag(args, &i, "rota");
    else if (a == "-h" || a == "--help") {
      std::cout << (with_local_agent ? kUpUsage : kServerUsage);
      return kExitOk;
    } else {
      std::cerr << "rota: unknown argument '" << a << "'\n" << (with_local_agent ? kUpUsage : kServerUsage);
      return kExitBadInput;
    }
  }
  // Absolute: tasks run elsewhere (their job's work directory), and are
  // handed paths below it (ROTA_CHECKPOINT_FILE, ROTA_HOSTFILE).
  data_dir = std::filesystem::absolute(data_dir).lexically_normal().string();
  if (idle_pct < 1 || idle_pct > 100) {
    std::cerr << "rota: --idle-utilization must be a whole percent 1..100\n";
    return kExitBadInput;
  }
  if (idle_after <= 0) {
    std::cerr << "rota: --idle-after must be positive\n";
    return kExitBadInput;
  }
  if (usage_retention < 0) {
    std::cerr << "rota: --usage-retention must not be negative (0 keeps usage records forever)\n";
    return kExitBadInput;
  }
  if (job_retention < 0) {
    std::cerr << "rota: --job-retention must not be negative (0 keeps every job)\n";
    return kExitBadInput;
  }
  if (gpu_minutes < 0 || gpu_hours < 0) {
    std::cerr << "rota: --gpu-history-minutes and --gpu-history-hours must not be negative (0 keeps them forever)\n";
    return kExitBadInput;
  }
  if (node_timeout <= 0) {
    std::cerr << "rota: --node-timeout must be positive\n";
    return kExitBadInput;
  }
  if (oci_runtime != "auto" && oci_runtime != "runc" && oci_runtime != "crun") {
    std::cerr << "rota: --oci-runtime must be auto, runc or crun, got '" << oci_runtime << "'\n";
    return kExitBadInput;
  }
  const bool postgres = store_url.starts_with("postgres://") || store_url.starts_with("postgresql://");
  if (!postgres && store_url != "sqlite") {
    std::cerr << "rota: --store must be sqlite or a postgres:// (postgresql://) URL, got '" << store_url << "'\n";
    return kExitBadInput;
  }
  if (postgres) {
    if (Status s = CheckConninfo(store_url); !s.ok()) {
      std::cerr << "rota: --store: " << s.message() << "\n";
      return s.code() == StatusCode::kUnavailable ? kExitError : kExitBadInput;  // (no libpq: not the URL's fault)
    }
  }
  if (lease < 500 * 1000) {
    std::cerr << "rota: --lease must be at least 500ms\n";
    return kExitBadInput;
  }
  if (history_interval < kMicrosPerSecond) {
    std::cerr << "rota: --history-interval must be at least 1s\n";
    return kExitBadInput;
  }
  server::HttpOptions http;
  if (!SplitListen(listen, &http.host, &http.port)) {
    std::cerr << "rota: --listen must be HOST:PORT, got '" << listen << "'\n";
    return kExitBadInput;
  }
  http.tls_cert = tls_cert;
  http.tls_key = tls_key;
  http.rate_per_second = rate;
  http.queue_sample_seconds = static_cast<double>(history_interval) / kMicrosPerSecond;
  server::RouterOptions router_options;
  if (!router_buffer.empty()) {
    StatusOr<MemoryMiB> mib = ParseMemoryMiB(router_buffer);
    if (!mib.ok() || *mib < 16 || *mib > 1024 * 1024) {
      std::cerr << "rota: --router-buffer must be a size from 16Mi to 1Ti (e.g. 256Mi), got '" << router_buffer << "'\n";
      return kExitBadInput;
    }
    router_options.max_buffered_bytes = static_cast<size_t>(*mib) << 20;
  }
  if (router_listen != "off" && !SplitListen(router_listen, &router_options.host, &router_options.port)) {
    std::cerr << "rota: --router must be HOST:PORT or off, got '" << router_listen << "'\n";
    return kExitBadInput;
  }

  ClusterConfig config;
  config.node_groups.clear();
  if (!config_path.empty()) {
    auto text = api::ReadFile(config_path);
    if (!text.ok()) {
      std::cerr << "rota: " << text.status().message() << "\n";
      return kExitBadInput;
    }
    auto parsed = api::ParseClusterConfig(*text, config_path);
    if (!parsed.ok()) {
      std::cerr << "rota: " << parsed.status().message() << "\n";
      return kExitBadInput;
    }
    config = *parsed;
  }

  std::error_code ec;
  {
    // Every agent watch and client is a descriptor: take all the kernel allows.
    // (Two per node: its watch and its heartbeats. A privileged server
    // raises the hard limit to 256k itself; otherwise set LimitNOFILE.)
    struct rlimit files {};
    if (getrlimit(RLIMIT_NOFILE, &files) == 0) {
      struct rlimit wanted{std::max<rlim_t>(files.rlim_cur, 262144), std::max<rlim_t>(files.rlim_max, 262144)};
      if (setrlimit(RLIMIT_NOFILE, &wanted) != 0 && files.rlim_cur < files.rlim_max) {
        files.rlim_cur = files.rlim_max;
        setrlimit(RLIMIT_NOFILE, &files);
      }
    }
  }
  // The local node's inventory is checked before anything is written or
  // served: a bad --gpus or --mig changes nothing.
  if (with_local_agent) {
    if (auto inv = LocalInventory(gpus, mig); !inv.ok()) {
      std::cerr << "rota: " << inv.status().message() << "\n";
      return kExitBadInput;
    }
  }
  if (with_local_agent && !ShimInstalled("rota")) return kExitError;  // after the flags, before anything is opened
  // Files the server makes are its own (the store, tokens, logs); the data
  // directory is 0711 so that tasks of other accounts under `rota up` can
  // reach their own job's work directory, and nothing else in it.
  umask(077);
  std::filesystem::create_directories(data_dir, ec);
  chmod(data_dir.c_str(), 0711);
  // One server per data directory: an exclusive lock held for the process's
  // life (a second server exits at once, naming the first).
  const int lock_fd = open((data_dir + "/lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (lock_fd < 0) {
    std::cerr << "rota: data directory " << data_dir << " is not writable: " << std::strerror(errno) << "\n";
    return kExitError;
  }
  if (flock(lock_fd, LOCK_EX | LOCK_NB) != 0) {
    char pid[32] = {};
    [[maybe_unused]] ssize_t n = pread(lock_fd, pid, sizeof(pid) - 1, 0);
    std::cerr << "rota: data directory " << data_dir << " is in use by another rota server (pid "
              << std::string(pid).substr(0, std::string(pid).find('\n')) << ")\n";
    return kExitError;
  }
  {
    const std::string mine = std::to_string(getpid()) + "\n";
    // Only a note for the next server's message: a full disk must not stop the start.
    if (ftruncate(lock_fd, 0) != 0 || pwrite(lock_fd, mine.data(), mine.size(), 0) < 0) {
      std::cerr << "rota: warning: cannot record the pid in " << data_dir << "/lock: " << std::strerror(errno) << "\n";
    }
  }
  BlockSignals();
  SystemClock clock;
  server::ControllerOptions options{.config = config,
                                    .clock = &clock,
                                    .node_timeout = node_timeout,
                                    .fence_after = fence_after,
                                    .idle_utilization_pct = idle_pct,
                                    .idle_after = idle_after,
                                    .usage_retention = usage_retention,
                                    .job_retention = job_retention,
                                    .logs_dir = data_dir + "/logs",
                                    .history_minutes = gpu_minutes,
                                    .history_hours = gpu_hours,
                                    .min_runtime = min_runtime,
                                    .owner = UnixUserName()};
  if (postgres) {
    // The leader runs the services' router: at a fixed address, as its API.
    std::optional<server::RouterOptions> router;
    if (router_listen != "off") {
      if (router_options.port == 0) {
        std::cerr << "rota: --store postgres: --router needs a fixed port (the services' endpoint on whichever replica "
                     "leads)\n";
        return kExitBadInput;
      }
      router = router_options;
    }
    return ReplicatedServer(store_url, advertise, lease, options, http, router, data_dir);
  }
  auto store = SqliteStore::Open(data_dir + "/rota.db");
  if (!store.ok()) {
    std::cerr << "rota: " << store.status().message() << "\n";
    return kExitError;
  }
  server::Controller controller(options, std::move(store).value());
  if (Status s = controller.Start(); !s.ok()) {
    std::cerr << "rota: cannot start: " << s.message() << "\n";
    return kExitError;
  }
  if (Status s = WriteAdminToken(controller, data_dir); !s.ok()) {
    std::cerr << "rota: " << s.message() << "\n";
    return kExitError;
  }
  const std::string admin_path = data_dir + "/admin.token";
  // Services: their router (the stable endpoint) and autoscalers.
  std::unique_ptr<server::Router> router;
  if (router_listen != "off") {
    router = std::make_unique<server::Router>(router_options);
    auto port = router->Start();
    if (!port.ok()) {
      if (router_given) {
        std::cerr << "rota: " << port.status().message() << "\n";
        return kExitError;
      }
      std::cerr << "rota: warning: " << port.status().message() << "; services get no endpoint (--router HOST:PORT)\n";
      router.reset();
    } else {
      http.router_url = "http://" + router_options.host + ":" + std::to_string(*port);
      std::cout << "rota: services' router at " << http.router_url << "/NAME/\n";
    }
  }
  server::ServiceManager services(&controller, router.get());
  services.Start();
  http.services = &services;
  // Task logs: the local agent of `rota up` writes them here; remote agents ship theirs.
  http.logs_dir = data_dir + "/logs";
  auto server = server::StartHttpServer(&controller, http);
  if (!server.ok()) {
    std::cerr << "rota: " << server.status().message() << "\n";
    return kExitError;
  }
  const std::string scheme = tls_cert.empty() ? "http" : "https";
  const std::string url = scheme + "://" + http.host + ":" + std::to_string((*server)->port());
  // Where it listens, for the CLI on this machine (client.h): a client with
  // this data directory finds the server without --server.
  const std::string url_path = ServerUrlPath(data_dir);
  {
    std::ofstream out(url_path, std::ios::trunc);
    out << (http.host == "0.0.0.0" ? scheme + "://127.0.0.1:" + std::to_string((*server)->port()) : url) << "\n";
  }
  auto announce = [&] {
    std::cout << "rota: serving " << url << " (data in " << data_dir << ")\n";
    if (data_dir != DefaultDataDir()) {
      std::cout << "rota: the CLI finds this server with ROTA_DATA_DIR=" << data_dir << " (or --server " << url << ")\n";
    }
  };
  if (!with_local_agent) announce();

  std::unique_ptr<agent::Agent> local;
  if (with_local_agent) {
    auto inv = LocalInventory(gpus, mig);
    if (!inv.ok()) {
      std::cerr << "rota: " << inv.status().message() << "\n";
      return kExitBadInput;
    }
    agent::AgentOptions ao;
    ao.server = url;
    ao.insecure_skip_tls_verify = true;  // (to this process's own listener, on this machine)
    ao.node_name = name.empty() ? HostName() : name;
    ao.address = "127.0.0.1";
    ao.inventory = *inv;
    ao.logs_dir = data_dir + "/logs";
    ao.heartbeat_ms = 500;
    ao.oci_runtime = oci_runtime;
    ao.disk_reserve_mib = disk_reserve_mib;
    ao.task_pids_max = task_pids_max;
    if (!device_dir.empty()) ao.device_dir = device_dir;
    ao.state_dir = data_dir + "/agent-state";
    ao.fence_after_ms = static_cast<int>(controller.FenceAfter() / 1000);
    ao.ship_logs = false;  // it writes into the server's log directory itself
    // The local agent's token is kept beside the data so restarts reuse it.
    const std::string agent_path = data_dir + "/agent.token";
    std::string token = ReadFirstLine(agent_path);
    auto who = controller.Authenticate("Bearer " + token);
    if (token.empty() || !who.ok() || who->node != ao.node_name) {
      auto created = controller.CreateToken({"admin", server::Role::kAdmin, ""}, ao.node_name, server::Role::kAgent,
                                            ao.node_name);
      if (!created.ok() || !WriteSecret(agent_path, *created).ok()) {
        std::cerr << "rota: cannot create the local agent's token\n";
        return kExitError;
      }
      token = *created;
    }
    ao.token = token;
    std::cout << "rota: local node " << ao.node_name << ": " << inv->gpus << " x " << inv->gpu_model << " "
              << FormatMemoryMiB(inv->gpu_memory) << (inv->simulated ? " (SIMULATED, " : " (") << inv->source << ")\n";
    local = std::make_unique<agent::Agent>(ao);
    local->Start();
    // Ready once the local node is registered, so a first submission finds it.
    for (int i = 0; i < 500 && controller.snapshot().FindNode(ao.node_name) == nullptr; ++i) usleep(10 * 1000);
    announce();
    std::cout << "rota: try: rota submit job.yaml && rota jobs   (token: " << admin_path << ")\n";
  }
  std::cout << "rota: dashboard at " << url << "/ (sign in with a token, e.g. the admin token above)\n";
  std::cout.flush();
  WaitForSignal();
  std::cout << "rota: shutting down\n";
  std::remove(url_path.c_str());
  if (local) local->Stop();
  (*server)->Stop();
  services.Stop();
  if (router) router->Stop();
  controller.Stop();
  return kExitOk;
}

// `rota agent --probe`: the inventory this node would register and one
// telemetry sample, like `slurmd -C`; for checking a machine's GPUs.
int Probe(const agent::Inventory& inv) {
  std::printf("source       %s\n", inv.source.c_str());
  std::printf("gpus         %d x %s, %s each, %d NVLink island(s)%s\n", inv.gpus,
              inv.gpu_model.empty() ? "-" : inv.gpu_model.c_str(), FormatMemoryMiB(inv.gpu_memory).c_str(),
              inv.nvlink_islands, inv.simulated ? " (simulated)" : "");
  std::printf("host         %s CPU, %s memory\n", FormatMilliCpu(agent::HostCpu()).c_str(),
              FormatMemoryMiB(agent::HostMemory()).c_str());
  std::printf("mps          %s\n", inv.simulated ? "-" : agent::MpsRunning() ? "running" : "not running");
  const auto samples = agent::SampleGpus(inv, 0);
  std::printf("xid events   %s\n", inv.simulated ? "- (simulated)" : agent::XidEventStatus().c_str());
  // GPM: two readings a second apart (a metric spans two samples).
  agent::GpmSampler gpm;
  std::vector<agent::MeterReading> gpm_readings;
  if (!inv.simulated) {
    agent::ReadMeters(inv, 0, false, &gpm);
    std::this_thread::sleep_for(std::chrono::seconds(1));
    gpm_readings = agent::ReadMeters(inv, 0, false, &gpm);
  }
  std::printf("gpm          %s\n", inv.simulated ? "- (simulated)" : gpm.Status().c_str());
  for (const agent::MeterReading& r : gpm_readings) {
    if (r.sm_active_pct < 0) continue;
    std::printf("     GPU %d: SM active %d%%, SM occupancy %d%%, tensor active %d%%, DRAM active %d%%\n", r.index,
                r.sm_active_pct, r.sm_occupancy_pct, r.tensor_active_pct, r.dram_active_pct);
  }
  std::printf("%-4s %-42s %5s %10s %5s %6s  %-8s %s\n", "GPU", "UUID", "UTIL", "MEMORY", "TEMP", "POWER", "MIG", "HEALTH");
  for (const agent::GpuSample& g : samples) {
    const std::string uuid = static_cast<size_t>(g.index) < inv.uuids.size() ? inv.uuids[g.index] : "-";
    auto mig = inv.mig.find(g.index);
    std::printf("%-4d %-42s %4d%% %10s %4dC %5dW  %-8s %s\n", g.index, uuid.c_str(), g.utilization_pct,
                FormatMemoryMiB(g.memory_used).c_str(), g.temperature_c, g.power_w,
                mig == inv.mig.end() ? (inv.mig_unusable.contains(g.index) ? "on" : "off") : "on",
                g.healthy ? "ok" : ("unhealthy: " + g.health_reason).c_str());
    if (mig != inv.mig.end()) {
      std::printf("     MIG layout %s%s\n", mig->second.empty() ? "(no instances)" : mig->second.c_str(),
                  inv.mig_fixed ? " (the driver's; rota does not re-partition it)" : "");
      if (auto d = inv.mig_devices.find(g.index); d != inv.mig_devices.end()) {
        for (const auto& [start, dev] : d->second) {
          std::printf("     slot %d: %s %s\n", start, dev.profile.c_str(), dev.uuid.c_str());
        }
      }
    }
  }
  return kExitOk;
}

int AgentMain(std::vector<std::string> args) {
  agent::AgentOptions ao;
  std::string gpus;
  MigFlags mig;
  bool probe = false;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    auto value = [&] { return FlagValue(args, &i, "rota agent"); };
    if (a == "--server") ao.server = value();
    else if (a == "--token") {
      std::cerr << "rota agent: --token on the command line is visible to every user of the node (ps); "
                   "use --token-file FILE or $ROTA_TOKEN\n";
      return kExitBadInput;
    } else if (a == "--token-file") {
      const std::string path = value();
      ao.token = ReadFirstLine(path);
      if (ao.token.empty()) {
        std::cerr << "rota agent: --token-file " << path << ": no token in it (or it cannot be read)\n";
        return kExitBadInput;
      }
    } else if (a == "--ca-cert") {
      ao.ca_cert = value();
      const StatusOr<std::string> text = api::ReadFile(ao.ca_cert);
      if (!text.ok()) {
        std::cerr << "rota agent: --ca-cert: " << text.status().message() << "\n";
        return kExitBadInput;
      }
      if (text->find("-----BEGIN CERTIFICATE-----") == std::string::npos) {
        std::cerr << "rota agent: --ca-cert " << ao.ca_cert << ": no PEM certificate in it\n";
        return kExitBadInput;
      }
    } else if (a == "--insecure-skip-tls-verify") ao.insecure_skip_tls_verify = true;
    else if (a == "--device-dir") ao.device_dir = value();
    else if (a == "--state-dir") ao.state_dir = value();
    else if (a == "--name") ao.node_name = value();
    else if (a == "--address") {
      ao.address = value();
      if (Status s = api::CheckAddress(ao.address, "--address"); !s.ok()) {
        std::cerr << "rota agent: " << s.message() << "\n";
        return kExitBadInput;
      }
    }
    else if (a == "--gpus") gpus = value();
    else if (a == "--mig") mig.set = true, mig.layout = value();
    else if (a == "--mig-gpus") mig.gpus = std::atoi(value().c_str());
    else if (a == "--nvlink-islands") mig.islands = std::atoi(value().c_str());
    else if (a == "--oci-runtime") ao.oci_runtime = value();
    else if (a == "--logs-dir") ao.logs_dir = value();
    else if (a == "--heartbeat-ms") ao.heartbeat_ms = std::max(10, std::atoi(value().c_str()));
    else if (a == "--meter-ms") ao.meter_interval_ms = std::max(0, std::atoi(value().c_str()));
    else if (a == "--disk-reserve") ao.disk_reserve_mib = DiskReserveFlag(args, &i, "rota agent");
    else if (a == "--task-pids-max") ao.task_pids_max = PidsFlag(args, &i, "rota agent");
    else if (a == "--allow-unisolated-gpus") ao.allow_unisolated_gpus = true;
    else if (a == "--cgroup-root") {
      ao.cgroup_root = value();
      if (ao.cgroup_root == "none") ao.cgroup_root.clear();
    }
    else if (a == "--transport") {
      const std::string t = value();
      if (t != "watch" && t != "poll") {
        std::cerr << "rota agent: --transport: must be watch or poll, not '" << t << "'\n";
        return kExitBadInput;
      }
      ao.watch = t == "watch";
    } else if (a == "--health-file") ao.health_file = value();
    else if (a == "--probe") probe = true;
    else if (a == "--label") {
      const std::string kv = value();
      const size_t eq = kv.find('=');
      if (eq == std::string::npos) {
        std::cerr << "rota agent: --label must be key=value\n";
        return kExitBadInput;
      }
      ao.labels[kv.substr(0, eq)] = kv.substr(eq + 1);
    } else if (a == "-h" || a == "--help") {
      std::cout << kAgentUsage;
      return kExitOk;
    } else {
      std::cerr << "rota agent: unknown argument '" << a << "'\n" << kAgentUsage;
      return kExitBadInput;
    }
  }
  if (probe) {
    auto inv = LocalInventory(gpus, mig);
    if (!inv.ok()) {
      std::cerr << "rota agent: " << inv.status().message() << "\n";
      return kExitBadInput;
    }
    return Probe(*inv);
  }
  if (ao.token.empty()) {
    if (const char* t = std::getenv("ROTA_TOKEN"); t && *t) ao.token = t;
  }
  if (ao.token.empty()) {
    std::cerr << "rota agent: a token is required (--token-file FILE or $ROTA_TOKEN)\n" << kAgentUsage;
    return kExitBadInput;
  }
  if (!ao.ca_cert.empty() && ao.insecure_skip_tls_verify) {
    std::cerr << "rota agent: --ca-cert and --insecure-skip-tls-verify contradict each other: give one\n";
    return kExitBadInput;
  }
  if (ao.oci_runtime != "auto" && ao.oci_runtime != "runc" && ao.oci_runtime != "crun") {
    std::cerr << "rota agent: --oci-runtime must be auto, runc or crun, got '" << ao.oci_runtime << "'\n";
    return kExitBadInput;
  }
  auto inv = LocalInventory(gpus, mig);
  if (!inv.ok()) {
    std::cerr << "rota agent: " << inv.status().message() << "\n";
    return kExitBadInput;
  }
  ao.inventory = *inv;
  if (ao.logs_dir.empty()) ao.logs_dir = DefaultDataDir() + "/agent-logs";
  if (ao.state_dir.empty()) ao.state_dir = ao.logs_dir + "/.agent-state";
  // Absolute (as rota up's data directory): a task runs in its job's work
  // directory and is handed paths below these.
  ao.logs_dir = std::filesystem::absolute(ao.logs_dir).lexically_normal().string();
  ao.state_dir = std::filesystem::absolute(ao.state_dir).lexically_normal().string();
  if (!ShimInstalled("rota agent")) return kExitError;
  BlockSignals();
  agent::Agent a(ao);
  a.Start();
  std::cout << "rota agent: reporting to " << ao.server << "\n";
  std::cout.flush();
  WaitForSignal();
  a.Stop();
  return kExitOk;
}

constexpr const char* kStoreUsage =
      "usage: rota store migrate [--data-dir DIR] --to postgres://USER@HOST:PORT/DB [--config CLUSTER.yaml]\n"
      "\n"
      "Moves the store of a stopped `rota server` (DIR/rota.db) into an empty PostgreSQL\n"
      "database, as one snapshot of its state plus its tokens, and checks it by reading\n"
      "it back. Then start the servers with --store postgres://... (the SQLite file is\n"
      "left as it was).\n";

int StoreMain(std::vector<std::string> args) {
  constexpr const char* kUsage = kStoreUsage;
  if (args.empty() || args[0] != "migrate") {
    std::cerr << kUsage;
    return args.size() == 1 && (args[0] == "-h" || args[0] == "--help") ? kExitOk : kExitBadInput;
  }
  std::string data_dir = DefaultDataDir(), to, config_path;
  for (size_t i = 1; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--data-dir") data_dir = FlagValue(args, &i, "rota store");
    else if (a == "--to") to = FlagValue(args, &i, "rota store");
    else if (a == "--config") config_path = FlagValue(args, &i, "rota store");
    else if (a == "-h" || a == "--help") {
      std::cout << kUsage;
      return kExitOk;
    } else {
      std::cerr << "rota store: unknown argument '" << a << "'\n" << kUsage;
      return kExitBadInput;
    }
  }
  if (!to.starts_with("postgres://") && !to.starts_with("postgresql://")) {
    std::cerr << "rota store: --to must be a postgres:// (postgresql://) URL\n" << kUsage;
    return kExitBadInput;
  }
  if (Status s = CheckConninfo(to); !s.ok()) {
    std::cerr << "rota store: --to: " << s.message() << "\n";
    return s.code() == StatusCode::kUnavailable ? kExitError : kExitBadInput;  // (no libpq: not the URL's fault)
  }
  ClusterConfig config;
  if (!config_path.empty()) {
    auto text = api::ReadFile(config_path);
    auto parsed = text.ok() ? api::ParseClusterConfig(*text, config_path) : StatusOr<ClusterConfig>(text.status());
    if (!parsed.ok()) {
      std::cerr << "rota store: " << parsed.status().message() << "\n";
      return kExitBadInput;
    }
    config = *parsed;
  }
  // The server must be stopped: its data directory's lock, held while we copy.
  const int lock_fd = open((data_dir + "/lock").c_str(), O_RDWR | O_CLOEXEC);
  if (lock_fd < 0 || flock(lock_fd, LOCK_EX | LOCK_NB) != 0) {
    std::cerr << "rota store: " << data_dir
              << (lock_fd < 0 ? ": no rota data directory here" : " is in use by a running rota server: stop it first")
              << "\n";
    return kExitError;
  }
  auto from = SqliteStore::Open(data_dir + "/rota.db");
  if (!from.ok()) {
    std::cerr << "rota store: " << from.status().message() << "\n";
    return kExitError;
  }
  auto dest = PgStore::Open(to);
  if (!dest.ok()) {
    std::cerr << "rota store: " << dest.status().message() << "\n";
    return kExitError;
  }
  auto tokens = (*from)->Tokens();
  auto dest_tokens = (*dest)->Tokens();
  if (!tokens.ok() || !dest_tokens.ok()) {
    std::cerr << "rota store: " << (tokens.ok() ? dest_tokens.status() : tokens.status()).message() << "\n";
    return kExitError;
  }
  if ((*dest)->last_seq() > 0 || !dest_tokens->empty()) {
    std::cerr << "rota store: the database already holds a rota store (journal at event " << (*dest)->last_seq()
              << ", " << dest_tokens->size() << " tokens): migrate into an empty database\n";
    return kExitError;
  }
  // The key of gangs' rendezvous ports (and when it was made), first, so
  // that a rank restarted alone after the move meets its gang at the same
  // port; a database a server was started on keeps its own: refused, with
  // nothing written.
  if (Status s = CopyKept(**from, **dest, server::kRendezvousKeyNames); !s.ok()) {
    std::cerr << "rota store: cannot copy the key of gangs' rendezvous ports: " << s.message()
              << ": migrate into a database no rota server has led on\n";
    return kExitError;
  }
  server::Recovered state(config.topology);
  if (Status s = (*from)->Replay([&](const Event& e) { return state.Apply(e); }); !s.ok()) {
    std::cerr << "rota store: " << s.message() << "\n";
    return kExitError;
  }
  const uint64_t seq = std::max<uint64_t>((*from)->last_seq(), 1);
  const Snapshot snap = state.state->GetSnapshot();
  if (Status s = (*dest)->WriteSnapshot(seq, [&](const EventSink& sink) { return CompactState(snap, sink); }); !s.ok()) {
    std::cerr << "rota store: " << s.message() << "\n";
    return kExitError;
  }
  for (const TokenRecord& t : *tokens) {
    if (Status s = (*dest)->PutToken(t); !s.ok()) {
      std::cerr << "rota store: " << s.message() << "\n";
      return kExitError;
    }
  }
  // Read it back, as a server would.
  auto check = PgStore::Open(to);
  server::Recovered back(config.topology);
  Status read = check.ok() ? (*check)->Replay([&](const Event& e) { return back.Apply(e); }) : check.status();
  if (!read.ok() || back.state->GetSnapshot().jobs().size() != snap.jobs().size() ||
      back.state->GetSnapshot().nodes().size() != snap.nodes().size() || back.next_job_id != state.next_job_id) {
    std::cerr << "rota store: the copy does not read back as the original"
              << (read.ok() ? "" : ": " + std::string(read.message())) << "\n";
    return kExitError;
  }
  std::cout << "rota store: moved " << snap.jobs().size() << " jobs, " << snap.nodes().size() << " nodes and "
            << tokens->size() << " tokens (the state at journal event " << seq << ", as one snapshot) into PostgreSQL\n"
            << "rota store: start the servers with --store " << to << "\n";
  return kExitOk;
}

std::string UsageText(const std::string& cmd) {
  if (cmd == "server") return kServerUsage;
  if (cmd == "up") return kUpUsage;
  if (cmd == "agent") return kAgentUsage;
  if (cmd == "store") return kStoreUsage;
  return "";
}

}  // namespace rota::cli
