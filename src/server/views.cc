#include "server/views.h"

#include <charconv>
#include <ctime>
#include <optional>

#include "api/json_codec.h"
#include "sched/queues.h"
#include "server/histogram.h"

namespace rota::server {

using nlohmann::ordered_json;

std::string TimeText(TimePoint t) { return t == 0 ? "" : FormatTime(t); }

namespace {

bool Digit(char c) { return c >= '0' && c <= '9'; }
bool WordChar(char c) { return Digit(c) || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == '-'; }

// Without the program, PATH and mounts a replica that did not start names
// (the agent's words, after " did not start: "); what the lifecycle
// appended after them stays.
std::string WithoutStartDetail(std::string_view text) {
  static constexpr std::string_view kDetail = " did not start: ";
  const size_t at = text.find(kDetail);
  if (at == std::string_view::npos) return std::string(text);
  std::string out(text.substr(0, at));
  out += " did not start (its owner's log says why)";
  out += LifecycleSuffix(text.substr(at));
  return out;
}

// The ids of other users' jobs told as theirs (ReasonFor).
std::string WithoutOthersIds(const Snapshot& snap, std::string_view text, const std::string& viewer) {
  static constexpr std::string_view kWords[] = {"job(s) ", "jobs ", "job ", "service "};
  std::string out;
  out.reserve(text.size());
  size_t i = 0;
  while (i < text.size()) {
    std::string_view word;
    if (i == 0 || !WordChar(text[i - 1])) {
      for (std::string_view w : kWords) {
        if (text.substr(i, w.size()) == w && i + w.size() < text.size() && Digit(text[i + w.size()])) {
          word = w;
          break;
        }
      }
    }
    if (word.empty()) {
      out += text[i++];
      continue;
    }
    // Its ids: N or N, M, ...
    size_t j = i + word.size();
    std::vector<std::string_view> kept;
    size_t hidden = 0;
    for (;;) {
      size_t k = j;
      while (k < text.size() && Digit(text[k])) ++k;
      uint64_t id = 0;
      const auto parsed = std::from_chars(text.data() + j, text.data() + k, id);
      const JobRecord* job = parsed.ec == std::errc() ? snap.FindJob(JobId(id)) : nullptr;
      // (A job forgotten since is no one's to see: its id alone says nothing of whose it was.)
      if (job == nullptr || job->user == viewer) kept.push_back(text.substr(j, k - j));
      else ++hidden;
      j = k;
      if (text.substr(j, 2) != ", " || j + 2 >= text.size() || !Digit(text[j + 2])) break;
      j += 2;
    }
    if (hidden == 0) {
      out += text.substr(i, j - i);
      i = j;
      continue;
    }
    const bool service = word == "service ";
    if (kept.empty()) {
      out += service ? "another user's service" : word == "job " ? "another user's job" : "other users' jobs";
    } else {
      out += word;
      for (size_t k = 0; k < kept.size(); ++k) out += (k > 0 ? ", " : "") + std::string(kept[k]);
      out += hidden == 1 ? " and another user's" : " and other users'";
    }
    i = j;
    // (A service scaled up says why after " replicas: ", its load, which is
    // not to be told; what the lifecycle added after it stays.)
    static constexpr std::string_view kScaled = " replicas: ";
    if (service && text.substr(i).starts_with(" (priority ")) {
      if (const size_t at = text.find(kScaled, i); at != std::string_view::npos) {
        out += text.substr(i, at + kScaled.size() - 2 - i);
        out += LifecycleSuffix(text.substr(at));
        break;
      }
    }
  }
  return out;
}

}  // namespace

std::string ReasonFor(const Snapshot& snap, std::string_view text, bool owner, const std::string* viewer) {
  std::string out = owner ? std::string(text) : WithoutStartDetail(text);
  return viewer == nullptr ? out : WithoutOthersIds(snap, out, *viewer);
}

ordered_json JobView(const Controller& c, const Snapshot& snap, const JobRecord& job, bool owner, bool with_spec,
                     const std::string* viewer) {
  auto reason = [&](std::string_view text) { return ReasonFor(snap, text, owner, viewer); };
  ordered_json j;
  j["id"] = job.id.value();
  j["name"] = job.spec().name;
  j["user"] = job.user;
  // (What only its owner and admins see: the client's request id, where it
  // saves checkpoints, its usage flags.)
  if (owner && !job.request_id.empty()) j["request_id"] = job.request_id;
  j["queue"] = job.spec().queue;
  j["priority"] = job.spec().priority;
  j["state"] = std::string(JobStateName(job.state));
  j["replicas"] = job.spec().TotalReplicas();
  j["gpus"] = job.spec().TotalGpus();
  // Shares of GPUs, shown where whole GPUs would be ("2 x 0.5", "MIG 2g.35gb").
  std::string shares;
  for (const TaskGroupSpec& t : job.spec().tasks) {
    if (!t.gpu_share.shared()) continue;
    const std::string one = t.gpu_share.mig_profile.empty() ? FormatMilliCpu(t.gpu_share.fraction_milli)
                                                            : "MIG " + t.gpu_share.mig_profile;
    shares += (shares.empty() ? "" : ", ") + (t.replicas > 1 ? std::to_string(t.replicas) + " x " : "") + one;
  }
  if (!shares.empty()) j["gpu_shares"] = shares;
  j["submitted_at"] = TimeText(job.submitted_at);
  j["started_at"] = TimeText(job.started_at);
  j["finished_at"] = TimeText(job.finished_at);
  // Spans on the server's clock (a client's may differ): how long it waited
  // (to its start, or until now while pending) and ran (to now, or its end).
  const TimePoint now = c.clock().Now();
  const bool started = job.started_at != 0;
  const TimePoint ended = job.finished_at != 0 ? job.finished_at : now;
  if (job.state == JobState::kPending) j["waited_s"] = std::max<Duration>(0, now - job.submitted_at) / kMicrosPerSecond;
  else if (started) j["waited_s"] = std::max<Duration>(0, job.started_at - job.submitted_at) / kMicrosPerSecond;
  if (started && job.state != JobState::kPending) {
    j["elapsed_s"] = std::max<Duration>(0, ended - job.started_at) / kMicrosPerSecond;
  }
  if (job.spec().time_limit > 0) {
    j["time_limit"] = FormatDuration(job.spec().time_limit);
    j["time_limit_s"] = job.spec().time_limit / kMicrosPerSecond;
  }
  j["placement"] = ordered_json::array();
  for (const ReplicaPlacement& r : job.placement) {
    j["placement"].push_back({{"task", job.spec().tasks[r.task].name},
                              {"replica", r.replica},
                              {"node", snap.node(r.node).spec.name},
                              {"gpus", api::GpuIndices(r.gpu_mask)}});
    if (r.gpu_milli > 0) {
      // Shared with other fractions: where the node's agent found an MPS
      // control daemon, MPS enforces the task's share and memory limit (its
      // CUDA_MPS_* variables); otherwise nothing does.
      j["placement"].back()["gpu_fraction"] = FormatMilliCpu(r.gpu_milli);
      const std::string& name = snap.node(r.node).spec.name;
      const auto live = c.nodes_live({name});  // read only for GPU fractions (MPS)
      const bool mps = live.count(name) && live.at(name).mps;
      j["placement"].back()["isolation"] = mps ? "MPS (compute share and memory limit enforced by the MPS server)"
                                               : "none (shared GPU; limits advisory: no MPS daemon on the node)";
    }
    if (r.mig_start >= 0) {
      j["placement"].back()["mig"] = job.spec().tasks[r.task].gpu_share.mig_profile + "@" + std::to_string(r.mig_start);
      j["placement"].back()["isolation"] = "hardware (MIG instance)";
    }
  }
  if (job.state == JobState::kPending && job.held) {
    j["held"] = true;
    j["pending_reason"] = {{"code", "Held"},
                           {"message", "held by " + job.held_by + ": not scheduled until released (rota release " +
                                           std::to_string(job.id.value()) + ")"}};
  } else if (job.state == JobState::kPending) {
    auto why = c.pending_reason(job.id);
    if (why) {
      j["pending_reason"] = {{"code", std::string(sched::ReasonCodeName(why->code))}, {"message", reason(why->message.str())}};
      if (why->expected_start != 0) j["expected_start"] = TimeText(why->expected_start);
    }
    else j["pending_reason"] = {{"code", "NotYetScheduled"}, {"message", "waiting for the next scheduling cycle"}};
  }
  if (job.state == JobState::kPreempting) {
    // Its replicas are stopping (checkpoint signal, then grace): evicted, or
    // to restart (then its next attempt starts once none of them runs).
    j["stopping"] = {{"since", TimeText(job.preempting_since)},
                     {"then", job.restarting ? "restart" : "requeue"},
                     {"reason", reason(job.last_requeue_reason)}};
  }
  if (!job.end_reason.empty()) j["end_reason"] = reason(job.end_reason);
  if (job.array_count > 0) {
    j["array"] = {{"id", job.array.value()}, {"index", job.array_index()}, {"count", job.array_count}};
    if (job.array_first_index > 0) j["array"]["first_index"] = job.array_first_index;
    if (job.array_max_running > 0) j["array"]["max_running"] = job.array_max_running;
  }
  j["restarts"] = job.restarts;
  if (job.rank_restarts > 0) j["rank_restarts"] = job.rank_restarts;
  if (job.spec().is_service()) {
    // What its autoscaler wants, and why (rota services has the signals).
    j["service"] = {{"port", job.spec().service.port},
                    {"desired", job.DesiredReplicas()},
                    {"autoscale", job.spec().service.autoscale.enabled()}};
    if (job.scaled_at != 0) {
      j["service"]["last_scale"] = {{"at", FormatTime(job.scaled_at)}, {"reason", job.last_scale_reason}};
    }
  }
  if (job.spec().elastic()) {
    // Replicas running now, of min..max.
    j["elastic"] = {{"min_replicas", job.spec().elastic_min_replicas},
                    {"replicas", job.spec().TotalReplicas()},
                    {"running", job.state == JobState::kRunning || job.state == JobState::kPreempting
                                    ? static_cast<int64_t>(job.placement.size())
                                    : 0},
                    {"resizes", job.resizes}};
  }
  if (job.last_checkpoint_at != 0) {
    j["last_checkpoint"] = {{"at", TimeText(job.last_checkpoint_at)}};
    if (owner) j["last_checkpoint"]["path"] = job.last_checkpoint_path;
  }
  if (owner) {
    if (auto flags = c.job_flags(job); !flags.empty()) j["flags"] = flags;
  }
  if (!job.last_requeue_reason.empty()) j["last_requeue_reason"] = reason(job.last_requeue_reason);
  if (with_spec) j["spec"] = api::JobSpecToJson(job.spec());
  return j;
}

std::string NodeStateName(const Controller& c, const NodeState& node, const std::map<std::string, NodeLive>& live) {
  // Lost goes first: a drained node whose agent has gone silent is lost
  // (the drain still shows, as "drained" and its reason, in the view).
  if (node.lost) return "lost";
  auto it = live.find(node.spec.name);
  const bool registered = it != live.end() && it->second.registered;
  if (registered && c.clock().Steady() - it->second.last_heartbeat > c.node_timeout()) return "lost";
  if (node.drained) return "drained";
  if (!registered) return "declared";  // no agent has reported for it
  return "ready";
}

ordered_json NodeView(const Controller& c, const Snapshot& snap, const NodeState& node,
                      const std::map<std::string, NodeLive>& live, const std::string* viewer) {
  ordered_json j;
  j["name"] = node.spec.name;
  j["state"] = NodeStateName(c, node, live);
  if (node.drained) j["drained"] = true;
  if (node.drained && !node.drain_reason.empty()) j["drain_reason"] = node.drain_reason;
  j["gpu_model"] = node.spec.gpu_model;
  j["gpus"] = node.spec.gpus;
  j["gpus_allocated"] = std::popcount(node.busy_mask());
  j["gpus_unhealthy"] = std::popcount(node.all_mask & ~node.healthy_mask);
  j["cpu"] = FormatMilliCpu(node.spec.cpu);
  j["cpu_allocated"] = FormatMilliCpu(node.cpu_allocated);
  j["memory"] = FormatMemoryMiB(node.spec.memory);
  j["memory_allocated"] = FormatMemoryMiB(node.memory_allocated);
  j["labels"] = node.spec.labels;
  j["nvlink_islands"] = node.spec.nvlink_islands;
  auto it = live.find(node.spec.name);
  j["simulated"] = it != live.end() && it->second.simulated;
  // (Kept on the steady clock: shown as the wall time that long ago.)
  // (Not one only seeded from the journal's agent at a start: never heard.)
  j["last_heartbeat"] = it != live.end() && it->second.last_heartbeat != 0 && (it->second.registered || it->second.expected)
                            ? TimeText(c.clock().Now() - (c.clock().Steady() - it->second.last_heartbeat))
                            : "";
  ordered_json gpus = ordered_json::array();
  for (int32_t g = 0; g < node.spec.gpus; ++g) {
    ordered_json gj{{"index", g},
                    {"allocated", ((node.busy_mask() >> g) & 1) != 0},
                    {"healthy", ((node.healthy_mask >> g) & 1) != 0}};
    if ((node.shared_mask >> g) & 1) gj["shared_milli"] = node.milli_used(g);
    if ((node.mig_mask >> g) & 1) {
      // The MIG layout, and which instances are in use ("1g.10gb@0*": in use).
      std::string layout;
      for (const MigInstance& i : node.mig_layout[g]) {
        layout += (layout.empty() ? "" : ",") + std::string(node.mig_geometry->profiles[i.profile].name) + "@" +
                  std::to_string(i.start) + (((node.mig_used[g] >> i.start) & 1) ? "*" : "");
      }
      gj["mig"] = layout;
    }
    if (it != live.end()) {
      for (const GpuTelemetry& t : it->second.gpus) {
        if (t.index != g) continue;
        if (t.utilization_pct >= 0) gj["utilization_pct"] = t.utilization_pct;  // -1: unknown (MIG mode)
        gj["memory_used"] = FormatMemoryMiB(t.memory_used);
        gj["temperature_c"] = t.temperature_c;
        gj["power_w"] = t.power_w;
        // Why the agent calls it unhealthy ("xid 79", "temperature 95C").
        if (!t.healthy && !t.health_reason.empty()) gj["health_reason"] = t.health_reason;
      }
    }
    // Which jobs hold it (several when fractions share it).
    std::vector<uint64_t> holders;
    for (const auto& [id, job] : snap.live_jobs()) {
      if (job->state != JobState::kRunning && job->state != JobState::kPreempting) continue;
      if (viewer != nullptr && job->user != *viewer) continue;
      for (const ReplicaPlacement& r : job->placement) {
        if (r.node == node.id && ((r.gpu_mask >> g) & 1)) {
          holders.push_back(id.value());
          break;
        }
      }
    }
    if (!holders.empty()) gj["job"] = holders.front();
    if (holders.size() > 1) gj["jobs"] = holders;
    gpus.push_back(std::move(gj));
  }
  j["gpu_list"] = std::move(gpus);
  return j;
}

namespace {
void AddQueues(const std::vector<QueueConfig>& qs, const std::string& prefix, std::vector<const QueueConfig*>* leaves,
               std::vector<std::string>* paths) {
  for (const auto& q : qs) {
    const std::string path = prefix.empty() ? q.name : prefix + "/" + q.name;
    if (q.children.empty()) {
      leaves->push_back(&q);
      paths->push_back(path);
    } else {
      AddQueues(q.children, path, leaves, paths);
    }
  }
}

}  // namespace

// One word for a queue's standing, first that holds: "starved" (jobs wait
// while it holds less than its guarantee), "borrowing" (it holds more than
// its quota, where it has one), "over_share" (more than its fair share), else "ok".
std::string QueueStatus(int64_t pending, int64_t held, int64_t guaranteed, int64_t borrowed, bool has_quota,
                        double fair_share) {
  if (pending > 0 && held < guaranteed) return "starved";
  if (borrowed > 0 && has_quota) return "borrowing";
  if (static_cast<double>(held) > fair_share + 1e-9) return "over_share";
  return "ok";
}

ordered_json QueuesView(const Controller& c, const Snapshot& snap) {
  std::vector<const QueueConfig*> leaves;
  std::vector<std::string> paths;
  AddQueues(c.config().queues, "", &leaves, &paths);
  if (paths.empty()) {
    paths.push_back("default");
    leaves.push_back(nullptr);
  }
  // Fair share: the cluster's GPUs split by weight among siblings, down the
  // tree (the weights the engine's queue book orders queues by).
  int64_t total_gpus = 0;
  for (const NodeState& n : snap.nodes()) total_gpus += n.spec.gpus;
  sched::QueueBook book;
  book.Configure(c.config());
  ordered_json out = ordered_json::array();
  for (size_t i = 0; i < paths.size(); ++i) {
    int64_t pending = 0, running = 0, gpus = 0;
    for (const auto& [id, job] : snap.live_jobs()) {
      if (job->spec().queue != paths[i]) continue;
      if (job->state == JobState::kPending) ++pending;
      if (job->state == JobState::kRunning || job->state == JobState::kPreempting) {
        ++running;
        gpus += job->HeldGpus();
      }
    }
    int64_t guaranteed = 0;
    if (leaves[i] != nullptr) {
      for (const auto& [model, n] : leaves[i]->quota) guaranteed += n;
    }
    const std::string accepts = AcceptsOnPath(c.config(), paths[i]);
    const int64_t borrowed = leaves[i] != nullptr ? std::max<int64_t>(0, gpus - guaranteed) : 0;
    const double fair = static_cast<double>(total_gpus) *
                        (book.LeafIndex(paths[i]) >= 0 ? book.effective_weight(book.LeafIndex(paths[i])) : 1.0);
    out.push_back({{"name", paths[i]},
                   {"accepts", accepts},
                   {"weight", leaves[i] ? leaves[i]->weight : 1},
                   {"pending", pending},
                   {"running", running},
                   {"gpus_allocated", gpus},
                   {"gpus_guaranteed", guaranteed},
                   {"gpus_borrowed", borrowed},
                   {"fair_share_gpus", fair},
                   {"status", QueueStatus(pending, gpus, guaranteed, borrowed,
                                               leaves[i] != nullptr && !leaves[i]->quota.empty(), fair)}});
    if (const QueueConfig* cap = PriorityCapOnPath(c.config(), paths[i])) out.back()["max_priority"] = cap->max_priority;
  }
  return out;
}

namespace {

// /metrics is written piece by piece into one string: at 12,500 nodes it is
// 800,000 samples, and a temporary string per piece cost most of a scrape.
void Put(std::string& out, std::string_view s) { out.append(s); }
void PutInt(std::string& out, int64_t v) {
  char b[24];
  out.append(b, std::to_chars(b, b + sizeof b, v).ptr);
}
// As printf's %g (to_chars with a precision formats as printf does).
void PutG(std::string& out, double v) {
  char b[64];
  out.append(b, std::to_chars(b, b + sizeof b, v, std::chars_format::general, 6).ptr);
}
// A label value: backslash, quote and newline escaped.
void PutEscaped(std::string& out, std::string_view v) {
  for (char ch : v) {
    if (ch == '\\' || ch == '"') out += '\\';
    if (ch == '\n') {
      out += "\\n";
      continue;
    }
    out += ch;
  }
}
std::string Escape(std::string_view v) {
  std::string out;
  PutEscaped(out, v);
  return out;
}

}  // namespace

std::string RenderMetrics(const Controller& c, bool dcgm_labels, const std::string* viewer) {
  Snapshot snap = c.snapshot();
  const auto live = c.nodes_live();
  const ControllerMetrics m = c.metrics();
  ordered_json queues = QueuesView(c, snap);
  std::string out;
  // About what it comes to: a GPU's 8 samples (more with GPM), a node's
  // line, a running job's 3 to 6.
  size_t gpus = 0, running = 0;
  for (const auto& [node, l] : live) gpus += l.gpus.size();
  for (const auto& q : queues) running += static_cast<size_t>(std::max<int64_t>(0, q["running"].get<int64_t>()));
  out.reserve(4096 + 100 * snap.nodes().size() + 700 * gpus + 400 * running);
  auto header = [&](std::string_view name, std::string_view type, std::string_view help) {
    Put(out, "# HELP ");
    Put(out, name);
    Put(out, " ");
    Put(out, help);
    Put(out, "\n# TYPE ");
    Put(out, name);
    Put(out, " ");
    Put(out, type);
    Put(out, "\n");
  };
  // name{label="value"} n
  auto sample = [&](std::string_view name, std::string_view label, std::string_view value, int64_t n) {
    Put(out, name);
    Put(out, "{");
    Put(out, label);
    Put(out, "=\"");
    PutEscaped(out, value);
    Put(out, "\"} ");
    PutInt(out, n);
    Put(out, "\n");
  };

  header("rota_store_writable", "gauge", "1 while the journal accepts writes, 0 while the store refuses them.");
  Put(out, c.StoreError().empty() ? "rota_store_writable 1\n" : "rota_store_writable 0\n");
  header("rota_queue_pending_jobs", "gauge", "Pending jobs per leaf queue.");
  for (const auto& q : queues) sample("rota_queue_pending_jobs", "queue", q["name"].get<std::string>(), q["pending"].get<int64_t>());
  header("rota_queue_running_jobs", "gauge", "Running jobs per leaf queue.");
  for (const auto& q : queues) sample("rota_queue_running_jobs", "queue", q["name"].get<std::string>(), q["running"].get<int64_t>());
  header("rota_queue_allocated_gpus", "gauge", "GPUs held by running jobs per leaf queue.");
  for (const auto& q : queues) {
    sample("rota_queue_allocated_gpus", "queue", q["name"].get<std::string>(), q["gpus_allocated"].get<int64_t>());
  }
  header("rota_queue_deserved_gpus", "gauge", "GPUs guaranteed to each leaf queue by its quota.");
  for (const auto& q : queues) {
    sample("rota_queue_deserved_gpus", "queue", q["name"].get<std::string>(), q["gpus_guaranteed"].get<int64_t>());
  }

  header("rota_scheduling_cycle_seconds", "histogram", "Latency of one scheduling cycle.");
  AppendHistogram(out, "rota_scheduling_cycle_seconds", kCycleBuckets, m.cycle_buckets, m.cycle_sum_seconds, 9);
  header("rota_actor_batch_seconds", "histogram",
         "From the controller taking a batch of changes to answering them: applied, journaled and published.");
  AppendHistogram(out, "rota_actor_batch_seconds", kBatchBuckets, m.batch_buckets, m.batch_sum_seconds, 9);
  header("rota_journal_append_seconds", "histogram", "Latency of one batch's journal write (durable when it ends).");
  AppendHistogram(out, "rota_journal_append_seconds", kBatchBuckets, m.append_buckets, m.append_sum_seconds, 9);

  header("rota_job_idle", "gauge", "1 for a running job whose GPUs have stayed idle past the right-sizing window.");
  header("rota_job_overprovisioned", "gauge", "1 for a running job whose peak GPU memory stays far below its GPUs'.");
  header("rota_job_input_bound", "gauge",
         "1 for a running job whose GPUs wait on a CPU saturated against its limit (a data pipeline that cannot feed them).");
  std::string idle, over, starved, energy, memory, activity;
  std::map<std::pair<NodeId, int32_t>, uint64_t> holder;  // whole GPUs -> the running job on them
  std::string labels;
  for (const auto& [id, job] : snap.live_jobs()) {
    if (job->state != JobState::kRunning) continue;
    if (viewer != nullptr && job->user != *viewer) continue;  // (a job's usage is its owner's: docs/trust.md)
    bool is_idle = false, is_over = false, is_starved = false;
    for (const std::string& f : c.job_flags(*job)) {
      is_idle = is_idle || f.rfind("idle", 0) == 0;
      is_over = is_over || f.rfind("over", 0) == 0;
      is_starved = is_starved || f.rfind("input-bound", 0) == 0;
    }
    labels.assign("{job=\"");
    PutInt(labels, static_cast<int64_t>(id.value()));
    Put(labels, "\",queue=\"");
    PutEscaped(labels, job->spec().queue);
    Put(labels, "\"} ");
    auto flag = [&](std::string& to, std::string_view name, bool on) {
      Put(to, name);
      Put(to, labels);
      Put(to, on ? "1\n" : "0\n");
    };
    flag(idle, "rota_job_idle", is_idle);
    flag(over, "rota_job_overprovisioned", is_over);
    flag(starved, "rota_job_input_bound", is_starved);
    // The attempt's measure so far (whole GPUs; none until telemetry came).
    const UsageRecord u = c.PeekUsage(snap, *job);
    if (u.measured()) {
      Put(energy, "rota_job_gpu_energy_joules_total");
      Put(energy, labels);
      PutInt(energy, u.energy_mj / 1000);
      Put(energy, "\n");
      Put(memory, "rota_job_gpu_memory_peak_bytes");
      Put(memory, labels);
      PutInt(memory, u.gpu_memory_peak * 1024 * 1024);
      Put(memory, "\n");
      Put(activity, "rota_job_gpu_activity_ratio");
      Put(activity, labels);
      PutG(activity, u.activity.Mean() / 100.0);
      Put(activity, "\n");
    }
    for (const ReplicaPlacement& r : job->placement) {
      if (r.shares_gpu()) continue;
      for (uint64_t bits = r.gpu_mask; bits != 0; bits &= bits - 1) holder[{r.node, std::countr_zero(bits)}] = id.value();
    }
  }
  // Each family's samples follow its own HELP and TYPE lines.
  {
    out.insert(out.find("# HELP rota_job_overprovisioned"), idle);
    out.insert(out.find("# HELP rota_job_input_bound"), over);
    out += starved;
  }
  header("rota_job_gpu_energy_joules_total", "counter", "Energy of a running job's GPUs in its current attempt.");
  out += energy;
  header("rota_job_gpu_memory_peak_bytes", "gauge", "Highest GPU memory used by any of a running job's GPUs this attempt.");
  out += memory;
  header("rota_job_gpu_activity_ratio", "gauge", "Mean utilisation of a running job's GPUs this attempt (1 = 100%).");
  out += activity;

  header("rota_jobs_submitted_total", "counter", "Jobs accepted since this server started.");
  out += "rota_jobs_submitted_total " + std::to_string(m.jobs_submitted) + "\n";
  header("rota_jobs_held", "gauge", "Jobs the server holds: the live ones, and those that ended until the job retention forgets them.");
  out += "rota_jobs_held " + std::to_string(snap.jobs().size()) + "\n";
  header("rota_preemptions_total", "counter", "Jobs preempted since this server started.");
  out += "rota_preemptions_total " + std::to_string(m.preemptions) + "\n";

  std::map<std::string, int64_t> states{{"ready", 0}, {"declared", 0}, {"drained", 0}, {"lost", 0}};
  for (const NodeState& n : snap.nodes()) states[NodeStateName(c, n, live)]++;
  header("rota_nodes", "gauge", "Nodes by state.");
  for (const auto& [state, n] : states) sample("rota_nodes", "state", state, n);

  header("rota_node_gpus_allocated", "gauge", "GPUs in use per node (whole, shared by fractions, or with a MIG instance in use).");
  for (const NodeState& n : snap.nodes()) sample("rota_node_gpus_allocated", "node", n.spec.name, std::popcount(n.busy_mask()));

  // What every GPU's labels need, worked out once a node: its name, its
  // state's, and the job holding each of its reported GPUs whole.
  struct NodeGpus {
    std::string name;          // escaped
    std::string model;         // escaped ("" without a node in the state)
    const NodeState* state;    // (none: a node no longer in the state)
    std::vector<uint64_t> job;  // per reported GPU: its job (0: none)
  };
  std::vector<NodeGpus> per_node;
  per_node.reserve(live.size());
  for (const auto& [node, l] : live) {
    NodeGpus g{Escape(node), "", snap.FindNode(node), {}};
    if (g.state != nullptr) g.model = Escape(g.state->spec.gpu_model);
    g.job.reserve(l.gpus.size());
    for (const GpuTelemetry& t : l.gpus) {
      auto h = g.state != nullptr ? holder.find({g.state->id, t.index}) : holder.end();
      g.job.push_back(h != holder.end() ? h->second : 0);
    }
    per_node.push_back(std::move(g));
  }

  struct Series {
    const char* name;
    const char* help;
    double (*get)(const GpuTelemetry&);
  };
  const Series series[] = {
      {"rota_gpu_utilization_ratio", "GPU utilisation reported by the node agent (0..1).",
       [](const GpuTelemetry& t) { return t.utilization_pct / 100.0; }},
      {"rota_gpu_memory_used_bytes", "GPU memory in use.",
       [](const GpuTelemetry& t) { return static_cast<double>(t.memory_used) * 1024 * 1024; }},
      {"rota_gpu_temperature_celsius", "GPU temperature.", [](const GpuTelemetry& t) { return double(t.temperature_c); }},
      {"rota_gpu_power_watts", "GPU power draw.", [](const GpuTelemetry& t) { return double(t.power_w); }},
  };
  for (const Series& s : series) {
    header(s.name, "gauge", s.help);
    size_t k = 0;
    for (const auto& [node, l] : live) {
      const NodeGpus& g = per_node[k++];
      for (const GpuTelemetry& t : l.gpus) {
        if (s.get(t) < 0) continue;  // not known (utilisation of a GPU in MIG mode)
        Put(out, s.name);
        Put(out, "{node=\"");
        Put(out, g.name);
        Put(out, "\",gpu=\"");
        PutInt(out, t.index);
        Put(out, l.simulated ? "\",simulated=\"true\"} " : "\",simulated=\"false\"} ");
        PutG(out, s.get(t));
        Put(out, "\n");
      }
    }
  }
  // The same readings under dcgm-exporter's names, with its gpu and device
  // labels (what its dashboards select by), the host and model in
  // snake_case (dcgm-exporter's Hostname and modelName fail Prometheus'
  // naming lint), and the job where one running job holds the GPU whole. No
  // UUID: agents report GPUs by index.
  struct Dcgm {
    const char* name;
    const char* help;
    int64_t (*get)(const GpuTelemetry&);
  };
  const Dcgm dcgm[] = {
      {"DCGM_FI_DEV_GPU_UTIL", "GPU utilization (in %).", [](const GpuTelemetry& t) { return int64_t{t.utilization_pct}; }},
      {"DCGM_FI_DEV_FB_USED", "Framebuffer memory used (in MiB).", [](const GpuTelemetry& t) { return t.memory_used; }},
      {"DCGM_FI_DEV_GPU_TEMP", "GPU temperature (in C).", [](const GpuTelemetry& t) { return int64_t{t.temperature_c}; }},
      {"DCGM_FI_DEV_POWER_USAGE", "Power draw (in W).", [](const GpuTelemetry& t) { return int64_t{t.power_w}; }},
  };
  // name{gpu=..,device=..,model_name=..,hostname=..[,job=..]} (the value follows).
  auto gpu_labels = [&](std::string_view name, const NodeGpus& g, int32_t index, uint64_t job) {
    Put(out, name);
    Put(out, "{gpu=\"");
    PutInt(out, index);
    Put(out, "\",device=\"nvidia");
    PutInt(out, index);
    Put(out, dcgm_labels ? "\",modelName=\"" : "\",model_name=\"");
    Put(out, g.model);
    Put(out, dcgm_labels ? "\",Hostname=\"" : "\",hostname=\"");
    Put(out, g.name);
    Put(out, "\"");
    if (job != 0) {
      Put(out, ",job=\"");
      PutInt(out, static_cast<int64_t>(job));
      Put(out, "\"");
    }
    Put(out, "} ");
  };
  for (const Dcgm& d : dcgm) {
    header(d.name, "gauge", d.help);
    size_t k = 0;
    for (const auto& [node, l] : live) {
      const NodeGpus& g = per_node[k++];
      for (size_t i = 0; i < l.gpus.size(); ++i) {
        const GpuTelemetry& t = l.gpus[i];
        if (d.get(t) < 0) continue;
        gpu_labels(d.name, g, t.index, g.job[i]);
        PutInt(out, d.get(t));
        Put(out, "\n");
      }
    }
  }
  // GPM (Hopper and later), as ratios like dcgm-exporter's profiling fields;
  // GPUs without GPM have none.
  struct Prof {
    const char* name;
    const char* help;
    int32_t GpuTelemetry::*field;
  };
  const Prof prof[] = {
      {"DCGM_FI_PROF_SM_ACTIVE", "The ratio of cycles an SM has at least 1 warp assigned.", &GpuTelemetry::sm_active_pct},
      {"DCGM_FI_PROF_SM_OCCUPANCY", "The ratio of number of warps resident on an SM.", &GpuTelemetry::sm_occupancy_pct},
      {"DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "Ratio of cycles the tensor (HMMA) pipe is active.",
       &GpuTelemetry::tensor_active_pct},
      {"DCGM_FI_PROF_DRAM_ACTIVE", "Ratio of cycles the device memory interface is active sending or receiving data.",
       &GpuTelemetry::dram_active_pct},
  };
  for (const Prof& p : prof) {
    header(p.name, "gauge", p.help);
    size_t k = 0;
    for (const auto& [node, l] : live) {
      const NodeGpus& g = per_node[k++];
      for (size_t i = 0; i < l.gpus.size(); ++i) {
        const GpuTelemetry& t = l.gpus[i];
        if (t.*p.field < 0) continue;
        gpu_labels(p.name, g, t.index, g.job[i]);
        PutG(out, t.*p.field / 100.0);
        Put(out, "\n");
      }
    }
  }
  // Energy: dcgm-exporter's counter (since boot there; since this server
  // started here), typed untyped unless its labels are asked for (a counter
  // without _total fails the lint), and the same under rota's name.
  header("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", dcgm_labels ? "counter" : "untyped",
         "Total energy consumption since this server started (in mJ).");
  std::string joules;
  {
    size_t k = 0;
    for (const auto& [node, l] : live) {
      const NodeGpus& g = per_node[k++];
      for (const auto& [index, mj] : l.energy_mj) {
        auto h = g.state != nullptr ? holder.find({g.state->id, index}) : holder.end();
        gpu_labels("DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", g, index, h != holder.end() ? h->second : 0);
        PutInt(out, mj);
        Put(out, "\n");
        Put(joules, "rota_gpu_energy_joules_total{node=\"");
        Put(joules, g.name);
        Put(joules, "\",gpu=\"");
        PutInt(joules, index);
        Put(joules, "\"} ");
        PutInt(joules, mj / 1000);
        Put(joules, "\n");
      }
    }
  }
  header("rota_gpu_energy_joules_total", "counter", "GPU energy in the agents' reports since this server started.");
  out += joules;
  return out;
}

}  // namespace rota::server
