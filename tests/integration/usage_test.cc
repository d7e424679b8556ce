// Accounting through the real binaries: a server and three agents (declared
// GPUs: their meter integrates the simulated power, and utilisation follows
// the allocation), a job that runs a few seconds, its usage record, the
// period report (table, JSON and CSV), and who may see what.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "harness.h"

namespace rota::testing {
namespace {

class Accounting : public AgentCluster {};

TEST_F(Accounting, AnEndedJobHasAUsageRecordAndAReport) {
  auto admin = server_->Admin();
  // Burns CPU for about three seconds at a one-CPU request.
  auto r = admin.Post("/v1/jobs",
                      "name: burn\ntasks: [{gpus: 1, cpu: 1, command: [timeout, '3', sh, -c, 'while :; do :; done']}]\n",
                      "application/yaml");
  ASSERT_EQ(r->status, 201) << r->body;
  const int id = json::parse(r->body)["id"];
  // Running: the report holds its measure so far.
  WaitJob(id, [](const json& j) { return j["state"] == "running"; });
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  auto live = json::parse(admin.Get("/v1/usage/report?since=1h")->body);
  EXPECT_GT(live["total"]["gpu_seconds"].get<int64_t>(), 0) << live.dump() << Job(id).dump();
  // Ended (timeout exits 124: failed), its record is in the store.
  WaitJob(id, [](const json& j) { return j["state"] == "failed"; });
  json usage;
  for (int i = 0; i < 100; ++i) {
    usage = json::parse(admin.Get("/v1/jobs/" + std::to_string(id) + "/usage")->body);
    if (!usage["attempts"].empty() && usage["attempts"][0]["end"] == "failed") break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  ASSERT_EQ(usage["attempts"].size(), 1u) << usage.dump();
  const json& a = usage["attempts"][0];
  EXPECT_EQ(a["end"], "failed");
  EXPECT_EQ(a["gpus"], 1);
  EXPECT_EQ(a["gpu_model"], "H100");
  EXPECT_GE(a["seconds"].get<int>(), 2);
  // A declared GPU held by a task reads 100% and 300 W: about 300 J a second.
  EXPECT_EQ(a["activity_p90"], 100);
  EXPECT_GT(a["energy_j"].get<int64_t>(), 300) << a.dump();
  EXPECT_LT(a["energy_j"].get<int64_t>(), 300 * 6) << a.dump();
  EXPECT_GE(a["cpu_used_s"].get<int64_t>(), 1) << a.dump();
  EXPECT_EQ(usage["recommendation"]["recommended"], false) << usage.dump();

  // The period's report, by queue, in JSON and through the CLI as CSV.
  auto report = json::parse(admin.Get("/v1/usage/report?since=1h&by=queue")->body);
  ASSERT_EQ(report["rows"].size(), 1u) << report.dump();
  EXPECT_EQ(report["by"], "queue");
  EXPECT_GE(report["total"]["gpu_seconds"].get<int64_t>(), 2);
  EXPECT_GT(report["total"]["energy_j"].get<int64_t>(), 300);
  EXPECT_EQ(admin.Get("/v1/usage/report?since=forever")->status, 400);
  EXPECT_EQ(admin.Get("/v1/usage/report?by=rack")->status, 400);
  const std::string scratch = tmp.path();
  auto csv = RunWithEnv({RotaBinary(), "report", "--since", "1h", "-o", "csv"}, server_->ClientEnv(), scratch);
  EXPECT_EQ(csv.exit_code, 0) << csv.err;
  EXPECT_EQ(csv.out.rfind("user,jobs,gpu_hours,", 0), 0u) << csv.out;
  EXPECT_NE(csv.out.find("\ntotal,1,"), std::string::npos) << csv.out;
  auto seff = RunWithEnv({RotaBinary(), "report", "job", std::to_string(id)}, server_->ClientEnv(), scratch);
  EXPECT_EQ(seff.exit_code, 0) << seff.err;
  EXPECT_NE(seff.out.find("1xH100"), std::string::npos) << seff.out;
  EXPECT_NE(seff.out.find("right size: "), std::string::npos) << seff.out;
  auto bad = RunWithEnv({RotaBinary(), "report", "--since", "1h", "-o", "yaml"}, server_->ClientEnv(), scratch);
  EXPECT_EQ(bad.exit_code, 2);
  // Another user sees none of the admin's jobs in a report, nor their usage.
  const std::string bob =
      json::parse(admin.Post("/v1/tokens", R"({"user": "bob", "role": "user"})", "application/json")->body)["token"];
  auto as_bob = json::parse(server_->Http(bob).Get("/v1/usage/report?since=1h")->body);
  EXPECT_TRUE(as_bob["rows"].empty()) << as_bob.dump();
  EXPECT_EQ(as_bob["total"]["jobs"], 0);
}

}  // namespace
}  // namespace rota::testing
