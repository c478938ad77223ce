// SPDX-License-Identifier: Apache-2.0
// The fake CUDA driver's virtual memory management (fake_cuda_vmm.cc): physical
// allocations are memfds, an address reservation is a PROT_NONE mapping of
// the host, and cuMemMap maps the memfd over it with MAP_FIXED | MAP_SHARED,
// so an allocation exported as an fd and imported by another process really
// shares its pages. An allocation lives while a handle reference (cuMemCreate,
// cuMemRetainAllocationHandle, cuMemImportFromShareableHandle; each undone
// by cuMemRelease) or a mapping holds it. Results are CUresult numbers.
#ifndef HURRAY_TESTS_FAKES_FAKE_VMM_H_
#define HURRAY_TESTS_FAKES_FAKE_VMM_H_

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdint>
#include <map>
#include <mutex>

namespace fake {

class Vmm {
 public:
  static constexpr int kOk = 0, kInvalidValue = 1, kOutOfMemory = 2, kNotSupported = 801;

  static Vmm &get() {
    static Vmm *v = new Vmm;  // never destroyed, as the Recorder
    return *v;
  }

  int create(uint64_t bytes, unsigned long long handle_types, int device, uint64_t *handle) {
    if (bytes == 0 || bytes % page() != 0) return kInvalidValue;
    const int fd = memfd_create("fake-vmm-allocation", MFD_CLOEXEC);
    if (fd < 0) return kOutOfMemory;
    if (ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
      close(fd);
      return kOutOfMemory;
    }
    std::lock_guard<std::mutex> lock(mu_);
    *handle = add(fd, bytes, handle_types, device);
    return kOk;
  }
  // The allocation behind another process's (or this one's) exported fd:
  // a new handle of its own, holding a dup of the memfd.
  int import(int fd, uint64_t *handle) {
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0 || st.st_size <= 0) return kInvalidValue;
    const int own = fcntl(fd, F_DUPFD_CLOEXEC, 0);
    if (own < 0) return kInvalidValue;
    std::lock_guard<std::mutex> lock(mu_);
    *handle = add(own, static_cast<uint64_t>(st.st_size), kPosixFd, 0);
    return kOk;
  }
  int release(uint64_t handle) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = allocs_.find(handle);
    if (it == allocs_.end() || it->second.handle_refs == 0) return kInvalidValue;
    --it->second.handle_refs;
    drop_if_unused(it);
    return kOk;
  }
  int properties(uint64_t handle, unsigned long long *types, int *device) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = allocs_.find(handle);
    if (it == allocs_.end()) return kInvalidValue;
    *types = it->second.handle_types;
    *device = it->second.device;
    return kOk;
  }
  int export_fd(uint64_t handle, unsigned long long type, int *fd) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = allocs_.find(handle);
    if (it == allocs_.end() || type != kPosixFd) return kInvalidValue;
    if ((it->second.handle_types & kPosixFd) == 0) return kNotSupported;
    // Without close-on-exec: the driver API does not promise it, so
    // libhurray must set it itself.
    *fd = fcntl(it->second.memfd, F_DUPFD, 0);
    return *fd >= 0 ? kOk : kOutOfMemory;
  }

  int reserve(uint64_t size, uintptr_t *va) {
    if (size == 0 || size % page() != 0) return kInvalidValue;
    void *p = mmap(nullptr, static_cast<size_t>(size), PROT_NONE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) return kOutOfMemory;
    std::lock_guard<std::mutex> lock(mu_);
    *va = reinterpret_cast<uintptr_t>(p);
    reserved_[*va] = size;
    return kOk;
  }
  int address_free(uintptr_t va, uint64_t size) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = reserved_.find(va);
    if (it == reserved_.end() || it->second != size) return kInvalidValue;
    for (auto &m : maps_) {
      if (m.first >= va && m.first < va + size) return kInvalidValue;  // still mapped
    }
    munmap(reinterpret_cast<void *>(va), static_cast<size_t>(size));
    reserved_.erase(it);
    return kOk;
  }
  // cuMemMap as the CUDA Driver API reference (Virtual Memory Management,
  // cuMemMap) describes it today: `size` bytes of the allocation from byte
  // `offset` (CUDA 11.0's reference required 0; the current one allows any
  // offset with `offset + size` within the allocation), `va`, `size` and
  // `offset` multiples of the granularity (granularity()), on an unmapped
  // part of a reservation. Several mappings may share one reservation, back
  // to back (PyTorch's expandable segments).
  int map(uintptr_t va, uint64_t size, uint64_t offset, uint64_t handle) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = allocs_.find(handle);
    if (it == allocs_.end() || size == 0 || va % page() != 0 || size % page() != 0 ||
        offset % page() != 0 || offset > it->second.bytes || size > it->second.bytes - offset ||
        !inside_reservation(va, size) || mapped_within(va, size)) {
      return kInvalidValue;
    }
    void *p = mmap(reinterpret_cast<void *>(va), static_cast<size_t>(size), PROT_READ | PROT_WRITE,
                   MAP_SHARED | MAP_FIXED, it->second.memfd, static_cast<off_t>(offset));
    if (p == MAP_FAILED) return kOutOfMemory;
    ++it->second.mappings;
    maps_[va] = Mapping{size, handle, false};
    return kOk;
  }
  // cuMemGetAllocationGranularity (minimum and recommended alike): the
  // fake's allocations and mappings are in host pages.
  static uint64_t granularity() { return page(); }
  int set_access(uintptr_t va, uint64_t size) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = maps_.find(va);
    if (it == maps_.end() || it->second.size != size) return kInvalidValue;
    it->second.accessible = true;
    return kOk;
  }
  int unmap(uintptr_t va, uint64_t size) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = maps_.find(va);
    if (it == maps_.end() || it->second.size != size) return kInvalidValue;
    // Back to a PROT_NONE reservation.
    mmap(reinterpret_cast<void *>(va), static_cast<size_t>(size), PROT_NONE,
         MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED, -1, 0);
    auto a = allocs_.find(it->second.handle);
    maps_.erase(it);
    if (a != allocs_.end()) {
      --a->second.mappings;
      drop_if_unused(a);
    }
    return kOk;
  }
  // By any address inside a mapping; kInvalidValue for other memory.
  int retain(uintptr_t addr, uint64_t *handle) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = mapping_at(addr);
    if (it == maps_.end()) return kInvalidValue;
    ++allocs_[it->second.handle].handle_refs;
    *handle = it->second.handle;
    return kOk;
  }
  // The one mapping holding `addr`, never the whole reservation nor the
  // allocation behind it: what cuMemGetAddressRange answers for VMM memory
  // (the reference documents the base and size "of the allocation"; for a
  // VMM range the driver reports the cuMemMap segment, which libfabric's and
  // UCX's maintainers observed: ofiwg/libfabric#12473, openucx/ucx#11461).
  bool range(uintptr_t addr, uintptr_t *base, uint64_t *size) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = mapping_at(addr);
    if (it == maps_.end()) return false;
    *base = it->first;
    *size = it->second.size;
    return true;
  }

  int64_t live_allocations() {
    std::lock_guard<std::mutex> lock(mu_);
    return static_cast<int64_t>(allocs_.size());
  }
  int64_t live_mappings() {
    std::lock_guard<std::mutex> lock(mu_);
    return static_cast<int64_t>(maps_.size());
  }
  int64_t handle_references() {
    std::lock_guard<std::mutex> lock(mu_);
    int64_t n = 0;
    for (auto &a : allocs_) n += a.second.handle_refs;
    return n;
  }

 private:
  static constexpr unsigned long long kPosixFd = 1;  // CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR
  struct Alloc {
    int memfd;
    uint64_t bytes;
    unsigned long long handle_types;
    int device;
    int handle_refs;
    int mappings;
  };
  struct Mapping {
    uint64_t size;
    uint64_t handle;
    bool accessible;
  };
  static uint64_t page() { return static_cast<uint64_t>(sysconf(_SC_PAGESIZE)); }

  uint64_t add(int fd, uint64_t bytes, unsigned long long types, int device) {
    const uint64_t h = next_++;
    allocs_[h] = Alloc{fd, bytes, types, device, 1, 0};
    return h;
  }
  void drop_if_unused(std::map<uint64_t, Alloc>::iterator it) {
    if (it->second.handle_refs > 0 || it->second.mappings > 0) return;
    close(it->second.memfd);
    allocs_.erase(it);
  }
  bool inside_reservation(uintptr_t va, uint64_t size) {
    auto it = reserved_.upper_bound(va);
    if (it == reserved_.begin()) return false;
    --it;
    return va >= it->first && va + size <= it->first + it->second;
  }
  bool mapped_within(uintptr_t va, uint64_t size) {
    for (auto &m : maps_) {
      if (m.first < va + size && va < m.first + m.second.size) return true;
    }
    return false;
  }
  std::map<uintptr_t, Mapping>::iterator mapping_at(uintptr_t addr) {
    auto it = maps_.upper_bound(addr);
    if (it == maps_.begin()) return maps_.end();
    --it;
    return addr < it->first + it->second.size ? it : maps_.end();
  }

  std::mutex mu_;
  uint64_t next_ = 0x1000;
  std::map<uint64_t, Alloc> allocs_;
  std::map<uintptr_t, uint64_t> reserved_;
  std::map<uintptr_t, Mapping> maps_;
};

}  // namespace fake

#endif  // HURRAY_TESTS_FAKES_FAKE_VMM_H_
