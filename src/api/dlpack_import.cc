// SPDX-License-Identifier: Apache-2.0
// DLManagedTensorVersioned / DLManagedTensor -> hurray_buffer (spec §6.3),
// recognising libhurray's own exports so round trips never nest (§6.4).
#include <cinttypes>
#include <cstddef>
#include <cstdlib>
#include <cstring>

#include "checking/checking.h"
#include "common/block_cache.h"
#include "common/error.h"
#include "device/backend.h"
#include "handle/dlpack_wrappers.h"
#include "handle/handle.h"

namespace hurray::detail {

void imported_versioned_release(void *tensor) {
  auto *t = static_cast<DLManagedTensorVersioned *>(tensor);
  if (t->deleter != nullptr) t->deleter(t);
}

void imported_legacy_release(void *tensor) {
  auto *t = static_cast<DLManagedTensor *>(tensor);
  if (t->deleter != nullptr) t->deleter(t);
}

namespace {

// Imports that had to synthesise strides keep them here, with the tensor.
struct StridesBlock {
  void (*release)(void *tensor);  // one of the imported_*_release functions
  void *tensor;
  int64_t strides[1];  // ndim entries (flexible tail)
};

void strides_block_release(void *block) {
  auto *b = static_cast<StridesBlock *>(block);
  void (*release)(void *) = b->release;
  void *tensor = b->tensor;
  std::free(b);
  release(tensor);
}

Desc desc_of(const DLTensor &t, uint64_t flags) {
  return Desc{t.data,
              t.byte_offset,
              static_cast<int32_t>(t.device.device_type),
              t.device.device_id,
              hurray_dtype{t.dtype.code, t.dtype.bits, t.dtype.lanes},
              t.ndim,
              t.shape,
              t.strides,
              flags};
}

// The fast check (spec §3.4) on the tensor's own fields; the Desc for the
// exact check is built only when it misses.
inline bool fast_ok(const DLTensor &t) {
  return desc_fast_ok(t.data, t.byte_offset, static_cast<int32_t>(t.device.device_type),
                      t.device.device_id, hurray_dtype{t.dtype.code, t.dtype.bits, t.dtype.lanes},
                      t.ndim, t.shape, t.strides);
}

constexpr uint32_t kImportOptions = HURRAY_IMPORT_CHECK_DEVICE_POINTER;

// HURRAY_IMPORT_CHECK_DEVICE_POINTER on a checked tensor (docs/impl/gpu.md §5).
int32_t check_import_pointer(const DLTensor &t) {
  for (int32_t i = 0; i < t.ndim; ++i) {
    if (t.shape[i] == 0) return HURRAY_OK;  // no elements, nothing to check
  }
  return detail::check_device_pointer(
      hurray_device{static_cast<int32_t>(t.device.device_type), t.device.device_id}, t.data);
}

// Imports with NULL strides at ndim > 0: the compact strides are kept in a
// block with the tensor (the one allocation an import can make).
__attribute__((noinline)) int32_t make_strides_block(const DLTensor &t, void (*release)(void *),
                                                     void *tensor, hurray_buffer *h) {
  size_t bytes = sizeof(StridesBlock) + sizeof(int64_t) * (static_cast<size_t>(t.ndim) - 1);
  auto *b = static_cast<StridesBlock *>(std::malloc(bytes));
  if (b == nullptr) {
    return fail(HURRAY_ERR_OUT_OF_MEMORY, "allocating %zu bytes for compact strides failed", bytes);
  }
  b->release = release;
  b->tensor = tensor;
  compact_strides(t.ndim, t.shape, b->strides);
  h->strides = b->strides;
  h->release_fn = &strides_block_release;
  h->user_data = b;
  return HURRAY_OK;
}

// Writes the handle of a checked tensor whose strides are given (or ndim
// 0) straight into *out: it cannot fail.
// As five 16-byte chunks (handle.h: HandleChunks), built in registers from
// 8-byte reads of the tensor: DLTensor's device is the handle's (two
// int32), and its ndim and dtype (8 bytes at offset 16) are the handle's
// dtype and ndim with the halves swapped.
static_assert(offsetof(DLTensor, device) == 8 && sizeof(DLDevice) == 8 &&
                  offsetof(DLTensor, ndim) == 16 && offsetof(DLTensor, dtype) == 20 &&
                  offsetof(DLTensor, strides) == offsetof(DLTensor, shape) + 8,
              "DLTensor layout (DLPack 1.x)");
static_assert(offsetof(hurray_buffer, device) == 48 && offsetof(hurray_buffer, dtype) == 56 &&
                  offsetof(hurray_buffer, ndim) == 60 && offsetof(hurray_buffer, shape) == 64,
              "handle layout version 1");
inline int64_t load64(const void *p) {
  int64_t v;
  std::memcpy(&v, p, 8);
  return v;
}
inline void write_handle(const DLTensor &t, uint64_t flags, void (*release)(void *), void *tensor,
                         hurray_buffer *out) {
  // The two 8-byte words whose layout depends on byte order, assembled
  // through memory (the compiler folds it to a rotate and a constant).
  char words[16];
  std::memcpy(words, &t.dtype, 4);
  std::memcpy(words + 4, &t.ndim, 4);
  const uint32_t version_reserved[2] = {HURRAY_BUFFER_VERSION, 0};
  std::memcpy(words + 8, version_reserved, 8);
  const int64_t dtype_ndim = load64(words);
  const int64_t version_word = load64(words + 8);
  HandleChunk shape_strides;
  std::memcpy(&shape_strides, &t.shape, 16);
  const HandleChunk c0{version_word, static_cast<int64_t>(reinterpret_cast<uintptr_t>(release))};
  const HandleChunk c1{static_cast<int64_t>(reinterpret_cast<uintptr_t>(tensor)),
                       static_cast<int64_t>(flags)};
  const HandleChunk c2{static_cast<int64_t>(reinterpret_cast<uintptr_t>(t.data)),
                       static_cast<int64_t>(t.byte_offset)};
  const HandleChunk c3{load64(&t.device), dtype_ndim};
  // NULL shape and strides at ndim 0.
  const HandleChunk c4 = t.ndim > 0 ? shape_strides : HandleChunk{0, 0};
  char *p = reinterpret_cast<char *>(out);
  std::memcpy(p, &c0, 16);
  std::memcpy(p + 16, &c1, 16);
  std::memcpy(p + 32, &c2, 16);
  std::memcpy(p + 48, &c3, 16);
  std::memcpy(p + 64, &c4, 16);
}

// Shared tail of both imports once the tensor has been checked.
inline int32_t make_handle(const DLTensor &t, uint64_t flags, void (*release)(void *), void *tensor,
                           hurray_buffer *out) {
  if (t.ndim > 0 && t.strides != nullptr) {
    write_handle(t, flags, release, tensor, out);  // the common case
    return HURRAY_OK;
  }
  hurray_buffer h;
  h.version = HURRAY_BUFFER_VERSION;
  h.reserved = 0;
  h.flags = flags;
  h.data = t.data;
  h.byte_offset = t.byte_offset;
  h.device.device_type = static_cast<int32_t>(t.device.device_type);
  h.device.device_id = t.device.device_id;
  h.dtype = hurray_dtype{t.dtype.code, t.dtype.bits, t.dtype.lanes};
  h.ndim = t.ndim;
  h.shape = t.ndim > 0 ? t.shape : nullptr;
  if (t.ndim > 0 && t.strides == nullptr) {
    int32_t st = make_strides_block(t, release, tensor, &h);
    if (st != HURRAY_OK) return st;
  } else {
    h.strides = t.ndim > 0 ? t.strides : nullptr;
    h.release_fn = release;
    h.user_data = tensor;
  }
  *out = h;
  return HURRAY_OK;
}

// True when `t` is one of libhurray's own export blocks that still describes
// its handle exactly. The legacy form cannot carry flags, so there the
// handle's own flags come back unchanged (`flags` NULL).
template <typename Block, typename Tensor>
bool unwraps(const Tensor *t, const uint64_t *flags) {
  auto *block = reinterpret_cast<const Block *>(t);
  return t->manager_ctx == block && (flags == nullptr || block->handle.flags == *flags) &&
         same_tensor(t->dl_tensor, block->handle);
}

// Gives back the handle of an export block `unwraps` accepted and frees the
// block.
template <typename Block, typename Tensor>
void unwrap(Tensor *t, hurray_buffer *out) {
  auto *block = reinterpret_cast<Block *>(t);
  *out = block->handle;
  LibraryBlocks::put(block);
}

// The whole import in the order of spec §6.3: every status and message comes
// from here. The public functions below try the common case first and come
// here for everything else.
__attribute__((noinline)) int32_t import_versioned_full(DLManagedTensorVersioned *t,
                                                        uint32_t options, hurray_buffer *out) {
  if (t == nullptr) return fail(HURRAY_ERR_INVALID_ARGUMENT, "tensor is NULL");
  if (out == nullptr) return fail(HURRAY_ERR_INVALID_ARGUMENT, "out is NULL");
  if ((options & ~kImportOptions) != 0) {
    return fail(HURRAY_ERR_INVALID_ARGUMENT, "options 0x%" PRIx32 " has unknown bits", options);
  }
  if (t->version.major != 1) {
    return fail(HURRAY_ERR_UNSUPPORTED_VERSION,
                "tensor.version is %" PRIu32 ".%" PRIu32
                "; only DLPack major version 1 can be read (the caller still owns the tensor "
                "and should call its deleter)",
                t->version.major, t->version.minor);
  }
  // One of libhurray's own exports that still describes its handle exactly
  // unwraps without a second check: export validated that handle (spec
  // §3.4). Anything else is checked here, where it enters from foreign code.
  const bool own =
      t->deleter == &exported_versioned_deleter && unwraps<ExportedVersioned>(t, &t->flags);
  if (!own) {
    // From 1.2 on, strides are mandatory when ndim != 0.
    if (!fast_ok(t->dl_tensor)) {
      const bool strides_required = t->version.minor >= 2;
      int32_t st = check_desc_exact(desc_of(t->dl_tensor, t->flags), "tensor.dl_tensor",
                                    strides_required, nullptr);
      if (st != HURRAY_OK) return st;
    }
  }
  if ((options & HURRAY_IMPORT_CHECK_DEVICE_POINTER) != 0) {
    int32_t st = check_import_pointer(t->dl_tensor);
    if (st != HURRAY_OK) return st;
  }
  if (own) {
    unwrap<ExportedVersioned>(t, out);
    return HURRAY_OK;
  }
  return make_handle(t->dl_tensor, t->flags, &imported_versioned_release, t, out);
}

__attribute__((noinline)) int32_t import_legacy_full(DLManagedTensor *t, uint32_t options,
                                                     hurray_buffer *out) {
  if (t == nullptr) return fail(HURRAY_ERR_INVALID_ARGUMENT, "tensor is NULL");
  if (out == nullptr) return fail(HURRAY_ERR_INVALID_ARGUMENT, "out is NULL");
  if ((options & ~kImportOptions) != 0) {
    return fail(HURRAY_ERR_INVALID_ARGUMENT, "options 0x%" PRIx32 " has unknown bits", options);
  }
  const bool own = t->deleter == &exported_legacy_deleter && unwraps<ExportedLegacy>(t, nullptr);
  if (!own) {
    if (!fast_ok(t->dl_tensor)) {
      int32_t st = check_desc_exact(desc_of(t->dl_tensor, 0), "tensor.dl_tensor", false, nullptr);
      if (st != HURRAY_OK) return st;
    }
  }
  if ((options & HURRAY_IMPORT_CHECK_DEVICE_POINTER) != 0) {
    int32_t st = check_import_pointer(t->dl_tensor);
    if (st != HURRAY_OK) return st;
  }
  if (own) {
    unwrap<ExportedLegacy>(t, out);
    return HURRAY_OK;
  }
  return make_handle(t->dl_tensor, 0, &imported_legacy_release, t, out);
}

// The common case: a foreign tensor, no options, strides given (or ndim 0),
// proven valid by the fast check. The handle is written straight into *out
// with few registers live; anything else (NULL arguments, options, another
// major version, one of libhurray's own exports, a tensor the fast check does
// not prove valid) goes to the full import, which decides it exactly as if
// this step were not there.
inline bool import_fast(const DLTensor &t, uint64_t flags, void (*release)(void *), void *tensor,
                        hurray_buffer *out) {
  if (!fast_ok(t)) return false;
  write_handle(t, flags, release, tensor, out);
  return true;
}

inline int32_t import_versioned(DLManagedTensorVersioned *t, uint32_t options, hurray_buffer *out) {
  if (t == nullptr || out == nullptr || options != 0 || t->version.major != 1 ||
      t->deleter == &exported_versioned_deleter) {
    return import_versioned_full(t, options, out);
  }
  if (import_fast(t->dl_tensor, t->flags, &imported_versioned_release, t, out)) return HURRAY_OK;
  return import_versioned_full(t, 0, out);  // options is 0 here (one register fewer)
}

inline int32_t import_legacy(DLManagedTensor *t, uint32_t options, hurray_buffer *out) {
  if (t == nullptr || out == nullptr || options != 0 || t->deleter == &exported_legacy_deleter) {
    return import_legacy_full(t, options, out);
  }
  if (import_fast(t->dl_tensor, 0, &imported_legacy_release, t, out)) return HURRAY_OK;
  return import_legacy_full(t, 0, out);
}

}  // namespace
}  // namespace hurray::detail

extern "C" {

HURRAY_API int32_t hurray_from_dlpack_versioned(DLManagedTensorVersioned *t, uint32_t options,
                                                hurray_buffer *out) {
  using namespace hurray::detail;
  return check::produced(import_versioned(t, options, out), out, 1, "hurray_from_dlpack_versioned");
}

HURRAY_API int32_t hurray_from_dlpack(DLManagedTensor *t, uint32_t options, hurray_buffer *out) {
  using namespace hurray::detail;
  return check::produced(import_legacy(t, options, out), out, 1, "hurray_from_dlpack");
}

}  // extern "C"
