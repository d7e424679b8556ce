#include "agent/launcher.h"

#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

namespace rota::agent {
namespace {

// What the child failed at, sent to the parent through the exec pipe.
struct ChildError {
  int step;  // index into kSteps
  int err;
};
constexpr const char* kSteps[] = {"join its cgroup", "open its log", "change to its directory",
                                  "set its groups", "set its gid", "set its uid", "set no_new_privs", "exec"};

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
  if (spec.argv.empty()) return InvalidArgumentError("command: empty");
  std::error_code ec;
  const std::filesystem::path log(spec.log_path);
  std::filesystem::create_directories(log.parent_path(), ec);
  const std::string workdir = spec.workdir.empty() ? log.parent_path().string() : spec.workdir;

  // Everything the child needs is made here: after fork it may only make
  // async-signal-safe calls (the agent has other threads).
  std::vector<std::string> env_strings;
  for (const auto& [k, v] : spec.env) env_strings.push_back(k + "=" + v);
  std::vector<char*> argv, envp;
  for (const auto& a : spec.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  for (auto& e : env_strings) envp.push_back(e.data());
  envp.push_back(nullptr);
  const std::string program = FindProgram(spec);

  std::vector<int> procs;
  auto close_all = [&] {
    for (int fd : procs) close(fd);
  };
  for (const std::string& p : spec.cgroup_procs) {
    const int fd = open(p.c_str(), O_WRONLY | O_CLOEXEC);
    if (fd < 0) {
      const int err = errno;
      close_all();
      return UnavailableError("cgroup " + p + ": " + std::strerror(err));
    }
    procs.push_back(fd);
  }
  const int log_fd = open(spec.log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0644);
  const int null_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
  if (log_fd >= 0 && spec.set_identity) {
    // The task's log is its own to read on the node, nobody else's.
    [[maybe_unused]] int rc = fchown(log_fd, spec.uid, spec.gid);
    fchmod(log_fd, 0600);
  }
  int pipe_fds[2];
  if (log_fd < 0 || null_fd < 0 || pipe2(pipe_fds, O_CLOEXEC) != 0) {
    const int err = errno;
    close_all();
    if (log_fd >= 0) close(log_fd);
    if (null_fd >= 0) close(null_fd);
    return UnavailableError("cannot open the log " + spec.log_path + ": " + std::strerror(err));
  }

  const pid_t pid = fork();
  if (pid == 0) {
    const int report = pipe_fds[1];
    // Default dispositions and an empty mask, as a fresh process has.
    struct sigaction dfl {};
    dfl.sa_handler = SIG_DFL;
    for (int s = 1; s < NSIG; ++s) sigaction(s, &dfl, nullptr);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, nullptr);
    setsid();
    umask(022);  // the agent's own is 077; a task gets the usual one
    for (int fd : procs) {
      if (write(fd, "0", 1) != 1) ChildFail(report, 0);  // "0": the writing process
    }
    if (dup2(null_fd, 0) < 0 || dup2(log_fd, 1) < 0 || dup2(log_fd, 2) < 0) ChildFail(report, 1);
    if (chdir(workdir.c_str()) != 0) ChildFail(report, 2);
    if (spec.set_identity) {
      if (setgroups(spec.groups.size(), spec.groups.data()) != 0) ChildFail(report, 3);
      if (setgid(spec.gid) != 0) ChildFail(report, 4);
      if (setuid(spec.uid) != 0) ChildFail(report, 5);
    }
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) ChildFail(report, 6);
    // Nothing else of the agent's (sockets, files opened without CLOEXEC)
    // reaches the task; the report pipe is CLOEXEC and closes on exec.
    if (report > 3) close_range(3, static_cast<unsigned>(report) - 1, 0);
    close_range(static_cast<unsigned>(report) + 1, ~0U, 0);
    execve(program.c_str(), argv.data(), envp.data());
    ChildFail(report, 7);
  }
  const int fork_errno = errno;
  close(pipe_fds[1]);
  close_all();
  close(log_fd);
  close(null_fd);
  if (pid < 0) {
    close(pipe_fds[0]);
    return UnavailableError(std::string("cannot fork: ") + std::strerror(fork_errno));
  }
  ChildError e{};
  ssize_t n;
  do {
    n = read(pipe_fds[0], &e, sizeof(e));
  } while (n < 0 && errno == EINTR);
  close(pipe_fds[0]);
  if (n == static_cast<ssize_t>(sizeof(e))) {
    int status;
    waitpid(pid, &status, 0);
    const std::string what = e.step == 7 ? "start '" + spec.argv[0] + "'" : std::string(kSteps[e.step]);
    return UnavailableError("cannot " + what + ": " + std::strerror(e.err));
  }
  return pid;
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

void ProcessLauncher::Signal(pid_t pid, int signal) { kill(-pid, signal); }

}  // namespace rota::agent
