// SPDX-License-Identifier: Apache-2.0
/*
 * odd.h - Go-only test producer: handles whose pointer-sized fields hold
 * values that are not pointers, as producers may legally choose (a small
 * integer user_data; a dangling non-NULL data pointer of an empty tensor;
 * dangling shape/strides of a 0-d tensor). Test code only.
 */
#ifndef HURRAY_GO_TESTPROD_ODD_H_
#define HURRAY_GO_TESTPROD_ODD_H_

#include <stdint.h>

#include "hurray/hurray.h"

/* The user_data every odd handle carries: 0x40, not a pointer. */
#define TPG_ODD_USER_DATA ((uintptr_t)0x40)

/* Makes an odd handle of `kind` and exports it as a versioned DLPack tensor
 * (which libhurray's import unwraps back to the very same handle):
 *   0  float32 [0, 3], data 0x40 (empty: nothing is read)
 *   1  float32 [4], real data (values 0..3), user_data still 0x40
 *   2  float32 0-d, real data (value 7), shape 0x8 and strides 0x10 (ndim 0:
 *      never read)
 *   3  float32 [4] on device CUDA:0 (data never read)
 *   4  float32 [2] whose data is 1 byte past a 4-aligned address (misaligned)
 * Its release counts one call (tpg_odd_releases) and checks that user_data
 * is TPG_ODD_USER_DATA (tpg_odd_bad_user_data counts mismatches). NULL on
 * failure (at most 4096 per process). */
DLManagedTensorVersioned *tpg_make_odd(int32_t kind);
int64_t tpg_odd_releases(void);
int64_t tpg_odd_bad_user_data(void);
void tpg_odd_reset(void);

/* The data pointer of a versioned tensor (dl_tensor.data). */
uintptr_t tpg_data(const DLManagedTensorVersioned *t);

/* The address of a versioned tensor's first byte (data + byte_offset). */
uintptr_t tpg_first_byte(const DLManagedTensorVersioned *t);

#endif
