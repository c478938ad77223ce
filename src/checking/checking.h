// SPDX-License-Identifier: Apache-2.0
// Checking mode (c-ffi §9): while it is on, each handle libhurray produces
// is tracked under an id, so that a second release of one reference is
// caught before it reaches the producer and live handles can be listed.
//
// A tracked handle's release_fn is check::checked_release and its
// user_data the id; the record keeps the producer's release_fn/user_data.
// When the mode is off nothing is tracked and the hot paths pay only the
// branch in on() where a handle is produced.
#ifndef HURRAY_SRC_CHECKING_CHECKING_H_
#define HURRAY_SRC_CHECKING_CHECKING_H_

#include <atomic>
#include <cstddef>
#include <cstdint>

#include "hurray/hurray.h"

namespace hurray::detail::check {

// HURRAY_CHECK_* bits; 0 when off. Written by hurray_check_enable (and at
// load from HURRAY_CHECK), read relaxed: a handle made while another thread
// turns the mode on may be made either way.
extern std::atomic<uint32_t> g_options;
// Whether the at-exit report also goes to stderr: set by options with
// HURRAY_CHECK_STDERR, cleared by options without it, kept by 0 (turning
// tracking off does not silence the report of what was tracked).
extern std::atomic<bool> g_exit_stderr;

inline bool on() { return __builtin_expect(g_options.load(std::memory_order_relaxed) != 0, 0); }

// release_fn of every tracked handle; `id` is its id cast to a pointer.
void checked_release(void *id);

inline bool is_tracked(const hurray_buffer *h) {
  return h != nullptr && h->release_fn == &checked_release;
}

// Puts each of out[0..n) (live handles just made by `made_by`, a public
// function's name in static storage) under a record of its own. A handle
// whose record cannot be allocated stays untracked and is counted. Never
// fails, never calls out.
__attribute__((noinline, cold)) void track(hurray_buffer *out, size_t n, const char *made_by);

// The exit of a public function that made out[0..n) with status `st`:
// tracks them when the mode is on. The only cost while it is off is the
// branch in on().
inline int32_t produced(int32_t st, hurray_buffer *out, size_t n, const char *made_by) {
  if (on() && st == HURRAY_OK) track(out, n, made_by);
  return st;
}

// For steps that only read a tracked source (hurray_copy, named `step`):
// HURRAY_OK while its reference is live, else HURRAY_ERR_RELEASED with a
// message, and the full report (where it was made and first released) to
// the diagnostic hook and stderr like a double release, not counted as one.
__attribute__((noinline, cold)) int32_t require_live(const hurray_buffer *h, const char *what,
                                                     const char *step);

// The step a tracked handle is consumed by: `inner` is *src carrying the
// producer's release_fn/user_data again.
using Step = int32_t (*)(hurray_buffer *inner, void *ctx);

// Runs `step` for a tracked *src that `step_name` consumes (hurray_share,
// the DLPack exports). The record is taken out first, so a concurrent
// release of a copy of *src counts as the double release it is. On success
// the record is retired (a later release of a copy is caught and says
// "consumed by step_name") and *src is cleared unless it lies in
// written[0..n_written) (an output that aliases it). On failure the record
// goes back and *src is unchanged. A record already gone:
// HURRAY_ERR_RELEASED, counted and reported like a double release.
__attribute__((noinline, cold)) int32_t consume(hurray_buffer *src, const char *step_name,
                                                Step step, void *ctx, const hurray_buffer *written,
                                                size_t n_written);

// fork(): the diagnostics' atfork handlers call these, after taking and
// before releasing the hook mutex (a hook may release tracked handles, so
// the hook mutex is always taken before the checker's).
void prepare_fork();
void after_fork();
// In the child only, after both locks are given back: a consuming step that
// another parent thread was running will never end there. The child's next
// call into the checker settles each claimed record as if its step had
// failed (it consumed nothing): a release held meanwhile releases the
// producer then, any further one is reported. Not in the handler itself: a
// producer's release may need locks (Python's GIL) the child has not
// re-made yet.
void after_fork_child();

}  // namespace hurray::detail::check

#endif  // HURRAY_SRC_CHECKING_CHECKING_H_
