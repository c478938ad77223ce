// SPDX-License-Identifier: Apache-2.0
// Device memory across processes with the vendors' legacy IPC handles
// (cuIpcGetMemHandle / hipIpcGetMemHandle; docs/impl/ipc.md §6): what
// src/ipc/ asks of a GPU vendor to export and import kDLCUDA / kDLROCM
// memory. Implemented in device/cuda/ipc.cc and device/hip/ipc.cc; a vendor
// left out of the build answers HURRAY_ERR_UNSUPPORTED_DEVICE.
#ifndef HURRAY_SRC_DEVICE_GPU_IPC_H_
#define HURRAY_SRC_DEVICE_GPU_IPC_H_

#include <cstdint>

#include "device/backend.h"
#include "hurray/hurray.h"

namespace hurray::detail {

constexpr uint32_t kGpuIpcHandleBytes = 64;  // CUipcMemHandle, hipIpcMemHandle_t
constexpr uint32_t kGpuUuidBytes = 16;       // CUuuid, hipUUID

// What an export of device memory found: the opaque handle of the whole
// allocation (legacy IPC) or an fd of it (a CUDA VMM allocation), and where
// the handle's data lies in it.
struct GpuIpcExport {
  uint8_t handle[kGpuIpcHandleBytes];
  uint64_t alloc_size;          // bytes of the allocation (cuMemGetAddressRange)
  uint64_t data_offset;         // the handle's data address minus the allocation's base
  int vmm_fd;                   // >= 0: a VMM allocation's POSIX fd (kind 2, the caller's to close)
  uint8_t uuid[kGpuUuidBytes];  // the device's (device_uuid), filled by the caller
};

// A VMM allocation mapped in this process by open_vmm.
struct GpuVmmMapping {
  void *base;       // the reserved and mapped range
  uint64_t size;    // its bytes
  uint64_t handle;  // CUmemGenericAllocationHandle of the import
};

struct GpuIpc {
  // For `data` on `device` (kDLCUDA / kDLROCM): synchronises the device's
  // work (cuCtxSynchronize in its primary context / hipDeviceSynchronize),
  // finds the allocation holding `data` and makes its IPC handle; for a
  // CUDA VMM allocation created with CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
  // an fd of it instead (out->vmm_fd; -1 otherwise).
  // `stream_ordered`: the memory is known (from hurray_alloc) to come from a
  // stream-ordered pool, which legacy IPC cannot export: refused up front.
  // HURRAY_ERR_UNSUPPORTED_DEVICE when the memory cannot be exported.
  int32_t (*export_memory)(hurray_device device, const void *data, bool stream_ordered,
                           GpuIpcExport *out);
  // Maps another process's allocation from its handle, in `device`'s
  // primary context (CUDA, with CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS) / with
  // `device` current (HIP); *base receives its address here.
  int32_t (*open)(hurray_device device, const uint8_t *handle, void **base);
  // Unmaps what `open` returned. Release path: any thread, never sets the
  // message (failures are counted in the diagnostics).
  void (*close)(hurray_device device, void *base);
  // Kind 2 (CUDA only; NULL for HIP): imports the VMM allocation behind `fd`
  // (left open: the caller closes it) and maps its `size` bytes read-write
  // for `device`, in its primary context; every step undone on failure.
  int32_t (*open_vmm)(hurray_device device, int fd, uint64_t size, GpuVmmMapping *out);
  // Undoes open_vmm (unmap, free the range, release the handle). Release
  // path, as close.
  void (*close_vmm)(hurray_device device, const GpuVmmMapping &m);
  // Whether hurray_alloc memory `mem` of this vendor came from a
  // stream-ordered pool (cuMemAllocAsync / hipMallocAsync).
  bool (*is_stream_ordered)(const DeviceMemory &mem);
  // The devices this process sees (cuDeviceGetCount / hipGetDeviceCount at
  // load) and the 16-byte UUID of ordinal `ordinal` (cuDeviceGetUuid_v2 /
  // hipDeviceGetUuid): what names a GPU across processes, whose ordinals
  // differ (CUDA_VISIBLE_DEVICES / HIP_VISIBLE_DEVICES; ipc.md §6.1).
  // HURRAY_ERR_UNSUPPORTED_DEVICE when the driver lacks the entry point or
  // the ordinal is not a device; HURRAY_ERR_DEVICE when the driver fails.
  int32_t (*device_count)(int32_t *count);
  int32_t (*device_uuid)(int32_t ordinal, uint8_t *uuid);
};

// "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx" (the drivers' spelling); `out`
// holds at least 41 bytes.
void format_gpu_uuid(const uint8_t *uuid, char *out);

// This process's ordinal of the GPU with `uuid` (loops over the devices'
// UUIDs); HURRAY_ERR_UNSUPPORTED_DEVICE with a message naming the UUID when
// no device of this process has it.
int32_t gpu_ordinal_of(const GpuIpc &ipc, int32_t device_type, const uint8_t *uuid,
                       int32_t *ordinal);

// The vendor for kDLCUDA or kDLROCM memory; nullptr with
// HURRAY_ERR_UNSUPPORTED_DEVICE set for any other type or a vendor left out
// of the build.
const GpuIpc *gpu_ipc_for(int32_t device_type);

}  // namespace hurray::detail

#endif  // HURRAY_SRC_DEVICE_GPU_IPC_H_
