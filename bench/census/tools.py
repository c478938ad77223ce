# SPDX-License-Identifier: Apache-2.0
"""The tools under test. Each hands a 4 KiB uint8 CPU tensor from a producer
to a consumer over a connected multiprocessing Connection (a Unix socket)
and says what its producer can count about its own releases.

Producer side: make() allocates (one allocation counted), send() puts the
hand-off on the connection, drop() lets the producer's own reference go once
the consumer answered or died, report() writes what the producer can count
after the run. Consumer side: receive() reads the message without mapping
anything, open() maps it, read() touches its first and last byte,
release() lets it go."""

from __future__ import annotations

import ctypes
import functools
import os
import weakref
from multiprocessing.connection import Connection
from typing import Any, Dict, Optional, Type

from census import board as B
from census import proc

NBYTES = 4096


class Tool:
    name = ""
    label = ""
    counts = ""  # what "producer releases" counts for this tool

    def __init__(self, board: B.Board, slot: int) -> None:
        self.board, self.slot = board, slot

    @classmethod
    def prepare(cls) -> None:
        """In the supervisor before it forks: imports, so that a replacement
        process starts in milliseconds."""

    def make(self) -> Any:
        raise NotImplementedError

    def send(self, conn: Connection, obj: Any) -> None:
        conn.send_bytes(self.pack(obj))

    def pack(self, obj: Any) -> bytes:
        from multiprocessing.reduction import ForkingPickler

        return bytes(ForkingPickler.dumps(obj))

    def drop(self, obj: Any) -> None:
        """The producer's reference goes (its release counted where the
        tool counts it at the drop)."""

    def report(self) -> None:
        """The producer's release count after the run, written to its slot."""

    def receive(self, conn: Connection) -> Optional[bytes]:
        return conn.recv_bytes()

    def open(self, conn: Connection, raw: Optional[bytes]) -> Any:
        from multiprocessing.reduction import ForkingPickler

        return ForkingPickler.loads(raw)

    def read(self, h: Any) -> int:
        import numpy as np

        a = np.from_dlpack(h)
        return int(a[0]) + int(a[-1])

    def release(self, h: Any) -> None:
        h.release()

    def _finalized(self, obj: Any) -> None:
        weakref.finalize(obj, self.board.add, self.slot, B.RELEASES)


# ------------------------------------------------------------ libhurray's C API


class _Buf(ctypes.Structure):
    _fields_ = [
        ("version", ctypes.c_uint32),
        ("reserved", ctypes.c_uint32),
        ("release_fn", ctypes.c_void_p),
        ("user_data", ctypes.c_void_p),
        ("flags", ctypes.c_uint64),
        ("data", ctypes.c_void_p),
        ("byte_offset", ctypes.c_uint64),
        ("device_type", ctypes.c_int32),
        ("device_id", ctypes.c_int32),
        ("code", ctypes.c_uint8),
        ("bits", ctypes.c_uint8),
        ("lanes", ctypes.c_uint16),
        ("ndim", ctypes.c_int32),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
    ]


class _Device(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _Diag(ctypes.Structure):
    _fields_ = [("struct_size", ctypes.c_uint32), ("reserved", ctypes.c_uint32)] + [
        (n, ctypes.c_uint64)
        for n in (
            "failed_releases",
            "teardown_leaks",
            "fork_skipped_releases",
            "context_reset_skips",
            "stream_fallback_frees",
            "double_releases",
            "ipc_copies",
            "ipc_returns",
        )
    ]


@functools.cache
def libhurray() -> ctypes.CDLL:
    """The libhurray.so the installed hurray package carries (the one its
    Python module uses; loading it again gives the same instance)."""
    import hurray

    path = os.path.join(os.path.dirname(hurray.__file__), "lib", "libhurray.so")
    lib = ctypes.CDLL(path)
    lib.hurray_alloc.argtypes = [
        _Device,
        _DType,
        ctypes.c_int32,
        ctypes.POINTER(ctypes.c_int64),
        ctypes.c_uint64,
        ctypes.POINTER(_Buf),
    ]
    lib.hurray_share.argtypes = [ctypes.POINTER(_Buf), ctypes.c_size_t, ctypes.POINTER(_Buf)]
    lib.hurray_ipc_send.argtypes = [ctypes.c_int, ctypes.POINTER(_Buf), ctypes.c_uint32]
    lib.hurray_ipc_recv.argtypes = [ctypes.c_int, ctypes.POINTER(_Buf)]
    lib.hurray_buffer_release.argtypes = [ctypes.POINTER(_Buf)]
    lib.hurray_get_diagnostics.argtypes = [ctypes.POINTER(_Diag)]
    return lib


def ipc_returns(lib: ctypes.CDLL) -> int:
    d = _Diag()
    d.struct_size = ctypes.sizeof(d)
    if lib.hurray_get_diagnostics(ctypes.byref(d)) != 0:
        raise RuntimeError("hurray_get_diagnostics failed")
    return int(d.ipc_returns)


def report_memfd(board: B.Board, slot: int) -> None:
    """libhurray's memfd release unmaps: each memfd:hurray mapping left in the
    producer is an allocation not released; ipc_returns from diagnostics."""
    live = proc.memfd_mappings(os.getpid())
    board.put(slot, B.MEMFD_MAPS, live)
    board.put(slot, B.RELEASES, board.slot(slot, B.ALLOCS) - live)
    board.put(slot, B.RETURNS, ipc_returns(libhurray()))


class HurrayC(Tool):
    name = "hurray-c"
    label = "libhurray C API (hurray_ipc_send/recv, ctypes)"
    counts = (
        "hurray_alloc(HURRAY_ALLOC_SHAREABLE) against libhurray's own releases: "
        "an allocation is one memfd:hurray mapping in the producer until its release"
    )

    def __init__(self, board: B.Board, slot: int) -> None:
        super().__init__(board, slot)
        self.lib = libhurray()
        self.shape = (ctypes.c_int64 * 1)(NBYTES)

    @classmethod
    def prepare(cls) -> None:
        libhurray()

    def make(self) -> Any:
        h, two = _Buf(), (_Buf * 2)()
        st = self.lib.hurray_alloc(
            _Device(1, 0), _DType(1, 8, 1), 1, self.shape, 1 << 32, ctypes.byref(h)
        )
        if st != 0:
            raise RuntimeError(f"hurray_alloc: {st}")
        ctypes.memset(h.data, 1, 1)
        if self.lib.hurray_share(ctypes.byref(h), 2, two) != 0:
            raise RuntimeError("hurray_share failed")
        return two  # two[0] goes to the consumer, two[1] is the producer's own

    def send(self, conn: Connection, obj: Any) -> None:
        st = self.lib.hurray_ipc_send(conn.fileno(), ctypes.byref(obj[0]), 1)
        if st != 0:
            raise OSError(f"hurray_ipc_send: {st}")  # obj[0] is still ours: drop() releases it
        self.board.add(self.slot, B.EXPORTS)

    def drop(self, obj: Any) -> None:
        self.lib.hurray_buffer_release(ctypes.byref(obj[0]))  # empty after a send: no-op
        self.lib.hurray_buffer_release(ctypes.byref(obj[1]))

    def report(self) -> None:
        report_memfd(self.board, self.slot)

    def receive(self, conn: Connection) -> Optional[bytes]:
        return None  # the message stays in the socket until open()

    def open(self, conn: Connection, raw: Optional[bytes]) -> Any:
        r = _Buf()
        st = self.lib.hurray_ipc_recv(conn.fileno(), ctypes.byref(r))
        if st != 0:
            raise OSError(f"hurray_ipc_recv: {st}")
        return r

    def read(self, h: Any) -> int:
        b = ctypes.cast(h.data, ctypes.POINTER(ctypes.c_uint8))
        return int(b[0]) + int(b[NBYTES - 1])

    def release(self, h: Any) -> None:
        self.lib.hurray_buffer_release(ctypes.byref(h))


# ------------------------------------------------------ hurray's multiprocessing


class HurrayShared(Tool):
    name = "hurray-mp"
    label = "hurray multiprocessing, hurray.empty(shared=True)"
    counts = HurrayC.counts.replace(
        "hurray_alloc(HURRAY_ALLOC_SHAREABLE)", "hurray.empty(shared=True)"
    )

    @classmethod
    def prepare(cls) -> None:
        import multiprocessing.reduction  # noqa: F401  (registers hurray's reducer)

        import numpy  # noqa: F401

        import hurray  # noqa: F401

        libhurray()

    def make(self) -> Any:
        import hurray

        return hurray.empty(NBYTES, "uint8", shared=True)

    def drop(self, obj: Any) -> None:
        obj.release()

    def report(self) -> None:
        report_memfd(self.board, self.slot)


class HurrayNumpy(HurrayShared):
    name = "hurray-mp-numpy"
    label = "hurray multiprocessing, NumPy memory (copied once at export)"
    counts = (
        "NumPy arrays made against NumPy arrays freed (weakref.finalize); the "
        "memfd copies libhurray made are counted as memfd:hurray mappings left"
    )

    def make(self) -> Any:
        import numpy as np

        import hurray

        a = np.ones(NBYTES, np.uint8)
        self._finalized(a)
        return hurray.from_dlpack(a)

    def report(self) -> None:
        self.board.put(self.slot, B.MEMFD_MAPS, proc.memfd_mappings(os.getpid()))
        self.board.put(self.slot, B.RETURNS, ipc_returns(libhurray()))


# ---------------------------------------------------------- torch.multiprocessing


class TorchFd(Tool):
    name = "torch-fd"
    strategy = "file_descriptor"
    label = "torch.multiprocessing, file_descriptor"
    counts = "torch tensors made against tensors collected in the producer (weakref.finalize)"

    def __init__(self, board: B.Board, slot: int) -> None:
        super().__init__(board, slot)
        import torch.multiprocessing as tmp

        tmp.set_sharing_strategy(self.strategy)

    @classmethod
    def prepare(cls) -> None:
        import numpy  # noqa: F401
        import torch
        import torch.multiprocessing as tmp

        tmp.set_sharing_strategy(cls.strategy)
        torch.set_num_threads(1)

    def make(self) -> Any:
        import torch

        t = torch.ones(NBYTES, dtype=torch.uint8).share_memory_()
        self._finalized(t)
        return t

    def read(self, h: Any) -> int:
        return int(h[0]) + int(h[-1])

    def release(self, h: Any) -> None:
        del h


class TorchFs(TorchFd):
    name = "torch-fs"
    strategy = "file_system"
    label = "torch.multiprocessing, file_system"


# ------------------------------------------------- multiprocessing.shared_memory


class Shm(Tool):
    name = "shm"
    label = "multiprocessing.shared_memory (a name sent)"
    counts = "SharedMemory segments created against segments unlinked by the producer"
    prefix = "census-shm-"

    @classmethod
    def prepare(cls) -> None:
        from multiprocessing import resource_tracker

        import numpy  # noqa: F401

        resource_tracker.ensure_running()  # one tracker, shared by every fork

    def make(self) -> Any:
        from multiprocessing import shared_memory

        name = f"{self.prefix}{os.getpid()}-{self.board.get(B.NEXT)}"
        return shared_memory.SharedMemory(name=name, create=True, size=NBYTES)

    def pack(self, obj: Any) -> bytes:
        return obj.name.encode()

    def drop(self, obj: Any) -> None:
        obj.close()
        obj.unlink()
        self.board.add(self.slot, B.RELEASES)

    def open(self, conn: Connection, raw: Optional[bytes]) -> Any:
        from multiprocessing import shared_memory

        assert raw is not None
        return shared_memory.SharedMemory(name=raw.decode())

    def read(self, h: Any) -> int:
        return int(h.buf[0]) + int(h.buf[NBYTES - 1])

    def release(self, h: Any) -> None:
        h.close()


TOOLS: Dict[str, Type[Tool]] = {
    t.name: t for t in (HurrayC, HurrayShared, HurrayNumpy, TorchFd, TorchFs, Shm)
}
