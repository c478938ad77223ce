// SPDX-License-Identifier: Apache-2.0
// What the cross-process suites (ipc_test.cc, identity_test.cc,
// ipc_event_test.cc) share: the two vendors they are typed over and the run
// of one probe command with that vendor's fake driver. Only for the
// hurray_gpu_fake_test program (it names the fakes' paths).
#ifndef HURRAY_TESTS_DEVICE_IPC_SUITE_H_
#define HURRAY_TESTS_DEVICE_IPC_SUITE_H_

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "support.h"

namespace gpu_test {

struct IpcCudaVendor {
  static constexpr int32_t kType = HURRAY_DEVICE_CUDA;
  static constexpr const char *kEnv = "HURRAY_CUDA_DRIVER_PATH";
  static std::string fake() { return HURRAY_FAKE_CUDA_PATH_OR_EMPTY; }
};
struct IpcHipVendor {
  static constexpr int32_t kType = HURRAY_DEVICE_ROCM;
  static constexpr const char *kEnv = "HURRAY_HIP_LIBRARY_PATH";
  static std::string fake() { return HURRAY_FAKE_HIP_PATH_OR_EMPTY; }
};
using IpcVendors = ::testing::Types<IpcCudaVendor, IpcHipVendor>;

// Runs `probe COMMAND TYPE` with vendor V's fake (skipping the test when this
// build has none); every check the probe made must have held, and at least
// one must have run.
//
// The producer's release runs on the sender's watcher thread, which lives
// until exit and has touched the fake's thread_local state (a dlopened
// library's dynamic TLS). LeakSanitizer misreads that thread's DTLS at exit
// (a garbage range, "Tracer caught signal 11"), so its TLS scan is turned
// off for the probe; heap and stacks are still scanned.
template <typename V>
void run_ipc_probe(const std::string &command) {
  if (V::fake().empty()) GTEST_SKIP() << "this build has no fake for the vendor";
  const char *lsan = std::getenv("LSAN_OPTIONS");
  const std::string lsan_options =
      (lsan != nullptr && lsan[0] != '\0' ? std::string(lsan) + ":" : std::string()) + "use_tls=0";
  ProbeResult r = run_probe({command, std::to_string(V::kType)},
                            {{V::kEnv, V::fake()}, {"LSAN_OPTIONS", lsan_options}});
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(r.out.find("FAILED"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("check "), std::string::npos) << "no check ran\n" << r.out << r.err;
}

}  // namespace gpu_test

#endif  // HURRAY_TESTS_DEVICE_IPC_SUITE_H_
