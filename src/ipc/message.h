// SPDX-License-Identifier: Apache-2.0
// The steps hurray_ipc_export and hurray_ipc_send share (export.cc), and
// the fd helpers of messages.
#ifndef HURRAY_SRC_IPC_MESSAGE_H_
#define HURRAY_SRC_IPC_MESSAGE_H_

#include <cstdint>

#include "hurray/hurray.h"
#include "watcher.h"

namespace hurray {
namespace detail {

// An export made but not yet given to the caller (or the socket).
struct PreparedExport {
  hurray_ipc_message msg;
  Watch *watch;
  hurray_buffer held;  // what the watch releases (src itself, or the copy)
  bool copied;         // the watch holds a copy; the caller's handle is released at commit
};

// Everything of an export except consuming *src: checks it, picks the
// zero-copy or the copy path, makes the pipe and the fds, registers the
// watch. On failure nothing is left (no fd, no copy) and *src is untouched.
int32_t prepare_export(const hurray_buffer &src, uint32_t options, PreparedExport *p);
// The export happened: *src is consumed (released now when a copy was
// sent, else its reference lives on in the watch) and cleared.
void commit_export(PreparedExport *p, hurray_buffer *src);
// The export did not happen: fds closed, the watch taken back, a copy freed.
void abort_export(PreparedExport *p);

// Closes m->fds[0..min(nfds, HURRAY_IPC_MAX_FDS)) and sets nfds to 0.
void close_message_fds(hurray_ipc_message *m);

// Runs `step(inner, ctx)` on *src, through the checking mode when *src is a
// tracked handle (consumed by `name`); the step consumes inner on success.
int32_t consume_src(hurray_buffer *src, const char *name,
                    int32_t (*step)(hurray_buffer *inner, void *ctx), void *ctx);

}  // namespace detail
}  // namespace hurray

#endif  // HURRAY_SRC_IPC_MESSAGE_H_
