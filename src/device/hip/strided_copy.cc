// SPDX-License-Identifier: Apache-2.0
// Strided copies on a HIP device (HipTraits::copy_strided, vendor.h): hipMemcpy2DAsync /
// hipMemcpy3DAsync, one call when the layout is 2-D or 3-D, else one call
// per index of the outer dimensions (at most kHipMaxPieces calls). libhurray
// ships no AMD GPU code object (hipModuleLoadData needs one built for the
// device's ISA), so layouts beyond that are staged through the host by the
// caller (docs/impl/gpu.md §4).
#if defined(HURRAY_WITH_HIP)

#include <cstring>

#include "device/hip/runtime.h"
#include "device/hip/vendor.h"
#include "device/strided_copy.h"

namespace hurray::detail {
namespace {

hipError_t copy_rect(const HipRuntime &rt, const CopyRect &r, uint64_t src, uint64_t dst,
                     hipStream_t stream, const char **call) {
  void *d = reinterpret_cast<void *>(static_cast<uintptr_t>(dst));
  const void *s = reinterpret_cast<const void *>(static_cast<uintptr_t>(src));
  if (r.dims == 1) {
    *call = "hipMemcpyAsync";
    return rt.memcpy_async(d, s, static_cast<size_t>(r.width), hipMemcpyDefault, stream);
  }
  if (r.dims == 2) {
    *call = "hipMemcpy2DAsync";
    return rt.memcpy_2d_async(d, static_cast<size_t>(r.dst_pitch), s,
                              static_cast<size_t>(r.src_pitch), static_cast<size_t>(r.width),
                              static_cast<size_t>(r.height), hipMemcpyDefault, stream);
  }
  hipMemcpy3DParms m;
  std::memset(&m, 0, sizeof m);
  // Linear memory: extent.width is in bytes; ysize is the rows per slice.
  m.srcPtr.ptr = const_cast<void *>(s);
  m.srcPtr.pitch = static_cast<size_t>(r.src_pitch);
  m.srcPtr.xsize = static_cast<size_t>(r.width);
  m.srcPtr.ysize = static_cast<size_t>(r.src_rows);
  m.dstPtr.ptr = d;
  m.dstPtr.pitch = static_cast<size_t>(r.dst_pitch);
  m.dstPtr.xsize = static_cast<size_t>(r.width);
  m.dstPtr.ysize = static_cast<size_t>(r.dst_rows);
  m.extent.width = static_cast<size_t>(r.width);
  m.extent.height = static_cast<size_t>(r.height);
  m.extent.depth = static_cast<size_t>(r.depth);
  m.kind = hipMemcpyDefault;
  *call = "hipMemcpy3DAsync";
  return rt.memcpy_3d_async(&m, stream);
}

struct Job {
  const DeviceCopy *c;
  int32_t outer;  // dimensions looped over on the host
  CopyRect rect;  // what one call copies
  hipStream_t stream;
  const char *call;
};

hipError_t run(const HipRuntime &rt, void *arg) {
  Job &j = *static_cast<Job *>(arg);
  const CopyPlan &p = j.c->plan;
  const uint64_t src0 = reinterpret_cast<uintptr_t>(j.c->src) + static_cast<uint64_t>(p.src_first);
  const uint64_t dst0 = reinterpret_cast<uintptr_t>(j.c->dst) + static_cast<uint64_t>(p.dst_first);
  int64_t index[HURRAY_MAX_NDIM] = {0};
  // Unsigned offsets: wrapping is defined, and the sums are exact for every
  // real element.
  uint64_t s = src0, d = dst0;
  for (;;) {
    hipError_t e = copy_rect(rt, j.rect, s, d, j.stream, &j.call);
    if (e != hipSuccess) return e;
    int32_t k = j.outer - 1;
    for (; k >= 0; --k) {
      if (++index[k] < p.shape[k]) {
        s += static_cast<uint64_t>(p.src_stride[k]);
        d += static_cast<uint64_t>(p.dst_stride[k]);
        break;
      }
      const uint64_t back = static_cast<uint64_t>(index[k] - 1);
      s -= static_cast<uint64_t>(p.src_stride[k]) * back;
      d -= static_cast<uint64_t>(p.dst_stride[k]) * back;
      index[k] = 0;
    }
    if (k < 0) return hipSuccess;
  }
}

}  // namespace

int32_t HipTraits::copy_strided(int32_t ordinal, const DeviceCopy &c, void *stream) {
  const HipRuntime *rt = hip_runtime();
  if (rt == nullptr) return HURRAY_ERR_UNSUPPORTED_DEVICE;
  if (rt->memcpy_2d_async == nullptr || rt->memcpy_3d_async == nullptr) return kStageThroughHost;
  const CopyPlan &p = c.plan;
  Job j{&c, 0, CopyRect{}, static_cast<hipStream_t>(stream), "hipMemcpy2DAsync"};
  // The fewest outer dimensions that leave a 2-D / 3-D copy inside.
  uint64_t pieces = 1;
  for (j.outer = 0; j.outer <= p.ndim; ++j.outer) {
    if (j.outer > 0) {
      const uint64_t n = static_cast<uint64_t>(p.shape[j.outer - 1]);
      if (n > kHipMaxPieces / pieces) return kStageThroughHost;  // more calls than that
      pieces *= n;
    }
    if (plan_rect(p, j.outer, &j.rect)) break;
  }
  if (j.outer > p.ndim) return kStageThroughHost;
  return Hip::with_device(ordinal, &j.call, [&](const HipRuntime &r) { return run(r, &j); });
}

}  // namespace hurray::detail

#endif  // HURRAY_WITH_HIP
