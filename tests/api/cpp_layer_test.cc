// SPDX-License-Identifier: Apache-2.0
// hurray.hpp: RAII release, move-only ownership, exceptions on the C++ side
// only, and "a throwing call leaves ownership where it was".
#include <fcntl.h>
#include <hurray/hurray.hpp>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <thread>
#include <type_traits>

#include "hurray_test_support.h"
#include "ipc_test_support.h"

namespace {

using hurray_test::DeleterLog;
using hurray_test::HandleSource;

static_assert(!std::is_copy_constructible<hurray::Buffer>::value, "Buffer is move-only");
static_assert(std::is_nothrow_move_constructible<hurray::Buffer>::value, "noexcept move");

TEST(CppLayer, DestructorReleasesExactlyOnce) {
  HandleSource src;
  {
    hurray::Buffer b(src.handle(hurray_test::dense({2, 3})));
    EXPECT_TRUE(static_cast<bool>(b));
    EXPECT_EQ(src.log.calls.load(), 0);
  }
  EXPECT_EQ(src.log.calls.load(), 1);
}

TEST(CppLayer, MoveTransfersOwnership) {
  HandleSource src;
  hurray::Buffer a(src.handle(hurray_test::dense({4})));
  hurray::Buffer b(std::move(a));
  EXPECT_FALSE(static_cast<bool>(a));
  hurray::Buffer c;
  c = std::move(b);
  EXPECT_FALSE(static_cast<bool>(b));
  EXPECT_EQ(src.log.calls.load(), 0);
  c.reset();
  EXPECT_EQ(src.log.calls.load(), 1);
  c.reset();  // empty: nothing more
  EXPECT_EQ(src.log.calls.load(), 1);
}

TEST(CppLayer, ShareGivesIndependentOwnersReleasedOnAnyThread) {
  HandleSource src;
  hurray::Buffer b(src.handle(hurray_test::dense({8})));
  std::vector<hurray::Buffer> parts = b.share(4);
  ASSERT_EQ(parts.size(), 4u);
  EXPECT_FALSE(static_cast<bool>(b));
  for (const auto &p : parts) EXPECT_EQ(p.data(), src.bytes);
  std::thread t([moved = std::move(parts[3])]() mutable { moved.reset(); });
  t.join();
  parts.resize(1);
  EXPECT_EQ(src.log.calls.load(), 0);
  parts.clear();
  EXPECT_EQ(src.log.calls.load(), 1);
}

TEST(CppLayer, ThrowingShareKeepsTheHandle) {
  HandleSource src;
  hurray::Buffer b(src.handle(hurray_test::dense({8})));
  try {
    (void)b.share(0);
    FAIL() << "share(0) did not throw";
  } catch (const hurray::Error &e) {
    EXPECT_EQ(e.status(), HURRAY_ERR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(e.what()).find("n is 0"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(static_cast<bool>(b));
  EXPECT_EQ(src.log.calls.load(), 0);
}

// A count hurray_share refuses must not size a vector first: share(SIZE_MAX)
// would throw std::length_error, and 2^32 + 1 handles would try to zero
// 343 GB before the library could say no.
TEST(CppLayer, HugeShareCountIsRefusedBeforeAllocating) {
  HandleSource src;
  hurray::Buffer b(src.handle(hurray_test::dense({8})));
  for (std::size_t n : {SIZE_MAX, static_cast<std::size_t>((std::uint64_t{1} << 32) + 1)}) {
    try {
      (void)b.share(n);
      FAIL() << "share(" << n << ") did not throw";
    } catch (const hurray::Error &e) {
      EXPECT_EQ(e.status(), HURRAY_ERR_INVALID_ARGUMENT) << e.what();
    }
  }
  EXPECT_TRUE(static_cast<bool>(b));
  EXPECT_EQ(src.log.calls.load(), 0);
}

TEST(CppLayer, DLPackRoundTripUnwrapsAndReleasesOnce) {
  HandleSource src;
  const hurray_buffer original = src.handle(hurray_test::dense({2, 2}));
  hurray::Buffer b(original);
  hurray::DLPackVersionedPtr t = b.to_dlpack_versioned();
  EXPECT_FALSE(static_cast<bool>(b));
  ASSERT_NE(t, nullptr);
  hurray::Buffer back = hurray::Buffer::from_dlpack(t);
  EXPECT_EQ(t, nullptr);
  EXPECT_EQ(back.get().release_fn, original.release_fn);
  EXPECT_EQ(back.get().user_data, original.user_data);
  hurray::DLPackPtr legacy = back.to_dlpack();
  legacy.reset();  // the owning pointer calls the DLPack deleter
  EXPECT_EQ(src.log.calls.load(), 1);
}

TEST(CppLayer, FailedImportLeavesTheTensorWithTheCaller) {
  DeleterLog log;
  hurray::DLPackVersionedPtr t(
      hurray_test::make_versioned(log, hurray_test::dense({2}), /*major=*/2, /*minor=*/0));
  try {
    (void)hurray::Buffer::from_dlpack(t);
    FAIL() << "major 2 was accepted";
  } catch (const hurray::Error &e) {
    EXPECT_EQ(e.status(), HURRAY_ERR_UNSUPPORTED_VERSION);
  }
  EXPECT_NE(t, nullptr);
  EXPECT_EQ(log.calls.load(), 0);
  t.reset();
  EXPECT_EQ(log.calls.load(), 1);
}

TEST(CppLayer, ViewsOfSharedPartsReleaseTheSourceOnce) {
  HandleSource src;
  hurray::Buffer b(src.handle(hurray_test::dense({4, 8})));
  std::vector<hurray::Buffer> parts = b.share(2);
  hurray::Buffer row = parts[0].view({kDLFloat, 32, 1}, {8}, {}, 32);
  hurray::Buffer col = parts[1].view({kDLFloat, 32, 1}, {4}, {8}, 4, HURRAY_FLAG_READ_ONLY);
  EXPECT_FALSE(static_cast<bool>(parts[0]));
  EXPECT_EQ(row.byte_offset(), 32u);
  EXPECT_EQ(col.stride(0), 8);
  EXPECT_EQ(col.flags(), HURRAY_FLAG_READ_ONLY);
  EXPECT_EQ(col.extent().highest, 4 + 3 * 32 + 4);
  try {
    (void)row.view({kDLFloat, 32, 1}, {9}, {}, 32);
    FAIL() << "a view past its source was accepted";
  } catch (const hurray::Error &e) {
    EXPECT_EQ(e.status(), HURRAY_ERR_INVALID_ARGUMENT);
  }
  EXPECT_TRUE(static_cast<bool>(row)) << "a throwing view keeps the handle";
  EXPECT_THROW((void)row.view({kDLFloat, 32, 1}, {2}, {1, 1}), hurray::Error);
  row.reset();
  EXPECT_EQ(src.log.calls.load(), 0);
  col.reset();
  EXPECT_EQ(src.log.calls.load(), 1);
}

TEST(CppLayer, BatchedConversionIsAllOrNothing) {
  std::vector<DeleterLog> logs(3);
  std::vector<hurray::DLPackVersionedPtr> ts;
  for (DeleterLog &l : logs)
    ts.emplace_back(hurray_test::make_versioned(l, hurray_test::dense({2})));
  ts[1]->dl_tensor.dtype.lanes = 0;
  try {
    (void)hurray::Buffer::from_dlpack_n(ts);
    FAIL() << "lanes 0 was accepted";
  } catch (const hurray::Error &e) {
    EXPECT_EQ(e.status(), HURRAY_ERR_UNSUPPORTED_DTYPE);
    EXPECT_NE(std::string(e.what()).find("ts[1]"), std::string::npos) << e.what();
  }
  for (const auto &t : ts) EXPECT_NE(t, nullptr) << "still the caller's";
  ts[1]->dl_tensor.dtype.lanes = 1;
  std::vector<hurray::Buffer> bufs = hurray::Buffer::from_dlpack_n(ts);
  for (const auto &t : ts) EXPECT_EQ(t, nullptr);
  ASSERT_EQ(bufs.size(), 3u);
  // A bad Buffer makes the export throw and every Buffer keep its handle.
  bufs.emplace_back();
  EXPECT_THROW((void)hurray::Buffer::to_dlpack_versioned_n(bufs), hurray::Error);
  for (size_t i = 0; i < 3; ++i) EXPECT_TRUE(static_cast<bool>(bufs[i]));
  bufs.pop_back();
  std::vector<hurray::DLPackVersionedPtr> back = hurray::Buffer::to_dlpack_versioned_n(bufs);
  for (const hurray::Buffer &b : bufs) EXPECT_FALSE(static_cast<bool>(b));
  ASSERT_EQ(back.size(), 3u);
  std::vector<hurray::Buffer> again = hurray::Buffer::from_dlpack_n(back);
  std::vector<hurray::DLPackPtr> legacy = hurray::Buffer::to_dlpack_n(again);
  std::vector<hurray::Buffer> last = hurray::Buffer::from_dlpack_n(legacy);
  for (const DeleterLog &l : logs) EXPECT_EQ(l.calls.load(), 0);
  last.clear();
  for (const DeleterLog &l : logs) EXPECT_EQ(l.calls.load(), 1);
}

std::vector<hurray::TensorDesc> group_descs() {
  return {{{kDLFloat, 32, 1}, {2, 3}, 0},
          {{kDLInt, 8, 1}, {5}, 0},
          {{kDLFloat, 16, 1}, {0}, 0},
          {{kDLFloat, 64, 1}, {4, 4}, HURRAY_FLAG_READ_ONLY}};
}

uintptr_t address(const hurray::Buffer &b) {
  return reinterpret_cast<uintptr_t>(b.data()) + b.byte_offset();
}

// alloc_group gives one owning Buffer per description, at the offsets
// hurray_alloc_group documents (each aligned, each after the previous
// tensor's bytes, an empty tensor taking none), and the one allocation (a
// memfd, so its mapping can be counted) goes once, after the last Buffer,
// in every order.
TEST(CppLayer, AllocGroupOwnsEachTensorAndFreesTheMemoryOnce) {
  const hurray_device cpu{HURRAY_DEVICE_CPU, 0};
  const auto descs = group_descs();
  std::vector<int> order = {0, 1, 2, 3};
  int orders = 0;
  do {
    SCOPED_TRACE(orders);
    const int maps = hurray_ipc_test::count_hurray_memfd_maps();
    std::vector<hurray::Buffer> g = hurray::Buffer::alloc_group(cpu, descs, HURRAY_ALLOC_SHAREABLE);
    ASSERT_EQ(g.size(), 4u);
    EXPECT_EQ(hurray_ipc_test::count_hurray_memfd_maps(), maps + 1) << "one memfd for the group";
    const uintptr_t base = address(g[0]);
    EXPECT_EQ(base % HURRAY_GROUP_ALIGNMENT, 0u);
    // float32[2,3] takes 24 bytes, int8[5] 5, float16[0] none: the next
    // aligned starts are 256 (int8), 512 (the empty tensor) and 512.
    EXPECT_EQ(address(g[1]) - base, 256u);
    EXPECT_EQ(address(g[2]) - base, 512u);
    EXPECT_EQ(address(g[3]) - base, 512u);
    for (size_t i = 0; i < 4; ++i) {
      EXPECT_EQ(g[i].ndim(), static_cast<int32_t>(descs[i].shape.size()));
      EXPECT_EQ(g[i].dtype().bits, descs[i].dtype.bits);
      EXPECT_EQ(g[i].flags() & HURRAY_FLAG_READ_ONLY, descs[i].flags);
      EXPECT_EQ(g[i].extent().contiguous, 1);
    }
    for (size_t k = 0; k < 3; ++k) {
      g[static_cast<size_t>(order[k])].reset();
      EXPECT_EQ(hurray_ipc_test::count_hurray_memfd_maps(), maps + 1) << "freed before the last";
    }
    g[static_cast<size_t>(order[3])].reset();
    EXPECT_EQ(hurray_ipc_test::count_hurray_memfd_maps(), maps);
    ++orders;
  } while (std::next_permutation(order.begin(), order.end()));
  EXPECT_EQ(orders, 24);
}

// Buffers of one group moved to other threads and released there: still one
// free, after the last.
TEST(CppLayer, AllocGroupReleasedFromThreads) {
  const int maps = hurray_ipc_test::count_hurray_memfd_maps();
  std::vector<hurray::TensorDesc> descs(16, hurray::TensorDesc{{kDLFloat, 32, 1}, {7}, 0});
  std::vector<hurray::Buffer> g =
      hurray::Buffer::alloc_group({HURRAY_DEVICE_CPU, 0}, descs, HURRAY_ALLOC_SHAREABLE);
  EXPECT_EQ(hurray_ipc_test::count_hurray_memfd_maps(), maps + 1);
  std::vector<std::thread> ts;
  for (int t = 0; t < 4; ++t) {
    std::vector<hurray::Buffer> mine;
    for (size_t i = static_cast<size_t>(t); i < g.size(); i += 4) mine.push_back(std::move(g[i]));
    ts.emplace_back([m = std::move(mine)]() mutable { m.clear(); });
  }
  for (auto &t : ts) t.join();
  EXPECT_EQ(hurray_ipc_test::count_hurray_memfd_maps(), maps);
}

// A bad description throws an Error naming it (index() and the message),
// and nothing stays allocated; an argument error names no element; an
// empty list is an empty vector.
TEST(CppLayer, AllocGroupErrorsNameTheDescription) {
  const hurray_device cpu{HURRAY_DEVICE_CPU, 0};
  const int maps = hurray_ipc_test::count_hurray_memfd_maps();
  auto descs = group_descs();
  descs[2].shape = {-3};
  try {
    (void)hurray::Buffer::alloc_group(cpu, descs, HURRAY_ALLOC_SHAREABLE);
    FAIL() << "a negative extent was accepted";
  } catch (const hurray::Error &e) {
    EXPECT_EQ(e.status(), HURRAY_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(e.index(), 2u);
    EXPECT_NE(std::string(e.what()).find("descs[2]"), std::string::npos) << e.what();
  }
  descs = group_descs();
  descs[1].dtype = {kDLFloat, 33, 1};
  try {
    (void)hurray::Buffer::alloc_group(cpu, descs);
    FAIL() << "float33 was accepted";
  } catch (const hurray::Error &e) {
    EXPECT_EQ(e.status(), HURRAY_ERR_UNSUPPORTED_DTYPE);
    EXPECT_EQ(e.index(), 1u);
  }
  descs = group_descs();
  descs[3].flags = uint64_t{1} << 40;
  try {
    (void)hurray::Buffer::alloc_group(cpu, descs);
    FAIL() << "an unknown handle flag was accepted";
  } catch (const hurray::Error &e) {
    EXPECT_EQ(e.status(), HURRAY_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(e.index(), 3u);
  }
  try {
    (void)hurray::Buffer::alloc_group({HURRAY_DEVICE_CPU, 0}, group_descs(), 0,
                                      reinterpret_cast<void *>(1));
    FAIL() << "a stream on the CPU was accepted";
  } catch (const hurray::Error &e) {
    EXPECT_EQ(e.status(), HURRAY_ERR_UNSUPPORTED_DEVICE);
    EXPECT_EQ(e.index(), HURRAY_BATCH_NO_INDEX);
  }
  EXPECT_EQ(hurray_ipc_test::count_hurray_memfd_maps(), maps) << "nothing stays allocated";
  EXPECT_TRUE(hurray::Buffer::alloc_group(cpu, {}).empty());
}

// The batched conversions' Errors carry the failed index too.
TEST(CppLayer, BatchErrorsCarryTheIndex) {
  std::vector<DeleterLog> logs(3);
  std::vector<hurray::DLPackVersionedPtr> ts;
  for (DeleterLog &l : logs)
    ts.emplace_back(hurray_test::make_versioned(l, hurray_test::dense({2})));
  ts[2]->dl_tensor.ndim = -1;
  try {
    (void)hurray::Buffer::from_dlpack_n(ts);
    FAIL() << "ndim -1 was accepted";
  } catch (const hurray::Error &e) {
    EXPECT_EQ(e.status(), HURRAY_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(e.index(), 2u);
  }
  ts[2]->dl_tensor.ndim = 1;
  std::vector<hurray::Buffer> bufs = hurray::Buffer::from_dlpack_n(ts);
  std::swap(bufs[0], bufs[1]);
  bufs[0].reset();  // an empty Buffer at index 0
  try {
    (void)hurray::Buffer::to_dlpack_n(bufs);
    FAIL() << "an empty Buffer was exported";
  } catch (const hurray::Error &e) {
    EXPECT_EQ(e.status(), HURRAY_ERR_INVALID_ARGUMENT);
    EXPECT_EQ(e.index(), 0u);
  }
  EXPECT_EQ(logs[1].calls.load(), 1);
  bufs.clear();
  for (const DeleterLog &l : logs) EXPECT_EQ(l.calls.load(), 1);
  EXPECT_EQ(hurray::Error(HURRAY_ERR_INVALID_ARGUMENT, "x").index(), HURRAY_BATCH_NO_INDEX);
}

TEST(CppLayer, AllocCopyAndExtent) {
  hurray::Buffer a = hurray::Buffer::alloc({HURRAY_DEVICE_CPU, 0}, {2, 32, 1}, {3, 5});
  auto *p = static_cast<float *>(a.data());
  for (int i = 0; i < 15; ++i) p[i] = static_cast<float>(i);
  hurray::Buffer c = a.copy_to({HURRAY_DEVICE_CPU, 0});
  EXPECT_NE(c.data(), a.data());
  EXPECT_EQ(static_cast<float *>(c.data())[14], 14.0f);
  EXPECT_EQ(c.flags() & HURRAY_FLAG_IS_COPIED, HURRAY_FLAG_IS_COPIED);
  const hurray_extent e = a.extent();
  EXPECT_EQ(e.numel, 15);
  EXPECT_EQ(e.highest, 60);
  EXPECT_THROW(hurray::Buffer::alloc({HURRAY_DEVICE_CPU, 0}, {2, 33, 1}, {1}), hurray::Error);
}

TEST(CppLayer, DetachHandsOwnershipBack) {
  HandleSource src;
  hurray::Buffer b(src.handle(hurray_test::dense({1})));
  hurray_buffer raw = b.detach();
  EXPECT_FALSE(static_cast<bool>(b));
  EXPECT_EQ(src.log.calls.load(), 0);
  EXPECT_OK(hurray_buffer_release(&raw));
  EXPECT_EQ(src.log.calls.load(), 1);
}

}  // namespace

namespace {

// The set message's RAII and the socket forms (docs/impl/ipc.md §10): a
// group of 100 crosses as 2 fds, recv_set's first guess of 64 grows to 100
// without losing the message, and a discarded message gives the
// allocation back.
TEST(CppLayer, IpcSetMessageAndSocketForms) {
  std::vector<int64_t> shape(100, 2);
  std::vector<hurray_tensor_desc> descs(100);
  for (size_t i = 0; i < 100; ++i)
    descs[i] = hurray_tensor_desc{{kDLFloat, 32, 1}, 1, &shape[i], 0};
  auto group = [&] {
    std::vector<hurray_buffer> hs(100);
    hurray::check(hurray_alloc_group(hurray_device{HURRAY_DEVICE_CPU, 0}, 100, descs.data(),
                                     HURRAY_ALLOC_SHAREABLE, nullptr, hs.data(), nullptr));
    std::vector<hurray::Buffer> bs;
    for (size_t i = 0; i < 100; ++i) {
      static_cast<float *>(hs[i].data)[hs[i].byte_offset / 4] = static_cast<float>(i);
      bs.emplace_back(hs[i]);
    }
    return bs;
  };
  std::vector<hurray::Buffer> bs = group();
  hurray::IpcSetMessage m = hurray::IpcSetMessage::export_set(bs);
  for (const hurray::Buffer &b : bs) EXPECT_FALSE(b);
  const hurray::IpcSetMessage::Parts p = m.parts();
  EXPECT_EQ(p.nfds, 2u);
  std::vector<int32_t> fds(p.nfds);
  for (size_t i = 0; i < p.nfds; ++i) fds[i] = fcntl(p.fds[i], F_DUPFD_CLOEXEC, 0);
  std::vector<hurray::Buffer> got = hurray::ipc_import_set(p.bytes, p.size, fds);
  ASSERT_EQ(got.size(), 100u);
  for (int32_t fd : fds) EXPECT_EQ(fd, -1);
  const hurray_buffer &h = got[42].get();
  EXPECT_EQ(*reinterpret_cast<const float *>(static_cast<const char *>(h.data) + h.byte_offset),
            42.0f);
  m.reset();
  EXPECT_FALSE(m);

  int sv[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv), 0);
  std::vector<hurray::Buffer> more = group();
  hurray::ipc_send_set(sv[0], more);
  std::vector<hurray::Buffer> back = hurray::ipc_recv_set(sv[1]);
  ASSERT_EQ(back.size(), 100u);
  const hurray_buffer &b = back[99].get();
  EXPECT_EQ(*reinterpret_cast<const float *>(static_cast<const char *>(b.data) + b.byte_offset),
            99.0f);
  close(sv[0]);
  close(sv[1]);
}

}  // namespace
