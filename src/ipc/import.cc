// SPDX-License-Identifier: Apache-2.0
// hurray_ipc_import (docs/impl/ipc.md §4): the descriptor is decoded and
// checked in full (wire.cc), then the fds (a memfd sealed against
// shrinking, large enough for the region; the write end of a pipe), and
// only then is anything mapped. Every fd is closed on every failure.
#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cinttypes>
#include <cstdlib>
#include <cstring>

#include "checking/checking.h"
#include "common/error.h"
#include "device/memfd_block.h"
#include "ipc/message.h"
#include "ipc/wire.h"

namespace hurray::detail {
namespace {

// The largest region a receiver maps: HURRAY_IPC_MAX_BYTES when set to a
// positive number of bytes, else this machine's physical memory (a sender
// could otherwise hand over a sparse memfd of any size, whose pages the
// receiver's reads would fault in and be charged for).
}  // namespace

uint64_t map_limit(bool *from_env) {
  const char *env = std::getenv("HURRAY_IPC_MAX_BYTES");
  // Decimal digits only: strtoull alone would take "-1" as 2^64 - 1 (no
  // limit at all) and skip leading spaces.
  if (env != nullptr && *env >= '0' && *env <= '9' &&
      std::strspn(env, "0123456789") == std::strlen(env)) {
    char *end = nullptr;
    errno = 0;
    const unsigned long long v = std::strtoull(env, &end, 10);
    if (errno == 0 && *end == '\0' && v > 0) {
      *from_env = true;
      return v;
    }
  }
  *from_env = false;
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page = sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page <= 0) return UINT64_MAX;
  return static_cast<uint64_t>(pages) * static_cast<uint64_t>(page);
}

int32_t check_memfd(int fd, size_t index, const WireDesc &d, uint64_t limit, bool from_env) {
  struct stat st;
  if (fd < 0 || fstat(fd, &st) != 0) {
    return fail(HURRAY_ERR_IPC, "fds[%zu] (%d) is not an open file: %s", index, fd,
                std::strerror(fd < 0 ? EBADF : errno));
  }
  if (!S_ISREG(st.st_mode)) {
    return fail(HURRAY_ERR_IPC, "fds[%zu] is not a memfd (not a file)", index);
  }
  const int seals = fcntl(fd, F_GET_SEALS);
  if (seals < 0) {
    return fail(HURRAY_ERR_IPC, "fds[%zu] is not a memfd (F_GET_SEALS: %s)", index,
                std::strerror(errno));
  }
  if ((seals & F_SEAL_SHRINK) == 0) {
    return fail(HURRAY_ERR_IPC,
                "fds[%zu] is a memfd not sealed against shrinking (F_SEAL_SHRINK): its sender "
                "could cut the pages from under the mapping",
                index);
  }
  if (d.region_length > limit) {
    return fail(HURRAY_ERR_IPC,
                "the message's region is %" PRIu64 " bytes, more than %s (%" PRIu64
                " bytes): refused before mapping (set HURRAY_IPC_MAX_BYTES to accept it)",
                d.region_length,
                from_env ? "HURRAY_IPC_MAX_BYTES" : "this machine's physical memory", limit);
  }
  const uint64_t size = static_cast<uint64_t>(st.st_size);
  if (d.region_offset > size || d.region_length > size - d.region_offset) {
    return fail(HURRAY_ERR_IPC,
                "descriptor region [%" PRIu64 ", +%" PRIu64 ") is beyond the memfd's %" PRIu64
                " bytes",
                d.region_offset, d.region_length, size);
  }
  const int mode = fcntl(fd, F_GETFL);
  if (mode < 0) {
    return fail(HURRAY_ERR_IPC, "fcntl(F_GETFL) of fds[%zu]: %s", index, std::strerror(errno));
  }
  if ((mode & O_ACCMODE) == O_RDONLY && (d.flags & HURRAY_FLAG_READ_ONLY) == 0) {
    return fail(HURRAY_ERR_IPC,
                "fds[%zu] is open read-only but the descriptor lacks HURRAY_FLAG_READ_ONLY", index);
  }
  return HURRAY_OK;
}

namespace {

// Maps the checked message; on success the block owns both fds.
int32_t map_message(const WireDesc &d, int memfd, int lifetime_fd, hurray_buffer *out) {
  MemfdBlock *b = new_memfd_block(d.ndim);
  if (b == nullptr) return HURRAY_ERR_OUT_OF_MEMORY;
  const uint64_t page = page_size();
  const uint64_t map_off = d.region_offset / page * page;
  const uint64_t map_len = d.region_offset + d.region_length - map_off;
  const int prot = (d.flags & HURRAY_FLAG_READ_ONLY) != 0 ? PROT_READ : PROT_READ | PROT_WRITE;
  void *p = mmap(nullptr, static_cast<size_t>(map_len), prot, MAP_SHARED, memfd,
                 static_cast<off_t>(map_off));
  if (p == MAP_FAILED) {
    const int err = errno;
    std::free(b);
    return fail(err == ENOMEM ? HURRAY_ERR_OUT_OF_MEMORY : HURRAY_ERR_IPC,
                "mmap of %" PRIu64 " bytes at offset %" PRIu64 " of the received memfd failed: %s",
                map_len, map_off, std::strerror(err));
  }
  b->memfd = memfd;
  b->lifetime_fd = lifetime_fd;
  b->map = p;
  b->map_length = map_len;
  b->map_file_offset = map_off;
  *out = received_handle(d, &memfd_release, b, static_cast<char *>(p) + (d.data_offset - map_off),
                         b->dims);
  return HURRAY_OK;
}

}  // namespace

int32_t import_message(hurray_ipc_message *m, void *stream, uint64_t conn, hurray_buffer *out) {
  if (out == nullptr) return fail(HURRAY_ERR_INVALID_ARGUMENT, "out is NULL");
  if (m->nfds > HURRAY_IPC_MAX_FDS) {
    return fail(HURRAY_ERR_INVALID_ARGUMENT, "m->nfds is %" PRIu32 " (at most %d)", m->nfds,
                HURRAY_IPC_MAX_FDS);
  }
  if (m->size > HURRAY_IPC_DESCRIPTOR_MAX) {
    return fail(HURRAY_ERR_INVALID_ARGUMENT, "m->size is %" PRIu32 " (at most %d)", m->size,
                HURRAY_IPC_DESCRIPTOR_MAX);
  }
  // Every fd is this call's from here on (kept on success, closed on
  // failure): kept ones never pass to programs this process starts (a
  // child holding the lifetime fd would delay the sender's return and could
  // map the tensor), whatever transport brought them (docs/impl/ipc.md,
  // "Timeouts and non-blocking sockets").
  for (uint32_t i = 0; i < m->nfds; ++i) {
    if (m->fds[i] >= 0) (void)fcntl(m->fds[i], F_SETFD, FD_CLOEXEC);
  }
  WireDesc d;
  int32_t st = decode_descriptor(m->bytes, m->size, m->nfds, &d);
  if (st != HURRAY_OK) return st;
  if (is_gpu_ipc_kind(d.kind)) return import_gpu(d, m, stream, conn, out);
  bool from_env = false;
  const uint64_t limit = map_limit(&from_env);
  st = check_memfd(m->fds[0], 0, d, limit, from_env);
  if (st != HURRAY_OK) return st;
  st = check_lifetime_fd(m->fds[1], 1);
  if (st != HURRAY_OK) return st;
  st = map_message(d, m->fds[0], m->fds[1], out);
  if (st != HURRAY_OK) return st;
  // The block owns them now.
  m->fds[0] = m->fds[1] = -1;
  m->nfds = 0;
  return HURRAY_OK;
}

int32_t check_lifetime_fd(int fd, int index) {
  struct stat st;
  if (fd < 0 || fstat(fd, &st) != 0) {
    return fail(HURRAY_ERR_IPC, "fds[%d] (%d) is not an open file: %s", index, fd,
                std::strerror(fd < 0 ? EBADF : errno));
  }
  const int mode = fcntl(fd, F_GETFL);
  if (!S_ISFIFO(st.st_mode) || mode < 0 || (mode & O_ACCMODE) != O_WRONLY) {
    return fail(HURRAY_ERR_IPC, "fds[%d] is not the write end of a pipe (the lifetime fd)", index);
  }
  return HURRAY_OK;
}

}  // namespace hurray::detail

extern "C" {

HURRAY_API int32_t hurray_ipc_import(hurray_ipc_message *m, hurray_buffer *out) {
  using namespace hurray::detail;
  if (m == nullptr) return fail(HURRAY_ERR_INVALID_ARGUMENT, "m is NULL");
  int32_t st = import_message(m, nullptr, 0, out);
  if (st != HURRAY_OK) close_message_fds(m);
  return check::produced(st, out, 1, "hurray_ipc_import");
}

HURRAY_API int32_t hurray_ipc_import_async(hurray_ipc_message *m, void *stream,
                                           hurray_buffer *out) {
  using namespace hurray::detail;
  if (m == nullptr) return fail(HURRAY_ERR_INVALID_ARGUMENT, "m is NULL");
  int32_t st = import_message(m, stream, 0, out);
  if (st != HURRAY_OK) close_message_fds(m);
  return check::produced(st, out, 1, "hurray_ipc_import_async");
}

}  // extern "C"
