// SPDX-License-Identifier: Apache-2.0
package dev.hurray;

import java.lang.ref.Cleaner;
import java.lang.ref.Reference;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;
import java.util.Arrays;
import java.util.IdentityHashMap;
import java.util.List;
import java.util.Map;
import java.util.Objects;
import java.util.concurrent.atomic.AtomicLong;
import java.util.function.Consumer;
import java.util.function.Function;

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
 * <p>Memory access: {@link #withBytes} and {@link #mapBytes} run code on a
 * view while the buffer is kept open (a concurrent {@code close} waits);
 * the checked accessors ({@link #getFloat(long)}, {@link #putFloat(long,
 * float)}, ...) check liveness and bounds on every call. {@link
 * #asByteBuffer()} is the raw, unchecked view (see its rule).
 *
 * <p>Every method is thread-safe. Once the buffer is closed or handed on,
 * methods other than {@code close} and {@code isOpen} throw
 * {@link IllegalStateException}; bad arguments throw
 * {@link IllegalArgumentException}; {@link HurrayException} is a status
 * libhurray returned. See docs/impl/java.md.
 */
public final class HurrayBuffer implements AutoCloseable {
  private static final Cleaner CLEANER = Cleaner.create();
  private static final AtomicLong CLEANER_RELEASES = new AtomicLong();
  private static final AtomicLong REUSABLE_ORDER = new AtomicLong(); // lock order of reusable buffers
  private static final long FLAG_READ_ONLY = 1L;
  /** Taken by every batched export, so that at most one holds several order-0 monitors. */
  private static final Object BATCH_LOCK = new Object();

  /**
   * The byte alignment of every tensor of a group ({@link #allocateGroup};
   * hurray.h HURRAY_GROUP_ALIGNMENT).
   */
  public static final int GROUP_ALIGNMENT = 256;

  /**
   * The native handle and the scopes using it; also the Cleaner's action, so
   * it must not refer to the HurrayBuffer. Its monitor guards every field.
   */
  private static final class State implements Runnable {
    private long handle; // 0 once freed
    private boolean closed; // true once close() or an export began
    private int scopes; // withBytes/mapBytes calls running
    private Thread[] scopeThreads = new Thread[0]; // their threads, one entry per call
    private boolean releaseAtScopeEnd; // close() was called inside this thread's own scope
    private ByteBuffer view; // the checked accessors' view, made on first use
    // Set (under the monitor) when close() took the handle itself; read by
    // run() without the lock only to skip it: close() calls run() on its own
    // thread (through clean()), which sees the write in program order; on
    // the Cleaner's thread a stale false just takes the locked path below.
    private boolean takenByClose;
    // A reusable buffer (reusable()): handle is its C struct for its whole
    // life, empty while closed, filled by shareInto; close() releases into
    // it and keeps it. order > 0 ranks its monitor for shareInto's two
    // locks (every other buffer is 0 and never the second of two).
    private final boolean reusable;
    private final long order;

    State(boolean reusable) {
      this.reusable = reusable;
      this.order = reusable ? REUSABLE_ORDER.incrementAndGet() : 0;
    }

    @Override
    public void run() {
      if (takenByClose) {
        return;
      }
      long h;
      boolean explicit;
      synchronized (this) {
        h = handle;
        handle = 0;
        view = null;
        explicit = closed;
        closed = true;
      }
      if (h != 0) {
        // outside the lock: the release may run foreign code
        if (Native.release(h) && !explicit) {
          CLEANER_RELEASES.incrementAndGet();
        }
      }
    }
  }

  private final State state;
  private final Cleaner.Cleanable cleanable;

  private HurrayBuffer(long handle) {
    this(handle, false);
  }

  private HurrayBuffer(long handle, boolean reusable) {
    state = new State(reusable);
    state.handle = handle;
    state.closed = reusable; // a reusable buffer starts empty
    cleanable = CLEANER.register(this, state);
  }

  /**
   * A buffer that holds nothing yet ({@link #isOpen()} is false) for
   * {@link #shareInto} to fill again and again: its C handle and its
   * Cleaner registration are made once, here, so a {@code shareInto} +
   * {@code close} pair allocates nothing and registers nothing (the fast
   * path for loops; docs/performance.md, Java). Closing it releases the
   * reference it holds and leaves it reusable; the Cleaner releases what it
   * holds when it becomes unreachable.
   *
   * @return the empty buffer
   * @throws HurrayException OUT_OF_MEMORY when the C handle cannot be allocated
   * @throws UnsatisfiedLinkError the native libraries failed to load
   */
  public static HurrayBuffer reusable() {
    Native.ensureLoaded();
    return new HurrayBuffer(Native.newEmpty(), true);
  }

  /**
   * {@link #share()} into {@code dst}, a {@link #reusable()} buffer that
   * holds nothing (new, closed, or handed on): {@code dst} gets a new
   * reference to this memory, to be closed as any buffer, and stays
   * reusable. No allocation. On failure nothing changes.
   *
   * @param dst an empty reusable buffer other than this one
   * @throws NullPointerException dst is null
   * @throws IllegalArgumentException dst is not from {@link #reusable()}, is
   *     this buffer, or still holds a reference
   * @throws IllegalStateException this buffer is closed
   * @throws HurrayException libhurray's status
   */
  public void shareInto(HurrayBuffer dst) {
    Objects.requireNonNull(dst, "HurrayBuffer.shareInto: dst is null");
    State d = dst.state;
    if (!d.reusable || d == state) {
      throw new IllegalArgumentException(
          "HurrayBuffer.shareInto: dst must be another buffer made by HurrayBuffer.reusable()");
    }
    State first = state.order < d.order ? state : d;
    State second = first == state ? d : state;
    synchronized (first) {
      synchronized (second) {
        long h = live("shareInto");
        if (!d.closed || d.releaseAtScopeEnd) {
          throw new IllegalArgumentException("HurrayBuffer.shareInto: dst still holds a reference");
        }
        Native.shareInto(h, d.handle); // throws, changing nothing
        d.view = null;
        d.closed = false;
      }
    }
    Reference.reachabilityFence(dst);
  }

  /**
   * Takes a C {@code DLManagedTensorVersioned*} from another runtime. On
   * success the new buffer owns it (its deleter runs exactly once, when the
   * last buffer sharing it is closed); on failure the caller still owns it.
   *
   * @param address the tensor's address
   * @return the buffer
   * @throws HurrayException with libhurray's status, e.g. UNSUPPORTED_VERSION
   * @throws UnsatisfiedLinkError the native libraries failed to load (the
   *     first load error is the cause, on every call)
   */
  public static HurrayBuffer fromDLPackVersioned(long address) {
    Native.ensureLoaded();
    return new HurrayBuffer(Native.fromDLPackVersioned(address));
  }

  /**
   * {@link #fromDLPackVersioned} for a legacy C {@code DLManagedTensor*}.
   *
   * @param address the tensor's address
   * @return the buffer
   * @throws HurrayException with libhurray's status
   * @throws UnsatisfiedLinkError the native libraries failed to load
   */
  public static HurrayBuffer fromDLPack(long address) {
    Native.ensureLoaded();
    return new HurrayBuffer(Native.fromDLPack(address));
  }

  /**
   * Allocates uninitialised CPU memory (compact row-major, 64-byte aligned).
   *
   * @param dtype element type; code and bits 0..255, lanes 0..65535
   * @param shape extents (copied), at most 64 of them, each &gt;= 0
   * @param readOnly sets the READ_ONLY flag
   * @return the buffer; closing it (and its shares) frees the memory
   * @throws NullPointerException dtype or shape is null (a 0-d tensor's shape is
   *     {@code new long[0]})
   * @throws IllegalArgumentException dtype fields out of range, more than 64 extents
   * @throws HurrayException libhurray's status, e.g. INVALID_ARGUMENT for a
   *     negative extent, OVERFLOW, OUT_OF_MEMORY
   * @throws UnsatisfiedLinkError the native libraries failed to load
   */
  public static HurrayBuffer allocate(DType dtype, long[] shape, boolean readOnly) {
    Objects.requireNonNull(dtype, "HurrayBuffer.allocate: dtype is null");
    Objects.requireNonNull(shape,
        "HurrayBuffer.allocate: shape is null (a 0-d tensor's shape is new long[0])");
    Native.ensureLoaded();
    if (dtype.code() < 0 || dtype.code() > 255 || dtype.bits() < 0 || dtype.bits() > 255
        || dtype.lanes() < 0 || dtype.lanes() > 65535) {
      throw new IllegalArgumentException(
          "HurrayBuffer.allocate: dtype " + dtype + " out of range (code and bits 0..255, lanes 0..65535)");
    }
    if (shape.length > 64) {
      throw new IllegalArgumentException(
          "HurrayBuffer.allocate: " + shape.length + " extents (HURRAY_MAX_NDIM is 64)");
    }
    return new HurrayBuffer(
        Native.alloc(dtype.code(), dtype.bits(), dtype.lanes(), shape.clone(), readOnly));
  }

  /**
   * Takes n C {@code DLManagedTensorVersioned*} from another runtime in one
   * call, all or nothing: on success buffer i owns {@code tensors[i]} (its
   * deleter runs exactly once, when the last buffer sharing it is closed);
   * on failure the caller still owns every tensor (nothing was called on
   * any) and the exception's {@link HurrayException#index()} is the first
   * tensor at fault, which its message names ({@code ts[1]}). Each tensor
   * is checked as {@link #fromDLPackVersioned} checks one; they must be
   * distinct. Each buffer is closed on its own, in any order, on any
   * thread. Should the JVM fail to make the buffers after the import (an
   * {@link OutOfMemoryError}), the tensors taken are released before the
   * error propagates.
   *
   * @param tensors the tensors' addresses (read, not kept)
   * @return an unmodifiable list of the buffers, in the tensors' order
   *     (empty for no tensors)
   * @throws NullPointerException tensors is null
   * @throws HurrayException libhurray's status, e.g. INVALID_ARGUMENT for a
   *     0 address, UNSUPPORTED_VERSION, with {@code index()}
   * @throws UnsatisfiedLinkError the native libraries failed to load
   */
  public static List<HurrayBuffer> fromDLPackVersionedAll(long... tensors) {
    return importAll(tensors, true);
  }

  /**
   * {@link #fromDLPackVersionedAll} for legacy C {@code DLManagedTensor*}.
   *
   * @param tensors the tensors' addresses (read, not kept)
   * @return an unmodifiable list of the buffers
   * @throws NullPointerException tensors is null
   * @throws HurrayException libhurray's status, with {@code index()}
   * @throws UnsatisfiedLinkError the native libraries failed to load
   */
  public static List<HurrayBuffer> fromDLPackAll(long... tensors) {
    return importAll(tensors, false);
  }

  private static List<HurrayBuffer> importAll(long[] tensors, boolean versioned) {
    Objects.requireNonNull(tensors, "HurrayBuffer.fromDLPackAll: tensors is null");
    Native.ensureLoaded();
    if (tensors.length == 0) {
      return List.of();
    }
    return wrapAll(Native.fromDLPackN(tensors.clone(), versioned));
  }

  /** Buffers for new handles; if the JVM cannot make them all, every handle goes back. */
  private static List<HurrayBuffer> wrapAll(long[] handles) {
    HurrayBuffer[] out = null;
    int made = 0;
    try {
      out = new HurrayBuffer[handles.length];
      for (; made < handles.length; made++) {
        out[made] = new HurrayBuffer(handles[made]);
      }
    } catch (Throwable t) {
      for (int i = 0; i < made; i++) {
        out[i].close(); // out is not null when made > 0
      }
      for (int i = made; i < handles.length; i++) {
        Native.release(handles[i]);
      }
      throw t;
    }
    return List.of(out);
  }

  /**
   * Hands n buffers on as n C {@code DLManagedTensorVersioned*} in one call,
   * all or nothing: on success every buffer is closed (atomically, as
   * {@link #toDLPackVersioned} closes one) and element i of the result is
   * {@code buffers.get(i)}'s tensor, now the caller's (call each deleter
   * once); on failure every buffer is unchanged. Waits for other threads'
   * running {@link #withBytes} scopes of the buffers to end, holding none of
   * them while it waits. While it runs it holds the lock of every buffer in
   * the list at once (nested: a list of many thousands of buffers may need
   * a larger thread stack; a {@link StackOverflowError} there changes
   * nothing).
   *
   * @param buffers distinct open buffers (read, not kept)
   * @return the tensors' addresses, in the buffers' order (empty for none)
   * @throws NullPointerException buffers or one of them is null (the
   *     message names its index)
   * @throws IllegalArgumentException a buffer is listed twice ("buffers[2]
   *     is buffers[0] again")
   * @throws IllegalStateException a buffer is closed ("buffers[2] is
   *     closed"), or one runs a scope on this thread
   * @throws HurrayException libhurray's status, with {@link HurrayException#index()}
   */
  public static long[] toDLPackVersionedAll(List<HurrayBuffer> buffers) {
    return exportAll(buffers, true, "toDLPackVersionedAll");
  }

  /**
   * {@link #toDLPackVersionedAll} as legacy {@code DLManagedTensor*} (flags,
   * READ_ONLY included, are dropped).
   *
   * @param buffers distinct open buffers
   * @return the tensors' addresses, in the buffers' order
   * @throws NullPointerException buffers or one of them is null
   * @throws IllegalArgumentException a buffer is listed twice
   * @throws IllegalStateException a buffer is closed, or runs a scope on this thread
   * @throws HurrayException libhurray's status, with {@link HurrayException#index()}
   */
  public static long[] toDLPackAll(List<HurrayBuffer> buffers) {
    return exportAll(buffers, false, "toDLPackAll");
  }

  private static long[] exportAll(List<HurrayBuffer> buffers, boolean versioned, String op) {
    Objects.requireNonNull(buffers, "HurrayBuffer." + op + ": buffers is null");
    HurrayBuffer[] bs = buffers.toArray(new HurrayBuffer[0]);
    Map<HurrayBuffer, Integer> seen = new IdentityHashMap<>();
    for (int i = 0; i < bs.length; i++) {
      if (bs[i] == null) {
        throw new NullPointerException("HurrayBuffer." + op + ": buffers[" + i + "] is null");
      }
      Integer j = seen.putIfAbsent(bs[i], i);
      if (j != null) {
        throw new IllegalArgumentException("HurrayBuffer." + op + ": buffers[" + i
            + "] is buffers[" + j + "] again (each buffer once)");
      }
    }
    if (bs.length == 0) {
      return new long[0];
    }
    // Monitors in the order shareInto takes its two in (order, then any
    // order among the order-0 ones, which only a batch holds several of,
    // under BATCH_LOCK): no cycle with any other lock holder.
    State[] sorted = new State[bs.length];
    for (int i = 0; i < bs.length; i++) {
      sorted[i] = bs[i].state;
    }
    Arrays.sort(sorted, (a, b) -> Long.compare(a.order, b.order));
    while (true) {
      Object r;
      synchronized (BATCH_LOCK) {
        r = exportLocked(op, versioned, bs, sorted, 0);
      }
      if (r instanceof long[] tensors) {
        for (HurrayBuffer b : bs) {
          if (!b.state.reusable) {
            b.cleanable.clean(); // the handle is empty now: this only frees its struct
          }
          Reference.reachabilityFence(b);
        }
        return tensors;
      }
      awaitNoScopes((State) r); // holding nothing, then try again
    }
  }

  /**
   * With the monitors sorted[k..] still to take: takes them, then (all
   * held) exports every buffer, or returns the State of one that runs a
   * scope on another thread (nothing changed) for the caller to wait for.
   */
  private static Object exportLocked(
      String op, boolean versioned, HurrayBuffer[] bs, State[] sorted, int k) {
    if (k < sorted.length) {
      synchronized (sorted[k]) {
        return exportLocked(op, versioned, bs, sorted, k + 1);
      }
    }
    Thread me = Thread.currentThread();
    long[] hs = new long[bs.length];
    for (int i = 0; i < bs.length; i++) {
      State st = bs[i].state;
      if (st.handle == 0 || st.closed) {
        throw new IllegalStateException("HurrayBuffer." + op + ": buffers[" + i + "] is closed");
      }
      if (st.scopes > 0) {
        if (bs[i].inOwnScope(me)) {
          throw new IllegalStateException("HurrayBuffer." + op + ": buffers[" + i
              + "] is in a withBytes scope of this thread");
        }
        return st;
      }
      hs[i] = st.handle;
    }
    long[] tensors = Native.toDLPackN(hs, versioned); // throws, changing nothing
    for (HurrayBuffer b : bs) {
      b.state.closed = true;
      b.state.view = null;
    }
    return tensors;
  }

  /** Waits (uninterruptibly) until st runs no scope; holds only st's monitor. */
  private static void awaitNoScopes(State st) {
    boolean interrupted = false;
    synchronized (st) {
      while (st.scopes > 0) {
        try {
          st.wait();
        } catch (InterruptedException e) {
          interrupted = true;
        }
      }
    }
    if (interrupted) {
      Thread.currentThread().interrupt();
    }
  }

  /**
   * One tensor of a group ({@link #allocateGroup}): compact row-major, of
   * {@code dtype} and {@code shape}.
   *
   * @param dtype element type; code and bits 0..255, lanes 0..65535
   * @param shape extents, at most 64 of them (copied; {@code new long[0]}
   *     for a 0-d tensor)
   * @param readOnly sets the READ_ONLY flag
   */
  public record TensorDesc(DType dtype, long[] shape, boolean readOnly) {
    /**
     * Copies the shape.
     *
     * @throws NullPointerException dtype or shape is null
     */
    public TensorDesc {
      Objects.requireNonNull(dtype, "TensorDesc: dtype is null");
      shape = Objects.requireNonNull(shape, "TensorDesc: shape is null").clone();
    }

    /** @return a copy of the extents */
    @Override
    public long[] shape() {
      return shape.clone();
    }
  }

  /**
   * Allocates uninitialised CPU memory for n tensors in one allocation (a
   * tensor group, hurray_alloc_group): buffer i is {@code descs.get(i)}'s
   * tensor, at an address that is a multiple of {@link #GROUP_ALIGNMENT},
   * after tensor i - 1 (a tensor without elements takes no bytes). Each
   * buffer is closed on its own, in any order, on any thread, and may be
   * shared or handed on as any buffer; the memory is freed once, after the
   * last of them (and of their shares and tensors) is released.
   * {@code shareable} asks for memory another process can map (an anonymous
   * memfd, HURRAY_ALLOC_SHAREABLE), so the group crosses processes as one
   * allocation. On failure nothing stays allocated.
   *
   * @param descs the tensors (read, not kept)
   * @param shareable one memfd for the whole group
   * @return an unmodifiable list of the buffers (empty for no descriptions)
   * @throws NullPointerException descs or one of them is null (the message
   *     names its index)
   * @throws IllegalArgumentException a dtype field out of range or more than
   *     64 extents (the message names the index)
   * @throws HurrayException libhurray's status (INVALID_ARGUMENT for a
   *     negative extent, UNSUPPORTED_DTYPE, OVERFLOW, OUT_OF_MEMORY), with
   *     {@link HurrayException#index()} the description at fault or -1
   * @throws UnsatisfiedLinkError the native libraries failed to load
   */
  public static List<HurrayBuffer> allocateGroup(List<TensorDesc> descs, boolean shareable) {
    Objects.requireNonNull(descs, "HurrayBuffer.allocateGroup: descs is null");
    TensorDesc[] ds = descs.toArray(new TensorDesc[0]);
    Native.ensureLoaded();
    int size = 0;
    for (int i = 0; i < ds.length; i++) {
      TensorDesc d = ds[i];
      if (d == null) {
        throw new NullPointerException("HurrayBuffer.allocateGroup: descs[" + i + "] is null");
      }
      DType t = d.dtype();
      if (t.code() < 0 || t.code() > 255 || t.bits() < 0 || t.bits() > 255 || t.lanes() < 0
          || t.lanes() > 65535) {
        throw new IllegalArgumentException("HurrayBuffer.allocateGroup: descs[" + i + "].dtype "
            + t + " out of range (code and bits 0..255, lanes 0..65535)");
      }
      if (d.shape.length > 64) {
        throw new IllegalArgumentException("HurrayBuffer.allocateGroup: descs[" + i + "] has "
            + d.shape.length + " extents (HURRAY_MAX_NDIM is 64)");
      }
      size += 3 + d.shape.length;
    }
    if (ds.length == 0) {
      return List.of();
    }
    long[] enc = new long[size];
    int at = 0;
    for (TensorDesc d : ds) {
      DType t = d.dtype();
      enc[at++] = t.code() | (long) t.bits() << 8 | (long) t.lanes() << 16;
      enc[at++] = d.readOnly() ? FLAG_READ_ONLY : 0;
      enc[at++] = d.shape.length;
      System.arraycopy(d.shape, 0, enc, at, d.shape.length);
      at += d.shape.length;
    }
    return wrapAll(Native.allocGroup(enc, ds.length, shareable));
  }

  /**
   * Closes every buffer of {@code buffers} ({@link #close()}, which never
   * throws): for the lists {@link #allocateGroup} and the batched imports
   * return, e.g. in a {@code finally}.
   *
   * @param buffers the buffers; null elements are skipped
   * @throws NullPointerException buffers is null
   */
  public static void closeAll(Iterable<? extends HurrayBuffer> buffers) {
    for (HurrayBuffer b : buffers) {
      if (b != null) {
        b.close();
      }
    }
  }

  /** The live handle; the caller holds the monitor of state. */
  private long live(String op) {
    if (state.handle == 0 || state.closed) {
      throw new IllegalStateException("HurrayBuffer." + op + ": the buffer is closed");
    }
    return state.handle;
  }

  /**
   * Makes {@code n} new buffers of the same memory; this one keeps its own
   * reference. On failure nothing changes: nothing is shared and this buffer
   * keeps its reference. The first allocation that fails ends the call, so
   * an {@code n} too large fails at once.
   *
   * @param n 1 .. Integer.MAX_VALUE - 1
   * @return the new buffers, each to be closed
   * @throws IllegalArgumentException n out of range
   * @throws IllegalStateException this buffer is closed
   * @throws HurrayException OUT_OF_MEMORY when the C handles cannot be
   *     allocated, or another libhurray status
   * @throws OutOfMemoryError when the JVM cannot hold n buffers
   */
  public HurrayBuffer[] share(int n) {
    if (n < 1 || n == Integer.MAX_VALUE) {
      throw new IllegalArgumentException(
          "HurrayBuffer.share: n is " + n + " (must be 1 .. 2147483646)");
    }
    if (n == 1) {
      return new HurrayBuffer[] {share()};
    }
    // The JNI side allocates the long[] first: an n the JVM cannot hold
    // fails there, before anything is shared.
    long[] handles;
    synchronized (state) {
      handles = Native.share(live("share"), n);
    }
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

  /**
   * One new buffer of the same memory ({@code share(1)[0]} without the
   * array; the fast path); this one keeps its own reference. On failure
   * nothing changes.
   *
   * @return the new buffer, to be closed
   * @throws IllegalStateException this buffer is closed
   * @throws HurrayException OUT_OF_MEMORY, or another libhurray status
   */
  public HurrayBuffer share() {
    long h;
    synchronized (state) {
      h = Native.share1(live("share"));
    }
    try {
      return new HurrayBuffer(h);
    } catch (Throwable t) {
      Native.release(h); // could not wrap it: give the reference back
      throw t;
    }
  }

  /**
   * Moves the handle into a tensor and marks this buffer closed in one
   * critical section, so that no other thread sees it open with the empty
   * handle left behind; then frees the handle's struct. Waits, like close,
   * for running scopes of other threads; refused inside this thread's own.
   */
  private long handOn(String op, boolean versioned) {
    long t;
    synchronized (state) {
      live(op);
      awaitScopes(op);
      long h = live(op); // may have been closed while waiting
      t = versioned ? Native.toDLPackVersioned(h) : Native.toDLPack(h); // throws, changing nothing
      state.closed = true;
    }
    if (!state.reusable) {
      cleanable.clean(); // the handle is empty now: this only frees its struct
    }
    return t;
  }

  /**
   * Hands this buffer's reference on as a C {@code DLManagedTensorVersioned*}
   * for another runtime: on success this buffer is closed (atomically: no
   * thread sees it open afterwards) and the caller owns the tensor (call its
   * deleter once). To keep using the memory here, share first and export a
   * share. On failure nothing changes. Waits for other threads' running
   * {@link #withBytes} scopes to end.
   *
   * @return the tensor's address
   * @throws IllegalStateException closed, or called inside this thread's own scope
   * @throws HurrayException libhurray's status
   */
  public long toDLPackVersioned() {
    return handOn("toDLPackVersioned", true);
  }

  /**
   * {@link #toDLPackVersioned} as a legacy {@code DLManagedTensor*} (flags,
   * READ_ONLY included, are dropped: prefer the versioned form).
   *
   * @return the tensor's address
   * @throws IllegalStateException closed, or called inside this thread's own scope
   * @throws HurrayException libhurray's status
   */
  public long toDLPack() {
    return handOn("toDLPack", false);
  }

  /**
   * @return a copy of the extents
   * @throws IllegalStateException closed
   */
  public long[] shape() {
    synchronized (state) {
      return Native.shape(live("shape"));
    }
  }

  /**
   * @return a copy of the strides, in elements
   * @throws IllegalStateException closed
   */
  public long[] strides() {
    synchronized (state) {
      return Native.strides(live("strides"));
    }
  }

  /**
   * @return the element type
   * @throws IllegalStateException closed
   */
  public DType dtype() {
    int d;
    synchronized (state) {
      d = Native.dtype(live("dtype"));
    }
    return new DType(d & 0xff, (d >>> 8) & 0xff, (d >>> 16) & 0xffff);
  }

  /**
   * @return where the memory is
   * @throws IllegalStateException closed
   */
  public Device device() {
    long d;
    synchronized (state) {
      d = Native.device(live("device"));
    }
    return new Device((int) (d >> 32), (int) d);
  }

  /**
   * @return whether the memory must not be written (flag READ_ONLY)
   * @throws IllegalStateException closed
   */
  public boolean readOnly() {
    synchronized (state) {
      return (Native.flags(live("readOnly")) & FLAG_READ_ONLY) != 0;
    }
  }

  /** @return whether this buffer still holds its reference */
  public boolean isOpen() {
    synchronized (state) {
      return state.handle != 0 && !state.closed;
    }
  }

  /** A new view of the live handle h, read-only when the buffer is; the caller holds the monitor. */
  private static ByteBuffer view(long h) {
    ByteBuffer b = Native.byteBuffer(h);
    if ((Native.flags(h) & FLAG_READ_ONLY) != 0) {
      b = b.asReadOnlyBuffer();
    }
    return b.order(ByteOrder.nativeOrder());
  }

  /**
   * The raw view: a direct ByteBuffer over the bytes the tensor spans, in
   * native byte order, without a copy; read-only when the buffer is. Host
   * memory only (CPU and pinned host).
   *
   * <p><b>Unchecked.</b> The JVM does not know who owns these bytes: the
   * view stays readable and writable after {@code close()}, after handing
   * the buffer on, and after the Cleaner released an unreachable buffer,
   * and then reads and writes freed memory (or crashes the JVM). The rule
   * that makes it safe: use the view only while this buffer is open and
   * reachable, on threads that cannot race a close (try-with-resources
   * around every use, or {@link java.lang.ref.Reference#reachabilityFence}
   * after the last one). Prefer {@link #withBytes} or the checked
   * accessors, which enforce that.
   *
   * @return the view
   * @throws IllegalStateException closed
   * @throws HurrayException UNSUPPORTED_DEVICE for device memory, OVERFLOW
   *     for a span over 2^31 - 1 bytes
   */
  public ByteBuffer asByteBuffer() {
    synchronized (state) {
      return view(live("asByteBuffer"));
    }
  }

  /**
   * Runs {@code action} on a view of the memory (as {@link #asByteBuffer})
   * while keeping this buffer open: a {@code close()} or export by another
   * thread waits until the action returns, and the Cleaner cannot run
   * meanwhile. Several scopes may run at once, on any threads. A
   * {@code close()} inside the action (same thread) is not refused: the
   * release runs when the last running scope (of any thread) ends. An
   * export inside the action is refused. Do not keep the view past the
   * action: afterwards it is as unchecked as {@link #asByteBuffer}'s.
   *
   * @param action what to do with the bytes; runs on this thread
   * @throws IllegalStateException closed
   * @throws HurrayException UNSUPPORTED_DEVICE, OVERFLOW (as asByteBuffer)
   */
  public void withBytes(Consumer<? super ByteBuffer> action) {
    mapBytes(
        b -> {
          action.accept(b);
          return null;
        });
  }

  /**
   * {@link #withBytes} with a result.
   *
   * @param <T> the result type
   * @param f what to compute from the bytes; runs on this thread
   * @return f's result
   * @throws IllegalStateException closed
   * @throws HurrayException UNSUPPORTED_DEVICE, OVERFLOW (as asByteBuffer)
   */
  public <T> T mapBytes(Function<? super ByteBuffer, ? extends T> f) {
    ByteBuffer b;
    Thread me = Thread.currentThread();
    synchronized (state) {
      b = view(live("withBytes"));
      Thread[] ts = Arrays.copyOf(state.scopeThreads, state.scopes + 1);
      ts[state.scopes] = me;
      state.scopeThreads = ts;
      state.scopes++;
    }
    boolean releaseNow = false;
    try {
      return f.apply(b);
    } finally {
      synchronized (state) {
        Thread[] ts = state.scopeThreads;
        for (int i = ts.length - 1; i >= 0; i--) {
          if (ts[i] == me) {
            ts[i] = ts[ts.length - 1];
            state.scopeThreads = Arrays.copyOf(ts, ts.length - 1);
            break;
          }
        }
        state.scopes--;
        if (state.releaseAtScopeEnd && state.scopes == 0) { // the last scope of all threads
          state.releaseAtScopeEnd = false;
          if (state.reusable) {
            state.view = null;
            Native.releaseKeep(state.handle);
          } else {
            releaseNow = true;
          }
        }
        state.notifyAll();
      }
      if (releaseNow) {
        cleanable.clean();
      }
      Reference.reachabilityFence(this);
    }
  }

  /** Whether the current thread runs a scope of this buffer; the caller holds the monitor. */
  private boolean inOwnScope(Thread me) {
    for (Thread t : state.scopeThreads) {
      if (t == me) {
        return true;
      }
    }
    return false;
  }

  /**
   * Waits until no other thread runs a scope of this buffer (uninterruptibly;
   * an interrupt is kept for later); the caller holds the monitor.
   *
   * @return false when the current thread runs one itself (then nothing is waited for)
   */
  private boolean awaitScopesOrOwn() {
    Thread me = Thread.currentThread();
    boolean interrupted = false;
    try {
      while (state.scopes > 0) {
        if (inOwnScope(me)) {
          return false;
        }
        try {
          state.wait();
        } catch (InterruptedException e) {
          interrupted = true;
        }
      }
      return true;
    } finally {
      if (interrupted) {
        me.interrupt();
      }
    }
  }

  private void awaitScopes(String op) {
    if (!awaitScopesOrOwn()) {
      throw new IllegalStateException(
          "HurrayBuffer." + op + ": called inside this thread's own withBytes scope");
    }
  }

  /** The checked accessors' view after the checks; the caller holds the monitor. */
  private ByteBuffer checked(String op, long index, int size) {
    long h = live(op);
    ByteBuffer v = state.view;
    if (v == null) {
      v = view(h);
      state.view = v;
    }
    if (index < 0 || index >= v.capacity() / size) {
      throw new IndexOutOfBoundsException(
          "HurrayBuffer." + op + ": index " + index + " out of 0 .. " + (v.capacity() / size - 1));
    }
    return v;
  }

  /**
   * The {@code index}-th byte of the span (as {@link #asByteBuffer}), checked:
   * open, in bounds. Holds the buffer open for the access.
   *
   * @param index 0 .. span bytes - 1
   * @return the byte
   * @throws IllegalStateException closed
   * @throws IndexOutOfBoundsException index out of range
   * @throws HurrayException UNSUPPORTED_DEVICE, OVERFLOW (as asByteBuffer)
   */
  public byte getByte(long index) {
    synchronized (state) {
      return checked("getByte", index, 1).get((int) index);
    }
  }

  /**
   * Writes the {@code index}-th byte of the span, checked like {@link #getByte}.
   *
   * @param index 0 .. span bytes - 1
   * @param v the value
   * @throws java.nio.ReadOnlyBufferException the buffer is READ_ONLY
   */
  public void putByte(long index, byte v) {
    synchronized (state) {
      checked("putByte", index, 1).put((int) index, v);
    }
  }

  /**
   * The {@code index}-th int (4 bytes at 4 * index, native order), checked
   * like {@link #getByte}.
   *
   * @param index 0 .. span bytes / 4 - 1
   * @return the value
   */
  public int getInt(long index) {
    synchronized (state) {
      return checked("getInt", index, 4).getInt((int) index * 4);
    }
  }

  /**
   * Writes the {@code index}-th int, checked like {@link #getByte}.
   *
   * @param index 0 .. span bytes / 4 - 1
   * @param v the value
   * @throws java.nio.ReadOnlyBufferException the buffer is READ_ONLY
   */
  public void putInt(long index, int v) {
    synchronized (state) {
      checked("putInt", index, 4).putInt((int) index * 4, v);
    }
  }

  /**
   * The {@code index}-th long (8 bytes at 8 * index), checked like {@link #getByte}.
   *
   * @param index 0 .. span bytes / 8 - 1
   * @return the value
   */
  public long getLong(long index) {
    synchronized (state) {
      return checked("getLong", index, 8).getLong((int) index * 8);
    }
  }

  /**
   * Writes the {@code index}-th long, checked like {@link #getByte}.
   *
   * @param index 0 .. span bytes / 8 - 1
   * @param v the value
   * @throws java.nio.ReadOnlyBufferException the buffer is READ_ONLY
   */
  public void putLong(long index, long v) {
    synchronized (state) {
      checked("putLong", index, 8).putLong((int) index * 8, v);
    }
  }

  /**
   * The {@code index}-th float (4 bytes at 4 * index), checked like {@link #getByte}.
   *
   * @param index 0 .. span bytes / 4 - 1
   * @return the value
   */
  public float getFloat(long index) {
    synchronized (state) {
      return checked("getFloat", index, 4).getFloat((int) index * 4);
    }
  }

  /**
   * Writes the {@code index}-th float, checked like {@link #getByte}.
   *
   * @param index 0 .. span bytes / 4 - 1
   * @param v the value
   * @throws java.nio.ReadOnlyBufferException the buffer is READ_ONLY
   */
  public void putFloat(long index, float v) {
    synchronized (state) {
      checked("putFloat", index, 4).putFloat((int) index * 4, v);
    }
  }

  /**
   * The {@code index}-th double (8 bytes at 8 * index), checked like {@link #getByte}.
   *
   * @param index 0 .. span bytes / 8 - 1
   * @return the value
   */
  public double getDouble(long index) {
    synchronized (state) {
      return checked("getDouble", index, 8).getDouble((int) index * 8);
    }
  }

  /**
   * Writes the {@code index}-th double, checked like {@link #getByte}.
   *
   * @param index 0 .. span bytes / 8 - 1
   * @param v the value
   * @throws java.nio.ReadOnlyBufferException the buffer is READ_ONLY
   */
  public void putDouble(long index, double v) {
    synchronized (state) {
      checked("putDouble", index, 8).putDouble((int) index * 8, v);
    }
  }

  /**
   * Gives the reference back. The first call releases (on this thread);
   * later calls do nothing. When other threads run {@link #withBytes} scopes
   * of this buffer, it waits until they end (uninterruptibly); called inside
   * this thread's own scope, it returns at once and the release runs when
   * the last running scope ends. Never throws.
   */
  @Override
  public void close() {
    State st = state;
    long h;
    synchronized (st) {
      if (st.closed) {
        return;
      }
      st.closed = true; // no new scope starts from here on
      if (!awaitScopesOrOwn()) {
        st.releaseAtScopeEnd = true;
        return;
      }
      if (st.reusable) {
        // Released under the monitor, so that no shareInto refills the
        // struct meanwhile; the JNI side empties it before the release
        // runs, so a release callback may refill it on this thread.
        st.view = null;
        Native.releaseKeep(st.handle);
        return;
      }
      h = st.handle; // taken here, so that clean() below needs no second lock
      st.handle = 0;
      st.view = null;
      st.takenByClose = true;
    }
    cleanable.clean(); // unregisters; its action does nothing now
    Native.release(h); // h != 0: only an export empties the handle, and it sets closed
    Reference.reachabilityFence(this);
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
