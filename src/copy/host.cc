// SPDX-License-Identifier: Apache-2.0
// Strided gather on the host (copy/host.h).
#include "copy/host.h"

#include <cstring>

namespace hurray::detail {

void copy_plan_host(const CopyPlan &p, const void *src, void *dst) {
  const uint64_t eb = static_cast<uint64_t>(p.elem_bytes);
  uint64_t s = reinterpret_cast<uintptr_t>(src) + static_cast<uint64_t>(p.src_first);
  uint64_t d = reinterpret_cast<uintptr_t>(dst) + static_cast<uint64_t>(p.dst_first);
  if (p.ndim == 0) {
    std::memcpy(reinterpret_cast<void *>(d), reinterpret_cast<const void *>(s), eb);
    return;
  }
  const int32_t inner = p.ndim - 1;
  const uint64_t n_inner = static_cast<uint64_t>(p.shape[inner]);
  const uint64_t s_inner = static_cast<uint64_t>(p.src_stride[inner]);
  const uint64_t d_inner = static_cast<uint64_t>(p.dst_stride[inner]);
  const bool runs = s_inner == eb && d_inner == eb;
  int64_t index[HURRAY_MAX_NDIM] = {0};
  for (;;) {
    if (runs) {
      std::memcpy(reinterpret_cast<void *>(d), reinterpret_cast<const void *>(s), n_inner * eb);
    } else {
      for (uint64_t i = 0; i < n_inner; ++i) {
        std::memcpy(reinterpret_cast<void *>(d + i * d_inner),
                    reinterpret_cast<const void *>(s + i * s_inner), eb);
      }
    }
    // Odometer over the outer dimensions.
    int32_t k = inner - 1;
    for (; k >= 0; --k) {
      const uint64_t ss = static_cast<uint64_t>(p.src_stride[k]);
      const uint64_t ds = static_cast<uint64_t>(p.dst_stride[k]);
      if (++index[k] < p.shape[k]) {
        s += ss;
        d += ds;
        break;
      }
      const uint64_t back = static_cast<uint64_t>(index[k] - 1);
      s -= ss * back;
      d -= ds * back;
      index[k] = 0;
    }
    if (k < 0) return;
  }
}

}  // namespace hurray::detail
