// SPDX-License-Identifier: Apache-2.0
// GPU memory across processes against the fake drivers (docs/impl/ipc.md §6):
// the probe's (probe.cc) `ipc-*` commands, run by ipc_test.cc with
// HURRAY_CUDA_DRIVER_PATH / HURRAY_HIP_LIBRARY_PATH pointing at a fake. Each command forks its
// receiver before any GPU call (a child forked after the driver was loaded cannot use it), prints
// `check NAME ok|FAILED ...` lines and exits 0 only when every check held.
//
//   probe ipc-roundtrip TYPE   the parent sends an allocation and a share of
//                              it; the child imports both, reads the parent's
//                              values and writes one; the producer's release
//                              runs once, after the parent's own share too
//   probe ipc-kill TYPE        the child imports and is SIGKILLed holding it
//   probe ipc-malformed TYPE   kind-3/4 descriptors with one field wrong
//   probe ipc-refusals TYPE    the driver's refusal of one's own handle,
//                              stream-ordered and pinned memory
//   probe ipc-identity-*, ipc-local-*  device UUIDs and same-process
//                              return, ipc_identity_probe.cc
//   probe ipc-event-* TYPE     the stream-ordered handoff (IPC events),
//                              ipc_event_probe.cc
//   probe ipc-vmm-* 2          CUDA VMM allocations as POSIX fds (kind 2),
//                              ipc_vmm_probe.cc
//   probe ipc-pool-* TYPE      CUDA and HIP pool memory (kinds 5 and 6),
//                              ipc_pool_probe.cc
//   probe ipc-set-* TYPE       GPU handles in a set message (ipc.md §10),
//                              ipc_set_probe.cc
#include <dlfcn.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "fake_control.h"
#include "hurray/hurray.h"
#include "ipc_probe.h"

namespace ipc_probe {
namespace {

int32_t alloc(hurray_buffer *h, int64_t n = 16) {
  const int64_t shape[1] = {n};
  return hurray_alloc(hurray_device{g_type, 0}, kF32, 1, shape, 0, h);
}

// The child of roundtrip: receives two handles, checks and writes, releases.
[[noreturn]] void roundtrip_child(int sock) {
  hurray_buffer a{}, b{};
  child_recv_two(sock, &a, &b);
  check(a.device.device_type == g_type && a.ndim == 1 && a.shape[0] == 16, "child_layout", "");
  check(call_count(open_call()) == 2 && ipc_open_count() == 2, "child_opened", "%d",
        call_count(open_call()));
  const float *fa = static_cast<const float *>(a.data);
  const float *fb = static_cast<const float *>(b.data);
  check(fa[0] == 1.0f && fa[15] == 16.0f, "child_reads", "%g %g", fa[0], fa[15]);
  check(fb[3] == 4.0f, "child_reads_share", "%g", fb[3]);
  static_cast<float *>(a.data)[1] = 42.0f;  // seen by the parent
  check(hurray_buffer_release(&a) == HURRAY_OK && hurray_buffer_release(&b) == HURRAY_OK,
        "child_release", "");
  check(call_count(close_call()) == 2 && ipc_open_count() == 0, "child_closed", "%d",
        call_count(close_call()));
  check(call_count(free_call()) == 0, "child_never_frees", "%d", call_count(free_call()));
  _exit(g_failures == 0 ? 0 : 1);
}

int cmd_roundtrip() {
  int sv[2];
  const pid_t pid = fork_receiver(sv, roundtrip_child);
  if (pid < 0) return 2;
  hurray_buffer a{}, shares[3]{};
  int32_t st = alloc(&a);
  check(st == HURRAY_OK, "alloc", "%s", hurray_last_error());
  if (st != HURRAY_OK) return 1;
  for (int i = 0; i < 16; ++i) static_cast<float *>(a.data)[i] = static_cast<float>(i + 1);
  // hurray_share consumes `a`: three references to one allocation.
  check(hurray_share(&a, 3, shares) == HURRAY_OK, "share", "");
  hurray_buffer &h = shares[0], &s = shares[1], &keep = shares[2];
  const uint64_t returns = ipc_returns();
  const int syncs = call_count(is_cuda() ? "cuCtxSynchronize" : "hipDeviceSynchronize");
  st = hurray_ipc_send(sv[0], &h, HURRAY_IPC_DEFAULT);
  check(st == HURRAY_OK && h.release_fn == nullptr, "send", "%s %s", hurray_status_name(st),
        hurray_last_error());
  st = hurray_ipc_send(sv[0], &s, HURRAY_IPC_ZERO_COPY_ONLY);
  check(st == HURRAY_OK, "send_share", "%s %s", hurray_status_name(st), hurray_last_error());
  // No host wait: each export records an IPC event instead (ipc §6).
  check(call_count(is_cuda() ? "cuCtxSynchronize" : "hipDeviceSynchronize") == syncs,
        "export_does_not_synchronise", "");
  shutdown(sv[0], SHUT_WR);  // a child still waiting for a message ends
  const int code = wait_child(pid);
  check(code == 0, "child", "exit %d", code);
  check(wait_until([&] { return ipc_returns() == returns + 2; }), "returned", "%llu",
        static_cast<unsigned long long>(ipc_returns() - returns));
  check(call_count(free_call()) == 0, "kept_by_local_share", "");
  check(static_cast<const float *>(keep.data)[1] == 42.0f, "child_write_seen", "%g",
        static_cast<const float *>(keep.data)[1]);
  check(hurray_buffer_release(&keep) == HURRAY_OK, "release_keep", "");
  check(call_count(free_call()) == 1 && live_allocations() == 0, "producer_released_once", "%d",
        call_count(free_call()));
  close(sv[0]);
  return g_failures == 0 ? 0 : 1;
}

int cmd_kill() {
  int sv[2], ready[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0 || pipe(ready) != 0) return 2;
  const pid_t pid = fork_holder(sv, ready[1]);
  hurray_buffer h{};
  if (alloc(&h) != HURRAY_OK) return 1;
  for (int i = 0; i < 16; ++i) static_cast<float *>(h.data)[i] = static_cast<float>(i + 1);
  const uint64_t returns = ipc_returns();
  check(hurray_ipc_send(sv[0], &h, HURRAY_IPC_DEFAULT) == HURRAY_OK, "send", "%s",
        hurray_last_error());
  char byte = 0;
  check(read(ready[0], &byte, 1) == 1 && byte == 'y', "child_imported", "%c", byte);
  check(call_count(free_call()) == 0, "held_by_child", "");
  kill(pid, SIGKILL);
  check(wait_child(pid) == 128 + SIGKILL, "killed", "");
  check(wait_until([&] { return ipc_returns() == returns + 1; }), "returned", "");
  check(wait_until([&] { return call_count(free_call()) == 1; }) && live_allocations() == 0,
        "producer_released_once", "%d", call_count(free_call()));
  return g_failures == 0 ? 0 : 1;
}

int cmd_malformed() {
  struct Case {
    const char *what;
    int32_t status;
    void (*edit)(hurray_ipc_message *m);
  };
  const Case cases[] = {
      {"truncated handle", HURRAY_ERR_IPC,
       [](hurray_ipc_message *m) {
         m->size -= 1;
         put32(m->bytes + 12, m->size);
       }},
      {"kind-1 size", HURRAY_ERR_IPC,
       [](hurray_ipc_message *m) {
         m->size -= 64;
         put32(m->bytes + 12, m->size);
       }},
      {"kind 2 with one fd", HURRAY_ERR_IPC,
       [](hurray_ipc_message *m) { put32(m->bytes + 16, 2); }},
      {"two fds", HURRAY_ERR_IPC,
       [](hurray_ipc_message *m) {
         m->fds[1] = dup(0);
         m->nfds = 2;
       }},
      {"descriptor nfds", HURRAY_ERR_IPC, [](hurray_ipc_message *m) { put32(m->bytes + 20, 2); }},
      {"CPU device", HURRAY_ERR_IPC, [](hurray_ipc_message *m) { put32(m->bytes + 32, 1); }},
      {"other vendor", HURRAY_ERR_IPC,
       [](hurray_ipc_message *m) { put32(m->bytes + 16, m->bytes[16] == 3 ? 4 : 3); }},
      {"negative ordinal", HURRAY_ERR_IPC,
       [](hurray_ipc_message *m) { put32(m->bytes + 36, 0xffffffffu); }},
      {"unknown GPU UUID", HURRAY_ERR_UNSUPPORTED_DEVICE,
       [](hurray_ipc_message *m) { gpu_part(m)[3] ^= 0xff; }},
      {"no GPU UUID", HURRAY_ERR_IPC,
       [](hurray_ipc_message *m) { std::memset(gpu_part(m), 0, 16); }},
      {"sender pid 0", HURRAY_ERR_IPC, [](hurray_ipc_message *m) { put32(gpu_part(m) + 16, 0); }},
      {"sender reserved word", HURRAY_ERR_IPC,
       [](hurray_ipc_message *m) { put32(gpu_part(m) + 20, 1); }},
      {"event flagged, its handle zero", HURRAY_ERR_IPC,
       [](hurray_ipc_message *m) { std::memset(gpu_part(m) + 104, 0, 64); }},
      {"reserved GPU flag", HURRAY_ERR_IPC,
       [](hurray_ipc_message *m) { put64(gpu_part(m) + 32, 4); }},
      {"event bytes without the flag", HURRAY_ERR_IPC,
       [](hurray_ipc_message *m) { put64(gpu_part(m) + 32, 0); }},
      {"wire version 1", HURRAY_ERR_UNSUPPORTED_VERSION,
       [](hurray_ipc_message *m) { put32(m->bytes + 4, 1); }},
      {"region offset", HURRAY_ERR_IPC, [](hurray_ipc_message *m) { put64(m->bytes + 64, 256); }},
      {"elements beyond the allocation", HURRAY_ERR_IPC,
       [](hurray_ipc_message *m) { put64(m->bytes + 80, 1u << 20); }},
      {"data offset beyond", HURRAY_ERR_IPC,
       [](hurray_ipc_message *m) { put64(m->bytes + 56, 1u << 20); }},
      {"lifetime fd not a pipe", HURRAY_ERR_IPC,
       [](hurray_ipc_message *m) {
         close(m->fds[0]);
         m->fds[0] = open("/dev/null", O_WRONLY | O_CLOEXEC);
       }},
      {"handle garbage", HURRAY_ERR_DEVICE,
       [](hurray_ipc_message *m) { std::memset(gpu_part(m) + 40, 0x11, 64); }},
      {"own handle from another sender", HURRAY_ERR_DEVICE, [](hurray_ipc_message *) {}},
  };
  for (const Case &c : cases) {
    hurray_buffer h{};
    if (alloc(&h) != HURRAY_OK) return 1;
    hurray_ipc_message m;
    int32_t st = hurray_ipc_export(&h, HURRAY_IPC_DEFAULT, &m);
    if (st != HURRAY_OK) {
      check(false, "export", "%s", hurray_last_error());
      return 1;
    }
    const uint64_t returns = ipc_returns();
    // Named as another process's message, so that the import goes to the
    // driver (this process's own would come back as a share, ipc §6).
    put32(gpu_part(&m) + 16, 1);
    c.edit(&m);
    int fds[HURRAY_IPC_MAX_FDS];
    const uint32_t n = m.nfds;
    for (uint32_t i = 0; i < n; ++i) fds[i] = m.fds[i];
    hurray_buffer r;
    std::memset(&r, 0x5a, sizeof r);
    st = hurray_ipc_import(&m, &r);
    bool closed = m.nfds == 0;
    for (uint32_t i = 0; i < n; ++i) closed = closed && !fd_open(fds[i]);
    check(st == c.status && closed && reinterpret_cast<const uint8_t *>(&r)[0] == 0x5a, c.what,
          "%s (%s) fds closed %d", hurray_status_name(st), hurray_last_error(), closed ? 1 : 0);
    check(wait_until([&] { return ipc_returns() == returns + 1; }), "returned", "%s", c.what);
  }
  check(wait_until([&] { return live_allocations() == 0; }) && ipc_open_count() == 0,
        "nothing_left", "%lld", static_cast<long long>(live_allocations()));
  return g_failures == 0 ? 0 : 1;
}

int cmd_refusals() {
  // A handle of this very process, named as another's (so the import does
  // not recognise it as its own, ipc §6): the driver refuses to open it.
  hurray_buffer h{};
  if (alloc(&h) != HURRAY_OK) return 1;
  hurray_ipc_message m;
  check(hurray_ipc_export(&h, HURRAY_IPC_DEFAULT, &m) == HURRAY_OK, "export", "%s",
        hurray_last_error());
  put32(gpu_part(&m) + 16, 1);
  const uint64_t returns = ipc_returns();
  const int lifetime = m.fds[0];
  hurray_buffer r{};
  int32_t st = hurray_ipc_import(&m, &r);
  check(st == HURRAY_ERR_DEVICE && std::strstr(hurray_last_error(), open_call()) != nullptr &&
            !fd_open(lifetime),
        "driver_refuses_own_handle", "%s %s", hurray_status_name(st), hurray_last_error());
  check(wait_until([&] { return ipc_returns() == returns + 1; }) &&
            wait_until([&] { return call_count(free_call()) == 1; }),
        "own_process_returned", "");

  // Stream-ordered (pool) memory: refused, nothing consumed.
  void *stream = reinterpret_cast<void *(*)(int)>(control("stream_create"))(0);
  const int64_t shape[1] = {16};
  hurray_buffer p{};
  st = hurray_alloc_async(hurray_device{g_type, 0}, kF32, 1, shape, 0, stream, &p);
  check(st == HURRAY_OK, "alloc_async", "%s", hurray_last_error());
  st = hurray_ipc_export(&p, HURRAY_IPC_DEFAULT, &m);
  check(st == HURRAY_ERR_UNSUPPORTED_DEVICE &&
            std::strstr(hurray_last_error(), "stream-ordered") != nullptr &&
            p.release_fn != nullptr,
        "stream_ordered_refused", "%s %s", hurray_status_name(st), hurray_last_error());
  hurray_buffer ps{};
  check(hurray_share(&p, 1, &ps) == HURRAY_OK, "share_async", "");
  st = hurray_ipc_export(&ps, HURRAY_IPC_DEFAULT, &m);  // the driver refuses pool memory
  check(st == HURRAY_ERR_UNSUPPORTED_DEVICE && ps.release_fn != nullptr, "pool_share_refused",
        "%s %s", hurray_status_name(st), hurray_last_error());
  (void)hurray_buffer_release(&ps);
  (void)hurray_buffer_release(&p);

  // Pinned host memory: not device memory, refused.
  hurray_buffer q{};
  st = hurray_alloc(hurray_device{is_cuda() ? HURRAY_DEVICE_CUDA_HOST : HURRAY_DEVICE_ROCM_HOST, 0},
                    kF32, 1, shape, 0, &q);
  check(st == HURRAY_OK, "alloc_pinned", "%s", hurray_last_error());
  st = hurray_ipc_export(&q, HURRAY_IPC_DEFAULT, &m);
  check(st == HURRAY_ERR_UNSUPPORTED_DEVICE && q.release_fn != nullptr, "pinned_refused", "%s %s",
        hurray_status_name(st), hurray_last_error());
  (void)hurray_buffer_release(&q);
  return g_failures == 0 ? 0 : 1;
}

}  // namespace
}  // namespace ipc_probe

// The command `cmd` (without "ipc-") on device type `type`; 64 for an
// unknown command or type.
int run_ipc_command(const std::string &cmd, int type) {
  using namespace ipc_probe;
  g_type = type;
  if (g_type != HURRAY_DEVICE_CUDA && g_type != HURRAY_DEVICE_ROCM) return 64;
  if (cmd == "roundtrip") return cmd_roundtrip();
  if (cmd == "kill") return cmd_kill();
  if (cmd == "malformed") return cmd_malformed();
  if (cmd == "refusals") return cmd_refusals();
  if (cmd.rfind("vmm-", 0) == 0 && is_cuda()) return run_vmm_command(cmd.substr(4));
  if (cmd.rfind("pool-", 0) == 0) return run_pool_command(cmd.substr(5));
  if (cmd.rfind("set-", 0) == 0) return run_set_command(cmd.substr(4));
  if (cmd.rfind("event-", 0) == 0) {
    const int rc = run_event_command(cmd.substr(6));
    if (rc != 64) return rc;
  }
  if (cmd.rfind("identity-", 0) == 0 || cmd.rfind("local-", 0) == 0) {
    const int rc = run_identity_command(cmd);
    if (rc != 64) return rc;
  }
  std::fprintf(stderr, "unknown command 'ipc-%s'\n", cmd.c_str());
  return 64;
}
