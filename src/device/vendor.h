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
// Capture of a stream), stream_wait_event_external, event_destroy_status,
// torn_down (the runtime's answer after its teardown at exit),
// context_alive (whether an incarnation Scope::enter reported is still the
// live one, asked without entering or retaining anything; kContextState
// names the call, kResetCalls what resets it); class Scope
// (enter(ordinal, &failed), leave(), context_id()); restore_failure; and
// the vendor's own operations allocate, release_now, check_pointer,
// copy_strided, host_wait_allowed (device/backend.h).
#ifndef HURRAY_SRC_DEVICE_VENDOR_H_
#define HURRAY_SRC_DEVICE_VENDOR_H_

#include <pthread.h>
#include <signal.h>
#include <time.h>

#include <cinttypes>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "common/block_cache.h"
#include "common/diagnostics.h"
#include "common/error.h"
#include "device/backend.h"
#include "device/deferred_frees.h"

namespace hurray::detail {

// What a stream's capture state means for an event on it: none; the stream
// is being captured (status active or invalidated); or it is the legacy
// (null) stream while a blocking stream of its context captures
// (CUDA_ERROR_STREAM_CAPTURE_IMPLICIT, hipErrorStreamCaptureImplicit),
// which may not be used at all then.
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
                      ? "is the legacy default stream, which may not be used while a "
                        "blocking stream of the device is being captured into a graph"
                      : "is being captured into a graph");
    }
    *event = static_cast<void *>(ev);
    *context = ctx;
    return HURRAY_OK;
  }

  static int32_t event_wait(int32_t device_id, void *event, uint64_t context, void *stream) {
    // An event of an earlier incarnation of the context died with it: it is
    // not named to the driver again, and the reset context is not retained
    // again just to refuse the wait.
    bool alive = true;
    int32_t checked = context_of_event(device_id, context, &alive);
    if (checked != HURRAY_OK) return checked;
    if (!alive) {
      return fail(HURRAY_ERR_DEVICE,
                  "the event was recorded on %s device %" PRId32
                  " before its context was reset (%s, by this or another library), which "
                  "destroyed the event: nothing was queued; record a new event after the reset "
                  "(the event can still be released)",
                  V::kName, device_id, V::kResetCalls);
    }
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
                  "the legacy default stream of %s device %" PRId32
                  " cannot wait for an event while a blocking stream of the device is being "
                  "captured into a graph (%s prohibits using it then): wait on the capturing "
                  "stream itself, or after the capture",
                  V::kName, device_id, V::kName);
    }
    return fail(HURRAY_ERR_INVALID_ARGUMENT,
                "stream %p of %s device %" PRId32
                " is being captured into a graph, and %s cannot capture a wait for an event "
                "recorded outside the graph: wait before or after the capture",
                stream, V::kName, device_id, V::kName);
  }

  // Whether `context` (an incarnation Scope::enter reported for device
  // `device_id`) is still the live one: *alive; the message set on failure.
  static int32_t context_of_event(int32_t device_id, uint64_t context, bool *alive) {
    const Api *a = V::api();
    if (a == nullptr) return HURRAY_ERR_UNSUPPORTED_DEVICE;  // it recorded: loaded
    const Result r = V::context_alive(*a, device_id, context, alive);
    if (r != V::kSuccess) return failure(r, V::kContextState, device_id);
    return HURRAY_OK;
  }

  // As with_device, but a runtime already torn down (process exit) is a
  // skipped release counted in teardown_leaks, not a failure.
  static int32_t event_destroy(int32_t device_id, void *event, uint64_t context) {
    if (V::forked_child()) return HURRAY_OK;  // the parent's event; nothing to call
    const Api *a = V::api();
    if (a == nullptr) return HURRAY_ERR_UNSUPPORTED_DEVICE;  // it recorded: loaded
    // A reset context took its events with it: nothing to call, and the
    // context is not retained again to find that out.
    bool alive = true;
    Result r = V::context_alive(*a, device_id, context, &alive);
    if (V::torn_down(r)) {
      count_teardown_leak();
      return HURRAY_OK;
    }
    if (r == V::kSuccess && !alive) return HURRAY_OK;
    typename V::Scope scope(*a);
    const char *call = V::kContextState;
    uint64_t now = 0;
    if (r == V::kSuccess) r = scope.enter(device_id, &call, &now);
    // Reset (and revived) between the check and the entry: the same.
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

  // Releases whose stream was being captured (docs/impl/gpu.md §2,
  // "Releases during a capture of their stream"): kept here by
  // V::release_now, `keeps_stream` when the release still names the
  // caller's stream (device/deferred_frees.h), and tried again (each may be
  // deferred once more) by the retirer (blocking class only), by
  // retire_deferred, and by later allocations and releases.
  static void defer(hurray_device device, const DeviceMemory &mem, bool keeps_stream) {
    if (deferred_.add(device, mem, keeps_stream)) start_retirer();
  }
  static void retry_deferred_frees() {
    if (deferred_.empty() || V::forked_child()) return;
    deferred_.try_retry(&V::release_now);
  }

  // hurray_retire_deferred_frees: tries every kept release of device
  // `device_id` (its memory, or ordered after a stream of it) now, waiting
  // for a try under way on another thread first; *remaining (optional):
  // how many of them are still kept (their stream, or a blocking stream of
  // their context, is still being captured).
  static int32_t retire_deferred(int32_t device_id, size_t *remaining) {
    const Api *a = V::api();
    if (a == nullptr) return HURRAY_ERR_UNSUPPORTED_DEVICE;
    const int32_t st = check_ordinal(*a, device_id);
    if (st != HURRAY_OK) return st;
    auto of_device = [device_id](const DeferredFrees::Entry &e) {
      return e.device.device_id == device_id || e.mem.stream_device == device_id;
    };
    (void)deferred_.retry(of_device, &V::release_now);
    if (remaining != nullptr) *remaining = deferred_.count(of_device);
    return HURRAY_OK;
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
    b.retire_deferred = &retire_deferred;
    return b;
  }

 private:
  // The retirer: one thread of libhurray's own, started at the first
  // blocking-class deferral while none runs. About every millisecond it
  // tries the blocking-class deferrals again (V::release_now asks the
  // driver, in each one's context, whether a blocking stream still
  // captures, and frees on the legacy stream when none does); it ends when
  // none is left, and at process exit (stop_retirer, an atexit handler
  // registered before the first start, which runs before the driver's own
  // teardown registered earlier and waits for the pass under way). It
  // never names a stream of the caller's: those deferrals are not its. A
  // forked child has no retirer and never tries a deferral
  // (V::forked_child).
  static void start_retirer() {
    // Registered after the library's own fork handlers (the diagnostic
    // hook's lock), so that a fork waits for the retirer's pass, which may
    // call the hook, before it takes the hook's lock.
    static const bool registered =
        std::atexit(&stop_retirer) == 0 &&
        pthread_atfork(&lock_for_fork, &unlock_after_fork, &unlock_after_fork) == 0;
    if (!registered) {
      deferred_.retirer_failed();  // no exit-time stop: hot paths retry instead
      return;
    }
    pthread_attr_t attr;
    pthread_t thread;
    bool started = pthread_attr_init(&attr) == 0;
    if (started) {
      started = pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED) == 0 &&
                pthread_create(&thread, &attr, &retirer_main, nullptr) == 0;
      (void)pthread_attr_destroy(&attr);
    }
    if (!started) deferred_.retirer_failed();  // no thread: later allocations and releases retry
  }
  static void *retirer_main(void *) {
    // A library's thread: the application's signal handlers never run on
    // it, and it shows by name in a debugger or top.
    sigset_t all;
    (void)sigfillset(&all);
    (void)pthread_sigmask(SIG_BLOCK, &all, nullptr);
    (void)pthread_setname_np(pthread_self(), "hurray-retirer");
    // This thread lives until exit: no per-thread block cache (block_cache.h).
    hurray::detail::LibraryBlocks::bypass_this_thread();
    for (;;) {
      if (V::forked_child()) return nullptr;
      (void)deferred_.retry([](const DeferredFrees::Entry &e) { return !e.keeps_stream; },
                            &V::release_now);
      if (deferred_.retirer_done()) return nullptr;
      struct timespec pause = {0, kRetirerPeriodNs};
      (void)nanosleep(&pause, nullptr);
    }
  }
  static void stop_retirer() {
    deferred_.stop();
    if (V::forked_child()) return;  // no retirer in a forked child
    // Bounded: a pass is a few driver calls per deferral.
    for (int i = 0; i < kRetirerStopWaits && deferred_.retirer_running(); ++i) {
      struct timespec pause = {0, kRetirerPeriodNs};
      (void)nanosleep(&pause, nullptr);
    }
  }
  static void lock_for_fork() { deferred_.lock_for_fork(); }
  static void unlock_after_fork() { deferred_.unlock_after_fork(); }
  static constexpr long kRetirerPeriodNs = 1000000;  // 1 ms between passes
  static constexpr int kRetirerStopWaits = 5000;     // at most ~5 s at exit

  static inline DeferredFrees deferred_;
};

}  // namespace hurray::detail

#endif  // HURRAY_SRC_DEVICE_VENDOR_H_
