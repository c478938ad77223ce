// SPDX-License-Identifier: Apache-2.0
// libFuzzer target: hostile DLPack headers through libhurray's whole
// lifetime path, import -> extent -> share -> export -> re-import -> copy ->
// release (docs/impl/fuzzing.md).
//
// Each input describes one DLManagedTensorVersioned or legacy DLManagedTensor
// (fuzz_input.h decodes it) and a plan of what to do with it. The target
// checks, and aborts with a message when one fails:
//  - import accepts exactly the headers spec §3 calls well formed
//    (layout_oracle.h) and rejects the others with a status one of the
//    violated rules names; a failed call consumes nothing and writes nothing;
//  - every extent libhurray reports equals the spec's, computed here in
//    128-bit arithmetic, so it lies inside the memory the header claims;
//  - accepted host tensors are backed by a heap block of exactly their
//    extent, so any byte hurray_copy reads outside it is an ASan report, and
//    the copy's contents are compared with a gather done here;
//  - share, export and re-import keep describing the same memory, round
//    trips never nest, and the producer's deleter runs exactly once, with the
//    pointer it was given, only when the last reference goes (0 or 2 calls,
//    or an early call, abort).
#include <sanitizer/asan_interface.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "fuzz_check.h"
#include "fuzz_input.h"
#include "hurray/hurray.h"
#include "layout_oracle.h"

namespace hurray_fuzz {
namespace {

// Largest byte span (and copy) backed by real memory; bigger accepted
// tensors are imported, shared and exported but never read.
constexpr int64_t kMaxBacked = int64_t{1} << 20;
constexpr int64_t kMaxCopyElements = int64_t{1} << 16;
// Arrays are allocated for at most this many dimensions: a library that read
// shape/strides of a tensor with ndim above HURRAY_MAX_NDIM would run past
// them (an ASan report).
constexpr int32_t kMaxArrayDims = HURRAY_MAX_NDIM + 8;

// Poisoned memory that headers point at when they are not backed: reading
// it is an ASan report.
alignas(64) unsigned char g_poisoned[4096];

// The one tensor of the current input and its deleter's bookkeeping.
struct Producer {
  void *tensor = nullptr;  // the DLManagedTensor(Versioned) handed to libhurray
  bool legacy = false;
  bool has_deleter = true;
  int calls = 0;            // deleter calls seen
  bool armed = false;       // the next release may be the last one
  void *backing = nullptr;  // the memory data points into (heap, exact extent)
  int64_t *shape = nullptr;
  int64_t *strides = nullptr;
};
Producer g;

void free_producer_memory() {
  std::free(g.tensor);
  std::free(g.shape);
  std::free(g.strides);
  std::free(g.backing);
  g.shape = g.strides = nullptr;
  g.backing = nullptr;
}

void on_delete(void *self) {
  FUZZ_CHECK(self == g.tensor, "deleter got %p, the tensor given was %p", self, g.tensor);
  ++g.calls;
  FUZZ_CHECK(g.calls == 1, "deleter called %d times (must be exactly once)", g.calls);
  FUZZ_CHECK(g.armed, "deleter ran while references to the tensor were still live");
  // Free everything the tensor owned: a later read by libhurray is a
  // use-after-free report. The pointer value stays in g.tensor so that a
  // second call is recognised without reading freed memory.
  void *keep = g.tensor;
  free_producer_memory();
  g.tensor = keep;
}

void versioned_deleter(DLManagedTensorVersioned *self) { on_delete(self); }
void legacy_deleter(DLManagedTensor *self) { on_delete(self); }

const uint8_t kDtypes[][2] = {{0, 1},  {0, 2},  {0, 4},  {0, 8},  {0, 16},  {0, 32}, {0, 64},
                              {1, 1},  {1, 4},  {1, 8},  {1, 64}, {2, 16},  {2, 32}, {2, 64},
                              {3, 8},  {3, 24}, {4, 16}, {5, 64}, {5, 128}, {6, 8},  {7, 8},
                              {14, 8}, {15, 6}, {16, 6}, {17, 4}};
const int32_t kDeviceTypes[] = {1, 1, 1,  1,  1,  1,  3,  11, 2, 10, 13, 4,  7,
                                8, 9, 12, 14, 15, 16, 17, 18, 0, 5,  6,  19, -1};

// Companions of a batched import: two valid tensors of each form, whose
// deleters count calls (a failed batch must call none, a successful one hands
// each to its handle, released right away: one call each).
int g_companion_calls = 0;
int64_t g_companion_shape[1] = {4};
int64_t g_companion_strides[1] = {1};
float g_companion_data[4];
void companion_versioned_deleter(DLManagedTensorVersioned *) { ++g_companion_calls; }
void companion_legacy_deleter(DLManagedTensor *) { ++g_companion_calls; }
DLTensor companion_dl() {
  DLTensor t{};
  t.data = g_companion_data;
  t.device = {kDLCPU, 0};
  t.ndim = 1;
  t.dtype = {kDLFloat, 32, 1};
  t.shape = g_companion_shape;
  t.strides = g_companion_strides;
  return t;
}

// Header fields in the order docs/impl/fuzzing.md gives.
struct Plan {
  uint8_t mode, plan, order, fill;
  uint32_t major, minor;
  uint32_t options;
};

enum : uint8_t {
  kModeLegacy = 1 << 0,
  kModeNoDeleter = 1 << 1,
  kModeShapeNull = 1 << 2,
  kModeStridesNull = 1 << 3,
  kModeDataNull = 1 << 4,
  kModeExportLegacy = 1 << 5,
  kModeMutate = 1 << 6,
  kModeDrop = 1 << 7,
};

// HURRAY_FUZZ_TRACE=1 prints each decoded header (for replaying a crash).
bool g_trace = false;

void trace(const Header &h, const Plan &p) {
  std::fprintf(stderr,
               "[fuzz] %s tensor: version %u.%u flags 0x%llx device (%d, %d) dtype "
               "(code %u, bits %u, lanes %u) ndim %d byte_offset %llu options 0x%x mode 0x%02x "
               "plan 0x%02x order %u fill %u data %p\n",
               (p.mode & 1) ? "legacy" : "versioned", p.major, p.minor, (unsigned long long)h.flags,
               h.device_type, h.device_id, h.code, h.bits, h.lanes, h.ndim,
               (unsigned long long)h.byte_offset, p.options, p.mode, p.plan, p.order, p.fill,
               h.data);
  for (int32_t k = 0; k < h.ndim && k < HURRAY_MAX_NDIM + 8; ++k) {
    std::fprintf(stderr, "[fuzz]   dim %d: shape %lld stride %lld\n", k,
                 h.shape ? (long long)h.shape[k] : 0LL, h.strides ? (long long)h.strides[k] : 0LL);
  }
}

Header decode(FuzzInput &in, Plan &p) {
  Header h{};
  p.mode = in.u8();
  p.plan = in.u8();
  p.order = in.u8();
  p.fill = in.u8();
  p.major = static_cast<uint32_t>(in.value());
  p.minor = static_cast<uint32_t>(in.value());
  h.flags = static_cast<uint64_t>(in.value());
  const uint8_t dev = in.u8();
  h.device_type = dev < 0xC0 ? kDeviceTypes[dev % (sizeof(kDeviceTypes) / sizeof(int32_t))]
                             : static_cast<int32_t>(in.value());
  h.device_id = static_cast<int32_t>(in.value());
  const uint8_t dt = in.u8();
  if (dt < 0xC0) {
    const uint8_t *d = kDtypes[dt % (sizeof(kDtypes) / sizeof(kDtypes[0]))];
    h.code = d[0];
    h.bits = d[1];
    const uint8_t l = in.u8();
    h.lanes = l < 0xC0 ? 1 : l < 0xF0 ? static_cast<uint16_t>(l - 0xC0 + 1) : in.u16();
  } else {
    h.code = in.u8();
    h.bits = in.u8();
    h.lanes = in.u16();
  }
  h.ndim = static_cast<int32_t>(in.value());
  h.byte_offset = static_cast<uint64_t>(in.value());
  const uint8_t o = in.u8();
  p.options = o < 0xF0 ? (o & 1u) : static_cast<uint32_t>(in.value());

  const int32_t dims = h.ndim < 0 ? 0 : h.ndim > kMaxArrayDims ? kMaxArrayDims : h.ndim;
  const size_t bytes = sizeof(int64_t) * static_cast<size_t>(dims);
  // malloc(0) still gives a distinct pointer that must not be read.
  g.shape = static_cast<int64_t *>(std::malloc(bytes ? bytes : 1));
  g.strides = static_cast<int64_t *>(std::malloc(bytes ? bytes : 1));
  for (int32_t k = 0; k < dims; ++k) {
    g.shape[k] = in.value();
    g.strides[k] = in.value();
  }
  h.shape = (p.mode & kModeShapeNull) ? nullptr : g.shape;
  h.strides = (p.mode & kModeStridesNull) ? nullptr : g.strides;
  return h;
}

// The verdict of spec §3 on an import, with the import's own rules.
Verdict judge_import(const Header &h, const Plan &p, bool legacy) {
  const bool strides_required = !legacy && p.minor >= 2;
  Verdict v = judge(h, strides_required);
  if ((p.options & ~HURRAY_IMPORT_CHECK_DEVICE_POINTER) != 0) {
    v.errors |= 1u << HURRAY_ERR_INVALID_ARGUMENT;
  }
  if (!legacy && p.major != 1) v.errors |= 1u << HURRAY_ERR_UNSUPPORTED_VERSION;
  // The pointer check asks a GPU runtime, and the target makes sure none can
  // be loaded (LLVMFuzzerInitialize): it must refuse.
  if (v.errors == 0 && (p.options & HURRAY_IMPORT_CHECK_DEVICE_POINTER) != 0 && v.numel > 0 &&
      gpu_checked_type(h.device_type)) {
    v.errors = 1u << HURRAY_ERR_UNSUPPORTED_DEVICE;
  }
  return v;
}

Header header_of(const hurray_buffer &b) {
  return Header{b.data,
                b.byte_offset,
                b.device.device_type,
                b.device.device_id,
                b.dtype.code,
                b.dtype.bits,
                b.dtype.lanes,
                b.ndim,
                b.shape,
                b.strides,
                b.flags};
}

// The fields of a handle that say which memory it describes (not who owns it).
bool same_description(const hurray_buffer &a, const hurray_buffer &b) {
  return a.version == b.version && a.flags == b.flags && a.data == b.data &&
         a.byte_offset == b.byte_offset && a.device.device_type == b.device.device_type &&
         a.device.device_id == b.device.device_id && a.dtype.code == b.dtype.code &&
         a.dtype.bits == b.dtype.bits && a.dtype.lanes == b.dtype.lanes && a.ndim == b.ndim &&
         (a.ndim == 0 || (a.shape == b.shape && a.strides == b.strides));
}

bool same_dltensor(const DLTensor &t, const hurray_buffer &b) {
  return t.data == b.data && t.byte_offset == b.byte_offset &&
         static_cast<int32_t>(t.device.device_type) == b.device.device_type &&
         t.device.device_id == b.device.device_id && t.dtype.code == b.dtype.code &&
         t.dtype.bits == b.dtype.bits && t.dtype.lanes == b.dtype.lanes && t.ndim == b.ndim &&
         (t.ndim == 0 || (t.shape == b.shape && t.strides == b.strides));
}

bool all_bytes(const void *p, size_t n, unsigned char c) {
  const auto *b = static_cast<const unsigned char *>(p);
  for (size_t i = 0; i < n; ++i) {
    if (b[i] != c) return false;
  }
  return true;
}

// The fuzzed tensor as element p.order % 3 of a batch of three: the status
// the single import would give (the caller checks it against the spec); on
// failure the index names it, and nothing was consumed or written, the
// companions included; on success *out is its handle and the companions'
// handles are released (one deleter call each).
int32_t import_batched(bool legacy, DLManagedTensorVersioned *tv, DLManagedTensor *tl,
                       const Plan &p, hurray_buffer *out) {
  const size_t at = p.order % 3;
  DLManagedTensorVersioned cv[2] = {};
  DLManagedTensor cl[2] = {};
  DLManagedTensorVersioned *vs[3];
  DLManagedTensor *ls[3];
  for (size_t i = 0, c = 0; i < 3; ++i) {
    if (i == at) {
      vs[i] = tv;
      ls[i] = tl;
      continue;
    }
    cv[c].version = {1, 3};
    cv[c].deleter = &companion_versioned_deleter;
    cv[c].dl_tensor = companion_dl();
    cl[c].deleter = &companion_legacy_deleter;
    cl[c].dl_tensor = companion_dl();
    vs[i] = &cv[c];
    ls[i] = &cl[c];
    ++c;
  }
  hurray_buffer hs[3];
  std::memset(hs, 0xA5, sizeof hs);
  size_t failed = 12345;
  g_companion_calls = 0;
  const int32_t st = legacy ? hurray_from_dlpack_n(ls, 3, p.options, hs, &failed)
                            : hurray_from_dlpack_versioned_n(vs, 3, p.options, hs, &failed);
  FUZZ_CHECK(g_companion_calls == 0, "a batched import called a companion's deleter");
  if (st != HURRAY_OK) {
    FUZZ_CHECK(all_bytes(hs, sizeof hs, 0xA5), "a failed batched import wrote out");
    FUZZ_CHECK(failed == at || (failed == HURRAY_BATCH_NO_INDEX &&
                                (p.options & ~HURRAY_IMPORT_CHECK_DEVICE_POINTER) != 0),
               "a failed batched import named index %zu, the fuzzed tensor is %zu", failed, at);
    return st;
  }
  FUZZ_CHECK(failed == 12345, "a successful batched import wrote failed_index");
  for (size_t i = 0; i < 3; ++i) {
    if (i == at) continue;
    FUZZ_CHECK(hs[i].data == g_companion_data && hs[i].shape == g_companion_shape,
               "a companion's handle describes something else");
    (void)hurray_buffer_release(&hs[i]);
  }
  FUZZ_CHECK(g_companion_calls == 2, "companions' deleters ran %d times (must be 2)",
             g_companion_calls);
  *out = hs[at];
  return st;
}

// The extent libhurray reports for `b` must be the spec's.
void check_extent(const hurray_buffer &b, const char *what) {
  FUZZ_CHECK(hurray_buffer_validate(&b) == HURRAY_OK, "%s does not validate", what);
  hurray_extent e;
  std::memset(&e, 0xA5, sizeof e);
  FUZZ_CHECK(hurray_buffer_extent(&b, &e) == HURRAY_OK, "%s: no extent", what);
  const Verdict v = judge(header_of(b), /*strides_required=*/true);
  FUZZ_CHECK(v.errors == 0, "%s validates but the spec rejects it (errors 0x%x)", what, v.errors);
  FUZZ_CHECK(e.numel == v.numel && e.itemsize_bits == v.itemsize_bits && e.lowest == v.lowest &&
                 e.highest == v.highest && e.contiguous == v.contiguous && e.reserved == 0,
             "%s extent {numel %lld, bits %lld, [%lld, %lld), contiguous %d, reserved %d}, spec "
             "{%lld, %lld, [%lld, %lld), %d}",
             what, (long long)e.numel, (long long)e.itemsize_bits, (long long)e.lowest,
             (long long)e.highest, e.contiguous, e.reserved, (long long)v.numel,
             (long long)v.itemsize_bits, (long long)v.lowest, (long long)v.highest, v.contiguous);
}

// Releases handles in a fuzz-chosen order; the producer's deleter must run
// at the last one and not before.
void release_all(std::vector<hurray_buffer> &live, uint8_t order, bool last_reference) {
  const size_t n = live.size();
  for (size_t i = 0; i < n; ++i) {
    size_t j = (i + order) % n;
    if (order & 0x80) j = n - 1 - j;
    const bool last = (i + 1 == n) && last_reference;
    g.armed = last;
    const int before = g.calls;
    FUZZ_CHECK(hurray_buffer_release(&live[j]) == HURRAY_OK, "release failed");
    FUZZ_CHECK(live[j].release_fn == nullptr, "a released handle is not left empty");
    if (!last) FUZZ_CHECK(g.calls == before, "a release before the last called the deleter");
  }
  // Releasing empty handles again calls nothing.
  g.armed = false;
  for (hurray_buffer &b : live) FUZZ_CHECK(hurray_buffer_release(&b) == HURRAY_OK, "re-release");
  live.clear();
}

// hurray_copy of `src` to the destination the plan names, judged.
void copy_step(const hurray_buffer &src, uint8_t sel, hurray_buffer *copy, bool *have_copy) {
  static const hurray_device kDst[] = {{1, 0}, {1, 0}, {1, 0}, {1, 1}, {2, 0}, {3, 0}, {99, 0}};
  const hurray_device dst = kDst[sel % 7];
  const Verdict v = judge(header_of(src), true);
  if (v.errors != 0 || v.numel > kMaxCopyElements || v.highest - v.lowest > kMaxBacked ||
      v.numel * ((v.itemsize_bits + 7) / 8) > kMaxBacked) {
    return;  // too large to allocate under ASan; never copied
  }
  const bool host_src = host_readable_type(src.device.device_type);
  if (host_src && v.numel > 0 && g.backing == nullptr) return;  // claims memory it has not
  const bool packed_strided = !v.contiguous && v.itemsize_bits % 8 != 0;
  const bool can =
      host_src && dst.device_type == HURRAY_DEVICE_CPU && dst.device_id == 0 && !packed_strided;
  const int calls_before = g.calls;
  hurray_buffer out;
  std::memset(&out, 0xA5, sizeof out);
  const int32_t st = hurray_copy(&src, dst, &out);
  FUZZ_CHECK(g.calls == calls_before, "hurray_copy called the source's deleter");
  if (!can) {
    FUZZ_CHECK(st == HURRAY_ERR_UNSUPPORTED_DEVICE || st == HURRAY_ERR_UNSUPPORTED_DTYPE,
               "copy of device type %d to (%d, %d) returned %s", src.device.device_type,
               dst.device_type, dst.device_id, hurray_status_name(st));
    if (packed_strided && host_src && dst.device_type == HURRAY_DEVICE_CPU && dst.device_id == 0) {
      FUZZ_CHECK(st == HURRAY_ERR_UNSUPPORTED_DTYPE, "strided packed copy returned %s",
                 hurray_status_name(st));
    }
    FUZZ_CHECK(all_bytes(&out, sizeof out, 0xA5), "a failed copy wrote *out");
    return;
  }
  FUZZ_CHECK(st == HURRAY_OK, "host copy returned %s", hurray_status_name(st));
  const uint64_t want_flags = (src.flags & HURRAY_FLAG_SUBBYTE_PADDED) | HURRAY_FLAG_IS_COPIED;
  FUZZ_CHECK(out.release_fn != nullptr && out.version == HURRAY_BUFFER_VERSION &&
                 out.flags == want_flags && out.byte_offset == 0 &&
                 out.device.device_type == HURRAY_DEVICE_CPU && out.device.device_id == 0 &&
                 out.ndim == src.ndim && out.dtype.code == src.dtype.code &&
                 out.dtype.bits == src.dtype.bits && out.dtype.lanes == src.dtype.lanes,
             "copy describes something else");
  for (int32_t k = 0; k < src.ndim; ++k) {
    FUZZ_CHECK(out.shape[k] == src.shape[k], "copy shape[%d] %lld != %lld", k,
               (long long)out.shape[k], (long long)src.shape[k]);
  }
  check_extent(out, "the copy");
  hurray_extent e{};
  (void)hurray_buffer_extent(&out, &e);
  FUZZ_CHECK(e.contiguous == 1 && e.lowest == 0, "the copy is not compact");
  if (v.numel > 0) {
    const unsigned char *base = static_cast<const unsigned char *>(src.data);
    const unsigned char *got = static_cast<const unsigned char *>(out.data);
    if (v.contiguous) {
      FUZZ_CHECK(std::memcmp(got, base + v.lowest, static_cast<size_t>(v.highest - v.lowest)) == 0,
                 "contiguous copy differs from the source bytes");
    } else {
      // Gather here, in 128-bit offsets, and compare element by element.
      const int64_t eb = v.itemsize_bits / 8;
      int64_t idx[HURRAY_MAX_NDIM] = {0};
      for (int64_t i = 0; i < v.numel; ++i) {
        __int128 off = static_cast<__int128>(src.byte_offset);
        for (int32_t k = 0; k < src.ndim; ++k)
          off += static_cast<__int128>(idx[k]) * src.strides[k] * eb;
        FUZZ_CHECK(off >= v.lowest && off + eb <= v.highest, "element %lld outside the extent",
                   (long long)i);
        FUZZ_CHECK(std::memcmp(got + i * eb, base + static_cast<int64_t>(off),
                               static_cast<size_t>(eb)) == 0,
                   "strided copy differs at element %lld", (long long)i);
        for (int32_t k = src.ndim - 1; k >= 0; --k) {
          if (++idx[k] < src.shape[k]) break;
          idx[k] = 0;
        }
      }
    }
  }
  *copy = out;
  *have_copy = true;
}

void run_one(const uint8_t *data, size_t size) {
  g = Producer{};
  FuzzInput in(data, size);
  Plan p{};
  Header h = decode(in, p);
  const bool legacy = (p.mode & kModeLegacy) != 0;
  g.legacy = legacy;
  g.has_deleter = (p.mode & kModeNoDeleter) == 0;
  if (legacy) h.flags = 0;  // a legacy tensor has none; its handle gets 0

  // Back an acceptable host tensor with exactly its extent; otherwise data
  // points at poisoned memory (or is NULL).
  h.data = (p.mode & kModeDataNull) ? nullptr : g_poisoned;
  Verdict v = judge_import(h, p, legacy);
  if (h.data != nullptr && v.errors == 0 && v.numel > 0 && host_readable_type(h.device_type) &&
      v.highest - v.lowest <= kMaxBacked) {
    const size_t span = static_cast<size_t>(v.highest - v.lowest);
    g.backing = std::malloc(span);
    for (size_t i = 0; i < span; ++i) {
      static_cast<unsigned char *>(g.backing)[i] = static_cast<unsigned char>(i * 131 + p.fill);
    }
    const uintptr_t at = reinterpret_cast<uintptr_t>(g.backing);
    if (v.lowest > 0 && at <= static_cast<uintptr_t>(v.lowest)) {
      // data would have to wrap around the address space (a huge
      // byte_offset): no producer can hand out such a pointer, so the
      // tensor stays unbacked and is never read.
      std::free(g.backing);
      g.backing = nullptr;
    } else {
      h.data = reinterpret_cast<void *>(at - static_cast<uintptr_t>(v.lowest));
    }
  }

  // The producer's tensor, exactly sized on the heap.
  DLTensor dl{};
  dl.data = h.data;
  dl.device.device_type = static_cast<DLDeviceType>(h.device_type);
  dl.device.device_id = h.device_id;
  dl.ndim = h.ndim;
  dl.dtype.code = h.code;
  dl.dtype.bits = h.bits;
  dl.dtype.lanes = h.lanes;
  dl.shape = const_cast<int64_t *>(h.shape);
  dl.strides = const_cast<int64_t *>(h.strides);
  dl.byte_offset = h.byte_offset;
  DLManagedTensorVersioned *tv = nullptr;
  DLManagedTensor *tl = nullptr;
  if (legacy) {
    tl = static_cast<DLManagedTensor *>(std::malloc(sizeof(DLManagedTensor)));
    tl->dl_tensor = dl;
    tl->manager_ctx = &g;
    tl->deleter = g.has_deleter ? &legacy_deleter : nullptr;
    g.tensor = tl;
  } else {
    tv = static_cast<DLManagedTensorVersioned *>(std::malloc(sizeof(DLManagedTensorVersioned)));
    tv->version.major = p.major;
    tv->version.minor = p.minor;
    tv->manager_ctx = &g;
    tv->deleter = g.has_deleter ? &versioned_deleter : nullptr;
    tv->flags = h.flags;
    tv->dl_tensor = dl;
    g.tensor = tv;
  }
  v = judge_import(h, p, legacy);  // now with the data pointer it really has
  if (g_trace) trace(h, p);

  // 1. Import: alone, or (fill bit 1) as element order % 3 of a batch of
  // three whose other two are valid companions.
  hurray_buffer imported;
  std::memset(&imported, 0xA5, sizeof imported);
  const bool batched = (p.fill & 2) != 0;
  const int32_t st = batched  ? import_batched(legacy, tv, tl, p, &imported)
                     : legacy ? hurray_from_dlpack(tl, p.options, &imported)
                              : hurray_from_dlpack_versioned(tv, p.options, &imported);
  FUZZ_CHECK(status_allowed(v, st), "%s returned %s; the spec allows error mask 0x%x",
             batched ? "batched import" : "import", hurray_status_name(st), v.errors);
  FUZZ_CHECK(g.calls == 0, "import called the deleter");
  std::vector<int64_t *> extra_shapes;
  if (st != HURRAY_OK) {
    FUZZ_CHECK(all_bytes(&imported, sizeof imported, 0xA5), "a failed import wrote *out");
    FUZZ_CHECK(hurray_last_error()[0] != '\0', "a failed import left no message");
    // Still ours: drop it the way a caller would.
    g.armed = true;
    if (legacy)
      (void)hurray_dlpack_delete(tl);
    else
      (void)hurray_dlpack_versioned_delete(tv);
    FUZZ_CHECK(g.calls == (g.has_deleter ? 1 : 0), "dropping a refused tensor: %d deleter calls",
               g.calls);
    if (!g.has_deleter) free_producer_memory();
    return;
  }
  FUZZ_CHECK(imported.release_fn != nullptr && imported.version == HURRAY_BUFFER_VERSION &&
                 imported.flags == h.flags && imported.data == h.data &&
                 imported.byte_offset == h.byte_offset &&
                 imported.device.device_type == h.device_type &&
                 imported.device.device_id == h.device_id && imported.dtype.code == h.code &&
                 imported.dtype.bits == h.bits && imported.dtype.lanes == h.lanes &&
                 imported.ndim == h.ndim,
             "the imported handle describes something else");
  if (h.ndim > 0) {
    FUZZ_CHECK(imported.shape == h.shape, "import copied shape");
    if (h.strides != nullptr) {
      FUZZ_CHECK(imported.strides == h.strides, "import copied strides");
    } else {
      FUZZ_CHECK(imported.strides != nullptr, "import left strides NULL");
      if (v.numel > 0) {
        for (int32_t k = 0; k < h.ndim; ++k) {
          FUZZ_CHECK(imported.strides[k] == v.strides[k], "synthesised strides[%d] %lld != %lld", k,
                     (long long)imported.strides[k], (long long)v.strides[k]);
        }
      }
    }
  }

  // 2. Extent.
  check_extent(imported, "the imported handle");
  if (v.numel > 0) {
    hurray_extent e{};
    (void)hurray_buffer_extent(&imported, &e);
    FUZZ_CHECK(e.lowest == v.lowest && e.highest == v.highest,
               "the handle's extent differs from the header's");
  }

  const hurray_release_fn import_fn = imported.release_fn;

  // 3. Share.
  std::vector<hurray_buffer> live;
  static const uint64_t kShareN[] = {1, 2, 3, 5, 0, 1, 4, (uint64_t{1} << 32) + 1};
  const uint64_t n = kShareN[p.plan & 7];
  if (n == 0 || n > (uint64_t{1} << 32)) {
    hurray_buffer saved = imported, sentinel;
    std::memset(&sentinel, 0xA5, sizeof sentinel);
    FUZZ_CHECK(
        hurray_share(&imported, static_cast<size_t>(n), &sentinel) == HURRAY_ERR_INVALID_ARGUMENT,
        "share with n=%llu did not fail", (unsigned long long)n);
    FUZZ_CHECK(std::memcmp(&saved, &imported, sizeof saved) == 0, "a failed share changed *src");
    FUZZ_CHECK(all_bytes(&sentinel, sizeof sentinel, 0xA5), "a failed share wrote *out");
    live.push_back(imported);
  } else {
    std::vector<hurray_buffer> out(static_cast<size_t>(n));
    hurray_buffer saved = imported;
    FUZZ_CHECK(hurray_share(&imported, out.size(), out.data()) == HURRAY_OK, "share failed");
    FUZZ_CHECK(all_bytes(&imported, sizeof imported, 0), "share did not zero *src");
    for (const hurray_buffer &b : out) {
      FUZZ_CHECK(same_description(b, saved), "a shared handle describes something else");
      FUZZ_CHECK(std::memcmp(&b, &out[0], sizeof b) == 0, "shared handles differ");
      live.push_back(b);
    }
    if (n == 1)
      FUZZ_CHECK(std::memcmp(&out[0], &saved, sizeof saved) == 0, "share(1) is not a move");
  }
  if (p.plan & 8) {
    hurray_buffer pair[2];
    hurray_buffer saved = live[0];
    FUZZ_CHECK(hurray_share(&live[0], 2, pair) == HURRAY_OK, "re-share failed");
    FUZZ_CHECK(same_description(pair[0], saved) && same_description(pair[1], saved),
               "a re-shared handle describes something else");
    live[0] = pair[0];
    live.push_back(pair[1]);
  }
  FUZZ_CHECK(g.calls == 0, "share called the deleter");
  for (const hurray_buffer &b : live) check_extent(b, "a shared handle");

  // 4. Export one of them.
  const size_t pick = p.order % live.size();
  const hurray_buffer pre = live[pick];
  const bool export_legacy = (p.mode & kModeExportLegacy) != 0;
  // libhurray hands the producer's own tensor back when the handle is the
  // one its import made without any allocation (not shared, strides given).
  const bool expect_original =
      export_legacy == legacy && pre.release_fn == import_fn && pre.user_data == g.tensor;
  live.erase(live.begin() + static_cast<long>(pick));
  hurray_buffer src = pre;
  DLManagedTensorVersioned *ev = nullptr;
  DLManagedTensor *el = nullptr;
  int32_t est = export_legacy ? hurray_to_dlpack(&src, &el) : hurray_to_dlpack_versioned(&src, &ev);
  FUZZ_CHECK(est == HURRAY_OK, "export failed: %s", hurray_status_name(est));
  FUZZ_CHECK(all_bytes(&src, sizeof src, 0), "export did not zero *src");
  FUZZ_CHECK(g.calls == 0, "export called the deleter");
  void *exported = export_legacy ? static_cast<void *>(el) : static_cast<void *>(ev);
  const bool is_original = exported == g.tensor;
  FUZZ_CHECK(is_original == expect_original, "export %s the producer's tensor",
             is_original ? "handed back" : "did not hand back");
  DLTensor &edl = export_legacy ? el->dl_tensor : ev->dl_tensor;
  FUZZ_CHECK(same_dltensor(edl, pre), "the exported tensor describes something else");
  if (!export_legacy) {
    FUZZ_CHECK(ev->flags == pre.flags, "export flags 0x%llx != 0x%llx",
               (unsigned long long)ev->flags, (unsigned long long)pre.flags);
    if (!is_original) {
      FUZZ_CHECK(
          ev->version.major == HURRAY_DLPACK_MAJOR && ev->version.minor == HURRAY_DLPACK_MINOR,
          "export version %u.%u", ev->version.major, ev->version.minor);
    }
  }
  if (!is_original) {
    FUZZ_CHECK((export_legacy ? (void *)el->deleter : (void *)ev->deleter) != nullptr,
               "an export block without a deleter");
  }

  // A consumer that edits what it got (same memory, other description).
  bool mutated = false;
  if ((p.mode & kModeMutate) != 0) {
    if (!export_legacy && (p.fill & 1) == 0) {
      ev->flags ^= HURRAY_FLAG_READ_ONLY;
      mutated = true;
    } else if (edl.ndim > 0) {
      auto *copy = static_cast<int64_t *>(std::malloc(sizeof(int64_t) * edl.ndim));
      std::memcpy(copy, edl.shape, sizeof(int64_t) * edl.ndim);
      extra_shapes.push_back(copy);
      edl.shape = copy;
      mutated = true;
    }
  }
  hurray_buffer expect = pre;
  expect.shape = edl.ndim > 0 ? edl.shape : pre.shape;
  if (!export_legacy)
    expect.flags = ev->flags;
  else if (mutated || is_original)
    expect.flags = 0;

  // 5. Re-import, or drop it unconsumed.
  if ((p.mode & kModeDrop) != 0) {
    g.armed = live.empty();
    const int before = g.calls;
    if (export_legacy)
      (void)hurray_dlpack_delete(el);
    else
      (void)hurray_dlpack_versioned_delete(ev);
    const int want = before + ((live.empty() && g.has_deleter) ? 1 : 0);
    FUZZ_CHECK(g.calls == want, "dropping the export: %d deleter calls, want %d", g.calls, want);
  } else {
    hurray_buffer back;
    std::memset(&back, 0xA5, sizeof back);
    const int32_t rst = export_legacy ? hurray_from_dlpack(el, 0, &back)
                                      : hurray_from_dlpack_versioned(ev, 0, &back);
    FUZZ_CHECK(rst == HURRAY_OK, "re-import failed: %s", hurray_status_name(rst));
    FUZZ_CHECK(same_description(back, expect), "the re-imported handle describes something else");
    if (!mutated) {
      FUZZ_CHECK(back.release_fn == pre.release_fn && back.user_data == pre.user_data,
                 "a round trip nested (release_fn/user_data changed)");
    }
    check_extent(back, "the re-imported handle");
    live.push_back(back);
  }
  FUZZ_CHECK(g.calls == 0 || live.empty(), "the deleter ran while handles are live");

  // 6. Copy from one live handle.
  hurray_buffer copy{};
  bool have_copy = false;
  const uint8_t dst_sel = (p.plan >> 4) & 7;
  if (!live.empty() && dst_sel != 0) {
    copy_step(live[p.fill % live.size()], static_cast<uint8_t>(dst_sel - 1), &copy, &have_copy);
  }

  // 7. Release everything, the copy first or last.
  const bool copy_first = (p.plan & 0x80) != 0;
  if (have_copy && copy_first) {
    const int before = g.calls;
    (void)hurray_buffer_release(&copy);
    FUZZ_CHECK(g.calls == before, "releasing the copy called the source's deleter");
  }
  const bool deleter_pending = g.calls == 0;
  release_all(live, p.order, deleter_pending && g.has_deleter);
  FUZZ_CHECK(g.calls == (g.has_deleter ? 1 : 0), "after all releases: %d deleter calls", g.calls);
  if (have_copy && !copy_first) {
    (void)hurray_buffer_release(&copy);
    FUZZ_CHECK(g.calls == (g.has_deleter ? 1 : 0), "releasing the copy called the deleter");
  }
  for (int64_t *s : extra_shapes) std::free(s);
  if (!g.has_deleter) free_producer_memory();
}

}  // namespace
}  // namespace hurray_fuzz

extern "C" int LLVMFuzzerInitialize(int *, char ***) {
  // No GPU runtime may be loaded: GPU requests then fail the same way on
  // every machine, and no driver sees the target's made-up pointers.
  setenv("HURRAY_CUDA_DRIVER_PATH", "/nonexistent/hurray-fuzz/libcuda.so.1", 1);
  setenv("HURRAY_HIP_LIBRARY_PATH", "/nonexistent/hurray-fuzz/libamdhip64.so", 1);
  const char *t = std::getenv("HURRAY_FUZZ_TRACE");
  hurray_fuzz::g_trace = t != nullptr && t[0] == '1';
  ASAN_POISON_MEMORY_REGION(hurray_fuzz::g_poisoned, sizeof hurray_fuzz::g_poisoned);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  hurray_fuzz::run_one(data, size);
  return 0;
}
