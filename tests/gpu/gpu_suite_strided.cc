// SPDX-License-Identifier: Apache-2.0
// The real-GPU suite's non-contiguous copies (docs/impl/gpu.md §4; run by
// gpu_suite.cc's main): 2-D, 3-D, N-D, transposed, negative and broadcast
// layouts copied between every kind of memory, on a stream and without one,
// against a host reference.
#include <cuda.h>
#include <hurray/dlpack.h>

#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "hurray/hurray.h"
#include "gpu_suite.h"

namespace gpu_suite {

namespace {

void noop_delete(DLManagedTensor *t) {
  delete[] t->dl_tensor.shape;
  delete t;
}

// A float32 view of `data` (memory of `d`) with the given layout, imported
// with the pointer check; the memory stays owned by whoever allocated it.
hurray_buffer view_of(void *data, hurray_device d, const std::vector<int64_t> &shape,
                      const std::vector<int64_t> &strides, int64_t offset_elems) {
  auto *t = new DLManagedTensor{};
  const size_t nd = shape.size();
  auto *dims = new int64_t[2 * nd];
  for (size_t k = 0; k < nd; ++k) {
    dims[k] = shape[k];
    dims[nd + k] = strides[k];
  }
  t->dl_tensor.data = data;
  t->dl_tensor.device = {static_cast<DLDeviceType>(d.device_type), d.device_id};
  t->dl_tensor.ndim = static_cast<int32_t>(nd);
  t->dl_tensor.dtype = {kDLFloat, 32, 1};
  t->dl_tensor.shape = dims;
  t->dl_tensor.strides = dims + nd;
  t->dl_tensor.byte_offset = static_cast<uint64_t>(offset_elems) * 4;
  t->deleter = &noop_delete;
  hurray_buffer out{};
  CHECK_OK(hurray_from_dlpack(t, HURRAY_IMPORT_CHECK_DEVICE_POINTER, &out));
  return out;
}

// Row-major elements of the layout over host floats `base` (the reference).
std::vector<float> gather_reference(const float *base, const std::vector<int64_t> &shape,
                                    const std::vector<int64_t> &strides, int64_t offset) {
  int64_t numel = 1;
  for (int64_t n : shape) numel *= n;
  std::vector<float> out(static_cast<size_t>(numel));
  for (int64_t i = 0; i < numel; ++i) {
    int64_t rem = i, off = offset;
    for (size_t k = shape.size(); k-- > 0;) {
      off += (rem % shape[k]) * strides[k];
      rem /= shape[k];
    }
    out[static_cast<size_t>(i)] = base[off];
  }
  return out;
}

// The elements of any handle, brought to the host by libhurray.
std::vector<float> to_host(const hurray_buffer &h) {
  hurray_buffer back{};
  CHECK_OK(hurray_copy(&h, {HURRAY_DEVICE_CPU, 0}, &back));
  int64_t numel = 1;
  for (int32_t k = 0; k < back.ndim; ++k) numel *= back.shape[k];
  const float *p = static_cast<const float *>(back.data);
  std::vector<float> v(p, p + numel);
  hurray_buffer_release(&back);
  return v;
}

void expect_same(const std::vector<float> &got, const std::vector<float> &want, const char *what) {
  CHECK(got.size() == want.size(), "%s: %zu elements, expected %zu", what, got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    if (got[i] != want[i])
      CHECK(false, "%s: element %zu is %g, expected %g", what, i, got[i], want[i]);
  }
}

struct Layout {
  const char *name;
  std::vector<int64_t> shape, strides;
  int64_t offset;  // elements
};

// 2-D, 3-D (the driver's memcpy), N-D, transposed, negative and broadcast
// strides (the kernel), over a buffer of kBase floats.
constexpr int64_t kBase = 1 << 22;
const Layout kLayouts[] = {
    {"2-D block", {1000, 700}, {1024, 1}, 5},
    {"2-D column", {4000}, {1000}, 3},
    {"3-D slices", {30, 100, 500}, {60416, 512, 1}, 0},
    {"transpose", {1024, 2048}, {1, 1024}, 0},
    {"4-D permuted", {8, 16, 32, 64}, {64, 1, 8192, 128}, 0},
    {"negative strides", {512, 1024}, {-2048, -1}, kBase - 1},
    {"rows backwards", {512, 1000}, {-1024, 1}, kBase - 1024},
    {"broadcast", {300, 1000}, {0, 1}, 0},
    {"6-D odd sizes", {3, 5, 7, 2, 9, 11}, {1, 3, 15, 105, 210, 1890}, 7},
};

}  // namespace

void strided_checks(int devices) {
  hurray_buffer host = iota_cpu(kBase, 1.0f);
  const float *ref = static_cast<const float *>(host.data);
  std::vector<hurray_device> dsts = {{HURRAY_DEVICE_CPU, 0},
                                     {HURRAY_DEVICE_CUDA, 0},
                                     {HURRAY_DEVICE_CUDA_HOST, 0},
                                     {HURRAY_DEVICE_CUDA_MANAGED, 0}};
  if (devices > 1) dsts.push_back({HURRAY_DEVICE_CUDA, 1});
  hurray_buffer dev_src{};
  CHECK_OK(hurray_copy(&host, {HURRAY_DEVICE_CUDA, 0}, &dev_src));
  for (const Layout &l : kLayouts) {
    const std::string name = std::string("strided device copy: ") + l.name;
    run(name.c_str(), [&] {
      const std::vector<float> want = gather_reference(ref, l.shape, l.strides, l.offset);
      hurray_buffer v =
          view_of(dev_src.data, {HURRAY_DEVICE_CUDA, 0}, l.shape, l.strides, l.offset);
      for (const hurray_device &d : dsts) {
        hurray_buffer c{};
        CHECK_OK(hurray_copy(&v, d, &c));
        char what[64];
        std::snprintf(what, sizeof what, "to type %d:%d", d.device_type, d.device_id);
        expect_same(d.device_type == HURRAY_DEVICE_CPU
                        ? std::vector<float>(static_cast<float *>(c.data),
                                             static_cast<float *>(c.data) + want.size())
                        : to_host(c),
                    want, what);
        hurray_buffer_release(&c);
      }
      // On a stream: queued there, complete once the stream is. A stream
      // is made in the context current on this thread (none here): device
      // 0's primary context is made current around the driver's own calls.
      CUstream s;
      {
        CurrentContext in0(0);
        CU(cuStreamCreate(&s, CU_STREAM_NON_BLOCKING));
      }
      hurray_buffer c{};
      CHECK_OK(hurray_copy_async(&v, {HURRAY_DEVICE_CUDA, 0}, s, &c));
      {
        CurrentContext in0(0);
        CU(cuStreamSynchronize(s));
      }
      expect_same(to_host(c), want, "on a stream");
      hurray_buffer_release(&c);
      {
        CurrentContext in0(0);
        CU(cuStreamSynchronize(s));
        CU(cuStreamDestroy(s));
      }
      hurray_buffer_release(&v);
    });
  }
  hurray_buffer_release(&dev_src);
  hurray_buffer_release(&host);
}

// A pinned source still being written by the legacy default stream: the
// copy without a stream must see the finished data.
void pinned_pending_check() {
  run("strided pinned source with pending work", [&] {
    const int64_t n = 1 << 24;  // 64 MiB of float32
    hurray_buffer host = iota_cpu(n, 2.0f);
    hurray_buffer dev{}, pinned{};
    CHECK_OK(hurray_copy(&host, {HURRAY_DEVICE_CUDA, 0}, &dev));
    pinned = alloc({HURRAY_DEVICE_CUDA_HOST, 0}, n);
    std::memset(pinned.data, 0, static_cast<size_t>(n) * 4);
    CUcontext ctx;
    CUdevice cu_dev;
    CU(cuDeviceGet(&cu_dev, 0));
    CU(cuDevicePrimaryCtxRetain(&ctx, cu_dev));
    CU(cuCtxPushCurrent(ctx));
    // Queue a slow fill of scratch memory, then the copy that writes the
    // pinned buffer, on the legacy default stream, and do not wait.
    CUdeviceptr scratch;
    CU(cuMemAlloc(&scratch, size_t{1} << 30));
    for (int i = 0; i < 8; ++i)
      CU(cuMemsetD32Async(scratch, i, (size_t{1} << 30) / 4, CU_STREAM_LEGACY));
    CU(cuMemcpyDtoHAsync(pinned.data, reinterpret_cast<CUdeviceptr>(dev.data),
                         static_cast<size_t>(n) * 4, CU_STREAM_LEGACY));
    CU(cuCtxPopCurrent(&ctx));
    hurray_buffer v =
        view_of(pinned.data, {HURRAY_DEVICE_CUDA_HOST, 0}, {4096, 4096}, {1, 4096}, 0);
    hurray_buffer c{};
    CHECK_OK(hurray_copy(&v, {HURRAY_DEVICE_CPU, 0}, &c));
    const std::vector<float> want =
        gather_reference(static_cast<const float *>(host.data), {4096, 4096}, {1, 4096}, 0);
    expect_same(std::vector<float>(static_cast<float *>(c.data),
                                   static_cast<float *>(c.data) + want.size()),
                want, "pinned transpose to the CPU");
    hurray_buffer_release(&c);
    CU(cuCtxPushCurrent(ctx));
    CU(cuCtxSynchronize());
    CU(cuMemFree(scratch));
    CU(cuCtxPopCurrent(&ctx));
    CU(cuDevicePrimaryCtxRelease(cu_dev));
    for (hurray_buffer *b : {&v, &pinned, &dev, &host}) hurray_buffer_release(b);
  });
}

}  // namespace gpu_suite
