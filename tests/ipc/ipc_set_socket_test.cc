// SPDX-License-Identifier: Apache-2.0
// Sets between processes over sockets (docs/impl/ipc.md §10.3): a group of
// 1, 8 and 500 arrives with exactly 2 fds in SCM_RIGHTS; 300 distinct
// allocations (602 fds, more than SCM_MAX_FD) cross split into records, on
// stream and seqpacket sockets; a receiver SIGKILLed while it holds a set
// gives every allocation back within 1 s, with the sender's fds and maps as
// before; recv_set's capacity and a single message consume nothing. Each
// child has an alarm and is waited for with a timeout.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <string>
#include <vector>

#include "hurray/hurray.h"
#include "hurray_test_support.h"
#include "ipc_set_support.h"

namespace {

using namespace hurray_ipc_test;

// Reads one set message with plain recvmsg: its bytes, and every fd that
// came in SCM_RIGHTS (counted per record).
bool raw_recv(int fd, std::vector<uint8_t> *bytes, std::vector<int32_t> *fds,
              std::vector<size_t> *per_record) {
  uint8_t hdr[16];
  if (recv(fd, hdr, 16, MSG_PEEK | MSG_WAITALL) != 16) return false;
  const uint32_t total =
      hdr[12] | hdr[13] << 8 | hdr[14] << 16 | static_cast<uint32_t>(hdr[15]) << 24;
  bytes->resize(total);
  size_t got = 0;
  while (got < total) {
    iovec iov{bytes->data() + got, total - got};
    union {
      cmsghdr align;
      char buf[CMSG_SPACE(sizeof(int) * 253)];
    } control;
    msghdr msg;
    std::memset(&msg, 0, sizeof msg);
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.buf;
    msg.msg_controllen = sizeof control.buf;
    const ssize_t n = recvmsg(fd, &msg, MSG_CMSG_CLOEXEC);
    if (n <= 0 || (msg.msg_flags & MSG_CTRUNC) != 0) return false;
    size_t here = 0;
    for (cmsghdr *c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
      if (c->cmsg_type != SCM_RIGHTS) continue;
      const size_t k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      for (size_t i = 0; i < k; ++i) {
        int v;
        std::memcpy(&v, CMSG_DATA(c) + i * sizeof(int), sizeof v);
        fds->push_back(v);
      }
      here += k;
    }
    if (here > 0) per_record->push_back(here);
    got += static_cast<size_t>(n);
  }
  return true;
}

TEST(IpcSetSocket, GroupOf1_8_500ArrivesWithTwoFds) {
  for (size_t n : {size_t{1}, size_t{8}, size_t{500}}) {
    SCOPED_TRACE(n);
    int sv[2];
    socket_pair(SOCK_STREAM, sv);
    const pid_t child = fork_child([&] {
      close(sv[0]);
      std::vector<uint8_t> bytes;
      std::vector<int32_t> fds;
      std::vector<size_t> records;
      if (!raw_recv(sv[1], &bytes, &fds, &records)) return 2;
      if (fds.size() != 2 || records.size() != 1) return 3;
      std::vector<hurray_buffer> out(n);
      size_t count = 0;
      if (hurray_ipc_import_set(bytes.data(), bytes.size(), fds.data(), fds.size(), out.data(), n,
                                &count) != HURRAY_OK ||
          count != n) {
        return 4;
      }
      for (size_t i = 0; i < n; ++i) {
        if (first(out[i]) != static_cast<float>(i)) return 5;
        if (hurray_buffer_release(&out[i]) != HURRAY_OK) return 6;
      }
      return 0;
    });
    close(sv[1]);
    const uint64_t returns = ipc_returns();
    std::vector<hurray_buffer> hs = shareable_group(n);
    ASSERT_OK(hurray_ipc_send_set(sv[0], hs.data(), n, HURRAY_IPC_ZERO_COPY_ONLY, nullptr));
    EXPECT_EQ(wait_child(child), 0);
    EXPECT_TRUE(wait_until([&] { return ipc_returns() == returns + 1; }));
    close(sv[0]);
  }
}

// 300 separate buffers and a 500-member group: 301 regions, 602 fds, more
// than one sendmsg can carry; the records carry at most
// HURRAY_IPC_SET_FDS_PER_RECORD each.
std::vector<hurray_buffer> big_set() {
  std::vector<hurray_buffer> hs = shareable_group(500);
  for (int i = 0; i < 300; ++i) {
    hurray_buffer h = shareable(2);
    static_cast<float *>(h.data)[0] = static_cast<float>(1000 + i);
    hs.push_back(h);
  }
  return hs;
}

void check_big(const std::vector<hurray_buffer> &out, int *rc) {
  for (size_t i = 0; i < 500; ++i) {
    if (first(out[i]) != static_cast<float>(i)) *rc = 5;
  }
  for (size_t i = 0; i < 300; ++i) {
    if (first(out[500 + i]) != static_cast<float>(1000 + i)) *rc = 6;
  }
}

TEST(IpcSetSocket, MoreFdsThanOneSendmsgAreSplitIntoRecords) {
  for (int type : {SOCK_STREAM, SOCK_SEQPACKET}) {
    SCOPED_TRACE(type);
    int sv[2];
    socket_pair(type, sv);
    // Raw: the records and their fds, then the import of all of them.
    const pid_t raw = fork_child([&] {
      close(sv[0]);
      std::vector<uint8_t> bytes;
      std::vector<int32_t> fds;
      std::vector<size_t> records;
      if (!raw_recv(sv[1], &bytes, &fds, &records)) return 2;
      if (fds.size() != 602 || records.size() != 3) return 3;
      for (size_t k : records) {
        if (k > HURRAY_IPC_SET_FDS_PER_RECORD) return 4;
      }
      std::vector<hurray_buffer> out(800);
      size_t count = 0;
      if (hurray_ipc_import_set(bytes.data(), bytes.size(), fds.data(), fds.size(), out.data(),
                                out.size(), &count) != HURRAY_OK) {
        return 7;
      }
      int rc = 0;
      check_big(out, &rc);
      for (hurray_buffer &h : out) (void)!hurray_buffer_release(&h);
      // Then the same through hurray_ipc_recv_set.
      size_t c2 = 0;
      if (hurray_ipc_recv_set(sv[1], out.data(), out.size(), &c2) != HURRAY_OK || c2 != 800) {
        return 8;
      }
      check_big(out, &rc);
      for (hurray_buffer &h : out) (void)!hurray_buffer_release(&h);
      return rc;
    });
    close(sv[1]);
    const uint64_t returns = ipc_returns();
    for (int round = 0; round < 2; ++round) {
      std::vector<hurray_buffer> hs = big_set();
      ASSERT_OK(hurray_ipc_send_set(sv[0], hs.data(), hs.size(), 0, nullptr));
    }
    EXPECT_EQ(wait_child(raw), 0);
    EXPECT_TRUE(wait_until([&] { return ipc_returns() == returns + 602; }));
    close(sv[0]);
  }
}

TEST(IpcSetSocket, KilledReceiverGivesEveryAllocationBackWithinOneSecond) {
  int sv[2];
  socket_pair(SOCK_STREAM, sv);
  const pid_t child = fork_child([&] {
    close(sv[0]);
    static hurray_buffer out[800];
    size_t count = 0;
    if (hurray_ipc_recv_set(sv[1], out, 800, &count) != HURRAY_OK || count != 800) return 2;
    put_token(sv[1]);
    pause();  // holds them all until killed
    return 4;
  });
  close(sv[1]);
  warm_watcher();
  const uint64_t returns = ipc_returns();
  const int maps = count_hurray_memfd_maps(), fds = count_fds(), all_maps = count_maps();
  {
    std::vector<hurray_buffer> hs = big_set();
    ASSERT_OK(hurray_ipc_send_set(sv[0], hs.data(), hs.size(), 0, nullptr));
  }
  ASSERT_EQ(get_token(sv[0]), 'k');
  EXPECT_EQ(ipc_returns(), returns);
  // Per allocation: its own memfd and the read end the watcher holds.
  EXPECT_EQ(count_fds(), fds + 602);
  const auto t0 = std::chrono::steady_clock::now();
  kill(child, SIGKILL);
  EXPECT_EQ(wait_child(child), 1000 + SIGKILL);
  EXPECT_TRUE(wait_until([&] { return ipc_returns() == returns + 301; }, 1000))
      << ipc_returns() - returns << " of 301 returned within 1 s";
  std::printf(
      "all 301 allocations returned %.1f ms after SIGKILL\n",
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  EXPECT_EQ(count_hurray_memfd_maps(), maps);
  EXPECT_EQ(count_fds(), fds);
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
  // Every mapping, not only the memfds': the sanitizers' allocators map
  // regions of their own as the test allocates and never unmap them, so
  // this count is only meaningful without one (the memfd count above is).
  EXPECT_EQ(count_maps(), all_maps);
#else
  (void)all_maps;
#endif
  close(sv[0]);
}

TEST(IpcSetSocket, RecvSetConsumesNothingItRefuses) {
  int sv[2];
  socket_pair(SOCK_SEQPACKET, sv);
  // A single message first: recv_set leaves it for hurray_ipc_recv.
  hurray_buffer single = shareable(4);
  ASSERT_OK(hurray_ipc_send(sv[0], &single, 0));
  std::vector<hurray_buffer> hs = shareable_group(8);
  ASSERT_OK(hurray_ipc_send_set(sv[0], hs.data(), hs.size(), 0, nullptr));
  hurray_buffer out[8];
  size_t count = 0;
  EXPECT_STATUS(hurray_ipc_recv_set(sv[1], out, 8, &count), HURRAY_ERR_IPC);
  EXPECT_NE(std::string(hurray_last_error()).find("a single handle's message"), std::string::npos)
      << hurray_last_error();
  hurray_buffer got;
  ASSERT_OK(hurray_ipc_recv(sv[1], &got));
  ASSERT_OK(hurray_buffer_release(&got));
  // Too small a capacity: the count needed, nothing consumed.
  EXPECT_STATUS(hurray_ipc_recv_set(sv[1], out, 3, &count), HURRAY_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(count, 8u);
  EXPECT_STREQ(hurray_last_error(),
               "hurray_ipc_recv_set: the set has 8 handles, out has room for 3 (*count says how "
               "many; nothing consumed)");
  EXPECT_STATUS(hurray_ipc_recv_set(sv[1], out, 8, nullptr), HURRAY_ERR_INVALID_ARGUMENT);
  EXPECT_STATUS(hurray_ipc_recv_set(sv[1], nullptr, 8, &count), HURRAY_ERR_INVALID_ARGUMENT);
  ASSERT_OK(hurray_ipc_recv_set(sv[1], out, 8, &count));
  EXPECT_EQ(count, 8u);
  for (size_t i = 0; i < 8; ++i) {
    EXPECT_EQ(first(out[i]), static_cast<float>(i));
    ASSERT_OK(hurray_buffer_release(&out[i]));
  }
  // Nothing more: non-blocking, a timeout; the peer gone, closed.
  timeval tv{0, 20000};
  setsockopt(sv[1], SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  EXPECT_STATUS(hurray_ipc_recv_set(sv[1], out, 8, &count), HURRAY_ERR_IPC_TIMEOUT);
  EXPECT_EQ(std::string(hurray_last_error()).rfind("hurray_ipc_recv_set: no message began", 0), 0u)
      << hurray_last_error();
  close(sv[0]);
  EXPECT_STATUS(hurray_ipc_recv_set(sv[1], out, 8, &count), HURRAY_ERR_IPC_CLOSED);
  close(sv[1]);
  // A socket that is none.
  size_t bad = 0;
  EXPECT_STATUS(hurray_ipc_send_set(-1, hs.data(), 1, 0, &bad), HURRAY_ERR_IPC);
  EXPECT_EQ(bad, HURRAY_BATCH_NO_INDEX);
}

}  // namespace
