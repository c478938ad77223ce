// SPDX-License-Identifier: Apache-2.0
// Fan-out: hurray_share (src/api/share.cc, spec §5, c-ffi §4).
#include <cstring>
#include <thread>
#include <vector>

#include "hurray_test_support.h"

namespace {

using namespace hurray_test;

void expect_same_memory(const hurray_buffer &out, const hurray_buffer &orig) {
  EXPECT_EQ(out.version, orig.version);
  EXPECT_EQ(out.flags, orig.flags);
  EXPECT_EQ(out.data, orig.data);
  EXPECT_EQ(out.byte_offset, orig.byte_offset);
  EXPECT_EQ(out.device.device_type, orig.device.device_type);
  EXPECT_EQ(out.device.device_id, orig.device.device_id);
  EXPECT_EQ(std::memcmp(&out.dtype, &orig.dtype, sizeof out.dtype), 0);
  EXPECT_EQ(out.ndim, orig.ndim);
  EXPECT_EQ(out.shape, orig.shape);
  EXPECT_EQ(out.strides, orig.strides);
}

TEST(Share, SourceIsReleasedOnceAfterTheLastOfN) {
  HandleSource src;
  Layout l = dense({4, 5});
  l.byte_offset = 16;
  l.flags = HURRAY_FLAG_READ_ONLY;
  hurray_buffer h = src.handle(l);
  const hurray_buffer orig = h;
  hurray_buffer out[4];
  ASSERT_OK(hurray_share(&h, 4, out));
  EXPECT_TRUE(is_zeroed(h)) << "the source handle is consumed and zeroed";
  for (int i = 0; i < 4; ++i) {
    SCOPED_TRACE(i);
    expect_same_memory(out[i], orig);
    EXPECT_OK(hurray_buffer_validate(&out[i]));
    EXPECT_NE(out[i].release_fn, nullptr);
  }
  for (int i = 0; i < 3; ++i) {
    ASSERT_OK(hurray_buffer_release(&out[i]));
    EXPECT_EQ(src.log.calls.load(), 0) << "released after " << i + 1 << " of 4";
  }
  ASSERT_OK(hurray_buffer_release(&out[3]));
  EXPECT_EQ(src.log.calls.load(), 1);
  EXPECT_EQ(src.log.last_arg.load(), &src.log);
}

TEST(Share, AnyReleaseOrderAndCopiesOfHandlesWork) {
  HandleSource src;
  hurray_buffer h = src.handle(dense({2}));
  hurray_buffer out[3];
  ASSERT_OK(hurray_share(&h, 3, out));
  // A handle is a value: a memcpy'd copy carries the reference instead.
  hurray_buffer moved;
  std::memcpy(&moved, &out[1], sizeof moved);
  std::memset(&out[1], 0, sizeof out[1]);
  ASSERT_OK(hurray_buffer_release(&out[2]));
  ASSERT_OK(hurray_buffer_release(&out[1]));  // empty: nothing
  ASSERT_OK(hurray_buffer_release(&moved));
  EXPECT_EQ(src.log.calls.load(), 0);
  ASSERT_OK(hurray_buffer_release(&out[0]));
  EXPECT_EQ(src.log.calls.load(), 1);
}

TEST(Share, LastReleaseRunsTheSourceReleaseOnTheReleasingThread) {
  HandleSource src;
  hurray_buffer h = src.handle(dense({8}));
  hurray_buffer out[3];
  ASSERT_OK(hurray_share(&h, 3, out));
  ASSERT_OK(hurray_buffer_release(&out[0]));
  ASSERT_OK(hurray_buffer_release(&out[1]));
  std::thread::id last;
  int calls_seen_before = -1;
  std::thread t([&] {
    last = std::this_thread::get_id();
    calls_seen_before = src.log.calls.load();
    (void)hurray_buffer_release(&out[2]);
  });
  t.join();
  EXPECT_EQ(calls_seen_before, 0);
  EXPECT_EQ(src.log.calls.load(), 1);
  EXPECT_EQ(src.log.last_thread(), last);
  EXPECT_NE(last, std::this_thread::get_id());
}

TEST(Share, ResharingAddsToTheSameCount) {
  HandleSource src;
  hurray_buffer h = src.handle(dense({3, 3}));
  hurray_buffer first[2];
  ASSERT_OK(hurray_share(&h, 2, first));
  const hurray_buffer shared = first[0];
  hurray_buffer second[3];
  ASSERT_OK(hurray_share(&first[0], 3, second));
  EXPECT_TRUE(is_zeroed(first[0]));
  for (int i = 0; i < 3; ++i) {
    SCOPED_TRACE(i);
    // No second control block: same release_fn and user_data as the input.
    EXPECT_EQ(second[i].release_fn, shared.release_fn);
    EXPECT_EQ(second[i].user_data, shared.user_data);
    EXPECT_EQ(second[i].user_data, first[1].user_data);
    expect_same_memory(second[i], shared);
  }
  // Four live handles now; the source goes with the last of them, in any order.
  ASSERT_OK(hurray_buffer_release(&second[1]));
  ASSERT_OK(hurray_buffer_release(&first[1]));
  ASSERT_OK(hurray_buffer_release(&second[0]));
  EXPECT_EQ(src.log.calls.load(), 0);
  ASSERT_OK(hurray_buffer_release(&second[2]));
  EXPECT_EQ(src.log.calls.load(), 1);
}

TEST(Share, ResharingTheLastRemainingHandleKeepsTheSourceAlive) {
  HandleSource src;
  hurray_buffer h = src.handle(dense({3}));
  hurray_buffer a[2];
  ASSERT_OK(hurray_share(&h, 2, a));
  ASSERT_OK(hurray_buffer_release(&a[0]));  // one reference left
  hurray_buffer b[5];
  ASSERT_OK(hurray_share(&a[1], 5, b));
  for (int i = 0; i < 4; ++i) ASSERT_OK(hurray_buffer_release(&b[i]));
  EXPECT_EQ(src.log.calls.load(), 0);
  ASSERT_OK(hurray_buffer_release(&b[4]));
  EXPECT_EQ(src.log.calls.load(), 1);
}

TEST(Share, OneConsumerIsAMove) {
  HandleSource src;
  hurray_buffer h = src.handle(dense({2, 2}));
  const hurray_buffer orig = h;
  hurray_buffer out;
  ASSERT_OK(hurray_share(&h, 1, &out));
  EXPECT_TRUE(same_bytes(out, orig)) << "n == 1 moves the handle unchanged";
  EXPECT_TRUE(is_zeroed(h));
  ASSERT_OK(hurray_buffer_release(&out));
  EXPECT_EQ(src.log.calls.load(), 1);
}

TEST(Share, OutMayBeTheSourceItself) {
  HandleSource src;
  hurray_buffer h = src.handle(dense({2}));
  const hurray_buffer orig = h;
  ASSERT_OK(hurray_share(&h, 1, &h));
  EXPECT_TRUE(same_bytes(h, orig));

  hurray_buffer arr[3];
  arr[0] = h;
  ASSERT_OK(hurray_share(&arr[0], 3, arr));
  for (int i = 0; i < 3; ++i) {
    expect_same_memory(arr[i], orig);
    EXPECT_NE(arr[i].release_fn, nullptr);
  }
  for (int i = 0; i < 3; ++i) ASSERT_OK(hurray_buffer_release(&arr[i]));
  EXPECT_EQ(src.log.calls.load(), 1);
}

TEST(Share, ZeroDimAndZeroSizeHandlesShare) {
  for (Layout l : {dense({}), dense({0, 7})}) {
    SCOPED_TRACE(describe(l));
    l.null_data = l.ndim() > 0;
    HandleSource src;
    hurray_buffer h = src.handle(l);
    hurray_buffer out[2];
    ASSERT_OK(hurray_share(&h, 2, out));
    ASSERT_OK(hurray_buffer_release(&out[0]));
    ASSERT_OK(hurray_buffer_release(&out[1]));
    EXPECT_EQ(src.log.calls.load(), 1);
  }
}

// ----- failures consume nothing -------------------------------------------------

struct Rejected {
  const char *name;
  size_t n;
  int32_t status;
  const char *mention;
};

TEST(Share, FailuresConsumeNothingAndLeaveOutUntouched) {
  const Rejected cases[] = {
      {"n == 0", 0, HURRAY_ERR_INVALID_ARGUMENT, "n is"},
      {"n > 2^32", (size_t{1} << 32) + 1, HURRAY_ERR_INVALID_ARGUMENT, "n is"},
      {"n == SIZE_MAX", SIZE_MAX, HURRAY_ERR_INVALID_ARGUMENT, "n is"},
  };
  for (const Rejected &c : cases) {
    SCOPED_TRACE(c.name);
    HandleSource src;
    hurray_buffer h = src.handle(dense({2}));
    const hurray_buffer before = h;
    hurray_buffer out[2] = {sentinel_handle(), sentinel_handle()};
    EXPECT_STATUS(hurray_share(&h, c.n, out), c.status);
    EXPECT_TRUE(LastErrorMentions(c.mention));
    EXPECT_TRUE(same_bytes(h, before));
    EXPECT_TRUE(same_bytes(out[0], sentinel_handle()));
    EXPECT_TRUE(same_bytes(out[1], sentinel_handle()));
    EXPECT_EQ(src.log.calls.load(), 0);
    ASSERT_OK(hurray_buffer_release(&h));
    EXPECT_EQ(src.log.calls.load(), 1);
  }
}

TEST(Share, NullArguments) {
  HandleSource src;
  hurray_buffer h = src.handle(dense({2}));
  const hurray_buffer before = h;
  EXPECT_STATUS(hurray_share(&h, 2, nullptr), HURRAY_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(LastErrorMentions("out"));
  EXPECT_TRUE(same_bytes(h, before));
  hurray_buffer out[2] = {sentinel_handle(), sentinel_handle()};
  EXPECT_STATUS(hurray_share(nullptr, 2, out), HURRAY_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(LastErrorMentions("src"));
  EXPECT_TRUE(same_bytes(out[0], sentinel_handle()));
  EXPECT_EQ(src.log.calls.load(), 0);
  ASSERT_OK(hurray_buffer_release(&h));
}

TEST(Share, EmptyHandleIsRejected) {
  hurray_buffer h;
  std::memset(&h, 0, sizeof h);
  hurray_buffer out[2] = {sentinel_handle(), sentinel_handle()};
  EXPECT_STATUS(hurray_share(&h, 2, out), HURRAY_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(LastErrorMentions("empty"));
  EXPECT_TRUE(is_zeroed(h));
  EXPECT_TRUE(same_bytes(out[0], sentinel_handle()));
  EXPECT_STATUS(hurray_share(&h, 1, out), HURRAY_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(same_bytes(out[0], sentinel_handle()));
}

TEST(Share, InvalidHandlesAreRejectedWithTheirValidationStatus) {
  struct Bad {
    const char *name;
    void (*mutate)(hurray_buffer &);
    int32_t status;
    const char *mention;
  };
  const Bad cases[] = {
      {"version", [](hurray_buffer &h) { h.version = 9; }, HURRAY_ERR_UNSUPPORTED_VERSION,
       "version"},
      {"dtype", [](hurray_buffer &h) { h.dtype.code = 40; }, HURRAY_ERR_UNSUPPORTED_DTYPE,
       "dtype.code"},
      {"device", [](hurray_buffer &h) { h.device.device_type = 0; }, HURRAY_ERR_UNSUPPORTED_DEVICE,
       "device_type"},
      {"ndim", [](hurray_buffer &h) { h.ndim = -1; }, HURRAY_ERR_INVALID_ARGUMENT, "ndim"},
      {"strides", [](hurray_buffer &h) { h.strides = nullptr; }, HURRAY_ERR_INVALID_ARGUMENT,
       "strides"},
      {"byte_offset", [](hurray_buffer &h) { h.byte_offset = UINT64_MAX; }, HURRAY_ERR_OVERFLOW,
       "byte_offset"},
  };
  for (const Bad &c : cases) {
    for (size_t n : {size_t{1}, size_t{3}}) {
      SCOPED_TRACE(std::string(c.name) + " n=" + std::to_string(n));
      HandleSource src;
      hurray_buffer h = src.handle(dense({2}));
      c.mutate(h);
      const hurray_buffer before = h;
      hurray_buffer out[3] = {sentinel_handle(), sentinel_handle(), sentinel_handle()};
      EXPECT_STATUS(hurray_share(&h, n, out), c.status);
      EXPECT_TRUE(LastErrorMentions(c.mention));
      EXPECT_TRUE(same_bytes(h, before));
      for (const hurray_buffer &o : out) EXPECT_TRUE(same_bytes(o, sentinel_handle()));
      EXPECT_EQ(src.log.calls.load(), 0);
    }
  }
}

TEST(Share, WorksOnAllocatedMemory) {
  const int64_t shape[] = {16, 16};
  hurray_buffer h;
  ASSERT_OK(hurray_alloc(hurray_device{HURRAY_DEVICE_CPU, 0}, f32(), 2, shape, 0, &h));
  hurray_buffer out[5];
  ASSERT_OK(hurray_share(&h, 5, out));
  // Every consumer sees the same writable memory.
  static_cast<float *>(out[0].data)[255] = 42.0f;
  EXPECT_EQ(static_cast<const float *>(out[4].data)[255], 42.0f);
  for (hurray_buffer &o : out) ASSERT_OK(hurray_buffer_release(&o));
  // LeakSanitizer reports if the allocation was not freed.
}

}  // namespace

namespace {

// An imported handle is shared without a second check only while it still
// describes its tensor exactly (spec §3.4): a changed field is checked again
// and rejected with the exact check's status, the handle left untouched.
TEST(Share, ChangedImportedHandleIsValidatedAgain) {
  using namespace hurray_test;
  Layout l;
  l.shape = {2, 3};
  l.strides = {3, 1};
  DeleterLog log;
  DLManagedTensorVersioned *t = make_versioned(log, l);
  hurray_buffer h;
  ASSERT_EQ(hurray_from_dlpack_versioned(t, HURRAY_IMPORT_DEFAULT, &h), HURRAY_OK);
  hurray_buffer out[2];
  hurray_buffer bad = h;
  bad.dtype.bits = 7;  // not a float width: the tensor still says 32
  EXPECT_EQ(hurray_share(&bad, 2, out), HURRAY_ERR_UNSUPPORTED_DTYPE);
  EXPECT_EQ(bad.release_fn, h.release_fn);  // not consumed
  bad = h;
  bad.ndim = 65;
  EXPECT_EQ(hurray_share(&bad, 2, out), HURRAY_ERR_INVALID_ARGUMENT);
  // Unchanged: shared, and the tensor is deleted once after both releases.
  ASSERT_EQ(hurray_share(&h, 2, out), HURRAY_OK);
  EXPECT_EQ(hurray_buffer_release(&out[0]), HURRAY_OK);
  EXPECT_EQ(log.calls.load(), 0);
  EXPECT_EQ(hurray_buffer_release(&out[1]), HURRAY_OK);
  EXPECT_EQ(log.calls.load(), 1);
}

}  // namespace
