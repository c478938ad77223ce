// SPDX-License-Identifier: Apache-2.0
// hurray_event_record / hurray_event_wait / hurray_event_release: an opaque
// event recorded on a GPU stream and waited for by others, through the
// device backend table (docs/impl/gpu.md §4, "Events").
#include <cinttypes>
#include <cstdio>
#include <new>

#include "common/diagnostics.h"
#include "common/error.h"
#include "device/backend.h"
#include "hurray/hurray.h"

// The opaque type of hurray.h.
struct hurray_event {
  const hurray::detail::DeviceBackend *backend;
  hurray_device device;
  void *native;      // CUevent / hipEvent_t
  uint64_t context;  // the incarnation of the context it was made in
};

extern "C" {

HURRAY_API int32_t hurray_event_record(hurray_device device, void *stream, hurray_event **out) {
  using namespace hurray;
  using namespace hurray::detail;
  if (out == nullptr) return fail(HURRAY_ERR_INVALID_ARGUMENT, "hurray_event_record: out is NULL");
  const int32_t type = device.device_type;
  if (!is_gpu_type(type)) {
    return fail(HURRAY_ERR_UNSUPPORTED_DEVICE,
                "hurray_event_record records on streams of the CUDA and ROCm device types; %s "
                "has no streams, so no pending work to order",
                device_type_name(type));
  }
  const DeviceBackend *b = ready_backend(type);
  if (b == nullptr) return HURRAY_ERR_UNSUPPORTED_DEVICE;
  if (device.device_id < 0) {
    return fail(HURRAY_ERR_UNSUPPORTED_DEVICE, "%s has no device_id %" PRId32,
                device_type_name(type), device.device_id);
  }
  hurray_event *e = new (std::nothrow) hurray_event{b, device, nullptr, 0};
  if (e == nullptr) {
    return fail(HURRAY_ERR_OUT_OF_MEMORY, "hurray_event_record: no memory for the event");
  }
  const int32_t st = b->event_record(device.device_id, stream, &e->native, &e->context);
  if (st != HURRAY_OK) {
    delete e;
    return st;
  }
  *out = e;
  return HURRAY_OK;
}

HURRAY_API int32_t hurray_event_wait(const hurray_event *event, void *stream) {
  using namespace hurray::detail;
  if (event == nullptr) {
    return fail(HURRAY_ERR_INVALID_ARGUMENT, "hurray_event_wait: event is NULL");
  }
  return event->backend->event_wait(event->device.device_id, event->native, event->context, stream);
}

HURRAY_API int32_t hurray_event_release(hurray_event *event) {
  using namespace hurray::detail;
  if (event == nullptr) return HURRAY_OK;
  // A release leaves the thread's message as it was (like a buffer's): a
  // failed destroy is counted and sent to the diagnostic hook instead.
  char saved[1024];
  std::snprintf(saved, sizeof saved, "%s", hurray_last_error());
  const int32_t st =
      event->backend->event_destroy(event->device.device_id, event->native, event->context);
  if (st != HURRAY_OK) {
    report_failed_release(st, "hurray_event_release: %s (the event is leaked)",
                          hurray_last_error());
    fail(HURRAY_OK, "%s", saved);
  }
  delete event;
  return HURRAY_OK;
}

}  // extern "C"
