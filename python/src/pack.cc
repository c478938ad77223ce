// SPDX-License-Identifier: Apache-2.0
// _pack(srcs, shared): the native half of hurray.pack (hurray/_pack.py,
// docs/impl/python.md §12, "hurray.pack"): one tensor group
// (hurray_alloc_group) with a compact row-major member per source Buffer of
// the same dtype and shape, and one copy of each source's elements into it.
#include <cstdio>
#include <cstring>
#include <vector>

#include "binding.h"

namespace hurray_py {
namespace {

bool host_addressable(int32_t device_type) {
  return device_type == HURRAY_DEVICE_CPU || device_type == HURRAY_DEVICE_CUDA_HOST ||
         device_type == HURRAY_DEVICE_CUDA_MANAGED || device_type == HURRAY_DEVICE_ROCM_HOST;
}

// One source to copy: its handle's facts, read with the GIL held.
struct Job {
  const hurray_buffer *src;
  hurray_extent ext;
  char *dst;  // the group member's first byte
};

// Copies a strided tensor of whole-byte elements into compact row-major
// order at dst. Runs without the GIL (plain memory).
void copy_strided(const hurray_buffer &s, int64_t itemsize, char *dst) {
  const int32_t nd = s.ndim;
  const char *base = static_cast<const char *>(s.data) + s.byte_offset;
  int64_t idx[HURRAY_MAX_NDIM] = {0};
  const int32_t last = nd - 1;
  const int64_t inner = nd > 0 ? s.shape[last] : 1;
  const int64_t inner_stride = nd > 0 ? s.strides[last] : 1;
  for (;;) {
    int64_t off = 0;
    for (int32_t d = 0; d < last; ++d) off += idx[d] * s.strides[d];
    const char *row = base + off * itemsize;
    if (inner_stride == 1) {
      std::memcpy(dst, row, static_cast<size_t>(inner * itemsize));
      dst += inner * itemsize;
    } else {
      for (int64_t k = 0; k < inner; ++k) {
        std::memcpy(dst, row + k * inner_stride * itemsize, static_cast<size_t>(itemsize));
        dst += itemsize;
      }
    }
    int32_t d = last - 1;
    while (d >= 0 && ++idx[d] == s.shape[d]) idx[d--] = 0;
    if (d < 0) return;
  }
}

}  // namespace

// _pack(srcs: list[Buffer], shared: bool, dtypes: list | None) -> list[Buffer]
// dtypes[i], when not None, is the dtype member i gets instead of its
// source's (an ml_dtypes NumPy dtype whose array came as unsigned integers
// of the same size, since NumPy's DLPack export does not know it).
PyObject *mod_pack(PyObject *, PyObject *args) {
  PyObject *list;
  int shared = 1;
  PyObject *dtypes = Py_None;
  if (!PyArg_ParseTuple(args, "O!p|O:_pack", &PyList_Type, &list, &shared, &dtypes)) {
    return nullptr;
  }
  const Py_ssize_t n = PyList_GET_SIZE(list);
  if (dtypes != Py_None && (!PyList_Check(dtypes) || PyList_GET_SIZE(dtypes) != n)) {
    PyErr_SetString(PyExc_TypeError, "_pack: dtypes must be None or a list as long as srcs");
    return nullptr;
  }
  PyObject *out = PyList_New(n);
  if (out == nullptr || n == 0) return out;
  std::vector<hurray_tensor_desc> descs(static_cast<size_t>(n));
  std::vector<Job> jobs(static_cast<size_t>(n));
  std::vector<hurray_buffer> hs(static_cast<size_t>(n));
  for (Py_ssize_t i = 0; i < n; ++i) {
    PyObject *o = PyList_GET_ITEM(list, i);
    const hurray_buffer *h = live_handle(o);
    if (h == nullptr) {
      Py_DECREF(out);
      return nullptr;
    }
    if (!host_addressable(h->device.device_type)) {
      PyErr_Format(PyExc_BufferError,
                   "hurray.pack: tensor %zd is on %s memory (device (%d, %d)), which the CPU "
                   "cannot read; copy it to the CPU first (tensor.cpu(), or "
                   "hurray.from_dlpack(x, device='cpu'))",
                   i, device_name(h->device.device_type), h->device.device_type,
                   h->device.device_id);
      Py_DECREF(out);
      return nullptr;
    }
    Job &j = jobs[static_cast<size_t>(i)];
    j.src = h;
    int32_t st = hurray_buffer_extent(h, &j.ext);
    if (st != HURRAY_OK) {
      Py_DECREF(out);
      return raise_status(st, "hurray.pack");
    }
    if (!j.ext.contiguous && j.ext.itemsize_bits % 8 != 0) {
      PyErr_Format(PyExc_BufferError,
                   "hurray.pack: tensor %zd is a strided tensor of packed sub-byte elements "
                   "(%lld bits each), which cannot be gathered element by element; make it "
                   "contiguous first",
                   i, static_cast<long long>(j.ext.itemsize_bits));
      Py_DECREF(out);
      return nullptr;
    }
    hurray_tensor_desc &d = descs[static_cast<size_t>(i)];
    d.dtype = h->dtype;
    d.ndim = h->ndim;
    d.shape = h->shape;
    // The copy is private and writable; the element layout stays.
    d.flags = h->flags & HURRAY_FLAG_SUBBYTE_PADDED;
    PyObject *as = dtypes == Py_None ? Py_None : PyList_GET_ITEM(dtypes, i);
    if (as != Py_None) {
      uint64_t layout = 0;
      if (!parse_dtype(as, &d.dtype, &layout)) {
        Py_DECREF(out);
        return nullptr;
      }
      d.flags = layout;
      const int64_t bits = static_cast<int64_t>(d.dtype.bits) * d.dtype.lanes;
      const int64_t mem_bits = (layout & HURRAY_FLAG_SUBBYTE_PADDED) ? (bits + 7) / 8 * 8 : bits;
      if (mem_bits != j.ext.itemsize_bits) {
        PyErr_Format(PyExc_ValueError,
                     "hurray.pack: tensor %zd: its dtype takes %lld bits per element, but the "
                     "source's elements take %lld",
                     i, static_cast<long long>(mem_bits),
                     static_cast<long long>(j.ext.itemsize_bits));
        Py_DECREF(out);
        return nullptr;
      }
    }
  }
  for (Py_ssize_t i = 0; i < n; ++i) {
    PyObject *b = new_empty_buffer();
    if (b == nullptr) {
      Py_DECREF(out);
      return nullptr;
    }
    PyList_SET_ITEM(out, i, b);
  }
  size_t fi = HURRAY_BATCH_NO_INDEX;
  int32_t st =
      hurray_alloc_group(hurray_device{HURRAY_DEVICE_CPU, 0}, static_cast<size_t>(n), descs.data(),
                         shared ? HURRAY_ALLOC_SHAREABLE : 0, nullptr, hs.data(), &fi);
  if (st != HURRAY_OK) {
    char what[64];
    std::snprintf(
        what, sizeof what, "hurray.pack (tensor %zd)",
        fi == HURRAY_BATCH_NO_INDEX ? static_cast<Py_ssize_t>(-1) : static_cast<Py_ssize_t>(fi));
    raise_status(st, fi == HURRAY_BATCH_NO_INDEX ? "hurray.pack" : what);
    Py_DECREF(out);
    return nullptr;
  }
  for (Py_ssize_t i = 0; i < n; ++i) {
    // A compact member: its first byte is its element (0, ..., 0).
    const hurray_buffer &d = hs[static_cast<size_t>(i)];
    jobs[static_cast<size_t>(i)].dst = static_cast<char *>(d.data) + d.byte_offset;
  }
  // The one copy: plain memory, without the GIL. The sources stay alive:
  // their Buffers are in `list`, which the caller holds.
  Py_BEGIN_ALLOW_THREADS;
  for (Py_ssize_t i = 0; i < n; ++i) {
    const Job &j = jobs[static_cast<size_t>(i)];
    if (j.ext.numel == 0) continue;
    if (j.ext.contiguous) {
      std::memcpy(j.dst, static_cast<const char *>(j.src->data) + j.ext.lowest,
                  static_cast<size_t>(j.ext.highest - j.ext.lowest));
    } else {
      copy_strided(*j.src, j.ext.itemsize_bits / 8, j.dst);
    }
  }
  Py_END_ALLOW_THREADS;
  for (Py_ssize_t i = 0; i < n; ++i) {
    if (g_check_labels) label_python_site(&hs[static_cast<size_t>(i)]);
    buffer_adopt(PyList_GET_ITEM(out, i), &hs[static_cast<size_t>(i)]);
  }
  return out;
}

}  // namespace hurray_py
