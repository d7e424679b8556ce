#include "agent/oci.h"

#include "agent/launcher.h"

#include <fcntl.h>
#include <linux/openat2.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <thread>
#include <chrono>
#include <climits>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

extern char** environ;

namespace rota::agent {

using nlohmann::json;

pid_t SpawnQuiet(const std::vector<std::string>& argv) {
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
  // In a process group of its own: what it starts is killed with it.
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);
  posix_spawnattr_setpgroup(&attr, 0);
  pid_t pid = 0;
  const int rc = posix_spawnp(&pid, args[0], &fa, &attr, args.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  posix_spawnattr_destroy(&attr);
  return rc == 0 ? pid : -1;
}

int PollQuiet(pid_t pid) {
  int status = 0;
  pid_t r;
  do {
    r = waitpid(pid, &status, WNOHANG);
  } while (r < 0 && errno == EINTR);
  if (r == 0) return -1;
  if (r < 0) return 255;  // (not ours to wait for: taken as failed)
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

int RunQuiet(const std::vector<std::string>& argv, int timeout_ms) {
  const pid_t pid = SpawnQuiet(argv);
  if (pid < 0) return -1;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
  for (int pause_ms = 1;; pause_ms = std::min(pause_ms * 2, 50)) {
    if (const int code = PollQuiet(pid); code >= 0) return code;
    if (std::chrono::steady_clock::now() >= deadline) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(pause_ms));
  }
  // Past its time (a runtime stuck on a cgroup whose processes will not
  // die): killed, and reaped if it goes within a second; one that does not
  // (the kernel's D state) is left, not waited on for good.
  kill(-pid, SIGKILL);
  for (int i = 0; i < 100 && PollQuiet(pid) < 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  return -1;
}

bool KernelHasRecursiveReadOnly() {
#ifdef SYS_mount_setattr
  // No such syscall: ENOSYS; else the bad descriptor is refused (EBADF or EINVAL).
  static const bool has = syscall(SYS_mount_setattr, -1, "", 0, nullptr, 0) == 0 || errno != ENOSYS;
  return has;
#else
  return false;
#endif
}

namespace {

// Ok if `path` (absolute) is there, reached through no symbolic link but
// root's (FailedPrecondition naming the first other one; NotFound if it is
// not there; `what` names it). The server checked the path as written
// against allowed_mounts: a link a job made below an allowed prefix
// (`/scratch/alice/h -> /`) would reach elsewhere, while an admin's link
// (`/datasets -> /mnt/nfs/datasets`) is the admin's to make.
Status NoSymbolicLinks(const std::string& path, const std::string& what) {
  std::deque<std::string> todo;
  auto push_front = [&](const std::string& p) {
    std::vector<std::string> parts;
    std::stringstream ss(p);
    for (std::string part; std::getline(ss, part, '/');) parts.push_back(part);
    todo.insert(todo.begin(), parts.begin(), parts.end());
  };
  push_front(path);
  std::string at;  // resolved so far, without links ("" is /)
  int links = 0;
  while (!todo.empty()) {
    const std::string part = todo.front();
    todo.pop_front();
    if (part.empty() || part == ".") continue;
    if (part == "..") {
      at = at.substr(0, at.rfind('/') == std::string::npos ? 0 : at.rfind('/'));
      continue;
    }
    const std::string next = at + "/" + part;
    struct stat st {};
    if (lstat(next.c_str(), &st) != 0) {
      if (errno == ENOENT || errno == ENOTDIR) return NotFoundError(what + " '" + path + "' is not on this node");
      return FailedPreconditionError(what + " '" + path + "': " + next + ": " + std::strerror(errno));
    }
    if (!S_ISLNK(st.st_mode)) {
      at = next;
      continue;
    }
    if (st.st_uid != 0) {
      return FailedPreconditionError(what + " '" + path + "' goes through a symbolic link that is not root's (" + next +
                                     ", owned by uid " + std::to_string(st.st_uid) +
                                     "): name its real path, which the cluster's allowed_mounts are checked against");
    }
    char target[PATH_MAX];
    const ssize_t n = readlink(next.c_str(), target, sizeof(target) - 1);
    if (n < 0 || ++links > 40) return FailedPreconditionError(what + " '" + path + "': too many symbolic links");
    const std::string to(target, static_cast<size_t>(n));
    if (!to.empty() && to[0] == '/') at.clear();
    push_front(to);
  }
  return Status::Ok();
}

}  // namespace

StatusOr<std::string> ResolveRootfs(const std::string& rootfs) {
  std::error_code ec;
  if (std::filesystem::is_directory(rootfs + "/rootfs", ec)) return rootfs + "/rootfs";
  if (std::filesystem::is_directory(rootfs, ec)) return rootfs;
  return NotFoundError("rootfs '" + rootfs + "' is not a directory on this node");
}

std::vector<std::string> HybridCgroup2Mounts() {
  std::ifstream in("/proc/self/mounts");
  std::string line;
  std::vector<std::string> v2;
  bool v1 = false;
  while (std::getline(in, line)) {
    std::istringstream ss(line);
    std::string source, target, type;
    ss >> source >> target >> type;
    if (type == "cgroup2") v2.push_back(target);
    if (type == "cgroup") v1 = true;
  }
  return v1 ? v2 : std::vector<std::string>{};
}

StatusOr<std::string> FindOciRuntime(const std::string& name) {
  if (name != "auto" && name != "runc" && name != "crun") {
    return InvalidArgumentError("--oci-runtime: '" + name + "' is not runc, crun or auto");
  }
  const char* path = getenv("PATH");
  std::string dirs = path != nullptr ? path : "/usr/local/bin:/usr/bin:/bin";
  dirs += ":/usr/sbin:/sbin";  // runc installs to /usr/sbin
  // (crun refuses a hybrid cgroup host unless cgroup2 is unmounted, which
  // takes privileges an agent that is not root lacks.)
  const bool crun_first = geteuid() == 0 || HybridCgroup2Mounts().empty();
  for (const char* candidate : {crun_first ? "crun" : "runc", crun_first ? "runc" : "crun"}) {
    if (name != "auto" && name != candidate) continue;
    std::stringstream ss(dirs);
    std::string dir;
    while (std::getline(ss, dir, ':')) {
      const std::string p = dir + "/" + candidate;
      if (!dir.empty() && access(p.c_str(), X_OK) == 0) return p;
    }
  }
  return NotFoundError(name == "auto" ? "no OCI runtime: install runc or crun" : name + " is not installed");
}

namespace {

std::vector<std::string> RuntimeArgv(const std::string& runtime, const std::string& root) {
  if (root.empty()) return {runtime};
  return {runtime, "--root", root};
}

}  // namespace

std::vector<std::string> OciRunArgv(const std::string& runtime, const std::string& bundle, const std::string& id,
                                    const std::string& root) {
  std::vector<std::string> argv = RuntimeArgv(runtime, root);
  argv.insert(argv.end(), {"run", "--bundle", bundle, id});
  return argv;
}

std::vector<std::string> OciHiddenMounts(const std::string& runtime) {
  const bool crun = std::filesystem::path(runtime).filename() == "crun";
  return crun ? HybridCgroup2Mounts() : std::vector<std::string>{};
}

std::string OciStateRoot(const std::string& runtime) {
  const std::string name = std::filesystem::path(runtime).filename();
  if (name != "runc" && name != "crun") return "";
  // runc: /run/runc as root; crun follows XDG_RUNTIME_DIR even as root.
  const char* xdg = getenv("XDG_RUNTIME_DIR");
  const bool has_xdg = xdg != nullptr && xdg[0] == '/';
  if (geteuid() == 0 && (name == "runc" || !has_xdg)) return "/run/" + name;
  return has_xdg ? std::string(xdg) + "/" + name : "";
}

std::string OciStateDirectory(const std::string& runtime, const std::string& agent_state_dir) {
  if (geteuid() == 0) return "/run/" + std::filesystem::path(runtime).filename().string();
  if (agent_state_dir.empty()) return OciStateRoot(runtime);
  const std::string dir = agent_state_dir + "/oci";
  mkdir(dir.c_str(), 0700);
  return dir;
}

bool OciContainerMayExist(const std::string& runtime, const std::string& id, const std::string& root) {
  const std::string dir = root.empty() ? OciStateRoot(runtime) : root;
  if (dir.empty()) return true;
  struct stat st {};
  if (stat((dir + "/" + id).c_str(), &st) == 0) return true;
  return errno != ENOENT;  // (not an answer, as EACCES: it may)
}

std::vector<std::string> OciDeleteArgv(const std::string& runtime, const std::string& id, const std::string& root) {
  std::vector<std::string> argv = RuntimeArgv(runtime, root);
  argv.insert(argv.end(), {"delete", "--force", id});
  return argv;
}

namespace {

json Mount(const std::string& dest, const std::string& type, const std::string& source, std::vector<std::string> opts) {
  return {{"destination", dest}, {"type", type}, {"source", source}, {"options", std::move(opts)}};
}

constexpr const char* kDefaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

// Whether `path` is `dir` or below it (both absolute and normal, "" for the root).
bool Under(const std::string& path, const std::string& dir) {
  return path.size() >= dir.size() && path.compare(0, dir.size(), dir) == 0 &&
         (path.size() == dir.size() || path[dir.size()] == '/');
}

}  // namespace

InRoot ResolveInRoot(int root_fd, const std::string& path) {
  InRoot r;
  std::deque<std::string> rest;
  auto push_front = [&rest](const std::string& p) {
    std::vector<std::string> parts;
    std::stringstream ss(p);
    for (std::string c; std::getline(ss, c, '/');) {
      if (!c.empty() && c != ".") parts.push_back(std::move(c));
    }
    rest.insert(rest.begin(), parts.begin(), parts.end());
  };
  auto up = [&r] { r.path.resize(r.path.rfind('/') == std::string::npos ? 0 : r.path.rfind('/')); };
  push_front(path);
  int links = 0;
  while (!rest.empty()) {
    const std::string c = std::move(rest.front());
    rest.pop_front();
    if (c == "..") {
      up();
      continue;
    }
    const std::string next = r.path + "/" + c;
    // Each step below a directory already resolved; RESOLVE_IN_ROOT keeps a
    // directory swapped for a symlink meanwhile inside the tree too.
    open_how how{};
    how.flags = O_PATH | O_NOFOLLOW | O_CLOEXEC;
    how.resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS;
    const int fd = static_cast<int>(syscall(SYS_openat2, root_fd, next.c_str() + 1, &how, sizeof(how)));
    if (fd < 0) {
      r.error = errno;
      r.path = next;
      for (const std::string& more : rest) {
        if (more == "..") up();
        else r.path += "/" + more;
      }
      return r;
    }
    struct stat st {};
    const bool stated = fstat(fd, &st) == 0;
    if (stated && S_ISLNK(st.st_mode)) {
      char target[4096];
      const ssize_t n = readlinkat(fd, "", target, sizeof(target));
      const int read_error = n < 0 ? errno : n == 0 || n == sizeof(target) ? ENAMETOOLONG : 0;
      close(fd);
      if (read_error != 0 || ++links > 40) {
        r.error = read_error != 0 ? read_error : ELOOP;
        r.path = next;
        return r;
      }
      const std::string to(target, static_cast<size_t>(n));
      if (to[0] == '/') r.path.clear();
      push_front(to);
      continue;
    }
    close(fd);
    if (!stated) {
      r.error = errno;
      r.path = next;
      return r;
    }
    r.path = next;
    r.st = st;
    if (!rest.empty() && !S_ISDIR(st.st_mode)) {
      r.error = ENOTDIR;
      for (const std::string& more : rest) r.path += "/" + more;
      return r;
    }
  }
  if (r.path.empty() && fstat(root_fd, &r.st) != 0) r.error = errno;
  return r;
}

Status CheckOciProgram(const std::string& rootfs, const std::string& program, const std::string& path_env,
                       const std::vector<std::string>& mount_targets) {
  if (program.empty()) return Status::Ok();
  const int root_fd = open(rootfs.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (root_fd < 0) return Status::Ok();  // (the runtime says why)
  // What the container sees at a mount point is not the image's: a path
  // there (its own, or through a symlink) may hold it.
  std::vector<std::string> covered;
  for (const std::string& t : mount_targets) covered.push_back(ResolveInRoot(root_fd, t).path);
  enum class Seen { kThere, kMaybe, kMissing, kNotExecutable, kDirectory };
  auto look = [&](const std::string& candidate) {
    const InRoot r = ResolveInRoot(root_fd, candidate);
    for (const std::string& c : covered) {
      if (Under(r.path, c)) return Seen::kMaybe;
    }
    if (r.error == ENOENT || r.error == ENOTDIR || r.error == ELOOP) return Seen::kMissing;
    if (r.error != 0) return Seen::kMaybe;  // (no openat2, not ours to read, out of descriptors: not ours to judge)
    if (S_ISDIR(r.st.st_mode)) return Seen::kDirectory;
    if (!S_ISREG(r.st.st_mode) || (r.st.st_mode & 0111) == 0) return Seen::kNotExecutable;
    return Seen::kThere;
  };
  Status result = Status::Ok();
  if (program.find('/') != std::string::npos) {
    // (The process starts in "/".)
    switch (look(program[0] == '/' ? program : "/" + program)) {
      case Seen::kMissing:
        result = NotFoundError("'" + program + "' is not in the image (" + rootfs + ")");
        break;
      case Seen::kDirectory:
        result = FailedPreconditionError("'" + program + "' is a directory in the image (" + rootfs + ")");
        break;
      case Seen::kNotExecutable:
        result = FailedPreconditionError("'" + program + "' is not an executable file in the image (" + rootfs + ")");
        break;
      default:
        break;
    }
  } else {
    // As the runtime looks it up: each directory of the container's PATH.
    bool found = false;
    std::stringstream ss(path_env);
    for (std::string dir; !found && std::getline(ss, dir, ':');) {
      if (dir.empty() || dir[0] != '/') {
        found = true;  // (relative: not ours to judge)
        continue;
      }
      const Seen seen = look(dir + "/" + program);
      found = seen == Seen::kThere || seen == Seen::kMaybe;
    }
    if (!found) {
      result = NotFoundError("'" + program + "' is not in the image's PATH (" + path_env + ") in " + rootfs);
    }
  }
  close(root_fd);
  return result;
}

Status WriteOciBundle(const std::string& bundle, const OciTask& task) {
  ROTA_ASSIGN_OR_RETURN(std::string rootfs, ResolveRootfs(task.rootfs));
  ROTA_RETURN_IF_ERROR(NoSymbolicLinks(rootfs, "rootfs"));
  json env = json::array();
  if (!task.env.count("PATH")) env.push_back(std::string("PATH=") + kDefaultPath);
  for (const auto& [k, v] : task.env) env.push_back(k + "=" + v);
  const std::vector<std::string> caps = {"CAP_AUDIT_WRITE", "CAP_KILL", "CAP_NET_BIND_SERVICE"};
  // Open files: as many as the agent itself may have (a container cannot go above that).
  struct rlimit nofile {};
  getrlimit(RLIMIT_NOFILE, &nofile);
  const auto files = static_cast<int64_t>(nofile.rlim_max == RLIM_INFINITY ? 1048576 : nofile.rlim_max);
  // Rootless: root inside, the agent's account outside (the only one mapped).
  const json user = task.rootless ? json{{"uid", 0}, {"gid", 0}}
                                  : json{{"uid", task.uid}, {"gid", task.gid}, {"additionalGids", task.additional_gids}};
  json process = {{"terminal", false},
                  {"user", user},
                  {"args", task.args},
                  {"env", env},
                  {"cwd", "/"},
                  {"capabilities", task.uid == 0 || task.rootless ? json{{"bounding", caps}, {"effective", caps}, {"permitted", caps}, {"ambient", caps}}
                                                   : json{{"bounding", caps}}},  // a user's process holds none
                  {"rlimits", json::array({{{"type", "RLIMIT_NOFILE"}, {"hard", files}, {"soft", files}}})},
                  {"noNewPrivileges", true}};
  json mounts = json::array({
      Mount("/proc", "proc", "proc", {}),
      Mount("/dev", "tmpfs", "tmpfs", {"nosuid", "strictatime", "mode=755", "size=65536k"}),
      Mount("/dev/pts", "devpts", "devpts", {"nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620", "gid=5"}),
      // NCCL and data loaders use /dev/shm: 1 GiB rather than 64 MiB.
      Mount("/dev/shm", "tmpfs", "shm", {"nosuid", "noexec", "nodev", "mode=1777", "size=1g"}),
      Mount("/dev/mqueue", "mqueue", "mqueue", {"nosuid", "noexec", "nodev"}),
      Mount("/sys", "sysfs", "sysfs", {"nosuid", "noexec", "nodev", "ro"}),
      Mount("/sys/fs/cgroup", "cgroup", "cgroup", {"nosuid", "noexec", "nodev", "relatime", "ro"}),
  });
  const char* read_only = task.recursive_read_only ? "rro" : "ro";
  if (task.rootless) {
    // Without a network namespace of its own a user namespace may not mount
    // sysfs, nor cgroups: the host's /sys bound read-only instead; and no
    // group 5 (tty) is mapped for /dev/pts.
    mounts = json::array();
    mounts.push_back(Mount("/proc", "proc", "proc", {}));
    mounts.push_back(Mount("/dev", "tmpfs", "tmpfs", {"nosuid", "strictatime", "mode=755", "size=65536k"}));
    mounts.push_back(Mount("/dev/pts", "devpts", "devpts", {"nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620"}));
    mounts.push_back(Mount("/dev/shm", "tmpfs", "shm", {"nosuid", "noexec", "nodev", "mode=1777", "size=1g"}));
    mounts.push_back(Mount("/dev/mqueue", "mqueue", "mqueue", {"nosuid", "noexec", "nodev"}));
    mounts.push_back(Mount("/sys", "none", "/sys", {"rbind", "nosuid", "noexec", "nodev", read_only}));
  }
  if (!task.job_dir.empty()) {
    // The job's directory read-only, its work/ read-write: a container whose
    // root is uid 0 (a queue's allow_root) owns the agent's directory too,
    // and could swap the hostfile, a log or a later attempt's bundle for a
    // link the agent would then write through.
    mounts.push_back(Mount("/rota", "bind", task.job_dir, {"rbind", "ro"}));
    mounts.push_back(Mount("/rota/work", "bind", task.job_dir + "/work", {"rbind", "rw"}));
  }
  for (const MountSpec& m : task.mounts) {
    ROTA_RETURN_IF_ERROR(NoSymbolicLinks(m.source, "mount source"));
    mounts.push_back(Mount(m.target, "bind", m.source, {"rbind", m.read_only ? read_only : "rw"}));
  }
  // A program the image lacks would fail inside the runtime, as its exit
  // code (1): it does not start, and says why.
  if (!task.args.empty()) {
    std::vector<std::string> targets;
    for (const json& m : mounts) targets.push_back(m["destination"]);
    const auto path = task.env.find("PATH");
    ROTA_RETURN_IF_ERROR(CheckOciProgram(rootfs, task.args[0], path != task.env.end() ? path->second : kDefaultPath, targets));
  }
  // GPU device nodes: the task's /dev/nvidia<g> and the shared control nodes,
  // each allowed in the devices cgroup (the default denies all but the basics).
  json devices = json::array();
  json allow = json::array({{{"allow", false}, {"access", "rwm"}}});
  std::vector<std::string> nodes;
  for (int32_t g : task.gpus) nodes.push_back("/dev/nvidia" + std::to_string(g));
  for (const char* shared : {"/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools"}) nodes.push_back(shared);
  for (const std::string& path : nodes) {
    struct stat st {};
    if (stat(path.c_str(), &st) != 0 || !S_ISCHR(st.st_mode)) continue;
    const auto major_n = static_cast<int64_t>(major(st.st_rdev));
    const auto minor_n = static_cast<int64_t>(minor(st.st_rdev));
    devices.push_back({{"path", path}, {"type", "c"}, {"major", major_n}, {"minor", minor_n}, {"fileMode", 0666},
                       {"uid", 0}, {"gid", 0}});
    allow.push_back({{"allow", true}, {"type", "c"}, {"major", major_n}, {"minor", minor_n}, {"access", "rwm"}});
  }
  json resources = {{"devices", allow}};
  if (task.memory > 0) resources["memory"] = {{"limit", static_cast<int64_t>(task.memory) * 1024 * 1024}};
  if (task.cpu > 0) resources["cpu"] = {{"quota", static_cast<int64_t>(task.cpu) * 100}, {"period", 100000}};
  if (task.pids > 0) resources["pids"] = {{"limit", task.pids}};
  json linux = {
      {"namespaces", json::array({{{"type", "pid"}}, {{"type", "ipc"}}, {{"type", "uts"}}, {{"type", "mount"}}})},
      {"devices", devices},
      {"resources", resources},
      {"cgroupsPath", "/rota/" + task.id},
      {"maskedPaths", {"/proc/acpi", "/proc/asound", "/proc/kcore", "/proc/keys", "/proc/latency_stats",
                       "/proc/timer_list", "/proc/timer_stats", "/proc/sched_debug", "/sys/firmware", "/proc/scsi"}},
      {"readonlyPaths", {"/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys", "/proc/sysrq-trigger"}}};
  if (task.rootless) {
    linux["namespaces"].push_back({{"type", "user"}});
    linux["uidMappings"] = json::array({{{"containerID", 0}, {"hostID", task.uid}, {"size", 1}}});
    linux["gidMappings"] = json::array({{{"containerID", 0}, {"hostID", task.gid}, {"size", 1}}});
    linux.erase("resources");
    linux.erase("cgroupsPath");
  }
  json config = {{"ociVersion", "1.0.2"},
                 {"process", process},
                 {"root", {{"path", rootfs}, {"readonly", true}}},
                 {"hostname", task.hostname.empty() ? task.id : task.hostname},
                 {"mounts", mounts},
                 {"linux", linux}};
  std::error_code ec;
  std::filesystem::create_directories(bundle, ec);
  if (ec) return InternalError("bundle '" + bundle + "': " + ec.message());
  const std::string text = config.dump(1);
  const int fd = OpenTaskFile(bundle + "/config.json", O_WRONLY | O_CREAT | O_TRUNC, 0600);
  const int err = fd < 0 ? errno : WriteWhole(fd, text.data(), text.size(), 0);
  if (fd >= 0) close(fd);
  if (err != 0) return InternalError("bundle '" + bundle + "': cannot write config.json: " + std::strerror(err));
  return Status::Ok();
}

}  // namespace rota::agent
