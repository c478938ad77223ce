// The one small interface every allocator implements (spec §7).
//
// hurray_alloc keeps shape and strides in a host block next to the handle's
// bookkeeping and asks the allocator only for the data bytes. CPU memory is
// special-cased (metadata and data in one allocation, alloc/cpu.cc).
#ifndef HURRAY_SRC_ALLOC_ALLOCATOR_H_
#define HURRAY_SRC_ALLOC_ALLOCATOR_H_

#include <cstdint>

#include "hurray/hurray.h"

namespace hurray {

struct DeviceAllocator {
  // Short name for messages ("CUDA device memory").
  const char *name;
  // Allocates `nbytes` on `device`, stream-ordered on `stream` when it is
  // non-NULL. With `nbytes` 0 nothing is allocated and *ptr is left alone,
  // but the answer for a missing runtime or device is the same as for a
  // non-empty request. On failure returns a status with the message set and
  // leaves *ptr untouched.
  int32_t (*allocate)(hurray_device device, uint64_t nbytes, void *stream, void **ptr);
  // Frees what `allocate` returned, with the same device and stream. Called
  // from any thread, including during process exit; never fails loudly.
  void (*deallocate)(hurray_device device, void *ptr, void *stream);
};

// The allocator serving `device_type`, or nullptr with the message set
// (HURRAY_ERR_UNSUPPORTED_DEVICE) when this build or machine has none. Not
// called for kDLCPU.
const DeviceAllocator *find_device_allocator(int32_t device_type);

// The handle of freshly allocated compact memory: copies `shape` into
// dims[0..ndim) and writes its row-major strides into dims[ndim..2*ndim);
// the handle's shape/strides point there (NULL when ndim is 0).
hurray_buffer compact_handle(hurray_release_fn release, void *user_data, void *data,
                             hurray_device device, hurray_dtype dtype, int32_t ndim,
                             const int64_t *shape, int64_t *dims, uint64_t flags);

// CPU: allocates a compact (dtype, shape) tensor with metadata and data in
// one HURRAY_CPU_ALIGNMENT-aligned block (alloc/cpu.cc).
int32_t cpu_alloc(hurray_dtype dtype, int32_t ndim, const int64_t *shape, uint64_t flags,
                  uint64_t nbytes, hurray_buffer *out);

}  // namespace hurray

#endif  // HURRAY_SRC_ALLOC_ALLOCATOR_H_
