// SPDX-License-Identifier: Apache-2.0
// Loading the CUDA driver: dlopen once, every entry point through
// cuGetProcAddress at the ABI version its PFN_ type names, never newer than
// the driver reports (docs/impl/gpu.md §1).
#if defined(HURRAY_WITH_CUDA)

#include "device/cuda/driver.h"

#include <dlfcn.h>

#include <cstdarg>
#include <cstdio>
#include <cstdlib>

#include "common/diagnostics.h"
#include "common/error.h"
#include "device/loader_once.h"

namespace hurray::detail {
namespace {

using GetProcV2 = PFN_cuGetProcAddress_v12000;
using GetProcV1 = PFN_cuGetProcAddress_v11030;

// Written once inside the load; read-only afterwards.
CudaDriver g_driver;
char g_error[480];
LoaderOnce g_once;

void on_fork_child() { g_once.on_fork_child(); }

// Registered when libhurray is loaded, so that it is in place before any
// load can begin.
const bool g_fork_handler_registered = (register_fork_child_handler(&on_fork_child), true);

void set_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void set_error(const char *fmt, ...) {
  va_list args;
  va_start(args, fmt);
  std::vsnprintf(g_error, sizeof g_error, fmt, args);
  va_end(args);
}

// A hint for the codes that mean "this is not a working driver".
const char *hint_for(CUresult r) {
  switch (r) {
    case CUDA_ERROR_STUB_LIBRARY:
      return ": this is the CUDA toolkit's link-time stub, not the NVIDIA driver; install the "
             "driver or point HURRAY_CUDA_DRIVER_PATH at its libcuda.so.1";
    case CUDA_ERROR_NO_DEVICE:
      return ": no CUDA device is visible (check the driver and CUDA_VISIBLE_DEVICES)";
    case CUDA_ERROR_SYSTEM_DRIVER_MISMATCH:
      return ": libcuda and the loaded kernel driver are of different versions";
    default: return "";
  }
}

class Loader {
 public:
  Loader(const char *path, GetProcV2 v2, GetProcV1 v1) : path_(path), v2_(v2), v1_(v1) {}

  // Resolves `symbol` at ABI `version` into *fn; false with g_error set.
  template <typename Fn>
  bool get(const char *symbol, int version, Fn *fn) {
    if (version > driver_version_) {
      set_error(
          "CUDA is unavailable: %s reports driver version %d, older than the %d that %s "
          "needs",
          path_, driver_version_, version, symbol);
      return false;
    }
    void *p = nullptr;
    CUresult r;
    CUdriverProcAddressQueryResult found = CU_GET_PROC_ADDRESS_SUCCESS;
    // Legacy-stream variants: a NULL stream means the legacy default stream.
    if (v2_ != nullptr) {
      r = v2_(symbol, &p, version, CU_GET_PROC_ADDRESS_LEGACY_STREAM, &found);
    } else {
      r = v1_(symbol, &p, version, CU_GET_PROC_ADDRESS_LEGACY_STREAM);
    }
    if (r != CUDA_SUCCESS || p == nullptr || found != CU_GET_PROC_ADDRESS_SUCCESS) {
      set_error(
          "CUDA is unavailable: loaded %s, but cuGetProcAddress(\"%s\", %d) failed with %s "
          "(%d)%s",
          path_, symbol, version, cuda_error_name(r), static_cast<int>(r), hint_for(r));
      return false;
    }
    *fn = reinterpret_cast<Fn>(p);
    return true;
  }

  void set_driver_version(int v) { driver_version_ = v; }

 private:
  const char *path_;
  GetProcV2 v2_;
  GetProcV1 v1_;
  int driver_version_ = kCudaMinDriverVersion;  // until the driver says
};

bool resolve_all(Loader &l, CudaDriver &d) {
  return l.get("cuInit", 2000, &d.init) && l.get("cuDeviceGetCount", 2000, &d.device_get_count) &&
         l.get("cuDeviceGet", 2000, &d.device_get) &&
         l.get("cuDevicePrimaryCtxRetain", 7000, &d.primary_ctx_retain) &&
         l.get("cuCtxGetCurrent", 4000, &d.ctx_get_current) &&
         l.get("cuCtxPushCurrent", 4000, &d.ctx_push_current) &&
         l.get("cuCtxPopCurrent", 4000, &d.ctx_pop_current) &&
         l.get("cuMemAlloc", 3020, &d.mem_alloc) && l.get("cuMemFree", 3020, &d.mem_free) &&
         l.get("cuMemHostAlloc", 2020, &d.mem_host_alloc) &&
         l.get("cuMemFreeHost", 2000, &d.mem_free_host) &&
         l.get("cuMemAllocManaged", 6000, &d.mem_alloc_managed) &&
         l.get("cuMemAllocAsync", 11020, &d.mem_alloc_async) &&
         l.get("cuMemFreeAsync", 11020, &d.mem_free_async) &&
         l.get("cuMemcpyAsync", 4000, &d.memcpy_async) &&
         l.get("cuStreamSynchronize", 2000, &d.stream_synchronize) &&
         l.get("cuEventCreate", 2000, &d.event_create) &&
         l.get("cuEventRecord", 2000, &d.event_record) &&
         l.get("cuStreamWaitEvent", 3020, &d.stream_wait_event) &&
         l.get("cuEventDestroy", 4000, &d.event_destroy) &&
         l.get("cuPointerGetAttributes", 7000, &d.pointer_get_attributes) &&
         l.get("cuMemcpy2DAsync", 3020, &d.memcpy_2d_async) &&
         l.get("cuMemcpy3DAsync", 3020, &d.memcpy_3d_async) &&
         l.get("cuModuleLoadData", 2000, &d.module_load_data) &&
         l.get("cuModuleGetFunction", 2000, &d.module_get_function) &&
         l.get("cuLaunchKernel", 4000, &d.launch_kernel) &&
         l.get("cuDevicePrimaryCtxGetState", 7000, &d.primary_ctx_get_state) &&
         l.get("cuThreadExchangeStreamCaptureMode", 10010, &d.exchange_capture_mode) &&
         l.get("cuStreamGetCtx", 9020, &d.stream_get_ctx) &&
         l.get("cuCtxGetDevice", 2000, &d.ctx_get_device) &&
         l.get("cuStreamIsCapturing", 10000, &d.stream_is_capturing) &&
         l.get("cuStreamGetFlags", 5050, &d.stream_get_flags) &&
         l.get("cuCtxSynchronize", 2000, &d.ctx_synchronize);
}

// The legacy IPC entry points, each optional (NULL when missing): a driver
// without them still serves everything else.
void resolve_ipc(Loader &l, CudaDriver &d) {
  if (!l.get("cuIpcGetMemHandle", 4010, &d.ipc_get_mem_handle)) d.ipc_get_mem_handle = nullptr;
  if (!l.get("cuIpcOpenMemHandle", 11000, &d.ipc_open_mem_handle)) d.ipc_open_mem_handle = nullptr;
  if (!l.get("cuIpcCloseMemHandle", 4010, &d.ipc_close_mem_handle))
    d.ipc_close_mem_handle = nullptr;
  if (!l.get("cuMemGetAddressRange", 3020, &d.mem_get_address_range)) {
    d.mem_get_address_range = nullptr;
  }
  // The device's UUID, which names it across processes (ipc.md §6.1):
  // the _v2 form (MIG-aware) where the driver has it.
  if (!l.get("cuDeviceGetUuid", 11040, &d.device_get_uuid) &&
      !l.get("cuDeviceGetUuid", 9020, &d.device_get_uuid)) {
    d.device_get_uuid = nullptr;
  }
  if (!l.get("cuIpcGetEventHandle", 4010, &d.ipc_get_event_handle)) {
    d.ipc_get_event_handle = nullptr;
  }
  if (!l.get("cuIpcOpenEventHandle", 4010, &d.ipc_open_event_handle)) {
    d.ipc_open_event_handle = nullptr;
  }
  if (!l.get("cuEventSynchronize", 2000, &d.event_synchronize)) d.event_synchronize = nullptr;
  g_error[0] = '\0';  // a missing optional entry point is no load error
}

// The VMM entry points kind-2 IPC uses, each optional as above.
template <typename Fn>
void optional(Loader &l, const char *symbol, int version, Fn *fn) {
  if (!l.get(symbol, version, fn)) *fn = nullptr;
}
void resolve_vmm(Loader &l, CudaDriver &d) {
  optional(l, "cuMemRetainAllocationHandle", 11000, &d.mem_retain_allocation_handle);
  optional(l, "cuMemGetAllocationPropertiesFromHandle", 10020, &d.mem_get_allocation_properties);
  optional(l, "cuMemGetAllocationGranularity", 10020, &d.mem_get_allocation_granularity);
  optional(l, "cuMemExportToShareableHandle", 10020, &d.mem_export_to_shareable_handle);
  optional(l, "cuMemImportFromShareableHandle", 10020, &d.mem_import_from_shareable_handle);
  optional(l, "cuMemAddressReserve", 10020, &d.mem_address_reserve);
  optional(l, "cuMemAddressFree", 10020, &d.mem_address_free);
  optional(l, "cuMemMap", 10020, &d.mem_map);
  optional(l, "cuMemUnmap", 10020, &d.mem_unmap);
  optional(l, "cuMemSetAccess", 10020, &d.mem_set_access);
  optional(l, "cuMemRelease", 10020, &d.mem_release);
  g_error[0] = '\0';
}

// The memory-pool entry points of pool IPC (device/cuda/pool_ipc.cc), each
// optional as above.
void resolve_pool(Loader &l, CudaDriver &d) {
  optional(l, "cuPointerGetAttribute", 4000, &d.pointer_get_attribute);
  optional(l, "cuMemPoolCreate", 11020, &d.mem_pool_create);
  optional(l, "cuMemPoolDestroy", 11020, &d.mem_pool_destroy);
  optional(l, "cuMemAllocFromPoolAsync", 11020, &d.mem_alloc_from_pool_async);
  optional(l, "cuMemPoolExportToShareableHandle", 11020, &d.mem_pool_export_to_shareable_handle);
  optional(l, "cuMemPoolImportFromShareableHandle", 11020,
           &d.mem_pool_import_from_shareable_handle);
  optional(l, "cuMemPoolExportPointer", 11020, &d.mem_pool_export_pointer);
  optional(l, "cuMemPoolImportPointer", 11020, &d.mem_pool_import_pointer);
  g_error[0] = '\0';
}

bool load() {
  const char *env = std::getenv("HURRAY_CUDA_DRIVER_PATH");
  const bool overridden = env != nullptr && env[0] != '\0';
  const char *path = overridden ? env : "libcuda.so.1";
  void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    const char *why = dlerror();
    set_error("CUDA is unavailable: looked for %s (%s) and dlopen failed: %s", path,
              overridden ? "from HURRAY_CUDA_DRIVER_PATH" : "the NVIDIA driver library",
              why != nullptr ? why : "unknown error");
    return false;
  }
  CudaDriver d{};
  auto v2 = reinterpret_cast<GetProcV2>(dlsym(lib, "cuGetProcAddress_v2"));
  auto v1 = v2 != nullptr ? nullptr : reinterpret_cast<GetProcV1>(dlsym(lib, "cuGetProcAddress"));
  if (v2 == nullptr && v1 == nullptr) {
    // A library without cuInit is no CUDA driver at all (a wrong
    // HURRAY_CUDA_DRIVER_PATH); one with it but no cuGetProcAddress is old.
    if (dlsym(lib, "cuInit") == nullptr) {
      set_error(
          "CUDA is unavailable: loaded %s (%s), but it is not a CUDA driver library (it "
          "has neither cuInit nor cuGetProcAddress)",
          path, overridden ? "from HURRAY_CUDA_DRIVER_PATH" : "the NVIDIA driver library");
    } else {
      set_error(
          "CUDA is unavailable: loaded %s, but it has no cuGetProcAddress: the driver is "
          "older than CUDA 11.3, which libhurray needs",
          path);
    }
    dlclose(lib);
    return false;
  }
  d.proc_address_v2 = v2 != nullptr;
  Loader l(path, v2, v1);
  if (!l.get("cuDriverGetVersion", 2020, &d.driver_get_version)) return false;
  CUresult r = d.driver_get_version(&d.version);
  if (r != CUDA_SUCCESS) {
    set_error("CUDA is unavailable: loaded %s, but cuDriverGetVersion failed with %s (%d)%s", path,
              cuda_error_name(r), static_cast<int>(r), hint_for(r));
    return false;
  }
  if (d.version < kCudaMinDriverVersion) {
    set_error("CUDA is unavailable: %s is driver version %d.%d; libhurray needs 11.3 or newer",
              path, d.version / 1000, d.version % 1000 / 10);
    return false;
  }
  l.set_driver_version(d.version);
  if (!resolve_all(l, d)) return false;
  resolve_ipc(l, d);
  resolve_vmm(l, d);
  resolve_pool(l, d);
  // Optional (driver 12.0+): without it, d.ctx_get_id stays NULL. A failed
  // lookup here does not fail the load; its message is never shown.
  if (d.version >= 12000) (void)l.get("cuCtxGetId", 12000, &d.ctx_get_id);
  r = d.init(0);
  if (r != CUDA_SUCCESS) {
    set_error("CUDA is unavailable: loaded %s (driver %d), but cuInit(0) failed with %s (%d)%s",
              path, d.version, cuda_error_name(r), static_cast<int>(r), hint_for(r));
    return false;
  }
  r = d.device_get_count(&d.device_count);
  if (r != CUDA_SUCCESS || d.device_count <= 0) {
    set_error("CUDA is unavailable: loaded %s (driver %d), but it sees no device (%s)", path,
              d.version, r != CUDA_SUCCESS ? cuda_error_name(r) : "cuDeviceGetCount returned 0");
    return false;
  }
  // Zeroed storage is a valid array of null atomics; never freed (releases
  // may run during process exit).
  d.primary = static_cast<PrimarySlot *>(
      std::calloc(static_cast<size_t>(d.device_count), sizeof(PrimarySlot)));
  if (d.primary == nullptr) {
    set_error("CUDA is unavailable: allocating %d context slots failed", d.device_count);
    return false;
  }
  g_driver = d;
  return true;
}

}  // namespace

const CudaDriver *cuda_driver() {
  (void)g_fork_handler_registered;
  return g_once.ready(&load, g_error,
                      "CUDA is unavailable in this process: it is a child forked after the "
                      "parent had initialised the driver (or begun to), which CUDA does not "
                      "support")
             ? &g_driver
             : nullptr;
}

const CudaDriver *loaded_cuda_driver() { return g_once.loaded() ? &g_driver : nullptr; }

bool cuda_forked_child() { return g_once.forked(); }

// Every CUresult of CUDA 13.0's cuda.h, by number rather than by enumerator,
// so that older toolkits' headers (which lack some of them) still compile.
const char *cuda_error_name(CUresult r) {
  switch (static_cast<int>(r)) {
    case 0: return "CUDA_SUCCESS";
    case 1: return "CUDA_ERROR_INVALID_VALUE";
    case 2: return "CUDA_ERROR_OUT_OF_MEMORY";
    case 3: return "CUDA_ERROR_NOT_INITIALIZED";
    case 4: return "CUDA_ERROR_DEINITIALIZED";
    case 5: return "CUDA_ERROR_PROFILER_DISABLED";
    case 6: return "CUDA_ERROR_PROFILER_NOT_INITIALIZED";
    case 7: return "CUDA_ERROR_PROFILER_ALREADY_STARTED";
    case 8: return "CUDA_ERROR_PROFILER_ALREADY_STOPPED";
    case 34: return "CUDA_ERROR_STUB_LIBRARY";
    case 36: return "CUDA_ERROR_CALL_REQUIRES_NEWER_DRIVER";
    case 46: return "CUDA_ERROR_DEVICE_UNAVAILABLE";
    case 100: return "CUDA_ERROR_NO_DEVICE";
    case 101: return "CUDA_ERROR_INVALID_DEVICE";
    case 102: return "CUDA_ERROR_DEVICE_NOT_LICENSED";
    case 200: return "CUDA_ERROR_INVALID_IMAGE";
    case 201: return "CUDA_ERROR_INVALID_CONTEXT";
    case 202: return "CUDA_ERROR_CONTEXT_ALREADY_CURRENT";
    case 205: return "CUDA_ERROR_MAP_FAILED";
    case 206: return "CUDA_ERROR_UNMAP_FAILED";
    case 207: return "CUDA_ERROR_ARRAY_IS_MAPPED";
    case 208: return "CUDA_ERROR_ALREADY_MAPPED";
    case 209: return "CUDA_ERROR_NO_BINARY_FOR_GPU";
    case 210: return "CUDA_ERROR_ALREADY_ACQUIRED";
    case 211: return "CUDA_ERROR_NOT_MAPPED";
    case 212: return "CUDA_ERROR_NOT_MAPPED_AS_ARRAY";
    case 213: return "CUDA_ERROR_NOT_MAPPED_AS_POINTER";
    case 214: return "CUDA_ERROR_ECC_UNCORRECTABLE";
    case 215: return "CUDA_ERROR_UNSUPPORTED_LIMIT";
    case 216: return "CUDA_ERROR_CONTEXT_ALREADY_IN_USE";
    case 217: return "CUDA_ERROR_PEER_ACCESS_UNSUPPORTED";
    case 218: return "CUDA_ERROR_INVALID_PTX";
    case 219: return "CUDA_ERROR_INVALID_GRAPHICS_CONTEXT";
    case 220: return "CUDA_ERROR_NVLINK_UNCORRECTABLE";
    case 221: return "CUDA_ERROR_JIT_COMPILER_NOT_FOUND";
    case 222: return "CUDA_ERROR_UNSUPPORTED_PTX_VERSION";
    case 223: return "CUDA_ERROR_JIT_COMPILATION_DISABLED";
    case 224: return "CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY";
    case 225: return "CUDA_ERROR_UNSUPPORTED_DEVSIDE_SYNC";
    case 226: return "CUDA_ERROR_CONTAINED";
    case 300: return "CUDA_ERROR_INVALID_SOURCE";
    case 301: return "CUDA_ERROR_FILE_NOT_FOUND";
    case 302: return "CUDA_ERROR_SHARED_OBJECT_SYMBOL_NOT_FOUND";
    case 303: return "CUDA_ERROR_SHARED_OBJECT_INIT_FAILED";
    case 304: return "CUDA_ERROR_OPERATING_SYSTEM";
    case 400: return "CUDA_ERROR_INVALID_HANDLE";
    case 401: return "CUDA_ERROR_ILLEGAL_STATE";
    case 402: return "CUDA_ERROR_LOSSY_QUERY";
    case 500: return "CUDA_ERROR_NOT_FOUND";
    case 600: return "CUDA_ERROR_NOT_READY";
    case 700: return "CUDA_ERROR_ILLEGAL_ADDRESS";
    case 701: return "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES";
    case 702: return "CUDA_ERROR_LAUNCH_TIMEOUT";
    case 703: return "CUDA_ERROR_LAUNCH_INCOMPATIBLE_TEXTURING";
    case 704: return "CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED";
    case 705: return "CUDA_ERROR_PEER_ACCESS_NOT_ENABLED";
    case 708: return "CUDA_ERROR_PRIMARY_CONTEXT_ACTIVE";
    case 709: return "CUDA_ERROR_CONTEXT_IS_DESTROYED";
    case 710: return "CUDA_ERROR_ASSERT";
    case 711: return "CUDA_ERROR_TOO_MANY_PEERS";
    case 712: return "CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED";
    case 713: return "CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED";
    case 714: return "CUDA_ERROR_HARDWARE_STACK_ERROR";
    case 715: return "CUDA_ERROR_ILLEGAL_INSTRUCTION";
    case 716: return "CUDA_ERROR_MISALIGNED_ADDRESS";
    case 717: return "CUDA_ERROR_INVALID_ADDRESS_SPACE";
    case 718: return "CUDA_ERROR_INVALID_PC";
    case 719: return "CUDA_ERROR_LAUNCH_FAILED";
    case 720: return "CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE";
    case 721: return "CUDA_ERROR_TENSOR_MEMORY_LEAK";
    case 800: return "CUDA_ERROR_NOT_PERMITTED";
    case 801: return "CUDA_ERROR_NOT_SUPPORTED";
    case 802: return "CUDA_ERROR_SYSTEM_NOT_READY";
    case 803: return "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH";
    case 804: return "CUDA_ERROR_COMPAT_NOT_SUPPORTED_ON_DEVICE";
    case 805: return "CUDA_ERROR_MPS_CONNECTION_FAILED";
    case 806: return "CUDA_ERROR_MPS_RPC_FAILURE";
    case 807: return "CUDA_ERROR_MPS_SERVER_NOT_READY";
    case 808: return "CUDA_ERROR_MPS_MAX_CLIENTS_REACHED";
    case 809: return "CUDA_ERROR_MPS_MAX_CONNECTIONS_REACHED";
    case 810: return "CUDA_ERROR_MPS_CLIENT_TERMINATED";
    case 811: return "CUDA_ERROR_CDP_NOT_SUPPORTED";
    case 812: return "CUDA_ERROR_CDP_VERSION_MISMATCH";
    case 900: return "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED";
    case 901: return "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED";
    case 902: return "CUDA_ERROR_STREAM_CAPTURE_MERGE";
    case 903: return "CUDA_ERROR_STREAM_CAPTURE_UNMATCHED";
    case 904: return "CUDA_ERROR_STREAM_CAPTURE_UNJOINED";
    case 905: return "CUDA_ERROR_STREAM_CAPTURE_ISOLATION";
    case 906: return "CUDA_ERROR_STREAM_CAPTURE_IMPLICIT";
    case 907: return "CUDA_ERROR_CAPTURED_EVENT";
    case 908: return "CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD";
    case 909: return "CUDA_ERROR_TIMEOUT";
    case 910: return "CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE";
    case 911: return "CUDA_ERROR_EXTERNAL_DEVICE";
    case 912: return "CUDA_ERROR_INVALID_CLUSTER_SIZE";
    case 913: return "CUDA_ERROR_FUNCTION_NOT_LOADED";
    case 914: return "CUDA_ERROR_INVALID_RESOURCE_TYPE";
    case 915: return "CUDA_ERROR_INVALID_RESOURCE_CONFIGURATION";
    case 916: return "CUDA_ERROR_KEY_ROTATION";
    case 999: return "CUDA_ERROR_UNKNOWN";
    default: return "CUresult";
  }
}

}  // namespace hurray::detail

#endif  // HURRAY_WITH_CUDA
