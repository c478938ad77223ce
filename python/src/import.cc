// SPDX-License-Identifier: Apache-2.0
// Import: DLPack capsules, producers' __dlpack__, and hurray.from_dlpack
// (docs/impl/python.md §2 "hurray.from_dlpack", "Read-only memory").
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <type_traits>

#include "binding.h"

namespace hurray_py {

namespace {

// libhurray's import of each DLPack struct.
int32_t hurray_import(DLManagedTensorVersioned *t, hurray_buffer *out) {
  return hurray_from_dlpack_versioned(t, HURRAY_IMPORT_DEFAULT, out);
}
int32_t hurray_import(DLManagedTensor *t, hurray_buffer *out) {
  return hurray_from_dlpack(t, HURRAY_IMPORT_DEFAULT, out);
}

}  // namespace

namespace {

bool has_no_elements(const hurray_buffer &h) {
  for (int32_t i = 0; i < h.ndim; ++i) {
    if (h.shape[i] == 0) return true;
  }
  return false;
}

}  // namespace

template <typename Tensor>
int32_t import_tensor(Tensor *t, const char *what, hurray_buffer *out) {
  constexpr bool versioned = std::is_same<Tensor, DLManagedTensorVersioned>::value;
  bool ours, needs_wrap;
  if constexpr (versioned) {
    ours = t->deleter == g_hurray_versioned_deleter;
    // Another major version is refused below; its other fields are not read.
    needs_wrap = t->deleter != nullptr && !ours && t->version.major == 1;
  } else {
    ours = t->deleter == g_hurray_legacy_deleter;
    needs_wrap = t->deleter != nullptr && !ours;
  }
  if (needs_wrap && !wrap_foreign_deleter(t, what)) return HURRAY_ERR_OUT_OF_MEMORY;
  hurray_buffer h;
  int32_t st = hurray_import(t, &h);
  if (st != HURRAY_OK) {
    if (needs_wrap) unwrap_foreign_deleter(t);
    if (st != HURRAY_ERR_UNSUPPORTED_VERSION || !versioned) raise_status(st, what);
    return st;
  }
  if (g_check_labels) label_python_site(&h);
  // A legacy tensor cannot say whether its memory may be written. NumPy
  // takes every legacy capsule as read-only; so does hurray, except for
  // libhurray's own exports, which unwrap to a handle with its own flags.
  if (!versioned && !ours) h.flags |= HURRAY_FLAG_READ_ONLY;
  // No memory at all (data NULL, zero elements: torch's and pyarrow's
  // empties): nothing can be written, and NumPy, which cannot view NULL,
  // makes a writable empty array of its own whatever the flags said. So is
  // the Buffer, so that an empty tensor reaches a legacy-only consumer
  // (JAX, tvm_ffi) through hurray as it does directly. docs/impl/python.md,
  // "Read-only memory: never more writable than the source".
  if (h.data == nullptr && has_no_elements(h)) h.flags &= ~HURRAY_FLAG_READ_ONLY;
  *out = h;
  return HURRAY_OK;
}

template int32_t import_tensor(DLManagedTensorVersioned *, const char *, hurray_buffer *);
template int32_t import_tensor(DLManagedTensor *, const char *, hurray_buffer *);

namespace {

// Takes a DLPack capsule over as a live handle and marks it used; *legacy
// says which form it was. Returns false with an exception set (the capsule
// then still owns its tensor). One name comparison for a versioned capsule.
bool import_capsule(PyObject *cap, hurray_buffer *out, bool *was_legacy) {
  const char *name = PyCapsule_GetName(cap);
  if (name == nullptr && PyErr_Occurred()) return false;
  const bool versioned = name != nullptr && std::strcmp(name, kCapsuleVersioned) == 0;
  const bool legacy = !versioned && name != nullptr && std::strcmp(name, kCapsuleLegacy) == 0;
  if (!versioned && !legacy) {
    if (name != nullptr && (std::strcmp(name, kCapsuleVersionedUsed) == 0 ||
                            std::strcmp(name, kCapsuleLegacyUsed) == 0)) {
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
  int32_t st =
      versioned
          ? import_tensor(static_cast<DLManagedTensorVersioned *>(ptr), "hurray.from_dlpack", &h)
          : import_tensor(static_cast<DLManagedTensor *>(ptr), "hurray.from_dlpack", &h);
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
  *was_legacy = legacy;
  return true;
}

// One call obj.__dlpack__(max_version=(1, 3)[, dl_device=...][, copy=...]
// [, stream=...]); a keyword whose value is nullptr is left out.
PyObject *call_dlpack_once(PyObject *obj, PyObject *dl_device, PyObject *copy, PyObject *stream) {
  PyObject *argv[5] = {obj, g_names.max_version_value, nullptr, nullptr, nullptr};
  PyObject *names[4] = {g_names.max_version, nullptr, nullptr, nullptr};
  Py_ssize_t nkw = 1;
  if (dl_device != nullptr) {
    names[nkw] = g_names.dl_device;
    argv[1 + nkw++] = dl_device;
  }
  if (copy != nullptr) {
    names[nkw] = g_names.copy;
    argv[1 + nkw++] = copy;
  }
  if (stream != nullptr) {
    names[nkw] = g_names.stream;
    argv[1 + nkw++] = stream;
  }
  PyObject *kwnames = g_names.kw_max_version;
  if (nkw == 1) {
    Py_INCREF(kwnames);
  } else {
    kwnames = PyTuple_New(nkw);
    if (kwnames == nullptr) return nullptr;
    for (Py_ssize_t k = 0; k < nkw; ++k) {
      Py_INCREF(names[k]);
      PyTuple_SET_ITEM(kwnames, k, names[k]);
    }
  }
  PyObject *cap =
      PyObject_VectorcallMethod(g_names.dlpack, argv, 1 | PY_VECTORCALL_ARGUMENTS_OFFSET, kwnames);
  Py_DECREF(kwnames);
  return cap;
}

// obj.__dlpack__(stream=...) alone (a producer older than DLPack 1.0, which
// knew `stream` but not max_version), or obj.__dlpack__() when stream is
// nullptr.
PyObject *call_dlpack_legacy(PyObject *obj, PyObject *stream) {
  PyObject *argv[2] = {obj, stream};
  if (stream == nullptr) {
    return PyObject_VectorcallMethod(g_names.dlpack, argv, 1 | PY_VECTORCALL_ARGUMENTS_OFFSET,
                                     nullptr);
  }
  PyObject *kwnames = PyTuple_Pack(1, g_names.stream);
  if (kwnames == nullptr) return nullptr;
  PyObject *cap =
      PyObject_VectorcallMethod(g_names.dlpack, argv, 1 | PY_VECTORCALL_ARGUMENTS_OFFSET, kwnames);
  Py_DECREF(kwnames);
  return cap;
}

// Asks a producer for its capsule (docs/impl/python.md §2, from_dlpack):
//   1. obj.__dlpack__(max_version=(1, 3)[, dl_device=...][, copy=...]
//      [, stream=...]), `stream` for the device the producer exports on;
//   2. if dl_device was passed and the producer raised BufferError or
//      NotImplementedError (it cannot export to that device, as NumPy for
//      anything but the CPU), again without dl_device and with
//      `own_stream` (the stream for its own device): the tensor comes on the
//      producer's own device and from_dlpack copies it with hurray_copy.
//      copy=False is passed again, copy=True is not (the producer's copy
//      would be a second one);
//   3. if the producer raised TypeError (older than DLPack 1.0, the keywords
//      are unknown to it), obj.__dlpack__(stream=...) with the stream of the
//      last call when there was one, and if that raises TypeError too,
//      obj.__dlpack__() without arguments.
// dl_device, copy and the streams are nullptr when not to be passed.
// *used_stream is the stream the call that answered was given (borrowed).
PyObject *call_dlpack(PyObject *obj, PyObject *copy, PyObject *dl_device, PyObject *stream,
                      PyObject *own_stream, PyObject **used_stream) {
  *used_stream = stream;
  PyObject *cap = call_dlpack_once(obj, dl_device, copy, stream);
  if (cap == nullptr && dl_device != nullptr &&
      (PyErr_ExceptionMatches(PyExc_BufferError) ||
       PyErr_ExceptionMatches(PyExc_NotImplementedError))) {
    PyErr_Clear();
    *used_stream = own_stream;
    cap = call_dlpack_once(obj, nullptr, copy == Py_False ? copy : nullptr, own_stream);
  }
  if (cap == nullptr && PyErr_ExceptionMatches(PyExc_TypeError)) {
    PyErr_Clear();
    if (*used_stream != nullptr) {
      cap = call_dlpack_legacy(obj, *used_stream);
      if (cap == nullptr && PyErr_ExceptionMatches(PyExc_TypeError)) {
        PyErr_Clear();
        *used_stream = nullptr;
        cap = call_dlpack_legacy(obj, nullptr);
      }
    } else {
      cap = call_dlpack_legacy(obj, nullptr);
    }
  } else if (cap == nullptr && PyErr_ExceptionMatches(PyExc_AttributeError)) {
    // Only translate a missing __dlpack__, not an AttributeError raised inside it.
    PyObject *attr = PyObject_GetAttr(obj, g_names.dlpack);
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
  PyObject *meth = PyObject_GetAttr(obj, g_names.dlpack_device);
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

// The `stream` from_dlpack passes to a producer that exports on a device of
// type `device_type` (known false: the producer did not say), per the array
// API's __dlpack__ (docs/impl/python.md §4): the caller's stream= when given
// (checked against the device's rules where the device is known), else 1
// (the legacy default stream) for CUDA and CUDA managed memory, 0 (the
// default stream) for ROCm, and nothing for the CPU, pinned host memory and
// other types (None, which the specification lets a producer read as the
// legacy default stream). *out is a new reference or nullptr (nothing
// passed); false with an exception set for a stream the device cannot take.
bool cuda_family(int32_t device_type) {
  return device_type == HURRAY_DEVICE_CUDA || device_type == HURRAY_DEVICE_CUDA_HOST ||
         device_type == HURRAY_DEVICE_CUDA_MANAGED;
}
bool rocm_family(int32_t device_type) {
  return device_type == HURRAY_DEVICE_ROCM || device_type == HURRAY_DEVICE_ROCM_HOST;
}

bool stream_for(PyObject *caller, bool known, int32_t device_type, PyObject **out) {
  *out = nullptr;
  const bool cuda = cuda_family(device_type);
  const bool rocm = rocm_family(device_type);
  if (caller == Py_None) {
    if (!known) return true;
    long long v;
    if (device_type == HURRAY_DEVICE_CUDA || device_type == HURRAY_DEVICE_CUDA_MANAGED) {
      v = 1;
    } else if (device_type == HURRAY_DEVICE_ROCM) {
      v = 0;
    } else {
      return true;
    }
    *out = PyLong_FromLongLong(v);
    return *out != nullptr;
  }
  long long s = 0;
  int overflow = 0;
  if (!parse_index(caller, "hurray.from_dlpack: stream", &s, &overflow)) return false;
  if (overflow != 0 || s < -1) {
    PyErr_SetString(PyExc_ValueError, "hurray.from_dlpack: stream is out of range");
    return false;
  }
  if (known && !cuda && !rocm) {
    PyErr_Format(PyExc_ValueError,
                 "hurray.from_dlpack: stream=%lld given, but the producer exports on device "
                 "type %d, which has no streams in the DLPack protocol (only CUDA and ROCm "
                 "devices take one)",
                 s, static_cast<int>(device_type));
    return false;
  }
  if (known && cuda && s == 0) {
    PyErr_SetString(PyExc_ValueError,
                    "hurray.from_dlpack: stream 0 is not valid for CUDA (1: legacy default "
                    "stream, 2: per-thread default stream, >2: a cudaStream_t, -1: no "
                    "synchronisation)");
    return false;
  }
  if (known && rocm && (s == 1 || s == 2)) {
    PyErr_Format(PyExc_ValueError,
                 "hurray.from_dlpack: stream %lld is not valid for ROCm (0: default stream, "
                 ">2: a hipStream_t, -1: no synchronisation)",
                 s);
    return false;
  }
  *out = PyLong_FromLongLong(s);
  return *out != nullptr;
}

PyObject *raise_copy_false_crosses(hurray_device from, hurray_device to) {
  PyErr_Format(PyExc_BufferError,
               "hurray.from_dlpack: the tensor is on device (%d, %d); moving it to device "
               "(%d, %d) needs a copy, but copy=False",
               from.device_type, from.device_id, to.device_type, to.device_id);
  return nullptr;
}

// The DLPack C exchange API path of from_dlpack, when the producer's type
// has a usable table and the request can be met by it. Returns 1 (imported
// into *h), 0 (take the capsule path) or -1 (error set).
int try_exchange_api(PyObject *obj, int copy_mode, bool device_given, hurray_device want,
                     hurray_buffer *h, bool *order_known, void **order_stream) {
  if (PyCapsule_CheckExact(obj)) return 0;
  if (copy_mode == 1) {  // the table never copies: the producer's own copy
    count_consumer_path(false);
    return 0;
  }
  const ProducerTable table = exchange_api_of(Py_TYPE(obj));
  const DLPackExchangeAPI *api = table.api;
  if (api == nullptr && PyErr_Occurred()) return -1;
  bool use_table = api != nullptr;
  if (use_table && device_given && Py_TYPE(obj) == &BufferType) {
    // A Buffer on the device asked for was shared directly: this one is
    // on another, which the table cannot reach (and asking for its view
    // would order its pending work on the default stream for nothing).
    use_table = false;
  } else if (use_table && device_given) {
    use_table = false;
    if (api->dltensor_from_py_object_no_sync != nullptr) {
      DLTensor view;
      if (api->dltensor_from_py_object_no_sync(obj, &view) != 0) {
        if (!PyErr_Occurred()) {
          PyErr_Format(PyExc_BufferError,
                       "hurray.from_dlpack: %.100s's dltensor_from_py_object_no_sync failed "
                       "without setting an exception",
                       Py_TYPE(obj)->tp_name);
          return -1;
        }
        // A producer that will not lend a view (BufferError: hurray.Buffer
        // refuses one of read-only memory) is asked through __dlpack__.
        if (!PyErr_ExceptionMatches(PyExc_BufferError)) return -1;
        PyErr_Clear();
      } else {
        use_table =
            same_device(hurray_device{view.device.device_type, view.device.device_id}, want);
      }
    }
  }
  count_consumer_path(use_table);
  if (!use_table) return 0;
  const int r = import_via_exchange_api(obj, table, h, order_known, order_stream);
  // A torch tensor the table sent on to __dlpack__ (its error, or its
  // refusal): the capsule path follows, and is counted too.
  if (r == 0) count_consumer_path(false);
  return r;
}

}  // namespace

PyObject *mod_from_dlpack(PyObject *, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
  PyObject *copy = Py_None, *device = Py_None, *stream = Py_None;
  if (nargs != 1) {
    PyErr_Format(PyExc_TypeError, "from_dlpack() takes exactly 1 positional argument (%zd given)",
                 nargs);
    return nullptr;
  }
  PyObject *obj = args[0];
  if (kwnames != nullptr) {
    PyObject *const names[3] = {g_names.copy, g_names.device, g_names.stream};
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(kwnames); ++i) {
      PyObject *key = PyTuple_GET_ITEM(kwnames, i);
      const int which = kw_index(key, names, 3);
      if (which == 0) {
        copy = args[1 + i];
      } else if (which == 1) {
        device = args[1 + i];
      } else if (which == 2) {
        stream = args[1 + i];
      } else {
        if (!PyErr_Occurred()) {
          PyErr_Format(PyExc_TypeError, "from_dlpack() got an unexpected keyword argument '%U'",
                       key);
        }
        return nullptr;
      }
    }
  }
  const int copy_mode = parse_copy(copy, "hurray.from_dlpack");
  if (copy_mode == -2) return nullptr;
  // The producer is passed a real bool, or no copy keyword at all.
  PyObject *copy_arg = copy_mode == -1 ? nullptr : copy_mode ? Py_True : Py_False;
  hurray_device want{0, 0};
  const bool device_given = device != Py_None;
  if (device_given && !parse_device(device, "from_dlpack: device", &want)) return nullptr;
  if (stream != Py_None && !PyLong_Check(stream) && !PyIndex_Check(stream)) {
    PyErr_Format(PyExc_TypeError, "hurray.from_dlpack: stream must be an int or None, not %.100s",
                 Py_TYPE(stream)->tp_name);
    return nullptr;
  }

  hurray_buffer h;
  bool legacy_unsaid = false;
  // Where the producer's pending work is ordered, when known: the stream its
  // __dlpack__ was given (none given: the legacy default stream, which the
  // protocol tells it to assume), or its table's current_work_stream. The
  // Buffer's event is recorded there (docs/impl/python.md §4).
  bool order_known = false, order_default = false;
  void *order_stream = nullptr;
  if (Py_TYPE(obj) == &BufferType && copy_mode != 1 &&
      (!device_given || same_device(want, as_buffer(obj)->h.device))) {
    // Another Buffer on the same memory: share directly, no DLPack round
    // trip; the flags (READ_ONLY) come along.
    BufferObject *src = as_buffer(obj);
    if (!check_live(src)) return nullptr;
    hurray_buffer pair[2];
    int32_t st = hurray_share(&src->h, 2, pair);
    if (st != HURRAY_OK) return raise_status(st, "hurray.from_dlpack");
    src->h = pair[0];
    PyObject *r = new_buffer(&pair[1], src->legacy_unsaid);
    if (r != nullptr) buffer_event_share(src, as_buffer(r));  // the same pending work
    return r;
  }

  // A producer whose type publishes the DLPack C exchange API is taken
  // through its table (docs/impl/python.md, "The DLPack C exchange API").
  const int via_table =
      try_exchange_api(obj, copy_mode, device_given, want, &h, &order_known, &order_stream);
  if (via_table < 0) return nullptr;
  if (via_table == 0) {
    PyObject *cap = nullptr;
    if (PyCapsule_CheckExact(obj)) {
      cap = obj;
      Py_INCREF(cap);
    } else {
      // A producer is asked for another device only when it is not already
      // on that device; if it cannot export there, call_dlpack takes the
      // tensor where it is, and the copy below moves it.
      hurray_device own{0, 0};
      bool known = false;
      if (!producer_device(obj, &own, &known)) {
        // Without device= or stream=, the device only picks the default
        // stream: a producer whose __dlpack_device__ raises (torch's meta
        // and mkldnn tensors) is asked with no stream, so that its own
        // __dlpack__ says why it cannot export.
        if (device_given || stream != Py_None) return nullptr;
        PyErr_Clear();
        known = false;
      }
      PyObject *dl_device = nullptr;
      if (device_given) {
        if (known && !same_device(own, want) && copy_mode == 0) {
          return raise_copy_false_crosses(own, want);
        }
        if (!known || !same_device(own, want)) {
          // Producers are handed the normalised tuple.
          dl_device = Py_BuildValue("(ii)", want.device_type, want.device_id);
          if (dl_device == nullptr) return nullptr;
        }
      }
      // The stream goes by the device the producer exports on: the one
      // asked for (dl_device), else its own (docs/impl/python.md §4). When
      // it cannot export to dl_device, it is asked again on its own device
      // with that device's default stream: the caller's stream belongs to
      // the device asked for, and hurray_copy's copy finishes before
      // from_dlpack returns.
      PyObject *first = nullptr, *fallback = nullptr;
      const bool ok_first = dl_device != nullptr
                                ? stream_for(stream, true, want.device_type, &first)
                                : stream_for(stream, known, own.device_type, &first);
      if (!ok_first ||
          (dl_device != nullptr && !stream_for(Py_None, known, own.device_type, &fallback))) {
        Py_XDECREF(first);
        Py_XDECREF(dl_device);
        return nullptr;
      }
      PyObject *used = nullptr;
      cap = call_dlpack(obj, copy_arg, dl_device, first, fallback, &used);
      Py_XDECREF(dl_device);
      // The stream the call that answered was given (an int stream_for
      // made); -1 asked for no synchronisation: nothing is known.
      if (used == nullptr) {
        order_known = order_default = true;
      } else {
        const long long v = PyLong_AsLongLong(used);
        order_known = v != -1;
        order_stream = reinterpret_cast<void *>(static_cast<intptr_t>(v));
      }
      Py_XDECREF(first);
      Py_XDECREF(fallback);
      if (cap == nullptr) return nullptr;
      if (!PyCapsule_CheckExact(cap)) {
        PyErr_Format(PyExc_TypeError,
                     "hurray.from_dlpack: %.100s.__dlpack__() returned %.100s, not a capsule",
                     Py_TYPE(obj)->tp_name, Py_TYPE(cap)->tp_name);
        Py_DECREF(cap);
        return nullptr;
      }
    }
    // A legacy capsule said nothing about writability (read-only for now,
    // as NumPy takes it; BufferObject::legacy_unsaid).
    bool was_legacy = false;
    bool ok = import_capsule(cap, &h, &was_legacy);
    legacy_unsaid = ok && was_legacy;
    Py_DECREF(cap);
    if (!ok) return nullptr;
  }
  // Only the GPU types have streams to order.
  order_known = order_known && has_streams(h.device.device_type);
  if (order_default) order_stream = buffer_stream(h.device.device_type);

  // copy / device the producer did not (or could not be asked to) honour.
  const hurray_device target = device_given ? want : h.device;
  const bool other_device = !same_device(target, h.device);
  if (other_device && copy_mode == 0) {
    raise_copy_false_crosses(h.device, target);
    release_handle(&h);
    return nullptr;
  }
  if (other_device || (copy_mode == 1 && !(h.flags & HURRAY_FLAG_IS_COPIED))) {
    // hurray_copy copies on the default stream and completes before it
    // returns: that stream waits for the producer's pending work first (an
    // event, no host blocking), and the copy needs no event afterwards.
    void *own_stream = buffer_stream(h.device.device_type);
    if (order_known && order_stream != own_stream) {
      const int32_t st = hurray_stream_wait(h.device, order_stream, own_stream);
      if (st != HURRAY_OK) {
        raise_status(st, "hurray.from_dlpack (stream wait)");
        release_handle(&h);
        return nullptr;
      }
    }
    order_known = false;
    hurray_buffer c;
    int32_t st = hurray_copy(&h, target, &c);
    if (st != HURRAY_OK) {
      raise_status(st, "hurray.from_dlpack (copy)");
      release_handle(&h);
      return nullptr;
    }
    release_handle(&h);
    h = c;
    legacy_unsaid = false;  // a private copy: writable
  }
  // The producer's pending work travels with the Buffer as an event recorded
  // where it was ordered (docs/impl/python.md §4).
  BufferEvent *event = nullptr;
  if (order_known &&
      !buffer_event_record(h.device, order_stream, "hurray.from_dlpack (event)", &event)) {
    release_handle(&h);
    return nullptr;
  }
  PyObject *r = new_buffer(&h, legacy_unsaid);
  if (r != nullptr) {
    as_buffer(r)->event = event;
  } else if (event != nullptr) {
    (void)hurray_event_release(event->event);
    PyMem_Free(event);
  }
  return r;
}

// --- used by exchange_api.cc -------------------------------------------------

bool import_versioned(DLManagedTensorVersioned *t, const char *what, hurray_buffer *out) {
  int32_t st = import_tensor(t, what, out);
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

}  // namespace hurray_py
