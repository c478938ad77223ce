// SPDX-License-Identifier: Apache-2.0
// The CPU as a backend like any other (device/backend.h): aligned host
// memory, copies that are done on return, no streams. hurray_alloc and
// hurray_copy reach it through backend_for(kDLCPU) as they reach the GPU
// vendors (docs/impl/gpu.md, "The backend table").
#include <cinttypes>
#include <cstdlib>
#include <cstring>

#include "common/error.h"
#include "copy/host.h"
#include "device/backend.h"
#include "device/strided_copy.h"

namespace hurray::detail {
namespace {

constexpr uint64_t kAlign = HURRAY_CPU_ALIGNMENT;

int32_t cpu_load() { return HURRAY_OK; }

// HURRAY_CPU_ALIGNMENT-aligned memory; streams do not apply (the caller
// passes none for kDLCPU).
int32_t cpu_allocate(hurray_device device, uint64_t nbytes, void *, int32_t, DeviceMemory *mem) {
  if (device.device_id != 0) {
    return fail(HURRAY_ERR_UNSUPPORTED_DEVICE, "CPU memory has device_id 0, not %" PRId32,
                device.device_id);
  }
  uint64_t total;
  if (__builtin_add_overflow(nbytes, kAlign - 1, &total)) {
    return fail(HURRAY_ERR_OVERFLOW, "a %llu-byte CPU allocation is beyond address arithmetic",
                static_cast<unsigned long long>(nbytes));
  }
  total = total / kAlign * kAlign;
  if (total == 0) total = kAlign;  // aligned_alloc(…, 0) may return NULL
  void *p = std::aligned_alloc(kAlign, static_cast<size_t>(total));
  if (p == nullptr) {
    return fail(HURRAY_ERR_OUT_OF_MEMORY, "allocating %llu bytes of CPU memory failed",
                static_cast<unsigned long long>(total));
  }
  mem->ptr = p;
  return HURRAY_OK;
}

void cpu_deallocate(hurray_device, const DeviceMemory &mem) { std::free(mem.ptr); }

int32_t cpu_copy(int32_t, void *dst, const void *src, uint64_t nbytes, void *) {
  std::memcpy(dst, src, static_cast<size_t>(nbytes));
  return HURRAY_OK;
}

// Nothing is ever queued.
int32_t cpu_synchronize(int32_t, void *) { return HURRAY_OK; }
int32_t cpu_host_wait_allowed(int32_t, void *) { return HURRAY_OK; }
int32_t cpu_retire_deferred(int32_t, size_t *remaining) {
  if (remaining != nullptr) *remaining = 0;  // no release of the CPU is ever deferred
  return HURRAY_OK;
}

int32_t cpu_stream_wait(int32_t, void *, void *) {
  return fail(HURRAY_ERR_UNSUPPORTED_DEVICE, "kDLCPU has no streams");
}

// No streams, so nothing to order: an event is refused like a stream wait.
int32_t cpu_event_record(int32_t, void *, void **, uint64_t *) {
  return fail(HURRAY_ERR_UNSUPPORTED_DEVICE,
              "kDLCPU has no streams: there is no pending work to record an event for");
}
int32_t cpu_event_wait(int32_t, void *, uint64_t, void *) {
  return cpu_stream_wait(0, nullptr, nullptr);
}
int32_t cpu_event_destroy(int32_t, void *, uint64_t) { return HURRAY_OK; }

// Any address is CPU memory as far as libhurray can tell.
int32_t cpu_check_pointer(hurray_device, const void *) { return HURRAY_OK; }

int32_t cpu_copy_strided(int32_t, const DeviceCopy &c, void *) {
  copy_plan_host(c.plan, c.src, c.dst);
  return HURRAY_OK;
}

constexpr DeviceBackend cpu_table() {
  DeviceBackend b{};
  b.name = "CPU";
  b.load = &cpu_load;
  b.allocate = &cpu_allocate;
  b.deallocate = &cpu_deallocate;
  b.copy = &cpu_copy;
  b.synchronize = &cpu_synchronize;
  b.stream_wait = &cpu_stream_wait;
  b.event_record = &cpu_event_record;
  b.event_wait = &cpu_event_wait;
  b.event_destroy = &cpu_event_destroy;
  b.check_pointer = &cpu_check_pointer;
  b.copy_strided = &cpu_copy_strided;
  b.host_wait_allowed = &cpu_host_wait_allowed;
  b.retire_deferred = &cpu_retire_deferred;
  return b;
}

}  // namespace

// The table for kDLCPU (device/backend.cc).
extern const DeviceBackend kCpuBackend;
const DeviceBackend kCpuBackend = cpu_table();

}  // namespace hurray::detail
