// SPDX-License-Identifier: Apache-2.0
// hurray_ipc_send / hurray_ipc_recv (docs/impl/ipc.md §4, §7): one message
// over a connected AF_UNIX socket, the descriptor as the bytes and the fds
// as SCM_RIGHTS on the first of them. A stream socket has no message
// boundaries: the receiver reads the 16-byte prefix first, whose total_size
// says how many bytes follow. A seqpacket socket gets one record per
// message. A receive honours the socket's SO_RCVTIMEO and O_NONBLOCK
// (docs/impl/ipc.md, "Timeouts and non-blocking sockets").
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/time.h>
#include <time.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <unistd.h>

#include <cinttypes>
#include <cstdlib>
#include <cstring>

#include "checking/checking.h"
#include "common/error.h"
#include "ipc/message.h"
#include "ipc/peer.h"
#include "ipc/pool_peers.h"
#include "ipc/set.h"
#include "ipc/set_wire.h"
#include "ipc/wire.h"

namespace hurray::detail {
namespace {

// Checks that fd is a connected AF_UNIX stream or seqpacket socket whose
// peer runs as this process's effective uid; *seqpacket says which.
int32_t check_socket(int fd, const char *who, bool *seqpacket) {
  int type = 0, domain = 0;
  socklen_t len = sizeof type;
  if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) != 0) {
    return fail(HURRAY_ERR_IPC, "%s: socket_fd %d is not a socket: %s", who, fd,
                std::strerror(errno));
  }
  len = sizeof domain;
  if (getsockopt(fd, SOL_SOCKET, SO_DOMAIN, &domain, &len) != 0 || domain != AF_UNIX ||
      (type != SOCK_STREAM && type != SOCK_SEQPACKET)) {
    return fail(HURRAY_ERR_IPC,
                "%s: socket_fd %d is not an AF_UNIX SOCK_STREAM or SOCK_SEQPACKET socket", who, fd);
  }
  uid_t peer = 0;
  const uid_t me = geteuid();
  switch (check_peer_uid(fd, me, &peer)) {
    case kPeerOk: break;
    case kPeerOtherUser:
      return fail(HURRAY_ERR_IPC,
                  "%s: the peer runs as uid %u, not this process's uid %u (SO_PEERCRED); only "
                  "peers of the same user are accepted",
                  who, static_cast<unsigned>(peer), static_cast<unsigned>(me));
    default:
      return fail(HURRAY_ERR_IPC, "%s: no peer credentials on socket_fd %d (not connected?): %s",
                  who, fd, std::strerror(errno));
  }
  *seqpacket = type == SOCK_SEQPACKET;
  return HURRAY_OK;
}

// Waits until fd is readable or writable (a non-blocking socket).
void wait_for(int fd, short events) {
  pollfd p{fd, events, 0};
  while (poll(&p, 1, -1) < 0 && errno == EINTR) {
  }
}

// One record: bytes[0..size) with fds[0..nfds) (at most
// HURRAY_IPC_SET_FDS_PER_RECORD) as SCM_RIGHTS on its first bytes. `who`
// names the public call in messages.
int32_t send_record(int fd, bool seqpacket, const uint8_t *bytes, size_t size, const int *fds,
                    size_t nfds, const char *who) {
  union {
    cmsghdr align;
    char buf[CMSG_SPACE(sizeof(int) * HURRAY_IPC_SET_FDS_PER_RECORD)];
  } control;
  std::memset(&control, 0, sizeof control);
  size_t sent = 0;
  bool fds_sent = nfds == 0;
  while (sent < size) {
    iovec iov{const_cast<uint8_t *>(bytes) + sent, size - sent};
    msghdr msg;
    std::memset(&msg, 0, sizeof msg);
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    if (!fds_sent) {
      msg.msg_control = control.buf;
      msg.msg_controllen = CMSG_SPACE(sizeof(int) * nfds);
      cmsghdr *c = CMSG_FIRSTHDR(&msg);
      c->cmsg_level = SOL_SOCKET;
      c->cmsg_type = SCM_RIGHTS;
      c->cmsg_len = CMSG_LEN(sizeof(int) * nfds);
      std::memcpy(CMSG_DATA(c), fds, sizeof(int) * nfds);
    }
    const ssize_t n = sendmsg(fd, &msg, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        wait_for(fd, POLLOUT);
        continue;
      }
      return fail(HURRAY_ERR_IPC, "%s: sendmsg failed after %zu of %zu bytes: %s", who, sent, size,
                  std::strerror(errno));
    }
    fds_sent = true;
    sent += static_cast<size_t>(n);
    if (seqpacket && sent < size) {
      return fail(HURRAY_ERR_IPC, "%s: the seqpacket record was cut to %zu bytes", who, sent);
    }
  }
  return HURRAY_OK;
}

int32_t send_message(int fd, bool seqpacket, const hurray_ipc_message &m) {
  return send_record(fd, seqpacket, m.bytes, m.size, m.fds, m.nfds, "hurray_ipc_send");
}

// How the receiving socket waits: O_NONBLOCK, and SO_RCVTIMEO in
// milliseconds (0: none).
struct RecvWait {
  bool nonblocking = false;
  int timeout_ms = 0;
};

RecvWait recv_wait_of(int fd) {
  RecvWait w;
  const int fl = fcntl(fd, F_GETFL);
  w.nonblocking = fl >= 0 && (fl & O_NONBLOCK) != 0;
  timeval tv{};
  socklen_t len = sizeof tv;
  if (getsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, &len) == 0) {
    const long long ms = static_cast<long long>(tv.tv_sec) * 1000 + tv.tv_usec / 1000;
    w.timeout_ms = ms > INT32_MAX ? INT32_MAX : static_cast<int>(ms > 0 ? ms : (tv.tv_usec > 0));
  }
  return w;
}

// A non-blocking socket without SO_RCVTIMEO waits this long for the rest of
// a message whose first bytes came (a whole message is one sendmsg, far
// below the socket's buffer, so the rest is normally there already).
constexpr int kPartialWaitMs = 1000;

// fds received so far, into `fds` (room for `cap`); extra ones are closed
// at once and remembered. A single message's fit in the inline array; a
// set's receive points `fds` at room for its header's count.
struct ReceivedFds {
  int inline_fds[HURRAY_IPC_MAX_FDS];
  int *fds = inline_fds;
  size_t cap = HURRAY_IPC_MAX_FDS;
  size_t n = 0;
  bool too_many = false;
  void take(const msghdr &msg) {
    if ((msg.msg_flags & MSG_CTRUNC) != 0) too_many = true;
    for (cmsghdr *c = CMSG_FIRSTHDR(&msg); c != nullptr;
         c = CMSG_NXTHDR(const_cast<msghdr *>(&msg), c)) {
      if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
      const size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
      for (size_t i = 0; i < count; ++i) {
        int fd;
        std::memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof fd);
        if (n < cap) {
          fds[n++] = fd;
        } else {
          close(fd);
          too_many = true;
        }
      }
    }
  }
  void close_all() {
    for (size_t i = 0; i < n; ++i) close(fds[i]);
    n = 0;
  }
};

// The most fds one record carries (the kernel's SCM_MAX_FD); a receive has
// room for them all, so that none is cut off before it is counted.
constexpr size_t kScmMaxFd = 253;

constexpr ssize_t kNothingYet = -2;  // nothing of a message arrived in time
constexpr ssize_t kStalled = -3;     // the rest of a begun message did not

int64_t now_ms() {
  timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return static_cast<int64_t>(t.tv_sec) * 1000 + t.tv_nsec / 1000000;
}

// One recvmsg into buf[0..len), fds collected; returns bytes, 0 at end of
// stream, -1 with errno on error, kNothingYet when no message began before
// *deadline (`started` false), kStalled when the rest of a begun one did
// not come before it. A socket with a wait rule (SO_RCVTIMEO, O_NONBLOCK)
// is read without blocking and waited on with poll until *deadline (a
// CLOCK_MONOTONIC millisecond, set at the first wait when 0), so signals
// (EINTR) never restart the wait from the beginning.
ssize_t recv_once(int fd, uint8_t *buf, size_t len, ReceivedFds *fds, int *msg_flags, bool started,
                  const RecvWait &wait, int64_t *deadline) {
  union {
    cmsghdr align;
    // Room for the kernel's credentials too: with SO_PASSCRED set on the
    // socket every message carries an SCM_CREDENTIALS message beside ours.
    char buf[CMSG_SPACE(sizeof(int) * kScmMaxFd) + CMSG_SPACE(sizeof(ucred))];
  } control;
  const bool timed = wait.nonblocking || wait.timeout_ms > 0;
  for (;;) {
    iovec iov{buf, len};
    msghdr msg;
    std::memset(&msg, 0, sizeof msg);
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.buf;
    msg.msg_controllen = sizeof control.buf;
    const ssize_t n = recvmsg(fd, &msg, MSG_CMSG_CLOEXEC | (timed ? MSG_DONTWAIT : 0));
    if (n >= 0) {
      fds->take(msg);
      *msg_flags = msg.msg_flags;
      return n;
    }
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) return -1;
    // Nothing there yet (only a timed socket gets here).
    if (!started && wait.nonblocking) return kNothingYet;
    if (*deadline == 0) {
      *deadline = now_ms() + (wait.timeout_ms > 0 ? wait.timeout_ms : kPartialWaitMs);
    }
    for (;;) {
      const int64_t left = *deadline - now_ms();
      if (left <= 0) return started ? kStalled : kNothingYet;
      pollfd p{fd, POLLIN, 0};
      const int r = poll(&p, 1, static_cast<int>(left > INT32_MAX ? INT32_MAX : left));
      if (r > 0) break;  // readable: read again
      if (r < 0 && errno != EINTR) return -1;
    }
  }
}

constexpr const char *kSetCall = "hurray_ipc_recv_set";

// `call`: the public function reported in the message.
int32_t nothing_yet(const RecvWait &wait, const char *call = "hurray_ipc_recv") {
  if (wait.nonblocking) {
    return fail(HURRAY_ERR_IPC_TIMEOUT,
                "%s: no message is waiting on the non-blocking socket (nothing "
                "consumed; try again when it is readable)",
                call);
  }
  return fail(HURRAY_ERR_IPC_TIMEOUT,
              "%s: no message began within the socket's SO_RCVTIMEO (%d ms; "
              "nothing consumed, the connection is usable)",
              call, wait.timeout_ms);
}

int32_t stalled(size_t got, size_t want, const RecvWait &wait,
                const char *call = "hurray_ipc_recv") {
  return fail(HURRAY_ERR_IPC,
              "%s: the peer stopped inside a message (%zu of %zu bytes arrived, "
              "then nothing for %d ms): the stream is out of step, close the connection",
              call, got, want, wait.timeout_ms > 0 ? wait.timeout_ms : kPartialWaitMs);
}

// Whether the peer of a seqpacket socket that just read 0 bytes has gone:
// a live peer's empty record also reads 0. Gone when nothing more is queued
// (a peek reads 0 or would block) and the peer has hung up (POLLRDHUP); a
// record still queued behind the empty one means the empty one was a
// record, whether or not the peer closed after sending them.
bool peer_gone(int fd) {
  char c;
  const ssize_t n = recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
  if (n > 0) return false;
  pollfd p{fd, POLLRDHUP, 0};
  return poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP)) != 0;
}

int32_t recv_message(int fd, bool seqpacket, const RecvWait &wait, hurray_ipc_message *m,
                     ReceivedFds *fds) {
  int flags = 0;
  if (seqpacket) {
    int64_t deadline = 0;
    const ssize_t n = recv_once(fd, m->bytes, sizeof m->bytes, fds, &flags, false, wait, &deadline);
    if (n == kNothingYet) return nothing_yet(wait);
    if (n < 0) {
      return fail(HURRAY_ERR_IPC, "hurray_ipc_recv: recvmsg failed: %s", std::strerror(errno));
    }
    if (n == 0 && fds->n == 0) {
      if (peer_gone(fd)) {
        return fail(HURRAY_ERR_IPC_CLOSED, "hurray_ipc_recv: the peer closed the connection");
      }
      return fail(HURRAY_ERR_IPC,
                  "hurray_ipc_recv: an empty record arrived (no hurray message; it was "
                  "consumed, and the connection is usable)");
    }
    if ((flags & MSG_TRUNC) != 0) {
      return fail(HURRAY_ERR_IPC, "hurray_ipc_recv: the record is longer than %d bytes",
                  HURRAY_IPC_DESCRIPTOR_MAX);
    }
    m->size = static_cast<uint32_t>(n);
    return HURRAY_OK;
  }
  size_t got = 0, want = kWirePrefixSize;
  int64_t deadline = 0;     // see recv_once
  bool rest_timed = false;  // deadline is the rest's
  while (got < want) {
    const bool started = got > 0 || fds->n > 0;
    if (started && !rest_timed) {
      // The rest of the message gets the socket's time once, from its
      // first bytes, not once per read.
      deadline = 0;
      rest_timed = true;
    }
    const ssize_t n =
        recv_once(fd, m->bytes + got, want - got, fds, &flags, started, wait, &deadline);
    if (n == kNothingYet) return nothing_yet(wait);
    if (n == kStalled) return stalled(got, want, wait);
    if (n < 0) {
      return fail(HURRAY_ERR_IPC, "hurray_ipc_recv: recvmsg failed after %zu bytes: %s", got,
                  std::strerror(errno));
    }
    if (n == 0) {
      if (got == 0 && fds->n == 0) {
        return fail(HURRAY_ERR_IPC_CLOSED, "hurray_ipc_recv: the peer closed the connection");
      }
      return fail(HURRAY_ERR_IPC,
                  "hurray_ipc_recv: the stream ended inside a message (%zu of %zu"
                  " bytes)",
                  got, want);
    }
    got += static_cast<size_t>(n);
    if (got == kWirePrefixSize && want == kWirePrefixSize) {
      // total_size, little-endian at offset 12 (ipc §3).
      const uint32_t total =
          static_cast<uint32_t>(m->bytes[12]) | static_cast<uint32_t>(m->bytes[13]) << 8 |
          static_cast<uint32_t>(m->bytes[14]) << 16 | static_cast<uint32_t>(m->bytes[15]) << 24;
      if (total < kWirePrefixSize || total > HURRAY_IPC_DESCRIPTOR_MAX) {
        return fail(HURRAY_ERR_IPC,
                    "hurray_ipc_recv: descriptor total_size %" PRIu32 " is outside %" PRIu32 "..%d",
                    total, kWirePrefixSize, HURRAY_IPC_DESCRIPTOR_MAX);
      }
      want = total;
    }
  }
  m->size = static_cast<uint32_t>(got);
  return HURRAY_OK;
}

// A set message's bytes per record (below any socket's send buffer, so a
// seqpacket record is never refused for its size).
constexpr size_t kSetRecordBytes = 32768;

// The set message in records (docs/impl/ipc.md §10.3): as few as allow at
// most HURRAY_IPC_SET_FDS_PER_RECORD fds and kSetRecordBytes bytes each,
// bytes and fds spread evenly, so that every record has bytes for its fds
// and the first holds the whole header.
int32_t send_set_records(int fd, bool seqpacket, const hurray_ipc_set_message &m) {
  const size_t per = HURRAY_IPC_SET_FDS_PER_RECORD;
  size_t records = (m.nfds + per - 1) / per;
  const size_t by_bytes = (m.size + kSetRecordBytes - 1) / kSetRecordBytes;
  if (by_bytes > records) records = by_bytes;
  if (records == 0) records = 1;
  for (size_t r = 0; r < records; ++r) {
    const size_t b0 = m.size * r / records, b1 = m.size * (r + 1) / records;
    const size_t f0 = m.nfds * r / records, f1 = m.nfds * (r + 1) / records;
    const int32_t st = send_record(fd, seqpacket, m.bytes + b0, b1 - b0, m.fds + f0, f1 - f0,
                                   "hurray_ipc_send_set");
    if (st != HURRAY_OK) return st;
  }
  return HURRAY_OK;
}

// Peeks the set header (kSetHeaderSize bytes) without consuming anything:
// waits as hurray_ipc_recv waits for a message to begin, then at most the
// rest's time for the whole header.
int32_t peek_set_header(int fd, bool seqpacket, const RecvWait &wait, uint8_t *hdr, size_t *got) {
  const bool timed = wait.nonblocking || wait.timeout_ms > 0;
  int64_t deadline = 0, partial_deadline = 0;
  for (;;) {
    const ssize_t n = recv(fd, hdr, kSetHeaderSize, MSG_PEEK | (timed ? MSG_DONTWAIT : 0));
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) {
        return fail(HURRAY_ERR_IPC, "hurray_ipc_recv_set: recv failed: %s", std::strerror(errno));
      }
      if (wait.nonblocking && wait.timeout_ms == 0) return nothing_yet(wait, kSetCall);
      if (deadline == 0) deadline = now_ms() + wait.timeout_ms;
      const int64_t left = deadline - now_ms();
      if (left <= 0) return nothing_yet(wait, kSetCall);
      pollfd p{fd, POLLIN, 0};
      if (poll(&p, 1, static_cast<int>(left > INT32_MAX ? INT32_MAX : left)) < 0 &&
          errno != EINTR) {
        return fail(HURRAY_ERR_IPC, "hurray_ipc_recv_set: poll failed: %s", std::strerror(errno));
      }
      continue;
    }
    if (n == 0) {
      if (!seqpacket || peer_gone(fd)) {
        return fail(HURRAY_ERR_IPC_CLOSED, "hurray_ipc_recv_set: the peer closed the connection");
      }
      char c;
      (void)recv(fd, &c, 0, MSG_DONTWAIT);  // the empty record
      return fail(HURRAY_ERR_IPC,
                  "hurray_ipc_recv_set: an empty record arrived (no hurray message; it was "
                  "consumed, and the connection is usable)");
    }
    *got = static_cast<size_t>(n);
    if (*got >= kSetHeaderSize || seqpacket) return HURRAY_OK;
    // A stream whose header has begun: the rest of it, briefly.
    if (partial_deadline == 0) {
      partial_deadline = now_ms() + (wait.timeout_ms > 0 ? wait.timeout_ms : kPartialWaitMs);
    }
    if (now_ms() >= partial_deadline) return HURRAY_OK;  // the decoder says what is missing
    timespec t{0, 1000000};
    nanosleep(&t, nullptr);
  }
}

// Reads the whole set message (its header peeked and checked) into buf,
// its fds into fds.
int32_t recv_set_message(int fd, bool seqpacket, const RecvWait &wait, uint8_t *buf, size_t total,
                         ReceivedFds *fds) {
  size_t got = 0;
  int64_t deadline = 0;
  while (got < total) {
    int flags = 0;
    const ssize_t n = recv_once(fd, buf + got, total - got, fds, &flags, true, wait, &deadline);
    if (n == kStalled || n == kNothingYet) return stalled(got, total, wait, kSetCall);
    if (n < 0) {
      return fail(HURRAY_ERR_IPC, "hurray_ipc_recv_set: recvmsg failed after %zu bytes: %s", got,
                  std::strerror(errno));
    }
    if (n == 0) {
      return fail(HURRAY_ERR_IPC,
                  "hurray_ipc_recv_set: the connection ended inside a set message (%zu of %zu "
                  "bytes)",
                  got, total);
    }
    if (seqpacket && (flags & MSG_TRUNC) != 0) {
      return fail(HURRAY_ERR_IPC,
                  "hurray_ipc_recv_set: a record is longer than the rest of the set message "
                  "(%zu bytes): the connection is out of step, close it",
                  total - got);
    }
    got += static_cast<size_t>(n);
  }
  return HURRAY_OK;
}

}  // namespace
}  // namespace hurray::detail

extern "C" {

HURRAY_API int32_t hurray_ipc_send(int socket_fd, hurray_buffer *src, uint32_t options) {
  using namespace hurray::detail;
  using namespace hurray::detail;
  if (src == nullptr) return fail(HURRAY_ERR_INVALID_ARGUMENT, "src is NULL");
  bool seqpacket = false;
  int32_t st = check_socket(socket_fd, "hurray_ipc_send", &seqpacket);
  if (st != HURRAY_OK) return st;
  struct Args {
    int fd;
    bool seqpacket;
    uint32_t options;
    uint64_t conn;  // CUDA pools' fds go once per connection (pool_peers.h)
  } args{socket_fd, seqpacket, options, connection_of(socket_fd)};
  return consume_src(
      src, "hurray_ipc_send",
      [](hurray_buffer *inner, void *ctx) {
        auto *a = static_cast<Args *>(ctx);
        PreparedExport p;
        int32_t st = prepare_export(*inner, a->options, nullptr, &p, a->conn);
        if (st != HURRAY_OK) return st;
        st = send_message(a->fd, a->seqpacket, p.msg);
        if (st != HURRAY_OK) {
          abort_export(&p);
          return st;
        }
        // The kernel holds its own copies now (in flight, then the peer's).
        close_message_fds(&p.msg);
        commit_export(&p, inner);
        // The connections whose pools' fds went (pool_peers.h).
        note_connection(a->conn, a->fd);
        sweep_connections(a->conn);
        return static_cast<int32_t>(HURRAY_OK);
      },
      &args);
}

HURRAY_API int32_t hurray_ipc_recv(int socket_fd, hurray_buffer *out) {
  using namespace hurray::detail;
  using namespace hurray::detail;
  if (out == nullptr) return fail(HURRAY_ERR_INVALID_ARGUMENT, "out is NULL");
  bool seqpacket = false;
  int32_t st = check_socket(socket_fd, "hurray_ipc_recv", &seqpacket);
  if (st != HURRAY_OK) return st;
  hurray_ipc_message m;
  m.size = 0;
  ReceivedFds fds;
  st = recv_message(socket_fd, seqpacket, recv_wait_of(socket_fd), &m, &fds);
  if (st == HURRAY_OK && fds.too_many) {
    st = fail(HURRAY_ERR_IPC, "hurray_ipc_recv: the message carried more than %d fds",
              HURRAY_IPC_MAX_FDS);
  }
  const uint64_t conn = connection_of(socket_fd);
  if (st != HURRAY_OK) {
    fds.close_all();
    // The connection is over: the CUDA pools it brought are let go of once
    // their pointers are (pool_peers.h).
    if (st == HURRAY_ERR_IPC_CLOSED) forget_connection(conn);
    sweep_connections(conn);
    return st;
  }
  m.nfds = static_cast<uint32_t>(fds.n);
  for (uint32_t i = 0; i < HURRAY_IPC_MAX_FDS; ++i) m.fds[i] = i < fds.n ? fds.fds[i] : -1;
  st = import_message(&m, nullptr, conn, out);
  if (st != HURRAY_OK) close_message_fds(&m);
  // A connection this process closed without reading its end lets go of
  // its pools here, at a later receive (pool_peers.h).
  note_connection(conn, socket_fd);
  sweep_connections(conn);
  return check::produced(st, out, 1, "hurray_ipc_import");
}

}  // extern "C"

extern "C" {

HURRAY_API int32_t hurray_ipc_send_set(int socket_fd, hurray_buffer *srcs, size_t n,
                                       uint32_t options, size_t *failed_index) {
  using namespace hurray::detail;
  bool seqpacket = false;
  int32_t st = check_socket(socket_fd, "hurray_ipc_send_set", &seqpacket);
  if (st != HURRAY_OK) {
    if (failed_index != nullptr) *failed_index = HURRAY_BATCH_NO_INDEX;
    return st;
  }
  struct Args {
    int fd;
    bool seqpacket;
  } args{socket_fd, seqpacket};
  const uint64_t conn = connection_of(socket_fd);  // pools' fds once per connection
  hurray_ipc_set_message *m = nullptr;
  st = export_set(
      srcs, n, options, failed_index, "hurray_ipc_send_set",
      [](const hurray_ipc_set_message &msg, void *ctx) {
        auto *a = static_cast<Args *>(ctx);
        return send_set_records(a->fd, a->seqpacket, msg);
      },
      &args, &m, conn);
  // The kernel holds its own copies of the fds now (in flight, then the
  // peer's): ours go.
  if (st == HURRAY_OK) {
    const int32_t closed = hurray_ipc_set_message_discard(m);  // never fails
    (void)closed;
    // The connections whose pools' fds went (pool_peers.h).
    note_connection(conn, socket_fd);
    sweep_connections(conn);
  }
  return st;
}

HURRAY_API int32_t hurray_ipc_recv_set(int socket_fd, hurray_buffer *out, size_t capacity,
                                       size_t *count) {
  using namespace hurray::detail;
  if (count == nullptr) return fail(HURRAY_ERR_INVALID_ARGUMENT, "count is NULL");
  if (out == nullptr && capacity > 0) {
    return fail(HURRAY_ERR_INVALID_ARGUMENT, "out is NULL while capacity is %zu", capacity);
  }
  bool seqpacket = false;
  int32_t st = check_socket(socket_fd, "hurray_ipc_recv_set", &seqpacket);
  if (st != HURRAY_OK) return st;
  const RecvWait wait = recv_wait_of(socket_fd);
  uint8_t hdr[kSetHeaderSize];
  size_t got = 0;
  st = peek_set_header(socket_fd, seqpacket, wait, hdr, &got);
  if (st != HURRAY_OK) return st;
  SetHeader h;
  st = decode_set_header(hdr, got, false, &h);
  if (st != HURRAY_OK) return st;  // nothing consumed
  if (h.n_entries > capacity) {
    *count = h.n_entries;
    return fail(HURRAY_ERR_INVALID_ARGUMENT,
                "hurray_ipc_recv_set: the set has %" PRIu32
                " handles, out has room for %zu "
                "(*count says how many; nothing consumed)",
                h.n_entries, capacity);
  }
  void *mem = std::malloc(h.total_size + sizeof(int) * h.nfds);
  if (mem == nullptr) {
    return fail(HURRAY_ERR_OUT_OF_MEMORY, "allocating %" PRIu32 " bytes to receive a set",
                h.total_size);
  }
  auto *fdbuf = static_cast<int *>(mem);
  auto *buf = reinterpret_cast<uint8_t *>(fdbuf + h.nfds);
  ReceivedFds fds;
  fds.fds = fdbuf;
  fds.cap = h.nfds;
  st = recv_set_message(socket_fd, seqpacket, wait, buf, h.total_size, &fds);
  if (st == HURRAY_OK && (fds.too_many || fds.n != h.nfds)) {
    st = fail(HURRAY_ERR_IPC,
              "hurray_ipc_recv_set: the set message brought %s%zu fds, its header says %" PRIu32
              " (the receiver's RLIMIT_NOFILE may be too low)",
              fds.too_many ? "more than " : "", fds.n, h.nfds);
  }
  if (st != HURRAY_OK) {
    fds.close_all();
    std::free(mem);
    return st;
  }
  const uint64_t conn = connection_of(socket_fd);
  st = import_set(buf, h.total_size, fdbuf, fds.n, out, capacity, count, conn);
  std::free(mem);
  // As hurray_ipc_recv: the pools this connection brought (pool_peers.h).
  note_connection(conn, socket_fd);
  sweep_connections(conn);
  return check::produced(st, out, st == HURRAY_OK ? *count : 0, "hurray_ipc_recv_set");
}

}  // extern "C"
