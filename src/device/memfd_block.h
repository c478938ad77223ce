// SPDX-License-Identifier: Apache-2.0
// Shareable CPU memory (docs/impl/ipc.md §2): a sealed memfd mapped
// MAP_SHARED, with its bookkeeping on the heap (never in the shared pages).
// One block type serves both ends: memory hurray_alloc made with
// HURRAY_ALLOC_SHAREABLE and memory hurray_ipc_import mapped, so that either
// (and a hurray_share of either) can be sent on without a copy.
#ifndef HURRAY_SRC_DEVICE_MEMFD_BLOCK_H_
#define HURRAY_SRC_DEVICE_MEMFD_BLOCK_H_

#include <cstdint>

#include "hurray/hurray.h"

namespace hurray::detail {

struct MemfdBlock {
  int memfd;                 // the memory; owned
  int lifetime_fd;           // imported: the pipe write end that keeps the
                             // sender's reference; -1 for local memory
  void *map;                 // start of the mapping
  uint64_t map_length;       // bytes mapped
  uint64_t map_file_offset;  // offset in the memfd of `map` (page multiple)
  int64_t dims[1];           // shape then strides, 2 * ndim entries (flexible tail)
};

// release_fn of every handle whose memory is a MemfdBlock: unmaps, closes
// memfd (and lifetime_fd), frees the block. Recognised by address.
void memfd_release(void *block);

// Allocates a MemfdBlock with room for `ndim` shape and stride entries;
// NULL with the message set when out of memory. Fields are -1 / NULL / 0.
MemfdBlock *new_memfd_block(int32_t ndim);

// hurray_alloc with HURRAY_ALLOC_SHAREABLE on kDLCPU: a compact (dtype,
// shape) tensor of `nbytes` data bytes in a new memfd of at least one page.
int32_t shareable_cpu_alloc(hurray_dtype dtype, int32_t ndim, const int64_t *shape, uint64_t flags,
                            uint64_t nbytes, hurray_buffer *out);

// The MemfdBlock behind a live handle: its own (release_fn memfd_release),
// or that of the source of a hurray_share block. NULL for any other memory.
const MemfdBlock *memfd_block_of(const hurray_buffer &h);

// Size of a page (sysconf, cached).
uint64_t page_size();

}  // namespace hurray::detail

#endif  // HURRAY_SRC_DEVICE_MEMFD_BLOCK_H_
