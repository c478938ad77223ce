// SPDX-License-Identifier: Apache-2.0
package dev.hurray;

/**
 * Run by {@link LoadFailureTest} in a JVM of its own whose native libraries
 * cannot load: uses the binding twice and prints, per use, one line
 * "use N: CLASS: MESSAGE | cause CLASS: MESSAGE" (or "use N: ok").
 */
public final class LoadFailureMain {
  private LoadFailureMain() {}

  /**
   * Runs the two uses.
   *
   * @param args unused
   */
  public static void main(String[] args) {
    for (int use = 1; use <= 2; use++) {
      try (HurrayBuffer b =
          HurrayBuffer.allocate(HurrayBuffer.DType.UINT8, new long[] {1}, false)) {
        System.out.println("use " + use + ": ok, open " + b.isOpen());
      } catch (Throwable t) {
        Throwable c = t.getCause();
        System.out.println("use " + use + ": " + t.getClass().getName() + ": " + t.getMessage()
            + " | cause " + (c == null ? "none" : c.getClass().getName() + ": " + c.getMessage()));
      }
    }
  }
}
