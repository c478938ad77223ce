// SPDX-License-Identifier: Apache-2.0
// Releases whose stream was being captured when they came (docs/impl/gpu.md
// §2, "Releases during a capture of their stream"): a vendor keeps them in
// one DeferredFrees. Each entry is of one of two classes:
//
//  * blocking class (keeps_stream false): the release names no stream of
//    the caller's any more (the vendor rewrote it to order the free on the
//    legacy stream), so libhurray's own retirer thread (device/vendor.h)
//    may try it again, every millisecond or so, until the capture has
//    ended, and it is the one that starts the retirer;
//  * stream-keeping class (keeps_stream true): the release still names the
//    caller's (non-blocking) stream. Only calls the caller makes try it
//    again: hurray_retire_deferred_frees, and any later allocation or
//    release of the vendor (which the caller vouches for by the contract of
//    hurray_alloc_async: the stream stays valid until the deferral is
//    retired). The retirer never touches it.
//
// Tries are serialised (one at a time, process-wide), so that when
// hurray_retire_deferred_frees returns, no other thread is still using a
// stream whose deferrals it retired. count() and empty() let the hot paths
// skip all locking when the list is empty. Nothing here calls a driver.
#ifndef HURRAY_SRC_DEVICE_DEFERRED_FREES_H_
#define HURRAY_SRC_DEVICE_DEFERRED_FREES_H_

#include <atomic>
#include <cstddef>
#include <mutex>
#include <new>
#include <vector>

#include "common/diagnostics.h"
#include "device/backend.h"

namespace hurray::detail {

class DeferredFrees {
 public:
  struct Entry {
    hurray_device device;
    DeviceMemory mem;
    bool keeps_stream;  // names the caller's stream (see above)
  };

  // Keeps a release for later. Called on a release path: never throws (a
  // failed allocation of the list leaks the memory, as an unordered free
  // would be worse). Returns true when the caller must start the retirer:
  // a blocking-class entry, no retirer running and none being stopped
  // (retirer_running() is true from then on).
  bool add(hurray_device device, const DeviceMemory &mem, bool keeps_stream) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (list_ == nullptr) list_ = new (std::nothrow) std::vector<Entry>;
    if (list_ == nullptr) return false;
    list_->push_back(Entry{device, mem, keeps_stream});
    count_.store(list_->size(), std::memory_order_release);
    if (keeps_stream) return false;
    ++blocking_;
    if (running_.load(std::memory_order_relaxed) || stopping_.load(std::memory_order_relaxed)) {
      return false;
    }
    running_.store(true, std::memory_order_relaxed);
    return true;
  }

  // Whether no release is kept (one atomic load).
  bool empty() const { return count_.load(std::memory_order_acquire) == 0; }

  // A try from a hot path (an allocation or release): every kept entry,
  // unless another try is under way or this thread is inside one already
  // (a diagnostic hook that releases memory): then nothing, at once.
  template <typename ReleaseNow>
  void try_retry(ReleaseNow release_now) {
    if (empty() || t_in_retry_) return;
    if (!retry_mutex_.try_lock()) return;
    retry_locked([](const Entry &) { return true; }, release_now);
    retry_mutex_.unlock();
  }

  // A try that waits for any other under way first (the retirer, and
  // hurray_retire_deferred_frees): the entries `pick` accepts. Returns
  // false, having tried nothing, on a thread already inside a try, and on
  // one running the diagnostic hook while another try is under way (that
  // try may be waiting to call the hook).
  template <typename Pick, typename ReleaseNow>
  bool retry(Pick pick, ReleaseNow release_now) {
    if (t_in_retry_) return false;
    if (running_diagnostic_hook()) {
      if (!retry_mutex_.try_lock()) return false;
    } else {
      retry_mutex_.lock();
    }
    retry_locked(pick, release_now);
    retry_mutex_.unlock();
    return true;
  }

  // How many kept entries `pick` accepts.
  template <typename Pick>
  size_t count(Pick pick) {
    if (empty()) return 0;
    std::lock_guard<std::mutex> lock(mutex_);
    size_t n = 0;
    if (list_ != nullptr) {
      for (const Entry &e : *list_) n += pick(e) ? 1 : 0;
    }
    return n;
  }

  // The retirer's question after each pass: true (and the retirer counts as
  // stopped from then on) when no blocking-class entry is left or a stop
  // was asked for; false: keep going.
  bool retirer_done() {
    std::lock_guard<std::mutex> lock(mutex_);
    if (blocking_ != 0 && !stopping_.load(std::memory_order_relaxed)) return false;
    running_.store(false, std::memory_order_release);
    return true;
  }
  // The retirer could not be started: the next blocking-class add tries
  // again.
  void retirer_failed() {
    std::lock_guard<std::mutex> lock(mutex_);
    running_.store(false, std::memory_order_release);
  }
  // Process exit: no retirer starts any more, the running one ends after
  // its pass. Lock-free (safe in a forked child, whose copy of the mutex
  // may be held by a thread that does not exist there).
  void stop() { stopping_.store(true, std::memory_order_release); }
  bool retirer_running() const { return running_.load(std::memory_order_acquire); }

  // pthread_atfork: fork() waits for a try under way on another thread (the
  // retirer's, in the middle of driver calls) to end, and none starts until
  // it returns, so that the child never inherits a driver, or a fake one,
  // inside a call. A fork from inside a try or the diagnostic hook does not
  // wait (the try under way may be waiting for this thread's hook).
  void lock_for_fork() {
    if (t_in_retry_ || running_diagnostic_hook()) return;
    retry_mutex_.lock();
    t_fork_locked_ = true;
  }
  void unlock_after_fork() {
    if (!t_fork_locked_) return;
    t_fork_locked_ = false;
    retry_mutex_.unlock();
  }

 private:
  // With retry_mutex_ held: hands every entry `pick` accepts to
  // release_now(device, mem), outside the list's lock; each may be kept
  // again (add).
  template <typename Pick, typename ReleaseNow>
  void retry_locked(Pick pick, ReleaseNow release_now) {
    if (empty()) return;
    std::vector<Entry> todo;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (list_ == nullptr) return;
      std::vector<Entry> keep;
      for (const Entry &e : *list_) (pick(e) ? todo : keep).push_back(e);
      list_->swap(keep);
      count_.store(list_->size(), std::memory_order_release);
      for (const Entry &e : todo) blocking_ -= e.keeps_stream ? 0 : 1;
    }
    t_in_retry_ = true;
    for (const Entry &e : todo) release_now(e.device, e.mem);
    t_in_retry_ = false;
  }

  std::mutex mutex_;        // the list and blocking_
  std::mutex retry_mutex_;  // one try at a time
  std::vector<Entry> *list_ =
      nullptr;           // under mutex_; never freed (static destructors release too)
  size_t blocking_ = 0;  // blocking-class entries in list_, under mutex_
  std::atomic<size_t> count_{0};
  std::atomic<bool> running_{false};   // a retirer runs (or is being started)
  std::atomic<bool> stopping_{false};  // process exit: no more retirers
  static inline thread_local bool t_in_retry_ = false;
  static inline thread_local bool t_fork_locked_ = false;
};

}  // namespace hurray::detail

#endif  // HURRAY_SRC_DEVICE_DEFERRED_FREES_H_
