#include "agent/oci.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <thread>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

namespace rota::agent {
namespace {

struct TempDir {
  TempDir() {
    char tmpl[] = "/tmp/rota-oci-XXXXXX";
    path = mkdtemp(tmpl);
  }
  ~TempDir() { std::filesystem::remove_all(path); }
  std::string path;
};

// An executable file at `path`, with its directories.
void MakeProgram(const std::string& path, std::filesystem::perms perms = std::filesystem::perms::owner_all) {
  std::filesystem::create_directories(std::filesystem::path(path).parent_path());
  std::ofstream(path) << "#!/bin/sh\n";
  std::filesystem::permissions(path, perms);
}

TEST(Oci, BundleCarriesRootfsMountsLimitsAndEnvironment) {
  TempDir tmp;
  std::filesystem::create_directories(tmp.path + "/image/rootfs");
  std::filesystem::create_directories(tmp.path + "/data");
  OciTask task;
  task.id = "rota-7-0-1-2";
  task.rootfs = tmp.path + "/image";  // an image directory: its rootfs/ is used
  task.args = {"python", "train.py"};
  MakeProgram(tmp.path + "/image/rootfs/usr/bin/python");
  task.env = {{"RANK", "1"}, {"WORLD_SIZE", "2"}};
  task.mounts = {{tmp.path + "/data", "/data", true}};
  task.job_dir = tmp.path + "/job";
  task.cpu = 2500;
  task.memory = 512;
  ASSERT_TRUE(WriteOciBundle(tmp.path + "/bundle", task).ok());
  std::ifstream in(tmp.path + "/bundle/config.json");
  const nlohmann::json c = nlohmann::json::parse(in);
  EXPECT_EQ(c["root"]["path"], tmp.path + "/image/rootfs");
  EXPECT_EQ(c["root"]["readonly"], true);
  EXPECT_EQ(c["process"]["args"], nlohmann::json::array({"python", "train.py"}));
  const auto env = c["process"]["env"].get<std::vector<std::string>>();
  EXPECT_NE(std::find(env.begin(), env.end(), "RANK=1"), env.end());
  EXPECT_EQ(env[0].rfind("PATH=", 0), 0u);  // the container's own PATH
  bool data = false, rota = false, work = false;
  for (const auto& m : c["mounts"]) {
    if (m["destination"] == "/data") {
      data = m["source"] == tmp.path + "/data" && m["options"] == nlohmann::json::array({"rbind", "ro"});
    }
    if (m["destination"] == "/rota") rota = m["source"] == tmp.path + "/job";
    // The job's directory is the agent's: read-only inside; only work/ is the task's.
    if (m["destination"] == "/rota") EXPECT_EQ(m["options"], nlohmann::json::array({"rbind", "ro"}));
    if (m["destination"] == "/rota/work") {
      work = m["source"] == tmp.path + "/job/work" && m["options"] == nlohmann::json::array({"rbind", "rw"});
    }
  }
  EXPECT_TRUE(data) << c["mounts"].dump();
  EXPECT_TRUE(rota);
  EXPECT_TRUE(work) << c["mounts"].dump();
  EXPECT_EQ(c["linux"]["resources"]["memory"]["limit"], 512LL * 1024 * 1024);
  EXPECT_EQ(c["linux"]["resources"]["cpu"]["quota"], 250000);
  EXPECT_EQ(c["linux"]["cgroupsPath"], "/rota/rota-7-0-1-2");
  // Host network: no network namespace, so ranks meet at MASTER_ADDR.
  for (const auto& ns : c["linux"]["namespaces"]) EXPECT_NE(ns["type"], "network");
}

TEST(Oci, BadInputNamesThePath) {
  TempDir tmp;
  OciTask task;
  task.id = "x";
  task.rootfs = tmp.path + "/missing";
  task.args = {"true"};
  Status s = WriteOciBundle(tmp.path + "/bundle", task);
  EXPECT_NE(s.message().find("rootfs '" + tmp.path + "/missing' is not a directory"), std::string::npos) << s.ToString();
  std::filesystem::create_directories(tmp.path + "/rootfs");
  task.rootfs = tmp.path + "/rootfs";
  task.mounts = {{"/no/such/dir", "/data", false}};
  s = WriteOciBundle(tmp.path + "/bundle", task);
  EXPECT_NE(s.message().find("mount source '/no/such/dir'"), std::string::npos) << s.ToString();
  EXPECT_FALSE(FindOciRuntime("docker").ok());
}

// The server checked a mount's path as written against allowed_mounts: a
// link on the way (made by an earlier job under an allowed prefix) would
// bind what it points to, so it is refused; so is a rootfs through one. A
// link root made (the admin's) is followed.
TEST(Oci, AMountOrRootfsThroughASymbolicLinkIsRefused) {
  TempDir tmp;
  std::filesystem::create_directories(tmp.path + "/rootfs");
  std::filesystem::create_directories(tmp.path + "/scratch/alice/data");
  // Links a job made (its user's); run as root, the test hands them to nobody.
  auto users = [](const std::string& link) {
    if (geteuid() == 0) ASSERT_EQ(lchown(link.c_str(), 65534, 65534), 0);
  };
  std::filesystem::create_symlink("/", tmp.path + "/scratch/alice/h");
  users(tmp.path + "/scratch/alice/h");
  std::filesystem::create_symlink(tmp.path + "/scratch/alice", tmp.path + "/scratch/me");
  users(tmp.path + "/scratch/me");
  OciTask task;
  task.id = "x";
  task.rootfs = tmp.path + "/rootfs";
  for (const std::string source : {tmp.path + "/scratch/alice/h", tmp.path + "/scratch/me/data"}) {
    task.mounts = {{tmp.path + "/scratch/alice/data", "/ok", true}, {source, "/host", false}};
    const Status s = WriteOciBundle(tmp.path + "/bundle", task);
    EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition) << s.ToString();
    EXPECT_NE(s.message().find("mount source '" + source + "' goes through a symbolic link"), std::string::npos)
        << s.ToString();
  }
  task.mounts = {{tmp.path + "/scratch/alice/data", "/ok", true}};
  EXPECT_TRUE(WriteOciBundle(tmp.path + "/bundle", task).ok());
  if (geteuid() == 0) {
    // An admin's link (root's: /datasets -> /mnt/nfs/datasets) is followed,
    // also through "..".
    std::filesystem::create_symlink(tmp.path + "/scratch", tmp.path + "/datasets");
    task.mounts = {{tmp.path + "/datasets/alice/data", "/ok", true}, {tmp.path + "/datasets/../scratch/alice/data", "/b", true}};
    const Status s = WriteOciBundle(tmp.path + "/bundle", task);
    EXPECT_TRUE(s.ok()) << s.ToString();
  }
  task.mounts = {{tmp.path + "/scratch/alice/data", "/ok", true}};
  std::filesystem::create_symlink(tmp.path + "/rootfs", tmp.path + "/image");
  users(tmp.path + "/image");
  task.rootfs = tmp.path + "/image";
  const Status s = WriteOciBundle(tmp.path + "/bundle", task);
  EXPECT_NE(s.message().find("rootfs '" + tmp.path + "/image' goes through a symbolic link"), std::string::npos)
      << s.ToString();
}

// A program the image lacks is found before the runtime runs (which would
// exit 1 with it, as a program that failed): looked up as the runtime does,
// symlinks followed inside the image only, and nothing judged at or below a
// mount (the container sees what is mounted there, not the image).
TEST(Oci, AProgramTheImageLacksIsFoundBeforeTheRuntimeRuns) {
  TempDir tmp;
  const std::string root = tmp.path + "/rootfs";
  MakeProgram(root + "/usr/bin/python");
  std::filesystem::create_symlink("usr/bin", root + "/bin");    // merged /usr, relative
  std::filesystem::create_symlink("/usr/bin", root + "/sbin");  // absolute: inside the image
  std::filesystem::create_directories(root + "/etc");
  std::ofstream(root + "/etc/passwd") << "root:x:0:0::/:/bin/sh\n";
  std::filesystem::create_symlink("../../../../../../etc", root + "/escape");  // stays at the image's root
  std::filesystem::create_directories(root + "/data");
  std::filesystem::create_directories(root + "/opt");
  std::filesystem::create_symlink("/data/tool", root + "/opt/tool");  // into a mount
  const std::string path = "/usr/local/bin:/usr/bin:/bin";
  const std::vector<std::string> mounts = {"/proc", "/dev", "/rota", "/data"};
  auto check = [&](const std::string& program, const std::string& env_path = "/usr/local/bin:/usr/bin:/bin") {
    return CheckOciProgram(root, program, env_path, mounts);
  };
  EXPECT_TRUE(check("python").ok()) << check("python").ToString();
  EXPECT_TRUE(check("/bin/python").ok()) << check("/bin/python").ToString();
  EXPECT_TRUE(check("/sbin/python").ok()) << check("/sbin/python").ToString();
  EXPECT_TRUE(check("usr/bin/python").ok()) << "(a relative path, from /)";
  EXPECT_TRUE(check("/data/train.sh").ok()) << "(in a mount: not the image's)";
  EXPECT_TRUE(check("/opt/tool").ok()) << "(a symlink into a mount)";
  EXPECT_TRUE(check("/rota/work/run.sh").ok());
  EXPECT_TRUE(check("anything", "bin:/usr/bin").ok()) << "(a relative PATH entry is not judged)";
  EXPECT_TRUE(check("").ok());
  Status s = check("pyhton");
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_EQ(s.message(), "'pyhton' is not in the image's PATH (" + path + ") in " + root);
  s = check("/nonexistent/prog");
  EXPECT_EQ(s.message(), "'/nonexistent/prog' is not in the image (" + root + ")");
  s = check("/usr/bin/python/x");
  EXPECT_EQ(s.message(), "'/usr/bin/python/x' is not in the image (" + root + ")");
  s = check("/usr/bin");
  EXPECT_EQ(s.message(), "'/usr/bin' is a directory in the image (" + root + ")");
  s = check("/etc/passwd");
  EXPECT_EQ(s.message(), "'/etc/passwd' is not an executable file in the image (" + root + ")");
  // A symlink out of the image stays in it: its /etc, never the host's.
  s = check("/escape/passwd");
  EXPECT_EQ(s.message(), "'/escape/passwd' is not an executable file in the image (" + root + ")");
  EXPECT_EQ(check("/escape/shadow").code(), StatusCode::kNotFound) << "(the host has an /etc/shadow)";
  EXPECT_EQ(check("python", "/sbin/../etc:/nope").code(), StatusCode::kNotFound);
  // The resolution itself.
  const int fd = open(root.c_str(), O_PATH | O_DIRECTORY);
  ASSERT_GE(fd, 0);
  EXPECT_EQ(ResolveInRoot(fd, "/bin/python").path, "/usr/bin/python");
  EXPECT_EQ(ResolveInRoot(fd, "/bin/python").error, 0);
  EXPECT_EQ(ResolveInRoot(fd, "/escape/../../x/y").path, "/x/y");
  EXPECT_EQ(ResolveInRoot(fd, "/escape/../../x/y").error, ENOENT);
  EXPECT_EQ(ResolveInRoot(fd, "/").path, "");
  EXPECT_EQ(ResolveInRoot(fd, "/").error, 0);
  std::filesystem::create_symlink("loop", root + "/loop");
  EXPECT_EQ(ResolveInRoot(fd, "/loop/x").error, ELOOP);
  close(fd);

  // Through the bundle: refused, unless a mount covers where it would be.
  OciTask task;
  task.id = "rota-5-0-0-0";
  task.rootfs = root;
  task.args = {"tool", "--help"};
  s = WriteOciBundle(tmp.path + "/bundle", task);
  EXPECT_EQ(s.message(), "'tool' is not in the image's PATH (/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin) in " +
                             root) << s.ToString();
  std::filesystem::create_directories(tmp.path + "/tools");
  task.mounts = {{tmp.path + "/tools", "/usr/local/bin", true}};
  EXPECT_TRUE(WriteOciBundle(tmp.path + "/bundle", task).ok());
  task.mounts.clear();
  task.env["PATH"] = "/usr/bin";
  task.args = {"python"};
  EXPECT_TRUE(WriteOciBundle(tmp.path + "/bundle", task).ok());
}

// A runtime's command that hangs is killed, with what it started, at its
// time: the agent runs them with its lock held. Before, RunQuiet waited for
// good (and the node's lease fenced every task on it).
TEST(Oci, RunQuietKillsACommandThatRunsPastItsTime) {
  EXPECT_EQ(RunQuiet({"/bin/sh", "-c", "exit 3"}), 3);
  EXPECT_EQ(RunQuiet({"/nonexistent/runtime"}), -1);
  const TempDir tmp;
  const std::string& dir = tmp.path;
  const auto began = std::chrono::steady_clock::now();
  // (Its child writes its pid, then both sleep.)
  EXPECT_EQ(RunQuiet({"/bin/sh", "-c", "sleep 30 & echo $! > " + dir + "/child; wait"}, 300), -1);
  EXPECT_LT(std::chrono::steady_clock::now() - began, std::chrono::seconds(3));
  std::ifstream in(dir + "/child");
  pid_t child = 0;
  ASSERT_TRUE(in >> child);
  // Killed with it (its process group): gone within a second, or a zombie of init's.
  bool gone = false;
  for (int i = 0; i < 100 && !gone; ++i) {
    std::ifstream stat("/proc/" + std::to_string(child) + "/stat");
    std::string pid, comm, state;
    gone = !(stat >> pid >> comm >> state) || state == "Z";
    if (!gone) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_TRUE(gone) << child;
}

TEST(Oci, RunArgvRunsTheBundleInTheForeground) {
  const auto argv = OciRunArgv("/usr/sbin/runc", "/b", "id1");
  EXPECT_EQ(argv, (std::vector<std::string>{"/usr/sbin/runc", "run", "--bundle", "/b", "id1"}));
  // crun on a hybrid cgroup host runs with cgroup2 hidden (the task's
  // private mount namespace, LaunchSpec::hide_mounts); runc needs nothing.
  const auto crun = OciRunArgv("/usr/bin/crun", "/b", "id1");
  EXPECT_EQ(crun, (std::vector<std::string>{"/usr/bin/crun", "run", "--bundle", "/b", "id1"}));
  EXPECT_EQ(OciHiddenMounts("/usr/bin/crun"), HybridCgroup2Mounts());
  EXPECT_TRUE(OciHiddenMounts("/usr/sbin/runc").empty());
}

// An agent that is not root: a user namespace whose root is the agent's
// account outside and nothing else, /sys bound rather than mounted, no
// cgroup mount, limits or path (an unprivileged runtime cannot set them).
TEST(Oci, ARootlessBundleMapsOnlyTheAgentsAccount) {
  TempDir tmp;
  std::filesystem::create_directories(tmp.path + "/rootfs");
  OciTask task;
  task.id = "rota-3-0-0-0";
  task.rootfs = tmp.path + "/rootfs";
  task.args = {"true"};
  MakeProgram(tmp.path + "/rootfs/bin/true");
  task.job_dir = tmp.path + "/job";
  task.uid = 1234;
  task.gid = 5678;
  task.additional_gids = {9};
  task.memory = 512;
  task.rootless = true;
  ASSERT_TRUE(WriteOciBundle(tmp.path + "/bundle", task).ok());
  std::ifstream in(tmp.path + "/bundle/config.json");
  const nlohmann::json c = nlohmann::json::parse(in);
  EXPECT_EQ(c["process"]["user"], (nlohmann::json{{"uid", 0}, {"gid", 0}}));
  EXPECT_EQ(c["linux"]["uidMappings"], nlohmann::json::parse(R"([{"containerID": 0, "hostID": 1234, "size": 1}])"));
  EXPECT_EQ(c["linux"]["gidMappings"], nlohmann::json::parse(R"([{"containerID": 0, "hostID": 5678, "size": 1}])"));
  bool user = false;
  for (const auto& ns : c["linux"]["namespaces"]) user = user || ns["type"] == "user";
  EXPECT_TRUE(user);
  EXPECT_FALSE(c["linux"].contains("cgroupsPath"));
  EXPECT_FALSE(c["linux"].contains("resources"));
  bool sys_bound = false, job = false;
  for (const auto& m : c["mounts"]) {
    EXPECT_NE(m["type"], "cgroup") << m.dump();
    EXPECT_NE(m["type"], "sysfs") << m.dump();
    if (m["destination"] == "/sys") sys_bound = m["source"] == "/sys" && m["options"][0] == "rbind";
    if (m["destination"] == "/dev/pts") {
      EXPECT_EQ(m["options"].dump().find("gid="), std::string::npos) << m.dump();
    }
    if (m["destination"] == "/rota") job = m["source"] == tmp.path + "/job";
  }
  EXPECT_TRUE(sys_bound) << c["mounts"].dump();
  EXPECT_TRUE(job);
}

// Where the kernel can (KernelHasRecursiveReadOnly), a read-only mount is
// read-only below its top too ("rro"): a data mount's, and a rootless
// container's /sys.
TEST(Oci, ReadOnlyMountsAreReadOnlyAllTheWayDownWhereTheKernelCan) {
  TempDir tmp;
  std::filesystem::create_directories(tmp.path + "/rootfs");
  std::filesystem::create_directories(tmp.path + "/data");
  OciTask task;
  task.id = "rota-4-0-0-0";
  task.rootfs = tmp.path + "/rootfs";
  task.args = {"true"};
  MakeProgram(tmp.path + "/rootfs/bin/true");
  task.mounts = {{tmp.path + "/data", "/data", true}, {tmp.path + "/data", "/out", false}};
  task.recursive_read_only = true;
  for (bool rootless : {false, true}) {
    task.rootless = rootless;
    ASSERT_TRUE(WriteOciBundle(tmp.path + "/bundle", task).ok());
    std::ifstream in(tmp.path + "/bundle/config.json");
    const nlohmann::json c = nlohmann::json::parse(in);
    std::map<std::string, nlohmann::json> options;
    for (const auto& m : c["mounts"]) options[m["destination"]] = m["options"];
    EXPECT_EQ(options["/data"], nlohmann::json::array({"rbind", "rro"})) << rootless;
    EXPECT_EQ(options["/out"], nlohmann::json::array({"rbind", "rw"})) << rootless;
    if (rootless) {
      EXPECT_EQ(options["/sys"], nlohmann::json::array({"rbind", "nosuid", "noexec", "nodev", "rro"}));
    }
  }
}

TEST(Oci, AStateDirectoryGoesBeforeTheCommand) {
  EXPECT_EQ(OciRunArgv("/usr/sbin/runc", "/b", "id1", "/var/lib/rota/oci"),
            (std::vector<std::string>{"/usr/sbin/runc", "--root", "/var/lib/rota/oci", "run", "--bundle", "/b", "id1"}));
  EXPECT_EQ(OciDeleteArgv("/usr/sbin/runc", "id1", "/s"),
            (std::vector<std::string>{"/usr/sbin/runc", "--root", "/s", "delete", "--force", "id1"}));
  EXPECT_EQ(OciDeleteArgv("/usr/sbin/runc", "id1"), (std::vector<std::string>{"/usr/sbin/runc", "delete", "--force", "id1"}));
  TempDir tmp;
  EXPECT_FALSE(OciContainerMayExist("/usr/sbin/runc", "id1", tmp.path));
  std::filesystem::create_directories(tmp.path + "/id1");
  EXPECT_TRUE(OciContainerMayExist("/usr/sbin/runc", "id1", tmp.path));
}

TEST(Oci, AContainerMayExistUnlessItsRuntimesStateDirectorySaysNot) {
  const std::string root = OciStateRoot("/usr/bin/crun");
  if (geteuid() == 0 && getenv("XDG_RUNTIME_DIR") == nullptr) {
    EXPECT_EQ(root, "/run/crun");
    EXPECT_EQ(OciStateRoot("/usr/sbin/runc"), "/run/runc");
  }
  EXPECT_EQ(OciStateRoot("/usr/bin/youki"), "");  // not one it knows: may exist
  if (geteuid() == 0) {
    EXPECT_EQ(OciStateDirectory("/usr/bin/crun", "/var/lib/x"), "/run/crun");  // (named, whatever XDG says)
  }
  EXPECT_TRUE(OciContainerMayExist("/usr/bin/youki", "rota-1-0-0-0"));
  // (Whether one exists is tested against a directory of the test's own,
  // AStateDirectoryGoesBeforeTheCommand: a test must not write in a real
  // runtime's /run/crun.)
}

}  // namespace
}  // namespace rota::agent
