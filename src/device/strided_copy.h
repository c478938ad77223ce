// SPDX-License-Identifier: Apache-2.0
// A strided copy handed to a backend's copy_strided (device/backend.h): the
// byte plan of copy/plan.h and the two sides. The vendors' own strided
// copies live in device/cuda/strided_copy.cc and device/hip/strided_copy.cc,
// the CPU's is copy/host.cc's gather (docs/impl/gpu.md §4).
#ifndef HURRAY_SRC_DEVICE_STRIDED_COPY_H_
#define HURRAY_SRC_DEVICE_STRIDED_COPY_H_

#include "copy/plan.h"
#include "hurray/hurray.h"

namespace hurray::detail {

struct DeviceCopy {
  CopyPlan plan;
  const void *src;  // element (0, ..., 0) of the source
  void *dst;        // element (0, ..., 0) of the destination
  hurray_device src_dev;
  hurray_device dst_dev;
};

}  // namespace hurray::detail

#endif  // HURRAY_SRC_DEVICE_STRIDED_COPY_H_
