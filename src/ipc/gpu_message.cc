// SPDX-License-Identifier: Apache-2.0
// GPU device memory across processes (docs/impl/ipc.md §6): the export of a
// kDLCUDA / kDLROCM handle as a descriptor of kind 3 / 4 carrying the
// device's UUID, the sender's identity, the vendor's 64-byte legacy IPC
// handle and one fd (the lifetime pipe's write end), or of a CUDA VMM
// allocation as kind 2 with a second fd (the allocation's), and its import:
// the memory mapped in the receiver's process on the receiver's ordinal of
// that GPU (device/gpu_ipc.h), unmapped again by the received handle's
// release; or, back in the process that sent it, a share of the exported
// memory that holds the lifetime fd.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cinttypes>
#include <cstdlib>
#include <cstring>

#include "api/alloc.h"
#include "common/error.h"
#include "device/gpu_ipc.h"
#include "handle/handle.h"
#include "handle/share_block.h"
#include "ipc/message.h"
#include "ipc/pool_peers.h"
#include "ipc/sender.h"
#include "ipc/watcher.h"
#include "ipc/wire.h"

namespace hurray::detail {
namespace {

// Host bookkeeping of a received GPU handle.
struct GpuImportBlock {
  const GpuIpc *ipc;
  hurray_device device;
  void *base;         // what the vendor's open mapped (kinds 3, 4)
  GpuVmmMapping vmm;  // kind 2: what open_vmm mapped (vmm.base non-NULL)
  int lifetime_fd;    // the write end of the sender's pipe
  WireDesc desc;      // as received (the sender's device, identity and handle)
  int64_t dims[1];    // shape then strides (flexible tail)
};

void gpu_import_release(void *block) {
  auto *b = static_cast<GpuImportBlock *>(block);
  if (b->vmm.base != nullptr) {
    b->ipc->close_vmm(b->device, b->vmm);
  } else {
    b->ipc->close(b->device, b->base);
  }
  // Closed after the mapping: the sender's release (which may free the
  // memory) runs only once this process no longer uses it.
  close(b->lifetime_fd);
  std::free(b);
}

// Host bookkeeping of a received pool pointer (kinds 5 and 6, CUDA or HIP).
struct GpuPoolBlock {
  const GpuIpc *ipc;
  hurray_device device;
  void *ptr;         // cuMemPoolImportPointer's / hipMemPoolImportPointer's
  PoolRef *pool;     // the imported pool, one reference
  uint64_t context;  // the incarnation the pool (and so `ptr`) was imported in
  int lifetime_fd;   // the write end of the sender's pipe
  int64_t dims[1];   // shape then strides (flexible tail)
};

// The importer's free comes first and is done when cuMemFree returns
// (cuMemPoolImportPointer: "The imported memory must be freed from all
// importing processes before being freed in the exporting process"); only
// then does the lifetime fd close, after which the sender frees.
void gpu_pool_release(void *block) {
  auto *b = static_cast<GpuPoolBlock *>(block);
  b->ipc->close_pool_pointer(b->device, b->ptr, b->context);  // nothing if reset since
  unref_pool(b->pool);
  close(b->lifetime_fd);
  std::free(b);
}

// A GPU message back in the process that exported it (ipc.md §6): the
// handle shares the export's memory, which the export's watch keeps alive
// while this block holds a write end of its lifetime pipe.
struct GpuLocalBlock {
  int lifetime_fd;  // a write end of this process's own export's pipe
  int64_t dims[1];  // shape then strides (flexible tail)
};

// Closing the fd lets the watch see end of file once every other write end
// is gone: the export's reference is released then, once.
void gpu_local_release(void *block) {
  auto *b = static_cast<GpuLocalBlock *>(block);
  close(b->lifetime_fd);
  std::free(b);
}

// Whether `d` describes exactly the handle `held` the export was made of.
bool describes(const WireDesc &d, const hurray_buffer &held) {
  if (d.device.device_type != held.device.device_type ||
      d.device.device_id != held.device.device_id || d.dtype.code != held.dtype.code ||
      d.dtype.bits != held.dtype.bits || d.dtype.lanes != held.dtype.lanes || d.ndim != held.ndim ||
      d.byte_offset != held.byte_offset || d.flags != held.flags) {
    return false;
  }
  for (int32_t i = 0; i < d.ndim; ++i) {
    if (d.shape[i] != held.shape[i] || d.strides[i] != held.strides[i]) return false;
  }
  return true;
}

// What import_local learns of the export, under the watcher's lock.
struct LocalMatch {
  const WireDesc *d;
  bool same;          // the descriptor describes the exported handle
  void *data;         // its data
  int32_t held_type;  // its device type
};

// The import of a message this process sent (sender identity and lifetime
// pipe both its own): HURRAY_OK with *out set, or *found false when the
// pipe is no export of this process (then the caller opens it as any other).
int32_t import_local(const WireDesc &d, hurray_ipc_message *m, hurray_buffer *out, bool *found) {
  LocalMatch match{&d, false, nullptr, 0};
  *found = find_export(
      m->fds[0],
      [](const hurray_buffer &held, void *ctx) {
        auto *x = static_cast<LocalMatch *>(ctx);
        x->same = describes(*x->d, held);
        x->data = held.data;
        x->held_type = held.device.device_type;
      },
      &match);
  if (!*found) return HURRAY_OK;
  if (!match.same) {
    return fail(HURRAY_ERR_IPC,
                "the descriptor comes from this process's own export (its lifetime pipe) but "
                "does not describe the %s tensor that was exported (device, dtype, shape, "
                "strides, byte_offset or flags differ)",
                device_type_name(match.held_type));
  }
  const size_t meta = sizeof(GpuLocalBlock) + sizeof(int64_t) * (2 * static_cast<size_t>(d.ndim));
  auto *b = static_cast<GpuLocalBlock *>(std::malloc(meta));
  if (b == nullptr) {
    return fail(HURRAY_ERR_OUT_OF_MEMORY, "allocating %zu bytes of host bookkeeping failed", meta);
  }
  b->lifetime_fd = m->fds[0];
  *out = received_handle(d, &gpu_local_release, b, match.data, b->dims);
  m->fds[0] = -1;  // the block owns it now
  if (d.kind == kKindCudaVmmFd || d.kind == kKindCudaPoolFd) {
    close(m->fds[1]);  // not mapped again: the memory is already here
    m->fds[1] = -1;
  }
  m->nfds = 0;
  return HURRAY_OK;
}

// Kind 2's and 5's fds[1]: an open fd (what it refers to is the driver's
// to judge).
int32_t check_allocation_fd(int fd, const char *what) {
  struct stat st;
  if (fd < 0 || fstat(fd, &st) != 0) {
    return fail(HURRAY_ERR_IPC, "fds[1] (%d, %s) is not an open file: %s", fd, what,
                std::strerror(fd < 0 ? EBADF : errno));
  }
  return HURRAY_OK;
}

// The export's IPC event, kept while the receivers may open it: the driver
// references say operations on an opened event after the exporter
// destroyed it are undefined (cuIpcOpenEventHandle, hipIpcOpenEventHandle),
// so it is destroyed only when the watch ends, once every copy of the
// lifetime fd is closed (ipc.md §6).
struct ExportEvent {
  const GpuIpc *ipc;
  hurray_device device;
  void *event;
  uint64_t context;  // GpuIpcExport::event_context
};

void destroy_export_event(void *arg) {
  auto *e = static_cast<ExportEvent *>(arg);
  e->ipc->destroy_event(e->device, e->event, e->context);
  std::free(e);
}

// prepare_gpu_export once the vendor exported the memory as `x`: the
// descriptor, checked again, and the lifetime pipe; `event` then belongs to
// the watch. Closes nothing of `x`.
int32_t finish_gpu_export(const hurray_buffer &src, const GpuIpcExport &x, ExportEvent *event,
                          PreparedExport *p) {
  WireDesc d;
  std::memset(&d, 0, sizeof d);
  d.kind = x.pool != nullptr ? (x.pool_fd >= 0 ? kKindCudaPoolFd : kKindCudaPool)
           : x.vmm_fd >= 0   ? kKindCudaVmmFd
           : src.device.device_type == HURRAY_DEVICE_CUDA ? kKindCudaLegacyIpc
                                                          : kKindHipIpc;
  d.pool_id = x.pool != nullptr ? pool_number(x.pool, x.pool_epoch) : 0;
  d.nfds = wire_fds(d.kind);
  d.flags = src.flags;
  d.device = src.device;
  d.dtype = src.dtype;
  d.ndim = src.ndim;
  d.byte_offset = src.byte_offset;
  d.data_offset = x.data_offset;
  d.region_offset = 0;
  d.region_length = x.alloc_size;
  for (int32_t i = 0; i < src.ndim; ++i) {
    d.shape[i] = src.shape[i];
    d.strides[i] = src.strides[i];
  }
  // Kind 2's handle stays zero.
  if (d.kind != kKindCudaVmmFd) std::memcpy(d.gpu_handle, x.handle, kWireGpuHandleSize);
  d.gpu_flags = kGpuFlagEvent;
  std::memcpy(d.gpu_event, x.event_handle, kWireGpuEventSize);
  std::memcpy(d.gpu_uuid, x.uuid, kWireGpuUuidSize);
  d.sender = this_sender();
  std::memset(&p->msg, 0, sizeof p->msg);
  p->msg.size = encode_descriptor(d, p->msg.bytes);
  // What the receiver will check, checked here first: every byte the
  // elements touch lies inside the one allocation the handle names.
  WireDesc back;
  int32_t st = decode_descriptor(p->msg.bytes, p->msg.size, d.nfds, &back);
  if (st != HURRAY_OK) {
    return fail(HURRAY_ERR_UNSUPPORTED_DEVICE,
                "this %s tensor cannot be sent: %s (its elements must lie in one allocation)",
                device_type_name(src.device.device_type), hurray_last_error());
  }
  int pipe_fds[2];
  if (pipe2(pipe_fds, O_CLOEXEC) != 0) {
    const int err = errno;
    return fail(HURRAY_ERR_IPC, "pipe2 for an IPC export failed: %s", std::strerror(err));
  }
  Watch *w = watch_export(pipe_fds[0], src, &st);  // closes pipe_fds[0] on failure
  if (w == nullptr) {
    close(pipe_fds[1]);
    return st;
  }
  watch_when_done(w, &destroy_export_event, event);
  p->msg.nfds = d.nfds;
  p->msg.fds[0] = pipe_fds[1];
  // -1 for kinds 3, 4 and 6; the message owns it now.
  p->msg.fds[1] = d.kind == kKindCudaPoolFd ? x.pool_fd : x.vmm_fd;
  p->msg.fds[2] = p->msg.fds[3] = -1;
  p->watch = w;
  p->held = src;
  p->copied = false;
  p->forwarded = false;
  return HURRAY_OK;
}

// The received kind-3/4 handle behind `src` (itself or an unchanged share
// of it, or of such a share), or nullptr.
// Whether `src` (or an unchanged share of it) is a received pool pointer.
bool received_pool_pointer(const hurray_buffer &src) {
  const hurray_buffer *h = &src;
  while (is_unchanged_share(*h)) h = &static_cast<const ShareBlock *>(h->user_data)->source;
  return h->release_fn == &gpu_pool_release;
}

const GpuImportBlock *received_block(const hurray_buffer &src) {
  const hurray_buffer *h = &src;
  while (is_unchanged_share(*h)) h = &static_cast<const ShareBlock *>(h->user_data)->source;
  if (h->release_fn != &gpu_import_release) return nullptr;
  const auto *b = static_cast<const GpuImportBlock *>(h->user_data);
  return b->vmm.base == nullptr ? b : nullptr;  // kind 2 is exported again as any VMM mapping
}

// Sends on memory this process opened from another's legacy IPC handle,
// which the drivers do not export again (ipc.md §6): the original
// sender's descriptor with src's layout, and a dup of the lifetime fd, so
// the original export's reference is held by the new message. Back in the
// original sender, the message is imported as its own (import_local).
int32_t forward_import(const hurray_buffer &src, const GpuImportBlock &b, PreparedExport *p) {
  WireDesc d = b.desc;
  d.flags = src.flags;
  d.dtype = src.dtype;
  d.ndim = src.ndim;
  d.byte_offset = src.byte_offset;
  for (int32_t i = 0; i < src.ndim; ++i) {
    d.shape[i] = src.shape[i];
    d.strides[i] = src.strides[i];
  }
  const uintptr_t data = reinterpret_cast<uintptr_t>(src.data);
  const uintptr_t base = reinterpret_cast<uintptr_t>(b.base);
  if (data < base || data - base > d.region_length) {
    return fail(HURRAY_ERR_UNSUPPORTED_DEVICE,
                "this received %s tensor's data lies outside the memory it was received in",
                device_type_name(src.device.device_type));
  }
  d.data_offset = data - base;
  std::memset(&p->msg, 0, sizeof p->msg);
  p->msg.size = encode_descriptor(d, p->msg.bytes);
  WireDesc back;
  int32_t st = decode_descriptor(p->msg.bytes, p->msg.size, d.nfds, &back);
  if (st != HURRAY_OK) {
    return fail(HURRAY_ERR_UNSUPPORTED_DEVICE, "this received %s tensor cannot be sent on: %s",
                device_type_name(src.device.device_type), hurray_last_error());
  }
  const int fd = fcntl(b.lifetime_fd, F_DUPFD_CLOEXEC, 0);
  if (fd < 0) {
    const int err = errno;
    return fail(HURRAY_ERR_IPC, "duplicating a received message's lifetime fd failed: %s",
                std::strerror(err));
  }
  p->msg.nfds = d.nfds;
  p->msg.fds[0] = fd;
  p->msg.fds[1] = p->msg.fds[2] = p->msg.fds[3] = -1;
  p->watch = nullptr;
  p->held = src;
  p->copied = false;
  p->forwarded = true;
  return HURRAY_OK;
}

// Kinds 5 and 6, after import_gpu's checks: the pool (imported from
// fds[1] or the fd kept when the connection brought it, or the import this
// process keeps of it), then the pointer in it, then the wait on the
// sender's event. On success the block owns fds[0] and a reference to the
// pool; kind 5's pool fd is closed. On failure the pool stays imported
// while a connection that brought it lasts (pool_peers.h).
int32_t import_pool_pointer(const WireDesc &d, hurray_ipc_message *m, void *stream, uint64_t conn,
                            const GpuIpc *ipc, hurray_device device, hurray_buffer *out) {
  if (ipc->open_pool == nullptr) {
    return fail(HURRAY_ERR_UNSUPPORTED_DEVICE,
                "%s memory cannot come from a stream-ordered pool (kind %" PRIu32 ")",
                device_type_name(d.device.device_type), d.kind);
  }
  // Kind 5's pool from its fd (or the import this process keeps of it);
  // kind 6's only where this connection brought it (pool_peers.h).
  int32_t st = HURRAY_OK;
  void *handle = nullptr;
  uint64_t context = 0;
  PoolRef *pool =
      acquire_pool(conn, d.sender, d.pool_id, d.kind == kKindCudaPoolFd ? m->fds[1] : -1, ipc,
                   device, &st, &handle, &context);
  if (pool == nullptr) return st;
  const size_t meta = sizeof(GpuPoolBlock) + sizeof(int64_t) * (2 * static_cast<size_t>(d.ndim));
  auto *b = static_cast<GpuPoolBlock *>(std::malloc(meta));
  if (b == nullptr) {
    unref_pool(pool);
    return fail(HURRAY_ERR_OUT_OF_MEMORY, "allocating %zu bytes of host bookkeeping failed", meta);
  }
  void *ptr = nullptr;
  st = ipc->open_pool_pointer(device, handle, d.gpu_handle, &ptr);
  if (st == HURRAY_OK && (d.gpu_flags & kGpuFlagEvent) != 0) {
    // The sender's pending work (its allocation included: "The imported
    // memory must not be accessed before the allocation operation
    // completes in the exporting process"): `stream` waits for it.
    st = ipc->wait_event(device, d.gpu_event, stream);
    if (st != HURRAY_OK) ipc->close_pool_pointer(device, ptr, context);
  }
  if (st != HURRAY_OK) {
    unref_pool(pool);
    std::free(b);
    return st;
  }
  b->ipc = ipc;
  b->device = device;
  b->ptr = ptr;
  b->pool = pool;
  b->context = context;
  b->lifetime_fd = m->fds[0];
  WireDesc here = d;
  here.device = device;
  *out = received_handle(here, &gpu_pool_release, b, static_cast<char *>(ptr) + d.data_offset,
                         b->dims);
  m->fds[0] = -1;  // the block owns it now
  if (d.kind == kKindCudaPoolFd) {
    close(m->fds[1]);  // the imported pool holds what it needs
    m->fds[1] = -1;
  }
  m->nfds = 0;
  return HURRAY_OK;
}

// prepare_gpu_export, `mem_src` the handle whose hurray_alloc memory
// (device_memory_of) says whether the memory is stream-ordered: src
// itself, or a set region's member (src then describes the region).
int32_t prepare_gpu_export_of(const hurray_buffer &src, const hurray_extent &e,
                              const hurray_buffer &mem_src, void *stream, uint64_t conn,
                              PreparedExport *p) {
  const GpuIpc *ipc = gpu_ipc_for(src.device.device_type);
  if (ipc == nullptr) return HURRAY_ERR_UNSUPPORTED_DEVICE;
  if (e.numel == 0 || src.data == nullptr) {
    return fail(HURRAY_ERR_UNSUPPORTED_DEVICE,
                "a %s tensor without elements has no device allocation to send to another "
                "process",
                device_type_name(src.device.device_type));
  }
  if (const GpuImportBlock *b = received_block(src)) return forward_import(src, *b, p);
  if (received_pool_pointer(src)) {
    return fail(HURRAY_ERR_UNSUPPORTED_DEVICE,
                "this %s tensor was received from another process's memory pool, and an "
                "imported pool cannot be exported again; send it on from the process that "
                "allocated it",
                device_type_name(src.device.device_type));
  }
  const DeviceMemory *mem = device_memory_of(mem_src);
  GpuIpcExport x;
  std::memset(&x, 0, sizeof x);
  x.vmm_fd = -1;
  x.pool_fd = -1;
  // The pool's fd goes once per connection (pool_peers.h).
  struct SentCtx {
    uint64_t conn;
  } sent_ctx{conn};
  x.pool_fd_sent = [](const void *pool, uint64_t epoch, void *ctx) {
    return pool_sent_on(static_cast<SentCtx *>(ctx)->conn, pool_number(pool, epoch));
  };
  x.pool_ctx = &sent_ctx;
  int32_t st = ipc->export_memory(src.device, src.data,
                                  mem != nullptr && ipc->is_stream_ordered(*mem), stream, &x);
  if (st != HURRAY_OK) return st;
  // From here on every failure closes the allocation's fd and destroys the
  // event.
  auto *event = static_cast<ExportEvent *>(std::malloc(sizeof(ExportEvent)));
  if (event == nullptr) {
    st = fail(HURRAY_ERR_OUT_OF_MEMORY, "allocating %zu bytes of host bookkeeping failed",
              sizeof(ExportEvent));
  } else {
    *event = ExportEvent{ipc, src.device, x.event, x.event_context};
    st = ipc->device_uuid(src.device.device_id, x.uuid);
  }
  if (st == HURRAY_OK) st = finish_gpu_export(src, x, event, p);
  if (st == HURRAY_OK && x.pool != nullptr && x.pool_fd >= 0 && conn != 0) {
    p->pool_conn = conn;  // recorded as sent once the message went (commit_export)
    p->pool_id = pool_number(x.pool, x.pool_epoch);
  }
  if (st != HURRAY_OK) {
    if (x.pool_fd >= 0) close(x.pool_fd);
    if (x.vmm_fd >= 0) close(x.vmm_fd);
    ipc->destroy_event(src.device, x.event, x.event_context);
    std::free(event);
  }
  return st;
}

}  // namespace

int32_t prepare_gpu_export(const hurray_buffer &src, const hurray_extent &e, void *stream,
                           uint64_t conn, PreparedExport *p) {
  return prepare_gpu_export_of(src, e, src, stream, conn, p);
}

int32_t prepare_gpu_set_region(const hurray_buffer &member, const hurray_buffer &whole,
                               uint64_t conn, PreparedExport *p) {
  p->pool_conn = p->pool_id = 0;
  // Memory this process opened from another's legacy handle goes on as
  // the original sender's allocation (forward_import), as one handle does.
  if (const GpuImportBlock *b = received_block(member)) return forward_import(whole, *b, p);
  hurray_extent e;
  const int32_t st = check_handle(&whole, "a set's GPU region", &e);
  if (st != HURRAY_OK) return st;
  return prepare_gpu_export_of(whole, e, member, nullptr, conn, p);
}

int32_t import_gpu(const WireDesc &d, hurray_ipc_message *m, void *stream, uint64_t conn,
                   hurray_buffer *out) {
  if (d.kind == kKindCudaPoolFd && conn != 0 && !is_this_process(d.sender)) {
    // First, before anything about the message can fail: the connection
    // brought the pool, whose fd is kept until it is imported, so that the
    // kind-6 messages after this one can be imported whatever becomes of
    // this one (ipc.md §6).
    keep_pool_fd(conn, d.sender, d.pool_id, m->fds[1]);
  }
  int32_t st = check_lifetime_fd(m->fds[0], 0);
  if (st != HURRAY_OK) return st;
  if (d.kind == kKindCudaVmmFd || d.kind == kKindCudaPoolFd) {
    st = check_allocation_fd(m->fds[1],
                             d.kind == kKindCudaVmmFd ? "the allocation's fd" : "the pool's fd");
    if (st != HURRAY_OK) return st;
  }
  if (d.kind == kKindCudaPool && conn == 0) {
    // Decided before any driver call: no connection, so no pool it brought.
    return fail(HURRAY_ERR_IPC,
                "the descriptor (kind 6) names pool %" PRIu64 " of process %" PRIu32
                " without its fd: a pool's fd travels once per connection, and kind 6 is "
                "received only by hurray_ipc_recv on the connection that brought the pool, "
                "not by hurray_ipc_import",
                d.pool_id, d.sender.pid);
  }
  if (is_this_process(d.sender)) {
    bool local = false;
    st = import_local(d, m, out, &local);
    if (st != HURRAY_OK || local) return st;
  }
  const GpuIpc *ipc = gpu_ipc_for(d.device.device_type);
  if (ipc == nullptr) return HURRAY_ERR_UNSUPPORTED_DEVICE;
  // The GPU as this process numbers it (the sender's ordinal means nothing
  // here); the handle carries this ordinal.
  hurray_device device{d.device.device_type, 0};
  st = gpu_ordinal_of(*ipc, d.device.device_type, d.gpu_uuid, &device.device_id);
  if (st != HURRAY_OK) return st;
  if (is_pool_kind(d.kind)) return import_pool_pointer(d, m, stream, conn, ipc, device, out);
  const size_t meta = sizeof(GpuImportBlock) + sizeof(int64_t) * (2 * static_cast<size_t>(d.ndim));
  auto *b = static_cast<GpuImportBlock *>(std::malloc(meta));
  if (b == nullptr) {
    return fail(HURRAY_ERR_OUT_OF_MEMORY, "allocating %zu bytes of host bookkeeping failed", meta);
  }
  const bool vmm = d.kind == kKindCudaVmmFd;
  void *base = nullptr;
  GpuVmmMapping mapped{nullptr, 0, 0};
  if (vmm && ipc->open_vmm == nullptr) {
    st = fail(HURRAY_ERR_UNSUPPORTED_DEVICE, "%s memory cannot come as a CUDA VMM fd (kind 2)",
              device_type_name(d.device.device_type));
  } else if (vmm) {
    st = ipc->open_vmm(device, m->fds[1], d.region_length, &mapped);
    base = mapped.base;
  } else {
    st = ipc->open(device, d.gpu_handle, &base);
  }
  if (st == HURRAY_OK && (d.gpu_flags & kGpuFlagEvent) != 0) {
    // The sender's pending work on the memory: `stream` waits for it on
    // the device (ipc.md §6); a failure undoes the mapping.
    st = ipc->wait_event(device, d.gpu_event, stream);
    if (st != HURRAY_OK && vmm) {
      ipc->close_vmm(device, mapped);
    } else if (st != HURRAY_OK) {
      ipc->close(device, base);
    }
  }
  if (st != HURRAY_OK) {
    std::free(b);
    return st;
  }
  b->ipc = ipc;
  b->device = device;
  b->base = base;
  b->vmm = mapped;
  b->lifetime_fd = m->fds[0];
  b->desc = d;
  WireDesc here = d;
  here.device = device;
  *out = received_handle(here, &gpu_import_release, b, static_cast<char *>(base) + d.data_offset,
                         b->dims);
  m->fds[0] = -1;  // the block owns it now
  if (vmm) {
    // The imported handle holds the allocation; its fd is not needed again
    // (cuMemImportFromShareableHandle does not take it over).
    close(m->fds[1]);
    m->fds[1] = -1;
  }
  m->nfds = 0;
  return HURRAY_OK;
}

}  // namespace hurray::detail
