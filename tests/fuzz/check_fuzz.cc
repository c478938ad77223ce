// SPDX-License-Identifier: Apache-2.0
// libFuzzer target of the checking mode (docs/impl/fuzzing.md, "The
// checking mode"): each input is a program of handle operations on eight
// slots, where a slot may hold a copy of another slot's handle, so the
// program releases, shares, exports and copies references that are live,
// already released or already consumed, in any order. A model says for each
// step what must happen: which producer is released (exactly once, when its
// last reference goes), which step is refused with HURRAY_ERR_RELEASED, and
// how many double releases the checker counts. ASan and UBSan see the
// checker's records, its chunked index and its ring of ended references.
#include <hurray/hurray.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "fuzz_check.h"

namespace {

constexpr int kSlots = 8;
constexpr size_t kMaxRefs = 256;

// One producer: a DLPack tensor whose deleter counts, or a foreign handle
// whose release counts.
struct Source {
  int released = 0;
  int live_refs = 0;      // references the model says are live
  bool countable = true;  // false: libhurray's own memory (a copy)
};

// One reference libhurray handed out (a tracked handle), and the value it
// was handed out as (to release it at the end).
struct Ref {
  int source;
  bool live;
  hurray_buffer value;
};

struct World {
  std::vector<Source> sources;
  std::vector<Ref> refs;
  int slot[kSlots];  // a ref index, or -1
  hurray_buffer value[kSlots];
  uint64_t doubles = 0;  // double releases the model expects
};

int64_t g_shape[2] = {2, 3};
int64_t g_strides[2] = {3, 1};
float g_data[6];

struct Tensor {
  DLManagedTensorVersioned t;
  World *world;
  int source;
};

void count_deleter(DLManagedTensorVersioned *t) {
  auto *x = reinterpret_cast<Tensor *>(t);
  ++x->world->sources[x->source].released;
  delete x;
}

struct ForeignCtx {
  World *world;
  int source;
};

void count_release(void *user_data) {
  auto *c = static_cast<ForeignCtx *>(user_data);
  ++c->world->sources[c->source].released;
  delete c;
}

uint64_t checker_doubles() {
  hurray_check_state s;
  std::memset(&s, 0, sizeof s);
  s.struct_size = sizeof s;
  FUZZ_CHECK(hurray_check_get_state(&s) == HURRAY_OK, "get_state failed");
  return s.double_releases;
}

uint64_t checker_live() {
  hurray_check_state s;
  std::memset(&s, 0, sizeof s);
  s.struct_size = sizeof s;
  FUZZ_CHECK(hurray_check_get_state(&s) == HURRAY_OK, "get_state failed");
  return s.live;
}

// Puts a new live reference of `source` into slot `k`.
void put(World &w, int k, int source, const hurray_buffer &h) {
  FUZZ_CHECK(w.refs.size() < kMaxRefs * 4, "too many refs");
  w.refs.push_back(Ref{source, true, h});
  w.slot[k] = static_cast<int>(w.refs.size() - 1);
  w.value[k] = h;
  ++w.sources[source].live_refs;
}

int new_source(World &w) {
  w.sources.push_back(Source{});
  return static_cast<int>(w.sources.size() - 1);
}

// The reference in slot k ends (released or consumed): true when it was
// live. The producer's release is then due when it was the last one.
bool end_ref(World &w, int k) {
  Ref &r = w.refs[static_cast<size_t>(w.slot[k])];
  if (!r.live) return false;
  r.live = false;
  --w.sources[r.source].live_refs;
  return true;
}

void op_import(World &w, int k) {
  auto *x = new Tensor{};
  x->world = &w;
  x->source = new_source(w);
  x->t.version = DLPackVersion{1, 3};
  x->t.deleter = &count_deleter;
  x->t.dl_tensor.data = g_data;
  x->t.dl_tensor.device = DLDevice{kDLCPU, 0};
  x->t.dl_tensor.ndim = 2;
  x->t.dl_tensor.dtype = DLDataType{kDLFloat, 32, 1};
  x->t.dl_tensor.shape = g_shape;
  x->t.dl_tensor.strides = g_strides;
  hurray_buffer h;
  FUZZ_CHECK(hurray_from_dlpack_versioned(&x->t, 0, &h) == HURRAY_OK, "import failed");
  put(w, k, x->source, h);
}

void op_foreign(World &w, int k) {
  const int source = new_source(w);
  hurray_buffer h{};
  h.version = HURRAY_BUFFER_VERSION;
  h.release_fn = &count_release;
  h.user_data = new ForeignCtx{&w, source};
  h.data = g_data;
  h.device = hurray_device{HURRAY_DEVICE_CPU, 0};
  h.dtype = hurray_dtype{kDLFloat, 32, 1};
  h.ndim = 2;
  h.shape = g_shape;
  h.strides = g_strides;
  hurray_buffer out;
  FUZZ_CHECK(hurray_share(&h, 1, &out) == HURRAY_OK, "share of a foreign handle failed");
  put(w, k, source, out);
}

void op_release(World &w, int k) {
  if (w.slot[k] < 0) return;
  const bool live = end_ref(w, k);
  if (!live) ++w.doubles;
  FUZZ_CHECK(hurray_buffer_release(&w.value[k]) == HURRAY_OK, "release failed");
  w.slot[k] = -1;
}

void op_share(World &w, int k, int n) {
  if (w.slot[k] < 0) return;
  const int source = w.refs[static_cast<size_t>(w.slot[k])].source;
  hurray_buffer out[4];
  hurray_buffer before = w.value[k];
  const int32_t st = hurray_share(&w.value[k], static_cast<size_t>(n), out);
  if (!end_ref(w, k)) {
    ++w.doubles;
    FUZZ_CHECK(st == HURRAY_ERR_RELEASED, "share of a released handle: %s", hurray_status_name(st));
    FUZZ_CHECK(std::memcmp(&before, &w.value[k], sizeof before) == 0, "failed share changed src");
    return;
  }
  FUZZ_CHECK(st == HURRAY_OK, "share failed: %s", hurray_status_name(st));
  FUZZ_CHECK(w.value[k].release_fn == nullptr, "share did not clear src");
  w.slot[k] = -1;
  for (int i = 0; i < n; ++i) put(w, (k + i) % kSlots, source, out[i]);
}

void op_export(World &w, int k, bool legacy, bool reimport) {
  if (w.slot[k] < 0) return;
  const int source = w.refs[static_cast<size_t>(w.slot[k])].source;
  DLManagedTensorVersioned *tv = nullptr;
  DLManagedTensor *tl = nullptr;
  const int32_t st =
      legacy ? hurray_to_dlpack(&w.value[k], &tl) : hurray_to_dlpack_versioned(&w.value[k], &tv);
  if (!end_ref(w, k)) {
    ++w.doubles;
    FUZZ_CHECK(st == HURRAY_ERR_RELEASED, "export of a released handle: %s",
               hurray_status_name(st));
    FUZZ_CHECK(tv == nullptr && tl == nullptr, "a refused export wrote *out");
    return;
  }
  FUZZ_CHECK(st == HURRAY_OK, "export failed: %s", hurray_status_name(st));
  w.slot[k] = -1;
  if (reimport) {
    hurray_buffer h;
    const int32_t rst =
        legacy ? hurray_from_dlpack(tl, 0, &h) : hurray_from_dlpack_versioned(tv, 0, &h);
    FUZZ_CHECK(rst == HURRAY_OK, "re-import failed: %s", hurray_status_name(rst));
    put(w, k, source, h);
  } else if (legacy) {
    tl->deleter(tl);
  } else {
    tv->deleter(tv);
  }
}

void op_copy(World &w, int k, int dst) {
  if (w.slot[k] < 0) return;
  hurray_buffer c;
  const int32_t st = hurray_copy(&w.value[k], hurray_device{HURRAY_DEVICE_CPU, 0}, &c);
  if (!w.refs[static_cast<size_t>(w.slot[k])].live) {
    FUZZ_CHECK(st == HURRAY_ERR_RELEASED, "copy of a released handle: %s", hurray_status_name(st));
    return;
  }
  FUZZ_CHECK(st == HURRAY_OK, "copy failed: %s", hurray_status_name(st));
  // The copy's memory is libhurray's: its release cannot be counted here,
  // only the checker's count of live handles sees it.
  const int source = new_source(w);
  w.sources[static_cast<size_t>(source)].countable = false;
  put(w, dst, source, c);
}

// Every countable producer was released exactly once if its references are
// all gone, and not at all otherwise.
void expect_all(const World &w, const char *after) {
  for (size_t i = 0; i < w.sources.size(); ++i) {
    const Source &s = w.sources[i];
    if (!s.countable) continue;
    FUZZ_CHECK(s.released == (s.live_refs == 0 ? 1 : 0),
               "after %s: source %zu released %d times with %d live refs", after, i, s.released,
               s.live_refs);
  }
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int *, char ***) {
  setenv("HURRAY_CUDA_DRIVER_PATH", "/nonexistent/hurray-fuzz/libcuda.so.1", 1);
  setenv("HURRAY_HIP_LIBRARY_PATH", "/nonexistent/hurray-fuzz/libamdhip64.so", 1);
  if (hurray_check_enable(HURRAY_CHECK_TRACK) != HURRAY_OK) std::abort();
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  World w;
  for (int k = 0; k < kSlots; ++k) {
    w.slot[k] = -1;
    std::memset(&w.value[k], 0, sizeof w.value[k]);
  }
  const uint64_t doubles0 = checker_doubles();
  const uint64_t live0 = checker_live();
  for (size_t i = 0; i + 1 < size && w.refs.size() < kMaxRefs; i += 2) {
    const uint8_t op = data[i] % 9, arg = data[i + 1];
    const int k = arg % kSlots, j = (arg >> 3) % kSlots;
    switch (op) {
      case 0: op_import(w, k); break;
      case 1: op_foreign(w, k); break;
      case 2:  // copy the value: two slots, one reference
        w.slot[j] = w.slot[k];
        w.value[j] = w.value[k];
        break;
      case 3: op_release(w, k); break;
      case 4: op_share(w, k, 1 + (arg >> 6)); break;
      case 5: op_export(w, k, (arg & 0x40) != 0, (arg & 0x80) != 0); break;
      case 6: op_copy(w, k, j); break;
      case 7:  // release through the frozen fields only
        if (w.slot[k] >= 0) {
          if (!end_ref(w, k)) ++w.doubles;
          w.value[k].release_fn(w.value[k].user_data);
          w.slot[k] = -1;
        }
        break;
      case 8: {  // a list of the live handles must match the model
        size_t n = 0;
        FUZZ_CHECK(hurray_check_live(0, nullptr, nullptr, &n) == HURRAY_OK, "check_live failed");
        size_t want = 0;
        for (const Ref &r : w.refs) want += r.live;
        FUZZ_CHECK(n == live0 + want, "%zu live handles listed, model has %zu", n, live0 + want);
        break;
      }
    }
    expect_all(w, "a step");
    FUZZ_CHECK(checker_doubles() - doubles0 == w.doubles,
               "checker counted %llu double releases, model %llu",
               static_cast<unsigned long long>(checker_doubles() - doubles0),
               static_cast<unsigned long long>(w.doubles));
  }
  // Everything still live, once, through the value it was handed out as.
  for (Ref &r : w.refs) {
    if (!r.live) continue;
    r.live = false;
    --w.sources[r.source].live_refs;
    FUZZ_CHECK(hurray_buffer_release(&r.value) == HURRAY_OK, "final release failed");
  }
  expect_all(w, "the final releases");
  FUZZ_CHECK(checker_live() == live0, "%llu handles still tracked after all releases",
             static_cast<unsigned long long>(checker_live() - live0));
  return 0;
}
