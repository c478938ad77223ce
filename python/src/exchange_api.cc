// SPDX-License-Identifier: Apache-2.0
// The DLPack C exchange API (DLPack 1.3) of hurray._native: hurray.Buffer's
// table (producer side) and hurray.from_dlpack's use of other types' tables
// (consumer side). The rules are in docs/impl/python.md, "The DLPack C
// exchange API"; include/hurray/dlpack.h declares the table.
//
// Every function of the table is called with the GIL held (DLPack's rule),
// returns 0 or -1, never throws, and on failure leaves a Python exception set
// (the allocator instead reports through its SetError callback) and owns or
// frees nothing it did not own before.
#include "binding.h"

#include <cstdint>
#include <cstdio>
#include <cstring>

namespace hurray_py {
namespace {

constexpr const char kCapsuleName[] = "dlpack_exchange_api";

// ---------------------------------------------------------------------------
// Call counters (the private _exchange_api_stats()): they let tests show
// which path a framework or hurray.from_dlpack took. Plain integers: every
// counted call holds the GIL.
// ---------------------------------------------------------------------------
struct Stats {
  unsigned long long allocator;
  unsigned long long from_py_object;
  unsigned long long to_py_object;
  unsigned long long dltensor_from_py_object;
  unsigned long long current_work_stream;
  unsigned long long consumer_table;
  unsigned long long consumer_capsule;
  unsigned long long consumer_table_declined;
};
Stats g_stats;

// ---------------------------------------------------------------------------
// Producer: hurray.Buffer's table
// ---------------------------------------------------------------------------

// The table's current_work_stream answers the default stream (NULL) for
// every device: a Buffer that carries an event (from_dlpack's, pending work
// on another stream) first makes that stream wait for it (no host
// blocking), so that what the table says holds.
bool order_default_stream(PyObject *obj, const char *what) {
  BufferObject *b = as_buffer(obj);
  if (b->event == nullptr) return true;
  return order_after_buffer(b, buffer_stream(b->h.device.device_type), what);
}

// Exports a Buffer like __dlpack__(max_version=(1, 3)) without a copy: the
// handle is shared once more, the Buffer keeps one reference and stays
// usable, the tensor owns the other (its deleter drops it, on any thread,
// without the GIL). A read-only Buffer is refused: the table cannot tell
// which consumer calls it, and consumers that take tensors through tables
// do not all honour READ_ONLY (tvm_ffi 0.1.15 ignores it and hands the
// memory on writable, while its __dlpack__ path refuses NumPy's read-only
// arrays), so READ_ONLY in the struct would not keep the memory unwritten.
int from_py_object(void *py_object, DLManagedTensorVersioned **out) {
  ++g_stats.from_py_object;
  if (py_object == nullptr || out == nullptr) {
    PyErr_SetString(PyExc_ValueError,
                    "hurray.Buffer managed_tensor_from_py_object_no_sync: NULL argument");
    return -1;
  }
  hurray_buffer *h = live_handle(static_cast<PyObject *>(py_object));
  if (h == nullptr) return -1;
  if (!order_default_stream(static_cast<PyObject *>(py_object),
                            "hurray.Buffer managed_tensor_from_py_object_no_sync")) {
    return -1;
  }
  if (h->flags & HURRAY_FLAG_READ_ONLY) {
    PyErr_SetString(PyExc_BufferError,
                    "hurray.Buffer managed_tensor_from_py_object_no_sync: this Buffer is "
                    "read-only, and a consumer of the C exchange table may ignore the tensor's "
                    "READ_ONLY flag (tvm_ffi does) and write to the memory; hand over a "
                    "writable private copy: hurray.from_dlpack(buf, copy=True), or pass "
                    "buf.__dlpack__(max_version=(1, 3)) to a consumer that honours READ_ONLY");
    return -1;
  }
  hurray_buffer pair[2];
  int32_t st = hurray_share(h, 2, pair);
  if (st != HURRAY_OK) {
    raise_status(st, "hurray.Buffer managed_tensor_from_py_object_no_sync");
    return -1;
  }
  *h = pair[0];
  DLManagedTensorVersioned *t = nullptr;
  st = hurray_to_dlpack_versioned(&pair[1], &t);
  if (st != HURRAY_OK) {
    raise_status(st, "hurray.Buffer managed_tensor_from_py_object_no_sync");
    release_handle(&pair[1]);
    return -1;
  }
  *out = t;
  return 0;
}

// Makes a new hurray.Buffer that owns `tensor`. The Buffer object is made
// first, so that every failure leaves the tensor with the caller.
int to_py_object(DLManagedTensorVersioned *tensor, void **out_py_object) {
  ++g_stats.to_py_object;
  if (tensor == nullptr || out_py_object == nullptr) {
    PyErr_SetString(PyExc_ValueError,
                    "hurray.Buffer managed_tensor_to_py_object_no_sync: NULL argument");
    return -1;
  }
  PyObject *b = new_empty_buffer();
  if (b == nullptr) return -1;
  hurray_buffer h;
  if (!import_versioned(tensor, "hurray.Buffer managed_tensor_to_py_object_no_sync", &h)) {
    Py_DECREF(b);  // holds no handle: nothing is released
    return -1;
  }
  buffer_adopt(b, &h);
  *out_py_object = b;
  return 0;
}

// A borrowed view: shape and strides point into the Buffer's handle and stay
// valid while the Buffer is live (until it is released or freed).
int dltensor_from_py_object(void *py_object, DLTensor *out) {
  ++g_stats.dltensor_from_py_object;
  if (py_object == nullptr || out == nullptr) {
    PyErr_SetString(PyExc_ValueError,
                    "hurray.Buffer dltensor_from_py_object_no_sync: NULL argument");
    return -1;
  }
  const hurray_buffer *h = live_handle(static_cast<PyObject *>(py_object));
  if (h == nullptr) return -1;
  if (!order_default_stream(static_cast<PyObject *>(py_object),
                            "hurray.Buffer dltensor_from_py_object_no_sync")) {
    return -1;
  }
  if (h->flags & HURRAY_FLAG_READ_ONLY) {
    // A DLTensor has no flags, like the legacy struct: a read-only Buffer is
    // never handed out as a view the consumer could take for writable.
    PyErr_SetString(PyExc_BufferError,
                    "hurray.Buffer dltensor_from_py_object_no_sync: this Buffer is read-only, "
                    "and a borrowed DLTensor cannot say so; take it with "
                    "managed_tensor_from_py_object_no_sync (which carries READ_ONLY), or hand "
                    "over a writable private copy: hurray.from_dlpack(buf, copy=True)");
    return -1;
  }
  out->data = h->data;
  out->device.device_type = static_cast<DLDeviceType>(h->device.device_type);
  out->device.device_id = h->device.device_id;
  out->ndim = h->ndim;
  out->dtype.code = h->dtype.code;
  out->dtype.bits = h->dtype.bits;
  out->dtype.lanes = h->dtype.lanes;
  out->shape = const_cast<int64_t *>(h->shape);
  out->strides = const_cast<int64_t *>(h->strides);
  out->byte_offset = h->byte_offset;
  return 0;
}

// hurray has no stream of its own: a GPU Buffer's memory is ordered on its
// device's default stream (docs/impl/python.md §4), which DLPack's exchange
// API names NULL (for CUDA the legacy default stream, for ROCm the null
// stream). CPU and every other device type: NULL as well.
int current_work_stream(DLDeviceType, int32_t, void **out_current_stream) {
  ++g_stats.current_work_stream;
  if (out_current_stream == nullptr) {
    PyErr_SetString(PyExc_ValueError, "hurray.Buffer current_work_stream: NULL argument");
    return -1;
  }
  *out_current_stream = nullptr;
  return 0;
}

const char *error_kind(int32_t status) {
  switch (status) {
    case HURRAY_ERR_INVALID_ARGUMENT:
    case HURRAY_ERR_OVERFLOW: return "ValueError";
    case HURRAY_ERR_UNSUPPORTED_VERSION:
    case HURRAY_ERR_UNSUPPORTED_DTYPE:
    case HURRAY_ERR_UNSUPPORTED_DEVICE:
    case HURRAY_ERR_DEVICE: return "BufferError";
    case HURRAY_ERR_OUT_OF_MEMORY: return "MemoryError";
    default: return "RuntimeError";
  }
}

void report(void *error_ctx, void (*set_error)(void *, const char *, const char *),
            int32_t status) {
  char msg[512];
  std::snprintf(msg, sizeof msg, "hurray.Buffer managed_tensor_allocator: %s [%s]",
                hurray_last_error(), hurray_status_name(status));
  set_error(error_ctx, error_kind(status), msg);
}

// New compact row-major memory from hurray_alloc for the prototype's device,
// dtype and shape, exported as an owning tensor. No Python exception is
// set: failures go to SetError, exactly once.
int allocator(DLTensor *prototype, DLManagedTensorVersioned **out, void *error_ctx,
              void (*set_error)(void *error_ctx, const char *kind, const char *message)) {
  ++g_stats.allocator;
  if (set_error == nullptr) return -1;  // nowhere to report; nothing done
  if (prototype == nullptr || out == nullptr) {
    set_error(error_ctx, "ValueError", "hurray.Buffer managed_tensor_allocator: NULL argument");
    return -1;
  }
  const hurray_device device{static_cast<int32_t>(prototype->device.device_type),
                             prototype->device.device_id};
  const hurray_dtype dtype{prototype->dtype.code, prototype->dtype.bits, prototype->dtype.lanes};
  hurray_buffer h;
  int32_t st = hurray_alloc(device, dtype, prototype->ndim, prototype->shape, 0, &h);
  if (st != HURRAY_OK) {
    report(error_ctx, set_error, st);
    return -1;
  }
  DLManagedTensorVersioned *t = nullptr;
  st = hurray_to_dlpack_versioned(&h, &t);
  if (st != HURRAY_OK) {
    report(error_ctx, set_error, st);
    (void)hurray_buffer_release(&h);  // libhurray memory: no Python involved
    return -1;
  }
  *out = t;
  return 0;
}

const DLPackExchangeAPI kBufferApi = {
    {{DLPACK_MAJOR_VERSION, DLPACK_MINOR_VERSION}, nullptr},
    allocator,
    from_py_object,
    to_py_object,
    dltensor_from_py_object,
    current_work_stream,
};

// ---------------------------------------------------------------------------
// Consumer: tables of other types, cached per type
//
// An entry is keyed by the type object's address *and* its tp_version_tag.
// CPython gives a type a fresh, never reused tag whenever the type (or a base)
// is modified (so a later setattr of __dlpack_c_exchange_api__ is seen) and
// a new type never shares a tag with a dead one (so a type that dies, and a
// new type allocated at its address, can never hit a stale entry). No
// reference is held. A type without a valid tag (0) is looked up every time.
// ---------------------------------------------------------------------------
struct CacheEntry {
  PyTypeObject *type;
  unsigned int tag;
  ProducerTable table;  // api nullptr: no usable table
};
constexpr size_t kCacheSize = 16;
CacheEntry g_cache[kCacheSize];

PyObject *g_attr_name;    // "__dlpack_c_exchange_api__"
PyObject *g_dlpack_name;  // "__dlpack__"

size_t cache_slot(PyTypeObject *type) {
  return (reinterpret_cast<uintptr_t>(type) >> 4) % kCacheSize;
}

unsigned int valid_tag(PyTypeObject *type) {
#if PY_VERSION_HEX < 0x030C0000
  if (!PyType_HasFeature(type, Py_TPFLAGS_VALID_VERSION_TAG)) return 0;
#endif
  return type->tp_version_tag;
}

// The attribute, or nullptr (no exception) when missing.
PyObject *lookup_attr(PyTypeObject *type) {
  PyObject *attr = nullptr;
#if PY_VERSION_HEX >= 0x030D0000
  if (PyObject_GetOptionalAttr(reinterpret_cast<PyObject *>(type), g_attr_name, &attr) < 0) {
    return nullptr;
  }
#else
  if (_PyObject_LookupAttr(reinterpret_cast<PyObject *>(type), g_attr_name, &attr) < 0) {
    return nullptr;
  }
#endif
  return attr;
}

const DLPackExchangeAPI *usable_table(PyObject *attr) {
  if (attr == nullptr || !PyCapsule_IsValid(attr, kCapsuleName)) return nullptr;
  auto *api = static_cast<const DLPackExchangeAPI *>(PyCapsule_GetPointer(attr, kCapsuleName));
  if (api == nullptr || api->header.version.major != DLPACK_MAJOR_VERSION ||
      api->managed_tensor_from_py_object_no_sync == nullptr) {
    return nullptr;
  }
  return api;
}

// A class of type's MRO before the one that defines the table attribute
// defines __dlpack__: the table would bypass the subclass's own export.
bool overrides_dlpack(PyTypeObject *type) {
  PyObject *mro = type->tp_mro;
  if (mro == nullptr || !PyTuple_Check(mro)) return false;
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(mro); ++i) {
    PyObject *dict = reinterpret_cast<PyTypeObject *>(PyTuple_GET_ITEM(mro, i))->tp_dict;
    if (dict == nullptr) continue;
    if (PyDict_GetItem(dict, g_attr_name) != nullptr) return false;  // the table's owner
    if (PyDict_GetItem(dict, g_dlpack_name) != nullptr) return true;
  }
  return false;
}

// ---------------------------------------------------------------------------
// torch's table (docs/impl/python.md §7, "torch's table")
//
// torch 2.15's managed_tensor_from_py_object_no_sync exports what its
// Tensor.__dlpack__ refuses: tensors that require grad, conjugate views
// (data of the unconjugated storage) and negative views (data of the
// un-negated storage; torch's __dlpack__ exports those un-negated as well).
// Tensors it cannot export at all (quantised, bits, sparse and other
// layouts, meta) fail with a RuntimeError and C++ frames where __dlpack__
// gives a one-line BufferError. So for a torch type, a failed table call
// and a tensor that requires grad or has the conjugate bit are sent on to
// __dlpack__, which gives torch's own error; a negative view is refused.
// A subclass whose __torch_function__ refuses the flag reads (torch's
// ReadOnlyTensorWrapper) is sent on to __dlpack__ too.
//
// The three are read through torch._C.TensorBase's own descriptors, fetched
// once: the requires_grad getset (a C getter) and the is_conj / is_neg
// method descriptors (METH_NOARGS), called directly, without attribute
// lookups. is_conj is asked only for complex tensors (torch sets the bit on
// nothing else). The references are kept for the process (torch's types
// live as long).
// ---------------------------------------------------------------------------
struct TorchProbe {
  PyTypeObject *base;       // torch._C.TensorBase, or nullptr until found
  PyObject *requires_grad;  // getset descriptor
  PyObject *is_conj;        // method descriptor
  PyObject *is_neg;         // method descriptor
};
TorchProbe g_torch;

bool is_torch_base(PyTypeObject *t) {
  return std::strcmp(t->tp_name, "torch._C.TensorBase") == 0 ||
         std::strcmp(t->tp_name, "torch._C._TensorBase") == 0;
}

// torch's TensorBase in type's MRO, or nullptr.
PyTypeObject *torch_base_of(PyTypeObject *type) {
  PyObject *mro = type->tp_mro;
  if (mro == nullptr || !PyTuple_Check(mro)) return nullptr;
  for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(mro); ++i) {
    auto *t = reinterpret_cast<PyTypeObject *>(PyTuple_GET_ITEM(mro, i));
    if (is_torch_base(t)) return t;
  }
  return nullptr;
}

// Fills g_torch from `base` once. False when a descriptor is missing or of
// another kind (another torch: the table is then not used for its types).
bool torch_probe_ready(PyTypeObject *base) {
  if (g_torch.base == base) return true;
  if (g_torch.base != nullptr || base->tp_dict == nullptr) return false;
  PyObject *rg = PyDict_GetItemString(base->tp_dict, "requires_grad");
  PyObject *conj = PyDict_GetItemString(base->tp_dict, "is_conj");
  PyObject *neg = PyDict_GetItemString(base->tp_dict, "is_neg");
  if (rg == nullptr || conj == nullptr || neg == nullptr ||
      !PyObject_TypeCheck(rg, &PyGetSetDescr_Type) || Py_TYPE(rg)->tp_descr_get == nullptr ||
      !PyObject_TypeCheck(conj, &PyMethodDescr_Type) ||
      !PyObject_TypeCheck(neg, &PyMethodDescr_Type)) {
    return false;
  }
  Py_INCREF(base);
  Py_INCREF(rg);
  Py_INCREF(conj);
  Py_INCREF(neg);
  g_torch = TorchProbe{base, rg, conj, neg};
  return true;
}

// 1 when the flag given by the method descriptor `meth` is set on obj, 0
// when not, -1 with an exception set.
int torch_flag(PyObject *meth, PyObject *obj) {
  PyObject *r = PyObject_Vectorcall(meth, &obj, 1, nullptr);
  if (r == nullptr) return -1;
  const int set = PyObject_IsTrue(r);
  Py_DECREF(r);
  return set;
}

// A failed probe: an Exception other than MemoryError (a subclass whose
// __torch_function__ refuses everything but __dlpack__, as torch's
// ReadOnlyTensorWrapper) is cleared and the tensor asked through __dlpack__
// (0); anything else stays set (-1).
int torch_probe_failed() {
  if (PyErr_ExceptionMatches(PyExc_Exception) && !PyErr_ExceptionMatches(PyExc_MemoryError)) {
    PyErr_Clear();
    return 0;
  }
  return -1;
}

// torch's refusals for obj, whose table export is t: 1 (import it), 0 (ask
// __dlpack__ instead, no exception set), -1 (exception set).
int torch_check(PyObject *obj, const DLManagedTensorVersioned *t) {
  PyObject *rg =
      Py_TYPE(g_torch.requires_grad)
          ->tp_descr_get(g_torch.requires_grad, obj, reinterpret_cast<PyObject *>(Py_TYPE(obj)));
  if (rg == nullptr) return torch_probe_failed();
  int set = PyObject_IsTrue(rg);
  Py_DECREF(rg);
  if (set != 0) return set < 0 ? torch_probe_failed() : 0;
  if (t->dl_tensor.dtype.code == kDLComplex) {
    set = torch_flag(g_torch.is_conj, obj);
    if (set != 0) return set < 0 ? torch_probe_failed() : 0;
  }
  set = torch_flag(g_torch.is_neg, obj);
  if (set < 0) return torch_probe_failed();
  if (set) {
    PyErr_SetString(PyExc_BufferError,
                    "hurray.from_dlpack: Can't import torch tensors with the negative bit set "
                    "(a lazy negation, e.g. the .imag of a conjugate view): DLPack would carry "
                    "the un-negated values; resolve it first with tensor.resolve_neg() (a "
                    "copy), or pass copy=True");
    return -1;
  }
  return 1;
}

// The table entry for `type` (uncached): the usable table, unless a
// subclass overrides __dlpack__ or it is a torch type that cannot be checked.
ProducerTable table_of(PyTypeObject *type, PyObject *attr) {
  ProducerTable r{usable_table(attr), false};
  if (r.api == nullptr) return r;
  if (overrides_dlpack(type)) {
    r.api = nullptr;
    return r;
  }
  if (PyTypeObject *base = torch_base_of(type)) {
    r.torch = true;
    if (!torch_probe_ready(base)) r.api = nullptr;
  }
  return r;
}

bool is_gpu(int32_t device_type) {
  switch (device_type) {
    case HURRAY_DEVICE_CUDA:
    case HURRAY_DEVICE_CUDA_HOST:
    case HURRAY_DEVICE_CUDA_MANAGED:
    case HURRAY_DEVICE_ROCM:
    case HURRAY_DEVICE_ROCM_HOST: return true;
    default: return false;
  }
}

// Sets a BufferError naming the producer's failed table call unless it set
// an exception itself. Always returns false.
bool producer_failed(PyObject *obj, const char *fn) {
  if (!PyErr_Occurred()) {
    PyErr_Format(PyExc_BufferError,
                 "hurray.from_dlpack: %.100s's %s failed without setting an exception",
                 Py_TYPE(obj)->tp_name, fn);
  }
  return false;
}

PyObject *stats(PyObject *, PyObject *) {
  return Py_BuildValue("{sKsKsKsKsKsKsKsK}", "managed_tensor_allocator", g_stats.allocator,
                       "managed_tensor_from_py_object_no_sync", g_stats.from_py_object,
                       "managed_tensor_to_py_object_no_sync", g_stats.to_py_object,
                       "dltensor_from_py_object_no_sync", g_stats.dltensor_from_py_object,
                       "current_work_stream", g_stats.current_work_stream, "consumer_table",
                       g_stats.consumer_table, "consumer_capsule", g_stats.consumer_capsule,
                       "consumer_table_declined", g_stats.consumer_table_declined);
}

PyMethodDef kStatsMethod = {
    "_exchange_api_stats", stats, METH_NOARGS,
    "_exchange_api_stats()\n--\n\n"
    "Testing aid: calls made into hurray.Buffer's DLPack exchange API table, per\n"
    "function, and how often hurray.from_dlpack took a producer's tensor through\n"
    "its table ('consumer_table') or through __dlpack__ ('consumer_capsule'; a torch\n"
    "tensor the table call sent on to __dlpack__ counts in both and in\n"
    "'consumer_table_declined'), since the module was loaded."};

}  // namespace

bool exchange_api_init(PyObject *module) {
  g_attr_name = PyUnicode_InternFromString("__dlpack_c_exchange_api__");
  if (g_attr_name == nullptr) return false;
  g_dlpack_name = PyUnicode_InternFromString("__dlpack__");
  if (g_dlpack_name == nullptr) return false;
  // The table is static and never freed: the capsule needs no destructor.
  PyObject *cap =
      PyCapsule_New(const_cast<DLPackExchangeAPI *>(&kBufferApi), kCapsuleName, nullptr);
  if (cap == nullptr) return false;
  // Before the type is published, its dict may be written directly; then
  // tell CPython's attribute cache (tp_version_tag) about the change.
  PyTypeObject *type = buffer_type();
  int rc = PyDict_SetItem(type->tp_dict, g_attr_name, cap);
  Py_DECREF(cap);
  if (rc < 0) return false;
  PyType_Modified(type);
  PyObject *fn = PyCFunction_New(&kStatsMethod, nullptr);
  if (fn == nullptr) return false;
  rc = PyModule_AddObject(module, "_exchange_api_stats", fn);
  if (rc < 0) Py_DECREF(fn);
  return rc == 0;
}

ProducerTable exchange_api_of(PyTypeObject *type) {
  CacheEntry &e = g_cache[cache_slot(type)];
  unsigned int tag = valid_tag(type);
  if (tag != 0 && e.type == type && e.tag == tag) return e.table;
  PyObject *attr = lookup_attr(type);
  if (attr == nullptr && PyErr_Occurred()) return ProducerTable{nullptr, false};
  const ProducerTable table = table_of(type, attr);
  Py_XDECREF(attr);
  tag = valid_tag(type);  // the lookup may just have assigned one
  if (tag != 0) e = CacheEntry{type, tag, table};
  return table;
}

int take_via_exchange_api(PyObject *obj, const ProducerTable &table, DLManagedTensorVersioned **out,
                          bool *order_known, void **order_stream) {
  const DLPackExchangeAPI *api = table.api;
  DLManagedTensorVersioned *t = nullptr;
  if (api->managed_tensor_from_py_object_no_sync(obj, &t) != 0) {
    // torch's table fails with a RuntimeError (and C++ frames) for tensors
    // its __dlpack__ refuses in one line: take that path for its error. A
    // MemoryError or anything that is no Exception (KeyboardInterrupt) stays.
    if (table.torch && PyErr_ExceptionMatches(PyExc_Exception) &&
        !PyErr_ExceptionMatches(PyExc_MemoryError)) {
      PyErr_Clear();
      ++g_stats.consumer_table_declined;
      return 0;
    }
    producer_failed(obj, "managed_tensor_from_py_object_no_sync");
    return -1;
  }
  if (t == nullptr) {
    PyErr_Format(PyExc_BufferError,
                 "hurray.from_dlpack: %.100s's managed_tensor_from_py_object_no_sync returned "
                 "no tensor",
                 Py_TYPE(obj)->tp_name);
    return -1;
  }
  if (table.torch) {
    const int ok = torch_check(obj, t);
    if (ok != 1) {
      delete_tensor(t);
      if (ok == 0) ++g_stats.consumer_table_declined;
      return ok;
    }
  }
  // NoSync: the producer's pending work on the memory is on its current
  // work stream, where from_dlpack records the Buffer's event (NULL: the
  // default stream, for CUDA the legacy one).
  const int32_t device_type = static_cast<int32_t>(t->dl_tensor.device.device_type);
  *order_known = false;
  if (is_gpu(device_type) && api->current_work_stream != nullptr) {
    void *producer_stream = nullptr;
    if (api->current_work_stream(t->dl_tensor.device.device_type, t->dl_tensor.device.device_id,
                                 &producer_stream) != 0) {
      producer_failed(obj, "current_work_stream");
      delete_tensor(t);
      return -1;
    }
    *order_known = true;
    *order_stream = producer_stream;
  }
  *out = t;
  return 1;
}

void count_consumer_path(bool via_table) {
  if (via_table) {
    ++g_stats.consumer_table;
  } else {
    ++g_stats.consumer_capsule;
  }
}

}  // namespace hurray_py
