// SPDX-License-Identifier: Apache-2.0
// The steps hurray_ipc_export and hurray_ipc_send share (export.cc), and
// the fd helpers of messages.
#ifndef HURRAY_SRC_IPC_MESSAGE_H_
#define HURRAY_SRC_IPC_MESSAGE_H_

#include <cstdint>

#include "hurray/hurray.h"
#include "ipc/watcher.h"

namespace hurray::detail {

// An export made but not yet given to the caller (or the socket).
struct PreparedExport {
  hurray_ipc_message msg;
  Watch *watch;
  hurray_buffer held;  // what the watch releases (src itself, or the copy)
  bool copied;         // the watch holds a copy; the caller's handle is released at commit
  // A received GPU handle sent on (gpu_message.cc): the message is the
  // original sender's, with a dup of its lifetime fd; no watch (watch
  // NULL), the caller's handle is released at commit.
  bool forwarded;
  // A CUDA pool's fd that goes with this message (kind 5) on connection
  // pool_conn (0: none): recorded as sent there once the message went.
  uint64_t pool_conn;
  uint64_t pool_id;
};

// Everything of an export except consuming *src: checks it, picks the
// zero-copy or the copy path, makes the pipe and the fds, registers the
// watch. On failure nothing is left (no fd, no copy) and *src is untouched.
// `stream`: what a GPU export records its IPC event on (NULL: the legacy
// default stream; ipc.md §6); ignored for CPU memory.
// `conn`: the connection the message goes on (pool_peers.h; 0: none, a
// standalone message), which decides whether a CUDA pool's fd goes with it.
int32_t prepare_export(const hurray_buffer &src, uint32_t options, void *stream, PreparedExport *p,
                       uint64_t conn = 0);
// The export happened: *src is consumed (released now when a copy was
// sent, else its reference lives on in the watch) and cleared.
void commit_export(PreparedExport *p, hurray_buffer *src);
// The export did not happen: fds closed, the watch taken back, a copy freed.
void abort_export(PreparedExport *p);

// The GPU part (gpu_message.cc, docs/impl/ipc.md §6). prepare_gpu_export:
// prepare_export for kDLCUDA / kDLROCM memory (`e` its extent), same
// contract. import_gpu: the import of a checked descriptor of kind 3 / 4;
// on success the handle owns m->fds[0] and m->nfds is 0, on failure the fds
// are the caller's to close.
struct WireDesc;
// `stream`: the export records its event on it, the import makes it wait
// for the descriptor's event (NULL: the legacy default stream).
// `conn`: as for prepare_export; for the import, the connection the message
// came on (0: hurray_ipc_import), whose pools kind 6 names.
int32_t prepare_gpu_export(const hurray_buffer &src, const hurray_extent &e, void *stream,
                           uint64_t conn, PreparedExport *p);
int32_t import_gpu(const WireDesc &d, hurray_ipc_message *m, void *stream, uint64_t conn,
                   hurray_buffer *out);
// A set message's GPU region (set.cc, docs/impl/ipc.md §10): `whole`
// describes the whole allocation as bytes (kDLUInt 8, shape {bytes}, data
// its base, flags 0, byte_offset 0) and its release gives back the
// references of the region's handles; `member` is one of them. The export
// of prepare_gpu_export for `whole` (event on the legacy default stream,
// the pool's fd as `conn` decides), or, for memory this process received
// as a legacy handle, the original sender's descriptor forwarded. Same
// contract as prepare_gpu_export.
int32_t prepare_gpu_set_region(const hurray_buffer &member, const hurray_buffer &whole,
                               uint64_t conn, PreparedExport *p);
// hurray_ipc_import with the connection the message came on (socket.cc).
int32_t import_message(hurray_ipc_message *m, void *stream, uint64_t conn, hurray_buffer *out);
// HURRAY_OK when `fd` is the write end of a pipe (the lifetime fd), which
// the message carries as fds[index]; else HURRAY_ERR_IPC.
int32_t check_lifetime_fd(int fd, int index);

// The largest region a receiver maps (HURRAY_IPC_MAX_BYTES, else the
// machine's physical memory); *from_env says which (import.cc).
uint64_t map_limit(bool *from_env);
// The memfd a received message carries as fds[index] for the region of `d`
// (ipc.md §3.2, step 9; `limit` from map_limit). HURRAY_OK or
// HURRAY_ERR_IPC with the message set.
int32_t check_memfd(int fd, size_t index, const WireDesc &d, uint64_t limit, bool from_env);

// Closes m->fds[0..min(nfds, HURRAY_IPC_MAX_FDS)) and sets nfds to 0.
void close_message_fds(hurray_ipc_message *m);

// Runs `step(inner, ctx)` on *src, through the checking mode when *src is a
// tracked handle (consumed by `name`); the step consumes inner on success.
int32_t consume_src(hurray_buffer *src, const char *name,
                    int32_t (*step)(hurray_buffer *inner, void *ctx), void *ctx);

}  // namespace hurray::detail

#endif  // HURRAY_SRC_IPC_MESSAGE_H_
