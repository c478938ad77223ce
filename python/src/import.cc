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

namespace {

// Whether a tensor is one of libhurray's own exports (*ours) and whether
// its deleter needs the GIL-safe wrapper (the return value).
template <typename Tensor>
bool needs_foreign_wrap(const Tensor *t, bool *ours) {
  if constexpr (std::is_same<Tensor, DLManagedTensorVersioned>::value) {
    *ours = t->deleter == g_hurray_versioned_deleter;
    // Another major version is refused below; its other fields are not read.
    return t->deleter != nullptr && !*ours && t->version.major == 1;
  } else {
    *ours = t->deleter == g_hurray_legacy_deleter;
    return t->deleter != nullptr && !*ours;
  }
}

// What the binding does to a handle libhurray just imported (the site
// label, and the READ_ONLY rules of docs/impl/python.md §2).
void after_import(hurray_buffer *h, bool versioned, bool ours) {
  if (g_check_labels) label_python_site(h);
  // A legacy tensor cannot say whether its memory may be written. NumPy
  // takes every legacy capsule as read-only; so does hurray, except for
  // libhurray's own exports, which unwrap to a handle with its own flags.
  if (!versioned && !ours) h->flags |= HURRAY_FLAG_READ_ONLY;
  // No memory at all (data NULL, zero elements: torch's and pyarrow's
  // empties): nothing can be written, and NumPy, which cannot view NULL,
  // makes a writable empty array of its own whatever the flags said. So is
  // the Buffer, so that an empty tensor reaches a legacy-only consumer
  // (JAX, tvm_ffi) through hurray as it does directly. docs/impl/python.md,
  // "Read-only memory: never more writable than the source".
  if (h->data == nullptr && has_no_elements(*h)) h->flags &= ~HURRAY_FLAG_READ_ONLY;
}

}  // namespace

template <typename Tensor>
int32_t import_tensor(Tensor *t, const char *what, hurray_buffer *out) {
  constexpr bool versioned = std::is_same<Tensor, DLManagedTensorVersioned>::value;
  bool ours;
  const bool needs_wrap = needs_foreign_wrap(t, &ours);
  if (needs_wrap && !wrap_foreign_deleter(t, what)) return HURRAY_ERR_OUT_OF_MEMORY;
  hurray_buffer h;
  int32_t st = hurray_import(t, &h);
  if (st != HURRAY_OK) {
    if (needs_wrap) unwrap_foreign_deleter(t);
    if (st != HURRAY_ERR_UNSUPPORTED_VERSION || !versioned) raise_status(st, what);
    return st;
  }
  after_import(&h, versioned, ours);
  *out = h;
  return HURRAY_OK;
}

template int32_t import_tensor(DLManagedTensorVersioned *, const char *, hurray_buffer *);
template int32_t import_tensor(DLManagedTensor *, const char *, hurray_buffer *);

namespace {

// What from_dlpack holds for one object between asking its producer and
// making its Buffer (docs/impl/python.md §2): a live handle (a Buffer
// shared directly, or a tensor already imported), a tensor taken through a
// producer's exchange table (owned: deleted if it is not imported), or a
// capsule (a reference) whose tensor is not imported yet.
struct Pending {
  enum Kind : int { kNone = 0, kHandle, kTableTensor, kCapsule } kind;
  hurray_buffer h;               // kHandle
  BufferObject *event_src;       // kHandle shared from a Buffer: whose event it carries
  bool shared_directly;          // kHandle from a Buffer: no copy/device step
  DLManagedTensorVersioned *tv;  // kTableTensor, or a versioned kCapsule's
  DLManagedTensor *tl;           // a legacy kCapsule's
  PyObject *cap;                 // kCapsule (new reference)
  bool legacy;                   // the tensor came as a legacy capsule
  // Where the producer's pending work is ordered, when known
  // (docs/impl/python.md §4).
  bool order_known, order_default;
  void *order_stream;
};

// Gives back whatever p holds: a handle is released, a table's tensor
// deleted, a capsule's reference dropped (an unconsumed capsule's
// destructor deletes its tensor). Keeps the pending exception.
void drop_pending(Pending *p) {
  switch (p->kind) {
    case Pending::kHandle: release_handle(&p->h); break;
    case Pending::kTableTensor: delete_tensor(p->tv); break;
    case Pending::kCapsule: {
      SavedError saved;
      Py_DECREF(p->cap);
      break;
    }
    case Pending::kNone: break;
  }
  p->kind = Pending::kNone;
}

// Reads a DLPack capsule's tensor without taking it over: *p becomes a
// kCapsule that owns the reference `cap` (stolen in every case). Returns
// false with an exception set (and the reference dropped) when the capsule
// is not an unused 'dltensor_versioned' / 'dltensor' one. One name
// comparison for a versioned capsule.
bool capsule_tensor(PyObject *cap, Pending *p) {
  const char *name = PyCapsule_GetName(cap);
  if (name == nullptr && PyErr_Occurred()) {
    Py_DECREF(cap);
    return false;
  }
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
    Py_DECREF(cap);
    return false;
  }
  void *ptr = PyCapsule_GetPointer(cap, name);
  if (ptr == nullptr) {
    Py_DECREF(cap);
    return false;
  }
  p->kind = Pending::kCapsule;
  p->cap = cap;
  p->legacy = legacy;
  p->tv = versioned ? static_cast<DLManagedTensorVersioned *>(ptr) : nullptr;
  p->tl = legacy ? static_cast<DLManagedTensor *>(ptr) : nullptr;
  return true;
}

// libhurray's UNSUPPORTED_VERSION message speaks to C callers (they keep
// the tensor and must call its deleter). Here the capsule keeps its name,
// hence the tensor, and its destructor deletes it: say that instead.
void raise_capsule_version(const DLManagedTensorVersioned *t, const char *what) {
  const DLPackVersion v = t->version;
  PyErr_Format(PyExc_BufferError,
               "%s: the tensor is DLPack version %u.%u, and only major version %u can be "
               "read; the capsule was left unconsumed (still named '%s'), and its destructor "
               "deletes the tensor [%s]",
               what, static_cast<unsigned>(v.major), static_cast<unsigned>(v.minor),
               static_cast<unsigned>(HURRAY_DLPACK_MAJOR), kCapsuleVersioned,
               hurray_status_name(HURRAY_ERR_UNSUPPORTED_VERSION));
}

// The renamed capsule no longer owns its tensor: the handle does. (SetName
// cannot fail on a capsule whose pointer was read.) Drops the reference.
void mark_capsule_used(Pending *p) {
  (void)PyCapsule_SetName(p->cap, p->legacy ? kCapsuleLegacyUsed : kCapsuleVersionedUsed);
  Py_DECREF(p->cap);
  p->cap = nullptr;
}

// Imports what p holds (one tensor) into a live handle: p becomes a
// kHandle. False with an exception set, p unchanged (still holding what it
// held) on failure.
bool import_one(Pending *p) {
  hurray_buffer h;
  if (p->kind == Pending::kTableTensor) {
    if (!import_versioned(p->tv, "hurray.from_dlpack", &h)) return false;
  } else if (p->kind == Pending::kCapsule) {
    const int32_t st = p->legacy ? import_tensor(p->tl, "hurray.from_dlpack", &h)
                                 : import_tensor(p->tv, "hurray.from_dlpack", &h);
    if (st == HURRAY_ERR_UNSUPPORTED_VERSION && !p->legacy) {
      raise_capsule_version(p->tv, "hurray.from_dlpack");
    }
    if (st != HURRAY_OK) return false;
    mark_capsule_used(p);
  } else {
    return true;
  }
  p->h = h;
  p->kind = Pending::kHandle;
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
// has a usable table and the request can be met by it. Returns 1 (the
// tensor taken into *p, a kTableTensor), 0 (take the capsule path) or -1
// (error set).
int try_exchange_api(PyObject *obj, int copy_mode, bool device_given, hurray_device want,
                     Pending *p) {
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
  DLManagedTensorVersioned *t = nullptr;
  const int r = take_via_exchange_api(obj, table, &t, &p->order_known, &p->order_stream);
  // A torch tensor the table sent on to __dlpack__ (its error, or its
  // refusal): the capsule path follows, and is counted too.
  if (r == 0) count_consumer_path(false);
  if (r == 1) {
    p->kind = Pending::kTableTensor;
    p->tv = t;
  }
  return r;
}

// from_dlpack's keywords, parsed once (for the batch form: once for all).
struct FromArgs {
  int copy_mode;       // parse_copy's -1 / 0 / 1
  PyObject *copy_arg;  // passed to producers: a bool, or nullptr for none
  bool device_given;
  hurray_device want;
  PyObject *stream;  // None or an int-like (borrowed)
};

// Parses copy=, device=, stream= from a vectorcall's keywords (`fn` names
// the function in messages). False with an exception set.
bool parse_from_args(PyObject *const *kwargs, PyObject *kwnames, const char *fn, FromArgs *a) {
  PyObject *copy = Py_None, *device = Py_None, *stream = Py_None;
  if (kwnames != nullptr) {
    PyObject *const names[3] = {g_names.copy, g_names.device, g_names.stream};
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(kwnames); ++i) {
      PyObject *key = PyTuple_GET_ITEM(kwnames, i);
      const int which = kw_index(key, names, 3);
      if (which == 0) {
        copy = kwargs[i];
      } else if (which == 1) {
        device = kwargs[i];
      } else if (which == 2) {
        stream = kwargs[i];
      } else {
        if (!PyErr_Occurred()) {
          PyErr_Format(PyExc_TypeError, "%s() got an unexpected keyword argument '%U'", fn, key);
        }
        return false;
      }
    }
  }
  a->copy_mode = parse_copy(copy, "hurray.from_dlpack");
  if (a->copy_mode == -2) return false;
  // The producer is passed a real bool, or no copy keyword at all.
  a->copy_arg = a->copy_mode == -1 ? nullptr : a->copy_mode ? Py_True : Py_False;
  a->want = hurray_device{0, 0};
  a->device_given = device != Py_None;
  if (a->device_given && !parse_device(device, "from_dlpack: device", &a->want)) return false;
  if (stream != Py_None && !PyLong_Check(stream) && !PyIndex_Check(stream)) {
    PyErr_Format(PyExc_TypeError, "hurray.from_dlpack: stream must be an int or None, not %.100s",
                 Py_TYPE(stream)->tp_name);
    return false;
  }
  a->stream = stream;
  return true;
}

// Step 1 of from_dlpack for one object: asks its producer (a Buffer is
// shared directly; a table is used where it can be; else __dlpack__) and
// fills *p (zeroed by the caller) without importing a tensor. False with an
// exception set and nothing held.
bool acquire(PyObject *obj, const FromArgs &a, Pending *p) {
  if (Py_TYPE(obj) == &BufferType && a.copy_mode != 1 &&
      (!a.device_given || same_device(a.want, as_buffer(obj)->h.device))) {
    // Another Buffer on the same memory: share directly, no DLPack round
    // trip; the flags (READ_ONLY) come along.
    BufferObject *src = as_buffer(obj);
    if (!check_live(src)) return false;
    hurray_buffer pair[2];
    int32_t st = hurray_share(&src->h, 2, pair);
    if (st != HURRAY_OK) return raise_status(st, "hurray.from_dlpack"), false;
    src->h = pair[0];
    p->kind = Pending::kHandle;
    p->h = pair[1];
    p->event_src = src;
    p->shared_directly = true;
    p->legacy = src->legacy_unsaid;
    return true;
  }

  // A producer whose type publishes the DLPack C exchange API is taken
  // through its table (docs/impl/python.md, "The DLPack C exchange API").
  const int via_table = try_exchange_api(obj, a.copy_mode, a.device_given, a.want, p);
  if (via_table < 0) return false;
  if (via_table == 1) return true;
  if (PyCapsule_CheckExact(obj)) {
    Py_INCREF(obj);
    return capsule_tensor(obj, p);
  }
  // A producer is asked for another device only when it is not already
  // on that device; if it cannot export there, call_dlpack takes the
  // tensor where it is, and the copy (finish) moves it.
  hurray_device own{0, 0};
  bool known = false;
  if (!producer_device(obj, &own, &known)) {
    // Without device= or stream=, the device only picks the default
    // stream: a producer whose __dlpack_device__ raises (torch's meta
    // and mkldnn tensors) is asked with no stream, so that its own
    // __dlpack__ says why it cannot export.
    if (a.device_given || a.stream != Py_None) return false;
    PyErr_Clear();
    known = false;
  }
  PyObject *dl_device = nullptr;
  if (a.device_given) {
    if (known && !same_device(own, a.want) && a.copy_mode == 0) {
      return raise_copy_false_crosses(own, a.want), false;
    }
    if (!known || !same_device(own, a.want)) {
      // Producers are handed the normalised tuple.
      dl_device = Py_BuildValue("(ii)", a.want.device_type, a.want.device_id);
      if (dl_device == nullptr) return false;
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
                            ? stream_for(a.stream, true, a.want.device_type, &first)
                            : stream_for(a.stream, known, own.device_type, &first);
  if (!ok_first ||
      (dl_device != nullptr && !stream_for(Py_None, known, own.device_type, &fallback))) {
    Py_XDECREF(first);
    Py_XDECREF(dl_device);
    return false;
  }
  PyObject *used = nullptr;
  PyObject *cap = call_dlpack(obj, a.copy_arg, dl_device, first, fallback, &used);
  Py_XDECREF(dl_device);
  // The stream the call that answered was given (an int stream_for
  // made); -1 asked for no synchronisation: nothing is known.
  if (used == nullptr) {
    p->order_known = p->order_default = true;
  } else {
    const long long v = PyLong_AsLongLong(used);
    p->order_known = v != -1;
    p->order_stream = reinterpret_cast<void *>(static_cast<intptr_t>(v));
  }
  Py_XDECREF(first);
  Py_XDECREF(fallback);
  if (cap == nullptr) return false;
  if (!PyCapsule_CheckExact(cap)) {
    PyErr_Format(PyExc_TypeError,
                 "hurray.from_dlpack: %.100s.__dlpack__() returned %.100s, not a capsule",
                 Py_TYPE(obj)->tp_name, Py_TYPE(cap)->tp_name);
    Py_DECREF(cap);
    return false;
  }
  return capsule_tensor(cap, p);
}

// The last step of from_dlpack for one imported handle (p a kHandle): the
// copy or device move the producer did not (or could not be asked to)
// honour, the event of the producer's pending work, and the Buffer. The
// handle is consumed in every case; nullptr with an exception set.
PyObject *finish(Pending *p, const FromArgs &a) {
  hurray_buffer h = p->h;
  p->kind = Pending::kNone;
  if (p->shared_directly) {
    PyObject *r = new_buffer(&h, p->legacy);
    if (r != nullptr) buffer_event_share(p->event_src, as_buffer(r));  // the same pending work
    return r;
  }
  // A legacy capsule said nothing about writability (read-only for now,
  // as NumPy takes it; BufferObject::legacy_unsaid).
  bool legacy_unsaid = p->legacy;
  // Only the GPU types have streams to order.
  bool order_known = p->order_known && has_streams(h.device.device_type);
  void *order_stream = p->order_default ? buffer_stream(h.device.device_type) : p->order_stream;

  const hurray_device target = a.device_given ? a.want : h.device;
  const bool other_device = !same_device(target, h.device);
  if (other_device && a.copy_mode == 0) {
    raise_copy_false_crosses(h.device, target);
    release_handle(&h);
    return nullptr;
  }
  if (other_device || (a.copy_mode == 1 && !(h.flags & HURRAY_FLAG_IS_COPIED))) {
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

// Adds a note (PEP 678, Python 3.11+) to the pending exception naming the
// element of from_dlpack_many it was raised for. The exception keeps its
// type and message. Never fails (an error while adding is dropped).
void note_element(Py_ssize_t i, PyObject *obj) {
#if PY_VERSION_HEX >= 0x030B0000
  PyObject *type = nullptr, *exc = nullptr, *tb = nullptr;
  PyErr_Fetch(&type, &exc, &tb);
  if (type == nullptr) return;
  PyErr_NormalizeException(&type, &exc, &tb);
  if (exc == nullptr) {
    PyErr_Restore(type, exc, tb);
    return;
  }
  PyObject *note = PyUnicode_FromFormat(
      "hurray.from_dlpack_many: raised for objs[%zd] (%.100s); no Buffer was made, and "
      "every tensor taken so far was given back",
      i, Py_TYPE(obj)->tp_name);
  if (note != nullptr) {
    PyObject *r = PyObject_CallMethod(exc, "add_note", "O", note);
    Py_XDECREF(r);
    Py_DECREF(note);
  }
  PyErr_Clear();
  PyErr_Restore(type, exc, tb);
#else
  (void)i;
  (void)obj;
#endif
}

// A failed batched import (hurray_from_dlpack[_versioned]_n) of the
// element objs[i]: libhurray's message names the tensor ts[k] (its place in
// the batch of one form); it is called "tensor" here, as in from_dlpack's.
void raise_batch_status(int32_t st, Py_ssize_t i, PyObject *obj) {
  const char *msg = hurray_last_error();
  const char *rest = msg;
  if (std::strncmp(msg, "ts[", 3) == 0) {
    const char *close = std::strchr(msg, ']');
    if (close != nullptr) rest = close + 1;
  }
  PyErr_Format(exception_for(st),
               "hurray.from_dlpack_many: objs[%zd] (%.100s): %s%s; nothing was imported [%s]", i,
               Py_TYPE(obj)->tp_name, rest == msg ? "" : "tensor", rest, hurray_status_name(st));
}

}  // namespace

PyObject *mod_from_dlpack(PyObject *, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
  if (nargs != 1) {
    PyErr_Format(PyExc_TypeError, "from_dlpack() takes exactly 1 positional argument (%zd given)",
                 nargs);
    return nullptr;
  }
  FromArgs a;
  if (!parse_from_args(args + 1, kwnames, "from_dlpack", &a)) return nullptr;
  Pending p;
  std::memset(&p, 0, sizeof p);
  if (!acquire(args[0], a, &p)) return nullptr;
  if (!import_one(&p)) {
    drop_pending(&p);
    return nullptr;
  }
  return finish(&p, a);
}

// hurray.from_dlpack_many(objs, /, *, copy=None, device=None, stream=None):
// from_dlpack of every element of a sequence in one pass, all or nothing
// (docs/impl/python.md §2, "from_dlpack_many"):
//   1. every producer is asked (acquire; a table where it has one), nothing
//      imported yet; a failure gives back what the earlier ones gave;
//   2. the versioned tensors are imported in one hurray_from_dlpack_versioned_n
//      call and the legacy ones in one hurray_from_dlpack_n call (each with
//      the GIL-safe deleter); a refusal leaves every tensor with its capsule
//      or is deleted (tables), and names objs[i];
//   3. each handle is finished as from_dlpack does (copy, device, event).
PyObject *mod_from_dlpack_many(PyObject *, PyObject *const *args, Py_ssize_t nargs,
                               PyObject *kwnames) {
  if (nargs != 1) {
    PyErr_Format(PyExc_TypeError,
                 "from_dlpack_many() takes exactly 1 positional argument (%zd given)", nargs);
    return nullptr;
  }
  FromArgs a;
  if (!parse_from_args(args + 1, kwnames, "from_dlpack_many", &a)) return nullptr;
  if (PyUnicode_Check(args[0]) || PyBytes_Check(args[0]) || PyCapsule_CheckExact(args[0])) {
    PyErr_Format(PyExc_TypeError,
                 "hurray.from_dlpack_many: objs must be a sequence or iterable of DLPack "
                 "producers, not %.100s",
                 Py_TYPE(args[0])->tp_name);
    return nullptr;
  }
  PyObject *seq = PySequence_Fast(
      args[0], "hurray.from_dlpack_many: objs must be a sequence or iterable of DLPack producers");
  if (seq == nullptr) return nullptr;
  const Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
  PyObject *const *items = PySequence_Fast_ITEMS(seq);
  PyObject *out = PyList_New(n);
  if (out == nullptr || n == 0) {
    Py_DECREF(seq);
    return out;
  }
  const size_t un = static_cast<size_t>(n);
  // One block: n Pending, n versioned and n legacy tensor pointers, 2n
  // indices, n handles.
  Pending *ps = static_cast<Pending *>(PyMem_Calloc(un, sizeof(Pending)));
  DLManagedTensorVersioned **tvs =
      static_cast<DLManagedTensorVersioned **>(PyMem_Calloc(un, sizeof(void *)));
  DLManagedTensor **tls = static_cast<DLManagedTensor **>(PyMem_Calloc(un, sizeof(void *)));
  Py_ssize_t *vidx = static_cast<Py_ssize_t *>(PyMem_Calloc(un, sizeof(Py_ssize_t)));
  Py_ssize_t *lidx = static_cast<Py_ssize_t *>(PyMem_Calloc(un, sizeof(Py_ssize_t)));
  bool *wrapped = static_cast<bool *>(PyMem_Calloc(un, sizeof(bool)));
  bool *ours = static_cast<bool *>(PyMem_Calloc(un, sizeof(bool)));
  hurray_buffer *hs = static_cast<hurray_buffer *>(PyMem_Calloc(un, sizeof(hurray_buffer)));
  Py_ssize_t acquired = 0, nv = 0, nl = 0;
  bool failed = false;
  if (ps == nullptr || tvs == nullptr || tls == nullptr || vidx == nullptr || lidx == nullptr ||
      wrapped == nullptr || ours == nullptr || hs == nullptr) {
    PyErr_Format(PyExc_MemoryError,
                 "hurray.from_dlpack_many: out of memory for the bookkeeping of %zd tensors", n);
    failed = true;
  }
  // 1. Ask every producer; nothing is imported yet.
  for (Py_ssize_t i = 0; !failed && i < n; ++i) {
    PyObject *obj = items[i];
    if (!acquire(obj, a, &ps[i])) {
      note_element(i, obj);
      failed = true;
      break;
    }
    acquired = i + 1;
    if (ps[i].kind != Pending::kCapsule) continue;
    // The same capsule twice would import its tensor twice (two handles,
    // its deleter run twice): a raw capsule passed twice, or a producer
    // that returns one cached capsule from every __dlpack__ call (the
    // single form refuses its second call, the capsule reading as used;
    // here every capsule stays unconsumed until stage 2).
    for (Py_ssize_t j = 0; j < i; ++j) {
      if (ps[j].kind == Pending::kCapsule && ps[j].cap == ps[i].cap) {
        if (PyCapsule_CheckExact(obj) && items[j] == obj) {
          PyErr_Format(PyExc_ValueError,
                       "hurray.from_dlpack_many: objs[%zd] is the same DLPack capsule as "
                       "objs[%zd]; a capsule can be imported only once; nothing was imported",
                       i, j);
        } else {
          PyErr_Format(PyExc_ValueError,
                       "hurray.from_dlpack_many: objs[%zd] (%.100s): its __dlpack__ returned the "
                       "same DLPack capsule as for objs[%zd]; a capsule can be imported only "
                       "once (a producer returns a new one from each call); nothing was imported",
                       i, Py_TYPE(obj)->tp_name, j);
        }
        failed = true;
        break;
      }
    }
  }
  // 2. Import the tensors, one batched call per DLPack form.
  if (!failed) {
    for (Py_ssize_t i = 0; i < n; ++i) {
      Pending &p = ps[i];
      if (p.kind == Pending::kTableTensor || (p.kind == Pending::kCapsule && !p.legacy)) {
        vidx[nv] = i;
        tvs[nv++] = p.tv;
      } else if (p.kind == Pending::kCapsule) {
        lidx[nl] = i;
        tls[nl++] = p.tl;
      }
    }
    // The GIL-safe deleters first (libhurray's own exports need none).
    for (Py_ssize_t k = 0; !failed && k < nv; ++k) {
      wrapped[k] = needs_foreign_wrap(tvs[k], &ours[vidx[k]]);
      if (wrapped[k] && !wrap_foreign_deleter(tvs[k], "hurray.from_dlpack_many")) {
        wrapped[k] = false;
        failed = true;
      }
    }
    // Legacy tensors' wrap flags live after the versioned ones' (nv + nl <= n).
    bool *lwrapped = wrapped + nv;
    for (Py_ssize_t k = 0; !failed && k < nl; ++k) {
      lwrapped[k] = needs_foreign_wrap(tls[k], &ours[lidx[k]]);
      if (lwrapped[k] && !wrap_foreign_deleter(tls[k], "hurray.from_dlpack_many")) {
        lwrapped[k] = false;
        failed = true;
      }
    }
    size_t fi = HURRAY_BATCH_NO_INDEX;
    int32_t st = HURRAY_OK;
    bool v_done = false;
    if (!failed && nv > 0) {
      st = hurray_from_dlpack_versioned_n(tvs, static_cast<size_t>(nv), HURRAY_IMPORT_DEFAULT, hs,
                                          &fi);
      if (st != HURRAY_OK) {
        const Py_ssize_t i = fi < static_cast<size_t>(nv) ? vidx[fi] : 0;
        if (st == HURRAY_ERR_UNSUPPORTED_VERSION && fi < static_cast<size_t>(nv)) {
          char what[200];
          std::snprintf(what, sizeof what, "hurray.from_dlpack_many: objs[%zd] (%.100s)", i,
                        Py_TYPE(items[i])->tp_name);
          if (ps[i].kind == Pending::kCapsule) {
            raise_capsule_version(ps[i].tv, what);
          } else {
            PyErr_Format(PyExc_BufferError,
                         "%s: the tensor is DLPack version %u.%u, and only major version %u "
                         "can be read [%s]",
                         what, static_cast<unsigned>(ps[i].tv->version.major),
                         static_cast<unsigned>(ps[i].tv->version.minor),
                         static_cast<unsigned>(HURRAY_DLPACK_MAJOR), hurray_status_name(st));
          }
        } else {
          raise_batch_status(st, i, items[i]);
        }
        failed = true;
      } else {
        v_done = true;
      }
    }
    if (!failed && nl > 0) {
      st = hurray_from_dlpack_n(tls, static_cast<size_t>(nl), HURRAY_IMPORT_DEFAULT, hs + nv, &fi);
      if (st != HURRAY_OK) {
        const Py_ssize_t i = fi < static_cast<size_t>(nl) ? lidx[fi] : 0;
        raise_batch_status(st, i, items[i]);
        failed = true;
      }
    }
    if (failed) {
      // Every tensor goes back as it came: the wrappers come off. When the
      // legacy batch refused after the versioned one was imported, those
      // handles own their tensors now: they are released (each producer's
      // deleter runs once) and their capsules read as used.
      for (Py_ssize_t k = 0; k < nv; ++k) {
        if (v_done) {
          Pending &p = ps[vidx[k]];
          if (p.kind == Pending::kCapsule) mark_capsule_used(&p);
          p.kind = Pending::kNone;
          release_handle(&hs[k]);
        } else if (wrapped[k]) {
          unwrap_foreign_deleter(tvs[k]);
        }
      }
      for (Py_ssize_t k = 0; k < nl; ++k) {
        if (lwrapped[k]) unwrap_foreign_deleter(tls[k]);
      }
    } else {
      for (Py_ssize_t k = 0; k < nv + nl; ++k) {
        const bool legacy_form = k >= nv;
        Pending &p = ps[legacy_form ? lidx[k - nv] : vidx[k]];
        after_import(&hs[k], !legacy_form, ours[legacy_form ? lidx[k - nv] : vidx[k]]);
        if (p.kind == Pending::kCapsule) mark_capsule_used(&p);
        p.h = hs[k];
        p.kind = Pending::kHandle;
      }
    }
  }
  if (failed) {
    for (Py_ssize_t i = 0; i < acquired; ++i) drop_pending(&ps[i]);
    Py_CLEAR(out);
  } else {
    // 3. Finish each: copy / device move, event, Buffer.
    for (Py_ssize_t i = 0; i < n; ++i) {
      PyObject *b = finish(&ps[i], a);
      if (b == nullptr) {
        // Give back everything: the rest of the handles, and the Buffers
        // made (with the list).
        for (Py_ssize_t j = i + 1; j < n; ++j) drop_pending(&ps[j]);
        note_element(i, items[i]);
        Py_CLEAR(out);
        break;
      }
      PyList_SET_ITEM(out, i, b);
    }
  }
  PyMem_Free(ps);
  PyMem_Free(tvs);
  PyMem_Free(tls);
  PyMem_Free(vidx);
  PyMem_Free(lidx);
  PyMem_Free(wrapped);
  PyMem_Free(ours);
  PyMem_Free(hs);
  Py_DECREF(seq);
  return out;
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
