# SPDX-License-Identifier: Apache-2.0
"""File descriptors from one process to another, for the multiprocessing
reducer (hurray/_mp.py, docs/impl/python.md §11).

multiprocessing's own ``resource_sharer`` makes one new authenticated
connection per fd handed over (connect, an HMAC challenge both ways, one
request); that is most of the cost of a small handoff. Here each sending
process runs one listening Unix socket (abstract name, started on first
use, served by one thread whatever the number of receivers) and each
receiving process keeps one connection per sender open, so a handoff costs
one 8-byte request and one ``SCM_RIGHTS`` reply.

* ``offer(fds) -> (address, key)``: duplicates the fds and keeps them until
  the key is fetched, within two bounds a user can set: at most
  ``HURRAY_MP_PENDING_FDS`` fds (default 4096) are held for messages not
  yet received (an offer beyond that raises ``OSError`` and holds nothing),
  and an offer not fetched within ``HURRAY_MP_PENDING_SECONDS`` (default
  600; 0 for never) is dropped and its fds closed, so messages sent to a
  consumer that died give their memory back.
* ``fetch(address, key, n) -> fds``: the receiver's side; the fds are the
  caller's.
* Only a peer of the same user is served or trusted (``SO_PEERCRED``); the
  key is 63 random bits, used once.
* After ``fork`` the child forgets the parent's server, its pending fds
  (closed in the child) and its connections, and starts its own on demand.
* At exit (multiprocessing's exit handling: after a Queue's feeder has
  flushed, in workers and the main process alike) a process with offers
  not yet fetched waits for them, at most ``HURRAY_MP_EXIT_WAIT`` seconds
  (default 5; a value that is not a finite number >= 0 means the default),
  so that a worker that sends a Buffer and returns does not take the fds
  with it before the receiver fetched them.
"""

import errno
import math
import os
import secrets
import select
import socket
import struct
import threading
import time
from typing import Callable, Dict, List, Optional, Set, Tuple, TypeVar

from . import _native

_KEY = struct.Struct("<Q")
_OK, _MISSING = b"\x01", b"\x00"
_DEFAULT_EXIT_WAIT = 5.0
_DEFAULT_PENDING_FDS = 4096
_DEFAULT_PENDING_SECONDS = 600.0
# How long a reply may wait to go out (the receiver does not read) before the
# server drops that connection; requests are read without waiting at all.
_IO_TIMEOUT = 5.0


def exit_wait_limit() -> float:
    """HURRAY_MP_EXIT_WAIT in seconds: a finite number >= 0, else 5."""
    try:
        limit = float(os.environ.get("HURRAY_MP_EXIT_WAIT", _DEFAULT_EXIT_WAIT))
    except ValueError:
        return _DEFAULT_EXIT_WAIT
    return limit if math.isfinite(limit) and limit >= 0 else _DEFAULT_EXIT_WAIT


def _env_number(name: str, default: float) -> float:
    """A finite number >= 0 from the environment, else the default."""
    try:
        value = float(os.environ.get(name, default))
    except ValueError:
        return default
    return value if math.isfinite(value) and value >= 0 else default


def pending_fds_limit() -> int:
    """HURRAY_MP_PENDING_FDS: fds held at most for messages not yet received."""
    return int(_env_number("HURRAY_MP_PENDING_FDS", _DEFAULT_PENDING_FDS))


def pending_seconds_limit() -> float:
    """HURRAY_MP_PENDING_SECONDS: how long an unfetched offer is kept (0: always)."""
    return _env_number("HURRAY_MP_PENDING_SECONDS", _DEFAULT_PENDING_SECONDS)


def _close_all(fds: List[int]) -> None:
    for fd in fds:
        try:
            os.close(fd)
        except OSError:
            pass


def _peer_uid(s: socket.socket) -> int:
    creds = s.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    uid: int = struct.unpack("3i", creds)[1]
    return uid


_T = TypeVar("_T")


def _io(conn: socket.socket, event: int, op: Callable[[], _T]) -> _T:
    """op() on the server's non-blocking connection; when it would block,
    waits for `event` at most _IO_TIMEOUT seconds and tries again (no poll
    at all in the usual case: the reply fits in the socket's buffer)."""
    deadline = time.monotonic() + _IO_TIMEOUT
    while True:
        try:
            return op()
        except BlockingIOError:
            left = deadline - time.monotonic()
            p = select.poll()
            p.register(conn, event)
            if left <= 0 or not p.poll(left * 1000):
                raise TimeoutError("hurray fd server: a connection stalled") from None


class _Server:
    """The listening socket, the offers and the one thread that accepts and
    serves every connection (an epoll loop: receivers keep their
    connection for the life of the process, so a thread per connection grew
    without bound)."""

    def __init__(self) -> None:
        self.address = f"\0hurray-fds-{os.getpid()}-{secrets.token_hex(8)}"
        self.lock = threading.Lock()
        self.pending: Dict[int, List[int]] = {}
        # key -> monotonic time it expires, in the order offered (so, with
        # one HURRAY_MP_PENDING_SECONDS, earliest first).
        self.deadlines: Dict[int, float] = {}
        self.expired = 0  # offers dropped unfetched, since start
        self.sending: Dict[int, List[int]] = {}  # taken, reply not yet sent
        self.conns: Set[socket.socket] = set()  # accepted, being served
        self.partial: Dict[socket.socket, bytes] = {}  # a request's first bytes
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
        self.sock.bind(self.address)
        self.sock.listen(64)
        # The limits, read once, when this process's server starts.
        self.max_pending = pending_fds_limit()
        self.ttl = pending_seconds_limit()
        # epoll itself (not `selectors`, whose bookkeeping costs a few µs a
        # request): fd -> accepted connection; the listening socket is not
        # in the map.
        self.epoll = select.epoll()
        self.by_fd: Dict[int, socket.socket] = {}
        self.epoll.register(self.sock.fileno(), select.EPOLLIN)
        self.fetched = threading.Condition(self.lock)
        threading.Thread(target=self._run, name="hurray-fd-server", daemon=True).start()

    def drain(self) -> None:
        """Waits (bounded) until every offer was fetched and its reply sent."""
        end = time.monotonic() + exit_wait_limit()
        with self.lock:
            while self.pending or self.sending:
                left = end - time.monotonic()
                if left <= 0:
                    return
                # In steps: Condition.wait refuses timeouts beyond the OS's.
                self.fetched.wait(min(left, 60.0))

    def offer(self, fds: List[int]) -> int:
        limit, ttl = self.max_pending, self.ttl
        with self.lock:
            self._expire_locked(time.monotonic())
            if self.npending + len(fds) > limit:
                raise OSError(
                    errno.EMFILE,
                    f"hurray: {self.npending} fds are already held for messages that no "
                    f"process has received yet, and {len(fds)} more would pass "
                    f"HURRAY_MP_PENDING_FDS={limit}: is the receiving process alive and "
                    "reading? (raise the limit for larger backlogs)",
                )
        # Interrupt safety (a KeyboardInterrupt may be raised at any
        # bytecode): the list that will hold the duplicates is registered
        # under its key first, and _dup_fds fills it in one C call, all or
        # nothing; so every duplicate is always reachable from
        # self.pending, whose expiry (or the failure path below) closes it.
        dups: List[int] = []
        key: Optional[int] = None
        try:
            with self.lock:
                key = secrets.randbits(63)
                while key in self.pending:
                    key = secrets.randbits(63)
                if ttl > 0:
                    self.deadlines[key] = time.monotonic() + ttl
                self.pending[key] = dups
            _native._dup_fds(fds, dups)
        except BaseException:
            if key is not None:
                with self.lock:
                    self._take_locked(key)
            _native._close_fds(dups)
            raise
        return key

    @property
    def npending(self) -> int:
        """fds held for offers not yet fetched (counted, not kept as a
        running total: a total updated in a second step could drift when an
        interrupt lands between the two)."""
        return sum(map(len, list(self.pending.values())))

    def _take_locked(self, key: int) -> Optional[List[int]]:
        fds = self.pending.pop(key, None)
        self.deadlines.pop(key, None)
        return fds

    def _expire_locked(self, now: float) -> None:
        """Drops the offers whose time is up (their fds closed), earliest
        first; stops at the first that is not (a deadline after a shorter
        HURRAY_MP_PENDING_SECONDS came in waits for the ones before it)."""
        expired = []
        for key, t in self.deadlines.items():
            if t > now:
                break
            expired.append(key)
        for key in expired:
            fds = self._take_locked(key)
            if fds is not None:
                self.expired += 1
                _close_all(fds)
        if expired and not self.pending:
            self.fetched.notify_all()

    def _next_timeout(self) -> Optional[float]:
        """How long the loop may sleep: until the earliest deadline; with
        none, one HURRAY_MP_PENDING_SECONDS (an offer made meanwhile expires
        no earlier than that), or for ever when offers never expire. No
        offer has to wake the loop, which keeps the handoff's path short."""
        with self.lock:
            first = next(iter(self.deadlines.values()), None)
        if first is not None:
            return max(0.0, first - time.monotonic())
        return self.ttl if self.ttl > 0 else None

    def _run(self) -> None:
        while True:
            timeout = self._next_timeout()
            try:
                events = self.epoll.poll(-1 if timeout is None else timeout)
            except InterruptedError:
                continue
            except (OSError, ValueError):
                return  # the epoll instance was closed (a forked child's copy)
            if self.deadlines:
                with self.lock:
                    self._expire_locked(time.monotonic())
            for fd, _ in events:
                conn = self.by_fd.get(fd)
                if conn is None:
                    if not self._accept_one():
                        return
                elif not self._serve_one(conn):
                    self._drop(conn)

    def _accept_one(self) -> bool:
        """Accepts one connection; False once the listening socket is closed."""
        sock = self.sock
        try:
            conn, _ = sock.accept()
        except OSError:
            if sock.fileno() == -1:
                return False
            # Out of fds (EMFILE, ENFILE) or memory, or a connection aborted
            # while queued: the server stays, the next try may succeed. A
            # pause, so a lasting shortage does not spin.
            time.sleep(0.05)
            return True
        try:
            if _peer_uid(conn) != os.geteuid():
                conn.close()
                return True
            conn.setblocking(False)  # reads never wait; a reply waits, bounded, if it must
            with self.lock:
                self.conns.add(conn)
            self.by_fd[conn.fileno()] = conn
            self.epoll.register(conn.fileno(), select.EPOLLIN)
        except (OSError, ValueError):
            self._drop(conn)
        return True

    def _drop(self, conn: socket.socket) -> None:
        self.partial.pop(conn, None)
        with self.lock:
            self.conns.discard(conn)
        fd = conn.fileno()
        if self.by_fd.pop(fd, None) is not None:
            try:
                self.epoll.unregister(fd)
            except (ValueError, OSError):
                pass
        conn.close()

    def _serve_one(self, conn: socket.socket) -> bool:
        """Reads what a request has sent; once its 8 bytes are there, sends
        the fds of its key (or the missing mark) back. False once the
        connection is gone (or its reply stuck past _IO_TIMEOUT)."""
        have = self.partial.pop(conn, b"")
        try:
            chunk = conn.recv(_KEY.size - len(have))
        except BlockingIOError:  # a spurious wake-up
            chunk = None
        except OSError:
            return False
        if chunk == b"":
            return False  # the receiver closed its connection
        req = have + (chunk or b"")
        if len(req) < _KEY.size:
            # The rest comes later: keep what came, serve the others meanwhile.
            self.partial[conn] = req
            return True
        with self.lock:
            fds = self._take_locked(_KEY.unpack(req)[0])
            if fds is not None:
                self.sending[id(fds)] = fds
        try:
            # The reply names its request, so a receiver can tell it from a
            # stale one.
            if fds is None:
                _io(conn, select.POLLOUT, lambda: conn.send(_MISSING + req))
            else:
                _io(conn, select.POLLOUT, lambda: socket.send_fds(conn, [_OK + req], fds))
            return True
        except OSError:
            return False
        finally:
            if fds is not None:
                # Only now is the reply in the receiver's socket buffer (or
                # the receiver gone): an exit before this would drop it.
                with self.lock:
                    del self.sending[id(fds)]
                    self.fetched.notify_all()
                _close_all(fds)

    def close_in_child(self) -> None:
        """In a forked child: the parent's listening socket, its accepted
        connections, its epoll instance and every fd it held for a receiver,
        closed (the child's copies only; the thread serving them exists only
        in the parent)."""
        self.sock.close()
        for conn in self.conns:
            conn.close()
        self.conns.clear()
        self.epoll.close()
        self.by_fd.clear()
        self.partial.clear()
        for fds in list(self.pending.values()) + list(self.sending.values()):
            _close_all(fds)
        self.pending.clear()
        self.deadlines.clear()
        self.sending.clear()


_lock = threading.Lock()
_server: Optional[_Server] = None
_conns: Dict[str, Tuple[socket.socket, threading.Lock]] = {}


def offer(fds: List[int]) -> Tuple[str, int]:
    """Keeps duplicates of fds for one fetch; the caller keeps its own."""
    global _server
    with _lock:
        if _server is None:
            _server = _Server()
        server = _server
    return server.address, server.offer(fds)


def _prune_gone_senders() -> None:
    """Closes the cached connections whose sender has gone (its end hung
    up): without this, each sender process that exits or is killed would
    leave one socket in every process that received from it. Run when a
    connection to a new sender is made, so the cache holds at most the live
    senders and those gone since the last new one."""
    with _lock:
        items = list(_conns.items())
    for address, (s, lock) in items:
        if not lock.acquire(blocking=False):
            continue  # a fetch is using it
        try:
            p = select.poll()
            p.register(s, select.POLLIN | select.POLLRDHUP)
            events = p.poll(0)
            if events and events[0][1] & (select.POLLHUP | select.POLLRDHUP | select.POLLERR):
                with _lock:
                    if _conns.get(address, (None,))[0] is s:
                        del _conns[address]
                s.close()
        finally:
            lock.release()


def _connection(address: str) -> Tuple[socket.socket, threading.Lock]:
    with _lock:
        c = _conns.get(address)
        if c is not None:
            return c
    _prune_gone_senders()
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
    try:
        s.connect(address)
        if _peer_uid(s) != os.geteuid():
            raise PermissionError("hurray: the process offering these fds runs as another user")
    except BaseException:
        s.close()
        raise
    with _lock:
        c = _conns.setdefault(address, (s, threading.Lock()))
    if c[0] is not s:
        s.close()
    return c


def fetch(address: str, key: int, n: int) -> List[int]:
    """The n fds offered under key by the process at address."""
    s, lock = _connection(address)
    request = _KEY.pack(key)
    with lock:
        fds: List[int] = []
        try:
            s.sendall(request)
            msg, fds, flags, _ = socket.recv_fds(s, 1 + _KEY.size, n, socket.MSG_CMSG_CLOEXEC)
            # recv_fds ignores its flags (CPython gh-107898): the fds
            # arrive inheritable, and a program this process starts would
            # keep the tensor's lifetime fd (and its pages) alive.
            for fd in fds:
                os.set_inheritable(fd, False)
            if msg[1:] != request:
                raise OSError("hurray: the fd server's reply names another message")
        except BaseException:
            # Anything that ends the exchange early (an OSError, or a
            # KeyboardInterrupt or a timeout raised by a signal handler while
            # waiting) leaves the stream out of step: its reply may still
            # come. The connection goes, so a later fetch can never take that
            # reply for its own message.
            _close_all(list(fds))
            with _lock:
                if _conns.get(address, (None,))[0] is s:
                    del _conns[address]
            s.close()
            raise
    if msg[:1] != _OK or len(fds) != n or flags & socket.MSG_CTRUNC:
        for fd in fds:
            os.close(fd)
        raise OSError(
            f"hurray: the sending process had no fds for this message (got {msg!r}, "
            f"{len(fds)} of {n} fds): it was received twice, the sender forked, or it "
            "waited longer than HURRAY_MP_PENDING_SECONDS unreceived"
        )
    return list(fds)


def _after_fork_in_child() -> None:
    global _server, _lock
    _lock = threading.Lock()
    if _server is not None:
        _server.close_in_child()
        _server = None
    for s, _ in _conns.values():
        s.close()
    _conns.clear()


os.register_at_fork(after_in_child=_after_fork_in_child)


def _drain() -> None:
    server = _server
    if server is not None:
        server.drain()


class _Anchor:
    """What multiprocessing's after-fork registry holds on to (weakly)."""


_ANCHOR = _Anchor()


def _register_drain(_: object = None) -> None:
    from multiprocessing import util

    # Runs after a Queue's feeder thread was joined (its finalizer has
    # priority -5), which is when a worker's last messages are pickled.
    util.Finalize(None, _drain, exitpriority=-10)


def install_exit_drain() -> None:
    """Registers the exit wait with multiprocessing (called once its
    reduction module is imported). A started process clears the finalizers
    it inherited or made while being unpickled, then runs the after-fork
    callbacks: the wait is registered again there, so it is in place
    before the process's own code runs, and in every later process."""
    from multiprocessing import util

    _register_drain()
    util.register_after_fork(_ANCHOR, _register_drain)
