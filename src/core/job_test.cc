#include "core/job.h"

#include "core/cluster_config.h"

#include <gtest/gtest.h>

namespace rota {
namespace {

JobSpec Valid() {
  JobSpec s;
  s.name = "train";
  TaskGroupSpec t;
  t.name = "worker";
  t.replicas = 2;
  t.gpus = 8;
  s.tasks.push_back(t);
  return s;
}

TEST(JobSpec, ValidSpecPasses) {
  EXPECT_TRUE(ValidateJobSpec(Valid()).ok());
  EXPECT_EQ(Valid().TotalGpus(), 16);
  EXPECT_EQ(Valid().TotalReplicas(), 2);
}

TEST(JobSpec, ErrorsNameTheField) {
  JobSpec s = Valid();
  s.tasks[0].replicas = 0;
  EXPECT_EQ(ValidateJobSpec(s).message(), "tasks[0].replicas: must be at least 1");
  s = Valid();
  s.tasks[0].gpus = -1;
  EXPECT_EQ(ValidateJobSpec(s).message(), "tasks[0].gpus: must not be negative");
  s = Valid();
  s.tasks[0].gpus = 65;
  EXPECT_EQ(ValidateJobSpec(s).message(), "tasks[0].gpus: must be at most 64 per replica");
  s = Valid();
  s.name = "bad name";
  EXPECT_EQ(ValidateJobSpec(s).code(), StatusCode::kInvalidArgument);
  s = Valid();
  s.tasks.push_back(s.tasks[0]);
  EXPECT_EQ(ValidateJobSpec(s).message(), "tasks[1].name: duplicate task name 'worker'");
  s = Valid();
  s.elastic_min_replicas = 3;
  EXPECT_EQ(ValidateJobSpec(s).message(), "elastic.min_replicas: must not exceed the job's replicas (2)");
  s = Valid();
  s.tasks[0].gpus = 0;
  EXPECT_EQ(ValidateJobSpec(s).message(), "tasks[0]: asks for nothing: set gpus, gpu, cpu or memory");
}

TEST(SetPriority, ANumberOrAClassName) {
  JobSpec s = Valid();
  ASSERT_TRUE(SetPriority("750", &s).ok());
  EXPECT_EQ(s.priority, 750);
  EXPECT_EQ(s.priority_class, "");
  ASSERT_TRUE(SetPriority("high", &s).ok());
  EXPECT_EQ(s.priority_class, "high");
  EXPECT_EQ(SetPriority("-1", &s).message(), "priority: must be between 0 and 1000000000");
  EXPECT_EQ(SetPriority("5x", &s).message(), "priority: '5x' is neither a number nor a priority class name");
}

TEST(ResolveJobPolicy, AJobThatNamesNoQueueIsToldToNameOne) {
  ClusterConfig c;
  c.queues = {{.name = "a"}, {.name = "b"}};
  JobSpec s = Valid();  // queue left as "default", what a spec without queue: gets
  EXPECT_EQ(ResolveJobPolicy(c, &s).message(), "queue: required on this cluster, which has no queue 'default': name one of a, b");
  s.queue = "c";
  EXPECT_EQ(ResolveJobPolicy(c, &s).message(), "queue: unknown leaf queue 'c' (queues: a, b)");
  s.queue = "a";
  EXPECT_TRUE(ResolveJobPolicy(c, &s).ok());
}

}  // namespace
}  // namespace rota
