// `rota sim`: replays a trace through the scheduler in virtual time.
#pragma once

#include <string>
#include <vector>

namespace rota::cli {

// Exit codes: 0 ok, 2 bad usage or malformed input.
int SimMain(const std::vector<std::string>& args);
const char* SimUsage();

}  // namespace rota::cli
