// SPDX-License-Identifier: Apache-2.0
// The cross-process functions where the system has no memfd, epoll or
// SO_PEERCRED (builds for systems other than Linux): each refuses with
// HURRAY_ERR_UNSUPPORTED_DEVICE (docs/impl/ipc.md §1), consuming nothing
// (hurray_ipc_import still closes the message's fds, as documented).
#include <unistd.h>

#include "../error.h"
#include "memfd_block.h"
#include "watcher.h"

namespace hurray {
namespace detail {

int32_t shareable_cpu_alloc(hurray_dtype, int32_t, const int64_t *, uint64_t, uint64_t,
                            hurray_buffer *) {
  return fail(HURRAY_ERR_UNSUPPORTED_DEVICE,
              "HURRAY_ALLOC_SHAREABLE needs memfd_create (Linux only)");
}
uint64_t ipc_returns() { return 0; }
uint64_t ipc_copies() { return 0; }

}  // namespace detail
}  // namespace hurray

namespace {
int32_t unsupported() {
  return hurray::fail(HURRAY_ERR_UNSUPPORTED_DEVICE,
                      "passing buffers between processes is supported on Linux only");
}
}  // namespace

extern "C" {

HURRAY_API int32_t hurray_ipc_export(hurray_buffer *, uint32_t, hurray_ipc_message *) {
  return unsupported();
}
HURRAY_API int32_t hurray_ipc_message_discard(hurray_ipc_message *m) {
  if (m == nullptr) return hurray::fail(HURRAY_ERR_INVALID_ARGUMENT, "m is NULL");
  for (uint32_t i = 0; i < m->nfds && i < HURRAY_IPC_MAX_FDS; ++i) {
    if (m->fds[i] >= 0) close(m->fds[i]);
  }
  m->nfds = 0;
  return HURRAY_OK;
}
HURRAY_API int32_t hurray_ipc_import(hurray_ipc_message *m, hurray_buffer *) {
  if (m != nullptr) (void)hurray_ipc_message_discard(m);
  return unsupported();
}
HURRAY_API int32_t hurray_ipc_send(int, hurray_buffer *, uint32_t) { return unsupported(); }
HURRAY_API int32_t hurray_ipc_recv(int, hurray_buffer *) { return unsupported(); }

}  // extern "C"
