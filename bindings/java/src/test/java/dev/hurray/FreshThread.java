// SPDX-License-Identifier: Apache-2.0
package dev.hurray;

import java.util.concurrent.Callable;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.FutureTask;

/**
 * Runs a task on a new thread, so that the task's first libhurray call is
 * that thread's first: libhurray's per-thread state (a thread_local) is then
 * touched for the first time inside that call. Test code only.
 */
final class FreshThread {
  private FreshThread() {}

  /**
   * Runs {@code task} on a new thread and waits for it.
   *
   * @return the task's result
   * @throws Exception what the task threw (an Error as itself)
   */
  static <T> T call(String name, Callable<T> task) throws Exception {
    FutureTask<T> f = new FutureTask<>(task);
    Thread t = new Thread(f, name);
    t.start();
    try {
      return f.get();
    } catch (ExecutionException e) {
      Throwable cause = e.getCause();
      if (cause instanceof Error) {
        throw (Error) cause;
      }
      throw (Exception) cause;
    } finally {
      t.join();
    }
  }
}
