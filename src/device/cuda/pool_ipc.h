// SPDX-License-Identifier: Apache-2.0
// CUDA's traits for stream-ordered pool memory across processes
// (device/pool_ipc.h; descriptor kinds 5 and 6, docs/impl/ipc.md §6), after
// the CUDA Driver API reference's "Stream Ordered Memory Allocator" section
// (cuMemPoolCreate with CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
// cuMemPoolExportToShareableHandle, cuMemPoolImportFromShareableHandle,
// cuMemPoolExportPointer, cuMemPoolImportPointer) and the CUDA Programming
// Guide's "Stream Ordered Memory Allocator" chapter. The pool of an address
// is asked of the driver (cuPointerGetAttribute with
// CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE: "Otherwise returns NULL").
#ifndef HURRAY_SRC_DEVICE_CUDA_POOL_IPC_H_
#define HURRAY_SRC_DEVICE_CUDA_POOL_IPC_H_

#if defined(HURRAY_WITH_CUDA)

#include <cstring>

#include "device/backend.h"
#include "device/cuda/driver.h"
#include "device/cuda/vendor.h"
#include "device/cuda/vmm_ipc.h"
#include "device/gpu_ipc.h"
#include "device/pool_ipc.h"

namespace hurray::detail {

static_assert(sizeof(CUmemPoolPtrExportData) == kGpuIpcHandleBytes,
              "CUmemPoolPtrExportData is 64 bytes");

struct CudaPoolTraits {
  using Base = CudaTraits;
  using Api = CudaDriver;
  using Result = CUresult;
  using Pool = CUmemoryPool;
  static constexpr Result kSuccess = CUDA_SUCCESS;
  static constexpr Result kInvalidValue = CUDA_ERROR_INVALID_VALUE;
  static constexpr Result kNotSupported = CUDA_ERROR_NOT_SUPPORTED;
  static constexpr const char *kName = "CUDA";
  static constexpr const char *kPointerGetAttribute = "cuPointerGetAttribute";
  static constexpr const char *kGetAddressRange = "cuMemGetAddressRange";
  static constexpr const char *kExportToShareableHandle = "cuMemPoolExportToShareableHandle";
  static constexpr const char *kImportFromShareableHandle = "cuMemPoolImportFromShareableHandle";
  static constexpr const char *kExportPointer = "cuMemPoolExportPointer";
  static constexpr const char *kImportPointer = "cuMemPoolImportPointer";
  static constexpr const char *kPoolDestroy = "cuMemPoolDestroy";
  static constexpr const char *kFreeImported = "cuMemFree";
  static constexpr const char *kPoolCreate = "cuMemPoolCreate";
  static constexpr const char *kAllocFromPool = "cuMemAllocFromPoolAsync";
  static constexpr const char *kFirstAllocCall = "cuCtxGetCurrent";
  static constexpr const char *kDefaultAlloc = "cuMemAllocAsync";
  static constexpr const char *kPlainAlloc = "cuMemAlloc";
  static constexpr const char *kHandleType = "CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR";
  static constexpr const char *kPropsField = "CUmemPoolProps::handleTypes";
  static constexpr bool kRecordOwn = false;  // the attribute answers for every pool
  static constexpr bool kRetryBeforeAlloc = false;
  static constexpr uint32_t kFreeOrder = 1;  // cuda.cc's kFreeOnStream: cuMemFreeAsync

  static int32_t refuse_missing(const Api &d) {
    if (d.pool_ipc()) return HURRAY_OK;
    return fail(HURRAY_ERR_UNSUPPORTED_DEVICE,
                "this CUDA driver lacks the memory-pool IPC entry points (cuPointerGetAttribute, "
                "cuMemPoolCreate, cuMemAllocFromPoolAsync, cuMemPoolExportToShareableHandle, "
                "cuMemPoolImportFromShareableHandle, cuMemPoolExportPointer, "
                "cuMemPoolImportPointer, cuMemPoolDestroy)");
  }
  static bool pool_ipc(const Api &d) { return d.pool_ipc(); }
  static bool can_ask_pool(const Api &) { return true; }
  static Result pointer_pool(const Api &d, const void *data, Pool *pool) {
    return d.pointer_get_attribute(pool, CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE, dptr(data));
  }
  static Result address_range(const Api &d, const void *data, uintptr_t *base, uint64_t *size) {
    CUdeviceptr b = 0;
    size_t n = 0;
    const Result r = d.mem_get_address_range(&b, &n, dptr(data));
    *base = static_cast<uintptr_t>(b);
    *size = n;
    return r;
  }
  static Result export_fd(const Api &d, Pool pool, int *fd) {
    return d.mem_pool_export_to_shareable_handle(fd, pool, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
                                                 0);
  }
  static Result export_pointer(const Api &d, uintptr_t base, uint8_t *out) {
    CUmemPoolPtrExportData ed;
    std::memset(&ed, 0, sizeof ed);
    const Result r = d.mem_pool_export_pointer(&ed, static_cast<CUdeviceptr>(base));
    if (r == CUDA_SUCCESS) std::memcpy(out, ed.reserved, kGpuIpcHandleBytes);
    return r;
  }
  // The fd by value in the pointer argument.
  static Result import_fd(const Api &d, int fd, Pool *pool) {
    return d.mem_pool_import_from_shareable_handle(
        pool, reinterpret_cast<void *>(static_cast<uintptr_t>(fd)),
        CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
  }
  static Result import_pointer(const Api &d, Pool pool, const uint8_t *data, void **ptr) {
    CUmemPoolPtrExportData ed;
    std::memcpy(ed.reserved, data, kGpuIpcHandleBytes);
    CUdeviceptr p = 0;
    const Result r = d.mem_pool_import_pointer(&p, pool, &ed);
    *ptr = hptr(p);
    return r;
  }
  static Result destroy_pool(const Api &d, Pool pool) { return d.mem_pool_destroy(pool); }
  static Result free_imported(const Api &d, void *ptr) { return d.mem_free(dptr(ptr)); }
  static Result create_pool(const Api &d, int32_t ordinal, Pool *pool) {
    CUmemPoolProps props;
    std::memset(&props, 0, sizeof props);
    props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
    props.handleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
    props.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    props.location.id = ordinal;
    return d.mem_pool_create(pool, &props);
  }
  static Result alloc_from_pool(const Api &d, void **p, size_t n, Pool pool, void *stream) {
    CUdeviceptr dp = 0;
    const Result r = d.mem_alloc_from_pool_async(&dp, n, pool, static_cast<CUstream>(stream));
    *p = hptr(dp);
    return r;
  }
  // Whether `stream` belongs to another context than the current one (the
  // device's primary context): its memory would be ordered on a stream the
  // release could not use.
  static Result stream_elsewhere(const Api &d, void *stream, bool *other, const char **call) {
    CUcontext owner = nullptr, of_stream = nullptr;
    CUresult r = d.ctx_get_current(&owner);
    if (r == CUDA_SUCCESS && reinterpret_cast<uintptr_t>(stream) != 1) {
      *call = "cuStreamGetCtx";
      r = d.stream_get_ctx(static_cast<CUstream>(stream), &of_stream);
    } else {
      of_stream = owner;  // the legacy stream of the current context
    }
    if (r == CUDA_SUCCESS) *other = of_stream != owner;
    return r;
  }
  // Only in incarnation `context` of the primary context: a reset between
  // the caller's check and the entry destroyed what `op` names.
  template <typename Op>
  static void release(hurray_device device, const void *what, const char *, uint64_t context,
                      Op op) {
    release_in_primary(device, what, op, &context);
  }
};

using CudaPools = PoolIpc<CudaPoolTraits>;

}  // namespace hurray::detail

#endif  // HURRAY_WITH_CUDA

#endif  // HURRAY_SRC_DEVICE_CUDA_POOL_IPC_H_
