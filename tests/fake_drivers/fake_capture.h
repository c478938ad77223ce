// SPDX-License-Identifier: Apache-2.0
// Stream capture as both fakes model it (shared by fake_cuda.cc and
// fake_hip.cc), after the CUDA Programming Guide, "CUDA Graphs": "Prohibited
// and Unhandled Operations" (synchronising or querying a capturing stream,
// or a context / device containing one, is invalid; so is using the legacy
// stream while a blocking stream captures, "Cross-stream Dependencies and
// Events" / implicit synchronisation), "Invalidation" (an invalid operation
// invalidates the capture: cuStreamEndCapture then fails with
// CUDA_ERROR_STREAM_CAPTURE_INVALIDATED), and the Driver API reference of
// cuStreamBeginCapture / cuThreadExchangeStreamCaptureMode for the modes;
// the HIP API reference documents hipStreamBeginCapture and
// hipThreadExchangeStreamCaptureMode with the same three modes and numbers.
#ifndef HURRAY_TESTS_FAKES_FAKE_CAPTURE_H_
#define HURRAY_TESTS_FAKES_FAKE_CAPTURE_H_

#include <atomic>
#include <cstdint>

namespace fake::capture {

// CUstreamCaptureMode / hipStreamCaptureMode.
constexpr int kGlobal = 0;
constexpr int kThreadLocal = 1;
constexpr int kRelaxed = 2;

// What a test reads through fake_control.h.
struct Counters {
  std::atomic<int> context_syncs{0};  // cuCtxSynchronize / hipDeviceSynchronize calls
  std::atomic<int> stream_syncs{0};   // cuStreamSynchronize / hipStreamSynchronize calls
  std::atomic<int> invalidated{0};    // captures invalidated (each counted once)
};
inline Counters &counters() {
  static Counters *c = new Counters;  // never destroyed: calls may come during exit
  return *c;
}

// Whether a "potentially unsafe" call (cuThreadExchangeStreamCaptureMode:
// allocations, frees, synchronous operations) made by thread `self`, whose
// own mode is `thread_mode`, is prohibited by a capture begun by thread
// `capturer` in mode `capture_mode`. cuStreamBeginCapture: global and
// thread-local mode prohibit them on the capturing thread (unless that
// thread has switched itself to relaxed); global mode also on every other
// thread whose own mode is global; relaxed prohibits nothing.
inline bool prohibits(int capture_mode, uint64_t capturer, int thread_mode, uint64_t self) {
  if (thread_mode == kRelaxed || capture_mode == kRelaxed) return false;
  if (capturer == self) return true;
  return capture_mode == kGlobal && thread_mode == kGlobal;
}

// Marks a capture (state 1 active, 2 invalidated) invalidated, counting the
// first time only.
inline void invalidate(int *state) {
  if (*state == 1) counters().invalidated.fetch_add(1);
  if (*state != 0) *state = 2;
}

}  // namespace fake::capture

// The control functions of fake_control.h for the counters.
#define FAKE_CAPTURE_EXPORTS(prefix)                       \
  FAKE_EXPORT int prefix##context_synchronizations(void) { \
    return fake::capture::counters().context_syncs.load(); \
  }                                                        \
  FAKE_EXPORT int prefix##stream_synchronizations(void) {  \
    return fake::capture::counters().stream_syncs.load();  \
  }                                                        \
  FAKE_EXPORT int prefix##invalidated_captures(void) {     \
    return fake::capture::counters().invalidated.load();   \
  }

#endif  // HURRAY_TESTS_FAKES_FAKE_CAPTURE_H_
