#include "api/yaml_codec.h"

#include "core/mig.h"
#include "core/topology.h"

#include <yaml-cpp/yaml.h>

#include <cctype>
#include <charconv>
#include <fstream>
#include <initializer_list>
#include <map>
#include <sstream>

namespace rota::api {
namespace {

// Thrown inside this file only, turned into a Status at the entry points.
struct ParseError {
  Status status;
  int line = -1;  // where, for ordering several (0-based; -1: the whole text)
  int column = -1;
};

// Every error found in one text, so that a user fixes a file once rather
// than once an error (as kubectl's field.ErrorList): each field's error is
// recorded and parsing goes on with the next field. Reported in the order of
// their lines, the first as a lone error would read.
class Errors {
 public:
  static constexpr size_t kMaxShown = 20;

  // Past kMaxKept (a hostile body of 100,000 bad fields) errors are only
  // counted.
  static constexpr size_t kMaxKept = 1000;
  void Add(const ParseError& e) {
    if (list_.size() < kMaxKept) list_.push_back(e);
    ++count_;
  }
  bool empty() const { return count_ == 0; }
  size_t size() const { return count_; }
  // REQUIRES: !empty().
  ParseError Combined() const {
    std::vector<ParseError> sorted = list_;
    std::stable_sort(sorted.begin(), sorted.end(), [](const ParseError& a, const ParseError& b) {
      return std::pair(a.line, a.column) < std::pair(b.line, b.column);
    });
    std::string message;
    for (size_t i = 0; i < sorted.size() && i < kMaxShown; ++i) {
      if (i > 0) message += "\n";
      message += sorted[i].status.message();
    }
    const size_t shown = std::min(sorted.size(), kMaxShown);
    if (count_ > shown) message += "\n(and " + std::to_string(count_ - shown) + " more errors)";
    return {Status(sorted.front().status.code(), message), sorted.front().line, sorted.front().column};
  }

 private:
  std::vector<ParseError> list_;
  size_t count_ = 0;
};

// A YAML node with the field path that reached it, for error messages.
class Field {
 public:
  // With `errors`, Try records a field's error there and goes on, and
  // unknown fields are each recorded; without, the first error is thrown.
  Field(YAML::Node node, std::string path, const std::string* source, std::map<std::string, YAML::Mark>* marks,
        Errors* errors = nullptr)
      // A field that is not there (yaml-cpp's "zombie" node, whose every
      // question throws) reads as a null one, and its errors say "required".
      // (Not assigned: a YAML::Node's = writes through to the document.)
      : node_(node.IsDefined() ? node : YAML::Node()),
        path_(std::move(path)),
        source_(source),
        marks_(marks),
        errors_(errors),
        missing_(!node.IsDefined()) {
    if (marks_ != nullptr && !missing_) marks_->emplace(path_, node_.Mark());
  }

  [[noreturn]] void Fail(const std::string& reason) const { FailAt(node_.Mark(), path_, reason); }
  [[noreturn]] void FailAt(const YAML::Mark& m, const std::string& path, const std::string& reason) const {
    throw ParseError{InvalidArgumentError(Where(m) + (path.empty() ? "" : path + ": ") + reason), m.line, m.column};
  }
  // Runs `parse` (one field's); its error is recorded when errors are
  // collected, else thrown.
  template <typename F>
  void Try(F&& parse) const {
    if (errors_ == nullptr) return parse();
    try {
      parse();
    } catch (const ParseError& e) {
      errors_->Add(e);
    } catch (const YAML::Exception& e) {  // (a question yaml-cpp refuses: this field's error, not the text's)
      errors_->Add({InvalidArgumentError(Where(e.mark) + (path_.empty() ? "" : path_ + ": ") + "malformed YAML: " + e.msg),
                    e.mark.line, e.mark.column});
    }
  }
  // How many errors were recorded so far (0 when they are not collected).
  size_t errors_seen() const { return errors_ == nullptr ? 0 : errors_->size(); }
  std::string Where(const YAML::Mark& m) const {
    if (m.line < 0) return *source_ + ": ";
    return *source_ + ":" + std::to_string(m.line + 1) + ":" + std::to_string(m.column + 1) + ": ";
  }

  const std::string& path() const { return path_; }
  bool IsNull() const { return missing_ || node_.IsNull(); }

  // A map whose keys must all be in `allowed`.
  void ExpectMap(std::initializer_list<std::string_view> allowed) const {
    if (!node_.IsMap()) Fail("must be a mapping (key: value)");
    std::vector<std::string_view> seen;  // (the known keys: a few)
    for (const auto& kv : node_) {
      const std::string key = kv.first.Scalar();
      bool known = false;
      for (std::string_view a : allowed) known = known || a == key;
      if (known) {
        // Given twice: the first would be read and the second ignored.
        if (std::find(seen.begin(), seen.end(), key) != seen.end()) {
          Try([&] { FailAt(kv.first.Mark(), Child(key), "given twice"); });
        }
        seen.push_back(*std::find(allowed.begin(), allowed.end(), key));
      } else {
        std::string names;
        for (std::string_view a : allowed) names += (names.empty() ? "" : ", ") + std::string(a);
        Try([&] { FailAt(kv.first.Mark(), Child(key), "unknown field (allowed: " + names + ")"); });
      }
    }
  }
  bool Has(const std::string& key) const { return node_.IsMap() && node_[key].IsDefined(); }
  Field operator[](const std::string& key) const { return Field(node_[key], Child(key), source_, marks_, errors_); }

  size_t ExpectSeq() const {
    if (!node_.IsSequence()) Fail(missing_ ? "required (a list)" : "must be a list");
    return node_.size();
  }
  Field At(size_t i) const {
    return Field(node_[i], path_ + "[" + std::to_string(i) + "]", source_, marks_, errors_);
  }

  std::string Str() const {
    if (!node_.IsScalar()) Fail(missing_ ? "required (a string)" : "must be a string");
    return node_.Scalar();
  }
  int64_t Int(int64_t lo, int64_t hi) const {
    const std::string s = Scalar();
    int64_t v = 0;
    auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec != std::errc() || p != s.data() + s.size()) Fail("must be a whole number, got '" + s + "'");
    if (v < lo || v > hi) Fail("must be between " + std::to_string(lo) + " and " + std::to_string(hi) + ", got " + s);
    return v;
  }
  bool Bool() const {
    const std::string s = Scalar();
    if (s == "true") return true;
    if (s == "false") return false;
    Fail("must be true or false, got '" + s + "'");
  }
  MilliCpu Cpu() const { return Check(ParseMilliCpu(Scalar())); }
  MemoryMiB Memory() const { return Check(ParseMemoryMiB(Scalar())); }
  Duration Time() const { return Check(ParseDuration(Scalar())); }
  TimePoint Instant() const { return Check(ParseTime(Scalar())); }
  std::vector<std::string> StrList() const {
    std::vector<std::string> out;
    for (size_t i = 0, n = ExpectSeq(); i < n; ++i) out.push_back(At(i).Str());
    return out;
  }
  std::map<std::string, std::string> StrMap() const {
    if (!node_.IsMap()) Fail("must be a mapping (key: value)");
    std::map<std::string, std::string> out;
    for (const auto& kv : node_) out[Key(kv, out)] = Value(kv).Str();
    return out;
  }
  std::map<std::string, int64_t> IntMap(int64_t lo, int64_t hi) const {
    if (!node_.IsMap()) Fail("must be a mapping (key: value)");
    std::map<std::string, int64_t> out;
    for (const auto& kv : node_) out[Key(kv, out)] = Value(kv).Int(lo, hi);
    return out;
  }
  // A price in millionths ("2.49" = 2,490,000): at most six decimals, 0 to 1,000,000.
  int64_t Micros() const {
    const std::string s = Scalar();
    const size_t dot = s.find('.');
    const std::string whole = s.substr(0, dot), frac = dot == std::string::npos ? "" : s.substr(dot + 1);
    auto digits = [](const std::string& d) { return std::all_of(d.begin(), d.end(), [](char ch) { return ch >= '0' && ch <= '9'; }); };
    if (whole.empty() || !digits(whole) || !digits(frac) || frac.size() > 6 || (dot != std::string::npos && frac.empty()) ||
        whole.size() > 7) {
      Fail("must be a price of at most 1000000 with at most six decimals (2.49), got '" + s + "'");
    }
    const int64_t v = std::stoll(whole) * 1'000'000 + (frac.empty() ? 0 : std::stoll(frac + std::string(6 - frac.size(), '0')));
    if (v > 1'000'000LL * 1'000'000) Fail("must be at most 1000000, got " + s);
    return v;
  }
  std::map<std::string, int64_t> MicrosMap() const {
    if (!node_.IsMap()) Fail("must be a mapping (key: value)");
    std::map<std::string, int64_t> out;
    for (const auto& kv : node_) out[Key(kv, out)] = Value(kv).Micros();
    return out;
  }
  bool IsScalar() const { return node_.IsScalar(); }
  bool IsMap() const { return node_.IsMap(); }

 private:
  std::string Child(const std::string& key) const { return path_.empty() ? key : path_ + "." + key; }
  // A map's entry as its iterator gives it: its key (once: a key given twice
  // is an error, not the last one winning) and its value. (Looking the key up
  // again, operator[], is a walk of the map: a map of N keys read that way
  // cost N^2.)
  template <typename Kv, typename Out>
  std::string Key(const Kv& kv, const Out& seen) const {
    if (!kv.first.IsScalar()) FailAt(kv.first.Mark(), path_, "a key must be a single value");
    std::string key = kv.first.Scalar();
    if (seen.count(key) != 0) FailAt(kv.first.Mark(), Child(key), "given twice");
    return key;
  }
  template <typename Kv>
  Field Value(const Kv& kv) const {
    return Field(kv.second, Child(kv.first.Scalar()), source_, marks_, errors_);
  }
  std::string Scalar() const {
    if (!node_.IsScalar()) Fail(missing_ ? "required" : "must be a single value");
    return node_.Scalar();
  }
  template <typename T>
  T Check(StatusOr<T> v) const {
    if (!v.ok()) Fail(std::string(v.status().message()));
    return *v;
  }

  YAML::Node node_;
  std::string path_;
  const std::string* source_;
  std::map<std::string, YAML::Mark>* marks_;
  Errors* errors_;
  bool missing_ = false;
};

// A text names a node again by an alias (*name), and each reference reads
// as the whole node: a short text of aliases of aliases stands for a
// document of gigabytes (the "billion laughs"), which every reader of it
// would walk, and a job would store. What a text stands for is held to four
// times its size, or 1 MiB (a request body's limit) for a short one: the
// nodes it reads as (3 bytes each, as a node takes at least 2 characters of
// text: a text without aliases reads as at most 3.5 times its size, `{a, b}`)
// and their values. Walked with a stack of its own: an alias inside its own
// anchor (&a [*a]) reads as a node that holds itself, refused here like any
// other over the bound.
void CheckExpansion(const YAML::Node& root, size_t text_size, const std::string& source) {
  constexpr size_t kNode = 3;
  const size_t bound = std::max<size_t>(4 * text_size, size_t{1} << 20);
  size_t size = kNode;
  std::vector<YAML::Node> stack{root};
  auto push = [&](const YAML::Node& n) {
    size += kNode + (n.IsScalar() ? n.Scalar().size() : 0);
    if (size > bound) {
      throw ParseError{InvalidArgumentError(source + ": its aliases (*name) make it read as more than " +
                                            std::to_string(bound >> 10) + " KiB (at most 4 times the text, or 1 MiB)"),
                       -1, -1};
    }
    if (n.IsSequence() || n.IsMap()) stack.push_back(n);
  };
  while (!stack.empty()) {
    const YAML::Node n = stack.back();
    stack.pop_back();
    for (const auto& item : n) {
      if (n.IsMap()) {
        push(item.first);
        push(item.second);
      } else {
        push(item);
      }
    }
  }
}

YAML::Node Load(std::string_view text, const std::string& source) {
  YAML::Node root;
  try {
    root = YAML::Load(std::string(text));
  } catch (const YAML::Exception& e) {
    std::string where = source;
    if (e.mark.line >= 0) where += ":" + std::to_string(e.mark.line + 1) + ":" + std::to_string(e.mark.column + 1);
    throw ParseError{InvalidArgumentError(where + ": not valid YAML: " + e.msg), e.mark.line, e.mark.column};
  }
  CheckExpansion(root, text.size(), source);
  return root;
}

// Each field in its own Try: with errors collected, one field's error does
// not hide the next's.
TaskGroupSpec ParseTask(const Field& f) {
  f.ExpectMap({"name", "replicas", "gpus", "gpu", "gpu_model", "gpu_memory", "cpu", "memory", "command", "env", "rootfs"});
  TaskGroupSpec t;
  f.Try([&] { t.name = f.Has("name") ? f["name"].Str() : "main"; });
  f.Try([&] { if (f.Has("replicas")) t.replicas = static_cast<int32_t>(f["replicas"].Int(1, kMaxReplicas)); });
  f.Try([&] { if (f.Has("gpus")) t.gpus = static_cast<int32_t>(f["gpus"].Int(0, kMaxGpusPerReplica)); });
  if (f.Has("gpu")) {
    f.Try([&] {
      Field g = f["gpu"];
      g.ExpectMap({"mig", "fraction", "memory"});
      const size_t seen = g.errors_seen();
      g.Try([&] { if (g.Has("mig")) t.gpu_share.mig_profile = g["mig"].Str(); });
      g.Try([&] {
        if (!g.Has("fraction")) return;
        // Exact milli-GPU: "0.25" -> 250.
        Field fr = g["fraction"];
        StatusOr<MilliCpu> milli = ParseMilliCpu(fr.Str());
        if (!milli.ok() || *milli <= 0 || *milli >= 1000) fr.Fail("must be a number in (0, 1) with at most 3 decimals");
        t.gpu_share.fraction_milli = static_cast<int32_t>(*milli);
      });
      g.Try([&] { if (g.Has("memory")) t.gpu_share.memory = g["memory"].Memory(); });
      if (!t.gpu_share.shared() && g.errors_seen() == seen) g.Fail("needs mig or fraction");
    });
  }
  f.Try([&] { if (f.Has("gpu_model")) t.gpu_model = f["gpu_model"].Str(); });
  f.Try([&] { if (f.Has("gpu_memory")) t.gpu_memory = f["gpu_memory"].Memory(); });
  f.Try([&] { if (f.Has("cpu")) t.cpu = f["cpu"].Cpu(); });
  f.Try([&] { if (f.Has("memory")) t.memory = f["memory"].Memory(); });
  f.Try([&] { if (f.Has("command")) t.command = f["command"].StrList(); });
  f.Try([&] { if (f.Has("env")) t.env = f["env"].StrMap(); });
  f.Try([&] { if (f.Has("rootfs")) t.rootfs = f["rootfs"].Str(); });
  return t;
}

const std::initializer_list<std::string_view> kJobFields = {
    "name",        "kind",       "service", "queue",      "priority", "tasks",  "topology", "node_selector",
    "elastic",     "preemptible", "checkpoint", "restart", "time_limit", "mounts"};

std::string FormatNumber(double v) {
  std::ostringstream out;
  out << v;
  return out.str();
}

double Fraction(const Field& f, double lo, double hi) {
  const std::string s = f.Str();
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  if (s.empty() || end != s.c_str() + s.size()) f.Fail("must be a number, got '" + s + "'");
  if (!(v >= lo && v <= hi)) f.Fail("must be between " + FormatNumber(lo) + " and " + FormatNumber(hi) + ", got " + s);
  return v;
}

// kind: service's block. The task group's replicas become max, and min the
// elastic floor (JobSpec::elastic).
void ParseService(const Field& f, JobSpec* spec) {
  f.ExpectMap({"replicas", "port", "readiness", "autoscale", "metrics_path"});
  if (f.Has("metrics_path")) spec->service.metrics_path = f["metrics_path"].Str();
  ServiceSpec& sv = spec->service;
  if (!f.Has("port")) f.Fail("port: required (replica r listens on port + r, told in $PORT)");
  sv.port = static_cast<int32_t>(f["port"].Int(1, 65535));
  if (f.Has("replicas")) {
    Field r = f["replicas"];
    if (r.IsScalar()) {
      sv.min_replicas = sv.max_replicas = static_cast<int32_t>(r.Int(1, kMaxReplicas));
    } else {
      r.ExpectMap({"min", "max"});
      if (r.Has("min")) sv.min_replicas = static_cast<int32_t>(r["min"].Int(0, kMaxReplicas));
      sv.max_replicas = r.Has("max") ? static_cast<int32_t>(r["max"].Int(1, kMaxReplicas)) : std::max(1, sv.min_replicas);
      if (sv.min_replicas > sv.max_replicas) {
        r["min"].Fail("must not exceed max (" + std::to_string(sv.max_replicas) + ")");
      }
    }
  }
  if (f.Has("readiness")) {
    Field r = f["readiness"];
    r.ExpectMap({"path", "period", "timeout", "startup", "failure_threshold"});
    if (r.Has("path")) sv.readiness.path = r["path"].Str();
    if (r.Has("period")) sv.readiness.period = r["period"].Time();
    if (r.Has("timeout")) sv.readiness.timeout = r["timeout"].Time();
    if (r.Has("startup")) sv.readiness.startup = r["startup"].Time();
    if (r.Has("failure_threshold")) sv.readiness.failure_threshold = static_cast<int32_t>(r["failure_threshold"].Int(1, 1000));
  }
  if (f.Has("autoscale")) {
    Field a = f["autoscale"];
    a.ExpectMap({"target_inflight", "target_gpu_memory", "metrics", "stable_window", "panic_window",
                 "panic_threshold", "tolerance", "scale_down_delay", "spare"});
    AutoscaleSpec& as = sv.autoscale;
    if (a.Has("target_inflight")) as.target_inflight = Fraction(a["target_inflight"], 0.01, 1e6);
    if (a.Has("target_gpu_memory")) as.target_gpu_memory = Fraction(a["target_gpu_memory"], 0.01, 1);
    if (a.Has("metrics")) {
      Field m = a["metrics"];
      for (size_t i = 0, n = m.ExpectSeq(); i < n; ++i) {
        Field e = m.At(i);
        e.ExpectMap({"name", "target"});
        if (!e.Has("name") || !e.Has("target")) e.Fail("needs name and target (per replica)");
        as.metrics.push_back({e["name"].Str(), Fraction(e["target"], 1e-6, 1e12)});
      }
    }
    if (a.Has("stable_window")) as.stable_window = a["stable_window"].Time();
    if (a.Has("panic_window")) as.panic_window = a["panic_window"].Time();
    if (a.Has("panic_threshold")) as.panic_threshold = Fraction(a["panic_threshold"], 1, 100);
    if (a.Has("tolerance")) as.tolerance = Fraction(a["tolerance"], 0, 0.99);
    if (a.Has("scale_down_delay")) as.scale_down_delay = a["scale_down_delay"].Time();
    if (a.Has("spare")) as.spare = static_cast<int32_t>(a["spare"].Int(0, 10'000));
  }
}

void ParseJobFields(const Field& f, JobSpec* spec) {
  f.Try([&] { if (f.Has("name")) spec->name = f["name"].Str(); });
  const size_t before_kind = f.errors_seen();
  f.Try([&] {
    if (!f.Has("kind")) return;
    const std::string kind = f["kind"].Str();
    if (kind == "service") {
      spec->kind = JobKind::kService;
      spec->priority_class = "inference";  // unless priority says otherwise
      spec->priority = 2000;
    } else if (kind != "batch") {
      f["kind"].Fail("must be batch or service, got '" + kind + "'");
    }
  });
  f.Try([&] {
    if (f.errors_seen() != before_kind) return;  // what kind it is is not known
    if (spec->is_service() && !f.Has("service")) f.Fail("service: required with kind: service (port, replicas)");
    if (!spec->is_service() && f.Has("service")) f["service"].Fail("only with kind: service");
  });
  f.Try([&] { if (f.Has("queue")) spec->queue = f["queue"].Str(); });
  f.Try([&] {
    if (!f.Has("priority")) return;
    Field p = f["priority"];
    const std::string s = p.Str();
    if (!s.empty() && (std::isdigit(static_cast<unsigned char>(s[0])) || s[0] == '-')) {
      p.Int(0, 1'000'000'000);  // a number: checked here, where the error can name its line
    }
    if (Status set = SetPriority(s, spec); !set.ok()) p.Fail(std::string(set.message()));
  });
  Field tasks = f["tasks"];
  f.Try([&] {
    if (tasks.IsNull()) f.Fail("tasks: required (a list of task groups)");
    const size_t n = tasks.ExpectSeq();
    // (Before reading them: too many are refused whatever they hold.)
    if (n > static_cast<size_t>(kMaxTaskGroups)) tasks.Fail("at most " + std::to_string(kMaxTaskGroups) + " task groups");
    for (size_t i = 0; i < n; ++i) {
      TaskGroupSpec t;  // (a default where it did not parse: spec->tasks[i] stays tasks[i])
      f.Try([&] { t = ParseTask(tasks.At(i)); });
      spec->tasks.push_back(std::move(t));
    }
  });
  if (spec->is_service() && f.Has("service")) {
    f.Try([&] {
      ParseService(f["service"], spec);
      for (size_t i = 0; i < spec->tasks.size(); ++i) {
        if (tasks.At(i).Has("replicas")) tasks.At(i)["replicas"].Fail("a service's replicas are service.replicas (min/max)");
      }
      if (spec->tasks.size() == 1) spec->tasks[0].replicas = spec->service.max_replicas;
      spec->elastic_min_replicas = spec->service.min_replicas;
      if (f.Has("elastic")) f["elastic"].Fail("a service scales by service.replicas, not elastic");
    });
  }
  f.Try([&] {
    if (!f.Has("topology")) return;
    Field t = f["topology"];
    t.ExpectMap({"level", "mode"});
    spec->topology.level = t["level"].IsNull() ? "" : t["level"].Str();
    if (spec->topology.level.empty()) t.Fail("level: required");
    if (t.Has("mode")) {
      const std::string mode = t["mode"].Str();
      if (mode == "required") spec->topology.mode = TopologyMode::kRequired;
      else if (mode == "preferred") spec->topology.mode = TopologyMode::kPreferred;
      else t["mode"].Fail("must be required or preferred, got '" + mode + "'");
    }
  });
  f.Try([&] { if (f.Has("node_selector")) spec->node_selector = f["node_selector"].StrMap(); });
  f.Try([&] {
    if (!f.Has("elastic") || spec->is_service()) return;
    Field e = f["elastic"];
    e.ExpectMap({"min_replicas"});
    spec->elastic_min_replicas = static_cast<int32_t>(e["min_replicas"].Int(1, kMaxReplicas));
  });
  f.Try([&] { if (f.Has("preemptible")) spec->preemptible = f["preemptible"].Bool(); });
  f.Try([&] {
    if (!f.Has("checkpoint")) return;
    Field c = f["checkpoint"];
    c.ExpectMap({"signal", "grace"});
    c.Try([&] {
      if (!c.Has("signal")) return;
      spec->checkpoint.signal = c["signal"].Str();
      static const char* kSignals[] = {"SIGUSR1", "SIGUSR2", "SIGTERM", "SIGINT", "SIGHUP", "SIGQUIT"};
      bool ok = false;
      for (const char* s : kSignals) ok = ok || spec->checkpoint.signal == s;
      if (!ok) c["signal"].Fail("must be one of SIGUSR1, SIGUSR2, SIGTERM, SIGINT, SIGHUP, SIGQUIT");
    });
    c.Try([&] { if (c.Has("grace")) spec->checkpoint.grace = c["grace"].Time(); });
  });
  f.Try([&] {
    if (!f.Has("restart")) return;
    Field r = f["restart"];
    r.ExpectMap({"policy", "max_restarts"});
    r.Try([&] {
      if (!r.Has("policy")) return;
      const std::string p = r["policy"].Str();
      if (p == "never") spec->restart.policy = RestartPolicy::kNever;
      else if (p == "on-failure") spec->restart.policy = RestartPolicy::kOnFailure;
      else if (p == "always") spec->restart.policy = RestartPolicy::kAlways;
      else r["policy"].Fail("must be never, on-failure or always, got '" + p + "'");
    });
    r.Try([&] {
      if (r.Has("max_restarts")) spec->restart.max_restarts = static_cast<int32_t>(r["max_restarts"].Int(0, 1000000));
    });
  });
  f.Try([&] { if (f.Has("time_limit")) spec->time_limit = f["time_limit"].Time(); });
  f.Try([&] {
    if (!f.Has("mounts")) return;
    Field m = f["mounts"];
    for (size_t i = 0, n = m.ExpectSeq(); i < n; ++i) {
      m.Try([&] {
        Field e = m.At(i);
        e.ExpectMap({"source", "target", "read_only"});
        MountSpec mount;
        mount.source = e["source"].Str();
        mount.target = e["target"].Str();
        if (e.Has("read_only")) mount.read_only = e["read_only"].Bool();
        spec->mounts.push_back(mount);
      });
    }
  });
}

// Runs ValidateNewJobSpec and points each of its errors at the line of the
// field it names (all of them recorded in `errors`).
void Validate(const JobSpec& spec, const std::string& prefix, const std::map<std::string, YAML::Mark>& marks,
              const Field& root, Errors* errors) {
  for (const Status& s : JobSpecErrors(spec, /*new_job=*/true)) {
    std::string msg(s.message());
    std::string field = msg.substr(0, msg.find(':'));
    std::string full = prefix.empty() ? field : prefix + "." + field;
    // The deepest recorded path that prefixes the failing field.
    std::string best;
    for (const auto& [path, mark] : marks) {
      if ((full == path || full.rfind(path + ".", 0) == 0 || full.rfind(path + "[", 0) == 0) &&
          path.size() > best.size()) {
        best = path;
      }
    }
    auto it = marks.find(best);
    const YAML::Mark mark = it != marks.end() ? it->second : YAML::Mark::null_mark();
    errors->Add({InvalidArgumentError(root.Where(mark) + (prefix.empty() ? "" : prefix + ".") + msg), mark.line,
                 mark.column});
  }
}

NodeGroupConfig ParseNodeGroup(const Field& f) {
  f.ExpectMap({"name", "count", "gpus", "gpu_model", "gpu_memory", "nvlink_islands", "cpu", "memory", "nodes_per_rack",
               "racks_per_spine", "labels", "mig", "mig_gpus", "spot", "gpu_hour_price"});
  NodeGroupConfig g;
  g.name = f["name"].IsNull() ? "" : f["name"].Str();
  if (g.name.empty()) f.Fail("name: required");
  g.count = static_cast<int32_t>(f["count"].Int(1, 1'000'000));
  if (f.Has("gpus")) g.gpus = static_cast<int32_t>(f["gpus"].Int(0, kMaxGpusPerNode));
  if (f.Has("gpu_model")) g.gpu_model = f["gpu_model"].Str();
  if (g.gpus > 0 && g.gpu_model.empty()) f.Fail("gpu_model: required when gpus > 0");
  if (f.Has("gpu_memory")) g.gpu_memory = f["gpu_memory"].Memory();
  if (f.Has("nvlink_islands")) g.nvlink_islands = static_cast<int32_t>(f["nvlink_islands"].Int(1, kMaxGpusPerNode));
  if (g.gpus > 0 && g.gpus % g.nvlink_islands != 0) {
    f["nvlink_islands"].Fail(std::to_string(g.gpus) + " GPUs do not split into " + std::to_string(g.nvlink_islands) +
                             " equal islands");
  }
  if (f.Has("cpu")) g.cpu = f["cpu"].Cpu();
  if (f.Has("memory")) g.memory = f["memory"].Memory();
  if (f.Has("gpu_hour_price")) g.gpu_hour_price = f["gpu_hour_price"].Micros();
  if (f.Has("nodes_per_rack")) g.nodes_per_rack = static_cast<int32_t>(f["nodes_per_rack"].Int(1, 1'000'000));
  if (f.Has("racks_per_spine")) g.racks_per_spine = static_cast<int32_t>(f["racks_per_spine"].Int(1, 1'000'000));
  if (f.Has("labels")) {
    g.labels = f["labels"].StrMap();
    for (const char* builtin : {"hostname", "gpu_model", "rack", "spine"}) {
      if (g.labels.count(builtin)) f["labels"][builtin].Fail("is a built-in label and cannot be set");
    }
  }
  if (f.Has("mig")) {
    g.has_mig = true;
    g.mig = f["mig"].StrList();
  }
  if (f.Has("mig_gpus")) g.mig_gpus = static_cast<int32_t>(f["mig_gpus"].Int(0, kMaxGpusPerNode));
  if (f.Has("spot")) g.spot = f["spot"].Bool();
  return g;
}

// `classes`: the config's priority classes (PriorityClasses), for max_priority.
QueueConfig ParseQueue(const Field& f, const std::vector<PriorityClassConfig>& classes) {
  f.ExpectMap({"name", "weight", "quota", "borrowing_limit", "lending_limit", "children", "users", "accepts",
               "allow_root", "max_pending", "max_priority"});
  QueueConfig q;
  q.name = f["name"].IsNull() ? "" : f["name"].Str();
  if (q.name.empty() || q.name.find('/') != std::string::npos) f.Fail("name: required, without '/'");
  if (f.Has("weight")) q.weight = static_cast<int32_t>(f["weight"].Int(1, 1'000'000));
  if (f.Has("quota")) q.quota = f["quota"].IntMap(0, 100'000'000);
  if (f.Has("borrowing_limit")) q.borrowing_limit = f["borrowing_limit"].IntMap(0, 100'000'000);
  if (f.Has("lending_limit")) q.lending_limit = f["lending_limit"].IntMap(0, 100'000'000);
  if (f.Has("users")) q.users = f["users"].StrList();
  if (f.Has("allow_root")) q.allow_root = f["allow_root"].Bool();
  if (f.Has("max_pending")) q.max_pending = f["max_pending"].Int(1, 100'000'000);
  if (f.Has("max_priority")) {
    // A class's name, or a number.
    Field m = f["max_priority"];
    q.max_priority = m.Str();
    if (!q.max_priority.empty() && std::isdigit(static_cast<unsigned char>(q.max_priority[0]))) {
      q.max_priority_value = m.Int(0, 1'000'000'000);
    } else if (const PriorityClassConfig* c = FindPriorityClass(classes, q.max_priority)) {
      q.max_priority_value = c->value;
      q.max_priority += ", " + std::to_string(c->value);
    } else {
      std::string names;
      for (const auto& k : classes) names += (names.empty() ? "" : ", ") + k.name;
      m.Fail("no priority class '" + q.max_priority + "' (a class's name or a number; classes: " + names + ")");
    }
  }
  if (f.Has("accepts")) {
    q.accepts = f["accepts"].Str();
    if (q.accepts != "any" && q.accepts != "whole" && q.accepts != "shares") {
      f["accepts"].Fail("must be any, whole or shares, got '" + q.accepts + "'");
    }
  }
  if (f.Has("children")) {
    Field c = f["children"];
    for (size_t i = 0, n = c.ExpectSeq(); i < n; ++i) {
      q.children.push_back(ParseQueue(c.At(i), classes));
      const std::string& tier = q.children[i].accepts;
      if (q.accepts != "any" && tier != "any" && tier != q.accepts) {
        c.At(i)["accepts"].Fail("'" + tier + "' contradicts its parent " + q.name + "'s accepts: " + q.accepts);
      }
      for (size_t j = 0; j < i; ++j) {
        if (q.children[j].name == q.children[i].name) c.At(i)["name"].Fail("duplicate queue '" + q.children[i].name + "'");
      }
    }
  }
  return q;
}

template <typename F>
auto Guard(F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (const ParseError& e) {
    return e.status;
  } catch (const YAML::Exception& e) {
    return InvalidArgumentError(std::string("malformed YAML: ") + e.what());
  }
}

}  // namespace

StatusOr<ClusterConfig> ParseClusterConfig(std::string_view text, std::string_view source_view) {
  const std::string source(source_view);
  return Guard([&]() -> StatusOr<ClusterConfig> {
    Field root(Load(text, source), "", &source, nullptr);
    root.ExpectMap(
        {"topology", "node_groups", "drained", "queues", "priority_classes", "profile", "fair_share", "backfill",
         "accounts", "allowed_mounts", "limits", "job_visibility", "accounting"});
    ClusterConfig c;
    if (root.Has("topology")) {
      c.topology = root["topology"].StrList();
      if (Status s = Topology::ValidateLevels(c.topology); !s.ok()) root["topology"].Fail(std::string(s.message()));
    }
    // Optional: without node groups, the nodes are the agents that register.
    Field groups = root["node_groups"];
    for (size_t i = 0, n = root.Has("node_groups") ? groups.ExpectSeq() : 0; i < n; ++i) {
      c.node_groups.push_back(ParseNodeGroup(groups.At(i)));
      for (size_t j = 0; j < i; ++j) {
        if (c.node_groups[j].name == c.node_groups[i].name) {
          groups.At(i)["name"].Fail("duplicate node group '" + c.node_groups[i].name + "'");
        }
      }
    }
    if (root.Has("drained")) c.drained = root["drained"].StrList();
    if (root.Has("priority_classes")) {
      Field pcs = root["priority_classes"];
      for (size_t i = 0, n = pcs.ExpectSeq(); i < n; ++i) {
        Field p = pcs.At(i);
        p.ExpectMap({"name", "value", "preemptible", "users"});
        PriorityClassConfig pc;
        pc.name = p["name"].Str();
        pc.value = static_cast<int32_t>(p["value"].Int(0, 1'000'000'000));
        if (p.Has("preemptible")) pc.preemptible = p["preemptible"].Bool();
        if (p.Has("users")) {
          pc.restricted = true;
          pc.users = p["users"].StrList();
        }
        // (One name, one class: a job would get one's value and be checked against another's users.)
        for (const PriorityClassConfig& other : c.priority_classes) {
          if (other.name == pc.name) p["name"].Fail("duplicate priority class '" + pc.name + "'");
        }
        c.priority_classes.push_back(pc);
      }
    }
    if (root.Has("queues")) {
      const std::vector<PriorityClassConfig> classes = PriorityClasses(c);
      Field q = root["queues"];
      for (size_t i = 0, n = q.ExpectSeq(); i < n; ++i) c.queues.push_back(ParseQueue(q.At(i), classes));
    }
    if (root.Has("limits")) {
      Field l = root["limits"];
      l.ExpectMap({"max_pending_per_user", "max_pending_per_queue", "max_pending_bytes_per_user", "max_array",
                   "submit_rate", "log_cap", "max_service_ports_per_user", "max_checkpoint_grace"});
      if (l.Has("max_pending_bytes_per_user")) {
        c.limits.max_pending_bytes_per_user = static_cast<int64_t>(l["max_pending_bytes_per_user"].Memory()) * 1024 * 1024;
        if (c.limits.max_pending_bytes_per_user < (1 << 20)) l["max_pending_bytes_per_user"].Fail("must be at least 1Mi");
      }
      if (l.Has("max_checkpoint_grace")) {
        c.limits.max_checkpoint_grace = l["max_checkpoint_grace"].Time();
        if (c.limits.max_checkpoint_grace < 0 || c.limits.max_checkpoint_grace > 7 * 24 * 3600 * kMicrosPerSecond) {
          l["max_checkpoint_grace"].Fail("must be between 0s and 7d");
        }
      }
      if (l.Has("max_service_ports_per_user")) {
        c.limits.max_service_ports_per_user = l["max_service_ports_per_user"].Int(1, 65'535);
      }
      if (l.Has("max_pending_per_user")) c.limits.max_pending_per_user = l["max_pending_per_user"].Int(1, 100'000'000);
      if (l.Has("max_pending_per_queue")) c.limits.max_pending_per_queue = l["max_pending_per_queue"].Int(1, 100'000'000);
      if (l.Has("max_array")) c.limits.max_array = l["max_array"].Int(1, 100'000);
      if (l.Has("submit_rate")) c.limits.submit_rate = l["submit_rate"].Int(1, 100'000'000);
      if (l.Has("log_cap")) {
        c.limits.log_cap_bytes = static_cast<int64_t>(l["log_cap"].Memory()) * 1024 * 1024;
        if (c.limits.log_cap_bytes < (1 << 20)) l["log_cap"].Fail("must be at least 1Mi");
      }
    }
    if (root.Has("accounts")) {
      Field accounts = root["accounts"];
      for (size_t i = 0, n = accounts.ExpectSeq(); i < n; ++i) {
        Field e = accounts.At(i);
        e.ExpectMap({"user", "uid", "gid"});
        AccountConfig a;
        a.user = e["user"].Str();
        if (a.user.empty()) e["user"].Fail("must not be empty");
        a.uid = e["uid"].Int(0, 4'294'967'294);
        if (e.Has("gid")) a.gid = e["gid"].Int(0, 4'294'967'294);
        for (const AccountConfig& earlier : c.accounts) {
          if (earlier.user == a.user) e["user"].Fail("duplicate account for user '" + a.user + "'");
        }
        c.accounts.push_back(a);
      }
    }
    if (root.Has("allowed_mounts")) {
      Field rules = root["allowed_mounts"];
      for (size_t i = 0, n = rules.ExpectSeq(); i < n; ++i) {
        Field e = rules.At(i);
        e.ExpectMap({"prefix", "read_write"});
        MountRule r;
        r.prefix = e["prefix"].Str();
        if (r.prefix.empty() || r.prefix[0] != '/' || r.prefix.find("..") != std::string::npos) {
          e["prefix"].Fail("must be an absolute path without '..', got '" + r.prefix + "'");
        }
        if (e.Has("read_write")) r.read_write = e["read_write"].Bool();
        c.allowed_mounts.push_back(r);
      }
    }
    if (root.Has("backfill")) {
      Field b = root["backfill"];
      b.ExpectMap({"reservation_depth", "window"});
      if (b.Has("reservation_depth")) c.reservation_depth = static_cast<int32_t>(b["reservation_depth"].Int(0, 1000));
      if (b.Has("window")) c.reservation_window = b["window"].Time();
    }
    if (root.Has("accounting")) {
      Field a = root["accounting"];
      a.ExpectMap({"currency", "gpu_hour_price"});
      if (a.Has("currency")) c.accounting.currency = a["currency"].Str();
      if (a.Has("gpu_hour_price")) c.accounting.gpu_hour_price = a["gpu_hour_price"].MicrosMap();
    }
    if (root.Has("job_visibility")) {
      c.job_visibility = root["job_visibility"].Str();
      if (c.job_visibility != "own" && c.job_visibility != "all") {
        root["job_visibility"].Fail("must be own or all, got '" + c.job_visibility + "'");
      }
    }
    if (root.Has("fair_share")) {
      Field fs = root["fair_share"];
      fs.ExpectMap({"half_life"});
      if (fs.Has("half_life")) c.fair_share_half_life = fs["half_life"].Time();
    }
    if (root.Has("profile")) {
      Field p = root["profile"];
      p.ExpectMap({"name", "plugins", "share_placement", "actions"});
      if (p.Has("name")) c.profile.name = p["name"].Str();
      if (p.Has("share_placement")) {
        c.profile.share_placement = p["share_placement"].Str();
        if (c.profile.share_placement != "fgd" && c.profile.share_placement != "bestfit") {
          p["share_placement"].Fail("must be fgd or bestfit, got '" + c.profile.share_placement + "'");
        }
      }
      Field actions = p["actions"];
      for (size_t i = 0, n = p.Has("actions") ? actions.ExpectSeq() : 0; i < n; ++i) {
        c.profile.actions.push_back(actions.At(i).Str());
      }
      Field plugins = p["plugins"];
      for (size_t i = 0, n = p.Has("plugins") ? plugins.ExpectSeq() : 0; i < n; ++i) {
        Field e = plugins.At(i);
        PluginConfig pc;
        if (e.IsScalar()) {
          pc.name = e.Str();
        } else {
          e.ExpectMap({"name", "weight"});
          pc.name = e["name"].Str();
          if (e.Has("weight")) pc.weight = static_cast<int32_t>(e["weight"].Int(0, 100));
        }
        c.profile.plugins.push_back(pc);
      }
    }
    // Expanding checks names, drained nodes and labels against each other.
    StatusOr<std::vector<NodeSpec>> nodes = ExpandNodes(c);
    if (!nodes.ok()) return nodes.status().WithPrefix(source);
    return c;
  });
}

StatusOr<JobSpec> ParseJobSpec(std::string_view text, std::string_view source_view) {
  const std::string source(source_view);
  return Guard([&]() -> StatusOr<JobSpec> {
    std::map<std::string, YAML::Mark> marks;
    Errors errors;
    Field root(Load(text, source), "", &source, &marks, &errors);
    if (!root.IsMap()) root.Fail("must be a mapping (key: value)");
    root.Try([&] { root.ExpectMap(kJobFields); });
    JobSpec spec;
    ParseJobFields(root, &spec);
    // The rules between fields only once every field reads (a field that
    // did not would break them for nothing).
    if (errors.empty()) Validate(spec, "", marks, root, &errors);
    if (!errors.empty()) throw errors.Combined();
    return spec;
  });
}

StatusOr<JobList> ParseJobList(std::string_view text, std::string_view source_view) {
  const std::string source(source_view);
  return Guard([&]() -> StatusOr<JobList> {
    std::map<std::string, YAML::Mark> marks;
    Errors errors;
    Field root(Load(text, source), "", &source, &marks, &errors);
    if (!root.IsMap()) root.Fail("must be a mapping (key: value)");
    root.Try([&] { root.ExpectMap({"now", "jobs"}); });
    JobList list;
    root.Try([&] {
      if (!root.Has("now")) return;
      list.has_now = true;
      list.now = root["now"].Instant();
    });
    Field jobs = root["jobs"];
    std::vector<JobListEntry>& out = list.jobs;
    size_t count = 0;
    root.Try([&] { count = jobs.ExpectSeq(); });
    for (size_t i = 0; i < count; ++i) {
      Field f = jobs.At(i);
      std::initializer_list<std::string_view> fields = {
          "name",        "queue",      "priority", "tasks",      "topology", "node_selector", "elastic",
          "preemptible", "checkpoint", "restart",  "time_limit", "mounts",   "state",         "placement",
          "started_at", "last_checkpoint"};
      const size_t seen = errors.size();
      if (!f.IsMap()) {
        root.Try([&] { f.Fail("must be a mapping (key: value)"); });
        continue;
      }
      root.Try([&] { f.ExpectMap(fields); });
      JobListEntry e;
      ParseJobFields(f, &e.spec);
      if (errors.size() == seen) Validate(e.spec, f.path(), marks, root, &errors);
      root.Try([&] {
        if (f.Has("state")) {
          const std::string state = f["state"].Str();
          if (state == "running") e.running = true;
          else if (state != "pending") f["state"].Fail("must be pending or running, got '" + state + "'");
        }
        if (f.Has("placement")) {
          if (!e.running) f["placement"].Fail("only a job with state: running has a placement");
          Field p = f["placement"];
          for (size_t k = 0, m = p.ExpectSeq(); k < m; ++k) {
            Field r = p.At(k);
            r.ExpectMap({"node", "gpus", "mig_start"});
            ReplicaLocation loc;
            loc.node = r["node"].Str();
            if (r.Has("gpus")) {
              Field g = r["gpus"];
              for (size_t j = 0, q = g.ExpectSeq(); j < q; ++j) {
                loc.gpus.push_back(static_cast<int32_t>(g.At(j).Int(0, kMaxGpusPerNode - 1)));
              }
            }
            if (r.Has("mig_start")) loc.mig_start = static_cast<int32_t>(r["mig_start"].Int(0, kMigSlots - 1));
            e.placement.push_back(std::move(loc));
          }
        } else if (e.running) {
          f.Fail("placement: required for a running job (one entry per replica)");
        }
        if (f.Has("last_checkpoint")) {
          if (!e.running) f["last_checkpoint"].Fail("only a job with state: running has a checkpoint here");
          e.last_checkpoint = f["last_checkpoint"].Instant();
        }
        if (f.Has("started_at")) {
          if (!e.running) f["started_at"].Fail("only a job with state: running has started");
          e.started_at = f["started_at"].Instant();
        }
      });
      out.push_back(std::move(e));
    }
    if (!errors.empty()) throw errors.Combined();
    return list;
  });
}

StatusOr<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFoundError(path + ": cannot open file");
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) return UnavailableError(path + ": read failed");
  return ss.str();
}

}  // namespace rota::api
