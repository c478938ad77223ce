// SPDX-License-Identifier: Apache-2.0
// The fast validation path and the "validated once" rule (spec §3.4).
//
// hurray_buffer_validate goes through the fast check first; hurray_buffer_extent
// always runs the exact check. Every case here asserts the expected status of
// both, so a fast path that accepted what the exact rules reject (or the
// reverse) fails. The shapes sit at the fast path's edges: extent 1 with any
// stride, the 2^38-element span bound, byte_offset 2^62, and overflow just
// past 2^63.
#include <climits>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "hurray_test_support.h"

namespace {

using namespace hurray_test;

constexpr int64_t k2e38 = int64_t{1} << 38;
constexpr int64_t k2e62 = int64_t{1} << 62;

struct Case {
  const char *name;
  std::vector<int64_t> shape;
  std::vector<int64_t> strides;
  hurray_dtype dtype;
  uint64_t byte_offset;
  int32_t status;
};

const Case kCases[] = {
    // Extent 1 ignores its stride, whatever it is.
    {"extent 1, stride INT64_MAX", {1}, {INT64_MAX}, dt(kDLInt, 8), 0, HURRAY_OK},
    {"extent 1, stride INT64_MIN", {4, 1}, {1, INT64_MIN}, dt(kDLInt, 8), 0, HURRAY_OK},
    {"64 extents of 1, huge strides", std::vector<int64_t>(64, 1),
     std::vector<int64_t>(64, INT64_MAX), f32(), 0, HURRAY_OK},
    // The span bound of the fast path (2^38 elements) and just past it: both
    // valid, the second decided by the exact arithmetic.
    {"span 2^38 - 1", {k2e38}, {1}, dt(kDLInt, 8), 0, HURRAY_OK},
    {"span 2^38", {k2e38 + 1}, {1}, dt(kDLInt, 8), 0, HURRAY_OK},
    {"span -2^38", {k2e38 + 1}, {-1}, dt(kDLInt, 8), uint64_t{1} << 40, HURRAY_OK},
    {"span -(2^38 + 1)", {k2e38 + 2}, {-1}, dt(kDLInt, 8), uint64_t{1} << 40, HURRAY_OK},
    // byte_offset at and past 2^62 (exact path), and the last valid byte.
    {"byte_offset 2^62", {4}, {1}, f32(), uint64_t{1} << 62, HURRAY_OK},
    {"byte_offset INT64_MAX - 4, one float", {1}, {1}, f32(), uint64_t{INT64_MAX} - 4, HURRAY_OK},
    {"byte_offset INT64_MAX - 3, one float",
     {1},
     {1},
     f32(),
     uint64_t{INT64_MAX} - 3,
     HURRAY_ERR_OVERFLOW},
    {"byte_offset 2^63", {1}, {1}, f32(), uint64_t{1} << 63, HURRAY_ERR_OVERFLOW},
    // Element count: exactly INT64_MAX is fine (broadcast), 2^63 is not.
    {"numel INT64_MAX", {INT64_MAX}, {0}, f32(), 0, HURRAY_OK},
    {"numel 2^63", {2, k2e62}, {0, 0}, f32(), 0, HURRAY_ERR_OVERFLOW},
    {"numel 2^63 over 63 dimensions", std::vector<int64_t>(63, 2), std::vector<int64_t>(63, 0),
     f32(), 0, HURRAY_ERR_OVERFLOW},
    {"numel 2^62 over 62 dimensions", std::vector<int64_t>(62, 2), std::vector<int64_t>(62, 0),
     f32(), 0, HURRAY_OK},
    // A zero extent makes every other extent irrelevant.
    {"zero extent beside overflow", {0, k2e62, 4}, {1, INT64_MAX, 1}, f32(), 0, HURRAY_OK},
    {"negative extent beside a zero", {0, -1}, {1, 1}, f32(), 0, HURRAY_ERR_INVALID_ARGUMENT},
    // Spans: the product, the sums, the final scaling by the element size.
    {"span product 2^63", {3}, {k2e62}, dt(kDLInt, 8), 0, HURRAY_ERR_OVERFLOW},
    {"span sum 2^63", {2, 2}, {k2e62, k2e62}, dt(kDLInt, 8), 0, HURRAY_ERR_OVERFLOW},
    {"negative span sum -2^63 fits, bytes do not",
     {2, 2},
     {-k2e62, -k2e62},
     dt(kDLInt, 8),
     0,
     HURRAY_ERR_OVERFLOW},
    {"bits overflow just past: 2^60 floats",
     {int64_t{1} << 60},
     {1},
     f32(),
     0,
     HURRAY_ERR_OVERFLOW},
    {"bits just fit: 2^60 - 1 bytes", {(int64_t{1} << 60) - 1}, {1}, dt(kDLInt, 8), 0, HURRAY_OK},
    {"bits just past: 2^60 bytes", {int64_t{1} << 60}, {1}, dt(kDLInt, 8), 0, HURRAY_ERR_OVERFLOW},
    {"mixed signs, both within range",
     {2, 2},
     {k2e62 - 1, -k2e62},
     dt(kDLInt, 1),
     k2e62,
     HURRAY_OK},
};

TEST(ValidateFast, EdgeCasesGiveTheExactAnswer) {
  for (const Case &c : kCases) {
    SCOPED_TRACE(c.name);
    Layout l;
    l.shape = c.shape;
    l.strides = c.strides;
    l.dtype = c.dtype;
    l.byte_offset = c.byte_offset;
    HandleSource src;
    const hurray_buffer h = src.handle(l);
    EXPECT_STATUS(hurray_buffer_validate(&h), c.status);
    hurray_extent e;
    EXPECT_STATUS(hurray_buffer_extent(&h, &e), c.status);
    // Import goes through the same fast check.
    DeleterLog log;
    DLManagedTensorVersioned *t = make_versioned(log, l);
    hurray_buffer out = sentinel_handle();
    EXPECT_STATUS(hurray_from_dlpack_versioned(t, HURRAY_IMPORT_DEFAULT, &out), c.status);
    if (c.status == HURRAY_OK) {
      ASSERT_OK(hurray_buffer_release(&out));
    } else {
      EXPECT_TRUE(same_bytes(out, sentinel_handle()));
      t->deleter(t);
    }
    EXPECT_EQ(log.calls.load(), 1);
  }
}

// Random shapes and strides around the fast path's bounds: validate (fast
// path first) and extent (exact only) must agree on every one.
TEST(ValidateFast, AgreesWithTheExactCheckOnRandomLayouts) {
  std::mt19937_64 rng(20240608);
  const int64_t extents[] = {
      0, 1, 2, 3, 1 << 10, k2e38 - 1, k2e38, k2e38 + 1, int64_t{1} << 31, k2e62, INT64_MAX, -1};
  const int64_t strides[] = {
      0, 1, -1, 7, -7, k2e38, -k2e38, int64_t{1} << 31, k2e62, -k2e62, INT64_MAX, INT64_MIN};
  const uint64_t offsets[] = {0, 64, uint64_t{1} << 62, uint64_t{INT64_MAX}};
  int ok = 0, failed = 0;
  for (int round = 0; round < 20000; ++round) {
    Layout l;
    const int ndim = static_cast<int>(rng() % 6);
    for (int k = 0; k < ndim; ++k) {
      l.shape.push_back(extents[rng() % (sizeof extents / sizeof extents[0])]);
      l.strides.push_back(strides[rng() % (sizeof strides / sizeof strides[0])]);
    }
    l.dtype = rng() % 2 ? dt(kDLInt, 8) : dt(kDLComplex, 128, 4);
    l.byte_offset = offsets[rng() % 4];
    HandleSource src;
    const hurray_buffer h = src.handle(l);
    hurray_extent e;
    const int32_t exact = hurray_buffer_extent(&h, &e);
    const int32_t fast = hurray_buffer_validate(&h);
    ASSERT_EQ(fast, exact) << "round " << round;
    (exact == HURRAY_OK ? ok : failed) += 1;
  }
  // Both verdicts occur often enough for the comparison to mean something.
  EXPECT_GT(ok, 1000);
  EXPECT_GT(failed, 1000);
}

// ----- validated once: unchanged handles skip the check, changed ones do not --

TEST(ValidatedOnce, ChangedSharedHandleIsCheckedAgain) {
  HandleSource src;
  hurray_buffer h = src.handle(dense({2, 3}));
  hurray_buffer pair[2];
  ASSERT_OK(hurray_share(&h, 2, pair));
  const int64_t bad_shape[] = {2, -3};
  hurray_buffer changed = pair[0];
  changed.shape = bad_shape;  // libhurray's release_fn, but not what it validated
  const hurray_buffer before = changed;
  hurray_buffer out[2] = {sentinel_handle(), sentinel_handle()};
  EXPECT_STATUS(hurray_share(&changed, 2, out), HURRAY_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(LastErrorMentions("shape[1]"));
  EXPECT_TRUE(same_bytes(changed, before));
  DLManagedTensorVersioned *t = sentinel_ptr<DLManagedTensorVersioned>();
  EXPECT_STATUS(hurray_to_dlpack_versioned(&changed, &t), HURRAY_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(t, sentinel_ptr<DLManagedTensorVersioned>());
  changed.ndim = 65;
  EXPECT_STATUS(hurray_to_dlpack_versioned(&changed, &t), HURRAY_ERR_INVALID_ARGUMENT);
  changed = pair[0];
  changed.version = 2;
  EXPECT_STATUS(hurray_share(&changed, 1, out), HURRAY_ERR_UNSUPPORTED_VERSION);
  EXPECT_STATUS(hurray_to_dlpack(&changed, reinterpret_cast<DLManagedTensor **>(&t)),
                HURRAY_ERR_UNSUPPORTED_VERSION);
  // The unchanged ones still re-share (no new block) and release the source
  // once, after the last of them.
  ASSERT_OK(hurray_share(&pair[0], 2, out));
  EXPECT_EQ(out[0].user_data, pair[1].user_data);
  for (int i = 0; i < 2; ++i) ASSERT_OK(hurray_buffer_release(&out[i]));
  EXPECT_EQ(src.log.calls.load(), 0);
  ASSERT_OK(hurray_buffer_release(&pair[1]));
  EXPECT_EQ(src.log.calls.load(), 1);
}

TEST(ValidatedOnce, ChangedImportedHandleIsCheckedAgainAndNotUnwrapped) {
  DeleterLog log;
  DLManagedTensorVersioned *t = make_versioned(log, dense({2, 3}));
  hurray_buffer h;
  ASSERT_OK(hurray_from_dlpack_versioned(t, HURRAY_IMPORT_DEFAULT, &h));
  hurray_buffer changed = h;
  changed.data = nullptr;
  DLManagedTensorVersioned *out = sentinel_ptr<DLManagedTensorVersioned>();
  EXPECT_STATUS(hurray_to_dlpack_versioned(&changed, &out), HURRAY_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(LastErrorMentions("data"));
  EXPECT_EQ(out, sentinel_ptr<DLManagedTensorVersioned>());
  changed = h;
  changed.dtype.lanes = 0;
  EXPECT_STATUS(hurray_to_dlpack_versioned(&changed, &out), HURRAY_ERR_UNSUPPORTED_DTYPE);
  // Unchanged: unwrapped to the very tensor.
  ASSERT_OK(hurray_to_dlpack_versioned(&h, &out));
  EXPECT_EQ(out, t);
  EXPECT_EQ(log.calls.load(), 0);
  out->deleter(out);
  EXPECT_EQ(log.calls.load(), 1);
}

// The legacy form cannot carry flags: a legacy import was checked with flags
// 0, so a handle whose flags were set afterwards is checked again before it
// unwraps. Padding a 4-bit tensor of 2^60 elements doubles its byte extent
// past 2^63: it must fail although its fields still match the tensor.
TEST(ValidatedOnce, LegacyUnwrapChecksFlagsTheImportDidNotSee) {
  Layout l;
  l.shape = {int64_t{1} << 60};
  l.strides = {1};
  l.dtype = dt(kDLInt, 4);
  DeleterLog log;
  DLManagedTensor *t = make_legacy(log, l);
  hurray_buffer h;
  ASSERT_OK(hurray_from_dlpack(t, HURRAY_IMPORT_DEFAULT, &h));
  h.flags = HURRAY_FLAG_SUBBYTE_PADDED;
  DLManagedTensor *out = sentinel_ptr<DLManagedTensor>();
  EXPECT_STATUS(hurray_to_dlpack(&h, &out), HURRAY_ERR_OVERFLOW);
  EXPECT_EQ(out, sentinel_ptr<DLManagedTensor>());
  h.flags = HURRAY_FLAG_READ_ONLY;  // harmless flags: unwraps (and are dropped)
  ASSERT_OK(hurray_to_dlpack(&h, &out));
  EXPECT_EQ(out, t);
  out->deleter(out);
  EXPECT_EQ(log.calls.load(), 1);
}

// An export block changed after export is not unwrapped: it is checked as
// the foreign tensor it now is.
TEST(ValidatedOnce, ChangedExportIsCheckedOnImport) {
  HandleSource src;
  hurray_buffer h = src.handle(dense({2, 3}));
  DLManagedTensorVersioned *t;
  ASSERT_OK(hurray_to_dlpack_versioned(&h, &t));
  t->dl_tensor.ndim = 65;
  hurray_buffer out = sentinel_handle();
  EXPECT_STATUS(hurray_from_dlpack_versioned(t, HURRAY_IMPORT_DEFAULT, &out),
                HURRAY_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(LastErrorMentions("ndim"));
  EXPECT_TRUE(same_bytes(out, sentinel_handle()));
  t->dl_tensor.ndim = 2;  // restored: unwraps to the original handle
  ASSERT_OK(hurray_from_dlpack_versioned(t, HURRAY_IMPORT_DEFAULT, &out));
  EXPECT_EQ(out.release_fn, &counting_release);
  EXPECT_EQ(out.user_data, &src.log);
  ASSERT_OK(hurray_buffer_release(&out));
  EXPECT_EQ(src.log.calls.load(), 1);
}

}  // namespace
