// SPDX-License-Identifier: Apache-2.0
// Copies on the host (copy/host.cc): a strided gather between two
// host-addressable memories, following a CopyPlan.
#ifndef HURRAY_SRC_COPY_HOST_H_
#define HURRAY_SRC_COPY_HOST_H_

#include "copy/plan.h"

namespace hurray::detail {

// Copies the elements of `p` from `src` to `dst`, each the address of
// element (0, ..., 0) of its side. Offsets are computed in unsigned 64-bit
// arithmetic (wrapping is defined) and only the addresses of real elements
// are ever formed.
void copy_plan_host(const CopyPlan &p, const void *src, void *dst);

}  // namespace hurray::detail

#endif  // HURRAY_SRC_COPY_HOST_H_
