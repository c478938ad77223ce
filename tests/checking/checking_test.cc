// SPDX-License-Identifier: Apache-2.0
// Checking mode (c-ffi §9): double releases caught before the producer,
// live handles listed with where they were made, consumption by share and
// export, threads, fork, and that nothing changes while the mode is off.
//
// The mode is process-wide: ctest runs every test in a process of its own,
// and the tests that turn it on do so in their fixture.
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "hurray_test_support.h"

using namespace hurray_test;

extern "C" {
// Exported (the test links with ENABLE_EXPORTS) so that its name shows in
// the backtraces the checker records.
__attribute__((noinline)) int32_t check_test_make_leak(hurray_buffer *out) {
  const int64_t shape[] = {4};
  int32_t st = hurray_alloc(hurray_device{HURRAY_DEVICE_CPU, 0}, f32(), 1, shape, 0, out);
  asm volatile("" ::: "memory");  // not a tail call: this frame stays on the stack
  return st;
}
}

namespace {

hurray_check_state state() {
  hurray_check_state s;
  std::memset(&s, 0, sizeof s);
  s.struct_size = sizeof s;
  EXPECT_EQ(hurray_check_get_state(&s), HURRAY_OK);
  return s;
}

uint64_t double_releases() { return state().double_releases; }

// Collects what the diagnostic hook receives.
struct HookLog {
  std::mutex mu;
  std::vector<std::pair<int32_t, std::string>> calls;
  static void hook(int32_t status, const char *message, void *user) {
    auto *log = static_cast<HookLog *>(user);
    std::lock_guard<std::mutex> lock(log->mu);
    log->calls.emplace_back(status, message);
  }
  std::string last() {
    std::lock_guard<std::mutex> lock(mu);
    return calls.empty() ? std::string() : calls.back().second;
  }
  size_t count(int32_t status) {
    std::lock_guard<std::mutex> lock(mu);
    size_t n = 0;
    for (const auto &c : calls) n += c.first == status;
    return n;
  }
};

struct Entries {
  std::vector<uint64_t> ids;
  std::vector<std::string> made_by, labels, origins;
  static void visit(const hurray_check_entry *e, void *user) {
    auto *self = static_cast<Entries *>(user);
    EXPECT_EQ(e->struct_size, sizeof(hurray_check_entry));
    self->ids.push_back(e->id);
    self->made_by.emplace_back(e->made_by);
    self->labels.emplace_back(e->label);
    self->origins.emplace_back(e->origin);
  }
};

Entries live_since(uint64_t since) {
  Entries e;
  size_t n = 0;
  EXPECT_EQ(hurray_check_live(since, &Entries::visit, &e, &n), HURRAY_OK);
  EXPECT_EQ(n, e.ids.size());
  return e;
}

// On another thread, shares a spoiled copy of `good` (ndim -1: the share
// fails and consumes nothing) while this thread runs `here`, both released
// at the same moment; returns the spoiled share's status.
template <typename Here>
int32_t share_spoiled_copy_while(const hurray_buffer &good, Here here) {
  hurray_buffer bad = good;
  bad.ndim = -1;
  std::atomic<int> go{0};
  int32_t status = HURRAY_OK;
  // The barrier yields: on a loaded 2-core machine a pure spin waits out
  // whole scheduler slices for the other thread (seconds over 2000 rounds).
  std::thread other([&] {
    go.fetch_add(1);
    while (go.load() < 2) std::this_thread::yield();
    hurray_buffer o[2];
    status = hurray_share(&bad, 2, o);
  });
  go.fetch_add(1);
  while (go.load() < 2) std::this_thread::yield();
  here();
  other.join();
  return status;
}

// ---------------------------------------------------------------------------
// Off (the default): nothing is tracked, handles are exactly as before.
// Declared first: when the binary runs as one process, this runs before any
// test turns the mode on.
// ---------------------------------------------------------------------------

TEST(CheckOff, IsTheDefaultAndLeavesHandlesUntouched) {
  if (std::getenv("HURRAY_CHECK") != nullptr) GTEST_SKIP() << "HURRAY_CHECK is set";
  EXPECT_EQ(state().options, 0u);
  DeleterLog log;
  DLManagedTensorVersioned *t = make_versioned(log, dense({2, 3}));
  hurray_buffer h;
  ASSERT_OK(hurray_from_dlpack_versioned(t, 0, &h));
  EXPECT_EQ(h.user_data, t);  // the producer's tensor itself, no record
  EXPECT_EQ(hurray_check_label(&h, "x"), HURRAY_ERR_INVALID_ARGUMENT);
  EXPECT_TRUE(LastErrorMentions("not tracked"));
  size_t n = 99;
  ASSERT_OK(hurray_check_live(0, nullptr, nullptr, &n));
  EXPECT_EQ(n, 0u);
  ASSERT_OK(hurray_buffer_release(&h));
  EXPECT_EQ(log.calls.load(), 1);
  EXPECT_EQ(state().tracked, 0u);
}

// ---------------------------------------------------------------------------
// On
// ---------------------------------------------------------------------------

class Check : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_OK(hurray_check_enable(HURRAY_CHECK_TRACK));
    ASSERT_OK(hurray_set_diagnostic_hook(&HookLog::hook, &hook_));
  }
  void TearDown() override {
    ASSERT_OK(hurray_set_diagnostic_hook(nullptr, nullptr));
    ASSERT_OK(hurray_check_enable(0));
  }
  HookLog hook_;
};

TEST_F(Check, ReleasingACopyAfterTheOriginalIsCaughtAndTheProducerReleasedOnce) {
  DeleterLog log;
  DLManagedTensorVersioned *t = make_versioned(log, dense({2, 3}));
  hurray_buffer h;
  ASSERT_OK(hurray_from_dlpack_versioned(t, 0, &h));
  EXPECT_NE(h.user_data, t);  // the checker's id
  const uint64_t before = double_releases();
  hurray_buffer copy = h;  // the mistake: two values, one reference
  ASSERT_OK(hurray_buffer_release(&h));
  EXPECT_EQ(log.calls.load(), 1);
  EXPECT_EQ(log.last_arg.load(), t);
  ASSERT_OK(hurray_buffer_release(&copy));
  EXPECT_EQ(log.calls.load(), 1);  // not freed twice
  EXPECT_EQ(double_releases(), before + 1);
  ASSERT_EQ(hook_.count(HURRAY_ERR_RELEASED), 1u);
  const std::string m = hook_.last();
  EXPECT_NE(m.find("double release"), std::string::npos) << m;
  EXPECT_NE(m.find("made by hurray_from_dlpack_versioned"), std::string::npos) << m;
  EXPECT_NE(m.find("kDLCPU 0"), std::string::npos) << m;
  EXPECT_NE(m.find("first released at"), std::string::npos) << m;
  hurray_diagnostics d;
  d.struct_size = sizeof d;
  ASSERT_OK(hurray_get_diagnostics(&d));
  EXPECT_EQ(d.double_releases, before + 1);
}

TEST_F(Check, CallingTheReleaseFunctionDirectlyIsCaughtToo) {
  // A consumer that knows only the frozen fields calls release_fn(user_data).
  hurray_buffer h;
  ASSERT_OK(check_test_make_leak(&h));
  hurray_release_fn fn = h.release_fn;
  void *user_data = h.user_data;
  fn(user_data);
  const uint64_t before = double_releases();
  fn(user_data);
  EXPECT_EQ(double_releases(), before + 1);
}

TEST_F(Check, LiveHandlesAreListedWithWhereTheyWereMade) {
  const uint64_t mark = state().next_id;
  hurray_buffer h;
  ASSERT_OK(check_test_make_leak(&h));
  ASSERT_OK(hurray_check_label(&h, "made by the leak test"));
  Entries e = live_since(mark);
  ASSERT_EQ(e.ids.size(), 1u);
  EXPECT_EQ(e.ids[0], mark);
  EXPECT_EQ(e.made_by[0], "hurray_alloc");
  EXPECT_EQ(e.labels[0], "made by the leak test");
  EXPECT_NE(e.origins[0].find("check_test_make_leak"), std::string::npos) << e.origins[0];
  EXPECT_EQ(e.origins[0].find("libhurray"), std::string::npos) << "its own frames are left out";
  EXPECT_EQ(state().live, 1u);
  ASSERT_OK(hurray_buffer_release(&h));
  EXPECT_TRUE(live_since(mark).ids.empty());
  EXPECT_EQ(state().live, 0u);
  EXPECT_EQ(hurray_check_label(&h, "x"), HURRAY_ERR_INVALID_ARGUMENT);  // empty now
}

TEST_F(Check, SinceSelectsHandlesMadeAfterAMark) {
  hurray_buffer a, b;
  ASSERT_OK(check_test_make_leak(&a));
  const uint64_t mark = state().next_id;
  ASSERT_OK(check_test_make_leak(&b));
  EXPECT_EQ(live_since(mark).ids, std::vector<uint64_t>{mark});
  EXPECT_EQ(live_since(0).ids.size(), 2u);
  size_t n = 0;
  ASSERT_OK(hurray_check_live(mark + 1, nullptr, nullptr, &n));
  EXPECT_EQ(n, 0u);
  ASSERT_OK(hurray_buffer_release(&a));
  ASSERT_OK(hurray_buffer_release(&b));
}

TEST_F(Check, EachConsumerOfAShareIsTrackedAndTheSourceIsConsumed) {
  DeleterLog log;
  hurray_buffer src;
  ASSERT_OK(hurray_from_dlpack_versioned(make_versioned(log, dense({5})), 0, &src));
  const hurray_buffer stale = src;
  hurray_buffer out[3];
  ASSERT_OK(hurray_share(&src, 3, out));
  EXPECT_EQ(src.release_fn, nullptr);
  EXPECT_NE(out[0].user_data, out[1].user_data);
  EXPECT_NE(out[1].user_data, out[2].user_data);
  // The source's reference went into the share: releasing a copy of it is a
  // double release, and sharing or exporting it is refused.
  hurray_buffer again = stale;
  const uint64_t before = double_releases();
  EXPECT_STATUS(hurray_share(&again, 2, out), HURRAY_ERR_RELEASED);
  EXPECT_EQ(again.release_fn, stale.release_fn) << "a failed call consumes nothing";
  DLManagedTensorVersioned *dl = nullptr;
  EXPECT_STATUS(hurray_to_dlpack_versioned(&again, &dl), HURRAY_ERR_RELEASED);
  EXPECT_EQ(dl, nullptr);
  ASSERT_OK(hurray_buffer_release(&again));
  EXPECT_EQ(double_releases(), before + 3);
  EXPECT_NE(hook_.last().find("first consumed by hurray_share"), std::string::npos) << hook_.last();
  for (hurray_buffer &h : out) {
    EXPECT_EQ(log.calls.load(), 0);
    ASSERT_OK(hurray_buffer_release(&h));
  }
  EXPECT_EQ(log.calls.load(), 1);
  EXPECT_EQ(state().live, 0u);
}

TEST_F(Check, AViewConsumesItsTrackedSourceAndIsTrackedItself) {
  DeleterLog log;
  hurray_buffer src;
  ASSERT_OK(hurray_from_dlpack_versioned(make_versioned(log, dense({4, 4})), 0, &src));
  const hurray_buffer stale = src;
  const int64_t shape[1] = {4};
  hurray_view_desc d;
  std::memset(&d, 0, sizeof d);
  d.byte_offset = 16;
  d.dtype = f32();
  d.ndim = 1;
  d.shape = shape;
  const uint64_t mark = state().next_id;
  hurray_buffer v;
  ASSERT_OK(hurray_view(&src, &d, &v));
  EXPECT_EQ(src.release_fn, nullptr);
  Entries e = live_since(mark);
  ASSERT_EQ(e.ids.size(), 1u);
  EXPECT_EQ(e.made_by[0], "hurray_view");
  // The source's reference went into the view: viewing a copy of it again
  // is refused and counted, and consumes nothing.
  hurray_buffer again = stale;
  const uint64_t before = double_releases();
  hurray_buffer v2 = sentinel_handle();
  EXPECT_STATUS(hurray_view(&again, &d, &v2), HURRAY_ERR_RELEASED);
  EXPECT_TRUE(same_bytes(v2, sentinel_handle()));
  EXPECT_EQ(double_releases(), before + 1);
  EXPECT_NE(hook_.last().find("first consumed by hurray_view"), std::string::npos) << hook_.last();
  // A bad view of a live tracked handle keeps the handle live and tracked.
  hurray_buffer w;
  ASSERT_OK(hurray_share(&v, 1, &w));
  d.byte_offset = 48;
  EXPECT_STATUS(hurray_view(&w, &d, &v2), HURRAY_ERR_INVALID_ARGUMENT);
  // A double release of the view is caught; the producer's deleter runs once.
  hurray_buffer copy = w;
  ASSERT_OK(hurray_buffer_release(&w));
  EXPECT_EQ(log.calls.load(), 1);
  ASSERT_OK(hurray_buffer_release(&copy));
  EXPECT_EQ(log.calls.load(), 1);
  EXPECT_EQ(double_releases(), before + 2);
  EXPECT_EQ(state().live, 0u);
}

TEST_F(Check, BatchImportTracksEveryHandleAndBatchExportConsumesTrackedOnes) {
  std::vector<DeleterLog> logs(4);
  std::vector<DLManagedTensorVersioned *> ts;
  for (DeleterLog &l : logs) ts.push_back(make_versioned(l, dense({3})));
  const uint64_t mark = state().next_id;
  hurray_buffer hs[4];
  ASSERT_OK(hurray_from_dlpack_versioned_n(ts.data(), 4, 0, hs, nullptr));
  Entries e = live_since(mark);
  ASSERT_EQ(e.ids.size(), 4u);
  for (const std::string &m : e.made_by) EXPECT_EQ(m, "hurray_from_dlpack_versioned_n");
  // A released one in the batch: refused before anything is consumed.
  hurray_buffer stale = hs[2];
  hurray_buffer kept[4] = {hs[0], hs[1], hs[2], hs[3]};
  ASSERT_OK(hurray_buffer_release(&hs[2]));
  EXPECT_EQ(logs[2].calls.load(), 1);
  kept[2] = stale;
  DLManagedTensorVersioned *out[4] = {};
  size_t failed = 0;
  EXPECT_STATUS(hurray_to_dlpack_versioned_n(kept, 4, out, &failed), HURRAY_ERR_RELEASED);
  EXPECT_EQ(failed, 2u);
  EXPECT_EQ(out[0], nullptr);
  EXPECT_EQ(kept[0].release_fn, hs[0].release_fn) << "nothing consumed";
  EXPECT_EQ(state().live, 3u);
  // Without it, the three live ones export and unwrap to their tensors.
  hurray_buffer three[3] = {hs[0], hs[1], hs[3]};
  ASSERT_OK(hurray_to_dlpack_versioned_n(three, 3, out, nullptr));
  EXPECT_EQ(out[0], ts[0]);
  EXPECT_EQ(out[1], ts[1]);
  EXPECT_EQ(out[2], ts[3]);
  EXPECT_EQ(state().live, 0u);
  // Their records are gone: a release of an old copy is a double release.
  const uint64_t before = double_releases();
  ASSERT_OK(hurray_buffer_release(&hs[0]));
  EXPECT_EQ(double_releases(), before + 1);
  for (int i = 0; i < 3; ++i) out[i]->deleter(out[i]);
  for (const DeleterLog &l : logs) EXPECT_EQ(l.calls.load(), 1);
}

TEST_F(Check, ShareIntoItsOwnSourceSlotKeepsTheNewHandle) {
  hurray_buffer h[2];
  ASSERT_OK(check_test_make_leak(&h[0]));
  ASSERT_OK(hurray_share(&h[0], 2, h));  // out aliases src
  EXPECT_NE(h[0].release_fn, nullptr);
  EXPECT_NE(h[0].user_data, h[1].user_data);
  ASSERT_OK(hurray_buffer_release(&h[0]));
  ASSERT_OK(hurray_buffer_release(&h[1]));
  EXPECT_EQ(state().live, 0u);
  EXPECT_EQ(hook_.count(HURRAY_ERR_RELEASED), 0u);
}

TEST_F(Check, ExportOfAnImportStillHandsBackTheProducersTensor) {
  DeleterLog log;
  DLManagedTensorVersioned *t = make_versioned(log, dense({2, 2}));
  hurray_buffer h;
  ASSERT_OK(hurray_from_dlpack_versioned(t, 0, &h));
  const hurray_buffer stale = h;
  DLManagedTensorVersioned *back = nullptr;
  ASSERT_OK(hurray_to_dlpack_versioned(&h, &back));
  EXPECT_EQ(back, t);
  EXPECT_EQ(h.release_fn, nullptr);
  hurray_buffer again = stale;
  const uint64_t before = double_releases();
  ASSERT_OK(hurray_buffer_release(&again));
  EXPECT_EQ(double_releases(), before + 1);
  EXPECT_NE(hook_.last().find("first consumed by hurray_to_dlpack_versioned"), std::string::npos)
      << hook_.last();
  EXPECT_EQ(log.calls.load(), 0);
  back->deleter(back);
  EXPECT_EQ(log.calls.load(), 1);
}

TEST_F(Check, LegacyExportAndReimportAreTrackedAgain) {
  hurray_buffer h;
  ASSERT_OK(check_test_make_leak(&h));
  DLManagedTensor *t = nullptr;
  ASSERT_OK(hurray_to_dlpack(&h, &t));
  EXPECT_EQ(state().live, 0u);  // tracking ends at the export
  const uint64_t mark = state().next_id;
  ASSERT_OK(hurray_from_dlpack(t, 0, &h));
  Entries e = live_since(mark);
  ASSERT_EQ(e.made_by.size(), 1u);
  EXPECT_EQ(e.made_by[0], "hurray_from_dlpack");
  ASSERT_OK(hurray_buffer_release(&h));
  EXPECT_EQ(state().live, 0u);
}

TEST_F(Check, CopyRefusesToReadAReleasedHandle) {
  hurray_buffer h;
  ASSERT_OK(check_test_make_leak(&h));
  const hurray_buffer stale = h;
  hurray_buffer c;
  ASSERT_OK(hurray_copy(&h, hurray_device{HURRAY_DEVICE_CPU, 0}, &c));
  ASSERT_OK(hurray_buffer_release(&h));
  hurray_buffer c2;
  std::memset(&c2, 0xAB, sizeof c2);
  const uint64_t before = double_releases();
  EXPECT_STATUS(hurray_copy(&stale, hurray_device{HURRAY_DEVICE_CPU, 0}, &c2), HURRAY_ERR_RELEASED);
  EXPECT_TRUE(LastErrorMentions("already released"));
  EXPECT_EQ(double_releases(), before) << "a copy only reads: not counted";
  const std::string m = hook_.last();
  EXPECT_NE(m.find("use after release"), std::string::npos) << m;
  EXPECT_NE(m.find("first released at"), std::string::npos) << m;
  EXPECT_NE(m.find("this time hurray_copy at"), std::string::npos) << m;
  EXPECT_EQ(c2.version, 0xABABABABu) << "output untouched";
  Entries e = live_since(0);
  ASSERT_EQ(e.made_by.size(), 1u);
  EXPECT_EQ(e.made_by[0], "hurray_copy");
  ASSERT_OK(hurray_buffer_release(&c));
}

TEST_F(Check, ValidateAndExtentRefuseAReleasedHandleBeforeReadingIt) {
  hurray_buffer h;
  ASSERT_OK(check_test_make_leak(&h));  // its shape lives in the freed block
  const hurray_buffer stale = h;
  ASSERT_OK(hurray_buffer_validate(&h));
  ASSERT_OK(hurray_buffer_release(&h));
  EXPECT_STATUS(hurray_buffer_validate(&stale), HURRAY_ERR_RELEASED);
  hurray_extent e;
  std::memset(&e, 0x5A, sizeof e);
  EXPECT_STATUS(hurray_buffer_extent(&stale, &e), HURRAY_ERR_RELEASED);
  EXPECT_EQ(e.numel, 0x5A5A5A5A5A5A5A5ALL) << "untouched";
}

TEST_F(Check, AReleaseDuringAFailedConsumptionStillReleasesTheProducer) {
  // Thread A shares a copy that was spoiled (ndim -1): the share fails and
  // consumes nothing. Thread B releases the good copy meanwhile: that is the
  // one real release, whichever comes first.
  for (int round = 0; round < 2000; ++round) {
    DeleterLog log;
    hurray_buffer good;
    ASSERT_OK(hurray_from_dlpack_versioned(make_versioned(log, dense({4})), 0, &good));
    const uint64_t before = double_releases();
    const int32_t share_status =
        share_spoiled_copy_while(good, [&] { EXPECT_OK(hurray_buffer_release(&good)); });
    ASSERT_NE(share_status, HURRAY_OK);
    ASSERT_EQ(log.calls.load(), 1) << "round " << round;
    // Before the release the share fails validating (not counted); after it
    // the share uses a gone reference (counted once).
    const uint64_t counted = double_releases() - before;
    ASSERT_EQ(counted, share_status == HURRAY_ERR_RELEASED ? 1u : 0u) << "round " << round;
  }
  EXPECT_EQ(state().live, 0u);
}

TEST_F(Check, AShareOfACopyWaitsForAFailingShareOfAnother) {
  // Without the mode the good share always succeeds; with it too, even when
  // the spoiled copy's share (which fails and consumes nothing) runs first.
  for (int round = 0; round < 2000; ++round) {
    DeleterLog log;
    hurray_buffer good;
    ASSERT_OK(hurray_from_dlpack_versioned(make_versioned(log, dense({4})), 0, &good));
    const uint64_t before = double_releases();
    hurray_buffer out[2] = {};
    const int32_t bad_status =
        share_spoiled_copy_while(good, [&] { EXPECT_OK(hurray_share(&good, 2, out)); });
    ASSERT_NE(bad_status, HURRAY_OK);
    ASSERT_OK(hurray_buffer_release(&out[0]));
    ASSERT_OK(hurray_buffer_release(&out[1]));
    ASSERT_EQ(log.calls.load(), 1) << "round " << round;
    // The spoiled copy's share is counted only when it came after the good
    // one consumed the reference.
    ASSERT_EQ(double_releases() - before, bad_status == HURRAY_ERR_RELEASED ? 1u : 0u);
  }
}

TEST_F(Check, AForkedChildSettlesAShareAnotherParentThreadWasRunning) {
  // A thread keeps sharing fresh handles; the child of a fork releases a
  // copy of the one being shared. Whatever the timing, the child either
  // releases the producer or reports the release: never neither.
  static std::atomic<int> released{0};
  struct Producer {
    static void release(void *) { released.fetch_add(1); }
  };
  static float data[4];
  static int64_t shape[1] = {4}, strides[1] = {1};
  auto fresh = [] {
    hurray_buffer h{};
    h.version = HURRAY_BUFFER_VERSION;
    h.release_fn = &Producer::release;
    h.data = data;
    h.device = hurray_device{HURRAY_DEVICE_CPU, 0};
    h.dtype = f32();
    h.ndim = 1;
    h.shape = shape;
    h.strides = strides;
    hurray_buffer t;
    EXPECT_EQ(hurray_share(&h, 1, &t), HURRAY_OK);  // a tracked handle
    return t;
  };
  std::mutex mu;
  hurray_buffer first = fresh();
  hurray_buffer current = first;
  std::atomic<bool> stop{false};
  std::thread sharer([&] {
    while (!stop.load()) {
      hurray_buffer h = fresh();
      {
        std::lock_guard<std::mutex> lock(mu);
        current = h;
      }
      hurray_buffer out[2];
      if (hurray_share(&h, 2, out) == HURRAY_OK) {
        (void)hurray_buffer_release(&out[0]);
        (void)hurray_buffer_release(&out[1]);
      }
    }
  });
  for (int i = 0; i < 300; ++i) {
    hurray_buffer copy;
    {
      std::lock_guard<std::mutex> lock(mu);
      copy = current;
    }
    const pid_t pid = fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      const int before_released = released.load();
      const uint64_t before_doubles = double_releases();
      (void)hurray_buffer_release(&copy);
      const bool settled =
          released.load() == before_released + 1 || double_releases() == before_doubles + 1;
      _exit(settled ? 0 : 1);
    }
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFEXITED(status));
    ASSERT_EQ(WEXITSTATUS(status), 0) << "fork " << i << ": the child's release was lost";
  }
  stop.store(true);
  sharer.join();
  EXPECT_OK(hurray_buffer_release(&first));  // never shared in this process
}

TEST_F(Check, HandlesTrackedBeforeTurningItOffKeepWorking) {
  hurray_buffer a, b;
  ASSERT_OK(check_test_make_leak(&a));
  ASSERT_OK(hurray_check_enable(0));
  EXPECT_EQ(state().options, 0u);
  ASSERT_OK(check_test_make_leak(&b));
  EXPECT_EQ(hurray_check_label(&b, "x"), HURRAY_ERR_INVALID_ARGUMENT);  // untracked
  const hurray_buffer stale = a;
  ASSERT_OK(hurray_buffer_release(&a));
  hurray_buffer again = stale;
  const uint64_t before = double_releases();
  ASSERT_OK(hurray_buffer_release(&again));
  EXPECT_EQ(double_releases(), before + 1);
  ASSERT_OK(hurray_buffer_release(&b));
}

TEST_F(Check, LabelOfAReleasedHandleIsRefused) {
  hurray_buffer h;
  ASSERT_OK(check_test_make_leak(&h));
  const hurray_buffer stale = h;
  ASSERT_OK(hurray_buffer_release(&h));
  EXPECT_STATUS(hurray_check_label(&stale, "late"), HURRAY_ERR_RELEASED);
  EXPECT_STATUS(hurray_check_label(nullptr, "x"), HURRAY_ERR_INVALID_ARGUMENT);
  EXPECT_STATUS(hurray_check_label(&stale, nullptr), HURRAY_ERR_INVALID_ARGUMENT);
}

TEST_F(Check, HandlesSharedFromALabelledOneInheritItsLabel) {
  const uint64_t mark = state().next_id;
  hurray_buffer h, out[2];
  ASSERT_OK(check_test_make_leak(&h));
  ASSERT_OK(hurray_check_label(&h, "made at x.py:3"));
  ASSERT_OK(hurray_share(&h, 2, out));
  Entries e = live_since(mark);
  ASSERT_EQ(e.labels.size(), 2u);
  EXPECT_EQ(e.labels[0], "made at x.py:3");
  EXPECT_EQ(e.labels[1], "made at x.py:3");
  EXPECT_EQ(e.made_by[0], "hurray_share");
  ASSERT_OK(hurray_buffer_release(&out[0]));
  ASSERT_OK(hurray_buffer_release(&out[1]));
}

TEST_F(Check, ALabelIsNamedInTheDoubleReleaseReport) {
  hurray_buffer h;
  ASSERT_OK(check_test_make_leak(&h));
  ASSERT_OK(hurray_check_label(&h, "weights[3]"));
  hurray_buffer copy = h;
  ASSERT_OK(hurray_buffer_release(&h));
  ASSERT_OK(hurray_buffer_release(&copy));
  EXPECT_NE(hook_.last().find("label \"weights[3]\""), std::string::npos) << hook_.last();
}

TEST_F(Check, AnIdItNeverIssuedIsReportedAndNothingIsCalled) {
  hurray_buffer h;
  ASSERT_OK(check_test_make_leak(&h));
  hurray_buffer forged = h;
  forged.user_data = reinterpret_cast<void *>(uintptr_t{1} << 60);
  const uint64_t before = double_releases();
  ASSERT_OK(hurray_buffer_release(&forged));
  EXPECT_EQ(double_releases(), before + 1);
  EXPECT_NE(hook_.last().find("no id it issued"), std::string::npos) << hook_.last();
  ASSERT_OK(hurray_buffer_release(&h));
}

TEST_F(Check, OptionsAndStateAreChecked) {
  EXPECT_STATUS(hurray_check_enable(0x4), HURRAY_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(state().options, HURRAY_CHECK_TRACK) << "a failed call changes nothing";
  EXPECT_STATUS(hurray_check_get_state(nullptr), HURRAY_ERR_INVALID_ARGUMENT);
  hurray_check_state s;
  std::memset(&s, 0xFF, sizeof s);
  s.struct_size = 15;  // ends inside next_id
  EXPECT_STATUS(hurray_check_get_state(&s), HURRAY_ERR_INVALID_ARGUMENT);
  EXPECT_EQ(s.options, 0xFFFFFFFFu) << "untouched on failure";
  s.struct_size = 20;  // next_id and half of live: only next_id written
  ASSERT_OK(hurray_check_get_state(&s));
  EXPECT_EQ(s.struct_size, 16u);
  EXPECT_EQ(s.options, HURRAY_CHECK_TRACK);
  EXPECT_EQ(s.live, ~uint64_t{0});
  ASSERT_OK(hurray_check_enable(HURRAY_CHECK_STDERR));
  EXPECT_EQ(state().options, HURRAY_CHECK_TRACK | HURRAY_CHECK_STDERR) << "STDERR implies TRACK";
}

TEST_F(Check, TheApiTableServesTheCheckingFunctions) {
  const hurray_api *api = nullptr;
  ASSERT_OK(hurray_get_api(HURRAY_API_VERSION, &api));
  ASSERT_TRUE(HURRAY_API_HAS(api, check_label));
  EXPECT_EQ(api->check_enable, &hurray_check_enable);
  EXPECT_EQ(api->check_live, &hurray_check_live);
}

// ---------------------------------------------------------------------------
// Threads and fork
// ---------------------------------------------------------------------------

TEST_F(Check, CopiesReleasedOnManyThreadsReachTheProducerOnce) {
  constexpr int kThreads = 8;
  for (int round = 0; round < 20; ++round) {
    DeleterLog log;
    hurray_buffer h;
    ASSERT_OK(hurray_from_dlpack_versioned(make_versioned(log, dense({3})), 0, &h));
    std::vector<hurray_buffer> copies(kThreads, h);
    const uint64_t before = double_releases();
    std::atomic<int> go{0};
    std::vector<std::thread> threads;
    for (int i = 0; i < kThreads; ++i) {
      threads.emplace_back([&, i] {
        go.fetch_add(1);
        while (go.load() < kThreads) {
        }
        EXPECT_EQ(hurray_buffer_release(&copies[i]), HURRAY_OK);
      });
    }
    for (auto &t : threads) t.join();
    EXPECT_EQ(log.calls.load(), 1);
    EXPECT_EQ(double_releases(), before + kThreads - 1);
  }
}

TEST_F(Check, ThreadsMakingSharingAndReleasingStayConsistent) {
  constexpr int kThreads = 4, kRounds = 300;
  const uint64_t mark = state().next_id;
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([] {
      for (int r = 0; r < kRounds; ++r) {
        hurray_buffer h, out[3];
        ASSERT_EQ(check_test_make_leak(&h), HURRAY_OK);
        ASSERT_EQ(hurray_share(&h, 3, out), HURRAY_OK);
        DLManagedTensorVersioned *t = nullptr;
        ASSERT_EQ(hurray_to_dlpack_versioned(&out[0], &t), HURRAY_OK);
        ASSERT_EQ(hurray_buffer_release(&out[1]), HURRAY_OK);
        t->deleter(t);
        ASSERT_EQ(hurray_buffer_release(&out[2]), HURRAY_OK);
      }
    });
  }
  size_t seen = 0;
  for (int r = 0; r < 50; ++r) {  // listing while the others work
    ASSERT_OK(hurray_check_live(mark, nullptr, nullptr, &seen));
  }
  for (auto &t : threads) t.join();
  EXPECT_TRUE(live_since(mark).ids.empty());
  EXPECT_EQ(hook_.count(HURRAY_ERR_RELEASED), 0u);
}

// GCC 12's ASan allocator has no fork handler: the child of a fork taken
// while another thread holds one of its locks (inside malloc) blocks on it
// forever (seen in 2 of 30 runs). Under ASan the worker therefore parks,
// outside any allocation, across each fork; elsewhere it works through it.
#if defined(__SANITIZE_ADDRESS__)
constexpr bool kParkAcrossFork = true;
#else
constexpr bool kParkAcrossFork = false;
#endif

TEST_F(Check, AForkedChildTracksAndReleasesWhileParentThreadsWork) {
  std::atomic<bool> stop{false}, hold{false}, parked{false};
  std::thread worker([&] {
    while (!stop.load()) {
      if (hold.load()) {
        parked.store(true);
        while (hold.load()) std::this_thread::yield();
        parked.store(false);
        continue;
      }
      hurray_buffer h;
      if (check_test_make_leak(&h) == HURRAY_OK) (void)hurray_buffer_release(&h);
    }
  });
  for (int i = 0; i < 20; ++i) {
    if (kParkAcrossFork) {
      hold.store(true);
      while (!parked.load()) std::this_thread::yield();
    }
    const pid_t pid = fork();
    if (kParkAcrossFork && pid != 0) {
      hold.store(false);
      while (parked.load()) std::this_thread::yield();
    }
    ASSERT_GE(pid, 0);
    if (pid == 0) {
      hurray_buffer h;
      int code = check_test_make_leak(&h) == HURRAY_OK ? 0 : 1;
      hurray_buffer copy = h;
      if (hurray_buffer_release(&h) != HURRAY_OK) code = 2;
      if (hurray_buffer_release(&copy) != HURRAY_OK) code = 3;
      _exit(code);
    }
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFEXITED(status));
    EXPECT_EQ(WEXITSTATUS(status), 0);
  }
  stop.store(true);
  worker.join();
}

}  // namespace
