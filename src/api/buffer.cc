// SPDX-License-Identifier: Apache-2.0
// The buffer section of hurray.h: hurray_buffer_release, _validate and _extent.
#include "handle/handle.h"

#include "checking/checking.h"
#include "common/error.h"

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
