// Strided copies done by the GPU runtimes themselves (docs/impl/gpu.md §4):
// 2-D / 3-D memcpy when the layout allows, else (CUDA) a small kernel
// shipped as PTX in the library, else (HIP) a loop of 2-D / 3-D copies. No
// byte of the source goes through pageable host memory on these paths.
#ifndef HURRAY_SRC_COPY_DEVICE_H_
#define HURRAY_SRC_COPY_DEVICE_H_

#include <cstdint>

#include "hurray/hurray.h"
#include "plan.h"

namespace hurray {

struct DeviceCopy {
  CopyPlan plan;
  const void *src;      // element (0, ..., 0) of the source
  void *dst;            // element (0, ..., 0) of the destination
  hurray_device src_dev;
  hurray_device dst_dev;
};

// CUDA: queues the copy on `stream` (NULL: the legacy default stream) with
// the primary context of `ordinal` current (the source's device for device
// memory, see copy_vendor in copy.cc). Nothing waits on the host except when
// a device-side staging buffer had to come from cuMemAlloc (no stream-ordered
// pool), which is then freed after synchronising the stream. Returns
// HURRAY_OK or an error with the message set; on error the stream may hold
// part of the copy.
int32_t cuda_copy_on_device(int32_t ordinal, const DeviceCopy &c, void *stream);

// Both are reached through the backend table's copy_on_device
// (gpu/backend.h).
//
// HIP: as above with hipMemcpy2DAsync / hipMemcpy3DAsync, possibly several
// of them. *done is false (and nothing was queued) when the layout needs
// more than HIP's copies can do in kHipMaxPieces calls, or the runtime lacks
// them: the caller stages through the host instead.
constexpr uint64_t kHipMaxPieces = 4096;
int32_t hip_copy_on_device(int32_t ordinal, const DeviceCopy &c, void *stream, bool *done);

// The PTX of the kernel (generated from src/copy/strided_kernel.ptx).
extern const char kStridedKernelPtx[];

}  // namespace hurray

#endif  // HURRAY_SRC_COPY_DEVICE_H_
