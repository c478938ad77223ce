// SPDX-License-Identifier: Apache-2.0
// Sets under adverse conditions (docs/impl/ipc.md §10, §10.3; review of
// issue 28): a receiver whose RLIMIT_NOFILE cannot take the set's fds, a
// peer that closes after the first record of a split message (stream and
// seqpacket), checking mode with one tracked handle named twice, a set
// received and then forked, and a region mixing read-only and writable
// views. Each checks the fds and mappings come back and every allocation's
// reference returns exactly once.
#include <gtest/gtest.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <string>
#include <vector>

#include "hurray/hurray.h"
#include "hurray_test_support.h"
#include "ipc_set_support.h"

namespace {

using namespace hurray_ipc_test;

uint64_t double_releases() {
  hurray_check_state s;
  std::memset(&s, 0, sizeof s);
  s.struct_size = sizeof s;
  if (hurray_check_get_state(&s) != HURRAY_OK) std::abort();
  return s.double_releases;
}

std::vector<hurray_buffer> separate(size_t n) {
  std::vector<hurray_buffer> hs;
  for (size_t i = 0; i < n; ++i) {
    hurray_buffer h = shareable(2);
    static_cast<float *>(h.data)[0] = static_cast<float>(i);
    hs.push_back(h);
  }
  return hs;
}

// The receiver's RLIMIT_NOFILE leaves room for one fd of the eight the set
// brings: the kernel installs what it can and sets MSG_CTRUNC; recv_set
// refuses, closes what came, and every allocation returns while the
// receiver still runs.
TEST(IpcSetAttack, ReceiverWithTooFewFdsRefusesAndEveryAllocationReturns) {
  warm_watcher();
  int sv[2], tok[2], back[2];
  socket_pair(SOCK_STREAM, sv);
  ASSERT_EQ(pipe(tok), 0);
  ASSERT_EQ(pipe(back), 0);
  const pid_t child = fork_child([&] {
    close(sv[0]);
    close(tok[1]);
    close(back[0]);
    // The lowest free fd number and one more: room for exactly one.
    const int probe = dup(0);
    close(probe);
    rlimit rl{static_cast<rlim_t>(probe + 1), static_cast<rlim_t>(probe + 1)};
    getrlimit(RLIMIT_NOFILE, &rl);
    rl.rlim_cur = static_cast<rlim_t>(probe + 1);
    if (setrlimit(RLIMIT_NOFILE, &rl) != 0) return 2;
    const int fds_before = count_fds();
    hurray_buffer out[4];
    size_t count = 0;
    const int32_t st = hurray_ipc_recv_set(sv[1], out, 4, &count);
    int rc = 0;
    if (st != HURRAY_ERR_IPC) rc = 3;
    if (rc == 0 && std::string(hurray_last_error()).find("RLIMIT_NOFILE") == std::string::npos) {
      rc = 4;
    }
    if (rc == 0 && count_fds() != fds_before) rc = 5;
    put_token(back[1]);
    get_token(tok[0]);  // hold on until the parent saw the returns
    return rc;
  });
  close(sv[1]);
  close(tok[0]);
  close(back[1]);
  const uint64_t returns = ipc_returns();
  std::vector<hurray_buffer> hs = separate(4);
  ASSERT_OK(hurray_ipc_send_set(sv[0], hs.data(), hs.size(), 0, nullptr));
  EXPECT_EQ(get_token(back[0]), 'k');
  // The receiver is alive: the references came back because it closed
  // every fd that came.
  EXPECT_TRUE(wait_until([&] { return ipc_returns() == returns + 4; }, 2000))
      << ipc_returns() - returns;
  put_token(tok[1]);
  EXPECT_EQ(wait_child(child), 0);
  close(sv[0]);
  close(tok[1]);
  close(back[0]);
}

// A 300-buffer set (600 fds: 3 records) of which only the first record is
// written before the peer closes. recv_set refuses it, closes the fds of
// the record that came, and once the message is discarded every
// allocation returns.
void peer_closes_after_first_record(int type) {
  warm_watcher();
  const int fds_before = count_fds();
  int sv[2];
  socket_pair(type, sv);
  const uint64_t returns = ipc_returns();
  std::vector<hurray_buffer> hs = separate(300);
  hurray_ipc_set_message *m = nullptr;
  ASSERT_OK(hurray_ipc_export_set(hs.data(), hs.size(), 0, &m, nullptr));
  const uint8_t *bytes;
  size_t size, nfds;
  const int32_t *fds;
  ASSERT_OK(hurray_ipc_set_message_parts(m, &bytes, &size, &fds, &nfds));
  ASSERT_EQ(nfds, 600u);
  // The first of 3 records as hurray_ipc_send_set cuts them.
  const size_t b1 = size / 3, f1 = nfds / 3;
  union {
    cmsghdr align;
    char buf[CMSG_SPACE(sizeof(int) * 253)];
  } control;
  std::memset(&control, 0, sizeof control);
  iovec iov{const_cast<uint8_t *>(bytes), b1};
  msghdr msg;
  std::memset(&msg, 0, sizeof msg);
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control.buf;
  msg.msg_controllen = CMSG_SPACE(sizeof(int) * f1);
  cmsghdr *c = CMSG_FIRSTHDR(&msg);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int) * f1);
  std::memcpy(CMSG_DATA(c), fds, sizeof(int) * f1);
  ASSERT_EQ(sendmsg(sv[0], &msg, 0), static_cast<ssize_t>(b1));
  close(sv[0]);
  hurray_buffer out[300];
  size_t count = 0;
  EXPECT_STATUS(hurray_ipc_recv_set(sv[1], out, 300, &count), HURRAY_ERR_IPC);
  EXPECT_NE(std::string(hurray_last_error()).find("ended inside a set message"), std::string::npos)
      << hurray_last_error();
  close(sv[1]);
  ASSERT_OK(hurray_ipc_set_message_discard(m));
  EXPECT_TRUE(wait_until([&] { return ipc_returns() == returns + 300; }))
      << ipc_returns() - returns;
  EXPECT_EQ(count_fds(), fds_before);
}

TEST(IpcSetAttack, StreamPeerClosingAfterFirstRecordLeavesNothing) {
  peer_closes_after_first_record(SOCK_STREAM);
}

TEST(IpcSetAttack, SeqpacketPeerClosingAfterFirstRecordLeavesNothing) {
  peer_closes_after_first_record(SOCK_SEQPACKET);
}

// Checking mode: one tracked handle named twice in a set is the second
// use it is; the call fails at index 1 and consumes nothing (the first
// element is live again and released once).
TEST(IpcSetAttack, CheckingModeRefusesOneTrackedHandleTwice) {
  ASSERT_OK(hurray_check_enable(HURRAY_CHECK_TRACK));
  const int maps = count_hurray_memfd_maps();
  hurray_buffer h = shareable(4);
  hurray_buffer srcs[2] = {h, h};
  hurray_ipc_set_message *m = nullptr;
  size_t bad = 0;
  EXPECT_STATUS(hurray_ipc_export_set(srcs, 2, 0, &m, &bad), HURRAY_ERR_RELEASED);
  EXPECT_EQ(bad, 1u);
  EXPECT_EQ(m, nullptr);
  ASSERT_OK(hurray_buffer_release(&srcs[0]));
  EXPECT_EQ(count_hurray_memfd_maps(), maps);
  ASSERT_OK(hurray_check_enable(0));
}

// Checking mode: the handles of an imported set are tracked; each is
// released once, and a second release of one is caught without touching
// the others' memory.
TEST(IpcSetAttack, CheckingModeTracksImportedSet) {
  warm_watcher();
  ASSERT_OK(hurray_check_enable(HURRAY_CHECK_TRACK));
  const uint64_t returns = ipc_returns();
  std::vector<hurray_buffer> hs = shareable_group(4);
  size_t nfds = 0;
  std::vector<hurray_buffer> out = round_trip(hs, &nfds);
  ASSERT_EQ(nfds, 2u);
  hurray_buffer copy = out[1];
  ASSERT_OK(hurray_buffer_release(&out[1]));
  const uint64_t doubles = double_releases();
  (void)hurray_buffer_release(&copy);  // reported and counted, not run
  EXPECT_EQ(double_releases(), doubles + 1);
  EXPECT_EQ(first(out[3]), 3.0f);
  for (size_t i : {size_t{0}, size_t{2}, size_t{3}}) ASSERT_OK(hurray_buffer_release(&out[i]));
  EXPECT_TRUE(wait_until([&] { return ipc_returns() == returns + 1; }));
  ASSERT_OK(hurray_check_enable(0));
}

// A set received, then the process forks: the region's reference returns
// once, after the child's copies (released there) and the parent's are
// all gone.
TEST(IpcSetAttack, ForkAfterReceivingReturnsOnceAfterBoth) {
  warm_watcher();
  const uint64_t returns = ipc_returns();
  std::vector<hurray_buffer> hs = shareable_group(4);
  size_t nfds = 0;
  std::vector<hurray_buffer> out = round_trip(hs, &nfds);
  int tok[2];
  ASSERT_EQ(pipe(tok), 0);
  const pid_t child = fork_child([&] {
    close(tok[1]);
    for (size_t i = 0; i < 4; ++i) {
      if (first(out[i]) != static_cast<float>(i)) return 2;
      if (hurray_buffer_release(&out[i]) != HURRAY_OK) return 3;
    }
    get_token(tok[0]);
    return 0;
  });
  close(tok[0]);
  for (size_t i = 0; i < 3; ++i) ASSERT_OK(hurray_buffer_release(&out[i]));
  put_token(tok[1]);
  EXPECT_EQ(wait_child(child), 0);
  // The parent's last handle still maps the region: nothing returned.
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_EQ(ipc_returns(), returns);
  EXPECT_EQ(first(out[3]), 3.0f);
  ASSERT_OK(hurray_buffer_release(&out[3]));
  EXPECT_TRUE(wait_until([&] { return ipc_returns() == returns + 1; }));
  EXPECT_EQ(ipc_returns(), returns + 1);
  close(tok[1]);
}

// A region holding a read-only view and a writable view of one buffer is
// sent writable, and each entry keeps its own flag; a view of a view goes
// as one region with its own offset.
TEST(IpcSetAttack, ReadOnlyAndWritableViewsOfOneBufferKeepTheirFlags) {
  warm_watcher();
  const uint64_t returns = ipc_returns();
  hurray_buffer h = shareable(16);
  for (int i = 0; i < 16; ++i) static_cast<float *>(h.data)[i] = static_cast<float>(i);
  hurray_buffer parts[3];
  ASSERT_OK(hurray_share(&h, 3, parts));
  const int64_t four[1] = {4};
  const hurray_view_desc ro{16, HURRAY_FLAG_READ_ONLY, {0, 0}, {kDLFloat, 32, 1}, 1, four, nullptr};
  const hurray_view_desc rw{32, 0, {0, 0}, {kDLFloat, 32, 1}, 1, four, nullptr};
  std::vector<hurray_buffer> hs(3);
  ASSERT_OK(hurray_view(&parts[0], &ro, &hs[0]));
  ASSERT_OK(hurray_view(&parts[1], &rw, &hs[1]));
  // A view of a view: two elements from element 1 of the writable one.
  hurray_buffer vv;
  ASSERT_OK(hurray_view(&parts[2], &rw, &vv));
  const int64_t two[1] = {2};
  const hurray_view_desc inner{32 + 4, 0, {0, 0}, {kDLFloat, 32, 1}, 1, two, nullptr};
  ASSERT_OK(hurray_view(&vv, &inner, &hs[2]));
  size_t nfds = 0;
  std::vector<hurray_buffer> out = round_trip(hs, &nfds);
  EXPECT_EQ(nfds, 2u);
  EXPECT_NE(out[0].flags & HURRAY_FLAG_READ_ONLY, 0u);
  EXPECT_EQ(out[1].flags & HURRAY_FLAG_READ_ONLY, 0u);
  EXPECT_EQ(first(out[0]), 4.0f);
  EXPECT_EQ(first(out[1]), 8.0f);
  EXPECT_EQ(first(out[2]), 9.0f);
  for (auto &o : out) ASSERT_OK(hurray_buffer_release(&o));
  EXPECT_TRUE(wait_until([&] { return ipc_returns() == returns + 1; }));
}

}  // namespace
