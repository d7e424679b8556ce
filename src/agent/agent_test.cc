#include "agent/agent.h"

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>
#include <sys/statvfs.h>

#include <filesystem>
#include <fstream>
#include <string>

namespace rota::agent {
namespace {

// An agent's instance is kept in its state directory: the same agent
// restarted keeps it (the server lets it back at once); another directory,
// or none, is another agent.
TEST(AgentInstance, IsKeptInTheStateDirectory) {
  char tmpl[] = "/tmp/rota-instance-XXXXXX";
  const std::string dir = mkdtemp(tmpl);
  const std::string first = AgentInstance(dir + "/state");
  EXPECT_EQ(first.size(), 32u);
  EXPECT_EQ(AgentInstance(dir + "/state"), first);
  EXPECT_NE(AgentInstance(dir + "/other"), first);
  EXPECT_NE(AgentInstance(""), AgentInstance(""));
  std::ofstream(dir + "/state/agent-id", std::ios::trunc) << "not-hex\n";  // (damaged: a new one, kept)
  const std::string second = AgentInstance(dir + "/state");
  EXPECT_NE(second, first);
  EXPECT_EQ(AgentInstance(dir + "/state"), second);
  std::filesystem::remove_all(dir);
}

// The runtime problem an agent reports (HeartbeatReport::runtime_problem):
// from the third start in a row, within the window, whose program did not
// exec in time, of more than one user (one user alone can make theirs
// hang) unless the agent runs every task as one user; until a start execs
// or fewer than three are left within the window. A container the runtime
// could not delete, until it is gone. No job or container is named.
TEST(RuntimeTrouble, ExecTimeoutsOfTwoUsersAndStuckContainers) {
  using Clock = RuntimeTrouble::Clock;
  const Clock::time_point t0 = Clock::now();
  const auto s = [](int n) { return std::chrono::seconds(n); };
  RuntimeTrouble trouble;
  trouble.ExecTimedOut(1000, t0);
  trouble.ExecTimedOut(1001, t0);
  EXPECT_EQ(trouble.Problem(t0), "");  // (two)
  trouble.Execed();
  trouble.ExecTimedOut(1000, t0);
  trouble.ExecTimedOut(1001, t0);
  EXPECT_EQ(trouble.Problem(t0), "");  // (a start that execs began the count again)
  trouble.ExecTimedOut(1000, t0 + s(20));
  EXPECT_EQ(trouble.Problem(t0 + s(20)),
            "3 starts in a row, of 2 users, did not exec their program within 10 s (a hung file system?)");
  // Said while three are within the window: the first two age out of it.
  const Clock::time_point aged = t0 + RuntimeTrouble::kWindow;
  EXPECT_NE(trouble.Problem(aged - s(1)), "");
  EXPECT_EQ(trouble.Problem(aged), "");
  // Then one user's start alone does not drain it again: it takes three
  // within the window, of two users.
  trouble.ExecTimedOut(1000, aged);
  trouble.ExecTimedOut(1000, aged + s(1));
  EXPECT_EQ(trouble.Problem(aged + s(1)), "");
  trouble.ExecTimedOut(1001, aged + s(2));
  EXPECT_NE(trouble.Problem(aged + s(2)).find("4 starts in a row, of 2 users,"), std::string::npos)
      << trouble.Problem(aged + s(2));
  trouble.Execed();
  EXPECT_EQ(trouble.Problem(aged + s(2)), "");
  // One user's starts alone, however many: nothing (a user can make the
  // exec of their own program hang, and must not drain nodes by it).
  for (int i = 0; i < 40; ++i) trouble.ExecTimedOut(1000, aged + s(3));
  EXPECT_EQ(trouble.Problem(aged + s(3)), "");
  // ... unless every task runs as one user (an agent that is not root).
  RuntimeTrouble alone(/*one_user=*/true);
  for (int i = 0; i < 3; ++i) alone.ExecTimedOut(1000, t0);
  EXPECT_EQ(alone.Problem(t0), "3 starts in a row did not exec their program within 10 s (a hung file system?)");
  // Stuck containers: said until they are gone, whatever the time.
  trouble.Execed();
  trouble.DeleteHung("rota-1-0-0-0");
  EXPECT_EQ(trouble.Problem(t0), "the OCI runtime could not delete a container (its delete hung, killed after 30 s)");
  trouble.DeleteHung("rota-2-0-0-0");
  EXPECT_EQ(trouble.Problem(t0 + RuntimeTrouble::kWindow * 10),
            "the OCI runtime could not delete 2 containers (its delete hung, killed after 30 s)");
  trouble.ContainerGone("rota-2-0-0-0");
  trouble.ContainerGone("rota-1-0-0-0");
  EXPECT_EQ(trouble.Problem(t0), "");
  // Both at once: both said.
  trouble.ExecTimedOut(1000, t0);
  trouble.ExecTimedOut(0, t0);
  trouble.ExecTimedOut(1000, t0);
  trouble.DeleteHung("rota-4-0-0-0");
  EXPECT_EQ(trouble.Problem(t0),
            "3 starts in a row, of 2 users, did not exec their program within 10 s (a hung file system?); the OCI "
            "runtime could not delete a container (its delete hung, killed after 30 s)");
}

// A port another process listens on, or has bound, is taken; a free one is
// not.
TEST(PortTaken, APortAnotherSocketHoldsIsTakenAndAFreeOneIsNot) {
  auto bound = [](bool listening) {
    const int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_ANY);
    EXPECT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
    if (listening) EXPECT_EQ(listen(fd, 1), 0);
    socklen_t len = sizeof(a);
    getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
    return std::pair<int, int>{fd, ntohs(a.sin_port)};
  };
  auto [listener, port] = bound(true);
  EXPECT_NE(PortTaken(port).find("IPv4 port " + std::to_string(port) + ": Address already in use"), std::string::npos)
      << PortTaken(port);
  close(listener);
  EXPECT_EQ(PortTaken(port), "");
  auto [holder, held] = bound(false);  // (bound, not listening yet)
  EXPECT_NE(PortTaken(held), "");
  close(holder);
  EXPECT_EQ(PortTaken(held), "");
}

// The disk problem an agent reports (HeartbeatReport::disk_problem): free
// space below the reserve, with half the reserve again needed to clear once
// short; a directory it cannot read; none with a reserve of 0.
TEST(DiskProblem, BelowTheReserveUntilHalfAsMuchAgainIsFree) {
  struct statvfs st {};
  ASSERT_EQ(statvfs("/", &st), 0);
  const int64_t free_mib = static_cast<int64_t>(st.f_bavail * st.f_frsize >> 20);
  if (free_mib < 64) GTEST_SKIP() << "too little free on / to measure against";
  // (Margins of a fifth: other processes write meanwhile.)
  EXPECT_EQ(DiskProblem({"/"}, free_mib * 4 / 5), "");
  const std::string short_now = DiskProblem({"/"}, free_mib * 4 / 5, /*had_problem=*/true);
  EXPECT_NE(short_now.find("MiB free in / (the agent keeps " + std::to_string(free_mib * 4 / 5) + " MiB: --disk-reserve)"),
            std::string::npos)
      << short_now;
  EXPECT_NE(DiskProblem({"/"}, free_mib * 6 / 5).find("MiB free in /"), std::string::npos);
  EXPECT_EQ(DiskProblem({"/"}, 0, true), "");  // off
  EXPECT_EQ(DiskProblem({"", "/"}, 1), "");    // (no such directory configured)
  EXPECT_EQ(DiskProblem({"/no/such/rota/dir"}, 1), "cannot read /no/such/rota/dir (No such file or directory)");
}

}  // namespace
}  // namespace rota::agent
