// SPDX-License-Identifier: Apache-2.0
// Handle helpers shared by the library's steps (spec §2-§4).
#ifndef HURRAY_SRC_HANDLE_HANDLE_H_
#define HURRAY_SRC_HANDLE_HANDLE_H_

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "handle/layout.h"
#include "hurray/hurray.h"

namespace hurray::detail {

inline Desc desc_of(const hurray_buffer &h) {
  return Desc{
      h.data,    h.byte_offset, h.device.device_type, h.device.device_id, h.dtype, h.ndim, h.shape,
      h.strides, h.flags};
}

// The exact handle check (spec §3): NULL pointer, empty handle, unknown
// layout version, and every rule of check_desc_exact with strides required
// when ndim > 0. `what` names the argument in the message.
__attribute__((noinline)) int32_t check_handle_exact(const hurray_buffer *h, const char *what,
                                                     hurray_extent *extent);

// check_handle_exact, through the fast check first when no extent is wanted:
// same answers, same messages.
inline int32_t check_handle(const hurray_buffer *h, const char *what, hurray_extent *extent) {
  if (extent == nullptr && h != nullptr && h->release_fn != nullptr &&
      h->version == HURRAY_BUFFER_VERSION &&
      desc_fast_ok(h->data, h->byte_offset, h->device.device_type, h->device.device_id, h->dtype,
                   h->ndim, h->shape, h->strides)) {
    return HURRAY_OK;
  }
  return check_handle_exact(h, what, extent);
}

// The fields that describe the memory: flags through strides, offsets 24 to
// 79 of layout version 1, with no padding in between.
constexpr size_t kDescriptionOffset = offsetof(hurray_buffer, flags);
constexpr size_t kDescriptionSize = sizeof(hurray_buffer) - kDescriptionOffset;
static_assert(kDescriptionOffset == 24 && kDescriptionSize == 56,
              "description fields of layout version 1 (spec §2.1)");

// True when a and b describe the same memory field for field (flags, data,
// byte_offset, device, dtype, ndim and the shape/strides pointers).
inline bool same_description(const hurray_buffer &a, const hurray_buffer &b) {
  return std::memcmp(reinterpret_cast<const char *>(&a) + kDescriptionOffset,
                     reinterpret_cast<const char *>(&b) + kDescriptionOffset,
                     kDescriptionSize) == 0;
}

// Leaves `h` empty (all fields zero) without calling anything.
inline void clear(hurray_buffer *h) { std::memset(h, 0, sizeof *h); }

// A handle as five 16-byte chunks (offsets 0, 16, ..., 64), for writing and
// copying handles the library hands out. Every handle the library writes is
// stored as these five chunks, so that whoever reads it next (a struct copy,
// the next call's wide loads, a field) reads within one earlier store: a
// load that spans several narrower stores still in flight cannot be
// forwarded from them and waits for them to reach the cache (about 10-20
// cycles each on current x86 cores), which cost the export paths more than
// their instructions did (docs/performance-history.md, "Round 4").
typedef int64_t HandleChunk __attribute__((vector_size(16)));
// Five named chunks (not an array: GCC keeps named members in registers
// where it spills an array to the stack).
struct HandleChunks {
  HandleChunk c0, c1, c2, c3, c4;
};
static_assert(sizeof(HandleChunks) == sizeof(hurray_buffer), "a handle is five chunks");

// Unaligned 16-byte moves (a handle is only 8-byte aligned).
inline HandleChunk load_chunk(const void *p) {
  HandleChunk v;
  std::memcpy(&v, p, 16);
  return v;
}
inline void store_chunk(void *p, HandleChunk v) { std::memcpy(p, &v, 16); }
inline HandleChunks load_chunks(const hurray_buffer *h) {
  const char *p = reinterpret_cast<const char *>(h);
  return HandleChunks{load_chunk(p), load_chunk(p + 16), load_chunk(p + 32), load_chunk(p + 48),
                      load_chunk(p + 64)};
}
inline void store_chunks(hurray_buffer *h, const HandleChunks &v) {
  char *p = reinterpret_cast<char *>(h);
  store_chunk(p, v.c0);
  store_chunk(p + 16, v.c1);
  store_chunk(p + 32, v.c2);
  store_chunk(p + 48, v.c3);
  store_chunk(p + 64, v.c4);
}
// `v` with release_fn and user_data replaced (chunk 0's upper half, chunk
// 1's lower half).
inline HandleChunks with_owner(HandleChunks v, hurray_release_fn fn, void *user_data) {
  v.c0 = HandleChunk{v.c0[0], static_cast<int64_t>(reinterpret_cast<uintptr_t>(fn))};
  v.c1 = HandleChunk{static_cast<int64_t>(reinterpret_cast<uintptr_t>(user_data)), v.c1[1]};
  return v;
}

// A compact handle of `ndim` dims over `data`: `dims` (2 * ndim int64_t,
// owned by the caller's block) receives the shape and its compact strides.
hurray_buffer compact_handle(hurray_release_fn release, void *user_data, void *data,
                             hurray_device device, hurray_dtype dtype, int32_t ndim,
                             const int64_t *shape, int64_t *dims, uint64_t flags);

}  // namespace hurray::detail

#endif  // HURRAY_SRC_HANDLE_HANDLE_H_
