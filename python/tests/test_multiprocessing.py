# SPDX-License-Identifier: Apache-2.0
"""hurray.Buffer across multiprocessing and ProcessPoolExecutor, spawn and
fork contexts (docs/impl/python.md §11): shareable memory is the same pages
in both processes (a write in the worker is read in the parent, and the
worker's mapping has the parent's memfd inode); other memory arrives as a
copy; the producer's release runs exactly once, after the last process let
go. Every wait is bounded."""

import concurrent.futures
import gc
import multiprocessing
import os
import signal
import time
from typing import Any, List, Type

import numpy as np
import pytest

import hurray

import mp_aid
from conftest import CountingProducer

TIMEOUT = 60


# The contexts and the strict checking of every test here (conftest.py).
pytestmark = pytest.mark.usefixtures("strict_checking")
wait_for = mp_aid.wait_for


def shared(n: int = 1024, dtype: str = "float64") -> hurray.Buffer:
    b = hurray.empty(n, dtype, shared=True)
    np.from_dlpack(b)[...] = 0
    return b


def test_empty_shared_is_a_memfd() -> None:
    b = shared()
    m = mp_aid.mapping_of(b.data_ptr)
    assert "memfd:" in m, m
    assert b.shape == (1024,) and not b.readonly
    assert mp_aid.inode_mapped(m)
    b.release()
    assert not mp_aid.inode_mapped(m)  # the release unmapped it


def test_pool_worker_writes_the_same_pages(ctx: Any) -> None:
    b = shared()
    where = mp_aid.mapping_of(b.data_ptr)
    with ctx.Pool(1) as pool:
        out = pool.apply_async(mp_aid.write, (b, 7.0)).get(TIMEOUT)
        assert out["pid"] != os.getpid()
        assert out["mapping"].split()[:2] == where.split()[:2]  # the same memfd inode
        assert np.all(np.from_dlpack(b) == 7.0)
        outs = pool.starmap_async(mp_aid.write, [(b, 1.0), (b, 2.0)]).get(TIMEOUT)
        assert len(outs) == 2 and np.from_dlpack(b)[0] in (1.0, 2.0)
    b.release()
    assert wait_for(lambda: not mp_aid.inode_mapped(where)), "the producer's release did not run"


def test_queue(ctx: Any) -> None:
    b = shared(16, "int32")
    where = mp_aid.mapping_of(b.data_ptr)
    q, results = ctx.Queue(), ctx.Queue()
    p = ctx.Process(target=mp_aid.write_from_queue, args=(q, results, 5))
    p.start()
    try:
        q.put(b)
        out = results.get(timeout=TIMEOUT)
        assert out["dtype"] == "int32" and out["shape"] == (16,)
        assert list(np.from_dlpack(b)) == [5] * 16
    finally:
        p.join(TIMEOUT)
        if p.is_alive():
            p.kill()
    assert p.exitcode == 0
    del b
    assert wait_for(lambda: not mp_aid.inode_mapped(where))


def test_pipe_round_trip_and_release_after_the_last_process(ctx: Any) -> None:
    b = shared(8)
    where = mp_aid.mapping_of(b.data_ptr)
    parent, child = ctx.Pipe()
    p = ctx.Process(target=mp_aid.pipe_echo, args=(child,))
    p.start()
    child.close()
    try:
        for i in range(1, 4):
            parent.send(b)
            assert parent.poll(TIMEOUT)
            back = parent.recv()
            assert isinstance(back, hurray.Buffer)
            assert mp_aid.mapping_of(back.data_ptr).split()[:2] == where.split()[:2]
            assert np.from_dlpack(b)[0] == float(i)  # the worker's += 1 on the same pages
            back.release()
        parent.send(None)
    finally:
        p.join(TIMEOUT)
        if p.is_alive():
            p.kill()
    b.release()
    assert wait_for(lambda: not mp_aid.inode_mapped(where))


def test_release_waits_for_the_receiver(ctx: Any) -> None:
    """The producer's pages stay while the worker holds its Buffer, although
    the parent released all of its own; they go once the worker lets go."""
    b = shared(8)
    np.from_dlpack(b)[0] = 3.5
    where = mp_aid.mapping_of(b.data_ptr)
    parent, child = ctx.Pipe()
    p = ctx.Process(target=mp_aid.hold_until, args=(child,))
    p.start()
    child.close()
    try:
        parent.send(b)
        assert parent.poll(TIMEOUT) and parent.recv() == 3.5
        b.release()
        gc.collect()
        time.sleep(0.2)
        assert mp_aid.inode_mapped(where), "released while another process still held it"
        parent.send("go")
        assert parent.poll(TIMEOUT) and parent.recv() == "released"
        assert wait_for(lambda: not mp_aid.inode_mapped(where))
    finally:
        parent.close()
        p.join(TIMEOUT)
        if p.is_alive():
            p.kill()


def test_release_after_the_receiver_is_killed(ctx: Any) -> None:
    parent, child = ctx.Pipe()
    p = ctx.Process(target=mp_aid.hold_forever, args=(child,))
    p.start()
    child.close()
    wheres = []
    try:
        for i in range(20):
            b = shared(4)
            wheres.append(mp_aid.mapping_of(b.data_ptr))
            parent.send(b)
            assert parent.poll(TIMEOUT) and parent.recv() == i + 1
            del b
        gc.collect()
        assert all(mp_aid.inode_mapped(w) for w in wheres)
        assert p.pid is not None
        os.kill(p.pid, signal.SIGKILL)
        p.join(TIMEOUT)
        t0 = time.monotonic()
        assert wait_for(lambda: not any(mp_aid.inode_mapped(w) for w in wheres), 5.0)
        assert time.monotonic() - t0 < 1.0  # a killed holder frees its mappings within 1 s
    finally:
        if p.is_alive():
            p.kill()


def test_process_pool_executor(ctx: Any) -> None:
    b = shared(32)
    where = mp_aid.mapping_of(b.data_ptr)
    with concurrent.futures.ProcessPoolExecutor(max_workers=1, mp_context=ctx) as ex:
        out = ex.submit(mp_aid.write, b, 9.0).result(timeout=TIMEOUT)
        assert out["mapping"].split()[:2] == where.split()[:2]
        assert np.all(np.from_dlpack(b) == 9.0)
        shape, total = ex.submit(mp_aid.shape_and_sum, b).result(timeout=TIMEOUT)
        assert shape == (32,) and total == 9.0 * 32
    b.release()
    assert wait_for(lambda: not mp_aid.inode_mapped(where))


def test_process_argument(ctx: Any) -> None:
    """A Buffer passed as a Process argument: pickled with the launch under
    spawn (the fds travel with it), inherited under fork."""
    b = shared(4)
    parent, child = ctx.Pipe()
    p = ctx.Process(target=mp_aid.hold_until, args=(child,))
    p.start()
    parent.send(b)
    assert parent.poll(TIMEOUT) and parent.recv() == 0.0
    parent.send("go")
    assert parent.poll(TIMEOUT) and parent.recv() == "released"
    parent.close()
    p.join(TIMEOUT)
    assert p.exitcode == 0


def test_other_memory_is_copied_once(ctx: Any, counting_producer: Type[CountingProducer]) -> None:
    """Memory that is not shareable (here a ctypes producer's) arrives as a
    copy in shareable memory: the worker's writes are not seen by the
    parent, and the producer's deleter runs exactly once."""
    prod = counting_producer(8)
    b = hurray.from_dlpack(prod.capsule())
    with ctx.Pool(1) as pool:
        out = pool.apply_async(mp_aid.write, (b, 4.0)).get(TIMEOUT)
        assert "memfd:" in out["mapping"], out
        assert out["first"] == 4.0
    assert list(prod.memory) == [float(i) for i in range(8)]
    del b
    assert wait_for(lambda: prod.deleted == 1)
    time.sleep(0.2)
    assert prod.deleted == 1


def test_read_only_arrives_read_only(ctx: Any) -> None:
    a = np.arange(6, dtype=np.int64)
    a.flags.writeable = False
    b = hurray.from_dlpack(a)
    with ctx.Pool(1) as pool:
        shape, total = pool.apply_async(mp_aid.shape_and_sum, (b,)).get(TIMEOUT)
        assert shape == (6,) and total == 15.0
        with pytest.raises(ValueError):
            pool.apply_async(mp_aid.write, (b, 1.0)).get(TIMEOUT)  # NumPy: read-only
    assert list(a) == list(range(6))


def test_fd_server_hands_each_message_out_once() -> None:
    from hurray import _fdshare

    r, w = os.pipe()
    try:
        address, key = _fdshare.offer([w])
        (got,) = _fdshare.fetch(address, key, 1)
        assert got not in (r, w)
        os.close(got)
        with pytest.raises(OSError, match="no fds for this message"):
            _fdshare.fetch(address, key, 1)
    finally:
        os.close(r)
        os.close(w)


def test_exit_drain_waits_for_a_reply_being_sent(monkeypatch: pytest.MonkeyPatch) -> None:
    """An offer a receiver has taken but whose reply is not yet written still
    holds the exit wait: exiting then would close the connection under the
    receiver (it would read EOF instead of its fds)."""
    import socket
    import threading

    from hurray import _fdshare

    entered, release = threading.Event(), threading.Event()
    real_send_fds = socket.send_fds

    def slow_send_fds(*args: Any, **kwargs: Any) -> Any:
        entered.set()
        release.wait(TIMEOUT)
        return real_send_fds(*args, **kwargs)

    monkeypatch.setenv("HURRAY_MP_EXIT_WAIT", "30")
    monkeypatch.setattr(socket, "send_fds", slow_send_fds)
    r, w = os.pipe()
    got: List[int] = []
    try:
        address, key = _fdshare.offer([w])
        fetcher = threading.Thread(target=lambda: got.extend(_fdshare.fetch(address, key, 1)))
        fetcher.start()
        assert entered.wait(TIMEOUT)
        drained = threading.Event()

        def drain() -> None:
            _fdshare._drain()
            drained.set()

        threading.Thread(target=drain, daemon=True).start()
        assert not drained.wait(0.5), "the exit wait ended while a reply was still unsent"
        release.set()
        assert drained.wait(TIMEOUT)
        fetcher.join(TIMEOUT)
        assert len(got) == 1
    finally:
        release.set()
        for fd in got + [r, w]:
            os.close(fd)


@pytest.mark.parametrize(
    "value, seconds",
    [
        ("0.5", 0.5),
        ("0", 0.0),
        ("nan", 5.0),
        ("inf", 5.0),
        ("1e400", 5.0),
        ("-1", 5.0),
        ("soon", 5.0),
    ],
)
def test_exit_wait_limit(monkeypatch: pytest.MonkeyPatch, value: str, seconds: float) -> None:
    """HURRAY_MP_EXIT_WAIT: a finite number of seconds >= 0, else the default
    (nan made the exit wait spin without end, inf made Condition.wait raise)."""
    from hurray import _fdshare

    monkeypatch.setenv("HURRAY_MP_EXIT_WAIT", value)
    assert _fdshare.exit_wait_limit() == seconds


def test_exit_drain_is_not_held_by_a_failing_close(monkeypatch: pytest.MonkeyPatch) -> None:
    """A close of the server's copy that fails after the reply was sent must
    not leave the offer counted as in flight (the exit would wait its whole
    limit for nothing)."""
    import errno

    from hurray import _fdshare

    server = _fdshare._Server()
    r, w = os.pipe()
    try:
        key = server.offer([w])
        dups = list(server.pending[key])
        real_close = os.close

        def failing_close(fd: int) -> None:
            real_close(fd)
            if fd in dups:
                raise OSError(errno.EIO, "injected")

        monkeypatch.setenv("HURRAY_MP_EXIT_WAIT", "20")
        monkeypatch.setattr(os, "close", failing_close)
        (got,) = _fdshare.fetch(server.address, key, 1)
        real_close(got)
        t0 = time.monotonic()
        server.drain()  # the server thread's closes may still be running
        assert time.monotonic() - t0 < 5.0, "the exit wait waited for a reply already sent"
    finally:
        monkeypatch.undo()
        server.sock.close()
        os.close(r)
        os.close(w)


_OUT_OF_FDS_SCRIPT = """
import os, resource, socket, sys, time
from hurray import _fdshare
server = _fdshare._Server()
r, w = os.pipe()
key = server.offer([w])
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (min(256, hard), hard))
filler = []
try:
    while True:
        filler.append(os.dup(0))
except OSError:
    pass
os.close(filler.pop())
c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)  # the one free fd
c.connect(server.address)  # the server's accept now fails with EMFILE
time.sleep(0.5)
for fd in filler:
    os.close(fd)
c.settimeout(20)
c.sendall(_fdshare._KEY.pack(key))
msg, fds, _, _ = socket.recv_fds(c, 1, 1)
sys.exit(0 if msg == _fdshare._OK and len(fds) == 1 else 3)
"""


def test_fd_server_survives_running_out_of_fds() -> None:
    """accept() failing with EMFILE (every unfetched offer holds fds) must not
    end the server: the receiver already queued is served once fds are
    free again (it used to wait forever)."""
    import subprocess
    import sys

    done = subprocess.run(
        [sys.executable, "-c", _OUT_OF_FDS_SCRIPT], timeout=TIMEOUT, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-2000:]


def _keeps_socket(inode: int) -> None:
    for name in os.listdir("/proc/self/fd"):
        try:
            if os.readlink(f"/proc/self/fd/{name}") == f"socket:[{inode}]":
                os._exit(1)
        except OSError:
            pass
    os._exit(0)


def test_forked_child_closes_the_servers_connections() -> None:
    """A child forked while the server holds a receiver's connection must not
    keep a copy: the receiver would never see EOF once the sender exits."""
    from hurray import _fdshare

    r, w = os.pipe()
    try:
        address, key = _fdshare.offer([w])
        (got,) = _fdshare.fetch(address, key, 1)
        os.close(got)
        server = _fdshare._server
        assert server is not None
        with server.lock:
            inodes = [os.fstat(c.fileno()).st_ino for c in server.conns]
        assert inodes, "the fetch left no served connection"
        for inode in inodes:
            p = multiprocessing.get_context("fork").Process(target=_keeps_socket, args=(inode,))
            p.start()
            p.join(TIMEOUT)
            assert p.exitcode == 0, "the forked child kept the server's connection"
    finally:
        os.close(r)
        os.close(w)


def test_forked_child_drops_pending_fds() -> None:
    """A child forked while a message waits must not keep its fds (that would
    keep the sender's memory until the child exits)."""
    import select

    from hurray import _fdshare

    r, w = os.pipe()
    address, key = _fdshare.offer([w])
    os.close(w)
    p = multiprocessing.get_context("fork").Process(target=time.sleep, args=(5,))
    p.start()
    try:
        (got,) = _fdshare.fetch(address, key, 1)
        os.close(got)  # the last write end, unless the child kept a copy
        readable, _, _ = select.select([r], [], [], 2.0)
        assert readable and os.read(r, 1) == b"", "the forked child kept the pending fd"
    finally:
        os.close(r)
        p.kill()
        p.join(TIMEOUT)


def test_empty_shared_kinds() -> None:
    z = hurray.empty(0, "int8", shared=True)
    assert z.shape == (0,) and z.nbytes == 0
    for dt in (np.float16, "complex64", np.dtype(">i4").newbyteorder("="), "bfloat16"):
        b = hurray.empty((3, 5), dt, shared=True)
        assert "memfd:" in mp_aid.mapping_of(b.data_ptr)
    with pytest.raises(BufferError):  # no shareable GPU memory yet (or no driver)
        hurray.empty(3, device=(2, 0), shared=True)


def test_import_of_a_bad_message_closes_its_fds() -> None:
    from hurray import _native

    b = shared(8)
    where = mp_aid.mapping_of(b.data_ptr)
    desc, fds, legacy = _native._ipc_export(b)
    assert len(fds) >= 2 and not legacy
    with pytest.raises(OSError, match="HURRAY_ERR_IPC"):
        _native._ipc_import(desc[:10], list(fds), legacy)
    b.release()
    # The lifetime fd was closed by the failed import: the sender's
    # reference came back and the memory went.
    assert wait_for(lambda: not mp_aid.inode_mapped(where))
    with pytest.raises(ValueError, match="at most"):
        _native._ipc_import(desc, [os.dup(0) for _ in range(5)], False)


def test_worker_that_exits_right_after_sending(ctx: Any) -> None:
    """The sender's exit waits (bounded) until its messages were fetched."""
    q = ctx.Queue()
    p = ctx.Process(target=mp_aid.put_and_return, args=(q,))
    p.start()
    try:
        time.sleep(0.5)  # the worker has returned and is exiting by now
        b = q.get(timeout=TIMEOUT)
        assert list(np.from_dlpack(b)) == [5.0] * 4
        where = mp_aid.mapping_of(b.data_ptr)
        assert "memfd:" in where
        p.join(TIMEOUT)
        assert p.exitcode == 0
        assert np.from_dlpack(b)[0] == 5.0  # still mapped after the sender exited
    finally:
        if p.is_alive():
            p.kill()


def test_received_fds_are_close_on_exec(ctx: Any) -> None:
    """A worker that starts a program (a shell leaving `sleep 3 &` behind)
    after receiving a Buffer passes none of its fds on: the memory goes as
    soon as the worker releases, not when the sleep ends."""
    b = shared(8)
    where = mp_aid.mapping_of(b.data_ptr)
    parent, child = ctx.Pipe()
    p = ctx.Process(target=mp_aid.inheritable_fds_after_receiving, args=(child,))
    p.start()
    child.close()
    try:
        parent.send(b)
        b.release()
        assert parent.poll(TIMEOUT)
        assert parent.recv() == []  # no fd a started program would inherit
        start = time.monotonic()
        assert wait_for(lambda: not mp_aid.inode_mapped(where), seconds=2.5), (
            "the memory stayed mapped: the background sleep kept the lifetime fd"
        )
        assert time.monotonic() - start < 2.5
    finally:
        parent.close()
        p.join(TIMEOUT)
        if p.is_alive():
            p.kill()


def test_import_refuses_a_number_that_is_no_fd() -> None:
    """2**32 + fd is not cast to fd (which would close someone else's fd)."""
    from hurray import _native

    b = shared(8)
    desc, fds, legacy = _native._ipc_export(b)
    r, w = os.pipe()
    try:
        for bad in (2**32 + r, -1, 2**63 - 1):
            with pytest.raises(ValueError, match="is not a file descriptor"):
                _native._ipc_import(desc, [bad], legacy)
            os.fstat(r)  # still open: nothing was cast and closed
        buf = _native._ipc_import(desc, list(fds), legacy)  # the real fds still work
        assert buf.shape == (8,)
        buf.release()
    finally:
        os.close(r)
        os.close(w)
        b.release()


def test_pending_fds_are_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    """HURRAY_MP_PENDING_FDS: offers beyond it raise and hold nothing; a
    fetch makes room again."""
    from hurray import _fdshare

    monkeypatch.setenv("HURRAY_MP_PENDING_FDS", "3")
    server = _fdshare._Server()
    r, w = os.pipe()
    try:
        keys = [server.offer([w]) for _ in range(3)]
        with pytest.raises(OSError, match="HURRAY_MP_PENDING_FDS=3"):
            server.offer([w])
        assert server.npending == 3
        (got,) = _fdshare.fetch(server.address, keys[0], 1)
        os.close(got)
        keys.append(server.offer([w]))  # room again
        assert server.npending == 3
    finally:
        server.sock.close()
        os.close(r)
        os.close(w)


def test_an_unfetched_offer_expires(monkeypatch: pytest.MonkeyPatch) -> None:
    """HURRAY_MP_PENDING_SECONDS: an offer nobody fetches (its receiver was
    killed) is dropped and its fds closed, without any further call."""
    import select

    from hurray import _fdshare

    monkeypatch.setenv("HURRAY_MP_PENDING_SECONDS", "0.3")
    server = _fdshare._Server()
    r, w = os.pipe()
    try:
        key = server.offer([w])
        os.close(w)  # the offer's dup is now the only write end
        readable, _, _ = select.select([r], [], [], 10.0)
        assert readable and os.read(r, 1) == b"", "the expired offer kept its fd"
        assert server.expired == 1 and server.npending == 0
        with pytest.raises(OSError, match="HURRAY_MP_PENDING_SECONDS"):
            _fdshare.fetch(server.address, key, 1)
    finally:
        server.sock.close()
        os.close(r)


def test_one_thread_serves_every_receiver() -> None:
    """Receivers keep their connection open; 40 of them cost no thread each."""
    import socket
    import threading

    from hurray import _fdshare

    server = _fdshare._Server()
    r, w = os.pipe()
    conns = []
    try:
        before = threading.active_count()
        keys = [server.offer([w]) for _ in range(40)]
        for key in keys:
            c = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            c.settimeout(TIMEOUT)
            c.connect(server.address)
            c.sendall(_fdshare._KEY.pack(key))
            msg, fds, _, _ = socket.recv_fds(c, 1, 1)
            assert msg == _fdshare._OK and len(fds) == 1
            os.close(fds[0])
            conns.append(c)
        assert wait_for(lambda: len(server.conns) == 40)
        assert threading.active_count() == before
    finally:
        for c in conns:
            c.close()
        server.sock.close()
        os.close(r)
        os.close(w)


def test_a_stalled_request_does_not_hold_up_other_receivers() -> None:
    """A peer that sends part of a request and stops is not waited for: the
    one server thread serves the others meanwhile, and the rest of the
    stalled request, when it comes, is answered."""
    import socket

    from hurray import _fdshare

    server = _fdshare._Server()
    r, w = os.pipe()
    stalled = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        k1, k2 = server.offer([w]), server.offer([w])
        stalled.settimeout(TIMEOUT)
        stalled.connect(server.address)
        request = _fdshare._KEY.pack(k1)
        stalled.sendall(request[:3])
        t0 = time.monotonic()
        (got,) = _fdshare.fetch(server.address, k2, 1)
        os.close(got)
        assert time.monotonic() - t0 < 2.0, "the stalled request held the server up"
        stalled.sendall(request[3:])
        msg, fds, _, _ = socket.recv_fds(stalled, 1, 1)
        assert msg == _fdshare._OK and len(fds) == 1
        os.close(fds[0])
    finally:
        stalled.close()
        server.sock.close()
        os.close(r)
        os.close(w)


def test_connections_to_senders_that_are_gone_are_closed() -> None:
    """A receiver keeps one connection per sender; a sender that exits must
    not leave its connection (an fd) behind in the receiver for good: six
    senders that come and go cost at most one cached connection."""
    from hurray import _fdshare

    ctx = multiprocessing.get_context("fork")
    cached_before = set(_fdshare._conns)  # other tests' senders, still alive
    fds_before = 0
    for i in range(7):
        if i == 1:  # after a first round: the receiver's own set-up is done
            fds_before = len(os.listdir("/proc/self/fd"))
        parent, child = ctx.Pipe()
        p = ctx.Process(target=mp_aid.send_one_and_exit, args=(child,))
        p.start()
        child.close()
        try:
            assert parent.poll(TIMEOUT)
            buf = parent.recv()
            parent.send("got it")
            assert buf.shape == (8,)
            buf.release()
        finally:
            p.join(TIMEOUT)
            parent.close()
    assert len(set(_fdshare._conns) - cached_before) <= 1  # at most the last sender's
    assert len(os.listdir("/proc/self/fd")) <= fds_before + 1


def test_an_interrupted_fetch_never_hands_its_reply_to_the_next(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A fetch interrupted after its request went (KeyboardInterrupt, or a
    timeout raised by a signal handler) must not leave its reply for the next
    fetch on that connection, which would get the previous message's memory."""
    import socket

    from hurray import _fdshare

    r1, w1 = os.pipe()
    r2, w2 = os.pipe()
    real_recv_fds = socket.recv_fds
    calls = []

    def interrupted_once(*args: Any, **kwargs: Any) -> Any:
        calls.append(1)
        if len(calls) == 1:
            raise KeyboardInterrupt  # the reply is on its way, unread
        return real_recv_fds(*args, **kwargs)

    try:
        address, k1 = _fdshare.offer([w1])
        _, k2 = _fdshare.offer([w2])
        monkeypatch.setattr(socket, "recv_fds", interrupted_once)
        with pytest.raises(KeyboardInterrupt):
            _fdshare.fetch(address, k1, 1)
        time.sleep(0.2)  # the first reply has surely arrived by now
        (got,) = _fdshare.fetch(address, k2, 1)
        assert os.fstat(got).st_ino == os.fstat(w2).st_ino, "got the previous message's fd"
        os.close(got)
    finally:
        for fd in (r1, w1, r2, w2):
            os.close(fd)
