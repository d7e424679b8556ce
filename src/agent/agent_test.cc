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
