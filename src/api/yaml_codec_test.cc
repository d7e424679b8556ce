#include "api/yaml_codec.h"

#include <gtest/gtest.h>

#include <algorithm>

namespace rota::api {
namespace {

constexpr const char* kJob = R"(
name: llama-8b-pretrain
queue: research/nlp
priority: high
tasks:
  - name: worker
    replicas: 4
    gpus: 8
    gpu_model: H100
    cpu: 32
    memory: 256Gi
    command: [torchrun, --nproc-per-node=8, train.py]
    env: {NCCL_DEBUG: INFO}
topology: {level: rack, mode: required}
elastic: {min_replicas: 2}
preemptible: true
checkpoint: {signal: SIGUSR1, grace: 120s}
restart: {policy: on-failure, max_restarts: 3}
time_limit: 48h
mounts: [{source: /datasets/c4, target: /data, read_only: true}]
node_selector: {rack: h100-r0}
)";

TEST(ParseJobSpec, ReadsTheDesignExample) {
  auto spec = ParseJobSpec(kJob, "job.yaml");
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  EXPECT_EQ(spec->name, "llama-8b-pretrain");
  EXPECT_EQ(spec->queue, "research/nlp");
  EXPECT_EQ(spec->priority_class, "high");
  ASSERT_EQ(spec->tasks.size(), 1u);
  EXPECT_EQ(spec->tasks[0].replicas, 4);
  EXPECT_EQ(spec->tasks[0].gpus, 8);
  EXPECT_EQ(spec->tasks[0].cpu, 32000);
  EXPECT_EQ(spec->tasks[0].memory, 256 * 1024);
  EXPECT_EQ(spec->tasks[0].command.size(), 3u);
  EXPECT_EQ(spec->tasks[0].env.at("NCCL_DEBUG"), "INFO");
  EXPECT_EQ(spec->topology.level, "rack");
  EXPECT_EQ(spec->topology.mode, TopologyMode::kRequired);
  EXPECT_EQ(spec->elastic_min_replicas, 2);
  EXPECT_TRUE(spec->preemptible);
  EXPECT_EQ(spec->checkpoint.grace, 120 * kMicrosPerSecond);
  EXPECT_EQ(spec->restart.policy, RestartPolicy::kOnFailure);
  EXPECT_EQ(spec->time_limit, 48LL * 3600 * kMicrosPerSecond);
  ASSERT_EQ(spec->mounts.size(), 1u);
  EXPECT_TRUE(spec->mounts[0].read_only);
  EXPECT_EQ(spec->node_selector.at("rack"), "h100-r0");
}

TEST(ParseJobSpec, JsonIsAcceptedToo) {
  auto spec = ParseJobSpec(R"({"name": "j", "priority": 700, "tasks": [{"gpus": 2}]})", "body");
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  EXPECT_EQ(spec->priority, 700);
  EXPECT_TRUE(spec->priority_class.empty());
  EXPECT_EQ(spec->tasks[0].name, "main");
}

void ExpectError(const char* text, const std::string& want) {
  auto spec = ParseJobSpec(text, "job.yaml");
  ASSERT_FALSE(spec.ok()) << text;
  EXPECT_EQ(spec.status().code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(spec.status().message(), want);
}

TEST(ParseJobSpec, ErrorsNameFileLineAndField) {
  ExpectError("name: j\ntasks:\n  - gpus: 2.5\n", "job.yaml:3:11: tasks[0].gpus: must be a whole number, got '2.5'");
  ExpectError("name: j\ntasks:\n  - gpus: 1\n    colour: red\n",
              "job.yaml:4:5: tasks[0].colour: unknown field (allowed: name, replicas, gpus, gpu, gpu_model, "
              "gpu_memory, cpu, memory, command, env, rootfs)");
  ExpectError("name: j\ntasks:\n  - gpus: -1\n", "job.yaml:3:11: tasks[0].gpus: must be between 0 and 64, got -1");
  ExpectError("name: j\ntasks:\n  - replicas: 0\n    gpus: 1\n",
              "job.yaml:3:15: tasks[0].replicas: must be between 1 and 100000, got 0");
  ExpectError("name: j\ntasks:\n  - memory: lots\n",
              "job.yaml:3:13: tasks[0].memory: 'lots' is not a valid memory quantity");
  ExpectError("name: j\ntasks: [{gpus: 1}]\ntopology: {level: rack, mode: maybe}\n",
              "job.yaml:3:31: topology.mode: must be required or preferred, got 'maybe'");
  ExpectError("name: j\n", "job.yaml:1:1: tasks: required (a list of task groups)");
  ExpectError("name: [unclosed\n", "job.yaml:2:1: not valid YAML: end of sequence flow not found");
  // A cluster-independent rule, located on its field.
  ExpectError("name: j\ntasks:\n  - name: w\n    gpus: 1\n  - name: w\n    gpus: 1\n",
              "job.yaml:5:11: tasks[1].name: duplicate task name 'w'");
  ExpectError("name: bad name\ntasks: [{gpus: 1}]\n",
              "job.yaml:1:7: name: must be 1-253 characters of letters, digits, '-', '_' or '.'");
}

TEST(ParseJobSpec, ReportsEveryErrorInTheFileAtOnceInLineOrder) {
  // Two fields of one task, an unknown field and a bad value further down:
  // all four, a line each, in the order of their lines.
  ExpectError("name: j\ntasks:\n  - gpus: 2.5\n    comand: [x]\n    memory: lots\nrestart: {policy: sometimes}\n",
              "job.yaml:3:11: tasks[0].gpus: must be a whole number, got '2.5'\n"
              "job.yaml:4:5: tasks[0].comand: unknown field (allowed: name, replicas, gpus, gpu, gpu_model, gpu_memory, cpu, "
              "memory, command, env, rootfs)\n"
              "job.yaml:5:13: tasks[0].memory: 'lots' is not a valid memory quantity\n"
              "job.yaml:6:19: restart.policy: must be never, on-failure or always, got 'sometimes'");
  // Errors in two task groups, and a field that comes before them in the
  // file but is checked after them.
  ExpectError("name: j\ntime_limit: soon\ntasks:\n  - gpus: x\n  - cpu: y\n",
              "job.yaml:2:13: time_limit: 'soon' is not a valid duration (e.g. 90s, 15m, 48h)\n"
              "job.yaml:4:11: tasks[0].gpus: must be a whole number, got 'x'\n"
              "job.yaml:5:10: tasks[1].cpu: 'y' is not a valid CPU quantity");
  // Once every field reads, every rule between fields that fails is named.
  ExpectError("name: j\ntasks:\n  - name: w\n    gpus: 1\n  - name: w\n  - name: v\n    gpus: 1\n    cpu: 0\n",
              "job.yaml:5:5: tasks[1]: asks for nothing: set gpus, gpu, cpu or memory\n"
              "job.yaml:5:11: tasks[1].name: duplicate task name 'w'");
  // A wrong field does not hide the rule checks' errors from a later try
  // only: the rules wait until the fields read (no "asks for nothing" for a
  // task whose gpus did not parse).
  auto spec = ParseJobSpec("name: j\ntasks:\n  - gpus: many\n", "job.yaml");
  ASSERT_FALSE(spec.ok());
  EXPECT_EQ(spec.status().message(), "job.yaml:3:11: tasks[0].gpus: must be a whole number, got 'many'");
}

TEST(ParseJobSpec, ManyErrorsAreCutAtTwenty) {
  std::string yaml = "name: j\ntasks:\n";
  for (int i = 0; i < 25; ++i) yaml += "  - gpus: x\n";
  auto spec = ParseJobSpec(yaml, "job.yaml");
  ASSERT_FALSE(spec.ok());
  const std::string m(spec.status().message());
  EXPECT_EQ(std::count(m.begin(), m.end(), '\n'), 20) << m;
  EXPECT_NE(m.find("tasks[19].gpus"), std::string::npos);
  EXPECT_EQ(m.find("tasks[20].gpus"), std::string::npos);
  EXPECT_NE(m.find("(and 5 more errors)"), std::string::npos);
}

// What a broken field leaves unknown is not judged: a bad kind says nothing
// of the service block; a list that is not a mapping is one error.
TEST(ParseJobSpec, ABrokenFieldDoesNotCauseFollowOnErrors) {
  ExpectError("name: j\nkind: cron\nservice: {port: 8080}\ntasks: [{cpu: 1, command: [x]}]\n",
              "job.yaml:2:7: kind: must be batch or service, got 'cron'");
  auto list = ParseJobList("7\n", "jobs.yaml");
  ASSERT_FALSE(list.ok());
  EXPECT_EQ(list.status().message(), "jobs.yaml:1:1: must be a mapping (key: value)");
  auto empty = ParseJobList("now: yesterday\n", "jobs.yaml");
  ASSERT_FALSE(empty.ok());
  EXPECT_NE(empty.status().message().find("now:"), std::string::npos) << empty.status().message();
  EXPECT_NE(empty.status().message().find("jobs: required (a list)"), std::string::npos) << empty.status().message();
}

// A hostile body of many bad task groups costs one error per group at most,
// and too many groups one error.
TEST(ParseJobSpec, ManyTaskGroupsCostOneError) {
  std::string yaml = "name: j\ntasks: [";
  for (int i = 0; i < 5000; ++i) yaml += std::string(i ? ", " : "") + "{cpu: 1}";
  yaml += "]\n";
  auto spec = ParseJobSpec(yaml, "job.yaml");
  ASSERT_FALSE(spec.ok());
  EXPECT_EQ(spec.status().message(), "job.yaml:2:8: tasks: at most 64 task groups");
}

// Aliases (*name) may not make a text read as much more than it is: 23 KiB
// of them stood for 300 task groups of a 1,000-variable env (7 s of the
// server's CPU to refuse), and 200 KiB for a 100 MB command.
TEST(ParseJobSpec, AliasesCannotMakeASmallTextAHugeSpec) {
  std::string yaml = "name: j\nx: &s \"" + std::string(200'000, 'a') + "\"\ntasks:\n  - command: [echo";
  for (int i = 0; i < 50; ++i) yaml += ", *s";
  yaml += "]\n";
  auto spec = ParseJobSpec(yaml, "job.yaml");
  ASSERT_FALSE(spec.ok());
  EXPECT_EQ(spec.status().message(), "job.yaml: its aliases (*name) make it read as more than 1024 KiB (at most 4 times the text, or 1 MiB)");
  // One that holds itself.
  spec = ParseJobSpec("name: j\ntasks: &t [{command: *t}]\n", "job.yaml");
  ASSERT_FALSE(spec.ok());
  EXPECT_NE(spec.status().message().find("its aliases (*name) make it read as more than"), std::string::npos);
  // Anchors used as people do: one env for several task groups.
  spec = ParseJobSpec("name: j\ntasks:\n  - {name: a, cpu: 1, env: &e {A: '1', B: '2'}}\n  - {name: b, cpu: 1, env: *e}\n", "job.yaml");
  ASSERT_TRUE(spec.ok()) << spec.status().message();
  EXPECT_EQ(spec->tasks[1].env.at("B"), "2");
  // A long text without aliases is read whole (each node costs at least two
  // characters of text: it never reads as four times its size).
  std::string flat = "name: j\ntasks:\n  - cpu: 1\n    command: [echo";
  for (int i = 0; i < 100000; ++i) flat += ", x";
  flat += "]\n";
  spec = ParseJobSpec(flat, "job.yaml");
  ASSERT_TRUE(spec.ok()) << spec.status().message();
  EXPECT_EQ(spec->tasks[0].command.size(), 100001u);
}

// A map is read in one pass (looking each key up again was N^2: 2.5 s for an
// env of 10,000 variables), and a key given twice is an error, not the last
// one silently winning.
TEST(ParseJobSpec, AMapIsReadOnceAndAKeyTwiceIsAnError) {
  std::string yaml = "name: j\ntasks:\n  - cpu: 1\n    env:\n";
  for (int i = 0; i < 20000; ++i) yaml += "      V" + std::to_string(i) + ": x\n";
  auto spec = ParseJobSpec(yaml, "job.yaml");
  ASSERT_TRUE(spec.ok()) << spec.status().message();
  EXPECT_EQ(spec->tasks[0].env.size(), 20000u);
  spec = ParseJobSpec("name: j\ntasks:\n  - cpu: 1\n    env: {A: '1', A: '2'}\n", "job.yaml");
  ASSERT_FALSE(spec.ok());
  EXPECT_EQ(spec.status().message(), "job.yaml:4:19: tasks[0].env.A: given twice");
  spec = ParseJobSpec("name: a\nname: b\ntasks: [{cpu: 1}]\n", "job.yaml");
  ASSERT_FALSE(spec.ok());
  EXPECT_EQ(spec.status().message(), "job.yaml:2:1: name: given twice");
}

TEST(ParseJobList, ReportsEveryJobsErrors) {
  auto list = ParseJobList("jobs:\n  - {name: a, tasks: [{gpus: x}]}\n  - {name: b, tasks: [{gpus: 1}], state: done}\n"
                           "  - 7\n",
                           "jobs.yaml");
  ASSERT_FALSE(list.ok());
  const std::string m(list.status().message());
  EXPECT_NE(m.find("jobs.yaml:2:30: jobs[0].tasks[0].gpus: must be a whole number, got 'x'\n"), std::string::npos) << m;
  EXPECT_NE(m.find("jobs[1].state: must be pending or running, got 'done'\n"), std::string::npos) << m;
  EXPECT_NE(m.find("jobs.yaml:4:5: jobs[2]: must be a mapping (key: value)"), std::string::npos) << m;
}

constexpr const char* kCluster = R"(
topology: [nvlink, node, rack, spine]
node_groups:
  - name: h100
    count: 16
    gpus: 8
    gpu_model: H100
    gpu_memory: 80Gi
    nvlink_islands: 2
    cpu: 128
    memory: 1Ti
    nodes_per_rack: 4
    racks_per_spine: 2
    labels: {pool: train}
drained: [h100-3]
queues:
  - name: research
    weight: 2
    quota: {H100: 64}
    children:
      - {name: nlp, weight: 1, quota: {H100: 32}, borrowing_limit: {H100: 32}}
priority_classes: [{name: low, value: 100, preemptible: true}, {name: normal, value: 500}]
profile: {plugins: [priority, fifo, resource-fit, gang, topology, {name: binpack, weight: 2}]}
)";

TEST(ParseClusterConfig, ReadsTheDesignExample) {
  auto c = ParseClusterConfig(kCluster, "cluster.yaml");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  ASSERT_EQ(c->node_groups.size(), 1u);
  EXPECT_EQ(c->node_groups[0].nvlink_islands, 2);
  EXPECT_EQ(c->node_groups[0].memory, 1024 * 1024);
  EXPECT_EQ(c->drained, std::vector<std::string>{"h100-3"});
  EXPECT_EQ(LeafQueuePaths(*c), std::vector<std::string>{"research/nlp"});
  EXPECT_EQ(c->priority_classes.size(), 2u);
  EXPECT_EQ(c->profile.plugins.back().weight, 2);
  auto nodes = ExpandNodes(*c);
  ASSERT_TRUE(nodes.ok());
  EXPECT_EQ((*nodes)[5].labels.at("rack"), "h100-r1");
  EXPECT_EQ((*nodes)[9].labels.at("spine"), "h100-s1");
  EXPECT_EQ((*nodes)[9].labels.at("pool"), "train");
}

TEST(ParseClusterConfig, ReadsJobVisibility) {
  auto c = ParseClusterConfig("job_visibility: all\n", "c.yaml");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->job_visibility, "all");
  EXPECT_EQ(ParseClusterConfig("{}\n", "c.yaml")->job_visibility, "all");  // the default, as issue 20 asks
  EXPECT_EQ(ParseClusterConfig("job_visibility: own\n", "c.yaml")->job_visibility, "own");
  auto bad = ParseClusterConfig("job_visibility: everyone\n", "c.yaml");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("job_visibility: must be own or all, got 'everyone'"), std::string::npos)
      << bad.status().message();
}

TEST(ParseClusterConfig, ReadsTheServicePortLimit) {
  EXPECT_EQ(ParseClusterConfig("{}\n", "c.yaml")->limits.max_service_ports_per_user, 1024);
  auto c = ParseClusterConfig("limits: {max_service_ports_per_user: 64}\n", "c.yaml");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->limits.max_service_ports_per_user, 64);
  auto bad = ParseClusterConfig("limits: {max_service_ports_per_user: 0}\n", "c.yaml");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("max_service_ports_per_user"), std::string::npos) << bad.status().message();
}

TEST(ParseClusterConfig, ReadsWhoMayUseAPriorityClass) {
  auto c = ParseClusterConfig("priority_classes:\n  - {name: normal, value: 500}\n  - {name: urgent, value: 5000, users: [bob]}\n"
                              "  - {name: ops, value: 9000, users: []}\n",
                              "c.yaml");
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_TRUE(c->priority_classes[0].OpenTo("alice"));
  EXPECT_TRUE(c->priority_classes[1].OpenTo("bob"));
  EXPECT_FALSE(c->priority_classes[1].OpenTo("alice"));
  EXPECT_FALSE(c->priority_classes[2].OpenTo("bob"));  // (admins only)
  auto twice = ParseClusterConfig("priority_classes:\n  - {name: x, value: 100}\n  - {name: x, value: 1000000000, users: []}\n",
                                  "c.yaml");
  ASSERT_FALSE(twice.ok());
  EXPECT_NE(twice.status().message().find("priority_classes[1].name: duplicate priority class 'x'"), std::string::npos)
      << twice.status().message();
}

// A queue's max_priority: a class (the config's own, listed before or after
// the queues, or a built-in) or a number; an unknown class names the field.
TEST(ParseClusterConfig, ReadsAQueuesMaxPriority) {
  auto c = ParseClusterConfig("queues:\n  - {name: research, max_priority: standard, children: [{name: a, max_priority: 10}]}\n"
                              "  - {name: prod}\n"
                              "priority_classes:\n  - {name: standard, value: 300}\n  - {name: top, value: 900}\n",
                              "c.yaml");
  ASSERT_TRUE(c.ok()) << c.status().message();
  EXPECT_EQ(c->queues[0].max_priority_value, 300);
  EXPECT_EQ(c->queues[0].max_priority, "standard, 300");
  EXPECT_EQ(c->queues[0].children[0].max_priority_value, 10);
  EXPECT_EQ(c->queues[1].max_priority_value, -1);
  EXPECT_EQ(PriorityCapOnPath(*c, "research/a")->name, "a");
  EXPECT_EQ(PriorityCapOnPath(*c, "prod"), nullptr);
  auto builtin = ParseClusterConfig("queues: [{name: q, max_priority: high}]\n", "c.yaml");
  ASSERT_TRUE(builtin.ok()) << builtin.status().message();
  EXPECT_EQ(builtin->queues[0].max_priority_value, 1000);
  auto unknown = ParseClusterConfig("queues: [{name: q, max_priority: hihg}]\n", "c.yaml");
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.status().message().find(
                "queues[0].max_priority: no priority class 'hihg' (a class's name or a number; classes: low, normal, high, "
                "inference, critical)"),
            std::string::npos)
      << unknown.status().message();
  auto negative = ParseClusterConfig("queues: [{name: q, children: [{name: r, max_priority: 99999999999}]}]\n", "c.yaml");
  ASSERT_FALSE(negative.ok());
  EXPECT_NE(negative.status().message().find("queues[0].children[0].max_priority: must be between 0 and 1000000000"),
            std::string::npos)
      << negative.status().message();
}

TEST(ParseClusterConfig, ReadsGpuHourPricesByNodeGroupAndByModel) {
  auto c = ParseClusterConfig(R"(
node_groups:
  - {name: h100, count: 2, gpus: 8, gpu_model: H100, gpu_hour_price: 2.49}
  - {name: old, count: 1, gpus: 8, gpu_model: A100}
accounting: {currency: EUR, gpu_hour_price: {A100: 1.1, H100: 3}}
)",
                              "c.yaml");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->accounting.currency, "EUR");
  EXPECT_EQ(c->GpuHourPrice("h100-1", "H100"), 2'490'000);  // its group's
  EXPECT_EQ(c->GpuHourPrice("h100-2", "H100"), 3'000'000);  // not in the group (count 2): the model's
  EXPECT_EQ(c->GpuHourPrice("h100-01", "H100"), 3'000'000);
  EXPECT_EQ(c->GpuHourPrice("old-0", "A100"), 1'100'000);   // a group without a price: the model's
  EXPECT_EQ(c->GpuHourPrice("agent-7", "L4"), -1);           // none
  for (const char* bad : {"-1", "2.1234567", "abc", "1.", "99999999"}) {
    auto r = ParseClusterConfig(std::string("accounting: {gpu_hour_price: {H100: '") + bad + "'}}\n", "c.yaml");
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.status().message().find("accounting.gpu_hour_price.H100: must be a price"), std::string::npos)
        << r.status().message();
  }
  auto r = ParseClusterConfig("accounting: {price: 1}\n", "c.yaml");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("price"), std::string::npos) << r.status().message();
}

TEST(ParseClusterConfig, NodeGroupsAreOptional) {
  // A queue-only config: the nodes are the agents that register.
  auto c = ParseClusterConfig("queues: [{name: a, quota: {H100: 8}}]\n", "c.yaml");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_TRUE(c->node_groups.empty());
  EXPECT_EQ(c->queues.size(), 1u);
}

TEST(ParseClusterConfig, ReadsTheProfilesActionsInOrder) {
  auto c = ParseClusterConfig("node_groups: [{name: a, count: 1}]\nprofile: {actions: [allocate, reserve, grow-elastic]}\n",
                              "c.yaml");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->profile.actions, (std::vector<std::string>{"allocate", "reserve", "grow-elastic"}));
  auto bad = ParseClusterConfig("node_groups: [{name: a, count: 1}]\nprofile: {actions: allocate}\n", "c.yaml");
  EXPECT_FALSE(bad.ok());
}

TEST(ParseClusterConfig, ReadsTheFairShareHalfLife) {
  auto c = ParseClusterConfig("node_groups: [{name: a, count: 1}]\nfair_share: {half_life: 24h}\n", "c.yaml");
  ASSERT_TRUE(c.ok()) << c.status().ToString();
  EXPECT_EQ(c->fair_share_half_life, 24LL * 3600 * kMicrosPerSecond);
  c = ParseClusterConfig("node_groups: [{name: a, count: 1}]\nfair_share: {halflife: 24h}\n", "c.yaml");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("fair_share.halflife: unknown field (allowed: half_life)"), std::string::npos)
      << c.status().message();
}

TEST(ParseClusterConfig, RejectsBadInputPrecisely) {
  auto c = ParseClusterConfig("node_groups:\n  - {name: a, count: 2, gpus: 8}\n", "c.yaml");
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().message(), "c.yaml:2:5: node_groups[0]: gpu_model: required when gpus > 0");
  c = ParseClusterConfig("node_groups:\n  - {name: a, count: 2}\ndrained: [b-0]\n", "c.yaml");
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().message(), "c.yaml: drained[0]: no node named 'b-0'");
  c = ParseClusterConfig("topology: [rack, node]\nnode_groups: []\n", "c.yaml");
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().message(), "c.yaml:1:11: topology: topology: only 'nvlink' may come before 'node', got 'rack'");
  c = ParseClusterConfig("node_groups:\n  - {name: a, count: 2, gpus: 6, gpu_model: X, nvlink_islands: 4}\n", "c.yaml");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("6 GPUs do not split into 4 equal islands"), std::string::npos);
  c = ParseClusterConfig("node_groups: [{name: a, count: 1}]\nqueues:\n  - {name: q, accepts: slices}\n", "c.yaml");
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().message(), "c.yaml:3:24: queues[0].accepts: must be any, whole or shares, got 'slices'");
  c = ParseClusterConfig(
      "node_groups: [{name: a, count: 1}]\nqueues:\n  - {name: p, accepts: whole, children: [{name: c, accepts: shares}]}\n",
      "c.yaml");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("accepts: 'shares' contradicts its parent p's accepts: whole"), std::string::npos)
      << c.status().message();
}

TEST(ParseJobList, ReadsRunningJobsWithPlacement) {
  auto jobs = ParseJobList(R"(
jobs:
  - name: a
    tasks: [{replicas: 2, gpus: 4}]
    state: running
    placement: [{node: n-0, gpus: [0, 1, 2, 3]}, {node: n-1, gpus: [4, 5, 6, 7]}]
  - name: b
    tasks: [{gpus: 1}]
)",
                           "jobs.yaml");
  ASSERT_TRUE(jobs.ok()) << jobs.status().ToString();
  ASSERT_EQ(jobs->jobs.size(), 2u);
  EXPECT_FALSE(jobs->has_now);
  EXPECT_TRUE(jobs->jobs[0].running);
  EXPECT_EQ(jobs->jobs[0].placement[1].node, "n-1");
  EXPECT_FALSE(jobs->jobs[1].running);
  auto timed = ParseJobList("now: 2026-11-29T12:00:00Z\njobs:\n  - name: a\n    tasks: [{gpus: 1}]\n    state: running\n"
                            "    started_at: 2026-11-29T11:00:00Z\n    placement: [{node: n-0, gpus: [0]}]\n",
                            "jobs.yaml");
  ASSERT_TRUE(timed.ok()) << timed.status().ToString();
  EXPECT_TRUE(timed->has_now);
  EXPECT_EQ(timed->now - timed->jobs[0].started_at, 3600 * kMicrosPerSecond);
  auto bad = ParseJobList("jobs:\n  - name: a\n    tasks: [{gpus: 1}]\n    state: running\n", "jobs.yaml");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(), "jobs.yaml:2:5: jobs[0]: placement: required for a running job (one entry per replica)");
  bad = ParseJobList("jobs:\n  - name: a\n    tasks: [{gpus: 1, cpu: -2}]\n", "jobs.yaml");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(), "jobs.yaml:3:28: jobs[0].tasks[0].cpu: '-2' is not a valid CPU quantity");
}

TEST(ParseJobSpec, ReadsAService) {
  auto spec = ParseJobSpec(R"(
name: llm
kind: service
service:
  port: 8000
  replicas: {min: 2, max: 6}
  autoscale: {target_inflight: 4}
tasks: [{name: server, gpus: 1, command: [python3, serve.py]}]
)",
                           "svc.yaml");
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  EXPECT_TRUE(spec->is_service());
  EXPECT_TRUE(spec->elastic());
  EXPECT_EQ(spec->priority_class, "inference");
  EXPECT_EQ(spec->tasks[0].replicas, 6);
  EXPECT_EQ(spec->elastic_min_replicas, 2);
  EXPECT_EQ(spec->service.readiness.path, "/");
  EXPECT_EQ(spec->service.autoscale.target_inflight, 4);
  EXPECT_TRUE(ValidateNewJobSpec(*spec).ok());
}

TEST(ParseJobSpec, AServiceIsCheckedFieldByField) {
  const std::string head = "name: llm\nkind: service\n";
  const std::string task = "tasks: [{name: server, gpus: 1, command: [x]}]\n";
  struct Case {
    std::string yaml;
    std::string error;
  } cases[] = {
      {head + task, "svc.yaml:1:1: service: required with kind: service"},
      {head + "service: {port: 8000, replicas: {min: 3, max: 2}}\n" + task, "service.replicas.min: must not exceed max (2)"},
      {head + "service: {port: 0}\n" + task, "service.port: must be between 1 and 65535, got 0"},
      {head + "service: {port: 8080, autoscale: {target_inflight: -1}}\n" + task,
       "service.autoscale.target_inflight: must be between 0.01"},
      {head + "service: {port: 8080, bogus: 1}\n" + task, "service.bogus: unknown field"},
      {head + "service: {port: 8080, replicas: {min: 1, max: 2}, autoscale: {target_inflight: 4, spare: 2}}\n" + task,
       "service.autoscale.spare: must be 0..max-1"},
      {head + "service: {port: 8080}\ntime_limit: 1h\n" + task, "time_limit: a service is never ended by a time limit"},
      {head + "service: {port: 8080}\ntasks: [{name: s, replicas: 2, gpus: 1}]\n", "tasks[0].replicas: a service's replicas"},
      {head + "service: {port: 80}\n" + task, "service.port: must be 1024 or above"},
      {head + "service: {port: 8080, readiness: {path: health}}\n" + task, "service.readiness.path: must start with '/'"},
      // (a CR/LF would end the probe's request line and add a header of the user's choosing)
      {head + "service: {port: 8080, readiness: {path: \"/h HTTP/1.1\\r\\nX-Evil: 1\"}}\n" + task,
       "service.readiness.path: must be a URL path of visible ASCII characters (percent-encode others), without '#'; "
       "character 3 is a space"},
      {head + "service: {port: 8080, readiness: {path: \"/h\\r\\nX: 1\"}}\n" + task,
       "service.readiness.path: must be a URL path of visible ASCII characters (percent-encode others), without '#'; "
       "character 3 is control character 13"},
      {head + "service: {port: 8080, metrics_path: \"/m\\u00e9\"}\n" + task, "service.metrics_path: must be a URL path"},
      {head + "service: {port: 8080, metrics_path: \"/m#frag\"}\n" + task, "character 3 is '#'"},
      {head + "service: {port: 8080, metrics_path: /" + std::string(2048, 'a') + "}\n" + task,
       "service.metrics_path: must be at most 2048 characters, got 2049"},
      // (years overflow the router's nanosecond timers into a probe loop with no pause)
      {head + "service: {port: 8080, readiness: {period: \"10000000000\"}}\n" + task,
       "service.readiness.period: must be at most 1h"},
      {head + "service: {port: 8080, readiness: {timeout: 1h}}\n" + task, "service.readiness.timeout: must be at most 10m"},
      {head + "service: {port: 8080, readiness: {startup: 30d}}\n" + task, "service.readiness.startup: must be at most 7d"},
      {"name: j\nkind: cron\n" + task, "kind: must be batch or service, got 'cron'"},
      {"name: j\nservice: {port: 8080}\n" + task, "service: only with kind: service"},
  };
  for (const Case& c : cases) {
    auto spec = ParseJobSpec(c.yaml, "svc.yaml");
    ASSERT_FALSE(spec.ok()) << c.yaml;
    EXPECT_NE(spec.status().message().find(c.error), std::string::npos) << spec.status().message() << "\n  wanted: " << c.error;
  }
  auto zero = ParseJobSpec(head + "service: {port: 8080, replicas: {min: 0, max: 2}}\n" + task, "svc.yaml");
  ASSERT_FALSE(zero.ok());
  EXPECT_NE(zero.status().message().find("service.replicas.min: must be at least 1"), std::string::npos)
      << zero.status().message();
}

}  // namespace
}  // namespace rota::api
