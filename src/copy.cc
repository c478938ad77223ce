// hurray_copy: elements of a handle into new compact memory (spec §7.2).
#include <cstring>

#include "alloc.h"
#include "error.h"
#include "handle.h"
#include "layout.h"

namespace hurray {
namespace {

// Host-to-host copy of a strided tensor with whole-byte elements into
// compact row-major `dst`.
void copy_strided_host(const hurray_buffer &src, int64_t elem_bytes, char *dst) {
  const char *base = static_cast<const char *>(src.data) + src.byte_offset;
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

}  // namespace
}  // namespace hurray

extern "C" {

HURRAY_API int32_t hurray_copy(const hurray_buffer *src, hurray_device device,
                               hurray_buffer *out) {
  using namespace hurray;
  if (out == nullptr) return fail(HURRAY_ERR_INVALID_ARGUMENT, "out is NULL");
  hurray_extent e;
  int32_t st = check_handle(src, "src", &e);
  if (st != HURRAY_OK) return st;
  if (!host_accessible(src->device.device_type) || device.device_type != HURRAY_DEVICE_CPU) {
    return fail(HURRAY_ERR_UNSUPPORTED_DEVICE,
                "copying from %s to %s is not supported by this build of libhurray",
                device_type_name(src->device.device_type), device_type_name(device.device_type));
  }
  if (!e.contiguous && e.itemsize_bits % 8 != 0) {
    return fail(HURRAY_ERR_UNSUPPORTED_DTYPE,
                "copying a non-contiguous tensor of packed %lld-bit elements is not supported",
                static_cast<long long>(e.itemsize_bits));
  }
  const uint64_t flags = (src->flags & HURRAY_FLAG_SUBBYTE_PADDED) | HURRAY_FLAG_IS_COPIED;
  hurray_buffer dst;
  st = alloc_on(device, src->dtype, src->ndim, src->shape, flags, nullptr, &dst);
  if (st != HURRAY_OK) return st;
  if (e.numel > 0) {
    if (e.contiguous) {
      std::memcpy(dst.data, static_cast<const char *>(src->data) + e.lowest,
                  static_cast<size_t>(e.highest - e.lowest));
    } else {
      copy_strided_host(*src, e.itemsize_bits / 8, static_cast<char *>(dst.data));
    }
  }
  *out = dst;
  return HURRAY_OK;
}

}  // extern "C"
