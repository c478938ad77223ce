// SPDX-License-Identifier: Apache-2.0
// Batched DLPack conversion: hurray_from_dlpack[_versioned]_n and
// hurray_to_dlpack[_versioned]_n (src/api/dlpack_import.cc,
// src/api/dlpack_export.cc, c-ffi §5.1): all or nothing, the failing index
// reported, validation as strict as the single calls'.
#include <algorithm>
#include <cstring>
#include <numeric>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "hurray_test_support.h"

namespace {

using namespace hurray_test;

// n versioned tensors of a few layouts, each with its own deleter log.
struct VersionedBatch {
  std::vector<DeleterLog> logs;
  std::vector<DLManagedTensorVersioned *> ts;
  // Every preserved layout in turn, or (`varied` false) all 2x3 float32.
  explicit VersionedBatch(size_t n, bool varied = true) : logs(n), ts(n) {
    const std::vector<Layout> layouts = preserved_layouts();
    for (size_t i = 0; i < n; ++i) {
      ts[i] = make_versioned(logs[i], varied ? layouts[i % layouts.size()] : dense({2, 3}));
    }
  }
  int deleted() const {
    int c = 0;
    for (const DeleterLog &l : logs) c += l.calls.load();
    return c;
  }
  void delete_all() {
    for (DLManagedTensorVersioned *t : ts) t->deleter(t);
  }
};

struct LegacyBatch {
  std::vector<DeleterLog> logs;
  std::vector<DLManagedTensor *> ts;
  explicit LegacyBatch(size_t n) : logs(n), ts(n) {
    for (size_t i = 0; i < n; ++i)
      ts[i] = make_legacy(logs[i], dense({2, static_cast<int64_t>(i + 1)}));
  }
  int deleted() const {
    int c = 0;
    for (const DeleterLog &l : logs) c += l.calls.load();
    return c;
  }
};

// ----- import: success -------------------------------------------------------

TEST(ImportBatch, EveryTensorBecomesItsHandleAndEachDeleterRunsOnce) {
  for (size_t n : {1u, 4u, 8u, 32u, 60u}) {
    SCOPED_TRACE("n " + std::to_string(n));
    VersionedBatch b(n);
    const std::vector<Layout> layouts = preserved_layouts();
    std::vector<hurray_buffer> out(n);
    size_t failed = 12345;
    ASSERT_OK(
        hurray_from_dlpack_versioned_n(b.ts.data(), n, HURRAY_IMPORT_DEFAULT, out.data(), &failed));
    EXPECT_EQ(failed, 12345u) << "written only on failure";
    for (size_t i = 0; i < n; ++i) {
      SCOPED_TRACE(i);
      const Layout &l = layouts[i % layouts.size()];
      // No strides block where the tensor has strides: user_data is the tensor.
      if (l.has_strides || l.ndim() == 0) {
        EXPECT_EQ(out[i].user_data, b.ts[i]);
      }
      ExpectHandleIs(out[i], l, b.ts[i]->dl_tensor.data, l.flags);
      // Same as the single import: shape/strides point into the tensor.
      if (l.ndim() > 0 && l.has_strides) {
        EXPECT_EQ(out[i].shape, b.ts[i]->dl_tensor.shape);
      }
    }
    EXPECT_EQ(b.deleted(), 0);
    for (size_t i = 0; i < n; ++i) {
      ASSERT_OK(hurray_buffer_release(&out[i]));
      EXPECT_EQ(b.logs[i].calls.load(), 1);
      EXPECT_EQ(b.logs[i].last_arg.load(), b.ts[i]);
    }
    EXPECT_EQ(b.deleted(), static_cast<int>(n));
  }
}

TEST(ImportBatch, OldMinorsWithoutStridesGetCompactStridesPerTensor) {
  // Tensors of minor 1 without strides need a strides block each; mixed with
  // ordinary ones.
  std::vector<DeleterLog> logs(5);
  std::vector<DLManagedTensorVersioned *> ts;
  for (size_t i = 0; i < 5; ++i) {
    Layout l = dense({3, static_cast<int64_t>(i + 2)});
    l.has_strides = i % 2 == 0 ? false : true;
    ts.push_back(make_versioned(logs[i], l, 1, 1));
  }
  hurray_buffer out[5];
  ASSERT_OK(hurray_from_dlpack_versioned_n(ts.data(), 5, 0, out, nullptr));
  for (size_t i = 0; i < 5; ++i) {
    ExpectDims(out[i].ndim, out[i].shape, out[i].strides, {3, static_cast<int64_t>(i + 2)},
               {static_cast<int64_t>(i + 2), 1});
  }
  for (size_t i = 5; i-- > 0;) {
    ASSERT_OK(hurray_buffer_release(&out[i]));
    EXPECT_EQ(logs[i].calls.load(), 1);
  }
}

TEST(ImportBatch, LegacyTensorsToo) {
  LegacyBatch b(6);
  hurray_buffer out[6];
  ASSERT_OK(hurray_from_dlpack_n(b.ts.data(), 6, 0, out, nullptr));
  for (size_t i = 0; i < 6; ++i) {
    EXPECT_EQ(out[i].flags, 0u);
    EXPECT_EQ(out[i].shape[1], static_cast<int64_t>(i + 1));
  }
  for (hurray_buffer &h : out) ASSERT_OK(hurray_buffer_release(&h));
  EXPECT_EQ(b.deleted(), 6);
}

TEST(ImportBatch, ZeroTensorsIsANoOp) {
  hurray_buffer out = sentinel_handle();
  size_t failed = 7;
  EXPECT_OK(hurray_from_dlpack_versioned_n(nullptr, 0, 0, nullptr, &failed));
  EXPECT_OK(hurray_from_dlpack_n(nullptr, 0, 0, &out, nullptr));
  EXPECT_OK(hurray_to_dlpack_versioned_n(nullptr, 0, nullptr, &failed));
  EXPECT_OK(hurray_to_dlpack_n(nullptr, 0, nullptr, nullptr));
  EXPECT_EQ(failed, 7u);
  EXPECT_TRUE(same_bytes(out, sentinel_handle()));
}

// ----- import: failures consume nothing --------------------------------------

// A batch of n whose tensor `bad` was made bad by `mutate`: the call fails
// with `status`, the message names ts[bad] and `mention`, failed_index is
// bad, out is untouched and no deleter ran; the caller deletes them all.
void expect_batch_rejected(size_t n, size_t bad, void (*mutate)(DLManagedTensorVersioned *),
                           int32_t status, const char *mention,
                           uint32_t options = HURRAY_IMPORT_DEFAULT) {
  VersionedBatch b(n, false);
  mutate(b.ts[bad]);
  std::vector<DLManagedTensorVersioned> before(n);
  for (size_t i = 0; i < n; ++i) std::memcpy(&before[i], b.ts[i], sizeof before[i]);
  std::vector<hurray_buffer> out(n, sentinel_handle());
  size_t failed = 99999;
  EXPECT_STATUS(hurray_from_dlpack_versioned_n(b.ts.data(), n, options, out.data(), &failed),
                status);
  const std::string prefix = "ts[" + std::to_string(bad) + "]";
  EXPECT_TRUE(LastErrorMentions(prefix.c_str()));
  EXPECT_TRUE(LastErrorMentions(mention));
  EXPECT_EQ(failed, bad);
  for (size_t i = 0; i < n; ++i) {
    EXPECT_TRUE(same_bytes(out[i], sentinel_handle())) << "out[" << i << "] untouched";
    EXPECT_EQ(std::memcmp(&before[i], b.ts[i], sizeof before[i]), 0) << "ts[" << i << "] unchanged";
  }
  EXPECT_EQ(b.deleted(), 0) << "nothing consumed";
  b.delete_all();
  EXPECT_EQ(b.deleted(), static_cast<int>(n));
}

TEST(ImportBatch, ABadTensorFirstInTheMiddleOrLastFailsTheWholeBatch) {
  struct Bad {
    const char *name;
    void (*mutate)(DLManagedTensorVersioned *);
    int32_t status;
    const char *mention;
  };
  const std::vector<Bad> bads = {
      {"negative extent",
       [](DLManagedTensorVersioned *t) {
         t->dl_tensor.ndim = 2;
         t->dl_tensor.shape[1] = -3;
       },
       HURRAY_ERR_INVALID_ARGUMENT, ".dl_tensor.shape[1] is -3"},
      {"major 2", [](DLManagedTensorVersioned *t) { t->version.major = 2; },
       HURRAY_ERR_UNSUPPORTED_VERSION, ".version is 2.3"},
      {"dtype", [](DLManagedTensorVersioned *t) { t->dl_tensor.dtype.code = 99; },
       HURRAY_ERR_UNSUPPORTED_DTYPE, ".dl_tensor.dtype.code is 99"},
      {"device",
       [](DLManagedTensorVersioned *t) {
         t->dl_tensor.device.device_type = static_cast<DLDeviceType>(5);
       },
       HURRAY_ERR_UNSUPPORTED_DEVICE, "device_type is 5"},
      {"overflow", [](DLManagedTensorVersioned *t) { t->dl_tensor.byte_offset = UINT64_MAX; },
       HURRAY_ERR_OVERFLOW, "byte_offset"},
      {"NULL strides at minor 3",
       [](DLManagedTensorVersioned *t) {
         t->dl_tensor.ndim = 2;
         t->dl_tensor.strides = nullptr;
       },
       HURRAY_ERR_INVALID_ARGUMENT, ".dl_tensor.strides is NULL"},
  };
  for (const Bad &bad : bads) {
    for (size_t n : {1u, 8u}) {
      for (size_t at : {size_t{0}, n / 2, n - 1}) {
        SCOPED_TRACE(std::string(bad.name) + ", n " + std::to_string(n) + ", at " +
                     std::to_string(at));
        expect_batch_rejected(n, at, bad.mutate, bad.status, bad.mention);
      }
    }
  }
}

TEST(ImportBatch, MessagesAreTheSingleImportsWithTheIndex) {
  // Every malformed tensor of the single import's suite, at index 2 of 4:
  // the same status, the same message with "tensor" replaced by "ts[2]".
  DeleterLog single_log;
  DLManagedTensorVersioned *single = make_versioned(single_log, dense({2, 3}));
  single->dl_tensor.shape[1] = -3;
  hurray_buffer out1;
  ASSERT_STATUS(hurray_from_dlpack_versioned(single, 0, &out1), HURRAY_ERR_INVALID_ARGUMENT);
  std::string want = hurray_last_error();
  ASSERT_EQ(want.rfind("tensor", 0), 0u) << want;
  want.replace(0, 6, "ts[2]");

  VersionedBatch b(4, false);
  std::swap(b.ts[2], single);  // the batch now owns the bad one
  hurray_buffer out[4];
  EXPECT_STATUS(hurray_from_dlpack_versioned_n(b.ts.data(), 4, 0, out, nullptr),
                HURRAY_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(std::string(hurray_last_error()), want);
  b.delete_all();
  single->deleter(single);
}

TEST(ImportBatch, NullArraysNullElementsAndOptions) {
  VersionedBatch b(3, false);
  hurray_buffer out[3] = {sentinel_handle(), sentinel_handle(), sentinel_handle()};
  size_t failed = 0;
  EXPECT_STATUS(hurray_from_dlpack_versioned_n(nullptr, 3, 0, out, &failed),
                HURRAY_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(LastErrorMentions("ts is NULL while n is 3"));
  EXPECT_EQ(failed, HURRAY_BATCH_NO_INDEX);
  failed = 0;
  EXPECT_STATUS(hurray_from_dlpack_versioned_n(b.ts.data(), 3, 0, nullptr, &failed),
                HURRAY_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(LastErrorMentions("out is NULL while n is 3"));
  EXPECT_EQ(failed, HURRAY_BATCH_NO_INDEX);
  failed = 0;
  EXPECT_STATUS(hurray_from_dlpack_versioned_n(b.ts.data(), 3, 0x80, out, &failed),
                HURRAY_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(LastErrorMentions("options 0x80 has unknown bits"));
  EXPECT_EQ(failed, HURRAY_BATCH_NO_INDEX);
  DLManagedTensorVersioned *keep = b.ts[1];
  b.ts[1] = nullptr;
  EXPECT_STATUS(hurray_from_dlpack_versioned_n(b.ts.data(), 3, 0, out, &failed),
                HURRAY_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(LastErrorMentions("ts[1] is NULL"));
  EXPECT_EQ(failed, 1u);
  b.ts[1] = keep;
  // NULL failed_index is fine.
  b.ts[2]->dl_tensor.dtype.lanes = 0;
  EXPECT_STATUS(hurray_from_dlpack_versioned_n(b.ts.data(), 3, 0, out, nullptr),
                HURRAY_ERR_UNSUPPORTED_DTYPE);
  EXPECT_TRUE(LastErrorMentions("ts[2].dl_tensor.dtype.lanes is 0"));
  for (const hurray_buffer &h : out) EXPECT_TRUE(same_bytes(h, sentinel_handle()));
  EXPECT_EQ(b.deleted(), 0);
  b.delete_all();
}

TEST(ImportBatch, AFailureAfterTensorsThatNeedStridesBlocksFreesThem) {
  // ts[0] and ts[1] (minor 1, no strides) get strides blocks in the check
  // pass; ts[2] fails: the blocks are freed (ASan's leak check sees it),
  // nothing consumed.
  std::vector<DeleterLog> logs(3);
  Layout l = dense({3, 4});
  l.has_strides = false;
  std::vector<DLManagedTensorVersioned *> ts = {make_versioned(logs[0], l, 1, 1),
                                                make_versioned(logs[1], l, 1, 0),
                                                make_versioned(logs[2], dense({2}))};
  ts[2]->dl_tensor.ndim = -1;
  hurray_buffer out[3];
  size_t failed = 0;
  EXPECT_STATUS(hurray_from_dlpack_versioned_n(ts.data(), 3, 0, out, &failed),
                HURRAY_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(failed, 2u);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(logs[static_cast<size_t>(i)].calls.load(), 0);
  for (DLManagedTensorVersioned *t : ts) t->deleter(t);
}

TEST(ImportBatch, LegacyFailuresNameTheIndex) {
  LegacyBatch b(5);
  b.ts[4]->dl_tensor.data = nullptr;
  hurray_buffer out[5];
  size_t failed = 0;
  EXPECT_STATUS(hurray_from_dlpack_n(b.ts.data(), 5, 0, out, &failed), HURRAY_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(LastErrorMentions("ts[4].dl_tensor.data is NULL"));
  EXPECT_EQ(failed, 4u);
  EXPECT_EQ(b.deleted(), 0);
  for (DLManagedTensor *t : b.ts) t->deleter(t);
}

// ----- export ----------------------------------------------------------------

TEST(ExportBatch, EveryHandleBecomesItsTensorWithItsOwnDeleter) {
  for (size_t n : {1u, 4u, 8u, 32u}) {
    SCOPED_TRACE("n " + std::to_string(n));
    std::vector<HandleSource> srcs(n);
    std::vector<hurray_buffer> hs(n);
    const std::vector<Layout> layouts = preserved_layouts();
    for (size_t i = 0; i < n; ++i) hs[i] = srcs[i].handle(layouts[i % layouts.size()]);
    std::vector<DLManagedTensorVersioned *> out(n, nullptr);
    ASSERT_OK(hurray_to_dlpack_versioned_n(hs.data(), n, out.data(), nullptr));
    for (size_t i = 0; i < n; ++i) {
      SCOPED_TRACE(i);
      const Layout &l = layouts[i % layouts.size()];
      EXPECT_TRUE(is_zeroed(hs[i])) << "consumed";
      EXPECT_EQ(out[i]->version.major, 1u);
      EXPECT_EQ(out[i]->version.minor, 3u);
      EXPECT_EQ(out[i]->flags, l.flags);
      ExpectTensorIs(out[i]->dl_tensor, l, l.null_data ? nullptr : srcs[i].bytes);
    }
    // Deleters in a shuffled order, each releasing only its own handle.
    std::vector<size_t> order(n);
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), std::mt19937(static_cast<unsigned>(n)));
    for (size_t i : order) {
      EXPECT_EQ(srcs[i].log.calls.load(), 0);
      out[i]->deleter(out[i]);
      EXPECT_EQ(srcs[i].log.calls.load(), 1);
    }
  }
}

TEST(ExportBatch, LegacyDropsFlags) {
  HandleSource a, b;
  Layout l = dense({3});
  l.flags = HURRAY_FLAG_READ_ONLY;
  hurray_buffer hs[2] = {a.handle(l), b.handle(dense({2, 2}))};
  DLManagedTensor *out[2];
  ASSERT_OK(hurray_to_dlpack_n(hs, 2, out, nullptr));
  EXPECT_EQ(out[0]->dl_tensor.shape[0], 3);
  EXPECT_EQ(out[1]->dl_tensor.ndim, 2);
  out[1]->deleter(out[1]);
  out[0]->deleter(out[0]);
  EXPECT_EQ(a.log.calls.load(), 1);
  EXPECT_EQ(b.log.calls.load(), 1);
}

TEST(ExportBatch, ABadHandleFirstInTheMiddleOrLastConsumesNothing) {
  for (size_t n : {1u, 5u}) {
    for (size_t at : {size_t{0}, n / 2, n - 1}) {
      SCOPED_TRACE("n " + std::to_string(n) + " at " + std::to_string(at));
      std::vector<HandleSource> srcs(n);
      std::vector<hurray_buffer> hs(n);
      for (size_t i = 0; i < n; ++i) hs[i] = srcs[i].handle(dense({2, 3}));
      // A shared one before the bad one: its block must not be consumed either.
      if (at > 0) {
        ASSERT_OK(hurray_share(&hs[0], 1, &hs[0]));
      }
      hs[at].dtype.bits = 7;
      const std::vector<hurray_buffer> before = hs;
      std::vector<DLManagedTensorVersioned *> out(n, sentinel_ptr<DLManagedTensorVersioned>());
      size_t failed = 0;
      EXPECT_STATUS(hurray_to_dlpack_versioned_n(hs.data(), n, out.data(), &failed),
                    HURRAY_ERR_UNSUPPORTED_DTYPE);
      const std::string want = "src[" + std::to_string(at) + "].dtype.bits is 7";
      EXPECT_TRUE(LastErrorMentions(want.c_str()));
      EXPECT_EQ(failed, at);
      for (size_t i = 0; i < n; ++i) {
        EXPECT_TRUE(same_bytes(hs[i], before[i])) << "src[" << i << "] unchanged";
        EXPECT_EQ(out[i], sentinel_ptr<DLManagedTensorVersioned>()) << "out[" << i << "]";
      }
      for (size_t i = 0; i < n; ++i) {
        EXPECT_EQ(srcs[i].log.calls.load(), 0);
        ASSERT_OK(hurray_buffer_release(&hs[i]));
        EXPECT_EQ(srcs[i].log.calls.load(), 1);
      }
    }
  }
}

TEST(ExportBatch, EmptyHandlesAndNullArrays) {
  HandleSource a;
  hurray_buffer hs[2] = {a.handle(dense({2})), {}};
  DLManagedTensorVersioned *out[2] = {nullptr, nullptr};
  size_t failed = 0;
  EXPECT_STATUS(hurray_to_dlpack_versioned_n(hs, 2, out, &failed), HURRAY_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(LastErrorMentions("src[1] is empty"));
  EXPECT_EQ(failed, 1u);
  EXPECT_STATUS(hurray_to_dlpack_versioned_n(nullptr, 2, out, &failed),
                HURRAY_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(LastErrorMentions("src is NULL while n is 2"));
  EXPECT_EQ(failed, HURRAY_BATCH_NO_INDEX);
  EXPECT_STATUS(hurray_to_dlpack_n(hs, 1, nullptr, &failed), HURRAY_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(LastErrorMentions("out is NULL while n is 1"));
  hs[1] = hs[0];
  hs[1].version = 9;
  DLManagedTensor *lout[2];
  EXPECT_STATUS(hurray_to_dlpack_n(hs, 2, lout, &failed), HURRAY_ERR_UNSUPPORTED_VERSION);
  EXPECT_TRUE(LastErrorMentions("src[1].version is 9"));
  EXPECT_EQ(a.log.calls.load(), 0);
  ASSERT_OK(hurray_buffer_release(&hs[0]));
  EXPECT_EQ(a.log.calls.load(), 1);
}

// ----- round trips -----------------------------------------------------------

TEST(BatchRoundTrip, ImportThenExportGivesTheOriginalTensorsBack) {
  VersionedBatch b(8);
  hurray_buffer hs[8];
  ASSERT_OK(hurray_from_dlpack_versioned_n(b.ts.data(), 8, 0, hs, nullptr));
  DLManagedTensorVersioned *back[8];
  ASSERT_OK(hurray_to_dlpack_versioned_n(hs, 8, back, nullptr));
  for (size_t i = 0; i < 8; ++i) EXPECT_EQ(back[i], b.ts[i]) << "unwrapped, not wrapped";
  for (size_t i = 0; i < 8; ++i) back[i]->deleter(back[i]);
  EXPECT_EQ(b.deleted(), 8);
}

TEST(BatchRoundTrip, ExportThenImportGivesTheOriginalHandlesBack) {
  constexpr size_t kN = 6;
  std::vector<HandleSource> srcs(kN);
  hurray_buffer hs[kN], orig[kN];
  for (size_t i = 0; i < kN; ++i)
    orig[i] = hs[i] = srcs[i].handle(dense({static_cast<int64_t>(i + 1)}));
  // One of them shared first, so the batch holds a share-block handle too.
  hurray_buffer extra;
  hurray_buffer two[2];
  ASSERT_OK(hurray_share(&hs[3], 2, two));
  hs[3] = two[0];
  extra = two[1];
  orig[3] = hs[3];
  DLManagedTensorVersioned *ts[kN];
  ASSERT_OK(hurray_to_dlpack_versioned_n(hs, kN, ts, nullptr));
  hurray_buffer again[kN];
  ASSERT_OK(hurray_from_dlpack_versioned_n(ts, kN, 0, again, nullptr));
  for (size_t i = 0; i < kN; ++i) EXPECT_TRUE(same_bytes(again[i], orig[i])) << i;
  // Legacy, the same way.
  DLManagedTensor *lts[kN];
  ASSERT_OK(hurray_to_dlpack_n(again, kN, lts, nullptr));
  ASSERT_OK(hurray_from_dlpack_n(lts, kN, 0, hs, nullptr));
  for (size_t i = 0; i < kN; ++i) EXPECT_TRUE(same_bytes(hs[i], orig[i])) << i;
  for (size_t i = 0; i < kN; ++i) {
    ASSERT_OK(hurray_buffer_release(&hs[i]));
    EXPECT_EQ(srcs[i].log.calls.load(), i == 3 ? 0 : 1);
  }
  ASSERT_OK(hurray_buffer_release(&extra));
  EXPECT_EQ(srcs[3].log.calls.load(), 1);
}

TEST(BatchRoundTrip, ReleasedFromManyThreadsInAnyOrder) {
  constexpr size_t kN = 32;
  for (int round = 0; round < 20; ++round) {
    VersionedBatch b(kN);
    std::vector<hurray_buffer> hs(kN);
    ASSERT_OK(hurray_from_dlpack_versioned_n(b.ts.data(), kN, 0, hs.data(), nullptr));
    // Half exported again as a batch (through a share, so a wrapper is made),
    // half released as handles; all from 4 threads.
    std::vector<hurray_buffer> shared(kN / 2);
    for (size_t i = 0; i < kN / 2; ++i) ASSERT_OK(hurray_share(&hs[i], 1, &shared[i]));
    std::vector<DLManagedTensorVersioned *> ts(kN / 2);
    ASSERT_OK(hurray_to_dlpack_versioned_n(shared.data(), kN / 2, ts.data(), nullptr));
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t) {
      threads.emplace_back([&, t] {
        for (size_t i = static_cast<size_t>(t); i < kN; i += 4) {
          if (i < kN / 2) {
            ts[i]->deleter(ts[i]);
          } else {
            (void)hurray_buffer_release(&hs[i]);
          }
        }
      });
    }
    for (std::thread &t : threads) t.join();
    for (size_t i = 0; i < kN; ++i) EXPECT_EQ(b.logs[i].calls.load(), 1) << i;
  }
}

}  // namespace
