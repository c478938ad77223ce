// SPDX-License-Identifier: Apache-2.0
// The shape pass of the fast check for many dimensions (spec §3.4): a
// sufficient bound checked eight dimensions at a time with AVX-512 (F and CD)
// or four at a time with AVX2 where the CPU has them (runtime dispatch; the
// library is built for baseline x86-64), and the same bound in scalar code
// elsewhere. All three give the same verdict on every input
// (tests/handle/layout_wide_test.cc runs each on the same layouts).
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
#include <cstdlib>
#include <cstring>

#include "handle/layout.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define HURRAY_HAVE_AVX2_PATH 1
#endif

namespace hurray::detail {
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
// Four dimensions into the AVX2 accumulators. With bound (1) holding
// (m < 2^31), (m | 2^52) read as a double is 2^52 + m exactly, and minus
// (2^52 - 0.5) it is m + 0.5 exactly, whose exponent field is
// 1023 + floor(log2(m + 0.5)) = 1022 + bit_length(m), for m = 0 too. Where
// (1) fails the lane's exponent is garbage but the verdict is false anyway.
struct Avx2Acc {
  __m256i ma, span, exp;
};
__attribute__((target("avx2"), always_inline)) inline Avx2Acc avx2_step(Avx2Acc acc,
                                                                        const int64_t *shape,
                                                                        const int64_t *strides) {
  const __m256i zero = _mm256_setzero_si256();
  const __m256i one = _mm256_set1_epi64x(1);
  const __m256i magic = _mm256_set1_epi64x(0x4330000000000000LL);  // 2^52
  const __m256d magic_half = _mm256_set1_pd(4503599627370495.5);   // 2^52 - 0.5
  const __m256i n = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(shape));
  const __m256i s = _mm256_loadu_si256(reinterpret_cast<const __m256i *>(strides));
  const __m256i m = _mm256_sub_epi64(n, one);
  // |s| (the sign bit picks -s), then 0 where m == 0 (extent 1).
  const __m256i neg = _mm256_sub_epi64(zero, s);
  const __m256i abs = _mm256_castpd_si256(
      _mm256_blendv_pd(_mm256_castsi256_pd(s), _mm256_castsi256_pd(neg), _mm256_castsi256_pd(s)));
  const __m256i a = _mm256_andnot_si256(_mm256_cmpeq_epi64(m, zero), abs);
  const __m256d d = _mm256_sub_pd(_mm256_castsi256_pd(_mm256_or_si256(m, magic)), magic_half);
  return Avx2Acc{_mm256_or_si256(acc.ma, _mm256_or_si256(m, a)),
                 _mm256_or_si256(acc.span, _mm256_mul_epu32(m, a)),
                 _mm256_add_epi64(acc.exp, _mm256_srli_epi64(_mm256_castpd_si256(d), 52))};
}

__attribute__((target("avx2"))) bool wide_dims_avx2(int32_t ndim, const int64_t *shape,
                                                    const int64_t *strides) {
  // Two sets of accumulators, eight dimensions per turn, so the two halves'
  // dependency chains overlap; the last ndim % 8 in scalar code.
  const __m256i z = _mm256_setzero_si256();
  Avx2Acc a0{z, z, z}, a1{z, z, z};
  int32_t k = 0;
  for (; k + 8 <= ndim; k += 8) {
    a0 = avx2_step(a0, shape + k, strides + k);
    a1 = avx2_step(a1, shape + k + 4, strides + k + 4);
  }
  const __m256i ma = _mm256_or_si256(a0.ma, a1.ma);
  const __m256i span = _mm256_or_si256(a0.span, a1.span);
  // (1)-(3) on all lanes: no bit at or above 2^31 in ma, 2^32 in span.
  const __m256i big = _mm256_or_si256(_mm256_srli_epi64(ma, 31), _mm256_srli_epi64(span, 32));
  const __m256i ex = _mm256_add_epi64(a0.exp, a1.exp);
  const __m128i ex2 = _mm_add_epi64(_mm256_castsi256_si128(ex), _mm256_extracti128_si256(ex, 1));
  // Each exponent is at most 2047, so the sum of k of them fits an int.
  int bits = static_cast<int>(_mm_cvtsi128_si64(ex2) + _mm_extract_epi64(ex2, 1)) - 1022 * k;
  uint64_t acc_ma = 0, acc_span = 0;
  wide_tail(k, ndim, shape, strides, acc_ma, acc_span, bits);
  return _mm256_testz_si256(big, big) != 0 && wide_verdict(acc_ma, acc_span, bits);
}

// GCC 12's AVX-512 headers build masked intrinsics on _mm512_undefined_*,
// which -Wmaybe-uninitialized reports inside target("avx512f") functions.
#if !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

// Eight dimensions per step, the last one masked (no scalar tail): absent
// lanes read extent 1 and stride 0, which add nothing to any bound.
// bit_length(m) = 64 - lzcnt(m) exactly, for every m.
struct Avx512Acc {
  __m512i ma, span, lz;
};
__attribute__((target("avx512f,avx512cd"), always_inline)) inline void avx512_step(
    Avx512Acc &acc, __mmask8 lanes, const int64_t *shape, const int64_t *strides) {
  const __m512i one = _mm512_set1_epi64(1);
  const __m512i n = _mm512_mask_loadu_epi64(one, lanes, shape);
  const __m512i s = _mm512_maskz_loadu_epi64(lanes, strides);
  const __m512i m = _mm512_sub_epi64(n, one);
  const __m512i a = _mm512_maskz_abs_epi64(_mm512_test_epi64_mask(m, m), s);
  acc.ma = _mm512_ternarylogic_epi64(acc.ma, m, a, 0xFE);  // acc | m | a
  acc.span = _mm512_or_si512(acc.span, _mm512_mul_epu32(m, a));
  acc.lz = _mm512_add_epi64(acc.lz, _mm512_lzcnt_epi64(m));
}

__attribute__((target("avx512f,avx512cd"))) bool wide_dims_avx512(int32_t ndim,
                                                                  const int64_t *shape,
                                                                  const int64_t *strides) {
  Avx512Acc acc{_mm512_setzero_si512(), _mm512_setzero_si512(), _mm512_setzero_si512()};
  int32_t k = 0;
  for (; k + 8 <= ndim; k += 8) avx512_step(acc, 0xFF, shape + k, strides + k);
  if (k < ndim) {
    avx512_step(acc, static_cast<__mmask8>((1u << (ndim - k)) - 1), shape + k, strides + k);
    k += 8;
  }
  // (1)-(3) on all lanes at once: no bit at or above 2^31 resp. 2^32.
  const __mmask8 big = _mm512_test_epi64_mask(acc.ma, _mm512_set1_epi64(~int64_t{0x7FFFFFFF})) |
                       _mm512_test_epi64_mask(acc.span, _mm512_set1_epi64(~int64_t{0xFFFFFFFF}));
  if (big != 0) return false;
  // (4): k lanes (a multiple of 8) of 64 bits each, minus their leading
  // zeros (each lane's sum is at most 64 * 8). Lanes added pairwise.
  __m512i lz = acc.lz;
  lz = _mm512_add_epi64(lz, _mm512_shuffle_i64x2(lz, lz, 0x4E));       // 256-bit halves
  lz = _mm512_add_epi64(lz, _mm512_shuffle_i64x2(lz, lz, 0xB1));       // 128-bit quarters
  lz = _mm512_add_epi64(lz, _mm512_shuffle_epi32(lz, _MM_PERM_BADC));  // 64-bit lanes
  const int bits = 64 * k - static_cast<int>(_mm_cvtsi128_si64(_mm512_castsi512_si128(lz)));
  return bits <= 62;
}
#if !defined(__clang__)
#pragma GCC diagnostic pop
#endif

// Benchmark hook, not an interface: HURRAY_INTERNAL_WIDE_PATH=avx2 or
// =scalar in the environment when the library is loaded turns off the wider
// paths (never on one the CPU lacks), so that bench/side_by_side.py can
// measure a CPU without AVX-512 (or AVX2) on one that has it. Every path
// gives the same verdict, so only speed changes.
int wide_path_cap() {
  const char *v = std::getenv("HURRAY_INTERNAL_WIDE_PATH");
  if (v == nullptr) return 2;
  if (std::strcmp(v, "scalar") == 0) return 0;
  if (std::strcmp(v, "avx2") == 0) return 1;
  return 2;
}
bool detect_avx2() {
  __builtin_cpu_init();
  return wide_path_cap() >= 1 && __builtin_cpu_supports("avx2");
}
// __builtin_cpu_supports also checks that the OS saves the AVX-512 state.
bool detect_avx512() {
  __builtin_cpu_init();
  return wide_path_cap() >= 2 && __builtin_cpu_supports("avx512f") &&
         __builtin_cpu_supports("avx512cd");
}
const bool kHasAvx2 = detect_avx2();
const bool kHasAvx512 = detect_avx512();
#endif

}  // namespace

bool wide_dims_ok(int32_t ndim, const int64_t *shape, const int64_t *strides) {
#ifdef HURRAY_HAVE_AVX2_PATH
  if (kHasAvx512) return wide_dims_avx512(ndim, shape, strides);
  if (kHasAvx2) return wide_dims_avx2(ndim, shape, strides);
#endif
  return wide_dims_scalar(ndim, shape, strides);
}

bool dims_fast_wide(int32_t ndim, const int64_t *shape, const int64_t *strides,
                    uint64_t byte_offset) {
  if (wide_dims_ok(ndim, shape, strides)) return (byte_offset >> 62) == 0;
  return dims_fast_ok(ndim, shape, strides, byte_offset);
}

bool wide_path_available(WidePath path) {
  switch (path) {
    case WidePath::kScalar: return true;
#ifdef HURRAY_HAVE_AVX2_PATH
    case WidePath::kAvx2: return kHasAvx2;
    case WidePath::kAvx512: return kHasAvx512;
#endif
    default: return false;
  }
}

bool wide_dims_ok_with(WidePath path, int32_t ndim, const int64_t *shape, const int64_t *strides) {
#ifdef HURRAY_HAVE_AVX2_PATH
  if (path == WidePath::kAvx512 && kHasAvx512) return wide_dims_avx512(ndim, shape, strides);
  if (path == WidePath::kAvx2 && kHasAvx2) return wide_dims_avx2(ndim, shape, strides);
#endif
  (void)path;
  return wide_dims_scalar(ndim, shape, strides);
}

}  // namespace hurray::detail
