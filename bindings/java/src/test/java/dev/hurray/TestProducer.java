// SPDX-License-Identifier: Apache-2.0
package dev.hurray;

/** The C test producer (tests/dlpack_producer) and the Go interop consumer, through JNI. */
final class TestProducer {
  static {
    System.load(System.getProperty("hurray.testprod.library"));
  }

  private TestProducer() {}

  static native void reset();

  static native long makeVersioned(long[] shape, float start, long flags);

  static native long makeLegacy(long[] shape, float start);

  static native long makeVersionedMajor(int major);

  static native long deleterCalls();

  static native void noteRelease();

  static native long notesAtDelete();

  static native void deleteVersioned(long tensor);

  /** The address of a versioned tensor's first byte (data + byte_offset). */
  static native long firstByte(long tensor);

  /**
   * Every field of a DLManagedTensorVersioned, read in C (the tensor is only
   * read): {major, minor, flags, device type, device id, dtype code, bits,
   * lanes, byte_offset, ndim, shape NULL (1/0), strides NULL, deleter NULL,
   * data NULL, shape..., strides...}.
   */
  static native long[] describeVersioned(long tensor);

  /**
   * libhurray's checking-mode counters {options, live, tracked,
   * double_releases} (hurray_check_get_state), from the libhurray file
   * {@code lib} this JVM loaded.
   */
  static native long[] checkState(String lib);

  /** Sums a float32 tensor in C, then calls its deleter. */
  static native double consumeVersioned(long tensor);

  static native double consumeLegacy(long tensor);

  /**
   * Hands a DLManagedTensorVersioned to the Go consumer library (loaded once
   * from goLib): it imports it, shares it to n Buffers and releases them on n
   * goroutines, without waiting. Returns the sum Go read.
   */
  static native double goConsume(String goLib, long tensor, int n);

  /** Waits until the Go consumer's goroutines have released. */
  static native void goWait();
}
