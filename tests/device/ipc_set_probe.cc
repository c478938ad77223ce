// SPDX-License-Identifier: Apache-2.0
// GPU handles in a set message (docs/impl/ipc.md §10) against the fake
// drivers: the probe's `ipc-set-*` commands, run by ipc_test.cc for both
// vendors. Each command forks its receiver before any GPU call.
//
//   probe ipc-set-views TYPE      8 views into one allocation: one open in
//                                 the receiver, 8 handles, one wait on the
//                                 sender's event, the reference back once,
//                                 after the last release
//   probe ipc-set-mixed TYPE      CPU, two GPU allocations and a view: 3
//                                 regions, 2 opens, every value read
//   probe ipc-set-kill TYPE       a receiver SIGKILLed holding a set of two
//                                 GPU allocations and a CPU buffer: all back
//   probe ipc-set-invisible TYPE  the receiver cannot see the second GPU:
//                                 refused naming the entry, nothing open,
//                                 every fd closed, all references back
//   probe ipc-set-pool TYPE       two pool allocations and a view: the pool
//                                 once, one pointer import per allocation
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "fake_control.h"
#include "fake_devices.h"
#include "hurray/hurray.h"
#include "ipc_probe.h"

namespace ipc_probe {
namespace {

constexpr int64_t kElems = 64;

const char *N(const char *cuda, const char *hip) { return is_cuda() ? cuda : hip; }
const char *visible_env() { return is_cuda() ? "CUDA_VISIBLE_DEVICES" : "HIP_VISIBLE_DEVICES"; }

// kElems floats first, first + 1, ... on `ordinal`.
int32_t alloc_on(int32_t ordinal, float first, hurray_buffer *h) {
  const int64_t shape[1] = {kElems};
  const int32_t st = hurray_alloc(hurray_device{g_type, ordinal}, kF32, 1, shape, 0, h);
  if (st == HURRAY_OK) {
    for (int i = 0; i < kElems; ++i)
      static_cast<float *>(h->data)[i] = first + static_cast<float>(i);
  }
  return st;
}

// n views of 8 floats each of src (view i starts at element 8 * i),
// src consumed.
bool make_views(hurray_buffer *src, int n, hurray_buffer *out) {
  hurray_buffer shares[8]{};
  if (hurray_share(src, static_cast<uint32_t>(n), shares) != HURRAY_OK) return false;
  for (int i = 0; i < n; ++i) {
    const int64_t shape[1] = {8};
    const hurray_view_desc d{
        static_cast<uint64_t>(32 * i), 0, hurray_device{0, 0}, kF32, 1, shape, nullptr};
    if (hurray_view(&shares[i], &d, &out[i]) != HURRAY_OK) return false;
  }
  return true;
}

float at(const hurray_buffer &h, int i) {
  return reinterpret_cast<const float *>(static_cast<const char *>(h.data) + h.byte_offset)[i];
}

// The sender's side of every command: the send, the child's exit status,
// and the allocations' references coming back, `k` more than `returns`.
void send_set_ok(int sock, hurray_buffer *s, size_t n) {
  const int32_t st = hurray_ipc_send_set(sock, s, n, HURRAY_IPC_DEFAULT, nullptr);
  check(st == HURRAY_OK, "send_set", "%s %s", hurray_status_name(st), hurray_last_error());
}
void expect_child_exit(pid_t pid, int want) {
  const int code = wait_child(pid);
  check(code == want, "child", "exit %d, want %d", code, want);
}
void expect_returns(uint64_t returns, uint64_t k) {
  check(wait_until([&] { return ipc_returns() == returns + k; }), "returned", "%llu of %llu",
        static_cast<unsigned long long>(ipc_returns() - returns),
        static_cast<unsigned long long>(k));
}
// Shareable CPU memory in s[0], GPU memory on devices 0 and `second` in
// s[1] and s[2] (first elements 1 and 5).
void cpu_and_two_gpu(hurray_buffer *s, int second) {
  const int64_t shape[1] = {16};
  check(hurray_alloc(hurray_device{HURRAY_DEVICE_CPU, 0}, kF32, 1, shape, HURRAY_ALLOC_SHAREABLE,
                     &s[0]) == HURRAY_OK &&
            alloc_on(0, 1.0f, &s[1]) == HURRAY_OK && alloc_on(second, 5.0f, &s[2]) == HURRAY_OK,
        "alloc", "%s", hurray_last_error());
}
// *a shared two ways: *whole the first share, *view elements 16..19 of the second.
void share_and_view(hurray_buffer *a, hurray_buffer *whole, hurray_buffer *view) {
  hurray_buffer two[2]{};
  check(hurray_share(a, 2, two) == HURRAY_OK, "share", "");
  *whole = two[0];
  const int64_t vshape[1] = {4};
  const hurray_view_desc d{64, 0, hurray_device{0, 0}, kF32, 1, vshape, nullptr};
  check(hurray_view(&two[1], &d, view) == HURRAY_OK, "view", "%s", hurray_last_error());
}

// --- set-views ---
[[noreturn]] void views_child(int sock) {
  const int fds_before = count_fds();
  hurray_buffer r[8]{};
  size_t count = 0;
  const int32_t st = hurray_ipc_recv_set(sock, r, 8, &count);
  check(st == HURRAY_OK && count == 8, "child_recv", "%s %s", hurray_status_name(st),
        hurray_last_error());
  if (st != HURRAY_OK) _exit(1);
  check(call_count(open_call()) == 1 && ipc_open_count() == 1, "child_one_open", "%d",
        call_count(open_call()));
  // Stream ordering as for one message: one wait on the sender's event.
  check(call_count(N("cuIpcOpenEventHandle", "hipIpcOpenEventHandle")) == 1 &&
            call_count(N("cuStreamWaitEvent", "hipStreamWaitEvent")) == 1,
        "child_waits_once", "%d", call_count(N("cuStreamWaitEvent", "hipStreamWaitEvent")));
  bool ok = true;
  for (int i = 0; i < 8; ++i) {
    ok = ok && r[i].device.device_type == g_type && r[i].ndim == 1 && r[i].shape[0] == 8 &&
         at(r[i], 0) == static_cast<float>(8 * i + 1) &&
         at(r[i], 7) == static_cast<float>(8 * i + 8);
  }
  check(ok, "child_reads", "");
  reinterpret_cast<float *>(static_cast<char *>(r[3].data) + r[3].byte_offset)[0] = 42.0f;
  for (int i = 0; i < 7; ++i) (void)hurray_buffer_release(&r[i]);
  check(call_count(close_call()) == 0, "child_open_until_last", "%d", call_count(close_call()));
  (void)hurray_buffer_release(&r[7]);
  check(call_count(close_call()) == 1 && ipc_open_count() == 0, "child_closed_once", "%d",
        call_count(close_call()));
  check(count_fds() == fds_before, "child_fds_back", "%d -> %d", fds_before, count_fds());
  _exit(g_failures == 0 ? 0 : 1);
}

int cmd_views() {
  int sv[2];
  const pid_t pid = fork_receiver(sv, views_child);
  if (pid < 0) return 2;
  hurray_buffer a{}, keep{};
  check(alloc_on(0, 1.0f, &a) == HURRAY_OK, "alloc", "%s", hurray_last_error());
  hurray_buffer two[2]{};
  check(hurray_share(&a, 2, two) == HURRAY_OK, "share", "");
  keep = two[1];
  hurray_buffer v[8]{};
  check(make_views(&two[0], 8, v), "views", "%s", hurray_last_error());
  const uint64_t returns = ipc_returns();
  const int events = call_count(N("cuEventCreate", "hipEventCreateWithFlags"));
  size_t failed = 0;
  const int32_t st = hurray_ipc_send_set(sv[0], v, 8, HURRAY_IPC_DEFAULT, &failed);
  check(st == HURRAY_OK && v[0].release_fn == nullptr, "send_set", "%s %s", hurray_status_name(st),
        hurray_last_error());
  check(call_count(N("cuIpcGetMemHandle", "hipIpcGetMemHandle")) == 1 &&
            call_count(N("cuEventCreate", "hipEventCreateWithFlags")) == events + 1,
        "one_export", "handles %d", call_count(N("cuIpcGetMemHandle", "hipIpcGetMemHandle")));
  expect_child_exit(pid, 0);
  check(wait_until([&] { return ipc_returns() == returns + 1; }), "returned_once", "%llu",
        static_cast<unsigned long long>(ipc_returns() - returns));
  check(at(keep, 24) == 42.0f, "child_write_seen", "%g", at(keep, 24));
  check(call_count(free_call()) == 0, "kept", "");
  (void)hurray_buffer_release(&keep);
  check(call_count(free_call()) == 1 && live_allocations() == 0, "producer_released_once", "%d",
        call_count(free_call()));
  close(sv[0]);
  return g_failures == 0 ? 0 : 1;
}

// --- set-mixed ---
[[noreturn]] void mixed_child(int sock) {
  hurray_buffer r[4]{};
  size_t count = 0;
  const int32_t st = hurray_ipc_recv_set(sock, r, 4, &count);
  check(st == HURRAY_OK && count == 4, "child_recv", "%s %s", hurray_status_name(st),
        hurray_last_error());
  if (st != HURRAY_OK) _exit(1);
  check(r[0].device.device_type == HURRAY_DEVICE_CPU && r[1].device.device_type == g_type &&
            r[2].device.device_type == g_type && r[3].device.device_type == g_type,
        "child_devices", "");
  check(call_count(open_call()) == 2 && ipc_open_count() == 2, "child_two_opens", "%d",
        call_count(open_call()));
  check(
      at(r[0], 5) == 5.0f && at(r[1], 0) == 1.0f && at(r[2], 63) == 164.0f && at(r[3], 0) == 17.0f,
      "child_reads", "%g %g %g %g", at(r[0], 5), at(r[1], 0), at(r[2], 63), at(r[3], 0));
  for (auto &h : r) (void)hurray_buffer_release(&h);
  check(call_count(close_call()) == 2 && ipc_open_count() == 0, "child_closed", "");
  _exit(g_failures == 0 ? 0 : 1);
}

int cmd_mixed() {
  int sv[2];
  const pid_t pid = fork_receiver(sv, mixed_child);
  if (pid < 0) return 2;
  hurray_buffer s[4]{};
  const int64_t shape[1] = {16};
  check(hurray_alloc(hurray_device{HURRAY_DEVICE_CPU, 0}, kF32, 1, shape, HURRAY_ALLOC_SHAREABLE,
                     &s[0]) == HURRAY_OK,
        "cpu_alloc", "%s", hurray_last_error());
  for (int i = 0; i < 16; ++i) static_cast<float *>(s[0].data)[i] = static_cast<float>(i);
  hurray_buffer a{};
  check(alloc_on(0, 1.0f, &a) == HURRAY_OK && alloc_on(0, 101.0f, &s[2]) == HURRAY_OK, "alloc",
        "%s", hurray_last_error());
  share_and_view(&a, &s[1], &s[3]);
  const uint64_t returns = ipc_returns();
  send_set_ok(sv[0], s, 4);
  expect_child_exit(pid, 0);
  expect_returns(returns, 3);
  check(wait_until([&] { return call_count(free_call()) == 2; }) && live_allocations() == 0,
        "producer_released_once", "%d", call_count(free_call()));
  close(sv[0]);
  return g_failures == 0 ? 0 : 1;
}

// --- set-kill ---
int cmd_kill() {
  int sv[2], ready[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0 || pipe(ready) != 0) return 2;
  const pid_t pid = fork();
  if (pid == 0) {
    close(sv[0]);
    hurray_buffer r[3]{};
    size_t count = 0;
    const int32_t st = hurray_ipc_recv_set(sv[1], r, 3, &count);
    const char byte = st == HURRAY_OK && count == 3 && at(r[1], 2) == 3.0f ? 'y' : 'n';
    (void)!write(ready[1], &byte, 1);
    for (;;) pause();  // holds the set until killed
  }
  close(sv[1]);
  hurray_buffer s[3]{};
  cpu_and_two_gpu(s, 0);
  const uint64_t returns = ipc_returns();
  send_set_ok(sv[0], s, 3);
  char byte = 0;
  check(read(ready[0], &byte, 1) == 1 && byte == 'y', "child_imported", "%c", byte);
  check(call_count(free_call()) == 0, "held_by_child", "");
  kill(pid, SIGKILL);
  expect_child_exit(pid, 128 + SIGKILL);
  expect_returns(returns, 3);
  check(wait_until([&] { return call_count(free_call()) == 2; }) && live_allocations() == 0,
        "producer_released_once", "%d", call_count(free_call()));
  return g_failures == 0 ? 0 : 1;
}

// --- set-invisible ---
[[noreturn]] void invisible_child(int sock) {
  setenv(visible_env(), "0", 1);  // physical 1 is not visible here
  const int fds_before = count_fds();
  hurray_buffer r[3]{};
  size_t count = 0;
  const int32_t st = hurray_ipc_recv_set(sock, r, 3, &count);
  uint8_t u[16];
  char name[41];
  fake::physical_uuid(1, !is_cuda(), u);
  fake::uuid_string(u, name);
  check(st == HURRAY_ERR_UNSUPPORTED_DEVICE && std::strstr(hurray_last_error(), name) != nullptr &&
            std::strstr(hurray_last_error(), "set entry 2 ") != nullptr,
        "invisible_refused", "%s %s (want %s, entry 2)", hurray_status_name(st),
        hurray_last_error(), name);
  // Region 1 (entry 1, physical 0) was opened before region 2 failed: closed again.
  check(ipc_open_count() == 0 && call_count(open_call()) == call_count(close_call()),
        "nothing_left_open", "opens %d closes %d", call_count(open_call()),
        call_count(close_call()));
  check(count_fds() == fds_before, "child_fds_closed", "%d -> %d", fds_before, count_fds());
  _exit(g_failures == 0 ? 0 : 1);
}

int cmd_invisible() {
  int sv[2];
  const pid_t pid = fork_receiver(sv, invisible_child);
  if (pid < 0) return 2;
  setenv(visible_env(), "0,1", 1);
  hurray_buffer s[3]{};
  cpu_and_two_gpu(s, 1);
  const uint64_t returns = ipc_returns();
  send_set_ok(sv[0], s, 3);
  expect_child_exit(pid, 0);
  expect_returns(returns, 3);
  check(wait_until([&] { return call_count(free_call()) == 2; }) && live_allocations() == 0,
        "producer_released_once", "%d", call_count(free_call()));
  close(sv[0]);
  return g_failures == 0 ? 0 : 1;
}

// --- set-pool ---
void *g_stream = nullptr;

int32_t pool_alloc(float first, hurray_buffer *h) {
  if (g_stream == nullptr) {
    auto create = fake_fn<void *(*)(int)>("stream_create");
    g_stream = create != nullptr ? create(0) : nullptr;
  }
  const int64_t shape[1] = {kElems};
  const int32_t st = hurray_alloc_async(hurray_device{g_type, 0}, kF32, 1, shape,
                                        HURRAY_ALLOC_SHAREABLE, g_stream, h);
  if (st == HURRAY_OK) {
    for (int i = 0; i < kElems; ++i)
      static_cast<float *>(h->data)[i] = first + static_cast<float>(i);
  }
  return st;
}

[[noreturn]] void pool_child(int sock) {
  hurray_buffer r[3]{};
  size_t count = 0;
  const int32_t st = hurray_ipc_recv_set(sock, r, 3, &count);
  check(st == HURRAY_OK && count == 3, "child_recv", "%s %s", hurray_status_name(st),
        hurray_last_error());
  if (st != HURRAY_OK) _exit(1);
  check(call_count(
            N("cuMemPoolImportFromShareableHandle", "hipMemPoolImportFromShareableHandle")) == 1 &&
            call_count(N("cuMemPoolImportPointer", "hipMemPoolImportPointer")) == 2 &&
            call_count(open_call()) == 0,
        "child_pool_once", "pools %d pointers %d",
        call_count(N("cuMemPoolImportFromShareableHandle", "hipMemPoolImportFromShareableHandle")),
        call_count(N("cuMemPoolImportPointer", "hipMemPoolImportPointer")));
  check(at(r[0], 0) == 1.0f && at(r[1], 1) == 102.0f && at(r[2], 0) == 17.0f, "child_reads",
        "%g %g %g", at(r[0], 0), at(r[1], 1), at(r[2], 0));
  for (auto &h : r) (void)hurray_buffer_release(&h);
  check(call_count(N("cuMemFree", "hipFree")) == 2, "child_freed_pointers", "%d",
        call_count(N("cuMemFree", "hipFree")));
  _exit(g_failures == 0 ? 0 : 1);
}

int cmd_pool() {
  int sv[2];
  const pid_t pid = fork_receiver(sv, pool_child);
  if (pid < 0) return 2;
  hurray_buffer s[3]{}, a{};
  check(pool_alloc(1.0f, &a) == HURRAY_OK && pool_alloc(101.0f, &s[1]) == HURRAY_OK, "alloc_async",
        "%s", hurray_last_error());
  share_and_view(&a, &s[0], &s[2]);
  const uint64_t returns = ipc_returns();
  send_set_ok(sv[0], s, 3);
  expect_child_exit(pid, 0);
  expect_returns(returns, 2);
  close(sv[0]);
  return g_failures == 0 ? 0 : 1;
}

}  // namespace

int run_set_command(const std::string &cmd) {
  if (cmd == "views") return cmd_views();
  if (cmd == "mixed") return cmd_mixed();
  if (cmd == "kill") return cmd_kill();
  if (cmd == "invisible") return cmd_invisible();
  if (cmd == "pool") return cmd_pool();
  return 64;
}

}  // namespace ipc_probe
