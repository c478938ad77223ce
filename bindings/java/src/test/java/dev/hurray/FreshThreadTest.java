// SPDX-License-Identifier: Apache-2.0
package dev.hurray;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertNotEquals;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.nio.ByteBuffer;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.FutureTask;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.ExtendWith;

/**
 * The first libhurray call of a thread is where libhurray's thread_local
 * state is first touched (once, built with TLS descriptors and loaded
 * with dlopen, as System.load does, the first hurray_share of each thread
 * handed out ndim 2 with NULL shape and strides, and shape() then crashed
 * the JVM). Each test here makes that first call a share or an export on a
 * new thread and checks every field afterwards.
 */
@ExtendWith(NativeLibs.class)
class FreshThreadTest {
  @BeforeEach
  void reset() {
    TestProducer.reset();
  }

  /** Every field of a float32 {3, 4} CPU buffer holding 1..12. */
  private static void assertFloat3x4(HurrayBuffer b, String who) {
    assertArrayEquals(new long[] {3, 4}, b.shape(), who + " shape");
    assertArrayEquals(new long[] {4, 1}, b.strides(), who + " strides");
    assertEquals(HurrayBuffer.DType.FLOAT32, b.dtype(), who + " dtype");
    assertEquals(new HurrayBuffer.Device(HurrayBuffer.Device.CPU, 0), b.device(), who + " device");
    assertFalse(b.readOnly(), who + " readOnly");
    ByteBuffer bytes = b.asByteBuffer();
    assertEquals(48, bytes.capacity(), who + " bytes");
    assertEquals(1f, bytes.getFloat(0), who + " first element");
    assertEquals(12f, bytes.getFloat(44), who + " last element");
  }

  @Test
  void shareIsTheFirstCallOfEightConcurrentFreshThreads() throws Exception {
    List<HurrayBuffer> sources = new ArrayList<>();
    for (int t = 0; t < 8; t++) {
      sources.add(
          HurrayBuffer.fromDLPackVersioned(TestProducer.makeVersioned(new long[] {3, 4}, 1f, 0)));
    }
    CountDownLatch go = new CountDownLatch(1);
    List<FutureTask<HurrayBuffer[]>> tasks = new ArrayList<>();
    List<Thread> threads = new ArrayList<>();
    for (HurrayBuffer src : sources) {
      FutureTask<HurrayBuffer[]> f =
          new FutureTask<>(
              () -> {
                go.await();
                HurrayBuffer[] more = src.share(3); // this thread's first libhurray call
                assertFloat3x4(src, "source after share");
                for (HurrayBuffer m : more) {
                  assertFloat3x4(m, "share");
                }
                return more;
              });
      Thread th = new Thread(f, "fresh-share");
      th.start();
      tasks.add(f);
      threads.add(th);
    }
    go.countDown();
    List<HurrayBuffer> all = new ArrayList<>(sources);
    for (int t = 0; t < 8; t++) {
      all.addAll(List.of(tasks.get(t).get()));
      threads.get(t).join();
    }
    for (HurrayBuffer b : all) {
      assertFloat3x4(b, "back on the test thread");
    }
    assertEquals(32, all.size());
    assertEquals(0, TestProducer.deleterCalls());
    for (HurrayBuffer b : all) {
      b.close();
    }
    assertEquals(8, TestProducer.deleterCalls(), "one deleter call per source tensor");
  }

  @Test
  void shareThenShapeOnAFreshThread() throws Exception {
    HurrayBuffer src =
        HurrayBuffer.fromDLPackVersioned(TestProducer.makeVersioned(new long[] {3, 4}, 1f, 0));
    HurrayBuffer[] one = FreshThread.call("fresh-share-1", () -> src.share(1));
    // The reads on yet another thread, before anything else touches them.
    long[][] seen =
        FreshThread.call(
            "fresh-read", () -> new long[][] {one[0].shape(), one[0].strides(), src.shape()});
    assertArrayEquals(new long[] {3, 4}, seen[0]);
    assertArrayEquals(new long[] {4, 1}, seen[1]);
    assertArrayEquals(new long[] {3, 4}, seen[2]);
    assertFloat3x4(one[0], "share");
    one[0].close();
    assertFloat3x4(src, "source");
    src.close();
    assertEquals(1, TestProducer.deleterCalls());
  }

  /** The exported tensor, read field by field in C: a compact float32 {2, 3} CPU tensor. */
  private static void assertExported2x3(long tensor, long readOnlyFlag) {
    long[] d = TestProducer.describeVersioned(tensor);
    assertArrayEquals(
        new long[] {
          1, 3, // version 1.3
          readOnlyFlag,
          HurrayBuffer.Device.CPU, 0,
          2, 32, 1, // float32
          0, // byte_offset
          2, // ndim
          0, 0, // shape and strides not NULL
          0, 0, // deleter and data not NULL
          2, 3, // shape
          3, 1 // strides
        },
        d,
        "the exported DLManagedTensorVersioned");
  }

  /**
   * The steps of bindings/java/README.md's program, run on a fresh thread
   * (its first libhurray call is the allocate, then the share and the
   * export), the exported tensor checked in C, then re-imported on another
   * fresh thread whose first libhurray call is the import.
   */
  @Test
  void readmeSnippetOnFreshThreads() throws Exception {
    long exported =
        FreshThread.call(
            "readme",
            () -> {
              long tensor;
              try (HurrayBuffer buf =
                  HurrayBuffer.allocate(HurrayBuffer.DType.FLOAT32, new long[] {2, 3}, false)) {
                buf.asByteBuffer().putFloat(0, 42f);
                HurrayBuffer[] more = buf.share(1);
                tensor = more[0].toDLPackVersioned();
                assertFalse(more[0].isOpen());
                assertArrayEquals(new long[] {2, 3}, buf.shape(), "buf after the export");
                assertArrayEquals(new long[] {3, 1}, buf.strides(), "buf after the export");
              }
              return tensor;
            });
    assertNotEquals(0, exported);
    assertExported2x3(exported, 0);
    FreshThread.call(
        "reimport",
        () -> {
          try (HurrayBuffer back = HurrayBuffer.fromDLPackVersioned(exported)) {
            assertArrayEquals(new long[] {2, 3}, back.shape());
            assertArrayEquals(new long[] {3, 1}, back.strides());
            assertEquals(HurrayBuffer.DType.FLOAT32, back.dtype());
            assertEquals(new HurrayBuffer.Device(HurrayBuffer.Device.CPU, 0), back.device());
            assertFalse(back.readOnly());
            ByteBuffer bytes = back.asByteBuffer();
            assertEquals(24, bytes.capacity());
            assertEquals(42f, bytes.getFloat(0));
            HurrayBuffer[] again = back.share(1);
            assertArrayEquals(new long[] {2, 3}, again[0].shape());
            again[0].close();
          }
          return null;
        });
  }

  /** A read-only C tensor exported again from a fresh thread keeps its flag and every field. */
  @Test
  void exportIsTheFirstCallOfAFreshThread() throws Exception {
    HurrayBuffer src =
        HurrayBuffer.fromDLPackVersioned(TestProducer.makeVersioned(new long[] {2, 3}, 0f, 1));
    assertTrue(src.readOnly());
    long t = FreshThread.call("fresh-export", src::toDLPackVersioned);
    assertFalse(src.isOpen());
    assertExported2x3(t, 1);
    assertEquals(15.0, TestProducer.consumeVersioned(t), "0 + 1 + ... + 5, read in C");
    assertEquals(1, TestProducer.deleterCalls());
  }
}
