// SPDX-License-Identifier: Apache-2.0
// The handle ABI and its helpers: hurray_buffer_release, _validate, _extent
// (src/handle/handle.cc, spec §2-§4, c-ffi §3).
#include <climits>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "hurray_test_support.h"

namespace {

using namespace hurray_test;

// ----- ABI layout (spec §2.1) ------------------------------------------------

static_assert(sizeof(hurray_buffer) == 80, "hurray_buffer is 80 bytes");
static_assert(offsetof(hurray_buffer, version) == 0, "version @0");
static_assert(offsetof(hurray_buffer, reserved) == 4, "reserved @4");
static_assert(offsetof(hurray_buffer, release_fn) == 8, "release_fn @8");
static_assert(offsetof(hurray_buffer, user_data) == 16, "user_data @16");
static_assert(offsetof(hurray_buffer, flags) == 24, "flags @24");
static_assert(offsetof(hurray_buffer, data) == 32, "data @32");
static_assert(offsetof(hurray_buffer, byte_offset) == 40, "byte_offset @40");
static_assert(offsetof(hurray_buffer, device) == 48, "device @48");
static_assert(offsetof(hurray_buffer, dtype) == 56, "dtype @56");
static_assert(offsetof(hurray_buffer, ndim) == 60, "ndim @60");
static_assert(offsetof(hurray_buffer, shape) == 64, "shape @64");
static_assert(offsetof(hurray_buffer, strides) == 72, "strides @72");
static_assert(sizeof(hurray_device) == 8 && offsetof(hurray_device, device_id) == 4, "device");
static_assert(sizeof(hurray_dtype) == 4 && offsetof(hurray_dtype, bits) == 1 &&
                  offsetof(hurray_dtype, lanes) == 2,
              "dtype");
static_assert(sizeof(hurray_extent) == 40, "hurray_extent is 40 bytes");
static_assert(HURRAY_FLAG_READ_ONLY == DLPACK_FLAG_BITMASK_READ_ONLY, "READ_ONLY bit");
static_assert(HURRAY_FLAG_IS_COPIED == DLPACK_FLAG_BITMASK_IS_COPIED, "IS_COPIED bit");
static_assert(HURRAY_FLAG_SUBBYTE_PADDED == DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED,
              "SUBBYTE_PADDED bit");
static_assert(HURRAY_DEVICE_CPU == kDLCPU && HURRAY_DEVICE_CUDA == kDLCUDA &&
                  HURRAY_DEVICE_CUDA_HOST == kDLCUDAHost && HURRAY_DEVICE_ROCM == kDLROCM &&
                  HURRAY_DEVICE_ROCM_HOST == kDLROCMHost &&
                  HURRAY_DEVICE_CUDA_MANAGED == kDLCUDAManaged,
              "device type values are DLPack's");
static_assert(HURRAY_MAX_NDIM == 64, "documented ndim limit");

// ----- hurray_buffer_release ------------------------------------------------

TEST(Release, CallsReleaseOnceWithUserDataAndZeroesTheHandle) {
  HandleSource src;
  hurray_buffer h = src.handle(dense({2, 3}));
  ASSERT_OK(hurray_buffer_release(&h));
  EXPECT_EQ(src.log.calls.load(), 1);
  EXPECT_EQ(src.log.last_arg.load(), &src.log);
  EXPECT_EQ(src.log.last_thread(), std::this_thread::get_id());
  EXPECT_TRUE(is_zeroed(h));
  // Releasing again is releasing an empty handle: nothing is called.
  ASSERT_OK(hurray_buffer_release(&h));
  EXPECT_EQ(src.log.calls.load(), 1);
}

TEST(Release, EmptyHandleIsOkAndCallsNothing) {
  hurray_buffer h;
  std::memset(&h, 0, sizeof h);
  EXPECT_OK(hurray_buffer_release(&h));
  EXPECT_TRUE(is_zeroed(h));

  // An empty handle is one with release_fn NULL, whatever else it says.
  HandleSource src;
  hurray_buffer e = src.handle(dense({4}));
  e.release_fn = nullptr;
  EXPECT_OK(hurray_buffer_release(&e));
  EXPECT_EQ(src.log.calls.load(), 0);
  EXPECT_EQ(e.release_fn, nullptr);
}

TEST(Release, NullHandleIsInvalidArgument) {
  EXPECT_STATUS(hurray_buffer_release(nullptr), HURRAY_ERR_INVALID_ARGUMENT);
}

TEST(Release, UnknownLayoutVersionIsStillReleased) {
  // Frozen fields (spec §2.1): a handle of a future layout is released through
  // release_fn(user_data) without reading anything else.
  HandleSource src;
  hurray_buffer h = src.handle(dense({2}));
  h.version = 77;
  h.ndim = -5;  // garbage in non-frozen fields must not matter
  h.shape = nullptr;
  ASSERT_OK(hurray_buffer_release(&h));
  EXPECT_EQ(src.log.calls.load(), 1);
  EXPECT_EQ(src.log.last_arg.load(), &src.log);
}

TEST(Release, CopiesAreValuesAndOneOfThemIsReleased) {
  HandleSource src;
  hurray_buffer a = src.handle(dense({3}));
  hurray_buffer b;
  std::memcpy(&b, &a, sizeof a);  // moved by value (spec §4, item 5)
  std::memset(&a, 0, sizeof a);
  ASSERT_OK(hurray_buffer_release(&b));
  EXPECT_EQ(src.log.calls.load(), 1);
  EXPECT_EQ(src.log.last_arg.load(), &src.log);
}

TEST(Release, FromAnotherThreadRunsOnThatThread) {
  HandleSource src;
  hurray_buffer h = src.handle(dense({5}));
  std::thread::id releaser;
  int32_t st = -1;
  std::thread t([&] {
    releaser = std::this_thread::get_id();
    st = hurray_buffer_release(&h);
  });
  t.join();
  EXPECT_STATUS(st, HURRAY_OK);
  EXPECT_EQ(src.log.calls.load(), 1);
  EXPECT_EQ(src.log.last_thread(), releaser);
  EXPECT_NE(releaser, std::this_thread::get_id());
  EXPECT_TRUE(is_zeroed(h));
}

// The callback may free the very memory the handle lives in: the library must
// not write the handle after calling it (ASan reports a use after free).
struct SelfOwned {
  hurray_buffer handle;
  int *counter;
};
void free_self(void *user_data) {
  auto *s = static_cast<SelfOwned *>(user_data);
  ++*s->counter;
  std::free(s);
}

TEST(Release, CallbackMayFreeTheMemoryHoldingTheHandle) {
  int calls = 0;
  auto *s = static_cast<SelfOwned *>(std::malloc(sizeof(SelfOwned)));
  ASSERT_NE(s, nullptr);
  std::memset(&s->handle, 0, sizeof s->handle);
  s->handle.version = HURRAY_BUFFER_VERSION;
  s->handle.release_fn = &free_self;
  s->handle.user_data = s;
  s->counter = &calls;
  EXPECT_OK(hurray_buffer_release(&s->handle));
  EXPECT_EQ(calls, 1);
}

// ----- hurray_buffer_validate -------------------------------------------------

TEST(Validate, WellFormedHandlesPassAndNothingIsCalled) {
  HandleSource src;
  for (const Layout &l : {dense({}), dense({2, 3}), dense({0, 3}), dense({1})}) {
    hurray_buffer h = src.handle(l);
    const hurray_buffer before = h;
    EXPECT_OK(hurray_buffer_validate(&h)) << describe(l);
    EXPECT_TRUE(same_bytes(h, before));
  }
  EXPECT_EQ(src.log.calls.load(), 0);
}

TEST(Validate, NullHandle) {
  EXPECT_STATUS(hurray_buffer_validate(nullptr), HURRAY_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(LastErrorMentions("NULL"));
}

TEST(Validate, EmptyHandleIsInvalidArgumentNotAVersionProblem) {
  hurray_buffer h;
  std::memset(&h, 0, sizeof h);
  EXPECT_STATUS(hurray_buffer_validate(&h), HURRAY_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(LastErrorMentions("empty"));
}

TEST(Validate, UnknownLayoutVersion) {
  HandleSource src;
  hurray_buffer h = src.handle(dense({2}));
  h.version = 2;
  EXPECT_STATUS(hurray_buffer_validate(&h), HURRAY_ERR_UNSUPPORTED_VERSION);
  EXPECT_TRUE(LastErrorMentions("version"));
  EXPECT_EQ(src.log.calls.load(), 0);
}

TEST(Validate, HandlesNeedStridesWhenNdimIsPositive) {
  HandleSource src;
  Layout l = dense({2, 3});
  l.has_strides = false;
  hurray_buffer h = src.handle(l);
  EXPECT_STATUS(hurray_buffer_validate(&h), HURRAY_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(LastErrorMentions("strides"));
}

TEST(Validate, ZeroDimHandleMayHaveNullShapeAndStrides) {
  HandleSource src;
  Layout l = dense({});
  l.null_shape = true;
  l.has_strides = false;
  hurray_buffer h = src.handle(l);
  EXPECT_OK(hurray_buffer_validate(&h));
}

// ----- hurray_buffer_extent ---------------------------------------------------

struct ExtentCase {
  const char *name;
  Layout layout;
  int64_t numel, itemsize_bits, lowest, highest;
  int32_t contiguous;
};

Layout with(Layout l, std::vector<int64_t> strides, uint64_t byte_offset = 0, uint64_t flags = 0) {
  l.strides = std::move(strides);
  l.byte_offset = byte_offset;
  l.flags = flags;
  return l;
}

TEST(Extent, SizeFactsOfTypicalLayouts) {
  const hurray_dtype i32 = dt(kDLInt, 32), fp4 = dt(kDLFloat4_e2m1fn, 4),
                     fp6 = dt(kDLFloat6_e3m2fn, 6), u1 = dt(kDLUInt, 1);
  const ExtentCase cases[] = {
      {"0-d f32", dense({}), 1, 32, 0, 4, 1},
      {"row-major 2x3 f32", dense({2, 3}), 6, 32, 0, 24, 1},
      {"fortran 2x3 f32", with(dense({2, 3}), {1, 2}), 6, 32, 0, 24, 0},
      {"gapped rows", with(dense({2, 3}), {8, 1}), 6, 32, 0, 44, 0},
      {"negative stride with offset", with(dense({3}, i32), {-1}, 8), 3, 32, 0, 12, 0},
      {"negative stride, offset past end", with(dense({4}, i32), {-2}, 100), 4, 32, 76, 104, 0},
      {"broadcast stride 0", with(dense({4, 3}), {0, 1}), 12, 32, 0, 12, 0},
      {"size-1 dims take any stride", with(dense({1, 3, 1}), {999, 1, -7}), 3, 32, 0, 12, 1},
      {"byte offset kept", with(dense({2, 2}), {2, 1}, 24), 4, 32, 24, 40, 1},
      {"lanes 4", dense({3}, dt(kDLFloat, 32, 4)), 3, 128, 0, 48, 1},
      {"zero-size", dense({0, 3}), 0, 32, 0, 0, 1},
      {"zero-size with offset", with(dense({3, 0}), {1, 1}, 64), 0, 32, 0, 0, 1},
      {"fp4 packed", dense({3}, fp4), 3, 4, 0, 2, 1},
      {"fp4 padded", with(dense({3}, fp4), {1}, 0, HURRAY_FLAG_SUBBYTE_PADDED), 3, 8, 0, 3, 1},
      {"fp6 packed", dense({4}, fp6), 4, 6, 0, 3, 1},
      {"fp6 padded", with(dense({4}, fp6), {1}, 0, HURRAY_FLAG_SUBBYTE_PADDED), 4, 8, 0, 4, 1},
      {"uint1 packed 9", dense({9}, u1), 9, 1, 0, 2, 1},
      {"fp4 packed reversed", with(dense({3}, fp4), {-1}, 1), 3, 4, 0, 2, 0},
      {"complex128", dense({2}, dt(kDLComplex, 128)), 2, 128, 0, 32, 1},
  };
  for (const ExtentCase &c : cases) {
    SCOPED_TRACE(c.name);
    HandleSource src;
    hurray_buffer h = src.handle(c.layout);
    hurray_extent e;
    ASSERT_OK(hurray_buffer_extent(&h, &e));
    EXPECT_EQ(e.numel, c.numel);
    EXPECT_EQ(e.itemsize_bits, c.itemsize_bits);
    EXPECT_EQ(e.lowest, c.lowest);
    EXPECT_EQ(e.highest, c.highest);
    EXPECT_EQ(e.contiguous, c.contiguous);
    EXPECT_EQ(src.log.calls.load(), 0);
  }
}

TEST(Extent, NullOutIsInvalidArgument) {
  HandleSource src;
  hurray_buffer h = src.handle(dense({2}));
  EXPECT_STATUS(hurray_buffer_extent(&h, nullptr), HURRAY_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(LastErrorMentions("out"));
}

TEST(Extent, FailureLeavesOutUntouched) {
  HandleSource src;
  Layout l = dense({2, 3});
  l.shape[1] = -3;
  hurray_buffer h = src.handle(l);
  hurray_extent e;
  std::memset(&e, 0x5A, sizeof e);
  hurray_extent before = e;
  EXPECT_STATUS(hurray_buffer_extent(&h, &e), HURRAY_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(std::memcmp(&e, &before, sizeof e), 0);
  EXPECT_TRUE(LastErrorMentions("shape[1]"));
  EXPECT_STATUS(hurray_buffer_extent(nullptr, &e), HURRAY_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(std::memcmp(&e, &before, sizeof e), 0);
}

}  // namespace
