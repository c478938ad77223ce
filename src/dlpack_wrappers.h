// The wrappers libhurray puts around foreign lifetimes when converting, and
// the functions that recognise them, so round trips unwrap instead of nesting
// (spec §6.4).
#ifndef HURRAY_SRC_DLPACK_WRAPPERS_H_
#define HURRAY_SRC_DLPACK_WRAPPERS_H_

#include <hurray/dlpack.h>

#include "hurray/hurray.h"

namespace hurray {

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

// The DLPack view of a handle (DLTensor fields) and the comparison used to
// decide that a wrapper still describes exactly what it wrapped.
DLTensor dltensor_of(const hurray_buffer &h);
bool same_tensor(const DLTensor &a, const DLTensor &b);

}  // namespace hurray

#endif  // HURRAY_SRC_DLPACK_WRAPPERS_H_
