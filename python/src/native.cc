// hurray._native: the CPython binding of libhurray's C ABI.
//
// One Python object, hurray.Buffer, owns one hurray_buffer handle. The rules
// that keep every release exactly-once, and the threading and shutdown
// policy of the callbacks below, are written down in docs/impl/python.md;
// the comments here point at the places that implement them.
//
// Only the public C ABI (include/hurray/hurray.h, which brings the project's
// DLPack declarations, hurray/dlpack.h) is used; libhurray does every
// conversion.
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <pthread.h>
#include <time.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "hurray/hurray.h"
#include "exchange_api.h"

static_assert(sizeof(DLTensor) == 48, "DLTensor layout");
static_assert(sizeof(DLManagedTensor) == 64, "DLManagedTensor layout");
static_assert(sizeof(DLManagedTensorVersioned) == 80, "DLManagedTensorVersioned layout");
static_assert(offsetof(DLManagedTensorVersioned, flags) == 24, "flags offset");

namespace {

constexpr const char kCapsuleVersioned[] = "dltensor_versioned";
constexpr const char kCapsuleLegacy[] = "dltensor";
constexpr const char kCapsuleVersionedUsed[] = "used_dltensor_versioned";
constexpr const char kCapsuleLegacyUsed[] = "used_dltensor";

// ---------------------------------------------------------------------------
// Module-wide constants, set once in module init.
// ---------------------------------------------------------------------------
PyObject *g_str_dlpack;          // "__dlpack__"
PyObject *g_str_dlpack_device;   // "__dlpack_device__"
PyObject *g_str_stream;          // keyword names
PyObject *g_str_max_version;
PyObject *g_str_dl_device;
PyObject *g_str_copy;
PyObject *g_str_device;
PyObject *g_max_version;          // (1, 3): the version from_dlpack asks for
PyObject *g_kw_max_version;       // ("max_version",)
// The deleters libhurray puts on the tensors it exports. A tensor carrying
// one of them owns only libhurray handles that this module already made
// GIL-safe, so it needs no second wrapper on import.
void (*g_hurray_versioned_deleter)(DLManagedTensorVersioned *);
void (*g_hurray_legacy_deleter)(DLManagedTensor *);

// ---------------------------------------------------------------------------
// Errors
// ---------------------------------------------------------------------------

PyObject *exception_for(int32_t status) {
  switch (status) {
    case HURRAY_ERR_INVALID_ARGUMENT:
    case HURRAY_ERR_OVERFLOW:
      return PyExc_ValueError;
    case HURRAY_ERR_UNSUPPORTED_VERSION:
    case HURRAY_ERR_UNSUPPORTED_DTYPE:
    case HURRAY_ERR_UNSUPPORTED_DEVICE:
    case HURRAY_ERR_DEVICE:
      return PyExc_BufferError;
    case HURRAY_ERR_OUT_OF_MEMORY:
      return PyExc_MemoryError;
    default:
      return PyExc_RuntimeError;
  }
}

// Raises the Python exception for a failed libhurray call, with libhurray's
// own message. Must be called right after the failing call (the message is
// per thread and replaced by the next call). Always returns nullptr.
PyObject *raise_status(int32_t status, const char *what) {
  PyErr_Format(exception_for(status), "%s: %s [%s]", what, hurray_last_error(),
               hurray_status_name(status));
  return nullptr;
}

// Saves and restores the current exception around code that may run Python
// (a release can drop the last reference to an object with finalizers).
struct SavedError {
#if PY_VERSION_HEX >= 0x030C0000
  PyObject *exc;
  SavedError() : exc(PyErr_GetRaisedException()) {}
  ~SavedError() { PyErr_SetRaisedException(exc); }
#else
  PyObject *type, *value, *tb;
  SavedError() { PyErr_Fetch(&type, &value, &tb); }
  ~SavedError() { PyErr_Restore(type, value, tb); }
#endif
  SavedError(const SavedError &) = delete;
  SavedError &operator=(const SavedError &) = delete;
};

// ---------------------------------------------------------------------------
// Foreign releases: the one callback of this module that touches Python.
//
// A DLPack tensor imported from a Python producer (NumPy, JAX, TVM FFI, any
// raw capsule) has a deleter that may decref Python objects. libhurray may
// call it from any thread (the last consumer decides), so hurray.from_dlpack
// wraps the imported handle's release in foreign_release, which
//   - skips the deleter (leaks) once the interpreter is finalizing or gone,
//   - calls it directly when this thread already holds the GIL,
//   - otherwise takes the GIL with PyGILState_Ensure around it.
// See docs/impl/python.md, "Threads and shutdown".
// ---------------------------------------------------------------------------

struct ForeignRelease {
  hurray_release_fn fn;
  void *user_data;
};

bool interpreter_running() {
  if (!Py_IsInitialized()) return false;
#if PY_VERSION_HEX >= 0x030D0000
  return !Py_IsFinalizing();
#else
  return !_Py_IsFinalizing();
#endif
}

void foreign_release(void *block) {
  ForeignRelease r = *static_cast<ForeignRelease *>(block);
  std::free(block);
  if (!interpreter_running()) return;  // deliberate leak: see docs/impl/python.md
  if (PyGILState_Check()) {
    SavedError saved;
    r.fn(r.user_data);
    return;
  }
  PyGILState_STATE gil = PyGILState_Ensure();
  {
    SavedError saved;
    r.fn(r.user_data);
  }
  PyGILState_Release(gil);
}

// Releases a handle owned by C code on a thread that holds the GIL, keeping
// any pending exception.
void release_handle(hurray_buffer *h) {
  if (h->release_fn == nullptr) return;
  SavedError saved;
  (void)hurray_buffer_release(h);
}

// ---------------------------------------------------------------------------
// dtype names
// ---------------------------------------------------------------------------

struct NamedCode {
  uint8_t code;
  const char *prefix;  // name is prefix + bits unless fixed_bits != 0
  uint8_t fixed_bits;  // names that only exist at one width
};

const NamedCode kNamedCodes[] = {
    {0, "int", 0},
    {1, "uint", 0},
    {2, "float", 0},
    {3, "handle", 0},
    {4, "bfloat", 0},
    {5, "complex", 0},
    {6, "bool", 8},
    {7, "float8_e3m4", 8},
    {8, "float8_e4m3", 8},
    {9, "float8_e4m3b11fnuz", 8},
    {10, "float8_e4m3fn", 8},
    {11, "float8_e4m3fnuz", 8},
    {12, "float8_e5m2", 8},
    {13, "float8_e5m2fnuz", 8},
    {14, "float8_e8m0fnu", 8},
    {15, "float6_e2m3fn", 6},
    {16, "float6_e3m2fn", 6},
    {17, "float4_e2m1fn", 4},
};

PyObject *dtype_name(hurray_dtype d) {
  char base[64];
  const NamedCode *named = nullptr;
  for (const NamedCode &n : kNamedCodes) {
    if (n.code == d.code) named = &n;
  }
  if (named == nullptr) {
    std::snprintf(base, sizeof base, "dtype(code=%u,bits=%u)", d.code, d.bits);
  } else if (named->fixed_bits != 0 && named->fixed_bits == d.bits) {
    std::snprintf(base, sizeof base, "%s", named->prefix);
  } else if (named->fixed_bits != 0) {
    std::snprintf(base, sizeof base, "%s(bits=%u)", named->prefix, d.bits);
  } else {
    std::snprintf(base, sizeof base, "%s%u", named->prefix, d.bits);
  }
  if (d.lanes != 1) return PyUnicode_FromFormat("%sx%u", base, static_cast<unsigned>(d.lanes));
  return PyUnicode_FromString(base);
}

// Matches a scalar dtype name ("float32", "float8_e4m3fn", "bool") exactly.
// Longest prefix wins, so "float8_e4m3fn" does not match "float8_e4m3".
bool parse_scalar_dtype(const char *name, hurray_dtype *out) {
  const NamedCode *best = nullptr;
  size_t best_len = 0;
  unsigned long bits = 0;
  for (const NamedCode &n : kNamedCodes) {
    size_t len = std::strlen(n.prefix);
    if (std::strncmp(name, n.prefix, len) != 0 || len < best_len) continue;
    const char *rest = name + len;
    if (n.fixed_bits != 0) {
      if (*rest != '\0') continue;
      best = &n, best_len = len, bits = n.fixed_bits;
    } else {
      char *end = nullptr;
      unsigned long v = std::strtoul(rest, &end, 10);
      if (*rest < '0' || *rest > '9' || *end != '\0' || v == 0 || v > 255) continue;
      best = &n, best_len = len, bits = v;
    }
  }
  if (best == nullptr) return false;
  *out = hurray_dtype{best->code, static_cast<uint8_t>(bits), 1};
  return true;
}

// Parses "float32", "bfloat16", "float8_e4m3fn", "complex64", and vector
// types "float32x4". Returns false (exception set) for an unknown name.
bool parse_dtype_name(PyObject *obj, hurray_dtype *out) {
  if (!PyUnicode_Check(obj)) {
    PyErr_Format(PyExc_TypeError, "dtype must be a str such as 'float32', not %.100s",
                 Py_TYPE(obj)->tp_name);
    return false;
  }
  const char *s = PyUnicode_AsUTF8(obj);
  if (s == nullptr) return false;
  char name[64];
  if (std::strlen(s) < sizeof name) {
    std::snprintf(name, sizeof name, "%s", s);
    if (parse_scalar_dtype(name, out)) return true;
    char *x = std::strrchr(name, 'x');
    if (x != nullptr && x[1] >= '0' && x[1] <= '9') {
      char *end = nullptr;
      unsigned long lanes = std::strtoul(x + 1, &end, 10);
      *x = '\0';
      if (*end == '\0' && lanes >= 1 && lanes <= 65535 && parse_scalar_dtype(name, out)) {
        out->lanes = static_cast<uint16_t>(lanes);
        return true;
      }
    }
  }
  PyErr_Format(PyExc_ValueError,
               "unknown dtype name %R (expected names like 'float32', 'bfloat16', "
               "'float8_e4m3fn', 'bool', 'complex64', 'float32x4')",
               obj);
  return false;
}

const char *device_name(int32_t type) {
  switch (type) {
    case HURRAY_DEVICE_CPU: return "cpu";
    case HURRAY_DEVICE_CUDA: return "cuda";
    case HURRAY_DEVICE_CUDA_HOST: return "cuda_host";
    case HURRAY_DEVICE_ROCM: return "rocm";
    case HURRAY_DEVICE_ROCM_HOST: return "rocm_host";
    case HURRAY_DEVICE_CUDA_MANAGED: return "cuda_managed";
    default: return "device";
  }
}

// ---------------------------------------------------------------------------
// Argument helpers
// ---------------------------------------------------------------------------

bool same_device(hurray_device a, hurray_device b) {
  return a.device_type == b.device_type && a.device_id == b.device_id;
}

// (device_type, device_id) from a 2-sequence of ints, or the string "cpu".
bool parse_device(PyObject *obj, const char *what, hurray_device *out) {
  if (PyUnicode_Check(obj)) {
    if (PyUnicode_CompareWithASCIIString(obj, "cpu") == 0) {
      *out = hurray_device{HURRAY_DEVICE_CPU, 0};
      return true;
    }
    PyErr_Format(PyExc_ValueError, "%s: unknown device %R (use \"cpu\" or a "
                 "(device_type, device_id) tuple)", what, obj);
    return false;
  }
  if (!PyTuple_Check(obj) && !PyList_Check(obj)) {
    PyErr_Format(PyExc_TypeError,
                 "%s must be a (device_type, device_id) tuple, not %.100s", what,
                 Py_TYPE(obj)->tp_name);
    return false;
  }
  PyObject *seq = PySequence_Fast(obj, what);
  if (seq == nullptr) return false;
  bool ok = false;
  if (PySequence_Fast_GET_SIZE(seq) != 2) {
    PyErr_Format(PyExc_ValueError, "%s must have 2 items (device_type, device_id), got %zd",
                 what, PySequence_Fast_GET_SIZE(seq));
  } else {
    PyObject *t = PySequence_Fast_GET_ITEM(seq, 0);
    PyObject *i = PySequence_Fast_GET_ITEM(seq, 1);
    if (!PyLong_Check(t) || !PyLong_Check(i)) {
      PyErr_Format(PyExc_TypeError, "%s items must be ints", what);
    } else {
      long type = PyLong_AsLong(t);
      long id = PyLong_AsLong(i);
      if ((type == -1 || id == -1) && PyErr_Occurred()) {
        // overflow: leave the OverflowError's text, but make it a ValueError
        PyErr_Clear();
        PyErr_Format(PyExc_ValueError, "%s is out of range", what);
      } else if (type < INT32_MIN || type > INT32_MAX || id < INT32_MIN || id > INT32_MAX) {
        PyErr_Format(PyExc_ValueError, "%s is out of range", what);
      } else {
        *out = hurray_device{static_cast<int32_t>(type), static_cast<int32_t>(id)};
        ok = true;
      }
    }
  }
  Py_DECREF(seq);
  return ok;
}

// copy=None -> -1, False -> 0, True -> 1; -2 on error.
int parse_copy(PyObject *obj) {
  if (obj == Py_None) return -1;
  if (obj == Py_True) return 1;
  if (obj == Py_False) return 0;
  int v = PyObject_IsTrue(obj);
  return v < 0 ? -2 : v;
}

bool kw_is(PyObject *key, PyObject *name) {
  return key == name || PyUnicode_Compare(key, name) == 0;
}

// ---------------------------------------------------------------------------
// hurray.Buffer
// ---------------------------------------------------------------------------

struct BufferObject {
  PyObject_HEAD
  hurray_buffer h;  // release_fn == NULL once released
  PyObject *weakreflist;
};

extern PyTypeObject BufferType;

// Wraps a live handle in a new Buffer. Consumes *h in every case: on
// failure the handle is released and nullptr returned.
PyObject *new_buffer(hurray_buffer *h) {
  BufferObject *b = PyObject_New(BufferObject, &BufferType);
  if (b == nullptr) {
    if (PyErr_ExceptionMatches(PyExc_MemoryError)) {
      PyErr_Clear();
      PyErr_SetString(PyExc_MemoryError, "hurray: out of memory for a hurray.Buffer object");
    }
    release_handle(h);
    return nullptr;
  }
  b->h = *h;
  b->weakreflist = nullptr;
  std::memset(h, 0, sizeof *h);
  return reinterpret_cast<PyObject *>(b);
}

bool is_live(const BufferObject *b) { return b->h.release_fn != nullptr; }

bool check_live(const BufferObject *b) {
  if (is_live(b)) return true;
  PyErr_SetString(PyExc_ValueError, "operation on a released hurray.Buffer");
  return false;
}

// Takes the handle out of the object first, then releases it: the release
// may run arbitrary Python code (finalizers of the source), which must find
// the Buffer already released, never half-way.
void buffer_release_now(BufferObject *b) {
  if (!is_live(b)) return;
  hurray_buffer h = b->h;
  std::memset(&b->h, 0, sizeof b->h);
  release_handle(&h);
}

void Buffer_dealloc(PyObject *self) {
  auto *b = reinterpret_cast<BufferObject *>(self);
  if (b->weakreflist != nullptr) PyObject_ClearWeakRefs(self);
  buffer_release_now(b);
  Py_TYPE(self)->tp_free(self);
}

PyObject *Buffer_repr(PyObject *self) {
  auto *b = reinterpret_cast<BufferObject *>(self);
  if (!is_live(b)) return PyUnicode_FromString("<hurray.Buffer (released)>");
  PyObject *dt = dtype_name(b->h.dtype);
  if (dt == nullptr) return nullptr;
  char dims[512];
  size_t pos = 0;
  dims[0] = '\0';
  for (int32_t i = 0; i < b->h.ndim && pos < sizeof dims - 32; ++i) {
    pos += static_cast<size_t>(std::snprintf(dims + pos, sizeof dims - pos, "%s%lld",
                                             i ? ", " : "", static_cast<long long>(b->h.shape[i])));
  }
  PyObject *r = PyUnicode_FromFormat("<hurray.Buffer %U[%s] %s:%d%s>", dt, dims,
                                     device_name(b->h.device.device_type),
                                     static_cast<int>(b->h.device.device_id),
                                     (b->h.flags & HURRAY_FLAG_READ_ONLY) ? " readonly" : "");
  Py_DECREF(dt);
  return r;
}

// --- properties -----------------------------------------------------------

#define LIVE_OR_FAIL(b)              \
  do {                               \
    if (!check_live(b)) return nullptr; \
  } while (0)

PyObject *int64_tuple(const int64_t *v, int32_t n) {
  PyObject *t = PyTuple_New(n);
  if (t == nullptr) return nullptr;
  for (int32_t i = 0; i < n; ++i) {
    PyObject *x = PyLong_FromLongLong(v[i]);
    if (x == nullptr) {
      Py_DECREF(t);
      return nullptr;
    }
    PyTuple_SET_ITEM(t, i, x);
  }
  return t;
}

PyObject *Buffer_get_shape(PyObject *self, void *) {
  auto *b = reinterpret_cast<BufferObject *>(self);
  LIVE_OR_FAIL(b);
  return int64_tuple(b->h.shape, b->h.ndim);
}

PyObject *Buffer_get_strides(PyObject *self, void *) {
  auto *b = reinterpret_cast<BufferObject *>(self);
  LIVE_OR_FAIL(b);
  return int64_tuple(b->h.strides, b->h.ndim);
}

PyObject *Buffer_get_ndim(PyObject *self, void *) {
  auto *b = reinterpret_cast<BufferObject *>(self);
  LIVE_OR_FAIL(b);
  return PyLong_FromLong(b->h.ndim);
}

PyObject *Buffer_get_dtype(PyObject *self, void *) {
  auto *b = reinterpret_cast<BufferObject *>(self);
  LIVE_OR_FAIL(b);
  return dtype_name(b->h.dtype);
}

PyObject *Buffer_get_device(PyObject *self, void *) {
  auto *b = reinterpret_cast<BufferObject *>(self);
  LIVE_OR_FAIL(b);
  return Py_BuildValue("(ii)", b->h.device.device_type, b->h.device.device_id);
}

PyObject *Buffer_get_readonly(PyObject *self, void *) {
  auto *b = reinterpret_cast<BufferObject *>(self);
  LIVE_OR_FAIL(b);
  return PyBool_FromLong((b->h.flags & HURRAY_FLAG_READ_ONLY) != 0);
}

PyObject *Buffer_get_is_copied(PyObject *self, void *) {
  auto *b = reinterpret_cast<BufferObject *>(self);
  LIVE_OR_FAIL(b);
  return PyBool_FromLong((b->h.flags & HURRAY_FLAG_IS_COPIED) != 0);
}

PyObject *Buffer_get_data_ptr(PyObject *self, void *) {
  auto *b = reinterpret_cast<BufferObject *>(self);
  LIVE_OR_FAIL(b);
  uintptr_t p = reinterpret_cast<uintptr_t>(b->h.data) + static_cast<uintptr_t>(b->h.byte_offset);
  return PyLong_FromUnsignedLongLong(p);
}

PyObject *Buffer_get_byte_offset(PyObject *self, void *) {
  auto *b = reinterpret_cast<BufferObject *>(self);
  LIVE_OR_FAIL(b);
  return PyLong_FromUnsignedLongLong(b->h.byte_offset);
}

PyObject *Buffer_get_size(PyObject *self, void *) {
  auto *b = reinterpret_cast<BufferObject *>(self);
  LIVE_OR_FAIL(b);
  hurray_extent e;
  int32_t st = hurray_buffer_extent(&b->h, &e);
  if (st != HURRAY_OK) return raise_status(st, "hurray.Buffer.size");
  return PyLong_FromLongLong(e.numel);
}

PyObject *Buffer_get_nbytes(PyObject *self, void *) {
  auto *b = reinterpret_cast<BufferObject *>(self);
  LIVE_OR_FAIL(b);
  hurray_extent e;
  int32_t st = hurray_buffer_extent(&b->h, &e);
  if (st != HURRAY_OK) return raise_status(st, "hurray.Buffer.nbytes");
  // Bytes the elements occupy (sub-byte elements packed unless padded).
  unsigned __int128 bits = static_cast<unsigned __int128>(e.numel) *
                           static_cast<unsigned __int128>(e.itemsize_bits);
  return PyLong_FromUnsignedLongLong(static_cast<unsigned long long>((bits + 7) / 8));
}

PyObject *Buffer_get_released(PyObject *self, void *) {
  return PyBool_FromLong(!is_live(reinterpret_cast<BufferObject *>(self)));
}

PyGetSetDef Buffer_getset[] = {
    {"shape", Buffer_get_shape, nullptr, "Extents, a tuple of ints.", nullptr},
    {"strides", Buffer_get_strides, nullptr,
     "Strides in elements (not bytes), a tuple of ints; may be 0 or negative.", nullptr},
    {"ndim", Buffer_get_ndim, nullptr, "Number of dimensions.", nullptr},
    {"dtype", Buffer_get_dtype, nullptr,
     "Element type name: 'float32', 'bfloat16', 'float8_e4m3fn', 'bool', ...", nullptr},
    {"device", Buffer_get_device, nullptr,
     "(device_type, device_id) with DLPack's device type values (CPU is (1, 0)).", nullptr},
    {"readonly", Buffer_get_readonly, nullptr, "True if the memory must not be written.",
     nullptr},
    {"is_copied", Buffer_get_is_copied, nullptr,
     "True if the memory is a private copy made for this buffer.", nullptr},
    {"data_ptr", Buffer_get_data_ptr, nullptr,
     "Address of element (0, ..., 0), i.e. data + byte_offset, as an int.", nullptr},
    {"byte_offset", Buffer_get_byte_offset, nullptr,
     "Bytes from the DLPack data pointer to element (0, ..., 0).", nullptr},
    {"size", Buffer_get_size, nullptr, "Number of elements.", nullptr},
    {"nbytes", Buffer_get_nbytes, nullptr, "Bytes taken by the elements.", nullptr},
    {"released", Buffer_get_released, nullptr,
     "True once this buffer's handle has been released.", nullptr},
    {nullptr, nullptr, nullptr, nullptr, nullptr},
};

// --- capsules -------------------------------------------------------------

// Capsule destructors: run by Python (GIL held) when a capsule dies. Only a
// capsule nobody consumed (name unchanged) still owns its tensor.
void versioned_capsule_destructor(PyObject *cap) {
  if (!PyCapsule_IsValid(cap, kCapsuleVersioned)) return;
  SavedError saved;
  auto *t = static_cast<DLManagedTensorVersioned *>(PyCapsule_GetPointer(cap, kCapsuleVersioned));
  (void)hurray_dlpack_versioned_delete(t);
}

void legacy_capsule_destructor(PyObject *cap) {
  if (!PyCapsule_IsValid(cap, kCapsuleLegacy)) return;
  SavedError saved;
  auto *t = static_cast<DLManagedTensor *>(PyCapsule_GetPointer(cap, kCapsuleLegacy));
  (void)hurray_dlpack_delete(t);
}

// Exports a handle as a new capsule. Consumes *h in every case.
PyObject *export_capsule(hurray_buffer *h, bool versioned) {
  if (versioned) {
    DLManagedTensorVersioned *t = nullptr;
    int32_t st = hurray_to_dlpack_versioned(h, &t);
    if (st != HURRAY_OK) {
      raise_status(st, "hurray.Buffer.__dlpack__");
      release_handle(h);
      return nullptr;
    }
    PyObject *cap = PyCapsule_New(t, kCapsuleVersioned, versioned_capsule_destructor);
    if (cap == nullptr) {
      SavedError saved;
      (void)hurray_dlpack_versioned_delete(t);
    }
    return cap;
  }
  DLManagedTensor *t = nullptr;
  int32_t st = hurray_to_dlpack(h, &t);
  if (st != HURRAY_OK) {
    raise_status(st, "hurray.Buffer.__dlpack__");
    release_handle(h);
    return nullptr;
  }
  PyObject *cap = PyCapsule_New(t, kCapsuleLegacy, legacy_capsule_destructor);
  if (cap == nullptr) {
    SavedError saved;
    (void)hurray_dlpack_delete(t);
  }
  return cap;
}

// Stream handling of __dlpack__ (DLPack Python protocol).
//
// A Buffer on a GPU is ordered on its device's default stream: from_dlpack
// never passes a stream, which asks a producer to order its pending work
// before the legacy default stream (CUDA) / the default stream (ROCm), and
// libhurray's own allocations and synchronous copies complete there too.
// Exporting to a consumer on another stream makes that stream wait for the
// default stream on the device (hurray_stream_wait: an event, no host
// blocking). See docs/impl/python.md, "Streams and devices".
enum class StreamFamily { kHost, kCuda, kRocm, kOther };

StreamFamily stream_family(int32_t device_type) {
  switch (device_type) {
    case HURRAY_DEVICE_CPU:
      return StreamFamily::kHost;
    case HURRAY_DEVICE_CUDA:
    case HURRAY_DEVICE_CUDA_HOST:
    case HURRAY_DEVICE_CUDA_MANAGED:
      return StreamFamily::kCuda;
    case HURRAY_DEVICE_ROCM:
    case HURRAY_DEVICE_ROCM_HOST:
      return StreamFamily::kRocm;
    default:
      return StreamFamily::kOther;
  }
}

// Checks `stream` against the rules for a consumer on `device_type` and
// gives the stream handle to wait on: *sync is false for -1 (the consumer
// synchronises itself) and for devices without streams.
bool parse_stream(int32_t device_type, PyObject *stream, bool *sync, void **handle) {
  const StreamFamily family = stream_family(device_type);
  long long s;
  if (stream == Py_None) {
    s = family == StreamFamily::kCuda ? 1 : 0;  // CUDA: legacy default; ROCm: default
  } else {
    if (!PyLong_Check(stream)) {
      PyErr_Format(PyExc_TypeError, "__dlpack__: stream must be an int or None, not %.100s",
                   Py_TYPE(stream)->tp_name);
      return false;
    }
    int overflow = 0;
    s = PyLong_AsLongLongAndOverflow(stream, &overflow);
    if (overflow != 0 || (s == -1 && PyErr_Occurred())) {
      PyErr_Clear();
      PyErr_SetString(PyExc_ValueError, "__dlpack__: stream is out of range");
      return false;
    }
  }
  *sync = false;
  *handle = nullptr;
  switch (family) {
    case StreamFamily::kHost:
      if (stream != Py_None && s != -1) {
        PyErr_Format(PyExc_ValueError,
                     "__dlpack__: stream must be None or -1 for a CPU consumer, got %lld", s);
        return false;
      }
      return true;
    case StreamFamily::kCuda:
      if (s == 0 || s < -1) {
        PyErr_Format(PyExc_ValueError,
                     "__dlpack__: stream %lld is not valid for CUDA (None or 1: legacy "
                     "default stream, 2: per-thread default stream, >2: a cudaStream_t, "
                     "-1: no synchronisation)",
                     s);
        return false;
      }
      break;
    case StreamFamily::kRocm:
      if (s == 1 || s == 2 || s < -1) {
        PyErr_Format(PyExc_ValueError,
                     "__dlpack__: stream %lld is not valid for ROCm (None or 0: default "
                     "stream, >2: a hipStream_t, -1: no synchronisation)",
                     s);
        return false;
      }
      break;
    case StreamFamily::kOther:
      return true;  // no stream convention known: nothing to order
  }
  if (s == -1) return true;
  *sync = true;
  *handle = reinterpret_cast<void *>(static_cast<uintptr_t>(s));
  return true;
}

// The stream a GPU Buffer's memory is ordered on (see above).
void *buffer_stream(int32_t device_type) {
  return stream_family(device_type) == StreamFamily::kCuda ? reinterpret_cast<void *>(1)
                                                           : nullptr;
}

// __dlpack__(*, stream=None, max_version=None, dl_device=None, copy=None)
//
// Without a copy every call shares the buffer's handle once more
// (hurray_share): the capsule owns one reference of its own, so the buffer
// stays usable and whichever of the buffer and its capsules goes last frees
// the memory. With a copy the capsule owns a fresh private allocation.
PyObject *Buffer_dlpack(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                        PyObject *kwnames) {
  auto *b = reinterpret_cast<BufferObject *>(self);
  PyObject *stream = Py_None, *max_version = Py_None, *dl_device = Py_None, *copy = Py_None;
  if (nargs > 1) {
    PyErr_Format(PyExc_TypeError, "__dlpack__() takes at most 1 positional argument (%zd given)",
                 nargs);
    return nullptr;
  }
  if (nargs == 1) stream = args[0];  // older callers pass stream positionally
  if (kwnames != nullptr) {
    Py_ssize_t nkw = PyTuple_GET_SIZE(kwnames);
    for (Py_ssize_t i = 0; i < nkw; ++i) {
      PyObject *key = PyTuple_GET_ITEM(kwnames, i);
      PyObject *value = args[nargs + i];
      if (kw_is(key, g_str_max_version)) {
        max_version = value;
      } else if (kw_is(key, g_str_copy)) {
        copy = value;
      } else if (kw_is(key, g_str_dl_device)) {
        dl_device = value;
      } else if (kw_is(key, g_str_stream)) {
        if (nargs == 1) {
          PyErr_SetString(PyExc_TypeError, "__dlpack__() got multiple values for 'stream'");
          return nullptr;
        }
        stream = value;
      } else {
        if (!PyErr_Occurred()) {
          PyErr_Format(PyExc_TypeError, "__dlpack__() got an unexpected keyword argument '%U'",
                       key);
        }
        return nullptr;
      }
    }
  }
  if (!check_live(b)) return nullptr;

  bool versioned = false;
  if (max_version != Py_None) {
    if (!PyTuple_Check(max_version) || PyTuple_GET_SIZE(max_version) != 2 ||
        !PyLong_Check(PyTuple_GET_ITEM(max_version, 0)) ||
        !PyLong_Check(PyTuple_GET_ITEM(max_version, 1))) {
      PyErr_SetString(PyExc_TypeError,
                      "__dlpack__: max_version must be None or a (major, minor) tuple of ints");
      return nullptr;
    }
    int overflow = 0;
    long long major = PyLong_AsLongLongAndOverflow(PyTuple_GET_ITEM(max_version, 0), &overflow);
    versioned = overflow > 0 || major >= 1;
  }

  hurray_device target = b->h.device;
  if (dl_device != Py_None && !parse_device(dl_device, "__dlpack__: dl_device", &target)) {
    return nullptr;
  }
  const bool other_device = !same_device(target, b->h.device);
  // The stream is the consumer's, on the device it will use the data on.
  bool sync = false;
  void *consumer_stream = nullptr;
  if (!parse_stream(target.device_type, stream, &sync, &consumer_stream)) return nullptr;
  const int copy_mode = parse_copy(copy);
  if (copy_mode == -2) return nullptr;
  if (other_device && copy_mode == 0) {
    PyErr_Format(PyExc_BufferError,
                 "__dlpack__: the buffer is on device (%d, %d) and dl_device=(%d, %d) asks for "
                 "another one, which needs a copy, but copy=False",
                 b->h.device.device_type, b->h.device.device_id, target.device_type,
                 target.device_id);
    return nullptr;
  }
  const bool make_copy = copy_mode == 1 || other_device;
  if (!versioned && !make_copy && (b->h.flags & HURRAY_FLAG_READ_ONLY)) {
    PyErr_SetString(PyExc_BufferError,
                    "__dlpack__: the buffer is read-only and the legacy (unversioned) DLPack "
                    "struct cannot say so; ask for max_version >= (1, 0) or copy=True");
    return nullptr;
  }

  hurray_buffer out;
  if (make_copy) {
    int32_t st = hurray_copy(&b->h, target, &out);
    if (st != HURRAY_OK) return raise_status(st, "hurray.Buffer.__dlpack__ (copy)");
  } else {
    // Zero-copy: order the consumer's stream after the buffer's. (A copy
    // above completes before hurray_copy returns: nothing to order.)
    void *producer_stream = buffer_stream(b->h.device.device_type);
    if (sync && consumer_stream != producer_stream) {
      int32_t st = hurray_stream_wait(b->h.device, producer_stream, consumer_stream);
      if (st != HURRAY_OK) return raise_status(st, "hurray.Buffer.__dlpack__ (stream wait)");
    }
    hurray_buffer pair[2];
    int32_t st = hurray_share(&b->h, 2, pair);
    if (st != HURRAY_OK) return raise_status(st, "hurray.Buffer.__dlpack__");
    b->h = pair[0];
    out = pair[1];
  }
  return export_capsule(&out, versioned);
}

PyObject *Buffer_dlpack_device(PyObject *self, PyObject *) {
  auto *b = reinterpret_cast<BufferObject *>(self);
  LIVE_OR_FAIL(b);
  return Py_BuildValue("(ii)", b->h.device.device_type, b->h.device.device_id);
}

// hurray_share hands out at most 2^32 handles per call (docs/impl/c-ffi.md)
// and share(n) asks it for n + 1: the Buffer keeps one of them.
constexpr long long kMaxShare = (1LL << 32) - 1;

// Gives an out-of-memory error of share(n) a message: CPython's own
// MemoryError (PyErr_NoMemory) has none. Other errors are left as they are.
// Always returns nullptr.
PyObject *share_no_memory(long long n, const char *what) {
  if (PyErr_Occurred() != nullptr && !PyErr_ExceptionMatches(PyExc_MemoryError)) return nullptr;
  PyErr_Clear();
  PyErr_Format(PyExc_MemoryError, "hurray.Buffer.share: out of memory for %s (n is %lld)", what,
               n);
  return nullptr;
}

// share(n): n new Buffers on the same memory; this one stays valid.
//
// Everything that can fail for lack of memory is allocated before
// hurray_share, so a failure leaves the Buffer exactly as it was; only the
// creation of the Buffer objects comes after it, and a failure there gives
// back every handle no Buffer owns yet.
PyObject *Buffer_share(PyObject *self, PyObject *arg) {
  auto *b = reinterpret_cast<BufferObject *>(self);
  if (!PyLong_Check(arg)) {
    PyErr_Format(PyExc_TypeError, "share() expects an int, not %.100s", Py_TYPE(arg)->tp_name);
    return nullptr;
  }
  int overflow = 0;
  const long long n = PyLong_AsLongLongAndOverflow(arg, &overflow);
  if (n == -1 && PyErr_Occurred()) return nullptr;
  if (overflow < 0 || (overflow == 0 && n < 1)) {
    PyErr_Format(PyExc_ValueError, "share(n) needs n >= 1, got %R", arg);
    return nullptr;
  }
  if (overflow > 0 || n > kMaxShare) {
    PyErr_Format(PyExc_ValueError,
                 "hurray.Buffer.share: n is %R (at most %lld: hurray_share hands out at most "
                 "2^32 handles per call, and this Buffer keeps one of them) [%s]",
                 arg, kMaxShare, hurray_status_name(HURRAY_ERR_INVALID_ARGUMENT));
    return nullptr;
  }
  LIVE_OR_FAIL(b);
  const size_t count = static_cast<size_t>(n) + 1;
  hurray_buffer stack[9];
  hurray_buffer *out = stack;
  if (count > sizeof stack / sizeof stack[0]) {
    out = static_cast<hurray_buffer *>(PyMem_Malloc(count * sizeof *out));
    if (out == nullptr) return share_no_memory(n, "the array of handles");
  }
  PyObject *list = PyList_New(static_cast<Py_ssize_t>(n));
  if (list == nullptr) {
    if (out != stack) PyMem_Free(out);
    return share_no_memory(n, "the list of Buffers");
  }
  int32_t st = hurray_share(&b->h, count, out);
  if (st != HURRAY_OK) {
    raise_status(st, "hurray.Buffer.share");
    Py_CLEAR(list);
  } else {
    b->h = out[0];
    for (long long i = 0; i < n; ++i) {
      PyObject *nb = new_buffer(&out[i + 1]);
      if (nb == nullptr) {
        // Give back every reference not yet owned by a Buffer.
        for (long long j = i + 1; j < n; ++j) release_handle(&out[j + 1]);
        Py_CLEAR(list);
        share_no_memory(n, "the Buffer objects");
        break;
      }
      PyList_SET_ITEM(list, static_cast<Py_ssize_t>(i), nb);
    }
  }
  if (out != stack) PyMem_Free(out);
  return list;
}

PyObject *Buffer_release(PyObject *self, PyObject *) {
  buffer_release_now(reinterpret_cast<BufferObject *>(self));
  Py_RETURN_NONE;
}

PyObject *Buffer_enter(PyObject *self, PyObject *) {
  if (!check_live(reinterpret_cast<BufferObject *>(self))) return nullptr;
  Py_INCREF(self);
  return self;
}

PyObject *Buffer_exit(PyObject *self, PyObject *const *, Py_ssize_t) {
  buffer_release_now(reinterpret_cast<BufferObject *>(self));
  Py_RETURN_FALSE;
}

PyMethodDef Buffer_methods[] = {
    {"__dlpack__", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)(void)>(Buffer_dlpack)),
     METH_FASTCALL | METH_KEYWORDS,
     "__dlpack__(*, stream=None, max_version=None, dl_device=None, copy=None)\n--\n\n"
     "Export as a DLPack capsule ('dltensor_versioned' when max_version asks for\n"
     "major >= 1, else 'dltensor'). Each capsule owns its own reference."},
    {"__dlpack_device__", Buffer_dlpack_device, METH_NOARGS,
     "__dlpack_device__()\n--\n\n(device_type, device_id) of the memory."},
    {"share", Buffer_share, METH_O,
     "share(n)\n--\n\nReturn a list of n new Buffers on the same memory (fan-out).\n"
     "This buffer stays valid; the memory is freed after the last of all of them."},
    {"release", Buffer_release, METH_NOARGS,
     "release()\n--\n\nRelease this buffer's reference now. Idempotent."},
    {"__enter__", Buffer_enter, METH_NOARGS, nullptr},
    {"__exit__", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)(void)>(Buffer_exit)),
     METH_FASTCALL, nullptr},
    {nullptr, nullptr, 0, nullptr},
};

// Filled in by module init (the remaining slots stay zero).
PyTypeObject BufferType = {PyVarObject_HEAD_INIT(nullptr, 0)};

// ---------------------------------------------------------------------------
// Import: capsules and DLPack producers
// ---------------------------------------------------------------------------

// Imports one DLPack tensor (versioned or legacy) as a live handle. A
// tensor with a foreign deleter gets its release wrapped in foreign_release
// (GIL-safe on any thread); libhurray's own exports and deleter-less tensors
// are taken as they are. `what` prefixes error messages.
// Returns HURRAY_OK, or a failure status with a Python exception set, except
// that HURRAY_ERR_UNSUPPORTED_VERSION sets none: the caller words it (who
// owns the tensor then differs between the capsule and the exchange API).
// On failure the caller still owns the tensor (nothing was called on it).
int32_t import_tensor(void *ptr, bool versioned, const char *what, hurray_buffer *out) {
  bool needs_wrap;
  if (versioned) {
    auto *t = static_cast<DLManagedTensorVersioned *>(ptr);
    needs_wrap = t->deleter != nullptr && t->deleter != g_hurray_versioned_deleter;
  } else {
    auto *t = static_cast<DLManagedTensor *>(ptr);
    needs_wrap = t->deleter != nullptr && t->deleter != g_hurray_legacy_deleter;
  }
  ForeignRelease *wrap = nullptr;
  if (needs_wrap) {
    wrap = static_cast<ForeignRelease *>(std::malloc(sizeof(ForeignRelease)));
    if (wrap == nullptr) {
      PyErr_Format(PyExc_MemoryError,
                   "%s: out of memory for the %zu-byte release wrapper of the imported tensor "
                   "(the tensor was left unconsumed)",
                   what, sizeof(ForeignRelease));
      return HURRAY_ERR_OUT_OF_MEMORY;
    }
  }
  hurray_buffer h;
  int32_t st = versioned
                   ? hurray_from_dlpack_versioned(static_cast<DLManagedTensorVersioned *>(ptr),
                                                  HURRAY_IMPORT_DEFAULT, &h)
                   : hurray_from_dlpack(static_cast<DLManagedTensor *>(ptr),
                                        HURRAY_IMPORT_DEFAULT, &h);
  if (st != HURRAY_OK) {
    std::free(wrap);
    if (st != HURRAY_ERR_UNSUPPORTED_VERSION || !versioned) raise_status(st, what);
    return st;
  }
  if (wrap != nullptr) {
    wrap->fn = h.release_fn;
    wrap->user_data = h.user_data;
    h.release_fn = foreign_release;
    h.user_data = wrap;
  }
  *out = h;
  return HURRAY_OK;
}

// Takes a DLPack capsule over as a live handle and marks it used. Returns
// false with an exception set (the capsule then still owns its tensor).
bool import_capsule(PyObject *cap, hurray_buffer *out) {
  const char *name = PyCapsule_GetName(cap);
  if (name == nullptr && PyErr_Occurred()) return false;
  const bool versioned = name != nullptr && std::strcmp(name, kCapsuleVersioned) == 0;
  const bool legacy = name != nullptr && std::strcmp(name, kCapsuleLegacy) == 0;
  if (!versioned && !legacy) {
    if (name != nullptr &&
        (std::strcmp(name, kCapsuleVersionedUsed) == 0 || std::strcmp(name, kCapsuleLegacyUsed) == 0)) {
      PyErr_Format(PyExc_ValueError,
                   "hurray.from_dlpack: this DLPack capsule was already consumed (its name is "
                   "'%s'); a capsule can be imported only once; call __dlpack__() again for "
                   "another one",
                   name);
    } else {
      PyErr_Format(PyExc_TypeError,
                   "hurray.from_dlpack: expected a DLPack capsule named 'dltensor' or "
                   "'dltensor_versioned', got a capsule named %s%s%s",
                   name ? "'" : "", name ? name : "NULL", name ? "'" : "");
    }
    return false;
  }
  void *ptr = PyCapsule_GetPointer(cap, name);
  if (ptr == nullptr) return false;

  hurray_buffer h;
  int32_t st = import_tensor(ptr, versioned, "hurray.from_dlpack", &h);
  if (st == HURRAY_ERR_UNSUPPORTED_VERSION && versioned) {
    // libhurray's message speaks to C callers (they keep the tensor and
    // must call its deleter). Here the capsule keeps its name, hence the
    // tensor, and its destructor deletes it: say that instead.
    const DLPackVersion v = static_cast<DLManagedTensorVersioned *>(ptr)->version;
    PyErr_Format(PyExc_BufferError,
                 "hurray.from_dlpack: the tensor is DLPack version %u.%u, and only major "
                 "version %u can be read; the capsule was left unconsumed (still named "
                 "'%s'), and its destructor deletes the tensor [%s]",
                 static_cast<unsigned>(v.major), static_cast<unsigned>(v.minor),
                 static_cast<unsigned>(HURRAY_DLPACK_MAJOR), kCapsuleVersioned,
                 hurray_status_name(st));
  }
  if (st != HURRAY_OK) return false;
  // The handle owns the tensor now; the renamed capsule no longer does.
  // (SetName cannot fail on a capsule whose pointer was just read.)
  (void)PyCapsule_SetName(cap, versioned ? kCapsuleVersionedUsed : kCapsuleLegacyUsed);
  *out = h;
  return true;
}

// One call obj.__dlpack__(max_version=(1, 3)[, dl_device=...][, copy=...]);
// a keyword whose value is nullptr is left out.
PyObject *call_dlpack_once(PyObject *obj, PyObject *dl_device, PyObject *copy) {
  PyObject *argv[4] = {obj, g_max_version, nullptr, nullptr};
  Py_ssize_t nkw = 1;
  if (dl_device != nullptr) argv[1 + nkw++] = dl_device;
  if (copy != nullptr) argv[1 + nkw++] = copy;
  PyObject *kwnames = g_kw_max_version;
  if (nkw == 1) {
    Py_INCREF(kwnames);
  } else {
    kwnames = PyTuple_New(nkw);
    if (kwnames == nullptr) return nullptr;
    Py_INCREF(g_str_max_version);
    PyTuple_SET_ITEM(kwnames, 0, g_str_max_version);
    Py_ssize_t k = 1;
    if (dl_device != nullptr) {
      Py_INCREF(g_str_dl_device);
      PyTuple_SET_ITEM(kwnames, k++, g_str_dl_device);
    }
    if (copy != nullptr) {
      Py_INCREF(g_str_copy);
      PyTuple_SET_ITEM(kwnames, k++, g_str_copy);
    }
  }
  PyObject *cap = PyObject_VectorcallMethod(g_str_dlpack, argv, 1 | PY_VECTORCALL_ARGUMENTS_OFFSET,
                                            kwnames);
  Py_DECREF(kwnames);
  return cap;
}

// Asks a producer for its capsule (docs/impl/python.md §2, from_dlpack):
//   1. obj.__dlpack__(max_version=(1, 3)[, dl_device=...][, copy=...]);
//   2. if dl_device was passed and the producer raised BufferError or
//      NotImplementedError (it cannot export to that device, as NumPy for
//      anything but the CPU), again without dl_device: the tensor comes on
//      the producer's own device and from_dlpack copies it with hurray_copy.
//      copy=False is passed again, copy=True is not (the producer's copy
//      would be a second one);
//   3. if the producer raised TypeError (older than DLPack 1.0, the keywords
//      are unknown to it), obj.__dlpack__() without arguments.
// dl_device and copy are nullptr when not to be passed.
PyObject *call_dlpack(PyObject *obj, PyObject *copy, PyObject *dl_device) {
  PyObject *cap = call_dlpack_once(obj, dl_device, copy);
  if (cap == nullptr && dl_device != nullptr &&
      (PyErr_ExceptionMatches(PyExc_BufferError) ||
       PyErr_ExceptionMatches(PyExc_NotImplementedError))) {
    PyErr_Clear();
    cap = call_dlpack_once(obj, nullptr, copy == Py_False ? copy : nullptr);
  }
  if (cap == nullptr && PyErr_ExceptionMatches(PyExc_TypeError)) {
    PyErr_Clear();
    PyObject *argv[1] = {obj};
    cap = PyObject_VectorcallMethod(g_str_dlpack, argv, 1 | PY_VECTORCALL_ARGUMENTS_OFFSET,
                                    nullptr);
  } else if (cap == nullptr && PyErr_ExceptionMatches(PyExc_AttributeError)) {
    // Only translate a missing __dlpack__, not an AttributeError raised inside it.
    PyObject *attr = PyObject_GetAttr(obj, g_str_dlpack);
    if (attr == nullptr) {
      PyErr_Clear();
      PyErr_Format(PyExc_TypeError,
                   "hurray.from_dlpack: %.100s object does not support the DLPack protocol "
                   "(no __dlpack__ method) and is not a DLPack capsule",
                   Py_TYPE(obj)->tp_name);
    } else {
      Py_DECREF(attr);
    }
  }
  return cap;
}

// The producer's own device, from obj.__dlpack_device__(). *known is false
// (and no error set) when obj has no such method. Returns false with an
// exception set when the method raises or returns something else than a
// (device_type, device_id) tuple.
bool producer_device(PyObject *obj, hurray_device *out, bool *known) {
  *known = false;
  PyObject *meth = PyObject_GetAttr(obj, g_str_dlpack_device);
  if (meth == nullptr) {
    if (!PyErr_ExceptionMatches(PyExc_AttributeError)) return false;
    PyErr_Clear();
    return true;
  }
  PyObject *res = PyObject_CallNoArgs(meth);
  Py_DECREF(meth);
  if (res == nullptr) return false;
  char what[160];
  std::snprintf(what, sizeof what, "hurray.from_dlpack: the result of %.100s.__dlpack_device__()",
                Py_TYPE(obj)->tp_name);
  bool ok;
  if (!PyTuple_Check(res)) {
    PyErr_Format(PyExc_TypeError, "%s must be a (device_type, device_id) tuple, not %.100s", what,
                 Py_TYPE(res)->tp_name);
    ok = false;
  } else {
    ok = parse_device(res, what, out);
  }
  Py_DECREF(res);
  *known = ok;
  return ok;
}

PyObject *raise_copy_false_crosses(hurray_device from, hurray_device to) {
  PyErr_Format(PyExc_BufferError,
               "hurray.from_dlpack: the tensor is on device (%d, %d); moving it to device "
               "(%d, %d) needs a copy, but copy=False",
               from.device_type, from.device_id, to.device_type, to.device_id);
  return nullptr;
}

PyObject *mod_from_dlpack(PyObject *, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
  PyObject *copy = Py_None, *device = Py_None;
  if (nargs != 1) {
    PyErr_Format(PyExc_TypeError, "from_dlpack() takes exactly 1 positional argument (%zd given)",
                 nargs);
    return nullptr;
  }
  PyObject *obj = args[0];
  if (kwnames != nullptr) {
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(kwnames); ++i) {
      PyObject *key = PyTuple_GET_ITEM(kwnames, i);
      if (kw_is(key, g_str_copy)) {
        copy = args[1 + i];
      } else if (kw_is(key, g_str_device)) {
        device = args[1 + i];
      } else {
        if (!PyErr_Occurred()) {
          PyErr_Format(PyExc_TypeError, "from_dlpack() got an unexpected keyword argument '%U'",
                       key);
        }
        return nullptr;
      }
    }
  }
  const int copy_mode = parse_copy(copy);
  if (copy_mode == -2) return nullptr;
  // The producer is passed a real bool, or no copy keyword at all.
  PyObject *copy_arg = copy_mode == -1 ? nullptr : copy_mode ? Py_True : Py_False;
  hurray_device want{0, 0};
  const bool device_given = device != Py_None;
  if (device_given && !parse_device(device, "from_dlpack: device", &want)) return nullptr;

  hurray_buffer h;
  if (Py_TYPE(obj) == &BufferType && copy_mode != 1 &&
      (!device_given || same_device(want, reinterpret_cast<BufferObject *>(obj)->h.device))) {
    // Another Buffer on the same memory: share directly, no DLPack round trip.
    auto *src = reinterpret_cast<BufferObject *>(obj);
    if (!check_live(src)) return nullptr;
    hurray_buffer pair[2];
    int32_t st = hurray_share(&src->h, 2, pair);
    if (st != HURRAY_OK) return raise_status(st, "hurray.from_dlpack");
    src->h = pair[0];
    return new_buffer(&pair[1]);
  }

  // A producer whose type publishes the DLPack C exchange API is taken
  // through its table, without Python-level calls, unless the table cannot
  // honour the request: copy=True (the table never copies), or a `device`
  // other than the tensor's own (the table cannot export elsewhere; asked
  // with dltensor_from_py_object_no_sync, and when the table lacks it, any
  // `device` given). Those go the capsule way below, as before.
  // docs/impl/python.md, "The DLPack C exchange API".
  bool imported = false;
  bool use_table = false;
  if (!PyCapsule_CheckExact(obj) && copy_mode != 1) {
    const DLPackExchangeAPI *api = hurray_py::exchange_api_of(Py_TYPE(obj));
    if (api == nullptr && PyErr_Occurred()) return nullptr;
    use_table = api != nullptr;
    if (use_table && device_given) {
      use_table = false;
      if (api->dltensor_from_py_object_no_sync != nullptr) {
        DLTensor view;
        if (api->dltensor_from_py_object_no_sync(obj, &view) != 0) {
          if (!PyErr_Occurred()) {
            PyErr_Format(PyExc_BufferError,
                         "hurray.from_dlpack: %.100s's dltensor_from_py_object_no_sync failed "
                         "without setting an exception",
                         Py_TYPE(obj)->tp_name);
          }
          return nullptr;
        }
        use_table = same_device(hurray_device{view.device.device_type, view.device.device_id},
                                want);
      }
    }
    if (use_table) {
      hurray_py::count_consumer_path(true);
      if (!hurray_py::import_via_exchange_api(obj, api, &h)) return nullptr;
      imported = true;
    }
  }
  if (!use_table && !PyCapsule_CheckExact(obj)) hurray_py::count_consumer_path(false);

  PyObject *cap = nullptr;
  if (!imported && PyCapsule_CheckExact(obj)) {
    cap = obj;
    Py_INCREF(cap);
  } else if (!imported) {
    // A producer is asked for another device only when it is not already on
    // that device; if it cannot export there, call_dlpack takes the tensor
    // where it is, and the copy below moves it.
    PyObject *dl_device = nullptr;
    if (device_given) {
      hurray_device own;
      bool known = false;
      if (!producer_device(obj, &own, &known)) return nullptr;
      if (known && !same_device(own, want) && copy_mode == 0) {
        return raise_copy_false_crosses(own, want);
      }
      if (!known || !same_device(own, want)) {
        // Producers are handed the normalised tuple.
        dl_device = Py_BuildValue("(ii)", want.device_type, want.device_id);
        if (dl_device == nullptr) return nullptr;
      }
    }
    cap = call_dlpack(obj, copy_arg, dl_device);
    Py_XDECREF(dl_device);
    if (cap == nullptr) return nullptr;
    if (!PyCapsule_CheckExact(cap)) {
      PyErr_Format(PyExc_TypeError,
                   "hurray.from_dlpack: %.100s.__dlpack__() returned %.100s, not a capsule",
                   Py_TYPE(obj)->tp_name, Py_TYPE(cap)->tp_name);
      Py_DECREF(cap);
      return nullptr;
    }
  }
  if (!imported) {
    bool ok = import_capsule(cap, &h);
    Py_DECREF(cap);
    if (!ok) return nullptr;
  }

  // copy / device the producer did not (or could not be asked to) honour.
  const hurray_device target = device_given ? want : h.device;
  const bool other_device = !same_device(target, h.device);
  if (other_device && copy_mode == 0) {
    raise_copy_false_crosses(h.device, target);
    release_handle(&h);
    return nullptr;
  }
  if (other_device || (copy_mode == 1 && !(h.flags & HURRAY_FLAG_IS_COPIED))) {
    hurray_buffer c;
    int32_t st = hurray_copy(&h, target, &c);
    if (st != HURRAY_OK) {
      raise_status(st, "hurray.from_dlpack (copy)");
      release_handle(&h);
      return nullptr;
    }
    release_handle(&h);
    h = c;
  }
  return new_buffer(&h);
}

// empty(shape, dtype="float32"): new uninitialised CPU memory from libhurray.
PyObject *mod_empty(PyObject *, PyObject *args, PyObject *kwargs) {
  static const char *kwlist[] = {"shape", "dtype", nullptr};
  PyObject *shape_obj = nullptr;
  PyObject *dtype_obj = nullptr;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O|O:empty", const_cast<char **>(kwlist),
                                   &shape_obj, &dtype_obj)) {
    return nullptr;
  }
  hurray_dtype dt{2, 32, 1};
  if (dtype_obj != nullptr && !parse_dtype_name(dtype_obj, &dt)) return nullptr;
  int64_t shape[HURRAY_MAX_NDIM];
  int32_t ndim = 0;
  if (PyLong_Check(shape_obj)) {
    shape[0] = PyLong_AsLongLong(shape_obj);
    if (shape[0] == -1 && PyErr_Occurred()) return nullptr;
    ndim = 1;
  } else {
    PyObject *seq = PySequence_Fast(shape_obj, "empty(): shape must be an int or a sequence of ints");
    if (seq == nullptr) return nullptr;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    if (n > HURRAY_MAX_NDIM) {
      Py_DECREF(seq);
      PyErr_Format(PyExc_ValueError, "empty(): at most %d dimensions, got %zd", HURRAY_MAX_NDIM, n);
      return nullptr;
    }
    for (Py_ssize_t i = 0; i < n; ++i) {
      PyObject *x = PySequence_Fast_GET_ITEM(seq, i);
      if (!PyLong_Check(x)) {
        Py_DECREF(seq);
        PyErr_SetString(PyExc_TypeError, "empty(): shape must be an int or a sequence of ints");
        return nullptr;
      }
      shape[i] = PyLong_AsLongLong(x);
      if (shape[i] == -1 && PyErr_Occurred()) {
        Py_DECREF(seq);
        return nullptr;
      }
    }
    ndim = static_cast<int32_t>(n);
    Py_DECREF(seq);
  }
  hurray_buffer h;
  int32_t st = hurray_alloc(hurray_device{HURRAY_DEVICE_CPU, 0}, dt, ndim, shape, 0, &h);
  if (st != HURRAY_OK) return raise_status(st, "hurray.empty");
  return new_buffer(&h);
}

// ---------------------------------------------------------------------------
// Test aids: releases that happen on a thread Python has never seen.
// ---------------------------------------------------------------------------

struct NativeJob {
  hurray_buffer h;                          // a handle to release, or
  DLManagedTensorVersioned *versioned;      // a tensor whose deleter to call, or
  DLManagedTensor *legacy;                  // a legacy tensor whose deleter to call
  double delay_s;
};

void *native_job_main(void *arg) {
  NativeJob *job = static_cast<NativeJob *>(arg);
  if (job->delay_s > 0) {
    struct timespec ts;
    ts.tv_sec = static_cast<time_t>(job->delay_s);
    ts.tv_nsec = static_cast<long>((job->delay_s - static_cast<double>(ts.tv_sec)) * 1e9);
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
  }
  if (job->h.release_fn != nullptr) (void)hurray_buffer_release(&job->h);
  if (job->versioned != nullptr) (void)hurray_dlpack_versioned_delete(job->versioned);
  if (job->legacy != nullptr) (void)hurray_dlpack_delete(job->legacy);
  std::free(job);
  return nullptr;
}

// Runs the job on a new pthread; joins it with the GIL released when `wait`.
PyObject *start_native_job(NativeJob *job, bool wait) {
  pthread_t thread;
  int rc = pthread_create(&thread, nullptr, native_job_main, job);
  if (rc != 0) {
    // The job was never started: run it here (this thread holds the GIL).
    native_job_main(job);
    errno = rc;
    return PyErr_SetFromErrno(PyExc_OSError);
  }
  if (wait) {
    Py_BEGIN_ALLOW_THREADS
    pthread_join(thread, nullptr);
    Py_END_ALLOW_THREADS
  } else {
    pthread_detach(thread);
  }
  Py_RETURN_NONE;
}

PyObject *mod_release_on_native_thread(PyObject *, PyObject *args, PyObject *kwargs) {
  static const char *kwlist[] = {"obj", "delay", "wait", nullptr};
  PyObject *obj = nullptr;
  double delay = 0.0;
  int wait = 1;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O|dp:_release_on_native_thread",
                                   const_cast<char **>(kwlist), &obj, &delay, &wait)) {
    return nullptr;
  }
  auto *job = static_cast<NativeJob *>(std::calloc(1, sizeof(NativeJob)));
  if (job == nullptr) {
    PyErr_SetString(PyExc_MemoryError, "_release_on_native_thread: out of memory for the job");
    return nullptr;
  }
  job->delay_s = delay;
  if (Py_TYPE(obj) == &BufferType) {
    auto *b = reinterpret_cast<BufferObject *>(obj);
    if (!check_live(b)) {
      std::free(job);
      return nullptr;
    }
    job->h = b->h;
    std::memset(&b->h, 0, sizeof b->h);
  } else if (PyCapsule_IsValid(obj, kCapsuleVersioned)) {
    // Act as a consumer framework: take the capsule, drop the tensor later.
    job->versioned = static_cast<DLManagedTensorVersioned *>(PyCapsule_GetPointer(obj, kCapsuleVersioned));
    (void)PyCapsule_SetName(obj, kCapsuleVersionedUsed);
  } else if (PyCapsule_IsValid(obj, kCapsuleLegacy)) {
    job->legacy = static_cast<DLManagedTensor *>(PyCapsule_GetPointer(obj, kCapsuleLegacy));
    (void)PyCapsule_SetName(obj, kCapsuleLegacyUsed);
  } else {
    std::free(job);
    PyErr_SetString(PyExc_TypeError,
                    "_release_on_native_thread expects a live hurray.Buffer or an unused "
                    "DLPack capsule");
    return nullptr;
  }
  return start_native_job(job, wait != 0);
}

PyMethodDef module_methods[] = {
    {"from_dlpack",
     reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)(void)>(mod_from_dlpack)),
     METH_FASTCALL | METH_KEYWORDS,
     "from_dlpack(obj, /, *, copy=None, device=None)\n--\n\n"
     "Take a tensor from any DLPack producer (an object with __dlpack__, or a raw\n"
     "'dltensor'/'dltensor_versioned' capsule) as a hurray.Buffer, zero-copy unless\n"
     "copy=True or device names another device. A producer that cannot export to\n"
     "device (NumPy for anything but the CPU) is taken on its own device, and\n"
     "libhurray makes the copy; copy=False then raises BufferError."},
    {"empty", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)(void)>(mod_empty)),
     METH_VARARGS | METH_KEYWORDS,
     "empty(shape, dtype='float32')\n--\n\nNew uninitialised CPU memory allocated by libhurray."},
    {"_release_on_native_thread",
     reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)(void)>(mod_release_on_native_thread)),
     METH_VARARGS | METH_KEYWORDS,
     "_release_on_native_thread(obj, delay=0.0, wait=True)\n--\n\n"
     "Testing aid: release a Buffer's handle (or delete an unused capsule's tensor, as a\n"
     "consumer framework would) on a new native thread that holds no GIL."},
    {nullptr, nullptr, 0, nullptr},
};

PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT,
    "hurray._native",
    "CPython binding of libhurray (see hurray's package docstring).",
    -1,
    module_methods,
    nullptr,
    nullptr,
    nullptr,
    nullptr,
};

// Learns the deleters libhurray puts on its exports by exporting a 0-d
// buffer once each way.
bool learn_export_deleters() {
  const hurray_dtype u8{1, 8, 1};
  hurray_buffer h;
  DLManagedTensorVersioned *tv = nullptr;
  int32_t st = hurray_alloc(hurray_device{HURRAY_DEVICE_CPU, 0}, u8, 0, nullptr, 0, &h);
  if (st == HURRAY_OK) st = hurray_to_dlpack_versioned(&h, &tv);
  if (st != HURRAY_OK) {
    raise_status(st, "hurray._native init");
    (void)hurray_buffer_release(&h);
    return false;
  }
  g_hurray_versioned_deleter = tv->deleter;
  (void)hurray_dlpack_versioned_delete(tv);
  DLManagedTensor *tl = nullptr;
  st = hurray_alloc(hurray_device{HURRAY_DEVICE_CPU, 0}, u8, 0, nullptr, 0, &h);
  if (st == HURRAY_OK) st = hurray_to_dlpack(&h, &tl);
  if (st != HURRAY_OK) {
    raise_status(st, "hurray._native init");
    (void)hurray_buffer_release(&h);
    return false;
  }
  g_hurray_legacy_deleter = tl->deleter;
  (void)hurray_dlpack_delete(tl);
  return true;
}

PyObject *intern(const char *s) { return PyUnicode_InternFromString(s); }

}  // namespace

// ---------------------------------------------------------------------------
// Hooks for exchange_api.cc (declared in exchange_api.h)
// ---------------------------------------------------------------------------
namespace hurray_py {

PyTypeObject *buffer_type() { return &BufferType; }

hurray_buffer *live_handle(PyObject *obj) {
  if (Py_TYPE(obj) != &BufferType) {
    PyErr_Format(PyExc_TypeError, "hurray exchange API: expected a hurray.Buffer, not %.100s",
                 Py_TYPE(obj)->tp_name);
    return nullptr;
  }
  auto *b = reinterpret_cast<BufferObject *>(obj);
  return check_live(b) ? &b->h : nullptr;
}

PyObject *new_empty_buffer() {
  BufferObject *b = PyObject_New(BufferObject, &BufferType);
  if (b == nullptr) {
    PyErr_Clear();
    PyErr_SetString(PyExc_MemoryError, "hurray: out of memory for a hurray.Buffer object");
    return nullptr;
  }
  std::memset(&b->h, 0, sizeof b->h);
  b->weakreflist = nullptr;
  return reinterpret_cast<PyObject *>(b);
}

void buffer_adopt(PyObject *buffer, hurray_buffer *h) {
  reinterpret_cast<BufferObject *>(buffer)->h = *h;
  std::memset(h, 0, sizeof *h);
}

bool import_versioned(DLManagedTensorVersioned *t, const char *what, hurray_buffer *out) {
  int32_t st = import_tensor(t, true, what, out);
  if (st == HURRAY_ERR_UNSUPPORTED_VERSION) {
    PyErr_Format(PyExc_BufferError,
                 "%s: the tensor is DLPack version %u.%u, and only major version %u can be "
                 "read [%s]",
                 what, static_cast<unsigned>(t->version.major),
                 static_cast<unsigned>(t->version.minor),
                 static_cast<unsigned>(HURRAY_DLPACK_MAJOR), hurray_status_name(st));
  }
  return st == HURRAY_OK;
}

void delete_tensor(DLManagedTensorVersioned *t) {
  SavedError saved;
  (void)hurray_dlpack_versioned_delete(t);
}

PyObject *raise_status(int32_t status, const char *what) {
  return ::raise_status(status, what);
}

void release_handle(hurray_buffer *h) { ::release_handle(h); }

void *buffer_stream(int32_t device_type) { return ::buffer_stream(device_type); }

}  // namespace hurray_py

PyMODINIT_FUNC PyInit__native(void) {
  int32_t st = hurray_check_version(HURRAY_VERSION);
  if (st != HURRAY_OK) {
    PyErr_Format(PyExc_ImportError, "hurray._native: %s", hurray_last_error());
    return nullptr;
  }
  BufferType.tp_name = "hurray.Buffer";
  BufferType.tp_basicsize = sizeof(BufferObject);
  BufferType.tp_dealloc = Buffer_dealloc;
  BufferType.tp_repr = Buffer_repr;
  BufferType.tp_flags = Py_TPFLAGS_DEFAULT;
  BufferType.tp_doc =
      "One consumer's hold on tensor memory (a libhurray handle).\n\n"
      "Made by hurray.from_dlpack(), hurray.empty() or Buffer.share(). Export with\n"
      "__dlpack__ (any DLPack consumer: np.from_dlpack(buf), ...). The handle is\n"
      "released exactly once: by release(), the end of a `with` block, or garbage\n"
      "collection; capsules taken with __dlpack__ hold references of their own.";
  BufferType.tp_methods = Buffer_methods;
  BufferType.tp_getset = Buffer_getset;
  BufferType.tp_weaklistoffset = offsetof(BufferObject, weakreflist);
  if (PyType_Ready(&BufferType) < 0) return nullptr;

  g_str_dlpack = intern("__dlpack__");
  g_str_dlpack_device = intern("__dlpack_device__");
  g_str_stream = intern("stream");
  g_str_max_version = intern("max_version");
  g_str_dl_device = intern("dl_device");
  g_str_copy = intern("copy");
  g_str_device = intern("device");
  g_max_version = Py_BuildValue("(ii)", HURRAY_DLPACK_MAJOR, HURRAY_DLPACK_MINOR);
  g_kw_max_version = g_str_max_version ? PyTuple_Pack(1, g_str_max_version) : nullptr;
  if (!g_str_dlpack || !g_str_dlpack_device || !g_str_stream || !g_str_max_version ||
      !g_str_dl_device || !g_str_copy ||
      !g_str_device || !g_max_version || !g_kw_max_version) {
    return nullptr;
  }
  if (!learn_export_deleters()) return nullptr;

  PyObject *m = PyModule_Create(&module_def);
  if (m == nullptr) return nullptr;
  if (!hurray_py::exchange_api_init(m)) {
    Py_DECREF(m);
    return nullptr;
  }
  Py_INCREF(&BufferType);
  if (PyModule_AddObject(m, "Buffer", reinterpret_cast<PyObject *>(&BufferType)) < 0) {
    Py_DECREF(&BufferType);
    Py_DECREF(m);
    return nullptr;
  }
  uint32_t v = hurray_version();
  PyObject *vs = PyUnicode_FromFormat("%u.%u.%u", (v >> 16) & 0xff, (v >> 8) & 0xff, v & 0xff);
  if (vs == nullptr || PyModule_AddObject(m, "libhurray_version", vs) < 0) {
    Py_XDECREF(vs);
    Py_DECREF(m);
    return nullptr;
  }
  // The release these headers belong to, from the root CMakeLists.txt's
  // project(VERSION): the Python package's one version (hurray.__version__).
  if (PyModule_AddStringConstant(m, "__version__", HURRAY_VERSION_STRING) < 0 ||
      PyModule_AddIntConstant(m, "DLPACK_MAJOR", HURRAY_DLPACK_MAJOR) < 0 ||
      PyModule_AddIntConstant(m, "DLPACK_MINOR", HURRAY_DLPACK_MINOR) < 0) {
    Py_DECREF(m);
    return nullptr;
  }
  return m;
}
