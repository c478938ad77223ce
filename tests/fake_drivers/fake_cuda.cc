// SPDX-License-Identifier: Apache-2.0
// A stand-in for the NVIDIA driver's libcuda.so.1, backed by host memory,
// for tests/device. It exports only cuGetProcAddress and
// cuGetProcAddress_v2 (plus the control API of fake_control.h): every other
// entry point is reachable only through them, as libhurray must use them.
//
// It models what libhurray depends on: per-thread context stacks, primary
// contexts per device (calls needing a context fail with
// CUDA_ERROR_INVALID_CONTEXT when none is current), allocations of each
// kind, stream-ordered frees, events, pointer attributes, and teardown at
// exit. Also: primary-context resets (a reset context is inactive, its
// allocations are gone, calls in it fail with CUDA_ERROR_CONTEXT_IS_DESTROYED
// and its next retain starts a new incarnation with a new cuCtxGetId),
// per-thread stream-capture modes (while another thread captures in global
// mode, an unsafe call from a thread in global mode fails with
// CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED and invalidates that capture), and
// streams that belong to a device and can be destroyed.
//
// This file holds the core: devices, contexts, allocations, streams,
// events, stream capture, the cuGetProcAddress lookup table and the control
// API. The rest is in fake_cuda_strided.cc (2-D / 3-D copies and the strided
// kernel), fake_cuda_ipc.cc (legacy IPC) and fake_cuda_vmm.cc (virtual memory
// management); fake_cuda_internal.h declares what they share.
#include <cuda.h>
#include <unistd.h>

#include <initializer_list>
#include <iterator>
#include <set>
#include <vector>

#include "fake_common.h"
#include "fake_capture.h"
#include "fake_cuda_internal.h"
#include "fake_frees.h"
#include "fake_ipc_event.h"
#include "fake_pool.h"

namespace fake_cuda {

CUctx_st g_primary[kMaxDevices] = {{0, {false}, {0}}, {1, {false}, {0}}, {2, {false}, {0}},
                                   {3, {false}, {0}}, {4, {false}, {0}}, {5, {false}, {0}},
                                   {6, {false}, {0}}, {7, {false}, {0}}};
std::atomic<int> g_retains[kMaxDevices];
std::atomic<unsigned long long> g_next_ctx_id{100};

// Brings a primary context (back) to life with a new incarnation.
void activate(CUctx_st &c) {
  if (!c.active.load()) {
    c.id.store(g_next_ctx_id.fetch_add(1));
    c.active.store(true);
  }
}

// Stream capture: the thread capturing in global mode (0: none), and
// whether that capture was invalidated by another thread's unsafe call.
std::atomic<uint64_t> g_capturer{0};
std::atomic<bool> g_capture_invalidated{false};
thread_local CUstreamCaptureMode t_capture_mode = CU_STREAM_CAPTURE_MODE_GLOBAL;

// Streams made with fake_cuda_stream_create: device, whether destroyed, and
// its capture state (0 none, 1 active, 2 invalidated). Like the real driver,
// the fake hands a destroyed stream's handle out again on the next create.
struct StreamInfo {
  int device;
  bool destroyed;
  int capture;
  bool non_blocking = false;  // CU_STREAM_NON_BLOCKING: no implicit sync with the legacy stream
  int mode = 0;               // CUstreamCaptureMode of the capture
  uint64_t capturer = 0;      // the thread that began it
};
std::vector<void *> &g_free_handles = *new std::vector<void *>;  // destroyed, for reuse
std::atomic<int> g_dead_uses{0};   // calls that named a destroyed stream
std::atomic<int> g_prohibited{0};  // calls prohibited during a capture
std::mutex g_streams_mu;
// Never destroyed: the stream tokens stay reachable for leak checkers.
std::map<const void *, StreamInfo> &g_streams = *new std::map<const void *, StreamInfo>;

// 0 unknown (not made by the fake: treated as a stream of the current
// context), 1 alive, 2 destroyed; *device set for known streams.
int stream_state(const void *s, int *device) {
  std::lock_guard<std::mutex> lock(g_streams_mu);
  auto it = g_streams.find(s);
  if (it == g_streams.end()) return 0;
  *device = it->second.device;
  return it->second.destroyed ? 2 : 1;
}
// The streams made with CU_STREAM_NON_BLOCKING (destroyed ones included).
std::set<const void *> non_blocking_streams() {
  std::set<const void *> out;
  std::lock_guard<std::mutex> lock(g_streams_mu);
  for (const auto &kv : g_streams) {
    if (kv.second.non_blocking) out.insert(kv.first);
  }
  return out;
}
std::atomic<int> g_max_version{0};
std::atomic<int> g_too_new{0};
std::atomic<int> g_used_v2{0};

// The calling thread's context stack (top last).
thread_local CUcontext t_stack[16];
thread_local int t_depth = 0;

CUcontext current() { return t_depth > 0 ? t_stack[t_depth - 1] : nullptr; }
int current_device() { return t_depth > 0 ? t_stack[t_depth - 1]->device : -1; }

bool named(const char *fn, std::initializer_list<const char *> names) {
  for (const char *n : names) {
    if (std::strcmp(fn, n) == 0) return true;
  }
  return false;
}

// The rules of stream capture and of destroyed handles, for a call `fn` on
// `stream` with the current context of `device` (-1: none). A destroyed
// stream passed to the driver is counted (undefined behaviour on the real
// driver, which does not validate handles). During a capture of stream s:
// querying or synchronising s, freeing memory from outside the graph on s,
// synchronising s's context, and using the legacy stream of s's device are
// prohibited: such a call invalidates the capture, is counted, and fails.
// "Using the legacy stream" is any call that queues on it (CUDA Programming
// Guide, "CUDA Graphs", "Prohibited and Unhandled Operations": with a
// blocking stream capturing, the legacy stream's implicit synchronisation
// would be an implicit dependency on the capture, which is prohibited and
// invalidates it, CUDA_ERROR_STREAM_CAPTURE_IMPLICIT): launches, copies,
// stream-ordered allocations and frees, records, and waits
// (cuStreamWaitEvent on it), as well as querying or synchronising it.
// Returns the failure, or CUDA_SUCCESS.
std::atomic<int> g_captures{0};  // streams capturing now (a fast path when none)

CUresult capture_rules(const char *fn, const void *stream, int device) {
  if (stream == nullptr && g_captures.load(std::memory_order_relaxed) == 0) return CUDA_SUCCESS;
  std::lock_guard<std::mutex> lock(g_streams_mu);
  if (stream != nullptr) {
    auto it = g_streams.find(stream);
    if (it != g_streams.end() && it->second.destroyed) g_dead_uses.fetch_add(1);
  }
  const bool legacy = reinterpret_cast<uintptr_t>(stream) <= 1;
  if (named(fn, {"cuStreamQuery", "cuStreamSynchronize", "cuMemFreeAsync"}) && !legacy) {
    auto it = g_streams.find(stream);
    if (it != g_streams.end() && !it->second.destroyed && it->second.capture != 0) {
      fake::capture::invalidate(&it->second.capture);
      g_prohibited.fetch_add(1);
      return std::strcmp(fn, "cuMemFreeAsync") == 0 ? CUDA_ERROR_INVALID_VALUE
                                                    : CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    }
  }
  const bool on_legacy =
      legacy &&
      named(fn, {"cuStreamQuery", "cuStreamSynchronize", "cuMemFreeAsync", "cuMemcpyAsync",
                 "cuMemAllocAsync", "cuMemcpy2DAsync", "cuMemcpy3DAsync", "cuLaunchKernel",
                 "cuEventRecord", "cuStreamWaitEvent", "cuMemAllocFromPoolAsync"});
  if ((on_legacy || std::strcmp(fn, "cuCtxSynchronize") == 0) && device >= 0) {
    bool hit = false;
    for (auto &kv : g_streams) {
      if (!kv.second.destroyed && kv.second.capture != 0 && kv.second.device == device &&
          !(on_legacy && kv.second.non_blocking)) {
        fake::capture::invalidate(&kv.second.capture);
        hit = true;
      }
    }
    if (hit) {
      g_prohibited.fetch_add(1);
      return on_legacy ? CUDA_ERROR_STREAM_CAPTURE_IMPLICIT : CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    }
  }
  return CUDA_SUCCESS;
}

// A potentially unsafe call (one of `unsafe`) while streams capture: each
// capture whose mode prohibits it for this thread (fake::capture::prohibits)
// is invalidated, and the call fails.
CUresult unsafe_during_stream_capture(const char *fn, const char *const *unsafe, size_t n) {
  bool is_unsafe = false;
  for (size_t i = 0; i < n; ++i) is_unsafe = is_unsafe || std::strcmp(unsafe[i], fn) == 0;
  if (!is_unsafe) return CUDA_SUCCESS;
  const uint64_t self = static_cast<uint64_t>(pthread_self());
  bool hit = false;
  std::lock_guard<std::mutex> lock(g_streams_mu);
  for (auto &kv : g_streams) {
    StreamInfo &si = kv.second;
    if (si.destroyed || si.capture == 0) continue;
    if (fake::capture::prohibits(si.mode, si.capturer, t_capture_mode, self)) {
      fake::capture::invalidate(&si.capture);
      hit = true;
    }
  }
  return hit ? CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED : CUDA_SUCCESS;
}

// Common prologue: teardown and injected failures, logged. Returns the
// result to give back, or CUDA_SUCCESS to go on.
CUresult enter(const char *fn, const void *ptr, const void *stream, uint64_t bytes) {
  if (rec().deinitialized.load()) {
    return static_cast<CUresult>(
        rec().record(fn, -1, CUDA_ERROR_DEINITIALIZED, ptr, stream, bytes));
  }
  if (int r = rec().injected(fn)) {
    return static_cast<CUresult>(rec().record(fn, current_device(), r, ptr, stream, bytes));
  }
  if (CUresult r = capture_rules(fn, stream, current_device())) {
    return static_cast<CUresult>(rec().record(fn, current_device(), r, ptr, stream, bytes));
  }
  // Calls that are unsafe during another thread's global-mode capture.
  static const char *const kUnsafe[] = {
      "cuMemAlloc",        "cuMemFree",           "cuMemHostAlloc",  "cuMemFreeHost",
      "cuMemAllocManaged", "cuStreamSynchronize", "cuCtxSynchronize"};
  if (g_captures.load(std::memory_order_relaxed) != 0) {
    if (CUresult r = unsafe_during_stream_capture(fn, kUnsafe, std::size(kUnsafe))) {
      return static_cast<CUresult>(rec().record(fn, current_device(), r, ptr, stream, bytes));
    }
  }
  const uint64_t capturer = g_capturer.load();
  if (capturer != 0 && capturer != static_cast<uint64_t>(pthread_self()) &&
      t_capture_mode == CU_STREAM_CAPTURE_MODE_GLOBAL) {
    for (const char *u : kUnsafe) {
      if (std::strcmp(u, fn) == 0) {
        g_capture_invalidated.store(true);
        return static_cast<CUresult>(rec().record(
            fn, current_device(), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, ptr, stream, bytes));
      }
    }
  }
  return CUDA_SUCCESS;
}

// The error for a call that needs a live current context, or CUDA_SUCCESS.
CUresult context_error() {
  CUcontext c = current();
  if (c == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  if (!c->active.load()) return CUDA_ERROR_CONTEXT_IS_DESTROYED;
  return CUDA_SUCCESS;
}

CUresult done(const char *fn, CUresult r, const void *ptr, const void *stream, uint64_t bytes,
              const void *other) {
  return static_cast<CUresult>(rec().record(fn, current_device(), r, ptr, stream, bytes, other));
}

void teardown_at_exit() { rec().deinitialized.store(true); }

CUresult f_init(unsigned int) {
  FAKE_ENTER("cuInit");
  if (rec().init_count.fetch_add(1) == 0) std::atexit(&teardown_at_exit);
  if (config().init_delay_ms > 0) usleep(static_cast<useconds_t>(config().init_delay_ms) * 1000);
  return done("cuInit", config().device_count > 0 ? CUDA_SUCCESS : CUDA_ERROR_NO_DEVICE);
}

CUresult f_driver_get_version(int *v) {
  FAKE_ENTER("cuDriverGetVersion");
  *v = config().driver_version;
  return done("cuDriverGetVersion", CUDA_SUCCESS);
}

CUresult f_device_get_count(int *n) {
  FAKE_ENTER("cuDeviceGetCount");
  *n = config().device_count;
  return done("cuDeviceGetCount", CUDA_SUCCESS);
}

CUresult f_device_get(CUdevice *d, int ordinal) {
  FAKE_ENTER("cuDeviceGet");
  if (ordinal < 0 || ordinal >= config().device_count || ordinal >= kMaxDevices) {
    return done("cuDeviceGet", CUDA_ERROR_INVALID_DEVICE);
  }
  *d = ordinal;
  return done("cuDeviceGet", CUDA_SUCCESS);
}

// cuDeviceGetUuid / cuDeviceGetUuid_v2 (same signature): the 16 bytes of
// the physical GPU behind this process's ordinal (fake_devices.h).
CUresult f_device_get_uuid(CUuuid *uuid, CUdevice d) {
  FAKE_ENTER("cuDeviceGetUuid");
  if (uuid == nullptr) return done("cuDeviceGetUuid", CUDA_ERROR_INVALID_VALUE);
  if (d < 0 || d >= config().device_count)
    return done("cuDeviceGetUuid", CUDA_ERROR_INVALID_DEVICE);
  fake::physical_uuid(config().vis.physical[d], false, reinterpret_cast<uint8_t *>(uuid->bytes));
  return done("cuDeviceGetUuid", CUDA_SUCCESS);
}

CUresult f_primary_ctx_retain(CUcontext *ctx, CUdevice d) {
  FAKE_ENTER("cuDevicePrimaryCtxRetain");
  if (d < 0 || d >= config().device_count)
    return done("cuDevicePrimaryCtxRetain", CUDA_ERROR_INVALID_DEVICE);
  g_retains[d].fetch_add(1);
  activate(g_primary[d]);
  *ctx = &g_primary[d];
  return done("cuDevicePrimaryCtxRetain", CUDA_SUCCESS);
}

CUresult f_ctx_get_current(CUcontext *ctx) {
  FAKE_ENTER("cuCtxGetCurrent");
  *ctx = current();
  return done("cuCtxGetCurrent", CUDA_SUCCESS);
}

CUresult f_ctx_push_current(CUcontext ctx) {
  FAKE_ENTER("cuCtxPushCurrent");
  if (ctx == nullptr || t_depth == 16) return done("cuCtxPushCurrent", CUDA_ERROR_INVALID_VALUE);
  t_stack[t_depth++] = ctx;
  return done("cuCtxPushCurrent", CUDA_SUCCESS);
}

CUresult f_ctx_pop_current(CUcontext *ctx) {
  FAKE_ENTER("cuCtxPopCurrent");
  if (t_depth == 0) return done("cuCtxPopCurrent", CUDA_ERROR_INVALID_CONTEXT);
  CUcontext top = t_stack[--t_depth];
  if (ctx != nullptr) *ctx = top;
  return done("cuCtxPopCurrent", CUDA_SUCCESS, top);
}

// Allocation entry points: need a current context; the memory belongs to
// its device.
CUresult alloc_common(const char *fn, void **out, size_t bytes, fake::Kind kind, CUstream stream) {
  FAKE_ENTER(fn, nullptr, stream, bytes);
  if (CUresult e = context_error()) return done(fn, e, nullptr, stream, bytes);
  if (stream != nullptr) {
    int sdev = -1;
    const int state = stream_state(stream, &sdev);
    if (state == 2 || (state == 1 && sdev != current_device())) {
      return done(fn, CUDA_ERROR_INVALID_HANDLE, nullptr, stream, bytes);
    }
  }
  if (bytes == 0) return done(fn, CUDA_ERROR_INVALID_VALUE, nullptr, stream, bytes);
  // cuMemAlloc memory is exportable with cuIpcGetMemHandle; pool memory is not.
  const bool shareable = kind == fake::Kind::kDevice && stream == nullptr;
  void *p = rec().allocate(bytes, kind, current_device(), shareable);
  if (p == nullptr) return done(fn, CUDA_ERROR_OUT_OF_MEMORY, nullptr, stream, bytes);
  *out = p;
  return done(fn, CUDA_SUCCESS, p, stream, bytes);
}

CUresult f_mem_alloc(CUdeviceptr *dp, size_t bytes) {
  void *p = nullptr;
  CUresult r = alloc_common("cuMemAlloc", &p, bytes, fake::Kind::kDevice, nullptr);
  if (r == CUDA_SUCCESS) *dp = as_dptr(p);
  return r;
}

CUresult f_mem_alloc_async(CUdeviceptr *dp, size_t bytes, CUstream s) {
  void *p = nullptr;
  CUresult r = alloc_common("cuMemAllocAsync", &p, bytes, fake::Kind::kDevice, s);
  if (r == CUDA_SUCCESS) *dp = as_dptr(p);
  return r;
}

CUresult f_mem_alloc_managed(CUdeviceptr *dp, size_t bytes, unsigned int) {
  void *p = nullptr;
  CUresult r = alloc_common("cuMemAllocManaged", &p, bytes, fake::Kind::kManaged, nullptr);
  if (r == CUDA_SUCCESS) *dp = as_dptr(p);
  return r;
}

CUresult f_mem_host_alloc(void **p, size_t bytes, unsigned int) {
  return alloc_common("cuMemHostAlloc", p, bytes, fake::Kind::kPinned, nullptr);
}

CUresult free_common(const char *fn, void *p, bool device_or_managed, CUstream stream) {
  FAKE_ENTER(fn, p, stream);
  if (CUresult e = context_error()) return done(fn, e, p, stream);
  if (stream != nullptr) {
    int sdev = -1;
    if (stream_state(stream, &sdev) == 2) return done(fn, CUDA_ERROR_INVALID_HANDLE, p, stream);
  }
  if (reinterpret_cast<uintptr_t>(stream) == 1) {
    // A free queued on the legacy stream first waits for every blocking
    // stream of the context, each thread's per-thread stream included
    // (Driver API reference, "Stream synchronization behavior").
    const int dev = current_device();
    std::set<const void *> non_blocking = non_blocking_streams();
    rec().check_free_if(
        p, [&](const void *ws, int wdev) { return wdev == dev && non_blocking.count(ws) == 0; });
  } else {
    rec().check_free(p, stream, current_device());
  }
  if (!rec().release(p, device_or_managed) && !(device_or_managed && pool_free(p))) {
    return done(fn, CUDA_ERROR_INVALID_VALUE, p, stream);
  }
  const auto r = done(fn, CUDA_SUCCESS, p, stream);
  fake::frees::freed();  // after the call is logged: a waiting test reads the log
  return r;
}

CUresult f_mem_free(CUdeviceptr p) { return free_common("cuMemFree", as_ptr(p), true, nullptr); }
CUresult f_mem_free_async(CUdeviceptr p, CUstream s) {
  return free_common("cuMemFreeAsync", as_ptr(p), true, s);
}
CUresult f_mem_free_host(void *p) { return free_common("cuMemFreeHost", p, false, nullptr); }

CUresult f_memcpy_async(CUdeviceptr dst, CUdeviceptr src, size_t bytes, CUstream s) {
  FAKE_ENTER("cuMemcpyAsync", as_ptr(dst), s, bytes);
  if (CUresult e = context_error()) return done("cuMemcpyAsync", e, as_ptr(dst), s, bytes);
  std::memcpy(as_ptr(dst), as_ptr(src), bytes);                     // host-backed: "done" at once
  rec().queue_work(as_ptr(dst), as_ptr(src), current_device(), s);  // pending until synchronised
  return done("cuMemcpyAsync", CUDA_SUCCESS, as_ptr(dst), s, bytes, as_ptr(src));
}

CUresult f_stream_synchronize(CUstream s) {
  fake::capture::counters().stream_syncs.fetch_add(1);
  FAKE_ENTER("cuStreamSynchronize", nullptr, s);
  if (CUresult e = context_error()) return done("cuStreamSynchronize", e, nullptr, s);
  int sdev = -1;
  if (stream_state(s, &sdev) == 2)
    return done("cuStreamSynchronize", CUDA_ERROR_INVALID_HANDLE, nullptr, s);
  rec().stream_synchronized(s, current_device());
  if (reinterpret_cast<uintptr_t>(s) <= 1) {
    // The legacy stream waits for every blocking stream of its context,
    // each thread's per-thread stream included (Driver API reference,
    // "Stream synchronization behavior").
    const int dev = current_device();
    std::set<const void *> non_blocking = non_blocking_streams();
    rec().synchronized_where(
        [&](const void *ws, int wdev) { return wdev == dev && non_blocking.count(ws) == 0; });
  }
  return done("cuStreamSynchronize", CUDA_SUCCESS, nullptr, s);
}

// Events belong to the context current at their creation. Driver API
// reference, cuDevicePrimaryCtxReset: the reset destroys all resources of
// the device's primary context in the process; cuCtxDestroy: using a
// resource of a destroyed context afterwards (CUevent among them) is
// undefined behaviour. The fake answers CUDA_ERROR_INVALID_HANDLE (Error
// Handling, CUresult: "a resource handle passed to the API call was not
// valid", CUstream and CUevent named) for every call naming an event of an
// earlier incarnation, and counts it in dead_event_uses, which the tests
// assert stays 0. The dead event's memory stays registered (g_events), as
// the driver freed it and nobody else will.
std::mutex g_events_mu;
std::set<CUevent> &g_events = *new std::set<CUevent>;  // never destroyed: reachable
std::atomic<int> g_dead_event_uses{0};

CUevent new_event() {
  CUevent ev = new CUevent_st{nullptr};
  CUcontext c = current();
  ev->device = c->device;
  ev->ctx_id = c->id.load();
  std::lock_guard<std::mutex> lock(g_events_mu);
  g_events.insert(ev);
  return ev;
}

bool event_dead(CUevent ev) {
  const CUctx_st &c = g_primary[ev->device];
  return !c.active.load() || c.id.load() != ev->ctx_id;
}

CUresult event_error(CUevent ev) {
  if (ev == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (!event_dead(ev)) return CUDA_SUCCESS;
  g_dead_event_uses.fetch_add(1);
  return CUDA_ERROR_INVALID_HANDLE;
}

CUresult f_event_create(CUevent *ev, unsigned int flags) {
  FAKE_ENTER("cuEventCreate");
  if (CUresult e = context_error()) return done("cuEventCreate", e);
  if (!fake::ipc_event::valid_flags(flags)) return done("cuEventCreate", CUDA_ERROR_INVALID_VALUE);
  *ev = new_event();
  fake::ipc_event::Table::get().created(*ev, flags);
  return done("cuEventCreate", CUDA_SUCCESS, *ev);
}

// Whether `s` (not the legacy stream) is being captured now.
bool stream_captures(const void *s) {
  if (reinterpret_cast<uintptr_t>(s) <= 1) return false;
  std::lock_guard<std::mutex> lock(g_streams_mu);
  auto it = g_streams.find(s);
  return it != g_streams.end() && !it->second.destroyed && it->second.capture != 0;
}

// Driver API reference, cuEventRecord: the event and the stream must be of
// the same context, else CUDA_ERROR_INVALID_HANDLE. A stream the fake made
// belongs to its device's primary context; the legacy, per-thread and
// unknown handles to the current one.
CUresult f_event_record(CUevent ev, CUstream s) {
  FAKE_ENTER("cuEventRecord", ev, s);
  if (CUresult e = event_error(ev)) return done("cuEventRecord", e, ev, s);
  int sdev = current_device();
  (void)stream_state(s, &sdev);
  if (sdev != ev->device) return done("cuEventRecord", CUDA_ERROR_INVALID_HANDLE, ev, s);
  ev->recorded_on = s;
  ev->captured = stream_captures(s);
  return done("cuEventRecord", CUDA_SUCCESS, ev, s);
}

// The flags are logged in `bytes`. Driver API reference, cuStreamWaitEvent:
// CU_EVENT_WAIT_EXTERNAL (1) is invalid outside of stream capture; CUDA
// Programming Guide, "CUDA Graphs", "Prohibited and Unhandled Operations":
// waiting on a non-captured event from a capturing stream without it is
// invalid, which invalidates the capture ("Invalidation"; the guide names no
// code: the fake answers CUDA_ERROR_STREAM_CAPTURE_ISOLATION) and is counted
// in prohibited_calls. Unlike cuEventRecord, the event may be of another
// context or device than the stream (same reference): no context check,
// but an event a reset destroyed is a dead handle (event_error).
CUresult f_stream_wait_event(CUstream s, CUevent ev, unsigned int flags) {
  FAKE_ENTER("cuStreamWaitEvent", ev, s);
  if (CUresult e = event_error(ev)) return done("cuStreamWaitEvent", e, ev, s, flags);
  const bool external = (flags & CU_EVENT_WAIT_EXTERNAL) != 0;
  if (!stream_captures(s)) {
    if (external) return done("cuStreamWaitEvent", CUDA_ERROR_INVALID_VALUE, ev, s, flags);
  } else if (!external && !ev->captured) {
    std::lock_guard<std::mutex> lock(g_streams_mu);
    fake::capture::invalidate(&g_streams[s].capture);
    g_prohibited.fetch_add(1);
    return done("cuStreamWaitEvent", CUDA_ERROR_STREAM_CAPTURE_ISOLATION, ev, s, flags);
  }
  return done("cuStreamWaitEvent", CUDA_SUCCESS, ev, s, flags, ev->recorded_on);
}

// cuEventSynchronize: the fake's work is done when queued, so it returns at
// once; a host-blocking wait on one event (counted in event_syncs), which
// touches no stream and no capture (the Programming Guide prohibits
// synchronising or querying a capturing stream or its context, not an
// event recorded outside the capture).
std::atomic<int> g_event_syncs{0};
CUresult f_event_synchronize(CUevent ev) {
  FAKE_ENTER("cuEventSynchronize", ev);
  if (CUresult e = event_error(ev)) return done("cuEventSynchronize", e, ev);
  g_event_syncs.fetch_add(1);
  return done("cuEventSynchronize", CUDA_SUCCESS, ev);
}

CUresult f_event_destroy(CUevent ev) {
  FAKE_ENTER("cuEventDestroy", ev);
  // Destroyed already, with its context: a second free on the real driver.
  if (CUresult e = event_error(ev)) return done("cuEventDestroy", e, ev);
  fake::ipc_event::Table::get().destroyed(ev);
  {
    std::lock_guard<std::mutex> lock(g_events_mu);
    g_events.erase(ev);
  }
  delete ev;
  return done("cuEventDestroy", CUDA_SUCCESS, ev);
}

CUresult f_pointer_get_attributes(unsigned int n, CUpointer_attribute *attrs, void **data,
                                  CUdeviceptr p) {
  FAKE_ENTER("cuPointerGetAttributes", as_ptr(p));
  fake::Allocation a{};
  const bool known = rec().find(as_ptr(p), &a);
  for (unsigned int i = 0; i < n; ++i) {
    switch (attrs[i]) {
      case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
        *static_cast<unsigned int *>(data[i]) = !known ? 0u
                                                : a.kind == fake::Kind::kPinned
                                                    ? CU_MEMORYTYPE_HOST
                                                    : CU_MEMORYTYPE_DEVICE;
        break;
      case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL:
        *static_cast<int *>(data[i]) = known ? a.device : -2;
        break;
      case CU_POINTER_ATTRIBUTE_IS_MANAGED:
        *static_cast<unsigned int *>(data[i]) = known && a.kind == fake::Kind::kManaged;
        break;
      default: return done("cuPointerGetAttributes", CUDA_ERROR_INVALID_VALUE, as_ptr(p));
    }
  }
  return done("cuPointerGetAttributes", CUDA_SUCCESS, as_ptr(p));
}

CUresult f_primary_ctx_get_state(CUdevice d, unsigned int *flags, int *active) {
  FAKE_ENTER("cuDevicePrimaryCtxGetState");
  if (d < 0 || d >= config().device_count)
    return done("cuDevicePrimaryCtxGetState", CUDA_ERROR_INVALID_DEVICE);
  *flags = 0;
  *active = g_primary[d].active.load() ? 1 : 0;
  return done("cuDevicePrimaryCtxGetState", CUDA_SUCCESS, &g_primary[d]);
}

// What cudaDeviceReset does: the context's allocations are gone, the
// context is inactive until the next retain (a new incarnation).
void reset_primary(int d) {
  g_primary[d].active.store(false);
  rec().drop_device(d);
  fake::Pools::get().drop_device(d);  // its pools too (fake_pool.h)
  // Its events are gone too (event_error): no longer live IPC events.
  std::lock_guard<std::mutex> lock(g_events_mu);
  for (CUevent ev : g_events) {
    if (ev->device == d) fake::ipc_event::Table::get().destroyed(ev);
  }
}

CUresult f_primary_ctx_reset(CUdevice d) {
  FAKE_ENTER("cuDevicePrimaryCtxReset");
  if (d < 0 || d >= config().device_count)
    return done("cuDevicePrimaryCtxReset", CUDA_ERROR_INVALID_DEVICE);
  reset_primary(d);
  return done("cuDevicePrimaryCtxReset", CUDA_SUCCESS, &g_primary[d]);
}

CUresult f_ctx_get_id(CUcontext ctx, unsigned long long *id) {
  FAKE_ENTER("cuCtxGetId", ctx);
  if (ctx == nullptr) ctx = current();
  if (ctx == nullptr) return done("cuCtxGetId", CUDA_ERROR_INVALID_CONTEXT);
  if (!ctx->active.load()) return done("cuCtxGetId", CUDA_ERROR_CONTEXT_IS_DESTROYED, ctx);
  *id = ctx->id.load();
  return done("cuCtxGetId", CUDA_SUCCESS, ctx);
}

CUresult f_ctx_synchronize() {
  fake::capture::counters().context_syncs.fetch_add(1);
  FAKE_ENTER("cuCtxSynchronize");
  if (CUresult e = context_error()) return done("cuCtxSynchronize", e);
  rec().device_synchronized(current_device());
  return done("cuCtxSynchronize", CUDA_SUCCESS);
}

CUresult f_exchange_capture_mode(CUstreamCaptureMode *mode) {
  FAKE_ENTER("cuThreadExchangeStreamCaptureMode");
  const CUstreamCaptureMode old = t_capture_mode;
  t_capture_mode = *mode;
  *mode = old;
  return done("cuThreadExchangeStreamCaptureMode", CUDA_SUCCESS);
}

CUresult f_stream_query(CUstream s) {
  FAKE_ENTER("cuStreamQuery", nullptr, s);
  int sdev = -1;
  if (stream_state(s, &sdev) == 2)
    return done("cuStreamQuery", CUDA_ERROR_INVALID_HANDLE, nullptr, s);
  return done("cuStreamQuery", CUDA_SUCCESS, nullptr, s);
}

CUresult f_ctx_get_device(CUdevice *d) {
  FAKE_ENTER("cuCtxGetDevice");
  if (CUresult e = context_error()) return done("cuCtxGetDevice", e);
  *d = current_device();
  return done("cuCtxGetDevice", CUDA_SUCCESS);
}

// cuStreamIsCapturing: allowed during capture. The legacy stream answers
// CUDA_ERROR_STREAM_CAPTURE_IMPLICIT while a blocking stream of the current
// context is captured (non-blocking ones do not synchronise with it).
CUresult f_stream_is_capturing(CUstream s, CUstreamCaptureStatus *status) {
  FAKE_ENTER("cuStreamIsCapturing", nullptr, s);
  if (CUresult e = context_error()) return done("cuStreamIsCapturing", e, nullptr, s);
  std::lock_guard<std::mutex> lock(g_streams_mu);
  *status = CU_STREAM_CAPTURE_STATUS_NONE;
  if (reinterpret_cast<uintptr_t>(s) <= 1) {
    for (auto &kv : g_streams) {
      if (!kv.second.destroyed && kv.second.capture != 0 && kv.second.device == current_device() &&
          !kv.second.non_blocking) {
        return done("cuStreamIsCapturing", CUDA_ERROR_STREAM_CAPTURE_IMPLICIT, nullptr, s);
      }
    }
    return done("cuStreamIsCapturing", CUDA_SUCCESS, nullptr, s);
  }
  auto it = g_streams.find(s);
  if (it != g_streams.end() && !it->second.destroyed) {
    *status = it->second.capture == 1   ? CU_STREAM_CAPTURE_STATUS_ACTIVE
              : it->second.capture == 2 ? CU_STREAM_CAPTURE_STATUS_INVALIDATED
                                        : CU_STREAM_CAPTURE_STATUS_NONE;
  }
  return done("cuStreamIsCapturing", CUDA_SUCCESS, nullptr, s);
}

// cuStreamGetFlags: the flags the stream was created with. Not one of the
// calls stream capture prohibits (CUDA Programming Guide, "Prohibited and
// Unhandled Operations": synchronising or querying the execution status of
// a capturing stream): it reads a property of the stream, so it is allowed
// during capture. A destroyed stream is counted like any other use.
CUresult f_stream_get_flags(CUstream s, unsigned int *flags) {
  FAKE_ENTER("cuStreamGetFlags", nullptr, s);
  std::lock_guard<std::mutex> lock(g_streams_mu);
  auto it = g_streams.find(s);
  if (it != g_streams.end() && it->second.destroyed)
    return done("cuStreamGetFlags", CUDA_ERROR_INVALID_HANDLE, nullptr, s);
  *flags = it != g_streams.end() && it->second.non_blocking ? CU_STREAM_NON_BLOCKING : 0u;
  return done("cuStreamGetFlags", CUDA_SUCCESS, nullptr, s);
}

CUresult f_stream_get_ctx(CUstream s, CUcontext *ctx) {
  FAKE_ENTER("cuStreamGetCtx", nullptr, s);
  int sdev = -1;
  switch (stream_state(s, &sdev)) {
    case 1: *ctx = &g_primary[sdev]; return done("cuStreamGetCtx", CUDA_SUCCESS, nullptr, s);
    case 2: return done("cuStreamGetCtx", CUDA_ERROR_INVALID_HANDLE, nullptr, s);
    default:
      // NULL, the legacy and per-thread handles, and streams the fake did
      // not make: the current context's.
      if (current() == nullptr)
        return done("cuStreamGetCtx", CUDA_ERROR_INVALID_CONTEXT, nullptr, s);
      *ctx = current();
      return done("cuStreamGetCtx", CUDA_SUCCESS, nullptr, s);
  }
}

struct Entry {
  const char *name;
  int min_version;  // oldest ABI version that has this signature
  void *fn;
};

const Entry kEntries[] = {
    {"cuInit", 2000, reinterpret_cast<void *>(&f_init)},
    {"cuDriverGetVersion", 2020, reinterpret_cast<void *>(&f_driver_get_version)},
    {"cuDeviceGetCount", 2000, reinterpret_cast<void *>(&f_device_get_count)},
    {"cuDeviceGet", 2000, reinterpret_cast<void *>(&f_device_get)},
    {"cuDeviceGetUuid", 9020, reinterpret_cast<void *>(&f_device_get_uuid)},
    {"cuDevicePrimaryCtxRetain", 7000, reinterpret_cast<void *>(&f_primary_ctx_retain)},
    {"cuCtxGetCurrent", 4000, reinterpret_cast<void *>(&f_ctx_get_current)},
    {"cuCtxPushCurrent", 4000, reinterpret_cast<void *>(&f_ctx_push_current)},
    {"cuCtxPopCurrent", 4000, reinterpret_cast<void *>(&f_ctx_pop_current)},
    {"cuMemAlloc", 3020, reinterpret_cast<void *>(&f_mem_alloc)},
    {"cuMemFree", 3020, reinterpret_cast<void *>(&f_mem_free)},
    {"cuMemHostAlloc", 2020, reinterpret_cast<void *>(&f_mem_host_alloc)},
    {"cuMemFreeHost", 2000, reinterpret_cast<void *>(&f_mem_free_host)},
    {"cuMemAllocManaged", 6000, reinterpret_cast<void *>(&f_mem_alloc_managed)},
    {"cuMemAllocAsync", 11020, reinterpret_cast<void *>(&f_mem_alloc_async)},
    {"cuMemFreeAsync", 11020, reinterpret_cast<void *>(&f_mem_free_async)},
    {"cuMemcpyAsync", 4000, reinterpret_cast<void *>(&f_memcpy_async)},
    {"cuStreamSynchronize", 2000, reinterpret_cast<void *>(&f_stream_synchronize)},
    {"cuEventCreate", 2000, reinterpret_cast<void *>(&f_event_create)},
    {"cuEventRecord", 2000, reinterpret_cast<void *>(&f_event_record)},
    {"cuStreamWaitEvent", 3020, reinterpret_cast<void *>(&f_stream_wait_event)},
    {"cuEventDestroy", 4000, reinterpret_cast<void *>(&f_event_destroy)},
    {"cuEventSynchronize", 2000, reinterpret_cast<void *>(&f_event_synchronize)},
    {"cuPointerGetAttributes", 7000, reinterpret_cast<void *>(&f_pointer_get_attributes)},
    {"cuMemcpy2DAsync", 3020, reinterpret_cast<void *>(&f_memcpy_2d_async)},
    {"cuMemcpy3DAsync", 3020, reinterpret_cast<void *>(&f_memcpy_3d_async)},
    {"cuModuleLoadData", 2000, reinterpret_cast<void *>(&f_module_load_data)},
    {"cuModuleGetFunction", 2000, reinterpret_cast<void *>(&f_module_get_function)},
    {"cuLaunchKernel", 4000, reinterpret_cast<void *>(&f_launch_kernel)},
    {"cuDevicePrimaryCtxGetState", 7000, reinterpret_cast<void *>(&f_primary_ctx_get_state)},
    {"cuDevicePrimaryCtxReset", 11000, reinterpret_cast<void *>(&f_primary_ctx_reset)},
    {"cuCtxGetId", 12000, reinterpret_cast<void *>(&f_ctx_get_id)},
    {"cuCtxSynchronize", 2000, reinterpret_cast<void *>(&f_ctx_synchronize)},
    {"cuThreadExchangeStreamCaptureMode", 10010,
     reinterpret_cast<void *>(&f_exchange_capture_mode)},
    {"cuStreamQuery", 2000, reinterpret_cast<void *>(&f_stream_query)},
    {"cuStreamGetCtx", 9020, reinterpret_cast<void *>(&f_stream_get_ctx)},
    {"cuStreamGetFlags", 5050, reinterpret_cast<void *>(&f_stream_get_flags)},
    {"cuCtxGetDevice", 2000, reinterpret_cast<void *>(&f_ctx_get_device)},
    {"cuStreamIsCapturing", 10000, reinterpret_cast<void *>(&f_stream_is_capturing)},
    {"cuIpcGetMemHandle", 4010, reinterpret_cast<void *>(&f_ipc_get_mem_handle)},
    {"cuIpcOpenMemHandle", 11000, reinterpret_cast<void *>(&f_ipc_open_mem_handle)},
    {"cuIpcCloseMemHandle", 4010, reinterpret_cast<void *>(&f_ipc_close_mem_handle)},
    {"cuIpcGetEventHandle", 4010, reinterpret_cast<void *>(&f_ipc_get_event_handle)},
    {"cuIpcOpenEventHandle", 4010, reinterpret_cast<void *>(&f_ipc_open_event_handle)},
    {"cuMemGetAddressRange", 3020, reinterpret_cast<void *>(&f_mem_get_address_range)},
    {"cuMemCreate", 10020, reinterpret_cast<void *>(&f_mem_create)},
    {"cuMemRelease", 10020, reinterpret_cast<void *>(&f_mem_release)},
    {"cuMemAddressReserve", 10020, reinterpret_cast<void *>(&f_mem_address_reserve)},
    {"cuMemAddressFree", 10020, reinterpret_cast<void *>(&f_mem_address_free)},
    {"cuMemMap", 10020, reinterpret_cast<void *>(&f_mem_map)},
    {"cuMemGetAllocationGranularity", 10020,
     reinterpret_cast<void *>(&f_mem_get_allocation_granularity)},
    {"cuMemUnmap", 10020, reinterpret_cast<void *>(&f_mem_unmap)},
    {"cuMemSetAccess", 10020, reinterpret_cast<void *>(&f_mem_set_access)},
    {"cuMemRetainAllocationHandle", 11000,
     reinterpret_cast<void *>(&f_mem_retain_allocation_handle)},
    {"cuMemGetAllocationPropertiesFromHandle", 10020,
     reinterpret_cast<void *>(&f_mem_get_allocation_properties)},
    {"cuMemExportToShareableHandle", 10020,
     reinterpret_cast<void *>(&f_mem_export_to_shareable_handle)},
    {"cuMemImportFromShareableHandle", 10020,
     reinterpret_cast<void *>(&f_mem_import_from_shareable_handle)},
    // Memory pools (fake_cuda_pool.cc).
    {"cuDeviceGetDefaultMemPool", 11020, reinterpret_cast<void *>(&f_device_get_default_mem_pool)},
    {"cuMemPoolCreate", 11020, reinterpret_cast<void *>(&f_mem_pool_create)},
    {"cuMemPoolDestroy", 11020, reinterpret_cast<void *>(&f_mem_pool_destroy)},
    {"cuMemAllocFromPoolAsync", 11020, reinterpret_cast<void *>(&f_mem_alloc_from_pool_async)},
    {"cuMemPoolExportToShareableHandle", 11020,
     reinterpret_cast<void *>(&f_mem_pool_export_to_shareable_handle)},
    {"cuMemPoolImportFromShareableHandle", 11020,
     reinterpret_cast<void *>(&f_mem_pool_import_from_shareable_handle)},
    {"cuMemPoolExportPointer", 11020, reinterpret_cast<void *>(&f_mem_pool_export_pointer)},
    {"cuMemPoolImportPointer", 11020, reinterpret_cast<void *>(&f_mem_pool_import_pointer)},
    {"cuPointerGetAttribute", 4000, reinterpret_cast<void *>(&f_pointer_get_attribute)},
};

CUresult lookup(const char *symbol, void **pfn, int version, bool v2,
                CUdriverProcAddressQueryResult *status) {
  g_used_v2.store(v2 ? 1 : 0);
  int seen = g_max_version.load();
  while (version > seen && !g_max_version.compare_exchange_weak(seen, version)) {
  }
  if (version > config().driver_version) g_too_new.fetch_add(1);
  for (const Entry &e : kEntries) {
    if (std::strcmp(e.name, symbol) != 0) continue;
    if (version < e.min_version) {
      if (status != nullptr) *status = CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT;
      *pfn = nullptr;
      return CUDA_ERROR_NOT_FOUND;
    }
    if (status != nullptr) *status = CU_GET_PROC_ADDRESS_SUCCESS;
    *pfn = e.fn;
    return CUDA_SUCCESS;
  }
  if (status != nullptr) *status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  *pfn = nullptr;
  return CUDA_ERROR_NOT_FOUND;
}

}  // namespace fake_cuda

using namespace fake_cuda;  // NOLINT: the exports below use the core's state

// The two exported lookups, under the driver's own symbol names.
FAKE_EXPORT CUresult fake_get_proc_address_v1(const char *symbol, void **pfn, int version,
                                              cuuint64_t) __asm__("cuGetProcAddress");
FAKE_EXPORT CUresult fake_get_proc_address_v1(const char *symbol, void **pfn, int version,
                                              cuuint64_t) {
  return lookup(symbol, pfn, version, false, nullptr);
}
FAKE_EXPORT CUresult
fake_get_proc_address_v2(const char *symbol, void **pfn, int version, cuuint64_t,
                         CUdriverProcAddressQueryResult *status) __asm__("cuGetProcAddress_v2");
FAKE_EXPORT CUresult fake_get_proc_address_v2(const char *symbol, void **pfn, int version,
                                              cuuint64_t, CUdriverProcAddressQueryResult *status) {
  return lookup(symbol, pfn, version, true, status);
}

FAKE_DEFINE_CONTROL_API(fake_cuda_)

FAKE_EXPORT int fake_cuda_primary_retains(int device) {
  return device >= 0 && device < kMaxDevices ? g_retains[device].load() : 0;
}
FAKE_EXPORT int fake_cuda_max_requested_version(void) { return g_max_version.load(); }
FAKE_EXPORT int fake_cuda_too_new_requests(void) { return g_too_new.load(); }
FAKE_EXPORT int fake_cuda_used_proc_address_v2(void) { return g_used_v2.load(); }
FAKE_EXPORT int fake_cuda_current_device(void) { return current_device(); }
FAKE_EXPORT void fake_cuda_set_current_device(int d) {
  // Like cuCtxSetCurrent: replaces the top of the stack (or clears it).
  if (d < 0 || d >= kMaxDevices) {
    if (t_depth > 0) --t_depth;
    return;
  }
  if (t_depth == 0) t_depth = 1;
  activate(g_primary[d]);  // as the runtime's cudaSetDevice + first call would
  t_stack[t_depth - 1] = &g_primary[d];
}
FAKE_EXPORT void fake_cuda_renew_context(int d) {
  // A reset followed at once by another library's retain: the old
  // context's memory and modules are gone, the context is live again under
  // the same handle with a new id.
  if (d >= 0 && d < kMaxDevices) {
    reset_primary(d);
    activate(g_primary[d]);
  }
}
FAKE_EXPORT void fake_cuda_primary_ctx_reset(int d) {
  if (d >= 0 && d < kMaxDevices) reset_primary(d);
}
FAKE_EXPORT void fake_cuda_primary_ctx_revive(int d) {
  if (d >= 0 && d < kMaxDevices) activate(g_primary[d]);
}
FAKE_EXPORT int fake_cuda_primary_ctx_active(int d) {
  return d >= 0 && d < kMaxDevices && g_primary[d].active.load() ? 1 : 0;
}
FAKE_EXPORT void fake_cuda_begin_global_capture(void) {
  g_capture_invalidated.store(false);
  g_capturer.store(static_cast<uint64_t>(pthread_self()));
}
FAKE_EXPORT int fake_cuda_end_capture(void) {
  g_capturer.store(0);
  return g_capture_invalidated.exchange(false) ? 0 : 1;
}
FAKE_EXPORT int fake_cuda_capture_mode(void) { return static_cast<int>(t_capture_mode); }
FAKE_EXPORT void fake_cuda_set_capture_mode(int mode) {
  t_capture_mode = static_cast<CUstreamCaptureMode>(mode);
}
FAKE_EXPORT void *fake_cuda_stream_create(int device) {
  if (device >= 0 && device < kMaxDevices) activate(g_primary[device]);  // its creator's context
  std::lock_guard<std::mutex> lock(g_streams_mu);
  void *s;
  if (!g_free_handles.empty()) {
    s = g_free_handles.back();  // the driver reuses destroyed handles
    g_free_handles.pop_back();
  } else {
    s = std::malloc(1);  // a unique address
  }
  g_streams[s] = StreamInfo{device, false, 0, false, 0, 0};
  return s;
}
FAKE_EXPORT void fake_cuda_stream_destroy(void *s) {
  std::lock_guard<std::mutex> lock(g_streams_mu);
  auto it = g_streams.find(s);
  if (it != g_streams.end() && !it->second.destroyed) {
    it->second.destroyed = true;
    if (it->second.capture != 0) g_captures.fetch_sub(1);
    it->second.capture = 0;
    g_free_handles.push_back(s);
  }
}
FAKE_EXPORT void fake_cuda_stream_begin_capture_mode(void *s, int mode) {
  std::lock_guard<std::mutex> lock(g_streams_mu);
  auto it = g_streams.find(s);
  if (it != g_streams.end() && it->second.capture == 0) {
    it->second.capture = 1;
    it->second.mode = mode;
    it->second.capturer = static_cast<uint64_t>(pthread_self());
    g_captures.fetch_add(1);
  }
}
FAKE_EXPORT void fake_cuda_stream_begin_capture(void *s) {
  fake_cuda_stream_begin_capture_mode(s, CU_STREAM_CAPTURE_MODE_RELAXED);
}
FAKE_EXPORT void *fake_cuda_stream_create_flags(int device, unsigned int flags) {
  void *s = fake_cuda_stream_create(device);
  std::lock_guard<std::mutex> lock(g_streams_mu);
  g_streams[s].non_blocking = (flags & CU_STREAM_NON_BLOCKING) != 0;
  return s;
}
FAKE_CAPTURE_EXPORTS(fake_cuda_)
FAKE_FREES_EXPORTS(fake_cuda_)
FAKE_IPC_EVENT_EXPORTS(fake_cuda_)
FAKE_EXPORT int fake_cuda_stream_end_capture(void *s) {
  std::lock_guard<std::mutex> lock(g_streams_mu);
  auto it = g_streams.find(s);
  if (it == g_streams.end()) return 0;
  const int was = it->second.capture;
  it->second.capture = 0;
  if (was != 0) g_captures.fetch_sub(1);
  return was == 1 ? 1 : 0;
}
FAKE_EXPORT int fake_cuda_prohibited_calls(void) { return g_prohibited.load(); }
FAKE_EXPORT int fake_cuda_event_synchronizations(void) { return g_event_syncs.load(); }
FAKE_EXPORT int fake_cuda_dead_stream_uses(void) { return g_dead_uses.load(); }
FAKE_EXPORT int fake_cuda_dead_event_uses(void) { return g_dead_event_uses.load(); }
