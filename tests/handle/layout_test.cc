// SPDX-License-Identifier: Apache-2.0
// The layout rules of spec §3: dtype and device tables, element count and the
// overflow-checked byte extent (src/handle/layout.cc), exercised through
// hurray_buffer_validate / hurray_buffer_extent.
#include <climits>
#include <cstdint>
#include <set>
#include <string>
#include <utility>

#include "hurray_test_support.h"

namespace {

using namespace hurray_test;

void *const kFakeAddress = reinterpret_cast<void *>(uintptr_t{0x10000});

// Validates `l` as a handle, returning the status (message left in place).
int32_t validate(const Layout &l) {
  HandleSource src;
  hurray_buffer h = src.handle(l);
  if (!l.null_data) h.data = kFakeAddress;  // layouts larger than the storage
  const int32_t st = hurray_buffer_validate(&h);
  EXPECT_EQ(src.log.calls.load(), 0) << "validate must not release";
  return st;
}

int32_t extent(const Layout &l, hurray_extent *e) {
  HandleSource src;
  hurray_buffer h = src.handle(l);
  if (!l.null_data) h.data = kFakeAddress;
  return hurray_buffer_extent(&h, e);
}

Layout strided(std::vector<int64_t> shape, std::vector<int64_t> strides, hurray_dtype dtype = f32(),
               uint64_t byte_offset = 0) {
  Layout l;
  l.shape = std::move(shape);
  l.strides = std::move(strides);
  l.dtype = dtype;
  l.byte_offset = byte_offset;
  return l;
}

// ----- dtypes ------------------------------------------------------------------

// The table of spec §3 item 3.
bool documented_valid(uint8_t code, uint8_t bits) {
  switch (code) {
    case kDLInt:
    case kDLUInt:
      return bits == 1 || bits == 2 || bits == 4 || bits == 8 || bits == 16 || bits == 32 ||
             bits == 64;
    case kDLFloat: return bits == 16 || bits == 32 || bits == 64;
    case kDLOpaqueHandle: return bits != 0 && bits % 8 == 0;
    case kDLBfloat: return bits == 16;
    case kDLComplex: return bits == 32 || bits == 64 || bits == 128;
    case kDLBool: return bits == 8;
    case 7:
    case 8:
    case 9:
    case 10:
    case 11:
    case 12:
    case 13:
    case 14: return bits == 8;
    case 15:
    case 16: return bits == 6;
    case 17: return bits == 4;
    default: return false;
  }
}

TEST(Dtype, EveryCodeAndBitWidthMatchesTheDocumentedTable) {
  for (int code = 0; code <= 17; ++code) {
    for (int bits = 0; bits <= 255; ++bits) {
      Layout l = dense({3}, dt(static_cast<uint8_t>(code), static_cast<uint8_t>(bits)));
      const bool ok = documented_valid(static_cast<uint8_t>(code), static_cast<uint8_t>(bits));
      const int32_t st = validate(l);
      if (ok) {
        EXPECT_STATUS(st, HURRAY_OK) << "code " << code << " bits " << bits;
      } else {
        EXPECT_STATUS(st, HURRAY_ERR_UNSUPPORTED_DTYPE) << "code " << code << " bits " << bits;
        EXPECT_TRUE(LastErrorMentions("dtype.bits")) << "code " << code << " bits " << bits;
      }
    }
  }
}

TEST(Dtype, SpecificMismatchesTheIssueNames) {
  const std::pair<hurray_dtype, const char *> bad[] = {
      {dt(kDLBool, 1), "bool 1"},           {dt(kDLBool, 16), "bool 16"},
      {dt(kDLFloat8_e4m3fn, 16), "fp8 16"}, {dt(kDLFloat8_e5m2, 4), "fp8 4"},
      {dt(kDLFloat8_e8m0fnu, 6), "fp8 6"},  {dt(kDLFloat6_e2m3fn, 8), "fp6 8"},
      {dt(kDLFloat6_e3m2fn, 4), "fp6 4"},   {dt(kDLFloat4_e2m1fn, 8), "fp4 8"},
      {dt(kDLFloat4_e2m1fn, 6), "fp4 6"},   {dt(kDLBfloat, 32), "bfloat 32"},
      {dt(kDLBfloat, 8), "bfloat 8"},       {dt(kDLComplex, 16), "complex 16"},
  };
  for (const auto &b : bad) {
    EXPECT_STATUS(validate(dense({2}, b.first)), HURRAY_ERR_UNSUPPORTED_DTYPE) << b.second;
    EXPECT_TRUE(LastErrorMentions("bits")) << b.second;
  }
}

TEST(Dtype, CodesBeyondDLPack13AreRejected) {
  for (int code = 18; code <= 255; ++code) {
    EXPECT_STATUS(validate(dense({2}, dt(static_cast<uint8_t>(code), 8))),
                  HURRAY_ERR_UNSUPPORTED_DTYPE)
        << "code " << code;
    EXPECT_TRUE(LastErrorMentions("dtype.code")) << "code " << code;
  }
}

TEST(Dtype, ZeroLanesAreRejected) {
  EXPECT_STATUS(validate(dense({2}, dt(kDLFloat, 32, 0))), HURRAY_ERR_UNSUPPORTED_DTYPE);
  EXPECT_TRUE(LastErrorMentions("lanes"));
  EXPECT_OK(validate(dense({2}, dt(kDLFloat, 32, 65535))));
}

TEST(Dtype, SubbytePaddedFlagChangesTheItemSize) {
  for (const DtypeCase &c : all_dlpack13_dtypes()) {
    SCOPED_TRACE(c.name);
    Layout l = dense({5}, c.dtype);
    hurray_extent packed, padded;
    ASSERT_OK(extent(l, &packed));
    l.flags = HURRAY_FLAG_SUBBYTE_PADDED;
    ASSERT_OK(extent(l, &padded));
    EXPECT_EQ(packed.itemsize_bits, int64_t{c.dtype.bits});
    EXPECT_EQ(padded.itemsize_bits, (int64_t{c.dtype.bits} + 7) / 8 * 8);
    EXPECT_EQ(packed.highest, (5 * int64_t{c.dtype.bits} + 7) / 8);
    EXPECT_EQ(padded.highest, 5 * ((int64_t{c.dtype.bits} + 7) / 8));
  }
}

// ----- devices -------------------------------------------------------------------

TEST(Device, EveryDLPackDeviceTypeIsAccepted) {
  for (int32_t type : {1, 2, 3, 4, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18}) {
    Layout l = dense({2});
    l.device_type = type;
    EXPECT_OK(validate(l)) << "device type " << type;
  }
}

TEST(Device, UnknownAndRetiredDeviceTypesAreRejected) {
  for (int32_t type : {0, 5, 6, 19, 20, 100, -1, INT32_MIN, INT32_MAX}) {
    Layout l = dense({2});
    l.device_type = type;
    EXPECT_STATUS(validate(l), HURRAY_ERR_UNSUPPORTED_DEVICE) << "device type " << type;
    EXPECT_TRUE(LastErrorMentions("device_type")) << "device type " << type;
  }
}

TEST(Device, NegativeDeviceIdIsRejectedLargeOnesAreKept) {
  Layout l = dense({2});
  l.device_type = kDLCUDA;
  l.device_id = -1;
  EXPECT_STATUS(validate(l), HURRAY_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(LastErrorMentions("device_id"));
  l.device_id = INT32_MIN;
  EXPECT_STATUS(validate(l), HURRAY_ERR_INVALID_ARGUMENT);
  l.device_id = INT32_MAX;
  EXPECT_OK(validate(l));
}

// ----- ndim, shape, strides, data -------------------------------------------------

TEST(Shape, NdimRange) {
  Layout max = dense(std::vector<int64_t>(HURRAY_MAX_NDIM, 1));
  EXPECT_OK(validate(max));
  for (int32_t ndim : {-1, INT32_MIN, HURRAY_MAX_NDIM + 1, INT32_MAX}) {
    HandleSource src;
    hurray_buffer h = src.handle(dense({1}));
    h.ndim = ndim;
    EXPECT_STATUS(hurray_buffer_validate(&h), HURRAY_ERR_INVALID_ARGUMENT) << "ndim " << ndim;
    EXPECT_TRUE(LastErrorMentions("ndim")) << "ndim " << ndim;
  }
}

TEST(Shape, NullShapeWithDimensions) {
  Layout l = dense({2, 2});
  l.null_shape = true;
  EXPECT_STATUS(validate(l), HURRAY_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(LastErrorMentions("shape"));
}

TEST(Shape, NegativeExtentIsNamedWithItsIndex) {
  Layout l = strided({2, 4, -3}, {12, 3, 1});
  EXPECT_STATUS(validate(l), HURRAY_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(LastErrorMentions("shape[2]"));
  // Even when another extent is 0 (the tensor would otherwise be empty).
  Layout z = strided({0, -1}, {1, 1});
  EXPECT_STATUS(validate(z), HURRAY_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(LastErrorMentions("shape[1]"));
}

TEST(Shape, NullDataNeedsZeroElements) {
  Layout l = dense({2, 3});
  l.null_data = true;
  EXPECT_STATUS(validate(l), HURRAY_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(LastErrorMentions("data"));
  Layout scalar = dense({});
  scalar.null_data = true;  // a 0-d tensor has one element
  EXPECT_STATUS(validate(scalar), HURRAY_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(LastErrorMentions("data"));
  Layout empty = dense({2, 0});
  empty.null_data = true;
  EXPECT_OK(validate(empty));
}

// ----- element count and byte extent (spec §3 items 5-6, §3.3) ---------------------

TEST(Overflow, ElementCount) {
  Layout l = strided({int64_t{1} << 32, int64_t{1} << 32}, {0, 0}, dt(kDLInt, 8));
  EXPECT_STATUS(validate(l), HURRAY_ERR_OVERFLOW);
  EXPECT_TRUE(LastErrorMentions("element count"));
  Layout m = strided({INT64_MAX, 2}, {0, 0}, dt(kDLInt, 8));
  EXPECT_STATUS(validate(m), HURRAY_ERR_OVERFLOW);
}

TEST(Overflow, HugeExtentsWithAZeroAreEmptyNotOverflow) {
  Layout l = strided({INT64_MAX, INT64_MAX, 0}, {INT64_MAX, INT64_MIN, 1}, dt(kDLInt, 8));
  l.null_data = true;
  hurray_extent e;
  ASSERT_OK(extent(l, &e));
  EXPECT_EQ(e.numel, 0);
  EXPECT_EQ(e.lowest, 0);
  EXPECT_EQ(e.highest, 0);
}

TEST(Overflow, StrideTimesExtent) {
  EXPECT_STATUS(validate(strided({3}, {INT64_MAX / 2 + 1}, dt(kDLInt, 8))), HURRAY_ERR_OVERFLOW);
  EXPECT_TRUE(LastErrorMentions("strides[0]"));
  // Negative strides overflow too.
  EXPECT_STATUS(validate(strided({3}, {INT64_MIN / 2 - 1}, dt(kDLInt, 8))), HURRAY_ERR_OVERFLOW);
  EXPECT_STATUS(validate(strided({2, 3}, {1, INT64_MIN}, dt(kDLInt, 8))), HURRAY_ERR_OVERFLOW);
}

TEST(Overflow, SumOverDimensions) {
  // Each span fits, their sum does not (positive and negative).
  const int64_t big = INT64_MAX / 2 + 1;
  EXPECT_STATUS(validate(strided({2, 2}, {big, big}, dt(kDLInt, 8))), HURRAY_ERR_OVERFLOW);
  EXPECT_STATUS(validate(strided({2, 2}, {-big, -big}, dt(kDLInt, 8))), HURRAY_ERR_OVERFLOW);
  // Opposite signs do not add up: the largest spans 8-bit elements allow.
  const int64_t b = INT64_MAX / 8 - 1;
  hurray_extent e;
  EXPECT_OK(extent(strided({2, 2}, {b, -b}, dt(kDLBool, 8), uint64_t(b)), &e));
  EXPECT_EQ(e.lowest, 0);
  EXPECT_EQ(e.highest, 2 * b + 1);
  // The same spans with one sign overflow the extent in bits.
  EXPECT_STATUS(validate(strided({2, 2}, {b, b}, dt(kDLBool, 8))), HURRAY_ERR_OVERFLOW);
}

TEST(Overflow, ElementWidthInBits) {
  // spec §3.3 computes in bits: (hi + 1) * E must fit in int64.
  const int64_t limit32 = INT64_MAX / 32;  // elements of 32 bits that still fit
  hurray_extent e;
  ASSERT_OK(extent(strided({limit32}, {1}), &e));
  EXPECT_EQ(e.highest, limit32 * 4);
  EXPECT_STATUS(validate(strided({limit32 + 1}, {1})), HURRAY_ERR_OVERFLOW);
  // The same through a wide vector type.
  EXPECT_STATUS(validate(strided({int64_t{1} << 48}, {1}, dt(kDLFloat, 64, 65535))),
                HURRAY_ERR_OVERFLOW);
  // Negative direction: lo * E.
  EXPECT_STATUS(validate(strided({2}, {-(limit32 + 2)})), HURRAY_ERR_OVERFLOW);
  ASSERT_OK(extent(strided({2}, {-limit32}, f32(), uint64_t(limit32 * 4)), &e));
  EXPECT_EQ(e.lowest, 0);
  EXPECT_EQ(e.highest, limit32 * 4 + 4);
}

TEST(Overflow, ByteOffset) {
  Layout l = dense({2}, dt(kDLInt, 8));
  l.byte_offset = uint64_t{1} << 63;  // > INT64_MAX
  EXPECT_STATUS(validate(l), HURRAY_ERR_OVERFLOW);
  EXPECT_TRUE(LastErrorMentions("byte_offset"));
  l.byte_offset = UINT64_MAX;
  EXPECT_STATUS(validate(l), HURRAY_ERR_OVERFLOW);
  // Even without elements a byte_offset beyond INT64_MAX is not a valid value.
  Layout z = dense({0}, dt(kDLInt, 8));
  z.byte_offset = UINT64_MAX;
  EXPECT_STATUS(validate(z), HURRAY_ERR_OVERFLOW);
  // byte_offset + highest overflows.
  l.byte_offset = INT64_MAX - 1;
  EXPECT_STATUS(validate(l), HURRAY_ERR_OVERFLOW);
  l.byte_offset = INT64_MAX - 2;
  hurray_extent e;
  ASSERT_OK(extent(l, &e));
  EXPECT_EQ(e.highest, INT64_MAX);
  // 0-d at the very end.
  Layout s = dense({}, dt(kDLInt, 8));
  s.byte_offset = INT64_MAX;
  EXPECT_STATUS(validate(s), HURRAY_ERR_OVERFLOW);
}

TEST(Overflow, NegativeStrideWithByteOffsetAtTheLowEnd) {
  // lowest = byte_offset + lo*E/8 may be negative but must be representable.
  hurray_extent e;
  ASSERT_OK(extent(strided({3}, {-4}, dt(kDLInt, 8)), &e));
  EXPECT_EQ(e.lowest, -8);
  EXPECT_EQ(e.highest, 1);
  const int64_t far = INT64_MIN / 8;  // lo * 8 bits reaches INT64_MIN exactly
  ASSERT_OK(extent(strided({2}, {far}, dt(kDLInt, 8)), &e));
  EXPECT_EQ(e.lowest, far);
  EXPECT_STATUS(validate(strided({2}, {far - 1}, dt(kDLInt, 8))), HURRAY_ERR_OVERFLOW);
}

}  // namespace
