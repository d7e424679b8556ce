#include "agent/device_filter.h"

#include <fcntl.h>
#include <linux/bpf.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace rota::agent {
namespace {

bpf_insn Insn(uint8_t code, uint8_t dst, uint8_t src, int16_t off, int32_t imm) {
  bpf_insn i{};
  i.code = code;
  i.dst_reg = dst & 0xf;
  i.src_reg = src & 0xf;
  i.off = off;
  i.imm = imm;
  return i;
}

long Bpf(int cmd, bpf_attr* attr) { return syscall(SYS_bpf, cmd, attr, sizeof(*attr)); }

}  // namespace

std::vector<CharDevice> CharDevicesOf(const std::vector<std::string>& rules) {
  std::vector<CharDevice> out;
  for (const std::string& r : rules) {
    unsigned major = 0, minor = 0;
    if (std::sscanf(r.c_str(), "c %u:%u", &major, &minor) == 2) out.push_back({major, minor});
  }
  return out;
}

Status AttachDeviceFilter(const std::string& cgroup_dir, const std::vector<CharDevice>& deny) {
  if (deny.empty()) return Status::Ok();  // nothing to deny (and the verifier refuses a dead deny block)
  // ctx is struct bpf_cgroup_dev_ctx { u32 access_type (access << 16 | type); u32 major; u32 minor; }.
  std::vector<bpf_insn> prog;
  prog.push_back(Insn(BPF_LDX | BPF_W | BPF_MEM, 2, 1, 0, 0));        // r2 = ctx->access_type
  prog.push_back(Insn(BPF_ALU | BPF_AND | BPF_K, 2, 0, 0, 0xffff));    // r2 = the device type
  prog.push_back(Insn(BPF_LDX | BPF_W | BPF_MEM, 3, 1, 4, 0));        // r3 = ctx->major
  prog.push_back(Insn(BPF_LDX | BPF_W | BPF_MEM, 4, 1, 8, 0));        // r4 = ctx->minor
  // Not a character device: allowed (jump over the rules, 3 each).
  const auto rules = static_cast<int16_t>(3 * deny.size());
  prog.push_back(Insn(BPF_JMP | BPF_JNE | BPF_K, 2, 0, rules, BPF_DEVCG_DEV_CHAR));
  for (size_t i = 0; i < deny.size(); ++i) {
    // The denied block sits after the allow (two instructions) past the rules.
    const auto to_deny = static_cast<int16_t>(3 * (deny.size() - i - 1) + 2);
    prog.push_back(Insn(BPF_JMP | BPF_JNE | BPF_K, 3, 0, 2, static_cast<int32_t>(deny[i].major)));
    prog.push_back(Insn(BPF_JMP | BPF_JNE | BPF_K, 4, 0, 1, static_cast<int32_t>(deny[i].minor)));
    prog.push_back(Insn(BPF_JMP | BPF_JA, 0, 0, to_deny, 0));
  }
  prog.push_back(Insn(BPF_ALU64 | BPF_MOV | BPF_K, 0, 0, 0, 1));  // allow
  prog.push_back(Insn(BPF_JMP | BPF_EXIT, 0, 0, 0, 0));
  prog.push_back(Insn(BPF_ALU64 | BPF_MOV | BPF_K, 0, 0, 0, 0));  // deny
  prog.push_back(Insn(BPF_JMP | BPF_EXIT, 0, 0, 0, 0));

  static const char kLicense[] = "Apache-2.0";
  bpf_attr load{};
  load.prog_type = BPF_PROG_TYPE_CGROUP_DEVICE;
  load.insns = reinterpret_cast<uint64_t>(prog.data());
  load.insn_cnt = static_cast<uint32_t>(prog.size());
  load.license = reinterpret_cast<uint64_t>(kLicense);
  const int prog_fd = static_cast<int>(Bpf(BPF_PROG_LOAD, &load));
  if (prog_fd < 0) return UnavailableError(std::string("cannot load the device filter: ") + std::strerror(errno));
  const int cg = open(cgroup_dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (cg < 0) {
    const int err = errno;
    close(prog_fd);
    return UnavailableError("cgroup " + cgroup_dir + ": " + std::strerror(err));
  }
  bpf_attr attach{};
  attach.target_fd = static_cast<uint32_t>(cg);
  attach.attach_bpf_fd = static_cast<uint32_t>(prog_fd);
  attach.attach_type = BPF_CGROUP_DEVICE;
  attach.attach_flags = BPF_F_ALLOW_MULTI;  // beside whatever the host's manager attached
  const long rc = Bpf(BPF_PROG_ATTACH, &attach);
  const int err = errno;
  close(cg);
  close(prog_fd);  // the attachment holds the program
  if (rc != 0) return UnavailableError("cannot attach the device filter to " + cgroup_dir + ": " + std::strerror(err));
  return Status::Ok();
}

}  // namespace rota::agent
