// SPDX-License-Identifier: Apache-2.0
/*
 * dlpack_producer.h - a tiny C DLPack tensor producer for the Go and Java
 * binding tests.
 *
 * It makes float32 DLPack tensors whose deleter counts its calls, and it
 * consumes tensors that a binding exported (reads them, then calls their
 * deleter), so the tests can check "released exactly once, in C" from the
 * other language. Test code only: not part of libhurray or its ABI. The
 * counters are process-wide atomics, reset by tp_reset.
 */
#ifndef HURRAY_TESTS_DLPACK_PRODUCER_H_
#define HURRAY_TESTS_DLPACK_PRODUCER_H_

#include <stdint.h>

#include "hurray/hurray.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Zeroes every counter. Call between tests, with no tensor of this producer
 * alive. */
void tp_reset(void);

/* A compact float32 CPU tensor of the given shape (ndim 0..8), element i
 * holding start + i, version 1.3, flags `flags` (DLPACK_FLAG_BITMASK_*).
 * Its deleter frees it and counts one call. NULL if out of memory or ndim is
 * out of range. The caller owns the tensor. */
DLManagedTensorVersioned *tp_make_versioned(int32_t ndim, const int64_t *shape, float start,
                                            uint64_t flags);

/* The same as a legacy DLManagedTensor (strides NULL: compact row-major). */
DLManagedTensor *tp_make_legacy(int32_t ndim, const int64_t *shape, float start);

/* Like tp_make_versioned, but with version.major set to `major` (to test
 * that a binding refuses it and leaves it with the caller). */
DLManagedTensorVersioned *tp_make_versioned_major(uint32_t major);

/* Number of deleter calls of tensors made here since tp_reset. */
int64_t tp_deleter_calls(void);

/* A consumer calls this right before each release it makes; the deleter
 * records how many notes it saw when it ran (tp_notes_at_delete), so a test
 * can check that the producer's deleter ran after every consumer release
 * had begun, i.e. last. */
void tp_note_release(void);
int64_t tp_notes(void);
/* Notes seen by the most recent deleter call; -1 if none ran since reset. */
int64_t tp_notes_at_delete(void);

/* Consumes a tensor a binding exported: checks it is a compact float32 CPU
 * tensor, sums its elements into *sum, then calls its deleter once. Returns
 * 0, or -1 (tensor left alone) when it is NULL or not such a tensor. */
int32_t tp_consume_versioned(DLManagedTensorVersioned *t, double *sum);
int32_t tp_consume_legacy(DLManagedTensor *t, double *sum);

#ifdef __cplusplus
}
#endif

#endif /* HURRAY_TESTS_DLPACK_PRODUCER_H_ */
