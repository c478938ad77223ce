// SPDX-License-Identifier: Apache-2.0
// Which vendor serves device memory across processes (device/gpu_ipc.h).
#include "device/gpu_ipc.h"

#include <cinttypes>
#include <cstdio>
#include <cstring>

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

void format_gpu_uuid(const uint8_t *uuid, char *out) {
  char *o = out + std::snprintf(out, 5, "GPU-");
  for (uint32_t i = 0; i < kGpuUuidBytes; ++i) {
    if (i == 4 || i == 6 || i == 8 || i == 10) *o++ = '-';
    o += std::snprintf(o, 3, "%02x", uuid[i]);
  }
  *o = '\0';
}

int32_t gpu_ordinal_of(const GpuIpc &ipc, int32_t device_type, const uint8_t *uuid,
                       int32_t *ordinal) {
  int32_t count = 0;
  int32_t st = ipc.device_count(&count);
  for (int32_t i = 0; st == HURRAY_OK && i < count; ++i) {
    uint8_t u[kGpuUuidBytes];
    st = ipc.device_uuid(i, u);
    if (st == HURRAY_OK && std::memcmp(u, uuid, kGpuUuidBytes) == 0) {
      *ordinal = i;
      return HURRAY_OK;
    }
  }
  if (st != HURRAY_OK) return st;
  char name[48];
  format_gpu_uuid(uuid, name);
  return fail(HURRAY_ERR_UNSUPPORTED_DEVICE,
              "the %s memory is on GPU %s, which this process cannot see (none of its %" PRId32
              " devices has that UUID: CUDA_VISIBLE_DEVICES / HIP_VISIBLE_DEVICES leave it out, "
              "or it is another machine's)",
              device_type_name(device_type), name, count);
}

}  // namespace hurray::detail
