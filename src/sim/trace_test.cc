#include "sim/trace.h"

#include <gtest/gtest.h>

namespace rota::sim {
namespace {

TEST(TraceTest, TiresiasFormatSortsAndShiftsToZero) {
  auto jobs = ParseTrace(TraceFormat::kTiresias,
                         "job_id,num_gpu,submit_time,iterations,model_name,duration,interval\n"
                         "0,1,100,10,vgg16,50,0\n"
                         "1,4,90,10,vgg16,60,0\n",
                         "t.csv");
  ASSERT_TRUE(jobs.ok()) << jobs.status().ToString();
  ASSERT_EQ(jobs->size(), 2u);
  EXPECT_EQ((*jobs)[0].name, "1");
  EXPECT_EQ((*jobs)[0].submit, 0);
  EXPECT_EQ((*jobs)[1].submit, 10 * kMicrosPerSecond);
  EXPECT_EQ((*jobs)[0].gpus, 4);
  EXPECT_EQ((*jobs)[1].duration, 50 * kMicrosPerSecond);
}

TEST(TraceTest, PhillySplitsLargeJobsIntoServers) {
  auto jobs = ParseTrace(TraceFormat::kPhilly,
                         "timestamp,duration,num_gpus,gpu_time,cluster\n"
                         "2017-10-09 07:01:55,66.0,16,1056.0,11cb48\n"
                         "2017-10-09 07:00:55,10.5,12,1056.0,6214e9\n",
                         "p.csv");
  ASSERT_TRUE(jobs.ok()) << jobs.status().ToString();
  EXPECT_EQ((*jobs)[0].queue, "6214e9");
  EXPECT_EQ((*jobs)[0].gpus, 4);
  EXPECT_EQ((*jobs)[0].replicas, 3);
  EXPECT_EQ((*jobs)[0].duration, 10'500'000);
  EXPECT_EQ((*jobs)[1].submit, 60 * kMicrosPerSecond);
  EXPECT_EQ((*jobs)[1].TotalGpus(), 16);
}

TEST(TraceTest, RotaCsvAndJsonLinesAgree) {
  auto csv = ParseTrace(TraceFormat::kRota,
                        "name,submit_s,duration_s,gpus,replicas,queue,priority,checkpoint_s,time_limit_s,gpu_model\n"
                        "a,0,3600,8,2,research,700,600,7200,H100\n",
                        "r.csv");
  auto jsonl = ParseTrace(TraceFormat::kRota,
                          R"({"name":"a","submit_s":0,"duration_s":3600,"gpus":8,"replicas":2,"queue":"research",)"
                          R"("priority":700,"checkpoint_s":600,"time_limit_s":7200,"gpu_model":"H100"})",
                          "r.jsonl");
  ASSERT_TRUE(csv.ok()) << csv.status().ToString();
  ASSERT_TRUE(jsonl.ok()) << jsonl.status().ToString();
  for (const auto* jobs : {&*csv, &*jsonl}) {
    const TraceJob& j = (*jobs)[0];
    EXPECT_EQ(j.TotalGpus(), 16);
    EXPECT_EQ(j.queue, "research");
    EXPECT_EQ(j.priority, 700);
    EXPECT_EQ(j.checkpoint_interval, 600 * kMicrosPerSecond);
    EXPECT_EQ(j.time_limit, 7200 * kMicrosPerSecond);
    ASSERT_EQ(j.gpu_models.size(), 1u);
  }
}

TEST(TraceTest, OpenbPodsKeepTheirShare) {
  auto jobs = ParseTrace(TraceFormat::kOpenb,
                         "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\n"
                         "p0,6000,12288,1,460,V100M16|V100M32\n"
                         "p1,4000,1024,0,0,\n",
                         "pods.csv");
  ASSERT_TRUE(jobs.ok()) << jobs.status().ToString();
  EXPECT_EQ((*jobs)[0].gpu_milli, 460);
  EXPECT_EQ((*jobs)[0].gpu_models, (std::vector<std::string>{"V100M16", "V100M32"}));
  EXPECT_EQ((*jobs)[0].TotalGpuMilli(), 460);
  EXPECT_EQ((*jobs)[1].TotalGpuMilli(), 0);
}

TEST(TraceTest, BadInputNamesFileLineAndColumn) {
  struct Case {
    TraceFormat format;
    const char* text;
    const char* error;
  } cases[] = {
      {TraceFormat::kTiresias, "job_id,num_gpu,submit_time,duration\n0,x,0,5\n", "t.csv:2: num_gpu: not an integer: 'x'"},
      {TraceFormat::kTiresias, "job_id,num_gpu,submit_time\n", "t.csv:1: header: missing column 'duration'"},
      {TraceFormat::kTiresias, "job_id,num_gpu,submit_time,duration\n0,1,-5,5\n", "t.csv:2: submit_time: must not be negative"},
      {TraceFormat::kRota, "name,submit_s,duration_s,gpus\na,0,1,65\n", "t.csv:2: gpus: 65 is out of range [0, 64]"},
      {TraceFormat::kRota, "{\"name\":\"a\",\"submit_s\":0,\"gpus\":1}\n", "t.csv:1: duration_s: missing"},
      {TraceFormat::kRota, "{not json\n", "t.csv:1: line: not a JSON object"},
      {TraceFormat::kPhilly, "timestamp,duration,num_gpus,cluster\nyesterday,1,1,a\n", "t.csv:2: timestamp: not 'YYYY-MM-DD HH:MM:SS'"},
      {TraceFormat::kOpenb, "name,cpu_milli,memory_mib,num_gpu,gpu_milli\np,1,1,2,500\n", "t.csv:2: gpu_milli: a share below 1000 needs num_gpu 1"},
      {TraceFormat::kTiresias, "job_id,num_gpu,submit_time,duration\n", "t.csv: no jobs"},
  };
  for (const Case& c : cases) {
    auto jobs = ParseTrace(c.format, c.text, "t.csv");
    ASSERT_FALSE(jobs.ok()) << c.text;
    EXPECT_NE(jobs.status().message().find(c.error), std::string::npos) << jobs.status().message();
  }
}

TEST(TraceTest, SyntheticIsDeterministicAndNearItsLoad) {
  auto a = SyntheticPhilly(5000, 512, 0.8, 64, 7);
  auto b = SyntheticPhilly(5000, 512, 0.8, 64, 7);
  ASSERT_EQ(a.size(), 5000u);
  double gpu_seconds = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].submit, b[i].submit);
    EXPECT_EQ(a[i].duration, b[i].duration);
    gpu_seconds += static_cast<double>(a[i].duration) / kMicrosPerSecond * static_cast<double>(a[i].TotalGpus());
  }
  const double span = static_cast<double>(a.back().submit) / kMicrosPerSecond;
  const double load = gpu_seconds / (span * 512);
  EXPECT_GT(load, 0.4);  // heavy-tailed: a sample's load wanders around the target
  EXPECT_LT(load, 1.6);
}

}  // namespace
}  // namespace rota::sim

namespace rota::sim {
namespace {

TEST(TraceTest, ClusterSpecAndGpuSecondsLists) {
  auto nodes = ParseClusterSpec("num_switch,num_node_p_switch,num_gpu_p_node,num_cpu_p_node,mem_p_node\n2,3,8,64,256\n", "n.csv");
  ASSERT_TRUE(nodes.ok()) << nodes.status().ToString();
  ASSERT_EQ(nodes->size(), 6u);
  EXPECT_EQ((*nodes)[5].labels.at("rack"), "sw1");
  EXPECT_EQ((*nodes)[0].gpus, 8);
  auto bad = ParseClusterSpec("num_switch,num_node_p_switch,num_gpu_p_node\n1,8abc,8\n", "n.csv");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(), "n.csv:2: num_node_p_switch: not an integer: '8abc'");
  auto samples = ParseGpuSeconds("duration\r\n121\r\n3250\r\n", "y.csv");
  ASSERT_TRUE(samples.ok()) << samples.status().ToString();
  EXPECT_EQ(*samples, (std::vector<int64_t>{121, 3250}));
  auto nan = ParseGpuSeconds("duration\nnan\n", "y.csv");
  ASSERT_FALSE(nan.ok());
  EXPECT_EQ(nan.status().message(), "y.csv:2: gpu_seconds: not an integer: 'nan'");
  EXPECT_FALSE(ParseGpuSeconds("duration\n", "y.csv").ok());
}

}  // namespace
}  // namespace rota::sim
