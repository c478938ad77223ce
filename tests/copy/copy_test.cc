// SPDX-License-Identifier: Apache-2.0
// hurray_copy on host memory (src/api/copy.cc, spec §7.2, c-ffi §6).
#include <cstdint>
#include <cstring>
#include <vector>

#include "hurray_test_support.h"

namespace {

using namespace hurray_test;

const hurray_device kCpu{HURRAY_DEVICE_CPU, 0};

// Host memory of int32 values 0, 1, 2, ... wrapped in counting handles.
struct Ints {
  HandleSource src;
  Ints() {
    auto *p = reinterpret_cast<int32_t *>(src.bytes);
    for (size_t i = 0; i < kStorageBytes / sizeof(int32_t); ++i) p[i] = static_cast<int32_t>(i);
  }
  hurray_buffer view(std::vector<int64_t> shape, std::vector<int64_t> strides,
                     uint64_t byte_offset = 0, uint64_t flags = 0) {
    Layout l;
    l.shape = std::move(shape);
    l.strides = std::move(strides);
    l.dtype = dt(kDLInt, 32);
    l.byte_offset = byte_offset;
    l.flags = flags;
    return src.handle(l);
  }
};

// Copies `src`, checks the result's invariants, and returns its int32 values.
std::vector<int32_t> copy_values(const hurray_buffer &src, uint64_t expect_flags) {
  const hurray_buffer before = src;
  hurray_buffer out = sentinel_handle();
  const int32_t st = hurray_copy(&src, kCpu, &out);
  EXPECT_STATUS(st, HURRAY_OK);
  if (st != HURRAY_OK) return {};
  EXPECT_TRUE(same_bytes(src, before)) << "the source is only read";
  EXPECT_NE(out.data, src.data);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(out.data) % HURRAY_CPU_ALIGNMENT, 0u);
  EXPECT_EQ(out.flags, expect_flags);
  EXPECT_EQ(out.byte_offset, 0u);
  EXPECT_EQ(out.device.device_type, HURRAY_DEVICE_CPU);
  EXPECT_EQ(std::memcmp(&out.dtype, &src.dtype, sizeof src.dtype), 0);
  std::vector<int64_t> shape(src.shape, src.shape + src.ndim);
  ExpectDims(out.ndim, out.shape, out.strides, shape, compact(shape));
  hurray_extent e;
  EXPECT_OK(hurray_buffer_extent(&out, &e));
  EXPECT_EQ(e.contiguous, 1);
  std::vector<int32_t> values(static_cast<size_t>(e.numel));
  if (e.numel > 0) std::memcpy(values.data(), out.data, values.size() * sizeof(int32_t));
  EXPECT_OK(hurray_buffer_release(&out));
  return values;
}

TEST(Copy, ContiguousKeepsValuesAndSetsIsCopied) {
  Ints m;
  hurray_buffer h = m.view({2, 3}, {3, 1});
  EXPECT_EQ(copy_values(h, HURRAY_FLAG_IS_COPIED), (std::vector<int32_t>{0, 1, 2, 3, 4, 5}));
  EXPECT_EQ(m.src.log.calls.load(), 0) << "the source is not consumed";
  ASSERT_OK(hurray_buffer_release(&h));
  EXPECT_EQ(m.src.log.calls.load(), 1);
}

TEST(Copy, ContiguousWithByteOffset) {
  Ints m;
  hurray_buffer h = m.view({2, 2}, {2, 1}, 40);
  EXPECT_EQ(copy_values(h, HURRAY_FLAG_IS_COPIED), (std::vector<int32_t>{10, 11, 12, 13}));
  ASSERT_OK(hurray_buffer_release(&h));
}

TEST(Copy, TransposedFortranView) {
  Ints m;
  // Logical 3x2 matrix stored column-major over 0..5: element (i,j) = i + 3j.
  hurray_buffer h = m.view({3, 2}, {1, 3});
  EXPECT_EQ(copy_values(h, HURRAY_FLAG_IS_COPIED), (std::vector<int32_t>{0, 3, 1, 4, 2, 5}));
  ASSERT_OK(hurray_buffer_release(&h));
}

TEST(Copy, NegativeStride) {
  Ints m;
  hurray_buffer h = m.view({5}, {-1}, 4 * 4);  // 4, 3, 2, 1, 0
  EXPECT_EQ(copy_values(h, HURRAY_FLAG_IS_COPIED), (std::vector<int32_t>{4, 3, 2, 1, 0}));
  hurray_buffer g = m.view({2, 3}, {-3, -1}, 5 * 4);  // both reversed
  EXPECT_EQ(copy_values(g, HURRAY_FLAG_IS_COPIED), (std::vector<int32_t>{5, 4, 3, 2, 1, 0}));
  ASSERT_OK(hurray_buffer_release(&h));
  ASSERT_OK(hurray_buffer_release(&g));
}

TEST(Copy, BroadcastStrideZero) {
  Ints m;
  hurray_buffer rows = m.view({3, 4}, {0, 1}, 8);
  EXPECT_EQ(copy_values(rows, HURRAY_FLAG_IS_COPIED),
            (std::vector<int32_t>{2, 3, 4, 5, 2, 3, 4, 5, 2, 3, 4, 5}));
  hurray_buffer cols = m.view({2, 3}, {1, 0});
  EXPECT_EQ(copy_values(cols, HURRAY_FLAG_IS_COPIED), (std::vector<int32_t>{0, 0, 0, 1, 1, 1}));
  hurray_buffer scalar = m.view({4}, {0}, 28);
  EXPECT_EQ(copy_values(scalar, HURRAY_FLAG_IS_COPIED), (std::vector<int32_t>{7, 7, 7, 7}));
  ASSERT_OK(hurray_buffer_release(&rows));
  ASSERT_OK(hurray_buffer_release(&cols));
  ASSERT_OK(hurray_buffer_release(&scalar));
}

TEST(Copy, ThreeDimensionalPermutationWithGapsAndSizeOneDims) {
  Ints m;
  // Base: a 2x3x4 row-major block at offset 8 elements; view it as 4x2x1x3
  // (axes permuted, a size-1 axis with an odd stride).
  hurray_buffer h = m.view({4, 2, 1, 3}, {1, 12, 999, 4}, 8 * 4);
  std::vector<int32_t> want;
  for (int64_t a = 0; a < 4; ++a)
    for (int64_t b = 0; b < 2; ++b)
      for (int64_t c = 0; c < 3; ++c) want.push_back(static_cast<int32_t>(8 + a + 12 * b + 4 * c));
  EXPECT_EQ(copy_values(h, HURRAY_FLAG_IS_COPIED), want);
  ASSERT_OK(hurray_buffer_release(&h));
}

TEST(Copy, ReadOnlySourceGivesAWritableCopy) {
  Ints m;
  hurray_buffer h = m.view({3}, {2}, 0, HURRAY_FLAG_READ_ONLY | HURRAY_FLAG_IS_COPIED);
  EXPECT_EQ(copy_values(h, HURRAY_FLAG_IS_COPIED), (std::vector<int32_t>{0, 2, 4}));
  ASSERT_OK(hurray_buffer_release(&h));
}

TEST(Copy, ZeroDimAndZeroSize) {
  Ints m;
  Layout s = dense({}, dt(kDLInt, 32));
  s.null_shape = true;
  s.has_strides = false;
  s.byte_offset = 12;
  hurray_buffer h = m.src.handle(s);
  EXPECT_EQ(copy_values(h, HURRAY_FLAG_IS_COPIED), (std::vector<int32_t>{3}));
  Layout z = dense({4, 0}, dt(kDLInt, 32));
  z.null_data = true;
  hurray_buffer g = m.src.handle(z);
  EXPECT_EQ(copy_values(g, HURRAY_FLAG_IS_COPIED), (std::vector<int32_t>{}));
  ASSERT_OK(hurray_buffer_release(&h));
  ASSERT_OK(hurray_buffer_release(&g));
}

TEST(Copy, PinnedHostSourceCopiesToCpu) {
  Ints m;
  Layout l;
  l.shape = {2, 2};
  l.strides = {1, 2};
  l.dtype = dt(kDLInt, 32);
  l.device_type = kDLCUDAHost;
  hurray_buffer h = m.src.handle(l);
  EXPECT_EQ(copy_values(h, HURRAY_FLAG_IS_COPIED), (std::vector<int32_t>{0, 2, 1, 3}));
  ASSERT_OK(hurray_buffer_release(&h));
}

TEST(Copy, WideElementsStrided) {
  // complex128 (16 bytes) and float32 x 2 lanes, every other element.
  HandleSource src;
  for (size_t i = 0; i < kStorageBytes; ++i) src.bytes[i] = static_cast<unsigned char>(i);
  for (hurray_dtype dtype : {dt(kDLComplex, 128), dt(kDLFloat, 32, 2)}) {
    SCOPED_TRACE(int{dtype.bits});
    const size_t item = size_t{dtype.bits} * dtype.lanes / 8;
    Layout l;
    l.shape = {3};
    l.strides = {2};
    l.dtype = dtype;
    hurray_buffer h = src.handle(l);
    hurray_buffer out;
    ASSERT_OK(hurray_copy(&h, kCpu, &out));
    for (size_t i = 0; i < 3; ++i) {
      EXPECT_EQ(std::memcmp(static_cast<unsigned char *>(out.data) + i * item,
                            src.bytes + 2 * i * item, item),
                0)
          << "element " << i;
    }
    ASSERT_OK(hurray_buffer_release(&out));
  }
}

TEST(Copy, SubbyteContiguousPackedAndPaddedStrided) {
  HandleSource src;
  for (size_t i = 0; i < 16; ++i) src.bytes[i] = static_cast<unsigned char>(0xA0 + i);
  // Packed fp4, contiguous: the bytes are copied as they are.
  Layout packed = dense({6}, dt(kDLFloat4_e2m1fn, 4));
  hurray_buffer h = src.handle(packed);
  hurray_buffer out;
  ASSERT_OK(hurray_copy(&h, kCpu, &out));
  EXPECT_EQ(out.flags, HURRAY_FLAG_IS_COPIED);
  EXPECT_EQ(std::memcmp(out.data, src.bytes, 3), 0);
  ASSERT_OK(hurray_buffer_release(&out));

  // Padded fp4 (one byte each), reversed: copied element by element.
  Layout padded = dense({4}, dt(kDLFloat4_e2m1fn, 4));
  padded.strides = {-1};
  padded.byte_offset = 3;
  padded.flags = HURRAY_FLAG_SUBBYTE_PADDED;
  hurray_buffer p = src.handle(padded);
  ASSERT_OK(hurray_copy(&p, kCpu, &out));
  EXPECT_EQ(out.flags, HURRAY_FLAG_IS_COPIED | HURRAY_FLAG_SUBBYTE_PADDED);
  const unsigned char want[] = {0xA3, 0xA2, 0xA1, 0xA0};
  EXPECT_EQ(std::memcmp(out.data, want, 4), 0);
  ASSERT_OK(hurray_buffer_release(&out));
  ASSERT_OK(hurray_buffer_release(&h));
  ASSERT_OK(hurray_buffer_release(&p));
}

TEST(Copy, ZeroSizePackedSubbyteTensorFromAlloc) {
  // hurray_alloc's own compact zero-size fp4 tensor must be copyable.
  const int64_t shape[] = {0, 3};
  hurray_buffer a;
  ASSERT_OK(hurray_alloc(kCpu, dt(kDLFloat4_e2m1fn, 4), 2, shape, 0, &a));
  hurray_buffer out;
  ASSERT_OK(hurray_copy(&a, kCpu, &out));
  EXPECT_EQ(out.ndim, 2);
  EXPECT_EQ(out.shape[0], 0);
  EXPECT_EQ(out.shape[1], 3);
  ASSERT_OK(hurray_buffer_release(&out));
  ASSERT_OK(hurray_buffer_release(&a));
}

TEST(Copy, AllocatedRoundTrip) {
  const int64_t shape[] = {5, 7};
  hurray_buffer a;
  ASSERT_OK(hurray_alloc(kCpu, dt(kDLFloat, 64), 2, shape, 0, &a));
  auto *d = static_cast<double *>(a.data);
  for (int i = 0; i < 35; ++i) d[i] = i * 0.5;
  hurray_buffer b;
  ASSERT_OK(hurray_copy(&a, kCpu, &b));
  EXPECT_EQ(std::memcmp(a.data, b.data, 35 * sizeof(double)), 0);
  d[0] = -1;  // the copy is private
  EXPECT_EQ(static_cast<double *>(b.data)[0], 0.0);
  ASSERT_OK(hurray_buffer_release(&a));
  ASSERT_OK(hurray_buffer_release(&b));
}

// ----- failures ---------------------------------------------------------------------------

TEST(Copy, NonContiguousPackedSubbyteIsUnsupported) {
  HandleSource src;
  Layout l = dense({4}, dt(kDLFloat4_e2m1fn, 4));
  l.strides = {2};
  hurray_buffer h = src.handle(l);
  const hurray_buffer before = h;
  hurray_buffer out = sentinel_handle();
  EXPECT_STATUS(hurray_copy(&h, kCpu, &out), HURRAY_ERR_UNSUPPORTED_DTYPE);
  EXPECT_TRUE(LastErrorMentions("packed"));
  EXPECT_TRUE(same_bytes(out, sentinel_handle()));
  EXPECT_TRUE(same_bytes(h, before));
  EXPECT_EQ(src.log.calls.load(), 0);
}

TEST(Copy, BadArgumentsLeaveOutUntouched) {
  HandleSource src;
  hurray_buffer h = src.handle(dense({2}));
  hurray_buffer out = sentinel_handle();
  EXPECT_STATUS(hurray_copy(&h, kCpu, nullptr), HURRAY_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(LastErrorMentions("out"));
  EXPECT_STATUS(hurray_copy(nullptr, kCpu, &out), HURRAY_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(LastErrorMentions("src"));
  hurray_buffer empty;
  std::memset(&empty, 0, sizeof empty);
  EXPECT_STATUS(hurray_copy(&empty, kCpu, &out), HURRAY_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(LastErrorMentions("empty"));
  hurray_buffer bad = h;
  bad.dtype.lanes = 0;
  EXPECT_STATUS(hurray_copy(&bad, kCpu, &out), HURRAY_ERR_UNSUPPORTED_DTYPE);
  EXPECT_STATUS(hurray_copy(&h, hurray_device{HURRAY_DEVICE_CPU, 2}, &out),
                HURRAY_ERR_UNSUPPORTED_DEVICE);
  // Device pairs this build never copies between.
  EXPECT_STATUS(hurray_copy(&h, hurray_device{kDLVulkan, 0}, &out), HURRAY_ERR_UNSUPPORTED_DEVICE);
  hurray_buffer remote = h;
  remote.device = hurray_device{kDLMetal, 0};
  EXPECT_STATUS(hurray_copy(&remote, kCpu, &out), HURRAY_ERR_UNSUPPORTED_DEVICE);
  EXPECT_TRUE(LastErrorMentions("kDLMetal"));
  EXPECT_TRUE(same_bytes(out, sentinel_handle()));
  EXPECT_EQ(src.log.calls.load(), 0);
  ASSERT_OK(hurray_buffer_release(&h));
}

}  // namespace

// hurray_stream_wait on one stream has nothing to order: OK without loading
// any GPU runtime (none is present where this suite runs without a GPU).
TEST(StreamWait, EqualStreamsNeedNoRuntime) {
  void *s = reinterpret_cast<void *>(0x5);
  EXPECT_OK(hurray_stream_wait(hurray_device{HURRAY_DEVICE_CUDA, 0}, s, s));
  EXPECT_OK(hurray_stream_wait(hurray_device{HURRAY_DEVICE_ROCM, 1}, nullptr, nullptr));
  // A device type that is not a GPU's is still an error.
  EXPECT_STATUS(hurray_stream_wait(hurray_device{HURRAY_DEVICE_CPU, 0}, s, s),
                HURRAY_ERR_UNSUPPORTED_DEVICE);
  // ... and says so without claiming that kDLCPU is served there.
  EXPECT_NE(std::strstr(hurray_last_error(), "kDLCPU has no streams"), nullptr)
      << hurray_last_error();
  EXPECT_STATUS(hurray_stream_wait(hurray_device{4 /* kDLOpenCL */, 0}, s, nullptr),
                HURRAY_ERR_UNSUPPORTED_DEVICE);
  EXPECT_NE(std::strstr(hurray_last_error(), "kDLOpenCL has no streams"), nullptr)
      << hurray_last_error();
}
