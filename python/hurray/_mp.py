# SPDX-License-Identifier: Apache-2.0
"""hurray.Buffer across multiprocessing (docs/impl/python.md §11).

multiprocessing (Pool, Queue, Pipe, Process arguments under spawn and
forkserver) and concurrent.futures.ProcessPoolExecutor pickle with
``multiprocessing.reduction.ForkingPickler``. hurray registers a reducer
there that sends a Buffer as libhurray's IPC message
(``hurray_ipc_export``): a small versioned descriptor plus file
descriptors, moved by ``multiprocessing.reduction.DupFd`` (the way
multiprocessing moves sockets and fds), and turned back into a Buffer by
``hurray_ipc_import`` in the receiver.

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

from . import _native

_MODULE = "multiprocessing.reduction"
_registered = False


def _rebuild_ipc(descriptor: bytes, dupfds: Sequence[Any], legacy_unsaid: bool) -> _native.Buffer:
    fds: List[int] = []
    try:
        for d in dupfds:
            fds.append(d.detach())
    except BaseException:
        for fd in fds:
            os.close(fd)
        raise
    # _ipc_import owns the fds from here on, also when it fails.
    return _native._ipc_import(descriptor, fds, legacy_unsaid)


def _reduce_buffer(buf: _native.Buffer) -> Tuple[Callable[..., _native.Buffer], Tuple[Any, ...]]:
    from multiprocessing import context, reduction

    descriptor, fds, legacy_unsaid = _native._ipc_export(buf)
    popen = context.get_spawning_popen()
    dupfds: List[Any] = []
    try:
        for fd in fds:
            dupfds.append(reduction.DupFd(fd))
    except BaseException:
        for fd in fds:
            os.close(fd)
        raise
    if popen is None:
        # resource_sharer's DupFd holds a duplicate of its own until the
        # receiver fetches it: ours can go now.
        for fd in fds:
            os.close(fd)
    else:
        # Arguments of a process being started (spawn, forkserver): the fds
        # are passed to the child when it is launched, after pickling, so
        # they stay open until the Popen object goes.
        for fd in fds:
            weakref.finalize(popen, os.close, fd)
    return _rebuild_ipc, (descriptor, tuple(dupfds), legacy_unsaid)


def register() -> None:
    """Register the reducer with ForkingPickler (idempotent)."""
    global _registered
    if _registered:
        return
    from multiprocessing.reduction import ForkingPickler

    ForkingPickler.register(_native.Buffer, _reduce_buffer)
    _registered = True


class _Loader(importlib.abc.Loader):
    def __init__(self, inner: importlib.abc.Loader) -> None:
        self._inner = inner

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> Optional[ModuleType]:
        return self._inner.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self._inner.exec_module(module)
        register()


class _Finder(importlib.abc.MetaPathFinder):
    """Finds nothing itself: wraps the loader of multiprocessing.reduction
    so that the reducer is registered right after that module runs."""

    def find_spec(self, fullname: str, path: Optional[Sequence[str]],
                  target: Optional[ModuleType] = None) -> Optional[importlib.machinery.ModuleSpec]:
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
    if not hasattr(_native, "_ipc_export"):  # until the IPC C ABI is merged (issue 18)
        return
    if _MODULE in sys.modules:
        register()
    else:
        sys.meta_path.insert(0, _Finder())
