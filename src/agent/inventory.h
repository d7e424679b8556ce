// GPU inventory of this machine: discovered through NVML (libnvidia-ml.so.1,
// loaded at run time, so building needs no CUDA), or declared with
// `--gpus 8xH100:80Gi` where no NVIDIA driver is present. A declared
// inventory is reported as simulated everywhere it is shown.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "api/agent_protocol.h"
#include "base/status.h"
#include "core/node.h"

namespace rota::agent {

// One GPU's telemetry sample: exactly what a heartbeat reports (the
// protocol's type). utilization_pct is -1 where NVML knows none (a GPU in
// MIG mode).
using GpuSample = api::GpuTelemetry;

struct Inventory {
  std::string gpu_model;
  int32_t gpus = 0;
  MemoryMiB gpu_memory = 0;
  int32_t nvlink_islands = 1;
  bool simulated = true;
  std::string source;  // "nvml (driver 550.54)" or "declared (--gpus 8xH100:80Gi)"
  std::vector<std::string> uuids;  // per GPU index, from NVML; empty when simulated
  std::vector<int32_t> minors;     // per GPU index: N of its /dev/nvidiaN (empty: N = the index)
  std::map<int32_t, std::string> mig;  // GPUs in MIG mode: index -> layout (NodeSpec::mig)
  // From NVML: the layouts are the driver's (rota does not re-partition them,
  // NodeSpec::mig_fixed); each instance's profile and MIG device UUID by GPU
  // and start slot.
  struct MigDevice {
    std::string profile;  // "3g.40gb"
    std::string uuid;     // "MIG-..."
    int32_t gpu_instance = -1;  // its GPU instance id (names its /dev/nvidia-caps capability)
  };
  bool mig_fixed = false;
  std::map<int32_t, std::map<int32_t, MigDevice>> mig_devices;
  // GPUs in MIG mode whose layout rota cannot use, and why (they take no work).
  std::map<int32_t, std::string> mig_unusable;
};

// Puts the first `gpus` GPUs (-1 = all) of a declared inventory in MIG mode
// with `layout` ("3g.40gb,3g.40gb"; "" = no instances yet), checked against
// the model's MIG geometry (`--mig LAYOUT [--mig-gpus N]`).
Status DeclareMig(Inventory* inv, const std::string& layout, int32_t gpus);

// The device list for CUDA_VISIBLE_DEVICES / NVIDIA_VISIBLE_DEVICES: GPU UUIDs
// where NVML gave them (stable across reboots and renumbering), else indices.
std::string VisibleDevices(const Inventory& inv, const std::vector<int32_t>& gpus);
// The device minors (N of /dev/nvidiaN, and of capabilities' gpuN) of GPU indices.
std::vector<int32_t> DeviceMinors(const Inventory& inv, const std::vector<int32_t>& gpus);
// The device that CUDA_VISIBLE_DEVICES names for the MIG instance at slot
// `start` of GPU `gpu`: its MIG UUID from NVML, or, for a declared inventory,
// "MIG-simulated-<gpu>:<profile>@<start>"; empty if NVML has no instance of
// that profile there.
std::string MigVisibleDevice(const Inventory& inv, int32_t gpu, const std::string& profile, int32_t start);

// "8xH100:80Gi", "4xA100", "0" (no GPUs).
StatusOr<Inventory> ParseGpuFlag(const std::string& flag);

// NVML, if the driver library loads and reports at least one GPU; NotFound otherwise.
StatusOr<Inventory> DiscoverNvml();

// Per-GPU telemetry: from NVML for real GPUs; for a simulated inventory,
// utilisation follows whether a task holds the GPU, so dashboards show the
// allocation honestly labelled as simulated.
std::vector<GpuSample> SampleGpus(const Inventory& inv, uint64_t busy_mask);

// Whether an NVIDIA MPS control daemon is up: its control pipe exists in
// $CUDA_MPS_PIPE_DIRECTORY (default /tmp/nvidia-mps).
bool MpsRunning();

// This machine's CPU count (in milli-CPU) and memory.
MilliCpu HostCpu();
MemoryMiB HostMemory();

}  // namespace rota::agent
