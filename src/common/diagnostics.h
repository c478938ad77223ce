// SPDX-License-Identifier: Apache-2.0
// Release accounting shared by the device backends and the checking mode
// (src/common/diagnostics.cc), the library-wide diagnostic hook's narrow interface:
// releases never fail loudly, so each outcome other than success lands here,
// and hurray_get_diagnostics / hurray_set_diagnostic_hook read it
// (docs/impl/gpu.md §3).
#ifndef HURRAY_SRC_COMMON_DIAGNOSTICS_H_
#define HURRAY_SRC_COMMON_DIAGNOSTICS_H_

#include <cstdint>

namespace hurray::detail {

// A runtime call of a release failed (the free, or making the owner's
// device current or restoring the thread's own): counted, and the diagnostic
// hook (if any) receives `status` and the formatted message, unless this
// thread is already running the hook (a failure nested in it is counted
// only). Never prints, never allocates.
void report_failed_release(int32_t status, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
// A release skipped because the memory died with its context (CUDA: the
// primary context was reset after the allocation): counted in
// context_reset_skips and sent to the diagnostic hook (HURRAY_ERR_DEVICE,
// the formatted message) under the same rules as report_failed_release.
void report_context_reset_skip(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
// A finding of the checking mode (src/checking/tracking.cc, c-ffi §9), already
// formatted: sent to the diagnostic hook under the rules above; a double
// release (or consumption) of a tracked handle is also counted in
// double_releases. Never prints.
void report_check_finding(int32_t status, const char *message, bool double_release);
// The driver was already torn down (process exit): counted, nothing else.
void count_teardown_leak();
// A GPU release in a child process after fork(): counted, nothing else.
void count_fork_skip();
// Cross-process (src/ipc, docs/impl/ipc.md): a copy of non-shareable memory
// into a memfd, and a reference a receiver gave back to this process.
void count_ipc_copy();
void count_ipc_return();

// fork(): the process's atfork handlers (src/api/fork_handlers.cc) take the
// hook's mutex before a fork (waiting for a running hook to return; nothing
// when this thread is the one running it) and give it back in parent and
// child afterwards, so a child never inherits it locked by a thread it does
// not have.
void lock_hook_for_fork();
void unlock_hook_after_fork();

// Whether this thread is running the diagnostic hook now: a lock that
// another thread may hold while it waits to call the hook must then not be
// waited for (src/device/deferred_frees.h).
bool running_diagnostic_hook();

// Helper for the loaders: registers `child_handler` with pthread_atfork.
// The loaders register theirs when libhurray is loaded (static
// initialisation), before any load can start.
void register_fork_child_handler(void (*child_handler)(void));

}  // namespace hurray::detail

#endif  // HURRAY_SRC_COMMON_DIAGNOSTICS_H_
