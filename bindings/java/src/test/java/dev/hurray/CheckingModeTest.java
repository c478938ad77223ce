// SPDX-License-Identifier: Apache-2.0
package dev.hurray;

import static org.junit.jupiter.api.Assertions.assertEquals;
import static org.junit.jupiter.api.Assertions.assertNotEquals;

import org.junit.jupiter.api.BeforeEach;
import org.junit.jupiter.api.Test;
import org.junit.jupiter.api.condition.EnabledIfEnvironmentVariable;
import org.junit.jupiter.api.extension.ExtendWith;

/**
 * Under HURRAY_CHECK (bindings/run_tests.sh runs the suite once so): the
 * checking mode is really on in this JVM, and it sees every handle the Java
 * binding makes released once.
 */
@EnabledIfEnvironmentVariable(named = "HURRAY_CHECK", matches = ".+")
@ExtendWith(NativeLibs.class)
class CheckingModeTest {
  private static final int OPTIONS = 0;
  private static final int LIVE = 1;
  private static final int DOUBLE_RELEASES = 3;

  private static long[] state() {
    HurrayBuffer.allocate(HurrayBuffer.DType.UINT8, new long[] {1}, false).close(); // loads libhurray
    return TestProducer.checkState(System.getProperty("hurray.library"));
  }

  @BeforeEach
  void reset() {
    TestProducer.reset();
  }

  @Test
  void javaHandlesAreTrackedAndReleasedOnce() {
    long[] before = state();
    assertNotEquals(0, before[OPTIONS], "HURRAY_CHECK is set but the checking mode is off");
    HurrayBuffer b =
        HurrayBuffer.fromDLPackVersioned(TestProducer.makeVersioned(new long[] {2, 3}, 0f, 0));
    HurrayBuffer[] more = b.share(3);
    assertEquals(before[LIVE] + 4, state()[LIVE], "the import's share and 3 more are live");
    long t = more[0].toDLPackVersioned(); // leaves the checker: the tensor's consumer owns it
    assertEquals(before[LIVE] + 3, state()[LIVE]);
    assertEquals(15.0, TestProducer.consumeVersioned(t));
    more[1].close();
    more[2].close();
    more[2].close();
    b.close();
    long[] after = state();
    assertEquals(before[LIVE], after[LIVE], "a Java handle is still live");
    assertEquals(before[DOUBLE_RELEASES], after[DOUBLE_RELEASES], "a double release");
    assertEquals(1, TestProducer.deleterCalls());
  }
}
