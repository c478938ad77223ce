// SPDX-License-Identifier: Apache-2.0
// CUDA device memory across processes with legacy IPC handles
// (device/gpu_ipc.h, docs/impl/ipc.md §6): cuIpcGetMemHandle of the
// allocation that holds the data, opened by the receiver with
// cuIpcOpenMemHandle in the device's primary context; a VMM allocation
// (cuMemCreate + cuMemMap) goes as a POSIX fd instead (vmm_ipc.cc, kind 2).
#if defined(HURRAY_WITH_CUDA)

#include <unistd.h>

#include <cinttypes>
#include <cstring>

#include "common/diagnostics.h"
#include "common/error.h"
#include "device/cuda/driver.h"
#include "device/cuda/pool_ipc.h"
#include "device/cuda/vendor.h"
#include "device/cuda/vmm_ipc.h"
#include "device/gpu_ipc.h"

namespace hurray::detail {
namespace {

static_assert(sizeof(CUipcMemHandle) == kGpuIpcHandleBytes, "CUipcMemHandle is 64 bytes");
static_assert(sizeof(CUipcEventHandle) == kGpuEventBytes, "CUipcEventHandle is 64 bytes");

// NULL names the legacy default stream (CU_STREAM_LEGACY), as everywhere in
// libhurray; 2 is CU_STREAM_PER_THREAD itself.
CUstream stream_of(void *stream) {
  return stream == nullptr ? CU_STREAM_LEGACY : static_cast<CUstream>(stream);
}

constexpr uint32_t kFreeOnStream = 1;  // cuda.cc's order of cuMemAllocAsync memory

int32_t missing(const CudaDriver &d) {
  if (d.ipc_get_mem_handle != nullptr && d.ipc_open_mem_handle != nullptr &&
      d.ipc_close_mem_handle != nullptr && d.mem_get_address_range != nullptr &&
      d.ipc_get_event_handle != nullptr && d.ipc_open_event_handle != nullptr) {
    return HURRAY_OK;
  }
  return fail(HURRAY_ERR_UNSUPPORTED_DEVICE,
              "this CUDA driver lacks the legacy IPC entry points (cuIpcGetMemHandle, "
              "cuIpcOpenMemHandle, cuIpcCloseMemHandle, cuMemGetAddressRange, "
              "cuIpcGetEventHandle, cuIpcOpenEventHandle)");
}

void destroy_event(hurray_device device, void *event, uint64_t context) {
  if (cuda_forked_child()) return count_fork_skip();
  // A reset of the primary context since the export destroyed the event
  // with it: nothing to call, and the context is not retained again.
  const CudaDriver *drv = loaded_cuda_driver();  // loaded: it made `event`
  bool alive = true;
  if (drv != nullptr &&
      primary_context_alive(*drv, device.device_id, context, &alive) == CUDA_SUCCESS && !alive) {
    return;
  }
  release_in_primary(device, event, [&](const CudaDriver &d, const char **call) {
    *call = "cuEventDestroy";
    return d.event_destroy(static_cast<CUevent>(event));
  });
}

int32_t export_memory(hurray_device device, const void *data, bool stream_ordered, void *stream,
                      GpuIpcExport *out) {
  const CudaDriver *d = cuda_driver();
  if (d == nullptr) return HURRAY_ERR_UNSUPPORTED_DEVICE;
  if (stream_ordered && !d->pool_ipc()) {
    return fail(HURRAY_ERR_UNSUPPORTED_DEVICE,
                "this CUDA memory comes from a stream-ordered pool (cuMemAllocAsync: hurray_alloc "
                "with a stream), and this CUDA driver lacks the memory-pool IPC entry points "
                "(cuMemPoolExportToShareableHandle, cuMemPoolExportPointer, ...); allocate it "
                "without a stream to send it to another process");
  }
  int32_t st = missing(*d);
  if (st != HURRAY_OK) return st;
  out->pool = nullptr;
  out->pool_fd = -1;
  PoolFound pool = PoolFound::kNotPool;
  bool pool_failed = false;  // pool memory whose export failed
  CUresult got = CUDA_SUCCESS;
  VmmFound vmm = VmmFound::kNotVmm;
  bool vmm_failed = false;  // a VMM allocation whose export failed
  const char *call = "cuMemRetainAllocationHandle";
  CUevent ev = nullptr;
  // The stream the event goes on, asked first (allowed during a capture):
  // recording on a capturing stream would capture the record instead of
  // making it, and using the legacy stream while a blocking stream of the
  // context captures is prohibited and invalidates that capture (CUDA
  // Programming Guide, "CUDA Graphs", "Prohibited and Unhandled
  // Operations"); either is refused before anything is made (gpu.md §4).
  Capture capture = Capture::kNone;
  // The incarnation of the context, which names the pool together with its
  // handle (gpu_ipc.h, pool_epoch), is set before the lambda runs.
  st = Cuda::with_device(
      device.device_id, &call,
      [&](const CudaDriver &drv) {
        call = "cuStreamIsCapturing";
        CUresult r = CudaTraits::stream_capture(drv, stream_of(stream), &capture);
        if (r != CUDA_SUCCESS || capture != Capture::kNone) return r;
        call = "cuMemRetainAllocationHandle";
        r = vmm_export(drv, data, out, &call, &vmm);
        if (r != CUDA_SUCCESS) {
          vmm_failed = true;
          return got = r;
        }
        if (vmm == VmmFound::kNoFdType || vmm == VmmFound::kNotWholeAllocation) return r;
        if (vmm == VmmFound::kNotVmm) {
          // Stream-ordered pool memory (kinds 5, 6: pool_ipc.cc).
          r = CudaPools::export_memory(drv, data, out, &call, &pool);
          if (r != CUDA_SUCCESS) {
            pool_failed = true;
            return got = r;
          }
          if (pool == PoolFound::kNotExportable) return r;
        }
        if (vmm == VmmFound::kNotVmm && pool == PoolFound::kNotPool) {
          call = "cuMemGetAddressRange";
          CUdeviceptr base = 0;
          size_t size = 0;
          r = drv.mem_get_address_range(&base, &size, dptr(data));
          if (r != CUDA_SUCCESS) return got = r;
          call = "cuIpcGetMemHandle";
          CUipcMemHandle h;
          r = drv.ipc_get_mem_handle(&h, base);
          if (r != CUDA_SUCCESS) return got = r;
          std::memcpy(out->handle, h.reserved, kGpuIpcHandleBytes);
          out->alloc_size = size;
          out->data_offset = static_cast<uint64_t>(dptr(data) - base);
        }
        // What the receiver waits for (ipc.md §6): an interprocess event
        // recorded on the caller's stream, no host wait.
        call = "cuEventCreate";
        r = drv.event_create(&ev, CU_EVENT_INTERPROCESS | CU_EVENT_DISABLE_TIMING);
        if (r != CUDA_SUCCESS) {
          ev = nullptr;
          return r;
        }
        call = "cuEventRecord";
        r = drv.event_record(ev, stream_of(stream));
        if (r != CUDA_SUCCESS) return r;
        call = "cuIpcGetEventHandle";
        CUipcEventHandle eh;
        r = drv.ipc_get_event_handle(&eh, ev);
        if (r != CUDA_SUCCESS) return r;
        std::memcpy(out->event_handle, eh.reserved, kGpuEventBytes);
        return r;
      },
      &out->pool_epoch);
  if (st == HURRAY_OK) {
    out->event = ev;
    out->event_context = out->pool_epoch;  // the same incarnation
  } else if (ev != nullptr) {
    destroy_event(device, ev, out->pool_epoch);  // nothing is sent
  }
  if (st != HURRAY_OK && out->vmm_fd >= 0) {
    // Exported, but leaving the context failed: nothing is sent.
    close(out->vmm_fd);
    out->vmm_fd = -1;
  }
  if (st != HURRAY_OK && out->pool_fd >= 0) {
    close(out->pool_fd);
    out->pool_fd = -1;
  }
  if (st == HURRAY_OK && capture != Capture::kNone) {
    return fail(HURRAY_ERR_INVALID_ARGUMENT,
                "the IPC event that orders the receiver cannot be recorded on %s of CUDA device "
                "%" PRId32
                " now: %s; nothing was exported (export before or after the capture, or name "
                "another stream with hurray_ipc_export_async)",
                stream == nullptr ? "the legacy default stream" : "the stream", device.device_id,
                capture == Capture::kImplicit
                    ? "a blocking stream of the device is being captured into a graph, and CUDA "
                      "prohibits using the legacy stream then (it would break that capture)"
                    : "the stream is being captured into a graph, where a record stands for a "
                      "graph node not yet launched, not for the work queued on it");
  }
  if (st == HURRAY_OK && pool == PoolFound::kNotExportable) {
    return CudaPools::refuse_not_exportable(device, data);
  }
  if (st != HURRAY_OK && got != CUDA_SUCCESS && got != CUDA_ERROR_OUT_OF_MEMORY && pool_failed) {
    return fail(HURRAY_ERR_UNSUPPORTED_DEVICE,
                "%p on CUDA device %" PRId32
                " is stream-ordered pool memory that cannot be exported (%s failed with %s)",
                data, device.device_id, call, cuda_error_name(got));
  }
  if (st == HURRAY_OK && vmm == VmmFound::kNoFdType) {
    return fail(HURRAY_ERR_UNSUPPORTED_DEVICE,
                "%p on CUDA device %" PRId32
                " is a CUDA VMM allocation (cuMemCreate) made without a shareable handle type: "
                "create it with CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR in "
                "CUmemAllocationProp::requestedHandleTypes to send it to another process",
                data, device.device_id);
  }
  if (st == HURRAY_OK && vmm == VmmFound::kNotWholeAllocation) {
    return vmm_refuse_partial_mapping(device, data);
  }
  if (st != HURRAY_OK && got != CUDA_SUCCESS && got != CUDA_ERROR_OUT_OF_MEMORY && vmm_failed) {
    return fail(HURRAY_ERR_UNSUPPORTED_DEVICE,
                "%p on CUDA device %" PRId32
                " is a CUDA VMM allocation that cannot be exported as a POSIX fd (%s failed with "
                "%s)",
                data, device.device_id, call, cuda_error_name(got));
  }
  if (st != HURRAY_OK && got != CUDA_SUCCESS && got != CUDA_ERROR_OUT_OF_MEMORY) {
    // The memory is not exportable (pool memory, memory opened from
    // another process, not the driver's memory at all): say so, with the
    // driver's answer.
    return fail(HURRAY_ERR_UNSUPPORTED_DEVICE,
                "%p on CUDA device %" PRId32
                " cannot be exported with legacy CUDA IPC (%s failed with %s): only cuMemAlloc "
                "memory (hurray_alloc on kDLCUDA without a stream) and VMM allocations made "
                "with CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR can be sent to another process; "
                "device memory is never copied through the host for it",
                data, device.device_id, call, cuda_error_name(got));
  }
  return st;
}

void close_mapping(hurray_device device, void *base);

int32_t open_mapping(hurray_device device, const uint8_t *handle, void **base) {
  const CudaDriver *d = cuda_driver();
  if (d == nullptr) return HURRAY_ERR_UNSUPPORTED_DEVICE;
  int32_t st = missing(*d);
  if (st != HURRAY_OK) return st;
  CUipcMemHandle h;
  std::memcpy(h.reserved, handle, kGpuIpcHandleBytes);
  CUdeviceptr p = 0;
  const char *call = "cuIpcOpenMemHandle";
  st = Cuda::with_device(device.device_id, &call, [&](const CudaDriver &drv) {
    return drv.ipc_open_mem_handle(&p, h, CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS);
  });
  if (st == HURRAY_OK) {
    *base = hptr(p);
  } else if (p != 0) {
    // Opened, but giving the thread its context back failed: undone here
    // (with_device's contract).
    close_mapping(device, hptr(p));
  }
  return st;
}

void close_mapping(hurray_device device, void *base) {
  release_in_primary(device, base, [&](const CudaDriver &d, const char **call) {
    *call = "cuIpcCloseMemHandle";
    return d.ipc_close_mem_handle(dptr(base));
  });
}

bool is_stream_ordered(const DeviceMemory &mem) { return mem.order == kFreeOnStream; }

// The receiver's ordering (ipc.md §6, what the consumer waits for): a wait
// queued on `stream`, or, while that stream cannot be used (it is the
// legacy stream and a blocking stream of the context captures, which
// CUDA_ERROR_STREAM_CAPTURE_IMPLICIT prohibits; or it is itself being
// captured, where the wait would become a graph node naming an event
// destroyed at once), a host wait on the event: a message may arrive at any
// time, so it is neither refused (hurray_ipc_recv has read it already) nor
// left unordered, and another thread's capture is never touched.
int32_t wait_event(hurray_device device, const uint8_t *handle, void *stream) {
  const CudaDriver *d = cuda_driver();
  if (d == nullptr) return HURRAY_ERR_UNSUPPORTED_DEVICE;
  int32_t st = missing(*d);
  if (st != HURRAY_OK) return st;
  CUipcEventHandle eh;
  std::memcpy(eh.reserved, handle, kGpuEventBytes);
  CUevent ev = nullptr;
  CUresult open_error = CUDA_SUCCESS;
  Capture capture = Capture::kNone;
  bool no_host_wait = false;
  const char *call = "cuIpcOpenEventHandle";
  st = Cuda::with_device(device.device_id, &call, [&](const CudaDriver &drv) {
    CUresult r = drv.ipc_open_event_handle(&ev, eh);
    if (r != CUDA_SUCCESS) {
      ev = nullptr;
      return open_error = r;
    }
    // Asked first (allowed during a capture).
    call = "cuStreamIsCapturing";
    r = CudaTraits::stream_capture(drv, stream_of(stream), &capture);
    if (r == CUDA_SUCCESS && capture == Capture::kNone) {
      // A wait on the device, queued: the host goes on at once.
      call = "cuStreamWaitEvent";
      r = drv.stream_wait_event(stream_of(stream), ev, 0);
    } else if (r == CUDA_SUCCESS && drv.event_synchronize != nullptr) {
      // In the relaxed capture mode (the scope's): no capture forbids it.
      call = "cuEventSynchronize";
      r = drv.event_synchronize(ev);
    } else if (r == CUDA_SUCCESS) {
      no_host_wait = true;
    }
    const CUresult destroyed = drv.event_destroy(ev);
    ev = nullptr;
    if (r == CUDA_SUCCESS && destroyed != CUDA_SUCCESS) {
      call = "cuEventDestroy";
      r = destroyed;
    }
    return r;
  });
  if (open_error != CUDA_SUCCESS) {
    return fail(HURRAY_ERR_IPC,
                "the message's IPC event cannot be opened on CUDA device %" PRId32
                " (cuIpcOpenEventHandle failed with %s): the descriptor's event handle is not "
                "one of another live process's events",
                device.device_id, cuda_error_name(open_error));
  }
  if (st == HURRAY_OK && no_host_wait) {
    return fail(HURRAY_ERR_INVALID_ARGUMENT,
                "the import cannot be ordered after the sender's work on CUDA device %" PRId32
                " now: %s, and this driver lacks cuEventSynchronize; import after the capture",
                device.device_id,
                capture == Capture::kImplicit
                    ? "a blocking stream of the device is being captured, which prohibits "
                      "using the legacy default stream"
                    : "the stream named is being captured into a graph");
  }
  return st;
}

int32_t device_count(int32_t *count) {
  const CudaDriver *d = cuda_driver();
  if (d == nullptr) return HURRAY_ERR_UNSUPPORTED_DEVICE;
  *count = d->device_count;
  return HURRAY_OK;
}

// cuDeviceGet + cuDeviceGetUuid_v2; no context needed.
int32_t device_uuid(int32_t ordinal, uint8_t *uuid) {
  const CudaDriver *d = cuda_driver();
  if (d == nullptr) return HURRAY_ERR_UNSUPPORTED_DEVICE;
  if (d->device_get_uuid == nullptr) {
    return fail(HURRAY_ERR_UNSUPPORTED_DEVICE,
                "this CUDA driver lacks cuDeviceGetUuid, by which GPU memory names its device "
                "to another process");
  }
  CUdevice dev = 0;
  const char *call = "cuDeviceGet";
  CUresult r = d->device_get(&dev, ordinal);
  CUuuid u;
  if (r == CUDA_SUCCESS) {
    call = "cuDeviceGetUuid";
    r = d->device_get_uuid(&u, dev);
  }
  if (r == CUDA_SUCCESS) {
    std::memcpy(uuid, u.bytes, kGpuUuidBytes);
    return HURRAY_OK;
  }
  return fail(r == CUDA_ERROR_INVALID_DEVICE ? HURRAY_ERR_UNSUPPORTED_DEVICE : HURRAY_ERR_DEVICE,
              "%s for CUDA device %" PRId32 " failed with %s (%d)", call, ordinal,
              cuda_error_name(r), static_cast<int>(r));
}

int32_t address_range(hurray_device device, const void *data, uintptr_t *base, uint64_t *bytes) {
  const CudaDriver *d = cuda_driver();
  if (d == nullptr) return HURRAY_ERR_UNSUPPORTED_DEVICE;
  if (d->mem_get_address_range == nullptr) return HURRAY_ERR_UNSUPPORTED_DEVICE;
  const char *call = "cuMemGetAddressRange";
  CUdeviceptr b = 0;
  size_t size = 0;
  const int32_t st = Cuda::with_device(device.device_id, &call, [&](const CudaDriver &drv) {
    return drv.mem_get_address_range(&b, &size, dptr(data));
  });
  if (st == HURRAY_OK) {
    *base = static_cast<uintptr_t>(b);
    *bytes = size;
  }
  return st;
}

}  // namespace

extern const GpuIpc kCudaIpc;
const GpuIpc kCudaIpc = {&export_memory,
                         &destroy_event,
                         &wait_event,
                         &open_mapping,
                         &close_mapping,
                         &vmm_open,
                         &vmm_close,
                         &is_stream_ordered,
                         &device_count,
                         &device_uuid,
                         &CudaPools::open,
                         &CudaPools::close_pool,
                         &CudaPools::open_pointer,
                         &CudaPools::close_pointer,
                         &CudaPools::alloc_shareable,
                         &address_range,
                         &CudaPools::context_alive};

}  // namespace hurray::detail

#endif  // HURRAY_WITH_CUDA
