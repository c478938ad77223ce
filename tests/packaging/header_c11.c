// SPDX-License-Identifier: Apache-2.0
/* Compiled as strict C11 with -Wall -Wextra -Wpedantic -Werror: hurray.h
 * must be self-contained (no dlpack.h needed) and warning-free in C. */
#include <hurray/hurray.h>

#include <stdio.h>

_Static_assert(sizeof(hurray_buffer) == 80, "hurray_buffer is 80 bytes");
_Static_assert(sizeof(hurray_device) == 8, "hurray_device is 8 bytes");
_Static_assert(sizeof(hurray_dtype) == 4, "hurray_dtype is 4 bytes");
_Static_assert(HURRAY_FLAG_READ_ONLY == 1u, "flag bit 0");

int main(void) {
  /* Without dlpack.h the DLPack structs are incomplete, but pointers to them
   * still pass through the API. */
  struct DLManagedTensorVersioned *none = NULL;
  if (hurray_dlpack_versioned_delete(none) != HURRAY_OK) return 1;

  if (hurray_check_version(HURRAY_VERSION) != HURRAY_OK) {
    fprintf(stderr, "version check failed: %s\n", hurray_last_error());
    return 1;
  }
  if (hurray_version() >> 16 != HURRAY_VERSION_MAJOR) return 1;
  printf("header_c11: %s\n", hurray_status_name(HURRAY_OK));
  return 0;
}
