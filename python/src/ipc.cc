// SPDX-License-Identifier: Apache-2.0
// _ipc_export / _ipc_import: the native half of hurray's multiprocessing
// reducer (hurray/_mp.py, docs/impl/python.md §11). A Buffer becomes a
// versioned descriptor (bytes) and file descriptors (hurray_ipc_export);
// Python moves the fds with multiprocessing.reduction.DupFd, and the
// receiver turns descriptor and fds back into a Buffer (hurray_ipc_import).
// Lifetime: the sender keeps a reference to the memory until every copy of
// the message's lifetime fd is closed in every process (docs/impl/ipc.md).
#include <fcntl.h>
#include <unistd.h>

#include <climits>
#include <cstring>

#include "binding.h"

namespace hurray_py {

// _ipc_export(buf) -> (descriptor: bytes, fds: tuple[int, ...], legacy_unsaid: bool)
// The Buffer stays live: a share of its handle is exported. The fds belong
// to the caller, who must close them (os.close) once they are duplicated
// for the receiver, or the sender's reference is never returned.
PyObject *mod_ipc_export(PyObject *, PyObject *arg) {
  const char *what = "hurray: sending a Buffer to another process (hurray_ipc_export)";
  if (!PyObject_TypeCheck(arg, &BufferType)) {
    PyErr_Format(PyExc_TypeError, "_ipc_export expects a hurray.Buffer, not %.100s",
                 Py_TYPE(arg)->tp_name);
    return nullptr;
  }
  BufferObject *b = as_buffer(arg);
  if (!check_live(b)) return nullptr;
  // hurray_ipc_export records what the receiver waits for on the device's
  // default stream (docs/impl/ipc.md §6): pending work on another stream
  // (the Buffer's event, docs/impl/python.md §4) is put ahead of it first,
  // without blocking.
  if (b->event != nullptr && !order_after_buffer(b, buffer_stream(b->h.device.device_type), what)) {
    return nullptr;
  }
  hurray_buffer two[2];
  int32_t st = hurray_share(&b->h, 2, two);
  if (st != HURRAY_OK) return raise_status(st, what);
  b->h = two[0];
  hurray_ipc_message msg;
  std::memset(&msg, 0, sizeof msg);
  // Exporting may copy non-shareable memory into a memfd: no Python runs,
  // so the GIL is let go for it.
  PyThreadState *ts = PyEval_SaveThread();
  st = hurray_ipc_export(&two[1], HURRAY_IPC_DEFAULT, &msg);
  PyEval_RestoreThread(ts);
  if (st != HURRAY_OK) {
    PyObject *r = raise_status(st, what);
    release_handle(&two[1]);
    return r;
  }
  PyObject *desc = PyBytes_FromStringAndSize(reinterpret_cast<const char *>(msg.bytes),
                                             static_cast<Py_ssize_t>(msg.size));
  PyObject *fds = PyTuple_New(static_cast<Py_ssize_t>(msg.nfds));
  bool ok = desc != nullptr && fds != nullptr;
  for (uint32_t i = 0; ok && i < msg.nfds; ++i) {
    PyObject *fd = PyLong_FromLong(msg.fds[i]);
    if (fd == nullptr) {
      ok = false;
      break;
    }
    PyTuple_SET_ITEM(fds, i, fd);
  }
  if (!ok) {
    Py_XDECREF(desc);
    Py_XDECREF(fds);
    // The sender's reference goes with it; discarding a message this call
    // just filled cannot fail (NODISCARD is for the caller's NULL case).
    const int32_t discarded = hurray_ipc_message_discard(&msg);
    (void)discarded;
    return nullptr;
  }
  return Py_BuildValue("(NNO)", desc, fds, b->legacy_unsaid ? Py_True : Py_False);
}

// _ipc_import(descriptor: bytes, fds: sequence of int, legacy_unsaid: bool) -> Buffer
// Consumes the fds in every case (closed on any error, as hurray_ipc_import
// does): a receiver never leaks one.
PyObject *mod_ipc_import(PyObject *, PyObject *args) {
  const char *what = "hurray: receiving a Buffer from another process (hurray_ipc_import)";
  Py_buffer desc;
  PyObject *fds_obj;
  int legacy_unsaid = 0;
  if (!PyArg_ParseTuple(args, "y*Op:_ipc_import", &desc, &fds_obj, &legacy_unsaid)) return nullptr;
  hurray_ipc_message msg;
  std::memset(&msg, 0, sizeof msg);
  PyObject *seq = PySequence_Fast(fds_obj, "_ipc_import: fds must be a sequence of ints");
  if (seq == nullptr) {
    PyBuffer_Release(&desc);
    return nullptr;
  }
  const Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
  // Every int of the sequence is collected, so that all of them are closed
  // on any error (a non-int entry, too many fds).
  int fds[HURRAY_IPC_MAX_FDS];
  size_t nfds = 0;
  bool ok = true;
  PyObject *et = nullptr, *ev = nullptr, *tb = nullptr;  // the first error, raised at the end
  for (Py_ssize_t i = 0; i < n; ++i) {
    long long fd = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(seq, i));
    if (fd == -1 && PyErr_Occurred()) {
      if (ok) {
        PyErr_Fetch(&et, &ev, &tb);
        ok = false;
      } else {
        PyErr_Clear();
      }
      continue;
    }
    if (fd < 0 || fd > INT_MAX) {
      // Not an fd at all: refused, and never cast (2**32 + 4 would close
      // fd 4, which belongs to someone else).
      if (ok) {
        PyErr_Format(PyExc_ValueError, "%s: %lld is not a file descriptor", what, fd);
        PyErr_Fetch(&et, &ev, &tb);
        ok = false;
      }
      continue;
    }
    if (nfds < HURRAY_IPC_MAX_FDS) {
      // Kept fds never leak into programs this process starts (os.system,
      // subprocess with close_fds=False): a child holding the lifetime fd
      // would delay the sender's return and could map the tensor. Python's
      // socket.recv_fds ignores MSG_CMSG_CLOEXEC (CPython gh-107898),
      // and spawn's arguments arrive inheritable, so it is set here.
      (void)fcntl(static_cast<int>(fd), F_SETFD, FD_CLOEXEC);
      fds[nfds++] = static_cast<int>(fd);
    } else {
      (void)close(static_cast<int>(fd));  // too many: refused below, closed now
    }
  }
  Py_DECREF(seq);
  if (!ok) PyErr_Restore(et, ev, tb);
  if (ok && (n > HURRAY_IPC_MAX_FDS || desc.len > HURRAY_IPC_DESCRIPTOR_MAX)) {
    PyErr_Format(PyExc_ValueError,
                 "%s: %zd fds and %zd descriptor bytes arrived (at most %d and %d)", what, n,
                 desc.len, HURRAY_IPC_MAX_FDS, HURRAY_IPC_DESCRIPTOR_MAX);
    ok = false;
  }
  if (!ok) {
    for (size_t i = 0; i < nfds; ++i) (void)close(fds[i]);
    PyBuffer_Release(&desc);
    return nullptr;
  }
  msg.size = static_cast<uint32_t>(desc.len);
  std::memcpy(msg.bytes, desc.buf, static_cast<size_t>(desc.len));
  msg.nfds = static_cast<uint32_t>(nfds);
  for (size_t i = 0; i < nfds; ++i) msg.fds[i] = fds[i];
  PyBuffer_Release(&desc);
  hurray_buffer h;
  int32_t st;
  PyThreadState *ts = PyEval_SaveThread();
  st = hurray_ipc_import(&msg, &h);
  PyEval_RestoreThread(ts);
  if (st != HURRAY_OK) return raise_status(st, what);
  return new_buffer(&h, legacy_unsaid != 0);
}

}  // namespace hurray_py
