// SPDX-License-Identifier: Apache-2.0
// Helpers for the GPU tests against the fake drivers: access to a fake's
// control API, small tensor helpers, and running the probe program in a
// child process with a chosen environment.
#ifndef HURRAY_TESTS_GPU_FAKE_SUPPORT_H_
#define HURRAY_TESTS_GPU_FAKE_SUPPORT_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "fake_control.h"
#include "hurray/hurray.h"

namespace gpu_test {

// One fake library's control API, looked up with dlsym in the very object
// libhurray loads (same path).
struct Fake {
  void *lib = nullptr;
  void (*reset)(void) = nullptr;
  int (*call_count)(const char *) = nullptr;
  int (*calls)(const char *, fake_call *, int) = nullptr;
  void (*inject)(const char *, int, int) = nullptr;
  void (*set_deinitialized)(int) = nullptr;
  int64_t (*live_allocations)(void) = nullptr;
  int (*init_count)(void) = nullptr;
  int (*current_device)(void) = nullptr;
  void (*set_current_device)(int) = nullptr;
  // CUDA only
  int (*primary_retains)(int) = nullptr;
  int (*max_requested_version)(void) = nullptr;
  int (*too_new_requests)(void) = nullptr;
  int (*used_proc_address_v2)(void) = nullptr;

  std::string prefix;  // "fake_cuda_" / "fake_hip_"

  bool loaded() const { return lib != nullptr; }
  // Any other control function of this fake, by name without the prefix
  // (nullptr when it has none).
  template <typename Fn>
  Fn fn(const char *name) const {
    return reinterpret_cast<Fn>(symbol(name));
  }
  void *symbol(const char *name) const;
  std::vector<fake_call> log(const char *fn) const;
};

// The fakes named by HURRAY_CUDA_DRIVER_PATH / HURRAY_HIP_LIBRARY_PATH
// (main() points those at the fakes built next to the tests). A fake that is
// not built in this configuration reads as not loaded.
Fake &fake_cuda();
Fake &fake_hip();

// Opens the fake at `path` (nullptr when it cannot be opened).
Fake open_fake(const char *path, const char *prefix);

constexpr hurray_dtype kFloat32{2, 32, 1};

// float32 memory of `shape` from hurray_alloc_async on `stream`; a failure
// fails the test (hurray_last_error() in the message) and gives an empty
// handle.
hurray_buffer alloc_ok(hurray_device d, void *stream = nullptr,
                       const std::vector<int64_t> &shape = {3, 4});

inline hurray_device dev(int32_t type, int32_t id = 0) { return hurray_device{type, id}; }

struct Diag {
  uint64_t failed = 0, teardown = 0, fork = 0, reset_skips = 0, stream_fallbacks = 0;
};
Diag diagnostics();

// Result of one probe run.
struct ProbeResult {
  int exit_code = -1;  // exit status, or 128 + signal
  std::string out;
  std::string err;
};

// Runs tests/device/probe.cc's program with `args`, the current
// environment changed by `env` (an empty value removes the variable).
ProbeResult run_probe(const std::vector<std::string> &args,
                      const std::map<std::string, std::string> &env);

// Directory of a file path ("/a/b/c.so" -> "/a/b").
std::string dir_of(const std::string &path);

}  // namespace gpu_test

#endif  // HURRAY_TESTS_GPU_FAKE_SUPPORT_H_
