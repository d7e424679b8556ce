#include "server/report.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace rota::server {
namespace {

constexpr TimePoint kHour = 3600 * kMicrosPerSecond;
constexpr TimePoint kNow = 1'800'000'000LL * kMicrosPerSecond;

UsageRecord Priced(uint64_t job, std::string user, int64_t cost_micros, int32_t idle_share_pct) {
  UsageRecord r;
  r.job = JobId(job);
  r.user = std::move(user);
  r.queue = "q";
  r.gpu_model = "H100";
  r.gpus = 2;
  r.replicas = 1;
  r.started_at = kNow - 2 * kHour;
  r.ended_at = kNow - kHour;
  r.activity.Add(0, idle_share_pct);           // idle samples
  r.activity.Add(90, 100 - idle_share_pct);    // busy ones
  r.cost_micros = cost_micros;
  return r;
}

TEST(Report, CostsAddUpWithTheirIdlePartAndUnpricedAttemptsCostNothing) {
  // alice: two GPU-hours at 2.50, a quarter of them idle; bob ran where no
  // price is declared.
  const std::vector<UsageRecord> records = {Priced(1, "alice", 5'000'000, 25), Priced(2, "bob", -1, 0)};
  ReportOptions options;
  options.currency = "USD";
  const auto report = BuildReport(records, kNow - 24 * kHour, kNow, kNow, options);
  EXPECT_EQ(report["currency"], "USD");
  ASSERT_EQ(report["rows"].size(), 2u);
  EXPECT_EQ(report["rows"][0]["key"], "alice");
  EXPECT_DOUBLE_EQ(report["rows"][0]["cost"].get<double>(), 5.0);
  EXPECT_DOUBLE_EQ(report["rows"][0]["cost_idle"].get<double>(), 1.25);
  EXPECT_TRUE(report["rows"][1]["cost"].is_null()) << report.dump();  // bob: no price
  EXPECT_DOUBLE_EQ(report["total"]["cost"].get<double>(), 5.0);
  // Hour by hour: alice's two GPUs in the hour before the last, 70% busy.
  EXPECT_EQ(report["timeline"]["step_s"], 3600);
  ASSERT_EQ(report["timeline"]["steps"], 24);
  const auto& alice = report["timeline"]["series"]["alice"];
  EXPECT_DOUBLE_EQ(alice["held"][22].get<double>(), 2.0) << alice.dump();
  EXPECT_DOUBLE_EQ(alice["used"][22].get<double>(), 1.4) << alice.dump();
  EXPECT_DOUBLE_EQ(alice["held"][21].get<double>(), 0.0);
  EXPECT_DOUBLE_EQ(alice["held"][23].get<double>(), 0.0);
  // A month is drawn in steps of 4 hours (at most 200 of them).
  EXPECT_EQ(BuildReport(records, kNow - 30 * 24 * kHour, kNow, kNow, options)["timeline"]["step_s"], 4 * 3600);
  // A period that holds half the attempt holds half its cost.
  const auto half = BuildReport(records, kNow - 90 * 60 * kMicrosPerSecond, kNow, kNow, options);
  EXPECT_DOUBLE_EQ(half["rows"][0]["cost"].get<double>(), 2.5);
  const auto job = BuildJobReport(records, JobId(1), kNow, options);
  EXPECT_DOUBLE_EQ(job["cost"].get<double>(), 5.0);
  EXPECT_EQ(job["currency"], "USD");
  EXPECT_FALSE(BuildJobReport(records, JobId(2), kNow, options).contains("cost"));
}

// Rounded figures print as the decimals they are (a table and -o json show
// 0.009, not 0.009000000000000001): 32.4 GPU-seconds on one GPU.
TEST(Report, RoundedFiguresPrintAsTheirDecimals) {
  UsageRecord r = Priced(1, "alice", -1, 0);
  r.gpus = 1;
  r.started_at = kNow - 32'400'000;  // 32.4 s: 0.009 GPU-hours
  r.ended_at = kNow;
  const auto report = BuildReport({r}, kNow - 24 * kHour, kNow, kNow, ReportOptions{});
  EXPECT_EQ(report["rows"][0]["gpu_hours"].dump(), "0.009");
  EXPECT_EQ(report["total"]["gpu_hours"].dump(), "0.009");
}

}  // namespace
}  // namespace rota::server
