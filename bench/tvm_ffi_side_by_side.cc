// SPDX-License-Identifier: Apache-2.0
// libhurray beside tvm-ffi's C API doing the same work, in one process.
//
// Run it through bench/side_by_side.py, which builds this Release, runs it
// with interleaved repetitions and prints the ratio table (docs/performance.md,
// "Side by side with tvm-ffi"). Benchmarks are named op/impl/param:
//   impl   "ours" (libhurray), "tvm_ffi" (libtvm_ffi.so's C API) or "floor"
//   param  ndim:D (tensor rank) or n:N (consumers, or tensors of a batch,
//          at ndim 4); "ours_loop" is ours as n single calls
// The producers' deleters and release functions only count calls, so each
// case measures the libraries' own work. Before any timing, main() runs every
// case once and checks that each deleter/release ran exactly when it should
// (so, e.g., "export keeping a reference" really is not an unwrap).
//
// tvm_ffi/c_api.h comes first: it brings upstream dlpack/dlpack.h, whose
// include guard is the one hurray/dlpack.h uses, so both libraries are seen
// through one set of DLPack declarations (the layouts are the same, which
// the external-dlpack stage of tests/run_all.sh checks).
#include <tvm/ffi/c_api.h>

#include <benchmark/benchmark.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "bench_tensors.h"
#include "hurray/hurray.h"

namespace {

constexpr int kNdims[] = {1, 4, 16, 64};
constexpr int kFanOutNdim = 4;
constexpr size_t kFanOuts[] = {1, 8, 64, 1024};
constexpr size_t kMaxFanOut = 1024;

// Shapes of ordinary tensors: extent 2 in the last min(ndim, 16) dimensions,
// 1 elsewhere (at most 65536 elements), compact row-major strides.
struct Layout {
  int64_t shape[HURRAY_MAX_NDIM];
  int64_t strides[HURRAY_MAX_NDIM];
};
Layout g_layout[HURRAY_MAX_NDIM + 1];
float g_storage[65536];

void init_layouts() {
  for (int nd = 1; nd <= HURRAY_MAX_NDIM; ++nd) {
    for (int i = 0; i < nd; ++i) g_layout[nd].shape[i] = (nd - 1 - i) < 16 ? 2 : 1;
    hurray_bench::compact_strides(nd, g_layout[nd].shape, g_layout[nd].strides);
  }
}

// Calls of the producers' callbacks (single-threaded, so plain counters).
long g_foreign_releases = 0;
long g_source_deletes = 0;
void count_release(void *) { ++g_foreign_releases; }
void count_delete(DLManagedTensorVersioned *) { ++g_source_deletes; }

[[noreturn]] void fail(const char *what) {
  std::fprintf(stderr, "side_by_side: %s failed (%s)\n", what, hurray_last_error());
  std::abort();
}

// A foreign producer's handle of rank nd.
hurray_buffer foreign_handle(int nd) {
  return hurray_bench::foreign_handle(nd, g_layout[nd].shape, g_layout[nd].strides, &count_release,
                                      g_storage);
}

// A foreign producer's DLPack tensor of rank nd (reusable: its deleter only
// counts).
DLManagedTensorVersioned foreign_tensor(int nd) {
  return hurray_bench::foreign_tensor(nd, g_layout[nd].shape, g_layout[nd].strides, &count_delete,
                                      g_storage);
}

// A tvm-ffi Tensor owning foreign_tensor(nd), kept by the caller.
TVMFFIObjectHandle tvm_tensor(DLManagedTensorVersioned *src) {
  TVMFFIObjectHandle obj = nullptr;
  if (TVMFFITensorFromDLPackVersioned(src, 0, 0, &obj) != 0)
    fail("TVMFFITensorFromDLPackVersioned");
  return obj;
}

// ---------------------------------------------------------------------------
// One iteration of each case. Each returns nothing and leaves no reference
// behind except where its comment says so.
// ---------------------------------------------------------------------------

// import + release: a DLPack tensor in, dropped again (its deleter runs).
inline void ours_import_release(DLManagedTensorVersioned *t) {
  hurray_buffer h;
  if (hurray_from_dlpack_versioned(t, HURRAY_IMPORT_DEFAULT, &h) != HURRAY_OK) fail("import");
  benchmark::DoNotOptimize(h);
  hurray_buffer_release(&h);
}
inline void tvm_import_release(DLManagedTensorVersioned *t) {
  TVMFFIObjectHandle obj = tvm_tensor(t);
  benchmark::DoNotOptimize(obj);
  TVMFFIObjectDecRef(obj);
}

// export + deleter, consuming the handle (the foreign release runs).
inline void ours_export_delete(int nd) {
  hurray_buffer h = foreign_handle(nd);
  DLManagedTensorVersioned *t = nullptr;
  if (hurray_to_dlpack_versioned(&h, &t) != HURRAY_OK) fail("export");
  benchmark::DoNotOptimize(t);
  t->deleter(t);
}
// tvm-ffi's export never consumes: it adds a reference to a Tensor the caller
// keeps. This one case is the tvm-ffi side of every export row.
inline void tvm_export_delete(TVMFFIObjectHandle obj) {
  DLManagedTensorVersioned *t = nullptr;
  if (TVMFFITensorToDLPackVersioned(obj, &t) != 0) fail("TVMFFITensorToDLPackVersioned");
  benchmark::DoNotOptimize(t);
  t->deleter(t);
}

// export keeping a reference, steady state: *held is already shared; share it
// to 2, keep one, export the other, run its deleter.
inline void ours_export_keep(hurray_buffer *held) {
  hurray_buffer pair[2];
  if (hurray_share(held, 2, pair) != HURRAY_OK) fail("share");
  *held = pair[0];
  DLManagedTensorVersioned *t = nullptr;
  if (hurray_to_dlpack_versioned(&pair[1], &t) != HURRAY_OK) fail("export");
  benchmark::DoNotOptimize(t);
  t->deleter(t);
}

// export keeping a reference, first time: a fresh foreign handle shared to 2
// (the control block's allocation), one exported and deleted, the other
// released (the foreign release runs).
inline void ours_export_keep_first(int nd) {
  hurray_buffer h = foreign_handle(nd);
  hurray_buffer pair[2];
  if (hurray_share(&h, 2, pair) != HURRAY_OK) fail("share");
  DLManagedTensorVersioned *t = nullptr;
  if (hurray_to_dlpack_versioned(&pair[1], &t) != HURRAY_OK) fail("export");
  benchmark::DoNotOptimize(t);
  t->deleter(t);
  hurray_buffer_release(&pair[0]);
}

// The round trip no unwrap can shortcut (what a Python Buffer does): import,
// share to 2 (keep one, export one), the export's deleter, the kept one's
// release; the source's deleter runs once.
inline void ours_roundtrip(DLManagedTensorVersioned *src) {
  hurray_buffer h;
  if (hurray_from_dlpack_versioned(src, HURRAY_IMPORT_DEFAULT, &h) != HURRAY_OK) fail("import");
  hurray_buffer pair[2];
  if (hurray_share(&h, 2, pair) != HURRAY_OK) fail("share");
  DLManagedTensorVersioned *t = nullptr;
  if (hurray_to_dlpack_versioned(&pair[1], &t) != HURRAY_OK) fail("export");
  benchmark::DoNotOptimize(t);
  t->deleter(t);
  hurray_buffer_release(&pair[0]);
}
inline void tvm_roundtrip(DLManagedTensorVersioned *src) {
  TVMFFIObjectHandle obj = tvm_tensor(src);
  DLManagedTensorVersioned *t = nullptr;
  if (TVMFFITensorToDLPackVersioned(obj, &t) != 0) fail("TVMFFITensorToDLPackVersioned");
  benchmark::DoNotOptimize(t);
  t->deleter(t);
  TVMFFIObjectDecRef(obj);
}

// Fan-out to n consumers, each released: ours from a fresh foreign handle
// (first share: one control block, the foreign release at the end), ours
// from an already shared handle (re-share: keep out[0] as the held handle,
// release the other n - 1), tvm-ffi n IncRef + n DecRef on a kept Tensor.
hurray_buffer g_out[kMaxFanOut];
inline void ours_fanout(int nd, size_t n) {
  hurray_buffer h = foreign_handle(nd);
  if (hurray_share(&h, n, g_out) != HURRAY_OK) fail("share");
  for (size_t i = 0; i < n; ++i) hurray_buffer_release(&g_out[i]);
}
inline void ours_reshare(hurray_buffer *held, size_t n) {
  if (hurray_share(held, n, g_out) != HURRAY_OK) fail("share");
  for (size_t i = 1; i < n; ++i) hurray_buffer_release(&g_out[i]);
  *held = g_out[0];
}
TVMFFIObjectHandle g_refs[kMaxFanOut];
inline void tvm_fanout(TVMFFIObjectHandle obj, size_t n) {
  for (size_t i = 0; i < n; ++i) {
    TVMFFIObjectIncRef(obj);
    g_refs[i] = obj;
  }
  benchmark::ClobberMemory();
  for (size_t i = 0; i < n; ++i) TVMFFIObjectDecRef(g_refs[i]);
}

// Batched conversion of n tensors of rank kFanOutNdim (c-ffi §5.1): our one
// batched call, our loop of n single calls, tvm-ffi's loop of n single calls
// (tvm-ffi has no batched form), each with the n releases / deleters.
constexpr size_t kBatches[] = {1, 4, 8, 32};
constexpr size_t kMaxBatch = 32;
DLManagedTensorVersioned g_batch_src[kMaxBatch];
DLManagedTensorVersioned *g_batch_ts[kMaxBatch];
hurray_buffer g_batch_h[kMaxBatch];
DLManagedTensorVersioned *g_batch_out[kMaxBatch];
TVMFFIObjectHandle g_batch_obj[kMaxBatch];
void init_batch() {
  for (size_t i = 0; i < kMaxBatch; ++i) {
    g_batch_src[i] = foreign_tensor(kFanOutNdim);
    g_batch_ts[i] = &g_batch_src[i];
  }
}
inline void ours_batch_import_release(size_t n) {
  if (hurray_from_dlpack_versioned_n(g_batch_ts, n, HURRAY_IMPORT_DEFAULT, g_batch_h, nullptr) !=
      HURRAY_OK) {
    fail("batched import");
  }
  benchmark::DoNotOptimize(g_batch_h);
  for (size_t i = 0; i < n; ++i) hurray_buffer_release(&g_batch_h[i]);
}
inline void ours_loop_import_release(size_t n) {
  for (size_t i = 0; i < n; ++i) {
    if (hurray_from_dlpack_versioned(g_batch_ts[i], HURRAY_IMPORT_DEFAULT, &g_batch_h[i]) !=
        HURRAY_OK) {
      fail("import");
    }
  }
  benchmark::DoNotOptimize(g_batch_h);
  for (size_t i = 0; i < n; ++i) hurray_buffer_release(&g_batch_h[i]);
}
inline void tvm_loop_import_release(size_t n) {
  for (size_t i = 0; i < n; ++i) g_batch_obj[i] = tvm_tensor(g_batch_ts[i]);
  benchmark::DoNotOptimize(g_batch_obj);
  for (size_t i = 0; i < n; ++i) TVMFFIObjectDecRef(g_batch_obj[i]);
}
inline void ours_batch_export_delete(size_t n) {
  for (size_t i = 0; i < n; ++i) g_batch_h[i] = foreign_handle(kFanOutNdim);
  if (hurray_to_dlpack_versioned_n(g_batch_h, n, g_batch_out, nullptr) != HURRAY_OK) {
    fail("batched export");
  }
  benchmark::DoNotOptimize(g_batch_out);
  for (size_t i = 0; i < n; ++i) g_batch_out[i]->deleter(g_batch_out[i]);
}
inline void ours_loop_export_delete(size_t n) {
  for (size_t i = 0; i < n; ++i) g_batch_h[i] = foreign_handle(kFanOutNdim);
  for (size_t i = 0; i < n; ++i) {
    if (hurray_to_dlpack_versioned(&g_batch_h[i], &g_batch_out[i]) != HURRAY_OK) fail("export");
  }
  benchmark::DoNotOptimize(g_batch_out);
  for (size_t i = 0; i < n; ++i) g_batch_out[i]->deleter(g_batch_out[i]);
}
// tvm-ffi's export adds a reference to Tensors the caller keeps (as in the
// export rows above): n exports of n kept Tensors, then the n deleters.
inline void tvm_loop_export_delete(size_t n) {
  for (size_t i = 0; i < n; ++i) {
    if (TVMFFITensorToDLPackVersioned(g_batch_obj[i], &g_batch_out[i]) != 0) {
      fail("TVMFFITensorToDLPackVersioned");
    }
  }
  benchmark::DoNotOptimize(g_batch_out);
  for (size_t i = 0; i < n; ++i) g_batch_out[i]->deleter(g_batch_out[i]);
}

// ---------------------------------------------------------------------------
// Startup check: every case once, counting the producers' callbacks.
// ---------------------------------------------------------------------------
void expect(long got, long want, const char *what) {
  if (got != want) {
    std::fprintf(stderr, "side_by_side: check '%s': %ld callbacks, expected %ld\n", what, got,
                 want);
    std::exit(1);
  }
}

void check_cases() {
  for (int nd : kNdims) {
    DLManagedTensorVersioned src = foreign_tensor(nd);
    g_source_deletes = g_foreign_releases = 0;
    ours_import_release(&src);
    expect(g_source_deletes, 1, "ours import+release");
    tvm_import_release(&src);
    expect(g_source_deletes, 2, "tvm import+release");
    ours_export_delete(nd);
    expect(g_foreign_releases, 1, "ours export+deleter");
    ours_export_keep_first(nd);
    expect(g_foreign_releases, 2, "ours export keeping a reference (first)");
    hurray_buffer held = foreign_handle(nd), pair[2];
    if (hurray_share(&held, 2, pair) != HURRAY_OK) fail("share");
    hurray_buffer_release(&pair[1]);
    held = pair[0];
    ours_export_keep(&held);
    expect(g_foreign_releases, 2, "ours export keeping a reference (kept alive)");
    hurray_buffer_release(&held);
    expect(g_foreign_releases, 3, "ours export keeping a reference (last release)");
    TVMFFIObjectHandle obj = tvm_tensor(&src);
    tvm_export_delete(obj);
    expect(g_source_deletes, 2, "tvm export+deleter (kept alive)");
    TVMFFIObjectDecRef(obj);
    expect(g_source_deletes, 3, "tvm export+deleter (last reference)");
    ours_roundtrip(&src);
    expect(g_source_deletes, 4, "ours round trip");
    tvm_roundtrip(&src);
    expect(g_source_deletes, 5, "tvm round trip");
  }
  g_source_deletes = g_foreign_releases = 0;
  ours_fanout(kFanOutNdim, 64);
  expect(g_foreign_releases, 1, "ours fan-out");
  DLManagedTensorVersioned src = foreign_tensor(kFanOutNdim);
  TVMFFIObjectHandle obj = tvm_tensor(&src);
  tvm_fanout(obj, 64);
  expect(g_source_deletes, 0, "tvm fan-out");
  TVMFFIObjectDecRef(obj);
  expect(g_source_deletes, 1, "tvm fan-out (last reference)");
  g_source_deletes = g_foreign_releases = 0;
  ours_batch_import_release(8);
  expect(g_source_deletes, 8, "ours batched import+release");
  ours_loop_import_release(8);
  expect(g_source_deletes, 16, "ours loop import+release");
  tvm_loop_import_release(8);
  expect(g_source_deletes, 24, "tvm loop import+release");
  ours_batch_export_delete(8);
  expect(g_foreign_releases, 8, "ours batched export+deleter");
  ours_loop_export_delete(8);
  expect(g_foreign_releases, 16, "ours loop export+deleter");
  for (size_t i = 0; i < 8; ++i) g_batch_obj[i] = tvm_tensor(g_batch_ts[i]);
  tvm_loop_export_delete(8);
  expect(g_source_deletes, 24, "tvm loop export+deleter (kept alive)");
  for (size_t i = 0; i < 8; ++i) TVMFFIObjectDecRef(g_batch_obj[i]);
  expect(g_source_deletes, 32, "tvm loop export+deleter (last references)");
}

// ---------------------------------------------------------------------------
// The floor on this machine.
// ---------------------------------------------------------------------------
std::atomic<int64_t> g_count{0};
__attribute__((noinline)) int64_t plus_one(int64_t x) { return x + 1; }

void floor_atomic_add(benchmark::State &state) {
  for (auto _ : state) benchmark::DoNotOptimize(g_count.fetch_add(1, std::memory_order_acq_rel));
}
void floor_malloc_free(benchmark::State &state) {
  for (auto _ : state) {
    void *p = std::malloc(sizeof(DLManagedTensorVersioned) + 16);
    benchmark::DoNotOptimize(p);
    std::free(p);
  }
}
void floor_indirect_call(benchmark::State &state) {
  int64_t (*fn)(int64_t) = &plus_one;
  int64_t x = 0;
  for (auto _ : state) {
    benchmark::DoNotOptimize(fn);  // the compiler cannot see the target
    x = fn(x);
  }
  benchmark::DoNotOptimize(x);
}
void floor_copy80(benchmark::State &state) {
  hurray_buffer a = foreign_handle(1), b{};
  static_assert(sizeof(hurray_buffer) == 80, "hurray_buffer is 80 bytes");
  for (auto _ : state) {
    benchmark::DoNotOptimize(&a);
    std::memcpy(&b, &a, sizeof b);
    benchmark::DoNotOptimize(&b);
    benchmark::ClobberMemory();
  }
}

// ---------------------------------------------------------------------------
// Registration: ours and tvm-ffi's of each case next to each other.
// ---------------------------------------------------------------------------
template <class Fn>
void reg(const std::string &name, Fn fn) {
  benchmark::RegisterBenchmark(name.c_str(), fn);
}

void register_all() {
  for (int nd : kNdims) {
    const std::string p = "/ndim:" + std::to_string(nd);
    reg("import_release/ours" + p, [nd](benchmark::State &s) {
      DLManagedTensorVersioned src = foreign_tensor(nd);
      for (auto _ : s) ours_import_release(&src);
    });
    reg("import_release/tvm_ffi" + p, [nd](benchmark::State &s) {
      DLManagedTensorVersioned src = foreign_tensor(nd);
      for (auto _ : s) tvm_import_release(&src);
    });
    reg("export_delete/ours" + p, [nd](benchmark::State &s) {
      for (auto _ : s) ours_export_delete(nd);
    });
    reg("export_delete/tvm_ffi" + p, [nd](benchmark::State &s) {
      DLManagedTensorVersioned src = foreign_tensor(nd);
      TVMFFIObjectHandle obj = tvm_tensor(&src);
      for (auto _ : s) tvm_export_delete(obj);
      TVMFFIObjectDecRef(obj);
    });
    reg("export_keep/ours" + p, [nd](benchmark::State &s) {
      hurray_buffer held = foreign_handle(nd), pair[2];
      if (hurray_share(&held, 2, pair) != HURRAY_OK) fail("share");
      hurray_buffer_release(&pair[1]);
      held = pair[0];
      for (auto _ : s) ours_export_keep(&held);
      hurray_buffer_release(&held);
    });
    reg("export_keep_first/ours" + p, [nd](benchmark::State &s) {
      for (auto _ : s) ours_export_keep_first(nd);
    });
    reg("roundtrip/ours" + p, [nd](benchmark::State &s) {
      DLManagedTensorVersioned src = foreign_tensor(nd);
      for (auto _ : s) ours_roundtrip(&src);
    });
    reg("roundtrip/tvm_ffi" + p, [nd](benchmark::State &s) {
      DLManagedTensorVersioned src = foreign_tensor(nd);
      for (auto _ : s) tvm_roundtrip(&src);
    });
    reg("validate/ours" + p, [nd](benchmark::State &s) {
      const hurray_buffer h = foreign_handle(nd);
      for (auto _ : s) {
        benchmark::DoNotOptimize(&h);
        if (hurray_buffer_validate(&h) != HURRAY_OK) fail("validate");
      }
    });
  }
  for (size_t n : kFanOuts) {
    const std::string p = "/n:" + std::to_string(n);
    reg("fanout/ours" + p, [n](benchmark::State &s) {
      for (auto _ : s) ours_fanout(kFanOutNdim, n);
    });
    reg("reshare/ours" + p, [n](benchmark::State &s) {
      hurray_buffer held = foreign_handle(kFanOutNdim), pair[2];
      if (hurray_share(&held, 2, pair) != HURRAY_OK) fail("share");
      hurray_buffer_release(&pair[1]);
      held = pair[0];
      for (auto _ : s) ours_reshare(&held, n);
      hurray_buffer_release(&held);
    });
    reg("fanout/tvm_ffi" + p, [n](benchmark::State &s) {
      DLManagedTensorVersioned src = foreign_tensor(kFanOutNdim);
      TVMFFIObjectHandle obj = tvm_tensor(&src);
      for (auto _ : s) tvm_fanout(obj, n);
      TVMFFIObjectDecRef(obj);
    });
  }
  for (size_t n : kBatches) {
    const std::string p = "/n:" + std::to_string(n);
    reg("batch_import_release/ours" + p, [n](benchmark::State &s) {
      for (auto _ : s) ours_batch_import_release(n);
    });
    reg("batch_import_release/ours_loop" + p, [n](benchmark::State &s) {
      for (auto _ : s) ours_loop_import_release(n);
    });
    reg("batch_import_release/tvm_ffi" + p, [n](benchmark::State &s) {
      for (auto _ : s) tvm_loop_import_release(n);
    });
    reg("batch_export_delete/ours" + p, [n](benchmark::State &s) {
      for (auto _ : s) ours_batch_export_delete(n);
    });
    reg("batch_export_delete/ours_loop" + p, [n](benchmark::State &s) {
      for (auto _ : s) ours_loop_export_delete(n);
    });
    reg("batch_export_delete/tvm_ffi" + p, [n](benchmark::State &s) {
      for (size_t i = 0; i < n; ++i) g_batch_obj[i] = tvm_tensor(g_batch_ts[i]);
      for (auto _ : s) tvm_loop_export_delete(n);
      for (size_t i = 0; i < n; ++i) TVMFFIObjectDecRef(g_batch_obj[i]);
    });
  }
  reg("atomic_add/floor", floor_atomic_add);
  reg("malloc_free/floor", floor_malloc_free);
  reg("indirect_call/floor", floor_indirect_call);
  reg("copy80/floor", floor_copy80);
}

// The path of libhurray's wide-rank bound (ndim >= 8) this run takes, by the
// library's rule (src/handle/layout_wide.cc): the widest the CPU has, capped by
// HURRAY_INTERNAL_WIDE_PATH (avx2, scalar), the benchmark hook that lets
// bench/side_by_side.py measure a CPU without AVX-512 on one that has it.
std::string wide_path() {
  const char *cap = std::getenv("HURRAY_INTERNAL_WIDE_PATH");
  const int limit = cap == nullptr                    ? 2
                    : std::strcmp(cap, "scalar") == 0 ? 0
                    : std::strcmp(cap, "avx2") == 0   ? 1
                                                      : 2;
#if defined(__x86_64__)
  __builtin_cpu_init();
  if (limit >= 2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512cd")) {
    return "avx512";
  }
  if (limit >= 1 && __builtin_cpu_supports("avx2")) return "avx2";
#else
  (void)limit;
#endif
  return "scalar";
}

}  // namespace

int main(int argc, char **argv) {
  init_layouts();
  init_batch();
  check_cases();
  register_all();
  benchmark::AddCustomContext("hurray_wide_path", wide_path());
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
