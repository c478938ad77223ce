// SPDX-License-Identifier: Apache-2.0
// Test doubles and assertions shared by the core GoogleTest suite.
//
// - ReleaseLog + counting_release: a hurray release callback whose user_data
//   is the log itself; it counts calls and records the argument and thread.
// - Layout: a plain description of a tensor (shape, strides, dtype, ...).
// - HandleSource: owns the shape/strides/bytes of a producer-made handle.
// - make_versioned / make_legacy: a fake DLPack producer that heap-allocates
//   a tensor whose deleter counts calls, records the pointer it received and
//   frees the tensor.
// - EXPECT_STATUS / ASSERT_STATUS: compare statuses by name and print
//   hurray_last_error() on mismatch.
#ifndef HURRAY_TESTS_SUPPORT_HURRAY_TEST_SUPPORT_H_
#define HURRAY_TESTS_SUPPORT_HURRAY_TEST_SUPPORT_H_

#include <hurray/dlpack.h>
#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "hurray/hurray.h"

namespace hurray_test {

// ---------------------------------------------------------------------------
// Status assertions
// ---------------------------------------------------------------------------

inline ::testing::AssertionResult StatusEq(const char *actual_expr, const char *expected_expr,
                                           int32_t actual, int32_t expected) {
  // Read the message before any other libhurray call.
  const std::string message = hurray_last_error();
  if (actual == expected) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << actual_expr << " returned " << hurray_status_name(actual) << " (" << actual
         << "), expected " << hurray_status_name(expected) << " (" << expected_expr
         << "); hurray_last_error(): \"" << message << "\"";
}

#define EXPECT_STATUS(expr, status) EXPECT_PRED_FORMAT2(::hurray_test::StatusEq, (expr), (status))
#define ASSERT_STATUS(expr, status) ASSERT_PRED_FORMAT2(::hurray_test::StatusEq, (expr), (status))
#define EXPECT_OK(expr) EXPECT_STATUS((expr), HURRAY_OK)
#define ASSERT_OK(expr) ASSERT_STATUS((expr), HURRAY_OK)

// Checks that the calling thread's last error mentions `needle`.
inline ::testing::AssertionResult LastErrorMentions(const char *needle) {
  const std::string message = hurray_last_error();
  if (message.find(needle) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "hurray_last_error() is \"" << message
                                       << "\", which does not mention \"" << needle << "\"";
}

// ---------------------------------------------------------------------------
// Call logs
// ---------------------------------------------------------------------------

// Counts calls of a release callback or DLPack deleter and records the
// argument and the calling thread of the last call. Thread-safe.
struct CallLog {
  std::atomic<int> calls{0};
  std::atomic<const void *> last_arg{nullptr};

  void record(const void *arg) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      thread_ = std::this_thread::get_id();
    }
    last_arg.store(arg);
    calls.fetch_add(1);
  }
  std::thread::id last_thread() {
    std::lock_guard<std::mutex> lock(mu_);
    return thread_;
  }

 private:
  std::mutex mu_;
  std::thread::id thread_;
};

using ReleaseLog = CallLog;
using DeleterLog = CallLog;

// A hurray release callback: user_data must be a ReleaseLog.
inline void counting_release(void *user_data) {
  static_cast<ReleaseLog *>(user_data)->record(user_data);
}

// ---------------------------------------------------------------------------
// Tensor descriptions
// ---------------------------------------------------------------------------

inline hurray_dtype dt(uint8_t code, uint8_t bits, uint16_t lanes = 1) {
  return hurray_dtype{code, bits, lanes};
}
inline hurray_dtype f32() { return dt(kDLFloat, 32); }

struct Layout {
  std::string name = "tensor";
  std::vector<int64_t> shape;
  std::vector<int64_t> strides;  // used when has_strides
  bool has_strides = true;       // false: strides pointer is NULL
  bool null_shape = false;       // shape pointer NULL (ndim 0 cases)
  hurray_dtype dtype = f32();
  int32_t device_type = kDLCPU;
  int32_t device_id = 0;
  uint64_t byte_offset = 0;
  uint64_t flags = 0;
  bool null_data = false;  // data pointer NULL (zero-size cases)

  int32_t ndim() const { return static_cast<int32_t>(shape.size()); }
};

// Compact row-major strides as libhurray writes them (a zero extent counts
// as 1 so that the pattern stays the row-major one).
inline std::vector<int64_t> compact(const std::vector<int64_t> &shape) {
  std::vector<int64_t> s(shape.size());
  int64_t acc = 1;
  for (size_t k = shape.size(); k-- > 0;) {
    s[k] = acc;
    acc *= shape[k] > 1 ? shape[k] : 1;
  }
  return s;
}

// Row-major layout of `shape` with compact strides.
inline Layout dense(std::vector<int64_t> shape, hurray_dtype dtype = f32()) {
  Layout l;
  l.strides = compact(shape);
  l.shape = std::move(shape);
  l.dtype = dtype;
  return l;
}

inline std::string describe(const Layout &l) { return "layout " + l.name; }

// Bytes of memory big enough for every valid layout the tests build.
constexpr size_t kStorageBytes = 4096;

// A producer-made handle: owns the arrays the handle points at and counts
// releases (user_data is &log). Neither copyable nor movable: the handle
// points into it.
struct HandleSource {
  ReleaseLog log;
  int64_t shape[HURRAY_MAX_NDIM + 1] = {};
  int64_t strides[HURRAY_MAX_NDIM + 1] = {};
  alignas(64) unsigned char bytes[kStorageBytes] = {};

  HandleSource() = default;
  HandleSource(const HandleSource &) = delete;
  HandleSource &operator=(const HandleSource &) = delete;

  hurray_buffer handle(const Layout &l) {
    hurray_buffer h;
    std::memset(&h, 0, sizeof h);
    h.version = HURRAY_BUFFER_VERSION;
    h.release_fn = &counting_release;
    h.user_data = &log;
    h.flags = l.flags;
    h.data = l.null_data ? nullptr : bytes;
    h.byte_offset = l.byte_offset;
    h.device = hurray_device{l.device_type, l.device_id};
    h.dtype = l.dtype;
    h.ndim = l.ndim();
    for (size_t k = 0; k < l.shape.size(); ++k) shape[k] = l.shape[k];
    for (size_t k = 0; k < l.strides.size(); ++k) strides[k] = l.strides[k];
    h.shape = l.null_shape ? nullptr : shape;
    h.strides = l.has_strides ? strides : nullptr;
    return h;
  }
};

// ---------------------------------------------------------------------------
// Fake DLPack producer
// ---------------------------------------------------------------------------

template <typename Managed>
struct FakeBlock {
  Managed tensor;
  DeleterLog *log;
  int64_t shape[HURRAY_MAX_NDIM + 1];
  int64_t strides[HURRAY_MAX_NDIM + 1];
  alignas(64) unsigned char bytes[kStorageBytes];
};

template <typename Managed>
void fake_deleter(Managed *self) {
  auto *block = static_cast<FakeBlock<Managed> *>(self->manager_ctx);
  block->log->record(self);
  delete block;
}

template <typename Managed>
Managed *make_fake(DeleterLog &log, const Layout &l) {
  auto *block = new FakeBlock<Managed>();
  std::memset(&block->tensor, 0, sizeof block->tensor);
  block->log = &log;
  DLTensor &t = block->tensor.dl_tensor;
  t.data = l.null_data ? nullptr : block->bytes;
  t.device.device_type = static_cast<DLDeviceType>(l.device_type);
  t.device.device_id = l.device_id;
  t.ndim = l.ndim();
  t.dtype.code = l.dtype.code;
  t.dtype.bits = l.dtype.bits;
  t.dtype.lanes = l.dtype.lanes;
  for (size_t k = 0; k < l.shape.size(); ++k) block->shape[k] = l.shape[k];
  for (size_t k = 0; k < l.strides.size(); ++k) block->strides[k] = l.strides[k];
  t.shape = l.null_shape ? nullptr : block->shape;
  t.strides = l.has_strides ? block->strides : nullptr;
  t.byte_offset = l.byte_offset;
  block->tensor.manager_ctx = block;
  block->tensor.deleter = &fake_deleter<Managed>;
  return &block->tensor;
}

// A versioned tensor of `l` with version major.minor (flags from l.flags).
inline DLManagedTensorVersioned *make_versioned(DeleterLog &log, const Layout &l,
                                                uint32_t major = 1, uint32_t minor = 3) {
  DLManagedTensorVersioned *t = make_fake<DLManagedTensorVersioned>(log, l);
  t->version.major = major;
  t->version.minor = minor;
  t->flags = l.flags;
  return t;
}

// A legacy tensor of `l` (flags cannot be expressed).
inline DLManagedTensor *make_legacy(DeleterLog &log, const Layout &l) {
  return make_fake<DLManagedTensor>(log, l);
}

// ---------------------------------------------------------------------------
// Comparisons
// ---------------------------------------------------------------------------

// Expects `got` to equal the shape (and, with `strides`, the strides) of `l`.
inline void ExpectDims(int32_t ndim, const int64_t *shape, const int64_t *strides,
                       const std::vector<int64_t> &want_shape,
                       const std::vector<int64_t> &want_strides) {
  ASSERT_EQ(ndim, static_cast<int32_t>(want_shape.size()));
  if (ndim == 0) return;
  ASSERT_NE(shape, nullptr);
  ASSERT_NE(strides, nullptr) << "strides must be given when ndim > 0";
  for (int32_t k = 0; k < ndim; ++k) {
    EXPECT_EQ(shape[k], want_shape[static_cast<size_t>(k)]) << "shape[" << k << "]";
    EXPECT_EQ(strides[k], want_strides[static_cast<size_t>(k)]) << "strides[" << k << "]";
  }
}

// Expects a DLTensor to describe `l` exactly (strides: l's, or compact when
// l has none), with data `data`.
inline void ExpectTensorIs(const DLTensor &t, const Layout &l, const void *data) {
  SCOPED_TRACE(describe(l));
  EXPECT_EQ(t.data, data);
  EXPECT_EQ(static_cast<int32_t>(t.device.device_type), l.device_type);
  EXPECT_EQ(t.device.device_id, l.device_id);
  EXPECT_EQ(t.dtype.code, l.dtype.code);
  EXPECT_EQ(t.dtype.bits, l.dtype.bits);
  EXPECT_EQ(t.dtype.lanes, l.dtype.lanes);
  EXPECT_EQ(t.byte_offset, l.byte_offset);
  ExpectDims(t.ndim, t.shape, t.strides, l.shape, l.has_strides ? l.strides : compact(l.shape));
}

// Expects a handle to describe `l` exactly with flags `flags`.
inline void ExpectHandleIs(const hurray_buffer &h, const Layout &l, const void *data,
                           uint64_t flags) {
  SCOPED_TRACE(describe(l));
  EXPECT_EQ(h.version, HURRAY_BUFFER_VERSION);
  EXPECT_NE(h.release_fn, nullptr);
  EXPECT_EQ(h.flags, flags);
  EXPECT_EQ(h.data, data);
  EXPECT_EQ(h.byte_offset, l.byte_offset);
  EXPECT_EQ(h.device.device_type, l.device_type);
  EXPECT_EQ(h.device.device_id, l.device_id);
  EXPECT_EQ(h.dtype.code, l.dtype.code);
  EXPECT_EQ(h.dtype.bits, l.dtype.bits);
  EXPECT_EQ(h.dtype.lanes, l.dtype.lanes);
  ExpectDims(h.ndim, h.shape, h.strides, l.shape, l.has_strides ? l.strides : compact(l.shape));
}

inline bool same_bytes(const hurray_buffer &a, const hurray_buffer &b) {
  return std::memcmp(&a, &b, sizeof a) == 0;
}

inline bool is_zeroed(const hurray_buffer &h) {
  hurray_buffer z;
  std::memset(&z, 0, sizeof z);
  return same_bytes(h, z);
}

// A handle filled with a recognisable pattern, to check "out untouched".
inline hurray_buffer sentinel_handle() {
  hurray_buffer h;
  std::memset(&h, 0xA5, sizeof h);
  return h;
}

// A pointer value used to check that an out pointer was not written.
template <typename T>
T *sentinel_ptr() {
  return reinterpret_cast<T *>(static_cast<uintptr_t>(0x5EB71E1));
}

// Every (code, bits) pair DLPack 1.3 defines, one per code, with a name.
struct DtypeCase {
  const char *name;
  hurray_dtype dtype;
};
inline std::vector<DtypeCase> all_dlpack13_dtypes() {
  return {
      {"int8", dt(kDLInt, 8)},
      {"int4", dt(kDLInt, 4)},
      {"uint64", dt(kDLUInt, 64)},
      {"uint1", dt(kDLUInt, 1)},
      {"float16", dt(kDLFloat, 16)},
      {"float64", dt(kDLFloat, 64)},
      {"opaque64", dt(kDLOpaqueHandle, 64)},
      {"bfloat16", dt(kDLBfloat, 16)},
      {"complex64", dt(kDLComplex, 64)},
      {"complex128", dt(kDLComplex, 128)},
      {"bool", dt(kDLBool, 8)},
      {"float8_e3m4", dt(kDLFloat8_e3m4, 8)},
      {"float8_e4m3", dt(kDLFloat8_e4m3, 8)},
      {"float8_e4m3b11fnuz", dt(kDLFloat8_e4m3b11fnuz, 8)},
      {"float8_e4m3fn", dt(kDLFloat8_e4m3fn, 8)},
      {"float8_e4m3fnuz", dt(kDLFloat8_e4m3fnuz, 8)},
      {"float8_e5m2", dt(kDLFloat8_e5m2, 8)},
      {"float8_e5m2fnuz", dt(kDLFloat8_e5m2fnuz, 8)},
      {"float8_e8m0fnu", dt(kDLFloat8_e8m0fnu, 8)},
      {"float6_e2m3fn", dt(kDLFloat6_e2m3fn, 6)},
      {"float6_e3m2fn", dt(kDLFloat6_e3m2fn, 6)},
      {"float4_e2m1fn", dt(kDLFloat4_e2m1fn, 4)},
  };
}

// Layouts that every conversion must accept and keep exactly:
// 0-d, zero-size, non-contiguous, Fortran order, negative and zero strides,
// size-1 dims with any stride, byte_offset, lanes, every DLPack 1.3 dtype
// (sub-byte ones also padded), flags, and devices with non-zero ids.
inline std::vector<Layout> preserved_layouts() {
  std::vector<Layout> out;
  auto add = [&](const std::string &name, Layout l) {
    l.name = name;
    out.push_back(std::move(l));
  };
  auto strided = [](std::vector<int64_t> shape, std::vector<int64_t> strides) {
    Layout l;
    l.shape = std::move(shape);
    l.strides = std::move(strides);
    return l;
  };
  {
    Layout l = dense({});
    l.null_shape = true;
    l.has_strides = false;
    add("0-d with NULL shape and strides", l);
  }
  add("0-d with shape and strides pointers", dense({}));
  {
    Layout l = dense({0, 3});
    l.null_data = true;
    add("zero-size with NULL data", l);
  }
  add("zero-size with data", dense({3, 0, 2}));
  add("gapped rows", strided({2, 3}, {8, 2}));
  add("Fortran order", strided({2, 3, 4}, {1, 2, 6}));
  {
    Layout l = strided({3, 4}, {-4, -1});
    l.byte_offset = 44;  // element (0,0) is the last one in memory
    add("negative strides", l);
  }
  add("stride 0 (broadcast)", strided({4, 3}, {0, 1}));
  add("size-1 dims with any stride", strided({1, 3, 1}, {12345, 1, -99}));
  {
    Layout l = dense({2, 2});
    l.byte_offset = 40;
    add("byte_offset 40", l);
  }
  add("lanes 4", dense({3}, dt(kDLFloat, 32, 4)));
  add("uint8 lanes 16", dense({2}, dt(kDLUInt, 8, 16)));
  for (const DtypeCase &c : all_dlpack13_dtypes()) {
    add(std::string("dtype ") + c.name, dense({5}, c.dtype));
    if (c.dtype.bits < 8) {
      Layout l = dense({5}, c.dtype);
      l.flags = HURRAY_FLAG_SUBBYTE_PADDED;
      add(std::string("dtype ") + c.name + " padded", l);
    }
  }
  {
    Layout l = dense({4});
    l.flags = HURRAY_FLAG_READ_ONLY;
    add("read-only", l);
  }
  {
    Layout l = dense({4});
    l.flags = HURRAY_FLAG_IS_COPIED | (uint64_t{1} << 40) | (uint64_t{1} << 63);
    add("is-copied and reserved flag bits", l);
  }
  const struct {
    const char *name;
    int32_t type, id;
  } devices[] = {{"kDLCUDA id 3", kDLCUDA, 3},
                 {"kDLROCM id 7", kDLROCM, 7},
                 {"kDLCUDAHost", kDLCUDAHost, 0},
                 {"kDLCUDAManaged", kDLCUDAManaged, 0},
                 {"kDLOneAPI id 1", kDLOneAPI, 1},
                 {"kDLTrn id 2", kDLTrn, 2},
                 {"kDLVulkan id 65535", kDLVulkan, 65535}};
  for (const auto &d : devices) {
    Layout l = strided({2, 3}, {1, 2});
    l.device_type = d.type;
    l.device_id = d.id;
    add(d.name, l);
  }
  return out;
}

}  // namespace hurray_test

#endif  // HURRAY_TESTS_SUPPORT_HURRAY_TEST_SUPPORT_H_
