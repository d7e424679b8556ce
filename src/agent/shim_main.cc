// rota-shim: the supervisor between a node's agent and each task it runs
// (agent/launcher.h). The agent starts it with vfork and exec, so starting
// a task copies none of the agent's memory; it is linked statically, so
// its exec loads nothing more.
#include "agent/launcher.h"

int main(int argc, char** argv) { return rota::agent::ShimMain(argc, argv); }
