// SPDX-License-Identifier: Apache-2.0
// The set descriptor's checks (docs/impl/ipc.md §10.2): a valid message with
// one field changed at a time, cut at every length, and import_set's own
// bad arguments: each refused with its exact status and a message naming
// the field, every fd closed, nothing mapped, and the sender's references
// back once the message is discarded.
#include <fcntl.h>
#include <gtest/gtest.h>

#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "hurray/hurray.h"
#include "hurray_test_support.h"
#include "ipc_set_support.h"

namespace {

using namespace hurray_ipc_test;

void put32(std::vector<uint8_t> &b, size_t at, uint32_t v) {
  for (int i = 0; i < 4; ++i) b[at + i] = static_cast<uint8_t>(v >> (8 * i));
}
void put64(std::vector<uint8_t> &b, size_t at, uint64_t v) {
  for (int i = 0; i < 8; ++i) b[at + i] = static_cast<uint8_t>(v >> (8 * i));
}

bool fd_open(int fd) { return fcntl(fd, F_GETFD) != -1; }

// A message of three handles: a group of two (region 0) and one buffer
// (region 1). Header at 0, regions at 48 and 80, entries at 112, 176, 240.
class SetWire : public ::testing::Test {
 protected:
  void SetUp() override {
    warm_watcher();
    returns_ = ipc_returns();
    std::vector<hurray_buffer> hs = shareable_group(2);
    hs.push_back(shareable(4));
    ASSERT_OK(hurray_ipc_export_set(hs.data(), hs.size(), 0, &m_, nullptr));
    const uint8_t *bytes;
    size_t size;
    const int32_t *fds;
    ASSERT_OK(hurray_ipc_set_message_parts(m_, &bytes, &size, &fds, &nfds_));
    bytes_.assign(bytes, bytes + size);
    fds_ = fds;
    ASSERT_EQ(size, 304u);
    ASSERT_EQ(nfds_, 4u);
    maps_ = count_hurray_memfd_maps();
  }
  void TearDown() override {
    ASSERT_OK(hurray_ipc_set_message_discard(m_));
    EXPECT_TRUE(wait_until([&] { return ipc_returns() == returns_ + 2; }));
  }
  std::vector<int32_t> dup_fds() const {
    std::vector<int32_t> d(nfds_);
    for (size_t i = 0; i < nfds_; ++i) d[i] = fcntl(fds_[i], F_DUPFD_CLOEXEC, 0);
    return d;
  }
  // Imports `b` with copies of the message's fds: the status, the message
  // (must contain `want`), every copy closed, nothing mapped, out untouched.
  void expect_refused(const std::vector<uint8_t> &b, int32_t status, const char *want,
                      std::vector<int32_t> fds = {}) {
    if (fds.empty()) fds = dup_fds();
    const std::vector<int32_t> given = fds;
    hurray_buffer out[4];
    std::memset(out, 0xAB, sizeof out);
    size_t count = 77;
    EXPECT_STATUS(hurray_ipc_import_set(b.data(), b.size(), fds.data(), fds.size(), out, 4, &count),
                  status);
    EXPECT_NE(std::string(hurray_last_error()).find(want), std::string::npos)
        << hurray_last_error();
    for (int32_t fd : given) EXPECT_FALSE(fd_open(fd)) << "fd " << fd << " left open";
    for (int32_t fd : fds) EXPECT_EQ(fd, -1);
    EXPECT_EQ(count, 77u);
    EXPECT_EQ(out[0].version, 0xABABABABu);
    EXPECT_EQ(count_hurray_memfd_maps(), maps_);
  }
  std::vector<uint8_t> with(const std::function<void(std::vector<uint8_t> &)> &f) const {
    std::vector<uint8_t> b = bytes_;
    f(b);
    return b;
  }

  hurray_ipc_set_message *m_ = nullptr;
  std::vector<uint8_t> bytes_;
  const int32_t *fds_ = nullptr;
  size_t nfds_ = 0;
  uint64_t returns_ = 0;
  int maps_ = 0;
};

TEST_F(SetWire, TheValidMessageImports) {
  std::vector<int32_t> fds = dup_fds();
  hurray_buffer out[3];
  size_t count = 0;
  ASSERT_OK(
      hurray_ipc_import_set(bytes_.data(), bytes_.size(), fds.data(), fds.size(), out, 3, &count));
  EXPECT_EQ(count, 3u);
  for (int32_t fd : fds) EXPECT_EQ(fd, -1);  // the handles own them
  for (hurray_buffer &h : out) ASSERT_OK(hurray_buffer_release(&h));
}

TEST_F(SetWire, EachHeaderFieldIsChecked) {
  const auto u32 = [](size_t at, uint32_t v) {
    return [=](std::vector<uint8_t> &b) { put32(b, at, v); };
  };
  expect_refused(with(u32(0, 0x12345678)), HURRAY_ERR_IPC, "not a hurray set message");
  expect_refused(with(u32(0, 0x50495248)), HURRAY_ERR_IPC, "a single handle's message");
  expect_refused(with(u32(4, 2)), HURRAY_ERR_UNSUPPORTED_VERSION,
                 "set descriptor version is 2; this libhurray reads set version 1 only");
  expect_refused(with(u32(8, 40)), HURRAY_ERR_IPC, "header_size is 40");
  expect_refused(with(u32(12, 300)), HURRAY_ERR_IPC, "total_size is 300 but the message has 304");
  expect_refused(with(u32(16, 0)), HURRAY_ERR_IPC, "has 0 entries (1..65536)");
  expect_refused(with(u32(16, 65537)), HURRAY_ERR_IPC, "has 65537 entries");
  expect_refused(with(u32(20, 4)), HURRAY_ERR_IPC, "4 regions for 3 entries");
  expect_refused(with(u32(24, 5)), HURRAY_ERR_IPC, "says 5 fds for 2 regions");
  expect_refused(with(u32(24, 1)), HURRAY_ERR_IPC, "says 1 fds for 2 regions");
  expect_refused(with(u32(24, 3)), HURRAY_ERR_IPC, "says 3 fds, the message carries 4");
  expect_refused(with(u32(28, 33)), HURRAY_ERR_IPC, "record sizes are 33 (region)");
  expect_refused(with(u32(36, 1)), HURRAY_ERR_IPC, "bytes 36..47 (reserved) are not 0");
  expect_refused(with(u32(16, 65536)), HURRAY_ERR_IPC, "total_size 304 is outside");
}

TEST_F(SetWire, EachRegionAndEntryFieldIsChecked) {
  const auto u32 = [](size_t at, uint32_t v) {
    return [=](std::vector<uint8_t> &b) { put32(b, at, v); };
  };
  const auto u64 = [](size_t at, uint64_t v) {
    return [=](std::vector<uint8_t> &b) { put64(b, at, v); };
  };
  expect_refused(with(u32(48, 7)), HURRAY_ERR_IPC, "set region 0 has kind 7");
  // A GPU kind names its single descriptor, which a memfd's range is not.
  expect_refused(with(u32(48, 3)), HURRAY_ERR_IPC, "set region 0 (kind 3) names descriptor bytes");
  expect_refused(with(u32(52, 2)), HURRAY_ERR_IPC, "set region 0 has flags 0x2");
  expect_refused(with(u64(64, 0)), HURRAY_ERR_IPC, "set region 0 [0, +0) is empty");
  expect_refused(with(u64(56, uint64_t{1} << 63)), HURRAY_ERR_IPC,
                 "beyond the largest file offset");
  expect_refused(with(u32(72, 0)), HURRAY_ERR_IPC, "set region 0 has no entries");
  expect_refused(with(u32(72, 3)), HURRAY_ERR_IPC, "set regions hold 4 entries together");
  // Entry 0 at 112.
  expect_refused(with(u32(112, 2)), HURRAY_ERR_IPC, "set entry 0 names region 2 of 2");
  expect_refused(with(u32(112, 1)), HURRAY_ERR_IPC, "set region 1 says 1 entries; entry 2");
  expect_refused(with(u32(116, 65)), HURRAY_ERR_INVALID_ARGUMENT, "set entry 0 has ndim 65");
  expect_refused(with(u32(244, 2)), HURRAY_ERR_IPC, "set entry 2 of ndim 2 at byte 240 is cut off");
  expect_refused(with(u32(132, HURRAY_DEVICE_CUDA)), HURRAY_ERR_UNSUPPORTED_DEVICE,
                 "set entry 0 is on kDLCUDA 0");
  expect_refused(with(u32(140, 1)), HURRAY_ERR_IPC, "set entry 0 has a reserved word");
  expect_refused(with([](std::vector<uint8_t> &b) { b[129] = 0; }), HURRAY_ERR_UNSUPPORTED_DTYPE,
                 "set entry 0");
  expect_refused(with(u64(160, uint64_t{1} << 40)), HURRAY_ERR_IPC,
                 "set entry 0 elements span bytes");  // shape beyond the region
  expect_refused(with(u64(144, uint64_t{1} << 62)), HURRAY_ERR_IPC, "set entry 0");
  // The read-only region flag without HURRAY_FLAG_READ_ONLY on its entries.
  expect_refused(with(u32(52, 1)), HURRAY_ERR_IPC,
                 "set entry 0 lacks HURRAY_FLAG_READ_ONLY but its region 0 is read-only");
}

TEST_F(SetWire, EveryTruncationAndTrailingByteIsRefused) {
  for (size_t len = 0; len < bytes_.size(); len += (len < 64 ? 1 : 7)) {
    SCOPED_TRACE(len);
    std::vector<uint8_t> b(bytes_.begin(), bytes_.begin() + static_cast<long>(len));
    std::vector<int32_t> fds = dup_fds();
    const std::vector<int32_t> given = fds;
    hurray_buffer out[3];
    size_t count = 0;
    EXPECT_NE(hurray_ipc_import_set(b.data(), b.size(), fds.data(), fds.size(), out, 3, &count),
              HURRAY_OK);
    for (int32_t fd : given) EXPECT_FALSE(fd_open(fd));
  }
  std::vector<uint8_t> longer = bytes_;
  longer.push_back(0);
  put32(longer, 12, static_cast<uint32_t>(longer.size()));
  expect_refused(longer, HURRAY_ERR_IPC, "1 bytes after its last entry");
}

TEST_F(SetWire, TheFdsAreChecked) {
  std::vector<int32_t> fds = dup_fds();
  std::swap(fds[0], fds[1]);  // the lifetime fd where the memfd goes
  expect_refused(bytes_, HURRAY_ERR_IPC, "fds[0] is not a memfd (not a file)", fds);
  fds = dup_fds();
  close(fds[3]);
  fds[3] = fds[1];  // one fd twice
  expect_refused(bytes_, HURRAY_ERR_IPC, "names fd", fds);
  fds = dup_fds();
  std::vector<int32_t> three(fds.begin(), fds.begin() + 3);
  close(fds[3]);
  expect_refused(bytes_, HURRAY_ERR_IPC, "set descriptor says 4 fds, the message carries 3", three);
}

TEST_F(SetWire, ImportSetArgumentsAndCapacity) {
  hurray_buffer out[3];
  size_t count = 0;
  std::vector<int32_t> fds = dup_fds();
  std::vector<int32_t> given = fds;
  EXPECT_STATUS(
      hurray_ipc_import_set(bytes_.data(), bytes_.size(), fds.data(), fds.size(), out, 3, nullptr),
      HURRAY_ERR_INVALID_ARGUMENT);
  EXPECT_STREQ(hurray_last_error(), "count is NULL");
  for (int32_t fd : given) EXPECT_FALSE(fd_open(fd));  // always consumed
  fds = given = dup_fds();
  EXPECT_STATUS(hurray_ipc_import_set(nullptr, 10, fds.data(), fds.size(), out, 3, &count),
                HURRAY_ERR_INVALID_ARGUMENT);
  EXPECT_STREQ(hurray_last_error(), "bytes is NULL");
  for (int32_t fd : given) EXPECT_FALSE(fd_open(fd));
  EXPECT_STATUS(hurray_ipc_import_set(bytes_.data(), bytes_.size(), nullptr, 4, out, 3, &count),
                HURRAY_ERR_INVALID_ARGUMENT);
  EXPECT_STREQ(hurray_last_error(), "fds is NULL while nfds is 4");
  fds = given = dup_fds();
  EXPECT_STATUS(hurray_ipc_import_set(bytes_.data(), bytes_.size(), fds.data(), fds.size(), nullptr,
                                      3, &count),
                HURRAY_ERR_INVALID_ARGUMENT);
  EXPECT_STREQ(hurray_last_error(), "out is NULL while capacity is 3");
  for (int32_t fd : given) EXPECT_FALSE(fd_open(fd));
  // Too small: the count needed, every fd closed.
  fds = given = dup_fds();
  count = 0;
  EXPECT_STATUS(
      hurray_ipc_import_set(bytes_.data(), bytes_.size(), fds.data(), fds.size(), out, 2, &count),
      HURRAY_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(count, 3u);
  EXPECT_NE(std::string(hurray_last_error()).find("the set has 3 handles, out has room for 2"),
            std::string::npos);
  for (int32_t fd : given) EXPECT_FALSE(fd_open(fd));
  EXPECT_EQ(count_hurray_memfd_maps(), maps_);
}

TEST_F(SetWire, SingleAndSetMessagesAreToldApart) {
  hurray_ipc_message single;
  std::memset(&single, 0, sizeof single);
  single.size =
      static_cast<uint32_t>(bytes_.size() > HURRAY_IPC_DESCRIPTOR_MAX ? 0 : bytes_.size());
  std::memcpy(single.bytes, bytes_.data(), single.size);
  hurray_buffer h;
  EXPECT_STATUS(hurray_ipc_import(&single, &h), HURRAY_ERR_IPC);
  EXPECT_NE(std::string(hurray_last_error()).find("a set of handles, which hurray_ipc_import_set"),
            std::string::npos)
      << hurray_last_error();
}

}  // namespace
