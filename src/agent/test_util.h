// Helpers shared by the agent's tests.
#pragma once

#include <sys/types.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <string>

#include "agent/launcher.h"

namespace rota::agent::testing {

#ifdef ROTA_TEST_SHIM
// The rota-shim this build tree built (a test binary is not beside it).
inline constexpr const char* kShim = ROTA_TEST_SHIM;
#endif

inline std::string Read(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The exit status of `pid` once it ends (polling every millisecond), or -1
// after `max_ms`.
inline int Wait(ProcessLauncher& l, pid_t pid, int max_ms = 10000) {
  for (int i = 0; i < max_ms; ++i) {
    const int code = l.Poll(pid);
    if (code >= 0) return code;
    usleep(1000);
  }
  return -1;
}

}  // namespace rota::agent::testing
