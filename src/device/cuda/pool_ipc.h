// SPDX-License-Identifier: Apache-2.0
// CUDA stream-ordered pool memory across processes (descriptor kinds 5 and
// 6, docs/impl/ipc.md §6): the export step that recognises memory of an
// IPC-capable pool (cuMemPoolCreate with CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
// the import of a pool and of a pointer in it, and libhurray's own
// IPC-capable pool per device behind hurray_alloc_async with
// HURRAY_ALLOC_SHAREABLE.
#ifndef HURRAY_SRC_DEVICE_CUDA_POOL_IPC_H_
#define HURRAY_SRC_DEVICE_CUDA_POOL_IPC_H_

#if defined(HURRAY_WITH_CUDA)

#include "device/backend.h"
#include "device/cuda/driver.h"
#include "device/gpu_ipc.h"

namespace hurray::detail {

// With the device's context current: cuPointerGetAttribute(
// CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE) of data; for pool memory the
// allocation's range (cuMemGetAddressRange), the pool's fd
// (cuMemPoolExportToShareableHandle, POSIX fd, made close-on-exec) unless
// out->pool_fd_sent answers that it went already, and the allocation's
// export data (cuMemPoolExportPointer of its base). A failure returns its
// CUresult with *call naming the entry point (no fd left open).
CUresult pool_export(const CudaDriver &d, const void *data, GpuIpcExport *out, const char **call,
                     PoolFound *found);

// HURRAY_ERR_UNSUPPORTED_DEVICE with the message for kNotExportable.
int32_t pool_refuse_not_exportable(hurray_device device, const void *data);

// GpuIpc's pool entry points for CUDA (gpu_ipc.h).
int32_t pool_open(hurray_device device, int fd, void **pool);
void pool_close(hurray_device device, void *pool);
int32_t pool_open_pointer(hurray_device device, void *pool, const uint8_t *data, void **ptr);
void pool_close_pointer(hurray_device device, void *ptr);
int32_t pool_alloc_shareable(hurray_device device, uint64_t nbytes, void *stream,
                             DeviceMemory *mem);

}  // namespace hurray::detail

#endif  // HURRAY_WITH_CUDA

#endif  // HURRAY_SRC_DEVICE_CUDA_POOL_IPC_H_
