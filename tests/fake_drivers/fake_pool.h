// SPDX-License-Identifier: Apache-2.0
// The fake drivers' memory pools (fake_cuda_pool.cc, fake_hip_pool.h), as
// the CUDA Driver API reference's "Stream Ordered Memory Allocator" section and the
// CUDA Programming Guide's "Stream Ordered Memory Allocator" chapter
// ("Interprocess communication support", "IPC export pools", "IPC import
// pools") describe them:
//   - a device's default pool (cuDeviceGetDefaultMemPool) has handle type
//     NONE and cannot be exported; what cuMemAllocAsync hands out (the
//     Recorder's heap allocations, fake_common.h) belongs to it;
//   - cuMemPoolCreate with CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR in
//     handleTypes makes an IPC-capable pool: here a memfd mapped
//     MAP_SHARED, whose first page is a header (a table of allocations)
//     that every process mapping the pool sees;
//   - cuMemPoolExportToShareableHandle gives a dup of that memfd (without
//     close-on-exec), cuMemPoolImportFromShareableHandle maps it in
//     another process (an imported pool cannot allocate);
//   - cuMemPoolExportPointer's 64 bytes name the pool and the allocation's
//     slot, cuMemPoolImportPointer maps the importer's view of it and
//     records the importing process in the slot;
//   - "The imported memory must be freed from all importing processes
//     before being freed in the exporting process" (cuMemPoolImportPointer):
//     an exporter's free of an allocation that a live process still has
//     imported is counted (order_violations) and logged; the imports of a
//     process that no longer maps the pool (it died: the kernel drops its
//     mappings before it closes its fds) are dropped, as the driver drops
//     a dead process's imports.
// HIP documents the same model for its pools (hip_runtime_api.h,
// "Stream Ordered Memory Allocator": hipMemPoolExportToShareableHandle,
// hipMemPoolImportPointer's "freed from all importing processes before
// being freed in the exporting process"), with the same numbers for the
// results used here and for the POSIX-fd handle type.
// Results are CUresult numbers (hipError_t's are the same: 0, 1, 2).
#ifndef HURRAY_TESTS_FAKES_FAKE_POOL_H_
#define HURRAY_TESTS_FAKES_FAKE_POOL_H_

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <set>

namespace fake {

class Pools {
 public:
  static constexpr int kOk = 0, kInvalidValue = 1, kOutOfMemory = 2;
  static constexpr unsigned long long kPosixFd = 1;    // CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR
  static constexpr uint64_t kPoolBytes = 64ull << 20;  // each IPC-capable pool's memfd
  static constexpr uint64_t kHeaderBytes = 64 * 1024;  // its table of allocations
  static constexpr int kSlots = 1024;
  static constexpr int kImporters = 4;
  static constexpr const char *kMemfdName = "fake-gpu-pool";

  // One allocation of a pool, in the shared header. `importers` holds the
  // pids of processes that imported it and have not freed it.
  struct Slot {
    uint64_t offset;  // from the pool's base; 0: unused slot
    uint64_t bytes;
    int32_t importers[kImporters];
  };
  struct Header {
    char magic[8];  // "FAKEPOL"
    uint64_t id;    // the creating process's pool number
    int32_t creator;
    int32_t pad;
    uint64_t next;  // bump offset (creator only)
    Slot slots[kSlots];
  };
  static_assert(sizeof(Header) <= kHeaderBytes, "the pool header fits its pages");

  // cuMemPoolPtrExportData's 64 bytes.
  struct PtrData {
    char magic[8];  // "FAKEPTR"
    uint64_t pool_id;
    int32_t creator;
    int32_t slot;
    uint64_t offset;
    uint64_t bytes;
    char pad[24];
  };
  static_assert(sizeof(PtrData) == 64, "CUmemPoolPtrExportData is 64 bytes");

  struct Pool {
    int device;
    unsigned long long handle_types;
    bool is_default;
    bool imported;
    int memfd;   // -1 for the default pools
    char *base;  // the pool's mapping (kPoolBytes), nullptr for the default pools
    bool destroyed;
  };

  static Pools &get() {
    static Pools *p = new Pools;  // never destroyed, as the Recorder
    return *p;
  }

  // The default pool of `device` (handle type NONE), made on first request.
  Pool *default_pool(int device) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = defaults_.find(device);
    if (it != defaults_.end()) return it->second;
    Pool *p = new Pool{device, 0, true, false, -1, nullptr, false};
    defaults_[device] = p;
    pools_.insert(p);
    return p;
  }
  bool is_default_pool_of(const Pool *p, int *device) {
    std::lock_guard<std::mutex> lock(mu_);
    if (pools_.count(const_cast<Pool *>(p)) == 0 || !p->is_default) return false;
    *device = p->device;
    return true;
  }

  int create(int device, unsigned long long handle_types, Pool **out) {
    const int fd = memfd_create(kMemfdName, MFD_CLOEXEC);
    if (fd < 0) return kOutOfMemory;
    if (ftruncate(fd, static_cast<off_t>(kPoolBytes)) != 0) {
      close(fd);
      return kOutOfMemory;
    }
    void *m = mmap(nullptr, kPoolBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (m == MAP_FAILED) {
      close(fd);
      return kOutOfMemory;
    }
    auto *h = static_cast<Header *>(m);
    std::memcpy(h->magic, "FAKEPOL", 8);
    h->creator = static_cast<int32_t>(getpid());
    h->next = kHeaderBytes;
    std::lock_guard<std::mutex> lock(mu_);
    h->id = next_id_++;
    *out = new Pool{device, handle_types, false, false, fd, static_cast<char *>(m), false};
    pools_.insert(*out);
    return kOk;
  }

  bool known(Pool *p) {
    std::lock_guard<std::mutex> lock(mu_);
    return pools_.count(p) != 0 && !p->destroyed;
  }

  // cuMemPoolDestroy: the default pool cannot be destroyed. The fake keeps
  // the mapping (and so the memory of allocations not freed yet, which the
  // driver frees once they are): only the handle dies.
  int destroy(Pool *p) {
    std::lock_guard<std::mutex> lock(mu_);
    if (pools_.count(p) == 0 || p->destroyed || p->is_default) return kInvalidValue;
    p->destroyed = true;
    ++destroyed_;
    return kOk;
  }

  // cuDevicePrimaryCtxReset of `device` ("Destroy all allocations and reset
  // all state on the primary context": it "destroys and cleans up all
  // resources associated with the current device in the current process"):
  // every pool of the device that this process created or imported dies
  // with it (handles stay known, so that a later use is refused, as with
  // cuMemPoolDestroy); the default pool survives, as a device's default
  // pool cannot be destroyed. Not counted as a destroy. The pointers this
  // process imported from those pools are allocations of the context too
  // ("Destroy all allocations"): their imports end here (the exporter may
  // free them without an order violation), and a later cuMemFree of one is
  // refused (kInvalidValue), as a free of memory the reset freed.
  void drop_device(int device) {
    std::lock_guard<std::mutex> lock(mu_);
    for (Pool *p : pools_) {
      if (p->device == device && !p->is_default) p->destroyed = true;
    }
    const int32_t me = static_cast<int32_t>(getpid());
    for (auto it = imported_.begin(); it != imported_.end();) {
      Pool *p = it->second;
      Pool *q = nullptr;
      int i = -1;
      if (p->device != device) {
        ++it;
        continue;
      }
      if (find_locked(reinterpret_cast<const void *>(it->first), &q, &i) && q == p) {
        for (int32_t &pid : header(p)->slots[i].importers) {
          int32_t mine = me;
          if (__atomic_compare_exchange_n(&pid, &mine, 0, false, __ATOMIC_ACQ_REL,
                                          __ATOMIC_ACQUIRE)) {
            break;
          }
        }
      }
      it = imported_.erase(it);
    }
  }

  int export_fd(Pool *p, unsigned long long type, int *fd) {
    if (!known(p) || type != kPosixFd || (p->handle_types & kPosixFd) == 0 || p->imported) {
      return kInvalidValue;
    }
    *fd = fcntl(p->memfd, F_DUPFD, 0);  // the driver API does not promise close-on-exec
    return *fd >= 0 ? kOk : kOutOfMemory;
  }

  // The import belongs to `device`, the importing context's (CUDA: the
  // device of the current context; HIP: the current device): a reset of
  // that device destroys it (drop_device), as it destroys every resource
  // of the device in the process.
  int import_fd(int fd, unsigned long long type, int device, Pool **out) {
    struct stat st;
    if (type != kPosixFd || fd < 0 || fstat(fd, &st) != 0 ||
        static_cast<uint64_t>(st.st_size) != kPoolBytes) {
      return kInvalidValue;
    }
    void *m = mmap(nullptr, kPoolBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (m == MAP_FAILED) return kOutOfMemory;
    auto *h = static_cast<Header *>(m);
    if (std::memcmp(h->magic, "FAKEPOL", 8) != 0) {
      munmap(m, kPoolBytes);
      return kInvalidValue;
    }
    std::lock_guard<std::mutex> lock(mu_);
    *out = new Pool{device, kPosixFd, false, true, -1, static_cast<char *>(m), false};
    pools_.insert(*out);
    ++imports_;
    return kOk;
  }

  // cuMemAllocFromPoolAsync (a created pool; imported ones cannot
  // allocate: "Imported memory pools do not support creating new
  // allocations").
  int allocate(Pool *p, uint64_t bytes, void **out) {
    std::lock_guard<std::mutex> lock(mu_);
    if (pools_.count(p) == 0 || p->destroyed || p->imported || p->base == nullptr || bytes == 0) {
      return kInvalidValue;
    }
    auto *h = header(p);
    const uint64_t rounded = (bytes + 255) / 256 * 256;
    if (h->next + rounded > kPoolBytes) return kOutOfMemory;
    for (int i = 0; i < kSlots; ++i) {
      Slot &s = h->slots[i];
      if (s.offset != 0) continue;
      s.offset = h->next;
      s.bytes = bytes;
      for (int32_t &imp : s.importers) __atomic_store_n(&imp, 0, __ATOMIC_RELEASE);
      h->next += rounded;
      *out = p->base + s.offset;
      ++live_;
      return kOk;
    }
    return kOutOfMemory;
  }

  // The pool and slot of `ptr`, in this process (created or imported).
  bool find(const void *ptr, Pool **pool, int *slot) {
    std::lock_guard<std::mutex> lock(mu_);
    return find_locked(ptr, pool, slot);
  }

  bool range(const void *ptr, uintptr_t *base, uint64_t *bytes) {
    std::lock_guard<std::mutex> lock(mu_);
    Pool *p = nullptr;
    int i = -1;
    if (!find_locked(ptr, &p, &i)) return false;
    const Slot &s = header(p)->slots[i];
    *base = reinterpret_cast<uintptr_t>(p->base + s.offset);
    *bytes = s.bytes;
    return true;
  }

  int export_pointer(const void *ptr, PtrData *out) {
    std::lock_guard<std::mutex> lock(mu_);
    Pool *p = nullptr;
    int i = -1;
    if (!find_locked(ptr, &p, &i) || p->imported || (p->handle_types & kPosixFd) == 0) {
      return kInvalidValue;
    }
    const Slot &s = header(p)->slots[i];
    if (p->base + s.offset != ptr) return kInvalidValue;  // the allocation's own address
    std::memset(out, 0, sizeof *out);
    std::memcpy(out->magic, "FAKEPTR", 8);
    out->pool_id = header(p)->id;
    out->creator = header(p)->creator;
    out->slot = i;
    out->offset = s.offset;
    out->bytes = s.bytes;
    return kOk;
  }

  int import_pointer(Pool *p, const PtrData &d, void **out) {
    std::lock_guard<std::mutex> lock(mu_);
    if (pools_.count(p) == 0 || p->destroyed || !p->imported ||
        std::memcmp(d.magic, "FAKEPTR", 8) != 0 || d.slot < 0 || d.slot >= kSlots) {
      return kInvalidValue;
    }
    Header *h = header(p);
    if (h->id != d.pool_id || h->creator != d.creator) return kInvalidValue;
    Slot &s = h->slots[d.slot];
    if (s.offset != d.offset || s.offset == 0) return kInvalidValue;  // freed meanwhile
    const int32_t me = static_cast<int32_t>(getpid());
    for (int32_t &imp : s.importers) {
      int32_t zero = 0;
      if (__atomic_compare_exchange_n(&imp, &zero, me, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)) {
        *out = p->base + s.offset;
        imported_[reinterpret_cast<uintptr_t>(*out)] = p;
        ++pointer_imports_;
        return kOk;
      }
    }
    return kOutOfMemory;
  }

  // cuMemFree / cuMemFreeAsync of pool memory: an imported pointer drops
  // this process's import; the creator's own free releases the slot, and is
  // counted as an order violation when a live process still imports it.
  // kInvalidValue when `ptr` is no pool allocation of this process.
  int free(const void *ptr) {
    std::lock_guard<std::mutex> lock(mu_);
    auto imp = imported_.find(reinterpret_cast<uintptr_t>(ptr));
    if (imp != imported_.end()) {
      Pool *p = imp->second;
      int i = -1;
      Pool *q = nullptr;
      if (!find_locked(ptr, &q, &i) || q != p) return kInvalidValue;
      const int32_t me = static_cast<int32_t>(getpid());
      for (int32_t &pid : header(p)->slots[i].importers) {
        int32_t mine = me;
        if (__atomic_compare_exchange_n(&pid, &mine, 0, false, __ATOMIC_ACQ_REL,
                                        __ATOMIC_ACQUIRE)) {
          break;
        }
      }
      imported_.erase(imp);
      ++pointer_frees_;
      return kOk;
    }
    Pool *p = nullptr;
    int i = -1;
    if (!find_locked(ptr, &p, &i) || p->imported) return kInvalidValue;
    Slot &s = header(p)->slots[i];
    if (p->base + s.offset != ptr) return kInvalidValue;
    for (int32_t &pid : s.importers) {
      const int32_t who = __atomic_load_n(&pid, __ATOMIC_ACQUIRE);
      if (who == 0) continue;
      if (alive(who)) {
        ++order_violations_;
        std::fprintf(stderr,
                     "fake driver: pool memory %p freed by its exporter while process %d "
                     "still has it imported (cuMemPoolImportPointer, hipMemPoolImportPointer: "
                     "importers free first)\n",
                     ptr, static_cast<int>(who));
      }
      __atomic_store_n(&pid, 0, __ATOMIC_RELEASE);
    }
    s.offset = 0;
    s.bytes = 0;
    --live_;
    return kOk;
  }

  // Counters for the control API.
  int64_t live() {
    std::lock_guard<std::mutex> lock(mu_);
    return live_;
  }
  int64_t imports() {
    std::lock_guard<std::mutex> lock(mu_);
    return imports_;
  }
  int64_t pointer_imports() {
    std::lock_guard<std::mutex> lock(mu_);
    return pointer_imports_;
  }
  int64_t live_pointer_imports() {
    std::lock_guard<std::mutex> lock(mu_);
    return static_cast<int64_t>(imported_.size());
  }
  int64_t destroyed() {
    std::lock_guard<std::mutex> lock(mu_);
    return destroyed_;
  }
  int64_t order_violations() {
    std::lock_guard<std::mutex> lock(mu_);
    return order_violations_;
  }

 private:
  static Header *header(Pool *p) { return reinterpret_cast<Header *>(p->base); }
  // Whether process `pid` still holds its imports: it maps a pool. A
  // process that died lost its mappings before the kernel closes its fds
  // (do_exit releases the address space first), as the driver drops a dead
  // process's imports; a process whose maps cannot be read for another
  // reason than its end is taken as alive.
  static bool alive(int32_t pid) {
    char path[64];
    std::snprintf(path, sizeof path, "/proc/%d/maps", static_cast<int>(pid));
    FILE *f = std::fopen(path, "re");
    if (f == nullptr) return errno != ENOENT && errno != ESRCH;
    char line[512];
    bool maps_pool = false;
    while (!maps_pool && std::fgets(line, sizeof line, f) != nullptr) {
      maps_pool = std::strstr(line, kMemfdName) != nullptr;
    }
    std::fclose(f);
    return maps_pool;
  }
  bool find_locked(const void *ptr, Pool **pool, int *slot) {
    const char *a = static_cast<const char *>(ptr);
    for (Pool *p : pools_) {
      if (p->base == nullptr || a < p->base + kHeaderBytes || a >= p->base + kPoolBytes) continue;
      Header *h = header(p);
      for (int i = 0; i < kSlots; ++i) {
        const Slot &s = h->slots[i];
        if (s.offset != 0 && a >= p->base + s.offset && a < p->base + s.offset + s.bytes) {
          *pool = p;
          *slot = i;
          return true;
        }
      }
    }
    return false;
  }

  std::mutex mu_;
  std::set<Pool *> pools_;  // never freed: handles stay valid to compare
  std::map<int, Pool *> defaults_;
  std::map<uintptr_t, Pool *> imported_;  // imported pointers of this process
  uint64_t next_id_ = 1;
  int64_t live_ = 0, imports_ = 0, pointer_imports_ = 0, pointer_frees_ = 0, destroyed_ = 0,
          order_violations_ = 0;
};

}  // namespace fake

// The control API's pool counters (fake_control.h) of a fake, `prefix`
// fake_cuda_ or fake_hip_.
#define FAKE_POOL_EXPORTS(prefix)                                                               \
  FAKE_EXPORT int64_t prefix##pool_live_allocations(void) { return fake::Pools::get().live(); } \
  FAKE_EXPORT int64_t prefix##pool_imports(void) { return fake::Pools::get().imports(); }       \
  FAKE_EXPORT int64_t prefix##pool_pointer_imports(void) {                                      \
    return fake::Pools::get().pointer_imports();                                                \
  }                                                                                             \
  FAKE_EXPORT int64_t prefix##pool_live_pointer_imports(void) {                                 \
    return fake::Pools::get().live_pointer_imports();                                           \
  }                                                                                             \
  FAKE_EXPORT int64_t prefix##pools_destroyed(void) { return fake::Pools::get().destroyed(); }  \
  FAKE_EXPORT int64_t prefix##pool_order_violations(void) {                                     \
    return fake::Pools::get().order_violations();                                               \
  }

#endif  // HURRAY_TESTS_FAKES_FAKE_POOL_H_
