// SPDX-License-Identifier: Apache-2.0
// Status codes and the thread-local error message (c-ffi §2).
#ifndef HURRAY_SRC_COMMON_ERROR_H_
#define HURRAY_SRC_COMMON_ERROR_H_

#include <cstdint>

#include "hurray/hurray.h"

namespace hurray::detail {

// Formats a message for the calling thread's hurray_last_error() and returns
// `status` unchanged, so a failure reads `return fail(CODE, "...", args)`.
// Never allocates; messages longer than the buffer are truncated.
int32_t fail(int32_t status, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

// DLPack name of a device type value ("kDLCUDA"), or "unknown".
const char *device_type_name(int32_t device_type);

}  // namespace hurray::detail

#endif  // HURRAY_SRC_COMMON_ERROR_H_
