#include "agent/agent.h"

#include <gtest/gtest.h>
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
// from the third start in a row whose program did not exec in time, of
// more than one user (one user alone can make theirs hang), until a start
// execs or the hold has passed since the last; a container delete that
// hung, until one of that container ends on its own or the hold has passed.
TEST(RuntimeTrouble, ExecTimeoutsInARowAndHungDeletesUntilTheyClearOrAge) {
  using Clock = RuntimeTrouble::Clock;
  const Clock::time_point t0 = Clock::now();
  RuntimeTrouble trouble;
  trouble.ExecTimedOut("job 1 main: cannot start it", 1000, t0);
  trouble.ExecTimedOut("job 2 main: cannot start it", 1001, t0);
  EXPECT_EQ(trouble.Problem(t0), "");  // (two: a user's program on a mount of theirs may hang)
  trouble.Execed();
  trouble.ExecTimedOut("job 3 main: cannot start it", 1000, t0);
  trouble.ExecTimedOut("job 4 main: cannot start it", 1001, t0);
  EXPECT_EQ(trouble.Problem(t0), "");  // (a start that execs began the count again)
  trouble.ExecTimedOut("job 5 main: cannot start it", 1000, t0 + std::chrono::seconds(20));
  EXPECT_EQ(trouble.Problem(t0 + std::chrono::seconds(20)),
            "3 starts in a row, of more than one user, did not exec their program within 10 s (the last: job 5 main: "
            "cannot start it)");
  // Said for the hold after the last; one more timeout then says it at once.
  const Clock::time_point aged = t0 + std::chrono::seconds(20) + RuntimeTrouble::kHold;
  EXPECT_NE(trouble.Problem(aged - std::chrono::seconds(1)), "");
  EXPECT_EQ(trouble.Problem(aged), "");
  trouble.ExecTimedOut("job 6 main: cannot start it", 1000, aged);
  EXPECT_NE(trouble.Problem(aged).find("4 starts in a row"), std::string::npos) << trouble.Problem(aged);
  trouble.Execed();
  EXPECT_EQ(trouble.Problem(aged), "");
  // Hung deletes: the latest named, the others counted.
  trouble.DeleteHung("rota-1-0-0-0", t0);
  EXPECT_EQ(trouble.Problem(t0), "the OCI runtime's delete of rota-1-0-0-0 hung (killed after 30 s)");
  trouble.DeleteHung("rota-2-0-0-0", t0 + std::chrono::seconds(1));
  trouble.DeleteHung("rota-3-0-0-0", t0 + std::chrono::seconds(2));
  EXPECT_EQ(trouble.Problem(t0 + std::chrono::seconds(2)),
            "the OCI runtime's delete of rota-3-0-0-0 hung (killed after 30 s), and of 2 other containers");
  trouble.DeleteEnded("rota-3-0-0-0");
  trouble.DeleteEnded("rota-2-0-0-0");
  EXPECT_EQ(trouble.Problem(t0 + std::chrono::seconds(2)), "the OCI runtime's delete of rota-1-0-0-0 hung (killed after 30 s)");
  EXPECT_EQ(trouble.Problem(t0 + RuntimeTrouble::kHold), "");
  // One user's starts alone, however many: nothing (a user can make the
  // exec of their own program hang, and must not drain nodes by it).
  for (int i = 0; i < 10; ++i) trouble.ExecTimedOut("job " + std::to_string(10 + i) + " main", 1000, aged);
  EXPECT_EQ(trouble.Problem(aged), "");
  trouble.Execed();
  // Both at once: both said.
  trouble.ExecTimedOut("a", 1000, aged);
  trouble.ExecTimedOut("b", 0, aged);
  trouble.ExecTimedOut("c", 1000, aged);
  trouble.DeleteHung("rota-4-0-0-0", aged);
  EXPECT_EQ(trouble.Problem(aged),
            "3 starts in a row, of more than one user, did not exec their program within 10 s (the last: c); the OCI "
            "runtime's delete of rota-4-0-0-0 hung (killed after 30 s)");
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
