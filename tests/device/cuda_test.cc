// SPDX-License-Identifier: Apache-2.0
// libhurray's CUDA back end against the fake driver (tests/fake_drivers/fake_cuda.cc):
// allocation of each kind, release from any thread in the right context,
// stream-ordered frees, fan-out, failures, fork, DLPack, import checks,
// copies and stream waits (docs/impl/gpu.md).
#include <hurray/dlpack.h>
#include <gtest/gtest.h>
#include <pthread.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "support.h"

using namespace gpu_test;

namespace {

constexpr int kCudaOutOfMemory = 2;
constexpr int kCudaIllegalAddress = 700;
constexpr int kCudaUnknown = 999;

class CudaFake : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fake_cuda().loaded()) GTEST_SKIP() << "the fake CUDA driver is not in use";
    fake_cuda().reset();
    fake_cuda().set_current_device(-1);
    live_before_ = fake_cuda().live_allocations();
  }
  void TearDown() override {
    if (!fake_cuda().loaded()) return;
    fake_cuda().set_current_device(-1);
    fake_cuda().reset();
  }
  Fake &f() { return fake_cuda(); }
  int64_t live_before_ = 0;
};

uint64_t this_thread() { return static_cast<uint64_t>(pthread_self()); }

struct Kind {
  int32_t type;
  int32_t id;
  const char *alloc_fn;
  const char *free_fn;
};

const Kind kKinds[] = {
    {HURRAY_DEVICE_CUDA, 0, "cuMemAlloc", "cuMemFree"},
    {HURRAY_DEVICE_CUDA, 1, "cuMemAlloc", "cuMemFree"},
    {HURRAY_DEVICE_CUDA_HOST, 0, "cuMemHostAlloc", "cuMemFreeHost"},
    {HURRAY_DEVICE_CUDA_MANAGED, 0, "cuMemAllocManaged", "cuMemFree"},
};

}  // namespace

TEST_F(CudaFake, AllocatesEachKindInItsDevicesContext) {
  for (const Kind &k : kKinds) {
    SCOPED_TRACE(k.alloc_fn + std::string(" device ") + std::to_string(k.id));
    f().reset();
    hurray_buffer h = alloc_ok(dev(k.type, k.id));
    ASSERT_NE(h.release_fn, nullptr);
    EXPECT_EQ(h.device.device_type, k.type);
    EXPECT_EQ(h.device.device_id, k.id);
    EXPECT_NE(h.data, nullptr);
    auto allocs = f().log(k.alloc_fn);
    ASSERT_EQ(allocs.size(), 1u);
    EXPECT_EQ(allocs[0].bytes, 48u);
    EXPECT_EQ(allocs[0].device, k.id);
    EXPECT_EQ(allocs[0].ptr, h.data);
    void *data = h.data;
    EXPECT_EQ(hurray_buffer_release(&h), HURRAY_OK);
    auto frees = f().log(k.free_fn);
    ASSERT_EQ(frees.size(), 1u);
    EXPECT_EQ(frees[0].ptr, data);
    EXPECT_EQ(frees[0].device, k.id);
    EXPECT_EQ(frees[0].result, 0);
  }
  EXPECT_EQ(f().live_allocations(), live_before_);
  EXPECT_EQ(f().current_device(), -1) << "the test thread had no context and must have none";
}

TEST_F(CudaFake, EntryPointsComeThroughGetProcAddressAtSupportedVersions) {
  hurray_buffer h = alloc_ok(dev(HURRAY_DEVICE_CUDA, 0));  // loaded by now
  EXPECT_EQ(hurray_buffer_release(&h), HURRAY_OK);
  EXPECT_EQ(f().used_proc_address_v2(), 1);
  EXPECT_GT(f().max_requested_version(), 0);
  EXPECT_LE(f().max_requested_version(), 12080);  // FAKE_CUDA_DRIVER_VERSION default
  EXPECT_EQ(f().too_new_requests(), 0);
  EXPECT_EQ(f().init_count(), 1);
}

TEST_F(CudaFake, AllocationLeavesTheCallersContextAsItWas) {
  std::thread([&] {
    EXPECT_EQ(f().current_device(), -1);
    hurray_buffer h = alloc_ok(dev(HURRAY_DEVICE_CUDA, 1));
    EXPECT_EQ(f().current_device(), -1) << "no context before, none after";
    EXPECT_EQ(hurray_buffer_release(&h), HURRAY_OK);
    EXPECT_EQ(f().current_device(), -1);
  }).join();
  std::thread([&] {
    f().set_current_device(0);
    hurray_buffer h = alloc_ok(dev(HURRAY_DEVICE_CUDA, 1));
    EXPECT_EQ(f().current_device(), 0) << "device 0's context was current and must stay";
    EXPECT_EQ(hurray_buffer_release(&h), HURRAY_OK);
    EXPECT_EQ(f().current_device(), 0);
    f().set_current_device(-1);
  }).join();
  // Already in the right context: nothing pushed.
  std::thread([&] {
    f().set_current_device(1);
    f().reset();
    hurray_buffer h = alloc_ok(dev(HURRAY_DEVICE_CUDA, 1));
    EXPECT_EQ(hurray_buffer_release(&h), HURRAY_OK);
    EXPECT_EQ(f().call_count("cuCtxPushCurrent"), 0);
    EXPECT_EQ(f().current_device(), 1);
    f().set_current_device(-1);
  }).join();
}

TEST_F(CudaFake, ReleaseOnAnotherThreadFreesOnTheOwningDeviceAndRestoresItsContext) {
  hurray_buffer h = alloc_ok(dev(HURRAY_DEVICE_CUDA, 1));
  void *data = h.data;
  uint64_t releaser = 0;
  int after = -2;
  std::thread([&] {
    f().set_current_device(0);  // this thread works on device 0
    releaser = this_thread();
    EXPECT_EQ(hurray_buffer_release(&h), HURRAY_OK);
    after = f().current_device();
    f().set_current_device(-1);
  }).join();
  auto frees = f().log("cuMemFree");
  ASSERT_EQ(frees.size(), 1u);
  EXPECT_EQ(frees[0].ptr, data);
  EXPECT_EQ(frees[0].thread, releaser);
  EXPECT_EQ(frees[0].device, 1) << "freed in device 1's context";
  EXPECT_EQ(after, 0) << "the releasing thread's own context is back";
}

TEST_F(CudaFake, ReleaseOnAThreadWithoutContextCreatesNoneOnDeviceZero) {
  hurray_buffer h = alloc_ok(dev(HURRAY_DEVICE_CUDA, 1));
  const int retains0 = f().primary_retains(0);
  f().reset();
  uint64_t releaser = 0;
  int after = -2;
  std::thread([&] {
    releaser = this_thread();
    EXPECT_EQ(hurray_buffer_release(&h), HURRAY_OK);
    after = f().current_device();
  }).join();
  EXPECT_EQ(after, -1) << "a thread with no context must be left with none";
  EXPECT_EQ(f().primary_retains(0), retains0) << "device 0's context was not touched";
  auto frees = f().log("cuMemFree");
  ASSERT_EQ(frees.size(), 1u);
  EXPECT_EQ(frees[0].device, 1);
  for (const fake_call &c : f().log(nullptr)) {
    if (c.thread == releaser) {
      EXPECT_NE(c.device, 0) << c.fn << " ran on the releasing thread in device 0's context";
    }
  }
}

TEST_F(CudaFake, StreamOrderedAllocationOnlyForDeviceMemory) {
  const int64_t shape[1] = {4};
  void *stream = reinterpret_cast<void *>(0x77);
  hurray_buffer h;
  std::memset(&h, 0xAB, sizeof h);
  const hurray_buffer before = h;
  for (int32_t type : {HURRAY_DEVICE_CUDA_HOST, HURRAY_DEVICE_CUDA_MANAGED, HURRAY_DEVICE_CPU}) {
    EXPECT_EQ(hurray_alloc_async(dev(type), kFloat32, 1, shape, 0, stream, &h),
              HURRAY_ERR_UNSUPPORTED_DEVICE);
    EXPECT_NE(std::strstr(hurray_last_error(), "stream-ordered"), nullptr) << hurray_last_error();
    EXPECT_EQ(std::memcmp(&h, &before, sizeof h), 0);
  }
  // A NULL stream is hurray_alloc.
  ASSERT_EQ(hurray_alloc_async(dev(HURRAY_DEVICE_CUDA, 0), kFloat32, 1, shape, 0, nullptr, &h),
            HURRAY_OK);
  EXPECT_EQ(f().call_count("cuMemAllocAsync"), 0);
  EXPECT_EQ(f().call_count("cuMemAlloc"), 1);
  EXPECT_EQ(hurray_buffer_release(&h), HURRAY_OK);
}

// The common cases run in vendor_test.cc; managed memory and the errors
// other than out-of-memory here.
TEST_F(CudaFake, ManagedAllocationFailureAndOtherDriverErrors) {
  const int64_t shape[1] = {1 << 20};
  f().inject("cuMemAllocManaged", kCudaOutOfMemory, 1);
  hurray_buffer h;
  std::memset(&h, 0xAB, sizeof h);
  const hurray_buffer before = h;
  EXPECT_EQ(hurray_alloc(dev(HURRAY_DEVICE_CUDA_MANAGED), kFloat32, 1, shape, 0, &h),
            HURRAY_ERR_OUT_OF_MEMORY);
  EXPECT_NE(std::strstr(hurray_last_error(), "cuMemAllocManaged"), nullptr) << hurray_last_error();
  EXPECT_EQ(std::memcmp(&h, &before, sizeof h), 0) << "out untouched";
  EXPECT_EQ(f().current_device(), -1);
  EXPECT_EQ(hurray_alloc(dev(HURRAY_DEVICE_CUDA_MANAGED, 3), kFloat32, 1, shape, 0, &h),
            HURRAY_ERR_UNSUPPORTED_DEVICE);
  // Any other driver error is HURRAY_ERR_DEVICE.
  f().inject("cuMemAlloc", kCudaUnknown, 1);
  EXPECT_EQ(hurray_alloc(dev(HURRAY_DEVICE_CUDA, 1), kFloat32, 1, shape, 0, &h), HURRAY_ERR_DEVICE);
  EXPECT_NE(std::strstr(hurray_last_error(), "CUDA_ERROR_UNKNOWN"), nullptr);
  f().inject("cuCtxPushCurrent", kCudaUnknown, 1);
  EXPECT_EQ(hurray_alloc(dev(HURRAY_DEVICE_CUDA, 1), kFloat32, 1, shape, 0, &h), HURRAY_ERR_DEVICE);
  EXPECT_EQ(f().live_allocations(), live_before_);
}

TEST_F(CudaFake, NonexistentDevicesAreRejected) {
  const int64_t shape[1] = {4};
  hurray_buffer h{};
  EXPECT_EQ(hurray_alloc(dev(HURRAY_DEVICE_CUDA, 2), kFloat32, 1, shape, 0, &h),
            HURRAY_ERR_UNSUPPORTED_DEVICE);
  EXPECT_NE(std::strstr(hurray_last_error(), "CUDA device 2 does not exist"), nullptr)
      << hurray_last_error();
  EXPECT_EQ(hurray_alloc(dev(HURRAY_DEVICE_CUDA_HOST, 2), kFloat32, 1, shape, 0, &h),
            HURRAY_ERR_UNSUPPORTED_DEVICE);
  EXPECT_EQ(hurray_alloc(dev(HURRAY_DEVICE_CUDA_MANAGED, 2), kFloat32, 1, shape, 0, &h),
            HURRAY_ERR_UNSUPPORTED_DEVICE);
  EXPECT_EQ(f().live_allocations(), live_before_);
}

namespace {
struct HookLog {
  std::vector<std::pair<int32_t, std::string>> calls;
};
void record_hook(int32_t status, const char *message, void *user) {
  static_cast<HookLog *>(user)->calls.emplace_back(status, message);
}
}  // namespace

TEST_F(CudaFake, FailedFreeIsCountedAndSentToTheHookNeverPrinted) {
  HookLog log;
  ASSERT_EQ(hurray_set_diagnostic_hook(&record_hook, &log), HURRAY_OK);
  const Diag before = diagnostics();
  hurray_buffer h = alloc_ok(dev(HURRAY_DEVICE_CUDA, 1));
  f().inject("cuMemFree", kCudaIllegalAddress, 1);
  testing::internal::CaptureStderr();
  std::thread([&] { EXPECT_EQ(hurray_buffer_release(&h), HURRAY_OK); }).join();
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "");
  const Diag after = diagnostics();
  EXPECT_EQ(after.failed, before.failed + 1);
  EXPECT_EQ(after.teardown, before.teardown);
  ASSERT_EQ(log.calls.size(), 1u);
  EXPECT_EQ(log.calls[0].first, HURRAY_ERR_DEVICE);
  EXPECT_NE(log.calls[0].second.find("cuMemFree"), std::string::npos) << log.calls[0].second;
  EXPECT_NE(log.calls[0].second.find("CUDA_ERROR_ILLEGAL_ADDRESS"), std::string::npos);
  EXPECT_NE(log.calls[0].second.find("kDLCUDA 1"), std::string::npos);

  // Without a hook: counted only.
  ASSERT_EQ(hurray_set_diagnostic_hook(nullptr, nullptr), HURRAY_OK);
  h = alloc_ok(dev(HURRAY_DEVICE_CUDA, 0));
  f().inject("cuMemFree", kCudaIllegalAddress, 1);
  testing::internal::CaptureStderr();
  EXPECT_EQ(hurray_buffer_release(&h), HURRAY_OK);
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "");
  EXPECT_EQ(diagnostics().failed, before.failed + 2);
  EXPECT_EQ(log.calls.size(), 1u);
}

TEST_F(CudaFake, DiagnosticsHonourTheCallersStructSize) {
  hurray_diagnostics d;
  std::memset(&d, 0xCD, sizeof d);
  d.struct_size = offsetof(hurray_diagnostics, teardown_leaks);  // an older, shorter struct
  ASSERT_EQ(hurray_get_diagnostics(&d), HURRAY_OK);
  uint64_t untouched;
  std::memset(&untouched, 0xCD, sizeof untouched);
  EXPECT_EQ(d.teardown_leaks, untouched);
  d.struct_size = 4;
  EXPECT_EQ(hurray_get_diagnostics(&d), HURRAY_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(hurray_get_diagnostics(nullptr), HURRAY_ERR_INVALID_ARGUMENT);
}

TEST_F(CudaFake, DeviceTypeAndIdSurviveEveryConversion) {
  for (const Kind &k : kKinds) {
    SCOPED_TRACE(k.alloc_fn + std::string(" device ") + std::to_string(k.id));
    f().reset();
    hurray_buffer h = alloc_ok(dev(k.type, k.id));
    void *data = h.data;
    hurray_buffer two[2];
    ASSERT_EQ(hurray_share(&h, 2, two), HURRAY_OK);
    for (hurray_buffer &b : two) EXPECT_EQ(b.device.device_id, k.id);

    DLManagedTensorVersioned *tv = nullptr;
    ASSERT_EQ(hurray_to_dlpack_versioned(&two[0], &tv), HURRAY_OK);
    EXPECT_EQ(static_cast<int32_t>(tv->dl_tensor.device.device_type), k.type);
    EXPECT_EQ(tv->dl_tensor.device.device_id, k.id);
    hurray_buffer back{};
    ASSERT_EQ(hurray_from_dlpack_versioned(tv, HURRAY_IMPORT_DEFAULT, &back), HURRAY_OK);
    EXPECT_EQ(back.device.device_type, k.type);
    EXPECT_EQ(back.device.device_id, k.id);
    DLManagedTensor *tl = nullptr;
    ASSERT_EQ(hurray_to_dlpack(&back, &tl), HURRAY_OK);
    EXPECT_EQ(static_cast<int32_t>(tl->dl_tensor.device.device_type), k.type);
    EXPECT_EQ(tl->dl_tensor.device.device_id, k.id);
    ASSERT_EQ(hurray_from_dlpack(tl, HURRAY_IMPORT_CHECK_DEVICE_POINTER, &back), HURRAY_OK)
        << hurray_last_error();
    EXPECT_EQ(back.device.device_type, k.type);
    EXPECT_EQ(back.device.device_id, k.id);
    EXPECT_EQ(back.data, data);
    EXPECT_EQ(hurray_buffer_release(&back), HURRAY_OK);
    EXPECT_EQ(f().call_count(k.free_fn), 0) << "one consumer still holds it";
    EXPECT_EQ(hurray_buffer_release(&two[1]), HURRAY_OK);
    EXPECT_EQ(f().call_count(k.free_fn), 1);
  }
}

namespace {
std::atomic<int> g_deleted{0};
void count_delete(DLManagedTensor *) { g_deleted.fetch_add(1); }

// A legacy tensor over `data` that frees nothing but counts its deleter.
DLManagedTensor make_tensor(void *data, int32_t type, int32_t id, int32_t ndim, int64_t *shape,
                            int64_t *strides, uint64_t byte_offset = 0) {
  DLManagedTensor t{};
  t.dl_tensor.data = data;
  t.dl_tensor.device.device_type = static_cast<DLDeviceType>(type);
  t.dl_tensor.device.device_id = id;
  t.dl_tensor.ndim = ndim;
  t.dl_tensor.dtype = DLDataType{kDLFloat, 32, 1};
  t.dl_tensor.shape = shape;
  t.dl_tensor.strides = strides;
  t.dl_tensor.byte_offset = byte_offset;
  t.deleter = &count_delete;
  return t;
}
}  // namespace

TEST_F(CudaFake, ImportPointerCheckAcceptsTheOwningDeviceAndRejectsOthers) {
  hurray_buffer dev1 = alloc_ok(dev(HURRAY_DEVICE_CUDA, 1));
  hurray_buffer pinned = alloc_ok(dev(HURRAY_DEVICE_CUDA_HOST));
  hurray_buffer managed = alloc_ok(dev(HURRAY_DEVICE_CUDA_MANAGED));
  std::vector<float> host(12);
  int64_t shape[1] = {12};
  int64_t strides[1] = {1};
  struct Case {
    void *data;
    int32_t type, id;
    bool ok;
    const char *says;
  } cases[] = {
      {dev1.data, HURRAY_DEVICE_CUDA, 1, true, nullptr},
      {dev1.data, HURRAY_DEVICE_CUDA, 0, false, "device ordinal 1"},
      {dev1.data, HURRAY_DEVICE_CUDA_HOST, 0, false, "device memory"},
      {host.data(), HURRAY_DEVICE_CUDA, 0, false, "unregistered host memory"},
      {pinned.data, HURRAY_DEVICE_CUDA_HOST, 0, true, nullptr},
      {pinned.data, HURRAY_DEVICE_CUDA, 0, false, "pinned host memory"},
      {managed.data, HURRAY_DEVICE_CUDA_MANAGED, 0, true, nullptr},
      {dev1.data, HURRAY_DEVICE_CUDA_MANAGED, 0, false, "device memory"},
      {host.data(), HURRAY_DEVICE_CPU, 0, true, nullptr},  // CPU is not checked
  };
  for (const Case &c : cases) {
    SCOPED_TRACE(std::to_string(c.type) + "/" + std::to_string(c.id));
    DLManagedTensor t = make_tensor(c.data, c.type, c.id, 1, shape, strides);
    hurray_buffer out;
    std::memset(&out, 0xAB, sizeof out);
    const int deleted = g_deleted.load();
    const int32_t st = hurray_from_dlpack(&t, HURRAY_IMPORT_CHECK_DEVICE_POINTER, &out);
    if (c.ok) {
      ASSERT_EQ(st, HURRAY_OK) << hurray_last_error();
      EXPECT_EQ(hurray_buffer_release(&out), HURRAY_OK);
      EXPECT_EQ(g_deleted.load(), deleted + 1);
    } else {
      EXPECT_EQ(st, HURRAY_ERR_INVALID_ARGUMENT);
      EXPECT_NE(std::strstr(hurray_last_error(), c.says), nullptr) << hurray_last_error();
      hurray_buffer pattern;
      std::memset(&pattern, 0xAB, sizeof pattern);
      EXPECT_EQ(std::memcmp(&out, &pattern, sizeof out), 0) << "out untouched";
      EXPECT_EQ(g_deleted.load(), deleted) << "the caller still owns the tensor";
    }
  }
  // Without the option nothing is asked of the driver.
  f().reset();
  DLManagedTensor t = make_tensor(host.data(), HURRAY_DEVICE_CUDA, 1, 1, shape, strides);
  hurray_buffer out{};
  ASSERT_EQ(hurray_from_dlpack(&t, HURRAY_IMPORT_DEFAULT, &out), HURRAY_OK);
  EXPECT_EQ(hurray_buffer_release(&out), HURRAY_OK);
  EXPECT_EQ(f().call_count("cuPointerGetAttributes"), 0);
  // Unknown option bits are still refused.
  EXPECT_EQ(hurray_from_dlpack(&t, 1u << 7, &out), HURRAY_ERR_INVALID_ARGUMENT);
  // A driver that wants a context for the query is asked again in the
  // claimed device's context.
  f().reset();
  f().inject("cuPointerGetAttributes", 201 /* CUDA_ERROR_INVALID_CONTEXT */, 1);
  DLManagedTensor t1 = make_tensor(dev1.data, HURRAY_DEVICE_CUDA, 1, 1, shape, strides);
  ASSERT_EQ(hurray_from_dlpack(&t1, HURRAY_IMPORT_CHECK_DEVICE_POINTER, &out), HURRAY_OK)
      << hurray_last_error();
  auto queries = f().log("cuPointerGetAttributes");
  ASSERT_EQ(queries.size(), 2u);
  EXPECT_EQ(queries[0].device, -1);
  EXPECT_EQ(queries[1].device, 1);
  EXPECT_EQ(f().current_device(), -1);
  EXPECT_EQ(hurray_buffer_release(&out), HURRAY_OK);
  for (hurray_buffer *b : {&dev1, &pinned, &managed}) hurray_buffer_release(b);
}

TEST_F(CudaFake, CopiesBetweenCpuAndCudaKeepTheElements) {
  const int64_t shape[2] = {3, 4};
  hurray_buffer cpu{};
  ASSERT_EQ(hurray_alloc(dev(HURRAY_DEVICE_CPU), kFloat32, 2, shape, 0, &cpu), HURRAY_OK);
  for (int i = 0; i < 12; ++i) static_cast<float *>(cpu.data)[i] = static_cast<float>(i);

  hurray_buffer on1{}, on0{}, pinned{}, managed{}, back{};
  ASSERT_EQ(hurray_copy(&cpu, dev(HURRAY_DEVICE_CUDA, 1), &on1), HURRAY_OK) << hurray_last_error();
  EXPECT_EQ(on1.device.device_id, 1);
  EXPECT_EQ(on1.flags & HURRAY_FLAG_IS_COPIED, HURRAY_FLAG_IS_COPIED);
  auto copies = f().log("cuMemcpyAsync");
  ASSERT_EQ(copies.size(), 1u);
  EXPECT_EQ(copies[0].device, 1) << "copied in the destination device's context";
  EXPECT_EQ(copies[0].ptr, on1.data);
  EXPECT_EQ(copies[0].other, cpu.data);
  EXPECT_EQ(copies[0].bytes, 48u);
  EXPECT_GE(f().call_count("cuStreamSynchronize"), 1) << "synchronous by default";
  ASSERT_EQ(hurray_copy(&on1, dev(HURRAY_DEVICE_CUDA, 0), &on0), HURRAY_OK);
  ASSERT_EQ(hurray_copy(&on0, dev(HURRAY_DEVICE_CUDA_HOST), &pinned), HURRAY_OK);
  ASSERT_EQ(hurray_copy(&pinned, dev(HURRAY_DEVICE_CUDA_MANAGED), &managed), HURRAY_OK);
  ASSERT_EQ(hurray_copy(&managed, dev(HURRAY_DEVICE_CPU), &back), HURRAY_OK);
  for (int i = 0; i < 12; ++i) EXPECT_EQ(static_cast<float *>(back.data)[i], i);
  for (hurray_buffer *b : {&cpu, &on1, &on0, &pinned, &managed, &back}) hurray_buffer_release(b);
  EXPECT_EQ(f().live_allocations(), live_before_);
}

TEST_F(CudaFake, NonContiguousSourcesAreStagedThroughTheHost) {
  // CPU source: the transpose of a 3x4 matrix.
  std::vector<float> m(12);
  for (int i = 0; i < 12; ++i) m[static_cast<size_t>(i)] = static_cast<float>(i);
  int64_t tshape[2] = {4, 3};
  int64_t tstrides[2] = {1, 4};
  DLManagedTensor t = make_tensor(m.data(), HURRAY_DEVICE_CPU, 0, 2, tshape, tstrides);
  hurray_buffer view{}, on_gpu{}, back{};
  ASSERT_EQ(hurray_from_dlpack(&t, 0, &view), HURRAY_OK);
  ASSERT_EQ(hurray_copy(&view, dev(HURRAY_DEVICE_CUDA, 1), &on_gpu), HURRAY_OK)
      << hurray_last_error();
  ASSERT_EQ(hurray_copy(&on_gpu, dev(HURRAY_DEVICE_CPU), &back), HURRAY_OK);
  for (int r = 0; r < 4; ++r) {
    for (int c = 0; c < 3; ++c) {
      EXPECT_EQ(static_cast<float *>(back.data)[r * 3 + c], m[static_cast<size_t>(c * 4 + r)]);
    }
  }
  hurray_buffer_release(&back);

  // Device source: every other element of row 1 onwards, walked backwards.
  int64_t vshape[2] = {2, 2};
  int64_t vstrides[2] = {-4, -2};
  // Element (0, 0) is m[11] in the copy on the GPU: byte offset 44.
  DLManagedTensor dt = make_tensor(on_gpu.data, HURRAY_DEVICE_CUDA, 1, 2, vshape, vstrides, 0);
  // The GPU copy is the transpose (row-major 4x3); index j holds m[(j%3)*4 + j/3].
  dt.dl_tensor.byte_offset = 11 * 4;
  hurray_buffer dview{};
  ASSERT_EQ(hurray_from_dlpack(&dt, HURRAY_IMPORT_CHECK_DEVICE_POINTER, &dview), HURRAY_OK)
      << hurray_last_error();
  const float *gpu = static_cast<const float *>(on_gpu.data);
  for (int32_t target : {HURRAY_DEVICE_CPU, HURRAY_DEVICE_CUDA}) {
    hurray_buffer c{};
    ASSERT_EQ(hurray_copy(&dview, dev(target, 0), &c), HURRAY_OK) << hurray_last_error();
    const float *out = static_cast<const float *>(c.data);  // fake device memory is host memory
    EXPECT_EQ(out[0], gpu[11]);
    EXPECT_EQ(out[1], gpu[9]);
    EXPECT_EQ(out[2], gpu[7]);
    EXPECT_EQ(out[3], gpu[5]);
    hurray_buffer_release(&c);
  }
  hurray_buffer_release(&dview);
  hurray_buffer_release(&on_gpu);
  hurray_buffer_release(&view);
  EXPECT_EQ(f().live_allocations(), live_before_);
}

TEST_F(CudaFake, CopyOnAStreamIsOrderedOnIt) {
  void *stream = reinterpret_cast<void *>(0xABC0);
  const int64_t shape[1] = {16};
  hurray_buffer cpu{}, on_gpu{}, back{};
  ASSERT_EQ(hurray_alloc(dev(HURRAY_DEVICE_CPU), kFloat32, 1, shape, 0, &cpu), HURRAY_OK);
  for (int i = 0; i < 16; ++i) static_cast<float *>(cpu.data)[i] = 2.0f * i;
  f().reset();
  ASSERT_EQ(hurray_copy_async(&cpu, dev(HURRAY_DEVICE_CUDA, 1), stream, &on_gpu), HURRAY_OK)
      << hurray_last_error();
  auto allocs = f().log("cuMemAllocAsync");
  ASSERT_EQ(allocs.size(), 1u);
  EXPECT_EQ(allocs[0].stream, stream);
  auto copies = f().log("cuMemcpyAsync");
  ASSERT_EQ(copies.size(), 1u);
  EXPECT_EQ(copies[0].stream, stream);
  EXPECT_EQ(f().call_count("cuStreamSynchronize"), 0) << "a device destination is not waited for";

  f().reset();
  ASSERT_EQ(hurray_copy_async(&on_gpu, dev(HURRAY_DEVICE_CPU), stream, &back), HURRAY_OK);
  auto syncs = f().log("cuStreamSynchronize");
  ASSERT_EQ(syncs.size(), 1u) << "a CPU destination is complete on return";
  EXPECT_EQ(syncs[0].stream, stream);
  for (int i = 0; i < 16; ++i) EXPECT_EQ(static_cast<float *>(back.data)[i], 2.0f * i);

  hurray_buffer_release(&on_gpu);
  auto frees = f().log("cuMemFreeAsync");
  ASSERT_EQ(frees.size(), 1u);
  EXPECT_EQ(frees[0].stream, stream);
  hurray_buffer_release(&back);
  hurray_buffer_release(&cpu);
}

TEST_F(CudaFake, FailedCopyReturnsDeviceErrorAndLeaksNothing) {
  const int64_t shape[1] = {16};
  hurray_buffer cpu{}, out;
  ASSERT_EQ(hurray_alloc(dev(HURRAY_DEVICE_CPU), kFloat32, 1, shape, 0, &cpu), HURRAY_OK);
  std::memset(&out, 0xAB, sizeof out);
  const hurray_buffer before = out;
  f().inject("cuMemcpyAsync", kCudaIllegalAddress, 1);
  EXPECT_EQ(hurray_copy(&cpu, dev(HURRAY_DEVICE_CUDA, 0), &out), HURRAY_ERR_DEVICE);
  EXPECT_NE(std::strstr(hurray_last_error(), "cuMemcpyAsync"), nullptr) << hurray_last_error();
  EXPECT_EQ(std::memcmp(&out, &before, sizeof out), 0);
  EXPECT_EQ(f().live_allocations(), live_before_);
  if (fake_hip().loaded()) {
    hurray_buffer g = alloc_ok(dev(HURRAY_DEVICE_CUDA, 0));
    EXPECT_EQ(hurray_copy(&g, dev(HURRAY_DEVICE_ROCM, 0), &out), HURRAY_ERR_UNSUPPORTED_DEVICE);
    EXPECT_NE(std::strstr(hurray_last_error(), "through kDLCPU"), nullptr) << hurray_last_error();
    hurray_buffer_release(&g);
  }
  hurray_buffer_release(&cpu);
}

TEST_F(CudaFake, ConcurrentAllocationsAndCrossThreadReleases) {
  constexpr int kThreads = 4;
  constexpr int kEach = 200;
  std::vector<hurray_buffer> handles(kThreads * kEach);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kEach; ++i) {
        handles[static_cast<size_t>(t * kEach + i)] =
            alloc_ok(dev(HURRAY_DEVICE_CUDA, (t + i) % 2));
      }
    });
  }
  for (auto &th : threads) th.join();
  threads.clear();
  // Released by other threads than those that allocated them.
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kEach; ++i) {
        hurray_buffer_release(&handles[static_cast<size_t>(((t + 1) % kThreads) * kEach + i)]);
      }
      EXPECT_EQ(f().current_device(), -1);
    });
  }
  for (auto &th : threads) th.join();
  EXPECT_EQ(f().live_allocations(), live_before_);
  for (const fake_call &c : f().log("cuMemFree")) {
    EXPECT_EQ(c.result, 0);
  }
}

namespace {
std::atomic<int> g_swapped_calls{0};
void swapped_hook(int32_t, const char *, void *user) {
  static_cast<std::atomic<int> *>(user)->fetch_add(1);
  g_swapped_calls.fetch_add(1);
}
}  // namespace

TEST_F(CudaFake, HookCanBeSwappedWhileReleasesFail) {
  constexpr int kThreads = 4, kEach = 50;
  std::vector<hurray_buffer> handles(kThreads * kEach);
  for (hurray_buffer &h : handles) h = alloc_ok(dev(HURRAY_DEVICE_CUDA, 1));
  const Diag before = diagnostics();
  f().inject("cuMemFree", kCudaIllegalAddress, -1);  // every free fails
  std::atomic<int> a{0}, b{0};
  std::atomic<bool> done{false};
  std::thread swapper([&] {
    while (!done.load()) {
      ASSERT_EQ(hurray_set_diagnostic_hook(&swapped_hook, &a), HURRAY_OK);
      ASSERT_EQ(hurray_set_diagnostic_hook(&swapped_hook, &b), HURRAY_OK);
      ASSERT_EQ(hurray_set_diagnostic_hook(nullptr, nullptr), HURRAY_OK);
    }
  });
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kEach; ++i)
        hurray_buffer_release(&handles[static_cast<size_t>(t * kEach + i)]);
    });
  }
  for (auto &th : threads) th.join();
  done.store(true);
  swapper.join();
  f().reset();  // stop failing
  EXPECT_EQ(diagnostics().failed, before.failed + kThreads * kEach);
  EXPECT_LE(a.load() + b.load(), kThreads * kEach);
  EXPECT_EQ(f().current_device(), -1);
}

TEST_F(CudaFake, ZeroElementTensorsNeedNoDeviceMemory) {
  const int64_t shape[2] = {0, 5};
  hurray_buffer cpu{}, g{}, back{};
  ASSERT_EQ(hurray_alloc(dev(HURRAY_DEVICE_CPU), kFloat32, 2, shape, 0, &cpu), HURRAY_OK);
  ASSERT_EQ(hurray_copy(&cpu, dev(HURRAY_DEVICE_CUDA, 1), &g), HURRAY_OK) << hurray_last_error();
  EXPECT_EQ(g.data, nullptr);
  EXPECT_EQ(g.device.device_id, 1);
  ASSERT_EQ(hurray_copy_async(&g, dev(HURRAY_DEVICE_CPU), reinterpret_cast<void *>(0x42), &back),
            HURRAY_OK);
  EXPECT_EQ(f().call_count("cuMemAlloc") + f().call_count("cuMemcpyAsync"), 0);
  for (hurray_buffer *h : {&cpu, &g, &back}) EXPECT_EQ(hurray_buffer_release(h), HURRAY_OK);
  EXPECT_EQ(f().call_count("cuMemFree"), 0);
}

// --- Review findings: per-thread streams, cross-device copies, context
// --- restore failures, zero-element requests, diagnostics, error mapping.

TEST_F(CudaFake, PerThreadDefaultStreamMemoryIsNotFreedOnTheReleasersStream) {
  // CU_STREAM_PER_THREAD names the calling thread's stream: a free queued on
  // it from the releasing thread would not be ordered after the allocating
  // thread's work. Such requests allocate and free synchronously.
  void *const per_thread = reinterpret_cast<void *>(2);
  hurray_buffer h{};
  std::thread([&] { h = alloc_ok(dev(HURRAY_DEVICE_CUDA, 1), per_thread); }).join();
  EXPECT_EQ(f().call_count("cuMemAllocAsync"), 0);
  auto allocs = f().log("cuMemAlloc");
  ASSERT_EQ(allocs.size(), 1u);
  EXPECT_EQ(allocs[0].device, 1);
  void *data = h.data;
  std::thread([&] { EXPECT_EQ(hurray_buffer_release(&h), HURRAY_OK); }).join();
  EXPECT_EQ(f().call_count("cuMemFreeAsync"), 0);
  auto frees = f().log("cuMemFree");
  ASSERT_EQ(frees.size(), 1u);
  EXPECT_EQ(frees[0].ptr, data);
  EXPECT_EQ(frees[0].device, 1);

  // A copy on the per-thread stream is queued on it; its destination is
  // allocated and freed synchronously.
  const int64_t shape[1] = {16};
  hurray_buffer cpu{}, g{};
  ASSERT_EQ(hurray_alloc(dev(HURRAY_DEVICE_CPU), kFloat32, 1, shape, 0, &cpu), HURRAY_OK);
  f().reset();
  ASSERT_EQ(hurray_copy_async(&cpu, dev(HURRAY_DEVICE_CUDA, 0), per_thread, &g), HURRAY_OK)
      << hurray_last_error();
  auto copies = f().log("cuMemcpyAsync");
  ASSERT_EQ(copies.size(), 1u);
  EXPECT_EQ(copies[0].stream, per_thread);
  EXPECT_EQ(f().call_count("cuMemAllocAsync"), 0);
  EXPECT_EQ(f().call_count("cuMemAlloc"), 1);
  std::thread([&] { EXPECT_EQ(hurray_buffer_release(&g), HURRAY_OK); }).join();
  EXPECT_EQ(f().call_count("cuMemFreeAsync"), 0);
  EXPECT_EQ(f().call_count("cuMemFree"), 1);
  hurray_buffer_release(&cpu);

  // The legacy default stream is one stream for every thread of the
  // context: still stream-ordered.
  void *const legacy = reinterpret_cast<void *>(1);
  f().reset();
  h = alloc_ok(dev(HURRAY_DEVICE_CUDA, 0), legacy);
  EXPECT_EQ(f().call_count("cuMemAllocAsync"), 1);
  std::thread([&] { EXPECT_EQ(hurray_buffer_release(&h), HURRAY_OK); }).join();
  auto async_frees = f().log("cuMemFreeAsync");
  ASSERT_EQ(async_frees.size(), 1u);
  EXPECT_EQ(async_frees[0].stream, legacy);
  EXPECT_EQ(f().live_allocations(), live_before_);
}

TEST_F(CudaFake, CopyToAnotherDeviceOnAStreamAllocatesTheDestinationOnItsOwnDevice) {
  void *const stream = reinterpret_cast<void *>(0x5000);  // a stream of device 0, the source's
  const int64_t shape[1] = {12};
  hurray_buffer cpu{}, src{}, out{}, same{};
  ASSERT_EQ(hurray_alloc(dev(HURRAY_DEVICE_CPU), kFloat32, 1, shape, 0, &cpu), HURRAY_OK);
  for (int i = 0; i < 12; ++i) static_cast<float *>(cpu.data)[i] = 3.0f * i;
  ASSERT_EQ(hurray_copy(&cpu, dev(HURRAY_DEVICE_CUDA, 0), &src), HURRAY_OK);
  f().reset();
  ASSERT_EQ(hurray_copy_async(&src, dev(HURRAY_DEVICE_CUDA, 1), stream, &out), HURRAY_OK)
      << hurray_last_error();
  EXPECT_EQ(out.device.device_id, 1);
  EXPECT_EQ(f().call_count("cuMemAllocAsync"), 0) << "device 0's stream used for device 1's pool";
  auto allocs = f().log("cuMemAlloc");
  ASSERT_EQ(allocs.size(), 1u);
  EXPECT_EQ(allocs[0].device, 1);
  auto copies = f().log("cuMemcpyAsync");
  ASSERT_EQ(copies.size(), 1u);
  EXPECT_EQ(copies[0].stream, stream);
  EXPECT_EQ(copies[0].device, 0) << "queued on the stream in its own (the source's) context";
  EXPECT_EQ(copies[0].ptr, out.data);
  EXPECT_EQ(copies[0].other, src.data);
  EXPECT_EQ(f().call_count("cuStreamSynchronize"), 0) << "still ordered on the stream only";
  for (const fake_call &c : f().log(nullptr)) {
    if (c.stream == stream) {
      EXPECT_EQ(c.device, 0) << c.fn << " used the stream in another context";
    }
  }
  for (int i = 0; i < 12; ++i) EXPECT_EQ(static_cast<float *>(out.data)[i], 3.0f * i);
  f().reset();
  EXPECT_EQ(hurray_buffer_release(&out), HURRAY_OK);
  auto frees = f().log("cuMemFree");
  ASSERT_EQ(frees.size(), 1u);
  EXPECT_EQ(frees[0].device, 1);
  EXPECT_EQ(f().call_count("cuMemFreeAsync"), 0);

  // Same device: the destination is stream-ordered on the stream.
  f().reset();
  ASSERT_EQ(hurray_copy_async(&src, dev(HURRAY_DEVICE_CUDA, 0), stream, &same), HURRAY_OK);
  auto async_allocs = f().log("cuMemAllocAsync");
  ASSERT_EQ(async_allocs.size(), 1u);
  EXPECT_EQ(async_allocs[0].stream, stream);
  EXPECT_EQ(async_allocs[0].device, 0);
  for (hurray_buffer *b : {&same, &src, &cpu}) EXPECT_EQ(hurray_buffer_release(b), HURRAY_OK);
  EXPECT_EQ(f().live_allocations(), live_before_);
}

TEST_F(CudaFake, FailedContextRestoreIsReportedNotIgnored) {
  HookLog log;
  ASSERT_EQ(hurray_set_diagnostic_hook(&record_hook, &log), HURRAY_OK);
  const Diag before = diagnostics();
  // Release: the free succeeds, popping the owner's context does not.
  hurray_buffer h = alloc_ok(dev(HURRAY_DEVICE_CUDA, 1));
  std::thread([&] {
    f().inject("cuCtxPopCurrent", kCudaUnknown, 1);
    EXPECT_EQ(hurray_buffer_release(&h), HURRAY_OK);
    f().set_current_device(-1);  // undo what the failed pop left on this thread
  }).join();
  EXPECT_EQ(diagnostics().failed, before.failed + 1);
  ASSERT_EQ(log.calls.size(), 1u);
  EXPECT_EQ(log.calls[0].first, HURRAY_ERR_DEVICE);
  EXPECT_NE(log.calls[0].second.find("cuCtxPopCurrent"), std::string::npos) << log.calls[0].second;
  EXPECT_NE(log.calls[0].second.find("CUDA_ERROR_UNKNOWN"), std::string::npos);
  EXPECT_NE(log.calls[0].second.find("kDLCUDA 1"), std::string::npos);
  EXPECT_EQ(f().live_allocations(), live_before_) << "the free itself happened";
  ASSERT_EQ(hurray_set_diagnostic_hook(nullptr, nullptr), HURRAY_OK);

  // Allocation: HURRAY_ERR_DEVICE, the memory freed again, out untouched.
  const int64_t shape[1] = {16};
  std::thread([&] {
    f().inject("cuCtxPopCurrent", kCudaUnknown, 1);
    hurray_buffer out;
    std::memset(&out, 0xAB, sizeof out);
    const hurray_buffer pattern = out;
    EXPECT_EQ(hurray_alloc(dev(HURRAY_DEVICE_CUDA, 1), kFloat32, 1, shape, 0, &out),
              HURRAY_ERR_DEVICE);
    EXPECT_NE(std::strstr(hurray_last_error(), "cuCtxPopCurrent"), nullptr) << hurray_last_error();
    EXPECT_EQ(std::memcmp(&out, &pattern, sizeof out), 0);
    f().set_current_device(-1);
  }).join();
  EXPECT_EQ(f().live_allocations(), live_before_);

  // Copy (device 1 to the CPU: the pop after cuMemcpyAsync fails) and
  // stream wait.
  hurray_buffer g = alloc_ok(dev(HURRAY_DEVICE_CUDA, 1));
  std::thread([&] {
    f().inject("cuCtxPopCurrent", kCudaUnknown, 1);
    hurray_buffer out{};
    EXPECT_EQ(hurray_copy(&g, dev(HURRAY_DEVICE_CPU), &out), HURRAY_ERR_DEVICE);
    EXPECT_NE(std::strstr(hurray_last_error(), "cuCtxPopCurrent"), nullptr) << hurray_last_error();
    f().set_current_device(-1);
    f().inject("cuCtxPopCurrent", kCudaUnknown, 1);
    EXPECT_EQ(hurray_stream_wait(dev(HURRAY_DEVICE_CUDA, 1), reinterpret_cast<void *>(0x10),
                                 reinterpret_cast<void *>(0x20)),
              HURRAY_ERR_DEVICE);
    EXPECT_NE(std::strstr(hurray_last_error(), "cuCtxPopCurrent"), nullptr) << hurray_last_error();
    f().set_current_device(-1);
  }).join();
  EXPECT_EQ(hurray_buffer_release(&g), HURRAY_OK);
  EXPECT_EQ(f().live_allocations(), live_before_);
}

TEST_F(CudaFake, MessagesNameTheContextCallThatFailed) {
  const int64_t shape[1] = {16};
  hurray_buffer out{};
  f().inject("cuCtxGetCurrent", kCudaUnknown, 1);
  EXPECT_EQ(hurray_alloc(dev(HURRAY_DEVICE_CUDA, 0), kFloat32, 1, shape, 0, &out),
            HURRAY_ERR_DEVICE);
  EXPECT_NE(std::strstr(hurray_last_error(), "cuCtxGetCurrent failed"), nullptr)
      << hurray_last_error();
  EXPECT_EQ(std::strstr(hurray_last_error(), "cuCtxPushCurrent"), nullptr) << hurray_last_error();
  f().inject("cuCtxPushCurrent", kCudaUnknown, 1);
  EXPECT_EQ(hurray_alloc(dev(HURRAY_DEVICE_CUDA, 0), kFloat32, 1, shape, 0, &out),
            HURRAY_ERR_DEVICE);
  EXPECT_NE(std::strstr(hurray_last_error(), "cuCtxPushCurrent failed"), nullptr)
      << hurray_last_error();

  HookLog log;
  ASSERT_EQ(hurray_set_diagnostic_hook(&record_hook, &log), HURRAY_OK);
  hurray_buffer h = alloc_ok(dev(HURRAY_DEVICE_CUDA, 1));
  f().inject("cuCtxGetCurrent", kCudaUnknown, 1);
  EXPECT_EQ(hurray_buffer_release(&h), HURRAY_OK);  // leaked: the free was never reached
  ASSERT_EQ(hurray_set_diagnostic_hook(nullptr, nullptr), HURRAY_OK);
  ASSERT_EQ(log.calls.size(), 1u);
  EXPECT_NE(log.calls[0].second.find("cuCtxGetCurrent failed"), std::string::npos)
      << log.calls[0].second;
  EXPECT_EQ(f().current_device(), -1);
}

TEST_F(CudaFake, DiagnosticsNeverWriteHalfAField) {
  union {
    hurray_diagnostics d;
    unsigned char bytes[sizeof(hurray_diagnostics) + 16];
  } u;
  for (uint32_t size : {20u, 31u, 33u, 100u}) {
    SCOPED_TRACE(size);
    std::memset(&u, 0xCD, sizeof u);
    u.d.struct_size = size;
    ASSERT_EQ(hurray_get_diagnostics(&u.d), HURRAY_OK);
    const uint32_t whole = size >= sizeof(hurray_diagnostics)
                               ? static_cast<uint32_t>(sizeof(hurray_diagnostics))
                               : 16u + (size - 16u) / 8u * 8u;
    EXPECT_EQ(u.d.struct_size, whole);
    for (size_t i = whole; i < sizeof u.bytes; ++i) {
      EXPECT_EQ(u.bytes[i], 0xCD) << "byte " << i << " written";
    }
  }
}

TEST_F(CudaFake, ImportPointerCheckOfANonexistentOrdinalIsUnsupportedDevice) {
  hurray_buffer d1 = alloc_ok(dev(HURRAY_DEVICE_CUDA, 1));
  int64_t shape[1] = {12};
  int64_t strides[1] = {1};
  for (auto claim : {std::make_pair(HURRAY_DEVICE_CUDA, 5), std::make_pair(HURRAY_DEVICE_CUDA, 2),
                     std::make_pair(HURRAY_DEVICE_CUDA_HOST, 2)}) {
    SCOPED_TRACE(std::to_string(claim.first) + "/" + std::to_string(claim.second));
    DLManagedTensor t = make_tensor(d1.data, claim.first, claim.second, 1, shape, strides);
    const int deleted = g_deleted.load();
    hurray_buffer out{};
    EXPECT_EQ(hurray_from_dlpack(&t, HURRAY_IMPORT_CHECK_DEVICE_POINTER, &out),
              HURRAY_ERR_UNSUPPORTED_DEVICE);
    EXPECT_NE(std::strstr(hurray_last_error(), "device"), nullptr) << hurray_last_error();
    EXPECT_EQ(g_deleted.load(), deleted) << "the caller still owns the tensor";
  }
  EXPECT_EQ(hurray_buffer_release(&d1), HURRAY_OK);
}
