#include "agent/launcher.h"
#include "agent/test_util.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <fcntl.h>
#include <sys/mount.h>
#include <sys/stat.h>

#include <chrono>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

namespace rota::agent {
namespace {

using testing::Read;
using testing::Wait;


// A child stopped after it took its user's identity, before its exec
// (another process of that user may stop it then: it is the user's), is
// killed and told as not started at once; one that execs is waited for as
// before. Before, the supervisor (and the agent, its lock held, its
// heartbeats with it) waited on it for good: a user could have every task
// of the node fenced.
TEST(Launcher, AChildStoppedBeforeItsExecIsKilledNotWaitedFor) {
  auto start = [](bool stop) {
    int fds[2];
    EXPECT_EQ(pipe2(fds, O_CLOEXEC), 0);
    const pid_t child = fork();
    if (child == 0) {
      close(fds[0]);
      if (stop) raise(SIGSTOP);  // (as if stopped by another process before its exec)
      execl("/bin/true", "true", static_cast<char*>(nullptr));
      _exit(127);
    }
    close(fds[1]);
    return std::pair{child, fds[0]};
  };
  {
    const auto [child, fd] = start(true);
    const auto began = std::chrono::steady_clock::now();
    EXPECT_NE(WaitForExec(fd, child).find("stopped before its program ran"), std::string::npos);
    EXPECT_LT(std::chrono::steady_clock::now() - began, std::chrono::seconds(2));
    int status = 0;
    ASSERT_EQ(waitpid(child, &status, 0), child);
    EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << status;
    close(fd);
  }
  {
    const auto [child, fd] = start(false);
    EXPECT_EQ(WaitForExec(fd, child), "");
    int status = 0;
    ASSERT_EQ(waitpid(child, &status, 0), child);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
    close(fd);
  }
}

// A report pipe that cannot be read tells why, and the child, whose start
// is not known, is killed rather than left running unwatched. Before, it
// read "cannot join its cgroup: Success" (a zeroed report).
TEST(Launcher, AFailedReadOfTheReportPipeSaysWhyAndKillsTheChild) {
  const pid_t child = fork();
  if (child == 0) {
    pause();  // (as if its exec hung)
    _exit(0);
  }
  int fds[2];
  ASSERT_EQ(pipe2(fds, O_CLOEXEC), 0);
  close(fds[0]);
  close(fds[1]);  // (fds[0] is closed: the read fails with EBADF)
  const std::string why = WaitForExec(fds[0], child);
  EXPECT_NE(why.find("learn whether its program started"), std::string::npos) << why;
  EXPECT_NE(why.find(std::strerror(EBADF)), std::string::npos) << why;
  EXPECT_EQ(why.find("Success"), std::string::npos) << why;
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << status;
}

// What the agent writes into a task's log before (or instead of) starting
// it is not every local user's to read: a log it creates is 0600.
TEST(Launcher, ANoteInATasksLogIsNotEveryUsersToRead) {
  char tmpl[] = "/tmp/rota-note-XXXXXX";
  const std::string dir = mkdtemp(tmpl);
  const std::string log = dir + "/main-0.log";
  ASSERT_EQ(AppendToTaskFile(log, "rota: cannot start '/home/a/private/tool'\n"), 0);
  struct stat st {};
  ASSERT_EQ(stat(log.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  std::filesystem::remove_all(dir);
}

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

namespace rota::agent {
namespace {

using testing::kShim;
using testing::Read;
using testing::Wait;

class SupervisedTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/rota-shim-XXXXXX";
    dir = mkdtemp(tmpl);
  }
  void TearDown() override { std::filesystem::remove_all(dir); }
  LaunchSpec Spec(std::vector<std::string> argv) {
    LaunchSpec s;
    s.argv = std::move(argv);
    s.env = {{"PATH", "/usr/bin:/bin"}};
    s.log_path = dir + "/t.log";
    s.exit_file = dir + "/t.exit";
    return s;
  }
  // Sets the lease's deadline `ms` from now (negative: in the past).
  void Lease(int ms) {
    std::ofstream(dir + "/lease.tmp") << BootTimeNs() + static_cast<int64_t>(ms) * 1'000'000 << "\n";
    ASSERT_EQ(rename((dir + "/lease.tmp").c_str(), (dir + "/lease").c_str()), 0);
  }
  std::string dir;
};

TEST_F(SupervisedTest, TheSupervisorRecordsTheExitAndExitsWithIt) {
  ProcessLauncher l(kShim);
  auto t = l.Launch(Spec({"sh", "-c", "echo $$; exit 7"}));
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_NE(t->shim, 0);
  EXPECT_NE(t->pid, t->shim);
  EXPECT_EQ(Wait(l, t->shim), 7);
  EXPECT_EQ(ReadExitFile(dir + "/t.exit"), 7);
  EXPECT_EQ(Read(dir + "/t.log"), std::to_string(t->pid) + "\n");  // the task is the supervised pid
}

// The agent makes room for the exit status before the task starts; the
// supervisor writes over it in place (no new block: a disk that filled
// meanwhile still takes it), and the room reads as no status yet.
TEST_F(SupervisedTest, TheExitStatusIsWrittenOverTheRoomMadeForIt) {
  ProcessLauncher l(kShim);
  const std::string exit_file = dir + "/t.exit";
  LaunchSpec s = Spec({"sh", "-c", "exit 42"});
  std::string room;
  int read_before = 0;
  struct stat before {};
  s.recorded = [&](pid_t) {
    if (PrepareExitFile(exit_file) != 0 || stat(exit_file.c_str(), &before) != 0) return false;
    room = Read(exit_file);
    read_before = ReadExitFile(exit_file);
    return true;
  };
  auto t = l.Launch(s);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  // Reserved and empty (an earlier agent reads no status too), or where the
  // file system cannot reserve, written.
  EXPECT_TRUE((room.empty() && before.st_blocks > 0) || room == "-------\n") << room << " " << before.st_blocks;
  EXPECT_EQ(read_before, -1);  // room, no status
  EXPECT_EQ(Wait(l, t->shim), 42);
  EXPECT_EQ(ReadExitFile(exit_file), 42);
  struct stat after {};
  ASSERT_EQ(stat(exit_file.c_str(), &after), 0);
  EXPECT_EQ(after.st_ino, before.st_ino);  // the same file, written over
  EXPECT_EQ(after.st_size, 8);
  // A directory that cannot take it: the errno.
  EXPECT_EQ(PrepareExitFile(dir + "/no/such/dir/t.exit"), ENOENT);
}

// A status is read only whole: digits, then a space or a newline.
TEST_F(SupervisedTest, AnExitStatusIsReadOnlyWhole) {
  const std::string f = dir + "/e.exit";
  for (const auto& [text, code] : std::vector<std::pair<std::string, int>>{
           {"42\n", 42}, {"137    \n", 137}, {"0      \n", 0},
           {"4------\n", -1}, {"-------\n", -1}, {"", -1}, {"42", -1}, {"138   F\n", 138}}) {
    std::ofstream(f, std::ios::trunc) << text;
    EXPECT_EQ(ReadExitFile(f), code) << "'" << text << "'";
  }
}

// A lease is read whole: the deadline twice (this agent's), or once (an
// earlier agent's); two that differ (a read that met a renewal halfway)
// are no deadline (-1: the supervisor keeps the last it read).
TEST_F(SupervisedTest, ALeaseIsReadOnlyWhole) {
  const std::string f = dir + "/lease";
  for (const auto& [text, deadline] : std::vector<std::pair<std::string, int64_t>>{
           {"00000000001234567890 00000000001234567890\n", 1234567890},
           {"1234567890\n", 1234567890},
           {"00000000001234567890 00000000001234599999\n", -1},
           {"00000000001234567890 0000000000123\n", -1},
           {"", 0}}) {
    std::ofstream(f, std::ios::trunc) << text;
    EXPECT_EQ(ReadLeaseDeadline(f.c_str()), deadline) << "'" << text << "'";
  }
  EXPECT_EQ(ReadLeaseDeadline((dir + "/none").c_str()), 0);  // no lease: lapsed
  // What the agent writes is read back, and written over in place (the same file, the same size).
  ASSERT_EQ(WriteLeaseFile(f, 1'796'000'000'000'000'000), 0);
  struct stat first {};
  ASSERT_EQ(stat(f.c_str(), &first), 0);
  ASSERT_EQ(WriteLeaseFile(f, 42), 0);
  EXPECT_EQ(ReadLeaseDeadline(f.c_str()), 42);
  struct stat second {};
  ASSERT_EQ(stat(f.c_str(), &second), 0);
  EXPECT_EQ(second.st_ino, first.st_ino);
  EXPECT_EQ(second.st_size, first.st_size);
  EXPECT_EQ(WriteLeaseFile(dir + "/no/such/dir/lease", 1), ENOENT);
}

TEST_F(SupervisedTest, AFailedExecIsAnErrorNotAnExit) {
  ProcessLauncher l(kShim);
  auto t = l.Launch(Spec({"/no/such/program"}));
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("cannot start '/no/such/program'"), std::string::npos) << t.status().ToString();
}

TEST_F(SupervisedTest, TheTaskOutlivesTheAgentsSignalsAndIsFoundByStartTime) {
  ProcessLauncher l(kShim);
  auto t = l.Launch(Spec({"sleep", "30"}));
  ASSERT_TRUE(t.ok());
  const uint64_t start = ProcessStartTime(t->shim);
  EXPECT_GT(start, 0u);
  EXPECT_GT(ProcessStartTime(t->pid), 0u);
  kill(t->shim, SIGTERM);  // deaf to the agent's own signals
  usleep(100 * 1000);
  EXPECT_EQ(ProcessStartTime(t->shim), start);
  l.Signal(t->pid, SIGKILL);
  EXPECT_EQ(Wait(l, t->shim), 128 + SIGKILL);
  EXPECT_EQ(ProcessStartTime(t->shim), 0u);
  EXPECT_EQ(ReadExitFile(dir + "/t.exit"), 128 + SIGKILL);
}

TEST_F(SupervisedTest, ATaskWhoseLeaseLapsesIsSignalledThenKilled) {
  ProcessLauncher l(kShim);
  Lease(600);
  LaunchSpec s = Spec({"sh", "-c", "trap 'echo warned' USR1; while true; do sleep 0.05; done"});
  s.lease_file = dir + "/lease";
  s.stop_signal = SIGUSR1;
  s.fence_warn_ms = 300;
  auto t = l.Launch(s);
  ASSERT_TRUE(t.ok());
  // Fenced by the deadline (0.6 s), warned 0.3 s before it: never later than a tick after.
  const auto began = std::chrono::steady_clock::now();
  EXPECT_EQ(Wait(l, t->shim, 3000), 128 + SIGKILL);
  const auto took = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - began);
  EXPECT_LT(took.count(), 1500);
  EXPECT_NE(Read(dir + "/t.log").find("warned"), std::string::npos);
}

// An exit the fence caused says so (the server takes it for the node's
// loss, not the program's failure): killed at the deadline, or dead of the
// warning while the lease stayed lapsed; an exit of its own, or one after
// the lease was renewed, does not.
TEST_F(SupervisedTest, AnExitTheFenceCausedIsMarkedSo) {
  ProcessLauncher l(kShim);
  LaunchSpec s = Spec({});
  s.lease_file = dir + "/lease";
  s.stop_signal = SIGUSR1;
  s.fence_warn_ms = 300;
  // Runs `argv` under the lease as it stands, to its end (`code`, as the
  // supervisor exits with it and as its exit file says); whether the file
  // says the fence ended it.
  auto run = [&](std::vector<std::string> argv, int code) {
    s.argv = std::move(argv);
    auto t = l.Launch(s);
    EXPECT_TRUE(t.ok());
    if (!t.ok()) return false;
    EXPECT_EQ(Wait(l, t->shim, 3000), code);
    bool fenced = true;
    EXPECT_EQ(ReadExitFile(dir + "/t.exit", nullptr, &fenced), code);
    return fenced;
  };
  // Its own exit, under a lease.
  Lease(60'000);
  EXPECT_FALSE(run({"sh", "-c", "exit 7"}, 7));
  // Dead of the warning (no handler for it), the lease lapsed.
  Lease(600);
  EXPECT_TRUE(run({"sleep", "30"}, 128 + SIGUSR1));
  // Killed at the deadline (its trap set before the warning).
  Lease(800);
  EXPECT_TRUE(run({"sh", "-c", "trap '' USR1; while true; do sleep 0.05; done"}, 128 + SIGKILL));
  // Warned (it saves and runs on), then the lease renewed: its later exit is its own.
  Lease(1500);
  s.fence_warn_ms = 1200;
  s.argv = {"sh", "-c", "trap 'echo saved' USR1; until [ -e " + dir + "/end ]; do sleep 0.02; done; exit 0"};
  auto t = l.Launch(s);
  ASSERT_TRUE(t.ok());
  for (int i = 0; i < 300 && Read(dir + "/t.log").find("saved") == std::string::npos; ++i) usleep(10 * 1000);
  ASSERT_NE(Read(dir + "/t.log").find("saved"), std::string::npos);
  Lease(60'000);
  usleep(300 * 1000);  // (the supervisor reads the lease every 100 ms)
  std::ofstream(dir + "/end") << "";
  EXPECT_EQ(Wait(l, t->shim, 3000), 0);
  bool fenced = true;
  EXPECT_EQ(ReadExitFile(dir + "/t.exit", nullptr, &fenced), 0);
  EXPECT_FALSE(fenced);
}

// Without a cgroup to kill by: what the task left outside its process
// group (a daemon in a session of its own, orphaned by a subshell that
// exited) ends with the task, and at the fence deadline.
TEST_F(SupervisedTest, WhatATaskLeavesOutsideItsGroupEndsWithItAndAtTheFence) {
  ProcessLauncher l(kShim);
  // The daemon's pid, once written (0 if not within 5 s).
  auto daemon = [](const std::string& pid_file) {
    for (int i = 0; i < 500; ++i) {
      std::ifstream in(pid_file);
      pid_t pid = 0;
      if (in >> pid && pid > 0) return pid;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return pid_t{0};
  };
  auto alive = [](pid_t pid) { return pid > 0 && ProcessStartTime(pid) != 0; };  // (0: gone, or a zombie)
  // Ends on its own (when the test says so), leaving a daemon.
  auto t = l.Launch(Spec({"sh", "-c", "(setsid sleep 300 & echo $! > " + dir + "/daemon1.tmp; mv " + dir +
                                          "/daemon1.tmp " + dir + "/daemon1); until [ -e " + dir +
                                          "/end ]; do sleep 0.01; done; exit 3"}));
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  const pid_t one = daemon(dir + "/daemon1");
  EXPECT_TRUE(alive(one));
  std::ofstream(dir + "/end") << "";
  EXPECT_EQ(Wait(l, t->shim, 10000), 3);
  EXPECT_FALSE(alive(one)) << "a daemon outlived its task";
  // Fenced, with a daemon: the lease lapses once the daemon is there.
  Lease(60'000);
  LaunchSpec s = Spec({"sh", "-c", "(setsid sleep 300 & echo $! > " + dir + "/daemon2.tmp; mv " + dir + "/daemon2.tmp " +
                                       dir + "/daemon2); sleep 300"});
  s.lease_file = dir + "/lease";
  t = l.Launch(s);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  const pid_t two = daemon(dir + "/daemon2");
  EXPECT_TRUE(alive(two));
  Lease(-1000);
  const int code = Wait(l, t->shim, 10000);
  EXPECT_TRUE(code == 128 + SIGTERM || code == 128 + SIGKILL) << code;  // (its stop signal, then SIGKILL)
  EXPECT_FALSE(alive(two)) << "a daemon outlived the fence";
}

// A chain of processes, each the parent of the next, that the task leaves
// behind: each pass of the supervisor's sweep reaches one generation deeper,
// and it goes on while new ones come to it. Before, it stopped after 200
// passes, and a chain of 300 left 100 running after the job succeeded.
TEST_F(SupervisedTest, ADeepChainOfProcessesEndsWithItsTask) {
  ProcessLauncher l(kShim);
  const std::string script = dir + "/chain.sh";
  std::ofstream(script) << "n=$1\nif [ \"$n\" -gt 0 ]; then sh " << script << " $((n - 1)) & else touch " << dir
                        << "/deepest; fi\nexec sleep 3017\n";
  auto t = l.Launch(Spec({"sh", "-c", "sh " + script + " 300 & until [ -e " + dir + "/deepest ]; do sleep 0.05; done; exit 0"}));
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(Wait(l, t->shim, 60000), 0);
  // Processes still running `sleep 3017` (the chain's).
  auto left = [] {
    int n = 0;
    for (const auto& e : std::filesystem::directory_iterator("/proc")) {
      std::ifstream in(e.path() / "cmdline");
      std::string cmd((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      if (cmd == std::string("sleep\0003017\0", 11)) ++n;
    }
    return n;
  };
  int n = left();
  for (int i = 0; i < 100 && n > 0; ++i) {  // (killed ones may take a moment to go)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    n = left();
  }
  EXPECT_EQ(n, 0) << "processes of the chain outlived their task";
}

TEST_F(SupervisedTest, ARenewedLeaseKeepsTheTaskRunning) {
  ProcessLauncher l(kShim);
  // Renewed every 150 ms for 1.5 s, each time 1 s ahead (warned 0.1 s
  // before): a renewal may come up to 750 ms late (a loaded CI machine)
  // before the task is warned, and without renewals it would be fenced.
  Lease(1000);
  LaunchSpec s = Spec({"sleep", "30"});
  s.lease_file = dir + "/lease";
  s.fence_warn_ms = 100;
  auto t = l.Launch(s);
  ASSERT_TRUE(t.ok());
  for (int i = 0; i < 10; ++i) {
    usleep(150 * 1000);
    Lease(1000);
  }
  EXPECT_EQ(l.Poll(t->shim), -1) << "fenced although the lease was renewed";
  l.Signal(t->pid, SIGKILL);
  EXPECT_EQ(Wait(l, t->shim), 128 + SIGKILL);
}

TEST_F(SupervisedTest, NoLeaseFileIsAnExpiredLease) {
  ProcessLauncher l(kShim);
  LaunchSpec s = Spec({"sleep", "30"});
  s.lease_file = dir + "/missing-lease";
  auto t = l.Launch(s);
  ASSERT_TRUE(t.ok());
  // Its stop signal (SIGTERM) at once, SIGKILL with it: sleep dies of the first.
  const int code = Wait(l, t->shim, 3000);
  EXPECT_TRUE(code == 128 + SIGTERM || code == 128 + SIGKILL) << code;
}

// The supervisor is rota-shim, exec'd, not a copy of the agent: its own
// binary, an empty environment (nothing of the task's, such as LD_PRELOAD,
// reaches a process that runs as the agent's user), only the descriptors it
// was handed; the task gets exactly its environment.
TEST_F(SupervisedTest, TheSupervisorIsTheShimBinaryWithNothingOfTheTasksEnvironment) {
  ProcessLauncher l(kShim);
  LaunchSpec s = Spec({"sleep", "30"});
  s.env["LD_PRELOAD"] = "/no/such/library.so";
  s.env["ROTA_TEST_MARK"] = "task's own";
  s.env["HF_TOKEN"] = "hf_secret_of_the_task";
  const int stray = open("/dev/null", O_RDONLY);  // a descriptor of the agent's, not CLOEXEC
  ASSERT_GE(stray, 0);
  auto t = l.Launch(s);
  close(stray);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  std::error_code ec;
  EXPECT_EQ(std::filesystem::read_symlink("/proc/" + std::to_string(t->shim) + "/exe", ec).filename(), "rota-shim");
  EXPECT_EQ(Read("/proc/" + std::to_string(t->shim) + "/comm"), "rota-shim\n");  // its name in ps
  EXPECT_EQ(Read("/proc/" + std::to_string(t->shim) + "/environ"), "");
  // Nor on its command line, which every local user can read (ps): the
  // task's environment and arguments come through a descriptor.
  const std::string cmdline = Read("/proc/" + std::to_string(t->shim) + "/cmdline");
  EXPECT_NE(cmdline.find("rota-shim/"), std::string::npos) << cmdline;
  EXPECT_EQ(cmdline.find("hf_secret_of_the_task"), std::string::npos) << cmdline;
  EXPECT_EQ(cmdline.find("LD_PRELOAD"), std::string::npos) << cmdline;
  // (The exec's pipe closes before the kernel has set the new image's
  // environment: read it once it is there.)
  std::string task_env;
  for (int i = 0; i < 1000 && task_env.empty(); ++i, usleep(1000)) {
    task_env = Read("/proc/" + std::to_string(t->pid) + "/environ");
  }
  EXPECT_NE(task_env.find("ROTA_TEST_MARK=task's own"), std::string::npos);
  EXPECT_NE(task_env.find("LD_PRELOAD=/no/such/library.so"), std::string::npos);
  // Open in the shim: nothing but 0-2 (null) and the cgroup files it was
  // handed (none here); the report pipe closed once the task had started.
  // (It closes the pipe just after its report: wait for that.)
  int fds = -1;
  for (int i = 0; i < 2000 && fds != 0; ++i, usleep(1000)) {
    fds = 0;
    for (const auto& e : std::filesystem::directory_iterator("/proc/" + std::to_string(t->shim) + "/fd")) {
      fds += std::stoi(e.path().filename().string()) > 2;
    }
  }
  EXPECT_EQ(fds, 0);
  l.Signal(t->pid, SIGKILL);
  EXPECT_EQ(Wait(l, t->shim), 128 + SIGKILL);
  EXPECT_EQ(ReadExitFile(dir + "/t.exit"), 128 + SIGKILL);
}

// Arguments and environment reach the task byte for byte through the
// shim: empty ones, numbers, '=' inside, newlines.
TEST_F(SupervisedTest, ArgumentsAndEnvironmentReachTheTaskExactly) {
  ProcessLauncher l(kShim);
  LaunchSpec s = Spec({"sh", "-c", "printf '%s|' \"$@\"; printf '[%s][%s]' \"$V1\" \"$EMPTY\"", "sh", "", "3", "a=b=c",
                       "two\nlines", "-"});
  s.env["V1"] = "p=q\nr=";
  s.env["EMPTY"] = "";
  auto t = l.Launch(s);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(Wait(l, t->shim), 0);
  EXPECT_EQ(Read(dir + "/t.log"), "|3|a=b=c|two\nlines|-|[p=q\nr=][]");
}

// A NUL would split the shim's strings (an argument into two, a value into
// a second variable): refused, whatever the server let through before.
TEST_F(SupervisedTest, ANulInAnArgumentOrTheEnvironmentIsRefusedNotSplit) {
  ProcessLauncher l(kShim);
  auto t = l.Launch(Spec({"sh", std::string("-c\0true", 8)}));
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().message(), "command[1]: holds a NUL byte");
  LaunchSpec s = Spec({"true"});
  s.env["TOKEN"] = std::string("x\0LD_PRELOAD=/no/such.so", 24);
  t = l.Launch(s);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("NUL"), std::string::npos) << t.status().ToString();
}

// crun on a hybrid cgroup host: the task runs without the mounts it is not
// to see, in a private namespace; the host keeps them.
TEST_F(SupervisedTest, HiddenMountsAreGoneForTheTaskAlone) {
  if (geteuid() != 0) GTEST_SKIP() << "mount namespaces need root here";
  const std::string hidden = dir + "/hidden";
  std::filesystem::create_directories(hidden);
  if (mount("rota-test", hidden.c_str(), "tmpfs", 0, "size=64k") != 0) GTEST_SKIP() << "cannot mount a tmpfs here";
  struct Unmount {
    std::string path;
    ~Unmount() { umount2(path.c_str(), MNT_DETACH); }
  } unmount{hidden};
  ProcessLauncher l(kShim);
  LaunchSpec s = Spec({"sh", "-c", "grep -c ' " + hidden + " ' /proc/self/mounts"});
  s.hide_mounts = {hidden};
  auto t = l.Launch(s);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_NE(Wait(l, t->shim), 127);
  EXPECT_EQ(Read(dir + "/t.log"), "0\n");
  std::ifstream host("/proc/self/mounts");
  std::string all((std::istreambuf_iterator<char>(host)), {});
  EXPECT_NE(all.find(" " + hidden + " "), std::string::npos);
  // A mount that is not there: the start fails, naming the step.
  s.hide_mounts = {dir + "/not-a-mount"};
  auto bad = l.Launch(s);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("cannot unmount in its mount namespace " + dir + "/not-a-mount: "),
            std::string::npos)
      << bad.status().ToString();
}

// The supervisor starts the task only once the agent has recorded it (an
// agent killed before it did leaves no record of a task that would run).
TEST_F(SupervisedTest, TheTaskStartsOnlyOnceItsSupervisorIsRecorded) {
  ProcessLauncher l(kShim);
  pid_t seen = 0;
  LaunchSpec s = Spec({"sh", "-c", "touch " + dir + "/ran"});
  s.recorded = [&](pid_t shim) {
    seen = shim;
    return false;  // as an agent that could not write the record
  };
  auto t = l.Launch(s);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("the agent did not record its supervisor"), std::string::npos)
      << t.status().ToString();
  EXPECT_GT(seen, 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_FALSE(std::filesystem::exists(dir + "/ran"));
  s.recorded = [&](pid_t shim) {
    seen = shim;
    // Not started before it is recorded (given the time to start, were it
    // not waiting for the word).
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    return !std::filesystem::exists(dir + "/ran");
  };
  t = l.Launch(s);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(seen, t->shim);
  EXPECT_EQ(Wait(l, t->shim), 0);
  EXPECT_TRUE(std::filesystem::exists(dir + "/ran"));
}

// An agent killed after recording the supervisor but before it heard what
// the supervisor started finds the task as the supervisor's child.
TEST_F(SupervisedTest, ARecordedSupervisorsTaskIsFoundAsItsChild) {
  ProcessLauncher l(kShim);
  auto t = l.Launch(Spec({"sleep", "5"}));
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  const uint64_t start = ProcessStartTime(t->shim);
  EXPECT_EQ(SupervisedTaskPid(t->shim, start, 0), t->pid);
  EXPECT_EQ(SupervisedTaskPid(t->shim, start + 1, 0), 0);  // another process by that pid
  l.Signal(t->pid, SIGKILL);
  Wait(l, t->shim);
  EXPECT_EQ(SupervisedTaskPid(t->shim, start, 0), 0);  // gone
  // No task (pid 0): nothing is signalled, not the caller's own group (in a
  // child of its own group, which would die of it).
  const pid_t child = fork();
  if (child == 0) {
    setpgid(0, 0);
    l.Signal(0, SIGKILL);
    _exit(0);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << status;
}

TEST_F(SupervisedTest, AMissingShimIsAnErrorNamingIt) {
  ProcessLauncher l(dir + "/no-such-shim");
  auto t = l.Launch(Spec({"true"}));
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("cannot start its supervisor " + dir + "/no-such-shim"), std::string::npos)
      << t.status().ToString();
}

TEST(Shim, RefusesACommandLineThatIsNotTheAgents) {
  char name[] = "rota-shim", other[] = "rota-shim/0", tag[] = "rota-shim/1", fd[] = "x";
  char* none[] = {name, nullptr};
  char* old[] = {name, other, nullptr};
  char* bad[] = {name, tag, fd, nullptr};
  EXPECT_EQ(ShimMain(1, none), 127);
  EXPECT_EQ(ShimMain(2, old), 127);
  EXPECT_EQ(ShimMain(3, bad), 127);
}

// This version's command line with its counts wrong: refused, and said to
// the agent through the report descriptor (never started).
TEST(Shim, RefusesCountsThatDoNotMatchItsArguments) {
  int report[2];
  ASSERT_EQ(pipe(report), 0);
  const std::string fd = std::to_string(report[1]);
  auto run = [&](std::vector<std::string> tail, std::string go = "") {
    std::vector<std::string> args = {"rota-shim", "rota-shim/4", fd, "1", "2", "", "/tmp", "0", "0", "0", "",
                                     "/tmp/x.exit", "", "0", "15", "/bin/true", fd, go.empty() ? fd : go};
    args.insert(args.end(), tail.begin(), tail.end());
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    return ShimMain(static_cast<int>(args.size()), argv.data());
  };
  EXPECT_EQ(run({"1", "0"}), 127);                     // a fence-kill file, then no mounts count
  EXPECT_EQ(run({"0", "x"}), 127);                     // a mounts count that is not a number
  EXPECT_EQ(run({"0", "1"}), 127);                     // a mount missing
  EXPECT_EQ(run({"0", "1", "relative/path"}), 127);    // not absolute
  EXPECT_EQ(run({"0", "1", "/a", "/b"}), 127);         // one too many
  EXPECT_EQ(run({"1", "/procs", "0", "extra"}), 127);  // one too many after both lists
  EXPECT_EQ(run({"0", "0"}, "2"), 127);                // a go descriptor below 3
  close(report[1]);
  size_t bytes = 0;
  char buf[256];
  ssize_t n;
  while ((n = read(report[0], buf, sizeof(buf))) > 0) bytes += static_cast<size_t>(n);
  close(report[0]);
  EXPECT_EQ(bytes, 7 * (sizeof(pid_t) + 2 * sizeof(int)));  // one report (ShimReport: task, step, errno) per refusal
}

}  // namespace
}  // namespace rota::agent
