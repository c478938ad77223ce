// SPDX-License-Identifier: Apache-2.0
// CUDA memory: device (kDLCUDA), pinned host (kDLCUDAHost) and managed
// (kDLCUDAManaged) allocators, stream-ordered allocation, the release, the
// pointer check and the capture check of the CUDA vendor, and its primary
// contexts (docs/impl/gpu.md). What it shares with HIP (running a call with
// the owning context current, copy, synchronize, stream wait, the deferred
// frees, the table) is device/vendor.h over CudaTraits (vendor.h).
#if defined(HURRAY_WITH_CUDA)

#include <atomic>
#include <cinttypes>
#include <cstring>
#include <mutex>
#include <vector>

#include "common/diagnostics.h"
#include "common/error.h"
#include "device/backend.h"
#include "device/cuda/driver.h"
#include "device/cuda/vendor.h"

namespace hurray::detail {
namespace {

// Set once a call reports CUDA_ERROR_DEINITIALIZED (process exit): later
// releases leak without calling into the driver at all.
std::atomic<bool> g_torn_down{false};
std::mutex g_retain_mutex;

// The identity of the incarnation of `ctx`: cuCtxGetId where the driver has
// it (12.0+), else libhurray's generation `fallback`.
CUresult context_id(const CudaDriver &d, CUcontext ctx, uint64_t fallback, uint64_t *id) {
  if (d.ctx_get_id == nullptr) {
    *id = fallback;
    return CUDA_SUCCESS;
  }
  unsigned long long v = 0;
  CUresult r = d.ctx_get_id(ctx, &v);
  if (r == CUDA_SUCCESS) *id = static_cast<uint64_t>(v);
  return r;
}

// Whether incarnation `id` of the primary context of `ordinal` is still the
// live one: the context is active and (driver 12.0+) still has that id, or
// (older drivers) libhurray has not seen it reset since. A reset
// (cuDevicePrimaryCtxReset, cudaDeviceReset) destroyed every allocation made
// in it, whatever revived it since. CUDA_ERROR_DEINITIALIZED comes back as
// is; any other failure of the queries reads as "not alive".
CUresult context_alive(const CudaDriver &d, int ordinal, uint64_t id, bool *alive) {
  *alive = false;
  const PrimarySlot &slot = d.primary[ordinal];
  CUcontext ctx = slot.ctx.load(std::memory_order_acquire);
  if (ctx == nullptr) return CUDA_SUCCESS;
  CUdevice dev;
  CUresult r = d.device_get(&dev, ordinal);
  unsigned int flags = 0;
  int active = 0;
  if (r == CUDA_SUCCESS) r = d.primary_ctx_get_state(dev, &flags, &active);
  if (r == CUDA_ERROR_DEINITIALIZED) return r;
  if (r != CUDA_SUCCESS || active == 0) return CUDA_SUCCESS;
  uint64_t now = 0;
  r = context_id(d, ctx, slot.id.load(std::memory_order_acquire), &now);
  if (r == CUDA_ERROR_DEINITIALIZED) return r;
  *alive = r == CUDA_SUCCESS && now == id;
  return CUDA_SUCCESS;
}

}  // namespace

CUresult primary_context_alive(const CudaDriver &d, int ordinal, uint64_t id, bool *alive) {
  return context_alive(d, ordinal, id, alive);
}

// The live primary context of `ordinal` (checked by the caller) and the id
// of its incarnation, retaining it on first use and again after it was
// reset. Each reference is kept for the life of the process, so the context
// outlives every allocation made in it (short of a reset).

CUresult primary_context(const CudaDriver &d, int ordinal, CUcontext *out, uint64_t *out_id) {
  PrimarySlot &slot = d.primary[ordinal];
  CUcontext c = slot.ctx.load(std::memory_order_acquire);
  if (c != nullptr) {
    const uint64_t id = slot.id.load(std::memory_order_acquire);
    bool alive = false;
    CUresult r = context_alive(d, ordinal, id, &alive);
    if (r != CUDA_SUCCESS) return r;
    if (alive) {
      *out = c;
      *out_id = id;
      return CUDA_SUCCESS;
    }
  }
  std::lock_guard<std::mutex> lock(g_retain_mutex);
  c = slot.ctx.load(std::memory_order_relaxed);
  uint64_t id = slot.id.load(std::memory_order_relaxed);
  if (c != nullptr) {
    // Another thread may have re-retained meanwhile.
    bool alive = false;
    CUresult r = context_alive(d, ordinal, id, &alive);
    if (r != CUDA_SUCCESS) return r;
    if (alive) {
      *out = c;
      *out_id = id;
      return CUDA_SUCCESS;
    }
  }
  // First use, or the context was reset: retain (which initialises it
  // again if nobody has yet) and remember the new incarnation.
  CUdevice dev;
  CUresult r = d.device_get(&dev, ordinal);
  if (r == CUDA_SUCCESS) r = d.primary_ctx_retain(&c, dev);
  if (r != CUDA_SUCCESS) return r;
  r = context_id(d, c, id + 1, &id);
  if (r != CUDA_SUCCESS) return r;
  slot.id.store(id, std::memory_order_release);
  slot.ctx.store(c, std::memory_order_release);
  *out = c;
  *out_id = id;
  return CUDA_SUCCESS;
}

// Restoring the caller's context after `call` failed: the thread keeps the
// device's context current, which the caller must hear about.
int32_t CudaTraits::restore_failure(const Scope &, CUresult pop, CUresult r, const char *call,
                                    int32_t device_id) {
  if (r != CUDA_SUCCESS) {
    return fail(HURRAY_ERR_DEVICE,
                "%s failed with %s (%d) on CUDA device %" PRId32
                ", and cuCtxPopCurrent then failed with %s (%d): this thread may still have "
                "that device's context current",
                call, cuda_error_name(r), static_cast<int>(r), device_id, cuda_error_name(pop),
                static_cast<int>(pop));
  }
  return fail(HURRAY_ERR_DEVICE,
              "cuCtxPopCurrent failed with %s (%d) after %s on CUDA device %" PRId32
              ": this thread may still have that device's context current",
              cuda_error_name(pop), static_cast<int>(pop), call, device_id);
}

namespace {

// How a release of kDLCUDA memory is ordered (DeviceMemory::order).
enum Order : uint32_t {
  kFreeNow = 0,       // cuMemFree / cuMemFreeHost: nothing else to wait for
  kFreeOnStream = 1,  // cuMemFreeAsync on mem.stream (after checking it)
  // Per-thread default stream: cuStreamSynchronize(CU_STREAM_LEGACY), which
  // waits for every blocking stream of the context, each thread's per-thread
  // stream included, then cuMemFree. Never cuCtxSynchronize: that would
  // invalidate a capture on any stream of the context, non-blocking ones
  // too (docs/impl/gpu.md §3).
  kFreeAfterContext = 2,
  kFreeAfterStream = 3,  // a stream of another context: cuStreamSynchronize, then cuMemFree
  // The per-thread default stream of another device (mem.stream_device; a
  // copy queued there from device memory of that device): the legacy stream
  // of that device's primary context, as for kFreeAfterContext. Also a
  // deferred kFreeAfterStream whose stream is blocking.
  kFreeAfterOtherContext = 4,
  // A deferred kFreeOnStream whose stream is blocking: cuMemFreeAsync on
  // the legacy stream, which waits for every blocking stream of the context
  // first (docs/impl/gpu.md §2, "Releases during a capture of their
  // stream"); never set at allocation.
  kFreeOnLegacy = 5,
};

constexpr uintptr_t kLegacyStream = 1;  // CU_STREAM_LEGACY

bool is_legacy(const void *stream) { return reinterpret_cast<uintptr_t>(stream) == kLegacyStream; }

}  // namespace

int32_t CudaTraits::allocate(hurray_device device, uint64_t nbytes, void *stream,
                             int32_t stream_device, DeviceMemory *mem) {
  const bool other_device = stream_device >= 0 && stream_device != device.device_id;
  const int32_t type = device.device_type;
  if (nbytes == 0) {
    // No memory to allocate, but the same answer as a one-element request
    // for a missing driver or device.
    const CudaDriver *d = cuda_driver();
    if (d == nullptr) return HURRAY_ERR_UNSUPPORTED_DEVICE;
    return Cuda::check_ordinal(*d, device.device_id);
  }
  Cuda::retry_deferred_frees();
  const size_t n = static_cast<size_t>(nbytes);
  DeviceMemory m;
  m.stream = stream;
  if (other_device) m.stream_device = stream_device;
  const char *call = type == HURRAY_DEVICE_CUDA_HOST      ? "cuMemHostAlloc"
                     : type == HURRAY_DEVICE_CUDA_MANAGED ? "cuMemAllocManaged"
                     : stream != nullptr && !is_per_thread_stream(stream) && !other_device
                         ? "cuMemAllocAsync"
                         : "cuMemAlloc";
  int32_t st = Cuda::with_device(
      device.device_id, &call,
      [&](const CudaDriver &d) {
        CUdeviceptr dp = 0;
        CUresult r;
        if (type == HURRAY_DEVICE_CUDA_HOST) {
          // Portable: pinned for every context, not only this device's.
          void *hp = nullptr;
          r = d.mem_host_alloc(&hp, n, CU_MEMHOSTALLOC_PORTABLE);
          if (r == CUDA_SUCCESS) m.ptr = hp;
          return r;
        }
        if (type == HURRAY_DEVICE_CUDA_MANAGED) {
          r = d.mem_alloc_managed(&dp, n, CU_MEM_ATTACH_GLOBAL);
        } else if (stream == nullptr) {
          r = d.mem_alloc(&dp, n);
        } else if (is_per_thread_stream(stream)) {
          // The handle names the releasing thread's stream at release:
          // allocate synchronously, and order the free after every stream
          // of the context (gpu §2), or of the other device's context whose
          // per-thread stream a copy into this memory was queued on.
          r = d.mem_alloc(&dp, n);
          m.order = other_device ? kFreeAfterOtherContext : kFreeAfterContext;
        } else if (other_device) {
          // The caller knows the stream is another device's (a copy queued
          // there writes this memory): as below, without asking.
          r = d.mem_alloc(&dp, n);
          m.order = kFreeAfterStream;
        } else {
          CUcontext owner = nullptr, of_stream = nullptr;
          r = d.ctx_get_current(&owner);
          if (r == CUDA_SUCCESS && !is_legacy(stream)) {
            call = "cuStreamGetCtx";
            r = d.stream_get_ctx(static_cast<CUstream>(stream), &of_stream);
          } else {
            of_stream = owner;  // the legacy stream of the current context
          }
          if (r != CUDA_SUCCESS) return r;
          if (of_stream != owner) {
            // A stream of another device cannot allocate from this device's
            // pool: allocate synchronously and order the free after it. Its
            // device is asked now, while the caller vouches for the stream:
            // the release never passes the stream to the driver for that.
            ContextScope in_stream_ctx(d);
            r = in_stream_ctx.enter(of_stream, &call);
            CUdevice stream_dev = -1;
            if (r == CUDA_SUCCESS) {
              call = "cuCtxGetDevice";
              r = d.ctx_get_device(&stream_dev);
              const CUresult pop = in_stream_ctx.leave();
              if (r == CUDA_SUCCESS && pop != CUDA_SUCCESS) {
                call = "cuCtxPopCurrent";
                r = pop;
              }
            }
            if (r == CUDA_SUCCESS && (stream_dev < 0 || stream_dev >= d.device_count)) {
              r = CUDA_ERROR_INVALID_DEVICE;
            }
            // The release waits for the stream in that device's primary
            // context, retained here like any context libhurray works in.
            CUcontext stream_primary = nullptr;
            uint64_t stream_ctx_id = 0;
            if (r == CUDA_SUCCESS) {
              call = "cuDevicePrimaryCtxRetain";
              r = primary_context(d, stream_dev, &stream_primary, &stream_ctx_id);
            }
            if (r != CUDA_SUCCESS) return r;
            call = "cuMemAlloc";
            r = d.mem_alloc(&dp, n);
            m.order = kFreeAfterStream;
            m.stream_device = static_cast<int32_t>(stream_dev);
          } else {
            call = "cuMemAllocAsync";
            r = d.mem_alloc_async(&dp, n, static_cast<CUstream>(stream));
            m.order = kFreeOnStream;
          }
        }
        if (r == CUDA_SUCCESS) m.ptr = hptr(dp);
        return r;
      },
      &m.context);
  if (st != HURRAY_OK) {
    // Allocated, but the thread's context could not be restored: give the
    // memory back through the release path (which reports its own
    // failures) and keep the allocation's error.
    if (m.ptr != nullptr) Cuda::deallocate(device, m);
    return st;
  }
  *mem = m;
  return HURRAY_OK;
}

namespace {

// Whether `stream` is being captured into a graph (CU_STREAM_LEGACY: whether
// a blocking stream of the current context is, CUDA_ERROR_STREAM_CAPTURE_IMPLICIT).
// Asked before a release queues a free on a stream or waits for one: a
// capturing stream takes no free of memory from outside its graph, and
// waiting for it, for its context or for the legacy stream is prohibited
// during the capture (and would invalidate it). cuStreamIsCapturing itself
// is allowed during capture.
CUresult capturing(const CudaDriver &d, CUstream stream, bool *out, const char **call) {
  *call = "cuStreamIsCapturing";
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  CUresult r = d.stream_is_capturing(stream, &status);
  if (r == CUDA_ERROR_STREAM_CAPTURE_IMPLICIT) {
    *out = true;
    return CUDA_SUCCESS;
  }
  *out = r == CUDA_SUCCESS && status != CU_STREAM_CAPTURE_STATUS_NONE;
  return r;
}

const CUstream kLegacy = reinterpret_cast<CUstream>(kLegacyStream);

// Waits in device `ordinal`'s primary context, with it pushed (and popped
// again), for `stream`: kLegacy for the per-thread streams of every thread
// (the legacy stream waits for all blocking streams), else the stream the
// copy was queued on, its device having been recorded at allocation. The
// stream is the caller's to keep alive until the release (hurray.h); nothing
// else about it is asked of the driver. A context reset since then took its
// work with it: nothing to wait for. *deferred: `stream` is being captured
// (kLegacy: a blocking stream of that context is), so nothing was waited
// for (the caller defers the free).
CUresult synchronize_in_primary(const CudaDriver &d, int ordinal, CUstream stream,
                                const char **call, bool *deferred) {
  const PrimarySlot &slot = d.primary[ordinal];
  CUcontext ctx = slot.ctx.load(std::memory_order_acquire);
  bool alive = false;
  CUresult r = context_alive(d, ordinal, slot.id.load(std::memory_order_acquire), &alive);
  if (r != CUDA_SUCCESS || !alive) return r;
  ContextScope in_ctx(d);
  r = in_ctx.enter(ctx, call);
  if (r != CUDA_SUCCESS) return r;
  r = capturing(d, stream, deferred, call);
  if (r == CUDA_SUCCESS && !*deferred) {
    *call = "cuStreamSynchronize";
    r = d.stream_synchronize(stream);
  }
  const CUresult pop = in_ctx.leave();
  if (r == CUDA_SUCCESS && pop != CUDA_SUCCESS) {
    *call = "cuCtxPopCurrent";
    r = pop;
  }
  return r;
}

// The free of `mem` with the owner's context current; *call names the call
// that failed. Orders the free as mem.order says. *deferred (nothing freed,
// CUDA_SUCCESS): the stream to free on or wait for is being captured; the
// caller keeps the memory for a later attempt.
CUresult free_in_context(const CudaDriver &d, int32_t type, const DeviceMemory &mem,
                         const char **call, bool *deferred) {
  *deferred = false;
  if (type == HURRAY_DEVICE_CUDA_HOST) {
    *call = "cuMemFreeHost";
    return d.mem_free_host(mem.ptr);
  }
  CUstream stream = static_cast<CUstream>(mem.stream);
  CUresult r = CUDA_SUCCESS;
  switch (mem.order) {
    case kFreeOnStream:
      r = capturing(d, stream, deferred, call);
      if (r != CUDA_SUCCESS || *deferred) return r;
      *call = "cuMemFreeAsync";
      return d.mem_free_async(dptr(mem.ptr), stream);
    case kFreeOnLegacy:
      r = capturing(d, kLegacy, deferred, call);
      if (r != CUDA_SUCCESS || *deferred) return r;
      *call = "cuMemFreeAsync";
      return d.mem_free_async(dptr(mem.ptr), kLegacy);
    case kFreeAfterContext:
      // The legacy stream waits for every blocking stream (per-thread ones
      // of every thread included) and, unlike cuCtxSynchronize, leaves the
      // captures of non-blocking streams alone. Using it is prohibited
      // while a blocking stream of the context captures: that shows on the
      // legacy stream itself.
      r = capturing(d, kLegacy, deferred, call);
      if (r != CUDA_SUCCESS || *deferred) return r;
      *call = "cuStreamSynchronize";
      r = d.stream_synchronize(kLegacy);
      break;
    case kFreeAfterOtherContext:
      r = synchronize_in_primary(d, mem.stream_device, kLegacy, call, deferred);
      break;
    case kFreeAfterStream:
      r = synchronize_in_primary(d, mem.stream_device, stream, call, deferred);
      break;
    default: break;
  }
  if (r != CUDA_SUCCESS || *deferred) return r;  // not ordered: leaking beats freeing memory in use
  *call = "cuMemFree";
  return d.mem_free(dptr(mem.ptr));
}

// Whether `stream` is blocking: created without CU_STREAM_NON_BLOCKING
// (cuStreamGetFlags, which reads a property of the stream and is not among
// the operations stream capture prohibits), or the legacy or a per-thread
// default stream. The legacy stream waits for all work queued before it on
// every blocking stream of its context (Driver API reference, "Stream
// synchronization behavior"; the per-thread default stream "is not a
// non-blocking stream"). Asked only while the release vouches for the
// stream; a failed query reads as non-blocking (the stream is then kept).
bool stream_is_blocking(const CudaDriver &d, CUstream stream) {
  if (is_legacy(stream) || is_per_thread_stream(stream)) return true;
  unsigned int flags = 0;
  return d.stream_get_flags(stream, &flags) == CUDA_SUCCESS &&
         (flags & CU_STREAM_NON_BLOCKING) == 0;
}

// What a release deferred during a capture keeps (docs/impl/gpu.md §2):
// with the owner's context current, *kept is `mem` ordered so that it
// names no stream of the caller's when that stream is blocking (its work is
// ordered before the legacy stream: cuMemFreeAsync on the legacy stream, or
// waiting for the legacy stream of the stream's device); else the stream
// stays and *keeps_stream is true. The per-thread orders name none already.
void deferral_of(const CudaDriver &d, const DeviceMemory &mem, DeviceMemory *kept,
                 bool *keeps_stream) {
  *kept = mem;
  *keeps_stream = false;
  CUstream stream = static_cast<CUstream>(mem.stream);
  if (mem.order == kFreeOnStream) {
    if (!stream_is_blocking(d, stream)) {
      *keeps_stream = true;
      return;
    }
    kept->order = kFreeOnLegacy;
    kept->stream = kLegacy;
  } else if (mem.order == kFreeAfterStream) {
    // A stream of another device's primary context: asked with it current.
    bool blocking = false;
    ContextScope in_stream_ctx(d);
    const char *ignored = nullptr;
    CUcontext ctx = d.primary[mem.stream_device].ctx.load(std::memory_order_acquire);
    if (ctx != nullptr && in_stream_ctx.enter(ctx, &ignored) == CUDA_SUCCESS) {
      blocking = stream_is_blocking(d, stream);
      blocking = in_stream_ctx.leave() == CUDA_SUCCESS && blocking;
    }
    if (!blocking) {
      *keeps_stream = true;
      return;
    }
    kept->order = kFreeAfterOtherContext;
    kept->stream = kLegacy;
  }
}

}  // namespace

// Release path: never sets the thread's message, never prints.
void CudaTraits::release_now(hurray_device device, const DeviceMemory &mem) {
  if (cuda_forked_child()) return count_fork_skip();
  if (g_torn_down.load(std::memory_order_relaxed)) return count_teardown_leak();
  const CudaDriver *d = loaded_cuda_driver();  // loaded: it allocated mem.ptr
  const int32_t type = device.device_type;
  void *const ptr = mem.ptr;
  RelaxedCaptureMode relaxed(*d);
  bool alive = false;
  CUresult r = context_alive(*d, device.device_id, mem.context, &alive);
  if (r == CUDA_ERROR_DEINITIALIZED) {
    g_torn_down.store(true, std::memory_order_relaxed);
    return count_teardown_leak();
  }
  if (!alive) {
    // The memory died with the context; its address may belong to a new
    // allocation by now, so no free.
    report_context_reset_skip("skipped freeing %p of %s %" PRId32
                              ": the device's primary context was reset "
                              "(cuDevicePrimaryCtxReset / cudaDeviceReset) after the allocation, "
                              "which freed it",
                              ptr, device_type_name(type), device.device_id);
    return;
  }
  CUcontext ctx = d->primary[device.device_id].ctx.load(std::memory_order_acquire);
  const char *call = nullptr;
  CUresult pop;
  bool deferred = false;
  DeviceMemory kept;
  bool keeps_stream = false;
  {
    ContextScope scope(*d);
    r = scope.enter(ctx, &call);
    if (r == CUDA_SUCCESS) r = free_in_context(*d, type, mem, &call, &deferred);
    if (r == CUDA_SUCCESS && deferred) deferral_of(*d, mem, &kept, &keeps_stream);
    pop = scope.leave();
  }
  if (r == CUDA_SUCCESS && deferred) Cuda::defer(device, kept, keeps_stream);
  if (r == CUDA_SUCCESS && pop == CUDA_SUCCESS) return;
  if (r == CUDA_ERROR_DEINITIALIZED || pop == CUDA_ERROR_DEINITIALIZED) {
    g_torn_down.store(true, std::memory_order_relaxed);
    if (r != CUDA_SUCCESS) count_teardown_leak();  // else freed before the teardown
    return;
  }
  if (r == CUDA_SUCCESS) {
    report_failed_release(HURRAY_ERR_DEVICE,
                          "cuCtxPopCurrent failed with %s (%d) after %s %s %p of %s %" PRId32
                          ": the releasing thread may still have that device's context current",
                          cuda_error_name(pop), static_cast<int>(pop), call,
                          deferred ? "deferred freeing" : "freed", ptr, device_type_name(type),
                          device.device_id);
    return;
  }
  if (pop != CUDA_SUCCESS) {
    report_failed_release(HURRAY_ERR_DEVICE,
                          "%s failed with %s (%d) on %p of %s %" PRId32
                          ", and cuCtxPopCurrent then failed with %s (%d)",
                          call, cuda_error_name(r), static_cast<int>(r), ptr,
                          device_type_name(type), device.device_id, cuda_error_name(pop),
                          static_cast<int>(pop));
    return;
  }
  report_failed_release(HURRAY_ERR_DEVICE, "%s failed with %s (%d) on %p of %s %" PRId32, call,
                        cuda_error_name(r), static_cast<int>(r), ptr, device_type_name(type),
                        device.device_id);
}

namespace {

const char *memory_type_name(unsigned int t) {
  switch (t) {
    case 0: return "unregistered host memory";
    case CU_MEMORYTYPE_HOST: return "pinned host memory";
    case CU_MEMORYTYPE_DEVICE: return "device memory";
    case CU_MEMORYTYPE_ARRAY: return "an array";
    case CU_MEMORYTYPE_UNIFIED: return "unified memory";
    default: return "memory of unknown type";
  }
}

}  // namespace

int32_t CudaTraits::check_pointer(hurray_device device, const void *ptr) {
  const CudaDriver *d = cuda_driver();
  if (d == nullptr) return HURRAY_ERR_UNSUPPORTED_DEVICE;
  int32_t st = Cuda::check_ordinal(*d, device.device_id);
  if (st != HURRAY_OK) return st;
  CUpointer_attribute attrs[3] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE,
                                  CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                                  CU_POINTER_ATTRIBUTE_IS_MANAGED};
  unsigned int memory_type = 0;
  int ordinal = -1;
  unsigned int managed = 0;
  void *values[3] = {&memory_type, &ordinal, &managed};
  // Asked without pushing a context first: the query needs none for memory
  // the driver knows, and entering one could create it. Should the driver
  // want a context after all, ask again in the claimed device's. An unknown
  // pointer is not an error here: its attributes come back zero.
  const char *call = "cuPointerGetAttributes";
  CUresult r = d->pointer_get_attributes(3, attrs, values, dptr(ptr));
  if (r == CUDA_ERROR_INVALID_CONTEXT) {
    st = Cuda::with_device(device.device_id, &call, [&](const CudaDriver &drv) {
      return drv.pointer_get_attributes(3, attrs, values, dptr(ptr));
    });
    if (st != HURRAY_OK) return st;
  } else if (r != CUDA_SUCCESS) {
    return Cuda::failure(r, call, device.device_id);
  }
  bool ok;
  switch (device.device_type) {
    case HURRAY_DEVICE_CUDA:
      ok = memory_type == CU_MEMORYTYPE_DEVICE && managed == 0 && ordinal == device.device_id;
      break;
    case HURRAY_DEVICE_CUDA_MANAGED: ok = managed != 0; break;
    default: ok = memory_type == CU_MEMORYTYPE_HOST && managed == 0; break;
  }
  if (ok) return HURRAY_OK;
  return fail(HURRAY_ERR_INVALID_ARGUMENT,
              "tensor.dl_tensor.data %p is not %s memory of device %" PRId32
              ": the CUDA driver reports %s%s (device ordinal %d)",
              ptr, device_type_name(device.device_type), device.device_id,
              managed != 0 ? "managed " : "", memory_type_name(memory_type), ordinal);
}

int32_t CudaTraits::host_wait_allowed(int32_t device_id, void *stream) {
  bool captured = false;
  const char *call = "cuStreamIsCapturing";
  const CUstream s = stream != nullptr ? static_cast<CUstream>(stream) : kLegacy;
  int32_t st = Cuda::with_device(
      device_id, &call, [&](const CudaDriver &d) { return capturing(d, s, &captured, &call); });
  if (st != HURRAY_OK || !captured) return st;
  if (stream == nullptr) {
    return fail(HURRAY_ERR_INVALID_ARGUMENT,
                "a copy without a stream waits for the legacy default stream of CUDA device "
                "%" PRId32
                ", which CUDA prohibits while a blocking stream of that device is "
                "being captured into a graph: pass a stream, or copy after the capture",
                device_id);
  }
  return fail(HURRAY_ERR_INVALID_ARGUMENT,
              "stream %p of CUDA device %" PRId32
              " is being captured into a graph, and this copy (into kDLCPU memory, or staged "
              "through the host) must wait for it on the host, which CUDA prohibits during "
              "capture: copy before or after the capture",
              stream, device_id);
}

// The table for kDLCUDA, kDLCUDAHost and kDLCUDAManaged (device/backend.cc).
extern const DeviceBackend kCudaBackend;
const DeviceBackend kCudaBackend = Cuda::table();

}  // namespace hurray::detail

#endif  // HURRAY_WITH_CUDA
