// ProcessLauncher: runs a task as a process in its own session and process
// group (so a signal reaches everything it started), with exactly the
// environment it is given and stdout/stderr appended to a log file.
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
