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

#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstring>

#include "binding.h"

namespace hurray_py {

// _ipc_export(buf) -> (descriptor: bytes, fds: tuple[int, ...], legacy_unsaid: bool)
// The Buffer stays live: a share of its handle is exported. The fds belong
// to the caller, who must close them (os.close) once they are duplicated
// for the receiver, or the sender's reference is never returned.
static PyObject *ipc_export_one(PyObject *arg) {
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

static PyObject *ipc_export_set(PyObject *arg);

// Hands the fds of an export's result (descriptor, fds, legacy) to `owner`
// (a list the caller made before the call), in the same C call that made
// them: no Python code, so no signal handler, runs between the export and
// the moment the caller's cleanup can see the fds (a KeyboardInterrupt
// raised right after the call returns would otherwise drop the only names
// of the fds, and with them the memory, for the life of the process).
static PyObject *give_fds_to(PyObject *result, PyObject *owner) {
  if (result == nullptr || owner == nullptr) return result;
  PyObject *fds = PyTuple_GET_ITEM(result, 1);
  const Py_ssize_t end = PyList_GET_SIZE(owner);
  if (PyList_SetSlice(owner, end, end, fds) != 0) {  // all or nothing
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(fds); ++i) {
      (void)close(static_cast<int>(PyLong_AsLong(PyTuple_GET_ITEM(fds, i))));
    }
    Py_DECREF(result);
    return nullptr;
  }
  return result;
}

PyObject *mod_ipc_export(PyObject *, PyObject *args) {
  PyObject *buf, *owner = nullptr;
  if (!PyArg_ParseTuple(args, "O|O!:_ipc_export", &buf, &PyList_Type, &owner)) return nullptr;
  return give_fds_to(ipc_export_one(buf), owner);
}

PyObject *mod_ipc_export_set(PyObject *, PyObject *args) {
  PyObject *bufs, *owner = nullptr;
  if (!PyArg_ParseTuple(args, "O|O!:_ipc_export_set", &bufs, &PyList_Type, &owner)) {
    return nullptr;
  }
  return give_fds_to(ipc_export_set(bufs), owner);
}

// _close_fds(fds: list[int]) -> None: empties the list, closing each fd (an
// fd already closed is skipped silently). One C call, so a signal handler
// cannot stop it half-way (a Python loop of os.close could leak the rest).
PyObject *mod_close_fds(PyObject *, PyObject *arg) {
  if (!PyList_Check(arg)) {
    PyErr_Format(PyExc_TypeError, "_close_fds expects a list of fds, not %.100s",
                 Py_TYPE(arg)->tp_name);
    return nullptr;
  }
  while (PyList_GET_SIZE(arg) > 0) {
    const Py_ssize_t last = PyList_GET_SIZE(arg) - 1;
    const long fd = PyLong_AsLong(PyList_GET_ITEM(arg, last));
    if (PyList_SetSlice(arg, last, last + 1, nullptr) != 0) return nullptr;
    if (fd == -1 && PyErr_Occurred()) {
      PyErr_Clear();  // not an int: nothing to close
      continue;
    }
    if (fd >= 0 && fd <= INT_MAX) (void)close(static_cast<int>(fd));
  }
  Py_RETURN_NONE;
}

// _move_fds(src: list, dst: list) -> None: moves every fd of src to the end
// of dst, in one C call (so no signal handler runs between the two lists'
// changes: an fd is always in exactly one of them).
PyObject *mod_move_fds(PyObject *, PyObject *args) {
  PyObject *src, *dst;
  if (!PyArg_ParseTuple(args, "O!O!:_move_fds", &PyList_Type, &src, &PyList_Type, &dst)) {
    return nullptr;
  }
  const Py_ssize_t end = PyList_GET_SIZE(dst);
  if (PyList_SetSlice(dst, end, end, src) != 0) return nullptr;
  if (PyList_SetSlice(src, 0, PyList_GET_SIZE(src), nullptr) != 0) {
    (void)PyList_SetSlice(dst, end, PyList_GET_SIZE(dst), nullptr);  // shrinking: cannot fail
    return nullptr;
  }
  Py_RETURN_NONE;
}

// _dup_fds(fds: sequence of int, owner: list) -> None: appends a duplicate
// (close-on-exec) of each fd to owner, all or nothing (on failure none is
// left open and OSError is raised). One C call: see _close_fds.
PyObject *mod_dup_fds(PyObject *, PyObject *args) {
  PyObject *src, *owner;
  if (!PyArg_ParseTuple(args, "OO!:_dup_fds", &src, &PyList_Type, &owner)) return nullptr;
  PyObject *seq = PySequence_Fast(src, "_dup_fds: fds must be a sequence of ints");
  if (seq == nullptr) return nullptr;
  const Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
  PyObject *dups = PyList_New(n);
  if (dups == nullptr) {
    Py_DECREF(seq);
    return nullptr;
  }
  Py_ssize_t made = 0;
  bool ok = true;
  for (; made < n; ++made) {
    const long fd = PyLong_AsLong(PySequence_Fast_GET_ITEM(seq, made));
    if (fd == -1 && PyErr_Occurred()) {
      ok = false;
      break;
    }
    const int d = fd >= 0 && fd <= INT_MAX ? fcntl(static_cast<int>(fd), F_DUPFD_CLOEXEC, 0) : -1;
    if (d < 0) {
      if (fd < 0 || fd > INT_MAX) errno = EBADF;
      PyErr_SetFromErrno(PyExc_OSError);
      ok = false;
      break;
    }
    PyObject *v = PyLong_FromLong(d);
    if (v == nullptr) {
      (void)close(d);
      ok = false;
      break;
    }
    PyList_SET_ITEM(dups, made, v);
  }
  Py_DECREF(seq);
  if (ok) {
    const Py_ssize_t end = PyList_GET_SIZE(owner);
    ok = PyList_SetSlice(owner, end, end, dups) == 0;
  }
  if (!ok) {
    for (Py_ssize_t i = 0; i < made; ++i) {
      (void)close(static_cast<int>(PyLong_AsLong(PyList_GET_ITEM(dups, i))));
    }
  }
  Py_DECREF(dups);
  if (!ok) return nullptr;
  Py_RETURN_NONE;
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

// _ipc_export_set(bufs: list[Buffer]) -> (descriptor: bytes, fds: tuple[int, ...],
//                                          legacy_unsaid: tuple[bool, ...])
// One message for all of them (hurray_ipc_export_set, docs/impl/ipc.md §10):
// a share of each Buffer's handle is exported (the Buffers stay live);
// handles of one allocation (a tensor group, shares of one Buffer) travel as
// one region, two fds. The fds returned are duplicates the caller owns and
// must close once they are handed on; the message itself is discarded here.
// All or nothing: on failure no share is left and the error names bufs[i].
static PyObject *ipc_export_set(PyObject *arg) {
  const char *what = "hurray: sending a set of Buffers to another process (hurray_ipc_export_set)";
  if (!PyList_Check(arg)) {
    PyErr_Format(PyExc_TypeError, "_ipc_export_set expects a list of hurray.Buffer, not %.100s",
                 Py_TYPE(arg)->tp_name);
    return nullptr;
  }
  const Py_ssize_t n = PyList_GET_SIZE(arg);
  if (n == 0 || n > HURRAY_IPC_SET_MAX_HANDLES) {
    PyErr_Format(PyExc_ValueError, "%s: %zd Buffers (1..%d in one set)", what, n,
                 HURRAY_IPC_SET_MAX_HANDLES);
    return nullptr;
  }
  hurray_buffer *shares =
      static_cast<hurray_buffer *>(PyMem_Calloc(static_cast<size_t>(n), sizeof(hurray_buffer)));
  if (shares == nullptr) return PyErr_NoMemory();
  Py_ssize_t made = 0;
  bool ok = true;
  for (Py_ssize_t i = 0; i < n; ++i) {
    PyObject *o = PyList_GET_ITEM(arg, i);
    if (!PyObject_TypeCheck(o, &BufferType)) {
      PyErr_Format(PyExc_TypeError, "%s: bufs[%zd] is a %.100s, not a hurray.Buffer", what, i,
                   Py_TYPE(o)->tp_name);
      ok = false;
      break;
    }
    BufferObject *b = as_buffer(o);
    if (!check_live(b)) {
      ok = false;
      break;
    }
    // As for one Buffer: the receiver waits on the device's default stream.
    if (b->event != nullptr &&
        !order_after_buffer(b, buffer_stream(b->h.device.device_type), what)) {
      ok = false;
      break;
    }
    hurray_buffer two[2];
    const int32_t st = hurray_share(&b->h, 2, two);
    if (st != HURRAY_OK) {
      raise_status(st, what);
      ok = false;
      break;
    }
    b->h = two[0];
    shares[made++] = two[1];
  }
  hurray_ipc_set_message *msg = nullptr;
  if (ok) {
    size_t fi = HURRAY_BATCH_NO_INDEX;
    int32_t st;
    // Non-shareable members are copied into one memfd: no Python runs.
    Py_BEGIN_ALLOW_THREADS;
    st = hurray_ipc_export_set(shares, static_cast<size_t>(n), HURRAY_IPC_DEFAULT, &msg, &fi);
    Py_END_ALLOW_THREADS;
    if (st != HURRAY_OK) {
      char w[200];
      if (fi != HURRAY_BATCH_NO_INDEX) {
        std::snprintf(w, sizeof w, "%s, bufs[%zu]", what, fi);
      } else {
        std::snprintf(w, sizeof w, "%s", what);
      }
      raise_status(st, w);
      ok = false;
    }
  }
  if (!ok) {
    for (Py_ssize_t i = 0; i < made; ++i) release_handle(&shares[i]);
    PyMem_Free(shares);
    return nullptr;
  }
  PyMem_Free(shares);  // consumed (emptied) by the export
  const uint8_t *bytes = nullptr;
  const int32_t *fds = nullptr;
  size_t size = 0, nfds = 0;
  // Cannot fail: every pointer is given (NODISCARD is for NULL ones).
  const int32_t parts = hurray_ipc_set_message_parts(msg, &bytes, &size, &fds, &nfds);
  (void)parts;
  PyObject *desc = PyBytes_FromStringAndSize(reinterpret_cast<const char *>(bytes),
                                             static_cast<Py_ssize_t>(size));
  PyObject *tuple = PyTuple_New(static_cast<Py_ssize_t>(nfds));
  ok = desc != nullptr && tuple != nullptr;
  size_t dupped = 0;
  for (; ok && dupped < nfds; ++dupped) {
    const int fd = fcntl(fds[dupped], F_DUPFD_CLOEXEC, 3);
    PyObject *v = fd >= 0 ? PyLong_FromLong(fd) : nullptr;
    if (v == nullptr) {
      if (fd >= 0) {
        (void)close(fd);
      } else {
        PyErr_SetFromErrno(PyExc_OSError);
      }
      ok = false;
      break;
    }
    PyTuple_SET_ITEM(tuple, static_cast<Py_ssize_t>(dupped), v);
  }
  if (!ok) {
    for (size_t i = 0; i < dupped; ++i) {
      (void)close(static_cast<int>(PyLong_AsLong(PyTuple_GET_ITEM(tuple, i))));
    }
  }
  // The message's own fds close here; the duplicates (if any) keep the
  // lifetime pipes open until the receiver's copies are gone. On failure the
  // references come back to the sender at once.
  const int32_t discarded = hurray_ipc_set_message_discard(msg);  // never fails
  (void)discarded;
  if (!ok) {
    Py_XDECREF(desc);
    Py_XDECREF(tuple);
    return nullptr;
  }
  PyObject *legacy = PyTuple_New(n);
  if (legacy == nullptr) {
    for (size_t i = 0; i < nfds; ++i) {
      (void)close(static_cast<int>(PyLong_AsLong(PyTuple_GET_ITEM(tuple, i))));
    }
    Py_DECREF(desc);
    Py_DECREF(tuple);
    return nullptr;
  }
  for (Py_ssize_t i = 0; i < n; ++i) {
    PyObject *v = as_buffer(PyList_GET_ITEM(arg, i))->legacy_unsaid ? Py_True : Py_False;
    Py_INCREF(v);
    PyTuple_SET_ITEM(legacy, i, v);
  }
  return Py_BuildValue("(NNN)", desc, tuple, legacy);
}

// _ipc_import_set(descriptor: bytes, fds: sequence of int, legacy_unsaid:
// tuple[bool, ...]) -> list[Buffer]: hurray_ipc_import_set; the fds are
// consumed in every case (closed on any error); one flag per handle the
// sender exported (so their number is the capacity).
PyObject *mod_ipc_import_set(PyObject *, PyObject *args) {
  const char *what =
      "hurray: receiving a set of Buffers from another process "
      "(hurray_ipc_import_set)";
  Py_buffer desc;
  PyObject *fds_obj;
  PyObject *legacy;
  if (!PyArg_ParseTuple(args, "y*OO!:_ipc_import_set", &desc, &fds_obj, &PyTuple_Type, &legacy)) {
    return nullptr;
  }
  const Py_ssize_t n = PyTuple_GET_SIZE(legacy);
  PyObject *seq = PySequence_Fast(fds_obj, "_ipc_import_set: fds must be a sequence of ints");
  if (seq == nullptr) {
    PyBuffer_Release(&desc);
    return nullptr;
  }
  const Py_ssize_t nf = PySequence_Fast_GET_SIZE(seq);
  int32_t *fds = static_cast<int32_t *>(PyMem_Calloc(static_cast<size_t>(nf) + 1, sizeof(int32_t)));
  size_t kept = 0;
  bool ok = fds != nullptr;
  if (!ok) PyErr_NoMemory();
  PyObject *et = nullptr, *ev = nullptr, *tb = nullptr;
  for (Py_ssize_t i = 0; i < nf; ++i) {
    const long long fd = PyLong_AsLongLong(PySequence_Fast_GET_ITEM(seq, i));
    if (fd == -1 && PyErr_Occurred()) {
      if (ok)
        PyErr_Fetch(&et, &ev, &tb);
      else
        PyErr_Clear();
      ok = false;
      continue;
    }
    if (fd < 0 || fd > INT_MAX) {
      if (ok) {
        PyErr_Format(PyExc_ValueError, "%s: %lld is not a file descriptor", what, fd);
        PyErr_Fetch(&et, &ev, &tb);
        ok = false;
      }
      continue;
    }
    (void)fcntl(static_cast<int>(fd), F_SETFD, FD_CLOEXEC);  // as _ipc_import
    if (fds != nullptr) {
      fds[kept++] = static_cast<int32_t>(fd);
    } else {
      (void)close(static_cast<int>(fd));
    }
  }
  Py_DECREF(seq);
  if (et != nullptr) PyErr_Restore(et, ev, tb);
  if (ok && n <= 0) {
    PyErr_Format(PyExc_ValueError, "%s: %zd handles announced", what, n);
    ok = false;
  }
  hurray_buffer *hs = nullptr;
  PyObject *out = nullptr;
  if (ok) {
    hs = static_cast<hurray_buffer *>(PyMem_Calloc(static_cast<size_t>(n), sizeof(hurray_buffer)));
    out = hs != nullptr ? PyList_New(n) : nullptr;
    for (Py_ssize_t i = 0; out != nullptr && i < n; ++i) {
      PyObject *b = new_empty_buffer();
      if (b == nullptr) {
        Py_CLEAR(out);
        break;
      }
      PyList_SET_ITEM(out, i, b);
    }
    if (out == nullptr) {
      if (!PyErr_Occurred()) PyErr_NoMemory();
      ok = false;
    }
  }
  if (!ok) {
    for (size_t i = 0; i < kept; ++i) (void)close(fds[i]);
    PyMem_Free(fds);
    PyMem_Free(hs);
    PyBuffer_Release(&desc);
    return nullptr;
  }
  size_t count = 0;
  int32_t st;
  Py_BEGIN_ALLOW_THREADS;
  st = hurray_ipc_import_set(static_cast<const uint8_t *>(desc.buf), static_cast<size_t>(desc.len),
                             fds, kept, hs, static_cast<size_t>(n), &count);
  Py_END_ALLOW_THREADS;
  PyBuffer_Release(&desc);
  PyMem_Free(fds);
  if (st == HURRAY_OK && count != static_cast<size_t>(n)) {
    for (size_t i = 0; i < count; ++i) release_handle(&hs[i]);
    PyErr_Format(PyExc_OSError, "%s: the message holds %zu handles, %zd were announced", what,
                 count, n);
    PyMem_Free(hs);
    Py_DECREF(out);
    return nullptr;
  }
  if (st != HURRAY_OK) {
    raise_status(st, what);
    PyMem_Free(hs);
    Py_DECREF(out);
    return nullptr;
  }
  for (Py_ssize_t i = 0; i < n; ++i) {
    if (g_check_labels) label_python_site(&hs[i]);
    PyObject *b = PyList_GET_ITEM(out, i);
    const bool ro = (hs[i].flags & HURRAY_FLAG_READ_ONLY) != 0;
    buffer_adopt(b, &hs[i]);
    as_buffer(b)->legacy_unsaid = ro && PyTuple_GET_ITEM(legacy, i) == Py_True;
  }
  PyMem_Free(hs);
  return out;
}

}  // namespace hurray_py
