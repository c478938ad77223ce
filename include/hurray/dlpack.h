// SPDX-License-Identifier: Apache-2.0
/*
 * hurray/dlpack.h - the DLPack 1.3 C declarations, written by the libhurray
 * project from the published DLPack specification. Layouts, enum values,
 * flag bits, function-table layouts and version rules are facts of that ABI;
 * the wording here is ours.
 *
 * This is the complete 1.3 C API: the tensor structs, the flag bits, and the
 * C exchange API (DLPackExchangeAPIHeader, DLPackExchangeAPI and its five
 * function-pointer types). hurray/hurray.h includes it, and it is installed
 * beside it, so `#include <hurray/dlpack.h>` (or just <hurray/hurray.h>)
 * gives a program every DLPack type with nothing else installed.
 *
 * Coexistence with the upstream header (the dlpack/dlpack.h that PyTorch,
 * TVM FFI and others ship): both use the include guard DLPACK_DLPACK_H_ and
 * declare the same names with the same types, tags and layouts, so in one
 * translation unit whichever comes first is the one set of definitions and
 * the other is skipped. tests/packaging/dlpack_coexist.c{,c} include both in
 * either order; src/handle/dlpack_abi_pin.cc pins every size, offset, enum value
 * and flag bit of whichever header the library is built with.
 */
#ifndef DLPACK_DLPACK_H_
#define DLPACK_DLPACK_H_

#include <stddef.h>
#include <stdint.h>

/*
 * Version rules. A consumer that reads a DLManagedTensorVersioned whose
 * version.major differs from the major it was built for must not read any
 * field except `deleter`, which it must call (the fields up to and including
 * `flags` never move). A newer minor version only adds enum values and flag
 * bits; a consumer may use such a tensor if every value in it is one it knows.
 */
/* Defined only by this header: tells a translation unit whose copy of the
 * declarations it got (tests/packaging/dlpack_coexist.c reads it). */
#define HURRAY_DLPACK_DECLARATIONS 1

#define DLPACK_MAJOR_VERSION 1
#define DLPACK_MINOR_VERSION 3

/* `extern "C"` in C++, nothing in C (upstream spelling, for code using it). */
#ifdef __cplusplus
#define DLPACK_EXTERN_C extern "C"
#else
#define DLPACK_EXTERN_C
#endif

/* Symbol visibility prefix on Windows (DLPACK_EXPORTS when building a DLL);
 * empty elsewhere. */
#ifdef _WIN32
#ifdef DLPACK_EXPORTS
#define DLPACK_DLL __declspec(dllexport)
#else
#define DLPACK_DLL __declspec(dllimport)
#endif
#else
#define DLPACK_DLL
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* Version pair carried by DLManagedTensorVersioned. 8 bytes. */
typedef struct {
  uint32_t major; /* incompatible layout changes */
  uint32_t minor; /* additions only (enum values, flag bits) */
} DLPackVersion;

/* Where the memory lives. Values are fixed by the specification; 5 and 6 are
 * retired and never reused. */
#ifdef __cplusplus
typedef enum : int32_t {
#else
typedef enum {
#endif
  kDLCPU = 1,          /* ordinary host memory */
  kDLCUDA = 2,         /* CUDA device memory */
  kDLCUDAHost = 3,     /* page-locked host memory from cudaMallocHost */
  kDLOpenCL = 4,       /* OpenCL buffer */
  kDLVulkan = 7,       /* Vulkan buffer */
  kDLMetal = 8,        /* Metal buffer (Apple) */
  kDLVPI = 9,          /* Verilog simulator buffer */
  kDLROCM = 10,        /* ROCm / HIP device memory */
  kDLROCMHost = 11,    /* page-locked host memory from hipHostMalloc */
  kDLExtDev = 12,      /* reserved for out-of-tree devices */
  kDLCUDAManaged = 13, /* CUDA unified (managed) memory */
  kDLOneAPI = 14,      /* SYCL / oneAPI unified shared memory */
  kDLWebGPU = 15,      /* WebGPU buffer */
  kDLHexagon = 16,     /* Qualcomm Hexagon DSP */
  kDLMAIA = 17,        /* Microsoft MAIA */
  kDLTrn = 18,         /* AWS Trainium (added in 1.2) */
} DLDeviceType;

/* A device: its type and the ordinal among devices of that type (0 for host,
 * pinned host and managed memory). 8 bytes. */
typedef struct {
  DLDeviceType device_type;
  int32_t device_id;
} DLDevice;

/* Meaning of DLDataType::code. */
typedef enum {
  kDLInt = 0U,
  kDLUInt = 1U,
  kDLFloat = 2U,
  kDLOpaqueHandle = 3U, /* opaque pointer-sized handles */
  kDLBfloat = 4U,       /* bfloat16 */
  kDLComplex = 5U,      /* bits is the width of the whole complex number */
  kDLBool = 6U,         /* one byte per element */
  /* 8-bit floating point formats (bits must be 8) */
  kDLFloat8_e3m4 = 7U,
  kDLFloat8_e4m3 = 8U,
  kDLFloat8_e4m3b11fnuz = 9U,
  kDLFloat8_e4m3fn = 10U,
  kDLFloat8_e4m3fnuz = 11U,
  kDLFloat8_e5m2 = 12U,
  kDLFloat8_e5m2fnuz = 13U,
  kDLFloat8_e8m0fnu = 14U,
  /* 6-bit formats (bits must be 6) */
  kDLFloat6_e2m3fn = 15U,
  kDLFloat6_e3m2fn = 16U,
  /* 4-bit format (bits must be 4) */
  kDLFloat4_e2m1fn = 17U,
} DLDataTypeCode;

/* Element type: `code` from DLDataTypeCode, `bits` per lane, `lanes` for
 * vector types (1 for scalars). 4 bytes, alignment 2. */
typedef struct {
  uint8_t code;
  uint8_t bits;
  uint16_t lanes;
} DLDataType;

/* A strided view of memory. Element (i0, ..., i{n-1}) is at
 *   (char *)data + byte_offset + (sum_k ik * strides[k]) * bytes_per_element
 * `strides` count elements (not bytes) and may be negative or zero. From 1.2
 * `strides` must be non-NULL whenever ndim != 0; before that a NULL `strides`
 * meant compact row-major. `shape`/`strides` may be NULL when ndim == 0, and
 * `data` may be NULL when the tensor has no elements. 48 bytes. */
typedef struct {
  void *data;
  DLDevice device;
  int32_t ndim;
  DLDataType dtype;
  int64_t *shape;
  int64_t *strides;
  uint64_t byte_offset;
} DLTensor;

/* The pre-1.0 managed tensor (no version, no flags). `deleter` may be NULL;
 * when called it frees everything, including this struct, and must receive
 * the very pointer the producer handed out. 64 bytes. */
typedef struct DLManagedTensor {
  DLTensor dl_tensor;
  void *manager_ctx; /* producer's private context */
  void (*deleter)(struct DLManagedTensor *self);
} DLManagedTensor;

/* Flag bits of DLManagedTensorVersioned::flags. */
#define DLPACK_FLAG_BITMASK_READ_ONLY (1UL << 0UL)
#define DLPACK_FLAG_BITMASK_IS_COPIED (1UL << 1UL)
#define DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED (1UL << 2UL)

/* The versioned managed tensor (1.0 and later). `version`, `manager_ctx`,
 * `deleter` and `flags` are frozen: they stay at these offsets in every future
 * major version, so any consumer can always call `deleter`. 80 bytes. */
typedef struct DLManagedTensorVersioned {
  DLPackVersion version;
  void *manager_ctx;
  void (*deleter)(struct DLManagedTensorVersioned *self);
  uint64_t flags;
  DLTensor dl_tensor;
} DLManagedTensorVersioned;

/* ---------------------------------------------------------------------------
 * The C exchange API (DLPack 1.2 added it, 1.3 moved it to a type attribute).
 *
 * A Python array library publishes one process-lifetime DLPackExchangeAPI
 * table as the *type* attribute `__dlpack_c_exchange_api__` of its array
 * type: a PyCapsule named "dlpack_exchange_api" whose pointer is the table.
 * A consumer looks the attribute up on type(x) (it may cache it per type),
 * checks header.version.major, and calls the functions below directly from
 * C, without going through Python-level __dlpack__ calls.
 *
 * Every function returns 0 on success and non-zero on failure, never throws,
 * and is called with the GIL held. "NoSync" means no stream ordering is done:
 * the consumer asks current_work_stream for the producer's stream and orders
 * its own work after it.
 * ------------------------------------------------------------------------- */

/* Allocates a new tensor in the producer: dtype, ndim, shape and device are
 * read from `prototype` (nothing else). On success stores an owning tensor in
 * *out and returns 0. On failure returns non-zero and calls
 * SetError(error_ctx, kind, message) exactly once, where `kind` names a
 * Python exception type ("MemoryError", "ValueError", ...); SetError may need
 * the GIL. */
typedef int (*DLPackManagedTensorAllocator)(DLTensor *prototype, DLManagedTensorVersioned **out,
                                            void *error_ctx,
                                            void (*SetError)(void *error_ctx, const char *kind,
                                                             const char *message));

/* Exports the Python object `py_object` (a PyObject *, of exactly the type the
 * table was found on) as a new owning tensor in *out. Returns 0, or non-zero
 * with a Python exception set (BufferError when DLPack cannot describe it). */
typedef int (*DLPackManagedTensorFromPyObjectNoSync)(void *py_object,
                                                     DLManagedTensorVersioned **out);

/* Fills the caller's DLTensor `*out` with a borrowed, non-owning view of
 * `py_object`: shape, strides and data stay owned by the object and are only
 * valid until control returns to Python. Returns 0, or non-zero with a
 * Python exception set. This member of the table may be NULL. */
typedef int (*DLPackDLTensorFromPyObjectNoSync)(void *py_object, DLTensor *out);

/* Stores in *out_current_stream the producer's current work stream on the
 * device (device_type, device_id), e.g. a cudaStream_t or hipStream_t; NULL
 * for CPU devices or the default stream. Returns 0, or non-zero with a
 * Python exception set. */
typedef int (*DLPackCurrentWorkStream)(DLDeviceType device_type, int32_t device_id,
                                       void **out_current_stream);

/* Makes a Python object of the producer's array type from `tensor`, taking
 * ownership of it on success (its deleter runs when that object is freed).
 * Stores a new reference (a PyObject *) in *out_py_object and returns 0; on
 * failure returns non-zero with a Python exception set. */
typedef int (*DLPackManagedTensorToPyObjectNoSync)(DLManagedTensorVersioned *tensor,
                                                   void **out_py_object);

/* The part of a table that never changes across versions: a consumer reads
 * `version` first and uses the table only when version.major is the major it
 * was built for. `prev_api` optionally links to a table of an older version
 * (NULL when there is none). 16 bytes on 64-bit targets. */
typedef struct DLPackExchangeAPIHeader {
  DLPackVersion version;
  struct DLPackExchangeAPIHeader *prev_api;
} DLPackExchangeAPIHeader;

/* A producer's table. Every member is non-NULL except
 * dltensor_from_py_object_no_sync. It lives for the whole process.
 * 56 bytes on 64-bit targets. */
typedef struct DLPackExchangeAPI {
  DLPackExchangeAPIHeader header;
  DLPackManagedTensorAllocator managed_tensor_allocator;
  DLPackManagedTensorFromPyObjectNoSync managed_tensor_from_py_object_no_sync;
  DLPackManagedTensorToPyObjectNoSync managed_tensor_to_py_object_no_sync;
  DLPackDLTensorFromPyObjectNoSync dltensor_from_py_object_no_sync;
  DLPackCurrentWorkStream current_work_stream;
} DLPackExchangeAPI;

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* DLPACK_DLPACK_H_ */
