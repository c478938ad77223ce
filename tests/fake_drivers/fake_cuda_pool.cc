// SPDX-License-Identifier: Apache-2.0
// The fake CUDA driver's memory pools (part of libcuda.so.1, see
// fake_cuda.cc): the stream-ordered allocator's pool entry points over
// fake::Pools (fake_pool.h), as the CUDA Driver API reference's "Stream
// Ordered Memory Allocator" section documents them, with the interprocess
// rules of the CUDA Programming Guide's "Stream Ordered Memory Allocator"
// chapter ("Interprocess communication support": IPC export pools, IPC
// import pools), and the control API's pool helpers (fake_control.h).
#include <cuda.h>

#include <cstring>

#include "fake_cuda_internal.h"
#include "fake_pool.h"

namespace fake_cuda {
namespace {

fake::Pools &pools() { return fake::Pools::get(); }
fake::Pools::Pool *as_pool(CUmemoryPool p) { return reinterpret_cast<fake::Pools::Pool *>(p); }
CUmemoryPool as_handle(fake::Pools::Pool *p) { return reinterpret_cast<CUmemoryPool>(p); }

}  // namespace

// cuDeviceGetDefaultMemPool: the device's default pool, which cuMemAllocAsync
// allocates from; created without a shareable handle type, so it cannot be
// exported (cuMemPoolExportToShareableHandle: "To create an IPC capable
// mempool, create a mempool with a CUmemAllocationHandleType other than
// CU_MEM_HANDLE_TYPE_NONE"). No context needed.
CUresult f_device_get_default_mem_pool(CUmemoryPool *pool, CUdevice dev) {
  FAKE_ENTER("cuDeviceGetDefaultMemPool");
  if (pool == nullptr) return done("cuDeviceGetDefaultMemPool", CUDA_ERROR_INVALID_VALUE);
  if (dev < 0 || dev >= config().device_count) {
    return done("cuDeviceGetDefaultMemPool", CUDA_ERROR_INVALID_DEVICE);
  }
  *pool = as_handle(pools().default_pool(dev));
  return done("cuDeviceGetDefaultMemPool", CUDA_SUCCESS, *pool);
}

// cuMemPoolCreate: device pools (CU_MEM_ALLOCATION_TYPE_PINNED on
// CU_MEM_LOCATION_TYPE_DEVICE) with handle type NONE or POSIX fd; the
// reserved bytes must be 0. Logged with bytes = handleTypes.
CUresult f_mem_pool_create(CUmemoryPool *pool, const CUmemPoolProps *props) {
  FAKE_ENTER("cuMemPoolCreate");
  bool ok = pool != nullptr && props != nullptr &&
            props->allocType == CU_MEM_ALLOCATION_TYPE_PINNED &&
            props->location.type == CU_MEM_LOCATION_TYPE_DEVICE && props->location.id >= 0 &&
            props->location.id < config().device_count &&
            (props->handleTypes == CU_MEM_HANDLE_TYPE_NONE ||
             props->handleTypes == CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
  for (size_t i = 0; ok && i < sizeof props->reserved; ++i) ok = props->reserved[i] == 0;
  if (!ok) return done("cuMemPoolCreate", CUDA_ERROR_INVALID_VALUE);
  fake::Pools::Pool *p = nullptr;
  const int r = pools().create(props->location.id, props->handleTypes, &p);
  if (r == 0) *pool = as_handle(p);
  return done("cuMemPoolCreate", static_cast<CUresult>(r), p, nullptr, props->handleTypes);
}

// cuMemPoolDestroy: "A device's default memory pool cannot be destroyed";
// allocations not freed yet stay valid until they are.
CUresult f_mem_pool_destroy(CUmemoryPool pool) {
  FAKE_ENTER("cuMemPoolDestroy", pool);
  return done("cuMemPoolDestroy", static_cast<CUresult>(pools().destroy(as_pool(pool))), pool);
}

// cuMemAllocFromPoolAsync: from a created pool, never an imported one
// ("Imported memory pools do not support creating new allocations");
// the default stream needs a current context (CUDA_ERROR_INVALID_CONTEXT).
CUresult f_mem_alloc_from_pool_async(CUdeviceptr *dp, size_t bytes, CUmemoryPool pool, CUstream s) {
  FAKE_ENTER("cuMemAllocFromPoolAsync", nullptr, s, bytes);
  if (reinterpret_cast<uintptr_t>(s) <= 2) {
    if (CUresult e = context_error()) return done("cuMemAllocFromPoolAsync", e, nullptr, s, bytes);
  }
  void *p = nullptr;
  const int r =
      dp == nullptr ? CUDA_ERROR_INVALID_VALUE : pools().allocate(as_pool(pool), bytes, &p);
  if (r == 0) *dp = as_dptr(p);
  return done("cuMemAllocFromPoolAsync", static_cast<CUresult>(r), p, s, bytes, pool);
}

// cuMemPoolExportToShareableHandle: an IPC-capable pool as a POSIX fd (a
// dup of the pool's memfd, without close-on-exec: the reference promises
// nothing about it); flags must be 0. Logged with other = the fd.
CUresult f_mem_pool_export_to_shareable_handle(void *out, CUmemoryPool pool,
                                               CUmemAllocationHandleType type,
                                               unsigned long long flags) {
  FAKE_ENTER("cuMemPoolExportToShareableHandle", pool);
  int fd = -1;
  const int r = out == nullptr || flags != 0 ? CUDA_ERROR_INVALID_VALUE
                                             : pools().export_fd(as_pool(pool), type, &fd);
  if (r == 0) *static_cast<int *>(out) = fd;
  return done("cuMemPoolExportToShareableHandle", static_cast<CUresult>(r), pool, nullptr, 0,
              reinterpret_cast<void *>(static_cast<uintptr_t>(fd < 0 ? 0 : fd)));
}

// cuMemPoolImportFromShareableHandle: the fd by value in the pointer
// argument, as for cuMemImportFromShareableHandle; left open (the fake maps
// it and keeps nothing of it). Each import is counted (pool_imports).
CUresult f_mem_pool_import_from_shareable_handle(CUmemoryPool *pool, void *handle,
                                                 CUmemAllocationHandleType type,
                                                 unsigned long long flags) {
  FAKE_ENTER("cuMemPoolImportFromShareableHandle");
  const int fd = static_cast<int>(reinterpret_cast<uintptr_t>(handle));
  fake::Pools::Pool *p = nullptr;
  const int r = pool == nullptr || flags != 0 ? CUDA_ERROR_INVALID_VALUE
                                              : pools().import_fd(fd, type, current_device(), &p);
  if (r == 0) *pool = as_handle(p);
  return done("cuMemPoolImportFromShareableHandle", static_cast<CUresult>(r), p, nullptr, 0,
              reinterpret_cast<void *>(static_cast<uintptr_t>(fd)));
}

// cuMemPoolExportPointer: the 64 bytes naming an allocation (by its own
// address) of an IPC-capable pool of this process.
CUresult f_mem_pool_export_pointer(CUmemPoolPtrExportData *out, CUdeviceptr ptr) {
  FAKE_ENTER("cuMemPoolExportPointer", as_ptr(ptr));
  static_assert(sizeof out->reserved == sizeof(fake::Pools::PtrData), "64 bytes");
  fake::Pools::PtrData d;
  const int r = out == nullptr ? CUDA_ERROR_INVALID_VALUE : pools().export_pointer(as_ptr(ptr), &d);
  if (r == 0) std::memcpy(out->reserved, &d, sizeof d);
  return done("cuMemPoolExportPointer", static_cast<CUresult>(r), as_ptr(ptr));
}

// cuMemPoolImportPointer: into a pool imported from the allocation's pool;
// the importing process is recorded in the allocation's slot until it frees
// the pointer (cuMemFree / cuMemFreeAsync).
CUresult f_mem_pool_import_pointer(CUdeviceptr *out, CUmemoryPool pool,
                                   CUmemPoolPtrExportData *data) {
  FAKE_ENTER("cuMemPoolImportPointer", pool);
  fake::Pools::PtrData d;
  void *p = nullptr;
  int r = CUDA_ERROR_INVALID_VALUE;
  if (out != nullptr && data != nullptr) {
    std::memcpy(&d, data->reserved, sizeof d);
    r = pools().import_pointer(as_pool(pool), d, &p);
  }
  if (r == 0) *out = as_dptr(p);
  return done("cuMemPoolImportPointer", static_cast<CUresult>(r), p, pool);
}

// cuPointerGetAttribute: CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE ("the mempool
// handle for the allocation if it was allocated from a mempool. Otherwise
// returns NULL"): a pool's (created or imported) for its memory, the
// device's default pool for cuMemAllocAsync memory, NULL for other memory
// of the fake; CUDA_ERROR_INVALID_VALUE for an address the fake never
// handed out, and for the other attributes (cuPointerGetAttributes serves
// those).
CUresult f_pointer_get_attribute(void *data, CUpointer_attribute attr, CUdeviceptr ptr) {
  FAKE_ENTER("cuPointerGetAttribute", as_ptr(ptr));
  if (data == nullptr || attr != CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE) {
    return done("cuPointerGetAttribute", CUDA_ERROR_INVALID_VALUE, as_ptr(ptr));
  }
  fake::Pools::Pool *p = nullptr;
  int slot = -1;
  fake::Allocation a{};
  if (pools().find(as_ptr(ptr), &p, &slot)) {
    *static_cast<CUmemoryPool *>(data) = as_handle(p);
  } else if (rec().find(as_ptr(ptr), &a)) {
    // cuMemAlloc memory is a memfd (legacy IPC), cuMemAllocAsync memory is not.
    const bool async = a.kind == fake::Kind::kDevice && a.memfd < 0;
    *static_cast<CUmemoryPool *>(data) =
        async ? as_handle(pools().default_pool(a.device)) : nullptr;
  } else {
    uintptr_t b = 0;
    uint64_t n = 0;
    if (!rec().address_range(as_ptr(ptr), &b, &n)) {
      return done("cuPointerGetAttribute", CUDA_ERROR_INVALID_VALUE, as_ptr(ptr));
    }
    *static_cast<CUmemoryPool *>(data) = nullptr;  // memory opened with legacy IPC
  }
  return done("cuPointerGetAttribute", CUDA_SUCCESS, as_ptr(ptr), nullptr, attr);
}

// For fake_cuda.cc's cuMemFree / cuMemFreeAsync and fake_cuda_ipc.cc's
// cuMemGetAddressRange.
bool pool_free(void *p) { return pools().free(p) == 0; }
bool pool_range(const void *p, uintptr_t *base, uint64_t *bytes) {
  return pools().range(p, base, bytes);
}

}  // namespace fake_cuda

using namespace fake_cuda;  // NOLINT: the exports below call the entry points above

// Pools for tests (fake_control.h).
FAKE_EXPORT int fake_cuda_pool_create(int device, unsigned long long handle_types, void **pool) {
  CUmemPoolProps props;
  std::memset(&props, 0, sizeof props);
  props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  props.handleTypes = static_cast<CUmemAllocationHandleType>(handle_types);
  props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  props.location.id = device;
  CUmemoryPool p = nullptr;
  const CUresult r = f_mem_pool_create(&p, &props);
  if (r == CUDA_SUCCESS) *pool = p;
  return r;
}
FAKE_POOL_EXPORTS(fake_cuda_)
