// SPDX-License-Identifier: Apache-2.0
// hurray_buffer_release / _validate / _extent and the handle check.
#include "handle.h"

#include <cinttypes>

#include "check.h"
#include "error.h"

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

}  // namespace hurray::detail

extern "C" {

HURRAY_API int32_t hurray_buffer_release(hurray_buffer *h) {
  if (h == nullptr) return hurray::detail::fail(HURRAY_ERR_INVALID_ARGUMENT, "handle is NULL");
  hurray_release_fn fn = h->release_fn;
  void *user_data = h->user_data;
  hurray::detail::clear(h);  // before the call: the callback may free memory h points into
  if (fn != nullptr) fn(user_data);
  return HURRAY_OK;
}

HURRAY_API int32_t hurray_buffer_validate(const hurray_buffer *h) {
  using namespace hurray::detail;
  // A released tracked handle's shape may be freed memory: liveness first.
  if (check::is_tracked(h)) {
    int32_t st = check::require_live(h, "buffer", "hurray_buffer_validate");
    if (st != HURRAY_OK) return st;
  }
  return check_handle(h, "buffer", nullptr);
}

HURRAY_API int32_t hurray_buffer_extent(const hurray_buffer *h, hurray_extent *out) {
  if (out == nullptr) return hurray::detail::fail(HURRAY_ERR_INVALID_ARGUMENT, "out is NULL");
  if (hurray::detail::check::is_tracked(h)) {
    int32_t st = hurray::detail::check::require_live(h, "buffer", "hurray_buffer_extent");
    if (st != HURRAY_OK) return st;
  }
  hurray_extent e;
  int32_t st = hurray::detail::check_handle_exact(h, "buffer", &e);
  if (st == HURRAY_OK) *out = e;
  return st;
}

}  // extern "C"
