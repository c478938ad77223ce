// SPDX-License-Identifier: Apache-2.0
// hurray_copy / hurray_copy_async: elements of a handle into new compact
// memory, through the backend table of the side that moves the bytes (the
// CPU's for host-only copies; spec §7.2, docs/impl/gpu.md §4). The byte plan
// and the host gather live in src/copy/ (plan.*, host.*), the copies on a
// device in each vendor's folder under src/device/.
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "api/alloc.h"
#include "checking/checking.h"
#include "common/error.h"
#include "copy/host.h"
#include "copy/plan.h"
#include "device/backend.h"
#include "device/strided_copy.h"
#include "handle/handle.h"
#include "handle/layout.h"

namespace hurray::detail {
namespace {

// The vendor that moves the bytes between src and dst, and the device
// ordinal to make current: the device-memory side (the source's when both
// are), else the GPU side (pinned or managed memory names the device whose
// context it belongs to; the source's when both are GPU types). nullptr
// with the message set when no vendor can.
const DeviceBackend *copy_vendor(int32_t src_type, const hurray_device &src_dev,
                                 const hurray_device &dst, int32_t *ordinal) {
  const bool src_gpu = src_type != HURRAY_DEVICE_CPU;
  const bool dst_gpu = dst.device_type != HURRAY_DEVICE_CPU;
  const DeviceBackend *vs = src_gpu ? ready_backend(src_type) : nullptr;
  if (src_gpu && vs == nullptr) return nullptr;
  const DeviceBackend *vd = dst_gpu ? ready_backend(dst.device_type) : nullptr;
  if (dst_gpu && vd == nullptr) return nullptr;
  if (vs != nullptr && vd != nullptr && vs != vd) {
    fail(HURRAY_ERR_UNSUPPORTED_DEVICE,
         "copying from %s (%s) to %s (%s) is not supported: copy through kDLCPU",
         device_type_name(src_type), vs->name, device_type_name(dst.device_type), vd->name);
    return nullptr;
  }
  *ordinal = is_device_memory(src_type)          ? src_dev.device_id
             : is_device_memory(dst.device_type) ? dst.device_id
             : src_gpu                           ? src_dev.device_id
                                                 : dst.device_id;
  return vs != nullptr ? vs : vd;
}

// Frees host staging memory on every path out of a scope.
struct Staging {
  void *p = nullptr;
  ~Staging() { std::free(p); }
  bool allocate(uint64_t nbytes) {
    p = std::malloc(nbytes > 0 ? static_cast<size_t>(nbytes) : 1);
    if (p == nullptr) {
      fail(HURRAY_ERR_OUT_OF_MEMORY, "allocating %llu bytes of host staging memory failed",
           static_cast<unsigned long long>(nbytes));
    }
    return p != nullptr;
  }
};

// Address of element (0, ..., 0) of `h`, without pointer arithmetic on
// memory the host may not own.
uintptr_t first_element(const hurray_buffer &h) {
  return reinterpret_cast<uintptr_t>(h.data) + static_cast<uintptr_t>(h.byte_offset);
}

// Pinned host memory is read by the host only after the work that may still
// be writing it: the work queued on `stream` (of device `ordinal`), or with
// no stream on the legacy default stream of the source's own device.
int32_t wait_for_pinned_source(const DeviceBackend &v, const hurray_buffer &src, int32_t ordinal,
                               void *stream) {
  return v.synchronize(stream != nullptr ? ordinal : src.device.device_id, stream);
}

// Gathers the elements `plan` describes from host-readable `base` into the
// compact `dst`: directly into CPU memory, else packed in a host buffer
// that then goes to the device (completed before returning: the buffer
// does not outlive the call).
int32_t gather_on_host(const DeviceBackend &v, int32_t ordinal, const CopyPlan &plan,
                       const void *base, hurray_buffer &dst, void *stream) {
  if (dst.device.device_type == HURRAY_DEVICE_CPU) {
    copy_plan_host(plan, base, dst.data);
    return HURRAY_OK;
  }
  const uint64_t packed =
      static_cast<uint64_t>(plan.numel) * static_cast<uint64_t>(plan.elem_bytes);
  Staging packed_buf;
  if (!packed_buf.allocate(packed)) return HURRAY_ERR_OUT_OF_MEMORY;
  copy_plan_host(plan, base, packed_buf.p);
  int32_t st = v.copy(ordinal, dst.data, packed_buf.p, packed, stream);
  if (st == HURRAY_OK) st = v.synchronize(ordinal, stream);
  return st;
}

// The HIP fallback for layouts its 2-D / 3-D copies cannot do: the whole
// byte span of the device source comes to the host, is gathered there, and
// the elements go back (or straight into a CPU destination). Completes
// before returning.
int32_t stage_through_host(const DeviceBackend &v, int32_t ordinal, const hurray_buffer &src,
                           const hurray_extent &e, const CopyPlan &plan, hurray_buffer &dst,
                           void *stream) {
  const uint64_t span_bytes = static_cast<uint64_t>(e.highest - e.lowest);
  Staging span;
  if (!span.allocate(span_bytes)) return HURRAY_ERR_OUT_OF_MEMORY;
  const void *src_lowest = reinterpret_cast<const void *>(reinterpret_cast<uintptr_t>(src.data) +
                                                          static_cast<uintptr_t>(e.lowest));
  int32_t st = v.copy(ordinal, span.p, src_lowest, span_bytes, stream);
  if (st == HURRAY_OK) st = v.synchronize(ordinal, stream);
  if (st != HURRAY_OK) return st;
  // Element (0, ..., 0) sits byte_offset - lowest bytes into the image.
  const void *base =
      static_cast<const char *>(span.p) + (static_cast<int64_t>(src.byte_offset) - e.lowest);
  return gather_on_host(v, ordinal, plan, base, dst, stream);
}

// Fills the already allocated, compact `dst` from `src` through backend `v`.
int32_t fill(const DeviceBackend &v, int32_t ordinal, const hurray_buffer &src,
             const hurray_extent &e, hurray_buffer &dst, void *stream) {
  if (e.contiguous) {
    const void *src_lowest = reinterpret_cast<const void *>(reinterpret_cast<uintptr_t>(src.data) +
                                                            static_cast<uintptr_t>(e.lowest));
    return v.copy(ordinal, dst.data, src_lowest, static_cast<uint64_t>(e.highest - e.lowest),
                  stream);
  }
  CopyPlan plan;
  int32_t st =
      make_copy_plan(src.ndim, src.shape, src.strides, dst.strides, e.itemsize_bits / 8, &plan);
  if (st != HURRAY_OK) return st;
  if (host_accessible(src.device.device_type)) {
    // Gathered by the host, straight from the source.
    if (src.device.device_type != HURRAY_DEVICE_CPU) {
      st = wait_for_pinned_source(v, src, ordinal, stream);
      if (st != HURRAY_OK) return st;
    }
    return gather_on_host(v, ordinal, plan, reinterpret_cast<const void *>(first_element(src)), dst,
                          stream);
  }
  // Device (or managed) memory: copied by the device where the backend can,
  // else staged through the host.
  const DeviceCopy c{plan, reinterpret_cast<const void *>(first_element(src)), dst.data, src.device,
                     dst.device};
  st = v.copy_strided(ordinal, c, stream);
  if (st != kStageThroughHost) return st;
  return stage_through_host(v, ordinal, src, e, plan, dst, stream);
}

int32_t copy_impl(const hurray_buffer *src, hurray_device device, void *stream,
                  hurray_buffer *out) {
  if (out == nullptr) return fail(HURRAY_ERR_INVALID_ARGUMENT, "out is NULL");
  // A released tracked handle's shape may be gone: liveness first.
  if (check::is_tracked(src)) {
    const char *step = stream != nullptr ? "hurray_copy_async" : "hurray_copy";
    int32_t st = check::require_live(src, "src", step);
    if (st != HURRAY_OK) return st;
  }
  hurray_extent e;
  int32_t st = check_handle(src, "src", &e);
  if (st != HURRAY_OK) return st;
  if (!e.contiguous && e.itemsize_bits % 8 != 0) {
    return fail(HURRAY_ERR_UNSUPPORTED_DTYPE,
                "copying a non-contiguous tensor of packed %lld-bit elements is not supported",
                static_cast<long long>(e.itemsize_bits));
  }
  const uint64_t flags = (src->flags & HURRAY_FLAG_SUBBYTE_PADDED) | HURRAY_FLAG_IS_COPIED;
  // Host-readable source to CPU memory with no stream to order on: a plain
  // host copy (as for CPU-only builds).
  const bool host_only = device.device_type == HURRAY_DEVICE_CPU &&
                         (src->device.device_type == HURRAY_DEVICE_CPU ||
                          (host_accessible(src->device.device_type) && stream == nullptr));
  const DeviceBackend *v = host_only ? backend_for(HURRAY_DEVICE_CPU) : nullptr;
  int32_t ordinal = 0;
  if (!host_only) {
    v = copy_vendor(src->device.device_type, src->device, device, &ordinal);
    if (v == nullptr) return HURRAY_ERR_UNSUPPORTED_DEVICE;
    // A copy that waits on the host (no stream, or into kDLCPU memory) is
    // refused before anything is queued while its stream is being captured
    // into a graph: the wait is prohibited then (docs/impl/gpu.md §4).
    if (e.numel > 0 && (stream == nullptr || device.device_type == HURRAY_DEVICE_CPU)) {
      st = v->host_wait_allowed(ordinal, stream);
      if (st != HURRAY_OK) return st;
    }
  }
  // Device memory for the result is stream-ordered when the copy is, and the
  // stream is the destination's: a stream belongs to the device `ordinal`
  // (the source's when both sides are device memory). A destination on
  // another device is allocated synchronously on it, its release ordered
  // after the stream (the copy is queued there, in the stream's own
  // context); with the per-thread default stream (2), which names the
  // releasing thread's own stream at release, after every per-thread stream of the
  // stream's device.
  const bool dst_on_device = is_device_memory(device.device_type);
  const bool other_device = device.device_id != ordinal;
  void *alloc_stream = dst_on_device ? stream : nullptr;
  const int32_t stream_device =
      alloc_stream != nullptr && other_device ? ordinal : kStreamOfThisDevice;
  hurray_buffer dst;
  st =
      alloc_on(device, src->dtype, src->ndim, src->shape, flags, alloc_stream, stream_device, &dst);
  if (st != HURRAY_OK) return st;
  if (e.numel > 0) {
    if (host_only && src->device.device_type != HURRAY_DEVICE_CPU) {
      // Pinned memory to CPU memory: work queued on the legacy default
      // stream may still be writing it. A runtime that cannot be loaded
      // here has no work queued.
      const DeviceBackend *pv = ready_backend(src->device.device_type);
      if (pv != nullptr) st = pv->host_wait_allowed(src->device.device_id, nullptr);
      if (pv != nullptr && st == HURRAY_OK) st = wait_for_pinned_source(*pv, *src, 0, nullptr);
    }
    if (st == HURRAY_OK) st = fill(*v, ordinal, *src, e, dst, stream);
    // Synchronous copies, and any copy into pageable CPU memory, are
    // complete on return.
    if (st == HURRAY_OK && (stream == nullptr || device.device_type == HURRAY_DEVICE_CPU)) {
      st = v->synchronize(ordinal, stream);
    }
  }
  if (st != HURRAY_OK) {
    hurray_buffer_release(&dst);
    return st;
  }
  *out = dst;
  return HURRAY_OK;
}

}  // namespace
}  // namespace hurray::detail

extern "C" {

HURRAY_API int32_t hurray_copy(const hurray_buffer *src, hurray_device device, hurray_buffer *out) {
  using namespace hurray::detail;
  return check::produced(copy_impl(src, device, nullptr, out), out, 1, "hurray_copy");
}

HURRAY_API int32_t hurray_copy_async(const hurray_buffer *src, hurray_device device, void *stream,
                                     hurray_buffer *out) {
  using namespace hurray::detail;
  return check::produced(copy_impl(src, device, stream, out), out, 1, "hurray_copy_async");
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
