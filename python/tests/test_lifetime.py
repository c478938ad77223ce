# SPDX-License-Identifier: Apache-2.0
"""Exactly-once release: the source is freed once, after the last holder,
whatever the order, whichever thread lets go last, and at shutdown."""

import gc
import os
import subprocess
import sys
import textwrap
import threading
import weakref
from typing import Any, List, Tuple, Type

import numpy as np
import pytest

import hurray

from conftest import CountingProducer
from hurray_test_aid import release_on_native_thread

MAIN = threading.get_ident()


class Watch:
    """weakref.finalize on the source array, recording calls and threads."""

    def __init__(self, obj: object) -> None:
        self.calls: List[int] = []
        self.done = threading.Event()
        weakref.finalize(obj, self._fired)

    def _fired(self) -> None:
        self.calls.append(threading.get_ident())
        self.done.set()

    @property
    def count(self) -> int:
        return len(self.calls)


def make_source(n: int = 1024) -> Tuple[Any, "Watch", int]:
    a = np.arange(n, dtype=np.float32)
    return a, Watch(a), a.ctypes.data


@pytest.mark.parametrize("order", ["forward", "reverse", "middle-last"])
def test_source_freed_once_after_last_of_n_consumers(order: Any) -> None:
    a, watch, addr = make_source()
    buf = hurray.from_dlpack(a)
    del a
    consumers = buf.share(4)
    buf.release()
    # Each consumer goes to NumPy; the Buffers themselves are dropped at once.
    arrays = [np.from_dlpack(c) for c in consumers]
    del consumers
    assert all(x.ctypes.data == addr for x in arrays)
    idx = list(range(len(arrays)))
    if order == "reverse":
        idx.reverse()
    elif order == "middle-last":
        idx = [0, 1, 3, 2]
    slots = dict(enumerate(arrays))
    del arrays
    for step, i in enumerate(idx):
        assert watch.count == 0, f"freed early, before dropping consumer #{step}"
        del slots[i]
    assert watch.count == 1


def test_buffer_and_capsules_each_hold_a_reference() -> None:
    a, watch, _ = make_source()
    buf = hurray.from_dlpack(a)
    del a
    caps = [buf.__dlpack__(max_version=(1, 3)), buf.__dlpack__()]
    views = [np.from_dlpack(buf) for _ in range(3)]
    buf.release()
    assert watch.count == 0
    caps.pop()  # an unconsumed capsule: its destructor drops its reference
    assert watch.count == 0
    views.clear()
    assert watch.count == 0
    caps.clear()
    assert watch.count == 1


def test_release_before_and_after_gc_are_the_same_single_release() -> None:
    a, watch, _ = make_source()
    with hurray.from_dlpack(a) as buf:
        del a
        keep = buf.share(1)[0]
    assert watch.count == 0
    del buf
    gc.collect()
    assert watch.count == 0
    keep.release()
    assert watch.count == 1
    del keep
    gc.collect()
    assert watch.count == 1


def test_last_release_on_a_python_thread() -> None:
    a, watch, _ = make_source()
    parts = hurray.from_dlpack(a).share(3)
    del a
    parts[0].release()
    parts[1].release()
    last = parts.pop()
    parts.clear()
    t = threading.Thread(target=last.release)
    t.start()
    t.join()
    assert watch.count == 1
    assert watch.calls[0] == t.ident


def test_many_threads_race_to_release() -> None:
    for _ in range(20):
        a, watch, _ = make_source(64)
        parts = hurray.from_dlpack(a).share(8)
        del a
        barrier = threading.Barrier(len(parts))

        def drop(p: hurray.Buffer, barrier: threading.Barrier = barrier) -> None:
            barrier.wait()
            p.release()

        threads = [threading.Thread(target=drop, args=(p,)) for p in parts]
        del parts
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert watch.count == 1


def test_last_release_on_a_native_thread() -> None:
    a, watch, _ = make_source()
    parts = hurray.from_dlpack(a).share(3)
    del a
    parts[0].release()
    view = np.from_dlpack(parts[1])  # a NumPy consumer, dropped before
    del view
    parts[1].release()
    assert watch.count == 0
    # The last handle is released by a pthread Python has never seen; the
    # caller waits with the GIL released, so the release must take it itself.
    release_on_native_thread(parts[2])
    assert parts[2].released
    assert watch.count == 1
    assert watch.calls[0] != MAIN
    assert watch.calls[0] not in {t.ident for t in threading.enumerate()}


def test_consumer_deleting_our_capsule_on_a_native_thread() -> None:
    """A consumer framework deleting the DLPack tensor (the capsule's
    deleter) from its own thread, as the last holder."""
    a, watch, _ = make_source()
    buf = hurray.from_dlpack(a)
    del a
    caps = [buf.__dlpack__(max_version=(1, 3)), buf.__dlpack__()]
    buf.release()
    release_on_native_thread(caps[0])
    assert watch.count == 0
    release_on_native_thread(caps[1])
    assert watch.count == 1
    assert watch.calls[0] != MAIN


def test_detached_native_release_while_python_keeps_running() -> None:
    a, watch, _ = make_source()
    buf = hurray.from_dlpack(a)
    del a
    release_on_native_thread(buf, delay=0.5, wait=False)
    assert watch.count == 0  # the GIL is ours; the thread has to wait for it
    assert watch.done.wait(10)
    assert watch.count == 1


def test_counting_producer_deleter_runs_exactly_once(
    counting_producer: Type[CountingProducer],
) -> None:
    p = counting_producer(n=16)
    buf = hurray.from_dlpack(p.capsule())
    assert buf.data_ptr == p.address and buf.dtype == "float64"
    parts = buf.share(5)
    buf.release()
    arrays = [np.from_dlpack(x) for x in parts[:2]]
    arrays[0][3] = 42.0
    assert p.memory[3] == 42.0
    for x in parts[2:4]:
        x.release()
    threading.Thread(target=parts[1].release).start()
    parts[0].release()
    assert p.deleted == 0
    arrays.clear()
    assert p.deleted == 0
    release_on_native_thread(parts[4])
    assert p.deleted == 1
    del parts
    gc.collect()
    assert p.deleted == 1


def test_counting_producer_unconsumed_capsule_is_deleted_once(
    counting_producer: Type[CountingProducer],
) -> None:
    p = counting_producer()
    cap = p.capsule()
    del cap
    gc.collect()
    assert p.deleted == 1


def test_unsupported_version_leaves_the_capsule_owning_the_tensor(
    counting_producer: Type[CountingProducer],
) -> None:
    p = counting_producer(version=(2, 0))
    cap = p.capsule()
    with pytest.raises(BufferError, match="version"):
        hurray.from_dlpack(cap)
    assert p.deleted == 0  # still the capsule's to delete
    from conftest import capsule_name

    assert capsule_name(cap) == "dltensor_versioned"
    del cap
    gc.collect()
    assert p.deleted == 1


def test_newer_minor_version_is_accepted(counting_producer: Type[CountingProducer]) -> None:
    p = counting_producer(version=(1, 9))
    buf = hurray.from_dlpack(p.capsule())
    assert buf.shape == (8,)
    buf.release()
    assert p.deleted == 1


def test_read_only_flag_of_a_raw_capsule(counting_producer: Type[CountingProducer]) -> None:
    p = counting_producer(flags=1)
    buf = hurray.from_dlpack(p.capsule())
    assert buf.readonly
    assert not np.from_dlpack(buf).flags.writeable


SHUTDOWN_SCRIPT = textwrap.dedent(
    """
    import sys, numpy as np, hurray
    from hurray_test_aid import release_on_native_thread
    mode, delay = sys.argv[1], float(sys.argv[2])
    a = np.ones(1 << 16, dtype=np.float64)
    buf = hurray.from_dlpack(a)
    parts = buf.share(3)
    views = [np.from_dlpack(p) for p in parts]
    if mode == "native":
        # The last handle is released by a detached native thread, while or
        # after the interpreter shuts down.
        for p in parts[1:]:
            p.release()
        del views, a
        buf.release()
        release_on_native_thread(parts[0], delay=delay, wait=False)
    elif mode == "capsule":
        cap = buf.__dlpack__(max_version=(1, 3))
        release_on_native_thread(cap, delay=delay, wait=False)
    # mode "globals": everything is left for interpreter teardown.
    print("exiting", flush=True)
    """
)


@pytest.mark.parametrize("mode", ["globals", "native", "capsule"])
@pytest.mark.parametrize("delay", [0.0, 0.001, 0.01, 0.2])
def test_releases_during_interpreter_shutdown_do_not_crash(mode: str, delay: float) -> None:
    r = subprocess.run(
        [sys.executable, "-c", SHUTDOWN_SCRIPT, mode, str(delay)],
        capture_output=True,
        text=True,
        timeout=60,
        env=dict(os.environ, PYTHONFAULTHANDLER="1"),
    )
    assert r.returncode == 0, r.stderr
    assert "exiting" in r.stdout
    assert "Fatal" not in r.stderr and "Traceback" not in r.stderr, r.stderr
