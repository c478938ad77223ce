# SPDX-License-Identifier: Apache-2.0
"""The main job of libhurray, on real input.

One NumPy array (a 1024x1024 float32 "image") becomes a Hurray buffer, is
shared with three consumers, and each consumer is handed to a different
framework: NumPy, TVM FFI and JAX (a second NumPy view stands in for a
framework that is not installed). The script shows that

  * every consumer sees the same memory (same address; a write made through
    one is seen through the others), with no copy anywhere, and
  * dropping the consumers one by one frees the source memory exactly once,
    right after the last one is gone.

It prints a short report and exits non-zero if any check fails.
Run it with `bash examples/run_demo.sh` (which installs what it needs).
"""

import gc
import sys
import weakref
from typing import Any, Callable, List, Tuple

import numpy as np

import hurray

SIZE = 1024
failures: List[str] = []


def check(ok: bool, what: str) -> str:
    if not ok:
        failures.append(what)
    return "ok" if ok else "FAILED"


def aligned_image(n: int, alignment: int = 64) -> Tuple[Any, Any]:
    """An n x n float32 array whose data starts on an `alignment`-byte
    boundary. JAX takes CPU memory without copying only when it is aligned
    like this; libhurray itself needs no alignment. Returns (image, owner):
    `owner` is the array that allocated (and will free) the memory."""
    nbytes = n * n * 4
    owner = np.empty(nbytes + alignment, dtype=np.uint8)
    start = (-owner.ctypes.data) % alignment
    image = owner[start : start + nbytes].view(np.float32).reshape(n, n)
    return image, owner


# --- the three frameworks ---------------------------------------------------

# (name, framework object, address, read(i, j)) of one consumer
Consumer = Tuple[str, Any, int, Callable[[int, int], float]]


def numpy_consumer(buf: hurray.Buffer) -> Consumer:
    arr = np.from_dlpack(buf)
    return "NumPy", arr, arr.ctypes.data, lambda i, j: float(arr[i, j])


def tvm_consumer(buf: hurray.Buffer) -> Consumer:
    try:
        import tvm_ffi
    except ImportError:
        name, arr, addr, read = numpy_consumer(buf)
        return "NumPy (2nd view; apache-tvm-ffi not installed)", arr, addr, read
    t = tvm_ffi.from_dlpack(buf)
    # TVM FFI tensors have no element access of their own: read through a
    # DLPack view of the TVM tensor (itself zero-copy).
    return "TVM FFI", t, t.data_ptr(), lambda i, j: float(np.from_dlpack(t)[i, j])


def jax_consumer(buf: hurray.Buffer) -> Consumer:
    try:
        import jax
        import jax.numpy as jnp
    except ImportError:
        name, arr, addr, read = numpy_consumer(buf)
        return "NumPy (3rd view; jax not installed)", arr, addr, read
    jax.config.update("jax_platforms", "cpu")  # type: ignore[no-untyped-call]
    j = jnp.from_dlpack(buf)
    return (
        f"JAX {jax.__version__} (cpu)",
        j,
        j.unsafe_buffer_pointer(),
        lambda i, j_: float(j[i, j_]),
    )


def main() -> int:
    print(
        f"hurray {hurray.__version__} (libhurray {hurray.libhurray_version}): "
        "swap one tensor between three frameworks\n"
    )

    # The source: a real image-like matrix, owned by NumPy.
    image, owner = aligned_image(SIZE)
    image[...] = np.linspace(0.0, 1.0, SIZE * SIZE, dtype=np.float32).reshape(SIZE, SIZE)
    source_addr = image.ctypes.data
    released: List[str] = []  # one entry per time NumPy frees the source memory
    weakref.finalize(owner, released.append, "freed")

    buf = hurray.from_dlpack(image)
    print(
        f"source      numpy.ndarray {image.shape} {image.dtype}, {image.nbytes / 2**20:.1f} MiB "
        f"at 0x{source_addr:x}"
    )
    print(
        f"buffer      {buf!r}  strides {buf.strides} (elements), "
        f"same address: {check(buf.data_ptr == source_addr, 'buffer address')}"
    )
    del image, owner  # from here on only the Hurray buffers keep the memory alive

    consumers = buf.share(3)
    buf.release()  # the fan-out's three consumers are now the only holders
    handed = [make(c) for make, c in zip((numpy_consumer, tvm_consumer, jax_consumer), consumers)]
    del consumers  # each framework's object now holds its consumer's reference

    width = max(len(h[0]) for h in handed)
    print("\nconsumers")
    for k in range(len(handed)):  # (no loop variable may keep a consumer alive)
        name, addr = handed[k][0], handed[k][2]
        print(
            f"  {k + 1}. {name:<{width}} at 0x{addr:x}  same memory: "
            f"{check(addr == source_addr, f'consumer {k + 1} address')}"
        )

    print("\nwrites")
    np_view = handed[0][1]
    np_view[0, 0] = 42.0
    seen = [read(0, 0) for _, _, _, read in handed]
    print(
        f"  via {handed[0][0]}: [0, 0] = 42     -> read back by all three: {seen}  "
        f"{check(seen == [42.0] * 3, 'write through NumPy')}"
    )
    if handed[1][0] == "TVM FFI":
        writer, wname = np.from_dlpack(handed[1][1]), "TVM FFI"
    else:
        writer, wname = handed[1][1], handed[1][0]
    writer[511, 511] = -7.5
    del writer
    seen = [read(511, 511) for _, _, _, read in handed]
    print(
        f"  via {wname}: [511, 511] = -7.5 -> read back by all three: {seen}  "
        f"{check(seen == [-7.5] * 3, f'write through {wname}')}"
    )
    del np_view

    print("\nrelease, one consumer at a time")
    while handed:
        name = handed[0][0]
        handed.pop(0)
        gc.collect()
        left = len(handed)
        if left:
            still = f"{left} consumer{'s' if left > 1 else ''}"
            state = f"source still held ({still} left), times freed: {len(released)}"
            ok = check(len(released) == 0, f"source freed early, after dropping {name}")
        else:
            state = f"last consumer gone -> source freed, times freed: {len(released)}"
            ok = check(len(released) == 1, "source not freed after the last consumer")
        print(f"  drop {name:<{width}}  {state}  {ok}")
    gc.collect()
    print(
        f"\nafter a full GC the source was freed {len(released)} time(s): "
        f"{check(len(released) == 1, 'freed exactly once')}"
    )

    if failures:
        print("\nFAILED: " + "; ".join(failures))
        return 1
    print(
        "\nall checks passed: zero copies, one shared address, "
        "freed exactly once after the last consumer"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
