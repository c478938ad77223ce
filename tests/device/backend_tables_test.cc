// SPDX-License-Identifier: Apache-2.0
// Every backend table sets every member (src/device/backend.h): the CPU's,
// each vendor's this build holds, and both stubs. A table is read as the
// array of pointers it is, so a member added to DeviceBackend and left unset
// in any table fails here without this file naming the members. Built from
// the library's own sources (the tables are internal to libhurray.so).
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "device/backend.h"
#include "hurray/hurray.h"

namespace {

using hurray::detail::DeviceBackend;

constexpr size_t kSlots = sizeof(DeviceBackend) / sizeof(void *);

// The indexes of the members of `b` that are NULL.
std::vector<size_t> unset_members(const DeviceBackend &b) {
  uintptr_t slot[kSlots];
  std::memcpy(slot, &b, sizeof slot);
  std::vector<size_t> unset;
  for (size_t i = 0; i < kSlots; ++i) {
    if (slot[i] == 0) unset.push_back(i);
  }
  return unset;
}

TEST(BackendTables, ReadingFindsAnUnsetMember) {
  // The reading itself can fail: a table with one member cleared is caught.
  DeviceBackend b = *hurray::detail::backend_for(HURRAY_DEVICE_CPU);
  b.host_wait_allowed = nullptr;
  EXPECT_EQ(unset_members(b).size(), 1u);
  DeviceBackend empty{};
  EXPECT_EQ(unset_members(empty).size(), kSlots);
}

TEST(BackendTables, EveryTableOfThisBuildSetsEveryMember) {
  const int32_t types[] = {HURRAY_DEVICE_CPU,          HURRAY_DEVICE_CUDA, HURRAY_DEVICE_CUDA_HOST,
                           HURRAY_DEVICE_CUDA_MANAGED, HURRAY_DEVICE_ROCM, HURRAY_DEVICE_ROCM_HOST};
  for (int32_t type : types) {
    const DeviceBackend *b = hurray::detail::backend_for(type);
    ASSERT_NE(b, nullptr) << "device type " << type;
    EXPECT_TRUE(unset_members(*b).empty()) << b->name << " table, device type " << type;
  }
  EXPECT_STREQ(hurray::detail::backend_for(HURRAY_DEVICE_CPU)->name, "CPU");
  EXPECT_STREQ(hurray::detail::backend_for(HURRAY_DEVICE_CUDA)->name, "CUDA");
  EXPECT_STREQ(hurray::detail::backend_for(HURRAY_DEVICE_ROCM)->name, "HIP");
  EXPECT_EQ(hurray::detail::backend_for(4 /* kDLOpenCL */), nullptr);
}

TEST(BackendTables, StubsSetEveryMemberAndRefuseEveryCall) {
  struct Case {
    int32_t type;
    const char *name;
  } cases[] = {{HURRAY_DEVICE_CUDA, "CUDA"}, {HURRAY_DEVICE_ROCM, "HIP"}};
  for (const Case &c : cases) {
    const DeviceBackend *b = hurray::detail::stub_backend_for(c.type);
    ASSERT_NE(b, nullptr);
    EXPECT_STREQ(b->name, c.name);
    EXPECT_TRUE(unset_members(*b).empty()) << c.name << " stub";
    EXPECT_EQ(b->load(), HURRAY_ERR_UNSUPPORTED_DEVICE);
    EXPECT_NE(std::string(hurray_last_error()).find("this build of libhurray has no"),
              std::string::npos)
        << hurray_last_error();
    EXPECT_EQ(b->synchronize(0, nullptr), HURRAY_ERR_UNSUPPORTED_DEVICE);
    EXPECT_EQ(b->host_wait_allowed(0, nullptr), HURRAY_ERR_UNSUPPORTED_DEVICE);
  }
  EXPECT_EQ(hurray::detail::stub_backend_for(HURRAY_DEVICE_CPU), nullptr);
}

}  // namespace
