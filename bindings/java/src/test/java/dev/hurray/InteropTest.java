// SPDX-License-Identifier: Apache-2.0
package dev.hurray;

import static org.junit.jupiter.api.Assertions.assertArrayEquals;
import static org.junit.jupiter.api.Assertions.assertEquals;

import java.util.ArrayList;
import java.util.List;
import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.condition.EnabledIfSystemProperty;
import org.junit.jupiter.api.extension.ExtendWith;

/**
 * One tensor made in C, shared to a Go consumer (the hurray Go package in a
 * c-shared library loaded into this JVM) and to Java consumers; each side
 * releases on its own threads, concurrently. The producer's deleter must run
 * once, after all 16 releases began.
 *
 * <p>Self-contained: it needs no other test to have run first (it
 * used to pass only on a thread an earlier test had already used). Each
 * round runs on a new thread whose first libhurray call is the Java import
 * and share, and checks the shares' fields before handing them on.
 * bindings/run_tests.sh also runs this class alone.
 */
@EnabledIfSystemProperty(named = "hurray.go.consumer", matches = ".+")
@ExtendWith(NativeLibs.class)
class InteropTest {
  @BeforeEach
  void reset() {
    TestProducer.reset();
  }

  @Test
  void cTensorSharedToGoAndJava() throws Exception {
    String goLib = System.getProperty("hurray.go.consumer");
    for (int round = 0; round < 20; round++) {
      final int r = round;
      FreshThread.call("interop-round-" + round, () -> oneRound(goLib, r));
    }
  }

  private static Void oneRound(String goLib, int round) throws Exception {
    TestProducer.reset();
    long tensor = TestProducer.makeVersioned(new long[] {4, 8}, 1f, 0);
    HurrayBuffer owner = HurrayBuffer.fromDLPackVersioned(tensor);
    HurrayBuffer[] javaSide = owner.share(8);
    for (HurrayBuffer b : javaSide) {
      assertArrayEquals(new long[] {4, 8}, b.shape(), "a Java share's shape, round " + round);
      assertArrayEquals(new long[] {8, 1}, b.strides(), "a Java share's strides, round " + round);
    }
    assertArrayEquals(new long[] {4, 8}, owner.shape(), "the owner's shape after share");
    long forGo = owner.toDLPackVersioned(); // the owner's reference goes to Go
    double goSum = TestProducer.goConsume(goLib, forGo, 8); // Go releases on 8 goroutines
    List<Thread> threads = new ArrayList<>();
    for (HurrayBuffer b : javaSide) {
      Thread t =
          new Thread(
              () -> {
                Thread.yield();
                TestProducer.noteRelease();
                b.close();
              });
      t.start();
      threads.add(t);
    }
    for (Thread t : threads) {
      t.join();
    }
    TestProducer.goWait();
    assertEquals(32 * 33 / 2.0, goSum, "sum of 1..32 read by Go");
    assertEquals(1, TestProducer.deleterCalls(), "producer deleter calls, round " + round);
    assertEquals(16, TestProducer.notesAtDelete(), "the deleter did not run last");
    return null;
  }
}
