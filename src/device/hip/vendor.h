// SPDX-License-Identifier: Apache-2.0
// HIP's traits for the vendor plumbing of device/vendor.h, and the device
// switching every HIP operation shares (device/hip/hip.cc,
// device/hip/strided_copy.cc): device work runs with the owning device
// current, hipSetDevice when the calling thread has another current device,
// and the thread's own device set back afterwards.
#ifndef HURRAY_SRC_DEVICE_HIP_VENDOR_H_
#define HURRAY_SRC_DEVICE_HIP_VENDOR_H_

#include <cinttypes>
#include <cstddef>
#include <cstdint>

#include "common/diagnostics.h"
#include "device/backend.h"
#include "device/hip/runtime.h"
#include "device/strided_copy.h"
#include "device/vendor.h"

namespace hurray::detail {

// Makes a device current unless it already is, and sets the thread's
// previous device back in leave(). Every path calls leave() and looks at its
// result; the destructor only catches a path that forgot.
class DeviceScope {
 public:
  explicit DeviceScope(const HipRuntime &r) : r_(r) {}
  DeviceScope(const DeviceScope &) = delete;
  DeviceScope &operator=(const DeviceScope &) = delete;
  ~DeviceScope() { (void)leave(); }
  // On failure *failed names the runtime call that failed. A device has no
  // incarnations to tell apart: `ctx_id` is left as it is.
  hipError_t enter(int device, const char **failed, uint64_t *ctx_id = nullptr) {
    (void)ctx_id;
    hipError_t e = r_.get_device(&saved_);
    if (e != hipSuccess) {
      *failed = "hipGetDevice";
      return e;
    }
    if (saved_ == device) return hipSuccess;
    e = r_.set_device(device);
    if (e != hipSuccess) {
      *failed = "hipSetDevice";
      return e;
    }
    switched_ = true;
    return hipSuccess;
  }
  // Sets the saved device back; hipSuccess when nothing was switched. A
  // failure leaves the owner's device current on this thread.
  hipError_t leave() {
    if (!switched_) return hipSuccess;
    switched_ = false;
    return r_.set_device(saved_);
  }
  int saved() const { return saved_; }

 private:
  const HipRuntime &r_;
  int saved_ = 0;
  bool switched_ = false;
};

// Sets this thread's stream-capture mode to hipStreamCaptureModeRelaxed for
// libhurray's own runtime calls and gives the thread its mode back
// afterwards (HIP API reference: hipStreamBeginCapture,
// hipThreadExchangeStreamCaptureMode): in the default global mode an
// allocation, free or synchronous wait made while *another* thread captures
// in global mode would invalidate that capture. Best effort, as for CUDA
// (device/cuda/vendor.h): without the entry point, or should the exchange
// fail, the calls run in the thread's own mode.
class HipRelaxedCaptureMode {
 public:
  explicit HipRelaxedCaptureMode(const HipRuntime &r) : r_(r) {
    if (r_.exchange_capture_mode == nullptr) return;
    hipStreamCaptureMode mode = hipStreamCaptureModeRelaxed;
    exchanged_ = r_.exchange_capture_mode(&mode) == hipSuccess;
    saved_ = mode;
  }
  HipRelaxedCaptureMode(const HipRelaxedCaptureMode &) = delete;
  HipRelaxedCaptureMode &operator=(const HipRelaxedCaptureMode &) = delete;
  ~HipRelaxedCaptureMode() {
    if (exchanged_) (void)r_.exchange_capture_mode(&saved_);
  }

 private:
  const HipRuntime &r_;
  hipStreamCaptureMode saved_ = hipStreamCaptureModeGlobal;
  bool exchanged_ = false;
};

// The owning device current, in the relaxed capture mode, for one
// operation; the thread's own device and mode given back.
class HipScope {
 public:
  explicit HipScope(const HipRuntime &r) : relaxed_(r), device_(r) {}
  hipError_t enter(int device, const char **failed, uint64_t *ctx_id = nullptr) {
    return device_.enter(device, failed, ctx_id);
  }
  hipError_t leave() { return device_.leave(); }
  int saved() const { return device_.saved(); }

 private:
  HipRelaxedCaptureMode relaxed_;
  DeviceScope device_;
};

struct HipTraits {
  using Api = HipRuntime;
  using Result = hipError_t;
  using Event = hipEvent_t;
  static constexpr Result kSuccess = hipSuccess;
  static constexpr Result kOutOfMemory = hipErrorOutOfMemory;
  static constexpr Result kNotSupported = hipErrorNotSupported;
  static constexpr const char *kName = "HIP";
  static constexpr const char *kLibrary = "runtime";
  static constexpr const char *kAllocAsync = "hipMallocAsync";
  static constexpr const char *kMemcpyAsync = "hipMemcpyAsync";
  static constexpr const char *kStreamSynchronize = "hipStreamSynchronize";
  static constexpr const char *kEventCreate = "hipEventCreateWithFlags";
  static constexpr const char *kEventRecord = "hipEventRecord";
  static constexpr const char *kStreamWaitEvent = "hipStreamWaitEvent";

  static const Api *api() { return hip_runtime(); }
  static bool forked_child() { return hip_forked_child(); }
  static const char *error_name(Result e) { return hip_error_name(e); }

  static Result memcpy_async(const Api &r, void *dst, const void *src, size_t n, void *stream) {
    return r.memcpy_async(dst, src, n, hipMemcpyDefault, static_cast<hipStream_t>(stream));
  }
  static Result stream_synchronize(const Api &r, void *stream) {
    return r.stream_synchronize(static_cast<hipStream_t>(stream));
  }
  static Result event_create(const Api &r, Event *ev) {
    return r.event_create_with_flags(ev, hipEventDisableTiming);
  }
  static Result event_record(const Api &r, Event ev, void *stream) {
    return r.event_record(ev, static_cast<hipStream_t>(stream));
  }
  static Result stream_wait_event(const Api &r, void *stream, Event ev) {
    return r.stream_wait_event(static_cast<hipStream_t>(stream), ev, 0);
  }
  static void event_destroy(const Api &r, Event ev) { (void)r.event_destroy(ev); }
  static Result event_destroy_status(const Api &r, Event ev) { return r.event_destroy(ev); }
  static constexpr const char *kStreamIsCapturing = "hipStreamIsCapturing";
  static constexpr const char *kEventDestroy = "hipEventDestroy";
  // HIP has no flag that captures a wait on an event from outside the graph.
  static constexpr bool kWaitExternal = false;
  static bool torn_down(Result e) {
    return e == hipErrorDeinitialized || e == hipErrorContextIsDestroyed;
  }
  // No incarnations: HIP documents nothing that tells a device before and
  // after hipDeviceReset apart (docs/impl/gpu.md §4, "Events after a
  // reset"), so every event reads as alive.
  static constexpr const char *kContextState = "hipGetDevice";
  static constexpr const char *kResetCalls = "hipDeviceReset";
  static Result context_alive(const Api &, int32_t, uint64_t, bool *alive) {
    *alive = true;
    return hipSuccess;
  }
  // hipStreamIsCapturing (none when the runtime lacks it). On the null
  // stream it answers hipErrorStreamCaptureImplicit while a blocking stream
  // of the device captures (the HIP API reference lists it for
  // hipStreamIsCapturing: "a disallowed implicit dependency on a current
  // capture sequence from hipStreamLegacy"): the null stream may not be
  // used then, as CUDA's legacy stream.
  static Result stream_capture(const Api &r, void *stream, Capture *out) {
    *out = Capture::kNone;
    if (r.stream_is_capturing == nullptr) return hipSuccess;
    hipStreamCaptureStatus status = hipStreamCaptureStatusNone;
    const Result e = r.stream_is_capturing(static_cast<hipStream_t>(stream), &status);
    if (e == hipErrorStreamCaptureImplicit) {
      *out = Capture::kImplicit;
      return hipSuccess;
    }
    if (e == hipSuccess && status != hipStreamCaptureStatusNone) *out = Capture::kCapturing;
    return e;
  }
  static Result stream_wait_event_external(const Api &, void *, Event) { return hipSuccess; }

  using Scope = HipScope;
  static int32_t restore_failure(const Scope &scope, Result restore, Result e, const char *call,
                                 int32_t device_id);

  // The vendor's own operations (device/backend.h); hip.cc, and
  // copy_strided in strided_copy.cc: hipMemcpy2DAsync / hipMemcpy3DAsync,
  // possibly several of them; kStageThroughHost (nothing queued) when the
  // layout needs more than kHipMaxPieces such calls or the runtime lacks
  // them.
  static int32_t allocate(hurray_device device, uint64_t nbytes, void *stream,
                          int32_t stream_device, DeviceMemory *mem);
  static void release_now(hurray_device device, const DeviceMemory &mem);
  static int32_t check_pointer(hurray_device device, const void *ptr);
  static int32_t copy_strided(int32_t ordinal, const DeviceCopy &c, void *stream);
  static int32_t host_wait_allowed(int32_t device_id, void *stream);
};

using Hip = Vendor<HipTraits>;

// The release path of what device/hip/ipc.cc and pool_ipc.cc opened:
// `op(runtime, &call)` with `device` current, from any
// thread, never setting the message; a failure is counted. `what` names the
// object in the report.
template <typename Op>
inline void release_with_device(hurray_device device, const void *what, const char *kind, Op op) {
  if (hip_forked_child()) return count_fork_skip();
  if (hip_torn_down()) return count_teardown_leak();
  const HipRuntime *r = loaded_hip_runtime();  // loaded: it made `what`
  if (r == nullptr) return;
  const char *call = nullptr;
  hipError_t e, restore;
  {
    DeviceScope scope(*r);
    e = scope.enter(device.device_id, &call);
    if (e == hipSuccess) e = op(*r, &call);
    restore = scope.leave();
  }
  if (e == hipSuccess && restore == hipSuccess) return;
  if (e == hipErrorDeinitialized || restore == hipErrorDeinitialized) {
    mark_hip_torn_down();
    if (e != hipSuccess) count_teardown_leak();
    return;
  }
  if (e == hipSuccess) {
    call = "hipSetDevice";
    e = restore;
  }
  report_failed_release(HURRAY_ERR_DEVICE,
                        "%s failed with %s (%d) closing %p (HIP device %" PRId32 ", %s)", call,
                        hip_error_name(e), static_cast<int>(e), what, device.device_id, kind);
}

constexpr uint64_t kHipMaxPieces = 4096;

}  // namespace hurray::detail

#endif  // HURRAY_SRC_DEVICE_HIP_VENDOR_H_
