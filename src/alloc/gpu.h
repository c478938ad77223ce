// What the GPU back ends (alloc/cuda.cc, alloc/hip.cc) offer the rest of the
// library beyond the DeviceAllocator interface, and the failure accounting
// they share (alloc/gpu.cc). See docs/impl/gpu.md.
#ifndef HURRAY_SRC_ALLOC_GPU_H_
#define HURRAY_SRC_ALLOC_GPU_H_

#include <cstdint>

#include "hurray/hurray.h"

namespace hurray {

// One vendor's stream, copy and pointer operations. Every function returns a
// hurray_status and sets the thread's message on failure. Streams are the
// vendor's own handles (CUstream / hipStream_t); NULL is the default stream.
struct GpuVendor {
  const char *name;  // "CUDA" or "HIP"
  // Enqueues a copy of `nbytes` between any two addresses the runtime can
  // reach (device, pinned, managed or pageable host memory) on `stream`, with
  // device `device_id` current around the call.
  int32_t (*copy)(int32_t device_id, void *dst, const void *src, uint64_t nbytes, void *stream);
  // Waits on the host until all work on `stream` is done.
  int32_t (*synchronize)(int32_t device_id, void *stream);
  // Makes `consumer` wait for the work queued so far on `producer`.
  int32_t (*stream_wait)(int32_t device_id, void *producer, void *consumer);
  // HURRAY_OK when `ptr` is memory of `device` (type and ordinal) according
  // to the runtime's pointer attributes; HURRAY_ERR_INVALID_ARGUMENT if not.
  int32_t (*check_pointer)(hurray_device device, const void *ptr);
};

// The vendor serving `device_type` (CUDA for kDLCUDA, kDLCUDAHost,
// kDLCUDAManaged; HIP for kDLROCM, kDLROCMHost), loading its library on first
// use; nullptr with HURRAY_ERR_UNSUPPORTED_DEVICE set when the type is not a
// GPU type, the build leaves it out, or the library cannot work here.
const GpuVendor *find_gpu_vendor(int32_t device_type);

// HURRAY_IMPORT_CHECK_DEVICE_POINTER: HURRAY_OK when `device` is not a GPU
// type or `data` is memory of that device type and ordinal; else
// INVALID_ARGUMENT (or UNSUPPORTED_DEVICE when the runtime is unavailable).
int32_t check_device_pointer(hurray_device device, const void *data);

// Memory that lives on one device ordinal and whose operations run with that
// device current (kDLCUDA, kDLROCM). Pinned and managed memory also name a
// device (the one whose context allocated them), but are not device memory.
inline bool is_device_memory(int32_t device_type) {
  return device_type == HURRAY_DEVICE_CUDA || device_type == HURRAY_DEVICE_ROCM;
}

// CU_STREAM_PER_THREAD and hipStreamPerThread (both 2) name the stream of
// whichever thread uses the handle. Memory cannot be freed "on the stream it
// was allocated on" from another thread through that handle, so such
// requests are served synchronously (gpu §2).
inline bool is_per_thread_stream(const void *stream) {
  return reinterpret_cast<uintptr_t>(stream) == 2;
}

// The stream to hand the allocator when the caller names `stream`: the
// stream itself. The allocators serve the per-thread default stream (2)
// synchronously and order its release after every stream of the device
// (docs/impl/gpu.md §2), and a stream of another device likewise
// synchronously, its release ordered after that stream.
inline void *allocation_stream(void *stream) { return stream; }

// --- Release accounting (alloc/gpu.cc) -------------------------------------
// Releases never fail loudly: each outcome other than success lands here.

// A runtime call of a release failed (the free, or making the owner's
// device current or restoring the thread's own): counted, and the diagnostic
// hook (if any) receives `status` and the formatted message, unless this
// thread is already running the hook (a failure nested in it is counted
// only). Never prints, never allocates.
void report_failed_release(int32_t status, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
// A release skipped because the memory died with its context (CUDA: the
// primary context was reset after the allocation): counted in
// context_reset_skips and sent to the diagnostic hook (HURRAY_ERR_DEVICE,
// the formatted message) under the same rules as report_failed_release.
void report_context_reset_skip(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
// A stream-ordered release whose stream was gone (destroyed by its owner
// before the release): freed synchronously instead; counted only.
void count_stream_fallback();
// The driver was already torn down (process exit): counted, nothing else.
void count_teardown_leak();
// A GPU release in a child process after fork(): counted, nothing else.
void count_fork_skip();

// Helper for the loaders: registers `child_handler` with pthread_atfork.
// The loaders register theirs when libhurray is loaded (static
// initialisation), before any load can start.
void register_fork_child_handler(void (*child_handler)(void));

// Vendors compiled into this build (for registry.cc and find_gpu_vendor).
#if defined(HURRAY_WITH_CUDA)
struct DeviceAllocator;
extern const DeviceAllocator kCudaDeviceAllocator;
extern const DeviceAllocator kCudaHostAllocator;
extern const DeviceAllocator kCudaManagedAllocator;
const GpuVendor *cuda_vendor();  // nullptr + message when unavailable
#endif
#if defined(HURRAY_WITH_HIP)
struct DeviceAllocator;
extern const DeviceAllocator kHipDeviceAllocator;
extern const DeviceAllocator kHipHostAllocator;
const GpuVendor *hip_vendor();  // nullptr + message when unavailable
#endif

}  // namespace hurray

#endif  // HURRAY_SRC_ALLOC_GPU_H_
