// SPDX-License-Identifier: Apache-2.0
// CPU memory for hurray_alloc: one aligned allocation holds shape, strides
// and data.
#include <cstdlib>
#include <cstring>

#include "alloc.h"
#include "error.h"
#include "layout.h"

namespace hurray::detail {
namespace {

void cpu_release(void *block) { std::free(block); }

constexpr uint64_t kAlign = HURRAY_CPU_ALIGNMENT;

}  // namespace

int32_t cpu_alloc(hurray_dtype dtype, int32_t ndim, const int64_t *shape, uint64_t flags,
                  uint64_t nbytes, hurray_buffer *out) {
  // Layout: [shape: ndim][strides: ndim] padded to kAlign, then the data.
  const uint64_t meta =
      (uint64_t{2} * static_cast<uint64_t>(ndim) * sizeof(int64_t) + kAlign - 1) / kAlign * kAlign;
  uint64_t total;
  if (__builtin_add_overflow(meta, nbytes, &total) ||
      __builtin_add_overflow(total, kAlign - 1, &total)) {
    return fail(HURRAY_ERR_OVERFLOW, "a %llu-byte CPU allocation is beyond address arithmetic",
                static_cast<unsigned long long>(nbytes));
  }
  total = total / kAlign * kAlign;
  if (total == 0) total = kAlign;  // aligned_alloc(…, 0) may return NULL
  void *block = std::aligned_alloc(kAlign, total);
  if (block == nullptr) {
    return fail(HURRAY_ERR_OUT_OF_MEMORY, "allocating %llu bytes of CPU memory failed",
                static_cast<unsigned long long>(total));
  }
  *out = compact_handle(&cpu_release, block, static_cast<char *>(block) + meta,
                        hurray_device{HURRAY_DEVICE_CPU, 0}, dtype, ndim, shape,
                        static_cast<int64_t *>(block), flags);
  return HURRAY_OK;
}

}  // namespace hurray::detail
