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

#include "ipc_suite.h"

namespace gpu_test {
namespace {

template <typename V>
class GpuIpcEvent : public ::testing::Test {
 protected:
  // Runs `probe ipc-event-CMD TYPE` with the vendor's fake; every check it
  // made must have held (ipc_suite.h).
  void run(const char *cmd) { run_ipc_probe<V>(std::string("ipc-event-") + cmd); }
};

TYPED_TEST_SUITE(GpuIpcEvent, IpcVendors);

TYPED_TEST(GpuIpcEvent, HandoffWaitsOnTheDeviceNotTheHost) { this->run("handoff"); }

TYPED_TEST(GpuIpcEvent, NamedStreamsRecordAndWait) { this->run("async"); }

TYPED_TEST(GpuIpcEvent, EventThatCannotBeOpenedFailsTheImport) { this->run("open-fails"); }

// Review of issue 27, finding 2: a receiver whose other thread captures a
// blocking stream: the import must not use the legacy stream (that breaks
// the capture) and must not skip the ordering.
TYPED_TEST(GpuIpcEvent, ImportDuringAnotherThreadsBlockingCaptureWaitsOnTheHost) {
  this->run("capture");
}

// CUDA only: HIP has no context incarnation to compare (docs/impl/gpu.md
// §4, "Events after a reset").
TYPED_TEST(GpuIpcEvent, ExportEventIsNotDestroyedAfterAContextReset) {
  if (TypeParam::kType != HURRAY_DEVICE_CUDA) GTEST_SKIP() << "CUDA only";
  this->run("reset");
}

}  // namespace
}  // namespace gpu_test
