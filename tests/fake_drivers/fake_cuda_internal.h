// SPDX-License-Identifier: Apache-2.0
// What the files of the fake CUDA driver (libcuda.so.1) share, in namespace
// fake_cuda: the configuration, the primary contexts, the calling thread's
// current context, the prologue and epilogue every entry point runs (enter,
// done, FAKE_ENTER), and the entry points that fake_cuda.cc's
// cuGetProcAddress table names but other files define:
//   fake_cuda.cc          contexts, allocations, streams, events, stream
//                         capture, the lookup table and the control API
//   fake_cuda_strided.cc  2-D / 3-D memcpy, modules and the strided kernel
//   fake_cuda_ipc.cc      legacy IPC handles, IPC events and cuMemGetAddressRange
//   fake_cuda_vmm.cc      virtual memory management (fake_vmm.h)
//   fake_cuda_pool.cc     memory pools and their IPC (fake_pool.h)
#ifndef HURRAY_TESTS_FAKES_FAKE_CUDA_INTERNAL_H_
#define HURRAY_TESTS_FAKES_FAKE_CUDA_INTERNAL_H_

#include <cuda.h>

#include <atomic>
#include <cstdint>

#include "fake_common.h"
#include "fake_devices.h"

// A primary context (one per device, g_primary).
struct CUctx_st {
  int device;
  std::atomic<bool> active;            // initialised (retained, not reset since)
  std::atomic<unsigned long long> id;  // cuCtxGetId of the current incarnation
};

// An event (cuEventCreate, or cuIpcOpenEventHandle of another process's),
// made with fake_cuda::new_event.
struct CUevent_st {
  CUstream recorded_on;
  // Last recorded on a stream that was being captured: it stands for a node
  // of that graph, not for queued work (cuStreamWaitEvent's capture rules,
  // fake_cuda.cc).
  bool captured = false;
  // The context it was made in: the primary context of `device` in its
  // incarnation `ctx_id` (cuCtxGetId). A reset of that context destroys the
  // event with it (fake_cuda.cc, event_error).
  int device = -1;
  unsigned long long ctx_id = 0;
};

namespace fake_cuda {

constexpr int kMaxDevices = 8;

struct Config {
  int driver_version = fake::env_int("FAKE_CUDA_DRIVER_VERSION", 12080);
  // FAKE_CUDA_DEVICE_COUNT GPUs installed, of which CUDA_VISIBLE_DEVICES
  // picks and orders what this process sees (fake_devices.h).
  fake::Visibility vis = fake::visible_devices("CUDA_VISIBLE_DEVICES",
                                               fake::env_int("FAKE_CUDA_DEVICE_COUNT", 2), false);
  int device_count = vis.count;
  int init_delay_ms = fake::env_int("FAKE_CUDA_INIT_DELAY_MS", 0);  // cuInit takes this long
};
inline const Config &config() {
  static const Config c;
  return c;
}

// The primary context of each device (fake_cuda.cc).
extern CUctx_st g_primary[kMaxDevices];

// The calling thread's current context (nullptr: none) and its device (-1).
CUcontext current();
int current_device();

inline fake::Recorder &rec() { return fake::Recorder::get(); }

inline CUdeviceptr as_dptr(void *p) {
  return static_cast<CUdeviceptr>(reinterpret_cast<uintptr_t>(p));
}
inline void *as_ptr(CUdeviceptr p) { return reinterpret_cast<void *>(static_cast<uintptr_t>(p)); }

// Common prologue: teardown and injected failures, logged. Returns the
// result to give back, or CUDA_SUCCESS to go on.
CUresult enter(const char *fn, const void *ptr = nullptr, const void *stream = nullptr,
               uint64_t bytes = 0);
// The error for a call that needs a live current context, or CUDA_SUCCESS.
CUresult context_error();
// Logs the call's result and returns it.
CUresult done(const char *fn, CUresult r, const void *ptr = nullptr, const void *stream = nullptr,
              uint64_t bytes = 0, const void *other = nullptr);

#define FAKE_ENTER(...)                              \
  do {                                               \
    CUresult early_ = fake_cuda::enter(__VA_ARGS__); \
    if (early_ != CUDA_SUCCESS) return early_;       \
  } while (0)

// Events (fake_cuda.cc). new_event: an event of the current context
// (called with one current), registered so that one a reset destroyed stays
// reachable for the leak checker. event_error: CUDA_SUCCESS for a live
// event, else CUDA_ERROR_INVALID_HANDLE, counted in dead_event_uses.
CUevent new_event();
CUresult event_error(CUevent ev);

// fake_cuda_strided.cc
CUresult f_memcpy_2d_async(const CUDA_MEMCPY2D *m, CUstream s);
CUresult f_memcpy_3d_async(const CUDA_MEMCPY3D *m, CUstream s);
CUresult f_module_load_data(CUmodule *mod, const void *image);
CUresult f_module_get_function(CUfunction *f, CUmodule mod, const char *name);
CUresult f_launch_kernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
                         unsigned int bx, unsigned int by, unsigned int bz, unsigned int shared,
                         CUstream s, void **params, void **extra);

// fake_cuda_ipc.cc
CUresult f_ipc_get_mem_handle(CUipcMemHandle *h, CUdeviceptr dp);
CUresult f_ipc_open_mem_handle(CUdeviceptr *dp, CUipcMemHandle h, unsigned int flags);
CUresult f_ipc_close_mem_handle(CUdeviceptr dp);
CUresult f_mem_get_address_range(CUdeviceptr *base, size_t *size, CUdeviceptr dp);
CUresult f_ipc_get_event_handle(CUipcEventHandle *h, CUevent ev);
CUresult f_ipc_open_event_handle(CUevent *ev, CUipcEventHandle h);

// fake_cuda_vmm.cc
CUresult f_mem_create(CUmemGenericAllocationHandle *h, size_t size, const CUmemAllocationProp *prop,
                      unsigned long long flags);
CUresult f_mem_get_allocation_granularity(size_t *g, const CUmemAllocationProp *prop,
                                          CUmemAllocationGranularity_flags option);
CUresult f_mem_release(CUmemGenericAllocationHandle h);
CUresult f_mem_address_reserve(CUdeviceptr *va, size_t size, size_t alignment, CUdeviceptr addr,
                               unsigned long long flags);
CUresult f_mem_address_free(CUdeviceptr va, size_t size);
CUresult f_mem_map(CUdeviceptr va, size_t size, size_t offset, CUmemGenericAllocationHandle h,
                   unsigned long long flags);
CUresult f_mem_unmap(CUdeviceptr va, size_t size);
CUresult f_mem_set_access(CUdeviceptr va, size_t size, const CUmemAccessDesc *desc, size_t count);
CUresult f_mem_retain_allocation_handle(CUmemGenericAllocationHandle *h, void *addr);
CUresult f_mem_get_allocation_properties(CUmemAllocationProp *prop, CUmemGenericAllocationHandle h);
CUresult f_mem_export_to_shareable_handle(void *out, CUmemGenericAllocationHandle h,
                                          CUmemAllocationHandleType type, unsigned long long flags);
CUresult f_mem_import_from_shareable_handle(CUmemGenericAllocationHandle *h, void *os_handle,
                                            CUmemAllocationHandleType type);

// fake_cuda_pool.cc
CUresult f_device_get_default_mem_pool(CUmemoryPool *pool, CUdevice dev);
CUresult f_mem_pool_create(CUmemoryPool *pool, const CUmemPoolProps *props);
CUresult f_mem_pool_destroy(CUmemoryPool pool);
CUresult f_mem_alloc_from_pool_async(CUdeviceptr *dp, size_t bytes, CUmemoryPool pool, CUstream s);
CUresult f_mem_pool_export_to_shareable_handle(void *out, CUmemoryPool pool,
                                               CUmemAllocationHandleType type,
                                               unsigned long long flags);
CUresult f_mem_pool_import_from_shareable_handle(CUmemoryPool *pool, void *handle,
                                                 CUmemAllocationHandleType type,
                                                 unsigned long long flags);
CUresult f_mem_pool_export_pointer(CUmemPoolPtrExportData *out, CUdeviceptr ptr);
CUresult f_mem_pool_import_pointer(CUdeviceptr *out, CUmemoryPool pool,
                                   CUmemPoolPtrExportData *data);
CUresult f_pointer_get_attribute(void *data, CUpointer_attribute attr, CUdeviceptr ptr);
// cuMemFree / cuMemFreeAsync of pool memory (false: not pool memory of this
// process), and the base and size of the pool allocation holding `p`.
bool pool_free(void *p);
bool pool_range(const void *p, uintptr_t *base, uint64_t *bytes);

}  // namespace fake_cuda

#endif  // HURRAY_TESTS_FAKES_FAKE_CUDA_INTERNAL_H_
