// SPDX-License-Identifier: Apache-2.0
/* hurray/dlpack.h and an upstream DLPack 1.3 dlpack/dlpack.h in one
 * translation unit. HURRAY_COEXIST_UPSTREAM_FIRST picks the order. Whichever
 * comes first must be the only set of definitions (a second set would be a
 * redefinition error), and code written against the 1.3 C API, the exchange
 * API included, must compile and run with it. Built as C11 and, through
 * dlpack_coexist.cc, as C++17, under -Wall -Wextra -Wpedantic -Werror. */
#ifdef HURRAY_COEXIST_UPSTREAM_FIRST
#include <dlpack/dlpack.h>
#include <hurray/dlpack.h>
#else
#include <hurray/dlpack.h>
#include <dlpack/dlpack.h>
#endif
#include <hurray/hurray.h>

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef HURRAY_COEXIST_UPSTREAM_FIRST
#ifdef HURRAY_DLPACK_DECLARATIONS
#error "upstream dlpack.h came first, yet hurray/dlpack.h's declarations were used"
#endif
#define ORDER "upstream first"
#else
#ifndef HURRAY_DLPACK_DECLARATIONS
#error "hurray/dlpack.h came first, yet its declarations were not used"
#endif
#define ORDER "hurray/dlpack.h first"
#endif

#if DLPACK_MAJOR_VERSION != 1 || DLPACK_MINOR_VERSION < 3
#error "expected DLPack 1.3 or a later 1.x"
#endif

/* A tiny producer table written against the 1.3 exchange API types. */
static int g_calls = 0;

static int alloc_fn(DLTensor *prototype, DLManagedTensorVersioned **out, void *error_ctx,
                    void (*set_error)(void *, const char *, const char *)) {
  ++g_calls;
  (void)prototype;
  (void)out;
  set_error(error_ctx, "MemoryError", "this test allocates nothing");
  return -1;
}
static int from_py_fn(void *py_object, DLManagedTensorVersioned **out) {
  ++g_calls;
  (void)py_object;
  *out = NULL;
  return -1;
}
static int to_py_fn(DLManagedTensorVersioned *tensor, void **out_py_object) {
  ++g_calls;
  (void)tensor;
  *out_py_object = NULL;
  return -1;
}
static int stream_fn(DLDeviceType device_type, int32_t device_id, void **out_current_stream) {
  ++g_calls;
  (void)device_type;
  (void)device_id;
  *out_current_stream = NULL;
  return 0;
}

static const char *g_error_kind = NULL;
static void set_error(void *ctx, const char *kind, const char *message) {
  (void)message;
  *(int *)ctx = 1;
  g_error_kind = kind;
}

int main(void) {
  DLPackExchangeAPIHeader older = {{1, 2}, NULL};
  DLPackExchangeAPI api;
  DLPackManagedTensorAllocator a = alloc_fn;
  DLPackManagedTensorFromPyObjectNoSync f = from_py_fn;
  DLPackManagedTensorToPyObjectNoSync t = to_py_fn;
  DLPackDLTensorFromPyObjectNoSync v = NULL;
  DLPackCurrentWorkStream s = stream_fn;
  api.header.version.major = DLPACK_MAJOR_VERSION;
  api.header.version.minor = DLPACK_MINOR_VERSION;
  api.header.prev_api = &older;
  api.managed_tensor_allocator = a;
  api.managed_tensor_from_py_object_no_sync = f;
  api.managed_tensor_to_py_object_no_sync = t;
  api.dltensor_from_py_object_no_sync = v;
  api.current_work_stream = s;

  /* The published layout on 64-bit targets. */
  if (sizeof(void *) == 8) {
    if (sizeof(DLPackExchangeAPIHeader) != 16 || sizeof(DLPackExchangeAPI) != 56 ||
        offsetof(DLPackExchangeAPI, managed_tensor_allocator) != 16 ||
        offsetof(DLPackExchangeAPI, current_work_stream) != 48 ||
        sizeof(DLManagedTensorVersioned) != 80 || sizeof(DLManagedTensor) != 64 ||
        sizeof(DLTensor) != 48) {
      fprintf(stderr, "unexpected DLPack layout\n");
      return 1;
    }
  }

  int failed = 0;
  DLManagedTensorVersioned *mt = NULL;
  DLTensor proto;
  memset(&proto, 0, sizeof proto);
  void *stream = &failed;
  void *obj = &failed;
  if (api.managed_tensor_allocator(&proto, &mt, &failed, set_error) == 0 || !failed ||
      g_error_kind == NULL) {
    return 1;
  }
  if (api.managed_tensor_from_py_object_no_sync(NULL, &mt) == 0 || mt != NULL) return 1;
  if (api.managed_tensor_to_py_object_no_sync(NULL, &obj) == 0 || obj != NULL) return 1;
  if (api.current_work_stream(kDLCPU, 0, &stream) != 0 || stream != NULL) return 1;
  if (g_calls != 4 || api.header.prev_api->version.minor != 2) return 1;

  /* libhurray's own exports are tensors of this very type. */
  hurray_device cpu = {HURRAY_DEVICE_CPU, 0};
  hurray_dtype f32 = {kDLFloat, 32, 1};
  int64_t shape[1] = {4};
  hurray_buffer h;
  if (hurray_alloc(cpu, f32, 1, shape, 0, &h) != HURRAY_OK) return 1;
  if (hurray_to_dlpack_versioned(&h, &mt) != HURRAY_OK) return 1;
  int ok = mt->version.major == 1 && mt->dl_tensor.shape[0] == 4 &&
           (mt->flags & DLPACK_FLAG_BITMASK_READ_ONLY) == 0;
  mt->deleter(mt);
  if (!ok) return 1;
  printf("dlpack_coexist (%s): DLPack %d.%d, one set of definitions\n", ORDER, DLPACK_MAJOR_VERSION,
         DLPACK_MINOR_VERSION);
  return 0;
}
