// SPDX-License-Identifier: Apache-2.0
// Strided copies on a CUDA device (CudaTraits::copy_strided, vendor.h): cuMemcpy2DAsync /
// cuMemcpy3DAsync for layouts they can express, the PTX kernel of
// device/cuda/strided_kernel.ptx for everything else. The kernel is loaded with
// cuModuleLoadData once per context, at its first use there.
#if defined(HURRAY_WITH_CUDA)

#include <cstring>
#include <mutex>

#include "common/error.h"
#include "device/cuda/driver.h"
#include "device/cuda/kernel_params.h"
#include "device/cuda/vendor.h"
#include "device/strided_copy.h"

namespace hurray::detail {
namespace {

static_assert(HURRAY_STRIDED_KERNEL_MAX_NDIM >= HURRAY_MAX_NDIM, "kernel takes every tensor rank");

// --- the kernel, once per context ------------------------------------------

// A context is known by its handle and, from driver 12.0 on, by its unique
// id, which changes when a primary context is reset and re-created under the
// same handle (its modules die with it).
struct LoadedKernel {
  CUcontext ctx;
  unsigned long long ctx_id;
  CUfunction fn;
};
constexpr int kKernelSlots = 64;
std::mutex g_kernel_mutex;
LoadedKernel g_kernels[kKernelSlots];
int g_kernel_count = 0;
int g_kernel_next = 0;  // slot to reuse once all are taken

CUresult current_context(const CudaDriver &d, CUcontext *ctx, unsigned long long *id) {
  CUresult r = d.ctx_get_current(ctx);
  if (r != CUDA_SUCCESS) return r;
  *id = 0;
  if (d.ctx_get_id != nullptr) r = d.ctx_get_id(*ctx, id);
  return r;
}

// The kernel in the current context, loading the module if this context has
// none yet. `forget`: the cached one failed to launch (a stale module), load
// again. Loading is serialised; a module is never unloaded (its context
// takes it along when it goes).
CUresult kernel_here(const CudaDriver &d, bool forget, CUfunction *fn, const char **call) {
  CUcontext ctx;
  unsigned long long id;
  *call = "cuCtxGetCurrent";
  CUresult r = current_context(d, &ctx, &id);
  if (r != CUDA_SUCCESS) return r;
  std::lock_guard<std::mutex> lock(g_kernel_mutex);
  int slot = -1;
  for (int i = 0; i < g_kernel_count; ++i) {
    if (g_kernels[i].ctx == ctx) slot = i;
  }
  if (slot >= 0 && g_kernels[slot].ctx_id == id && !forget) {
    *fn = g_kernels[slot].fn;
    return CUDA_SUCCESS;
  }
  CUmodule module;
  *call = "cuModuleLoadData";
  r = d.module_load_data(&module, kStridedKernelPtx);
  if (r != CUDA_SUCCESS) return r;
  *call = "cuModuleGetFunction";
  r = d.module_get_function(fn, module, HURRAY_STRIDED_KERNEL_NAME);
  if (r != CUDA_SUCCESS) return r;
  if (slot < 0) {
    if (g_kernel_count < kKernelSlots) {
      slot = g_kernel_count++;
    } else {
      slot = g_kernel_next;
      g_kernel_next = (g_kernel_next + 1) % kKernelSlots;
    }
  }
  g_kernels[slot] = LoadedKernel{ctx, id, *fn};
  return CUDA_SUCCESS;
}

// Widest load (8, 4, 2 or 1 bytes) that every element address and the
// element size are multiples of.
uint32_t unit_for(const CopyPlan &p, uint64_t src, uint64_t dst) {
  uint64_t bits = static_cast<uint64_t>(p.elem_bytes) | src | dst;
  for (int32_t k = 0; k < p.ndim; ++k) {
    bits |= static_cast<uint64_t>(p.src_stride[k]) | static_cast<uint64_t>(p.dst_stride[k]);
  }
  for (uint32_t u : {8u, 4u, 2u}) {
    if (bits % u == 0) return u;
  }
  return 1;
}

constexpr unsigned kThreads = 256;
constexpr uint64_t kMaxBlocks = 4096;  // a grid-stride loop covers the rest

CUresult launch(const CudaDriver &d, const CopyPlan &p, uint64_t src0, uint64_t dst0,
                CUstream stream, const char **call) {
  hurray_strided_kernel_params kp;
  std::memset(&kp, 0, sizeof kp);
  kp.src = src0 + static_cast<uint64_t>(p.src_first);
  kp.dst = dst0 + static_cast<uint64_t>(p.dst_first);
  kp.numel = static_cast<uint64_t>(p.numel);
  kp.ndim = static_cast<uint32_t>(p.ndim);
  kp.unit = unit_for(p, kp.src, kp.dst);
  kp.units = static_cast<uint64_t>(p.elem_bytes) / kp.unit;
  for (int32_t k = 0; k < p.ndim; ++k) {
    kp.shape[k] = p.shape[k];
    kp.src_stride[k] = p.src_stride[k];
    kp.dst_stride[k] = p.dst_stride[k];
  }
  uint64_t blocks = (kp.numel + kThreads - 1) / kThreads;
  if (blocks > kMaxBlocks) blocks = kMaxBlocks;
  void *args[] = {&kp};
  for (int attempt = 0;; ++attempt) {
    CUfunction fn;
    CUresult r = kernel_here(d, attempt > 0, &fn, call);
    if (r != CUDA_SUCCESS) return r;
    *call = "cuLaunchKernel";
    r = d.launch_kernel(fn, static_cast<unsigned>(blocks), 1, 1, kThreads, 1, 1, 0, stream, args,
                        nullptr);
    // A module of a context that was reset under the same handle (drivers
    // before 12.0 give no id to tell): load it again, once.
    if (r != CUDA_ERROR_INVALID_HANDLE || attempt > 0) return r;
  }
}

// --- 2-D and 3-D memcpy ----------------------------------------------------

// How the driver is told where one side of a copy lives.
void describe(int32_t type, uint64_t addr, CUmemorytype *mt, const void **host, CUdeviceptr *dev) {
  switch (type) {
    case HURRAY_DEVICE_CPU:
    case HURRAY_DEVICE_CUDA_HOST:
      *mt = CU_MEMORYTYPE_HOST;
      *host = reinterpret_cast<const void *>(static_cast<uintptr_t>(addr));
      break;
    case HURRAY_DEVICE_CUDA_MANAGED:
      *mt = CU_MEMORYTYPE_UNIFIED;
      *dev = static_cast<CUdeviceptr>(addr);
      break;
    default:
      *mt = CU_MEMORYTYPE_DEVICE;
      *dev = static_cast<CUdeviceptr>(addr);
      break;
  }
}

// The fields CUDA_MEMCPY2D and CUDA_MEMCPY3D share (same names in both):
// zeroed, then both sides' memory kinds and addresses, pitches, row width
// and row count.
template <typename Memcpy>
void fill_rows(Memcpy *m, int32_t src_type, uint64_t src, int32_t dst_type, uint64_t dst,
               const CopyRect &r) {
  std::memset(m, 0, sizeof *m);
  const void *src_host = nullptr, *dst_host = nullptr;
  describe(src_type, src, &m->srcMemoryType, &src_host, &m->srcDevice);
  describe(dst_type, dst, &m->dstMemoryType, &dst_host, &m->dstDevice);
  m->srcHost = src_host;
  m->dstHost = const_cast<void *>(dst_host);
  m->srcPitch = static_cast<size_t>(r.src_pitch);
  m->dstPitch = static_cast<size_t>(r.dst_pitch);
  m->WidthInBytes = static_cast<size_t>(r.width);
  m->Height = static_cast<size_t>(r.height);
}

CUresult memcpy_rect(const CudaDriver &d, const CopyRect &r, int32_t src_type, uint64_t src,
                     int32_t dst_type, uint64_t dst, CUstream stream, const char **call) {
  if (r.dims == 1) {
    *call = "cuMemcpyAsync";
    return d.memcpy_async(static_cast<CUdeviceptr>(dst), static_cast<CUdeviceptr>(src),
                          static_cast<size_t>(r.width), stream);
  }
  if (r.dims == 2) {
    CUDA_MEMCPY2D m;
    fill_rows(&m, src_type, src, dst_type, dst, r);
    *call = "cuMemcpy2DAsync";
    return d.memcpy_2d_async(&m, stream);
  }
  CUDA_MEMCPY3D m;
  fill_rows(&m, src_type, src, dst_type, dst, r);
  m.srcHeight = static_cast<size_t>(r.src_rows);
  m.dstHeight = static_cast<size_t>(r.dst_rows);
  m.Depth = static_cast<size_t>(r.depth);
  *call = "cuMemcpy3DAsync";
  return d.memcpy_3d_async(&m, stream);
}

// --- the copy ----------------------------------------------------------------

struct Job {
  const DeviceCopy *c;
  int32_t ordinal;
  CUstream stream;
  const char *call;
};

// Memory the kernel, running on `ordinal`, may write through its address:
// this device's memory, managed memory, and (mapped) pinned host memory.
bool writable_from(const hurray_device &dst, int32_t ordinal) {
  switch (dst.device_type) {
    case HURRAY_DEVICE_CUDA: return dst.device_id == ordinal;
    case HURRAY_DEVICE_CUDA_HOST:
    case HURRAY_DEVICE_CUDA_MANAGED: return true;
    default: return false;
  }
}

CUresult run(const CudaDriver &d, void *arg) {
  Job &j = *static_cast<Job *>(arg);
  const DeviceCopy &c = *j.c;
  const CopyPlan &p = c.plan;
  const uint64_t src0 = reinterpret_cast<uintptr_t>(c.src);
  const uint64_t dst0 = reinterpret_cast<uintptr_t>(c.dst);
  const int32_t src_type = c.src_dev.device_type, dst_type = c.dst_dev.device_type;
  CopyRect r;
  const bool rect = plan_rect(p, 0, &r);
  const bool direct = writable_from(c.dst_dev, j.ordinal);
  if (rect && (direct || dst_type == HURRAY_DEVICE_CPU)) {
    return memcpy_rect(d, r, src_type, src0 + static_cast<uint64_t>(p.src_first), dst_type,
                       dst0 + static_cast<uint64_t>(p.dst_first), j.stream, &j.call);
  }
  if (direct) return launch(d, p, src0, dst0, j.stream, &j.call);
  // Pageable host memory or another device's: gather into compact memory on
  // this device, then one contiguous copy (the caller checked that the
  // destination is compact).
  const size_t bytes = static_cast<size_t>(p.numel) * static_cast<size_t>(p.elem_bytes);
  CUdeviceptr tmp = 0;
  bool ordered = true;
  j.call = "cuMemAllocAsync";
  CUresult res = d.mem_alloc_async(&tmp, bytes, j.stream);
  if (res == CUDA_ERROR_NOT_SUPPORTED) {  // no stream-ordered pool on this device
    ordered = false;
    j.call = "cuMemAlloc";
    res = d.mem_alloc(&tmp, bytes);
  }
  if (res != CUDA_SUCCESS) return res;
  const CopyPlan packed = plan_with_compact_dst(p);
  CopyRect pr;
  if (plan_rect(packed, 0, &pr)) {
    res = memcpy_rect(d, pr, src_type, src0 + static_cast<uint64_t>(p.src_first),
                      HURRAY_DEVICE_CUDA, tmp, j.stream, &j.call);
  } else {
    res = launch(d, packed, src0, tmp, j.stream, &j.call);
  }
  if (res == CUDA_SUCCESS) {
    j.call = "cuMemcpyAsync";
    res = d.memcpy_async(static_cast<CUdeviceptr>(dst0), tmp, bytes, j.stream);
  }
  // The staging memory goes after the copies queued on the stream.
  const char *free_call = ordered ? "cuMemFreeAsync" : "cuStreamSynchronize";
  CUresult fr;
  if (ordered) {
    fr = d.mem_free_async(tmp, j.stream);
  } else {
    fr = d.stream_synchronize(j.stream);
    if (fr == CUDA_SUCCESS) {
      free_call = "cuMemFree";
      fr = d.mem_free(tmp);
    }
  }
  if (res == CUDA_SUCCESS && fr != CUDA_SUCCESS) j.call = free_call;
  return res != CUDA_SUCCESS ? res : fr;
}

}  // namespace

int32_t CudaTraits::copy_strided(int32_t ordinal, const DeviceCopy &c, void *stream) {
  CopyRect r;
  if (!writable_from(c.dst_dev, ordinal) &&
      !(c.dst_dev.device_type == HURRAY_DEVICE_CPU && plan_rect(c.plan, 0, &r)) &&
      !plan_dst_compact(c.plan)) {
    return detail::fail(HURRAY_ERR_INTERNAL,
                        "a strided copy into %s memory needs a compact destination on this path",
                        detail::device_type_name(c.dst_dev.device_type));
  }
  Job j{&c, ordinal, static_cast<CUstream>(stream), "cuLaunchKernel"};
  // run() keeps j.call naming the driver call it is in; with_device reads
  // it for the message after a failure.
  return Cuda::with_device(ordinal, &j.call, [&](const CudaDriver &d) { return run(d, &j); });
}

}  // namespace hurray::detail

#endif  // HURRAY_WITH_CUDA
