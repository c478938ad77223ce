// Foreign releases: the one callback of this module that touches Python.
//
// A DLPack tensor imported from a Python producer (NumPy, JAX, TVM FFI, any
// raw capsule) has a deleter that may decref Python objects. libhurray may
// call it from any thread (the last consumer decides), so hurray.from_dlpack
// wraps the imported handle's release in foreign_release, which
//   - skips the deleter (leaks) once the interpreter is finalizing or gone,
//   - calls it directly when this thread already holds the GIL,
//   - otherwise takes the GIL with PyGILState_Ensure around it.
// See docs/impl/python.md, "Threads and shutdown".
#include <cstdlib>
#include <cstring>

#include "binding.h"

namespace hurray_py {
namespace {

struct ForeignRelease {
  hurray_release_fn fn;
  void *user_data;
};

bool interpreter_running() {
  if (!Py_IsInitialized()) return false;
#if PY_VERSION_HEX >= 0x030D0000
  return !Py_IsFinalizing();
#else
  return !_Py_IsFinalizing();
#endif
}

// Runs on any thread, with or without the GIL.
void foreign_release(void *block) {
  ForeignRelease r = *static_cast<ForeignRelease *>(block);
  std::free(block);
  if (!interpreter_running()) return;  // deliberate leak: see docs/impl/python.md
  if (PyGILState_Check()) {
    SavedError saved;
    r.fn(r.user_data);
    return;
  }
  PyGILState_STATE gil = PyGILState_Ensure();
  {
    SavedError saved;
    r.fn(r.user_data);
  }
  PyGILState_Release(gil);
}

}  // namespace

void *alloc_foreign_release(const char *what) {
  void *block = std::malloc(sizeof(ForeignRelease));
  if (block == nullptr) {
    PyErr_Format(PyExc_MemoryError,
                 "%s: out of memory for the %zu-byte release wrapper of the imported tensor "
                 "(the tensor was left unconsumed)",
                 what, sizeof(ForeignRelease));
  }
  return block;
}

void adopt_foreign_release(hurray_buffer *h, void *block) {
  auto *r = static_cast<ForeignRelease *>(block);
  r->fn = h->release_fn;
  r->user_data = h->user_data;
  h->release_fn = foreign_release;
  h->user_data = r;
}

void release_handle(hurray_buffer *h) {
  if (h->release_fn == nullptr) return;
  SavedError saved;
  (void)hurray_buffer_release(h);
}

}  // namespace hurray_py
