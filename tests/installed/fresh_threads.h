// SPDX-License-Identifier: Apache-2.0
/* fresh_threads.h - the body of the fresh-thread probe (tests/installed/).
 *
 * Included by exactly one translation unit, after it defines HR(name) as the
 * way it reaches libhurray's function `hurray_<name>`: through the function
 * table of a dlopen'ed library (`api->name`) or by a direct call into a
 * library it links (`hurray_##name`). The TU also names the probe (PROBE).
 *
 * What it checks (any way of loading, any thread first: c-ffi §8): on each of several fresh threads
 * the FIRST call into libhurray is one hot-path operation (hurray_share of an imported tensor, an
 * import, an export, a release, an alloc, a failing call whose message is read, or an import of a
 * 12-d tensor, which takes the CPU-dispatched wide-rank bound); after it, every field of every
 * handle and of both exported DLPack tensors is compared with what the
 * producer described, and at the end every producer's deleter ran exactly
 * once. A library whose first touch of a thread_local on a thread clobbers
 * live registers (the -mtls-dialect=gnu2 defect on glibc 2.36) fails here
 * with NULL shapes or wrong strides instead of passing by luck. */
#ifndef HURRAY_TESTS_INSTALLED_FRESH_THREADS_H_
#define HURRAY_TESTS_INSTALLED_FRESH_THREADS_H_

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hurray/dlpack.h>
#include <hurray/hurray.h>

#define FT_THREADS 14
#define FT_SHARES 3
#define FT_ROUNDS 4 /* fresh threads per slot, one after the other */

/* The producer: one 2x3 float32 tensor per thread, viewed with a byte
 * offset of one element and strides {3, 1}. */
static const int64_t ft_shape[2] = {2, 3};
static const int64_t ft_strides[2] = {3, 1};
static float ft_data[FT_THREADS][7];
static atomic_int ft_deleted[FT_THREADS];
static atomic_int ft_failures;

static void ft_fail(int slot, const char *what, long long got, long long want) {
  fprintf(stderr, "%s: thread %d: %s: got %lld, want %lld\n", PROBE, slot, what, got, want);
  atomic_fetch_add(&ft_failures, 1);
}
#define FT_EXPECT(slot, what, got, want)                     \
  do {                                                       \
    long long g_ = (long long)(got), w_ = (long long)(want); \
    if (g_ != w_) ft_fail((slot), (what), g_, w_);           \
  } while (0)

static void ft_deleter(DLManagedTensorVersioned *self) {
  atomic_fetch_add((atomic_int *)self->manager_ctx, 1);
}

static void ft_make_tensor(DLManagedTensorVersioned *t, int slot) {
  memset(t, 0, sizeof *t);
  t->version.major = DLPACK_MAJOR_VERSION;
  t->version.minor = DLPACK_MINOR_VERSION;
  t->manager_ctx = &ft_deleted[slot];
  t->deleter = ft_deleter;
  t->dl_tensor.data = ft_data[slot];
  t->dl_tensor.device.device_type = kDLCPU;
  t->dl_tensor.ndim = 2;
  t->dl_tensor.dtype.code = kDLFloat;
  t->dl_tensor.dtype.bits = 32;
  t->dl_tensor.dtype.lanes = 1;
  t->dl_tensor.shape = (int64_t *)ft_shape;
  t->dl_tensor.strides = (int64_t *)ft_strides;
  t->dl_tensor.byte_offset = sizeof(float);
}

/* Every field of a handle that describes the producer's tensor. */
static void ft_check_handle(int slot, const char *what, const hurray_buffer *h) {
  char w[96];
#define FT_FIELD(field, got, want)              \
  snprintf(w, sizeof w, "%s: %s", what, field); \
  FT_EXPECT(slot, w, got, want)
  FT_FIELD("version", h->version, HURRAY_BUFFER_VERSION);
  FT_FIELD("release_fn set", h->release_fn != NULL, 1);
  FT_FIELD("data", (uintptr_t)h->data, (uintptr_t)ft_data[slot]);
  FT_FIELD("byte_offset", h->byte_offset, sizeof(float));
  FT_FIELD("device_type", h->device.device_type, HURRAY_DEVICE_CPU);
  FT_FIELD("device_id", h->device.device_id, 0);
  FT_FIELD("dtype.code", h->dtype.code, kDLFloat);
  FT_FIELD("dtype.bits", h->dtype.bits, 32);
  FT_FIELD("dtype.lanes", h->dtype.lanes, 1);
  FT_FIELD("ndim", h->ndim, 2);
  FT_FIELD("shape is set", h->shape != NULL, 1);
  FT_FIELD("strides are set", h->strides != NULL, 1);
  if (h->shape != NULL) {
    FT_FIELD("shape[0]", h->shape[0], 2);
    FT_FIELD("shape[1]", h->shape[1], 3);
  }
  if (h->strides != NULL) {
    FT_FIELD("strides[0]", h->strides[0], 3);
    FT_FIELD("strides[1]", h->strides[1], 1);
  }
#undef FT_FIELD
}

static void ft_check_dl(int slot, const char *what, const DLTensor *t) {
  char w[96];
  snprintf(w, sizeof w, "%s: data", what);
  FT_EXPECT(slot, w, (uintptr_t)t->data, (uintptr_t)ft_data[slot]);
  snprintf(w, sizeof w, "%s: byte_offset", what);
  FT_EXPECT(slot, w, t->byte_offset, sizeof(float));
  snprintf(w, sizeof w, "%s: device", what);
  FT_EXPECT(slot, w, t->device.device_type * 1000 + t->device.device_id, kDLCPU * 1000);
  snprintf(w, sizeof w, "%s: dtype", what);
  FT_EXPECT(slot, w, t->dtype.code * 100000 + t->dtype.bits * 10 + t->dtype.lanes,
            kDLFloat * 100000 + 32 * 10 + 1);
  snprintf(w, sizeof w, "%s: ndim", what);
  FT_EXPECT(slot, w, t->ndim, 2);
  snprintf(w, sizeof w, "%s: shape and strides set", what);
  FT_EXPECT(slot, w, t->shape != NULL && t->strides != NULL, 1);
  if (t->shape != NULL && t->strides != NULL && t->ndim == 2) {
    snprintf(w, sizeof w, "%s: shape", what);
    FT_EXPECT(slot, w, t->shape[0] * 10 + t->shape[1], 23);
    snprintf(w, sizeof w, "%s: strides", what);
    FT_EXPECT(slot, w, t->strides[0] * 10 + t->strides[1], 31);
    /* Element [1][2] through the view: the producer wrote 100*slot + index. */
    const float *base = (const float *)((const char *)t->data + t->byte_offset);
    snprintf(w, sizeof w, "%s: element [1][2]", what);
    FT_EXPECT(slot, w, (long long)base[1 * t->strides[0] + 2 * t->strides[1]], 100 * slot + 1 + 5);
  }
}

/* What a thread does first (and only first) before the common sequence. */
enum ft_first {
  FT_SHARE,
  FT_IMPORT,
  FT_EXPORT,
  FT_RELEASE,
  FT_ALLOC,
  FT_ERROR,
  FT_WIDE,
  FT_N_FIRST
};
static const char *const ft_first_name[FT_N_FIRST] = {
    "share", "import", "export", "release", "alloc", "failing call", "wide-rank import"};

/* FT_WIDE: a 12-d tensor, so that the import takes the CPU-dispatched
 * wide-rank bound (src/handle/layout_wide.cc, ndim >= 8) on the thread's first call. */
#define FT_WIDE_NDIM 12
static void ft_wide_first(int s) {
  int64_t shape[FT_WIDE_NDIM], strides[FT_WIDE_NDIM];
  int64_t stride = 1;
  for (int k = FT_WIDE_NDIM - 1; k >= 0; --k) {
    shape[k] = k < 2 ? 2 : 1;
    strides[k] = stride;
    stride *= shape[k];
  }
  DLManagedTensorVersioned t;
  ft_make_tensor(&t, s);
  atomic_int wide_deleted = 0;
  t.manager_ctx = &wide_deleted;
  t.dl_tensor.ndim = FT_WIDE_NDIM;
  t.dl_tensor.shape = shape;
  t.dl_tensor.strides = strides;
  hurray_buffer h;
  int32_t st = HR(from_dlpack_versioned)(&t, HURRAY_IMPORT_DEFAULT, &h);
  FT_EXPECT(s, "first call: wide-rank hurray_from_dlpack_versioned", st, HURRAY_OK);
  if (st != HURRAY_OK) return;
  FT_EXPECT(s, "wide: ndim", h.ndim, FT_WIDE_NDIM);
  int same = h.shape != NULL && h.strides != NULL;
  for (int k = 0; same && k < FT_WIDE_NDIM; ++k) {
    same = h.shape[k] == shape[k] && h.strides[k] == strides[k];
  }
  FT_EXPECT(s, "wide: shape and strides as given", same, 1);
  FT_EXPECT(s, "wide: data", (uintptr_t)h.data, (uintptr_t)ft_data[s]);
  FT_EXPECT(s, "wide: release", HR(buffer_release)(&h), HURRAY_OK);
  FT_EXPECT(s, "wide: deleter calls", atomic_load(&wide_deleted), 1);
}

typedef struct ft_job {
  int slot;
  enum ft_first first;
  hurray_buffer src;   /* an imported handle of the slot's tensor (FT_SHARE / FT_EXPORT) */
  hurray_buffer extra; /* a share of it, released first by FT_RELEASE */
  DLManagedTensorVersioned tensor;
} ft_job;

static void *ft_thread(void *arg) {
  ft_job *job = (ft_job *)arg;
  const int s = job->slot;
  int32_t st;
  hurray_buffer src = job->src;
  /* 1. The first call into libhurray on this thread. */
  switch (job->first) {
    case FT_SHARE: break; /* the share below is the first call */
    case FT_IMPORT:
      st = HR(from_dlpack_versioned)(&job->tensor, HURRAY_IMPORT_DEFAULT, &src);
      FT_EXPECT(s, "first call: hurray_from_dlpack_versioned", st, HURRAY_OK);
      break;
    case FT_EXPORT: {
      DLManagedTensorVersioned *t = NULL;
      st = HR(to_dlpack_versioned)(&job->extra, &t);
      FT_EXPECT(s, "first call: hurray_to_dlpack_versioned", st, HURRAY_OK);
      if (st == HURRAY_OK) {
        ft_check_dl(s, "first export", &t->dl_tensor);
        FT_EXPECT(s, "first export: delete", HR(dlpack_versioned_delete)(t), HURRAY_OK);
      }
      FT_EXPECT(s, "export consumed its source", job->extra.release_fn == NULL, 1);
      break;
    }
    case FT_RELEASE:
      FT_EXPECT(s, "first call: hurray_buffer_release", HR(buffer_release)(&job->extra), HURRAY_OK);
      FT_EXPECT(s, "released handle is empty", job->extra.release_fn == NULL, 1);
      break;
    case FT_ALLOC: {
      hurray_buffer a;
      const hurray_device cpu = {HURRAY_DEVICE_CPU, 0};
      const hurray_dtype f32 = {kDLFloat, 32, 1};
      st = HR(alloc)(cpu, f32, 2, ft_shape, 0, &a);
      FT_EXPECT(s, "first call: hurray_alloc", st, HURRAY_OK);
      if (st == HURRAY_OK) {
        FT_EXPECT(s, "alloc: ndim", a.ndim, 2);
        FT_EXPECT(s, "alloc: shape", a.shape != NULL ? a.shape[0] * 10 + a.shape[1] : -1, 23);
        FT_EXPECT(s, "alloc: data set", a.data != NULL, 1);
        FT_EXPECT(s, "alloc: release", HR(buffer_release)(&a), HURRAY_OK);
      }
      break;
    }
    case FT_ERROR: {
      hurray_buffer none[1];
      st = HR(share)(&src, 0, none); /* n == 0 is refused; src is untouched */
      FT_EXPECT(s, "first call: hurray_share(n = 0)", st, HURRAY_ERR_INVALID_ARGUMENT);
      const char *msg = HR(last_error)();
      FT_EXPECT(s, "message names n", msg != NULL && strstr(msg, "n is 0") != NULL, 1);
      break;
    }
    case FT_WIDE: ft_wide_first(s); break;
    case FT_N_FIRST: break;
  }
  /* 2. The common sequence: share, check every field, export both forms. */
  hurray_buffer out[FT_SHARES];
  st = HR(share)(&src, FT_SHARES, out);
  FT_EXPECT(s, "hurray_share", st, HURRAY_OK);
  if (st != HURRAY_OK) {
    fprintf(stderr, "%s: thread %d: %s\n", PROBE, s, HR(last_error)());
    (void)HR(buffer_release)(&src);
    return NULL;
  }
  FT_EXPECT(s, "share consumed its source", src.release_fn == NULL, 1);
  char what[32];
  for (int i = 0; i < FT_SHARES; ++i) {
    snprintf(what, sizeof what, "share %d", i);
    ft_check_handle(s, what, &out[i]);
  }
  DLManagedTensorVersioned *v = NULL;
  DLManagedTensor *l = NULL;
  FT_EXPECT(s, "hurray_to_dlpack_versioned", HR(to_dlpack_versioned)(&out[0], &v), HURRAY_OK);
  FT_EXPECT(s, "hurray_to_dlpack", HR(to_dlpack)(&out[1], &l), HURRAY_OK);
  if (v != NULL) {
    ft_check_dl(s, "versioned export", &v->dl_tensor);
    FT_EXPECT(s, "versioned export: flags", v->flags, 0);
    FT_EXPECT(s, "versioned export: version", v->version.major, DLPACK_MAJOR_VERSION);
  }
  if (l != NULL) ft_check_dl(s, "legacy export", &l->dl_tensor);
  FT_EXPECT(s, "deleter ran before the last release", atomic_load(&ft_deleted[s]), 0);
  FT_EXPECT(s, "release share 2", HR(buffer_release)(&out[2]), HURRAY_OK);
  if (v != NULL) FT_EXPECT(s, "versioned delete", HR(dlpack_versioned_delete)(v), HURRAY_OK);
  if (l != NULL) FT_EXPECT(s, "legacy delete", HR(dlpack_delete)(l), HURRAY_OK);
  return NULL;
}

/* Runs the probe: FT_ROUNDS rounds of FT_THREADS fresh threads. Returns 0
 * when every check held; prints each failed one. */
static int ft_run(void) {
  for (int round = 0; round < FT_ROUNDS; ++round) {
    ft_job jobs[FT_THREADS];
    pthread_t threads[FT_THREADS];
    for (int s = 0; s < FT_THREADS; ++s) {
      for (int i = 0; i < 7; ++i) ft_data[s][i] = (float)(100 * s + i);
      atomic_store(&ft_deleted[s], 0);
      ft_job *job = &jobs[s];
      memset(job, 0, sizeof *job);
      job->slot = s;
      job->first = (enum ft_first)((s + round) % FT_N_FIRST);
      ft_make_tensor(&job->tensor, s);
      if (job->first == FT_IMPORT) continue; /* the thread imports it itself */
      int32_t st = HR(from_dlpack_versioned)(&job->tensor, HURRAY_IMPORT_DEFAULT, &job->src);
      if (st != HURRAY_OK) {
        fprintf(stderr, "%s: import on the main thread failed: %s\n", PROBE, HR(last_error)());
        return 1;
      }
      if (job->first == FT_EXPORT || job->first == FT_RELEASE) {
        hurray_buffer two[2];
        st = HR(share)(&job->src, 2, two);
        if (st != HURRAY_OK) {
          fprintf(stderr, "%s: share on the main thread failed: %s\n", PROBE, HR(last_error)());
          return 1;
        }
        job->src = two[0];
        job->extra = two[1];
      }
    }
    for (int s = 0; s < FT_THREADS; ++s) {
      if (pthread_create(&threads[s], NULL, ft_thread, &jobs[s]) != 0) {
        fprintf(stderr, "%s: pthread_create failed\n", PROBE);
        return 1;
      }
    }
    for (int s = 0; s < FT_THREADS; ++s) pthread_join(threads[s], NULL);
    for (int s = 0; s < FT_THREADS; ++s) {
      char what[64];
      snprintf(what, sizeof what, "round %d (first: %s): producer deleter calls", round,
               ft_first_name[jobs[s].first]);
      FT_EXPECT(s, what, atomic_load(&ft_deleted[s]), 1);
    }
  }
  const int failures = atomic_load(&ft_failures);
  if (failures != 0) {
    fprintf(stderr, "%s: FAILED: %d check(s)\n", PROBE, failures);
    return 1;
  }
  printf("%s: %d rounds of %d fresh threads, every field checked, every producer released once\n",
         PROBE, FT_ROUNDS, FT_THREADS);
  return 0;
}

#endif /* HURRAY_TESTS_INSTALLED_FRESH_THREADS_H_ */
