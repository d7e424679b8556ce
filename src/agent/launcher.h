// ProcessLauncher: runs a task as a process in its own session and process
// group (so a signal reaches everything it started), with exactly the
// environment it is given and stdout/stderr appended to a log file.
//
// Between fork and exec the child joins its cgroups (so it never runs an
// instruction of its own outside them), takes the task's uid, primary and
// supplementary groups, and sets no_new_privs (setuid binaries and file
// capabilities cannot raise it again). No other descriptor of the agent's
// reaches it. A failed exec is returned by Start, not as an exit.
//
// Thread-safety: one owner (the agent loop).
#pragma once

#include <sys/types.h>

#include <map>
#include <string>
#include <vector>

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
  // cgroup.procs files the process joins before it execs.
  std::vector<std::string> cgroup_procs;
};

class ProcessLauncher {
 public:
  // Starts the process; returns its pid (also its process group id).
  StatusOr<pid_t> Start(const LaunchSpec& spec);
  // Exit status of `pid` if it has ended: the exit code, or 128 + signal.
  // Returns -1 while it runs.
  int Poll(pid_t pid);
  // Sends `signal` to the whole process group.
  void Signal(pid_t pid, int signal);
};

}  // namespace rota::agent
