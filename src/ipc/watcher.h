// SPDX-License-Identifier: Apache-2.0
// The sender's side of a message's lifetime (docs/impl/ipc.md §5): the read
// end of each export's pipe, with the reference the export consumed, watched
// by one internal thread (epoll) that releases the reference when the
// kernel reports that every copy of the write end is closed.
#ifndef HURRAY_SRC_IPC_WATCHER_H_
#define HURRAY_SRC_IPC_WATCHER_H_

#include <cstdint>

#include "hurray/hurray.h"

namespace hurray::detail {

// One watched export. Opaque outside watcher.cc.
struct Watch;

// Starts watching `read_fd` (owned from now on) for the end of file that
// releases `held`. The caller still holds the write end, so nothing is
// released before the caller lets it go; `held` is only recorded (the caller
// clears its own copy once the export succeeds). Starts the watcher thread
// first if this process has none (again in a forked child). On failure
// read_fd is closed, `held` untouched, the message set (HURRAY_ERR_IPC or
// HURRAY_ERR_OUT_OF_MEMORY) and NULL returned.
Watch *watch_export(int read_fd, const hurray_buffer &held, int32_t *status);

// Makes `done(arg)` run once the watch ends: after `held` is released at
// end of file (on the thread that saw it), or in unwatch_export. Only
// before the write end leaves the caller (the watch cannot have ended yet).
// In a child forked with live watches it never runs (the parent's).
void watch_when_done(Watch *w, void (*done)(void *), void *arg);

// Takes back an export whose message was never delivered: only while the
// caller still holds the write end (so the thread cannot have seen end of
// file). Closes read_fd and forgets `held` without releasing it.
void unwatch_export(Watch *w);

// Whether `write_fd` is a write end of the lifetime pipe of one of this
// process's live exports (same pipe: the read end's st_dev and st_ino).
// When it is, `use(held, ctx)` runs on the reference that export holds,
// with the watcher's lock held: what it reads of `held` then happens
// before the watch's release as a thread checker sees it (the kernel's
// ordering, end of file only after the caller closes `write_fd`, is
// invisible to one). The memory stays valid while the caller keeps
// `write_fd` open. A GPU message coming back to its sender (docs/impl/ipc.md
// §6) becomes a share of that memory this way.
bool find_export(int write_fd, void (*use)(const hurray_buffer &held, void *ctx), void *ctx);

// The counters behind hurray_diagnostics.ipc_copies and ipc_returns live in
// src/common/diagnostics.h (count_ipc_copy, count_ipc_return).

}  // namespace hurray::detail

#endif  // HURRAY_SRC_IPC_WATCHER_H_
