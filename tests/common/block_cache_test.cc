// SPDX-License-Identifier: Apache-2.0
// The per-thread block cache of src/common/block_cache.h (export and share blocks):
// reuse, the bound, deleters on other threads, thread exit, a put after the
// thread's cache was freed, fork. Leaks are caught by the asan workflow
// (LSan), races by the tsan workflow.
#include "common/block_cache.h"

#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <condition_variable>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "hurray_test_support.h"

namespace {

using namespace hurray_test;

struct SmallTag;
using Small = hurray::detail::BlockCache<64, 4, SmallTag>;

TEST(BlockCache, ReusesTheLastBlockPut) {
  Small::drain();
  void *a = Small::get();
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(Small::cached(), 0u);
  Small::put(a);
  EXPECT_EQ(Small::cached(), 1u);
  void *b = Small::get();
  EXPECT_EQ(b, a);
  EXPECT_EQ(Small::cached(), 0u);
  Small::put(b);
  Small::drain();
  EXPECT_EQ(Small::cached(), 0u);
}

TEST(BlockCache, HoldsAtMostBoundBlocksAndFreesTheRest) {
  Small::drain();
  std::vector<void *> blocks;
  for (int i = 0; i < 10; ++i) blocks.push_back(Small::get());
  for (void *p : blocks) Small::put(p);
  EXPECT_EQ(Small::cached(), Small::kBound);
  // The cached ones are the first Bound put, handed out last-in first-out.
  std::set<void *> first(blocks.begin(), blocks.begin() + Small::kBound);
  for (uint32_t i = 0; i < Small::kBound; ++i) {
    void *p = Small::get();
    EXPECT_EQ(first.count(p), 1u);
    Small::put(p);
    EXPECT_EQ(Small::get(), p);
    Small::put(p);
  }
  EXPECT_EQ(Small::cached(), Small::kBound);
  Small::drain();
}

// try_get / try_put: the call-free halves of get / put (the steady export
// and share paths use them). try_get never allocates; try_put never frees.
TEST(BlockCache, TryGetAndTryPutNeverCallTheAllocator) {
  Small::drain();
  void *a = Small::get();  // a slot is claimed on this thread's first put
  ASSERT_NE(a, nullptr);
  Small::put(a);
  EXPECT_EQ(Small::cached(), 1u);
  EXPECT_EQ(Small::try_get(), a);
  EXPECT_EQ(Small::cached(), 0u);
  EXPECT_EQ(Small::try_get(), nullptr);  // empty: NULL, not malloc
  EXPECT_TRUE(Small::try_put(a));
  EXPECT_EQ(Small::cached(), 1u);
  // Any malloc of kSize bytes may go in (as with put).
  for (uint32_t i = 1; i < Small::kBound; ++i) {
    void *p = std::malloc(Small::kSize);
    ASSERT_NE(p, nullptr);
    EXPECT_TRUE(Small::try_put(p));
  }
  EXPECT_EQ(Small::cached(), Small::kBound);
  void *fresh = std::malloc(Small::kSize);
  ASSERT_NE(fresh, nullptr);
  EXPECT_FALSE(Small::try_put(fresh));  // full: nothing done, the caller keeps it
  EXPECT_EQ(Small::cached(), Small::kBound);
  std::free(fresh);
  Small::drain();
  EXPECT_EQ(Small::cached(), 0u);
}

// A thread that never put a block owns no slot: try_put declines, try_get
// finds nothing.
TEST(BlockCache, TryPutOnAThreadWithoutASlotDeclines) {
  std::thread t([] {
    void *p = std::malloc(Small::kSize);
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(Small::try_get(), nullptr);
    EXPECT_FALSE(Small::try_put(p));
    EXPECT_EQ(Small::cached(), 0u);
    std::free(p);
  });
  t.join();
}

TEST(BlockCache, BlocksPutOnAnotherThreadGoToThatThreadsCache) {
  Small::drain();
  std::vector<void *> blocks;
  for (int i = 0; i < 6; ++i) blocks.push_back(Small::get());
  uint32_t in_thread = 99;
  std::thread t([&] {
    for (void *p : blocks) Small::put(p);
    in_thread = Small::cached();
  });
  t.join();  // its exit frees its cache (LSan checks under asan)
  EXPECT_EQ(in_thread, Small::kBound);
  EXPECT_EQ(Small::cached(), 0u);
}

// A thread gives its slot back when it exits.
TEST(BlockCache, AnExitingThreadGivesItsSlotBack) {
  const uint32_t before = Small::slots_in_use();
  uint32_t during = 0;
  std::thread t([&] {
    Small::put(Small::get());
    during = Small::slots_in_use();
  });
  t.join();
  EXPECT_EQ(during, before + 1);
  EXPECT_EQ(Small::slots_in_use(), before);
}

// A thread that lives until exit (libhurray's watcher and retirer) bypasses
// the cache: it claims no slot, so it registers no thread_local destructor
// (one registered on a thread alive at exit is what LeakSanitizer reported
// from the IPC watcher, in gpu_fake.*PoolIpc.FakeCountsAnExporterFreeingFirst).
TEST(BlockCache, ABypassingThreadClaimsNoSlotAndCachesNothing) {
  const uint32_t before = Small::slots_in_use();
  uint32_t during = 99, cached = 99;
  std::thread t([&] {
    Small::bypass_this_thread();
    for (int i = 0; i < 3; ++i) Small::put(Small::get());
    during = Small::slots_in_use();
    cached = Small::cached();
  });
  t.join();
  EXPECT_EQ(during, before);
  EXPECT_EQ(cached, 0u);
}

// More live threads than slots: those without a slot use malloc and free;
// every block is accounted for (LSan under asan) and no cache exceeds Bound.
TEST(BlockCache, MoreLiveThreadsThanSlotsFallBackToMalloc) {
  constexpr int kThreads = Small::kSlots + 64;
  std::mutex m;
  std::condition_variable cv;
  int arrived = 0;
  std::atomic<int> over_bound{0}, without_slot{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < kThreads; ++i) {
    threads.emplace_back([&] {
      std::vector<void *> blocks;
      for (int k = 0; k < 6; ++k) blocks.push_back(Small::get());
      for (void *p : blocks) Small::put(p);
      if (Small::cached() > Small::kBound) ++over_bound;
      if (Small::cached() == 0) ++without_slot;
      std::unique_lock<std::mutex> lock(m);  // stay alive until all have put
      ++arrived;
      cv.notify_all();
      cv.wait(lock, [&] { return arrived == kThreads; });
    });
  }
  for (std::thread &t : threads) t.join();
  EXPECT_EQ(over_bound.load(), 0);
  EXPECT_GE(without_slot.load(), kThreads - static_cast<int>(Small::kSlots));
  EXPECT_LE(Small::slots_in_use(), 1u);  // at most this thread's
}

// fork() while another thread owns a slot: the child frees that thread's
// cache and slot (a thread of the child may reuse its thread pointer).
TEST(BlockCache, ForkedChildFreesTheSlotsOfThreadsItDoesNotHave) {
  Small::put(Small::get());  // this thread owns a slot
  std::mutex m;
  std::condition_variable cv;
  bool holding = false, done = false;
  std::thread other([&] {
    Small::put(Small::get());
    std::unique_lock<std::mutex> lock(m);
    holding = true;
    cv.notify_all();
    cv.wait(lock, [&] { return done; });
  });
  uint32_t in_parent = 0;
  {
    std::unique_lock<std::mutex> lock(m);
    cv.wait(lock, [&] { return holding; });
    in_parent = Small::slots_in_use();
  }
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    // Only this thread's slot survives; a new thread claims and frees one.
    int bad = Small::slots_in_use() != 1u || Small::cached() != 1u;
#if !defined(__SANITIZE_THREAD__)  // TSan cannot start threads after a multi-threaded fork
    std::thread t([&] {
      Small::put(Small::get());
      bad |= Small::cached() != 1u;
    });
    t.join();
    bad |= Small::slots_in_use() != 1u;
#endif
    std::_Exit(bad ? 3 : 0);
  }
  {
    std::lock_guard<std::mutex> lock(m);
    done = true;
  }
  cv.notify_all();
  other.join();
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  EXPECT_EQ(in_parent, Small::slots_in_use() + 1);
  Small::drain();
}

// A thread_local constructed before the cache's first put is destroyed after
// the cache was freed; a block it puts then must be freed, not cached.
struct LatePut {
  void *block = nullptr;
  uint32_t *after = nullptr;
  ~LatePut() {
    Small::put(block);
    *after = Small::cached();
  }
};

TEST(BlockCache, PutAfterTheThreadsCacheWasFreedFreesTheBlock) {
  uint32_t after = 99;
  std::thread t([&] {
    static thread_local LatePut late;
    late.block = Small::get();
    late.after = &after;
    Small::put(Small::get());  // first put: registers the cache's destructor
    EXPECT_EQ(Small::cached(), 1u);
  });
  t.join();
  EXPECT_EQ(after, 0u);
}

// Library level: export blocks of one thread deleted on another, many times,
// with the release running exactly once per tensor.
TEST(BlockCache, ExportDeletedOnOtherThreadsReleasesOnce) {
  constexpr int kTensors = 200;
  Layout l = dense({2, 3});
  HandleSource src;
  std::vector<DLManagedTensorVersioned *> out;
  for (int i = 0; i < kTensors; ++i) {
    hurray_buffer h = src.handle(l);
    DLManagedTensorVersioned *t = nullptr;
    ASSERT_STATUS(hurray_to_dlpack_versioned(&h, &t), HURRAY_OK);
    out.push_back(t);
  }
  std::thread a([&] {
    for (int i = 0; i < kTensors; i += 2) out[i]->deleter(out[i]);
  });
  std::thread b([&] {
    for (int i = 1; i < kTensors; i += 2) out[i]->deleter(out[i]);
  });
  a.join();
  b.join();
  EXPECT_EQ(src.log.calls.load(), kTensors);
}

TEST(BlockCache, SteadyExportReusesOneBlock) {
  Layout l = dense({4});
  HandleSource src;
  DLManagedTensorVersioned *first = nullptr;
  for (int i = 0; i < 8; ++i) {
    hurray_buffer h = src.handle(l);
    DLManagedTensorVersioned *t = nullptr;
    ASSERT_STATUS(hurray_to_dlpack_versioned(&h, &t), HURRAY_OK);
    if (i == 0) first = t;
    EXPECT_EQ(t, first) << "round " << i;
    t->deleter(t);
  }
  EXPECT_EQ(src.log.calls.load(), 8);
}

TEST(BlockCache, ForkedChildUsesAndFreesItsCopy) {
  Layout l = dense({4});
  HandleSource src;
  {  // leave a block in this thread's cache before forking
    hurray_buffer h = src.handle(l);
    DLManagedTensorVersioned *t = nullptr;
    ASSERT_STATUS(hurray_to_dlpack_versioned(&h, &t), HURRAY_OK);
    t->deleter(t);
  }
  pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    int bad = 0;
    for (int i = 0; i < 100; ++i) {
      hurray_buffer h = src.handle(l);
      DLManagedTensorVersioned *t = nullptr;
      if (hurray_to_dlpack_versioned(&h, &t) != HURRAY_OK)
        bad = 1;
      else
        t->deleter(t);
    }
    std::exit(bad != 0 || src.log.calls.load() != 101 ? 3
                                                      : 0);  // runs the thread_local destructors
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  EXPECT_EQ(src.log.calls.load(), 1);
}

}  // namespace
