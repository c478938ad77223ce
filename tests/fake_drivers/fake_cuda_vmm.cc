// SPDX-License-Identifier: Apache-2.0
// The fake CUDA driver's virtual memory management (part of libcuda.so.1,
// see fake_cuda.cc): the cuMem* VMM entry points over fake::Vmm
// (fake_vmm.h), and the control API's VMM helpers (fake_control.h).
#include <cuda.h>

#include <cstring>

#include "fake_cuda_internal.h"
#include "fake_vmm.h"

namespace fake_cuda {

// Virtual memory management (fake_vmm.h). Like the real driver's, these
// need no current context; each is logged (ptr: the address or the
// allocation handle's value, bytes: the size, stream: for cuMemSetAccess the
// device given access, as an integer).
CUresult vmm_done(const char *fn, int r, uintptr_t ptr = 0, uint64_t bytes = 0,
                  uintptr_t other = 0) {
  return done(fn, static_cast<CUresult>(r), reinterpret_cast<void *>(ptr), nullptr, bytes,
              reinterpret_cast<void *>(other));
}

CUresult f_mem_create(CUmemGenericAllocationHandle *h, size_t size, const CUmemAllocationProp *prop,
                      unsigned long long flags) {
  FAKE_ENTER("cuMemCreate", nullptr, nullptr, size);
  if (h == nullptr || prop == nullptr || flags != 0 ||
      prop->type != CU_MEM_ALLOCATION_TYPE_PINNED ||
      prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE || prop->location.id < 0 ||
      prop->location.id >= config().device_count) {
    return vmm_done("cuMemCreate", CUDA_ERROR_INVALID_VALUE, 0, size);
  }
  uint64_t id = 0;
  const int r = fake::Vmm::get().create(size, prop->requestedHandleTypes, prop->location.id, &id);
  if (r == 0) *h = id;
  return vmm_done("cuMemCreate", r, id, size);
}

// Granularity of a device allocation: fake::Vmm::granularity(), for either
// option (CUmemAllocationGranularity_flags).
CUresult f_mem_get_allocation_granularity(size_t *g, const CUmemAllocationProp *prop,
                                          CUmemAllocationGranularity_flags option) {
  FAKE_ENTER("cuMemGetAllocationGranularity");
  const bool ok = g != nullptr && prop != nullptr &&
                  prop->location.type == CU_MEM_LOCATION_TYPE_DEVICE && prop->location.id >= 0 &&
                  prop->location.id < config().device_count &&
                  (option == CU_MEM_ALLOC_GRANULARITY_MINIMUM ||
                   option == CU_MEM_ALLOC_GRANULARITY_RECOMMENDED);
  if (ok) *g = static_cast<size_t>(fake::Vmm::granularity());
  return vmm_done("cuMemGetAllocationGranularity", ok ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE);
}

CUresult f_mem_release(CUmemGenericAllocationHandle h) {
  FAKE_ENTER("cuMemRelease");
  return vmm_done("cuMemRelease", fake::Vmm::get().release(h), h);
}

CUresult f_mem_address_reserve(CUdeviceptr *va, size_t size, size_t, CUdeviceptr addr,
                               unsigned long long flags) {
  FAKE_ENTER("cuMemAddressReserve", nullptr, nullptr, size);
  if (va == nullptr || addr != 0 || flags != 0)
    return vmm_done("cuMemAddressReserve", CUDA_ERROR_INVALID_VALUE, 0, size);
  uintptr_t p = 0;
  const int r = fake::Vmm::get().reserve(size, &p);
  if (r == 0) *va = static_cast<CUdeviceptr>(p);
  return vmm_done("cuMemAddressReserve", r, p, size);
}

CUresult f_mem_address_free(CUdeviceptr va, size_t size) {
  FAKE_ENTER("cuMemAddressFree", as_ptr(va), nullptr, size);
  return vmm_done("cuMemAddressFree", fake::Vmm::get().address_free(va, size), va, size);
}

CUresult f_mem_map(CUdeviceptr va, size_t size, size_t offset, CUmemGenericAllocationHandle h,
                   unsigned long long flags) {
  FAKE_ENTER("cuMemMap", as_ptr(va), nullptr, size);
  const int r = flags != 0 ? CUDA_ERROR_INVALID_VALUE : fake::Vmm::get().map(va, size, offset, h);
  return vmm_done("cuMemMap", r, va, size, h);
}

CUresult f_mem_unmap(CUdeviceptr va, size_t size) {
  FAKE_ENTER("cuMemUnmap", as_ptr(va), nullptr, size);
  return vmm_done("cuMemUnmap", fake::Vmm::get().unmap(va, size), va, size);
}

CUresult f_mem_set_access(CUdeviceptr va, size_t size, const CUmemAccessDesc *desc, size_t count) {
  FAKE_ENTER("cuMemSetAccess", as_ptr(va), nullptr, size);
  bool ok = desc != nullptr && count > 0;
  for (size_t i = 0; ok && i < count; ++i) {
    ok = desc[i].location.type == CU_MEM_LOCATION_TYPE_DEVICE && desc[i].location.id >= 0 &&
         desc[i].location.id < config().device_count &&
         (desc[i].flags == CU_MEM_ACCESS_FLAGS_PROT_READ ||
          desc[i].flags == CU_MEM_ACCESS_FLAGS_PROT_READWRITE);
  }
  const int r = ok ? fake::Vmm::get().set_access(va, size) : CUDA_ERROR_INVALID_VALUE;
  return vmm_done("cuMemSetAccess", r, va, size,
                  ok ? static_cast<uintptr_t>(desc[0].location.id) : 0);
}

CUresult f_mem_retain_allocation_handle(CUmemGenericAllocationHandle *h, void *addr) {
  FAKE_ENTER("cuMemRetainAllocationHandle", addr);
  uint64_t id = 0;
  const int r = h == nullptr ? CUDA_ERROR_INVALID_VALUE
                             : fake::Vmm::get().retain(reinterpret_cast<uintptr_t>(addr), &id);
  if (r == 0) *h = id;
  return vmm_done("cuMemRetainAllocationHandle", r, reinterpret_cast<uintptr_t>(addr), 0, id);
}

CUresult f_mem_get_allocation_properties(CUmemAllocationProp *prop,
                                         CUmemGenericAllocationHandle h) {
  FAKE_ENTER("cuMemGetAllocationPropertiesFromHandle");
  unsigned long long types = 0;
  int device = 0;
  const int r =
      prop == nullptr ? CUDA_ERROR_INVALID_VALUE : fake::Vmm::get().properties(h, &types, &device);
  if (r == 0) {
    std::memset(prop, 0, sizeof *prop);
    prop->type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop->requestedHandleTypes = static_cast<CUmemAllocationHandleType>(types);
    prop->location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop->location.id = device;
  }
  return vmm_done("cuMemGetAllocationPropertiesFromHandle", r, h);
}

CUresult f_mem_export_to_shareable_handle(void *out, CUmemGenericAllocationHandle h,
                                          CUmemAllocationHandleType type,
                                          unsigned long long flags) {
  FAKE_ENTER("cuMemExportToShareableHandle");
  int fd = -1;
  const int r = out == nullptr || flags != 0 ? CUDA_ERROR_INVALID_VALUE
                                             : fake::Vmm::get().export_fd(h, type, &fd);
  if (r == 0) *static_cast<int *>(out) = fd;
  return vmm_done("cuMemExportToShareableHandle", r, h, 0, static_cast<uintptr_t>(fd < 0 ? 0 : fd));
}

// The fd comes by value in the pointer argument; the fake keeps a dup of
// its own and leaves the caller's open (the caller closes it).
CUresult f_mem_import_from_shareable_handle(CUmemGenericAllocationHandle *h, void *os_handle,
                                            CUmemAllocationHandleType type) {
  FAKE_ENTER("cuMemImportFromShareableHandle");
  uint64_t id = 0;
  const int fd = static_cast<int>(reinterpret_cast<uintptr_t>(os_handle));
  const int r = h == nullptr || type != CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR
                    ? CUDA_ERROR_INVALID_VALUE
                    : fake::Vmm::get().import(fd, &id);
  if (r == 0) *h = id;
  return vmm_done("cuMemImportFromShareableHandle", r, id, 0, static_cast<uintptr_t>(fd));
}

}  // namespace fake_cuda

using namespace fake_cuda;  // NOLINT: the exports below call the entry points above

// VMM for tests (fake_control.h): an allocation made through the fake's own
// entry points, as an application makes one, and its undoing.
FAKE_EXPORT int fake_cuda_vmm_alloc(int device, uint64_t bytes, unsigned long long handle_types,
                                    void **out) {
  CUmemAllocationProp prop;
  std::memset(&prop, 0, sizeof prop);
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = device;
  prop.requestedHandleTypes = static_cast<CUmemAllocationHandleType>(handle_types);
  CUmemGenericAllocationHandle h = 0;
  CUresult r = f_mem_create(&h, bytes, &prop, 0);
  if (r != CUDA_SUCCESS) return r;
  CUdeviceptr va = 0;
  r = f_mem_address_reserve(&va, bytes, 0, 0, 0);
  if (r == CUDA_SUCCESS) r = f_mem_map(va, bytes, 0, h, 0);
  CUmemAccessDesc access;
  std::memset(&access, 0, sizeof access);
  access.location = prop.location;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  if (r == CUDA_SUCCESS) r = f_mem_set_access(va, bytes, &access, 1);
  (void)f_mem_release(h);  // the mapping holds the memory from here on
  if (r != CUDA_SUCCESS) return r;
  *out = as_ptr(va);
  return CUDA_SUCCESS;
}
FAKE_EXPORT int fake_cuda_vmm_free(void *p, uint64_t bytes) {
  CUresult r = f_mem_unmap(as_dptr(p), bytes);
  return r != CUDA_SUCCESS ? r : f_mem_address_free(as_dptr(p), bytes);
}
FAKE_EXPORT int64_t fake_cuda_vmm_live_allocations(void) {
  return fake::Vmm::get().live_allocations();
}
FAKE_EXPORT int64_t fake_cuda_vmm_live_mappings(void) { return fake::Vmm::get().live_mappings(); }
FAKE_EXPORT int64_t fake_cuda_vmm_handle_references(void) {
  return fake::Vmm::get().handle_references();
}
