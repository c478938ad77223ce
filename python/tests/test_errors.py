# SPDX-License-Identifier: Apache-2.0
"""Every failure is an ordinary Python exception (BufferError, TypeError,
ValueError, MemoryError, OverflowError) carrying a useful message: never a
SystemError (an error returned without an exception set, or an exception
set on success), never a crash."""

import ctypes
import gc
from typing import Any, Callable, Optional, Tuple, Type

import numpy as np
import pytest

import hurray

from conftest import CountingProducer, _api, capsule_name


class Producer:
    def __init__(self, result: Any = None, exc: Optional[BaseException] = None) -> None:
        self.result, self.exc = result, exc

    def __dlpack__(self, **kwargs: Any) -> Any:
        if self.exc is not None:
            raise self.exc
        return self.result

    def __dlpack_device__(self) -> Tuple[int, int]:
        return (1, 0)


def released() -> hurray.Buffer:
    b = hurray.from_dlpack(np.arange(3.0))
    b.release()
    return b


def used_capsule() -> object:
    cap = np.arange(3.0).__dlpack__(max_version=(1, 3))
    hurray.from_dlpack(cap)
    return cap


def nameless_capsule() -> object:
    return _api.PyCapsule_New(ctypes.addressof(ctypes.c_int(0)), None, None)


def live() -> hurray.Buffer:
    return hurray.from_dlpack(np.arange(3.0))


CASES = [
    ("from_dlpack(int)", lambda: hurray.from_dlpack(1), TypeError, "DLPack"),
    ("from_dlpack()", lambda: hurray.from_dlpack(), TypeError, None),  # type: ignore[call-arg]
    ("from_dlpack(a, b)", lambda: hurray.from_dlpack(1, 2), TypeError, None),  # type: ignore[call-arg]
    ("from_dlpack(foo=)", lambda: hurray.from_dlpack(np.arange(3.0), foo=1), TypeError, "foo"),  # type: ignore[call-arg]
    ("producer returns int", lambda: hurray.from_dlpack(Producer(result=3)), TypeError, "capsule"),
    (
        "producer raises RuntimeError",
        lambda: hurray.from_dlpack(Producer(exc=RuntimeError("boom"))),
        RuntimeError,
        "boom",
    ),
    (
        "producer raises AttributeError",
        lambda: hurray.from_dlpack(Producer(exc=AttributeError("inner"))),
        AttributeError,
        "inner",
    ),
    (
        "producer raises TypeError twice",
        lambda: hurray.from_dlpack(Producer(exc=TypeError("nope"))),
        TypeError,
        "nope",
    ),
    (
        "producer raises BufferError",
        lambda: hurray.from_dlpack(Producer(exc=BufferError("no"))),
        BufferError,
        "no",
    ),
    ("used capsule", lambda: hurray.from_dlpack(used_capsule()), ValueError, "already consumed"),
    (
        "foreign capsule",
        lambda: hurray.from_dlpack(_api.PyCapsule_New(1, b"other", None)),
        TypeError,
        "other",
    ),
    ("nameless capsule", lambda: hurray.from_dlpack(nameless_capsule()), TypeError, "NULL"),
    ("device=5", lambda: hurray.from_dlpack(np.arange(3.0), device=5), TypeError, "device"),  # type: ignore[arg-type]
    ("device='gpu'", lambda: hurray.from_dlpack(np.arange(3.0), device="gpu"), ValueError, "gpu"),
    ("device=(1,)", lambda: hurray.from_dlpack(np.arange(3.0), device=(1,)), ValueError, "2 items"),  # type: ignore[arg-type]
    (
        "device=(2**40,0)",
        lambda: hurray.from_dlpack(np.arange(3.0), device=(2**40, 0)),
        ValueError,
        "range",
    ),
    ("released shape", lambda: released().shape, ValueError, "released"),
    ("released __dlpack__", lambda: released().__dlpack__(), ValueError, "released"),
    ("released share", lambda: released().share(2), ValueError, "released"),
    ("share(2**62)", lambda: live().share(2**62), ValueError, str(2**62)),
    ("share(2**70)", lambda: live().share(2**70), ValueError, str(2**70)),
    ("share(2**33)", lambda: live().share(2**33), ValueError, str(2**33)),
    ("share(2**32)", lambda: live().share(2**32), ValueError, "HURRAY_ERR_INVALID_ARGUMENT"),
    ("share(-2**70)", lambda: live().share(-(2**70)), ValueError, "n >= 1"),
    ("stream=2**100", lambda: live().__dlpack__(stream=2**100), ValueError, "stream"),
    ("stream=1.5", lambda: live().__dlpack__(stream=1.5), TypeError, "stream"),  # type: ignore[arg-type]
    ("dl_device=(2**40,0)", lambda: live().__dlpack__(dl_device=(2**40, 0)), ValueError, "range"),
    ("dl_device=('a',0)", lambda: live().__dlpack__(dl_device=("a", 0)), TypeError, "ints"),  # type: ignore[arg-type]
    ("max_version=[1,3]", lambda: live().__dlpack__(max_version=[1, 3]), TypeError, "max_version"),  # type: ignore[arg-type]
    ("empty negative", lambda: hurray.empty((2, -1)), ValueError, "HURRAY_ERR_INVALID_ARGUMENT"),
    ("empty overflow", lambda: hurray.empty((2**62, 2**62)), ValueError, "HURRAY_ERR_OVERFLOW"),
    ("empty ndim 65", lambda: hurray.empty((1,) * 65), ValueError, "dimensions"),
    ("empty int7", lambda: hurray.empty(3, "int7"), BufferError, "HURRAY_ERR_UNSUPPORTED_DTYPE"),
    ("empty bad dtype", lambda: hurray.empty(3, "nonsense"), ValueError, "unknown dtype"),
    ("empty bad shape", lambda: hurray.empty("x"), TypeError, None),  # type: ignore[arg-type]
    ("empty huge", lambda: hurray.empty((2**40, 2**20)), (MemoryError, ValueError), None),
]


@pytest.mark.parametrize("what,call,exc,match", CASES, ids=[c[0] for c in CASES])
def test_errors_are_ordinary_exceptions(
    what: str, call: Callable[[], object], exc: Type[BaseException], match: Optional[str]
) -> None:
    with pytest.raises(Exception) as info:
        call()
    assert not isinstance(info.value, SystemError), f"{what}: {info.value!r}"
    assert isinstance(info.value, exc), f"{what}: {info.value!r}"
    assert str(info.value).strip(), f"{what}: {type(info.value).__name__} without a message"
    if match is not None:
        assert match in str(info.value), f"{what}: {info.value!r}"


def test_libhurray_message_is_carried() -> None:
    with pytest.raises(ValueError) as info:
        hurray.empty((2, -1))
    msg = str(info.value)
    assert msg.startswith("hurray.empty: ")
    assert msg.endswith("[HURRAY_ERR_INVALID_ARGUMENT]")
    assert len(msg) > len("hurray.empty: [HURRAY_ERR_INVALID_ARGUMENT]") + 5


def test_errors_leave_the_buffer_usable() -> None:
    a = np.arange(4.0)
    b = hurray.from_dlpack(a)
    for bad in (dict(stream=3), dict(max_version=1), dict(dl_device=(2, 0), copy=False)):
        with pytest.raises(Exception) as info:
            b.__dlpack__(**bad)
        assert not isinstance(info.value, SystemError)
    assert np.from_dlpack(b).ctypes.data == a.ctypes.data


@pytest.mark.parametrize("n", [2**32, 2**40, 2**62, 2**70])
def test_share_too_many_names_n_and_keeps_the_buffer(n: int) -> None:
    # hurray_share takes at most 2^32 handles per call and the Buffer keeps
    # one of them: n is refused before anything is allocated or shared.
    a = np.arange(4.0)
    b = hurray.from_dlpack(a)
    with pytest.raises(ValueError) as info:
        b.share(n)
    msg = str(info.value)
    assert msg.startswith("hurray.Buffer.share: ") and str(n) in msg, msg
    assert "4294967295" in msg and msg.endswith("[HURRAY_ERR_INVALID_ARGUMENT]"), msg
    assert not b.released and b.shape == (4,)
    assert np.from_dlpack(b).ctypes.data == a.ctypes.data
    (only,) = b.share(1)
    assert only.data_ptr == b.data_ptr


def test_major_version_2_message_speaks_of_the_capsule(
    counting_producer: Type[CountingProducer],
) -> None:
    p = counting_producer(version=(2, 0))
    cap = p.capsule()
    with pytest.raises(BufferError) as info:
        hurray.from_dlpack(cap)
    msg = str(info.value)
    assert msg.startswith("hurray.from_dlpack: "), msg
    assert "2.0" in msg and "major version 1" in msg, msg
    assert "unconsumed" in msg and "'dltensor_versioned'" in msg, msg
    assert msg.endswith("[HURRAY_ERR_UNSUPPORTED_VERSION]"), msg
    # C-level advice has no place here: Python code cannot call a deleter.
    assert "deleter" not in msg and "caller" not in msg, msg
    # What the message says holds: the capsule's destructor deletes the tensor.
    # (Dropped here, before the producer: `info` ties this frame into a cycle.)
    assert capsule_name(cap) == "dltensor_versioned" and p.deleted == 0
    del cap
    gc.collect()
    assert p.deleted == 1


class Releasing:
    """An integer (or truth value) whose __index__ / __bool__ releases the
    Buffer it is passed to, in the middle of the Buffer's argument parsing."""

    def __init__(self, buf: hurray.Buffer, value: int) -> None:
        self.buf, self.value, self.calls = buf, value, 0

    def __index__(self) -> int:
        self.calls += 1
        self.buf.release()
        return self.value

    def __bool__(self) -> bool:
        self.calls += 1
        self.buf.release()
        return False


@pytest.mark.parametrize(
    "where", ["max_version[0]", "max_version[1]", "dl_device[0]", "dl_device[1]", "copy", "stream"]
)
def test_dlpack_argument_that_releases_the_buffer_gets_the_released_error(where: str) -> None:
    # The liveness check must come after the arguments are read: it came before
    # the arguments' __index__ ran, and the export then reached hurray_share
    # with an empty handle ("src is empty (release_fn is NULL)").
    src = np.arange(4.0)
    b = hurray.from_dlpack(src)
    kw: dict[str, Any]
    if where.startswith("max_version"):
        r = Releasing(b, 1 if where.endswith("[0]") else 0)
        kw = {"max_version": (r, 0) if where.endswith("[0]") else (1, r)}
    elif where.startswith("dl_device"):
        r = Releasing(b, 1 if where.endswith("[0]") else 0)
        kw = {"dl_device": (r, 0) if where.endswith("[0]") else (1, r)}
    elif where == "copy":
        r = Releasing(b, 0)
        kw = {"max_version": (1, 0), "copy": r}
    else:
        # On the CPU only stream=None is taken (refused before __index__):
        # the stream of a CUDA consumer is read as an integer.
        r = Releasing(b, 5)
        kw = {"max_version": (1, 0), "stream": r, "dl_device": (2, 0)}
    with pytest.raises(ValueError, match=r"^operation on a released hurray\.Buffer$"):
        b.__dlpack__(**kw)
    assert b.released and r.calls == 1
