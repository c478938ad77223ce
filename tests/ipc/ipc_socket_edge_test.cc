// SPDX-License-Identifier: Apache-2.0
// hurray_ipc_recv and hurray_ipc_import at the edges a hostile or unusual
// peer reaches (docs/impl/ipc.md, "Timeouts and non-blocking sockets"):
// SO_RCVTIMEO and O_NONBLOCK with no message or half a message, SO_PASSCRED
// on the receiver, an empty seqpacket record, and fds kept close-on-exec.
// Every wait here is bounded: a receive that would hang fails the test.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <signal.h>
#include <sys/time.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <future>
#include <thread>
#include <string>
#include <utility>

#include "hurray/hurray.h"
#include "hurray_test_support.h"
#include "ipc_test_support.h"

namespace {

using namespace hurray_ipc_test;

void set_rcvtimeo(int fd, int ms) {
  timeval tv{ms / 1000, (ms % 1000) * 1000};
  ASSERT_EQ(setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv), 0);
}

void set_nonblocking(int fd) { ASSERT_EQ(fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK), 0); }

// The message of the last recv_within (hurray_last_error is per thread).
std::string g_message;

// hurray_ipc_recv on another thread, failing the test (instead of hanging
// it) when it has not returned within `seconds`.
int32_t recv_within(int fd, hurray_buffer *out, int seconds = 10) {
  auto f = std::async(std::launch::async, [=] {
    const int32_t st = hurray_ipc_recv(fd, out);
    return std::make_pair(st, std::string(hurray_last_error()));
  });
  if (f.wait_for(std::chrono::seconds(seconds)) != std::future_status::ready) {
    ADD_FAILURE() << "hurray_ipc_recv did not return within " << seconds << " s";
    std::_Exit(1);  // the receive would block this test program for ever
  }
  const auto [st, message] = f.get();
  g_message = message;
  return st;
}

bool said(const char *text) { return g_message.find(text) != std::string::npos; }

// Sends a real message and checks that the receiver takes it whole.
void expect_usable(int send_fd, int recv_fd) {
  hurray_buffer h = shareable(8);
  static_cast<float *>(h.data)[7] = 5.0f;
  ASSERT_OK(hurray_ipc_send(send_fd, &h, 0));
  hurray_buffer r;
  ASSERT_OK(recv_within(recv_fd, &r));
  EXPECT_EQ(static_cast<float *>(r.data)[7], 5.0f);
  ASSERT_OK(hurray_buffer_release(&r));
}

// The first `n` bytes of a real message's descriptor, written raw.
void send_partial(int fd, size_t n) {
  hurray_buffer h = shareable(8);
  hurray_ipc_message m;
  ASSERT_OK(hurray_ipc_export(&h, 0, &m));
  ASSERT_LT(n, m.size);
  ASSERT_EQ(write(fd, m.bytes, n), static_cast<ssize_t>(n));
  ASSERT_OK(hurray_ipc_message_discard(&m));
}

TEST(IpcRecvTimeout, NoMessageWithinRcvtimeoIsATimeoutThatConsumesNothing) {
  warm_watcher();
  int sv[2];
  socket_pair(SOCK_STREAM, sv);
  set_rcvtimeo(sv[1], 100);
  hurray_buffer r;
  std::memset(&r, 0xab, sizeof r);
  const hurray_buffer before = r;
  EXPECT_STATUS(recv_within(sv[1], &r), HURRAY_ERR_IPC_TIMEOUT);
  EXPECT_TRUE(said("SO_RCVTIMEO (100 ms")) << g_message;
  EXPECT_EQ(std::memcmp(&r, &before, sizeof r), 0);  // out untouched
  expect_usable(sv[0], sv[1]);
  close(sv[0]);
  close(sv[1]);
}

TEST(IpcRecvTimeout, NonBlockingSocketWithNothingWaiting) {
  warm_watcher();
  for (int type : {SOCK_STREAM, SOCK_SEQPACKET}) {
    int sv[2];
    socket_pair(type, sv);
    set_nonblocking(sv[1]);
    hurray_buffer r;
    EXPECT_STATUS(recv_within(sv[1], &r), HURRAY_ERR_IPC_TIMEOUT);
    EXPECT_TRUE(said("non-blocking")) << g_message;
    expect_usable(sv[0], sv[1]);
    close(sv[0]);
    close(sv[1]);
  }
}

TEST(IpcRecvTimeout, PeerStoppingInsideAMessageIsReportedNotWaitedForForEver) {
  warm_watcher();
  // A blocking socket with SO_RCVTIMEO, and a non-blocking one without.
  for (bool nonblocking : {false, true}) {
    int sv[2];
    socket_pair(SOCK_STREAM, sv);
    if (nonblocking) {
      set_nonblocking(sv[1]);
      set_rcvtimeo(sv[1], 0);  // none: the rest is waited for 1 s (socket_pair sets 30 s)
    } else {
      set_rcvtimeo(sv[1], 200);
    }
    const int fds = count_fds();
    send_partial(sv[0], 10);  // within the 16-byte prefix
    hurray_buffer r;
    EXPECT_STATUS(recv_within(sv[1], &r), HURRAY_ERR_IPC);
    EXPECT_TRUE(said("out of step")) << g_message;
    EXPECT_EQ(count_fds(), fds);  // nothing received is left open
    close(sv[0]);
    close(sv[1]);
  }
}

// SIGALRM every 50 ms without SA_RESTART: every blocking call gets EINTR.
struct PeriodicSignals {
  PeriodicSignals() {
    struct sigaction sa {};
    sa.sa_handler = [](int) {};
    sigaction(SIGALRM, &sa, &old_);
    itimerval t{{0, 50000}, {0, 50000}};
    setitimer(ITIMER_REAL, &t, nullptr);
  }
  ~PeriodicSignals() {
    itimerval off{};
    setitimer(ITIMER_REAL, &off, nullptr);
    sigaction(SIGALRM, &old_, nullptr);
  }
  struct sigaction old_ {};
};

TEST(IpcRecvTimeout, SignalsDoNotRestartTheWait) {
  warm_watcher();
  // The receive runs on this thread (where the timer's signals land).
  for (bool partial : {false, true}) {
    SCOPED_TRACE(partial);
    int sv[2];
    socket_pair(SOCK_STREAM, sv);
    set_rcvtimeo(sv[1], 300);
    if (partial) send_partial(sv[0], 10);
    hurray_buffer r;
    PeriodicSignals signals;
    const auto t0 = std::chrono::steady_clock::now();
    const int32_t st = hurray_ipc_recv(sv[1], &r);
    const auto ms =
        std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0)
            .count();
    EXPECT_STATUS(st, partial ? HURRAY_ERR_IPC : HURRAY_ERR_IPC_TIMEOUT);
    EXPECT_LT(ms, 3000) << "the 300 ms wait restarted on each signal";
    close(sv[0]);
    close(sv[1]);
  }
}

TEST(IpcRecvTimeout, TheRestOfAMessageGetsTheTimeOnceNotPerRead) {
  warm_watcher();
  int sv[2];
  socket_pair(SOCK_STREAM, sv);
  set_rcvtimeo(sv[1], 300);
  hurray_buffer h = shareable(8);
  hurray_ipc_message m;
  ASSERT_OK(hurray_ipc_export(&h, 0, &m));
  // One byte every 100 ms: each read waits less than 300 ms, the whole rest
  // far more.
  std::thread trickle([&] {
    for (uint32_t i = 0; i < 40; ++i) {
      if (write(sv[0], m.bytes + i, 1) != 1) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  });
  hurray_buffer r;
  EXPECT_STATUS(recv_within(sv[1], &r), HURRAY_ERR_IPC);
  EXPECT_TRUE(said("out of step")) << g_message;
  trickle.join();
  ASSERT_OK(hurray_ipc_message_discard(&m));
  close(sv[0]);
  close(sv[1]);
}

TEST(IpcRecvCredentials, SoPasscredOnTheReceiverIsAccepted) {
  warm_watcher();
  for (int type : {SOCK_STREAM, SOCK_SEQPACKET}) {
    int sv[2];
    socket_pair(type, sv);
    const int one = 1;
    ASSERT_EQ(setsockopt(sv[1], SOL_SOCKET, SO_PASSCRED, &one, sizeof one), 0);
    expect_usable(sv[0], sv[1]);
    close(sv[0]);
    close(sv[1]);
  }
}

TEST(IpcRecvSeqpacket, EmptyRecordOfALivePeerIsNotTheEndOfTheConnection) {
  warm_watcher();
  int sv[2];
  socket_pair(SOCK_SEQPACKET, sv);
  ASSERT_EQ(send(sv[0], "", 0, 0), 0);
  hurray_buffer r;
  EXPECT_STATUS(recv_within(sv[1], &r), HURRAY_ERR_IPC);
  EXPECT_TRUE(said("empty record")) << g_message;
  expect_usable(sv[0], sv[1]);
  close(sv[0]);
  EXPECT_STATUS(recv_within(sv[1], &r), HURRAY_ERR_IPC_CLOSED);
  close(sv[1]);
}

TEST(IpcRecvSeqpacket, AMessageQueuedAfterAnEmptyRecordIsNotLostToAClose) {
  warm_watcher();
  int sv[2];
  socket_pair(SOCK_SEQPACKET, sv);
  ASSERT_EQ(send(sv[0], "", 0, 0), 0);
  hurray_buffer h = shareable(8);
  static_cast<float *>(h.data)[0] = 3.0f;
  ASSERT_OK(hurray_ipc_send(sv[0], &h, 0));
  close(sv[0]);  // the peer is gone, a message still queued
  hurray_buffer r;
  EXPECT_STATUS(recv_within(sv[1], &r), HURRAY_ERR_IPC);  // the empty record
  EXPECT_TRUE(said("empty record")) << g_message;
  ASSERT_OK(recv_within(sv[1], &r));  // the message
  EXPECT_EQ(static_cast<float *>(r.data)[0], 3.0f);
  ASSERT_OK(hurray_buffer_release(&r));
  EXPECT_STATUS(recv_within(sv[1], &r), HURRAY_ERR_IPC_CLOSED);
  close(sv[1]);
}

TEST(IpcImportFds, KeptFdsAreCloseOnExecWhateverTheyArrivedAs) {
  warm_watcher();
  hurray_buffer h = shareable(8);
  hurray_ipc_message m;
  ASSERT_OK(hurray_ipc_export(&h, 0, &m));
  ASSERT_EQ(m.nfds, 2u);
  // As a transport that ignores MSG_CMSG_CLOEXEC delivers them: inheritable.
  for (uint32_t i = 0; i < m.nfds; ++i) {
    ASSERT_EQ(fcntl(m.fds[i], F_SETFD, 0), 0);
  }
  const int kept[2] = {m.fds[0], m.fds[1]};
  hurray_buffer r;
  ASSERT_OK(hurray_ipc_import(&m, &r));
  for (int fd : kept) {
    const int fdflags = fcntl(fd, F_GETFD);
    ASSERT_NE(fdflags, -1) << "fd " << fd << " is not kept open";
    EXPECT_NE(fdflags & FD_CLOEXEC, 0) << "fd " << fd << " would pass to a started program";
  }
  ASSERT_OK(hurray_buffer_release(&r));
}

TEST(IpcImportLimit, ARegionLargerThanTheLimitIsRefusedBeforeMapping) {
  warm_watcher();
  const int fds = count_fds();
  const int maps = count_hurray_memfd_maps();
  hurray_buffer h = shareable(1024);  // 4 KiB of floats
  hurray_buffer two[2];
  ASSERT_OK(hurray_share(&h, 2, two));  // one per export (an export consumes it)
  hurray_ipc_message m;
  ASSERT_OK(hurray_ipc_export(&two[0], 0, &m));
  ASSERT_EQ(setenv("HURRAY_IPC_MAX_BYTES", "1024", 1), 0);
  hurray_buffer r;
  EXPECT_STATUS(hurray_ipc_import(&m, &r), HURRAY_ERR_IPC);
  EXPECT_NE(std::strstr(hurray_last_error(), "HURRAY_IPC_MAX_BYTES (1024 bytes)"), nullptr)
      << hurray_last_error();
  EXPECT_EQ(count_hurray_memfd_maps(), maps + 1);  // only the sender's own mapping
  ASSERT_OK(hurray_ipc_export(&two[1], 0, &m));
  ASSERT_EQ(setenv("HURRAY_IPC_MAX_BYTES", "4096", 1), 0);  // exactly the region
  ASSERT_OK(hurray_ipc_import(&m, &r));
  ASSERT_OK(hurray_buffer_release(&r));
  ASSERT_EQ(unsetenv("HURRAY_IPC_MAX_BYTES"), 0);
  ASSERT_TRUE(wait_until([&] { return count_fds() == fds; }));
}

}  // namespace

namespace {

TEST(IpcImportLimit, AValueThatIsNoPositiveDecimalNumberIsIgnoredNeverUnlimited) {
  warm_watcher();
  // A sparse region twice this machine's memory: refused by the default.
  const int64_t bytes = static_cast<int64_t>(sysconf(_SC_PHYS_PAGES)) * sysconf(_SC_PAGESIZE) * 2;
  hurray_buffer h;
  const int32_t st = hurray_alloc(hurray_device{HURRAY_DEVICE_CPU, 0}, hurray_dtype{kDLUInt, 8, 1},
                                  1, &bytes, HURRAY_ALLOC_SHAREABLE, &h);
  if (st == HURRAY_ERR_OUT_OF_MEMORY) {
    // qemu-user and machines without overcommit cannot map a sparse region
    // this large even in the sender.
    GTEST_SKIP() << "this machine cannot map " << bytes << " bytes: " << hurray_last_error();
  }
  ASSERT_OK(st);
  for (const char *bad : {"-1", " 99999999999999999", "0", "1e30", "0x7fffffffffffffff",
                          "99999999999999999 ", "99999999999999999999999"}) {
    SCOPED_TRACE(bad);
    hurray_buffer two[2];
    ASSERT_OK(hurray_share(&h, 2, two));
    h = two[0];
    hurray_ipc_message m;
    ASSERT_OK(hurray_ipc_export(&two[1], 0, &m));
    ASSERT_EQ(setenv("HURRAY_IPC_MAX_BYTES", bad, 1), 0);
    hurray_buffer r;
    EXPECT_STATUS(hurray_ipc_import(&m, &r), HURRAY_ERR_IPC);
    EXPECT_NE(std::strstr(hurray_last_error(), "physical memory"), nullptr) << hurray_last_error();
  }
  ASSERT_EQ(unsetenv("HURRAY_IPC_MAX_BYTES"), 0);
  ASSERT_OK(hurray_buffer_release(&h));
}

}  // namespace
