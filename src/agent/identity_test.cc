#include "agent/identity.h"

#include <gtest/gtest.h>
#include <stdlib.h>

namespace rota::agent {
namespace {

TEST(Identity, ResolvesAnAccountByNameWithItsGroups) {
  auto id = ResolveIdentity({.user = "nobody"}, 0, "n0");
  ASSERT_TRUE(id.ok()) << id.status().ToString();
  EXPECT_EQ(id->uid, 65534u);
  EXPECT_EQ(id->user, "nobody");
  EXPECT_FALSE(id->groups.empty());
  EXPECT_EQ(id->groups[0], id->gid);
}

TEST(Identity, RefusesAUserWithNoAccountAndSaysWhere) {
  auto id = ResolveIdentity({.user = "no-such-user-rota"}, 0, "n0");
  ASSERT_FALSE(id.ok());
  EXPECT_EQ(id.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(id.status().message().find("no Unix account on node 'n0'"), std::string::npos) << id.status().ToString();
}

TEST(Identity, ExplicitUidMappingWinsOverTheName) {
  auto id = ResolveIdentity({.user = "alice", .uid = 4242, .gid = 4343}, 0, "n0");
  ASSERT_TRUE(id.ok()) << id.status().ToString();
  EXPECT_EQ(id->uid, 4242u);
  EXPECT_EQ(id->gid, 4343u);
  EXPECT_EQ(id->groups, std::vector<gid_t>{4343});
}

TEST(Identity, RootOnlyWhereAllowed) {
  auto refused = ResolveIdentity({.user = "root"}, 0, "n0");
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kPermissionDenied);
  EXPECT_NE(refused.status().message().find("allow_root"), std::string::npos);
  auto mapped = ResolveIdentity({.user = "alice", .uid = 0}, 0, "n0");
  EXPECT_FALSE(mapped.ok());
  EXPECT_TRUE(ResolveIdentity({.user = "root", .allow_root = true}, 0, "n0").ok());
}

TEST(Identity, AnAgentThatIsNotRootRunsTasksOnlyAsItself) {
  auto other = ResolveIdentity({.user = "nobody"}, 1000, "n0");
  ASSERT_FALSE(other.ok());
  EXPECT_NE(other.status().message().find("runs as uid 1000"), std::string::npos);
  EXPECT_TRUE(ResolveIdentity({.user = "x", .uid = 1000}, 1000, "n0").ok());
}

TEST(Identity, BaseEnvironmentCarriesNothingOfTheAgents) {
  setenv("LD_PRELOAD", "/tmp/evil.so", 1);
  setenv("ROTA_TOKEN", "secret", 1);
  auto id = ResolveIdentity({.user = "nobody"}, 0, "n0");
  ASSERT_TRUE(id.ok());
  auto env = BaseEnvironment(*id);
  EXPECT_FALSE(env.count("LD_PRELOAD"));
  EXPECT_FALSE(env.count("ROTA_TOKEN"));
  EXPECT_EQ(env["USER"], "nobody");
  EXPECT_EQ(env["PATH"], "/usr/local/bin:/usr/bin:/bin");
  unsetenv("LD_PRELOAD");
  unsetenv("ROTA_TOKEN");
}

}  // namespace
}  // namespace rota::agent
