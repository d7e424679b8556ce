// ProcessLauncher: runs a task as a process in its own session and process
// group (so a signal reaches everything it started), with exactly the
// environment it is given and stdout/stderr appended to a log file.
//
// Between its fork and exec the child joins its cgroups (so it never runs an
// instruction of its own outside them), takes the task's uid, primary and
// supplementary groups, and sets no_new_privs (setuid binaries and file
// capabilities cannot raise it again). No other descriptor of the agent's
// reaches it. A failed exec is returned by Start, not as an exit.
//
// Supervised launches (LaunchSpec::exit_file set) put a small supervisor
// between the agent and the task, like slurmstepd or containerd-shim:
// rota-shim (shim_main.cc, a static binary installed beside rota), which the
// agent starts with vfork and exec, so that no copy of the agent's memory is
// made (in this VM a fork of the agent took 7 ms of a 20 ms start). It gets
// what it needs on its command line (nothing secret: ps shows it to every
// user) and the descriptors it is handed (the task's arguments and
// environment in a memfd, the log, /dev/null, the cgroup.procs files, a
// report pipe), an empty environment (nothing of the task's, such as
// LD_PRELOAD, reaches a process that runs as the agent's user), and starts
// the task with fork in a session of its own (not vfork: a child its user's
// other processes stop before its exec would hold the supervisor for good;
// AwaitExec kills it). It waits for the task, writes its exit status to
// `exit_file`, and exits with the same status. It
// outlives its agent, so a restarted agent re-adopts the task (and learns
// its exit) instead of starting a second copy. It also fences the task:
// while `lease_file`'s deadline (CLOCK_BOOTTIME nanoseconds as decimal text,
// which the agent moves forward after every heartbeat the server answers;
// immune to steps of the wall clock) lies in the past, it sends the
// stop signal `fence_warn_ms` before the deadline and kills the task's
// process group and cgroups at it. So a node cut off from the control plane,
// or whose agent hangs or died, stops its tasks by the deadline on its own.
// Between the agent's vfork and the shim's exec the child makes only
// async-signal-safe calls, with every signal blocked.
//
// Thread-safety: one owner (the agent loop).
#pragma once

#include <sys/types.h>

#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "base/quantity.h"
#include "base/status.h"

namespace rota::agent {

struct LaunchSpec {
  std::vector<std::string> argv;         // argv[0] is looked up in PATH
  std::map<std::string, std::string> env;  // the whole environment
  std::string log_path;
  std::string workdir;  // "" = the log's directory
  // The account to run as; unset = the agent's own (no change of identity).
  bool set_identity = false;
  uid_t uid = 0;
  gid_t gid = 0;
  std::vector<gid_t> groups;
  // The log is uid/gid's (0600) even without set_identity: a container's
  // runtime runs as the agent, its process as the job's account.
  bool log_as_identity = false;
  // cgroup.procs files the process joins before it execs.
  std::vector<std::string> cgroup_procs;
  // Supervision ("" = none: the task is the agent's child).
  std::string exit_file;
  std::string lease_file;  // "" = no fencing
  int fence_warn_ms = 0;   // the stop signal this long before the lease's deadline
  int stop_signal = 15;    // SIGTERM
  // cgroup.procs files whose processes are killed at the deadline (the
  // task's own groups, or its container's).
  std::vector<std::string> fence_kill_procs;
  // Mounts the task does not see: it gets a private mount namespace with
  // these unmounted before it execs (crun on a hybrid cgroup host, which
  // refuses to run while cgroup2 is mounted beside the v1 controllers).
  std::vector<std::string> hide_mounts;
  // Supervised: called with the supervisor's pid once it runs and before it
  // may start the task; the task starts only if this returns true (the
  // agent has recorded the supervisor, so that an agent killed at any
  // moment leaves a record of every task that may run). Unset: it starts.
  std::function<bool(pid_t supervisor)> recorded;
};

struct Launched {
  pid_t pid = 0;   // the task (its process group id)
  pid_t shim = 0;  // its supervisor, the agent's child (0: unsupervised; pid is the child)
};

class ProcessLauncher {
 public:
  // `shim`: the supervisor's binary ("" = DefaultShimPath()), opened now:
  // the file replaced later (an upgrade) changes nothing under this
  // launcher.
  explicit ProcessLauncher(std::string shim = "");
  ~ProcessLauncher();
  ProcessLauncher(const ProcessLauncher&) = delete;
  ProcessLauncher& operator=(const ProcessLauncher&) = delete;
  // Starts the process; returns its pid (also its process group id).
  StatusOr<pid_t> Start(const LaunchSpec& spec);
  // Starts the process, supervised when spec.exit_file is set. A program
  // that did not exec within 10 s (a hung file system) is killed:
  // kDeadlineExceeded.
  StatusOr<Launched> Launch(const LaunchSpec& spec);
  // Exit status of child `pid` if it has ended: the exit code, or 128 + signal.
  // Returns -1 while it runs.
  int Poll(pid_t pid);
  // Sends `signal` to the whole process group.
  void Signal(pid_t pid, int signal);
 private:
  std::string shim_;
  int shim_fd_ = -1;  // O_PATH
  int shim_errno_ = 0;  // why it could not be opened
};

// The supervisor's binary: rota-shim beside this executable (where rota is
// installed, it is installed too).
std::string DefaultShimPath();
// Whether `path` is a supervisor this agent can start: Unavailable, naming
// it and saying to install rota-shim beside rota, if not.
Status CheckShim(const std::string& path);
// main() of rota-shim (shim_main.cc): what the agent handed it on its
// command line, then the supervisor's life. Returns 127 only on a command
// line that is not the agent's; otherwise it never returns.
int ShimMain(int argc, char** argv);

// The deadline in a lease file (CLOCK_BOOTTIME ns), 0 if none, -1 if it
// could not be read whole (async-signal-safe).
int64_t ReadLeaseDeadline(const char* path);
// Writes `deadline` into the lease file `path` (made if missing) in place,
// as ReadLeaseDeadline reads it: fixed width, twice (a reader that meets a
// write halfway sees two that differ). Written over an earlier one it
// allocates nothing. 0, or the errno (ENOSPC: the disk is full).
int WriteLeaseFile(const std::string& path, int64_t deadline);
// Writes all `size` bytes at `offset` of `fd`: 0, or the errno (ENOSPC for
// a short write: the disk is full).
int WriteWhole(int fd, const void* data, size_t size, off_t offset);
// CLOCK_BOOTTIME now, in nanoseconds.
int64_t BootTimeNs();

// Opens a file in a task's reach (its log, which it owns, or a file in its
// job's directory) the way the agent, as root, must: never through a
// symbolic link, never waiting (a lease the file's owner holds on it, or a
// FIFO, answers EWOULDBLOCK at once instead of holding the agent, and every
// task of the node with it, for the kernel's 45 s lease break), and only a
// regular file (ENXIO otherwise). O_NONBLOCK stays set on the descriptor (a
// regular file's reads and writes ignore it; Launch clears it on the one it
// hands the task as stdout). The descriptor, or -1 with errno.
int OpenTaskFile(const std::string& path, int flags, mode_t mode = 0600);
// Appends `text` to the log at `path` (made 0644 if missing) through
// OpenTaskFile: 0, or the errno.
int AppendToTaskFile(const std::string& path, std::string_view text);

// The exit status a supervisor wrote to `exit_file`, or -1 if none yet;
// with `written_at`, when the file was last written (the supervisor writes
// the status as its task ends: then, on the node's clock); with `fenced`,
// whether the fence ended it (killed it at the lease's deadline, or warned
// it and the lease was not renewed before it ended).
int ReadExitFile(const std::string& exit_file, TimePoint* written_at = nullptr, bool* fenced = nullptr);
// Creates `exit_file` with room for the exit status, before the supervisor
// starts its task: the supervisor writes the status over it in place, so
// that a disk that has filled since can still take it (a status it could not
// write would leave a restarted agent to report the task lost, and the
// server to run it again). 0, or the errno (ENOSPC: the disk is full).
int PrepareExitFile(const std::string& exit_file);
// The start time of process `pid` (clock ticks since boot, /proc/PID/stat),
// or 0 if there is no such live process (gone, or a zombie).
uint64_t ProcessStartTime(pid_t pid);
// The task supervisor `shim` (started at `shim_start`) started: its child
// (/proc/PID/task/PID/children), waited for up to `wait_ms` while the
// supervisor lives without one (it was told to start it just before its
// agent died); 0 if it started none, or is gone.
pid_t SupervisedTaskPid(pid_t shim, uint64_t shim_start, int wait_ms = 2000);
// How the shim and the agent wait for a child they forked to exec (`fd`:
// the read end of a pipe whose write end the child holds close-on-exec):
// "" once it exec'd; else why it did not start. A child stopped before its
// exec (its user's other processes may signal it once it has their
// identity) is killed, not waited for: it would hold the agent's lock.
std::string WaitForExec(int fd, pid_t child);

}  // namespace rota::agent
