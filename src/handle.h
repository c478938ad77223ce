// Handle helpers shared by the library's steps (spec §2-§4).
#ifndef HURRAY_SRC_HANDLE_H_
#define HURRAY_SRC_HANDLE_H_

#include <cstring>

#include "hurray/hurray.h"
#include "layout.h"

namespace hurray {

inline Desc desc_of(const hurray_buffer &h) {
  return Desc{h.data,    h.byte_offset, h.device.device_type, h.device.device_id, h.dtype,
              h.ndim,    h.shape,       h.strides,            h.flags};
}

// Validates a handle that is about to be consumed or read (spec §3): NULL
// pointer, empty handle, unknown layout version, and every rule of
// check_desc with strides required when ndim > 0. `what` names the argument.
int32_t check_handle(const hurray_buffer *h, const char *what, hurray_extent *extent);

// Leaves `h` empty (all fields zero) without calling anything.
inline void clear(hurray_buffer *h) { std::memset(h, 0, sizeof *h); }

}  // namespace hurray

#endif  // HURRAY_SRC_HANDLE_H_
