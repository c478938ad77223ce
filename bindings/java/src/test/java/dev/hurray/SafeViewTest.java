// SPDX-License-Identifier: Apache-2.0
package dev.hurray;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.ByteBuffer;
import java.nio.ReadOnlyBufferException;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.atomic.AtomicBoolean;
import java.util.concurrent.atomic.AtomicReference;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.ExtendWith;

/**
 * The safe views: a raw asByteBuffer() stays readable and writable after
 * close, so the scoped accessors keep the buffer open while they run, and
 * the checked accessors check liveness and bounds on each call.
 */
@ExtendWith(NativeLibs.class)
class SafeViewTest {
  @BeforeEach
  void reset() {
    TestProducer.reset();
  }

  private static HurrayBuffer producerTensor() {
    // 6 float32 values 1, 2, ..., 6 (the producer counts up from start).
    return HurrayBuffer.fromDLPackVersioned(TestProducer.makeVersioned(new long[] {2, 3}, 1f, 0));
  }

  // A close on another thread waits for the running scope; the memory's
  // deleter runs only after the scope returned.
  @Test
  void concurrentCloseWaitsForTheScope() throws Exception {
    HurrayBuffer b = producerTensor();
    CountDownLatch inside = new CountDownLatch(1);
    CountDownLatch closerStarted = new CountDownLatch(1);
    AtomicBoolean closeReturned = new AtomicBoolean();
    AtomicReference<String> bad = new AtomicReference<>();
    Thread closer =
        new Thread(
            () -> {
              try {
                inside.await();
              } catch (InterruptedException e) {
                throw new AssertionError(e);
              }
              closerStarted.countDown();
              b.close();
              closeReturned.set(true);
            });
    closer.start();
    float first =
        b.mapBytes(
            bytes -> {
              inside.countDown();
              try {
                closerStarted.await();
                Thread.sleep(200); // the closer is blocked in close() by now
              } catch (InterruptedException e) {
                throw new AssertionError(e);
              }
              if (closeReturned.get() || TestProducer.deleterCalls() != 0) {
                bad.set("close returned or the deleter ran while the scope was running");
              }
              bytes.putFloat(4, 20f); // still our memory
              return bytes.getFloat(0);
            });
    closer.join(10_000);
    assertFalse(closer.isAlive(), "close() never returned after the scope ended");
    assertEquals(null, bad.get());
    assertEquals(1f, first);
    assertTrue(closeReturned.get());
    assertEquals(1, TestProducer.deleterCalls());
    assertFalse(b.isOpen());
    assertThrows(IllegalStateException.class, () -> b.withBytes(x -> {}));
  }

  // close() inside the thread's own scope does not deadlock: the release
  // runs when the scope ends. An export inside the scope is refused.
  @Test
  void closeInsideOwnScopeReleasesAtScopeEnd() {
    HurrayBuffer b = producerTensor();
    b.withBytes(
        bytes -> {
          assertThrows(IllegalStateException.class, b::toDLPackVersioned);
          assertTrue(b.isOpen(), "a refused export closed the buffer");
          b.close();
          assertFalse(b.isOpen());
          assertEquals(0, TestProducer.deleterCalls(), "released under the running scope");
          assertEquals(1f, bytes.getFloat(0));
        });
    assertEquals(1, TestProducer.deleterCalls());
    b.close();
    assertEquals(1, TestProducer.deleterCalls());
  }

  // An export on another thread also waits for the scope.
  @Test
  void exportWaitsForAnotherThreadsScope() throws Exception {
    HurrayBuffer b = producerTensor();
    CountDownLatch inside = new CountDownLatch(1);
    AtomicReference<Long> tensor = new AtomicReference<>();
    Thread exporter =
        new Thread(
            () -> {
              try {
                inside.await();
              } catch (InterruptedException e) {
                throw new AssertionError(e);
              }
              tensor.set(b.toDLPackVersioned());
            });
    exporter.start();
    b.withBytes(
        bytes -> {
          inside.countDown();
          try {
            Thread.sleep(200);
          } catch (InterruptedException e) {
            throw new AssertionError(e);
          }
          assertEquals(null, tensor.get(), "exported under a running scope");
          assertTrue(b.isOpen());
        });
    exporter.join(10_000);
    assertFalse(exporter.isAlive());
    assertFalse(b.isOpen());
    assertEquals(21.0, TestProducer.consumeVersioned(tensor.get()), 0.0); // 1+..+6
    assertEquals(1, TestProducer.deleterCalls());
  }

  @Test
  void checkedAccessorsCheckBoundsLivenessAndReadOnly() {
    try (HurrayBuffer b = producerTensor()) {
      assertEquals(1f, b.getFloat(0));
      assertEquals(6f, b.getFloat(5));
      assertThrows(IndexOutOfBoundsException.class, () -> b.getFloat(6));
      assertThrows(IndexOutOfBoundsException.class, () -> b.getFloat(-1));
      assertThrows(IndexOutOfBoundsException.class, () -> b.getDouble(3));
      assertThrows(IndexOutOfBoundsException.class, () -> b.getByte(24));
      assertThrows(IndexOutOfBoundsException.class, () -> b.putLong(1L << 40, 0));
      b.putFloat(5, 7.5f);
      assertEquals(7.5f, b.getFloat(5));
      assertEquals(7.5f, b.asByteBuffer().getFloat(20), "the checked view is not the memory");
      assertEquals(Float.floatToRawIntBits(7.5f), b.getInt(5));
      b.putInt(0, 42);
      assertEquals(42, b.getInt(0));
      b.putByte(23, (byte) 1);
      assertEquals(1, b.getByte(23));
      b.putDouble(1, 2.5);
      assertEquals(2.5, b.getDouble(1));
      b.putLong(0, -3L);
      assertEquals(-3L, b.getLong(0));
    }
    try (HurrayBuffer ro =
        HurrayBuffer.fromDLPackVersioned(TestProducer.makeVersioned(new long[] {4}, 1f, 1L))) {
      assertTrue(ro.readOnly());
      assertEquals(4f, ro.getFloat(3));
      assertThrows(ReadOnlyBufferException.class, () -> ro.putFloat(0, 1f));
      assertThrows(ReadOnlyBufferException.class, () -> ro.withBytes(x -> x.put(0, (byte) 1)));
      assertEquals(1f, ro.getFloat(0));
    }
    HurrayBuffer b = producerTensor();
    HurrayBuffer s = b.share();
    b.close();
    assertThrows(IllegalStateException.class, () -> b.getFloat(0));
    assertThrows(IllegalStateException.class, () -> b.putFloat(0, 1f));
    assertEquals(1f, s.getFloat(0), "the share lost the memory");
    s.close();
    assertThrows(IllegalStateException.class, () -> s.getFloat(0));
    assertEquals(3, TestProducer.deleterCalls()); // the three tensors of this test, once each
  }

  // Many threads' scopes and checked reads race one close; none reads after
  // the deleter ran.
  @Test
  void scopesAndCheckedReadsRaceClose() throws Exception {
    for (int round = 0; round < 200; round++) {
      TestProducer.reset();
      HurrayBuffer b = producerTensor();
      CountDownLatch go = new CountDownLatch(1);
      AtomicReference<String> bad = new AtomicReference<>();
      Thread[] ts = new Thread[4];
      for (int t = 0; t < ts.length; t++) {
        final boolean scoped = t % 2 == 0;
        ts[t] =
            new Thread(
                () -> {
                  try {
                    go.await();
                    for (int i = 0; i < 50; i++) {
                      float v;
                      if (scoped) {
                        // inside the scope: the deleter must not have run
                        v = b.mapBytes((ByteBuffer x) -> alive(x.getFloat(20)));
                      } else {
                        // a deleter that ran before the call must make it throw
                        boolean deletedBefore = TestProducer.deleterCalls() != 0;
                        v = b.getFloat(5);
                        if (deletedBefore) {
                          throw new AssertionError("a checked read succeeded after the deleter");
                        }
                      }
                      if (v != 6f) {
                        bad.set("read " + v);
                      }
                    }
                  } catch (IllegalStateException e) {
                    // closed: fine
                  } catch (InterruptedException | AssertionError e) {
                    bad.set(e.toString());
                  }
                });
        ts[t].start();
      }
      go.countDown();
      b.close();
      for (Thread t : ts) {
        t.join(10_000);
      }
      assertEquals(null, bad.get());
      assertEquals(1, TestProducer.deleterCalls());
    }
  }

  /** Fails when the deleter already ran while this read was allowed. */
  private static float alive(float v) {
    if (TestProducer.deleterCalls() != 0) {
      throw new AssertionError("a read ran after the memory's deleter");
    }
    return v;
  }

  @Test
  void rawViewIsStillUncheckedAndSaysSo() throws Exception {
    // Documented, not fixed: the raw view does not know the buffer closed.
    // This only pins the contract that the checked paths refuse it.
    HurrayBuffer b = HurrayBuffer.allocate(HurrayBuffer.DType.FLOAT32, new long[] {4}, false);
    ByteBuffer raw = b.asByteBuffer();
    assertEquals(16, raw.capacity());
    b.close();
    assertThrows(IllegalStateException.class, b::asByteBuffer);
    assertThrows(IllegalStateException.class, () -> b.getFloat(0));
  }
}
