// SPDX-License-Identifier: Apache-2.0
// Handle -> DLPack: hurray_to_dlpack_versioned / hurray_to_dlpack and the
// delete helpers (src/api/dlpack_export.cc, spec §6.2, c-ffi §5).
#include <cstring>
#include <string>
#include <thread>

#include "hurray_test_support.h"

namespace {

using namespace hurray_test;

const void *data_of(const HandleSource &src, const Layout &l) {
  return l.null_data ? nullptr : src.bytes;
}

TEST(ExportVersioned, EveryPreservedLayoutIsKeptExactly) {
  for (const Layout &l : preserved_layouts()) {
    SCOPED_TRACE(describe(l));
    HandleSource src;
    hurray_buffer h = src.handle(l);
    DLManagedTensorVersioned *t = sentinel_ptr<DLManagedTensorVersioned>();
    ASSERT_OK(hurray_to_dlpack_versioned(&h, &t));
    ASSERT_NE(t, nullptr);
    ASSERT_NE(t, sentinel_ptr<DLManagedTensorVersioned>());
    EXPECT_TRUE(is_zeroed(h)) << "export consumes and zeroes the handle";
    EXPECT_EQ(t->version.major, 1u);
    EXPECT_EQ(t->version.minor, 3u);
    EXPECT_EQ(t->flags, l.flags);
    EXPECT_NE(t->deleter, nullptr);
    ExpectTensorIs(t->dl_tensor, l, data_of(src, l));
    EXPECT_EQ(src.log.calls.load(), 0);
    t->deleter(t);
    EXPECT_EQ(src.log.calls.load(), 1);
    EXPECT_EQ(src.log.last_arg.load(), &src.log);
  }
}

TEST(ExportLegacy, EveryPreservedLayoutIsKeptExactlyFlagsDropped) {
  for (const Layout &l : preserved_layouts()) {
    SCOPED_TRACE(describe(l));
    HandleSource src;
    hurray_buffer h = src.handle(l);
    DLManagedTensor *t = sentinel_ptr<DLManagedTensor>();
    ASSERT_OK(hurray_to_dlpack(&h, &t));
    ASSERT_NE(t, nullptr);
    ASSERT_NE(t, sentinel_ptr<DLManagedTensor>());
    EXPECT_TRUE(is_zeroed(h));
    EXPECT_NE(t->deleter, nullptr);
    ExpectTensorIs(t->dl_tensor, l, data_of(src, l));
    EXPECT_EQ(src.log.calls.load(), 0);
    t->deleter(t);
    EXPECT_EQ(src.log.calls.load(), 1);
    EXPECT_EQ(src.log.last_arg.load(), &src.log);
  }
}

TEST(ExportVersioned, DeviceIdIsNeverReset) {
  HandleSource src;
  Layout l = dense({2, 2});
  l.device_type = kDLCUDA;
  l.device_id = 3;
  hurray_buffer h = src.handle(l);
  DLManagedTensorVersioned *t = nullptr;
  ASSERT_OK(hurray_to_dlpack_versioned(&h, &t));
  EXPECT_EQ(t->dl_tensor.device.device_type, kDLCUDA);
  EXPECT_EQ(t->dl_tensor.device.device_id, 3);
  EXPECT_OK(hurray_dlpack_versioned_delete(t));
  EXPECT_EQ(src.log.calls.load(), 1);
}

TEST(ExportVersioned, DeleterMayRunOnAnotherThread) {
  HandleSource src;
  hurray_buffer h = src.handle(dense({6}));
  DLManagedTensorVersioned *t = nullptr;
  ASSERT_OK(hurray_to_dlpack_versioned(&h, &t));
  std::thread::id other;
  std::thread th([&] {
    other = std::this_thread::get_id();
    t->deleter(t);
  });
  th.join();
  EXPECT_EQ(src.log.calls.load(), 1);
  EXPECT_EQ(src.log.last_thread(), other);
}

TEST(ExportLegacy, DeleterMayRunOnAnotherThread) {
  HandleSource src;
  hurray_buffer h = src.handle(dense({6}));
  DLManagedTensor *t = nullptr;
  ASSERT_OK(hurray_to_dlpack(&h, &t));
  std::thread::id other;
  std::thread th([&] {
    other = std::this_thread::get_id();
    EXPECT_OK(hurray_dlpack_delete(t));
  });
  th.join();
  EXPECT_EQ(src.log.calls.load(), 1);
  EXPECT_EQ(src.log.last_thread(), other);
}

TEST(Export, SharedHandlesExportIndependently) {
  HandleSource src;
  hurray_buffer h = src.handle(dense({2, 3}));
  hurray_buffer out[3];
  ASSERT_OK(hurray_share(&h, 3, out));
  DLManagedTensorVersioned *a = nullptr;
  DLManagedTensor *b = nullptr;
  ASSERT_OK(hurray_to_dlpack_versioned(&out[0], &a));
  ASSERT_OK(hurray_to_dlpack(&out[1], &b));
  a->deleter(a);
  ASSERT_OK(hurray_buffer_release(&out[2]));
  EXPECT_EQ(src.log.calls.load(), 0);
  b->deleter(b);
  EXPECT_EQ(src.log.calls.load(), 1);
}

// ----- failures -------------------------------------------------------------------

struct BadHandle {
  const char *name;
  void (*mutate)(hurray_buffer &);
  int32_t status;
  const char *mention;
};

const BadHandle kBadHandles[] = {
    {"empty", [](hurray_buffer &h) { h.release_fn = nullptr; }, HURRAY_ERR_INVALID_ARGUMENT,
     "empty"},
    {"layout version 2", [](hurray_buffer &h) { h.version = 2; }, HURRAY_ERR_UNSUPPORTED_VERSION,
     "version"},
    {"ndim -1", [](hurray_buffer &h) { h.ndim = -1; }, HURRAY_ERR_INVALID_ARGUMENT, "ndim"},
    {"ndim 65", [](hurray_buffer &h) { h.ndim = 65; }, HURRAY_ERR_INVALID_ARGUMENT, "ndim"},
    {"NULL shape", [](hurray_buffer &h) { h.shape = nullptr; }, HURRAY_ERR_INVALID_ARGUMENT,
     "shape"},
    {"NULL strides", [](hurray_buffer &h) { h.strides = nullptr; }, HURRAY_ERR_INVALID_ARGUMENT,
     "strides"},
    {"dtype code 18", [](hurray_buffer &h) { h.dtype.code = 18; }, HURRAY_ERR_UNSUPPORTED_DTYPE,
     "dtype.code"},
    {"bool 16", [](hurray_buffer &h) { h.dtype = dt(kDLBool, 16); }, HURRAY_ERR_UNSUPPORTED_DTYPE,
     "dtype.bits"},
    {"lanes 0", [](hurray_buffer &h) { h.dtype.lanes = 0; }, HURRAY_ERR_UNSUPPORTED_DTYPE, "lanes"},
    {"device 0", [](hurray_buffer &h) { h.device.device_type = 0; }, HURRAY_ERR_UNSUPPORTED_DEVICE,
     "device_type"},
    {"device_id -1", [](hurray_buffer &h) { h.device.device_id = -1; }, HURRAY_ERR_INVALID_ARGUMENT,
     "device_id"},
    {"NULL data", [](hurray_buffer &h) { h.data = nullptr; }, HURRAY_ERR_INVALID_ARGUMENT, "data"},
    {"byte_offset 2^63", [](hurray_buffer &h) { h.byte_offset = uint64_t{1} << 63; },
     HURRAY_ERR_OVERFLOW, "byte_offset"},
};

TEST(Export, InvalidHandlesAreRejectedAndNothingIsConsumed) {
  for (const BadHandle &c : kBadHandles) {
    for (bool versioned : {true, false}) {
      SCOPED_TRACE(std::string(c.name) + (versioned ? " (versioned)" : " (legacy)"));
      HandleSource src;
      hurray_buffer h = src.handle(dense({2, 3}));
      c.mutate(h);
      const hurray_buffer before = h;
      if (versioned) {
        DLManagedTensorVersioned *t = sentinel_ptr<DLManagedTensorVersioned>();
        EXPECT_STATUS(hurray_to_dlpack_versioned(&h, &t), c.status);
        EXPECT_EQ(t, sentinel_ptr<DLManagedTensorVersioned>()) << "out untouched";
      } else {
        DLManagedTensor *t = sentinel_ptr<DLManagedTensor>();
        EXPECT_STATUS(hurray_to_dlpack(&h, &t), c.status);
        EXPECT_EQ(t, sentinel_ptr<DLManagedTensor>()) << "out untouched";
      }
      EXPECT_TRUE(LastErrorMentions(c.mention));
      EXPECT_TRUE(same_bytes(h, before)) << "src unchanged";
      EXPECT_EQ(src.log.calls.load(), 0);
    }
  }
}

TEST(Export, NullArguments) {
  HandleSource src;
  hurray_buffer h = src.handle(dense({2}));
  const hurray_buffer before = h;
  EXPECT_STATUS(hurray_to_dlpack_versioned(&h, nullptr), HURRAY_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(LastErrorMentions("out"));
  EXPECT_STATUS(hurray_to_dlpack(&h, nullptr), HURRAY_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(LastErrorMentions("out"));
  EXPECT_TRUE(same_bytes(h, before));
  DLManagedTensorVersioned *tv = sentinel_ptr<DLManagedTensorVersioned>();
  DLManagedTensor *tl = sentinel_ptr<DLManagedTensor>();
  EXPECT_STATUS(hurray_to_dlpack_versioned(nullptr, &tv), HURRAY_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(LastErrorMentions("src"));
  EXPECT_STATUS(hurray_to_dlpack(nullptr, &tl), HURRAY_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(tv, sentinel_ptr<DLManagedTensorVersioned>());
  EXPECT_EQ(tl, sentinel_ptr<DLManagedTensor>());
  EXPECT_EQ(src.log.calls.load(), 0);
  ASSERT_OK(hurray_buffer_release(&h));
}

// ----- delete helpers --------------------------------------------------------------

TEST(DlpackDelete, NullTensorAndNullDeleterAreOk) {
  EXPECT_OK(hurray_dlpack_versioned_delete(nullptr));
  EXPECT_OK(hurray_dlpack_delete(nullptr));
  DLManagedTensorVersioned v;
  std::memset(&v, 0, sizeof v);
  EXPECT_OK(hurray_dlpack_versioned_delete(&v));
  DLManagedTensor t;
  std::memset(&t, 0, sizeof t);
  EXPECT_OK(hurray_dlpack_delete(&t));
}

TEST(DlpackDelete, CallsTheDeleterOnceWithTheTensor) {
  DeleterLog log;
  DLManagedTensorVersioned *v = make_versioned(log, dense({2}));
  EXPECT_OK(hurray_dlpack_versioned_delete(v));
  EXPECT_EQ(log.calls.load(), 1);
  EXPECT_EQ(log.last_arg.load(), v);
  DeleterLog log2;
  DLManagedTensor *t = make_legacy(log2, dense({2}));
  EXPECT_OK(hurray_dlpack_delete(t));
  EXPECT_EQ(log2.calls.load(), 1);
  EXPECT_EQ(log2.last_arg.load(), t);
}

}  // namespace
