// SPDX-License-Identifier: Apache-2.0
// HIP's traits for stream-ordered pool memory across processes
// (device/pool_ipc.h; descriptor kinds 5 and 6, docs/impl/ipc.md §6), after
// the HIP runtime API reference's "Stream Ordered Memory Allocator" group
// (ROCm 5.2 to 7: hipMemPoolCreate, hipMallocFromPoolAsync,
// hipMemPoolExportToShareableHandle, hipMemPoolImportFromShareableHandle,
// hipMemPoolExportPointer, hipMemPoolImportPointer): imported memory "must
// be freed from all importing processes before being freed in the
// exporting process", with hipFree or hipFreeAsync; "Specifying
// hipMemHandleTypeNone creates a memory pool that will not support IPC"
// (the default pool, which hipMallocAsync uses).
//
// Where HIP differs from CUDA: ROCm declares HIP_POINTER_ATTRIBUTE_MEMPOOL_HANDLE
// but does not document that hipPointerGetAttribute answers it (the
// reference marks several of its pointer attributes unsupported), so the
// pool of libhurray's own allocations is known without asking
// (kRecordOwn): each is recorded with its pool, base and size when it is
// made and forgotten when it is freed. The attribute is asked only for
// memory libhurray did not allocate, and an error from it counts as "not
// pool memory".
#ifndef HURRAY_SRC_DEVICE_HIP_POOL_IPC_H_
#define HURRAY_SRC_DEVICE_HIP_POOL_IPC_H_

#if defined(HURRAY_WITH_HIP)

#include <cstring>

#include "device/backend.h"
#include "device/gpu_ipc.h"
#include "device/hip/runtime.h"
#include "device/hip/vendor.h"
#include "device/pool_ipc.h"

namespace hurray::detail {

static_assert(sizeof(hipMemPoolPtrExportData) == kGpuIpcHandleBytes,
              "hipMemPoolPtrExportData is 64 bytes");

// DeviceMemory::order of libhurray's own pool memory (hip.cc's orders
// 0 to 3 are the others): hipFreeAsync on the stream, and the allocation
// forgotten by the export first (HipPools::forget).
constexpr uint32_t kHipFreeOnPoolStream = 4;

struct HipPoolTraits {
  using Base = HipTraits;
  using Api = HipRuntime;
  using Result = hipError_t;
  using Pool = hipMemPool_t;
  static constexpr Result kSuccess = hipSuccess;
  static constexpr Result kInvalidValue = hipErrorInvalidValue;
  static constexpr Result kNotSupported = hipErrorNotSupported;
  static constexpr const char *kName = "HIP";
  static constexpr const char *kPointerGetAttribute = "hipPointerGetAttribute";
  static constexpr const char *kGetAddressRange = "hipMemGetAddressRange";
  static constexpr const char *kExportToShareableHandle = "hipMemPoolExportToShareableHandle";
  static constexpr const char *kImportFromShareableHandle = "hipMemPoolImportFromShareableHandle";
  static constexpr const char *kExportPointer = "hipMemPoolExportPointer";
  static constexpr const char *kImportPointer = "hipMemPoolImportPointer";
  static constexpr const char *kPoolDestroy = "hipMemPoolDestroy";
  static constexpr const char *kFreeImported = "hipFree";
  static constexpr const char *kPoolCreate = "hipMemPoolCreate";
  static constexpr const char *kAllocFromPool = "hipMallocFromPoolAsync";
  static constexpr const char *kFirstAllocCall = "hipMemPoolCreate";
  static constexpr const char *kDefaultAlloc = "hipMallocAsync";
  static constexpr const char *kPlainAlloc = "hipMalloc";
  static constexpr const char *kHandleType = "hipMemHandleTypePosixFileDescriptor";
  static constexpr const char *kPropsField = "hipMemPoolProps::handleTypes";
  static constexpr bool kRecordOwn = true;
  static constexpr bool kRetryBeforeAlloc = true;
  static constexpr uint32_t kFreeOrder = kHipFreeOnPoolStream;

  static int32_t refuse_missing(const Api &r) {
    if (r.pool_ipc()) return HURRAY_OK;
    return fail(HURRAY_ERR_UNSUPPORTED_DEVICE,
                "%s lacks the HIP memory-pool IPC entry points (hipMemPoolCreate, "
                "hipMallocFromPoolAsync, hipFreeAsync, hipMemPoolExportToShareableHandle, "
                "hipMemPoolImportFromShareableHandle, hipMemPoolExportPointer, "
                "hipMemPoolImportPointer, hipMemPoolDestroy; ROCm 5.2 or newer has them)",
                r.path);
  }
  static bool pool_ipc(const Api &r) { return r.pool_ipc(); }
  static bool can_ask_pool(const Api &r) { return r.pointer_get_attribute != nullptr; }
  static Result pointer_pool(const Api &r, const void *data, Pool *pool) {
    return r.pointer_get_attribute(pool, HIP_POINTER_ATTRIBUTE_MEMPOOL_HANDLE,
                                   const_cast<void *>(data));
  }
  static Result address_range(const Api &r, const void *data, uintptr_t *base, uint64_t *size) {
    hipDeviceptr_t b = nullptr;
    size_t n = 0;
    const Result e = r.mem_get_address_range(&b, &n, const_cast<void *>(data));
    *base = reinterpret_cast<uintptr_t>(b);
    *size = n;
    return e;
  }
  static Result export_fd(const Api &r, Pool pool, int *fd) {
    int64_t handle = 0;  // room for an fd however wide the runtime writes it
    const Result e = r.mem_pool_export_to_shareable_handle(&handle, pool,
                                                           hipMemHandleTypePosixFileDescriptor, 0);
    *fd = static_cast<int>(handle);
    return e;
  }
  static Result export_pointer(const Api &r, uintptr_t base, uint8_t *out) {
    hipMemPoolPtrExportData ed;
    std::memset(&ed, 0, sizeof ed);
    const Result e = r.mem_pool_export_pointer(&ed, reinterpret_cast<void *>(base));
    if (e == hipSuccess) std::memcpy(out, ed.reserved, kGpuIpcHandleBytes);
    return e;
  }
  // The fd by value in the pointer argument, as for CUDA.
  static Result import_fd(const Api &r, int fd, Pool *pool) {
    return r.mem_pool_import_from_shareable_handle(
        pool, reinterpret_cast<void *>(static_cast<uintptr_t>(fd)),
        hipMemHandleTypePosixFileDescriptor, 0);
  }
  static Result import_pointer(const Api &r, Pool pool, const uint8_t *data, void **ptr) {
    hipMemPoolPtrExportData ed;
    std::memcpy(ed.reserved, data, kGpuIpcHandleBytes);
    return r.mem_pool_import_pointer(ptr, pool, &ed);
  }
  static Result destroy_pool(const Api &r, Pool pool) { return r.mem_pool_destroy(pool); }
  static Result free_imported(const Api &r, void *ptr) { return r.device_free(ptr); }
  static Result create_pool(const Api &r, int32_t ordinal, Pool *pool) {
    hipMemPoolProps props;
    std::memset(&props, 0, sizeof props);  // ROCm 6.3's maxSize 0: the default
    props.allocType = hipMemAllocationTypePinned;
    props.handleTypes = hipMemHandleTypePosixFileDescriptor;
    props.location.type = hipMemLocationTypeDevice;
    props.location.id = ordinal;
    return r.mem_pool_create(pool, &props);
  }
  static Result alloc_from_pool(const Api &r, void **p, size_t n, Pool pool, void *stream) {
    return r.malloc_from_pool_async(p, n, pool, static_cast<hipStream_t>(stream));
  }
  // A HIP stream's device is not checked here (as before the traits).
  static Result stream_elsewhere(const Api &, void *, bool *other, const char **) {
    *other = false;
    return hipSuccess;
  }
  // No incarnations (gpu.md §4): `context` is 0.
  template <typename Op>
  static void release(hurray_device device, const void *what, const char *kind, uint64_t, Op op) {
    release_with_device(device, what, kind, op);
  }
};

using HipPools = PoolIpc<HipPoolTraits>;

}  // namespace hurray::detail

#endif  // HURRAY_WITH_HIP

#endif  // HURRAY_SRC_DEVICE_HIP_POOL_IPC_H_
