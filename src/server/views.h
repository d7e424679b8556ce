// JSON views of the control plane's state, shared by the HTTP API and the
// metrics page. Includes nlohmann's full header: only server .cc files use it.
#pragma once

#include <nlohmann/json.hpp>

#include "server/controller.h"

namespace rota::server {

std::string TimeText(TimePoint t);  // "2026-11-29T17:50:00.123Z", "" for 0
// `owner`: the caller is the job's owner or an admin (who alone see its
// request id, checkpoint path and usage flags); `with_spec`: its spec too.
// `viewer`: a user who sees only their own jobs (job_visibility: own): the
// reasons name other users' jobs as theirs, not by id (ReasonFor).
nlohmann::ordered_json JobView(const Controller& c, const Snapshot& snap, const JobRecord& job, bool owner,
                               bool with_spec = false, const std::string* viewer = nullptr);
// A reason or end text of a job (the engine's, the lifecycle's) as the
// caller may read it. Not the job's `owner` (nor an admin): without what
// its spec told the agent (a replica's " did not start: ..." detail: its
// program, PATH, mounts). With `viewer` (job_visibility: own, not an
// admin): the ids of jobs not the viewer's that the text names ("job 12",
// "job(s) 12, 13", "jobs 12", "service 12") are told as another user's, and
// another user's service's autoscaler reason is left out.
std::string ReasonFor(const Snapshot& snap, std::string_view text, bool owner, const std::string* viewer);
// `viewer`: a user who sees only their own jobs (job_visibility: own): the
// ids of other users' jobs on its GPUs are left out; nullptr: all of them.
nlohmann::ordered_json NodeView(const Controller& c, const Snapshot& snap, const NodeState& node,
                                const std::map<std::string, NodeLive>& live, const std::string* viewer = nullptr);
// Per leaf queue: pending and running jobs, allocated and guaranteed GPUs.
nlohmann::ordered_json QueuesView(const Controller& c, const Snapshot& snap);
// A queue's standing, first that holds: "starved", "borrowing", "over_share", "ok".
std::string QueueStatus(int64_t pending, int64_t held, int64_t guaranteed, int64_t borrowed, bool has_quota,
                        double fair_share);
std::string NodeStateName(const Controller& c, const NodeState& node, const std::map<std::string, NodeLive>& live);

// Prometheus text exposition format 0.0.4.
// `dcgm_labels`: dcgm-exporter's own label names on its series (Hostname,
// modelName: what its Grafana dashboards select by; modelName fails
// Prometheus' naming lint), else snake_case ones.
// `viewer`: a user's name (not an admin): per-job series (and the job label
// of a GPU's readings) only for that user's jobs; nullptr: every job.
std::string RenderMetrics(const Controller& c, bool dcgm_labels = false, const std::string* viewer = nullptr);

}  // namespace rota::server
