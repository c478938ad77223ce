// SPDX-License-Identifier: Apache-2.0
// A stand-in for ROCm's libamdhip64.so, backed by host memory, for
// tests/device. Written against HIP's documented C API with its own
// declarations (no ROCm header), because it must speak both the ROCm 5 and
// the ROCm 6+ dialect of hipPointerAttribute_t, chosen by
// FAKE_HIP_RUNTIME_VERSION.
//
// It models what libhurray depends on: a current device per thread (0 until
// set), allocations of each kind, stream-ordered frees, events, pointer
// attributes, and teardown at exit: by default an atexit handler at first
// use after which calls return hipErrorDeinitialized; with
// FAKE_HIP_STATIC_TEARDOWN=1 like ROCm itself, a static destructor
// registered when the library is loaded, after which any call is a
// use-after-free (the fake reports it on stderr and exits with status 86).
#include <unistd.h>

#include <set>
#include <vector>

#include "fake_common.h"
#include "fake_capture.h"
#include "fake_devices.h"
#include "fake_frees.h"
#include "fake_ipc_event.h"

namespace {

using hipError_t = int;
using hipStream_t = void *;
// An event (hipEventCreateWithFlags, hipIpcOpenEventHandle): made on the
// thread's current device, in that device's incarnation `generation`
// (hipDeviceReset starts a new one; see event_error).
struct Event {
  hipStream_t recorded_on;
  int device = 0;
  uint64_t generation = 0;
};
using hipEvent_t = Event *;

constexpr hipError_t kSuccess = 0;
constexpr hipError_t kInvalidValue = 1;
constexpr hipError_t kOutOfMemory = 2;
constexpr hipError_t kDeinitialized = 4;
constexpr hipError_t kNoDevice = 100;
constexpr hipError_t kInvalidDevice = 101;
constexpr hipError_t kInvalidHandle = 400;       // hipErrorInvalidHandle
constexpr hipError_t kContextIsDestroyed = 709;  // ROCm's answer for a stream it no longer knows

// hipPointerAttribute_t: same layout in ROCm 5 and 6.
struct PointerAttributes {
  int memory_type;
  int device;
  void *device_pointer;
  void *host_pointer;
  int is_managed;
  unsigned allocation_flags;
};

struct Config {
  int runtime_version = fake::env_int("FAKE_HIP_RUNTIME_VERSION", 60200000);
  // FAKE_HIP_DEVICE_COUNT GPUs installed, of which HIP_VISIBLE_DEVICES
  // picks and orders what this process sees (fake_devices.h).
  fake::Visibility vis =
      fake::visible_devices("HIP_VISIBLE_DEVICES", fake::env_int("FAKE_HIP_DEVICE_COUNT", 2), true);
  int device_count = vis.count;
  bool static_teardown = fake::env_int("FAKE_HIP_STATIC_TEARDOWN", 0) != 0;
};
const Config &config() {
  static const Config c;
  return c;
}

thread_local int t_device = 0;

fake::Recorder &rec() { return fake::Recorder::get(); }

// Streams made with fake_hip_stream_create: the error calls on one return
// once it is destroyed (0 while alive). Like ROCm, a destroyed stream's
// address is handed out again by the next create; every call naming a
// destroyed stream is counted (ROCm 7 may crash on one instead).
std::mutex g_streams_mu;
std::map<const void *, hipError_t> &g_streams = *new std::map<const void *, hipError_t>;
std::vector<void *> &g_free_handles = *new std::vector<void *>;
std::set<const void *> &g_capturing = *new std::set<const void *>;  // active captures
std::set<const void *> &g_invalidated = *new std::set<const void *>;
std::map<const void *, int> &g_stream_device = *new std::map<const void *, int>;
std::atomic<int> g_dead_uses{0};
std::atomic<int> g_prohibited{0};
std::atomic<int> g_event_syncs{0};
constexpr hipError_t kCaptureImplicit = 906;  // hipErrorStreamCaptureImplicit

// Whether a (blocking) stream of `device` captures now; g_streams_mu held.
bool blocking_capture_locked(int device) {
  for (const void *s : g_capturing) {
    auto it = g_stream_device.find(s);
    if (it != g_stream_device.end() && it->second == device) return true;
  }
  return false;
}

// The null stream while a blocking stream of the current device captures
// (HIP API reference, hipStreamIsCapturing and hipErrorStreamCaptureImplicit:
// an implicit dependency on a capture from the legacy stream is disallowed;
// CUDA Programming Guide, "CUDA Graphs", "Prohibited and Unhandled
// Operations", whose rules HIP graphs follow): any call that queues on,
// queries or synchronises the null stream invalidates those captures, is
// counted and fails with hipErrorStreamCaptureImplicit.
hipError_t null_stream_rules(const char *fn, const void *stream, int device) {
  if (stream != nullptr) return 0;
  static const char *const kOnStream[] = {
      "hipEventRecord",       "hipStreamWaitEvent",     "hipMemcpyAsync",       "hipMemcpy2DAsync",
      "hipMemcpy3DAsync",     "hipMallocAsync",         "hipFreeAsync",         "hipStreamQuery",
      "hipStreamSynchronize", "hipMallocFromPoolAsync", "hipModuleLaunchKernel"};
  bool on = false;
  for (const char *n : kOnStream) on = on || std::strcmp(n, fn) == 0;
  if (!on) return 0;
  std::lock_guard<std::mutex> lock(g_streams_mu);
  bool hit = false;
  for (const void *s : g_capturing) {
    auto it = g_stream_device.find(s);
    if (it == g_stream_device.end() || it->second != device) continue;
    if (g_invalidated.insert(s).second) fake::capture::counters().invalidated.fetch_add(1);
    hit = true;
  }
  if (!hit) return 0;
  g_prohibited.fetch_add(1);
  return kCaptureImplicit;
}
hipError_t stream_error(const void *s) {
  std::lock_guard<std::mutex> lock(g_streams_mu);
  auto it = g_streams.find(s);
  if (it != g_streams.end() && it->second != kSuccess) g_dead_uses.fetch_add(1);
  return it == g_streams.end() ? kSuccess : it->second;
}
// A call prohibited during a capture of `s` (querying or synchronising it,
// freeing memory from outside the graph on it): invalidates the capture,
// counted; returns the error to answer, or kSuccess when `s` is not captured.
hipError_t prohibited_on(const void *s) {
  std::lock_guard<std::mutex> lock(g_streams_mu);
  if (g_capturing.count(s) == 0) return kSuccess;
  if (g_invalidated.insert(s).second) fake::capture::counters().invalidated.fetch_add(1);
  g_prohibited.fetch_add(1);
  return 900;  // hipErrorStreamCaptureUnsupported
}

// Capture modes (fake_capture.h): each capture's hipStreamCaptureMode and
// thread, and each thread's own mode (hipThreadExchangeStreamCaptureMode).
struct CaptureOwner {
  int mode;
  uint64_t thread;
};
std::map<const void *, CaptureOwner> &g_capture_owner = *new std::map<const void *, CaptureOwner>;
thread_local int t_capture_mode = fake::capture::kGlobal;

// A potentially unsafe call (hipMalloc, hipFree, hipHostMalloc, hipHostFree,
// hipStreamSynchronize, hipDeviceSynchronize) while streams capture: each
// capture whose mode prohibits it for this thread is invalidated, and the
// call fails with hipErrorStreamCaptureUnsupported.
hipError_t unsafe_during_capture() {
  const uint64_t self = static_cast<uint64_t>(pthread_self());
  bool hit = false;
  std::lock_guard<std::mutex> lock(g_streams_mu);
  for (const void *s : g_capturing) {
    auto it = g_capture_owner.find(s);
    if (it == g_capture_owner.end()) continue;
    if (fake::capture::prohibits(it->second.mode, it->second.thread, t_capture_mode, self)) {
      if (g_invalidated.insert(s).second) fake::capture::counters().invalidated.fetch_add(1);
      hit = true;
    }
  }
  return hit ? 900 : kSuccess;  // hipErrorStreamCaptureUnsupported
}

void teardown_at_exit() { rec().deinitialized.store(true); }

// FAKE_HIP_STATIC_TEARDOWN: destroyed by a static destructor registered at
// load time, as ROCm's device objects are.
std::atomic<bool> g_destroyed{false};
struct StaticRuntime {
  StaticRuntime() {
    if (config().static_teardown) std::atexit([] { g_destroyed.store(true); });
  }
} g_static_runtime;

// First call of the process initialises the runtime (and arms teardown).
void initialise() {
  static std::once_flag once;
  std::call_once(once, [] {
    rec().init_count.fetch_add(1);
    if (!config().static_teardown) std::atexit(&teardown_at_exit);
  });
}

hipError_t enter(const char *fn, const void *ptr = nullptr, const void *stream = nullptr,
                 uint64_t bytes = 0) {
  if (g_destroyed.load()) {
    // What ROCm would do is undefined: a use of destroyed objects.
    char msg[96];
    const int n =
        std::snprintf(msg, sizeof msg, "fake HIP: %s after the runtime was destroyed\n", fn);
    if (n > 0) (void)!write(2, msg, static_cast<size_t>(n));
    _exit(86);
  }
  initialise();
  if (rec().deinitialized.load())
    return rec().record(fn, t_device, kDeinitialized, ptr, stream, bytes);
  if (int r = rec().injected(fn)) return rec().record(fn, t_device, r, ptr, stream, bytes);
  if (hipError_t r = null_stream_rules(fn, stream, t_device)) {
    return rec().record(fn, t_device, r, ptr, stream, bytes);
  }
  return kSuccess;
}

hipError_t done(const char *fn, hipError_t r, const void *ptr = nullptr,
                const void *stream = nullptr, uint64_t bytes = 0, const void *other = nullptr) {
  return rec().record(fn, t_device, r, ptr, stream, bytes, other);
}

#define FAKE_ENTER(...)                     \
  do {                                      \
    hipError_t early_ = enter(__VA_ARGS__); \
    if (early_ != kSuccess) return early_;  \
  } while (0)

hipError_t alloc_common(const char *fn, void **out, size_t bytes, fake::Kind kind,
                        hipStream_t stream) {
  FAKE_ENTER(fn, nullptr, stream, bytes);
  if (stream == nullptr) {
    if (hipError_t e = unsafe_during_capture()) return done(fn, e, nullptr, stream, bytes);
  }
  if (hipError_t e = stream_error(stream)) return done(fn, e, nullptr, stream, bytes);
  if (bytes == 0) return done(fn, kInvalidValue, nullptr, stream, bytes);
  // hipMalloc memory is exportable with hipIpcGetMemHandle; pool memory is not.
  const bool shareable = kind == fake::Kind::kDevice && stream == nullptr;
  void *p = rec().allocate(bytes, kind, kind == fake::Kind::kPinned ? -1 : t_device, shareable);
  if (p == nullptr) return done(fn, kOutOfMemory, nullptr, stream, bytes);
  *out = p;
  return done(fn, kSuccess, p, stream, bytes);
}

bool pool_free_hip(void *p);  // fake_hip_pool.h
bool pool_range_hip(const void *p, uintptr_t *base, uint64_t *bytes);

hipError_t free_common(const char *fn, void *p, bool device_or_managed, hipStream_t stream) {
  FAKE_ENTER(fn, p, stream);
  if (stream == nullptr) {
    if (hipError_t e = unsafe_during_capture()) return done(fn, e, p, stream);
  }
  if (hipError_t e = stream_error(stream)) return done(fn, e, p, stream);
  rec().check_free(p, stream, t_device);
  if (!rec().release(p, device_or_managed) && !(device_or_managed && pool_free_hip(p))) {
    return done(fn, kInvalidValue, p, stream);
  }
  const auto r = done(fn, kSuccess, p, stream);
  fake::frees::freed();  // after the call is logged: a waiting test reads the log
  return r;
}

}  // namespace

FAKE_EXPORT hipError_t hipRuntimeGetVersion(int *v) {
  FAKE_ENTER("hipRuntimeGetVersion");
  *v = config().runtime_version;
  return done("hipRuntimeGetVersion", kSuccess);
}

FAKE_EXPORT hipError_t hipGetDeviceCount(int *n) {
  FAKE_ENTER("hipGetDeviceCount");
  *n = config().device_count;
  return done("hipGetDeviceCount", config().device_count > 0 ? kSuccess : kNoDevice);
}

FAKE_EXPORT hipError_t hipGetDevice(int *d) {
  FAKE_ENTER("hipGetDevice");
  *d = t_device;
  return done("hipGetDevice", kSuccess);
}

FAKE_EXPORT hipError_t hipSetDevice(int d) {
  FAKE_ENTER("hipSetDevice");
  if (d < 0 || d >= config().device_count) return done("hipSetDevice", kInvalidDevice);
  t_device = d;
  return done("hipSetDevice", kSuccess);
}

// hipDeviceGet: the device of an ordinal (hipDevice_t is the ordinal, as
// in ROCm); hipDeviceGetUuid: the 16 bytes of the physical GPU behind it
// (fake_devices.h).
FAKE_EXPORT hipError_t hipDeviceGet(int *dev, int ordinal) {
  FAKE_ENTER("hipDeviceGet");
  if (dev == nullptr || ordinal < 0 || ordinal >= config().device_count)
    return done("hipDeviceGet", kInvalidDevice);
  *dev = ordinal;
  return done("hipDeviceGet", kSuccess);
}

FAKE_EXPORT hipError_t hipDeviceGetUuid(uint8_t (*uuid)[16], int dev) {
  FAKE_ENTER("hipDeviceGetUuid");
  if (uuid == nullptr || dev < 0 || dev >= config().device_count)
    return done("hipDeviceGetUuid", uuid == nullptr ? kInvalidValue : kInvalidDevice);
  fake::physical_uuid(config().vis.physical[dev], true, *uuid);
  return done("hipDeviceGetUuid", kSuccess);
}

FAKE_EXPORT hipError_t hipMalloc(void **p, size_t bytes) {
  return alloc_common("hipMalloc", p, bytes, fake::Kind::kDevice, nullptr);
}

FAKE_EXPORT hipError_t hipMallocAsync(void **p, size_t bytes, hipStream_t s) {
  return alloc_common("hipMallocAsync", p, bytes, fake::Kind::kDevice, s);
}

FAKE_EXPORT hipError_t hipHostMalloc(void **p, size_t bytes, unsigned int) {
  return alloc_common("hipHostMalloc", p, bytes, fake::Kind::kPinned, nullptr);
}

FAKE_EXPORT hipError_t hipFree(void *p) { return free_common("hipFree", p, true, nullptr); }

FAKE_EXPORT hipError_t hipFreeAsync(void *p, hipStream_t s) {
  if (hipError_t e = prohibited_on(s)) return done("hipFreeAsync", e, p, s);
  return free_common("hipFreeAsync", p, true, s);
}

FAKE_EXPORT hipError_t hipStreamIsCapturing(hipStream_t s, int *status) {
  FAKE_ENTER("hipStreamIsCapturing", nullptr, s);
  if (hipError_t e = stream_error(s)) return done("hipStreamIsCapturing", e, nullptr, s);
  std::lock_guard<std::mutex> lock(g_streams_mu);
  *status = g_capturing.count(s) == 0 ? 0 : g_invalidated.count(s) != 0 ? 2 : 1;
  // The null stream: hipErrorStreamCaptureImplicit while a blocking stream
  // of the current device captures (null_stream_rules).
  if (s == nullptr && blocking_capture_locked(t_device)) {
    return done("hipStreamIsCapturing", kCaptureImplicit, nullptr, s);
  }
  return done("hipStreamIsCapturing", kSuccess, nullptr, s);
}

FAKE_EXPORT hipError_t hipHostFree(void *p) {
  return free_common("hipHostFree", p, false, nullptr);
}

FAKE_EXPORT hipError_t hipMemcpyAsync(void *dst, const void *src, size_t bytes, int /*kind*/,
                                      hipStream_t s) {
  FAKE_ENTER("hipMemcpyAsync", dst, s, bytes);
  if (hipError_t e = stream_error(s)) return done("hipMemcpyAsync", e, dst, s, bytes, src);
  std::memcpy(dst, src, bytes);
  rec().queue_work(dst, src, t_device, s);  // pending until synchronised
  return done("hipMemcpyAsync", kSuccess, dst, s, bytes, src);
}

// hipMemcpy3DParms and its parts, as ROCm 5 and 6 lay them out.
struct PitchedPtr {
  void *ptr;
  size_t pitch;
  size_t xsize;
  size_t ysize;  // rows per slice
};
struct Extent {
  size_t width;  // bytes, for linear memory
  size_t height;
  size_t depth;
};
struct Pos {
  size_t x, y, z;
};
struct Memcpy3DParms {
  void *src_array;
  Pos src_pos;
  PitchedPtr src_ptr;
  void *dst_array;
  Pos dst_pos;
  PitchedPtr dst_ptr;
  Extent extent;
  int kind;
};

FAKE_EXPORT hipError_t hipMemcpy2DAsync(void *dst, size_t dpitch, const void *src, size_t spitch,
                                        size_t width, size_t height, int /*kind*/, hipStream_t s) {
  FAKE_ENTER("hipMemcpy2DAsync", dst, s, width * height);
  if (spitch < width || dpitch < width) {
    return done("hipMemcpy2DAsync", kInvalidValue, dst, s, width * height, src);
  }
  for (size_t r = 0; r < height; ++r) {
    std::memcpy(static_cast<char *>(dst) + r * dpitch, static_cast<const char *>(src) + r * spitch,
                width);
  }
  rec().queue_work(dst, src, t_device, s);
  return done("hipMemcpy2DAsync", kSuccess, dst, s, width * height, src);
}

FAKE_EXPORT hipError_t hipMemcpy3DAsync(const Memcpy3DParms *p, hipStream_t s) {
  const uint64_t bytes = uint64_t{p->extent.width} * p->extent.height * p->extent.depth;
  FAKE_ENTER("hipMemcpy3DAsync", p->dst_ptr.ptr, s, bytes);
  const PitchedPtr &sp = p->src_ptr, &dp = p->dst_ptr;
  if (p->src_array != nullptr || p->dst_array != nullptr || sp.pitch < p->extent.width ||
      dp.pitch < p->extent.width || sp.ysize < p->extent.height || dp.ysize < p->extent.height) {
    return done("hipMemcpy3DAsync", kInvalidValue, dp.ptr, s, bytes, sp.ptr);
  }
  const char *src = static_cast<const char *>(sp.ptr) + p->src_pos.x +
                    (p->src_pos.z * sp.ysize + p->src_pos.y) * sp.pitch;
  char *dst = static_cast<char *>(dp.ptr) + p->dst_pos.x +
              (p->dst_pos.z * dp.ysize + p->dst_pos.y) * dp.pitch;
  for (size_t z = 0; z < p->extent.depth; ++z) {
    for (size_t r = 0; r < p->extent.height; ++r) {
      std::memcpy(dst + (z * dp.ysize + r) * dp.pitch, src + (z * sp.ysize + r) * sp.pitch,
                  p->extent.width);
    }
  }
  rec().queue_work(dp.ptr, sp.ptr, t_device, s);
  return done("hipMemcpy3DAsync", kSuccess, dp.ptr, s, bytes, sp.ptr);
}

// Legacy IPC: hipIpcGetMemHandle takes the base of a hipMalloc allocation;
// hipIpcOpenMemHandle maps another process's (its own: hipErrorInvalidContext,
// as ROCm answers); hipIpcCloseMemHandle unmaps.
constexpr hipError_t kInvalidContext = 201;
struct HipIpcMemHandle {
  char reserved[64];
};

FAKE_EXPORT hipError_t hipIpcGetMemHandle(HipIpcMemHandle *h, void *p) {
  FAKE_ENTER("hipIpcGetMemHandle", p);
  fake::IpcHandle ih;
  if (h == nullptr || !rec().ipc_handle(p, &ih))
    return done("hipIpcGetMemHandle", kInvalidValue, p);
  std::memcpy(h->reserved, &ih, sizeof ih);
  return done("hipIpcGetMemHandle", kSuccess, p);
}

FAKE_EXPORT hipError_t hipIpcOpenMemHandle(void **out, HipIpcMemHandle h, unsigned int flags) {
  FAKE_ENTER("hipIpcOpenMemHandle", nullptr, nullptr, flags);
  fake::IpcHandle ih;
  std::memcpy(&ih, h.reserved, sizeof ih);
  fake::IpcOpenError why;
  void *p = rec().ipc_open(ih, &why);
  if (p == nullptr) {
    return done("hipIpcOpenMemHandle",
                why == fake::IpcOpenError::kOwnProcess ? kInvalidContext : kInvalidValue, nullptr,
                nullptr, flags);
  }
  *out = p;
  return done("hipIpcOpenMemHandle", kSuccess, p, nullptr, flags);
}

FAKE_EXPORT hipError_t hipIpcCloseMemHandle(void *p) {
  FAKE_ENTER("hipIpcCloseMemHandle", p);
  return done("hipIpcCloseMemHandle", rec().ipc_close(p) ? kSuccess : kInvalidValue, p);
}

FAKE_EXPORT hipError_t hipMemGetAddressRange(void **base, size_t *size, void *p) {
  FAKE_ENTER("hipMemGetAddressRange", p);
  uintptr_t b = 0;
  uint64_t n = 0;
  if (!rec().address_range(p, &b, &n) && !pool_range_hip(p, &b, &n)) {
    return done("hipMemGetAddressRange", kInvalidValue, p);
  }
  if (base != nullptr) *base = reinterpret_cast<void *>(b);
  if (size != nullptr) *size = static_cast<size_t>(n);
  return done("hipMemGetAddressRange", kSuccess, p, nullptr, n);
}

FAKE_EXPORT hipError_t hipDeviceSynchronize(void) {
  fake::capture::counters().context_syncs.fetch_add(1);
  FAKE_ENTER("hipDeviceSynchronize");
  if (hipError_t e = unsafe_during_capture()) return done("hipDeviceSynchronize", e);
  rec().device_synchronized(t_device);
  return done("hipDeviceSynchronize", kSuccess);
}

FAKE_EXPORT hipError_t hipStreamSynchronize(hipStream_t s) {
  fake::capture::counters().stream_syncs.fetch_add(1);
  FAKE_ENTER("hipStreamSynchronize", nullptr, s);
  if (hipError_t e = prohibited_on(s)) return done("hipStreamSynchronize", e, nullptr, s);
  if (hipError_t e = unsafe_during_capture()) return done("hipStreamSynchronize", e, nullptr, s);
  if (hipError_t e = stream_error(s)) return done("hipStreamSynchronize", e, nullptr, s);
  rec().stream_synchronized(s, t_device);
  return done("hipStreamSynchronize", kSuccess, nullptr, s);
}

// Work is done at once, so a live stream is always idle.
FAKE_EXPORT hipError_t hipStreamQuery(hipStream_t s) {
  FAKE_ENTER("hipStreamQuery", nullptr, s);
  if (hipError_t e = prohibited_on(s)) return done("hipStreamQuery", e, nullptr, s);
  return done("hipStreamQuery", stream_error(s), nullptr, s);
}

// hipDeviceReset (HIP API reference, Device Management): the current
// device's state is discarded: the streams, memory, kernels and events made
// on it in this process are deleted. The fake keeps an incarnation per
// device; an event of an earlier one is a deleted handle: any call naming it
// answers hipErrorInvalidHandle (the code the reference lists for a bad
// handle in hipStreamWaitEvent and hipEventSynchronize) and is counted in
// dead_event_uses (ROCm does not validate handles: a use after free). The
// event's memory stays registered (g_events), reachable for the leak
// checker, as the runtime freed it.
constexpr int kMaxHipDevices = 8;
std::atomic<uint64_t> g_generation[kMaxHipDevices];
std::mutex g_events_mu;
std::set<hipEvent_t> &g_events = *new std::set<hipEvent_t>;  // never destroyed
std::atomic<int> g_dead_event_uses{0};

hipEvent_t new_event() {
  const int d = t_device >= 0 && t_device < kMaxHipDevices ? t_device : 0;
  hipEvent_t ev = new Event{nullptr, d, g_generation[d].load()};
  std::lock_guard<std::mutex> lock(g_events_mu);
  g_events.insert(ev);
  return ev;
}

hipError_t event_error(hipEvent_t ev) {
  if (ev == nullptr) return kInvalidHandle;
  if (ev->generation == g_generation[ev->device].load()) return kSuccess;
  g_dead_event_uses.fetch_add(1);
  return kInvalidHandle;
}

void reset_device(int d) {
  if (d < 0 || d >= kMaxHipDevices) return;
  g_generation[d].fetch_add(1);
  rec().drop_device(d);
  std::lock_guard<std::mutex> lock(g_events_mu);
  for (hipEvent_t ev : g_events) {
    if (ev->device == d) fake::ipc_event::Table::get().destroyed(ev);
  }
}

FAKE_EXPORT hipError_t hipDeviceReset(void) {
  FAKE_ENTER("hipDeviceReset");
  reset_device(t_device);
  return done("hipDeviceReset", kSuccess);
}

FAKE_EXPORT hipError_t hipEventCreateWithFlags(hipEvent_t *ev, unsigned flags) {
  FAKE_ENTER("hipEventCreateWithFlags");
  if (!fake::ipc_event::valid_flags(flags)) return done("hipEventCreateWithFlags", kInvalidValue);
  *ev = new_event();
  fake::ipc_event::Table::get().created(*ev, flags);
  return done("hipEventCreateWithFlags", kSuccess, *ev);
}

FAKE_EXPORT hipError_t hipEventRecord(hipEvent_t ev, hipStream_t s) {
  FAKE_ENTER("hipEventRecord", ev, s);
  if (hipError_t e = event_error(ev)) return done("hipEventRecord", e, ev, s);
  if (hipError_t e = stream_error(s)) return done("hipEventRecord", e, ev, s);
  ev->recorded_on = s;
  return done("hipEventRecord", kSuccess, ev, s);
}

FAKE_EXPORT hipError_t hipStreamWaitEvent(hipStream_t s, hipEvent_t ev, unsigned int) {
  FAKE_ENTER("hipStreamWaitEvent", ev, s);
  if (hipError_t e = event_error(ev)) return done("hipStreamWaitEvent", e, ev, s);
  if (hipError_t e = stream_error(s)) return done("hipStreamWaitEvent", e, ev, s);
  return done("hipStreamWaitEvent", kSuccess, ev, s, 0, ev->recorded_on);
}

// hipEventSynchronize: work is done at once, so it returns at once; a host
// wait on one event (counted), which touches no stream and no capture.
FAKE_EXPORT hipError_t hipEventSynchronize(hipEvent_t ev) {
  FAKE_ENTER("hipEventSynchronize", ev);
  if (hipError_t e = event_error(ev)) return done("hipEventSynchronize", e, ev);
  g_event_syncs.fetch_add(1);
  return done("hipEventSynchronize", kSuccess, ev);
}

FAKE_EXPORT hipError_t hipEventDestroy(hipEvent_t ev) {
  FAKE_ENTER("hipEventDestroy", ev);
  if (hipError_t e = event_error(ev)) return done("hipEventDestroy", e, ev);
  fake::ipc_event::Table::get().destroyed(ev);
  {
    std::lock_guard<std::mutex> lock(g_events_mu);
    g_events.erase(ev);
  }
  delete ev;
  return done("hipEventDestroy", kSuccess, ev);
}

// IPC events (fake_ipc_event.h): hipIpcGetEventHandle of an event made
// with hipEventInterprocess; hipIpcOpenEventHandle of another process's
// (its own: hipErrorInvalidContext, as the HIP reference documents), an
// event of this process that hipEventDestroy frees. `bytes` logs the
// event's number in its creating process.
struct HipIpcEventHandle {
  char reserved[64];
};

FAKE_EXPORT hipError_t hipIpcGetEventHandle(HipIpcEventHandle *h, hipEvent_t ev) {
  FAKE_ENTER("hipIpcGetEventHandle", ev);
  if (hipError_t e = event_error(ev)) return done("hipIpcGetEventHandle", e, ev);
  fake::ipc_event::Handle eh;
  if (h == nullptr || !fake::ipc_event::Table::get().handle(ev, &eh)) {
    return done("hipIpcGetEventHandle", kInvalidValue, ev);
  }
  std::memcpy(h->reserved, &eh, sizeof eh);
  return done("hipIpcGetEventHandle", kSuccess, ev, nullptr, eh.id);
}

FAKE_EXPORT hipError_t hipIpcOpenEventHandle(hipEvent_t *ev, HipIpcEventHandle h) {
  FAKE_ENTER("hipIpcOpenEventHandle");
  fake::ipc_event::Handle eh;
  std::memcpy(&eh, h.reserved, sizeof eh);
  const fake::ipc_event::OpenError why = fake::ipc_event::Table::get().check_open(eh);
  if (ev == nullptr || why != fake::ipc_event::OpenError::kNone) {
    return done("hipIpcOpenEventHandle",
                why == fake::ipc_event::OpenError::kOwnProcess ? kInvalidContext : kInvalidValue,
                nullptr, nullptr, eh.id);
  }
  *ev = new_event();  // of the current device: a reset deletes it too
  fake::ipc_event::Table::get().created(*ev, fake::ipc_event::kDisableTiming);
  return done("hipIpcOpenEventHandle", kSuccess, *ev, nullptr, eh.id);
}

FAKE_EXPORT hipError_t hipPointerGetAttributes(PointerAttributes *a, const void *p) {
  FAKE_ENTER("hipPointerGetAttributes", p);
  const bool rocm6 = config().runtime_version >= 60000000;
  fake::Allocation found{};
  if (!rec().find(p, &found)) {
    if (!rocm6) return done("hipPointerGetAttributes", kInvalidValue, p);  // ROCm 5
    *a = PointerAttributes{0 /*Unregistered*/, -1, nullptr, const_cast<void *>(p), 0, 0};
    return done("hipPointerGetAttributes", kSuccess, p);
  }
  int type;
  switch (found.kind) {
    case fake::Kind::kPinned: type = rocm6 ? 1 : 0; break;  // Host
    case fake::Kind::kDevice: type = rocm6 ? 2 : 1; break;  // Device
    default: type = rocm6 ? 3 : 1; break;                   // Managed / Device
  }
  *a = PointerAttributes{type,
                         found.device < 0 ? 0 : found.device,
                         const_cast<void *>(p),
                         found.kind == fake::Kind::kDevice ? nullptr : const_cast<void *>(p),
                         found.kind == fake::Kind::kManaged,
                         0};
  return done("hipPointerGetAttributes", kSuccess, p);
}

#include "fake_hip_pool.h"  // NOLINT: the pool entry points, over the helpers above

FAKE_DEFINE_CONTROL_API(fake_hip_)

FAKE_EXPORT int fake_hip_current_device(void) { return t_device; }
FAKE_EXPORT void fake_hip_set_current_device(int d) { t_device = d; }

FAKE_EXPORT void *fake_hip_stream_create(int device) {
  // Work on the stream is not tied to the caller's current device here;
  // the device names whose null stream its capture blocks.
  std::lock_guard<std::mutex> lock(g_streams_mu);
  void *s;
  if (!g_free_handles.empty()) {
    s = g_free_handles.back();  // a destroyed stream's address, handed out again
    g_free_handles.pop_back();
  } else {
    s = new char;
  }
  g_streams[s] = kSuccess;
  g_stream_device[s] = device;
  return s;
}
FAKE_EXPORT void fake_hip_stream_destroy(void *s, int error) {
  std::lock_guard<std::mutex> lock(g_streams_mu);
  auto it = g_streams.find(s);
  if (it != g_streams.end() && it->second == kSuccess) {
    it->second = error != 0 ? error : kContextIsDestroyed;
    g_capturing.erase(s);
    g_invalidated.erase(s);
    g_free_handles.push_back(s);
  }
}
FAKE_EXPORT hipError_t hipThreadExchangeStreamCaptureMode(int *mode) {
  FAKE_ENTER("hipThreadExchangeStreamCaptureMode");
  const int old = t_capture_mode;
  t_capture_mode = *mode;
  *mode = old;
  return done("hipThreadExchangeStreamCaptureMode", kSuccess);
}
FAKE_EXPORT void fake_hip_stream_begin_capture_mode(void *s, int mode) {
  std::lock_guard<std::mutex> lock(g_streams_mu);
  g_capturing.insert(s);
  g_invalidated.erase(s);
  g_capture_owner[s] = CaptureOwner{mode, static_cast<uint64_t>(pthread_self())};
}
FAKE_EXPORT void fake_hip_stream_begin_capture(void *s) {
  fake_hip_stream_begin_capture_mode(s, fake::capture::kRelaxed);
}
FAKE_CAPTURE_EXPORTS(fake_hip_)
FAKE_FREES_EXPORTS(fake_hip_)
FAKE_IPC_EVENT_EXPORTS(fake_hip_)
FAKE_EXPORT int fake_hip_stream_end_capture(void *s) {
  std::lock_guard<std::mutex> lock(g_streams_mu);
  const int valid = g_capturing.count(s) != 0 && g_invalidated.count(s) == 0 ? 1 : 0;
  g_capturing.erase(s);
  g_invalidated.erase(s);
  return valid;
}
FAKE_EXPORT int fake_hip_prohibited_calls(void) { return g_prohibited.load(); }
FAKE_EXPORT int fake_hip_event_synchronizations(void) { return g_event_syncs.load(); }
FAKE_EXPORT int fake_hip_dead_stream_uses(void) { return g_dead_uses.load(); }
FAKE_EXPORT int fake_hip_dead_event_uses(void) { return g_dead_event_uses.load(); }
FAKE_EXPORT void fake_hip_device_reset(int d) { reset_device(d); }
