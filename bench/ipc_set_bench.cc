// SPDX-License-Identifier: Apache-2.0
// A set of tensors across processes (docs/impl/ipc.md §10): 500 tensors of
// one shareable group handed to a forked consumer, which reads element 0
// of each and releases them all; timed until the producer has every
// reference back (hurray_diagnostics.ipc_returns). Two ways, alternated
// round by round in one run: the group as one hurray_ipc_send_set, and the
// same 500 handles as 500 hurray_ipc_send calls. Reports the median time
// per tensor of each, and the fds each way puts in flight.
//   hurray_ipc_set_bench [rounds] [tensors]
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

float first(const hurray_buffer &h) {
  return *reinterpret_cast<const float *>(static_cast<const char *>(h.data) + h.byte_offset);
}

int set_consumer(int sock, size_t n) {
  std::vector<hurray_buffer> out(n);
  volatile float sink = 0;
  for (;;) {
    size_t count = 0;
    const int32_t st = hurray_ipc_recv_set(sock, out.data(), n, &count);
    if (st == HURRAY_ERR_IPC_CLOSED) return 0;
    if (st != HURRAY_OK) return 1;
    for (size_t i = 0; i < count; ++i) sink = sink + first(out[i]);
    for (size_t i = 0; i < count; ++i) {
      if (hurray_buffer_release(&out[i]) != HURRAY_OK) return 1;
    }
  }
}

int single_consumer(int sock) {
  volatile float sink = 0;
  for (;;) {
    hurray_buffer r;
    const int32_t st = hurray_ipc_recv(sock, &r);
    if (st == HURRAY_ERR_IPC_CLOSED) return 0;
    if (st != HURRAY_OK) return 1;
    sink = sink + first(r);
    if (hurray_buffer_release(&r) != HURRAY_OK) return 1;
  }
}

pid_t start(int *sock, int (*body)(int, size_t), size_t n) {
  int sv[2];
  if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv) != 0) std::abort();
  const pid_t child = fork();
  if (child == 0) {
    close(sv[0]);
    _exit(body(sv[1], n));
  }
  close(sv[1]);
  *sock = sv[0];
  return child;
}

std::vector<hurray_buffer> group(size_t n, const std::vector<hurray_tensor_desc> &descs) {
  std::vector<hurray_buffer> hs(n);
  if (hurray_alloc_group(hurray_device{HURRAY_DEVICE_CPU, 0}, n, descs.data(),
                         HURRAY_ALLOC_SHAREABLE, nullptr, hs.data(), nullptr) != HURRAY_OK) {
    std::abort();
  }
  for (size_t i = 0; i < n; ++i) {
    *reinterpret_cast<float *>(static_cast<char *>(hs[i].data) + hs[i].byte_offset) =
        static_cast<float>(i);
  }
  return hs;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace

int main(int argc, char **argv) {
  const int rounds = argc > 1 ? std::atoi(argv[1]) : 50;
  const size_t n = argc > 2 ? static_cast<size_t>(std::atoi(argv[2])) : 500;
  // Shapes of a small transformer's parameters, cycled: 64x64, 64, 256x64, 64x256.
  const int64_t shapes[4][2] = {{64, 64}, {64, 1}, {256, 64}, {64, 256}};
  std::vector<hurray_tensor_desc> descs(n);
  for (size_t i = 0; i < n; ++i) {
    const int64_t *s = shapes[i % 4];
    descs[i] = hurray_tensor_desc{hurray_dtype{kDLFloat, 32, 1}, s[1] == 1 ? 1 : 2, s, 0};
  }
  int set_sock = -1, single_sock = -1;
  const pid_t set_child = start(&set_sock, set_consumer, n);
  const pid_t single_child = start(
      &single_sock, [](int s, size_t) { return single_consumer(s); }, n);
  std::vector<double> set_us, single_us;
  for (int r = 0; r < rounds + 3; ++r) {
    {
      std::vector<hurray_buffer> hs = group(n, descs);
      const uint64_t before = returns();
      const auto t0 = std::chrono::steady_clock::now();
      if (hurray_ipc_send_set(set_sock, hs.data(), n, HURRAY_IPC_ZERO_COPY_ONLY, nullptr) !=
          HURRAY_OK) {
        std::abort();
      }
      while (returns() < before + 1) {
      }
      const auto t1 = std::chrono::steady_clock::now();
      if (r >= 3) set_us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
    }
    {
      std::vector<hurray_buffer> hs = group(n, descs);
      const uint64_t before = returns();
      const auto t0 = std::chrono::steady_clock::now();
      for (size_t i = 0; i < n; ++i) {
        if (hurray_ipc_send(single_sock, &hs[i], HURRAY_IPC_ZERO_COPY_ONLY) != HURRAY_OK) {
          std::abort();
        }
      }
      while (returns() < before + n) {
      }
      const auto t1 = std::chrono::steady_clock::now();
      if (r >= 3) single_us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count());
    }
  }
  close(set_sock);
  close(single_sock);
  int s1 = 0, s2 = 0;
  waitpid(set_child, &s1, 0);
  waitpid(single_child, &s2, 0);
  const double a = median(set_us), b = median(single_us);
  std::printf(
      "%zu tensors of one group, %d rounds alternated (medians; handoff, read, release, "
      "every reference back):\n",
      n, rounds);
  std::printf("  one hurray_ipc_send_set:      %9.1f us in all, %7.2f us per tensor, 2 fds\n", a,
              a / static_cast<double>(n));
  std::printf("  %zu hurray_ipc_send calls:   %9.1f us in all, %7.2f us per tensor, %zu fds\n", n,
              b, b / static_cast<double>(n), 2 * n);
  std::printf("  ratio set / single: %.3f%s\n", a / b,
              s1 == 0 && s2 == 0 ? "" : "  CONSUMER FAILED");
  return s1 == 0 && s2 == 0 ? 0 : 1;
}
