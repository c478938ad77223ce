// SPDX-License-Identifier: Apache-2.0
/* Fixture for packaging.header_docs_rejects: each declaration below breaks
 * one rule of check_doc_comments.cmake, which must name all of them. Never
 * compiled or installed. */

/* Lacks the Threads part.
 *
 * Parameters:
 *   h  [in]  a handle
 * Returns: HURRAY_OK, always.
 * On failure: cannot fail.
 * Spec: docs/impl/c-ffi.md §3. */
HURRAY_API int32_t hurray_bad_threads(const hurray_buffer *h);

/* Leaves parameter n out.
 *
 * Parameters:
 *   src  [in]  a handle
 * Returns: HURRAY_OK, always.
 * On failure: cannot fail.
 * Threads: any.
 * Spec: docs/impl/c-ffi.md §4. */
HURRAY_API int32_t hurray_bad_param(const hurray_buffer *src, size_t n);

/* A (void) function without "Parameters: none".
 *
 * Returns: HURRAY_OK, always.
 * On failure: cannot fail.
 * Threads: any.
 * Spec: docs/impl/c-ffi.md §1. */
HURRAY_API int32_t hurray_bad_void(void);

/* Returns before Parameters.
 *
 * Returns: HURRAY_OK, always.
 * Parameters:
 *   x  [in]  a value
 * On failure: cannot fail.
 * Threads: any.
 * Spec: docs/impl/c-ffi.md §1. */
HURRAY_API int32_t hurray_bad_order(int32_t x);

/* The comment above belongs to the macro, not to the function. */
#define HURRAY_BAD_MACRO 1
HURRAY_API int32_t hurray_bad_nocomment(int32_t x);

/* A status listed under Cost.
 *
 * Parameters:
 *   x  [in]  a value
 * Returns: HURRAY_OK, or
 *   HURRAY_ERR_INVALID_ARGUMENT  x < 0
 * Cost: one allocation.
 *   HURRAY_ERR_OUT_OF_MEMORY  the allocation failed
 * On failure: nothing.
 * Threads: any.
 * Spec: docs/impl/c-ffi.md §1. */
HURRAY_API HURRAY_NODISCARD int32_t hurray_bad_cost(int32_t x);

/* Can fail, yet its status may be ignored.
 *
 * Parameters:
 *   x  [in]  a value
 * Returns: HURRAY_OK, or
 *   HURRAY_ERR_INVALID_ARGUMENT  x < 0
 * On failure: nothing.
 * Threads: any.
 * Spec: docs/impl/c-ffi.md §1. */
HURRAY_API int32_t hurray_bad_discard(int32_t x);

/* Cannot fail, yet says nothing about why it returns a status.
 *
 * Parameters:
 *   x  [in]  a value
 * Returns: HURRAY_OK.
 * On failure: nothing.
 * Threads: any.
 * Spec: docs/impl/c-ffi.md §1. */
HURRAY_API int32_t hurray_bad_always(int32_t x);

/* Cost after On failure.
 *
 * Parameters:
 *   x  [in]  a value
 * Returns: HURRAY_OK, always.
 * On failure: cannot fail.
 * Cost: none.
 * Threads: any.
 * Spec: docs/impl/c-ffi.md §1. */
HURRAY_API int32_t hurray_bad_cost_order(int32_t x);
