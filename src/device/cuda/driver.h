// SPDX-License-Identifier: Apache-2.0
// The CUDA driver API as libhurray uses it: a table of entry points obtained
// at run time through cuGetProcAddress, each at an explicit ABI version
// (the number in its PFN_ type name), from libcuda.so.1 opened with dlopen.
// Built only with HURRAY_WITH_CUDA; types come from the toolkit's headers,
// nothing is linked (docs/impl/gpu.md §1).
#ifndef HURRAY_SRC_DEVICE_CUDA_DRIVER_H_
#define HURRAY_SRC_DEVICE_CUDA_DRIVER_H_

#include <cuda.h>
#include <cudaTypedefs.h>

#include <atomic>
#include <cstdint>

namespace hurray::detail {

// Oldest driver accepted: the first with cuGetProcAddress.
constexpr int kCudaMinDriverVersion = 11030;

// libhurray's reference to one device's primary context. `ctx` is retained
// on first use and kept for the life of the process; `id` identifies the
// incarnation of the context that libhurray last saw alive: its
// cuCtxGetId (driver 12.0+), or a generation counted by libhurray itself on
// older drivers. A cuDevicePrimaryCtxReset (cudaDeviceReset) ends the
// incarnation; memory allocated in it died with it.
struct PrimarySlot {
  std::atomic<CUcontext> ctx;
  std::atomic<uint64_t> id;
};

struct CudaDriver {
  int version;           // cuDriverGetVersion, e.g. 12040 for 12.4
  int device_count;      // cuDeviceGetCount at load, > 0
  bool proc_address_v2;  // resolved through cuGetProcAddress_v2
  // One slot per ordinal (ctx NULL until first use).
  PrimarySlot *primary;

  PFN_cuInit_v2000 init;
  PFN_cuDriverGetVersion_v2020 driver_get_version;
  PFN_cuDeviceGetCount_v2000 device_get_count;
  PFN_cuDeviceGet_v2000 device_get;
  PFN_cuDevicePrimaryCtxRetain_v7000 primary_ctx_retain;
  PFN_cuCtxGetCurrent_v4000 ctx_get_current;
  PFN_cuCtxPushCurrent_v4000 ctx_push_current;
  PFN_cuCtxPopCurrent_v4000 ctx_pop_current;
  PFN_cuMemAlloc_v3020 mem_alloc;
  PFN_cuMemFree_v3020 mem_free;
  PFN_cuMemHostAlloc_v2020 mem_host_alloc;
  PFN_cuMemFreeHost_v2000 mem_free_host;
  PFN_cuMemAllocManaged_v6000 mem_alloc_managed;
  PFN_cuMemAllocAsync_v11020 mem_alloc_async;
  PFN_cuMemFreeAsync_v11020 mem_free_async;
  PFN_cuMemcpyAsync_v4000 memcpy_async;
  PFN_cuStreamSynchronize_v2000 stream_synchronize;
  PFN_cuEventCreate_v2000 event_create;
  PFN_cuEventRecord_v2000 event_record;
  PFN_cuStreamWaitEvent_v3020 stream_wait_event;
  PFN_cuEventDestroy_v4000 event_destroy;
  PFN_cuPointerGetAttributes_v7000 pointer_get_attributes;
  // Strided copies on the device (strided_copy.cc).
  PFN_cuMemcpy2DAsync_v3020 memcpy_2d_async;
  PFN_cuMemcpy3DAsync_v3020 memcpy_3d_async;
  PFN_cuModuleLoadData_v2000 module_load_data;
  PFN_cuModuleGetFunction_v2000 module_get_function;
  PFN_cuLaunchKernel_v4000 launch_kernel;
  // NULL before driver 12.0: then a context is known by its handle only.
  PFN_cuCtxGetId_v12000 ctx_get_id;
  PFN_cuDevicePrimaryCtxGetState_v7000 primary_ctx_get_state;
  PFN_cuThreadExchangeStreamCaptureMode_v10010 exchange_capture_mode;
  // Asked of a stream only at allocation, while the caller vouches for it
  // (never at release: the stream may be gone by then, docs/impl/gpu.md §3).
  PFN_cuStreamGetCtx_v9020 stream_get_ctx;
  PFN_cuCtxGetDevice_v2000 ctx_get_device;
  // Whether a stream is being captured: the release asks before it queues a
  // free on the stream or waits for it (docs/impl/gpu.md §3, graph capture).
  PFN_cuStreamIsCapturing_v10000 stream_is_capturing;
  // Whether a stream is blocking (no CU_STREAM_NON_BLOCKING): asked of a
  // stream only when its release is deferred, while the release still
  // vouches for it (docs/impl/gpu.md §2, "Releases during a capture of
  // their stream").
  PFN_cuStreamGetFlags_v5050 stream_get_flags;
  PFN_cuCtxSynchronize_v2000 ctx_synchronize;
  // Legacy IPC (device/cuda/ipc.cc, docs/impl/ipc.md §6); optional: NULL
  // when the driver lacks one, and GPU memory then cannot cross processes.
  PFN_cuIpcGetMemHandle_v4010 ipc_get_mem_handle;
  PFN_cuIpcOpenMemHandle_v11000 ipc_open_mem_handle;
  PFN_cuIpcCloseMemHandle_v4010 ipc_close_mem_handle;
  PFN_cuMemGetAddressRange_v3020 mem_get_address_range;
  // cuDeviceGetUuid_v2 (cuDeviceGetUuid before driver 11.4): the UUID a
  // descriptor names the device by (ipc.md §6.1); optional like the above.
  PFN_cuDeviceGetUuid_v11040 device_get_uuid;
  // IPC events (device/cuda/ipc.cc, ipc.md §6, what the consumer waits
  // for); optional like the above: without them GPU memory cannot be sent.
  PFN_cuIpcGetEventHandle_v4010 ipc_get_event_handle;
  PFN_cuIpcOpenEventHandle_v4010 ipc_open_event_handle;
  // The host wait an import makes instead of a stream wait while the stream
  // it would wait on cannot be used (a capture; ipc.md §6); optional.
  PFN_cuEventSynchronize_v2000 event_synchronize;
  // Virtual memory management (device/cuda/vmm_ipc.cc, docs/impl/ipc.md §6,
  // kind 2); optional like the legacy IPC ones: vmm_ipc() says whether all
  // are there, else VMM memory is not recognised and export falls back to
  // legacy IPC.
  PFN_cuMemRetainAllocationHandle_v11000 mem_retain_allocation_handle;
  PFN_cuMemGetAllocationPropertiesFromHandle_v10020 mem_get_allocation_properties;
  PFN_cuMemGetAllocationGranularity_v10020 mem_get_allocation_granularity;
  PFN_cuMemExportToShareableHandle_v10020 mem_export_to_shareable_handle;
  PFN_cuMemImportFromShareableHandle_v10020 mem_import_from_shareable_handle;
  PFN_cuMemAddressReserve_v10020 mem_address_reserve;
  PFN_cuMemAddressFree_v10020 mem_address_free;
  PFN_cuMemMap_v10020 mem_map;
  PFN_cuMemUnmap_v10020 mem_unmap;
  PFN_cuMemSetAccess_v10020 mem_set_access;
  PFN_cuMemRelease_v10020 mem_release;
  // Memory pools across processes (device/cuda/pool_ipc.cc, docs/impl/ipc.md
  // §6, kinds 5 and 6); optional like the above: pool_ipc() says whether
  // all are there, else pool memory is refused as before.
  PFN_cuPointerGetAttribute_v4000 pointer_get_attribute;
  PFN_cuMemPoolCreate_v11020 mem_pool_create;
  PFN_cuMemPoolDestroy_v11020 mem_pool_destroy;
  PFN_cuMemAllocFromPoolAsync_v11020 mem_alloc_from_pool_async;
  PFN_cuMemPoolExportToShareableHandle_v11020 mem_pool_export_to_shareable_handle;
  PFN_cuMemPoolImportFromShareableHandle_v11020 mem_pool_import_from_shareable_handle;
  PFN_cuMemPoolExportPointer_v11020 mem_pool_export_pointer;
  PFN_cuMemPoolImportPointer_v11020 mem_pool_import_pointer;

  bool pool_ipc() const {
    return pointer_get_attribute != nullptr && mem_pool_create != nullptr &&
           mem_pool_destroy != nullptr && mem_alloc_from_pool_async != nullptr &&
           mem_pool_export_to_shareable_handle != nullptr &&
           mem_pool_import_from_shareable_handle != nullptr && mem_pool_export_pointer != nullptr &&
           mem_pool_import_pointer != nullptr && mem_get_address_range != nullptr;
  }

  bool vmm_ipc() const {
    return mem_retain_allocation_handle != nullptr && mem_get_allocation_properties != nullptr &&
           mem_get_allocation_granularity != nullptr && mem_export_to_shareable_handle != nullptr &&
           mem_import_from_shareable_handle != nullptr && mem_address_reserve != nullptr &&
           mem_address_free != nullptr && mem_map != nullptr && mem_unmap != nullptr &&
           mem_set_access != nullptr && mem_release != nullptr && mem_get_address_range != nullptr;
  }
};

// The driver, loading it on the first call (once, thread-safely). Returns
// nullptr with HURRAY_ERR_UNSUPPORTED_DEVICE and a message when the library
// is missing or unusable, or when this is a child forked after the parent
// had loaded it.
const CudaDriver *cuda_driver();

// The driver if a previous call loaded it, else nullptr. Sets no message and
// never loads: for the release path.
const CudaDriver *loaded_cuda_driver();

// True in a child process forked after the driver was loaded.
bool cuda_forked_child();

// The enumerator name of `r` ("CUDA_ERROR_OUT_OF_MEMORY"), for every code in
// CUDA 13.0's cuda.h (JIT and PTX load errors included); "CUresult" for a
// number it does not know.
const char *cuda_error_name(CUresult r);

}  // namespace hurray::detail

#endif  // HURRAY_SRC_DEVICE_CUDA_DRIVER_H_
