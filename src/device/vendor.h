// SPDX-License-Identifier: Apache-2.0
// The plumbing every GPU vendor shares, written once over the vendor's
// traits V (device/cuda/vendor.h, device/hip/vendor.h): the ordinal check,
// the status and message of a failed runtime call, running an operation
// with the owning device current and the thread's own state given back
// (V::Scope: CUDA pushes the primary context, HIP sets the device), the
// copy / synchronize / stream-wait operations, the deferred frees of
// releases whose stream was being captured, and the backend table, filled
// by name (docs/impl/gpu.md, "The backend table").
//
// V provides: Api (the loaded entry points, with device_count), Result,
// Event, kSuccess, kOutOfMemory, kNotSupported, kName ("CUDA"), kLibrary
// ("driver"), the call names kAllocAsync, kMemcpyAsync, kStreamSynchronize,
// kEventCreate, kEventRecord, kStreamWaitEvent; api(), forked_child(),
// error_name(r); memcpy_async, stream_synchronize, event_create,
// event_record, stream_wait_event, event_destroy on an Api; class Scope
// (enter(ordinal, &failed), leave(), context_id()); restore_failure; and
// the vendor's own operations allocate, release_now, check_pointer,
// copy_strided, host_wait_allowed (device/backend.h).
#ifndef HURRAY_SRC_DEVICE_VENDOR_H_
#define HURRAY_SRC_DEVICE_VENDOR_H_

#include <cinttypes>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "common/error.h"
#include "device/backend.h"
#include "device/deferred_frees.h"

namespace hurray::detail {

template <typename V>
class Vendor {
 public:
  using Api = typename V::Api;
  using Result = typename V::Result;

  static int32_t load() { return V::api() != nullptr ? HURRAY_OK : HURRAY_ERR_UNSUPPORTED_DEVICE; }

  // Checks the ordinal `device_id` (every type of the vendor names one:
  // pinned and managed memory the device whose context allocated them);
  // message set on failure.
  static int32_t check_ordinal(const Api &a, int32_t device_id) {
    if (device_id < 0 || device_id >= a.device_count) {
      return fail(HURRAY_ERR_UNSUPPORTED_DEVICE,
                  "%s device %" PRId32 " does not exist (the %s sees %d device%s)", V::kName,
                  device_id, V::kLibrary, a.device_count, a.device_count == 1 ? "" : "s");
    }
    return HURRAY_OK;
  }

  // The status for a failed runtime call: out of memory, the stream-ordered
  // allocator missing on this device (kNotSupported from kAllocAsync), or
  // any other device error.
  static int32_t status_of(Result r, const char *call) {
    if (r == V::kOutOfMemory) return HURRAY_ERR_OUT_OF_MEMORY;
    if (r == V::kNotSupported && std::strcmp(call, V::kAllocAsync) == 0) {
      return HURRAY_ERR_UNSUPPORTED_DEVICE;
    }
    return HURRAY_ERR_DEVICE;
  }

  static int32_t failure(Result r, const char *call, int32_t device_id) {
    return fail(status_of(r, call), "%s failed with %s (%d) on %s device %" PRId32, call,
                V::error_name(r), static_cast<int>(r), V::kName, device_id);
  }

  // Runs `op(api)` with device `device_id` current (V::Scope), after loading
  // the library and checking the ordinal. *call names the operation for
  // messages; `op` may update it as it goes. A failure to give the thread
  // its own state back afterwards fails the call (HURRAY_ERR_DEVICE) even
  // when `op` succeeded: the caller undoes what `op` did. `ctx_id`, when not
  // NULL, receives the scope's context_id() (CUDA: the incarnation of the
  // primary context) once the device is entered.
  template <typename Op>
  static int32_t with_device(int32_t device_id, const char **call, Op op,
                             uint64_t *ctx_id = nullptr) {
    const Api *a = V::api();
    if (a == nullptr) return HURRAY_ERR_UNSUPPORTED_DEVICE;
    int32_t st = check_ordinal(*a, device_id);
    if (st != HURRAY_OK) return st;
    typename V::Scope scope(*a);
    const char *failed = nullptr;
    Result r = scope.enter(device_id, &failed, ctx_id);
    if (r != V::kSuccess) return failure(r, failed, device_id);
    r = op(*a);
    const Result restore = scope.leave();
    if (restore != V::kSuccess) return V::restore_failure(scope, restore, r, *call, device_id);
    if (r != V::kSuccess) return failure(r, *call, device_id);
    return HURRAY_OK;
  }

  static int32_t copy(int32_t device_id, void *dst, const void *src, uint64_t nbytes,
                      void *stream) {
    const char *call = V::kMemcpyAsync;
    return with_device(device_id, &call, [&](const Api &a) {
      return V::memcpy_async(a, dst, src, static_cast<size_t>(nbytes), stream);
    });
  }

  static int32_t synchronize(int32_t device_id, void *stream) {
    const char *call = V::kStreamSynchronize;
    return with_device(device_id, &call,
                       [&](const Api &a) { return V::stream_synchronize(a, stream); });
  }

  // An event recorded on `producer` and waited for on `consumer`, destroyed
  // right away (the queued wait keeps what it needs).
  static int32_t stream_wait(int32_t device_id, void *producer, void *consumer) {
    const char *call = V::kEventCreate;
    return with_device(device_id, &call, [&](const Api &a) {
      typename V::Event ev;
      Result r = V::event_create(a, &ev);
      if (r != V::kSuccess) return r;
      call = V::kEventRecord;
      r = V::event_record(a, ev, producer);
      if (r == V::kSuccess) {
        call = V::kStreamWaitEvent;
        r = V::stream_wait_event(a, consumer, ev);
      }
      V::event_destroy(a, ev);
      return r;
    });
  }

  // Releases whose stream was being captured (docs/impl/gpu.md §3): kept
  // here by V::release_now and tried again from later allocations and
  // releases (each may be deferred once more).
  static void defer(hurray_device device, const DeviceMemory &mem) { deferred_.add(device, mem); }
  static void retry_deferred_frees() {
    if (deferred_.empty() || V::forked_child()) return;
    deferred_.retry(&V::release_now);
  }

  static void deallocate(hurray_device device, const DeviceMemory &mem) {
    retry_deferred_frees();
    V::release_now(device, mem);
  }

  static constexpr DeviceBackend table() {
    DeviceBackend b{};
    b.name = V::kName;
    b.load = &load;
    b.allocate = &V::allocate;
    b.deallocate = &deallocate;
    b.copy = &copy;
    b.synchronize = &synchronize;
    b.stream_wait = &stream_wait;
    b.check_pointer = &V::check_pointer;
    b.copy_strided = &V::copy_strided;
    b.host_wait_allowed = &V::host_wait_allowed;
    return b;
  }

 private:
  static inline DeferredFrees deferred_;
};

}  // namespace hurray::detail

#endif  // HURRAY_SRC_DEVICE_VENDOR_H_
