// ServiceManager: what keeps rota's services (kind: service) served. Once
// per tick (1 s) it
//   - tells the router (server/router.h) each live service's replicas
//     (node address, port + replica, attempt);
//   - reads the router's signals (requests in flight, queued, latency) and
//     the agents' GPU memory telemetry for each service's GPUs;
//   - feeds them to the service's Autoscaler (sched/autoscale.h) and
//     journals a changed desired count (ServiceScaled), which wakes the
//     scheduling loop: the engine places or removes replicas in its next
//     pass;
//   - restarts a replica the router's readiness gave up on (RankRestarted);
//   - rolls a service whose spec was replaced (rota apply) onto it: one
//     replica over its count first (while below its max), then, each time
//     every placed replica is ready, the lowest replica still on the old
//     spec is drained in the router (no new requests; up to 30 s for those
//     it has) and restarted on the new one; at the end the extra replica
//     goes. A new replica that never becomes ready halts it there, the
//     old ones serving. The autoscaler waits meanwhile.
// Its last signals and decision per service are kept for the views.
//
// Thread-safety: thread-safe; one thread of its own between Start and Stop.
#pragma once

#include <atomic>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "sched/autoscale.h"
#include "server/controller.h"
#include "server/router.h"

namespace rota::server {

struct ServiceStatus {
  RouterStats signals;
  double gpu_memory = -1;  // used fraction of its GPUs' memory (-1 = no telemetry)
  int32_t memory_replicas = 0;  // the replicas that fraction is read from
  sched::AutoscaleDecision last;  // the last decision (desired 0: none yet)
  std::string rollout;            // a rolling update in progress: where it is ("" = none)
};

class ServiceManager {
 public:
  // `router` may be null (no router listener): services then scale on GPU
  // memory alone, and have no endpoint.
  ServiceManager(Controller* controller, Router* router, Duration tick = kMicrosPerSecond)
      : controller_(controller), router_(router), tick_(tick) {}
  ~ServiceManager() { Stop(); }

  void Start();
  void Stop();
  // One tick now (tests).
  void Tick();

  std::map<JobId, ServiceStatus> status() const;
  Router* router() const { return router_; }

 private:
  Controller* controller_;
  Router* router_;
  const Duration tick_;
  std::mutex run_mu_;  // one tick at a time
  mutable std::mutex mu_;  // guards status_
  std::map<JobId, ServiceStatus> status_;
  struct Scaler {
    ServiceSpec spec;  // what it was built from (rota apply may change it)
    std::unique_ptr<sched::Autoscaler> autoscaler;
  };
  std::map<JobId, Scaler> scalers_;  // (under run_mu_)
  struct Rollout {
    int32_t base = 0;  // the desired count before it began
    bool surged = false;
    bool draining = false;
    uint16_t task = 0;
    uint32_t replica = 0;
    int32_t attempt = 0;
    TimePoint drain_since = 0;
    TimePoint waiting_since = 0;  // for the extra replica's placement
  };
  std::map<JobId, Rollout> rollouts_;  // (under run_mu_)
  // One step of a service's rolling update; false when none is due (the
  // autoscaler may decide).
  bool Roll(const JobRecord& job, ServiceStatus& st, TimePoint now);
  // Asks back a rolling update's extra replica, if the job's last scale
  // says it still has one (within its min); true if it asked. A refused
  // write is asked again at the next tick, as is one a stopped server
  // never made.
  bool EndSurge(const JobRecord& job);
  std::mutex stop_mu_;
  std::condition_variable stop_cv_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace rota::server
