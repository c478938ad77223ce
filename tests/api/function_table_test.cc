// SPDX-License-Identifier: Apache-2.0
// hurray_get_api and hurray_buffer_move (src/api/function_table.cc, hurray.h, c-ffi §8).
#include <dlfcn.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "hurray_test_support.h"

namespace {

using hurray_test::dense;
using hurray_test::HandleSource;
using hurray_test::LastErrorMentions;

uint32_t pack(uint32_t major, uint32_t minor) { return (major << 16) | minor; }

// A pointer value no call may write; used to see that *out stays untouched.
const hurray_api *sentinel() { return reinterpret_cast<const hurray_api *>(uintptr_t{0x5a5a50}); }

const hurray_api *get_table() {
  const hurray_api *api = nullptr;
  EXPECT_OK(hurray_get_api(HURRAY_API_VERSION, &api));
  return api;
}

// One entry per member of hurray_api, written out here independently of
// src/api/function_table.cc: member address, exported name, exported function.
using AnyFn = void (*)(void);
struct Member {
  const char *name;
  AnyFn in_table;
  AnyFn exported;
};

#define MEMBER(m) \
  Member { "hurray_" #m, reinterpret_cast<AnyFn>(api->m), reinterpret_cast<AnyFn>(&hurray_##m) }
std::vector<Member> members(const hurray_api *api) {
  return {
      MEMBER(version),
      MEMBER(check_version),
      MEMBER(last_error),
      MEMBER(status_name),
      MEMBER(buffer_release),
      MEMBER(buffer_validate),
      MEMBER(buffer_extent),
      MEMBER(share),
      MEMBER(to_dlpack_versioned),
      MEMBER(to_dlpack),
      MEMBER(from_dlpack_versioned),
      MEMBER(from_dlpack),
      MEMBER(dlpack_versioned_delete),
      MEMBER(dlpack_delete),
      MEMBER(alloc),
      MEMBER(copy),
      MEMBER(alloc_async),
      MEMBER(copy_async),
      MEMBER(stream_wait),
      MEMBER(get_diagnostics),
      MEMBER(set_diagnostic_hook),
      MEMBER(check_enable),
      MEMBER(check_get_state),
      MEMBER(check_live),
      MEMBER(check_label),
      MEMBER(ipc_export),
      MEMBER(ipc_message_discard),
      MEMBER(ipc_import),
      MEMBER(ipc_send),
      MEMBER(ipc_recv),
      MEMBER(ipc_export_async),
      MEMBER(ipc_import_async),
      MEMBER(event_record),
      MEMBER(event_wait),
      MEMBER(event_release),
      MEMBER(retire_deferred_frees),
      MEMBER(view),
      MEMBER(from_dlpack_versioned_n),
      MEMBER(from_dlpack_n),
      MEMBER(to_dlpack_versioned_n),
      MEMBER(to_dlpack_n),
      MEMBER(alloc_group),
      MEMBER(ipc_export_set),
      MEMBER(ipc_set_message_parts),
      MEMBER(ipc_set_message_discard),
      MEMBER(ipc_import_set),
      MEMBER(ipc_send_set),
      MEMBER(ipc_recv_set),
  };
}
#undef MEMBER

// ---------------------------------------------------------------------------
// The table
// ---------------------------------------------------------------------------

TEST(ApiTable, EveryMemberIsTheExportedFunction) {
  const hurray_api *api = get_table();
  ASSERT_NE(api, nullptr);
  for (const Member &m : members(api)) {
    SCOPED_TRACE(m.name);
    EXPECT_NE(m.in_table, nullptr);
    EXPECT_EQ(m.in_table, m.exported);
    // The symbol a runtime would find by name resolves to the same code.
    void *by_name = dlsym(RTLD_DEFAULT, m.name);
    ASSERT_NE(by_name, nullptr) << dlerror();
    EXPECT_EQ(reinterpret_cast<void *>(m.in_table), by_name);
  }
}

TEST(ApiTable, SizeIsTheHeaderPlusOnePointerPerPublicFunction) {
  const hurray_api *api = get_table();
  ASSERT_NE(api, nullptr);
  const size_t n = members(api).size();
  EXPECT_EQ(n, 48u);
  // Header: struct_size, abi_version, reserved, extension_start (c-ffi §8.1).
  const size_t header = 2 * sizeof(size_t) + sizeof(void *);
  EXPECT_EQ(offsetof(hurray_api, extension_start), 2 * sizeof(size_t));
  EXPECT_EQ(offsetof(hurray_api, version), header);
  EXPECT_EQ(sizeof(hurray_api), header + n * sizeof(AnyFn));
  EXPECT_EQ(api->struct_size, sizeof(hurray_api));
  EXPECT_EQ(api->abi_version, HURRAY_API_VERSION);
  EXPECT_EQ(api->reserved, 0u);
  EXPECT_EQ(api->extension_start, nullptr);  // no extension type is defined yet
  // The members follow each other in header order, right after the header.
  EXPECT_EQ(offsetof(hurray_api, check_version), header + 1 * sizeof(AnyFn));
  EXPECT_EQ(offsetof(hurray_api, check_label), header + 24 * sizeof(AnyFn));
  EXPECT_EQ(offsetof(hurray_api, ipc_import_async), header + 31 * sizeof(AnyFn));
  EXPECT_EQ(offsetof(hurray_api, event_release), header + (n - 14) * sizeof(AnyFn));
  EXPECT_EQ(offsetof(hurray_api, retire_deferred_frees), header + (n - 13) * sizeof(AnyFn));
  EXPECT_EQ(offsetof(hurray_api, to_dlpack_n), header + (n - 8) * sizeof(AnyFn));
  EXPECT_EQ(offsetof(hurray_api, alloc_group), header + (n - 7) * sizeof(AnyFn));
  EXPECT_EQ(offsetof(hurray_api, ipc_recv_set), header + (n - 1) * sizeof(AnyFn));
}

TEST(ApiTable, HasSaysWhichMembersFitInStructSize) {
  const hurray_api *api = get_table();
  ASSERT_NE(api, nullptr);
  EXPECT_TRUE(HURRAY_API_HAS(api, version));
  EXPECT_TRUE(HURRAY_API_HAS(api, set_diagnostic_hook));
  // A table as an older library would have it, ending after buffer_extent.
  hurray_api older = *api;
  older.struct_size = offsetof(hurray_api, share);
  EXPECT_TRUE(HURRAY_API_HAS(&older, buffer_extent));
  EXPECT_FALSE(HURRAY_API_HAS(&older, share));
  EXPECT_FALSE(HURRAY_API_HAS(&older, set_diagnostic_hook));
  older.struct_size = offsetof(hurray_api, share) + 1;  // ends inside `share`
  EXPECT_FALSE(HURRAY_API_HAS(&older, share));
}

TEST(ApiTable, EveryCallReturnsTheSameConstantTable) {
  const hurray_api *a = get_table();
  const hurray_api *b = get_table();
  EXPECT_EQ(a, b);
  // Static storage inside libhurray.so, not in this program.
  Dl_info info{};
  ASSERT_NE(dladdr(a, &info), 0);
  ASSERT_NE(info.dli_fname, nullptr);
  EXPECT_NE(std::string(info.dli_fname).find("libhurray.so"), std::string::npos) << info.dli_fname;
}

TEST(ApiTable, WorksThroughTheTable) {
  const hurray_api *api = get_table();
  ASSERT_NE(api, nullptr);
  EXPECT_EQ(api->version(), HURRAY_VERSION);
  EXPECT_STREQ(api->status_name(HURRAY_ERR_OVERFLOW), "HURRAY_ERR_OVERFLOW");

  HandleSource src;
  hurray_buffer h = src.handle(dense({2, 3}));
  hurray_buffer out[3];
  ASSERT_OK(api->share(&h, 3, out));
  DLManagedTensorVersioned *t = nullptr;
  ASSERT_OK(api->to_dlpack_versioned(&out[0], &t));
  EXPECT_OK(api->buffer_release(&out[1]));
  EXPECT_OK(api->buffer_release(&out[2]));
  EXPECT_EQ(src.log.calls.load(), 0);
  EXPECT_OK(api->dlpack_versioned_delete(t));
  EXPECT_EQ(src.log.calls.load(), 1);

  EXPECT_STATUS(api->buffer_release(nullptr), HURRAY_ERR_INVALID_ARGUMENT);
  EXPECT_STREQ(api->last_error(), hurray_last_error());
}

// ---------------------------------------------------------------------------
// Version negotiation
// ---------------------------------------------------------------------------

TEST(ApiVersion, EveryMinorFromTheOldestToTheLibrarysIsServed) {
  const uint32_t major = HURRAY_API_VERSION_MAJOR;
  EXPECT_GE(major, 1u);
  EXPECT_LE(HURRAY_API_VERSION_OLDEST_MINOR, HURRAY_API_VERSION_MINOR);
  for (uint32_t minor = HURRAY_API_VERSION_OLDEST_MINOR; minor <= HURRAY_API_VERSION_MINOR;
       ++minor) {
    SCOPED_TRACE(minor);
    const hurray_api *api = nullptr;
    ASSERT_OK(hurray_get_api(pack(major, minor), &api));
    ASSERT_NE(api, nullptr);
    // The library's own version and size, whatever minor was asked for.
    EXPECT_EQ(api->abi_version, HURRAY_API_VERSION);
    EXPECT_EQ(api->struct_size, sizeof(hurray_api));
  }
}

// Calls hurray_get_api(version) expecting `status`, *out left as it was,
// and a message mentioning each of `mentions`.
void ExpectRefused(uint32_t version, int32_t status, std::vector<std::string> mentions) {
  SCOPED_TRACE("abi_version 0x" + [&] {
    char buf[16];
    std::snprintf(buf, sizeof buf, "%x", version);
    return std::string(buf);
  }());
  const hurray_api *api = sentinel();
  EXPECT_STATUS(hurray_get_api(version, &api), status);
  EXPECT_EQ(api, sentinel()) << "*out was written on failure";
  for (const std::string &m : mentions) EXPECT_TRUE(LastErrorMentions(m.c_str()));
}

std::string dotted(uint32_t major, uint32_t minor) {
  return std::to_string(major) + "." + std::to_string(minor);
}

// Tables 1.0 and 1.1 had a 16-byte header: a caller built against them
// would read every member 8 bytes off, so it is refused (c-ffi §8.1).
TEST(ApiVersion, MinorsBeforeTheLastLayoutChangeAreRefused) {
  const uint32_t major = HURRAY_API_VERSION_MAJOR;
  for (uint32_t minor = 0; minor < HURRAY_API_VERSION_OLDEST_MINOR; ++minor) {
    ExpectRefused(pack(major, minor), HURRAY_ERR_UNSUPPORTED_VERSION,
                  {dotted(major, minor), "older", "rebuild"});
  }
}

TEST(ApiVersion, NewerMinorIsRefused) {
  const uint32_t major = HURRAY_API_VERSION_MAJOR, minor = HURRAY_API_VERSION_MINOR;
  ExpectRefused(pack(major, minor + 1), HURRAY_ERR_UNSUPPORTED_VERSION,
                {dotted(major, minor + 1), dotted(major, minor), "newer"});
  ExpectRefused(pack(major, 0xFFFF), HURRAY_ERR_UNSUPPORTED_VERSION, {dotted(major, 0xFFFF)});
}

TEST(ApiVersion, OtherMajorIsRefusedEvenWhenOlder) {
  const uint32_t major = HURRAY_API_VERSION_MAJOR, minor = HURRAY_API_VERSION_MINOR;
  ExpectRefused(pack(major + 1, 0), HURRAY_ERR_UNSUPPORTED_VERSION,
                {dotted(major + 1, 0), dotted(major, minor), "major"});
  ExpectRefused(pack(major - 1, 1), HURRAY_ERR_UNSUPPORTED_VERSION,
                {dotted(major - 1, 1), "major"});
  ExpectRefused(pack(major + 1, minor), HURRAY_ERR_UNSUPPORTED_VERSION, {"major"});
  ExpectRefused(0xFFFFFFFFu, HURRAY_ERR_UNSUPPORTED_VERSION, {"65535.65535"});
}

TEST(ApiVersion, ZeroIsRefused) {
  ExpectRefused(0, HURRAY_ERR_UNSUPPORTED_VERSION, {"abi_version is 0", "HURRAY_API_VERSION"});
}

TEST(ApiVersion, LibraryReleaseNumberIsNotATableVersion) {
  // HURRAY_VERSION (0.1.0 packed as 0x000100) reads as table version 0.256.
  if ((HURRAY_VERSION >> 16) != HURRAY_API_VERSION_MAJOR) {
    ExpectRefused(HURRAY_VERSION, HURRAY_ERR_UNSUPPORTED_VERSION, {"major"});
  }
}

TEST(ApiVersion, NullOutIsInvalidArgument) {
  EXPECT_STATUS(hurray_get_api(HURRAY_API_VERSION, nullptr), HURRAY_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(LastErrorMentions("out is NULL"));
  EXPECT_STATUS(hurray_get_api(0, nullptr), HURRAY_ERR_INVALID_ARGUMENT);
}

TEST(ApiVersion, SuccessLeavesTheLastErrorAlone) {
  EXPECT_STATUS(hurray_get_api(HURRAY_API_VERSION, nullptr), HURRAY_ERR_INVALID_ARGUMENT);
  const std::string before = hurray_last_error();
  const hurray_api *api = nullptr;
  EXPECT_OK(hurray_get_api(HURRAY_API_VERSION, &api));
  EXPECT_EQ(before, hurray_last_error());
}

TEST(ApiVersion, ConcurrentCallsAgreeAndKeepTheirOwnMessages) {
  const hurray_api *expected = get_table();
  ASSERT_NE(expected, nullptr);
  constexpr int kThreads = 8, kCalls = 2000;
  std::vector<int> bad(kThreads, 0);
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([i, expected, &bad] {
      // Each thread is refused with its own minor, then asks correctly.
      const uint32_t wrong = pack(HURRAY_API_VERSION_MAJOR, HURRAY_API_VERSION_MINOR + 1 + i);
      const std::string mine = dotted(HURRAY_API_VERSION_MAJOR, HURRAY_API_VERSION_MINOR + 1 + i);
      for (int k = 0; k < kCalls; ++k) {
        const hurray_api *api = sentinel();
        if (hurray_get_api(wrong, &api) != HURRAY_ERR_UNSUPPORTED_VERSION || api != sentinel()) {
          ++bad[i];
        }
        if (hurray_get_api(HURRAY_API_VERSION, &api) != HURRAY_OK || api != expected ||
            api->share != &hurray_share) {
          ++bad[i];
        }
        if (std::string(hurray_last_error()).find(mine) == std::string::npos) ++bad[i];
      }
    });
  }
  for (std::thread &t : threads) t.join();
  for (int i = 0; i < kThreads; ++i) EXPECT_EQ(bad[i], 0) << "thread " << i;
}

// ---------------------------------------------------------------------------
// hurray_buffer_move
// ---------------------------------------------------------------------------

bool all_zero(const hurray_buffer &h) {
  const unsigned char *p = reinterpret_cast<const unsigned char *>(&h);
  for (size_t k = 0; k < sizeof h; ++k) {
    if (p[k] != 0) return false;
  }
  return true;
}

TEST(BufferMove, ZeroesTheSourceAndReleasesOnce) {
  HandleSource src;
  hurray_buffer h = src.handle(dense({4}));
  const hurray_buffer before = h;
  hurray_buffer moved = hurray_buffer_move(&h);
  EXPECT_TRUE(all_zero(h));
  EXPECT_EQ(h.release_fn, nullptr);
  EXPECT_EQ(std::memcmp(&moved, &before, sizeof moved), 0);
  EXPECT_OK(hurray_buffer_validate(&moved));

  EXPECT_OK(hurray_buffer_release(&h));  // empty: nothing to release
  EXPECT_EQ(src.log.calls.load(), 0);
  EXPECT_OK(hurray_buffer_release(&moved));
  EXPECT_EQ(src.log.calls.load(), 1);
  EXPECT_EQ(src.log.last_arg.load(), &src.log);
  EXPECT_OK(hurray_buffer_release(&moved));
  EXPECT_EQ(src.log.calls.load(), 1);
}

TEST(BufferMove, MovedSharesStillReleaseTheSourceOnce) {
  HandleSource src;
  hurray_buffer h = src.handle(dense({2, 2}));
  hurray_buffer shares[3];
  ASSERT_OK(hurray_share(&h, 3, shares));
  hurray_buffer kept[3];
  for (int i = 0; i < 3; ++i) {
    kept[i] = hurray_buffer_move(&shares[i]);
    EXPECT_TRUE(all_zero(shares[i]));
  }
  for (int i = 0; i < 3; ++i) {
    EXPECT_OK(hurray_buffer_release(&shares[i]));
    EXPECT_EQ(src.log.calls.load(), 0);
  }
  for (int i = 0; i < 3; ++i) EXPECT_OK(hurray_buffer_release(&kept[i]));
  EXPECT_EQ(src.log.calls.load(), 1);
}

TEST(BufferMove, EmptyAndNullGiveAnEmptyHandle) {
  hurray_buffer empty;
  std::memset(&empty, 0, sizeof empty);
  EXPECT_TRUE(all_zero(hurray_buffer_move(&empty)));
  EXPECT_TRUE(all_zero(empty));
  EXPECT_TRUE(all_zero(hurray_buffer_move(nullptr)));
}

}  // namespace
