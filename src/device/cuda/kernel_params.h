// SPDX-License-Identifier: Apache-2.0
/* The one parameter of libhurray's strided device copy kernel
 * (src/device/cuda/strided_kernel.ptx, entry "hurray_strided_copy"), passed by value
 * to cuLaunchKernel. Plain C so that the fake CUDA driver of tests/fake_drivers can
 * interpret a launch with the same layout (docs/impl/gpu.md §4, §7).
 *
 * Element i of the row-major order of shape[0..ndim) is copied from
 * src + sum(idx[k] * src_stride[k]) to dst + sum(idx[k] * dst_stride[k]),
 * `units` loads/stores of `unit` bytes each. The byte offsets in the PTX
 * must match the offsetof values checked below. */
#ifndef HURRAY_SRC_DEVICE_CUDA_KERNEL_PARAMS_H_
#define HURRAY_SRC_DEVICE_CUDA_KERNEL_PARAMS_H_

#include <stddef.h>
#include <stdint.h>

#define HURRAY_STRIDED_KERNEL_NAME "hurray_strided_copy"
#define HURRAY_STRIDED_KERNEL_MAX_NDIM 64

typedef struct hurray_strided_kernel_params {
  uint64_t src;                                  /* address of source element (0, ..., 0) */
  uint64_t dst;                                  /* address of destination element (0, ..., 0) */
  uint64_t numel;                                /* elements to copy, > 0 */
  uint32_t ndim;                                 /* 1 .. HURRAY_STRIDED_KERNEL_MAX_NDIM */
  uint32_t unit;                                 /* bytes per load/store: 1, 2, 4 or 8 */
  uint64_t units;                                /* loads per element: element bytes / unit */
  int64_t shape[HURRAY_STRIDED_KERNEL_MAX_NDIM]; /* each >= 1 */
  int64_t src_stride[HURRAY_STRIDED_KERNEL_MAX_NDIM]; /* bytes, any sign */
  int64_t dst_stride[HURRAY_STRIDED_KERNEL_MAX_NDIM]; /* bytes, any sign */
} hurray_strided_kernel_params;

#ifdef __cplusplus
static_assert(offsetof(hurray_strided_kernel_params, ndim) == 24 &&
                  offsetof(hurray_strided_kernel_params, units) == 32 &&
                  offsetof(hurray_strided_kernel_params, shape) == 40 &&
                  offsetof(hurray_strided_kernel_params, src_stride) == 552 &&
                  offsetof(hurray_strided_kernel_params, dst_stride) == 1064 &&
                  sizeof(hurray_strided_kernel_params) == 1576,
              "the layout src/device/cuda/strided_kernel.ptx reads");
#endif

#endif /* HURRAY_SRC_DEVICE_CUDA_KERNEL_PARAMS_H_ */
