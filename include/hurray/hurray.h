// SPDX-License-Identifier: Apache-2.0
/*
 * hurray.h - the normative C ABI of libhurray.
 *
 * A Hurray buffer handle (hurray_buffer) describes tensor memory with DLPack's
 * vocabulary and carries one release callback that its holder calls exactly
 * once. The handle layout and its contract are specified in
 * docs/spec/buffer-protocol.md. Each function's contract is its comment
 * below; docs/impl/c-ffi.md (what spans functions: loading, threads,
 * versions, errors, the checking mode) and docs/impl/gpu.md (the GPU back
 * ends) point here. Section references ("spec §N", "c-ffi §N", "gpu §N")
 * point to those three documents.
 *
 * It compiles as C11 and C++17 and includes the project's DLPack 1.3
 * declarations (hurray/dlpack.h, installed beside it). A translation unit
 * that included an upstream dlpack.h first (PyTorch's, TVM FFI's) keeps that
 * one: both share one include guard and one set of definitions, and any
 * DLPack 1.x header is accepted here.
 *
 * Conventions that hold for every function here unless its comment says
 * otherwise:
 *  - It returns a hurray_status. HURRAY_OK is 0; on any other value a message
 *    naming the problem is stored for the calling thread (hurray_last_error).
 *  - It never throws, aborts or prints.
 *  - A failed call consumes nothing: every handle or tensor passed in stays
 *    owned by the caller, unchanged, and output arguments are left untouched.
 *  - It is safe to call from any thread; calls on distinct objects never race.
 *    Two threads must not pass the same hurray_buffer object to functions
 *    that consume or clear it at the same time.
 *  - Checking mode (c-ffi §9): a function that reads or consumes a handle
 *    passed in (hurray_buffer_validate, hurray_buffer_extent, hurray_share,
 *    hurray_view, hurray_to_dlpack* and their batch forms, hurray_copy*)
 *    also returns HURRAY_ERR_RELEASED when
 *    that handle is tracked and its reference is already gone, found before
 *    any of its fields is read. The Returns lists below do not repeat it.
 *  - A function whose status can report an error the caller must handle is
 *    HURRAY_NODISCARD. The exceptions are hurray_buffer_release (its only
 *    error is a NULL handle, and releases sit in cleanup paths) and the
 *    functions that always return HURRAY_OK.
 *  - A few functions always return HURRAY_OK (the DLPack deleters' wrappers,
 *    hurray_set_diagnostic_hook). They return a status anyway so that every
 *    member of the function table (c-ffi §8) has the same result type and a
 *    later failure mode needs no new signature; the table's next major
 *    version may make them return void instead.
 *
 * Every function's comment has the same parts, in this order: a one-line
 * summary and any description, then
 *   Parameters:  each parameter, with [in], [out], [in, out] or
 *                [in, consumed on success] ("Parameters: none" for (void));
 *   Returns:     HURRAY_OK and each error status with its cause (or the value
 *                returned by the functions that return no status);
 *   Cost:        optional: the allocations or waits a call makes, where they
 *                matter; it names no status;
 *   On failure:  what the caller still owns and what is left untouched
 *                ("cannot fail" for the functions that always succeed);
 *   Threads:     which threads may call it and where callbacks run;
 *   Spec:        the sections that specify it.
 * tests/packaging/check_doc_comments.cmake fails the build's tests when a
 * function declared with HURRAY_API lacks one of them, has them out of
 * order, lists a status under Cost:, or breaks the HURRAY_NODISCARD rule.
 */
#ifndef HURRAY_HURRAY_H_
#define HURRAY_HURRAY_H_

#include <stddef.h>
#include <stdint.h>

#include "dlpack.h"
#include "hurray/version.h"

/* The DLPack vocabulary used below is that of major version 1; a 0.x
 * dlpack.h included before this header is refused here. */
#if !defined(DLPACK_MAJOR_VERSION) || DLPACK_MAJOR_VERSION != 1
#error "hurray.h needs a DLPack 1.x dlpack.h (an older one was included first)"
#endif

/* HURRAY_API marks every function of the ABI. While libhurray itself is
 * built (HURRAY_BUILDING_LIBRARY, set by CMakeLists.txt) it gives the symbol
 * default visibility, so that it is exported although the library is
 * compiled with hidden visibility; for callers it expands to nothing. The
 * library is built for Linux only (CMake refuses Windows and macOS): there
 * is no __declspec(dllexport) form, and on Windows it expands to nothing. */
#if defined(_WIN32)
#define HURRAY_API
#elif defined(HURRAY_BUILDING_LIBRARY)
#define HURRAY_API __attribute__((visibility("default")))
#else
#define HURRAY_API
#endif

/* HURRAY_NODISCARD marks functions whose status must be looked at (GCC and
 * Clang warn when it is ignored); empty for other compilers. Which functions
 * carry it: the conventions above. */
#if defined(__GNUC__) || defined(__clang__)
#define HURRAY_NODISCARD __attribute__((warn_unused_result))
#else
#define HURRAY_NODISCARD
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------------------------------------------------------------------
 * Versions (c-ffi §1)
 * ------------------------------------------------------------------------- */

/* HURRAY_VERSION_MAJOR, _MINOR, _PATCH, HURRAY_VERSION (the three packed as
 * (major << 16) | (minor << 8) | patch) and HURRAY_VERSION_STRING come from
 * hurray/version.h, which the build generates from CMake's project(VERSION).
 * The minor number grows when functions are added; the major number when
 * anything existing changes. */

/* Layout version of hurray_buffer written in its `version` field (spec §2). */
#define HURRAY_BUFFER_VERSION 1u

/* DLPack version libhurray writes into the tensors it exports (spec §6):
 * the major... */
#define HURRAY_DLPACK_MAJOR 1u
/* ...and the minor. */
#define HURRAY_DLPACK_MINOR 3u

/* Largest ndim accepted anywhere (spec §3). */
#define HURRAY_MAX_NDIM 64

/* Runtime version of the loaded library (which may differ from the
 * HURRAY_VERSION the caller was compiled with).
 *
 * Parameters: none
 * Returns: the library's version packed like HURRAY_VERSION:
 *   (major << 16) | (minor << 8) | patch.
 * On failure: cannot fail.
 * Threads: safe from any thread.
 * Spec: docs/impl/c-ffi.md §1. */
HURRAY_API uint32_t hurray_version(void);

/* Checks that the loaded library can serve a caller compiled against header
 * version `header_version`. Programs that dlopen the library call it first.
 *
 * Parameters:
 *   header_version  [in]  the caller's HURRAY_VERSION
 * Returns: HURRAY_OK when the major numbers are equal and the library's
 *   minor.patch is at least the header's, and, while the major is 0 (any
 *   minor release may change the ABI), the minor numbers are equal too; else
 *   HURRAY_ERR_UNSUPPORTED_VERSION  with a message that names both versions.
 * On failure: nothing to release; only the thread's message is set.
 * Threads: safe from any thread.
 * Spec: docs/impl/c-ffi.md §1. */
HURRAY_API HURRAY_NODISCARD int32_t hurray_check_version(uint32_t header_version);

/* ---------------------------------------------------------------------------
 * Status codes and errors (c-ffi §2)
 * ------------------------------------------------------------------------- */

/* Status returned by the functions of this header, as an int32_t (the enum
 * type itself never crosses the ABI). HURRAY_OK is 0; every other value
 * comes with a message for the calling thread (hurray_last_error).
 * (c-ffi §0) */
typedef enum hurray_status {
  HURRAY_OK = 0,                      /* success */
  HURRAY_ERR_INVALID_ARGUMENT = 1,    /* NULL pointer, bad ndim/shape/strides */
  HURRAY_ERR_UNSUPPORTED_VERSION = 2, /* DLPack major != 1, handle layout, library */
  HURRAY_ERR_UNSUPPORTED_DTYPE = 3,   /* unknown code, bits not valid for code, lanes 0 */
  HURRAY_ERR_UNSUPPORTED_DEVICE = 4,  /* device type unknown or not served, device unavailable */
  HURRAY_ERR_OUT_OF_MEMORY = 5,       /* host or device allocation failed */
  HURRAY_ERR_OVERFLOW = 6,            /* element count or byte extent beyond 64-bit range */
  HURRAY_ERR_DEVICE = 7,              /* a device runtime call failed */
  HURRAY_ERR_INTERNAL = 8,            /* a bug in libhurray; please report it */
  HURRAY_ERR_RELEASED = 9,            /* checking mode: the handle was already released
                                         or consumed (c-ffi §9) */
  HURRAY_ERR_LEAKED = 10,             /* checking mode: a handle still live when the
                                         leak report ran (sent to the hook, c-ffi §9) */
  HURRAY_ERR_IPC = 11,                /* cross-process: a malformed or refused message
                                         (descriptor, fds, memfd), a peer of another
                                         user, a failed socket or system call
                                         (docs/impl/ipc.md) */
  HURRAY_ERR_IPC_CLOSED = 12,         /* cross-process: the peer closed the connection
                                         before a message began (end of stream) */
  HURRAY_ERR_IPC_TIMEOUT = 13         /* cross-process: no message began before the
                                         socket's SO_RCVTIMEO ran out, or none was
                                         waiting on a non-blocking socket; nothing
                                         was consumed and the connection is usable
                                         (docs/impl/ipc.md §7) */
} hurray_status;

/* Message describing the last failed call made by this thread.
 *
 * Parameters: none
 * Returns: the message, or "" if no call of this thread failed yet; never
 *   NULL. The pointer stays valid for the life of the thread; its text
 *   changes at this thread's next failing call. Successful calls leave it as
 *   it is.
 * On failure: cannot fail.
 * Threads: safe from any thread; the message is thread-local.
 * Spec: docs/impl/c-ffi.md §2. */
HURRAY_API const char *hurray_last_error(void);

/* Short constant name of a status code ("HURRAY_ERR_OVERFLOW").
 *
 * Parameters:
 *   status  [in]  any value
 * Returns: the name of the hurray_status enumerator with that value, or
 *   "HURRAY_UNKNOWN_STATUS" for any other value. Never NULL; static storage.
 * On failure: cannot fail.
 * Threads: safe from any thread.
 * Spec: docs/impl/c-ffi.md §2. */
HURRAY_API const char *hurray_status_name(int32_t status);

/* ---------------------------------------------------------------------------
 * The buffer handle (spec §2-§5)
 * ------------------------------------------------------------------------- */

/* Flag bits of hurray_buffer::flags. The first three have DLPack's bit values
 * and meanings; bits 3..63 are reserved, must be 0 when produced, and are
 * carried through conversions unchanged. (spec §2.3) */
#define HURRAY_FLAG_READ_ONLY ((uint64_t)1 << 0)      /* no writes through data */
#define HURRAY_FLAG_IS_COPIED ((uint64_t)1 << 1)      /* a private copy for this holder */
#define HURRAY_FLAG_SUBBYTE_PADDED ((uint64_t)1 << 2) /* sub-byte elements take a byte each */

/* DLPack device type values (DLDeviceType) used in hurray_device. Any other
 * type DLPack 1.3 defines is also valid in a handle; these are the ones
 * libhurray can allocate and copy (kDLCPU always, the GPU types as the GPU
 * section below says). */
#define HURRAY_DEVICE_CPU 1           /* kDLCPU: host memory */
#define HURRAY_DEVICE_CUDA 2          /* kDLCUDA: CUDA device memory */
#define HURRAY_DEVICE_CUDA_HOST 3     /* kDLCUDAHost: CUDA pinned host memory */
#define HURRAY_DEVICE_ROCM 10         /* kDLROCM: ROCm/HIP device memory */
#define HURRAY_DEVICE_ROCM_HOST 11    /* kDLROCMHost: ROCm/HIP pinned host memory */
#define HURRAY_DEVICE_CUDA_MANAGED 13 /* kDLCUDAManaged: CUDA managed memory */

/* Device of the memory: DLPack's device type value and device ordinal
 * (0 for CPU, pinned host and managed memory). 8 bytes. (spec §2.2) */
typedef struct hurray_device {
  int32_t device_type; /* a DLDeviceType value (HURRAY_DEVICE_*) */
  int32_t device_id;   /* ordinal, >= 0 */
} hurray_device;

/* Element type with DLPack's DLDataType meaning: `code` is a DLDataTypeCode
 * value, `bits` the width of one lane, `lanes` the vector width (1 for
 * scalars). 4 bytes. (spec §2.2) */
typedef struct hurray_dtype {
  uint8_t code;   /* DLDataTypeCode: 0 int, 1 uint, 2 float, ... 17 (spec §3) */
  uint8_t bits;   /* bits of one lane */
  uint16_t lanes; /* >= 1 */
} hurray_dtype;

/* Release callback: frees whatever the handle keeps alive. Called exactly once
 * per handle, from any thread, with the handle's user_data. (spec §4) */
typedef void (*hurray_release_fn)(void *user_data);

/* A Hurray buffer handle. 80 bytes on 64-bit targets; see spec §2 for the
 * exact offsets. It is a plain value: it may be copied or moved with memcpy,
 * because release_fn receives user_data and never the handle's address. Of
 * all copies of one handle exactly one release is made.
 *
 * Frozen forever (same offset and meaning in every layout version): version,
 * release_fn, user_data. A consumer that does not know `version` must read
 * nothing else and must still call release_fn(user_data).
 *
 * A live handle has release_fn != NULL. An empty (or released) handle has
 * release_fn == NULL and describes nothing. */
typedef struct hurray_buffer {
  uint32_t version;             /* HURRAY_BUFFER_VERSION                     @0  */
  uint32_t reserved;            /* 0                                         @4  */
  hurray_release_fn release_fn; /* see spec §4; NULL when empty          @8  */
  void *user_data;              /* passed to release_fn                      @16 */
  uint64_t flags;               /* HURRAY_FLAG_* bits                        @24 */
  void *data;                   /* base address; may be NULL if no elements  @32 */
  uint64_t byte_offset;         /* bytes from data to element (0,...,0)      @40 */
  hurray_device device;         /*                                           @48 */
  hurray_dtype dtype;           /*                                           @56 */
  int32_t ndim;                 /* 0..HURRAY_MAX_NDIM                        @60 */
  const int64_t *shape;         /* ndim extents; NULL allowed when ndim == 0 @64 */
  const int64_t *strides;       /* ndim strides in elements; non-NULL when
                                   ndim > 0; NULL allowed when ndim == 0     @72 */
} hurray_buffer;

/* Releases a handle: zeroes *h (so it reads as empty), then calls
 * release_fn(user_data) if the handle was live. *h is zeroed before the call
 * because the callback may free the memory h points into. The handle is not
 * validated: a live handle of any layout version is released.
 *
 * Parameters:
 *   h  [in, out]  the handle; its reference is consumed and *h is left empty.
 *                 Releasing an empty handle does nothing.
 * Returns: HURRAY_OK (an empty handle included), or
 *   HURRAY_ERR_INVALID_ARGUMENT  when h is NULL.
 * On failure: nothing is called or written.
 * Threads: safe from any thread for distinct handles; release_fn runs on the
 *   calling thread.
 * Spec: docs/spec/buffer-protocol.md §4; docs/impl/c-ffi.md §3. */
HURRAY_API int32_t hurray_buffer_release(hurray_buffer *h);

/* Checks that *h is a live, well-formed handle (spec §3): known version,
 * ndim in range, shape/strides present when ndim > 0, no negative extent,
 * dtype valid for DLPack 1.3, known device type with device_id >= 0, data
 * non-NULL unless it has no elements, and element count and byte extent
 * within 64-bit range. Reads only; consumes nothing. A device type DLPack
 * 1.3 defines is valid here even when this build cannot serve it.
 *
 * Parameters:
 *   h  [in]  the handle; only read
 * Returns: HURRAY_OK, or, with a message naming the field:
 *   HURRAY_ERR_INVALID_ARGUMENT     h NULL or empty; ndim outside
 *                                   0..HURRAY_MAX_NDIM; shape or strides NULL
 *                                   while ndim > 0; a negative extent;
 *                                   device_id < 0; data NULL although the
 *                                   tensor has elements
 *   HURRAY_ERR_UNSUPPORTED_VERSION  version is not HURRAY_BUFFER_VERSION
 *   HURRAY_ERR_UNSUPPORTED_DTYPE    code unknown to DLPack 1.3, bits not
 *                                   valid for the code, or lanes 0
 *   HURRAY_ERR_UNSUPPORTED_DEVICE   a device type DLPack 1.3 does not define
 *   HURRAY_ERR_OVERFLOW             element count, byte_offset or byte extent
 *                                   beyond signed 64-bit range
 * On failure: nothing changed; *h stays owned by the caller.
 * Threads: safe from any thread (reads only).
 * Spec: docs/spec/buffer-protocol.md §3; docs/impl/c-ffi.md §3. */
HURRAY_API HURRAY_NODISCARD int32_t hurray_buffer_validate(const hurray_buffer *h);

/* Size facts of a valid handle. `numel` is the product of shape (1 for
 * ndim 0); `itemsize_bits` is bits*lanes per element (rounded up to a whole
 * number of bytes when HURRAY_FLAG_SUBBYTE_PADDED is set); `lowest`/`highest`
 * bound the bytes touched, relative to `data` (highest is one past the last
 * byte; both 0 when numel is 0; lowest may be negative with negative
 * strides); `contiguous` is 1 when the elements are in compact row-major
 * order (always 1 when numel is 0), else 0. (spec §3.3) */
typedef struct hurray_extent {
  int64_t numel;         /* number of elements */
  int64_t itemsize_bits; /* bits one element occupies in memory */
  int64_t lowest;        /* first byte touched, relative to data */
  int64_t highest;       /* one past the last byte touched, relative to data */
  int32_t contiguous;    /* 1: compact row-major; 0: not */
  int32_t reserved;      /* written as 0 */
} hurray_extent;

/* Fills *out with the size facts of *h after validating it like
 * hurray_buffer_validate. Reads only.
 *
 * Parameters:
 *   h    [in]   the handle; only read
 *   out  [out]  the size facts; written only on success
 * Returns: HURRAY_OK, or
 *   HURRAY_ERR_INVALID_ARGUMENT  when out is NULL (checked first),
 *   or any error of hurray_buffer_validate for *h.
 * On failure: *out untouched; *h unchanged and still owned by the caller.
 * Threads: safe from any thread (reads only).
 * Spec: docs/spec/buffer-protocol.md §3.3; docs/impl/c-ffi.md §3. */
HURRAY_API HURRAY_NODISCARD int32_t hurray_buffer_extent(const hurray_buffer *h,
                                                         hurray_extent *out);

/* ---------------------------------------------------------------------------
 * Fan-out (spec §5, c-ffi §4)
 * ------------------------------------------------------------------------- */

/* Turns one handle into `n` independent handles for n consumers.
 *
 * On success *src is consumed and zeroed, and out[0..n-1] are live handles
 * that describe the same memory as *src did, each carrying one reference.
 * The release of the source runs exactly once, when the last of all handles
 * sharing it is released, on the thread that releases last. Sharing a handle
 * that came from hurray_share adds n - 1 to the same count (no second
 * control block, no nesting, no allocation). n == 1 moves *src to out[0].
 * A handle this function issued and that is unchanged since is not
 * validated again (its control block recorded the checked source); any
 * other *src is (spec §3.4).
 *
 * Parameters:
 *   src  [in, consumed on success]  a live, valid handle; zeroed on success
 *   n    [in]   number of handles to make, 1 .. 2^32
 *   out  [out]  caller-provided array of n handles, written only on success;
 *               may be src itself
 * Returns: HURRAY_OK, or
 *   HURRAY_ERR_INVALID_ARGUMENT  n == 0 or n > 2^32 (too large for the
 *                                count); out NULL; src NULL or empty
 *   HURRAY_ERR_OUT_OF_MEMORY     the one control block cannot be allocated
 *   or any other error of hurray_buffer_validate for *src.
 * Cost: one allocation the first time a handle is shared with n > 1, none
 *   afterwards.
 * On failure: nothing consumed (*src unchanged, still the caller's); out
 *   untouched.
 * Threads: safe from any thread; the out handles may be released from any
 *   threads, in any order.
 * Spec: docs/spec/buffer-protocol.md §5; docs/impl/c-ffi.md §4. */
HURRAY_API HURRAY_NODISCARD int32_t hurray_share(hurray_buffer *src, size_t n, hurray_buffer *out);

/* What hurray_view makes of its source: the view's own element type, shape,
 * strides and byte offset over the source's `data` pointer. 48 bytes on
 * 64-bit targets. (spec §5.1) */
typedef struct hurray_view_desc {
  uint64_t byte_offset;   /* bytes from src's data to the view's element
                             (0,...,0), like hurray_buffer::byte_offset    @0  */
  uint64_t flags;         /* flag bits the view adds to src's: only
                             HURRAY_FLAG_READ_ONLY and
                             HURRAY_FLAG_SUBBYTE_PADDED                    @8  */
  hurray_device device;   /* {0, 0}: src's device; anything else must equal
                             src's device (a view never changes device)    @16 */
  hurray_dtype dtype;     /* the view's element type                       @24 */
  int32_t ndim;           /* 0..HURRAY_MAX_NDIM                            @28 */
  const int64_t *shape;   /* ndim extents; copied; NULL allowed at ndim 0  @32 */
  const int64_t *strides; /* ndim strides in elements of `dtype` (DLPack's
                             rule); copied; NULL: compact row-major        @40 */
} hurray_view_desc;

/* Turns a handle into a view: a handle over part of the same memory with
 * its own dtype, shape, strides and byte offset, which holds the source's
 * reference to the memory.
 *
 * On success *src is consumed and zeroed and *out is a live handle with
 * src's data pointer and device, desc's byte_offset, dtype, ndim, shape and
 * strides (copied into a block the view owns), and src's flags with desc's
 * added: read-only stays read-only, IS_COPIED, SUBBYTE_PADDED and reserved
 * bits are kept, and a view can add READ_ONLY or SUBBYTE_PADDED but never
 * drop a flag. The element size of both handles follows spec §3.3 (bits *
 * lanes, packed unless SUBBYTE_PADDED; sub-byte addresses rounded down to a
 * byte), so a packed int4 source can be viewed as uint8 bytes and back.
 * The view must lie within the source: every byte it touches (spec §3.3,
 * relative to data) is a byte src touches. A view without elements touches
 * nothing and is always within bounds. The source's release runs exactly
 * once, after the view and every handle made from it (hurray_share of the
 * view, a DLPack export, a view of the view) are released, on the thread
 * that releases last.
 *
 * Why it consumes src: like hurray_share, it moves the one reference src
 * carries rather than adding one, so hurray_share stays the only function
 * that adds references and the number of live handles never changes behind
 * the caller's back (ADR-009); a handle of a foreign producer could not
 * lend a reference anyway without being rewritten. Views are made from a
 * handle the caller can spare: several views of one buffer are
 * hurray_share(&src, n, parts) and one hurray_view per part (the share is
 * one atomic add when src is already shared). The view is validated when it
 * is made; a later hurray_share or DLPack export of it does not validate it
 * again while it is unchanged (spec §3.4).
 *
 * Parameters:
 *   src   [in, consumed on success]  a live, valid handle; zeroed on success
 *   desc  [in]   what the view describes; only read, and its arrays need not
 *                outlive the call
 *   out   [out]  the view, owned by the caller; written only on success; may
 *                be src itself
 * Returns: HURRAY_OK, or, with a message naming the field at fault:
 *   HURRAY_ERR_INVALID_ARGUMENT   desc or out NULL (checked first); src NULL,
 *                                 empty or malformed; desc.flags with bits
 *                                 other than READ_ONLY and SUBBYTE_PADDED;
 *                                 desc.device neither {0, 0} nor src's
 *                                 device; desc.ndim outside
 *                                 0..HURRAY_MAX_NDIM; desc.shape NULL while
 *                                 ndim > 0; a negative extent; the view
 *                                 reaches outside src (the message gives
 *                                 both byte ranges)
 *   HURRAY_ERR_UNSUPPORTED_DTYPE  desc.dtype not valid for DLPack 1.3
 *   HURRAY_ERR_OVERFLOW           the view's element count, byte_offset or
 *                                 byte extent beyond signed 64-bit range
 *   HURRAY_ERR_OUT_OF_MEMORY      the view's block cannot be allocated
 *   or any other error of hurray_buffer_validate for *src.
 * Cost: one allocation (the view's block: 88 bytes plus 16 per dimension,
 *   from the per-thread block cache up to 4 dimensions); src and the view
 *   are checked with the exact arithmetic of spec §3.3.
 * On failure: nothing consumed (*src unchanged, still the caller's); *out
 *   untouched.
 * Threads: safe from any thread; the view may be released from any thread.
 * Spec: docs/spec/buffer-protocol.md §5.1, §3.3; docs/impl/c-ffi.md §4. */
HURRAY_API HURRAY_NODISCARD int32_t hurray_view(hurray_buffer *src, const hurray_view_desc *desc,
                                                hurray_buffer *out);

/* ---------------------------------------------------------------------------
 * DLPack conversion (spec §6, c-ffi §5)
 * ------------------------------------------------------------------------- */

/* Exports a handle as a DLManagedTensorVersioned.
 *
 * On success *src is consumed and zeroed and *out receives a tensor whose
 * deleter calls the handle's release exactly once: version 1.3, flags
 * carried over, strides always given when ndim > 0, shape/strides/
 * byte_offset kept exactly (shape and strides point at the handle's own
 * arrays, not copied). A handle that libhurray imported from a
 * DLManagedTensorVersioned and that still describes that tensor exactly
 * (same fields, shape/strides pointers and flags) is unwrapped: *out is the
 * original tensor itself, with the 1.x version and the strides its producer
 * gave it. Such a handle, or one hurray_share issued and unchanged since, was
 * validated when it entered and is not validated again; any other *src is
 * (spec §3.4).
 *
 * Parameters:
 *   src  [in, consumed on success]  a live, valid handle; zeroed on success
 *   out  [out]  the tensor, now the caller's; written only on success
 * Returns: HURRAY_OK, or
 *   HURRAY_ERR_INVALID_ARGUMENT  out NULL; src NULL, empty or malformed
 *   HURRAY_ERR_OUT_OF_MEMORY     the export block cannot be allocated
 *   or any other error of hurray_buffer_validate for *src.
 * Cost: at most one heap allocation (DLPack struct and handle together);
 *   none when unwrapping.
 * On failure: nothing consumed (*src unchanged, still the caller's); *out
 *   untouched.
 * Threads: safe from any thread; the tensor's deleter may be called from any
 *   thread.
 * Spec: docs/spec/buffer-protocol.md §6.2, §6.4; docs/impl/c-ffi.md §5. */
HURRAY_API HURRAY_NODISCARD int32_t
hurray_to_dlpack_versioned(hurray_buffer *src, struct DLManagedTensorVersioned **out);

/* Exports a handle as a legacy (unversioned) DLManagedTensor.
 *
 * Same as hurray_to_dlpack_versioned, except that flags cannot be expressed
 * there and are dropped (READ_ONLY included: prefer the versioned form for
 * read-only memory), and that the handle unwrapped is one libhurray imported
 * from a DLManagedTensor that it still describes exactly (same fields and
 * shape/strides pointers).
 *
 * Parameters:
 *   src  [in, consumed on success]  a live, valid handle; zeroed on success
 *   out  [out]  the tensor, now the caller's; written only on success
 * Returns: HURRAY_OK, or
 *   HURRAY_ERR_INVALID_ARGUMENT  out NULL; src NULL, empty or malformed
 *   HURRAY_ERR_OUT_OF_MEMORY     the export block cannot be allocated
 *   or any other error of hurray_buffer_validate for *src.
 * Cost: at most one heap allocation; none when unwrapping.
 * On failure: nothing consumed (*src unchanged, still the caller's); *out
 *   untouched.
 * Threads: safe from any thread; the tensor's deleter may be called from any
 *   thread.
 * Spec: docs/spec/buffer-protocol.md §6.2, §6.4; docs/impl/c-ffi.md §5. */
HURRAY_API HURRAY_NODISCARD int32_t hurray_to_dlpack(hurray_buffer *src,
                                                     struct DLManagedTensor **out);

/* Options for the import functions (bit set). HURRAY_IMPORT_DEFAULT is none;
 * HURRAY_IMPORT_CHECK_DEVICE_POINTER is in the GPU section below. */
#define HURRAY_IMPORT_DEFAULT 0u

/* Imports a DLManagedTensorVersioned as a handle.
 *
 * On success the caller no longer owns `t`: out's release calls t->deleter(t)
 * exactly once with the very pointer passed here (a NULL deleter is legal and
 * means nothing to free). Flags are carried as they are. shape/strides of
 * *out point into `t` (no copy) when `t` gives strides or ndim is 0; a
 * tensor older than 1.2 with NULL strides is read as compact row-major and
 * costs one allocation. A tensor that libhurray itself exported and that
 * still describes its handle exactly (same fields, shape/strides pointers and
 * flags) is unwrapped: *out is the original handle and the wrapper is freed;
 * it is not validated again (its handle was validated at export), every
 * other tensor is (spec §3.4).
 *
 * Parameters:
 *   t        [in, consumed on success]  the tensor
 *   options  [in]   HURRAY_IMPORT_DEFAULT (0) or
 *                   HURRAY_IMPORT_CHECK_DEVICE_POINTER (GPU section below)
 *   out      [out]  the new live handle, owned by the caller; written only
 *                   on success
 * Returns: HURRAY_OK, or, with a message naming the field at fault
 *   ("tensor.dl_tensor.shape[1] is -3 (must be >= 0)"):
 *   HURRAY_ERR_INVALID_ARGUMENT     t or out NULL; other option bits; ndim
 *                                   outside 0..HURRAY_MAX_NDIM; shape NULL
 *                                   while ndim > 0; a negative extent;
 *                                   strides NULL while ndim > 0 from version
 *                                   1.2 on; data NULL although the tensor
 *                                   has elements; device_id < 0
 *   HURRAY_ERR_UNSUPPORTED_VERSION  version.major != 1
 *   HURRAY_ERR_UNSUPPORTED_DTYPE    dtype not valid for DLPack 1.3
 *   HURRAY_ERR_UNSUPPORTED_DEVICE   a device type DLPack 1.3 does not define
 *   HURRAY_ERR_OVERFLOW             element count, byte_offset or byte extent
 *                                   beyond signed 64-bit range
 *   HURRAY_ERR_OUT_OF_MEMORY        the compact strides cannot be allocated
 *   and, with HURRAY_IMPORT_CHECK_DEVICE_POINTER, the errors it adds.
 * On failure: the caller still owns `t` (nothing was called on it); *out
 *   untouched.
 * Threads: safe from any thread; out's release, and so t->deleter, runs on
 *   whichever thread releases the handle.
 * Spec: docs/spec/buffer-protocol.md §6.3, §6.4; docs/impl/c-ffi.md §5. */
HURRAY_API HURRAY_NODISCARD int32_t hurray_from_dlpack_versioned(struct DLManagedTensorVersioned *t,
                                                                 uint32_t options,
                                                                 hurray_buffer *out);

/* Imports a legacy DLManagedTensor as a handle.
 *
 * Same as hurray_from_dlpack_versioned, except: there is no version to check;
 * NULL strides are read as compact row-major at any ndim (one allocation when
 * ndim > 0); the handle's flags are 0, but a tensor that libhurray exported
 * with hurray_to_dlpack and that still describes its handle exactly (same
 * fields and shape/strides pointers) unwraps to that handle, whose own flags
 * come back unchanged.
 *
 * Parameters:
 *   t        [in, consumed on success]  the tensor
 *   options  [in]   HURRAY_IMPORT_DEFAULT (0) or
 *                   HURRAY_IMPORT_CHECK_DEVICE_POINTER (GPU section below)
 *   out      [out]  the new live handle, owned by the caller; written only
 *                   on success
 * Returns: HURRAY_OK, or, with a message naming the field at fault:
 *   HURRAY_ERR_INVALID_ARGUMENT     t or out NULL; other option bits; ndim
 *                                   outside 0..HURRAY_MAX_NDIM; shape NULL
 *                                   while ndim > 0; a negative extent; data
 *                                   NULL although the tensor has elements;
 *                                   device_id < 0
 *   HURRAY_ERR_UNSUPPORTED_DTYPE    dtype not valid for DLPack 1.3
 *   HURRAY_ERR_UNSUPPORTED_DEVICE   a device type DLPack 1.3 does not define
 *   HURRAY_ERR_OVERFLOW             element count, byte_offset or byte extent
 *                                   beyond signed 64-bit range
 *   HURRAY_ERR_OUT_OF_MEMORY        the compact strides cannot be allocated
 *   and, with HURRAY_IMPORT_CHECK_DEVICE_POINTER, the errors it adds.
 * On failure: the caller still owns `t` (nothing was called on it); *out
 *   untouched.
 * Threads: safe from any thread; out's release, and so t->deleter, runs on
 *   whichever thread releases the handle.
 * Spec: docs/spec/buffer-protocol.md §6.3, §6.4; docs/impl/c-ffi.md §5. */
HURRAY_API HURRAY_NODISCARD int32_t hurray_from_dlpack(struct DLManagedTensor *t, uint32_t options,
                                                       hurray_buffer *out);

/* Drops a DLManagedTensorVersioned nobody will consume: calls t->deleter(t)
 * if t and its deleter are non-NULL.
 *
 * Parameters:
 *   t  [in, consumed]  the tensor, or NULL (then nothing happens)
 * Returns: HURRAY_OK, always (why a status at all: the conventions above).
 * On failure: cannot fail.
 * Threads: safe from any thread; the deleter runs on the calling thread.
 * Spec: docs/impl/c-ffi.md §5. */
HURRAY_API int32_t hurray_dlpack_versioned_delete(struct DLManagedTensorVersioned *t);

/* Drops a legacy DLManagedTensor nobody will consume: calls t->deleter(t)
 * if t and its deleter are non-NULL.
 *
 * Parameters:
 *   t  [in, consumed]  the tensor, or NULL (then nothing happens)
 * Returns: HURRAY_OK, always (why a status at all: the conventions above).
 * On failure: cannot fail.
 * Threads: safe from any thread; the deleter runs on the calling thread.
 * Spec: docs/impl/c-ffi.md §5. */
HURRAY_API int32_t hurray_dlpack_delete(struct DLManagedTensor *t);

/* Batched conversion (c-ffi §5.1). Each function below converts n tensors or
 * handles in one call, all or nothing: every element is checked exactly as
 * the single call checks it (the same statuses; messages name the element,
 * "ts[3].dl_tensor.shape[1] is -3 (must be >= 0)") and everything that can
 * fail (allocation included) is done before anything is consumed, so a
 * failed batch consumes nothing and writes no output but *failed_index.
 * n == 0 succeeds and touches nothing (the arrays may then be NULL). The
 * elements must be distinct: a tensor or handle listed twice is consumed
 * twice, as two single calls would consume it. */

/* Value of *failed_index when a batch fails for a reason that is no
 * element's (a NULL array, unknown options). */
#define HURRAY_BATCH_NO_INDEX SIZE_MAX

/* Imports n DLManagedTensorVersioned as n handles in one call: for each i,
 * what hurray_from_dlpack_versioned(ts[i], options, &out[i]) does (including
 * the unwrap of libhurray's own exports, spec §6.4), all or nothing.
 *
 * Parameters:
 *   ts            [in, consumed on success]  array of n tensors, each
 *                 non-NULL; the array itself is only read
 *   n             [in]   number of tensors; 0 does nothing
 *   options       [in]   as for hurray_from_dlpack_versioned, applied to
 *                        every tensor
 *   out           [out]  array of n handles; out[i] is ts[i]'s, owned by the
 *                        caller; written only on success
 *   failed_index  [out]  on failure, the index of the tensor at fault, or
 *                        HURRAY_BATCH_NO_INDEX; may be NULL; written only on
 *                        failure
 * Returns: HURRAY_OK, or
 *   HURRAY_ERR_INVALID_ARGUMENT  ts or out NULL while n > 0; options with
 *                                unknown bits; ts[i] NULL
 *   HURRAY_ERR_OUT_OF_MEMORY     the compact strides of a tensor without
 *                                strides cannot be allocated
 *   or any other error of hurray_from_dlpack_versioned for ts[i] (the first
 *   element at fault, in index order; the message names it "ts[i]").
 * Cost: no allocation beyond the single call's (compact strides for a
 *   tensor older than 1.2 without strides); each tensor's fields are read
 *   twice (check, then write), the second time from cache.
 * On failure: the caller still owns every ts[i] (nothing was called on any
 *   of them); out untouched.
 * Threads: safe from any thread; each handle's release, and so its tensor's
 *   deleter, runs on whichever thread releases it, in any order.
 * Spec: docs/spec/buffer-protocol.md §6.3-§6.5; docs/impl/c-ffi.md §5.1. */
HURRAY_API HURRAY_NODISCARD int32_t
hurray_from_dlpack_versioned_n(struct DLManagedTensorVersioned *const *ts, size_t n,
                               uint32_t options, hurray_buffer *out, size_t *failed_index);

/* Imports n legacy DLManagedTensor as n handles in one call: for each i, what
 * hurray_from_dlpack(ts[i], options, &out[i]) does, all or nothing.
 *
 * Parameters:
 *   ts            [in, consumed on success]  array of n tensors, each
 *                 non-NULL; the array itself is only read
 *   n             [in]   number of tensors; 0 does nothing
 *   options       [in]   as for hurray_from_dlpack, applied to every tensor
 *   out           [out]  array of n handles; out[i] is ts[i]'s, owned by the
 *                        caller; written only on success
 *   failed_index  [out]  on failure, the index of the tensor at fault, or
 *                        HURRAY_BATCH_NO_INDEX; may be NULL; written only on
 *                        failure
 * Returns: HURRAY_OK, or
 *   HURRAY_ERR_INVALID_ARGUMENT  ts or out NULL while n > 0; options with
 *                                unknown bits; ts[i] NULL
 *   HURRAY_ERR_OUT_OF_MEMORY     the compact strides of a tensor without
 *                                strides cannot be allocated
 *   or any other error of hurray_from_dlpack for ts[i] (the first element
 *   at fault; the message names it "ts[i]").
 * Cost: no allocation beyond the single call's (compact strides for a
 *   tensor without strides).
 * On failure: the caller still owns every ts[i]; out untouched.
 * Threads: safe from any thread; each handle's release, and so its tensor's
 *   deleter, runs on whichever thread releases it, in any order.
 * Spec: docs/spec/buffer-protocol.md §6.3-§6.5; docs/impl/c-ffi.md §5.1. */
HURRAY_API HURRAY_NODISCARD int32_t hurray_from_dlpack_n(struct DLManagedTensor *const *ts,
                                                         size_t n, uint32_t options,
                                                         hurray_buffer *out, size_t *failed_index);

/* Exports n handles as n DLManagedTensorVersioned in one call: for each i,
 * what hurray_to_dlpack_versioned(&src[i], &out[i]) does (including the
 * unwrap of handles imported from such tensors, spec §6.4), all or nothing.
 * Each exported tensor is independent: its own deleter, called exactly once
 * by its consumer, releases only its own handle.
 *
 * Parameters:
 *   src           [in, consumed on success]  array of n live, valid
 *                 handles; each zeroed on success
 *   n             [in]   number of handles; 0 does nothing
 *   out           [out]  array of n tensor pointers; out[i] is src[i]'s, now
 *                        the caller's; written only on success
 *   failed_index  [out]  on failure, the index of the handle at fault, or
 *                        HURRAY_BATCH_NO_INDEX; may be NULL; written only on
 *                        failure
 * Returns: HURRAY_OK, or
 *   HURRAY_ERR_INVALID_ARGUMENT  src or out NULL while n > 0; src[i] empty
 *                                or malformed
 *   HURRAY_ERR_OUT_OF_MEMORY     an export block cannot be allocated
 *   or any other error of hurray_to_dlpack_versioned for src[i] (the first
 *   element at fault; the message names it "src[i]").
 * Cost: what the n single calls cost: one export block per handle that is
 *   not unwrapped, from the per-thread block cache, none allocated unless
 *   all are.
 * On failure: nothing consumed (every src[i] unchanged, still the caller's);
 *   out untouched. One exception, in checking mode only (c-ffi §9): a
 *   tracked src[i] whose reference another thread consumes or releases
 *   while the batch runs (a double release, reported) fails the batch with
 *   HURRAY_ERR_RELEASED after the elements before it were exported; out[j]
 *   is then written for every j != i and out[i] is NULL.
 * Threads: safe from any thread; each tensor's deleter may be called from any
 *   thread, in any order.
 * Spec: docs/spec/buffer-protocol.md §6.2, §6.4, §6.5; docs/impl/c-ffi.md §5.1. */
HURRAY_API HURRAY_NODISCARD int32_t hurray_to_dlpack_versioned_n(
    hurray_buffer *src, size_t n, struct DLManagedTensorVersioned **out, size_t *failed_index);

/* Exports n handles as n legacy DLManagedTensor in one call: for each i, what
 * hurray_to_dlpack(&src[i], &out[i]) does (flags dropped), all or nothing.
 *
 * Parameters:
 *   src           [in, consumed on success]  array of n live, valid
 *                 handles; each zeroed on success
 *   n             [in]   number of handles; 0 does nothing
 *   out           [out]  array of n tensor pointers; out[i] is src[i]'s, now
 *                        the caller's; written only on success
 *   failed_index  [out]  on failure, the index of the handle at fault, or
 *                        HURRAY_BATCH_NO_INDEX; may be NULL; written only on
 *                        failure
 * Returns: HURRAY_OK, or
 *   HURRAY_ERR_INVALID_ARGUMENT  src or out NULL while n > 0; src[i] empty
 *                                or malformed
 *   HURRAY_ERR_OUT_OF_MEMORY     an export block cannot be allocated
 *   or any other error of hurray_to_dlpack for src[i] (the first element at
 *   fault; the message names it "src[i]").
 * Cost: one export block per handle that is not unwrapped, none allocated
 *   unless all are.
 * On failure: nothing consumed; out untouched; the checking-mode exception
 *   of hurray_to_dlpack_versioned_n applies.
 * Threads: safe from any thread; each tensor's deleter may be called from any
 *   thread, in any order.
 * Spec: docs/spec/buffer-protocol.md §6.2, §6.4, §6.5; docs/impl/c-ffi.md §5.1. */
HURRAY_API HURRAY_NODISCARD int32_t hurray_to_dlpack_n(hurray_buffer *src, size_t n,
                                                       struct DLManagedTensor **out,
                                                       size_t *failed_index);

/* ---------------------------------------------------------------------------
 * Allocation and copies (spec §7, c-ffi §6)
 * ------------------------------------------------------------------------- */

/* Byte alignment of memory from hurray_alloc on the CPU. */
#define HURRAY_CPU_ALIGNMENT 64

/* Allocation option of hurray_alloc's `flags` (bits 32..63 of those flags
 * are allocation options: they select how the memory is made and are never
 * copied into the handle's flags). HURRAY_ALLOC_SHAREABLE asks for memory
 * another process can map: on kDLCPU an anonymous memfd (memfd_create with
 * MFD_CLOEXEC, sealed with F_SEAL_SHRINK and F_SEAL_GROW, nothing named in
 * /dev/shm) mapped MAP_SHARED and page-aligned; hurray_ipc_export sends such
 * memory without a copy. Its metadata (shape, strides, the block that frees
 * it) lives in ordinary heap memory, never in the shared pages. On kDLCUDA
 * and kDLROCM with hurray_alloc_async and a stream of the device:
 * stream-ordered memory of libhurray's IPC-capable pool of that device
 * (cuMemAllocFromPoolAsync / hipMallocFromPoolAsync from a pool made on
 * first use by cuMemPoolCreate with CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR
 * / hipMemPoolCreate with hipMemHandleTypePosixFileDescriptor), which
 * hurray_ipc_export sends as pool memory (ipc §6, kinds 5 and 6). Other
 * devices, and kDLCUDA or kDLROCM without a stream:
 * HURRAY_ERR_UNSUPPORTED_DEVICE (docs/impl/ipc.md §2);
 * kDLCUDA and kDLROCM memory from hurray_alloc without the option is
 * already sendable (legacy IPC handles, ipc §6; CUDA VMM allocations as
 * POSIX fds). */
#define HURRAY_ALLOC_SHAREABLE ((uint64_t)1 << 32)

/* Allocates uninitialised memory for a (dtype, shape) tensor on `device`
 * as one live handle whose release frees it.
 *
 * The handle has compact row-major strides, byte_offset 0 and the given
 * flags. CPU data (kDLCPU, device_id 0) is aligned to HURRAY_CPU_ALIGNMENT
 * bytes (the handle's shape and strides live in a separate host block)
 * and is a valid non-NULL address even when there are no elements (with
 * HURRAY_ALLOC_SHAREABLE: a page-aligned memfd mapping of at least one
 * page).
 * Sub-byte dtypes are packed
 * unless `flags` has HURRAY_FLAG_SUBBYTE_PADDED. GPU memory: see the GPU
 * section below and gpu §2 (a zero-element GPU tensor gets no device memory
 * and data NULL).
 *
 * Parameters:
 *   device  [in]   where to allocate
 *   dtype   [in]   element type
 *   ndim    [in]   0 .. HURRAY_MAX_NDIM
 *   shape   [in]   ndim extents, >= 0 (zero extents are allowed); copied,
 *                  so it need not outlive the call; may be NULL when ndim
 *                  is 0
 *   flags   [in]   HURRAY_FLAG_* bits, copied into the handle, and
 *                  allocation options (HURRAY_ALLOC_SHAREABLE), not copied
 *   out     [out]  the new handle, owned by the caller; written only on
 *                  success
 * Returns: HURRAY_OK, or
 *   HURRAY_ERR_INVALID_ARGUMENT    out NULL; reserved flag bits set; ndim
 *                                  out of range; shape NULL while ndim > 0;
 *                                  a negative extent; device_id < 0
 *   HURRAY_ERR_UNSUPPORTED_DTYPE   dtype not valid for DLPack 1.3
 *   HURRAY_ERR_UNSUPPORTED_DEVICE  device type unknown, not served by this
 *                                  build or unavailable (GPU runtime missing,
 *                                  no such device ordinal); kDLCPU with a
 *                                  device_id other than 0;
 *                                  HURRAY_ALLOC_SHAREABLE on a device other
 *                                  than kDLCPU (GPU memory from plain
 *                                  hurray_alloc is sendable as it is,
 *                                  docs/impl/ipc.md §6; kDLCUDA or kDLROCM
 *                                  with a stream: hurray_alloc_async)
 *   HURRAY_ERR_OVERFLOW            element count or byte size beyond 64-bit
 *                                  range
 *   HURRAY_ERR_OUT_OF_MEMORY       host or device allocation failed
 *   HURRAY_ERR_IPC                 HURRAY_ALLOC_SHAREABLE: memfd_create,
 *                                  ftruncate, sealing or mmap failed (the
 *                                  message names the call and errno)
 *   HURRAY_ERR_DEVICE              a GPU runtime call failed otherwise
 *                                  (docs/impl/gpu.md)
 * On failure: *out untouched; nothing stays allocated.
 * Threads: safe from any thread; the handle may be released from any thread.
 * Spec: docs/spec/buffer-protocol.md §7.1; docs/impl/c-ffi.md §6;
 *   docs/impl/gpu.md §2. */
HURRAY_API HURRAY_NODISCARD int32_t hurray_alloc(hurray_device device, hurray_dtype dtype,
                                                 int32_t ndim, const int64_t *shape, uint64_t flags,
                                                 hurray_buffer *out);

/* Copies the elements of *src into new compact row-major memory on `device`
 * (same dtype and shape).
 *
 * The new handle's flags are HURRAY_FLAG_IS_COPIED plus src's
 * HURRAY_FLAG_SUBBYTE_PADDED (the copy is private, hence writable). Host to
 * host copies take any strides. This is hurray_copy_async with a NULL
 * stream: the copy is complete on return; its device pairs are listed there
 * (gpu §4).
 *
 * Parameters:
 *   src     [in]   a live, valid handle; only read, never consumed
 *   device  [in]   where the copy goes
 *   out     [out]  the new handle, owned by the caller; written only on
 *                  success
 * Returns: HURRAY_OK, or
 *   HURRAY_ERR_INVALID_ARGUMENT    out NULL; src NULL, empty or malformed
 *   HURRAY_ERR_UNSUPPORTED_DTYPE   src is not contiguous and its packed
 *                                  element size (bits*lanes) is not a whole
 *                                  number of bytes (non-contiguous packed
 *                                  sub-byte tensors)
 *   HURRAY_ERR_UNSUPPORTED_DEVICE  a device pair this build cannot copy
 *                                  between
 *   HURRAY_ERR_OUT_OF_MEMORY       destination or host staging memory
 *                                  cannot be allocated
 *   HURRAY_ERR_DEVICE              a GPU runtime call failed
 *   or any other error of hurray_buffer_validate (for *src) or hurray_alloc
 *   (for the destination).
 * On failure: *out untouched; nothing stays allocated; *src unchanged.
 * Threads: safe from any thread.
 * Spec: docs/spec/buffer-protocol.md §7.2; docs/impl/c-ffi.md §6;
 *   docs/impl/gpu.md §4. */
HURRAY_API HURRAY_NODISCARD int32_t hurray_copy(const hurray_buffer *src, hurray_device device,
                                                hurray_buffer *out);

/* ===========================================================================
 * GPU memory: stream-ordered allocation, copies between devices, stream
 * ordering, release diagnostics, import checks (docs/impl/gpu.md)
 *
 * CUDA (kDLCUDA, kDLCUDAHost, kDLCUDAManaged) and ROCm/HIP (kDLROCM,
 * kDLROCMHost) memory is served by the vendor library, loaded with dlopen on
 * the first GPU request (never at link time): libcuda.so.1 (or the file named
 * by the environment variable HURRAY_CUDA_DRIVER_PATH) and libamdhip64.so.7,
 * .6, .5, libamdhip64.so (or HURRAY_HIP_LIBRARY_PATH). The variables are read
 * once, at that first request. When the library is missing or cannot work
 * (the CUDA toolkit's stub, no device, driver too old) every GPU request
 * fails with HURRAY_ERR_UNSUPPORTED_DEVICE and a message naming what was
 * looked for and what went wrong; CPU paths are unaffected. (gpu §1)
 *
 * A runtime call that fails makes the request fail with
 * HURRAY_ERR_OUT_OF_MEMORY when the runtime reports its memory exhausted,
 * HURRAY_ERR_UNSUPPORTED_DEVICE when cuMemAllocAsync / hipMallocAsync is not
 * supported on the device, and HURRAY_ERR_DEVICE otherwise; the message names
 * the call, its error and the device. (gpu §2)
 *
 * Release of GPU memory (through hurray_buffer_release or a DLPack deleter)
 * may happen on any thread: the owning device is made current around the
 * free and the thread's own current context/device is restored (a thread
 * that had no CUDA context is left with none). Releases never fail loudly:
 * after the driver was torn down (process exit), or in a child process after
 * fork(), the memory is left alone and counted; a free the driver refuses,
 * or a failure to make the owner current or to restore the thread's own
 * context/device (cuCtxPopCurrent / hipSetDevice), is counted and passed to
 * the diagnostic hook. (gpu §3)
 *
 * Allocations, copies and stream waits use the same scoping. If restoring
 * the thread's context/device fails after the work itself succeeded, the
 * call fails with HURRAY_ERR_DEVICE (the message names the call and says the
 * device may still be current), memory it allocated is freed again and *out
 * is untouched; work already queued on a stream stays queued. (gpu §3)
 * ======================================================================== */

/* Option bit for hurray_from_dlpack_versioned and hurray_from_dlpack: before
 * taking the tensor, ask the GPU runtime whether `data` really is memory of
 * the claimed device type and device_id (cuPointerGetAttributes /
 * hipPointerGetAttributes). Only GPU device types are checked (kDLCPU and
 * other types pass unchecked) and tensors with no elements are not checked.
 * The check runs after the tensor's own validation, loads the vendor library
 * if needed and costs one driver call.
 * Errors added: UNSUPPORTED_DEVICE (runtime unavailable, or the claimed
 * device_id names no device: a kDLCUDA/kDLROCM ordinal the runtime does not
 * see, or not 0 for the pinned and managed types; the runtime is not asked),
 * INVALID_ARGUMENT (the pointer belongs elsewhere; the message says what the
 * runtime reports), DEVICE (the runtime failed the query; OUT_OF_MEMORY if
 * it reported its memory exhausted).
 * On failure the caller still owns the tensor. (gpu §5) */
#define HURRAY_IMPORT_CHECK_DEVICE_POINTER (1u << 0)

/* Stream-ordered allocation: like hurray_alloc, but the memory is allocated
 * on `stream` (cuMemAllocAsync / hipMallocAsync) and the handle's release
 * frees it on that same stream (cuMemFreeAsync / hipFreeAsync), from
 * whichever thread releases, without blocking the host or the device.
 *
 * The memory is usable by work queued on `stream` after this call; other
 * streams must be ordered after it (hurray_stream_wait), and their work on it
 * must be ordered before the release, since the free is queued on `stream`.
 * CU_STREAM_PER_THREAD / hipStreamPerThread (2) names the stream of the
 * thread that uses the handle, so a free queued through it by another
 * releasing thread would land on that thread's stream, unordered with the
 * allocating thread's work. With it the allocation is synchronous
 * (cuMemAlloc / hipMalloc): usable by every stream; its release first waits
 * for every thread's per-thread stream of the device (CUDA: the legacy
 * stream, cuStreamSynchronize(CU_STREAM_LEGACY), which waits for every
 * blocking stream and leaves non-blocking streams and their graph captures
 * alone; never the whole context, which would invalidate another thread's
 * capture; HIP: hipDeviceSynchronize), then frees with cuMemFree / hipFree.
 * stream == NULL: exactly hurray_alloc (synchronous, any device type).
 * HURRAY_ALLOC_SHAREABLE on kDLCUDA or kDLROCM with a stream of the device
 * (not the per-thread stream 2): the memory comes from libhurray's
 * IPC-capable pool of the device (cuMemAllocFromPoolAsync /
 * hipMallocFromPoolAsync; the pool made on first use with cuMemPoolCreate
 * and CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR / hipMemPoolCreate and
 * hipMemHandleTypePosixFileDescriptor, and kept; CUDA makes it again in a
 * new incarnation of the primary context, as cuDevicePrimaryCtxReset
 * destroyed the old one) instead
 * of the device's default pool, so that hurray_ipc_export / hurray_ipc_send
 * can send it (ipc §6, kinds 5 and 6); it is released like other
 * stream-ordered memory (cuMemFreeAsync / hipFreeAsync on `stream`).
 *
 * Parameters:
 *   device  [in]   kDLCUDA or kDLROCM when stream != NULL; any type when NULL
 *   dtype   [in]   as for hurray_alloc
 *   ndim    [in]   as for hurray_alloc
 *   shape   [in]   as for hurray_alloc
 *   flags   [in]   as for hurray_alloc
 *   stream  [in]   a CUstream (kDLCUDA) or hipStream_t (kDLROCM) of `device`,
 *                  including CU_STREAM_LEGACY (1), the one legacy default
 *                  stream shared by all threads, or 2 (see above), or NULL.
 *                  It must stay valid (not destroyed) until the handle
 *                  (and every handle shared from it, and every DLPack
 *                  tensor exported from it) has been released: the
 *                  release queues the free on it and cannot tell a
 *                  destroyed stream, nor one whose handle the driver has
 *                  since given to a new stream (CUDA and HIP do not
 *                  validate stream handles). A release while `stream` is
 *                  being captured into a graph defers the free until the
 *                  capture has ended (docs/impl/gpu.md §2). CUDA: when
 *                  `stream` is blocking (created without
 *                  CU_STREAM_NON_BLOCKING, or CU_STREAM_LEGACY) the
 *                  deferral keeps no reference to it: libhurray's own
 *                  thread frees the memory on the legacy stream as soon
 *                  as no blocking stream of the device captures, and
 *                  `stream` may be destroyed as soon as its capture has
 *                  ended. A non-blocking stream (and, on HIP, any stream)
 *                  is kept: it must stay valid until the deferral is
 *                  retired, which the caller makes sure of by calling
 *                  hurray_retire_deferred_frees after ending the capture
 *                  and before destroying the stream (a later allocation
 *                  or release of the vendor may retire it earlier).
 *   out     [out]  the new handle, owned by the caller; written only on
 *                  success
 * Returns: HURRAY_OK, or the errors of hurray_alloc, and
 *   HURRAY_ERR_UNSUPPORTED_DEVICE  stream != NULL and the device type is
 *                                  not kDLCUDA or kDLROCM; the runtime lacks
 *                                  stream-ordered allocation (no
 *                                  hipMallocAsync/hipFreeAsync); the
 *                                  device does not support it
 *                                  (CUDA_ERROR_NOT_SUPPORTED /
 *                                  hipErrorNotSupported)
 *                                  HURRAY_ALLOC_SHAREABLE with the
 *                                  per-thread stream, a CUDA stream of
 *                                  another device, or a CUDA driver / HIP
 *                                  runtime without the memory-pool IPC
 *                                  entry points (before ROCm 5.2)
 *   HURRAY_ERR_OUT_OF_MEMORY       the device pool is exhausted
 *   HURRAY_ERR_DEVICE              other runtime failures
 * On failure: *out untouched; nothing stays allocated.
 * Threads: safe from any thread; the handle may be released from any thread
 *   (the free is queued on `stream` whichever thread releases).
 * Spec: docs/impl/gpu.md §2. */
HURRAY_API HURRAY_NODISCARD int32_t hurray_alloc_async(hurray_device device, hurray_dtype dtype,
                                                       int32_t ndim, const int64_t *shape,
                                                       uint64_t flags, void *stream,
                                                       hurray_buffer *out);

/* Byte alignment of every tensor of a group (hurray_alloc_group) on every
 * device: each tensor's data address (data + byte_offset) is a multiple of
 * it. 256 is CUDA's and HIP's allocation alignment, four AVX-512 vectors,
 * and more than any DLPack consumer asks for (DLPack leaves it open). */
#define HURRAY_GROUP_ALIGNMENT 256u

/* One tensor of a group: a compact row-major tensor of `dtype` and `shape`. */
typedef struct hurray_tensor_desc {
  hurray_dtype dtype;   /* the element type                               @0  */
  int32_t ndim;         /* 0..HURRAY_MAX_NDIM                              @4  */
  const int64_t *shape; /* ndim extents; copied; NULL allowed at ndim 0   @8  */
  uint64_t flags;       /* the handle's flags: 0, HURRAY_FLAG_READ_ONLY,
                           HURRAY_FLAG_SUBBYTE_PADDED                     @16 */
} hurray_tensor_desc;

/* Allocates n tensors in one allocation of `device` (a tensor group): each
 * is its own handle with one reference, and the memory is freed once, after
 * the last of the n handles is released, in any order, from any threads.
 * Tensor i is compact row-major at a data address that is a multiple of
 * HURRAY_GROUP_ALIGNMENT, after tensor i - 1 (zero-element tensors take no
 * bytes). Each handle exports to DLPack and crosses processes as any handle
 * does; with HURRAY_ALLOC_SHAREABLE the whole group is one memfd (CPU) or
 * one pool allocation (CUDA, with a stream), so a group crosses processes
 * as one allocation. The memory's contents are unspecified.
 *
 * Parameters:
 *   device        [in]   as hurray_alloc (kDLCPU, kDLCUDA, kDLCUDAHost,
 *                        kDLCUDAManaged, kDLROCM, kDLROCMHost)
 *   n             [in]   number of tensors; 0 does nothing and succeeds
 *   descs         [in]   n descriptions; read only during the call
 *   flags         [in]   allocation options of hurray_alloc (bits 32..63:
 *                        HURRAY_ALLOC_SHAREABLE); handle flags go in descs
 *   stream        [in]   NULL: allocated as hurray_alloc does; else a stream
 *                        of `device`, as hurray_alloc_async takes it
 *   out           [out]  caller-provided array of n handles, written only on
 *                        success
 *   failed_index  [out]  on failure, the index of the description at fault,
 *                        or HURRAY_BATCH_NO_INDEX when none is (an argument,
 *                        the allocation); may be NULL; written only on
 *                        failure
 * Returns: HURRAY_OK, or
 *   HURRAY_ERR_INVALID_ARGUMENT     descs or out NULL (n > 0); n > 2^32; a
 *                                   description's bad ndim, shape or flags
 *   HURRAY_ERR_UNSUPPORTED_DTYPE    a description's dtype
 *   HURRAY_ERR_OVERFLOW             the group's bytes pass 2^62
 *   or any error of hurray_alloc / hurray_alloc_async for the whole group.
 * Cost: one allocation of the memory, one of the count, one host block per
 *   tensor (its shape and strides) and a temporary array of n offsets.
 * On failure: nothing allocated stays allocated; out untouched.
 * Threads: safe from any thread; the handles may be released from any
 *   threads, in any order.
 * Spec: docs/impl/c-ffi.md §6.2; docs/spec/buffer-protocol.md §5. */
HURRAY_API HURRAY_NODISCARD int32_t hurray_alloc_group(hurray_device device, size_t n,
                                                       const hurray_tensor_desc *descs,
                                                       uint64_t flags, void *stream,
                                                       hurray_buffer *out, size_t *failed_index);

/* Retires now the releases of GPU memory that were deferred because their
 * stream was being captured into a graph (docs/impl/gpu.md §2): each one
 * whose memory is on `device`, or whose free waits for a stream of
 * `device`, is tried again, and freed in its usual order unless its stream
 * (or, for the legacy-stream orders, a blocking stream of the device) is
 * still being captured. Deferrals that keep the caller's stream (a
 * non-blocking CUDA stream, any HIP stream: see hurray_alloc_async) are
 * retired only by this call or by a later allocation or release of the
 * vendor, so call it after cuStreamEndCapture / hipStreamEndCapture and
 * before destroying such a stream: when it returns, no deferral of a
 * stream whose capture has ended is kept and no libhurray thread is still
 * using one, so the stream may be destroyed. Deferrals of blocking CUDA
 * streams need no call (libhurray's own thread retires them as soon as the
 * capture ends; this call may retire them first). Frees that fail are
 * counted and reported as for any release (hurray_get_diagnostics), not
 * returned here.
 *
 * Parameters:
 *   device     [in]   selects the runtime and the device: kDLCUDA,
 *                     kDLCUDAHost, kDLCUDAManaged, kDLROCM or kDLROCMHost
 *                     with an existing device_id
 *   remaining  [out]  optional (NULL: not wanted); receives how many
 *                     deferred releases of `device` are still kept because
 *                     their stream is still being captured; written only
 *                     on success
 * Returns: HURRAY_OK (also when nothing was deferred: *remaining 0), or
 *   HURRAY_ERR_UNSUPPORTED_DEVICE  not a GPU device type; the runtime is
 *                                  unavailable (not built in, cannot be
 *                                  loaded, or this is a child forked after
 *                                  the parent loaded it: a forked child
 *                                  never frees its parent's memory); no such
 *                                  device ordinal
 * On failure: nothing retired; *remaining untouched; nothing to release.
 * Threads: safe from any thread; waits for a retirement under way on
 *   another thread to finish first, except inside the diagnostic hook
 *   (that retirement may be waiting for the hook): there it retires nothing
 *   while another is under way, and returns HURRAY_OK with *remaining
 *   counting what is kept.
 * Spec: docs/impl/gpu.md §2. */
HURRAY_API HURRAY_NODISCARD int32_t hurray_retire_deferred_frees(hurray_device device,
                                                                 size_t *remaining);

/* hurray_copy ordered on a stream. Copies the elements of *src into new
 * compact row-major memory on `device` (same dtype and shape) and returns a
 * new live handle in *out with flags HURRAY_FLAG_IS_COPIED plus src's
 * HURRAY_FLAG_SUBBYTE_PADDED.
 *
 * Device pairs: CPU <-> CUDA kinds, CPU <-> ROCm kinds, and any two kinds of
 * the same vendor (including two device ordinals); CPU -> CPU is a host copy,
 * and so is a pinned host source to CPU with a NULL stream (no vendor library
 * is loaded for either). The device made current for the copy, which
 * `stream` must belong to, is the source's ordinal when the source is
 * kDLCUDA/kDLROCM memory, else the destination's when it is, else ordinal 0.
 * With a stream: the copy is queued on `stream`, with the stream's device
 * current, and may still be running on return: the source must stay alive
 * and unchanged until then. A kDLCUDA/kDLROCM destination on the stream's
 * device is allocated stream-ordered on `stream` (its release frees on
 * `stream`, see hurray_alloc_async); one on another device ordinal is
 * allocated synchronously on its own device (cuMemAlloc / hipMalloc), since
 * a stream belongs to one device, and its release waits for `stream` before
 * the free. With the per-thread default stream (2) the copy is queued on the
 * calling thread's stream and the destination is allocated synchronously;
 * its release waits for the per-thread streams of the stream's device (the
 * copying thread's stream 2 cannot be named from another thread; CUDA: that
 * device's legacy stream, as for hurray_alloc_async) before the free.
 * A kDLCPU destination is always complete on return (the stream is
 * synchronised). A source that is not compact row-major is staged through
 * host memory and the call then completes before returning.
 * `stream` must stay valid until the copy's result has been released (as
 * for hurray_alloc_async): the release frees on it or waits for it. While
 * `stream` is being captured into a graph (with NULL: while a blocking
 * stream of the device is), a copy that must wait on the host (a kDLCPU
 * destination, or no stream) is refused before anything is queued; copies
 * that stay on the device are captured as usual.
 *
 * Parameters:
 *   src     [in]   a live, valid handle; only read, never consumed
 *   device  [in]   where the copy goes
 *   stream  [in]   a CUstream / hipStream_t of the device named above, 2 for
 *                  the per-thread default stream, or NULL: the default
 *                  stream and a copy that is complete on return (what
 *                  hurray_copy does)
 *   out     [out]  the new handle, owned by the caller; written only on
 *                  success
 * Returns: HURRAY_OK, or the errors of hurray_copy, those of
 *   hurray_alloc_async for a stream-ordered destination, and
 *   HURRAY_ERR_UNSUPPORTED_DEVICE  CUDA <-> ROCm, or any pair involving
 *                                  another device type
 *   HURRAY_ERR_INVALID_ARGUMENT    the copy must wait on the host for a
 *                                  stream that is being captured (above)
 *   HURRAY_ERR_DEVICE              the runtime fails the copy
 * On failure: *out untouched; nothing stays allocated; *src unchanged. Work
 *   already queued on the stream stays queued.
 * Threads: safe from any thread.
 * Spec: docs/impl/gpu.md §4. */
HURRAY_API HURRAY_NODISCARD int32_t hurray_copy_async(const hurray_buffer *src,
                                                      hurray_device device, void *stream,
                                                      hurray_buffer *out);

/* Makes `consumer_stream` wait, on the device, for all work queued so far on
 * `producer_stream`: an event is recorded on the producer and waited on by
 * the consumer; the host never blocks. This is the synchronisation of the
 * DLPack Python protocol's __dlpack__(stream=...) for memory ordered on a
 * stream (the Python binding's Buffers that carry no event); to hand over
 * the work pending at an earlier moment, record it with hurray_event_record
 * and wait with hurray_event_wait.
 *
 * Parameters:
 *   device           [in]  selects the runtime and the device whose context
 *                          is current during the calls: device type
 *                          kDLCUDA, kDLCUDAHost, kDLCUDAManaged, kDLROCM or
 *                          kDLROCMHost (pinned and managed memory use
 *                          ordinal 0)
 *   producer_stream  [in]  a stream of that device; NULL is the default
 *                          stream
 *   consumer_stream  [in]  a stream of that device; NULL is the default
 *                          stream
 *   Both streams must be valid (not destroyed) during the call; the runtime
 *   does not validate handles, so a destroyed one is undefined behaviour.
 * Returns: HURRAY_OK, also at once for equal streams of a GPU device type
 *   (nothing to do: the runtime is neither loaded nor asked, the ordinal not
 *   checked), or
 *   HURRAY_ERR_UNSUPPORTED_DEVICE  not a GPU type (equal streams included),
 *                                  runtime unavailable, no such device
 *                                  ordinal
 *   HURRAY_ERR_OUT_OF_MEMORY       the runtime reports its memory exhausted
 *                                  (creating the event)
 *   HURRAY_ERR_DEVICE              the runtime refused, e.g. an invalid
 *                                  stream
 * On failure: nothing to release; waits already queued stay queued.
 * Threads: safe from any thread.
 * Spec: docs/impl/gpu.md §4. */
HURRAY_API HURRAY_NODISCARD int32_t hurray_stream_wait(hurray_device device, void *producer_stream,
                                                       void *consumer_stream);

/* An event of a GPU stream (opaque): what was queued on the stream when it
 * was recorded, for other streams to wait for without blocking the host
 * (docs/impl/gpu.md §4, "Events"). Made by hurray_event_record, waited for
 * with hurray_event_wait any number of times, freed by hurray_event_release.
 * It names one device (the one it was recorded with) and holds no buffer. */
typedef struct hurray_event hurray_event;

/* Records an event on `stream`: it stands for all work queued on the stream
 * so far (CUDA: cuEventCreate with CU_EVENT_DISABLE_TIMING, then
 * cuEventRecord, in the device's primary context; HIP:
 * hipEventCreateWithFlags with hipEventDisableTiming, then hipEventRecord,
 * with the device current). Nothing waits on the host. This is how a
 * producer's pending work travels with a tensor (the DLPack stream rule):
 * record on the stream the producer ordered its work on, and let each
 * consumer's stream wait (hurray_event_wait).
 *
 * Capture: while `stream` is being captured into a graph (CUDA: with NULL or
 * CU_STREAM_LEGACY, also while a blocking stream of the device is, when
 * CUDA prohibits using the legacy stream) nothing is created and the call
 * fails: an event recorded there would stand for graph work not yet
 * launched, not for work queued on the stream. The capture is left intact
 * (only cuStreamIsCapturing / hipStreamIsCapturing is asked).
 *
 * Parameters:
 *   device  [in]   selects the runtime and the device whose context is
 *                  current: kDLCUDA, kDLCUDAHost, kDLCUDAManaged, kDLROCM or
 *                  kDLROCMHost (pinned and managed memory name ordinal 0)
 *   stream  [in]   a stream of that device: CUstream / hipStream_t, NULL
 *                  (the default stream: CUDA's legacy stream), CUDA's
 *                  CU_STREAM_LEGACY (1) or CU_STREAM_PER_THREAD (2, the
 *                  calling thread's); valid (not destroyed) during the
 *                  call. It may be destroyed afterwards: the event does
 *                  not hold it.
 *   out     [out]  the new event, owned by the caller (hurray_event_release);
 *                  written only on success
 * Returns: HURRAY_OK, or
 *   HURRAY_ERR_INVALID_ARGUMENT    out is NULL (checked first); `stream` is
 *                                  being captured (above)
 *   HURRAY_ERR_UNSUPPORTED_DEVICE  not a GPU type (kDLCPU has no streams:
 *                                  there is nothing to order), runtime
 *                                  unavailable, no such device ordinal
 *   HURRAY_ERR_OUT_OF_MEMORY       no memory for the event (host or runtime)
 *   HURRAY_ERR_DEVICE              the runtime refused, e.g. an invalid
 *                                  stream, or (CUDA) a stream of another
 *                                  device's context (cuEventRecord needs
 *                                  the event and the stream in one
 *                                  context)
 * The event belongs to the context it was recorded in (CUDA: that
 * incarnation of the device's primary context; HIP: the device): a reset of
 * it (cuDevicePrimaryCtxReset / cudaDeviceReset, hipDeviceReset, by any
 * library of the process) destroys the event; see hurray_event_wait and
 * hurray_event_release for what they do then.
 * On failure: *out untouched; nothing to release; nothing queued.
 * Threads: safe from any thread.
 * Spec: docs/impl/gpu.md §4. */
HURRAY_API HURRAY_NODISCARD int32_t hurray_event_record(hurray_device device, void *stream,
                                                        hurray_event **out);

/* Makes `stream` wait, on the device, for the work `event` stands for (CUDA:
 * cuStreamWaitEvent; HIP: hipStreamWaitEvent): one wait queued, the host
 * never blocks, work queued on the event's stream after the record is not
 * waited for. May be called any number of times, for any streams.
 *
 * Capture: while `stream` is being captured into a graph, CUDA captures the
 * wait as an external event-wait node (CU_EVENT_WAIT_EXTERNAL: the CUDA
 * Programming Guide, "Prohibited and Unhandled Operations", makes waiting
 * on an event recorded outside the capture invalid without it), so every
 * launch of the graph waits for the event: keep the event alive (do not
 * release it) until the last launch of that graph. HIP, which has no such
 * flag, and CUDA's legacy stream (NULL, CU_STREAM_LEGACY) while a blocking
 * stream of the device captures are refused; the capture is left intact.
 *
 * Parameters:
 *   event   [in]   an event from hurray_event_record, not released
 *   stream  [in]   a stream of the event's vendor to wait: CUstream /
 *                  hipStream_t of the event's device (CUDA also accepts
 *                  another device's stream), NULL (the default stream of the
 *                  event's device: CUDA's legacy stream), CUDA's
 *                  CU_STREAM_LEGACY (1) or CU_STREAM_PER_THREAD (2); valid
 *                  during the call
 * Returns: HURRAY_OK, or
 *   HURRAY_ERR_INVALID_ARGUMENT    event is NULL; the wait cannot be
 *                                  captured (above)
 *   HURRAY_ERR_UNSUPPORTED_DEVICE  the runtime is no longer loadable here
 *   HURRAY_ERR_DEVICE              the runtime refused, e.g. an invalid
 *                                  stream; or (CUDA) the device's primary
 *                                  context was reset since the record
 *                                  (cuDevicePrimaryCtxReset /
 *                                  cudaDeviceReset, by any library, revived
 *                                  since or not), which destroyed the
 *                                  event: refused before any runtime call
 *                                  naming the event or the stream, the
 *                                  message says so; record a new event
 * HIP cannot tell a device before and after hipDeviceReset apart (it
 * documents no incarnation): waiting for an event recorded before a
 * hipDeviceReset of its device hands the runtime a deleted handle
 * (undefined behaviour in ROCm). Release a HIP device's events before
 * resetting it (docs/impl/gpu.md §4, "Events after a reset").
 * On failure: nothing queued; the event is unchanged and still the
 *   caller's (after a reset: it can only be released).
 * Threads: safe from any thread, also on one event from several threads at
 *   once, but not concurrently with its release.
 * Spec: docs/impl/gpu.md §4. */
HURRAY_API HURRAY_NODISCARD int32_t hurray_event_wait(const hurray_event *event, void *stream);

/* Frees an event (CUDA: cuEventDestroy; HIP: hipEventDestroy, with its
 * device current); waits already queued on it still happen (the runtime
 * keeps what they need). NULL: nothing to do. In a child after fork(), or
 * (CUDA) after the device's primary context was reset (which destroyed the
 * event), the runtime is not called (and a reset context is not retained
 * again); HIP cannot see a hipDeviceReset, so release a HIP device's events
 * before resetting it (hurray_event_wait). After the runtime's teardown at
 * process exit nothing can be destroyed (counted in
 * hurray_diagnostics.teardown_leaks).
 * A failed destroy leaks the runtime's event and
 * is counted in hurray_diagnostics.failed_releases and sent to the
 * diagnostic hook; the thread's message is left as it was.
 *
 * Parameters:
 *   event  [in, consumed]  an event from hurray_event_record, or NULL; it
 *                          must not be used afterwards
 * Returns: HURRAY_OK, always.
 * On failure: cannot fail.
 * Threads: safe from any thread (not only the recording one), but not
 *   concurrently with a wait on the same event.
 * Spec: docs/impl/gpu.md §4. */
HURRAY_API int32_t hurray_event_release(hurray_event *event);

/* Counters of releases that did not free, since the process started.
 * Cumulative, never reset; a forked child starts with its parent's values. */
typedef struct hurray_diagnostics {
  uint32_t struct_size;           /* in: sizeof(hurray_diagnostics) as compiled;
                                     out: the number of bytes written */
  uint32_t reserved;              /* 0 */
  uint64_t failed_releases;       /* a runtime call of a release failed: the
                                     free (the memory may be leaked), or making
                                     the owner current or restoring the
                                     thread's context/device before or after
                                     it; also sent to the hook */
  uint64_t teardown_leaks;        /* skipped: the driver was already torn down
                                     (CUDA_ERROR_DEINITIALIZED, hipErrorDeinitialized
                                     or hipErrorContextIsDestroyed) */
  uint64_t fork_skipped_releases; /* skipped: released in a child after fork() */
  uint64_t context_reset_skips;   /* skipped: the memory died with its context
                                     (CUDA: the device's primary context was
                                     reset, e.g. by cudaDeviceReset, after the
                                     allocation); also sent to the hook */
  uint64_t stream_fallback_frees; /* always 0 since libhurray stopped asking
                                     the driver whether a stream was
                                     destroyed (a possibly destroyed handle
                                     may not be passed to it): the stream is
                                     the caller's to keep valid until the
                                     release (hurray_alloc_async) */
  uint64_t double_releases;       /* checking mode (c-ffi §9): a tracked handle
                                     released or consumed again after its
                                     reference was gone; caught, the producer's
                                     release not called again; also sent to
                                     the hook (HURRAY_ERR_RELEASED) */
  uint64_t ipc_copies;            /* hurray_ipc_export / hurray_ipc_send of
                                     memory that is not shareable: copied once
                                     into a new memfd (docs/impl/ipc.md §4) */
  uint64_t ipc_returns;           /* exported references given back: every
                                     copy of a message's lifetime fd was
                                     closed (released, discarded or its
                                     holder died) and the sender released its
                                     reference (docs/impl/ipc.md §5) */
} hurray_diagnostics;

/* Fills *out with the counters.
 *
 * Only whole fields that end within out->struct_size are written (a size
 * that ends inside a field leaves that field alone), so older callers stay
 * compatible when fields are added, and on return struct_size holds the
 * number of bytes written.
 *
 * Parameters:
 *   out  [in, out]  struct_size in: set by the caller to
 *                   sizeof(hurray_diagnostics); the counters and struct_size
 *                   out
 * Returns: HURRAY_OK, or
 *   HURRAY_ERR_INVALID_ARGUMENT  out NULL, or struct_size smaller than the
 *                                end of the first counter (failed_releases)
 * On failure: *out untouched.
 * Threads: safe from any thread; the counters are read one by one (relaxed),
 *   not as one snapshot.
 * Spec: docs/impl/gpu.md §3. */
HURRAY_API HURRAY_NODISCARD int32_t hurray_get_diagnostics(hurray_diagnostics *out);

/* Diagnostic hook: receives each failed GPU release as a status
 * (HURRAY_ERR_DEVICE) and a message naming the runtime call, its error and
 * the memory ("cuMemFree failed with CUDA_ERROR_ILLEGAL_ADDRESS (700) on
 * 0x7f.. of kDLCUDA 1"). The message lives only during the call.
 * Called on the releasing thread, possibly inside a DLPack deleter or during
 * process exit; calls are serialised (never two at once). The hook may
 * release GPU memory itself (directly, or through a garbage collector it
 * triggers): a release failing while the hook runs on the same thread is
 * counted in failed_releases but not sent to the hook (that would nest a
 * second call). The hook may call hurray_set_diagnostic_hook: the new hook
 * serves the next failure. It must not wait for another thread's GPU
 * release (that thread may be waiting to call the hook).
 * Releases skipped after a context reset are sent too (HURRAY_ERR_DEVICE,
 * counted in context_reset_skips, not failed_releases). Teardown leaks, fork
 * skips and stream fallbacks are counted only, never sent. The checking mode
 * (c-ffi §9) sends its findings here too: HURRAY_ERR_RELEASED for a caught
 * double release or use of a released handle, HURRAY_ERR_LEAKED for each
 * handle still live at exit; those messages may be longer (a backtrace). */
typedef void (*hurray_diagnostic_hook_fn)(int32_t status, const char *message, void *user);

/* Installs the diagnostic hook (default: none, failures are only counted and
 * nothing is printed).
 *
 * When this returns, the previous hook is no longer running and will not be
 * called again, so its `user` may be freed; the one exception is a call made
 * by the running hook itself, which returns at once (the caller is the
 * previous hook, still running until it returns).
 *
 * Parameters:
 *   hook  [in]  the new hook; NULL removes it
 *   user  [in]  passed to every call of `hook`; not owned by libhurray
 * Returns: HURRAY_OK, always (why a status at all: the conventions above).
 * On failure: cannot fail.
 * Threads: safe from any thread, and from within the hook; waits while the
 *   previous hook runs on another thread.
 * Spec: docs/impl/gpu.md §3. */
HURRAY_API int32_t hurray_set_diagnostic_hook(hurray_diagnostic_hook_fn hook, void *user);

/* ===========================================================================
 * Across processes (docs/impl/ipc.md)
 *
 * A buffer crosses to another process as a message: a versioned descriptor
 * of at most HURRAY_IPC_DESCRIPTOR_MAX bytes (the wire format, byte by byte,
 * is docs/impl/ipc.md §3) and up to HURRAY_IPC_MAX_FDS file descriptors.
 * hurray_ipc_export/hurray_ipc_import make and read messages for any
 * transport that can carry fds (a Unix socket, fork inheritance);
 * hurray_ipc_send/hurray_ipc_recv carry one over a connected Unix-domain
 * socket (SCM_RIGHTS). Linux only: every function here returns
 * HURRAY_ERR_UNSUPPORTED_DEVICE on other systems.
 *
 * Lifetime (ipc §5): each export makes a pipe; its write end (the
 * "lifetime fd") travels in the message, its read end stays with the sender,
 * watched by one internal thread (epoll) started at the first export of the
 * process (again in a forked child). When every copy of the write end is
 * closed, in every process (the receiver's handle released, the message
 * discarded, or its holder died, SIGKILL included), the kernel reports end of
 * file and the sender releases the reference the export consumed, on that
 * thread (or on a thread that exports meanwhile): the producer's release
 * runs once, after the last holder in every process let go. A sender that dies leaves the
 * receivers' mappings valid; their releases then only unmap and close. A process that forks while
 * it holds a message or an imported handle gives the child copies of those fds: the reference comes
 * back once the child, too, has closed them (it does so when it exits).
 * ======================================================================== */

/* Version of the descriptor's wire format this library writes and reads
 * (ipc §3). */
#define HURRAY_IPC_WIRE_VERSION 2u
/* Most file descriptors one message carries. */
#define HURRAY_IPC_MAX_FDS 4
/* Bytes of the largest descriptor (one of ndim 64 takes 1104 for CPU
 * memory, 1272 for GPU memory). */
#define HURRAY_IPC_DESCRIPTOR_MAX 1280
/* A set of handles in one message (hurray_ipc_export_set, docs/impl/ipc.md
 * §10): its descriptor has a magic and a version of its own (set version 1;
 * the single message above keeps wire version 2), at most
 * HURRAY_IPC_SET_MAX_HANDLES handles and at most two fds per distinct
 * allocation (CPU memory two, a GPU allocation the one or two of its kind),
 * so at most HURRAY_IPC_SET_MAX_FDS. hurray_ipc_send_set splits a message's
 * fds into records of at most HURRAY_IPC_SET_FDS_PER_RECORD (the kernel's
 * SCM_MAX_FD is 253 per sendmsg). */
#define HURRAY_IPC_SET_WIRE_VERSION 1u
/* Most handles one set message carries (hurray_ipc_export_set refuses more). */
#define HURRAY_IPC_SET_MAX_HANDLES 65536
/* Most fds one set message carries: two per distinct allocation. */
#define HURRAY_IPC_SET_MAX_FDS (2 * HURRAY_IPC_SET_MAX_HANDLES)
/* Most fds hurray_ipc_send_set puts in one sendmsg record (SCM_MAX_FD is
 * 253); a set with more is sent as several records of one message. */
#define HURRAY_IPC_SET_FDS_PER_RECORD 252

/* One message: the descriptor and the fds it needs. A plain value; whoever
 * holds it owns its fds until hurray_ipc_import or hurray_ipc_message_discard
 * consumes them (copying the struct does not duplicate them). */
typedef struct hurray_ipc_message {
  uint32_t size;                            /* bytes used in `bytes` */
  uint32_t nfds;                            /* entries used in `fds` */
  int32_t fds[HURRAY_IPC_MAX_FDS];          /* owned by the holder; unused: -1 */
  uint8_t bytes[HURRAY_IPC_DESCRIPTOR_MAX]; /* the descriptor (ipc §3) */
} hurray_ipc_message;

/* Options of hurray_ipc_export and hurray_ipc_send (bits). */
#define HURRAY_IPC_DEFAULT 0u
/* Refuse memory that is not shareable instead of copying it. */
#define HURRAY_IPC_ZERO_COPY_ONLY (1u << 0)

/* Turns a handle into a message another process can import.
 *
 * Shareable memory is sent without a copy: memory from hurray_alloc with
 * HURRAY_ALLOC_SHAREABLE, a buffer received by hurray_ipc_import, and a
 * hurray_share of either, whose elements lie within that memory. Other
 * kDLCPU memory is copied once into a new sealed memfd (compact row-major,
 * flags HURRAY_FLAG_IS_COPIED plus src's READ_ONLY and SUBBYTE_PADDED;
 * counted in hurray_diagnostics.ipc_copies) and *src is released at once,
 * unless `options` has HURRAY_IPC_ZERO_COPY_ONLY. The message carries the
 * memfd and the lifetime fd (ipc §5); the sender keeps the reference *src
 * had until every copy of the lifetime fd is closed.
 *
 * GPU device memory (ipc §6) is always sent without a copy (never through
 * the host; `options` changes nothing for it): kDLCUDA memory of cuMemAlloc
 * (hurray_alloc without a stream, or a share of it) as a CUDA legacy IPC
 * handle (cuIpcGetMemHandle, kind 3), kDLROCM memory of hipMalloc as a HIP
 * IPC handle (kind 4), through the run-time-loaded driver; the message
 * carries the handle of the whole allocation, where the data lies in it,
 * and the lifetime fd. kDLCUDA memory of a CUDA VMM mapping (cuMemCreate +
 * cuMemMap, recognised by cuMemRetainAllocationHandle, whose reference is
 * dropped again) goes as kind 2: the allocation exported as a POSIX fd
 * (cuMemExportToShareableHandle), which it must have been created for
 * (CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR in requestedHandleTypes), and
 * the lifetime fd. kDLCUDA stream-ordered memory of an IPC-capable pool
 * (cuPointerGetAttribute(CU_POINTER_ATTRIBUTE_MEMPOOL_HANDLE) names a pool
 * made with CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR: hurray_alloc_async
 * with HURRAY_ALLOC_SHAREABLE, or the caller's own cuMemPoolCreate pool)
 * goes as kind 5: the pool's POSIX fd (cuMemPoolExportToShareableHandle),
 * the allocation's 64 bytes of cuMemPoolExportPointer data and the
 * lifetime fd; the message of this function always carries the pool's fd,
 * while hurray_ipc_send sends it once per connection (kind 6 after the
 * first). The receiver frees its imported pointer (cuMemFree) before the
 * lifetime fd closes, so the sender's free comes after it, as
 * cuMemPoolImportPointer requires. Memory of a pool that cannot be
 * exported (the device's default pool: cuMemAllocAsync, hurray_alloc_async
 * without the option) is refused, nothing consumed, with a message naming
 * what to allocate instead. Every GPU message names its device by UUID
 * (cuDeviceGetUuid_v2 / hipDeviceGetUuid) and its sending process
 * (ipc §6.1). A kDLCUDA / kDLROCM buffer received by hurray_ipc_import from a
 * legacy IPC handle (kinds 3, 4), or a share of it, is forwarded: the
 * message is its original sender's, with a duplicate of the lifetime fd.
 * Synchronisation (ipc §6): no host wait. A GPU export creates an
 * interprocess event (cuEventCreate with CU_EVENT_INTERPROCESS |
 * CU_EVENT_DISABLE_TIMING / hipEventCreateWithFlags with
 * hipEventInterprocess | hipEventDisableTiming) in the device's primary
 * context, records it on the legacy default stream (CU_STREAM_LEGACY /
 * HIP's null stream) and carries its IPC handle in the message; the
 * importer's stream waits for it on the device. The legacy default stream
 * is ordered after all prior work of the blocking streams of that context,
 * per-thread default streams included; work on non-blocking streams
 * (CU_STREAM_NON_BLOCKING / hipStreamNonBlocking) is then the caller's to
 * order: record on that stream with hurray_ipc_export_async. Work in other
 * contexts (the caller's own cuCtxCreate contexts) is the caller's to
 * finish. The event lives until every copy of the lifetime fd is closed.
 *
 * Parameters:
 *   src      [in, consumed on success]  a live, valid handle; zeroed on
 *            success
 *   options  [in]   HURRAY_IPC_DEFAULT or HURRAY_IPC_ZERO_COPY_ONLY
 *   out      [out]  the message, owned by the caller (its fds); written only
 *            on success
 * Returns: HURRAY_OK, or
 *   HURRAY_ERR_INVALID_ARGUMENT    out NULL; src NULL, empty or malformed;
 *                                  unknown option bits; CUDA and HIP: the
 *                                  stream the event goes on is being
 *                                  captured into a graph, or it is the
 *                                  legacy default (null) stream while a
 *                                  blocking stream of the device captures
 *                                  (asked with cuStreamIsCapturing /
 *                                  hipStreamIsCapturing first: nothing
 *                                  made, the capture left valid)
 *   HURRAY_ERR_UNSUPPORTED_DEVICE  memory neither kDLCPU nor exportable
 *                                  GPU memory (ipc §6): pinned or managed
 *                                  memory; stream-ordered memory of a pool
 *                                  that cannot be exported (the default
 *                                  pool: hurray_alloc_async without
 *                                  HURRAY_ALLOC_SHAREABLE, cuMemAllocAsync,
 *                                  any hipMallocAsync); memory received
 *                                  from another process's pool; memory the driver will
 *                                  not export; a VMM allocation created
 *                                  without the POSIX-fd handle type; a GPU tensor without
 *                                  elements; the vendor not in this build
 *                                  or its driver missing or lacking IPC
 *                                  or the device UUID entry point;
 *                                  HURRAY_IPC_ZERO_COPY_ONLY and the CPU
 *                                  memory is not shareable (the message
 *                                  says which); not Linux
 *   HURRAY_ERR_DEVICE              GPU memory: a driver call failed
 *                                  (cuEventRecord, cuIpcGetEventHandle,
 *                                  ...; call and error in the message)
 *   HURRAY_ERR_UNSUPPORTED_DTYPE   a copy was needed of a non-contiguous
 *                                  tensor of packed sub-byte elements
 *   HURRAY_ERR_OUT_OF_MEMORY       the bookkeeping or the copy's memory
 *                                  could not be allocated
 *   HURRAY_ERR_IPC                 pipe2, dup, memfd_create, mmap, epoll or
 *                                  the watcher thread failed (call and errno
 *                                  in the message)
 *   or any other error of hurray_buffer_validate for *src.
 *   HURRAY_ERR_RELEASED  checking mode (c-ffi §9): *src is a tracked handle
 *                        whose reference is already gone
 * On failure: nothing consumed (*src unchanged, still the caller's); *out
 *   untouched; no fd left open.
 * Threads: safe from any thread. The sender's reference is released later,
 *   on the watcher thread or on a thread in hurray_ipc_export /
 *   hurray_ipc_send (each first handles up to 16 returns that are already
 *   due, ipc §5), so the producer's release must be callable from any
 *   thread (spec §4).
 * Spec: docs/impl/ipc.md §4, §5. */
HURRAY_API HURRAY_NODISCARD int32_t hurray_ipc_export(hurray_buffer *src, uint32_t options,
                                                      hurray_ipc_message *out);

/* hurray_ipc_export with the GPU export's event recorded on `stream`
 * instead of the legacy default stream (the DLPack `stream` rule): the
 * receiver waits for the work queued on `stream` before the call, and for
 * nothing else. Kind 1 (kDLCPU) ignores `stream`.
 *
 * Parameters:
 *   src      [in, consumed on success]  as for hurray_ipc_export
 *   options  [in]   as for hurray_ipc_export
 *   stream   [in]   a CUstream / hipStream_t of the primary context of the
 *                   memory's device, 2 for the per-thread default stream,
 *                   or NULL: the legacy default stream (what
 *                   hurray_ipc_export does)
 *   out      [out]  as for hurray_ipc_export
 * Returns: as hurray_ipc_export; HURRAY_ERR_DEVICE also when the event
 *   cannot be recorded on `stream`.
 * On failure: as hurray_ipc_export; no event is left.
 * Threads: as hurray_ipc_export.
 * Spec: docs/impl/ipc.md §6. */
HURRAY_API HURRAY_NODISCARD int32_t hurray_ipc_export_async(hurray_buffer *src, uint32_t options,
                                                            void *stream, hurray_ipc_message *out);

/* Closes the fds of a message that will not be imported (a sender's
 * undelivered message, a receiver's unwanted one); the sender's reference
 * then comes back to it (once no other copy of the lifetime fd is open).
 *
 * Parameters:
 *   m  [in, out]  the message; its fds are closed and nfds set to 0. A
 *                 message with nfds 0 is left as it is.
 * Returns: HURRAY_OK, or
 *   HURRAY_ERR_INVALID_ARGUMENT  m NULL, or nfds > HURRAY_IPC_MAX_FDS (then
 *                                the HURRAY_IPC_MAX_FDS entries are closed
 *                                all the same and nfds set to 0)
 * On failure: m NULL: nothing done.
 * Threads: safe from any thread for distinct messages.
 * Spec: docs/impl/ipc.md §4. */
HURRAY_API HURRAY_NODISCARD int32_t hurray_ipc_message_discard(hurray_ipc_message *m);

/* Makes a live handle of a message hurray_ipc_export made (in this or
 * another process): the memfd is mapped MAP_SHARED (read-only when the
 * descriptor has HURRAY_FLAG_READ_ONLY), so writes are seen by every process
 * that maps it. GPU memory (kinds 2, 3 and 4, ipc §6) names its device by
 * UUID: the importer uses its own ordinal of that GPU (the processes may
 * number their GPUs differently, CUDA_VISIBLE_DEVICES / HIP_VISIBLE_DEVICES),
 * and the handle's device_id is that ordinal. Kinds 3 and 4 are opened with
 * cuIpcOpenMemHandle (CU_IPC_MEM_LAZY_ENABLE_PEER_ACCESS) in the device's
 * primary context / hipIpcOpenMemHandle with the device current; the
 * handle's release closes it (cuIpcCloseMemHandle / hipIpcCloseMemHandle)
 * and then the lifetime fd. A CUDA VMM allocation (kind 2) is imported
 * from its fd (cuMemImportFromShareableHandle; the fd is then closed),
 * mapped at a new reservation (cuMemAddressReserve, cuMemMap) and made
 * read-write for the device (cuMemSetAccess), in its primary context; the
 * release undoes that (cuMemUnmap, cuMemAddressFree, cuMemRelease) and
 * then closes the lifetime fd. A GPU message that comes back to the process
 * that exported it (its sender identity, ipc §6.1, and its lifetime fd
 * name one of this process's live exports) is not opened (the drivers
 * refuse one's own handle): the handle shares the exported memory, holds
 * the lifetime fd, and its release closes that fd, which gives the
 * export's reference back once. A child forked after the driver was loaded
 * cannot open GPU memory (HURRAY_ERR_UNSUPPORTED_DEVICE). A received
 * GPU handle may be shared and sent on: a kind-3/4 one (or an unchanged
 * share of it) is forwarded as its original sender's message with a dup of
 * the lifetime fd (the drivers do not export memory opened with legacy
 * IPC; ipc §6); a kind-2 import is a VMM mapping of its own, which the
 * driver may export again. A GPU message carries its sender's IPC event
 * (ipc §6): the import opens it (cuIpcOpenEventHandle /
 * hipIpcOpenEventHandle), makes the legacy default stream of the device
 * (CU_STREAM_LEGACY / HIP's null stream) wait for it on the device
 * (cuStreamWaitEvent / hipStreamWaitEvent; the host does not wait) and
 * destroys the opened event; work on blocking streams queued after the
 * import is then ordered after the sender's, work on non-blocking streams
 * is the caller's to order (hurray_ipc_import_async). While that stream
 * cannot be used (another thread captures a blocking stream of the device
 * into a graph, which prohibits using the legacy stream:
 * CUDA_ERROR_STREAM_CAPTURE_IMPLICIT / hipErrorStreamCaptureImplicit),
 * the import waits on the host for the event instead (cuEventSynchronize /
 * hipEventSynchronize, in the relaxed capture mode): the memory is then
 * ready for every stream, the capture is left intact, and the message is
 * neither refused nor left unordered (a receiver cannot choose when
 * messages arrive). A message back in its own sender queues no wait. Kind 2 maps the
 * allocation from its offset 0: the sender's mapping must start there
 * (ipc §6). Every field is checked before any is used (ipc §3.2): magic,
 * wire version, sizes, kind, nfds against the descriptor, dtype, ndim,
 * shape, strides and their byte extent against the mapped region, the
 * region against the memfd's size (fstat), that fds[0] is a memfd sealed
 * against shrinking and fds[1] the write end of a pipe.
 *
 * Parameters:
 *   m    [in, consumed]  the message; its fds (m->fds[0 .. m->nfds - 1],
 *        at most HURRAY_IPC_MAX_FDS) are consumed on success AND on failure
 *        (closed on any error, so a receiver never leaks them), and m->nfds
 *        is set to 0; entries at or beyond m->nfds are not the message's
 *        and are never touched (a caller that lowers nfds keeps those);
 *        m NULL consumes nothing
 *   out  [out]  the new handle, owned by the caller; written only on
 *        success. Its release unmaps, closes, and so gives the reference
 *        back to the sender. It may be shared, exported and sent on (CPU
 *        memory; GPU memory: shared, exported and sent on, see above).
 * Returns: HURRAY_OK, or, with a message naming the field at fault:
 *   HURRAY_ERR_INVALID_ARGUMENT     m or out NULL; a bad ndim, shape or
 *                                   strides; m->size or m->nfds beyond
 *                                   their arrays; GPU kinds: the legacy
 *                                   stream cannot be used now (a blocking
 *                                   capture) and the driver lacks
 *                                   cuEventSynchronize /
 *                                   hipEventSynchronize for the host wait
 *   HURRAY_ERR_UNSUPPORTED_VERSION  the wire version is not
 *                                   HURRAY_IPC_WIRE_VERSION (an older
 *                                   sender's version-1 descriptor too)
 *   HURRAY_ERR_UNSUPPORTED_DTYPE    the dtype is not valid for DLPack 1.3
 *   HURRAY_ERR_UNSUPPORTED_DEVICE   kind 1 on a device other than kDLCPU
 *                                   0; kinds 2 / 3 / 4: the vendor not in
 *                                   this build, its driver missing or
 *                                   lacking IPC (kind 2: the VMM entry
 *                                   points), a forked
 *                                   child of a process that loaded it, no
 *                                   device of this process has the
 *                                   descriptor's GPU UUID (the message
 *                                   names it); not Linux
 *   HURRAY_ERR_DEVICE               kinds 3 / 4: the driver refused to open
 *                                   the handle (a bad handle); kind 2: a step
 *                                   of the import failed (call and error
 *                                   in the message)
 *   HURRAY_ERR_OVERFLOW             element count or extent beyond 64 bits
 *   HURRAY_ERR_OUT_OF_MEMORY        the bookkeeping could not be allocated;
 *                                   kind 2: the driver had no room for the
 *                                   reservation or mapping of region_length
 *                                   bytes
 *   HURRAY_ERR_IPC                  wrong magic, truncated or oversized
 *                                   descriptor, wrong header or total size,
 *                                   unknown kind, nonzero reserved bytes,
 *                                   too many or too few fds, an fd that is
 *                                   not a sealed memfd or not a pipe's write
 *                                   end, a region beyond the memfd, elements
 *                                   outside the region, a region larger
 *                                   than HURRAY_IPC_MAX_BYTES (environment;
 *                                   default: physical memory), a failed
 *                                   mmap;
 *                                   kinds 2 / 3 / 4: a device type not the
 *                                   kind's, a negative ordinal, a nonzero
 *                                   region_offset; kind 2: a nonzero byte
 *                                   in its 64-byte area, fds[1] not open;
 *                                   GPU flag bit 0 set with an all-zero
 *                                   event handle, or the event handle
 *                                   cannot be opened
 * On failure: every fd of m closed, nothing mapped; *out untouched.
 * Threads: safe from any thread; the handle may be released from any
 *   thread.
 * Spec: docs/impl/ipc.md §3, §4. */
HURRAY_API HURRAY_NODISCARD int32_t hurray_ipc_import(hurray_ipc_message *m, hurray_buffer *out);

/* hurray_ipc_import with `stream` made to wait for the sender's IPC event
 * instead of the legacy default stream: work the caller queues on `stream`
 * after the call is ordered after the sender's. Kind 1 (kDLCPU) ignores
 * `stream`. While `stream` is being captured into a graph (or is the
 * legacy stream while a blocking stream captures), the import waits on the
 * host for the event instead, as hurray_ipc_import does (ipc §6).
 *
 * Parameters:
 *   m       [in, consumed]  as for hurray_ipc_import
 *   stream  [in]   a CUstream / hipStream_t of the primary context of this
 *                  process's device the message names, 2 for the
 *                  per-thread default stream, or NULL: the legacy default
 *                  stream (what hurray_ipc_import does)
 *   out     [out]  as for hurray_ipc_import
 * Returns: as hurray_ipc_import; HURRAY_ERR_DEVICE also when the wait
 *   cannot be queued on `stream`; HURRAY_ERR_INVALID_ARGUMENT also when
 *   `stream` cannot be used now (a capture, above) and the driver lacks
 *   cuEventSynchronize / hipEventSynchronize (as for hurray_ipc_import).
 * On failure: as hurray_ipc_import (every fd closed, nothing mapped).
 * Threads: as hurray_ipc_import.
 * Spec: docs/impl/ipc.md §6. */
HURRAY_API HURRAY_NODISCARD int32_t hurray_ipc_import_async(hurray_ipc_message *m, void *stream,
                                                            hurray_buffer *out);

/* hurray_ipc_export, then sendmsg of the message (descriptor bytes, fds as
 * SCM_RIGHTS) on a connected AF_UNIX SOCK_STREAM or SOCK_SEQPACKET socket;
 * the local copies of the fds are closed once the kernel holds them. The
 * peer must run with this process's effective uid (SO_PEERCRED, ipc §7).
 * Blocks until the message is written (a non-blocking socket is waited on
 * with poll); SIGPIPE is never raised (MSG_NOSIGNAL).
 *
 * Parameters:
 *   socket_fd  [in]  the socket; not closed
 *   src        [in, consumed on success]  as for hurray_ipc_export
 *   options    [in]  as for hurray_ipc_export
 * Returns: HURRAY_OK, or the errors of hurray_ipc_export, and
 *   HURRAY_ERR_IPC  not a connected AF_UNIX stream or seqpacket socket; the
 *                   peer's uid is not geteuid(); sendmsg failed (the peer
 *                   closed: EPIPE; errno in the message)
 * On failure: nothing consumed (*src unchanged, still the caller's; a copy
 *   made for it is freed); no fd left open. A message cut short by a
 *   failure after its first bytes cannot be imported by the peer (import
 *   refuses a truncated descriptor and closes its fds).
 * Threads: safe from any thread; two threads must not send on one stream
 *   socket at once (their bytes could interleave).
 * Spec: docs/impl/ipc.md §4, §7. */
HURRAY_API HURRAY_NODISCARD int32_t hurray_ipc_send(int socket_fd, hurray_buffer *src,
                                                    uint32_t options);

/* Receives one message sent by hurray_ipc_send and imports it: checks the
 * peer's uid (SO_PEERCRED) first, then recvmsg with MSG_CMSG_CLOEXEC, then
 * hurray_ipc_import. It honours the socket's own waiting rules: a blocking
 * socket waits for a message as long as its SO_RCVTIMEO allows (for ever
 * without one), a non-blocking one (O_NONBLOCK) does not wait for one at
 * all. Once a message has begun, the rest is waited for at most
 * SO_RCVTIMEO (1 s on a non-blocking socket without one). SO_PASSCRED on
 * the socket is accepted (the kernel's credentials are ignored).
 *
 * Parameters:
 *   socket_fd  [in]   a connected AF_UNIX SOCK_STREAM or SOCK_SEQPACKET
 *                     socket; not closed
 *   out        [out]  the new handle, owned by the caller; written only on
 *                     success
 * Returns: HURRAY_OK, or
 *   HURRAY_ERR_INVALID_ARGUMENT  out NULL
 *   HURRAY_ERR_IPC_CLOSED        the peer closed the connection before a
 *                                message began
 *   HURRAY_ERR_IPC_TIMEOUT       no message began within SO_RCVTIMEO, or
 *                                none was waiting on a non-blocking socket:
 *                                nothing was read, try again later
 *   HURRAY_ERR_IPC               not such a socket; the peer's uid is not
 *                                geteuid(); recvmsg failed; the stream
 *                                ended inside a message, or its rest did
 *                                not come in time; an empty seqpacket
 *                                record (consumed; the connection stays
 *                                usable); more fds than HURRAY_IPC_MAX_FDS
 *                                (control data truncated)
 *   or any error of hurray_ipc_import.
 * On failure: every fd received closed, nothing mapped; *out untouched;
 *   except that the pool fd of a kind-5 message (CUDA / HIP pool memory)
 *   is kept, as a dup, until the pool is imported: the later kind-6
 *   messages of that pool on this connection import it (ipc §6). Pools
 *   imported for a connection are let go of when it ends: at
 *   HURRAY_ERR_IPC_CLOSED, or at a later hurray_ipc_recv / hurray_ipc_send
 *   once no fd of this process refers to its socket.
 *   After HURRAY_ERR_IPC_TIMEOUT, HURRAY_ERR_IPC_CLOSED and an empty record
 *   the connection is where it was; after any other error the position in
 *   a stream socket is unknown: close it.
 * Threads: safe from any thread; two threads must not receive on one stream
 *   socket at once.
 * Spec: docs/impl/ipc.md §4, §7. */
HURRAY_API HURRAY_NODISCARD int32_t hurray_ipc_recv(int socket_fd, hurray_buffer *out);

/* ---------------------------------------------------------------------------
 * A set of handles in one message (docs/impl/ipc.md §10)
 *
 * N handles cross in one message whose fds are two per distinct allocation
 * (a region: one memfd, one lifetime fd), whatever N is: the members of a
 * tensor group (hurray_alloc_group with HURRAY_ALLOC_SHAREABLE), shares and
 * views of one buffer travel as one region; every CPU handle whose memory
 * is not shareable is copied into one new memfd for the whole set (one
 * region more). The receiver maps each region once; its handles share one
 * count, so each allocation's sender reference returns exactly once, after
 * the last of its handles is released, the receiver dies, or the message is
 * discarded or refused. kDLCUDA and kDLROCM handles travel in the same
 * message, one region per driver allocation with that kind's fds
 * (docs/impl/ipc.md §10); a GPU handle the single export could not send
 * either is refused with HURRAY_ERR_UNSUPPORTED_DEVICE naming the element. */

/* The message of hurray_ipc_export_set: an opaque heap object holding the
 * descriptor (variable size, ipc §10.1) and up to HURRAY_IPC_SET_MAX_FDS
 * fds, which it owns until hurray_ipc_set_message_discard. */
typedef struct hurray_ipc_set_message hurray_ipc_set_message;

/* Exports srcs[0..n) as one message, all or nothing. Each handle is checked
 * as hurray_ipc_export checks one; handles are grouped by the allocation
 * their memory lies in (followed through shares and views), distinct
 * allocations de-duplicated, and each group's references are held by one
 * watch until every copy of its lifetime fd is closed (ipc §5). kDLCUDA and
 * kDLROCM handles are grouped by their allocation (the driver's address
 * range) and each allocation travels as one GPU message of its kind would
 * (ipc §6: the vendor's handle or fd, the device's UUID, an IPC event
 * recorded on the legacy default stream, a pool's fd once per connection),
 * so the receiver opens it once whatever the number of handles into it.
 *
 * Parameters:
 *   srcs          [in, consumed on success]  n live, distinct handles
 *                 (one reference listed twice is consumed twice, as by
 *                 the batch forms; checking mode refuses the second with
 *                 HURRAY_ERR_RELEASED), kDLCPU, kDLCUDA or kDLROCM, mixed
 *                 freely; on
 *                 success every srcs[i] is emptied (its reference lives on
 *                 in the sender until the receiver lets go, or, when it was
 *                 copied, it is released at once), on failure none is
 *                 touched (in checking mode a tracked one is tracked again
 *                 under a new record)
 *   n             [in]   1..HURRAY_IPC_SET_MAX_HANDLES
 *   options       [in]   HURRAY_IPC_DEFAULT or HURRAY_IPC_ZERO_COPY_ONLY
 *                        (then memory that would need a copy is refused)
 *   out           [out]  the new message, owned by the caller until
 *                        hurray_ipc_set_message_discard; written only on
 *                        success
 *   failed_index  [out, optional]  on failure, the element at fault, or
 *                        HURRAY_BATCH_NO_INDEX when no element is (NULL
 *                        arguments, n, options, an allocation or system
 *                        call of the whole set)
 * Returns: HURRAY_OK, or
 *   HURRAY_ERR_INVALID_ARGUMENT    srcs or out NULL; n 0 or above
 *                                  HURRAY_IPC_SET_MAX_HANDLES; unknown
 *                                  options bits; an element that is not a
 *                                  valid handle (its index)
 *   HURRAY_ERR_UNSUPPORTED_VERSION an element's layout version
 *   HURRAY_ERR_UNSUPPORTED_DTYPE   an element's dtype; a non-contiguous
 *                                  packed sub-byte element that would need
 *                                  a copy
 *   HURRAY_ERR_UNSUPPORTED_DEVICE  an element on another device, or GPU
 *                                  memory that hurray_ipc_export could not
 *                                  send either (no elements, no driver,
 *                                  not exportable, beyond its allocation:
 *                                  its index); with
 *                                  HURRAY_IPC_ZERO_COPY_ONLY, a CPU element
 *                                  whose memory is not shareable
 *   HURRAY_ERR_OVERFLOW            the copies pass 2^62 bytes
 *   HURRAY_ERR_OUT_OF_MEMORY       bookkeeping, or the copy region
 *   HURRAY_ERR_IPC                 pipe2, dup, open, memfd_create, mmap or
 *                                  epoll failed (errno in the message)
 *   HURRAY_ERR_RELEASED            checking mode: an element already
 *                                  released
 * On failure: nothing consumed, *out untouched, no fd or copy left.
 * Threads: safe from any thread; the elements must not be used by other
 *   threads during the call. The producers' releases run later, on the
 *   watcher thread (ipc §5).
 * Spec: docs/impl/ipc.md §10. */
HURRAY_API HURRAY_NODISCARD int32_t hurray_ipc_export_set(hurray_buffer *srcs, size_t n,
                                                          uint32_t options,
                                                          hurray_ipc_set_message **out,
                                                          size_t *failed_index);

/* What of a set message must travel: its descriptor bytes and its fds, both
 * still owned by the message (valid until it is discarded). A transport
 * other than hurray_ipc_send_set carries the bytes and passes the fds (to a
 * forked child, or with SCM_RIGHTS in records of at most 253 fds), then
 * discards the message.
 *
 * Parameters:
 *   m      [in]   the message; not consumed
 *   bytes  [out]  the descriptor
 *   size   [out]  its length in bytes
 *   fds    [out]  the fds, in region order: 2 for a CPU region (memfd,
 *                 lifetime), 1 or 2 for a GPU region as its kind has
 *                 (docs/impl/ipc.md §10.1)
 *   nfds   [out]  their number
 * Returns: HURRAY_OK, or HURRAY_ERR_INVALID_ARGUMENT when any argument is
 *   NULL.
 * On failure: nothing written.
 * Threads: safe from any thread while m lives.
 * Spec: docs/impl/ipc.md §10. */
HURRAY_API HURRAY_NODISCARD int32_t hurray_ipc_set_message_parts(const hurray_ipc_set_message *m,
                                                                 const uint8_t **bytes,
                                                                 size_t *size, const int32_t **fds,
                                                                 size_t *nfds);

/* Closes a set message's fds and frees it. Once the receiver's copies of
 * the fds are gone too (never sent, or refused by the import), each
 * region's sender reference comes back through its lifetime pipe.
 *
 * Parameters:
 *   m  [in, consumed]  the message, or NULL (nothing done)
 * Returns: HURRAY_OK, always.
 * On failure: cannot fail.
 * Threads: safe from any thread; m must not be used afterwards.
 * Spec: docs/impl/ipc.md §10. */
HURRAY_API int32_t hurray_ipc_set_message_discard(hurray_ipc_set_message *m);

/* Imports a set from its received descriptor bytes and fds. The descriptor
 * is checked in full before any fd is used (ipc §10.2), then each region's
 * fds (a sealed memfd large enough for the region, opened read-write
 * unless the region is read-only; the write end of a pipe; no fd named
 * twice; the regions together within HURRAY_IPC_MAX_BYTES or physical
 * memory), then each region is mapped once.
 *
 * Parameters:
 *   bytes     [in]   the descriptor, `size` bytes
 *   size      [in]
 *   fds       [in, consumed]  nfds fds, ALWAYS consumed: kept by the
 *                    handles on success, closed on any failure; each entry
 *                    is set to -1
 *   nfds      [in]   at most HURRAY_IPC_SET_MAX_FDS
 *   out       [out]  room for `capacity` handles; out[0..*count) written
 *                    only on success, in the sender's order; each is owned
 *                    by the caller, may be shared, exported and sent on
 *                    (alone or in a set: one region again)
 *   capacity  [in]   handles out can hold (out may be NULL when 0)
 *   count     [out]  on success the number of handles; when capacity is
 *                    too small, the number needed
 * Returns: HURRAY_OK, or
 *   HURRAY_ERR_INVALID_ARGUMENT    count or bytes NULL; fds NULL with
 *                                  nfds > 0 (nothing closed); out NULL with
 *                                  capacity > 0; nfds beyond
 *                                  HURRAY_IPC_SET_MAX_FDS; capacity below
 *                                  the set's handles (*count says how many
 *                                  are needed); an entry's ndim
 *   HURRAY_ERR_UNSUPPORTED_VERSION the set version is not
 *                                  HURRAY_IPC_SET_WIRE_VERSION
 *   HURRAY_ERR_UNSUPPORTED_DTYPE   an entry's dtype
 *   HURRAY_ERR_UNSUPPORTED_DEVICE  a CPU region's entry not on kDLCPU 0;
 *                                  a GPU region this process cannot open
 *                                  (no such device by UUID, no driver:
 *                                  the message names the first entry in
 *                                  it); the other errors of
 *                                  hurray_ipc_import for a GPU region
 *   HURRAY_ERR_OVERFLOW            an entry's extent beyond 64 bits
 *   HURRAY_ERR_OUT_OF_MEMORY       bookkeeping or mapping
 *   HURRAY_ERR_IPC                 any other field of the descriptor, in
 *                                  the order of ipc §10.2 (the message
 *                                  names it and its value); an fd that is
 *                                  not what its region needs; a failed
 *                                  mmap
 * On failure: every fd closed, nothing mapped, out untouched (but for
 *   *count on a too small capacity).
 * Threads: safe from any thread; the handles may be released from any
 *   thread, in any order.
 * Spec: docs/impl/ipc.md §10. */
HURRAY_API HURRAY_NODISCARD int32_t hurray_ipc_import_set(const uint8_t *bytes, size_t size,
                                                          int32_t *fds, size_t nfds,
                                                          hurray_buffer *out, size_t capacity,
                                                          size_t *count);

/* hurray_ipc_export_set, then the message on a connected AF_UNIX
 * SOCK_STREAM or SOCK_SEQPACKET socket (peer of the same uid, ipc §7), in
 * records of at most HURRAY_IPC_SET_FDS_PER_RECORD fds and 32 KiB each
 * (one record when it fits; a set of more than 126 distinct allocations
 * takes several), then the local fds are closed. Blocks until all is
 * written.
 *
 * Parameters:
 *   socket_fd     [in]  the socket; not closed
 *   srcs          [in, consumed on success]  as for hurray_ipc_export_set
 *   n             [in]  as for hurray_ipc_export_set
 *   options       [in]  as for hurray_ipc_export_set
 *   failed_index  [out, optional]  as for hurray_ipc_export_set
 *                       (HURRAY_BATCH_NO_INDEX for a socket failure)
 * Returns: HURRAY_OK, or the errors of hurray_ipc_export_set, and
 *   HURRAY_ERR_IPC  not such a socket; the peer's uid is not geteuid();
 *                   sendmsg failed (errno in the message)
 * On failure: nothing consumed, no fd left open; a message cut short after
 *   its first record cannot be imported (the receiver refuses it).
 * Threads: safe from any thread; two threads must not send on one socket
 *   at once.
 * Spec: docs/impl/ipc.md §10. */
HURRAY_API HURRAY_NODISCARD int32_t hurray_ipc_send_set(int socket_fd, hurray_buffer *srcs,
                                                        size_t n, uint32_t options,
                                                        size_t *failed_index);

/* Receives one set sent by hurray_ipc_send_set and imports it, with the
 * waiting rules of hurray_ipc_recv. The set's header is peeked first: a
 * header that is refused, or a set of more handles than `capacity`,
 * consumes nothing (the message stays on the socket).
 *
 * Parameters:
 *   socket_fd  [in]   a connected AF_UNIX SOCK_STREAM or SOCK_SEQPACKET
 *                     socket; not closed
 *   out        [out]  room for `capacity` handles, as for
 *                     hurray_ipc_import_set
 *   capacity   [in]   as for hurray_ipc_import_set
 *   count      [out]  as for hurray_ipc_import_set
 * Returns: HURRAY_OK, or
 *   HURRAY_ERR_INVALID_ARGUMENT  count NULL; out NULL with capacity > 0;
 *                                capacity below the set's handles (*count
 *                                is the number needed; nothing consumed)
 *   HURRAY_ERR_IPC_CLOSED        the peer closed before a message began
 *   HURRAY_ERR_IPC_TIMEOUT       no message began in time (nothing read)
 *   HURRAY_ERR_IPC               not such a socket or peer; the next
 *                                message is a single handle's (receive it
 *                                with hurray_ipc_recv) or its header is
 *                                malformed (nothing consumed: close the
 *                                connection); recvmsg failed; the rest of
 *                                the message did not come in time, or more
 *                                or fewer fds came than the header says
 *   HURRAY_ERR_UNSUPPORTED_VERSION  the set version (nothing consumed)
 *   or any error of hurray_ipc_import_set.
 * On failure: every fd received closed, nothing mapped; out untouched.
 * Threads: safe from any thread; two threads must not receive on one
 *   socket at once.
 * Spec: docs/impl/ipc.md §10. */
HURRAY_API HURRAY_NODISCARD int32_t hurray_ipc_recv_set(int socket_fd, hurray_buffer *out,
                                                        size_t capacity, size_t *count);

/* ===========================================================================
 * Checking mode (c-ffi §9)
 *
 * A hurray_buffer is a plain value: a copy released after the original frees
 * the memory twice, and a handle nobody releases leaks without a trace. The
 * checking mode makes both visible. It is off by default; HURRAY_CHECK=1 in
 * the environment when libhurray is loaded (or hurray_check_enable) turns it
 * on. While it is on, every handle libhurray produces (hurray_from_dlpack*,
 * hurray_share, hurray_alloc*, hurray_copy*) gets a record of its own with an
 * id and where it was made (a short backtrace), and its release_fn/user_data
 * are replaced by the checker's, which forward to the producer's release once:
 *  - a second release of the same reference (a copy released after the
 *    original, or after hurray_share or a DLPack export consumed it) is
 *    caught before it reaches the producer: it is counted
 *    (hurray_diagnostics.double_releases), sent to the diagnostic hook as
 *    HURRAY_ERR_RELEASED with what the handle was, where it was made and where
 *    it was first released, and the producer's release is not called again
 *    (hurray_buffer_release still returns HURRAY_OK: the handle is emptied);
 *  - hurray_share and the DLPack exports refuse such a handle with
 *    HURRAY_ERR_RELEASED, and hurray_copy refuses to read it (reported the
 *    same way);
 *  - hurray_check_live lists the handles still live, and at exit each one is
 *    sent to the hook (HURRAY_ERR_LEAKED) and, with HURRAY_CHECK_STDERR, also
 *    printed to stderr.
 * A handle leaves the checker when a DLPack export consumes it (the DLPack
 * consumer owns the deleter from then on). Handles made by foreign code, or
 * by libhurray while the mode was off, are not tracked. When the mode is off
 * the only cost is one predictable branch where a handle is produced, and a
 * compare of release_fn on the validating path of share, export and copy.
 * ------------------------------------------------------------------------- */

/* Options of hurray_check_enable (bits). HURRAY_CHECK=1 in the environment
 * means HURRAY_CHECK_TRACK, HURRAY_CHECK=stderr means both bits, unset or 0
 * means off. (c-ffi §9) */
#define HURRAY_CHECK_TRACK 0x1u /* track handles, catch double releases */
#define HURRAY_CHECK_STDERR                        \
  0x2u /* also print each finding, and at exit the \
          handles still live, to stderr (implies   \
          HURRAY_CHECK_TRACK) */

/* Turns the checking mode on or off for handles made from now on. Handles
 * made before stay as they were: untracked ones stay untracked, tracked ones
 * stay tracked and keep working after the mode is turned off. Turning it on
 * the first time registers the at-exit leak report (atexit).
 *
 * Parameters:
 *   options  [in]  0 (off), or HURRAY_CHECK_TRACK, optionally with
 *                  HURRAY_CHECK_STDERR
 * Returns: HURRAY_OK, or
 *   HURRAY_ERR_INVALID_ARGUMENT  options has an unknown bit
 * On failure: the mode is unchanged.
 * Threads: safe from any thread; a handle made concurrently on another
 *   thread may be made under the old or the new setting.
 * Spec: docs/impl/c-ffi.md §9. */
HURRAY_API HURRAY_NODISCARD int32_t hurray_check_enable(uint32_t options);

/* State of the checking mode. Size-prefixed like hurray_diagnostics. */
typedef struct hurray_check_state {
  uint32_t struct_size;     /* in: sizeof(hurray_check_state) as compiled;
                               out: the number of bytes written */
  uint32_t options;         /* the current options (0: off) */
  uint64_t next_id;         /* the id the next tracked handle will get; ids
                               count up from 1 and are never reused, so this
                               is a mark for hurray_check_live's `since` */
  uint64_t live;            /* tracked handles not yet released */
  uint64_t tracked;         /* handles tracked since the process started */
  uint64_t double_releases; /* as hurray_diagnostics.double_releases */
  uint64_t untracked;       /* handles left untracked because no memory was
                               left for their record */
} hurray_check_state;

/* Fills *out with the state of the checking mode.
 *
 * Parameters:
 *   out  [in, out]  struct_size in: set by the caller to
 *                   sizeof(hurray_check_state); whole fields that end within
 *                   it are written, and struct_size out
 * Returns: HURRAY_OK, or
 *   HURRAY_ERR_INVALID_ARGUMENT  out NULL, or struct_size smaller than the end
 *                                of next_id
 * On failure: *out untouched.
 * Threads: safe from any thread; a snapshot of the counters under the
 *   checker's lock.
 * Spec: docs/impl/c-ffi.md §9. */
HURRAY_API HURRAY_NODISCARD int32_t hurray_check_get_state(hurray_check_state *out);

/* One live tracked handle, as hurray_check_live shows it. Every pointer is
 * valid only during the visit call. */
typedef struct hurray_check_entry {
  uint32_t struct_size; /* sizeof(hurray_check_entry) in the library */
  uint32_t reserved;    /* 0 */
  uint64_t id;          /* the handle's id (1, 2, ...) */
  const char *made_by;  /* the function that made it ("hurray_alloc") */
  const char *label;    /* set by hurray_check_label; "" when none */
  const char *origin;   /* where it was made: one frame per line, callers
                           of libhurray only, innermost first ("" when the
                           platform gives no backtrace) */
  void *data;           /* the handle's data, device, dtype and ndim */
  hurray_device device;
  hurray_dtype dtype;
  int32_t ndim;
} hurray_check_entry;

/* Receives one live handle; `user` is hurray_check_live's. */
typedef void (*hurray_check_visit_fn)(const hurray_check_entry *entry, void *user);

/* Lists the tracked handles still live whose id is >= since, in id order.
 * The list is a snapshot taken under the checker's lock; `visit` is called
 * after the lock is dropped, so it may make and release handles (those do
 * not change the list being visited).
 *
 * Parameters:
 *   since  [in]   lowest id to list (0 or 1: all; a next_id read earlier from
 *                 hurray_check_get_state: those made since then)
 *   visit  [in]   called once per handle on the calling thread; NULL to only
 *                 count
 *   user   [in]   passed to visit
 *   count  [out]  number of handles listed; may be NULL
 * Returns: HURRAY_OK (also when the mode is off: then only handles tracked
 *   while it was on are listed), or
 *   HURRAY_ERR_OUT_OF_MEMORY  the snapshot could not be allocated
 * On failure: visit is not called; *count untouched.
 * Threads: safe from any thread.
 * Spec: docs/impl/c-ffi.md §9. */
HURRAY_API HURRAY_NODISCARD int32_t hurray_check_live(uint64_t since, hurray_check_visit_fn visit,
                                                      void *user, size_t *count);

/* Attaches a label to a tracked handle, shown with it in reports (a binding
 * puts its own language's creation site here, e.g. "test_x.py:12"). The text
 * is copied (at most 511 bytes kept); a later label replaces it. Every copy
 * of the handle shares the label, and the handles hurray_share makes from it
 * inherit it.
 *
 * Parameters:
 *   h      [in]  a handle; only read
 *   label  [in]  NUL-terminated text
 * Returns: HURRAY_OK, or
 *   HURRAY_ERR_INVALID_ARGUMENT  h or label NULL, or h not tracked (made while
 *                                the mode was off, or not by libhurray)
 *   HURRAY_ERR_RELEASED          h is tracked but was already released
 *   HURRAY_ERR_OUT_OF_MEMORY     the label could not be copied
 * On failure: nothing changed.
 * Threads: safe from any thread.
 * Spec: docs/impl/c-ffi.md §9. */
HURRAY_API HURRAY_NODISCARD int32_t hurray_check_label(const hurray_buffer *h, const char *label);

/* ===========================================================================
 * Entry point for runtimes that dlopen libhurray, and a handle move helper
 * (c-ffi §8)
 *
 * A runtime that loads libhurray with dlopen (a framework plugin, a language
 * binding) resolves one symbol, hurray_get_api, and reaches every other
 * function through the table it returns. It includes this header for the
 * types only and links nothing of libhurray.
 *
 * The table has its own version, packed (major << 16) | minor, under the
 * library's promise (c-ffi §8.1): HURRAY_API_VERSION_MINOR grows when
 * members are appended, HURRAY_API_VERSION_MAJOR changes when anything
 * existing changes. While libhurray is 0.x (SONAME libhurray.so.0.N) the
 * table is not frozen: a 0.x minor release may change its layout, and
 * hurray_get_api then refuses every table version before that change
 * (HURRAY_API_VERSION_OLDEST_MINOR rises). From libhurray 1.0 on, members
 * are only appended, never removed or reordered, within one major version,
 * and capabilities that are not plain functions (a device kind, a
 * transport) come as extensions chained from `extension_start`, without a
 * new major.
 * ======================================================================== */

/* Version of the hurray_api table this header describes. The two numbers
 * are packed as (major << 16) | minor; pass HURRAY_API_VERSION to
 * hurray_get_api. 0 is never a valid version. */
#define HURRAY_API_VERSION_MAJOR 1u
/* The table's minor: grows by one with each release that appends members. */
#define HURRAY_API_VERSION_MINOR 4u
/* Major and minor packed: the value to pass to hurray_get_api. */
#define HURRAY_API_VERSION ((uint32_t)((HURRAY_API_VERSION_MAJOR << 16) | HURRAY_API_VERSION_MINOR))
/* Oldest minor of this major that hurray_get_api serves: table 1.2 added
 * the pointer `extension_start` after the 16-byte header of 1.0 and 1.1,
 * which moved every member by 8 bytes (allowed once: libhurray is 0.1). */
#define HURRAY_API_VERSION_OLDEST_MINOR 2u

/* Head of every extension of the function table (PJRT's extension chain is
 * the model): each extension is a struct whose first member is this header,
 * listed from hurray_api::extension_start through `next`. `type` (a
 * HURRAY_API_EXTENSION_* value; 0 is never used) says which struct it is; a
 * caller skips types it does not know. struct_size is the size of the whole
 * extension struct as the library was compiled, so an extension grows like
 * the table (members appended). Extensions live in the library's read-only
 * data, like the table. No extension type is defined yet: extension_start
 * is NULL in this version. */
typedef struct hurray_api_extension {
  size_t struct_size;                      /* of the whole extension   @0  */
  uint32_t type;                           /* HURRAY_API_EXTENSION_*   @8  */
  uint32_t reserved;                       /* 0                        @12 */
  const struct hurray_api_extension *next; /* NULL ends the chain      @16 */
} hurray_api_extension;

/* Function table of libhurray: one member per public function of this
 * header (hurray_get_api itself excepted), named after it without the
 * "hurray_" prefix and with exactly its signature and contract (see each
 * function above). The table lives in the library's read-only data: it is
 * constant for the life of the process, may be read from any thread without
 * synchronisation, and must not be written or freed.
 *
 * struct_size is sizeof(hurray_api) as the library was compiled; a member
 * exists when it ends within struct_size (HURRAY_API_HAS). A caller compiled
 * against an older header reads only the members it knows; newer members
 * are only ever appended after the last one. abi_version is the library's
 * HURRAY_API_VERSION (which may be newer than the caller's).
 * extension_start is the first extension (hurray_api_extension) or NULL.
 * 24 bytes of header (offsets below are for 64-bit targets), then one
 * pointer per member, in this order. */
typedef struct hurray_api {
  size_t struct_size;                          /* sizeof(hurray_api) in the library          @0  */
  uint32_t abi_version;                        /* the library's HURRAY_API_VERSION           @8  */
  uint32_t reserved;                           /* 0                                          @12 */
  const hurray_api_extension *extension_start; /* NULL: none yet      @16 */

  /* --- Members of 1.0 (at these offsets from 1.2 on, c-ffi §8.1) -------- */
  /* Versions (c-ffi §1) */
  uint32_t (*version)(void);
  int32_t (*check_version)(uint32_t header_version);
  /* Errors (c-ffi §2) */
  const char *(*last_error)(void);
  const char *(*status_name)(int32_t status);
  /* Handle helpers (c-ffi §3) */
  int32_t (*buffer_release)(hurray_buffer *h);
  int32_t (*buffer_validate)(const hurray_buffer *h);
  int32_t (*buffer_extent)(const hurray_buffer *h, hurray_extent *out);
  /* Fan-out (c-ffi §4) */
  int32_t (*share)(hurray_buffer *src, size_t n, hurray_buffer *out);
  /* DLPack conversion (c-ffi §5) */
  int32_t (*to_dlpack_versioned)(hurray_buffer *src, struct DLManagedTensorVersioned **out);
  int32_t (*to_dlpack)(hurray_buffer *src, struct DLManagedTensor **out);
  int32_t (*from_dlpack_versioned)(struct DLManagedTensorVersioned *t, uint32_t options,
                                   hurray_buffer *out);
  int32_t (*from_dlpack)(struct DLManagedTensor *t, uint32_t options, hurray_buffer *out);
  int32_t (*dlpack_versioned_delete)(struct DLManagedTensorVersioned *t);
  int32_t (*dlpack_delete)(struct DLManagedTensor *t);
  /* Allocation and copies (c-ffi §6) */
  int32_t (*alloc)(hurray_device device, hurray_dtype dtype, int32_t ndim, const int64_t *shape,
                   uint64_t flags, hurray_buffer *out);
  int32_t (*copy)(const hurray_buffer *src, hurray_device device, hurray_buffer *out);
  /* GPU memory (docs/impl/gpu.md) */
  int32_t (*alloc_async)(hurray_device device, hurray_dtype dtype, int32_t ndim,
                         const int64_t *shape, uint64_t flags, void *stream, hurray_buffer *out);
  int32_t (*copy_async)(const hurray_buffer *src, hurray_device device, void *stream,
                        hurray_buffer *out);
  int32_t (*stream_wait)(hurray_device device, void *producer_stream, void *consumer_stream);
  int32_t (*get_diagnostics)(hurray_diagnostics *out);
  int32_t (*set_diagnostic_hook)(hurray_diagnostic_hook_fn hook, void *user);

  /* --- Members of 1.1 -------------------------------------------------- */
  /* Checking mode (c-ffi §9) */
  int32_t (*check_enable)(uint32_t options);
  int32_t (*check_get_state)(hurray_check_state *out);
  int32_t (*check_live)(uint64_t since, hurray_check_visit_fn visit, void *user, size_t *count);
  int32_t (*check_label)(const hurray_buffer *h, const char *label);

  /* --- Version 1.2 ------------------------------------------------------ */
  /* Across processes (docs/impl/ipc.md) */
  int32_t (*ipc_export)(hurray_buffer *src, uint32_t options, hurray_ipc_message *out);
  int32_t (*ipc_message_discard)(hurray_ipc_message *m);
  int32_t (*ipc_import)(hurray_ipc_message *m, hurray_buffer *out);
  int32_t (*ipc_send)(int socket_fd, hurray_buffer *src, uint32_t options);
  int32_t (*ipc_recv)(int socket_fd, hurray_buffer *out);

  /* --- Version 1.3 ------------------------------------------------------ */
  /* Stream-ordered GPU handoff (docs/impl/ipc.md §6) */
  int32_t (*ipc_export_async)(hurray_buffer *src, uint32_t options, void *stream,
                              hurray_ipc_message *out);
  int32_t (*ipc_import_async)(hurray_ipc_message *m, void *stream, hurray_buffer *out);

  /* --- Version 1.4 ------------------------------------------------------ */
  /* Events of GPU streams (docs/impl/gpu.md §4) */
  int32_t (*event_record)(hurray_device device, void *stream, hurray_event **out);
  int32_t (*event_wait)(const hurray_event *event, void *stream);
  int32_t (*event_release)(hurray_event *event);
  /* Releases deferred during a graph capture (docs/impl/gpu.md §2) */
  int32_t (*retire_deferred_frees)(hurray_device device, size_t *remaining);
  /* Views (c-ffi §4) */
  int32_t (*view)(hurray_buffer *src, const hurray_view_desc *desc, hurray_buffer *out);
  /* Batched DLPack conversion (c-ffi §5.1) */
  int32_t (*from_dlpack_versioned_n)(struct DLManagedTensorVersioned *const *ts, size_t n,
                                     uint32_t options, hurray_buffer *out, size_t *failed_index);
  int32_t (*from_dlpack_n)(struct DLManagedTensor *const *ts, size_t n, uint32_t options,
                           hurray_buffer *out, size_t *failed_index);
  int32_t (*to_dlpack_versioned_n)(hurray_buffer *src, size_t n,
                                   struct DLManagedTensorVersioned **out, size_t *failed_index);
  int32_t (*to_dlpack_n)(hurray_buffer *src, size_t n, struct DLManagedTensor **out,
                         size_t *failed_index);
  /* Tensor groups (c-ffi §6.2) */
  int32_t (*alloc_group)(hurray_device device, size_t n, const hurray_tensor_desc *descs,
                         uint64_t flags, void *stream, hurray_buffer *out, size_t *failed_index);
  /* A set of handles in one message (docs/impl/ipc.md §10) */
  int32_t (*ipc_export_set)(hurray_buffer *srcs, size_t n, uint32_t options,
                            hurray_ipc_set_message **out, size_t *failed_index);
  int32_t (*ipc_set_message_parts)(const hurray_ipc_set_message *m, const uint8_t **bytes,
                                   size_t *size, const int32_t **fds, size_t *nfds);
  int32_t (*ipc_set_message_discard)(hurray_ipc_set_message *m);
  int32_t (*ipc_import_set)(const uint8_t *bytes, size_t size, int32_t *fds, size_t nfds,
                            hurray_buffer *out, size_t capacity, size_t *count);
  int32_t (*ipc_send_set)(int socket_fd, hurray_buffer *srcs, size_t n, uint32_t options,
                          size_t *failed_index);
  int32_t (*ipc_recv_set)(int socket_fd, hurray_buffer *out, size_t capacity, size_t *count);
  /* --- Members of later minor versions are appended here. --------------- */
} hurray_api;

/* 1 when the table `api` (a const hurray_api *) has `member`, i.e. the
 * member ends within api->struct_size; 0 otherwise. Needed only for members
 * newer than the minor version the caller asked hurray_get_api for. */
#define HURRAY_API_HAS(api, member) \
  ((api)->struct_size >= offsetof(hurray_api, member) + sizeof(((const hurray_api *)0)->member))

/* Type of hurray_get_api, for the pointer dlsym returns. */
typedef int32_t (*hurray_get_api_fn)(uint32_t abi_version, const hurray_api **out);

/* Returns libhurray's function table: the one symbol a runtime that dlopens
 * libhurray needs to resolve (dlsym(lib, "hurray_get_api")).
 *
 * Parameters:
 *   abi_version  [in]   the table version the caller was compiled against
 *                       (pass HURRAY_API_VERSION)
 *   out          [out]  receives the table, written only on success
 * Returns: HURRAY_OK when the major numbers are equal and the caller's minor
 *   is from HURRAY_API_VERSION_OLDEST_MINOR to the library's (every such
 *   minor is served, since members are only appended); *out then points to the library's constant
 *   table (static storage, never freed; every member non-NULL;
 *   api->struct_size >= the size of the table at the caller's minor), or
 *   HURRAY_ERR_INVALID_ARGUMENT    out is NULL (checked first);
 *   HURRAY_ERR_UNSUPPORTED_VERSION abi_version is 0, has another major, a
 *                                  newer minor than the library's, or a
 *                                  minor older than
 *                                  HURRAY_API_VERSION_OLDEST_MINOR (the
 *                                  message names both versions).
 * On failure: *out is untouched; nothing to release.
 * Threads: safe from any thread; no allocation and no initialisation on the
 *   first call.
 * Spec: docs/impl/c-ffi.md §8. */
HURRAY_API HURRAY_NODISCARD int32_t hurray_get_api(uint32_t abi_version, const hurray_api **out);

/* Moves a handle: returns *h as it was and leaves *h empty (all fields
 * zero, release_fn NULL), so exactly one of the two holds the reference and
 * releasing both still releases once. Use it instead of copying the struct
 * and clearing the source by hand. Moving an empty handle returns an empty
 * handle; h == NULL returns an empty handle. Calls no libhurray function
 * (header only, nothing to resolve); never fails. Not atomic: the same
 * object must not be moved or used by two threads at once. (c-ffi §8) */
static inline hurray_buffer hurray_buffer_move(hurray_buffer *h) {
#ifdef __cplusplus
  hurray_buffer moved = {};
  const hurray_buffer empty = {};
#else
  hurray_buffer moved = {0};
  const hurray_buffer empty = {0};
#endif
  if (h != NULL) {
    moved = *h;
    *h = empty;
  }
  return moved;
}

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* HURRAY_HURRAY_H_ */
