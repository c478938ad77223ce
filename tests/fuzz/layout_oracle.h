// SPDX-License-Identifier: Apache-2.0
// An independent model of docs/spec/buffer-protocol.md §3 (well-formed
// handles, byte extent) computed in 128-bit arithmetic, against which the
// fuzz target judges what libhurray accepts and the extents it reports.
// It shares no code with src/.
#ifndef HURRAY_TESTS_FUZZ_LAYOUT_ORACLE_H_
#define HURRAY_TESTS_FUZZ_LAYOUT_ORACLE_H_

#include <cstdint>

#include "hurray/hurray.h"

namespace hurray_fuzz {

// A tensor description as a hostile producer wrote it.
struct Header {
  void *data;
  uint64_t byte_offset;
  int32_t device_type;
  int32_t device_id;
  uint8_t code, bits;
  uint16_t lanes;
  int32_t ndim;
  const int64_t *shape;
  const int64_t *strides;  // NULL: compact row-major where that is allowed
  uint64_t flags;          // SUBBYTE_PADDED changes the element size
};

// What the spec says about a header.
struct Verdict {
  // Bit (1u << status) for every status some violated rule calls for; 0 when
  // the header is well formed. A conforming library returns one of them.
  uint32_t errors;
  // The following are meaningful only when errors == 0.
  int64_t numel;
  int64_t itemsize_bits;
  int64_t lowest;   // bytes, relative to data
  int64_t highest;  // one past the last byte, relative to data
  int32_t contiguous;
  int64_t strides[HURRAY_MAX_NDIM];  // the effective strides (compact if none)
};

// Judges `h`. `strides_required`: NULL strides at ndim > 0 are an error
// (handles, DLPack >= 1.2); otherwise they mean compact row-major.
Verdict judge(const Header &h, bool strides_required);

// True when `status` is one of the verdict's errors (or HURRAY_OK for a
// well-formed header).
inline bool status_allowed(const Verdict &v, int32_t status) {
  if (v.errors == 0) return status == HURRAY_OK;
  return status > 0 && status < 32 && (v.errors & (1u << status)) != 0;
}

// Device types that HURRAY_IMPORT_CHECK_DEVICE_POINTER asks a GPU runtime about.
inline bool gpu_checked_type(int32_t t) {
  return t == HURRAY_DEVICE_CUDA || t == HURRAY_DEVICE_CUDA_HOST ||
         t == HURRAY_DEVICE_CUDA_MANAGED || t == HURRAY_DEVICE_ROCM || t == HURRAY_DEVICE_ROCM_HOST;
}

// Device types whose memory the host may read directly.
inline bool host_readable_type(int32_t t) {
  return t == HURRAY_DEVICE_CPU || t == HURRAY_DEVICE_CUDA_HOST || t == HURRAY_DEVICE_ROCM_HOST;
}

}  // namespace hurray_fuzz

#endif  // HURRAY_TESTS_FUZZ_LAYOUT_ORACLE_H_
