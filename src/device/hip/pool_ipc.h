// SPDX-License-Identifier: Apache-2.0
// HIP stream-ordered pool memory across processes (descriptor kinds 5 and
// 6, docs/impl/ipc.md §6), the counterpart of device/cuda/pool_ipc.h: the
// export step that recognises memory of an IPC-capable pool (hipMemPoolCreate
// with hipMemHandleTypePosixFileDescriptor), the import of a pool and of a
// pointer in it, and libhurray's own IPC-capable pool per device behind
// hurray_alloc_async with HURRAY_ALLOC_SHAREABLE.
//
// Where HIP differs from CUDA: ROCm declares HIP_POINTER_ATTRIBUTE_MEMPOOL_HANDLE
// but does not document that hipPointerGetAttribute answers it (the
// reference marks several of its pointer attributes unsupported), so the
// pool of libhurray's own allocations is known without asking: each is
// recorded with its pool, base and size when it is made and forgotten when
// it is freed. The attribute is asked only for memory libhurray did not
// allocate, and an error from it counts as "not pool memory".
#ifndef HURRAY_SRC_DEVICE_HIP_POOL_IPC_H_
#define HURRAY_SRC_DEVICE_HIP_POOL_IPC_H_

#if defined(HURRAY_WITH_HIP)

#include "device/backend.h"
#include "device/gpu_ipc.h"
#include "device/hip/runtime.h"

namespace hurray::detail {

// DeviceMemory::order of libhurray's own pool memory (hip.cc's orders
// 0 to 3 are the others): hipFreeAsync on the stream, and the allocation
// forgotten by the export first (hip_pool_forget).
constexpr uint32_t kHipFreeOnPoolStream = 4;

// With the device current: for pool memory at `data` (one of libhurray's
// own allocations, or what hipPointerGetAttribute(
// HIP_POINTER_ATTRIBUTE_MEMPOOL_HANDLE) names a pool for), the pool's fd
// (hipMemPoolExportToShareableHandle, POSIX fd, made close-on-exec) unless
// out->pool_fd_sent answers that it went already, and the allocation's
// export data (hipMemPoolExportPointer of its base). A failure returns its
// hipError_t with *call naming the entry point (no fd left open).
hipError_t hip_pool_export(const HipRuntime &r, const void *data, GpuIpcExport *out,
                           const char **call, PoolFound *found);

// HURRAY_ERR_UNSUPPORTED_DEVICE with the message for default-pool memory
// (hipMallocAsync) and kNotExportable.
int32_t hip_pool_refuse_not_exportable(hurray_device device, const void *data);

// libhurray's pool allocation at `ptr` is about to be freed.
void hip_pool_forget(const void *ptr);

// GpuIpc's pool entry points for HIP (gpu_ipc.h).
int32_t hip_pool_open(hurray_device device, int fd, void **pool);
void hip_pool_close(hurray_device device, void *pool);
int32_t hip_pool_open_pointer(hurray_device device, void *pool, const uint8_t *data, void **ptr);
void hip_pool_close_pointer(hurray_device device, void *ptr);
int32_t hip_pool_alloc_shareable(hurray_device device, uint64_t nbytes, void *stream,
                                 DeviceMemory *mem);

}  // namespace hurray::detail

#endif  // HURRAY_WITH_HIP

#endif  // HURRAY_SRC_DEVICE_HIP_POOL_IPC_H_
