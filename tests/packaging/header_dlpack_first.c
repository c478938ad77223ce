// SPDX-License-Identifier: Apache-2.0
/* A C11 file that sees a dlpack.h first (the one libhurray was built with:
 * ours, or the external one from HURRAY_DLPACK_INCLUDE_DIR) and hurray.h
 * second. The two must not clash, and hurray.h's forward declarations must
 * name the very structs dlpack.h defines: the assignments below would be
 * incompatible-pointer errors under -Werror otherwise. */
#include <hurray/dlpack.h>
#include <hurray/hurray.h>

#include <stdio.h>

int main(void) {
  int32_t (*to_v)(hurray_buffer *, DLManagedTensorVersioned **) = hurray_to_dlpack_versioned;
  int32_t (*to_l)(hurray_buffer *, DLManagedTensor **) = hurray_to_dlpack;
  int32_t (*from_v)(DLManagedTensorVersioned *, uint32_t, hurray_buffer *) =
      hurray_from_dlpack_versioned;
  int32_t (*from_l)(DLManagedTensor *, uint32_t, hurray_buffer *) = hurray_from_dlpack;
  (void)to_v;
  (void)to_l;
  (void)from_v;
  (void)from_l;

  if (HURRAY_DLPACK_MAJOR != DLPACK_MAJOR_VERSION) return 1;
  if (HURRAY_DEVICE_CUDA != kDLCUDA || HURRAY_DEVICE_CPU != kDLCPU) return 1;
  if (HURRAY_FLAG_READ_ONLY != DLPACK_FLAG_BITMASK_READ_ONLY) return 1;

  /* A round trip through the real structs. */
  hurray_device cpu = {HURRAY_DEVICE_CPU, 0};
  hurray_dtype f32 = {kDLFloat, 32, 1};
  int64_t shape[2] = {2, 3};
  hurray_buffer h;
  if (hurray_alloc(cpu, f32, 2, shape, 0, &h) != HURRAY_OK) {
    fprintf(stderr, "alloc: %s\n", hurray_last_error());
    return 1;
  }
  DLManagedTensorVersioned *t = NULL;
  if (hurray_to_dlpack_versioned(&h, &t) != HURRAY_OK) {
    fprintf(stderr, "export: %s\n", hurray_last_error());
    return 1;
  }
  int ok = t->version.major == 1 && t->dl_tensor.ndim == 2 && t->dl_tensor.shape[1] == 3;
  hurray_dlpack_versioned_delete(t);
  if (!ok) return 1;
  printf("header_dlpack_first: DLPack %d.%d\n", DLPACK_MAJOR_VERSION, DLPACK_MINOR_VERSION);
  return 0;
}
