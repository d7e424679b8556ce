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
//   - restarts a replica the router's readiness gave up on (RankRestarted).
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
  sched::AutoscaleDecision last;  // the last decision (desired 0: none yet)
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
  std::map<JobId, std::unique_ptr<sched::Autoscaler>> scalers_;  // (under run_mu_)
  std::mutex stop_mu_;
  std::condition_variable stop_cv_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace rota::server
