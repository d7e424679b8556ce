#include "agent/inventory.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>

namespace rota::agent {
namespace {

TEST(ParseGpuFlag, ReadsCountModelAndMemory) {
  auto inv = ParseGpuFlag("8xH100:80Gi");
  ASSERT_TRUE(inv.ok()) << inv.status().ToString();
  EXPECT_EQ(inv->gpus, 8);
  EXPECT_EQ(inv->gpu_model, "H100");
  EXPECT_EQ(inv->gpu_memory, 80 * 1024);
  EXPECT_TRUE(inv->simulated);
  EXPECT_EQ(ParseGpuFlag("0")->gpus, 0);
}

TEST(ParseGpuFlag, RejectsMalformedFlags) {
  EXPECT_FALSE(ParseGpuFlag("H100").ok());
  EXPECT_FALSE(ParseGpuFlag("0xH100").ok());
  EXPECT_FALSE(ParseGpuFlag("99xH100").ok());
  EXPECT_FALSE(ParseGpuFlag("2x").ok());
  EXPECT_EQ(ParseGpuFlag("2xA100:lots").status().message(), "--gpus: 'lots' is not a valid memory quantity");
}

TEST(VisibleDevices, UsesUuidsWhenKnownElseIndices) {
  Inventory inv = *ParseGpuFlag("4xH100");
  EXPECT_EQ(VisibleDevices(inv, {1, 3}), "1,3");
  inv.uuids = {"GPU-a", "GPU-b", "GPU-c", "GPU-d"};
  EXPECT_EQ(VisibleDevices(inv, {1, 3}), "GPU-b,GPU-d");
  EXPECT_EQ(VisibleDevices(inv, {}), "");
}

TEST(SampleGpus, SimulatedUtilisationFollowsAllocation) {
  Inventory inv = *ParseGpuFlag("4xH100");
  auto s = SampleGpus(inv, 0b0101);
  ASSERT_EQ(s.size(), 4u);
  EXPECT_EQ(s[0].utilization_pct, 100);
  EXPECT_EQ(s[1].utilization_pct, 0);
}

}  // namespace
}  // namespace rota::agent

namespace rota::agent {
namespace {

TEST(Mps, DetectedByItsControlPipe) {
  char tmpl[] = "/tmp/rota-mps-XXXXXX";
  const std::string dir = mkdtemp(tmpl);
  setenv("CUDA_MPS_PIPE_DIRECTORY", dir.c_str(), 1);
  EXPECT_FALSE(MpsRunning());
  ASSERT_EQ(mkfifo((dir + "/control").c_str(), 0600), 0);
  EXPECT_TRUE(MpsRunning());
  unlink((dir + "/control").c_str());
  rmdir(dir.c_str());
  unsetenv("CUDA_MPS_PIPE_DIRECTORY");
}

}  // namespace
}  // namespace rota::agent

// NVML through a fake driver (agent/nvml.h's table filled with test functions):
// discovery, MIG layouts as the driver has them, and health from XID events.
#include "agent/nvml.h"

#include <cstring>

namespace rota::agent {
namespace {

struct FakeInstance {
  const char* profile;  // NVML's name, "MIG 3g.71gb"
  unsigned int profile_id, gi_id, start, size;
  const char* mig_uuid;  // null: no compute instance (CUDA cannot use it)
};

struct FakeDriver {
  bool mig = false;
  std::vector<FakeInstance> instances;
  std::vector<unsigned long long> xids;  // pending XID events on GPU 0
} fake;

int dev_tag = 0, mig_tags[8];

NvmlApi FakeNvml() {
  NvmlApi n;
  n.ok = true;
  n.count = +[](unsigned int* c) { *c = 1; return 0; };
  n.handle = +[](unsigned int i, NvmlApi::Device* d) { *d = &dev_tag; return i == 0 ? 0 : 2; };
  n.name = +[](NvmlApi::Device, char* out, unsigned int len) { std::snprintf(out, len, "NVIDIA H200"); return 0; };
  n.memory = +[](NvmlApi::Device, NvmlApi::Memory* m) { *m = {143771ULL << 20, 100ULL << 20, 143671ULL << 20}; return 0; };
  n.utilization = +[](NvmlApi::Device, NvmlApi::Utilization* u) {
    if (fake.mig) return 3;  // NVML_ERROR_NOT_SUPPORTED, as for a GPU in MIG mode
    *u = {87, 40};
    return 0;
  };
  n.uuid = +[](NvmlApi::Device d, char* out, unsigned int len) {
    for (int i = 0; i < 8; ++i) {
      if (d == &mig_tags[i]) return std::snprintf(out, len, "%s", fake.instances[i].mig_uuid), 0;
    }
    std::snprintf(out, len, "GPU-fake-0");
    return 0;
  };
  n.mig_mode = +[](NvmlApi::Device, unsigned int* current, unsigned int* pending) {
    *current = *pending = fake.mig ? 1 : 0;
    return 0;
  };
  n.gi_profile_info = +[](NvmlApi::Device, unsigned int p, NvmlApi::GpuInstanceProfileInfoV2* info) {
    static const char* kNames[] = {"MIG 1g.18gb", "MIG 2g.35gb", "MIG 3g.71gb", "MIG 4g.71gb", "MIG 7g.141gb",
                                   nullptr,       nullptr,       "MIG 1g.18gb+me"};
    if (p >= 8 || kNames[p] == nullptr) return 3;  // not supported
    if (info->version != (sizeof(*info) | (2u << 24))) return 25;  // NVML_ERROR_ARGUMENT_VERSION_MISMATCH
    info->id = p + 100;
    std::snprintf(info->name, sizeof(info->name), "%s", kNames[p]);
    return 0;
  };
  n.gpu_instances = +[](NvmlApi::Device, unsigned int profile_id, NvmlApi::GpuInstance* out, unsigned int* count) {
    unsigned int k = 0;
    for (FakeInstance& i : fake.instances) {
      if (i.profile_id + 100 == profile_id && k < *count) out[k++] = &i;
    }
    *count = k;
    return 0;
  };
  n.gi_info = +[](NvmlApi::GpuInstance gi, NvmlApi::GpuInstanceInfo* info) {
    const auto* i = static_cast<FakeInstance*>(gi);
    *info = {&dev_tag, i->gi_id, i->profile_id + 100, i->start, i->size};
    return 0;
  };
  n.max_mig_devices = +[](NvmlApi::Device, unsigned int* c) { *c = 7; return 0; };
  n.mig_device = +[](NvmlApi::Device, unsigned int i, NvmlApi::Device* d) {
    // MIG devices exist only for instances with a compute instance.
    if (i >= fake.instances.size() || fake.instances[i].mig_uuid == nullptr) return 6;  // not found
    *d = &mig_tags[i];
    return 0;
  };
  n.mig_device_gi = +[](NvmlApi::Device d, unsigned int* gi) {
    for (int i = 0; i < 8; ++i) {
      if (d == &mig_tags[i]) return *gi = fake.instances[i].gi_id, 0;
    }
    return 2;
  };
  n.event_set_create = +[](NvmlApi::EventSet* s) { *s = &dev_tag; return 0; };
  n.register_events = +[](NvmlApi::Device, unsigned long long, NvmlApi::EventSet) { return 0; };
  n.event_wait = +[](NvmlApi::EventSet, NvmlApi::EventData* e, unsigned int) {
    if (fake.xids.empty()) return 10;  // timeout
    *e = {&dev_tag, 0x8ULL, fake.xids.back(), 0, 0};
    fake.xids.pop_back();
    return 0;
  };
  n.device_index = +[](NvmlApi::Device, unsigned int* i) { *i = 0; return 0; };
  return n;
}

TEST(Nvml, DiscoversModelMemoryAndUuid) {
  fake = {};
  auto inv = DiscoverWith(FakeNvml());
  ASSERT_TRUE(inv.ok()) << inv.status().ToString();
  EXPECT_FALSE(inv->simulated);
  EXPECT_EQ(inv->gpu_model, "H200");
  EXPECT_EQ(inv->gpu_memory, 143771);
  EXPECT_EQ(inv->uuids, std::vector<std::string>{"GPU-fake-0"});
  EXPECT_TRUE(inv->mig.empty());
  EXPECT_FALSE(inv->mig_fixed);
}

TEST(Nvml, ReadsTheDriversMigLayoutAndMigDevices) {
  XidWatch watch;
  fake = {.mig = true,
          .instances = {{"3g", 2, 1, 0, 4, "MIG-aaa"}, {"2g", 1, 5, 4, 2, "MIG-bbb"}, {"1g", 0, 9, 6, 1, nullptr}}};
  auto inv = DiscoverWith(FakeNvml());
  ASSERT_TRUE(inv.ok()) << inv.status().ToString();
  // The 1g instance has no compute instance: CUDA cannot use it, so it is not offered.
  EXPECT_EQ(inv->mig.at(0), "3g.71gb@0,2g.35gb@4");
  EXPECT_TRUE(inv->mig_fixed);
  EXPECT_EQ(MigVisibleDevice(*inv, 0, "3g.71gb", 0), "MIG-aaa");
  EXPECT_EQ(MigVisibleDevice(*inv, 0, "2g.35gb", 4), "MIG-bbb");
  EXPECT_EQ(MigVisibleDevice(*inv, 0, "1g.18gb", 6), "");
  EXPECT_EQ(MigVisibleDevice(*inv, 0, "4g.71gb", 0), "");  // another profile at that slot: not this instance
  const GpuSample s = SampleWith(FakeNvml(), *inv, &watch)[0];
  EXPECT_TRUE(s.healthy) << s.health_reason;
  EXPECT_EQ(s.utilization_pct, -1);  // NVML has no utilisation for a GPU in MIG mode
}

TEST(Nvml, AGpuInstanceSplitIntoComputeInstancesIsNotHandedOut) {
  XidWatch watch;
  // Two MIG devices (compute instances) in GPU instance 1.
  fake = {.mig = true, .instances = {{"3g", 2, 1, 0, 4, "MIG-aaa"}, {"3g", 2, 1, 0, 4, "MIG-bbb"}}};
  auto inv = DiscoverWith(FakeNvml());
  ASSERT_TRUE(inv.ok());
  ASSERT_TRUE(inv->mig_unusable.contains(0));
  EXPECT_NE(inv->mig_unusable.at(0).find("split into several compute instances"), std::string::npos);
  EXPECT_FALSE(SampleWith(FakeNvml(), *inv, &watch)[0].healthy);
}

TEST(Nvml, AMigLayoutRotaCannotModelMakesTheGpuUnusable) {
  XidWatch watch;
  fake = {.mig = true, .instances = {{"1g+me", 7, 1, 0, 1, "MIG-ccc"}}};
  auto inv = DiscoverWith(FakeNvml());
  ASSERT_TRUE(inv.ok());
  // Registered in MIG mode with no instances: never handed out whole.
  EXPECT_EQ(inv->mig.at(0), "");
  EXPECT_TRUE(inv->mig_fixed);
  ASSERT_TRUE(inv->mig_unusable.contains(0));
  EXPECT_NE(inv->mig_unusable.at(0).find("1g.18gb+me@0 is not a profile rota knows"), std::string::npos)
      << inv->mig_unusable.at(0);
  const GpuSample s = SampleWith(FakeNvml(), *inv, &watch)[0];
  EXPECT_FALSE(s.healthy);
  EXPECT_EQ(s.health_reason, inv->mig_unusable.at(0));
}

TEST(Nvml, MigModeChangedSinceStartAndHardwareXidsMakeAGpuUnhealthy) {
  XidWatch watch;
  fake = {};
  Inventory inv = *DiscoverWith(FakeNvml());
  GpuSample s = SampleWith(FakeNvml(), inv, &watch)[0];
  EXPECT_TRUE(s.healthy) << s.health_reason;
  EXPECT_EQ(s.utilization_pct, 87);
  EXPECT_EQ(s.memory_used, 143671);
  EXPECT_EQ(watch.status, "subscribed on 1 of 1 GPUs");
  fake.mig = true;  // switched on (and the GPU reset) behind the agent's back
  s = SampleWith(FakeNvml(), inv, &watch)[0];
  EXPECT_FALSE(s.healthy);
  EXPECT_EQ(s.health_reason, "mig mode turned on since the agent started");
  fake.mig = false;
  fake.xids = {13};  // an application error (graphics engine exception): not the hardware
  EXPECT_TRUE(SampleWith(FakeNvml(), inv, &watch)[0].healthy);
  fake.xids = {79};  // fallen off the bus
  s = SampleWith(FakeNvml(), inv, &watch)[0];
  EXPECT_FALSE(s.healthy);
  EXPECT_EQ(s.health_reason, "xid 79");
}

}  // namespace
}  // namespace rota::agent
