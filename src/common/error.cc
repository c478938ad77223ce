// SPDX-License-Identifier: Apache-2.0
// Status names and the thread-local message behind hurray_last_error().
#include "common/error.h"

#include <cstdarg>
#include <cstdio>

namespace hurray::detail {
namespace {
thread_local char t_message[512];
}  // namespace

int32_t fail(int32_t status, const char *fmt, ...) {
  va_list args;
  va_start(args, fmt);
  std::vsnprintf(t_message, sizeof t_message, fmt, args);
  va_end(args);
  return status;
}

const char *device_type_name(int32_t device_type) {
  switch (device_type) {
    case 1: return "kDLCPU";
    case 2: return "kDLCUDA";
    case 3: return "kDLCUDAHost";
    case 4: return "kDLOpenCL";
    case 7: return "kDLVulkan";
    case 8: return "kDLMetal";
    case 9: return "kDLVPI";
    case 10: return "kDLROCM";
    case 11: return "kDLROCMHost";
    case 12: return "kDLExtDev";
    case 13: return "kDLCUDAManaged";
    case 14: return "kDLOneAPI";
    case 15: return "kDLWebGPU";
    case 16: return "kDLHexagon";
    case 17: return "kDLMAIA";
    case 18: return "kDLTrn";
    default: return "unknown";
  }
}

}  // namespace hurray::detail

extern "C" {

HURRAY_API const char *hurray_last_error(void) { return hurray::detail::t_message; }

HURRAY_API const char *hurray_status_name(int32_t status) {
  switch (status) {
    case HURRAY_OK: return "HURRAY_OK";
    case HURRAY_ERR_INVALID_ARGUMENT: return "HURRAY_ERR_INVALID_ARGUMENT";
    case HURRAY_ERR_UNSUPPORTED_VERSION: return "HURRAY_ERR_UNSUPPORTED_VERSION";
    case HURRAY_ERR_UNSUPPORTED_DTYPE: return "HURRAY_ERR_UNSUPPORTED_DTYPE";
    case HURRAY_ERR_UNSUPPORTED_DEVICE: return "HURRAY_ERR_UNSUPPORTED_DEVICE";
    case HURRAY_ERR_OUT_OF_MEMORY: return "HURRAY_ERR_OUT_OF_MEMORY";
    case HURRAY_ERR_OVERFLOW: return "HURRAY_ERR_OVERFLOW";
    case HURRAY_ERR_DEVICE: return "HURRAY_ERR_DEVICE";
    case HURRAY_ERR_INTERNAL: return "HURRAY_ERR_INTERNAL";
    case HURRAY_ERR_RELEASED: return "HURRAY_ERR_RELEASED";
    case HURRAY_ERR_LEAKED: return "HURRAY_ERR_LEAKED";
    case HURRAY_ERR_IPC: return "HURRAY_ERR_IPC";
    case HURRAY_ERR_IPC_CLOSED: return "HURRAY_ERR_IPC_CLOSED";
    case HURRAY_ERR_IPC_TIMEOUT: return "HURRAY_ERR_IPC_TIMEOUT";
    default: return "HURRAY_UNKNOWN_STATUS";
  }
}

}  // extern "C"
