// SPDX-License-Identifier: Apache-2.0
// hurray_alloc on the CPU (src/api/alloc.cc, src/device/cpu/cpu.cc, spec §7.1, c-ffi §6).
// Leaks are left to LeakSanitizer in the asan build.
#include <cstdint>
#include <cstring>
#include <vector>

#include "hurray_test_support.h"

// A deliberately impossible allocation must come back as OUT_OF_MEMORY, not
// as a sanitizer abort.
extern "C" __attribute__((used, visibility("default"))) const char *__asan_default_options() {
  return "allocator_may_return_null=1";
}
extern "C" __attribute__((used, visibility("default"))) const char *__tsan_default_options() {
  return "allocator_may_return_null=1";
}

namespace {

using namespace hurray_test;

const hurray_device kCpu{HURRAY_DEVICE_CPU, 0};

// Allocates, checks the invariants every CPU allocation has, and returns it.
hurray_buffer alloc_ok(hurray_dtype dtype, const std::vector<int64_t> &shape, uint64_t flags,
                       int64_t expect_bytes) {
  hurray_buffer h = sentinel_handle();
  const int32_t st = hurray_alloc(kCpu, dtype, static_cast<int32_t>(shape.size()),
                                  shape.empty() ? nullptr : shape.data(), flags, &h);
  EXPECT_STATUS(st, HURRAY_OK);
  if (st != HURRAY_OK) {
    std::memset(&h, 0, sizeof h);
    return h;
  }
  EXPECT_EQ(h.version, HURRAY_BUFFER_VERSION);
  EXPECT_EQ(h.reserved, 0u);
  EXPECT_NE(h.release_fn, nullptr);
  EXPECT_NE(h.data, nullptr) << "CPU data is never NULL, even for zero-size tensors";
  EXPECT_EQ(reinterpret_cast<uintptr_t>(h.data) % HURRAY_CPU_ALIGNMENT, 0u);
  EXPECT_EQ(h.byte_offset, 0u);
  EXPECT_EQ(h.device.device_type, HURRAY_DEVICE_CPU);
  EXPECT_EQ(h.device.device_id, 0);
  EXPECT_EQ(h.flags, flags);
  EXPECT_EQ(std::memcmp(&h.dtype, &dtype, sizeof dtype), 0);
  ExpectDims(h.ndim, h.shape, h.strides, shape, compact(shape));
  if (!shape.empty()) {
    EXPECT_NE(h.shape, shape.data()) << "shape is copied";
  }
  hurray_extent e;
  EXPECT_OK(hurray_buffer_extent(&h, &e));
  EXPECT_EQ(e.highest, expect_bytes);
  EXPECT_EQ(e.lowest, 0);
  EXPECT_EQ(e.contiguous, 1);
  // Every byte is writable (ASan reports anything short).
  if (expect_bytes > 0) std::memset(h.data, 0x7F, static_cast<size_t>(expect_bytes));
  return h;
}

TEST(AllocCpu, CompactAlignedMemory) {
  hurray_buffer h = alloc_ok(f32(), {2, 3, 4}, 0, 96);
  EXPECT_EQ(h.strides[0], 12);
  EXPECT_EQ(h.strides[1], 4);
  EXPECT_EQ(h.strides[2], 1);
  ASSERT_OK(hurray_buffer_release(&h));
  EXPECT_TRUE(is_zeroed(h));
}

TEST(AllocCpu, ManyShapesAndDtypes) {
  struct Case {
    hurray_dtype dtype;
    std::vector<int64_t> shape;
    uint64_t flags;
    int64_t bytes;
  };
  const Case cases[] = {
      {f32(), {}, 0, 4},
      {dt(kDLInt, 8), {1}, 0, 1},
      {dt(kDLInt, 8), {63}, 0, 63},
      {dt(kDLInt, 8), {65}, 0, 65},
      {dt(kDLComplex, 128), {3, 5}, 0, 240},
      {dt(kDLFloat, 32, 4), {7}, 0, 112},
      {dt(kDLBool, 8), {2, 1, 3}, HURRAY_FLAG_READ_ONLY, 6},
      {dt(kDLBfloat, 16), {1, 1, 1, 1, 9}, HURRAY_FLAG_IS_COPIED, 18},
      {f32(), std::vector<int64_t>(HURRAY_MAX_NDIM, 1), 0, 4},
      {f32(), std::vector<int64_t>(20, 2), 0, 4 << 20},
  };
  for (const Case &c : cases) {
    SCOPED_TRACE("ndim " + std::to_string(c.shape.size()) + " bytes " + std::to_string(c.bytes));
    hurray_buffer h = alloc_ok(c.dtype, c.shape, c.flags, c.bytes);
    ASSERT_OK(hurray_buffer_release(&h));
  }
}

TEST(AllocCpu, ZeroSizeShapesGetAValidAlignedAddress) {
  for (const std::vector<int64_t> &shape :
       std::vector<std::vector<int64_t>>{{0}, {3, 0}, {0, 5}, {2, 0, 7}, {0, 0}}) {
    SCOPED_TRACE("ndim " + std::to_string(shape.size()));
    hurray_buffer h = alloc_ok(f32(), shape, 0, 0);
    hurray_extent e;
    ASSERT_OK(hurray_buffer_extent(&h, &e));
    EXPECT_EQ(e.numel, 0);
    ASSERT_OK(hurray_buffer_release(&h));
  }
}

TEST(AllocCpu, HugeZeroSizeShapeIsEmptyAndItsStridesDoNotOverflow) {
  // Valid (no elements), but the row-major stride pattern exceeds 64 bits:
  // computing it must not overflow (UBSan aborts on signed overflow).
  const int64_t big = int64_t{1} << 40;
  const int64_t shape[] = {big, big, 0, big, big};
  hurray_buffer h;
  ASSERT_OK(hurray_alloc(kCpu, f32(), 5, shape, 0, &h));
  EXPECT_NE(h.data, nullptr);
  EXPECT_EQ(h.strides[4], 1);
  EXPECT_EQ(h.strides[3], big);
  for (int k = 0; k < 5; ++k) EXPECT_GE(h.strides[k], 0) << "strides[" << k << "]";
  hurray_extent e;
  ASSERT_OK(hurray_buffer_extent(&h, &e));
  EXPECT_EQ(e.numel, 0);
  EXPECT_EQ(e.highest, 0);
  hurray_buffer c;
  ASSERT_OK(hurray_copy(&h, kCpu, &c));
  ASSERT_OK(hurray_buffer_release(&c));
  ASSERT_OK(hurray_buffer_release(&h));
}

TEST(AllocCpu, SubbyteSizesPackedAndPadded) {
  struct Case {
    const char *name;
    hurray_dtype dtype;
    int64_t n;
    int64_t packed, padded;
  };
  const Case cases[] = {
      {"fp4 x5", dt(kDLFloat4_e2m1fn, 4), 5, 3, 5},   {"fp4 x4", dt(kDLFloat4_e2m1fn, 4), 4, 2, 4},
      {"fp6 x4", dt(kDLFloat6_e2m3fn, 6), 4, 3, 4},   {"fp6 x5", dt(kDLFloat6_e3m2fn, 6), 5, 4, 5},
      {"uint1 x9", dt(kDLUInt, 1), 9, 2, 9},          {"int2 x3", dt(kDLInt, 2), 3, 1, 3},
      {"int4 lanes 2 x3", dt(kDLInt, 4, 2), 3, 3, 3},
  };
  for (const Case &c : cases) {
    SCOPED_TRACE(c.name);
    hurray_buffer p = alloc_ok(c.dtype, {c.n}, 0, c.packed);
    hurray_buffer q = alloc_ok(c.dtype, {c.n}, HURRAY_FLAG_SUBBYTE_PADDED, c.padded);
    ASSERT_OK(hurray_buffer_release(&p));
    ASSERT_OK(hurray_buffer_release(&q));
  }
}

TEST(AllocCpu, AllocatedHandlesConvertShareAndRelease) {
  const int64_t shape[] = {3, 4};
  hurray_buffer h;
  ASSERT_OK(hurray_alloc(kCpu, f32(), 2, shape, 0, &h));
  hurray_buffer out[3];
  ASSERT_OK(hurray_share(&h, 3, out));
  DLManagedTensorVersioned *v = nullptr;
  DLManagedTensor *g = nullptr;
  ASSERT_OK(hurray_to_dlpack_versioned(&out[0], &v));
  ASSERT_OK(hurray_to_dlpack(&out[1], &g));
  ASSERT_OK(hurray_from_dlpack(g, HURRAY_IMPORT_DEFAULT, &out[1]));
  v->deleter(v);
  ASSERT_OK(hurray_buffer_release(&out[1]));
  ASSERT_OK(hurray_buffer_release(&out[2]));
}

// ----- failures ------------------------------------------------------------------------

void expect_alloc_fails(hurray_device device, hurray_dtype dtype, int32_t ndim,
                        const int64_t *shape, uint64_t flags, int32_t status, const char *mention) {
  hurray_buffer h = sentinel_handle();
  EXPECT_STATUS(hurray_alloc(device, dtype, ndim, shape, flags, &h), status);
  EXPECT_TRUE(LastErrorMentions(mention));
  EXPECT_TRUE(same_bytes(h, sentinel_handle())) << "out untouched";
}

TEST(AllocCpu, ReservedFlagBitsAreRejected) {
  const int64_t shape[] = {4};
  for (uint64_t flags :
       {uint64_t{1} << 3, uint64_t{1} << 63, HURRAY_FLAG_READ_ONLY | (uint64_t{1} << 17)}) {
    SCOPED_TRACE(flags);
    expect_alloc_fails(kCpu, f32(), 1, shape, flags, HURRAY_ERR_INVALID_ARGUMENT, "flags");
  }
}

TEST(AllocCpu, CpuDeviceIdMustBeZero) {
  const int64_t shape[] = {4};
  expect_alloc_fails(hurray_device{HURRAY_DEVICE_CPU, 1}, f32(), 1, shape, 0,
                     HURRAY_ERR_UNSUPPORTED_DEVICE, "device_id 0");
  expect_alloc_fails(hurray_device{HURRAY_DEVICE_CPU, -1}, f32(), 1, shape, 0,
                     HURRAY_ERR_INVALID_ARGUMENT, "device_id");
}

TEST(AllocCpu, DevicesWithoutAnAllocatorAreUnsupported) {
  const int64_t shape[] = {4};
  // Device types libhurray never serves; CUDA and ROCm are covered by the GPU
  // suite because they depend on the machine.
  for (int32_t type : {4, 7, 8, 9, 12, 14, 15, 16, 17, 18}) {
    SCOPED_TRACE(type);
    expect_alloc_fails(hurray_device{type, 0}, f32(), 1, shape, 0, HURRAY_ERR_UNSUPPORTED_DEVICE,
                       "device type");
  }
  for (int32_t type : {0, 5, 6, 19, -3}) {
    SCOPED_TRACE(type);
    expect_alloc_fails(hurray_device{type, 0}, f32(), 1, shape, 0, HURRAY_ERR_UNSUPPORTED_DEVICE,
                       "device_type");
  }
}

TEST(AllocCpu, BadRequestsAreRejected) {
  const int64_t neg[] = {2, -1};
  const int64_t ok[] = {2, 2};
  const int64_t huge[] = {int64_t{1} << 40, int64_t{1} << 40};
  const int64_t wide[] = {INT64_MAX / 16};
  expect_alloc_fails(kCpu, f32(), 2, neg, 0, HURRAY_ERR_INVALID_ARGUMENT, "shape[1]");
  expect_alloc_fails(kCpu, f32(), 2, nullptr, 0, HURRAY_ERR_INVALID_ARGUMENT, "shape");
  expect_alloc_fails(kCpu, f32(), -1, ok, 0, HURRAY_ERR_INVALID_ARGUMENT, "ndim");
  expect_alloc_fails(kCpu, f32(), HURRAY_MAX_NDIM + 1, ok, 0, HURRAY_ERR_INVALID_ARGUMENT, "ndim");
  expect_alloc_fails(kCpu, dt(kDLFloat, 8), 2, ok, 0, HURRAY_ERR_UNSUPPORTED_DTYPE, "bits");
  expect_alloc_fails(kCpu, dt(30, 8), 2, ok, 0, HURRAY_ERR_UNSUPPORTED_DTYPE, "code");
  expect_alloc_fails(kCpu, dt(kDLFloat, 32, 0), 2, ok, 0, HURRAY_ERR_UNSUPPORTED_DTYPE, "lanes");
  expect_alloc_fails(kCpu, f32(), 2, huge, 0, HURRAY_ERR_OVERFLOW, "element count");
  expect_alloc_fails(kCpu, f32(), 1, wide, 0, HURRAY_ERR_OVERFLOW, "overflow");
  EXPECT_STATUS(hurray_alloc(kCpu, f32(), 2, ok, 0, nullptr), HURRAY_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(LastErrorMentions("out"));
}

TEST(AllocCpu, ImpossibleSizeIsOutOfMemory) {
  const int64_t shape[] = {int64_t{1} << 52};  // 4 PiB of bytes
  expect_alloc_fails(kCpu, dt(kDLInt, 8), 1, shape, 0, HURRAY_ERR_OUT_OF_MEMORY, "CPU memory");
}

}  // namespace
