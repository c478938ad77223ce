// SPDX-License-Identifier: Apache-2.0
// hurray.h in C++17 under -Wall -Wextra -Wpedantic -Werror, included before a
// dlpack.h this time (the other order is tested in C), plus the header-only
// C++ layer when it is there.
#include <hurray/hurray.h>
#include <hurray/dlpack.h>
#if __has_include(<hurray/hurray.hpp>)
#include <hurray/hurray.hpp>
#endif

#include <cstdio>
#include <type_traits>

static_assert(std::is_trivially_copyable_v<hurray_buffer>, "a handle is a plain value");
static_assert(std::is_standard_layout_v<hurray_buffer>, "a handle is a C struct");
static_assert(sizeof(hurray_buffer) == 80, "hurray_buffer is 80 bytes");

int main() {
  // hurray.h's forward declarations name the structs dlpack.h defines.
  int32_t (*to_v)(hurray_buffer *, DLManagedTensorVersioned **) = &hurray_to_dlpack_versioned;
  int32_t (*from_l)(DLManagedTensor *, uint32_t, hurray_buffer *) = &hurray_from_dlpack;
  (void)to_v;
  (void)from_l;
  if (hurray_check_version(HURRAY_VERSION) != HURRAY_OK) {
    std::fprintf(stderr, "version check failed: %s\n", hurray_last_error());
    return 1;
  }
  std::printf("header_cxx17: ok\n");
  return 0;
}
