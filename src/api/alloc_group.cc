// SPDX-License-Identifier: Apache-2.0
// hurray_alloc_group: N compact tensors in one allocation, each its own
// handle over one shared lifetime (docs/impl/c-ffi.md §6.2). Built from the
// library's own parts: one byte buffer from hurray_alloc[_async], shared N
// ways (one count), each share turned into a view of its tensor's bytes. So
// the memory is freed once, after the last of the N handles, by the same
// code that frees any shared buffer, and a view of shareable memory crosses
// processes as one.
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "common/error.h"
#include "handle/layout.h"
#include "hurray/hurray.h"

namespace hurray::detail {
namespace {

constexpr uint64_t kAlign = HURRAY_GROUP_ALIGNMENT;

// The bytes each compact tensor takes; sets *failed on a bad description.
int32_t plan(hurray_device device, size_t n, const hurray_tensor_desc *descs, uint64_t *offsets,
             uint64_t *total, size_t *failed) {
  static char placeholder;  // stands in for the memory not yet allocated
  uint64_t at = 0;
  for (size_t i = 0; i < n; ++i) {
    const hurray_tensor_desc &t = descs[i];
    const uint64_t known = HURRAY_FLAG_READ_ONLY | HURRAY_FLAG_SUBBYTE_PADDED;
    if ((t.flags & ~known) != 0) {
      *failed = i;
      return fail(HURRAY_ERR_INVALID_ARGUMENT,
                  "descs[%zu].flags 0x%" PRIx64
                  " has bits other than HURRAY_FLAG_READ_ONLY and HURRAY_FLAG_SUBBYTE_PADDED",
                  i, t.flags);
    }
    char who[32];
    std::snprintf(who, sizeof who, "descs[%zu]", i);
    Desc d{&placeholder, 0,      device.device_type, device.device_id, t.dtype, t.ndim, t.shape,
           nullptr,      t.flags};
    hurray_extent e;
    const int32_t st = check_desc(d, who, false, &e);
    if (st != HURRAY_OK) {
      *failed = i;
      return st;
    }
    const uint64_t nbytes = static_cast<uint64_t>(e.highest);
    const uint64_t start = (at + kAlign - 1) / kAlign * kAlign;
    if (start < at || nbytes > (uint64_t{1} << 62) - start) {
      *failed = i;
      return fail(HURRAY_ERR_OVERFLOW, "the group's bytes pass 2^62 at descs[%zu]", i);
    }
    offsets[i] = start;
    at = start + nbytes;
  }
  *total = at;
  return HURRAY_OK;
}

}  // namespace
}  // namespace hurray::detail

extern "C" {

HURRAY_API int32_t hurray_alloc_group(hurray_device device, size_t n,
                                      const hurray_tensor_desc *descs, uint64_t flags, void *stream,
                                      hurray_buffer *out, size_t *failed_index) {
  using namespace hurray::detail;
  size_t failed = HURRAY_BATCH_NO_INDEX;
  auto done = [&](int32_t st) {
    if (st != HURRAY_OK && failed_index != nullptr) *failed_index = failed;
    return st;
  };
  if (n == 0) return HURRAY_OK;
  if (descs == nullptr) return done(fail(HURRAY_ERR_INVALID_ARGUMENT, "descs is NULL"));
  if (out == nullptr) return done(fail(HURRAY_ERR_INVALID_ARGUMENT, "out is NULL"));
  if (n > (size_t{1} << 32)) {
    return done(fail(HURRAY_ERR_INVALID_ARGUMENT, "n is %zu (at most 2^32)", n));
  }
  // Bookkeeping first (offsets, then the handles in the making), so that a
  // failure leaves `out` untouched.
  void *mem = std::malloc(n * (sizeof(uint64_t) + sizeof(hurray_buffer)));
  if (mem == nullptr) {
    return done(fail(HURRAY_ERR_OUT_OF_MEMORY, "allocating the bookkeeping of %zu tensors", n));
  }
  auto *offsets = static_cast<uint64_t *>(mem);
  auto *hs = reinterpret_cast<hurray_buffer *>(offsets + n);
  uint64_t total = 0;
  int32_t st = plan(device, n, descs, offsets, &total, &failed);
  // One byte buffer, with room to start the first tensor at an aligned
  // address whatever the allocator's own alignment (CPU: 64 bytes).
  const hurray_dtype u8{1, 8, 1};  // kDLUInt, 8 bits, 1 lane
  const int64_t bytes = static_cast<int64_t>(total + kAlign);
  hurray_buffer base;
  if (st == HURRAY_OK) {
    st = stream != nullptr ? hurray_alloc_async(device, u8, 1, &bytes, flags, stream, &base)
                           : hurray_alloc(device, u8, 1, &bytes, flags, &base);
  }
  bool shared = false;  // hs[0..n) hold the n references
  if (st == HURRAY_OK) {
    const uint64_t addr = reinterpret_cast<uintptr_t>(base.data) + base.byte_offset;
    const uint64_t pad = (kAlign - addr % kAlign) % kAlign;
    for (size_t i = 0; i < n; ++i) offsets[i] += pad;
    st = hurray_share(&base, n, hs);  // n references of one count
    if (st == HURRAY_OK) {
      shared = true;
    } else {
      (void)hurray_buffer_release(&base);
    }
  }
  for (size_t i = 0; st == HURRAY_OK && i < n; ++i) {
    const hurray_tensor_desc &t = descs[i];
    const hurray_view_desc v{offsets[i], t.flags, hurray_device{0, 0}, t.dtype, t.ndim,
                             t.shape,    nullptr};
    st = hurray_view(&hs[i], &v, &hs[i]);  // a failed view consumes nothing
    if (st != HURRAY_OK) failed = i;
  }
  if (st != HURRAY_OK) {
    // Every reference goes back (views made and shares not yet viewed
    // alike): the memory is freed once, by the last of them.
    for (size_t i = 0; shared && i < n; ++i) (void)hurray_buffer_release(&hs[i]);
    std::free(mem);
    return done(st);
  }
  std::memcpy(out, hs, n * sizeof(hurray_buffer));
  std::free(mem);
  return HURRAY_OK;
}

}  // extern "C"
