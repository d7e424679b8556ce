#include "agent/agent.h"

#include "agent/identity.h"
#include "agent/oci.h"
#include "base/base64.h"
#include "base/random_hex.h"

#include <httplib.h>
#include <signal.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <ctime>
#include <unistd.h>

#include <cerrno>
#include <algorithm>
#include <cctype>
#include <chrono>
#include <optional>
#include <thread>
#include <cstring>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

namespace rota::agent {

using nlohmann::json;

struct Agent::Task {
  api::TaskAssignment assignment;
  uint64_t job = 0;
  uint16_t task = 0;
  uint32_t replica = 0;
  int32_t attempt = 0;
  int stop_signal = SIGTERM;
  int grace_ms = 10000;
  uint64_t gpu_mask = 0;
  pid_t pid = 0;             // 0 = holds its GPUs without a process (no command)
  pid_t shim = 0;            // its supervisor (0: none)
  uint64_t shim_start = 0;   // the supervisor's start time, to tell it from a reused pid
  bool adopted = false;      // started by an earlier agent process: not our child
  std::string exit_file;     // where the supervisor writes the exit status
  std::string record_file;   // its durable record in the state directory
  bool exited = false;
  int exit_code = 0;
  std::string exit_reason;  // "oom" when the kernel OOM-killed it
  TimePoint ended_at = 0;   // an adopted task's: when its supervisor wrote its status (the node's clock; 0: unknown)
  std::string cgroup;       // its group name, "" if none
  std::string checkpoint_file;  // where the task writes its last checkpoint's path
  int64_t checkpoint_mtime = 0;  // the file's modification time last reported at once (ns)
  std::chrono::steady_clock::time_point checkpoint_reported{};
  std::string log_path;
  uid_t uid = 0;                // the account it runs as (its checkpoint file must be its own)
  std::string oci_runtime;      // a container: the runtime binary and container id ("" = a process)
  std::string oci_id;
  std::string oci_root;         // the runtime's state directory ("" = its default)
  std::string record_error;     // why its record could not be written (SaveRecord), "" if it was
  bool memory_limited = false;
  bool stopping = false;
  std::chrono::steady_clock::time_point stop_deadline;
  std::chrono::steady_clock::time_point started = std::chrono::steady_clock::now();
  bool backoff_noted = false;  // its exit counted toward its replica's back-off
};

namespace {

// How long one pass of Reconcile spends starting tasks before it leaves the
// rest to the next (a start takes milliseconds; one whose exec hangs, up to
// launcher.cc's 10 s).
constexpr auto kLaunchBudget = std::chrono::seconds(2);
// How long the OCI runtime's delete of a container may run (the agent does
// not wait for it) before it is killed.
constexpr auto kOciDeleteLimit = std::chrono::seconds(30);
// How soon a container whose delete hung is tried again (doubling with each
// try, to 5 minutes).
constexpr auto kStuckRetry = std::chrono::seconds(5);
// The same at a start's adoption of what an earlier agent left, which waits
// for it (no report goes out before): "lost" must be true.
constexpr int kAdoptDeleteMs = 30'000;

TimePoint RealNowMicros() {
  return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

int64_t SteadyMs() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double WallSeconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// The task's last checkpoint: the first line of its checkpoint file and the
// file's modification time; false if it has written none.
bool ReadCheckpoint(const std::string& file, uid_t owner, std::string* path, TimePoint* at) {
  // The task controls this file: a regular file only (no FIFO to block on,
  // no symlink to follow), at most one short line, valid UTF-8.
  const int fd = open(file.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return false;
  struct stat st;
  char buf[4097];
  ssize_t n = -1;
  // ... and the task's own (not a hard link to somebody else's file).
  if (fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == owner) n = read(fd, buf, sizeof(buf));
  close(fd);
  if (n <= 0) return false;
  std::string line(buf, static_cast<size_t>(n));
  line = line.substr(0, line.find('\n'));
  while (!line.empty() && (line.back() == '\r' || line.back() == ' ')) line.pop_back();
  // (The next attempt gets it in its environment, which holds no NUL.)
  if (line.empty() || line.size() > 4096 || !IsValidUtf8(line) || line.find('\0') != std::string::npos) return false;
  *path = line;
  *at = static_cast<TimePoint>(st.st_mtim.tv_sec) * kMicrosPerSecond + st.st_mtim.tv_nsec / 1000;
  return true;
}

// Whether `job_dir` holds another account's files than `uid`'s: its work
// directory, or a log, owned by someone else than `uid` and root. A job id
// names a directory on the node for good, but a server installed afresh
// (a new data directory, the same agents) numbers its jobs from 1 again.
bool AnotherAccountsJobDir(const std::string& job_dir, const std::string& work_dir, uid_t uid) {
  struct stat st {};
  if (lstat(work_dir.c_str(), &st) == 0 && S_ISDIR(st.st_mode) && st.st_uid != uid) return true;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(job_dir, ec)) {
    if (lstat(e.path().c_str(), &st) == 0 && S_ISREG(st.st_mode) && st.st_uid != 0 && st.st_uid != uid) return true;
  }
  return false;
}

// The job's directory (the agent's: 0711, so the task reaches its own
// files but cannot list or replace the agent's) and its work directory (the
// task's account's, 0700). One that holds another account's files (an
// earlier job of the same id, under a server installed afresh) is moved
// aside first, to `<job_dir>.earlier-<time>`, so that a new job's user
// never gets an old one's work directory or log; `*moved` says so.
Status MakeJobDirs(const std::string& job_dir, const std::string& work_dir, const TaskIdentity& id, bool* moved) {
  *moved = false;
  if (getuid() == 0 && AnotherAccountsJobDir(job_dir, work_dir, id.uid)) {
    const std::string aside = job_dir + ".earlier-" + std::to_string(RealNowMicros());
    if (rename(job_dir.c_str(), aside.c_str()) != 0) {
      return UnavailableError("job directory " + job_dir + " holds another account's files (an earlier job of this id) "
                              "and cannot be moved aside: " + std::strerror(errno));
    }
    std::fprintf(stderr, "rota agent: %s held another account's files (an earlier job of this id): moved to %s\n",
                 job_dir.c_str(), aside.c_str());
    *moved = true;
  }
  std::error_code ec;
  std::filesystem::create_directories(job_dir, ec);
  if (ec) return UnavailableError("job directory " + job_dir + ": " + ec.message());
  chmod(job_dir.c_str(), 0711);
  struct stat st {};
  if (lstat(work_dir.c_str(), &st) == 0 && !S_ISDIR(st.st_mode)) unlink(work_dir.c_str());
  if (mkdir(work_dir.c_str(), 0700) != 0 && errno != EEXIST) {
    return UnavailableError("work directory " + work_dir + ": " + std::strerror(errno));
  }
  if (getuid() == 0 && lchown(work_dir.c_str(), id.uid, id.gid) != 0) {
    return UnavailableError("work directory " + work_dir + ": cannot give it to uid " + std::to_string(id.uid) + ": " +
                            std::strerror(errno));
  }
  return Status::Ok();
}

std::string HostName() {
  char buf[256] = {};
  gethostname(buf, sizeof(buf) - 1);
  return buf;
}

// A task key ("job/task/replica/attempt") as a file name.
std::string FileKey(std::string key) {
  std::replace(key.begin(), key.end(), '/', '-');
  return key;
}

std::string Key(uint64_t job, uint16_t task, uint32_t replica, int32_t attempt) {
  return std::to_string(job) + "/" + std::to_string(task) + "/" + std::to_string(replica) + "/" + std::to_string(attempt);
}

int SignalNumber(const std::string& name) {
  if (name == "SIGUSR1") return SIGUSR1;
  if (name == "SIGUSR2") return SIGUSR2;
  if (name == "SIGINT") return SIGINT;
  if (name == "SIGHUP") return SIGHUP;
  if (name == "SIGQUIT") return SIGQUIT;
  return SIGTERM;
}

// "INDEX REASON" lines: GPUs to report unhealthy.
std::map<int, std::string> ReadHealthFile(const std::string& path) {
  std::map<int, std::string> out;
  if (path.empty()) return out;
  std::ifstream in(path);
  int index;
  std::string reason;
  while (in >> index) {
    std::getline(in, reason);
    reason.erase(0, reason.find_first_not_of(' '));
    out[index] = reason.empty() ? "reported unhealthy" : reason;
  }
  return out;
}

// A client for "http(s)://host:port" (AgentOptions: the token, and how an
// https server's certificate is verified).
std::unique_ptr<httplib::Client> MakeClient(const std::string& server, const AgentOptions& options) {
  auto c = std::make_unique<httplib::Client>(server);
  c->set_bearer_token_auth(options.token);
  c->set_connection_timeout(2, 0);
  c->set_tcp_nodelay(true);
  c->set_read_timeout(10, 0);
  if (!options.ca_cert.empty()) c->set_ca_cert_path(options.ca_cert);
  c->enable_server_certificate_verification(!options.insecure_skip_tls_verify);
  return c;
}

// What an answer, or its absence, says about where the leader is (api::ServerList::Heard).
void Heard(api::ServerList& servers, const std::string& tried, const httplib::Result& res) {
  servers.Heard(tried, res ? res->status : 0, res ? res->get_header_value("Rota-Role") : std::string(),
                res ? res->get_header_value("Rota-Leader") : std::string());
}

}  // namespace

std::string AgentInstance(const std::string& state_dir) {
  if (state_dir.empty()) return RandomHex(32);
  const std::string path = state_dir + "/agent-id";
  std::string id;
  std::ifstream(path) >> id;
  const bool whole = id.size() == 32 && std::all_of(id.begin(), id.end(), [](char c) { return std::isxdigit(static_cast<unsigned char>(c)); });
  if (whole) return id;
  id = RandomHex(32);
  std::error_code ec;
  std::filesystem::create_directories(state_dir, ec);
  const std::string tmp = path + ".tmp";
  if (std::ofstream out(tmp, std::ios::trunc); out << id << "\n" && out.flush()) {
    out.close();
    if (rename(tmp.c_str(), path.c_str()) == 0) return id;
  }
  unlink(tmp.c_str());
  // Not saved (a full or read-only disk): one that the same agent restarted
  // gets again, from the machine's id and the state directory (FNV-1a, twice).
  std::string machine;
  std::ifstream("/etc/machine-id") >> machine;
  const std::string seed = machine + "\n" + state_dir;
  uint64_t a = 14695981039346656037ull, b = 1099511628211ull * 31;
  for (unsigned char c : seed) {
    a = (a ^ c) * 1099511628211ull;
    b = (b ^ c) * 1099511628211ull + 7;
  }
  char out[33];
  std::snprintf(out, sizeof(out), "%016llx%016llx", static_cast<unsigned long long>(a), static_cast<unsigned long long>(b));
  std::fprintf(stderr, "rota agent: cannot save %s: using an id from the machine's and the directory's\n", path.c_str());
  return std::string(out, 32);
}

Agent::Agent(AgentOptions options)
    // (An agent that is not root runs every task as itself: one user.)
    : options_(std::move(options)), trouble_(/*one_user=*/getuid() != 0) {
  if (options_.node_name.empty()) options_.node_name = HostName();
  if (options_.address.empty()) options_.address = options_.node_name;
  if (!options_.state_dir.empty()) {
    // Names this agent's task cgroups apart from any other agent's on the
    // machine, stably across restarts (FNV-1a of the state directory).
    uint32_t h = 2166136261u;
    for (unsigned char c : options_.state_dir) h = (h ^ c) * 16777619u;
    char tag[16];
    std::snprintf(tag, sizeof(tag), "-%08x", h);
    instance_tag_ = tag;
  }
}

Agent::~Agent() { Stop(); }

void Agent::Start() {
  if (!options_.logs_dir.empty()) {
    // Tasks of other accounts pass through to their own job's directory, no further.
    std::error_code ec;
    std::filesystem::create_directories(options_.logs_dir, ec);
    chmod(options_.logs_dir.c_str(), 0711);
  }
  if (!options_.cgroup_root.empty()) {
    auto cg = Cgroups::Detect(options_.cgroup_root, "rota/" + options_.node_name);
    if (cg.ok()) {
      cgroups_ = std::move(cg).value();
      std::fprintf(stderr, "rota agent: CPU and memory limits through cgroup %s; GPU device isolation %s\n",
                   cgroups_->version().c_str(),
                   cgroups_->isolates_devices()
                       ? (cgroups_->version() == "v2" ? "through an eBPF device filter" : "through the devices controller")
                       : "OFF (no device controller this agent may use)");
    } else {
      std::fprintf(stderr, "rota agent: tasks run WITHOUT CPU and memory limits: %s\n",
                   std::string(cg.status().message()).c_str());
    }
  }
  fence_after_ms_ = options_.fence_after_ms;
  instance_ = AgentInstance(options_.state_dir);
  {
    std::lock_guard<std::mutex> lock(mu_);
    AdoptTasks();
  }
  rng_.seed(static_cast<unsigned>(std::hash<std::string>()(options_.node_name) ^ static_cast<size_t>(BootTimeNs())));
  poll_thread_ = std::thread([this] { PollLoop(); });
  if (options_.watch) watch_thread_ = std::thread([this] { WatchLoop(); });
  reap_thread_ = std::thread([this] { ReapLoop(); });
  if (options_.meter_interval_ms > 0) meter_thread_ = std::thread([this] { MeterLoop(); });
}

void Agent::Stop() {
  if (stop_.exchange(true)) return;
  {
    std::lock_guard<std::mutex> lock(wake_mu_);
    wake_ = true;
  }
  wake_cv_.notify_all();
  WakeReaper();
  // A stop that lands before the watch's socket is open does nothing: ask
  // again until the watch thread has gone.
  for (int i = 0; i < 1000 && options_.watch && !watch_done_; ++i) {
    {
      std::lock_guard<std::mutex> lock(watch_mu_);
      if (watch_client_ != nullptr) watch_client_->stop();
    }
    usleep(10 * 1000);
  }
  if (watch_thread_.joinable()) watch_thread_.join();
  if (poll_thread_.joinable()) poll_thread_.join();
  if (reap_thread_.joinable()) reap_thread_.join();
  if (meter_thread_.joinable()) meter_thread_.join();
  // Tasks keep running under their supervisors: a restarted agent adopts
  // them, and if none comes back before the lease's deadline they fence
  // themselves. (Stopping them here would restart a gang for an agent
  // upgrade, or stop one rank of it while the others run on.)
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [key, t] : tasks_) {
    if (t->shim != 0) continue;
    StopTask(*t, /*now=*/true);  // unsupervised (no state directory): nothing could adopt it
    if (cgroups_ && !t->cgroup.empty()) cgroups_->Remove(t->cgroup);
  }
}

int Agent::PollTask(Task& t) {
  if (t.shim == 0) return launcher_.Poll(t.pid);
  if (!t.adopted) return launcher_.Poll(t.shim);  // the supervisor exits with the task's status
  // An adopted task may have ended while no agent ran: when is when its
  // supervisor wrote the status (the file's time), not when we read it.
  const int code = ReadExitFile(t.exit_file, &t.ended_at);
  if (code >= 0) return code;
  if (t.shim_start != 0 && ProcessStartTime(t.shim) == t.shim_start) return -1;
  // Gone: its status may have come just after the read above.
  if (const int last = ReadExitFile(t.exit_file, &t.ended_at); last >= 0) return last;
  t.ended_at = 0;
  // The supervisor died without a word (killed -9, or the node rebooted):
  // whatever is left of the task is in its cgroup, and only there do we
  // kill (its pid may belong to someone else by now).
  if (cgroups_ && !t.cgroup.empty()) cgroups_->Remove(t.cgroup);
  t.exit_reason = "lost";
  return 255;
}

void Agent::NoteFenced(Task& t) {
  // Ended by its supervisor's fence (the server did not answer in time):
  // not the program's own end, whatever its code.
  bool fenced = false;
  if (t.shim != 0 && !t.exit_file.empty() && t.exit_reason != "lost" && ReadExitFile(t.exit_file, nullptr, &fenced) >= 0 &&
      fenced) {
    t.exit_reason = std::string(api::kFenced);
  }
}

bool Agent::Reap() {
  bool ended = false;
  for (auto& [key, t] : tasks_) {
    // (An adopted supervisor whose task's pid was not yet known: found now.)
    if (t->pid == 0 && t->shim != 0 && !t->exited) t->pid = SupervisedTaskPid(t->shim, t->shim_start, 0);
    if ((t->pid != 0 || t->shim != 0) && !t->exited) {
      const int code = PollTask(*t);
      if (code >= 0) {
        t->exited = true;
        t->exit_code = code;
        ended = true;
        // What an unsupervised task started in its process group ends with
        // it. (A supervisor kills all of its task before it exits; one that
        // vanished left a pid that may be anyone's by now.)
        if (t->shim == 0 && t->exit_reason != "lost") launcher_.Signal(t->pid, SIGKILL);
        if (cgroups_ && !t->cgroup.empty()) {
          if (cgroups_->OomKilled(t->cgroup)) t->exit_reason = "oom";
          cgroups_->Remove(t->cgroup);
        }
        // A container killed (137) with a memory limit, not by us: its
        // cgroup went with it, so the kill is taken for the OOM killer's.
        if (!t->oci_id.empty() && code == 128 + SIGKILL && t->memory_limited && !t->stopping) t->exit_reason = "oom";
        NoteFenced(*t);
      }
    }
    if (t->stopping && !t->exited) StopTask(*t, false);
  }
  return ended;
}

void Agent::StopTask(Task& t, bool now) {
  if (t.pid == 0 && t.shim != 0 && !t.exited) t.pid = SupervisedTaskPid(t.shim, t.shim_start, 0);
  if (t.pid == 0 || t.exited) return;
  if (now) {
    launcher_.Signal(t.pid, SIGKILL);
    if (!t.oci_id.empty()) RunQuiet(OciDeleteArgv(t.oci_runtime, t.oci_id, t.oci_root));
    while (PollTask(t) < 0) usleep(1000);
    t.exited = true;
    return;
  }
  if (!t.stopping) {
    // The job's checkpoint signal first; after its grace period, SIGKILL.
    t.stopping = true;
    t.stop_deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(t.grace_ms);
    launcher_.Signal(t.pid, t.stop_signal);
  } else if (std::chrono::steady_clock::now() > t.stop_deadline) {
    launcher_.Signal(t.pid, SIGKILL);
    // The container's processes are not in the runtime's process group.
    // (Not waited for: a runtime stuck on the container's cgroup would hold
    // mu_, and this runs on every pass until the task ends.)
    if (!t.oci_id.empty()) DeleteContainer(t.oci_runtime, t.oci_id, t.oci_root);
  }
}

bool Agent::DeleteContainer(const std::string& runtime, const std::string& id, const std::string& root) {
  OciDelete& d = oci_deletes_[id];
  if (d.pid != 0) {
    PollDelete(id, d, std::chrono::steady_clock::now());
    if (d.pid != 0) return true;
  }
  // One killed and not gone yet (the kernel's D state): no other beside it
  // (they would pile up, each stuck as it is).
  if (d.killed != 0 && PollQuiet(d.killed) < 0) return false;
  d.killed = 0;
  d.runtime = runtime;
  d.root = root;
  const pid_t pid = SpawnQuiet(OciDeleteArgv(runtime, id, root));
  d.started = std::chrono::steady_clock::now();
  if (pid <= 0) {
    ++d.runs;  // (could not start: as one that ended)
    return false;
  }
  d.pid = pid;
  WakeReaper();  // (the reap loop polls it from now)
  return true;
}

void Agent::PollDelete(const std::string& id, OciDelete& d, std::chrono::steady_clock::time_point now) {
  if (const int status = PollQuiet(d.pid); status >= 0) {
    d.pid = 0;
    d.started = now;  // (when it ended)
    ++d.runs;
    // A stuck container is gone once a delete of it succeeds, or the
    // runtime no longer knows it.
    if (d.stuck && (status == 0 || !OciContainerMayExist(d.runtime, id, d.root))) {
      d.stuck = false;
      d.retries = 0;
      trouble_.ContainerGone(id);
      std::fprintf(stderr, "rota agent: the OCI runtime deleted %s\n", id.c_str());
    }
  } else if (now - d.started > kOciDeleteLimit) {
    // Stuck (a cgroup whose processes will not die): killed with its
    // group, and counted as ended (a start waiting for it goes on, the
    // runtime's run to refuse what is left); reaped by a later pass if it
    // goes, else left as it is (the kernel's D state).
    std::fprintf(stderr, "rota agent: the OCI runtime's delete of %s ran %lld s: killed\n", id.c_str(),
                 static_cast<long long>(std::chrono::duration_cast<std::chrono::seconds>(now - d.started).count()));
    kill(-d.pid, SIGKILL);
    d.stuck = true;
    trouble_.DeleteHung(id);
    d.killed = d.pid;
    d.pid = 0;
    d.started = now;
    ++d.runs;
  }
}

void Agent::ReapDeletes() {
  const auto now = std::chrono::steady_clock::now();
  for (auto it = oci_deletes_.begin(); it != oci_deletes_.end();) {
    OciDelete& d = it->second;
    if (d.pid != 0) PollDelete(it->first, d, now);
    if (d.killed != 0 && PollQuiet(d.killed) >= 0) d.killed = 0;
    // One that could not delete its container: gone once the runtime no
    // longer knows it (an admin deleted it); else tried again, 5 s after
    // the last ended, doubling to 5 minutes (while a killed one stays, the
    // kernel's D state, none).
    const std::chrono::steady_clock::duration pause =
        std::min<std::chrono::steady_clock::duration>(kStuckRetry * (1 << std::min(d.retries, 6)), std::chrono::minutes(5));
    if (d.stuck && d.pid == 0 && now - d.started >= pause) {
      if (!OciContainerMayExist(d.runtime, it->first, d.root)) {
        d.stuck = false;
        d.retries = 0;
        trouble_.ContainerGone(it->first);
        std::fprintf(stderr, "rota agent: the OCI runtime no longer knows %s\n", it->first.c_str());
      } else if (d.killed == 0) {
        ++d.retries;
        DeleteContainer(d.runtime, it->first, d.root);
      } else {
        d.started = now;  // (asked again after the next pause)
      }
    }
    // Ended a while ago: a start of that container has read it by now.
    it = d.pid == 0 && d.killed == 0 && !d.stuck && now - d.started > std::chrono::minutes(1) ? oci_deletes_.erase(it)
                                                                                              : std::next(it);
  }
}

std::string Agent::TaskName(uint64_t job, uint16_t task, uint32_t replica, int32_t attempt) const {
  return std::to_string(job) + "-" + std::to_string(task) + "-" + std::to_string(replica) + "-" + std::to_string(attempt) +
         instance_tag_;
}

bool Agent::StaleContainerWaits(const api::TaskAssignment& a) {
  if (a.rootfs.empty()) return false;
  auto runtime = FindOciRuntime(options_.oci_runtime);
  if (!runtime.ok()) return false;  // (the start says why)
  const std::string id = ContainerId(a.job.value(), a.task, a.replica, a.attempt);
  auto d = oci_deletes_.find(id);
  if (d != oci_deletes_.end() && d->second.pid != 0) {
    PollDelete(id, d->second, std::chrono::steady_clock::now());
    if (d->second.pid != 0) return true;
  }
  // A stale container of that name (an agent killed while it launched
  // this attempt) goes first; the runtime's state directory says whether
  // there is one without running it (10-15 ms). Not waited for, mu_ held:
  // the task starts on a later pass once the delete has ended; after one
  // has, whatever is left is the runtime's run to refuse, as a failed start.
  const std::string root = OciStateDirectory(*runtime, options_.state_dir);
  if (!OciContainerMayExist(*runtime, id, root)) return false;
  if (d != oci_deletes_.end() && d->second.runs > 0) return false;
  return DeleteContainer(*runtime, id, root);
}


int32_t Agent::MigGpuInstance(const api::TaskAssignment& a, const std::vector<int32_t>& gpus) const {
  const int mig_start = a.mig_start;
  if (mig_start < 0 || gpus.empty()) return -1;
  auto g = options_.inventory.mig_devices.find(gpus[0]);
  if (g == options_.inventory.mig_devices.end()) return -1;
  auto d = g->second.find(mig_start);
  return d == g->second.end() ? -1 : d->second.gpu_instance;
}

// A task that did not start: exit 127 (as a shell's "command not found"),
// and why, in its log and in its end reason (api::kCouldNotStart), so that
// `rota describe` tells it from a program that exits 127 itself.
void Agent::NotStarted(Task* t, const std::string& log_path, const std::string& why) {
  AppendToTaskFile(log_path, "rota: " + why + "\n");
  t->exited = true;
  t->exit_code = 127;
  t->exit_reason = std::string(api::kCouldNotStart) + why;
}

void RuntimeTrouble::ExecTimedOut(uid_t uid, Clock::time_point now) {
  exec_timeouts_.emplace_back(now, uid);
  while (!exec_timeouts_.empty() && (exec_timeouts_.size() > 16 || now - exec_timeouts_.front().first >= kWindow)) {
    exec_timeouts_.pop_front();
  }
}

std::string RuntimeTrouble::Problem(Clock::time_point now) const {
  std::string problem;
  std::set<uid_t> users;
  int in_window = 0;
  for (const auto& [at, uid] : exec_timeouts_) {
    if (now - at >= kWindow) continue;
    ++in_window;
    users.insert(uid);
  }
  if (in_window >= kExecTimeoutsToDrain && (one_user_ || users.size() >= 2)) {
    problem = std::to_string(in_window) + " starts in a row" +
              (users.size() > 1 ? ", of " + std::to_string(users.size()) + " users," : "") +
              " did not exec their program within 10 s (a hung file system?)";
  }
  if (!stuck_.empty()) {
    if (!problem.empty()) problem += "; ";
    problem += "the OCI runtime could not delete " +
               (stuck_.size() == 1 ? std::string("a container") : std::to_string(stuck_.size()) + " containers") +
               " (its delete hung, killed after " +
               std::to_string(std::chrono::duration_cast<std::chrono::seconds>(kOciDeleteLimit).count()) + " s)";
  }
  return problem;
}

std::string PortTaken(int port) {
  // As a server would take it (SO_REUSEADDR: a connection of an earlier
  // holder waiting out TIME_WAIT is no holder), listening: a socket bound
  // without listening, as one listening, makes the listen fail.
  auto taken = [&](int family) -> std::string {
    const int fd = socket(family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return "";  // (no IPv6; or the agent's own trouble, not a holder: rank 0 tries)
    const int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    int r;
    if (family == AF_INET) {
      sockaddr_in a{};
      a.sin_family = AF_INET;
      a.sin_port = htons(static_cast<uint16_t>(port));
      a.sin_addr.s_addr = htonl(INADDR_ANY);
      r = bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
    } else {
      setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof(one));  // (the IPv4 side is asked above)
      sockaddr_in6 a{};
      a.sin6_family = AF_INET6;
      a.sin6_port = htons(static_cast<uint16_t>(port));
      a.sin6_addr = in6addr_any;
      r = bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
      if (r != 0 && errno == EADDRNOTAVAIL) r = 0;  // (IPv6 off on the host)
    }
    if (r == 0) r = listen(fd, 1);
    const int err = errno;
    close(fd);
    if (r == 0) return "";
    return std::string(family == AF_INET ? "IPv4" : "IPv6") + " port " + std::to_string(port) + ": " + std::strerror(err);
  };
  std::string why = taken(AF_INET);
  if (why.empty()) why = taken(AF_INET6);
  return why;
}

std::string DiskProblem(const std::vector<std::string>& dirs, int64_t reserve_mib, bool had_problem) {
  if (reserve_mib <= 0) return "";
  // (Once short, it must have half the reserve again to be fine.)
  const int64_t needed = had_problem ? reserve_mib + std::max<int64_t>(reserve_mib / 2, 1) : reserve_mib;
  for (const std::string& dir : dirs) {
    struct statvfs st {};
    if (dir.empty()) continue;
    if (statvfs(dir.c_str(), &st) != 0) return "cannot read " + dir + " (" + std::strerror(errno) + ")";  // (made at start)
    if ((st.f_flag & ST_RDONLY) != 0) return dir + " is on a read-only file system";
    const int64_t free_mib = static_cast<int64_t>(st.f_bavail / (uint64_t{1} << 20) * st.f_frsize +
                                                  st.f_bavail % (uint64_t{1} << 20) * st.f_frsize / (uint64_t{1} << 20));
    if (free_mib < needed) {
      return "only " + std::to_string(free_mib) + " MiB free in " + dir + " (the agent keeps " + std::to_string(reserve_mib) +
             " MiB: --disk-reserve)";
    }
    if (st.f_files > 0 && st.f_favail == 0) return "no inodes left in " + dir;
  }
  return "";
}

std::string Agent::LeaseFile() const { return options_.state_dir + "/lease"; }

void Agent::RenewLease(int64_t sent_at_ns, int64_t fence_after_ms) {
  if (options_.state_dir.empty()) return;
  // The deadline counts from when the heartbeat was sent (the server heard
  // it at or after that), on CLOCK_BOOTTIME. Written whole into a second
  // file, then swapped with the lease (RENAME_EXCHANGE): readers see the old
  // deadline or the new one, never part of either, and the second file
  // keeps the old one's blocks to be written over next time. So a disk that
  // fills after the first renewal does not stop the renewals: were it to,
  // every task of this node would fence itself while the agent is well and
  // the server hears from it. (Fixed width: written over in place.)
  const int64_t deadline = sent_at_ns + fence_after_ms * 1'000'000;
  std::lock_guard<std::mutex> lock(lease_mu_);
  if (sent_at_ns < lease_sent_at_) return;  // (the answer to an earlier heartbeat, come later)
  const std::string lease = LeaseFile();
  const std::string next = lease + ".next";
  // A lease that has lapsed is not renewed until the supervisors have seen
  // it lapsed (they look every 100 ms) and fenced their tasks: the server
  // may have given the node's gangs up by then and placed them elsewhere. A
  // renewal that lands between the deadline and a supervisor's next look
  // (an agent that wakes from a freeze, a late answer) would otherwise
  // bring the tasks back beside their next attempt.
  if (const int64_t current = ReadLeaseDeadline(lease.c_str()); current > 0 && BootTimeNs() > current) {
    std::fprintf(stderr, "rota agent: the tasks' lease lapsed %.1f s ago: renewed once their supervisors have fenced them\n",
                 (BootTimeNs() - current) / 1e9);
    // (The answer is applied after this: no task starts under the lapsed
    // lease, where its supervisor would kill it at once.)
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
  }
  // (A supervisor that reads it while a later renewal writes over it, two
  // swaps on, reads again: WriteLeaseFile.)
  int err = WriteLeaseFile(next, deadline);
  if (err == 0 && renameat2(AT_FDCWD, next.c_str(), AT_FDCWD, lease.c_str(), RENAME_EXCHANGE) != 0) {
    // The first lease (nothing to swap with), or a file system that cannot
    // swap: the second file becomes the lease. After the first, a second
    // one is made at once: from the next renewal on nothing new is written.
    const int swap_err = errno;
    if (swap_err != ENOENT && swap_err != EINVAL && swap_err != ENOSYS && swap_err != EOPNOTSUPP) err = swap_err;
    else if (rename(next.c_str(), lease.c_str()) != 0) err = errno;
    else if (swap_err == ENOENT) WriteLeaseFile(next, deadline);
  }
  if (err == 0) lease_sent_at_ = sent_at_ns;
  // Said once when renewals start failing, and once when they work again.
  if ((err != 0) != lease_failing_) {
    lease_failing_ = err != 0;
    if (err != 0) {
      std::fprintf(stderr, "rota agent: cannot renew the tasks' lease in %s (%s): they stop themselves at its deadline\n",
                   options_.state_dir.c_str(), std::strerror(err));
    } else {
      std::fprintf(stderr, "rota agent: the tasks' lease is renewed again\n");
    }
  }
}

bool Agent::SaveRecord(const std::string& key, Task& t) {
  t.record_file = options_.state_dir + "/tasks/" + FileKey(key) + ".json";
  const json record{{"key", key},           {"assignment", api::AssignmentToJson(t.assignment)}, {"pid", t.pid},
                    {"shim", t.shim},       {"shim_start", t.shim_start}, {"exit_file", t.exit_file},
                    {"cgroup", t.cgroup},   {"log_path", t.log_path},     {"checkpoint_file", t.checkpoint_file},
                    {"uid", t.uid},         {"gpu_mask", t.gpu_mask},     {"oci_runtime", t.oci_runtime},
                    {"oci_id", t.oci_id},   {"oci_root", t.oci_root}, {"memory_limited", t.memory_limited},
                    {"stop_signal", t.stop_signal}, {"grace_ms", t.grace_ms},
                    // (This agent's supervisors start nothing before they are
                    // recorded: a record without one is of a task never started.)
                    {"recorded_first", true}};
  // Written whole or not at all: a temporary file renamed over. Not
  // fsynced: a record outlives the agent (the page cache keeps it), which
  // is what adoption needs; only a machine's crash can lose it, and that
  // ends its tasks too (a torn or empty record is dropped on load). Two
  // fsyncs were most of a launch's 15 ms.
  const std::string tmp = t.record_file + ".tmp";
  const int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
  int err = fd < 0 ? errno : 0;
  if (fd >= 0) {
    const std::string text = record.dump();
    err = WriteWhole(fd, text.data(), text.size(), 0);
    close(fd);
  }
  if (err == 0 && rename(tmp.c_str(), t.record_file.c_str()) != 0) err = errno;
  if (err != 0) {
    unlink(tmp.c_str());
    t.record_error = std::strerror(err);
    std::fprintf(stderr, "rota agent: cannot record task %s in %s (%s): a restarted agent could not adopt it\n",
                 key.c_str(), options_.state_dir.c_str(), t.record_error.c_str());
    return false;
  }
  return true;
}

void Agent::ForgetRecord(const Task& t) {
  if (!t.record_file.empty()) unlink(t.record_file.c_str());
  if (!t.exit_file.empty()) unlink(t.exit_file.c_str());
}

void Agent::AdoptTasks() {
  if (options_.state_dir.empty()) return;
  std::error_code ec;
  std::filesystem::create_directories(options_.state_dir + "/tasks", ec);
  chmod(options_.state_dir.c_str(), 0700);
  std::set<std::string> groups;  // cgroups of tasks adopted (or known to be gone)
  for (const auto& entry : std::filesystem::directory_iterator(options_.state_dir + "/tasks", ec)) {
    const std::string path = entry.path().string();
    if (entry.path().extension() != ".json") continue;
    std::ifstream in(path);
    json r = json::parse(in, nullptr, false);
    if (r.is_discarded() || !r.contains("key") || !r.contains("assignment")) {
      unlink(path.c_str());
      continue;
    }
    auto assignment = api::AssignmentFromJson(r["assignment"], "assignment.");
    if (!assignment.ok()) {
      // Unreadable: nothing can be adopted from it; its cgroup (if it had
      // one) is killed below as unrecorded.
      std::fprintf(stderr, "rota agent: dropping task record %s: %s\n", path.c_str(),
                   std::string(assignment.status().message()).c_str());
      unlink(path.c_str());
      continue;
    }
    auto t = std::make_unique<Task>();
    t->assignment = std::move(assignment).value();
    const api::TaskAssignment& a = t->assignment;
    t->job = a.job.value();
    t->task = a.task;
    t->replica = a.replica;
    t->attempt = a.attempt;
    t->pid = r.value("pid", 0);
    t->shim = r.value("shim", 0);
    t->shim_start = r.value("shim_start", uint64_t{0});
    t->exit_file = r.value("exit_file", std::string());
    t->cgroup = r.value("cgroup", std::string());
    t->log_path = r.value("log_path", std::string());
    t->checkpoint_file = r.value("checkpoint_file", std::string());
    t->uid = r.value("uid", uid_t{0});
    t->gpu_mask = r.value("gpu_mask", uint64_t{0});
    t->oci_runtime = r.value("oci_runtime", std::string());
    t->oci_id = r.value("oci_id", std::string());
    t->oci_root = r.value("oci_root", std::string());
    t->memory_limited = r.value("memory_limited", false);
    t->stop_signal = r.value("stop_signal", static_cast<int>(SIGTERM));
    t->grace_ms = r.value("grace_ms", options_.stop_grace_ms);
    t->record_file = path;
    t->adopted = true;
    int code;
    if (t->shim == 0 && r.value("recorded_first", false)) {
      // No supervisor recorded, by an agent whose supervisors start nothing
      // before they are: nothing of this launch ran (a supervisor that was
      // started heard no word, and exits). The server's next answer starts
      // it once.
      if (cgroups_ && !t->cgroup.empty()) cgroups_->Remove(t->cgroup);
      ForgetRecord(*t);
      continue;
    }
    if (t->shim != 0 && t->pid == 0) {
      // Recorded, then the agent was killed before the supervisor said
      // what it started: its child, if it started one.
      t->pid = SupervisedTaskPid(t->shim, t->shim_start);
    }
    if (t->shim == 0) {
      // No supervisor recorded: the agent (of a version before
      // recorded_first) died while launching it. What it may have started is
      // in its cgroup: cleared, the attempt never ran, and the server's next
      // answer starts it once.
      if (cgroups_ && !t->cgroup.empty()) {
        cgroups_->Remove(t->cgroup);
        ForgetRecord(*t);
        continue;
      }
      // A container's runtime may have started it: stopped and removed,
      // so that "lost" is true.
      if (!t->oci_id.empty()) RunQuiet(OciDeleteArgv(t->oci_runtime, t->oci_id, t->oci_root), kAdoptDeleteMs);
      t->exit_reason = "lost";  // no cgroup to clear it by: safer reported gone than run twice
      code = 255;
    } else {
      code = PollTask(*t);
    }
    if (code >= 0) {
      // It ended while no agent watched: its exit goes out with the next report.
      t->exited = true;
      t->exit_code = code;
      NoteFenced(*t);
      if (cgroups_ && !t->cgroup.empty()) cgroups_->Remove(t->cgroup);
      // (A runtime killed by its supervisor's fence leaves its state behind.)
      if (!t->oci_id.empty() && OciContainerMayExist(t->oci_runtime, t->oci_id, t->oci_root)) {
        DeleteContainer(t->oci_runtime, t->oci_id, t->oci_root);  // (it ended: nothing to wait for)
      }
    } else {
      std::fprintf(stderr, "rota agent: adopted task %s (pid %d), still running\n",
                   r["key"].get<std::string>().c_str(), t->pid);
    }
    if (!t->cgroup.empty()) groups.insert(t->cgroup);
    log_shipped_[t->log_path] = 0;  // the server keeps what it has (by offset)
    tasks_[r["key"].get<std::string>()] = std::move(t);
  }
  // Exit files no record names (a supervisor of a launch cut short writes
  // one after its record was cleared): nothing will read them.
  std::set<std::string> exit_files;
  for (const auto& [key, t] : tasks_) exit_files.insert(t->exit_file);
  for (const auto& entry : std::filesystem::directory_iterator(options_.state_dir + "/tasks", ec)) {
    if (entry.path().extension() == ".exit" && !exit_files.count(entry.path().string())) unlink(entry.path().c_str());
  }
    // Processes in a group of ours that no record names (an agent killed
  // between launch and record): nothing can adopt them, so they stop, and
  // the server's next answer starts the rank once, afresh.
  if (cgroups_) {
    for (const std::string& name : cgroups_->Groups()) {
      // Only this agent's own (another agent of the same node name, as in
      // tests, has groups with another tag).
      if (groups.count(name) || instance_tag_.empty() || name.size() < instance_tag_.size() ||
          name.compare(name.size() - instance_tag_.size(), instance_tag_.size(), instance_tag_) != 0) {
        continue;
      }
      if (!cgroups_->Pids(name).empty()) {
        std::fprintf(stderr, "rota agent: stopping unrecorded processes in cgroup %s\n", name.c_str());
      }
      cgroups_->Remove(name);
    }
  }
}

bool Agent::Register() {
  const Inventory& inv = options_.inventory;
  json node{{"name", options_.node_name},
            {"gpu_model", inv.gpu_model},
            {"gpus", inv.gpus},
            {"gpu_memory", FormatMemoryMiB(inv.gpu_memory)},
            {"nvlink_islands", inv.nvlink_islands},
            {"cpu", FormatMilliCpu(HostCpu())},
            {"memory", FormatMemoryMiB(HostMemory())},
            {"labels", options_.labels}};
  node["labels"]["hostname"] = options_.node_name;
  node["labels"]["gpu_model"] = inv.gpu_model;
  if (!inv.mig.empty()) {
    json mig = json::object();
    for (const auto& [gpu, layout] : inv.mig) mig[std::to_string(gpu)] = layout;
    node["mig"] = std::move(mig);
    if (inv.mig_fixed) node["mig_fixed"] = true;  // the driver's layouts: not re-partitioned by rota
  }
  const std::string server = servers_.current();
  auto client = MakeClient(server, options_);
  auto res = client->Post("/v1/agents/register",
                          json{{"node", node},
                               {"simulated", inv.simulated},
                               {"address", options_.address},
                               {"mps", !inv.simulated && MpsRunning()},
                               {"instance", instance_}}
                              .dump(),
                          "application/json");
  Heard(servers_, server, res);
  if (!res && res.error() == httplib::Error::SSLServerVerification && !said_tls_.exchange(true)) {
    std::fprintf(stderr,
                 "rota agent: %s: its certificate is not trusted or does not name this host; pass --ca-cert FILE "
                 "(the CA that signed it, or the server's own certificate)\n",
                 server.c_str());
  } else if (!res && res.error() == httplib::Error::SSLLoadingCerts && !said_tls_.exchange(true)) {
    std::fprintf(stderr, "rota agent: --ca-cert %s: its certificates could not be loaded\n", options_.ca_cert.c_str());
  }
  if (!res) return false;
  if (res->status != 200) {
    // Said once, then every 20th time while it lasts (it is retried twice a second).
    const int refused = register_refusals_++;
    if (res->status != 503 && refused % 20 == 0) {
      std::fprintf(stderr, "rota agent: register refused (%d, %d in a row): %s", res->status, refused + 1, res->body.c_str());
    }
    return false;
  }
  register_refusals_ = 0;
  const json body = json::parse(res->body, nullptr, false);
  std::lock_guard<std::mutex> lock(mu_);
  applied_revision_ = 0;  // a restarted server counts revisions from its recovery
  // Only this server process's answers are applied from now on (a late one
  // of the last server's, or one kept for a replica's back-off, is not).
  server_id_ = body.is_object() && body.contains("server") && body["server"].is_string() ? body["server"].get<std::string>() : "";
  deferred_answer_.reset();
  return true;
}

bool Agent::LogShipped(const Task& t) {
  if (!options_.ship_logs || t.log_path.empty()) return true;
  std::error_code ec;
  const auto size = std::filesystem::file_size(t.log_path, ec);
  auto it = log_shipped_.find(t.log_path);
  const int64_t shipped = it == log_shipped_.end() ? 0 : it->second;
  // (Past the server's cap it drops the rest: a task that made its log a
  // sparse terabyte is not kept, nor shipped zeros, for ever.)
  const int64_t cap = log_cap_.load();
  return ec || shipped >= static_cast<int64_t>(size) || (cap > 0 && shipped > cap);
}

bool Agent::Heartbeat(int wait_ms) {
  uint64_t busy = 0;
  api::HeartbeatReport report;
  report.node = options_.node_name;
  report.disk_problem = DiskProblem({options_.state_dir, options_.logs_dir}, options_.disk_reserve_mib, disk_short_);
  report.wait_ms = wait_ms;
  constexpr std::streamsize kLogChunk = 64 * 1024;
  std::streamsize log_budget = 384 * 1024;  // all files: 512 KiB in base64
  std::set<std::string> shipping;        // log files in this report
  std::vector<std::pair<size_t, Task*>> with_logs;  // their tasks' reports (by index), in turn
  std::map<std::string, int64_t> sent;   // their offsets once the server has this report
  std::unique_lock<std::mutex> lock(mu_);
  if (report.disk_problem.empty() == disk_short_) {  // (said when it starts and when it ends)
    disk_short_ = !report.disk_problem.empty();
    if (!disk_short_) std::fprintf(stderr, "rota agent: the disk takes new tasks again\n");
    else std::fprintf(stderr, "rota agent: %s: the server drains this node until it clears\n", report.disk_problem.c_str());
  }
  Reap();
  report.runtime_problem = trouble_.Problem(std::chrono::steady_clock::now());
  if (report.runtime_problem.empty() == runtime_short_) {  // (said when it starts and when it ends)
    runtime_short_ = !report.runtime_problem.empty();
    if (!runtime_short_) std::fprintf(stderr, "rota agent: the task runtime takes new tasks again\n");
    else std::fprintf(stderr, "rota agent: %s: the server drains this node until it clears\n", report.runtime_problem.c_str());
  }
  report.revision = applied_revision_;  // (tasks_ as of that answer: both under mu_)
  for (auto& [key, t] : tasks_) {
    if (!t->exited) busy |= t->gpu_mask;
    api::TaskReport& r = report.tasks.emplace_back();
    r.job = JobId(t->job);
    r.task = t->task;
    r.replica = t->replica;
    r.attempt = t->attempt;
    r.exited = t->exited;
    r.exit_code = t->exit_code;
    r.exit_reason = t->exit_reason;
    // How long ago it ended, on the node's clock alone (the server's may differ).
    if (t->exited && t->ended_at != 0) r.ended_ago = std::max<Duration>(0, RealNowMicros() - t->ended_at);
    if (!t->exited) {
      // Its CPU and memory so far: the cgroup's (all its processes), else
      // its own process's.
      if (cgroups_ && !t->cgroup.empty()) {
        const Cgroups::Usage u = cgroups_->UsageOf(t->cgroup);
        r.cpu_used_us = u.cpu_us;
        r.cpu_throttled_us = u.throttled_us;
        r.memory_peak = u.memory_peak;
      } else if (t->pid > 0) {
        const ProcessUsage u = ProcessUsageOf(t->pid);
        r.cpu_used_us = u.cpu_us;
        r.memory_peak = u.memory_peak;
      }
    }
    if (options_.ship_logs && !t->log_path.empty() && shipping.insert(t->log_path).second) {
      with_logs.emplace_back(report.tasks.size() - 1, t.get());
    }
    std::string ckpt;
    TimePoint ckpt_at = 0;
    if (!t->checkpoint_file.empty() && ReadCheckpoint(t->checkpoint_file, t->uid, &ckpt, &ckpt_at)) {
      r.checkpoint_path = std::move(ckpt);
      r.checkpoint_at = ckpt_at;
    }
  }
  // The next piece of each log (a replica's log spans its attempts: one
  // offset per file), 64 KiB at most, within a budget that keeps a report
  // well under the server's 1 MiB limit; the files take turns at the
  // budget, from where the last report stopped, so no task's log (one
  // written as fast as it can) holds back the others'. A file ships up to
  // a byte past the server's cap, and no more (LogShipped).
  const int64_t cap = log_cap_.load();
  const size_t files = with_logs.size();
  size_t turns = 0;
  for (; turns < files && log_budget > 0; ++turns) {
    const auto [index, t] = with_logs[(ship_turn_ + turns) % files];
    auto known = log_shipped_.find(t->log_path);
    const int64_t from = known == log_shipped_.end() ? 0 : known->second;
    int64_t want = std::min<int64_t>(kLogChunk, log_budget);
    if (cap > 0) want = std::min<int64_t>(want, cap + 1 - from);  // (a byte past it: the server says it truncated)
    if (want <= 0) continue;
    // (Through OpenTaskFile: the file is the task's; a lease it holds on
    // it skips this report's piece rather than stalling the agent.)
    std::string chunk(static_cast<size_t>(want), '\0');
    ssize_t got = -1;
    if (const int fd = OpenTaskFile(t->log_path, O_RDONLY); fd >= 0) {
      got = pread(fd, chunk.data(), chunk.size(), static_cast<off_t>(from));
      close(fd);
    }
    chunk.resize(static_cast<size_t>(std::max<ssize_t>(0, got)));
    if (chunk.empty()) continue;
    log_budget -= static_cast<std::streamsize>(chunk.size());
    sent[t->log_path] = from + static_cast<int64_t>(chunk.size());
    api::TaskReport& r = report.tasks[index];
    r.log = std::move(chunk);
    r.log_offset = from;
  }
  ship_turn_ = files == 0 ? 0 : (ship_turn_ + turns) % files;
  const auto sick = ReadHealthFile(options_.health_file);
  report.gpus = SampleGpus(options_.inventory, busy);
  if (options_.meter_interval_ms <= 0) meter_.Add(ReadMeters(options_.inventory, busy, true), SteadyMs());
  const uint64_t window = meter_.Take(&report.gpus);
  for (api::GpuTelemetry& g : report.gpus) {
    if (g.temperature_c > options_.max_temperature_c) {
      g.healthy = false;
      g.health_reason = "temperature " + std::to_string(g.temperature_c) + "C";
    }
    if (auto it = sick.find(g.index); it != sick.end()) {
      g.healthy = false;
      g.health_reason = it->second;
    }
  }
  lock.unlock();
  const std::string server = servers_.current();
  report.instance = instance_;
  const std::string body = api::HeartbeatToJson(report).dump(-1, ' ', false, json::error_handler_t::replace);
  // A server that accepts and never answers (a paused one) must not eat the
  // tasks' lease: a tenth of the fence interval (2..10 s) to answer, beyond
  // any long poll's wait.
  const int answer_s = std::clamp(fence_after_ms_.load() / 10'000, 2, 10);
  int64_t sent_at = 0;
  httplib::Result res(nullptr, httplib::Error::Unknown);
  // On a kept-alive connection the server may have closed just as this was
  // sent (its idle timeout, or closing idle connections to make room; over
  // TLS httplib's liveness check takes the close_notify for data, so such a
  // connection is found closed only on use): then once more on a new one.
  // (The report says what the node has; the server takes it twice as it
  // takes it once.)
  for (int attempt = 0; attempt < 2; ++attempt) {
    bool reused = false;
    auto client = TakeReporter(server, /*fresh=*/attempt > 0, &reused);
    client->set_read_timeout(answer_s + wait_ms / 1000, 0);
    sent_at = BootTimeNs();
    res = client->Post("/v1/agents/heartbeat", body, "application/json");
    if (res) GiveBackReporter(server, std::move(client));
    // (Not after a timeout: the lease's time is not spent twice. A closed
    // connection fails at once.)
    if (res || !reused || BootTimeNs() - sent_at > 1'000'000'000) break;
  }
  Heard(servers_, server, res);
  meter_.Done(window, res && res->status == 200);
  if (!res || res->status != 200) {
    // Said once when heartbeats start failing, and every tenth time after
    // (with how long the tasks' lease has been without an answer).
    const int failed = ++heartbeat_failures_;
    if (failed == 1 || failed % 10 == 0) {
      std::fprintf(stderr, "rota agent: heartbeat to %s failed (%s; %d in a row, last answered %.1f s ago)\n",
                   server.c_str(), res ? ("HTTP " + std::to_string(res->status)).c_str() : httplib::to_string(res.error()).c_str(),
                   failed, (BootTimeNs() - last_answered_ns_.load()) / 1e9);
    }
  }
  if (!res) return false;
  if (res->status == 404) {
    registered_ = false;  // the server restarted or forgot us
    return false;
  }
  if (res->status != 200) return false;
  auto answer = api::AnswerFromJson(json::parse(res->body, nullptr, false));
  if (!answer.ok()) {
    std::fprintf(stderr, "rota agent: unreadable heartbeat answer: %s\n", std::string(answer.status().message()).c_str());
    return false;
  }
  if (!FromRegisteredServer(*answer)) {
    // Another server process answered than the one this agent registered
    // with (it restarted, or an old leader answered late): its revisions
    // count from another start. Not applied, the lease not renewed by it:
    // the agent registers again.
    registered_ = false;
    return false;
  }
  // Heard by the server it registered with (not before: log pieces an old
  // leader took are sent again to the new one).
  if (heartbeat_failures_.exchange(0) > 0) {
    std::fprintf(stderr, "rota agent: heartbeats answered again by %s (%.1f s after the last answer)\n", server.c_str(),
                 (BootTimeNs() - last_answered_ns_.load()) / 1e9);
  }
  last_answered_ns_ = BootTimeNs();
  if (!sent.empty()) {
    std::lock_guard<std::mutex> shipped(mu_);
    for (const auto& [path, offset] : sent) log_shipped_[path] = std::max(log_shipped_[path], offset);
  }
  {
    // Answered by another server than the watch's (its server stopped
    // answering, or lost the lead, and the stream has not noticed yet, e.g.
    // a paused process): move the watch to the one that answers.
    std::lock_guard<std::mutex> watch(watch_mu_);
    if (watch_client_ != nullptr && watch_server_ != server) watch_client_->stop();
  }
  // The server heard us: the tasks may run until one more fence interval.
  // (This answer's interval with this heartbeat's time: another thread's
  // answer may set fence_after_ms_ meanwhile.)
  const int64_t fence_after_ms = answer->fence_after_ms > 0 ? std::min<int64_t>(answer->fence_after_ms, INT32_MAX)
                                                            : fence_after_ms_.load();
  fence_after_ms_ = static_cast<int>(fence_after_ms);
  RenewLease(sent_at, fence_after_ms);
  lock.lock();
  // (Watching, the watch's answers start tasks and this thread's next
  // report waits on none of them; polling, this is how work comes.)
  Reconcile(*answer, /*may_start=*/!options_.watch);
  return true;
}

bool Agent::OfRegisteredServer(const api::AgentAnswer& answer) const {
  return answer.server.empty() || server_id_.empty() || answer.server == server_id_;
}

bool Agent::FromRegisteredServer(const api::AgentAnswer& answer) {
  std::lock_guard<std::mutex> lock(mu_);
  return OfRegisteredServer(answer);
}

int Agent::GraceMs(const api::TaskAssignment& a) const {
  return static_cast<int>(std::clamp<int64_t>(a.checkpoint_grace / 1000, options_.stop_grace_ms, INT32_MAX));
}

void Agent::Reconcile(const api::AgentAnswer& answer, bool may_start) {
  if (!OfRegisteredServer(answer)) return;  // (not ours to apply)
  const double received_at = WallSeconds();
  if (answer.heartbeat_interval_ms > 0) {
    server_interval_ms_ = static_cast<int>(std::clamp<int64_t>(answer.heartbeat_interval_ms, 10, 600'000));
  }
  if (answer.log_cap_bytes > 0) log_cap_ = answer.log_cap_bytes;
  // Start what is wanted and missing; stop what is not wanted.
  const uint64_t revision = answer.revision;
  if (revision < applied_revision_) return;  // read before one we applied already
  applied_revision_ = revision;
  std::map<std::string, const api::TaskAssignment*> desired;
  for (const api::TaskAssignment& a : answer.tasks) desired[Key(a.job.value(), a.task, a.replica, a.attempt)] = &a;
  for (auto it = tasks_.begin(); it != tasks_.end();) {
    if (desired.count(it->first) == 0) {
      if (!it->second->stopping && !it->second->exited && it->second->pid != 0) {
        std::fprintf(stderr, "rota agent: stopping job %llu %s: not in the server's answer (revision %llu, %zu tasks)\n",
                     static_cast<unsigned long long>(it->second->job), it->first.c_str(),
                     static_cast<unsigned long long>(revision), answer.tasks.size());
      }
      StopTask(*it->second, false);
      if ((it->second->exited || (it->second->pid == 0 && it->second->shim == 0)) && LogShipped(*it->second)) {
        if (finished_.insert(it->first).second) finished_order_.push_back(it->first);
        if (finished_order_.size() > 100000) {
          finished_.erase(finished_order_.front());
          finished_order_.pop_front();
        }
        const std::string log = it->second->log_path;
        ForgetRecord(*it->second);
        it = tasks_.erase(it);
        const bool still_written = std::any_of(tasks_.begin(), tasks_.end(), [&](const auto& kv) {
          return kv.second->log_path == log;
        });
        if (!still_written) log_shipped_.erase(log);  // all of it was shipped (LogShipped)
        continue;
      }
    }
    ++it;
  }
  // Whole GPUs still held by tasks on their way out (a requeued or resized
  // gang in its checkpoint grace period): no new task starts on them until
  // those exit. (Shares and MIG instances of a GPU are meant to coexist.)
  uint64_t stopping = 0;
  for (const auto& [key, t] : tasks_) {
    if (desired.count(key) == 0 && !t->exited && t->assignment.whole_gpus()) stopping |= t->gpu_mask;
  }
  bool deferred = false;
  const auto steady_now = std::chrono::steady_clock::now();
  // Under a lapsed lease (a watch's answer while the heartbeat that renews
  // it waits for the supervisors to fence theirs) nothing starts: a task's
  // supervisor would kill it at once. The reap loop applies it again. (Read
  // once, when something is to start.)
  std::optional<bool> lapsed;
  bool budget_spent = false;
  auto lease_lapsed = [&] {
    if (!lapsed) {
      const int64_t deadline = options_.state_dir.empty() ? 0 : ReadLeaseDeadline(LeaseFile().c_str());
      lapsed = deadline > 0 && BootTimeNs() > deadline;
    }
    return *lapsed;
  };
  for (auto& [key, wanted] : desired) {
    if (auto running = tasks_.find(key); running != tasks_.end()) {
      // The grace it stops with is the server's latest word (an admin may
      // have lowered limits.max_checkpoint_grace since it started).
      Task& t = *running->second;
      if (!t.stopping) t.grace_ms = GraceMs(*wanted);
      continue;
    }
    if (finished_.count(key)) continue;
    if (lease_lapsed()) {
      const auto retry = steady_now + std::chrono::milliseconds(400);
      if (!deferred || retry < deferred_until_) deferred_until_ = retry;
      deferred = true;
      continue;
    }
    if (!may_start) {
      // (The reap loop starts it, woken at the end of this pass.)
      if (!deferred || steady_now < deferred_until_) deferred_until_ = steady_now;
      deferred = true;
      continue;
    }
    if (const auto now = std::chrono::steady_clock::now(); now - steady_now > kLaunchBudget) {
      // Each start waits for its program's exec, this agent's lock held (and
      // its heartbeats with it): up to 10 s apiece on a file system that
      // hangs, and a few such starts in one pass outlasted the node's
      // timeout, so that the server took the node for lost and the lease
      // fenced every task on it. The rest start on the reap loop's pass
      // 50 ms on, a heartbeat waiting for the lock free to go out between.
      if (!budget_spent) {
        std::fprintf(stderr, "rota agent: task starts took %.1f s in one pass (a file system that hangs?): the rest "
                             "start on the next\n",
                     std::chrono::duration<double>(now - steady_now).count());
      }
      budget_spent = true;
      const auto retry = now + std::chrono::milliseconds(50);
      if (!deferred || retry < deferred_until_) deferred_until_ = retry;
      deferred = true;
      continue;
    }
    const api::TaskAssignment& a = *wanted;
    if (a.service) {
      // A replica that keeps exiting waits out its back-off (the reap loop
      // starts it when that ends).
      auto b = backoff_.find(Key(a.job.value(), a.task, a.replica, 0));
      if (b != backoff_.end() && b->second.not_before > steady_now) {
        if (!deferred || b->second.not_before < deferred_until_) deferred_until_ = b->second.not_before;
        deferred = true;
        continue;
      }
    }
    uint64_t wants = 0;
    for (int g : a.gpus) wants |= 1ULL << g;
    if ((wants & stopping) != 0) continue;  // started by a later reconcile, once they are free
    if (StaleContainerWaits(a)) {
      // (Before anything of the start is done: nothing of it is redone,
      // the job's hostfile and the task's log untouched, while it waits.)
      const auto retry = std::chrono::steady_clock::now() + std::chrono::milliseconds(50);
      if (!deferred || retry < deferred_until_) deferred_until_ = retry;
      deferred = true;
      continue;
    }
    auto t = std::make_unique<Task>();
    t->assignment = a;
    t->job = a.job.value();
    t->task = a.task;
    t->replica = a.replica;
    t->attempt = a.attempt;
    t->stop_signal = SignalNumber(a.checkpoint_signal.empty() ? std::string("SIGTERM") : a.checkpoint_signal);
    t->grace_ms = GraceMs(a);
    std::vector<int32_t> gpu_list;
    for (int g : a.gpus) {
      t->gpu_mask |= 1ULL << g;
      gpu_list.push_back(g);
    }
    const std::string visible = VisibleDevices(options_.inventory, gpu_list);
    std::string launch_error;  // why the task cannot start here, reported as its exit
    const std::string job_dir = options_.logs_dir + "/" + std::to_string(t->job);
    const std::string name = a.task_name + "-" + std::to_string(t->replica);
    LaunchSpec spec;
    spec.log_path = job_dir + "/" + name + ".log";
    t->log_path = spec.log_path;
    spec.argv = a.command;
    // Who the task runs as: the job's user's account on this node (an
    // assignment without a user, from an older server, runs as the agent).
    TaskIdentity identity;
    identity.uid = getuid();
    identity.gid = getgid();
    if (!a.user.empty()) {
      auto resolved = ResolveIdentity({.user = a.user, .uid = a.uid, .gid = a.gid, .allow_root = a.allow_root},
                                      getuid(), options_.node_name);
      if (resolved.ok()) {
        identity = *resolved;
        spec.set_identity = getuid() == 0;
        spec.uid = identity.uid;
        spec.gid = identity.gid;
        spec.groups = identity.groups;
      } else {
        launch_error = std::string(resolved.status().message());
      }
      // A clean base: nothing of the agent's own environment (LD_PRELOAD,
      // its token) reaches the task; the job's env goes on top.
      spec.env = BaseEnvironment(identity);
    } else if (getuid() == 0) {
      launch_error = "the assignment names no user (a server older than this agent): a root agent runs no task "
                     "without knowing whose it is";
    } else {
      for (const char* pass : {"PATH", "HOME", "USER", "LANG", "TMPDIR", "TERM"}) {
        if (const char* v = getenv(pass)) spec.env[pass] = v;
      }
    }
    for (const auto& [k, v] : a.env) spec.env[k] = v;
    spec.env["CUDA_VISIBLE_DEVICES"] = visible;
    spec.env["NVIDIA_VISIBLE_DEVICES"] = visible.empty() ? "none" : visible;
    if (const int milli = a.gpu_milli; milli > 0) {
      // A share of one GPU. Without MPS the limits are advisory (the task may
      // honour them, e.g. torch.cuda.set_per_process_memory_fraction); where
      // an MPS daemon serves the GPU it enforces them.
      const int64_t mem = a.gpu_memory_limit;
      spec.env["ROTA_GPU_FRACTION"] = FormatMilliCpu(milli);
      spec.env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] = std::to_string(std::max(1, milli / 10));
      if (mem > 0) {
        spec.env["ROTA_GPU_MEMORY_LIMIT_MIB"] = std::to_string(mem);
        spec.env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] = "0=" + std::to_string(mem) + "M";
      }
    }
    if (const int mig_start = a.mig_start; mig_start >= 0) {
      // One MIG instance of gpus[0] (hardware isolation). A simulated GPU has
      // no MIG device to name: the task sees which instance it was given.
      const int32_t gpu = gpu_list.empty() ? 0 : gpu_list[0];
      const std::string profile = a.mig_profile;
      spec.env["ROTA_MIG_INSTANCE"] = std::to_string(gpu) + ":" + profile + "@" + std::to_string(mig_start);
      spec.env["CUDA_VISIBLE_DEVICES"] = spec.env["NVIDIA_VISIBLE_DEVICES"] =
          MigVisibleDevice(options_.inventory, gpu, profile, mig_start);
      if (spec.env["CUDA_VISIBLE_DEVICES"].empty()) {
        launch_error = "GPU " + std::to_string(gpu) + " has no MIG instance at slot " + std::to_string(mig_start) +
                       " (the driver's MIG layout changed since the agent registered; restart the agent)";
      }
    }
    spec.env["ROTA_JOB_ID"] = std::to_string(t->job);
    spec.env["ROTA_JOB_NAME"] = a.job_name;
    spec.env["ROTA_TASK"] = a.task_name;
    spec.env["ROTA_REPLICA"] = std::to_string(t->replica);
    spec.env["ROTA_SIMULATED_GPUS"] = options_.inventory.simulated ? "1" : "0";
    spec.env["MASTER_ADDR"] = a.master_addr;
    spec.env["MASTER_PORT"] = std::to_string(a.master_port);
    // Rank 0 listens there: a port another process holds (another user's,
    // who would have the gang's ranks meet it) fails the start, so that the
    // gang's next attempt meets at another port, rather than the ranks
    // connecting to whoever holds it.
    if (a.rank == 0 && a.world_size > 1 && !a.service && launch_error.empty()) {
      if (const std::string taken = PortTaken(a.master_port); !taken.empty()) {
        launch_error = "its rendezvous port (MASTER_PORT) is held by another process on this node (" + taken + ")";
      }
    }
    spec.env["WORLD_SIZE"] = std::to_string(a.world_size);
    spec.env["RANK"] = std::to_string(a.rank);
    spec.env["LOCAL_RANK"] = std::to_string(a.local_rank);
    spec.env["NODE_RANK"] = std::to_string(a.node_rank);
    const std::string hostfile = job_dir + "/hostfile";
    std::error_code ec;
    // The job's directory is the agent's (logs, hostfile, bundles: the task
    // cannot swap them for links); the task writes in work/, its own.
    const std::string work_dir = job_dir + "/work";
    bool moved = false;
    if (Status made = MakeJobDirs(job_dir, work_dir, identity, &moved); !made.ok() && launch_error.empty()) {
      launch_error = std::string(made.message());
    }
    if (moved) {
      for (auto it = log_shipped_.begin(); it != log_shipped_.end();) {
        it = it->first.rfind(job_dir + "/", 0) == 0 ? log_shipped_.erase(it) : std::next(it);
      }
    }
    if (!log_shipped_.count(t->log_path)) {
      // What the file already holds went out with earlier attempts here.
      std::error_code size_ec;
      const auto size = std::filesystem::file_size(t->log_path, size_ec);
      log_shipped_[t->log_path] = size_ec ? 0 : static_cast<int64_t>(size);
    }
    {
      // Made anew, not through whatever is at the name now.
      std::string hosts;
      for (const std::string& h : a.hosts) hosts += h + "\n";
      unlink(hostfile.c_str());
      if (const int fd = OpenTaskFile(hostfile, O_WRONLY | O_CREAT | O_EXCL, 0644); fd >= 0) {
        fchmod(fd, 0644);
        WriteWhole(fd, hosts.data(), hosts.size(), 0);
        close(fd);
      }
    }
    spec.env["ROTA_HOSTFILE"] = hostfile;
    spec.workdir = work_dir;
    // A task reports a checkpoint by writing its path here; the next heartbeat carries it.
    t->checkpoint_file = work_dir + "/" + name + ".checkpoint";
    t->uid = identity.uid;
    std::filesystem::remove(t->checkpoint_file, ec);  // an earlier attempt's report is not this one's
    spec.env["ROTA_CHECKPOINT_FILE"] = t->checkpoint_file;
    // Where to resume: the last checkpoint the job reported before this attempt.
    if (const std::string& last = a.last_checkpoint; !last.empty()) {
      spec.env["ROTA_LAST_CHECKPOINT"] = last;
    }
    if (!launch_error.empty()) {
      NotStarted(t.get(), spec.log_path, "cannot start the task: " + launch_error);
    } else if (spec.argv.empty()) {
      AppendToTaskFile(spec.log_path, "rota: no command; the task holds its GPUs until cancelled\n");
    } else {
      // CPU and memory limits: the process joins its cgroup before it runs.
      const int64_t cpu = a.cpu;
      const int64_t memory = a.memory;
      Status container = Status::Ok();
      if (const std::string& rootfs = a.rootfs; !rootfs.empty()) {
        // An OCI container: the runtime in the foreground is the task's process.
        container = [&]() -> Status {
          ROTA_ASSIGN_OR_RETURN(std::string runtime, FindOciRuntime(options_.oci_runtime));
          OciTask oci;
          // (Tagged as the process tasks' groups: the id names the container's
          // cgroup, /rota/<id>, which another agent on the machine, with a
          // job of the same number, would share: its runtime refused to start
          // "an already running container", or removed the other's.)
          oci.id = ContainerId(t->job, t->task, t->replica, t->attempt);
          oci.rootfs = rootfs;
          oci.args = spec.argv;
          oci.env = spec.env;
          // Inside, the job's directory is /rota; the host's PATH and HOME mean nothing there.
          oci.env["ROTA_HOSTFILE"] = "/rota/hostfile";
          oci.env["ROTA_CHECKPOINT_FILE"] = "/rota/work/" + name + ".checkpoint";
          oci.uid = identity.uid;
          oci.gid = identity.gid;
          for (gid_t g : identity.groups) {
            if (g != identity.gid) oci.additional_gids.push_back(g);
          }
          const auto& task_env = a.env;
          for (const char* host_only : {"PATH", "HOME", "TMPDIR"}) {
            if (!task_env.count(host_only)) oci.env.erase(host_only);
          }
          bool read_only_mounts = false;
          for (const MountSpec& m : a.mounts) {
            oci.mounts.push_back({m.source, m.target, m.read_only});
            read_only_mounts = read_only_mounts || m.read_only;
          }
          oci.recursive_read_only = KernelHasRecursiveReadOnly();
          if (read_only_mounts && !oci.recursive_read_only) {
            AppendToTaskFile(spec.log_path,
                             "rota: read-only mounts are read-only at their top only: this kernel cannot make a mount "
                             "read-only with its submounts (mount_setattr, Linux 5.12)\n");
          }
          oci.job_dir = job_dir;
          oci.gpus = DeviceMinors(options_.inventory, gpu_list);  // /dev/nvidia<minor>
          oci.cpu = cpu;
          oci.memory = memory;
          oci.pids = options_.task_pids_max;
          oci.hostname = options_.node_name;
          // An agent that is not root runs rootless containers.
          if (geteuid() != 0) {
            if (!OciHiddenMounts(runtime).empty()) {
              return FailedPreconditionError(
                  "crun cannot run rootless on a host with cgroup v1 controllers and a cgroup2 mount: install runc "
                  "(or run the agent as root)");
            }
            oci.rootless = true;
            oci.uid = geteuid();
            oci.gid = getegid();
            oci.additional_gids.clear();
          }
          const std::string root = OciStateDirectory(runtime, options_.state_dir);
          const std::string bundle = job_dir + "/" + name + "-" + std::to_string(t->attempt) + ".oci";
          ROTA_RETURN_IF_ERROR(WriteOciBundle(bundle, oci));
          // (A stale container of that name went first: StaleContainerWaits.)
          spec.argv = OciRunArgv(runtime, bundle, oci.id, root);
          if (!oci.rootless) spec.hide_mounts = OciHiddenMounts(runtime);
          // The runtime runs as the agent (root, or the agent's own account
          // when rootless); the container's process as the job's account
          // (process.user). Its environment is its own: the job's is in the
          // bundle, and none of it (PATH, XDG_RUNTIME_DIR) steers a process
          // that runs as root.
          spec.log_as_identity = spec.set_identity;  // (its log stays the job's account's)
          spec.set_identity = false;
          spec.groups.clear();
          spec.env = {{"PATH", "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}};
          t->oci_runtime = runtime;
          t->oci_id = oci.id;
          t->oci_root = root;
          t->memory_limited = memory > 0 && !oci.rootless;
          if (oci.rootless && (cpu > 0 || memory > 0)) {
            AppendToTaskFile(spec.log_path,
                             "rota: running without limits: a rootless container's runtime cannot set CPU or memory limits\n");
          }
          return Status::Ok();
        }();
      }
      if (!container.ok()) {
        NotStarted(t.get(), spec.log_path, "cannot start the container: " + std::string(container.message()));
        tasks_[key] = std::move(t);
        continue;
      }
      // The node's GPU devices (and MIG capabilities) the task was not given:
      // denied in its group, or, where no group can deny them, checked (a
      // read of the device directory, only where one of those applies).
      std::vector<std::string> deny;
      if (t->oci_id.empty() && (cgroups_ || (spec.set_identity && !options_.allow_unisolated_gpus))) {
        const std::vector<int32_t> minors = DeviceMinors(options_.inventory, gpu_list);
        deny = GpuDenyRules(options_.device_dir, minors);
        for (std::string& rule : MigCapDenyRules(options_.device_dir + "/nvidia-caps", options_.mig_caps_proc,
                                                 minors.empty() ? 0 : minors[0], MigGpuInstance(a, gpu_list))) {
          deny.push_back(std::move(rule));
        }
      }
      if (t->oci_id.empty() && spec.set_identity && (!cgroups_ || !cgroups_->isolates_devices()) &&
          !options_.allow_unisolated_gpus && !deny.empty()) {
        // Another account's task that does not hold every GPU, where nothing
        // can keep it off the others (it could open every /dev/nvidiaN):
        // it does not run (docs/trust.md).
        NotStarted(t.get(), spec.log_path,
                   "cannot start the task: this node cannot keep it off the GPUs it was not given (" +
                       std::string(cgroups_ ? "no device controller this agent may use" : "no cgroups this agent may use") +
                       "); run the agent where it can, or with --allow-unisolated-gpus");
        tasks_[key] = std::move(t);
        continue;
      }
      if (cgroups_ && t->oci_id.empty()) {
        // Every process task gets a group: its limits, its GPUs alone in the
        // devices controller, and one place to kill everything it started.
        t->cgroup = TaskName(t->job, t->task, t->replica, t->attempt);
        auto procs = cgroups_->Create(t->cgroup, cpu, memory, deny, options_.task_pids_max);
        if (procs.ok()) {
          spec.cgroup_procs = *procs;
        } else if (procs.status().code() == StatusCode::kPermissionDenied || cgroups_->isolates_devices()) {
          // Its other GPUs could not be denied, or without its group it would
          // see every GPU: it does not run.
          NotStarted(t.get(), spec.log_path, "cannot start the task: " + std::string(procs.status().message()));
          cgroups_->Remove(t->cgroup);
          t->cgroup.clear();
          tasks_[key] = std::move(t);
          continue;
        } else {
          AppendToTaskFile(spec.log_path, "rota: running without limits: " + std::string(procs.status().message()) + "\n");
          t->cgroup.clear();
        }
      }
      if (!options_.state_dir.empty()) {
        // Supervised: it outlives this agent, and fences itself on the lease.
        // Named per launch: a supervisor of an earlier launch of this key
        // never writes the file this one is watched by.
        t->exit_file = options_.state_dir + "/tasks/" + FileKey(key) + "-" + std::to_string(BootTimeNs()) + ".exit";
        spec.exit_file = t->exit_file;
        spec.lease_file = LeaseFile();
        spec.stop_signal = t->stop_signal;
        // Warned before its fence only if it saves on the signal (a
        // checkpoint grace): the signal ends a program that does not handle
        // it, and the server may yet answer before the deadline.
        spec.fence_warn_ms = t->assignment.checkpoint_grace > 0 ? std::min(t->grace_ms, fence_after_ms_.load() / 2) : 0;
        spec.fence_kill_procs = spec.cgroup_procs;
        if (!t->oci_id.empty() && cgroups_) spec.fence_kill_procs = cgroups_->ProcsOf("/rota/" + t->oci_id);
      }
      // Recorded before it starts (no pids yet): an agent killed during the
      // launch leaves a record whose cgroup the next one clears.
      if (!options_.state_dir.empty()) {
        SaveRecord(key, *t);
        // The supervisor starts the task only once it is recorded here.
        spec.recorded = [this, &key, &t](pid_t shim) {
          t->shim = shim;
          t->shim_start = ProcessStartTime(shim);
          // With room for its exit status (PrepareExitFile).
          if (const int err = PrepareExitFile(t->exit_file); err != 0) {
            t->record_error = std::strerror(err);
            std::fprintf(stderr, "rota agent: cannot make %s (%s): task %s not started\n", t->exit_file.c_str(),
                         t->record_error.c_str(), key.c_str());
            return false;
          }
          return SaveRecord(key, *t);
        };
      }
      t->record_error.clear();  // (what the callback's SaveRecord says)
      auto launched = launcher_.Launch(spec);
      if (launched.ok()) {
        trouble_.Execed();
        t->pid = launched->pid;
        if (t->shim != launched->shim) {  // (not recorded through the callback: unsupervised)
          t->shim = launched->shim;
          t->shim_start = ProcessStartTime(t->shim);
        }
        if (t->shim != 0) SaveRecord(key, *t);
        // One line per start (like slurmd's "launching job"), with the wall
        // clock when its assignment arrived and when it was launched.
        std::fprintf(stderr, "rota agent: started job %llu %s attempt %d pid %d uid %u received_at=%.6f launched_at=%.6f\n",
                     static_cast<unsigned long long>(t->job), name.c_str(), t->attempt, static_cast<int>(t->pid),
                     static_cast<unsigned>(identity.uid), received_at, WallSeconds());
      } else if (!t->record_error.empty()) {
        // Not started because it could not be recorded (a full disk): a
        // failed attempt, as any launch that failed, with the reason.
        AppendToTaskFile(spec.log_path, "rota: not started: the agent could not record it in " + options_.state_dir + " (" +
                                            t->record_error + ")\n");
        t->exited = true;
        t->exit_code = 255;
        t->exit_reason = "lost";
        ForgetRecord(*t);
        t->record_file.clear();
      } else {
        if (launched.status().code() == StatusCode::kDeadlineExceeded) {
          trouble_.ExecTimedOut(identity.uid, std::chrono::steady_clock::now());
          std::fprintf(stderr, "rota agent: job %llu %s: %s\n", static_cast<unsigned long long>(t->job), name.c_str(),
                       std::string(launched.status().message()).c_str());
        }
        NotStarted(t.get(), spec.log_path, std::string(launched.status().message()));
        ForgetRecord(*t);
        t->record_file.clear();
      }
    }
    tasks_[key] = std::move(t);
  }
  if (deferred) deferred_answer_ = std::make_unique<api::AgentAnswer>(answer);
  else deferred_answer_.reset();
  WakeReaper();  // (its tasks may have started: it watches them from now)
}

void Agent::NoteServiceExits() {
  const auto now = std::chrono::steady_clock::now();
  for (auto& [key, t] : tasks_) {
    if (!t->exited || t->backoff_noted || !t->assignment.service) continue;
    t->backoff_noted = true;
    if (t->stopping) continue;  // stopped for the server (scaled down, replaced): not a crash
    ReplicaBackoff& b = backoff_[Key(t->job, t->task, t->replica, 0)];
    b.failures = now - t->started >= std::chrono::seconds(60) ? 1 : std::min(b.failures + 1, 7);
    b.not_before = now + std::chrono::seconds(std::min(60, 1 << (b.failures - 1)));
  }
  if (backoff_.size() > 100000) backoff_.clear();  // bounded (a lost back-off only restarts sooner)
}

int Agent::IntervalMs() const {
  return options_.heartbeat_ms > 0 ? options_.heartbeat_ms : server_interval_ms_.load();
}

void Agent::Sleep(int ms) {
  std::unique_lock<std::mutex> lock(wake_mu_);
  wake_cv_.wait_for(lock, std::chrono::milliseconds(ms), [this] { return stop_.load() || wake_; });
  wake_ = false;
}

void Agent::SleepUntilBeat(int ms) {
  std::unique_lock<std::mutex> lock(wake_mu_);
  wake_cv_.wait_for(lock, std::chrono::milliseconds(ms), [this] { return stop_.load() || wake_ || beat_now_; });
  wake_ = false;
  beat_now_ = false;
}

std::unique_ptr<httplib::Client> Agent::TakeReporter(const std::string& server, bool fresh, bool* reused) {
  if (!fresh) {
    std::lock_guard<std::mutex> lock(reporters_mu_);
    if (reporter_ && reporter_server_ == server) {
      *reused = true;
      return std::move(reporter_);
    }
  }
  *reused = false;
  auto c = MakeClient(server, options_);
  c->set_keep_alive(true);
  return c;
}

void Agent::GiveBackReporter(const std::string& server, std::unique_ptr<httplib::Client> client) {
  std::unique_ptr<httplib::Client> closing;  // (closed outside the lock)
  std::lock_guard<std::mutex> lock(reporters_mu_);
  // One kept: the other thread's, when both sent at once, closes (so a node
  // holds one report connection between reports), as does one to a server
  // the agent no longer follows.
  if ((reporter_ && reporter_server_ == servers_.current()) || server != servers_.current()) {
    closing = std::move(client);
    return;
  }
  closing = std::move(reporter_);
  reporter_ = std::move(client);
  reporter_server_ = server;
}

void Agent::HeartbeatSoon() {
  {
    std::lock_guard<std::mutex> lock(wake_mu_);
    beat_now_ = true;
  }
  wake_cv_.notify_all();
}

int Agent::Backoff(int failures) {
  // 100 ms doubling to 5 s, jittered by +-50%, so that a thousand agents
  // that lost the server together do not come back in step. With several
  // replicas the cap is 1 s: a failover is a few seconds, and the tasks'
  // lease runs from the last answer.
  const int cap = servers_.size() > 1 ? 1000 : 5000;
  const int base = std::min(cap, 100 << std::min(failures, 6));
  std::lock_guard<std::mutex> lock(wake_mu_);
  return std::uniform_int_distribution<int>(base / 2, base + base / 2)(rng_);
}

void Agent::PollLoop() {
  int failures = 0;
  while (!stop_) {
    if (!registered_) {
      registered_ = Register();
      if (!registered_) {
        Sleep(Backoff(failures++));
        continue;
      }
      failures = 0;
    }
    if (options_.watch) {
      // The watch carries new work; heartbeats are periodic reports (exits
      // and checkpoints go at once, from the reap thread).
      if (Heartbeat(0)) {
        failures = 0;
        SleepUntilBeat(IntervalMs());
      } else {
        Sleep(std::min(IntervalMs(), Backoff(failures++)));
      }
      continue;
    }
    // A long poll returns when this node's tasks change, or after one interval
    // (which keeps telemetry flowing); on failure, back off.
    if (Heartbeat(IntervalMs())) {
      failures = 0;
      usleep(10 * 1000);  // a floor between polls, should the server answer at once every time
      continue;
    }
    Sleep(std::min(IntervalMs(), Backoff(failures++)));
  }
}

void Agent::WatchLoop() {
  struct Done {
    std::atomic<bool>& flag;
    ~Done() { flag = true; }
  } done{watch_done_};
  int failures = 0;
  while (!stop_) {
    if (!registered_) {
      Sleep(50);
      continue;
    }
    const std::string server = servers_.current();
    auto client = MakeClient(server, options_);
    // The server writes at least every 20 s; silence past this is a dead link.
    client->set_read_timeout(75, 0);
    {
      std::lock_guard<std::mutex> lock(watch_mu_);
      if (stop_) break;
      watch_client_ = client.get();
      watch_server_ = server;
    }
    std::string pending;
    bool got = false;
    auto res = client->Get(("/v1/agents/watch?node=" + httplib::detail::encode_query_param(options_.node_name) +
                            "&instance=" + instance_).c_str(),
                           httplib::Headers{}, [&](const char* data, size_t size) {
                             pending.append(data, size);
                             size_t nl;
                             while ((nl = pending.find('\n')) != std::string::npos) {
                               const std::string line = pending.substr(0, nl);
                               pending.erase(0, nl + 1);
                               if (line.empty()) continue;  // keepalive
                               auto answer = api::AnswerFromJson(json::parse(line, nullptr, false));
                               if (!answer.ok()) continue;  // (an {"error": ...} line: the next reconnect tells)
                               got = true;
                               std::lock_guard<std::mutex> lock(mu_);
                               Reconcile(*answer);
                             }
                             return !stop_.load() && pending.size() < (4u << 20);
                           });
    {
      std::lock_guard<std::mutex> lock(watch_mu_);
      watch_client_ = nullptr;
    }
    if (res && res->status == 404) registered_ = false;  // the server restarted or forgot us
    if (!got) Heard(servers_, server, res);  // (a stream that carried answers ended; the next try tells)
    if (!res && !stop_) HeartbeatSoon();    // the server may be gone: renew the tasks' lease with its successor
    if (got) failures = 0;
    if (!stop_) Sleep(Backoff(failures++));
  }
}

void Agent::MeterLoop() {
  // PCIe throughput every tenth sample: NVML spends 20 ms on each read.
  for (int64_t n = 0; !stop_; ++n) {
    uint64_t busy = 0;
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (const auto& [key, t] : tasks_) {
        if (!t->exited) busy |= t->gpu_mask;
      }
    }
    meter_.Add(ReadMeters(options_.inventory, busy, n % 10 == 0, &gpm_), SteadyMs());
    std::unique_lock<std::mutex> lock(wake_mu_);
    wake_cv_.wait_for(lock, std::chrono::milliseconds(options_.meter_interval_ms), [this] { return stop_.load(); });
  }
}

void Agent::WakeReaper() {
  {
    std::lock_guard<std::mutex> lock(reap_mu_);
    reap_wake_ = true;
  }
  reap_cv_.notify_one();
}

void Agent::ReapLoop() {
  bool idle = false;
  while (!stop_) {
    {
      std::unique_lock<std::mutex> lock(reap_mu_);
      // (Woken at once, idle or not: an answer's starts wait here, WakeReaper.)
      reap_cv_.wait_for(lock, std::chrono::milliseconds(idle ? 1000 : 20),
                        [this] { return stop_.load() || reap_wake_; });
      reap_wake_ = false;  // (a wake after this is seen by the next wait)
    }
    bool ended;
    {
      std::lock_guard<std::mutex> lock(mu_);
      ended = Reap();
      NoteServiceExits();
      ReapDeletes();
      if (deferred_answer_ && std::chrono::steady_clock::now() >= deferred_until_) {
        const api::AgentAnswer again = *deferred_answer_;
        if (again.revision >= applied_revision_) Reconcile(again);
        else deferred_answer_.reset();
      }
      // A checkpoint a task just wrote is reported at once too (in watch
      // mode heartbeats are seconds apart; preemption waits on it).
      for (auto& [key, t] : tasks_) {
        if (t->exited || t->checkpoint_file.empty()) continue;
        struct stat st;
        if (lstat(t->checkpoint_file.c_str(), &st) != 0) continue;  // (the task's link is not followed: ReadCheckpoint)
        const int64_t mtime = static_cast<int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec;
        // At most one report a second per task for its checkpoints (a task
        // rewriting its file in a loop does not set the journal's pace);
        // a change within the second is seen on the next tick after it.
        const auto now = std::chrono::steady_clock::now();
        if (mtime != t->checkpoint_mtime && now - t->checkpoint_reported >= std::chrono::seconds(1)) {
          t->checkpoint_mtime = mtime;
          t->checkpoint_reported = now;
          ended = true;
        }
      }
      idle = deferred_answer_ == nullptr &&
             std::none_of(oci_deletes_.begin(), oci_deletes_.end(), [](const auto& kv) { return kv.second.pid != 0; }) &&
             std::none_of(tasks_.begin(), tasks_.end(), [](const auto& kv) {
               return kv.second->pid != 0 && !kv.second->exited;
             });
    }
    // Report exits at once; Heartbeat reaps again and includes them.
    if (ended && registered_) {
      // Reap() marked them exited already; the report carries exit codes.
      Heartbeat(0);
    }
  }
}

}  // namespace rota::agent
