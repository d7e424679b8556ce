// Built by scripts/gpu-check.sh on a machine with the CUDA toolkit: checks that
// the NVML structs and constants agent/nvml.h mirrors (rota builds without
// nvml.h) match the real header. Prints each check; exits 1 on a mismatch.
#include <nvml.h>

#include <cstddef>
#include <cstdio>

#include "agent/nvml.h"

namespace {
int failures = 0;
void Check(const char* what, size_t ours, size_t theirs) {
  std::printf("%-4s %-48s ours %zu, nvml.h %zu\n", ours == theirs ? "ok" : "FAIL", what, ours, theirs);
  failures += ours != theirs;
}
}  // namespace

int main() {
  using A = rota::agent::NvmlApi;
  Check("sizeof nvmlMemory_t", sizeof(A::Memory), sizeof(nvmlMemory_t));
  Check("sizeof nvmlUtilization_t", sizeof(A::Utilization), sizeof(nvmlUtilization_t));
  Check("sizeof nvmlPciInfo_t", sizeof(A::PciInfo), sizeof(nvmlPciInfo_t));
  Check("offsetof nvmlPciInfo_t.domain", offsetof(A::PciInfo, domain), offsetof(nvmlPciInfo_t, domain));
  Check("offsetof nvmlPciInfo_t.busId", offsetof(A::PciInfo, bus_id), offsetof(nvmlPciInfo_t, busId));
  Check("sizeof nvmlEventData_t", sizeof(A::EventData), sizeof(nvmlEventData_t));
  Check("offsetof nvmlEventData_t.eventData", offsetof(A::EventData, data), offsetof(nvmlEventData_t, eventData));
  Check("sizeof nvmlGpuInstanceProfileInfo_v2_t", sizeof(A::GpuInstanceProfileInfoV2),
        sizeof(nvmlGpuInstanceProfileInfo_v2_t));
  Check("offsetof ..._v2_t.memorySizeMB", offsetof(A::GpuInstanceProfileInfoV2, memory_size_mb),
        offsetof(nvmlGpuInstanceProfileInfo_v2_t, memorySizeMB));
  Check("offsetof ..._v2_t.name", offsetof(A::GpuInstanceProfileInfoV2, name), offsetof(nvmlGpuInstanceProfileInfo_v2_t, name));
  Check("nvmlGpuInstanceProfileInfo_v2 (version)", sizeof(A::GpuInstanceProfileInfoV2) | (2u << 24),
        nvmlGpuInstanceProfileInfo_v2);
  Check("sizeof nvmlGpuInstanceInfo_t", sizeof(A::GpuInstanceInfo), sizeof(nvmlGpuInstanceInfo_t));
  Check("offsetof nvmlGpuInstanceInfo_t.placement", offsetof(A::GpuInstanceInfo, start),
        offsetof(nvmlGpuInstanceInfo_t, placement));
  Check("sizeof nvmlGpmSupport_t", sizeof(A::GpmSupport), sizeof(nvmlGpmSupport_t));
  Check("NVML_GPM_SUPPORT_VERSION", A::kGpmVersion, NVML_GPM_SUPPORT_VERSION);
  Check("sizeof nvmlGpmMetric_t", sizeof(A::GpmMetric), sizeof(nvmlGpmMetric_t));
  Check("offsetof nvmlGpmMetric_t.value", offsetof(A::GpmMetric, value), offsetof(nvmlGpmMetric_t, value));
  Check("offsetof nvmlGpmMetricsGet_t.metrics", offsetof(A::GpmMetricsGet, metrics), offsetof(nvmlGpmMetricsGet_t, metrics));
  Check("NVML_GPM_METRICS_GET_VERSION", A::kGpmVersion, NVML_GPM_METRICS_GET_VERSION);
  Check("NVML_GPM_METRIC_MAX", A::kGpmMetrics, NVML_GPM_METRIC_MAX);
  Check("NVML_GPM_METRIC_SM_UTIL", A::kGpmSmUtil, NVML_GPM_METRIC_SM_UTIL);
  Check("NVML_GPM_METRIC_SM_OCCUPANCY", A::kGpmSmOccupancy, NVML_GPM_METRIC_SM_OCCUPANCY);
  Check("NVML_GPM_METRIC_ANY_TENSOR_UTIL", A::kGpmAnyTensorUtil, NVML_GPM_METRIC_ANY_TENSOR_UTIL);
  Check("NVML_GPM_METRIC_DRAM_BW_UTIL", A::kGpmDramBwUtil, NVML_GPM_METRIC_DRAM_BW_UTIL);
  Check("nvmlEventTypeXidCriticalError", 0x8, nvmlEventTypeXidCriticalError);
  Check("NVML_NVLINK_MAX_LINKS", 18, NVML_NVLINK_MAX_LINKS);
  Check("NVML_TEMPERATURE_GPU", 0, NVML_TEMPERATURE_GPU);
  Check("NVML_MEMORY_ERROR_TYPE_UNCORRECTED", 1, NVML_MEMORY_ERROR_TYPE_UNCORRECTED);
  Check("NVML_VOLATILE_ECC", 0, NVML_VOLATILE_ECC);
  Check("NVML_ERROR_NOT_SUPPORTED", 3, NVML_ERROR_NOT_SUPPORTED);
  std::printf("%d mismatches\n", failures);
  return failures == 0 ? 0 : 1;
}
