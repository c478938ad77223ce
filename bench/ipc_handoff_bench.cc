// SPDX-License-Identifier: Apache-2.0
// Cross-process handoff latency (docs/impl/ipc.md, docs/performance.md):
// a producer sends a shareable buffer over a socketpair to a forked
// consumer, which receives it, reads its first and last element and
// releases it; timed until the producer sees the reference come back
// (hurray_diagnostics.ipc_returns). Reports the median and p90 of
// `iterations` handoffs for each size.
//   hurray_ipc_bench [iterations]
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "hurray/hurray.h"

namespace {

uint64_t returns() {
  hurray_diagnostics d = {};
  d.struct_size = sizeof d;
  if (hurray_get_diagnostics(&d) != HURRAY_OK) std::abort();
  return d.ipc_returns;
}

int consumer(int sock) {
  volatile uint8_t sink = 0;
  for (;;) {
    hurray_buffer r;
    const int32_t st = hurray_ipc_recv(sock, &r);
    if (st == HURRAY_ERR_IPC_CLOSED) return 0;
    if (st != HURRAY_OK) return 1;
    const auto *b = static_cast<const uint8_t *>(r.data);
    sink = sink + b[0] + b[r.shape[0] - 1];
    if (hurray_buffer_release(&r) != HURRAY_OK) return 1;
  }
}

void run(int64_t bytes, int iterations) {
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) std::abort();
  const pid_t child = fork();
  if (child == 0) {
    close(sv[0]);
    _exit(consumer(sv[1]));
  }
  close(sv[1]);
  hurray_buffer h;
  const int64_t shape[1] = {bytes};
  if (hurray_alloc(hurray_device{HURRAY_DEVICE_CPU, 0}, hurray_dtype{kDLUInt, 8, 1}, 1, shape,
                   HURRAY_ALLOC_SHAREABLE, &h) != HURRAY_OK) {
    std::abort();
  }
  for (int64_t i = 0; i < bytes; i += 4096) static_cast<uint8_t *>(h.data)[i] = 1;  // resident
  std::vector<double> us;
  for (int i = 0; i < iterations + 10; ++i) {
    hurray_buffer two[2];
    if (hurray_share(&h, 2, two) != HURRAY_OK) std::abort();
    const uint64_t before = returns();
    const auto t0 = std::chrono::steady_clock::now();
    if (hurray_ipc_send(sv[0], &two[0], HURRAY_IPC_ZERO_COPY_ONLY) != HURRAY_OK) std::abort();
    while (returns() == before) {
    }
    const auto t1 = std::chrono::steady_clock::now();
    h = two[1];
    if (i >= 10) us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
  }
  close(sv[0]);
  int status = 0;
  waitpid(child, &status, 0);
  (void)hurray_buffer_release(&h);
  std::sort(us.begin(), us.end());
  std::printf(
      "%10lld bytes: median %8.1f us, p90 %8.1f us (%d handoffs, send -> receive -> "
      "release -> return seen by the producer)%s\n",
      static_cast<long long>(bytes), us[us.size() / 2], us[us.size() * 9 / 10], iterations,
      status == 0 ? "" : " CONSUMER FAILED");
}

}  // namespace

int main(int argc, char **argv) {
  const int iterations = argc > 1 ? std::atoi(argv[1]) : 1000;
  for (int64_t bytes : {int64_t{4096}, int64_t{1} << 20, int64_t{256} << 20})
    run(bytes, iterations);
  return 0;
}
