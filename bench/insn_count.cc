// SPDX-License-Identifier: Apache-2.0
// Instruction counts per operation, for callgrind (docs/performance-history.md,
// "Validation where it belongs"): run one operation `reps` times inside
// run_op, which callgrind collects alone:
//
//   valgrind --tool=callgrind --toggle-collect=run_op --callgrind-out-file=/dev/null \
//       build/release/bench/hurray_insn_count OP NDIM REPS
//
// bench/insn_count.sh runs each case at 1000 and 2000 repetitions and prints
// the difference / 1000 (start-up and the first calls excluded). The
// driver's own work (building the handle or tensor, about 25-40
// instructions) is included. OPs: import, export, share2, roundtrip,
// validate, reshare2, fanout8, share1, keep (re-share 2 of a shared handle,
// export one: "export keeping a reference"). Tensor: float32, extent 32 in the
// first 4 dimensions, 2 in the next 12, 1 after that, compact strides (the
// tensor of BM_Ndim* in bench/core_bench.cc).
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "bench_tensors.h"
#include "hurray/hurray.h"

namespace {

int64_t g_shape[HURRAY_MAX_NDIM];
int64_t g_strides[HURRAY_MAX_NDIM];
float g_storage[16];
long g_calls = 0;

void count_release(void *) { ++g_calls; }
void count_delete(DLManagedTensorVersioned *) { ++g_calls; }

void init_layout(int nd) {
  for (int i = 0; i < nd; ++i) g_shape[i] = i < 4 ? 32 : i < 16 ? 2 : 1;
  hurray_bench::compact_strides(nd, g_shape, g_strides);
}

hurray_buffer foreign_handle(int nd) {
  return hurray_bench::foreign_handle(nd, g_shape, g_strides, &count_release, g_storage);
}

DLManagedTensorVersioned g_tensor;
hurray_buffer g_held;
hurray_buffer g_out[8];

void check(int32_t st) {
  if (st != HURRAY_OK) {
    std::fprintf(stderr, "insn_count: %s\n", hurray_last_error());
    std::exit(1);
  }
}

enum Op { kImport, kExport, kShare2, kRoundTrip, kValidate, kReshare2, kFanOut8, kShare1, kKeep };

__attribute__((noinline)) void run_op(Op op, int nd, long reps) {
  for (long r = 0; r < reps; ++r) {
    switch (op) {
      case kImport: {
        hurray_buffer h;
        check(hurray_from_dlpack_versioned(&g_tensor, HURRAY_IMPORT_DEFAULT, &h));
        hurray_buffer_release(&h);
        break;
      }
      case kExport: {
        hurray_buffer h = foreign_handle(nd);
        DLManagedTensorVersioned *t;
        check(hurray_to_dlpack_versioned(&h, &t));
        t->deleter(t);
        break;
      }
      case kShare2: {
        hurray_buffer h = foreign_handle(nd), pair[2];
        check(hurray_share(&h, 2, pair));
        DLManagedTensorVersioned *t;
        check(hurray_to_dlpack_versioned(&pair[1], &t));
        t->deleter(t);
        hurray_buffer_release(&pair[0]);
        break;
      }
      case kRoundTrip: {
        hurray_buffer h, pair[2];
        check(hurray_from_dlpack_versioned(&g_tensor, HURRAY_IMPORT_DEFAULT, &h));
        check(hurray_share(&h, 2, pair));
        DLManagedTensorVersioned *t;
        check(hurray_to_dlpack_versioned(&pair[1], &t));
        t->deleter(t);
        hurray_buffer_release(&pair[0]);
        break;
      }
      case kValidate: {
        hurray_buffer h = foreign_handle(nd);
        check(hurray_buffer_validate(&h));
        break;
      }
      case kReshare2: {
        hurray_buffer pair[2];
        check(hurray_share(&g_held, 2, pair));
        g_held = pair[0];
        hurray_buffer_release(&pair[1]);
        break;
      }
      case kFanOut8: {
        hurray_buffer h = foreign_handle(nd);
        check(hurray_share(&h, 8, g_out));
        for (auto &o : g_out) hurray_buffer_release(&o);
        break;
      }
      case kShare1: {
        hurray_buffer h = foreign_handle(nd), one;
        check(hurray_share(&h, 1, &one));
        hurray_buffer_release(&one);
        break;
      }
      case kKeep: {  // export keeping a reference: re-share 2, keep one, export one
        hurray_buffer pair[2];
        check(hurray_share(&g_held, 2, pair));
        g_held = pair[0];
        DLManagedTensorVersioned *t;
        check(hurray_to_dlpack_versioned(&pair[1], &t));
        t->deleter(t);
        break;
      }
    }
  }
}

}  // namespace

int main(int argc, char **argv) {
  static const char *const kNames[] = {"import",   "export",  "share2", "roundtrip", "validate",
                                       "reshare2", "fanout8", "share1", "keep"};
  if (argc != 4) {
    std::fprintf(stderr, "usage: %s OP NDIM REPS\n", argv[0]);
    return 2;
  }
  int op = -1;
  for (int i = 0; i < 9; ++i) {
    if (std::strcmp(argv[1], kNames[i]) == 0) op = i;
  }
  const int nd = std::atoi(argv[2]);
  const long reps = std::atol(argv[3]);
  if (op < 0 || nd < 1 || nd > HURRAY_MAX_NDIM || reps < 0) {
    std::fprintf(stderr, "insn_count: bad arguments\n");
    return 2;
  }
  init_layout(nd);
  g_tensor = hurray_bench::foreign_tensor(nd, g_shape, g_strides, &count_delete, g_storage);
  g_held = foreign_handle(nd);
  hurray_buffer pair[2];
  check(hurray_share(&g_held, 2, pair));  // a shared handle for reshare2
  hurray_buffer_release(&pair[1]);
  g_held = pair[0];
  // Warm: first calls (lazy binding, the block cache's first put) excluded.
  run_op(static_cast<Op>(op), nd, 3);
  run_op(static_cast<Op>(op), nd, reps);
  hurray_buffer_release(&g_held);
  return 0;
}
