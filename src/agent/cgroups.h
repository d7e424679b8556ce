// Cgroups: CPU and memory limits for tasks, on cgroup v2 where it holds the
// cpu and memory controllers, else on the v1 hierarchies (hybrid hosts mount
// cgroup2 without controllers beside v1, as on this project's machines).
//
// A task joins its group before it runs a single instruction of its own: the
// launcher writes it into the groups' cgroup.procs between fork and exec
// (LaunchSpec::cgroup_procs).
//
// Thread-safety: none; one owner (the agent, under its lock).
#pragma once

#include <memory>
#include <string>
#include <sys/types.h>
#include <vector>

#include "base/quantity.h"
#include "base/status.h"

namespace rota::agent {

// A process's own CPU time (its reaped children included) and its memory
// high-water mark, from /proc: for tasks without a cgroup.
struct ProcessUsage {
  int64_t cpu_us = -1;
  MemoryMiB memory_peak = -1;
};
ProcessUsage ProcessUsageOf(pid_t pid);

class Cgroups {
 public:
  // Finds a usable hierarchy under `root` ("/sys/fs/cgroup"); NotFound if
  // there is none we can write (then tasks run without limits, and say so).
  static StatusOr<std::unique_ptr<Cgroups>> Detect(const std::string& root, const std::string& prefix);

  std::string version() const { return v2_ ? "v2" : "v1"; }
  // True where the device controller confines tasks to their own GPUs: the
  // v1 `devices` hierarchy, or on v2 an eBPF device filter per group
  // (device_filter.h) where the kernel lets the agent attach one.
  bool isolates_devices() const { return devices_; }

  // Creates the group `name` with the limits (0 = no limit; `pids`: the
  // processes and threads it may hold at once, where the pids controller is
  // there) and, where devices are isolated, denies the device rules in
  // `deny` ("c 195:3 rwm"). Returns the cgroup.procs files a process must
  // write its pid to.
  StatusOr<std::vector<std::string>> Create(const std::string& name, MilliCpu cpu, MemoryMiB memory,
                                            const std::vector<std::string>& deny = {}, int64_t pids = 0);
  // Whether Create can hold a group's processes to `pids` (the v2 pids
  // controller, or the v1 pids hierarchy, writable).
  bool limits_pids() const { return pids_; }
  // The names of the groups under the agent's prefix.
  std::vector<std::string> Groups() const;
  // The cgroup.procs files of `path` (absolute under each hierarchy's root,
  // e.g. a container's "/rota/ID").
  std::vector<std::string> ProcsOf(const std::string& path) const;
  // The pids in the group (any of its hierarchies); empty if it is gone.
  std::vector<pid_t> Pids(const std::string& name) const;
  // The group's CPU time, throttled time and memory peak so far (-1 where
  // the hierarchy does not say: memory.peak needs Linux 5.19 on v2).
  struct Usage {
    int64_t cpu_us = -1;
    int64_t throttled_us = -1;
    MemoryMiB memory_peak = -1;
  };
  Usage UsageOf(const std::string& name) const;
  // True if the kernel OOM-killed a process of the group.
  bool OomKilled(const std::string& name) const;
  // Removes the group (after its processes have exited); "" removes the
  // agent's own prefix directory if it is empty.
  void Remove(const std::string& name);

 private:
  std::vector<std::string> Dirs(const std::string& name) const;
  // v1: the group `name`'s directory in one controller's hierarchy.
  std::string V1Dir(const char* controller, const std::string& name) const;

  bool v2_ = false;
  bool devices_ = false;
  bool cpuacct_ = false;  // v1: cpuacct is a hierarchy apart from cpu's
  bool pids_ = false;     // the pids controller (v1: its hierarchy)
  std::string root_;    // v2: the cgroup2 root; v1: the directory holding cpu/ and memory/
  std::string prefix_;  // e.g. "rota/node-0"
};

// Device rules denying every GPU node `dev_dir`/nvidia<N> whose N is not
// in `allowed` (the control nodes nvidiactl, nvidia-uvm stay open: they
// reach no GPU by themselves).
std::vector<std::string> GpuDenyRules(const std::string& dev_dir, const std::vector<int32_t>& allowed);

// Device rules denying every MIG capability node in `caps_dir`
// (/dev/nvidia-caps/nvidia-cap<M>) but those of the task's own MIG instance:
// GPU `gpu`'s GPU instance `gpu_instance` and its compute instances, whose
// minors the driver lists under `proc_caps`
// (/proc/driver/nvidia/capabilities/gpu<G>/mig/gi<I>[/ci<C>]/access,
// "DeviceFileMinor: M"). gpu_instance < 0 (not a MIG task) denies them all,
// the MIG config and monitor capabilities included.
std::vector<std::string> MigCapDenyRules(const std::string& caps_dir, const std::string& proc_caps, int32_t gpu,
                                         int32_t gpu_instance);


}  // namespace rota::agent
