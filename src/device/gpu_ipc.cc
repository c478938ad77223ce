// SPDX-License-Identifier: Apache-2.0
// Which vendor serves device memory across processes (device/gpu_ipc.h).
#include "device/gpu_ipc.h"

#include "common/error.h"

namespace hurray::detail {

#if defined(HURRAY_WITH_CUDA)
extern const GpuIpc kCudaIpc;  // device/cuda/ipc.cc
#endif
#if defined(HURRAY_WITH_HIP)
extern const GpuIpc kHipIpc;  // device/hip/ipc.cc
#endif

const GpuIpc *gpu_ipc_for(int32_t device_type) {
  if (device_type == HURRAY_DEVICE_CUDA) {
#if defined(HURRAY_WITH_CUDA)
    return &kCudaIpc;
#else
    fail(HURRAY_ERR_UNSUPPORTED_DEVICE,
         "kDLCUDA memory cannot cross processes: this libhurray was built without CUDA "
         "support (HURRAY_WITH_CUDA)");
    return nullptr;
#endif
  }
  if (device_type == HURRAY_DEVICE_ROCM) {
#if defined(HURRAY_WITH_HIP)
    return &kHipIpc;
#else
    fail(HURRAY_ERR_UNSUPPORTED_DEVICE,
         "kDLROCM memory cannot cross processes: this libhurray was built without HIP "
         "support (HURRAY_WITH_HIP)");
    return nullptr;
#endif
  }
  fail(HURRAY_ERR_UNSUPPORTED_DEVICE,
       "sending %s memory to another process is not supported: only kDLCPU, kDLCUDA and "
       "kDLROCM device memory can be sent (copy pinned or managed memory to one of those first)",
       device_type_name(device_type));
  return nullptr;
}

}  // namespace hurray::detail
