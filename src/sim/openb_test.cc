#include "sim/openb.h"

#include <gtest/gtest.h>

#include "sim/test_util.h"

#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>

namespace rota::sim {
namespace {

std::vector<std::vector<std::string>> Rows(const std::string& text) {
  std::vector<std::vector<std::string>> rows;
  std::stringstream ss(text);
  std::string line;
  std::getline(ss, line);
  while (std::getline(ss, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (!line.empty()) rows.push_back(SplitCsv(line));
  }
  return rows;
}

struct Openb {
  std::vector<TraceNode> nodes;
  std::vector<TraceJob> pods;
};

bool LoadOpenb(const std::string& workload, Openb* out) {
  std::string nodes, pods;
  if (!ReadFile(SharedTraces() + "alibaba-v2023/openb_node_list_gpu_node.csv", &nodes)) return false;
  if (!ReadFile(SharedTraces() + "alibaba-v2023/" + workload + ".csv", &pods)) return false;
  auto n = ParseNodeList(nodes, "nodes");
  auto p = ParseTrace(TraceFormat::kOpenb, pods, workload);
  if (!n.ok() || !p.ok()) return false;
  out->nodes = *n;
  out->pods = *p;
  return true;
}

// The published curve of one (workload, policy, seed).
std::vector<double> Published(const std::string& workload, const std::string& policy, int seed) {
  std::string text;
  if (!ReadFile(SharedTraces() + "fgd-expected-results/analysis_allo_discrete.csv", &text)) return {};
  for (const auto& row : Rows(text)) {
    if (row[0] == workload && row[1] == policy && row[3] == std::to_string(seed)) {
      std::vector<double> v;
      for (size_t k = 5; k < row.size(); ++k) v.push_back(std::stod(row[k]));
      return v;
    }
  }
  return {};
}

TEST(OpenbTest, TypicalPodsAreTheArtifacts) {
  Openb o;
  if (!LoadOpenb("openb_pod_list_default", &o)) GTEST_SKIP() << "no ../shared traces";
  std::string text;
  ASSERT_TRUE(ReadFile(SharedTraces() + "fgd-expected-results/reproduced_default_seed42/typical_pods_default.csv", &text));
  auto rows = Rows(text);
  auto typical = TypicalPods(o.pods);
  ASSERT_EQ(typical.size(), rows.size());
  for (size_t i = 0; i < rows.size(); ++i) {
    EXPECT_EQ(typical[i].count, std::stoll(rows[i][5])) << i;
    EXPECT_EQ(typical[i].gpus, std::stoi(rows[i][2])) << i;
    EXPECT_EQ(typical[i].milli, std::stoi(rows[i][3])) << i;
  }
}

// Fed the reference run's arrival order and node order, FGD and BestFit pick
// the artifact's node at every one of the 10,866 arrivals.
TEST(OpenbTest, ReplaysTheArtifactRunStepByStep) {
  Openb o;
  if (!LoadOpenb("openb_pod_list_default", &o)) GTEST_SKIP() << "no ../shared traces";
  const std::string dir = SharedTraces() + "fgd-expected-results/reproduced_default_seed42/";
  std::string order_text;
  ASSERT_TRUE(ReadFile(dir + "simulator_node_order.csv", &order_text));
  std::map<std::string, uint32_t> sim_index;
  for (const auto& row : Rows(order_text)) sim_index[row[1]] = static_cast<uint32_t>(std::stoul(row[0]));
  std::map<std::string, uint32_t> pod_index, node_index;
  for (size_t i = 0; i < o.pods.size(); ++i) pod_index[o.pods[i].name] = static_cast<uint32_t>(i);
  OpenbOptions options;
  for (size_t i = 0; i < o.nodes.size(); ++i) {
    node_index[o.nodes[i].name] = static_cast<uint32_t>(i);
    options.node_rank.push_back(sim_index.at(o.nodes[i].name));
  }
  for (const auto& [policy, file] : {std::pair<std::string, std::string>{"fgd", "06-FGD"}, {"bestfit", "05-BestFit"}}) {
    std::string seq_text;
    ASSERT_TRUE(ReadFile(dir + file + "_arrival_sequence.csv", &seq_text));
    auto seq = Rows(seq_text);
    options.arrival_order.clear();
    for (const auto& row : seq) options.arrival_order.push_back(pod_index.at(row[2]));
    options.placement = policy;
    auto r = RunOpenb(o.nodes, o.pods, options);
    ASSERT_TRUE(r.ok()) << r.status().ToString();
    ASSERT_EQ(r->steps.size(), seq.size());
    int mismatches = 0, first = -1;
    for (size_t s = 0; s < seq.size(); ++s) {
      const std::string& ref = seq[s][3];
      const int32_t want = ref == "FAILED" ? -1 : static_cast<int32_t>(node_index.at(ref.substr(5)));
      if (r->steps[s].node != want) {
        ++mismatches;
        if (first < 0) first = static_cast<int>(s);
      }
    }
    EXPECT_EQ(mismatches, 0) << policy << ": first at arrival " << first;
    EXPECT_EQ(r->steps.back().used_milli, std::stoll(seq.back()[4])) << policy;
    auto published = Published("openb_pod_list_default", file, 42);
    ASSERT_EQ(published.size(), 131u);
    for (int k = 0; k <= 130; ++k) EXPECT_NEAR(r->alloc_pct_by_arrived[k], published[k], 0.011) << policy << " k=" << k;
  }
}

}  // namespace
}  // namespace rota::sim

namespace rota::sim {
namespace {

// With our own seeded shuffle and inflation (not the artifact's Go random
// stream), each seed's curve stays within a point of the published curve of
// the same seed, for FGD and BestFit at every arrived load 0..130%.
TEST(OpenbTest, CurvesMatchThePublishedPerSeedCurves) {
  Openb o;
  if (!LoadOpenb("openb_pod_list_default", &o)) GTEST_SKIP() << "no ../shared traces";
  for (const auto& [policy, file] : {std::pair<std::string, std::string>{"fgd", "06-FGD"}, {"bestfit", "05-BestFit"}}) {
    double worst = 0;
    for (int seed = 42; seed <= 51; ++seed) {
      OpenbOptions options;
      options.placement = policy;
      options.seed = static_cast<uint64_t>(seed);
      auto r = RunOpenb(o.nodes, o.pods, options);
      ASSERT_TRUE(r.ok()) << r.status().ToString();
      auto published = Published("openb_pod_list_default", file, seed);
      ASSERT_EQ(published.size(), 131u);
      for (int k = 0; k <= 130; ++k) {
        worst = std::max(worst, std::abs(r->alloc_pct_by_arrived[k] - published[k]));
        EXPECT_NEAR(r->alloc_pct_by_arrived[k], published[k], 1.0) << policy << " seed " << seed << " k=" << k;
      }
    }
    RecordProperty(policy + "_max_abs_diff", std::to_string(worst));
    std::printf("%s: max |ours - published| over 10 seeds x 131 points = %.2f\n", policy.c_str(), worst);
  }
}

}  // namespace
}  // namespace rota::sim
