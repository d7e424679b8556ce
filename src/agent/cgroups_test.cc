#include "agent/cgroups.h"

#include <gtest/gtest.h>
#include <time.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <filesystem>

#include <fstream>
#include <sstream>

#include "agent/launcher.h"
#include "agent/test_util.h"

namespace rota::agent {
namespace {

using testing::Read;
using testing::Wait;


// The launcher puts the child in its groups before exec: a program exec'd
// directly (no shell to join first) is inside them from its first instruction.
TEST(Cgroups, ATaskJoinsItsGroupsBeforeExec) {
  auto cg = Cgroups::Detect("/sys/fs/cgroup", "rota-test/" + std::to_string(getpid()));
  if (!cg.ok()) GTEST_SKIP() << cg.status().ToString();
  auto procs = (*cg)->Create("t0", 0, 0);
  ASSERT_TRUE(procs.ok()) << procs.status().ToString();
  char tmpl[] = "/tmp/rota-cg-XXXXXX";
  const std::string dir = mkdtemp(tmpl);
  ProcessLauncher l;
  LaunchSpec spec{{"cat", "/proc/self/cgroup"}, {{"PATH", "/usr/bin:/bin"}}, dir + "/out.log", ""};
  spec.cgroup_procs = *procs;
  auto pid = l.Start(spec);
  ASSERT_TRUE(pid.ok()) << pid.status().ToString();
  EXPECT_EQ(Wait(l, *pid), 0);
  const std::string out = Read(dir + "/out.log");
  EXPECT_NE(out.find("rota-test/" + std::to_string(getpid()) + "/t0"), std::string::npos) << out;
  (*cg)->Remove("t0");
  (*cg)->Remove("");
  for (const char* c : {"memory", "cpu", "devices", "cpuacct", "pids"}) rmdir(("/sys/fs/cgroup/" + std::string(c) + "/rota-test").c_str());
  std::filesystem::remove_all(dir);
}

// Needs a writable cgroup hierarchy (root in this project's machines and CI).
TEST(Cgroups, LimitsApplyAndOomKillsAreSeen) {
  auto cg = Cgroups::Detect("/sys/fs/cgroup", "rota-test/" + std::to_string(getpid()));
  if (!cg.ok()) GTEST_SKIP() << cg.status().ToString();
  auto procs = (*cg)->Create("t1", 500, 64);
  ASSERT_TRUE(procs.ok()) << procs.status().ToString();
  char tmpl[] = "/tmp/rota-cg-XXXXXX";
  const std::string dir = mkdtemp(tmpl);
  ProcessLauncher l;
  // Reads its own cgroup membership, then grows past 64 MiB of memory.
  LaunchSpec spec{{"sh", "-c", "cat /proc/self/cgroup; x=$(head -c 300000000 /dev/zero | tr '\\0' a); echo survived"},
                  {{"PATH", "/usr/bin:/bin"}},
                  dir + "/out.log",
                  ""};
  spec.cgroup_procs = *procs;
  auto pid = l.Start(spec);
  ASSERT_TRUE(pid.ok());
  const int code = Wait(l, *pid);
  const std::string out = Read(dir + "/out.log");
  EXPECT_NE(out.find("rota-test/" + std::to_string(getpid()) + "/t1"), std::string::npos) << out;
  EXPECT_EQ(out.find("survived"), std::string::npos) << "the 64 MiB limit did not hold: " << out;
  EXPECT_NE(code, 0);
  EXPECT_TRUE((*cg)->OomKilled("t1")) << "exit " << code << ": " << out;
  (*cg)->Remove("t1");
  (*cg)->Remove("");
  for (const char* c : {"memory", "cpu", "devices", "cpuacct", "pids"}) rmdir(("/sys/fs/cgroup/" + std::string(c) + "/rota-test").c_str());
  std::filesystem::remove_all(dir);
}

// A task that spins against a half-CPU limit: its group counts its CPU
// time and the time the limit held it back (what starved-GPU detection and
// the usage records read).
TEST(Cgroups, AGroupCountsItsCpuTimeAndThrottling) {
  auto cg = Cgroups::Detect("/sys/fs/cgroup", "rota-test/" + std::to_string(getpid()));
  if (!cg.ok()) GTEST_SKIP() << cg.status().ToString();
  auto procs = (*cg)->Create("t2", 500, 256);
  ASSERT_TRUE(procs.ok()) << procs.status().ToString();
  char tmpl[] = "/tmp/rota-cg-XXXXXX";
  const std::string dir = mkdtemp(tmpl);
  ProcessLauncher l;
  LaunchSpec spec{{"timeout", "1.5", "sh", "-c", "while :; do :; done"}, {{"PATH", "/usr/bin:/bin"}}, dir + "/out.log", ""};
  spec.cgroup_procs = *procs;
  auto pid = l.Start(spec);
  ASSERT_TRUE(pid.ok());
  Wait(l, *pid);
  const Cgroups::Usage u = (*cg)->UsageOf("t2");
  // 1.5 s at half a CPU: about 750 ms of CPU, and throttled most periods.
  EXPECT_GT(u.cpu_us, 300'000);
  EXPECT_LT(u.cpu_us, 1'200'000);
  EXPECT_GT(u.throttled_us, 200'000);
  EXPECT_GE(u.memory_peak, 0);
  (*cg)->Remove("t2");
  (*cg)->Remove("");
  for (const char* c : {"memory", "cpu", "devices", "cpuacct", "pids"}) rmdir(("/sys/fs/cgroup/" + std::string(c) + "/rota-test").c_str());
  std::filesystem::remove_all(dir);
}

// A task holds at most its pids limit of processes and threads at once: a
// fork bomb takes down itself, not the node. (Its CPU time is still read
// from cpuacct, which comes before pids among the v1 hierarchies.)
TEST(Cgroups, ATaskForksNoMoreThanItsPidsLimit) {
  auto cg = Cgroups::Detect("/sys/fs/cgroup", "rota-test/" + std::to_string(getpid()));
  if (!cg.ok()) GTEST_SKIP() << cg.status().ToString();
  if (!(*cg)->limits_pids()) GTEST_SKIP() << "no writable pids controller";
  auto procs = (*cg)->Create("t4", 0, 0, {}, 16);
  ASSERT_TRUE(procs.ok()) << procs.status().ToString();
  char tmpl[] = "/tmp/rota-cg-XXXXXX";
  const std::string dir = mkdtemp(tmpl);
  ProcessLauncher l;
  // 40 sleeps at once, where 16 processes fit; then it spins a little.
  LaunchSpec spec{{"sh", "-c", "for i in $(seq 40); do sleep 2 & done 2>/dev/null; n=0; while [ $n -lt 200000 ]; do n=$((n+1)); done; wait"},
                  {{"PATH", "/usr/bin:/bin"}},
                  dir + "/out.log",
                  ""};
  spec.cgroup_procs = *procs;
  auto pid = l.Start(spec);
  ASSERT_TRUE(pid.ok());
  Wait(l, *pid);
  const std::string group = (*cg)->version() == "v2" ? "/sys/fs/cgroup/rota-test/" : "/sys/fs/cgroup/pids/rota-test/";
  const std::string t4 = group + std::to_string(getpid()) + "/t4";
  EXPECT_EQ(Read(t4 + "/pids.max"), "16\n");
  const std::string events = Read(t4 + "/pids.events");
  EXPECT_NE(events.find("max "), std::string::npos) << events;
  EXPECT_EQ(events.find("max 0"), std::string::npos) << "no fork was refused: " << events;
  EXPECT_GT((*cg)->UsageOf("t4").cpu_us, 0);
  (*cg)->Remove("t4");
  (*cg)->Remove("");
  for (const char* c : {"memory", "cpu", "devices", "cpuacct", "pids"}) rmdir(("/sys/fs/cgroup/" + std::string(c) + "/rota-test").c_str());
  rmdir("/sys/fs/cgroup/rota-test");
  std::filesystem::remove_all(dir);
}

TEST(ProcessUsage, ReadsAProcesssCpuTimeAndMemoryPeak) {
  // Spin until this process has used 50 ms of CPU by its own clock: /proc
  // counts in 10 ms ticks, and a fixed loop can finish inside one.
  volatile uint64_t spin = 0;
  timespec used{};
  do {
    for (int i = 0; i < 1'000'000; ++i) spin = spin + i;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &used);
  } while (used.tv_sec == 0 && used.tv_nsec < 50'000'000);
  const ProcessUsage u = ProcessUsageOf(getpid());
  EXPECT_GT(u.cpu_us, 0);
  EXPECT_GT(u.memory_peak, 0);
  EXPECT_EQ(ProcessUsageOf(0).cpu_us, -1);
}

}  // namespace
}  // namespace rota::agent

namespace rota::agent {
namespace {

TEST(MigCapDenyRules, LeavesATaskOnlyItsOwnInstancesCapabilities) {
  if (geteuid() != 0) GTEST_SKIP() << "mknod needs root";
  char tmpl[] = "/tmp/rota-caps-XXXXXX";
  const std::string dir = mkdtemp(tmpl);
  // Stand-ins: three capability nodes (numbers that open nothing), and the
  // driver's table saying which minors GPU 0's GPU instance 3 and its
  // compute instance 0 use; 11 is another instance's (or mig/config).
  std::filesystem::create_directories(dir + "/caps");
  for (int m : {11, 12, 13}) {
    ASSERT_EQ(mknod((dir + "/caps/nvidia-cap" + std::to_string(m)).c_str(), S_IFCHR | 0400, makedev(240, m)), 0);
  }
  std::filesystem::create_directories(dir + "/proc/gpu0/mig/gi3/ci0");
  std::ofstream(dir + "/proc/gpu0/mig/gi3/access") << "DeviceFileMinor: 12\nDeviceFileMode: 292\n";
  std::ofstream(dir + "/proc/gpu0/mig/gi3/ci0/access") << "DeviceFileMinor: 13\nDeviceFileMode: 292\n";
  EXPECT_EQ(MigCapDenyRules(dir + "/caps", dir + "/proc", 0, 3), std::vector<std::string>{"c 240:11 rwm"});
  EXPECT_EQ(MigCapDenyRules(dir + "/caps", dir + "/proc", 0, -1),
            (std::vector<std::string>{"c 240:11 rwm", "c 240:12 rwm", "c 240:13 rwm"}));
  EXPECT_TRUE(MigCapDenyRules(dir + "/no-caps", dir + "/proc", 0, 3).empty());  // no MIG on this node
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace rota::agent
