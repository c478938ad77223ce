package dev.hurray;

/**
 * The JNI entry points (libhurray_jni.so). Handles are addresses of
 * hurray_buffer structs that the JNI library allocated; each is freed by
 * {@link #release} only. Loading: the system property {@code hurray.library}
 * names a libhurray file to load first (else the dynamic linker finds it by
 * its SONAME, e.g. through LD_LIBRARY_PATH); {@code hurray.jni.library}
 * names the JNI library file (else it is looked up as "hurray_jni" on
 * java.library.path).
 */
final class Native {
  static {
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
  }

  private Native() {}

  static native long fromDLPackVersioned(long tensor);

  static native long fromDLPack(long tensor);

  static native long alloc(int code, int bits, int lanes, long[] shape, boolean readOnly);

  /** n new handles; h keeps its own reference. */
  static native long[] share(long h, int n);

  /** Moves the handle into a new tensor; h is left empty (still allocated). */
  static native long toDLPackVersioned(long h);

  static native long toDLPack(long h);

  /** Releases the handle (if live) and frees its struct. */
  static native void release(long h);

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
