// SPDX-License-Identifier: Apache-2.0
// GPU memory names its device by UUID across processes, and comes back to
// its own sender as a share (docs/impl/ipc.md §6, §6.1), against both fake
// drivers: each case runs a probe process (ipc_identity_probe.cc) whose
// sender and receiver see the fake GPUs through different
// CUDA_VISIBLE_DEVICES / HIP_VISIBLE_DEVICES (tests/fake_drivers/fake_devices.h).
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
class GpuIdentity : public ::testing::Test {
 protected:
  // Runs `probe ipc-CMD TYPE` with the vendor's fake (two fake GPUs
  // installed); every check it made must have held.
  void run(const char *cmd) {
    if (V::fake().empty()) GTEST_SKIP() << "this build has no fake for the vendor";
    // As in ipc_test.cc: the watcher thread's DTLS confuses LeakSanitizer.
    const char *lsan = std::getenv("LSAN_OPTIONS");
    const std::string lsan_options =
        (lsan != nullptr && lsan[0] != '\0' ? std::string(lsan) + ":" : std::string()) +
        "use_tls=0";
    ProbeResult r = run_probe({std::string("ipc-") + cmd, std::to_string(V::kType)},
                              {{V::kEnv, V::fake()}, {"LSAN_OPTIONS", lsan_options}});
    EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
    EXPECT_EQ(r.out.find("FAILED"), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("check "), std::string::npos) << "no check ran\n" << r.out << r.err;
  }
};

using Vendors = ::testing::Types<CudaVendor, HipVendor>;
TYPED_TEST_SUITE(GpuIdentity, Vendors);

// Sender sees the GPUs as "1,0", receiver as "0,1": each allocation is
// opened in, and labelled with, the receiver's own ordinal of its GPU.
TYPED_TEST(GpuIdentity, ReceiverUsesItsOwnOrdinal) { this->run("identity-order"); }

// The receiver cannot see the sender's GPU: HURRAY_ERR_UNSUPPORTED_DEVICE
// naming the GPU's UUID, nothing opened, the reference returned.
TYPED_TEST(GpuIdentity, InvisibleGpuIsRefused) { this->run("identity-invisible"); }

// The same refusal, with every fd of the message closed.
TYPED_TEST(GpuIdentity, InvisibleGpuRefusalClosesTheFds) { this->run("identity-invisible-fds"); }

// A message imported by the process that exported it: the same memory, no
// driver open, the producer's release once, after the last share.
TYPED_TEST(GpuIdentity, OwnMessageComesBackAsAShare) { this->run("local-return"); }

// Sent to a worker, which sends it back: the sender gets its own memory,
// released once.
TYPED_TEST(GpuIdentity, WorkerSendsItBack) { this->run("local-forward"); }

// A CUDA VMM import grants access (cuMemSetAccess) to the receiver's own
// ordinal of the GPU.
using CudaIdentity = GpuIdentity<CudaVendor>;
TEST_F(CudaIdentity, VmmImportGrantsTheReceiversOrdinal) { run("identity-vmm"); }

}  // namespace
}  // namespace gpu_test
