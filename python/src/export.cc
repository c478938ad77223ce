// SPDX-License-Identifier: Apache-2.0
// Export: DLPack capsules and hurray.Buffer.__dlpack__ (docs/impl/python.md
// §2 "__dlpack__", §4 streams and devices).
#include <cstring>

#include "binding.h"

namespace hurray_py {
namespace {

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

// Exports a handle as a new capsule; a versioned one says DLPack 1.`minor`.
// Consumes *h in every case.
PyObject *export_capsule(hurray_buffer *h, bool versioned, uint32_t minor) {
  if (versioned) {
    DLManagedTensorVersioned *t = nullptr;
    int32_t st = hurray_to_dlpack_versioned(h, &t);
    if (st != HURRAY_OK) {
      raise_status(st, "hurray.Buffer.__dlpack__");
      release_handle(h);
      return nullptr;
    }
    t->version.major = HURRAY_DLPACK_MAJOR;
    t->version.minor = minor;
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

// The lowest DLPack 1.x minor whose vocabulary describes the tensor:
// 1.1 added the float8/float6/float4 type codes and the sub-byte padding
// flag, 1.2 the Trainium device type (and made strides mandatory, which
// libhurray's exports always carry).
uint32_t needed_minor(const hurray_buffer &h) {
  uint32_t m = 0;
  if ((h.dtype.code >= 7 && h.dtype.code <= 17) || (h.flags & HURRAY_FLAG_SUBBYTE_PADDED)) m = 1;
  if (h.device.device_type == 18) m = 2;  // kDLTrn
  return m;
}

// max_version: None -> *versioned false. Else a (major, minor) tuple of
// integers: major >= 1 -> versioned, with *asked_minor the minor asked for
// (HURRAY_DLPACK_MINOR or more when a later major was asked).
bool parse_max_version(PyObject *max_version, bool *versioned, long long *asked_minor) {
  *versioned = false;
  *asked_minor = 0;
  if (max_version == Py_None) return true;
  if (!PyTuple_Check(max_version) || PyTuple_GET_SIZE(max_version) != 2 ||
      !PyIndex_Check(PyTuple_GET_ITEM(max_version, 0)) ||
      !PyIndex_Check(PyTuple_GET_ITEM(max_version, 1))) {
    PyErr_SetString(PyExc_TypeError,
                    "__dlpack__: max_version must be None or a (major, minor) tuple of ints");
    return false;
  }
  long long major = 0, minor = 0;
  int o_major = 0, o_minor = 0;
  PyObject *major_obj = PyTuple_GET_ITEM(max_version, 0);
  PyObject *minor_obj = PyTuple_GET_ITEM(max_version, 1);
  if (PyLong_CheckExact(major_obj) && PyLong_CheckExact(minor_obj)) {
    // Plain ints (what every consumer passes): no __index__ call needed.
    // (Cannot fail for an exact int: out of range is *overflow.)
    major = PyLong_AsLongLongAndOverflow(major_obj, &o_major);
    minor = PyLong_AsLongLongAndOverflow(minor_obj, &o_minor);
  } else if (!parse_index(major_obj, "__dlpack__: max_version[0]", &major, &o_major) ||
             !parse_index(minor_obj, "__dlpack__: max_version[1]", &minor, &o_minor)) {
    return false;
  }
  if (o_major > 0 || major > HURRAY_DLPACK_MAJOR) {
    *versioned = true;
    *asked_minor = HURRAY_DLPACK_MINOR;  // a later major: the newest 1.x we speak
  } else if (o_major == 0 && major == HURRAY_DLPACK_MAJOR) {
    *versioned = true;
    *asked_minor = o_minor > 0 ? HURRAY_DLPACK_MINOR : o_minor < 0 ? -1 : minor;
  }
  return true;
}

}  // namespace

uint32_t answer_minor(const hurray_buffer &h, long long asked_minor) {
  long long m = asked_minor < HURRAY_DLPACK_MINOR ? asked_minor : HURRAY_DLPACK_MINOR;
  const long long need = needed_minor(h);
  if (m < need) m = need;  // the specification lets a producer answer another version
  return static_cast<uint32_t>(m);
}

// __dlpack__(*, stream=None, max_version=None, dl_device=None, copy=None)
//
// Without a copy every call shares the buffer's handle once more
// (hurray_share): the capsule owns one reference of its own, so the buffer
// stays usable and whichever of the buffer and its capsules goes last frees
// the memory. With a copy the capsule owns a fresh private allocation.
PyObject *buffer_dlpack(PyObject *self, PyObject *const *args, Py_ssize_t nargs,
                        PyObject *kwnames) {
  BufferObject *b = as_buffer(self);
  PyObject *stream = Py_None, *max_version = Py_None, *dl_device = Py_None, *copy = Py_None;
  if (nargs > 1) {
    PyErr_Format(PyExc_TypeError, "__dlpack__() takes at most 1 positional argument (%zd given)",
                 nargs);
    return nullptr;
  }
  if (nargs == 1) stream = args[0];  // older callers pass stream positionally
  if (kwnames != nullptr) {
    PyObject *const names[4] = {g_names.max_version, g_names.copy, g_names.dl_device,
                                g_names.stream};
    Py_ssize_t nkw = PyTuple_GET_SIZE(kwnames);
    for (Py_ssize_t i = 0; i < nkw; ++i) {
      PyObject *key = PyTuple_GET_ITEM(kwnames, i);
      PyObject *value = args[nargs + i];
      const int which = kw_index(key, names, 4);
      if (which == 0) {
        max_version = value;
      } else if (which == 1) {
        copy = value;
      } else if (which == 2) {
        dl_device = value;
      } else if (which == 3) {
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

  // Parsing may run Python code (__index__ of max_version's, dl_device's or
  // stream's items, __bool__ of copy), which may release this very Buffer:
  // its handle is read only after the last of them, once it is known to be
  // live still.
  bool versioned = false;
  long long asked_minor = 0;
  if (!parse_max_version(max_version, &versioned, &asked_minor)) return nullptr;
  bool device_given = false;
  hurray_device asked_device{0, 0};
  if (dl_device != Py_None) {
    if (!parse_device(dl_device, "__dlpack__: dl_device", &asked_device)) return nullptr;
    device_given = true;
  }
  const int copy_mode = parse_copy(copy, "__dlpack__");
  if (copy_mode == -2) return nullptr;
  if (!check_live(b)) return nullptr;
  const hurray_device target = device_given ? asked_device : b->h.device;
  // The stream is the consumer's, on the device it will use the data on.
  // Its __index__ may release the Buffer too: checked again below.
  bool sync = false;
  void *consumer_stream = nullptr;
  if (!parse_stream(target.device_type, stream, &sync, &consumer_stream)) return nullptr;
  if (!check_live(b)) return nullptr;
  const bool other_device = !same_device(target, b->h.device);
  if (other_device && copy_mode == 0) {
    PyErr_Format(PyExc_BufferError,
                 "__dlpack__: the buffer is on device (%d, %d) and dl_device=(%d, %d) asks for "
                 "another one, which needs a copy, but copy=False",
                 b->h.device.device_type, b->h.device.device_id, target.device_type,
                 target.device_id);
    return nullptr;
  }
  const bool make_copy = copy_mode == 1 || other_device;
  if (!versioned && !make_copy && (b->h.flags & HURRAY_FLAG_READ_ONLY) && !b->legacy_unsaid) {
    // Never hand out a writable view of memory known to be read-only (NumPy
    // refuses the same for its read-only arrays). Memory that came in as a
    // legacy tensor, with nothing said (legacy_unsaid), goes on as one: the
    // consumer may write it no more than it could write the source's own
    // legacy capsule (JAX -> hurray -> JAX stays zero-copy).
    PyErr_SetString(
        PyExc_BufferError,
        "hurray.Buffer.__dlpack__: this Buffer is read-only, and the consumer asked for a "
        "legacy (unversioned) DLPack capsule, which cannot say so: the consumer could write "
        "to the memory. Consumers that pass max_version >= (1, 0) (NumPy, PyTorch) take it "
        "zero-copy and read-only. For a consumer that takes only legacy capsules (JAX, "
        "tvm_ffi's __dlpack__ path) hand it a writable private copy: "
        "hurray.from_dlpack(buf, copy=True), or __dlpack__(copy=True)");
    return nullptr;
  }

  hurray_buffer out;
  if (make_copy) {
    // hurray_copy copies on the default stream and completes before it
    // returns: that stream waits for the pending work first (nothing to
    // order for the consumer afterwards).
    if (b->event != nullptr && !order_after_buffer(b, buffer_stream(b->h.device.device_type),
                                                   "hurray.Buffer.__dlpack__ (stream wait)")) {
      return nullptr;
    }
    int32_t st = hurray_copy(&b->h, target, &out);
    if (st != HURRAY_OK) return raise_status(st, "hurray.Buffer.__dlpack__ (copy)");
  } else {
    // Zero-copy: order the consumer's stream after the buffer's pending
    // work (its event, or the default stream; docs/impl/python.md §4).
    if (sync && !order_after_buffer(b, consumer_stream, "hurray.Buffer.__dlpack__ (stream wait)")) {
      return nullptr;
    }
    hurray_buffer pair[2];
    int32_t st = hurray_share(&b->h, 2, pair);
    if (st != HURRAY_OK) return raise_status(st, "hurray.Buffer.__dlpack__");
    b->h = pair[0];
    out = pair[1];
  }
  const uint32_t minor = versioned ? answer_minor(out, asked_minor) : 0;
  return export_capsule(&out, versioned, minor);
}

}  // namespace hurray_py
