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
