// SPDX-License-Identifier: Apache-2.0
// Pickling of hurray.Buffer (docs/impl/python.md §10).
//
// Buffer.__reduce_ex__(protocol) sends the bytes the tensor touches (its
// extent, hurray_buffer_extent) and the layout to rebuild it:
//   protocol >= 5: a pickle.PickleBuffer over those bytes, so a pickler with
//     a buffer_callback (Ray, Dask, pickle.dumps(..., buffer_callback=))
//     carries them out of band, zero-copy; without a callback pickle writes
//     them in band (bytearray, or bytes when read-only);
//   protocol < 5: a bytearray copy (bytes when read-only), in band.
// _rebuild(obj, ...) takes whatever bytes-like object arrives (the same
// PickleBuffer, a memoryview over Ray's object store, a bytearray) as the
// new Buffer's memory, zero-copy: the Buffer holds the object's buffer view
// and releases it exactly once. The Buffer is read-only when the source was
// or when the arriving memory is (a read-only out-of-band buffer never
// becomes writable).
// multiprocessing does not come here: hurray/_mp.py registers its own
// reducer (file descriptors, shared pages) with ForkingPickler.
#include <atomic>
#include <cstdlib>
#include <cstring>

#include "binding.h"

namespace hurray_py {
namespace {

// Counters for the tests (_pickle_stats): Buffers rebuilt by _rebuild and
// how many of their received buffer views were released (atomic: the last
// holder may drop the memory on any thread).
std::atomic<long long> g_rebuilt{0};
std::atomic<long long> g_rebuilt_released{0};

// A DLPack tensor made by this file: the tensor and the storage of its
// shape and strides in one block, plus what keeps the memory alive: either
// a share of a libhurray handle (the extent view of __reduce_ex__), or a
// Python buffer view (the memory _rebuild received).
struct OwnedTensor {
  DLManagedTensorVersioned t;
  int64_t shape[HURRAY_MAX_NDIM];
  int64_t strides[HURRAY_MAX_NDIM];
  hurray_buffer share;  // live for the extent view, empty otherwise
  Py_buffer view;       // view.obj != nullptr for a received buffer
};

// Deleter of the extent view: releases its share (no Python of its own; a
// foreign producer's deleter is GIL-safe already). Any thread.
void delete_extent_view(DLManagedTensorVersioned *t) {
  auto *o = static_cast<OwnedTensor *>(t->manager_ctx);
  (void)hurray_buffer_release(&o->share);
  std::free(o);
}

// Deleter of a received buffer's tensor. Runs with the GIL held: the tensor
// carries the GIL-safe wrapper of release.cc (wrap_foreign_deleter), which
// also skips it once the interpreter is finalizing.
void delete_received(DLManagedTensorVersioned *t) {
  auto *o = static_cast<OwnedTensor *>(t->manager_ctx);
  PyBuffer_Release(&o->view);
  std::free(o);
  g_rebuilt_released.fetch_add(1);
}

OwnedTensor *new_owned(const char *what) {
  auto *o = static_cast<OwnedTensor *>(std::calloc(1, sizeof(OwnedTensor)));
  if (o == nullptr) PyErr_Format(PyExc_MemoryError, "%s: out of memory", what);
  return o;
}

uint64_t dlpack_flags(uint64_t hurray_flags) {
  uint64_t f = 0;
  if (hurray_flags & HURRAY_FLAG_READ_ONLY) f |= DLPACK_FLAG_BITMASK_READ_ONLY;
  if (hurray_flags & HURRAY_FLAG_SUBBYTE_PADDED) f |= DLPACK_FLAG_BITMASK_IS_SUBBYTE_TYPE_PADDED;
  return f;
}

bool host_addressable(int32_t device_type) {
  return device_type == HURRAY_DEVICE_CPU || device_type == 3 /* kDLCUDAHost */ ||
         device_type == 11 /* kDLROCMHost */ || device_type == 13 /* kDLCUDAManaged */;
}

// A 1-d uint8 Buffer over bytes [lo, hi) of b's memory (relative to data,
// as hurray_extent counts them), read-only when b is, owning a share of b's
// handle.
PyObject *extent_view(BufferObject *b, int64_t lo, int64_t hi) {
  const char *what = "hurray.Buffer.__reduce_ex__";
  OwnedTensor *o = new_owned(what);
  if (o == nullptr) return nullptr;
  hurray_buffer two[2];
  int32_t st = hurray_share(&b->h, 2, two);
  if (st != HURRAY_OK) {
    std::free(o);
    return raise_status(st, what);
  }
  b->h = two[0];
  o->share = two[1];
  const hurray_buffer &h = o->share;
  o->shape[0] = hi - lo;
  o->strides[0] = 1;
  DLManagedTensorVersioned &t = o->t;
  t.version.major = 1;
  t.version.minor = 0;
  t.manager_ctx = o;
  t.deleter = delete_extent_view;
  t.flags = (h.flags & HURRAY_FLAG_READ_ONLY) ? DLPACK_FLAG_BITMASK_READ_ONLY : 0;
  t.dl_tensor.data = static_cast<char *>(h.data) + lo;
  t.dl_tensor.device = DLDevice{kDLCPU, 0};
  t.dl_tensor.ndim = 1;
  t.dl_tensor.dtype = DLDataType{kDLUInt, 8, 1};
  t.dl_tensor.shape = o->shape;
  t.dl_tensor.strides = o->strides;
  t.dl_tensor.byte_offset = 0;
  hurray_buffer view;
  st = hurray_from_dlpack_versioned(&t, HURRAY_IMPORT_DEFAULT, &view);
  if (st != HURRAY_OK) {
    delete_extent_view(&t);
    return raise_status(st, what);
  }
  return new_buffer(&view);
}

}  // namespace

// Buffer.__reduce_ex__(protocol)
PyObject *buffer_reduce_ex(PyObject *self, PyObject *arg) {
  BufferObject *b = as_buffer(self);
  long protocol = PyLong_AsLong(arg);
  if (protocol == -1 && PyErr_Occurred()) return nullptr;
  if (!check_live(b)) return nullptr;
  if (!host_addressable(b->h.device.device_type)) {
    PyErr_Format(PyExc_TypeError,
                 "cannot pickle a hurray.Buffer in %s memory: pickle carries host bytes; copy it "
                 "first with hurray.from_dlpack(buf, device='cpu')",
                 device_name(b->h.device.device_type));
    return nullptr;
  }
  hurray_extent ext;
  int32_t st = hurray_buffer_extent(&b->h, &ext);
  if (st != HURRAY_OK) return raise_status(st, "hurray.Buffer.__reduce_ex__");
  PyObject *view = extent_view(b, ext.lowest, ext.highest);
  if (view == nullptr) return nullptr;
  const bool readonly = (b->h.flags & HURRAY_FLAG_READ_ONLY) != 0;
  PyObject *payload = nullptr;
  if (protocol >= 5) {
    payload = PyPickleBuffer_FromObject(view);
  } else {
    PyObject *mv = PyMemoryView_FromObject(view);
    if (mv != nullptr) {
      payload = readonly ? PyBytes_FromObject(mv) : PyByteArray_FromObject(mv);
      Py_DECREF(mv);
    }
  }
  Py_DECREF(view);  // the PickleBuffer keeps it alive; the copy does not need it
  if (payload == nullptr) return nullptr;
  static PyObject *rebuild = nullptr;
  if (rebuild == nullptr) {
    PyObject *mod = PyImport_ImportModule("hurray._native");
    if (mod != nullptr) {
      rebuild = PyObject_GetAttrString(mod, "_rebuild");
      Py_DECREF(mod);
    }
    if (rebuild == nullptr) {
      Py_DECREF(payload);
      return nullptr;
    }
  }
  PyObject *shape = int64_tuple(b->h.shape, b->h.ndim);
  PyObject *strides = int64_tuple(b->h.strides, b->h.ndim);
  PyObject *r = nullptr;
  if (shape != nullptr && strides != nullptr) {
    // (payload, (code, bits, lanes), shape, strides, byte offset of element
    // 0 in payload, hurray flags kept, legacy_unsaid)
    r = Py_BuildValue("O(O(iii)OOLKO)", rebuild, payload, b->h.dtype.code, b->h.dtype.bits,
                      b->h.dtype.lanes, shape, strides,
                      static_cast<long long>(b->h.byte_offset) - ext.lowest,
                      static_cast<unsigned long long>(
                          b->h.flags & (HURRAY_FLAG_READ_ONLY | HURRAY_FLAG_SUBBYTE_PADDED)),
                      b->legacy_unsaid ? Py_True : Py_False);
  }
  Py_XDECREF(shape);
  Py_XDECREF(strides);
  Py_DECREF(payload);
  return r;
}

namespace {

bool parse_int64_tuple(PyObject *seq_obj, int64_t *out, Py_ssize_t *n, const char *what) {
  PyObject *seq = PySequence_Fast(seq_obj, what);
  if (seq == nullptr) return false;
  *n = PySequence_Fast_GET_SIZE(seq);
  if (*n > HURRAY_MAX_NDIM) {
    Py_DECREF(seq);
    PyErr_Format(PyExc_ValueError, "%s: more than %d dimensions", what, HURRAY_MAX_NDIM);
    return false;
  }
  for (Py_ssize_t i = 0; i < *n; ++i) {
    out[i] = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(seq, i));
    if (out[i] == -1 && PyErr_Occurred()) {
      Py_DECREF(seq);
      return false;
    }
  }
  Py_DECREF(seq);
  return true;
}

}  // namespace

// _rebuild(obj, (code, bits, lanes), shape, strides, offset, flags, legacy_unsaid)
PyObject *mod_rebuild(PyObject *, PyObject *args) {
  const char *what = "hurray._native._rebuild";
  PyObject *obj, *shape_obj, *strides_obj;
  int code, bits, lanes, legacy_unsaid;
  long long offset;
  unsigned long long flags;
  if (!PyArg_ParseTuple(args, "O(iii)OOLKp:_rebuild", &obj, &code, &bits, &lanes, &shape_obj,
                        &strides_obj, &offset, &flags, &legacy_unsaid)) {
    return nullptr;
  }
  OwnedTensor *o = new_owned(what);
  if (o == nullptr) return nullptr;
  Py_ssize_t nd = 0, ns = 0;
  if (!parse_int64_tuple(shape_obj, o->shape, &nd, "_rebuild: shape") ||
      !parse_int64_tuple(strides_obj, o->strides, &ns, "_rebuild: strides")) {
    std::free(o);
    return nullptr;
  }
  if (nd != ns || offset < 0 || code < 0 || code > 255 || bits < 0 || bits > 255 || lanes < 0 ||
      lanes > 65535) {
    std::free(o);
    PyErr_Format(PyExc_ValueError, "%s: inconsistent layout in the pickle", what);
    return nullptr;
  }
  if (PyObject_GetBuffer(obj, &o->view, PyBUF_SIMPLE) != 0) {
    std::free(o);
    return nullptr;
  }
  if (o->view.readonly) flags |= HURRAY_FLAG_READ_ONLY;
  DLManagedTensorVersioned &t = o->t;
  t.version.major = 1;
  t.version.minor = (flags & HURRAY_FLAG_SUBBYTE_PADDED) ? 1 : 0;
  t.manager_ctx = o;
  t.deleter = delete_received;
  t.flags = dlpack_flags(flags);
  t.dl_tensor.data = o->view.buf;
  t.dl_tensor.device = DLDevice{kDLCPU, 0};
  t.dl_tensor.ndim = static_cast<int32_t>(nd);
  t.dl_tensor.dtype = DLDataType{static_cast<uint8_t>(code), static_cast<uint8_t>(bits),
                                 static_cast<uint16_t>(lanes)};
  t.dl_tensor.shape = o->shape;
  t.dl_tensor.strides = o->strides;
  t.dl_tensor.byte_offset = static_cast<uint64_t>(offset);
  const char *buf_start = static_cast<const char *>(o->view.buf);
  const Py_ssize_t len = o->view.len;
  g_rebuilt.fetch_add(1);  // counted before the import: a failure below releases it once
  if (!wrap_foreign_deleter(&t, what)) {
    delete_received(&t);
    return nullptr;
  }
  hurray_buffer h;
  int32_t st = hurray_from_dlpack_versioned(&t, HURRAY_IMPORT_DEFAULT, &h);
  if (st != HURRAY_OK) {
    PyObject *r = raise_status(st, what);
    unwrap_foreign_deleter(&t);
    delete_received(&t);
    return r;
  }
  // The received bytes must hold every byte the layout touches.
  hurray_extent ext;
  st = hurray_buffer_extent(&h, &ext);
  const char *data = static_cast<const char *>(h.data);
  if (st != HURRAY_OK ||
      (ext.numel > 0 && (data + ext.lowest < buf_start || data + ext.highest > buf_start + len))) {
    if (st != HURRAY_OK) {
      raise_status(st, what);
    } else {
      PyErr_Format(PyExc_ValueError,
                   "%s: the layout touches bytes [%lld, %lld) but %zd bytes arrived", what,
                   static_cast<long long>(ext.lowest), static_cast<long long>(ext.highest), len);
    }
    release_handle(&h);
    return nullptr;
  }
  return new_buffer(&h, legacy_unsaid != 0);
}

PyObject *mod_pickle_stats(PyObject *, PyObject *) {
  return Py_BuildValue("{sLsL}", "rebuilt", g_rebuilt.load(), "released",
                       g_rebuilt_released.load());
}

}  // namespace hurray_py
