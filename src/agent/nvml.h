// The NVML entry points the agent uses, as a table of function pointers:
// resolved with dlsym from libnvidia-ml.so.1 at run time (so building needs
// no CUDA), or filled by a unit test with a fake GPU. Struct layouts mirror
// nvml.h (the NVML ABI is stable; scripts/gpu-check.sh compares them with the
// real header on a GPU machine).
#pragma once

#include <string>

#include "agent/inventory.h"

namespace rota::agent {

struct NvmlApi {
  using Device = void*;
  using GpuInstance = void*;
  struct Memory {
    unsigned long long total, free, used;
  };
  struct Utilization {
    unsigned int gpu, memory;
  };
  // nvmlPciInfo_t.
  struct PciInfo {
    char bus_id_legacy[16];
    unsigned int domain, bus, device, pci_device_id, pci_subsystem_id;
    char bus_id[32];
  };
  // nvmlEventData_t (nvmlEventTypeXidCriticalError = 0x8; data is the XID).
  using EventSet = void*;
  struct EventData {
    Device device;
    unsigned long long type;
    unsigned long long data;
    unsigned int gpu_instance;
    unsigned int compute_instance;
  };
  // nvmlGpuInstanceProfileInfo_v2_t; version = sizeof | 2 << 24.
  struct GpuInstanceProfileInfoV2 {
    unsigned int version, id, is_p2p_supported, slice_count, instance_count, multiprocessor_count, copy_engine_count,
        decoder_count, encoder_count, jpeg_count, ofa_count;
    unsigned long long memory_size_mb;
    char name[96];
  };
  // nvmlGpuInstanceInfo_t; placement start and size count memory slots.
  struct GpuInstanceInfo {
    Device device;
    unsigned int id, profile_id;
    unsigned int start, size;
  };

  int (*init)() = nullptr;
  int (*count)(unsigned int*) = nullptr;
  int (*handle)(unsigned int, Device*) = nullptr;
  int (*name)(Device, char*, unsigned int) = nullptr;
  int (*memory)(Device, Memory*) = nullptr;
  int (*utilization)(Device, Utilization*) = nullptr;
  int (*temperature)(Device, int, unsigned int*) = nullptr;
  int (*power)(Device, unsigned int*) = nullptr;
  int (*driver)(char*, unsigned int) = nullptr;
  int (*ecc)(Device, int, int, unsigned long long*) = nullptr;
  int (*uuid)(Device, char*, unsigned int) = nullptr;
  int (*minor_number)(Device, unsigned int*) = nullptr;  // nvmlDeviceGetMinorNumber: N of /dev/nvidiaN
  int (*mig_mode)(Device, unsigned int*, unsigned int*) = nullptr;  // current, pending
  int (*event_set_create)(EventSet*) = nullptr;
  int (*register_events)(Device, unsigned long long, EventSet) = nullptr;
  int (*event_wait)(EventSet, EventData*, unsigned int) = nullptr;
  int (*device_index)(Device, unsigned int*) = nullptr;
  int (*pci_info)(Device, PciInfo*) = nullptr;
  int (*nvlink_state)(Device, unsigned int, int*) = nullptr;
  int (*nvlink_remote_pci)(Device, unsigned int, PciInfo*) = nullptr;
  // MIG: instance profiles, the GPU instances of a profile, and the MIG
  // devices (one per compute instance) that CUDA_VISIBLE_DEVICES names.
  int (*gi_profile_info)(Device, unsigned int, GpuInstanceProfileInfoV2*) = nullptr;
  int (*gpu_instances)(Device, unsigned int, GpuInstance*, unsigned int*) = nullptr;
  int (*gi_info)(GpuInstance, GpuInstanceInfo*) = nullptr;
  int (*max_mig_devices)(Device, unsigned int*) = nullptr;
  int (*mig_device)(Device, unsigned int, Device*) = nullptr;
  int (*mig_device_gi)(Device, unsigned int*) = nullptr;
  // Telemetry: the total-energy counter (mJ since the driver loaded; Volta
  // and later) and PCIe throughput (counter 0 = TX, 1 = RX, KB/s).
  int (*energy)(Device, unsigned long long*) = nullptr;
  int (*pcie_throughput)(Device, int, unsigned int*) = nullptr;
  // GPU Performance Monitoring (Hopper and later): a metric is computed
  // from two samples of a device. nvmlGpmSupport_t, nvmlGpmMetric_t and
  // nvmlGpmMetricsGet_t (version 1 each; metrics[] sized as nvml.h's
  // NVML_GPM_METRIC_MAX, though NVML touches only the first numMetrics).
  using GpmSample = void*;
  struct GpmSupport {
    unsigned int version, is_supported_device;
  };
  struct GpmMetric {
    unsigned int metric_id;
    int nvml_return;
    double value;
    struct {
      char *short_name, *long_name, *unit;
    } info;
  };
  static constexpr unsigned int kGpmVersion = 1;
  static constexpr int kGpmMetrics = 98;
  struct GpmMetricsGet {
    unsigned int version, num_metrics;
    GpmSample sample1, sample2;
    GpmMetric metrics[kGpmMetrics];
  };
  // NVML_GPM_METRIC_*: SM activity, SM occupancy, any tensor pipe, DRAM bandwidth (percent each).
  static constexpr unsigned int kGpmSmUtil = 2, kGpmSmOccupancy = 3, kGpmAnyTensorUtil = 5, kGpmDramBwUtil = 10;
  int (*gpm_query_support)(Device, GpmSupport*) = nullptr;
  int (*gpm_sample_alloc)(GpmSample*) = nullptr;
  int (*gpm_sample_free)(GpmSample) = nullptr;
  int (*gpm_sample_get)(Device, GpmSample) = nullptr;
  int (*gpm_metrics_get)(GpmMetricsGet*) = nullptr;
  bool ok = false;  // loaded and initialised
};

// The driver's NVML (loaded once); `ok` is false without an NVIDIA driver.
const NvmlApi& SystemNvml();

// The inventory `nvml` reports: model, memory, UUIDs, NVLink islands, and the
// MIG layouts of GPUs in MIG mode (fixed: rota uses the instances as found).
StatusOr<Inventory> DiscoverWith(const NvmlApi& nvml);

// XID event subscription: set up at the first sample; GPUs with a hardware
// XID stay unhealthy until the agent restarts.
struct XidWatch {
  bool tried = false;
  NvmlApi::EventSet set = nullptr;
  std::map<int32_t, std::string> failed;  // GPU -> "xid 79"
  std::string status = "not subscribed yet";  // "subscribed on 8 of 8 GPUs", or why not
};

// One telemetry sample per GPU from `nvml` (health from ECC, XID events and
// MIG state); utilisation -1 where NVML does not know it (a GPU in MIG mode).
std::vector<GpuSample> SampleWith(const NvmlApi& nvml, const Inventory& inv, XidWatch* xid);

// The XID subscription of SampleGpus' samples of real GPUs.
std::string XidEventStatus();

}  // namespace rota::agent
