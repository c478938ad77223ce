// SPDX-License-Identifier: Apache-2.0
// Release accounting of the GPU back ends and the diagnostic hook:
// hurray_get_diagnostics, hurray_set_diagnostic_hook (docs/impl/gpu.md §3).
#include "common/diagnostics.h"

#include <pthread.h>

#include <atomic>
#include <cstdarg>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <mutex>

#include "common/error.h"
#include "hurray/hurray.h"

namespace hurray::detail {
namespace {

std::atomic<uint64_t> g_failed_releases{0};
std::atomic<uint64_t> g_teardown_leaks{0};
std::atomic<uint64_t> g_fork_skips{0};
std::atomic<uint64_t> g_context_reset_skips{0};
std::atomic<uint64_t> g_double_releases{0};
std::atomic<uint64_t> g_ipc_copies{0};
std::atomic<uint64_t> g_ipc_returns{0};

// The hook and its argument change together under g_hook_mutex, which is
// also held while the hook runs: set_diagnostic_hook returning means the old
// hook is done. std::mutex is trivially destructible here, so releases
// during process exit can still take it.
std::mutex g_hook_mutex;
hurray_diagnostic_hook_fn g_hook = nullptr;
void *g_hook_user = nullptr;

// True while this thread runs the hook, and so holds g_hook_mutex. A
// release inside the hook whose free fails too (a hook that drops GPU
// memory, or a garbage collector it triggers) must not lock it again: that
// failure is counted only. Trivially destructible, so usable at exit.
thread_local bool t_in_hook = false;

// fork() while another thread holds g_hook_mutex (it is running the hook)
// would leave the child's copy locked forever by a thread the child does
// not have. The prepare handler takes the mutex (waiting for a running hook
// to return), so the child inherits it unlocked-by-us and releases it; a
// fork from inside the hook itself (this thread already holds it) takes
// nothing and the child's hook returns and unlocks as usual.
thread_local bool t_locked_for_fork = false;

void send_to_hook(int32_t status, const char *fmt, va_list args) {
  if (t_in_hook) return;
  std::lock_guard<std::mutex> lock(g_hook_mutex);
  if (g_hook == nullptr) return;
  char message[320];
  std::vsnprintf(message, sizeof message, fmt, args);
  t_in_hook = true;
  g_hook(status, message, g_hook_user);
  t_in_hook = false;
}

// The same for a message already formatted, of any length.
void send_to_hook_text(int32_t status, const char *message) {
  if (t_in_hook) return;
  std::lock_guard<std::mutex> lock(g_hook_mutex);
  if (g_hook == nullptr) return;
  t_in_hook = true;
  g_hook(status, message, g_hook_user);
  t_in_hook = false;
}

}  // namespace

void report_failed_release(int32_t status, const char *fmt, ...) {
  g_failed_releases.fetch_add(1, std::memory_order_relaxed);
  va_list args;
  va_start(args, fmt);
  send_to_hook(status, fmt, args);
  va_end(args);
}

void report_context_reset_skip(const char *fmt, ...) {
  g_context_reset_skips.fetch_add(1, std::memory_order_relaxed);
  va_list args;
  va_start(args, fmt);
  send_to_hook(HURRAY_ERR_DEVICE, fmt, args);
  va_end(args);
}

void report_check_finding(int32_t status, const char *message, bool double_release) {
  if (double_release) g_double_releases.fetch_add(1, std::memory_order_relaxed);
  send_to_hook_text(status, message);
}

bool running_diagnostic_hook() { return t_in_hook; }

void lock_hook_for_fork() {
  if (t_in_hook) return;
  g_hook_mutex.lock();
  t_locked_for_fork = true;
}

void unlock_hook_after_fork() {
  if (!t_locked_for_fork) return;
  t_locked_for_fork = false;
  g_hook_mutex.unlock();
}

void count_teardown_leak() { g_teardown_leaks.fetch_add(1, std::memory_order_relaxed); }

void count_fork_skip() { g_fork_skips.fetch_add(1, std::memory_order_relaxed); }
void count_ipc_copy() { g_ipc_copies.fetch_add(1, std::memory_order_relaxed); }
void count_ipc_return() { g_ipc_returns.fetch_add(1, std::memory_order_relaxed); }

void register_fork_child_handler(void (*child_handler)(void)) {
  // Can only fail with ENOMEM; then a forked child would still try to free,
  // which is what every program without this protection does.
  (void)pthread_atfork(nullptr, nullptr, child_handler);
}

}  // namespace hurray::detail

extern "C" {

HURRAY_API int32_t hurray_get_diagnostics(hurray_diagnostics *out) {
  using namespace hurray;
  using namespace hurray::detail;
  if (out == nullptr) return fail(HURRAY_ERR_INVALID_ARGUMENT, "out is NULL");
  const size_t size = out->struct_size;
  if (size < offsetof(hurray_diagnostics, failed_releases) + sizeof(uint64_t)) {
    return fail(HURRAY_ERR_INVALID_ARGUMENT,
                "out->struct_size is %zu; set it to sizeof(hurray_diagnostics)", size);
  }
  hurray_diagnostics d;
  // Whole fields only: the end of the last field that fits in `size`.
  const size_t ends[] = {
      offsetof(hurray_diagnostics, failed_releases) + sizeof d.failed_releases,
      offsetof(hurray_diagnostics, teardown_leaks) + sizeof d.teardown_leaks,
      offsetof(hurray_diagnostics, fork_skipped_releases) + sizeof d.fork_skipped_releases,
      offsetof(hurray_diagnostics, context_reset_skips) + sizeof d.context_reset_skips,
      offsetof(hurray_diagnostics, stream_fallback_frees) + sizeof d.stream_fallback_frees,
      offsetof(hurray_diagnostics, double_releases) + sizeof d.double_releases,
      offsetof(hurray_diagnostics, ipc_copies) + sizeof d.ipc_copies,
      offsetof(hurray_diagnostics, ipc_returns) + sizeof d.ipc_returns};
  size_t written = 0;
  for (size_t end : ends) {
    if (end <= size) written = end;
  }
  d.struct_size = static_cast<uint32_t>(written);
  d.reserved = 0;
  d.failed_releases = g_failed_releases.load(std::memory_order_relaxed);
  d.teardown_leaks = g_teardown_leaks.load(std::memory_order_relaxed);
  d.fork_skipped_releases = g_fork_skips.load(std::memory_order_relaxed);
  d.context_reset_skips = g_context_reset_skips.load(std::memory_order_relaxed);
  d.stream_fallback_frees = 0;  // no longer counted (docs/impl/gpu.md §3, destroyed streams)
  d.double_releases = g_double_releases.load(std::memory_order_relaxed);
  d.ipc_copies = g_ipc_copies.load(std::memory_order_relaxed);    // docs/impl/ipc.md §4
  d.ipc_returns = g_ipc_returns.load(std::memory_order_relaxed);  // docs/impl/ipc.md §5
  std::memcpy(out, &d, written);
  return HURRAY_OK;
}

HURRAY_API int32_t hurray_set_diagnostic_hook(hurray_diagnostic_hook_fn hook, void *user) {
  using namespace hurray;
  using namespace hurray::detail;
  if (t_in_hook) {
    // Called by the running hook: this thread already holds the mutex. The
    // new hook serves the next failure; the caller is the one still running.
    g_hook = hook;
    g_hook_user = user;
    return HURRAY_OK;
  }
  std::lock_guard<std::mutex> lock(g_hook_mutex);
  g_hook = hook;
  g_hook_user = user;
  return HURRAY_OK;
}

}  // extern "C"
