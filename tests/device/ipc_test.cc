// SPDX-License-Identifier: Apache-2.0
// GPU device memory across processes (docs/impl/ipc.md §6) against both fake
// drivers, typed over the vendors: each case runs a probe process
// (ipc_probe.cc) that forks its receiver before any GPU call, since a child
// forked after the driver was loaded cannot use it.
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
class GpuIpc : public ::testing::Test {
 protected:
  // Runs `probe ipc-CMD TYPE` with the vendor's fake; every check it made
  // must have held.
  void run(const char *cmd) {
    if (V::fake().empty()) GTEST_SKIP() << "this build has no fake for the vendor";
    // The producer's release runs on the sender's watcher thread, which
    // lives until exit and has touched the fake's thread_local state (a
    // dlopened library's dynamic TLS). LeakSanitizer misreads that thread's
    // DTLS at exit (a garbage range, "Tracer caught signal 11"), so its TLS
    // scan is turned off for the probe; heap and stacks are still scanned.
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
TYPED_TEST_SUITE(GpuIpc, Vendors);

// A forked child imports an allocation and a share of it, reads the parent's
// values and writes one back; the producer's release runs once, after the
// parent's own share too.
TYPED_TEST(GpuIpc, ChildImportsReadsWritesAndReturns) { this->run("roundtrip"); }

// A child SIGKILLed while it holds the import: the producer's release runs.
TYPED_TEST(GpuIpc, KilledChildReturnsItsReference) { this->run("kill"); }

// Kind-3/4 descriptors with one field wrong: the exact status, every fd
// closed, nothing opened, the reference returned.
TYPED_TEST(GpuIpc, MalformedDescriptorsAreRefused) { this->run("malformed"); }

// Own-process import (the driver refuses it), stream-ordered pool memory and
// pinned host memory: refused with nothing consumed or leaked.
TYPED_TEST(GpuIpc, UnexportableMemoryIsRefused) { this->run("refusals"); }

// CUDA VMM allocations (cuMemCreate + cuMemMap) as POSIX fds, kind 2.
using CudaVmmIpc = GpuIpc<CudaVendor>;

// A child imports an allocation and a share of it, reads, writes one the
// parent reads, releases: every import-side cuMemMap undone (cuMemUnmap,
// cuMemAddressFree, cuMemRelease), the export's retained handle released,
// the producer's release once, after the child's.
TEST_F(CudaVmmIpc, ChildImportsReadsWritesAndReturns) { run("vmm-roundtrip"); }

// A child SIGKILLed while it holds the import: the producer's release runs.
TEST_F(CudaVmmIpc, KilledChildReturnsItsReference) { run("vmm-kill"); }

// Kind-2 messages with a wrong fd count, size or reserved byte, and driver
// failures during the import: the exact status, every fd closed, nothing
// mapped, the reference returned.
TEST_F(CudaVmmIpc, MalformedMessagesAreRefused) { run("vmm-malformed"); }

// A VMM allocation made without CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR:
// HURRAY_ERR_UNSUPPORTED_DEVICE, nothing consumed, nothing retained.
TEST_F(CudaVmmIpc, AllocationWithoutTheFdTypeIsRefused) { run("vmm-refusals"); }

// Two allocations mapped back to back in one reservation (PyTorch's
// expandable segments): the second one's data is sent, and the child reads
// the second allocation's bytes (cuMemGetAddressRange reports the one
// mapping; the export checks that it maps its whole allocation).
TEST_F(CudaVmmIpc, SecondAllocationOfAReservationCarriesItsBytes) { run("vmm-range-back-to-back"); }

// A mapping of a later part of an allocation (cuMemMap offset > 0), and one
// of only its first part: refused with HURRAY_ERR_UNSUPPORTED_DEVICE and the
// reason, nothing exported, never the wrong bytes at the receiver.
TEST_F(CudaVmmIpc, MappingOfPartOfAnAllocationIsRefused) { run("vmm-range-offset"); }

}  // namespace
}  // namespace gpu_test
