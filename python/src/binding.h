// SPDX-License-Identifier: Apache-2.0
// Shared declarations of hurray._native's translation units.
//
// The extension is split by concept (docs/impl/python.md, "Source layout"):
//   errors.cc       libhurray status -> Python exception, SavedError
//   release.cc      the GIL/shutdown rules of foreign releases
//   dtype.cc        dtype names, NumPy dtype objects, buffer-protocol formats
//   args.cc         devices, copy=, integers (__index__), streams
//   buffer.cc       the hurray.Buffer type, its getters, share, release
//   buffer_protocol.cc  the Python buffer protocol of CPU Buffers
//   export.cc       capsules and Buffer.__dlpack__
//   import.cc       capsules, producers and hurray.from_dlpack
//   module.cc       hurray.empty, module init
//   exchange_api.cc the DLPack C exchange API (both sides)
//   check.cc        the checking mode (_check_*), Buffers' creation sites
//   pickle.cc       Buffer.__reduce_ex__ and _rebuild (pickle, protocol 5)
//   ipc.cc          _ipc_export / _ipc_import (multiprocessing's reducer)
//   pack.cc         _pack: hurray.pack's group and its one copy
// Every function here is called with the GIL held unless it says otherwise.
#ifndef HURRAY_PYTHON_BINDING_H_
#define HURRAY_PYTHON_BINDING_H_

#ifndef PY_SSIZE_T_CLEAN
#define PY_SSIZE_T_CLEAN
#endif
#include <Python.h>

#include <cstdint>

#include "hurray/hurray.h"

namespace hurray_py {

// ---- capsule names (DLPack Python specification) ---------------------------
constexpr const char kCapsuleVersioned[] = "dltensor_versioned";
constexpr const char kCapsuleLegacy[] = "dltensor";
constexpr const char kCapsuleVersionedUsed[] = "used_dltensor_versioned";
constexpr const char kCapsuleLegacyUsed[] = "used_dltensor";

// ---- errors.cc -------------------------------------------------------------

// The Python exception type for a libhurray status (docs/impl/python.md §5).
PyObject *exception_for(int32_t status);

// Raises the exception for a failed libhurray call, with libhurray's own
// message prefixed by `what`. Call right after the failing call (the message
// is per thread). Always returns nullptr.
PyObject *raise_status(int32_t status, const char *what);

// Saves the current exception and restores it at scope exit, around code
// that may run Python (a release can drop the last reference of an object
// with finalizers).
struct SavedError {
#if PY_VERSION_HEX >= 0x030C0000
  PyObject *exc;
  SavedError() : exc(PyErr_GetRaisedException()) {}
  ~SavedError() { PyErr_SetRaisedException(exc); }
#else
  PyObject *type, *value, *tb;
  SavedError() { PyErr_Fetch(&type, &value, &tb); }
  ~SavedError() { PyErr_Restore(type, value, tb); }
#endif
  SavedError(const SavedError &) = delete;
  SavedError &operator=(const SavedError &) = delete;
};

// ---- release.cc ------------------------------------------------------------

// The deleter of a tensor imported from a Python producer is made GIL-safe
// on any thread and skipped once the interpreter is finalizing
// (docs/impl/python.md §3), on the tensor itself, before libhurray imports
// it: its manager_ctx and deleter move into a small block and come back
// before the producer's deleter runs. Returns false with MemoryError set
// (naming `what`), the tensor unchanged. Tensor: DLManagedTensorVersioned
// or DLManagedTensor (instantiated in release.cc).
template <typename Tensor>
bool wrap_foreign_deleter(Tensor *t, const char *what);

// Undoes wrap_foreign_deleter on a tensor libhurray refused (it is the
// caller's again, as it was). Cannot fail.
template <typename Tensor>
void unwrap_foreign_deleter(Tensor *t);

// Releases a live handle (no-op on an empty one), keeping the pending
// exception.
void release_handle(hurray_buffer *h);

// ---- dtype.cc ----------------------------------------------------------------

// "float32", "bfloat16", "float8_e4m3fn", "float32x4", ... (new reference).
PyObject *dtype_name(hurray_dtype d);

// A dtype from what NumPy accepts for one (a NumPy dtype, a scalar type such
// as numpy.float32, a type string such as 'f4' or '<f4') or one of hurray's
// names ('bfloat16', 'float8_e4m3fn', 'float32x4'). Returns false with
// TypeError/ValueError set.
bool parse_dtype(PyObject *obj, hurray_dtype *out);

// The same, and the layout flag the dtype implies: HURRAY_FLAG_SUBBYTE_PADDED
// in *flags for a NumPy dtype that keeps a sub-byte element in a byte of its
// own (ml_dtypes' int4, uint2, float4_e2m1fn, ...; hurray's names such as
// 'int4' mean DLPack's packed layout), else 0.
bool parse_dtype(PyObject *obj, hurray_dtype *out, uint64_t *flags);

// The NumPy dtype of a dtype NumPy's DLPack import does not know (bfloat16,
// float8/6/4, sub-byte integers, complex32): ml_dtypes' type of that name,
// importing ml_dtypes (new reference). nullptr with ImportError or TypeError
// set when ml_dtypes is missing or has no such type, and nullptr without an
// exception for a dtype NumPy's DLPack import knows (or a vector dtype).
PyObject *ml_dtypes_numpy_dtype(hurray_dtype d);

// The struct-module format character(s) of a dtype for the buffer protocol
// ("f", "q", "?", "Zd", ...), or nullptr when the buffer protocol cannot
// describe it (bfloat16, float8, vectors, sub-byte types, handles).
const char *buffer_format(hurray_dtype d);

// "cpu", "cuda", ... for messages.
const char *device_name(int32_t device_type);

// ---- args.cc -----------------------------------------------------------------

bool same_device(hurray_device a, hurray_device b);

// (device_type, device_id) from a 2-sequence of integers (anything with
// __index__), or the string "cpu". `what` prefixes messages.
bool parse_device(PyObject *obj, const char *what, hurray_device *out);

// copy= as NumPy reads it: None -> -1, true -> 1, false -> 0, and -2 with an
// exception set. A str raises ValueError; numpy._CopyMode means its value
// (ALWAYS 1, NEVER 0, IF_NEEDED -1); anything else its truth value.
int parse_copy(PyObject *obj, const char *what);

// An integer from an int or any object with __index__ (numpy.int64, ...).
// Returns false with TypeError (naming `what`) or the __index__ error set;
// *overflow is -1/+1 (and *out unspecified) when it does not fit in long long.
bool parse_index(PyObject *obj, const char *what, long long *out, int *overflow);

// True when `key` is the interned keyword `name`.
bool kw_is(PyObject *key, PyObject *name);

// Which of names[0..n) the keyword `key` is: its index, or -1 when none (no
// exception set; keywords are always str). Callers pass the module's
// interned names and CPython passes interned keyword strings, so the first
// pass compares by identity only; the equality pass (kw_is) runs only for a
// key that is none of the names by identity (a non-interned str).
inline int kw_index(PyObject *key, PyObject *const *names, int n) {
  for (int i = 0; i < n; ++i) {
    if (key == names[i]) return i;
  }
  for (int i = 0; i < n; ++i) {
    if (kw_is(key, names[i])) return i;
  }
  return -1;
}

// Checks __dlpack__'s `stream` for a consumer on `device_type` and gives the
// handle to wait on: *sync false for -1 and devices without a known stream
// convention (docs/impl/python.md §4).
bool parse_stream(int32_t device_type, PyObject *stream, bool *sync, void **handle);

// The default stream of a device type's family, where a GPU Buffer without
// an event is ordered: CU_STREAM_LEGACY (1) for the CUDA device types, NULL
// (the default stream) otherwise.
void *buffer_stream(int32_t device_type);

// True for the CUDA and ROCm device types (those with DLPack streams).
bool has_streams(int32_t device_type);

// ---- buffer.cc -----------------------------------------------------------------

// The event a GPU Buffer made by hurray.from_dlpack carries
// (docs/impl/python.md §4): recorded on the stream the producer ordered its
// pending work on, at the import. Shared by the Buffers made from that one
// without a copy (share, from_dlpack of a Buffer), released with the last
// of them (hurray_event_release). Used with the GIL held only.
struct BufferEvent {
  hurray_event *event;
  void *stream;  // the stream it was recorded on
  Py_ssize_t refs;
};

struct BufferObject {
  PyObject_HEAD hurray_buffer h;  // release_fn == NULL once released
  // The producer's pending work at the import, or nullptr: the memory is
  // ordered on its device's default stream (buffer_stream), as for
  // hurray.empty, copies, and imports that named no stream or asked for
  // none (-1).
  BufferEvent *event;
  PyObject *weakreflist;
  // True when h's READ_ONLY says only "nothing was said": the memory came
  // as a legacy (unversioned) DLPack tensor, which cannot tell whether it
  // may be written (docs/impl/python.md §2, "Read-only memory"). Such a
  // Buffer stays read-only for every consumer that can be told so, but may
  // be handed on as a legacy capsule again: that says no more than its
  // source did. False for memory known to be read-only (a versioned
  // tensor's flag, a read-only Buffer's copy-free shares of it) and for
  // writable memory. Carried to shares.
  bool legacy_unsaid;
};

extern PyTypeObject BufferType;

// Readies BufferType (slots, methods, buffer protocol). False with an
// exception set on failure.
bool buffer_type_ready();

// A new tuple of the n int64 values at v (shape or strides); NULL with the
// Python error set when it cannot be made (buffer.cc).
PyObject *int64_tuple(const int64_t *v, int32_t n);

// Wraps a live handle in a new Buffer. Consumes *h in every case: on
// failure the handle is released and nullptr returned. `legacy_unsaid` is
// the new Buffer's BufferObject::legacy_unsaid (only meaningful with
// READ_ONLY in h->flags; ignored without it).
PyObject *new_buffer(hurray_buffer *h, bool legacy_unsaid = false);

bool is_live(const BufferObject *b);

// ValueError("operation on a released hurray.Buffer") unless live.
bool check_live(const BufferObject *b);

inline BufferObject *as_buffer(PyObject *o) { return reinterpret_cast<BufferObject *>(o); }

// The hurray.Buffer type (ready once module init has run).
PyTypeObject *buffer_type();

// The handle of a live Buffer, which stays owned by the Buffer; nullptr with
// TypeError set when obj is not a hurray.Buffer, ValueError when released.
hurray_buffer *live_handle(PyObject *obj);

// A new Buffer object holding no handle yet (it reads as released), or
// nullptr with MemoryError set. Give it a handle with buffer_adopt, or drop it.
PyObject *new_empty_buffer();

// Moves the live handle *h into `buffer` (made by new_empty_buffer and not
// yet given one) and zeroes *h. Cannot fail.
void buffer_adopt(PyObject *buffer, hurray_buffer *h);

// Events of GPU Buffers (buffer.cc). Records an event on `stream` of
// `device` for a Buffer (refs 1): true with *out set, or with *out nullptr
// when the stream is being captured into a graph (no event can stand for
// its work then: the Buffer keeps the default-stream rule); false with an
// exception set (`what` names the caller) on any other failure.
bool buffer_event_record(hurray_device device, void *stream, const char *what, BufferEvent **out);
// Gives `to` (which has none) a reference to `from`'s event, if any.
void buffer_event_share(const BufferObject *from, BufferObject *to);
// Drops b's reference to its event (releasing it with the last one).
void buffer_event_drop(BufferObject *b);
// Orders `consumer` (a stream of b's device) after b's pending work without
// blocking the host: with an event, a wait on it (none when `consumer` is
// the stream it was recorded on); without one, after the device's default
// stream (hurray_stream_wait; none when `consumer` is that stream). False
// with an exception set on failure.
bool order_after_buffer(BufferObject *b, void *consumer, const char *what);

// ---- buffer_protocol.cc ----------------------------------------------------------

extern PyBufferProcs kBufferProcs;

// Buffer.__array__(dtype=None, copy=None) (METH_VARARGS | METH_KEYWORDS).
PyObject *buffer_array(PyObject *self, PyObject *args, PyObject *kwargs);

// ---- export.cc -----------------------------------------------------------------

// Buffer.__dlpack__ (METH_FASTCALL | METH_KEYWORDS).
PyObject *buffer_dlpack(PyObject *self, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames);

// The DLPack minor version (major 1) that a versioned export of `h` answers
// to a consumer that asked for max_version (1, asked_minor): the highest
// minor <= asked_minor (and <= HURRAY_DLPACK_MINOR) that can describe the
// tensor, or the lowest that can when asked_minor is too low for it.
uint32_t answer_minor(const hurray_buffer &h, long long asked_minor);

// ---- import.cc -----------------------------------------------------------------

// hurray.from_dlpack and hurray.from_dlpack_many (METH_FASTCALL | METH_KEYWORDS).
PyObject *mod_from_dlpack(PyObject *, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames);
PyObject *mod_from_dlpack_many(PyObject *, PyObject *const *args, Py_ssize_t nargs,
                               PyObject *kwnames);

// Imports one DLPack tensor (Tensor: DLManagedTensorVersioned or
// DLManagedTensor, instantiated in import.cc) as a live handle, wrapping a
// foreign deleter GIL-safely. A legacy tensor from any producer but
// libhurray itself comes out READ_ONLY: the legacy struct cannot say whether
// the memory may be written, and NumPy assumes it may not (docs/impl/python.md §2).
// Returns HURRAY_OK, or a failure status with an exception set, except
// HURRAY_ERR_UNSUPPORTED_VERSION of a versioned tensor, which sets none (the
// caller words it). On failure the caller still owns the tensor.
template <typename Tensor>
int32_t import_tensor(Tensor *t, const char *what, hurray_buffer *out);

// import_tensor of a versioned tensor, wording HURRAY_ERR_UNSUPPORTED_VERSION
// as a BufferError too (for exchange_api.cc). On success the handle owns the
// tensor. On failure returns false with a Python exception set, and the
// caller still owns the tensor.
bool import_versioned(DLManagedTensorVersioned *t, const char *what, hurray_buffer *out);

// Calls t->deleter(t) (if any), keeping the pending Python exception.
void delete_tensor(DLManagedTensorVersioned *t);

// ---- module.cc -----------------------------------------------------------------

// Interned keyword names and constants, set once in module init.
struct Names {
  PyObject *dlpack;         // "__dlpack__"
  PyObject *dlpack_device;  // "__dlpack_device__"
  PyObject *stream, *max_version, *dl_device, *copy, *device;
  PyObject *max_version_value;  // (1, 3): what from_dlpack asks for
  PyObject *kw_max_version;     // ("max_version",)
};
extern Names g_names;

// The deleters libhurray puts on the tensors it exports (learned at init):
// a tensor carrying one needs no second GIL-safe wrapper on import.
extern void (*g_hurray_versioned_deleter)(DLManagedTensorVersioned *);
extern void (*g_hurray_legacy_deleter)(DLManagedTensor *);

// ---- exchange_api.cc: the DLPack C exchange API, both sides ------------------
// (docs/impl/python.md, "The DLPack C exchange API"): publishes hurray.Buffer's
// table (producer) and looks up and uses other types' tables in
// hurray.from_dlpack (consumer).

// Sets hurray.Buffer.__dlpack_c_exchange_api__ (a capsule named
// "dlpack_exchange_api" holding the static table) and adds the private
// _exchange_api_stats() to `module`. Call after PyType_Ready(buffer type).
// Returns false with an exception set on failure.
bool exchange_api_init(PyObject *module);

// What hurray.from_dlpack knows of a producer type's table.
struct ProducerTable {
  // The usable table, or nullptr: take the capsule path.
  const DLPackExchangeAPI *api;
  // The type is a torch tensor type (its MRO holds torch._C.TensorBase):
  // take_via_exchange_api applies torch's __dlpack__ refusals.
  bool torch;
};

// The exchange API table published by `type` (looked up on the type, as
// type(x).__dlpack_c_exchange_api__), when it is a capsule named
// "dlpack_exchange_api" whose table has header.version.major == 1 and a
// managed_tensor_from_py_object_no_sync, and no class of the MRO before the
// one that defines the attribute defines __dlpack__ (a subclass that
// overrides __dlpack__ is asked through it); else api is nullptr. A torch
// type whose TensorBase lacks requires_grad/is_conj/is_neg also gets
// nullptr. Cached per type object (see exchange_api.cc). Returns api nullptr
// with an exception set only when the attribute lookup itself raised
// something other than AttributeError.
ProducerTable exchange_api_of(PyTypeObject *type);

// Takes obj's tensor through its type's table (from exchange_api_of):
// managed_tensor_from_py_object_no_sync, then, for a torch type, torch's
// checks (docs/impl/python.md §7, "torch's table"), then, for a GPU tensor,
// the producer's current_work_stream (where its pending work is). Returns 1
// when *out is the producer's tensor, now the caller's (not imported: the
// caller imports it, or deletes it with delete_tensor); 0, no exception set
// and nothing held, when a torch tensor must be asked through its
// __dlpack__ instead (torch's table failed, or the tensor requires grad or
// has the conjugate bit: __dlpack__ gives torch's own error; or reading
// those flags raised an Exception other than MemoryError, as a subclass's
// __torch_function__ may); -1 with an exception set on failure (a
// negative-bit torch view: BufferError). Nothing is leaked either way.
// *order_known is set when the producer's table has current_work_stream, and
// *order_stream to the stream it answered (NULL: the default stream) for a
// GPU tensor: where its pending work is ordered (the caller records the
// Buffer's event there).
int take_via_exchange_api(PyObject *obj, const ProducerTable &table, DLManagedTensorVersioned **out,
                          bool *order_known, void **order_stream);

// Counts which path hurray.from_dlpack took for a producer object (shown by
// _exchange_api_stats() as "consumer_table" / "consumer_capsule"; a table
// call that sent a torch tensor on to __dlpack__ counts both, and also
// "consumer_table_declined").
void count_consumer_path(bool via_table);

// ---- check.cc ----------------------------------------------------------------

// True while libhurray's checking mode is on (read at init and after
// _check_enable): new Buffers' handles are then labelled with the Python
// line that made them.
extern bool g_check_labels;
// Labels a tracked handle with the innermost Python frame ("file:line in
// function"); does nothing for an untracked one. Never raises.
void label_python_site(const hurray_buffer *h);
// Adds _check_enable, _check_state, _check_live, CHECK_TRACK, CHECK_STDERR
// to the module.
bool check_init(PyObject *m);

// ---- pickle.cc ---------------------------------------------------------------

// Buffer.__reduce_ex__(protocol) (METH_O).
PyObject *buffer_reduce_ex(PyObject *self, PyObject *protocol);
// hurray._native._rebuild(obj, (code, bits, lanes), shape, strides, offset,
// flags, legacy_unsaid) (METH_VARARGS): the unpickled Buffer, zero-copy over
// obj's buffer view.
PyObject *mod_rebuild(PyObject *, PyObject *args);
// hurray._native._pickle_stats() (METH_NOARGS).
PyObject *mod_pickle_stats(PyObject *, PyObject *);

// ---- ipc.cc ------------------------------------------------------------------

// hurray._native._ipc_export(buf) (METH_O) and _ipc_import(descriptor, fds,
// legacy_unsaid) (METH_VARARGS): multiprocessing's reducer (hurray/_mp.py).
PyObject *mod_ipc_export(PyObject *, PyObject *args);
PyObject *mod_close_fds(PyObject *, PyObject *fds);
PyObject *mod_dup_fds(PyObject *, PyObject *args);
PyObject *mod_move_fds(PyObject *, PyObject *args);
PyObject *mod_ipc_import(PyObject *, PyObject *args);
// _ipc_export_set(bufs) (METH_O) and _ipc_import_set(descriptor, fds, n)
// (METH_VARARGS): one message for a set of Buffers (hurray/_mp.py).
PyObject *mod_ipc_export_set(PyObject *, PyObject *args);
PyObject *mod_ipc_import_set(PyObject *, PyObject *args);

// ---- pack.cc -----------------------------------------------------------------

// hurray._native._pack(srcs: list[Buffer], shared: bool) (METH_VARARGS): a
// list of Buffers of one tensor group, each a compact row-major copy of the
// source at the same index (hurray.pack, hurray/_pack.py). The sources must
// be Buffers no other thread can release while the copy runs (it runs
// without the GIL): hurray.pack's own.
PyObject *mod_pack(PyObject *, PyObject *args);

}  // namespace hurray_py

#endif  // HURRAY_PYTHON_BINDING_H_
