// The DLPack C exchange API (DLPack 1.3) of hurray._native: hurray.Buffer's
// table (producer side) and hurray.from_dlpack's use of other types' tables
// (consumer side). The rules are in docs/impl/python.md, "The DLPack C
// exchange API"; include/hurray/dlpack.h declares the table.
//
// Every function of the table is called with the GIL held (DLPack's rule),
// returns 0 or -1, never throws, and on failure leaves a Python exception set
// (the allocator instead reports through its SetError callback) and owns or
// frees nothing it did not own before.
#include "exchange_api.h"

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
};
Stats g_stats;

// ---------------------------------------------------------------------------
// Producer: hurray.Buffer's table
// ---------------------------------------------------------------------------

// Exports a Buffer like __dlpack__(max_version=(1, 3)) without a copy: the
// handle is shared once more, the Buffer keeps one reference and stays
// usable, the tensor owns the other (its deleter drops it, on any thread,
// without the GIL). Flags (READ_ONLY) are carried in the versioned struct.
int from_py_object(void *py_object, DLManagedTensorVersioned **out) {
  ++g_stats.from_py_object;
  if (py_object == nullptr || out == nullptr) {
    PyErr_SetString(PyExc_ValueError,
                    "hurray.Buffer managed_tensor_from_py_object_no_sync: NULL argument");
    return -1;
  }
  hurray_buffer *h = live_handle(static_cast<PyObject *>(py_object));
  if (h == nullptr) return -1;
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
    case HURRAY_ERR_OVERFLOW:
      return "ValueError";
    case HURRAY_ERR_UNSUPPORTED_VERSION:
    case HURRAY_ERR_UNSUPPORTED_DTYPE:
    case HURRAY_ERR_UNSUPPORTED_DEVICE:
    case HURRAY_ERR_DEVICE:
      return "BufferError";
    case HURRAY_ERR_OUT_OF_MEMORY:
      return "MemoryError";
    default:
      return "RuntimeError";
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
  const DLPackExchangeAPI *api;  // nullptr: no usable table
};
constexpr size_t kCacheSize = 16;
CacheEntry g_cache[kCacheSize];

PyObject *g_attr_name;  // "__dlpack_c_exchange_api__"

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

bool is_gpu(int32_t device_type) {
  switch (device_type) {
    case HURRAY_DEVICE_CUDA:
    case HURRAY_DEVICE_CUDA_HOST:
    case HURRAY_DEVICE_CUDA_MANAGED:
    case HURRAY_DEVICE_ROCM:
    case HURRAY_DEVICE_ROCM_HOST:
      return true;
    default:
      return false;
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
  return Py_BuildValue(
      "{sKsKsKsKsKsKsK}", "managed_tensor_allocator", g_stats.allocator,
      "managed_tensor_from_py_object_no_sync", g_stats.from_py_object,
      "managed_tensor_to_py_object_no_sync", g_stats.to_py_object,
      "dltensor_from_py_object_no_sync", g_stats.dltensor_from_py_object,
      "current_work_stream", g_stats.current_work_stream, "consumer_table",
      g_stats.consumer_table, "consumer_capsule", g_stats.consumer_capsule);
}

PyMethodDef kStatsMethod = {
    "_exchange_api_stats", stats, METH_NOARGS,
    "_exchange_api_stats()\n--\n\n"
    "Testing aid: calls made into hurray.Buffer's DLPack exchange API table, per\n"
    "function, and how often hurray.from_dlpack took a producer's tensor through\n"
    "its table ('consumer_table') or through __dlpack__ ('consumer_capsule'),\n"
    "since the module was loaded."};

}  // namespace

bool exchange_api_init(PyObject *module) {
  g_attr_name = PyUnicode_InternFromString("__dlpack_c_exchange_api__");
  if (g_attr_name == nullptr) return false;
  // The table is static and never freed: the capsule needs no destructor.
  PyObject *cap = PyCapsule_New(const_cast<DLPackExchangeAPI *>(&kBufferApi), kCapsuleName,
                                nullptr);
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

const DLPackExchangeAPI *exchange_api_of(PyTypeObject *type) {
  CacheEntry &e = g_cache[cache_slot(type)];
  unsigned int tag = valid_tag(type);
  if (tag != 0 && e.type == type && e.tag == tag) return e.api;
  PyObject *attr = lookup_attr(type);
  if (attr == nullptr && PyErr_Occurred()) return nullptr;
  const DLPackExchangeAPI *api = usable_table(attr);
  Py_XDECREF(attr);
  tag = valid_tag(type);  // the lookup may just have assigned one
  if (tag != 0) e = CacheEntry{type, tag, api};
  return api;
}

bool import_via_exchange_api(PyObject *obj, const DLPackExchangeAPI *api, hurray_buffer *out) {
  DLManagedTensorVersioned *t = nullptr;
  if (api->managed_tensor_from_py_object_no_sync(obj, &t) != 0) {
    return producer_failed(obj, "managed_tensor_from_py_object_no_sync");
  }
  if (t == nullptr) {
    PyErr_Format(PyExc_BufferError,
                 "hurray.from_dlpack: %.100s's managed_tensor_from_py_object_no_sync returned "
                 "no tensor",
                 Py_TYPE(obj)->tp_name);
    return false;
  }
  // NoSync: the producer's pending work on the memory is on its current
  // work stream. The new Buffer is ordered on the device's default stream
  // (buffer_stream), so that stream waits for the producer's (an event, no
  // host blocking): what __dlpack__(stream=None) asks of a producer.
  const int32_t device_type = static_cast<int32_t>(t->dl_tensor.device.device_type);
  if (is_gpu(device_type) && api->current_work_stream != nullptr) {
    void *producer_stream = nullptr;
    if (api->current_work_stream(t->dl_tensor.device.device_type, t->dl_tensor.device.device_id,
                                 &producer_stream) != 0) {
      producer_failed(obj, "current_work_stream");
      delete_tensor(t);
      return false;
    }
    void *own_stream = buffer_stream(device_type);
    // NULL is the default stream: for CUDA the legacy one, i.e. own_stream.
    if (producer_stream != nullptr && producer_stream != own_stream) {
      const hurray_device device{device_type, t->dl_tensor.device.device_id};
      int32_t st = hurray_stream_wait(device, producer_stream, own_stream);
      if (st != HURRAY_OK) {
        raise_status(st, "hurray.from_dlpack (stream wait)");
        delete_tensor(t);
        return false;
      }
    }
  }
  if (!import_versioned(t, "hurray.from_dlpack", out)) {
    delete_tensor(t);
    return false;
  }
  return true;
}

void count_consumer_path(bool via_table) {
  if (via_table) {
    ++g_stats.consumer_table;
  } else {
    ++g_stats.consumer_capsule;
  }
}

}  // namespace hurray_py
