// SPDX-License-Identifier: Apache-2.0
// Reducing a strided copy to checked byte arithmetic (copy/plan.h).
#include "copy/plan.h"

#include "common/error.h"

namespace hurray::detail {
namespace {

int32_t overflow(const char *what) {
  return detail::fail(HURRAY_ERR_OVERFLOW, "copying: the byte %s of the layout overflows 64 bits",
                      what);
}

}  // namespace

int32_t make_copy_plan(int32_t ndim, const int64_t *shape, const int64_t *src_strides,
                       const int64_t *dst_strides, int64_t elem_bytes, CopyPlan *out) {
  CopyPlan p{};
  p.elem_bytes = elem_bytes;
  p.numel = 1;
  // Compact element strides of the destination when none are given.
  int64_t compact[HURRAY_MAX_NDIM];
  int64_t run = 1;
  for (int32_t k = ndim - 1; k >= 0; --k) {
    compact[k] = run;
    if (__builtin_mul_overflow(run, shape[k], &run)) return overflow("size");
  }
  p.numel = run;
  // Dimensions of extent 1 are dropped: whatever their stride, it is
  // multiplied by 0 (shape {1, 2} with strides {INT64_MAX / 4, 2} must not
  // compute INT64_MAX / 4 * elem_bytes).
  int32_t n = 0;
  for (int32_t k = 0; k < ndim; ++k) {
    if (shape[k] == 1) continue;
    int64_t s, d;
    if (__builtin_mul_overflow(src_strides[k], elem_bytes, &s) ||
        __builtin_mul_overflow(dst_strides != nullptr ? dst_strides[k] : compact[k], elem_bytes,
                               &d)) {
      return overflow("stride");
    }
    if (s < 0 && d < 0) {
      // Walked backwards on both sides: walk it forwards from the last
      // element instead (the same element pairs).
      int64_t s_last, d_last;
      if (__builtin_mul_overflow(shape[k] - 1, s, &s_last) ||
          __builtin_mul_overflow(shape[k] - 1, d, &d_last) ||
          __builtin_add_overflow(p.src_first, s_last, &p.src_first) ||
          __builtin_add_overflow(p.dst_first, d_last, &p.dst_first)) {
        return overflow("offset");
      }
      s = -s;
      d = -d;
    }
    p.shape[n] = shape[k];
    p.src_stride[n] = s;
    p.dst_stride[n] = d;
    ++n;
  }
  // Merge an outer dimension into the inner one next to it when both sides
  // step over the inner run exactly.
  int32_t m = 0;  // dimensions kept, written from the innermost outwards
  for (int32_t k = n - 1; k >= 0; --k) {
    if (m > 0) {
      const int32_t in = n - m;  // the outermost dimension kept so far, next to k
      int64_t s_run, d_run, merged;
      if (!__builtin_mul_overflow(p.src_stride[in], p.shape[in], &s_run) &&
          !__builtin_mul_overflow(p.dst_stride[in], p.shape[in], &d_run) &&
          s_run == p.src_stride[k] && d_run == p.dst_stride[k] &&
          !__builtin_mul_overflow(p.shape[in], p.shape[k], &merged)) {
        p.shape[in] = merged;
        continue;
      }
    }
    ++m;
    const int32_t to = n - m;
    p.shape[to] = p.shape[k];
    p.src_stride[to] = p.src_stride[k];
    p.dst_stride[to] = p.dst_stride[k];
  }
  // Move the kept dimensions to the front.
  const int32_t skip = n - m;
  for (int32_t k = 0; k < m; ++k) {
    p.shape[k] = p.shape[k + skip];
    p.src_stride[k] = p.src_stride[k + skip];
    p.dst_stride[k] = p.dst_stride[k + skip];
  }
  p.ndim = m;
  *out = p;
  return HURRAY_OK;
}

bool plan_dst_compact(const CopyPlan &p) {
  int64_t expected = p.elem_bytes;
  for (int32_t k = p.ndim - 1; k >= 0; --k) {
    if (p.dst_stride[k] != expected) return false;
    expected *= p.shape[k];  // bounded by numel * elem_bytes
  }
  return p.dst_first == 0;
}

CopyPlan plan_with_compact_dst(const CopyPlan &p) {
  CopyPlan c = p;
  int64_t expected = p.elem_bytes;
  for (int32_t k = p.ndim - 1; k >= 0; --k) {
    c.dst_stride[k] = expected;
    expected *= p.shape[k];
  }
  c.dst_first = 0;
  return c;
}

bool plan_rect(const CopyPlan &p, int32_t first_dim, CopyRect *out) {
  CopyRect r{};
  r.width = static_cast<uint64_t>(p.elem_bytes);
  r.height = 1;
  r.depth = 1;
  int32_t last = p.ndim;  // one past the last row dimension
  if (last > first_dim && p.src_stride[last - 1] == p.elem_bytes &&
      p.dst_stride[last - 1] == p.elem_bytes) {
    // Rows are contiguous runs of the innermost dimension.
    int64_t w;
    if (__builtin_mul_overflow(p.shape[last - 1], p.elem_bytes, &w)) return false;
    r.width = static_cast<uint64_t>(w);
    --last;
  }
  const int32_t levels = last - first_dim;
  auto pitch_ok = [&](int64_t pitch) {
    return pitch > 0 && static_cast<uint64_t>(pitch) >= r.width &&
           static_cast<uint64_t>(pitch) <= kMaxCopyPitch;
  };
  if (levels == 0) {
    r.dims = 1;
  } else if (levels <= 2) {
    const int32_t row = last - 1;
    if (!pitch_ok(p.src_stride[row]) || !pitch_ok(p.dst_stride[row])) return false;
    r.height = static_cast<uint64_t>(p.shape[row]);
    r.src_pitch = static_cast<uint64_t>(p.src_stride[row]);
    r.dst_pitch = static_cast<uint64_t>(p.dst_stride[row]);
    r.dims = 2;
    if (levels == 2) {
      const int32_t slice = last - 2;
      const int64_t ss = p.src_stride[slice], ds = p.dst_stride[slice];
      if (ss <= 0 || ds <= 0 || ss % p.src_stride[row] != 0 || ds % p.dst_stride[row] != 0) {
        return false;
      }
      r.src_rows = static_cast<uint64_t>(ss / p.src_stride[row]);
      r.dst_rows = static_cast<uint64_t>(ds / p.dst_stride[row]);
      if (r.src_rows < r.height || r.dst_rows < r.height) return false;
      r.depth = static_cast<uint64_t>(p.shape[slice]);
      r.dims = 3;
    }
  } else {
    return false;
  }
  *out = r;
  return true;
}

}  // namespace hurray::detail
