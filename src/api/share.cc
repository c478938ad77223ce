// SPDX-License-Identifier: Apache-2.0
// hurray_share: one control block per shared source, one count for all.
//
// Every consumer handle carries the same user_data (the block) and one
// reference; a handle is a value, so the reference travels with whichever
// copy is finally released. Re-sharing a shared handle adds to the same count.
#include "handle/share_block.h"

#include <atomic>
#include <cinttypes>
#include <cstdlib>
#include <new>

#include "checking/checking.h"
#include "common/block_cache.h"
#include "common/error.h"
#include "handle/dlpack_wrappers.h"
#include "handle/handle.h"

namespace hurray::detail {
namespace {

// Far below 2^64 so that no sequence of legal calls can wrap the count.
constexpr uint64_t kMaxShare = uint64_t{1} << 32;

static_assert(sizeof(ShareBlock) <= LibraryBlocks::kSize,
              "share blocks come from the library's block cache");

// A tracked source (checking mode): shared as the handle it stands for,
// which the checker hands to hurray_share again; outputs are tracked there.
int32_t share_tracked(hurray_buffer *src, size_t n, hurray_buffer *out) {
  struct Args {
    size_t n;
    hurray_buffer *out;
  } args{n, out};
  return check::consume(
      src, "hurray_share",
      [](hurray_buffer *inner, void *ctx) {
        auto *a = static_cast<Args *>(ctx);
        return hurray_share(inner, a->n, a->out);
      },
      &args, out, n);
}

// hurray_share of anything but an unchanged shared handle (arguments
// checked): out of line, so that the re-share path of hurray_share saves no
// registers.
__attribute__((noinline)) int32_t share_checked(hurray_buffer *src, size_t n, hurray_buffer *out) {
  if (src == nullptr || !is_unchanged_import(*src)) {
    // A tracked handle is checked as the handle it stands for, once the
    // checker knows its reference is live (a released one's shape may be
    // gone).
    if (check::is_tracked(src)) return share_tracked(src, n, out);
    int32_t st = check_handle(src, "src", nullptr);
    if (st != HURRAY_OK) return st;
  }

  // Copied as five 16-byte chunks (handle.h: HandleChunks); out may alias src.
  HandleChunks h = load_chunks(src);
  if (n > 1) {
    if (src->release_fn == &share_release) {
      // Already shared: the source's reference becomes the first of n.
      static_cast<ShareBlock *>(src->user_data)->refs.fetch_add(n - 1, std::memory_order_relaxed);
    } else {
      void *mem = LibraryBlocks::get();
      if (mem == nullptr) {
        return fail(HURRAY_ERR_OUT_OF_MEMORY, "allocating the %zu-byte share block failed",
                    sizeof(ShareBlock));
      }
      auto *b = new (mem) ShareBlock;
      b->refs.store(n, std::memory_order_relaxed);
      store_chunks(&b->source, h);
      h = with_owner(h, &share_release, b);
    }
  }
  clear(src);
  for (size_t i = 0; i < n; ++i) store_chunks(&out[i], h);
  return check::produced(HURRAY_OK, out, n, "hurray_share");
}

}  // namespace

}  // namespace hurray::detail

extern "C" {

HURRAY_API int32_t hurray_share(hurray_buffer *src, size_t n, hurray_buffer *out) {
  using namespace hurray::detail;
  if (n == 0) return fail(HURRAY_ERR_INVALID_ARGUMENT, "n is 0 (at least one consumer)");
  if (out == nullptr) return fail(HURRAY_ERR_INVALID_ARGUMENT, "out is NULL");
  if (n > kMaxShare) {
    return fail(HURRAY_ERR_INVALID_ARGUMENT, "n is %zu (at most 2^32 per call)", n);
  }
  // A handle this function issued and nobody changed was validated when its
  // block was made, an unchanged imported one by its import; anything else
  // is validated here (spec §3.4).
  if (src != nullptr && is_unchanged_share(*src)) {
    // Re-sharing (the steady state of fan-out and of an export that keeps a
    // reference): one count for all, the source's reference the first of n.
    // Nothing here can fail or call out, so the chunks stay in registers.
    if (n > 1) {
      static_cast<ShareBlock *>(src->user_data)->refs.fetch_add(n - 1, std::memory_order_relaxed);
    }
    const HandleChunks h = load_chunks(src);  // out may alias src
    clear(src);
    for (size_t i = 0; i < n; ++i) store_chunks(&out[i], h);
    return check::produced(HURRAY_OK, out, n, "hurray_share");
  }
  if (n > 1 && src != nullptr && is_unchanged_import(*src)) {
    // The first share of an unchanged import (what a Python Buffer does on
    // every __dlpack__): with a cached block, again nothing that calls out.
    if (void *mem = LibraryBlocks::try_get()) {
      HandleChunks h = load_chunks(src);
      auto *b = new (mem) ShareBlock;
      b->refs.store(n, std::memory_order_relaxed);
      store_chunks(&b->source, h);
      h = with_owner(h, &share_release, b);
      clear(src);
      for (size_t i = 0; i < n; ++i) store_chunks(&out[i], h);
      return check::produced(HURRAY_OK, out, n, "hurray_share");
    }
  }
  return share_checked(src, n, out);
}

}  // extern "C"
