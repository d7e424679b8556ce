// `rota plan`: offline what-if scheduling of a jobs file on a cluster config.
#pragma once

namespace rota::cli {

// Exit codes: 0 ok, 2 bad usage or malformed input.
int PlanMain(int argc, char** argv);
const char* PlanUsage();

}  // namespace rota::cli
