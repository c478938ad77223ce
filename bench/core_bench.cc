// SPDX-License-Identifier: Apache-2.0
// Core costs: export + deleter, import + release, fan-out per consumer,
// release contended from two threads, batched conversion and views.
// Results go to docs/performance.md.
#include <benchmark/benchmark.h>
#include <hurray/dlpack.h>

#include <cstdlib>

#include "bench_tensors.h"
#include "hurray/hurray.h"

namespace {

int64_t g_shape[2] = {1024, 1024};
int64_t g_strides[2] = {1024, 1};
float g_storage[4];

void noop_release(void *) {}
void noop_deleter(DLManagedTensorVersioned *) {}

// A foreign producer's handle: describing memory costs nothing to create.
hurray_buffer foreign_handle() {
  return hurray_bench::foreign_handle(2, g_shape, g_strides, &noop_release, g_storage);
}

void BM_ExportVersionedAndDelete(benchmark::State &state) {
  for (auto _ : state) {
    hurray_buffer h = foreign_handle();
    DLManagedTensorVersioned *t = nullptr;
    if (hurray_to_dlpack_versioned(&h, &t) != HURRAY_OK) std::abort();
    benchmark::DoNotOptimize(t);
    t->deleter(t);
  }
}
BENCHMARK(BM_ExportVersionedAndDelete);

void BM_ImportVersionedAndRelease(benchmark::State &state) {
  DLManagedTensorVersioned t{};
  t.version = {1, 3};
  t.deleter = &noop_deleter;
  t.dl_tensor.data = g_storage;
  t.dl_tensor.device = {kDLCPU, 0};
  t.dl_tensor.ndim = 2;
  t.dl_tensor.dtype = {kDLFloat, 32, 1};
  t.dl_tensor.shape = g_shape;
  t.dl_tensor.strides = g_strides;
  for (auto _ : state) {
    hurray_buffer h;
    if (hurray_from_dlpack_versioned(&t, HURRAY_IMPORT_DEFAULT, &h) != HURRAY_OK) std::abort();
    benchmark::DoNotOptimize(h);
    hurray_buffer_release(&h);
  }
}
BENCHMARK(BM_ImportVersionedAndRelease);

// share(n) of an unshared handle plus the release of all n handles; the
// "per_consumer" counter divides the iteration time by n.
void BM_FanOutAndReleaseAll(benchmark::State &state) {
  const auto n = static_cast<size_t>(state.range(0));
  hurray_buffer out[64];
  for (auto _ : state) {
    hurray_buffer h = foreign_handle();
    if (hurray_share(&h, n, out) != HURRAY_OK) std::abort();
    for (size_t i = 0; i < n; ++i) hurray_buffer_release(&out[i]);
  }
  state.counters["per_consumer"] =
      benchmark::Counter(static_cast<double>(state.iterations()) * static_cast<double>(n),
                         benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
}
BENCHMARK(BM_FanOutAndReleaseAll)->Arg(1)->Arg(8)->Arg(64);

// Re-sharing an already shared handle (no allocation, one atomic add) and
// releasing all but one of the results (one atomic sub each).
void BM_ReshareAndRelease(benchmark::State &state) {
  const auto n = static_cast<size_t>(state.range(0));
  hurray_buffer h = foreign_handle();
  hurray_buffer seed[2];
  if (hurray_share(&h, 2, seed) != HURRAY_OK) std::abort();
  hurray_buffer out[64];
  for (auto _ : state) {
    if (hurray_share(&seed[0], n, out) != HURRAY_OK) std::abort();
    for (size_t i = 1; i < n; ++i) hurray_buffer_release(&out[i]);
    seed[0] = out[0];
  }
  state.counters["per_consumer"] =
      benchmark::Counter(static_cast<double>(state.iterations()) * static_cast<double>(n),
                         benchmark::Counter::kIsRate | benchmark::Counter::kInvert);
  hurray_buffer_release(&seed[0]);
  hurray_buffer_release(&seed[1]);
}
BENCHMARK(BM_ReshareAndRelease)->Arg(64);

// Two threads share and release handles of one control block at once: the
// count's cache line moves between cores on every operation.
hurray_buffer g_contended[2];

void BM_ConcurrentRelease(benchmark::State &state) {
  if (state.thread_index() == 0) {
    hurray_buffer h = foreign_handle();
    if (hurray_share(&h, 2, g_contended) != HURRAY_OK) std::abort();
  }
  // The first pass of the loop is a barrier for all threads, so thread 0's
  // setup is visible once inside it.
  hurray_buffer mine{};
  for (auto _ : state) {
    if (mine.release_fn == nullptr) mine = g_contended[state.thread_index()];
    hurray_buffer pair[2];
    if (hurray_share(&mine, 2, pair) != HURRAY_OK) std::abort();
    mine = pair[0];
    hurray_buffer_release(&pair[1]);
  }
  hurray_buffer_release(&mine);
}
BENCHMARK(BM_ConcurrentRelease)->Threads(2)->UseRealTime();

// --- Per-ndim costs. Shape: 32 for the first 4 dimensions, 2 for
// the next 12, 1 after that; compact row-major strides. ---------------------
struct NdimTensor {
  int64_t shape[HURRAY_MAX_NDIM];
  int64_t strides[HURRAY_MAX_NDIM];
  int32_t ndim;
  explicit NdimTensor(int32_t n) : ndim(n) {
    for (int32_t k = 0; k < n; ++k) shape[k] = k < 4 ? 32 : (k < 16 ? 2 : 1);
    hurray_bench::compact_strides(n, shape, strides);
  }
  hurray_buffer handle() const {
    return hurray_bench::foreign_handle(ndim, shape, strides, &noop_release, g_storage);
  }
  DLManagedTensorVersioned versioned() const {
    return hurray_bench::foreign_tensor(ndim, const_cast<int64_t *>(shape),
                                        const_cast<int64_t *>(strides), &noop_deleter, g_storage);
  }
};

void BM_NdimImportRelease(benchmark::State &state) {
  NdimTensor nt(static_cast<int32_t>(state.range(0)));
  DLManagedTensorVersioned t = nt.versioned();
  for (auto _ : state) {
    hurray_buffer h;
    if (hurray_from_dlpack_versioned(&t, HURRAY_IMPORT_DEFAULT, &h) != HURRAY_OK) std::abort();
    benchmark::DoNotOptimize(h);
    hurray_buffer_release(&h);
  }
}
BENCHMARK(BM_NdimImportRelease)->Arg(1)->Arg(4)->Arg(16)->Arg(64);

void BM_NdimExportDelete(benchmark::State &state) {
  NdimTensor nt(static_cast<int32_t>(state.range(0)));
  for (auto _ : state) {
    hurray_buffer h = nt.handle();
    DLManagedTensorVersioned *t = nullptr;
    if (hurray_to_dlpack_versioned(&h, &t) != HURRAY_OK) std::abort();
    benchmark::DoNotOptimize(t);
    t->deleter(t);
  }
}
BENCHMARK(BM_NdimExportDelete)->Arg(1)->Arg(4)->Arg(16)->Arg(64);

// Export keeping a reference: share to 2, export one, delete it, release the
// other (the first share allocates the control block).
void BM_NdimShare2Export(benchmark::State &state) {
  NdimTensor nt(static_cast<int32_t>(state.range(0)));
  for (auto _ : state) {
    hurray_buffer h = nt.handle();
    hurray_buffer two[2];
    if (hurray_share(&h, 2, two) != HURRAY_OK) std::abort();
    DLManagedTensorVersioned *t = nullptr;
    if (hurray_to_dlpack_versioned(&two[0], &t) != HURRAY_OK) std::abort();
    benchmark::DoNotOptimize(t);
    t->deleter(t);
    hurray_buffer_release(&two[1]);
  }
}
BENCHMARK(BM_NdimShare2Export)->Arg(1)->Arg(4)->Arg(16)->Arg(64);

// Import, share, export, deleter: the export cannot unwrap (shared handle).
void BM_NdimRoundTripNoUnwrap(benchmark::State &state) {
  NdimTensor nt(static_cast<int32_t>(state.range(0)));
  DLManagedTensorVersioned src = nt.versioned();
  for (auto _ : state) {
    hurray_buffer h;
    if (hurray_from_dlpack_versioned(&src, HURRAY_IMPORT_DEFAULT, &h) != HURRAY_OK) std::abort();
    hurray_buffer two[2];
    if (hurray_share(&h, 2, two) != HURRAY_OK) std::abort();
    DLManagedTensorVersioned *t = nullptr;
    if (hurray_to_dlpack_versioned(&two[0], &t) != HURRAY_OK) std::abort();
    benchmark::DoNotOptimize(t);
    t->deleter(t);
    hurray_buffer_release(&two[1]);
  }
}
BENCHMARK(BM_NdimRoundTripNoUnwrap)->Arg(1)->Arg(4)->Arg(16)->Arg(64);

void BM_NdimValidate(benchmark::State &state) {
  NdimTensor nt(static_cast<int32_t>(state.range(0)));
  hurray_buffer h = nt.handle();
  for (auto _ : state) {
    benchmark::DoNotOptimize(&h);
    if (hurray_buffer_validate(&h) != HURRAY_OK) std::abort();
  }
}
BENCHMARK(BM_NdimValidate)->Arg(1)->Arg(4)->Arg(16)->Arg(64);

// A first share to one consumer of a shared handle's re-share: share(1) of a
// handle that is already shared (a move) and share(2) of a shared handle
// (one atomic add) with one release to keep the count steady.
void BM_ReshareOne(benchmark::State &state) {
  hurray_buffer h = foreign_handle();
  hurray_buffer seed[2];
  if (hurray_share(&h, 2, seed) != HURRAY_OK) std::abort();
  for (auto _ : state) {
    hurray_buffer two[2];
    if (hurray_share(&seed[0], 2, two) != HURRAY_OK) std::abort();
    seed[0] = two[0];
    hurray_buffer_release(&two[1]);
  }
  hurray_buffer_release(&seed[0]);
  hurray_buffer_release(&seed[1]);
}
BENCHMARK(BM_ReshareOne);

// Batched conversion (c-ffi §5.1) of N tensors of ndim 2: one batched call
// and the N releases (deleters), beside a loop of N single calls doing the
// same work. The "per_tensor" counter is the iteration time divided by N.
constexpr int kMaxBatch = 32;

void per_tensor(benchmark::State &state, size_t n) {
  state.counters["per_tensor"] =
      benchmark::Counter(static_cast<double>(n), benchmark::Counter::kIsIterationInvariantRate |
                                                     benchmark::Counter::kInvert);
}

struct ImportBatch {
  DLManagedTensorVersioned tensors[kMaxBatch];
  DLManagedTensorVersioned *ts[kMaxBatch];
  hurray_buffer out[kMaxBatch];
  ImportBatch() {
    for (int i = 0; i < kMaxBatch; ++i) {
      tensors[i] = hurray_bench::foreign_tensor(2, g_shape, g_strides, &noop_deleter, g_storage);
      ts[i] = &tensors[i];
    }
  }
};

void BM_BatchImportRelease(benchmark::State &state) {
  const auto n = static_cast<size_t>(state.range(0));
  ImportBatch b;
  for (auto _ : state) {
    if (hurray_from_dlpack_versioned_n(b.ts, n, HURRAY_IMPORT_DEFAULT, b.out, nullptr) !=
        HURRAY_OK) {
      std::abort();
    }
    benchmark::DoNotOptimize(b.out);
    for (size_t i = 0; i < n; ++i) hurray_buffer_release(&b.out[i]);
  }
  per_tensor(state, n);
}
BENCHMARK(BM_BatchImportRelease)->Arg(1)->Arg(4)->Arg(8)->Arg(32);

void BM_LoopImportRelease(benchmark::State &state) {
  const auto n = static_cast<size_t>(state.range(0));
  ImportBatch b;
  for (auto _ : state) {
    for (size_t i = 0; i < n; ++i) {
      if (hurray_from_dlpack_versioned(b.ts[i], HURRAY_IMPORT_DEFAULT, &b.out[i]) != HURRAY_OK) {
        std::abort();
      }
    }
    benchmark::DoNotOptimize(b.out);
    for (size_t i = 0; i < n; ++i) hurray_buffer_release(&b.out[i]);
  }
  per_tensor(state, n);
}
BENCHMARK(BM_LoopImportRelease)->Arg(1)->Arg(4)->Arg(8)->Arg(32);

void BM_BatchExportDelete(benchmark::State &state) {
  const auto n = static_cast<size_t>(state.range(0));
  hurray_buffer hs[kMaxBatch];
  DLManagedTensorVersioned *ts[kMaxBatch];
  for (auto _ : state) {
    for (size_t i = 0; i < n; ++i) hs[i] = foreign_handle();
    if (hurray_to_dlpack_versioned_n(hs, n, ts, nullptr) != HURRAY_OK) std::abort();
    benchmark::DoNotOptimize(ts);
    for (size_t i = 0; i < n; ++i) ts[i]->deleter(ts[i]);
  }
  per_tensor(state, n);
}
BENCHMARK(BM_BatchExportDelete)->Arg(1)->Arg(4)->Arg(8)->Arg(32);

void BM_LoopExportDelete(benchmark::State &state) {
  const auto n = static_cast<size_t>(state.range(0));
  hurray_buffer hs[kMaxBatch];
  DLManagedTensorVersioned *ts[kMaxBatch];
  for (auto _ : state) {
    for (size_t i = 0; i < n; ++i) hs[i] = foreign_handle();
    for (size_t i = 0; i < n; ++i) {
      if (hurray_to_dlpack_versioned(&hs[i], &ts[i]) != HURRAY_OK) std::abort();
    }
    benchmark::DoNotOptimize(ts);
    for (size_t i = 0; i < n; ++i) ts[i]->deleter(ts[i]);
  }
  per_tensor(state, n);
}
BENCHMARK(BM_LoopExportDelete)->Arg(1)->Arg(4)->Arg(8)->Arg(32);

// A view of a foreign handle and its release (one block from the cache, the
// exact checks of the source and the view), beside a share to 1 (a move).
void BM_ViewAndRelease(benchmark::State &state) {
  const int64_t shape[1] = {512};
  hurray_view_desc d{};
  d.byte_offset = 4096;
  d.dtype = {kDLFloat, 32, 1};
  d.ndim = 1;
  d.shape = shape;
  for (auto _ : state) {
    hurray_buffer h = foreign_handle();
    hurray_buffer v;
    if (hurray_view(&h, &d, &v) != HURRAY_OK) std::abort();
    benchmark::DoNotOptimize(v);
    hurray_buffer_release(&v);
  }
}
BENCHMARK(BM_ViewAndRelease);

}  // namespace

BENCHMARK_MAIN();
