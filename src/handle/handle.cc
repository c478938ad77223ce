// SPDX-License-Identifier: Apache-2.0
// The handle rules: the exact handle check and the compact handle that
// the library's own allocations are described by.
#include "handle/handle.h"

#include <cinttypes>

#include "common/error.h"

namespace hurray::detail {

int32_t check_handle_exact(const hurray_buffer *h, const char *what, hurray_extent *extent) {
  if (h == nullptr) return fail(HURRAY_ERR_INVALID_ARGUMENT, "%s is NULL", what);
  if (h->release_fn == nullptr) {
    return fail(HURRAY_ERR_INVALID_ARGUMENT, "%s is empty (release_fn is NULL)", what);
  }
  if (h->version != HURRAY_BUFFER_VERSION) {
    return fail(HURRAY_ERR_UNSUPPORTED_VERSION,
                "%s.version is %" PRIu32 "; this library reads handle layout version %u", what,
                h->version, HURRAY_BUFFER_VERSION);
  }
  return check_desc_exact(desc_of(*h), what, /*strides_required=*/true, extent);
}

hurray_buffer compact_handle(hurray_release_fn release, void *user_data, void *data,
                             hurray_device device, hurray_dtype dtype, int32_t ndim,
                             const int64_t *shape, int64_t *dims, uint64_t flags) {
  if (ndim > 0) {
    std::memcpy(dims, shape, sizeof(int64_t) * static_cast<size_t>(ndim));
    compact_strides(ndim, shape, dims + ndim);
  }
  hurray_buffer h;
  std::memset(&h, 0, sizeof h);
  h.version = HURRAY_BUFFER_VERSION;
  h.release_fn = release;
  h.user_data = user_data;
  h.flags = flags;
  h.data = data;
  h.device = device;
  h.dtype = dtype;
  h.ndim = ndim;
  h.shape = ndim > 0 ? dims : nullptr;
  h.strides = ndim > 0 ? dims + ndim : nullptr;
  return h;
}

}  // namespace hurray::detail
