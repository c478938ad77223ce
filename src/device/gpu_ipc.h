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
constexpr uint32_t kGpuEventBytes = 64;      // CUipcEventHandle, hipIpcEventHandle_t

// What an export of device memory found: the opaque handle of the whole
// allocation (legacy IPC) or an fd of it (a CUDA VMM allocation), and where
// the handle's data lies in it.
struct GpuIpcExport {
  uint8_t handle[kGpuIpcHandleBytes];
  uint64_t alloc_size;          // bytes of the allocation (cuMemGetAddressRange)
  uint64_t data_offset;         // the handle's data address minus the allocation's base
  int vmm_fd;                   // >= 0: a VMM allocation's POSIX fd (kind 2, the caller's to close)
  uint8_t uuid[kGpuUuidBytes];  // the device's (device_uuid), filled by the caller
  // The interprocess event recorded on the caller's stream after the data's
  // producer work (ipc.md §6, what the consumer waits for): its IPC handle
  // for the descriptor, and the event itself, which the export keeps until
  // the receivers gave the reference back (destroy_event).
  uint8_t event_handle[kGpuEventBytes];
  void *event;  // CUevent / hipEvent_t; non-NULL once export_memory succeeded
  // The incarnation of the context `event` was made in (CUDA: of the
  // device's primary context; HIP: 0, no incarnations), for destroy_event.
  uint64_t event_context;
  // Stream-ordered pool memory (kinds 5 and 6; ipc.md §6): the pool the
  // allocation came from (NULL: not pool memory), with `handle` holding
  // cuMemPoolExportPointer's / hipMemPoolExportPointer's 64 bytes; the
  // pool's POSIX fd (cuMemPoolExportToShareableHandle /
  // hipMemPoolExportToShareableHandle; the caller's to close), or -1 when
  // `pool_fd_sent` (set by the caller, may be NULL) answered that the
  // receiver has the pool already (once per connection). `pool_epoch`: the
  // incarnation of the primary context the export ran in (CUDA; 0 for
  // HIP), set before `pool_fd_sent` is asked: a context reset destroys its
  // pools, and a pool made after it is another pool even where the driver
  // gives it the old handle.
  void *pool;
  int pool_fd;
  uint64_t pool_epoch;
  bool (*pool_fd_sent)(const void *pool, uint64_t epoch, void *ctx);
  void *pool_ctx;
};

// What a vendor's pool export (device/cuda/pool_ipc.h, device/hip/pool_ipc.h)
// found at an address.
enum class PoolFound {
  kNotPool,        // no pool memory (or a driver without the pool entry points)
  kExported,       // out->pool, handle (the pointer's export data), alloc_size,
                   // data_offset and, unless the caller's pool_fd_sent said it
                   // went already, out->pool_fd are set
  kNotExportable,  // memory of a pool without the POSIX-fd handle type (the
                   // device's default pool: cuMemAllocAsync / hipMallocAsync);
                   // nothing exported
};

// A VMM allocation mapped in this process by open_vmm.
struct GpuVmmMapping {
  void *base;       // the reserved and mapped range
  uint64_t size;    // its bytes
  uint64_t handle;  // CUmemGenericAllocationHandle of the import
};

struct GpuIpc {
  // For `data` on `device` (kDLCUDA / kDLROCM), in the device's primary
  // context (CUDA) / with the device set (HIP): finds the allocation holding
  // `data` and makes its IPC handle, then creates an interprocess event
  // (CU_EVENT_INTERPROCESS | CU_EVENT_DISABLE_TIMING / hipEventInterprocess |
  // hipEventDisableTiming), records it on `stream` (NULL: the legacy default
  // stream, CU_STREAM_LEGACY / HIP's null stream) and takes its IPC handle
  // (out->event, out->event_handle); no host wait. For a
  // CUDA VMM allocation created with CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR,
  // an fd of it instead (out->vmm_fd; -1 otherwise).
  // `stream_ordered`: the memory is known (from hurray_alloc) to come from a
  // stream-ordered pool, which legacy IPC cannot export: refused up front.
  // HURRAY_ERR_UNSUPPORTED_DEVICE when the memory cannot be exported.
  // On failure nothing is left (no event, no fd).
  int32_t (*export_memory)(hurray_device device, const void *data, bool stream_ordered,
                           void *stream, GpuIpcExport *out);
  // Destroys an event export_memory made (cuEventDestroy / hipEventDestroy),
  // `context` its out->event_context: nothing is called when that
  // incarnation of the CUDA primary context was reset since (the reset
  // destroyed the event with it). Release path: any thread, never sets the
  // message.
  void (*destroy_event)(hurray_device device, void *event, uint64_t context);
  // Opens another process's IPC event from its handle
  // (cuIpcOpenEventHandle / hipIpcOpenEventHandle, `device` current), makes
  // `stream` (NULL: the legacy default stream) wait for it on the device
  // (cuStreamWaitEvent / hipStreamWaitEvent: no host wait) and destroys
  // the opened event. HURRAY_ERR_IPC when the handle cannot be opened,
  // HURRAY_ERR_DEVICE when the wait cannot be queued.
  int32_t (*wait_event)(hurray_device device, const uint8_t *handle, void *stream);
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
  // Kinds 5 and 6, in `device`'s primary context (CUDA) / with `device`
  // current (HIP); HURRAY_ERR_UNSUPPORTED_DEVICE where the driver lacks the
  // pool entry points: imports the pool behind `fd`
  // (cuMemPoolImportFromShareableHandle / hipMemPoolImportFromShareableHandle;
  // `fd` left open, the caller closes it) and destroys such an import
  // (cuMemPoolDestroy / hipMemPoolDestroy, release path as close); imports
  // one allocation of an imported pool from its 64 bytes of export data
  // (cuMemPoolImportPointer / hipMemPoolImportPointer) and frees it again
  // (cuMemFree / hipFree, which return once the free is done: the importer
  // frees before the exporter, the ImportPointer rule of both references;
  // release path as close).
  // Incarnations: open_pool's *context is the incarnation of the context
  // the import was made in (CUDA: of the device's primary context, as
  // event_context; HIP: 0, no incarnations). cuDevicePrimaryCtxReset
  // destroys the pools imported in the context and the pointers imported
  // from them, so close_pool and close_pool_pointer, given that
  // incarnation, call nothing once it is dead (a pointer's address may
  // belong to a new allocation by then), and pool_context_alive tells
  // whether it still lives, without retaining the context again (HIP:
  // always true). The importer imports again where it is not.
  int32_t (*open_pool)(hurray_device device, int fd, void **pool, uint64_t *context);
  void (*close_pool)(hurray_device device, void *pool, uint64_t context);
  int32_t (*open_pool_pointer)(hurray_device device, void *pool, const uint8_t *data, void **ptr);
  void (*close_pool_pointer)(hurray_device device, void *ptr, uint64_t context);
  // hurray_alloc_async with HURRAY_ALLOC_SHAREABLE: `nbytes` stream-ordered
  // on `stream` (a stream of `device`) from libhurray's IPC-capable pool of
  // that device (made on first use with cuMemPoolCreate and
  // CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR / hipMemPoolCreate and
  // hipMemHandleTypePosixFileDescriptor, kept for the process's life; for
  // CUDA made again in a new incarnation of the primary context, as
  // cuDevicePrimaryCtxReset destroyed the old one);
  // *mem is freed by the backend's deallocate like other stream-ordered
  // memory (cuMemFreeAsync / hipFreeAsync on `stream`).
  int32_t (*alloc_shareable)(hurray_device device, uint64_t nbytes, void *stream,
                             DeviceMemory *mem);
  // The base address of the allocation holding `data` on `device`
  // (cuMemGetAddressRange / hipMemGetAddressRange, in the device's primary
  // context / with the device set) and its *bytes: what a set message
  // groups its GPU handles by (ipc.md §10), so that one allocation is exported and opened
  // once. HURRAY_OK with *base set, or a failure (the caller then groups
  // by `data` itself; the message it set is not the caller's).
  int32_t (*address_range)(hurray_device device, const void *data, uintptr_t *base,
                           uint64_t *bytes);
  // Whether incarnation `context` (open_pool's) of `device`'s context is
  // still the live one (above).
  bool (*pool_context_alive)(hurray_device device, uint64_t context);
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
