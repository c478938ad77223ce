// SPDX-License-Identifier: Apache-2.0
// GPU device memory across processes (docs/impl/ipc.md §6): the export of a
// kDLCUDA / kDLROCM handle as a descriptor of kind 3 / 4 carrying the
// vendor's 64-byte legacy IPC handle and one fd (the lifetime pipe's write
// end), or of a CUDA VMM allocation as kind 2 with a second fd (the
// allocation's), and its import: the memory mapped in the receiver's
// process (device/gpu_ipc.h), unmapped again by the received handle's
// release.
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
#include "ipc/message.h"
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

// Kind 2's fds[1]: an open fd (what it refers to is the driver's to judge).
int32_t check_allocation_fd(int fd) {
  struct stat st;
  if (fd < 0 || fstat(fd, &st) != 0) {
    return fail(HURRAY_ERR_IPC, "fds[1] (%d, the allocation's fd) is not an open file: %s", fd,
                std::strerror(fd < 0 ? EBADF : errno));
  }
  return HURRAY_OK;
}

// prepare_gpu_export once the vendor exported the memory as `x`: the
// descriptor, checked again, and the lifetime pipe. Closes nothing of `x`.
int32_t finish_gpu_export(const hurray_buffer &src, const GpuIpcExport &x, PreparedExport *p) {
  WireDesc d;
  std::memset(&d, 0, sizeof d);
  d.kind = x.vmm_fd >= 0                                  ? kKindCudaVmmFd
           : src.device.device_type == HURRAY_DEVICE_CUDA ? kKindCudaLegacyIpc
                                                          : kKindHipIpc;
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
  // Kind 2's area stays zero.
  if (d.kind != kKindCudaVmmFd) std::memcpy(d.gpu_handle, x.handle, kWireGpuHandleSize);
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
  p->msg.nfds = d.nfds;
  p->msg.fds[0] = pipe_fds[1];
  p->msg.fds[1] = x.vmm_fd;  // -1 for kinds 3 and 4; the message owns it now
  p->msg.fds[2] = p->msg.fds[3] = -1;
  p->watch = w;
  p->held = src;
  p->copied = false;
  return HURRAY_OK;
}

}  // namespace

int32_t prepare_gpu_export(const hurray_buffer &src, const hurray_extent &e, PreparedExport *p) {
  const GpuIpc *ipc = gpu_ipc_for(src.device.device_type);
  if (ipc == nullptr) return HURRAY_ERR_UNSUPPORTED_DEVICE;
  if (e.numel == 0 || src.data == nullptr) {
    return fail(HURRAY_ERR_UNSUPPORTED_DEVICE,
                "a %s tensor without elements has no device allocation to send to another "
                "process",
                device_type_name(src.device.device_type));
  }
  const DeviceMemory *mem = device_memory_of(src);
  GpuIpcExport x;
  std::memset(&x, 0, sizeof x);
  x.vmm_fd = -1;
  int32_t st =
      ipc->export_memory(src.device, src.data, mem != nullptr && ipc->is_stream_ordered(*mem), &x);
  if (st != HURRAY_OK) return st;
  // From here on every failure closes the allocation's fd.
  st = finish_gpu_export(src, x, p);
  if (st != HURRAY_OK && x.vmm_fd >= 0) close(x.vmm_fd);
  return st;
}

int32_t import_gpu(const WireDesc &d, hurray_ipc_message *m, hurray_buffer *out) {
  int32_t st = check_lifetime_fd(m->fds[0], 0);
  if (st != HURRAY_OK) return st;
  const GpuIpc *ipc = gpu_ipc_for(d.device.device_type);
  if (ipc == nullptr) return HURRAY_ERR_UNSUPPORTED_DEVICE;
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
    st = check_allocation_fd(m->fds[1]);
    if (st == HURRAY_OK) st = ipc->open_vmm(d.device, m->fds[1], d.region_length, &mapped);
    base = mapped.base;
  } else {
    st = ipc->open(d.device, d.gpu_handle, &base);
  }
  if (st != HURRAY_OK) {
    std::free(b);
    return st;
  }
  b->ipc = ipc;
  b->device = d.device;
  b->base = base;
  b->vmm = mapped;
  b->lifetime_fd = m->fds[0];
  *out = received_handle(d, &gpu_import_release, b, static_cast<char *>(base) + d.data_offset,
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
