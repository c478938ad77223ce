// SPDX-License-Identifier: Apache-2.0
package dev.hurray;

/**
 * The JNI entry points (libhurray_jni.so). Handles are addresses of
 * hurray_buffer structs that the JNI library allocated; each is freed by
 * {@link #release} only.
 *
 * <p>Loading, once, when this class is initialised: the system property
 * {@code hurray.library} names a libhurray file to load first (optional:
 * else the dynamic linker finds libhurray by its SONAME, first through the
 * JNI library's RUNPATH {@code $ORIGIN:$ORIGIN/../lib}, i.e. next to it or
 * in the {@code lib/} of an install prefix, then LD_LIBRARY_PATH and the
 * system paths); {@code hurray.jni.library} names the JNI library file (else
 * it is looked up as "hurray_jni" on java.library.path).
 *
 * <p>A failed load does not fail this class's initialisation (which would
 * leave every later use with a bare "NoClassDefFoundError: Could not
 * initialize class"): the first error is kept, and {@link #ensureLoaded}
 * reports it, as the cause, on every use.
 */
final class Native {
  /** The error the load failed with; null when both libraries loaded. */
  private static final Throwable LOAD_FAILURE = load();

  private static Throwable load() {
    try {
      String lib = System.getProperty("hurray.library");
      if (lib != null && !lib.isEmpty()) {
        System.load(lib);
      }
      String jni = System.getProperty("hurray.jni.library");
      if (jni != null && !jni.isEmpty()) {
        System.load(jni);
      } else {
        System.loadLibrary("hurray_jni");
      }
      return null;
    } catch (LinkageError | SecurityException e) {
      return e;
    }
  }

  private Native() {}

  /**
   * Checks that the native libraries are loaded. Any thread; cheap (a static
   * final read).
   *
   * @throws UnsatisfiedLinkError a new one on each call, naming the first
   *     load error and carrying it as its cause
   */
  static void ensureLoaded() {
    Throwable t = LOAD_FAILURE;
    if (t != null) {
      UnsatisfiedLinkError e =
          new UnsatisfiedLinkError("dev.hurray: the native libraries failed to load: " + t);
      e.initCause(t);
      throw e;
    }
  }

  static native long fromDLPackVersioned(long tensor);

  static native long fromDLPack(long tensor);

  static native long alloc(int code, int bits, int lanes, long[] shape, boolean readOnly);

  /** n tensors imported in one call, all or nothing; n new handles. */
  static native long[] fromDLPackN(long[] tensors, boolean versioned);

  /**
   * n handles moved into n tensors in one call, all or nothing; on success
   * every handle is left empty (still allocated).
   */
  static native long[] toDLPackN(long[] handles, boolean versioned);

  /** A group of n CPU tensors (hurray_alloc_group); enc as hurray_jni.c describes it. */
  static native long[] allocGroup(long[] enc, int n, boolean shareable);

  /** n new handles; h keeps its own reference. */
  static native long[] share(long h, int n);

  /** One new handle (share(h, 1) without the array); h keeps its own reference. */
  static native long share1(long h);

  /** A new empty (all-zero) handle struct, for a reusable buffer. */
  static native long newEmpty();

  /** One more reference of src written into dst, an allocated empty handle. */
  static native void shareInto(long src, long dst);

  /** Moves the handle into a new tensor; h is left empty (still allocated). */
  static native long toDLPackVersioned(long h);

  static native long toDLPack(long h);

  /**
   * Releases the handle (if live) and frees its struct.
   *
   * @return whether it was live (a release ran)
   */
  static native boolean release(long h);

  /**
   * Releases the handle (if live) and keeps its struct allocated, empty.
   *
   * @return whether it was live (a release ran)
   */
  static native boolean releaseKeep(long h);

  static native boolean isLive(long h);

  static native long[] shape(long h);

  static native long[] strides(long h);

  /** code | bits << 8 | lanes << 16. */
  static native int dtype(long h);

  /** device_type << 32 | device_id. */
  static native long device(long h);

  static native long flags(long h);

  /** A direct ByteBuffer over the bytes the tensor spans (host memory only). */
  static native java.nio.ByteBuffer byteBuffer(long h);
}
