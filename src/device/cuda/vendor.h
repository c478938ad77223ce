// SPDX-License-Identifier: Apache-2.0
// CUDA's traits for the vendor plumbing of device/vendor.h, and the context
// handling every CUDA operation shares (device/cuda/cuda.cc,
// device/cuda/strided_copy.cc): each driver call runs with the primary
// context of the owning device current, pushed when the calling thread has
// another context (or none) and popped afterwards, so the thread ends as it
// began; and in the relaxed stream-capture mode.
#ifndef HURRAY_SRC_DEVICE_CUDA_VENDOR_H_
#define HURRAY_SRC_DEVICE_CUDA_VENDOR_H_

#include <cstddef>
#include <cstdint>

#include "device/backend.h"
#include "device/cuda/driver.h"
#include "device/strided_copy.h"
#include "device/vendor.h"

namespace hurray::detail {

// Host pointers and the driver's device addresses (same bits).
inline CUdeviceptr dptr(const void *p) {
  return static_cast<CUdeviceptr>(reinterpret_cast<uintptr_t>(p));
}
inline void *hptr(CUdeviceptr p) { return reinterpret_cast<void *>(static_cast<uintptr_t>(p)); }

// Makes a context current unless it already is, and restores what the
// thread had (possibly no context) in leave(). Every path calls leave() and
// looks at its result; the destructor only catches a path that forgot.
class ContextScope {
 public:
  explicit ContextScope(const CudaDriver &d) : d_(d) {}
  ContextScope(const ContextScope &) = delete;
  ContextScope &operator=(const ContextScope &) = delete;
  ~ContextScope() { (void)leave(); }
  // On failure *failed names the driver call that failed.
  CUresult enter(CUcontext ctx, const char **failed) {
    CUcontext current = nullptr;
    CUresult r = d_.ctx_get_current(&current);
    if (r != CUDA_SUCCESS) {
      *failed = "cuCtxGetCurrent";
      return r;
    }
    if (current == ctx) return CUDA_SUCCESS;
    r = d_.ctx_push_current(ctx);
    if (r != CUDA_SUCCESS) {
      *failed = "cuCtxPushCurrent";
      return r;
    }
    pushed_ = true;
    return CUDA_SUCCESS;
  }
  // Pops what enter() pushed; CUDA_SUCCESS when nothing was pushed. A
  // failure leaves the owner's context current on this thread.
  CUresult leave() {
    if (!pushed_) return CUDA_SUCCESS;
    pushed_ = false;
    CUcontext popped;
    return d_.ctx_pop_current(&popped);
  }

 private:
  const CudaDriver &d_;
  bool pushed_ = false;
};

// Sets this thread's stream-capture mode to CU_STREAM_CAPTURE_MODE_RELAXED
// for libhurray's own driver calls and gives the thread its mode back
// afterwards: in the default global mode an allocation, free or synchronous
// copy made while *another* thread captures a graph would invalidate that
// capture. Best effort: should the exchange itself fail, the calls run in the
// thread's own mode.
class RelaxedCaptureMode {
 public:
  explicit RelaxedCaptureMode(const CudaDriver &d) : d_(d) {
    CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
    exchanged_ = d_.exchange_capture_mode(&mode) == CUDA_SUCCESS;
    saved_ = mode;
  }
  RelaxedCaptureMode(const RelaxedCaptureMode &) = delete;
  RelaxedCaptureMode &operator=(const RelaxedCaptureMode &) = delete;
  ~RelaxedCaptureMode() {
    if (exchanged_) (void)d_.exchange_capture_mode(&saved_);
  }

 private:
  const CudaDriver &d_;
  CUstreamCaptureMode saved_ = CU_STREAM_CAPTURE_MODE_GLOBAL;
  bool exchanged_ = false;
};

// The live primary context of `ordinal` (checked by the caller) and the id
// of its incarnation, retaining it on first use and again after it was
// reset. Each reference is kept for the life of the process, so the context
// outlives every allocation made in it (short of a reset). (cuda.cc)
CUresult primary_context(const CudaDriver &d, int ordinal, CUcontext *out, uint64_t *out_id);
// Whether incarnation `id` of the primary context of `ordinal` is still the
// live one, without retaining it (cuDevicePrimaryCtxGetState, cuCtxGetId);
// CUDA_ERROR_DEINITIALIZED comes back as is, any other failure reads as "not
// alive". (cuda.cc)
CUresult primary_context_alive(const CudaDriver &d, int ordinal, uint64_t id, bool *alive);

struct CudaTraits {
  using Api = CudaDriver;
  using Result = CUresult;
  using Event = CUevent;
  static constexpr Result kSuccess = CUDA_SUCCESS;
  static constexpr Result kOutOfMemory = CUDA_ERROR_OUT_OF_MEMORY;
  static constexpr Result kNotSupported = CUDA_ERROR_NOT_SUPPORTED;
  static constexpr const char *kName = "CUDA";
  static constexpr const char *kLibrary = "driver";
  static constexpr const char *kAllocAsync = "cuMemAllocAsync";
  static constexpr const char *kMemcpyAsync = "cuMemcpyAsync";
  static constexpr const char *kStreamSynchronize = "cuStreamSynchronize";
  static constexpr const char *kEventCreate = "cuEventCreate";
  static constexpr const char *kEventRecord = "cuEventRecord";
  static constexpr const char *kStreamWaitEvent = "cuStreamWaitEvent";

  static const Api *api() { return cuda_driver(); }
  static bool forked_child() { return cuda_forked_child(); }
  static const char *error_name(Result r) { return cuda_error_name(r); }

  static Result memcpy_async(const Api &d, void *dst, const void *src, size_t n, void *stream) {
    return d.memcpy_async(dptr(dst), dptr(src), n, static_cast<CUstream>(stream));
  }
  static Result stream_synchronize(const Api &d, void *stream) {
    return d.stream_synchronize(static_cast<CUstream>(stream));
  }
  static Result event_create(const Api &d, Event *ev) {
    return d.event_create(ev, CU_EVENT_DISABLE_TIMING);
  }
  static Result event_record(const Api &d, Event ev, void *stream) {
    return d.event_record(ev, static_cast<CUstream>(stream));
  }
  static Result stream_wait_event(const Api &d, void *stream, Event ev) {
    return d.stream_wait_event(static_cast<CUstream>(stream), ev, 0);
  }
  static void event_destroy(const Api &d, Event ev) { d.event_destroy(ev); }
  static Result event_destroy_status(const Api &d, Event ev) { return d.event_destroy(ev); }
  static constexpr const char *kStreamIsCapturing = "cuStreamIsCapturing";
  static constexpr const char *kEventDestroy = "cuEventDestroy";
  static constexpr bool kWaitExternal = true;
  static bool torn_down(Result r) { return r == CUDA_ERROR_DEINITIALIZED; }
  static constexpr const char *kContextState = "cuDevicePrimaryCtxGetState";
  static constexpr const char *kResetCalls = "cuDevicePrimaryCtxReset / cudaDeviceReset";
  static Result context_alive(const Api &d, int32_t ordinal, uint64_t id, bool *alive) {
    return primary_context_alive(d, ordinal, id, alive);
  }
  // cuStreamIsCapturing, allowed during capture; on NULL / CU_STREAM_LEGACY
  // it answers CUDA_ERROR_STREAM_CAPTURE_IMPLICIT while a blocking stream of
  // the current context captures.
  static Result stream_capture(const Api &d, void *stream, Capture *out) {
    CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
    const Result r = d.stream_is_capturing(static_cast<CUstream>(stream), &status);
    *out = Capture::kNone;
    if (r == CUDA_ERROR_STREAM_CAPTURE_IMPLICIT) {
      *out = Capture::kImplicit;
      return CUDA_SUCCESS;
    }
    if (r == CUDA_SUCCESS && status != CU_STREAM_CAPTURE_STATUS_NONE) *out = Capture::kCapturing;
    return r;
  }
  // CU_EVENT_WAIT_EXTERNAL, which the Driver API reference of
  // cuStreamWaitEvent calls invalid outside of stream capture.
  static Result stream_wait_event_external(const Api &d, void *stream, Event ev) {
    return d.stream_wait_event(static_cast<CUstream>(stream), ev, CU_EVENT_WAIT_EXTERNAL);
  }

  // The primary context of the device current, in the relaxed capture mode,
  // for one operation; the thread's own context and mode given back.
  class Scope {
   public:
    explicit Scope(const Api &d) : d_(d), relaxed_(d), ctx_(d) {}
    Result enter(int32_t ordinal, const char **failed, uint64_t *ctx_id) {
      CUcontext ctx;
      uint64_t id = 0;
      CUresult r = primary_context(d_, ordinal, &ctx, &id);
      if (r != CUDA_SUCCESS) {
        *failed = "cuDevicePrimaryCtxRetain";
        return r;
      }
      if (ctx_id != nullptr) *ctx_id = id;
      return ctx_.enter(ctx, failed);
    }
    Result leave() { return ctx_.leave(); }

   private:
    const Api &d_;
    RelaxedCaptureMode relaxed_;
    ContextScope ctx_;
  };
  static int32_t restore_failure(const Scope &s, Result pop, Result r, const char *call,
                                 int32_t device_id);

  // The vendor's own operations (device/backend.h); cuda.cc, and
  // copy_strided in strided_copy.cc: every layout is copied on the device
  // (2-D / 3-D memcpy or the kernel), never staged. Nothing waits on the
  // host except when a device-side staging buffer had to come from
  // cuMemAlloc (no stream-ordered pool), which is then freed after
  // synchronising the stream; on error the stream may hold part of the copy.
  static int32_t allocate(hurray_device device, uint64_t nbytes, void *stream,
                          int32_t stream_device, DeviceMemory *mem);
  static void release_now(hurray_device device, const DeviceMemory &mem);
  static int32_t check_pointer(hurray_device device, const void *ptr);
  static int32_t copy_strided(int32_t ordinal, const DeviceCopy &c, void *stream);
  static int32_t host_wait_allowed(int32_t device_id, void *stream);
};

using Cuda = Vendor<CudaTraits>;

// The PTX of the strided-copy kernel (generated from strided_kernel.ptx).
extern const char kStridedKernelPtx[];

}  // namespace hurray::detail

#endif  // HURRAY_SRC_DEVICE_CUDA_VENDOR_H_
