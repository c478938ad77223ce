// Which allocator serves which device type in this build.
#include "../error.h"
#include "allocator.h"
#include "gpu.h"

namespace hurray {

const DeviceAllocator *find_device_allocator(int32_t device_type) {
  switch (device_type) {
#if defined(HURRAY_WITH_CUDA)
    case HURRAY_DEVICE_CUDA: return &kCudaDeviceAllocator;
    case HURRAY_DEVICE_CUDA_HOST: return &kCudaHostAllocator;
    case HURRAY_DEVICE_CUDA_MANAGED: return &kCudaManagedAllocator;
#endif
#if defined(HURRAY_WITH_HIP)
    case HURRAY_DEVICE_ROCM: return &kHipDeviceAllocator;
    case HURRAY_DEVICE_ROCM_HOST: return &kHipHostAllocator;
#endif
    default: break;
  }
  fail(HURRAY_ERR_UNSUPPORTED_DEVICE,
       "device type %d (%s) has no allocator in this build of libhurray", device_type,
       device_type_name(device_type));
  return nullptr;
}

}  // namespace hurray
