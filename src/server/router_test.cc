#include "server/router.h"

#include <gtest/gtest.h>

namespace rota::server {
namespace {

TEST(SumPrometheus, SumsANamesSeriesOverTheirLabels) {
  const std::string text = R"(# HELP vllm:num_requests_waiting Requests waiting.
# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{model_name="llama",engine="0"} 3
vllm:num_requests_waiting{model_name="a} b \" c",engine="1"} 2.5 1700000000000
vllm:num_requests_waiting_total 100
vllm:gpu_cache_usage_perc 0.75
other 9
vllm:gpu_cache_usage_perc{x="1"} NaN
vllm:gpu_cache_usage_perc{x="2"} oops
)";
  const auto sums = SumPrometheus(text, {"vllm:num_requests_waiting", "vllm:gpu_cache_usage_perc", "absent"});
  EXPECT_EQ(sums.size(), 2u);
  EXPECT_DOUBLE_EQ(sums.at("vllm:num_requests_waiting"), 5.5);
  EXPECT_DOUBLE_EQ(sums.at("vllm:gpu_cache_usage_perc"), 0.75);  // NaN and junk skipped
  EXPECT_FALSE(sums.count("absent"));
}

}  // namespace
}  // namespace rota::server
