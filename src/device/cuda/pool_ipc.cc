// SPDX-License-Identifier: Apache-2.0
// CUDA stream-ordered pool memory across processes (pool_ipc.h; descriptor
// kinds 5 and 6, docs/impl/ipc.md §6), after the CUDA Driver API
// reference's "Stream Ordered Memory Allocator" section
// (cuMemPoolExportToShareableHandle, cuMemPoolImportFromShareableHandle,
// cuMemPoolExportPointer, cuMemPoolImportPointer) and the CUDA Programming
// Guide's "Stream Ordered Memory Allocator" chapter ("Interprocess
// communication support": a pool is shared once as an OS handle, each
// allocation as 64 bytes of export data; importers free before the
// exporter; imported pools cannot allocate; the default pool has no
// shareable handle type).
#if defined(HURRAY_WITH_CUDA)

#include "device/cuda/pool_ipc.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cinttypes>
#include <cstring>
#include <mutex>

#include "common/error.h"
#include "device/cuda/vendor.h"
#include "device/cuda/vmm_ipc.h"

namespace hurray::detail {
namespace {

static_assert(sizeof(CUmemPoolPtrExportData) == kGpuIpcHandleBytes,
              "CUmemPoolPtrExportData is 64 bytes");

constexpr uint32_t kFreeOnStream = 1;  // cuda.cc's order of stream-ordered memory

int32_t missing(const CudaDriver &d) {
  if (d.pool_ipc()) return HURRAY_OK;
  return fail(HURRAY_ERR_UNSUPPORTED_DEVICE,
              "this CUDA driver lacks the memory-pool IPC entry points (cuPointerGetAttribute, "
              "cuMemPoolCreate, cuMemAllocFromPoolAsync, cuMemPoolExportToShareableHandle, "
              "cuMemPoolImportFromShareableHandle, cuMemPoolExportPointer, "
              "cuMemPoolImportPointer, cuMemPoolDestroy)");
}

// libhurray's own IPC-capable pool of each device, made on first use and
// never destroyed (its allocations may be freed at any time until exit).
constexpr int kMaxPools = 64;
std::atomic<CUmemoryPool> g_pools[kMaxPools];
std::mutex g_pools_mu;

// With the device's context current.
CUresult own_pool(const CudaDriver &d, int32_t ordinal, CUmemoryPool *out, const char **call) {
  CUmemoryPool p = g_pools[ordinal].load(std::memory_order_acquire);
  if (p != nullptr) {
    *out = p;
    return CUDA_SUCCESS;
  }
  std::lock_guard<std::mutex> lock(g_pools_mu);
  p = g_pools[ordinal].load(std::memory_order_acquire);
  if (p == nullptr) {
    CUmemPoolProps props;
    std::memset(&props, 0, sizeof props);
    props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    props.handleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    props.location.id = ordinal;
    *call = "cuMemPoolCreate";
    CUresult r = d.mem_pool_create(&p, &props);
    if (r != CUDA_SUCCESS) return r;
    g_pools[ordinal].store(p, std::memory_order_release);
  }
  *out = p;
  return CUDA_SUCCESS;
}

}  // namespace

CUresult pool_export(const CudaDriver &d, const void *data, GpuIpcExport *out, const char **call,
                     PoolFound *found) {
  *found = PoolFound::kNotPool;
  if (!d.pool_ipc()) return CUDA_SUCCESS;
  *call = "cuPointerGetAttribute";
  CUmemoryPool pool = nullptr;
  CUresult r = d.pointer_get_attribute(&pool, CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE, dptr(data));
  // Not the driver's memory, or no pool's ("Otherwise returns NULL"): the
  // legacy path answers for it.
  if (r != CUDA_SUCCESS || pool == nullptr) return CUDA_SUCCESS;
  *call = "cuMemGetAddressRange";
  CUdeviceptr base = 0;
  size_t size = 0;
  r = d.mem_get_address_range(&base, &size, dptr(data));
  if (r != CUDA_SUCCESS) return r;
  int fd = -1;
  if (out->pool_fd_sent == nullptr || !out->pool_fd_sent(pool, out->pool_ctx)) {
    // A pool created without a shareable handle type (the device's
    // default pool) cannot be exported: the driver refuses the handle.
    *call = "cuMemPoolExportToShareableHandle";
    r = d.mem_pool_export_to_shareable_handle(&fd, pool, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
                                              0);
    if (r == CUDA_ERROR_INVALID_VALUE || r == CUDA_ERROR_NOT_SUPPORTED) {
      *found = PoolFound::kNotExportable;
      return CUDA_SUCCESS;
    }
    if (r != CUDA_SUCCESS) return r;
    // Close-on-exec: the driver API does not promise it.
    (void)fcntl(fd, F_SETFD, FD_CLOEXEC);
  }
  *call = "cuMemPoolExportPointer";
  CUmemPoolPtrExportData ed;
  std::memset(&ed, 0, sizeof ed);
  r = d.mem_pool_export_pointer(&ed, base);
  if (r != CUDA_SUCCESS) {
    if (fd >= 0) close(fd);
    if (r == CUDA_ERROR_INVALID_VALUE) {
      *found = PoolFound::kNotExportable;
      return CUDA_SUCCESS;
    }
    return r;
  }
  std::memcpy(out->handle, ed.reserved, kGpuIpcHandleBytes);
  out->alloc_size = size;
  out->data_offset = static_cast<uint64_t>(dptr(data) - base);
  out->pool = pool;
  out->pool_fd = fd;
  *found = PoolFound::kExported;
  return CUDA_SUCCESS;
}

int32_t pool_refuse_not_exportable(hurray_device device, const void *data) {
  return fail(HURRAY_ERR_UNSUPPORTED_DEVICE,
              "%p on CUDA device %" PRId32
              " comes from a stream-ordered memory pool that cannot be shared with another "
              "process (the device's default pool, which cuMemAllocAsync and hurray_alloc_async "
              "use, has no shareable handle type): allocate it with hurray_alloc_async and "
              "HURRAY_ALLOC_SHAREABLE, or from a pool made by cuMemPoolCreate with "
              "CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR in CUmemPoolProps::handleTypes",
              data, device.device_id);
}

int32_t pool_open(hurray_device device, int fd, void **pool) {
  const CudaDriver *d = cuda_driver();
  if (d == nullptr) return HURRAY_ERR_UNSUPPORTED_DEVICE;
  int32_t st = missing(*d);
  if (st != HURRAY_OK) return st;
  CUmemoryPool p = nullptr;
  CUresult refused = CUDA_SUCCESS;
  const char *call = "cuMemPoolImportFromShareableHandle";
  st = Cuda::with_device(device.device_id, &call, [&](const CudaDriver &drv) {
    CUresult r = drv.mem_pool_import_from_shareable_handle(
        &p, reinterpret_cast<void *>(static_cast<uintptr_t>(fd)),
        CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
    if (r != CUDA_SUCCESS) p = nullptr;
    if (r == CUDA_ERROR_INVALID_VALUE) refused = r;
    return r;
  });
  if (st == HURRAY_OK) {
    *pool = p;
    return st;
  }
  if (p != nullptr) pool_close(device, p);  // imported, but the context was not given back
  if (refused != CUDA_SUCCESS) {
    return fail(HURRAY_ERR_IPC,
                "the message's pool fd cannot be imported on CUDA device %" PRId32
                " (cuMemPoolImportFromShareableHandle failed with %s): it is not another "
                "process's IPC-capable memory pool",
                device.device_id, cuda_error_name(refused));
  }
  return st;
}

void pool_close(hurray_device device, void *pool) {
  release_in_primary(device, pool, [&](const CudaDriver &d, const char **call) {
    *call = "cuMemPoolDestroy";
    return d.mem_pool_destroy(static_cast<CUmemoryPool>(pool));
  });
}

int32_t pool_open_pointer(hurray_device device, void *pool, const uint8_t *data, void **ptr) {
  const CudaDriver *d = cuda_driver();
  if (d == nullptr) return HURRAY_ERR_UNSUPPORTED_DEVICE;
  int32_t st = missing(*d);
  if (st != HURRAY_OK) return st;
  CUmemPoolPtrExportData ed;
  std::memcpy(ed.reserved, data, kGpuIpcHandleBytes);
  CUdeviceptr p = 0;
  CUresult refused = CUDA_SUCCESS;
  const char *call = "cuMemPoolImportPointer";
  st = Cuda::with_device(device.device_id, &call, [&](const CudaDriver &drv) {
    CUresult r = drv.mem_pool_import_pointer(&p, static_cast<CUmemoryPool>(pool), &ed);
    if (r != CUDA_SUCCESS) p = 0;
    if (r == CUDA_ERROR_INVALID_VALUE) refused = r;
    return r;
  });
  if (st == HURRAY_OK) {
    *ptr = hptr(p);
    return st;
  }
  if (p != 0) pool_close_pointer(device, hptr(p));
  if (refused != CUDA_SUCCESS) {
    return fail(HURRAY_ERR_IPC,
                "the message's pool allocation cannot be imported on CUDA device %" PRId32
                " (cuMemPoolImportPointer failed with %s): the export data does not name a live "
                "allocation of that pool",
                device.device_id, cuda_error_name(refused));
  }
  return st;
}

void pool_close_pointer(hurray_device device, void *ptr) {
  release_in_primary(device, ptr, [&](const CudaDriver &d, const char **call) {
    // Synchronous: the free is done when it returns, so the exporter's
    // free (after the lifetime fd closes) comes after it.
    *call = "cuMemFree";
    return d.mem_free(dptr(ptr));
  });
}

int32_t pool_alloc_shareable(hurray_device device, uint64_t nbytes, void *stream,
                             DeviceMemory *mem) {
  if (stream == nullptr || is_per_thread_stream(stream)) {
    return fail(HURRAY_ERR_UNSUPPORTED_DEVICE,
                "HURRAY_ALLOC_SHAREABLE on CUDA device %" PRId32
                " needs a stream of that device (stream-ordered memory of libhurray's "
                "IPC-capable pool)%s; without one, hurray_alloc without the option gives "
                "cuMemAlloc memory, which other processes open as it is",
                device.device_id,
                stream != nullptr ? ", not the per-thread default stream, whose release "
                                    "another thread could not order"
                                  : "");
  }
  const CudaDriver *drv = cuda_driver();
  if (drv == nullptr) return HURRAY_ERR_UNSUPPORTED_DEVICE;
  int32_t st = missing(*drv);
  if (st != HURRAY_OK) return st;
  if (nbytes == 0) return CudaTraits::allocate(device, 0, stream, kStreamOfThisDevice, mem);
  if (device.device_id < 0 || device.device_id >= kMaxPools) {
    return CudaTraits::allocate(device, 0, stream, kStreamOfThisDevice, mem);  // its refusal
  }
  DeviceMemory m;
  m.stream = stream;
  bool other_device = false;
  const char *call = "cuCtxGetCurrent";
  st = Cuda::with_device(
      device.device_id, &call,
      [&](const CudaDriver &d) {
        CUcontext owner = nullptr, of_stream = nullptr;
        CUresult r = d.ctx_get_current(&owner);
        if (r == CUDA_SUCCESS && reinterpret_cast<uintptr_t>(stream) != 1) {
          call = "cuStreamGetCtx";
          r = d.stream_get_ctx(static_cast<CUstream>(stream), &of_stream);
        } else {
          of_stream = owner;  // the legacy stream of the current context
        }
        if (r != CUDA_SUCCESS) return r;
        if (of_stream != owner) {
          other_device = true;
          return CUDA_SUCCESS;
        }
        CUmemoryPool pool = nullptr;
        r = own_pool(d, device.device_id, &pool, &call);
        if (r != CUDA_SUCCESS) return r;
        call = "cuMemAllocFromPoolAsync";
        CUdeviceptr dp = 0;
        r = d.mem_alloc_from_pool_async(&dp, static_cast<size_t>(nbytes), pool,
                                        static_cast<CUstream>(stream));
        if (r == CUDA_SUCCESS) {
          m.ptr = hptr(dp);
          m.order = kFreeOnStream;
        }
        return r;
      },
      &m.context);
  if (st != HURRAY_OK) {
    if (m.ptr != nullptr) Cuda::deallocate(device, m);
    return st;
  }
  if (other_device) {
    return fail(HURRAY_ERR_UNSUPPORTED_DEVICE,
                "HURRAY_ALLOC_SHAREABLE on CUDA device %" PRId32
                " needs a stream of that device; this stream belongs to another context",
                device.device_id);
  }
  *mem = m;
  return HURRAY_OK;
}

}  // namespace hurray::detail

#endif  // HURRAY_WITH_CUDA
