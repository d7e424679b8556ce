#include "agent/inventory.h"

#include "core/mig.h"

#include <dlfcn.h>
#include <sys/stat.h>
#include <unistd.h>

#include <charconv>
#include <vector>
#include <algorithm>
#include <tuple>
#include <set>
#include <numeric>
#include <map>
#include <fstream>
#include <mutex>

namespace rota::agent {

StatusOr<Inventory> ParseGpuFlag(const std::string& flag) {
  Inventory inv;
  inv.source = "declared (--gpus " + flag + ")";
  if (flag == "0") return inv;
  const size_t x = flag.find('x');
  if (x == std::string::npos || x == 0) {
    return InvalidArgumentError("--gpus: expected COUNTxMODEL[:MEMORY], e.g. 8xH100:80Gi, got '" + flag + "'");
  }
  int32_t count = 0;
  auto [p, ec] = std::from_chars(flag.data(), flag.data() + x, count);
  if (ec != std::errc() || p != flag.data() + x || count < 1 || count > kMaxGpusPerNode) {
    return InvalidArgumentError("--gpus: count must be 1.." + std::to_string(kMaxGpusPerNode) + ", got '" +
                                flag.substr(0, x) + "'");
  }
  std::string rest = flag.substr(x + 1);
  const size_t colon = rest.find(':');
  inv.gpu_model = rest.substr(0, colon);
  if (inv.gpu_model.empty()) return InvalidArgumentError("--gpus: missing GPU model in '" + flag + "'");
  if (colon != std::string::npos) {
    auto mem = ParseMemoryMiB(rest.substr(colon + 1));
    if (!mem.ok()) return InvalidArgumentError("--gpus: " + std::string(mem.status().message()));
    inv.gpu_memory = *mem;
  }
  inv.gpus = count;
  return inv;
}

Status DeclareMig(Inventory* inv, const std::string& layout, int32_t gpus) {
  if (!inv->simulated) {
    return FailedPreconditionError("--mig: only a declared (--gpus) inventory is put in MIG mode by flag; with NVML, "
                                   "rota does not read or change MIG layouts yet");
  }
  const MigGeometry* geo = MigGeometryFor(inv->gpu_model, inv->gpu_memory);
  if (geo == nullptr) {
    return InvalidArgumentError("--mig: rota knows no MIG geometry for " + inv->gpu_model +
                                " (MIG GPUs: A100 40/80GB, H100 80GB, H200 141GB; give the memory, e.g. 4xA100:80Gi)");
  }
  auto parsed = ParseMigLayout(*geo, layout);
  if (!parsed.ok()) return InvalidArgumentError("--mig: " + std::string(parsed.status().message()));
  if (gpus < 0) gpus = inv->gpus;
  if (gpus > inv->gpus) {
    return InvalidArgumentError("--mig-gpus: " + std::to_string(gpus) + " exceeds the " + std::to_string(inv->gpus) +
                                " GPUs declared");
  }
  for (int32_t g = 0; g < gpus; ++g) inv->mig[g] = FormatMigLayout(*geo, *parsed);
  return Status::Ok();
}

namespace {

// The few NVML entry points used, resolved with dlsym.
struct Nvml {
  using Device = void*;
  struct Memory {
    unsigned long long total, free, used;
  };
  struct Utilization {
    unsigned int gpu, memory;
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
  int (*mig_mode)(Device, unsigned int*, unsigned int*) = nullptr;  // current, pending
  // XID events (nvml.h: nvmlEventData_t; nvmlEventTypeXidCriticalError = 0x8).
  using EventSet = void*;
  struct EventData {
    Device device;
    unsigned long long type;
    unsigned long long data;  // the XID
    unsigned int gpu_instance;
    unsigned int compute_instance;
  };
  int (*event_set_create)(EventSet*) = nullptr;
  int (*register_events)(Device, unsigned long long, EventSet) = nullptr;
  int (*event_wait)(EventSet, EventData*, unsigned int) = nullptr;
  int (*device_index)(Device, unsigned int*) = nullptr;
  // NVLink topology (nvml.h: nvmlPciInfo_t; NVML_NVLINK_MAX_LINKS = 18).
  struct PciInfo {
    char bus_id_legacy[16];
    unsigned int domain, bus, device, pci_device_id, pci_subsystem_id;
    char bus_id[32];
  };
  int (*pci_info)(Device, PciInfo*) = nullptr;
  int (*nvlink_state)(Device, unsigned int, int*) = nullptr;
  int (*nvlink_remote_pci)(Device, unsigned int, PciInfo*) = nullptr;
  bool ok = false;
};

const Nvml& LoadNvml() {
  static Nvml nvml;
  static std::once_flag once;
  std::call_once(once, [] {
    void* lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) return;
    auto sym = [&](const char* n) { return dlsym(lib, n); };
    nvml.init = reinterpret_cast<int (*)()>(sym("nvmlInit_v2"));
    nvml.count = reinterpret_cast<int (*)(unsigned int*)>(sym("nvmlDeviceGetCount_v2"));
    nvml.handle = reinterpret_cast<int (*)(unsigned int, Nvml::Device*)>(sym("nvmlDeviceGetHandleByIndex_v2"));
    nvml.name = reinterpret_cast<int (*)(Nvml::Device, char*, unsigned int)>(sym("nvmlDeviceGetName"));
    nvml.memory = reinterpret_cast<int (*)(Nvml::Device, Nvml::Memory*)>(sym("nvmlDeviceGetMemoryInfo"));
    nvml.utilization = reinterpret_cast<int (*)(Nvml::Device, Nvml::Utilization*)>(sym("nvmlDeviceGetUtilizationRates"));
    nvml.temperature = reinterpret_cast<int (*)(Nvml::Device, int, unsigned int*)>(sym("nvmlDeviceGetTemperature"));
    nvml.power = reinterpret_cast<int (*)(Nvml::Device, unsigned int*)>(sym("nvmlDeviceGetPowerUsage"));
    nvml.driver = reinterpret_cast<int (*)(char*, unsigned int)>(sym("nvmlSystemGetDriverVersion"));
    nvml.ecc = reinterpret_cast<int (*)(Nvml::Device, int, int, unsigned long long*)>(sym("nvmlDeviceGetTotalEccErrors"));
    nvml.uuid = reinterpret_cast<int (*)(Nvml::Device, char*, unsigned int)>(sym("nvmlDeviceGetUUID"));
    nvml.mig_mode = reinterpret_cast<int (*)(Nvml::Device, unsigned int*, unsigned int*)>(sym("nvmlDeviceGetMigMode"));
    nvml.event_set_create = reinterpret_cast<int (*)(Nvml::EventSet*)>(sym("nvmlEventSetCreate"));
    nvml.register_events =
        reinterpret_cast<int (*)(Nvml::Device, unsigned long long, Nvml::EventSet)>(sym("nvmlDeviceRegisterEvents"));
    nvml.event_wait = reinterpret_cast<int (*)(Nvml::EventSet, Nvml::EventData*, unsigned int)>(sym("nvmlEventSetWait_v2"));
    nvml.device_index = reinterpret_cast<int (*)(Nvml::Device, unsigned int*)>(sym("nvmlDeviceGetIndex"));
    nvml.pci_info = reinterpret_cast<int (*)(Nvml::Device, Nvml::PciInfo*)>(sym("nvmlDeviceGetPciInfo_v3"));
    nvml.nvlink_state = reinterpret_cast<int (*)(Nvml::Device, unsigned int, int*)>(sym("nvmlDeviceGetNvLinkState"));
    nvml.nvlink_remote_pci =
        reinterpret_cast<int (*)(Nvml::Device, unsigned int, Nvml::PciInfo*)>(sym("nvmlDeviceGetNvLinkRemotePciInfo_v2"));
    nvml.ok = nvml.init && nvml.count && nvml.handle && nvml.name && nvml.memory && nvml.init() == 0;
  });
  return nvml;
}

// "NVIDIA H100 80GB HBM3" -> "H100".
std::string ShortModel(std::string name) {
  if (name.rfind("NVIDIA ", 0) == 0) name = name.substr(7);
  const size_t space = name.find(' ');
  return space == std::string::npos ? name : name.substr(0, space);
}

}  // namespace

namespace {

// NVLink islands from NVML: GPUs joined by active links (directly, or through
// NVSwitches: a link to anything that is not one of our GPUs) form a
// component. rota's model wants equal, contiguous islands; anything else is
// reported as one island. Untested on real GPUs here (none lent).
int32_t NvlinkIslands(const Nvml& nvml, int32_t gpus) {
  if (!nvml.pci_info || !nvml.nvlink_state || !nvml.nvlink_remote_pci || gpus <= 1) return 1;
  std::vector<std::tuple<unsigned, unsigned, unsigned>> pci(gpus);
  std::vector<Nvml::Device> devs(gpus);
  for (int32_t g = 0; g < gpus; ++g) {
    Nvml::PciInfo info{};
    if (nvml.handle(static_cast<unsigned int>(g), &devs[g]) != 0 || nvml.pci_info(devs[g], &info) != 0) return 1;
    pci[g] = {info.domain, info.bus, info.device};
  }
  std::vector<int32_t> parent(gpus + 1);  // gpus = "a switch"
  std::iota(parent.begin(), parent.end(), 0);
  auto find = [&](int32_t x) {
    while (parent[x] != x) x = parent[x] = parent[parent[x]];
    return x;
  };
  bool any_link = false;
  for (int32_t g = 0; g < gpus; ++g) {
    for (unsigned int link = 0; link < 18; ++link) {
      int active = 0;
      Nvml::PciInfo remote{};
      if (nvml.nvlink_state(devs[g], link, &active) != 0 || active == 0) continue;
      if (nvml.nvlink_remote_pci(devs[g], link, &remote) != 0) continue;
      any_link = true;
      const auto key = std::make_tuple(remote.domain, remote.bus, remote.device);
      const auto it = std::find(pci.begin(), pci.end(), key);
      const int32_t peer = it == pci.end() ? gpus : static_cast<int32_t>(it - pci.begin());
      parent[find(g)] = find(peer);
    }
  }
  if (!any_link) return 1;
  // Equal contiguous groups: GPU g's component must be the one of g's group.
  std::set<int32_t> roots;
  for (int32_t g = 0; g < gpus; ++g) roots.insert(find(g));
  const int32_t islands = static_cast<int32_t>(roots.size());
  if (gpus % islands != 0) return 1;
  const int32_t per = gpus / islands;
  for (int32_t g = 0; g < gpus; ++g) {
    if (find(g) != find(g / per * per)) return 1;
  }
  return islands;
}

}  // namespace

StatusOr<Inventory> DiscoverNvml() {
  const Nvml& nvml = LoadNvml();
  if (!nvml.ok) return NotFoundError("no NVIDIA driver (libnvidia-ml.so.1 did not load or initialise)");
  unsigned int n = 0;
  if (nvml.count(&n) != 0 || n == 0) return NotFoundError("NVML reports no GPUs");
  Inventory inv;
  inv.simulated = false;
  inv.gpus = static_cast<int32_t>(std::min<unsigned int>(n, kMaxGpusPerNode));
  Nvml::Device dev = nullptr;
  nvml.handle(0, &dev);
  char name[96] = {};
  nvml.name(dev, name, sizeof(name));
  inv.gpu_model = ShortModel(name);
  Nvml::Memory mem{};
  nvml.memory(dev, &mem);
  inv.gpu_memory = static_cast<MemoryMiB>(mem.total >> 20);
  char driver[80] = "unknown";
  if (nvml.driver) nvml.driver(driver, sizeof(driver));
  inv.source = std::string("nvml (") + name + ", driver " + driver + ")";
  inv.nvlink_islands = NvlinkIslands(nvml, inv.gpus);
  for (int32_t g = 0; g < inv.gpus && nvml.uuid; ++g) {
    Nvml::Device d = nullptr;
    char id[96] = {};
    if (nvml.handle(static_cast<unsigned int>(g), &d) != 0 || nvml.uuid(d, id, sizeof(id)) != 0) {
      inv.uuids.clear();  // all or nothing: indices then
      break;
    }
    inv.uuids.push_back(id);
  }
  return inv;
}

namespace {

// XIDs that mean the hardware (not the application) failed, as DCGM's
// health checks treat them: double-bit ECC, page retirement and remapping
// failures, fallen off the bus, uncontained memory errors, and so on.
bool HardwareXid(unsigned long long xid) {
  for (unsigned long long bad : {48ULL, 61ULL, 62ULL, 63ULL, 64ULL, 74ULL, 79ULL, 92ULL, 94ULL, 95ULL, 119ULL, 120ULL}) {
    if (xid == bad) return true;
  }
  return false;
}

// Drains pending XID events; a GPU with a hardware XID stays unhealthy until
// the agent restarts (its reason names the XID). Untested on real GPUs here:
// no device was lent to this project's machines.
const std::map<int32_t, std::string>& XidFailures(const Nvml& nvml, int32_t gpus) {
  static std::map<int32_t, std::string> failed;
  static Nvml::EventSet set = nullptr;
  static bool tried = false;
  if (!tried) {
    tried = true;
    if (nvml.event_set_create && nvml.register_events && nvml.event_wait && nvml.device_index &&
        nvml.event_set_create(&set) == 0) {
      for (int32_t g = 0; g < gpus; ++g) {
        Nvml::Device dev = nullptr;
        if (nvml.handle(static_cast<unsigned int>(g), &dev) == 0) nvml.register_events(dev, 0x8ULL, set);
      }
    } else {
      set = nullptr;
    }
  }
  if (set == nullptr) return failed;
  Nvml::EventData e{};
  for (int i = 0; i < 64 && nvml.event_wait(set, &e, 1) == 0; ++i) {
    unsigned int index = 0;
    if (e.type != 0x8ULL || !HardwareXid(e.data) || nvml.device_index(e.device, &index) != 0) continue;
    failed[static_cast<int32_t>(index)] = "xid " + std::to_string(e.data);
  }
  return failed;
}

}  // namespace

std::vector<GpuSample> SampleGpus(const Inventory& inv, uint64_t busy_mask) {
  std::vector<GpuSample> out;
  const Nvml& nvml = LoadNvml();
  static const std::map<int32_t, std::string> kNone;
  const auto& xid = !inv.simulated && nvml.ok ? XidFailures(nvml, inv.gpus) : kNone;
  for (int32_t g = 0; g < inv.gpus; ++g) {
    GpuSample s;
    s.index = g;
    if (!inv.simulated && nvml.ok) {
      Nvml::Device dev = nullptr;
      if (nvml.handle(static_cast<unsigned int>(g), &dev) == 0) {
        Nvml::Utilization u{};
        if (nvml.utilization && nvml.utilization(dev, &u) == 0) s.utilization_pct = static_cast<int32_t>(u.gpu);
        Nvml::Memory m{};
        if (nvml.memory(dev, &m) == 0) s.memory_used = static_cast<MemoryMiB>(m.used >> 20);
        unsigned int t = 0;
        if (nvml.temperature && nvml.temperature(dev, 0, &t) == 0) s.temperature_c = static_cast<int32_t>(t);
        unsigned int mw = 0;
        if (nvml.power && nvml.power(dev, &mw) == 0) s.power_w = static_cast<int32_t>(mw / 1000);
        // Uncorrected (1) volatile (0) ECC errors since boot mean the GPU is not to be trusted.
        unsigned long long uncorrected = 0;
        if (nvml.ecc && nvml.ecc(dev, 1, 0, &uncorrected) == 0 && uncorrected > 0) {
          s.healthy = false;
          s.health_reason = "ecc: " + std::to_string(uncorrected) + " uncorrected errors";
        }
        // A GPU in MIG mode cannot run whole-GPU work, and rota does not read
        // MIG layouts through NVML yet: it takes no work (declare MIG GPUs).
        unsigned int current = 0, pending = 0;
        if (nvml.mig_mode && nvml.mig_mode(dev, &current, &pending) == 0 && current == 1) {
          s.healthy = false;
          s.health_reason = "mig mode on (rota does not read MIG layouts through NVML yet)";
        }
        if (auto it = xid.find(g); it != xid.end()) {
          s.healthy = false;
          s.health_reason = it->second;
        }
      }
    } else {
      const bool busy = (busy_mask >> g) & 1;
      s.utilization_pct = busy ? 100 : 0;
      s.temperature_c = busy ? 65 : 35;
      s.power_w = busy ? 300 : 60;
    }
    out.push_back(s);
  }
  return out;
}

std::string VisibleDevices(const Inventory& inv, const std::vector<int32_t>& gpus) {
  std::string out;
  for (int32_t g : gpus) {
    if (!out.empty()) out += ",";
    out += static_cast<size_t>(g) < inv.uuids.size() ? inv.uuids[g] : std::to_string(g);
  }
  return out;
}

bool MpsRunning() {
  const char* dir = getenv("CUDA_MPS_PIPE_DIRECTORY");
  const std::string control = std::string(dir != nullptr && *dir ? dir : "/tmp/nvidia-mps") + "/control";
  struct stat st {};
  return stat(control.c_str(), &st) == 0 && S_ISFIFO(st.st_mode);
}

MilliCpu HostCpu() {
  const long n = sysconf(_SC_NPROCESSORS_ONLN);
  return static_cast<MilliCpu>(n > 0 ? n : 1) * 1000;
}

MemoryMiB HostMemory() {
  std::ifstream in("/proc/meminfo");
  std::string key;
  int64_t kib = 0;
  std::string unit;
  while (in >> key >> kib >> unit) {
    if (key == "MemTotal:") return kib / 1024;
  }
  return 1024;
}

}  // namespace rota::agent
