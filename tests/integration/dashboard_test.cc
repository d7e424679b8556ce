// The dashboard end to end in a real headless Chromium, driven through
// ChromeDriver's W3C WebDriver protocol: `rota up` with simulated GPUs, jobs
// submitted through the API, each page loaded and its numbers checked against
// the API, a screenshot per page into the test output, and no data without a
// token. Needs the Debian packages chromium and chromium-driver (.ci/run
// installs them); without them the test says so and skips.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>

#include "harness.h"

namespace rota::testing {
namespace {

using json = nlohmann::json;

constexpr const char* kChromium = "/usr/bin/chromium";
constexpr const char* kChromeDriver = "/usr/bin/chromedriver";

int FreePort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  socklen_t len = sizeof(addr);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  const int port = ntohs(addr.sin_port);
  close(fd);
  return port;
}

std::string Base64Decode(const std::string& in) {
  static const std::string kChars = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  uint32_t buf = 0;
  int bits = 0;
  for (char c : in) {
    const size_t v = kChars.find(c);
    if (v == std::string::npos) continue;  // padding, line breaks
    buf = (buf << 6) | static_cast<uint32_t>(v);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out += static_cast<char>((buf >> bits) & 0xff);
    }
  }
  return out;
}

// A ChromeDriver process and one browser session.
class Browser {
 public:
  Browser() {
    port_ = FreePort();
    pid_ = SpawnLogged({kChromeDriver, "--port=" + std::to_string(port_)}, "/dev/null");
    for (int i = 0; i < 200 && pid_ > 0; ++i) {
      if (auto r = Client().Get("/status"); r && r->status == 200) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    json caps = {{"capabilities",
                  {{"alwaysMatch",
                    {{"browserName", "chrome"},
                     {"goog:chromeOptions",
                      {{"binary", kChromium},
                       {"args", {"--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                                 "--window-size=1400,1000"}}}}}}}}};
    auto r = Client().Post("/session", caps.dump(), "application/json");
    if (r && r->status == 200) session_ = json::parse(r->body)["value"]["sessionId"];
  }
  ~Browser() {
    if (!session_.empty()) Client().Delete("/session/" + session_);
    if (pid_ > 0) {
      kill(pid_, SIGTERM);
      int status;
      waitpid(pid_, &status, 0);
    }
  }
  bool ok() const { return !session_.empty(); }

  json Call(const std::string& method, const std::string& path, const json& body = json::object()) {
    auto c = Client();
    const std::string url = "/session/" + session_ + path;
    httplib::Result r = method == "GET" ? c.Get(url) : c.Post(url, body.dump(), "application/json");
    if (!r) return json();
    json reply = json::parse(r->body, nullptr, false);
    return reply.is_discarded() ? json() : reply["value"];
  }
  void Go(const std::string& url) { Call("POST", "/url", {{"url", url}}); }
  // Runs `script` in the page (a function body; `arguments` holds `args`).
  json Js(const std::string& script, const json& args = json::array()) {
    return Call("POST", "/execute/sync", {{"script", script}, {"args", args}});
  }
  // Polls `script` until it returns something truthy; the last value.
  json WaitFor(const std::string& script, int timeout_ms = 10000) {
    json v;
    for (int waited = 0; waited < timeout_ms; waited += 100) {
      v = Js(script);
      if (!v.is_null() && v != false && v != "" && v != 0) return v;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return v;
  }
  std::string Element(const std::string& css) {
    json e = Call("POST", "/element", {{"using", "css selector"}, {"value", css}});
    if (!e.is_object() || e.empty()) return "";
    return e.begin().value().get<std::string>();
  }
  void Type(const std::string& css, const std::string& text) {
    Call("POST", "/element/" + Element(css) + "/value", {{"text", text}});
  }
  void Click(const std::string& css) { Call("POST", "/element/" + Element(css) + "/click"); }
  void Resize(int width, int height) { Call("POST", "/window/rect", {{"width", width}, {"height", height}}); }
  // A Chrome DevTools command (ChromeDriver's goog/cdp/execute), e.g. emulated media.
  void Cdp(const std::string& cmd, const json& params) { Call("POST", "/goog/cdp/execute", {{"cmd", cmd}, {"params", params}}); }
  void Screenshot(const std::string& path) {
    json png = Call("GET", "/screenshot");
    std::ofstream(path, std::ios::binary) << Base64Decode(png.is_string() ? png.get<std::string>() : "");
  }

 private:
  httplib::Client Client() const {
    httplib::Client c("127.0.0.1", port_);
    c.set_read_timeout(60, 0);
    return c;
  }
  int port_ = 0;
  pid_t pid_ = 0;
  std::string session_;
};

std::string OutputDir() {
  const char* d = std::getenv("ROTA_TEST_OUTPUT");
  std::string dir = std::string(d ? d : ROTA_TEST_OUTPUT_DIR) + "/dashboard";
  std::filesystem::create_directories(dir);
  return dir;
}

TEST(DashboardTest, PagesShowWhatTheApiSaysAndNothingWithoutAToken) {
  if (access(kChromium, X_OK) != 0 || access(kChromeDriver, X_OK) != 0) {
    GTEST_SKIP() << "needs " << kChromium << " and " << kChromeDriver << " (apt-get install chromium chromium-driver)";
  }
  TempDir tmp;
  // (job_visibility: own, so that another user's job is not there at all
  // for alice below; the default, all, shows it without spec or actions.)
  const std::string config = tmp.path() + "/own.yaml";
  std::ofstream(config) << "job_visibility: own\n";
  RotaProcess up("up", tmp.path() + "/data",
                 {"--gpus", "8xH100:80Gi", "--name", "local", "--history-interval", "1s", "--config", config});
  auto admin = up.Admin();
  // A running job on 2 GPUs, one that waits for all 8, one that finished.
  ASSERT_EQ(admin.Post("/v1/jobs", "name: trainer\ntasks: [{gpus: 2, command: [sleep, '300']}]\n", "application/yaml")->status, 201);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  ASSERT_EQ(admin.Post("/v1/jobs", "name: big-wait\ntasks: [{gpus: 8, command: ['true']}]\n", "application/yaml")->status, 201);
  ASSERT_EQ(admin.Post("/v1/jobs", "name: hello\ntasks: [{gpus: 1, command: [echo, hello-from-rota]}]\n", "application/yaml")->status, 201);
  json jobs;
  for (int i = 0; i < 100; ++i) {  // until trainer runs and hello is done
    jobs = json::parse(admin.Get("/v1/jobs?all=true")->body)["jobs"];
    int settled = 0;
    for (const auto& j : jobs) {
      if ((j["name"] == "trainer" && j["state"] == "running") || (j["name"] == "hello" && j["state"] == "succeeded")) ++settled;
    }
    if (settled == 2) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  int64_t trainer = 0, waiting = 0;
  for (const auto& j : jobs) {
    if (j["name"] == "trainer") trainer = j["id"];
    if (j["name"] == "big-wait") waiting = j["id"];
  }
  ASSERT_GT(trainer, 0);

  Browser b;
  ASSERT_TRUE(b.ok()) << "ChromeDriver did not start a Chromium session";
  const std::string out = OutputDir();

  // Without a token: the sign-in form and no data at all.
  b.Go(up.url() + "/");
  ASSERT_EQ(b.WaitFor("return !document.querySelector('#login-view').hidden"), true);
  EXPECT_EQ(b.Js("return document.querySelector('#app').innerHTML"), "");
  const std::string text = b.Js("return document.body.innerText");
  for (const char* secret : {"local", "trainer", "big-wait", "H100"}) EXPECT_EQ(text.find(secret), std::string::npos) << secret;
  b.Screenshot(out + "/login.png");
  // A wrong token is refused and still shows nothing.
  b.Type("#token", "not-a-token");
  b.Click("#login-btn");
  EXPECT_EQ(b.WaitFor("return document.querySelector('#login-error').textContent"), "That token was not accepted.");
  EXPECT_EQ(b.Js("return document.querySelector('#app').innerHTML"), "");

  // Sign in: the cluster page.
  b.Js("document.querySelector('#token').value = ''");
  b.Type("#token", up.token());
  b.Click("#login-btn");
  ASSERT_EQ(b.WaitFor("return document.querySelector('#sum-gpus') !== null"), true);
  json nodes = json::parse(admin.Get("/v1/nodes")->body)["nodes"];
  int64_t gpus = 0, allocated = 0;
  for (const auto& n : nodes) {
    gpus += n["gpus"].get<int64_t>();
    allocated += n["gpus_allocated"].get<int64_t>();
  }
  EXPECT_EQ(b.Js("return document.querySelector('#sum-gpus').textContent"), std::to_string(gpus));
  EXPECT_EQ(b.Js("return document.querySelector('#sum-allocated').textContent"), std::to_string(allocated));
  EXPECT_EQ(b.Js("return document.querySelectorAll('.gpu[data-gpu]').length"), gpus);
  EXPECT_EQ(b.Js("return document.querySelectorAll('#heatmap .gpu.alloc').length"), allocated);
  EXPECT_EQ(b.Js("return document.querySelectorAll('.badge.sim').length > 0"), true) << "simulated GPUs are marked";
  // A GPU's details on click.
  b.Js("document.querySelector('#heatmap .gpu.alloc').click()");
  const std::string detail = b.WaitFor("return document.querySelector('#gpu-detail').textContent");
  EXPECT_NE(detail.find("job " + std::to_string(trainer)), std::string::npos) << detail;
  // Its use over the last day, from the GPU history: a chart once a few
  // minutes were reported, and until then a line saying so.
  EXPECT_EQ(b.WaitFor("return document.querySelector('#gpu-history-chart, #gpu-history-empty') !== null"), true);
  const std::string chart = b.Js(
      "return gpuHistoryChart([[0, 60, 50, 1, 3600, 60], [60, 60, 90, 1, 18000, 300]], {since: 0, until: 120})");
  EXPECT_NE(chart.find("id=\"gpu-history-chart\" data-points=\"2\""), std::string::npos) << chart;
  EXPECT_NE(chart.find("mean 70%"), std::string::npos) << chart;
  EXPECT_NE(chart.find("peak 300 W"), std::string::npos) << chart;
  // An unhealthy GPU says why (the agent's reason: an XID, ECC, temperature).
  const std::string title = b.Js("return gpuTitle({name: 'n', gpu_list: []}, {index: 3, healthy: false, health_reason: 'xid 79', "
                                 "allocated: false})");
  EXPECT_NE(title.find("unhealthy: xid 79"), std::string::npos) << title;
  b.Screenshot(out + "/cluster.png");

  // Drain with a reason and undrain, from the node's details (an admin).
  b.Js("document.querySelector('[data-node-select=\"local\"]').click()");
  ASSERT_EQ(b.WaitFor("return document.querySelector('#node-drain') !== null"), true);
  EXPECT_EQ(b.Js("return document.querySelector('#node-detail dd[data-k=state]').textContent"), "ready");
  b.Js("document.querySelector('#drain-reason').value = 'replacing a fan'; document.querySelector('#node-drain').click()");
  ASSERT_EQ(b.WaitFor("return document.querySelector('#node-undrain') !== null"), true);
  json drained = json::parse(admin.Get("/v1/nodes")->body)["nodes"][0];
  EXPECT_EQ(drained["drained"], true) << drained.dump();
  EXPECT_EQ(drained["drain_reason"], "replacing a fan") << drained.dump();
  EXPECT_EQ(b.WaitFor("const a = document.querySelector('#attention'); return a && a.textContent.includes('replacing a fan')"), true);
  EXPECT_EQ(b.WaitFor("return document.querySelector('#node-detail dd[data-k=\"drained because\"]') !== null"), true);
  b.Screenshot(out + "/cluster-drained.png");
  b.Js("document.querySelector('#node-undrain').click()");
  ASSERT_EQ(b.WaitFor("return document.querySelector('#node-drain') !== null"), true);
  EXPECT_FALSE(json::parse(admin.Get("/v1/nodes")->body)["nodes"][0].value("drained", false));
  EXPECT_EQ(b.WaitFor("return document.querySelector('#attention') === null"), true);
  // The range of the use-over-time charts can be chosen.
  b.Js("const s = document.querySelector('#h-range'); s.value = '1h'; s.dispatchEvent(new Event('input', {bubbles: true}))");
  EXPECT_EQ(b.WaitFor("return document.querySelector('#h-range').value === '1h' && "
                      "document.querySelector('#node-history-chart, #node-history-empty') !== null"),
            true);

  // Queues.
  b.Js("location.hash = '#/queues'");
  ASSERT_EQ(b.WaitFor("return document.querySelector('#queues-table') !== null"), true);
  const json queues = json::parse(admin.Get("/v1/queues")->body);  // named: a range-for over a temporary's member dangles
  for (const auto& q : queues["queues"]) {
    const std::string row = "#queues-table tr[data-queue=\"" + q["name"].get<std::string>() + "\"] ";
    EXPECT_EQ(b.Js("return document.querySelector(arguments[0] + 'td[data-k=allocated]').textContent", {row}),
              std::to_string(q["gpus_allocated"].get<int64_t>()));
    EXPECT_EQ(b.Js("return document.querySelector(arguments[0] + 'td[data-k=pending]').textContent", {row}),
              std::to_string(q["pending"].get<int64_t>()));
    EXPECT_EQ(b.Js("return document.querySelector(arguments[0] + 'td[data-k=running]').textContent", {row}),
              std::to_string(q["running"].get<int64_t>()));
    // Its standing, in words and colour (over share, borrowing, starved).
    std::string status = q["status"];
    std::replace(status.begin(), status.end(), '_', ' ');
    EXPECT_EQ(b.Js("return document.querySelector(arguments[0] + 'td[data-k=status]').textContent", {row}), status);
  }
  // Usage over time, from the server's samples (one a second here).
  EXPECT_EQ(b.WaitFor("return document.querySelectorAll('#queue-history polyline').length >= 2"), true);
  b.Screenshot(out + "/queues.png");

  // Jobs: every job, with filters.
  b.Js("location.hash = '#/jobs'");
  const size_t all = json::parse(admin.Get("/v1/jobs?all=true")->body)["jobs"].size();
  EXPECT_EQ(b.WaitFor("return document.querySelectorAll('#jobs-table tbody tr').length === " + std::to_string(all)), true);
  b.Js("const s = document.querySelector('#f-state'); s.value = 'pending'; s.dispatchEvent(new Event('input'))");
  EXPECT_EQ(b.Js("return document.querySelectorAll('#jobs-table tbody tr').length"), 1);
  EXPECT_EQ(b.Js("return document.querySelector('#jobs-table tbody tr').dataset.job"), std::to_string(waiting));
  // Time columns: how long it has waited, in a span people read.
  const std::string waited = b.Js("return document.querySelector('#jobs-table tbody tr td[data-k=waited]').textContent");
  EXPECT_TRUE(!waited.empty() && std::isdigit(static_cast<unsigned char>(waited[0])) &&
              std::string("smhd").find(waited.back()) != std::string::npos)
      << waited;
  b.Js("const s = document.querySelector('#f-state'); s.value = ''; s.dispatchEvent(new Event('input'))");
  // Sorting by a column, both ways.
  b.Js("document.querySelector('#jobs-table th[data-sort=\"0\"]').click()");  // id, newest first by default: now oldest
  EXPECT_EQ(b.Js("return document.querySelector('#jobs-table tbody tr').dataset.job"), std::to_string(trainer));
  EXPECT_EQ(b.Js("return document.querySelector('#jobs-table th[data-sort=\"0\"]').dataset.dir"), "asc");
  b.Js("document.querySelector('#jobs-table th[data-sort=\"0\"]').click()");
  EXPECT_EQ(b.Js("return document.querySelector('#jobs-table th[data-sort=\"0\"]').dataset.dir"), "desc");
  // Paging: 120 jobs are 50 to a page.
  EXPECT_EQ(b.Js("const saved = state.jobs; const many = [];"
                 "for (let i = 1; i <= 120; i++) many.push({id: i, name: 'j' + i, user: 'u', queue: 'default', state: 'pending',"
                 " gpus: 1, submitted_at: '', restarts: 0});"
                 "state.jobs = many; renderJobRows(many); const first = document.querySelectorAll('#jobs-table tbody tr').length + ' ' +"
                 " document.querySelector('#page-text').textContent; document.querySelector('#page-next').click();"
                 "document.querySelector('#page-next').click(); const last = document.querySelectorAll('#jobs-table tbody tr').length"
                 " + ' ' + document.querySelector('#page-text').textContent + ' ' + document.querySelector('#page-next').disabled;"
                 "state.page = 0; state.jobs = saved; renderJobRows(saved); return first + ' / ' + last"),
            "50 1–50 of 120 / 20 101–120 of 120 true");
  b.Screenshot(out + "/jobs.png");

  // Live: a change shows up without reloading the page.
  b.Js("window.__sameLoad = true");
  ASSERT_EQ(admin.Post("/v1/jobs/" + std::to_string(waiting) + "/cancel", "{}", "application/json")->status, 200);
  EXPECT_EQ(b.WaitFor("const r = document.querySelector('#jobs-table tr[data-job=\"" + std::to_string(waiting) +
                      "\"] td[data-k=state]'); return r && r.textContent === 'cancelled'"),
            true);
  EXPECT_EQ(b.Js("return window.__sameLoad === true"), true) << "the page reloaded";

  // One job: state, placement on the topology, events, logs.
  b.Click("#jobs-table tr[data-job=\"" + std::to_string(trainer) + "\"]");
  ASSERT_EQ(b.WaitFor("return document.querySelector('#job-title') !== null"), true);
  json job = json::parse(admin.Get("/v1/jobs/" + std::to_string(trainer))->body);
  EXPECT_EQ(b.Js("return document.querySelector('dd[data-k=state]').textContent"), job["state"]);
  EXPECT_EQ(b.Js("return document.querySelectorAll('#job-topology .gpu.mine').length"), 2);
  EXPECT_GE(b.Js("return document.querySelectorAll('#job-events li').length").get<int>(), 2);
  EXPECT_EQ(b.WaitFor("return document.querySelector('#job-logs') !== null"), true);
  EXPECT_EQ(b.Js("return document.querySelector('dd[data-k=\"running for\"]') !== null"), true);
  EXPECT_EQ(b.Js("return document.querySelector('#job-spec pre').textContent.includes('\"sleep\"')"), true);
  // One event per attempt, and a log tab per replica, followed as it grows.
  EXPECT_EQ(b.Js("return document.querySelectorAll('#job-events li.attempt').length"), 1);
  EXPECT_EQ(b.Js("return document.querySelectorAll('#log-tabs button[data-log-tab]').length"), 2);
  b.Js("document.querySelector('#log-tabs button[data-log-tab=\"main-0\"]').click()");
  EXPECT_EQ(b.WaitFor("const t = document.querySelector('#log-tabs button.on'); return t && t.dataset.logTab === 'main-0'"), true);
  EXPECT_EQ(b.Js("return document.querySelector('#log-follow').checked"), true);
  b.Screenshot(out + "/job.png");

  // The finished job's output.
  for (const auto& j : jobs) {
    if (j["name"] != "hello") continue;
    b.Js("location.hash = '#/jobs/" + std::to_string(j["id"].get<int64_t>()) + "'");
    EXPECT_EQ(b.WaitFor("const l = document.querySelector('#job-logs'); return l && l.textContent.includes('hello-from-rota')"),
              true);
  }

  // Actions, as their owner or an admin would click them: hold, release,
  // then cancel (which asks for a second click).
  ASSERT_EQ(admin.Post("/v1/jobs", "name: act-on-me\ntasks: [{gpus: 8, command: ['true']}]\n", "application/yaml")->status, 201);
  const int64_t acted = json::parse(admin.Get("/v1/jobs?state=pending")->body)["jobs"].back()["id"];
  auto job_json = [&] { return json::parse(admin.Get("/v1/jobs/" + std::to_string(acted))->body); };
  b.Js("location.hash = '#/jobs/" + std::to_string(acted) + "'");
  ASSERT_EQ(b.WaitFor("return document.querySelector('button[data-job-action=hold]') !== null"), true);
  // A pending job shows its start in the what-if projection (as rota jobs --start), "~" for an estimate.
  json projected;
  for (int i = 0; i < 50 && projected.is_null(); ++i) {  // (429 while the page's own projection runs)
    auto w = admin.Get("/v1/whatif");
    if (w->status != 200) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      continue;
    }
    const json doc = json::parse(w->body);  // (kept: the loop reads into it)
    for (const auto& j : doc["baseline"]["jobs"]) {
      if (j["id"].get<int64_t>() == acted) projected = j;
    }
    break;
  }
  ASSERT_FALSE(projected.is_null());
  ASSERT_FALSE(projected["expected_start"].is_null()) << projected.dump();
  const std::string shown = b.Js("const d = document.querySelector('dd[data-k=\"projected start\"]'); return d ? d.textContent : ''");
  EXPECT_EQ(shown.rfind("~ ", 0) == 0, projected["estimate"].get<bool>()) << shown;
  EXPECT_NE(shown.find("("), std::string::npos) << shown;
  b.Js("document.querySelector('button[data-job-action=hold]').click()");
  ASSERT_EQ(b.WaitFor("return document.querySelector('button[data-job-action=release]') !== null"), true);
  EXPECT_EQ(job_json().value("held", false), true);
  EXPECT_NE(b.Js("return document.querySelector('#job-action-result').textContent").get<std::string>().find("held"),
            std::string::npos);
  b.Js("document.querySelector('button[data-job-action=release]').click()");
  ASSERT_EQ(b.WaitFor("return document.querySelector('button[data-job-action=hold]') !== null"), true);
  EXPECT_EQ(job_json().value("held", false), false);
  b.Js("document.querySelector('button[data-job-action=cancel]').click()");
  EXPECT_EQ(b.WaitFor("const c = document.querySelector('button[data-job-action=cancel]'); "
                      "return c && c.textContent.startsWith('Confirm')"),
            true);
  EXPECT_EQ(job_json()["state"], "pending") << "one click does not cancel";
  b.Js("document.querySelector('button[data-job-action=cancel]').click()");
  EXPECT_EQ(b.WaitFor("const d = document.querySelector('dd[data-k=state]'); return d && d.textContent === 'cancelled'"), true);
  EXPECT_EQ(job_json()["state"], "cancelled");
  EXPECT_EQ(b.Js("return document.querySelectorAll('button[data-job-action]').length"), 0);
  b.Screenshot(out + "/job-actions.png");

  // Services: each with its replicas and the autoscaler's count.
  ASSERT_EQ(admin.Post("/v1/jobs", "name: web\nkind: service\nservice: {port: 28400}\ntasks: [{cpu: 100m, command: [sleep, '300']}]\n",
                       "application/yaml")->status, 201);
  b.Js("location.hash = '#/services'");
  EXPECT_EQ(b.WaitFor("const r = document.querySelector('#services-table tr[data-service=\"web\"] td[data-k=placed]'); "
                      "return r !== null && r.textContent === '1'"),
            true);
  EXPECT_EQ(b.Js("return document.querySelector('#services-table tr[data-service=\"web\"] td[data-k=desired]').textContent"), "1");
  b.Screenshot(out + "/services.png");

  // Reports: where the GPU-hours went, as the report API says (the hello
  // job ended, the trainer runs).
  b.Js("location.hash = '#/reports'");
  ASSERT_EQ(b.WaitFor("return document.querySelector('#report-table') !== null"), true);
  const json report = json::parse(admin.Get("/v1/usage/report?since=7d&by=user")->body);
  ASSERT_FALSE(report["rows"].empty()) << report.dump();
  for (const auto& r : report["rows"]) {
    const std::string row = "#report-table tr[data-key=\"" + r["key"].get<std::string>() + "\"] ";
    EXPECT_EQ(b.Js("return document.querySelector(arguments[0] + 'td[data-k=jobs]').textContent", {row}),
              std::to_string(r["jobs"].get<int64_t>()));
  }
  EXPECT_EQ(b.Js("return document.querySelectorAll('#report-table tr.total').length"), 1);
  // The week hour by hour: a held and a used line per user.
  EXPECT_EQ(b.Js("return document.querySelectorAll('#report-chart polyline.series').length"),
            2 * static_cast<int64_t>(report["timeline"]["series"].size()));
  EXPECT_EQ(report["timeline"]["steps"], 168);
  // By queue: the page asks again.
  b.Js("const s = document.querySelector('#r-by'); s.value = 'queue'; s.dispatchEvent(new Event('input'))");
  EXPECT_EQ(b.WaitFor("return document.querySelector('#report-table tr[data-key=\"default\"]') !== null"), true);
  b.Screenshot(out + "/reports.png");

  // At a phone's width (390 px) every page fits: nothing wider than the screen.
  b.Resize(390, 844);
  for (const char* page : {"cluster", "queues", "jobs", "reports", "services"}) {
    b.Js(std::string("location.hash = '#/") + page + "'");
    EXPECT_EQ(b.WaitFor(std::string("return document.querySelector('#app').dataset.page === '") + page +
                        "' && document.querySelector('#app h1') !== null"),
              true)
        << page;
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    EXPECT_LE(b.Js("return document.documentElement.scrollWidth - window.innerWidth").get<int64_t>(), 0) << page;
    b.Screenshot(out + "/phone-" + page + ".png");
  }
  b.Js("location.hash = '#/jobs/" + std::to_string(trainer) + "'");
  ASSERT_EQ(b.WaitFor("return document.querySelector('#job-title') !== null"), true);
  EXPECT_LE(b.Js("return document.documentElement.scrollWidth - window.innerWidth").get<int64_t>(), 0) << "job page";
  b.Screenshot(out + "/phone-job.png");
  // Dark mode follows the system's choice.
  const std::string light = b.Js("return getComputedStyle(document.body).backgroundColor");
  b.Cdp("Emulation.setEmulatedMedia", {{"features", {{{"name", "prefers-color-scheme"}, {"value", "dark"}}}}});
  const std::string dark = b.Js("return getComputedStyle(document.body).backgroundColor");
  EXPECT_EQ(light, "rgb(246, 247, 249)");
  EXPECT_EQ(dark, "rgb(18, 21, 27)");
  b.Screenshot(out + "/phone-job-dark.png");
  b.Cdp("Emulation.setEmulatedMedia", {{"features", {{{"name", "prefers-color-scheme"}, {"value", "light"}}}}});
  b.Resize(1400, 1000);

  // A user who is not an admin: actions on their own jobs only, no drain.
  auto minted = admin.Post("/v1/tokens", R"({"user": "alice"})", "application/json");
  ASSERT_EQ(minted->status, 201) << minted->body;
  const std::string alice = json::parse(minted->body)["token"];
  auto as_alice = up.Http(alice);
  ASSERT_EQ(as_alice.Post("/v1/jobs", "name: mine\ntasks: [{gpus: 8, command: ['true']}]\n", "application/yaml")->status, 201);
  const int64_t mine = json::parse(as_alice.Get("/v1/jobs?user=alice")->body)["jobs"].back()["id"];
  b.Click("#logout");
  ASSERT_EQ(b.WaitFor("return !document.querySelector('#login-view').hidden"), true);
  b.Js("document.querySelector('#token').value = ''");
  b.Type("#token", alice);
  b.Click("#login-btn");
  b.Js("location.hash = '#/cluster'");
  ASSERT_EQ(b.WaitFor("return document.querySelector('#sum-gpus') !== null"), true);
  EXPECT_EQ(b.Js("return document.querySelector('#whoami').textContent"), "alice");
  b.Js("document.querySelector('[data-node-select=\"local\"]').click()");
  ASSERT_EQ(b.WaitFor("return document.querySelector('#node-detail dd[data-k=state]') !== null"), true);
  EXPECT_EQ(b.Js("return document.querySelector('#node-actions')"), nullptr);
  b.Js("location.hash = '#/jobs/" + std::to_string(mine) + "'");
  ASSERT_EQ(b.WaitFor("return document.querySelector('button[data-job-action=hold]') !== null"), true);
  b.Js("location.hash = '#/jobs/" + std::to_string(trainer) + "'");
  // (job_visibility: own: another's job is not there at all.)
  EXPECT_EQ(b.WaitFor("return document.querySelector('#updated').textContent.includes('no job " + std::to_string(trainer) + "')"),
            true);
  EXPECT_EQ(b.Js("return document.querySelector('#job-actions')"), nullptr) << "another's job has no actions";
  EXPECT_EQ(b.Js("return document.querySelector('#job-spec')"), nullptr) << "nor its spec";

  // Signing out leaves nothing on the page.
  b.Click("#logout");
  EXPECT_EQ(b.WaitFor("return !document.querySelector('#login-view').hidden"), true);
  EXPECT_EQ(b.Js("return document.querySelector('#app').innerHTML"), "");
  b.Go(up.url() + "/");
  EXPECT_EQ(b.WaitFor("return !document.querySelector('#login-view').hidden"), true);
  EXPECT_EQ(b.Js("return document.querySelector('#app').innerHTML"), "");
}

TEST(DashboardTest, StaticFilesNeedNoTokenButTheApiDoes) {
  TempDir tmp;
  RotaProcess up("up", tmp.path() + "/data", {"--gpus", "2xA100:40Gi", "--name", "m"});
  auto anon = up.Http("");
  for (const char* path : {"/", "/index.html", "/app.js", "/style.css"}) {
    auto r = anon.Get(path);
    ASSERT_TRUE(r);
    EXPECT_EQ(r->status, 200) << path;
    EXPECT_NE(r->get_header_value("Content-Security-Policy").find("default-src 'self'"), std::string::npos) << path;
  }
  EXPECT_EQ(anon.Get("/nope.js")->status, 404);
  EXPECT_EQ(anon.Get("/v1/nodes")->status, 401);
  EXPECT_EQ(anon.Get("/v1/queues/history")->status, 401);
  auto history = up.Admin().Get("/v1/queues/history");
  ASSERT_EQ(history->status, 200);
  EXPECT_TRUE(json::parse(history->body)["samples"].is_array());
}

}  // namespace
}  // namespace rota::testing
