// SPDX-License-Identifier: Apache-2.0
/* Allocates a tensor, shares it with two consumers, writes through one and
 * reads through the other, releases both. Uses only the installed header. */
#include <hurray/hurray.h>

#include <stdio.h>

static int fail(const char *what) {
  fprintf(stderr, "consumer.c: %s: %s\n", what, hurray_last_error());
  return 1;
}

int main(void) {
  if (hurray_check_version(HURRAY_VERSION) != HURRAY_OK) return fail("version");

  hurray_device cpu = {HURRAY_DEVICE_CPU, 0};
  hurray_dtype f32 = {2 /* float */, 32, 1};
  int64_t shape[2] = {3, 4};
  hurray_buffer buf;
  if (hurray_alloc(cpu, f32, 2, shape, 0, &buf) != HURRAY_OK) return fail("alloc");

  hurray_extent ext;
  if (hurray_buffer_extent(&buf, &ext) != HURRAY_OK) return fail("extent");
  if (ext.numel != 12 || !ext.contiguous) return fail("extent values");

  hurray_buffer parts[2];
  if (hurray_share(&buf, 2, parts) != HURRAY_OK) return fail("share");
  if (buf.release_fn != NULL) return fail("share left the source live");

  ((float *)parts[0].data)[5] = 42.0f;
  float seen = ((const float *)parts[1].data)[5];

  hurray_buffer_release(&parts[0]);
  hurray_buffer_release(&parts[1]);
  if (seen != 42.0f) return fail("the two handles do not share memory");

  uint32_t v = hurray_version();
  printf("consumer.c: libhurray %u.%u.%u ok\n", (unsigned)(v >> 16), (unsigned)((v >> 8) & 0xff),
         (unsigned)(v & 0xff));
  return 0;
}
