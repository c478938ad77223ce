// SPDX-License-Identifier: Apache-2.0
// What the benchmarks' foreign producer hands out: a handle, or a DLPack
// tensor, describing float32 CPU memory with given shape and strides, whose
// release (deleter) is the caller's. Header-only, shared by core_bench.cc,
// insn_count.cc and tvm_ffi_side_by_side.cc (each picks its own shapes).
#ifndef HURRAY_BENCH_BENCH_TENSORS_H_
#define HURRAY_BENCH_BENCH_TENSORS_H_

#include <hurray/dlpack.h>

#include <cstdint>

#include "hurray/hurray.h"

namespace hurray_bench {

// Compact row-major strides (in elements) of shape[0..nd).
inline void compact_strides(int32_t nd, const int64_t *shape, int64_t *strides) {
  int64_t s = 1;
  for (int32_t k = nd - 1; k >= 0; --k) {
    strides[k] = s;
    s *= shape[k];
  }
}

inline hurray_buffer foreign_handle(int32_t nd, const int64_t *shape, const int64_t *strides,
                                    hurray_release_fn release, void *data) {
  hurray_buffer h{};
  h.version = HURRAY_BUFFER_VERSION;
  h.release_fn = release;
  h.user_data = data;
  h.data = data;
  h.device = {HURRAY_DEVICE_CPU, 0};
  h.dtype = {kDLFloat, 32, 1};
  h.ndim = nd;
  h.shape = shape;
  h.strides = strides;
  return h;
}

inline DLManagedTensorVersioned foreign_tensor(int32_t nd, int64_t *shape, int64_t *strides,
                                               void (*deleter)(DLManagedTensorVersioned *),
                                               void *data) {
  DLManagedTensorVersioned t{};
  t.version = {1, 3};
  t.deleter = deleter;
  t.dl_tensor.data = data;
  t.dl_tensor.device = {kDLCPU, 0};
  t.dl_tensor.ndim = nd;
  t.dl_tensor.dtype = {kDLFloat, 32, 1};
  t.dl_tensor.shape = shape;
  t.dl_tensor.strides = strides;
  return t;
}

}  // namespace hurray_bench

#endif  // HURRAY_BENCH_BENCH_TENSORS_H_
