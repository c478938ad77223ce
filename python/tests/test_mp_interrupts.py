# SPDX-License-Identifier: Apache-2.0
"""A KeyboardInterrupt (or any exception a signal handler raises) that lands
while a Buffer is being pickled for multiprocessing leaks nothing
(docs/impl/python.md §11): every fd that hurray_ipc_export made, and every
duplicate _fdshare made of them, is closed or held by an owner that closes
it. Each window is hit deterministically by patching the step after it, and
a short stress run raises KeyboardInterrupt from SIGALRM at random points.
"""

import gc
import os
import secrets
import subprocess
import sys
import textwrap
import time
from collections import Counter
from multiprocessing import context
from multiprocessing.reduction import ForkingPickler
from typing import Any, Callable, Iterator, List, Set

import pytest

import hurray
from hurray import _fdshare, _native


def fd_targets() -> List[str]:
    """What every open fd of this process names (pipes, memfds, ...)."""
    out = []
    for name in os.listdir("/proc/self/fd"):
        try:
            out.append(os.readlink(f"/proc/self/fd/{name}"))
        except OSError:  # the listing's own fd
            pass
    return sorted(out)


def memfd_inodes() -> Set[str]:
    """The hurray memfds this process maps."""
    with open("/proc/self/maps") as f:
        return {line.split()[4] for line in f if "memfd:hurray" in line}


def settled(before_fds: List[str], before_maps: Set[str]) -> bool:
    end = time.monotonic() + 5
    while time.monotonic() < end:
        gc.collect()
        if fd_targets() == before_fds and memfd_inodes() == before_maps:
            return True
        time.sleep(0.01)
    return False


@pytest.fixture
def baseline() -> Iterator[Callable[[], None]]:
    """Starts the fd server and libhurray's watcher of exported memory
    first (their sockets and epoll fds are not a leak), then gives a check
    that every fd and memfd mapping is back."""
    _fdshare.offer([])
    warm = hurray.empty((8,), "float32", shared=True)
    for fd in _native._ipc_export(warm)[1]:
        os.close(fd)
    warm.release()
    end = time.monotonic() + 5
    while time.monotonic() < end and "/memfd:hurray (deleted)" in fd_targets():
        time.sleep(0.01)  # the watcher lets go of the warm-up's fds
    gc.collect()
    fds, maps = fd_targets(), memfd_inodes()

    def check() -> None:
        assert settled(fds, maps), (
            Counter(fd_targets()) - Counter(fds),
            Counter(fds) - Counter(fd_targets()),
            memfd_inodes() - maps,
        )

    yield check


def raise_once(real: Callable[..., Any], *, after: bool) -> Callable[..., Any]:
    """real, except that its first call raises KeyboardInterrupt (before
    calling real, or right after it returned: a signal handled there)."""
    calls = [0]

    def wrapper(*args: Any) -> Any:
        calls[0] += 1
        if calls[0] == 1 and not after:
            raise KeyboardInterrupt
        r = real(*args)
        if calls[0] == 1:
            raise KeyboardInterrupt
        return r

    return wrapper


def one_buffer() -> Any:
    return hurray.empty((1 << 20,), "float32", shared=True)


def a_set() -> Any:
    return hurray.BufferList([one_buffer(), hurray.empty((64,), "float64", shared=True)])


def release(obj: Any) -> None:
    for b in obj if isinstance(obj, hurray.BufferList) else [obj]:
        b.release()


@pytest.mark.parametrize("make", [one_buffer, a_set], ids=["buffer", "set"])
def test_interrupt_after_export_before_popen(
    baseline: Callable[[], None], monkeypatch: pytest.MonkeyPatch, make: Callable[[], Any]
) -> None:
    monkeypatch.setattr(
        context, "get_spawning_popen", raise_once(context.get_spawning_popen, after=False)
    )
    obj = make()
    with pytest.raises(KeyboardInterrupt):
        ForkingPickler.dumps(obj)
    release(obj)
    del obj
    baseline()


@pytest.mark.parametrize("name", ["_ipc_export", "_ipc_export_set"])
def test_interrupt_right_after_the_export_returns(
    baseline: Callable[[], None], monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    # A signal that arrived during the export (it copies, without the GIL)
    # is handled as soon as the call returns, before its result is named.
    monkeypatch.setattr(_native, name, raise_once(getattr(_native, name), after=True))
    obj = one_buffer() if name == "_ipc_export" else a_set()
    with pytest.raises(KeyboardInterrupt):
        ForkingPickler.dumps(obj)
    release(obj)
    del obj
    baseline()


def test_interrupt_in_offer_before_the_key_is_registered(
    baseline: Callable[[], None], monkeypatch: pytest.MonkeyPatch
) -> None:
    r, w = os.pipe()
    randbits = raise_once(secrets.randbits, after=True)
    monkeypatch.setattr(secrets, "randbits", randbits)  # the module _fdshare draws keys from
    with pytest.raises(KeyboardInterrupt):
        _fdshare.offer([r, w])
    os.close(r)
    os.close(w)
    assert _fdshare._server is not None and _fdshare._server.npending == 0
    baseline()


def test_interrupt_in_offer_right_after_the_dups(
    baseline: Callable[[], None], monkeypatch: pytest.MonkeyPatch
) -> None:
    r, w = os.pipe()
    monkeypatch.setattr(_native, "_dup_fds", raise_once(_native._dup_fds, after=True))
    with pytest.raises(KeyboardInterrupt):
        _fdshare.offer([r, w])
    os.close(r)
    os.close(w)
    assert _fdshare._server is not None and _fdshare._server.npending == 0
    baseline()


class FakePopen:
    """A Popen being launched (spawn): takes the fds for the child; the
    n-th one raises KeyboardInterrupt when fail_at says so."""

    class DupFd:
        def __init__(self, fd: int) -> None:
            self.fd = fd

    def __init__(self, fail_at: int = -1) -> None:
        self.fds: List[int] = []
        self.fail_at = fail_at

    def duplicate_for_child(self, fd: int) -> int:
        if len(self.fds) == self.fail_at:
            raise KeyboardInterrupt
        self.fds.append(fd)
        return fd


@pytest.mark.parametrize("fail_at", [-1, 0, 1])
def test_spawn_arguments_are_closed_with_the_popen(
    baseline: Callable[[], None], monkeypatch: pytest.MonkeyPatch, fail_at: int
) -> None:
    holder = [FakePopen(fail_at)]
    popen = holder[0]
    monkeypatch.setattr(context, "get_spawning_popen", lambda: holder[0] if holder else None)
    b = one_buffer()
    if fail_at < 0:
        ForkingPickler.dumps(b)
        assert len(popen.fds) == 2 and all(os.fstat(fd) for fd in popen.fds)
    else:
        with pytest.raises(KeyboardInterrupt):
            ForkingPickler.dumps(b)
    b.release()
    del b, popen
    holder.clear()  # the Popen goes: its finalizer closes what it kept
    baseline()


STRESS = textwrap.dedent(
    """
    import gc, os, random, signal, sys, time
    from multiprocessing.reduction import ForkingPickler
    import hurray
    from hurray import _fdshare, _native

    def targets():
        out = []
        for name in os.listdir("/proc/self/fd"):
            try:
                out.append(os.readlink("/proc/self/fd/" + name))
            except OSError:
                pass
        return sorted(out)

    def memfds():
        with open("/proc/self/maps") as f:
            return {line.split()[4] for line in f if "memfd:hurray" in line}

    def interrupt(signum, frame):
        raise KeyboardInterrupt

    _fdshare.offer([])
    warm = hurray.empty((8,), "float32", shared=True)
    for fd in _native._ipc_export(warm)[1]:
        os.close(fd)
    warm.release()
    before, maps = targets(), memfds()
    signal.signal(signal.SIGALRM, interrupt)
    rng = random.Random(int(sys.argv[1]))
    hits = 0
    for i in range(100):
        b = hurray.empty((1 << 14,), "float32", shared=i % 2 == 0)
        try:
            signal.setitimer(signal.ITIMER_REAL, rng.uniform(1e-6, 3e-4))
            try:
                ForkingPickler.dumps(b if i % 3 else hurray.BufferList([b, b]))
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
        except KeyboardInterrupt:
            hits += 1
        b.release()
        del b
    end = time.monotonic() + 10
    while time.monotonic() < end and (targets() != before or memfds() != maps):
        gc.collect()
        time.sleep(0.05)
    left = sorted(set(targets()) - set(before)), memfds() - maps
    print(hits, left)
    sys.exit(0 if left == ([], set()) else 1)
    """
)


def test_stress_random_interrupts_leak_nothing() -> None:
    env = dict(os.environ, HURRAY_MP_PENDING_SECONDS="0.5")
    seed = str(time.time_ns())
    r = subprocess.run(
        [sys.executable, "-c", STRESS, seed], env=env, capture_output=True, text=True, timeout=120
    )
    assert r.returncode == 0, (seed, r.stdout, r.stderr)
