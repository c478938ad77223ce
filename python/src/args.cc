// SPDX-License-Identifier: Apache-2.0
// Argument parsing shared by the Buffer methods and the module functions:
// devices, copy=, integers, DLPack streams.
#include <cstring>

#include "binding.h"

namespace hurray_py {

bool same_device(hurray_device a, hurray_device b) {
  return a.device_type == b.device_type && a.device_id == b.device_id;
}

bool parse_index(PyObject *obj, const char *what, long long *out, int *overflow) {
  *overflow = 0;
  if (!PyLong_Check(obj) && !PyIndex_Check(obj)) {
    PyErr_Format(PyExc_TypeError, "%s must be an integer, not %.100s", what, Py_TYPE(obj)->tp_name);
    return false;
  }
  PyObject *i = PyNumber_Index(obj);
  if (i == nullptr) return false;
  *out = PyLong_AsLongLongAndOverflow(i, overflow);
  Py_DECREF(i);
  return !(*out == -1 && PyErr_Occurred());
}

bool parse_device(PyObject *obj, const char *what, hurray_device *out) {
  if (PyUnicode_Check(obj)) {
    if (PyUnicode_CompareWithASCIIString(obj, "cpu") == 0) {
      *out = hurray_device{HURRAY_DEVICE_CPU, 0};
      return true;
    }
    PyErr_Format(PyExc_ValueError,
                 "%s: unknown device %R (use \"cpu\" or a "
                 "(device_type, device_id) tuple)",
                 what, obj);
    return false;
  }
  if (!PyTuple_Check(obj) && !PyList_Check(obj)) {
    PyErr_Format(PyExc_TypeError, "%s must be a (device_type, device_id) tuple, not %.100s", what,
                 Py_TYPE(obj)->tp_name);
    return false;
  }
  PyObject *seq = PySequence_Fast(obj, what);
  if (seq == nullptr) return false;
  bool ok = false;
  if (PySequence_Fast_GET_SIZE(seq) != 2) {
    PyErr_Format(PyExc_ValueError, "%s must have 2 items (device_type, device_id), got %zd", what,
                 PySequence_Fast_GET_SIZE(seq));
  } else {
    PyObject *t = PySequence_Fast_GET_ITEM(seq, 0);
    PyObject *i = PySequence_Fast_GET_ITEM(seq, 1);
    if (!PyIndex_Check(t) || !PyIndex_Check(i)) {
      PyErr_Format(PyExc_TypeError, "%s items must be ints (or integers with __index__)", what);
    } else {
      long long type = 0, id = 0;
      int o1 = 0, o2 = 0;
      if (!parse_index(t, what, &type, &o1) || !parse_index(i, what, &id, &o2)) {
        // an error of __index__ itself propagates
      } else if (o1 != 0 || o2 != 0 || type < INT32_MIN || type > INT32_MAX || id < INT32_MIN ||
                 id > INT32_MAX) {
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

namespace {

// numpy._CopyMode, when obj is one: its meaning (1, 0, -1) in *mode.
// Returns false when obj is not a _CopyMode (no exception), or with an
// exception set (and *mode = -2) when its value cannot be read.
bool numpy_copy_mode(PyObject *obj, int *mode) {
  PyTypeObject *t = Py_TYPE(obj);
  if (std::strcmp(t->tp_name, "_CopyMode") != 0) return false;
  PyObject *module = PyObject_GetAttrString(reinterpret_cast<PyObject *>(t), "__module__");
  if (module == nullptr) {
    PyErr_Clear();
    return false;
  }
  const bool is_numpy =
      PyUnicode_Check(module) && PyUnicode_CompareWithASCIIString(module, "numpy") == 0;
  Py_DECREF(module);
  if (!is_numpy) return false;
  PyObject *value = PyObject_GetAttrString(obj, "value");
  if (value == nullptr) {
    *mode = -2;
    return true;
  }
  // ALWAYS is True, NEVER is False, IF_NEEDED is 2.
  if (value == Py_True) {
    *mode = 1;
  } else if (value == Py_False) {
    *mode = 0;
  } else {
    *mode = -1;
  }
  Py_DECREF(value);
  return true;
}

}  // namespace

int parse_copy(PyObject *obj, const char *what) {
  if (obj == Py_None) return -1;
  if (obj == Py_True) return 1;
  if (obj == Py_False) return 0;
  if (PyUnicode_Check(obj)) {
    PyErr_Format(PyExc_ValueError,
                 "%s: copy must be True, False or None, not the str %R (as in NumPy, strings "
                 "are not allowed for copy)",
                 what, obj);
    return -2;
  }
  int mode = 0;
  if (numpy_copy_mode(obj, &mode)) return mode;
  int v = PyObject_IsTrue(obj);
  return v < 0 ? -2 : v;
}

bool kw_is(PyObject *key, PyObject *name) {
  return key == name || PyUnicode_Compare(key, name) == 0;
}

namespace {

enum class StreamFamily { kHost, kCuda, kRocm, kOther };

StreamFamily stream_family(int32_t device_type) {
  switch (device_type) {
    case HURRAY_DEVICE_CPU: return StreamFamily::kHost;
    case HURRAY_DEVICE_CUDA:
    case HURRAY_DEVICE_CUDA_HOST:
    case HURRAY_DEVICE_CUDA_MANAGED: return StreamFamily::kCuda;
    case HURRAY_DEVICE_ROCM:
    case HURRAY_DEVICE_ROCM_HOST: return StreamFamily::kRocm;
    default: return StreamFamily::kOther;
  }
}

}  // namespace

// Stream rules of __dlpack__ (DLPack Python specification / array API):
// the consumer's stream value becomes the handle to order after the
// Buffer's pending work (order_after_buffer: its event, or the default
// stream; no host blocking). On the CPU, which has no streams, only None is
// accepted, as the specification says and NumPy does. docs/impl/python.md §4.
bool parse_stream(int32_t device_type, PyObject *stream, bool *sync, void **handle) {
  const StreamFamily family = stream_family(device_type);
  *sync = false;
  *handle = nullptr;
  if (stream != Py_None && !PyLong_Check(stream) && !PyIndex_Check(stream)) {
    PyErr_Format(PyExc_TypeError, "__dlpack__: stream must be an int or None, not %.100s",
                 Py_TYPE(stream)->tp_name);
    return false;
  }
  if (family == StreamFamily::kHost) {
    if (stream == Py_None) return true;
    PyObject *r = PyObject_Repr(stream);
    const char *text = r != nullptr ? PyUnicode_AsUTF8(r) : nullptr;
    PyErr_Clear();
    PyErr_Format(PyExc_ValueError,
                 "__dlpack__: stream must be None for a CPU consumer (the CPU has no streams, "
                 "and the DLPack specification accepts only None there, as NumPy does), got %s",
                 text != nullptr ? text : "?");
    Py_XDECREF(r);
    return false;
  }
  long long s;
  if (stream == Py_None) {
    s = family == StreamFamily::kCuda ? 1 : 0;  // CUDA: legacy default; ROCm: default
  } else {
    int overflow = 0;
    if (!parse_index(stream, "__dlpack__: stream", &s, &overflow)) return false;
    if (overflow != 0) {
      PyErr_SetString(PyExc_ValueError, "__dlpack__: stream is out of range");
      return false;
    }
  }
  switch (family) {
    case StreamFamily::kHost: return true;  // handled above
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
    case StreamFamily::kOther: return true;  // no stream convention known: nothing to order
  }
  if (s == -1) return true;
  *sync = true;
  *handle = reinterpret_cast<void *>(static_cast<uintptr_t>(s));
  return true;
}

bool has_streams(int32_t device_type) {
  const StreamFamily f = stream_family(device_type);
  return f == StreamFamily::kCuda || f == StreamFamily::kRocm;
}

void *buffer_stream(int32_t device_type) {
  return stream_family(device_type) == StreamFamily::kCuda ? reinterpret_cast<void *>(1) : nullptr;
}

}  // namespace hurray_py
