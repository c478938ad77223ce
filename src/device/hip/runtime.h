// SPDX-License-Identifier: Apache-2.0
// The HIP runtime as libhurray uses it: entry points looked up with dlsym in
// libamdhip64 opened with dlopen. Types and constants come from ROCm's
// hip_runtime_api.h (Debian's libamdhip64-dev); nothing is linked. ROCm 5
// and ROCm 6+ disagree on hipPointerAttribute_t's memory type values, so the
// runtime version picks the decoding (docs/impl/gpu.md §1, §5).
#ifndef HURRAY_SRC_DEVICE_HIP_RUNTIME_H_
#define HURRAY_SRC_DEVICE_HIP_RUNTIME_H_

#if !defined(__HIP_PLATFORM_AMD__) && !defined(__HIP_PLATFORM_NVIDIA__)
#define __HIP_PLATFORM_AMD__ 1
#endif
#include <hip/hip_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace hurray::detail {

// Oldest runtime accepted (hipRuntimeGetVersion encoding: major * 10^7 +
// minor * 10^5 + patch).
constexpr int kHipMinRuntimeVersion = 50000000;

// hipPointerAttribute_t as both ROCm 5 and ROCm 6+ lay it out: the first
// field is named memoryType in ROCm 5 and type in ROCm 6, with different
// values (see HipRuntime::abi6).
struct HipPointerAttributes {
  int memory_type;
  int device;
  void *device_pointer;
  void *host_pointer;
  int is_managed;
  unsigned allocation_flags;
};
static_assert(sizeof(HipPointerAttributes) == sizeof(hipPointerAttribute_t) &&
                  offsetof(HipPointerAttributes, device) ==
                      offsetof(hipPointerAttribute_t, device) &&
                  offsetof(HipPointerAttributes, is_managed) ==
                      offsetof(hipPointerAttribute_t, isManaged),
              "hipPointerAttribute_t layout differs from the one libhurray decodes");

struct HipRuntime {
  int version;       // hipRuntimeGetVersion
  bool abi6;         // ROCm 6 or newer: the new hipMemoryType values
  int device_count;  // hipGetDeviceCount at load, > 0
  const char *path;  // the file that was loaded

  hipError_t (*get_device_count)(int *);
  hipError_t (*get_device)(int *);
  hipError_t (*set_device)(int);
  hipError_t (*device_malloc)(void **, size_t);
  hipError_t (*device_free)(void *);
  hipError_t (*host_malloc)(void **, size_t, unsigned int);
  hipError_t (*host_free)(void *);
  hipError_t (*malloc_async)(void **, size_t, hipStream_t);  // NULL before ROCm 5.2
  hipError_t (*free_async)(void *, hipStream_t);             // NULL before ROCm 5.2
  hipError_t (*memcpy_async)(void *, const void *, size_t, hipMemcpyKind, hipStream_t);
  hipError_t (*stream_synchronize)(hipStream_t);
  hipError_t (*event_create_with_flags)(hipEvent_t *, unsigned);
  hipError_t (*event_record)(hipEvent_t, hipStream_t);
  hipError_t (*stream_wait_event)(hipStream_t, hipEvent_t, unsigned int);
  hipError_t (*event_destroy)(hipEvent_t);
  hipError_t (*pointer_get_attributes)(hipPointerAttribute_t *, const void *);
  hipError_t (*runtime_get_version)(int *);
  // Strided copies on the device (strided_copy.cc); optional: NULL when
  // the library lacks them, and such copies are staged through the host.
  hipError_t (*memcpy_2d_async)(void *, size_t, const void *, size_t, size_t, size_t, hipMemcpyKind,
                                hipStream_t);
  hipError_t (*memcpy_3d_async)(const hipMemcpy3DParms *, hipStream_t);
  hipError_t (*device_synchronize)(void);
  // Optional: NULL when the library lacks it; then a release or copy cannot
  // tell that a stream is being captured.
  hipError_t (*stream_is_capturing)(hipStream_t, hipStreamCaptureStatus *);
  // Optional (NULL when the library lacks it): libhurray's own calls then
  // run in the thread's capture mode (HipScope, device/hip/vendor.h).
  hipError_t (*exchange_capture_mode)(hipStreamCaptureMode *);
  // Legacy IPC (device/hip/ipc.cc, docs/impl/ipc.md §6); optional: NULL
  // when the library lacks one, and GPU memory then cannot cross processes.
  hipError_t (*ipc_get_mem_handle)(hipIpcMemHandle_t *, void *);
  hipError_t (*ipc_open_mem_handle)(void **, hipIpcMemHandle_t, unsigned int);
  hipError_t (*ipc_close_mem_handle)(void *);
  hipError_t (*mem_get_address_range)(hipDeviceptr_t *, size_t *, hipDeviceptr_t);
  // The device's UUID, which names it across processes (ipc.md §6.1);
  // optional like the above.
  hipError_t (*device_get)(hipDevice_t *, int);
  hipError_t (*device_get_uuid)(hipUUID *, hipDevice_t);
  // IPC events (device/hip/ipc.cc, ipc.md §6); optional like the above.
  hipError_t (*ipc_get_event_handle)(hipIpcEventHandle_t *, hipEvent_t);
  hipError_t (*ipc_open_event_handle)(hipEvent_t *, hipIpcEventHandle_t);
  // The host wait an import makes while the stream it would wait on cannot
  // be used (a capture; ipc.md §6); optional.
  hipError_t (*event_synchronize)(hipEvent_t);
  // Stream-ordered pool memory across processes (device/hip/pool_ipc.cc,
  // ipc.md §6, kinds 5 and 6); optional: NULL when the library lacks one
  // (before ROCm 5.2), and pool memory then cannot cross processes.
  hipError_t (*mem_pool_create)(hipMemPool_t *, const hipMemPoolProps *);
  hipError_t (*mem_pool_destroy)(hipMemPool_t);
  hipError_t (*malloc_from_pool_async)(void **, size_t, hipMemPool_t, hipStream_t);
  hipError_t (*mem_pool_export_to_shareable_handle)(void *, hipMemPool_t,
                                                    hipMemAllocationHandleType, unsigned int);
  hipError_t (*mem_pool_import_from_shareable_handle)(hipMemPool_t *, void *,
                                                      hipMemAllocationHandleType, unsigned int);
  hipError_t (*mem_pool_export_pointer)(hipMemPoolPtrExportData *, void *);
  hipError_t (*mem_pool_import_pointer)(void **, hipMemPool_t, hipMemPoolPtrExportData *);
  // Optional on its own: HIP_POINTER_ATTRIBUTE_MEMPOOL_HANDLE, which names
  // the pool of memory libhurray did not allocate (pool_ipc.cc).
  hipError_t (*pointer_get_attribute)(void *, hipPointer_attribute, hipDeviceptr_t);

  // Whether every pool entry point above but pointer_get_attribute is there.
  bool pool_ipc() const {
    return mem_pool_create != nullptr && mem_pool_destroy != nullptr &&
           malloc_from_pool_async != nullptr && mem_pool_export_to_shareable_handle != nullptr &&
           mem_pool_import_from_shareable_handle != nullptr && mem_pool_export_pointer != nullptr &&
           mem_pool_import_pointer != nullptr && free_async != nullptr;
  }
};

// The runtime, loading it on the first call (once, thread-safely). Returns
// nullptr with HURRAY_ERR_UNSUPPORTED_DEVICE and a message when no library
// can be loaded or it cannot work, or in a child forked after loading.
const HipRuntime *hip_runtime();

// The runtime if a previous call loaded it, else nullptr; no message, no
// loading: for the release path.
const HipRuntime *loaded_hip_runtime();

// True in a child process forked after the runtime was loaded (or while it
// was being loaded).
bool hip_forked_child();

// True once the runtime is gone or about to go: process exit has begun (an
// atexit handler registered right after dlopen, so it runs before the
// runtime's own static destructors), or a call reported the runtime
// deinitialised. Releases then leak quietly without calling into it.
bool hip_torn_down();
void mark_hip_torn_down();

// "hipErrorOutOfMemory" for the common codes, "hipError_t" otherwise.
const char *hip_error_name(hipError_t e);

}  // namespace hurray::detail

#endif  // HURRAY_SRC_DEVICE_HIP_RUNTIME_H_
