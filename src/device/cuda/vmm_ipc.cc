// SPDX-License-Identifier: Apache-2.0
// CUDA VMM allocations across processes as POSIX fds (device/cuda/vmm_ipc.h,
// docs/impl/ipc.md §6): export by cuMemRetainAllocationHandle and
// cuMemExportToShareableHandle, import by cuMemImportFromShareableHandle,
// cuMemAddressReserve, cuMemMap and cuMemSetAccess.
#if defined(HURRAY_WITH_CUDA)

#include "device/cuda/vmm_ipc.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cinttypes>
#include <cstdint>
#include <cstring>

#include "common/error.h"

namespace hurray::detail {

namespace {

// Whether the mapping [base, base + size) holding the data, a mapping of the
// allocation `h` (cuMemRetainAllocationHandle returns "the same handle value
// used to map the memory"), maps the whole of that allocation from its
// offset 0: what the receiver maps (cuMemMap at offset 0, region_length
// bytes). The driver has no query for an allocation's size or a mapping's
// offset, but cuMemMap refuses `offset + size` beyond the allocation (CUDA
// Driver API reference, Virtual Memory Management, cuMemMap), and every size
// is a multiple of the minimum granularity (cuMemGetAllocationGranularity).
// So, in a scratch reservation of size + granularity: a mapping of
// size + granularity bytes from offset 0 must be refused (the allocation is
// no larger than the mapping) and one of size bytes accepted (it is no
// smaller): then the allocation is exactly `size` bytes, and a mapping of
// that many of its bytes can only start at its offset 0. Neither scratch
// mapping is given access; both are undone at once. *whole answers; a
// driver failure returns its CUresult with *call naming the entry point.
CUresult maps_whole_allocation(const CudaDriver &d, CUmemGenericAllocationHandle h,
                               const CUmemAllocationProp &prop, size_t size, bool *whole,
                               const char **call) {
  *whole = false;
  size_t g = 0;
  *call = "cuMemGetAllocationGranularity";
  CUresult r = d.mem_get_allocation_granularity(&g, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM);
  if (r != CUDA_SUCCESS) return r;
  // Not a mapping's size at all: not what the driver documents.
  if (g == 0 || size == 0 || size % g != 0 || size > SIZE_MAX - g) return CUDA_SUCCESS;
  CUdeviceptr va = 0;
  *call = "cuMemAddressReserve";
  r = d.mem_address_reserve(&va, size + g, 0, 0, 0);
  if (r != CUDA_SUCCESS) return r;
  *call = "cuMemMap";
  r = d.mem_map(va, size + g, 0, h, 0);
  if (r == CUDA_SUCCESS) {
    // The allocation is larger than the mapping.
    *call = "cuMemUnmap";
    r = d.mem_unmap(va, size + g);
  } else if (r == CUDA_ERROR_INVALID_VALUE) {
    r = d.mem_map(va, size, 0, h, 0);
    if (r == CUDA_SUCCESS) {
      *whole = true;
      *call = "cuMemUnmap";
      r = d.mem_unmap(va, size);
    } else if (r == CUDA_ERROR_INVALID_VALUE) {
      r = CUDA_SUCCESS;  // smaller than the range reported: not one mapping of it
    }
  }
  const CUresult freed = d.mem_address_free(va, size + g);
  if (r == CUDA_SUCCESS && freed != CUDA_SUCCESS) {
    *call = "cuMemAddressFree";
    r = freed;
  }
  if (r != CUDA_SUCCESS) *whole = false;
  return r;
}

}  // namespace

CUresult vmm_export(const CudaDriver &d, const void *data, GpuIpcExport *out, const char **call,
                    VmmFound *found) {
  *found = VmmFound::kNotVmm;
  if (!d.vmm_ipc()) return CUDA_SUCCESS;
  CUmemGenericAllocationHandle h = 0;
  // Fails for memory no cuMemMap mapped (cuMemAlloc, pool memory, a legacy
  // IPC mapping): that memory goes the legacy way.
  if (d.mem_retain_allocation_handle(&h, const_cast<void *>(data)) != CUDA_SUCCESS) {
    return CUDA_SUCCESS;
  }
  CUmemAllocationProp prop;
  std::memset(&prop, 0, sizeof prop);
  *call = "cuMemGetAllocationPropertiesFromHandle";
  CUresult r = d.mem_get_allocation_properties(&prop, h);
  int fd = -1;
  if (r == CUDA_SUCCESS &&
      (prop.requestedHandleTypes & CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR) == 0) {
    *found = VmmFound::kNoFdType;
  } else if (r == CUDA_SUCCESS) {
    *call = "cuMemGetAddressRange";
    CUdeviceptr base = 0;
    size_t size = 0;
    r = d.mem_get_address_range(&base, &size, dptr(data));
    bool whole = false;
    if (r == CUDA_SUCCESS) r = maps_whole_allocation(d, h, prop, size, &whole, call);
    if (r == CUDA_SUCCESS && !whole) {
      *found = VmmFound::kNotWholeAllocation;
    } else if (r == CUDA_SUCCESS) {
      *call = "cuMemExportToShareableHandle";
      r = d.mem_export_to_shareable_handle(&fd, h, CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0);
    }
    if (r == CUDA_SUCCESS) {
      out->alloc_size = size;
      out->data_offset = static_cast<uint64_t>(dptr(data) - base);
    }
  }
  // The retained reference only; the mapping keeps the memory alive.
  const CUresult rel = d.mem_release(h);
  if (r == CUDA_SUCCESS && rel != CUDA_SUCCESS) {
    *call = "cuMemRelease";
    r = rel;
  }
  if (r != CUDA_SUCCESS) {
    if (fd >= 0) close(fd);
    *found = VmmFound::kNotVmm;
    return r;
  }
  if (*found == VmmFound::kNotVmm) {  // exported (not a refusal)
    // Close-on-exec like every other fd libhurray makes: the driver's fd
    // may lack it, and an exec'd program that inherited it would hold the
    // allocation (and could map it) past every release.
    if (fcntl(fd, F_SETFD, FD_CLOEXEC) != 0) {
      close(fd);
      *call = "fcntl(F_SETFD, FD_CLOEXEC) of the exported fd";
      return CUDA_ERROR_OPERATING_SYSTEM;
    }
    out->vmm_fd = fd;
    *found = VmmFound::kExported;
  }
  return CUDA_SUCCESS;
}

int32_t vmm_refuse_partial_mapping(hurray_device device, const void *data) {
  return fail(HURRAY_ERR_UNSUPPORTED_DEVICE,
              "%p on CUDA device %" PRId32
              " lies in a CUDA VMM mapping (cuMemMap) that does not map its whole allocation "
              "from offset 0 (a part of a larger cuMemCreate allocation, or a mapping at an "
              "offset into it): the receiver maps one whole allocation from offset 0, and the "
              "descriptor has no field for an offset into the allocation, so it would see other "
              "bytes; map each allocation whole, with one cuMemMap at offset 0, to send it to "
              "another process",
              data, device.device_id);
}

int32_t vmm_open(hurray_device device, int fd, uint64_t size, GpuVmmMapping *out) {
  const CudaDriver *d = cuda_driver();
  if (d == nullptr) return HURRAY_ERR_UNSUPPORTED_DEVICE;
  if (!d->vmm_ipc()) {
    return fail(HURRAY_ERR_UNSUPPORTED_DEVICE,
                "this CUDA driver lacks the virtual memory management entry points "
                "(cuMemImportFromShareableHandle, cuMemMap, ...) that a kind-2 message needs");
  }
  CUmemGenericAllocationHandle h = 0;
  CUdeviceptr va = 0;
  const size_t n = static_cast<size_t>(size);
  const char *call = "cuMemImportFromShareableHandle";
  bool mapped = false;  // every step worked, whatever leaving the context did
  const int32_t st = Cuda::with_device(device.device_id, &call, [&](const CudaDriver &drv) {
    // The fd is passed by value in the pointer argument; the driver does not
    // take it over (the caller closes it).
    CUresult r = drv.mem_import_from_shareable_handle(
        &h, reinterpret_cast<void *>(static_cast<uintptr_t>(fd)),
        CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR);
    if (r != CUDA_SUCCESS) return r;
    call = "cuMemAddressReserve";
    r = drv.mem_address_reserve(&va, n, 0, 0, 0);
    if (r == CUDA_SUCCESS) {
      call = "cuMemMap";
      r = drv.mem_map(va, n, 0, h, 0);
      if (r == CUDA_SUCCESS) {
        CUmemAccessDesc access;
        std::memset(&access, 0, sizeof access);
        access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
        access.location.id = device.device_id;
        access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
        call = "cuMemSetAccess";
        r = drv.mem_set_access(va, n, &access, 1);
        mapped = r == CUDA_SUCCESS;
        if (mapped) return r;
        (void)drv.mem_unmap(va, n);
      }
      (void)drv.mem_address_free(va, n);
    }
    (void)drv.mem_release(h);
    return r;
  });
  if (st != HURRAY_OK) {
    // Mapped, but giving the thread its context back failed: undone here
    // (with_device's contract), or the import would be leaked for good.
    if (mapped) vmm_close(device, GpuVmmMapping{hptr(va), size, static_cast<uint64_t>(h)});
    return st;
  }
  out->base = hptr(va);
  out->size = size;
  out->handle = static_cast<uint64_t>(h);
  return HURRAY_OK;
}

void vmm_close(hurray_device device, const GpuVmmMapping &m) {
  release_in_primary(device, m.base, [&](const CudaDriver &d, const char **call) {
    const size_t n = static_cast<size_t>(m.size);
    *call = "cuMemUnmap";
    CUresult r = d.mem_unmap(dptr(m.base), n);
    if (r != CUDA_SUCCESS) return r;
    *call = "cuMemAddressFree";
    r = d.mem_address_free(dptr(m.base), n);
    if (r != CUDA_SUCCESS) return r;
    *call = "cuMemRelease";
    return d.mem_release(static_cast<CUmemGenericAllocationHandle>(m.handle));
  });
}

}  // namespace hurray::detail

#endif  // HURRAY_WITH_CUDA
