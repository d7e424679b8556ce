// Batch: the changes one actor batch makes (controller.h): events applied to
// the working state as they are validated, appended to the store together
// (group commit), and answered once durable. The controller's parts (job
// lifecycle, node registry, scheduling loop) change state only through the
// batch they are handed, on the actor.
#pragma once

#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "core/cluster_state.h"

namespace rota::server {

struct Batch {
  ClusterState* state;
  std::vector<Event> events;
  std::vector<std::function<void(const Status&)>> done;
  std::vector<bool> standalone;  // per done: its result stands even if the journal write fails
  // Idempotency keys of this batch's submissions: kept once it is durable.
  std::vector<std::pair<std::string, std::pair<JobId, int64_t>>> request_ids = {};
  // What a message changed beside the state (the controller's tables): put
  // back, last first, if the batch cannot be journaled (the state is
  // restored whole then).
  std::vector<std::function<void()>> undo = {};
  Status Apply(Event e) {
    Status s = state->Apply(e);
    if (s.ok()) events.push_back(std::move(e));
    return s;
  }
};

}  // namespace rota::server
