// SPDX-License-Identifier: Apache-2.0
// The fake CUDA driver's strided copies (part of libcuda.so.1, see
// fake_cuda.cc): cuMemcpy2DAsync and cuMemcpy3DAsync, and the modules,
// functions and cuLaunchKernel that run libhurray's strided-copy kernel
// (src/device/cuda/strided_kernel.ptx) as its CPU reference.
#include <cuda.h>

#include <cstring>
#include <mutex>
#include <vector>

#include "fake_cuda_internal.h"
#include "kernel_params.h"

// A loaded module and its one function: they belong to the context (device
// and context id) current at cuModuleLoadData.
struct CUmod_st {
  int device;
  unsigned long long ctx_id;
};
struct CUfunc_st {
  CUmod_st *module;
};

namespace fake_cuda {

// Where one side of a 2-D / 3-D copy lives. HOST must not name fake device
// memory and DEVICE must name it, as the real driver would misbehave
// otherwise.
bool side_ok(CUmemorytype t, const void *host, CUdeviceptr dev, const void **out) {
  fake::Allocation a{};
  switch (t) {
    case CU_MEMORYTYPE_HOST:
      *out = host;
      return host != nullptr && !(rec().find(host, &a) && a.kind != fake::Kind::kPinned);
    case CU_MEMORYTYPE_DEVICE:
      *out = as_ptr(dev);
      return rec().find(*out, &a) && a.kind != fake::Kind::kPinned;
    case CU_MEMORYTYPE_UNIFIED: *out = as_ptr(dev); return *out != nullptr;
    default: return false;
  }
}

constexpr size_t kFakeMaxPitch = (size_t{1} << 31) - 1;

CUresult f_memcpy_2d_async(const CUDA_MEMCPY2D *m, CUstream s) {
  const char *fn = "cuMemcpy2DAsync";
  FAKE_ENTER(fn, m != nullptr ? as_ptr(m->dstDevice) : nullptr, s);
  if (current() == nullptr) return done(fn, CUDA_ERROR_INVALID_CONTEXT, nullptr, s);
  const void *src = nullptr, *dst = nullptr;
  if (!side_ok(m->srcMemoryType, m->srcHost, m->srcDevice, &src) ||
      !side_ok(m->dstMemoryType, m->dstHost, m->dstDevice, &dst) || m->srcPitch < m->WidthInBytes ||
      m->dstPitch < m->WidthInBytes || m->srcPitch > kFakeMaxPitch || m->dstPitch > kFakeMaxPitch) {
    return done(fn, CUDA_ERROR_INVALID_VALUE, dst, s, m->WidthInBytes * m->Height, src);
  }
  const char *sp = static_cast<const char *>(src) + m->srcXInBytes + m->srcY * m->srcPitch;
  char *dp = static_cast<char *>(const_cast<void *>(dst)) + m->dstXInBytes + m->dstY * m->dstPitch;
  for (size_t r = 0; r < m->Height; ++r) {
    std::memcpy(dp + r * m->dstPitch, sp + r * m->srcPitch, m->WidthInBytes);
  }
  rec().queue_work(dst, src, current_device(), s);
  return done(fn, CUDA_SUCCESS, dst, s, m->WidthInBytes * m->Height, src);
}

CUresult f_memcpy_3d_async(const CUDA_MEMCPY3D *m, CUstream s) {
  const char *fn = "cuMemcpy3DAsync";
  FAKE_ENTER(fn, m != nullptr ? as_ptr(m->dstDevice) : nullptr, s);
  if (current() == nullptr) return done(fn, CUDA_ERROR_INVALID_CONTEXT, nullptr, s);
  const void *src = nullptr, *dst = nullptr;
  const uint64_t bytes = uint64_t{m->WidthInBytes} * m->Height * m->Depth;
  if (!side_ok(m->srcMemoryType, m->srcHost, m->srcDevice, &src) ||
      !side_ok(m->dstMemoryType, m->dstHost, m->dstDevice, &dst) || m->srcPitch < m->WidthInBytes ||
      m->dstPitch < m->WidthInBytes || m->srcHeight < m->Height || m->dstHeight < m->Height ||
      m->srcArray != nullptr || m->dstArray != nullptr || m->srcLOD != 0 || m->dstLOD != 0 ||
      m->reserved0 != nullptr || m->reserved1 != nullptr) {
    return done(fn, CUDA_ERROR_INVALID_VALUE, dst, s, bytes, src);
  }
  const char *sp = static_cast<const char *>(src) + m->srcXInBytes +
                   (m->srcZ * m->srcHeight + m->srcY) * m->srcPitch;
  char *dp = static_cast<char *>(const_cast<void *>(dst)) + m->dstXInBytes +
             (m->dstZ * m->dstHeight + m->dstY) * m->dstPitch;
  for (size_t z = 0; z < m->Depth; ++z) {
    for (size_t r = 0; r < m->Height; ++r) {
      std::memcpy(dp + (z * m->dstHeight + r) * m->dstPitch,
                  sp + (z * m->srcHeight + r) * m->srcPitch, m->WidthInBytes);
    }
  }
  rec().queue_work(dst, src, current_device(), s);
  return done(fn, CUDA_SUCCESS, dst, s, bytes, src);
}

// Every module and function the fake made stays reachable here: like the
// real driver's, they are never freed by their users (libhurray forgets the
// ones of a reset context), and leak checkers must not count them.
std::mutex g_modules_mu;
std::vector<const void *> &g_modules = *new std::vector<const void *>;
template <typename T>
T *keep(T *p) {
  std::lock_guard<std::mutex> lock(g_modules_mu);
  g_modules.push_back(p);
  return p;
}

CUresult f_module_load_data(CUmodule *mod, const void *image) {
  FAKE_ENTER("cuModuleLoadData", image);
  if (current() == nullptr) return done("cuModuleLoadData", CUDA_ERROR_INVALID_CONTEXT, image);
  // libhurray's image is PTX text defining its one entry point.
  const char *text = static_cast<const char *>(image);
  if (text == nullptr || std::strstr(text, ".version") == nullptr ||
      std::strstr(text, ".entry " HURRAY_STRIDED_KERNEL_NAME "(") == nullptr) {
    return done("cuModuleLoadData", CUDA_ERROR_INVALID_IMAGE, image);
  }
  *mod = keep(new CUmod_st{current_device(), g_primary[current_device()].id.load()});
  return done("cuModuleLoadData", CUDA_SUCCESS, *mod, nullptr, std::strlen(text));
}

CUresult f_module_get_function(CUfunction *f, CUmodule mod, const char *name) {
  FAKE_ENTER("cuModuleGetFunction", mod);
  if (mod == nullptr || std::strcmp(name, HURRAY_STRIDED_KERNEL_NAME) != 0) {
    return done("cuModuleGetFunction", CUDA_ERROR_NOT_FOUND, mod);
  }
  *f = keep(new CUfunc_st{mod});
  return done("cuModuleGetFunction", CUDA_SUCCESS, *f);
}

// May the kernel, running on `device`, touch [p, p + n)? Device memory of
// that device, managed memory and pinned (mapped) host memory: yes.
// Pageable host memory or another device's memory (no peer access): no.
bool device_can_touch(int device, uint64_t p, uint64_t n) {
  fake::Allocation a{};
  if (!rec().find(reinterpret_cast<void *>(static_cast<uintptr_t>(p)), &a)) return false;
  if (!rec().find(reinterpret_cast<void *>(static_cast<uintptr_t>(p + n - 1)), &a)) return false;
  return a.kind != fake::Kind::kDevice || a.device == device;
}

// The CPU reference of src/device/cuda/strided_kernel.ptx, run on the launch's
// parameters. First checks every access like the GPU would fault on it.
CUresult run_strided_kernel(const hurray_strided_kernel_params &p, int device) {
  if (p.unit != 1 && p.unit != 2 && p.unit != 4 && p.unit != 8) return CUDA_ERROR_INVALID_VALUE;
  if (p.ndim > HURRAY_STRIDED_KERNEL_MAX_NDIM) return CUDA_ERROR_INVALID_VALUE;
  const uint64_t elem = p.units * p.unit;
  for (int pass = 0; pass < 2; ++pass) {
    for (uint64_t i = 0; i < p.numel; ++i) {
      uint64_t rem = i, s = p.src, d = p.dst;
      for (uint32_t k = p.ndim; k-- > 0;) {
        const uint64_t n = static_cast<uint64_t>(p.shape[k]);
        const uint64_t idx = rem % n;
        rem /= n;
        s += idx * static_cast<uint64_t>(p.src_stride[k]);
        d += idx * static_cast<uint64_t>(p.dst_stride[k]);
      }
      if (pass == 0) {
        if (s % p.unit != 0 || d % p.unit != 0) return CUDA_ERROR_MISALIGNED_ADDRESS;
        if (!device_can_touch(device, s, elem) || !device_can_touch(device, d, elem)) {
          return CUDA_ERROR_ILLEGAL_ADDRESS;
        }
      } else {
        std::memcpy(reinterpret_cast<void *>(static_cast<uintptr_t>(d)),
                    reinterpret_cast<const void *>(static_cast<uintptr_t>(s)), elem);
      }
    }
  }
  return CUDA_SUCCESS;
}

CUresult f_launch_kernel(CUfunction f, unsigned int gx, unsigned int gy, unsigned int gz,
                         unsigned int bx, unsigned int by, unsigned int bz, unsigned int shared,
                         CUstream s, void **params, void **extra) {
  const char *fn = "cuLaunchKernel";
  FAKE_ENTER(fn, nullptr, s);
  if (current() == nullptr) return done(fn, CUDA_ERROR_INVALID_CONTEXT, nullptr, s);
  // A function of another context, or of one that was renewed since.
  if (f == nullptr || f->module->device != current_device() ||
      f->module->ctx_id != g_primary[current_device()].id.load()) {
    return done(fn, CUDA_ERROR_INVALID_HANDLE, nullptr, s);
  }
  if (gx == 0 || gy != 1 || gz != 1 || bx == 0 || bx > 1024 || by != 1 || bz != 1 || shared != 0 ||
      params == nullptr || extra != nullptr) {
    return done(fn, CUDA_ERROR_INVALID_VALUE, nullptr, s);
  }
  hurray_strided_kernel_params p;
  std::memcpy(&p, params[0], sizeof p);
  const CUresult r = run_strided_kernel(p, current_device());
  if (r == CUDA_SUCCESS) {
    rec().queue_work(reinterpret_cast<void *>(static_cast<uintptr_t>(p.dst)),
                     reinterpret_cast<void *>(static_cast<uintptr_t>(p.src)), current_device(), s);
  }
  return done(fn, r, reinterpret_cast<void *>(static_cast<uintptr_t>(p.dst)), s,
              p.numel * p.units * p.unit, reinterpret_cast<void *>(static_cast<uintptr_t>(p.src)));
}

}  // namespace fake_cuda
