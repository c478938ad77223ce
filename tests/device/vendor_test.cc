// SPDX-License-Identifier: Apache-2.0
// What the CUDA and HIP back ends do alike, as one typed suite over the two
// fakes (tests/fake_drivers): both run on libhurray's shared vendor plumbing
// (src/device/vendor.h). What only one vendor does stays in cuda_test.cc /
// hip_test.cc.
#include <hurray/dlpack.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <thread>
#include <vector>

#include "support.h"

using namespace gpu_test;

namespace {

struct Kind {
  int32_t type;
  int32_t id;
  const char *free_fn;
};

struct CudaVendor {
  static constexpr const char *kEventRecord = "cuEventRecord";
  static constexpr const char *kStreamWaitEvent = "cuStreamWaitEvent";
  static constexpr const char *kEventDestroy = "cuEventDestroy";
  static Fake &fake() { return fake_cuda(); }
  static constexpr int kCurrentBefore = -1;  // no context on the test thread
  static constexpr int32_t kDevice = HURRAY_DEVICE_CUDA;
  static constexpr int32_t kHost = HURRAY_DEVICE_CUDA_HOST;
  static constexpr const char *kAlloc = "cuMemAlloc";
  static constexpr const char *kFree = "cuMemFree";
  static constexpr const char *kHostAlloc = "cuMemHostAlloc";
  static constexpr const char *kAllocAsync = "cuMemAllocAsync";
  static constexpr const char *kFreeAsync = "cuMemFreeAsync";
  static constexpr int kOutOfMemory = 2;
  static constexpr const char *kOutOfMemoryName = "CUDA_ERROR_OUT_OF_MEMORY";
  static constexpr int kNotSupported = 801;
  static constexpr const char *kNotSupportedName = "CUDA_ERROR_NOT_SUPPORTED";
  static constexpr int kInvalidHandle = 400;
  static constexpr const char *kNoDevice2 = "CUDA device 2 does not exist";
  static std::vector<Kind> kinds() {
    return {{HURRAY_DEVICE_CUDA, 0, "cuMemFree"},
            {HURRAY_DEVICE_CUDA, 1, "cuMemFree"},
            {HURRAY_DEVICE_CUDA_HOST, 0, "cuMemFreeHost"},
            {HURRAY_DEVICE_CUDA_MANAGED, 0, "cuMemFree"}};
  }
};

struct HipVendor {
  static constexpr const char *kEventRecord = "hipEventRecord";
  static constexpr const char *kStreamWaitEvent = "hipStreamWaitEvent";
  static constexpr const char *kEventDestroy = "hipEventDestroy";
  static Fake &fake() { return fake_hip(); }
  static constexpr int kCurrentBefore = 0;
  static constexpr int32_t kDevice = HURRAY_DEVICE_ROCM;
  static constexpr int32_t kHost = HURRAY_DEVICE_ROCM_HOST;
  static constexpr const char *kAlloc = "hipMalloc";
  static constexpr const char *kFree = "hipFree";
  static constexpr const char *kHostAlloc = "hipHostMalloc";
  static constexpr const char *kAllocAsync = "hipMallocAsync";
  static constexpr const char *kFreeAsync = "hipFreeAsync";
  static constexpr int kOutOfMemory = 2;
  static constexpr const char *kOutOfMemoryName = "hipErrorOutOfMemory";
  static constexpr int kNotSupported = 801;
  static constexpr const char *kNotSupportedName = "hipErrorNotSupported";
  static constexpr int kInvalidHandle = 400;
  static constexpr const char *kNoDevice2 = "HIP device 2 does not exist";
  static std::vector<Kind> kinds() {
    return {{HURRAY_DEVICE_ROCM, 0, "hipFree"},
            {HURRAY_DEVICE_ROCM, 1, "hipFree"},
            {HURRAY_DEVICE_ROCM_HOST, 0, "hipHostFree"}};
  }
};

template <typename V>
class VendorFake : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!V::fake().loaded()) GTEST_SKIP() << "this vendor's fake is not in use";
    V::fake().reset();
    V::fake().set_current_device(V::kCurrentBefore);
    live_before_ = V::fake().live_allocations();
  }
  void TearDown() override {
    if (!V::fake().loaded()) return;
    V::fake().set_current_device(V::kCurrentBefore);
    V::fake().reset();
  }
  Fake &f() { return V::fake(); }
  int64_t live_before_ = 0;
};

class VendorName {
 public:
  template <typename T>
  static std::string GetName(int) {
    return std::is_same<T, CudaVendor>::value ? "Cuda" : "Hip";
  }
};

using Vendors = ::testing::Types<CudaVendor, HipVendor>;
TYPED_TEST_SUITE(VendorFake, Vendors, VendorName);

}  // namespace

TYPED_TEST(VendorFake, StreamOrderedMemoryIsFreedOnItsStream) {
  using V = TypeParam;
  void *stream = reinterpret_cast<void *>(0x5150);
  hurray_buffer h = alloc_ok(dev(V::kDevice, 1), stream);
  auto allocs = this->f().log(V::kAllocAsync);
  ASSERT_EQ(allocs.size(), 1u);
  EXPECT_EQ(allocs[0].stream, stream);
  EXPECT_EQ(allocs[0].device, 1);
  void *data = h.data;
  std::thread([&] { EXPECT_EQ(hurray_buffer_release(&h), HURRAY_OK); }).join();
  auto frees = this->f().log(V::kFreeAsync);
  ASSERT_EQ(frees.size(), 1u);
  EXPECT_EQ(frees[0].ptr, data);
  EXPECT_EQ(frees[0].stream, stream);
  EXPECT_EQ(frees[0].device, 1);
  EXPECT_EQ(this->f().call_count(V::kFree), 0) << "no synchronous free";
  EXPECT_EQ(this->f().live_allocations(), this->live_before_);
}

TYPED_TEST(VendorFake, SharedConsumersFreeExactlyOnce) {
  using V = TypeParam;
  for (const Kind &k : V::kinds()) {
    SCOPED_TRACE(k.free_fn);
    this->f().reset();
    hurray_buffer h = alloc_ok(dev(k.type, k.id));
    constexpr int kConsumers = 8;
    hurray_buffer out[kConsumers];
    ASSERT_EQ(hurray_share(&h, kConsumers, out), HURRAY_OK);
    // Half leave as DLPack tensors, half as handles, each on its own thread.
    std::vector<std::thread> threads;
    std::atomic<int> go{0};
    for (int i = 0; i < kConsumers; ++i) {
      threads.emplace_back([&, i] {
        while (go.load() == 0) {
        }
        if (i % 2 == 0) {
          DLManagedTensorVersioned *t = nullptr;
          ASSERT_EQ(hurray_to_dlpack_versioned(&out[i], &t), HURRAY_OK);
          t->deleter(t);
        } else {
          EXPECT_EQ(hurray_buffer_release(&out[i]), HURRAY_OK);
        }
      });
    }
    go.store(1);
    for (auto &t : threads) t.join();
    EXPECT_EQ(this->f().call_count(k.free_fn), 1);
  }
  EXPECT_EQ(this->f().live_allocations(), this->live_before_);
}

TYPED_TEST(VendorFake, AllocationFailureIsOutOfMemoryAndLeaksNothing) {
  using V = TypeParam;
  struct Case {
    int32_t type;
    const char *fn;
    bool async;
  } cases[] = {{V::kDevice, V::kAlloc, false},
               {V::kDevice, V::kAllocAsync, true},
               {V::kHost, V::kHostAlloc, false}};
  const int64_t shape[1] = {1 << 20};
  for (const Case &c : cases) {
    SCOPED_TRACE(c.fn);
    this->f().inject(c.fn, V::kOutOfMemory, 1);
    hurray_buffer h;
    std::memset(&h, 0xAB, sizeof h);
    const hurray_buffer before = h;
    EXPECT_EQ(hurray_alloc_async(dev(c.type), kFloat32, 1, shape, 0,
                                 c.async ? reinterpret_cast<void *>(0x99) : nullptr, &h),
              HURRAY_ERR_OUT_OF_MEMORY);
    EXPECT_NE(std::strstr(hurray_last_error(), c.fn), nullptr) << hurray_last_error();
    EXPECT_NE(std::strstr(hurray_last_error(), V::kOutOfMemoryName), nullptr);
    EXPECT_EQ(std::memcmp(&h, &before, sizeof h), 0) << "out untouched";
    EXPECT_EQ(this->f().live_allocations(), this->live_before_);
    EXPECT_EQ(this->f().current_device(), V::kCurrentBefore);
  }
  hurray_buffer h{};
  EXPECT_EQ(hurray_alloc(dev(V::kDevice, 2), kFloat32, 1, shape, 0, &h),
            HURRAY_ERR_UNSUPPORTED_DEVICE);
  EXPECT_NE(std::strstr(hurray_last_error(), V::kNoDevice2), nullptr) << hurray_last_error();
  EXPECT_EQ(hurray_alloc(dev(V::kHost, 2), kFloat32, 1, shape, 0, &h),
            HURRAY_ERR_UNSUPPORTED_DEVICE);
  EXPECT_EQ(this->f().live_allocations(), this->live_before_);
}

TYPED_TEST(VendorFake, ZeroElementRequestsStillCheckTheDevice) {
  using V = TypeParam;
  const int64_t shape[1] = {0};
  void *const stream = reinterpret_cast<void *>(0x44);
  hurray_buffer h;
  std::memset(&h, 0xAB, sizeof h);
  const hurray_buffer pattern = h;
  EXPECT_EQ(hurray_alloc(dev(V::kDevice, 2), kFloat32, 1, shape, 0, &h),
            HURRAY_ERR_UNSUPPORTED_DEVICE);
  EXPECT_NE(std::strstr(hurray_last_error(), V::kNoDevice2), nullptr) << hurray_last_error();
  EXPECT_EQ(hurray_alloc_async(dev(V::kDevice, 2), kFloat32, 1, shape, 0, stream, &h),
            HURRAY_ERR_UNSUPPORTED_DEVICE);
  EXPECT_EQ(hurray_alloc(dev(V::kHost, 2), kFloat32, 1, shape, 0, &h),
            HURRAY_ERR_UNSUPPORTED_DEVICE);
  EXPECT_EQ(std::memcmp(&h, &pattern, sizeof h), 0);
  hurray_buffer cpu{};
  ASSERT_EQ(hurray_alloc(dev(HURRAY_DEVICE_CPU), kFloat32, 1, shape, 0, &cpu), HURRAY_OK);
  EXPECT_EQ(hurray_copy(&cpu, dev(V::kDevice, 7), &h), HURRAY_ERR_UNSUPPORTED_DEVICE);
  // An existing device: a handle without memory, no runtime allocation.
  this->f().reset();
  for (void *s : {static_cast<void *>(nullptr), stream}) {
    ASSERT_EQ(hurray_alloc_async(dev(V::kDevice, 1), kFloat32, 1, shape, 0, s, &h), HURRAY_OK);
    EXPECT_EQ(h.data, nullptr);
    EXPECT_EQ(hurray_buffer_release(&h), HURRAY_OK);
  }
  EXPECT_EQ(hurray_buffer_release(&cpu), HURRAY_OK);
  EXPECT_EQ(this->f().call_count(V::kAlloc) + this->f().call_count(V::kFree) +
                this->f().call_count(V::kAllocAsync) + this->f().call_count(V::kFreeAsync),
            0);
}

TYPED_TEST(VendorFake, NoStreamOrderedAllocatorIsUnsupportedDevice) {
  using V = TypeParam;
  const int64_t shape[1] = {16};
  void *const stream = reinterpret_cast<void *>(0x99);
  hurray_buffer h{}, cpu{};
  this->f().inject(V::kAllocAsync, V::kNotSupported, 1);
  EXPECT_EQ(hurray_alloc_async(dev(V::kDevice, 0), kFloat32, 1, shape, 0, stream, &h),
            HURRAY_ERR_UNSUPPORTED_DEVICE);
  EXPECT_NE(std::strstr(hurray_last_error(), V::kNotSupportedName), nullptr) << hurray_last_error();
  ASSERT_EQ(hurray_alloc(dev(HURRAY_DEVICE_CPU), kFloat32, 1, shape, 0, &cpu), HURRAY_OK);
  this->f().inject(V::kAllocAsync, V::kNotSupported, 1);
  EXPECT_EQ(hurray_copy_async(&cpu, dev(V::kDevice, 1), stream, &h), HURRAY_ERR_UNSUPPORTED_DEVICE);
  EXPECT_EQ(hurray_buffer_release(&cpu), HURRAY_OK);
  EXPECT_EQ(this->f().live_allocations(), this->live_before_);
}

TYPED_TEST(VendorFake, StreamWaitRecordsOnTheProducerAndWaitsOnTheConsumer) {
  using V = TypeParam;
  void *producer = reinterpret_cast<void *>(0x1000);
  void *consumer = reinterpret_cast<void *>(0x2000);
  std::thread([&] {
    EXPECT_EQ(hurray_stream_wait(dev(V::kDevice, 1), producer, consumer), HURRAY_OK)
        << hurray_last_error();
    EXPECT_EQ(this->f().current_device(), V::kCurrentBefore);
  }).join();
  auto records = this->f().log(V::kEventRecord);
  ASSERT_EQ(records.size(), 1u);
  EXPECT_EQ(records[0].stream, producer);
  EXPECT_EQ(records[0].device, 1);
  auto waits = this->f().log(V::kStreamWaitEvent);
  ASSERT_EQ(waits.size(), 1u);
  EXPECT_EQ(waits[0].stream, consumer);
  EXPECT_EQ(waits[0].other, producer);
  EXPECT_EQ(waits[0].device, 1);
  EXPECT_EQ(this->f().call_count(V::kEventDestroy), 1);
  // Same stream: nothing to do.
  this->f().reset();
  EXPECT_EQ(hurray_stream_wait(dev(V::kDevice, 0), producer, producer), HURRAY_OK);
  EXPECT_EQ(this->f().call_count(V::kEventRecord), 0);
  // Errors.
  EXPECT_EQ(hurray_stream_wait(dev(HURRAY_DEVICE_CPU), producer, consumer),
            HURRAY_ERR_UNSUPPORTED_DEVICE);
  EXPECT_EQ(hurray_stream_wait(dev(V::kDevice, 5), producer, consumer),
            HURRAY_ERR_UNSUPPORTED_DEVICE);
  this->f().inject(V::kStreamWaitEvent, V::kInvalidHandle, 1);
  EXPECT_EQ(hurray_stream_wait(dev(V::kDevice, 0), producer, consumer), HURRAY_ERR_DEVICE);
  EXPECT_NE(std::strstr(hurray_last_error(), V::kStreamWaitEvent), nullptr) << hurray_last_error();
  EXPECT_EQ(this->f().call_count(V::kEventDestroy), 1) << "the event is destroyed on failure too";
  EXPECT_EQ(this->f().current_device(), V::kCurrentBefore);
}

TYPED_TEST(VendorFake, ForkedChildSkipsGpuReleasesAndCountsThem) {
  using V = TypeParam;
  hurray_buffer h = alloc_ok(dev(V::kDevice, 1));
  hurray_buffer h2 = h;  // the child's view of the same handle
  const Diag before = diagnostics();
  const int frees_before = this->f().call_count(V::kFree);
  fflush(nullptr);
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    int code = 0;
    hurray_buffer_release(&h2);
    hurray_diagnostics d{};
    d.struct_size = sizeof d;
    if (hurray_get_diagnostics(&d) != HURRAY_OK) code |= 1;
    if (d.fork_skipped_releases != before.fork + 1) code |= 2;
    if (V::fake().call_count(V::kFree) != frees_before) code |= 4;
    const int64_t shape[1] = {4};
    hurray_buffer x;
    if (hurray_alloc(dev(V::kDevice, 0), kFloat32, 1, shape, 0, &x) !=
        HURRAY_ERR_UNSUPPORTED_DEVICE) {
      code |= 8;
    }
    if (std::strstr(hurray_last_error(), "fork") == nullptr) code |= 16;
    // CPU memory still works in the child.
    if (hurray_alloc(dev(HURRAY_DEVICE_CPU), kFloat32, 1, shape, 0, &x) != HURRAY_OK) code |= 32;
    hurray_buffer_release(&x);
    _exit(code);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "bit set = failed check in the child";
  // The parent still owns and frees its memory.
  EXPECT_EQ(hurray_buffer_release(&h), HURRAY_OK);
  EXPECT_EQ(this->f().call_count(V::kFree), frees_before + 1);
  EXPECT_EQ(diagnostics().fork, before.fork);
}
