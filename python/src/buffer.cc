// SPDX-License-Identifier: Apache-2.0
// The hurray.Buffer type: one Python object owning one hurray_buffer handle
// (docs/impl/python.md §1-§2), its getters, share(n) and release.
#include <cstdio>
#include <cstring>

#include "binding.h"

namespace hurray_py {

PyTypeObject BufferType = {PyVarObject_HEAD_INIT(nullptr, 0)};

PyObject *new_buffer(hurray_buffer *h, bool legacy_unsaid) {
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
  b->event = nullptr;
  b->weakreflist = nullptr;
  b->legacy_unsaid = legacy_unsaid && (h->flags & HURRAY_FLAG_READ_ONLY) != 0;
  std::memset(h, 0, sizeof *h);
  if (g_check_labels) label_python_site(&b->h);
  return reinterpret_cast<PyObject *>(b);
}

bool is_live(const BufferObject *b) { return b->h.release_fn != nullptr; }

bool check_live(const BufferObject *b) {
  if (is_live(b)) return true;
  PyErr_SetString(PyExc_ValueError, "operation on a released hurray.Buffer");
  return false;
}

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

namespace {

// Takes the handle out of the object first, then releases it: the release
// may run arbitrary Python code (finalizers of the source), which must find
// the Buffer already released, never half-way.
void buffer_release_now(BufferObject *b) {
  if (!is_live(b)) return;
  hurray_buffer h = b->h;
  std::memset(&b->h, 0, sizeof b->h);
  buffer_event_drop(b);
  release_handle(&h);
}

void Buffer_dealloc(PyObject *self) {
  BufferObject *b = as_buffer(self);
  if (b->weakreflist != nullptr) PyObject_ClearWeakRefs(self);
  buffer_release_now(b);
  Py_TYPE(self)->tp_free(self);
}

PyObject *Buffer_repr(PyObject *self) {
  BufferObject *b = as_buffer(self);
  if (!is_live(b)) return PyUnicode_FromString("<hurray.Buffer (released)>");
  PyObject *dt = dtype_name(b->h.dtype);
  if (dt == nullptr) return nullptr;
  char dims[512];
  size_t pos = 0;
  dims[0] = '\0';
  for (int32_t i = 0; i < b->h.ndim && pos < sizeof dims - 32; ++i) {
    pos += static_cast<size_t>(std::snprintf(dims + pos, sizeof dims - pos, "%s%lld", i ? ", " : "",
                                             static_cast<long long>(b->h.shape[i])));
  }
  PyObject *r = PyUnicode_FromFormat("<hurray.Buffer %U[%s] %s:%d%s>", dt, dims,
                                     device_name(b->h.device.device_type),
                                     static_cast<int>(b->h.device.device_id),
                                     (b->h.flags & HURRAY_FLAG_READ_ONLY) ? " readonly" : "");
  Py_DECREF(dt);
  return r;
}

// --- properties -----------------------------------------------------------

#define LIVE_OR_FAIL(b)                 \
  do {                                  \
    if (!check_live(b)) return nullptr; \
  } while (0)

PyObject *Buffer_get_shape(PyObject *self, void *) {
  BufferObject *b = as_buffer(self);
  LIVE_OR_FAIL(b);
  return int64_tuple(b->h.shape, b->h.ndim);
}

PyObject *Buffer_get_strides(PyObject *self, void *) {
  BufferObject *b = as_buffer(self);
  LIVE_OR_FAIL(b);
  return int64_tuple(b->h.strides, b->h.ndim);
}

PyObject *Buffer_get_ndim(PyObject *self, void *) {
  BufferObject *b = as_buffer(self);
  LIVE_OR_FAIL(b);
  return PyLong_FromLong(b->h.ndim);
}

PyObject *Buffer_get_dtype(PyObject *self, void *) {
  BufferObject *b = as_buffer(self);
  LIVE_OR_FAIL(b);
  return dtype_name(b->h.dtype);
}

// (device_type, device_id) of a live Buffer: Buffer.device and
// __dlpack_device__.
PyObject *device_tuple(const BufferObject *b) {
  if (b->h.device.device_type == HURRAY_DEVICE_CPU && b->h.device.device_id == 0) {
    // NumPy, torch and TVM FFI ask once per import; (1, 0) is immutable, so
    // one tuple serves every CPU Buffer (made once, kept for the process).
    // Made under the GIL, on first use; a failed attempt (MemoryError
    // raised) is retried on the next call.
    static PyObject *cpu = nullptr;
    if (cpu == nullptr) cpu = Py_BuildValue("(ii)", HURRAY_DEVICE_CPU, 0);
    if (cpu == nullptr) return nullptr;
    Py_INCREF(cpu);
    return cpu;
  }
  return Py_BuildValue("(ii)", b->h.device.device_type, b->h.device.device_id);
}

PyObject *Buffer_get_device(PyObject *self, void *) {
  BufferObject *b = as_buffer(self);
  LIVE_OR_FAIL(b);
  return device_tuple(b);
}

PyObject *Buffer_get_readonly(PyObject *self, void *) {
  BufferObject *b = as_buffer(self);
  LIVE_OR_FAIL(b);
  return PyBool_FromLong((b->h.flags & HURRAY_FLAG_READ_ONLY) != 0);
}

PyObject *Buffer_get_is_copied(PyObject *self, void *) {
  BufferObject *b = as_buffer(self);
  LIVE_OR_FAIL(b);
  return PyBool_FromLong((b->h.flags & HURRAY_FLAG_IS_COPIED) != 0);
}

PyObject *Buffer_get_data_ptr(PyObject *self, void *) {
  BufferObject *b = as_buffer(self);
  LIVE_OR_FAIL(b);
  uintptr_t p = reinterpret_cast<uintptr_t>(b->h.data) + static_cast<uintptr_t>(b->h.byte_offset);
  return PyLong_FromUnsignedLongLong(p);
}

PyObject *Buffer_get_byte_offset(PyObject *self, void *) {
  BufferObject *b = as_buffer(self);
  LIVE_OR_FAIL(b);
  return PyLong_FromUnsignedLongLong(b->h.byte_offset);
}

PyObject *Buffer_get_size(PyObject *self, void *) {
  BufferObject *b = as_buffer(self);
  LIVE_OR_FAIL(b);
  hurray_extent e;
  int32_t st = hurray_buffer_extent(&b->h, &e);
  if (st != HURRAY_OK) return raise_status(st, "hurray.Buffer.size");
  return PyLong_FromLongLong(e.numel);
}

PyObject *Buffer_get_nbytes(PyObject *self, void *) {
  BufferObject *b = as_buffer(self);
  LIVE_OR_FAIL(b);
  hurray_extent e;
  int32_t st = hurray_buffer_extent(&b->h, &e);
  if (st != HURRAY_OK) return raise_status(st, "hurray.Buffer.nbytes");
  // Bytes the elements occupy (sub-byte elements packed unless padded).
  unsigned __int128 bits =
      static_cast<unsigned __int128>(e.numel) * static_cast<unsigned __int128>(e.itemsize_bits);
  return PyLong_FromUnsignedLongLong(static_cast<unsigned long long>((bits + 7) / 8));
}

PyObject *Buffer_get_released(PyObject *self, void *) {
  return PyBool_FromLong(!is_live(as_buffer(self)));
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
    {"readonly", Buffer_get_readonly, nullptr, "True if the memory must not be written.", nullptr},
    {"is_copied", Buffer_get_is_copied, nullptr,
     "True if the memory is a private copy made for this buffer.", nullptr},
    {"data_ptr", Buffer_get_data_ptr, nullptr,
     "Address of element (0, ..., 0), i.e. data + byte_offset, as an int.", nullptr},
    {"byte_offset", Buffer_get_byte_offset, nullptr,
     "Bytes from the DLPack data pointer to element (0, ..., 0).", nullptr},
    {"size", Buffer_get_size, nullptr, "Number of elements.", nullptr},
    {"nbytes", Buffer_get_nbytes, nullptr, "Bytes taken by the elements.", nullptr},
    {"released", Buffer_get_released, nullptr, "True once this buffer's handle has been released.",
     nullptr},
    {nullptr, nullptr, nullptr, nullptr, nullptr},
};

// --- share, release ---------------------------------------------------------

// hurray_share hands out at most 2^32 handles per call (docs/impl/c-ffi.md)
// and share(n) asks it for n + 1: the Buffer keeps one of them.
constexpr long long kMaxShare = (1LL << 32) - 1;

// Gives an out-of-memory error of share(n) a message: CPython's own
// MemoryError (PyErr_NoMemory) has none. Other errors are left as they are.
// Always returns nullptr.
PyObject *share_no_memory(long long n, const char *what) {
  if (PyErr_Occurred() != nullptr && !PyErr_ExceptionMatches(PyExc_MemoryError)) return nullptr;
  PyErr_Clear();
  PyErr_Format(PyExc_MemoryError, "hurray.Buffer.share: out of memory for %s (n is %lld)", what, n);
  return nullptr;
}

// share(n): n new Buffers on the same memory; this one stays valid. n is
// any integer NumPy would take (an int or an object with __index__).
//
// Everything that can fail for lack of memory is allocated before
// hurray_share, so a failure leaves the Buffer exactly as it was; only the
// creation of the Buffer objects comes after it, and a failure there gives
// back every handle no Buffer owns yet.
PyObject *Buffer_share(PyObject *self, PyObject *arg) {
  BufferObject *b = as_buffer(self);
  if (!PyLong_Check(arg) && !PyIndex_Check(arg)) {
    PyErr_Format(PyExc_TypeError, "share() expects an integer, not %.100s", Py_TYPE(arg)->tp_name);
    return nullptr;
  }
  PyObject *num = PyNumber_Index(arg);
  if (num == nullptr) return nullptr;
  int overflow = 0;
  const long long n = PyLong_AsLongLongAndOverflow(num, &overflow);
  if (n == -1 && PyErr_Occurred()) {
    Py_DECREF(num);
    return nullptr;
  }
  if (overflow < 0 || (overflow == 0 && n < 1)) {
    PyErr_Format(PyExc_ValueError, "share(n) needs n >= 1, got %R", num);
    Py_DECREF(num);
    return nullptr;
  }
  if (overflow > 0 || n > kMaxShare) {
    PyErr_Format(PyExc_ValueError,
                 "hurray.Buffer.share: n is %R (at most %lld: hurray_share hands out at most "
                 "2^32 handles per call, and this Buffer keeps one of them) [%s]",
                 num, kMaxShare, hurray_status_name(HURRAY_ERR_INVALID_ARGUMENT));
    Py_DECREF(num);
    return nullptr;
  }
  Py_DECREF(num);
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
    b->h = out[0];  // keeps its label (the checker carries it over)
    for (long long i = 0; i < n; ++i) {
      PyObject *nb = new_buffer(&out[i + 1], b->legacy_unsaid);
      if (nb != nullptr) buffer_event_share(b, as_buffer(nb));
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

PyObject *Buffer_dlpack_device(PyObject *self, PyObject *) {
  BufferObject *b = as_buffer(self);
  LIVE_OR_FAIL(b);
  return device_tuple(b);
}

PyObject *Buffer_release(PyObject *self, PyObject *) {
  buffer_release_now(as_buffer(self));
  Py_RETURN_NONE;
}

PyObject *Buffer_enter(PyObject *self, PyObject *) {
  if (!check_live(as_buffer(self))) return nullptr;
  Py_INCREF(self);
  return self;
}

PyObject *Buffer_exit(PyObject *self, PyObject *const *, Py_ssize_t) {
  buffer_release_now(as_buffer(self));
  Py_RETURN_FALSE;
}

PyMethodDef Buffer_methods[] = {
    {"__dlpack__", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)(void)>(buffer_dlpack)),
     METH_FASTCALL | METH_KEYWORDS,
     "__dlpack__(*, stream=None, max_version=None, dl_device=None, copy=None)\n--\n\n"
     "Export as a DLPack capsule: 'dltensor_versioned' of the highest version up to\n"
     "max_version that describes the tensor when max_version asks for major >= 1,\n"
     "else 'dltensor'. Each capsule owns its own reference.\n"
     "stream: the consumer's stream, ordered after this buffer's pending work on the\n"
     "device, the host never blocks. A GPU Buffer from from_dlpack carries an event\n"
     "recorded on the stream its producer ordered its work on: the stream waits on\n"
     "that event. Any other GPU Buffer is ordered on its device's default stream:\n"
     "the stream waits for that. None is CUDA's legacy default stream (1) / ROCm's\n"
     "default stream (0), which waits likewise (not when it is the event's own\n"
     "stream); -1 waits for nothing. CPU consumers: None only."},
    {"__dlpack_device__", Buffer_dlpack_device, METH_NOARGS,
     "__dlpack_device__()\n--\n\n(device_type, device_id) of the memory."},
    {"share", Buffer_share, METH_O,
     "share(n)\n--\n\nReturn a list of n new Buffers on the same memory (fan-out).\n"
     "This buffer stays valid; the memory is freed after the last of all of them."},
    {"release", Buffer_release, METH_NOARGS,
     "release()\n--\n\nRelease this buffer's reference now. Idempotent."},
    {"__array__", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)(void)>(buffer_array)),
     METH_VARARGS | METH_KEYWORDS,
     "__array__(dtype=None, copy=None)\n--\n\nFor NumPy when the buffer protocol cannot serve: "
     "refuses\n"
     "memory the CPU cannot address, else numpy.from_dlpack(self)."},
    {"__reduce_ex__", buffer_reduce_ex, METH_O,
     "__reduce_ex__(protocol)\n--\n\nPickle support: protocol 5 sends the memory out of band\n"
     "(pickle.PickleBuffer), zero-copy for a buffer_callback; older protocols copy it in band."},
    {"__enter__", Buffer_enter, METH_NOARGS, nullptr},
    {"__exit__", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)(void)>(Buffer_exit)),
     METH_FASTCALL, nullptr},
    {nullptr, nullptr, 0, nullptr},
};

}  // namespace

bool buffer_type_ready() {
  BufferType.tp_name = "hurray.Buffer";
  BufferType.tp_basicsize = sizeof(BufferObject);
  BufferType.tp_dealloc = Buffer_dealloc;
  BufferType.tp_repr = Buffer_repr;
  BufferType.tp_flags = Py_TPFLAGS_DEFAULT;
  BufferType.tp_doc =
      "One consumer's hold on tensor memory (a libhurray handle).\n\n"
      "Made by hurray.from_dlpack(), hurray.empty() or Buffer.share(). Export with\n"
      "__dlpack__ (any DLPack consumer: np.from_dlpack(buf), ...) or, for CPU memory,\n"
      "the Python buffer protocol (memoryview(buf), np.asarray(buf)). The handle is\n"
      "released exactly once: by release(), the end of a `with` block, or garbage\n"
      "collection; capsules and memoryviews hold references of their own.";
  BufferType.tp_methods = Buffer_methods;
  BufferType.tp_getset = Buffer_getset;
  BufferType.tp_as_buffer = &kBufferProcs;
  BufferType.tp_weaklistoffset = offsetof(BufferObject, weakreflist);
  return PyType_Ready(&BufferType) == 0;
}

// --- used by exchange_api.cc -------------------------------------------------

PyTypeObject *buffer_type() { return &BufferType; }

hurray_buffer *live_handle(PyObject *obj) {
  if (Py_TYPE(obj) != &BufferType) {
    PyErr_Format(PyExc_TypeError, "hurray exchange API: expected a hurray.Buffer, not %.100s",
                 Py_TYPE(obj)->tp_name);
    return nullptr;
  }
  BufferObject *b = as_buffer(obj);
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
  b->event = nullptr;
  b->weakreflist = nullptr;
  b->legacy_unsaid = false;
  return reinterpret_cast<PyObject *>(b);
}

bool buffer_event_record(hurray_device device, void *stream, const char *what, BufferEvent **out) {
  *out = nullptr;
  BufferEvent *e = static_cast<BufferEvent *>(PyMem_Malloc(sizeof(BufferEvent)));
  if (e == nullptr) {
    PyErr_Format(PyExc_MemoryError, "%s: out of memory for the Buffer's event", what);
    return false;
  }
  hurray_event *ev = nullptr;
  const int32_t st = hurray_event_record(device, stream, &ev);
  if (st != HURRAY_OK) {
    PyMem_Free(e);
    // Only a capturing stream answers INVALID_ARGUMENT here (the arguments
    // are the binding's own): its work is graph work not yet launched, and
    // the Buffer keeps the default-stream rule, as before events.
    if (st == HURRAY_ERR_INVALID_ARGUMENT) return true;
    raise_status(st, what);
    return false;
  }
  *e = BufferEvent{ev, stream, 1};
  *out = e;
  return true;
}

void buffer_event_share(const BufferObject *from, BufferObject *to) {
  to->event = from->event;
  if (to->event != nullptr) ++to->event->refs;
}

void buffer_event_drop(BufferObject *b) {
  BufferEvent *e = b->event;
  if (e == nullptr) return;
  b->event = nullptr;
  if (--e->refs > 0) return;
  (void)hurray_event_release(e->event);  // never fails; from any thread
  PyMem_Free(e);
}

bool order_after_buffer(BufferObject *b, void *consumer, const char *what) {
  int32_t st = HURRAY_OK;
  if (b->event != nullptr) {
    if (consumer != b->event->stream) st = hurray_event_wait(b->event->event, consumer);
  } else {
    void *own = buffer_stream(b->h.device.device_type);
    if (consumer != own) st = hurray_stream_wait(b->h.device, own, consumer);
  }
  if (st != HURRAY_OK) {
    raise_status(st, what);
    return false;
  }
  return true;
}

void buffer_adopt(PyObject *buffer, hurray_buffer *h) {
  as_buffer(buffer)->h = *h;
  std::memset(h, 0, sizeof *h);
}

}  // namespace hurray_py
