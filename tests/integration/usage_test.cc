// Accounting through the real binaries: a server and three agents (declared
// GPUs: their meter integrates the simulated power, and utilisation follows
// the allocation), a job that runs a few seconds, its usage record, the
// period report (table, JSON and CSV), and who may see what.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "harness.h"

namespace rota::testing {
namespace {

// Registered nodes' H100s cost 3600 an hour (a unit a second, so that a few
// seconds' cost shows in cents).
class Accounting : public AgentCluster {
 protected:
  std::vector<std::string> ExtraServerArgs() override {
    return ConfigArgs("accounting: {currency: USD, gpu_hour_price: {H100: 3600}}\n");
  }
};

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
  const std::string node = Job(id)["placement"][0]["node"];
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
  // Priced: one GPU for its seconds, a unit each.
  EXPECT_GE(a["cost"].get<double>(), a["seconds"].get<double>() - 0.01) << a.dump();
  EXPECT_LE(a["cost"].get<double>(), a["seconds"].get<double>() + 1.01) << a.dump();
  EXPECT_EQ(usage["currency"], "USD");

  // The node's GPU history holds the minute it ran in: its GPU busy for part
  // of it, drawing power.
  auto history = json::parse(admin.Get("/v1/nodes/" + node + "/history?since=1h")->body);
  EXPECT_EQ(history["step_s"], 60) << history.dump();
  int64_t busy = 0, joules = 0;
  for (const auto& g : history["gpus"]) {
    for (const auto& p : g["points"]) {
      if (p[2].get<int>() > 0) ++busy;
      joules += p[4].get<int64_t>();
    }
  }
  EXPECT_GE(busy, 1) << history.dump();
  EXPECT_GT(joules, 300) << history.dump();
  EXPECT_EQ(admin.Get("/v1/nodes/" + node + "/history?step=week")->status, 400);
  EXPECT_EQ(admin.Get("/v1/nodes/nowhere/history")->status, 404);

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
  EXPECT_NE(csv.out.find(",cost,cost_idle\n"), std::string::npos) << csv.out;
  auto table = RunWithEnv({RotaBinary(), "report", "--since", "1h"}, server_->ClientEnv(), scratch);
  EXPECT_NE(table.out.find("COST USD"), std::string::npos) << table.out;
  auto gpus = RunWithEnv({RotaBinary(), "node", "history", node, "--since", "1h"}, server_->ClientEnv(), scratch);
  EXPECT_EQ(gpus.exit_code, 0) << gpus.err;
  EXPECT_NE(gpus.out.find("ACTIVITY OVER TIME"), std::string::npos) << gpus.out;
  EXPECT_NE(gpus.out.find("\xe2\x96"), std::string::npos) << gpus.out;  // a bar (U+2581..U+2588)
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

// A job the job retention forgot keeps its usage: GET /v1/jobs/ID/usage
// and `rota report job ID` answer from its records, for its owner and admins
// only (another user gets the 404 a forgotten job gets).
class ShortRetention : public AgentCluster {
 protected:
  std::vector<std::string> ExtraServerArgs() override { return {"--job-retention", "2s"}; }
};

TEST_F(ShortRetention, AForgottenJobsUsageStaysInItsReport) {
  auto admin = server_->Admin();
  auto r = admin.Post("/v1/jobs", "name: short\ntasks: [{gpus: 1, command: [sleep, '1']}]\n", "application/yaml");
  ASSERT_EQ(r->status, 201) << r->body;
  const std::string id = std::to_string(json::parse(r->body)["id"].get<int>());
  int status = 200;
  for (int i = 0; i < 300 && status == 200; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    status = admin.Get("/v1/jobs/" + id)->status;
  }
  ASSERT_EQ(status, 404) << "job " << id << " was not forgotten within 15 s of a 2 s retention";
  auto usage = admin.Get("/v1/jobs/" + id + "/usage");
  ASSERT_EQ(usage->status, 200) << usage->body;
  const json report = json::parse(usage->body);
  ASSERT_EQ(report["attempts"].size(), 1u) << report.dump();
  EXPECT_EQ(report["attempts"][0]["end"], "succeeded");
  EXPECT_EQ(report["attempts"][0]["gpus"], 1);
  auto seff = RunWithEnv({RotaBinary(), "report", "job", id}, server_->ClientEnv(), tmp.path());
  EXPECT_EQ(seff.exit_code, 0) << seff.err;
  EXPECT_NE(seff.out.find("1xH100"), std::string::npos) << seff.out;
  const std::string bob =
      json::parse(admin.Post("/v1/tokens", R"({"user": "bob", "role": "user"})", "application/json")->body)["token"];
  auto as_bob = server_->Http(bob).Get("/v1/jobs/" + id + "/usage");
  EXPECT_EQ(as_bob->status, 404) << as_bob->body;
  EXPECT_EQ(admin.Get("/v1/jobs/999999/usage")->status, 404);  // never issued
}

}  // namespace
}  // namespace rota::testing
