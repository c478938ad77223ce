// SPDX-License-Identifier: Apache-2.0
/*
 * testprod_jni.c - JNI access to the C test producer (tests/dlpack_producer) for
 * the Java tests, and to the Go interop consumer (a Go c-shared library
 * loaded with dlopen into the same JVM). Test code only.
 */
#include <dlfcn.h>
#include <jni.h>
#include <stdint.h>
#include <stdio.h>

#include "dlpack_producer.h"

#define T(x) ((void *)(intptr_t)(x))

static void throw_error(JNIEnv *env, const char *what) {
  jclass cls = (*env)->FindClass(env, "java/lang/IllegalStateException");
  if (cls != NULL) (*env)->ThrowNew(env, cls, what);
}

JNIEXPORT void JNICALL Java_dev_hurray_TestProducer_reset(JNIEnv *e, jclass c) {
  (void)e, (void)c;
  tp_reset();
}

static int copy_shape(JNIEnv *env, jlongArray shape, int64_t dims[8], jsize *ndim) {
  *ndim = (*env)->GetArrayLength(env, shape);
  if (*ndim > 8) return -1;
  (*env)->GetLongArrayRegion(env, shape, 0, *ndim, (jlong *)dims);
  return 0;
}

JNIEXPORT jlong JNICALL Java_dev_hurray_TestProducer_makeVersioned(JNIEnv *env, jclass c,
                                                                   jlongArray shape, jfloat start,
                                                                   jlong flags) {
  (void)c;
  int64_t dims[8];
  jsize ndim;
  if (copy_shape(env, shape, dims, &ndim) != 0) return 0;
  return (jlong)(intptr_t)tp_make_versioned(ndim, dims, start, (uint64_t)flags);
}

JNIEXPORT jlong JNICALL Java_dev_hurray_TestProducer_makeLegacy(JNIEnv *env, jclass c,
                                                                jlongArray shape, jfloat start) {
  (void)c;
  int64_t dims[8];
  jsize ndim;
  if (copy_shape(env, shape, dims, &ndim) != 0) return 0;
  return (jlong)(intptr_t)tp_make_legacy(ndim, dims, start);
}

JNIEXPORT jlong JNICALL Java_dev_hurray_TestProducer_makeVersionedMajor(JNIEnv *e, jclass c,
                                                                        jint major) {
  (void)e, (void)c;
  return (jlong)(intptr_t)tp_make_versioned_major((uint32_t)major);
}

JNIEXPORT jlong JNICALL Java_dev_hurray_TestProducer_deleterCalls(JNIEnv *e, jclass c) {
  (void)e, (void)c;
  return tp_deleter_calls();
}

JNIEXPORT void JNICALL Java_dev_hurray_TestProducer_noteRelease(JNIEnv *e, jclass c) {
  (void)e, (void)c;
  tp_note_release();
}

JNIEXPORT jlong JNICALL Java_dev_hurray_TestProducer_notesAtDelete(JNIEnv *e, jclass c) {
  (void)e, (void)c;
  return tp_notes_at_delete();
}

JNIEXPORT void JNICALL Java_dev_hurray_TestProducer_deleteVersioned(JNIEnv *e, jclass c, jlong t) {
  (void)e, (void)c;
  DLManagedTensorVersioned *v = T(t);
  if (v != NULL && v->deleter != NULL) v->deleter(v);
}

/* The address of a versioned tensor's first byte (data + byte_offset). */
JNIEXPORT jlong JNICALL Java_dev_hurray_TestProducer_firstByte(JNIEnv *e, jclass c, jlong t) {
  (void)e, (void)c;
  const DLManagedTensorVersioned *v = T(t);
  return (jlong)((uintptr_t)v->dl_tensor.data + (uintptr_t)v->dl_tensor.byte_offset);
}

JNIEXPORT jdouble JNICALL Java_dev_hurray_TestProducer_consumeVersioned(JNIEnv *env, jclass c,
                                                                        jlong t) {
  (void)c;
  double sum = 0;
  if (tp_consume_versioned(T(t), &sum) != 0) throw_error(env, "not a compact float32 tensor");
  return sum;
}

JNIEXPORT jdouble JNICALL Java_dev_hurray_TestProducer_consumeLegacy(JNIEnv *env, jclass c,
                                                                     jlong t) {
  (void)c;
  double sum = 0;
  if (tp_consume_legacy(T(t), &sum) != 0) throw_error(env, "not a compact float32 tensor");
  return sum;
}

/* Every field of a DLManagedTensorVersioned, read in C, for the tests:
 * {version.major, version.minor, flags, device_type, device_id, dtype code,
 * bits, lanes, byte_offset, ndim, shape == NULL, strides == NULL,
 * deleter == NULL, data == NULL, shape[0..ndim), strides[0..ndim)} (the
 * arrays only when non-NULL), or NULL with IllegalStateException for a NULL
 * tensor or an ndim outside 0..64. The tensor is only read. */
JNIEXPORT jlongArray JNICALL Java_dev_hurray_TestProducer_describeVersioned(JNIEnv *env, jclass c,
                                                                            jlong t) {
  (void)c;
  const DLManagedTensorVersioned *v = T(t);
  if (v == NULL || v->dl_tensor.ndim < 0 || v->dl_tensor.ndim > 64) {
    throw_error(env, "describeVersioned: NULL tensor or ndim outside 0..64");
    return NULL;
  }
  const DLTensor *d = &v->dl_tensor;
  jlong out[14 + 2 * 64];
  jsize n = 0;
  out[n++] = v->version.major;
  out[n++] = v->version.minor;
  out[n++] = (jlong)v->flags;
  out[n++] = d->device.device_type;
  out[n++] = d->device.device_id;
  out[n++] = d->dtype.code;
  out[n++] = d->dtype.bits;
  out[n++] = d->dtype.lanes;
  out[n++] = (jlong)d->byte_offset;
  out[n++] = d->ndim;
  out[n++] = d->shape == NULL;
  out[n++] = d->strides == NULL;
  out[n++] = v->deleter == NULL;
  out[n++] = d->data == NULL;
  for (int i = 0; d->shape != NULL && i < d->ndim; ++i) out[n++] = d->shape[i];
  for (int i = 0; d->strides != NULL && i < d->ndim; ++i) out[n++] = d->strides[i];
  jlongArray a = (*env)->NewLongArray(env, n);
  if (a != NULL) (*env)->SetLongArrayRegion(env, a, 0, n, out);
  return a;
}

/* libhurray's checking-mode counters, read through the library file the
 * JVM loaded (lib, already loaded: RTLD_NOLOAD): {options, live, tracked,
 * double_releases}; NULL with IllegalStateException when the library or
 * hurray_check_get_state cannot be found. */
JNIEXPORT jlongArray JNICALL Java_dev_hurray_TestProducer_checkState(JNIEnv *env, jclass c,
                                                                     jstring lib) {
  (void)c;
  const char *path = (*env)->GetStringUTFChars(env, lib, NULL);
  if (path == NULL) return NULL;
  void *h = dlopen(path, RTLD_NOW | RTLD_NOLOAD);
  (*env)->ReleaseStringUTFChars(env, lib, path);
  if (h == NULL) {
    throw_error(env, "checkState: libhurray is not loaded");
    return NULL;
  }
  int32_t (*get)(hurray_check_state *) =
      (int32_t(*)(hurray_check_state *))dlsym(h, "hurray_check_get_state");
  hurray_check_state st = {0};
  st.struct_size = sizeof st;
  int ok = get != NULL && get(&st) == HURRAY_OK;
  dlclose(h); /* drops the reference RTLD_NOLOAD took; the JVM keeps its own */
  if (!ok) {
    throw_error(env, "checkState: hurray_check_get_state not found or failed");
    return NULL;
  }
  jlong out[4] = {(jlong)st.options, (jlong)st.live, (jlong)st.tracked, (jlong)st.double_releases};
  jlongArray a = (*env)->NewLongArray(env, 4);
  if (a != NULL) (*env)->SetLongArrayRegion(env, a, 0, 4, out);
  return a;
}

/* The Go consumer's exports (bindings/go/interop/consumer). */
typedef int (*go_consume_fn)(void *tensor, int n, void (*note)(void), double *sum);
typedef void (*go_wait_fn)(void);
static go_consume_fn g_go_consume;
static go_wait_fn g_go_wait;

JNIEXPORT jdouble JNICALL Java_dev_hurray_TestProducer_goConsume(JNIEnv *env, jclass c, jstring lib,
                                                                 jlong t, jint n) {
  (void)c;
  if (g_go_consume == NULL) {
    const char *path = (*env)->GetStringUTFChars(env, lib, NULL);
    if (path == NULL) return 0;
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    (*env)->ReleaseStringUTFChars(env, lib, path);
    if (h == NULL) {
      throw_error(env, dlerror());
      return 0;
    }
    g_go_consume = (go_consume_fn)dlsym(h, "HurrayGoConsume");
    g_go_wait = (go_wait_fn)dlsym(h, "HurrayGoWait");
    if (g_go_consume == NULL || g_go_wait == NULL) {
      throw_error(env, "HurrayGoConsume/HurrayGoWait not found in the Go library");
      return 0;
    }
  }
  double sum = 0;
  int rc = g_go_consume(T(t), n, tp_note_release, &sum);
  if (rc != 0) {
    char text[64];
    snprintf(text, sizeof text, "the Go consumer failed with status %d", rc);
    throw_error(env, text);
  }
  return sum;
}

JNIEXPORT void JNICALL Java_dev_hurray_TestProducer_goWait(JNIEnv *env, jclass c) {
  (void)c;
  if (g_go_wait == NULL) {
    throw_error(env, "goConsume was not called");
    return;
  }
  g_go_wait();
}
