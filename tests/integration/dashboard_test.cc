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
  RotaProcess up("up", tmp.path() + "/data", {"--gpus", "8xH100:80Gi", "--name", "local", "--history-interval", "1s"});
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
  b.Screenshot(out + "/cluster.png");

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
  b.Js("const s = document.querySelector('#f-state'); s.value = ''; s.dispatchEvent(new Event('input'))");
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
  b.Screenshot(out + "/job.png");

  // The finished job's output.
  for (const auto& j : jobs) {
    if (j["name"] != "hello") continue;
    b.Js("location.hash = '#/jobs/" + std::to_string(j["id"].get<int64_t>()) + "'");
    EXPECT_EQ(b.WaitFor("const l = document.querySelector('#job-logs'); return l && l.textContent.includes('hello-from-rota')"),
              true);
  }

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
