// SPDX-License-Identifier: Apache-2.0
// Dtype and device tables and the overflow-checked extent (spec §3).
#include "handle/layout.h"

#include <cinttypes>
#include <climits>

#include "common/error.h"

namespace hurray::detail {
namespace {

constexpr bool bits_valid(uint8_t code, uint8_t bits) {
  switch (code) {
    case 0:  // kDLInt
    case 1:  // kDLUInt
      return bits == 1 || bits == 2 || bits == 4 || bits == 8 || bits == 16 || bits == 32 ||
             bits == 64;
    case 2:  // kDLFloat
      return bits == 16 || bits == 32 || bits == 64;
    case 3:  // kDLOpaqueHandle
      return bits != 0 && bits % 8 == 0;
    case 4:  // kDLBfloat
      return bits == 16;
    case 5:  // kDLComplex: width of the whole number
      return bits == 32 || bits == 64 || bits == 128;
    case 6:  // kDLBool
      return bits == 8;
    case 7:
    case 8:
    case 9:
    case 10:
    case 11:
    case 12:
    case 13:
    case 14:  // fp8
      return bits == 8;
    case 15:
    case 16:  // fp6
      return bits == 6;
    case 17:  // fp4
      return bits == 4;
    default: return false;
  }
}

}  // namespace

// Built from bits_valid at compile time, so the two cannot disagree
// (constant-initialised: no code runs at load).
namespace {
constexpr DtypeKeySet make_dtype_keys() {
  DtypeKeySet t{};
  for (int code = 0; code < 18; ++code) {
    for (int bits = 0; bits < 256; ++bits) {
      if (bits_valid(static_cast<uint8_t>(code), static_cast<uint8_t>(bits))) {
        const int key = code + 256 * bits;
        t.words[key / 64] |= uint64_t{1} << (key % 64);
      }
    }
  }
  return t;
}
}  // namespace

constexpr DtypeKeySet kValidDtypeKeys = make_dtype_keys();

int32_t check_dtype(hurray_dtype dtype, const char *who) {
  if (dtype.code > 17) {
    return fail(HURRAY_ERR_UNSUPPORTED_DTYPE,
                "%s.dtype.code is %u, which DLPack 1.3 does not define (0..17)", who,
                unsigned{dtype.code});
  }
  if (!bits_valid(dtype.code, dtype.bits)) {
    return fail(HURRAY_ERR_UNSUPPORTED_DTYPE,
                "%s.dtype.bits is %u, which is not valid for dtype code %u", who,
                unsigned{dtype.bits}, unsigned{dtype.code});
  }
  if (dtype.lanes == 0) {
    return fail(HURRAY_ERR_UNSUPPORTED_DTYPE, "%s.dtype.lanes is 0 (must be >= 1)", who);
  }
  return HURRAY_OK;
}

namespace {
constexpr bool device_known(int32_t device_type) {
  return device_type >= 1 && device_type <= 18 && device_type != 5 && device_type != 6;
}
constexpr bool device_set_matches() {
  for (int32_t t = -1; t < 40; ++t) {
    const bool in_set = t >= 0 && t < 32 && ((kKnownDeviceTypes >> t) & 1) != 0;
    if (in_set != device_known(t)) return false;
  }
  return true;
}
static_assert(device_set_matches(), "kKnownDeviceTypes is the device rule of check_device");
}  // namespace

int32_t check_device(int32_t device_type, int32_t device_id, const char *who) {
  bool known = device_known(device_type);
  if (!known) {
    return fail(HURRAY_ERR_UNSUPPORTED_DEVICE,
                "%s.device.device_type is %" PRId32 ", which DLPack 1.3 does not define", who,
                device_type);
  }
  if (device_id < 0) {
    return fail(HURRAY_ERR_INVALID_ARGUMENT, "%s.device.device_id is %" PRId32 " (must be >= 0)",
                who, device_id);
  }
  return HURRAY_OK;
}

int32_t check_desc_exact(const Desc &d, const char *who, bool strides_required,
                         hurray_extent *extent) {
  if (d.ndim < 0 || d.ndim > HURRAY_MAX_NDIM) {
    return fail(HURRAY_ERR_INVALID_ARGUMENT, "%s.ndim is %" PRId32 " (allowed: 0..%d)", who, d.ndim,
                HURRAY_MAX_NDIM);
  }
  if (d.ndim > 0 && d.shape == nullptr) {
    return fail(HURRAY_ERR_INVALID_ARGUMENT, "%s.shape is NULL while ndim is %" PRId32, who,
                d.ndim);
  }
  if (strides_required && d.ndim > 0 && d.strides == nullptr) {
    return fail(HURRAY_ERR_INVALID_ARGUMENT, "%s.strides is NULL while ndim is %" PRId32, who,
                d.ndim);
  }
  int32_t st = check_dtype(d.dtype, who);
  if (st != HURRAY_OK) return st;
  st = check_device(d.device_type, d.device_id, who);
  if (st != HURRAY_OK) return st;

  // Element count; a negative extent is an error wherever it appears.
  int64_t numel = 1;
  bool overflow = false;
  for (int32_t k = 0; k < d.ndim; ++k) {
    int64_t n = d.shape[k];
    if (n < 0) {
      return fail(HURRAY_ERR_INVALID_ARGUMENT,
                  "%s.shape[%" PRId32 "] is %" PRId64 " (must be >= 0)", who, k, n);
    }
    if (!overflow && __builtin_mul_overflow(numel, n, &numel)) overflow = true;
  }
  if (overflow) {
    // A zero extent anywhere makes the product 0 whatever the others are.
    for (int32_t k = 0; k < d.ndim; ++k) {
      if (d.shape[k] == 0) {
        overflow = false;
        numel = 0;
        break;
      }
    }
    if (overflow) {
      return fail(HURRAY_ERR_OVERFLOW, "%s: the element count of the shape exceeds 2^63-1", who);
    }
  }

  const int64_t ebits = element_bits(d.dtype, d.flags);
  if (d.byte_offset > static_cast<uint64_t>(INT64_MAX)) {
    return fail(HURRAY_ERR_OVERFLOW, "%s.byte_offset %" PRIu64 " exceeds 2^63-1", who,
                d.byte_offset);
  }
  const int64_t offset = static_cast<int64_t>(d.byte_offset);

  // Lowest and highest element index touched, relative to element (0,...,0).
  int64_t lo = 0, hi = 0;
  int32_t contiguous = 1;
  int64_t expected = 1;
  for (int32_t k = d.ndim - 1; k >= 0; --k) {
    const int64_t n = d.shape[k];
    const int64_t s = d.strides != nullptr ? d.strides[k] : expected;
    if (n != 1 && s != expected) contiguous = 0;
    if (numel != 0 && n > 1) {
      int64_t span;
      if (__builtin_mul_overflow(n - 1, s, &span) ||
          __builtin_add_overflow(span < 0 ? lo : hi, span, span < 0 ? &lo : &hi)) {
        return fail(HURRAY_ERR_OVERFLOW,
                    "%s: shape[%" PRId32 "]=%" PRId64 " with strides[%" PRId32 "]=%" PRId64
                    " reaches beyond 64-bit byte offsets",
                    who, k, n, k, s);
      }
    }
    if (numel != 0) expected *= n;  // cannot overflow: bounded by numel
  }
  // Without elements there is nothing out of order: a zero-size tensor is
  // contiguous whatever its strides (hurray_alloc's own zero-size tensors
  // included), as in NumPy and PyTorch.
  if (numel == 0) contiguous = 1;

  int64_t lowest = 0, highest = 0;
  if (numel != 0) {
    int64_t lo_bits, hi_bits;
    if (__builtin_mul_overflow(lo, ebits, &lo_bits) ||
        __builtin_add_overflow(hi, int64_t{1}, &hi) ||
        __builtin_mul_overflow(hi, ebits, &hi_bits) ||
        // floor(lo_bits / 8) and ceil(hi_bits / 8) without overflow (>> is
        // an arithmetic shift for negative values on every supported compiler)
        __builtin_add_overflow(offset, lo_bits >> 3, &lowest) ||
        __builtin_add_overflow(offset, (hi_bits >> 3) + ((hi_bits & 7) != 0), &highest)) {
      return fail(HURRAY_ERR_OVERFLOW,
                  "%s: the byte extent of shape, strides and byte_offset %" PRIu64
                  " overflows 64-bit arithmetic",
                  who, d.byte_offset);
    }
    if (d.data == nullptr) {
      return fail(HURRAY_ERR_INVALID_ARGUMENT,
                  "%s.data is NULL but the tensor has %" PRId64 " elements", who, numel);
    }
  }
  if (extent != nullptr) {
    extent->numel = numel;
    extent->itemsize_bits = ebits;
    extent->lowest = lowest;
    extent->highest = highest;
    extent->contiguous = contiguous;
    extent->reserved = 0;
  }
  return HURRAY_OK;
}

void compact_strides(int32_t ndim, const int64_t *shape, int64_t *strides) {
  int64_t s = 1;
  for (int32_t k = ndim - 1; k >= 0; --k) {
    strides[k] = s;
    // The product only exceeds 64 bits when some extent is 0 (otherwise it
    // is bounded by the checked element count); such a tensor addresses
    // nothing, so the pattern saturates instead of overflowing.
    if (__builtin_mul_overflow(s, shape[k] > 1 ? shape[k] : 1, &s)) s = INT64_MAX;
  }
}

}  // namespace hurray::detail
