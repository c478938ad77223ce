// SPDX-License-Identifier: Apache-2.0
// The stream-ordered GPU handoff across processes (docs/impl/ipc.md §6,
// what the consumer waits for) against the fake drivers, both vendors: each
// case a probe process (ipc_event_probe.cc) that forks its receiver before
// any GPU call. Counted by the fakes: host-blocking synchronisations per
// export (0; 1 context-wide before the IPC event), the streams recorded on
// and waited on, the sender's event destroyed once the receiver released.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "support.h"

namespace gpu_test {
namespace {

struct CudaVendor {
  static constexpr int32_t kType = HURRAY_DEVICE_CUDA;
  static constexpr const char *kEnv = "HURRAY_CUDA_DRIVER_PATH";
  static std::string fake() { return HURRAY_FAKE_CUDA_PATH_OR_EMPTY; }
};
struct HipVendor {
  static constexpr int32_t kType = HURRAY_DEVICE_ROCM;
  static constexpr const char *kEnv = "HURRAY_HIP_LIBRARY_PATH";
  static std::string fake() { return HURRAY_FAKE_HIP_PATH_OR_EMPTY; }
};

template <typename V>
class GpuIpcEvent : public ::testing::Test {
 protected:
  // Runs `probe ipc-event-CMD TYPE` with the vendor's fake; every check it
  // made must have held. (LSAN's TLS scan off, as in ipc_test.cc.)
  void run(const char *cmd) {
    if (V::fake().empty()) GTEST_SKIP() << "this build has no fake for the vendor";
    const char *lsan = std::getenv("LSAN_OPTIONS");
    const std::string lsan_options =
        (lsan != nullptr && lsan[0] != '\0' ? std::string(lsan) + ":" : std::string()) +
        "use_tls=0";
    ProbeResult r = run_probe({std::string("ipc-event-") + cmd, std::to_string(V::kType)},
                              {{V::kEnv, V::fake()}, {"LSAN_OPTIONS", lsan_options}});
    EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
    EXPECT_EQ(r.out.find("FAILED"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("check "), std::string::npos) << "no check ran\n" << r.out << r.err;
  }
};

using Vendors = ::testing::Types<CudaVendor, HipVendor>;
TYPED_TEST_SUITE(GpuIpcEvent, Vendors);

TYPED_TEST(GpuIpcEvent, HandoffWaitsOnTheDeviceNotTheHost) { this->run("handoff"); }

TYPED_TEST(GpuIpcEvent, NamedStreamsRecordAndWait) { this->run("async"); }

TYPED_TEST(GpuIpcEvent, EventThatCannotBeOpenedFailsTheImport) { this->run("open-fails"); }

}  // namespace
}  // namespace gpu_test
