// SPDX-License-Identifier: Apache-2.0
/*
 * Control API of the test-double GPU libraries in tests/fake_drivers/:
 *   libcuda.so.1   (fake_cuda.cc)  - a CUDA driver backed by host memory
 *   libamdhip64.so (fake_hip.cc)   - a HIP runtime backed by host memory
 *
 * Both record every call they receive (entry point, calling thread, the
 * context/device current on that thread, pointer, stream, bytes, result),
 * keep the allocations they handed out, and can be told to fail. Tests open
 * the same file libhurray was pointed at (HURRAY_CUDA_DRIVER_PATH /
 * HURRAY_HIP_LIBRARY_PATH) with dlopen, which returns the very same loaded
 * object, and look these functions up with dlsym. All are thread-safe.
 *
 * Configuration read once, when the library is loaded:
 *   FAKE_CUDA_DRIVER_VERSION  cuDriverGetVersion's answer (default 12080)
 *   FAKE_CUDA_DEVICE_COUNT    devices (default 2; 0: cuInit fails with
 *                             CUDA_ERROR_NO_DEVICE)
 *   FAKE_HIP_RUNTIME_VERSION  hipRuntimeGetVersion's answer (default
 *                             60200000, ROCm 6.2; 5xxxxxxx selects the ROCm 5
 *                             pointer-attribute encoding)
 *   FAKE_HIP_DEVICE_COUNT     devices (default 2; 0: hipErrorNoDevice)
 *   FAKE_CUDA_INIT_DELAY_MS   cuInit takes this long (default 0), to fork
 *                             in the middle of a first load
 *   FAKE_HIP_STATIC_TEARDOWN  1: the runtime is destroyed by a static
 *                             destructor registered at load, as ROCm's is,
 *                             and any later call is a use-after-free (the
 *                             fake prints it and exits with status 86)
 * Like the real libraries, each fake tears itself down at process exit (an
 * atexit handler registered on first use): calls after that return
 * CUDA_ERROR_DEINITIALIZED / hipErrorDeinitialized.
 */
#ifndef HURRAY_TESTS_FAKES_FAKE_CONTROL_H_
#define HURRAY_TESTS_FAKES_FAKE_CONTROL_H_

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* One recorded call. */
typedef struct fake_call {
  char fn[40];     /* entry point, without ABI suffix: "cuMemFree", "hipFree" */
  uint64_t thread; /* pthread_self() of the caller */
  int32_t device;  /* CUDA: device of the context current on the calling
                      thread (-1: none); HIP: the thread's current device */
  int32_t result;  /* CUresult / hipError_t returned */
  void *ptr;       /* pointer allocated/freed/copied to (NULL if none) */
  void *stream;    /* stream argument (NULL if none); for stream waits the
                      consumer stream */
  void *other;     /* copies: the source; stream waits: the stream the
                      event was recorded on */
  uint64_t bytes;  /* size argument */
} fake_call;

/* The same set for each fake, prefixed fake_cuda_ or fake_hip_. */
#define FAKE_CONTROL_API(prefix)                                             \
  /* Forgets the log and the injections (allocations stay). */               \
  void prefix##reset(void);                                                  \
  /* Number of logged calls of `fn` (NULL: all calls). */                    \
  int prefix##call_count(const char *fn);                                    \
  /* Copies up to `max` logged calls of `fn` (NULL: all), oldest first;      \
     returns how many were logged. */                                        \
  int prefix##calls(const char *fn, fake_call *out, int max);                \
  /* The next `times` calls of `fn` return `result` (times < 0: until        \
     reset) without doing anything. */                                       \
  void prefix##inject(const char *fn, int result, int times);                \
  /* Tears the driver down now (1) or brings it back (0): while down every   \
     entry point returns the "deinitialized" error. */                       \
  void prefix##set_deinitialized(int on);                                    \
  /* Allocations handed out and not yet freed. */                            \
  int64_t prefix##live_allocations(void);                                    \
  /* Times the library was initialised (cuInit / first HIP call). */         \
  int prefix##init_count(void);                                              \
  /* Stops (0) or resumes (1) logging calls, for benchmarks. */              \
  void prefix##set_recording(int on);                                        \
  /* Frees of memory that a copy queued on a stream still uses, the free not \
     ordered after it: a synchronous free (the driver's implicit             \
     synchronisation does not count) or a free on another stream, with no    \
     synchronisation of that stream (or of its whole context / device) in    \
     between. The per-thread default stream (2) is each thread's own. */     \
  int prefix##unordered_frees(void);                                         \
  /* Mappings of other processes' memory opened with cuIpcOpenMemHandle /    \
     hipIpcOpenMemHandle and not closed yet. */                              \
  int64_t prefix##ipc_open_count(void);                                      \
  /* Events of this process made with CU_EVENT_INTERPROCESS /                \
     hipEventInterprocess and not destroyed yet (fake_ipc_event.h). */       \
  int64_t prefix##live_ipc_events(void);

FAKE_CONTROL_API(fake_cuda_)
FAKE_CONTROL_API(fake_hip_)

/* CUDA only. */
/* cuDevicePrimaryCtxRetain calls made for `device`. */
int fake_cuda_primary_retains(int device);
/* Highest ABI version requested through cuGetProcAddress, and how many
   requests asked for a version newer than the driver reports. */
int fake_cuda_max_requested_version(void);
int fake_cuda_too_new_requests(void);
/* 1 when the last lookup came through cuGetProcAddress_v2. */
int fake_cuda_used_proc_address_v2(void);
/* The context current on the calling thread as a device ordinal (-1: none),
   and helpers to set the calling thread up: make device `d`'s primary
   context current (d < 0: no context). */
int fake_cuda_current_device(void);
void fake_cuda_set_current_device(int d);
/* Resets device `d`'s primary context and revives it at once under the
   same handle with a new cuCtxGetId id, as cudaDeviceReset followed by
   another library's retain does: its allocations are gone, and functions of
   modules loaded before then fail to launch with CUDA_ERROR_INVALID_HANDLE. */
void fake_cuda_renew_context(int d);
/* The strided copies: cuMemcpy2DAsync / cuMemcpy3DAsync copy row by row and
   refuse (CUDA_ERROR_INVALID_VALUE) pitches below the width or above 2^31-1
   and host/device memory types that do not match the memory; the module API
   accepts only libhurray's PTX, and cuLaunchKernel runs a CPU reference of
   its kernel on the launch's parameters (src/device/cuda/kernel_params.h), failing
   with CUDA_ERROR_ILLEGAL_ADDRESS when an access would leave memory the
   device can reach (its own, managed, pinned) and with
   CUDA_ERROR_MISALIGNED_ADDRESS for unaligned units. Each is logged (ptr:
   destination, other: source, bytes: bytes copied). */
/* Primary-context resets: reset(d) does what cuDevicePrimaryCtxReset /
   cudaDeviceReset do (device d's allocations are gone, its primary context
   is inactive: calls in it fail with CUDA_ERROR_CONTEXT_IS_DESTROYED until
   it is retained again, which starts a new incarnation with a new
   cuCtxGetId); revive(d) is another library retaining it again. */
void fake_cuda_primary_ctx_reset(int d);
void fake_cuda_primary_ctx_revive(int d);
int fake_cuda_primary_ctx_active(int d);
/* Graph capture: the calling thread begins capturing in global mode. Until
   end_capture, an unsafe call (allocation, free, cuStreamSynchronize,
   cuCtxSynchronize) from another thread whose capture mode is global fails
   with CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED and invalidates the capture;
   end_capture returns 1 if the capture is still valid, else 0. */
void fake_cuda_begin_global_capture(void);
int fake_cuda_end_capture(void);
/* The calling thread's CUstreamCaptureMode (cuThreadExchangeStreamCaptureMode). */
int fake_cuda_capture_mode(void);
void fake_cuda_set_capture_mode(int mode);
/* A stream of device d (cuStreamGetCtx answers d's primary context;
   stream-ordered allocation on it needs d's context current), and its
   destruction: afterwards cuStreamQuery, cuStreamGetCtx, cuMemFreeAsync and
   cuStreamSynchronize on it fail with CUDA_ERROR_INVALID_HANDLE, until the
   next stream_create hands the same handle out again, as the real driver
   reuses handles. Every call that names a destroyed stream is counted in
   dead_stream_uses (undefined behaviour on the real driver, which does not
   validate handles). Streams the fake did not make belong to the caller's
   current context. */
void *fake_cuda_stream_create(int d);
void fake_cuda_stream_destroy(void *stream);
int fake_cuda_dead_stream_uses(void);
/* Events belong to the context current when they were made (cuEventCreate,
   cuIpcOpenEventHandle). cuEventRecord with a stream of another context:
   CUDA_ERROR_INVALID_HANDLE (Driver API reference, cuEventRecord);
   cuStreamWaitEvent accepts an event of any context or device (same
   reference). A reset of the event's primary context (reset(d), renew(d),
   cuDevicePrimaryCtxReset) destroys it: every later call naming it
   (record, wait, destroy, cuIpcGetEventHandle) fails with
   CUDA_ERROR_INVALID_HANDLE and is counted here (undefined behaviour on
   the real driver). */
int fake_cuda_dead_event_uses(void);
/* Graph capture of one stream (every fake stream is a blocking one). While
   `stream` captures, cuStreamIsCapturing answers ACTIVE (INVALIDATED once
   invalidated; the legacy stream: CUDA_ERROR_STREAM_CAPTURE_IMPLICIT with
   its device current), and the calls CUDA prohibits during capture fail,
   invalidate the capture and are counted in prohibited_calls: cuStreamQuery
   or cuStreamSynchronize of the stream, cuMemFreeAsync on it (no memory of
   the fake is a graph allocation), cuCtxSynchronize and any use of the
   legacy stream (NULL, 1) with its device's context current (a launch, a
   copy, a stream-ordered allocation or free, cuEventRecord, and
   cuStreamWaitEvent on it: CUDA_ERROR_STREAM_CAPTURE_IMPLICIT); also
   cuStreamWaitEvent on it of an event not recorded during a capture
   without CU_EVENT_WAIT_EXTERNAL (CUDA_ERROR_STREAM_CAPTURE_ISOLATION),
   while that flag on a stream that is not capturing is
   CUDA_ERROR_INVALID_VALUE (the flags are logged in `bytes`). end_capture
   returns 1 if the capture is still valid, else 0. */
void fake_cuda_stream_begin_capture(void *stream);
int fake_cuda_stream_end_capture(void *stream);
int fake_cuda_prohibited_calls(void);
/* cuEventSynchronize calls that waited (a host wait on one event; it
   touches no stream and no capture). */
int fake_cuda_event_synchronizations(void);
/* Non-blocking streams and capture modes (fake_capture.h). A stream made
   with CU_STREAM_NON_BLOCKING in `flags` does not synchronise with the
   legacy stream: its capture does not show on the legacy stream
   (cuStreamIsCapturing answers CUDA_SUCCESS / NONE there) and the legacy
   stream may be used meanwhile, but cuCtxSynchronize still invalidates it.
   cuStreamSynchronize of the legacy stream (NULL, 1) waits for every
   blocking stream of its context, per-thread ones of every thread included.
   begin_capture_mode begins a capture in CUstreamCaptureMode `mode` on the
   calling thread: while it lasts a potentially unsafe call (cuMemAlloc,
   cuMemFree, cuMemHostAlloc, cuMemFreeHost, cuMemAllocManaged,
   cuStreamSynchronize, cuCtxSynchronize) fails with
   CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED and invalidates it when made by the
   capturing thread (global, thread-local) or by any thread whose own mode
   is global (global); relaxed prohibits nothing. stream_begin_capture is
   begin_capture_mode in relaxed mode. */
void *fake_cuda_stream_create_flags(int d, unsigned int flags);
void fake_cuda_stream_begin_capture_mode(void *stream, int mode);
/* Counters (both fakes, fake_capture.h): context-wide (cuCtxSynchronize /
   hipDeviceSynchronize) and per-stream (cuStreamSynchronize /
   hipStreamSynchronize) host-blocking synchronisations called, and captures
   invalidated (each once). Not reset by reset(). */
int fake_cuda_context_synchronizations(void);
int fake_cuda_stream_synchronizations(void);
int fake_cuda_invalidated_captures(void);

/* Virtual memory management (fake_vmm.h): cuMemCreate allocations are
   memfds (requestedHandleTypes recorded), cuMemAddressReserve reserves
   PROT_NONE host pages, cuMemMap (offset 0 only) maps the memfd there
   MAP_FIXED | MAP_SHARED, cuMemUnmap returns the range to PROT_NONE;
   cuMemRetainAllocationHandle finds the handle by any address inside a
   mapping (CUDA_ERROR_INVALID_VALUE for other memory), cuMemGetAddressRange
   answers a mapping's range, cuMemExportToShareableHandle gives a dup of the
   memfd (CUDA_ERROR_NOT_SUPPORTED without the POSIX-fd handle type) and
   cuMemImportFromShareableHandle makes a new handle from such an fd (left
   open). An allocation lives while a handle reference (create, retain,
   import; each undone by one cuMemRelease) or a mapping holds it. Each call
   is logged. vmm_alloc makes an allocation through those entry points
   (create, reserve, map, set access for `device`, release the handle) and
   stores its address in *out; vmm_free unmaps it and frees the range. Both
   return a CUresult. The counts: allocations alive, mappings alive, handle
   references held (mappings not counted). */
int fake_cuda_vmm_alloc(int device, uint64_t bytes, unsigned long long handle_types, void **out);
int fake_cuda_vmm_free(void *p, uint64_t bytes);
int64_t fake_cuda_vmm_live_allocations(void);
int64_t fake_cuda_vmm_live_mappings(void);
int64_t fake_cuda_vmm_handle_references(void);

/* Memory pools (fake_pool.h, fake_cuda_pool.cc): cuDeviceGetDefaultMemPool
   answers each device's default pool (handle type NONE: not exportable),
   which cuMemAllocAsync memory belongs to; cuMemPoolCreate with
   CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR makes a pool whose memory is a
   memfd mapped MAP_SHARED, exported by cuMemPoolExportToShareableHandle as
   a dup of it and mapped by another process's
   cuMemPoolImportFromShareableHandle (imported pools cannot allocate);
   cuMemPoolExportPointer / cuMemPoolImportPointer share one allocation,
   and cuPointerGetAttribute(CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE) names the
   pool of an address. An exporter's free of an allocation that a live
   process still has imported breaks the documented order (importers free
   first) and is counted in pool_order_violations. pool_create makes a
   device pool with `handle_types` (a CUresult). The counts: pool
   allocations of this process alive, pools imported, pointers imported
   (all, and not yet freed), pools destroyed. */
int fake_cuda_pool_create(int device, unsigned long long handle_types, void **pool);
int64_t fake_cuda_pool_live_allocations(void);
int64_t fake_cuda_pool_imports(void);
int64_t fake_cuda_pool_pointer_imports(void);
int64_t fake_cuda_pool_live_pointer_imports(void);
int64_t fake_cuda_pools_destroyed(void);
int64_t fake_cuda_pool_order_violations(void);
/* The same for the HIP fake (fake_hip_pool.h: hipMemPoolCreate,
   hipMemPoolExportToShareableHandle, hipMemPoolExportPointer, ...), whose
   hipPointerGetAttribute answers HIP_POINTER_ATTRIBUTE_MEMPOOL_HANDLE
   (FAKE_HIP_NO_MEMPOOL_ATTRIBUTE=1: hipErrorInvalidValue instead). */
int fake_hip_pool_create(int device, unsigned long long handle_types, void **pool);
int64_t fake_hip_pool_live_allocations(void);
int64_t fake_hip_pool_imports(void);
int64_t fake_hip_pool_pointer_imports(void);
int64_t fake_hip_pool_live_pointer_imports(void);
int64_t fake_hip_pools_destroyed(void);
int64_t fake_hip_pool_order_violations(void);

/* HIP only. hipMemcpy2DAsync / hipMemcpy3DAsync copy row by row (logged
   like the CUDA ones) and refuse pitches below the width. */
int fake_hip_current_device(void);
void fake_hip_set_current_device(int d);
/* A stream, and its destruction by its owner: afterwards hipStreamQuery,
   hipStreamSynchronize, hipMallocAsync, hipFreeAsync, hipMemcpyAsync,
   hipEventRecord and hipStreamWaitEvent on it return `error` (0:
   hipErrorContextIsDestroyed (709), what ROCm's runtime answers for a stream
   it no longer knows; the HIP API reference lists hipErrorInvalidHandle
   (400)). Streams the fake did not make are always alive, and
   hipStreamQuery answers hipSuccess for them (the fake's work is done at
   once). */
void *fake_hip_stream_create(int d);
void fake_hip_stream_destroy(void *stream, int error);
/* Like CUDA's: a destroyed stream's handle comes back from the next create,
   and calls naming a destroyed stream are counted (ROCm 7 may crash on one).
   While a stream captures, hipStreamIsCapturing answers active (2 once
   invalidated), and hipStreamQuery, hipStreamSynchronize and hipFreeAsync on
   it fail with hipErrorStreamCaptureUnsupported, invalidate the capture and
   are counted. end_capture returns 1 if the capture is still valid.
   Every fake stream is a blocking one of the device it was made for: while
   one captures, hipStreamIsCapturing of the null stream with that device
   current answers hipErrorStreamCaptureImplicit (906), and any use of the
   null stream there (hipEventRecord, hipStreamWaitEvent, copies, launches,
   stream-ordered allocations and frees, hipStreamQuery,
   hipStreamSynchronize) fails with 906, invalidates the capture and is
   counted in prohibited_calls (the HIP API reference of
   hipStreamIsCapturing lists hipErrorStreamCaptureImplicit, "a disallowed
   implicit dependency on a current capture sequence from hipStreamLegacy";
   CUDA's rule, which HIP graphs follow). hipEventSynchronize waits on the
   host and is counted in event_synchronizations. */
int fake_hip_dead_stream_uses(void);
int fake_hip_event_synchronizations(void);
/* hipDeviceReset of device d (the fake also exports hipDeviceReset itself,
   for the calling thread's device): d's allocations and events are deleted
   (HIP API reference, hipDeviceReset). Every later call naming such an
   event (hipEventRecord, hipStreamWaitEvent, hipEventDestroy,
   hipIpcGetEventHandle) fails with hipErrorInvalidHandle (400) and is
   counted in dead_event_uses (a use after free on ROCm). */
void fake_hip_device_reset(int d);
int fake_hip_dead_event_uses(void);
void fake_hip_stream_begin_capture(void *stream);
int fake_hip_stream_end_capture(void *stream);
int fake_hip_prohibited_calls(void);
/* Capture modes as for CUDA (fake_capture.h): begin_capture_mode begins a
   capture in hipStreamCaptureMode `mode` on the calling thread; while it
   lasts hipMalloc, hipFree, hipHostMalloc, hipHostFree,
   hipStreamSynchronize and hipDeviceSynchronize fail with
   hipErrorStreamCaptureUnsupported and invalidate it when the capturing
   thread (global, thread-local) or any thread whose own mode
   (hipThreadExchangeStreamCaptureMode) is global (global) makes them.
   stream_begin_capture is begin_capture_mode in relaxed mode. The counters
   as for CUDA: hipDeviceSynchronize, hipStreamSynchronize, invalidations. */
void fake_hip_stream_begin_capture_mode(void *stream, int mode);
int fake_hip_context_synchronizations(void);
int fake_hip_stream_synchronizations(void);
int fake_hip_invalidated_captures(void);

#ifdef __cplusplus
} /* extern "C" */
#endif

/* For a program's main(), before anything can load a GPU library: point
   libhurray at the fakes the build made (HURRAY_FAKE_*_PATH), unless the
   caller's environment already points it elsewhere. */
#include <stdlib.h>
static inline void fake_use_built_fakes(void) {
#ifdef HURRAY_FAKE_CUDA_PATH
  setenv("HURRAY_CUDA_DRIVER_PATH", HURRAY_FAKE_CUDA_PATH, 0);
#endif
#ifdef HURRAY_FAKE_HIP_PATH
  setenv("HURRAY_HIP_LIBRARY_PATH", HURRAY_FAKE_HIP_PATH, 0);
#endif
}

#endif /* HURRAY_TESTS_FAKES_FAKE_CONTROL_H_ */
