// SPDX-License-Identifier: Apache-2.0
// Pure layout rules: dtype table, device table, element count and byte
// extent with overflow-checked arithmetic (spec §3). No allocation, no state.
#ifndef HURRAY_SRC_HANDLE_LAYOUT_H_
#define HURRAY_SRC_HANDLE_LAYOUT_H_

#include <climits>
#include <cstdint>

#include "hurray/hurray.h"

namespace hurray::detail {

// The fields every tensor description has, whatever struct it came from.
// `strides` may be NULL only where the caller allows compact row-major.
struct Desc {
  void *data;
  uint64_t byte_offset;
  int32_t device_type;
  int32_t device_id;
  hurray_dtype dtype;
  int32_t ndim;
  const int64_t *shape;
  const int64_t *strides;  // NULL: compact row-major
  uint64_t flags;
};

// Bits one element occupies in memory (bits * lanes, rounded up to whole
// bytes when `flags` has HURRAY_FLAG_SUBBYTE_PADDED). dtype must be valid.
inline int64_t element_bits(hurray_dtype dtype, uint64_t flags) {
  int64_t b = int64_t{dtype.bits} * dtype.lanes;
  if ((flags & HURRAY_FLAG_SUBBYTE_PADDED) != 0) b = (b + 7) / 8 * 8;
  return b;
}

// The exact check: `d` against spec §3 with overflow-checked arithmetic in
// the order of the spec; when `extent` is non-NULL, fills it.
// `who` prefixes field names in messages ("dl_tensor", "buffer").
// With `strides_required`, NULL strides at ndim > 0 are an error; without it
// they mean compact row-major.
// Returns HURRAY_OK or a status with the thread-local message set.
__attribute__((noinline)) int32_t check_desc_exact(const Desc &d, const char *who,
                                                   bool strides_required, hurray_extent *extent);

// The table of spec §3 item 3 as a 65536-bit set over code + 256 * bits
// (bit k of word k / 64): set exactly where code is 0..17 and bits is valid
// for it. 8 KiB; a check reads one word of it.
struct DtypeKeySet {
  uint64_t words[1024];
};
extern const DtypeKeySet kValidDtypeKeys;

// Device types DLPack 1.3 defines (1-4, 7-18) as a bit set over the value.
constexpr uint32_t kKnownDeviceTypes = 0x7FF9Eu;

// From this rank on, the fast check first tries wide_dims_ok.
constexpr int32_t kWideNdim = 8;

// A sufficient bound on the shape pass for many dimensions
// (src/handle/layout_wide.cc): true only when every extent is >= 1, the element
// count is at most 2^62 and the sums of positive and of negative spans
// ((shape[k]-1)*strides[k]) are below 2^38 in magnitude. It reads every
// extent and stride (a stride where the extent is 1 is read but ignored).
// A false proves nothing. AVX-512 eight dimensions at a time or AVX2 four at
// a time where the CPU has them, scalar otherwise; every path gives the same
// verdict on every input.
bool wide_dims_ok(int32_t ndim, const int64_t *shape, const int64_t *strides);

// The paths of wide_dims_ok, for tests: whether this CPU runs one, and the
// bound through one named path (the scalar one where the CPU lacks it).
enum class WidePath { kScalar, kAvx2, kAvx512 };
bool wide_path_available(WidePath path);
bool wide_dims_ok_with(WidePath path, int32_t ndim, const int64_t *shape, const int64_t *strides);

// The shape pass of the fast check, exact: true when every extent is >= 1,
// the element count and both span sums are computable, the sums are below
// 2^38 in magnitude and byte_offset is below 2^62.
inline bool dims_fast_ok(int32_t ndim, const int64_t *shape, const int64_t *strides,
                         uint64_t byte_offset) {
  // One pass over the shape. Extent 1 changes neither the element count nor
  // the extent, whatever its stride; extent 0 or below goes to the exact
  // check (a zero-size tensor skips the extent rules there). Overflow of any
  // product or sum also goes there, for the message.
  int64_t numel = 1, hi = 0, lo = 0;
  for (int32_t k = 0; k < ndim; ++k) {
    const int64_t n = shape[k];
    if (n == 1) continue;
    if (n <= 0) return false;
    const int64_t s = strides[k];
    int64_t span;
    if (__builtin_mul_overflow(numel, n, &numel)) return false;
    if (__builtin_mul_overflow(n - 1, s, &span)) return false;
    // Positive spans go to hi and negative ones to lo, so a partial sum
    // overflows exactly when the total does: the order is irrelevant.
    if (s >= 0 ? __builtin_add_overflow(hi, span, &hi) : __builtin_add_overflow(lo, span, &lo)) {
      return false;
    }
  }
  // Byte extent: with at most 2^38 elements on either side of element
  // (0,...,0), at most 2^24 bits per element (255 bits x 65535 lanes) and
  // byte_offset below 2^62, every product and sum of spec §3.3 stays below
  // 2^63 in magnitude. Larger tensors get the exact arithmetic.
  constexpr uint64_t kSpanBound = uint64_t{1} << 38;
  static_assert(int64_t{255} * 65535 < (int64_t{1} << 24), "element size bound");
  return static_cast<uint64_t>(hi) < kSpanBound &&
         uint64_t{0} - static_cast<uint64_t>(lo) <= kSpanBound && (byte_offset >> 62) == 0;
}

// dims_fast_ok for ndim >= kWideNdim: wide_dims_ok first, dims_fast_ok when
// that bound misses (src/handle/layout_wide.cc).
bool dims_fast_wide(int32_t ndim, const int64_t *shape, const int64_t *strides,
                    uint64_t byte_offset);

// The fast check (spec §3, "where validation runs"): true when `d` passes
// every rule of check_desc_exact with strides given. Below kWideNdim it
// reads each extent once and each stride only where the extent is above 1
// (from kWideNdim on, wide_dims_ok reads all of them first), and computes the
// element count and the byte extent exactly with overflow-checked
// arithmetic; it never sets a message. It returns false for anything it does
// not prove valid -- an error, and also every tensor with a zero extent or
// NULL strides, which the exact check then decides -- so a false is never a
// verdict on its own: the caller runs check_desc_exact, whose answer and
// message are the ones the call returns.
inline bool desc_fast_ok(void *data, uint64_t byte_offset, int32_t device_type, int32_t device_id,
                         hurray_dtype dtype, int32_t ndim, const int64_t *shape,
                         const int64_t *strides) {
  // ndim in 0..64; shape and strides present when ndim > 0 (the fast path
  // needs strides even where the exact check would synthesise them).
  if (static_cast<uint32_t>(ndim) > HURRAY_MAX_NDIM) return false;
  if (ndim > 0 && (shape == nullptr || strides == nullptr)) return false;
  // dtype: lanes >= 1 and bit (code + 256 * bits) of the valid-dtype set
  // (one word load, one bit test; codes above 17 find only zeros).
  const uint32_t key = dtype.code | (uint32_t{dtype.bits} << 8);
  if (dtype.lanes == 0 || ((kValidDtypeKeys.words[key >> 6] >> (key & 63)) & 1) == 0) return false;
  // device: a known type (the set is below 32) and a non-negative ordinal
  // (the ordinal's sign bit pushes the value past 31).
  const uint32_t dev =
      static_cast<uint32_t>(device_type) | (static_cast<uint32_t>(device_id) & 0x80000000u);
  if (dev > 31 || ((kKnownDeviceTypes >> dev) & 1) == 0) return false;
  if (data == nullptr) return false;
  // Many dimensions: the vector bound first, then this loop (out of line).
  if (ndim >= kWideNdim) return dims_fast_wide(ndim, shape, strides, byte_offset);
  return dims_fast_ok(ndim, shape, strides, byte_offset);
}

// check_desc_exact, through the fast check first when no extent is wanted.
inline int32_t check_desc(const Desc &d, const char *who, bool strides_required,
                          hurray_extent *extent) {
  if (extent == nullptr && desc_fast_ok(d.data, d.byte_offset, d.device_type, d.device_id, d.dtype,
                                        d.ndim, d.shape, d.strides)) {
    return HURRAY_OK;
  }
  return check_desc_exact(d, who, strides_required, extent);
}

// Validates only the dtype (code known to DLPack 1.3, bits valid for the
// code, lanes != 0).
int32_t check_dtype(hurray_dtype dtype, const char *who);

// Validates only the device (known DLPack device type, device_id >= 0).
int32_t check_device(int32_t device_type, int32_t device_id, const char *who);

// Writes compact row-major strides for `shape` into `strides` (ndim entries).
// Shape must already be checked; with a zero extent the result is still the
// row-major pattern of max(extent, 1), saturated at INT64_MAX where that
// pattern exceeds 64 bits (possible only when some extent is 0).
void compact_strides(int32_t ndim, const int64_t *shape, int64_t *strides);

// Host-addressable device types (CPU and pinned host memory).
inline bool host_accessible(int32_t device_type) {
  return device_type == HURRAY_DEVICE_CPU || device_type == HURRAY_DEVICE_CUDA_HOST ||
         device_type == HURRAY_DEVICE_ROCM_HOST;
}

}  // namespace hurray::detail

#endif  // HURRAY_SRC_HANDLE_LAYOUT_H_
