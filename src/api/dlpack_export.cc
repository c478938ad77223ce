// SPDX-License-Identifier: Apache-2.0
// hurray_buffer -> DLManagedTensorVersioned / DLManagedTensor (spec §6.2).
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <utility>

#include "checking/checking.h"
#include "common/block_cache.h"
#include "common/error.h"
#include "handle/dlpack_wrappers.h"
#include "handle/handle.h"
#include "handle/share_block.h"

namespace hurray::detail {

static_assert(sizeof(ExportedVersioned) <= LibraryBlocks::kSize &&
                  sizeof(ExportedLegacy) <= LibraryBlocks::kSize,
              "export blocks come from the library's block cache");

namespace {
__attribute__((noinline)) void put_and_release(void *block, hurray_release_fn fn, void *user_data) {
  LibraryBlocks::put(block);
  fn(user_data);
}
}  // namespace

// Only the release function and its argument are needed once the block is
// back in the cache (which reuses its memory at once). The block goes back
// without a call where the cache takes it (both calls are then tail calls:
// nothing to save).
void exported_versioned_deleter(DLManagedTensorVersioned *t) {
  auto *block = reinterpret_cast<ExportedVersioned *>(t);
  hurray_release_fn fn = block->handle.release_fn;
  void *user_data = block->handle.user_data;
  if (!LibraryBlocks::try_put(block)) return put_and_release(block, fn, user_data);
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

// The versioned block as ten 16-byte chunks (handle.h: HandleChunks): the
// handle's five copied, the DLManagedTensorVersioned's five built from them
// in registers with shuffles, and *src zeroed with five more. Offsets:
// version 0, manager_ctx 8, deleter 16, flags 24, then the DLTensor: data 32,
// device 40, ndim 48, dtype 52, shape 56, strides 64, byte_offset 72; the
// handle at 80.
static_assert(offsetof(ExportedVersioned, handle) == 80 &&
                  offsetof(DLManagedTensorVersioned, flags) == 24 &&
                  offsetof(DLManagedTensorVersioned, dl_tensor) == 32 &&
                  offsetof(DLTensor, device) == 8 && offsetof(DLTensor, ndim) == 16 &&
                  offsetof(DLTensor, dtype) == 20 && offsetof(DLTensor, shape) == 24 &&
                  offsetof(DLTensor, byte_offset) == 40,
              "DLManagedTensorVersioned layout (DLPack 1.x)");
typedef int32_t Chunk32 __attribute__((vector_size(16)));
#if defined(__clang__)
#define HURRAY_PICK64(a, b, i, j) __builtin_shufflevector((a), (b), i, j)
#define HURRAY_PICK32(a, b, i, j, k, l) __builtin_shufflevector((a), (b), i, j, k, l)
#else
#define HURRAY_PICK64(a, b, i, j) __builtin_shuffle((a), (b), HandleChunk{i, j})
#define HURRAY_PICK32(a, b, i, j, k, l) __builtin_shuffle((a), (b), Chunk32{i, j, k, l})
#endif
inline void fill_versioned(ExportedVersioned *__restrict block, hurray_buffer *__restrict src) {
  const HandleChunks h = load_chunks(src);
  store_chunks(&block->handle, h);
  const DLPackVersion version{HURRAY_DLPACK_MAJOR, HURRAY_DLPACK_MINOR};
  int64_t version_word;  // any byte order (the compiler folds it to a constant)
  std::memcpy(&version_word, &version, 8);
  const HandleChunk deleter{
      static_cast<int64_t>(reinterpret_cast<uintptr_t>(&exported_versioned_deleter)), 0};
  char *t = reinterpret_cast<char *>(&block->tensor);
  // {version, manager_ctx}, {deleter, flags}, {data, device},
  // {ndim, dtype, shape}, {strides, byte_offset}.
  store_chunk(t,
              HandleChunk{version_word, static_cast<int64_t>(reinterpret_cast<uintptr_t>(block))});
  store_chunk(t + 16, HURRAY_PICK64(deleter, h.c1, 0, 3));
  store_chunk(t + 32, HURRAY_PICK64(h.c2, h.c3, 0, 2));
  store_chunk(t + 48,
              reinterpret_cast<HandleChunk>(HURRAY_PICK32(
                  reinterpret_cast<Chunk32>(h.c3), reinterpret_cast<Chunk32>(h.c4), 3, 2, 4, 5)));
  store_chunk(t + 64, HURRAY_PICK64(h.c4, h.c2, 1, 3));
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

// The export of a checked handle: the block, filled, and *src emptied.
inline int32_t export_versioned(hurray_buffer *src, DLManagedTensorVersioned **out) {
  void *mem = LibraryBlocks::get();
  if (mem == nullptr) {
    return fail(HURRAY_ERR_OUT_OF_MEMORY, "allocating the %zu-byte DLPack export block failed",
                sizeof(ExportedVersioned));
  }
  auto *block = static_cast<ExportedVersioned *>(mem);
  fill_versioned(block, src);
  *out = &block->tensor;
  return HURRAY_OK;
}

// hurray_to_dlpack_versioned past its fast path (below the public functions).
__attribute__((noinline)) int32_t to_dlpack_versioned(hurray_buffer *src,
                                                      DLManagedTensorVersioned **out);

}  // namespace
}  // namespace hurray::detail

extern "C" {

HURRAY_API int32_t hurray_to_dlpack_versioned(hurray_buffer *src, DLManagedTensorVersioned **out) {
  using namespace hurray::detail;
  // A consumer handle of hurray_share that nobody changed was validated when
  // its block was made (the export that keeps a reference): with a cached
  // block, a path with no call and nothing to save.
  if (out != nullptr && src != nullptr && is_unchanged_share(*src)) {
    if (void *mem = LibraryBlocks::try_get()) {
      auto *block = static_cast<ExportedVersioned *>(mem);
      fill_versioned(block, src);
      *out = &block->tensor;
      return HURRAY_OK;
    }
  }
  return to_dlpack_versioned(src, out);
}

}  // extern "C"

namespace hurray::detail {
namespace {

int32_t to_dlpack_versioned(hurray_buffer *src, DLManagedTensorVersioned **out) {
  if (out == nullptr) return fail(HURRAY_ERR_INVALID_ARGUMENT, "out is NULL");
  if (src != nullptr && is_unchanged_share(*src)) return export_versioned(src, out);
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
  // Every other handle is validated here.
  if (check::is_tracked(src)) {  // checked as the handle it stands for
    return check::consume(src, "hurray_to_dlpack_versioned",
                          &export_inner<DLManagedTensorVersioned, &hurray_to_dlpack_versioned>, out,
                          nullptr, 0);
  }
  int32_t st = check_handle(src, "src", nullptr);
  if (st != HURRAY_OK) return st;
  return export_versioned(src, out);
}

}  // namespace
}  // namespace hurray::detail

extern "C" {

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

// ---------------------------------------------------------------------------
// Batched export (c-ffi §5.1)
// ---------------------------------------------------------------------------

namespace hurray::detail {
namespace {

// The two DLPack forms, for the batched export: what the single export does
// with one handle, split into the check and the commit.
struct VersionedExport {
  using Tensor = DLManagedTensorVersioned;
  // The tensor a handle imported from this form gives back (spec §6.4), or
  // nullptr: the single export's unwrap condition.
  static Tensor *unwrap_of(const hurray_buffer &h) {
    if (h.release_fn != &imported_versioned_release || h.version != HURRAY_BUFFER_VERSION) {
      return nullptr;
    }
    auto *orig = static_cast<Tensor *>(h.user_data);
    return orig->flags == h.flags && same_tensor(orig->dl_tensor, h) ? orig : nullptr;
  }
  // An unwrapped handle whose flags the import did not check (legacy only).
  static bool unwrap_needs_check(const hurray_buffer &) { return false; }
  static Tensor *fill_block(void *mem, hurray_buffer *src) {
    auto *block = static_cast<ExportedVersioned *>(mem);
    fill_versioned(block, src);
    return &block->tensor;
  }
};
struct LegacyExport {
  using Tensor = DLManagedTensor;
  static Tensor *unwrap_of(const hurray_buffer &h) {
    if (h.release_fn != &imported_legacy_release || h.version != HURRAY_BUFFER_VERSION) {
      return nullptr;
    }
    auto *orig = static_cast<Tensor *>(h.user_data);
    return same_tensor(orig->dl_tensor, h) ? orig : nullptr;
  }
  // Import checked the fields with flags 0; other flags change the element
  // size, so hurray_to_dlpack checks them before it unwraps.
  static bool unwrap_needs_check(const hurray_buffer &h) { return h.flags != 0; }
  static Tensor *fill_block(void *mem, hurray_buffer *src) {
    auto *block = static_cast<ExportedLegacy *>(mem);
    fill(block, src);
    block->tensor.deleter = &exported_legacy_deleter;
    return &block->tensor;
  }
};

// The handle check of the single exports on src[index], named "src[index]"
// in its message (formatted only when the fast check misses).
int32_t check_element(const hurray_buffer *h, size_t index) {
  if (h->release_fn != nullptr && h->version == HURRAY_BUFFER_VERSION &&
      desc_fast_ok(h->data, h->byte_offset, h->device.device_type, h->device.device_id, h->dtype,
                   h->ndim, h->shape, h->strides)) {
    return HURRAY_OK;
  }
  char name[32];
  std::snprintf(name, sizeof name, "src[%zu]", index);
  return check_handle_exact(h, name, nullptr);
}

// Blocks a batch got before it consumes anything, chained through their
// first word until they are filled.
inline void *pop_block(void **pending) {
  void *b = *pending;
  std::memcpy(pending, b, sizeof b);
  return b;
}

__attribute__((noinline, cold)) int32_t fail_export_batch(int32_t st, void *pending, size_t index,
                                                          size_t *failed_index) {
  while (pending != nullptr) LibraryBlocks::put(pop_block(&pending));
  if (failed_index != nullptr) *failed_index = index;
  return st;
}

// A tracked element (checking mode) is exported as the handle it stands
// for, into the block the batch got for it (or unwrapped, giving the block
// back): a step that cannot fail.
template <typename Form>
int32_t export_tracked_step(hurray_buffer *inner, void *ctx) {
  auto *a = static_cast<std::pair<void *, typename Form::Tensor **> *>(ctx);
  if (typename Form::Tensor *orig = Form::unwrap_of(*inner)) {
    clear(inner);
    LibraryBlocks::put(a->first);
    *a->second = orig;
  } else {
    *a->second = Form::fill_block(a->first, inner);
  }
  return HURRAY_OK;
}

// The batched export: one pass that checks every handle exactly as the
// single export does and gets one block per handle that needs one,
// consuming nothing; then one pass that fills the blocks and empties the
// handles, which cannot fail (but for the checking-mode race the header
// describes).
template <typename Form>
int32_t export_n(hurray_buffer *src, size_t n, typename Form::Tensor **out, size_t *failed_index,
                 const char *name) {
  if (n == 0) return HURRAY_OK;
  if (src == nullptr) {
    return fail_export_batch(fail(HURRAY_ERR_INVALID_ARGUMENT, "src is NULL while n is %zu", n),
                             nullptr, HURRAY_BATCH_NO_INDEX, failed_index);
  }
  if (out == nullptr) {
    return fail_export_batch(fail(HURRAY_ERR_INVALID_ARGUMENT, "out is NULL while n is %zu", n),
                             nullptr, HURRAY_BATCH_NO_INDEX, failed_index);
  }
  void *pending = nullptr;
  void **tail = &pending;
  for (size_t i = 0; i < n; ++i) {
    const hurray_buffer *h = &src[i];
    if (!is_unchanged_share(*h)) {
      if (Form::unwrap_of(*h) != nullptr) {
        if (Form::unwrap_needs_check(*h)) {
          int32_t st = check_element(h, i);
          if (st != HURRAY_OK) return fail_export_batch(st, pending, i, failed_index);
        }
        continue;  // no block
      }
      if (check::is_tracked(h)) {
        char what[32];
        std::snprintf(what, sizeof what, "src[%zu]", i);
        int32_t st = check::require_live(h, what, name);
        if (st != HURRAY_OK) return fail_export_batch(st, pending, i, failed_index);
      }
      int32_t st = check_element(h, i);
      if (st != HURRAY_OK) return fail_export_batch(st, pending, i, failed_index);
    }
    void *mem = LibraryBlocks::get();
    if (mem == nullptr) {
      return fail_export_batch(fail(HURRAY_ERR_OUT_OF_MEMORY,
                                    "src[%zu]: allocating the %zu-byte DLPack export block failed",
                                    i, LibraryBlocks::kSize),
                               pending, i, failed_index);
    }
    std::memset(mem, 0, sizeof(void *));
    std::memcpy(tail, &mem, sizeof mem);
    tail = static_cast<void **>(mem);
  }
  // Every handle is valid and every block got: nothing below fails.
  int32_t result = HURRAY_OK;
  for (size_t i = 0; i < n; ++i) {
    hurray_buffer *h = &src[i];
    if (is_unchanged_share(*h)) {
      out[i] = Form::fill_block(pop_block(&pending), h);
    } else if (typename Form::Tensor *orig = Form::unwrap_of(*h)) {
      clear(h);
      out[i] = orig;
    } else if (__builtin_expect(check::is_tracked(h), 0)) {
      std::pair<void *, typename Form::Tensor **> args{pop_block(&pending), &out[i]};
      int32_t st = check::consume(h, name, &export_tracked_step<Form>, &args, nullptr, 0);
      if (st != HURRAY_OK) {  // another thread took its reference meanwhile
        LibraryBlocks::put(args.first);
        out[i] = nullptr;
        if (result == HURRAY_OK && failed_index != nullptr) *failed_index = i;
        if (result == HURRAY_OK) result = st;
      }
    } else {
      out[i] = Form::fill_block(pop_block(&pending), h);
    }
  }
  return result;
}

}  // namespace
}  // namespace hurray::detail

extern "C" {

HURRAY_API int32_t hurray_to_dlpack_versioned_n(hurray_buffer *src, size_t n,
                                                DLManagedTensorVersioned **out,
                                                size_t *failed_index) {
  using namespace hurray::detail;
  return export_n<VersionedExport>(src, n, out, failed_index, "hurray_to_dlpack_versioned_n");
}

HURRAY_API int32_t hurray_to_dlpack_n(hurray_buffer *src, size_t n, DLManagedTensor **out,
                                      size_t *failed_index) {
  using namespace hurray::detail;
  return export_n<LegacyExport>(src, n, out, failed_index, "hurray_to_dlpack_n");
}

}  // extern "C"
