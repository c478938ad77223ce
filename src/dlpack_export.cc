// SPDX-License-Identifier: Apache-2.0
// hurray_buffer -> DLManagedTensorVersioned / DLManagedTensor (spec §6.2).
#include <cstring>

#include "block_cache.h"
#include "check.h"
#include "dlpack_wrappers.h"
#include "error.h"
#include "handle.h"
#include "share.h"

namespace hurray::detail {

static_assert(sizeof(ExportedVersioned) <= LibraryBlocks::kSize &&
                  sizeof(ExportedLegacy) <= LibraryBlocks::kSize,
              "export blocks come from the library's block cache");

// Only the release function and its argument are needed once the block is
// back in the cache (which reuses its memory at once).
void exported_versioned_deleter(DLManagedTensorVersioned *t) {
  auto *block = reinterpret_cast<ExportedVersioned *>(t);
  hurray_release_fn fn = block->handle.release_fn;
  void *user_data = block->handle.user_data;
  LibraryBlocks::put(block);
  fn(user_data);
}

void exported_legacy_deleter(DLManagedTensor *t) {
  auto *block = reinterpret_cast<ExportedLegacy *>(t);
  hurray_release_fn fn = block->handle.release_fn;
  void *user_data = block->handle.user_data;
  LibraryBlocks::put(block);
  fn(user_data);
}

namespace {

// Fills a fresh block from *src (which it cannot alias: __restrict lets the
// compiler build the view from the loads of the copy instead of reading the
// copy back) and empties *src.
template <typename Block>
inline void fill(Block *__restrict block, hurray_buffer *__restrict src) {
  std::memcpy(&block->handle, src, sizeof *src);
  block->tensor.dl_tensor = dltensor_of(*src);
  block->tensor.manager_ctx = block;
  clear(src);
}

// Allocates the block, fills the DLPack struct from the handle and takes the
// handle over. Returns nullptr (message set) when allocation fails.
template <typename Block>
Block *wrap(hurray_buffer *src) {
  void *mem = LibraryBlocks::get();
  if (mem == nullptr) {
    fail(HURRAY_ERR_OUT_OF_MEMORY, "allocating the %zu-byte DLPack export block failed",
         sizeof(Block));
    return nullptr;
  }
  auto *block = static_cast<Block *>(mem);
  fill(block, src);
  return block;
}

// A tracked source (checking mode) is exported as the handle it stands
// for, which the checker hands to the same export again: an imported tensor
// still unwraps to itself. The DLPack tensor is not tracked.
template <typename Tensor, int32_t (*Export)(hurray_buffer *, Tensor **)>
int32_t export_inner(hurray_buffer *inner, void *out) {
  return Export(inner, static_cast<Tensor **>(out));
}

}  // namespace
}  // namespace hurray::detail

extern "C" {

HURRAY_API int32_t hurray_to_dlpack_versioned(hurray_buffer *src, DLManagedTensorVersioned **out) {
  using namespace hurray::detail;
  if (out == nullptr) return fail(HURRAY_ERR_INVALID_ARGUMENT, "out is NULL");
  if (src != nullptr && src->release_fn == &imported_versioned_release &&
      src->version == HURRAY_BUFFER_VERSION) {
    // The handle came from a DLManagedTensorVersioned: if it still describes
    // that tensor exactly, hand the tensor back as it is. Import validated
    // exactly these fields (spec §3.4), so there is nothing to check again.
    auto *orig = static_cast<DLManagedTensorVersioned *>(src->user_data);
    if (orig->flags == src->flags && same_tensor(orig->dl_tensor, *src)) {
      clear(src);
      *out = orig;
      return HURRAY_OK;
    }
  }
  // A consumer handle of hurray_share that nobody changed was validated when
  // its block was made; every other handle is validated here.
  if (src == nullptr || !is_unchanged_share(*src)) {
    if (check::is_tracked(src)) {  // checked as the handle it stands for
      return check::consume(src, "hurray_to_dlpack_versioned",
                            &export_inner<DLManagedTensorVersioned, &hurray_to_dlpack_versioned>,
                            out, nullptr, 0);
    }
    int32_t st = check_handle(src, "src", nullptr);
    if (st != HURRAY_OK) return st;
  }
  auto *block = wrap<ExportedVersioned>(src);
  if (block == nullptr) return HURRAY_ERR_OUT_OF_MEMORY;
  block->tensor.version.major = HURRAY_DLPACK_MAJOR;
  block->tensor.version.minor = HURRAY_DLPACK_MINOR;
  block->tensor.deleter = &exported_versioned_deleter;
  block->tensor.flags = block->handle.flags;
  *out = &block->tensor;
  return HURRAY_OK;
}

HURRAY_API int32_t hurray_to_dlpack(hurray_buffer *src, DLManagedTensor **out) {
  using namespace hurray::detail;
  if (out == nullptr) return fail(HURRAY_ERR_INVALID_ARGUMENT, "out is NULL");
  if (src != nullptr && src->release_fn == &imported_legacy_release &&
      src->version == HURRAY_BUFFER_VERSION) {
    auto *orig = static_cast<DLManagedTensor *>(src->user_data);
    if (same_tensor(orig->dl_tensor, *src)) {
      // Import validated these fields with flags 0; other flags (the legacy
      // form drops them) change the element size, so they are checked.
      if (src->flags != 0) {
        int32_t st = check_handle(src, "src", nullptr);
        if (st != HURRAY_OK) return st;
      }
      clear(src);
      *out = orig;
      return HURRAY_OK;
    }
  }
  if (src == nullptr || !is_unchanged_share(*src)) {
    if (check::is_tracked(src)) {  // checked as the handle it stands for
      return check::consume(src, "hurray_to_dlpack",
                            &export_inner<DLManagedTensor, &hurray_to_dlpack>, out, nullptr, 0);
    }
    int32_t st = check_handle(src, "src", nullptr);
    if (st != HURRAY_OK) return st;
  }
  auto *block = wrap<ExportedLegacy>(src);
  if (block == nullptr) return HURRAY_ERR_OUT_OF_MEMORY;
  block->tensor.deleter = &exported_legacy_deleter;
  *out = &block->tensor;
  return HURRAY_OK;
}

HURRAY_API int32_t hurray_dlpack_versioned_delete(DLManagedTensorVersioned *t) {
  if (t != nullptr && t->deleter != nullptr) t->deleter(t);
  return HURRAY_OK;
}

HURRAY_API int32_t hurray_dlpack_delete(DLManagedTensor *t) {
  if (t != nullptr && t->deleter != nullptr) t->deleter(t);
  return HURRAY_OK;
}

}  // extern "C"
