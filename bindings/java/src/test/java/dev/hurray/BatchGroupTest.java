// SPDX-License-Identifier: Apache-2.0
package dev.hurray;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertFalse;
import static org.junit.jupiter.api.Assertions.assertThrows;
import static org.junit.jupiter.api.Assertions.assertTrue;

import java.io.IOException;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.Collections;
import java.util.List;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.atomic.AtomicInteger;
import java.util.concurrent.atomic.AtomicReference;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.extension.ExtendWith;

/**
 * Batched DLPack conversion ({@code fromDLPackVersionedAll}, {@code
 * toDLPackVersionedAll} and the legacy forms) and tensor groups ({@code
 * allocateGroup}): all or nothing, the failed index named, deleters and the
 * group's one memfd released once, after the last buffer.
 */
@ExtendWith(NativeLibs.class)
class BatchGroupTest {
  private static final HurrayBuffer.DType F32 = HurrayBuffer.DType.FLOAT32;
  private static final HurrayBuffer.DType U8 = HurrayBuffer.DType.UINT8;
  private static final HurrayBuffer.DType F64 = new HurrayBuffer.DType(2, 64, 1);

  @BeforeEach
  void reset() {
    TestProducer.reset();
  }

  /** Mappings of libhurray's shareable memory (memfds named "hurray") in this JVM. */
  private static int memfdMaps() throws IOException {
    String maps = Files.readString(Path.of("/proc/self/maps"));
    int n = 0;
    for (int at = maps.indexOf("memfd:hurray"); at >= 0; at = maps.indexOf("memfd:hurray", at + 1)) {
      n++;
    }
    return n;
  }

  private static List<HurrayBuffer.TensorDesc> groupDescs() {
    return List.of(
        new HurrayBuffer.TensorDesc(F32, new long[] {2, 3}, false),
        new HurrayBuffer.TensorDesc(U8, new long[] {5}, false),
        new HurrayBuffer.TensorDesc(F64, new long[] {0}, false),
        new HurrayBuffer.TensorDesc(F64, new long[] {4, 4}, true));
  }

  @Test
  void batchImportIsAllOrNothingAndNamesTheIndex() {
    long a = TestProducer.makeVersioned(new long[] {2, 2}, 1f, 0);
    long bad = TestProducer.makeVersionedMajor(2);
    long c = TestProducer.makeVersioned(new long[] {3}, 10f, 0);
    HurrayException e =
        assertThrows(HurrayException.class, () -> HurrayBuffer.fromDLPackVersionedAll(a, bad, c));
    assertEquals(HurrayException.UNSUPPORTED_VERSION, e.status());
    assertEquals(1, e.index());
    assertEquals(
        "HurrayBuffer.fromDLPackVersionedAll: ts[1].version is 2.3; only DLPack major version 1"
            + " can be read (the caller still owns the tensor and should call its deleter)"
            + " [HURRAY_ERR_UNSUPPORTED_VERSION]",
        e.getMessage());
    assertEquals(0, TestProducer.deleterCalls(), "a failed batch runs no deleter");
    e = assertThrows(HurrayException.class, () -> HurrayBuffer.fromDLPackVersionedAll(a, 0L, c));
    assertEquals(HurrayException.INVALID_ARGUMENT, e.status());
    assertEquals(1, e.index());
    assertEquals(
        "HurrayBuffer.fromDLPackVersionedAll: ts[1] is NULL [HURRAY_ERR_INVALID_ARGUMENT]",
        e.getMessage());
    TestProducer.deleteVersioned(bad); // still the caller's
    assertEquals(1, TestProducer.deleterCalls());

    List<HurrayBuffer> bufs = HurrayBuffer.fromDLPackVersionedAll(a, c);
    assertEquals(2, bufs.size());
    assertThrows(UnsupportedOperationException.class, () -> bufs.remove(0));
    assertArrayEquals(new long[] {2, 2}, bufs.get(0).shape());
    assertEquals(12f, bufs.get(1).getFloat(2));
    bufs.get(1).close();
    assertEquals(2, TestProducer.deleterCalls(), "c's deleter, at its own buffer's close");
    bufs.get(0).close();
    assertEquals(3, TestProducer.deleterCalls());
    assertTrue(HurrayBuffer.fromDLPackVersionedAll().isEmpty());
  }

  @Test
  void legacyBatchImport() {
    long a = TestProducer.makeLegacy(new long[] {2}, 1f);
    HurrayException e =
        assertThrows(HurrayException.class, () -> HurrayBuffer.fromDLPackAll(a, 0L));
    assertEquals(1, e.index());
    assertEquals(
        "HurrayBuffer.fromDLPackAll: ts[1] is NULL [HURRAY_ERR_INVALID_ARGUMENT]", e.getMessage());
    List<HurrayBuffer> bufs =
        HurrayBuffer.fromDLPackAll(a, TestProducer.makeLegacy(new long[] {4}, 5f));
    assertEquals(8f, bufs.get(1).getFloat(3));
    HurrayBuffer.closeAll(bufs);
    assertEquals(2, TestProducer.deleterCalls());
  }

  @Test
  void batchExportIsAllOrNothingAndNamesTheIndex() {
    long[] ts = {
      TestProducer.makeVersioned(new long[] {2}, 1f, 0),
      TestProducer.makeVersioned(new long[] {3}, 4f, 0),
      TestProducer.makeVersioned(new long[] {1}, 9f, 0)
    };
    long[] addr = new long[3];
    for (int i = 0; i < 3; i++) {
      addr[i] = TestProducer.firstByte(ts[i]);
    }
    List<HurrayBuffer> bufs = HurrayBuffer.fromDLPackVersionedAll(ts);
    HurrayBuffer closed = HurrayBuffer.allocate(F32, new long[] {1}, false);
    closed.close();
    List<HurrayBuffer> withNull = new ArrayList<>(bufs);
    withNull.set(1, null);
    NullPointerException npe =
        assertThrows(NullPointerException.class, () -> HurrayBuffer.toDLPackVersionedAll(withNull));
    assertEquals("HurrayBuffer.toDLPackVersionedAll: buffers[1] is null", npe.getMessage());
    IllegalArgumentException iae =
        assertThrows(
            IllegalArgumentException.class,
            () -> HurrayBuffer.toDLPackVersionedAll(List.of(bufs.get(0), bufs.get(1), bufs.get(0))));
    assertEquals(
        "HurrayBuffer.toDLPackVersionedAll: buffers[2] is buffers[0] again (each buffer once)",
        iae.getMessage());
    IllegalStateException ise =
        assertThrows(
            IllegalStateException.class,
            () -> HurrayBuffer.toDLPackVersionedAll(List.of(bufs.get(0), bufs.get(1), closed)));
    assertEquals("HurrayBuffer.toDLPackVersionedAll: buffers[2] is closed", ise.getMessage());
    for (HurrayBuffer b : bufs) {
      assertTrue(b.isOpen(), "a failed batch closed a buffer");
    }

    HurrayBuffer keep = bufs.get(1).share();
    long[] out = HurrayBuffer.toDLPackVersionedAll(bufs);
    for (int i = 0; i < 3; i++) {
      assertFalse(bufs.get(i).isOpen());
      assertEquals(addr[i], TestProducer.firstByte(out[i]), "tensor " + i + " is its memory");
    }
    final HurrayBuffer first = bufs.get(0);
    assertThrows(IllegalStateException.class, first::shape);
    assertEquals(0, TestProducer.deleterCalls());
    assertEquals(3.0, TestProducer.consumeVersioned(out[0]));
    assertEquals(1, TestProducer.deleterCalls());
    List<HurrayBuffer> back = HurrayBuffer.fromDLPackVersionedAll(out[1], out[2]);
    assertEquals(9f, back.get(1).getFloat(0));
    HurrayBuffer.closeAll(back);
    assertEquals(2, TestProducer.deleterCalls(), "tensor 1 is still shared");
    keep.close();
    assertEquals(3, TestProducer.deleterCalls());
    assertEquals(0, HurrayBuffer.toDLPackVersionedAll(List.of()).length);
  }

  @Test
  void legacyBatchExportOfAReusableBuffer() {
    HurrayBuffer src =
        HurrayBuffer.fromDLPackVersioned(TestProducer.makeVersioned(new long[] {4}, 1f, 0));
    HurrayBuffer dst = HurrayBuffer.reusable();
    for (int round = 0; round < 3; round++) {
      src.shareInto(dst);
      HurrayBuffer other = src.share();
      long[] out = HurrayBuffer.toDLPackAll(List.of(other, dst));
      assertFalse(dst.isOpen());
      assertFalse(other.isOpen());
      for (long t : out) {
        assertEquals(10.0, TestProducer.consumeLegacy(t));
      }
    }
    assertEquals(0, TestProducer.deleterCalls());
    src.close();
    assertEquals(1, TestProducer.deleterCalls());
  }

  /**
   * An export waiting for another thread's scope holds none of the buffers
   * meanwhile: here the scope's action closes another buffer of the batch
   * (with the batch's locks held while waiting, it could deadlock). The
   * export then finds that buffer closed and changes nothing.
   */
  @Test
  void batchExportWaitsForScopesHoldingNothing() throws Exception {
    List<HurrayBuffer> bufs =
        HurrayBuffer.fromDLPackVersionedAll(
            TestProducer.makeVersioned(new long[] {2}, 1f, 0),
            TestProducer.makeVersioned(new long[] {2}, 1f, 0),
            TestProducer.makeVersioned(new long[] {2}, 1f, 0));
    CountDownLatch inScope = new CountDownLatch(1);
    CountDownLatch exportStarted = new CountDownLatch(1);
    Thread t =
        new Thread(
            () ->
                bufs.get(2)
                    .withBytes(
                        b -> {
                          inScope.countDown();
                          try {
                            exportStarted.await();
                            Thread.sleep(20); // let the export reach its wait
                          } catch (InterruptedException e) {
                            throw new AssertionError(e);
                          }
                          bufs.get(0).close();
                        }));
    t.start();
    inScope.await();
    exportStarted.countDown();
    IllegalStateException e =
        assertThrows(IllegalStateException.class, () -> HurrayBuffer.toDLPackVersionedAll(bufs));
    t.join();
    assertEquals("HurrayBuffer.toDLPackVersionedAll: buffers[0] is closed", e.getMessage());
    assertTrue(bufs.get(1).isOpen() && bufs.get(2).isOpen());
    for (long tensor : HurrayBuffer.toDLPackVersionedAll(bufs.subList(1, 3))) {
      TestProducer.deleteVersioned(tensor);
    }
    assertEquals(3, TestProducer.deleterCalls());
    // Inside this thread's own scope: refused, nothing changes.
    HurrayBuffer x = HurrayBuffer.allocate(F32, new long[] {1}, false);
    x.withBytes(
        b ->
            assertEquals(
                "HurrayBuffer.toDLPackAll: buffers[0] is in a withBytes scope of this thread",
                assertThrows(IllegalStateException.class, () -> HurrayBuffer.toDLPackAll(List.of(x)))
                    .getMessage()));
    assertTrue(x.isOpen());
    x.close();
  }

  /** Two threads export the same buffers in opposite orders, others read them: one wins. */
  @Test
  void racingBatchExports() throws Exception {
    for (int round = 0; round < 100; round++) {
      List<HurrayBuffer> bufs =
          HurrayBuffer.fromDLPackVersionedAll(
              TestProducer.makeVersioned(new long[] {2}, 0f, 0),
              TestProducer.makeVersioned(new long[] {2}, 0f, 0),
              TestProducer.makeVersioned(new long[] {2}, 0f, 0));
      List<HurrayBuffer> reversed = new ArrayList<>(bufs);
      Collections.reverse(reversed);
      AtomicInteger wins = new AtomicInteger();
      AtomicReference<long[]> won = new AtomicReference<>();
      AtomicReference<Throwable> failure = new AtomicReference<>();
      CountDownLatch go = new CountDownLatch(1);
      List<Thread> threads = new ArrayList<>();
      for (List<HurrayBuffer> batch : List.of(bufs, reversed)) {
        threads.add(
            new Thread(
                () -> {
                  try {
                    go.await();
                    won.set(HurrayBuffer.toDLPackVersionedAll(batch));
                    wins.incrementAndGet();
                  } catch (IllegalStateException expected) {
                    // the other batch won
                  } catch (Throwable e) {
                    failure.set(e);
                  }
                }));
        threads.add(
            new Thread(
                () -> {
                  try {
                    go.await();
                    batch.get(0).withBytes(b -> b.get(0));
                  } catch (IllegalStateException expected) {
                    // exported already
                  } catch (Throwable e) {
                    failure.set(e);
                  }
                }));
      }
      threads.forEach(Thread::start);
      go.countDown();
      for (Thread t : threads) {
        t.join();
      }
      assertEquals(null, failure.get());
      assertEquals(1, wins.get(), "round " + round);
      for (long t : won.get()) {
        TestProducer.deleteVersioned(t);
      }
    }
    assertEquals(300, TestProducer.deleterCalls());
  }

  @Test
  void groupIsOneAllocationFreedAfterTheLastInEveryOrder() throws Exception {
    int before = memfdMaps();
    int[][] orders = permutations(4);
    assertEquals(24, orders.length);
    for (int[] order : orders) {
      List<HurrayBuffer> g = HurrayBuffer.allocateGroup(groupDescs(), true);
      assertEquals(before + 1, memfdMaps(), "one memfd for the group");
      for (int i = 0; i < 4; i++) {
        HurrayBuffer.TensorDesc d = groupDescs().get(i);
        assertEquals(d.dtype(), g.get(i).dtype());
        assertArrayEquals(d.shape(), g.get(i).shape());
        assertEquals(d.readOnly(), g.get(i).readOnly());
      }
      for (int k = 0; k < 4; k++) {
        g.get(order[k]).close();
        assertEquals(k == 3 ? before : before + 1, memfdMaps(), "after " + (k + 1) + " closes");
      }
    }
  }

  /** Offsets 0, 256, 512, 512 (float32[2,3], uint8[5], an empty tensor, float64[4,4]). */
  @Test
  void groupOffsetsAndAlignment() {
    List<HurrayBuffer> g = HurrayBuffer.allocateGroup(groupDescs(), false);
    List<HurrayBuffer> shares = new ArrayList<>();
    for (HurrayBuffer b : g) {
      shares.add(b.share());
    }
    long[] ts = HurrayBuffer.toDLPackVersionedAll(shares);
    long base = TestProducer.firstByte(ts[0]);
    assertEquals(0, base % HurrayBuffer.GROUP_ALIGNMENT);
    assertEquals(256, TestProducer.firstByte(ts[1]) - base);
    assertEquals(512, TestProducer.firstByte(ts[3]) - base);
    for (long t : ts) {
      TestProducer.deleteVersioned(t);
    }
    g.get(0).putFloat(5, 2.5f);
    assertEquals(2.5f, g.get(0).getFloat(5));
    assertThrows(java.nio.ReadOnlyBufferException.class, () -> g.get(3).putDouble(0, 1.0));
    HurrayBuffer.closeAll(g);
  }

  /** Members closed on other threads, one kept shared: the memory goes after the last. */
  @Test
  void groupMembersReleasedFromThreads() throws Exception {
    int before = memfdMaps();
    List<HurrayBuffer.TensorDesc> descs = new ArrayList<>();
    for (int i = 0; i < 16; i++) {
      descs.add(new HurrayBuffer.TensorDesc(F32, new long[] {4}, false));
    }
    List<HurrayBuffer> g = HurrayBuffer.allocateGroup(descs, true);
    for (int i = 0; i < 16; i++) {
      g.get(i).putFloat(0, i);
    }
    HurrayBuffer kept = g.get(7).share();
    List<Thread> threads = new ArrayList<>();
    for (int t = 0; t < 4; t++) {
      final int start = t;
      threads.add(
          new Thread(
              () -> {
                for (int i = start; i < 16; i += 4) {
                  g.get(i).close();
                }
              }));
    }
    threads.forEach(Thread::start);
    for (Thread t : threads) {
      t.join();
    }
    assertEquals(before + 1, memfdMaps());
    assertEquals(7f, kept.getFloat(0));
    kept.close();
    assertEquals(before, memfdMaps());
  }

  @Test
  void groupBadDescriptionsNameTheIndex() throws Exception {
    int before = memfdMaps();
    List<HurrayBuffer.TensorDesc> d = new ArrayList<>(groupDescs());
    d.set(2, new HurrayBuffer.TensorDesc(F64, new long[] {-3}, false));
    HurrayException e =
        assertThrows(HurrayException.class, () -> HurrayBuffer.allocateGroup(d, true));
    assertEquals(HurrayException.INVALID_ARGUMENT, e.status());
    assertEquals(2, e.index());
    assertEquals(
        "HurrayBuffer.allocateGroup: descs[2].shape[0] is -3 (must be >= 0)"
            + " [HURRAY_ERR_INVALID_ARGUMENT]",
        e.getMessage());
    List<HurrayBuffer.TensorDesc> d2 = new ArrayList<>(groupDescs());
    d2.set(1, new HurrayBuffer.TensorDesc(new HurrayBuffer.DType(2, 33, 1), new long[] {1}, false));
    e = assertThrows(HurrayException.class, () -> HurrayBuffer.allocateGroup(d2, true));
    assertEquals(HurrayException.UNSUPPORTED_DTYPE, e.status());
    assertEquals(1, e.index());
    assertEquals(
        "HurrayBuffer.allocateGroup: descs[1].dtype.bits is 33, which is not valid for dtype"
            + " code 2 [HURRAY_ERR_UNSUPPORTED_DTYPE]",
        e.getMessage());
    List<HurrayBuffer.TensorDesc> d3 = new ArrayList<>(groupDescs());
    d3.set(0, new HurrayBuffer.TensorDesc(F32, new long[] {1L << 40, 1L << 30}, false));
    e = assertThrows(HurrayException.class, () -> HurrayBuffer.allocateGroup(d3, true));
    assertEquals(HurrayException.OVERFLOW, e.status());
    assertEquals(0, e.index());
    List<HurrayBuffer.TensorDesc> d4 = new ArrayList<>(groupDescs());
    d4.set(3, new HurrayBuffer.TensorDesc(F32, new long[65], false));
    IllegalArgumentException iae =
        assertThrows(IllegalArgumentException.class, () -> HurrayBuffer.allocateGroup(d4, true));
    assertEquals(
        "HurrayBuffer.allocateGroup: descs[3] has 65 extents (HURRAY_MAX_NDIM is 64)",
        iae.getMessage());
    List<HurrayBuffer.TensorDesc> d5 = new ArrayList<>(groupDescs());
    d5.set(1, null);
    NullPointerException npe =
        assertThrows(NullPointerException.class, () -> HurrayBuffer.allocateGroup(d5, true));
    assertEquals("HurrayBuffer.allocateGroup: descs[1] is null", npe.getMessage());
    assertEquals(before, memfdMaps(), "nothing stays allocated");
    assertTrue(HurrayBuffer.allocateGroup(List.of(), false).isEmpty());
    assertEquals(-1, new HurrayException(1, "HURRAY_ERR_INVALID_ARGUMENT", "x").index());
  }

  /** Members never closed: the Cleaner releases each (counted), the memory after the last. */
  @Test
  void groupCleanerSafetyNet() throws Exception {
    int before = memfdMaps();
    long cleaned = HurrayBuffer.cleanerReleases();
    HurrayBuffer kept = dropAllButOne();
    long deadline = System.nanoTime() + 10_000_000_000L;
    while (HurrayBuffer.cleanerReleases() - cleaned < 3 && System.nanoTime() < deadline) {
      System.gc();
      Thread.sleep(10);
    }
    assertTrue(HurrayBuffer.cleanerReleases() - cleaned >= 3, "the Cleaner released the three");
    assertEquals(before + 1, memfdMaps(), "the kept member holds the memory");
    kept.close();
    assertEquals(before, memfdMaps());
  }

  private static HurrayBuffer dropAllButOne() {
    return HurrayBuffer.allocateGroup(groupDescs(), true).get(2);
  }

  private static int[][] permutations(int n) {
    List<int[]> out = new ArrayList<>();
    permute(new int[n], new boolean[n], 0, out);
    return out.toArray(new int[0][]);
  }

  private static void permute(int[] cur, boolean[] used, int k, List<int[]> out) {
    if (k == cur.length) {
      out.add(cur.clone());
      return;
    }
    for (int i = 0; i < cur.length; i++) {
      if (!used[i]) {
        used[i] = true;
        cur[k] = i;
        permute(cur, used, k + 1, out);
        used[i] = false;
      }
    }
  }
}
