// Identity: the Unix account a task runs as. Every rota user maps to an
// account on the node, by name through NSS (getpwnam) or by an explicit
// uid/gid the cluster config gives; the task gets that uid, its primary and
// supplementary groups, and a clean base environment (HOME, USER, LOGNAME,
// SHELL from the account; a fixed PATH), never the agent's own variables.
//
// Refusals are values: a user with no account on the node, uid 0 where the
// server did not allow it, or an agent that is not root asked to run a task
// as someone other than itself.
//
// Thread-safety: stateless; the NSS lookups use the reentrant calls.
#pragma once

#include <sys/types.h>

#include <map>
#include <string>
#include <vector>

#include "base/status.h"

namespace rota::agent {

struct TaskIdentity {
  std::string user;  // the account's name ("" when only a uid was given and NSS has no entry)
  uid_t uid = 0;
  gid_t gid = 0;
  std::vector<gid_t> groups;  // supplementary groups (includes gid)
  std::string home = "/";
  std::string shell = "/bin/sh";
};

struct IdentityRequest {
  std::string user;      // the rota user who owns the job
  int64_t uid = -1;      // an explicit mapping from the config (-1 = by name)
  int64_t gid = -1;      // with uid: its primary group (-1 = the account's, else = uid)
  bool allow_root = false;  // uid 0 is allowed (the server's owner, or a queue that allows it)
};

// Resolves the account, or FailedPrecondition / PermissionDenied saying why
// the task cannot run here. `agent_uid` is the uid the agent runs as: a
// non-root agent can only start tasks as itself.
StatusOr<TaskIdentity> ResolveIdentity(const IdentityRequest& request, uid_t agent_uid, const std::string& node);

// The base environment for a task of `id`: PATH, HOME, USER, LOGNAME, SHELL,
// and LANG/TERM/TZ when the agent has them (harmless, locale only).
std::map<std::string, std::string> BaseEnvironment(const TaskIdentity& id);

}  // namespace rota::agent
