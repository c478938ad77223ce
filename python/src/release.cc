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

// The producer's fields, while foreign_deleter stands in for its deleter.
struct ForeignDeleter {
  void *manager_ctx;
  void (*versioned)(DLManagedTensorVersioned *);
  void (*legacy)(DLManagedTensor *);
};

bool interpreter_running() {
  if (!Py_IsInitialized()) return false;
#if PY_VERSION_HEX >= 0x030D0000
  return !Py_IsFinalizing();
#else
  return !_Py_IsFinalizing();
#endif
}

// Runs on any thread, with or without the GIL. The tensor is the producer's
// again before its deleter runs (or is skipped).
template <typename Tensor>
void call_producer(Tensor *t, void (*deleter)(Tensor *)) {
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

void foreign_versioned_deleter(DLManagedTensorVersioned *t) {
  ForeignDeleter d = *static_cast<ForeignDeleter *>(t->manager_ctx);
  std::free(t->manager_ctx);
  t->manager_ctx = d.manager_ctx;
  t->deleter = d.versioned;
  call_producer(t, d.versioned);
}

void foreign_legacy_deleter(DLManagedTensor *t) {
  ForeignDeleter d = *static_cast<ForeignDeleter *>(t->manager_ctx);
  std::free(t->manager_ctx);
  t->manager_ctx = d.manager_ctx;
  t->deleter = d.legacy;
  call_producer(t, d.legacy);
}

}  // namespace

bool wrap_foreign_deleter(void *tensor, bool versioned, const char *what) {
  auto *d = static_cast<ForeignDeleter *>(std::malloc(sizeof(ForeignDeleter)));
  if (d == nullptr) {
    PyErr_Format(PyExc_MemoryError,
                 "%s: out of memory for the %zu-byte GIL-safe deleter of the imported tensor "
                 "(the tensor was left unconsumed)",
                 what, sizeof(ForeignDeleter));
    return false;
  }
  if (versioned) {
    auto *t = static_cast<DLManagedTensorVersioned *>(tensor);
    *d = ForeignDeleter{t->manager_ctx, t->deleter, nullptr};
    t->manager_ctx = d;
    t->deleter = &foreign_versioned_deleter;
  } else {
    auto *t = static_cast<DLManagedTensor *>(tensor);
    *d = ForeignDeleter{t->manager_ctx, nullptr, t->deleter};
    t->manager_ctx = d;
    t->deleter = &foreign_legacy_deleter;
  }
  return true;
}

void unwrap_foreign_deleter(void *tensor, bool versioned) {
  if (versioned) {
    auto *t = static_cast<DLManagedTensorVersioned *>(tensor);
    ForeignDeleter d = *static_cast<ForeignDeleter *>(t->manager_ctx);
    std::free(t->manager_ctx);
    t->manager_ctx = d.manager_ctx;
    t->deleter = d.versioned;
  } else {
    auto *t = static_cast<DLManagedTensor *>(tensor);
    ForeignDeleter d = *static_cast<ForeignDeleter *>(t->manager_ctx);
    std::free(t->manager_ctx);
    t->manager_ctx = d.manager_ctx;
    t->deleter = d.legacy;
  }
}

void release_handle(hurray_buffer *h) {
  if (h->release_fn == nullptr) return;
  SavedError saved;
  (void)hurray_buffer_release(h);
}

}  // namespace hurray_py
