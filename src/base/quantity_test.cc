#include "base/quantity.h"

#include <gtest/gtest.h>

namespace rota {
namespace {

TEST(Quantity, ParsesCpuExactly) {
  EXPECT_EQ(*ParseMilliCpu("32"), 32000);
  EXPECT_EQ(*ParseMilliCpu("0.5"), 500);
  EXPECT_EQ(*ParseMilliCpu("1500m"), 1500);
  EXPECT_FALSE(ParseMilliCpu("0.0005").ok());
  EXPECT_FALSE(ParseMilliCpu("-1").ok());
  EXPECT_FALSE(ParseMilliCpu("abc").ok());
  EXPECT_FALSE(ParseMilliCpu("").ok());
}

TEST(Quantity, ParsesMemoryInMiB) {
  EXPECT_EQ(*ParseMemoryMiB("256Gi"), 262144);
  EXPECT_EQ(*ParseMemoryMiB("1Ti"), 1048576);
  EXPECT_EQ(*ParseMemoryMiB("512Mi"), 512);
  EXPECT_EQ(*ParseMemoryMiB("1.5Gi"), 1536);
  EXPECT_EQ(*ParseMemoryMiB("1024"), 1024);
  EXPECT_EQ(*ParseMemoryMiB("1G"), 954);  // 10^9 bytes rounded up to MiB
  EXPECT_FALSE(ParseMemoryMiB("10Qi").ok());
  EXPECT_FALSE(ParseMemoryMiB("99999999999999999Ti").ok());
}

TEST(Quantity, ParsesDurations) {
  EXPECT_EQ(*ParseDuration("90s"), 90 * kMicrosPerSecond);
  EXPECT_EQ(*ParseDuration("48h"), 48LL * 3600 * kMicrosPerSecond);
  EXPECT_EQ(*ParseDuration("1h30m"), 5400 * kMicrosPerSecond);
  EXPECT_EQ(*ParseDuration("120"), 120 * kMicrosPerSecond);
  EXPECT_EQ(*ParseDuration("500ms"), 500000);
  EXPECT_FALSE(ParseDuration("5 minutes").ok());
  EXPECT_FALSE(ParseDuration("h").ok());
  // Too large, alone or summed (a client's time_limit must not wrap around).
  EXPECT_FALSE(ParseDuration("99999999999999999999").ok());
  std::string many;
  for (int i = 0; i < 5000; ++i) many += "26000d";  // each part allowed, the sum past 2^63
  const StatusOr<Duration> summed = ParseDuration(many);
  ASSERT_FALSE(summed.ok());
  EXPECT_EQ(summed.status().code(), StatusCode::kOutOfRange);
}

TEST(Quantity, FormatsRoundTrip) {
  EXPECT_EQ(FormatMilliCpu(32000), "32");
  EXPECT_EQ(FormatMilliCpu(2500), "2.5");
  EXPECT_EQ(FormatMemoryMiB(262144), "256Gi");
  EXPECT_EQ(FormatMemoryMiB(1048576), "1Ti");
  EXPECT_EQ(FormatMemoryMiB(100), "100Mi");
  EXPECT_EQ(FormatDuration(5400 * kMicrosPerSecond), "1h30m");
  EXPECT_EQ(*ParseDuration(FormatDuration(172800 * kMicrosPerSecond)), 172800 * kMicrosPerSecond);
}

}  // namespace
}  // namespace rota

namespace rota {
namespace {

TEST(Utf8, AcceptsWellFormedAndRejectsTheRest) {
  EXPECT_TRUE(IsValidUtf8("plain ascii"));
  EXPECT_TRUE(IsValidUtf8("gr\xc3\xbc\xc3\x9f \xe2\x82\xac \xf0\x9f\x9a\x80"));
  EXPECT_FALSE(IsValidUtf8("\xff"));
  EXPECT_FALSE(IsValidUtf8("\xc3"));           // truncated
  EXPECT_FALSE(IsValidUtf8("\xc0\xaf"));       // overlong '/'
  EXPECT_FALSE(IsValidUtf8("\xed\xa0\x80"));   // surrogate
  EXPECT_FALSE(IsValidUtf8("ok\xe2\x82"));      // truncated at the end
}

}  // namespace
}  // namespace rota

namespace rota {
namespace {

TEST(Time, ParsesAndFormatsUtc) {
  auto t = ParseTime("2026-11-29T12:00:00Z");
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  EXPECT_EQ(*t, 1795953600LL * kMicrosPerSecond);  // date -u -d 2026-11-29T12:00:00Z +%s
  EXPECT_EQ(FormatTime(*t), "2026-11-29T12:00:00.000Z");
  EXPECT_EQ(*ParseTime("2026-11-29T14:00:00+02:00"), *t);
  EXPECT_EQ(*ParseTime("2026-11-29T12:00:00.250Z"), *t + 250000);
  EXPECT_EQ(FormatTime(0), "1970-01-01T00:00:00.000Z");
  EXPECT_FALSE(ParseTime("yesterday").ok());
  EXPECT_FALSE(ParseTime("2026-13-01T00:00:00Z").ok());
  // Not a number, negative fields, a zone that is not digits: refused, not read as something else.
  EXPECT_FALSE(ParseTime("2026-11-29T12:00:nanZ").ok());
  EXPECT_FALSE(ParseTime("2026-11-29T12:00:infZ").ok());
  EXPECT_FALSE(ParseTime("2026-11-29T-1:-5:00Z").ok());
  EXPECT_FALSE(ParseTime("2026-11-29T12:00:00+ab:cd").ok());
  EXPECT_FALSE(ParseTime("2026-11-29T12:00:00+24:00").ok());
}

TEST(FormatSpan, RoundsToTwoUnitsAsPeopleReadThem) {
  EXPECT_EQ(FormatSpan(1197993 * 1000), "19m57s");  // the 1197993ms a reason once showed
  EXPECT_EQ(FormatSpan(45 * kMicrosPerSecond + 999999), "45s");
  EXPECT_EQ(FormatSpan(30 * 60 * kMicrosPerSecond), "30m");
  EXPECT_EQ(FormatSpan((5 * 3600 + 20 * 60 + 59) * kMicrosPerSecond), "5h20m");
  EXPECT_EQ(FormatSpan((2 * 86400 + 3 * 3600 + 1) * kMicrosPerSecond), "2d3h");
  EXPECT_EQ(FormatSpan(3600 * kMicrosPerSecond), "1h");
  EXPECT_EQ(FormatSpan(-5), "0s");
}

}  // namespace
}  // namespace rota
