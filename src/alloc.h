// Allocation entry point shared by hurray_alloc and hurray_copy (spec §7).
#ifndef HURRAY_SRC_ALLOC_H_
#define HURRAY_SRC_ALLOC_H_

#include <cstdint>

#include "hurray/hurray.h"

namespace hurray {

// hurray_alloc with an optional stream (NULL: synchronous). Same contract.
int32_t alloc_on(hurray_device device, hurray_dtype dtype, int32_t ndim, const int64_t *shape,
                 uint64_t flags, void *stream, hurray_buffer *out);

}  // namespace hurray

#endif  // HURRAY_SRC_ALLOC_H_
