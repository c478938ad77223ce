// SPDX-License-Identifier: Apache-2.0
// The fake HIP runtime's memory pools, over fake::Pools (fake_pool.h, the
// model the fake CUDA driver's pools use too). Included by fake_hip.cc
// after its helpers (enter, done, rec, the stream and capture checks): the
// entry points of ROCm's "Stream Ordered Memory Allocator" as the HIP
// runtime API reference documents them (hip_runtime_api.h, ROCm 5.2 to 7):
//   - hipMemPoolCreate: hipMemAllocationTypePinned on a
//     hipMemLocationTypeDevice, handleTypes hipMemHandleTypeNone or
//     hipMemHandleTypePosixFileDescriptor ("Specifying hipMemHandleTypeNone
//     creates a memory pool that will not support IPC"); the reserved bytes
//     must be 0 (ROCm 6.3 put maxSize in the first 8 of them: any value);
//   - hipMemPoolExportToShareableHandle: "To create an IPC capable mempool,
//     create a mempool with a hipMemAllocationHandleType other than
//     hipMemHandleTypeNone"; flags must be 0; the fd is written as an int;
//   - hipMemPoolImportFromShareableHandle: the fd by value in the pointer
//     argument (as ROCm's own hip-tests pass it); "Imported memory pools do
//     not support creating new allocations";
//   - hipMemPoolExportPointer / hipMemPoolImportPointer: 64 bytes of export
//     data; "The imported memory must be freed from all importing processes
//     before being freed in the exporting process. The pointer may be freed
//     with hipFree or hipFreeAsync" (fake_hip.cc's frees call
//     pool_free_hip);
//   - hipPointerGetAttribute with HIP_POINTER_ATTRIBUTE_MEMPOOL_HANDLE
//     ("Returns the mempool handle for the allocation if it was allocated
//     from a mempool"): the pool of pool memory, the device's default pool
//     for hipMallocAsync memory, NULL for other memory of the fake. The fake
//     answers no other attribute (hipErrorInvalidValue); libhurray asks no
//     other. FAKE_HIP_NO_MEMPOOL_ATTRIBUTE=1 makes it answer
//     hipErrorInvalidValue for this one too (a ROCm that does not implement
//     it).
// Each call is logged; `bytes` of hipMemPoolCreate is handleTypes.
#ifndef HURRAY_TESTS_FAKES_FAKE_HIP_POOL_H_
#define HURRAY_TESTS_FAKES_FAKE_HIP_POOL_H_

#include "fake_pool.h"

namespace {

// hipMemPoolProps, as ROCm 5 and 6 lay it out.
struct HipMemPoolProps {
  int alloc_type;     // hipMemAllocationTypePinned = 1
  int handle_types;   // hipMemHandleTypeNone = 0, hipMemHandleTypePosixFileDescriptor = 1
  int location_type;  // hipMemLocationTypeDevice = 1
  int location_id;
  void *win32_security_attributes;
  unsigned char reserved[64];  // ROCm 6.3+: size_t maxSize, then 56 reserved
};
struct HipMemPoolPtrExportData {
  unsigned char reserved[64];
};
constexpr int kHipPointerAttributeMempoolHandle = 17;  // HIP_POINTER_ATTRIBUTE_MEMPOOL_HANDLE

fake::Pools &hip_pools() { return fake::Pools::get(); }
fake::Pools::Pool *as_hip_pool(void *p) { return static_cast<fake::Pools::Pool *>(p); }

// For hipFree / hipFreeAsync: pool memory of this process (its own or an
// imported pointer).
bool pool_free_hip(void *p) { return hip_pools().free(p) == 0; }
bool pool_range_hip(const void *p, uintptr_t *base, uint64_t *bytes) {
  return hip_pools().range(p, base, bytes);
}

}  // namespace

FAKE_EXPORT hipError_t hipMemPoolCreate(void **pool, const HipMemPoolProps *props) {
  FAKE_ENTER("hipMemPoolCreate");
  bool ok = pool != nullptr && props != nullptr && props->alloc_type == 1 &&
            props->location_type == 1 && props->location_id >= 0 &&
            props->location_id < config().device_count &&
            (props->handle_types == 0 || props->handle_types == 1);
  for (size_t i = 8; ok && i < sizeof props->reserved; ++i) ok = props->reserved[i] == 0;
  if (!ok) return done("hipMemPoolCreate", kInvalidValue);
  fake::Pools::Pool *p = nullptr;
  const int r = hip_pools().create(props->location_id,
                                   static_cast<unsigned long long>(props->handle_types), &p);
  if (r == 0) *pool = p;
  return done("hipMemPoolCreate", r, p, nullptr, static_cast<uint64_t>(props->handle_types));
}

FAKE_EXPORT hipError_t hipMemPoolDestroy(void *pool) {
  FAKE_ENTER("hipMemPoolDestroy", pool);
  return done("hipMemPoolDestroy", hip_pools().destroy(as_hip_pool(pool)), pool);
}

// From a created pool on a stream; a stream being captured or destroyed
// answers as for hipMallocAsync.
FAKE_EXPORT hipError_t hipMallocFromPoolAsync(void **dp, size_t bytes, void *pool, hipStream_t s) {
  FAKE_ENTER("hipMallocFromPoolAsync", nullptr, s, bytes);
  if (hipError_t e = stream_error(s)) return done("hipMallocFromPoolAsync", e, nullptr, s, bytes);
  void *p = nullptr;
  const int r = dp == nullptr ? kInvalidValue : hip_pools().allocate(as_hip_pool(pool), bytes, &p);
  if (r == 0) *dp = p;
  return done("hipMallocFromPoolAsync", r, p, s, bytes, pool);
}

// Logged with other = the fd.
FAKE_EXPORT hipError_t hipMemPoolExportToShareableHandle(void *out, void *pool, int type,
                                                         unsigned int flags) {
  FAKE_ENTER("hipMemPoolExportToShareableHandle", pool);
  int fd = -1;
  const int r =
      out == nullptr || flags != 0
          ? kInvalidValue
          : hip_pools().export_fd(as_hip_pool(pool), static_cast<unsigned long long>(type), &fd);
  if (r == 0) *static_cast<int *>(out) = fd;
  return done("hipMemPoolExportToShareableHandle", r, pool, nullptr, 0,
              reinterpret_cast<void *>(static_cast<uintptr_t>(fd < 0 ? 0 : fd)));
}

// The fd is left open (the fake maps it and keeps nothing of it); each
// import is counted (pool_imports).
FAKE_EXPORT hipError_t hipMemPoolImportFromShareableHandle(void **pool, void *handle, int type,
                                                           unsigned int flags) {
  FAKE_ENTER("hipMemPoolImportFromShareableHandle");
  const int fd = static_cast<int>(reinterpret_cast<uintptr_t>(handle));
  fake::Pools::Pool *p = nullptr;
  const int r =
      pool == nullptr || flags != 0
          ? kInvalidValue
          : hip_pools().import_fd(fd, static_cast<unsigned long long>(type), t_device, &p);
  if (r == 0) *pool = p;
  return done("hipMemPoolImportFromShareableHandle", r, p, nullptr, 0, handle);
}

FAKE_EXPORT hipError_t hipMemPoolExportPointer(HipMemPoolPtrExportData *out, void *ptr) {
  FAKE_ENTER("hipMemPoolExportPointer", ptr);
  static_assert(sizeof out->reserved == sizeof(fake::Pools::PtrData), "64 bytes");
  fake::Pools::PtrData d;
  const int r = out == nullptr ? kInvalidValue : hip_pools().export_pointer(ptr, &d);
  if (r == 0) std::memcpy(out->reserved, &d, sizeof d);
  return done("hipMemPoolExportPointer", r, ptr);
}

FAKE_EXPORT hipError_t hipMemPoolImportPointer(void **out, void *pool,
                                               HipMemPoolPtrExportData *data) {
  FAKE_ENTER("hipMemPoolImportPointer", pool);
  fake::Pools::PtrData d;
  void *p = nullptr;
  int r = kInvalidValue;
  if (out != nullptr && data != nullptr) {
    std::memcpy(&d, data->reserved, sizeof d);
    r = hip_pools().import_pointer(as_hip_pool(pool), d, &p);
  }
  if (r == 0) *out = p;
  return done("hipMemPoolImportPointer", r, p, pool);
}

FAKE_EXPORT hipError_t hipPointerGetAttribute(void *data, int attr, void *ptr) {
  FAKE_ENTER("hipPointerGetAttribute", ptr);
  if (data == nullptr || attr != kHipPointerAttributeMempoolHandle ||
      fake::env_int("FAKE_HIP_NO_MEMPOOL_ATTRIBUTE", 0) != 0) {
    return done("hipPointerGetAttribute", kInvalidValue, ptr);
  }
  fake::Pools::Pool *p = nullptr;
  int slot = -1;
  fake::Allocation a{};
  if (hip_pools().find(ptr, &p, &slot)) {
    *static_cast<void **>(data) = p;
  } else if (rec().find(ptr, &a)) {
    // hipMalloc memory is a memfd (legacy IPC), hipMallocAsync memory is not.
    const bool async = a.kind == fake::Kind::kDevice && a.memfd < 0;
    *static_cast<void **>(data) = async ? hip_pools().default_pool(a.device) : nullptr;
  } else {
    uintptr_t b = 0;
    uint64_t n = 0;
    if (!rec().address_range(ptr, &b, &n))
      return done("hipPointerGetAttribute", kInvalidValue, ptr);
    *static_cast<void **>(data) = nullptr;  // memory opened with legacy IPC
  }
  return done("hipPointerGetAttribute", kSuccess, ptr, nullptr, static_cast<uint64_t>(attr));
}

FAKE_POOL_EXPORTS(fake_hip_)

FAKE_EXPORT int fake_hip_pool_create(int device, unsigned long long handle_types, void **pool) {
  HipMemPoolProps props;
  std::memset(&props, 0, sizeof props);
  props.alloc_type = 1;
  props.handle_types = static_cast<int>(handle_types);
  props.location_type = 1;
  props.location_id = device;
  return hipMemPoolCreate(pool, &props);
}

#endif  // HURRAY_TESTS_FAKES_FAKE_HIP_POOL_H_
