// SPDX-License-Identifier: Apache-2.0
// Frees as both fakes count them (shared by fake_cuda.cc and fake_hip.cc):
// every free of memory that succeeds (cuMemFree, cuMemFreeAsync,
// cuMemFreeHost; hipFree, hipFreeAsync, hipHostFree) bumps one counter, and
// a test may wait, bounded, until it reaches a number. That is how a test
// sees a free made by a thread of libhurray's own (the retirer of deferred
// frees, docs/impl/gpu.md §2, "Releases during a capture of their stream")
// without sleeping: it waits for the condition, and the time limit only
// turns a hang into a failure.
#ifndef HURRAY_TESTS_FAKES_FAKE_FREES_H_
#define HURRAY_TESTS_FAKES_FAKE_FREES_H_

#include <chrono>
#include <condition_variable>
#include <mutex>

namespace fake::frees {

struct State {
  std::mutex mu;
  std::condition_variable cv;
  int count = 0;
};
inline State &state() {
  static State *s = new State;  // never destroyed: frees may come during exit
  return *s;
}

// One successful free.
inline void freed() {
  State &s = state();
  {
    std::lock_guard<std::mutex> lock(s.mu);
    ++s.count;
  }
  s.cv.notify_all();
}

inline int count() {
  State &s = state();
  std::lock_guard<std::mutex> lock(s.mu);
  return s.count;
}

// Waits until at least `at_least` frees were made or `timeout_ms` passed;
// returns the count then.
inline int wait_for(int at_least, int timeout_ms) {
  State &s = state();
  std::unique_lock<std::mutex> lock(s.mu);
  s.cv.wait_for(lock, std::chrono::milliseconds(timeout_ms), [&] { return s.count >= at_least; });
  return s.count;
}

}  // namespace fake::frees

// The control functions of fake_control.h for the counter.
#define FAKE_FREES_EXPORTS(prefix)                                       \
  FAKE_EXPORT int prefix##frees(void) { return fake::frees::count(); }   \
  FAKE_EXPORT int prefix##wait_for_frees(int at_least, int timeout_ms) { \
    return fake::frees::wait_for(at_least, timeout_ms);                  \
  }

#endif  // HURRAY_TESTS_FAKES_FAKE_FREES_H_
