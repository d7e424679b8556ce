// Services in the simulator: the server's autoscaler and engine, driven by
// request-rate traces through the router's model (service_model.h).
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "api/yaml_codec.h"
#include "base/rng.h"
#include "sim/profile_sim.h"
#include "sim/service_model.h"
#include "sim/test_util.h"
#include "server/router.h"

namespace rota::sim {
namespace {

constexpr Duration kS = kMicrosPerSecond;
constexpr Duration kWarm = 20 * kS;

// A service of 1-GPU replicas between `min` and `max`, 4 requests in
// flight per replica as its target (or `autoscale`).
JobSpec Service(int min, int max, const std::string& autoscale = "{target_inflight: 4}") {
  const std::string yaml = "name: chat\nkind: service\nservice:\n  port: 8000\n  replicas: {min: " + std::to_string(min) +
                           ", max: " + std::to_string(max) + "}\n  autoscale: " + autoscale +
                           "\ntasks:\n  - name: server\n    gpus: 1\n    command: [serve]\n";
  StatusOr<JobSpec> spec = api::ParseJobSpec(yaml, "chat.yaml");
  EXPECT_TRUE(spec.ok()) << spec.status().ToString();
  return spec.ok() ? *spec : JobSpec();
}

// Requests of 100 ms, `concurrency` at once per replica, ready 10 s after
// a start. Traffic comes from 20 s on, once the first replicas are ready (a
// service loading its weights while requests pile up at the router panics:
// that is the cold-start test's).
ServiceLoad Load(JobSpec spec, std::vector<std::pair<TimePoint, double>> rate, int32_t concurrency = 8) {
  ServiceLoad l;
  l.spec = std::move(spec);
  for (auto& [at, per_second] : rate) l.rate.push_back({at + kWarm, per_second});
  l.rate.insert(l.rate.begin(), {0, 0.0});
  l.work = 100'000;
  l.concurrency = concurrency;
  l.startup = 10 * kS;
  return l;
}

// The replicas placed when its load ended (before its job was cancelled).
int32_t PlacedAtTheEnd(const ServiceResult& s) {
  if (s.placed.size() < 2 || s.placed.back().second != 0) return -1;
  return s.placed[s.placed.size() - 2].second;
}

ClusterConfig Config() {
  ClusterConfig c;
  c.topology = {"nvlink", "node"};
  return c;
}

TimeSimOptions Profile(std::vector<ServiceLoad> services) {
  TimeSimOptions o;
  o.policy = "profile";
  o.grace = 60 * kS;
  o.save_time = 30 * kS;
  o.services = std::move(services);
  return o;
}

TEST(ServiceSim, AThresholdCrossingIsDecidedWithinTwoSecondsAndPlacedInTheSamePass) {
  // 20 requests/s (2 in flight: one replica) steps to 200/s at 600 s.
  const TimePoint step = 600 * kS;
  StatusOr<TimeSimResult> r =
      RunTimeSim(Config(), Nodes(1, 8), {}, Profile({Load(Service(1, 8), {{0, 20}, {step, 200}, {900 * kS, 0}})}));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_EQ(r->services.size(), 1u);
  const ServiceResult& s = r->services[0];
  ASSERT_FALSE(s.decisions.empty());
  const ServiceScaling& up = s.decisions.front();
  EXPECT_GE(up.at, step + kWarm);
  EXPECT_LE(up.at - (step + kWarm), 2 * kS) << up.reason;
  EXPECT_GT(up.to, up.from);
  // The replicas it asked for were placed at the same virtual time (the
  // decision and the engine's pass are one step).
  bool placed = false;
  for (const auto& [at, count] : s.placed) placed |= at == up.at && count == up.to;
  EXPECT_TRUE(placed) << "first decision at " << up.at << " to " << up.to;
  EXPECT_EQ(s.placed.front(), (std::pair<TimePoint, int32_t>{0, 1}));
  EXPECT_GT(s.requests, 60'000u);
  EXPECT_EQ(s.failed, 0u);
}

TEST(ServiceSim, NoiseAroundTheTargetForTwoHoursNeverFlipsDirection) {
  // 120 requests/s of 100 ms: 12 in flight, 3 replicas at the target of 4,
  // +-10% every 10 s, for 2 hours.
  Rng rng(11);
  std::vector<std::pair<TimePoint, double>> rate;
  for (TimePoint t = 0; t < 2 * 3600 * kS; t += 10 * kS) rate.push_back({t, 120 * (0.9 + 0.2 * rng.UniformDouble())});
  rate.push_back({2 * 3600 * kS, 0});
  StatusOr<TimeSimResult> r = RunTimeSim(Config(), Nodes(1, 8), {}, Profile({Load(Service(3, 8), rate)}));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const ServiceResult& s = r->services[0];
  EXPECT_EQ(s.direction_flips, 0);
  EXPECT_TRUE(s.decisions.empty()) << s.decisions.front().reason;
  EXPECT_EQ(PlacedAtTheEnd(s), 3);
  EXPECT_GT(s.requests, 800'000u);
}

TEST(ServiceSim, AServiceScalesOnItsOwnMetric) {
  // vLLM's queue as the target: 2 requests waiting per replica. 20 requests/s
  // of 100 ms (4 at once a replica: 40/s each) rise to 120/s at 10 minutes.
  ServiceLoad l = Load(Service(1, 8, "{metrics: [{name: 'vllm:num_requests_waiting', target: 2}]}"),
                       {{0, 20}, {600 * kS, 120}, {1800 * kS, 0}}, 4);
  l.metrics["vllm:num_requests_waiting"] = ServiceLoad::Quantity::kWaiting;
  StatusOr<TimeSimResult> r = RunTimeSim(Config(), Nodes(1, 8), {}, Profile({l}));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const ServiceResult& s = r->services[0];
  ASSERT_FALSE(s.decisions.empty());
  EXPECT_GE(s.decisions.front().at, 600 * kS + kWarm);  // nothing waits at 20/s
  EXPECT_NE(s.decisions.front().reason.find("vllm:num_requests_waiting"), std::string::npos) << s.decisions.front().reason;
  EXPECT_GE(PlacedAtTheEnd(s), 4);  // 120/s needs 3 replicas' slots, and some room
  EXPECT_EQ(s.failed, 0u);
}

TEST(ServiceSim, AServiceScalesOnGpuMemory) {
  // A replica holds 30% of its GPU's memory and 5% more per request it
  // has; target 60%, max 16 on 16 GPUs. At 400 requests/s of 100 ms (40 in
  // flight) it needs (0.3 k + 40 x 0.05) / 0.6 <= k: k >= 7. It goes up
  // there from what 100/s needed, overshoots while its stable window
  // still remembers the overload, and comes back down; never to its max
  // (the fraction is of the replicas it was read from, loading ones too,
  // not of the count it wants).
  ServiceLoad l = Load(Service(1, 16, "{target_gpu_memory: 0.6}"), {{0, 100}, {1200 * kS, 400}, {2400 * kS, 0}});
  l.memory_base = 0.3;
  l.memory_per_request = 0.05;
  StatusOr<TimeSimResult> r = RunTimeSim(Config(), Nodes(2, 8), {}, Profile({l}));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const ServiceResult& s = r->services[0];
  ASSERT_FALSE(s.decisions.empty());
  int32_t before = -1, most = 0;
  for (const auto& [at, count] : s.placed) {
    if (at < 1200 * kS + kWarm) before = count;
    most = std::max(most, count);
  }
  for (const ServiceScaling& d : s.decisions) EXPECT_NE(d.reason.find("GPU memory"), std::string::npos) << d.reason;
  EXPECT_GE(before, 2);
  EXPECT_LE(before, 3);
  EXPECT_GE(PlacedAtTheEnd(s), 7);
  EXPECT_LE(most, 10);
  EXPECT_EQ(s.direction_flips, 1);  // up with the load, then down from the overshoot
  // One replica a decision while the backlog grows: for a while more than
  // the router's 4,096 connections wait, and those beyond are refused
  // (0.4%).
  EXPECT_LT(s.failed, s.requests / 100);
}

TEST(ServiceSim, AServiceOnQuarterGpusScalesOntoSharedGpus) {
  // Replicas of a quarter GPU each on a node of 2 GPUs: 20 requests/s
  // (2 in flight: one replica) step to 200/s (20 in flight: 5 replicas) at
  // 10 minutes; the scale-up lands on the GPUs its replicas share (4 on the
  // first, the fifth on the second), in the pass that decided it.
  JobSpec svc = Service(1, 8);
  svc.tasks[0].gpus = 0;
  svc.tasks[0].gpu_share.fraction_milli = 250;
  ASSERT_TRUE(ValidateNewJobSpec(svc).ok()) << ValidateNewJobSpec(svc).message();
  StatusOr<TimeSimResult> r =
      RunTimeSim(Config(), Nodes(1, 2), {}, Profile({Load(svc, {{0, 20}, {600 * kS, 200}, {1200 * kS, 0}})}));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const ServiceResult& s = r->services[0];
  ASSERT_FALSE(s.decisions.empty());
  const ServiceScaling& up = s.decisions.front();
  EXPECT_GT(up.to, up.from) << up.reason;
  bool placed = false;
  for (const auto& [at, count] : s.placed) placed |= at == up.at && count == up.to;
  EXPECT_TRUE(placed) << "first decision at " << up.at << " to " << up.to;
  EXPECT_GE(PlacedAtTheEnd(s), 5);
  EXPECT_EQ(s.failed, 0u);
}

TEST(ServiceSim, AReplicaThatFailsIsRestartedAndItsRequestsAreRetriedOnAnother) {
  // 3 fixed replicas, each failing every 10 minutes on average, for 2 hours
  // at 40 requests/s: about 36 exits. Each is restarted in place (journaled
  // as the server's lifecycle does) and its requests go once to another
  // ready replica: none fails. With one replica there is no other: its
  // requests fail at each exit, and new ones wait for it to load again.
  ServiceLoad three = Load(Service(3, 3), {{0, 40}, {2 * 3600 * kS, 0}});
  three.spec.service.autoscale = {};
  three.failure_every = 600 * kS;
  ProfileRecord record;
  StatusOr<TimeSimResult> r = RunProfileSim(Config(), Nodes(1, 8), {}, Profile({three}), &record);
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const ServiceResult& s = r->services[0];
  EXPECT_GT(s.replica_failures, 20);
  EXPECT_LT(s.replica_failures, 60);
  int32_t restarts = 0;
  for (const Event& e : record.events) restarts += std::holds_alternative<RankRestarted>(e);
  EXPECT_EQ(restarts, s.replica_failures);
  EXPECT_GT(s.retried, 0u);
  EXPECT_EQ(s.failed, 0u);
  EXPECT_EQ(PlacedAtTheEnd(s), 3);
  std::printf("3 replicas, an exit every 10 min each: %d exits, %llu requests, %llu retried, %llu failed\n",
              s.replica_failures, static_cast<unsigned long long>(s.requests), static_cast<unsigned long long>(s.retried),
              static_cast<unsigned long long>(s.failed));

  ServiceLoad one = Load(Service(1, 1), {{0, 10}, {2 * 3600 * kS, 0}});
  one.spec.service.autoscale = {};
  one.failure_every = 600 * kS;
  r = RunTimeSim(Config(), Nodes(1, 8), {}, Profile({one}));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_GT(r->services[0].replica_failures, 0);
  EXPECT_GT(r->services[0].failed, 0u);
  std::printf("1 replica, the same: %d exits, %llu requests, %llu failed\n", r->services[0].replica_failures,
              static_cast<unsigned long long>(r->services[0].requests),
              static_cast<unsigned long long>(r->services[0].failed));
  // Without failures the same run has none (and takes the draws it took before).
  one.failure_every = 0;
  r = RunTimeSim(Config(), Nodes(1, 8), {}, Profile({one}));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->services[0].replica_failures, 0);
  EXPECT_EQ(r->services[0].failed, 0u);
}

TEST(ServiceSim, AServiceEndsWithItsLoadAndTheTraceGetsItsGpus) {
  // 8 fixed replicas fill the node until the load ends at 90.5 s; a job
  // that needs the whole node waits until then.
  ServiceLoad l = Load(Service(8, 8), {});
  l.rate = {{0, 1}, {90'500'000, 0}};
  l.spec.service.autoscale = {};
  StatusOr<TimeSimResult> r = RunTimeSim(Config(), Nodes(1, 8), {Job("train", 10, 100, 8)}, Profile({l}));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  EXPECT_EQ(r->jobs[0].first_start, 90'500'000);
  EXPECT_EQ(r->jobs[0].end, 190'500'000);
  EXPECT_NEAR(r->services[0].replica_seconds, 8 * 90.5, 1e-6);
  // A second service submitted after the first ended still ticks.
  ServiceLoad later = Load(Service(1, 4), {});
  later.spec.name = "later";
  later.spec.service.port = 9000;
  later.submit = 200 * kS;
  later.rate = {{200 * kS, 0}, {260 * kS, 150}, {900 * kS, 0}};
  r = RunTimeSim(Config(), Nodes(1, 8), {Job("train", 10, 100, 8)}, Profile({l, later}));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  ASSERT_FALSE(r->services[1].decisions.empty());
  EXPECT_GT(r->services[1].decisions.front().at, 260 * kS);
  EXPECT_GT(r->services[1].requests, 80'000u);
}

// The adversary: a load far beyond what the replicas serve (10,000
// requests/s of 1 s on one replica that takes one at a time) holds at most
// the router's connection limit in flight; the rest is refused, as the
// router refuses it, and the run's memory stays bounded.
TEST(ServiceSim, ALoadBeyondTheRoutersConnectionsIsRefused) {
  EXPECT_EQ(static_cast<size_t>(ServiceModel::kMaxInFlight), server::RouterOptions{}.max_connections);
  ServiceLoad l = Load(Service(1, 1), {}, 1);
  l.rate = {{0, 10'000}, {60 * kS, 0}};
  l.work = kS;
  l.spec.service.autoscale = {};
  StatusOr<TimeSimResult> r = RunTimeSim(Config(), Nodes(1, 8), {}, Profile({l}));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const ServiceResult& s = r->services[0];
  EXPECT_GT(s.failed, 500'000u);  // 600,000 arrive; about 50 are answered
  EXPECT_LT(s.requests, 100u);
}

TEST(ServiceSim, ReplicasStartingAreNotReadyAndRequestsWaitForThem) {
  // Without autoscaling: two replicas, ready 10 s after they start; the
  // first requests wait for them (queueing >= 9 s for the first ones).
  ServiceLoad l = Load(Service(2, 2), {});
  l.rate = {{0, 10}, {60 * kS, 0}};  // (from the start, not after a warm-up)
  l.spec.service.autoscale = {};
  StatusOr<TimeSimResult> r = RunTimeSim(Config(), Nodes(1, 8), {}, Profile({l}));
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  const ServiceResult& s = r->services[0];
  EXPECT_TRUE(s.decisions.empty());
  EXPECT_EQ(s.placed.front(), (std::pair<TimePoint, int32_t>{0, 2}));
  EXPECT_GT(s.queue_p99_ms, 5'000);  // the first 10 s of requests waited
  EXPECT_LT(s.queue_p50_ms, 1);
  EXPECT_NEAR(s.replica_seconds, 2 * 60, 1);
}

// With training saturating the other GPUs, a scale-up evicts training for
// the GPUs it needs (through its checkpoint grace). Each new replica comes
// the victim's save time later than it would on an idle cluster; one spare
// replica (autoscale.spare) absorbs that, and the inference tier's p99
// queueing and latency are then within 5% of the tier alone.
TEST(ServiceSim, TrainingOnTheOtherGpusDoesNotSlowTheInferenceTier) {
  // An hour of traffic that climbs from 2 to 6 replicas' worth (80 to 240
  // requests/s of 100 ms, 4 in flight a replica as the target, 6 at once)
  // and back.
  std::vector<std::pair<TimePoint, double>> rate;
  const double base = 80, peak = 240;  // requests/s
  for (int m = 0; m < 60; ++m) {
    const double x = m < 15 ? 0 : m < 30 ? (m - 15) / 15.0 : m < 45 ? 1 : (60 - m) / 15.0;
    rate.push_back({m * 60 * kS, base + (peak - base) * x});
  }
  rate.push_back({3600 * kS, 0});
  // 16 GPUs. Training: 1-GPU preemptible jobs, always more than fit.
  std::vector<TraceJob> training;
  for (int i = 0; i < 40; ++i) {
    TraceJob j = Job("t" + std::to_string(i), i < 14 ? 0 : 60 * (i - 13), 3 * 3600, 1);
    j.priority = 100;
    j.checkpoint_interval = 600 * kS;
    training.push_back(j);
  }
  struct Run {
    ServiceResult alone, shared;
    int64_t evictions = 0;
  };
  auto run = [&](int32_t spare) {
    ServiceLoad load = Load(Service(3, 8), rate, 6);
    load.spec.service.autoscale.spare = spare;
    StatusOr<TimeSimResult> alone = RunTimeSim(Config(), Nodes(2, 8), {}, Profile({load}));
    StatusOr<TimeSimResult> shared = RunTimeSim(Config(), Nodes(2, 8), training, Profile({load}));
    EXPECT_TRUE(alone.ok()) << alone.status().ToString();
    EXPECT_TRUE(shared.ok()) << shared.status().ToString();
    if (!alone.ok() || !shared.ok()) return Run{};
    const ServiceResult& a = alone->services[0];
    const ServiceResult& b = shared->services[0];
    std::printf("spare %d: p99 queueing %.1f ms alone, %.1f ms with training; p99 latency %.1f / %.1f ms; %lld evictions\n",
                spare, a.queue_p99_ms, b.queue_p99_ms, a.latency_p99_ms, b.latency_p99_ms,
                static_cast<long long>(shared->summary.preemptions));
    return Run{a, b, shared->summary.preemptions};
  };
  // Without a spare: each scale-up's replica is placed the victim's save
  // time (30 s) after it is decided; alone, at once. The same decisions.
  const Run none = run(0);
  ASSERT_EQ(none.alone.decisions.size(), none.shared.decisions.size());
  ASSERT_EQ(none.alone.placed.size(), none.shared.placed.size());
  EXPECT_GT(none.evictions, 0);
  for (size_t i = 1; i < none.alone.placed.size(); ++i) {
    const auto& [at, count] = none.alone.placed[i];
    const bool up = count > none.alone.placed[i - 1].second;
    EXPECT_EQ(none.shared.placed[i].first - at, up ? 30 * kS : 0) << i;
    EXPECT_EQ(none.shared.placed[i].second, count);
  }
  EXPECT_GT(none.shared.queue_p99_ms, none.alone.queue_p99_ms);  // what those 30 s cost
  // With one spare replica the tier does not see the training.
  const Run spare = run(1);
  EXPECT_GT(spare.evictions, 0);
  EXPECT_LE(spare.shared.queue_p99_ms, spare.alone.queue_p99_ms * 1.05 + 0.5);
  EXPECT_LE(spare.shared.latency_p99_ms, spare.alone.latency_p99_ms * 1.05);
  EXPECT_EQ(spare.shared.failed, 0u);
  EXPECT_EQ(spare.alone.failed, 0u);
}

TEST(ServiceSim, TheServicesFileNamesTheFieldThatIsWrong) {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / ("rota-svc-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  std::ofstream(dir / "chat.yaml") << "name: chat\nkind: service\nservice: {port: 8000, replicas: {min: 1, max: 4}}\n"
                                      "tasks: [{name: s, gpus: 1, command: [serve]}]\n";
  std::ofstream(dir / "vllm.yaml") << "name: vllm\nkind: service\nservice: {port: 8000, replicas: {min: 1, max: 4}, "
                                      "autoscale: {metrics: [{name: 'vllm:num_requests_waiting', target: 2}]}}\n"
                                      "tasks: [{name: s, gpus: 1, command: [serve]}]\n";
  std::ofstream(dir / "mem.yaml") << "name: mem\nkind: service\nservice: {port: 8000, replicas: {min: 1, max: 4}, "
                                     "autoscale: {target_gpu_memory: 0.8}}\ntasks: [{name: s, gpus: 1, command: [serve]}]\n";
  std::ofstream(dir / "train.yaml") << "name: train\ntasks: [{name: s, gpus: 1, command: [train]}]\n";
  auto parse = [&](const std::string& text) { return ParseServiceLoads(text, (dir / "services.yaml").string()); };
  StatusOr<std::vector<ServiceLoad>> ok =
      parse("services:\n  - job: chat.yaml\n    submit: 1m\n    requests: {rate: [[0, 5], [1h, 0]], work: 200ms, "
            "concurrency: 4, startup: 20s, memory: {base: 0.3, per_request: 0.05}, metrics: {'vllm:num_requests_waiting': waiting}}\n");
  ASSERT_TRUE(ok.ok()) << ok.status().ToString();
  EXPECT_EQ(ok->at(0).spec.name, "chat");
  EXPECT_EQ(ok->at(0).submit, 60 * kS);
  EXPECT_EQ(ok->at(0).end(), 3600 * kS);
  EXPECT_EQ(ok->at(0).work, 200'000);
  EXPECT_EQ(ok->at(0).concurrency, 4);
  EXPECT_DOUBLE_EQ(ok->at(0).memory_per_request, 0.05);
  EXPECT_EQ(ok->at(0).metrics.at("vllm:num_requests_waiting"), ServiceLoad::Quantity::kWaiting);
  const std::pair<std::string, std::string> bad[] = {
      {"services: []\n", "services: must be a non-empty list"},
      {"services:\n  - job: train.yaml\n    requests: {rate: [[0, 1], [1h, 0]]}\n", "is not a service"},
      {"services:\n  - job: chat.yaml\n    requests: {rate: [[0, 1]]}\n", "services[0].requests.rate: must list at least two"},
      {"services:\n  - job: chat.yaml\n    requests: {rate: [[1h, 1], [0, 0]]}\n", "services[0].requests.rate[1]: times must increase"},
      {"services:\n  - job: chat.yaml\n    requests: {rate: [[0, -1], [1h, 0]]}\n", "services[0].requests.rate[0][1]: must be in"},
      {"services:\n  - job: chat.yaml\n    requests: {rate: [[0, 1], [1h, 0]], work: soon}\n", "services[0].requests.work: not a duration"},
      {"services:\n  - job: chat.yaml\n    requests: {rate: [[0, 1], [1h, 0]], burst: 3}\n", "services[0].requests.burst: unknown field"},
      {"services:\n  - job: nothere.yaml\n    requests: {rate: [[0, 1], [1h, 0]]}\n", "services[0].job"},
      {"services:\n  - job: chat.yaml\n    requests: {rate: [[0, 1], [1h, 0]], metrics: {q: soon}}\n",
       "services[0].requests.metrics.q: must be waiting, running or memory, not 'soon'"},
      {"services:\n  - job: vllm.yaml\n    requests: {rate: [[0, 1], [1h, 0]]}\n",
       "services[0].requests.metrics: the job scales on 'vllm:num_requests_waiting': say what it is"},
      {"services:\n  - job: chat.yaml\n    requests: {rate: [[0, 1], [1h, 0]], metrics: {kv: memory}}\n",
       "services[0].requests.metrics.kv: memory: say how much a replica uses"},
      {"services:\n  - job: mem.yaml\n    requests: {rate: [[0, 1], [1h, 0]]}\n",
       "services[0].requests.memory: the job scales on GPU memory"},
      {"services:\n  - job: chat.yaml\n    failures: {every: 0s}\n    requests: {rate: [[0, 1], [1h, 0]]}\n",
       "services[0].failures.every: must be at least 1s"},
      {"services:\n  - job: chat.yaml\n    failures: {}\n    requests: {rate: [[0, 1], [1h, 0]]}\n",
       "services[0].failures.every: required"},
      {"services:\n  - job: chat.yaml\n    requests: {rate: [[0, 1], [1h, 0]], rate_file: r.csv}\n",
       "services[0].requests: give rate or rate_file, not both"},
  };
  // A rate from a CSV (a metrics system's export), beside the file.
  std::ofstream(dir / "rates.csv") << "t_s,requests_per_s\n0,5\n600,50.5\r\n3600,0\n";
  StatusOr<std::vector<ServiceLoad>> csv = parse("services:\n  - job: chat.yaml\n    requests: {rate_file: rates.csv}\n");
  ASSERT_TRUE(csv.ok()) << csv.status().ToString();
  EXPECT_EQ(csv->at(0).rate, (std::vector<std::pair<TimePoint, double>>{{0, 5}, {600 * kS, 50.5}, {3600 * kS, 0}}));
  std::ofstream(dir / "bad.csv") << "t_s,requests_per_s\n0,5\n60,x\n";  // (line 3)
  StatusOr<std::vector<ServiceLoad>> bad_csv = parse("services:\n  - job: chat.yaml\n    requests: {rate_file: bad.csv}\n");
  ASSERT_FALSE(bad_csv.ok());
  EXPECT_NE(bad_csv.status().message().find("bad.csv:3: requests_per_s: not a number: 'x'"), std::string::npos)
      << bad_csv.status().ToString();
  for (const auto& [text, want] : bad) {
    StatusOr<std::vector<ServiceLoad>> r = parse(text);
    ASSERT_FALSE(r.ok()) << text;
    EXPECT_NE(r.status().message().find(want), std::string::npos) << r.status().ToString();
  }
  std::filesystem::remove_all(dir);
}

TEST(ServiceSim, ResearchPoliciesRefuseServices) {
  TimeSimOptions o = Profile({Load(Service(1, 2), {{0, 1}, {60 * kS, 0}})});
  o.policy = "fifo";
  StatusOr<TimeSimResult> r = RunTimeSim(Config(), Nodes(1, 8), {Job("a", 0, 60, 1)}, o);
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("--services"), std::string::npos);
}

}  // namespace
}  // namespace rota::sim
