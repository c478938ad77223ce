// SPDX-License-Identifier: Apache-2.0
// hurray_alloc: checks the request, then allocates through the device type's
// backend table (device/backend.h, the CPU's included); and compact_handle.
#include "api/alloc.h"

#include <cinttypes>
#include <cstdlib>
#include <cstring>

#include "checking/checking.h"
#include "common/error.h"
#include "device/backend.h"
#include "device/gpu_ipc.h"
#include "device/memfd_block.h"
#include "handle/handle.h"
#include "handle/layout.h"

namespace hurray::detail {
namespace {

// Host bookkeeping of device memory: what to free, where, and the dims.
struct DeviceBlock {
  const DeviceBackend *backend;
  hurray_device device;
  DeviceMemory mem;
  int64_t dims[1];  // shape then strides, 2 * ndim entries (flexible tail)
};

void device_release(void *block) {
  auto *b = static_cast<DeviceBlock *>(block);
  if (b->mem.ptr != nullptr) b->backend->deallocate(b->device, b->mem);
  std::free(b);
}

constexpr uint64_t kKnownFlags =
    HURRAY_FLAG_READ_ONLY | HURRAY_FLAG_IS_COPIED | HURRAY_FLAG_SUBBYTE_PADDED;
// Bits 32..63 are allocation options, never copied into the handle.
constexpr uint64_t kOptionBits = ~uint64_t{0} << 32;
constexpr uint64_t kKnownOptions = HURRAY_ALLOC_SHAREABLE;

}  // namespace

const DeviceMemory *device_memory_of(const hurray_buffer &h) {
  if (h.release_fn != &device_release || h.user_data == nullptr) return nullptr;
  return &static_cast<const DeviceBlock *>(h.user_data)->mem;
}

int32_t alloc_on(hurray_device device, hurray_dtype dtype, int32_t ndim, const int64_t *shape,
                 uint64_t flags, void *stream, int32_t stream_device, hurray_buffer *out) {
  if (out == nullptr) return fail(HURRAY_ERR_INVALID_ARGUMENT, "out is NULL");
  if ((flags & ~(kKnownFlags | kKnownOptions)) != 0) {
    return fail(HURRAY_ERR_INVALID_ARGUMENT, "flags 0x%" PRIx64 " has reserved bits set", flags);
  }
  const bool shareable = (flags & HURRAY_ALLOC_SHAREABLE) != 0;
  flags &= ~kOptionBits;
  // Check the request as the compact tensor it will become; any non-NULL
  // data pointer stands in for the memory not yet allocated.
  static char placeholder;
  Desc d{&placeholder, 0, device.device_type, device.device_id, dtype, ndim, shape, nullptr, flags};
  hurray_extent e;
  int32_t st = check_desc(d, "request", false, &e);
  if (st != HURRAY_OK) return st;
  const uint64_t nbytes = static_cast<uint64_t>(e.highest);

  const GpuIpc *pool_ipc = nullptr;
  if (shareable) {
    if (device.device_type == HURRAY_DEVICE_CPU && device.device_id == 0) {
      return shareable_cpu_alloc(dtype, ndim, shape, flags, nbytes, out);
    }
    // CUDA and ROCm: stream-ordered memory of libhurray's IPC-capable pool
    // (docs/impl/ipc.md §6, kinds 5 and 6).
    if (device.device_type == HURRAY_DEVICE_CUDA || device.device_type == HURRAY_DEVICE_ROCM) {
      pool_ipc = gpu_ipc_for(device.device_type);
      if (pool_ipc == nullptr) return HURRAY_ERR_UNSUPPORTED_DEVICE;
    }
  }
  if (shareable && (pool_ipc == nullptr || pool_ipc->alloc_shareable == nullptr)) {
    return fail(HURRAY_ERR_UNSUPPORTED_DEVICE,
                "HURRAY_ALLOC_SHAREABLE on %s device %" PRId32
                " is not supported yet (shareable memory is a memfd on kDLCPU device 0; "
                "shareable CUDA and ROCm memory is hurray_alloc_async's, docs/impl/ipc.md §6)",
                device_type_name(device.device_type), device.device_id);
  }

  const DeviceBackend *a = backend_for(device.device_type);
  if (a == nullptr) return HURRAY_ERR_UNSUPPORTED_DEVICE;
  const size_t meta = sizeof(DeviceBlock) + sizeof(int64_t) * (2 * static_cast<size_t>(ndim));
  auto *b = static_cast<DeviceBlock *>(std::malloc(meta));
  if (b == nullptr) {
    return fail(HURRAY_ERR_OUT_OF_MEMORY, "allocating %zu bytes of host bookkeeping failed", meta);
  }
  DeviceMemory mem;  // ptr stays NULL for zero bytes (the backend checks the device only)
  mem.stream = stream;
  st = pool_ipc != nullptr ? pool_ipc->alloc_shareable(device, nbytes, stream, &mem)
                           : a->allocate(device, nbytes, stream, stream_device, &mem);
  if (st != HURRAY_OK) {
    std::free(b);
    return st;
  }
  b->backend = a;
  b->device = device;
  b->mem = mem;
  *out = compact_handle(&device_release, b, mem.ptr, device, dtype, ndim, shape, b->dims, flags);
  return HURRAY_OK;
}

}  // namespace hurray::detail

extern "C" {

HURRAY_API int32_t hurray_alloc(hurray_device device, hurray_dtype dtype, int32_t ndim,
                                const int64_t *shape, uint64_t flags, hurray_buffer *out) {
  using namespace hurray::detail;
  return check::produced(
      alloc_on(device, dtype, ndim, shape, flags, nullptr, kStreamOfThisDevice, out), out, 1,
      "hurray_alloc");
}

HURRAY_API int32_t hurray_alloc_async(hurray_device device, hurray_dtype dtype, int32_t ndim,
                                      const int64_t *shape, uint64_t flags, void *stream,
                                      hurray_buffer *out) {
  using namespace hurray;
  using namespace hurray::detail;
  if (stream != nullptr && !is_device_memory(device.device_type)) {
    return fail(HURRAY_ERR_UNSUPPORTED_DEVICE,
                "stream-ordered allocation serves kDLCUDA and kDLROCM memory, not %s (pass a "
                "NULL stream for a synchronous allocation)",
                device_type_name(device.device_type));
  }
  return check::produced(
      alloc_on(device, dtype, ndim, shape, flags, stream, kStreamOfThisDevice, out), out, 1,
      "hurray_alloc_async");
}

HURRAY_API int32_t hurray_retire_deferred_frees(hurray_device device, size_t *remaining) {
  using namespace hurray;
  using namespace hurray::detail;
  const int32_t type = device.device_type;
  if (!is_gpu_type(type)) {
    return fail(HURRAY_ERR_UNSUPPORTED_DEVICE,
                "hurray_retire_deferred_frees serves the CUDA and ROCm device types; %s has no "
                "streams and defers no release",
                device_type_name(type));
  }
  const DeviceBackend *b = ready_backend(type);
  if (b == nullptr) return HURRAY_ERR_UNSUPPORTED_DEVICE;
  return b->retire_deferred(device.device_id, remaining);
}

}  // extern "C"
