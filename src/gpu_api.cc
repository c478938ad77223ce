// SPDX-License-Identifier: Apache-2.0
// The public GPU entry points that need no vendor code of their own:
// hurray_alloc_async and hurray_stream_wait (docs/impl/gpu.md §2, §4).
#include "alloc.h"
#include "check.h"
#include "device/backend.h"
#include "error.h"

extern "C" {

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

HURRAY_API int32_t hurray_stream_wait(hurray_device device, void *producer_stream,
                                      void *consumer_stream) {
  using namespace hurray;
  using namespace hurray::detail;
  const int32_t type = device.device_type;
  if (!is_gpu_type(type)) {
    return fail(HURRAY_ERR_UNSUPPORTED_DEVICE,
                "hurray_stream_wait orders streams of the CUDA and ROCm device types; %s has "
                "no streams",
                device_type_name(type));
  }
  if (producer_stream == consumer_stream) return HURRAY_OK;  // no runtime needed
  const DeviceBackend *b = ready_backend(type);
  if (b == nullptr) return HURRAY_ERR_UNSUPPORTED_DEVICE;
  if (device.device_id < 0) {
    return fail(HURRAY_ERR_UNSUPPORTED_DEVICE, "%s has no device_id %d", device_type_name(type),
                device.device_id);
  }
  return b->stream_wait(device.device_id, producer_stream, consumer_stream);
}

}  // extern "C"
