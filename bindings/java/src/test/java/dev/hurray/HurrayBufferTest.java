// SPDX-License-Identifier: Apache-2.0
package dev.hurray;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.ByteBuffer;
import java.nio.ReadOnlyBufferException;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.Random;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.atomic.AtomicLong;
import java.util.concurrent.atomic.AtomicReference;
import org.junit.jupiter.api.Assumptions;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.ExtendWith;

@ExtendWith(NativeLibs.class)
class HurrayBufferTest {
  @BeforeEach
  void reset() {
    TestProducer.reset();
  }

  @Test
  void exactlyOnceAcross8ThreadsInRandomOrder() throws Exception {
    Random random = new Random(11);
    for (int round = 0; round < 30; round++) {
      TestProducer.reset();
      HurrayBuffer first =
          HurrayBuffer.fromDLPackVersioned(TestProducer.makeVersioned(new long[] {64}, 0f, 0));
      List<HurrayBuffer> all = new ArrayList<>(List.of(first.share(63)));
      all.add(first);
      assertEquals(64, all.size());
      Collections.shuffle(all, random);
      CountDownLatch go = new CountDownLatch(1);
      List<Thread> threads = new ArrayList<>();
      for (int t = 0; t < 8; t++) {
        final int start = t;
        Thread th =
            new Thread(
                () -> {
                  try {
                    go.await();
                  } catch (InterruptedException e) {
                    throw new AssertionError(e);
                  }
                  for (int i = start; i < all.size(); i += 8) {
                    TestProducer.noteRelease();
                    all.get(i).close();
                    all.get(i).close(); // idempotent
                  }
                });
        th.start();
        threads.add(th);
      }
      go.countDown();
      for (Thread th : threads) {
        th.join();
      }
      assertEquals(1, TestProducer.deleterCalls(), "deleter calls in round " + round);
      assertEquals(64, TestProducer.notesAtDelete(), "the deleter ran before the last release");
    }
  }

  @Test
  void tryWithResourcesReleasesOnce() {
    long t = TestProducer.makeVersioned(new long[] {2, 3}, 10f, 0);
    try (HurrayBuffer b = HurrayBuffer.fromDLPackVersioned(t)) {
      assertArrayEquals(new long[] {2, 3}, b.shape());
      assertArrayEquals(new long[] {3, 1}, b.strides());
      assertEquals(HurrayBuffer.DType.FLOAT32, b.dtype());
      assertEquals(new HurrayBuffer.Device(HurrayBuffer.Device.CPU, 0), b.device());
      assertFalse(b.readOnly());
      ByteBuffer bytes = b.asByteBuffer();
      assertEquals(24, bytes.capacity());
      assertEquals(10f, bytes.getFloat(0));
      assertEquals(15f, bytes.getFloat(20));
      assertEquals(0, TestProducer.deleterCalls());
    }
    assertEquals(1, TestProducer.deleterCalls());
  }

  @Test
  void legacyTensorFromC() {
    try (HurrayBuffer b = HurrayBuffer.fromDLPack(TestProducer.makeLegacy(new long[] {5}, 1f))) {
      assertArrayEquals(new long[] {1}, b.strides(), "NULL strides read as compact");
    }
    assertEquals(1, TestProducer.deleterCalls());
  }

  @Test
  void cleanerReleasesAnUnclosedBuffer() throws Exception {
    long before = HurrayBuffer.cleanerReleases();
    dropOne();
    long deadline = System.nanoTime() + 10_000_000_000L;
    while (TestProducer.deleterCalls() == 0 && System.nanoTime() < deadline) {
      System.gc();
      Thread.sleep(10);
    }
    assertEquals(1, TestProducer.deleterCalls(), "the Cleaner did not release");
    assertEquals(1, HurrayBuffer.cleanerReleases() - before);
  }

  private static void dropOne() {
    HurrayBuffer.fromDLPackVersioned(TestProducer.makeVersioned(new long[] {8}, 0f, 0));
  }

  @Test
  void closedBufferIsNotCountedByTheCleaner() throws Exception {
    long before = HurrayBuffer.cleanerReleases();
    HurrayBuffer b =
        HurrayBuffer.fromDLPackVersioned(TestProducer.makeVersioned(new long[] {1}, 0f, 0));
    b.close();
    b = null;
    for (int i = 0; i < 5; i++) {
      System.gc();
      Thread.sleep(5);
    }
    assertEquals(1, TestProducer.deleterCalls());
    assertEquals(before, HurrayBuffer.cleanerReleases());
  }

  @Test
  void javaWritesAndCReads() {
    HurrayBuffer b = HurrayBuffer.allocate(HurrayBuffer.DType.FLOAT32, new long[] {2, 3}, false);
    ByteBuffer bytes = b.asByteBuffer();
    for (int i = 0; i < 6; i++) {
      bytes.putFloat(4 * i, i + 1);
    }
    long t = b.toDLPackVersioned();
    assertFalse(b.isOpen(), "toDLPackVersioned hands the reference on");
    assertEquals(21.0, TestProducer.consumeVersioned(t));

    HurrayBuffer c = HurrayBuffer.allocate(HurrayBuffer.DType.FLOAT32, new long[] {4}, false);
    c.asByteBuffer().putFloat(12, 7f).putFloat(0, 1f);
    c.asByteBuffer().putFloat(4, 0f).putFloat(8, 0f);
    assertEquals(8.0, TestProducer.consumeLegacy(c.toDLPack()));
  }

  @Test
  void cTensorThroughJavaBackToC() {
    HurrayBuffer b =
        HurrayBuffer.fromDLPackVersioned(TestProducer.makeVersioned(new long[] {4}, 1f, 0));
    HurrayBuffer[] more = b.share(1);
    long t = more[0].toDLPackVersioned();
    b.close();
    assertEquals(0, TestProducer.deleterCalls(), "deleter ran while C held a share");
    assertEquals(10.0, TestProducer.consumeVersioned(t));
    assertEquals(1, TestProducer.deleterCalls());
  }

  @Test
  void readOnlyMemoryGivesAReadOnlyByteBuffer() {
    try (HurrayBuffer b =
        HurrayBuffer.fromDLPackVersioned(TestProducer.makeVersioned(new long[] {3}, 0f, 1))) {
      assertTrue(b.readOnly());
      ByteBuffer bytes = b.asByteBuffer();
      assertTrue(bytes.isReadOnly());
      assertThrows(ReadOnlyBufferException.class, () -> bytes.putFloat(0, 1f));
    }
    try (HurrayBuffer a = HurrayBuffer.allocate(HurrayBuffer.DType.UINT8, new long[] {4}, true)) {
      assertTrue(a.readOnly());
    }
  }

  private static void assertStatus(int status, Runnable call) {
    HurrayException e = assertThrows(HurrayException.class, call::run);
    assertEquals(status, e.status(), e.getMessage());
    assertTrue(e.getMessage().contains(e.statusName()), e.getMessage());
  }

  // A ByteBuffer's capacity is an int: a larger span is refused, never cut to
  // its low 32 bits. 2^31 bytes are allocated but never touched.
  @Test
  void viewsOverTwoGiBAreRefusedNotTruncated() {
    try (HurrayBuffer b =
        HurrayBuffer.allocate(HurrayBuffer.DType.UINT8, new long[] {1L << 31}, false)) {
      assertStatus(HurrayException.OVERFLOW, b::asByteBuffer);
    }
    try (HurrayBuffer b =
        HurrayBuffer.allocate(HurrayBuffer.DType.UINT8, new long[] {(1L << 31) - 1}, false)) {
      assertEquals(Integer.MAX_VALUE, b.asByteBuffer().capacity());
    }
  }

  @Test
  void errorsCarryExactCodes() {
    assertStatus(
        HurrayException.INVALID_ARGUMENT,
        () -> HurrayBuffer.allocate(HurrayBuffer.DType.FLOAT32, new long[] {2, -1}, false));
    assertStatus(
        HurrayException.UNSUPPORTED_DTYPE,
        () -> HurrayBuffer.allocate(new HurrayBuffer.DType(99, 8, 1), new long[] {1}, false));
    assertStatus(
        HurrayException.OVERFLOW,
        () ->
            HurrayBuffer.allocate(
                HurrayBuffer.DType.INT64, new long[] {1L << 40, 1L << 40}, false));
    assertStatus(HurrayException.INVALID_ARGUMENT, () -> HurrayBuffer.fromDLPackVersioned(0));
    NullPointerException npe =
        assertThrows(
            NullPointerException.class,
            () -> HurrayBuffer.allocate(HurrayBuffer.DType.FLOAT32, null, false));
    assertTrue(npe.getMessage().contains("shape is null"), npe.getMessage());

    long bad = TestProducer.makeVersionedMajor(2);
    assertStatus(HurrayException.UNSUPPORTED_VERSION, () -> HurrayBuffer.fromDLPackVersioned(bad));
    assertEquals(0, TestProducer.deleterCalls(), "a refused tensor was deleted");
    TestProducer.deleteVersioned(bad);
    assertEquals(1, TestProducer.deleterCalls());

    HurrayBuffer b = HurrayBuffer.allocate(HurrayBuffer.DType.UINT8, new long[] {3}, false);
    assertThrows(IllegalArgumentException.class, () -> b.share(0));
    assertThrows(IllegalArgumentException.class, () -> b.share(Integer.MAX_VALUE));
    assertTrue(b.isOpen(), "a failed share closed the buffer");
    b.close();
    b.close();
    // A closed buffer is an IllegalStateException, bad arguments
    // IllegalArgumentException; HurrayException is for libhurray's statuses.
    assertThrows(IllegalStateException.class, () -> b.share(1));
    assertThrows(IllegalStateException.class, () -> b.share(2));
    assertThrows(IllegalStateException.class, b::share);
    assertThrows(IllegalStateException.class, b::asByteBuffer);
    assertThrows(IllegalStateException.class, b::toDLPackVersioned);
    assertThrows(IllegalStateException.class, b::shape);
    assertThrows(IllegalStateException.class, () -> b.getFloat(0));
    assertThrows(IllegalStateException.class, () -> b.withBytes(x -> {}));
    assertThrows(
        IllegalArgumentException.class,
        () -> HurrayBuffer.allocate(new HurrayBuffer.DType(256, 8, 1), new long[] {1}, false));
    assertThrows(
        IllegalArgumentException.class,
        () -> HurrayBuffer.allocate(HurrayBuffer.DType.UINT8, new long[65], false));
    assertEquals(
        "HURRAY_ERR_UNSUPPORTED_DTYPE",
        assertThrows(
                HurrayException.class,
                () -> HurrayBuffer.allocate(new HurrayBuffer.DType(99, 8, 1), new long[] {1}, true))
            .statusName());
  }

  // After the JNI side's NewLongArray failed, it once went on to calloc
  // 2^31 handles and loop over them (about a minute). Now the first failed
  // allocation ends the call; nothing is shared.
  @Test
  void shareOfTooManyFailsAtOnceAndChangesNothing() {
    Assumptions.assumeTrue(
        Runtime.getRuntime().maxMemory() < (16L << 30),
        "needs a heap that cannot hold a long[2^31 - 2] (run with -Xmx below 16g)");
    HurrayBuffer b =
        HurrayBuffer.fromDLPackVersioned(TestProducer.makeVersioned(new long[] {4}, 1f, 0));
    long start = System.nanoTime();
    assertThrows(OutOfMemoryError.class, () -> b.share(Integer.MAX_VALUE - 1));
    long millis = (System.nanoTime() - start) / 1_000_000;
    assertTrue(millis < 1000, "share(2^31 - 2) took " + millis + " ms to fail");
    assertTrue(b.isOpen(), "a failed share closed the buffer");
    assertArrayEquals(new long[] {4}, b.shape());
    assertEquals(10f, sum(b), "the source's memory");
    HurrayBuffer[] more = b.share(2);
    assertEquals(2, more.length);
    more[0].close();
    more[1].close();
    assertEquals(0, TestProducer.deleterCalls(), "released while the source was open");
    b.close();
    assertEquals(1, TestProducer.deleterCalls(), "the producer's deleter, once");
  }

  private static float sum(HurrayBuffer b) {
    ByteBuffer bytes = b.asByteBuffer();
    float s = 0;
    for (int i = 0; i < bytes.capacity(); i += 4) {
      s += bytes.getFloat(i);
    }
    return s;
  }

  // toDLPack* once moved the handle out and marked the buffer closed in
  // two critical sections; a reader in between saw an open buffer with
  // shape [] and device type 0. A reader must see the full buffer or a
  // closed one (IllegalStateException), never an emptied open one.
  @Test
  void exportIsOneStepForAConcurrentReader() throws Exception {
    AtomicReference<HurrayBuffer> current = new AtomicReference<>();
    AtomicReference<String> bad = new AtomicReference<>();
    AtomicLong fullReads = new AtomicLong();
    AtomicLong closedReads = new AtomicLong();
    AtomicLong roundNow = new AtomicLong();
    Thread reader =
        new Thread(
            () -> {
              HurrayBuffer b;
              while ((b = current.get()) != null && bad.get() == null) {
                try {
                  long[] shape = b.shape();
                  HurrayBuffer.Device device = b.device();
                  HurrayBuffer.DType dtype = b.dtype();
                  if (shape.length != 2 || shape[0] != 2 || shape[1] != 3) {
                    bad.set("an open buffer read shape " + java.util.Arrays.toString(shape));
                  } else if (device.type() != HurrayBuffer.Device.CPU) {
                    bad.set("an open buffer read device " + device);
                  } else if (!HurrayBuffer.DType.FLOAT32.equals(dtype)) {
                    bad.set("an open buffer read dtype " + dtype);
                  }
                  long n = fullReads.incrementAndGet();
                  // A pause outside the lock, of varying length, lets the
                  // exporting thread take it while this one stays running.
                  for (long spin = (n * 0x9E3779B97F4A7C15L) >>> 54; spin > 0; spin--) {
                    Thread.onSpinWait();
                  }
                } catch (IllegalStateException e) {
                  if (b.isOpen()) {
                    bad.set("unexpected " + e);
                  }
                  closedReads.incrementAndGet();
                }
              }
            },
            "reader");
    int rounds = 5000;
    try {
      for (int round = 0; round < rounds && bad.get() == null; round++) {
        HurrayBuffer b =
            HurrayBuffer.fromDLPackVersioned(TestProducer.makeVersioned(new long[] {2, 3}, 0f, 0));
        long before = fullReads.get();
        roundNow.set(round);
        current.set(b);
        if (round == 0) {
          reader.start();
        }
        // Export while the reader is at it: once it has read this buffer open.
        while (fullReads.get() == before && bad.get() == null) {
          Thread.yield(); // the reader may need this core
        }
        for (int spin = 0; spin < (round & 15); spin++) {
          Thread.onSpinWait();
        }
        long t = (round & 1) == 0 ? b.toDLPackVersioned() : legacyAsVersioned(b);
        assertFalse(b.isOpen());
        assertEquals(15.0, TestProducer.consumeVersioned(t));
      }
    } finally {
      current.set(null); // every buffer it held was exported
      reader.join();
    }
    assertEquals(null, bad.get(), "in round " + roundNow);
    assertEquals(rounds, TestProducer.deleterCalls(), "one deleter call per exported tensor");
    assertTrue(fullReads.get() >= rounds, "the reader read " + fullReads + " open buffers");
    System.out.println(
        "exportIsOneStepForAConcurrentReader: " + fullReads + " open and " + closedReads
            + " closed reads");
  }

  /** Exports through toDLPack (the legacy path, the same one step), re-imports and exports versioned. */
  private static long legacyAsVersioned(HurrayBuffer b) {
    try (HurrayBuffer again = HurrayBuffer.fromDLPack(b.toDLPack())) {
      return again.toDLPackVersioned();
    }
  }
}
