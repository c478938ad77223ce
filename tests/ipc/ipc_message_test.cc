// SPDX-License-Identifier: Apache-2.0
// Cross-process messages within one process (docs/impl/ipc.md): shareable
// allocation, export/import/discard, send/recv over a socket pair, the copy
// path, and every refusal of a bad message (fds closed, nothing mapped).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <vector>

#include "hurray/hurray.h"
#include "hurray_test_support.h"
#include "ipc_test_support.h"
#include "ipc/peer.h"

namespace {

using namespace hurray_ipc_test;
using hurray_test::HandleSource;

constexpr hurray_device kCpu{HURRAY_DEVICE_CPU, 0};

bool fd_open(int fd) { return fcntl(fd, F_GETFD) != -1; }

void put32(uint8_t *p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
void put64(uint8_t *p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
uint64_t get64(const uint8_t *p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

hurray_ipc_message export_floats(int64_t n, float first = 1.0f) {
  hurray_buffer h = shareable(n);
  for (int64_t i = 0; i < n; ++i) static_cast<float *>(h.data)[i] = first + static_cast<float>(i);
  hurray_ipc_message m;
  EXPECT_OK(hurray_ipc_export(&h, HURRAY_IPC_DEFAULT, &m));
  EXPECT_EQ(h.release_fn, nullptr);
  return m;
}

TEST(IpcAlloc, ShareableIsASealedSharedMemfdWithHeapMetadata) {
  const int maps = count_hurray_memfd_maps();
  const int64_t shape[2] = {3, 5};
  hurray_buffer h;
  ASSERT_OK(hurray_alloc(kCpu, hurray_dtype{kDLFloat, 32, 1}, 2, shape,
                         HURRAY_ALLOC_SHAREABLE | HURRAY_FLAG_READ_ONLY, &h));
  EXPECT_EQ(h.flags, HURRAY_FLAG_READ_ONLY);  // the option bit is not copied
  EXPECT_EQ(reinterpret_cast<uintptr_t>(h.data) % 4096, 0u);
  EXPECT_EQ(count_hurray_memfd_maps(), maps + 1);
  // shape/strides are not in the shared pages.
  const auto lo = reinterpret_cast<uintptr_t>(h.data);
  for (const int64_t *p : {h.shape, h.strides}) {
    const auto a = reinterpret_cast<uintptr_t>(p);
    EXPECT_TRUE(a + 16 <= lo || a >= lo + 4096);
  }
  EXPECT_EQ(h.shape[1], 5);
  EXPECT_EQ(h.strides[0], 5);
  static_cast<float *>(h.data)[14] = 2.5f;
  ASSERT_OK(hurray_buffer_release(&h));
  EXPECT_EQ(count_hurray_memfd_maps(), maps);
}

TEST(IpcAlloc, ZeroElementsStillGetAnAddress) {
  const uint64_t returns = ipc_returns();
  const int64_t shape[1] = {0};
  hurray_buffer h;
  ASSERT_OK(hurray_alloc(kCpu, hurray_dtype{kDLInt, 8, 1}, 1, shape, HURRAY_ALLOC_SHAREABLE, &h));
  EXPECT_NE(h.data, nullptr);
  hurray_ipc_message m;
  ASSERT_OK(hurray_ipc_export(&h, 0, &m));
  hurray_buffer r;
  ASSERT_OK(hurray_ipc_import(&m, &r));
  EXPECT_EQ(r.shape[0], 0);
  EXPECT_NE(r.data, nullptr);
  ASSERT_OK(hurray_buffer_release(&r));
  EXPECT_TRUE(wait_until([&] { return ipc_returns() == returns + 1; }));
}

TEST(IpcAlloc, RefusedWhereNotServed) {
  const int64_t shape[1] = {4};
  hurray_buffer h;
  std::memset(&h, 0, sizeof h);
  EXPECT_STATUS(hurray_alloc(hurray_device{HURRAY_DEVICE_CUDA, 0}, hurray_dtype{kDLFloat, 32, 1}, 1,
                             shape, HURRAY_ALLOC_SHAREABLE, &h),
                HURRAY_ERR_UNSUPPORTED_DEVICE);
  EXPECT_STATUS(hurray_alloc(kCpu, hurray_dtype{kDLFloat, 32, 1}, 1, shape, uint64_t{1} << 33, &h),
                HURRAY_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(h.release_fn, nullptr);
}

TEST(IpcMessage, ExportImportMapsTheSamePagesAndReturnsOnce) {
  warm_watcher();
  const uint64_t returns = ipc_returns(), copies = ipc_copies();
  const int maps = count_hurray_memfd_maps(), fds = count_fds();
  hurray_buffer h = shareable(1024);
  float *mine = static_cast<float *>(h.data);
  hurray_buffer keep[2];
  ASSERT_OK(hurray_share(&h, 2, keep));
  hurray_ipc_message m;
  ASSERT_OK(hurray_ipc_export(&keep[0], HURRAY_IPC_ZERO_COPY_ONLY, &m));  // a shared handle
  EXPECT_EQ(m.nfds, 2u);
  EXPECT_EQ(m.size, 80u + 16u);
  hurray_buffer r;
  ASSERT_OK(hurray_ipc_import(&m, &r));
  EXPECT_EQ(m.nfds, 0u);
  EXPECT_NE(r.data, static_cast<void *>(mine));  // a second mapping ...
  static_cast<float *>(r.data)[7] = 42.0f;       // ... of the same pages
  EXPECT_EQ(mine[7], 42.0f);
  EXPECT_EQ(r.ndim, 1);
  EXPECT_EQ(r.shape[0], 1024);
  // Re-export of what was received: zero-copy again.
  ASSERT_OK(hurray_ipc_export(&r, HURRAY_IPC_ZERO_COPY_ONLY, &m));
  hurray_buffer r2;
  ASSERT_OK(hurray_ipc_import(&m, &r2));
  EXPECT_EQ(static_cast<float *>(r2.data)[7], 42.0f);
  EXPECT_EQ(ipc_returns(), returns);
  ASSERT_OK(hurray_buffer_release(&r2));
  ASSERT_TRUE(wait_until([&] { return ipc_returns() == returns + 2; }));
  EXPECT_EQ(ipc_copies(), copies);
  ASSERT_OK(hurray_buffer_release(&keep[1]));
  EXPECT_EQ(count_hurray_memfd_maps(), maps);
  EXPECT_EQ(count_fds(), fds);
}

TEST(IpcMessage, AViewOfShareableMemoryTravelsWithoutACopy) {
  // hurray_view keeps the memfd allocation's release behind the view's
  // block, so the view is sent zero-copy, with its own layout.
  warm_watcher();
  const uint64_t returns = ipc_returns(), copies = ipc_copies();
  hurray_buffer h = shareable(1024);
  float *mine = static_cast<float *>(h.data);
  const int64_t shape[2] = {16, 8};
  const int64_t strides[2] = {16, 2};  // every other float of 16 rows
  hurray_view_desc d;
  std::memset(&d, 0, sizeof d);
  d.byte_offset = 256 * sizeof(float);
  d.dtype = hurray_dtype{kDLFloat, 32, 1};
  d.ndim = 2;
  d.shape = shape;
  d.strides = strides;
  // A view of one part of a share (the way to make several views).
  hurray_buffer parts[2], v;
  ASSERT_OK(hurray_share(&h, 2, parts));
  ASSERT_OK(hurray_view(&parts[0], &d, &v));
  hurray_ipc_message m;
  ASSERT_OK(hurray_ipc_export(&v, HURRAY_IPC_ZERO_COPY_ONLY, &m));
  hurray_buffer r;
  ASSERT_OK(hurray_ipc_import(&m, &r));
  ASSERT_EQ(r.ndim, 2);
  EXPECT_EQ(r.strides[0], 16);
  EXPECT_EQ(r.strides[1], 2);
  // Element (1, 3) of the view is float 256 + 16 + 6 of the allocation.
  float *base = reinterpret_cast<float *>(static_cast<char *>(r.data) + r.byte_offset);
  base[1 * 16 + 3 * 2] = 5.0f;
  EXPECT_EQ(mine[256 + 16 + 6], 5.0f);
  EXPECT_EQ(ipc_copies(), copies);
  ASSERT_OK(hurray_buffer_release(&r));
  ASSERT_TRUE(wait_until([&] { return ipc_returns() == returns + 1; }));
  ASSERT_OK(hurray_buffer_release(&parts[1]));
}

TEST(IpcMessage, DiscardGivesTheReferenceBack) {
  warm_watcher();
  const uint64_t returns = ipc_returns();
  const int maps = count_hurray_memfd_maps(), fds = count_fds();
  hurray_ipc_message m = export_floats(16);
  EXPECT_OK(hurray_ipc_message_discard(&m));
  EXPECT_EQ(m.nfds, 0u);
  EXPECT_OK(hurray_ipc_message_discard(&m));  // idempotent
  ASSERT_TRUE(wait_until([&] { return ipc_returns() == returns + 1; }));
  EXPECT_EQ(count_hurray_memfd_maps(), maps);
  EXPECT_EQ(count_fds(), fds);
  EXPECT_STATUS(hurray_ipc_message_discard(nullptr), HURRAY_ERR_INVALID_ARGUMENT);
}

TEST(IpcMessage, OtherMemoryIsCopiedOnceOrRefused) {
  HandleSource src;
  hurray_test::Layout l;
  l.shape = {3, 4};
  l.strides = {1, 3};  // column-major: not contiguous
  for (int i = 0; i < 12; ++i) reinterpret_cast<float *>(src.bytes)[i] = static_cast<float>(i);
  hurray_buffer h = src.handle(l);
  hurray_ipc_message m;
  EXPECT_STATUS(hurray_ipc_export(&h, HURRAY_IPC_ZERO_COPY_ONLY, &m),
                HURRAY_ERR_UNSUPPORTED_DEVICE);
  EXPECT_NE(h.release_fn, nullptr);
  EXPECT_EQ(src.log.calls.load(), 0);
  const uint64_t copies = ipc_copies();
  ASSERT_OK(hurray_ipc_export(&h, HURRAY_IPC_DEFAULT, &m));
  EXPECT_EQ(h.release_fn, nullptr);
  EXPECT_EQ(src.log.calls.load(), 1);  // released at once: the copy went
  EXPECT_EQ(ipc_copies(), copies + 1);
  hurray_buffer r;
  ASSERT_OK(hurray_ipc_import(&m, &r));
  EXPECT_EQ(r.flags & HURRAY_FLAG_IS_COPIED, HURRAY_FLAG_IS_COPIED);
  EXPECT_EQ(r.strides[0], 4);  // compact row-major
  EXPECT_EQ(r.strides[1], 1);
  const float *c = static_cast<const float *>(r.data);
  EXPECT_EQ(c[1], 3.0f);  // element (0, 1)
  EXPECT_EQ(c[4], 1.0f);  // element (1, 0)
  const uint64_t returns = ipc_returns();
  ASSERT_OK(hurray_buffer_release(&r));
  EXPECT_TRUE(wait_until([&] { return ipc_returns() == returns + 1; }));  // the copy's memfd
  EXPECT_EQ(src.log.calls.load(), 1);
}

// kDLCUDA memory that is not the driver's (here host memory; no driver, or
// the fake's cuMemGetAddressRange does not know it): refused, nothing
// consumed. GPU memory that is exported: tests/device/ipc_test.cc.
TEST(IpcMessage, GpuMemoryTheDriverCannotExportIsRefused) {
  HandleSource src;
  hurray_test::Layout l = hurray_test::dense({4});
  l.device_type = kDLCUDA;
  hurray_buffer h = src.handle(l);
  hurray_ipc_message m;
  EXPECT_STATUS(hurray_ipc_export(&h, 0, &m), HURRAY_ERR_UNSUPPORTED_DEVICE);
  EXPECT_EQ(src.log.calls.load(), 0);
  ASSERT_OK(hurray_buffer_release(&h));
}

TEST(IpcMessage, ReadOnlyIsMappedReadOnly) {
  const uint64_t returns = ipc_returns();
  hurray_buffer h = shareable(8, HURRAY_FLAG_READ_ONLY);
  hurray_ipc_message m;
  ASSERT_OK(hurray_ipc_export(&h, 0, &m));
  // The memfd the message carries is itself read-only: a receiver that
  // ignores the flag cannot map it writable (or write through it).
  EXPECT_EQ(fcntl(m.fds[0], F_GETFL) & O_ACCMODE, O_RDONLY);
  void *w = mmap(nullptr, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, m.fds[0], 0);
  EXPECT_EQ(w, MAP_FAILED);
  if (w != MAP_FAILED) munmap(w, 4096);
  EXPECT_EQ(write(m.fds[0], "x", 1), -1);
  hurray_buffer r;
  ASSERT_OK(hurray_ipc_import(&m, &r));
  EXPECT_EQ(r.flags, HURRAY_FLAG_READ_ONLY);
  // A write would fault: mprotect to the same protection tells nothing, so
  // ask the kernel via the maps line of the page.
  char needle[64];
  std::snprintf(needle, sizeof needle, "%lx-", reinterpret_cast<unsigned long>(r.data));
  FILE *f = std::fopen("/proc/self/maps", "r");
  char line[4096];
  bool found = false;
  while (std::fgets(line, sizeof line, f) != nullptr) {
    if (std::strncmp(line, needle, std::strlen(needle)) == 0) {
      found = true;
      EXPECT_NE(std::strstr(line, " r--s "), nullptr) << line;
    }
  }
  std::fclose(f);
  EXPECT_TRUE(found);
  ASSERT_OK(hurray_buffer_release(&r));
  EXPECT_TRUE(wait_until([&] { return ipc_returns() == returns + 1; }));
}

TEST(IpcSocket, SendRecvOverStreamAndSeqpacket) {
  warm_watcher();
  for (int type : {SOCK_STREAM, SOCK_SEQPACKET}) {
    const uint64_t returns = ipc_returns();
    int sv[2];
    socket_pair(type, sv);
    const int fds = count_fds();
    hurray_buffer h = shareable(64);
    static_cast<float *>(h.data)[63] = 9.0f;
    void *data = h.data;
    ASSERT_OK(hurray_ipc_send(sv[0], &h, 0));
    EXPECT_EQ(h.release_fn, nullptr);
    hurray_buffer r;
    ASSERT_OK(hurray_ipc_recv(sv[1], &r));
    EXPECT_EQ(static_cast<float *>(r.data)[63], 9.0f);
    EXPECT_NE(r.data, data);
    ASSERT_OK(hurray_buffer_release(&r));
    ASSERT_TRUE(wait_until([&] { return ipc_returns() == returns + 1; }));
    EXPECT_EQ(count_fds(), fds);
    close(sv[0]);
    EXPECT_STATUS(hurray_ipc_recv(sv[1], &r), HURRAY_ERR_IPC_CLOSED);
    close(sv[1]);
  }
}

TEST(IpcSocket, SendFailureConsumesNothing) {
  warm_watcher();
  int p[2];
  ASSERT_EQ(pipe(p), 0);
  const int fds = count_fds();
  hurray_buffer h = shareable(4);
  const hurray_buffer before = h;
  EXPECT_STATUS(hurray_ipc_send(p[1], &h, 0), HURRAY_ERR_IPC);  // not a socket
  EXPECT_EQ(std::memcmp(&h, &before, sizeof h), 0);
  int sv[2];
  socket_pair(SOCK_STREAM, sv);
  close(sv[1]);
  const uint64_t returns = ipc_returns();
  EXPECT_STATUS(hurray_ipc_send(sv[0], &h, 0), HURRAY_ERR_IPC);  // EPIPE, no SIGPIPE
  EXPECT_EQ(std::memcmp(&h, &before, sizeof h), 0);
  close(sv[0]);
  EXPECT_EQ(count_fds(), fds + 1);  // the handle's memfd
  ASSERT_OK(hurray_buffer_release(&h));
  EXPECT_EQ(count_fds(), fds);
  EXPECT_EQ(ipc_returns(), returns);  // the export was taken back, not returned
  close(p[0]);
  close(p[1]);
}

TEST(IpcSocket, PeerOfAnotherUserIsRefused) {
  int sv[2];
  socket_pair(SOCK_STREAM, sv);
  uid_t peer = 12345;
  EXPECT_EQ(hurray::detail::check_peer_uid(sv[0], geteuid(), &peer), hurray::detail::kPeerOk);
  EXPECT_EQ(peer, geteuid());
  EXPECT_EQ(hurray::detail::check_peer_uid(sv[0], geteuid() + 1, &peer),
            hurray::detail::kPeerOtherUser);
  int p[2];
  ASSERT_EQ(pipe(p), 0);
  EXPECT_EQ(hurray::detail::check_peer_uid(p[0], geteuid(), &peer), hurray::detail::kPeerUnknown);
  for (int fd : {sv[0], sv[1], p[0], p[1]}) close(fd);
}

TEST(IpcSocket, TooManyFdsAreClosed) {
  warm_watcher();
  int sv[2];
  socket_pair(SOCK_STREAM, sv);
  const int fds = count_fds();
  hurray_ipc_message m = export_floats(4);
  // The message's two fds and three more: five in one SCM_RIGHTS.
  int extra[5] = {m.fds[0], m.fds[1], dup(0), dup(0), dup(0)};
  union {
    cmsghdr align;
    char buf[CMSG_SPACE(sizeof extra)];
  } control;
  iovec iov{m.bytes, m.size};
  msghdr msg;
  std::memset(&msg, 0, sizeof msg);
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control.buf;
  msg.msg_controllen = sizeof control.buf;
  cmsghdr *c = CMSG_FIRSTHDR(&msg);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof extra);
  std::memcpy(CMSG_DATA(c), extra, sizeof extra);
  ASSERT_EQ(sendmsg(sv[0], &msg, 0), static_cast<ssize_t>(m.size));
  for (int fd : extra) close(fd);
  m.nfds = 0;
  const uint64_t returns = ipc_returns();
  hurray_buffer r;
  EXPECT_STATUS(hurray_ipc_recv(sv[1], &r), HURRAY_ERR_IPC);
  ASSERT_TRUE(wait_until([&] { return ipc_returns() == returns + 1; }));
  EXPECT_EQ(count_fds(), fds);  // nothing received kept, the export's own fds gone
  close(sv[0]);
  close(sv[1]);
}

// A bad message: the import fails with `status`, closes every fd, maps
// nothing, leaves *out alone; the sender's reference comes back.
void expect_refused(hurray_ipc_message m, int32_t status, const char *what) {
  SCOPED_TRACE(what);
  int fds[HURRAY_IPC_MAX_FDS];
  const uint32_t n = m.nfds <= HURRAY_IPC_MAX_FDS ? m.nfds : HURRAY_IPC_MAX_FDS;
  std::memcpy(fds, m.fds, sizeof fds);
  hurray_buffer r;
  std::memset(&r, 0x5a, sizeof r);
  EXPECT_STATUS(hurray_ipc_import(&m, &r), status);
  EXPECT_NE(std::strlen(hurray_last_error()), 0u);
  EXPECT_EQ(m.nfds, 0u);
  for (uint32_t i = 0; i < n; ++i) EXPECT_FALSE(fd_open(fds[i])) << "fds[" << i << "]";
  EXPECT_EQ(reinterpret_cast<const uint8_t *>(&r)[0], 0x5a);
}

TEST(IpcImport, EveryFieldIsChecked) {
  struct Case {
    const char *what;
    int32_t status;
    void (*edit)(hurray_ipc_message *m);
  };
  const Case cases[] = {
      {"size 0", HURRAY_ERR_IPC, [](hurray_ipc_message *m) { m->size = 0; }},
      {"size 15", HURRAY_ERR_IPC, [](hurray_ipc_message *m) { m->size = 15; }},
      {"truncated by one", HURRAY_ERR_IPC, [](hurray_ipc_message *m) { m->size -= 1; }},
      {"size beyond the array", HURRAY_ERR_INVALID_ARGUMENT,
       [](hurray_ipc_message *m) { m->size = HURRAY_IPC_DESCRIPTOR_MAX + 1; }},
      {"magic", HURRAY_ERR_IPC, [](hurray_ipc_message *m) { m->bytes[0] ^= 1; }},
      {"wire version 1 (an older sender)", HURRAY_ERR_UNSUPPORTED_VERSION,
       [](hurray_ipc_message *m) { put32(m->bytes + 4, 1); }},
      {"wire version 3", HURRAY_ERR_UNSUPPORTED_VERSION,
       [](hurray_ipc_message *m) { put32(m->bytes + 4, 3); }},
      {"header size", HURRAY_ERR_IPC, [](hurray_ipc_message *m) { put32(m->bytes + 8, 88); }},
      {"total size", HURRAY_ERR_IPC, [](hurray_ipc_message *m) { put32(m->bytes + 12, 80); }},
      {"kind 2 with kind 1's size", HURRAY_ERR_IPC,
       [](hurray_ipc_message *m) { put32(m->bytes + 16, 2); }},
      {"unknown kind", HURRAY_ERR_IPC, [](hurray_ipc_message *m) { put32(m->bytes + 16, 77); }},
      {"descriptor nfds", HURRAY_ERR_IPC, [](hurray_ipc_message *m) { put32(m->bytes + 20, 3); }},
      {"too few fds", HURRAY_ERR_IPC,
       [](hurray_ipc_message *m) {
         m->nfds = 1;
         close(m->fds[1]);
       }},
      {"too many fds", HURRAY_ERR_IPC,
       [](hurray_ipc_message *m) {
         m->fds[2] = dup(0);
         m->nfds = 3;
       }},
      {"nfds beyond the array", HURRAY_ERR_INVALID_ARGUMENT,
       [](hurray_ipc_message *m) {
         m->fds[2] = dup(0);
         m->fds[3] = dup(0);
         m->nfds = 99;
       }},
      {"device", HURRAY_ERR_UNSUPPORTED_DEVICE,
       [](hurray_ipc_message *m) { put32(m->bytes + 32, HURRAY_DEVICE_CUDA); }},
      {"dtype", HURRAY_ERR_UNSUPPORTED_DTYPE, [](hurray_ipc_message *m) { m->bytes[41] = 31; }},
      {"ndim 65", HURRAY_ERR_INVALID_ARGUMENT,
       [](hurray_ipc_message *m) { put32(m->bytes + 44, 65); }},
      {"ndim -1", HURRAY_ERR_INVALID_ARGUMENT,
       [](hurray_ipc_message *m) { put32(m->bytes + 44, 0xffffffffu); }},
      {"ndim against size", HURRAY_ERR_IPC, [](hurray_ipc_message *m) { put32(m->bytes + 44, 2); }},
      {"negative extent", HURRAY_ERR_INVALID_ARGUMENT,
       [](hurray_ipc_message *m) { put64(m->bytes + 80, ~uint64_t{0}); }},
      {"extent overflow", HURRAY_ERR_OVERFLOW,
       [](hurray_ipc_message *m) {
         put64(m->bytes + 80, uint64_t{1} << 62);
         put64(m->bytes + 88, 1u << 20);
       }},
      {"elements beyond the region", HURRAY_ERR_IPC,
       [](hurray_ipc_message *m) { put64(m->bytes + 80, 1u << 20); }},
      {"byte_offset beyond the region", HURRAY_ERR_IPC,
       [](hurray_ipc_message *m) { put64(m->bytes + 48, 1u << 20); }},
      {"negative stride below the region", HURRAY_ERR_IPC,
       [](hurray_ipc_message *m) { put64(m->bytes + 88, ~uint64_t{0}); }},
      {"data_offset outside", HURRAY_ERR_IPC,
       [](hurray_ipc_message *m) { put64(m->bytes + 56, get64(m->bytes + 72) + 8); }},
      {"region empty", HURRAY_ERR_IPC, [](hurray_ipc_message *m) { put64(m->bytes + 72, 0); }},
      {"region wraps", HURRAY_ERR_IPC,
       [](hurray_ipc_message *m) { put64(m->bytes + 64, ~uint64_t{0} - 2); }},
      {"region beyond the memfd (fstat)", HURRAY_ERR_IPC,
       [](hurray_ipc_message *m) {
         put64(m->bytes + 72, get64(m->bytes + 72) * 2);
         put64(m->bytes + 80, 2048);
       }},
      {"fds[0] a pipe", HURRAY_ERR_IPC,
       [](hurray_ipc_message *m) {
         int p[2];
         (void)!pipe(p);
         close(m->fds[0]);
         m->fds[0] = p[0];
         close(p[1]);
       }},
      {"fds[0] an unsealed memfd", HURRAY_ERR_IPC,
       [](hurray_ipc_message *m) {
         close(m->fds[0]);
         m->fds[0] = memfd_create("other", MFD_CLOEXEC);
         (void)!ftruncate(m->fds[0], 1 << 20);
       }},
      {"fds[0] closed", HURRAY_ERR_IPC,
       [](hurray_ipc_message *m) {
         close(m->fds[0]);
         m->fds[0] = -1;
       }},
      {"fds[1] not a pipe", HURRAY_ERR_IPC,
       [](hurray_ipc_message *m) {
         close(m->fds[1]);
         m->fds[1] = dup(m->fds[0]);
       }},
      {"one fd twice", HURRAY_ERR_IPC,
       [](hurray_ipc_message *m) {
         close(m->fds[1]);
         m->fds[1] = m->fds[0];
       }},
      {"fds swapped", HURRAY_ERR_IPC,
       [](hurray_ipc_message *m) { std::swap(m->fds[0], m->fds[1]); }},
  };
  warm_watcher();
  for (const Case &c : cases) {
    const uint64_t returns = ipc_returns();
    const int maps = count_memfd_maps(), fds = count_fds();
    hurray_ipc_message m = export_floats(256);
    c.edit(&m);
    expect_refused(m, c.status, c.what);
    EXPECT_TRUE(wait_until([&] { return ipc_returns() == returns + 1; })) << c.what;
    EXPECT_EQ(count_memfd_maps(), maps) << c.what;  // nothing mapped, the sender's copy gone
    EXPECT_EQ(count_fds(), fds) << c.what;
  }
  hurray_buffer r;
  EXPECT_STATUS(hurray_ipc_import(nullptr, &r), HURRAY_ERR_INVALID_ARGUMENT);
}

// A GPU descriptor of wire version 1 (an older libhurray: the device named
// by the sender's ordinal, the 64-byte handle right after the strides) is
// refused as a version, not read as version 2's GPU part (ipc.md §3.1,
// §6.1); every fd closed.
TEST(IpcImport, GpuDescriptorOfWireVersion1IsRefused) {
  hurray_ipc_message m = export_floats(256);
  ASSERT_EQ(m.size, 96u);
  ASSERT_EQ(hurray_ipc_message_discard(&m), HURRAY_OK);
  put32(m.bytes + 4, 1);
  put32(m.bytes + 12, 96 + 64);
  put32(m.bytes + 16, 3);  // CUDA legacy IPC
  put32(m.bytes + 20, 1);
  put32(m.bytes + 32, HURRAY_DEVICE_CUDA);
  put64(m.bytes + 72, 8192);
  for (int i = 0; i < 64; ++i) m.bytes[96 + i] = static_cast<uint8_t>(i);
  m.size = 96 + 64;
  int p[2];
  ASSERT_EQ(pipe2(p, O_CLOEXEC), 0);
  close(p[0]);
  m.fds[0] = p[1];
  m.nfds = 1;
  hurray_buffer r;
  EXPECT_STATUS(hurray_ipc_import(&m, &r), HURRAY_ERR_UNSUPPORTED_VERSION);
  EXPECT_NE(std::strstr(hurray_last_error(), "older libhurray"), nullptr) << hurray_last_error();
  EXPECT_EQ(m.nfds, 0u);
  EXPECT_FALSE(fd_open(p[1]));
}

// Pool memory (kinds 5 and 6, ipc.md §6.1): a kDLCUDA GPU descriptor of f32
// floats with the pool part; `kind`, `pool` its pool number, `nfds` fds
// (a pipe's write end, then pipes' write ends for the others).
hurray_ipc_message pool_descriptor(uint32_t kind, uint64_t pool, uint32_t nfds) {
  hurray_ipc_message m = export_floats(256);
  EXPECT_EQ(m.size, 96u);
  EXPECT_EQ(hurray_ipc_message_discard(&m), HURRAY_OK);
  put32(m.bytes + 12, 96 + 168 + 8);
  put32(m.bytes + 16, kind);
  put32(m.bytes + 20, kind == 5 ? 2 : 1);
  put32(m.bytes + 32, HURRAY_DEVICE_CUDA);
  put64(m.bytes + 56, 0);
  put64(m.bytes + 64, 0);
  put64(m.bytes + 72, 8192);
  uint8_t *g = m.bytes + 96;
  std::memset(g, 0, 168 + 8);
  for (int i = 0; i < 16; ++i) g[i] = static_cast<uint8_t>(0x11 * (i + 1));
  put32(g + 16, 4242);  // another process
  for (int i = 0; i < 64; ++i) g[40 + i] = static_cast<uint8_t>(i + 1);
  put64(g + 168, pool);
  m.size = 96 + 168 + 8;
  m.nfds = nfds;
  for (uint32_t i = 0; i < nfds; ++i) {
    int p[2];
    EXPECT_EQ(pipe2(p, O_CLOEXEC), 0);
    close(p[0]);
    m.fds[i] = p[1];
  }
  return m;
}

// Kind 6 carries no pool fd: hurray_ipc_import (no connection) refuses it
// before any driver call; a pool number 0 and kind 7 are refused by the
// decoder; every fd closed.
TEST(IpcImport, PoolKindsAreChecked) {
  hurray_ipc_message m = pool_descriptor(6, 7, 1);
  expect_refused(m, HURRAY_ERR_IPC, "kind 6 without a connection");
  EXPECT_NE(std::strstr(hurray_last_error(), "once per connection"), nullptr)
      << hurray_last_error();
  m = pool_descriptor(5, 0, 2);
  expect_refused(m, HURRAY_ERR_IPC, "pool number 0");
  EXPECT_NE(std::strstr(hurray_last_error(), "pool number"), nullptr) << hurray_last_error();
  m = pool_descriptor(6, 7, 2);
  expect_refused(m, HURRAY_ERR_IPC, "kind 6 with two fds");
  m = pool_descriptor(5, 7, 2);
  put32(m.bytes + 16, 7);
  expect_refused(m, HURRAY_ERR_IPC, "kind 7");
  EXPECT_NE(std::strstr(hurray_last_error(), "kind 7 is unknown"), nullptr) << hurray_last_error();
}

// Kinds 5 and 6 carry HIP pool memory too (kDLROCM: hipMemPoolExportPointer's
// data): the decoder lets a kDLROCM kind-6 descriptor through to the
// connection rule; any other device type is refused naming both.
TEST(IpcImport, PoolKindsTakeEitherGpuVendor) {
  hurray_ipc_message m = pool_descriptor(6, 7, 1);
  put32(m.bytes + 32, HURRAY_DEVICE_ROCM);
  expect_refused(m, HURRAY_ERR_IPC, "kDLROCM kind 6 without a connection");
  EXPECT_NE(std::strstr(hurray_last_error(), "once per connection"), nullptr)
      << hurray_last_error();
  m = pool_descriptor(5, 7, 2);
  put32(m.bytes + 32, HURRAY_DEVICE_CUDA_HOST);
  expect_refused(m, HURRAY_ERR_IPC, "kind 5 of pinned host memory");
  EXPECT_NE(std::strstr(hurray_last_error(), "kind 5 is kDLCUDA or kDLROCM"), nullptr)
      << hurray_last_error();
}

TEST(IpcImport, OutNullClosesTheFds) {
  const uint64_t returns = ipc_returns();
  hurray_ipc_message m = export_floats(4);
  const int a = m.fds[0], b = m.fds[1];
  EXPECT_STATUS(hurray_ipc_import(&m, nullptr), HURRAY_ERR_INVALID_ARGUMENT);
  EXPECT_FALSE(fd_open(a));
  EXPECT_FALSE(fd_open(b));
  EXPECT_TRUE(wait_until([&] { return ipc_returns() == returns + 1; }));
}

TEST(IpcCheckingMode, TrackedHandlesCrossAndComeBack) {
  ASSERT_OK(hurray_check_enable(HURRAY_CHECK_TRACK));
  const uint64_t returns = ipc_returns();
  hurray_buffer h = shareable(32);
  hurray_ipc_message m;
  ASSERT_OK(hurray_ipc_export(&h, HURRAY_IPC_ZERO_COPY_ONLY, &m));  // unwrapped, still zero-copy
  hurray_buffer r;
  ASSERT_OK(hurray_ipc_import(&m, &r));
  hurray_buffer copy = r;
  ASSERT_OK(hurray_buffer_release(&r));
  ASSERT_OK(hurray_buffer_release(&copy));  // caught, not a second munmap
  ASSERT_TRUE(wait_until([&] { return ipc_returns() == returns + 1; }));
  ASSERT_OK(hurray_check_enable(0));
}

}  // namespace
