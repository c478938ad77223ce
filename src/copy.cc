// hurray_copy / hurray_copy_async: elements of a handle into new compact
// memory, on the host or through a GPU runtime (spec §7.2, docs/impl/gpu.md §4).
#include <cstdlib>
#include <cstring>

#include "alloc.h"
#include "alloc/gpu.h"
#include "error.h"
#include "handle.h"
#include "layout.h"

namespace hurray {
namespace {

// Host-to-host gather of a strided tensor with whole-byte elements into
// compact row-major `dst`. `base` is the address of element (0, ..., 0).
void copy_strided_host(const char *base, const hurray_buffer &src, int64_t elem_bytes,
                       char *dst) {
  int64_t index[HURRAY_MAX_NDIM] = {0};
  const int32_t nd = src.ndim;
  const char *p = base;
  for (;;) {
    std::memcpy(dst, p, static_cast<size_t>(elem_bytes));
    dst += elem_bytes;
    int32_t k = nd - 1;
    for (; k >= 0; --k) {
      p += src.strides[k] * elem_bytes;
      if (++index[k] < src.shape[k]) break;
      p -= src.strides[k] * elem_bytes * index[k];
      index[k] = 0;
    }
    if (k < 0) return;
  }
}

// The vendor that moves the bytes between src and dst, and the device
// ordinal to make current: the device-memory side (the source's when both
// are), else 0. nullptr with the message set when no vendor can.
const GpuVendor *copy_vendor(int32_t src_type, const hurray_device &src_dev,
                             const hurray_device &dst, int32_t *ordinal) {
  const bool src_gpu = src_type != HURRAY_DEVICE_CPU;
  const bool dst_gpu = dst.device_type != HURRAY_DEVICE_CPU;
  const GpuVendor *vs = src_gpu ? find_gpu_vendor(src_type) : nullptr;
  if (src_gpu && vs == nullptr) return nullptr;
  const GpuVendor *vd = dst_gpu ? find_gpu_vendor(dst.device_type) : nullptr;
  if (dst_gpu && vd == nullptr) return nullptr;
  if (vs != nullptr && vd != nullptr && vs != vd) {
    fail(HURRAY_ERR_UNSUPPORTED_DEVICE,
         "copying from %s (%s) to %s (%s) is not supported: copy through kDLCPU",
         device_type_name(src_type), vs->name, device_type_name(dst.device_type), vd->name);
    return nullptr;
  }
  *ordinal = is_device_memory(src_type)            ? src_dev.device_id
             : is_device_memory(dst.device_type) ? dst.device_id
                                                  : 0;
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

// Fills the already allocated `dst` from `src` through vendor `v`.
// A non-contiguous source is gathered on the host: read straight from
// host-accessible memory, or after bringing its whole byte span over; the
// result then goes to dst (directly when dst is CPU memory). Such copies
// finish before returning.
int32_t gpu_fill(const GpuVendor &v, int32_t ordinal, const hurray_buffer &src,
                 const hurray_extent &e, hurray_buffer &dst, void *stream) {
  const uint64_t packed = static_cast<uint64_t>(e.numel) * static_cast<uint64_t>(e.itemsize_bits / 8);
  const char *src_lowest = static_cast<const char *>(src.data) + e.lowest;
  if (e.contiguous) {
    return v.copy(ordinal, dst.data, src_lowest, static_cast<uint64_t>(e.highest - e.lowest),
                  stream);
  }
  int32_t st;
  // 1. A host-readable image of the source's bytes.
  const char *base;  // element (0, ..., 0) in host-readable memory
  Staging span;
  if (host_accessible(src.device.device_type)) {
    // Pinned memory may still be written by work queued on the stream.
    if (src.device.device_type != HURRAY_DEVICE_CPU && stream != nullptr) {
      st = v.synchronize(ordinal, stream);
      if (st != HURRAY_OK) return st;
    }
    base = static_cast<const char *>(src.data) + src.byte_offset;
  } else {
    const uint64_t span_bytes = static_cast<uint64_t>(e.highest - e.lowest);
    if (!span.allocate(span_bytes)) return HURRAY_ERR_OUT_OF_MEMORY;
    st = v.copy(ordinal, span.p, src_lowest, span_bytes, stream);
    if (st == HURRAY_OK) st = v.synchronize(ordinal, stream);
    if (st != HURRAY_OK) return st;
    base = static_cast<const char *>(span.p) + (static_cast<int64_t>(src.byte_offset) - e.lowest);
  }
  // 2. Gather, straight into a CPU destination or into a staging buffer.
  if (dst.device.device_type == HURRAY_DEVICE_CPU) {
    copy_strided_host(base, src, e.itemsize_bits / 8, static_cast<char *>(dst.data));
    return HURRAY_OK;
  }
  Staging packed_buf;
  if (!packed_buf.allocate(packed)) return HURRAY_ERR_OUT_OF_MEMORY;
  copy_strided_host(base, src, e.itemsize_bits / 8, static_cast<char *>(packed_buf.p));
  st = v.copy(ordinal, dst.data, packed_buf.p, packed, stream);
  // The staging buffer must outlive the copy.
  if (st == HURRAY_OK) st = v.synchronize(ordinal, stream);
  return st;
}

int32_t copy_impl(const hurray_buffer *src, hurray_device device, void *stream,
                  hurray_buffer *out) {
  if (out == nullptr) return fail(HURRAY_ERR_INVALID_ARGUMENT, "out is NULL");
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
  // host copy, no runtime involved (as for CPU-only builds).
  const bool host_only =
      device.device_type == HURRAY_DEVICE_CPU &&
      (src->device.device_type == HURRAY_DEVICE_CPU ||
       (host_accessible(src->device.device_type) && stream == nullptr));
  const GpuVendor *v = nullptr;
  int32_t ordinal = 0;
  if (!host_only) {
    v = copy_vendor(src->device.device_type, src->device, device, &ordinal);
    if (v == nullptr) return HURRAY_ERR_UNSUPPORTED_DEVICE;
  }
  // Device memory for the result is stream-ordered when the copy is, and the
  // stream is the destination's: a stream belongs to the device `ordinal`
  // (the source's when both sides are device memory). A destination on
  // another device is allocated synchronously on it, and the copy is still
  // queued on the stream, in the stream's own context. The per-thread
  // default stream is never used for allocation (see hurray_alloc_async).
  void *alloc_stream = is_device_memory(device.device_type) && device.device_id == ordinal
                           ? allocation_stream(stream)
                           : nullptr;
  hurray_buffer dst;
  st = alloc_on(device, src->dtype, src->ndim, src->shape, flags, alloc_stream, &dst);
  if (st != HURRAY_OK) return st;
  if (e.numel > 0) {
    if (host_only && e.contiguous) {
      std::memcpy(dst.data, static_cast<const char *>(src->data) + e.lowest,
                  static_cast<size_t>(e.highest - e.lowest));
    } else if (host_only) {
      copy_strided_host(static_cast<const char *>(src->data) + src->byte_offset, *src,
                        e.itemsize_bits / 8, static_cast<char *>(dst.data));
    } else {
      st = gpu_fill(*v, ordinal, *src, e, dst, stream);
      // Synchronous copies, and any copy into pageable CPU memory, are
      // complete on return.
      if (st == HURRAY_OK && (stream == nullptr || device.device_type == HURRAY_DEVICE_CPU)) {
        st = v->synchronize(ordinal, stream);
      }
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
}  // namespace hurray

extern "C" {

HURRAY_API int32_t hurray_copy(const hurray_buffer *src, hurray_device device,
                               hurray_buffer *out) {
  return hurray::copy_impl(src, device, nullptr, out);
}

HURRAY_API int32_t hurray_copy_async(const hurray_buffer *src, hurray_device device,
                                     void *stream, hurray_buffer *out) {
  return hurray::copy_impl(src, device, stream, out);
}

}  // extern "C"
