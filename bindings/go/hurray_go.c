// SPDX-License-Identifier: Apache-2.0
/* hurray_go.c - see hurray_go.h. */
#include "hurray_go.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

typedef struct hgo_block {
  atomic_size_t live; /* slots still owned by a Go Buffer */
  hurray_buffer h[];
} hgo_block;

static hgo_block *hgo_blk(hgo_ref r) { return (hgo_block *)r; }

static char *hgo_strdup(const char *s) {
  size_t n = strlen(s) + 1;
  char *p = malloc(n);
  if (p != NULL) memcpy(p, s, n);
  return p;
}

static hgo_meta hgo_meta_of(const hurray_buffer *h) {
  hgo_meta m;
  m.flags = h->flags;
  m.device_type = h->device.device_type;
  m.device_id = h->device.device_id;
  m.ndim = h->ndim;
  m.code = h->dtype.code;
  m.bits = h->dtype.bits;
  m.lanes = h->dtype.lanes;
  return m;
}

/* A successful result for block b, whose slot i describes its handles. */
static hgo_ret hgo_made(hgo_block *b, size_t i) {
  hgo_ret r = {HURRAY_OK, (hgo_ref)b, hgo_meta_of(&b->h[i]), NULL, NULL};
  return r;
}

static hgo_ret hgo_fail(int32_t status, const char *msg) {
  hgo_ret r = {status, 0, {0, 0, 0, 0, 0, 0, 0}, NULL, hgo_strdup(msg)};
  return r;
}

/* A block of n slots, live = owned; NULL when it cannot be allocated. */
static hgo_block *hgo_block_new(size_t n, size_t owned) {
  if (n > (SIZE_MAX - sizeof(hgo_block)) / sizeof(hurray_buffer)) return NULL;
  hgo_block *b = malloc(sizeof(hgo_block) + n * sizeof(hurray_buffer));
  if (b != NULL) atomic_init(&b->live, owned);
  return b;
}

hgo_ret hgo_alloc(int32_t code, int32_t bits, int32_t lanes, int32_t ndim, const int64_t *shape,
                  uint64_t flags) {
  hgo_block *b = hgo_block_new(1, 1);
  if (b == NULL) return hgo_fail(HURRAY_ERR_OUT_OF_MEMORY, "cannot allocate the handle");
  hurray_device cpu = {HURRAY_DEVICE_CPU, 0};
  hurray_dtype dt;
  dt.code = (uint8_t)code;
  dt.bits = (uint8_t)bits;
  dt.lanes = (uint16_t)lanes;
  int32_t s = hurray_alloc(cpu, dt, ndim, shape, flags, &b->h[0]);
  if (s != HURRAY_OK) {
    hgo_ret r = hgo_fail(s, hurray_last_error());
    free(b);
    return r;
  }
  return hgo_made(b, 0);
}

hgo_ret hgo_from_dlpack(void *t, int32_t versioned) {
  hgo_block *b = hgo_block_new(1, 1);
  if (b == NULL) return hgo_fail(HURRAY_ERR_OUT_OF_MEMORY, "cannot allocate the handle");
  int32_t s = versioned ? hurray_from_dlpack_versioned((DLManagedTensorVersioned *)t,
                                                       HURRAY_IMPORT_DEFAULT, &b->h[0])
                        : hurray_from_dlpack((DLManagedTensor *)t, HURRAY_IMPORT_DEFAULT, &b->h[0]);
  if (s != HURRAY_OK) {
    hgo_ret r = hgo_fail(s, hurray_last_error());
    free(b);
    return r;
  }
  return hgo_made(b, 0);
}

hgo_ret hgo_share(hgo_ref ref, size_t i, size_t n) {
  hgo_block *b = hgo_blk(ref);
  if (n == 0 || n == SIZE_MAX) return hgo_fail(HURRAY_ERR_INVALID_ARGUMENT, "n must be >= 1");
  /* Slot 0 receives the source's new handle and is then copied back. */
  hgo_block *nb = hgo_block_new(n + 1, n);
  if (nb == NULL) return hgo_fail(HURRAY_ERR_OUT_OF_MEMORY, "cannot allocate the shared handles");
  int32_t s = hurray_share(&b->h[i], n + 1, nb->h);
  if (s != HURRAY_OK) {
    hgo_ret r = hgo_fail(s, hurray_last_error());
    free(nb);
    return r;
  }
  b->h[i] = nb->h[0];
  memset(&nb->h[0], 0, sizeof(hurray_buffer));
  return hgo_made(nb, 1);
}

/* Frees b when slot i was its last owned one. */
static void hgo_unown(hgo_block *b) {
  if (atomic_fetch_sub_explicit(&b->live, 1, memory_order_acq_rel) == 1) free(b);
}

hgo_ret hgo_to_dlpack(hgo_ref ref, size_t i, int32_t versioned, int32_t keep) {
  hgo_block *b = hgo_blk(ref);
  void *t = NULL;
  int32_t s;
  if (versioned) {
    DLManagedTensorVersioned *v = NULL;
    s = hurray_to_dlpack_versioned(&b->h[i], &v);
    t = v;
  } else {
    DLManagedTensor *l = NULL;
    s = hurray_to_dlpack(&b->h[i], &l);
    t = l;
  }
  if (s != HURRAY_OK) return hgo_fail(s, hurray_last_error());
  if (!keep) hgo_unown(b); /* the handle moved into the tensor (and was zeroed) */
  hgo_ret r = {HURRAY_OK, 0, {0, 0, 0, 0, 0, 0, 0}, t, NULL};
  return r;
}

static hgo_ret hgo_fail_at(int32_t status, const char *msg, size_t *failed, size_t index) {
  *failed = index;
  return hgo_fail(status, msg);
}

hgo_ret hgo_from_dlpack_n(void *const *ts, size_t n, int32_t versioned, hgo_meta *metas,
                          size_t *failed) {
  hgo_block *b = hgo_block_new(n, n);
  if (b == NULL) {
    return hgo_fail_at(HURRAY_ERR_OUT_OF_MEMORY, "cannot allocate the handles", failed,
                       HURRAY_BATCH_NO_INDEX);
  }
  size_t at = HURRAY_BATCH_NO_INDEX;
  int32_t s = versioned ? hurray_from_dlpack_versioned_n((DLManagedTensorVersioned *const *)ts, n,
                                                         HURRAY_IMPORT_DEFAULT, b->h, &at)
                        : hurray_from_dlpack_n((DLManagedTensor *const *)ts, n,
                                               HURRAY_IMPORT_DEFAULT, b->h, &at);
  if (s != HURRAY_OK) {
    hgo_ret r = hgo_fail_at(s, hurray_last_error(), failed, at);
    free(b);
    return r;
  }
  for (size_t k = 0; k < n; k++) metas[k] = hgo_meta_of(&b->h[k]);
  return hgo_made(b, 0);
}

hgo_ret hgo_alloc_group(size_t n, const int64_t *enc, size_t enc_len, uint64_t alloc_flags,
                        hgo_meta *metas, size_t *failed) {
  hurray_tensor_desc *d = n <= SIZE_MAX / sizeof *d ? malloc(n * sizeof *d) : NULL;
  hgo_block *b = hgo_block_new(n, n);
  if (d == NULL || b == NULL) {
    free(d);
    free(b);
    return hgo_fail_at(HURRAY_ERR_OUT_OF_MEMORY, "cannot allocate the handles", failed,
                       HURRAY_BATCH_NO_INDEX);
  }
  size_t at = 0;
  for (size_t k = 0; k < n; k++) {
    if (enc_len - at < 3 || enc[at + 2] < 0 || (uint64_t)enc[at + 2] > enc_len - at - 3) {
      free(d);
      free(b);
      return hgo_fail_at(HURRAY_ERR_INTERNAL, "malformed group encoding", failed, k);
    }
    const uint64_t dt = (uint64_t)enc[at];
    d[k].dtype.code = (uint8_t)dt;
    d[k].dtype.bits = (uint8_t)(dt >> 8);
    d[k].dtype.lanes = (uint16_t)(dt >> 16);
    d[k].flags = (uint64_t)enc[at + 1];
    d[k].ndim = (int32_t)enc[at + 2];
    d[k].shape = d[k].ndim > 0 ? enc + at + 3 : NULL;
    at += 3 + (size_t)enc[at + 2];
  }
  hurray_device cpu = {HURRAY_DEVICE_CPU, 0};
  size_t bad = HURRAY_BATCH_NO_INDEX;
  int32_t s = hurray_alloc_group(cpu, n, d, alloc_flags, NULL, b->h, &bad);
  free(d);
  if (s != HURRAY_OK) {
    hgo_ret r = hgo_fail_at(s, hurray_last_error(), failed, bad);
    free(b);
    return r;
  }
  for (size_t k = 0; k < n; k++) metas[k] = hgo_meta_of(&b->h[k]);
  return hgo_made(b, 0);
}

hgo_ret hgo_to_dlpack_n(const hgo_ref *blks, const size_t *idx, const int32_t *keep, size_t n,
                        int32_t versioned, void **out, size_t *failed) {
  hurray_buffer *src = n <= SIZE_MAX / sizeof *src ? malloc(n * sizeof *src) : NULL;
  void **t = n <= SIZE_MAX / sizeof *t ? malloc(n * sizeof *t) : NULL;
  if (src == NULL || t == NULL) {
    free(src);
    free(t);
    return hgo_fail_at(HURRAY_ERR_OUT_OF_MEMORY, "cannot allocate the export arrays", failed,
                       HURRAY_BATCH_NO_INDEX);
  }
  /* The handles are values: the call runs on copies, and the slots are
   * emptied only once it has consumed them all. */
  for (size_t k = 0; k < n; k++) src[k] = hgo_blk(blks[k])->h[idx[k]];
  size_t at = HURRAY_BATCH_NO_INDEX;
  int32_t s = versioned ? hurray_to_dlpack_versioned_n(src, n, (DLManagedTensorVersioned **)t, &at)
                        : hurray_to_dlpack_n(src, n, (DLManagedTensor **)t, &at);
  free(src);
  if (s != HURRAY_OK) {
    free(t);
    return hgo_fail_at(s, hurray_last_error(), failed, at);
  }
  for (size_t k = 0; k < n; k++) {
    hgo_block *b = hgo_blk(blks[k]);
    memset(&b->h[idx[k]], 0, sizeof(hurray_buffer));
    if (!keep[k]) hgo_unown(b);
    out[k] = t[k];
  }
  free(t);
  hgo_ret r = {HURRAY_OK, 0, {0, 0, 0, 0, 0, 0, 0}, NULL, NULL};
  return r;
}

void hgo_drop(hgo_ref ref, size_t i) {
  hgo_block *b = hgo_blk(ref);
  (void)hurray_buffer_release(&b->h[i]);
  hgo_unown(b);
}

hgo_dims hgo_get_dims(hgo_ref ref, size_t i, int32_t strides) {
  const hurray_buffer *h = &hgo_blk(ref)->h[i];
  const int64_t *p = strides ? h->strides : h->shape;
  hgo_dims d;
  d.ndim = h->ndim;
  if (d.ndim < 0 || d.ndim > HURRAY_MAX_NDIM || (d.ndim > 0 && p == NULL)) {
    d.ndim = -1;
    return d;
  }
  if (d.ndim > 0) memcpy(d.v, p, (size_t)d.ndim * sizeof(int64_t));
  return d;
}

hgo_bytes_ret hgo_bytes(hgo_ref ref, size_t i) {
  const hurray_buffer *h = &hgo_blk(ref)->h[i];
  hgo_bytes_ret r = {HURRAY_OK, NULL, 0, NULL};
  switch (h->device.device_type) {
    case HURRAY_DEVICE_CPU:
    case HURRAY_DEVICE_CUDA_HOST:
    case HURRAY_DEVICE_ROCM_HOST: break;
    default:
      r.status = HURRAY_ERR_UNSUPPORTED_DEVICE;
      r.msg = hgo_strdup("the memory is not host memory");
      return r;
  }
  hurray_extent ext;
  int32_t s = hurray_buffer_extent(h, &ext);
  if (s != HURRAY_OK) {
    r.status = s;
    r.msg = hgo_strdup(hurray_last_error());
    return r;
  }
  r.len = ext.highest - ext.lowest;
  if (r.len > 0) r.base = (char *)h->data + ext.lowest;
  return r;
}

const char *hgo_status_name(int32_t status) { return hurray_status_name(status); }

void hgo_noop(void) {}

int32_t hgo_check_on(void) {
  hurray_check_state st;
  memset(&st, 0, sizeof st);
  st.struct_size = sizeof st;
  if (hurray_check_get_state(&st) != HURRAY_OK) return 0;
  return st.options != 0;
}

int32_t hgo_check_stderr(uint64_t *double_releases) {
  hurray_check_state st;
  memset(&st, 0, sizeof st);
  st.struct_size = sizeof st;
  if (hurray_check_get_state(&st) != HURRAY_OK || (st.options & HURRAY_CHECK_STDERR) == 0) return 0;
  *double_releases = st.double_releases;
  return 1;
}

typedef struct hgo_check_acc {
  hgo_check_item *items;
  size_t n, cap;
  int failed;
} hgo_check_acc;

static char *hgo_strdup_or_empty(const char *s, int *failed) {
  char *p = hgo_strdup(s != NULL ? s : "");
  if (p == NULL) *failed = 1;
  return p;
}

static void hgo_check_visit(const hurray_check_entry *e, void *user) {
  hgo_check_acc *a = user;
  if (a->failed) return;
  if (a->n == a->cap) {
    size_t cap = a->cap ? 2 * a->cap : 16;
    hgo_check_item *p = realloc(a->items, cap * sizeof *p);
    if (p == NULL) {
      a->failed = 1;
      return;
    }
    a->items = p;
    a->cap = cap;
  }
  hgo_check_item *it = &a->items[a->n++];
  it->id = e->id;
  it->made_by = hgo_strdup_or_empty(e->made_by, &a->failed);
  it->label = hgo_strdup_or_empty(e->label, &a->failed);
  it->origin = hgo_strdup_or_empty(e->origin, &a->failed);
  it->data = (uintptr_t)e->data;
  it->device_type = e->device.device_type;
  it->device_id = e->device.device_id;
  it->ndim = e->ndim;
  it->code = e->dtype.code;
  it->bits = e->dtype.bits;
  it->lanes = e->dtype.lanes;
}

void hgo_check_free(hgo_check_item *items, size_t n) {
  for (size_t k = 0; k < n; k++) {
    free(items[k].made_by);
    free(items[k].label);
    free(items[k].origin);
  }
  free(items);
}

hgo_check_ret hgo_check_live(uint64_t since) {
  hgo_check_ret r = {HURRAY_OK, 0, NULL, NULL};
  hgo_check_acc a = {NULL, 0, 0, 0};
  int32_t s = hurray_check_live(since, hgo_check_visit, &a, NULL);
  if (s != HURRAY_OK || a.failed) {
    hgo_check_free(a.items, a.n);
    r.status = s != HURRAY_OK ? s : HURRAY_ERR_OUT_OF_MEMORY;
    r.msg = hgo_strdup(s != HURRAY_OK ? hurray_last_error() : "cannot copy the live-handle list");
    return r;
  }
  r.n = a.n;
  r.items = a.items;
  return r;
}

void hgo_check_label(hgo_ref ref, size_t first, size_t last, const char *label) {
  hgo_block *b = hgo_blk(ref);
  /* Errors ignored (hurray_go.h); tested rather than cast to void, which does
   * not quiet GCC's warn_unused_result. */
  for (size_t k = first; k <= last; k++) {
    if (hurray_check_label(&b->h[k], label) != HURRAY_OK) continue;
  }
}

hgo_ref hgo_block_own(void) { return (hgo_ref)hgo_block_new(1, 1); }

void hgo_block_free(hgo_ref ref) { free(hgo_blk(ref)); }

hgo_ret hgo_share_into(hgo_ref src, size_t i, hgo_ref dst) {
  hgo_block *b = hgo_blk(src);
  hgo_block *d = hgo_blk(dst);
  hurray_buffer t[2]; /* C stack: the source's new handle, then the share */
  int32_t s = hurray_share(&b->h[i], 2, t);
  if (s != HURRAY_OK) return hgo_fail(s, hurray_last_error());
  b->h[i] = t[0];
  d->h[0] = t[1];
  return hgo_made(d, 0);
}

void hgo_release_slot(hgo_ref ref, size_t i) { (void)hurray_buffer_release(&hgo_blk(ref)->h[i]); }
