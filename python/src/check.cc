// SPDX-License-Identifier: Apache-2.0
// The checking mode from Python (docs/impl/python.md §9): hurray._native's
// _check_enable / _check_state / _check_live, and the Python creation site
// each new Buffer's handle is labelled with while the mode is on.
#include <cstdio>
#include <cstring>

#include "binding.h"

namespace hurray_py {

bool g_check_labels = false;

namespace {

// "path/test_x.py:12 in test_leak" of the innermost Python frame, or ""
// (called from C with no Python frame). Never raises.
void python_site(char *out, size_t size) {
  out[0] = '\0';
  PyFrameObject *frame = PyEval_GetFrame();  // borrowed
  if (frame == nullptr) return;
  PyCodeObject *code = PyFrame_GetCode(frame);  // new reference
  const int line = PyFrame_GetLineNumber(frame);
  PyObject *file = PyObject_GetAttrString(reinterpret_cast<PyObject *>(code), "co_filename");
  PyObject *name = PyObject_GetAttrString(reinterpret_cast<PyObject *>(code), "co_name");
  const char *f = file != nullptr && PyUnicode_Check(file) ? PyUnicode_AsUTF8(file) : nullptr;
  const char *n = name != nullptr && PyUnicode_Check(name) ? PyUnicode_AsUTF8(name) : nullptr;
  std::snprintf(out, size, "%s:%d in %s", f != nullptr ? f : "?", line, n != nullptr ? n : "?");
  Py_XDECREF(file);
  Py_XDECREF(name);
  Py_DECREF(code);
  PyErr_Clear();
}

void refresh_check_labels() {
  hurray_check_state s;
  std::memset(&s, 0, sizeof s);
  s.struct_size = sizeof s;
  g_check_labels = hurray_check_get_state(&s) == HURRAY_OK && s.options != 0;
}

PyObject *check_enable(PyObject *, PyObject *arg) {
  const unsigned long options = PyLong_AsUnsignedLong(arg);
  if (options == static_cast<unsigned long>(-1) && PyErr_Occurred()) return nullptr;
  if (options > UINT32_MAX) {
    PyErr_SetString(PyExc_ValueError, "hurray._check_enable: options out of range");
    return nullptr;
  }
  const int32_t st = hurray_check_enable(static_cast<uint32_t>(options));
  if (st != HURRAY_OK) return raise_status(st, "hurray.enable_checking");
  refresh_check_labels();
  Py_RETURN_NONE;
}

PyObject *check_state(PyObject *, PyObject *) {
  hurray_check_state s;
  std::memset(&s, 0, sizeof s);
  s.struct_size = sizeof s;
  const int32_t st = hurray_check_get_state(&s);
  if (st != HURRAY_OK) return raise_status(st, "hurray._check_state");
  return Py_BuildValue("{s:I,s:K,s:K,s:K,s:K,s:K}", "options", s.options, "next_id",
                       static_cast<unsigned long long>(s.next_id), "live",
                       static_cast<unsigned long long>(s.live), "tracked",
                       static_cast<unsigned long long>(s.tracked), "double_releases",
                       static_cast<unsigned long long>(s.double_releases), "untracked",
                       static_cast<unsigned long long>(s.untracked));
}

PyObject *decode(const char *text) {
  return PyUnicode_DecodeUTF8(text, static_cast<Py_ssize_t>(std::strlen(text)), "replace");
}

// Appends one (id, made_by, label, origin, (device_type, device_id), ndim)
// tuple per live handle to the list `user`; stops appending after a failure
// (the exception stays set).
void append_entry(const hurray_check_entry *e, void *user) {
  auto *list = static_cast<PyObject *>(user);
  if (PyErr_Occurred()) return;
  // Labels are cut at 511 bytes (maybe inside a character) and may come
  // from C; frames name files: decoded leniently, never raising.
  PyObject *label = decode(e->label), *origin = decode(e->origin);
  PyObject *t =
      label != nullptr && origin != nullptr
          ? Py_BuildValue("(KsOO(ii)i)", static_cast<unsigned long long>(e->id), e->made_by, label,
                          origin, e->device.device_type, e->device.device_id, e->ndim)
          : nullptr;
  Py_XDECREF(label);
  Py_XDECREF(origin);
  if (t == nullptr) return;
  PyList_Append(list, t);
  Py_DECREF(t);
}

PyObject *check_live(PyObject *, PyObject *arg) {
  const unsigned long long since = PyLong_AsUnsignedLongLong(arg);
  if (since == static_cast<unsigned long long>(-1) && PyErr_Occurred()) return nullptr;
  PyObject *list = PyList_New(0);
  if (list == nullptr) return nullptr;
  const int32_t st = hurray_check_live(since, &append_entry, list, nullptr);
  if (st != HURRAY_OK) {
    Py_DECREF(list);
    return raise_status(st, "hurray.live_handles");
  }
  if (PyErr_Occurred()) {
    Py_DECREF(list);
    return nullptr;
  }
  return list;
}

PyMethodDef check_methods[] = {
    {"_check_enable", check_enable, METH_O,
     "_check_enable(options)\n--\n\nhurray_check_enable (HURRAY_CHECK_* bits)."},
    {"_check_state", check_state, METH_NOARGS,
     "_check_state()\n--\n\nhurray_check_get_state as a dict."},
    {"_check_live", check_live, METH_O,
     "_check_live(since)\n--\n\nhurray_check_live as a list of tuples (id, made_by, label,\n"
     "origin, device, ndim)."},
    {nullptr, nullptr, 0, nullptr},
};

}  // namespace

void label_python_site(const hurray_buffer *h) {
  char site[512];
  python_site(site, sizeof site);
  // Untracked, or no memory for the text: the Buffer stays unlabelled (the
  // status is HURRAY_NODISCARD, and a (void) cast does not quiet GCC).
  if (site[0] != '\0' && hurray_check_label(h, site) != HURRAY_OK) return;
}

bool check_init(PyObject *m) {
  refresh_check_labels();
  if (PyModule_AddIntConstant(m, "CHECK_TRACK", HURRAY_CHECK_TRACK) < 0 ||
      PyModule_AddIntConstant(m, "CHECK_STDERR", HURRAY_CHECK_STDERR) < 0) {
    return false;
  }
  return PyModule_AddFunctions(m, check_methods) == 0;
}

}  // namespace hurray_py
