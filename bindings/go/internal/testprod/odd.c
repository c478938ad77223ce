// SPDX-License-Identifier: Apache-2.0
/* odd.c - see odd.h. */
#include "odd.h"

#include <stdatomic.h>

static atomic_llong g_releases;
static atomic_llong g_bad_user_data;

typedef struct tpg_odd {
  int64_t shape[2];
  int64_t strides[2];
  float data[4];
} tpg_odd;

/* The release cannot find a block from user_data (0x40), so blocks come
 * from a static pool and are never freed: TPG_ODD_MAX per process. */
#define TPG_ODD_MAX 4096
static tpg_odd g_pool[TPG_ODD_MAX];
static atomic_int g_used;

static void tpg_odd_release(void *user_data) {
  if ((uintptr_t)user_data != TPG_ODD_USER_DATA) atomic_fetch_add(&g_bad_user_data, 1);
  atomic_fetch_add(&g_releases, 1);
}

DLManagedTensorVersioned *tpg_make_odd(int32_t kind) {
  if (kind < 0 || kind > 4) return NULL;
  int k = atomic_fetch_add(&g_used, 1);
  if (k >= TPG_ODD_MAX) return NULL;
  tpg_odd *o = &g_pool[k];
  hurray_buffer h = {0};
  h.version = HURRAY_BUFFER_VERSION;
  h.release_fn = tpg_odd_release;
  h.user_data = (void *)TPG_ODD_USER_DATA;
  h.device.device_type = HURRAY_DEVICE_CPU;
  h.dtype.code = 2; /* kDLFloat */
  h.dtype.bits = 32;
  h.dtype.lanes = 1;
  switch (kind) {
    case 0:
      o->shape[0] = 0, o->shape[1] = 3, o->strides[0] = 3, o->strides[1] = 1;
      h.data = (void *)(uintptr_t)0x40;
      h.ndim = 2;
      h.shape = o->shape;
      h.strides = o->strides;
      break;
    case 1:
      for (int i = 0; i < 4; ++i) o->data[i] = (float)i;
      o->shape[0] = 4, o->strides[0] = 1;
      h.data = o->data;
      h.ndim = 1;
      h.shape = o->shape;
      h.strides = o->strides;
      break;
    case 2:
      o->data[0] = 7.0f;
      h.data = o->data;
      h.ndim = 0;
      h.shape = (const int64_t *)(uintptr_t)0x8;
      h.strides = (const int64_t *)(uintptr_t)0x10;
      break;
    case 3:
      o->shape[0] = 4, o->strides[0] = 1;
      h.device.device_type = HURRAY_DEVICE_CUDA;
      h.data = o->data; /* never read: device memory to the consumer */
      h.ndim = 1;
      h.shape = o->shape;
      h.strides = o->strides;
      break;
    case 4:
      o->shape[0] = 2, o->strides[0] = 1;
      h.data = (char *)o->data + 1; /* 8 bytes inside data[], not 4-aligned */
      h.ndim = 1;
      h.shape = o->shape;
      h.strides = o->strides;
      break;
    default: return NULL;
  }
  DLManagedTensorVersioned *t = NULL;
  if (hurray_to_dlpack_versioned(&h, &t) != HURRAY_OK) return NULL;
  return t;
}

int64_t tpg_odd_releases(void) { return atomic_load(&g_releases); }
int64_t tpg_odd_bad_user_data(void) { return atomic_load(&g_bad_user_data); }
void tpg_odd_reset(void) {
  atomic_store(&g_releases, 0);
  atomic_store(&g_bad_user_data, 0);
}

uintptr_t tpg_data(const DLManagedTensorVersioned *t) { return (uintptr_t)t->dl_tensor.data; }

uintptr_t tpg_first_byte(const DLManagedTensorVersioned *t) {
  return (uintptr_t)t->dl_tensor.data + (uintptr_t)t->dl_tensor.byte_offset;
}
