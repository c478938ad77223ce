// SPDX-License-Identifier: Apache-2.0
package dev.hurray;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.util.concurrent.CountDownLatch;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.ExtendWith;

/** HurrayBuffer.reusable() and shareInto: the allocation-free share + close pair. */
@ExtendWith(NativeLibs.class)
class ReusableBufferTest {
  @BeforeEach
  void reset() {
    TestProducer.reset();
  }

  private static HurrayBuffer produced(long n) {
    return HurrayBuffer.fromDLPackVersioned(TestProducer.makeVersioned(new long[] {n}, 3f, 0));
  }

  @Test
  void startsEmptyAndEachFillIsOneReference() {
    HurrayBuffer dst = HurrayBuffer.reusable();
    assertFalse(dst.isOpen());
    assertThrows(IllegalStateException.class, dst::shape);
    HurrayBuffer src = produced(4);
    for (int i = 0; i < 1000; i++) {
      src.shareInto(dst);
      assertTrue(dst.isOpen());
      assertArrayEquals(new long[] {4}, dst.shape());
      assertEquals(3f, dst.getFloat(0));
      dst.close();
      assertFalse(dst.isOpen());
      dst.close(); // idempotent
    }
    assertEquals(0, TestProducer.deleterCalls(), "the source still holds its reference");
    src.shareInto(dst);
    src.close();
    assertEquals(0, TestProducer.deleterCalls(), "dst holds the last reference");
    dst.close();
    assertEquals(1, TestProducer.deleterCalls());
  }

  @Test
  void refusalsChangeNothing() {
    HurrayBuffer src = produced(2);
    HurrayBuffer dst = HurrayBuffer.reusable();
    assertThrows(NullPointerException.class, () -> src.shareInto(null));
    HurrayBuffer plain = produced(1);
    assertThrows(IllegalArgumentException.class, () -> src.shareInto(plain), "not reusable");
    assertTrue(plain.isOpen());
    plain.close();
    assertThrows(IllegalArgumentException.class, () -> dst.shareInto(dst));
    src.shareInto(dst);
    assertThrows(IllegalArgumentException.class, () -> src.shareInto(dst), "dst is full");
    HurrayBuffer empty = HurrayBuffer.reusable();
    assertThrows(IllegalStateException.class, () -> empty.shareInto(HurrayBuffer.reusable()));
    dst.close();
    src.close();
    assertThrows(IllegalStateException.class, () -> src.shareInto(dst), "source closed");
    assertFalse(dst.isOpen());
    assertEquals(2, TestProducer.deleterCalls(), "plain and src, once each");
  }

  @Test
  void exportEmptiesItAndItRefills() {
    HurrayBuffer src = produced(3);
    HurrayBuffer dst = HurrayBuffer.reusable();
    src.shareInto(dst);
    long t = dst.toDLPackVersioned();
    assertFalse(dst.isOpen());
    src.shareInto(dst); // reusable after an export
    dst.close();
    src.close();
    assertEquals(0, TestProducer.deleterCalls(), "the exported tensor holds a reference");
    TestProducer.deleteVersioned(t);
    assertEquals(1, TestProducer.deleterCalls());
  }

  @Test
  void closeInsideItsOwnScopeReleasesAtScopeEnd() {
    HurrayBuffer src = produced(2);
    HurrayBuffer dst = HurrayBuffer.reusable();
    src.shareInto(dst);
    src.close();
    HurrayBuffer other = produced(1);
    dst.withBytes(b -> {
      dst.close();
      assertThrows(IllegalArgumentException.class, () -> other.shareInto(dst),
          "dst still holds the reference its close released at scope end");
      assertEquals(0, TestProducer.deleterCalls(), "released only when the scope ends");
    });
    assertEquals(1, TestProducer.deleterCalls());
    assertFalse(dst.isOpen());
    other.shareInto(dst); // empty again: reusable
    other.close();
    dst.close();
    assertEquals(2, TestProducer.deleterCalls());
  }

  @Test
  void crossedShareIntoDoesNotDeadlock() throws Exception {
    HurrayBuffer a = HurrayBuffer.reusable();
    HurrayBuffer b = HurrayBuffer.reusable();
    HurrayBuffer src = produced(1);
    src.shareInto(a);
    src.close();
    CountDownLatch go = new CountDownLatch(1);
    Thread[] ts = new Thread[2];
    for (int k = 0; k < 2; k++) {
      final HurrayBuffer from = k == 0 ? a : b;
      final HurrayBuffer to = k == 0 ? b : a;
      ts[k] = new Thread(() -> {
        try {
          go.await();
        } catch (InterruptedException e) {
          throw new AssertionError(e);
        }
        for (int i = 0; i < 20000; i++) {
          try {
            from.shareInto(to);
            from.close(); // hand the one reference back and forth
          } catch (IllegalStateException | IllegalArgumentException e) {
            // the other thread holds it now: expected races, no deadlock
          }
        }
      });
      ts[k].start();
    }
    go.countDown();
    for (Thread t : ts) {
      t.join(60_000);
      assertFalse(t.isAlive(), "deadlock between a.shareInto(b) and b.shareInto(a)");
    }
    a.close();
    b.close();
    assertEquals(1, TestProducer.deleterCalls());
  }

  @Test
  void cleanerReleasesADroppedReusableOnce() throws Exception {
    long before = HurrayBuffer.cleanerReleases();
    dropFilled();
    long deadline = System.nanoTime() + 10_000_000_000L;
    while (TestProducer.deleterCalls() == 0 && System.nanoTime() < deadline) {
      System.gc();
      Thread.sleep(10);
    }
    assertEquals(1, TestProducer.deleterCalls(), "the Cleaner did not release");
    assertEquals(1, HurrayBuffer.cleanerReleases() - before);
  }

  private static void dropFilled() {
    HurrayBuffer src = produced(8);
    HurrayBuffer dst = HurrayBuffer.reusable();
    src.shareInto(dst);
    src.close();
  }
}
