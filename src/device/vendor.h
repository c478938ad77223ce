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
// event_record, stream_wait_event, event_destroy on an Api; for the public
// events also kStreamIsCapturing, kEventDestroy, kWaitExternal (whether the
// vendor can capture a wait on an outside event), stream_capture (the
// Capture of a stream), stream_wait_event_external, event_destroy_status
// and torn_down (the runtime's answer after its teardown at exit); class Scope
// (enter(ordinal, &failed), leave(), context_id()); restore_failure; and
// the vendor's own operations allocate, release_now, check_pointer,
// copy_strided, host_wait_allowed (device/backend.h).
#ifndef HURRAY_SRC_DEVICE_VENDOR_H_
#define HURRAY_SRC_DEVICE_VENDOR_H_

#include <cinttypes>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "common/diagnostics.h"
#include "common/error.h"
#include "device/backend.h"
#include "device/deferred_frees.h"

namespace hurray::detail {

// What a stream's capture state means for an event on it: none; the stream
// is being captured (status active or invalidated); or (CUDA) it is the
// legacy stream while a blocking stream of its context captures
// (CUDA_ERROR_STREAM_CAPTURE_IMPLICIT), which may not be used at all then.
enum class Capture { kNone, kCapturing, kImplicit };

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

  // device/backend.h, event_record / event_wait / event_destroy.
  static int32_t event_record(int32_t device_id, void *stream, void **event, uint64_t *context) {
    const char *call = V::kStreamIsCapturing;
    Capture capture = Capture::kNone;
    typename V::Event ev{};
    bool made = false;
    uint64_t ctx = 0;
    const int32_t st = with_device(
        device_id, &call,
        [&](const Api &a) {
          // Asking is allowed during a capture; recording there is refused
          // before anything is created.
          Result r = V::stream_capture(a, stream, &capture);
          if (r != V::kSuccess || capture != Capture::kNone) return r;
          call = V::kEventCreate;
          r = V::event_create(a, &ev);
          if (r != V::kSuccess) return r;
          made = true;
          call = V::kEventRecord;
          r = V::event_record(a, ev, stream);
          if (r != V::kSuccess) {
            V::event_destroy(a, ev);
            made = false;
          }
          return r;
        },
        &ctx);
    if (st != HURRAY_OK) {
      // Recorded, but the thread's state could not be given back.
      if (made) (void)event_destroy(device_id, static_cast<void *>(ev), ctx);
      return st;
    }
    if (capture != Capture::kNone) {
      return fail(HURRAY_ERR_INVALID_ARGUMENT,
                  "stream %p of %s device %" PRId32
                  " %s: an event recorded there would stand "
                  "for graph work not yet launched, not for the work queued on the stream; "
                  "record the event before or after the capture",
                  stream, V::kName, device_id,
                  capture == Capture::kImplicit
                      ? "is the legacy default stream, which CUDA prohibits while a blocking "
                        "stream of the device is being captured into a graph"
                      : "is being captured into a graph");
    }
    *event = static_cast<void *>(ev);
    *context = ctx;
    return HURRAY_OK;
  }

  static int32_t event_wait(int32_t device_id, void *event, void *stream) {
    const char *call = V::kStreamIsCapturing;
    Capture capture = Capture::kNone;
    const typename V::Event ev = static_cast<typename V::Event>(event);
    bool refused = false;
    const int32_t st = with_device(device_id, &call, [&](const Api &a) {
      Result r = V::stream_capture(a, stream, &capture);
      if (r != V::kSuccess) return r;
      call = V::kStreamWaitEvent;
      if (capture == Capture::kNone) return V::stream_wait_event(a, stream, ev);
      if (capture == Capture::kImplicit || !V::kWaitExternal) {
        refused = true;
        return V::kSuccess;
      }
      // The event was recorded outside this capture: the wait becomes an
      // external event-wait node of the graph.
      return V::stream_wait_event_external(a, stream, ev);
    });
    if (st != HURRAY_OK || !refused) return st;
    if (capture == Capture::kImplicit) {
      return fail(HURRAY_ERR_INVALID_ARGUMENT,
                  "the legacy default stream of CUDA device %" PRId32
                  " cannot wait for an event while a blocking stream of the device is being "
                  "captured into a graph (CUDA prohibits using it then): wait on the capturing "
                  "stream itself, or after the capture",
                  device_id);
    }
    return fail(HURRAY_ERR_INVALID_ARGUMENT,
                "stream %p of %s device %" PRId32
                " is being captured into a graph, and %s cannot capture a wait for an event "
                "recorded outside the graph: wait before or after the capture",
                stream, V::kName, device_id, V::kName);
  }

  // As with_device, but a runtime already torn down (process exit) is a
  // skipped release counted in teardown_leaks, not a failure.
  static int32_t event_destroy(int32_t device_id, void *event, uint64_t context) {
    if (V::forked_child()) return HURRAY_OK;  // the parent's event; nothing to call
    const Api *a = V::api();
    if (a == nullptr) return HURRAY_ERR_UNSUPPORTED_DEVICE;  // it recorded: loaded
    typename V::Scope scope(*a);
    const char *call = nullptr;
    uint64_t now = 0;
    Result r = scope.enter(device_id, &call, &now);
    // A reset context took its events with it.
    if (r == V::kSuccess && now == context) {
      call = V::kEventDestroy;
      r = V::event_destroy_status(*a, static_cast<typename V::Event>(event));
    }
    const Result restore = scope.leave();
    if (V::torn_down(r) || V::torn_down(restore)) {
      count_teardown_leak();
      return HURRAY_OK;
    }
    if (restore != V::kSuccess) return V::restore_failure(scope, restore, r, call, device_id);
    if (r != V::kSuccess) return failure(r, call, device_id);
    return HURRAY_OK;
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
    b.event_record = &event_record;
    b.event_wait = &event_wait;
    b.event_destroy = &event_destroy;
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
