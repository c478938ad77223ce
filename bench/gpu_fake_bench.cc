// SPDX-License-Identifier: Apache-2.0
// What libhurray adds around the vendor calls, measured against the fake
// drivers of tests/fake_drivers (call logging off): each libhurray case has a
// "driver only" twin making the same vendor calls by hand, so the difference
// is libhurray's own work (validation, host bookkeeping, context handling).
//
//   build/<preset>/bench/hurray_gpu_fake_bench
//
// Results: docs/performance.md, "GPU (fake driver)".
#include <benchmark/benchmark.h>
#include <cuda.h>
#include <cudaTypedefs.h>
#include <dlfcn.h>

#include <chrono>
#include <cstdlib>
#include <thread>
#include <type_traits>
#include <vector>

#include "fake_control.h"
#include "hurray/hurray.h"

namespace {

constexpr hurray_dtype kF32{2, 32, 1};
constexpr int64_t kElems = 256;  // 1 KiB

// --- CUDA fake, called directly -------------------------------------------

struct Cuda {
  void *lib = nullptr;
  PFN_cuCtxGetCurrent_v4000 get_current = nullptr;
  PFN_cuCtxPushCurrent_v4000 push = nullptr;
  PFN_cuCtxPopCurrent_v4000 pop = nullptr;
  PFN_cuMemAlloc_v3020 alloc = nullptr;
  PFN_cuMemFree_v3020 free = nullptr;
  PFN_cuDevicePrimaryCtxRetain_v7000 retain = nullptr;
  void (*set_current_device)(int) = nullptr;
  CUcontext ctx0 = nullptr;
};

Cuda &cuda() {
  static Cuda c = [] {
    Cuda c;
    const char *path = std::getenv("HURRAY_CUDA_DRIVER_PATH");
    c.lib = path != nullptr ? dlopen(path, RTLD_NOW | RTLD_LOCAL) : nullptr;
    if (c.lib == nullptr) return c;
    auto gpa = reinterpret_cast<PFN_cuGetProcAddress_v12000>(dlsym(c.lib, "cuGetProcAddress_v2"));
    auto get = [&](const char *name, int version, auto *fn) {
      void *p = nullptr;
      gpa(name, &p, version, CU_GET_PROC_ADDRESS_LEGACY_STREAM, nullptr);
      *fn = reinterpret_cast<std::remove_pointer_t<decltype(fn)>>(p);
    };
    get("cuCtxGetCurrent", 4000, &c.get_current);
    get("cuCtxPushCurrent", 4000, &c.push);
    get("cuCtxPopCurrent", 4000, &c.pop);
    get("cuMemAlloc", 3020, &c.alloc);
    get("cuMemFree", 3020, &c.free);
    get("cuDevicePrimaryCtxRetain", 7000, &c.retain);
    c.set_current_device =
        reinterpret_cast<void (*)(int)>(dlsym(c.lib, "fake_cuda_set_current_device"));
    reinterpret_cast<void (*)(int)>(dlsym(c.lib, "fake_cuda_set_recording"))(0);
    c.retain(&c.ctx0, 0);
    return c;
  }();
  return c;
}

bool need_cuda(benchmark::State &state) {
  if (cuda().lib != nullptr) return true;
  state.SkipWithError("the fake CUDA driver is not available");
  return false;
}

hurray_buffer hurray_cuda_alloc() {
  hurray_buffer h;
  const int64_t n = kElems;
  if (hurray_alloc({HURRAY_DEVICE_CUDA, 0}, kF32, 1, &n, 0, &h) != HURRAY_OK) std::abort();
  return h;
}

// The calling thread has device 0's primary context current (the usual
// state of a framework's worker thread).
void BM_CudaDriverOnly_AllocFree(benchmark::State &state) {
  if (!need_cuda(state)) return;
  Cuda &c = cuda();
  c.set_current_device(0);
  for (auto _ : state) {
    CUdeviceptr p;
    c.alloc(&p, kElems * 4);
    c.free(p);
  }
  c.set_current_device(-1);
}
BENCHMARK(BM_CudaDriverOnly_AllocFree);

void BM_Hurray_CudaAllocRelease(benchmark::State &state) {
  if (!need_cuda(state)) return;
  cuda().set_current_device(0);
  for (auto _ : state) {
    hurray_buffer h = hurray_cuda_alloc();
    hurray_buffer_release(&h);
  }
  cuda().set_current_device(-1);
}
BENCHMARK(BM_Hurray_CudaAllocRelease);

// The calling thread has no context: libhurray pushes and pops around each
// call; the by-hand twin does the same.
void BM_CudaDriverOnly_AllocFree_NoContext(benchmark::State &state) {
  if (!need_cuda(state)) return;
  Cuda &c = cuda();
  for (auto _ : state) {
    CUcontext cur, popped;
    CUdeviceptr p;
    c.get_current(&cur);
    c.push(c.ctx0);
    c.alloc(&p, kElems * 4);
    c.pop(&popped);
    c.get_current(&cur);
    c.push(c.ctx0);
    c.free(p);
    c.pop(&popped);
  }
}
BENCHMARK(BM_CudaDriverOnly_AllocFree_NoContext);

void BM_Hurray_CudaAllocRelease_NoContext(benchmark::State &state) {
  if (!need_cuda(state)) return;
  for (auto _ : state) {
    hurray_buffer h = hurray_cuda_alloc();
    hurray_buffer_release(&h);
  }
}
BENCHMARK(BM_Hurray_CudaAllocRelease_NoContext);

// Cross-thread release: another thread allocated a batch; this thread (no
// context) releases it. Timed per release, allocation excluded.
constexpr int kBatch = 1000;

void BM_CudaDriverOnly_CrossThreadFree(benchmark::State &state) {
  if (!need_cuda(state)) return;
  Cuda &c = cuda();
  std::vector<CUdeviceptr> batch(kBatch);
  for (auto _ : state) {
    std::thread([&] {
      c.set_current_device(0);
      for (CUdeviceptr &p : batch) c.alloc(&p, kElems * 4);
      c.set_current_device(-1);
    }).join();
    const auto t0 = std::chrono::steady_clock::now();
    for (CUdeviceptr p : batch) {
      CUcontext cur, popped;
      c.get_current(&cur);
      c.push(c.ctx0);
      c.free(p);
      c.pop(&popped);
    }
    state.SetIterationTime(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  state.SetItemsProcessed(state.iterations() * kBatch);
}
BENCHMARK(BM_CudaDriverOnly_CrossThreadFree)->UseManualTime();

void BM_Hurray_CudaCrossThreadRelease(benchmark::State &state) {
  if (!need_cuda(state)) return;
  std::vector<hurray_buffer> batch(kBatch);
  for (auto _ : state) {
    std::thread([&] {
      cuda().set_current_device(0);
      for (hurray_buffer &h : batch) h = hurray_cuda_alloc();
      cuda().set_current_device(-1);
    }).join();
    const auto t0 = std::chrono::steady_clock::now();
    for (hurray_buffer &h : batch) hurray_buffer_release(&h);
    state.SetIterationTime(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  }
  state.SetItemsProcessed(state.iterations() * kBatch);
}
BENCHMARK(BM_Hurray_CudaCrossThreadRelease)->UseManualTime();

// --- HIP fake --------------------------------------------------------------

struct Hip {
  void *lib = nullptr;
  int (*get_device)(int *) = nullptr;
  int (*set_device)(int) = nullptr;
  int (*malloc)(void **, size_t) = nullptr;
  int (*free)(void *) = nullptr;
};

Hip &hip() {
  static Hip h = [] {
    Hip h;
    const char *path = std::getenv("HURRAY_HIP_LIBRARY_PATH");
    h.lib = path != nullptr ? dlopen(path, RTLD_NOW | RTLD_LOCAL) : nullptr;
    if (h.lib == nullptr) return h;
    h.get_device = reinterpret_cast<int (*)(int *)>(dlsym(h.lib, "hipGetDevice"));
    h.set_device = reinterpret_cast<int (*)(int)>(dlsym(h.lib, "hipSetDevice"));
    h.malloc = reinterpret_cast<int (*)(void **, size_t)>(dlsym(h.lib, "hipMalloc"));
    h.free = reinterpret_cast<int (*)(void *)>(dlsym(h.lib, "hipFree"));
    reinterpret_cast<void (*)(int)>(dlsym(h.lib, "fake_hip_set_recording"))(0);
    return h;
  }();
  return h;
}

void BM_HipDriverOnly_AllocFree(benchmark::State &state) {
  Hip &h = hip();
  if (h.lib == nullptr) return state.SkipWithError("the fake HIP runtime is not available");
  for (auto _ : state) {
    int d;
    void *p;
    h.get_device(&d);
    h.malloc(&p, kElems * 4);
    h.get_device(&d);
    h.free(p);
  }
}
BENCHMARK(BM_HipDriverOnly_AllocFree);

void BM_Hurray_HipAllocRelease(benchmark::State &state) {
  if (hip().lib == nullptr) return state.SkipWithError("the fake HIP runtime is not available");
  const int64_t n = kElems;
  for (auto _ : state) {
    hurray_buffer b;
    if (hurray_alloc({HURRAY_DEVICE_ROCM, 0}, kF32, 1, &n, 0, &b) != HURRAY_OK) std::abort();
    hurray_buffer_release(&b);
  }
}
BENCHMARK(BM_Hurray_HipAllocRelease);

// --- GPU IPC export (docs/impl/ipc.md §6) ------------------------------------

// Host time of one hurray_ipc_export of a 1 KiB allocation (kind 3 / 4),
// timed alone (manual time): the allocation before it and the discard of
// the message after it (whose reference the watcher thread releases) are
// not counted. No driver-only twin: the export is libhurray's work around
// cuMemGetAddressRange, cuIpcGetMemHandle, cuDeviceGetUuid and the
// synchronisation (before: cuCtxSynchronize; after: an IPC event).
void ipc_export_case(benchmark::State &state, int32_t type) {
  const int64_t n = kElems;
  for (auto _ : state) {
    hurray_buffer b;
    if (hurray_alloc({type, 0}, kF32, 1, &n, 0, &b) != HURRAY_OK) std::abort();
    hurray_ipc_message m;
    const auto t0 = std::chrono::steady_clock::now();
    if (hurray_ipc_export(&b, HURRAY_IPC_DEFAULT, &m) != HURRAY_OK) std::abort();
    const auto t1 = std::chrono::steady_clock::now();
    state.SetIterationTime(std::chrono::duration<double>(t1 - t0).count());
    if (hurray_ipc_message_discard(&m) != HURRAY_OK) std::abort();
  }
}

void BM_Hurray_CudaIpcExport(benchmark::State &state) {
  if (!need_cuda(state)) return;
  ipc_export_case(state, HURRAY_DEVICE_CUDA);
}
BENCHMARK(BM_Hurray_CudaIpcExport)->UseManualTime();

void BM_Hurray_HipIpcExport(benchmark::State &state) {
  if (hip().lib == nullptr) return state.SkipWithError("the fake HIP runtime is not available");
  ipc_export_case(state, HURRAY_DEVICE_ROCM);
}
BENCHMARK(BM_Hurray_HipIpcExport)->UseManualTime();

}  // namespace

int main(int argc, char **argv) {
  fake_use_built_fakes();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
