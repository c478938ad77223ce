// SPDX-License-Identifier: Apache-2.0
// Loading the HIP runtime: dlopen once, trying the sonames of ROCm 7, 6 and
// 5 and then the plain name (or HURRAY_HIP_LIBRARY_PATH alone), then dlsym
// of each entry point (docs/impl/gpu.md §1).
#if defined(HURRAY_WITH_HIP)

#include "device/hip/runtime.h"

#include <dlfcn.h>

#include <atomic>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>

#include "common/diagnostics.h"
#include "common/error.h"
#include "device/loader_once.h"

namespace hurray::detail {
namespace {

constexpr const char *kCandidates[] = {"libamdhip64.so.7", "libamdhip64.so.6", "libamdhip64.so.5",
                                       "libamdhip64.so"};

// Written once inside the load; read-only afterwards.
HipRuntime g_runtime;
char g_error[480];
char g_path[256];
LoaderOnce g_once;
std::atomic<bool> g_torn_down{false};

// As for CUDA (cuda_driver.cc): a child forked once a load has begun is
// refused the runtime, unless the parent's load failed.
void on_fork_child() { g_once.on_fork_child(); }

const bool g_fork_handler_registered = (register_fork_child_handler(&on_fork_child), true);

// ROCm destroys its device objects in a static destructor of libamdhip64;
// hipFree after that is a use-after-free, not an error code. Handlers run in
// the reverse order of registration, so this one, registered right after
// the library was opened (after its static objects were constructed and
// their destructors registered), runs before them.
void on_exit() { g_torn_down.store(true, std::memory_order_relaxed); }

void set_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void set_error(const char *fmt, ...) {
  va_list args;
  va_start(args, fmt);
  std::vsnprintf(g_error, sizeof g_error, fmt, args);
  va_end(args);
}

// Looks `symbol` up into *fn; false with g_error set when it is required.
template <typename Fn>
bool get(void *lib, const char *symbol, Fn *fn, bool required = true) {
  *fn = reinterpret_cast<Fn>(dlsym(lib, symbol));
  if (*fn != nullptr || !required) return true;
  set_error("HIP is unavailable: loaded %s, but it has no %s", g_path, symbol);
  return false;
}

bool resolve_all(void *lib, HipRuntime &r) {
  return get(lib, "hipRuntimeGetVersion", &r.runtime_get_version) &&
         get(lib, "hipGetDeviceCount", &r.get_device_count) &&
         get(lib, "hipGetDevice", &r.get_device) && get(lib, "hipSetDevice", &r.set_device) &&
         get(lib, "hipMalloc", &r.device_malloc) && get(lib, "hipFree", &r.device_free) &&
         get(lib, "hipHostMalloc", &r.host_malloc) && get(lib, "hipHostFree", &r.host_free) &&
         get(lib, "hipMallocAsync", &r.malloc_async, false) &&
         get(lib, "hipFreeAsync", &r.free_async, false) &&
         get(lib, "hipMemcpyAsync", &r.memcpy_async) &&
         get(lib, "hipStreamSynchronize", &r.stream_synchronize) &&
         get(lib, "hipEventCreateWithFlags", &r.event_create_with_flags) &&
         get(lib, "hipEventRecord", &r.event_record) &&
         get(lib, "hipStreamWaitEvent", &r.stream_wait_event) &&
         get(lib, "hipEventDestroy", &r.event_destroy) &&
         get(lib, "hipPointerGetAttributes", &r.pointer_get_attributes) &&
         get(lib, "hipMemcpy2DAsync", &r.memcpy_2d_async, false) &&
         get(lib, "hipMemcpy3DAsync", &r.memcpy_3d_async, false) &&
         get(lib, "hipDeviceSynchronize", &r.device_synchronize) &&
         get(lib, "hipStreamIsCapturing", &r.stream_is_capturing, false) &&
         get(lib, "hipThreadExchangeStreamCaptureMode", &r.exchange_capture_mode, false) &&
         get(lib, "hipIpcGetMemHandle", &r.ipc_get_mem_handle, false) &&
         get(lib, "hipIpcOpenMemHandle", &r.ipc_open_mem_handle, false) &&
         get(lib, "hipIpcCloseMemHandle", &r.ipc_close_mem_handle, false) &&
         get(lib, "hipMemGetAddressRange", &r.mem_get_address_range, false) &&
         get(lib, "hipDeviceGet", &r.device_get, false) &&
         get(lib, "hipDeviceGetUuid", &r.device_get_uuid, false) &&
         get(lib, "hipIpcGetEventHandle", &r.ipc_get_event_handle, false) &&
         get(lib, "hipIpcOpenEventHandle", &r.ipc_open_event_handle, false) &&
         get(lib, "hipEventSynchronize", &r.event_synchronize, false) &&
         get(lib, "hipMemPoolCreate", &r.mem_pool_create, false) &&
         get(lib, "hipMemPoolDestroy", &r.mem_pool_destroy, false) &&
         get(lib, "hipMallocFromPoolAsync", &r.malloc_from_pool_async, false) &&
         get(lib, "hipMemPoolExportToShareableHandle", &r.mem_pool_export_to_shareable_handle,
             false) &&
         get(lib, "hipMemPoolImportFromShareableHandle", &r.mem_pool_import_from_shareable_handle,
             false) &&
         get(lib, "hipMemPoolExportPointer", &r.mem_pool_export_pointer, false) &&
         get(lib, "hipMemPoolImportPointer", &r.mem_pool_import_pointer, false) &&
         get(lib, "hipPointerGetAttribute", &r.pointer_get_attribute, false);
}

void *open_library() {
  const char *env = std::getenv("HURRAY_HIP_LIBRARY_PATH");
  if (env != nullptr && env[0] != '\0') {
    std::snprintf(g_path, sizeof g_path, "%s", env);
    void *lib = dlopen(env, RTLD_NOW | RTLD_LOCAL);
    if (lib == nullptr) {
      const char *why = dlerror();
      set_error(
          "HIP is unavailable: looked for %s (from HURRAY_HIP_LIBRARY_PATH) and dlopen "
          "failed: %s",
          env, why != nullptr ? why : "unknown error");
    }
    return lib;
  }
  const char *why = nullptr;
  for (const char *name : kCandidates) {
    void *lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (lib != nullptr) {
      std::snprintf(g_path, sizeof g_path, "%s", name);
      return lib;
    }
    why = dlerror();
  }
  set_error(
      "HIP is unavailable: looked for libamdhip64.so.7, .so.6, .so.5 and libamdhip64.so "
      "(the ROCm runtime; HURRAY_HIP_LIBRARY_PATH chooses another file) and none could be "
      "loaded; the last dlopen error: %s",
      why != nullptr ? why : "unknown error");
  return nullptr;
}

bool load() {
  void *lib = open_library();
  if (lib == nullptr) return false;
  // Can only fail with ENOMEM; releases at exit would then reach the
  // destroyed runtime, as in every program without this protection.
  (void)std::atexit(&on_exit);
  HipRuntime r{};
  r.path = g_path;
  if (!resolve_all(lib, r)) return false;
  hipError_t e = r.runtime_get_version(&r.version);
  if (e != hipSuccess) {
    set_error("HIP is unavailable: loaded %s, but hipRuntimeGetVersion failed with %s (%d)", g_path,
              hip_error_name(e), static_cast<int>(e));
    return false;
  }
  if (r.version < kHipMinRuntimeVersion) {
    set_error("HIP is unavailable: %s is runtime version %d; libhurray needs ROCm 5 or newer",
              g_path, r.version);
    return false;
  }
  r.abi6 = r.version >= 60000000;
  e = r.get_device_count(&r.device_count);
  if (e != hipSuccess || r.device_count <= 0) {
    set_error("HIP is unavailable: loaded %s (runtime %d), but it sees no device (%s%s)", g_path,
              r.version, e != hipSuccess ? "hipGetDeviceCount failed with " : "",
              e != hipSuccess ? hip_error_name(e) : "hipGetDeviceCount returned 0");
    return false;
  }
  g_runtime = r;
  return true;
}

}  // namespace

const HipRuntime *hip_runtime() {
  (void)g_fork_handler_registered;
  return g_once.ready(&load, g_error,
                      "HIP is unavailable in this process: it is a child forked after the "
                      "parent had initialised the runtime (or begun to)")
             ? &g_runtime
             : nullptr;
}

const HipRuntime *loaded_hip_runtime() { return g_once.loaded() ? &g_runtime : nullptr; }

bool hip_forked_child() { return g_once.forked(); }

bool hip_torn_down() { return g_torn_down.load(std::memory_order_relaxed); }

void mark_hip_torn_down() { g_torn_down.store(true, std::memory_order_relaxed); }

const char *hip_error_name(hipError_t e) {
  switch (static_cast<int>(e)) {
    case 0: return "hipSuccess";
    case 1: return "hipErrorInvalidValue";
    case 2: return "hipErrorOutOfMemory";
    case 3: return "hipErrorNotInitialized";
    case 4: return "hipErrorDeinitialized";
    case 100: return "hipErrorNoDevice";
    case 101: return "hipErrorInvalidDevice";
    case 201: return "hipErrorInvalidContext";
    case 400: return "hipErrorInvalidHandle";
    case 700: return "hipErrorIllegalAddress";
    case 709: return "hipErrorContextIsDestroyed";
    case 801: return "hipErrorNotSupported";
    case 999: return "hipErrorUnknown";
    default: return "hipError_t";
  }
}

}  // namespace hurray::detail

#endif  // HURRAY_WITH_HIP
