// SPDX-License-Identifier: Apache-2.0
// GPU device memory across processes (docs/impl/ipc.md §6) against both fake
// drivers, typed over the vendors: each case runs a probe process
// (ipc_probe.cc) that forks its receiver before any GPU call, since a child
// forked after the driver was loaded cannot use it.
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "ipc_suite.h"

namespace gpu_test {
namespace {

template <typename V>
class GpuIpc : public ::testing::Test {
 protected:
  // Runs `probe ipc-CMD TYPE` with the vendor's fake; every check it made
  // must have held.
  void run(const char *cmd) { run_ipc_probe<V>(std::string("ipc-") + cmd); }
};

TYPED_TEST_SUITE(GpuIpc, IpcVendors);

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

// GPU handles in a set message (ipc.md §10, ipc_set_probe.cc): 8 views of
// one allocation are one open, one event wait and one return after the
// last release; CPU and GPU in one message; a receiver killed holding a
// set; a GPU the receiver cannot see (the entry named, nothing left open,
// every fd closed); pool memory with the pool's fd once.
TYPED_TEST(GpuIpc, SetOfViewsIsOneOpenAndOneReturn) { this->run("set-views"); }
TYPED_TEST(GpuIpc, SetMixesCpuAndGpu) { this->run("set-mixed"); }
TYPED_TEST(GpuIpc, SetHeldByKilledReceiverReturnsAll) { this->run("set-kill"); }
TYPED_TEST(GpuIpc, SetWithInvisibleGpuIsRefused) { this->run("set-invisible"); }
TYPED_TEST(GpuIpc, SetOfPoolMemory) { this->run("set-pool"); }

// CUDA VMM allocations (cuMemCreate + cuMemMap) as POSIX fds, kind 2.
using CudaVmmIpc = GpuIpc<IpcCudaVendor>;

// CUDA stream-ordered pool memory, kinds 5 and 6 (ipc_pool_probe.cc).
using CudaPoolIpc = GpuIpc<IpcCudaVendor>;

// hurray_alloc_async with HURRAY_ALLOC_SHAREABLE memory and a share of it
// over one connection: the pool exported and imported once, each pointer
// once; the child reads, writes, frees its pointers (cuMemFree) and, when
// the connection ends, destroys the imported pool; the producer's
// cuMemFreeAsync once, after the importer's frees (no order violation).
TEST_F(CudaPoolIpc, ChildImportsReadsWritesAndReturns) { run("pool-roundtrip"); }

// 8 buffers over one connection: one pool fd (one pool import) and 8
// pointer imports; a second connection gets the fd again; a standalone
// hurray_ipc_export message carries it every time (kind 5, 2 fds).
TEST_F(CudaPoolIpc, PoolFdTravelsOncePerConnection) { run("pool-once"); }

// Memory of the device's default pool (cuMemAllocAsync): refused with
// HURRAY_ERR_UNSUPPORTED_DEVICE and the exact message, nothing consumed.
TEST_F(CudaPoolIpc, DefaultPoolMemoryIsRefused) { run("pool-default"); }

// A child SIGKILLed while it holds the import: the reference returns, the
// producer frees once, no order violation (the dead importer's import went).
TEST_F(CudaPoolIpc, KilledChildReturnsItsReference) { run("pool-kill"); }

// The fake enforces the documented order: an exporter's free while a live
// importer holds the pointer is counted.
TEST_F(CudaPoolIpc, FakeCountsAnExporterFreeingFirst) { run("pool-order"); }

// The receiver's first pool import fails (injected): the kind-5 message is
// refused, and the kind-6 messages after it import from the pool fd kept
// when the kind-5 one arrived (before, they were refused: the sender had
// marked the pool sent on the connection).
TEST_F(CudaPoolIpc, KindSixAfterAFailedKindFiveImports) { run("pool-retry"); }

// Two connections from one sender: each brings the pool, one pool import
// serves both, and it is destroyed when the last of them ended.
TEST_F(CudaPoolIpc, TwoConnectionsShareOneImport) { run("pool-two"); }

// A receiver that closes its socket without reading its end: its next
// hurray_ipc_recv (on another connection) lets go of that connection's
// pool (before, it was kept until the process ended).
TEST_F(CudaPoolIpc, ClosedUnreadConnectionDropsItsPool) { run("pool-unread"); }

// cuDevicePrimaryCtxReset destroyed libhurray's own pool: the next
// HURRAY_ALLOC_SHAREABLE allocation makes a new one (before, it allocated
// from the destroyed pool and failed).
TEST_F(CudaPoolIpc, OwnPoolIsMadeAgainAfterAContextReset) { run("pool-reset"); }
// The receiver's cuDevicePrimaryCtxReset between a kind-5 and a kind-6
// message of one pool destroyed its imported pool and the pointer imported
// from it: the kind-6 message imports the pool again from the fd kept with
// the entry (before, it called cuMemPoolImportPointer with the destroyed
// pool handle, undefined on a real driver), the dead pointer's release
// calls nothing (before: cuMemFree of it, refused), and the connection's
// end destroys only the live import (before: cuMemPoolDestroy of the dead
// one too, a failed release). Review of issue 27.
TEST_F(CudaPoolIpc, KindSixAfterTheReceiversContextResetImports) { run("pool-recv-reset"); }
// The fake's rule: an imported pool is the importing context's device's,
// and dies with a reset of that device only (review of issue 27).
TEST_F(CudaPoolIpc, FakeImportBelongsToTheImportingDevice) { run("pool-device-reset"); }

// HIP stream-ordered pool memory, kinds 5 and 6, with the same probe
// commands (ipc_pool_probe.cc) on the HIP fake's pools
// (tests/fake_drivers/fake_hip_pool.h): hipMemPoolCreate with
// hipMemHandleTypePosixFileDescriptor, hipMallocFromPoolAsync,
// hipMemPoolExportToShareableHandle once per connection,
// hipMemPoolExportPointer / hipMemPoolImportPointer per buffer, hipFree of
// each imported pointer before the producer's hipFreeAsync.
using HipPoolIpc = GpuIpc<IpcHipVendor>;
TEST_F(HipPoolIpc, ChildImportsReadsWritesAndReturns) { run("pool-roundtrip"); }
TEST_F(HipPoolIpc, PoolFdTravelsOncePerConnection) { run("pool-once"); }
// hipMallocAsync memory (the device's default pool): refused with
// HURRAY_ERR_UNSUPPORTED_DEVICE and the exact message, nothing consumed.
TEST_F(HipPoolIpc, DefaultPoolMemoryIsRefused) { run("pool-default"); }
TEST_F(HipPoolIpc, KilledChildReturnsItsReference) { run("pool-kill"); }
TEST_F(HipPoolIpc, FakeCountsAnExporterFreeingFirst) { run("pool-order"); }
TEST_F(HipPoolIpc, KindSixAfterAFailedKindFiveImports) { run("pool-retry"); }
TEST_F(HipPoolIpc, TwoConnectionsShareOneImport) { run("pool-two"); }
TEST_F(HipPoolIpc, ClosedUnreadConnectionDropsItsPool) { run("pool-unread"); }
// A pool the caller made (hipMemPoolCreate, POSIX fd): found by
// hipPointerGetAttribute(HIP_POINTER_ATTRIBUTE_MEMPOOL_HANDLE) and sent as
// kind 5, released once after the importer; with the attribute unanswered
// (as ROCm may), refused clearly with nothing consumed, while libhurray's
// own pool memory still goes as kind 5.
TEST_F(HipPoolIpc, CallersPoolFoundByAttributeOwnPoolWithout) { run("pool-user"); }

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
