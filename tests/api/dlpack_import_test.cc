// SPDX-License-Identifier: Apache-2.0
// DLPack -> handle: hurray_from_dlpack_versioned / hurray_from_dlpack
// (src/api/dlpack_import.cc, spec §6.3, c-ffi §5).
#include <climits>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "hurray_test_support.h"

namespace {

using namespace hurray_test;

const void *data_of(const DLTensor &t) { return t.data; }

// ----- accepted and kept exactly ------------------------------------------------

TEST(ImportVersioned, EveryPreservedLayoutIsKeptExactly) {
  for (const Layout &l : preserved_layouts()) {
    SCOPED_TRACE(describe(l));
    DeleterLog log;
    DLManagedTensorVersioned *t = make_versioned(log, l);
    const void *data = data_of(t->dl_tensor);
    const int64_t *shape = t->dl_tensor.shape;
    const int64_t *strides = t->dl_tensor.strides;
    hurray_buffer h = sentinel_handle();
    ASSERT_OK(hurray_from_dlpack_versioned(t, HURRAY_IMPORT_DEFAULT, &h));
    ExpectHandleIs(h, l, data, l.flags);
    if (l.ndim() > 0) {
      // No copy: shape and strides point into the tensor.
      EXPECT_EQ(h.shape, shape);
      EXPECT_EQ(h.strides, strides);
    }
    EXPECT_OK(hurray_buffer_validate(&h));
    EXPECT_EQ(log.calls.load(), 0);
    ASSERT_OK(hurray_buffer_release(&h));
    EXPECT_EQ(log.calls.load(), 1);
    EXPECT_EQ(log.last_arg.load(), t) << "the deleter gets the very pointer imported";
  }
}

TEST(ImportLegacy, EveryPreservedLayoutIsKeptExactlyWithZeroFlags) {
  for (const Layout &l : preserved_layouts()) {
    SCOPED_TRACE(describe(l));
    DeleterLog log;
    DLManagedTensor *t = make_legacy(log, l);
    const void *data = data_of(t->dl_tensor);
    hurray_buffer h = sentinel_handle();
    ASSERT_OK(hurray_from_dlpack(t, HURRAY_IMPORT_DEFAULT, &h));
    ExpectHandleIs(h, l, data, 0);
    if (l.ndim() > 0) {
      EXPECT_EQ(h.shape, t->dl_tensor.shape);
      EXPECT_EQ(h.strides, t->dl_tensor.strides);
    }
    EXPECT_EQ(log.calls.load(), 0);
    ASSERT_OK(hurray_buffer_release(&h));
    EXPECT_EQ(log.calls.load(), 1);
    EXPECT_EQ(log.last_arg.load(), t);
  }
}

TEST(ImportVersioned, OldMinorVersionsWithNullStridesAreCompactRowMajor) {
  for (uint32_t minor : {0u, 1u}) {
    for (std::vector<int64_t> shape :
         std::vector<std::vector<int64_t>>{{7}, {2, 3}, {2, 3, 4}, {2, 0, 3}, {1, 5, 1}}) {
      DeleterLog log;
      Layout l = dense(shape);
      l.has_strides = false;
      l.flags = HURRAY_FLAG_READ_ONLY;
      SCOPED_TRACE("minor " + std::to_string(minor) + ", ndim " + std::to_string(l.ndim()));
      DLManagedTensorVersioned *t = make_versioned(log, l, 1, minor);
      hurray_buffer h;
      ASSERT_OK(hurray_from_dlpack_versioned(t, HURRAY_IMPORT_DEFAULT, &h));
      ExpectHandleIs(h, l, t->dl_tensor.data, HURRAY_FLAG_READ_ONLY);  // compact strides
      EXPECT_EQ(h.shape, t->dl_tensor.shape);
      hurray_extent e;
      ASSERT_OK(hurray_buffer_extent(&h, &e));
      EXPECT_EQ(e.contiguous, 1);
      ASSERT_OK(hurray_buffer_release(&h));
      EXPECT_EQ(log.calls.load(), 1);
      EXPECT_EQ(log.last_arg.load(), t);
    }
  }
}

TEST(ImportLegacy, NullStridesAreCompactRowMajorAtAnyNdim) {
  for (std::vector<int64_t> shape :
       std::vector<std::vector<int64_t>>{{7}, {2, 3}, {4, 1, 2, 3}, {3, 0}, {}}) {
    DeleterLog log;
    Layout l = dense(shape);
    l.has_strides = false;
    SCOPED_TRACE("ndim " + std::to_string(l.ndim()));
    DLManagedTensor *t = make_legacy(log, l);
    hurray_buffer h;
    ASSERT_OK(hurray_from_dlpack(t, HURRAY_IMPORT_DEFAULT, &h));
    ExpectHandleIs(h, l, t->dl_tensor.data, 0);
    ASSERT_OK(hurray_buffer_release(&h));
    EXPECT_EQ(log.calls.load(), 1);
    EXPECT_EQ(log.last_arg.load(), t);
  }
}

TEST(Import, SynthesisedStridesOfHugeZeroSizeShapesDoNotOverflow) {
  // The element count is 0, so the shape is valid (spec §3 item 5), but the
  // row-major pattern of its extents is beyond 64 bits: computing it must not
  // overflow (UBSan aborts on signed overflow).
  const int64_t big = int64_t{1} << 40;
  Layout l = dense({1});
  l.shape = {0, big, big, big};
  l.strides.clear();
  l.has_strides = false;
  l.null_data = true;
  for (bool legacy : {true, false}) {
    SCOPED_TRACE(legacy ? "legacy" : "versioned 1.1");
    DeleterLog log;
    hurray_buffer h;
    if (legacy) {
      ASSERT_OK(hurray_from_dlpack(make_legacy(log, l), HURRAY_IMPORT_DEFAULT, &h));
    } else {
      ASSERT_OK(
          hurray_from_dlpack_versioned(make_versioned(log, l, 1, 1), HURRAY_IMPORT_DEFAULT, &h));
    }
    ASSERT_NE(h.strides, nullptr);
    EXPECT_EQ(h.strides[3], 1);
    EXPECT_EQ(h.strides[2], big);
    for (int k = 0; k < 4; ++k) EXPECT_GE(h.strides[k], 0) << "strides[" << k << "]";
    hurray_extent e;
    ASSERT_OK(hurray_buffer_extent(&h, &e));
    EXPECT_EQ(e.numel, 0);
    EXPECT_EQ(e.contiguous, 1);
    ASSERT_OK(hurray_buffer_release(&h));
    EXPECT_EQ(log.calls.load(), 1);
  }
}

TEST(ImportVersioned, NullStridesAtNdimZeroAreFineInEveryMinor) {
  for (uint32_t minor : {0u, 2u, 3u}) {
    DeleterLog log;
    Layout l = dense({});
    l.has_strides = false;
    l.null_shape = true;
    DLManagedTensorVersioned *t = make_versioned(log, l, 1, minor);
    hurray_buffer h;
    ASSERT_OK(hurray_from_dlpack_versioned(t, HURRAY_IMPORT_DEFAULT, &h)) << "minor " << minor;
    EXPECT_EQ(h.ndim, 0);
    ASSERT_OK(hurray_buffer_release(&h));
    EXPECT_EQ(log.calls.load(), 1);
  }
}

TEST(ImportVersioned, NewerMinorVersionsOfMajorOneAreRead) {
  for (uint32_t minor : {4u, 99u, UINT32_MAX}) {
    DeleterLog log;
    DLManagedTensorVersioned *t = make_versioned(log, dense({2}), 1, minor);
    hurray_buffer h;
    ASSERT_OK(hurray_from_dlpack_versioned(t, HURRAY_IMPORT_DEFAULT, &h)) << "minor " << minor;
    ASSERT_OK(hurray_buffer_release(&h));
    EXPECT_EQ(log.calls.load(), 1);
  }
}

TEST(ImportVersioned, DeviceTypeAndIdSurvive) {
  DeleterLog log;
  Layout l = dense({4, 4});
  l.device_type = kDLCUDA;
  l.device_id = 3;
  DLManagedTensorVersioned *t = make_versioned(log, l);
  hurray_buffer h;
  ASSERT_OK(hurray_from_dlpack_versioned(t, HURRAY_IMPORT_DEFAULT, &h));
  EXPECT_EQ(h.device.device_type, HURRAY_DEVICE_CUDA);
  EXPECT_EQ(h.device.device_id, 3);
  ASSERT_OK(hurray_buffer_release(&h));
}

TEST(Import, NullDeleterMeansNothingToFree) {
  DeleterLog log;
  DLManagedTensorVersioned *t = make_versioned(log, dense({3}));
  t->deleter = nullptr;
  hurray_buffer h;
  ASSERT_OK(hurray_from_dlpack_versioned(t, HURRAY_IMPORT_DEFAULT, &h));
  ASSERT_OK(hurray_buffer_release(&h));
  EXPECT_EQ(log.calls.load(), 0);
  delete static_cast<FakeBlock<DLManagedTensorVersioned> *>(t->manager_ctx);

  DLManagedTensor *u = make_legacy(log, dense({3}));
  u->deleter = nullptr;
  ASSERT_OK(hurray_from_dlpack(u, HURRAY_IMPORT_DEFAULT, &h));
  ASSERT_OK(hurray_buffer_release(&h));
  EXPECT_EQ(log.calls.load(), 0);
  delete static_cast<FakeBlock<DLManagedTensor> *>(u->manager_ctx);
}

TEST(Import, ReleaseOnAnotherThreadCallsTheDeleterThere) {
  DeleterLog log;
  DLManagedTensorVersioned *t = make_versioned(log, dense({3}));
  hurray_buffer h;
  ASSERT_OK(hurray_from_dlpack_versioned(t, HURRAY_IMPORT_DEFAULT, &h));
  std::thread::id other;
  std::thread th([&] {
    other = std::this_thread::get_id();
    (void)hurray_buffer_release(&h);
  });
  th.join();
  EXPECT_EQ(log.calls.load(), 1);
  EXPECT_EQ(log.last_arg.load(), t);
  EXPECT_EQ(log.last_thread(), other);
}

TEST(Import, ImportedHandlesShareLikeAnyOther) {
  DeleterLog log;
  DLManagedTensor *t = make_legacy(log, dense({3}));
  hurray_buffer h;
  ASSERT_OK(hurray_from_dlpack(t, HURRAY_IMPORT_DEFAULT, &h));
  hurray_buffer out[4];
  ASSERT_OK(hurray_share(&h, 4, out));
  for (int i = 0; i < 3; ++i) ASSERT_OK(hurray_buffer_release(&out[i]));
  EXPECT_EQ(log.calls.load(), 0);
  ASSERT_OK(hurray_buffer_release(&out[3]));
  EXPECT_EQ(log.calls.load(), 1);
  EXPECT_EQ(log.last_arg.load(), t);
}

// ----- rejected, nothing consumed ---------------------------------------------------

struct BadTensor {
  std::string name;
  void (*mutate)(DLTensor &);
  int32_t status;
  const char *mention;
};

std::vector<BadTensor> bad_tensors() {
  return {
      {"ndim -1", [](DLTensor &t) { t.ndim = -1; }, HURRAY_ERR_INVALID_ARGUMENT, "ndim"},
      {"ndim INT32_MIN", [](DLTensor &t) { t.ndim = INT32_MIN; }, HURRAY_ERR_INVALID_ARGUMENT,
       "ndim"},
      {"ndim 65", [](DLTensor &t) { t.ndim = HURRAY_MAX_NDIM + 1; }, HURRAY_ERR_INVALID_ARGUMENT,
       "ndim"},
      {"NULL shape", [](DLTensor &t) { t.shape = nullptr; }, HURRAY_ERR_INVALID_ARGUMENT, "shape"},
      {"negative dim", [](DLTensor &t) { t.shape[1] = -3; }, HURRAY_ERR_INVALID_ARGUMENT,
       "shape[1]"},
      {"negative dim beside a zero",
       [](DLTensor &t) {
         t.shape[0] = 0;
         t.shape[1] = -1;
       },
       HURRAY_ERR_INVALID_ARGUMENT, "shape[1]"},
      {"dtype code 18", [](DLTensor &t) { t.dtype.code = 18; }, HURRAY_ERR_UNSUPPORTED_DTYPE,
       "dtype.code"},
      {"dtype code 255", [](DLTensor &t) { t.dtype.code = 255; }, HURRAY_ERR_UNSUPPORTED_DTYPE,
       "dtype.code"},
      {"bool 1 bit",
       [](DLTensor &t) {
         t.dtype = DLDataType{kDLBool, 1, 1};
       },
       HURRAY_ERR_UNSUPPORTED_DTYPE, "dtype.bits"},
      {"bool 16 bits",
       [](DLTensor &t) {
         t.dtype = DLDataType{kDLBool, 16, 1};
       },
       HURRAY_ERR_UNSUPPORTED_DTYPE, "dtype.bits"},
      {"fp8 16 bits",
       [](DLTensor &t) {
         t.dtype = DLDataType{kDLFloat8_e4m3fn, 16, 1};
       },
       HURRAY_ERR_UNSUPPORTED_DTYPE, "dtype.bits"},
      {"fp6 8 bits",
       [](DLTensor &t) {
         t.dtype = DLDataType{kDLFloat6_e2m3fn, 8, 1};
       },
       HURRAY_ERR_UNSUPPORTED_DTYPE, "dtype.bits"},
      {"fp4 8 bits",
       [](DLTensor &t) {
         t.dtype = DLDataType{kDLFloat4_e2m1fn, 8, 1};
       },
       HURRAY_ERR_UNSUPPORTED_DTYPE, "dtype.bits"},
      {"bfloat 32 bits",
       [](DLTensor &t) {
         t.dtype = DLDataType{kDLBfloat, 32, 1};
       },
       HURRAY_ERR_UNSUPPORTED_DTYPE, "dtype.bits"},
      {"lanes 0", [](DLTensor &t) { t.dtype.lanes = 0; }, HURRAY_ERR_UNSUPPORTED_DTYPE, "lanes"},
      {"element count overflow",
       [](DLTensor &t) {
         t.shape[0] = int64_t{1} << 32;
         t.shape[1] = int64_t{1} << 32;
       },
       HURRAY_ERR_OVERFLOW, "element count"},
      {"stride overflow", [](DLTensor &t) { t.strides[1] = INT64_MAX; }, HURRAY_ERR_OVERFLOW,
       "strides[1]"},
      {"negative stride overflow",
       [](DLTensor &t) {
         t.shape[0] = 3;
         t.strides[0] = INT64_MIN;
       },
       HURRAY_ERR_OVERFLOW, "strides[0]"},
      {"extent in bits overflows", [](DLTensor &t) { t.strides[0] = INT64_MAX / 8; },
       HURRAY_ERR_OVERFLOW, "byte extent"},
      {"negative extent in bits overflows", [](DLTensor &t) { t.strides[0] = INT64_MIN / 16; },
       HURRAY_ERR_OVERFLOW, "byte extent"},
      {"byte_offset 2^63", [](DLTensor &t) { t.byte_offset = uint64_t{1} << 63; },
       HURRAY_ERR_OVERFLOW, "byte_offset"},
      {"byte_offset UINT64_MAX", [](DLTensor &t) { t.byte_offset = UINT64_MAX; },
       HURRAY_ERR_OVERFLOW, "byte_offset"},
      {"byte_offset plus extent", [](DLTensor &t) { t.byte_offset = INT64_MAX - 4; },
       HURRAY_ERR_OVERFLOW, "byte_offset"},
      {"data NULL with elements", [](DLTensor &t) { t.data = nullptr; },
       HURRAY_ERR_INVALID_ARGUMENT, "data"},
      {"device type 0", [](DLTensor &t) { t.device.device_type = static_cast<DLDeviceType>(0); },
       HURRAY_ERR_UNSUPPORTED_DEVICE, "device_type"},
      {"device type 5 (retired)",
       [](DLTensor &t) { t.device.device_type = static_cast<DLDeviceType>(5); },
       HURRAY_ERR_UNSUPPORTED_DEVICE, "device_type"},
      {"device type 19", [](DLTensor &t) { t.device.device_type = static_cast<DLDeviceType>(19); },
       HURRAY_ERR_UNSUPPORTED_DEVICE, "device_type"},
      {"device_id -1", [](DLTensor &t) { t.device.device_id = -1; }, HURRAY_ERR_INVALID_ARGUMENT,
       "device_id"},
  };
}

template <typename Managed>
void expect_rejected(Managed *t, const DeleterLog &log, int32_t status, const char *mention,
                     int32_t (*import)(Managed *, uint32_t, hurray_buffer *),
                     uint32_t options = HURRAY_IMPORT_DEFAULT) {
  Managed before;
  std::memcpy(&before, t, sizeof before);
  hurray_buffer out = sentinel_handle();
  EXPECT_STATUS(import(t, options, &out), status);
  EXPECT_TRUE(LastErrorMentions(mention));
  EXPECT_TRUE(same_bytes(out, sentinel_handle())) << "out untouched";
  EXPECT_EQ(std::memcmp(&before, t, sizeof before), 0) << "tensor unchanged";
  EXPECT_EQ(log.calls.load(), 0) << "nothing was called on the tensor";
}

TEST(ImportVersioned, MalformedTensorsAreRejectedAndNothingIsConsumed) {
  for (const BadTensor &c : bad_tensors()) {
    SCOPED_TRACE(c.name);
    DeleterLog log;
    DLManagedTensorVersioned *t = make_versioned(log, dense({2, 3}));
    c.mutate(t->dl_tensor);
    expect_rejected(t, log, c.status, c.mention, &hurray_from_dlpack_versioned);
    // The caller still owns it and can delete it.
    t->deleter(t);
    EXPECT_EQ(log.calls.load(), 1);
    EXPECT_EQ(log.last_arg.load(), t);
  }
}

TEST(ImportLegacy, MalformedTensorsAreRejectedAndNothingIsConsumed) {
  for (const BadTensor &c : bad_tensors()) {
    SCOPED_TRACE(c.name);
    DeleterLog log;
    DLManagedTensor *t = make_legacy(log, dense({2, 3}));
    c.mutate(t->dl_tensor);
    expect_rejected(t, log, c.status, c.mention, &hurray_from_dlpack);
    t->deleter(t);
    EXPECT_EQ(log.calls.load(), 1);
  }
}

TEST(ImportVersioned, MajorVersionOtherThanOneIsRejectedWithoutReadingTheTensor) {
  for (uint32_t major : {0u, 2u, 3u, UINT32_MAX}) {
    SCOPED_TRACE("major " + std::to_string(major));
    DeleterLog log;
    DLManagedTensorVersioned *t = make_versioned(log, dense({2, 3}), major, 0);
    // A different major may lay out dl_tensor differently: garbage there must
    // not change the answer.
    t->dl_tensor.ndim = -7;
    t->dl_tensor.dtype.code = 200;
    expect_rejected(t, log, HURRAY_ERR_UNSUPPORTED_VERSION, "version",
                    &hurray_from_dlpack_versioned);
    t->deleter(t);
    EXPECT_EQ(log.calls.load(), 1);
  }
}

TEST(ImportVersioned, NullStridesFromMinorTwoOnAreRejected) {
  for (uint32_t minor : {2u, 3u, 4u}) {
    for (std::vector<int64_t> shape : std::vector<std::vector<int64_t>>{{3}, {2, 3}, {0, 2}}) {
      SCOPED_TRACE("minor " + std::to_string(minor) + " ndim " + std::to_string(shape.size()));
      DeleterLog log;
      Layout l = dense(shape);
      l.has_strides = false;
      DLManagedTensorVersioned *t = make_versioned(log, l, 1, minor);
      expect_rejected(t, log, HURRAY_ERR_INVALID_ARGUMENT, "strides",
                      &hurray_from_dlpack_versioned);
      t->deleter(t);
    }
  }
}

TEST(Import, NullArgumentsAndUnknownOptions) {
  hurray_buffer out = sentinel_handle();
  EXPECT_STATUS(hurray_from_dlpack_versioned(nullptr, HURRAY_IMPORT_DEFAULT, &out),
                HURRAY_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(LastErrorMentions("tensor"));
  EXPECT_STATUS(hurray_from_dlpack(nullptr, HURRAY_IMPORT_DEFAULT, &out),
                HURRAY_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(LastErrorMentions("tensor"));
  EXPECT_TRUE(same_bytes(out, sentinel_handle()));

  DeleterLog log;
  DLManagedTensorVersioned *v = make_versioned(log, dense({2}));
  DLManagedTensor *t = make_legacy(log, dense({2}));
  EXPECT_STATUS(hurray_from_dlpack_versioned(v, HURRAY_IMPORT_DEFAULT, nullptr),
                HURRAY_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(LastErrorMentions("out"));
  EXPECT_STATUS(hurray_from_dlpack(t, HURRAY_IMPORT_DEFAULT, nullptr), HURRAY_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(LastErrorMentions("out"));
  for (uint32_t options : {1u << 31, 0xFFFFFFFFu}) {
    SCOPED_TRACE(options);
    expect_rejected(v, log, HURRAY_ERR_INVALID_ARGUMENT, "options", &hurray_from_dlpack_versioned,
                    options);
    expect_rejected(t, log, HURRAY_ERR_INVALID_ARGUMENT, "options", &hurray_from_dlpack, options);
  }
  EXPECT_EQ(log.calls.load(), 0);
  v->deleter(v);
  t->deleter(t);
  EXPECT_EQ(log.calls.load(), 2);
}

}  // namespace
