// SPDX-License-Identifier: Apache-2.0
// Thread safety of the release contract (spec §4.2, §5): fan-out released by
// many threads in random order, re-sharing racing with releases, and
// independent pipelines running side by side. Meant for the tsan build too;
// each test stays well under a few seconds there.
#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "hurray_test_support.h"

namespace {

using namespace hurray_test;

// A reusable barrier for a fixed number of threads (std::barrier is C++20).
class Barrier {
 public:
  explicit Barrier(int n) : n_(n) {}
  void arrive_and_wait() {
    std::unique_lock<std::mutex> lock(mu_);
    const long gen = generation_;
    if (++waiting_ == n_) {
      waiting_ = 0;
      ++generation_;
      cv_.notify_all();
      return;
    }
    cv_.wait(lock, [&] { return generation_ != gen; });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  const int n_;
  int waiting_ = 0;
  long generation_ = 0;
};

thread_local bool t_inside_consumer_release = false;

// What the source's release observed, per round.
struct SourceState {
  std::atomic<int> calls{0};
  std::atomic<int> releases_started{0};
  std::atomic<int> started_when_released{-1};
  std::atomic<bool> inside_a_consumer_release{false};
  // Plain (non-atomic) memory each consumer writes before its release and the
  // source's release reads: the release must happen after all those writes
  // (TSan reports a race if the count lacks acquire/release ordering).
  int touched[64] = {};
  int touched_seen = -1;
  std::mutex mu;
  std::thread::id thread;
};

void source_release(void *user_data) {
  auto *s = static_cast<SourceState *>(user_data);
  s->started_when_released.store(s->releases_started.load());
  s->inside_a_consumer_release.store(t_inside_consumer_release);
  int sum = 0;
  for (int v : s->touched) sum += v;
  s->touched_seen = sum;
  {
    std::lock_guard<std::mutex> lock(s->mu);
    s->thread = std::this_thread::get_id();
  }
  s->calls.fetch_add(1);
}

hurray_buffer source_handle(SourceState *s, const int64_t *shape, const int64_t *strides,
                            void *data) {
  hurray_buffer h;
  std::memset(&h, 0, sizeof h);
  h.version = HURRAY_BUFFER_VERSION;
  h.release_fn = &source_release;
  h.user_data = s;
  h.data = data;
  h.device = hurray_device{HURRAY_DEVICE_CPU, 0};
  h.dtype = f32();
  h.ndim = 1;
  h.shape = shape;
  h.strides = strides;
  return h;
}

void consumer_release(SourceState *s, hurray_buffer *h, int slot, int32_t *status) {
  s->touched[slot] = 1;  // this consumer's last use of the shared memory
  s->releases_started.fetch_add(1);
  t_inside_consumer_release = true;
  const int32_t st = hurray_buffer_release(h);
  t_inside_consumer_release = false;
  if (st != HURRAY_OK) *status = st;
}

TEST(Threads, SixtyFourHandlesReleasedByEightThreadsInRandomOrder) {
  constexpr int kThreads = 8;
  constexpr int kHandles = 64;
  constexpr int kRounds = 2000;
  const int64_t shape[] = {16};
  const int64_t strides[] = {1};
  float data[16] = {};

  std::vector<hurray_buffer> handles(kHandles);
  std::vector<int> order(kHandles);
  std::vector<SourceState> states(kRounds);
  std::vector<std::thread::id> worker_ids(kThreads);
  std::vector<int32_t> worker_status(kThreads, HURRAY_OK);
  int32_t share_status = HURRAY_OK;
  Barrier start(kThreads + 1), done(kThreads + 1);
  std::mt19937 rng(20261129);

  std::vector<std::thread> workers;
  for (int w = 0; w < kThreads; ++w) {
    workers.emplace_back([&, w] {
      worker_ids[static_cast<size_t>(w)] = std::this_thread::get_id();
      for (int r = 0; r < kRounds; ++r) {
        start.arrive_and_wait();
        // Worker w releases the handles at positions w, w+8, ... of this
        // round's random order.
        for (int i = w; i < kHandles; i += kThreads) {
          const int slot = order[static_cast<size_t>(i)];
          consumer_release(&states[static_cast<size_t>(r)], &handles[static_cast<size_t>(slot)],
                           slot, &worker_status[static_cast<size_t>(w)]);
        }
        done.arrive_and_wait();
      }
    });
  }

  for (int r = 0; r < kRounds; ++r) {
    SourceState *s = &states[static_cast<size_t>(r)];
    hurray_buffer src = source_handle(s, shape, strides, data);
    const int32_t st = hurray_share(&src, kHandles, handles.data());
    if (st != HURRAY_OK) share_status = st;
    for (int i = 0; i < kHandles; ++i) order[static_cast<size_t>(i)] = i;
    std::shuffle(order.begin(), order.end(), rng);
    start.arrive_and_wait();
    done.arrive_and_wait();
  }
  for (std::thread &t : workers) t.join();

  EXPECT_STATUS(share_status, HURRAY_OK);
  for (int w = 0; w < kThreads; ++w)
    EXPECT_STATUS(worker_status[static_cast<size_t>(w)], HURRAY_OK);
  int bad_rounds = 0;
  for (int r = 0; r < kRounds && bad_rounds < 5; ++r) {
    SourceState &s = states[static_cast<size_t>(r)];
    SCOPED_TRACE("round " + std::to_string(r));
    const bool ok = s.calls.load() == 1 && s.started_when_released.load() == kHandles &&
                    s.touched_seen == kHandles && s.inside_a_consumer_release.load() &&
                    std::find(worker_ids.begin(), worker_ids.end(), s.thread) != worker_ids.end();
    if (ok) continue;
    ++bad_rounds;
    EXPECT_EQ(s.calls.load(), 1) << "source released exactly once";
    EXPECT_EQ(s.started_when_released.load(), kHandles)
        << "source released before every handle's release began";
    EXPECT_EQ(s.touched_seen, kHandles) << "source release did not see every consumer's writes";
    EXPECT_TRUE(s.inside_a_consumer_release.load())
        << "source release must run inside the last hurray_buffer_release";
    EXPECT_NE(std::find(worker_ids.begin(), worker_ids.end(), s.thread), worker_ids.end())
        << "source release ran on a thread that released no handle";
  }
  for (const hurray_buffer &h : handles) EXPECT_TRUE(is_zeroed(h));
}

TEST(Threads, ResharingRacesWithReleases) {
  // 8 threads each get one handle, share it again to 8 and release those in
  // random order while the others do the same: 64 references, one count.
  constexpr int kThreads = 8;
  constexpr int kRounds = 40;
  const int64_t shape[] = {4};
  const int64_t strides[] = {1};
  float data[4] = {};
  std::vector<SourceState> states(kRounds);
  for (int r = 0; r < kRounds; ++r) {
    SourceState *s = &states[static_cast<size_t>(r)];
    hurray_buffer src = source_handle(s, shape, strides, data);
    std::vector<hurray_buffer> firsts(kThreads);
    ASSERT_OK(hurray_share(&src, kThreads, firsts.data()));
    std::vector<int32_t> status(kThreads, HURRAY_OK);
    std::vector<std::thread> threads;
    for (int w = 0; w < kThreads; ++w) {
      threads.emplace_back([&, w] {
        std::mt19937 rng(static_cast<unsigned>(r * kThreads + w));
        hurray_buffer mine[kThreads];
        int32_t st = hurray_share(&firsts[static_cast<size_t>(w)], kThreads, mine);
        if (st != HURRAY_OK) {
          status[static_cast<size_t>(w)] = st;
          return;
        }
        std::shuffle(std::begin(mine), std::end(mine), rng);
        for (int j = 0; j < kThreads; ++j) {
          consumer_release(s, &mine[j], w * kThreads + j, &status[static_cast<size_t>(w)]);
        }
      });
    }
    for (std::thread &t : threads) t.join();
    for (int32_t st : status) ASSERT_STATUS(st, HURRAY_OK);
    ASSERT_EQ(s->calls.load(), 1) << "round " << r;
    ASSERT_EQ(s->started_when_released.load(), kThreads * kThreads) << "round " << r;
    ASSERT_TRUE(s->inside_a_consumer_release.load()) << "round " << r;
    ASSERT_EQ(s->touched_seen, kThreads * kThreads) << "round " << r;
  }
}

TEST(Threads, IndependentPipelinesRunConcurrently) {
  // alloc -> share -> export (both forms) -> import -> copy -> release, on 8
  // threads at once; counts checked per thread.
  constexpr int kThreads = 8;
  constexpr int kIterations = 150;
  std::vector<std::string> failures(kThreads);
  std::vector<std::thread> threads;
  for (int w = 0; w < kThreads; ++w) {
    threads.emplace_back([&, w] {
      std::string &fail = failures[static_cast<size_t>(w)];
      auto check = [&](int32_t st, const char *what) {
        if (st != HURRAY_OK && fail.empty()) {
          fail = std::string(what) + ": " + hurray_status_name(st) + ": " + hurray_last_error();
        }
        return st == HURRAY_OK;
      };
      for (int i = 0; i < kIterations && fail.empty(); ++i) {
        // A foreign producer's tensor, counted.
        DeleterLog log;
        DLManagedTensorVersioned *t = make_versioned(log, dense({4, 4}));
        hurray_buffer h;
        if (!check(hurray_from_dlpack_versioned(t, HURRAY_IMPORT_DEFAULT, &h), "import")) break;
        hurray_buffer out[3];
        if (!check(hurray_share(&h, 3, out), "share")) break;
        DLManagedTensorVersioned *v = nullptr;
        DLManagedTensor *g = nullptr;
        if (!check(hurray_to_dlpack_versioned(&out[0], &v), "export versioned")) break;
        if (!check(hurray_to_dlpack(&out[1], &g), "export legacy")) break;
        hurray_buffer back;
        if (!check(hurray_from_dlpack(g, HURRAY_IMPORT_DEFAULT, &back), "import legacy")) break;
        hurray_buffer copy;
        if (!check(hurray_copy(&out[2], hurray_device{HURRAY_DEVICE_CPU, 0}, &copy), "copy")) {
          break;
        }
        check(hurray_buffer_release(&copy), "release copy");
        v->deleter(v);
        check(hurray_buffer_release(&back), "release back");
        if (log.calls.load() != 0 && fail.empty()) fail = "source released too early";
        check(hurray_buffer_release(&out[2]), "release last");
        if (log.calls.load() != 1 && fail.empty()) fail = "source not released exactly once";
        if (log.last_arg.load() != t && fail.empty()) fail = "deleter got another pointer";
      }
    });
  }
  for (std::thread &t : threads) t.join();
  for (int w = 0; w < kThreads; ++w)
    EXPECT_EQ(failures[static_cast<size_t>(w)], "") << "thread " << w;
}

TEST(Threads, ExportedTensorsCrossThreadsThroughAQueue) {
  // One thread exports, another imports and releases: the deleter of every
  // producer tensor runs once, on the consumer thread.
  constexpr int kTensors = 300;
  std::vector<HandleSource *> sources;
  for (int i = 0; i < kTensors; ++i) sources.push_back(new HandleSource());
  std::mutex mu;
  std::condition_variable cv;
  std::vector<DLManagedTensorVersioned *> queue;
  int produced = 0;
  int32_t producer_status = HURRAY_OK, consumer_status = HURRAY_OK;
  std::thread::id consumer_id;

  std::thread producer([&] {
    for (int i = 0; i < kTensors; ++i) {
      hurray_buffer h = sources[static_cast<size_t>(i)]->handle(dense({3}));
      DLManagedTensorVersioned *t = nullptr;
      const int32_t st = hurray_to_dlpack_versioned(&h, &t);
      if (st != HURRAY_OK) producer_status = st;
      std::lock_guard<std::mutex> lock(mu);
      queue.push_back(st == HURRAY_OK ? t : nullptr);
      ++produced;
      cv.notify_one();
    }
  });
  std::thread consumer([&] {
    consumer_id = std::this_thread::get_id();
    for (int taken = 0; taken < kTensors; ++taken) {
      DLManagedTensorVersioned *t = nullptr;
      {
        std::unique_lock<std::mutex> lock(mu);
        cv.wait(lock, [&] { return !queue.empty(); });
        t = queue.front();
        queue.erase(queue.begin());
      }
      if (t == nullptr) continue;
      hurray_buffer h;
      int32_t st = hurray_from_dlpack_versioned(t, HURRAY_IMPORT_DEFAULT, &h);
      if (st == HURRAY_OK) st = hurray_buffer_release(&h);
      if (st != HURRAY_OK) consumer_status = st;
    }
  });
  producer.join();
  consumer.join();
  EXPECT_STATUS(producer_status, HURRAY_OK);
  EXPECT_STATUS(consumer_status, HURRAY_OK);
  EXPECT_EQ(produced, kTensors);
  for (HandleSource *s : sources) {
    EXPECT_EQ(s->log.calls.load(), 1);
    EXPECT_EQ(s->log.last_thread(), consumer_id);
    delete s;
  }
}

TEST(Threads, ErrorMessagesDoNotLeakAcrossThreads) {
  constexpr int kThreads = 8;
  std::vector<int> mismatches(kThreads, 0);
  std::vector<std::thread> threads;
  for (int w = 0; w < kThreads; ++w) {
    threads.emplace_back([&, w] {
      const int64_t shape[] = {2, -(w + 1)};  // each thread fails with its own value
      const std::string want = "-" + std::to_string(w + 1);
      for (int i = 0; i < 300; ++i) {
        hurray_buffer h;
        const int32_t st =
            hurray_alloc(hurray_device{HURRAY_DEVICE_CPU, 0}, f32(), 2, shape, 0, &h);
        const std::string got = hurray_last_error();
        if (st != HURRAY_ERR_INVALID_ARGUMENT ||
            got.find("shape[1] is " + want + " ") == std::string::npos) {
          ++mismatches[static_cast<size_t>(w)];
        }
      }
    });
  }
  for (std::thread &t : threads) t.join();
  for (int w = 0; w < kThreads; ++w)
    EXPECT_EQ(mismatches[static_cast<size_t>(w)], 0) << "thread " << w;
}

}  // namespace
