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

// What an allocator hands back and needs again to free: the pointer and how
// the release must be ordered and checked. Kept by hurray_alloc in the
// handle's host block and passed back unchanged to `deallocate`.
struct DeviceMemory {
  void *ptr = nullptr;
  // The stream the caller named (NULL: none); CU_STREAM_PER_THREAD /
  // hipStreamPerThread (2) included.
  void *stream = nullptr;
  // The vendor's identity of the context the memory was allocated in (CUDA:
  // the primary context's id or libhurray's generation of it), so that a
  // release after a context reset can tell the memory died with it.
  uint64_t context = 0;
  // How the release is ordered (a vendor's own enumeration; 0: synchronous
  // free, nothing else to wait for).
  uint32_t order = 0;
};

struct DeviceAllocator {
  // Short name for messages ("CUDA device memory").
  const char *name;
  // Allocates `nbytes` on `device`, stream-ordered on `stream` when it is
  // non-NULL, and fills *mem. With `nbytes` 0 nothing is allocated and
  // mem->ptr stays NULL, but the answer for a missing runtime or device is
  // the same as for a non-empty request. `stream_of_other_device`: the
  // caller knows `stream` belongs to another device; the memory is then
  // allocated synchronously and its release ordered after that stream. On
  // failure returns a status with the message set and leaves *mem untouched.
  int32_t (*allocate)(hurray_device device, uint64_t nbytes, void *stream,
                      bool stream_of_other_device, DeviceMemory *mem);
  // Frees what `allocate` returned (mem->ptr non-NULL), with the same
  // device. Called from any thread, including during process exit; never
  // fails loudly.
  void (*deallocate)(hurray_device device, const DeviceMemory &mem);
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
