#include "sched/to_events.h"

namespace rota::sched {

std::vector<Event> ToEvents(const CycleResult& result, const Snapshot& snap, TimePoint now) {
  std::vector<Event> events;
  ToEvents(result, snap, now, &events);
  return events;
}

void ToEvents(const CycleResult& result, const Snapshot& snap, TimePoint now, std::vector<Event>* out) {
  std::vector<Event>& events = *out;
  events.clear();
  events.reserve(result.reconfigurations.size() + result.resizes.size() + result.placed.size() +
                 result.preemptions.size() + result.unresolvable.size());
  for (const Reconfiguration& r : result.reconfigurations) {
    events.push_back(GpuReconfigured{snap.node(r.node).spec.name, r.gpu, r.layout});
  }
  for (const Resize& r : result.resizes) events.push_back(JobResized{r.job, r.replicas, now, r.reason});
  for (const Placed& p : result.placed) {
    events.push_back(JobBound{p.job, {result.replicas.begin() + p.first, result.replicas.begin() + p.first + p.count}, now});
  }
  for (const Preemption& p : result.preemptions) events.push_back(JobPreempting{p.victim, now, p.preemptor, p.reason});
  for (const Waiting& w : result.unresolvable) {
    events.push_back(JobCancelled{w.job, now, "unresolvable: " + w.reason.message});
  }
}

}  // namespace rota::sched
