// JSON codecs for the wire and the journal: job specs, node specs and events.
// A job spec's JSON is the DESIGN.md job format, so it reads back through
// ParseJobSpec with the same validation as a submitted file.
//
// Only nlohmann/json_fwd.hpp is included here; the full header stays in the
// .cc files that build or read JSON.
#pragma once

#include <nlohmann/json_fwd.hpp>
#include <string>
#include <string_view>

#include "core/event.h"

namespace rota::api {

nlohmann::ordered_json JobSpecToJson(const JobSpec& spec);
nlohmann::ordered_json NodeSpecToJson(const NodeSpec& spec);
// `source` names the input in errors ("request body").
StatusOr<NodeSpec> NodeSpecFromJson(const nlohmann::json& j, std::string_view source);

// One line of JSON per event: {"type": "JobSubmitted", ...}.
std::string EncodeEvent(const Event& event);
StatusOr<Event> DecodeEvent(std::string_view text);

// GPU indices of a mask: 0b1010 -> [1, 3].
std::vector<int32_t> GpuIndices(uint64_t mask);

}  // namespace rota::api
