// Engine scenarios as data (tests/scenarios/*.yaml). Each file holds a
// cluster config, a jobs list and the expected outcome; the arithmetic behind
// each expectation is in the file's comments. The runner goes through the
// same path as `rota plan`: the YAML codecs, then RunPlan.
//
//   expect:
//     placed: [a, b]                 # exactly the jobs placed by the plan
//     pending: {c: Fragmented}       # job -> reason code, exactly
//     rejected: {d: NoMatchingNodes} # job -> code, exactly
//     messages: {c: "free per node"} # job -> substring of its message
//     placements: {a: [{node: n-0, gpus: [0, 1]}]}  # replicas in order
//     same_domain: {a: rack}         # all replicas of a within one rack
//     unused_nodes: [n-3]            # no placement on these nodes
//     reservations: {big: 2h}        # job -> start, as a delay after `now:`
//     preemptions: {victim: preemptor}
//     placements: {m: [{node: a-0, gpus: [1], mig: 3g.40gb@4}]}  # a MIG instance
//     reconfigurations: ["a-0/1: 3g.40gb@0,3g.40gb@4"]   # node/gpu: new layout, in order
//     resizes: ["el: 4 -> 2"]        # elastic jobs grown or shrunk, in order
#include <gtest/gtest.h>
#include <yaml-cpp/yaml.h>

#include <filesystem>
#include <map>
#include <set>

#include "api/yaml_codec.h"
#include "sched/plan.h"

namespace rota {
namespace {

std::string SourceDir() {
  const char* dir = std::getenv("ROTA_SOURCE_DIR");
  return dir ? dir : ".";
}

std::vector<std::string> ScenarioFiles() {
  std::vector<std::string> files;
  for (const auto& e : std::filesystem::directory_iterator(SourceDir() + "/tests/scenarios")) {
    if (e.path().extension() == ".yaml") files.push_back(e.path().filename().string());
  }
  std::sort(files.begin(), files.end());
  return files;
}

std::string Emit(const YAML::Node& n) {
  YAML::Emitter out;
  out << n;
  return out.c_str();
}

class Scenario : public ::testing::TestWithParam<std::string> {};

TEST_P(Scenario, MatchesExpectations) {
  const std::string path = SourceDir() + "/tests/scenarios/" + GetParam();
  auto text = api::ReadFile(path);
  ASSERT_TRUE(text.ok()) << text.status().ToString();
  YAML::Node root = YAML::Load(*text);
  ASSERT_TRUE(root["cluster"] && root["jobs"] && root["expect"]) << path << ": needs cluster, jobs and expect";

  YAML::Node jobs_doc;
  if (root["now"]) jobs_doc["now"] = root["now"];
  jobs_doc["jobs"] = root["jobs"];
  auto cluster = api::ParseClusterConfig(Emit(root["cluster"]), path + " (cluster)");
  ASSERT_TRUE(cluster.ok()) << cluster.status().ToString();
  auto jobs = api::ParseJobList(Emit(jobs_doc), path + " (jobs)");
  ASSERT_TRUE(jobs.ok()) << jobs.status().ToString();
  // The scenarios' messages name other jobs by id (their order in the file).
  auto out = sched::RunPlan(*cluster, *jobs, {.name_jobs = false});
  ASSERT_TRUE(out.ok()) << out.status().ToString();

  std::map<std::string, std::vector<sched::PlanOutput::Placement>> by_job;
  for (const auto& p : out->placements) by_job[p.job].push_back(p);
  std::map<std::string, const sched::PlanOutput::Pending*> pending;
  for (const auto& p : out->pending) pending[p.job] = &p;
  std::map<std::string, const sched::PlanOutput::Rejected*> rejected;
  for (const auto& r : out->rejected) rejected[r.job] = &r;

  const YAML::Node expect = root["expect"];
  std::set<std::string> want_placed;
  for (const auto& j : expect["placed"]) want_placed.insert(j.as<std::string>());
  std::set<std::string> got_placed;
  for (const auto& [job, ps] : by_job) got_placed.insert(job);
  EXPECT_EQ(got_placed, want_placed) << "placed jobs";

  std::map<std::string, std::string> want_pending, got_pending;
  for (const auto& kv : expect["pending"]) want_pending[kv.first.as<std::string>()] = kv.second.as<std::string>();
  for (const auto& [job, p] : pending) got_pending[job] = p->code;
  EXPECT_EQ(got_pending, want_pending) << "pending jobs and codes";

  std::map<std::string, std::string> want_rejected, got_rejected;
  for (const auto& kv : expect["rejected"]) want_rejected[kv.first.as<std::string>()] = kv.second.as<std::string>();
  for (const auto& [job, r] : rejected) got_rejected[job] = r->code;
  EXPECT_EQ(got_rejected, want_rejected) << "rejected jobs and codes";

  for (const auto& kv : expect["messages"]) {
    const std::string job = kv.first.as<std::string>();
    const std::string want = kv.second.as<std::string>();
    std::string got = pending.count(job) ? pending[job]->message : rejected.count(job) ? rejected[job]->error : "";
    EXPECT_NE(got.find(want), std::string::npos) << job << ": message '" << got << "' lacks '" << want << "'";
  }

  for (const auto& kv : expect["placements"]) {
    const std::string job = kv.first.as<std::string>();
    const auto& got = by_job[job];
    ASSERT_EQ(got.size(), kv.second.size()) << job << ": replica count";
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_EQ(got[i].node, kv.second[i]["node"].as<std::string>()) << job << " replica " << i;
      if (kv.second[i]["gpus"]) {
        EXPECT_EQ(got[i].gpus, kv.second[i]["gpus"].as<std::vector<int32_t>>()) << job << " replica " << i;
      }
      if (kv.second[i]["mig"]) {
        EXPECT_EQ(got[i].mig, kv.second[i]["mig"].as<std::string>()) << job << " replica " << i;
      }
    }
  }

  std::map<std::string, std::string> want_reserved, got_reserved;
  for (const auto& kv : expect["reservations"]) want_reserved[kv.first.as<std::string>()] = kv.second.as<std::string>();
  for (const auto& r : out->reservations) got_reserved[r.job] = FormatDuration(r.in);
  EXPECT_EQ(got_reserved, want_reserved) << "reservations (job -> delay)";
  std::map<std::string, std::string> want_evicted, got_evicted;
  for (const auto& kv : expect["preemptions"]) want_evicted[kv.first.as<std::string>()] = kv.second.as<std::string>();
  for (const auto& p : out->preemptions) got_evicted[p.victim] = p.preemptor;
  EXPECT_EQ(got_evicted, want_evicted) << "preemptions (victim -> for)";

  std::vector<std::string> want_reconf, got_reconf;
  for (const auto& r : expect["reconfigurations"]) want_reconf.push_back(r.as<std::string>());
  for (const auto& r : out->reconfigurations) got_reconf.push_back(r.node + "/" + std::to_string(r.gpu) + ": " + r.layout);
  EXPECT_EQ(got_reconf, want_reconf) << "MIG reconfigurations";

  std::vector<std::string> want_resized, got_resized;
  for (const auto& r : expect["resizes"]) want_resized.push_back(r.as<std::string>());
  for (const auto& r : out->resizes) got_resized.push_back(r.job + ": " + std::to_string(r.from) + " -> " + std::to_string(r.to));
  EXPECT_EQ(got_resized, want_resized) << "elastic resizes";

  if (expect["same_domain"] || expect["unused_nodes"]) {
    auto nodes = ExpandNodes(*cluster);
    ASSERT_TRUE(nodes.ok());
    std::map<std::string, const NodeSpec*> by_name;
    for (const auto& n : *nodes) by_name[n.name] = &n;
    for (const auto& kv : expect["same_domain"]) {
      const std::string job = kv.first.as<std::string>();
      const std::string level = kv.second.as<std::string>();
      std::set<std::string> domains;
      for (const auto& p : by_job[job]) domains.insert(level == "node" ? p.node : by_name.at(p.node)->labels.at(level));
      EXPECT_EQ(domains.size(), 1u) << job << " spans " << domains.size() << " " << level << "s";
    }
    std::set<std::string> unused;
    for (const auto& n : expect["unused_nodes"]) unused.insert(n.as<std::string>());
    for (const auto& p : out->placements) EXPECT_FALSE(unused.count(p.node)) << p.job << " placed on " << p.node;
  }
}

INSTANTIATE_TEST_SUITE_P(Scenarios, Scenario, ::testing::ValuesIn(ScenarioFiles()),
                         [](const ::testing::TestParamInfo<std::string>& param) {
                           std::string name = param.param.substr(0, param.param.size() - 5);
                           for (char& c : name) {
                             if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
                           }
                           return name;
                         });

}  // namespace
}  // namespace rota
