// HIP memory: device (kDLROCM) and pinned host (kDLROCMHost) allocators,
// stream-ordered allocation, and the copy, stream and pointer operations of
// the HIP vendor (docs/impl/gpu.md).
//
// Device work runs with the owning device current: hipSetDevice when the
// calling thread has another current device, and the thread's own device
// set back afterwards.
#if defined(HURRAY_WITH_HIP)

#include <atomic>
#include <cinttypes>

#include "../error.h"
#include "allocator.h"
#include "gpu.h"
#include "hip_runtime.h"

namespace hurray {
namespace {

// Set once a call reports that the runtime is gone (process exit): later
// releases leak without calling into it at all.
std::atomic<bool> g_torn_down{false};

bool is_teardown(hipError_t e) {
  return e == hipErrorDeinitialized || e == hipErrorContextIsDestroyed;
}

// Makes a device current for the scope's lifetime unless it already is;
// the destructor sets the thread's previous device back.
class DeviceScope {
 public:
  explicit DeviceScope(const HipRuntime &r) : r_(r) {}
  DeviceScope(const DeviceScope &) = delete;
  DeviceScope &operator=(const DeviceScope &) = delete;
  ~DeviceScope() {
    if (switched_) (void)r_.set_device(saved_);
  }
  hipError_t enter(int device) {
    hipError_t e = r_.get_device(&saved_);
    if (e != hipSuccess || saved_ == device) return e;
    e = r_.set_device(device);
    switched_ = e == hipSuccess;
    return e;
  }

 private:
  const HipRuntime &r_;
  int saved_ = 0;
  bool switched_ = false;
};

int32_t check_ordinal(const HipRuntime &r, int32_t device_type, int32_t device_id) {
  if (device_type == HURRAY_DEVICE_ROCM) {
    if (device_id < 0 || device_id >= r.device_count) {
      return fail(HURRAY_ERR_UNSUPPORTED_DEVICE,
                  "HIP device %" PRId32 " does not exist (the runtime sees %d device%s)",
                  device_id, r.device_count, r.device_count == 1 ? "" : "s");
    }
  } else if (device_id != 0) {
    return fail(HURRAY_ERR_UNSUPPORTED_DEVICE, "%s memory has device_id 0, not %" PRId32,
                device_type_name(device_type), device_id);
  }
  return HURRAY_OK;
}

int32_t runtime_failure(hipError_t e, const char *call, int32_t device_id) {
  return fail(e == hipErrorOutOfMemory ? HURRAY_ERR_OUT_OF_MEMORY : HURRAY_ERR_DEVICE,
              "%s failed with %s (%d) on HIP device %" PRId32, call, hip_error_name(e),
              static_cast<int>(e), device_id);
}

// Runs `op(runtime)` with device `device_id` current, after loading the
// runtime and checking the ordinal. *call names the operation for messages;
// `op` may update it as it goes.
template <typename Op>
int32_t with_device(int32_t device_type, int32_t device_id, const char **call, Op op) {
  const HipRuntime *r = hip_runtime();
  if (r == nullptr) return HURRAY_ERR_UNSUPPORTED_DEVICE;
  int32_t st = check_ordinal(*r, device_type, device_id);
  if (st != HURRAY_OK) return st;
  DeviceScope scope(*r);
  hipError_t e = scope.enter(device_id);
  if (e != hipSuccess) return runtime_failure(e, "hipSetDevice", device_id);
  e = op(*r);
  if (e != hipSuccess) return runtime_failure(e, *call, device_id);
  return HURRAY_OK;
}

int32_t hip_allocate(hurray_device device, uint64_t nbytes, void *stream, void **ptr) {
  const int32_t type = device.device_type;
  const size_t n = static_cast<size_t>(nbytes);
  const char *call = type == HURRAY_DEVICE_ROCM_HOST ? "hipHostMalloc"
                     : stream != nullptr             ? "hipMallocAsync"
                                                     : "hipMalloc";
  if (stream != nullptr) {
    const HipRuntime *r = hip_runtime();
    if (r == nullptr) return HURRAY_ERR_UNSUPPORTED_DEVICE;
    if (r->malloc_async == nullptr || r->free_async == nullptr) {
      return fail(HURRAY_ERR_UNSUPPORTED_DEVICE,
                  "%s has no hipMallocAsync/hipFreeAsync (ROCm 5.2 or newer is needed for "
                  "stream-ordered allocation)",
                  r->path);
    }
  }
  void *p = nullptr;
  int32_t st = with_device(type, device.device_id, &call, [&](const HipRuntime &r) {
    if (type == HURRAY_DEVICE_ROCM_HOST) return r.host_malloc(&p, n, hipHostMallocPortable);
    if (stream != nullptr) return r.malloc_async(&p, n, static_cast<hipStream_t>(stream));
    return r.device_malloc(&p, n);
  });
  if (st != HURRAY_OK) return st;
  *ptr = p;
  return HURRAY_OK;
}

// Release path: never sets the thread's message, never prints.
void hip_deallocate(hurray_device device, void *ptr, void *stream) {
  if (hip_forked_child()) return count_fork_skip();
  if (g_torn_down.load(std::memory_order_relaxed)) return count_teardown_leak();
  const HipRuntime *r = loaded_hip_runtime();  // loaded: it allocated ptr
  const char *call;
  hipError_t e;
  if (device.device_type == HURRAY_DEVICE_ROCM_HOST) {
    call = "hipHostFree";  // pinned host memory belongs to no device
    e = r->host_free(ptr);
  } else {
    DeviceScope scope(*r);
    call = "hipSetDevice";
    e = scope.enter(device.device_id);
    if (e == hipSuccess && stream != nullptr) {
      call = "hipFreeAsync";
      e = r->free_async(ptr, static_cast<hipStream_t>(stream));
    } else if (e == hipSuccess) {
      call = "hipFree";
      e = r->device_free(ptr);
    }
  }
  if (e == hipSuccess) return;
  if (is_teardown(e)) {
    g_torn_down.store(true, std::memory_order_relaxed);
    return count_teardown_leak();
  }
  report_failed_release(HURRAY_ERR_DEVICE, "%s failed with %s (%d) on %p of %s %" PRId32, call,
                        hip_error_name(e), static_cast<int>(e), ptr,
                        device_type_name(device.device_type), device.device_id);
}

// --- vendor operations -----------------------------------------------------

int32_t hip_copy(int32_t device_id, void *dst, const void *src, uint64_t nbytes, void *stream) {
  const char *call = "hipMemcpyAsync";
  return with_device(HURRAY_DEVICE_ROCM, device_id, &call, [&](const HipRuntime &r) {
    return r.memcpy_async(dst, src, static_cast<size_t>(nbytes), hipMemcpyDefault,
                          static_cast<hipStream_t>(stream));
  });
}

int32_t hip_synchronize(int32_t device_id, void *stream) {
  const char *call = "hipStreamSynchronize";
  return with_device(HURRAY_DEVICE_ROCM, device_id, &call, [&](const HipRuntime &r) {
    return r.stream_synchronize(static_cast<hipStream_t>(stream));
  });
}

int32_t hip_stream_wait(int32_t device_id, void *producer, void *consumer) {
  const char *call = "hipEventCreateWithFlags";
  return with_device(HURRAY_DEVICE_ROCM, device_id, &call, [&](const HipRuntime &r) {
    hipEvent_t ev;
    hipError_t e = r.event_create_with_flags(&ev, hipEventDisableTiming);
    if (e != hipSuccess) return e;
    call = "hipEventRecord";
    e = r.event_record(ev, static_cast<hipStream_t>(producer));
    if (e == hipSuccess) {
      call = "hipStreamWaitEvent";
      e = r.stream_wait_event(static_cast<hipStream_t>(consumer), ev, 0);
    }
    (void)r.event_destroy(ev);
    return e;
  });
}

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

int32_t hip_check_pointer(hurray_device device, const void *ptr) {
  const HipRuntime *r = hip_runtime();
  if (r == nullptr) return HURRAY_ERR_UNSUPPORTED_DEVICE;
  int32_t st = check_ordinal(*r, device.device_type, device.device_id);
  if (st != HURRAY_OK) return st;
  HipPointerAttributes a{};
  a.device = -1;
  hipError_t e =
      r->pointer_get_attributes(reinterpret_cast<hipPointerAttribute_t *>(&a), ptr);
  Where where;
  if (e == hipSuccess) {
    where = decode(*r, a);
  } else if (e == hipErrorInvalidValue) {
    // ROCm 5 answers this for memory it does not know.
    where = Where::kUnregistered;
    a.device = -1;
  } else {
    return runtime_failure(e, "hipPointerGetAttributes", device.device_id);
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

const GpuVendor kHipVendor = {"HIP", &hip_copy, &hip_synchronize, &hip_stream_wait,
                              &hip_check_pointer};

}  // namespace

const DeviceAllocator kHipDeviceAllocator = {"HIP device memory", &hip_allocate,
                                             &hip_deallocate};
const DeviceAllocator kHipHostAllocator = {"HIP pinned host memory", &hip_allocate,
                                           &hip_deallocate};

const GpuVendor *hip_vendor() { return hip_runtime() != nullptr ? &kHipVendor : nullptr; }

}  // namespace hurray

#endif  // HURRAY_WITH_HIP
