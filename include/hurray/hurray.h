/*
 * hurray.h - the normative C ABI of libhurray.
 *
 * A Hurray buffer handle (hurray_buffer) describes tensor memory with DLPack's
 * vocabulary and carries one release callback that its holder calls exactly
 * once. The handle layout and its contract are specified in
 * docs/spec/buffer-protocol.md; every function below is specified in
 * docs/impl/c-ffi.md. Section references ("spec §N", "c-ffi §N") point there.
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
 */
#ifndef HURRAY_HURRAY_H_
#define HURRAY_HURRAY_H_

#include <stddef.h>
#include <stdint.h>

#include "dlpack.h"
#include "hurray/version.h"

#if !defined(DLPACK_MAJOR_VERSION) || DLPACK_MAJOR_VERSION != 1
#error "hurray.h needs a DLPack 1.x dlpack.h (an older one was included first)"
#endif

#if defined(_WIN32)
#define HURRAY_API
#elif defined(HURRAY_BUILDING_LIBRARY)
#define HURRAY_API __attribute__((visibility("default")))
#else
#define HURRAY_API
#endif

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

/* DLPack version libhurray writes into the tensors it exports (spec §6). */
#define HURRAY_DLPACK_MAJOR 1u
#define HURRAY_DLPACK_MINOR 3u

/* Largest ndim accepted anywhere (spec §3). */
#define HURRAY_MAX_NDIM 64

/* Runtime version of the loaded library, packed like HURRAY_VERSION.
 * Thread-safe; cannot fail. (c-ffi §1) */
HURRAY_API uint32_t hurray_version(void);

/* Checks that the loaded library can serve a caller compiled against header
 * version `header_version` (pass HURRAY_VERSION): the major numbers must be
 * equal and the library's minor.patch must be at least the header's; while
 * the major is 0 (any minor release may change the ABI) the minor numbers
 * must be equal too.
 * Returns HURRAY_OK, or HURRAY_ERR_UNSUPPORTED_VERSION with a message that
 * names both versions. Thread-safe. (c-ffi §1) */
HURRAY_API HURRAY_NODISCARD int32_t hurray_check_version(uint32_t header_version);

/* ---------------------------------------------------------------------------
 * Status codes and errors (c-ffi §2)
 * ------------------------------------------------------------------------- */

typedef enum hurray_status {
  HURRAY_OK = 0,
  HURRAY_ERR_INVALID_ARGUMENT = 1,     /* NULL pointer, bad ndim/shape/strides */
  HURRAY_ERR_UNSUPPORTED_VERSION = 2,  /* DLPack major != 1, handle layout, library */
  HURRAY_ERR_UNSUPPORTED_DTYPE = 3,    /* unknown code, bits not valid for code, lanes 0 */
  HURRAY_ERR_UNSUPPORTED_DEVICE = 4,   /* device type unknown or not served, device unavailable */
  HURRAY_ERR_OUT_OF_MEMORY = 5,        /* host or device allocation failed */
  HURRAY_ERR_OVERFLOW = 6,             /* element count or byte extent beyond 64-bit range */
  HURRAY_ERR_DEVICE = 7,               /* a device runtime call failed */
  HURRAY_ERR_INTERNAL = 8              /* a bug in libhurray; please report it */
} hurray_status;

/* Message describing the last failed call made by this thread, or "" if none
 * failed yet. Successful calls leave it as it is. The pointer stays valid for
 * the life of the thread; its text changes at this thread's next failing call.
 * Never NULL. Thread-safe (the message is thread-local). (c-ffi §2) */
HURRAY_API const char *hurray_last_error(void);

/* Short constant name of a status code ("HURRAY_ERR_OVERFLOW"), or
 * "HURRAY_UNKNOWN_STATUS". Never NULL; static storage. Thread-safe. (c-ffi §2) */
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

/* DLPack device type values (DLDeviceType) used in hurray_device. */
#define HURRAY_DEVICE_CPU 1
#define HURRAY_DEVICE_CUDA 2
#define HURRAY_DEVICE_CUDA_HOST 3
#define HURRAY_DEVICE_ROCM 10
#define HURRAY_DEVICE_ROCM_HOST 11
#define HURRAY_DEVICE_CUDA_MANAGED 13

/* Device of the memory: DLPack's device type value and device ordinal
 * (0 for CPU, pinned host and managed memory). 8 bytes. (spec §2.2) */
typedef struct hurray_device {
  int32_t device_type;
  int32_t device_id;
} hurray_device;

/* Element type with DLPack's DLDataType meaning: `code` is a DLDataTypeCode
 * value, `bits` the width of one lane, `lanes` the vector width (1 for
 * scalars). 4 bytes. (spec §2.2) */
typedef struct hurray_dtype {
  uint8_t code;
  uint8_t bits;
  uint16_t lanes;
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
  uint32_t version;         /* HURRAY_BUFFER_VERSION                     @0  */
  uint32_t reserved;        /* 0                                         @4  */
  hurray_release_fn release_fn; /* see spec §4; NULL when empty          @8  */
  void *user_data;          /* passed to release_fn                      @16 */
  uint64_t flags;           /* HURRAY_FLAG_* bits                        @24 */
  void *data;               /* base address; may be NULL if no elements  @32 */
  uint64_t byte_offset;     /* bytes from data to element (0,...,0)      @40 */
  hurray_device device;     /*                                           @48 */
  hurray_dtype dtype;       /*                                           @56 */
  int32_t ndim;             /* 0..HURRAY_MAX_NDIM                        @60 */
  const int64_t *shape;     /* ndim extents; NULL allowed when ndim == 0 @64 */
  const int64_t *strides;   /* ndim strides in elements; non-NULL when
                               ndim > 0; NULL allowed when ndim == 0     @72 */
} hurray_buffer;

/* Calls h->release_fn(h->user_data) if h is live, then zeroes *h (so it reads
 * as empty). Releasing an empty handle does nothing and returns HURRAY_OK.
 * Ownership: consumes the handle's reference. Errors: HURRAY_ERR_INVALID_ARGUMENT
 * if h is NULL. Thread-safe for distinct handles. (spec §4, c-ffi §3) */
HURRAY_API int32_t hurray_buffer_release(hurray_buffer *h);

/* Checks that *h is a live, well-formed handle (spec §3): known version,
 * ndim in range, shape/strides present when ndim > 0, no negative extent,
 * dtype valid for DLPack 1.3, known device type with device_id >= 0, data
 * non-NULL unless it has no elements, and element count and byte extent
 * within 64-bit range. Reads only; consumes nothing. Errors:
 * INVALID_ARGUMENT, UNSUPPORTED_VERSION, UNSUPPORTED_DTYPE,
 * UNSUPPORTED_DEVICE, OVERFLOW; the message names the field. (c-ffi §3) */
HURRAY_API HURRAY_NODISCARD int32_t hurray_buffer_validate(const hurray_buffer *h);

/* Size facts of a valid handle. `numel` is the product of shape (1 for
 * ndim 0); `itemsize_bits` is bits*lanes per element (rounded up to a whole
 * number of bytes when HURRAY_FLAG_SUBBYTE_PADDED is set); `lowest`/`highest`
 * bound the bytes touched, relative to `data` (highest is one past the last
 * byte; both 0 when numel is 0); `contiguous` is 1 when the elements are in
 * compact row-major order. (spec §3.3) */
typedef struct hurray_extent {
  int64_t numel;
  int64_t itemsize_bits;
  int64_t lowest;
  int64_t highest;
  int32_t contiguous;
  int32_t reserved;
} hurray_extent;

/* Fills *out with the size facts of *h after validating it like
 * hurray_buffer_validate. Reads only. Errors: those of hurray_buffer_validate,
 * INVALID_ARGUMENT if out is NULL. (c-ffi §3) */
HURRAY_API HURRAY_NODISCARD int32_t hurray_buffer_extent(const hurray_buffer *h,
                                                         hurray_extent *out);

/* ---------------------------------------------------------------------------
 * Fan-out (spec §5, c-ffi §4)
 * ------------------------------------------------------------------------- */

/* Turns one handle into `n` independent handles for n consumers.
 * On success: *src is consumed and zeroed; out[0..n-1] are live handles that
 * describe the same memory as *src did; the release of the source runs exactly
 * once, when the last of all handles sharing it is released, on the thread
 * that releases last. Sharing a handle that came from hurray_share adds to the
 * same count (no nesting). n == 1 moves *src to out[0].
 * On failure: nothing consumed, out untouched.
 * Errors: INVALID_ARGUMENT (NULL src/out, n == 0, src empty or invalid, n too
 * large for the count), OUT_OF_MEMORY (the one control block), and the
 * validation errors of hurray_buffer_validate.
 * Cost: one allocation the first time a handle is shared, none afterwards.
 * Thread-safe; the out handles may be released from any threads. */
HURRAY_API HURRAY_NODISCARD int32_t hurray_share(hurray_buffer *src, size_t n,
                                                 hurray_buffer *out);

/* ---------------------------------------------------------------------------
 * DLPack conversion (spec §6, c-ffi §5)
 * ------------------------------------------------------------------------- */

/* Exports a handle as a DLManagedTensorVersioned (version 1.3; flags carried
 * over; strides always given when ndim > 0; shape/strides/byte_offset kept
 * exactly). On success *src is consumed and zeroed and *out receives a tensor
 * whose deleter calls the handle's release exactly once. A handle that
 * libhurray imported from a DLManagedTensorVersioned and that still describes
 * that tensor exactly is unwrapped: *out is the original tensor itself, with
 * the 1.x version and the strides its producer gave it.
 * On failure: nothing consumed, *out untouched.
 * Errors: INVALID_ARGUMENT (NULL, empty or malformed src), the validation
 * errors of hurray_buffer_validate, OUT_OF_MEMORY.
 * Cost: at most one heap allocation. Thread-safe. */
HURRAY_API HURRAY_NODISCARD int32_t hurray_to_dlpack_versioned(
    hurray_buffer *src, struct DLManagedTensorVersioned **out);

/* Same as hurray_to_dlpack_versioned for the legacy (unversioned)
 * DLManagedTensor. Flags cannot be expressed there and are dropped
 * (READ_ONLY included: prefer the versioned form for read-only memory). */
HURRAY_API HURRAY_NODISCARD int32_t hurray_to_dlpack(hurray_buffer *src,
                                                     struct DLManagedTensor **out);

/* Options for the import functions (bit set). */
#define HURRAY_IMPORT_DEFAULT 0u

/* Imports a DLManagedTensorVersioned as a handle.
 * On success the caller no longer owns `t`: out's release calls t->deleter(t)
 * exactly once with the very pointer passed here (a NULL deleter is legal and
 * means nothing to free). shape/strides of *out point into `t` (no copy) when
 * `t` gives strides; a tensor older than 1.2 with NULL strides is read as
 * compact row-major and costs one allocation. A tensor that libhurray itself
 * exported and that still describes its handle exactly is unwrapped: *out is
 * the original handle and the wrapper is freed.
 * On failure the caller still owns `t` (nothing was called on it).
 * Errors: INVALID_ARGUMENT (NULL t/out, bad ndim/shape/strides/data),
 * UNSUPPORTED_VERSION (major != 1), UNSUPPORTED_DTYPE, UNSUPPORTED_DEVICE,
 * OVERFLOW, OUT_OF_MEMORY; the message names the field at fault.
 * `options`: HURRAY_IMPORT_DEFAULT (0) or HURRAY_IMPORT_CHECK_DEVICE_POINTER
 * (GPU section below); other bits are INVALID_ARGUMENT. Thread-safe. */
HURRAY_API HURRAY_NODISCARD int32_t hurray_from_dlpack_versioned(
    struct DLManagedTensorVersioned *t, uint32_t options, hurray_buffer *out);

/* Same as hurray_from_dlpack_versioned for the legacy DLManagedTensor
 * (flags are 0; NULL strides read as compact row-major at any ndim). */
HURRAY_API HURRAY_NODISCARD int32_t hurray_from_dlpack(struct DLManagedTensor *t,
                                                       uint32_t options,
                                                       hurray_buffer *out);

/* Calls t->deleter(t) if t and its deleter are non-NULL: the standard way to
 * drop a DLPack tensor nobody will consume. Always returns HURRAY_OK.
 * Thread-safe. (c-ffi §5) */
HURRAY_API int32_t hurray_dlpack_versioned_delete(struct DLManagedTensorVersioned *t);
HURRAY_API int32_t hurray_dlpack_delete(struct DLManagedTensor *t);

/* ---------------------------------------------------------------------------
 * Allocation and copies (spec §7, c-ffi §6)
 * ------------------------------------------------------------------------- */

/* Byte alignment of memory from hurray_alloc on the CPU. */
#define HURRAY_CPU_ALIGNMENT 64

/* Allocates uninitialised memory for a (dtype, shape) tensor on `device`
 * with compact row-major strides and byte_offset 0, as one live handle whose
 * release frees it. `shape` has `ndim` entries (may be NULL when ndim is 0);
 * zero extents are allowed. CPU data is aligned to HURRAY_CPU_ALIGNMENT
 * bytes, metadata and data in one allocation. Sub-byte dtypes are packed
 * unless `flags` has HURRAY_FLAG_SUBBYTE_PADDED. `flags` is copied into the
 * handle. On failure *out is untouched.
 * Errors: INVALID_ARGUMENT, UNSUPPORTED_DTYPE, UNSUPPORTED_DEVICE (device not
 * served by this build or unavailable), OVERFLOW, OUT_OF_MEMORY, DEVICE (a GPU
 * runtime call failed otherwise; docs/impl/gpu.md). Thread-safe. */
HURRAY_API HURRAY_NODISCARD int32_t hurray_alloc(hurray_device device, hurray_dtype dtype,
                                                 int32_t ndim, const int64_t *shape,
                                                 uint64_t flags, hurray_buffer *out);

/* Copies the elements of *src into new compact row-major memory on `device`
 * (same dtype and shape), returning a new live handle in *out whose flags are
 * HURRAY_FLAG_IS_COPIED plus src's HURRAY_FLAG_SUBBYTE_PADDED (the copy is
 * private, hence writable). *src is only read (not consumed). On failure
 * *out is untouched.
 * Errors: those of hurray_alloc and hurray_buffer_validate; UNSUPPORTED_DTYPE
 * for non-contiguous packed sub-byte tensors; UNSUPPORTED_DEVICE for a device
 * pair this build cannot copy between. Thread-safe. */
HURRAY_API HURRAY_NODISCARD int32_t hurray_copy(const hurray_buffer *src,
                                                hurray_device device,
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
 * The check loads the vendor library if needed and costs one driver call.
 * Errors added: UNSUPPORTED_DEVICE (runtime unavailable, or the claimed
 * device_id names no device: a kDLCUDA/kDLROCM ordinal the runtime does not
 * see, or not 0 for the pinned and managed types; the runtime is not asked),
 * INVALID_ARGUMENT (the pointer belongs elsewhere; the message says what the
 * runtime reports), DEVICE (the runtime failed the query).
 * On failure the caller still owns the tensor. (gpu §5) */
#define HURRAY_IMPORT_CHECK_DEVICE_POINTER (1u << 0)

/* Stream-ordered allocation: like hurray_alloc, but the memory is allocated
 * on `stream` (cuMemAllocAsync / hipMallocAsync) and the handle's release
 * frees it on that same stream (cuMemFreeAsync / hipFreeAsync), from
 * whichever thread releases, without blocking the host or the device.
 * `stream` is a CUstream (kDLCUDA) or hipStream_t (kDLROCM) of `device`,
 * including CU_STREAM_LEGACY (1), the one legacy default stream shared by
 * all threads. It must stay valid until the handle (and every handle shared
 * from it) has been released. The memory is usable by work queued on
 * `stream` after this call; other streams must be ordered after it
 * (hurray_stream_wait), and their work on it must be ordered before the
 * release, since the free is queued on `stream`.
 * CU_STREAM_PER_THREAD / hipStreamPerThread (2) names the stream of the
 * thread that uses the handle, so a free queued through it by another
 * releasing thread would land on that thread's stream, unordered with the
 * allocating thread's work. With it the allocation is synchronous, exactly
 * hurray_alloc (cuMemAlloc / hipMalloc, freed with cuMemFree / hipFree):
 * usable by every stream, and its release is not stream-ordered.
 * stream == NULL: exactly hurray_alloc (synchronous, any device type).
 * Ownership: on success *out is a new live handle owned by the caller; on
 * failure *out is untouched and nothing was allocated.
 * Errors: those of hurray_alloc; UNSUPPORTED_DEVICE when stream != NULL and
 * the device type is not kDLCUDA or kDLROCM, or the runtime lacks
 * stream-ordered allocation (no hipMallocAsync), or the device does not
 * support it (CUDA_ERROR_NOT_SUPPORTED / hipErrorNotSupported);
 * OUT_OF_MEMORY when the device pool is exhausted; DEVICE for other runtime
 * failures.
 * Thread-safe. (gpu §2) */
HURRAY_API HURRAY_NODISCARD int32_t hurray_alloc_async(hurray_device device, hurray_dtype dtype,
                                                       int32_t ndim, const int64_t *shape,
                                                       uint64_t flags, void *stream,
                                                       hurray_buffer *out);

/* hurray_copy ordered on a stream. Copies the elements of *src into new
 * compact row-major memory on `device` (same dtype and shape) and returns a
 * new live handle in *out with flags HURRAY_FLAG_IS_COPIED plus src's
 * HURRAY_FLAG_SUBBYTE_PADDED. Device pairs: CPU <-> CUDA kinds, CPU <-> ROCm
 * kinds, and any two kinds of the same vendor (including two device
 * ordinals); CPU -> CPU is a host copy. `stream` belongs to the GPU side
 * (the source's device when both sides are GPU memory); NULL means the
 * default stream and a copy that is complete on return (what hurray_copy
 * does).
 * With a stream: the copy is queued on `stream`, with the stream's device
 * current, and may still be running on return: the source must stay alive
 * and unchanged until then. A kDLCUDA/kDLROCM destination on the stream's
 * device is allocated stream-ordered on `stream` (its release frees on
 * `stream`, see hurray_alloc_async); one on another device ordinal is
 * allocated synchronously on its own device (cuMemAlloc / hipMalloc; its
 * release is not stream-ordered), since a stream belongs to one device.
 * With the per-thread default stream (2) the copy is queued on the calling
 * thread's stream and the destination is allocated synchronously.
 * A kDLCPU destination is always complete on return (the stream is
 * synchronised). A source that is not compact row-major is staged through
 * host memory and the call then completes before returning.
 * *src is only read, never consumed. On failure *out is untouched and
 * nothing stays allocated.
 * Errors: those of hurray_copy; UNSUPPORTED_DEVICE for CUDA <-> ROCm or any
 * pair involving another device type; DEVICE when the runtime fails the copy.
 * Thread-safe. (gpu §4) */
HURRAY_API HURRAY_NODISCARD int32_t hurray_copy_async(const hurray_buffer *src,
                                                      hurray_device device, void *stream,
                                                      hurray_buffer *out);

/* Makes `consumer_stream` wait, on the device, for all work queued so far on
 * `producer_stream`: an event is recorded on the producer and waited on by
 * the consumer; the host never blocks. This is the synchronisation of the
 * DLPack Python protocol's __dlpack__(stream=...). `device` selects the
 * runtime and the device whose context is current during the calls (device
 * type kDLCUDA, kDLCUDAHost, kDLCUDAManaged, kDLROCM or kDLROCMHost; pinned
 * and managed memory use ordinal 0); both streams must belong to it. NULL is
 * the default stream. Equal streams: nothing to do, HURRAY_OK.
 * Errors: UNSUPPORTED_DEVICE (not a GPU type, runtime unavailable, no such
 * device ordinal), DEVICE (the runtime refused, e.g. an invalid stream).
 * Thread-safe. (gpu §4) */
HURRAY_API HURRAY_NODISCARD int32_t hurray_stream_wait(hurray_device device,
                                                       void *producer_stream,
                                                       void *consumer_stream);

/* Counters of GPU releases that did not free, since the process started.
 * Cumulative, never reset; a forked child starts with its parent's values. */
typedef struct hurray_diagnostics {
  uint32_t struct_size;           /* in: sizeof(hurray_diagnostics) as compiled */
  uint32_t reserved;              /* 0 */
  uint64_t failed_releases;       /* a runtime call of a release failed: the
                                     free (the memory may be leaked), or making
                                     the owner current or restoring the
                                     thread's context/device before or after
                                     it; also sent to the hook */
  uint64_t teardown_leaks;        /* skipped: the driver was already torn down
                                     (CUDA_ERROR_DEINITIALIZED/hipErrorDeinitialized) */
  uint64_t fork_skipped_releases; /* skipped: released in a child after fork() */
} hurray_diagnostics;

/* Fills *out with the counters. The caller sets out->struct_size to
 * sizeof(hurray_diagnostics); only whole fields that end within that size
 * are written (a size that ends inside a field leaves that field alone), so
 * older callers stay compatible when fields are added, and on return
 * struct_size holds the number of bytes written.
 * Errors: INVALID_ARGUMENT (out NULL, struct_size smaller than the first
 * counter's end). Thread-safe; the counters are read one by one (relaxed),
 * not as one snapshot. (gpu §3) */
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
 * Teardown leaks and fork skips are counted only, never sent. */
typedef void (*hurray_diagnostic_hook_fn)(int32_t status, const char *message, void *user);

/* Installs `hook` (NULL removes it; default: none, failures are only
 * counted and nothing is printed). `user` is passed to every call. When this
 * returns, the previous hook is no longer running and will not be called
 * again, so its `user` may be freed; the one exception is a call made by
 * the running hook itself, which returns at once (the caller is the previous
 * hook, still running until it returns). Always returns HURRAY_OK.
 * Thread-safe. (gpu §3) */
HURRAY_API int32_t hurray_set_diagnostic_hook(hurray_diagnostic_hook_fn hook, void *user);

/* ===========================================================================
 * Entry point for runtimes that dlopen libhurray, and a handle move helper
 * (c-ffi §8)
 *
 * A runtime that loads libhurray with dlopen (a framework plugin, a language
 * binding) resolves one symbol, hurray_get_api, and reaches every other
 * function through the table it returns. It includes this header for the
 * types only and links nothing of libhurray.
 *
 * The table has its own version, independent of the library release
 * (HURRAY_VERSION): HURRAY_API_VERSION_MAJOR changes when any member's
 * signature or meaning, or the layout of a type a member takes, changes
 * incompatibly; HURRAY_API_VERSION_MINOR grows when members are appended.
 * Members are only ever appended at the end, never removed or reordered,
 * within one major version.
 * ======================================================================== */

/* Version of the hurray_api table this header describes. The two numbers
 * are packed as (major << 16) | minor; pass HURRAY_API_VERSION to
 * hurray_get_api. 0 is never a valid version. */
#define HURRAY_API_VERSION_MAJOR 1u
#define HURRAY_API_VERSION_MINOR 0u
#define HURRAY_API_VERSION \
  ((uint32_t)((HURRAY_API_VERSION_MAJOR << 16) | HURRAY_API_VERSION_MINOR))

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
 * 16 bytes of header (offsets below are for 64-bit targets), then one
 * pointer per member, in this order. */
typedef struct hurray_api {
  size_t struct_size;   /* sizeof(hurray_api) in the library          @0  */
  uint32_t abi_version; /* the library's HURRAY_API_VERSION           @8  */
  uint32_t reserved;    /* 0                                          @12 */

  /* --- Version 1.0: in this order forever. ------------------------------ */
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
  /* --- Members of later minor versions are appended here. --------------- */
} hurray_api;

/* 1 when the table `api` (a const hurray_api *) has `member`, i.e. the
 * member ends within api->struct_size; 0 otherwise. Needed only for members
 * newer than the minor version the caller asked hurray_get_api for. */
#define HURRAY_API_HAS(api, member)                      \
  ((api)->struct_size >= offsetof(hurray_api, member) + \
                             sizeof(((const hurray_api *)0)->member))

/* Type of hurray_get_api, for the pointer dlsym returns. */
typedef int32_t (*hurray_get_api_fn)(uint32_t abi_version, const hurray_api **out);

/* Returns libhurray's function table for a caller compiled against table
 * version `abi_version` (pass HURRAY_API_VERSION). The one symbol a runtime
 * that dlopens libhurray needs to resolve (dlsym(lib, "hurray_get_api")).
 * Version rule: the major numbers must be equal and the caller's minor must
 * be at most the library's (the library serves every older minor of its
 * major, since members are only appended).
 * On success *out points to the library's constant table (static storage,
 * never freed; every member non-NULL; api->struct_size >= the size of the
 * table at the caller's minor version).
 * On failure *out is untouched.
 * Errors: INVALID_ARGUMENT (out is NULL); UNSUPPORTED_VERSION (abi_version
 * is 0, has another major, or a newer minor than the library's; the message
 * names both versions).
 * Thread-safe; no allocation, no initialisation on first call. (c-ffi §8) */
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
