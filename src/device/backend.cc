// SPDX-License-Identifier: Apache-2.0
// Which table serves which device type: the one place that knows what this
// build holds. A vendor left out of the build gets a stub table whose every
// operation fails with one message (docs/impl/gpu.md, "The backend table").
#include "device/backend.h"

#include "common/error.h"

namespace hurray::detail {

extern const DeviceBackend kCpuBackend;  // device/cpu/cpu.cc
#if defined(HURRAY_WITH_CUDA)
extern const DeviceBackend kCudaBackend;  // device/cuda/cuda.cc
#endif
#if defined(HURRAY_WITH_HIP)
extern const DeviceBackend kHipBackend;  // device/hip/hip.cc
#endif

namespace {

// What a vendor left out of the build is called, and the option that left
// it out.
struct Missing {
  const char *vendor;
  const char *types;
  const char *option;
};
constexpr Missing kNoCuda = {"CUDA", "kDLCUDA, kDLCUDAHost, kDLCUDAManaged", "HURRAY_WITH_CUDA"};
constexpr Missing kNoHip = {"HIP", "kDLROCM, kDLROCMHost", "HURRAY_WITH_HIP"};

// The stub of vendor `M`: every operation answers this one message.
template <const Missing &M>
struct Stub {
  static int32_t load() {
    return fail(HURRAY_ERR_UNSUPPORTED_DEVICE,
                "%s memory (%s) is not supported: this build of libhurray has no %s support "
                "(%s=OFF)",
                M.vendor, M.types, M.vendor, M.option);
  }
  static int32_t allocate(hurray_device, uint64_t, void *, int32_t, DeviceMemory *) {
    return load();
  }
  // Nothing was ever allocated through a stub.
  static void deallocate(hurray_device, const DeviceMemory &) {}
  static int32_t copy(int32_t, void *, const void *, uint64_t, void *) { return load(); }
  static int32_t synchronize(int32_t, void *) { return load(); }
  static int32_t stream_wait(int32_t, void *, void *) { return load(); }
  static int32_t event_record(int32_t, void *, void **, uint64_t *) { return load(); }
  static int32_t event_wait(int32_t, void *, uint64_t, void *) { return load(); }
  // Nothing was ever recorded through a stub.
  static int32_t event_destroy(int32_t, void *, uint64_t) { return HURRAY_OK; }
  static int32_t check_pointer(hurray_device, const void *) { return load(); }
  static int32_t copy_strided(int32_t, const DeviceCopy &, void *) { return load(); }
  static int32_t host_wait_allowed(int32_t, void *) { return load(); }
  static int32_t retire_deferred(int32_t, size_t *) { return load(); }
  static constexpr DeviceBackend table() {
    DeviceBackend b{};
    b.name = M.vendor;
    b.load = &load;
    b.allocate = &allocate;
    b.deallocate = &deallocate;
    b.copy = &copy;
    b.synchronize = &synchronize;
    b.stream_wait = &stream_wait;
    b.event_record = &event_record;
    b.event_wait = &event_wait;
    b.event_destroy = &event_destroy;
    b.check_pointer = &check_pointer;
    b.copy_strided = &copy_strided;
    b.host_wait_allowed = &host_wait_allowed;
    b.retire_deferred = &retire_deferred;
    return b;
  }
  static constexpr DeviceBackend kTable = table();
};

#if defined(HURRAY_WITH_CUDA)
const DeviceBackend &g_cuda = kCudaBackend;
#else
const DeviceBackend &g_cuda = Stub<kNoCuda>::kTable;
#endif
#if defined(HURRAY_WITH_HIP)
const DeviceBackend &g_hip = kHipBackend;
#else
const DeviceBackend &g_hip = Stub<kNoHip>::kTable;
#endif

}  // namespace

bool is_gpu_type(int32_t device_type) {
  switch (device_type) {
    case HURRAY_DEVICE_CUDA:
    case HURRAY_DEVICE_CUDA_HOST:
    case HURRAY_DEVICE_CUDA_MANAGED:
    case HURRAY_DEVICE_ROCM:
    case HURRAY_DEVICE_ROCM_HOST: return true;
    default: return false;
  }
}

const DeviceBackend *backend_for(int32_t device_type) {
  switch (device_type) {
    case HURRAY_DEVICE_CPU: return &kCpuBackend;
    case HURRAY_DEVICE_CUDA:
    case HURRAY_DEVICE_CUDA_HOST:
    case HURRAY_DEVICE_CUDA_MANAGED: return &g_cuda;
    case HURRAY_DEVICE_ROCM:
    case HURRAY_DEVICE_ROCM_HOST: return &g_hip;
    default:
      fail(HURRAY_ERR_UNSUPPORTED_DEVICE,
           "device type %d (%s) has no back end in libhurray (kDLCPU and the CUDA and ROCm "
           "types have)",
           device_type, device_type_name(device_type));
      return nullptr;
  }
}

const DeviceBackend *ready_backend(int32_t device_type) {
  const DeviceBackend *b = backend_for(device_type);
  if (b == nullptr || b->load() != HURRAY_OK) return nullptr;
  return b;
}

const DeviceBackend *stub_backend_for(int32_t device_type) {
  switch (device_type) {
    case HURRAY_DEVICE_CUDA:
    case HURRAY_DEVICE_CUDA_HOST:
    case HURRAY_DEVICE_CUDA_MANAGED: return &Stub<kNoCuda>::kTable;
    case HURRAY_DEVICE_ROCM:
    case HURRAY_DEVICE_ROCM_HOST: return &Stub<kNoHip>::kTable;
    default: return nullptr;
  }
}

int32_t check_device_pointer(hurray_device device, const void *data) {
  if (!is_gpu_type(device.device_type)) return HURRAY_OK;
  return backend_for(device.device_type)->check_pointer(device, data);
}

}  // namespace hurray::detail
