package dev.hurray;

/** The C test producer (bindings/testprod) and the Go interop consumer, through JNI. */
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
