// SPDX-License-Identifier: Apache-2.0
// hurray_view's step for the library's own use (api/view.cc).
#ifndef HURRAY_SRC_API_VIEW_H_
#define HURRAY_SRC_API_VIEW_H_

#include "hurray/hurray.h"

namespace hurray::detail {

// hurray_view of an untracked, live *src with any flags in desc.flags (the
// public call takes HURRAY_FLAG_READ_ONLY and HURRAY_FLAG_SUBBYTE_PADDED
// only): a received set's handles get their sender's flags this way
// (ipc/set.cc). Same checks and ownership as hurray_view otherwise.
int32_t view_with_flags(hurray_buffer *src, const hurray_view_desc &desc, hurray_buffer *out);

}  // namespace hurray::detail

#endif  // HURRAY_SRC_API_VIEW_H_
