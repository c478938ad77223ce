// SPDX-License-Identifier: Apache-2.0
// A set of handles in one message, in one process (docs/impl/ipc.md §10):
// a group of 1, 8 and 500 as 2 fds, shares and views of one buffer as one
// region, non-shareable memory copied into one region, each allocation's
// reference back exactly once after the last of its handles (every order,
// several threads), discard, and each entry point's bad input with its
// exact status, message and nothing consumed.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "hurray/hurray.h"
#include "hurray_test_support.h"
#include "ipc_set_support.h"

namespace {

using namespace hurray_ipc_test;

const char *err() { return hurray_last_error(); }

void release_all(std::vector<hurray_buffer> &hs) {
  for (hurray_buffer &h : hs) ASSERT_OK(hurray_buffer_release(&h));
}

// Returns stay at `n` for a while (none late, none twice).
void expect_returns_stay(uint64_t n) {
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  EXPECT_EQ(ipc_returns(), n);
}

TEST(IpcSet, GroupOf1_8_500CrossesAsTwoFdsAndOneMapping) {
  warm_watcher();
  for (size_t n : {size_t{1}, size_t{8}, size_t{500}}) {
    SCOPED_TRACE(n);
    std::vector<hurray_buffer> hs = shareable_group(n);
    std::vector<uintptr_t> at(n);
    for (size_t i = 0; i < n; ++i)
      at[i] = reinterpret_cast<uintptr_t>(hs[i].data) + hs[i].byte_offset;
    const uint64_t returns = ipc_returns();
    const int maps = count_hurray_memfd_maps();
    size_t nfds = 0;
    std::vector<hurray_buffer> out = round_trip(hs, &nfds);
    EXPECT_EQ(nfds, 2u);
    for (const hurray_buffer &h : hs) EXPECT_EQ(h.release_fn, nullptr);  // consumed
    EXPECT_EQ(count_hurray_memfd_maps(), maps + 1);                      // mapped once
    for (size_t i = 0; i < n; ++i) {
      EXPECT_EQ(first(out[i]), static_cast<float>(i));
      // The group's layout, byte for byte: same distances between members.
      EXPECT_EQ(reinterpret_cast<uintptr_t>(out[i].data) + out[i].byte_offset -
                    (reinterpret_cast<uintptr_t>(out[0].data) + out[0].byte_offset),
                at[i] - at[0]);
      EXPECT_EQ(out[i].shape[0], static_cast<int64_t>(i % 7 + 1));
    }
    // A write through the receiver's handle is the sender's memory (one memfd).
    for (size_t i = 0; i + 1 < n; ++i) ASSERT_OK(hurray_buffer_release(&out[i]));
    expect_returns_stay(returns);
    ASSERT_OK(hurray_buffer_release(&out[n - 1]));
    EXPECT_TRUE(wait_until([&] { return ipc_returns() == returns + 1; }));
    expect_returns_stay(returns + 1);
    EXPECT_EQ(count_hurray_memfd_maps(), maps - 1);  // the sender's own mapping went too
  }
}

TEST(IpcSet, EveryReleaseOrderReturnsTheAllocationOnce) {
  warm_watcher();
  std::array<int, 4> order{0, 1, 2, 3};
  int orders = 0;
  do {
    std::vector<hurray_buffer> hs = shareable_group(4);
    const uint64_t returns = ipc_returns();
    size_t nfds = 0;
    std::vector<hurray_buffer> out = round_trip(hs, &nfds);
    ASSERT_EQ(nfds, 2u);
    for (int k = 0; k < 4; ++k) {
      EXPECT_EQ(ipc_returns(), returns);
      ASSERT_OK(hurray_buffer_release(&out[order[k]]));
    }
    EXPECT_TRUE(wait_until([&] { return ipc_returns() == returns + 1; }));
    ++orders;
  } while (std::next_permutation(order.begin(), order.end()));
  EXPECT_EQ(orders, 24);
  expect_returns_stay(ipc_returns());
}

TEST(IpcSet, ReleasesFromEightThreadsReturnOnce) {
  warm_watcher();
  for (int round = 0; round < 5; ++round) {
    std::vector<hurray_buffer> hs = shareable_group(500);
    const uint64_t returns = ipc_returns();
    size_t nfds = 0;
    std::vector<hurray_buffer> out = round_trip(hs, &nfds);
    std::vector<std::thread> ts;
    for (int t = 0; t < 8; ++t) {
      ts.emplace_back([&out, t] {
        for (size_t i = static_cast<size_t>(t); i < out.size(); i += 8) {
          if (hurray_buffer_release(&out[i]) != HURRAY_OK) std::abort();
        }
      });
    }
    for (std::thread &t : ts) t.join();
    EXPECT_TRUE(wait_until([&] { return ipc_returns() == returns + 1; }));
    expect_returns_stay(returns + 1);
  }
}

TEST(IpcSet, SharesAndViewsOfOneBufferAreOneRegion) {
  warm_watcher();
  hurray_buffer a = shareable(64), b = shareable(8);
  for (int i = 0; i < 64; ++i) static_cast<float *>(a.data)[i] = static_cast<float>(i);
  static_cast<float *>(b.data)[0] = 100.0f;
  std::vector<hurray_buffer> hs(5);
  ASSERT_OK(hurray_share(&a, 3, hs.data()));
  const int64_t shape[1] = {4};
  const hurray_view_desc v{
      16 * sizeof(float), 0, hurray_device{0, 0}, hurray_dtype{kDLFloat, 32, 1}, 1, shape, nullptr};
  ASSERT_OK(hurray_view(&hs[2], &v, &hs[2]));
  ASSERT_OK(hurray_share(&b, 2, &hs[3]));
  const uint64_t returns = ipc_returns();
  const int maps = count_hurray_memfd_maps();
  size_t nfds = 0;
  std::vector<hurray_buffer> out = round_trip(hs, &nfds);
  EXPECT_EQ(nfds, 4u);  // two allocations, two fds each
  EXPECT_EQ(count_hurray_memfd_maps(), maps + 2);
  EXPECT_EQ(out[0].data, out[1].data);  // one mapping for the shares
  EXPECT_EQ(first(out[2]), 16.0f);
  EXPECT_EQ(out[2].shape[0], 4);
  EXPECT_EQ(static_cast<char *>(out[2].data) + out[2].byte_offset,
            static_cast<char *>(out[0].data) + out[0].byte_offset + 64);
  EXPECT_EQ(first(out[3]), 100.0f);
  static_cast<float *>(out[0].data)[1] = 7.0f;  // the sender's pages
  EXPECT_EQ(first(out[1]) + static_cast<float *>(out[1].data)[1], 7.0f);
  release_all(out);
  EXPECT_TRUE(wait_until([&] { return ipc_returns() == returns + 2; }));
  expect_returns_stay(returns + 2);
}

TEST(IpcSet, NonShareableMembersAreCopiedIntoOneRegion) {
  warm_watcher();
  std::vector<hurray_buffer> hs(5);
  const int64_t shape[2] = {3, 5};
  for (int i = 0; i < 3; ++i) {
    ASSERT_OK(hurray_alloc(hurray_device{HURRAY_DEVICE_CPU, 0}, hurray_dtype{kDLFloat, 32, 1}, 2,
                           shape, 0, &hs[i]));
    for (int k = 0; k < 15; ++k)
      static_cast<float *>(hs[i].data)[k] = static_cast<float>(10 * i + k);
  }
  std::vector<hurray_buffer> g = shareable_group(2);
  hs[3] = g[0];
  hs[4] = g[1];
  // HURRAY_IPC_ZERO_COPY_ONLY refuses the first that needs a copy, nothing consumed.
  std::vector<hurray_buffer> before = hs;
  hurray_ipc_set_message *m = nullptr;
  size_t bad = 99;
  EXPECT_STATUS(hurray_ipc_export_set(hs.data(), hs.size(), HURRAY_IPC_ZERO_COPY_ONLY, &m, &bad),
                HURRAY_ERR_UNSUPPORTED_DEVICE);
  EXPECT_EQ(bad, 0u);
  EXPECT_EQ(m, nullptr);
  EXPECT_NE(std::string(err()).find("srcs[0]: HURRAY_IPC_ZERO_COPY_ONLY"), std::string::npos)
      << err();
  EXPECT_EQ(0, std::memcmp(before.data(), hs.data(), sizeof(hurray_buffer) * hs.size()));

  const uint64_t copies = ipc_copies(), returns = ipc_returns();
  size_t nfds = 0;
  std::vector<hurray_buffer> out = round_trip(hs, &nfds);
  EXPECT_EQ(nfds, 4u);  // the group, and one region for all three copies
  EXPECT_EQ(ipc_copies(), copies + 3);
  for (int i = 0; i < 3; ++i) {
    EXPECT_NE(out[i].flags & HURRAY_FLAG_IS_COPIED, 0u);
    EXPECT_EQ(out[i].ndim, 2);
    EXPECT_EQ(out[i].strides[0], 5);
    const char *p = static_cast<const char *>(out[i].data) + out[i].byte_offset;
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % HURRAY_GROUP_ALIGNMENT, 0u);
    for (int k = 0; k < 15; ++k) EXPECT_EQ(reinterpret_cast<const float *>(p)[k], 10 * i + k);
  }
  EXPECT_EQ(out[3].flags & HURRAY_FLAG_IS_COPIED, 0u);
  EXPECT_EQ(first(out[4]), 1.0f);
  release_all(out);
  EXPECT_TRUE(wait_until([&] { return ipc_returns() == returns + 2; }));
}

TEST(IpcSet, DiscardGivesEveryAllocationBack) {
  warm_watcher();
  std::vector<hurray_buffer> hs = shareable_group(8);
  hs.push_back(shareable(4));
  const uint64_t returns = ipc_returns();
  const int fds = count_fds();
  hurray_ipc_set_message *m = nullptr;
  ASSERT_OK(hurray_ipc_export_set(hs.data(), hs.size(), 0, &m, nullptr));
  EXPECT_EQ(count_fds(), fds + 6);  // per region: memfd, lifetime write end, read end
  ASSERT_OK(hurray_ipc_set_message_discard(m));
  EXPECT_TRUE(wait_until([&] { return ipc_returns() == returns + 2; }));
  EXPECT_EQ(count_fds(), fds - 2);  // and the two allocations' own memfds, freed
  EXPECT_OK(hurray_ipc_set_message_discard(nullptr));
}

TEST(IpcSet, ExportSetRefusesBadInputConsumingNothing) {
  hurray_ipc_set_message *m = nullptr;
  size_t bad = 0;
  std::vector<hurray_buffer> hs = shareable_group(3);
  const std::vector<hurray_buffer> before = hs;
  EXPECT_STATUS(hurray_ipc_export_set(hs.data(), 0, 0, &m, &bad), HURRAY_ERR_INVALID_ARGUMENT);
  EXPECT_STREQ(err(), "hurray_ipc_export_set: n is 0 (a set has at least one handle)");
  EXPECT_EQ(bad, HURRAY_BATCH_NO_INDEX);
  EXPECT_STATUS(hurray_ipc_export_set(nullptr, 3, 0, &m, &bad), HURRAY_ERR_INVALID_ARGUMENT);
  EXPECT_STREQ(err(), "hurray_ipc_export_set: srcs is NULL");
  EXPECT_STATUS(hurray_ipc_export_set(hs.data(), 3, 0, nullptr, &bad), HURRAY_ERR_INVALID_ARGUMENT);
  EXPECT_STREQ(err(), "hurray_ipc_export_set: out is NULL");
  EXPECT_STATUS(hurray_ipc_export_set(hs.data(), HURRAY_IPC_SET_MAX_HANDLES + 1, 0, &m, &bad),
                HURRAY_ERR_INVALID_ARGUMENT);
  EXPECT_STATUS(hurray_ipc_export_set(hs.data(), 3, 1u << 7, &m, &bad),
                HURRAY_ERR_INVALID_ARGUMENT);
  EXPECT_STREQ(err(), "options 0x80 has unknown bits");
  EXPECT_EQ(bad, HURRAY_BATCH_NO_INDEX);
  // An element that is no valid handle: its index.
  hurray_buffer broken = hs[1];
  hs[1].ndim = -1;
  EXPECT_STATUS(hurray_ipc_export_set(hs.data(), 3, 0, &m, &bad), HURRAY_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(bad, 1u);
  EXPECT_NE(std::string(err()).find("srcs[1]"), std::string::npos) << err();
  hs[1] = broken;
  // A "GPU" element whose memory no driver knows (none is loaded here):
  // refused by index, nothing consumed.
  hurray_buffer gpu = hs[2];
  hs[2].device = hurray_device{HURRAY_DEVICE_CUDA, 0};
  EXPECT_STATUS(hurray_ipc_export_set(hs.data(), 3, 0, &m, &bad), HURRAY_ERR_UNSUPPORTED_DEVICE);
  EXPECT_EQ(bad, 2u);
  EXPECT_NE(std::string(err()).find("srcs[2]"), std::string::npos) << err();
  hs[2] = gpu;
  EXPECT_EQ(m, nullptr);
  EXPECT_EQ(0, std::memcmp(before.data(), hs.data(), sizeof(hurray_buffer) * hs.size()));
  release_all(hs);
}

TEST(IpcSet, PartsRefusesNullArguments) {
  std::vector<hurray_buffer> hs = shareable_group(2);
  hurray_ipc_set_message *m = nullptr;
  ASSERT_OK(hurray_ipc_export_set(hs.data(), 2, 0, &m, nullptr));
  const uint8_t *bytes = nullptr;
  size_t size = 0, nfds = 0;
  const int32_t *fds = nullptr;
  EXPECT_STATUS(hurray_ipc_set_message_parts(nullptr, &bytes, &size, &fds, &nfds),
                HURRAY_ERR_INVALID_ARGUMENT);
  EXPECT_STREQ(err(), "m is NULL");
  EXPECT_STATUS(hurray_ipc_set_message_parts(m, &bytes, nullptr, &fds, &nfds),
                HURRAY_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(bytes, nullptr);
  ASSERT_OK(hurray_ipc_set_message_parts(m, &bytes, &size, &fds, &nfds));
  EXPECT_EQ(size, 48u + 32u + 2u * 64u);  // header, one region, two entries of ndim 1
  EXPECT_EQ(nfds, 2u);
  ASSERT_OK(hurray_ipc_set_message_discard(m));
}

}  // namespace
