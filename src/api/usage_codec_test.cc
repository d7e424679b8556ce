#include "api/usage_codec.h"

#include <gtest/gtest.h>

namespace rota::api {
namespace {

TEST(UsageCodec, ARecordRoundTripsAnyTextAndABrokenOneNamesItsField) {
  UsageRecord r;
  r.job = JobId(42);
  r.attempt = 3;
  r.name = "train\twith a tab, a \\ and\na newline";
  r.user = "alice";
  r.queue = "research";
  r.array = JobId(40);
  r.end = "preempted";
  r.reason = "preempted for job 50";
  r.started_at = 1'000'000;
  r.ended_at = 7'000'000;
  r.gpu_model = "H100";
  r.gpu_memory = 81920;
  r.gpus = 8;
  r.cpu = 16000;
  r.memory = 65536;
  r.replicas = 1;
  r.preemptions = 1;
  r.lost_work_s = 5;
  r.activity.Add(40, 100);
  r.gpu_memory_peak = 10000;
  r.energy_mj = 123'456'789'012;
  r.cpu_used_us = 9'000'000;
  r.cpu_throttled_us = 10;
  r.memory_peak = 2048;
  auto back = DecodeUsage(EncodeUsage(r));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(*back, r);
  std::string text = EncodeUsage(r);
  EXPECT_EQ(text.find('\n'), std::string::npos);  // one line
  text.replace(text.find("\tH100\t81920\t8\t"), 15, "\tH100\t81920\tx\t");
  auto bad = DecodeUsage(text);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(), "usage record: gpus: malformed");
  EXPECT_EQ(DecodeUsage(EncodeUsage(r).substr(0, 40)).status().code(), StatusCode::kDataLoss);
  EXPECT_FALSE(DecodeUsage("{").ok());
  EXPECT_FALSE(DecodeUsage(EncodeUsage(r) + "\t1").ok());
}

TEST(UsageCodec, ACostTravelsAndARecordFromBeforeCostsHasNone) {
  UsageRecord r;
  r.job = JobId(7);
  r.gpus = 1;
  r.cost_micros = 2'490'000;
  auto back = DecodeUsage(EncodeUsage(r));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->cost_micros, 2'490'000);
  // A record written before costs ends at the memory peak.
  std::string old = EncodeUsage(r);
  old.erase(old.rfind('\t'));
  auto before = DecodeUsage(old);
  ASSERT_TRUE(before.ok()) << before.status().ToString();
  EXPECT_EQ(before->cost_micros, -1);
  std::string bad = old + "\tlots";
  EXPECT_EQ(DecodeUsage(bad).status().message(), "usage record: cost: malformed");
}

}  // namespace
}  // namespace rota::api
