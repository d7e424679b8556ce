#include "agent/launcher.h"
#include "agent/test_util.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <sstream>

namespace rota::agent {
namespace {

using testing::Read;
using testing::Wait;


// Live (not zombie) processes whose process group is `pgid`.
int LiveInGroup(pid_t pgid) {
  int n = 0;
  for (const auto& e : std::filesystem::directory_iterator("/proc")) {
    std::ifstream in(e.path() / "stat");
    std::string line;
    if (!std::getline(in, line)) continue;
    // pid (comm) state ppid pgrp ...
    const size_t close = line.rfind(')');
    if (close == std::string::npos) continue;
    std::istringstream rest(line.substr(close + 2));
    char state;
    long ppid, pgrp;
    rest >> state >> ppid >> pgrp;
    if (pgrp == pgid && state != 'Z') ++n;
  }
  return n;
}

class LauncherTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/rota-launch-XXXXXX";
    dir = mkdtemp(tmpl);
  }
  void TearDown() override { std::filesystem::remove_all(dir); }
  std::string dir;
};

TEST_F(LauncherTest, RunsWithExactlyTheGivenEnvironmentAndLogs) {
  ProcessLauncher l;
  auto pid = l.Start({{"sh", "-c", "echo gpus=$CUDA_VISIBLE_DEVICES home=${HOME:-unset}; exit 3"},
                      {{"PATH", "/usr/bin:/bin"}, {"CUDA_VISIBLE_DEVICES", "2,3"}},
                      dir + "/t/w-0.log",
                      ""});
  ASSERT_TRUE(pid.ok()) << pid.status().ToString();
  EXPECT_EQ(Wait(l, *pid), 3);
  EXPECT_EQ(Read(dir + "/t/w-0.log"), "gpus=2,3 home=unset\n");
}

TEST_F(LauncherTest, SignalReachesTheWholeProcessGroup) {
  ProcessLauncher l;
  auto pid = l.Start({{"sh", "-c", "sleep 30 & sleep 30; echo not-reached"}, {{"PATH", "/usr/bin:/bin"}},
                      dir + "/g.log", ""});
  ASSERT_TRUE(pid.ok());
  usleep(100 * 1000);
  l.Signal(*pid, SIGTERM);
  EXPECT_EQ(Wait(l, *pid), 128 + SIGTERM);
  // The background sleep was in the same group: nothing of the group is left.
  int live = 1;
  for (int i = 0; i < 200 && live > 0; ++i) {
    usleep(5 * 1000);
    live = LiveInGroup(*pid);
  }
  EXPECT_EQ(live, 0);
}

TEST_F(LauncherTest, MissingProgramIsAnError) {
  ProcessLauncher l;
  auto pid = l.Start({{"definitely-not-a-program-xyz"}, {{"PATH", "/usr/bin:/bin"}}, dir + "/m.log", ""});
  if (pid.ok()) {
    EXPECT_EQ(Wait(l, *pid), 127);  // some libcs report exec failure as exit 127
  } else {
    EXPECT_EQ(pid.status().code(), StatusCode::kUnavailable);
  }
}

}  // namespace
}  // namespace rota::agent
