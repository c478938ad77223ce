// SPDX-License-Identifier: Apache-2.0
// CUDA VMM allocations across processes as POSIX fds (descriptor kind 2,
// docs/impl/ipc.md §6): the export step that recognises a cuMemCreate
// mapping, the import that maps one in this process, and the release-path
// helper both kinds of CUDA import use to undo their mapping.
#ifndef HURRAY_SRC_DEVICE_CUDA_VMM_IPC_H_
#define HURRAY_SRC_DEVICE_CUDA_VMM_IPC_H_

#if defined(HURRAY_WITH_CUDA)

#include <cinttypes>

#include "common/diagnostics.h"
#include "device/cuda/driver.h"
#include "device/cuda/vendor.h"
#include "device/gpu_ipc.h"

namespace hurray::detail {

// What vmm_export found at an address.
enum class VmmFound {
  kNotVmm,    // no VMM mapping (or a driver without the entry points): legacy IPC
  kExported,  // out->vmm_fd, alloc_size and data_offset are set
  kNoFdType,  // a VMM mapping created without CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR
  // A mapping of part of its allocation, or from an offset into it
  // (vmm_refuse_partial_mapping says why it is refused); nothing exported.
  kNotWholeAllocation,
};

// With the device's context current (after its cuCtxSynchronize):
// cuMemRetainAllocationHandle(data); when that succeeds, the allocation's
// properties, its mapping's range (cuMemGetAddressRange), whether that
// mapping maps the whole allocation from offset 0 (cuMemGetAllocationGranularity
// and two scratch cuMemMap attempts in a scratch reservation, undone at once;
// docs/impl/ipc.md §6) and, if it was created with the POSIX-fd handle type
// and mapped whole, cuMemExportToShareableHandle. The retained handle is
// released on every path. A failure returns its CUresult with *call naming
// the entry point (no fd left open).
CUresult vmm_export(const CudaDriver &d, const void *data, GpuIpcExport *out, const char **call,
                    VmmFound *found);

// HURRAY_ERR_UNSUPPORTED_DEVICE with the message for kNotWholeAllocation.
int32_t vmm_refuse_partial_mapping(hurray_device device, const void *data);

// GpuIpc::open_vmm and close_vmm for CUDA.
int32_t vmm_open(hurray_device device, int fd, uint64_t size, GpuVmmMapping *out);
void vmm_close(hurray_device device, const GpuVmmMapping &m);

// The release path of an import: runs `op(driver, &call)` in device's
// primary context, from any thread, never setting the message; a failure
// is counted (a teardown leak after the driver's teardown at exit).
// `only_in`, when not NULL: `op` runs only when the live incarnation is
// *only_in (what `op` names died with an earlier one: nothing is called).
template <typename Op>
void release_in_primary(hurray_device device, const void *base, Op op,
                        const uint64_t *only_in = nullptr) {
  if (cuda_forked_child()) return count_fork_skip();
  const CudaDriver *d = loaded_cuda_driver();  // loaded: it mapped `base`
  if (d == nullptr) return;
  RelaxedCaptureMode relaxed(*d);
  CUcontext ctx = nullptr;
  uint64_t id = 0;
  const char *call = "cuDevicePrimaryCtxRetain";
  CUresult r = primary_context(*d, device.device_id, &ctx, &id);
  CUresult pop = CUDA_SUCCESS;
  if (r == CUDA_SUCCESS) {
    ContextScope scope(*d);
    r = scope.enter(ctx, &call);
    if (r == CUDA_SUCCESS && (only_in == nullptr || *only_in == id)) r = op(*d, &call);
    pop = scope.leave();
  }
  if (r == CUDA_ERROR_DEINITIALIZED || pop == CUDA_ERROR_DEINITIALIZED) {
    if (r != CUDA_SUCCESS) count_teardown_leak();
    return;
  }
  if (r == CUDA_SUCCESS && pop == CUDA_SUCCESS) return;
  if (r == CUDA_SUCCESS) {
    call = "cuCtxPopCurrent";
    r = pop;
  }
  report_failed_release(HURRAY_ERR_DEVICE,
                        "%s failed with %s (%d) closing %p (CUDA device %" PRId32
                        ", memory of another process)",
                        call, cuda_error_name(r), static_cast<int>(r), base, device.device_id);
}

}  // namespace hurray::detail

#endif  // HURRAY_WITH_CUDA

#endif  // HURRAY_SRC_DEVICE_CUDA_VMM_IPC_H_
