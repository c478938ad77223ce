// SPDX-License-Identifier: Apache-2.0
// HIP stream-ordered pool memory across processes (pool_ipc.h; descriptor
// kinds 5 and 6, docs/impl/ipc.md §6), after the HIP runtime API
// reference's "Stream Ordered Memory Allocator" group (ROCm 5.2 to 7:
// hipMemPoolCreate, hipMallocFromPoolAsync, hipMemPoolExportToShareableHandle,
// hipMemPoolImportFromShareableHandle, hipMemPoolExportPointer,
// hipMemPoolImportPointer): a pool is shared once as an OS handle, each
// allocation as 64 bytes of export data; "The imported memory must be
// freed from all importing processes before being freed in the exporting
// process", with hipFree or hipFreeAsync; imported pools cannot allocate;
// "Specifying hipMemHandleTypeNone creates a memory pool that will not
// support IPC" (the default pool, which hipMallocAsync uses).
#if defined(HURRAY_WITH_HIP)

#include "device/hip/pool_ipc.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cinttypes>
#include <cstring>
#include <map>
#include <mutex>

#include "common/error.h"
#include "device/hip/vendor.h"

namespace hurray::detail {
namespace {

static_assert(sizeof(hipMemPoolPtrExportData) == kGpuIpcHandleBytes,
              "hipMemPoolPtrExportData is 64 bytes");

int32_t missing(const HipRuntime &r) {
  if (r.pool_ipc()) return HURRAY_OK;
  return fail(HURRAY_ERR_UNSUPPORTED_DEVICE,
              "%s lacks the HIP memory-pool IPC entry points (hipMemPoolCreate, "
              "hipMallocFromPoolAsync, hipFreeAsync, hipMemPoolExportToShareableHandle, "
              "hipMemPoolImportFromShareableHandle, hipMemPoolExportPointer, "
              "hipMemPoolImportPointer, hipMemPoolDestroy; ROCm 5.2 or newer has them)",
              r.path);
}

// libhurray's own IPC-capable pool of each device, made on first use and
// never destroyed (its allocations may be freed at any time until exit).
constexpr int kMaxPools = 64;
std::atomic<hipMemPool_t> g_pools[kMaxPools];
std::mutex g_pools_mu;

// With the device current.
hipError_t own_pool(const HipRuntime &r, int32_t ordinal, hipMemPool_t *out, const char **call) {
  hipMemPool_t p = g_pools[ordinal].load(std::memory_order_acquire);
  if (p != nullptr) {
    *out = p;
    return hipSuccess;
  }
  std::lock_guard<std::mutex> lock(g_pools_mu);
  p = g_pools[ordinal].load(std::memory_order_acquire);
  if (p == nullptr) {
    hipMemPoolProps props;
    std::memset(&props, 0, sizeof props);  // ROCm 6.3's maxSize 0: the default
    props.allocType = hipMemAllocationTypePinned;
    props.handleTypes = hipMemHandleTypePosixFileDescriptor;
    props.location.type = hipMemLocationTypeDevice;
    props.location.id = ordinal;
    *call = "hipMemPoolCreate";
    const hipError_t e = r.mem_pool_create(&p, &props);
    if (e != hipSuccess) return e;
    g_pools[ordinal].store(p, std::memory_order_release);
  }
  *out = p;
  return hipSuccess;
}

// libhurray's own pool allocations (pool_ipc.h: what names their pool
// without hipPointerGetAttribute): base -> pool and size.
struct OwnAllocation {
  hipMemPool_t pool;
  uint64_t size;
};
struct Own {
  std::mutex mu;
  std::map<uintptr_t, OwnAllocation> by_base;
};
// Never destroyed: releases may run while the process exits.
Own &own() {
  static Own *o = new Own;
  return *o;
}

void remember(const void *base, hipMemPool_t pool, uint64_t size) {
  Own &o = own();
  std::lock_guard<std::mutex> lock(o.mu);
  const auto [it, added] =
      o.by_base.emplace(reinterpret_cast<uintptr_t>(base), OwnAllocation{pool, size});
  if (!added) it->second = OwnAllocation{pool, size};  // an address the pool gave back
}

bool own_allocation(const void *data, hipMemPool_t *pool, uintptr_t *base, uint64_t *size) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(data);
  Own &o = own();
  std::lock_guard<std::mutex> lock(o.mu);
  auto it = o.by_base.upper_bound(a);
  if (it == o.by_base.begin()) return false;
  --it;
  if (a - it->first >= it->second.size) return false;
  *pool = it->second.pool;
  *base = it->first;
  *size = it->second.size;
  return true;
}

}  // namespace

void hip_pool_forget(const void *ptr) {
  Own &o = own();
  std::lock_guard<std::mutex> lock(o.mu);
  o.by_base.erase(reinterpret_cast<uintptr_t>(ptr));
}

hipError_t hip_pool_export(const HipRuntime &r, const void *data, GpuIpcExport *out,
                           const char **call, PoolFound *found) {
  *found = PoolFound::kNotPool;
  if (!r.pool_ipc()) return hipSuccess;
  hipMemPool_t pool = nullptr;
  uintptr_t base = 0;
  uint64_t size = 0;
  if (!own_allocation(data, &pool, &base, &size)) {
    if (r.pointer_get_attribute == nullptr) return hipSuccess;
    *call = "hipPointerGetAttribute";
    hipError_t e = r.pointer_get_attribute(&pool, HIP_POINTER_ATTRIBUTE_MEMPOOL_HANDLE,
                                           const_cast<void *>(data));
    // Not the runtime's memory, no pool's, or a runtime that does not
    // answer the attribute: the legacy path answers for it.
    if (e != hipSuccess || pool == nullptr) return hipSuccess;
    *call = "hipMemGetAddressRange";
    hipDeviceptr_t b = nullptr;
    size_t n = 0;
    e = r.mem_get_address_range(&b, &n, const_cast<void *>(data));
    if (e != hipSuccess) return e;
    base = reinterpret_cast<uintptr_t>(b);
    size = n;
  }
  int fd = -1;
  if (out->pool_fd_sent == nullptr || !out->pool_fd_sent(pool, out->pool_ctx)) {
    // A pool created without a shareable handle type (the device's
    // default pool) cannot be exported: the runtime refuses the handle.
    *call = "hipMemPoolExportToShareableHandle";
    int64_t handle = 0;  // room for an fd however wide the runtime writes it
    hipError_t e = r.mem_pool_export_to_shareable_handle(&handle, pool,
                                                         hipMemHandleTypePosixFileDescriptor, 0);
    if (e == hipErrorInvalidValue || e == hipErrorNotSupported) {
      *found = PoolFound::kNotExportable;
      return hipSuccess;
    }
    if (e != hipSuccess) return e;
    fd = static_cast<int>(handle);
    // Close-on-exec: the reference does not promise it.
    (void)fcntl(fd, F_SETFD, FD_CLOEXEC);
  }
  *call = "hipMemPoolExportPointer";
  hipMemPoolPtrExportData ed;
  std::memset(&ed, 0, sizeof ed);
  const hipError_t e = r.mem_pool_export_pointer(&ed, reinterpret_cast<void *>(base));
  if (e != hipSuccess) {
    if (fd >= 0) close(fd);
    if (e == hipErrorInvalidValue) {
      *found = PoolFound::kNotExportable;
      return hipSuccess;
    }
    return e;
  }
  std::memcpy(out->handle, ed.reserved, kGpuIpcHandleBytes);
  out->alloc_size = size;
  out->data_offset = static_cast<uint64_t>(reinterpret_cast<uintptr_t>(data) - base);
  out->pool = pool;
  out->pool_fd = fd;
  *found = PoolFound::kExported;
  return hipSuccess;
}

int32_t hip_pool_refuse_not_exportable(hurray_device device, const void *data) {
  return fail(HURRAY_ERR_UNSUPPORTED_DEVICE,
              "%p on HIP device %" PRId32
              " comes from a stream-ordered memory pool that cannot be shared with another "
              "process (the device's default pool, which hipMallocAsync and hurray_alloc_async "
              "use, has no shareable handle type): allocate it with hurray_alloc_async and "
              "HURRAY_ALLOC_SHAREABLE, or from a pool made by hipMemPoolCreate with "
              "hipMemHandleTypePosixFileDescriptor in hipMemPoolProps::handleTypes",
              data, device.device_id);
}

int32_t hip_pool_open(hurray_device device, int fd, void **pool) {
  const HipRuntime *rt = hip_runtime();
  if (rt == nullptr) return HURRAY_ERR_UNSUPPORTED_DEVICE;
  int32_t st = missing(*rt);
  if (st != HURRAY_OK) return st;
  hipMemPool_t p = nullptr;
  hipError_t refused = hipSuccess;
  const char *call = "hipMemPoolImportFromShareableHandle";
  st = Hip::with_device(device.device_id, &call, [&](const HipRuntime &r) {
    // The fd by value in the pointer argument, as for CUDA.
    hipError_t e = r.mem_pool_import_from_shareable_handle(
        &p, reinterpret_cast<void *>(static_cast<uintptr_t>(fd)),
        hipMemHandleTypePosixFileDescriptor, 0);
    if (e != hipSuccess) p = nullptr;
    if (e == hipErrorInvalidValue) refused = e;
    return e;
  });
  if (st == HURRAY_OK) {
    *pool = p;
    return st;
  }
  if (p != nullptr) hip_pool_close(device, p);  // imported, but the device was not set back
  if (refused != hipSuccess) {
    return fail(HURRAY_ERR_IPC,
                "the message's pool fd cannot be imported on HIP device %" PRId32
                " (hipMemPoolImportFromShareableHandle failed with %s): it is not another "
                "process's IPC-capable memory pool",
                device.device_id, hip_error_name(refused));
  }
  return st;
}

void hip_pool_close(hurray_device device, void *pool) {
  release_with_device(device, pool, "an imported memory pool",
                      [pool](const HipRuntime &r, const char **call) {
                        *call = "hipMemPoolDestroy";
                        return r.mem_pool_destroy(static_cast<hipMemPool_t>(pool));
                      });
}

int32_t hip_pool_open_pointer(hurray_device device, void *pool, const uint8_t *data, void **ptr) {
  const HipRuntime *rt = hip_runtime();
  if (rt == nullptr) return HURRAY_ERR_UNSUPPORTED_DEVICE;
  int32_t st = missing(*rt);
  if (st != HURRAY_OK) return st;
  hipMemPoolPtrExportData ed;
  std::memcpy(ed.reserved, data, kGpuIpcHandleBytes);
  void *p = nullptr;
  hipError_t refused = hipSuccess;
  const char *call = "hipMemPoolImportPointer";
  st = Hip::with_device(device.device_id, &call, [&](const HipRuntime &r) {
    hipError_t e = r.mem_pool_import_pointer(&p, static_cast<hipMemPool_t>(pool), &ed);
    if (e != hipSuccess) p = nullptr;
    if (e == hipErrorInvalidValue) refused = e;
    return e;
  });
  if (st == HURRAY_OK) {
    *ptr = p;
    return st;
  }
  if (p != nullptr) hip_pool_close_pointer(device, p);
  if (refused != hipSuccess) {
    return fail(HURRAY_ERR_IPC,
                "the message's pool allocation cannot be imported on HIP device %" PRId32
                " (hipMemPoolImportPointer failed with %s): the export data does not name a live "
                "allocation of that pool",
                device.device_id, hip_error_name(refused));
  }
  return st;
}

void hip_pool_close_pointer(hurray_device device, void *ptr) {
  release_with_device(device, ptr, "an imported pool allocation",
                      [ptr](const HipRuntime &r, const char **call) {
                        // Synchronous: the free is done when it returns, so
                        // the exporter's free (after the lifetime fd closes)
                        // comes after it.
                        *call = "hipFree";
                        return r.device_free(ptr);
                      });
}

int32_t hip_pool_alloc_shareable(hurray_device device, uint64_t nbytes, void *stream,
                                 DeviceMemory *mem) {
  if (stream == nullptr || is_per_thread_stream(stream)) {
    return fail(HURRAY_ERR_UNSUPPORTED_DEVICE,
                "HURRAY_ALLOC_SHAREABLE on HIP device %" PRId32
                " needs a stream of that device (stream-ordered memory of libhurray's "
                "IPC-capable pool)%s; without one, hurray_alloc without the option gives "
                "hipMalloc memory, which other processes open as it is",
                device.device_id,
                stream != nullptr ? ", not the per-thread default stream, whose release "
                                    "another thread could not order"
                                  : "");
  }
  const HipRuntime *rt = hip_runtime();
  if (rt == nullptr) return HURRAY_ERR_UNSUPPORTED_DEVICE;
  int32_t st = missing(*rt);
  if (st != HURRAY_OK) return st;
  if (nbytes == 0 || device.device_id < 0 || device.device_id >= kMaxPools) {
    // No memory to allocate, or no such device: the ordinary allocator's
    // answer (the device checked only).
    return HipTraits::allocate(device, 0, stream, kStreamOfThisDevice, mem);
  }
  Hip::retry_deferred_frees();
  DeviceMemory m;
  m.stream = stream;
  hipMemPool_t pool = nullptr;
  const char *call = "hipMemPoolCreate";
  st = Hip::with_device(device.device_id, &call, [&](const HipRuntime &r) {
    hipError_t e = own_pool(r, device.device_id, &pool, &call);
    if (e != hipSuccess) return e;
    call = "hipMallocFromPoolAsync";
    void *p = nullptr;
    e = r.malloc_from_pool_async(&p, static_cast<size_t>(nbytes), pool,
                                 static_cast<hipStream_t>(stream));
    if (e == hipSuccess) {
      m.ptr = p;
      m.order = kHipFreeOnPoolStream;
    }
    return e;
  });
  if (st == HURRAY_OK) remember(m.ptr, pool, nbytes);
  if (st != HURRAY_OK) {
    if (m.ptr != nullptr) Hip::deallocate(device, m);
    return st;
  }
  *mem = m;
  return HURRAY_OK;
}

}  // namespace hurray::detail

#endif  // HURRAY_WITH_HIP
