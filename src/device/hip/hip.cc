// SPDX-License-Identifier: Apache-2.0
// HIP memory: device (kDLROCM) and pinned host (kDLROCMHost) allocators,
// stream-ordered allocation, the release, the pointer check and the capture
// check of the HIP vendor (docs/impl/gpu.md). What it shares with CUDA
// (running a call with the owning device current, copy, synchronize, stream
// wait, the deferred frees, the table) is device/vendor.h over HipTraits
// (vendor.h).
#if defined(HURRAY_WITH_HIP)

#include <atomic>
#include <cinttypes>
#include <cstring>

#include "common/diagnostics.h"
#include "common/error.h"
#include "device/backend.h"
#include "device/hip/pool_ipc.h"
#include "device/hip/runtime.h"
#include "device/hip/vendor.h"

namespace hurray::detail {
namespace {

// DeviceMemory::order for HIP: 0 free at once (or on the stream), 1
// per-thread default stream: hipDeviceSynchronize, then hipFree; 2 a stream
// of another device: hipStreamSynchronize(stream), then hipFree; 3 the
// per-thread default stream of another device (mem.stream_device, a copy
// queued there): hipDeviceSynchronize with that device current, then
// hipFree; 4 (kHipFreeOnPoolStream, pool_ipc.h) libhurray's IPC-capable
// pool: hipFreeAsync on the stream.
constexpr uint32_t kFreeAfterDevice = 1;
constexpr uint32_t kFreeAfterStream = 2;
constexpr uint32_t kFreeAfterOtherDevice = 3;

bool is_teardown(hipError_t e) {
  return e == hipErrorDeinitialized || e == hipErrorContextIsDestroyed;
}

}  // namespace

// Setting the thread's own device back after `call` failed: the thread is
// left on `device_id`, which the caller must hear about.
int32_t HipTraits::restore_failure(const Scope &scope, hipError_t restore, hipError_t e,
                                   const char *call, int32_t device_id) {
  const int saved = scope.saved();
  if (e != hipSuccess) {
    return fail(HURRAY_ERR_DEVICE,
                "%s failed with %s (%d) on HIP device %" PRId32
                ", and hipSetDevice(%d) then failed with %s (%d): this thread may still have "
                "device %" PRId32 " current",
                call, hip_error_name(e), static_cast<int>(e), device_id, saved,
                hip_error_name(restore), static_cast<int>(restore), device_id);
  }
  return fail(HURRAY_ERR_DEVICE,
              "restoring the thread's device failed: hipSetDevice(%d) failed with %s (%d) after "
              "%s on HIP device %" PRId32 ", which may still be current on this thread",
              saved, hip_error_name(restore), static_cast<int>(restore), call, device_id);
}

int32_t HipTraits::allocate(hurray_device device, uint64_t nbytes, void *stream_in,
                            int32_t stream_device, DeviceMemory *mem) {
  const bool other_device = stream_device >= 0 && stream_device != device.device_id;
  const int32_t type = device.device_type;
  const size_t n = static_cast<size_t>(nbytes);
  // hipStreamPerThread: allocated synchronously, the release ordered after
  // the whole device (gpu §2), or after the whole other device whose
  // per-thread stream a copy into this memory was queued on. A stream the
  // caller knows to be another device's: allocated synchronously, the
  // release ordered after it.
  const bool per_thread = is_per_thread_stream(stream_in);
  const bool after_stream = other_device && stream_in != nullptr && !per_thread;
  void *const stream = per_thread || after_stream ? nullptr : stream_in;
  const char *call = type == HURRAY_DEVICE_ROCM_HOST ? "hipHostMalloc"
                     : stream != nullptr             ? "hipMallocAsync"
                                                     : "hipMalloc";
  const HipRuntime *rt = hip_runtime();
  if (rt == nullptr) return HURRAY_ERR_UNSUPPORTED_DEVICE;
  if (stream != nullptr && (rt->malloc_async == nullptr || rt->free_async == nullptr)) {
    return fail(HURRAY_ERR_UNSUPPORTED_DEVICE,
                "%s has no hipMallocAsync/hipFreeAsync (ROCm 5.2 or newer is needed for "
                "stream-ordered allocation)",
                rt->path);
  }
  if (nbytes == 0) {
    // No memory to allocate, but the same answer as a one-element request
    // for a missing runtime or device.
    return Hip::check_ordinal(*rt, device.device_id);
  }
  Hip::retry_deferred_frees();
  DeviceMemory m;
  m.stream = after_stream ? stream_in : stream;
  m.order = per_thread && other_device ? kFreeAfterOtherDevice
            : per_thread               ? kFreeAfterDevice
            : after_stream             ? kFreeAfterStream
                                       : 0;
  if (other_device) m.stream_device = stream_device;
  void *&p = m.ptr;
  int32_t st = Hip::with_device(device.device_id, &call, [&](const HipRuntime &r) {
    void *q = nullptr;
    hipError_t e;
    if (type == HURRAY_DEVICE_ROCM_HOST) {
      e = r.host_malloc(&q, n, hipHostMallocPortable);
    } else if (stream != nullptr) {
      e = r.malloc_async(&q, n, static_cast<hipStream_t>(stream));
    } else {
      e = r.device_malloc(&q, n);
    }
    if (e == hipSuccess) p = q;
    return e;
  });
  if (st != HURRAY_OK) {
    // Allocated, but the thread's device could not be set back: give the
    // memory back through the release path (which reports its own
    // failures) and keep the allocation's error.
    if (p != nullptr) Hip::deallocate(device, m);
    return st;
  }
  *mem = m;
  return HURRAY_OK;
}

namespace {

// Whether `stream` is being captured into a graph (false when the runtime
// has no hipStreamIsCapturing). Asked before a release queues a free on the
// stream or waits for it: a capturing stream takes no free of memory from
// outside its graph, and waiting for it is prohibited during the capture.
hipError_t capturing(const HipRuntime &r, hipStream_t stream, bool *out, const char **call) {
  *out = false;
  if (r.stream_is_capturing == nullptr) return hipSuccess;
  *call = "hipStreamIsCapturing";
  hipStreamCaptureStatus status = hipStreamCaptureStatusNone;
  const hipError_t e = r.stream_is_capturing(stream, &status);
  *out = e == hipSuccess && status != hipStreamCaptureStatusNone;
  return e;
}

// Waits for every stream of device `other` with it current, then makes
// `owner` current again.
hipError_t synchronize_other_device(const HipRuntime &r, int other, int owner, const char **call) {
  *call = "hipSetDevice";
  hipError_t e = r.set_device(other);
  if (e != hipSuccess) return e;
  *call = "hipDeviceSynchronize";  // every stream of that device, per-thread ones included
  e = r.device_synchronize();
  const hipError_t back = r.set_device(owner);
  if (e == hipSuccess && back != hipSuccess) {
    *call = "hipSetDevice";
    e = back;
  }
  return e;
}

// The free of device memory `mem` of `owner`, with it current; *call names
// the call that failed. Orders the free as mem.order says. The stream is the
// caller's to keep alive until the release (hurray.h): it is never asked
// whether it still exists (ROCm may crash on a destroyed handle).
// *deferred (nothing freed, hipSuccess): the stream to free on or wait for
// is being captured; the caller keeps the memory for a later attempt.
hipError_t free_on_device(const HipRuntime &r, int owner, const DeviceMemory &mem,
                          const char **call, bool *deferred) {
  *deferred = false;
  void *const ptr = mem.ptr;
  hipStream_t stream = static_cast<hipStream_t>(mem.stream);
  hipError_t e = hipSuccess;
  if (stream != nullptr) {
    e = capturing(r, stream, deferred, call);
    if (e != hipSuccess || *deferred) return e;
  }
  switch (mem.order) {
    case kFreeAfterStream:
      *call = "hipStreamSynchronize";  // the other device's stream still using the memory
      e = r.stream_synchronize(stream);
      break;
    case kFreeAfterDevice:
      *call = "hipDeviceSynchronize";  // every stream of the device, per-thread ones included
      e = r.device_synchronize();
      break;
    case kFreeAfterOtherDevice:
      e = synchronize_other_device(r, mem.stream_device, owner, call);
      break;
    case kHipFreeOnPoolStream:
      HipPools::forget(ptr);  // no longer exported as pool memory
      *call = "hipFreeAsync";
      return r.free_async(ptr, stream);
    default:
      if (stream != nullptr) {
        *call = "hipFreeAsync";
        return r.free_async(ptr, stream);
      }
      break;
  }
  if (e != hipSuccess) return e;  // not ordered: leaking beats freeing memory in use
  *call = "hipFree";
  return r.device_free(ptr);
}

}  // namespace

// Release path: never sets the thread's message, never prints.
void HipTraits::release_now(hurray_device device, const DeviceMemory &mem) {
  void *const ptr = mem.ptr;
  if (hip_forked_child()) return count_fork_skip();
  if (hip_torn_down()) return count_teardown_leak();
  const HipRuntime *r = loaded_hip_runtime();  // loaded: it allocated ptr
  const char *call = nullptr;
  hipError_t e;
  hipError_t restore = hipSuccess;
  int saved = 0;
  if (device.device_type == HURRAY_DEVICE_ROCM_HOST) {
    HipRelaxedCaptureMode relaxed(*r);
    call = "hipHostFree";  // pinned host memory belongs to no device
    e = r->host_free(ptr);
  } else {
    HipScope scope(*r);
    e = scope.enter(device.device_id, &call);
    bool deferred = false;
    if (e == hipSuccess) e = free_on_device(*r, device.device_id, mem, &call, &deferred);
    restore = scope.leave();
    saved = scope.saved();
    if (e == hipSuccess && deferred) Hip::defer(device, mem, true);
  }
  if (e == hipSuccess && restore == hipSuccess) return;
  // hipErrorContextIsDestroyed from hipStreamIsCapturing is about the stream
  // (ROCm's answer for a handle it no longer knows: the caller destroyed it
  // too early), not the runtime's end: reported, and HIP keeps working.
  const bool about_stream = call != nullptr && std::strcmp(call, "hipStreamIsCapturing") == 0;
  if ((is_teardown(e) && !about_stream) || is_teardown(restore)) {
    mark_hip_torn_down();
    if (e != hipSuccess) count_teardown_leak();  // else freed before the teardown
    return;
  }
  const char *type_name = device_type_name(device.device_type);
  if (e == hipSuccess) {
    report_failed_release(HURRAY_ERR_DEVICE,
                          "restoring the releasing thread's device failed: hipSetDevice(%d) "
                          "failed with %s (%d) after %s freed %p of %s %" PRId32,
                          saved, hip_error_name(restore), static_cast<int>(restore), call, ptr,
                          type_name, device.device_id);
    return;
  }
  if (restore != hipSuccess) {
    report_failed_release(HURRAY_ERR_DEVICE,
                          "%s failed with %s (%d) on %p of %s %" PRId32
                          ", and hipSetDevice(%d) then failed with %s (%d)",
                          call, hip_error_name(e), static_cast<int>(e), ptr, type_name,
                          device.device_id, saved, hip_error_name(restore),
                          static_cast<int>(restore));
    return;
  }
  report_failed_release(HURRAY_ERR_DEVICE, "%s failed with %s (%d) on %p of %s %" PRId32, call,
                        hip_error_name(e), static_cast<int>(e), ptr, type_name, device.device_id);
}

int32_t HipTraits::host_wait_allowed(int32_t device_id, void *stream) {
  // The default stream is not asked: what HIP answers for it while another
  // stream captures is not documented.
  if (stream == nullptr) return HURRAY_OK;
  bool captured = false;
  const char *call = "hipStreamIsCapturing";
  int32_t st = Hip::with_device(device_id, &call, [&](const HipRuntime &r) {
    return capturing(r, static_cast<hipStream_t>(stream), &captured, &call);
  });
  if (st != HURRAY_OK || !captured) return st;
  return fail(HURRAY_ERR_INVALID_ARGUMENT,
              "stream %p of HIP device %" PRId32
              " is being captured into a graph, and this copy (into kDLCPU memory) must wait "
              "for it on the host, which is prohibited during capture: "
              "copy before or after the capture",
              stream, device_id);
}

namespace {

// Where the runtime says memory is, whatever the ROCm version's encoding.
enum class Where { kUnregistered, kHost, kDevice, kManaged, kOther };

Where decode(const HipRuntime &r, const HipPointerAttributes &a) {
  if (a.is_managed != 0) return Where::kManaged;
  if (r.abi6) {
    // ROCm 6+: Unregistered 0, Host 1, Device 2, Managed 3, Array 10, Unified 11.
    switch (a.memory_type) {
      case 0: return Where::kUnregistered;
      case 1: return Where::kHost;
      case 2: return Where::kDevice;
      case 3: return Where::kManaged;
      default: return Where::kOther;
    }
  }
  // ROCm 5: Host 0, Device 1, Array 2, Unified 3 (Managed 4 in late 5.x).
  switch (a.memory_type) {
    case 0: return Where::kHost;
    case 1: return Where::kDevice;
    case 4: return Where::kManaged;
    default: return Where::kOther;
  }
}

const char *where_name(Where w) {
  switch (w) {
    case Where::kUnregistered: return "unregistered host memory";
    case Where::kHost: return "pinned host memory";
    case Where::kDevice: return "device memory";
    case Where::kManaged: return "managed memory";
    default: return "memory of another kind";
  }
}

}  // namespace

int32_t HipTraits::check_pointer(hurray_device device, const void *ptr) {
  const HipRuntime *r = hip_runtime();
  if (r == nullptr) return HURRAY_ERR_UNSUPPORTED_DEVICE;
  int32_t st = Hip::check_ordinal(*r, device.device_id);
  if (st != HURRAY_OK) return st;
  HipPointerAttributes a{};
  a.device = -1;
  hipError_t e = r->pointer_get_attributes(reinterpret_cast<hipPointerAttribute_t *>(&a), ptr);
  Where where;
  if (e == hipSuccess) {
    where = decode(*r, a);
  } else if (e == hipErrorInvalidValue) {
    // ROCm 5 answers this for memory it does not know.
    where = Where::kUnregistered;
    a.device = -1;
  } else {
    return Hip::failure(e, "hipPointerGetAttributes", device.device_id);
  }
  const bool ok = device.device_type == HURRAY_DEVICE_ROCM
                      ? where == Where::kDevice && a.device == device.device_id
                      : where == Where::kHost;
  if (ok) return HURRAY_OK;
  return fail(HURRAY_ERR_INVALID_ARGUMENT,
              "tensor.dl_tensor.data %p is not %s memory of device %" PRId32
              ": the HIP runtime reports %s (device %d)",
              ptr, device_type_name(device.device_type), device.device_id, where_name(where),
              a.device);
}

// The table for kDLROCM and kDLROCMHost (device/backend.cc). Strided layouts
// HIP's 2-D / 3-D copies cannot do are staged through the host by the caller.
extern const DeviceBackend kHipBackend;
const DeviceBackend kHipBackend = Hip::table();

}  // namespace hurray::detail

#endif  // HURRAY_WITH_HIP
