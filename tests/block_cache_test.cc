// The per-thread block cache of src/block_cache.h (export and share blocks):
// reuse, the bound, deleters on other threads, thread exit, a put after the
// thread's cache was freed, fork. Leaks are caught by the asan workflow
// (LSan), races by the tsan workflow.
#include "block_cache.h"

#include <sys/wait.h>
#include <unistd.h>

#include <set>
#include <thread>
#include <vector>

#include "hurray_test_support.h"

namespace {

using namespace hurray_test;

struct SmallTag;
using Small = hurray::BlockCache<64, 4, SmallTag>;

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
      if (hurray_to_dlpack_versioned(&h, &t) != HURRAY_OK) bad = 1;
      else t->deleter(t);
    }
    std::exit(bad != 0 || src.log.calls.load() != 101 ? 3 : 0);  // runs the thread_local destructors
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  EXPECT_EQ(src.log.calls.load(), 1);
}

}  // namespace
