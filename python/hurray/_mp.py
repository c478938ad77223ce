# SPDX-License-Identifier: Apache-2.0
"""hurray.Buffer across multiprocessing (docs/impl/python.md §11).

multiprocessing (Pool, Queue, Pipe, Process arguments under spawn and
forkserver) and concurrent.futures.ProcessPoolExecutor pickle with
``multiprocessing.reduction.ForkingPickler``. hurray registers a reducer
there that sends a Buffer as libhurray's IPC message
(``hurray_ipc_export``): a small versioned descriptor plus file
descriptors, which the receiver fetches from the sender over a Unix socket
kept open between the two processes (hurray/_fdshare.py; arguments of a
process being started travel with its launch, multiprocessing's DupFd),
and turned back into a Buffer by ``hurray_ipc_import`` in the receiver. A
message that is never received keeps its fds (and so the memory) in the
sender until the sender exits, as multiprocessing's own DupFd does.

* Shareable memory (``hurray.empty(..., shared=True)``, a Buffer received
  this way, or a share of either) is sent zero-copy: both processes map the
  same pages.
* Other CPU memory is copied once into shareable memory by libhurray (the
  receiver gets the copy; later writes on either side are not seen by the
  other). libhurray counts these copies in its diagnostics.
* The sender keeps a reference to the memory until every process that got
  the message has released (or died, or the message was dropped); the
  producer's release then runs once, after the last local holder too.

Registration is lazy: ``import hurray`` does not import multiprocessing;
the reducer is registered as soon as ``multiprocessing.reduction`` is
imported (or at once when it already was).
"""

import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys
import weakref
from types import ModuleType
from typing import Any, Callable, List, Optional, Sequence, Tuple

from . import _fdshare, _native, _sets

_MODULE = "multiprocessing.reduction"
_registered = False


def _rebuild_ipc(descriptor: bytes, shared: Any, legacy_unsaid: bool) -> _native.Buffer:
    """Receiver: fetch the fds, import (the fds are _ipc_import's from then
    on, also when it fails)."""
    if isinstance(shared, tuple) and len(shared) == 3 and isinstance(shared[0], str):
        fds = _fdshare.fetch(*shared)  # (address, key, n)
    else:  # one DupFd per fd (arguments of a process being started)
        fds = []
        try:
            for d in shared:
                fds.append(d.detach())
        except BaseException:
            for fd in fds:
                os.close(fd)
            raise
    return _native._ipc_import(descriptor, fds, legacy_unsaid)


def _hand_over(
    fds: List[int],
    one: Optional[Callable[[List[int]], Any]],
    parts: Optional[Callable[[List[int]], Any]],
) -> Any:
    """What the receiver needs to get `fds`; the caller's list keeps its fds
    (and closes them), the receiver's path holds copies or names of its own.

    In a process being started (spawn, forkserver arguments) the Popen
    passes the fds themselves to the child when it launches it, after
    pickling: they move (one C call) to a list that a finalizer of the Popen
    closes, registered before the move. Otherwise _fdshare keeps duplicates
    (`one` offer, or `parts` of at most _FDS_PER_OFFER fds each)."""
    from multiprocessing import context, reduction

    popen = context.get_spawning_popen()
    if popen is None:
        if one is not None:
            return one(fds)
        assert parts is not None
        return (
            "offers",
            [parts(fds[i : i + _FDS_PER_OFFER]) for i in range(0, len(fds), _FDS_PER_OFFER)],
        )
    kept: List[int] = []
    weakref.finalize(popen, _native._close_fds, kept)
    shared = tuple(reduction.DupFd(fd) for fd in fds)
    _native._move_fds(fds, kept)
    return shared


def _reduce_buffer(buf: _native.Buffer) -> Tuple[Callable[..., _native.Buffer], Tuple[Any, ...]]:
    # Interrupt safety: a signal handler (KeyboardInterrupt) may raise at
    # any bytecode. So the list that owns the fds exists before they do
    # (_ipc_export fills it in the same C call that makes them), every hand-
    # over to another owner is registered before it is made, and what is
    # left in `fds` at the end is closed in one C call: an fd lost between
    # two steps would keep the Buffer's memory for the life of the process.
    fds: List[int] = []
    try:
        descriptor, _, legacy_unsaid = _native._ipc_export(buf, fds)
        shared = _hand_over(fds, lambda part: (*_fdshare.offer(part), len(part)), None)
    finally:
        _native._close_fds(fds)  # _fdshare or the Popen holds its own
    return _rebuild_ipc, (descriptor, shared, legacy_unsaid)


# The kernel passes at most 253 fds per sendmsg (SCM_MAX_FD): a set with
# more is offered in several parts.
_FDS_PER_OFFER = 252


def _rebuild_set(
    kind: str, keys: Any, descriptor: bytes, shared: Any, legacy: Tuple[bool, ...]
) -> Any:
    """Receiver of a BufferDict / BufferList: fetch every fd, import the set
    (the fds are _ipc_import_set's from then on, also when it fails)."""
    fds: List[int] = []
    try:
        if isinstance(shared, tuple) and shared[:1] == ("offers",):
            for address, key, n in shared[1]:
                fds.extend(_fdshare.fetch(address, key, n))
        else:  # one DupFd per fd (arguments of a process being started)
            for d in shared:
                fds.append(d.detach())
    except BaseException:
        for fd in fds:
            os.close(fd)
        raise
    bufs = _native._ipc_import_set(descriptor, fds, legacy)
    if kind == "dict":
        return _sets.BufferDict(zip(keys, bufs))
    return _sets.BufferList(bufs)


def _rebuild_plain(cls: type, state: Any) -> Any:
    """A BufferDict / BufferList sent element by element."""
    return cls(state)


def _reduce_set(obj: Any) -> Tuple[Callable[..., Any], Tuple[Any, ...]]:
    # One snapshot, taken in one C call under the GIL: keys and values come
    # from the same moment even when another thread changes obj meanwhile.
    snap: Any = dict(obj) if isinstance(obj, dict) else list(obj)
    bufs = _sets.set_members(snap)
    if bufs is None:  # empty, or not all CPU Buffers: element by element
        return _rebuild_plain, (type(obj), snap)
    kind = "dict" if isinstance(obj, dict) else "list"
    keys = list(snap.keys()) if kind == "dict" else None
    fds: List[int] = []  # as in _reduce_buffer: owned before they exist
    try:
        descriptor, _, legacy = _native._ipc_export_set(bufs, fds)
        shared = _hand_over(fds, None, lambda part: (*_fdshare.offer(part), len(part)))
    finally:
        _native._close_fds(fds)
    return _rebuild_set, (kind, keys, descriptor, shared, legacy)


def register() -> None:
    """Register the reducer with ForkingPickler (idempotent)."""
    global _registered
    if _registered:
        return
    from multiprocessing.reduction import ForkingPickler

    ForkingPickler.register(_native.Buffer, _reduce_buffer)
    ForkingPickler.register(_sets.BufferDict, _reduce_set)
    ForkingPickler.register(_sets.BufferList, _reduce_set)
    _fdshare.install_exit_drain()
    _registered = True


class _Loader(importlib.abc.Loader):
    """The module's own loader, which registers the reducer after running
    the module; everything else (get_source for tracebacks, get_code, ...)
    is the inner loader's."""

    def __init__(self, inner: importlib.abc.Loader) -> None:
        self._inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> Optional[ModuleType]:
        return self._inner.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self._inner.exec_module(module)
        register()


class _Finder(importlib.abc.MetaPathFinder):
    """Finds nothing itself: wraps the loader of multiprocessing.reduction
    so that the reducer is registered right after that module runs."""

    def find_spec(
        self, fullname: str, path: Optional[Sequence[str]], target: Optional[ModuleType] = None
    ) -> Optional[importlib.machinery.ModuleSpec]:
        if fullname != _MODULE:
            return None
        try:
            sys.meta_path.remove(self)
        except ValueError:
            pass
        spec = importlib.util.find_spec(fullname)
        if spec is None or spec.loader is None:
            return spec
        spec.loader = _Loader(spec.loader)
        return spec


def install() -> None:
    """Called by ``import hurray``."""
    if _MODULE in sys.modules:
        register()
    else:
        sys.meta_path.insert(0, _Finder())
