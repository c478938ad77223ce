// SPDX-License-Identifier: Apache-2.0
// Decoding of the fuzz input into the fields of a hostile DLPack header.
//
// The input is read front to back; once it runs out every read returns 0, so
// any byte string is a valid input. Integers that matter (extents, strides,
// ndim, byte_offset, device ids) are read through `value()`, which makes the
// interesting edges (0, +-1, INT64_MIN/MAX, powers of two near overflow) one
// byte away, so that libFuzzer's byte mutations find them. The encoding is
// documented in docs/impl/fuzzing.md and written by make_corpus.py.
#ifndef HURRAY_TESTS_FUZZ_FUZZ_INPUT_H_
#define HURRAY_TESTS_FUZZ_FUZZ_INPUT_H_

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace hurray_fuzz {

class FuzzInput {
 public:
  FuzzInput(const uint8_t *data, size_t size) : p_(data), left_(size) {}

  uint8_t u8() {
    if (left_ == 0) return 0;
    --left_;
    return *p_++;
  }

  uint16_t u16() { return static_cast<uint16_t>(u8() | (u8() << 8)); }

  uint64_t u64() {
    uint64_t v = 0;
    for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(u8()) << (8 * i);
    return v;
  }

  // One tag byte t, then:
  //   t <  0x80: the small number t - 32 (-32 .. 95)
  //   t <  0xF0: an edge value, kEdges[(t - 0x80) % kEdgeCount]
  //   t >= 0xF0: 8 raw little-endian bytes follow
  int64_t value() {
    const uint8_t t = u8();
    if (t < 0x80) return static_cast<int64_t>(t) - 32;
    if (t < 0xF0) return kEdges[(t - 0x80) % kEdgeCount];
    return static_cast<int64_t>(u64());
  }

  size_t left() const { return left_; }

 private:
  static constexpr int64_t kEdges[] = {
      0,
      1,
      -1,
      INT64_MAX,
      INT64_MIN,
      INT64_MAX / 2,
      INT64_MAX / 4,
      INT64_MAX / 8,
      INT64_MAX / 8 + 1,
      INT64_MAX / 16,
      INT64_MAX / 255,
      INT64_MIN / 2,
      INT64_MIN / 8,
      int64_t{1} << 31,
      (int64_t{1} << 31) - 1,
      int64_t{1} << 32,
      (int64_t{1} << 32) + 1,
      int64_t{1} << 62,
      -(int64_t{1} << 62),
      int64_t{1} << 61,
      int64_t{3037000500},  // ~sqrt(2^63): squares just overflow
      int64_t{3037000499},
      int64_t{1} << 20,
      65,
      64,
      -65,
      INT64_MAX - 1,
      INT64_MIN + 1,
  };
  static constexpr int kEdgeCount = sizeof(kEdges) / sizeof(kEdges[0]);

  const uint8_t *p_;
  size_t left_;
};

}  // namespace hurray_fuzz

#endif  // HURRAY_TESTS_FUZZ_FUZZ_INPUT_H_
