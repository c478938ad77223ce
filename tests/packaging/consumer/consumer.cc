// SPDX-License-Identifier: Apache-2.0
// The installed headers from C++17: the C ABI, and the header-only C++ layer
// when the installed tree has it.
#include <hurray/hurray.h>
#if __has_include(<hurray/hurray.hpp>)
#include <hurray/hurray.hpp>
#endif

#include <cstdint>
#include <cstdio>

int main() {
  if (hurray_check_version(HURRAY_VERSION) != HURRAY_OK) {
    std::fprintf(stderr, "consumer.cc: %s\n", hurray_last_error());
    return 1;
  }
  hurray_device cpu{HURRAY_DEVICE_CPU, 0};
  hurray_dtype u8{1 /* uint */, 8, 1};
  std::int64_t n = 0;  // a zero-size tensor is fine too
  hurray_buffer buf{};
  if (hurray_alloc(cpu, u8, 1, &n, HURRAY_FLAG_READ_ONLY, &buf) != HURRAY_OK) {
    std::fprintf(stderr, "consumer.cc: alloc: %s\n", hurray_last_error());
    return 1;
  }
  bool ok = buf.flags == HURRAY_FLAG_READ_ONLY && buf.ndim == 1 && buf.shape[0] == 0;
  hurray_buffer_release(&buf);
  std::printf("consumer.cc: %s\n", ok ? "ok" : "unexpected handle");
  return ok ? 0 : 1;
}
