// SPDX-License-Identifier: Apache-2.0
/*
 * hurray_jni.c - JNI side of dev.hurray.Native (see Native.java).
 *
 * A Java handle is the address of a hurray_buffer struct malloc'd here; only
 * Native.release frees it. Each failed libhurray call throws
 * dev.hurray.HurrayException with the status and hurray_last_error(), read
 * on this thread right after the call (a JNI call runs on its Java thread).
 */
#include <jni.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <hurray/hurray.h>

#define H(x) ((hurray_buffer *)(intptr_t)(x))
#define J(p) ((jlong)(intptr_t)(p))

/* Throws HurrayException(status, name, "op: message", index); index -1:
 * no element (every call but the batched ones). */
static void throw_status_at(JNIEnv *env, int32_t status, const char *op, const char *message,
                            jlong index) {
  jclass cls = (*env)->FindClass(env, "dev/hurray/HurrayException");
  if (cls == NULL) return; /* NoClassDefFoundError pending */
  jmethodID ctor =
      (*env)->GetMethodID(env, cls, "<init>", "(ILjava/lang/String;Ljava/lang/String;J)V");
  if (ctor == NULL) return;
  char text[640];
  snprintf(text, sizeof text, "%s: %s", op, message);
  jstring name = (*env)->NewStringUTF(env, hurray_status_name(status));
  jstring msg = (*env)->NewStringUTF(env, text);
  if (name == NULL || msg == NULL) return;
  jthrowable ex = (jthrowable)(*env)->NewObject(env, cls, ctor, (jint)status, name, msg, index);
  if (ex != NULL) (*env)->Throw(env, ex);
}

static void throw_status(JNIEnv *env, int32_t status, const char *op, const char *message) {
  throw_status_at(env, status, op, message, -1);
}

/* A batched call's failed index as Java reports it: -1 for
 * HURRAY_BATCH_NO_INDEX. */
static jlong java_index(size_t failed) {
  return failed == HURRAY_BATCH_NO_INDEX ? -1 : (jlong)failed;
}

/* Throws for a failed call (status != OK); returns status. */
static int32_t check(JNIEnv *env, int32_t status, const char *op) {
  if (status != HURRAY_OK) throw_status(env, status, op, hurray_last_error());
  return status;
}

static hurray_buffer *new_handle(JNIEnv *env, const char *op) {
  hurray_buffer *h = calloc(1, sizeof *h);
  if (h == NULL) throw_status(env, HURRAY_ERR_OUT_OF_MEMORY, op, "no memory for a handle");
  return h;
}

JNIEXPORT jlong JNICALL Java_dev_hurray_Native_fromDLPackVersioned(JNIEnv *env, jclass c, jlong t) {
  (void)c;
  const char *op = "HurrayBuffer.fromDLPackVersioned";
  hurray_buffer *h = new_handle(env, op);
  if (h == NULL) return 0;
  if (check(env,
            hurray_from_dlpack_versioned((DLManagedTensorVersioned *)(intptr_t)t,
                                         HURRAY_IMPORT_DEFAULT, h),
            op) != HURRAY_OK) {
    free(h);
    return 0;
  }
  return J(h);
}

JNIEXPORT jlong JNICALL Java_dev_hurray_Native_fromDLPack(JNIEnv *env, jclass c, jlong t) {
  (void)c;
  const char *op = "HurrayBuffer.fromDLPack";
  hurray_buffer *h = new_handle(env, op);
  if (h == NULL) return 0;
  if (check(env, hurray_from_dlpack((DLManagedTensor *)(intptr_t)t, HURRAY_IMPORT_DEFAULT, h),
            op) != HURRAY_OK) {
    free(h);
    return 0;
  }
  return J(h);
}

JNIEXPORT jlong JNICALL Java_dev_hurray_Native_alloc(JNIEnv *env, jclass c, jint code, jint bits,
                                                     jint lanes, jlongArray shape,
                                                     jboolean read_only) {
  (void)c;
  const char *op = "HurrayBuffer.allocate";
  if (code < 0 || code > 255 || bits < 0 || bits > 255 || lanes < 0 || lanes > 65535) {
    throw_status(env, HURRAY_ERR_INVALID_ARGUMENT, op,
                 "dtype out of range (code and bits 0..255, lanes 0..65535)");
    return 0;
  }
  jsize ndim = (*env)->GetArrayLength(env, shape);
  if (ndim > HURRAY_MAX_NDIM) {
    throw_status(env, HURRAY_ERR_INVALID_ARGUMENT, op, "more than HURRAY_MAX_NDIM (64) extents");
    return 0;
  }
  int64_t dims[HURRAY_MAX_NDIM];
  (*env)->GetLongArrayRegion(env, shape, 0, ndim, (jlong *)dims);
  hurray_buffer *h = new_handle(env, op);
  if (h == NULL) return 0;
  hurray_device cpu = {HURRAY_DEVICE_CPU, 0};
  hurray_dtype dt = {(uint8_t)code, (uint8_t)bits, (uint16_t)lanes};
  uint64_t flags = read_only ? HURRAY_FLAG_READ_ONLY : 0;
  if (check(env, hurray_alloc(cpu, dt, (int32_t)ndim, dims, flags, h), op) != HURRAY_OK) {
    free(h);
    return 0;
  }
  return J(h);
}

/* Frees the first n handle structs of addrs (still empty), then addrs. */
static void free_handles(jlong *addrs, jint n) {
  for (jint i = 0; i < n; ++i) free(H(addrs[i]));
  free(addrs);
}

/* Each allocation is checked as it is made and the first one that fails ends
 * the call (nothing shared, the source untouched): the Java array first, so
 * an n the JVM cannot hold costs one refused NewLongArray (OutOfMemoryError
 * pending), not a calloc of n handles and a loop over n entries. */
JNIEXPORT jlongArray JNICALL Java_dev_hurray_Native_share(JNIEnv *env, jclass c, jlong handle,
                                                          jint n) {
  (void)c;
  const char *op = "HurrayBuffer.share";
  jlongArray result = (*env)->NewLongArray(env, n);
  if (result == NULL) return NULL; /* OutOfMemoryError pending */
  jlong *addrs = calloc((size_t)n, sizeof *addrs);
  if (addrs == NULL) {
    throw_status(env, HURRAY_ERR_OUT_OF_MEMORY, op, "no memory for the handle addresses");
    return NULL;
  }
  for (jint i = 0; i < n; ++i) {
    addrs[i] = J(calloc(1, sizeof(hurray_buffer)));
    if (addrs[i] == 0) {
      free_handles(addrs, i);
      throw_status(env, HURRAY_ERR_OUT_OF_MEMORY, op, "no memory for the handles");
      return NULL;
    }
  }
  hurray_buffer *out = calloc((size_t)n + 1, sizeof *out);
  if (out == NULL) {
    free_handles(addrs, n);
    throw_status(env, HURRAY_ERR_OUT_OF_MEMORY, op, "no memory for the handles");
    return NULL;
  }
  hurray_buffer *src = H(handle);
  if (check(env, hurray_share(src, (size_t)n + 1, out), op) != HURRAY_OK) {
    free(out);
    free_handles(addrs, n);
    return NULL;
  }
  *src = out[0]; /* this buffer keeps one */
  for (jint i = 0; i < n; ++i) *H(addrs[i]) = out[i + 1];
  free(out);
  (*env)->SetLongArrayRegion(env, result, 0, n, addrs);
  free(addrs);
  return result;
}

/* share(h, 1) in one allocation and no Java array: the common case's fast
 * path (HurrayBuffer.share(1)). */
JNIEXPORT jlong JNICALL Java_dev_hurray_Native_share1(JNIEnv *env, jclass c, jlong handle) {
  (void)c;
  const char *op = "HurrayBuffer.share";
  hurray_buffer *h = new_handle(env, op);
  if (h == NULL) return 0;
  hurray_buffer out[2];
  hurray_buffer *src = H(handle);
  if (check(env, hurray_share(src, 2, out), op) != HURRAY_OK) {
    free(h);
    return 0;
  }
  *src = out[0]; /* this buffer keeps one */
  *h = out[1];
  return J(h);
}

JNIEXPORT jlong JNICALL Java_dev_hurray_Native_newEmpty(JNIEnv *env, jclass c) {
  (void)c;
  return J(new_handle(env, "HurrayBuffer.reusable"));
}

/* One more reference of src written into dst, an allocated empty handle
 * (a reusable buffer's): no allocation. On failure dst stays empty. */
JNIEXPORT void JNICALL Java_dev_hurray_Native_shareInto(JNIEnv *env, jclass c, jlong src,
                                                        jlong dst) {
  (void)c;
  hurray_buffer out[2];
  if (check(env, hurray_share(H(src), 2, out), "HurrayBuffer.shareInto") != HURRAY_OK) return;
  *H(src) = out[0]; /* the source keeps one */
  *H(dst) = out[1];
}

JNIEXPORT jlong JNICALL Java_dev_hurray_Native_toDLPackVersioned(JNIEnv *env, jclass c,
                                                                 jlong handle) {
  (void)c;
  DLManagedTensorVersioned *t = NULL;
  if (check(env, hurray_to_dlpack_versioned(H(handle), &t), "HurrayBuffer.toDLPackVersioned") !=
      HURRAY_OK) {
    return 0;
  }
  return J(t);
}

JNIEXPORT jlong JNICALL Java_dev_hurray_Native_toDLPack(JNIEnv *env, jclass c, jlong handle) {
  (void)c;
  DLManagedTensor *t = NULL;
  if (check(env, hurray_to_dlpack(H(handle), &t), "HurrayBuffer.toDLPack") != HURRAY_OK) return 0;
  return J(t);
}

/* Returns whether the handle was live, so that the Cleaner's count needs no
 * second JNI call. */
JNIEXPORT jboolean JNICALL Java_dev_hurray_Native_release(JNIEnv *env, jclass c, jlong handle) {
  (void)env;
  (void)c;
  hurray_buffer *h = H(handle);
  if (h == NULL) return JNI_FALSE;
  jboolean live = h->release_fn != NULL;
  (void)hurray_buffer_release(h);
  free(h);
  return live;
}

/* Releases the handle (if live) and keeps its struct, empty, for the next
 * shareInto of a reusable buffer. Returns whether it was live. */
JNIEXPORT jboolean JNICALL Java_dev_hurray_Native_releaseKeep(JNIEnv *env, jclass c, jlong handle) {
  (void)env;
  (void)c;
  hurray_buffer moved = hurray_buffer_move(H(handle)); /* empty before the release runs */
  jboolean live = moved.release_fn != NULL;
  (void)hurray_buffer_release(&moved);
  return live;
}

JNIEXPORT jboolean JNICALL Java_dev_hurray_Native_isLive(JNIEnv *env, jclass c, jlong handle) {
  (void)env;
  (void)c;
  return H(handle) != NULL && H(handle)->release_fn != NULL;
}

static jlongArray long_array(JNIEnv *env, const int64_t *p, int32_t n) {
  jlongArray a = (*env)->NewLongArray(env, n);
  if (a != NULL && n > 0) (*env)->SetLongArrayRegion(env, a, 0, n, (const jlong *)p);
  return a;
}

/* A copy of ndim extents or strides at p. A libhurray handle never has
 * ndim > 0 with p NULL; should one arrive anyway, this throws INTERNAL
 * rather than letting the JVM read address 0. */
static jlongArray dims_array(JNIEnv *env, const int64_t *p, int32_t ndim, const char *op) {
  if (ndim > 0 && p == NULL) {
    throw_status(env, HURRAY_ERR_INTERNAL, op, "malformed handle: ndim > 0 with a NULL array");
    return NULL;
  }
  return long_array(env, p, ndim);
}

JNIEXPORT jlongArray JNICALL Java_dev_hurray_Native_shape(JNIEnv *env, jclass c, jlong handle) {
  (void)c;
  return dims_array(env, H(handle)->shape, H(handle)->ndim, "HurrayBuffer.shape");
}

JNIEXPORT jlongArray JNICALL Java_dev_hurray_Native_strides(JNIEnv *env, jclass c, jlong handle) {
  (void)c;
  return dims_array(env, H(handle)->strides, H(handle)->ndim, "HurrayBuffer.strides");
}

JNIEXPORT jint JNICALL Java_dev_hurray_Native_dtype(JNIEnv *env, jclass c, jlong handle) {
  (void)env;
  (void)c;
  hurray_dtype d = H(handle)->dtype;
  return (jint)((uint32_t)d.code | ((uint32_t)d.bits << 8) | ((uint32_t)d.lanes << 16));
}

JNIEXPORT jlong JNICALL Java_dev_hurray_Native_device(JNIEnv *env, jclass c, jlong handle) {
  (void)env;
  (void)c;
  hurray_device d = H(handle)->device;
  return (jlong)(((uint64_t)(uint32_t)d.device_type << 32) | (uint32_t)d.device_id);
}

JNIEXPORT jlong JNICALL Java_dev_hurray_Native_flags(JNIEnv *env, jclass c, jlong handle) {
  (void)env;
  (void)c;
  return (jlong)H(handle)->flags;
}

JNIEXPORT jobject JNICALL Java_dev_hurray_Native_byteBuffer(JNIEnv *env, jclass c, jlong handle) {
  (void)c;
  const char *op = "HurrayBuffer.asByteBuffer";
  hurray_buffer *h = H(handle);
  int32_t type = h->device.device_type;
  if (type != HURRAY_DEVICE_CPU && type != HURRAY_DEVICE_CUDA_HOST &&
      type != HURRAY_DEVICE_ROCM_HOST) {
    throw_status(env, HURRAY_ERR_UNSUPPORTED_DEVICE, op, "the memory is not host memory");
    return NULL;
  }
  hurray_extent e;
  if (check(env, hurray_buffer_extent(h, &e), op) != HURRAY_OK) return NULL;
  /* A ByteBuffer's capacity is a Java int: the JVM would silently cut a
   * larger span to its low 32 bits. */
  if (e.highest - e.lowest > (int64_t)INT32_MAX) {
    throw_status(env, HURRAY_ERR_OVERFLOW, op,
                 "the memory spans more than 2^31 - 1 bytes, the largest ByteBuffer");
    return NULL;
  }
  static char empty;
  void *base = e.highest > e.lowest ? (char *)h->data + e.lowest : (void *)&empty;
  return (*env)->NewDirectByteBuffer(env, base, (jlong)(e.highest - e.lowest));
}

/* n handle structs (calloc'd, empty) whose addresses go to a new Java
 * array once `fill` has written them; everything is allocated before the
 * libhurray call, so that a failure of ours consumes nothing. */
typedef struct batch_out {
  jlongArray result;
  jlong *addrs;
  hurray_buffer *out;
} batch_out;

static int batch_out_new(JNIEnv *env, jsize n, const char *op, batch_out *b) {
  b->addrs = NULL;
  b->out = NULL;
  b->result = (*env)->NewLongArray(env, n);
  if (b->result == NULL) return 0; /* OutOfMemoryError pending */
  b->addrs = calloc((size_t)n + 1, sizeof *b->addrs);
  b->out = calloc((size_t)n + 1, sizeof *b->out);
  if (b->addrs == NULL || b->out == NULL) {
    free(b->addrs);
    free(b->out);
    throw_status(env, HURRAY_ERR_OUT_OF_MEMORY, op, "no memory for the handles");
    return 0;
  }
  for (jsize i = 0; i < n; ++i) {
    b->addrs[i] = J(calloc(1, sizeof(hurray_buffer)));
    if (b->addrs[i] == 0) {
      free_handles(b->addrs, i);
      free(b->out);
      throw_status(env, HURRAY_ERR_OUT_OF_MEMORY, op, "no memory for the handles");
      return 0;
    }
  }
  return 1;
}

/* After a failed call: frees everything (the handles were never written). */
static void batch_out_drop(batch_out *b, jsize n) {
  free(b->out);
  free_handles(b->addrs, n);
}

/* After a successful call: moves out[i] into handle i, returns the array. */
static jlongArray batch_out_done(JNIEnv *env, batch_out *b, jsize n) {
  for (jsize i = 0; i < n; ++i) *H(b->addrs[i]) = b->out[i];
  free(b->out);
  (*env)->SetLongArrayRegion(env, b->result, 0, n, b->addrs);
  free(b->addrs);
  return b->result;
}

/* n tensors in one call (hurray_from_dlpack[_versioned]_n), all or nothing:
 * on failure nothing was called on any tensor and the exception carries the
 * failed index. */
JNIEXPORT jlongArray JNICALL Java_dev_hurray_Native_fromDLPackN(JNIEnv *env, jclass c,
                                                                jlongArray tensors,
                                                                jboolean versioned) {
  (void)c;
  const char *op = versioned ? "HurrayBuffer.fromDLPackVersionedAll" : "HurrayBuffer.fromDLPackAll";
  jsize n = (*env)->GetArrayLength(env, tensors);
  void **ts = calloc((size_t)n + 1, sizeof *ts);
  jlong *raw = calloc((size_t)n + 1, sizeof *raw);
  if (ts == NULL || raw == NULL) {
    free(ts);
    free(raw);
    throw_status(env, HURRAY_ERR_OUT_OF_MEMORY, op, "no memory for the tensor list");
    return NULL;
  }
  (*env)->GetLongArrayRegion(env, tensors, 0, n, raw);
  for (jsize i = 0; i < n; ++i) ts[i] = (void *)(intptr_t)raw[i];
  free(raw);
  batch_out b;
  if (!batch_out_new(env, n, op, &b)) {
    free(ts);
    return NULL;
  }
  size_t failed = HURRAY_BATCH_NO_INDEX;
  int32_t st =
      versioned ? hurray_from_dlpack_versioned_n((DLManagedTensorVersioned *const *)ts, (size_t)n,
                                                 HURRAY_IMPORT_DEFAULT, b.out, &failed)
                : hurray_from_dlpack_n((DLManagedTensor *const *)ts, (size_t)n,
                                       HURRAY_IMPORT_DEFAULT, b.out, &failed);
  free(ts);
  if (st != HURRAY_OK) {
    throw_status_at(env, st, op, hurray_last_error(), java_index(failed));
    batch_out_drop(&b, n);
    return NULL;
  }
  return batch_out_done(env, &b, n);
}

/* n handles in one call (hurray_to_dlpack[_versioned]_n), all or nothing.
 * The call runs on copies of the handles; on success each handle struct is
 * emptied (still allocated: Native.release frees it), on failure none is
 * touched. */
JNIEXPORT jlongArray JNICALL Java_dev_hurray_Native_toDLPackN(JNIEnv *env, jclass c,
                                                              jlongArray handles,
                                                              jboolean versioned) {
  (void)c;
  const char *op = versioned ? "HurrayBuffer.toDLPackVersionedAll" : "HurrayBuffer.toDLPackAll";
  jsize n = (*env)->GetArrayLength(env, handles);
  jlongArray result = (*env)->NewLongArray(env, n);
  if (result == NULL) return NULL; /* OutOfMemoryError pending */
  jlong *hs = calloc((size_t)n + 1, sizeof *hs);
  hurray_buffer *src = calloc((size_t)n + 1, sizeof *src);
  void **out = calloc((size_t)n + 1, sizeof *out);
  jlong *tensors = calloc((size_t)n + 1, sizeof *tensors);
  if (hs == NULL || src == NULL || out == NULL || tensors == NULL) {
    free(hs);
    free(src);
    free(out);
    free(tensors);
    throw_status(env, HURRAY_ERR_OUT_OF_MEMORY, op, "no memory for the export");
    return NULL;
  }
  (*env)->GetLongArrayRegion(env, handles, 0, n, hs);
  for (jsize i = 0; i < n; ++i) src[i] = *H(hs[i]);
  size_t failed = HURRAY_BATCH_NO_INDEX;
  int32_t st = versioned ? hurray_to_dlpack_versioned_n(src, (size_t)n,
                                                        (DLManagedTensorVersioned **)out, &failed)
                         : hurray_to_dlpack_n(src, (size_t)n, (DLManagedTensor **)out, &failed);
  free(src);
  if (st != HURRAY_OK) {
    throw_status_at(env, st, op, hurray_last_error(), java_index(failed));
  } else {
    for (jsize i = 0; i < n; ++i) {
      memset(H(hs[i]), 0, sizeof(hurray_buffer)); /* moved into tensor i */
      tensors[i] = J(out[i]);
    }
    (*env)->SetLongArrayRegion(env, result, 0, n, tensors);
  }
  free(hs);
  free(out);
  free(tensors);
  return st == HURRAY_OK ? result : NULL;
}

/* A group of n CPU tensors (hurray_alloc_group). enc holds, per
 * description: the dtype packed as code | bits << 8 | lanes << 16, the
 * handle flags, ndim, then ndim extents (HurrayBuffer.allocateGroup checks
 * the layout). */
JNIEXPORT jlongArray JNICALL Java_dev_hurray_Native_allocGroup(JNIEnv *env, jclass c,
                                                               jlongArray enc_array, jint n,
                                                               jboolean shareable) {
  (void)c;
  const char *op = "HurrayBuffer.allocateGroup";
  jsize len = (*env)->GetArrayLength(env, enc_array);
  int64_t *enc = calloc((size_t)len + 1, sizeof *enc);
  hurray_tensor_desc *d = calloc((size_t)n + 1, sizeof *d);
  if (enc == NULL || d == NULL) {
    free(enc);
    free(d);
    throw_status(env, HURRAY_ERR_OUT_OF_MEMORY, op, "no memory for the descriptions");
    return NULL;
  }
  (*env)->GetLongArrayRegion(env, enc_array, 0, len, (jlong *)enc);
  size_t at = 0;
  for (jint k = 0; k < n; ++k) {
    if ((size_t)len - at < 3 || enc[at + 2] < 0 || (uint64_t)enc[at + 2] > (size_t)len - at - 3) {
      free(enc);
      free(d);
      throw_status_at(env, HURRAY_ERR_INTERNAL, op, "malformed group encoding", k);
      return NULL;
    }
    const uint64_t dt = (uint64_t)enc[at];
    d[k].dtype.code = (uint8_t)dt;
    d[k].dtype.bits = (uint8_t)(dt >> 8);
    d[k].dtype.lanes = (uint16_t)(dt >> 16);
    d[k].flags = (uint64_t)enc[at + 1];
    d[k].ndim = (int32_t)enc[at + 2];
    d[k].shape = d[k].ndim > 0 ? enc + at + 3 : NULL;
    at += 3 + (size_t)enc[at + 2];
  }
  batch_out b;
  if (!batch_out_new(env, n, op, &b)) {
    free(enc);
    free(d);
    return NULL;
  }
  hurray_device cpu = {HURRAY_DEVICE_CPU, 0};
  size_t failed = HURRAY_BATCH_NO_INDEX;
  int32_t st = hurray_alloc_group(cpu, (size_t)n, d, shareable ? HURRAY_ALLOC_SHAREABLE : 0, NULL,
                                  b.out, &failed);
  free(enc);
  free(d);
  if (st != HURRAY_OK) {
    throw_status_at(env, st, op, hurray_last_error(), java_index(failed));
    batch_out_drop(&b, n);
    return NULL;
  }
  return batch_out_done(env, &b, n);
}
