// SPDX-License-Identifier: Apache-2.0
// hurray_alloc_group (docs/impl/c-ffi.md §6.2): n tensors in one
// allocation, each its own handle, the memory freed once after the last of
// them in every order and from several threads; each tensor aligned and
// apart; a bad description consumes nothing and is named; a group of
// shareable memory crosses processes as views of one memfd.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <thread>
#include <vector>

#include "hurray/hurray.h"
#include "hurray_test_support.h"
#include "ipc_test_support.h"

namespace {

using namespace hurray_ipc_test;

constexpr hurray_device kCpu{HURRAY_DEVICE_CPU, 0};
const int64_t kMat[2] = {2, 3};
const int64_t kVec[1] = {5};
const int64_t kEmpty[1] = {0};
const int64_t kSquare[2] = {4, 4};

std::vector<hurray_tensor_desc> three() {
  return {
      {{kDLFloat, 32, 1}, 2, kMat, 0},
      {{kDLInt, 8, 1}, 1, kVec, 0},
      {{kDLFloat, 16, 1}, 1, kEmpty, 0},
      {{kDLFloat, 64, 1}, 2, kSquare, HURRAY_FLAG_READ_ONLY},
  };
}

uintptr_t address(const hurray_buffer &h) {
  return reinterpret_cast<uintptr_t>(h.data) + h.byte_offset;
}

TEST(AllocGroup, EachTensorIsAlignedApartAndItsOwnCompactHandle) {
  const auto descs = three();
  hurray_buffer h[4];
  ASSERT_OK(hurray_alloc_group(kCpu, 4, descs.data(), 0, nullptr, h, nullptr));
  uintptr_t end = 0;
  for (int i = 0; i < 4; ++i) {
    SCOPED_TRACE(i);
    ASSERT_OK(hurray_buffer_validate(&h[i]));
    EXPECT_EQ(address(h[i]) % HURRAY_GROUP_ALIGNMENT, 0u);
    hurray_extent e;
    ASSERT_OK(hurray_buffer_extent(&h[i], &e));
    EXPECT_EQ(e.contiguous, 1);
    if (e.numel > 0) {                // a tensor without elements takes no bytes
      EXPECT_GE(address(h[i]), end);  // after the previous tensor's bytes
      end = reinterpret_cast<uintptr_t>(h[i].data) + static_cast<uintptr_t>(e.highest);
    }
    EXPECT_EQ(h[i].ndim, descs[i].ndim);
    EXPECT_EQ(h[i].dtype.code, descs[i].dtype.code);
    EXPECT_EQ(h[i].dtype.bits, descs[i].dtype.bits);
    EXPECT_EQ(h[i].flags & HURRAY_FLAG_READ_ONLY, descs[i].flags);
  }
  // One allocation: the tensors lie within 256 bytes of padding of each other.
  EXPECT_LT(address(h[3]) - address(h[0]), 4u * HURRAY_GROUP_ALIGNMENT);
  static_cast<float *>(h[0].data)[5] = 2.5f;  // the memory is writable
  for (auto &b : h) ASSERT_OK(hurray_buffer_release(&b));
}

TEST(AllocGroup, TheMemoryGoesOnceAfterTheLastHandleInEveryOrder) {
  warm_watcher();
  const auto descs = three();
  std::vector<int> order = {0, 1, 2, 3};
  int orders = 0;
  do {
    SCOPED_TRACE(orders);
    const int maps = count_hurray_memfd_maps();
    hurray_buffer h[4];
    ASSERT_OK(
        hurray_alloc_group(kCpu, 4, descs.data(), HURRAY_ALLOC_SHAREABLE, nullptr, h, nullptr));
    EXPECT_EQ(count_hurray_memfd_maps(), maps + 1);  // one memfd for the whole group
    for (size_t k = 0; k < 3; ++k) {
      ASSERT_OK(hurray_buffer_release(&h[order[k]]));
      EXPECT_EQ(count_hurray_memfd_maps(), maps + 1) << "freed before the last handle";
    }
    ASSERT_OK(hurray_buffer_release(&h[order[3]]));
    EXPECT_EQ(count_hurray_memfd_maps(), maps);
    ++orders;
  } while (std::next_permutation(order.begin(), order.end()));
  EXPECT_EQ(orders, 24);
}

TEST(AllocGroup, ReleasedFromSeveralThreads) {
  warm_watcher();
  std::vector<hurray_tensor_desc> descs(32, hurray_tensor_desc{{kDLFloat, 32, 1}, 1, kVec, 0});
  for (int round = 0; round < 20; ++round) {
    const int maps = count_hurray_memfd_maps();
    std::vector<hurray_buffer> h(32);
    ASSERT_OK(hurray_alloc_group(kCpu, 32, descs.data(), HURRAY_ALLOC_SHAREABLE, nullptr, h.data(),
                                 nullptr));
    std::vector<std::thread> ts;
    for (int t = 0; t < 4; ++t) {
      ts.emplace_back([&, t] {
        for (int i = t; i < 32; i += 4) EXPECT_OK(hurray_buffer_release(&h[i]));
      });
    }
    for (auto &t : ts) t.join();
    EXPECT_EQ(count_hurray_memfd_maps(), maps);
  }
}

TEST(AllocGroup, ABadDescriptionIsNamedAndNothingIsConsumedOrWritten) {
  const int64_t negative[1] = {-1};
  for (size_t at : {size_t{0}, size_t{2}, size_t{3}}) {
    SCOPED_TRACE(at);
    auto descs = three();
    descs[at].shape = negative;
    descs[at].ndim = 1;
    hurray_buffer h[4];
    std::memset(h, 0xab, sizeof h);
    hurray_buffer before[4];
    std::memcpy(before, h, sizeof h);
    size_t bad = 12345;
    EXPECT_STATUS(hurray_alloc_group(kCpu, 4, descs.data(), 0, nullptr, h, &bad),
                  HURRAY_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(bad, at);
    const std::string want = "descs[" + std::to_string(at) + "]";
    EXPECT_NE(std::string(hurray_last_error()).find(want), std::string::npos)
        << hurray_last_error();
    EXPECT_EQ(std::memcmp(h, before, sizeof h), 0);
  }
  auto descs = three();
  descs[1].dtype.bits = 7;  // int7: no such DLPack type
  size_t bad = 0;
  hurray_buffer h[4];
  EXPECT_STATUS(hurray_alloc_group(kCpu, 4, descs.data(), 0, nullptr, h, &bad),
                HURRAY_ERR_UNSUPPORTED_DTYPE);
  EXPECT_EQ(bad, 1u);
  descs = three();
  descs[2].flags = HURRAY_FLAG_IS_COPIED;  // not a flag a description may carry
  EXPECT_STATUS(hurray_alloc_group(kCpu, 4, descs.data(), 0, nullptr, h, &bad),
                HURRAY_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(bad, 2u);
}

TEST(AllocGroup, ArgumentsAndAllocationFailuresNameNoElement) {
  const auto descs = three();
  hurray_buffer h[4];
  size_t bad = 0;
  EXPECT_STATUS(hurray_alloc_group(kCpu, 4, nullptr, 0, nullptr, h, &bad),
                HURRAY_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(bad, HURRAY_BATCH_NO_INDEX);
  EXPECT_STATUS(hurray_alloc_group(kCpu, 4, descs.data(), 0, nullptr, nullptr, &bad),
                HURRAY_ERR_INVALID_ARGUMENT);
  EXPECT_STATUS(hurray_alloc_group(kCpu, 4, descs.data(), uint64_t{1} << 40, nullptr, h, &bad),
                HURRAY_ERR_INVALID_ARGUMENT);  // an unknown allocation option
  EXPECT_EQ(bad, HURRAY_BATCH_NO_INDEX);
  EXPECT_STATUS(hurray_alloc_group(hurray_device{999, 0}, 4, descs.data(), 0, nullptr, h, &bad),
                HURRAY_ERR_UNSUPPORTED_DEVICE);
  bad = 7;
  EXPECT_OK(hurray_alloc_group(kCpu, 0, nullptr, 0, nullptr, nullptr, &bad));  // n == 0
  EXPECT_EQ(bad, 7u);  // written only on failure
}

TEST(AllocGroup, AQuantizedPairOfFp4DataAndE8m0Scales) {
  const int64_t data_shape[2] = {64, 64};
  const int64_t scale_shape[2] = {64, 64 / 32};
  const hurray_tensor_desc pair[2] = {
      {{kDLFloat4_e2m1fn, 4, 1}, 2, data_shape, 0},
      {{kDLFloat8_e8m0fnu, 8, 1}, 2, scale_shape, 0},
  };
  hurray_buffer h[2];
  ASSERT_OK(hurray_alloc_group(kCpu, 2, pair, 0, nullptr, h, nullptr));
  hurray_extent e;
  ASSERT_OK(hurray_buffer_extent(&h[0], &e));
  EXPECT_EQ(e.highest - e.lowest, 64 * 64 / 2);     // packed, two FP4 values a byte
  EXPECT_EQ(address(h[1]) - address(h[0]), 2048u);  // 2048 bytes is a multiple of 256
  // Each goes to DLPack and back as any handle does.
  DLManagedTensorVersioned *t = nullptr;
  const void *data = h[1].data;
  ASSERT_OK(hurray_to_dlpack_versioned(&h[1], &t));
  EXPECT_EQ(t->dl_tensor.dtype.code, kDLFloat8_e8m0fnu);
  ASSERT_OK(hurray_from_dlpack_versioned(t, HURRAY_IMPORT_DEFAULT, &h[1]));
  EXPECT_EQ(h[1].data, data);
  for (auto &b : h) ASSERT_OK(hurray_buffer_release(&b));
}

TEST(AllocGroup, AShareableGroupCrossesAsViewsOfOneMemfd) {
  warm_watcher();
  const auto descs = three();
  hurray_buffer h[4];
  ASSERT_OK(hurray_alloc_group(kCpu, 4, descs.data(), HURRAY_ALLOC_SHAREABLE, nullptr, h, nullptr));
  const uint64_t copies = ipc_copies();
  const uint64_t returns = ipc_returns();
  hurray_buffer two[2];
  ASSERT_OK(hurray_share(&h[1], 2, two));
  hurray_ipc_message m;
  ASSERT_OK(hurray_ipc_export(&two[1], 0, &m));
  ASSERT_EQ(m.nfds, 2u);  // the group's memfd and the lifetime pipe
  hurray_buffer r;
  ASSERT_OK(hurray_ipc_import(&m, &r));
  EXPECT_EQ(ipc_copies(), copies);                       // zero-copy
  static_cast<int8_t *>(r.data)[4] = 42;                 // through the received mapping...
  EXPECT_EQ(static_cast<int8_t *>(two[0].data)[4], 42);  // ...into the group's memory
  ASSERT_OK(hurray_buffer_release(&r));
  ASSERT_TRUE(wait_until([&] { return ipc_returns() == returns + 1; }));
  ASSERT_OK(hurray_buffer_release(&two[0]));
  for (int i : {0, 2, 3}) ASSERT_OK(hurray_buffer_release(&h[i]));
}

}  // namespace
