// SPDX-License-Identifier: Apache-2.0
// Releases deferred because their stream was being captured into a graph
// (docs/impl/gpu.md §2, "Releases during a capture of their stream"):
// the memory of a blocking-class stream (a stream without
// CU_STREAM_NON_BLOCKING, the legacy and the per-thread default streams) is
// retired by libhurray's own retirer as soon as no blocking stream of its
// context captures, ordered on the legacy stream and never on the caller's
// stream, which the caller may destroy meanwhile; the memory of a
// non-blocking stream keeps its stream and is retired by
// hurray_retire_deferred_frees (or a later allocation or release). The fake
// counts uses of destroyed streams, host-blocking synchronisations,
// invalidated captures and frees (tests/fake_drivers/fake_capture.h,
// fake_frees.h); a test waits for a free made by the retirer through the
// fake's counter, bounded, never by sleeping.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "support.h"

using namespace gpu_test;

namespace {

constexpr unsigned kNonBlocking = 1;  // CU_STREAM_NON_BLOCKING
void *const kLegacy = reinterpret_cast<void *>(1);
constexpr int kWaitMs = 20000;  // a bound that only turns a hang into a failure

class CudaDeferredFree : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!fake_cuda().loaded()) GTEST_SKIP() << "the fake CUDA driver is not in use";
    if (f().fn<int (*)(int, int)>("wait_for_frees") == nullptr) {
      GTEST_SKIP() << "the fake CUDA driver does not count frees";
    }
    f().reset();
    f().set_current_device(-1);
    live_before_ = f().live_allocations();
    dead_before_ = count("dead_stream_uses");
    unordered_before_ = count("unordered_frees");
    invalidated_before_ = count("invalidated_captures");
    prohibited_before_ = count("prohibited_calls");
    failed_before_ = diagnostics().failed;
  }
  void TearDown() override {
    if (!fake_cuda().loaded()) return;
    EXPECT_EQ(count("dead_stream_uses"), dead_before_) << "a destroyed stream was used";
    EXPECT_EQ(count("unordered_frees"), unordered_before_)
        << "a free not ordered after the work using the memory";
    EXPECT_EQ(count("invalidated_captures"), invalidated_before_) << "a capture was invalidated";
    EXPECT_EQ(count("prohibited_calls"), prohibited_before_)
        << "a call prohibited during a capture";
    EXPECT_EQ(diagnostics().failed, failed_before_);
    EXPECT_EQ(f().live_allocations(), live_before_);
    f().set_current_device(-1);
    f().reset();
  }
  Fake &f() { return fake_cuda(); }
  int count(const char *name) { return f().fn<int (*)(void)>(name)(); }
  int wait_for_frees(int at_least) {
    return f().fn<int (*)(int, int)>("wait_for_frees")(at_least, kWaitMs);
  }
  void *stream(int d, unsigned flags = 0) {
    return f().fn<void *(*)(int, unsigned)>("stream_create_flags")(d, flags);
  }
  void destroy(void *s) { f().fn<void (*)(void *)>("stream_destroy")(s); }
  void begin_capture(void *s) { f().fn<void (*)(void *)>("stream_begin_capture")(s); }
  int end_capture(void *s) { return f().fn<int (*)(void *)>("stream_end_capture")(s); }
  // Calls logged since the last reset that named `s`.
  int calls_naming(const void *s) {
    int n = 0;
    for (const fake_call &c : f().log(nullptr)) n += c.stream == s;
    return n;
  }
  int64_t live_before_ = 0;
  uint64_t failed_before_ = 0;
  int dead_before_ = 0, unordered_before_ = 0, invalidated_before_ = 0, prohibited_before_ = 0;
};

void release_on_another_thread(hurray_buffer *h) {
  std::thread([h] { EXPECT_EQ(hurray_buffer_release(h), HURRAY_OK); }).join();
}

}  // namespace

// Stream-ordered memory of a blocking stream released while that stream is
// captured; the caller ends the capture and destroys the stream while
// another blocking stream of the device still captures (so the legacy
// stream stays unusable). When that capture ends too, the memory is freed
// without any further libhurray call, on the legacy stream (ordered after
// the destroyed stream's work), with no host wait and no use of the
// destroyed stream. Today the retry named the destroyed stream, at the next
// allocation or release.
TEST_F(CudaDeferredFree, BlockingStreamDestroyedBeforeTheRetirementIsNeverUsedAgain) {
  void *const s = stream(1);
  void *const other = stream(1);
  hurray_buffer a = alloc_ok(dev(HURRAY_DEVICE_CUDA, 1), s);
  hurray_buffer b{};  // work on s still uses a
  ASSERT_EQ(hurray_copy_async(&a, dev(HURRAY_DEVICE_CUDA, 1), s, &b), HURRAY_OK)
      << hurray_last_error();
  ASSERT_EQ(hurray_buffer_release(&b), HURRAY_OK);
  begin_capture(s);
  begin_capture(other);
  f().reset();
  const int frees = count("frees");
  const int syncs = count("stream_synchronizations");
  const int ctx_syncs = count("context_synchronizations");
  release_on_another_thread(&a);
  EXPECT_EQ(f().call_count("cuMemFreeAsync"), 0) << "a free queued on a capturing stream";
  EXPECT_EQ(end_capture(s), 1) << "the capture of the released memory's stream was invalidated";
  destroy(s);
  const int naming_s = calls_naming(s);
  EXPECT_EQ(count("frees"), frees) << "freed while a blocking stream still captures";
  EXPECT_EQ(end_capture(other), 1) << "the other capture was invalidated";
  EXPECT_EQ(wait_for_frees(frees + 1), frees + 1) << "not retired once the captures ended";
  auto async_frees = f().log("cuMemFreeAsync");
  ASSERT_EQ(async_frees.size(), 1u);
  EXPECT_EQ(async_frees[0].stream, kLegacy) << "not ordered on the legacy stream";
  EXPECT_EQ(calls_naming(s), naming_s) << "the destroyed stream was named after its destruction";
  EXPECT_EQ(count("stream_synchronizations"), syncs) << "a host wait for stream-ordered memory";
  EXPECT_EQ(count("context_synchronizations"), ctx_syncs);
  destroy(other);
}

// Memory of device 1 written by a copy queued on a blocking stream of
// device 0, released while that stream captures: once the capture ended
// (and the stream was destroyed), it is freed after device 0's legacy
// stream, never naming the destroyed stream.
TEST_F(CudaDeferredFree, StreamOfAnotherDeviceDestroyedAfterItsCaptureIsNeverUsedAgain) {
  void *const s0 = stream(0);
  void *const guard = stream(0);  // keeps device 0's legacy stream captured
  hurray_buffer src = alloc_ok(dev(HURRAY_DEVICE_CUDA, 0), nullptr);
  hurray_buffer dst{};
  ASSERT_EQ(hurray_copy_async(&src, dev(HURRAY_DEVICE_CUDA, 1), s0, &dst), HURRAY_OK)
      << hurray_last_error();
  begin_capture(s0);
  begin_capture(guard);
  f().reset();
  const int frees = count("frees");
  release_on_another_thread(&dst);
  EXPECT_EQ(f().call_count("cuMemFree"), 0) << "freed before the stream's work was waited for";
  EXPECT_EQ(end_capture(s0), 1);
  destroy(s0);
  const int naming_s0 = calls_naming(s0);
  EXPECT_EQ(end_capture(guard), 1);
  EXPECT_EQ(wait_for_frees(frees + 1), frees + 1) << "not retired once the captures ended";
  auto syncs = f().log("cuStreamSynchronize");
  ASSERT_EQ(syncs.size(), 1u);
  EXPECT_EQ(syncs[0].stream, kLegacy);
  EXPECT_EQ(syncs[0].device, 0) << "not device 0's legacy stream";
  EXPECT_EQ(calls_naming(s0), naming_s0) << "the destroyed stream was named after its destruction";
  EXPECT_EQ(f().call_count("cuCtxSynchronize"), 0);
  // src's copy was queued on s0: order its free after device 0's legacy
  // stream (which waited for s0 above).
  EXPECT_EQ(hurray_buffer_release(&src), HURRAY_OK);
  destroy(guard);
}

// Memory ordered on the per-thread default stream, released while a
// blocking stream of the device captures: freed when that capture ends,
// without another libhurray call (today: at the next allocation or release).
TEST_F(CudaDeferredFree, PerThreadStreamMemoryIsRetiredWhenTheCaptureEnds) {
  void *const s = stream(1);
  hurray_buffer a = alloc_ok(dev(HURRAY_DEVICE_CUDA, 1), reinterpret_cast<void *>(2));
  begin_capture(s);
  f().reset();
  const int frees = count("frees");
  release_on_another_thread(&a);
  EXPECT_EQ(count("frees"), frees);
  EXPECT_EQ(end_capture(s), 1);
  EXPECT_EQ(wait_for_frees(frees + 1), frees + 1) << "not retired once the capture ended";
  auto syncs = f().log("cuStreamSynchronize");
  ASSERT_EQ(syncs.size(), 1u);
  EXPECT_EQ(syncs[0].stream, kLegacy);
  EXPECT_EQ(f().call_count("cuMemFree"), 1);
  destroy(s);
}

// Stream-ordered memory of a NON-BLOCKING stream released while that
// stream captures: CUDA offers no way to order its free after the stream's
// pre-capture work without naming the stream, so the deferral keeps it.
// libhurray's retirer never touches it, even while it retires a blocking
// deferral beside it; hurray_retire_deferred_frees reports it as remaining
// while the capture lasts, and retires it, on its stream, once the capture
// has ended; then the stream may be destroyed.
TEST_F(CudaDeferredFree, NonBlockingStreamIsRetiredByTheExplicitCall) {
  void *const nb = stream(1, kNonBlocking);
  void *const blocking = stream(1);
  hurray_buffer a = alloc_ok(dev(HURRAY_DEVICE_CUDA, 1), nb);
  hurray_buffer c = alloc_ok(dev(HURRAY_DEVICE_CUDA, 1), blocking);
  begin_capture(nb);
  begin_capture(blocking);
  f().reset();
  const int frees = count("frees");
  release_on_another_thread(&a);
  release_on_another_thread(&c);
  const int naming_nb = calls_naming(nb);  // the release's own questions
  EXPECT_EQ(end_capture(blocking), 1);
  // The retirer frees c (blocking class) and leaves a alone.
  EXPECT_EQ(wait_for_frees(frees + 1), frees + 1);
  EXPECT_EQ(calls_naming(nb), naming_nb) << "the retirer named the caller's non-blocking stream";
  size_t remaining = 99;
  EXPECT_EQ(hurray_retire_deferred_frees(dev(HURRAY_DEVICE_CUDA, 1), &remaining), HURRAY_OK)
      << hurray_last_error();
  EXPECT_EQ(remaining, 1u) << "a's stream is still being captured";
  EXPECT_EQ(count("frees"), frees + 1);
  EXPECT_EQ(end_capture(nb), 1) << "the non-blocking capture was invalidated";
  f().reset();
  remaining = 99;
  EXPECT_EQ(hurray_retire_deferred_frees(dev(HURRAY_DEVICE_CUDA, 1), &remaining), HURRAY_OK)
      << hurray_last_error();
  EXPECT_EQ(remaining, 0u);
  EXPECT_EQ(count("frees"), frees + 2) << "not retired by the explicit call";
  auto async_frees = f().log("cuMemFreeAsync");
  ASSERT_EQ(async_frees.size(), 1u);
  EXPECT_EQ(async_frees[0].stream, nb) << "not ordered on its own (non-blocking) stream";
  destroy(nb);
  destroy(blocking);
  // Nothing is left to name the destroyed stream.
  f().reset();
  EXPECT_EQ(hurray_retire_deferred_frees(dev(HURRAY_DEVICE_CUDA, 1), &remaining), HURRAY_OK);
  EXPECT_EQ(remaining, 0u);
  EXPECT_EQ(calls_naming(nb), 0);
}

// The statuses of hurray_retire_deferred_frees.
TEST_F(CudaDeferredFree, RetireDeferredFreesStatuses) {
  size_t remaining = 7;
  // Nothing deferred: OK, 0; *remaining optional; every CUDA type.
  EXPECT_EQ(hurray_retire_deferred_frees(dev(HURRAY_DEVICE_CUDA, 0), &remaining), HURRAY_OK);
  EXPECT_EQ(remaining, 0u);
  EXPECT_EQ(hurray_retire_deferred_frees(dev(HURRAY_DEVICE_CUDA, 1), nullptr), HURRAY_OK);
  EXPECT_EQ(hurray_retire_deferred_frees(dev(HURRAY_DEVICE_CUDA_HOST, 0), nullptr), HURRAY_OK);
  EXPECT_EQ(hurray_retire_deferred_frees(dev(HURRAY_DEVICE_CUDA_MANAGED, 1), nullptr), HURRAY_OK);
  // No such ordinal, not a GPU type: UNSUPPORTED_DEVICE, *remaining untouched.
  remaining = 7;
  EXPECT_EQ(hurray_retire_deferred_frees(dev(HURRAY_DEVICE_CUDA, 2), &remaining),
            HURRAY_ERR_UNSUPPORTED_DEVICE);
  EXPECT_NE(std::string(hurray_last_error()).find("does not exist"), std::string::npos)
      << hurray_last_error();
  EXPECT_EQ(hurray_retire_deferred_frees(dev(HURRAY_DEVICE_CUDA, -1), &remaining),
            HURRAY_ERR_UNSUPPORTED_DEVICE);
  EXPECT_EQ(hurray_retire_deferred_frees(dev(HURRAY_DEVICE_CPU, 0), &remaining),
            HURRAY_ERR_UNSUPPORTED_DEVICE);
  EXPECT_NE(std::string(hurray_last_error()).find("kDLCPU"), std::string::npos)
      << hurray_last_error();
  EXPECT_EQ(remaining, 7u);
  // Reached through the function table too.
  const hurray_api *api = nullptr;
  ASSERT_EQ(hurray_get_api(HURRAY_API_VERSION, &api), HURRAY_OK);
  ASSERT_TRUE(HURRAY_API_HAS(api, retire_deferred_frees));
  EXPECT_EQ(api->retire_deferred_frees(dev(HURRAY_DEVICE_CUDA, 0), &remaining), HURRAY_OK);
  EXPECT_EQ(remaining, 0u);
}

// HIP: a release during a capture of its stream keeps the stream (HIP
// documents no legacy-stream query the retirer could use) and is retired by
// the explicit call once the capture has ended.
TEST(HipDeferredFree, CapturedStreamIsRetiredByTheExplicitCall) {
  Fake &f = fake_hip();
  if (!f.loaded()) GTEST_SKIP() << "the fake HIP runtime is not in use";
  auto stream_create = f.fn<void *(*)(int)>("stream_create");
  auto stream_destroy = f.fn<void (*)(void *, int)>("stream_destroy");
  auto begin_capture = f.fn<void (*)(void *)>("stream_begin_capture");
  auto end_capture = f.fn<int (*)(void *)>("stream_end_capture");
  auto frees = f.fn<int (*)(void)>("frees");
  ASSERT_NE(frees, nullptr);
  f.reset();
  const int64_t live_before = f.live_allocations();
  void *const s = stream_create(1);
  hurray_buffer a = alloc_ok(dev(HURRAY_DEVICE_ROCM, 1), s);
  begin_capture(s);
  release_on_another_thread(&a);
  const int before = frees();
  size_t remaining = 99;
  EXPECT_EQ(hurray_retire_deferred_frees(dev(HURRAY_DEVICE_ROCM, 1), &remaining), HURRAY_OK)
      << hurray_last_error();
  EXPECT_EQ(remaining, 1u);
  EXPECT_EQ(end_capture(s), 1);
  f.reset();
  EXPECT_EQ(hurray_retire_deferred_frees(dev(HURRAY_DEVICE_ROCM, 1), &remaining), HURRAY_OK);
  EXPECT_EQ(remaining, 0u);
  EXPECT_EQ(frees(), before + 1);
  auto async_frees = f.log("hipFreeAsync");
  ASSERT_EQ(async_frees.size(), 1u);
  EXPECT_EQ(async_frees[0].stream, s);
  stream_destroy(s, 0);
  EXPECT_EQ(hurray_retire_deferred_frees(dev(HURRAY_DEVICE_ROCM_HOST, 0), nullptr), HURRAY_OK);
  EXPECT_EQ(hurray_retire_deferred_frees(dev(HURRAY_DEVICE_ROCM, 5), &remaining),
            HURRAY_ERR_UNSUPPORTED_DEVICE);
  EXPECT_EQ(f.live_allocations(), live_before);
  f.reset();
}

// A fork while a blocking-class deferral is pending and the retirer runs
// (deferred_probe.cc): the child (a forked child never frees its parent's
// memory) is refused, frees nothing and makes no driver call (even with
// the capture ended in its copy of the fake); the parent's deferral is
// retired when its capture ends.
TEST(CudaDeferredFreeProcess, ForkWhileADeferralIsPending) {
  const std::string fake = HURRAY_FAKE_CUDA_PATH_OR_EMPTY;
  if (fake.empty()) GTEST_SKIP() << "the fake CUDA driver is not built";
  ProbeResult r = run_probe({"deferred-fork"}, {{"HURRAY_CUDA_DRIVER_PATH", fake}});
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(r.out.find("FAILED"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("check retired_in_parent ok"), std::string::npos) << r.out;
  EXPECT_EQ(r.err, "");
}

// Process exit while a deferral is pending (its capture never ends) and the
// retirer polls: no crash, nothing printed, no driver call after the
// driver's teardown (libhurray's exit handler stops the retirer first).
TEST(CudaDeferredFreeProcess, ExitWhileADeferralIsPending) {
  const std::string fake = HURRAY_FAKE_CUDA_PATH_OR_EMPTY;
  if (fake.empty()) GTEST_SKIP() << "the fake CUDA driver is not built";
  ProbeResult r = run_probe({"deferred-exit"}, {{"HURRAY_CUDA_DRIVER_PATH", fake}});
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_EQ(r.out.find("FAILED"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("check retired ok"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("check no_call_after_teardown ok"), std::string::npos) << r.out;
  EXPECT_EQ(r.err, "");
}

// hurray_retire_deferred_frees inside the diagnostic hook, while the
// retirer (whose free failed) waits to call that hook: the call does not
// wait for the retirer, so neither deadlocks (the probe's alarm would end a
// deadlock with SIGALRM, 128 + 14).
TEST(CudaDeferredFreeProcess, RetireInsideTheHookWhileTheRetirerWaitsForIt) {
  const std::string fake = HURRAY_FAKE_CUDA_PATH_OR_EMPTY;
  if (fake.empty()) GTEST_SKIP() << "the fake CUDA driver is not built";
  ProbeResult r = run_probe({"deferred-hook"}, {{"HURRAY_CUDA_DRIVER_PATH", fake}});
  EXPECT_EQ(r.exit_code, 0) << "128 + 14 (SIGALRM) is a deadlock\n" << r.out << r.err;
  EXPECT_EQ(r.out.find("FAILED"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("check retire_in_hook ok"), std::string::npos) << r.out;
  EXPECT_EQ(r.err, "");
}
