// SPDX-License-Identifier: Apache-2.0
// DLManagedTensorVersioned / DLManagedTensor -> hurray_buffer (spec §6.3),
// recognising libhurray's own exports so round trips never nest (§6.4).
#include <cinttypes>
#include <cstddef>
#include <cstdio>
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
// block with the tensor (the one allocation an import can make). The block
// is allocated first (the batched import allocates every block it needs
// before it consumes anything), then attached.
__attribute__((noinline)) StridesBlock *alloc_strides_block(int32_t ndim, size_t index) {
  size_t bytes = sizeof(StridesBlock) + sizeof(int64_t) * (static_cast<size_t>(ndim) - 1);
  auto *b = static_cast<StridesBlock *>(std::malloc(bytes));
  if (b == nullptr) {
    if (index == SIZE_MAX) {
      fail(HURRAY_ERR_OUT_OF_MEMORY, "allocating %zu bytes for compact strides failed", bytes);
    } else {
      fail(HURRAY_ERR_OUT_OF_MEMORY, "ts[%zu]: allocating %zu bytes for compact strides failed",
           index, bytes);
    }
  }
  return b;
}

void attach_strides_block(const DLTensor &t, void (*release)(void *), void *tensor, StridesBlock *b,
                          hurray_buffer *h) {
  b->release = release;
  b->tensor = tensor;
  compact_strides(t.ndim, t.shape, b->strides);
  h->strides = b->strides;
  h->release_fn = &strides_block_release;
  h->user_data = b;
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

// The handle of a checked tensor that is not unwrapped, given the strides
// block it needs when it has no strides at ndim > 0: it cannot fail.
__attribute__((noinline)) void make_handle_with(const DLTensor &t, uint64_t flags,
                                                void (*release)(void *), void *tensor,
                                                StridesBlock *b, hurray_buffer *out) {
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
    attach_strides_block(t, release, tensor, b, &h);
  } else {
    h.strides = t.ndim > 0 ? t.strides : nullptr;
    h.release_fn = release;
    h.user_data = tensor;
  }
  *out = h;
}

inline bool needs_strides_block(const DLTensor &t) { return t.ndim > 0 && t.strides == nullptr; }

// Shared tail of both single imports once the tensor has been checked.
inline int32_t make_handle(const DLTensor &t, uint64_t flags, void (*release)(void *), void *tensor,
                           hurray_buffer *out) {
  if (t.ndim > 0 && t.strides != nullptr) {
    write_handle(t, flags, release, tensor, out);  // the common case
    return HURRAY_OK;
  }
  StridesBlock *b = nullptr;
  if (needs_strides_block(t)) {
    b = alloc_strides_block(t.ndim, SIZE_MAX);
    if (b == nullptr) return HURRAY_ERR_OUT_OF_MEMORY;
  }
  make_handle_with(t, flags, release, tensor, b, out);
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

// The name of a tensor in messages: "tensor" for the single imports,
// "ts[i]" for element i of a batch. Formatted only where a message or a
// slow check needs it.
constexpr size_t kSingle = SIZE_MAX;
struct TensorName {
  char text[48];
  TensorName(size_t index, const char *suffix) {
    if (index == kSingle) {
      std::snprintf(text, sizeof text, "tensor%s", suffix);
    } else {
      std::snprintf(text, sizeof text, "ts[%zu]%s", index, suffix);
    }
  }
};

// Every check of the import of one non-NULL versioned tensor, in the order
// of spec §6.3, with no side effect (options already checked): every status
// and message of the single and the batched import comes from here. *own
// says whether it unwraps (one of libhurray's own exports that still
// describes its handle exactly: not checked again, spec §3.4).
__attribute__((noinline)) int32_t check_versioned(const DLManagedTensorVersioned *t,
                                                  uint32_t options, size_t index, bool *own) {
  if (t->version.major != 1) {
    return fail(HURRAY_ERR_UNSUPPORTED_VERSION,
                "%s.version is %" PRIu32 ".%" PRIu32
                "; only DLPack major version 1 can be read (the caller still owns the tensor "
                "and should call its deleter)",
                TensorName(index, "").text, t->version.major, t->version.minor);
  }
  *own = t->deleter == &exported_versioned_deleter && unwraps<ExportedVersioned>(t, &t->flags);
  if (!*own && !fast_ok(t->dl_tensor)) {
    // From 1.2 on, strides are mandatory when ndim != 0.
    const bool strides_required = t->version.minor >= 2;
    int32_t st = check_desc_exact(desc_of(t->dl_tensor, t->flags),
                                  TensorName(index, ".dl_tensor").text, strides_required, nullptr);
    if (st != HURRAY_OK) return st;
  }
  if ((options & HURRAY_IMPORT_CHECK_DEVICE_POINTER) != 0) {
    int32_t st = check_import_pointer(t->dl_tensor);
    if (st != HURRAY_OK) return st;
  }
  return HURRAY_OK;
}

// The same for a non-NULL legacy tensor (no version; flags 0).
__attribute__((noinline)) int32_t check_legacy(const DLManagedTensor *t, uint32_t options,
                                               size_t index, bool *own) {
  *own = t->deleter == &exported_legacy_deleter && unwraps<ExportedLegacy>(t, nullptr);
  if (!*own && !fast_ok(t->dl_tensor)) {
    int32_t st = check_desc_exact(desc_of(t->dl_tensor, 0), TensorName(index, ".dl_tensor").text,
                                  false, nullptr);
    if (st != HURRAY_OK) return st;
  }
  if ((options & HURRAY_IMPORT_CHECK_DEVICE_POINTER) != 0) {
    int32_t st = check_import_pointer(t->dl_tensor);
    if (st != HURRAY_OK) return st;
  }
  return HURRAY_OK;
}

int32_t check_options(uint32_t options) {
  if ((options & ~kImportOptions) != 0) {
    return fail(HURRAY_ERR_INVALID_ARGUMENT, "options 0x%" PRIx32 " has unknown bits", options);
  }
  return HURRAY_OK;
}

// The whole import: the checks above, then the handle. The public functions
// below try the common case first and come here for everything else.
__attribute__((noinline)) int32_t import_versioned_full(DLManagedTensorVersioned *t,
                                                        uint32_t options, hurray_buffer *out) {
  if (t == nullptr) return fail(HURRAY_ERR_INVALID_ARGUMENT, "tensor is NULL");
  if (out == nullptr) return fail(HURRAY_ERR_INVALID_ARGUMENT, "out is NULL");
  int32_t st = check_options(options);
  if (st != HURRAY_OK) return st;
  bool own = false;
  st = check_versioned(t, options, kSingle, &own);
  if (st != HURRAY_OK) return st;
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
  int32_t st = check_options(options);
  if (st != HURRAY_OK) return st;
  bool own = false;
  st = check_legacy(t, options, kSingle, &own);
  if (st != HURRAY_OK) return st;
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

// The two DLPack forms, for the batched import.
struct VersionedForm {
  using Managed = DLManagedTensorVersioned;
  // The single import's fast path would take it: no check needed.
  static bool fast(const Managed *t) {
    return t->version.major == 1 && t->deleter != &exported_versioned_deleter &&
           fast_ok(t->dl_tensor);
  }
  static int32_t check(const Managed *t, uint32_t options, size_t index, bool *own) {
    return check_versioned(t, options, index, own);
  }
  static bool own(const Managed *t) {
    return t->deleter == &exported_versioned_deleter && unwraps<ExportedVersioned>(t, &t->flags);
  }
  static void unwrap_to(Managed *t, hurray_buffer *out) { unwrap<ExportedVersioned>(t, out); }
  static uint64_t flags(const Managed *t) { return t->flags; }
  static constexpr void (*release)(void *) = &imported_versioned_release;
};
struct LegacyForm {
  using Managed = DLManagedTensor;
  static bool fast(const Managed *t) {
    return t->deleter != &exported_legacy_deleter && fast_ok(t->dl_tensor);
  }
  static int32_t check(const Managed *t, uint32_t options, size_t index, bool *own) {
    return check_legacy(t, options, index, own);
  }
  static bool own(const Managed *t) {
    return t->deleter == &exported_legacy_deleter && unwraps<ExportedLegacy>(t, nullptr);
  }
  static void unwrap_to(Managed *t, hurray_buffer *out) { unwrap<ExportedLegacy>(t, out); }
  static uint64_t flags(const Managed *) { return 0; }
  static constexpr void (*release)(void *) = &imported_legacy_release;
};

// Fails a batch: frees the strides blocks it allocated (chained through
// their `tensor` field; none was attached to anything) and reports `index`.
__attribute__((noinline, cold)) int32_t fail_batch(int32_t st, StridesBlock *pending, size_t index,
                                                   size_t *failed_index) {
  while (pending != nullptr) {
    StridesBlock *next = static_cast<StridesBlock *>(pending->tensor);
    std::free(pending);
    pending = next;
  }
  if (failed_index != nullptr) *failed_index = index;
  return st;
}

// The batched import (c-ffi §5.1): one pass that checks every tensor exactly
// as the single import does (the fast check, else the same full check) and
// allocates every strides block needed, consuming nothing; then one pass
// that writes the handles and unwraps libhurray's own exports, which cannot
// fail. A failure in the first pass frees what it allocated.
template <typename Form>
int32_t import_n(typename Form::Managed *const *ts, size_t n, uint32_t options, hurray_buffer *out,
                 size_t *failed_index) {
  if (n == 0) return HURRAY_OK;
  if (ts == nullptr) {
    return fail_batch(fail(HURRAY_ERR_INVALID_ARGUMENT, "ts is NULL while n is %zu", n), nullptr,
                      HURRAY_BATCH_NO_INDEX, failed_index);
  }
  if (out == nullptr) {
    return fail_batch(fail(HURRAY_ERR_INVALID_ARGUMENT, "out is NULL while n is %zu", n), nullptr,
                      HURRAY_BATCH_NO_INDEX, failed_index);
  }
  if (options != 0) {
    int32_t st = check_options(options);
    if (st != HURRAY_OK) return fail_batch(st, nullptr, HURRAY_BATCH_NO_INDEX, failed_index);
  }
  StridesBlock *pending = nullptr;
  StridesBlock **tail = &pending;
  for (size_t i = 0; i < n; ++i) {
    const typename Form::Managed *t = ts[i];
    if (t == nullptr) {
      return fail_batch(fail(HURRAY_ERR_INVALID_ARGUMENT, "ts[%zu] is NULL", i), pending, i,
                        failed_index);
    }
    if (options == 0 && Form::fast(t)) continue;  // valid, and written as it is
    bool own = false;
    int32_t st = Form::check(t, options, i, &own);
    if (st != HURRAY_OK) return fail_batch(st, pending, i, failed_index);
    if (!own && needs_strides_block(t->dl_tensor)) {
      StridesBlock *b = alloc_strides_block(t->dl_tensor.ndim, i);
      if (b == nullptr) return fail_batch(HURRAY_ERR_OUT_OF_MEMORY, pending, i, failed_index);
      b->tensor = nullptr;
      *tail = b;
      tail = reinterpret_cast<StridesBlock **>(&b->tensor);
    }
  }
  // Every tensor is valid and every block allocated: nothing below fails.
  for (size_t i = 0; i < n; ++i) {
    typename Form::Managed *t = ts[i];
    const DLTensor &d = t->dl_tensor;
    if (__builtin_expect(Form::own(t), 0)) {
      Form::unwrap_to(t, &out[i]);
    } else if (!needs_strides_block(d)) {
      write_handle(d, Form::flags(t), Form::release, t, &out[i]);  // the common case
    } else {
      StridesBlock *b = nullptr;
      if (needs_strides_block(d)) {
        b = pending;
        pending = static_cast<StridesBlock *>(b->tensor);
      }
      make_handle_with(d, Form::flags(t), Form::release, t, b, &out[i]);
    }
  }
  return HURRAY_OK;
}

}  // namespace
}  // namespace hurray::detail

extern "C" {

HURRAY_API int32_t hurray_from_dlpack_versioned_n(DLManagedTensorVersioned *const *ts, size_t n,
                                                  uint32_t options, hurray_buffer *out,
                                                  size_t *failed_index) {
  using namespace hurray::detail;
  return check::produced(import_n<VersionedForm>(ts, n, options, out, failed_index), out, n,
                         "hurray_from_dlpack_versioned_n");
}

HURRAY_API int32_t hurray_from_dlpack_n(DLManagedTensor *const *ts, size_t n, uint32_t options,
                                        hurray_buffer *out, size_t *failed_index) {
  using namespace hurray::detail;
  return check::produced(import_n<LegacyForm>(ts, n, options, out, failed_index), out, n,
                         "hurray_from_dlpack_n");
}

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
