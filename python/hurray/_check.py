# SPDX-License-Identifier: Apache-2.0
"""The checking mode of libhurray from Python (docs/impl/python.md §9).

While it is on, every handle libhurray makes (and so every Buffer) is
tracked: a second release of one reference is caught before it reaches the
producer, and the handles still live can be listed with where each was made
(the Python line, and the native backtrace).
"""

import gc
from typing import List, NamedTuple, Tuple

from . import _native


class LiveHandle(NamedTuple):
    """A tracked libhurray handle that is still live."""

    id: int
    """Its id: they count up from 1 and are never reused."""
    made_by: str
    """The libhurray function that made it ("hurray_alloc", "hurray_share", ...)."""
    site: str
    """The Python line that made its Buffer ("test_x.py:12 in test_leak"), or ""."""
    origin: str
    """The native backtrace of where it was made, one frame per line."""
    device: Tuple[int, int]
    """(device_type, device_id) with DLPack's values."""
    ndim: int


def enable_checking(stderr: bool = False) -> None:
    """Turn the checking mode on for handles made from now on.

    With ``stderr=True`` each finding, and at exit the handles still live,
    are also printed to stderr. ``HURRAY_CHECK=1`` (or ``stderr``) in the
    environment before hurray is imported does the same from the start.
    """
    _native._check_enable(_native.CHECK_TRACK | (_native.CHECK_STDERR if stderr else 0))


def disable_checking() -> None:
    """Stop tracking new handles; tracked ones keep being checked."""
    _native._check_enable(0)


def checking_enabled() -> bool:
    """True while the checking mode is on."""
    return bool(_native._check_state()["options"])


def check_mark() -> int:
    """The id the next tracked handle will get: pass it to check_leaks."""
    return int(_native._check_state()["next_id"])


def double_releases() -> int:
    """Double releases caught since the process started."""
    return int(_native._check_state()["double_releases"])


def live_handles(since: int = 0) -> List[LiveHandle]:
    """The tracked handles still live whose id is at least ``since``."""
    return [
        LiveHandle(i, made_by, label, origin, (device[0], device[1]), ndim)
        for (i, made_by, label, origin, device, ndim) in _native._check_live(since)
    ]


def check_leaks(since: int = 0, *, collect: bool = True) -> List[LiveHandle]:
    """The handles made since ``since`` (a check_mark) that are still live.

    Runs the garbage collector first (unless ``collect=False``), so that only
    Buffers something still refers to are listed. Raises RuntimeError when
    the checking mode is off, which would make the answer meaningless.
    """
    if not checking_enabled():
        raise RuntimeError(
            "hurray.check_leaks: the checking mode is off; call "
            "hurray.enable_checking() or set HURRAY_CHECK=1 first"
        )
    if collect:
        gc.collect()
    return live_handles(since)
