// The shape pass of the fast check for many dimensions (spec §3.4): a
// sufficient bound checked four dimensions at a time with AVX2 where the CPU
// has it (runtime dispatch; the library is built for baseline x86-64), and
// the same bound in scalar code elsewhere.
//
// The bound, per dimension k with m = shape[k] - 1 and a = |strides[k]| (0
// where m == 0, whatever the stride):
//   (1) OR of all m < 2^31: every extent is in 1..2^31 (0 and negatives make
//       m negative, so its top bit fails the test);
//   (2) OR of all a < 2^31: then m * a is exact in 64 bits;
//   (3) OR of all m * a < 2^32: every span is below 2^32, so the sums of
//       positive and of negative spans are below 64 * 2^32 = 2^38, the span
//       bound of desc_fast_ok;
//   (4) sum of bit_length(m) <= 62: the element count, the product of
//       m + 1 <= 2^bit_length(m), is at most 2^62.
// All four prove what the exact loop of desc_fast_ok proves; a tensor that
// misses the bound goes to that loop, so the verdict never depends on it.
#include "layout.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define HURRAY_HAVE_AVX2_PATH 1
#endif

namespace hurray {
namespace {

inline int bit_length(uint64_t x) { return x == 0 ? 0 : 64 - __builtin_clzll(x); }

// Dimensions [k, ndim) in scalar code; accumulates into the four bounds.
inline void wide_tail(int32_t k, int32_t ndim, const int64_t *shape, const int64_t *strides,
                      uint64_t &acc_ma, uint64_t &acc_span, int &bits) {
  for (; k < ndim; ++k) {
    const uint64_t m = static_cast<uint64_t>(shape[k]) - 1;
    const int64_t s = m != 0 ? strides[k] : 0;
    const uint64_t a = s < 0 ? uint64_t{0} - static_cast<uint64_t>(s) : static_cast<uint64_t>(s);
    acc_ma |= m | a;
    acc_span |= (m & 0xFFFFFFFFu) * (a & 0xFFFFFFFFu);
    bits += bit_length(m);
  }
}

inline bool wide_verdict(uint64_t acc_ma, uint64_t acc_span, int bits) {
  return (acc_ma >> 31) == 0 && (acc_span >> 32) == 0 && bits <= 62;
}

bool wide_dims_scalar(int32_t ndim, const int64_t *shape, const int64_t *strides) {
  uint64_t acc_ma = 0, acc_span = 0;
  int bits = 0;
  wide_tail(0, ndim, shape, strides, acc_ma, acc_span, bits);
  return wide_verdict(acc_ma, acc_span, bits);
}

#ifdef HURRAY_HAVE_AVX2_PATH
__attribute__((target("avx2"))) bool wide_dims_avx2(int32_t ndim, const int64_t *shape,
                                                    const int64_t *strides) {
  const __m256i zero = _mm256_setzero_si256();
  const __m256i one = _mm256_set1_epi64x(1);
  // 2^52 as bits and as a double: (x | magic) - 2^52 is x as a double for
  // 0 <= x < 2^52, whose exponent field is 1023 + floor(log2 x).
  const __m256i magic = _mm256_set1_epi64x(0x4330000000000000LL);
  const __m256d magic_d = _mm256_castsi256_pd(magic);
  __m256i acc_ma = zero, acc_span = zero, acc_exp = zero;
  int32_t k = 0;
  for (; k + 4 <= ndim; k += 4) {
    const __m256i n = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(shape + k));
    const __m256i s0 = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(strides + k));
    const __m256i m = _mm256_sub_epi64(n, one);
    const __m256i s = _mm256_andnot_si256(_mm256_cmpeq_epi64(m, zero), s0);
    const __m256i sign = _mm256_cmpgt_epi64(zero, s);
    const __m256i a = _mm256_sub_epi64(_mm256_xor_si256(s, sign), sign);
    acc_ma = _mm256_or_si256(acc_ma, _mm256_or_si256(m, a));
    acc_span = _mm256_or_si256(acc_span, _mm256_mul_epu32(m, a));
    // bit_length(m) = exponent(2m + 1) - 1023 (valid while m < 2^51, which
    // bound (1) ensures whenever the verdict is true).
    const __m256i x = _mm256_or_si256(_mm256_slli_epi64(m, 1), one);
    const __m256d d = _mm256_sub_pd(_mm256_castsi256_pd(_mm256_or_si256(x, magic)), magic_d);
    acc_exp = _mm256_add_epi64(acc_exp, _mm256_srli_epi64(_mm256_castpd_si256(d), 52));
  }
  alignas(32) uint64_t ma[4], span[4], ex[4];
  _mm256_store_si256(reinterpret_cast<__m256i *>(ma), acc_ma);
  _mm256_store_si256(reinterpret_cast<__m256i *>(span), acc_span);
  _mm256_store_si256(reinterpret_cast<__m256i *>(ex), acc_exp);
  uint64_t acc_ma_s = ma[0] | ma[1] | ma[2] | ma[3];
  uint64_t acc_span_s = span[0] | span[1] | span[2] | span[3];
  // Each exponent is at most 2047, so the sum of k of them fits an int.
  int bits = static_cast<int>(ex[0] + ex[1] + ex[2] + ex[3]) - 1023 * k;
  wide_tail(k, ndim, shape, strides, acc_ma_s, acc_span_s, bits);
  return wide_verdict(acc_ma_s, acc_span_s, bits);
}

bool detect_avx2() {
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2");
}
const bool kHasAvx2 = detect_avx2();
#endif

}  // namespace

bool wide_dims_ok(int32_t ndim, const int64_t *shape, const int64_t *strides) {
#ifdef HURRAY_HAVE_AVX2_PATH
  if (kHasAvx2) return wide_dims_avx2(ndim, shape, strides);
#endif
  return wide_dims_scalar(ndim, shape, strides);
}

bool dims_fast_wide(int32_t ndim, const int64_t *shape, const int64_t *strides,
                    uint64_t byte_offset) {
  if (wide_dims_ok(ndim, shape, strides)) return (byte_offset >> 62) == 0;
  return dims_fast_ok(ndim, shape, strides, byte_offset);
}

bool wide_dims_ok_scalar(int32_t ndim, const int64_t *shape, const int64_t *strides) {
  return wide_dims_scalar(ndim, shape, strides);
}

}  // namespace hurray
