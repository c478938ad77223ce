// SPDX-License-Identifier: Apache-2.0
// What the files of the real-GPU suite (tests/gpu/run.sh) share, in
// namespace gpu_suite: the check macros, the runner of one named check, a
// few buffer helpers, and the groups of checks each file holds:
//   gpu_suite.cc          main, the single-process checks and the harness
//   gpu_suite_strided.cc  non-contiguous copies (docs/impl/gpu.md §4)
//   gpu_suite_ipc.cc      the two-process cases (docs/impl/ipc.md §6)
#ifndef HURRAY_TESTS_GPU_GPU_SUITE_H_
#define HURRAY_TESTS_GPU_GPU_SUITE_H_

#include <cuda.h>

#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>

#include "hurray/hurray.h"

namespace gpu_suite {

constexpr hurray_dtype kF32{2, 32, 1};
constexpr int64_t kN = 1 << 20;  // elements per tensor (4 MiB of float32)

struct Failure {
  std::string why;
};

#define CHECK(cond, ...)                               \
  do {                                                 \
    if (!(cond)) {                                     \
      char buf_[512];                                  \
      std::snprintf(buf_, sizeof buf_, __VA_ARGS__);   \
      throw Failure{std::string(#cond) + ": " + buf_}; \
    }                                                  \
  } while (0)
#define CHECK_OK(expr)                                                               \
  do {                                                                               \
    const int32_t st_ = (expr);                                                      \
    CHECK(st_ == HURRAY_OK, "%s: %s", hurray_status_name(st_), hurray_last_error()); \
  } while (0)
#define CU(expr)                                                    \
  do {                                                              \
    const CUresult r_ = (expr);                                     \
    CHECK(r_ == CUDA_SUCCESS, "CUresult %d", static_cast<int>(r_)); \
  } while (0)

// Runs one named check and prints PASS or FAIL with its time.
void run(const char *name, const std::function<void()> &fn);

// A float32 buffer of n elements on d (on `stream`, if any).
hurray_buffer alloc(hurray_device d, int64_t n, void *stream = nullptr);
// n float32 elements on the CPU, element i holding scale * i.
hurray_buffer iota_cpu(int64_t n, float scale);
// Checks that element i of `gpu` is scale * i.
void expect_iota(const hurray_buffer &gpu, int64_t n, float scale);
// failed_releases + teardown_leaks of hurray_get_diagnostics (~0: unknown).
uint64_t failed_releases();
hurray_diagnostics diagnostics();

// Makes device `ordinal`'s primary context current on this thread (retained,
// then pushed) for the suite's own driver calls, and pops and releases it at
// the end of the scope, so the thread ends with the context stack it had.
// Throws (CU) when the driver refuses.
class CurrentContext {
 public:
  explicit CurrentContext(int ordinal) {
    CU(cuDeviceGet(&dev_, ordinal));
    CU(cuDevicePrimaryCtxRetain(&ctx_, dev_));
    const CUresult r = cuCtxPushCurrent(ctx_);
    if (r != CUDA_SUCCESS) cuDevicePrimaryCtxRelease(dev_);
    CU(r);
  }
  CurrentContext(const CurrentContext &) = delete;
  CurrentContext &operator=(const CurrentContext &) = delete;
  ~CurrentContext() {
    CUcontext popped;
    cuCtxPopCurrent(&popped);
    cuDevicePrimaryCtxRelease(dev_);
  }

 private:
  CUdevice dev_ = 0;
  CUcontext ctx_ = nullptr;
};

// gpu_suite_strided.cc
void strided_checks(int devices);
void pinned_pending_check();

// gpu_suite_ipc.cc: `gpu_suite --ipc-child FD`, and the two-process cases.
int ipc_child(int sock);
void ipc_checks();

}  // namespace gpu_suite

#endif  // HURRAY_TESTS_GPU_GPU_SUITE_H_
