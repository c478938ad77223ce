/* SPDX-License-Identifier: Apache-2.0 */
/* The floor of bench/python_batch_bench.py: a producer's own DLPack exchange
 * table called from C, with nothing around it. table_floor(objs) calls, for
 * each object, its type's managed_tensor_from_py_object_no_sync and then the
 * tensor's deleter (the table is looked up once per run of one type, as a
 * consumer caches it). table_floor_checked(objs, requires_grad, is_neg) adds
 * the two reads of torch's flags that hurray.from_dlpack makes on each tensor
 * taken through torch's table (docs/impl/python.md §7: the requires_grad
 * getset and the is_neg method descriptor of torch._C.TensorBase, called
 * directly), to show what they cost. Built by the bench with the system C compiler against
 * Python's and hurray's headers; not part of the package. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include "hurray/dlpack.h"

static PyObject *run(PyObject *objs, PyObject *rg, PyObject *neg) {
  PyObject *seq = PySequence_Fast(objs, "table_floor: a sequence");
  if (seq == NULL) return NULL;
  const Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
  PyObject **items = PySequence_Fast_ITEMS(seq);
  PyTypeObject *type = NULL;
  const DLPackExchangeAPI *api = NULL;
  for (Py_ssize_t i = 0; i < n; ++i) {
    if (Py_TYPE(items[i]) != type) {
      type = Py_TYPE(items[i]);
      PyObject *cap = PyObject_GetAttrString((PyObject *)type, "__dlpack_c_exchange_api__");
      if (cap == NULL) goto fail;
      api = (const DLPackExchangeAPI *)PyCapsule_GetPointer(cap, "dlpack_exchange_api");
      Py_DECREF(cap);
      if (api == NULL) goto fail;
    }
    DLManagedTensorVersioned *t = NULL;
    if (api->managed_tensor_from_py_object_no_sync(items[i], &t) != 0) goto fail;
    if (rg != NULL) {
      PyObject *v = Py_TYPE(rg)->tp_descr_get(rg, items[i], (PyObject *)type);
      if (v == NULL) goto fail;
      Py_DECREF(v);
      PyObject *arg = items[i];
      v = PyObject_Vectorcall(neg, &arg, 1, NULL);
      if (v == NULL) goto fail;
      Py_DECREF(v);
    }
    if (t->deleter != NULL) t->deleter(t);
  }
  Py_DECREF(seq);
  Py_RETURN_NONE;
fail:
  Py_DECREF(seq);
  return NULL;
}

static PyObject *table_floor(PyObject *self, PyObject *objs) {
  (void)self;
  return run(objs, NULL, NULL);
}

static PyObject *table_floor_checked(PyObject *self, PyObject *args) {
  (void)self;
  PyObject *objs, *rg, *neg;
  if (!PyArg_ParseTuple(args, "OOO", &objs, &rg, &neg)) return NULL;
  return run(objs, rg, neg);
}

static PyMethodDef methods[] = {
    {"table_floor", table_floor, METH_O, "table_floor(objs): each object's table call + deleter"},
    {"table_floor_checked", table_floor_checked, METH_VARARGS,
     "table_floor_checked(objs, requires_grad, is_neg): the same and torch's flag reads"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "hurray_batch_floor", NULL, -1, methods, NULL, NULL, NULL, NULL};

PyMODINIT_FUNC PyInit_hurray_batch_floor(void) { return PyModule_Create(&module); }
