// SPDX-License-Identifier: Apache-2.0
// The sender identity of GPU descriptors (ipc/sender.h, docs/impl/ipc.md
// §6.1). pid plus start time rather than a random token: a pid the kernel
// reuses comes with a later start time, so an old descriptor never names
// the new process; a forked child has a pid of its own (and is named by
// it from its first export on, with no fork handler); and nothing is kept
// that a fork would copy.
#include "ipc/sender.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>

namespace hurray::detail {
namespace {

// Field 22 (starttime) of /proc/self/stat: the fields after the command,
// which ends at the last ')', are numbered from 3.
uint64_t read_start_time() {
  const int fd = open("/proc/self/stat", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  char buf[1024];
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0) return 0;
  buf[n] = '\0';
  const char *p = std::strrchr(buf, ')');
  if (p == nullptr) return 0;
  ++p;
  for (int field = 3; field < 22; ++field) {
    while (*p == ' ') ++p;
    while (*p != ' ' && *p != '\0') ++p;
    if (*p == '\0') return 0;
  }
  while (*p == ' ') ++p;
  return std::strtoull(p, nullptr, 10);
}

std::atomic<uint32_t> g_pid{0};
std::atomic<uint64_t> g_start{0};

}  // namespace

WireSender this_sender() {
  const uint32_t pid = static_cast<uint32_t>(getpid());
  if (g_pid.load(std::memory_order_acquire) != pid) {
    // Racing first callers read the same value; the pid is stored last.
    g_start.store(read_start_time(), std::memory_order_relaxed);
    g_pid.store(pid, std::memory_order_release);
  }
  return WireSender{pid, g_start.load(std::memory_order_relaxed)};
}

bool is_this_process(const WireSender &s) {
  const WireSender me = this_sender();
  return s.pid == me.pid && s.start_time == me.start_time;
}

}  // namespace hurray::detail
