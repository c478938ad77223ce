/*
 * DLPack ABI declarations, version 1.3, written by the libhurray project from
 * the published DLPack specification (layouts, enum values, flag bits and
 * version rules are facts of that ABI; the wording here is ours).
 *
 * libhurray builds against this file by default. CMake option
 * HURRAY_DLPACK_INCLUDE_DIR points the build at another dlpack.h instead (for
 * example the upstream header shipped by a framework); src/dlpack_abi_check.cc
 * pins every size, offset, enum value and flag bit with static assertions, so
 * both headers must describe the same ABI or the build fails.
 *
 * The include guard is the upstream one on purpose: a translation unit that
 * already saw a framework's dlpack.h does not see these declarations twice.
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
#define DLPACK_MAJOR_VERSION 1
#define DLPACK_MINOR_VERSION 3

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

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* DLPACK_DLPACK_H_ */
