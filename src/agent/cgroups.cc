#include "agent/cgroups.h"

#include "agent/device_filter.h"

#include <signal.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include <algorithm>

#include <cctype>
#include <cerrno>
#include <cstdlib>

#include <filesystem>
#include <fstream>
#include <sstream>

namespace rota::agent {
namespace {

bool WriteFile(const std::string& path, const std::string& value) {
  std::ofstream out(path);
  if (!out) return false;
  out << value;
  out.flush();
  return static_cast<bool>(out);
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// "oom_kill N" in memory.events (v2) or memory.oom_control (v1).
int64_t OomKills(const std::string& text) {
  std::istringstream in(text);
  std::string key;
  int64_t value;
  while (in >> key >> value) {
    if (key == "oom_kill") return value;
  }
  return 0;
}

bool Writable(const std::string& dir) { return access(dir.c_str(), W_OK) == 0; }

}  // namespace

StatusOr<std::unique_ptr<Cgroups>> Cgroups::Detect(const std::string& root, const std::string& prefix) {
  auto c = std::unique_ptr<Cgroups>(new Cgroups());
  c->prefix_ = prefix;
  const std::string controllers = ReadFile(root + "/cgroup.controllers");
  if (controllers.find("memory") != std::string::npos && controllers.find("cpu") != std::string::npos &&
      Writable(root)) {
    c->v2_ = true;
    c->root_ = root;
    c->pids_ = controllers.find("pids") != std::string::npos;
    // Controllers must be enabled for children along the path (pids on its
    // own: one controller a write cannot enable fails the whole write).
    WriteFile(root + "/cgroup.subtree_control", "+cpu +memory");
    if (c->pids_) c->pids_ = WriteFile(root + "/cgroup.subtree_control", "+pids");
  } else if (Writable(root + "/memory") && Writable(root + "/cpu")) {
    c->root_ = root;
    c->devices_ = Writable(root + "/devices");
    // cpuacct counts CPU time: co-mounted with cpu on most hosts (cpu holds
    // cpuacct.usage), a hierarchy of its own on some (a group there too).
    std::error_code ec;
    c->cpuacct_ = Writable(root + "/cpuacct") &&
                  !std::filesystem::equivalent(root + "/cpuacct", root + "/cpu", ec) &&
                  !std::filesystem::exists(root + "/cpu/cpuacct.usage", ec);
    c->pids_ = Writable(root + "/pids");
  } else {
    return NotFoundError("no writable cgroup hierarchy with cpu and memory under " + root);
  }
  std::error_code ec;
  for (const std::string& d : c->Dirs("")) std::filesystem::create_directories(d, ec);
  if (c->v2_) {
    // Enable cpu and memory for the groups below our prefix.
    std::string path = root;
    std::istringstream parts(prefix);
    std::string part;
    while (std::getline(parts, part, '/')) {
      path += "/" + part;
      WriteFile(path + "/cgroup.subtree_control", "+cpu +memory");
      if (c->pids_) c->pids_ = WriteFile(path + "/cgroup.subtree_control", "+pids");
    }
  }
  if (c->v2_) {
    // Device isolation on v2 is an eBPF filter per group: see if this kernel
    // and this agent's privileges allow one.
    const std::string probe = c->Dirs(".device-probe")[0];
    if (mkdir(probe.c_str(), 0755) == 0 || errno == EEXIST) {
      c->devices_ = AttachDeviceFilter(probe, {{4095, 1048575}}).ok();
      rmdir(probe.c_str());
    }
  }
  return c;
}

std::vector<std::string> Cgroups::Dirs(const std::string& name) const {
  const std::string rel = name.empty() ? prefix_ : prefix_ + "/" + name;
  if (v2_) return {root_ + "/" + rel};
  std::vector<std::string> dirs{root_ + "/cpu/" + rel, root_ + "/memory/" + rel};
  if (devices_) dirs.push_back(root_ + "/devices/" + rel);
  if (cpuacct_) dirs.push_back(root_ + "/cpuacct/" + rel);
  if (pids_) dirs.push_back(root_ + "/pids/" + rel);
  return dirs;
}

std::string Cgroups::V1Dir(const char* controller, const std::string& name) const {
  return root_ + "/" + controller + "/" + prefix_ + (name.empty() ? "" : "/" + name);
}

std::vector<std::string> Cgroups::Groups() const {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(Dirs("")[0], ec)) {
    if (e.is_directory(ec)) out.push_back(e.path().filename().string());
  }
  return out;
}

std::vector<std::string> Cgroups::ProcsOf(const std::string& path) const {
  if (v2_) return {root_ + path + "/cgroup.procs"};
  std::vector<std::string> out;
  for (const char* controller : {"cpu", "memory", "pids", "devices"}) {
    out.push_back(root_ + "/" + controller + path + "/cgroup.procs");
  }
  return out;
}

std::vector<pid_t> Cgroups::Pids(const std::string& name) const {
  std::vector<pid_t> out;
  for (const std::string& d : Dirs(name)) {
    std::istringstream procs(ReadFile(d + "/cgroup.procs"));
    pid_t pid;
    while (procs >> pid) {
      if (std::find(out.begin(), out.end(), pid) == out.end()) out.push_back(pid);
    }
  }
  return out;
}

std::vector<std::string> GpuDenyRules(const std::string& dev_dir, const std::vector<int32_t>& allowed) {
  std::vector<std::string> rules;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dev_dir, ec)) {
    const std::string file = e.path().filename().string();
    if (file.size() <= 6 || file.compare(0, 6, "nvidia") != 0) continue;
    const std::string digits = file.substr(6);
    if (digits.find_first_not_of("0123456789") != std::string::npos) continue;
    const int32_t index = std::stoi(digits);
    if (std::find(allowed.begin(), allowed.end(), index) != allowed.end()) continue;
    struct stat st;
    if (stat(e.path().c_str(), &st) != 0 || !S_ISCHR(st.st_mode)) continue;
    rules.push_back("c " + std::to_string(major(st.st_rdev)) + ":" + std::to_string(minor(st.st_rdev)) + " rwm");
  }
  std::sort(rules.begin(), rules.end());
  return rules;
}

namespace {

// "DeviceFileMinor: N" from a capability's access file, or -1.
int64_t CapMinor(const std::string& access_file) {
  std::istringstream in(ReadFile(access_file));
  std::string key;
  while (in >> key) {
    if (key == "DeviceFileMinor:") {
      int64_t minor = -1;
      in >> minor;
      return minor;
    }
  }
  return -1;
}

}  // namespace

std::vector<std::string> MigCapDenyRules(const std::string& caps_dir, const std::string& proc_caps, int32_t gpu,
                                         int32_t gpu_instance) {
  std::vector<int64_t> allowed;
  if (gpu_instance >= 0) {
    const std::string gi = proc_caps + "/gpu" + std::to_string(gpu) + "/mig/gi" + std::to_string(gpu_instance);
    allowed.push_back(CapMinor(gi + "/access"));
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(gi, ec)) {
      if (e.path().filename().string().rfind("ci", 0) == 0) allowed.push_back(CapMinor(e.path().string() + "/access"));
    }
  }
  std::vector<std::string> rules;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(caps_dir, ec)) {
    struct stat st;
    if (stat(e.path().c_str(), &st) != 0 || !S_ISCHR(st.st_mode)) continue;
    if (std::find(allowed.begin(), allowed.end(), static_cast<int64_t>(minor(st.st_rdev))) != allowed.end()) continue;
    rules.push_back("c " + std::to_string(major(st.st_rdev)) + ":" + std::to_string(minor(st.st_rdev)) + " rwm");
  }
  std::sort(rules.begin(), rules.end());
  return rules;
}

StatusOr<std::vector<std::string>> Cgroups::Create(const std::string& name, MilliCpu cpu, MemoryMiB memory,
                                                   const std::vector<std::string>& deny, int64_t pids) {
  std::vector<std::string> procs;
  for (const std::string& d : Dirs(name)) {
    std::error_code ec;
    std::filesystem::create_directories(d, ec);
    if (ec) return UnavailableError("cgroup " + d + ": " + ec.message());
    procs.push_back(d + "/cgroup.procs");
  }
  const int64_t period = 100000;  // 100 ms
  const int64_t quota = cpu * period / 1000;
  const int64_t bytes = memory * 1024 * 1024;
  bool ok = true;
  if (v2_) {
    const std::string d = Dirs(name)[0];
    if (cpu > 0) ok &= WriteFile(d + "/cpu.max", std::to_string(quota) + " " + std::to_string(period));
    if (memory > 0) {
      ok &= WriteFile(d + "/memory.max", std::to_string(bytes));
      WriteFile(d + "/memory.swap.max", "0");
    }
    if (devices_ && !deny.empty()) {
      // A task whose other GPUs cannot be fenced off does not run at all.
      if (Status f = AttachDeviceFilter(d, CharDevicesOf(deny)); !f.ok()) {
        return PermissionDeniedError("cgroup " + name + ": " + std::string(f.message()));
      }
    }
  } else {
    const auto dirs = Dirs(name);
    if (cpu > 0) {
      ok &= WriteFile(dirs[0] + "/cpu.cfs_period_us", std::to_string(period));
      ok &= WriteFile(dirs[0] + "/cpu.cfs_quota_us", std::to_string(quota));
    }
    if (memory > 0) {
      ok &= WriteFile(dirs[1] + "/memory.limit_in_bytes", std::to_string(bytes));
      WriteFile(dirs[1] + "/memory.memsw.limit_in_bytes", std::to_string(bytes));  // no swap past the limit, where supported
    }
    if (devices_) {
      // A task whose other GPUs cannot be fenced off does not run at all.
      for (const std::string& rule : deny) {
        if (!WriteFile(dirs[2] + "/devices.deny", rule)) {
          return PermissionDeniedError("cgroup " + name + ": cannot deny device " + rule);
        }
      }
    }
  }
  if (pids > 0 && pids_) ok &= WriteFile((v2_ ? Dirs(name)[0] : V1Dir("pids", name)) + "/pids.max", std::to_string(pids));
  if (!ok) return UnavailableError("cgroup " + name + ": cannot set limits");
  return procs;
}

bool Cgroups::OomKilled(const std::string& name) const {
  const auto dirs = Dirs(name);
  if (v2_) return OomKills(ReadFile(dirs[0] + "/memory.events")) > 0;
  return OomKills(ReadFile(dirs[1] + "/memory.oom_control")) > 0;
}

void Cgroups::Remove(const std::string& name) {
  for (const std::string& d : Dirs(name)) {
    // Whatever the task left running in its group goes with it: at once,
    // forks in flight too, where the kernel has cgroup.kill (5.14); else pid
    // by pid, again and again (a process forking faster than one pass kills
    // is caught by a later one: pids of the group only grow from its own).
    if (v2_) {
      const std::string kill_file = d + "/cgroup.kill";
      if (access(kill_file.c_str(), W_OK) == 0) WriteFile(kill_file, "1");
    }
    for (int attempt = 0; attempt < 100; ++attempt) {  // (0.2 s at most: the agent's lock is held)
      std::istringstream procs(ReadFile(d + "/cgroup.procs"));
      pid_t pid;
      while (procs >> pid) kill(pid, SIGKILL);
      if (rmdir(d.c_str()) == 0 || errno == ENOENT) break;
      usleep(2000);
    }
  }
}

namespace {

// The value after `key` in a "key value" file (cpu.stat), or -1.
int64_t StatValue(const std::string& text, const std::string& key) {
  std::istringstream in(text);
  std::string k;
  int64_t v = 0;
  while (in >> k >> v) {
    if (k == key) return v;
  }
  return -1;
}

int64_t FileNumber(const std::string& path) {
  const std::string text = ReadFile(path);
  if (text.empty() || !std::isdigit(static_cast<unsigned char>(text[0]))) return -1;
  return std::strtoll(text.c_str(), nullptr, 10);
}

}  // namespace

Cgroups::Usage Cgroups::UsageOf(const std::string& name) const {
  Usage u;
  const std::vector<std::string> dirs = Dirs(name);
  if (v2_) {
    const std::string stat = ReadFile(dirs[0] + "/cpu.stat");
    u.cpu_us = StatValue(stat, "usage_usec");
    u.throttled_us = StatValue(stat, "throttled_usec");
    const int64_t peak = FileNumber(dirs[0] + "/memory.peak");
    if (peak >= 0) u.memory_peak = (peak + (1 << 20) - 1) >> 20;  // a task that used any memory used 1 MiB
    return u;
  }
  // v1: cpuacct beside cpu (co-mounted as cpu,cpuacct on most hosts), in ns.
  const int64_t ns = FileNumber((cpuacct_ ? V1Dir("cpuacct", name) : dirs[0]) + "/cpuacct.usage");
  if (ns >= 0) u.cpu_us = ns / 1000;
  const int64_t throttled = StatValue(ReadFile(dirs[0] + "/cpu.stat"), "throttled_time");
  if (throttled >= 0) u.throttled_us = throttled / 1000;
  const int64_t peak = FileNumber(dirs[1] + "/memory.max_usage_in_bytes");
  if (peak >= 0) u.memory_peak = (peak + (1 << 20) - 1) >> 20;  // a task that used any memory used 1 MiB
  return u;
}

ProcessUsage ProcessUsageOf(pid_t pid) {
  ProcessUsage u;
  if (pid <= 0) return u;
  const std::string stat = ReadFile("/proc/" + std::to_string(pid) + "/stat");
  // Fields after the command (which may hold spaces and parentheses): state
  // is field 3, utime..cstime are 14..17, in clock ticks.
  const size_t close = stat.rfind(')');
  if (close != std::string::npos) {
    std::istringstream in(stat.substr(close + 2));
    std::string field;
    int64_t ticks = 0;
    bool ok = true;
    for (int f = 3; f <= 17 && ok; ++f) {
      ok = static_cast<bool>(in >> field);
      if (ok && f >= 14) ticks += std::strtoll(field.c_str(), nullptr, 10);
    }
    const long hz = sysconf(_SC_CLK_TCK);
    if (ok && hz > 0) u.cpu_us = ticks * 1'000'000 / hz;
  }
  std::istringstream status(ReadFile("/proc/" + std::to_string(pid) + "/status"));
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("VmHWM:", 0) == 0) u.memory_peak = std::strtoll(line.c_str() + 6, nullptr, 10) / 1024;
  }
  return u;
}

}  // namespace rota::agent
