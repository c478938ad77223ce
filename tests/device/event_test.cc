// SPDX-License-Identifier: Apache-2.0
// hurray_event_record / hurray_event_wait / hurray_event_release against the
// fake drivers (docs/impl/gpu.md §4, "Events"): an event recorded on one
// stream and waited for on another queues exactly one cuStreamWaitEvent /
// hipStreamWaitEvent, naming both streams, and no host-blocking
// synchronisation (the fakes count them, fake_capture.h); a bad argument gets
// its exact status and calls nothing; the release works from another thread
// and after a context reset; and the capture rules: no record on a capturing
// stream, a CUDA wait on one captured as an external event-wait node
// (CU_EVENT_WAIT_EXTERNAL), refused where it cannot be captured.
#include <gtest/gtest.h>

#include <pthread.h>

#include <cstdint>
#include <string>
#include <thread>

#include "hurray/hurray.hpp"
#include "support.h"

using namespace gpu_test;

namespace {

constexpr unsigned kWaitExternal = 1;  // CU_EVENT_WAIT_EXTERNAL
void *const kLegacy = reinterpret_cast<void *>(1);

struct Vendor {
  const char *name;
  int32_t type;
  Fake &(*fake)();
  const char *create, *record, *wait, *destroy;
};
const Vendor kCuda{"CUDA",          HURRAY_DEVICE_CUDA,  &fake_cuda,      "cuEventCreate",
                   "cuEventRecord", "cuStreamWaitEvent", "cuEventDestroy"};
const Vendor kHip{"HIP",
                  HURRAY_DEVICE_ROCM,
                  &fake_hip,
                  "hipEventCreateWithFlags",
                  "hipEventRecord",
                  "hipStreamWaitEvent",
                  "hipEventDestroy"};

class Events : public ::testing::TestWithParam<const Vendor *> {
 protected:
  void SetUp() override {
    if (!f().loaded()) GTEST_SKIP() << "the fake " << v().name << " library is not in use";
    f().reset();
    if (v().type == HURRAY_DEVICE_CUDA) f().set_current_device(-1);
    ctx_syncs_ = count("context_synchronizations");
    stream_syncs_ = count("stream_synchronizations");
    invalidated_ = count("invalidated_captures");
  }
  void TearDown() override {
    if (!f().loaded()) return;
    EXPECT_EQ(count("context_synchronizations"), ctx_syncs_) << "the host blocked";
    EXPECT_EQ(count("stream_synchronizations"), stream_syncs_) << "the host blocked";
    EXPECT_EQ(count("invalidated_captures"), invalidated_) << "a capture was invalidated";
    int made = 0;
    for (const fake_call &c : f().log(v().create)) made += c.result == 0 ? 1 : 0;
    EXPECT_EQ(made, f().call_count(v().destroy)) << "an event leaked";
    f().reset();
  }
  const Vendor &v() const { return *GetParam(); }
  Fake &f() const { return v().fake(); }
  int count(const char *name) const { return f().fn<int (*)(void)>(name)(); }
  void *stream(int d) const { return f().fn<void *(*)(int)>("stream_create")(d); }
  void destroy_stream(void *s) const {
    if (v().type == HURRAY_DEVICE_CUDA) {
      f().fn<void (*)(void *)>("stream_destroy")(s);
    } else {
      f().fn<void (*)(void *, int)>("stream_destroy")(s, 0);
    }
  }
  int calls() const { return f().call_count(nullptr); }
  int ctx_syncs_ = 0, stream_syncs_ = 0, invalidated_ = 0;
};

std::string vendor_name(const ::testing::TestParamInfo<const Vendor *> &info) {
  return info.param->name;
}

// Recorded on A, waited for on B: one create, one record on A, one wait on
// B naming A, and nothing that blocks the host; the release destroys it.
TEST_P(Events, RecordOnOneStreamWaitOnAnotherQueuesOneWaitAndNoHostSync) {
  void *const a = stream(0);
  void *const b = stream(0);
  const int device_before = f().current_device();
  hurray_event *e = nullptr;
  ASSERT_EQ(hurray_event_record(dev(v().type, 0), a, &e), HURRAY_OK) << hurray_last_error();
  ASSERT_NE(e, nullptr);
  ASSERT_EQ(hurray_event_wait(e, b), HURRAY_OK) << hurray_last_error();
  EXPECT_EQ(f().call_count(v().create), 1);
  const std::vector<fake_call> rec = f().log(v().record);
  ASSERT_EQ(rec.size(), 1u);
  EXPECT_EQ(rec[0].stream, a);
  EXPECT_EQ(rec[0].device, 0) << "recorded without device 0's context current";
  const std::vector<fake_call> waits = f().log(v().wait);
  ASSERT_EQ(waits.size(), 1u);
  EXPECT_EQ(waits[0].stream, b);
  EXPECT_EQ(waits[0].other, a) << "the wait is not for the event recorded on A";
  EXPECT_EQ(waits[0].bytes, 0u) << "a wait outside a capture passes no flags";
  EXPECT_EQ(waits[0].result, 0);
  EXPECT_EQ(f().call_count(v().destroy), 0);
  EXPECT_EQ(hurray_event_release(e), HURRAY_OK);
  EXPECT_EQ(f().call_count(v().destroy), 1);
  EXPECT_EQ(f().current_device(), device_before)
      << "the thread's own context/device was not given back";
  destroy_stream(a);
  destroy_stream(b);
}

// One event, waited for by several streams and several times: one wait
// each, no new record.
TEST_P(Events, EachWaitQueuesOneWaitAndNothingElse) {
  void *const a = stream(1);
  void *const b = stream(1);
  hurray_event *e = nullptr;
  ASSERT_EQ(hurray_event_record(dev(v().type, 1), a, &e), HURRAY_OK) << hurray_last_error();
  const int before = f().call_count(v().wait);
  ASSERT_EQ(hurray_event_wait(e, b), HURRAY_OK);
  ASSERT_EQ(hurray_event_wait(e, nullptr), HURRAY_OK);  // the default stream
  EXPECT_EQ(f().call_count(v().wait), before + 2);
  EXPECT_EQ(f().call_count(v().record), 1);
  for (const fake_call &c : f().log(v().wait)) EXPECT_EQ(c.device, 1);
  EXPECT_EQ(hurray_event_release(e), HURRAY_OK);
  destroy_stream(a);
  destroy_stream(b);
}

// Each bad argument: its exact status, *out untouched, no runtime call.
TEST_P(Events, BadArgumentsGetTheirStatusAndCallNothing) {
  void *const a = stream(0);
  hurray_event *const sentinel = reinterpret_cast<hurray_event *>(0x1234);
  hurray_event *e = sentinel;
  f().reset();
  EXPECT_EQ(hurray_event_record(dev(v().type, 0), a, nullptr), HURRAY_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(hurray_event_record(dev(HURRAY_DEVICE_CPU, 0), a, &e), HURRAY_ERR_UNSUPPORTED_DEVICE);
  EXPECT_NE(std::string(hurray_last_error()).find("no streams"), std::string::npos)
      << hurray_last_error();
  EXPECT_EQ(hurray_event_record(dev(v().type, -1), a, &e), HURRAY_ERR_UNSUPPORTED_DEVICE);
  EXPECT_EQ(hurray_event_record(dev(v().type, 7), a, &e), HURRAY_ERR_UNSUPPORTED_DEVICE);
  EXPECT_EQ(hurray_event_record(dev(12345, 0), a, &e), HURRAY_ERR_UNSUPPORTED_DEVICE);
  EXPECT_EQ(e, sentinel);
  EXPECT_EQ(hurray_event_wait(nullptr, a), HURRAY_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(hurray_event_release(nullptr), HURRAY_OK);
  EXPECT_EQ(f().call_count(v().create), 0);
  EXPECT_EQ(f().call_count(v().record), 0);
  EXPECT_EQ(f().call_count(v().wait), 0);
  EXPECT_EQ(f().call_count(v().destroy), 0);
  destroy_stream(a);
}

// A failed record destroys what it created and writes nothing; a failed
// wait leaves the event usable.
TEST_P(Events, RuntimeFailuresLeaveNothingBehind) {
  void *const a = stream(0);
  hurray_event *e = nullptr;
  f().inject(v().record, 1, 1);  // CUDA_ERROR_INVALID_VALUE / hipErrorInvalidValue
  EXPECT_EQ(hurray_event_record(dev(v().type, 0), a, &e), HURRAY_ERR_DEVICE);
  EXPECT_EQ(e, nullptr);
  EXPECT_NE(std::string(hurray_last_error()).find(v().record), std::string::npos)
      << hurray_last_error();
  EXPECT_EQ(f().call_count(v().destroy), 1);
  f().inject(v().create, 2, 1);  // out of memory in both APIs
  EXPECT_EQ(hurray_event_record(dev(v().type, 0), a, &e), HURRAY_ERR_OUT_OF_MEMORY);
  EXPECT_EQ(e, nullptr);
  ASSERT_EQ(hurray_event_record(dev(v().type, 0), a, &e), HURRAY_OK) << hurray_last_error();
  f().inject(v().wait, 1, 1);
  EXPECT_EQ(hurray_event_wait(e, nullptr), HURRAY_ERR_DEVICE);
  EXPECT_EQ(hurray_event_wait(e, nullptr), HURRAY_OK) << hurray_last_error();
  EXPECT_EQ(hurray_event_release(e), HURRAY_OK);
  destroy_stream(a);
}

// Released on another thread than the one that recorded it: destroyed
// there, with the event's device current, the thread's state given back.
TEST_P(Events, ReleaseFromAnotherThread) {
  void *const a = stream(1);
  hurray_event *e = nullptr;
  ASSERT_EQ(hurray_event_record(dev(v().type, 1), a, &e), HURRAY_OK) << hurray_last_error();
  uint64_t releaser = 0;
  int32_t status = -1;
  int device_before = -2, device_after = -3;
  std::thread t([&] {
    releaser = static_cast<uint64_t>(pthread_self());
    device_before = f().current_device();
    status = hurray_event_release(e);
    device_after = f().current_device();
  });
  t.join();
  EXPECT_EQ(status, HURRAY_OK);
  const std::vector<fake_call> d = f().log(v().destroy);
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0].thread, releaser);
  EXPECT_EQ(d[0].device, 1);
  EXPECT_EQ(device_after, device_before) << "the releasing thread's state was not given back";
  destroy_stream(a);
}

// A release after the runtime's teardown (process exit) destroys nothing
// and is counted as a teardown leak, not a failed release; the thread's
// message is left as it was.
TEST_P(Events, ReleaseAfterTeardownIsATeardownLeak) {
  hurray_event *e = nullptr;
  ASSERT_EQ(hurray_event_record(dev(v().type, 0), nullptr, &e), HURRAY_OK) << hurray_last_error();
  const Diag before = diagnostics();
  EXPECT_EQ(hurray_event_wait(nullptr, nullptr), HURRAY_ERR_INVALID_ARGUMENT);
  const std::string message = hurray_last_error();
  f().set_deinitialized(1);
  EXPECT_EQ(hurray_event_release(e), HURRAY_OK);
  f().set_deinitialized(0);
  const Diag after = diagnostics();
  EXPECT_EQ(after.teardown, before.teardown + 1);
  EXPECT_EQ(after.failed, before.failed);
  EXPECT_EQ(hurray_last_error(), message);
  // The event is gone with the runtime: the fake's count says one create
  // and no successful destroy, which TearDown must not call a leak.
  int destroyed = 0;
  for (const fake_call &c : f().log(v().destroy)) destroyed += c.result == 0 ? 1 : 0;
  EXPECT_EQ(destroyed, 0);
  f().reset();
}

// A failed destroy is a failed release: counted and sent to the hook, the
// status still HURRAY_OK and the thread's message unchanged.
TEST_P(Events, FailedDestroyIsCountedNotReturned) {
  hurray_event *e = nullptr;
  ASSERT_EQ(hurray_event_record(dev(v().type, 0), nullptr, &e), HURRAY_OK) << hurray_last_error();
  const Diag before = diagnostics();
  EXPECT_EQ(hurray_event_wait(nullptr, nullptr), HURRAY_ERR_INVALID_ARGUMENT);
  const std::string message = hurray_last_error();
  f().inject(v().destroy, 1, 1);
  EXPECT_EQ(hurray_event_release(e), HURRAY_OK);
  EXPECT_EQ(diagnostics().failed, before.failed + 1);
  EXPECT_EQ(hurray_last_error(), message);
  f().reset();  // the fake's event leaked as the runtime said; not this test's finding
}

// The C++ layer: Event::record / wait, released by the destructor.
TEST_P(Events, CppEventReleasesInItsDestructor) {
  void *const a = stream(0);
  {
    hurray::Event e = hurray::Event::record(dev(v().type, 0), a);
    ASSERT_TRUE(e);
    e.wait(nullptr);
    hurray::Event moved = std::move(e);
    EXPECT_FALSE(e);
    EXPECT_EQ(f().call_count(v().destroy), 0);
  }
  EXPECT_EQ(f().call_count(v().destroy), 1);
  try {
    (void)hurray::Event::record(dev(HURRAY_DEVICE_CPU, 0), nullptr);
    ADD_FAILURE() << "no exception";
  } catch (const hurray::Error &err) {
    EXPECT_EQ(err.status(), HURRAY_ERR_UNSUPPORTED_DEVICE);
  }
  destroy_stream(a);
}

// No record on a capturing stream: nothing created, the capture intact.
TEST_P(Events, RecordOnACapturingStreamIsRefusedAndTheCaptureStaysValid) {
  void *const a = stream(0);
  f().fn<void (*)(void *)>("stream_begin_capture")(a);
  hurray_event *e = nullptr;
  EXPECT_EQ(hurray_event_record(dev(v().type, 0), a, &e), HURRAY_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(hurray_last_error()).find("captured"), std::string::npos)
      << hurray_last_error();
  EXPECT_EQ(e, nullptr);
  EXPECT_EQ(f().call_count(v().create), 0);
  EXPECT_EQ(f().fn<int (*)(void *)>("stream_end_capture")(a), 1);
  destroy_stream(a);
}

// A wait on a capturing stream for an event recorded outside the capture:
// CUDA captures it as an external event-wait node (one cuStreamWaitEvent
// with CU_EVENT_WAIT_EXTERNAL); HIP cannot and refuses, calling nothing.
// Either way the capture stays valid.
TEST_P(Events, WaitOnACapturingStreamIsAnExternalWaitOrRefused) {
  void *const a = stream(0);
  void *const b = stream(0);
  hurray_event *e = nullptr;
  ASSERT_EQ(hurray_event_record(dev(v().type, 0), a, &e), HURRAY_OK) << hurray_last_error();
  f().fn<void (*)(void *)>("stream_begin_capture")(b);
  const int32_t st = hurray_event_wait(e, b);
  const std::vector<fake_call> waits = f().log(v().wait);
  if (v().type == HURRAY_DEVICE_CUDA) {
    EXPECT_EQ(st, HURRAY_OK) << hurray_last_error();
    ASSERT_EQ(waits.size(), 1u);
    EXPECT_EQ(waits[0].stream, b);
    EXPECT_EQ(waits[0].bytes, kWaitExternal);
  } else {
    EXPECT_EQ(st, HURRAY_ERR_INVALID_ARGUMENT);
    EXPECT_TRUE(waits.empty());
  }
  EXPECT_EQ(f().fn<int (*)(void *)>("stream_end_capture")(b), 1)
      << "the wait invalidated the capture";
  EXPECT_EQ(hurray_event_release(e), HURRAY_OK);
  destroy_stream(a);
  destroy_stream(b);
}

INSTANTIATE_TEST_SUITE_P(Fakes, Events, ::testing::Values(&kCuda, &kHip), vendor_name);

// CUDA's legacy stream may not be used while a blocking stream of the
// device captures: neither a record on it nor a wait there is queued.
TEST(CudaEvents, LegacyStreamDuringABlockingCaptureIsRefused) {
  Fake &f = fake_cuda();
  if (!f.loaded()) GTEST_SKIP() << "the fake CUDA driver is not in use";
  f.reset();
  void *const a = f.fn<void *(*)(int)>("stream_create")(0);
  void *const cap = f.fn<void *(*)(int)>("stream_create")(0);
  hurray_event *e = nullptr;
  ASSERT_EQ(hurray_event_record(dev(HURRAY_DEVICE_CUDA, 0), a, &e), HURRAY_OK)
      << hurray_last_error();
  f.fn<void (*)(void *)>("stream_begin_capture")(cap);
  hurray_event *on_legacy = nullptr;
  EXPECT_EQ(hurray_event_record(dev(HURRAY_DEVICE_CUDA, 0), kLegacy, &on_legacy),
            HURRAY_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(on_legacy, nullptr);
  EXPECT_EQ(hurray_event_wait(e, nullptr), HURRAY_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(hurray_event_wait(e, kLegacy), HURRAY_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(f.call_count("cuStreamWaitEvent"), 0);
  EXPECT_EQ(f.fn<int (*)(void *)>("stream_end_capture")(cap), 1);
  EXPECT_EQ(hurray_event_release(e), HURRAY_OK);
  f.fn<void (*)(void *)>("stream_destroy")(a);
  f.fn<void (*)(void *)>("stream_destroy")(cap);
  f.reset();
}

int dead_event_uses(Fake &f) { return f.fn<int (*)(void)>("dead_event_uses")(); }

// After the primary context was reset (which destroyed the event with it),
// the release calls nothing: no cuEventDestroy of the dead handle (the fake
// counts any call naming it), exactly once, whether another library revived
// the context since (renew) or not; and a reset context is not retained
// again just to learn that.
TEST(CudaEvents, ReleaseAfterAContextResetCallsNothing) {
  Fake &f = fake_cuda();
  if (!f.loaded()) GTEST_SKIP() << "the fake CUDA driver is not in use";
  f.reset();
  const int dead = dead_event_uses(f);
  hurray_event *e = nullptr;
  ASSERT_EQ(hurray_event_record(dev(HURRAY_DEVICE_CUDA, 1), nullptr, &e), HURRAY_OK)
      << hurray_last_error();
  f.fn<void (*)(int)>("renew_context")(1);
  EXPECT_EQ(hurray_event_release(e), HURRAY_OK);
  EXPECT_EQ(f.call_count("cuEventDestroy"), 0);
  EXPECT_EQ(dead_event_uses(f), dead) << "the release named an event the reset destroyed";

  ASSERT_EQ(hurray_event_record(dev(HURRAY_DEVICE_CUDA, 1), nullptr, &e), HURRAY_OK)
      << hurray_last_error();
  f.fn<void (*)(int)>("primary_ctx_reset")(1);
  const int retains = f.primary_retains(1);
  const Diag before = diagnostics();
  EXPECT_EQ(hurray_event_release(e), HURRAY_OK);
  EXPECT_EQ(f.call_count("cuEventDestroy"), 0);
  EXPECT_EQ(dead_event_uses(f), dead);
  EXPECT_EQ(f.primary_retains(1), retains) << "the release revived a reset context";
  EXPECT_EQ(f.fn<int (*)(int)>("primary_ctx_active")(1), 0);
  EXPECT_EQ(diagnostics().failed, before.failed);
  f.fn<void (*)(int)>("primary_ctx_revive")(1);
  f.reset();
}

// A wait for an event whose context was reset since the record: refused
// with HURRAY_ERR_DEVICE and a message saying so, before any driver call
// that names the event or the stream (the event is a dead handle; the fake
// counts any use); the event can still be released, exactly once, calling
// nothing. Whether or not another library revived the context.
TEST(CudaEvents, WaitAfterAContextResetIsRefusedAndNamesNoDeadHandle) {
  Fake &f = fake_cuda();
  if (!f.loaded()) GTEST_SKIP() << "the fake CUDA driver is not in use";
  f.reset();
  const int dead = dead_event_uses(f);
  void *const a = f.fn<void *(*)(int)>("stream_create")(1);
  void *const b = f.fn<void *(*)(int)>("stream_create")(1);
  for (const char *reset : {"renew_context", "primary_ctx_reset"}) {
    SCOPED_TRACE(reset);
    hurray_event *e = nullptr;
    ASSERT_EQ(hurray_event_record(dev(HURRAY_DEVICE_CUDA, 1), a, &e), HURRAY_OK)
        << hurray_last_error();
    f.fn<void (*)(int)>(reset)(1);
    const int retains = f.primary_retains(1);
    const int waits = f.call_count("cuStreamWaitEvent");
    const int capture_checks = f.call_count("cuStreamIsCapturing");
    EXPECT_EQ(hurray_event_wait(e, b), HURRAY_ERR_DEVICE);
    const std::string msg = hurray_last_error();
    EXPECT_NE(msg.find("reset"), std::string::npos) << msg;
    EXPECT_NE(msg.find("CUDA device 1"), std::string::npos) << msg;
    EXPECT_EQ(hurray_event_wait(e, nullptr), HURRAY_ERR_DEVICE) << "a second wait, too";
    EXPECT_EQ(f.call_count("cuStreamWaitEvent"), waits);
    EXPECT_EQ(f.call_count("cuStreamIsCapturing"), capture_checks);
    EXPECT_EQ(dead_event_uses(f), dead) << "the wait named the event the reset destroyed";
    EXPECT_EQ(f.primary_retains(1), retains) << "the refused wait revived a reset context";
    EXPECT_EQ(hurray_event_release(e), HURRAY_OK);
    EXPECT_EQ(f.call_count("cuEventDestroy"), 0);
    EXPECT_EQ(dead_event_uses(f), dead);
    f.fn<void (*)(int)>("primary_ctx_revive")(1);
  }
  // A new event in the new incarnation works as before.
  hurray_event *e = nullptr;
  ASSERT_EQ(hurray_event_record(dev(HURRAY_DEVICE_CUDA, 1), a, &e), HURRAY_OK)
      << hurray_last_error();
  EXPECT_EQ(hurray_event_wait(e, b), HURRAY_OK) << hurray_last_error();
  EXPECT_EQ(hurray_event_release(e), HURRAY_OK);
  EXPECT_EQ(f.call_count("cuEventDestroy"), 1);
  EXPECT_EQ(dead_event_uses(f), dead);
  f.fn<void (*)(void *)>("stream_destroy")(a);
  f.fn<void (*)(void *)>("stream_destroy")(b);
  f.reset();
}

// A reset of *another* device's context leaves the event alone.
TEST(CudaEvents, ResetOfAnotherDeviceLeavesTheEventUsable) {
  Fake &f = fake_cuda();
  if (!f.loaded()) GTEST_SKIP() << "the fake CUDA driver is not in use";
  f.reset();
  hurray_event *e = nullptr;
  ASSERT_EQ(hurray_event_record(dev(HURRAY_DEVICE_CUDA, 0), nullptr, &e), HURRAY_OK)
      << hurray_last_error();
  f.fn<void (*)(int)>("renew_context")(1);
  EXPECT_EQ(hurray_event_wait(e, nullptr), HURRAY_OK) << hurray_last_error();
  EXPECT_EQ(hurray_event_release(e), HURRAY_OK);
  EXPECT_EQ(f.call_count("cuEventDestroy"), 1);
  f.reset();
}

// The driver's context rules (Driver API reference): cuStreamWaitEvent
// takes an event of another context or device than the stream, so an event
// of device 0 is waited for on a stream of device 1, with device 0's
// context current; cuEventRecord needs the event and the stream in one
// context, so a record naming device 0 on a stream of device 1 fails
// (HURRAY_ERR_DEVICE, naming cuEventRecord) and leaves no event behind.
TEST(CudaEvents, WaitAcrossDevicesIsAllowedRecordOnAnotherDevicesStreamIsNot) {
  Fake &f = fake_cuda();
  if (!f.loaded()) GTEST_SKIP() << "the fake CUDA driver is not in use";
  f.reset();
  void *const s0 = f.fn<void *(*)(int)>("stream_create")(0);
  void *const s1 = f.fn<void *(*)(int)>("stream_create")(1);
  hurray_event *e = nullptr;
  ASSERT_EQ(hurray_event_record(dev(HURRAY_DEVICE_CUDA, 0), s0, &e), HURRAY_OK)
      << hurray_last_error();
  ASSERT_EQ(hurray_event_wait(e, s1), HURRAY_OK) << hurray_last_error();
  const std::vector<fake_call> waits = f.log("cuStreamWaitEvent");
  ASSERT_EQ(waits.size(), 1u);
  EXPECT_EQ(waits[0].stream, s1);
  EXPECT_EQ(waits[0].other, s0);
  EXPECT_EQ(waits[0].device, 0);
  EXPECT_EQ(waits[0].result, 0);
  EXPECT_EQ(hurray_event_release(e), HURRAY_OK);

  hurray_event *wrong = nullptr;
  EXPECT_EQ(hurray_event_record(dev(HURRAY_DEVICE_CUDA, 0), s1, &wrong), HURRAY_ERR_DEVICE);
  EXPECT_EQ(wrong, nullptr);
  EXPECT_NE(std::string(hurray_last_error()).find("cuEventRecord"), std::string::npos)
      << hurray_last_error();
  EXPECT_EQ(f.call_count("cuEventCreate"), 2);
  EXPECT_EQ(f.call_count("cuEventDestroy"), 2) << "the refused record left its event behind";
  f.fn<void (*)(void *)>("stream_destroy")(s0);
  f.fn<void (*)(void *)>("stream_destroy")(s1);
  f.reset();
}

// HIP has no context incarnation to compare (docs/impl/gpu.md §4, "Events
// after a device reset"): hipDeviceReset deletes the device's events (HIP
// API reference), and nothing documented lets libhurray see that it
// happened. What the fake shows is the documented limit: a wait after the
// reset reaches the runtime with the deleted handle (the fake answers
// hipErrorInvalidHandle and counts it; ROCm does not check), and comes back
// as HURRAY_ERR_DEVICE naming the call. A caller who resets a device
// releases its events first; an event released before the reset is fine.
TEST(HipEvents, DeviceResetIsNotSeenReleaseEventsBeforeIt) {
  Fake &f = fake_hip();
  if (!f.loaded()) GTEST_SKIP() << "the fake HIP library is not in use";
  f.reset();
  const int dead = dead_event_uses(f);
  hurray_event *before_reset = nullptr;
  ASSERT_EQ(hurray_event_record(dev(HURRAY_DEVICE_ROCM, 0), nullptr, &before_reset), HURRAY_OK)
      << hurray_last_error();
  EXPECT_EQ(hurray_event_release(before_reset), HURRAY_OK);
  hurray_event *e = nullptr;
  ASSERT_EQ(hurray_event_record(dev(HURRAY_DEVICE_ROCM, 0), nullptr, &e), HURRAY_OK)
      << hurray_last_error();
  f.fn<void (*)(int)>("device_reset")(0);
  EXPECT_EQ(dead_event_uses(f), dead) << "the reset of the released event was seen";
  EXPECT_EQ(hurray_event_wait(e, nullptr), HURRAY_ERR_DEVICE);
  EXPECT_NE(std::string(hurray_last_error()).find("hipStreamWaitEvent"), std::string::npos)
      << hurray_last_error();
  EXPECT_EQ(dead_event_uses(f), dead + 1) << "the limit: the deleted handle reached the runtime";
  const Diag diag = diagnostics();
  EXPECT_EQ(hurray_event_release(e), HURRAY_OK);
  EXPECT_EQ(diagnostics().failed, diag.failed + 1) << "the failed destroy is a failed release";
  f.reset();
}

}  // namespace
