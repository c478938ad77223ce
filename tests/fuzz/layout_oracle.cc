// SPDX-License-Identifier: Apache-2.0
// The spec §3 model behind layout_oracle.h: every quantity is computed
// exactly in __int128 and then compared with the signed 64-bit range, which
// is what "overflow-checked in signed 64-bit arithmetic" means for each
// product and sum the spec names.
#include "layout_oracle.h"

namespace hurray_fuzz {
namespace {

using i128 = __int128;

constexpr i128 kMax = INT64_MAX;
constexpr i128 kMin = INT64_MIN;

bool fits(i128 v) { return v >= kMin && v <= kMax; }

// Spec §3 item 3.
bool dtype_ok(uint8_t code, uint8_t bits, uint16_t lanes) {
  if (lanes == 0) return false;
  switch (code) {
    case 0:
    case 1:
      return bits == 1 || bits == 2 || bits == 4 || bits == 8 || bits == 16 || bits == 32 ||
             bits == 64;
    case 2: return bits == 16 || bits == 32 || bits == 64;
    case 3: return bits != 0 && bits % 8 == 0;
    case 4: return bits == 16;
    case 5: return bits == 32 || bits == 64 || bits == 128;
    case 6: return bits == 8;
    default:
      if (code >= 7 && code <= 14) return bits == 8;
      if (code == 15 || code == 16) return bits == 6;
      if (code == 17) return bits == 4;
      return false;
  }
}

// Floor and ceiling of v / 8 for any sign.
i128 floor8(i128 v) { return v >= 0 ? v / 8 : -((-v + 7) / 8); }
i128 ceil8(i128 v) { return v >= 0 ? (v + 7) / 8 : -((-v) / 8); }

uint32_t bit(int32_t status) { return 1u << status; }

}  // namespace

Verdict judge(const Header &h, bool strides_required) {
  Verdict v{};
  bool arrays_readable = true;
  if (h.ndim < 0 || h.ndim > HURRAY_MAX_NDIM) {
    v.errors |= bit(HURRAY_ERR_INVALID_ARGUMENT);
    arrays_readable = false;
  } else if (h.ndim > 0 && h.shape == nullptr) {
    v.errors |= bit(HURRAY_ERR_INVALID_ARGUMENT);
    arrays_readable = false;
  } else if (h.ndim > 0 && h.strides == nullptr && strides_required) {
    v.errors |= bit(HURRAY_ERR_INVALID_ARGUMENT);
    arrays_readable = false;
  }
  const bool dtype_valid = dtype_ok(h.code, h.bits, h.lanes);
  if (!dtype_valid) v.errors |= bit(HURRAY_ERR_UNSUPPORTED_DTYPE);
  const int32_t t = h.device_type;
  if (!(t >= 1 && t <= 18 && t != 5 && t != 6)) v.errors |= bit(HURRAY_ERR_UNSUPPORTED_DEVICE);
  if (h.device_id < 0) v.errors |= bit(HURRAY_ERR_INVALID_ARGUMENT);
  if (h.byte_offset > static_cast<uint64_t>(INT64_MAX)) v.errors |= bit(HURRAY_ERR_OVERFLOW);
  if (!arrays_readable) return v;

  // Element count (spec §3 item 5): a zero extent makes it 0 whatever else.
  bool has_zero = false;
  i128 numel = 1;
  bool numel_overflow = false;
  for (int32_t k = 0; k < h.ndim; ++k) {
    const int64_t n = h.shape[k];
    if (n < 0) v.errors |= bit(HURRAY_ERR_INVALID_ARGUMENT);
    if (n == 0) has_zero = true;
    if (n > 0 && !numel_overflow) {
      numel *= n;
      if (numel > kMax) numel_overflow = true;
    }
  }
  // A negative extent is an error whatever the rest says.
  for (int32_t k = 0; k < h.ndim; ++k) {
    if (h.shape[k] < 0) return v;
  }
  if (has_zero) {
    numel = 0;
    numel_overflow = false;
  }
  if (numel_overflow) v.errors |= bit(HURRAY_ERR_OVERFLOW);

  // Effective strides: the given ones or compact row-major.
  i128 expected = 1;
  for (int32_t k = h.ndim - 1; k >= 0; --k) {
    if (h.strides != nullptr) {
      v.strides[k] = h.strides[k];
    } else {
      v.strides[k] = fits(expected) ? static_cast<int64_t>(expected) : 0;
    }
    const int64_t n = h.shape[k];
    // Past 2^63 only with a zero extent somewhere; saturate (no 128-bit wrap).
    if (n > 1 && expected <= kMax) expected *= n;
  }

  if (!dtype_valid || numel_overflow || numel == 0) {
    // No extent to compute (or it is 0): a tensor without elements touches
    // nothing and may have data == NULL.
    if (v.errors == 0) {
      v.numel = 0;
      int64_t e = int64_t{h.bits} * h.lanes;
      if ((h.flags & HURRAY_FLAG_SUBBYTE_PADDED) != 0) e = (e + 7) / 8 * 8;
      v.itemsize_bits = e;
      v.lowest = v.highest = 0;
      v.contiguous = 1;
    }
    return v;
  }

  int64_t e = int64_t{h.bits} * h.lanes;
  if ((h.flags & HURRAY_FLAG_SUBBYTE_PADDED) != 0) e = (e + 7) / 8 * 8;

  // spec §3.3: spans over the dimensions with shape[k] > 1.
  i128 lo = 0, hi = 0;
  bool extent_overflow = false;
  int32_t contiguous = 1;
  i128 compact = 1;
  for (int32_t k = h.ndim - 1; k >= 0; --k) {
    const int64_t n = h.shape[k];
    const int64_t s = v.strides[k];
    if (n != 1 && s != compact) contiguous = 0;
    compact *= n;
    if (n > 1) {
      const i128 span = static_cast<i128>(n - 1) * s;
      if (!fits(span)) extent_overflow = true;
      if (span < 0)
        lo += span;
      else
        hi += span;
      if (!fits(lo) || !fits(hi)) extent_overflow = true;
    }
  }
  const i128 off = static_cast<i128>(h.byte_offset);
  i128 lowest = 0, highest = 0;
  if (!extent_overflow) {
    const i128 lo_bits = lo * e;
    const i128 hi_bits = (hi + 1) * e;
    if (!fits(lo_bits) || !fits(hi + 1) || !fits(hi_bits)) extent_overflow = true;
    lowest = off + floor8(lo_bits);
    highest = off + ceil8(hi_bits);
    if (!fits(lowest) || !fits(highest)) extent_overflow = true;
  }
  if (extent_overflow) v.errors |= bit(HURRAY_ERR_OVERFLOW);
  if (h.data == nullptr) v.errors |= bit(HURRAY_ERR_INVALID_ARGUMENT);
  if (v.errors != 0) return v;

  v.numel = static_cast<int64_t>(numel);
  v.itemsize_bits = e;
  v.lowest = static_cast<int64_t>(lowest);
  v.highest = static_cast<int64_t>(highest);
  v.contiguous = contiguous;
  return v;
}

}  // namespace hurray_fuzz
