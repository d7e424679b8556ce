#include "agent/identity.h"

#include <grp.h>
#include <pwd.h>
#include <unistd.h>

#include <cstdlib>

namespace rota::agent {
namespace {

// getpwnam_r / getpwuid_r into `out`; false if there is no such account.
bool LookUp(const std::string& name, int64_t uid, TaskIdentity* out) {
  struct passwd pw {};
  struct passwd* found = nullptr;
  std::vector<char> buf(16384);
  if (!name.empty()) {
    getpwnam_r(name.c_str(), &pw, buf.data(), buf.size(), &found);
  } else {
    getpwuid_r(static_cast<uid_t>(uid), &pw, buf.data(), buf.size(), &found);
  }
  if (found == nullptr) return false;
  out->user = pw.pw_name;
  out->uid = pw.pw_uid;
  out->gid = pw.pw_gid;
  out->home = pw.pw_dir && *pw.pw_dir ? pw.pw_dir : "/";
  out->shell = pw.pw_shell && *pw.pw_shell ? pw.pw_shell : "/bin/sh";
  return true;
}

std::vector<gid_t> GroupsOf(const std::string& user, gid_t gid) {
  if (user.empty()) return {gid};
  int n = 64;
  std::vector<gid_t> groups(static_cast<size_t>(n));
  if (getgrouplist(user.c_str(), gid, groups.data(), &n) < 0) {
    groups.resize(static_cast<size_t>(n));
    if (getgrouplist(user.c_str(), gid, groups.data(), &n) < 0) return {gid};
  }
  groups.resize(static_cast<size_t>(n));
  return groups;
}

}  // namespace

StatusOr<TaskIdentity> ResolveIdentity(const IdentityRequest& request, uid_t agent_uid, const std::string& node) {
  TaskIdentity id;
  if (request.uid >= 0) {
    // An explicit mapping: the account's name and groups when NSS knows the uid.
    if (!LookUp("", request.uid, &id)) {
      id.user.clear();
      id.uid = static_cast<uid_t>(request.uid);
      id.gid = static_cast<gid_t>(request.uid);
      id.home = "/";
    }
    id.uid = static_cast<uid_t>(request.uid);
    if (request.gid >= 0) id.gid = static_cast<gid_t>(request.gid);
  } else if (!LookUp(request.user, -1, &id)) {
    return FailedPreconditionError("user '" + request.user + "' has no Unix account on node '" + node +
                                   "' (create one, or map the user to a uid in the cluster config's accounts)");
  }
  id.groups = GroupsOf(id.user, id.gid);
  if (id.uid == 0 && !request.allow_root) {
    return PermissionDeniedError("user '" + request.user +
                                 "' maps to uid 0, which this queue does not allow (allow_root in the queue's config)");
  }
  if (agent_uid != 0 && id.uid != agent_uid) {
    return PermissionDeniedError("the agent on node '" + node + "' runs as uid " + std::to_string(agent_uid) +
                                 " and can start tasks only as itself, not as uid " + std::to_string(id.uid) +
                                 " (user '" + request.user + "')");
  }
  return id;
}

std::map<std::string, std::string> BaseEnvironment(const TaskIdentity& id) {
  std::map<std::string, std::string> env{{"PATH", "/usr/local/bin:/usr/bin:/bin"},
                                         {"HOME", id.home},
                                         {"SHELL", id.shell}};
  if (!id.user.empty()) env["USER"] = env["LOGNAME"] = id.user;
  for (const char* pass : {"LANG", "LC_ALL", "TERM", "TZ"}) {
    if (const char* v = std::getenv(pass)) env[pass] = v;
  }
  return env;
}

}  // namespace rota::agent
