// SPDX-License-Identifier: Apache-2.0
// What both fake GPU libraries share: the call log, failure injection, and
// host-memory allocations standing in for device memory. Each fake compiles
// its own copy (one Recorder per library).
#ifndef HURRAY_TESTS_FAKES_FAKE_COMMON_H_
#define HURRAY_TESTS_FAKES_FAKE_COMMON_H_

#include <fcntl.h>
#include <pthread.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "fake_control.h"

#define FAKE_EXPORT extern "C" __attribute__((visibility("default")))

namespace fake {

enum class Kind { kDevice, kPinned, kManaged };

struct Allocation {
  uint64_t bytes;
  Kind kind;
  int device;
  int memfd = -1;  // plain device allocations: a memfd another process can open (legacy IPC)
  uint64_t mapped = 0;
};

// The fake's legacy IPC handle (64 bytes, as cuIpcMemHandle / hipIpcMemHandle_t):
// the exporting process, the memfd behind the allocation and its size. The
// importer opens /proc/PID/fd/FD: real cross-process sharing of the pages.
struct IpcHandle {
  char magic[8];  // "FAKEIPC"
  int32_t pid;
  int32_t fd;
  uint64_t bytes;
  char pad[40];
};
static_assert(sizeof(IpcHandle) == 64, "legacy IPC handles are 64 bytes");

// Why ipc_open failed.
enum class IpcOpenError { kNone, kOwnProcess, kBadHandle, kOpenFailed };

inline int env_int(const char *name, int fallback) {
  const char *v = std::getenv(name);
  return v != nullptr && v[0] != '\0' ? std::atoi(v) : fallback;
}

class Recorder {
 public:
  // Never destroyed: releases may reach the fake during process exit, and
  // leak checkers must still see the allocations as reachable.
  static Recorder &get() {
    static Recorder *r = new Recorder;
    return *r;
  }

  // The injected result for the next call of `fn`, or 0.
  int injected(const char *fn) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = inject_.find(fn);
    if (it == inject_.end()) return 0;
    const int result = it->second.first;
    if (it->second.second > 0 && --it->second.second == 0) inject_.erase(it);
    return result;
  }

  int record(const char *fn, int device, int result, const void *ptr = nullptr,
             const void *stream = nullptr, uint64_t bytes = 0, const void *other = nullptr) {
    if (!recording.load(std::memory_order_relaxed)) return result;
    fake_call c{};
    std::snprintf(c.fn, sizeof c.fn, "%s", fn);
    c.thread = static_cast<uint64_t>(pthread_self());
    c.device = device;
    c.result = result;
    c.ptr = const_cast<void *>(ptr);
    c.stream = const_cast<void *>(stream);
    c.other = const_cast<void *>(other);
    c.bytes = bytes;
    std::lock_guard<std::mutex> lock(mu_);
    log_.push_back(c);
    return result;
  }

  // `shareable`: the pages are a memfd mapped MAP_SHARED (what cuMemAlloc /
  // hipMalloc give, exportable with legacy IPC); else heap memory.
  void *allocate(uint64_t bytes, Kind kind, int device, bool shareable = false) {
    const size_t rounded = static_cast<size_t>((bytes + 255) / 256 * 256);
    if (shareable) {
      const size_t len = rounded > 0 ? rounded : 256;
      const int fd = memfd_create("fake-device-memory", MFD_CLOEXEC);
      if (fd < 0) return nullptr;
      void *m = ftruncate(fd, static_cast<off_t>(len)) == 0
                    ? mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0)
                    : MAP_FAILED;
      if (m == MAP_FAILED) {
        close(fd);
        return nullptr;
      }
      std::lock_guard<std::mutex> lock(mu_);
      allocs_[reinterpret_cast<uintptr_t>(m)] = Allocation{bytes, kind, device, fd, len};
      return m;
    }
    void *p = std::aligned_alloc(256, rounded > 0 ? rounded : 256);
    if (p == nullptr) return nullptr;
    std::lock_guard<std::mutex> lock(mu_);
    allocs_[reinterpret_cast<uintptr_t>(p)] = Allocation{bytes, kind, device};
    return p;
  }

  // --- legacy IPC ---
  // The handle of the allocation based at `p`; false when `p` is not the
  // base of a plain device allocation (pool memory, pinned, an interior
  // address).
  bool ipc_handle(const void *p, IpcHandle *out) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = allocs_.find(reinterpret_cast<uintptr_t>(p));
    if (it == allocs_.end() || it->second.memfd < 0) return false;
    std::memset(out, 0, sizeof *out);
    std::memcpy(out->magic, "FAKEIPC", 8);
    out->pid = static_cast<int32_t>(getpid());
    out->fd = it->second.memfd;
    out->bytes = it->second.mapped;
    return true;
  }
  // Maps another process's allocation; the real drivers refuse a handle of
  // the calling process itself.
  void *ipc_open(const IpcHandle &h, IpcOpenError *why) {
    *why = IpcOpenError::kBadHandle;
    if (std::memcmp(h.magic, "FAKEIPC", 8) != 0 || h.bytes == 0) return nullptr;
    if (h.pid == static_cast<int32_t>(getpid())) {
      *why = IpcOpenError::kOwnProcess;
      return nullptr;
    }
    char path[64];
    std::snprintf(path, sizeof path, "/proc/%d/fd/%d", static_cast<int>(h.pid),
                  static_cast<int>(h.fd));
    *why = IpcOpenError::kOpenFailed;
    const int fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0) return nullptr;
    void *m =
        mmap(nullptr, static_cast<size_t>(h.bytes), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (m == MAP_FAILED) return nullptr;
    *why = IpcOpenError::kNone;
    std::lock_guard<std::mutex> lock(mu_);
    opened_[reinterpret_cast<uintptr_t>(m)] = h.bytes;
    return m;
  }
  // Unmaps what ipc_open mapped at `p`; false if it did not.
  bool ipc_close(const void *p) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = opened_.find(reinterpret_cast<uintptr_t>(p));
    if (it == opened_.end()) return false;
    munmap(const_cast<void *>(p), static_cast<size_t>(it->second));
    opened_.erase(it);
    return true;
  }
  int64_t ipc_open_count() {
    std::lock_guard<std::mutex> lock(mu_);
    return static_cast<int64_t>(opened_.size());
  }
  // Base and size of the allocation (or the opened IPC mapping) holding `p`.
  bool address_range(const void *p, uintptr_t *base, uint64_t *bytes) {
    const uintptr_t a = reinterpret_cast<uintptr_t>(p);
    std::lock_guard<std::mutex> lock(mu_);
    auto it = allocs_.upper_bound(a);
    if (it != allocs_.begin()) {
      --it;
      if (a < it->first + (it->second.bytes > 0 ? it->second.bytes : 1)) {
        *base = it->first;
        *bytes = it->second.bytes;
        return true;
      }
    }
    auto o = opened_.upper_bound(a);
    if (o == opened_.begin()) return false;
    --o;
    if (a >= o->first + o->second) return false;
    *base = o->first;
    *bytes = o->second;
    return true;
  }

  // Frees `p` if it is the base of an allocation of one of `kinds`.
  bool release(const void *p, bool device_or_managed) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = allocs_.find(reinterpret_cast<uintptr_t>(p));
    if (it == allocs_.end()) return false;
    const bool pinned = it->second.kind == Kind::kPinned;
    if (pinned == device_or_managed) return false;
    free_pages(it->first, it->second);
    allocs_.erase(it);
    return true;
  }
  static void free_pages(uintptr_t base, const Allocation &a) {
    if (a.memfd >= 0) {
      munmap(reinterpret_cast<void *>(base), static_cast<size_t>(a.mapped));
      close(a.memfd);
    } else {
      std::free(reinterpret_cast<void *>(base));
    }
  }

  // Forgets (and frees) every allocation of `device`, as a context reset
  // does; returns how many there were.
  int drop_device(int device) {
    std::lock_guard<std::mutex> lock(mu_);
    int n = 0;
    for (auto it = allocs_.begin(); it != allocs_.end();) {
      if (it->second.device == device) {
        free_pages(it->first, it->second);
        it = allocs_.erase(it);
        ++n;
      } else {
        ++it;
      }
    }
    return n;
  }

  // The allocation holding address `p`, if any.
  bool find(const void *p, Allocation *out) {
    const uintptr_t a = reinterpret_cast<uintptr_t>(p);
    std::lock_guard<std::mutex> lock(mu_);
    auto it = allocs_.upper_bound(a);
    if (it == allocs_.begin()) return false;
    --it;
    if (a >= it->first + (it->second.bytes > 0 ? it->second.bytes : 1)) return false;
    *out = it->second;
    return true;
  }

  // Ordering of queued work, so that tests can see a free that nothing
  // ordered after the work still using the memory (both fakes run every
  // copy at once, but treat it as pending until a synchronisation covers
  // it). A copy queued on `stream` with `device`'s context / device current
  // uses the allocations holding `dst` and `src` (addresses outside the
  // fake's memory are ignored) until stream_synchronized or
  // device_synchronized covers it. NULL, the legacy (1) and the per-thread
  // (2) handles name a stream of the current device; 2 also only the
  // queuing thread's.
  void queue_work(const void *dst, const void *src, int device, const void *stream) {
    if (!recording.load(std::memory_order_relaxed)) return;
    const uint64_t self = static_cast<uint64_t>(pthread_self());
    std::lock_guard<std::mutex> lock(mu_);
    for (const void *p : {dst, src}) {
      uintptr_t base = 0;
      if (base_of(p, &base)) pending_.push_back(Pending{base, device, stream, self});
    }
  }
  // cuStreamSynchronize / hipStreamSynchronize on the calling thread.
  void stream_synchronized(const void *stream, int device) {
    if (!recording.load(std::memory_order_relaxed)) return;  // benchmarks: no bookkeeping
    const uint64_t self = static_cast<uint64_t>(pthread_self());
    std::lock_guard<std::mutex> lock(mu_);
    erase_pending([&](const Pending &w) { return covers(w, stream, device, self); });
  }
  // A synchronisation covering the queued work whose (stream, device)
  // `pred` accepts (the legacy stream's implicit synchronisation).
  template <typename Pred>
  void synchronized_where(Pred pred) {
    if (!recording.load(std::memory_order_relaxed)) return;
    std::lock_guard<std::mutex> lock(mu_);
    erase_pending([&](const Pending &w) { return pred(w.stream, w.device); });
  }
  // cuCtxSynchronize / hipDeviceSynchronize: every stream of `device`.
  void device_synchronized(int device) {
    if (!recording.load(std::memory_order_relaxed)) return;  // benchmarks: no bookkeeping
    std::lock_guard<std::mutex> lock(mu_);
    erase_pending([&](const Pending &w) { return w.device == device; });
  }
  // A free of `p` (on `stream`, NULL: synchronous, with `device` current):
  // counted in unordered_frees when queued work that the free is not
  // ordered after still uses `p`. A synchronous free counts any such work,
  // whatever implicit synchronisation the real driver might add.
  void check_free(const void *p, const void *stream, int device) {
    if (!recording.load(std::memory_order_relaxed)) return;  // benchmarks: no bookkeeping
    const uint64_t self = static_cast<uint64_t>(pthread_self());
    std::lock_guard<std::mutex> lock(mu_);
    const uintptr_t base = reinterpret_cast<uintptr_t>(p);
    bool unordered = false;
    erase_pending([&](const Pending &w) {
      if (w.base != base) return false;
      if (stream == nullptr || !covers(w, stream, device, self)) unordered = true;
      return true;
    });
    if (unordered) unordered_frees.fetch_add(1);
  }

  // check_free for a free whose stream is ordered after every queued work
  // that `covers(stream, device)` accepts (CUDA's legacy stream, which
  // waits for the blocking streams of its context first).
  template <typename Covers>
  void check_free_if(const void *p, Covers covers) {
    if (!recording.load(std::memory_order_relaxed)) return;
    std::lock_guard<std::mutex> lock(mu_);
    const uintptr_t base = reinterpret_cast<uintptr_t>(p);
    bool unordered = false;
    erase_pending([&](const Pending &w) {
      if (w.base != base) return false;
      if (!covers(w.stream, w.device)) unordered = true;
      return true;
    });
    if (unordered) unordered_frees.fetch_add(1);
  }

  // --- control API ---
  void reset() {
    std::lock_guard<std::mutex> lock(mu_);
    log_.clear();
    inject_.clear();
  }
  int calls(const char *fn, fake_call *out, int max) {
    std::lock_guard<std::mutex> lock(mu_);
    int n = 0;
    for (const fake_call &c : log_) {
      if (fn != nullptr && std::strcmp(c.fn, fn) != 0) continue;
      if (out != nullptr && n < max) out[n] = c;
      ++n;
    }
    return n;
  }
  void inject(const char *fn, int result, int times) {
    std::lock_guard<std::mutex> lock(mu_);
    inject_[fn] = {result, times < 0 ? -1 : times};
    if (times == 0) inject_.erase(fn);
  }
  int64_t live() {
    std::lock_guard<std::mutex> lock(mu_);
    return static_cast<int64_t>(allocs_.size());
  }

  std::atomic<bool> deinitialized{false};
  std::atomic<bool> recording{true};
  std::atomic<int> init_count{0};
  std::atomic<int> unordered_frees{0};

 private:
  struct Pending {
    uintptr_t base;  // the allocation used
    int device;      // context / device current when it was queued
    const void *stream;
    uint64_t thread;  // the queuing thread
  };
  static bool is_relative(const void *stream) {
    return reinterpret_cast<uintptr_t>(stream) <= 2;  // NULL, legacy, per-thread
  }
  // Whether a synchronisation of (or a free on) `stream` with `device`
  // current on thread `self` is ordered after `w`.
  static bool covers(const Pending &w, const void *stream, int device, uint64_t self) {
    if (w.stream != stream) return false;
    if (is_relative(stream) && w.device != device) return false;
    return reinterpret_cast<uintptr_t>(stream) != 2 || w.thread == self;
  }
  template <typename Pred>
  void erase_pending(Pred pred) {
    for (auto it = pending_.begin(); it != pending_.end();) {
      it = pred(*it) ? pending_.erase(it) : it + 1;
    }
  }
  // The base of the allocation holding `p` (mu_ held).
  bool base_of(const void *p, uintptr_t *base) {
    const uintptr_t a = reinterpret_cast<uintptr_t>(p);
    auto it = allocs_.upper_bound(a);
    if (it == allocs_.begin()) return false;
    --it;
    if (a >= it->first + (it->second.bytes > 0 ? it->second.bytes : 1)) return false;
    *base = it->first;
    return true;
  }

  std::vector<Pending> pending_;
  std::mutex mu_;
  std::vector<fake_call> log_;
  std::map<std::string, std::pair<int, int>> inject_;  // fn -> (result, remaining; -1 forever)
  std::map<uintptr_t, Allocation> allocs_;
  std::map<uintptr_t, uint64_t> opened_;  // IPC mappings of other processes' memory
};

}  // namespace fake

// Defines the shared part of the control API for one fake.
#define FAKE_DEFINE_CONTROL_API(prefix)                                                        \
  FAKE_EXPORT void prefix##reset(void) { fake::Recorder::get().reset(); }                      \
  FAKE_EXPORT int prefix##call_count(const char *fn) {                                         \
    return fake::Recorder::get().calls(fn, nullptr, 0);                                        \
  }                                                                                            \
  FAKE_EXPORT int prefix##calls(const char *fn, fake_call *out, int max) {                     \
    return fake::Recorder::get().calls(fn, out, max);                                          \
  }                                                                                            \
  FAKE_EXPORT void prefix##inject(const char *fn, int result, int times) {                     \
    fake::Recorder::get().inject(fn, result, times);                                           \
  }                                                                                            \
  FAKE_EXPORT void prefix##set_deinitialized(int on) {                                         \
    fake::Recorder::get().deinitialized.store(on != 0);                                        \
  }                                                                                            \
  FAKE_EXPORT int64_t prefix##live_allocations(void) { return fake::Recorder::get().live(); }  \
  FAKE_EXPORT int prefix##init_count(void) { return fake::Recorder::get().init_count.load(); } \
  FAKE_EXPORT void prefix##set_recording(int on) {                                             \
    fake::Recorder::get().recording.store(on != 0);                                            \
  }                                                                                            \
  FAKE_EXPORT int prefix##unordered_frees(void) {                                              \
    return fake::Recorder::get().unordered_frees.load();                                       \
  }                                                                                            \
  FAKE_EXPORT int64_t prefix##ipc_open_count(void) {                                           \
    return fake::Recorder::get().ipc_open_count();                                             \
  }

#endif  // HURRAY_TESTS_FAKES_FAKE_COMMON_H_
