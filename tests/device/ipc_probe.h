// SPDX-License-Identifier: Apache-2.0
// What the GPU IPC probe commands share (ipc_probe.cc, ipc_vmm_probe.cc):
// `check` lines, the fake's control functions, waiting, descriptor edits.
#ifndef HURRAY_TESTS_DEVICE_IPC_PROBE_H_
#define HURRAY_TESTS_DEVICE_IPC_PROBE_H_

#include <dlfcn.h>
#include <fcntl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "hurray/hurray.h"

namespace ipc_probe {

inline constexpr hurray_dtype kF32{2, 32, 1};
inline int g_failures = 0;
inline int g_type = 0;

inline void check(bool ok, const char *name, const char *fmt = "", ...)
    __attribute__((format(printf, 3, 4)));
inline void check(bool ok, const char *name, const char *fmt, ...) {
  char detail[512];
  va_list args;
  va_start(args, fmt);
  std::vsnprintf(detail, sizeof detail, fmt, args);
  va_end(args);
  std::printf("check %s %s %s\n", name, ok ? "ok" : "FAILED", detail);
  std::fflush(stdout);
  if (!ok) ++g_failures;
}

inline bool is_cuda() { return g_type == HURRAY_DEVICE_CUDA; }

// The fake's control function `name`, from the library libhurray loads.
inline void *control(const char *name) {
  const char *path = std::getenv(is_cuda() ? "HURRAY_CUDA_DRIVER_PATH" : "HURRAY_HIP_LIBRARY_PATH");
  if (path == nullptr) return nullptr;
  void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) return nullptr;
  return dlsym(lib, (std::string(is_cuda() ? "fake_cuda_" : "fake_hip_") + name).c_str());
}
inline int call_count(const char *fn) {
  auto f = reinterpret_cast<int (*)(const char *)>(control("call_count"));
  return f != nullptr ? f(fn) : -1;
}
inline int64_t ipc_open_count() {
  auto f = reinterpret_cast<int64_t (*)()>(control("ipc_open_count"));
  return f != nullptr ? f() : -1;
}
inline int64_t live_allocations() {
  auto f = reinterpret_cast<int64_t (*)()>(control("live_allocations"));
  return f != nullptr ? f() : -1;
}
inline const char *free_call() { return is_cuda() ? "cuMemFree" : "hipFree"; }
inline const char *open_call() { return is_cuda() ? "cuIpcOpenMemHandle" : "hipIpcOpenMemHandle"; }
inline const char *close_call() {
  return is_cuda() ? "cuIpcCloseMemHandle" : "hipIpcCloseMemHandle";
}

inline uint64_t ipc_returns() {
  hurray_diagnostics d{};
  d.struct_size = sizeof d;
  // A failure reads as a count no test expects.
  if (hurray_get_diagnostics(&d) != HURRAY_OK) return UINT64_MAX;
  return d.ipc_returns;
}

// Waits up to 5 s for `cond`.
template <typename F>
bool wait_until(F cond) {
  for (int i = 0; i < 500; ++i) {
    if (cond()) return true;
    usleep(10 * 1000);
  }
  return cond();
}

inline bool fd_open(int fd) { return fcntl(fd, F_GETFD) != -1; }

// Open fds among the first 1024.
inline int count_fds() {
  int n = 0;
  for (int fd = 0; fd < 1024; ++fd) n += fd_open(fd) ? 1 : 0;
  return n;
}

// The fake driver's control function `name` (fake_control.h) as an Fn, or
// NULL when this fake has none.
template <typename Fn>
Fn fake_fn(const char *name) {
  return reinterpret_cast<Fn>(control(name));
}

// A counter the fake driver exports under `name`, or -1 when it has none.
inline int64_t fake_count(const char *name) {
  auto f = fake_fn<int64_t (*)()>(name);
  return f != nullptr ? f() : -1;
}

// A receiving child's first step: two handles from `sock` into *a and *b,
// checked as "child_recv"; the child exits with 1 when either failed.
inline void child_recv_two(int sock, hurray_buffer *a, hurray_buffer *b) {
  const int32_t sa = hurray_ipc_recv(sock, a);
  const int32_t sb = sa == HURRAY_OK ? hurray_ipc_recv(sock, b) : sa;
  check(sa == HURRAY_OK && sb == HURRAY_OK, "child_recv", "%s %s", hurray_status_name(sb),
        hurray_last_error());
  if (sa != HURRAY_OK || sb != HURRAY_OK) _exit(1);
}

inline int wait_child(pid_t pid) {
  int status = 0;
  while (waitpid(pid, &status, 0) < 0) {
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// Forks a receiver running `child(sv[1])` (which must _exit) over a new
// socket pair; the parent keeps sv[0]. -1 when the pair cannot be made.
template <typename Child>
pid_t fork_receiver(int sv[2], Child child) {
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) return -1;
  const pid_t pid = fork();
  if (pid == 0) {
    close(sv[0]);
    child(sv[1]);
    _exit(1);
  }
  close(sv[1]);
  return pid;
}

// Forks a receiver that takes one handle from `sock`, writes 'y' to
// `ready` when its float element 2 reads 3.0 ('n' otherwise) and holds it
// until killed. The parent keeps sv[0]; sv[1] is closed here.
inline pid_t fork_holder(int sv[2], int ready) {
  const pid_t pid = fork();
  if (pid == 0) {
    close(sv[0]);
    hurray_buffer r{};
    const int32_t st = hurray_ipc_recv(sv[1], &r);
    const char byte = st == HURRAY_OK && static_cast<const float *>(r.data)[2] == 3.0f ? 'y' : 'n';
    (void)!write(ready, &byte, 1);
    for (;;) pause();  // holds r until killed
  }
  close(sv[1]);
  return pid;
}

inline void put32(uint8_t *p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
inline void put64(uint8_t *p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}

// The GPU part of a kind-2/3/4 descriptor (ipc.md §6.1): its last 168
// bytes (UUID 0, sender 16, flags 32, handle 40, event 104).
inline uint8_t *gpu_part(hurray_ipc_message *m) { return m->bytes + m->size - 168; }

// The stream-ordered handoff (ipc_event_probe.cc): `cmd` without
// "ipc-event-"; 64 when unknown.
int run_event_command(const std::string &cmd);

// The VMM commands (ipc_vmm_probe.cc): `cmd` without "ipc-vmm-"; 64 when unknown.
int run_vmm_command(const std::string &cmd);
// The pool commands, CUDA and HIP (ipc_pool_probe.cc): `cmd` without "ipc-pool-";
// 64 when unknown.
int run_pool_command(const std::string &cmd);
// GPU handles in a set message (ipc_set_probe.cc): `cmd` without "ipc-set-";
// 64 when unknown.
int run_set_command(const std::string &cmd);
// ipc_vmm_range_probe.cc (CUDA builds): `cmd` without "ipc-vmm-range-".
int run_vmm_range_command(const std::string &cmd);
// The device identity and same-process commands (ipc_identity_probe.cc):
// `cmd` without "ipc-"; 64 when unknown.
int run_identity_command(const std::string &cmd);

}  // namespace ipc_probe

#endif  // HURRAY_TESTS_DEVICE_IPC_PROBE_H_
