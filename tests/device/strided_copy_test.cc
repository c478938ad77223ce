// SPDX-License-Identifier: Apache-2.0
// Non-contiguous copies against the fake drivers (docs/impl/gpu.md §4):
// pinned sources wait for the default stream before the host reads them,
// device sources are copied on the device (2-D / 3-D memcpy, the PTX kernel,
// HIP's loop of 2-D / 3-D copies) without staging through pageable host
// memory, and every byte offset is computed without overflow.
#include <hurray/dlpack.h>
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "support.h"

using namespace gpu_test;

namespace {

struct Holder {
  DLManagedTensor t{};
  std::vector<int64_t> shape, strides;
};
void delete_holder(DLManagedTensor *t) { delete static_cast<Holder *>(t->manager_ctx); }

// A handle viewing `data` of device `d` with the given layout (elements of
// `bits` bits), imported through DLPack with the pointer check when the
// memory is the fakes' own.
hurray_buffer view(void *data, hurray_device d, std::vector<int64_t> shape,
                   std::vector<int64_t> strides, uint64_t byte_offset = 0, uint8_t bits = 32,
                   uint32_t options = HURRAY_IMPORT_CHECK_DEVICE_POINTER) {
  auto *h = new Holder;
  h->shape = std::move(shape);
  h->strides = std::move(strides);
  h->t.dl_tensor.data = data;
  h->t.dl_tensor.device.device_type = static_cast<DLDeviceType>(d.device_type);
  h->t.dl_tensor.device.device_id = d.device_id;
  h->t.dl_tensor.ndim = static_cast<int32_t>(h->shape.size());
  h->t.dl_tensor.dtype = DLDataType{bits == 32 ? uint8_t{kDLFloat} : uint8_t{kDLInt}, bits, 1};
  h->t.dl_tensor.shape = h->shape.data();
  h->t.dl_tensor.strides = h->strides.data();
  h->t.dl_tensor.byte_offset = byte_offset;
  h->t.manager_ctx = h;
  h->t.deleter = &delete_holder;
  hurray_buffer out{};
  EXPECT_EQ(hurray_from_dlpack(&h->t, options, &out), HURRAY_OK) << hurray_last_error();
  return out;
}

// The elements of `v` in row-major order, gathered by the test itself
// (fake device memory is host memory).
std::vector<float> reference(const hurray_buffer &v) {
  std::vector<float> out;
  int64_t numel = 1;
  for (int32_t k = 0; k < v.ndim; ++k) numel *= v.shape[k];
  std::vector<int64_t> idx(static_cast<size_t>(v.ndim), 0);
  for (int64_t i = 0; i < numel; ++i) {
    int64_t rem = i, off = 0;
    for (int32_t k = v.ndim - 1; k >= 0; --k) {
      off += (rem % v.shape[k]) * v.strides[k];
      rem /= v.shape[k];
    }
    float x;
    std::memcpy(&x, static_cast<const char *>(v.data) + v.byte_offset + off * 4, 4);
    out.push_back(x);
  }
  return out;
}

std::vector<float> values(const hurray_buffer &c) {
  int64_t numel = 1;
  for (int32_t k = 0; k < c.ndim; ++k) numel *= c.shape[k];
  const float *p = static_cast<const float *>(c.data);
  return std::vector<float>(p, p + numel);
}

// A float32 buffer of `n` elements 0, 1, 2, ... on `d`.
hurray_buffer iota(hurray_device d, int64_t n) {
  hurray_buffer h{};
  EXPECT_EQ(hurray_alloc(d, kFloat32, 1, &n, 0, &h), HURRAY_OK) << hurray_last_error();
  for (int64_t i = 0; i < n; ++i) static_cast<float *>(h.data)[i] = static_cast<float>(i);
  return h;
}

// Index of the first logged call named `fn` in `all`, or -1.
int first(const std::vector<fake_call> &all, const char *fn) {
  for (size_t i = 0; i < all.size(); ++i) {
    if (std::strcmp(all[i].fn, fn) == 0) return static_cast<int>(i);
  }
  return -1;
}

class StridedCuda : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fake_cuda().loaded()) GTEST_SKIP() << "the fake CUDA driver is not in use";
    fake_cuda().set_current_device(-1);
    live_before_ = fake_cuda().live_allocations();
    fake_cuda().reset();
  }
  void TearDown() override {
    if (!fake_cuda().loaded()) return;
    EXPECT_EQ(fake_cuda().live_allocations(), live_before_) << "device memory leaked";
    fake_cuda().set_current_device(-1);
    fake_cuda().reset();
  }
  Fake &f() { return fake_cuda(); }
  int64_t live_before_ = 0;
};

// Defect 4: without a stream, the host reads a pinned source only after the
// legacy default stream (which may still be writing it) has drained.
TEST_F(StridedCuda, PinnedStridedSourceWaitsForTheLegacyDefaultStream) {
  hurray_buffer pinned = iota(dev(HURRAY_DEVICE_CUDA_HOST), 12);
  hurray_buffer t = view(pinned.data, dev(HURRAY_DEVICE_CUDA_HOST), {4, 3}, {1, 4});
  const std::vector<float> want = reference(t);
  for (int32_t target : {HURRAY_DEVICE_CPU, HURRAY_DEVICE_CUDA}) {
    SCOPED_TRACE(target);
    f().reset();
    hurray_buffer c{};
    ASSERT_EQ(hurray_copy(&t, dev(target, 0), &c), HURRAY_OK) << hurray_last_error();
    EXPECT_EQ(values(c), want);
    const auto all = f().log(nullptr);
    const int sync = first(all, "cuStreamSynchronize");
    ASSERT_GE(sync, 0) << "the default stream was never synchronised";
    EXPECT_EQ(all[static_cast<size_t>(sync)].stream, nullptr) << "the legacy default stream";
    const int copy = first(all, "cuMemcpyAsync");
    if (copy >= 0) {
      EXPECT_LT(sync, copy) << "synchronised before the gathered data moved";
    }
    hurray_buffer_release(&c);
  }
  // Contiguous pinned memory to the CPU is a host copy too: same wait.
  f().reset();
  hurray_buffer c{};
  ASSERT_EQ(hurray_copy(&pinned, dev(HURRAY_DEVICE_CPU), &c), HURRAY_OK);
  EXPECT_EQ(f().call_count("cuStreamSynchronize"), 1);
  hurray_buffer_release(&c);
  hurray_buffer_release(&t);
  hurray_buffer_release(&pinned);
}

// Defect 5, 2-D and 3-D: one cuMemcpy2DAsync / cuMemcpy3DAsync, to device
// and host destinations, and nothing else moves bytes.
TEST_F(StridedCuda, TwoAndThreeDimensionalLayoutsUseTheDriversCopies) {
  hurray_buffer src = iota(dev(HURRAY_DEVICE_CUDA, 1), 240);
  struct Case {
    std::vector<int64_t> shape, strides;
    uint64_t offset;
    const char *fn;
  } cases[] = {
      {{4, 3}, {5, 1}, 8, "cuMemcpy2DAsync"},                  // a 4x3 block of a 4x5 matrix
      {{6}, {3}, 4, "cuMemcpy2DAsync"},                        // every third element: rows of one
      {{2, 3, 4}, {60, 10, 1}, 0, "cuMemcpy3DAsync"},          // slices 6 rows of 10 apart
      {{3, 1, 4, 2}, {80, 999, 20, 2}, 4, "cuMemcpy3DAsync"},  // size-1 dimension dropped
  };
  void *stream = reinterpret_cast<void *>(0x5150);
  for (const Case &k : cases) {
    SCOPED_TRACE(k.fn);
    hurray_buffer v = view(src.data, dev(HURRAY_DEVICE_CUDA, 1), k.shape, k.strides, k.offset);
    const std::vector<float> want = reference(v);
    for (int32_t target : {HURRAY_DEVICE_CUDA, HURRAY_DEVICE_CPU, HURRAY_DEVICE_CUDA_MANAGED}) {
      SCOPED_TRACE(target);
      const int32_t id = target == HURRAY_DEVICE_CUDA ? 1 : 0;
      f().reset();
      hurray_buffer c{};
      ASSERT_EQ(hurray_copy_async(&v, dev(target, id), stream, &c), HURRAY_OK)
          << hurray_last_error();
      EXPECT_EQ(values(c), want);
      auto rect = f().log(k.fn);
      ASSERT_EQ(rect.size(), 1u);
      EXPECT_EQ(rect[0].ptr, c.data);
      EXPECT_EQ(rect[0].stream, stream);
      EXPECT_EQ(rect[0].device, 1) << "in the source device's context";
      EXPECT_EQ(rect[0].bytes, want.size() * 4) << "the elements, not the span";
      EXPECT_EQ(f().call_count("cuMemcpyAsync"), 0) << "no staging copy";
      EXPECT_EQ(f().call_count("cuLaunchKernel"), 0);
      EXPECT_EQ(f().call_count("cuStreamSynchronize"), target == HURRAY_DEVICE_CPU ? 1 : 0)
          << "asynchronous unless the destination is pageable host memory";
      hurray_buffer_release(&c);
    }
    hurray_buffer_release(&v);
  }
  hurray_buffer_release(&src);
}

// Defect 5, everything else: the PTX kernel, loaded once per context, writes
// device-reachable destinations directly; pageable ones get the packed
// elements from a stream-ordered device buffer.
TEST_F(StridedCuda, OtherLayoutsRunTheKernelOnTheDevice) {
  hurray_buffer src = iota(dev(HURRAY_DEVICE_CUDA, 0), 240);
  struct Case {
    std::vector<int64_t> shape, strides;
    uint64_t offset;
  } cases[] = {
      {{4, 3}, {1, 4}, 0},                // a transpose
      {{2, 2}, {-4, -2}, 44},             // backwards on both axes
      {{3, 4}, {-20, 1}, 160},            // rows backwards, columns forwards
      {{2, 3, 2, 5}, {1, 2, 120, 6}, 0},  // four levels, permuted
      {{5, 3}, {0, 1}, 0},                // a broadcast row
  };
  void *stream = reinterpret_cast<void *>(0x7770);
  int loads = 0;
  for (const Case &k : cases) {
    hurray_buffer v = view(src.data, dev(HURRAY_DEVICE_CUDA, 0), k.shape, k.strides, k.offset);
    const std::vector<float> want = reference(v);
    for (int32_t target : {HURRAY_DEVICE_CUDA, HURRAY_DEVICE_CUDA_HOST, HURRAY_DEVICE_CPU}) {
      SCOPED_TRACE(::testing::Message() << "case " << (&k - cases) << " to " << target);
      f().reset();
      hurray_buffer c{};
      ASSERT_EQ(hurray_copy_async(&v, dev(target, 0), stream, &c), HURRAY_OK)
          << hurray_last_error();
      EXPECT_EQ(values(c), want);
      loads += f().call_count("cuModuleLoadData");
      auto launches = f().log("cuLaunchKernel");
      ASSERT_EQ(launches.size(), 1u);
      EXPECT_EQ(launches[0].stream, stream);
      EXPECT_EQ(launches[0].device, 0);
      EXPECT_EQ(launches[0].result, 0);
      auto copies = f().log("cuMemcpyAsync");
      if (target == HURRAY_DEVICE_CPU) {
        // Gathered on the device into stream-ordered memory, then the
        // packed elements go to the host once.
        ASSERT_EQ(copies.size(), 1u);
        EXPECT_EQ(copies[0].ptr, c.data);
        EXPECT_EQ(copies[0].bytes, want.size() * 4);
        EXPECT_EQ(copies[0].other, launches[0].ptr);
        auto tmp = f().log("cuMemAllocAsync");
        ASSERT_EQ(tmp.size(), 1u);
        EXPECT_EQ(tmp[0].stream, stream);
        auto freed = f().log("cuMemFreeAsync");
        ASSERT_EQ(freed.size(), 1u);
        EXPECT_EQ(freed[0].ptr, tmp[0].ptr);
        EXPECT_EQ(freed[0].stream, stream);
      } else {
        EXPECT_EQ(copies.size(), 0u) << "written in place by the kernel";
        EXPECT_EQ(launches[0].ptr, c.data);
        EXPECT_EQ(f().call_count("cuStreamSynchronize"), 0);
      }
      hurray_buffer_release(&c);
    }
    hurray_buffer_release(&v);
  }
  EXPECT_EQ(loads, 1) << "the module is loaded once in device 0's context";
  hurray_buffer_release(&src);
}

// Without a stream the copy is complete on return, and the kernel also
// serves a source on another device than the destination (gathered on the
// source's device, then one peer copy: the kernel never writes another
// device's memory).
TEST_F(StridedCuda, KernelCopiesAcrossDevicesAndSynchronously) {
  hurray_buffer src = iota(dev(HURRAY_DEVICE_CUDA, 1), 64);
  hurray_buffer v = view(src.data, dev(HURRAY_DEVICE_CUDA, 1), {4, 4}, {1, 4});
  const std::vector<float> want = reference(v);
  hurray_buffer c{};
  ASSERT_EQ(hurray_copy(&v, dev(HURRAY_DEVICE_CUDA, 0), &c), HURRAY_OK) << hurray_last_error();
  EXPECT_EQ(values(c), want);
  auto launches = f().log("cuLaunchKernel");
  ASSERT_EQ(launches.size(), 1u);
  EXPECT_EQ(launches[0].device, 1);
  EXPECT_EQ(launches[0].result, 0);
  auto copies = f().log("cuMemcpyAsync");
  ASSERT_EQ(copies.size(), 1u);
  EXPECT_EQ(copies[0].ptr, c.data);
  EXPECT_EQ(copies[0].bytes, 64u);
  auto syncs = f().log("cuStreamSynchronize");
  ASSERT_GE(syncs.size(), 1u);
  EXPECT_EQ(syncs.back().stream, nullptr);
  EXPECT_EQ(f().current_device(), -1) << "the caller's (empty) context stack is restored";
  hurray_buffer_release(&c);
  hurray_buffer_release(&v);
  hurray_buffer_release(&src);
}

// A context renewed under the same handle (a primary-context reset) has no
// module any more: the kernel is loaded again there.
TEST_F(StridedCuda, KernelIsLoadedAgainInARenewedContext) {
  auto renew = reinterpret_cast<void (*)(int)>(dlsym(f().lib, "fake_cuda_renew_context"));
  ASSERT_NE(renew, nullptr);
  hurray_buffer src = iota(dev(HURRAY_DEVICE_CUDA, 0), 16);
  hurray_buffer v = view(src.data, dev(HURRAY_DEVICE_CUDA, 0), {4, 4}, {1, 4});
  hurray_buffer a{}, b{};
  ASSERT_EQ(hurray_copy(&v, dev(HURRAY_DEVICE_CUDA, 0), &a), HURRAY_OK) << hurray_last_error();
  f().reset();
  renew(0);  // src and a died with the old context; the cached module too
  hurray_buffer src2 = iota(dev(HURRAY_DEVICE_CUDA, 0), 16);
  hurray_buffer v2 = view(src2.data, dev(HURRAY_DEVICE_CUDA, 0), {4, 4}, {1, 4});
  ASSERT_EQ(hurray_copy(&v2, dev(HURRAY_DEVICE_CUDA, 0), &b), HURRAY_OK) << hurray_last_error();
  EXPECT_EQ(f().call_count("cuModuleLoadData"), 1);
  EXPECT_EQ(values(b), reference(v2));
  for (hurray_buffer *h : {&a, &b, &v, &src, &v2, &src2}) hurray_buffer_release(h);
}

// A kernel that the driver cannot load names the driver's error
// (JIT and PTX load errors used to print as "CUresult").
TEST_F(StridedCuda, KernelLoadErrorsAreNamed) {
  auto renew = reinterpret_cast<void (*)(int)>(dlsym(f().lib, "fake_cuda_renew_context"));
  ASSERT_NE(renew, nullptr);
  const struct {
    int code;
    const char *name;
  } errors[] = {
      {209, "CUDA_ERROR_NO_BINARY_FOR_GPU"},        {218, "CUDA_ERROR_INVALID_PTX"},
      {221, "CUDA_ERROR_JIT_COMPILER_NOT_FOUND"},   {222, "CUDA_ERROR_UNSUPPORTED_PTX_VERSION"},
      {223, "CUDA_ERROR_JIT_COMPILATION_DISABLED"}, {224, "CUDA_ERROR_UNSUPPORTED_EXEC_AFFINITY"}};
  for (const auto &e : errors) {
    SCOPED_TRACE(e.name);
    renew(0);  // a new incarnation: the kernel is loaded again
    hurray_buffer src = iota(dev(HURRAY_DEVICE_CUDA, 0), 16);
    hurray_buffer v = view(src.data, dev(HURRAY_DEVICE_CUDA, 0), {4, 4}, {1, 4});
    f().inject("cuModuleLoadData", e.code, 1);
    hurray_buffer c{};
    EXPECT_EQ(hurray_copy(&v, dev(HURRAY_DEVICE_CUDA, 0), &c), HURRAY_ERR_DEVICE);
    const std::string want = std::string(e.name) + " (" + std::to_string(e.code) + ")";
    EXPECT_NE(std::string(hurray_last_error()).find(want), std::string::npos)
        << hurray_last_error();
    f().reset();
    hurray_buffer_release(&v);
    hurray_buffer_release(&src);
  }
}

// Defect 10: a size-1 dimension with a huge stride multiplies nothing.
TEST_F(StridedCuda, HugeStrideOfASizeOneDimensionIsNeverMultiplied) {
  const int64_t huge = INT64_MAX / 4;
  hurray_buffer src{};
  const int64_t n = 8;
  const hurray_dtype i64{0, 64, 1};
  ASSERT_EQ(hurray_alloc(dev(HURRAY_DEVICE_CUDA, 0), i64, 1, &n, 0, &src), HURRAY_OK);
  for (int64_t i = 0; i < n; ++i) static_cast<int64_t *>(src.data)[i] = 100 + i;
  std::vector<int64_t> host(8);
  for (int64_t i = 0; i < n; ++i) host[static_cast<size_t>(i)] = 100 + i;
  struct Side {
    void *data;
    int32_t type;
  } sides[] = {{src.data, HURRAY_DEVICE_CUDA}, {host.data(), HURRAY_DEVICE_CPU}};
  for (const Side &s : sides) {
    hurray_buffer v = view(s.data, dev(s.type, 0), {1, 2}, {huge, 2}, 0, 64);
    for (int32_t target : {HURRAY_DEVICE_CPU, HURRAY_DEVICE_CUDA}) {
      SCOPED_TRACE(::testing::Message() << s.type << " to " << target);
      hurray_buffer c{};
      ASSERT_EQ(hurray_copy(&v, dev(target, 0), &c), HURRAY_OK) << hurray_last_error();
      EXPECT_EQ(static_cast<int64_t *>(c.data)[0], 100);
      EXPECT_EQ(static_cast<int64_t *>(c.data)[1], 102);
      hurray_buffer_release(&c);
    }
    hurray_buffer_release(&v);
  }
  hurray_buffer_release(&src);
}

class StridedHip : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fake_hip().loaded()) GTEST_SKIP() << "the fake HIP runtime is not in use";
    fake_hip().set_current_device(0);
    live_before_ = fake_hip().live_allocations();
    fake_hip().reset();
  }
  void TearDown() override {
    if (!fake_hip().loaded()) return;
    EXPECT_EQ(fake_hip().live_allocations(), live_before_);
    fake_hip().reset();
  }
  Fake &f() { return fake_hip(); }
  int64_t live_before_ = 0;
};

// Defect 5 on HIP: 2-D and 3-D layouts are one hipMemcpy2DAsync /
// hipMemcpy3DAsync; deeper ones one 3-D copy per outer index; what those
// cannot express (negative strides, overlapping rows) is staged through the
// host, as docs/impl/gpu.md §4 says.
TEST_F(StridedHip, StridedDeviceCopiesUseHipsCopies) {
  hurray_buffer src = iota(dev(HURRAY_DEVICE_ROCM, 1), 8192);
  struct Case {
    std::vector<int64_t> shape, strides;
    uint64_t offset;
    const char *fn;
    int calls;
  } cases[] = {
      {{4, 3}, {5, 1}, 8, "hipMemcpy2DAsync", 1},
      {{2, 3, 4}, {60, 10, 1}, 0, "hipMemcpy3DAsync", 1},
      {{2, 2, 3, 4}, {130, 60, 10, 1}, 0, "hipMemcpy3DAsync", 2},  // one 3-D copy per outer index
      {{2, 2, 3, 4}, {1, 120, 60, 10}, 0, "hipMemcpy3DAsync", 4},  // slices of single elements
      {{4, 3}, {1, 4}, 0, "hipMemcpy2DAsync", 4},                  // a transpose: a column per call
      {{2, 2}, {-4, -2}, 44, "hipMemcpyAsync", 4},                 // backwards: an element per call
      {{5000}, {-1}, 4999 * 4, "(staged)", 0},                     // 5000 calls would be too many
  };
  void *stream = reinterpret_cast<void *>(0x4440);
  for (const Case &k : cases) {
    SCOPED_TRACE(::testing::Message() << "case " << (&k - cases));
    hurray_buffer v = view(src.data, dev(HURRAY_DEVICE_ROCM, 1), k.shape, k.strides, k.offset);
    const std::vector<float> want = reference(v);
    for (int32_t target : {HURRAY_DEVICE_ROCM, HURRAY_DEVICE_CPU}) {
      f().reset();
      hurray_buffer c{};
      ASSERT_EQ(
          hurray_copy_async(&v, dev(target, target == HURRAY_DEVICE_ROCM ? 1 : 0), stream, &c),
          HURRAY_OK)
          << hurray_last_error();
      EXPECT_EQ(values(c), want);
      auto calls = f().log(k.fn);
      ASSERT_EQ(static_cast<int>(calls.size()), k.calls);
      uint64_t bytes = 0;
      for (const fake_call &call : calls) {
        EXPECT_EQ(call.stream, stream);
        EXPECT_EQ(call.device, 1);
        bytes += call.bytes;
      }
      if (k.calls > 0) {
        EXPECT_EQ(bytes, want.size() * 4) << "the elements only: no staging";
        if (std::strcmp(k.fn, "hipMemcpyAsync") != 0) {
          EXPECT_EQ(f().call_count("hipMemcpyAsync"), 0) << "no staging";
        }
      } else {
        // The documented host fallback: the whole span comes to the host.
        auto staged = f().log("hipMemcpyAsync");
        ASSERT_GE(staged.size(), 1u);
        EXPECT_EQ(staged[0].bytes, want.size() * 4);
        EXPECT_EQ(staged[0].other, src.data);
      }
      hurray_buffer_release(&c);
    }
    hurray_buffer_release(&v);
  }
  hurray_buffer_release(&src);
}

// Defect 4 on HIP: pinned host memory is read after the default stream.
TEST_F(StridedHip, PinnedStridedSourceWaitsForTheDefaultStream) {
  hurray_buffer pinned = iota(dev(HURRAY_DEVICE_ROCM_HOST), 12);
  hurray_buffer t = view(pinned.data, dev(HURRAY_DEVICE_ROCM_HOST), {4, 3}, {1, 4});
  hurray_buffer c{};
  ASSERT_EQ(hurray_copy(&t, dev(HURRAY_DEVICE_CPU), &c), HURRAY_OK) << hurray_last_error();
  EXPECT_EQ(values(c), reference(t));
  auto syncs = f().log("hipStreamSynchronize");
  ASSERT_EQ(syncs.size(), 1u);
  EXPECT_EQ(syncs[0].stream, nullptr);
  for (hurray_buffer *h : {&c, &t, &pinned}) hurray_buffer_release(h);
}

}  // namespace
