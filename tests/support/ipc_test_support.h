// SPDX-License-Identifier: Apache-2.0
// Helpers of the cross-process tests (tests/ipc/ipc_*_test.cc): counting this
// process's fds and mappings, the diagnostics' IPC counters, bounded waits,
// and forked children that cannot hang the suite.
#ifndef HURRAY_TESTS_SUPPORT_IPC_TEST_SUPPORT_H_
#define HURRAY_TESTS_SUPPORT_IPC_TEST_SUPPORT_H_

#include <dirent.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>
#include <thread>

#include "hurray/hurray.h"

namespace hurray_ipc_test {

// Entries of /proc/self/fd (the directory's own fd excluded).
inline int count_fds() {
  DIR *d = opendir("/proc/self/fd");
  if (d == nullptr) return -1;
  int n = 0;
  while (dirent *e = readdir(d)) {
    if (e->d_name[0] != '.') ++n;
  }
  closedir(d);
  return n - 1;
}

// Lines of /proc/self/maps, and those that map a memfd named by libhurray.
inline int count_maps(const char *needle = nullptr) {
  FILE *f = std::fopen("/proc/self/maps", "r");
  if (f == nullptr) return -1;
  char line[4096];
  int n = 0;
  while (std::fgets(line, sizeof line, f) != nullptr) {
    if (needle == nullptr || std::strstr(line, needle) != nullptr) ++n;
  }
  std::fclose(f);
  return n;
}
inline int count_hurray_memfd_maps() { return count_maps("memfd:hurray"); }
inline int count_memfd_maps() { return count_maps("/memfd:"); }

inline hurray_diagnostics diagnostics() {
  hurray_diagnostics d;
  std::memset(&d, 0, sizeof d);
  d.struct_size = sizeof d;
  if (hurray_get_diagnostics(&d) != HURRAY_OK) std::abort();
  return d;
}
inline uint64_t ipc_returns() { return diagnostics().ipc_returns; }
inline uint64_t ipc_copies() { return diagnostics().ipc_copies; }

// Polls `cond` every millisecond for at most `ms`; true once it holds.
inline bool wait_until(const std::function<bool()> &cond, int ms = 5000) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
  while (!cond()) {
    if (std::chrono::steady_clock::now() > end) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

// A connected socket pair; each end times out blocking reads after 30 s so
// a bug cannot hang the suite.
inline void socket_pair(int type, int fds[2]) {
  if (socketpair(AF_UNIX, type | SOCK_CLOEXEC, 0, fds) != 0) {
    std::perror("socketpair");
    std::abort();
  }
  timeval tv{30, 0};
  for (int i = 0; i < 2; ++i) setsockopt(fds[i], SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
}

// Forks a child that runs `body` and _exits with its return value; the
// child is killed by SIGALRM after `seconds`.
inline pid_t fork_child(const std::function<int()> &body, unsigned seconds = 60) {
  const pid_t pid = fork();
  if (pid == 0) {
    alarm(seconds);
    _exit(body());
  }
  return pid;
}

// Waits for `pid` at most `ms`; kills it then. Its exit status, or -1 when
// it had to be killed, or 1000 + signal when it died of a signal.
inline int wait_child(pid_t pid, int ms = 60000) {
  int status = 0;
  const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
  for (;;) {
    const pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid) break;
    if (r < 0) return -2;
    if (std::chrono::steady_clock::now() > end) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  return 1000 + WTERMSIG(status);
}

// Writes / reads one byte (a token between the test's processes).
inline bool put_token(int fd, char c = 'k') { return write(fd, &c, 1) == 1; }
inline int get_token(int fd) {
  char c;
  return read(fd, &c, 1) == 1 ? c : -1;
}

inline hurray_buffer shareable(int64_t n_floats, uint64_t flags = 0) {
  hurray_buffer h;
  std::memset(&h, 0, sizeof h);
  const int64_t shape[1] = {n_floats};
  if (hurray_alloc(hurray_device{HURRAY_DEVICE_CPU, 0}, hurray_dtype{kDLFloat, 32, 1}, 1, shape,
                   flags | HURRAY_ALLOC_SHAREABLE, &h) != HURRAY_OK) {
    std::fprintf(stderr, "shareable alloc failed: %s\n", hurray_last_error());
    std::abort();
  }
  return h;
}

}  // namespace hurray_ipc_test

#endif  // HURRAY_TESTS_SUPPORT_IPC_TEST_SUPPORT_H_

namespace hurray_ipc_test {

// Starts this process's watcher (its epoll fd and thread stack then exist
// before a test takes its baseline) and waits until it is idle.
inline void warm_watcher() {
  const uint64_t before = ipc_returns();
  hurray_buffer h = shareable(1);
  hurray_ipc_message m;
  if (hurray_ipc_export(&h, 0, &m) != HURRAY_OK || hurray_ipc_message_discard(&m) != HURRAY_OK) {
    std::abort();
  }
  if (!wait_until([&] { return ipc_returns() >= before + 1; })) std::abort();
}

}  // namespace hurray_ipc_test
