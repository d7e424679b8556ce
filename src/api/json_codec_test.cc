#include "api/json_codec.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "api/yaml_codec.h"

namespace rota::api {
namespace {

TEST(EventCodec, RoundTripsEveryEventType) {
  auto spec = ParseJobSpec(R"(
name: j
queue: research/nlp
priority: high
tasks: [{name: w, replicas: 2, gpus: 4, gpu_model: H100, cpu: 1.5, memory: 8Gi, command: [sh, -c, "exit 0"], env: {A: b}}]
topology: {level: rack, mode: preferred}
node_selector: {pool: train}
preemptible: true
checkpoint: {signal: SIGUSR2, grace: 90s}
restart: {policy: on-failure, max_restarts: 2}
time_limit: 1h30m
mounts: [{source: /d, target: /data, read_only: true}]
)",
                           "t");
  ASSERT_TRUE(spec.ok()) << spec.status().ToString();
  spec->priority = 1000;
  NodeSpec node{.name = "n-0", .gpu_model = "H100", .gpus = 8, .gpu_memory = 81920, .nvlink_islands = 2,
                .cpu = 128000, .memory = 1048576, .labels = {{"rack", "r0"}}, .mig = {{1, "3g.40gb@0,3g.40gb@4"}}};
  std::vector<Event> events = {
      NodeAdded{node},
      NodeDrainChanged{"n-0", true},
      GpuHealthChanged{"n-0", 3, false},
      JobSubmitted{JobId(7), *spec, 123, "alice"},
      JobBound{JobId(7), {{0, 0, NodeId(0), 0x0F}, {0, 1, NodeId(0), 0xF0}}, 456},
      JobBound{JobId(8), {{0, 0, NodeId(1), 0x04, 250}}, 457},
      JobCheckpointed{JobId(7), 460, "/ckpt/step-1200"},
      JobFinished{JobId(7), JobOutcome::kFailed, 789},
      JobCancelled{JobId(8), 999, "cancelled by bob"},
      JobRequeued{JobId(9), 1000, "node n-1 lost"},
      JobRequeued{JobId(9), 1001, "worker-0 exited with code 2", true},  // a failed attempt
      NodeLostChanged{"n-1", true},
      JobPreempting{JobId(11), 77, JobId(12), "preempted for job 12"},
      JobPreempting{JobId(11), 78, JobId(), "worker-1 exited with code 1", true, true},  // stopping to restart
      JobSubmitted{JobId(10), *spec, 5, "carol", 2, 3},
      JobBound{JobId(13), {{0, 0, NodeId(1), 0x02, 0, 4}}, 458},  // a MIG instance at slot 4
      JobBound{JobId(14), {{0, 0, NodeId(1), 0x02}}, 459, /*ended=*/true},  // an ended job's, from a snapshot
      GpuReconfigured{"n-0", 1, "3g.40gb@0,3g.40gb@4"},
      NodeMigChanged{"n-0", {{0, "7g.80gb@0"}, {1, ""}}, true},
      JobHistory{JobId(16), {100, 200}, {JobId(3), JobId(4)}, "preempted for job 4", {{0, 0, NodeId(1), 0x0F}},
                 {{0, 1, NodeId(0), 0xF0}}, 210, 220, "shrank for job 5"},
      JobHistory{JobId(18), {}, {}, "", {}, {}, 0, 0, "", {{10, 20, "requeued: node lost"}, {30, 40, "succeeded"}}},
      JobHistory{JobId(19), {}, {}, "", {}, {}, 0, 0, "", {}, 0, 4'000},  // a service that scaled down at 4,000
      JobResized{JobId(14), {{0, 0, NodeId(0), 0x03}, {0, 2, NodeId(1), 0x0C}}, 900, "grew into free GPUs"},
      JobResized{JobId(17), {{0, 0, NodeId(1), 0x04, 500}, {0, 1, NodeId(0), 0x02, 0, 4}}, 901, "shrank for job 5"},
      RankRestarted{JobId(14), 0, 2, 950, "worker-2 exited with code 3; restarted alone"},
      JobSubmitted{JobId(15), *spec, 6, "dan", 1, 2, 3, 3, {{1, 5}, {4, 6}}},
      JobsSubmitted{JobId(100), 2000, *spec, 7, "erin"},
      NodeDrainChanged{"n-1", true, "PSU swap"},
      NodeDrainChanged{"n-1", true, "runtime: the OCI runtime could not delete a container", /*by_agent=*/true},
      JobsSubmitted{JobId(2100), 2000, *spec, 7, "erin", "k", JobId(100), 5000},  // an array's second part
      JobSubmitted{.id = JobId(7100), .spec = *spec, .at = 8, .user = "erin", .array = JobId(100), .array_count = 7001},
      // `--count 5-9%2`: indices from 5, two at a time.
      JobSubmitted{.id = JobId(7150), .spec = *spec, .at = 8, .user = "erin", .array = JobId(7150), .array_count = 5,
                   .array_first_index = 5, .array_max_running = 2},
      JobsSubmitted{JobId(7160), 4, *spec, 7, "erin", "k", JobId(7160), 4, 5, 2},
      JobSubmitted{.id = JobId(7200), .spec = *spec, .at = 9, .user = "erin", .restarts = 2, .attained = 5'000'000},
      JobSubmitted{.id = JobId(7300), .spec = *spec, .at = 9, .user = "erin", .restarts = 3, .failed_restarts = 1},
      JobHoldChanged{JobId(7), true, 1100, "alice"},
      JobHoldChanged{JobId(7), false, 1200, "admin"},
      JobHoldChanged{JobId(8), true, 1300, "root", true},
      ServiceScaled{JobId(20), 1400, 3, "in flight 11.0 (target 4/replica): 3 over 1m"},
      JobsForgotten{{JobId(3), JobId(9), JobId(4000)}, 1500, 7301},
      JobsForgotten{{}, 0, 7301, {{"prod", {{20000, 86'400'000'000}, {20001, 5}}}, {"research", {{19999, 1}}}}},  // a snapshot's
  };
  for (const Event& e : events) {
    const std::string text = EncodeEvent(e);
    auto back = DecodeEvent(text);
    ASSERT_TRUE(back.ok()) << back.status().ToString() << " for " << text;
    EXPECT_EQ(EncodeEvent(*back), text);
  }
  // A resize keeps each replica's share (a GPU fraction, a MIG instance), as a bind does.
  for (const Event& e : events) {
    if (const auto* resized = std::get_if<JobResized>(&e)) {
      auto back = DecodeEvent(EncodeEvent(e));
      ASSERT_TRUE(back.ok());
      EXPECT_EQ(std::get<JobResized>(*back).placement, resized->placement);
    }
  }
  // Failed restarts come back, and a snapshot from before they were counted
  // apart counts all of its restarts (as they were then).
  auto counted = DecodeEvent(EncodeEvent(JobSubmitted{.id = JobId(30), .spec = *spec, .at = 1, .user = "a", .restarts = 3, .failed_restarts = 1}));
  ASSERT_TRUE(counted.ok());
  EXPECT_EQ(std::get<JobSubmitted>(*counted).failed_restarts, 1);
  auto old_snapshot = nlohmann::json::parse(EncodeEvent(JobSubmitted{.id = JobId(31), .spec = *spec, .at = 1, .user = "a", .restarts = 3}));
  old_snapshot.erase("failed_restarts");
  auto before = DecodeEvent(old_snapshot.dump());
  ASSERT_TRUE(before.ok()) << before.status().ToString();
  EXPECT_EQ(std::get<JobSubmitted>(*before).failed_restarts, 3);
  auto requeued = DecodeEvent(EncodeEvent(JobRequeued{JobId(30), 5, "exit 2", true}));
  ASSERT_TRUE(requeued.ok());
  EXPECT_TRUE(std::get<JobRequeued>(*requeued).failed);
  auto forgotten = DecodeEvent(EncodeEvent(JobsForgotten{{JobId(3), JobId(9)}, 1500, 7301}));
  ASSERT_TRUE(forgotten.ok());
  EXPECT_EQ(std::get<JobsForgotten>(*forgotten).ids, (std::vector<JobId>{JobId(3), JobId(9)}));
  EXPECT_EQ(std::get<JobsForgotten>(*forgotten).next_id, 7301u);
  auto bad_day = nlohmann::json::parse(EncodeEvent(JobsForgotten{{}, 0, 1, {{"prod", {{3, 4}}}}}));
  bad_day["usage"]["prod"]["x3"] = 4;
  EXPECT_EQ(DecodeEvent(bad_day.dump()).status().message(), "event JobsForgotten: usage: 'x3' is not a day");
  auto relabelled = DecodeEvent(EncodeEvent(NodeLabelsChanged{"n-0", {{"rack", "r1"}, {"pool", "train"}}}));
  ASSERT_TRUE(relabelled.ok());
  EXPECT_EQ(std::get<NodeLabelsChanged>(*relabelled).labels.at("pool"), "train");
  auto agent = DecodeEvent(EncodeEvent(NodeAgentChanged{"n-0", "0123abcd"}));
  ASSERT_TRUE(agent.ok());
  EXPECT_EQ(std::get<NodeAgentChanged>(*agent).node, "n-0");
  EXPECT_EQ(std::get<NodeAgentChanged>(*agent).instance, "0123abcd");
  EXPECT_EQ(std::get<NodeAgentChanged>(*agent).address, "");
  auto addressed = DecodeEvent(EncodeEvent(NodeAgentChanged{"n-0", "0123abcd", "10.0.0.5"}));
  ASSERT_TRUE(addressed.ok());
  EXPECT_EQ(std::get<NodeAgentChanged>(*addressed).address, "10.0.0.5");
  // The learned order's history (a journal snapshot's) and a job's sweep.
  RunHistory history;
  ASSERT_EQ(history.Join({"research", 2}, JobId(40), 7, JobId()), JobId(40));
  history.Join({"research", 2}, JobId(41), 9, JobId(), 3);
  history.End(JobId(40), true, 1234.5);
  auto history_back = DecodeEvent(EncodeEvent(RunHistoryState{history}));
  ASSERT_TRUE(history_back.ok()) << history_back.status().ToString();
  EXPECT_TRUE(std::get<RunHistoryState>(*history_back).history == history);
  EXPECT_EQ(std::get<RunHistoryState>(*history_back).history.sweeps.at(40).live, 3);
  auto swept = DecodeEvent(EncodeEvent(JobSubmitted{.id = JobId(41), .spec = *spec, .at = 9, .user = "a", .sweep = JobId(40)}));
  ASSERT_TRUE(swept.ok());
  EXPECT_EQ(std::get<JobSubmitted>(*swept).sweep, JobId(40));
  auto bad_history = nlohmann::json::parse(EncodeEvent(RunHistoryState{history}));
  bad_history["history"]["count"].erase(0);
  EXPECT_EQ(DecodeEvent(bad_history.dump()).status().message(),
            "event RunHistoryState: count and gpu_seconds must hold 64 bins each");
  // A service's spec (its block, min as the elastic floor) comes back whole.
  auto service = ParseJobSpec(R"(
name: llm
kind: service
service:
  port: 8000
  replicas: {min: 1, max: 4}
  readiness: {path: /health, period: 500ms, startup: 5m}
  autoscale: {target_inflight: 4, target_gpu_memory: 0.8, panic_window: 10s, scale_down_delay: 2m, spare: 1}
tasks: [{name: server, gpus: 1, command: [python3, serve.py]}]
)",
                              "svc.yaml");
  ASSERT_TRUE(service.ok()) << service.status().ToString();
  EXPECT_EQ(service->service.autoscale.spare, 1);
  auto svc_back = DecodeEvent(EncodeEvent(JobSubmitted{JobId(21), *service, 1, "alice"}));
  ASSERT_TRUE(svc_back.ok()) << svc_back.status().ToString();
  EXPECT_EQ(std::get<JobSubmitted>(*svc_back).spec, *service);
  auto update = DecodeEvent(EncodeEvent(ServiceUpdated{JobId(21), 2, *service, "alice", 7}));
  ASSERT_TRUE(update.ok()) << update.status().ToString();
  EXPECT_EQ(std::get<ServiceUpdated>(*update).spec, *service);
  EXPECT_EQ(std::get<ServiceUpdated>(*update).spec_attempt, 7);
  EXPECT_EQ(EncodeEvent(*update), EncodeEvent(ServiceUpdated{JobId(21), 2, *service, "alice", 7}));

  auto sub = DecodeEvent(EncodeEvent(events[3]));
  const auto& js = std::get<JobSubmitted>(*sub);
  EXPECT_EQ(js.spec.priority, 1000);
  EXPECT_EQ(js.spec.tasks[0].cpu, 1500);
  EXPECT_EQ(js.user, "alice");
  for (const Event& e : events) {  // the snapshot's attained service survives
    const auto* submitted = std::get_if<JobSubmitted>(&e);
    if (submitted == nullptr || submitted->id != JobId(7200)) continue;
    EXPECT_EQ(std::get<JobSubmitted>(*DecodeEvent(EncodeEvent(e))).attained, 5'000'000);
  }
}

TEST(EventCodec, RejectsGarbage) {
  EXPECT_FALSE(DecodeEvent("").ok());
  EXPECT_FALSE(DecodeEvent("[1,2]").ok());
  EXPECT_FALSE(DecodeEvent(R"({"type": "Nope"})").ok());
  EXPECT_FALSE(DecodeEvent(R"({"type": "JobBound", "id": "x"})").ok());
}

TEST(NodeSpecJson, NamesBadFields) {
  auto j = nlohmann::json::parse(R"({"name": "n", "gpus": 8, "gpu_model": "H100", "colour": "red"})");
  EXPECT_EQ(NodeSpecFromJson(j, "body").status().message(), "body: colour: unknown field");
  j = nlohmann::json::parse(R"({"name": "n", "gpus": "eight"})");
  EXPECT_EQ(NodeSpecFromJson(j, "body").status().message(), "body: gpus: wrong type");
  j = nlohmann::json::parse(R"({"name": "n", "gpus": 8, "gpu_model": "H100", "memory": "lots"})");
  EXPECT_EQ(NodeSpecFromJson(j, "body").status().message(), "body: memory: 'lots' is not a valid memory quantity");
  // Counts are whole and in range, not cast: 2^32 + 8 GPUs were 8, and 8.9 were 8.
  j = nlohmann::json::parse(R"({"name": "n", "gpus": 4294967304, "gpu_model": "H100"})");
  EXPECT_EQ(NodeSpecFromJson(j, "body").status().message(), "body: gpus: out of range");
  j = nlohmann::json::parse(R"({"name": "n", "gpus": 8.9, "gpu_model": "H100"})");
  EXPECT_EQ(NodeSpecFromJson(j, "body").status().message(), "body: gpus: must be a whole number");
  j = nlohmann::json::parse(R"({"name": "n", "gpus": 8, "gpu_model": "H100", "nvlink_islands": -4294967294})");
  EXPECT_EQ(NodeSpecFromJson(j, "body").status().message(), "body: nvlink_islands: out of range");
  j = nlohmann::json::parse(R"({"name": "n", "gpus": 8, "gpu_model": "H100"})");
  EXPECT_EQ(NodeSpecFromJson(j, "body")->gpus, 8);
}

}  // namespace
}  // namespace rota::api
