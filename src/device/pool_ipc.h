// SPDX-License-Identifier: Apache-2.0
// Stream-ordered pool memory across processes (descriptor kinds 5 and 6,
// docs/impl/ipc.md §6), written once over a vendor's pool traits P
// (device/cuda/pool_ipc.h, device/hip/pool_ipc.h), as device/vendor.h does
// for the rest: the export step that recognises memory of an IPC-capable
// pool, the import of a pool and of a pointer in it, and libhurray's own
// IPC-capable pool per device behind hurray_alloc_async with
// HURRAY_ALLOC_SHAREABLE. Both vendors document the same model (CUDA Driver
// API reference and Programming Guide, "Stream Ordered Memory Allocator",
// "Interprocess communication support"; the HIP runtime API reference's
// "Stream Ordered Memory Allocator" group, ROCm 5.2 to 7): a pool is shared
// once as an OS handle, each allocation as 64 bytes of export data;
// importers free before the exporter; imported pools cannot allocate; the
// default pool has no shareable handle type.
//
// P provides: Base (the vendor's traits of device/vendor.h), Api, Result,
// Pool, kSuccess, kInvalidValue, kNotSupported, kName, the call names
// kPointerGetAttribute, kGetAddressRange, kExportToShareableHandle,
// kImportFromShareableHandle, kExportPointer, kImportPointer, kPoolDestroy,
// kFreeImported, kPoolCreate, kAllocFromPool, kFirstAllocCall, and for the
// messages kDefaultAlloc, kPlainAlloc, kHandleType, kPropsField;
// kRecordOwn (whether libhurray's own allocations are recorded and found
// without asking the pointer attribute), kRetryBeforeAlloc, kFreeOrder
// (DeviceMemory::order of the own pool's memory); refuse_missing,
// pool_ipc, can_ask_pool, pointer_pool, address_range, export_fd,
// export_pointer, import_fd, import_pointer, destroy_pool, free_imported,
// create_pool, alloc_from_pool, stream_elsewhere and release (the release
// path: an operation with the device current, never setting the message;
// CUDA: only in the incarnation of the primary context it is given).
#ifndef HURRAY_SRC_DEVICE_POOL_IPC_H_
#define HURRAY_SRC_DEVICE_POOL_IPC_H_

#include <fcntl.h>
#include <unistd.h>

#include <cinttypes>
#include <cstdint>
#include <cstring>
#include <map>
#include <mutex>

#include "common/diagnostics.h"
#include "common/error.h"
#include "device/backend.h"
#include "device/gpu_ipc.h"
#include "device/vendor.h"

namespace hurray::detail {

template <typename P>
class PoolIpc {
 public:
  using Api = typename P::Api;
  using Result = typename P::Result;
  using Pool = typename P::Pool;
  using V = Vendor<typename P::Base>;

  // With the device current: for pool memory at `data` (one of libhurray's
  // own allocations where P::kRecordOwn, or what the pointer attribute
  // names a pool for), the allocation's range, the pool's fd (POSIX fd,
  // made close-on-exec) unless out->pool_fd_sent answers that it went
  // already, and the allocation's export data (of its base). A failure
  // returns its Result with *call naming the entry point (no fd left open).
  static Result export_memory(const Api &a, const void *data, GpuIpcExport *out, const char **call,
                              PoolFound *found) {
    *found = PoolFound::kNotPool;
    if (!P::pool_ipc(a)) return P::kSuccess;
    Pool pool = nullptr;
    uintptr_t base = 0;
    uint64_t size = 0;
    if (!P::kRecordOwn || !own_allocation(data, &pool, &base, &size)) {
      if (!P::can_ask_pool(a)) return P::kSuccess;
      *call = P::kPointerGetAttribute;
      Result r = P::pointer_pool(a, data, &pool);
      // Not the driver's memory, no pool's, or (HIP) a runtime that does
      // not answer the attribute: the legacy path answers for it.
      if (r != P::kSuccess || pool == nullptr) return P::kSuccess;
      *call = P::kGetAddressRange;
      r = P::address_range(a, data, &base, &size);
      if (r != P::kSuccess) return r;
    }
    int fd = -1;
    if (out->pool_fd_sent == nullptr || !out->pool_fd_sent(pool, out->pool_epoch, out->pool_ctx)) {
      // A pool created without a shareable handle type (the device's
      // default pool) cannot be exported: the driver refuses the handle.
      *call = P::kExportToShareableHandle;
      const Result r = P::export_fd(a, pool, &fd);
      if (r == P::kInvalidValue || r == P::kNotSupported) {
        *found = PoolFound::kNotExportable;
        return P::kSuccess;
      }
      if (r != P::kSuccess) return r;
      // Close-on-exec: neither reference promises it.
      (void)fcntl(fd, F_SETFD, FD_CLOEXEC);
    }
    *call = P::kExportPointer;
    uint8_t ed[kGpuIpcHandleBytes];
    std::memset(ed, 0, sizeof ed);
    const Result r = P::export_pointer(a, base, ed);
    if (r != P::kSuccess) {
      if (fd >= 0) close(fd);
      if (r == P::kInvalidValue) {
        *found = PoolFound::kNotExportable;
        return P::kSuccess;
      }
      return r;
    }
    std::memcpy(out->handle, ed, kGpuIpcHandleBytes);
    out->alloc_size = size;
    out->data_offset = static_cast<uint64_t>(reinterpret_cast<uintptr_t>(data) - base);
    out->pool = pool;
    out->pool_fd = fd;
    *found = PoolFound::kExported;
    return P::kSuccess;
  }

  // HURRAY_ERR_UNSUPPORTED_DEVICE with the message for default-pool memory
  // and kNotExportable.
  static int32_t refuse_not_exportable(hurray_device device, const void *data) {
    return fail(HURRAY_ERR_UNSUPPORTED_DEVICE,
                "%p on %s device %" PRId32
                " comes from a stream-ordered memory pool that cannot be shared with another "
                "process (the device's default pool, which %s and hurray_alloc_async use, has no "
                "shareable handle type): allocate it with hurray_alloc_async and "
                "HURRAY_ALLOC_SHAREABLE, or from a pool made by %s with %s in %s",
                data, P::kName, device.device_id, P::kDefaultAlloc, P::kPoolCreate, P::kHandleType,
                P::kPropsField);
  }

  // GpuIpc's pool entry points (gpu_ipc.h). *context: the incarnation the
  // import was made in (Vendor::with_device's).
  static int32_t open(hurray_device device, int fd, void **pool, uint64_t *context) {
    const Api *a = P::Base::api();
    if (a == nullptr) return HURRAY_ERR_UNSUPPORTED_DEVICE;
    int32_t st = P::refuse_missing(*a);
    if (st != HURRAY_OK) return st;
    Pool p = nullptr;
    Result refused = P::kSuccess;
    const char *call = P::kImportFromShareableHandle;
    uint64_t ctx = 0;
    st = V::with_device(
        device.device_id, &call,
        [&](const Api &x) {
          const Result r = P::import_fd(x, fd, &p);
          if (r != P::kSuccess) p = nullptr;
          if (r == P::kInvalidValue) refused = r;
          return r;
        },
        &ctx);
    if (st == HURRAY_OK) {
      *pool = p;
      *context = ctx;
      return st;
    }
    if (p != nullptr)
      close_pool(device, p, ctx);  // imported, but the thread's state not given back
    if (refused != P::kSuccess) {
      return fail(HURRAY_ERR_IPC,
                  "the message's pool fd cannot be imported on %s device %" PRId32
                  " (%s failed with %s): it is not another process's IPC-capable memory pool",
                  P::kName, device.device_id, P::kImportFromShareableHandle,
                  P::Base::error_name(refused));
    }
    return st;
  }

  // Nothing is called where incarnation `context` died (its reset
  // destroyed the pool), nor where the runtime is torn down (counted).
  static void close_pool(hurray_device device, void *pool, uint64_t context) {
    if (!release_alive(device, context)) return;
    P::release(device, pool, "an imported memory pool", context,
               [pool](const Api &a, const char **call) {
                 *call = P::kPoolDestroy;
                 return P::destroy_pool(a, static_cast<Pool>(pool));
               });
  }

  static bool context_alive(hurray_device device, uint64_t context) {
    const Api *a = P::Base::api();
    if (a == nullptr) return true;  // nothing imported without it
    bool alive = true;
    const Result r = P::Base::context_alive(*a, device.device_id, context, &alive);
    // A failed query (the runtime torn down) is no reason to import again:
    // the import answers for itself.
    return r != P::kSuccess || alive;
  }

  static int32_t open_pointer(hurray_device device, void *pool, const uint8_t *data, void **ptr) {
    const Api *a = P::Base::api();
    if (a == nullptr) return HURRAY_ERR_UNSUPPORTED_DEVICE;
    int32_t st = P::refuse_missing(*a);
    if (st != HURRAY_OK) return st;
    void *p = nullptr;
    Result refused = P::kSuccess;
    const char *call = P::kImportPointer;
    uint64_t ctx = 0;
    st = V::with_device(
        device.device_id, &call,
        [&](const Api &x) {
          const Result r = P::import_pointer(x, static_cast<Pool>(pool), data, &p);
          if (r != P::kSuccess) p = nullptr;
          if (r == P::kInvalidValue) refused = r;
          return r;
        },
        &ctx);
    if (st == HURRAY_OK) {
      *ptr = p;
      return st;
    }
    if (p != nullptr) close_pointer(device, p, ctx);
    if (refused != P::kSuccess) {
      return fail(HURRAY_ERR_IPC,
                  "the message's pool allocation cannot be imported on %s device %" PRId32
                  " (%s failed with %s): the export data does not name a live allocation of "
                  "that pool",
                  P::kName, device.device_id, P::kImportPointer, P::Base::error_name(refused));
    }
    return st;
  }

  // As close_pool: a pointer imported in a dead incarnation died with its
  // pool, and its address may be a new allocation's now.
  static void close_pointer(hurray_device device, void *ptr, uint64_t context) {
    if (!release_alive(device, context)) return;
    P::release(device, ptr, "an imported pool allocation", context,
               [ptr](const Api &a, const char **call) {
                 // Synchronous: the free is done when it returns, so the
                 // exporter's free (after the lifetime fd closes) comes
                 // after it.
                 *call = P::kFreeImported;
                 return P::free_imported(a, ptr);
               });
  }

  static int32_t alloc_shareable(hurray_device device, uint64_t nbytes, void *stream,
                                 DeviceMemory *mem) {
    if (stream == nullptr || is_per_thread_stream(stream)) {
      return fail(HURRAY_ERR_UNSUPPORTED_DEVICE,
                  "HURRAY_ALLOC_SHAREABLE on %s device %" PRId32
                  " needs a stream of that device (stream-ordered memory of libhurray's "
                  "IPC-capable pool)%s; without one, hurray_alloc without the option gives "
                  "%s memory, which other processes open as it is",
                  P::kName, device.device_id,
                  stream != nullptr ? ", not the per-thread default stream, whose release "
                                      "another thread could not order"
                                    : "",
                  P::kPlainAlloc);
    }
    const Api *a = P::Base::api();
    if (a == nullptr) return HURRAY_ERR_UNSUPPORTED_DEVICE;
    int32_t st = P::refuse_missing(*a);
    if (st != HURRAY_OK) return st;
    if (nbytes == 0 || device.device_id < 0 || device.device_id >= kMaxPools) {
      // No memory to allocate, or no such device: the ordinary allocator's
      // answer (the device checked only).
      return P::Base::allocate(device, 0, stream, kStreamOfThisDevice, mem);
    }
    if (P::kRetryBeforeAlloc) V::retry_deferred_frees();
    DeviceMemory m;
    m.stream = stream;
    bool other_device = false;
    Pool pool = nullptr;
    const char *call = P::kFirstAllocCall;
    st = V::with_device(
        device.device_id, &call,
        [&](const Api &x) {
          Result r = P::stream_elsewhere(x, stream, &other_device, &call);
          if (r != P::kSuccess || other_device) return r;
          // m.context: the incarnation scope.enter found (CUDA).
          r = own_pool(x, device.device_id, m.context, &pool, &call);
          if (r != P::kSuccess) return r;
          call = P::kAllocFromPool;
          void *p = nullptr;
          r = P::alloc_from_pool(x, &p, static_cast<size_t>(nbytes), pool, stream);
          if (r == P::kSuccess) {
            m.ptr = p;
            m.order = P::kFreeOrder;
          }
          return r;
        },
        &m.context);
    if (st != HURRAY_OK) {
      if (m.ptr != nullptr) V::deallocate(device, m);
      return st;
    }
    if (other_device) {
      return fail(HURRAY_ERR_UNSUPPORTED_DEVICE,
                  "HURRAY_ALLOC_SHAREABLE on %s device %" PRId32
                  " needs a stream of that device; this stream belongs to another context",
                  P::kName, device.device_id);
    }
    if (P::kRecordOwn) remember(m.ptr, pool, nbytes);
    *mem = m;
    return HURRAY_OK;
  }

  // libhurray's pool allocation at `ptr` is about to be freed (kRecordOwn).
  static void forget(const void *ptr) {
    Own &o = own();
    std::lock_guard<std::mutex> lock(o.mu);
    o.by_base.erase(reinterpret_cast<uintptr_t>(ptr));
  }

 private:
  // The release path's check of incarnation `context`: false (call
  // nothing) where it died, or where the runtime is torn down (counted as
  // a teardown leak). Never sets the message.
  static bool release_alive(hurray_device device, uint64_t context) {
    if (P::Base::forked_child()) return true;  // P::release counts the skip
    const Api *a = P::Base::api();
    if (a == nullptr) return false;
    bool alive = true;
    const Result r = P::Base::context_alive(*a, device.device_id, context, &alive);
    if (P::Base::torn_down(r)) {
      count_teardown_leak();
      return false;
    }
    return r != P::kSuccess || alive;
  }

  // libhurray's own IPC-capable pool of each device, made on first use and
  // kept (its allocations may be freed at any time until exit), made again
  // when the context it lived in was reset (a new incarnation: CUDA's
  // cuDevicePrimaryCtxReset destroys the pools made in the context; HIP
  // has no incarnations and keeps its pool).
  static constexpr int kMaxPools = 64;
  struct OwnPool {
    Pool pool;
    uint64_t incarnation;
  };
  static inline OwnPool pools_[kMaxPools];
  static inline std::mutex pools_mu_;

  // With the device current.
  static Result own_pool(const Api &a, int32_t ordinal, uint64_t incarnation, Pool *out,
                         const char **call) {
    std::lock_guard<std::mutex> lock(pools_mu_);
    OwnPool &o = pools_[ordinal];
    if (o.pool == nullptr || o.incarnation != incarnation) {
      // The old pool, if any, went with its context: not destroyed again.
      Pool p = nullptr;
      *call = P::kPoolCreate;
      const Result r = P::create_pool(a, ordinal, &p);
      if (r != P::kSuccess) return r;
      o.pool = p;
      o.incarnation = incarnation;
    }
    *out = o.pool;
    return P::kSuccess;
  }

  // libhurray's own pool allocations (kRecordOwn: what names their pool
  // without the pointer attribute): base -> pool and size.
  struct OwnAllocation {
    Pool pool;
    uint64_t size;
  };
  struct Own {
    std::mutex mu;
    std::map<uintptr_t, OwnAllocation> by_base;
  };
  // Never destroyed: releases may run while the process exits.
  static Own &own() {
    static Own *o = new Own;
    return *o;
  }
  static void remember(const void *base, Pool pool, uint64_t size) {
    Own &o = own();
    std::lock_guard<std::mutex> lock(o.mu);
    const auto [it, added] =
        o.by_base.emplace(reinterpret_cast<uintptr_t>(base), OwnAllocation{pool, size});
    if (!added) it->second = OwnAllocation{pool, size};  // an address the pool gave back
  }
  static bool own_allocation(const void *data, Pool *pool, uintptr_t *base, uint64_t *size) {
    const uintptr_t a = reinterpret_cast<uintptr_t>(data);
    Own &o = own();
    std::lock_guard<std::mutex> lock(o.mu);
    auto it = o.by_base.upper_bound(a);
    if (it == o.by_base.begin()) return false;
    --it;
    if (a - it->first >= it->second.size) return false;
    *pool = it->second.pool;
    *base = it->first;
    *size = it->second.size;
    return true;
  }
};

}  // namespace hurray::detail

#endif  // HURRAY_SRC_DEVICE_POOL_IPC_H_
