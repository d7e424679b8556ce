// DeviceFilter: the cgroup v2 device controller, which is an eBPF program
// (BPF_PROG_TYPE_CGROUP_DEVICE) attached to a cgroup, as runc and crun do it.
// On v2 hosts the agent attaches one to every task's group that denies the
// character devices of the GPUs that are not the task's; everything else
// stays as it was (the v1 `devices` controller does the same on hybrid
// hosts, see cgroups.h).
//
// Thread-safety: stateless.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "base/status.h"

namespace rota::agent {

// A character device by its numbers.
struct CharDevice {
  uint32_t major = 0;
  uint32_t minor = 0;
};

// Parses rules of the v1 form "c MAJOR:MINOR rwm" (what GpuDenyRules gives).
std::vector<CharDevice> CharDevicesOf(const std::vector<std::string>& rules);

// Loads a program denying `deny` (and allowing every other device) and
// attaches it to the cgroup v2 directory `cgroup_dir` (nothing to deny:
// nothing attached). Unavailable if the kernel refuses (no bpf(), no
// CAP_BPF / CAP_SYS_ADMIN).
Status AttachDeviceFilter(const std::string& cgroup_dir, const std::vector<CharDevice>& deny);

}  // namespace rota::agent
