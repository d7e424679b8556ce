// OCI runtime: runs a task in a container with runc or crun (Debian
// packages). The agent writes a bundle (config.json) per task attempt and
// starts `runc run` in the foreground as the task's process, so signals,
// logs and exit codes work as for a plain process. The container gets its
// root filesystem read-only, the job's data mounts, the node's NVIDIA device
// nodes for exactly its GPUs (where the node has them), its CPU and memory
// limits, and the host network (ranks meet at MASTER_ADDR:MASTER_PORT).
//
// Hybrid cgroup hosts (v1 controllers plus a cgroup2 mount): runc works as
// is; crun refuses, so it runs in a private mount namespace with the cgroup2
// mounts unmounted (`unshare -m`).
#pragma once

#include <sys/stat.h>
#include <sys/types.h>

#include <map>
#include <string>
#include <vector>

#include "base/quantity.h"
#include "base/status.h"
#include "core/job.h"

namespace rota::agent {

struct OciTask {
  std::string id;      // container id, unique on the node
  std::string rootfs;  // as the job gave it: a rootfs directory, or a directory holding rootfs/
  std::vector<std::string> args;
  std::map<std::string, std::string> env;
  std::vector<MountSpec> mounts;  // the job's data mounts
  // Host directory bound read-write at /rota inside (hostfile, checkpoint file).
  std::string job_dir;
  std::vector<int32_t> gpus;  // device minors: /dev/nvidia<g> of these, when the node has them
  MilliCpu cpu = 0;
  MemoryMiB memory = 0;
  int64_t pids = 0;  // the processes and threads it may hold at once (0: no limit)
  std::string hostname;
  // The process's identity inside (the job's user: the runtime keeps
  // no_new_privs and drops every capability but the three it lists).
  uint32_t uid = 0;
  uint32_t gid = 0;
  std::vector<uint32_t> additional_gids;
  // A rootless container (an agent that is not root): a user namespace in
  // which root is `uid`/`gid` outside (the agent's own account) and nothing
  // else is mapped; /sys bound rather than mounted, no cgroup mount and no
  // cgroup limits (an unprivileged runtime cannot set them), the GPUs'
  // device nodes bound by the runtime.
  bool rootless = false;
  // Read-only mounts read-only all the way down ("rro": the runtime's
  // mount_setattr, Linux 5.12): else a mount below a read-only one (a
  // data mount's own submounts, /sys's when rootless) stays writable.
  bool recursive_read_only = false;
};

// Whether this kernel can make a mount read-only with everything below it
// (mount_setattr(2), Linux 5.12): OciTask::recursive_read_only.
bool KernelHasRecursiveReadOnly();

// The root filesystem directory `rootfs` names (itself, or its rootfs/), or
// NotFound naming the path.
StatusOr<std::string> ResolveRootfs(const std::string& rootfs);

// `path` resolved inside the tree whose root is `root_fd`, as a process
// chrooted there would see it (symlinks followed, ".." stopping at the root,
// never leaving the tree), as far as it exists: `path` is the resolved path
// ("" for the root), with the part that does not exist appended as given;
// `error` is 0 when all of it exists (`st` then describes it), else why not
// (ENOENT, ENOTDIR, ELOOP, ENOSYS without openat2).
struct InRoot {
  std::string path;
  int error = 0;
  struct stat st {};
};
InRoot ResolveInRoot(int root_fd, const std::string& path);

// Whether the container's process can be `program` (its args[0]): an
// absolute or relative path must be an executable file in the image, a bare
// name must be one in a directory of `path_env` (as the runtime looks it
// up). What lies at or below one of `mount_targets` (the container's
// mounts), or through a symlink into one, is not judged. NotFound or
// FailedPrecondition naming the program and the image, else Ok.
Status CheckOciProgram(const std::string& rootfs, const std::string& program, const std::string& path_env,
                       const std::vector<std::string>& mount_targets);

// Writes `bundle`/config.json for `task` (creating `bundle`); refused if the
// image lacks its program (CheckOciProgram).
//
// A data mount's source, or the rootfs, may not go through a symbolic link
// (FailedPrecondition naming it): the server checked the path as written
// against allowed_mounts, and a link (`/scratch/alice/h -> /`, made by an
// earlier job) would reach elsewhere. (The runtime mounts the path a moment
// later, by name: a directory swapped for a link in between is not caught.
// A descriptor cannot be handed over instead: the container's mount
// namespace refuses a bind from the agent's.)
Status WriteOciBundle(const std::string& bundle, const OciTask& task);

// The runtime binary: "runc" or "crun" by name, or "auto" (crun if on PATH,
// else runc: crun starts a container in half runc's time; but runc first
// for an agent that is not root on a hybrid cgroup host, where crun cannot
// run rootless).
// NotFound if it is not installed.
StatusOr<std::string> FindOciRuntime(const std::string& name);

// argv that runs the bundle in the foreground; `root` is the runtime's
// state directory ("" = its default).
std::vector<std::string> OciRunArgv(const std::string& runtime, const std::string& bundle, const std::string& id,
                                    const std::string& root = "");
// The mounts the runtime must not see (LaunchSpec::hide_mounts): for crun
// on a hybrid cgroup host, the cgroup2 mounts (it refuses to run beside
// them; runc needs nothing).
std::vector<std::string> OciHiddenMounts(const std::string& runtime);
// Where the runtime keeps its containers' state when run without --root
// ($XDG_RUNTIME_DIR/<runtime>, but /run/runc for root's runc, and
// /run/<runtime> for root without it); "" if unknown. The agent names the
// directory (--root) instead: this is for records written before it did.
std::string OciStateRoot(const std::string& runtime);
// The state directory the agent names to the runtime (--root): left to
// the runtime it would follow XDG_RUNTIME_DIR (crun does, even as root).
// Root's: /run/<runtime>; an agent that is not root: <its state dir>/oci
// (made, 0700), or without one OciStateRoot.
std::string OciStateDirectory(const std::string& runtime, const std::string& agent_state_dir);
// Whether a container named `id` may exist: false only when the runtime's
// state directory (`root`, or its default) is known and holds no entry of
// that name.
bool OciContainerMayExist(const std::string& runtime, const std::string& id, const std::string& root = "");
// argv that force-stops and removes the container (after its runtime process was killed).
std::vector<std::string> OciDeleteArgv(const std::string& runtime, const std::string& id, const std::string& root = "");

// Runs argv with its output discarded, in a process group of its own; its
// exit status: -1 if it could not start, or if it ran past `timeout_ms`
// (then it and its process group are killed, and it is reaped if it goes
// within a second). Before, it waited for good: a runtime stuck on a cgroup
// whose processes will not die held the agent, its lock and heartbeats with
// it, until the node's lease fenced every task.
inline constexpr int kRunQuietTimeoutMs = 5'000;
int RunQuiet(const std::vector<std::string>& argv, int timeout_ms = kRunQuietTimeoutMs);
// RunQuiet's halves, for a caller that does not wait: SpawnQuiet starts it
// (its pid, or -1); PollQuiet says its exit status once it has ended (-1
// while it runs; reaped then).
pid_t SpawnQuiet(const std::vector<std::string>& argv);
int PollQuiet(pid_t pid);

// cgroup2 mount points while cgroup v1 controllers are mounted too (none when not hybrid).
std::vector<std::string> HybridCgroup2Mounts();

}  // namespace rota::agent
