// SPDX-License-Identifier: Apache-2.0
// The share block's release: one decrement of the block's count, and the
// source's release_fn on the last one (spec §5). hurray_share, which makes
// the blocks, is in api/share.cc.
#include "handle/share_block.h"

#include "common/block_cache.h"

namespace hurray::detail {
namespace {

__attribute__((noinline)) void put_block_and_release(void *block, hurray_release_fn fn,
                                                     void *user_data) {
  LibraryBlocks::put(block);
  fn(user_data);
}

}  // namespace

void share_release(void *block) {
  auto *b = static_cast<ShareBlock *>(block);
  // acq_rel: every consumer's use of the memory happens-before the source's
  // release, which runs on the thread that drops the last reference.
  // A count of 1 seen by a holder of a reference is the last reference: no
  // other holder exists who could add one (sharing needs a reference), so
  // the read-modify-write can be skipped. The acquire load still orders
  // every other consumer's release (their acq_rel decrement) before this.
  if (b->refs.load(std::memory_order_acquire) != 1 &&
      b->refs.fetch_sub(1, std::memory_order_acq_rel) != 1) {
    return;
  }
  hurray_release_fn fn = b->source.release_fn;
  void *user_data = b->source.user_data;
  b->~ShareBlock();
  if (!LibraryBlocks::try_put(b)) return put_block_and_release(b, fn, user_data);
  fn(user_data);  // a tail call: nothing saved on this path
}

}  // namespace hurray::detail
