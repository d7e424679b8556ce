#include <gtest/gtest.h>

#include "sched/registry.h"

namespace rota::sched {
namespace {

const SharePlacerPlugin& Placer(const std::string& name) {
  static std::map<std::string, std::unique_ptr<Plugin>> owned;
  auto& p = owned[name];
  if (p == nullptr) p = BuiltinRegistry().Create(name);
  return dynamic_cast<const SharePlacerPlugin&>(*p);
}

// A node with two GPUs: one with 500 milli-GPU left, one free (1000). The
// typical task is a half GPU.
TEST(FgdPlacer, PrefersTheGpuThatLeavesRoomForTheTypicalTask) {
  const std::vector<TypicalTask> mix = {{.cpu = 0, .milli = 500, .num = 1, .access = {true}, .f = 1.0}};
  const int32_t left[2] = {500, 1000};
  const bool candidate[2] = {true, true};
  const ShareNode node{left, 2, 64000, 0, &mix};
  double cost[2] = {};
  // A 0.3 share: on GPU 0 it leaves 200 (a fragment no half-GPU task can use);
  // on GPU 1 it leaves 700 (still room for one): GPU 1 grows fragmentation less.
  Placer("fgd").Costs(node, candidate, 300, 0, cost);
  EXPECT_LT(cost[1], cost[0]);
  // A 0.5 share leaves 0 or 500: neither is a fragment for a half-GPU task,
  // so the costs tie and the framework's best fit takes GPU 0.
  Placer("fgd").Costs(node, candidate, 500, 0, cost);
  EXPECT_EQ(cost[0], cost[1]);
  EXPECT_TRUE(Placer("fgd").needs_task_mix());
}

TEST(BestFitPlacer, CostsEveryGpuTheSameSoTheFullestWins) {
  const int32_t left[2] = {500, 1000};
  const bool candidate[2] = {true, false};
  const ShareNode node{left, 2, 64000, 0, nullptr};
  double cost[2] = {-1, -1};
  Placer("bestfit").Costs(node, candidate, 300, 0, cost);
  EXPECT_EQ(cost[0], 0);
  EXPECT_EQ(cost[1], -1);  // not a candidate: untouched
  EXPECT_FALSE(Placer("bestfit").needs_task_mix());
}

}  // namespace
}  // namespace rota::sched
