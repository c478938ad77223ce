// SPDX-License-Identifier: Apache-2.0
// Which process made an export (docs/impl/ipc.md §6.1, the sender identity
// of the GPU kinds): this process's pid and start time.
#ifndef HURRAY_SRC_IPC_SENDER_H_
#define HURRAY_SRC_IPC_SENDER_H_

#include "ipc/wire.h"

namespace hurray::detail {

// This process: getpid() and its start time in clock ticks since boot
// (field 22 of /proc/self/stat; 0 where /proc cannot be read). Read again
// after a fork (the pid changed), else once.
WireSender this_sender();

// Whether `s` names this process (pid and start time equal). Only a hint:
// in another pid namespace the same pair may name another process, so the
// import also finds the export by its lifetime pipe (watcher.h).
bool is_this_process(const WireSender &s);

}  // namespace hurray::detail

#endif  // HURRAY_SRC_IPC_SENDER_H_
