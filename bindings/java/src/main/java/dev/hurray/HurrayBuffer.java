package dev.hurray;

import java.lang.ref.Cleaner;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.concurrent.atomic.AtomicLong;

/**
 * One reference to tensor memory: a libhurray {@code hurray_buffer} handle.
 *
 * <p>{@link #close()} gives the reference back; it is idempotent and safe
 * from any thread, and the C release runs exactly once. {@link #share(int)}
 * makes more HurrayBuffers of the same memory; the memory's own release (a
 * producer's DLPack deleter, the free of {@link #allocate}) runs once, after
 * the last of them is closed, on the thread that closes last. A
 * {@link Cleaner} releases a buffer that became unreachable without being
 * closed: a safety net only, counted by {@link #cleanerReleases()}.
 *
 * <p>Every method is thread-safe. Methods other than {@code close} throw
 * {@link HurrayException} (INVALID_ARGUMENT) once the buffer is closed or
 * handed on. See docs/impl/java.md.
 */
public final class HurrayBuffer implements AutoCloseable {
  private static final Cleaner CLEANER = Cleaner.create();
  private static final AtomicLong CLEANER_RELEASES = new AtomicLong();
  private static final long FLAG_READ_ONLY = 1L;

  /** The native handle; also the Cleaner's action, so it must not refer to the HurrayBuffer. */
  private static final class State implements Runnable {
    private long handle; // guarded by this; 0 once freed
    private boolean closed; // guarded by this; true once close() began

    @Override
    public void run() {
      long h;
      boolean explicit;
      synchronized (this) {
        h = handle;
        handle = 0;
        explicit = closed;
        closed = true;
      }
      if (h != 0) {
        if (!explicit && Native.isLive(h)) {
          CLEANER_RELEASES.incrementAndGet();
        }
        Native.release(h); // outside the lock: the release may run foreign code
      }
    }
  }

  private final State state;
  private final Cleaner.Cleanable cleanable;

  private HurrayBuffer(long handle) {
    state = new State();
    state.handle = handle;
    cleanable = CLEANER.register(this, state);
  }

  /**
   * Takes a C {@code DLManagedTensorVersioned*} from another runtime. On
   * success the new buffer owns it (its deleter runs exactly once, when the
   * last buffer sharing it is closed); on failure the caller still owns it.
   *
   * @param address the tensor's address
   * @return the buffer
   * @throws HurrayException with libhurray's status, e.g. UNSUPPORTED_VERSION
   */
  public static HurrayBuffer fromDLPackVersioned(long address) {
    return new HurrayBuffer(Native.fromDLPackVersioned(address));
  }

  /**
   * {@link #fromDLPackVersioned} for a legacy C {@code DLManagedTensor*}.
   *
   * @param address the tensor's address
   * @return the buffer
   */
  public static HurrayBuffer fromDLPack(long address) {
    return new HurrayBuffer(Native.fromDLPack(address));
  }

  /**
   * Allocates uninitialised CPU memory (compact row-major, 64-byte aligned).
   *
   * @param dtype element type
   * @param shape extents, each &gt;= 0 (copied)
   * @param readOnly sets the READ_ONLY flag
   * @return the buffer; closing it (and its shares) frees the memory
   */
  public static HurrayBuffer allocate(DType dtype, long[] shape, boolean readOnly) {
    return new HurrayBuffer(
        Native.alloc(dtype.code(), dtype.bits(), dtype.lanes(), shape.clone(), readOnly));
  }

  /** Runs a read of the live handle under the lock. */
  private interface Read<T> {
    T apply(long handle);
  }

  private <T> T read(String op, Read<T> f) {
    synchronized (state) {
      if (state.handle == 0 || state.closed) {
        throw closed(op);
      }
      return f.apply(state.handle);
    }
  }

  private static HurrayException closed(String op) {
    return new HurrayException(
        HurrayException.INVALID_ARGUMENT,
        "HURRAY_ERR_INVALID_ARGUMENT",
        "HurrayBuffer." + op + ": the buffer is closed");
  }

  /**
   * Makes {@code n} new buffers of the same memory; this one keeps its own
   * reference. On failure nothing changes: nothing is shared and this buffer
   * keeps its reference. The first allocation that fails ends the call, so
   * an {@code n} too large fails at once.
   *
   * @param n 1 .. Integer.MAX_VALUE - 1
   * @return the new buffers, each to be closed
   * @throws HurrayException INVALID_ARGUMENT for n out of range or a closed
   *     buffer; OUT_OF_MEMORY when the C handles cannot be allocated
   * @throws OutOfMemoryError when the JVM cannot hold n buffers
   */
  public HurrayBuffer[] share(int n) {
    if (n < 1 || n == Integer.MAX_VALUE) {
      throw new HurrayException(
          HurrayException.INVALID_ARGUMENT,
          "HURRAY_ERR_INVALID_ARGUMENT",
          "HurrayBuffer.share: n is " + n + " (must be 1 .. 2147483646)");
    }
    // The JNI side allocates the long[] first: an n the JVM cannot hold
    // fails there, before anything is shared.
    long[] handles = read("share", h -> Native.share(h, n));
    HurrayBuffer[] out = null;
    int made = 0;
    try {
      out = new HurrayBuffer[n];
      for (; made < n; made++) {
        out[made] = new HurrayBuffer(handles[made]);
      }
    } catch (Throwable t) {
      // Could not wrap them all (e.g. OutOfMemoryError): give the new
      // references back so that the memory's release still runs once.
      for (int i = 0; i < made; i++) {
        out[i].close(); // out is not null when made > 0
      }
      for (int i = made; i < n; i++) {
        Native.release(handles[i]);
      }
      throw t;
    }
    return out;
  }

  /** Exports the live handle ({@code Native::toDLPack[Versioned]}); returns the tensor. */
  private interface Export {
    long apply(long handle);
  }

  /**
   * Moves the handle into a tensor and marks this buffer closed in one
   * critical section, so that no other thread sees it open with the empty
   * handle left behind; then frees the handle's struct.
   */
  private long handOn(String op, Export f) {
    long t;
    synchronized (state) {
      if (state.handle == 0 || state.closed) {
        throw closed(op);
      }
      t = f.apply(state.handle); // throws (and changes nothing) on failure
      state.closed = true;
    }
    cleanable.clean(); // the handle is empty now: this only frees its struct
    return t;
  }

  /**
   * Hands this buffer's reference on as a C {@code DLManagedTensorVersioned*}
   * for another runtime: on success this buffer is closed (atomically: no
   * thread sees it open afterwards) and the caller owns the tensor (call its
   * deleter once). To keep using the memory here, share first and export a
   * share. On failure nothing changes.
   *
   * @return the tensor's address
   */
  public long toDLPackVersioned() {
    return handOn("toDLPackVersioned", Native::toDLPackVersioned);
  }

  /**
   * {@link #toDLPackVersioned} as a legacy {@code DLManagedTensor*} (flags,
   * READ_ONLY included, are dropped: prefer the versioned form).
   *
   * @return the tensor's address
   */
  public long toDLPack() {
    return handOn("toDLPack", Native::toDLPack);
  }

  /** @return a copy of the extents */
  public long[] shape() {
    return read("shape", Native::shape);
  }

  /** @return a copy of the strides, in elements */
  public long[] strides() {
    return read("strides", Native::strides);
  }

  /** @return the element type */
  public DType dtype() {
    int d = read("dtype", Native::dtype);
    return new DType(d & 0xff, (d >>> 8) & 0xff, (d >>> 16) & 0xffff);
  }

  /** @return where the memory is */
  public Device device() {
    long d = read("device", Native::device);
    return new Device((int) (d >> 32), (int) d);
  }

  /** @return whether the memory must not be written (flag READ_ONLY) */
  public boolean readOnly() {
    return (read("readOnly", Native::flags) & FLAG_READ_ONLY) != 0;
  }

  /** @return whether this buffer still holds its reference */
  public boolean isOpen() {
    synchronized (state) {
      return state.handle != 0 && !state.closed;
    }
  }

  /**
   * A direct ByteBuffer over the bytes the tensor spans, in native byte
   * order, without a copy; read-only when the buffer is. Host memory only
   * (CPU and pinned host). It is valid only while this buffer is open: do
   * not use it after {@code close} or after handing the buffer on, and keep
   * the HurrayBuffer reachable while the view is in use (try-with-resources,
   * or {@link java.lang.ref.Reference#reachabilityFence}), since the Cleaner
   * would otherwise release the memory under it.
   *
   * @return the view
   * @throws HurrayException UNSUPPORTED_DEVICE for device memory
   */
  public ByteBuffer asByteBuffer() {
    return read(
        "asByteBuffer",
        h -> {
          ByteBuffer b = Native.byteBuffer(h);
          if ((Native.flags(h) & FLAG_READ_ONLY) != 0) {
            b = b.asReadOnlyBuffer();
          }
          return b.order(ByteOrder.nativeOrder());
        });
  }

  /**
   * Gives the reference back. The first call releases (on this thread);
   * later calls do nothing.
   */
  @Override
  public void close() {
    synchronized (state) {
      if (state.closed) {
        return;
      }
      state.closed = true;
    }
    cleanable.clean();
  }

  /** @return how many buffers the Cleaner released because they were never closed */
  public static long cleanerReleases() {
    return CLEANER_RELEASES.get();
  }

  /**
   * A DLPack element type.
   *
   * @param code DLDataTypeCode (0 int, 1 uint, 2 float, ...)
   * @param bits bits of one lane
   * @param lanes vector width, 1 for scalars
   */
  public record DType(int code, int bits, int lanes) {
    /** float32. */
    public static final DType FLOAT32 = new DType(2, 32, 1);
    /** uint8. */
    public static final DType UINT8 = new DType(1, 8, 1);
    /** int64. */
    public static final DType INT64 = new DType(0, 64, 1);
  }

  /**
   * Where memory is.
   *
   * @param type DLPack device type (1 = CPU, 2 = CUDA, ...)
   * @param id device ordinal
   */
  public record Device(int type, int id) {
    /** kDLCPU. */
    public static final int CPU = 1;
  }
}
