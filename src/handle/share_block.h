// SPDX-License-Identifier: Apache-2.0
// Fan-out: the internal control block and its atomic count (spec §5).
#ifndef HURRAY_SRC_HANDLE_SHARE_BLOCK_H_
#define HURRAY_SRC_HANDLE_SHARE_BLOCK_H_

#include <atomic>
#include <cstdint>

#include "handle/handle.h"
#include "hurray/hurray.h"

namespace hurray::detail {

// One per shared source, and one per view. `source` is the handle
// hurray_share validated when it made the block (or the view hurray_view
// validated, with its source's release_fn and user_data, its shape and
// strides in the block's tail: api/view.cc); nothing writes it afterwards,
// so it is also the record against which later steps recognise an
// unchanged consumer handle. A view's block may be larger than the block
// cache's size (ndim > 4, malloc'd); the cache takes any block of at least
// its size.
struct ShareBlock {
  std::atomic<uint64_t> refs;
  hurray_buffer source;  // released when refs drops to 0
};

// release_fn of every handle produced by hurray_share; user_data is the
// control block. Exposed so other steps can recognise shared handles.
void share_release(void *block);

// True when *h is a handle hurray_share issued and still describes exactly
// the source its block recorded (layout version and every description field
// unchanged): it was validated when the block was made and need not be
// validated again (spec §3.4). A live handle keeps its block alive, so the
// read is safe while the caller holds *h.
inline bool is_unchanged_share(const hurray_buffer &h) {
  return h.release_fn == &share_release && h.version == HURRAY_BUFFER_VERSION &&
         same_description(h, static_cast<const ShareBlock *>(h.user_data)->source);
}

}  // namespace hurray::detail

#endif  // HURRAY_SRC_HANDLE_SHARE_BLOCK_H_
