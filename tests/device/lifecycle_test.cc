// SPDX-License-Identifier: Apache-2.0
// GPU memory across the lifetime events real processes create, against the
// fake drivers: a primary-context reset (cudaDeviceReset), another thread's
// graph capture, pinned and managed memory of device 1, releases ordered
// after the per-thread default stream or a stream of another device, and a
// stream destroyed before the release (docs/impl/gpu.md §2, §3).
#include <gtest/gtest.h>
#include <pthread.h>

#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "support.h"

using namespace gpu_test;

namespace {

constexpr int kCaptureUnsupported = 900;  // CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED
constexpr int kCaptureModeGlobal = 0, kCaptureModeThreadLocal = 1;

class CudaLifecycle : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fake_cuda().loaded()) GTEST_SKIP() << "the fake CUDA driver is not in use";
    fake_cuda().reset();
    fake_cuda().set_current_device(-1);
    live_before_ = fake_cuda().live_allocations();
    dead_before_ = f().fn<int (*)(void)>("dead_stream_uses")();
    prohibited_before_ = f().fn<int (*)(void)>("prohibited_calls")();
  }
  void TearDown() override {
    if (!fake_cuda().loaded()) return;
    EXPECT_EQ(f().fn<int (*)(void)>("dead_stream_uses")(), dead_before_)
        << "libhurray passed a destroyed stream to the driver";
    EXPECT_EQ(f().fn<int (*)(void)>("prohibited_calls")(), prohibited_before_)
        << "libhurray made a call prohibited during a stream capture";
    (void)hurray_set_diagnostic_hook(nullptr, nullptr);
    fake_cuda().set_current_device(-1);
    fake_cuda().reset();
  }
  Fake &f() { return fake_cuda(); }
  void reset_context(int d) { f().fn<void (*)(int)>("primary_ctx_reset")(d); }
  void revive_context(int d) { f().fn<void (*)(int)>("primary_ctx_revive")(d); }
  void *stream_create(int d) { return f().fn<void *(*)(int)>("stream_create")(d); }
  void stream_destroy(void *s) { f().fn<void (*)(void *)>("stream_destroy")(s); }
  void begin_capture(void *s) { f().fn<void (*)(void *)>("stream_begin_capture")(s); }
  int end_capture(void *s) { return f().fn<int (*)(void *)>("stream_end_capture")(s); }
  int unordered() { return f().fn<int (*)(void)>("unordered_frees")(); }
  int64_t live_before_ = 0;
  int dead_before_ = 0, prohibited_before_ = 0;
};

struct HookLog {
  std::vector<std::pair<int32_t, std::string>> calls;
};
void record_hook(int32_t status, const char *message, void *user) {
  static_cast<HookLog *>(user)->calls.emplace_back(status, message);
}

int calls_on(const std::vector<fake_call> &log, const void *ptr) {
  int n = 0;
  for (const fake_call &c : log) n += c.ptr == ptr;
  return n;
}

// Index of the first cuStreamSynchronize of the legacy stream (NULL or
// CU_STREAM_LEGACY) in the whole log, or -1.
int index_of_legacy_sync(const std::vector<fake_call> &log) {
  for (size_t i = 0; i < log.size(); ++i) {
    if (std::strcmp(log[i].fn, "cuStreamSynchronize") == 0 &&
        reinterpret_cast<uintptr_t>(log[i].stream) <= 1) {
      return static_cast<int>(i);
    }
  }
  return -1;
}

// Index of the first call of `fn` in the whole log (after `from`), or -1.
int index_of(const std::vector<fake_call> &log, const char *fn, size_t from = 0) {
  for (size_t i = from; i < log.size(); ++i) {
    if (std::strcmp(log[i].fn, fn) == 0) return static_cast<int>(i);
  }
  return -1;
}

}  // namespace

// Defect 1: cuDevicePrimaryCtxReset destroyed the memory; its release must
// not free (the address may be someone else's by now), and new work must
// retain the context again.
TEST_F(CudaLifecycle, ReleaseAfterAPrimaryContextResetSkipsTheFreeAndNewWorkRetainsAgain) {
  HookLog log;
  ASSERT_EQ(hurray_set_diagnostic_hook(&record_hook, &log), HURRAY_OK);
  hurray_buffer device = alloc_ok(dev(HURRAY_DEVICE_CUDA, 1));
  hurray_buffer managed = alloc_ok(dev(HURRAY_DEVICE_CUDA_MANAGED, 1));
  void *const old_data = device.data;
  const Diag before = diagnostics();
  const int retains = f().primary_retains(1);
  reset_context(1);  // cudaDeviceReset() on device 1, in the application
  f().reset();
  std::thread([&] {
    EXPECT_EQ(hurray_buffer_release(&device), HURRAY_OK);
    EXPECT_EQ(hurray_buffer_release(&managed), HURRAY_OK);
  }).join();
  EXPECT_EQ(f().call_count("cuMemFree"), 0) << "a free of memory that died with the context";
  EXPECT_EQ(calls_on(f().log(nullptr), old_data), 0);
  Diag after = diagnostics();
  EXPECT_EQ(after.reset_skips, before.reset_skips + 2);
  EXPECT_EQ(after.failed, before.failed);
  ASSERT_EQ(log.calls.size(), 2u);
  EXPECT_EQ(log.calls[0].first, HURRAY_ERR_DEVICE);
  EXPECT_NE(log.calls[0].second.find("reset"), std::string::npos) << log.calls[0].second;
  EXPECT_NE(log.calls[0].second.find("kDLCUDA 1"), std::string::npos) << log.calls[0].second;

  // New work on device 1 retains the context again and runs in it.
  hurray_buffer fresh = alloc_ok(dev(HURRAY_DEVICE_CUDA, 1));
  ASSERT_NE(fresh.release_fn, nullptr);
  EXPECT_EQ(f().primary_retains(1), retains + 1);
  EXPECT_EQ(hurray_buffer_release(&fresh), HURRAY_OK);
  auto frees = f().log("cuMemFree");
  ASSERT_EQ(frees.size(), 1u);
  EXPECT_EQ(frees[0].result, 0);
  EXPECT_EQ(frees[0].device, 1);

  // Revived by another library before libhurray looks: the incarnation
  // changed (new context id), so old memory is still skipped.
  hurray_buffer older = alloc_ok(dev(HURRAY_DEVICE_CUDA, 0));
  reset_context(0);
  revive_context(0);
  hurray_buffer newer = alloc_ok(dev(HURRAY_DEVICE_CUDA, 0));
  f().reset();
  EXPECT_EQ(hurray_buffer_release(&older), HURRAY_OK);
  EXPECT_EQ(f().call_count("cuMemFree"), 0);
  EXPECT_EQ(hurray_buffer_release(&newer), HURRAY_OK);
  EXPECT_EQ(f().call_count("cuMemFree"), 1);
  after = diagnostics();
  EXPECT_EQ(after.reset_skips, before.reset_skips + 3);
  EXPECT_EQ(after.failed, before.failed);
  EXPECT_EQ(f().live_allocations(), live_before_) << "the resets took the old ones";
}

// Defect 3: while another thread captures a graph in global mode,
// libhurray's allocation, free and synchronous copy must not invalidate it,
// and each thread keeps its own capture mode.
TEST_F(CudaLifecycle, AllocationCopyAndReleaseDuringAnotherThreadsGlobalCapture) {
  const int64_t shape[1] = {16};
  hurray_buffer cpu{};
  ASSERT_EQ(hurray_alloc(dev(HURRAY_DEVICE_CPU), kFloat32, 1, shape, 0, &cpu), HURRAY_OK);
  for (int i = 0; i < 16; ++i) static_cast<float *>(cpu.data)[i] = static_cast<float>(i);
  hurray_buffer before_capture = alloc_ok(dev(HURRAY_DEVICE_CUDA, 0));
  std::thread([&] { f().fn<void (*)(void)>("begin_global_capture")(); }).join();
  hurray_buffer g{}, back{};
  EXPECT_EQ(hurray_copy(&cpu, dev(HURRAY_DEVICE_CUDA, 1), &g), HURRAY_OK) << hurray_last_error();
  EXPECT_EQ(hurray_copy(&g, dev(HURRAY_DEVICE_CPU), &back), HURRAY_OK) << hurray_last_error();
  hurray_buffer pinned = alloc_ok(dev(HURRAY_DEVICE_CUDA_HOST, 0));
  EXPECT_EQ(hurray_buffer_release(&before_capture), HURRAY_OK);
  EXPECT_EQ(hurray_buffer_release(&pinned), HURRAY_OK);
  EXPECT_EQ(f().fn<int (*)(void)>("capture_mode")(), kCaptureModeGlobal) << "mode restored";
  std::thread([&] {
    f().fn<void (*)(int)>("set_capture_mode")(kCaptureModeThreadLocal);
    EXPECT_EQ(hurray_buffer_release(&g), HURRAY_OK);
    EXPECT_EQ(f().fn<int (*)(void)>("capture_mode")(), kCaptureModeThreadLocal);
  }).join();
  const Diag d = diagnostics();
  EXPECT_EQ(f().fn<int (*)(void)>("end_capture")(), 1) << "the capture was invalidated";
  for (const fake_call &c : f().log(nullptr)) EXPECT_NE(c.result, kCaptureUnsupported) << c.fn;
  if (back.release_fn != nullptr) {
    EXPECT_EQ(static_cast<float *>(back.data)[15], 15.0f);
    hurray_buffer_release(&back);
  }
  hurray_buffer_release(&cpu);
  EXPECT_EQ(diagnostics().failed, d.failed);
  EXPECT_EQ(f().live_allocations(), live_before_);
}

// Defect 6: pinned and managed memory of device 1 keep device 1, work in its
// context, and a process that only uses device 1 never touches device 0.
TEST_F(CudaLifecycle, PinnedAndManagedMemoryKeepTheDeviceTheyNamed) {
  const int retains0 = f().primary_retains(0);
  uint64_t worker = 0;
  std::thread([&] {
    worker = static_cast<uint64_t>(pthread_self());
    for (int32_t type : {HURRAY_DEVICE_CUDA_HOST, HURRAY_DEVICE_CUDA_MANAGED}) {
      SCOPED_TRACE(type);
      hurray_buffer h = alloc_ok(dev(type, 1));
      ASSERT_NE(h.release_fn, nullptr);
      EXPECT_EQ(h.device.device_id, 1);
      // The import check accepts what the driver reports for it.
      DLManagedTensor *t = nullptr;
      ASSERT_EQ(hurray_to_dlpack(&h, &t), HURRAY_OK);
      EXPECT_EQ(t->dl_tensor.device.device_id, 1);
      ASSERT_EQ(hurray_from_dlpack(t, HURRAY_IMPORT_CHECK_DEVICE_POINTER, &h), HURRAY_OK)
          << hurray_last_error();
      EXPECT_EQ(hurray_stream_wait(dev(type, 1), reinterpret_cast<void *>(0x10),
                                   reinterpret_cast<void *>(0x20)),
                HURRAY_OK)
          << hurray_last_error();
      EXPECT_EQ(hurray_buffer_release(&h), HURRAY_OK);
    }
    EXPECT_EQ(f().current_device(), -1);
  }).join();
  EXPECT_EQ(f().primary_retains(0), retains0) << "a context was created on device 0";
  int in_device1 = 0;
  for (const fake_call &c : f().log(nullptr)) {
    if (c.thread != worker) continue;
    EXPECT_NE(c.device, 0) << c.fn << " ran in device 0's context";
    in_device1 += c.device == 1;
  }
  EXPECT_GE(in_device1, 8);
  auto pinned = f().log("cuMemHostAlloc");
  ASSERT_EQ(pinned.size(), 1u);
  EXPECT_EQ(pinned[0].device, 1);
  EXPECT_EQ(f().call_count("cuMemHostAlloc"), 1);
  EXPECT_EQ(f().call_count("cuMemAllocManaged"), 1);
  EXPECT_EQ(f().live_allocations(), live_before_);
}

// Defect 7: memory served for the per-thread default stream is freed only
// after every thread's per-thread stream of its context: after the legacy
// stream, which waits for every blocking stream (never cuCtxSynchronize,
// which would break another thread's capture, docs/impl/gpu.md §3).
TEST_F(CudaLifecycle, PerThreadStreamMemoryIsFreedAfterTheLegacyStream) {
  hurray_buffer h{};
  std::thread([&] {
    h = alloc_ok(dev(HURRAY_DEVICE_CUDA, 1), reinterpret_cast<void *>(2));
  }).join();
  f().reset();
  uint64_t releaser = 0;
  std::thread([&] {
    releaser = static_cast<uint64_t>(pthread_self());
    EXPECT_EQ(hurray_buffer_release(&h), HURRAY_OK);
  }).join();
  const auto log = f().log(nullptr);
  const int sync = index_of_legacy_sync(log);
  const int free = index_of(log, "cuMemFree");
  ASSERT_GE(sync, 0) << "the free was not ordered after the per-thread streams";
  EXPECT_EQ(f().call_count("cuCtxSynchronize"), 0);
  ASSERT_GT(free, sync);
  EXPECT_EQ(log[static_cast<size_t>(sync)].device, 1);
  EXPECT_EQ(log[static_cast<size_t>(sync)].thread, releaser);
  EXPECT_EQ(f().call_count("cuMemFreeAsync"), 0);
  EXPECT_EQ(f().live_allocations(), live_before_);
}

// Defect 7: a stream of device 0 naming memory of device 1 (a cross-device
// destination): allocated synchronously on device 1, the free waits for the
// stream in device 0's context first.
TEST_F(CudaLifecycle, MemoryForAStreamOfAnotherDeviceIsFreedAfterThatStream) {
  void *const s0 = stream_create(0);
  hurray_buffer h = alloc_ok(dev(HURRAY_DEVICE_CUDA, 1), s0);
  ASSERT_NE(h.release_fn, nullptr);
  EXPECT_EQ(f().call_count("cuMemAllocAsync"), 0) << "device 0's stream used for device 1's pool";
  auto allocs = f().log("cuMemAlloc");
  ASSERT_EQ(allocs.size(), 1u);
  EXPECT_EQ(allocs[0].device, 1);
  f().reset();
  std::thread([&] { EXPECT_EQ(hurray_buffer_release(&h), HURRAY_OK); }).join();
  const auto log = f().log(nullptr);
  const int sync = index_of(log, "cuStreamSynchronize");
  const int free = index_of(log, "cuMemFree");
  ASSERT_GE(sync, 0);
  ASSERT_GT(free, sync);
  EXPECT_EQ(log[static_cast<size_t>(sync)].stream, s0);
  EXPECT_EQ(log[static_cast<size_t>(sync)].device, 0) << "waited for in the stream's own context";
  EXPECT_EQ(log[static_cast<size_t>(free)].device, 1);
  EXPECT_EQ(log[static_cast<size_t>(free)].result, 0);
  EXPECT_EQ(f().live_allocations(), live_before_);
  stream_destroy(s0);
}

// A stream the caller may since have destroyed is never passed to
// the driver to find out (undefined behaviour: the driver does not validate
// handles and hands destroyed ones out again). The release of memory
// ordered on a stream uses only the stream itself, which hurray.h makes the
// caller's to keep alive until then; the stream's device, for a stream of
// another device, was asked at allocation.
TEST_F(CudaLifecycle, ReleaseNeverAsksTheDriverAboutTheStream) {
  void *const s1 = stream_create(1);
  void *const s0 = stream_create(0);
  hurray_buffer own = alloc_ok(dev(HURRAY_DEVICE_CUDA, 1), s1);
  hurray_buffer other = alloc_ok(dev(HURRAY_DEVICE_CUDA, 1), s0);  // a stream of device 0
  f().reset();
  std::thread([&] {
    EXPECT_EQ(hurray_buffer_release(&own), HURRAY_OK);
    EXPECT_EQ(hurray_buffer_release(&other), HURRAY_OK);
  }).join();
  EXPECT_EQ(f().call_count("cuStreamQuery"), 0);
  EXPECT_EQ(f().call_count("cuStreamGetCtx"), 0);
  auto async_frees = f().log("cuMemFreeAsync");
  ASSERT_EQ(async_frees.size(), 1u);
  EXPECT_EQ(async_frees[0].stream, s1);
  auto syncs = f().log("cuStreamSynchronize");
  ASSERT_EQ(syncs.size(), 1u);
  EXPECT_EQ(syncs[0].stream, s0);
  EXPECT_EQ(syncs[0].device, 0) << "waited for in the stream's own context";
  // The caller destroys its streams after the releases; a new stream gets
  // a destroyed one's handle, as from the real driver, and serves as new.
  stream_destroy(s1);
  void *const again = stream_create(1);
  EXPECT_EQ(again, s1) << "the fake no longer reuses handles like the driver";
  hurray_buffer next = alloc_ok(dev(HURRAY_DEVICE_CUDA, 1), again);
  EXPECT_EQ(hurray_buffer_release(&next), HURRAY_OK);
  stream_destroy(again);
  stream_destroy(s0);
  EXPECT_EQ(f().live_allocations(), live_before_);
}

// A copy to another device on the legacy default stream (1) is
// queued on the *source* device's legacy stream; its destination's release
// must wait for that one, not for the legacy stream of whichever context is
// current at release (what cuStreamGetCtx(1) answers).
TEST_F(CudaLifecycle, LegacyStreamCopyToAnotherDeviceWaitsForTheSourceDevicesLegacyStream) {
  void *const legacy = reinterpret_cast<void *>(1);
  const int before = unordered();
  hurray_buffer src = alloc_ok(dev(HURRAY_DEVICE_CUDA, 0));
  hurray_buffer out{};
  ASSERT_EQ(hurray_copy_async(&src, dev(HURRAY_DEVICE_CUDA, 1), legacy, &out), HURRAY_OK)
      << hurray_last_error();
  f().reset();
  std::thread([&] { EXPECT_EQ(hurray_buffer_release(&out), HURRAY_OK); }).join();
  const auto log = f().log(nullptr);
  const int sync = index_of(log, "cuStreamSynchronize");
  const int free = index_of(log, "cuMemFree");
  ASSERT_GE(sync, 0);
  ASSERT_GT(free, sync);
  EXPECT_EQ(log[static_cast<size_t>(sync)].stream, legacy);
  EXPECT_EQ(log[static_cast<size_t>(sync)].device, 0)
      << "another device's legacy stream waited for";
  EXPECT_EQ(unordered(), before) << "freed before the copy on device 0's legacy stream";
  EXPECT_EQ(hurray_buffer_release(&src), HURRAY_OK);
  EXPECT_EQ(f().live_allocations(), live_before_);
}

// A release while the memory's stream is being captured into a
// graph may neither query nor synchronise the stream (or its context, or
// the legacy stream), nor free on it (a free node needs a graph
// allocation): the free is deferred, the capture stays valid, and once the
// capture has ended the next CUDA allocation or release frees it, in order.
TEST_F(CudaLifecycle, ReleaseDuringACaptureOfItsStreamIsDeferredUntilTheCaptureEnds) {
  void *const s1 = stream_create(1);
  void *const s0 = stream_create(0);
  hurray_buffer on_stream = alloc_ok(dev(HURRAY_DEVICE_CUDA, 1), s1);
  hurray_buffer per_thread = alloc_ok(dev(HURRAY_DEVICE_CUDA, 1), reinterpret_cast<void *>(2));
  hurray_buffer src = alloc_ok(dev(HURRAY_DEVICE_CUDA, 0));
  hurray_buffer peer{};  // a copy on s0 into device 1: its release waits for s0
  ASSERT_EQ(hurray_copy_async(&src, dev(HURRAY_DEVICE_CUDA, 1), s0, &peer), HURRAY_OK)
      << hurray_last_error();
  const int before = unordered();
  begin_capture(s1);
  begin_capture(s0);
  f().reset();
  const Diag d = diagnostics();
  std::thread([&] {
    EXPECT_EQ(hurray_buffer_release(&on_stream), HURRAY_OK);
    EXPECT_EQ(hurray_buffer_release(&per_thread), HURRAY_OK);
    EXPECT_EQ(hurray_buffer_release(&peer), HURRAY_OK);
  }).join();
  EXPECT_EQ(f().call_count("cuMemFreeAsync"), 0) << "a free queued on a capturing stream";
  EXPECT_EQ(f().call_count("cuMemFree"), 0) << "freed before the stream's work was waited for";
  EXPECT_EQ(f().live_allocations(), live_before_ + 4);
  // Still capturing: another thread's allocation and release leave them.
  hurray_buffer plain = alloc_ok(dev(HURRAY_DEVICE_CUDA, 1));
  EXPECT_EQ(hurray_buffer_release(&plain), HURRAY_OK);
  EXPECT_EQ(f().call_count("cuMemFreeAsync"), 0);
  const int frees = f().fn<int (*)(void)>("frees")();
  f().reset();
  EXPECT_EQ(end_capture(s1), 1) << "the capture of s1 was invalidated";
  EXPECT_EQ(end_capture(s0), 1) << "the capture of s0 was invalidated";
  // After the captures, libhurray's retirer frees the deferred memory in
  // order, with no further call: s1 and s0 are blocking streams, so the
  // deferrals were ordered on the legacy streams instead (gpu.md §2).
  EXPECT_EQ(f().fn<int (*)(int, int)>("wait_for_frees")(frees + 3, 20000), frees + 3);
  EXPECT_EQ(diagnostics().failed, d.failed);
  auto async_frees = f().log("cuMemFreeAsync");
  ASSERT_EQ(async_frees.size(), 1u);
  EXPECT_EQ(async_frees[0].stream, reinterpret_cast<void *>(1));
  EXPECT_EQ(async_frees[0].device, 1);
  EXPECT_EQ(f().call_count("cuCtxSynchronize"), 0);
  auto syncs = f().log("cuStreamSynchronize");
  // Device 1's legacy stream (per_thread) and device 0's (peer), in the
  // order the retirer's passes met the captures' ends.
  ASSERT_EQ(syncs.size(), 2u);
  EXPECT_EQ(syncs[0].stream, reinterpret_cast<void *>(1));
  EXPECT_EQ(syncs[1].stream, reinterpret_cast<void *>(1));
  EXPECT_EQ(syncs[0].device + syncs[1].device, 1) << "not one wait on each device";
  EXPECT_NE(syncs[0].device, syncs[1].device);
  EXPECT_EQ(hurray_buffer_release(&src), HURRAY_OK);
  EXPECT_EQ(unordered(), before);
  EXPECT_EQ(diagnostics().failed, d.failed);
  EXPECT_EQ(f().live_allocations(), live_before_);
  stream_destroy(s1);
  stream_destroy(s0);
}

// A copy that waits on the host (into kDLCPU memory, or without a
// stream) is refused before anything is queued while its stream (for no
// stream: a blocking stream of the device) is being captured.
TEST_F(CudaLifecycle, CopyThatWaitsOnTheHostIsRefusedDuringACapture) {
  void *const s0 = stream_create(0);
  hurray_buffer g = alloc_ok(dev(HURRAY_DEVICE_CUDA, 0));
  begin_capture(s0);
  f().reset();
  hurray_buffer out{};
  EXPECT_EQ(hurray_copy_async(&g, dev(HURRAY_DEVICE_CPU), s0, &out), HURRAY_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(hurray_last_error()).find("is being captured"), std::string::npos)
      << hurray_last_error();
  EXPECT_EQ(hurray_copy(&g, dev(HURRAY_DEVICE_CPU), &out), HURRAY_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(hurray_last_error()).find("legacy default stream"), std::string::npos)
      << hurray_last_error();
  // A pinned source read by the host waits for the legacy stream first.
  hurray_buffer pinned = alloc_ok(dev(HURRAY_DEVICE_CUDA_HOST, 0));
  EXPECT_EQ(hurray_copy(&pinned, dev(HURRAY_DEVICE_CPU), &out), HURRAY_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(out.release_fn, nullptr);
  EXPECT_EQ(f().call_count("cuMemcpyAsync"), 0) << "queued into the user's graph";
  // A copy that stays on the device is captured as usual.
  hurray_buffer dst{};
  EXPECT_EQ(hurray_copy_async(&g, dev(HURRAY_DEVICE_CUDA, 0), s0, &dst), HURRAY_OK)
      << hurray_last_error();
  EXPECT_EQ(end_capture(s0), 1) << "the capture was invalidated";
  EXPECT_EQ(hurray_buffer_release(&dst), HURRAY_OK);  // after the capture: freed on s0
  EXPECT_EQ(hurray_buffer_release(&g), HURRAY_OK);
  EXPECT_EQ(hurray_buffer_release(&pinned), HURRAY_OK);
  EXPECT_EQ(f().live_allocations(), live_before_);
  stream_destroy(s0);
}

// Defect 7, HIP: hipStreamPerThread memory is freed after the whole device.
TEST(HipLifecycle, PerThreadStreamMemoryIsFreedAfterTheWholeDevice) {
  Fake &f = fake_hip();
  if (!f.loaded()) GTEST_SKIP() << "the fake HIP runtime is not in use";
  f.reset();
  const int64_t live_before = f.live_allocations();
  hurray_buffer h{};
  std::thread([&] {
    h = alloc_ok(dev(HURRAY_DEVICE_ROCM, 1), reinterpret_cast<void *>(2));
  }).join();
  EXPECT_EQ(f.call_count("hipMallocAsync"), 0);
  f.reset();
  std::thread([&] { EXPECT_EQ(hurray_buffer_release(&h), HURRAY_OK); }).join();
  const auto log = f.log(nullptr);
  const int sync = index_of(log, "hipDeviceSynchronize");
  const int free = index_of(log, "hipFree");
  ASSERT_GE(sync, 0);
  ASSERT_GT(free, sync);
  EXPECT_EQ(log[static_cast<size_t>(sync)].device, 1);
  EXPECT_EQ(log[static_cast<size_t>(free)].device, 1);
  EXPECT_EQ(f.live_allocations(), live_before);
  f.reset();
}

// Defect 6, HIP: pinned memory keeps the device it named.
TEST(HipLifecycle, PinnedMemoryKeepsTheDeviceItNamed) {
  Fake &f = fake_hip();
  if (!f.loaded()) GTEST_SKIP() << "the fake HIP runtime is not in use";
  f.reset();
  hurray_buffer h = alloc_ok(dev(HURRAY_DEVICE_ROCM_HOST, 1));
  ASSERT_NE(h.release_fn, nullptr);
  EXPECT_EQ(h.device.device_id, 1);
  auto allocs = f.log("hipHostMalloc");
  ASSERT_EQ(allocs.size(), 1u);
  EXPECT_EQ(allocs[0].device, 1);
  EXPECT_EQ(f.current_device(), 0);
  EXPECT_EQ(hurray_buffer_release(&h), HURRAY_OK);
  EXPECT_EQ(f.call_count("hipHostFree"), 1);
  f.reset();
}

// A stream-ordered copy into kDLCUDA memory of another device: the
// destination cannot come from the stream's pool, so it is allocated
// synchronously on its own device, and its release waits for the copy's
// stream (in that stream's context) before the free (docs/impl/gpu.md §4).
TEST_F(CudaLifecycle, CopyToAnotherDeviceOnAStreamIsFreedAfterThatStream) {
  void *const s0 = stream_create(0);
  const int unordered = f().fn<int (*)(void)>("unordered_frees")();
  hurray_buffer src = alloc_ok(dev(HURRAY_DEVICE_CUDA, 0));
  hurray_buffer out{};
  ASSERT_EQ(hurray_copy_async(&src, dev(HURRAY_DEVICE_CUDA, 1), s0, &out), HURRAY_OK)
      << hurray_last_error();
  EXPECT_EQ(f().call_count("cuMemAllocAsync"), 0) << "device 0's stream used for device 1's pool";
  f().reset();
  std::thread([&] { EXPECT_EQ(hurray_buffer_release(&out), HURRAY_OK); }).join();
  const auto log = f().log(nullptr);
  const int sync = index_of(log, "cuStreamSynchronize");
  const int free = index_of(log, "cuMemFree");
  ASSERT_GE(sync, 0) << "the free is not ordered after the copy's stream";
  ASSERT_GT(free, sync);
  EXPECT_EQ(log[static_cast<size_t>(sync)].stream, s0);
  EXPECT_EQ(log[static_cast<size_t>(sync)].device, 0) << "waited for in the stream's own context";
  EXPECT_EQ(log[static_cast<size_t>(free)].device, 1);
  EXPECT_EQ(log[static_cast<size_t>(free)].result, 0);
  EXPECT_EQ(f().fn<int (*)(void)>("unordered_frees")(), unordered);
  EXPECT_EQ(hurray_buffer_release(&src), HURRAY_OK);
  EXPECT_EQ(f().live_allocations(), live_before_);
  stream_destroy(s0);
}

// Copies between kDLCPU and pinned or managed memory of device 1 run with
// device 1's context current, never device 0's (docs/impl/gpu.md §4).
TEST_F(CudaLifecycle, CopiesOfPinnedAndManagedMemoryRunOnTheDeviceTheyName) {
  void *const s1 = stream_create(1);
  hurray_buffer pinned = alloc_ok(dev(HURRAY_DEVICE_CUDA_HOST, 1));
  hurray_buffer managed = alloc_ok(dev(HURRAY_DEVICE_CUDA_MANAGED, 1));
  hurray_buffer cpu = alloc_ok(dev(HURRAY_DEVICE_CPU, 0));
  std::memset(cpu.data, 0x11, 16 * sizeof(float));
  struct Case {
    const hurray_buffer *src;
    hurray_device to;
    void *stream;
  };
  const Case cases[] = {
      {&pinned, dev(HURRAY_DEVICE_CPU, 0), s1},        // pinned to pageable, on a stream
      {&managed, dev(HURRAY_DEVICE_CPU, 0), nullptr},  // managed is not host-readable here
      {&cpu, dev(HURRAY_DEVICE_CUDA_MANAGED, 1), nullptr},
      {&pinned, dev(HURRAY_DEVICE_CUDA_MANAGED, 1), s1},
  };
  for (const Case &c : cases) {
    SCOPED_TRACE(std::to_string(c.src->device.device_type) + " -> " +
                 std::to_string(c.to.device_type));
    f().reset();
    hurray_buffer out{};
    ASSERT_EQ(hurray_copy_async(c.src, c.to, c.stream, &out), HURRAY_OK) << hurray_last_error();
    auto copies = f().log("cuMemcpyAsync");
    ASSERT_EQ(copies.size(), 1u);
    EXPECT_EQ(copies[0].device, 1) << "copied with another device's context current";
    EXPECT_EQ(copies[0].stream, c.stream);
    for (const fake_call &call : f().log("cuStreamSynchronize")) {
      EXPECT_EQ(call.device, 1) << "synchronised in another device's context";
    }
    EXPECT_EQ(hurray_buffer_release(&out), HURRAY_OK);
  }
  for (hurray_buffer *b : {&pinned, &managed, &cpu}) EXPECT_EQ(hurray_buffer_release(b), HURRAY_OK);
  EXPECT_EQ(f().live_allocations(), live_before_);
  stream_destroy(s1);
}

// HIP: the destination of a stream-ordered copy to another device is freed
// after the copy's stream, explicitly (docs/impl/gpu.md §4).
TEST(HipLifecycle, CopyToAnotherDeviceOnAStreamIsFreedAfterThatStream) {
  Fake &f = fake_hip();
  if (!f.loaded()) GTEST_SKIP() << "the fake HIP runtime is not in use";
  f.reset();
  const int64_t live_before = f.live_allocations();
  void *const stream = reinterpret_cast<void *>(0x7100);  // a stream of device 0
  hurray_buffer src = alloc_ok(dev(HURRAY_DEVICE_ROCM, 0));
  hurray_buffer out{};
  ASSERT_EQ(hurray_copy_async(&src, dev(HURRAY_DEVICE_ROCM, 1), stream, &out), HURRAY_OK)
      << hurray_last_error();
  EXPECT_EQ(f.call_count("hipMallocAsync"), 0);
  f.reset();
  std::thread([&] { EXPECT_EQ(hurray_buffer_release(&out), HURRAY_OK); }).join();
  const auto log = f.log(nullptr);
  const int sync = index_of(log, "hipStreamSynchronize");
  const int free = index_of(log, "hipFree");
  ASSERT_GE(sync, 0) << "the free is not ordered after the copy's stream";
  ASSERT_GT(free, sync);
  EXPECT_EQ(log[static_cast<size_t>(sync)].stream, stream);
  EXPECT_EQ(log[static_cast<size_t>(free)].device, 1);
  EXPECT_EQ(f.call_count("hipFreeAsync"), 0);
  EXPECT_EQ(hurray_buffer_release(&src), HURRAY_OK);
  EXPECT_EQ(f.live_allocations(), live_before);
  f.reset();
}

// HIP: a copy between kDLCPU and pinned memory of device 1 runs with
// device 1 current.
TEST(HipLifecycle, CopiesOfPinnedMemoryRunOnTheDeviceItNames) {
  Fake &f = fake_hip();
  if (!f.loaded()) GTEST_SKIP() << "the fake HIP runtime is not in use";
  f.reset();
  const int64_t live_before = f.live_allocations();
  void *const stream = reinterpret_cast<void *>(0x7200);  // a stream of device 1
  hurray_buffer pinned = alloc_ok(dev(HURRAY_DEVICE_ROCM_HOST, 1));
  f.reset();
  hurray_buffer out{};
  ASSERT_EQ(hurray_copy_async(&pinned, dev(HURRAY_DEVICE_CPU, 0), stream, &out), HURRAY_OK)
      << hurray_last_error();
  auto copies = f.log("hipMemcpyAsync");
  ASSERT_EQ(copies.size(), 1u);
  EXPECT_EQ(copies[0].device, 1) << "copied with another device current";
  for (const fake_call &c : f.log("hipStreamSynchronize")) EXPECT_EQ(c.device, 1);
  for (hurray_buffer *b : {&out, &pinned}) EXPECT_EQ(hurray_buffer_release(b), HURRAY_OK);
  EXPECT_EQ(f.live_allocations(), live_before);
  f.reset();
}

namespace {

int unordered_frees(const Fake &f) { return f.fn<int (*)(void)>("unordered_frees")(); }

}  // namespace

// Defect 7, the per-thread default stream and a destination on another
// device: the copy is queued on the copying thread's per-thread stream in
// device 0's context, which the releasing thread cannot name; the free of
// device 1's memory waits first for device 0's legacy stream, which waits
// for every thread's per-thread stream there (the fake counts a free that
// nothing ordered after the pending copy).
TEST_F(CudaLifecycle, PerThreadStreamCopyToAnotherDeviceIsFreedAfterThatDevicesContext) {
  void *const per_thread = reinterpret_cast<void *>(2);
  hurray_buffer src{}, out{};
  const int unordered = unordered_frees(f());
  std::thread([&] {
    src = alloc_ok(dev(HURRAY_DEVICE_CUDA, 0));
    ASSERT_EQ(hurray_copy_async(&src, dev(HURRAY_DEVICE_CUDA, 1), per_thread, &out), HURRAY_OK)
        << hurray_last_error();
  }).join();
  ASSERT_NE(out.release_fn, nullptr);
  auto copies = f().log("cuMemcpyAsync");
  ASSERT_EQ(copies.size(), 1u);
  EXPECT_EQ(copies[0].stream, per_thread);
  EXPECT_EQ(copies[0].device, 0) << "queued in the source's context";
  EXPECT_EQ(f().call_count("cuMemAllocAsync"), 0);
  f().reset();
  uint64_t releaser = 0;
  std::thread([&] {
    releaser = static_cast<uint64_t>(pthread_self());
    EXPECT_EQ(hurray_buffer_release(&out), HURRAY_OK);
    EXPECT_EQ(f().current_device(), -1) << "the releasing thread's context stack changed";
  }).join();
  EXPECT_EQ(unordered_frees(f()), unordered) << "freed while the copy may still run";
  const auto log = f().log(nullptr);
  const int sync = index_of_legacy_sync(log);
  const int free = index_of(log, "cuMemFree");
  ASSERT_GE(sync, 0) << "the free is not ordered after device 0's per-thread streams";
  EXPECT_EQ(f().call_count("cuCtxSynchronize"), 0);
  ASSERT_GT(free, sync);
  EXPECT_EQ(log[static_cast<size_t>(sync)].device, 0) << "synchronised another context";
  EXPECT_EQ(log[static_cast<size_t>(sync)].thread, releaser);
  EXPECT_EQ(log[static_cast<size_t>(free)].device, 1);
  EXPECT_EQ(log[static_cast<size_t>(free)].result, 0);
  EXPECT_EQ(f().call_count("cuMemFreeAsync"), 0);
  EXPECT_EQ(hurray_buffer_release(&src), HURRAY_OK);
  EXPECT_EQ(f().live_allocations(), live_before_);
}

// The same for HIP: hipDeviceSynchronize with device 0 current, then
// hipFree on device 1.
TEST(HipLifecycle, PerThreadStreamCopyToAnotherDeviceIsFreedAfterThatDevice) {
  Fake &f = fake_hip();
  if (!f.loaded()) GTEST_SKIP() << "the fake HIP runtime is not in use";
  f.reset();
  const int64_t live_before = f.live_allocations();
  const int unordered = unordered_frees(f);
  void *const per_thread = reinterpret_cast<void *>(2);
  hurray_buffer src{}, out{};
  std::thread([&] {
    src = alloc_ok(dev(HURRAY_DEVICE_ROCM, 0));
    ASSERT_EQ(hurray_copy_async(&src, dev(HURRAY_DEVICE_ROCM, 1), per_thread, &out), HURRAY_OK)
        << hurray_last_error();
  }).join();
  ASSERT_NE(out.release_fn, nullptr);
  auto copies = f.log("hipMemcpyAsync");
  ASSERT_EQ(copies.size(), 1u);
  EXPECT_EQ(copies[0].stream, per_thread);
  EXPECT_EQ(copies[0].device, 0);
  EXPECT_EQ(f.call_count("hipMallocAsync"), 0);
  f.reset();
  std::thread([&] {
    EXPECT_EQ(hurray_buffer_release(&out), HURRAY_OK);
    EXPECT_EQ(f.current_device(), 0) << "the releasing thread's device changed";
  }).join();
  EXPECT_EQ(unordered_frees(f), unordered) << "freed while the copy may still run";
  const auto log = f.log(nullptr);
  const int sync = index_of(log, "hipDeviceSynchronize");
  const int free = index_of(log, "hipFree");
  ASSERT_GE(sync, 0) << "the free is not ordered after device 0's per-thread streams";
  ASSERT_GT(free, sync);
  EXPECT_EQ(log[static_cast<size_t>(sync)].device, 0);
  EXPECT_EQ(log[static_cast<size_t>(free)].device, 1);
  EXPECT_EQ(log[static_cast<size_t>(free)].result, 0);
  EXPECT_EQ(hurray_buffer_release(&src), HURRAY_OK);
  EXPECT_EQ(f.live_allocations(), live_before);
  f.reset();
}

// HIP: the release never asks the runtime about a stream (ROCm 7
// may crash on a destroyed handle, which the caller's next create may hand
// out again); during a capture of the stream the free is deferred until the
// capture has ended, and the capture stays valid.
TEST(HipLifecycle, ReleaseNeverQueriesTheStreamAndDefersDuringACapture) {
  Fake &f = fake_hip();
  if (!f.loaded()) GTEST_SKIP() << "the fake HIP runtime is not in use";
  auto stream_create = f.fn<void *(*)(int)>("stream_create");
  auto stream_destroy = f.fn<void (*)(void *, int)>("stream_destroy");
  auto begin_capture = f.fn<void (*)(void *)>("stream_begin_capture");
  auto end_capture = f.fn<int (*)(void *)>("stream_end_capture");
  auto prohibited = f.fn<int (*)(void)>("prohibited_calls");
  auto dead = f.fn<int (*)(void)>("dead_stream_uses");
  ASSERT_NE(stream_create, nullptr);
  ASSERT_NE(dead, nullptr);
  f.reset();
  const int64_t live_before = f.live_allocations();
  const int prohibited_before = prohibited(), dead_before = dead();
  void *const s1 = stream_create(1);
  hurray_buffer a = alloc_ok(dev(HURRAY_DEVICE_ROCM, 1), s1);
  hurray_buffer b = alloc_ok(dev(HURRAY_DEVICE_ROCM, 1), s1);
  EXPECT_EQ(hurray_buffer_release(&a), HURRAY_OK);
  EXPECT_EQ(f.call_count("hipStreamQuery"), 0);
  EXPECT_EQ(f.call_count("hipFreeAsync"), 1);
  begin_capture(s1);
  f.reset();
  std::thread([&] { EXPECT_EQ(hurray_buffer_release(&b), HURRAY_OK); }).join();
  EXPECT_EQ(f.call_count("hipFreeAsync"), 0) << "a free queued on a capturing stream";
  hurray_buffer out{};
  hurray_buffer c = alloc_ok(dev(HURRAY_DEVICE_ROCM, 1));
  EXPECT_EQ(hurray_copy_async(&c, dev(HURRAY_DEVICE_CPU), s1, &out), HURRAY_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(f.call_count("hipMemcpyAsync"), 0);
  EXPECT_EQ(end_capture(s1), 1) << "the capture was invalidated";
  f.reset();
  EXPECT_EQ(hurray_buffer_release(&c), HURRAY_OK);  // also frees b, on s1
  auto frees = f.log("hipFreeAsync");
  ASSERT_EQ(frees.size(), 1u);
  EXPECT_EQ(frees[0].stream, s1);
  EXPECT_EQ(f.call_count("hipStreamQuery"), 0);
  // The owner destroys the stream; the next create gets its handle again.
  stream_destroy(s1, 0);
  void *const again = stream_create(1);
  EXPECT_EQ(again, s1) << "the fake no longer reuses handles like ROCm";
  stream_destroy(again, 0);
  EXPECT_EQ(prohibited(), prohibited_before) << "a call prohibited during capture";
  EXPECT_EQ(dead(), dead_before) << "a destroyed stream passed to the runtime";
  EXPECT_EQ(f.live_allocations(), live_before);
  f.reset();
}

// HIP: a caller that destroys a stream before releasing memory
// ordered on it breaks hurray_alloc_async's contract. Should ROCm answer
// hipErrorContextIsDestroyed (its answer for a stream it no longer knows,
// and also its teardown code) instead of crashing, that is one failed
// release, not the runtime's end: later HIP releases still free.
TEST(HipLifecycle, DestroyedStreamIsNotTakenForTheRuntimesTeardown) {
  Fake &f = fake_hip();
  if (!f.loaded()) GTEST_SKIP() << "the fake HIP runtime is not in use";
  auto stream_create = f.fn<void *(*)(int)>("stream_create");
  auto stream_destroy = f.fn<void (*)(void *, int)>("stream_destroy");
  ASSERT_NE(stream_create, nullptr);
  f.reset();
  const int64_t live_before = f.live_allocations();
  void *const s1 = stream_create(1);
  hurray_buffer gone = alloc_ok(dev(HURRAY_DEVICE_ROCM, 1), s1);
  stream_destroy(s1, 0);  // hipErrorContextIsDestroyed from now on
  const Diag before = diagnostics();
  EXPECT_EQ(hurray_buffer_release(&gone), HURRAY_OK);
  const Diag after = diagnostics();
  EXPECT_EQ(after.failed, before.failed + 1);
  EXPECT_EQ(after.teardown, before.teardown) << "a destroyed stream read as the runtime's end";
  hurray_buffer next = alloc_ok(dev(HURRAY_DEVICE_ROCM, 1));
  f.reset();
  EXPECT_EQ(hurray_buffer_release(&next), HURRAY_OK);
  EXPECT_EQ(f.call_count("hipFree"), 1);
  EXPECT_EQ(f.live_allocations(), live_before + 1) << "only the contract breaker's memory leaked";
  f.reset();
}
