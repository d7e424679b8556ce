#include "agent/inventory.h"

#include "agent/nvml.h"

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
#include <type_traits>

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
                                   "the agent reads the MIG layouts the driver has (nvidia-smi mig)");
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

const NvmlApi& LoadNvml() {
  static NvmlApi nvml;
  static std::once_flag once;
  std::call_once(once, [] {
    void* lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) return;
    // Each entry point by name, typed after the member it fills.
    auto sym = [&](auto& fn, const char* name) { fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(lib, name)); };
    sym(nvml.init, "nvmlInit_v2");
    sym(nvml.count, "nvmlDeviceGetCount_v2");
    sym(nvml.handle, "nvmlDeviceGetHandleByIndex_v2");
    sym(nvml.name, "nvmlDeviceGetName");
    sym(nvml.memory, "nvmlDeviceGetMemoryInfo");
    sym(nvml.utilization, "nvmlDeviceGetUtilizationRates");
    sym(nvml.temperature, "nvmlDeviceGetTemperature");
    sym(nvml.power, "nvmlDeviceGetPowerUsage");
    sym(nvml.driver, "nvmlSystemGetDriverVersion");
    sym(nvml.ecc, "nvmlDeviceGetTotalEccErrors");
    sym(nvml.uuid, "nvmlDeviceGetUUID");
    sym(nvml.minor_number, "nvmlDeviceGetMinorNumber");
    sym(nvml.mig_mode, "nvmlDeviceGetMigMode");
    sym(nvml.event_set_create, "nvmlEventSetCreate");
    sym(nvml.register_events, "nvmlDeviceRegisterEvents");
    sym(nvml.event_wait, "nvmlEventSetWait_v2");
    sym(nvml.device_index, "nvmlDeviceGetIndex");
    sym(nvml.pci_info, "nvmlDeviceGetPciInfo_v3");
    sym(nvml.nvlink_state, "nvmlDeviceGetNvLinkState");
    sym(nvml.nvlink_remote_pci, "nvmlDeviceGetNvLinkRemotePciInfo_v2");
    sym(nvml.gi_profile_info, "nvmlDeviceGetGpuInstanceProfileInfoV");
    sym(nvml.gpu_instances, "nvmlDeviceGetGpuInstances");
    sym(nvml.gi_info, "nvmlGpuInstanceGetInfo");
    sym(nvml.max_mig_devices, "nvmlDeviceGetMaxMigDeviceCount");
    sym(nvml.mig_device, "nvmlDeviceGetMigDeviceHandleByIndex");
    sym(nvml.mig_device_gi, "nvmlDeviceGetGpuInstanceId");
    sym(nvml.energy, "nvmlDeviceGetTotalEnergyConsumption");
    sym(nvml.pcie_throughput, "nvmlDeviceGetPcieThroughput");
    sym(nvml.gpm_query_support, "nvmlGpmQueryDeviceSupport");
    sym(nvml.gpm_sample_alloc, "nvmlGpmSampleAlloc");
    sym(nvml.gpm_sample_free, "nvmlGpmSampleFree");
    sym(nvml.gpm_sample_get, "nvmlGpmSampleGet");
    sym(nvml.gpm_metrics_get, "nvmlGpmMetricsGet");
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

// NVLink islands from NVML: GPUs joined by active links (directly, or through
// NVSwitches: a link to anything that is not one of our GPUs) form a
// component. rota's model wants equal, contiguous islands; anything else is
// reported as one island.
int32_t NvlinkIslands(const NvmlApi& nvml, int32_t gpus) {
  if (!nvml.pci_info || !nvml.nvlink_state || !nvml.nvlink_remote_pci || gpus <= 1) return 1;
  std::vector<std::tuple<unsigned, unsigned, unsigned>> pci(gpus);
  std::vector<NvmlApi::Device> devs(gpus);
  for (int32_t g = 0; g < gpus; ++g) {
    NvmlApi::PciInfo info{};
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
    for (unsigned int link = 0; link < 18; ++link) {  // NVML_NVLINK_MAX_LINKS
      int active = 0;
      NvmlApi::PciInfo remote{};
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

// The MIG layout of a GPU in MIG mode, as the driver has it: every GPU
// instance with at least one compute instance (CUDA sees only those), by
// profile name and placement; and each instance's MIG device UUID. An
// instance rota's geometry does not know (a media-extension "+me" profile,
// an unknown model) makes the GPU unusable rather than half-described.
Status ReadMigLayout(const NvmlApi& nvml, NvmlApi::Device dev, const std::string& model, MemoryMiB memory,
                     std::string* layout_text, std::map<int32_t, Inventory::MigDevice>* devices) {
  if (!nvml.gi_profile_info || !nvml.gpu_instances || !nvml.gi_info || !nvml.max_mig_devices || !nvml.mig_device ||
      !nvml.mig_device_gi || !nvml.uuid) {
    return UnimplementedError("this driver's NVML lacks the MIG instance calls");
  }
  const MigGeometry* geo = MigGeometryFor(model, memory);
  if (geo == nullptr) return UnimplementedError("rota knows no MIG geometry for " + model);
  // GPU instance id -> MIG device UUID. rota hands out whole GPU instances:
  // one split into several compute instances is not one it can give a task.
  std::map<unsigned int, std::string> uuid_by_gi;
  unsigned int max = 0;
  if (nvml.max_mig_devices(dev, &max) != 0) return UnavailableError("cannot count MIG devices");
  for (unsigned int i = 0; i < max; ++i) {
    NvmlApi::Device mig = nullptr;
    unsigned int gi = 0;
    char id[96] = {};
    if (nvml.mig_device(dev, i, &mig) != 0) continue;  // a free index
    if (nvml.mig_device_gi(mig, &gi) != 0 || nvml.uuid(mig, id, sizeof(id)) != 0) continue;
    if (!uuid_by_gi.emplace(gi, id).second) {
      return UnimplementedError("GPU instance " + std::to_string(gi) +
                                " is split into several compute instances; rota gives tasks whole GPU instances");
    }
  }
  MigLayout layout;
  for (unsigned int p = 0; p < 32; ++p) {
    NvmlApi::GpuInstanceProfileInfoV2 info{};
    info.version = static_cast<unsigned int>(sizeof(info)) | (2u << 24);
    if (nvml.gi_profile_info(dev, p, &info) != 0) continue;  // not offered on this GPU
    NvmlApi::GpuInstance gis[kMigSlots] = {};
    unsigned int n = kMigSlots;
    if (nvml.gpu_instances(dev, info.id, gis, &n) != 0) continue;
    std::string name = info.name;
    if (name.rfind("MIG ", 0) == 0) name = name.substr(4);
    for (unsigned int k = 0; k < n && k < kMigSlots; ++k) {
      NvmlApi::GpuInstanceInfo gi{};
      if (nvml.gi_info(gis[k], &gi) != 0) continue;
      auto uuid = uuid_by_gi.find(gi.id);
      if (uuid == uuid_by_gi.end()) continue;  // no compute instance: CUDA cannot use it
      const int32_t profile = geo->ProfileIndex(name);
      if (profile < 0) {
        return UnimplementedError("MIG instance " + name + "@" + std::to_string(gi.start) + " is not a profile rota knows on " +
                                  std::string(geo->name));
      }
      layout.push_back({static_cast<int8_t>(profile), static_cast<int8_t>(gi.start)});
      (*devices)[static_cast<int32_t>(gi.start)] = {name, uuid->second, static_cast<int32_t>(gi.id)};
    }
  }
  std::sort(layout.begin(), layout.end(), [](const MigInstance& a, const MigInstance& b) { return a.start < b.start; });
  if (Status s = ValidateMigLayout(*geo, layout); !s.ok()) {
    return UnimplementedError("the driver's MIG layout is not one rota can model: " + std::string(s.message()));
  }
  *layout_text = FormatMigLayout(*geo, layout);
  return Status::Ok();
}

}  // namespace

const NvmlApi& SystemNvml() { return LoadNvml(); }

StatusOr<Inventory> DiscoverWith(const NvmlApi& nvml) {
  if (!nvml.ok) return NotFoundError("no NVIDIA driver (libnvidia-ml.so.1 did not load or initialise)");
  unsigned int n = 0;
  if (nvml.count(&n) != 0 || n == 0) return NotFoundError("NVML reports no GPUs");
  Inventory inv;
  inv.simulated = false;
  inv.gpus = static_cast<int32_t>(std::min<unsigned int>(n, kMaxGpusPerNode));
  NvmlApi::Device dev = nullptr;
  nvml.handle(0, &dev);
  char name[96] = {};
  nvml.name(dev, name, sizeof(name));
  inv.gpu_model = ShortModel(name);
  NvmlApi::Memory mem{};
  nvml.memory(dev, &mem);
  inv.gpu_memory = static_cast<MemoryMiB>(mem.total >> 20);
  char driver[80] = "unknown";
  if (nvml.driver) nvml.driver(driver, sizeof(driver));
  inv.source = std::string("nvml (") + name + ", driver " + driver + ")";
  inv.nvlink_islands = NvlinkIslands(nvml, inv.gpus);
  for (int32_t g = 0; g < inv.gpus && nvml.uuid; ++g) {
    NvmlApi::Device d = nullptr;
    char id[96] = {};
    if (nvml.handle(static_cast<unsigned int>(g), &d) != 0 || nvml.uuid(d, id, sizeof(id)) != 0) {
      inv.uuids.clear();  // all or nothing: indices then
      break;
    }
    inv.uuids.push_back(id);
  }
  // Device nodes are numbered by minor, which need not follow NVML's index.
  for (int32_t g = 0; g < inv.gpus && nvml.minor_number; ++g) {
    NvmlApi::Device d = nullptr;
    unsigned int minor = 0;
    if (nvml.handle(static_cast<unsigned int>(g), &d) != 0 || nvml.minor_number(d, &minor) != 0) {
      inv.minors.clear();  // all or nothing: minor = index then
      break;
    }
    inv.minors.push_back(static_cast<int32_t>(minor));
  }
  // GPUs in MIG mode: their layouts as the driver has them.
  for (int32_t g = 0; g < inv.gpus && nvml.mig_mode; ++g) {
    NvmlApi::Device d = nullptr;
    unsigned int current = 0, pending = 0;
    if (nvml.handle(static_cast<unsigned int>(g), &d) != 0 || nvml.mig_mode(d, &current, &pending) != 0 ||
        current != 1) {
      continue;
    }
    std::string layout;
    std::map<int32_t, Inventory::MigDevice> devices;
    if (Status s = ReadMigLayout(nvml, d, inv.gpu_model, inv.gpu_memory, &layout, &devices); !s.ok()) {
      inv.mig_unusable[g] = "mig mode on, layout unusable: " + std::string(s.message());
      // Registered in MIG mode with no instances, so it is never handed out
      // whole (where rota knows the model's MIG geometry; else only unhealthy).
      if (MigGeometryFor(inv.gpu_model, inv.gpu_memory) != nullptr) {
        inv.mig[g] = "";
        inv.mig_fixed = true;
      }
      continue;
    }
    inv.mig[g] = layout;
    inv.mig_devices[g] = std::move(devices);
    inv.mig_fixed = true;
  }
  return inv;
}

StatusOr<Inventory> DiscoverNvml() { return DiscoverWith(LoadNvml()); }

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

// Drains pending XID events into `w`.
void PollXids(const NvmlApi& nvml, int32_t gpus, XidWatch* w) {
  if (!w->tried) {
    w->tried = true;
    if (!nvml.event_set_create || !nvml.register_events || !nvml.event_wait || !nvml.device_index) {
      w->status = "unavailable: this driver's NVML lacks the event calls";
    } else if (const int rc = nvml.event_set_create(&w->set); rc != 0) {
      w->set = nullptr;
      w->status = "unavailable: nvmlEventSetCreate returned " + std::to_string(rc);
    } else {
      int32_t subscribed = 0;
      std::string refused;
      for (int32_t g = 0; g < gpus; ++g) {
        NvmlApi::Device dev = nullptr;
        if (nvml.handle(static_cast<unsigned int>(g), &dev) != 0) continue;
        const int reg = nvml.register_events(dev, 0x8ULL, w->set);
        if (reg == 0) ++subscribed;
        else refused += " GPU " + std::to_string(g) + ": NVML error " + std::to_string(reg) + (reg == 3 ? " (not supported)" : "");
      }
      w->status = "subscribed on " + std::to_string(subscribed) + " of " + std::to_string(gpus) + " GPUs" +
                  (refused.empty() ? "" : ";" + refused);
    }
  }
  if (w->set == nullptr) return;
  NvmlApi::EventData e{};
  for (int i = 0; i < 64 && nvml.event_wait(w->set, &e, 1) == 0; ++i) {
    unsigned int index = 0;
    if (e.type != 0x8ULL || !HardwareXid(e.data) || nvml.device_index(e.device, &index) != 0) continue;
    w->failed[static_cast<int32_t>(index)] = "xid " + std::to_string(e.data);
  }
}

std::mutex system_xid_mu;
XidWatch system_xid;  // SampleGpus' subscription (the agent samples from one thread)

}  // namespace

std::string XidEventStatus() {
  std::lock_guard<std::mutex> lock(system_xid_mu);
  return system_xid.status;
}

std::vector<GpuSample> SampleWith(const NvmlApi& nvml, const Inventory& inv, XidWatch* watch) {
  std::vector<GpuSample> out;
  PollXids(nvml, inv.gpus, watch);
  const auto& xid = watch->failed;
  for (int32_t g = 0; g < inv.gpus; ++g) {
    GpuSample s;
    s.index = g;
    NvmlApi::Device dev = nullptr;
    if (nvml.handle(static_cast<unsigned int>(g), &dev) == 0) {
      NvmlApi::Utilization u{};
      s.utilization_pct = nvml.utilization && nvml.utilization(dev, &u) == 0 ? static_cast<int32_t>(u.gpu) : -1;
      NvmlApi::Memory m{};
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
      // MIG mode as registered: a GPU switched into MIG mode since (after a
      // reset) or one whose layout rota cannot use takes no work.
      unsigned int current = 0, pending = 0;
      if (auto bad = inv.mig_unusable.find(g); bad != inv.mig_unusable.end()) {
        s.healthy = false;
        s.health_reason = bad->second;
      } else if (nvml.mig_mode && nvml.mig_mode(dev, &current, &pending) == 0 && (current == 1) != inv.mig.contains(g)) {
        s.healthy = false;
        s.health_reason = std::string("mig mode turned ") + (current == 1 ? "on" : "off") + " since the agent started";
      }
      if (auto it = xid.find(g); it != xid.end()) {
        s.healthy = false;
        s.health_reason = it->second;
      }
    }
    out.push_back(s);
  }
  return out;
}

std::vector<GpuSample> SampleGpus(const Inventory& inv, uint64_t busy_mask) {
  if (!inv.simulated) {
    const NvmlApi& nvml = LoadNvml();
    if (nvml.ok) {
      std::lock_guard<std::mutex> lock(system_xid_mu);
      return SampleWith(nvml, inv, &system_xid);
    }
  }
  std::vector<GpuSample> out;
  for (int32_t g = 0; g < inv.gpus; ++g) {
    GpuSample s;
    s.index = g;
    const bool busy = (busy_mask >> g) & 1;
    s.utilization_pct = busy ? 100 : 0;
    s.temperature_c = busy ? 65 : 35;
    s.power_w = busy ? 300 : 60;
    out.push_back(s);
  }
  return out;
}

std::string MigVisibleDevice(const Inventory& inv, int32_t gpu, const std::string& profile, int32_t start) {
  if (inv.simulated) return "MIG-simulated-" + std::to_string(gpu) + ":" + profile + "@" + std::to_string(start);
  auto g = inv.mig_devices.find(gpu);
  if (g == inv.mig_devices.end()) return "";
  auto d = g->second.find(start);
  return d == g->second.end() || d->second.profile != profile ? "" : d->second.uuid;
}

std::vector<int32_t> DeviceMinors(const Inventory& inv, const std::vector<int32_t>& gpus) {
  std::vector<int32_t> out;
  for (int32_t g : gpus) out.push_back(static_cast<size_t>(g) < inv.minors.size() ? inv.minors[g] : g);
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
