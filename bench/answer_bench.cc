// What the server spends writing an agent's answer (a heartbeat's answer,
// a watch event): api::AnswerText, written value by value (api/json_text.h),
// beside its baseline in the same run, the tree AnswerToJson builds and
// dumps (what the server did before). The answer is a node's 8 tasks of a
// 1-GPU job array, as the server assigns them (docs/transport.md).
//
// usage: answer_bench [--answers 20000] [--tasks 8]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "api/agent_protocol.h"

namespace rota {
namespace {

api::AgentAnswer NodeAnswer(int tasks) {
  api::AgentAnswer answer{.revision = 123456, .fence_after_ms = 40000, .heartbeat_interval_ms = 10000};
  for (int i = 0; i < tasks; ++i) {
    api::TaskAssignment a;
    a.job = JobId(100000 + static_cast<uint64_t>(i));
    a.job_name = "swarm";
    a.task_name = "main";
    a.gpus = {i};
    a.command = {"true"};
    a.env = {{"ROTA_ARRAY_ID", "100000"}, {"ROTA_ARRAY_INDEX", std::to_string(i)}, {"ROTA_ARRAY_COUNT", "20000"}};
    a.master_addr = "swarm-node-01234";
    a.master_port = 20000 + i;
    a.hosts = {"swarm-node-01234"};
    a.user = "admin";
    a.bound_at = 1'764'000'000'000'000 + i;
    answer.tasks.push_back(a);
  }
  return answer;
}

}  // namespace
}  // namespace rota

int main(int argc, char** argv) {
  int answers = 20000, tasks = 8;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (std::strcmp(argv[i], "--answers") == 0) answers = std::atoi(argv[i + 1]);
    if (std::strcmp(argv[i], "--tasks") == 0) tasks = std::atoi(argv[i + 1]);
  }
  const rota::api::AgentAnswer answer = rota::NodeAnswer(tasks);
  using Clock = std::chrono::steady_clock;
  size_t bytes = 0;
  // Each way three times, alternating; the best of each.
  double tree[2] = {1e9, 1e9}, text[2] = {1e9, 1e9};
  for (int round = 0; round < 3; ++round) {
    for (int pretty = 0; pretty < 2; ++pretty) {
      const int indent = pretty ? 2 : -1;
      auto t0 = Clock::now();
      for (int i = 0; i < answers; ++i) {
        bytes += rota::api::AnswerToJson(answer).dump(indent, ' ', false, nlohmann::ordered_json::error_handler_t::replace).size();
      }
      tree[pretty] = std::min(tree[pretty], std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / answers);
      t0 = Clock::now();
      for (int i = 0; i < answers; ++i) bytes += rota::api::AnswerText(answer, indent).size();
      text[pretty] = std::min(text[pretty], std::chrono::duration<double, std::micro>(Clock::now() - t0).count() / answers);
    }
  }
  std::printf("an answer of %d tasks (%zu bytes compact, %zu pretty), best of 3 x %d:\n", tasks,
              rota::api::AnswerText(answer).size(), rota::api::AnswerText(answer, 2).size(), answers);
  for (int pretty = 0; pretty < 2; ++pretty) {
    std::printf("  %-28s tree + dump %.1f us, AnswerText %.1f us: %.1fx\n",
                pretty ? "pretty (heartbeat answers)" : "compact (watch events)", tree[pretty], text[pretty],
                tree[pretty] / text[pretty]);
  }
  return bytes == 0;
}
