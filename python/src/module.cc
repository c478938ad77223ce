// SPDX-License-Identifier: Apache-2.0
// Module init of hurray._native and hurray.empty.
#include <cstdio>
#include <cstring>

#include "binding.h"

namespace hurray_py {

Names g_names;
void (*g_hurray_versioned_deleter)(DLManagedTensorVersioned *);
void (*g_hurray_legacy_deleter)(DLManagedTensor *);

namespace {

// A shape: an integer or a sequence of integers (__index__ accepted), at
// most HURRAY_MAX_NDIM of them, into shape[] and *ndim. `fn` prefixes
// messages ("empty()"). False with TypeError / ValueError / OverflowError.
bool parse_shape(PyObject *shape_obj, const char *fn, int64_t *shape, int32_t *ndim) {
  char what[120];
  std::snprintf(what, sizeof what, "%s: shape", fn);
  int overflow = 0;
  long long v = 0;
  if (PyLong_Check(shape_obj) || PyIndex_Check(shape_obj)) {
    if (!parse_index(shape_obj, what, &v, &overflow)) return false;
    if (overflow != 0) {
      PyErr_Format(PyExc_OverflowError, "%s is out of range", what);
      return false;
    }
    shape[0] = v;
    *ndim = 1;
    return true;
  }
  char msg[160];
  std::snprintf(msg, sizeof msg, "%s must be an int or a sequence of ints", what);
  PyObject *seq = PySequence_Fast(shape_obj, msg);
  if (seq == nullptr) return false;
  Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
  if (n > HURRAY_MAX_NDIM) {
    Py_DECREF(seq);
    PyErr_Format(PyExc_ValueError, "%s: at most %d dimensions, got %zd", fn, HURRAY_MAX_NDIM, n);
    return false;
  }
  for (Py_ssize_t i = 0; i < n; ++i) {
    PyObject *x = PySequence_Fast_GET_ITEM(seq, i);
    if (!PyLong_Check(x) && !PyIndex_Check(x)) {
      Py_DECREF(seq);
      PyErr_SetString(PyExc_TypeError, msg);
      return false;
    }
    if (!parse_index(x, what, &v, &overflow)) {
      Py_DECREF(seq);
      return false;
    }
    if (overflow != 0) {
      Py_DECREF(seq);
      PyErr_Format(PyExc_OverflowError, "%s is out of range", what);
      return false;
    }
    shape[i] = v;
  }
  *ndim = static_cast<int32_t>(n);
  Py_DECREF(seq);
  return true;
}

// empty(shape, dtype="float32", *, device="cpu", shared=False): new
// uninitialised memory from libhurray. shape: an integer or a sequence of
// integers (__index__ accepted); dtype: what parse_dtype accepts (hurray's
// names, NumPy dtypes and type strings); device: what parse_device accepts;
// shared: hurray_alloc's HURRAY_ALLOC_SHAREABLE (CPU: a memfd that crosses
// processes without a copy, docs/impl/ipc.md).
PyObject *mod_empty(PyObject *, PyObject *args, PyObject *kwargs) {
  static const char *kwlist[] = {"shape", "dtype", "device", "shared", nullptr};
  PyObject *shape_obj = nullptr;
  PyObject *dtype_obj = nullptr;
  PyObject *device_obj = nullptr;
  int shared = 0;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O|O$Op:empty", const_cast<char **>(kwlist),
                                   &shape_obj, &dtype_obj, &device_obj, &shared)) {
    return nullptr;
  }
  hurray_device device{HURRAY_DEVICE_CPU, 0};
  if (device_obj != nullptr && !parse_device(device_obj, "empty(): device", &device)) {
    return nullptr;
  }
  hurray_dtype dt{2, 32, 1};
  uint64_t layout = 0;  // SUBBYTE_PADDED for ml_dtypes' sub-byte types
  if (dtype_obj != nullptr && !parse_dtype(dtype_obj, &dt, &layout)) return nullptr;
  int64_t shape[HURRAY_MAX_NDIM];
  int32_t ndim = 0;
  if (!parse_shape(shape_obj, "empty()", shape, &ndim)) return nullptr;
  hurray_buffer h;
  if (shared != 0) layout |= HURRAY_ALLOC_SHAREABLE;
  int32_t st = hurray_alloc(device, dt, ndim, shape, layout, &h);
  if (st != HURRAY_OK) return raise_status(st, "hurray.empty");
  return new_buffer(&h);
}

// empty_group(specs, *, device="cpu", shared=False): n tensors in one
// allocation (hurray_alloc_group): specs is a sequence of (shape, dtype)
// pairs (or bare shapes, float32). Each Buffer holds its own handle; the
// memory is freed once, after the last of them.
PyObject *mod_empty_group(PyObject *, PyObject *args, PyObject *kwargs) {
  static const char *kwlist[] = {"specs", "device", "shared", nullptr};
  PyObject *specs_obj = nullptr;
  PyObject *device_obj = nullptr;
  int shared = 0;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O|$Op:empty_group", const_cast<char **>(kwlist),
                                   &specs_obj, &device_obj, &shared)) {
    return nullptr;
  }
  hurray_device device{HURRAY_DEVICE_CPU, 0};
  if (device_obj != nullptr && !parse_device(device_obj, "empty_group(): device", &device)) {
    return nullptr;
  }
  if (PyUnicode_Check(specs_obj) || PyBytes_Check(specs_obj)) {
    PyErr_Format(PyExc_TypeError,
                 "empty_group(): specs must be a sequence of (shape, dtype) pairs, not %.100s",
                 Py_TYPE(specs_obj)->tp_name);
    return nullptr;
  }
  PyObject *seq =
      PySequence_Fast(specs_obj, "empty_group(): specs must be a sequence of (shape, dtype) pairs");
  if (seq == nullptr) return nullptr;
  const Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
  PyObject *out = PyList_New(n);
  if (out == nullptr || n == 0) {
    Py_DECREF(seq);
    return out;
  }
  const size_t un = static_cast<size_t>(n);
  hurray_tensor_desc *descs =
      static_cast<hurray_tensor_desc *>(PyMem_Calloc(un, sizeof(hurray_tensor_desc)));
  int64_t *shapes = static_cast<int64_t *>(PyMem_Calloc(un * HURRAY_MAX_NDIM, sizeof(int64_t)));
  hurray_buffer *hs = static_cast<hurray_buffer *>(PyMem_Calloc(un, sizeof(hurray_buffer)));
  bool ok = descs != nullptr && shapes != nullptr && hs != nullptr;
  if (!ok) {
    PyErr_Format(PyExc_MemoryError, "hurray.empty_group: out of memory for %zd descriptions", n);
  }
  for (Py_ssize_t i = 0; ok && i < n; ++i) {
    PyObject *spec = PySequence_Fast_GET_ITEM(seq, i);
    char fn[64];
    std::snprintf(fn, sizeof fn, "empty_group(): specs[%zd]", i);
    PyObject *shape_obj = spec;
    PyObject *dtype_obj = nullptr;
    // (shape, dtype); a 2-tuple of integers is a bare 2-d shape.
    if (PyTuple_Check(spec) && PyTuple_GET_SIZE(spec) == 2 &&
        !PyLong_Check(PyTuple_GET_ITEM(spec, 1)) && !PyIndex_Check(PyTuple_GET_ITEM(spec, 1))) {
      shape_obj = PyTuple_GET_ITEM(spec, 0);
      dtype_obj = PyTuple_GET_ITEM(spec, 1);
    }
    hurray_tensor_desc &d = descs[i];
    d.dtype = hurray_dtype{2, 32, 1};
    uint64_t layout = 0;
    if (dtype_obj != nullptr && !parse_dtype(dtype_obj, &d.dtype, &layout)) {
      ok = false;
    } else if (!parse_shape(shape_obj, fn, shapes + i * HURRAY_MAX_NDIM, &d.ndim)) {
      ok = false;
    } else {
      d.shape = shapes + i * HURRAY_MAX_NDIM;
      d.flags = layout;
    }
  }
  // The Buffer objects first: once the memory exists nothing can fail.
  for (Py_ssize_t i = 0; ok && i < n; ++i) {
    PyObject *b = new_empty_buffer();
    if (b == nullptr) {
      ok = false;
      break;
    }
    PyList_SET_ITEM(out, i, b);
  }
  if (ok) {
    size_t fi = HURRAY_BATCH_NO_INDEX;
    const int32_t st = hurray_alloc_group(device, un, descs, shared ? HURRAY_ALLOC_SHAREABLE : 0,
                                          nullptr, hs, &fi);
    if (st != HURRAY_OK) {
      char what[96];
      if (fi != HURRAY_BATCH_NO_INDEX) {
        std::snprintf(what, sizeof what, "hurray.empty_group (specs[%zu])", fi);
      } else {
        std::snprintf(what, sizeof what, "hurray.empty_group");
      }
      raise_status(st, what);
      ok = false;
    }
  }
  if (ok) {
    for (Py_ssize_t i = 0; i < n; ++i) {
      if (g_check_labels) label_python_site(&hs[i]);
      buffer_adopt(PyList_GET_ITEM(out, i), &hs[i]);
    }
  } else {
    Py_CLEAR(out);  // Buffers without handles: nothing is released
  }
  PyMem_Free(descs);
  PyMem_Free(shapes);
  PyMem_Free(hs);
  Py_DECREF(seq);
  return out;
}

PyMethodDef module_methods[] = {
    {"from_dlpack",
     reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)(void)>(mod_from_dlpack)),
     METH_FASTCALL | METH_KEYWORDS,
     "from_dlpack(obj, /, *, copy=None, device=None, stream=None)\n--\n\n"
     "Take a tensor from any DLPack producer (an object with __dlpack__, or a raw\n"
     "'dltensor'/'dltensor_versioned' capsule) as a hurray.Buffer, zero-copy unless\n"
     "copy=True or device names another device. A producer that cannot export to\n"
     "device (NumPy for anything but the CPU) is taken on its own device, and\n"
     "libhurray makes the copy; copy=False then raises BufferError. The Buffer is\n"
     "read-only when the producer says so, or gives a legacy capsule (as NumPy).\n"
     "A GPU producer is passed stream= explicitly: the caller's, else 1 (CUDA's\n"
     "legacy default stream) or 0 (ROCm's default stream). The Buffer records an\n"
     "event on that stream (or on the current_work_stream of a producer's DLPack\n"
     "exchange table), which Buffer.__dlpack__(stream=s) makes s wait on; with\n"
     "stream=-1 it records none and is ordered on the device's default stream."},
    {"from_dlpack_many",
     reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)(void)>(mod_from_dlpack_many)),
     METH_FASTCALL | METH_KEYWORDS,
     "from_dlpack_many(objs, /, *, copy=None, device=None, stream=None)\n--\n\n"
     "from_dlpack of every element of objs (a sequence or iterable) in one pass: a list of\n"
     "Buffers in the same order. Each producer is asked as from_dlpack asks it (its DLPack\n"
     "exchange table where it has one), then all tensors are imported with one batched\n"
     "libhurray call per DLPack form. All or nothing: when an element fails, no Buffer is\n"
     "made, every tensor taken is given back (capsules passed in stay unconsumed) and the\n"
     "exception names objs[i] (in its message, or a note for a producer's own error)."},
    {"empty", reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)(void)>(mod_empty)),
     METH_VARARGS | METH_KEYWORDS,
     "empty(shape, dtype='float32', *, device='cpu', shared=False)\n--\n\n"
     "New uninitialised memory allocated by libhurray.\n"
     "dtype: a name ('float32', 'bfloat16', 'float8_e4m3fn', 'float32x4') or anything\n"
     "numpy.dtype() accepts. device: 'cpu' or (device_type, device_id). shared=True: memory\n"
     "that crosses processes without a copy (CPU: a memfd; multiprocessing, docs/impl/ipc.md)."},
    {"empty_group",
     reinterpret_cast<PyCFunction>(reinterpret_cast<void (*)(void)>(mod_empty_group)),
     METH_VARARGS | METH_KEYWORDS,
     "empty_group(specs, *, device='cpu', shared=False)\n--\n\n"
     "Several tensors in ONE allocation (a tensor group): specs is a sequence of\n"
     "(shape, dtype) pairs (a bare shape means float32). Returns a list of Buffers, one per\n"
     "spec, each compact row-major at an address that is a multiple of GROUP_ALIGNMENT\n"
     "(256), in order. Each Buffer is an ordinary one (DLPack, share, pickling); the memory\n"
     "is freed once, after the last of them and of everything made from them. shared=True:\n"
     "one memfd for the whole group, which crosses processes as one allocation."},
    {"_pack", mod_pack, METH_VARARGS,
     "_pack(srcs, shared)\n--\n\nOne tensor group holding a compact copy of each source Buffer\n"
     "(hurray.pack's native half)."},
    {"_rebuild", mod_rebuild, METH_VARARGS,
     "_rebuild(obj, dtype, shape, strides, offset, flags, legacy_unsaid)\n--\n\n"
     "Unpickle a Buffer over a received bytes-like object (zero-copy)."},
    {"_ipc_export", mod_ipc_export, METH_VARARGS,
     "_ipc_export(buf, owner=None)\n--\n\n(descriptor, fds, legacy_unsaid) of a new IPC message "
     "for a share of\n"
     "buf (hurray_ipc_export); the caller owns and must close the fds (also appended to the\n"
     "list owner, when given, before the call returns)."},
    {"_close_fds", mod_close_fds, METH_O,
     "_close_fds(fds)\n--\n\nEmpty the list fds, closing each fd (in one C call)."},
    {"_move_fds", mod_move_fds, METH_VARARGS,
     "_move_fds(src, dst)\n--\n\nMove every fd of the list src to the end of the list dst "
     "(one C call)."},
    {"_dup_fds", mod_dup_fds, METH_VARARGS,
     "_dup_fds(fds, owner)\n--\n\nAppend a duplicate of each fd to the list owner, all or "
     "nothing."},
    {"_ipc_import", mod_ipc_import, METH_VARARGS,
     "_ipc_import(descriptor, fds, legacy_unsaid)\n--\n\nThe Buffer of a received IPC message\n"
     "(hurray_ipc_import); consumes the fds, also on failure."},
    {"_ipc_export_set", mod_ipc_export_set, METH_VARARGS,
     "_ipc_export_set(bufs, owner=None)\n--\n\n(descriptor, fds, legacy_unsaid) of ONE message "
     "for shares of all the\n"
     "Buffers (hurray_ipc_export_set); the caller owns and must close the fds (also appended\n"
     "to the list owner, when given, before the call returns)."},
    {"_ipc_import_set", mod_ipc_import_set, METH_VARARGS,
     "_ipc_import_set(descriptor, fds, legacy_unsaid)\n--\n\nThe Buffers of a received set "
     "message\n"
     "(hurray_ipc_import_set); consumes the fds, also on failure."},
    {"_pickle_stats", mod_pickle_stats, METH_NOARGS,
     "_pickle_stats()\n--\n\nBuffers rebuilt by unpickling, and how many released their memory."},
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
// buffer once each way. A handle is released only if hurray_alloc made it
// (and the export did not take it over).
bool learn_export_deleters() {
  const hurray_dtype u8{1, 8, 1};
  hurray_buffer h;
  std::memset(&h, 0, sizeof h);
  DLManagedTensorVersioned *tv = nullptr;
  int32_t st = hurray_alloc(hurray_device{HURRAY_DEVICE_CPU, 0}, u8, 0, nullptr, 0, &h);
  if (st != HURRAY_OK) return raise_status(st, "hurray._native init (hurray_alloc)"), false;
  st = hurray_to_dlpack_versioned(&h, &tv);
  if (st != HURRAY_OK) {
    raise_status(st, "hurray._native init (hurray_to_dlpack_versioned)");
    (void)hurray_buffer_release(&h);
    return false;
  }
  g_hurray_versioned_deleter = tv->deleter;
  (void)hurray_dlpack_versioned_delete(tv);

  std::memset(&h, 0, sizeof h);
  DLManagedTensor *tl = nullptr;
  st = hurray_alloc(hurray_device{HURRAY_DEVICE_CPU, 0}, u8, 0, nullptr, 0, &h);
  if (st != HURRAY_OK) return raise_status(st, "hurray._native init (hurray_alloc)"), false;
  st = hurray_to_dlpack(&h, &tl);
  if (st != HURRAY_OK) {
    raise_status(st, "hurray._native init (hurray_to_dlpack)");
    (void)hurray_buffer_release(&h);
    return false;
  }
  g_hurray_legacy_deleter = tl->deleter;
  (void)hurray_dlpack_delete(tl);
  return true;
}

PyObject *intern(const char *s) { return PyUnicode_InternFromString(s); }

bool names_init() {
  Names &n = g_names;
  n.dlpack = intern("__dlpack__");
  n.dlpack_device = intern("__dlpack_device__");
  n.stream = intern("stream");
  n.max_version = intern("max_version");
  n.dl_device = intern("dl_device");
  n.copy = intern("copy");
  n.device = intern("device");
  n.max_version_value = Py_BuildValue("(ii)", HURRAY_DLPACK_MAJOR, HURRAY_DLPACK_MINOR);
  n.kw_max_version = n.max_version ? PyTuple_Pack(1, n.max_version) : nullptr;
  return n.dlpack && n.dlpack_device && n.stream && n.max_version && n.dl_device && n.copy &&
         n.device && n.max_version_value && n.kw_max_version;
}

}  // namespace
}  // namespace hurray_py

PyMODINIT_FUNC PyInit__native(void) {
  using namespace hurray_py;
  int32_t st = hurray_check_version(HURRAY_VERSION);
  if (st != HURRAY_OK) {
    PyErr_Format(PyExc_ImportError, "hurray._native: %s", hurray_last_error());
    return nullptr;
  }
  if (!buffer_type_ready() || !names_init() || !learn_export_deleters()) return nullptr;

  PyObject *m = PyModule_Create(&module_def);
  if (m == nullptr) return nullptr;
  if (!exchange_api_init(m) || !check_init(m)) {
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
      PyModule_AddIntConstant(m, "DLPACK_MINOR", HURRAY_DLPACK_MINOR) < 0 ||
      PyModule_AddIntConstant(m, "GROUP_ALIGNMENT", HURRAY_GROUP_ALIGNMENT) < 0) {
    Py_DECREF(m);
    return nullptr;
  }
  return m;
}
