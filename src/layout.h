// Pure layout rules: dtype table, device table, element count and byte
// extent with overflow-checked arithmetic (spec §3). No allocation, no state.
#ifndef HURRAY_SRC_LAYOUT_H_
#define HURRAY_SRC_LAYOUT_H_

#include <cstdint>

#include "hurray/hurray.h"

namespace hurray {

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

// Checks `d` against spec §3 and, when `extent` is non-NULL, fills it.
// `who` prefixes field names in messages ("dl_tensor", "buffer").
// With `strides_required`, NULL strides at ndim > 0 are an error; without it
// they mean compact row-major.
// Returns HURRAY_OK or a status with the thread-local message set.
int32_t check_desc(const Desc &d, const char *who, bool strides_required,
                   hurray_extent *extent);

// Validates only the dtype (code known to DLPack 1.3, bits valid for the
// code, lanes != 0).
int32_t check_dtype(hurray_dtype dtype, const char *who);

// Validates only the device (known DLPack device type, device_id >= 0).
int32_t check_device(int32_t device_type, int32_t device_id, const char *who);

// Bits one element occupies in memory (bits * lanes, rounded up to whole
// bytes when `flags` has HURRAY_FLAG_SUBBYTE_PADDED). dtype must be valid.
inline int64_t element_bits(hurray_dtype dtype, uint64_t flags) {
  int64_t b = int64_t{dtype.bits} * dtype.lanes;
  if ((flags & HURRAY_FLAG_SUBBYTE_PADDED) != 0) b = (b + 7) / 8 * 8;
  return b;
}

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

}  // namespace hurray

#endif  // HURRAY_SRC_LAYOUT_H_
