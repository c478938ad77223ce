// SPDX-License-Identifier: Apache-2.0
// Handle helpers shared by the library's steps (spec §2-§4).
#ifndef HURRAY_SRC_HANDLE_H_
#define HURRAY_SRC_HANDLE_H_

#include <cstddef>
#include <cstring>

#include "hurray/hurray.h"
#include "layout.h"

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

}  // namespace hurray::detail

#endif  // HURRAY_SRC_HANDLE_H_
