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

// What execve could not carry is refused at submission, naming the field
// (a NUL would cut an argument, '=' in a name would change the variable);
// a job already stored is not re-judged by it.
TEST(JobSpec, ANewJobsCommandAndEnvironmentMustBeWhatExecveCarries) {
  JobSpec s = Valid();
  s.tasks[0].command = {"sh", std::string("a\0b", 3)};
  EXPECT_EQ(ValidateNewJobSpec(s).message(), "tasks[0].command[1]: must not hold a NUL byte");
  EXPECT_TRUE(ValidateJobSpec(s).ok());
  s = Valid();
  s.tasks[0].env = {{"A=B", "x"}};
  EXPECT_EQ(ValidateNewJobSpec(s).message(), "tasks[0].env: a variable's name must be non-empty, without '=' or a NUL byte");
  s.tasks[0].env = {{"", "x"}};
  EXPECT_FALSE(ValidateNewJobSpec(s).ok());
  s.tasks[0].env = {{"TOKEN", std::string("x\0LD_PRELOAD=/evil.so", 21)}};
  EXPECT_EQ(ValidateNewJobSpec(s).message(), "tasks[0].env.TOKEN: must not hold a NUL byte");
  s.tasks[0].env = {{"TOKEN", "a=b=c"}};
  EXPECT_TRUE(ValidateNewJobSpec(s).ok());
}

// A host path with a NUL is one path to allowed_mounts' check ("/\0/../data"
// reads as /data) and another to the kernel ("/"): refused, as any control
// character in a mount or rootfs.
TEST(JobSpec, ANewJobsMountsAndRootfsHoldNoControlCharacters) {
  JobSpec s = Valid();
  s.mounts = {{std::string("/\0/../data", 10), "/data", true}};
  EXPECT_EQ(ValidateNewJobSpec(s).message(),
            "mounts[0].source: must not hold control characters (a NUL, newline, ...); character 2 is byte 0");
  EXPECT_TRUE(ValidateJobSpec(s).ok());  // (a stored job is not re-judged)
  s.mounts = {{"/data", "/da\nta", true}};
  EXPECT_EQ(ValidateNewJobSpec(s).message(),
            "mounts[0].target: must not hold control characters (a NUL, newline, ...); character 4 is byte 10");
  s = Valid();
  s.tasks[0].command = {"python3", "train.py"};
  s.tasks[0].rootfs = std::string("/\0/../images/x", 14);
  EXPECT_EQ(ValidateNewJobSpec(s).message(),
            "tasks[0].rootfs: must not hold control characters (a NUL, newline, ...); character 2 is byte 0");
  s.tasks[0].rootfs = "/images/x";
  EXPECT_TRUE(ValidateNewJobSpec(s).ok());
}

// Inside a container /rota is the job's directory, read-only (the agent's;
// only /rota/work is the task's): no mount goes there.
TEST(JobSpec, ANewJobsMountsStayOutOfRota) {
  JobSpec s = Valid();
  for (const char* target : {"/rota", "/rota/data", "/x/../rota/work", "/rota/"}) {
    s.mounts = {{"/data", target, true}};
    EXPECT_EQ(ValidateNewJobSpec(s).message(),
              std::string("mounts[0].target: '") + target +
                  "' is within /rota, the job's own directory in a container (read-only; its work/ is the task's): "
                  "mount elsewhere")
        << target;
    EXPECT_TRUE(ValidateJobSpec(s).ok());  // (a stored job is not re-judged)
  }
  s.mounts = {{"/data", "/rotation", true}};
  EXPECT_TRUE(ValidateNewJobSpec(s).ok());
}

// A service's probe paths and durations are judged when it is submitted or
// applied; one stored before these rules still loads.
TEST(JobSpec, AServicesProbeIsCheckedWhenNewOnly) {
  JobSpec s = Valid();
  s.kind = JobKind::kService;
  s.service.port = 8000;
  s.service.max_replicas = 2;
  s.service.min_replicas = 1;
  s.elastic_min_replicas = 1;
  s.tasks[0].command = {"serve"};
  ASSERT_TRUE(ValidateNewJobSpec(s).ok()) << ValidateNewJobSpec(s).ToString();
  s.service.readiness.path = "/h\r\nX: 1";
  EXPECT_EQ(ValidateNewJobSpec(s).message(),
            "service.readiness.path: must be a URL path of visible ASCII characters (percent-encode others), without "
            "'#'; character 3 is control character 13");
  EXPECT_TRUE(ValidateJobSpec(s).ok());
  s.service.readiness.path = "/";
  s.service.readiness.period = 100LL * 365 * 24 * 3600 * kMicrosPerSecond;
  EXPECT_EQ(ValidateNewJobSpec(s).message(), "service.readiness.period: must be at most 1h");
  EXPECT_TRUE(ValidateJobSpec(s).ok());
}

// What the kernel would refuse to start is refused at submission too, not
// accepted and then failed on the node: an empty program, an argument or a
// variable past MAX_ARG_STRLEN, more than the total a program starts with.
TEST(JobSpec, ANewJobsCommandAndEnvironmentFitWhatTheKernelStarts) {
  JobSpec s = Valid();
  s.tasks[0].command = {""};
  EXPECT_EQ(ValidateNewJobSpec(s).message(), "tasks[0].command[0]: must name the program to run (it is empty)");
  s.tasks[0].command = {"echo", ""};  // (an empty argument is an argument)
  EXPECT_TRUE(ValidateNewJobSpec(s).ok());
  s.tasks[0].command = {"echo", std::string(kMaxExecString, 'x')};
  EXPECT_TRUE(ValidateNewJobSpec(s).ok());
  s.tasks[0].command = {"echo", std::string(kMaxExecString + 1, 'x')};
  EXPECT_EQ(ValidateNewJobSpec(s).message(), "tasks[0].command[1]: is 131072 bytes; an argument may be at most 131071 (the kernel's limit)");
  s = Valid();
  s.tasks[0].env = {{"BIG", std::string(kMaxExecString - 4, 'x')}};  // BIG=... is the limit
  EXPECT_TRUE(ValidateNewJobSpec(s).ok());
  s.tasks[0].env = {{"BIG", std::string(kMaxExecString - 3, 'x')}};
  EXPECT_EQ(ValidateNewJobSpec(s).message(), "tasks[0].env.BIG: NAME=value is 131072 bytes; a variable may be at most 131071 (the kernel's limit)");
  s = Valid();
  s.tasks[0].command = {"echo"};
  for (int i = 0; i < 9; ++i) s.tasks[0].command.push_back(std::string(120'000, 'x'));
  EXPECT_EQ(ValidateNewJobSpec(s).message(), "tasks[0]: command and env are 1080014 bytes in all; at most 1048576 (the kernel's limit on what a program starts with)");
  EXPECT_TRUE(ValidateJobSpec(s).ok());  // (a job already stored is not judged again)
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

TEST(ParseArrayRange, ReadsSbatchArraySyntax) {
  struct Case {
    const char* text;
    int64_t count, first;
    int32_t max_running;
    bool array;
  } cases[] = {
      {"1", 1, 0, 0, false},  {"5", 5, 0, 0, true},     {"0-99%8", 100, 0, 8, true},
      {"5-9", 5, 5, 0, true}, {"3-3", 1, 3, 0, true},   {"20%4", 20, 0, 4, true},
  };
  for (const Case& c : cases) {
    auto r = ParseArrayRange(c.text);
    ASSERT_TRUE(r.ok()) << c.text << ": " << r.status().ToString();
    EXPECT_EQ(r->count, c.count) << c.text;
    EXPECT_EQ(r->first_index, c.first) << c.text;
    EXPECT_EQ(r->max_running, c.max_running) << c.text;
    EXPECT_EQ(r->is_array(), c.array) << c.text;
  }
  const std::pair<const char*, const char*> bad[] = {
      {"9-5", "runs backwards"},
      {"1-x", "is not a range"},   {"5%0", "no limit of 1 or more"}, {"1,3,5", "is not a whole number or a range"},
      {"0-20000000", "goes past index 10000000"}, {"", "is not a whole number"},
  };
  for (const auto& [text, why] : bad) {
    auto r = ParseArrayRange(text);
    ASSERT_FALSE(r.ok()) << text;
    const std::string m(r.status().message());
    EXPECT_EQ(m.rfind(std::string("count: '") + text + "' ", 0), 0u) << m;
    EXPECT_NE(m.find(why), std::string::npos) << m;
    EXPECT_NE(m.find("like sbatch --array=0-99%8"), std::string::npos) << m;
  }
}

// Every rule a spec breaks is listed, the first as ValidateJobSpec returns it.
TEST(JobSpecErrors, ListsEveryBrokenRuleFirstAsValidateDoes) {
  JobSpec s;
  s.name = "j";
  s.queue = "default";
  s.tasks.push_back({.name = "w", .gpus = 1});
  s.tasks.push_back({.name = "w", .gpus = -1});
  s.time_limit = -5;
  const std::vector<Status> all = JobSpecErrors(s, true);
  ASSERT_EQ(all.size(), 3u);
  EXPECT_EQ(all[0].message(), "tasks[1].name: duplicate task name 'w'");
  EXPECT_EQ(all[1].message(), "tasks[1].gpus: must not be negative");
  EXPECT_EQ(all[2].message(), "time_limit: must not be negative");
  EXPECT_EQ(ValidateJobSpec(s).message(), all[0].message());
  EXPECT_TRUE(JobSpecErrors(JobSpec{.name = "ok", .queue = "q", .tasks = {{.name = "t", .gpus = 1}}}, true).empty());
}

}  // namespace
}  // namespace rota
