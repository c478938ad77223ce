// SPDX-License-Identifier: Apache-2.0
// Shareable CPU memory: memfd_create, ftruncate, seals, mmap MAP_SHARED
// (docs/impl/ipc.md §2), and the release that undoes them.
#include "device/memfd_block.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

#include "common/error.h"
#include "handle/handle.h"
#include "handle/share_block.h"

namespace hurray::detail {

uint64_t page_size() {
  static const uint64_t size = [] {
    long p = sysconf(_SC_PAGESIZE);
    return p > 0 ? static_cast<uint64_t>(p) : uint64_t{4096};
  }();
  return size;
}

void memfd_release(void *block) {
  auto *b = static_cast<MemfdBlock *>(block);
  if (b->map != nullptr) munmap(b->map, static_cast<size_t>(b->map_length));
  if (b->memfd >= 0) close(b->memfd);
  // Closing the last copy of the write end is what tells the sender.
  if (b->lifetime_fd >= 0) close(b->lifetime_fd);
  std::free(b);
}

MemfdBlock *new_memfd_block(int32_t ndim) {
  const size_t size = sizeof(MemfdBlock) + sizeof(int64_t) * (2 * static_cast<size_t>(ndim));
  auto *b = static_cast<MemfdBlock *>(std::malloc(size));
  if (b == nullptr) {
    fail(HURRAY_ERR_OUT_OF_MEMORY, "allocating %zu bytes of IPC bookkeeping failed", size);
    return nullptr;
  }
  b->memfd = -1;
  b->lifetime_fd = -1;
  b->map = nullptr;
  b->map_length = 0;
  b->map_file_offset = 0;
  return b;
}

int32_t shareable_cpu_alloc(hurray_dtype dtype, int32_t ndim, const int64_t *shape, uint64_t flags,
                            uint64_t nbytes, hurray_buffer *out) {
  // At least one page, so that a tensor with no elements still has a valid
  // non-NULL address (mmap refuses a length of 0).
  const uint64_t page = page_size();
  uint64_t length;
  if (__builtin_add_overflow(nbytes > 0 ? nbytes : 1, page - 1, &length) ||
      length / page * page > static_cast<uint64_t>(INT64_MAX)) {
    return fail(HURRAY_ERR_OVERFLOW, "a %llu-byte shareable allocation is beyond off_t",
                static_cast<unsigned long long>(nbytes));
  }
  length = length / page * page;
  MemfdBlock *b = new_memfd_block(ndim);
  if (b == nullptr) return HURRAY_ERR_OUT_OF_MEMORY;
  int32_t st = HURRAY_OK;
  const char *call = nullptr;
  b->memfd = memfd_create("hurray", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (b->memfd < 0) {
    call = "memfd_create";
  } else if (ftruncate(b->memfd, static_cast<off_t>(length)) != 0) {
    call = "ftruncate";
  } else if (fcntl(b->memfd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW) != 0) {
    call = "fcntl(F_ADD_SEALS)";
  } else {
    void *p =
        mmap(nullptr, static_cast<size_t>(length), PROT_READ | PROT_WRITE, MAP_SHARED, b->memfd, 0);
    if (p == MAP_FAILED) {
      call = "mmap";
    } else {
      b->map = p;
      b->map_length = length;
    }
  }
  if (call != nullptr) {
    const int err = errno;
    st = err == ENOMEM || err == ENOSPC || err == EFBIG
             ? fail(HURRAY_ERR_OUT_OF_MEMORY, "%s of a %llu-byte shareable allocation failed: %s",
                    call, static_cast<unsigned long long>(length), std::strerror(err))
             : fail(HURRAY_ERR_IPC, "%s of a %llu-byte shareable allocation failed: %s", call,
                    static_cast<unsigned long long>(length), std::strerror(err));
    memfd_release(b);
    return st;
  }
  *out = compact_handle(&memfd_release, b, b->map, hurray_device{HURRAY_DEVICE_CPU, 0}, dtype, ndim,
                        shape, b->dims, flags);
  return HURRAY_OK;
}

const MemfdBlock *memfd_block_of(const hurray_buffer &h) {
  // A live shared handle keeps its block, and so the block's source, alive;
  // a view (api/view.cc) is a share block too, whose source may be a shared
  // handle again (a view of one part of a share): follow the chain to the
  // allocation. The caller checks that h's own layout lies in the mapping.
  const hurray_buffer *p = &h;
  while (p->release_fn == &share_release)
    p = &static_cast<const ShareBlock *>(p->user_data)->source;
  if (p->release_fn == &memfd_release) return static_cast<const MemfdBlock *>(p->user_data);
  return nullptr;
}

}  // namespace hurray::detail
