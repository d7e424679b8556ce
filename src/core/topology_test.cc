#include "core/topology.h"

#include <gtest/gtest.h>

#include "core/cluster_config.h"

namespace rota {
namespace {

TEST(Topology, DomainsAreContiguousPositionRanges) {
  ClusterConfig c;
  c.node_groups.push_back({.name = "a", .count = 6, .gpus = 8, .gpu_model = "H100", .nodes_per_rack = 2,
                           .racks_per_spine = 2});
  c.node_groups.push_back({.name = "b", .count = 2, .gpus = 4, .gpu_model = "A100"});
  auto nodes = ExpandNodes(c);
  ASSERT_TRUE(nodes.ok()) << nodes.status().ToString();
  auto t = Topology::Build(c.topology, *nodes);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  ASSERT_EQ(t->domain_levels(), (std::vector<std::string>{"rack", "spine"}));
  // racks: a-r0 a-r1 a-r2 b-r0; spines: a-s0 a-s1 b-s0.
  EXPECT_EQ(t->domains_at(0).size(), 4u);
  EXPECT_EQ(t->domains_at(1).size(), 3u);
  for (int32_t level = 0; level < 2; ++level) {
    for (int32_t d : t->domains_at(level)) {
      const auto& dom = t->domains()[d];
      for (uint32_t pos = dom.begin; pos < dom.end; ++pos) {
        const NodeSpec& n = (*nodes)[t->node_at(pos).value()];
        EXPECT_EQ(n.labels.at(t->domain_levels()[level]), dom.name);
        EXPECT_EQ(t->DomainOf(pos, level), d);
      }
    }
  }
  EXPECT_EQ(t->DomainLevelIndex("rack"), 0);
  EXPECT_EQ(t->DomainLevelIndex("node"), -1);
  EXPECT_EQ(t->DomainLevelIndex("cluster"), 2);
  EXPECT_EQ(t->DomainLevelIndex("zone"), -2);
}

TEST(Topology, RejectsARackInTwoSpines) {
  std::vector<NodeSpec> nodes(2);
  nodes[0].name = "x";
  nodes[0].labels = {{"rack", "r0"}, {"spine", "s0"}};
  nodes[1].name = "y";
  nodes[1].labels = {{"rack", "r0"}, {"spine", "s1"}};
  auto t = Topology::Build({"node", "rack", "spine"}, nodes);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("rack 'r0' lies in two spines"), std::string::npos) << t.status().ToString();
}

TEST(Topology, ValidatesLevelNames) {
  EXPECT_FALSE(Topology::ValidateLevels({"rack", "spine"}).ok());
  EXPECT_FALSE(Topology::ValidateLevels({"rack", "node"}).ok());
  EXPECT_FALSE(Topology::ValidateLevels({"node", "rack", "rack"}).ok());
  EXPECT_TRUE(Topology::ValidateLevels({"node", "zone"}).ok());
}

TEST(IslandMask, SplitsGpusEvenly) {
  EXPECT_EQ(IslandMask(8, 2, 0), 0x0Fu);
  EXPECT_EQ(IslandMask(8, 2, 1), 0xF0u);
  EXPECT_EQ(IslandMask(8, 1, 0), 0xFFu);
}

}  // namespace
}  // namespace rota
