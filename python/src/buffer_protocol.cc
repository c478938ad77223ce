// SPDX-License-Identifier: Apache-2.0
// The Python buffer protocol (PEP 3118) of hurray.Buffer: memoryview(buf),
// np.asarray(buf), bytes(buf), array.array, struct.unpack_from(..., buf).
//
// Only memory the host can address (CPU, and the pinned/managed host types
// NumPy also accepts) and dtypes with a struct format character are given
// out; everything else raises BufferError saying what to do instead. Each
// view holds a reference of its own on the memory (hurray_share), so the
// memory stays valid for the view even if the Buffer is released first, and
// the view keeps the Buffer object alive (view->obj), as the protocol says.
// docs/impl/python.md, "The buffer protocol".
#include <cstring>

#include "binding.h"

namespace hurray_py {
namespace {

// What a view owns: one handle, plus its shape and byte strides.
struct ViewBlock {
  hurray_buffer h;
  Py_ssize_t dims[1];  // shape[ndim] then strides[ndim] (allocated longer)
};

bool host_addressable(int32_t device_type) {
  switch (device_type) {
    case HURRAY_DEVICE_CPU:
    case HURRAY_DEVICE_CUDA_HOST:
    case HURRAY_DEVICE_ROCM_HOST:
    case HURRAY_DEVICE_CUDA_MANAGED: return true;
    default: return false;
  }
}

int raise_not_host(const hurray_buffer &h) {
  PyErr_Format(PyExc_BufferError,
               "hurray.Buffer: the buffer protocol can only give memory the CPU can address, "
               "and this Buffer is in %s:%d memory; use DLPack (e.g. torch.from_dlpack(buf)), "
               "or copy it to the CPU first: hurray.from_dlpack(buf, device='cpu')",
               device_name(h.device.device_type), static_cast<int>(h.device.device_id));
  return -1;
}

int refuse(const char *why) {
  PyErr_Format(PyExc_BufferError, "hurray.Buffer: %s", why);
  return -1;
}

int getbuffer(PyObject *self, Py_buffer *view, int flags) {
  view->obj = nullptr;
  BufferObject *b = as_buffer(self);
  if (!check_live(b)) return -1;
  const hurray_buffer &h = b->h;
  if (!host_addressable(h.device.device_type)) return raise_not_host(h);
  const char *format = buffer_format(h.dtype);
  if (format == nullptr) {
    PyObject *name = dtype_name(h.dtype);
    if (name == nullptr) return -1;
    PyErr_Format(PyExc_BufferError,
                 "hurray.Buffer: dtype %U has no struct format character, so the buffer "
                 "protocol cannot describe it; use DLPack instead (e.g. torch.from_dlpack(buf))",
                 name);
    Py_DECREF(name);
    return -1;
  }
  const bool readonly = (h.flags & HURRAY_FLAG_READ_ONLY) != 0;
  if (readonly && (flags & PyBUF_WRITABLE) == PyBUF_WRITABLE) {
    return refuse("the memory is read-only and a writable buffer was requested");
  }
  if (h.ndim > PyBUF_MAX_NDIM) return refuse("too many dimensions for the buffer protocol");
  hurray_extent e;
  int32_t st = hurray_buffer_extent(&h, &e);
  if (st != HURRAY_OK) {
    raise_status(st, "hurray.Buffer (buffer protocol)");
    return -1;
  }
  const Py_ssize_t itemsize = h.dtype.bits / 8;
  const int ndim = h.ndim;
  auto *block = static_cast<ViewBlock *>(
      PyMem_Malloc(sizeof(ViewBlock) + sizeof(Py_ssize_t) * (2 * static_cast<size_t>(ndim))));
  if (block == nullptr) {
    PyErr_SetString(PyExc_MemoryError, "hurray.Buffer: out of memory for a buffer view");
    return -1;
  }
  Py_ssize_t *shape = block->dims;
  Py_ssize_t *strides = block->dims + ndim;
  for (int i = 0; i < ndim; ++i) {
    shape[i] = static_cast<Py_ssize_t>(h.shape[i]);
    if (__builtin_mul_overflow(static_cast<Py_ssize_t>(h.strides[i]), itemsize, &strides[i])) {
      PyMem_Free(block);
      return refuse("a stride in bytes does not fit in Py_ssize_t");
    }
  }
  static char no_elements;  // data may be NULL when there are no elements
  view->buf = h.data != nullptr ? static_cast<char *>(h.data) + h.byte_offset : &no_elements;
  view->len = static_cast<Py_ssize_t>(e.numel) * itemsize;
  view->readonly = readonly ? 1 : 0;
  view->itemsize = itemsize;
  view->format = (flags & PyBUF_FORMAT) == PyBUF_FORMAT ? const_cast<char *>(format) : nullptr;
  view->ndim = ndim;
  view->shape = ndim > 0 ? shape : nullptr;
  view->strides = ndim > 0 ? strides : nullptr;
  view->suboffsets = nullptr;
  view->internal = nullptr;

  const bool c_contig = PyBuffer_IsContiguous(view, 'C') != 0;
  const char *want = nullptr;
  if ((flags & PyBUF_C_CONTIGUOUS) == PyBUF_C_CONTIGUOUS && !c_contig) {
    want = "C-contiguous";
  } else if ((flags & PyBUF_F_CONTIGUOUS) == PyBUF_F_CONTIGUOUS &&
             !PyBuffer_IsContiguous(view, 'F')) {
    want = "Fortran-contiguous";
  } else if ((flags & PyBUF_ANY_CONTIGUOUS) == PyBUF_ANY_CONTIGUOUS &&
             !PyBuffer_IsContiguous(view, 'A')) {
    want = "contiguous";
  } else if ((flags & PyBUF_STRIDES) != PyBUF_STRIDES && !c_contig) {
    want = "C-contiguous (no strides were requested)";
  }
  if (want != nullptr) {
    PyMem_Free(block);
    PyErr_Format(PyExc_BufferError,
                 "hurray.Buffer: a %s buffer was requested and this Buffer's memory is "
                 "strided; make a contiguous copy (e.g. np.ascontiguousarray(np.from_dlpack(buf)))",
                 want);
    return -1;
  }
  if ((flags & PyBUF_STRIDES) != PyBUF_STRIDES) view->strides = nullptr;
  if ((flags & PyBUF_ND) != PyBUF_ND) {
    // A plain bytes-like request (PyBUF_SIMPLE): one flat run of unsigned
    // bytes, as bytes objects give (array.frombytes, hashlib, file.write).
    view->shape = nullptr;
    view->ndim = 1;
    view->itemsize = 1;
  }

  // The view's own reference on the memory.
  hurray_buffer pair[2];
  st = hurray_share(&b->h, 2, pair);
  if (st != HURRAY_OK) {
    PyMem_Free(block);
    raise_status(st, "hurray.Buffer (buffer protocol)");
    return -1;
  }
  b->h = pair[0];
  block->h = pair[1];
  view->internal = block;
  Py_INCREF(self);
  view->obj = self;
  return 0;
}

void releasebuffer(PyObject *, Py_buffer *view) {
  auto *block = static_cast<ViewBlock *>(view->internal);
  if (block == nullptr) return;
  view->internal = nullptr;
  release_handle(&block->h);
  PyMem_Free(block);
}

}  // namespace

PyBufferProcs kBufferProcs = {getbuffer, releasebuffer};

// __array__ of a dtype NumPy's DLPack import does not know, with `npdt` its
// ml_dtypes NumPy dtype (bfloat16, float8_*, int4, ...): NumPy takes a share
// of the memory described as unsigned integers of the same item size, and
// the array is then viewed as `npdt`. Zero-copy, read-only when the Buffer
// is; sub-byte types only in ml_dtypes' layout (one byte per element,
// SUBBYTE_PADDED).
PyObject *array_via_ml_dtypes(BufferObject *b, PyObject *npdt, PyObject *from_dlpack,
                              PyObject *copy) {
  PyObject *size_obj = PyObject_GetAttrString(npdt, "itemsize");
  if (size_obj == nullptr) return nullptr;
  const long itemsize = PyLong_AsLong(size_obj);
  Py_DECREF(size_obj);
  if (itemsize == -1 && PyErr_Occurred()) return nullptr;
  const hurray_dtype d = b->h.dtype;
  const bool sub_byte = d.bits < 8;
  if ((sub_byte && ((b->h.flags & HURRAY_FLAG_SUBBYTE_PADDED) == 0 || itemsize != 1)) ||
      (!sub_byte && itemsize * 8 != d.bits) ||
      (itemsize != 1 && itemsize != 2 && itemsize != 4 && itemsize != 8)) {
    PyErr_Format(PyExc_BufferError,
                 "hurray.Buffer.__array__: NumPy's dtype %R keeps one element in %ld byte(s), "
                 "and this Buffer's %u-bit elements are %s; NumPy cannot view it",
                 npdt, itemsize, static_cast<unsigned>(d.bits),
                 sub_byte ? ((b->h.flags & HURRAY_FLAG_SUBBYTE_PADDED) ? "padded to a byte"
                                                                       : "packed (DLPack's "
                                                                         "default for sub-byte "
                                                                         "types)")
                          : "of another size");
    return nullptr;
  }
  hurray_buffer pair[2];
  int32_t st = hurray_share(&b->h, 2, pair);
  if (st != HURRAY_OK) return raise_status(st, "hurray.Buffer.__array__");
  b->h = pair[0];
  hurray_buffer raw = pair[1];
  raw.dtype = hurray_dtype{1, static_cast<uint8_t>(itemsize * 8), 1};  // uint of that size
  raw.flags &= ~HURRAY_FLAG_SUBBYTE_PADDED;
  PyObject *raw_buf = new_buffer(&raw, b->legacy_unsaid);
  if (raw_buf == nullptr) return nullptr;
  PyObject *kw = copy != Py_None ? Py_BuildValue("{sO}", "copy", copy) : nullptr;
  PyObject *call_args = PyTuple_Pack(1, raw_buf);
  Py_DECREF(raw_buf);
  PyObject *arr = call_args != nullptr && (copy == Py_None || kw != nullptr)
                      ? PyObject_Call(from_dlpack, call_args, kw)
                      : nullptr;
  Py_XDECREF(call_args);
  Py_XDECREF(kw);
  if (arr == nullptr) return nullptr;
  PyObject *view = PyObject_CallMethod(arr, "view", "O", npdt);
  Py_DECREF(arr);
  return view;
}

// NumPy reaches __array__ only when the buffer protocol failed (it ignores
// that error and would otherwise make a 0-d object array): memory the CPU
// cannot address is refused with the buffer protocol's message, dtypes of
// ml_dtypes go through array_via_ml_dtypes, anything else through
// numpy.from_dlpack (dtypes NumPy registered for DLPack).
PyObject *buffer_array(PyObject *self, PyObject *args, PyObject *kwargs) {
  static const char *kwlist[] = {"dtype", "copy", nullptr};
  PyObject *dtype = Py_None, *copy = Py_None;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "|OO:__array__", const_cast<char **>(kwlist),
                                   &dtype, &copy)) {
    return nullptr;
  }
  BufferObject *b = as_buffer(self);
  if (!check_live(b)) return nullptr;
  if (!host_addressable(b->h.device.device_type)) return raise_not_host(b->h), nullptr;
  PyObject *np = PyImport_ImportModule("numpy");
  if (np == nullptr) return nullptr;
  PyObject *from_dlpack = PyObject_GetAttrString(np, "from_dlpack");
  Py_DECREF(np);
  if (from_dlpack == nullptr) return nullptr;
  PyObject *npdt = ml_dtypes_numpy_dtype(b->h.dtype);
  if (npdt == nullptr && PyErr_Occurred()) {
    Py_DECREF(from_dlpack);
    return nullptr;
  }
  if (npdt != nullptr) {
    PyObject *arr = array_via_ml_dtypes(b, npdt, from_dlpack, copy);
    Py_DECREF(npdt);
    Py_DECREF(from_dlpack);
    if (arr == nullptr || dtype == Py_None) return arr;
    PyObject *res = PyObject_CallMethod(arr, "astype", "OO", dtype, Py_False);
    Py_DECREF(arr);
    return res;
  }
  PyObject *kw = copy != Py_None ? Py_BuildValue("{sO}", "copy", copy) : nullptr;
  PyObject *call_args = PyTuple_Pack(1, self);
  PyObject *arr = call_args != nullptr && (copy == Py_None || kw != nullptr)
                      ? PyObject_Call(from_dlpack, call_args, kw)
                      : nullptr;
  Py_XDECREF(call_args);
  Py_XDECREF(kw);
  Py_DECREF(from_dlpack);
  if (arr == nullptr || dtype == Py_None) return arr;
  PyObject *res = PyObject_CallMethod(arr, "astype", "OO", dtype, Py_False);
  Py_DECREF(arr);
  return res;
}

}  // namespace hurray_py
