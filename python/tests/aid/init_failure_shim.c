// SPDX-License-Identifier: Apache-2.0
/* LD_PRELOAD shim for test_init_failure.py: makes the Nth call of
 * hurray_alloc, hurray_to_dlpack_versioned or hurray_to_dlpack fail (as
 * libhurray does when out of memory: nothing written, nothing consumed),
 * and counts hurray_buffer_release calls, so the test sees whether module
 * init releases a handle it never got. Environment:
 *   HURRAY_SHIM_FAIL=alloc:N | versioned:N | legacy:N
 *   HURRAY_SHIM_LIB=<path of libhurray.so> (the real functions are looked up
 *   there: the extension loads libhurray RTLD_LOCAL, out of RTLD_NEXT's reach)
 * At exit it prints "shim: releases=R live_releases=L" on stderr. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hurray/hurray.h"

static int calls_alloc, calls_versioned, calls_legacy, releases, live_releases;

static void *real_fn(const char *name) {
  static void *lib;
  if (lib == NULL) lib = dlopen(getenv("HURRAY_SHIM_LIB"), RTLD_NOW | RTLD_LOCAL);
  void *fn = lib != NULL ? dlsym(lib, name) : NULL;
  if (fn == NULL) {
    fprintf(stderr, "shim: cannot find the real %s\n", name);
    abort();
  }
  return fn;
}

static int should_fail(const char *what, int call) {
  const char *spec = getenv("HURRAY_SHIM_FAIL");
  size_t n = strlen(what);
  return spec != NULL && strncmp(spec, what, n) == 0 && spec[n] == ':' &&
         atoi(spec + n + 1) == call;
}

static void report(void) {
  fprintf(stderr, "shim: releases=%d live_releases=%d\n", releases, live_releases);
}

__attribute__((constructor)) static void init(void) { atexit(report); }

int32_t hurray_alloc(hurray_device device, hurray_dtype dtype, int32_t ndim, const int64_t *shape,
                     uint64_t flags, hurray_buffer *out) {
  if (should_fail("alloc", ++calls_alloc)) return HURRAY_ERR_OUT_OF_MEMORY;
  int32_t (*real)(hurray_device, hurray_dtype, int32_t, const int64_t *, uint64_t,
                  hurray_buffer *) =
      (int32_t(*)(hurray_device, hurray_dtype, int32_t, const int64_t *, uint64_t,
                  hurray_buffer *))real_fn("hurray_alloc");
  return real(device, dtype, ndim, shape, flags, out);
}

int32_t hurray_to_dlpack_versioned(hurray_buffer *src, DLManagedTensorVersioned **out) {
  if (should_fail("versioned", ++calls_versioned)) return HURRAY_ERR_OUT_OF_MEMORY;
  int32_t (*real)(hurray_buffer *, DLManagedTensorVersioned **) = (int32_t(*)(
      hurray_buffer *, DLManagedTensorVersioned **))real_fn("hurray_to_dlpack_versioned");
  return real(src, out);
}

int32_t hurray_to_dlpack(hurray_buffer *src, DLManagedTensor **out) {
  if (should_fail("legacy", ++calls_legacy)) return HURRAY_ERR_OUT_OF_MEMORY;
  int32_t (*real)(hurray_buffer *, DLManagedTensor **) =
      (int32_t(*)(hurray_buffer *, DLManagedTensor **))real_fn("hurray_to_dlpack");
  return real(src, out);
}

int32_t hurray_buffer_release(hurray_buffer *h) {
  ++releases;
  if (h != NULL && h->release_fn != NULL) ++live_releases;
  int32_t (*real)(hurray_buffer *) = (int32_t(*)(hurray_buffer *))real_fn("hurray_buffer_release");
  return real(h);
}
