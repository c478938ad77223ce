// SPDX-License-Identifier: Apache-2.0
/* Run with HURRAY_CHECK=stderr by tests/checking/env_report.cmake: the mode is on from
 * the environment alone. Makes the two mistakes the checking mode exists for
 * (a copy released after the original, a handle never released) and prints
 * how often the producer's release ran. */
#include <stdio.h>
#include <string.h>

#include <hurray/hurray.h>

static int g_releases = 0;
static void count_release(void *user_data) {
  (void)user_data;
  ++g_releases;
}

static int64_t g_shape[1] = {8};
static int64_t g_strides[1] = {1};
static float g_data[8];

/* Exported (ENABLE_EXPORTS) so its name shows in the leak report. */
int32_t check_env_probe_make(hurray_buffer *out) {
  hurray_buffer h;
  memset(&h, 0, sizeof h);
  h.version = HURRAY_BUFFER_VERSION;
  h.release_fn = count_release;
  h.data = g_data;
  h.device.device_type = HURRAY_DEVICE_CPU;
  h.dtype.code = kDLFloat;
  h.dtype.bits = 32;
  h.dtype.lanes = 1;
  h.ndim = 1;
  h.shape = g_shape;
  h.strides = g_strides;
  /* Sharing to one consumer makes a handle libhurray produced. */
  int32_t st = hurray_share(&h, 1, out);
  __asm__ volatile("" ::: "memory");
  return st;
}

int main(void) {
  hurray_check_state s;
  memset(&s, 0, sizeof s);
  s.struct_size = sizeof s;
  if (hurray_check_get_state(&s) != HURRAY_OK ||
      s.options != (HURRAY_CHECK_TRACK | HURRAY_CHECK_STDERR)) {
    printf("options %u: HURRAY_CHECK=stderr was not read\n", s.options);
    return 1;
  }
  hurray_buffer a, leaked;
  if (check_env_probe_make(&a) != HURRAY_OK || check_env_probe_make(&leaked) != HURRAY_OK) {
    printf("share failed: %s\n", hurray_last_error());
    return 1;
  }
  hurray_buffer copy = a;
  hurray_buffer_release(&a);
  hurray_buffer_release(&copy);
  printf("producer releases: %d\n", g_releases);
  /* Turning tracking off does not silence the at-exit report. */
  if (hurray_check_enable(0) != HURRAY_OK) return 1;
  return 0;
}
