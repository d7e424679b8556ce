// The user-facing client subcommands: submit, jobs, describe, cancel, logs,
// nodes, queues, top, token. Human tables by default, -o json on every one.
#pragma once

#include <string>
#include <utility>
#include <vector>

namespace rota::cli {

// Returns the exit code, or -1 if `cmd` is not a client command. --help (or
// -h) prints the command's help without calling the server; a flag the
// command does not take, or -o other than table or json, is bad input.
int ClientMain(const std::string& cmd, std::vector<std::string> args);

// `rota version`: this binary's version, and the server's (found as client
// commands find it) when one answers within 2 s. Always exit code 0.
int VersionMain(std::vector<std::string> args);

// The client commands' names, and the help of one (false if not one).
std::vector<std::string> ClientCommandNames();
// Each client command with its help text (usage and summary: the man page).
std::vector<std::pair<std::string, std::string>> ClientCommandHelp();
// Each client command with the flags it parses (for shell completion).
std::vector<std::pair<std::string, std::vector<std::string>>> ClientCommandFlags();
bool PrintClientHelp(const std::string& cmd);

}  // namespace rota::cli
