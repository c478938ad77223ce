// SPDX-License-Identifier: Apache-2.0
// Pins the DLPack ABI the library is built with: every size, offset, enum
// value and flag bit, checked against the published 1.3 layout (see
// docs/spec/buffer-protocol.md §6.1). Builds against include/hurray/dlpack.h or any
// external dlpack.h (HURRAY_DLPACK_INCLUDE_DIR) must agree, or fail here.
#include <hurray/dlpack.h>

#include <cstddef>

#include "hurray/hurray.h"

#define HURRAY_CHECK_OFFSET(type, field, off) \
  static_assert(offsetof(type, field) == (off), #type "." #field " offset")

static_assert(DLPACK_MAJOR_VERSION == 1, "DLPack major version");
static_assert(DLPACK_MINOR_VERSION >= 3, "DLPack header older than 1.3");

static_assert(sizeof(DLPackVersion) == 8, "DLPackVersion size");
HURRAY_CHECK_OFFSET(DLPackVersion, major, 0);
HURRAY_CHECK_OFFSET(DLPackVersion, minor, 4);

static_assert(sizeof(DLDevice) == 8, "DLDevice size");
static_assert(sizeof(DLDeviceType) == 4, "DLDeviceType size");
HURRAY_CHECK_OFFSET(DLDevice, device_type, 0);
HURRAY_CHECK_OFFSET(DLDevice, device_id, 4);

static_assert(sizeof(DLDataType) == 4 && alignof(DLDataType) == 2, "DLDataType layout");
HURRAY_CHECK_OFFSET(DLDataType, code, 0);
HURRAY_CHECK_OFFSET(DLDataType, bits, 1);
HURRAY_CHECK_OFFSET(DLDataType, lanes, 2);

static_assert(sizeof(DLTensor) == 48, "DLTensor size");
HURRAY_CHECK_OFFSET(DLTensor, data, 0);
HURRAY_CHECK_OFFSET(DLTensor, device, 8);
HURRAY_CHECK_OFFSET(DLTensor, ndim, 16);
HURRAY_CHECK_OFFSET(DLTensor, dtype, 20);
HURRAY_CHECK_OFFSET(DLTensor, shape, 24);
HURRAY_CHECK_OFFSET(DLTensor, strides, 32);
HURRAY_CHECK_OFFSET(DLTensor, byte_offset, 40);

static_assert(sizeof(DLManagedTensor) == 64, "DLManagedTensor size");
HURRAY_CHECK_OFFSET(DLManagedTensor, dl_tensor, 0);
HURRAY_CHECK_OFFSET(DLManagedTensor, manager_ctx, 48);
HURRAY_CHECK_OFFSET(DLManagedTensor, deleter, 56);

static_assert(sizeof(DLManagedTensorVersioned) == 80, "DLManagedTensorVersioned size");
HURRAY_CHECK_OFFSET(DLManagedTensorVersioned, version, 0);
HURRAY_CHECK_OFFSET(DLManagedTensorVersioned, manager_ctx, 8);
HURRAY_CHECK_OFFSET(DLManagedTensorVersioned, deleter, 16);
HURRAY_CHECK_OFFSET(DLManagedTensorVersioned, flags, 24);
HURRAY_CHECK_OFFSET(DLManagedTensorVersioned, dl_tensor, 32);

static_assert(DLPACK_FLAG_BITMASK_READ_ONLY == 1, "READ_ONLY bit");
static_assert(DLPACK_FLAG_BITMASK_IS_COPIED == 2, "IS_COPIED bit");
static_assert(DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED == 4, "SUBBYTE_PADDED bit");
static_assert(HURRAY_FLAG_READ_ONLY == DLPACK_FLAG_BITMASK_READ_ONLY, "flag bits shared");
static_assert(HURRAY_FLAG_IS_COPIED == DLPACK_FLAG_BITMASK_IS_COPIED, "flag bits shared");
static_assert(HURRAY_FLAG_SUBBYTE_PADDED == DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED,
              "flag bits shared");

static_assert(kDLCPU == 1 && kDLCUDA == 2 && kDLCUDAHost == 3 && kDLOpenCL == 4 && kDLVulkan == 7 &&
                  kDLMetal == 8 && kDLVPI == 9 && kDLROCM == 10 && kDLROCMHost == 11 &&
                  kDLExtDev == 12 && kDLCUDAManaged == 13 && kDLOneAPI == 14 && kDLWebGPU == 15 &&
                  kDLHexagon == 16 && kDLMAIA == 17 && kDLTrn == 18,
              "DLDeviceType values");
static_assert(HURRAY_DEVICE_CPU == kDLCPU && HURRAY_DEVICE_CUDA == kDLCUDA &&
                  HURRAY_DEVICE_CUDA_HOST == kDLCUDAHost && HURRAY_DEVICE_ROCM == kDLROCM &&
                  HURRAY_DEVICE_ROCM_HOST == kDLROCMHost &&
                  HURRAY_DEVICE_CUDA_MANAGED == kDLCUDAManaged,
              "hurray device values are DLPack's");

static_assert(kDLInt == 0 && kDLUInt == 1 && kDLFloat == 2 && kDLOpaqueHandle == 3 &&
                  kDLBfloat == 4 && kDLComplex == 5 && kDLBool == 6,
              "DLDataTypeCode base values");
static_assert(kDLFloat8_e3m4 == 7 && kDLFloat8_e4m3 == 8 && kDLFloat8_e4m3b11fnuz == 9 &&
                  kDLFloat8_e4m3fn == 10 && kDLFloat8_e4m3fnuz == 11 && kDLFloat8_e5m2 == 12 &&
                  kDLFloat8_e5m2fnuz == 13 && kDLFloat8_e8m0fnu == 14,
              "DLDataTypeCode fp8 values");
static_assert(kDLFloat6_e2m3fn == 15 && kDLFloat6_e3m2fn == 16 && kDLFloat4_e2m1fn == 17,
              "DLDataTypeCode fp6/fp4 values");

// The handle itself (spec §2.1).
// The C exchange API table (1.3): a 16-byte header, then five function
// pointers in the published order.
static_assert(sizeof(void *) != 8 || sizeof(DLPackExchangeAPIHeader) == 16, "exchange header size");
HURRAY_CHECK_OFFSET(DLPackExchangeAPIHeader, version, 0);
HURRAY_CHECK_OFFSET(DLPackExchangeAPIHeader, prev_api, 8);
static_assert(sizeof(void *) != 8 || sizeof(DLPackExchangeAPI) == 56, "exchange table size");
HURRAY_CHECK_OFFSET(DLPackExchangeAPI, header, 0);
HURRAY_CHECK_OFFSET(DLPackExchangeAPI, managed_tensor_allocator, 16);
HURRAY_CHECK_OFFSET(DLPackExchangeAPI, managed_tensor_from_py_object_no_sync, 24);
HURRAY_CHECK_OFFSET(DLPackExchangeAPI, managed_tensor_to_py_object_no_sync, 32);
HURRAY_CHECK_OFFSET(DLPackExchangeAPI, dltensor_from_py_object_no_sync, 40);
HURRAY_CHECK_OFFSET(DLPackExchangeAPI, current_work_stream, 48);

static_assert(sizeof(hurray_buffer) == 80, "hurray_buffer size");
HURRAY_CHECK_OFFSET(hurray_buffer, version, 0);
HURRAY_CHECK_OFFSET(hurray_buffer, reserved, 4);
HURRAY_CHECK_OFFSET(hurray_buffer, release_fn, 8);
HURRAY_CHECK_OFFSET(hurray_buffer, user_data, 16);
HURRAY_CHECK_OFFSET(hurray_buffer, flags, 24);
HURRAY_CHECK_OFFSET(hurray_buffer, data, 32);
HURRAY_CHECK_OFFSET(hurray_buffer, byte_offset, 40);
HURRAY_CHECK_OFFSET(hurray_buffer, device, 48);
HURRAY_CHECK_OFFSET(hurray_buffer, dtype, 56);
HURRAY_CHECK_OFFSET(hurray_buffer, ndim, 60);
HURRAY_CHECK_OFFSET(hurray_buffer, shape, 64);
HURRAY_CHECK_OFFSET(hurray_buffer, strides, 72);
static_assert(sizeof(hurray_device) == 8 && sizeof(hurray_dtype) == 4, "handle parts");
static_assert(sizeof(hurray_extent) == 40, "hurray_extent size");
