#include "agent/device_filter.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

namespace rota::agent {
namespace {

TEST(DeviceFilter, ParsesV1Rules) {
  auto devs = CharDevicesOf({"c 195:1 rwm", "c 195:7 rwm", "junk"});
  ASSERT_EQ(devs.size(), 2u);
  EXPECT_EQ(devs[1].major, 195u);
  EXPECT_EQ(devs[1].minor, 7u);
}

// Which of /dev/null, /dev/zero, /dev/full a child in `dir` may open: "nzf"
// with '-' for each refused.
std::string OpensIn(const std::string& dir) {
  int out[2];
  if (pipe(out) != 0) return "?";
  const pid_t pid = fork();
  if (pid == 0) {
    const int procs = open((dir + "/cgroup.procs").c_str(), O_WRONLY);
    if (procs < 0 || write(procs, "0", 1) != 1) _exit(2);
    close(procs);
    char seen[3];
    const char* paths[] = {"/dev/null", "/dev/zero", "/dev/full"};
    for (int i = 0; i < 3; ++i) {
      const int fd = open(paths[i], O_RDONLY);
      seen[i] = fd >= 0 ? "nzf"[i] : '-';
      if (fd >= 0) close(fd);
    }
    [[maybe_unused]] ssize_t n = write(out[1], seen, 3);
    _exit(0);
  }
  close(out[1]);
  char buf[4] = {};
  [[maybe_unused]] ssize_t n = read(out[0], buf, 3);
  close(out[0]);
  waitpid(pid, nullptr, 0);
  return buf;
}

TEST(DeviceFilter, DeniesExactlyTheListedDevicesOnCgroupV2) {
  // A cgroup2 hierarchy: the unified one of a hybrid host, or the root of a v2 host.
  std::string root;
  for (const char* candidate : {"/sys/fs/cgroup/unified", "/sys/fs/cgroup"}) {
    struct stat st;
    if (stat((std::string(candidate) + "/cgroup.procs").c_str(), &st) == 0 &&
        access((std::string(candidate) + "/cgroup.procs").c_str(), W_OK) == 0 &&
        stat((std::string(candidate) + "/cgroup.controllers").c_str(), &st) == 0) {
      root = candidate;
      break;
    }
  }
  if (root.empty()) GTEST_SKIP() << "no writable cgroup2 hierarchy here";
  const std::string dir = root + "/rota-device-filter-test-" + std::to_string(getpid());
  ASSERT_EQ(mkdir(dir.c_str(), 0755), 0) << std::strerror(errno);
  Status s = AttachDeviceFilter(dir, {{1, 3}, {1, 7}});  // /dev/null and /dev/full
  if (!s.ok()) {
    rmdir(dir.c_str());
    GTEST_SKIP() << s.ToString();
  }
  EXPECT_EQ(OpensIn(dir), "-z-");
  rmdir(dir.c_str());
  // No rules: nothing attached, everything open.
  ASSERT_EQ(mkdir(dir.c_str(), 0755), 0);
  s = AttachDeviceFilter(dir, {});
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(OpensIn(dir), "nzf");
  rmdir(dir.c_str());
}

}  // namespace
}  // namespace rota::agent
