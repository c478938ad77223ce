# SPDX-License-Identifier: Apache-2.0
"""Collections of Buffers that cross processes as one message
(docs/impl/python.md §13)."""

from typing import Any

from . import _native


class BufferDict(dict):  # type: ignore[type-arg]
    """A dict whose values are :class:`Buffer` objects (what :func:`pack`
    returns). It is an ordinary dict, except that :mod:`multiprocessing`
    (Queue, Pipe, Pool, Process arguments, under spawn, fork and
    forkserver) and :class:`concurrent.futures.ProcessPoolExecutor` send it
    as ONE message (``hurray_ipc_export_set``): Buffers that share an
    allocation (a tensor group, shares of one Buffer) travel as one memfd
    and one lifetime fd, whatever their number, distinct allocations are
    de-duplicated, and the receiver gets a BufferDict with the same keys.
    Wrap a plain dict of Buffers to send it so: ``BufferDict(d)``. A
    BufferDict holding anything but CPU Buffers is sent value by value, as
    a plain dict is."""

    __slots__ = ()

    def __repr__(self) -> str:
        return f"hurray.BufferDict({dict.__repr__(self)})"


class BufferList(list):  # type: ignore[type-arg]
    """A list of :class:`Buffer` objects that crosses :mod:`multiprocessing`
    as ONE message, as :class:`BufferDict` does."""

    __slots__ = ()

    def __repr__(self) -> str:
        return f"hurray.BufferList({list.__repr__(self)})"


def set_members(obj: Any) -> Any:
    """The Buffers of a BufferDict / BufferList when all its values are
    CPU Buffers (the set message carries CPU memory), else None."""
    values = list(obj.values()) if isinstance(obj, dict) else list(obj)
    if not values:
        return None
    for v in values:
        if type(v) is not _native.Buffer or v.released or v.device[0] != 1:
            return None
    return values
