// SPDX-License-Identifier: Apache-2.0
/* fanout.c - wrap memory you own in a Hurray handle, give it to three
 * consumers (one of them a DLPack consumer), and see it freed exactly once,
 * after the last consumer lets go. Build: -DHURRAY_BUILD_EXAMPLES=ON (README.md,
 * Using it from C; examples/CMakeLists.txt). */
#include <hurray/dlpack.h>
#include <hurray/hurray.h>
#include <stdio.h>
#include <stdlib.h>

static int g_frees = 0;

/* The producer's release callback: frees the memory behind the handle. */
static void free_matrix(void *user_data) {
  free(user_data);
  ++g_frees;
}

#define CHECK(call)                                                                                \
  do {                                                                                             \
    int32_t st_ = (call);                                                                          \
    if (st_ != HURRAY_OK) {                                                                        \
      fprintf(stderr, "%s failed: %s: %s\n", #call, hurray_status_name(st_), hurray_last_error()); \
      return 1;                                                                                    \
    }                                                                                              \
  } while (0)

int main(void) {
  CHECK(hurray_check_version(HURRAY_VERSION));

  /* A 2x3 float32 matrix the producer owns. */
  static const int64_t shape[2] = {2, 3};
  static const int64_t strides[2] = {3, 1}; /* in elements */
  float *m = malloc(6 * sizeof(float));
  if (m == NULL) return 1;
  for (int i = 0; i < 6; ++i) m[i] = (float)i;

  hurray_buffer h = {0};
  h.version = HURRAY_BUFFER_VERSION;
  h.release_fn = free_matrix;
  h.user_data = m;
  h.data = m;
  h.device.device_type = HURRAY_DEVICE_CPU;
  h.dtype.code = 2; /* kDLFloat */
  h.dtype.bits = 32;
  h.dtype.lanes = 1;
  h.ndim = 2;
  h.shape = shape;
  h.strides = strides;

  /* One handle per consumer; h is consumed. */
  hurray_buffer consumer[3];
  CHECK(hurray_share(&h, 3, consumer));

  /* Consumer 0 is a DLPack framework: it gets a DLManagedTensorVersioned. */
  DLManagedTensorVersioned *t = NULL;
  CHECK(hurray_to_dlpack_versioned(&consumer[0], &t));
  printf("DLPack consumer sees element [1][2] = %.1f\n",
         ((float *)t->dl_tensor.data)[1 * t->dl_tensor.strides[0] + 2 * t->dl_tensor.strides[1]]);

  t->deleter(t); /* the framework is done */
  printf("after the DLPack consumer: freed %d time(s)\n", g_frees);
  hurray_buffer_release(&consumer[1]);
  printf("after consumer 1:          freed %d time(s)\n", g_frees);
  hurray_buffer_release(&consumer[2]);
  printf("after consumer 2 (last):   freed %d time(s)\n", g_frees);
  return g_frees == 1 ? 0 : 1;
}
