// SPDX-License-Identifier: Apache-2.0
/* dlpack_producer.c - see dlpack_producer.h. */
#include "dlpack_producer.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#define TP_MAX_NDIM 8

static atomic_llong g_deleter_calls;
static atomic_llong g_notes;
static atomic_llong g_notes_at_delete = -1;

/* One allocation per tensor: the DLPack struct, its shape and the data. */
typedef struct tp_block {
  union {
    DLManagedTensorVersioned v;
    DLManagedTensor legacy;
  } t;
  int64_t shape[TP_MAX_NDIM];
  int64_t strides[TP_MAX_NDIM];
  float data[];
} tp_block;

void tp_reset(void) {
  atomic_store(&g_deleter_calls, 0);
  atomic_store(&g_notes, 0);
  atomic_store(&g_notes_at_delete, -1);
}

static void tp_count_delete(void) {
  atomic_store(&g_notes_at_delete, atomic_load(&g_notes));
  atomic_fetch_add(&g_deleter_calls, 1);
}

static void tp_delete_versioned(DLManagedTensorVersioned *t) {
  tp_count_delete();
  free(t); /* t is the first member of its tp_block */
}

static void tp_delete_legacy(DLManagedTensor *t) {
  tp_count_delete();
  free(t);
}

/* Allocates a block and fills shape, strides and data; NULL on failure. */
static tp_block *tp_block_new(int32_t ndim, const int64_t *shape, float start) {
  if (ndim < 0 || ndim > TP_MAX_NDIM || (ndim > 0 && shape == NULL)) return NULL;
  int64_t numel = 1;
  for (int32_t i = 0; i < ndim; ++i) {
    if (shape[i] < 0 || (shape[i] > 0 && numel > (INT64_C(1) << 40) / shape[i])) return NULL;
    numel *= shape[i];
  }
  tp_block *b = calloc(1, sizeof(tp_block) + (size_t)numel * sizeof(float));
  if (b == NULL) return NULL;
  int64_t stride = 1;
  for (int32_t i = ndim - 1; i >= 0; --i) {
    b->shape[i] = shape[i];
    b->strides[i] = stride;
    stride *= shape[i];
  }
  for (int64_t i = 0; i < numel; ++i) b->data[i] = start + (float)i;
  return b;
}

static void tp_fill_tensor(DLTensor *dl, tp_block *b, int32_t ndim) {
  dl->data = b->data;
  dl->device.device_type = kDLCPU;
  dl->device.device_id = 0;
  dl->ndim = ndim;
  dl->dtype.code = kDLFloat;
  dl->dtype.bits = 32;
  dl->dtype.lanes = 1;
  dl->shape = b->shape;
  dl->byte_offset = 0;
}

DLManagedTensorVersioned *tp_make_versioned(int32_t ndim, const int64_t *shape, float start,
                                            uint64_t flags) {
  tp_block *b = tp_block_new(ndim, shape, start);
  if (b == NULL) return NULL;
  DLManagedTensorVersioned *t = &b->t.v;
  t->version.major = 1;
  t->version.minor = 3;
  t->manager_ctx = NULL;
  t->deleter = tp_delete_versioned;
  t->flags = flags;
  tp_fill_tensor(&t->dl_tensor, b, ndim);
  t->dl_tensor.strides = b->strides;
  return t;
}

DLManagedTensor *tp_make_legacy(int32_t ndim, const int64_t *shape, float start) {
  tp_block *b = tp_block_new(ndim, shape, start);
  if (b == NULL) return NULL;
  DLManagedTensor *t = &b->t.legacy;
  t->manager_ctx = NULL;
  t->deleter = tp_delete_legacy;
  tp_fill_tensor(&t->dl_tensor, b, ndim);
  t->dl_tensor.strides = NULL;
  return t;
}

DLManagedTensorVersioned *tp_make_versioned_major(uint32_t major) {
  const int64_t shape[1] = {4};
  DLManagedTensorVersioned *t = tp_make_versioned(1, shape, 0.0f, 0);
  if (t != NULL) t->version.major = major;
  return t;
}

int64_t tp_deleter_calls(void) { return atomic_load(&g_deleter_calls); }
void tp_note_release(void) { atomic_fetch_add(&g_notes, 1); }
int64_t tp_notes(void) { return atomic_load(&g_notes); }
int64_t tp_notes_at_delete(void) { return atomic_load(&g_notes_at_delete); }

/* Sums a compact float32 CPU tensor; -1 if it is not one. */
static int32_t tp_sum(const DLTensor *dl, double *sum) {
  if (dl->device.device_type != kDLCPU || dl->dtype.code != kDLFloat || dl->dtype.bits != 32 ||
      dl->dtype.lanes != 1 || dl->ndim < 0 || (dl->ndim > 0 && dl->shape == NULL)) {
    return -1;
  }
  int64_t numel = 1, expect = 1;
  for (int32_t i = dl->ndim - 1; i >= 0; --i) {
    if (dl->strides != NULL && dl->shape[i] > 1 && dl->strides[i] != expect) return -1;
    expect *= dl->shape[i];
    numel *= dl->shape[i];
  }
  const float *p = (const float *)((const char *)dl->data + dl->byte_offset);
  double s = 0.0;
  for (int64_t i = 0; i < numel; ++i) s += p[i];
  *sum = s;
  return 0;
}

int32_t tp_consume_versioned(DLManagedTensorVersioned *t, double *sum) {
  if (t == NULL || sum == NULL || t->version.major != 1 || tp_sum(&t->dl_tensor, sum) != 0) {
    return -1;
  }
  if (t->deleter != NULL) t->deleter(t);
  return 0;
}

int32_t tp_consume_legacy(DLManagedTensor *t, double *sum) {
  if (t == NULL || sum == NULL || tp_sum(&t->dl_tensor, sum) != 0) return -1;
  if (t->deleter != NULL) t->deleter(t);
  return 0;
}
