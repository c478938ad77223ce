// SPDX-License-Identifier: Apache-2.0
// hurray_get_api: the versioned function table for runtimes that dlopen
// libhurray (c-ffi §8).
#include <cinttypes>
#include <cstddef>

#include "common/error.h"
#include "hurray/hurray.h"

namespace hurray::detail {
namespace {

// Every member of hurray_api, i.e. every public function of hurray.h except
// hurray_get_api, in table order. X(member) stands for hurray_<member>.
// Adding a public function means appending it here and to hurray_api (the
// static_asserts below fail until both agree); tests/api/function_table_members.cmake
// checks this list against the HURRAY_API declarations of hurray.h.
#define HURRAY_API_TABLE_MEMBERS(X) \
  X(version)                        \
  X(check_version)                  \
  X(last_error)                     \
  X(status_name)                    \
  X(buffer_release)                 \
  X(buffer_validate)                \
  X(buffer_extent)                  \
  X(share)                          \
  X(to_dlpack_versioned)            \
  X(to_dlpack)                      \
  X(from_dlpack_versioned)          \
  X(from_dlpack)                    \
  X(dlpack_versioned_delete)        \
  X(dlpack_delete)                  \
  X(alloc)                          \
  X(copy)                           \
  X(alloc_async)                    \
  X(copy_async)                     \
  X(stream_wait)                    \
  X(get_diagnostics)                \
  X(set_diagnostic_hook)            \
  X(check_enable)                   \
  X(check_get_state)                \
  X(check_live)                     \
  X(check_label)                    \
  X(ipc_export)                     \
  X(ipc_message_discard)            \
  X(ipc_import)                     \
  X(ipc_send)                       \
  X(ipc_recv)                       \
  X(ipc_export_async)               \
  X(ipc_import_async)               \
  X(event_record)                   \
  X(event_wait)                     \
  X(event_release)                  \
  X(retire_deferred_frees)          \
  X(view)                           \
  X(from_dlpack_versioned_n)        \
  X(from_dlpack_n)                  \
  X(to_dlpack_versioned_n)          \
  X(to_dlpack_n)                    \
  X(alloc_group)                    \
  X(ipc_export_set)                 \
  X(ipc_set_message_parts)          \
  X(ipc_set_message_discard)        \
  X(ipc_import_set)                 \
  X(ipc_send_set)                   \
  X(ipc_recv_set)

// Position of each member in the list, from 0.
enum MemberIndex : size_t {
#define HURRAY_X(name) k_##name,
  HURRAY_API_TABLE_MEMBERS(HURRAY_X)
#undef HURRAY_X
      kMemberCount
};

constexpr size_t kHeaderBytes = offsetof(hurray_api, version);
static_assert(kHeaderBytes == offsetof(hurray_api, extension_start) + sizeof(void *),
              "hurray_api: the first member follows the header without padding");
static_assert(sizeof(void *) != 8 ||
                  (offsetof(hurray_api, abi_version) == 8 && offsetof(hurray_api, reserved) == 12 &&
                   offsetof(hurray_api, extension_start) == 16 && kHeaderBytes == 24),
              "hurray_api header layout on 64-bit targets");
static_assert(sizeof(void *) != 8 || (sizeof(hurray_api_extension) == 24 &&
                                      offsetof(hurray_api_extension, next) == 16),
              "hurray_api_extension layout on 64-bit targets");

// One member per listed function, nothing else: the table's size is the
// header plus one pointer per list entry, and each member sits at its list
// position (so the list order is the table order), with the exact type of
// the function it names.
static_assert(sizeof(hurray_api) == kHeaderBytes + kMemberCount * sizeof(void (*)(void)),
              "hurray_api has members that HURRAY_API_TABLE_MEMBERS does not list, or the "
              "reverse");
#define HURRAY_X(name)                                                                          \
  static_assert(offsetof(hurray_api, name) == kHeaderBytes + k_##name * sizeof(void (*)(void)), \
                "hurray_api::" #name " is not at its HURRAY_API_TABLE_MEMBERS position");       \
  static_assert(sizeof(hurray_api::name) == sizeof(void (*)(void)), "one pointer per member");
HURRAY_API_TABLE_MEMBERS(HURRAY_X)
#undef HURRAY_X

constexpr hurray_api make_table() {
  hurray_api t{};
  t.struct_size = sizeof(hurray_api);
  t.abi_version = HURRAY_API_VERSION;
  t.reserved = 0;
  t.extension_start = nullptr;  // no extension type is defined yet
  // Assigned by name from the same list, so every member is set (the size
  // assert above leaves no unlisted member), and the type of &hurray_<name>
  // must be the member's type.
#define HURRAY_X(name) t.name = &hurray_##name;
  HURRAY_API_TABLE_MEMBERS(HURRAY_X)
#undef HURRAY_X
  return t;
}

// Constant-initialised (read-only data, no initialisation at run time), so
// any thread may read it at any time, even while the library is loading.
constexpr hurray_api kTable = make_table();

}  // namespace
}  // namespace hurray::detail

extern "C" {

HURRAY_API int32_t hurray_get_api(uint32_t abi_version, const hurray_api **out) {
  if (out == nullptr) {
    return hurray::detail::fail(HURRAY_ERR_INVALID_ARGUMENT, "hurray_get_api: out is NULL");
  }
  const uint32_t lib_major = HURRAY_API_VERSION_MAJOR, lib_minor = HURRAY_API_VERSION_MINOR;
  const uint32_t oldest = HURRAY_API_VERSION_OLDEST_MINOR;
  const uint32_t major = abi_version >> 16, minor = abi_version & 0xFFFFu;
  if (abi_version == 0) {
    return hurray::detail::fail(HURRAY_ERR_UNSUPPORTED_VERSION,
                                "hurray_get_api: abi_version is 0; pass HURRAY_API_VERSION (this "
                                "library serves table version %" PRIu32 ".%" PRIu32 " to %" PRIu32
                                ".%" PRIu32 ")",
                                lib_major, oldest, lib_major, lib_minor);
  }
  if (major != lib_major || minor > lib_minor || minor < oldest) {
    return hurray::detail::fail(
        HURRAY_ERR_UNSUPPORTED_VERSION,
        "hurray_get_api: caller wants function table version %" PRIu32 ".%" PRIu32
        " but this libhurray (%s) serves %" PRIu32 ".%" PRIu32 " to %" PRIu32 ".%" PRIu32 " (%s)",
        major, minor, HURRAY_VERSION_STRING, lib_major, oldest, lib_major, lib_minor,
        major != lib_major  ? "the major version differs"
        : minor > lib_minor ? "the caller's header is newer than the library"
                            : "the caller's header is older than the table's last layout change "
                              "(rebuild against this hurray.h)");
  }
  *out = &hurray::detail::kTable;
  return HURRAY_OK;
}

}  // extern "C"
