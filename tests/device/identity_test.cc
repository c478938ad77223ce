// SPDX-License-Identifier: Apache-2.0
// GPU memory names its device by UUID across processes, and comes back to
// its own sender as a share (docs/impl/ipc.md §6, §6.1), against both fake
// drivers: each case runs a probe process (ipc_identity_probe.cc) whose
// sender and receiver see the fake GPUs through different
// CUDA_VISIBLE_DEVICES / HIP_VISIBLE_DEVICES (tests/fake_drivers/fake_devices.h).
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "ipc_suite.h"

namespace gpu_test {
namespace {

template <typename V>
class GpuIdentity : public ::testing::Test {
 protected:
  // Runs `probe ipc-CMD TYPE` with the vendor's fake (two fake GPUs
  // installed); every check it made must have held.
  void run(const char *cmd) { run_ipc_probe<V>(std::string("ipc-") + cmd); }
};

TYPED_TEST_SUITE(GpuIdentity, IpcVendors);

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
using CudaIdentity = GpuIdentity<IpcCudaVendor>;
TEST_F(CudaIdentity, VmmImportGrantsTheReceiversOrdinal) { run("identity-vmm"); }

}  // namespace
}  // namespace gpu_test
