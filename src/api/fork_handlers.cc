// SPDX-License-Identifier: Apache-2.0
// The pthread_atfork handlers that keep libhurray's two process-wide locks
// usable in a forked child: the diagnostic hook's mutex (src/common/diagnostics.h)
// and the checking mode's registry (src/checking/checking.h). The registry lock is taken
// after the hook mutex (a hook may release tracked handles, never the other
// way round: the checker calls the hook without its lock) and given back
// before it. The GPU loaders register their own child handlers
// (device/*/driver.cc, runtime.cc).
#include <pthread.h>

#include "checking/checking.h"
#include "common/diagnostics.h"

namespace hurray::detail {
namespace {

void prepare_fork() {
  lock_hook_for_fork();
  check::prepare_fork();
}

void after_fork_in_parent() {
  check::after_fork();
  unlock_hook_after_fork();
}

void after_fork_in_child() {
  after_fork_in_parent();
  check::after_fork_child();
}

// Registered when libhurray is loaded: before any hook can run.
[[maybe_unused]] const int g_atfork =
    pthread_atfork(&prepare_fork, &after_fork_in_parent, &after_fork_in_child);

}  // namespace
}  // namespace hurray::detail
