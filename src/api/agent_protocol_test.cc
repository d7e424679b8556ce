#include "api/agent_protocol.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace rota::api {
namespace {

using nlohmann::json;

TaskAssignment FullAssignment() {
  TaskAssignment a;
  a.job = JobId(42);
  a.job_name = "train";
  a.task = 1;
  a.task_name = "worker";
  a.replica = 3;
  a.gpus = {2, 5};
  a.gpu_milli = 250;
  a.gpu_memory_limit = 10240;
  a.mig_profile = "3g.40gb";
  a.mig_start = 4;
  a.last_checkpoint = "/ckpt/7";
  a.command = {"python", "train.py"};
  a.env = {{"A", "b"}};
  a.rootfs = "/images/pytorch";
  a.mounts = {{"/data", "/data", true}};
  a.world_size = 8;
  a.rank = 3;
  a.local_rank = 1;
  a.node_rank = 1;
  a.master_addr = "n-0";
  a.master_port = 20042;
  a.hosts = {"n-0", "n-1"};
  a.cpu = 1500;
  a.memory = 8192;
  a.attempt = 2;
  a.checkpoint_signal = "SIGUSR2";
  a.checkpoint_grace = 90 * kMicrosPerSecond;
  a.user = "alice";
  a.uid = 1000;
  a.gid = 1000;
  a.allow_root = true;
  a.bound_at = 1'700'000'000'123'456;
  return a;
}

TEST(AgentProtocol, AnAnswerRoundTripsThroughItsJson) {
  AgentAnswer answer{.tasks = {FullAssignment()}, .revision = 77, .fence_after_ms = 30000, .heartbeat_interval_ms = 10000,
                     .log_cap_bytes = 64 << 20, .server = "5f3a9c01"};
  auto back = AnswerFromJson(json::parse(AnswerToJson(answer).dump()));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->revision, 77u);
  EXPECT_EQ(back->fence_after_ms, 30000);
  EXPECT_EQ(back->heartbeat_interval_ms, 10000);
  EXPECT_EQ(back->log_cap_bytes, 64 << 20);
  EXPECT_EQ(back->server, "5f3a9c01");
  ASSERT_EQ(back->tasks.size(), 1u);
  // Encoding the decoded answer gives the same JSON: every field survived.
  EXPECT_EQ(AnswerToJson(*back).dump(), AnswerToJson(answer).dump());
  const TaskAssignment& a = back->tasks[0];
  EXPECT_EQ(a.job, JobId(42));
  EXPECT_EQ(a.gpus, (std::vector<int32_t>{2, 5}));
  EXPECT_EQ(a.checkpoint_grace, 90 * kMicrosPerSecond);
  EXPECT_EQ(a.mounts.size(), 1u);
  EXPECT_TRUE(a.mounts[0].read_only);
  EXPECT_EQ(a.user, "alice");
  EXPECT_TRUE(a.allow_root);
  EXPECT_EQ(a.bound_at, 1'700'000'000'123'456);
  EXPECT_FALSE(a.whole_gpus());
}

// AnswerText writes what the tree would dump, byte for byte, compact and
// pretty: every optional field, empty lists and maps, and strings that need
// escaping (quotes, control characters, UTF-8, invalid UTF-8 replaced).
TEST(AgentProtocol, AnAnswersTextIsItsJsonDumpByteForByte) {
  TaskAssignment odd = FullAssignment();
  odd.job_name = "say \"hi\"\\ \n\t\x01 caf\xc3\xa9 \xff\xfe end";
  odd.env = {{"K\"Q", "v\x7f"}, {"PATH", "/usr/bin"}, {"\xe2\x82\xac", ""}};
  odd.command = {};
  odd.hosts = {};
  odd.mounts = {{"/a b", "/c\"d", false}, {"/e", "/f", true}};
  TaskAssignment plain;  // the defaults: no optional field
  plain.job = JobId(7);
  plain.command = {"true"};
  plain.task_name = "back\\slash";  // each alone: the only character to escape
  plain.master_addr = "a\"quote";
  TaskAssignment negative = plain;
  negative.uid = 0;
  negative.gid = 0;
  negative.master_port = -1;
  negative.service = true;
  negative.rootfs = "/r";  // with no mounts
  const std::vector<AgentAnswer> answers = {
      {.tasks = {}, .revision = 0, .fence_after_ms = 0, .heartbeat_interval_ms = 0},
      {.tasks = {FullAssignment()}, .revision = 77, .fence_after_ms = 30000, .heartbeat_interval_ms = 10000},
      {.tasks = {odd, plain, negative, FullAssignment()}, .revision = UINT64_MAX, .fence_after_ms = -5,
       .heartbeat_interval_ms = INT64_MAX, .log_cap_bytes = INT64_MAX, .server = "a\"b"},
  };
  for (const AgentAnswer& answer : answers) {
    for (int indent : {-1, 0, 2, 4}) {
      EXPECT_EQ(AnswerText(answer, indent),
                AnswerToJson(answer).dump(indent, ' ', false, nlohmann::ordered_json::error_handler_t::replace))
          << "indent " << indent << ", " << answer.tasks.size() << " tasks";
    }
  }
  // And it reads back as the same answer.
  auto back = AnswerFromJson(json::parse(AnswerText(answers[2])));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(AnswerToJson(*back).dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace),
            AnswerText(answers[2]));
}

TEST(AgentProtocol, AHeartbeatRoundTripsWithItsLogAndCheckpoint) {
  HeartbeatReport r;
  r.node = "n-1";
  r.wait_ms = 5000;
  r.gpus.push_back({.index = 3, .utilization_pct = 90, .memory_used = 4096, .temperature_c = 60, .power_w = 300,
                    .healthy = false, .health_reason = "xid 79"});
  TaskReport t;
  t.job = JobId(9);
  t.task = 0;
  t.replica = 1;
  t.attempt = 2;
  t.exited = true;
  t.exit_code = 137;
  t.exit_reason = "oom";
  t.log = std::string("bytes\0\xff", 7);  // any bytes survive
  t.log_offset = 100;
  t.checkpoint_path = "/ckpt/1";
  t.checkpoint_at = 1'700'000'000'000'000;
  t.ended_ago = 4'321'000;
  r.tasks.push_back(t);
  r.disk_problem = "only 3 MiB free in /var/lib/rota";
  r.runtime_problem = "3 starts in a row timed out";
  auto back = HeartbeatFromJson(json::parse(HeartbeatToJson(r).dump()));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->node, "n-1");
  EXPECT_EQ(back->wait_ms, 5000);
  EXPECT_EQ(back->disk_problem, r.disk_problem);
  EXPECT_EQ(back->runtime_problem, r.runtime_problem);
  EXPECT_FALSE(HeartbeatToJson(HeartbeatReport{.node = "n"}).contains("disk_problem"));  // (none: not sent)
  EXPECT_FALSE(HeartbeatToJson(HeartbeatReport{.node = "n"}).contains("runtime_problem"));
  // Shown to people (a drain's reason): no control characters.
  auto controlled = HeartbeatFromJson(json{{"node", "n"}, {"runtime_problem", "hung\x1b[2J"}});
  ASSERT_TRUE(controlled.ok());
  EXPECT_EQ(controlled->runtime_problem, "hung?[2J");
  // A long one is cut (a whole character at a time), not the report refused.
  auto long_problem =
      HeartbeatFromJson(json{{"node", "n"}, {"disk_problem", std::string(1020, 'x') + "\u00e9\u00e9\u00e9"}});  // 1026 bytes
  ASSERT_TRUE(long_problem.ok());
  EXPECT_EQ(long_problem->disk_problem, std::string(1020, 'x') + "...");  // (not half of the first é)
  ASSERT_EQ(back->gpus.size(), 1u);
  EXPECT_FALSE(back->gpus[0].healthy);
  EXPECT_EQ(back->gpus[0].health_reason, "xid 79");
  // A GPU's health reason reaches other users' jobs (their requeue reason):
  // cleaned and cut as a disk problem is.
  auto escape = HeartbeatFromJson(json{{"node", "n"},
                                       {"gpus", {{{"index", 0}, {"healthy", false},
                                                  {"health_reason", "\x1b]52;c;x\x07" + std::string(2000, 'y')}}}}});
  ASSERT_TRUE(escape.ok()) << escape.status().ToString();
  EXPECT_EQ(escape->gpus[0].health_reason.substr(0, 10), "?]52;c;x?y");
  EXPECT_EQ(escape->gpus[0].health_reason.size(), 1024u);
  ASSERT_EQ(back->tasks.size(), 1u);
  EXPECT_TRUE(back->tasks[0].exited);
  EXPECT_EQ(back->tasks[0].exit_code, 137);
  EXPECT_EQ(back->tasks[0].log, t.log);
  EXPECT_EQ(back->tasks[0].log_offset, 100);
  EXPECT_EQ(back->tasks[0].checkpoint_path, "/ckpt/1");
  EXPECT_EQ(back->tasks[0].checkpoint_at, t.checkpoint_at);
  EXPECT_EQ(back->tasks[0].ended_ago, t.ended_ago);
  // A checkpoint path with a NUL is dropped (the next attempt's environment
  // could not hold it), the rest of the report kept; a reason why a task did
  // not start is cut and cleaned as a disk problem is.
  r.tasks[0].checkpoint_path = std::string("/ck\0LD_PRELOAD=/x.so", 20);
  r.tasks[0].exit_reason = std::string(kCouldNotStart) + "cannot start 'x\x1b[2J': " + std::string(2000, 'y');
  back = HeartbeatFromJson(json::parse(HeartbeatToJson(r).dump()));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  ASSERT_EQ(back->tasks.size(), 1u);
  EXPECT_EQ(back->tasks[0].checkpoint_path, "");
  EXPECT_TRUE(back->tasks[0].exited);
  EXPECT_EQ(back->tasks[0].exit_reason.size(), 1024u);
  EXPECT_EQ(back->tasks[0].exit_reason.substr(0, 25), "start: cannot start 'x?[2");
}

TEST(AgentProtocol, AReportCarriesItsWindowOfSamplesAndItsTasksCpu) {
  HeartbeatReport r;
  r.node = "n-1";
  GpuTelemetry g{.index = 0, .utilization_pct = 40};
  g.samples = 10;
  g.activity = {2, 0, 0, 0, 0, 0, 0, 0, 8};
  g.activity_sum = 2 * 3 + 8 * 42;
  g.memory_peak = 9000;
  g.energy_mj = 3'000'000;
  g.pcie_rx_kbps = 1200;
  g.sm_active_pct = 41;
  g.sm_occupancy_pct = 20;
  g.tensor_active_pct = 35;
  r.gpus.push_back(g);
  TaskReport t;
  t.job = JobId(4);
  t.cpu_used_us = 12'000'000;
  t.cpu_throttled_us = 500;
  t.memory_peak = 2048;
  r.tasks.push_back(t);
  auto back = HeartbeatFromJson(json::parse(HeartbeatToJson(r).dump()));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->gpus[0].samples, 10);
  EXPECT_EQ(back->gpus[0].activity, g.activity);
  EXPECT_EQ(back->gpus[0].activity_sum, g.activity_sum);
  EXPECT_EQ(back->gpus[0].memory_peak, 9000);
  EXPECT_EQ(back->gpus[0].energy_mj, 3'000'000);
  EXPECT_EQ(back->gpus[0].pcie_rx_kbps, 1200);
  EXPECT_EQ(back->gpus[0].pcie_tx_kbps, -1);
  EXPECT_EQ(back->gpus[0].sm_active_pct, 41);
  EXPECT_EQ(back->gpus[0].tensor_active_pct, 35);
  EXPECT_EQ(back->gpus[0].dram_active_pct, -1);
  EXPECT_EQ(back->tasks[0].cpu_used_us, 12'000'000);
  EXPECT_EQ(back->tasks[0].cpu_throttled_us, 500);
  EXPECT_EQ(back->tasks[0].memory_peak, 2048);
  // An older agent sends none of it; a window that does not add up is
  // dropped, and the rest of the report stands.
  auto bad = HeartbeatFromJson(json::parse(R"({"node": "n", "gpus": [{"index": 0, "utilization_pct": 7,
      "window": {"samples": 2, "activity": [5], "energy_mj": 1}}], "tasks": [{"job": 1, "task": 0, "replica": 0,
      "cpu_used_us": "many"}]})"));
  ASSERT_TRUE(bad.ok()) << bad.status().ToString();
  EXPECT_EQ(bad->gpus[0].utilization_pct, 7);
  EXPECT_EQ(bad->gpus[0].samples, 0);
  // A sum past 100% a sample is left out; the window stands.
  auto over = HeartbeatFromJson(json::parse(R"({"node": "n", "gpus": [{"index": 0,
      "window": {"samples": 2, "activity": [0, 2], "activity_sum": 201, "energy_mj": 1}}]})"));
  ASSERT_TRUE(over.ok()) << over.status().ToString();
  EXPECT_EQ(over->gpus[0].samples, 2);
  EXPECT_EQ(over->gpus[0].activity_sum, -1);
  EXPECT_EQ(bad->tasks[0].cpu_used_us, -1);
}

TEST(AgentProtocol, BadInputNamesTheField) {
  auto missing = HeartbeatFromJson(json::parse(R"({"tasks": []})"));
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().message(), "request body: node: required");
  auto type = HeartbeatFromJson(json::parse(R"({"node": "n", "tasks": [{"job": 1, "task": "x", "replica": 0}]})"));
  ASSERT_FALSE(type.ok());
  EXPECT_EQ(type.status().message(), "request body: tasks[0].task: wrong type");
  auto range = HeartbeatFromJson(json::parse(R"({"node": "n", "tasks": [{"job": 1, "task": 70000, "replica": 0}]})"));
  ASSERT_FALSE(range.ok());
  EXPECT_EQ(range.status().message(), "request body: tasks[0].task: out of range");
  auto negative = HeartbeatFromJson(json::parse(R"({"node": "n", "tasks": [{"job": -1, "task": 0, "replica": 0}]})"));
  ASSERT_FALSE(negative.ok());
  EXPECT_EQ(negative.status().message(), "request body: tasks[0].job: wrong type");
  auto gpu = AnswerFromJson(json::parse(R"({"tasks": [{"job": 1, "task": 0, "replica": 0, "gpus": [64]}]})"));
  ASSERT_FALSE(gpu.ok());
  EXPECT_EQ(gpu.status().message(), "request body: tasks[0].gpus: GPU indices are 0..63");
}

TEST(AgentProtocol, ABadCheckpointOrLogPieceIsDroppedNotTheReport) {
  auto r = HeartbeatFromJson(json::parse(R"({"node": "n", "tasks": [
      {"job": 1, "task": 0, "replica": 0, "state": "exited", "exit_code": 1,
       "checkpoint_path": "/c", "checkpoint_at": "not a time", "log_b64": "%%%", "log_offset": 0}]})"));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->tasks.size(), 1u);
  EXPECT_TRUE(r->tasks[0].exited);
  EXPECT_EQ(r->tasks[0].checkpoint_at, 0);
  EXPECT_TRUE(r->tasks[0].log.empty());
}

// What a node registers is shown on terminals and in CSV reports: no
// control characters in its GPU model or labels.
TEST(AgentProtocol, ANodesModelAndLabelsHoldNoControlCharacters) {
  NodeSpec spec{.name = "n-1", .gpu_model = "H100", .gpus = 8};
  spec.labels = {{"rack", "r1"}};
  EXPECT_TRUE(CheckNodeText(spec, "node").ok());
  spec.gpu_model = "H100\x1b[2J";
  EXPECT_EQ(CheckNodeText(spec, "node").message(),
            "node.gpu_model: must not hold control characters (it is shown on terminals and in reports)");
  spec.gpu_model = "H100";
  spec.labels = {{"rack", "r1\rtotal,0"}};
  EXPECT_EQ(CheckNodeText(spec, "node").message(),
            "node.labels: must not hold control characters (it is shown on terminals and in reports)");
}

// An agent's labels are journaled with its node, kept in every copy of the
// state and listed to every user: bounded in number and length.
TEST(AgentProtocol, ANodesLabelsAreBounded) {
  NodeSpec spec{.name = "n-1", .gpu_model = "H100", .gpus = 8};
  for (size_t i = 0; i < kMaxNodeLabels; ++i) spec.labels["k" + std::to_string(i)] = "v";
  EXPECT_TRUE(CheckNodeText(spec, "node").ok());
  spec.labels["one-more"] = "v";
  EXPECT_EQ(CheckNodeText(spec, "node").message(), "node.labels: 257 labels; a node has at most 256");
  spec.labels = {{"rack", std::string(kMaxLabelValue, 'r')}};
  EXPECT_TRUE(CheckNodeText(spec, "node").ok());
  spec.labels = {{"rack", std::string(kMaxLabelValue + 1, 'r')}};
  EXPECT_EQ(CheckNodeText(spec, "node").message(),
            "node.labels: 'rack': a key has at most 317 bytes and a value at most 1024");
  spec.labels = {{std::string(kMaxLabelKey + 1, 'k'), "v"}};
  EXPECT_EQ(CheckNodeText(spec, "node").message(),
            "node.labels: 'kkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkk...': a key has at most 317 bytes and a value at most 1024");
}

// An agent's address is written into every gang's hostfile on other nodes,
// a line per host: a host name or IP address only (a newline would add a
// host of the agent's choosing to an honest node's hostfile).
TEST(AgentProtocol, AnAddressIsAHostNameOrIpAddress) {
  for (const char* ok : {"", "node-1.example.com", "10.0.0.9", "fe80::1", "fe80::1%eth0", "[fd00::7]", "gpu_07"}) {
    EXPECT_TRUE(CheckAddress(ok, "address").ok()) << ok;
  }
  for (const std::string bad : {std::string("10.0.0.9\nattacker.example slots=8"), std::string("a b"),
                                std::string("x/y"), std::string(254, 'a')}) {
    EXPECT_EQ(CheckAddress(bad, "address").message(),
              "address: must be a host name or IP address (up to 253 letters, digits, '-', '.', ':', '_', '%', '[' or ']')")
        << bad;
  }
}

}  // namespace
}  // namespace rota::api
