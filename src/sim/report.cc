#include "sim/report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include <nlohmann/json.hpp>

namespace rota::sim {
namespace {

const char* const kColors[] = {"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#17becf"};

std::string Fmt(double v, int digits = 2) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.*f", digits, v);
  return buf;
}

std::string Escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    switch (c) {
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '&': out += "&amp;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

// At most `limit` points, keeping the first and last (charts need no more).
std::vector<std::pair<double, double>> Thin(std::vector<std::pair<double, double>> p, size_t limit = 1500) {
  if (p.size() <= limit) return p;
  std::vector<std::pair<double, double>> out;
  const double step = static_cast<double>(p.size() - 1) / static_cast<double>(limit - 1);
  for (size_t i = 0; i < limit; ++i) out.push_back(p[static_cast<size_t>(std::llround(static_cast<double>(i) * step))]);
  return out;
}

std::string Page(const std::string& title, const std::vector<std::string>& notes, const std::string& body) {
  std::string html =
      "<!doctype html>\n<html><head><meta charset=\"utf-8\"><title>" + Escape(title) +
      "</title>\n<style>body{font:14px system-ui,sans-serif;margin:24px;color:#222}"
      "table{border-collapse:collapse;margin:12px 0}td,th{border:1px solid #ccc;padding:4px 8px;text-align:right}"
      "th:first-child,td:first-child{text-align:left}svg{margin:8px 16px 8px 0;background:#fff}"
      ".charts{display:flex;flex-wrap:wrap}p.note{color:#555;margin:2px 0}</style></head><body>\n<h1>" +
      Escape(title) + "</h1>\n";
  for (const std::string& n : notes) html += "<p class=\"note\">" + Escape(n) + "</p>\n";
  return html + body + "</body></html>\n";
}

}  // namespace

nlohmann::json SummaryJson(const Summary& s) {
  return {{"jobs", s.jobs},
          {"unfinished", s.unfinished},
          {"avg_jct_s", s.avg_jct_s},
          {"p50_jct_s", s.p50_jct_s},
          {"p95_jct_s", s.p95_jct_s},
          {"p99_jct_s", s.p99_jct_s},
          {"avg_queue_s", s.avg_queue_s},
          {"makespan_s", s.makespan_s},
          {"gpu_alloc_pct_mean", s.gpu_alloc_pct_mean},
          {"jain", s.jain},
          {"idle_while_waiting_pct", s.idle_while_waiting_pct},
          {"preemptions", s.preemptions},
          {"restarts", s.restarts},
          {"lost_gpu_hours", s.lost_gpu_hours},
          {"goodput_pct", s.goodput_pct},
          {"cycles", s.cycles},
          {"cycles_skipped", s.cycles_skipped},
          {"cycle_p50_ms", s.cycle_p50_ms},
          {"cycle_p99_ms", s.cycle_p99_ms},
          {"wall_s", s.wall_s},
          {"sim_days_per_wall_s", s.sim_days_per_wall_s}};
}

nlohmann::json OpenbJson(const OpenbResult& r) {
  return {{"jobs", r.steps.size()},
          {"failed", r.failed},
          {"capacity_gpus", r.capacity_milli / 1000},
          {"alloc_pct_at_100", r.alloc_pct_by_arrived.size() > 100 ? r.alloc_pct_by_arrived[100] : 0.0},
          {"alloc_pct_at_130", r.alloc_pct_by_arrived.size() > 130 ? r.alloc_pct_by_arrived[130] : 0.0},
          {"final_alloc_pct", r.steps.empty() ? 0.0
                                              : 100.0 * static_cast<double>(r.steps.back().used_milli) /
                                                    static_cast<double>(r.capacity_milli)},
          {"alloc_pct_by_arrived", r.alloc_pct_by_arrived},
          {"frag_pct_by_arrived", r.frag_pct_by_arrived},
          {"wall_s", r.wall_s}};
}

namespace {
// RFC 4180: quoted when it holds a comma, quote or line break.
std::string CsvField(const std::string& v) {
  if (v.find_first_of(",\"\r\n") == std::string::npos) return v;
  std::string out = "\"";
  for (char c : v) out += c == '"' ? std::string("\"\"") : std::string(1, c);
  return out + "\"";
}
}  // namespace

std::string JobsCsv(const std::vector<JobResult>& jobs) {
  std::string out = "name,queue,gpus,submit_s,start_s,end_s,duration_s,jct_s,preemptions,restarts,lost_gpu_s\n";
  for (const JobResult& j : jobs) {
    auto s = [](TimePoint t) { return t < 0 ? std::string() : Fmt(static_cast<double>(t) / kMicrosPerSecond, 3); };
    out += CsvField(j.name) + "," + CsvField(j.queue) + "," + std::to_string(j.gpus) + "," + s(j.submit) + "," + s(j.first_start) + "," +
           s(j.end) + "," + s(j.duration) + "," + (j.end < 0 ? std::string() : s(j.jct())) + "," +
           std::to_string(j.preemptions) + "," + std::to_string(j.restarts) + "," + Fmt(j.lost_gpu_seconds, 1) + "\n";
  }
  return out;
}

std::string SamplesCsv(const std::vector<Sample>& samples) {
  std::string out = "t_s,allocated_gpus,pending,running\n";
  for (const Sample& s : samples) {
    out += Fmt(static_cast<double>(s.t) / kMicrosPerSecond, 3) + "," + std::to_string(s.allocated_gpus) + "," +
           std::to_string(s.pending) + "," + std::to_string(s.running) + "\n";
  }
  return out;
}

nlohmann::json ServicesJson(const std::vector<ServiceResult>& services) {
  nlohmann::json out = nlohmann::json::array();
  for (const ServiceResult& s : services) {
    out.push_back({{"name", s.name},
                   {"requests", s.requests},
                   {"failed", s.failed},
                   {"retried", s.retried},
                   {"queue_p50_ms", s.queue_p50_ms},
                   {"queue_p99_ms", s.queue_p99_ms},
                   {"latency_p50_ms", s.latency_p50_ms},
                   {"latency_p99_ms", s.latency_p99_ms},
                   {"decisions", s.decisions.size()},
                   {"direction_flips", s.direction_flips},
                   {"replica_hours", s.replica_seconds / 3600},
                   {"replica_failures", s.replica_failures}});
  }
  return out;
}

std::string ScalingCsv(const std::vector<ServiceResult>& services) {
  auto quoted = [](const std::string& v) {
    std::string q = "\"";
    for (char c : v) q += c == '"' ? std::string("\"\"") : std::string(1, c);
    return q + "\"";
  };
  std::string out = "service,t_s,event,replicas,from,panic,reason\n";
  for (const ServiceResult& s : services) {
    for (const ServiceScaling& d : s.decisions) {
      out += quoted(s.name) + "," + Fmt(static_cast<double>(d.at) / kMicrosPerSecond, 3) + ",decided," +
             std::to_string(d.to) + "," + std::to_string(d.from) + "," + (d.panic ? "1" : "0") + "," + quoted(d.reason) + "\n";
    }
    for (const auto& [at, count] : s.placed) {
      out += quoted(s.name) + "," + Fmt(static_cast<double>(at) / kMicrosPerSecond, 3) + ",placed," + std::to_string(count) + ",,,\n";
    }
  }
  return out;
}

std::string OpenbStepsCsv(const OpenbResult& r) {
  std::string out = "seq,pod,node,used_gpu_milli,arrived_gpu_milli,frag_milli\n";
  for (size_t i = 0; i < r.steps.size(); ++i) {
    const OpenbStep& s = r.steps[i];
    out += std::to_string(i) + "," + std::to_string(r.arrivals[i]) + "," + (s.node < 0 ? "FAILED" : std::to_string(s.node)) +
           "," + std::to_string(s.used_milli) + "," + std::to_string(s.arrived_milli) + "," + Fmt(s.frag_milli, 2) + "\n";
  }
  return out;
}

std::string SvgLineChart(const std::string& title, const std::string& x_label, const std::string& y_label,
                         const std::vector<Series>& series, bool log_x) {
  const double w = 560, h = 340, left = 64, right = 16, top = 32, bottom = 48;
  double x0 = INFINITY, x1 = -INFINITY, y0 = 0, y1 = -INFINITY;
  auto fx = [&](double x) { return log_x ? std::log10(std::max(x, 1e-9)) : x; };
  for (const Series& s : series) {
    for (auto [x, y] : s.points) {
      x0 = std::min(x0, fx(x));
      x1 = std::max(x1, fx(x));
      y0 = std::min(y0, y);
      y1 = std::max(y1, y);
    }
  }
  if (!(x1 > x0)) x1 = x0 + 1;
  if (!(y1 > y0)) y1 = y0 + 1;
  auto px = [&](double x) { return left + (fx(x) - x0) / (x1 - x0) * (w - left - right); };
  auto py = [&](double y) { return h - bottom - (y - y0) / (y1 - y0) * (h - top - bottom); };
  std::string svg = "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"" + Fmt(w, 0) + "\" height=\"" + Fmt(h, 0) +
                    "\" role=\"img\"><title>" + Escape(title) + "</title>";
  svg += "<text x=\"" + Fmt(w / 2, 0) + "\" y=\"20\" text-anchor=\"middle\" font-weight=\"bold\">" + Escape(title) + "</text>";
  svg += "<rect x=\"" + Fmt(left, 0) + "\" y=\"" + Fmt(top, 0) + "\" width=\"" + Fmt(w - left - right, 0) +
         "\" height=\"" + Fmt(h - top - bottom, 0) + "\" fill=\"none\" stroke=\"#999\"/>";
  for (int i = 0; i <= 4; ++i) {
    const double yv = y0 + (y1 - y0) * i / 4, xv = x0 + (x1 - x0) * i / 4;
    svg += "<text x=\"" + Fmt(left - 6, 0) + "\" y=\"" + Fmt(py(yv) + 4, 0) + "\" text-anchor=\"end\" font-size=\"11\">" +
           Fmt(yv, yv >= 100 ? 0 : 1) + "</text>";
    const double label = log_x ? std::pow(10.0, xv) : xv;
    svg += "<text x=\"" + Fmt(left + (w - left - right) * i / 4, 0) + "\" y=\"" + Fmt(h - bottom + 16, 0) +
           "\" text-anchor=\"middle\" font-size=\"11\">" + Fmt(label, label >= 100 ? 0 : 1) + "</text>";
  }
  svg += "<text x=\"" + Fmt(w / 2, 0) + "\" y=\"" + Fmt(h - 10, 0) + "\" text-anchor=\"middle\" font-size=\"12\">" +
         Escape(x_label) + "</text>";
  svg += "<text transform=\"translate(14," + Fmt(h / 2, 0) + ") rotate(-90)\" text-anchor=\"middle\" font-size=\"12\">" +
         Escape(y_label) + "</text>";
  for (size_t i = 0; i < series.size(); ++i) {
    const char* color = kColors[i % (sizeof(kColors) / sizeof(kColors[0]))];
    std::string path;
    for (auto [x, y] : Thin(series[i].points)) path += (path.empty() ? "M" : "L") + Fmt(px(x), 1) + "," + Fmt(py(y), 1);
    svg += "<path d=\"" + path + "\" fill=\"none\" stroke=\"" + color + "\" stroke-width=\"1.5\"/>";
    svg += "<text x=\"" + Fmt(left + 8, 0) + "\" y=\"" + Fmt(top + 16 + 14 * static_cast<double>(i), 0) + "\" fill=\"" +
           color + "\" font-size=\"12\">" + Escape(series[i].name) + "</text>";
  }
  return svg + "</svg>";
}

std::string TimeHtml(const std::string& title, const std::vector<std::string>& notes, const std::vector<TimeRun>& runs) {
  std::string body = "<table><tr><th>run</th><th>jobs</th><th>avg JCT (s)</th><th>p50</th><th>p99</th>"
                     "<th>avg queue (s)</th><th>makespan (s)</th><th>GPU alloc %</th><th>Jain</th>"
                     "<th>preemptions</th><th>lost GPU-h</th></tr>\n";
  for (const TimeRun& r : runs) {
    const Summary& s = r.summary;
    body += "<tr><td>" + Escape(r.name) + "</td><td>" + std::to_string(s.jobs) + "</td><td>" + Fmt(s.avg_jct_s, 0) +
            "</td><td>" + Fmt(s.p50_jct_s, 0) + "</td><td>" + Fmt(s.p99_jct_s, 0) + "</td><td>" + Fmt(s.avg_queue_s, 0) +
            "</td><td>" + Fmt(s.makespan_s, 0) + "</td><td>" + Fmt(s.gpu_alloc_pct_mean, 1) + "</td><td>" +
            Fmt(s.jain, 3) + "</td><td>" + std::to_string(s.preemptions) + "</td><td>" + Fmt(s.lost_gpu_hours, 1) +
            "</td></tr>\n";
  }
  body += "</table>\n<div class=\"charts\">";
  std::vector<Series> alloc, queue, cdf;
  for (const TimeRun& r : runs) {
    Series a{r.name, {}}, q{r.name, {}}, c{r.name, {}};
    for (const Sample& s : *r.samples) {
      const double hours = static_cast<double>(s.t) / kMicrosPerSecond / 3600.0;
      a.points.emplace_back(hours, r.total_gpus > 0 ? 100.0 * static_cast<double>(s.allocated_gpus) /
                                                          static_cast<double>(r.total_gpus)
                                                    : 0);
      q.points.emplace_back(hours, s.pending);
    }
    std::vector<double> jct;
    for (const JobResult& j : *r.jobs) {
      if (j.end >= 0) jct.push_back(std::max(1.0, static_cast<double>(j.jct()) / kMicrosPerSecond));
    }
    std::sort(jct.begin(), jct.end());
    for (size_t i = 0; i < jct.size(); ++i) {
      c.points.emplace_back(jct[i], 100.0 * static_cast<double>(i + 1) / static_cast<double>(jct.size()));
    }
    alloc.push_back(std::move(a));
    queue.push_back(std::move(q));
    cdf.push_back(std::move(c));
  }
  body += SvgLineChart("GPU allocation over time", "hours", "% of GPUs allocated", alloc);
  body += SvgLineChart("Queue length over time", "hours", "pending jobs", queue);
  body += SvgLineChart("JCT CDF", "JCT (s, log scale)", "% of jobs", cdf, /*log_x=*/true);
  body += "</div>\n";
  return Page(title, notes, body);
}

std::string OpenbHtml(const std::string& title, const std::vector<std::string>& notes, const std::vector<OpenbRun>& runs) {
  std::string body = "<table><tr><th>placement</th><th>pods</th><th>failed</th><th>alloc % at 100%</th>"
                     "<th>alloc % at 130%</th><th>frag % at 130%</th><th>wall (s)</th></tr>\n";
  for (const OpenbRun& r : runs) {
    const OpenbResult& o = *r.result;
    body += "<tr><td>" + Escape(r.name) + "</td><td>" + std::to_string(o.steps.size()) + "</td><td>" +
            std::to_string(o.failed) + "</td><td>" + Fmt(o.alloc_pct_by_arrived[100]) + "</td><td>" +
            Fmt(o.alloc_pct_by_arrived[130]) + "</td><td>" + Fmt(o.frag_pct_by_arrived[130]) + "</td><td>" +
            Fmt(o.wall_s, 3) + "</td></tr>\n";
  }
  body += "</table>\n<div class=\"charts\">";
  std::vector<Series> alloc, frag, tail;
  for (const OpenbRun& r : runs) {
    Series a{r.name, {}}, f{r.name, {}}, t{r.name, {}};
    for (int k = 0; k <= 130; ++k) {
      a.points.emplace_back(k, r.result->alloc_pct_by_arrived[k]);
      f.points.emplace_back(k, r.result->frag_pct_by_arrived[k]);
      if (k >= 80) t.points.emplace_back(k, r.result->alloc_pct_by_arrived[k]);
    }
    alloc.push_back(std::move(a));
    frag.push_back(std::move(f));
    tail.push_back(std::move(t));
  }
  body += SvgLineChart("GPU allocation vs arrived load", "arrived GPU demand (% of capacity)", "% of GPU allocated", alloc);
  body += SvgLineChart("Allocation near saturation", "arrived GPU demand (% of capacity)", "% of GPU allocated", tail);
  body += SvgLineChart("Fragmentation vs arrived load", "arrived GPU demand (% of capacity)", "fragmented GPU (% of capacity)", frag);
  body += "</div>\n";
  return Page(title, notes, body);
}

}  // namespace rota::sim
