// SPDX-License-Identifier: Apache-2.0
// A set of handles in one message (docs/impl/ipc.md §10): what
// hurray_ipc_export_set and hurray_ipc_send_set share (set.cc), and the
// import both import_set and recv_set run.
#ifndef HURRAY_SRC_IPC_SET_H_
#define HURRAY_SRC_IPC_SET_H_

#include <cstddef>
#include <cstdint>

#include "hurray/hurray.h"

// The opaque message of hurray.h: one heap block holding this struct, the
// fds, then the descriptor bytes.
struct hurray_ipc_set_message {
  uint8_t *bytes;  // the descriptor (set_wire.h)
  size_t size;
  int32_t *fds;  // each region's, as its kind has (set_wire.h); owned by the message
  size_t nfds;
};

namespace hurray::detail {

// Exports srcs[0..n) as one message (all or nothing, *failed_index as
// hurray_ipc_export_set documents; `name` names the public call in
// messages and in checking mode). When `send` is given it runs on the
// prepared message; its failure undoes the export (nothing consumed,
// *failed_index HURRAY_BATCH_NO_INDEX) and after its success the message
// is committed and its fds are the caller's to close (*msg). Without `send`,
// *msg is the message, its fds owned by it.
int32_t export_set(hurray_buffer *srcs, size_t n, uint32_t options, size_t *failed_index,
                   const char *name, int32_t (*send)(const hurray_ipc_set_message &, void *),
                   void *ctx, hurray_ipc_set_message **msg, uint64_t conn = 0);

// hurray_ipc_import_set without the checking mode's tracking: fds[0..nfds)
// always consumed (kept by the handles, or closed; each entry set to -1).
// `conn`: the connection the message came on (pool_peers.h; 0: none),
// whose pools a GPU region of kind 6 names.
int32_t import_set(const uint8_t *bytes, size_t size, int32_t *fds, size_t nfds, hurray_buffer *out,
                   size_t capacity, size_t *count, uint64_t conn = 0);

}  // namespace hurray::detail

#endif  // HURRAY_SRC_IPC_SET_H_
