#include "sched/place_context.h"

#include <algorithm>
#include <tuple>

namespace rota::sched {

void PlaceContext::NewCycle() {
  if (ws_->classes_changed()) orders_.clear();
  static_fits_.job = nullptr;  // (nodes may have changed)
}

bool PlaceContext::Fits(const JobRequest& job, const TaskRequest& task, uint32_t pos) const {
  const NodeView view = ws_->View(pos);
  for (const FilterPlugin* f : profile_->filters()) {
    if (f->Filter(job, task, view).fit != FilterResult::kFits) return false;
  }
  return true;
}

const std::vector<PlaceContext::BucketRef>& PlaceContext::OrderFor(const TaskRequest& task) {
  for (const BucketOrder& o : orders_) {
    if (o.model == task.model && o.gpus == task.gpus) return o.order;
  }
  BucketOrder o{task.model, task.gpus, {}};
  struct Ranked {
    int64_t score;
    int32_t free;
    int32_t cls;
  };
  std::vector<Ranked> ranked;
  const auto& classes = ws_->classes();
  for (size_t c = 0; c < classes.size(); ++c) {
    if (task.model >= 0 && classes[c].model != task.model) continue;
    for (int32_t f = task.gpus; f <= classes[c].capacity; ++f) {
      ranked.push_back({profile_->Score({classes[c].capacity, f, task.gpus}), f, static_cast<int32_t>(c)});
    }
  }
  std::sort(ranked.begin(), ranked.end(), [](const Ranked& a, const Ranked& b) {
    return std::tie(b.score, a.free, a.cls) < std::tie(a.score, b.free, b.cls);
  });
  for (const Ranked& r : ranked) o.order.push_back({r.cls, r.free});
  orders_.push_back(std::move(o));
  return orders_.back().order;
}

uint32_t PlaceContext::SelectNode(const JobRequest& job, const TaskRequest& task, uint32_t begin, uint32_t end) {
  if (task.model_missing) return end;
  for (const BucketRef& b : OrderFor(task)) {
    for (uint32_t pos = ws_->FindNext(b.cls, b.free, begin, end); pos < end;
         pos = ws_->FindNext(b.cls, b.free, pos + 1, end)) {
      if (Fits(job, task, pos)) return pos;
    }
  }
  return end;
}

uint32_t PlaceContext::SelectNodeByScan(const JobRequest& job, const TaskRequest& task, uint32_t begin,
                                        uint32_t end) const {
  uint32_t best = end;
  std::tuple<int64_t, int32_t, int32_t> best_key{};
  for (uint32_t pos = begin; pos < end; ++pos) {
    if (!ws_->schedulable(pos) || !Fits(job, task, pos)) continue;
    const int32_t free = ws_->free_gpus(pos);
    const int32_t cls = ws_->node_class(pos);
    const int64_t score = profile_->Score({ws_->classes()[cls].capacity, free, task.gpus});
    // Higher score, then fewer free GPUs, then lower class, then lower position.
    std::tuple<int64_t, int32_t, int32_t> key{-score, free, cls};
    if (best == end || key < best_key) {
      best = pos;
      best_key = key;
    }
  }
  return best;
}

void PlaceContext::Bind(const TaskRequest& task, uint32_t replica, uint32_t pos) {
  txn_->Place({task.task, replica, pos, ws_->ChooseGpus(pos, task.gpus), task.cpu, task.memory});
}

}  // namespace rota::sched
