// SPDX-License-Identifier: Apache-2.0
// Views: hurray_view (src/api/view.cc, spec §5.1, c-ffi §4).
#include <algorithm>
#include <cstring>
#include <numeric>
#include <random>
#include <thread>
#include <vector>

#include "hurray_test_support.h"

namespace {

using namespace hurray_test;

hurray_view_desc view_desc(hurray_dtype dtype, const std::vector<int64_t> &shape,
                           const std::vector<int64_t> *strides, uint64_t byte_offset,
                           uint64_t flags = 0) {
  hurray_view_desc d;
  std::memset(&d, 0, sizeof d);
  d.byte_offset = byte_offset;
  d.flags = flags;
  d.dtype = dtype;
  d.ndim = static_cast<int32_t>(shape.size());
  d.shape = shape.empty() ? nullptr : shape.data();
  d.strides = strides != nullptr ? strides->data() : nullptr;
  return d;
}

// A refused hurray_view: its status and message, *h (from src) unchanged
// and unreleased, out untouched; then *h is released, exactly once.
void ExpectRefused(HandleSource &src, hurray_buffer *h, const hurray_buffer &before,
                   const hurray_view_desc &desc, int32_t status, const char *mention,
                   const char *also) {
  hurray_buffer out = sentinel_handle();
  EXPECT_STATUS(hurray_view(h, &desc, &out), status);
  EXPECT_TRUE(LastErrorMentions(mention));
  EXPECT_TRUE(LastErrorMentions(also));
  EXPECT_TRUE(same_bytes(*h, before)) << "src unchanged";
  EXPECT_TRUE(same_bytes(out, sentinel_handle())) << "out untouched";
  EXPECT_EQ(src.log.calls.load(), 0);
  ASSERT_OK(hurray_buffer_release(h));
  EXPECT_EQ(src.log.calls.load(), 1);
}

hurray_extent extent_of(const hurray_buffer &h) {
  hurray_extent e;
  EXPECT_OK(hurray_buffer_extent(&h, &e));
  return e;
}

// A 4x8 float32 source: 128 bytes at data, byte_offset 0.
Layout matrix() { return dense({4, 8}); }

TEST(View, DescribesPartOfTheSourceAndReleasesItOnce) {
  HandleSource src;
  hurray_buffer h = src.handle(matrix());
  // Row 2, columns 1..6 step 2: three floats.
  const std::vector<int64_t> shape{3}, strides{2};
  const hurray_view_desc d = view_desc(f32(), shape, &strides, (2 * 8 + 1) * 4);
  hurray_buffer v = sentinel_handle();
  ASSERT_OK(hurray_view(&h, &d, &v));
  EXPECT_TRUE(is_zeroed(h)) << "the source is consumed";
  EXPECT_EQ(v.version, HURRAY_BUFFER_VERSION);
  EXPECT_EQ(v.data, src.bytes) << "the view keeps src's data pointer";
  EXPECT_EQ(v.byte_offset, 68u);
  EXPECT_EQ(v.device.device_type, kDLCPU);
  EXPECT_EQ(v.flags, 0u);
  ExpectDims(v.ndim, v.shape, v.strides, shape, strides);
  EXPECT_NE(v.shape, shape.data()) << "shape is copied";
  EXPECT_NE(v.strides, strides.data()) << "strides are copied";
  const hurray_extent e = extent_of(v);
  EXPECT_EQ(e.numel, 3);
  EXPECT_EQ(e.lowest, 68);
  EXPECT_EQ(e.highest, 68 + 4 * 4 + 4);
  EXPECT_EQ(e.contiguous, 0);
  EXPECT_EQ(src.log.calls.load(), 0);
  ASSERT_OK(hurray_buffer_release(&v));
  EXPECT_EQ(src.log.calls.load(), 1);
  EXPECT_EQ(src.log.last_arg.load(), &src.log);
}

TEST(View, NullStridesMeanCompactRowMajor) {
  HandleSource src;
  hurray_buffer h = src.handle(matrix());
  const std::vector<int64_t> shape{2, 2, 8};
  const hurray_view_desc d = view_desc(f32(), shape, nullptr, 0);
  hurray_buffer v;
  ASSERT_OK(hurray_view(&h, &d, &v));
  ExpectDims(v.ndim, v.shape, v.strides, shape, {16, 8, 1});
  EXPECT_EQ(extent_of(v).contiguous, 1);
  EXPECT_EQ(extent_of(v).highest, 128) << "exactly the whole source";
  ASSERT_OK(hurray_buffer_release(&v));
  EXPECT_EQ(src.log.calls.load(), 1);
}

TEST(View, ZeroDimAndManyDimViews) {
  for (int32_t ndim : {0, 1, 4, 5, 12, HURRAY_MAX_NDIM}) {
    SCOPED_TRACE("ndim " + std::to_string(ndim));
    HandleSource src;
    hurray_buffer h = src.handle(matrix());
    std::vector<int64_t> shape(static_cast<size_t>(ndim), 1);
    if (ndim > 0) shape[0] = 2;
    std::vector<int64_t> strides(static_cast<size_t>(ndim), 7);
    const hurray_view_desc d = view_desc(f32(), shape, ndim > 0 ? &strides : nullptr, 8);
    hurray_buffer v;
    ASSERT_OK(hurray_view(&h, &d, &v));
    if (ndim == 0) {
      EXPECT_EQ(v.shape, nullptr);
      EXPECT_EQ(v.strides, nullptr);
    } else {
      ExpectDims(v.ndim, v.shape, v.strides, shape, strides);
    }
    EXPECT_OK(hurray_buffer_validate(&v));
    ASSERT_OK(hurray_buffer_release(&v));
    EXPECT_EQ(src.log.calls.load(), 1);
  }
}

TEST(View, NegativeStridesFromTheEndOfTheSource) {
  HandleSource src;
  hurray_buffer h = src.handle(matrix());
  // Whole matrix reversed in both dimensions: element (0,0) is the last one.
  const std::vector<int64_t> shape{4, 8}, strides{-8, -1};
  hurray_view_desc d = view_desc(f32(), shape, &strides, 31 * 4);
  hurray_buffer v;
  ASSERT_OK(hurray_view(&h, &d, &v));
  const hurray_extent e = extent_of(v);
  EXPECT_EQ(e.lowest, 0);
  EXPECT_EQ(e.highest, 128);
  ASSERT_OK(hurray_buffer_release(&v));
  // One element further reaches below the source.
  hurray_buffer h2 = src.handle(matrix());
  d.byte_offset = 30 * 4;
  hurray_buffer out = sentinel_handle();
  EXPECT_STATUS(hurray_view(&h2, &d, &out), HURRAY_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(LastErrorMentions("[-4, 124)"));
  EXPECT_TRUE(LastErrorMentions("[0, 128)"));
  ASSERT_OK(hurray_buffer_release(&h2));
  EXPECT_EQ(src.log.calls.load(), 2);
}

TEST(View, BoundsFollowTheSourceExtentIncludingItsOffsetAndNegativeStrides) {
  // A source with negative strides and a byte_offset: it covers [0, 48)
  // relative to data (3x4 float32 reversed, element (0,0) at byte 44).
  HandleSource src;
  Layout l;
  l.shape = {3, 4};
  l.strides = {-4, -1};
  l.byte_offset = 44;
  hurray_buffer h = src.handle(l);
  ASSERT_EQ(extent_of(h).lowest, 0);
  ASSERT_EQ(extent_of(h).highest, 48);
  const std::vector<int64_t> shape{12};
  const std::vector<int64_t> strides{1};
  hurray_view_desc d = view_desc(f32(), shape, &strides, 0);
  hurray_buffer v;
  ASSERT_OK(hurray_view(&h, &d, &v)) << "the whole block in memory order";
  ASSERT_OK(hurray_buffer_release(&v));
  EXPECT_EQ(src.log.calls.load(), 1);
}

TEST(View, OutOfBoundsViewsAreRefusedAndConsumeNothing) {
  struct Case {
    const char *name;
    std::vector<int64_t> shape, strides;
    uint64_t byte_offset;
    hurray_dtype dtype;
    const char *mention;
  };
  const std::vector<Case> cases = {
      {"one float past the end", {33}, {1}, 0, f32(), "[0, 132)"},
      {"offset past the end", {1}, {1}, 128, f32(), "[128, 132)"},
      {"last float straddles the end", {1}, {1}, 126, f32(), "[126, 130)"},
      {"stride too large", {4}, {40}, 0, f32(), "[0, 484)"},
      {"float64 over the last 4 bytes", {1}, {1}, 124, dt(kDLFloat, 64), "[124, 132)"},
      {"lanes widen past the end", {8}, {1}, 0, dt(kDLFloat, 32, 8), "[0, 256)"},
      {"int4 packed one nibble past", {257}, {1}, 0, dt(kDLInt, 4), "[0, 129)"},
  };
  for (const Case &c : cases) {
    SCOPED_TRACE(c.name);
    HandleSource src;
    hurray_buffer h = src.handle(matrix());
    const hurray_buffer before = h;
    const hurray_view_desc d = view_desc(c.dtype, c.shape, &c.strides, c.byte_offset);
    ExpectRefused(src, &h, before, d, HURRAY_ERR_INVALID_ARGUMENT, c.mention,
                  "outside the bytes src covers [0, 128)");
  }
}

TEST(View, SubByteTypesUseTheLibraryElementSize) {
  // 128 bytes hold 256 packed int4 (exactly), 128 padded ones.
  const hurray_dtype i4 = dt(kDLInt, 4);
  const std::vector<int64_t> s256{256}, s129{129}, s128{128};
  {
    HandleSource src;
    hurray_buffer h = src.handle(matrix());
    const hurray_view_desc d = view_desc(i4, s256, nullptr, 0);
    hurray_buffer v;
    ASSERT_OK(hurray_view(&h, &d, &v));
    EXPECT_EQ(extent_of(v).highest, 128);
    EXPECT_EQ(extent_of(v).itemsize_bits, 4);
    ASSERT_OK(hurray_buffer_release(&v));
  }
  {
    HandleSource src;
    hurray_buffer h = src.handle(matrix());
    const hurray_view_desc d = view_desc(i4, s129, nullptr, 0, HURRAY_FLAG_SUBBYTE_PADDED);
    hurray_buffer v = sentinel_handle();
    EXPECT_STATUS(hurray_view(&h, &d, &v), HURRAY_ERR_INVALID_ARGUMENT)
        << "129 padded int4 take 129 bytes";
    const hurray_view_desc ok = view_desc(i4, s128, nullptr, 0, HURRAY_FLAG_SUBBYTE_PADDED);
    ASSERT_OK(hurray_view(&h, &ok, &v));
    EXPECT_EQ(v.flags, HURRAY_FLAG_SUBBYTE_PADDED);
    EXPECT_EQ(extent_of(v).itemsize_bits, 8);
    ASSERT_OK(hurray_buffer_release(&v));
    EXPECT_EQ(src.log.calls.load(), 1);
  }
  {
    // A padded source keeps its flag: a view cannot drop it.
    HandleSource src;
    Layout l = dense({16}, i4);
    l.flags = HURRAY_FLAG_SUBBYTE_PADDED;
    hurray_buffer h = src.handle(l);
    const std::vector<int64_t> s16{16};
    const hurray_view_desc d = view_desc(i4, s16, nullptr, 0);
    hurray_buffer v;
    ASSERT_OK(hurray_view(&h, &d, &v));
    EXPECT_EQ(v.flags, HURRAY_FLAG_SUBBYTE_PADDED);
    EXPECT_EQ(extent_of(v).highest, 16);
    ASSERT_OK(hurray_buffer_release(&v));
  }
  {
    // Odd nibble offsets: a packed uint4 view starting at element 1 of a
    // byte pair covers bytes [0, 2) (addresses round down to a byte).
    HandleSource src;
    hurray_buffer h = src.handle(dense({4}, dt(kDLUInt, 4)));  // 2 bytes
    const std::vector<int64_t> s3{3}, st{1};
    const hurray_view_desc d = view_desc(dt(kDLUInt, 4), s3, &st, 0);
    hurray_buffer v;
    ASSERT_OK(hurray_view(&h, &d, &v));
    EXPECT_EQ(extent_of(v).highest, 2);
    ASSERT_OK(hurray_buffer_release(&v));
  }
}

TEST(View, FlagsOnlyAdd) {
  HandleSource src;
  Layout l = matrix();
  l.flags = HURRAY_FLAG_READ_ONLY | HURRAY_FLAG_IS_COPIED | (uint64_t{1} << 40);
  hurray_buffer h = src.handle(l);
  const std::vector<int64_t> shape{8};
  const hurray_view_desc d = view_desc(f32(), shape, nullptr, 32);
  hurray_buffer v;
  ASSERT_OK(hurray_view(&h, &d, &v));
  EXPECT_EQ(v.flags, l.flags) << "read-only, copied and reserved bits propagate";
  ASSERT_OK(hurray_buffer_release(&v));

  hurray_buffer w = src.handle(matrix());
  const hurray_view_desc ro = view_desc(f32(), shape, nullptr, 0, HURRAY_FLAG_READ_ONLY);
  ASSERT_OK(hurray_view(&w, &ro, &v));
  EXPECT_EQ(v.flags, HURRAY_FLAG_READ_ONLY) << "a view may add READ_ONLY";
  ASSERT_OK(hurray_buffer_release(&v));
  EXPECT_EQ(src.log.calls.load(), 2);
}

TEST(View, BadDescriptionsGetTheirStatusAndConsumeNothing) {
  const std::vector<int64_t> s2{2}, st1{1}, neg{-1};
  const std::vector<int64_t> big{int64_t{1} << 32, int64_t{1} << 32};
  const std::vector<int64_t> huge_stride{INT64_MAX};
  std::vector<int64_t> many(HURRAY_MAX_NDIM + 1, 1);
  struct Case {
    const char *name;
    hurray_view_desc desc;
    int32_t status;
    const char *mention;
  };
  auto with = [&](hurray_view_desc d, void (*edit)(hurray_view_desc &)) {
    edit(d);
    return d;
  };
  const hurray_view_desc base = view_desc(f32(), s2, &st1, 0);
  const std::vector<Case> cases = {
      {"dtype code 18", with(base, [](hurray_view_desc &d) { d.dtype.code = 18; }),
       HURRAY_ERR_UNSUPPORTED_DTYPE, "desc.dtype.code is 18"},
      {"bool 1 bit",
       with(base,
            [](hurray_view_desc &d) {
              d.dtype = hurray_dtype{kDLBool, 1, 1};
            }),
       HURRAY_ERR_UNSUPPORTED_DTYPE, "desc.dtype.bits is 1"},
      {"lanes 0", with(base, [](hurray_view_desc &d) { d.dtype.lanes = 0; }),
       HURRAY_ERR_UNSUPPORTED_DTYPE, "desc.dtype.lanes is 0"},
      {"ndim -1", with(base, [](hurray_view_desc &d) { d.ndim = -1; }), HURRAY_ERR_INVALID_ARGUMENT,
       "desc.ndim is -1"},
      {"ndim 65", view_desc(f32(), many, nullptr, 0), HURRAY_ERR_INVALID_ARGUMENT,
       "desc.ndim is 65"},
      {"NULL shape", with(base, [](hurray_view_desc &d) { d.shape = nullptr; }),
       HURRAY_ERR_INVALID_ARGUMENT, "desc.shape is NULL"},
      {"negative extent", view_desc(f32(), neg, &st1, 0), HURRAY_ERR_INVALID_ARGUMENT,
       "desc.shape[0] is -1"},
      {"element count overflow", view_desc(f32(), big, nullptr, 0), HURRAY_ERR_OVERFLOW,
       "element count"},
      {"byte extent overflow", view_desc(f32(), s2, &huge_stride, 0), HURRAY_ERR_OVERFLOW,
       "desc: the byte extent"},
      {"byte_offset 2^63", view_desc(f32(), s2, &st1, uint64_t{1} << 63), HURRAY_ERR_OVERFLOW,
       "desc.byte_offset"},
      {"IS_COPIED flag", view_desc(f32(), s2, &st1, 0, HURRAY_FLAG_IS_COPIED),
       HURRAY_ERR_INVALID_ARGUMENT, "desc.flags 0x2"},
      {"reserved flag", view_desc(f32(), s2, &st1, 0, uint64_t{1} << 9),
       HURRAY_ERR_INVALID_ARGUMENT, "desc.flags 0x200"},
      {"device change",
       with(base,
            [](hurray_view_desc &d) {
              d.device = hurray_device{kDLCUDA, 0};
            }),
       HURRAY_ERR_INVALID_ARGUMENT, "a view stays on its source's device"},
      {"device id change",
       with(base,
            [](hurray_view_desc &d) {
              d.device = hurray_device{kDLCPU, 1};
            }),
       HURRAY_ERR_INVALID_ARGUMENT, "desc.device is kDLCPU (1) id 1"},
  };
  for (const Case &c : cases) {
    SCOPED_TRACE(c.name);
    HandleSource src;
    hurray_buffer h = src.handle(matrix());
    const hurray_buffer before = h;
    ExpectRefused(src, &h, before, c.desc, c.status, c.mention, c.mention);
  }
}

TEST(View, ExplicitSameDeviceIsAccepted) {
  HandleSource src;
  Layout l = matrix();
  l.device_type = kDLCUDA;
  l.device_id = 3;
  hurray_buffer h = src.handle(l);
  const std::vector<int64_t> shape{4};
  hurray_view_desc d = view_desc(f32(), shape, nullptr, 0);
  d.device = hurray_device{kDLCUDA, 3};
  hurray_buffer v;
  ASSERT_OK(hurray_view(&h, &d, &v));
  EXPECT_EQ(v.device.device_type, kDLCUDA);
  EXPECT_EQ(v.device.device_id, 3);
  ASSERT_OK(hurray_buffer_release(&v));
  EXPECT_EQ(src.log.calls.load(), 1);
}

TEST(View, BadSourcesAndNullArguments) {
  const std::vector<int64_t> shape{2};
  const hurray_view_desc d = view_desc(f32(), shape, nullptr, 0);
  hurray_buffer out = sentinel_handle();
  HandleSource src;
  hurray_buffer h = src.handle(matrix());
  const hurray_buffer before = h;
  EXPECT_STATUS(hurray_view(&h, nullptr, &out), HURRAY_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(LastErrorMentions("desc is NULL"));
  EXPECT_STATUS(hurray_view(&h, &d, nullptr), HURRAY_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(LastErrorMentions("out is NULL"));
  EXPECT_STATUS(hurray_view(nullptr, &d, &out), HURRAY_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(LastErrorMentions("src is NULL"));
  hurray_buffer empty;
  std::memset(&empty, 0, sizeof empty);
  EXPECT_STATUS(hurray_view(&empty, &d, &out), HURRAY_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(LastErrorMentions("src is empty"));
  hurray_buffer bad = h;
  bad.version = 2;
  EXPECT_STATUS(hurray_view(&bad, &d, &out), HURRAY_ERR_UNSUPPORTED_VERSION);
  bad = h;
  bad.ndim = -1;
  EXPECT_STATUS(hurray_view(&bad, &d, &out), HURRAY_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(LastErrorMentions("src.ndim is -1"));
  EXPECT_TRUE(same_bytes(out, sentinel_handle()));
  EXPECT_TRUE(same_bytes(h, before));
  EXPECT_EQ(src.log.calls.load(), 0);
  ASSERT_OK(hurray_buffer_release(&h));
}

TEST(View, ZeroElementViewsAndSources) {
  HandleSource src;
  // A source without elements and NULL data: only views without elements.
  Layout l = dense({0, 3});
  l.null_data = true;
  hurray_buffer h = src.handle(l);
  const std::vector<int64_t> one{1}, none{0, 5};
  hurray_view_desc d = view_desc(f32(), one, nullptr, 0);
  hurray_buffer out = sentinel_handle();
  EXPECT_STATUS(hurray_view(&h, &d, &out), HURRAY_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(LastErrorMentions("src has none"));
  d = view_desc(f32(), none, nullptr, 4096);
  ASSERT_OK(hurray_view(&h, &d, &out)) << "a view without elements touches nothing";
  EXPECT_EQ(out.data, nullptr);
  EXPECT_EQ(extent_of(out).numel, 0);
  ASSERT_OK(hurray_buffer_release(&out));
  EXPECT_EQ(src.log.calls.load(), 1);
}

TEST(View, OutMayBeTheSource) {
  HandleSource src;
  hurray_buffer h = src.handle(matrix());
  const std::vector<int64_t> shape{2, 2};
  const std::vector<int64_t> strides{8, 1};
  const hurray_view_desc d = view_desc(f32(), shape, &strides, 4);
  ASSERT_OK(hurray_view(&h, &d, &h));
  EXPECT_EQ(h.byte_offset, 4u);
  ExpectDims(h.ndim, h.shape, h.strides, shape, strides);
  ASSERT_OK(hurray_buffer_release(&h));
  EXPECT_EQ(src.log.calls.load(), 1);
}

// N views of one buffer through hurray_share, and views of views, released
// in every order: the source once, after the last.
TEST(View, ManyViewsOfOneBufferReleaseOnceInEveryOrder) {
  constexpr int kN = 4;
  std::vector<int> order(kN);
  std::iota(order.begin(), order.end(), 0);
  int orders = 0;
  do {
    SCOPED_TRACE("order " + std::to_string(orders));
    HandleSource src;
    hurray_buffer h = src.handle(matrix());
    hurray_buffer parts[kN];
    ASSERT_OK(hurray_share(&h, kN, parts));
    hurray_buffer views[kN];
    const std::vector<int64_t> row{8};
    for (int i = 0; i < kN; ++i) {
      const hurray_view_desc d = view_desc(f32(), row, nullptr, static_cast<uint64_t>(i) * 32);
      ASSERT_OK(hurray_view(&parts[i], &d, &views[i]));
      EXPECT_EQ(views[i].data, src.bytes);
      EXPECT_EQ(extent_of(views[i]).lowest, i * 32);
    }
    // A view of the last view: its first 4 floats, read-only.
    const std::vector<int64_t> four{4};
    const hurray_view_desc sub =
        view_desc(f32(), four, nullptr, 3 * 32 + 16, HURRAY_FLAG_READ_ONLY);
    ASSERT_OK(hurray_view(&views[3], &sub, &views[3]));
    EXPECT_EQ(views[3].flags, HURRAY_FLAG_READ_ONLY);
    for (int k = 0; k < kN; ++k) {
      EXPECT_EQ(src.log.calls.load(), 0);
      ASSERT_OK(hurray_buffer_release(&views[order[static_cast<size_t>(k)]]));
    }
    EXPECT_EQ(src.log.calls.load(), 1);
    ++orders;
  } while (std::next_permutation(order.begin(), order.end()));
  EXPECT_EQ(orders, 24);
}

TEST(View, AViewOfAViewMustStayWithinTheFirstView) {
  HandleSource src;
  hurray_buffer h = src.handle(matrix());
  const std::vector<int64_t> row{8};
  const hurray_view_desc d = view_desc(f32(), row, nullptr, 32);
  hurray_buffer v;
  ASSERT_OK(hurray_view(&h, &d, &v));
  const hurray_buffer before = v;
  // Row 2 is inside the source but outside the view of row 1.
  const hurray_view_desc outside = view_desc(f32(), row, nullptr, 64);
  hurray_buffer out = sentinel_handle();
  EXPECT_STATUS(hurray_view(&v, &outside, &out), HURRAY_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(LastErrorMentions("outside the bytes src covers [32, 64)"));
  EXPECT_TRUE(same_bytes(v, before));
  ASSERT_OK(hurray_buffer_release(&v));
  EXPECT_EQ(src.log.calls.load(), 1);
}

TEST(View, SharingAndExportingAViewReleaseOnce) {
  HandleSource src;
  hurray_buffer h = src.handle(matrix());
  const std::vector<int64_t> shape{2, 4};
  const std::vector<int64_t> strides{8, 2};
  const hurray_view_desc d = view_desc(f32(), shape, &strides, 4);
  hurray_buffer v;
  ASSERT_OK(hurray_view(&h, &d, &v));
  hurray_buffer shared[3];
  ASSERT_OK(hurray_share(&v, 3, shared));
  for (const hurray_buffer &s : shared) {
    EXPECT_EQ(s.byte_offset, 4u);
    ExpectDims(s.ndim, s.shape, s.strides, shape, strides);
  }
  DLManagedTensorVersioned *t = nullptr;
  ASSERT_OK(hurray_to_dlpack_versioned(&shared[0], &t));
  EXPECT_EQ(t->dl_tensor.data, src.bytes);
  EXPECT_EQ(t->dl_tensor.byte_offset, 4u);
  EXPECT_EQ(t->dl_tensor.strides[1], 2);
  // Back again: the export unwraps to the view's handle.
  hurray_buffer back;
  ASSERT_OK(hurray_from_dlpack_versioned(t, HURRAY_IMPORT_DEFAULT, &back));
  EXPECT_EQ(back.release_fn, shared[1].release_fn);
  EXPECT_EQ(back.user_data, shared[1].user_data);
  ASSERT_OK(hurray_buffer_release(&shared[1]));
  ASSERT_OK(hurray_buffer_release(&back));
  EXPECT_EQ(src.log.calls.load(), 0);
  ASSERT_OK(hurray_buffer_release(&shared[2]));
  EXPECT_EQ(src.log.calls.load(), 1);
}

TEST(View, ViewsOfAllocatedAndImportedMemory) {
  // hurray_alloc: a 16x16 uint8 block viewed as 8 rows of 8 uint16.
  hurray_buffer a;
  const int64_t shape[2] = {16, 16};
  ASSERT_OK(hurray_alloc(hurray_device{HURRAY_DEVICE_CPU, 0}, dt(kDLUInt, 8), 2, shape, 0, &a));
  void *data = a.data;
  const std::vector<int64_t> vs{8, 8};
  const hurray_view_desc d = view_desc(dt(kDLUInt, 16), vs, nullptr, 128);
  hurray_buffer v;
  ASSERT_OK(hurray_view(&a, &d, &v));
  EXPECT_EQ(v.data, data);
  static_cast<uint16_t *>(v.data)[64 + 63] = 7;  // the last element, in bounds
  ASSERT_OK(hurray_buffer_release(&v));
  // An imported tensor: released with its deleter, once.
  DeleterLog log;
  DLManagedTensorVersioned *t = make_versioned(log, dense({4, 4}));
  hurray_buffer h;
  ASSERT_OK(hurray_from_dlpack_versioned(t, HURRAY_IMPORT_DEFAULT, &h));
  const std::vector<int64_t> col{4};
  const std::vector<int64_t> cs{4};
  const hurray_view_desc cd = view_desc(f32(), col, &cs, 8);
  ASSERT_OK(hurray_view(&h, &cd, &v));
  EXPECT_EQ(log.calls.load(), 0);
  ASSERT_OK(hurray_buffer_release(&v));
  EXPECT_EQ(log.calls.load(), 1);
  EXPECT_EQ(log.last_arg.load(), t);
}

TEST(View, ViewsReleasedFromManyThreadsReleaseOnce) {
  constexpr int kViews = 64, kRounds = 20;
  std::mt19937 rng(28);
  for (int round = 0; round < kRounds; ++round) {
    HandleSource src;
    hurray_buffer h = src.handle(matrix());
    std::vector<hurray_buffer> parts(kViews), views(kViews);
    ASSERT_OK(hurray_share(&h, kViews, parts.data()));
    for (int i = 0; i < kViews; ++i) {
      const std::vector<int64_t> one{1};
      const hurray_view_desc d = view_desc(f32(), one, nullptr, static_cast<uint64_t>(i % 32) * 4);
      ASSERT_OK(hurray_view(&parts[static_cast<size_t>(i)], &d, &views[static_cast<size_t>(i)]));
    }
    std::shuffle(views.begin(), views.end(), rng);
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t) {
      threads.emplace_back([&, t] {
        for (int i = t; i < kViews; i += 4)
          (void)hurray_buffer_release(&views[static_cast<size_t>(i)]);
      });
    }
    for (std::thread &t : threads) t.join();
    EXPECT_EQ(src.log.calls.load(), 1);
  }
}

}  // namespace
