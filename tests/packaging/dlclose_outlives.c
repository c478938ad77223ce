// SPDX-License-Identifier: Apache-2.0
/* A runtime that dlopens libhurray, hands out handles and DLPack tensors,
 * and dlcloses the library before its consumers release them. The release
 * callbacks and deleters live in libhurray, so the library must stay mapped
 * (it is linked with -z nodelete): every release must still run, once. */
#include <dlfcn.h>
#include <stdio.h>

#include <hurray/dlpack.h>
#include <hurray/hurray.h>

static int g_released = 0;
static void count_release(void *user_data) {
  (void)user_data;
  ++g_released;
}

typedef int32_t (*share_fn)(hurray_buffer *, size_t, hurray_buffer *);
typedef int32_t (*export_fn)(hurray_buffer *, DLManagedTensorVersioned **);

int main(int argc, char **argv) {
  if (argc != 2) return 2;
  void *lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
  if (lib == NULL) {
    fprintf(stderr, "dlopen: %s\n", dlerror());
    return 2;
  }
  share_fn share = (share_fn)dlsym(lib, "hurray_share");
  export_fn to_dlpack = (export_fn)dlsym(lib, "hurray_to_dlpack_versioned");
  if (share == NULL || to_dlpack == NULL) return 2;

  static float storage[4];
  static const int64_t shape[1] = {4};
  static const int64_t strides[1] = {1};
  hurray_buffer h = {0};
  h.version = HURRAY_BUFFER_VERSION;
  h.release_fn = count_release;
  h.data = storage;
  h.device.device_type = HURRAY_DEVICE_CPU;
  h.dtype.code = 2;
  h.dtype.bits = 32;
  h.dtype.lanes = 1;
  h.ndim = 1;
  h.shape = shape;
  h.strides = strides;

  hurray_buffer out[2];
  DLManagedTensorVersioned *t = NULL;
  if (share(&h, 2, out) != HURRAY_OK || to_dlpack(&out[0], &t) != HURRAY_OK) return 2;

  if (dlclose(lib) != 0) return 2;

  out[1].release_fn(out[1].user_data); /* code inside libhurray */
  t->deleter(t);                       /* likewise */
  printf("released %d time(s) after dlclose\n", g_released);
  return g_released == 1 ? 0 : 1;
}
