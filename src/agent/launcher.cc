#include "agent/launcher.h"

#include <dirent.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <signal.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>
#include <vector>
#include <ctime>

namespace rota::agent {
namespace {

// What the child failed at, sent to the parent through the exec pipe.
struct ChildError {
  int step;  // index into kSteps
  int err;
};
constexpr const char* kSteps[] = {"join its cgroup", "open its log",  "change to its directory",
                                  "set its groups",  "set its gid",   "set its uid",
                                  "set no_new_privs", "exec",         "start its supervisor",
                                  "make a private mount namespace", "unmount in its mount namespace",
                                  "start it: the agent did not record its supervisor",
                                  "start it: it was stopped before its program ran (a stop signal, from another "
                                  "process of its user)",
                                  "start it: its program did not start within 10 s",
                                  "learn whether its program started (reading its report pipe)"};
constexpr int kStepExec = 7, kStepShim = 8, kStepHide = 9, kStepUnmount = 10, kStepGo = 11, kStepStopped = 12,
              kStepSlow = 13, kStepWait = 14;
// An exit file's size: the status, spaces, a newline (PrepareExitFile's room).
constexpr int kExitFileSize = 8;

[[noreturn]] void ChildFail(int pipe_fd, int step) {
  const ChildError e{step, errno};
  [[maybe_unused]] ssize_t n = write(pipe_fd, &e, sizeof(e));
  _exit(127);
}

// The program argv[0] names: itself when it has a slash, else the first
// executable of that name in the task's PATH (not the agent's).
std::string FindProgram(const LaunchSpec& spec) {
  std::string program = spec.argv[0];
  if (program.find('/') != std::string::npos) return program;
  auto path = spec.env.find("PATH");
  const std::string dirs = path != spec.env.end() ? path->second : "/usr/local/bin:/usr/bin:/bin";
  size_t start = 0;
  while (start <= dirs.size()) {
    size_t end = dirs.find(':', start);
    if (end == std::string::npos) end = dirs.size();
    const std::string candidate = dirs.substr(start, end - start) + "/" + program;
    if (access(candidate.c_str(), X_OK) == 0) return candidate;
    start = end + 1;
  }
  return program;
}

}  // namespace

StatusOr<pid_t> ProcessLauncher::Start(const LaunchSpec& spec) {
  ROTA_ASSIGN_OR_RETURN(Launched l, Launch(spec));
  return l.pid;
}

namespace {

// What the child needs, made before fork or vfork: after it only async-signal-safe
// calls are allowed (the agent has other threads).
struct Prepared {
  std::vector<char*> argv, envp;
  std::string program, workdir;
  std::vector<int> procs;  // cgroup.procs, open for writing
  int log_fd = -1, null_fd = -1;
  int go_fd = -1;  // the shim's: the agent's word that it may start the task
};

// Descriptors up to this are closed one by one where close_range is missing
// (kernels before 5.9); read before any fork.
long MaxFds() {
  static const long max = [] {
    struct rlimit r {};
    return getrlimit(RLIMIT_NOFILE, &r) == 0 && r.rlim_cur != RLIM_INFINITY ? static_cast<long>(r.rlim_cur) : 1L << 20;
  }();
  return max;
}

// close_range, or a loop of close() where the kernel lacks it (async-signal-safe).
void CloseRange(unsigned from, unsigned to) {
  if (close_range(from, to, 0) == 0) return;
  const long last = std::min<long>(static_cast<long>(to), MaxFds());
  for (long fd = from; fd <= last; ++fd) close(static_cast<int>(fd));
}

// Closes every descriptor from 3 up except those in keep[0..n) (n <= 16);
// async-signal-safe.
void CloseAllBut(const int* keep, int n) {
  int sorted[16];
  int m = 0;
  for (int i = 0; i < n && m < 16; ++i) {
    if (keep[i] < 3) continue;
    int j = m++;
    while (j > 0 && sorted[j - 1] > keep[i]) {
      sorted[j] = sorted[j - 1];
      --j;
    }
    sorted[j] = keep[i];
  }
  unsigned from = 3;
  for (int i = 0; i < m; ++i) {
    const auto fd = static_cast<unsigned>(sorted[i]);
    if (fd > from) CloseRange(from, fd - 1);
    from = fd + 1;
  }
  CloseRange(from, ~0U);
}

[[noreturn]] void ExecTask(const LaunchSpec& spec, const Prepared& p, int report) {
  // Default dispositions and an empty mask, as a fresh process has.
  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  for (int s = 1; s < NSIG; ++s) sigaction(s, &dfl, nullptr);
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  setsid();
  umask(022);  // the agent's own is 077; a task gets the usual one
  if (!spec.hide_mounts.empty()) {
    // A mount namespace of its own, private (nothing it unmounts or mounts
    // propagates back to the host's), without those mounts.
    if (unshare(CLONE_NEWNS) != 0) ChildFail(report, kStepHide);
    if (mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0) ChildFail(report, kStepHide);
    for (const std::string& m : spec.hide_mounts) {
      if (umount2(m.c_str(), 0) != 0) ChildFail(report, kStepUnmount);
    }
  }
  for (int fd : p.procs) {
    if (write(fd, "0", 1) != 1) ChildFail(report, 0);  // "0": the writing process
  }
  if (dup2(p.null_fd, 0) < 0 || dup2(p.log_fd, 1) < 0 || dup2(p.log_fd, 2) < 0) ChildFail(report, 1);
  if (chdir(p.workdir.c_str()) != 0) ChildFail(report, 2);
  if (spec.set_identity) {
    if (setgroups(spec.groups.size(), spec.groups.data()) != 0) ChildFail(report, 3);
    if (setgid(spec.gid) != 0) ChildFail(report, 4);
    if (setuid(spec.uid) != 0) ChildFail(report, 5);
  }
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) ChildFail(report, 6);
  // Nothing else of the agent's (sockets, files opened without CLOEXEC)
  // reaches the task; the report pipe is CLOEXEC and closes on exec.
  int keep[1] = {report};
  CloseAllBut(keep, 1);
  execve(p.program.c_str(), p.argv.data(), p.envp.data());
  ChildFail(report, 7);
}

// Waits until a child that is to exec has (its end of `fd`, close-on-exec,
// closes: 0) or has failed to (a ChildError: sizeof(*e)). Between taking its
// user's identity and its exec, the user's other processes may signal it: a
// child stopped then (SIGSTOP), which would hold whoever waits here for good
// (the agent, its lock held, its heartbeats with it), is killed, as is one
// whose exec has not returned within kExecWait (a hung file system): it did
// not start (-1, *e says why). Exits are left for the caller to reap.
constexpr int kExecWaitMs = 10'000;  // (the agent waits as long, its lock held: well within a node timeout)
ssize_t AwaitExec(int fd, pid_t child, ChildError* e) {
  auto take = [&] {
    ssize_t n;
    do {
      n = read(fd, e, sizeof(*e));
    } while (n < 0 && errno == EINTR);
    // A failed read: whether it runs is not known, and it is not to run
    // unwatched: killed, and *e says why (not a zeroed ChildError, which
    // read "cannot join its cgroup: Success").
    if (n < 0) {
      *e = {kStepWait, errno};
      kill(child, SIGKILL);
    }
    return n;
  };
  auto ready = [&](int ms) {
    struct pollfd pfd {fd, POLLIN, 0};
    int r;
    do {
      r = poll(&pfd, 1, ms);
    } while (r < 0 && errno == EINTR);
    return r != 0;  // (an error: read says it)
  };
  for (int waited = 0;; waited += 20) {
    if (ready(20)) return take();
    siginfo_t info{};
    if (waitid(P_PID, static_cast<id_t>(child), &info, WSTOPPED | WNOHANG) == 0 && info.si_pid == child) {
      // (It exec'd, then was stopped: its user's own business.)
      if (ready(0)) return take();
      kill(child, SIGKILL);
      *e = {kStepStopped, EINTR};
      return -1;
    }
    if (waited >= kExecWaitMs) {
      kill(child, SIGKILL);
      *e = {kStepSlow, ETIMEDOUT};
      return -1;
    }
  }
}

int64_t NowNs() {
  struct timespec ts;
  clock_gettime(CLOCK_BOOTTIME, &ts);  // never stepped by NTP
  return static_cast<int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

}  // namespace

std::string WaitForExec(int fd, pid_t child) {
  ChildError e{};
  const ssize_t n = AwaitExec(fd, child, &e);
  if (n == 0) return "";
  if (n == static_cast<ssize_t>(sizeof(e)) || n < 0) {
    std::string why = e.step >= 0 && e.step < static_cast<int>(std::size(kSteps)) ? kSteps[e.step] : "start it";
    return n < 0 && e.step != kStepWait ? why : why + ": " + std::strerror(e.err);
  }
  return std::string("read: ") + std::strerror(errno);
}

int64_t ReadLeaseDeadline(const char* path) {
  // The deadline, and the same again after a space (a lease this agent
  // wrote): a read that met a renewal's write halfway sees two that differ,
  // and reads again. (Only the first: an earlier agent's.)
  for (int attempt = 0; attempt < 3; ++attempt) {
    const int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
    if (fd < 0) return 0;
    char buf[64];
    const ssize_t n = read(fd, buf, sizeof(buf));
    close(fd);
    int64_t v[2] = {0, 0};
    ssize_t i = 0;
    for (; i < n && buf[i] >= '0' && buf[i] <= '9'; ++i) v[0] = v[0] * 10 + (buf[i] - '0');
    if (i >= n || buf[i] != ' ') return v[0];
    for (++i; i < n && buf[i] >= '0' && buf[i] <= '9'; ++i) v[1] = v[1] * 10 + (buf[i] - '0');
    if (v[0] == v[1] && i < n && buf[i] == '\n') return v[0];
    const struct timespec moment {0, 1'000'000};
    nanosleep(&moment, nullptr);
  }
  return -1;
}

int WriteLeaseFile(const std::string& path, int64_t deadline) {
  char text[48];
  const int len = std::snprintf(text, sizeof(text), "%020lld %020lld\n", static_cast<long long>(deadline),
                                static_cast<long long>(deadline));
  const int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) return errno;
  const int err = WriteWhole(fd, text, static_cast<size_t>(len), 0);
  close(fd);
  return err;
}

int WriteWhole(int fd, const void* data, size_t size, off_t offset) {
  const ssize_t n = pwrite(fd, data, size, offset);
  return n == static_cast<ssize_t>(size) ? 0 : n < 0 ? errno : ENOSPC;
}

int64_t BootTimeNs() { return NowNs(); }

int OpenTaskFile(const std::string& path, int flags, mode_t mode) {
  const int fd = open(path.c_str(), flags | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, mode);
  if (fd < 0) return -1;
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    errno = ENXIO;
    return -1;
  }
  return fd;
}

int AppendToTaskFile(const std::string& path, std::string_view text) {
  // (0600: a task's log is its owner's; one that never started, the agent's
  // alone on the node: its words name the program, PATH and mounts, and
  // `rota logs` serves it to the job's owner.)
  const int fd = OpenTaskFile(path, O_WRONLY | O_CREAT | O_APPEND, 0600);
  if (fd < 0) return errno;
  const ssize_t n = write(fd, text.data(), text.size());
  const int err = n == static_cast<ssize_t>(text.size()) ? 0 : n < 0 ? errno : ENOSPC;
  close(fd);
  return err;
}

namespace {

// SIGKILL to every pid listed in a cgroup.procs file, read to its end (a
// group of thousands: one 8 KiB read saw about 1,200); async-signal-safe.
void KillProcs(const char* procs) {
  const int fd = open(procs, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  char buf[8192];
  pid_t pid = 0;  // (a pid may span two reads)
  for (;;) {
    const ssize_t n = read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    for (ssize_t i = 0; i < n; ++i) {
      if (buf[i] >= '0' && buf[i] <= '9') {
        pid = pid * 10 + (buf[i] - '0');
      } else {
        if (pid > 0) kill(pid, SIGKILL);
        pid = 0;
      }
    }
  }
  close(fd);
  if (pid > 0) kill(pid, SIGKILL);
}

// The children of `parent`: /proc/PID/task/PID/children (its one thread's:
// the shim's, which has one), or, on a kernel without that file, every
// process whose /proc/PID/stat names it as parent.
std::vector<pid_t> ChildrenOf(pid_t parent) {
  std::vector<pid_t> out;
  std::ifstream in("/proc/" + std::to_string(parent) + "/task/" + std::to_string(parent) + "/children");
  if (in) {
    for (long long pid; in >> pid;) out.push_back(static_cast<pid_t>(pid));
    return out;
  }
  DIR* dir = opendir("/proc");
  if (dir == nullptr) return out;
  while (dirent* e = readdir(dir)) {
    char* end = nullptr;
    const long pid = std::strtol(e->d_name, &end, 10);
    if (pid <= 0 || *end != '\0') continue;
    std::ifstream stat(std::string("/proc/") + e->d_name + "/stat");
    std::string line;
    if (!std::getline(stat, line)) continue;
    const size_t close_paren = line.rfind(')');  // "pid (comm) S PPID ..."
    if (close_paren == std::string::npos || close_paren + 4 > line.size()) continue;
    if (std::strtol(line.c_str() + close_paren + 4, nullptr, 10) == parent) out.push_back(static_cast<pid_t>(pid));
  }
  closedir(dir);
  return out;
}

// SIGKILL to every process below this one. The supervisor is a child
// subreaper, so what the task left behind outside its process group (a
// daemon that called setsid, a container's processes once its runtime was
// killed) is still below it: no cgroup is needed to find them. Only its own
// children are killed, pass after pass (their children come to it as they
// die): a child's pid cannot be reused while it is unreaped, so nothing
// else is ever hit. Reaps them; the task's status, if it is among them,
// goes to `*status` (and `*ended`). Each pass reaches one generation
// deeper, so it goes on while new children come to it (a chain of 300
// processes, before: 200 passes left 100 running after the job ended); it
// stops after about two seconds of the same ones only (what survives
// SIGKILL, in the kernel's D state, is left), and after 3,000 passes (about
// 30 s) in all: a task whose every process forks again before its kill
// would otherwise keep the supervisor here, its exit never recorded.
void KillDescendants(pid_t task, int* status, bool* ended) {
  const pid_t self = getpid();
  const struct timespec moment {0, 10'000'000};
  std::vector<pid_t> last;
  for (int same = 0, pass = 0; same < 200 && pass < 3000; ++pass) {
    std::vector<pid_t> mine = ChildrenOf(self);
    std::sort(mine.begin(), mine.end());
    same = mine == last ? same + 1 : 0;
    for (pid_t pid : mine) kill(pid, SIGKILL);  // (a zombie, or one whose main thread exited: harmless, or all of it)
    int st = 0;
    pid_t r;
    while ((r = waitpid(-1, &st, WNOHANG)) > 0) {
      if (r == task) {
        *status = st;
        *ended = true;
      }
    }
    if (mine.empty()) return;
    last = std::move(mine);
    nanosleep(&moment, nullptr);
  }
}

// The supervisor's life after it started the task: wait, fence, record the
// exit. (It reaps whatever is reparented to it, and waits for the task.)
[[noreturn]] void Supervise(const LaunchSpec& spec, pid_t task) {
  const struct timespec tick {0, 100'000'000};
  const int64_t warn_ns = static_cast<int64_t>(spec.fence_warn_ms) * 1'000'000;
  bool warned = false;
  int status = 0;
  bool ended = false;
  int64_t last_sweep = 0;  // the last KillDescendants at the fence (NowNs)
  int64_t deadline = 0;    // the lease's, as last read
  bool killed = false;     // by the fence
  while (true) {
    pid_t r;
    int st = 0;
    while ((r = waitpid(-1, &st, WNOHANG)) > 0) {
      if (r == task) {
        status = st;
        ended = true;
      }
    }
    if (ended) break;
    if (r < 0 && errno != EINTR) {
      status = 255 << 8;
      break;
    }
    if (!spec.lease_file.empty()) {
      // No lease (the agent's state is gone) is an expired one; one that
      // could not be read whole keeps the last deadline read.
      if (const int64_t read = ReadLeaseDeadline(spec.lease_file.c_str()); read >= 0) deadline = read;
      const int64_t now = NowNs();
      if (now >= deadline - warn_ns && !warned) {
        kill(-task, spec.stop_signal);
        warned = true;
      } else if (now < deadline - warn_ns) {
        warned = false;  // renewed in time: the agent is back
      }
      if (now >= deadline) {
        killed = true;
        kill(-task, SIGKILL);
        for (const std::string& procs : spec.fence_kill_procs) KillProcs(procs.c_str());
        // (Once a second at most: what survives SIGKILL must not keep it busy.)
        if (now >= last_sweep + 1'000'000'000) {
          last_sweep = now;
          KillDescendants(task, &status, &ended);
          if (ended) break;
        }
      }
    }
    nanosleep(&tick, nullptr);
  }
  // What it started ends with it, as with its cgroup.
  bool again = false;
  KillDescendants(-1, &status, &again);
  const int code = WIFEXITED(status) ? WEXITSTATUS(status) : WIFSIGNALED(status) ? 128 + WTERMSIG(status) : 255;
  // Over the room the agent made for it (PrepareExitFile), in place: no
  // truncation, no new block, so a full disk still takes it.
  const int fd = open(spec.exit_file.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd >= 0) {
    char text[kExitFileSize];
    int len = 0;
    char digits[4];
    int nd = 0;
    int v = code;
    do {
      digits[nd++] = static_cast<char>('0' + v % 10);
      v /= 10;
    } while (v > 0 && nd < 4);
    while (nd > 0) text[len++] = digits[--nd];
    while (len < kExitFileSize - 1) text[len++] = ' ';
    // Ended by the fence (killed, or warned and not renewed since): not the
    // program's own end (ReadExitFile's `fenced`).
    if (killed || warned) text[kExitFileSize - 2] = 'F';
    text[len++] = '\n';
    [[maybe_unused]] ssize_t w = pwrite(fd, text, static_cast<size_t>(len), 0);
    fsync(fd);
    close(fd);
  }
  _exit(code);
}

struct ShimReport {
  pid_t task;
  int step;  // -1: exec'd
  int err;
};

// The supervisor, in the rota-shim process the agent started for the task
// (ShimMain): a session of its own (the agent's signals and its death do not
// reach it), deaf to the signals meant for the task. It starts the task,
// reports to `report` how that went (ShimReport), and supervises it.
[[noreturn]] void SupervisorMain(const LaunchSpec& spec, const Prepared& p, int report_fd) {
  setsid();
  // What the task's processes leave orphaned comes to it, not to init
  // (KillDescendants).
  prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0);
  struct sigaction ign {};
  ign.sa_handler = SIG_IGN;
  for (int s : {SIGHUP, SIGINT, SIGTERM, SIGQUIT, SIGUSR1, SIGUSR2, SIGPIPE}) sigaction(s, &ign, nullptr);
  // (The agent started it with every signal blocked.)
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, nullptr);
  // Only what it was handed stays open: nothing of the agent's (its
  // listening socket, under `rota up`) in a process that outlives it.
  {
    int keep[16];
    int n = 0;
    keep[n++] = report_fd;
    keep[n++] = p.log_fd;
    keep[n++] = p.null_fd;
    keep[n++] = p.go_fd;
    for (int fd : p.procs) {
      if (n < 16) keep[n++] = fd;
    }
    CloseAllBut(keep, n);
    // Nor its stdin/stdout/stderr: whoever waits for the agent's output
    // to end must not wait for its tasks.
    dup2(p.null_fd, 0);
    dup2(p.null_fd, 1);
    dup2(p.null_fd, 2);
  }
  ShimReport report{0, -1, 0};
  // Nothing starts before the agent has recorded this supervisor: killed
  // before it did, it left no record of a task that would then run
  // unknown to the next agent (and run again when the server starts it
  // afresh). Its end of the pipe closed without a word: not started.
  if (p.go_fd >= 0) {
    char go = 0;
    ssize_t got;
    do {
      got = read(p.go_fd, &go, 1);
    } while (got < 0 && errno == EINTR);
    close(p.go_fd);
    if (got != 1 || go != 'g') {
      report.step = kStepGo;
      report.err = ECANCELED;
      [[maybe_unused]] ssize_t w = write(report_fd, &report, sizeof(report));
      _exit(127);
    }
  }
  int inner[2];
  if (pipe2(inner, O_CLOEXEC) != 0) {
    report.step = 1;
    report.err = errno;
    [[maybe_unused]] ssize_t w = write(report_fd, &report, sizeof(report));
    _exit(127);
  }
  // fork, not vfork: a vfork'd child that its user's other processes stop
  // (SIGSTOP) after it took the user's identity, before its exec, would hold
  // the supervisor, and the agent waiting on it, for good (AwaitExec kills
  // it instead). The shim is small: its copy costs little. The child runs
  // only ExecTask's async-signal-safe calls, on its own descriptors, and
  // never returns. Every signal blocked across it (as glibc's posix_spawn
  // does); ExecTask resets the handlers and unblocks them.
  sigset_t all, before;
  sigfillset(&all);
  sigprocmask(SIG_SETMASK, &all, &before);
  const pid_t task = fork();
  if (task != 0) sigprocmask(SIG_SETMASK, &before, nullptr);
  if (task == 0) {
    close(inner[0]);
    close(report_fd);
    ExecTask(spec, p, inner[1]);
  }
  close(inner[1]);
  for (int fd : p.procs) close(fd);
  close(p.log_fd);
  close(p.null_fd);
  report.task = task;
  if (task < 0) {
    report.step = kStepExec;
    report.err = errno;
  } else {
    ChildError e{};
    const ssize_t n = AwaitExec(inner[0], task, &e);
    if (n == static_cast<ssize_t>(sizeof(e)) || n < 0) {
      report.step = e.step;
      report.err = e.err;
    }
  }
  close(inner[0]);
  [[maybe_unused]] ssize_t w = write(report_fd, &report, sizeof(report));
  close(report_fd);
  if (report.step >= 0) {
    // (Not one killed in a hung exec, or whose start is unknown: it may
    // never be reapable, in the kernel's D state, and the agent waits for
    // this process to end.)
    if (task > 0 && report.step != kStepSlow && report.step != kStepWait) waitpid(task, nullptr, 0);
    _exit(127);
  }
  Supervise(spec, task);
}

// The shim's command line (ShimArgs writes it, ShimMain reads it): a tag,
// then one argument each for the report, log and null descriptors, the
// cgroup.procs descriptors (comma-separated), the directory, whether to set
// the identity (0 or 1), uid, gid, groups (comma-separated), exit file,
// lease file, fence warning (ms), stop signal, program, the descriptor of
// the task's arguments and environment (TaskBlob), the descriptor the
// agent says "go" on (one byte, once it has recorded the shim; end of file
// instead: the task is not started), then a count and that
// many fence-kill files, then a count and that many mounts to hide. Nothing secret is on it: a command line is every
// local user's to read (ps), so the task's environment (tokens) and
// arguments come through the descriptor. The shim's own environment is
// empty: nothing of the task's (LD_PRELOAD) reaches a process that runs as
// the agent's user.
constexpr const char* kShimTag = "rota-shim/4";
constexpr size_t kMaxProcs = 12;  // cgroup.procs descriptors handed to the shim

template <typename T>
std::string Joined(const std::vector<T>& v) {
  std::string out;
  for (size_t i = 0; i < v.size(); ++i) out += (i > 0 ? "," : "") + std::to_string(v[i]);
  return out;
}

std::vector<std::string> ShimArgs(const std::string& shim, const LaunchSpec& spec, const Prepared& p, int report_fd,
                                  int blob_fd, int go_fd) {
  std::vector<std::string> a = {shim,
                                kShimTag,
                                std::to_string(report_fd),
                                std::to_string(p.log_fd),
                                std::to_string(p.null_fd),
                                Joined(p.procs),
                                p.workdir,
                                spec.set_identity ? "1" : "0",
                                std::to_string(spec.uid),
                                std::to_string(spec.gid),
                                Joined(spec.groups),
                                spec.exit_file,
                                spec.lease_file,
                                std::to_string(spec.fence_warn_ms),
                                std::to_string(spec.stop_signal),
                                p.program,
                                std::to_string(blob_fd),
                                std::to_string(go_fd),
                                std::to_string(spec.fence_kill_procs.size())};
  a.insert(a.end(), spec.fence_kill_procs.begin(), spec.fence_kill_procs.end());
  a.push_back(std::to_string(spec.hide_mounts.size()));
  a.insert(a.end(), spec.hide_mounts.begin(), spec.hide_mounts.end());
  return a;
}

// The task's arguments and environment for the shim, each string ended by
// a NUL: the number of arguments (decimal), the arguments, the environment.
// In a memory file (memfd) the shim reads, so they never appear on its
// command line.
StatusOr<int> TaskBlob(const LaunchSpec& spec) {
  // (A NUL would end one string and start another: the server refuses
  // such specs; one accepted before it did is refused here, not split.)
  for (size_t i = 0; i < spec.argv.size(); ++i) {
    if (spec.argv[i].find('\0') != std::string::npos) {
      return InvalidArgumentError("command[" + std::to_string(i) + "]: holds a NUL byte");
    }
  }
  for (const auto& [k, v] : spec.env) {
    if (k.empty() || k.find('=') != std::string::npos || (k + v).find('\0') != std::string::npos) {
      return InvalidArgumentError("env: a variable's name must be non-empty without '=', and neither name nor value may hold a NUL byte");
    }
  }
  std::string blob = std::to_string(spec.argv.size());
  blob += '\0';
  for (const std::string& a : spec.argv) {
    blob += a;
    blob += '\0';
  }
  for (const auto& [k, v] : spec.env) {
    blob += k + "=" + v;
    blob += '\0';
  }
  const int fd = memfd_create("rota-task", MFD_CLOEXEC);
  if (fd < 0) return UnavailableError(std::string("cannot pass the task's environment: memfd_create: ") + std::strerror(errno));
  size_t done = 0;
  while (done < blob.size()) {
    const ssize_t n = write(fd, blob.data() + done, blob.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = errno;
      close(fd);
      return UnavailableError(std::string("cannot pass the task's environment: ") + std::strerror(err));
    }
    done += static_cast<size_t>(n);
  }
  return fd;
}

// A whole decimal number in [lo, hi], or false.
bool ParseInt(const char* text, long long lo, long long hi, long long* out) {
  errno = 0;
  char* end = nullptr;
  const long long v = std::strtoll(text, &end, 10);
  if (errno != 0 || end == text || *end != '\0' || v < lo || v > hi) return false;
  *out = v;
  return true;
}

bool ParseList(const std::string& text, long long lo, long long hi, std::vector<long long>* out) {
  out->clear();
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find(',', start);
    if (end == std::string::npos) end = text.size();
    long long v;
    if (!ParseInt(text.substr(start, end - start).c_str(), lo, hi, &v)) return false;
    out->push_back(v);
    start = end + 1;
  }
  return true;
}

// The supervisor's start (REQUIRES: every signal blocked): vfork, then in
// the child (sharing the agent's memory) only async-signal-safe calls on its
// own descriptor table: the handed descriptors kept across the exec of the
// shim (by its descriptor, opened at start, so an upgrade that replaces the
// file meanwhile changes nothing under a running agent). Returns the child's
// pid, or -1.
[[gnu::noinline]] pid_t VforkShim(int shim_fd, char* const* argv, const int* pass, int n_pass, int report) {
  const pid_t pid = vfork();
  if (pid != 0) return pid;
  for (int i = 0; i < n_pass; ++i) fcntl(pass[i], F_SETFD, 0);
  char* no_env[] = {nullptr};
  execveat(shim_fd, "", argv, no_env, AT_EMPTY_PATH);
  const ShimReport r{0, kStepShim, errno};
  [[maybe_unused]] ssize_t w = write(report, &r, sizeof(r));
  _exit(127);
}

}  // namespace

int ShimMain(int argc, char** argv) {
  // Its name in ps and top: exec'd through a descriptor, the kernel would
  // call it by that descriptor's number.
  prctl(PR_SET_NAME, "rota-shim", 0, 0, 0);
  long long report_fd = -1;
  auto refuse = [&](const char* what) {
    std::fprintf(stderr, "rota-shim: %s (it is started by rota agent, not by hand)\n", what);
    if (report_fd >= 0) {
      const ShimReport r{0, kStepShim, EINVAL};
      [[maybe_unused]] ssize_t w = write(static_cast<int>(report_fd), &r, sizeof(r));
    }
    return 127;
  };
  if (argc < 2 || std::strcmp(argv[1], kShimTag) != 0) return refuse("not a command line of this version");
  if (argc < 20 || !ParseInt(argv[2], 3, INT32_MAX, &report_fd)) return refuse("bad report descriptor");
  LaunchSpec spec;
  Prepared p;
  long long v;
  std::vector<long long> list;
  if (!ParseInt(argv[3], 0, INT32_MAX, &v)) return refuse("bad log descriptor");
  p.log_fd = static_cast<int>(v);
  if (!ParseInt(argv[4], 0, INT32_MAX, &v)) return refuse("bad null descriptor");
  p.null_fd = static_cast<int>(v);
  if (!ParseList(argv[5], 3, INT32_MAX, &list) || list.size() > kMaxProcs) return refuse("bad cgroup descriptors");
  for (long long fd : list) p.procs.push_back(static_cast<int>(fd));
  p.workdir = argv[6];
  if (std::strcmp(argv[7], "0") != 0 && std::strcmp(argv[7], "1") != 0) return refuse("bad identity flag");
  spec.set_identity = std::strcmp(argv[7], "1") == 0;
  if (!ParseInt(argv[8], 0, UINT32_MAX - 1, &v)) return refuse("bad uid");
  spec.uid = static_cast<uid_t>(v);
  if (!ParseInt(argv[9], 0, UINT32_MAX - 1, &v)) return refuse("bad gid");
  spec.gid = static_cast<gid_t>(v);
  if (!ParseList(argv[10], 0, UINT32_MAX - 1, &list)) return refuse("bad groups");
  for (long long g : list) spec.groups.push_back(static_cast<gid_t>(g));
  spec.exit_file = argv[11];
  spec.lease_file = argv[12];
  if (!ParseInt(argv[13], 0, INT32_MAX, &v)) return refuse("bad fence warning");
  spec.fence_warn_ms = static_cast<int>(v);
  if (!ParseInt(argv[14], 1, NSIG - 1, &v)) return refuse("bad stop signal");
  spec.stop_signal = static_cast<int>(v);
  p.program = argv[15];
  long long blob_fd;
  if (!ParseInt(argv[16], 3, INT32_MAX, &blob_fd)) return refuse("bad argument descriptor");
  long long go_fd;
  if (!ParseInt(argv[17], 3, INT32_MAX, &go_fd)) return refuse("bad go descriptor");
  p.go_fd = static_cast<int>(go_fd);
  int i = 18;
  if (!ParseInt(argv[i++], 0, argc, &v) || i + v >= argc) return refuse("bad fence-kill files");
  for (long long k = 0; k < v; ++k) spec.fence_kill_procs.push_back(argv[i++]);
  if (!ParseInt(argv[i++], 0, argc, &v) || i + v != argc) return refuse("bad mounts to hide");
  for (long long k = 0; k < v; ++k) {
    if (argv[i][0] != '/') return refuse("bad mounts to hide");
    spec.hide_mounts.push_back(argv[i++]);
  }
  if (spec.exit_file.empty() || p.workdir.empty() || p.program.empty()) return refuse("missing exit file, directory or program");
  // The task's arguments and environment (TaskBlob): kept for the process's
  // life (the pointers below are into it).
  static std::string blob;
  {
    char buf[65536];
    ssize_t n;
    off_t at = 0;
    while ((n = pread(static_cast<int>(blob_fd), buf, sizeof(buf), at)) != 0) {
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) return refuse("cannot read the argument descriptor");
      blob.append(buf, static_cast<size_t>(n));
      at += n;
    }
    close(static_cast<int>(blob_fd));
  }
  size_t at = blob.find('\0');
  if (at == std::string::npos || !ParseInt(blob.c_str(), 1, static_cast<long long>(blob.size()), &v)) {
    return refuse("bad task arguments");
  }
  for (size_t start = at + 1; start < blob.size(); start = at + 1) {
    at = blob.find('\0', start);
    if (at == std::string::npos) return refuse("bad task arguments");
    (static_cast<long long>(p.argv.size()) < v ? p.argv : p.envp).push_back(blob.data() + start);
  }
  if (static_cast<long long>(p.argv.size()) != v) return refuse("bad task arguments");
  p.argv.push_back(nullptr);
  p.envp.push_back(nullptr);
  MaxFds();  // computed here, not in the task's vfork child
  SupervisorMain(spec, p, static_cast<int>(report_fd));
}

std::string DefaultShimPath() {
  std::error_code ec;
  const std::filesystem::path self = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? std::string("rota-shim") : (self.parent_path() / "rota-shim").string();
}

Status CheckShim(const std::string& path) {
  if (access(path.c_str(), X_OK) == 0) return Status::Ok();
  return UnavailableError("the tasks' supervisor " + path + " is missing or not executable (" + std::strerror(errno) +
                          "): install rota-shim beside rota");
}

ProcessLauncher::ProcessLauncher(std::string shim) : shim_(shim.empty() ? DefaultShimPath() : std::move(shim)) {
  shim_fd_ = open(shim_.c_str(), O_PATH | O_CLOEXEC);
  shim_errno_ = shim_fd_ < 0 ? errno : 0;
}

ProcessLauncher::~ProcessLauncher() {
  if (shim_fd_ >= 0) close(shim_fd_);
}

StatusOr<Launched> ProcessLauncher::Launch(const LaunchSpec& spec) {
  if (spec.argv.empty()) return InvalidArgumentError("command: empty");
  std::error_code ec;
  const std::filesystem::path log(spec.log_path);
  std::filesystem::create_directories(log.parent_path(), ec);

  MaxFds();  // computed here, not in a forked child
  Prepared p;
  p.workdir = spec.workdir.empty() ? log.parent_path().string() : spec.workdir;
  std::vector<std::string> env_strings;
  for (const auto& [k, v] : spec.env) env_strings.push_back(k + "=" + v);
  for (const auto& a : spec.argv) p.argv.push_back(const_cast<char*>(a.c_str()));
  p.argv.push_back(nullptr);
  for (auto& e : env_strings) p.envp.push_back(e.data());
  p.envp.push_back(nullptr);
  p.program = FindProgram(spec);

  auto close_all = [&] {
    for (int fd : p.procs) close(fd);
    if (p.log_fd >= 0) close(p.log_fd);
    if (p.null_fd >= 0) close(p.null_fd);
  };
  for (const std::string& path : spec.cgroup_procs) {
    const int fd = open(path.c_str(), O_WRONLY | O_CLOEXEC);
    if (fd < 0) {
      const int err = errno;
      close_all();
      return UnavailableError("cgroup " + path + ": " + std::strerror(err));
    }
    p.procs.push_back(fd);
  }
  p.log_fd = OpenTaskFile(spec.log_path, O_WRONLY | O_CREAT | O_APPEND, 0644);
  if (p.log_fd >= 0) fcntl(p.log_fd, F_SETFL, O_APPEND);  // the task's stdout blocks as any file's does
  p.null_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (p.log_fd >= 0 && (spec.set_identity || spec.log_as_identity)) {
    // The task's log is its own to read on the node, nobody else's.
    [[maybe_unused]] int rc = fchown(p.log_fd, spec.uid, spec.gid);
    fchmod(p.log_fd, 0600);
  }
  int pipe_fds[2];
  if (p.log_fd < 0 || p.null_fd < 0 || pipe2(pipe_fds, O_CLOEXEC) != 0) {
    const int err = errno;
    close_all();
    return UnavailableError("cannot open the log " + spec.log_path + ": " + std::strerror(err) +
                            (err == EWOULDBLOCK ? " (its owner holds a lease on it)"
                             : err == ENXIO     ? " (not a regular file)"
                                                : ""));
  }
  if (!spec.exit_file.empty()) unlink(spec.exit_file.c_str());
  const bool supervised = !spec.exit_file.empty();

  pid_t pid;
  int fork_errno = 0;
  int go_fds[2] = {-1, -1};
  if (!supervised) {
    // (The agent's child: a fork, so that the identity change in ExecTask
    // is the child's own; glibc's setxid would otherwise reach for the
    // agent's threads.)
    pid = fork();
    if (pid == 0) ExecTask(spec, p, pipe_fds[1]);
    fork_errno = errno;
  } else {
    // The supervisor, rota-shim, starts from a vfork and exec: no copy of
    // the agent's memory is made (in this VM a fork of the agent cost 7 ms
    // of a 20 ms start). Every signal is blocked across it, as glibc's
    // posix_spawn does; the shim unblocks them.
    auto refused = [&](Status s) {
      close(pipe_fds[0]);
      close(pipe_fds[1]);
      close_all();
      return s;
    };
    if (shim_fd_ < 0) {
      return refused(UnavailableError("cannot start its supervisor " + shim_ + ": " + std::strerror(shim_errno_)));
    }
    if (p.procs.size() > kMaxProcs) {
      return refused(InvalidArgumentError("cannot hand " + std::to_string(p.procs.size()) +
                                          " cgroup.procs files to its supervisor (at most " +
                                          std::to_string(kMaxProcs) + ")"));
    }
    auto blob = TaskBlob(spec);
    if (!blob.ok()) return refused(blob.status());
    if (pipe2(go_fds, O_CLOEXEC) != 0) {
      const int err = errno;
      close(*blob);
      return refused(UnavailableError(std::string("cannot make a pipe for its supervisor: ") + std::strerror(err)));
    }
    const std::vector<std::string> shim_args = ShimArgs(shim_, spec, p, pipe_fds[1], *blob, go_fds[0]);
    std::vector<char*> shim_argv;
    for (const std::string& a : shim_args) shim_argv.push_back(const_cast<char*>(a.c_str()));
    shim_argv.push_back(nullptr);
    // The descriptors the shim is handed (opened CLOEXEC: kept across its
    // exec only in the child's own table).
    int pass[5 + kMaxProcs];
    int n_pass = 0;
    pass[n_pass++] = pipe_fds[1];
    pass[n_pass++] = p.log_fd;
    pass[n_pass++] = p.null_fd;
    pass[n_pass++] = *blob;
    pass[n_pass++] = go_fds[0];
    for (int fd : p.procs) pass[n_pass++] = fd;
    sigset_t all, before;
    sigfillset(&all);
    sigprocmask(SIG_SETMASK, &all, &before);
    pid = VforkShim(shim_fd_, shim_argv.data(), pass, n_pass, pipe_fds[1]);
    fork_errno = errno;
    sigprocmask(SIG_SETMASK, &before, nullptr);
    close(*blob);
    close(go_fds[0]);
    // The word to start: once the agent has recorded the supervisor (a
    // supervisor that never hears it starts nothing).
    if (pid > 0 && (!spec.recorded || spec.recorded(pid))) {
      [[maybe_unused]] ssize_t w = write(go_fds[1], "g", 1);
    }
    close(go_fds[1]);
  }
  close(pipe_fds[1]);
  close_all();
  if (pid < 0) {
    close(pipe_fds[0]);
    return UnavailableError(std::string("cannot fork: ") + std::strerror(fork_errno));
  }
  auto failed = [&](int step, int err) -> Status {
    int status;
    // (A task of its own killed in a hung exec, or whose start is unknown,
    // may never be reapable: not waited for.)
    waitpid(pid, &status, !supervised && (step == kStepSlow || step == kStepWait) ? WNOHANG : 0);
    // (A step this agent does not know: a report from another build of the shim.)
    if (step < 0 || step >= static_cast<int>(std::size(kSteps))) step = kStepShim;
    std::string what = step == kStepExec ? "start '" + spec.argv[0] + "'"
                       : step == kStepShim ? std::string(kSteps[step]) + " " + shim_
                                           : std::string(kSteps[step]);
    if (step == kStepUnmount) {
      for (size_t i = 0; i < spec.hide_mounts.size(); ++i) what += (i == 0 ? " " : ", ") + spec.hide_mounts[i];
    }
    // (A program that did not exec in time: the node's trouble, most likely
    // a hung file system; the agent counts these: RuntimeTrouble.)
    if (step == kStepSlow) return DeadlineExceededError("cannot " + what);
    if (step == kStepStopped) return UnavailableError("cannot " + what);
    return UnavailableError("cannot " + what + ": " + std::strerror(err));
  };
  ssize_t n;
  if (!supervised) {
    ChildError e{};
    n = AwaitExec(pipe_fds[0], pid, &e);
    close(pipe_fds[0]);
    if (n == static_cast<ssize_t>(sizeof(e)) || n < 0) return failed(e.step, e.err);
    return Launched{pid, 0};
  }
  ShimReport r{};
  do {
    n = read(pipe_fds[0], &r, sizeof(r));
  } while (n < 0 && errno == EINTR);
  close(pipe_fds[0]);
  if (n != static_cast<ssize_t>(sizeof(r))) return failed(kStepShim, ECHILD);
  if (r.step >= 0) return failed(r.step, r.err);
  return Launched{r.task, pid};
}

int ProcessLauncher::Poll(pid_t pid) {
  int status = 0;
  const pid_t r = waitpid(pid, &status, WNOHANG);
  if (r == 0) return -1;
  if (r < 0) return 255;  // not our child any more: treat as failed
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return -1;
}

void ProcessLauncher::Signal(pid_t pid, int signal) {
  if (pid > 0) kill(-pid, signal);  // (never kill(0): the agent's own group)
}

int ReadExitFile(const std::string& exit_file, TimePoint* written_at, bool* fenced) {
  if (written_at != nullptr) *written_at = 0;
  if (fenced != nullptr) *fenced = false;
  const int fd = open(exit_file.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) return -1;
  char buf[16] = {};
  const ssize_t n = read(fd, buf, sizeof(buf) - 1);
  struct stat st {};
  if (written_at != nullptr && fstat(fd, &st) == 0) {
    *written_at = static_cast<TimePoint>(st.st_mtim.tv_sec) * kMicrosPerSecond + st.st_mtim.tv_nsec / 1000;
  }
  close(fd);
  if (n <= 0 || buf[0] < '0' || buf[0] > '9') return -1;  // (none yet: PrepareExitFile's room)
  int code = 0;
  ssize_t i = 0;
  for (; i < n && buf[i] >= '0' && buf[i] <= '9'; ++i) code = code * 10 + (buf[i] - '0');
  // Whole: the digits end with a space or a newline (not with the room's
  // '-', met halfway through the supervisor's write).
  if (i >= n || (buf[i] != ' ' && buf[i] != '\n')) return -1;
  if (fenced != nullptr) *fenced = std::memchr(buf + i, 'F', static_cast<size_t>(n - i)) != nullptr;
  return code;
}

int PrepareExitFile(const std::string& exit_file) {
  const int fd = open(exit_file.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) return errno;
  // The room reserved, the file left empty (as any reader, an earlier
  // agent's too, takes for no status yet); where the file system cannot
  // reserve, written ('-': no status yet to ReadExitFile).
  int err = fallocate(fd, FALLOC_FL_KEEP_SIZE, 0, kExitFileSize) == 0 ? 0 : errno;
  if (err == EOPNOTSUPP || err == ENOSYS) {
    char room[kExitFileSize];
    std::memset(room, '-', sizeof(room));
    room[kExitFileSize - 1] = '\n';
    err = WriteWhole(fd, room, sizeof(room), 0);
  }
  close(fd);
  if (err != 0) unlink(exit_file.c_str());
  return err;
}

uint64_t ProcessStartTime(pid_t pid) {
  if (pid <= 0) return 0;
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(in, line)) return 0;
  const size_t close_paren = line.rfind(')');
  if (close_paren == std::string::npos) return 0;
  std::istringstream rest(line.substr(close_paren + 2));
  std::string field;
  char state = 0;
  rest >> state;
  if (state == 'Z' || state == 'X') return 0;
  // Fields after the state: ppid (4) ... starttime is field 22 overall, the 19th after the state.
  for (int i = 0; i < 18; ++i) rest >> field;
  uint64_t start = 0;
  rest >> start;
  return start;
}

pid_t SupervisedTaskPid(pid_t shim, uint64_t shim_start, int wait_ms) {
  for (int waited = 0;; waited += 10) {
    if (shim <= 0 || shim_start == 0 || ProcessStartTime(shim) != shim_start) return 0;
    const std::vector<pid_t> children = ChildrenOf(shim);
    if (!children.empty()) return children.front();
    if (waited >= wait_ms) return 0;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
}

}  // namespace rota::agent
