#include "api/usage_codec.h"

#include <charconv>

namespace rota::api {

// One line of tab-separated fields in a fixed order after a version tag
// ("u1"); text fields escape backslash, tab and newline; the activity
// histogram is its 21 counts joined by commas. (A week's report reads 100k
// of these: parsing JSON cost 9 us each, this under 1.)

namespace {

void Text(std::string* out, const std::string& v) {
  out->push_back('\t');
  for (char ch : v) {
    if (ch == '\\') out->append("\\\\");
    else if (ch == '\t') out->append("\\t");
    else if (ch == '\n') out->append("\\n");
    else out->push_back(ch);
  }
}

void Int(std::string* out, int64_t v) {
  out->push_back('\t');
  char buf[24];
  auto [p, ec] = std::to_chars(buf, buf + sizeof buf, v);
  out->append(buf, p);
}

constexpr const char* kFields[] = {"job", "attempt", "name", "user", "queue", "array", "end", "reason", "start", "stop",
                                   "model", "gpu_mem", "gpus", "milli", "mig", "cpu", "mem", "replicas", "restarts",
                                   "preemptions", "lost_s", "act", "gpu_peak", "energy_mj", "cpu_us", "throttled_us",
                                   "mem_peak"};
constexpr size_t kFieldCount = sizeof(kFields) / sizeof(kFields[0]);
// Fields added since, absent from the records written before them (each
// keeps its default there): the cost.

class Reader {
 public:
  explicit Reader(std::string_view text) : text_(text) {}
  // The next field's raw text; false at the end.
  bool Next(std::string_view* field) {
    if (pos_ > text_.size()) return false;
    const size_t tab = text_.find('\t', pos_);
    const size_t end = tab == std::string_view::npos ? text_.size() : tab;
    *field = text_.substr(pos_, end - pos_);
    pos_ = end + 1;
    return true;
  }

 private:
  std::string_view text_;
  size_t pos_ = 0;
};

template <typename T>
bool ParseInt(std::string_view s, T* out) {
  int64_t v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size()) return false;
  *out = static_cast<T>(v);
  return true;
}

bool ParseText(std::string_view s, std::string* out) {
  out->clear();
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '\\') {
      out->push_back(s[i]);
      continue;
    }
    if (++i == s.size()) return false;
    if (s[i] == '\\') out->push_back('\\');
    else if (s[i] == 't') out->push_back('\t');
    else if (s[i] == 'n') out->push_back('\n');
    else return false;
  }
  return true;
}

bool ParseHistogram(std::string_view s, ActivityHistogram* h) {
  size_t pos = 0;
  for (int b = 0; b < ActivityHistogram::kBuckets; ++b) {
    const size_t comma = s.find(',', pos);
    const size_t end = comma == std::string_view::npos ? s.size() : comma;
    if (!ParseInt(s.substr(pos, end - pos), &h->counts[b])) return false;
    if ((b + 1 < ActivityHistogram::kBuckets) != (comma != std::string_view::npos)) return false;
    pos = end + 1;
  }
  return true;
}

}  // namespace

std::string EncodeUsage(const UsageRecord& r) {
  std::string out = "u1";
  out.reserve(256);
  Int(&out, static_cast<int64_t>(r.job.value()));
  Int(&out, r.attempt);
  Text(&out, r.name);
  Text(&out, r.user);
  Text(&out, r.queue);
  Int(&out, static_cast<int64_t>(r.array.value()));
  Text(&out, r.end);
  Text(&out, r.reason);
  Int(&out, r.started_at);
  Int(&out, r.ended_at);
  Text(&out, r.gpu_model);
  Int(&out, r.gpu_memory);
  Int(&out, r.gpus);
  Int(&out, r.gpu_milli);
  Text(&out, r.mig_profile);
  Int(&out, r.cpu);
  Int(&out, r.memory);
  Int(&out, r.replicas);
  Int(&out, r.restarts);
  Int(&out, r.preemptions);
  Int(&out, r.lost_work_s);
  out.push_back('\t');
  for (int b = 0; b < ActivityHistogram::kBuckets; ++b) {
    if (b > 0) out.push_back(',');
    char buf[24];
    auto [p, ec] = std::to_chars(buf, buf + sizeof buf, r.activity.counts[b]);
    out.append(buf, p);
  }
  Int(&out, r.gpu_memory_peak);
  Int(&out, r.energy_mj);
  Int(&out, r.cpu_used_us);
  Int(&out, r.cpu_throttled_us);
  Int(&out, r.memory_peak);
  Int(&out, r.cost_micros);  // (a binary from before costs refuses records with it: no downgrade)
  return out;
}

StatusOr<UsageRecord> DecodeUsage(std::string_view text) {
  Reader in(text);
  std::string_view f;
  if (!in.Next(&f) || f != "u1") return DataLossError("usage record: not a usage record (no u1 tag)");
  UsageRecord r;
  uint64_t job = 0, array = 0;
  for (size_t i = 0; i < kFieldCount; ++i) {
    if (!in.Next(&f)) return DataLossError(std::string("usage record: ") + kFields[i] + ": missing");
    bool ok = true;
    switch (i) {
      case 0: ok = ParseInt(f, &job); break;
      case 1: ok = ParseInt(f, &r.attempt); break;
      case 2: ok = ParseText(f, &r.name); break;
      case 3: ok = ParseText(f, &r.user); break;
      case 4: ok = ParseText(f, &r.queue); break;
      case 5: ok = ParseInt(f, &array); break;
      case 6: ok = ParseText(f, &r.end); break;
      case 7: ok = ParseText(f, &r.reason); break;
      case 8: ok = ParseInt(f, &r.started_at); break;
      case 9: ok = ParseInt(f, &r.ended_at); break;
      case 10: ok = ParseText(f, &r.gpu_model); break;
      case 11: ok = ParseInt(f, &r.gpu_memory); break;
      case 12: ok = ParseInt(f, &r.gpus); break;
      case 13: ok = ParseInt(f, &r.gpu_milli); break;
      case 14: ok = ParseText(f, &r.mig_profile); break;
      case 15: ok = ParseInt(f, &r.cpu); break;
      case 16: ok = ParseInt(f, &r.memory); break;
      case 17: ok = ParseInt(f, &r.replicas); break;
      case 18: ok = ParseInt(f, &r.restarts); break;
      case 19: ok = ParseInt(f, &r.preemptions); break;
      case 20: ok = ParseInt(f, &r.lost_work_s); break;
      case 21: ok = ParseHistogram(f, &r.activity); break;
      case 22: ok = ParseInt(f, &r.gpu_memory_peak); break;
      case 23: ok = ParseInt(f, &r.energy_mj); break;
      case 24: ok = ParseInt(f, &r.cpu_used_us); break;
      case 25: ok = ParseInt(f, &r.cpu_throttled_us); break;
      case 26: ok = ParseInt(f, &r.memory_peak); break;
    }
    if (!ok) return DataLossError(std::string("usage record: ") + kFields[i] + ": malformed");
  }
  if (in.Next(&f) && !ParseInt(f, &r.cost_micros)) return DataLossError("usage record: cost: malformed");
  if (in.Next(&f)) return DataLossError("usage record: more fields than a u1 record has");
  r.job = JobId(job);
  r.array = JobId(array);
  return r;
}

}  // namespace rota::api
