// Allocation entry point shared by hurray_alloc and hurray_copy (spec §7).
#ifndef HURRAY_SRC_ALLOC_H_
#define HURRAY_SRC_ALLOC_H_

#include <cstdint>

#include "hurray/hurray.h"

namespace hurray {

// hurray_alloc with an optional stream (NULL: synchronous). Same contract.
// `stream_of_other_device`: the caller knows `stream` belongs to another
// device than `device` (a copy queued there writes the memory): allocated
// synchronously, the release ordered after that stream.
int32_t alloc_on(hurray_device device, hurray_dtype dtype, int32_t ndim, const int64_t *shape,
                 uint64_t flags, void *stream, bool stream_of_other_device, hurray_buffer *out);

}  // namespace hurray

#endif  // HURRAY_SRC_ALLOC_H_
