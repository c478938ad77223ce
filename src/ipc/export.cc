// SPDX-License-Identifier: Apache-2.0
// hurray_ipc_export and hurray_ipc_message_discard (docs/impl/ipc.md §4):
// a handle becomes a descriptor, a dup of its memfd and the write end of a
// new lifetime pipe whose read end the watcher keeps with the reference.
#include <errno.h>
#include <fcntl.h>
#include <unistd.h>

#include <cinttypes>
#include <cstdio>
#include <cstring>

#include "checking/checking.h"
#include "common/diagnostics.h"
#include "common/error.h"
#include "copy/host.h"
#include "copy/plan.h"
#include "device/memfd_block.h"
#include "handle/handle.h"
#include "ipc/message.h"
#include "ipc/pool_peers.h"
#include "ipc/wire.h"

namespace hurray::detail {
namespace {

constexpr uint32_t kKnownOptions = HURRAY_IPC_ZERO_COPY_ONLY;

// True when every byte the handle touches, and its data address, lie in
// b's mapping.
bool within_mapping(const hurray_buffer &h, const hurray_extent &e, const MemfdBlock &b) {
  const uintptr_t map = reinterpret_cast<uintptr_t>(b.map);
  const uintptr_t end = map + static_cast<uintptr_t>(b.map_length);
  const uintptr_t data = reinterpret_cast<uintptr_t>(h.data);
  if (e.numel == 0) return true;  // no byte touched: the data address is not sent
  if (data < map || data > end) return false;
  // lowest <= 0 <= highest is not given (byte_offset moves both), so each
  // side is compared in the direction it points.
  const uint64_t below = data - map, above = end - data;
  const bool lo_ok = e.lowest >= 0 ? static_cast<uint64_t>(e.lowest) <= above
                                   : uint64_t{0} - static_cast<uint64_t>(e.lowest) <= below;
  const bool hi_ok = e.highest >= 0 ? static_cast<uint64_t>(e.highest) <= above
                                    : uint64_t{0} - static_cast<uint64_t>(e.highest) <= below;
  return lo_ok && hi_ok;
}

// A compact copy of h's elements in new shareable memory.
int32_t copy_to_memfd(const hurray_buffer &h, const hurray_extent &e, hurray_buffer *out) {
  if (!e.contiguous && e.itemsize_bits % 8 != 0) {
    return fail(HURRAY_ERR_UNSUPPORTED_DTYPE,
                "sending a non-contiguous tensor of packed %lld-bit elements needs a copy, "
                "which is not supported; make it contiguous first",
                static_cast<long long>(e.itemsize_bits));
  }
  const uint64_t flags =
      HURRAY_FLAG_IS_COPIED | (h.flags & (HURRAY_FLAG_READ_ONLY | HURRAY_FLAG_SUBBYTE_PADDED));
  const uint64_t nbytes =
      e.contiguous ? static_cast<uint64_t>(e.highest - e.lowest)
                   : static_cast<uint64_t>(e.numel) * static_cast<uint64_t>(e.itemsize_bits / 8);
  hurray_buffer dst;
  int32_t st = shareable_cpu_alloc(h.dtype, h.ndim, h.shape, flags, nbytes, &dst);
  if (st != HURRAY_OK) return st;
  if (e.numel > 0 && e.contiguous) {
    std::memcpy(dst.data,
                reinterpret_cast<const void *>(reinterpret_cast<uintptr_t>(h.data) +
                                               static_cast<uintptr_t>(e.lowest)),
                static_cast<size_t>(nbytes));
  } else if (e.numel > 0) {
    CopyPlan plan;
    st = make_copy_plan(h.ndim, h.shape, h.strides, dst.strides, e.itemsize_bits / 8, &plan);
    if (st != HURRAY_OK) {
      hurray_buffer_release(&dst);
      return st;
    }
    copy_plan_host(plan,
                   reinterpret_cast<const void *>(reinterpret_cast<uintptr_t>(h.data) +
                                                  static_cast<uintptr_t>(h.byte_offset)),
                   dst.data);
  }
  *out = dst;
  return HURRAY_OK;
}

int32_t errno_fail(const char *call) {
  const int err = errno;
  return fail(HURRAY_ERR_IPC, "%s for an IPC export failed: %s", call, std::strerror(err));
}

}  // namespace

void close_message_fds(hurray_ipc_message *m) {
  const uint32_t n = m->nfds < HURRAY_IPC_MAX_FDS ? m->nfds : HURRAY_IPC_MAX_FDS;
  for (uint32_t i = 0; i < n; ++i) {
    // A hostile message may name one fd twice: close it once (a second close
    // could hit an fd another thread opened meanwhile).
    bool seen = false;
    for (uint32_t j = 0; j < i; ++j) seen = seen || m->fds[j] == m->fds[i];
    if (m->fds[i] >= 0 && !seen) close(m->fds[i]);
  }
  for (uint32_t i = 0; i < n; ++i) m->fds[i] = -1;
  m->nfds = 0;
}

int32_t prepare_export(const hurray_buffer &src, uint32_t options, void *stream, PreparedExport *p,
                       uint64_t conn) {
  p->pool_conn = p->pool_id = 0;
  if ((options & ~kKnownOptions) != 0) {
    return fail(HURRAY_ERR_INVALID_ARGUMENT, "options 0x%" PRIx32 " has unknown bits", options);
  }
  hurray_extent e;
  int32_t st = check_handle(&src, "src", &e);
  if (st != HURRAY_OK) return st;
  // GPU device memory is always sent zero-copy (never staged through the
  // host): HURRAY_IPC_ZERO_COPY_ONLY changes nothing for it.
  if (src.device.device_type != HURRAY_DEVICE_CPU) {
    return prepare_gpu_export(src, e, stream, conn, p);
  }
  const MemfdBlock *b = memfd_block_of(src);
  hurray_buffer held = src;
  bool copied = false;
  if (b == nullptr || !within_mapping(src, e, *b)) {
    if ((options & HURRAY_IPC_ZERO_COPY_ONLY) != 0) {
      return fail(HURRAY_ERR_UNSUPPORTED_DEVICE,
                  "HURRAY_IPC_ZERO_COPY_ONLY: this CPU memory is not shareable (allocate it "
                  "with hurray_alloc and HURRAY_ALLOC_SHAREABLE, or send without the option "
                  "to copy it once)");
    }
    st = copy_to_memfd(src, e, &held);
    if (st != HURRAY_OK) return st;
    st = hurray_buffer_extent(&held, &e);
    if (st != HURRAY_OK) {
      hurray_buffer_release(&held);
      return st;
    }
    b = static_cast<const MemfdBlock *>(held.user_data);
    copied = true;
  }

  WireDesc d;
  d.kind = kKindCpuMemfd;
  d.nfds = kCpuMemfdFds;
  d.flags = held.flags;
  d.device = held.device;
  d.dtype = held.dtype;
  d.ndim = held.ndim;
  d.byte_offset = held.byte_offset;
  d.region_offset = b->map_file_offset;
  d.region_length = b->map_length;
  d.data_offset = e.numel == 0 ? b->map_file_offset
                               : b->map_file_offset + (reinterpret_cast<uintptr_t>(held.data) -
                                                       reinterpret_cast<uintptr_t>(b->map));
  for (int32_t i = 0; i < held.ndim; ++i) {
    d.shape[i] = held.shape[i];
    d.strides[i] = held.strides[i];
  }
  int pipe_fds[2];
  if (pipe2(pipe_fds, O_CLOEXEC) != 0) {
    st = errno_fail("pipe2");
    if (copied) hurray_buffer_release(&held);
    return st;
  }
  // A read-only handle travels as a read-only open of the memfd (a new open
  // file description through /proc), so that the receiver cannot map or
  // write it writable whatever it does with the flag; others as a dup.
  const bool read_only = (held.flags & HURRAY_FLAG_READ_ONLY) != 0;
  int memfd;
  if (read_only) {
    char path[40];
    std::snprintf(path, sizeof path, "/proc/self/fd/%d", b->memfd);
    memfd = open(path, O_RDONLY | O_CLOEXEC);
  } else {
    memfd = fcntl(b->memfd, F_DUPFD_CLOEXEC, 0);
  }
  if (memfd < 0) {
    st = errno_fail(read_only ? "open(/proc/self/fd/N, O_RDONLY) of the memfd (a read-only "
                                "handle is sent read-only; is /proc mounted?)"
                              : "fcntl(F_DUPFD_CLOEXEC) of the memfd");
    close(pipe_fds[0]);
    close(pipe_fds[1]);
    if (copied) hurray_buffer_release(&held);
    return st;
  }
  Watch *w = watch_export(pipe_fds[0], held, &st);  // closes pipe_fds[0] on failure
  if (w == nullptr) {
    close(pipe_fds[1]);
    close(memfd);
    if (copied) hurray_buffer_release(&held);
    return st;
  }
  std::memset(&p->msg, 0, sizeof p->msg);
  p->msg.size = encode_descriptor(d, p->msg.bytes);
  p->msg.nfds = kCpuMemfdFds;
  p->msg.fds[0] = memfd;
  p->msg.fds[1] = pipe_fds[1];
  p->msg.fds[2] = p->msg.fds[3] = -1;
  p->watch = w;
  p->held = held;
  p->copied = copied;
  p->forwarded = false;
  return HURRAY_OK;
}

void commit_export(PreparedExport *p, hurray_buffer *src) {
  if (p->pool_conn != 0) mark_pool_sent(p->pool_conn, p->pool_id);
  if (p->forwarded) {
    hurray_buffer_release(src);  // the message holds the original sender's reference
  } else if (p->copied) {
    count_ipc_copy();
    hurray_buffer_release(src);  // the copy went; the original is done
  } else {
    clear(src);  // its reference lives on in the watch
  }
}

void abort_export(PreparedExport *p) {
  // The write end is still in msg, so the watcher cannot have seen end of
  // file: take the watch back first, then close.
  if (p->watch != nullptr) unwatch_export(p->watch);
  close_message_fds(&p->msg);
  if (p->copied) hurray_buffer_release(&p->held);
}

int32_t consume_src(hurray_buffer *src, const char *name,
                    int32_t (*step)(hurray_buffer *inner, void *ctx), void *ctx) {
  if (check::is_tracked(src)) return check::consume(src, name, step, ctx, nullptr, 0);
  return step(src, ctx);
}

}  // namespace hurray::detail

namespace hurray::detail {
namespace {

int32_t export_impl(hurray_buffer *src, uint32_t options, void *stream, hurray_ipc_message *out,
                    const char *name) {
  if (out == nullptr) return fail(HURRAY_ERR_INVALID_ARGUMENT, "out is NULL");
  if (src == nullptr) return fail(HURRAY_ERR_INVALID_ARGUMENT, "src is NULL");
  struct Args {
    uint32_t options;
    void *stream;
    hurray_ipc_message *out;
  } args{options, stream, out};
  return consume_src(
      src, name,
      [](hurray_buffer *inner, void *ctx) {
        auto *a = static_cast<Args *>(ctx);
        PreparedExport p;
        int32_t st = prepare_export(*inner, a->options, a->stream, &p);
        if (st != HURRAY_OK) return st;
        commit_export(&p, inner);
        *a->out = p.msg;
        return static_cast<int32_t>(HURRAY_OK);
      },
      &args);
}

}  // namespace
}  // namespace hurray::detail

extern "C" {

HURRAY_API int32_t hurray_ipc_export(hurray_buffer *src, uint32_t options,
                                     hurray_ipc_message *out) {
  return hurray::detail::export_impl(src, options, nullptr, out, "hurray_ipc_export");
}

HURRAY_API int32_t hurray_ipc_export_async(hurray_buffer *src, uint32_t options, void *stream,
                                           hurray_ipc_message *out) {
  return hurray::detail::export_impl(src, options, stream, out, "hurray_ipc_export_async");
}

HURRAY_API int32_t hurray_ipc_message_discard(hurray_ipc_message *m) {
  using namespace hurray::detail;
  if (m == nullptr) return fail(HURRAY_ERR_INVALID_ARGUMENT, "m is NULL");
  const uint32_t nfds = m->nfds;
  close_message_fds(m);
  if (nfds > HURRAY_IPC_MAX_FDS) {
    return fail(HURRAY_ERR_INVALID_ARGUMENT,
                "m->nfds is %" PRIu32 " (at most %d); the %d entries were closed", nfds,
                HURRAY_IPC_MAX_FDS, HURRAY_IPC_MAX_FDS);
  }
  return HURRAY_OK;
}

}  // extern "C"
