// SPDX-License-Identifier: Apache-2.0
package dev.hurray;

import java.lang.ref.Cleaner;
import java.util.Arrays;

/**
 * Cost of {@code share(1)} + {@code close()} of the share, beside a trivial
 * JNI call, in nanoseconds per operation: a plain timing loop (no JMH).
 * Each case is warmed up, then timed in several batches; the median batch
 * and the fastest are printed. Prints numbers only, checks no threshold.
 *
 * <pre>
 *   java -cp classes:test-classes [-Dhurray.jni.library=...] dev.hurray.ShareCloseBench [short]
 * </pre>
 *
 * "short" (bindings/run_tests.sh) runs fewer and smaller batches.
 */
public final class ShareCloseBench {
  private static volatile long sink;

  private ShareCloseBench() {}

  private interface Op {
    void run(int n);
  }

  private static void measure(String name, Op op, int batch, int batches) {
    op.run(batch * 4); // warm-up: let the JIT compile the loop and the callees
    double[] ns = new double[batches];
    for (int b = 0; b < batches; b++) {
      long t0 = System.nanoTime();
      op.run(batch);
      ns[b] = (System.nanoTime() - t0) / (double) batch;
    }
    Arrays.sort(ns);
    System.out.printf("ShareCloseBench %-26s median %7.1f ns/op  min %7.1f ns/op  (%d x %d)%n",
        name, ns[batches / 2], ns[0], batches, batch);
  }

  /**
   * Runs the benchmark.
   *
   * @param args "short" for the quick mode
   */
  public static void main(String[] args) {
    boolean quick = args.length > 0 && args[0].equals("short");
    int batch = quick ? 200_000 : 2_000_000;
    int batches = quick ? 5 : 11;
    try (HurrayBuffer buf = HurrayBuffer.allocate(HurrayBuffer.DType.FLOAT32, new long[] {2, 3}, false)) {
      measure("trivial JNI call", n -> {
        long s = 0;
        for (int i = 0; i < n; i++) {
          s += Native.isLive(0L) ? 1 : 0;
        }
        sink = s;
      }, batch, batches);
      measure("share(1)+close", n -> {
        for (int i = 0; i < n; i++) {
          buf.share(1)[0].close();
        }
      }, batch, batches);
      HurrayBuffer dst = HurrayBuffer.reusable();
      measure("shareInto+close (reusable)", n -> {
        for (int i = 0; i < n; i++) {
          buf.shareInto(dst);
          dst.close();
        }
      }, batch, batches);
      // Its parts, for docs/performance.md: the JNI calls alone, and a
      // Cleaner registration with its clean().
      long h = Native.alloc(2, 32, 1, new long[] {2, 3}, false);
      measure("  JNI share1+release only", n -> {
        for (int i = 0; i < n; i++) {
          Native.release(Native.share1(h));
        }
      }, batch, batches);
      Native.release(h);
      Cleaner cleaner = Cleaner.create();
      Runnable nothing = () -> {};
      measure("  Cleaner register+clean", n -> {
        for (int i = 0; i < n; i++) {
          cleaner.register(new Object(), nothing).clean();
        }
      }, batch, batches);
      measure("shape()", n -> {
        long s = 0;
        for (int i = 0; i < n; i++) {
          s += buf.shape().length;
        }
        sink = s;
      }, batch, batches);
    }
  }
}
