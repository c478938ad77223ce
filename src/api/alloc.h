// SPDX-License-Identifier: Apache-2.0
// Allocation (spec §7): the entry point shared by hurray_alloc,
// hurray_alloc_async and hurray_copy, and the compact handles it builds
// (alloc.cc; the memory comes from the device type's backend table,
// device/backend.h).
#ifndef HURRAY_SRC_API_ALLOC_H_
#define HURRAY_SRC_API_ALLOC_H_

#include <cstdint>

#include "device/backend.h"
#include "hurray/hurray.h"

namespace hurray::detail {

// hurray_alloc with an optional stream (NULL: synchronous). Same contract.
// `stream_device`: -1 (kStreamOfThisDevice), or the other device the caller
// knows `stream` belongs to (a copy queued there writes the memory):
// allocated synchronously, the release ordered after that stream, or for
// the per-thread default stream after every thread's per-thread stream of
// that device (docs/impl/gpu.md §2, the capture rule).
int32_t alloc_on(hurray_device device, hurray_dtype dtype, int32_t ndim, const int64_t *shape,
                 uint64_t flags, void *stream, int32_t stream_device, hurray_buffer *out);

// The handle of freshly allocated compact memory: copies `shape` into
// dims[0..ndim) and writes its row-major strides into dims[ndim..2*ndim);
// the handle's shape/strides point there (NULL when ndim is 0).
// The backend's record of memory from hurray_alloc on a GPU device (the
// handle's own block: hurray_alloc's release function); nullptr for any other
// handle (shares included).
const DeviceMemory *device_memory_of(const hurray_buffer &h);

}  // namespace hurray::detail

#endif  // HURRAY_SRC_API_ALLOC_H_
