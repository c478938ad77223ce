// SPDX-License-Identifier: Apache-2.0
/* Links the wheel's libhurray through hurray::hurray: prints the version it
 * was compiled against, the library's run-time version and the path of the
 * library that was loaded (dladdr), then allocates, shares and releases. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>

#include "hurray/hurray.h"

int main(void) {
  Dl_info info;
  if (!dladdr((void *)&hurray_version, &info)) return 2;
  int64_t shape[1] = {4};
  hurray_buffer h, pair[2];
  hurray_dtype f32 = {2, 32, 1};
  hurray_device cpu = {HURRAY_DEVICE_CPU, 0};
  if (hurray_alloc(cpu, f32, 1, shape, 0, &h) != HURRAY_OK) return 3;
  if (hurray_share(&h, 2, pair) != HURRAY_OK) return 4;
  (void)hurray_buffer_release(&pair[0]);
  (void)hurray_buffer_release(&pair[1]);
  printf("%s %u %s\n", HURRAY_VERSION_STRING, (unsigned)hurray_version(), info.dli_fname);
  return hurray_check_version(HURRAY_VERSION) == HURRAY_OK ? 0 : 5;
}
