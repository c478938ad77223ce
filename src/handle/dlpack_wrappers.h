// SPDX-License-Identifier: Apache-2.0
// The wrappers libhurray puts around foreign lifetimes when converting, and
// the functions that recognise them, so round trips unwrap instead of nesting
// (spec §6.4).
#ifndef HURRAY_SRC_HANDLE_DLPACK_WRAPPERS_H_
#define HURRAY_SRC_HANDLE_DLPACK_WRAPPERS_H_

#include <hurray/dlpack.h>

#include "hurray/hurray.h"

namespace hurray::detail {

// Export side: a DLPack struct and the handle it keeps, in one allocation.
// manager_ctx points at the block itself; the deleter releases `handle`.
struct ExportedVersioned {
  DLManagedTensorVersioned tensor;  // first: the pointer handed out is the block
  hurray_buffer handle;
};
struct ExportedLegacy {
  DLManagedTensor tensor;
  hurray_buffer handle;
};
void exported_versioned_deleter(DLManagedTensorVersioned *t);
void exported_legacy_deleter(DLManagedTensor *t);

// Import side: release_fn of handles imported without allocation; user_data
// is the imported DLPack struct itself.
void imported_versioned_release(void *tensor);
void imported_legacy_release(void *tensor);

// The DLPack view of a handle (DLTensor fields).
inline DLTensor dltensor_of(const hurray_buffer &h) {
  DLTensor t;
  t.data = h.data;
  t.device.device_type = static_cast<DLDeviceType>(h.device.device_type);
  t.device.device_id = h.device.device_id;
  t.ndim = h.ndim;
  t.dtype.code = h.dtype.code;
  t.dtype.bits = h.dtype.bits;
  t.dtype.lanes = h.dtype.lanes;
  // DLPack declares these non-const; consumers must not write them (spec §6.2).
  t.shape = const_cast<int64_t *>(h.shape);
  t.strides = const_cast<int64_t *>(h.strides);
  t.byte_offset = h.byte_offset;
  return t;
}

// True when the tensor `a` describes exactly what the handle `h` does (the
// comparison that decides that a wrapper still describes what it wrapped).
inline bool same_tensor(const DLTensor &a, const hurray_buffer &h) {
  return a.data == h.data && a.device.device_type == h.device.device_type &&
         a.device.device_id == h.device.device_id && a.ndim == h.ndim &&
         a.dtype.code == h.dtype.code && a.dtype.bits == h.dtype.bits &&
         a.dtype.lanes == h.dtype.lanes && a.byte_offset == h.byte_offset &&
         (a.ndim == 0 || (a.shape == h.shape && a.strides == h.strides));
}

// True when *h was imported without allocation (release_fn one of the
// imported_*_release functions) and still describes exactly the tensor it
// was imported from: import checked those fields (spec §3.4), so a later
// step need not check them again. For the legacy form only while the
// handle's flags are 0 (the legacy import checked with flags 0, and
// HURRAY_FLAG_SUBBYTE_PADDED changes the element size). The handle owns the
// tensor while it lives, so the read is safe while the caller holds *h.
inline bool is_unchanged_import(const hurray_buffer &h) {
  if (h.version != HURRAY_BUFFER_VERSION) return false;
  if (h.release_fn == &imported_versioned_release) {
    const auto *t = static_cast<const DLManagedTensorVersioned *>(h.user_data);
    return t->flags == h.flags && same_tensor(t->dl_tensor, h);
  }
  return h.release_fn == &imported_legacy_release && h.flags == 0 &&
         same_tensor(static_cast<const DLManagedTensor *>(h.user_data)->dl_tensor, h);
}

}  // namespace hurray::detail

#endif  // HURRAY_SRC_HANDLE_DLPACK_WRAPPERS_H_
