// SPDX-License-Identifier: Apache-2.0
// A strided copy reduced to byte arithmetic that cannot overflow: size-1
// dimensions dropped (their stride never moves), dimensions walked backwards
// on both sides turned round, and runs that are contiguous on both sides
// merged. Then the shape of the copy the drivers can do in one call (a
// contiguous run, a 2-D or a 3-D copy), if any (docs/impl/gpu.md §4).
// Pure: no allocation, no driver, no state.
#ifndef HURRAY_SRC_COPY_PLAN_H_
#define HURRAY_SRC_COPY_PLAN_H_

#include <cstdint>

#include "hurray/hurray.h"

namespace hurray::detail {

struct CopyPlan {
  int64_t elem_bytes;                   // bytes per element, >= 1
  int64_t numel;                        // elements, >= 1
  int32_t ndim;                         // 0 (one element) .. HURRAY_MAX_NDIM
  int64_t shape[HURRAY_MAX_NDIM];       // each >= 2, innermost last
  int64_t src_stride[HURRAY_MAX_NDIM];  // bytes, any sign
  int64_t dst_stride[HURRAY_MAX_NDIM];  // bytes, any sign
  // Where the first element of the walk lies, in bytes from element
  // (0, ..., 0) of each side (non-zero after a dimension was turned round).
  int64_t src_first;
  int64_t dst_first;
};

// Builds the plan for copying a (ndim, shape) tensor whose element strides
// are `src_strides` into one with `dst_strides` (NULL: compact row-major),
// `elem_bytes` per element. The shape must have no zero extent, and both
// layouts must have passed check_desc (their byte extents fit in int64), so
// nothing here can overflow; every product is still checked, and an
// overflow is HURRAY_ERR_OVERFLOW with the message set.
int32_t make_copy_plan(int32_t ndim, const int64_t *shape, const int64_t *src_strides,
                       const int64_t *dst_strides, int64_t elem_bytes, CopyPlan *out);

// True when the destination side of `p` is compact row-major.
bool plan_dst_compact(const CopyPlan &p);

// The same plan writing compact row-major memory instead (dst_first 0).
CopyPlan plan_with_compact_dst(const CopyPlan &p);

// One copy the drivers' 2-D / 3-D memcpy can do: `depth` slices of `height`
// rows of `width` bytes; row r of slice z starts at
// first + z * rows * pitch + r * pitch on each side.
struct CopyRect {
  int32_t dims;        // 1: one contiguous run; 2: 2-D; 3: 3-D
  uint64_t width;      // bytes per row
  uint64_t height;     // rows per slice
  uint64_t depth;      // slices
  uint64_t src_pitch;  // bytes from row to row (>= width)
  uint64_t dst_pitch;
  uint64_t src_rows;  // rows from slice to slice (>= height)
  uint64_t dst_rows;
};

// The largest row pitch libhurray passes to a 2-D / 3-D memcpy (the
// drivers' limit is CU_DEVICE_ATTRIBUTE_MAX_PITCH, 2^31 - 1 on every NVIDIA
// GPU so far).
constexpr uint64_t kMaxCopyPitch = (uint64_t{1} << 31) - 1;

// Describes dimensions [first_dim, ndim) of `p` as one driver copy: true
// with *out filled when the rows are contiguous runs (or single elements)
// with positive pitches of at least the row width and at most
// kMaxCopyPitch, and slices whose strides are whole numbers of rows, at
// least `height` rows apart. The dimensions before first_dim are left to
// the caller (one such copy per index). False otherwise (negative or zero
// strides left, rows that overlap, more than three levels).
bool plan_rect(const CopyPlan &p, int32_t first_dim, CopyRect *out);

}  // namespace hurray::detail

#endif  // HURRAY_SRC_COPY_PLAN_H_
