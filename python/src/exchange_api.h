// The DLPack C exchange API of hurray._native, both sides
// (docs/impl/python.md, "The DLPack C exchange API").
//
// exchange_api.cc publishes hurray.Buffer's table (producer) and looks up
// and uses other types' tables in hurray.from_dlpack (consumer). It reaches
// the Buffer object only through the few hooks below, which the other
// files of the extension implement (binding.h lists them). Everything here is called with the GIL held.
#ifndef HURRAY_PYTHON_EXCHANGE_API_H_
#define HURRAY_PYTHON_EXCHANGE_API_H_

#ifndef PY_SSIZE_T_CLEAN
#define PY_SSIZE_T_CLEAN
#endif
#include <Python.h>

#include "hurray/hurray.h"

namespace hurray_py {

// ---- implemented in buffer.cc, import.cc, errors.cc, release.cc, args.cc --

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

// Imports a DLManagedTensorVersioned as a live handle, wrapping a foreign
// deleter GIL-safely (docs/impl/python.md §3). `what` prefixes messages.
// On success the handle owns the tensor. On failure returns false with a
// Python exception set, and the caller still owns the tensor.
bool import_versioned(DLManagedTensorVersioned *t, const char *what, hurray_buffer *out);

// Calls t->deleter(t) (if any), keeping the pending Python exception.
void delete_tensor(DLManagedTensorVersioned *t);

// Raises the exception for a failed libhurray call (right after it) with
// libhurray's message prefixed by `what`. Always returns nullptr.
PyObject *raise_status(int32_t status, const char *what);

// Releases a live handle, keeping the pending Python exception.
void release_handle(hurray_buffer *h);

// The stream a GPU Buffer's memory is ordered on: CU_STREAM_LEGACY (1) for
// the CUDA device types, NULL (the default stream) otherwise.
void *buffer_stream(int32_t device_type);

// ---- implemented in exchange_api.cc ----------------------------------------

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
  // import_via_exchange_api applies torch's __dlpack__ refusals.
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
// the producer's current_work_stream, and hurray_stream_wait so that the
// Buffer's stream (buffer_stream) is ordered after the producer's work; then
// import_versioned. Returns 1 when *out is a live handle that owns the
// tensor; 0, no exception set and nothing held, when a torch tensor must be
// asked through its __dlpack__ instead (torch's table failed, or the tensor
// requires grad or has the conjugate bit: __dlpack__ gives torch's own
// error; or reading those flags raised an Exception other than MemoryError,
// as a subclass's __torch_function__ may); -1 with an exception set on
// failure (a negative-bit torch view: BufferError). Nothing is leaked
// either way.
int import_via_exchange_api(PyObject *obj, const ProducerTable &table, hurray_buffer *out);

// Counts which path hurray.from_dlpack took for a producer object (shown by
// _exchange_api_stats() as "consumer_table" / "consumer_capsule"; a table
// call that sent a torch tensor on to __dlpack__ counts both, and also
// "consumer_table_declined").
void count_consumer_path(bool via_table);

}  // namespace hurray_py

#endif  // HURRAY_PYTHON_EXCHANGE_API_H_
