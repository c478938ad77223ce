// SPDX-License-Identifier: Apache-2.0
package dev.hurray;

/**
 * A failed libhurray call: the status code of {@code hurray.h} (1 =
 * HURRAY_ERR_INVALID_ARGUMENT ... 13 = HURRAY_ERR_IPC_TIMEOUT), its name and
 * libhurray's message for that call. Unchecked. A failed call consumes
 * nothing: the buffer or tensor passed in is still the caller's.
 */
public final class HurrayException extends RuntimeException {
  private static final long serialVersionUID = 1L;

  /** HURRAY_ERR_INVALID_ARGUMENT. */
  public static final int INVALID_ARGUMENT = 1;
  /** HURRAY_ERR_UNSUPPORTED_VERSION. */
  public static final int UNSUPPORTED_VERSION = 2;
  /** HURRAY_ERR_UNSUPPORTED_DTYPE. */
  public static final int UNSUPPORTED_DTYPE = 3;
  /** HURRAY_ERR_UNSUPPORTED_DEVICE. */
  public static final int UNSUPPORTED_DEVICE = 4;
  /** HURRAY_ERR_OUT_OF_MEMORY. */
  public static final int OUT_OF_MEMORY = 5;
  /** HURRAY_ERR_OVERFLOW. */
  public static final int OVERFLOW = 6;
  /** HURRAY_ERR_DEVICE. */
  public static final int DEVICE = 7;
  /** HURRAY_ERR_INTERNAL. */
  public static final int INTERNAL = 8;
  /** HURRAY_ERR_RELEASED: checking mode, the handle was already released. */
  public static final int RELEASED = 9;
  /** HURRAY_ERR_LEAKED: checking mode, a handle still live at exit (hook only). */
  public static final int LEAKED = 10;
  /** HURRAY_ERR_IPC: cross-process, a malformed or refused message or a failed socket call. */
  public static final int IPC = 11;
  /** HURRAY_ERR_IPC_CLOSED: cross-process, the peer closed the connection. */
  public static final int IPC_CLOSED = 12;

  /** HURRAY_ERR_IPC_TIMEOUT: cross-process, no message began in time; nothing consumed. */
  public static final int IPC_TIMEOUT = 13;

  /** The hurray_status code, never 0 (part of the serial form). */
  private final int status;
  /** The status code's name (part of the serial form). */
  private final String statusName;
  /** The element a batched call failed at, or -1 (part of the serial form). */
  private final long index;

  /**
   * Makes the exception (the JNI library does, for each failed call).
   *
   * @param status the hurray_status value
   * @param statusName its name, e.g. "HURRAY_ERR_OVERFLOW"
   * @param message libhurray's message, prefixed with the Java method
   */
  public HurrayException(int status, String statusName, String message) {
    this(status, statusName, message, -1);
  }

  /**
   * Makes the exception of a batched call that failed at element {@code index}.
   *
   * @param status the hurray_status value
   * @param statusName its name, e.g. "HURRAY_ERR_OVERFLOW"
   * @param message libhurray's message (naming the element), prefixed with the Java method
   * @param index the element at fault, or -1 when none is
   */
  public HurrayException(int status, String statusName, String message, long index) {
    super(message + " [" + statusName + "]");
    this.status = status;
    this.statusName = statusName;
    this.index = index;
  }

  /**
   * @return the index of the element a batched call ({@code fromDLPackVersionedAll},
   *     {@code toDLPackVersionedAll}, {@code allocateGroup}, ...) failed at; -1 when
   *     the failure is no element's, and for every other call
   */
  public long index() {
    return index;
  }

  /** @return the hurray_status code (never 0) */
  public int status() {
    return status;
  }

  /** @return the status code's name, e.g. "HURRAY_ERR_INVALID_ARGUMENT" */
  public String statusName() {
    return statusName;
  }
}
