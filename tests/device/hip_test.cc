// SPDX-License-Identifier: Apache-2.0
// libhurray's HIP back end against the fake runtime (tests/fake_drivers/fake_hip.cc,
// ROCm 6 encoding by default; the ROCm 5 encoding runs in scenario_test.cc).
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

constexpr int kHipIllegalAddress = 700;

class HipFake : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fake_hip().loaded()) GTEST_SKIP() << "the fake HIP runtime is not in use";
    fake_hip().reset();
    fake_hip().set_current_device(0);
    live_before_ = fake_hip().live_allocations();
  }
  void TearDown() override {
    if (!fake_hip().loaded()) return;
    fake_hip().set_current_device(0);
    fake_hip().reset();
  }
  Fake &f() { return fake_hip(); }
  int64_t live_before_ = 0;
};

}  // namespace

TEST_F(HipFake, AllocatesEachKindAndFreesOnTheOwningDevice) {
  struct Kind {
    int32_t type, id;
    const char *alloc_fn, *free_fn;
  } kinds[] = {{HURRAY_DEVICE_ROCM, 0, "hipMalloc", "hipFree"},
               {HURRAY_DEVICE_ROCM, 1, "hipMalloc", "hipFree"},
               {HURRAY_DEVICE_ROCM_HOST, 0, "hipHostMalloc", "hipHostFree"}};
  for (const Kind &k : kinds) {
    f().reset();
    hurray_buffer h = alloc_ok(dev(k.type, k.id));
    EXPECT_EQ(h.device.device_type, k.type);
    EXPECT_EQ(h.device.device_id, k.id);
    auto allocs = f().log(k.alloc_fn);
    ASSERT_EQ(allocs.size(), 1u);
    EXPECT_EQ(allocs[0].bytes, 48u);
    if (k.type == HURRAY_DEVICE_ROCM) {
      EXPECT_EQ(allocs[0].device, k.id);
    }
    EXPECT_EQ(f().current_device(), 0) << "the thread's device is set back";
    hurray_buffer_release(&h);
    EXPECT_EQ(f().call_count(k.free_fn), 1);
  }
  EXPECT_EQ(f().live_allocations(), live_before_);
}

TEST_F(HipFake, ReleaseOnAnotherThreadFreesOnTheOwningDeviceAndRestoresItsDevice) {
  hurray_buffer h = alloc_ok(dev(HURRAY_DEVICE_ROCM, 1));
  uint64_t releaser = 0;
  int after = -1;
  std::thread([&] {
    f().set_current_device(0);
    releaser = static_cast<uint64_t>(pthread_self());
    EXPECT_EQ(hurray_buffer_release(&h), HURRAY_OK);
    after = f().current_device();
  }).join();
  auto frees = f().log("hipFree");
  ASSERT_EQ(frees.size(), 1u);
  EXPECT_EQ(frees[0].device, 1);
  EXPECT_EQ(frees[0].thread, releaser);
  EXPECT_EQ(after, 0);
}

namespace {
std::atomic<int> g_hook_calls{0};
void count_hook(int32_t, const char *message, void *) {
  if (std::strstr(message, "hipFree") != nullptr) g_hook_calls.fetch_add(1);
}
}  // namespace

TEST_F(HipFake, FailedFreeIsCountedAndSentToTheHook) {
  ASSERT_EQ(hurray_set_diagnostic_hook(&count_hook, nullptr), HURRAY_OK);
  const Diag before = diagnostics();
  hurray_buffer h = alloc_ok(dev(HURRAY_DEVICE_ROCM, 0));
  f().inject("hipFree", kHipIllegalAddress, 1);
  testing::internal::CaptureStderr();
  hurray_buffer_release(&h);
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "");
  EXPECT_EQ(diagnostics().failed, before.failed + 1);
  EXPECT_EQ(g_hook_calls.load(), 1);
  ASSERT_EQ(hurray_set_diagnostic_hook(nullptr, nullptr), HURRAY_OK);
}

TEST_F(HipFake, ImportPointerCheckUnderRocm6Encoding) {
  hurray_buffer d1 = alloc_ok(dev(HURRAY_DEVICE_ROCM, 1));
  hurray_buffer pinned = alloc_ok(dev(HURRAY_DEVICE_ROCM_HOST));
  std::vector<float> host(12);
  int64_t shape[1] = {12};
  int64_t strides[1] = {1};
  struct Case {
    void *data;
    int32_t type, id;
    bool ok;
  } cases[] = {{d1.data, HURRAY_DEVICE_ROCM, 1, true},
               {d1.data, HURRAY_DEVICE_ROCM, 0, false},
               {pinned.data, HURRAY_DEVICE_ROCM_HOST, 0, true},
               {pinned.data, HURRAY_DEVICE_ROCM, 0, false},
               {host.data(), HURRAY_DEVICE_ROCM, 0, false},
               {host.data(), HURRAY_DEVICE_ROCM_HOST, 0, false}};
  for (const Case &c : cases) {
    SCOPED_TRACE(std::to_string(c.type) + "/" + std::to_string(c.id));
    DLManagedTensorVersioned t{};
    t.version = DLPackVersion{1, 3};
    t.dl_tensor.data = c.data;
    t.dl_tensor.device.device_type = static_cast<DLDeviceType>(c.type);
    t.dl_tensor.device.device_id = c.id;
    t.dl_tensor.ndim = 1;
    t.dl_tensor.dtype = DLDataType{kDLFloat, 32, 1};
    t.dl_tensor.shape = shape;
    t.dl_tensor.strides = strides;
    hurray_buffer out{};
    const int32_t st = hurray_from_dlpack_versioned(&t, HURRAY_IMPORT_CHECK_DEVICE_POINTER, &out);
    if (c.ok) {
      EXPECT_EQ(st, HURRAY_OK) << hurray_last_error();
      hurray_buffer_release(&out);
    } else {
      EXPECT_EQ(st, HURRAY_ERR_INVALID_ARGUMENT);
      EXPECT_NE(std::strstr(hurray_last_error(), "the HIP runtime reports"), nullptr)
          << hurray_last_error();
    }
  }
  hurray_buffer_release(&d1);
  hurray_buffer_release(&pinned);
}

// Stream waits: VendorFake/Hip.StreamWaitRecordsOnTheProducerAndWaitsOnTheConsumer.
TEST_F(HipFake, CopiesKeepTheElementsOnTheirStream) {
  const int64_t shape[1] = {8};
  hurray_buffer cpu{}, gpu{}, pinned{}, back{};
  ASSERT_EQ(hurray_alloc(dev(HURRAY_DEVICE_CPU), kFloat32, 1, shape, 0, &cpu), HURRAY_OK);
  for (int i = 0; i < 8; ++i) static_cast<float *>(cpu.data)[i] = 1.5f * i;
  void *stream = reinterpret_cast<void *>(0x3300);
  ASSERT_EQ(hurray_copy_async(&cpu, dev(HURRAY_DEVICE_ROCM, 1), stream, &gpu), HURRAY_OK)
      << hurray_last_error();
  auto copies = f().log("hipMemcpyAsync");
  ASSERT_EQ(copies.size(), 1u);
  EXPECT_EQ(copies[0].stream, stream);
  EXPECT_EQ(copies[0].device, 1);
  EXPECT_EQ(f().call_count("hipMallocAsync"), 1);
  ASSERT_EQ(hurray_copy(&gpu, dev(HURRAY_DEVICE_ROCM_HOST), &pinned), HURRAY_OK);
  ASSERT_EQ(hurray_copy(&pinned, dev(HURRAY_DEVICE_CPU), &back), HURRAY_OK);
  for (int i = 0; i < 8; ++i) EXPECT_EQ(static_cast<float *>(back.data)[i], 1.5f * i);
  EXPECT_EQ(f().current_device(), 0);
  for (hurray_buffer *b : {&cpu, &gpu, &pinned, &back}) hurray_buffer_release(b);
  EXPECT_EQ(f().live_allocations(), live_before_);
}

// --- Review findings (see the CUDA counterparts in cuda_test.cc).

namespace {
std::vector<std::string> g_hip_hook_messages;
void hip_record_hook(int32_t, const char *message, void *) {
  g_hip_hook_messages.emplace_back(message);
}
}  // namespace

TEST_F(HipFake, PerThreadDefaultStreamMemoryIsNotFreedOnTheReleasersStream) {
  void *const per_thread = reinterpret_cast<void *>(2);  // hipStreamPerThread
  hurray_buffer h{};
  std::thread([&] { h = alloc_ok(dev(HURRAY_DEVICE_ROCM, 1), per_thread); }).join();
  EXPECT_EQ(f().call_count("hipMallocAsync"), 0);
  EXPECT_EQ(f().call_count("hipMalloc"), 1);
  std::thread([&] { EXPECT_EQ(hurray_buffer_release(&h), HURRAY_OK); }).join();
  EXPECT_EQ(f().call_count("hipFreeAsync"), 0);
  auto frees = f().log("hipFree");
  ASSERT_EQ(frees.size(), 1u);
  EXPECT_EQ(frees[0].device, 1);

  const int64_t shape[1] = {8};
  hurray_buffer cpu{}, g{};
  ASSERT_EQ(hurray_alloc(dev(HURRAY_DEVICE_CPU), kFloat32, 1, shape, 0, &cpu), HURRAY_OK);
  f().reset();
  ASSERT_EQ(hurray_copy_async(&cpu, dev(HURRAY_DEVICE_ROCM, 0), per_thread, &g), HURRAY_OK)
      << hurray_last_error();
  auto copies = f().log("hipMemcpyAsync");
  ASSERT_EQ(copies.size(), 1u);
  EXPECT_EQ(copies[0].stream, per_thread);
  EXPECT_EQ(f().call_count("hipMallocAsync"), 0);
  std::thread([&] { EXPECT_EQ(hurray_buffer_release(&g), HURRAY_OK); }).join();
  EXPECT_EQ(f().call_count("hipFreeAsync"), 0);
  EXPECT_EQ(f().call_count("hipFree"), 1);
  hurray_buffer_release(&cpu);
  EXPECT_EQ(f().live_allocations(), live_before_);
}

TEST_F(HipFake, CopyToAnotherDeviceOnAStreamAllocatesTheDestinationOnItsOwnDevice) {
  void *const stream = reinterpret_cast<void *>(0x7000);  // a stream of device 0
  const int64_t shape[1] = {8};
  hurray_buffer cpu{}, src{}, out{};
  ASSERT_EQ(hurray_alloc(dev(HURRAY_DEVICE_CPU), kFloat32, 1, shape, 0, &cpu), HURRAY_OK);
  for (int i = 0; i < 8; ++i) static_cast<float *>(cpu.data)[i] = 0.5f * i;
  ASSERT_EQ(hurray_copy(&cpu, dev(HURRAY_DEVICE_ROCM, 0), &src), HURRAY_OK);
  f().reset();
  ASSERT_EQ(hurray_copy_async(&src, dev(HURRAY_DEVICE_ROCM, 1), stream, &out), HURRAY_OK)
      << hurray_last_error();
  EXPECT_EQ(f().call_count("hipMallocAsync"), 0);
  auto allocs = f().log("hipMalloc");
  ASSERT_EQ(allocs.size(), 1u);
  EXPECT_EQ(allocs[0].device, 1);
  auto copies = f().log("hipMemcpyAsync");
  ASSERT_EQ(copies.size(), 1u);
  EXPECT_EQ(copies[0].stream, stream);
  EXPECT_EQ(copies[0].device, 0);
  EXPECT_EQ(f().call_count("hipStreamSynchronize"), 0);
  for (int i = 0; i < 8; ++i) EXPECT_EQ(static_cast<float *>(out.data)[i], 0.5f * i);
  f().reset();
  EXPECT_EQ(hurray_buffer_release(&out), HURRAY_OK);
  EXPECT_EQ(f().call_count("hipFreeAsync"), 0);
  EXPECT_EQ(f().call_count("hipFree"), 1);
  for (hurray_buffer *b : {&src, &cpu}) hurray_buffer_release(b);
  EXPECT_EQ(f().live_allocations(), live_before_);
}

TEST_F(HipFake, FailedDeviceRestoreIsReportedNotIgnored) {
  // The fake accepts any current device number but refuses to set one that
  // does not exist: a thread "on device 5" cannot be set back to it.
  g_hip_hook_messages.clear();
  ASSERT_EQ(hurray_set_diagnostic_hook(&hip_record_hook, nullptr), HURRAY_OK);
  const Diag before = diagnostics();
  hurray_buffer h = alloc_ok(dev(HURRAY_DEVICE_ROCM, 1));
  std::thread([&] {
    f().set_current_device(5);
    EXPECT_EQ(hurray_buffer_release(&h), HURRAY_OK);
  }).join();
  ASSERT_EQ(hurray_set_diagnostic_hook(nullptr, nullptr), HURRAY_OK);
  EXPECT_EQ(diagnostics().failed, before.failed + 1);
  ASSERT_EQ(g_hip_hook_messages.size(), 1u);
  EXPECT_NE(g_hip_hook_messages[0].find("hipSetDevice(5)"), std::string::npos)
      << g_hip_hook_messages[0];
  EXPECT_EQ(f().live_allocations(), live_before_) << "the free itself happened";

  const int64_t shape[1] = {8};
  hurray_buffer g = alloc_ok(dev(HURRAY_DEVICE_ROCM, 1));
  std::thread([&] {
    f().set_current_device(5);
    hurray_buffer out;
    std::memset(&out, 0xAB, sizeof out);
    const hurray_buffer pattern = out;
    EXPECT_EQ(hurray_alloc(dev(HURRAY_DEVICE_ROCM, 1), kFloat32, 1, shape, 0, &out),
              HURRAY_ERR_DEVICE);
    EXPECT_NE(std::strstr(hurray_last_error(), "hipSetDevice(5)"), nullptr) << hurray_last_error();
    EXPECT_EQ(std::memcmp(&out, &pattern, sizeof out), 0);
    f().set_current_device(5);
    EXPECT_EQ(hurray_copy(&g, dev(HURRAY_DEVICE_CPU), &out), HURRAY_ERR_DEVICE);
    EXPECT_NE(std::strstr(hurray_last_error(), "hipSetDevice(5)"), nullptr) << hurray_last_error();
  }).join();
  EXPECT_EQ(hurray_buffer_release(&g), HURRAY_OK);
  EXPECT_EQ(f().live_allocations(), live_before_);
}

TEST_F(HipFake, MessagesNameTheDeviceCallThatFailed) {
  const int64_t shape[1] = {8};
  hurray_buffer out{};
  f().inject("hipGetDevice", 999, 1);
  EXPECT_EQ(hurray_alloc(dev(HURRAY_DEVICE_ROCM, 1), kFloat32, 1, shape, 0, &out),
            HURRAY_ERR_DEVICE);
  EXPECT_NE(std::strstr(hurray_last_error(), "hipGetDevice failed"), nullptr)
      << hurray_last_error();
  f().inject("hipSetDevice", 999, 1);
  EXPECT_EQ(hurray_alloc(dev(HURRAY_DEVICE_ROCM, 1), kFloat32, 1, shape, 0, &out),
            HURRAY_ERR_DEVICE);
  EXPECT_NE(std::strstr(hurray_last_error(), "hipSetDevice"), nullptr) << hurray_last_error();
}
