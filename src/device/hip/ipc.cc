// SPDX-License-Identifier: Apache-2.0
// HIP device memory across processes with IPC handles (device/gpu_ipc.h,
// docs/impl/ipc.md §6): hipIpcGetMemHandle of the allocation that holds the
// data, opened by the receiver with hipIpcOpenMemHandle with the device
// current; or, for memory of an IPC-capable stream-ordered pool, the pool's
// fd and the pointer's export data (kinds 5 and 6, pool_ipc.cc).
#if defined(HURRAY_WITH_HIP)

#include <unistd.h>

#include <cinttypes>
#include <cstring>

#include "common/diagnostics.h"
#include "common/error.h"
#include "device/gpu_ipc.h"
#include "device/hip/pool_ipc.h"
#include "device/hip/runtime.h"
#include "device/hip/vendor.h"

namespace hurray::detail {
namespace {

static_assert(sizeof(hipIpcMemHandle_t) == kGpuIpcHandleBytes, "hipIpcMemHandle_t is 64 bytes");
static_assert(sizeof(hipIpcEventHandle_t) == kGpuEventBytes, "hipIpcEventHandle_t is 64 bytes");

int32_t missing(const HipRuntime &r) {
  if (r.ipc_get_mem_handle != nullptr && r.ipc_open_mem_handle != nullptr &&
      r.ipc_close_mem_handle != nullptr && r.mem_get_address_range != nullptr &&
      r.ipc_get_event_handle != nullptr && r.ipc_open_event_handle != nullptr) {
    return HURRAY_OK;
  }
  return fail(HURRAY_ERR_UNSUPPORTED_DEVICE,
              "%s lacks the HIP IPC entry points (hipIpcGetMemHandle, hipIpcOpenMemHandle, "
              "hipIpcCloseMemHandle, hipMemGetAddressRange, hipIpcGetEventHandle, "
              "hipIpcOpenEventHandle)",
              r.path);
}

// HIP has no context incarnations (hip/vendor.h): `context` is 0.
void destroy_event(hurray_device device, void *event, uint64_t) {
  release_with_device(device, event, "an IPC export's event",
                      [&](const HipRuntime &r, const char **call) {
                        *call = "hipEventDestroy";
                        return r.event_destroy(static_cast<hipEvent_t>(event));
                      });
}

int32_t export_memory(hurray_device device, const void *data, bool stream_ordered, void *stream,
                      GpuIpcExport *out) {
  const HipRuntime *rt = hip_runtime();
  if (rt == nullptr) return HURRAY_ERR_UNSUPPORTED_DEVICE;
  if (stream_ordered && !rt->pool_ipc()) {
    return fail(HURRAY_ERR_UNSUPPORTED_DEVICE,
                "this HIP memory comes from a stream-ordered pool (hipMallocAsync: hurray_alloc "
                "with a stream), and %s lacks the memory-pool IPC entry points "
                "(hipMemPoolExportToShareableHandle, hipMemPoolExportPointer, ...); allocate it "
                "without a stream to send it to another process",
                rt->path);
  }
  // hurray_alloc memory of the device's default pool (hipMallocAsync):
  // refused before any call, whether or not the runtime answers
  // HIP_POINTER_ATTRIBUTE_MEMPOOL_HANDLE (pool_ipc.h).
  if (stream_ordered) return HipPools::refuse_not_exportable(device, data);
  int32_t st = missing(*rt);
  if (st != HURRAY_OK) return st;
  out->pool = nullptr;
  out->pool_fd = -1;
  PoolFound pool = PoolFound::kNotPool;
  bool pool_failed = false;  // pool memory whose export failed
  hipError_t got = hipSuccess;
  const char *call = "hipMemGetAddressRange";
  hipEvent_t ev = nullptr;
  // The stream the event goes on, asked first, as CUDA's export does
  // (cuda/ipc.cc): recording on a capturing stream would capture the
  // record, and using the null stream while a blocking stream of the
  // device captures is prohibited (hipErrorStreamCaptureImplicit) and would
  // break that capture; either is refused before anything is made.
  Capture capture = Capture::kNone;
  st = Hip::with_device(device.device_id, &call, [&](const HipRuntime &r) {
    call = "hipStreamIsCapturing";
    hipError_t e = HipTraits::stream_capture(r, stream, &capture);
    if (e != hipSuccess || capture != Capture::kNone) return e;
    // Stream-ordered pool memory (kinds 5, 6: pool_ipc.cc).
    call = "hipMemGetAddressRange";
    e = HipPools::export_memory(r, data, out, &call, &pool);
    if (e != hipSuccess) {
      pool_failed = true;
      return got = e;
    }
    if (pool == PoolFound::kNotExportable) return e;
    if (pool == PoolFound::kNotPool) {
      call = "hipMemGetAddressRange";
      hipDeviceptr_t base = nullptr;
      size_t size = 0;
      e = r.mem_get_address_range(&base, &size, const_cast<void *>(data));
      if (e != hipSuccess) return got = e;
      call = "hipIpcGetMemHandle";
      hipIpcMemHandle_t h;
      e = r.ipc_get_mem_handle(&h, base);
      if (e != hipSuccess) return got = e;
      std::memcpy(out->handle, &h, kGpuIpcHandleBytes);
      out->alloc_size = size;
      out->data_offset = static_cast<uint64_t>(reinterpret_cast<uintptr_t>(data) -
                                               reinterpret_cast<uintptr_t>(base));
    }
    // What the receiver waits for (ipc.md §6): an interprocess event
    // recorded on the caller's stream (NULL: the null stream), no host wait.
    call = "hipEventCreateWithFlags";
    e = r.event_create_with_flags(&ev, hipEventInterprocess | hipEventDisableTiming);
    if (e != hipSuccess) {
      ev = nullptr;
      return e;
    }
    call = "hipEventRecord";
    e = r.event_record(ev, static_cast<hipStream_t>(stream));
    if (e != hipSuccess) return e;
    call = "hipIpcGetEventHandle";
    hipIpcEventHandle_t eh;
    e = r.ipc_get_event_handle(&eh, ev);
    if (e != hipSuccess) return e;
    std::memcpy(out->event_handle, &eh, kGpuEventBytes);
    return e;
  });
  if (st == HURRAY_OK) {
    out->event = ev;
  } else if (ev != nullptr) {
    destroy_event(device, ev, 0);  // nothing is sent
  }
  if (st != HURRAY_OK && out->pool_fd >= 0) {
    close(out->pool_fd);
    out->pool_fd = -1;
  }
  if (st == HURRAY_OK && capture != Capture::kNone) {
    return fail(HURRAY_ERR_INVALID_ARGUMENT,
                "the IPC event that orders the receiver cannot be recorded on %s of HIP device "
                "%" PRId32
                " now: %s; nothing was exported (export before or after the capture, or name "
                "another stream with hurray_ipc_export_async)",
                stream == nullptr ? "the null stream" : "the stream", device.device_id,
                capture == Capture::kImplicit
                    ? "a blocking stream of the device is being captured into a graph, and HIP "
                      "prohibits using the null stream then (it would break that capture)"
                    : "the stream is being captured into a graph, where a record stands for a "
                      "graph node not yet launched, not for the work queued on it");
  }
  if (st == HURRAY_OK && pool == PoolFound::kNotExportable) {
    return HipPools::refuse_not_exportable(device, data);
  }
  if (st != HURRAY_OK && got != hipSuccess && got != hipErrorOutOfMemory && pool_failed) {
    return fail(HURRAY_ERR_UNSUPPORTED_DEVICE,
                "%p on HIP device %" PRId32
                " is stream-ordered pool memory that cannot be exported (%s failed with %s)",
                data, device.device_id, call, hip_error_name(got));
  }
  if (st != HURRAY_OK && got != hipSuccess && got != hipErrorOutOfMemory) {
    return fail(HURRAY_ERR_UNSUPPORTED_DEVICE,
                "%p on HIP device %" PRId32
                " cannot be exported with a HIP IPC handle (%s failed with %s): hipMalloc "
                "memory (hurray_alloc on kDLROCM without a stream) and memory of libhurray's "
                "IPC-capable pool (hurray_alloc_async with HURRAY_ALLOC_SHAREABLE) can be sent "
                "to another process, and memory of a pool made with "
                "hipMemHandleTypePosixFileDescriptor where the runtime answers "
                "HIP_POINTER_ATTRIBUTE_MEMPOOL_HANDLE; device memory is never copied through "
                "the host for it",
                data, device.device_id, call, hip_error_name(got));
  }
  return st;
}

int32_t open_mapping(hurray_device device, const uint8_t *handle, void **base) {
  const HipRuntime *rt = hip_runtime();
  if (rt == nullptr) return HURRAY_ERR_UNSUPPORTED_DEVICE;
  int32_t st = missing(*rt);
  if (st != HURRAY_OK) return st;
  hipIpcMemHandle_t h;
  std::memcpy(&h, handle, kGpuIpcHandleBytes);
  void *p = nullptr;
  const char *call = "hipIpcOpenMemHandle";
  st = Hip::with_device(device.device_id, &call, [&](const HipRuntime &r) {
    return r.ipc_open_mem_handle(&p, h, hipIpcMemLazyEnablePeerAccess);
  });
  if (st == HURRAY_OK) *base = p;
  return st;
}

void close_mapping(hurray_device device, void *base) {
  release_with_device(device, base, "memory of another process",
                      [base](const HipRuntime &r, const char **call) {
                        *call = "hipIpcCloseMemHandle";
                        return r.ipc_close_mem_handle(base);
                      });
}

int32_t wait_event(hurray_device device, const uint8_t *handle, void *stream) {
  const HipRuntime *rt = hip_runtime();
  if (rt == nullptr) return HURRAY_ERR_UNSUPPORTED_DEVICE;
  int32_t st = missing(*rt);
  if (st != HURRAY_OK) return st;
  hipIpcEventHandle_t eh;
  std::memcpy(&eh, handle, kGpuEventBytes);
  hipError_t open_error = hipSuccess;
  Capture capture = Capture::kNone;
  bool no_host_wait = false;
  const char *call = "hipIpcOpenEventHandle";
  st = Hip::with_device(device.device_id, &call, [&](const HipRuntime &r) {
    hipEvent_t ev = nullptr;
    hipError_t e = r.ipc_open_event_handle(&ev, eh);
    if (e != hipSuccess) return open_error = e;
    // As CUDA's (cuda/ipc.cc): a wait queued on the stream, or a host wait
    // on the event while the stream cannot be used (the null stream while
    // a blocking stream of the device captures, hipErrorStreamCaptureImplicit;
    // the stream itself capturing).
    call = "hipStreamIsCapturing";
    e = HipTraits::stream_capture(r, stream, &capture);
    if (e == hipSuccess && capture == Capture::kNone) {
      call = "hipStreamWaitEvent";
      e = r.stream_wait_event(static_cast<hipStream_t>(stream), ev, 0);
    } else if (e == hipSuccess && r.event_synchronize != nullptr) {
      call = "hipEventSynchronize";
      e = r.event_synchronize(ev);
    } else if (e == hipSuccess) {
      no_host_wait = true;
    }
    const hipError_t destroyed = r.event_destroy(ev);
    if (e == hipSuccess && destroyed != hipSuccess) {
      call = "hipEventDestroy";
      e = destroyed;
    }
    return e;
  });
  if (open_error != hipSuccess) {
    return fail(HURRAY_ERR_IPC,
                "the message's IPC event cannot be opened on HIP device %" PRId32
                " (hipIpcOpenEventHandle failed with %s): the descriptor's event handle is not "
                "one of another live process's events",
                device.device_id, hip_error_name(open_error));
  }
  if (st == HURRAY_OK && no_host_wait) {
    return fail(HURRAY_ERR_INVALID_ARGUMENT,
                "the import cannot be ordered after the sender's work on HIP device %" PRId32
                " now: %s, and %s lacks hipEventSynchronize; import after the capture",
                device.device_id,
                capture == Capture::kImplicit
                    ? "a blocking stream of the device is being captured, which prohibits "
                      "using the null stream"
                    : "the stream named is being captured into a graph",
                rt->path);
  }
  return st;
}

// hip.cc's DeviceMemory for hipMallocAsync memory: order 0 with a stream.
bool is_stream_ordered(const DeviceMemory &mem) { return mem.order == 0 && mem.stream != nullptr; }

int32_t device_count(int32_t *count) {
  const HipRuntime *rt = hip_runtime();
  if (rt == nullptr) return HURRAY_ERR_UNSUPPORTED_DEVICE;
  *count = rt->device_count;
  return HURRAY_OK;
}

// hipDeviceGet + hipDeviceGetUuid; no device made current.
int32_t device_uuid(int32_t ordinal, uint8_t *uuid) {
  const HipRuntime *rt = hip_runtime();
  if (rt == nullptr) return HURRAY_ERR_UNSUPPORTED_DEVICE;
  if (rt->device_get == nullptr || rt->device_get_uuid == nullptr) {
    return fail(HURRAY_ERR_UNSUPPORTED_DEVICE,
                "%s lacks hipDeviceGet / hipDeviceGetUuid, by which GPU memory names its device "
                "to another process",
                rt->path);
  }
  hipDevice_t dev = 0;
  const char *call = "hipDeviceGet";
  hipError_t e = rt->device_get(&dev, ordinal);
  hipUUID u;
  if (e == hipSuccess) {
    call = "hipDeviceGetUuid";
    e = rt->device_get_uuid(&u, dev);
  }
  if (e == hipSuccess) {
    std::memcpy(uuid, u.bytes, kGpuUuidBytes);
    return HURRAY_OK;
  }
  return fail(e == hipErrorInvalidDevice ? HURRAY_ERR_UNSUPPORTED_DEVICE : HURRAY_ERR_DEVICE,
              "%s for HIP device %" PRId32 " failed with %s (%d)", call, ordinal, hip_error_name(e),
              static_cast<int>(e));
}

int32_t address_range(hurray_device device, const void *data, uintptr_t *base, uint64_t *bytes) {
  const HipRuntime *rt = hip_runtime();
  if (rt == nullptr || rt->mem_get_address_range == nullptr) return HURRAY_ERR_UNSUPPORTED_DEVICE;
  const char *call = "hipMemGetAddressRange";
  hipDeviceptr_t b = nullptr;
  size_t size = 0;
  const int32_t st = Hip::with_device(device.device_id, &call, [&](const HipRuntime &r) {
    return r.mem_get_address_range(&b, &size, const_cast<void *>(data));
  });
  if (st == HURRAY_OK) {
    *base = reinterpret_cast<uintptr_t>(b);
    *bytes = size;
  }
  return st;
}

}  // namespace

extern const GpuIpc kHipIpc;
const GpuIpc kHipIpc = {&export_memory,
                        &destroy_event,
                        &wait_event,
                        &open_mapping,
                        &close_mapping,
                        nullptr,
                        nullptr,
                        &is_stream_ordered,
                        &device_count,
                        &device_uuid,
                        &HipPools::open,
                        &HipPools::close_pool,
                        &HipPools::open_pointer,
                        &HipPools::close_pointer,
                        &HipPools::alloc_shareable,
                        &address_range,
                        &HipPools::context_alive};

}  // namespace hurray::detail

#endif  // HURRAY_WITH_HIP
