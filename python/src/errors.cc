// SPDX-License-Identifier: Apache-2.0
// libhurray status codes as Python exceptions (docs/impl/python.md §5).
#include "binding.h"

namespace hurray_py {

PyObject *exception_for(int32_t status) {
  switch (status) {
    case HURRAY_ERR_INVALID_ARGUMENT:
    case HURRAY_ERR_OVERFLOW: return PyExc_ValueError;
    case HURRAY_ERR_UNSUPPORTED_VERSION:
    case HURRAY_ERR_UNSUPPORTED_DTYPE:
    case HURRAY_ERR_UNSUPPORTED_DEVICE:
    case HURRAY_ERR_DEVICE: return PyExc_BufferError;
    case HURRAY_ERR_OUT_OF_MEMORY: return PyExc_MemoryError;
    case HURRAY_ERR_IPC:  // a refused message, or a system call of the transport failed
      return PyExc_OSError;
    case HURRAY_ERR_IPC_CLOSED: return PyExc_ConnectionError;
    case HURRAY_ERR_IPC_TIMEOUT: return PyExc_TimeoutError;
    default: return PyExc_RuntimeError;
  }
}

PyObject *raise_status(int32_t status, const char *what) {
  PyErr_Format(exception_for(status), "%s: %s [%s]", what, hurray_last_error(),
               hurray_status_name(status));
  return nullptr;
}

}  // namespace hurray_py
