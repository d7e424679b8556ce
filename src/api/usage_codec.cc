#include "api/usage_codec.h"

#include <nlohmann/json.hpp>

namespace rota::api {

using nlohmann::json;

std::string EncodeUsage(const UsageRecord& r) {
  json j{{"job", r.job.value()},
         {"attempt", r.attempt},
         {"name", r.name},
         {"user", r.user},
         {"queue", r.queue},
         {"array", r.array.value()},
         {"end", r.end},
         {"reason", r.reason},
         {"start", r.started_at},
         {"stop", r.ended_at},
         {"model", r.gpu_model},
         {"gpu_mem", r.gpu_memory},
         {"gpus", r.gpus},
         {"milli", r.gpu_milli},
         {"mig", r.mig_profile},
         {"cpu", r.cpu},
         {"mem", r.memory},
         {"replicas", r.replicas},
         {"restarts", r.restarts},
         {"preemptions", r.preemptions},
         {"lost_s", r.lost_work_s},
         {"act", r.activity.counts},
         {"gpu_peak", r.gpu_memory_peak},
         {"energy_mj", r.energy_mj},
         {"cpu_us", r.cpu_used_us},
         {"throttled_us", r.cpu_throttled_us},
         {"mem_peak", r.memory_peak}};
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

namespace {

template <typename T>
Status Get(const json& j, const char* key, T* out) {
  auto it = j.find(key);
  if (it == j.end()) return DataLossError(std::string("usage record: ") + key + ": missing");
  try {
    *out = it->get<T>();
  } catch (const json::exception&) {
    return DataLossError(std::string("usage record: ") + key + ": wrong type");
  }
  return Status::Ok();
}

}  // namespace

StatusOr<UsageRecord> DecodeUsage(std::string_view text) {
  json j = json::parse(text, nullptr, false);
  if (!j.is_object()) return DataLossError("usage record: not a JSON object");
  UsageRecord r;
  uint64_t job = 0, array = 0;
  ROTA_RETURN_IF_ERROR(Get(j, "job", &job));
  ROTA_RETURN_IF_ERROR(Get(j, "attempt", &r.attempt));
  ROTA_RETURN_IF_ERROR(Get(j, "name", &r.name));
  ROTA_RETURN_IF_ERROR(Get(j, "user", &r.user));
  ROTA_RETURN_IF_ERROR(Get(j, "queue", &r.queue));
  ROTA_RETURN_IF_ERROR(Get(j, "array", &array));
  ROTA_RETURN_IF_ERROR(Get(j, "end", &r.end));
  ROTA_RETURN_IF_ERROR(Get(j, "reason", &r.reason));
  ROTA_RETURN_IF_ERROR(Get(j, "start", &r.started_at));
  ROTA_RETURN_IF_ERROR(Get(j, "stop", &r.ended_at));
  ROTA_RETURN_IF_ERROR(Get(j, "model", &r.gpu_model));
  ROTA_RETURN_IF_ERROR(Get(j, "gpu_mem", &r.gpu_memory));
  ROTA_RETURN_IF_ERROR(Get(j, "gpus", &r.gpus));
  ROTA_RETURN_IF_ERROR(Get(j, "milli", &r.gpu_milli));
  ROTA_RETURN_IF_ERROR(Get(j, "mig", &r.mig_profile));
  ROTA_RETURN_IF_ERROR(Get(j, "cpu", &r.cpu));
  ROTA_RETURN_IF_ERROR(Get(j, "mem", &r.memory));
  ROTA_RETURN_IF_ERROR(Get(j, "replicas", &r.replicas));
  ROTA_RETURN_IF_ERROR(Get(j, "restarts", &r.restarts));
  ROTA_RETURN_IF_ERROR(Get(j, "preemptions", &r.preemptions));
  ROTA_RETURN_IF_ERROR(Get(j, "lost_s", &r.lost_work_s));
  ROTA_RETURN_IF_ERROR(Get(j, "act", &r.activity.counts));
  ROTA_RETURN_IF_ERROR(Get(j, "gpu_peak", &r.gpu_memory_peak));
  ROTA_RETURN_IF_ERROR(Get(j, "energy_mj", &r.energy_mj));
  ROTA_RETURN_IF_ERROR(Get(j, "cpu_us", &r.cpu_used_us));
  ROTA_RETURN_IF_ERROR(Get(j, "throttled_us", &r.cpu_throttled_us));
  ROTA_RETURN_IF_ERROR(Get(j, "mem_peak", &r.memory_peak));
  r.job = JobId(job);
  r.array = JobId(array);
  return r;
}

}  // namespace rota::api
