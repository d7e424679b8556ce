// The user-facing client subcommands: submit, jobs, describe, cancel, logs,
// nodes, queues, top, token. Human tables by default, -o json on every one.
#pragma once

#include <string>
#include <vector>

namespace rota::cli {

// Returns the exit code, or -1 if `cmd` is not a client command.
int ClientMain(const std::string& cmd, std::vector<std::string> args);

}  // namespace rota::cli
