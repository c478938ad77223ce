// SPDX-License-Identifier: Apache-2.0
// Buffers between processes (docs/impl/ipc.md §5): a receiver killed with
// SIGKILL gives every reference back, a dead sender leaves valid mappings,
// fan-out through a third process, and fds and mappings bounded over
// 10,000 handoffs in both processes. Each child is forked before this
// process starts its watcher thread (one thread at fork), has an alarm, and
// is waited for with a timeout.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>

#include "hurray/hurray.h"
#include "hurray_test_support.h"
#include "ipc_test_support.h"

namespace {

using namespace hurray_ipc_test;

TEST(IpcProcess, KilledReceiverGivesEveryReferenceBack) {
  constexpr int kBuffers = 1000;
  int sv[2];
  socket_pair(SOCK_STREAM, sv);
  const pid_t child = fork_child([&] {
    close(sv[0]);
    static hurray_buffer held[kBuffers];
    for (int i = 0; i < kBuffers; ++i) {
      if (hurray_ipc_recv(sv[1], &held[i]) != HURRAY_OK) return 2;
      if (static_cast<float *>(held[i].data)[0] != static_cast<float>(i)) return 3;
    }
    put_token(sv[1]);
    pause();  // holds them all until killed
    return 4;
  });
  close(sv[1]);
  const uint64_t returns = ipc_returns();
  const int maps = count_hurray_memfd_maps(), fds = count_fds();
  for (int i = 0; i < kBuffers; ++i) {
    hurray_buffer h = shareable(16);
    static_cast<float *>(h.data)[0] = static_cast<float>(i);
    ASSERT_OK(hurray_ipc_send(sv[0], &h, HURRAY_IPC_ZERO_COPY_ONLY));
  }
  ASSERT_EQ(get_token(sv[0]), 'k');
  EXPECT_EQ(ipc_returns(), returns);
  EXPECT_EQ(count_hurray_memfd_maps(), maps + kBuffers);
  const auto t0 = std::chrono::steady_clock::now();
  kill(child, SIGKILL);
  EXPECT_EQ(wait_child(child), 1000 + SIGKILL);
  EXPECT_TRUE(wait_until([&] { return ipc_returns() == returns + kBuffers; }, 1000))
      << ipc_returns() - returns << " of " << kBuffers << " returned within 1 s";
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  std::printf("all %d producer releases ran %.1f ms after SIGKILL\n", kBuffers, ms);
  EXPECT_EQ(count_hurray_memfd_maps(), maps);
  EXPECT_LE(count_fds(), fds + 1);  // + the watcher's epoll instance, if this started it
  close(sv[0]);
}

TEST(IpcProcess, DeadSenderLeavesTheMappingValid) {
  int sv[2];
  socket_pair(SOCK_SEQPACKET, sv);
  const int maps = count_memfd_maps(), fds = count_fds();
  const pid_t child = fork_child([&] {
    close(sv[1]);
    hurray_buffer h = shareable(1 << 20);
    for (int i = 0; i < (1 << 20); ++i) static_cast<float *>(h.data)[i] = static_cast<float>(i);
    return hurray_ipc_send(sv[0], &h, 0) == HURRAY_OK ? 0 : 2;  // exits holding the reference
  });
  EXPECT_EQ(wait_child(child), 0);  // gone before the message is read
  close(sv[0]);
  hurray_buffer r;
  ASSERT_OK(hurray_ipc_recv(sv[1], &r));
  const float *f = static_cast<const float *>(r.data);
  EXPECT_EQ(f[0], 0.0f);
  EXPECT_EQ(f[(1 << 20) - 1], static_cast<float>((1 << 20) - 1));
  static_cast<float *>(r.data)[5] = -1.0f;  // still writable
  hurray_buffer copies[3];
  ASSERT_OK(hurray_share(&r, 3, copies));
  for (hurray_buffer &c : copies) EXPECT_OK(hurray_buffer_release(&c));  // harmless
  EXPECT_EQ(count_memfd_maps(), maps);
  close(sv[1]);
  EXPECT_EQ(count_fds(), fds - 2);
}

TEST(IpcProcess, FanOutThroughAThirdProcess) {
  int ab[2], bc[2];
  socket_pair(SOCK_STREAM, ab);
  socket_pair(SOCK_STREAM, bc);
  // C: receives from B, checks, writes, releases.
  const pid_t c = fork_child([&] {
    close(ab[0]);
    close(ab[1]);
    close(bc[0]);
    hurray_buffer r;
    if (hurray_ipc_recv(bc[1], &r) != HURRAY_OK) return 2;
    float *f = static_cast<float *>(r.data);
    if (f[1] != 7.0f) return 3;
    f[2] = 9.0f;
    return hurray_buffer_release(&r) == HURRAY_OK ? 0 : 4;
  });
  // B: receives from A, shares, sends one share on to C, releases the other,
  // and waits until C has given its reference back.
  const pid_t b = fork_child([&] {
    close(ab[0]);
    close(bc[1]);
    hurray_buffer r, two[2];
    const uint64_t before = ipc_returns();  // inherited from the parent
    if (hurray_ipc_recv(ab[1], &r) != HURRAY_OK) return 2;
    if (hurray_share(&r, 2, two) != HURRAY_OK) return 3;
    if (hurray_ipc_send(bc[0], &two[0], HURRAY_IPC_ZERO_COPY_ONLY) != HURRAY_OK) return 4;
    if (hurray_buffer_release(&two[1]) != HURRAY_OK) return 5;
    return wait_until([&] { return ipc_returns() == before + 1; }) ? 0 : 6;
  });
  close(ab[1]);
  close(bc[0]);
  close(bc[1]);
  const uint64_t returns = ipc_returns();
  hurray_buffer h = shareable(4);
  float *mine = static_cast<float *>(h.data);
  mine[1] = 7.0f;
  hurray_buffer keep[2];
  ASSERT_OK(hurray_share(&h, 2, keep));
  ASSERT_OK(hurray_ipc_send(ab[0], &keep[0], HURRAY_IPC_ZERO_COPY_ONLY));
  EXPECT_EQ(wait_child(c), 0);
  EXPECT_EQ(wait_child(b), 0);
  EXPECT_TRUE(wait_until([&] { return ipc_returns() == returns + 1; }));
  EXPECT_EQ(mine[2], 9.0f);  // C's write, in A's pages
  ASSERT_OK(hurray_buffer_release(&keep[1]));
  close(ab[0]);
}

TEST(IpcProcess, TenThousandHandoffsLeaveFdsAndMappingsFlat) {
  constexpr int kHandoffs = 10000;
  int sv[2];
  socket_pair(SOCK_STREAM, sv);
  const pid_t child = fork_child([&] {
    close(sv[0]);
    const int fds = count_fds(), maps = count_maps(), memfds = count_memfd_maps();
    for (int i = 0; i < kHandoffs; ++i) {
      hurray_buffer r;
      if (hurray_ipc_recv(sv[1], &r) != HURRAY_OK) return 2;
      if (static_cast<int32_t *>(r.data)[0] != i) return 3;
      if (hurray_buffer_release(&r) != HURRAY_OK) return 4;
      if (!put_token(sv[1])) return 5;
    }
    int32_t delta[3] = {count_fds() - fds, count_memfd_maps() - memfds, count_maps() - maps};
    return write(sv[1], delta, sizeof delta) == sizeof delta ? 0 : 6;
  });
  close(sv[1]);
  const uint64_t returns = ipc_returns();
  // The first handoff starts the watcher thread (its stack is a mapping):
  // the baseline is taken after it.
  {
    hurray_buffer h = shareable(1);
    static_cast<int32_t *>(h.data)[0] = 0;
    ASSERT_OK(hurray_ipc_send(sv[0], &h, 0));
    ASSERT_EQ(get_token(sv[0]), 'k');
    ASSERT_TRUE(wait_until([&] { return ipc_returns() == returns + 1; }));
  }
  const int fds = count_fds(), maps = count_memfd_maps(), lines = count_maps();
  int max_fds = fds, max_maps = maps;
  for (int i = 1; i < kHandoffs; ++i) {
    hurray_buffer h = shareable(1024);  // 4 KiB
    static_cast<int32_t *>(h.data)[0] = i;
    ASSERT_OK(hurray_ipc_send(sv[0], &h, 0));
    ASSERT_EQ(get_token(sv[0]), 'k');
    if (i % 1000 == 0) {
      max_fds = std::max(max_fds, count_fds());
      max_maps = std::max(max_maps, count_memfd_maps());
    }
  }
  int32_t child_delta[3] = {-1, -1, -1};
  ASSERT_EQ(read(sv[0], child_delta, sizeof child_delta), static_cast<ssize_t>(sizeof child_delta));
  EXPECT_EQ(wait_child(child), 0);
  ASSERT_TRUE(wait_until([&] { return ipc_returns() == returns + kHandoffs; }, 30000));
  // What is alive at the end: nothing of the loop.
  EXPECT_EQ(count_fds(), fds);
  EXPECT_EQ(count_memfd_maps(), maps);
  // Each export first handles up to 16 returns already due (ipc §5): at
  // most 16 + 1 exports (2 fds, 1 mapping each) beyond the one in flight.
  EXPECT_LE(max_fds - fds, 2 * 18) << "fds grew during the loop";
  EXPECT_LE(max_maps - maps, 18) << "memfd mappings grew during the loop";
  EXPECT_EQ(child_delta[0], 0) << "receiver fds";
  EXPECT_EQ(child_delta[1], 0) << "receiver memfd mappings";
  std::printf(
      "sender: %d fds, %d memfd mappings (%d maps lines before, %d after) before and "
      "after, peak +%d fds, +%d memfd mappings; receiver: %+d fds, %+d memfd mappings, "
      "%+d maps lines\n",
      fds, maps, lines, count_maps(), max_fds - fds, max_maps - maps, child_delta[0],
      child_delta[1], child_delta[2]);
  close(sv[0]);
}

}  // namespace
