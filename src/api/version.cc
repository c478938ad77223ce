// SPDX-License-Identifier: Apache-2.0
// Runtime version query and header/library compatibility check (c-ffi §1).
#include <cinttypes>

#include "common/error.h"
#include "hurray/hurray.h"

extern "C" {

HURRAY_API uint32_t hurray_version(void) { return HURRAY_VERSION; }

HURRAY_API int32_t hurray_check_version(uint32_t header_version) {
  const uint32_t lib = HURRAY_VERSION;
  // Same major, and a library at least as new. While the major is 0 every
  // minor release may change the ABI, so the minor must match as well.
  const bool same_major = (header_version >> 16) == (lib >> 16);
  const bool same_minor = ((header_version >> 8) & 0xFFu) == ((lib >> 8) & 0xFFu);
  if (same_major && (header_version & 0xFFFFu) <= (lib & 0xFFFFu) &&
      ((lib >> 16) != 0 || same_minor)) {
    return HURRAY_OK;
  }
  return hurray::detail::fail(
      HURRAY_ERR_UNSUPPORTED_VERSION,
      "caller was built against libhurray %" PRIu32 ".%" PRIu32 ".%" PRIu32
      " but the loaded library is %" PRIu32 ".%" PRIu32 ".%" PRIu32
      " (needs the same major and a minor.patch at least as new; while the major "
      "is 0, the same minor too)",
      header_version >> 16, (header_version >> 8) & 0xFFu, header_version & 0xFFu, lib >> 16,
      (lib >> 8) & 0xFFu, lib & 0xFFu);
}

}  // extern "C"
