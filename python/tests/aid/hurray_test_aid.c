// SPDX-License-Identifier: Apache-2.0
/* hurray_test_aid: a test-only CPython extension, built by the tests
 * (conftest.py) against the installed package's headers and library
 * (hurray.get_include(), hurray.get_library()), never shipped.
 *
 * release_on_native_thread(obj, delay=0.0, wait=True) drops a reference on
 * a pthread Python has never seen, holding no GIL: the way a consumer
 * framework deletes a DLPack tensor on its own thread.
 *   - an unused 'dltensor_versioned' / 'dltensor' capsule: taken over (renamed
 *     used_*), its tensor deleted on the thread;
 *   - a live hurray.Buffer: a versioned capsule is taken from it
 *     (__dlpack__(max_version=(1, 3))), the Buffer is released (it reads as
 *     released at once), and the capsule's tensor, now the last reference
 *     this Buffer had, is deleted on the thread.
 * With wait=True the caller joins the thread with the GIL released. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "hurray/hurray.h"

typedef struct {
  DLManagedTensorVersioned *versioned;
  DLManagedTensor *legacy;
  double delay_s;
} Job;

static void *job_main(void *arg) {
  Job *job = (Job *)arg;
  if (job->delay_s > 0) {
    struct timespec ts;
    ts.tv_sec = (time_t)job->delay_s;
    ts.tv_nsec = (long)((job->delay_s - (double)ts.tv_sec) * 1e9);
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
  }
  if (job->versioned != NULL) (void)hurray_dlpack_versioned_delete(job->versioned);
  if (job->legacy != NULL) (void)hurray_dlpack_delete(job->legacy);
  free(job);
  return NULL;
}

/* Takes an unused capsule's tensor into job; 1 done, 0 not a capsule. */
static int take_capsule(PyObject *obj, Job *job) {
  if (PyCapsule_IsValid(obj, "dltensor_versioned")) {
    job->versioned = (DLManagedTensorVersioned *)PyCapsule_GetPointer(obj, "dltensor_versioned");
    (void)PyCapsule_SetName(obj, "used_dltensor_versioned");
    return 1;
  }
  if (PyCapsule_IsValid(obj, "dltensor")) {
    job->legacy = (DLManagedTensor *)PyCapsule_GetPointer(obj, "dltensor");
    (void)PyCapsule_SetName(obj, "used_dltensor");
    return 1;
  }
  return 0;
}

static int is_buffer(PyObject *obj) { return strcmp(Py_TYPE(obj)->tp_name, "hurray.Buffer") == 0; }

static PyObject *release_on_native_thread(PyObject *self, PyObject *args, PyObject *kwargs) {
  static char *kwlist[] = {"obj", "delay", "wait", NULL};
  PyObject *obj = NULL;
  double delay = 0.0;
  int wait = 1;
  (void)self;
  if (!PyArg_ParseTupleAndKeywords(args, kwargs, "O|dp:release_on_native_thread", kwlist, &obj,
                                   &delay, &wait)) {
    return NULL;
  }
  Job *job = (Job *)calloc(1, sizeof(Job));
  if (job == NULL) return PyErr_NoMemory();
  job->delay_s = delay;
  if (is_buffer(obj)) {
    PyObject *kw = Py_BuildValue("{s(ii)}", "max_version", 1, 3);
    PyObject *none = PyTuple_New(0);
    PyObject *meth = kw && none ? PyObject_GetAttrString(obj, "__dlpack__") : NULL;
    PyObject *cap = meth ? PyObject_Call(meth, none, kw) : NULL;
    Py_XDECREF(meth);
    Py_XDECREF(none);
    Py_XDECREF(kw);
    if (cap == NULL) {
      free(job);
      return NULL;
    }
    int ok = take_capsule(cap, job);
    Py_DECREF(cap);
    PyObject *r = ok ? PyObject_CallMethod(obj, "release", NULL) : NULL;
    if (r == NULL) {
      if (ok)
        job_main(job);
      else
        free(job);
      if (!PyErr_Occurred()) PyErr_SetString(PyExc_RuntimeError, "no versioned capsule");
      return NULL;
    }
    Py_DECREF(r);
  } else if (!take_capsule(obj, job)) {
    free(job);
    PyErr_SetString(PyExc_TypeError,
                    "release_on_native_thread expects a live hurray.Buffer or an unused "
                    "DLPack capsule");
    return NULL;
  }
  pthread_t thread;
  int rc = pthread_create(&thread, NULL, job_main, job);
  if (rc != 0) {
    job_main(job); /* never started: release here, the GIL is held */
    errno = rc;
    return PyErr_SetFromErrno(PyExc_OSError);
  }
  if (wait) {
    Py_BEGIN_ALLOW_THREADS pthread_join(thread, NULL);
    Py_END_ALLOW_THREADS
  } else {
    pthread_detach(thread);
  }
  Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"release_on_native_thread", (PyCFunction)(void (*)(void))release_on_native_thread,
     METH_VARARGS | METH_KEYWORDS,
     "release_on_native_thread(obj, delay=0.0, wait=True): drop obj's reference on a new "
     "native thread that holds no GIL."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {PyModuleDef_HEAD_INIT,
                                        "hurray_test_aid",
                                        "Test-only aid of hurray's tests.",
                                        -1,
                                        methods,
                                        NULL,
                                        NULL,
                                        NULL,
                                        NULL};

PyMODINIT_FUNC PyInit_hurray_test_aid(void) { return PyModule_Create(&module_def); }
