// SPDX-License-Identifier: Apache-2.0
// The once-per-process load shared by the CUDA and HIP loaders
// (device/cuda/driver.cc, device/hip/runtime.cc): the first request runs the
// vendor's load under std::call_once, concurrent first requests wait for it
// and all see its result, a failed load is not retried; and the fork guard:
// a child forked once a load has begun (even while another thread is still
// inside it, whose std::call_once state the child inherits) is refused the
// vendor without waiting for or redoing that load, unless the parent's load
// failed (docs/impl/gpu.md §1, §3).
#ifndef HURRAY_SRC_DEVICE_LOADER_ONCE_H_
#define HURRAY_SRC_DEVICE_LOADER_ONCE_H_

#include <atomic>
#include <mutex>

#include "common/error.h"

namespace hurray::detail {

class LoaderOnce {
 public:
  enum class Outcome { kLoaded, kFailed, kForkedChild };

  // `load()` returns true when the vendor library works. Runs it at most
  // once per process; kForkedChild without running or waiting for anything
  // in a child refused the vendor.
  template <typename Load>
  Outcome run(Load load) {
    // Checked before the load: a child forked while the parent was loading
    // must neither wait for nor redo that load.
    if (forked()) return Outcome::kForkedChild;
    started_.store(true, std::memory_order_relaxed);
    std::call_once(once_, [&] {
      loaded_ = load();
      if (!loaded_) failed_.store(true, std::memory_order_relaxed);
    });
    return loaded_ ? Outcome::kLoaded : Outcome::kFailed;
  }

  // run(), for a public entry point: true when the vendor is loaded;
  // otherwise false with HURRAY_ERR_UNSUPPORTED_DEVICE set for the calling
  // thread, worded `forked_message` in a refused child and `load_error` (the
  // loader's own account of its failure) otherwise.
  template <typename Load>
  bool ready(Load load, const char *load_error, const char *forked_message) {
    switch (run(load)) {
      case Outcome::kLoaded: return true;
      case Outcome::kForkedChild:
        detail::fail(HURRAY_ERR_UNSUPPORTED_DEVICE, "%s", forked_message);
        break;
      case Outcome::kFailed: detail::fail(HURRAY_ERR_UNSUPPORTED_DEVICE, "%s", load_error); break;
    }
    return false;
  }

  // True after a successful load, without loading. A handle holding the
  // vendor's memory exists only after that load, which happened-before the
  // handle was created: the flag is then visible.
  bool loaded() const { return loaded_; }

  // True in a child forked after a load began in the parent (and did not
  // fail there).
  bool forked() const { return forked_.load(std::memory_order_relaxed); }

  // For the loader's pthread_atfork child handler (registered when
  // libhurray is loaded, src/common/diagnostics.h register_fork_child_handler). A
  // parent whose load failed never initialised the vendor: its child keeps
  // the parent's answer (the same failure).
  void on_fork_child() {
    if (started_.load(std::memory_order_relaxed) && !failed_.load(std::memory_order_relaxed)) {
      forked_.store(true, std::memory_order_relaxed);
    }
  }

 private:
  std::once_flag once_;
  bool loaded_ = false;  // written once inside once_; read-only afterwards
  std::atomic<bool> started_{false};
  std::atomic<bool> failed_{false};
  std::atomic<bool> forked_{false};
};

}  // namespace hurray::detail

#endif  // HURRAY_SRC_DEVICE_LOADER_ONCE_H_
