// SPDX-License-Identifier: Apache-2.0
// Device identity across processes and same-process return (docs/impl/ipc.md
// §6, §6.1) against the fake drivers: the probe's `ipc-identity-*` and
// `ipc-local-*` commands, run by identity_test.cc. Each process sets its own
// CUDA_VISIBLE_DEVICES / HIP_VISIBLE_DEVICES before its first GPU call, so
// the fakes (fake_devices.h) number the same fake GPU differently in each.
//
//   probe ipc-identity-order TYPE      sender sees "1,0", receiver "0,1": each
//                                      of two allocations opens on the
//                                      receiver's own ordinal of its GPU
//   probe ipc-identity-invisible TYPE  the receiver cannot see the GPU:
//                                      HURRAY_ERR_UNSUPPORTED_DEVICE naming
//                                      its UUID, fds closed, nothing opened
//   probe ipc-identity-vmm 2           a kind-2 import grants access
//                                      (cuMemSetAccess) to the receiver's
//                                      ordinal of the GPU
//   probe ipc-local-return TYPE        a message imported by its own sender:
//                                      no driver open, the same memory, the
//                                      producer's release once, after the
//                                      last holder
//   probe ipc-local-forward TYPE       a worker imports and sends the buffer
//                                      back (forwarding the sender's
//                                      message): the sender imports its own
//                                      memory, released once
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <string>

#include "fake_control.h"
#include "fake_devices.h"
#include "hurray/hurray.h"
#include "ipc_probe.h"

namespace ipc_probe {
namespace {

const char *visible_env() { return is_cuda() ? "CUDA_VISIBLE_DEVICES" : "HIP_VISIBLE_DEVICES"; }

int32_t alloc_on(int32_t ordinal, float first, hurray_buffer *h) {
  const int64_t shape[1] = {16};
  const int32_t st = hurray_alloc(hurray_device{g_type, ordinal}, kF32, 1, shape, 0, h);
  if (st == HURRAY_OK) {
    for (int i = 0; i < 16; ++i) static_cast<float *>(h->data)[i] = first + static_cast<float>(i);
  }
  return st;
}

// The logged calls of `fn` in this process.
int logged(const char *fn, fake_call *out, int max) {
  auto f = reinterpret_cast<int (*)(const char *, fake_call *, int)>(control("calls"));
  return f != nullptr ? f(fn, out, max) : -1;
}

// --- identity-order ---
[[noreturn]] void order_child(int sock) {
  setenv(visible_env(), "0,1", 1);  // physical 0 is ordinal 0, physical 1 ordinal 1
  hurray_buffer a{}, b{};
  child_recv_two(sock, &a, &b);
  // The sender's ordinal 0 is physical GPU 1: this process's ordinal 1.
  check(a.device.device_type == g_type && a.device.device_id == 1, "first_on_own_ordinal",
        "device_id %d (want 1)", a.device.device_id);
  check(b.device.device_id == 0, "second_on_own_ordinal", "device_id %d (want 0)",
        b.device.device_id);
  fake_call opens[4];
  const int n = logged(open_call(), opens, 4);
  check(n == 2 && opens[0].device == 1 && opens[1].device == 0, "opened_on_own_ordinals",
        "%d opens, devices %d %d", n, n > 0 ? opens[0].device : -9, n > 1 ? opens[1].device : -9);
  const float *fa = static_cast<const float *>(a.data);
  const float *fb = static_cast<const float *>(b.data);
  check(fa[0] == 100.0f && fb[0] == 200.0f, "child_reads", "%g %g", fa[0], fb[0]);
  check(hurray_buffer_release(&a) == HURRAY_OK && hurray_buffer_release(&b) == HURRAY_OK,
        "child_release", "");
  check(call_count(close_call()) == 2 && ipc_open_count() == 0, "child_closed", "");
  _exit(g_failures == 0 ? 0 : 1);
}

int cmd_order() {
  int sv[2];
  const pid_t pid = fork_receiver(sv, order_child);
  if (pid < 0) return 2;
  setenv(visible_env(), "1,0", 1);  // physical 1 is ordinal 0 here
  hurray_buffer a{}, b{};
  check(alloc_on(0, 100.0f, &a) == HURRAY_OK && alloc_on(1, 200.0f, &b) == HURRAY_OK, "alloc", "%s",
        hurray_last_error());
  const uint64_t returns = ipc_returns();
  check(hurray_ipc_send(sv[0], &a, HURRAY_IPC_DEFAULT) == HURRAY_OK &&
            hurray_ipc_send(sv[0], &b, HURRAY_IPC_DEFAULT) == HURRAY_OK,
        "send", "%s", hurray_last_error());
  close(sv[0]);  // a child still waiting for a message ends
  check(wait_child(pid) == 0, "child_ok", "");
  check(wait_until([&] { return ipc_returns() == returns + 2; }) &&
            wait_until([&] { return call_count(free_call()) == 2; }),
        "producer_released_once_each", "%d", call_count(free_call()));
  return g_failures == 0 ? 0 : 1;
}

// --- identity-invisible ---
[[noreturn]] void invisible_child(int sock) {
  setenv(visible_env(), "0", 1);  // physical 1 is not visible here
  hurray_buffer r{};
  int32_t st = hurray_ipc_recv(sock, &r);
  uint8_t u[16];
  char name[41];
  fake::physical_uuid(1, !is_cuda(), u);
  fake::uuid_string(u, name);
  check(st == HURRAY_ERR_UNSUPPORTED_DEVICE && std::strstr(hurray_last_error(), name) != nullptr,
        "invisible_refused", "%s %s (want %s)", hurray_status_name(st), hurray_last_error(), name);
  check(call_count(open_call()) == 0 && ipc_open_count() == 0, "nothing_opened", "");
  _exit(g_failures == 0 ? 0 : 1);
}

int cmd_invisible() {
  int sv[2];
  const pid_t pid = fork_receiver(sv, invisible_child);
  if (pid < 0) return 2;
  setenv(visible_env(), "1", 1);  // only physical 1, as ordinal 0
  hurray_buffer a{};
  check(alloc_on(0, 1.0f, &a) == HURRAY_OK, "alloc", "%s", hurray_last_error());
  const uint64_t returns = ipc_returns();
  check(hurray_ipc_send(sv[0], &a, HURRAY_IPC_DEFAULT) == HURRAY_OK, "send", "%s",
        hurray_last_error());
  // The refusal closed the receiver's fds: the reference comes back even
  // while the child is still alive.
  check(wait_until([&] { return ipc_returns() == returns + 1; }) &&
            wait_until([&] { return call_count(free_call()) == 1; }),
        "returned_once", "%d", call_count(free_call()));
  close(sv[0]);  // a child still waiting for a message ends
  check(wait_child(pid) == 0, "child_ok", "");
  return g_failures == 0 ? 0 : 1;
}

// The import side of the invisible case, in one process: the message's
// fds closed by the refusal (made with a descriptor naming physical GPU 1
// while this process sees only physical 0).
int cmd_invisible_fds() {
  int sv[2];
  const pid_t pid = fork_receiver(sv, [](int sock) {
    setenv(visible_env(), "0", 1);
    hurray_ipc_message m;
    std::memset(&m, 0, sizeof m);
    // Read the message by hand (one descriptor, SCM_RIGHTS fds) so the fds
    // can be checked after the refusal.
    char control_buf[CMSG_SPACE(sizeof(int) * HURRAY_IPC_MAX_FDS)];
    iovec iov{m.bytes, sizeof m.bytes};
    msghdr msg;
    std::memset(&msg, 0, sizeof msg);
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control_buf;
    msg.msg_controllen = sizeof control_buf;
    const ssize_t n = recvmsg(sock, &msg, MSG_CMSG_CLOEXEC);
    cmsghdr *c = CMSG_FIRSTHDR(&msg);
    if (n <= 0 || c == nullptr) _exit(3);
    m.size = static_cast<uint32_t>(n);
    m.nfds = static_cast<uint32_t>((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
    std::memcpy(m.fds, CMSG_DATA(c), sizeof(int) * m.nfds);
    int fds[HURRAY_IPC_MAX_FDS];
    const uint32_t nfds = m.nfds;
    std::memcpy(fds, m.fds, sizeof fds);
    hurray_buffer r{};
    const int32_t st = hurray_ipc_import(&m, &r);
    bool closed = m.nfds == 0;
    for (uint32_t i = 0; i < nfds; ++i) closed = closed && !fd_open(fds[i]);
    check(st == HURRAY_ERR_UNSUPPORTED_DEVICE && closed && nfds >= 1, "refused_fds_closed",
          "%s fds %u closed %d", hurray_status_name(st), nfds, closed ? 1 : 0);
    check(call_count(open_call()) == 0, "nothing_opened", "");
    _exit(g_failures == 0 ? 0 : 1);
  });
  if (pid < 0) return 2;
  setenv(visible_env(), "1", 1);
  hurray_buffer a{};
  check(alloc_on(0, 1.0f, &a) == HURRAY_OK, "alloc", "%s", hurray_last_error());
  const uint64_t returns = ipc_returns();
  check(hurray_ipc_send(sv[0], &a, HURRAY_IPC_DEFAULT) == HURRAY_OK, "send", "%s",
        hurray_last_error());
  close(sv[0]);  // a child still waiting for a message ends
  check(wait_child(pid) == 0, "child_ok", "");
  check(wait_until([&] { return ipc_returns() == returns + 1; }) &&
            wait_until([&] { return call_count(free_call()) == 1; }),
        "returned_once", "%d", call_count(free_call()));
  return g_failures == 0 ? 0 : 1;
}

// --- identity-vmm (CUDA) ---
int cmd_vmm() {
  int sv[2];
  const pid_t pid = fork_receiver(sv, [](int sock) {
    setenv("CUDA_VISIBLE_DEVICES", "0,1", 1);
    hurray_buffer r{};
    const int32_t st = hurray_ipc_recv(sock, &r);
    check(st == HURRAY_OK, "child_recv", "%s %s", hurray_status_name(st), hurray_last_error());
    if (st != HURRAY_OK) _exit(1);
    check(r.device.device_id == 1, "vmm_on_own_ordinal", "device_id %d (want 1)",
          r.device.device_id);
    fake_call access[2];
    const int n = logged("cuMemSetAccess", access, 2);
    check(n == 1 && reinterpret_cast<uintptr_t>(access[0].other) == 1 && access[0].device == 1,
          "access_granted_to_own_ordinal", "%d calls, location %d, context of device %d", n,
          n > 0 ? static_cast<int>(reinterpret_cast<uintptr_t>(access[0].other)) : -9,
          n > 0 ? access[0].device : -9);
    check(static_cast<const float *>(r.data)[0] == 7.0f, "child_reads", "%g",
          static_cast<const float *>(r.data)[0]);
    check(hurray_buffer_release(&r) == HURRAY_OK, "child_release", "");
    _exit(g_failures == 0 ? 0 : 1);
  });
  if (pid < 0) return 2;
  setenv("CUDA_VISIBLE_DEVICES", "1,0", 1);
  void *base = nullptr;
  const int r = reinterpret_cast<int (*)(int, uint64_t, unsigned long long, void **)>(
      control("vmm_alloc"))(0, 1 << 16, 1 /* CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR */, &base);
  check(r == 0, "vmm_alloc", "%d", r);
  if (r != 0) return 1;
  static int64_t shape[1] = {16}, strides[1] = {1};
  static std::atomic<int> released{0};  // written by the watcher thread
  hurray_buffer h;
  std::memset(&h, 0, sizeof h);
  h.version = HURRAY_BUFFER_VERSION;
  h.release_fn = [](void *p) {
    (void)reinterpret_cast<int (*)(void *, uint64_t)>(control("vmm_free"))(p, 1 << 16);
    released.fetch_add(1);
  };
  h.user_data = base;
  h.data = base;
  h.device = hurray_device{HURRAY_DEVICE_CUDA, 0};
  h.dtype = kF32;
  h.ndim = 1;
  h.shape = shape;
  h.strides = strides;
  static_cast<float *>(base)[0] = 7.0f;
  check(hurray_ipc_send(sv[0], &h, HURRAY_IPC_DEFAULT) == HURRAY_OK, "send", "%s",
        hurray_last_error());
  close(sv[0]);  // a child still waiting for a message ends
  check(wait_child(pid) == 0, "child_ok", "");
  check(wait_until([&] { return released.load() == 1; }), "producer_released_once", "%d",
        released.load());
  return g_failures == 0 ? 0 : 1;
}

// --- local-return ---
int cmd_local_return() {
  hurray_buffer a{};
  check(alloc_on(0, 5.0f, &a) == HURRAY_OK, "alloc", "%s", hurray_last_error());
  void *data = a.data;
  const uint64_t returns = ipc_returns();
  hurray_ipc_message m;
  check(hurray_ipc_export(&a, HURRAY_IPC_DEFAULT, &m) == HURRAY_OK, "export", "%s",
        hurray_last_error());
  hurray_buffer r{};
  int32_t st = hurray_ipc_import(&m, &r);
  check(st == HURRAY_OK && m.nfds == 0, "own_import_ok", "%s %s", hurray_status_name(st),
        hurray_last_error());
  if (st != HURRAY_OK) return 1;
  check(r.data == data && r.device.device_type == g_type && r.device.device_id == 0 &&
            r.ndim == 1 && r.shape[0] == 16 && static_cast<const float *>(r.data)[3] == 8.0f,
        "same_memory", "%p vs %p", r.data, data);
  check(call_count(open_call()) == 0 && ipc_open_count() == 0, "no_driver_open", "%d",
        call_count(open_call()));
  // A share of the local import: the producer's release waits for both.
  hurray_buffer s[2]{};
  check(hurray_share(&r, 2, s) == HURRAY_OK, "share", "");
  check(hurray_buffer_release(&s[0]) == HURRAY_OK, "release_first", "");
  usleep(0);
  check(call_count(free_call()) == 0 && ipc_returns() == returns, "held_while_shared", "%d",
        call_count(free_call()));
  check(hurray_buffer_release(&s[1]) == HURRAY_OK, "release_last", "");
  check(wait_until([&] { return ipc_returns() == returns + 1; }) &&
            wait_until([&] { return call_count(free_call()) == 1; }) && live_allocations() == 0,
        "released_once", "frees %d returns %llu", call_count(free_call()),
        static_cast<unsigned long long>(ipc_returns() - returns));
  // A message that names this process but describes another layout of the
  // export: refused, fds closed, the reference returned.
  hurray_buffer b{};
  check(alloc_on(0, 1.0f, &b) == HURRAY_OK, "alloc2", "");
  check(hurray_ipc_export(&b, HURRAY_IPC_DEFAULT, &m) == HURRAY_OK, "export2", "");
  put64(m.bytes + 80, 8);  // shape 8 instead of 16
  const int lifetime = m.fds[0];
  st = hurray_ipc_import(&m, &r);
  check(st == HURRAY_ERR_IPC && !fd_open(lifetime), "other_layout_refused", "%s %s",
        hurray_status_name(st), hurray_last_error());
  check(wait_until([&] { return call_count(free_call()) == 2; }) && call_count(open_call()) == 0,
        "refused_returned_once", "%d", call_count(free_call()));
  return g_failures == 0 ? 0 : 1;
}

// --- local-forward: sent to a worker and back ---
int cmd_local_forward() {
  int sv[2];
  const pid_t pid = fork_receiver(sv, [](int sock) {
    hurray_buffer r{};
    int32_t st = hurray_ipc_recv(sock, &r);
    check(st == HURRAY_OK, "worker_recv", "%s %s", hurray_status_name(st), hurray_last_error());
    if (st != HURRAY_OK) _exit(1);
    static_cast<float *>(r.data)[0] = 99.0f;
    st = hurray_ipc_send(sock, &r, HURRAY_IPC_DEFAULT);  // back to the sender
    check(st == HURRAY_OK && r.release_fn == nullptr, "worker_sends_back", "%s %s",
          hurray_status_name(st), hurray_last_error());
    // The worker's own mapping was closed by the send (it consumed r).
    check(call_count(close_call()) == 1 && ipc_open_count() == 0, "worker_closed", "%d",
          call_count(close_call()));
    // Exiting closes nothing the message needs: its fds travel in the socket.
    _exit(g_failures == 0 ? 0 : 1);
  });
  if (pid < 0) return 2;
  hurray_buffer a{};
  check(alloc_on(0, 5.0f, &a) == HURRAY_OK, "alloc", "%s", hurray_last_error());
  void *data = a.data;
  const uint64_t returns = ipc_returns();
  check(hurray_ipc_send(sv[0], &a, HURRAY_IPC_DEFAULT) == HURRAY_OK, "send", "%s",
        hurray_last_error());
  hurray_buffer back{};
  int32_t st = hurray_ipc_recv(sv[0], &back);
  check(st == HURRAY_OK && back.data == data && static_cast<const float *>(back.data)[0] == 99.0f,
        "came_back", "%s %s %p", hurray_status_name(st), hurray_last_error(), back.data);
  check(call_count(open_call()) == 0, "no_driver_open", "%d", call_count(open_call()));
  close(sv[0]);
  check(wait_child(pid) == 0, "worker_ok", "");
  check(call_count(free_call()) == 0, "held_by_the_returned_handle", "%d", call_count(free_call()));
  if (st == HURRAY_OK) check(hurray_buffer_release(&back) == HURRAY_OK, "release", "");
  check(wait_until([&] { return ipc_returns() == returns + 1; }) &&
            wait_until([&] { return call_count(free_call()) == 1; }) && live_allocations() == 0,
        "released_once", "frees %d", call_count(free_call()));
  return g_failures == 0 ? 0 : 1;
}

}  // namespace

int run_identity_command(const std::string &cmd) {
  if (cmd == "identity-order") return cmd_order();
  if (cmd == "identity-invisible") return cmd_invisible();
  if (cmd == "identity-invisible-fds") return cmd_invisible_fds();
  if (cmd == "identity-vmm" && is_cuda()) return cmd_vmm();
  if (cmd == "local-return") return cmd_local_return();
  if (cmd == "local-forward") return cmd_local_forward();
  return 64;
}

}  // namespace ipc_probe
