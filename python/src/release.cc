// SPDX-License-Identifier: Apache-2.0
// Foreign releases: the one callback of this module that touches Python.
//
// A DLPack tensor imported from a Python producer (NumPy, JAX, TVM FFI, any
// raw capsule) has a deleter that may decref Python objects. libhurray may
// call it from any thread (the last consumer decides), so hurray.from_dlpack
// puts a GIL-safe deleter on the tensor itself before handing it to
// libhurray (the tensor is the consumer's from then on): the tensor's
// manager_ctx is replaced by a small block holding the producer's
// manager_ctx and deleter, and its deleter by foreign_deleter, which puts
// both back and then
//   - skips the producer's deleter (leaks) once the interpreter is
//     finalizing or gone,
//   - calls it directly when this thread already holds the GIL,
//   - otherwise takes the GIL with PyGILState_Ensure around it.
// The handle libhurray makes is then an ordinary import: sharing it needs
// no second validation, and the checking mode tracks it.
// See docs/impl/python.md, "Threads and shutdown".
#include <cstdlib>
#include <cstring>

#include "binding.h"

namespace hurray_py {
namespace {

// The producer's fields, while foreign_deleter<Tensor> stands in for its
// deleter.
template <typename Tensor>
struct ForeignDeleter {
  void *manager_ctx;
  void (*deleter)(Tensor *);
};

bool interpreter_running() {
  if (!Py_IsInitialized()) return false;
#if PY_VERSION_HEX >= 0x030D0000
  return !Py_IsFinalizing();
#else
  return !_Py_IsFinalizing();
#endif
}

// Gives the tensor its producer's manager_ctx and deleter back and frees
// the block; returns the producer's deleter.
template <typename Tensor>
void (*restore(Tensor *t))(Tensor *) {
  ForeignDeleter<Tensor> d = *static_cast<ForeignDeleter<Tensor> *>(t->manager_ctx);
  std::free(t->manager_ctx);
  t->manager_ctx = d.manager_ctx;
  t->deleter = d.deleter;
  return d.deleter;
}

// Runs on any thread, with or without the GIL. The tensor is the producer's
// again before its deleter runs (or is skipped).
template <typename Tensor>
void foreign_deleter(Tensor *t) {
  void (*deleter)(Tensor *) = restore(t);
  if (!interpreter_running()) return;  // deliberate leak: see docs/impl/python.md
  if (PyGILState_Check()) {
    SavedError saved;
    deleter(t);
    return;
  }
  PyGILState_STATE gil = PyGILState_Ensure();
  {
    SavedError saved;
    deleter(t);
  }
  PyGILState_Release(gil);
}

template <typename Tensor>
bool wrap(Tensor *t, const char *what) {
  auto *d = static_cast<ForeignDeleter<Tensor> *>(std::malloc(sizeof(ForeignDeleter<Tensor>)));
  if (d == nullptr) {
    PyErr_Format(PyExc_MemoryError,
                 "%s: out of memory for the %zu-byte GIL-safe deleter of the imported tensor "
                 "(the tensor was left unconsumed)",
                 what, sizeof *d);
    return false;
  }
  *d = ForeignDeleter<Tensor>{t->manager_ctx, t->deleter};
  t->manager_ctx = d;
  t->deleter = &foreign_deleter<Tensor>;
  return true;
}

}  // namespace

template <typename Tensor>
bool wrap_foreign_deleter(Tensor *t, const char *what) {
  return wrap(t, what);
}

template <typename Tensor>
void unwrap_foreign_deleter(Tensor *t) {
  (void)restore(t);
}

template bool wrap_foreign_deleter(DLManagedTensorVersioned *, const char *);
template bool wrap_foreign_deleter(DLManagedTensor *, const char *);
template void unwrap_foreign_deleter(DLManagedTensorVersioned *);
template void unwrap_foreign_deleter(DLManagedTensor *);

void release_handle(hurray_buffer *h) {
  if (h->release_fn == nullptr) return;
  SavedError saved;
  (void)hurray_buffer_release(h);
}

}  // namespace hurray_py
