// SPDX-License-Identifier: Apache-2.0
// The bound the fast check tries first at ndim >= 8 (src/handle/layout_wide.cc):
// every edge of its four conditions, in the vector part and in the scalar
// tail, must give the exact check's verdict (hurray_buffer_extent runs only
// the exact arithmetic; validate and import go through the bound). The
// bound's own paths (scalar, AVX2, AVX-512; this test compiles
// src/handle/layout_wide.cc in) must agree with each other on every layout here,
// and a bound that holds must mean the exact check passes.
#include <algorithm>
#include <cstdio>
#include <climits>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "hurray_test_support.h"
#include "handle/layout.h"

namespace {

using namespace hurray_test;

constexpr int64_t k2e31 = int64_t{1} << 31;
constexpr int64_t k2e32 = int64_t{1} << 32;

// ndim dimensions of extent 1 whose strides are nonsense (ignored), with
// `dims` (position, extent, stride) set.
struct Dim {
  int pos;
  int64_t extent;
  int64_t stride;
};
Layout wide(int ndim, std::vector<Dim> dims, hurray_dtype dtype = dt(kDLInt, 8)) {
  Layout l;
  l.shape.assign(ndim, 1);
  l.strides.assign(ndim, INT64_MIN);
  for (const Dim &d : dims) {
    l.shape[d.pos] = d.extent;
    l.strides[d.pos] = d.stride;
  }
  l.dtype = dtype;
  return l;
}

using hurray::detail::WidePath;
constexpr WidePath kPaths[] = {WidePath::kScalar, WidePath::kAvx2, WidePath::kAvx512};
const char *path_name(WidePath p) {
  return p == WidePath::kScalar ? "scalar" : p == WidePath::kAvx2 ? "avx2" : "avx512";
}

// Every path this CPU runs gives the scalar path's answer, and a bound that
// holds is never wrong (exact is the exact check's status).
void expect_paths_agree(const Layout &l, int32_t exact, const std::string &what) {
  const int ndim = static_cast<int>(l.shape.size());
  const bool scalar =
      hurray::detail::wide_dims_ok_with(WidePath::kScalar, ndim, l.shape.data(), l.strides.data());
  if (scalar) {
    EXPECT_EQ(exact, HURRAY_OK) << what << ": the bound held on an invalid layout";
  }
  for (WidePath p : kPaths) {
    if (!hurray::detail::wide_path_available(p)) continue;
    EXPECT_EQ(hurray::detail::wide_dims_ok_with(p, ndim, l.shape.data(), l.strides.data()), scalar)
        << what << ", path " << path_name(p);
  }
}

int32_t expect_same_verdict(const Layout &l, const std::string &what) {
  SCOPED_TRACE(what);
  HandleSource src;
  const hurray_buffer h = src.handle(l);
  hurray_extent e;
  const int32_t exact = hurray_buffer_extent(&h, &e);
  expect_paths_agree(l, exact, what);
  EXPECT_STATUS(hurray_buffer_validate(&h), exact);
  DeleterLog log;
  DLManagedTensorVersioned *t = make_versioned(log, l);
  hurray_buffer out = sentinel_handle();
  EXPECT_STATUS(hurray_from_dlpack_versioned(t, HURRAY_IMPORT_DEFAULT, &out), exact);
  if (exact == HURRAY_OK) {
    EXPECT_OK(hurray_buffer_release(&out));
  } else {
    EXPECT_TRUE(same_bytes(out, sentinel_handle()));
    t->deleter(t);
  }
  EXPECT_EQ(log.calls.load(), 1);
  return exact;
}

struct Edge {
  const char *name;
  std::vector<Dim> dims;  // positions relative to the rank's last index when negative
  int32_t status;
};

const Edge kEdges[] = {
    {"all extents 1, strides INT64_MIN", {}, HURRAY_OK},
    // (1) extents: m = 2^31 - 1 inside the bound, 2^31 past it (exact decides).
    {"extent 2^31", {{0, k2e31, 1}}, HURRAY_OK},
    {"extent 2^31 + 1", {{0, k2e31 + 1, 1}}, HURRAY_OK},
    {"extent 0 beside huge strides", {{0, 0, 1}, {1, 5, INT64_MAX}}, HURRAY_OK},
    {"extent -1", {{-1, -1, 1}}, HURRAY_ERR_INVALID_ARGUMENT},
    {"extent INT64_MIN", {{-1, INT64_MIN, 1}}, HURRAY_ERR_INVALID_ARGUMENT},
    // (2) strides: |s| = 2^31 - 1 inside, 2^31 and INT64_MIN past it.
    {"stride 2^31 - 1", {{0, 2, k2e31 - 1}}, HURRAY_OK},
    {"stride -(2^31 - 1)", {{0, 2, -(k2e31 - 1)}}, HURRAY_OK},
    {"stride 2^31", {{0, 2, k2e31}}, HURRAY_OK},
    {"stride -2^31", {{0, 2, -k2e31}}, HURRAY_OK},
    {"stride INT64_MIN, extent 2", {{0, 2, INT64_MIN}}, HURRAY_ERR_OVERFLOW},
    {"stride INT64_MAX, extent 3", {{0, 3, INT64_MAX}}, HURRAY_ERR_OVERFLOW},
    // (3) spans: 2^32 - 1 inside, 2^32 past it; sums of many at the edge.
    {"span 2^32 - 1", {{0, 4, (k2e32 - 1) / 3}}, HURRAY_OK},
    {"span 2^32", {{0, 65537, 65536}}, HURRAY_OK},
    {"spans of both signs", {{0, 65536, 65535}, {1, 65536, -65535}}, HURRAY_OK},
    // (4) element count: 2^62 inside, 2^63 overflowing; bit lengths add up.
    {"numel 2^62 in 2 dims", {{0, k2e31, 0}, {1, k2e31, 0}}, HURRAY_OK},
    {"numel 2^62 + 2^31", {{0, k2e31 + 1, 0}, {1, k2e31, 0}}, HURRAY_OK},
    {"numel 2^63 in 3 dims", {{0, k2e31, 0}, {1, k2e31, 0}, {2, 2, 0}}, HURRAY_ERR_OVERFLOW},
    {"numel (2^31)^3", {{0, k2e31, 0}, {1, k2e31, 0}, {-1, k2e31, 0}}, HURRAY_ERR_OVERFLOW},
    {"numel 3^40 broadcast", {}, HURRAY_ERR_OVERFLOW},  // filled in below
};

TEST(ValidateWide, BoundEdgesGiveTheExactAnswer) {
  // Ranks with no tail (8, 16, 64), a tail of 1 and of 3 (9, 11): the last
  // dimension is in the scalar tail for 9 and 11 (AVX2) and in the masked
  // last step for 9, 11, 15 and 63 (AVX-512).
  for (int ndim : {8, 9, 11, 15, 16, 63, 64}) {
    for (const Edge &c : kEdges) {
      std::vector<Dim> dims = c.dims;
      for (Dim &d : dims) {
        if (d.pos < 0) d.pos += ndim;
      }
      Layout l = wide(ndim, dims);
      if (std::string(c.name) == "numel 3^40 broadcast") {
        if (ndim < 40) continue;
        for (int k = 0; k < 40; ++k) l.shape[k] = 3, l.strides[k] = 0;
      }
      const std::string what = std::string(c.name) + ", ndim " + std::to_string(ndim);
      EXPECT_EQ(expect_same_verdict(l, what), c.status) << what;
      // The same dimensions moved to the end (into the tail where there is one).
      Layout r = l;
      std::reverse(r.shape.begin(), r.shape.end());
      std::reverse(r.strides.begin(), r.strides.end());
      EXPECT_EQ(expect_same_verdict(r, what + ", reversed"), c.status) << what;
    }
  }
}

// 62 extents of 2 (bit lengths sum to 62, inside) and 63 (overflow).
TEST(ValidateWide, BitLengthSumEdge) {
  Layout in = wide(64, {});
  for (int k = 0; k < 62; ++k) in.shape[k] = 2, in.strides[k] = 0;
  EXPECT_EQ(expect_same_verdict(in, "62 extents of 2"), HURRAY_OK);
  Layout out = in;
  out.shape[62] = 2, out.strides[62] = 0;
  EXPECT_EQ(expect_same_verdict(out, "63 extents of 2"), HURRAY_ERR_OVERFLOW);
  // Extents of 3 have bit length 2: 31 of them (3^31 < 2^50) pass the bound
  // and 32 (3^32 < 2^51) miss it, valid either way.
  Layout threes = wide(40, {});
  for (int k = 0; k < 32; ++k) threes.shape[k] = 3, threes.strides[k] = 0;
  EXPECT_EQ(expect_same_verdict(threes, "32 extents of 3"), HURRAY_OK);
}

// Random layouts at ranks 8 to 64 with extents and strides around the bound:
// the fast path's verdict is the exact one.
TEST(ValidateWide, AgreesWithTheExactCheckOnRandomWideLayouts) {
  std::mt19937_64 rng(8008);
  const int64_t extents[] = {1, 1, 1, 1, 2, 3, 0, k2e31, k2e31 + 1, INT64_MAX, -1, 1 << 20};
  const int64_t strides[] = {0,      1,     -1,        k2e31 - 1, k2e31,
                             -k2e31, k2e32, INT64_MAX, INT64_MIN, 12345};
  int ok = 0, failed = 0;
  for (int round = 0; round < 4000; ++round) {
    const int ndim = 8 + static_cast<int>(rng() % 57);
    Layout l = wide(ndim, {});
    const int used = 1 + static_cast<int>(rng() % 4);
    for (int i = 0; i < used; ++i) {
      const int k = static_cast<int>(rng() % ndim);
      l.shape[k] = extents[rng() % (sizeof extents / sizeof extents[0])];
      l.strides[k] = strides[rng() % (sizeof strides / sizeof strides[0])];
    }
    HandleSource src;
    const hurray_buffer h = src.handle(l);
    hurray_extent e;
    const int32_t exact = hurray_buffer_extent(&h, &e);
    ASSERT_EQ(hurray_buffer_validate(&h), exact) << "round " << round;
    expect_paths_agree(l, exact, "round " + std::to_string(round));
    (exact == HURRAY_OK ? ok : failed) += 1;
  }
  EXPECT_GT(ok, 500);
  EXPECT_GT(failed, 500);
}

// The paths this CPU runs are the ones it says it has (so the agreement
// above really covered them where the hardware allows).
TEST(ValidateWide, PathsAvailable) {
  EXPECT_TRUE(hurray::detail::wide_path_available(WidePath::kScalar));
  for (WidePath p : {WidePath::kAvx2, WidePath::kAvx512}) {
    std::printf("wide path %s: %s\n", path_name(p),
                hurray::detail::wide_path_available(p) ? "available" : "not on this CPU");
  }
#if defined(__x86_64__)
  __builtin_cpu_init();
  EXPECT_EQ(hurray::detail::wide_path_available(WidePath::kAvx2),
            __builtin_cpu_supports("avx2") != 0);
  EXPECT_EQ(hurray::detail::wide_path_available(WidePath::kAvx512),
            __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512cd"));
#endif
}

}  // namespace
