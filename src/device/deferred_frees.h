// SPDX-License-Identifier: Apache-2.0
// Releases whose stream was being captured when they came (docs/impl/gpu.md
// §3, graph capture): a vendor keeps them in one DeferredFrees and tries
// them again from its later allocations and releases, on any thread, until
// the capture has ended. count() lets those hot paths skip the mutex when
// the list is empty.
#ifndef HURRAY_SRC_DEVICE_DEFERRED_FREES_H_
#define HURRAY_SRC_DEVICE_DEFERRED_FREES_H_

#include <atomic>
#include <cstddef>
#include <mutex>
#include <new>
#include <vector>

#include "device/backend.h"

namespace hurray::detail {

class DeferredFrees {
 public:
  constexpr DeferredFrees() = default;

  // Keeps a release for later. Called on a release path: never throws (a
  // failed allocation of the list leaks the memory, as an unordered free
  // would be worse).
  void add(hurray_device device, const DeviceMemory &mem) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (list_ == nullptr) list_ = new (std::nothrow) std::vector<Entry>;
    if (list_ == nullptr) return;
    list_->push_back(Entry{device, mem});
    count_.store(list_->size(), std::memory_order_release);
  }

  // Whether no release is kept (one atomic load).
  bool empty() const { return count_.load(std::memory_order_acquire) == 0; }

  // Hands every kept release to release_now(device, mem), outside the lock;
  // each may be kept again. Nothing happens when the list is empty.
  template <typename ReleaseNow>
  void retry(ReleaseNow release_now) {
    if (count_.load(std::memory_order_acquire) == 0) return;
    std::vector<Entry> todo;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (list_ == nullptr) return;
      todo.swap(*list_);
      count_.store(0, std::memory_order_release);
    }
    for (const Entry &e : todo) release_now(e.device, e.mem);
  }

 private:
  struct Entry {
    hurray_device device;
    DeviceMemory mem;
  };
  std::mutex mutex_;
  std::vector<Entry> *list_ =
      nullptr;  // under mutex_; never freed (static destructors release too)
  std::atomic<size_t> count_{0};
};

}  // namespace hurray::detail

#endif  // HURRAY_SRC_DEVICE_DEFERRED_FREES_H_
