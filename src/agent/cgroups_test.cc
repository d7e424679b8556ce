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


// Runs `argv` in the group whose cgroup.procs files are `procs`, to its
// end: its exit code and its output.
struct Ran {
  int code;
  std::string out;
};
Ran RunIn(const std::vector<std::string>& procs, std::vector<std::string> argv) {
  char tmpl[] = "/tmp/rota-cg-XXXXXX";
  const std::string dir = mkdtemp(tmpl);
  ProcessLauncher l;
  LaunchSpec spec{std::move(argv), {{"PATH", "/usr/bin:/bin"}}, dir + "/out.log", ""};
  spec.cgroup_procs = procs;
  auto pid = l.Start(spec);
  EXPECT_TRUE(pid.ok()) << pid.status().ToString();
  Ran ran{pid.ok() ? Wait(l, *pid) : -1, Read(dir + "/out.log")};
  std::filesystem::remove_all(dir);
  return ran;
}

// The test's groups, and the prefix above them, gone (each hierarchy's).
void RemoveTestGroups(Cgroups& cg, const std::string& name) {
  cg.Remove(name);
  cg.Remove("");
  for (const char* c : {"memory", "cpu", "devices", "cpuacct", "pids"}) rmdir(("/sys/fs/cgroup/" + std::string(c) + "/rota-test").c_str());
  rmdir("/sys/fs/cgroup/rota-test");
}

// The launcher puts the child in its groups before exec: a program exec'd
// directly (no shell to join first) is inside them from its first instruction.
TEST(Cgroups, ATaskJoinsItsGroupsBeforeExec) {
  auto cg = Cgroups::Detect("/sys/fs/cgroup", "rota-test/" + std::to_string(getpid()));
  if (!cg.ok()) GTEST_SKIP() << cg.status().ToString();
  auto procs = (*cg)->Create("t0", 0, 0);
  ASSERT_TRUE(procs.ok()) << procs.status().ToString();
  const Ran ran = RunIn(*procs, {"cat", "/proc/self/cgroup"});
  EXPECT_EQ(ran.code, 0);
  EXPECT_NE(ran.out.find("rota-test/" + std::to_string(getpid()) + "/t0"), std::string::npos) << ran.out;
  RemoveTestGroups(**cg, "t0");
}

// Needs a writable cgroup hierarchy (root in this project's machines and CI).
TEST(Cgroups, LimitsApplyAndOomKillsAreSeen) {
  auto cg = Cgroups::Detect("/sys/fs/cgroup", "rota-test/" + std::to_string(getpid()));
  if (!cg.ok()) GTEST_SKIP() << cg.status().ToString();
  auto procs = (*cg)->Create("t1", 500, 64);
  ASSERT_TRUE(procs.ok()) << procs.status().ToString();
  // Reads its own cgroup membership, then grows past 64 MiB of memory.
  const Ran ran = RunIn(*procs, {"sh", "-c", "cat /proc/self/cgroup; x=$(head -c 300000000 /dev/zero | tr '\\0' a); echo survived"});
  const int code = ran.code;
  const std::string& out = ran.out;
  EXPECT_NE(out.find("rota-test/" + std::to_string(getpid()) + "/t1"), std::string::npos) << out;
  EXPECT_EQ(out.find("survived"), std::string::npos) << "the 64 MiB limit did not hold: " << out;
  EXPECT_NE(code, 0);
  EXPECT_TRUE((*cg)->OomKilled("t1")) << "exit " << code << ": " << out;
  RemoveTestGroups(**cg, "t1");
}

// A task that spins against a half-CPU limit: its group counts its CPU
// time and the time the limit held it back (what starved-GPU detection and
// the usage records read).
TEST(Cgroups, AGroupCountsItsCpuTimeAndThrottling) {
  auto cg = Cgroups::Detect("/sys/fs/cgroup", "rota-test/" + std::to_string(getpid()));
  if (!cg.ok()) GTEST_SKIP() << cg.status().ToString();
  auto procs = (*cg)->Create("t2", 500, 256);
  ASSERT_TRUE(procs.ok()) << procs.status().ToString();
  RunIn(*procs, {"timeout", "1.5", "sh", "-c", "while :; do :; done"});
  const Cgroups::Usage u = (*cg)->UsageOf("t2");
  // 1.5 s at half a CPU: about 750 ms of CPU, and throttled most periods.
  EXPECT_GT(u.cpu_us, 300'000);
  EXPECT_LT(u.cpu_us, 1'200'000);
  EXPECT_GT(u.throttled_us, 200'000);
  EXPECT_GE(u.memory_peak, 0);
  RemoveTestGroups(**cg, "t2");
}

// A task holds at most its pids limit of processes and threads at once: a
// fork bomb takes down itself, not the node. (Its CPU time is still read
// from cpuacct, with a pids hierarchy beside it on v1.)
TEST(Cgroups, ATaskForksNoMoreThanItsPidsLimit) {
  auto cg = Cgroups::Detect("/sys/fs/cgroup", "rota-test/" + std::to_string(getpid()));
  if (!cg.ok()) GTEST_SKIP() << cg.status().ToString();
  if (!(*cg)->limits_pids()) GTEST_SKIP() << "no writable pids controller";
  auto procs = (*cg)->Create("t4", 0, 0, {}, 16);
  ASSERT_TRUE(procs.ok()) << procs.status().ToString();
  // 40 sleeps at once, where 16 processes fit.
  RunIn(*procs, {"sh", "-c", "for i in $(seq 40); do sleep 2 & done 2>/dev/null; wait"});
  const std::string group = (*cg)->version() == "v2" ? "/sys/fs/cgroup/rota-test/" : "/sys/fs/cgroup/pids/rota-test/";
  const std::string t4 = group + std::to_string(getpid()) + "/t4";
  EXPECT_EQ(Read(t4 + "/pids.max"), "16\n");
  const std::string events = Read(t4 + "/pids.events");
  EXPECT_NE(events.find("max "), std::string::npos) << events;
  EXPECT_EQ(events.find("max 0"), std::string::npos) << "no fork was refused: " << events;
  EXPECT_GT((*cg)->UsageOf("t4").cpu_us, 0);
  RemoveTestGroups(**cg, "t4");
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
