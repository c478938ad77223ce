# SPDX-License-Identifier: Apache-2.0
"""Never more writable than the source; __dlpack__ arguments as the DLPack
Python specification and NumPy read them."""

import ctypes
from typing import Any, Callable, List, Tuple

import numpy as np
import pytest

import hurray

from conftest import _api, capsule_name, versioned_tensor_of
from dlpack_ctypes import (
    DLTENSOR_FROM_PY,
    FROM_PY,
    READ_ONLY,
    DLManagedTensorVersioned,
    DLTensor,
    ExchangeAPI,
)

try:
    import torch
except ImportError:  # pragma: no cover - depends on the environment
    torch = None  # type: ignore[assignment]
try:
    import tvm_ffi
except ImportError:  # pragma: no cover
    tvm_ffi = None  # type: ignore[assignment]
try:
    import jax
    import jax.numpy as jnp

    jax.config.update("jax_platforms", "cpu")  # type: ignore[no-untyped-call]
except ImportError:  # pragma: no cover
    jax = None  # type: ignore[assignment]


class LegacyOnly:
    """A producer of the pre-1.0 protocol (only legacy capsules)."""

    def __init__(self, x: Any) -> None:
        self.x = x

    def __dlpack__(self, stream: Any = None) -> Any:
        return self.x.__dlpack__()

    def __dlpack_device__(self) -> Any:
        return self.x.__dlpack_device__()


def read_only_numpy() -> Any:
    a = np.arange(6.0)
    a.flags.writeable = False
    return a


def producers() -> List[Tuple[str, Callable[[], Any]]]:
    """(name, factory) of every peer's tensors, read-only ones included."""
    out = [
        ("numpy", lambda: np.arange(6.0)),
        ("numpy-readonly", read_only_numpy),
        ("numpy-legacy", lambda: LegacyOnly(np.arange(6.0))),
    ]
    if torch is not None:
        out += [
            ("torch", lambda: torch.arange(6.0, dtype=torch.float64)),
            ("torch-legacy", lambda: LegacyOnly(torch.arange(6.0, dtype=torch.float64))),
        ]
    if tvm_ffi is not None:
        out += [("tvm_ffi", lambda: tvm_ffi.from_dlpack(np.arange(6.0)))]
    if jax is not None:
        out += [("jax", lambda: jnp.arange(6.0))]
    return out


@pytest.mark.parametrize("make", [m for _, m in producers()], ids=[n for n, _ in producers()])
def test_never_more_writable_than_numpy_makes_the_same_producer(make: Callable[[], Any]) -> None:
    """hurray's Buffer of x is read-only exactly when np.from_dlpack(x) is, and
    so is every array NumPy takes from that Buffer, its shares and copies of
    the DLPack hand-over."""
    numpy_view = np.from_dlpack(make())
    buf = hurray.from_dlpack(make())
    assert buf.readonly is (not numpy_view.flags.writeable)
    for b in [buf, *buf.share(2), hurray.from_dlpack(buf)]:
        assert b.readonly is buf.readonly
        out = np.from_dlpack(b)
        assert out.flags.writeable is numpy_view.flags.writeable
        assert memoryview(b).readonly is buf.readonly
        cap = b.__dlpack__(max_version=(1, 0))
        assert bool(versioned_tensor_of(cap).flags & READ_ONLY) is buf.readonly
    if buf.readonly:
        with pytest.raises(ValueError, match="read-only"):
            np.from_dlpack(buf)[0] = 100.0
    # copy=True always gives a private, writable copy.
    c = hurray.from_dlpack(buf, copy=True)
    assert c.is_copied and not c.readonly and np.from_dlpack(c).flags.writeable


@pytest.mark.skipif(jax is None, reason="jax cannot be imported")
def test_jax_array_stays_unwritable_through_hurray() -> None:
    """The issue's case: writing through NumPy must never change a JAX array."""
    x = jnp.arange(4.0)
    assert not np.from_dlpack(x).flags.writeable  # type: ignore[arg-type]
    out = np.from_dlpack(hurray.from_dlpack(x))
    assert not out.flags.writeable
    with pytest.raises(ValueError):
        out[0] = 100.0
    assert float(jnp.sum(x)) == 6.0


@pytest.mark.skipif(jax is None, reason="jax cannot be imported")
def test_read_only_to_a_legacy_consumer_says_what_to_do() -> None:
    buf = hurray.from_dlpack(read_only_numpy())
    with pytest.raises(BufferError) as info:
        jnp.from_dlpack(buf)
    msg = str(info.value)
    assert "read-only" in msg and "legacy" in msg and "copy=True" in msg
    # The supported way: a writable private copy.
    j = jnp.from_dlpack(hurray.from_dlpack(buf, copy=True))
    assert j.tolist() == list(range(6))


def test_legacy_export_of_read_only_refused_unless_copied() -> None:
    buf = hurray.from_dlpack(read_only_numpy())
    with pytest.raises(BufferError, match=r"copy=True"):
        buf.__dlpack__()
    cap = buf.__dlpack__(copy=True)
    assert capsule_name(cap) == "dltensor"
    # A raw legacy capsule from a foreign producer comes in read-only.
    assert hurray.from_dlpack(np.arange(3.0).__dlpack__()).readonly
    # One of hurray's own legacy exports unwraps to its own (writable) flags.
    assert not hurray.from_dlpack(hurray.from_dlpack(np.arange(3.0)).__dlpack__()).readonly


def test_borrowed_dltensor_view_of_read_only_is_refused() -> None:
    cap = hurray.Buffer.__dict__["__dlpack_c_exchange_api__"]
    api = ExchangeAPI.from_address(_api.PyCapsule_GetPointer(cap, b"dlpack_exchange_api"))
    view = DLTensor()
    fn = DLTENSOR_FROM_PY(api.dltensor_from_py_object_no_sync)
    with pytest.raises(BufferError, match="read-only"):
        fn(hurray.from_dlpack(read_only_numpy()), ctypes.byref(view))
    # So is the owning export: table consumers may ignore READ_ONLY
    # (test_exchange_refusals.py).
    out = ctypes.POINTER(DLManagedTensorVersioned)()
    with pytest.raises(BufferError, match="read-only"):
        FROM_PY(api.managed_tensor_from_py_object_no_sync)(
            hurray.from_dlpack(read_only_numpy()), ctypes.byref(out)
        )
    assert not out


# --- max_version -----------------------------------------------------------


def version_of(cap: object) -> Tuple[int, int]:
    t = versioned_tensor_of(cap)
    return (t.version.major, t.version.minor)


@pytest.mark.parametrize(
    "asked,answer",
    [
        ((1, 0), (1, 0)),
        ((1, 1), (1, 1)),
        ((1, 2), (1, 2)),
        ((1, 3), (1, 3)),
        ((1, 7), (1, 3)),
        ((2, 0), (1, 3)),
        ((np.int64(1), np.int32(1)), (1, 1)),
    ],
)
def test_max_version_answers_the_highest_version_asked_for(
    asked: Tuple[Any, Any], answer: Tuple[int, int]
) -> None:
    cap = hurray.from_dlpack(np.arange(3.0)).__dlpack__(max_version=asked)
    assert capsule_name(cap) == "dltensor_versioned"
    assert version_of(cap) == answer


def test_max_version_below_1_gives_legacy() -> None:
    buf = hurray.from_dlpack(np.arange(3.0))
    assert capsule_name(buf.__dlpack__(max_version=(0, 8))) == "dltensor"
    assert capsule_name(buf.__dlpack__()) == "dltensor"


def test_a_tensor_older_versions_cannot_describe_gets_the_lowest_that_can() -> None:
    # float8 codes and the sub-byte padding flag came with DLPack 1.1.
    cap = hurray.empty(4, "float8_e4m3fn").__dlpack__(max_version=(1, 0))
    assert version_of(cap) == (1, 1)
    cap = hurray.empty(4, "float32").__dlpack__(max_version=(1, 0))
    assert version_of(cap) == (1, 0)


def test_numpy_and_torch_get_the_version_they_ask_for() -> None:
    class Spy:
        def __init__(self, buf: hurray.Buffer) -> None:
            self.buf = buf
            self.versions: List[Tuple[Any, Tuple[int, int]]] = []

        def __dlpack__(self, **kw: Any) -> Any:
            cap = self.buf.__dlpack__(**kw)
            self.versions.append((kw.get("max_version"), version_of(cap)))
            return cap

        def __dlpack_device__(self) -> Any:
            return self.buf.__dlpack_device__()

    spy = Spy(hurray.from_dlpack(np.arange(3.0)))
    np.from_dlpack(spy)
    if torch is not None:
        torch.utils.dlpack.from_dlpack(spy)
    for asked, got in spy.versions:
        assert got == (1, min(asked[1], 3)), spy.versions


# --- stream and copy ---------------------------------------------------------


def test_stream_on_cpu_only_none() -> None:
    buf = hurray.from_dlpack(np.arange(3.0))
    buf.__dlpack__(stream=None, max_version=(1, 3))
    for bad in (-1, 0, 1, 2):
        with pytest.raises(ValueError, match="None"):
            buf.__dlpack__(stream=bad, max_version=(1, 3))
        # NumPy refuses the same.
        with pytest.raises(Exception, match="stream"):
            np.arange(3.0).__dlpack__(stream=bad)


def test_copy_values_as_numpy_reads_them() -> None:
    a = np.arange(3.0)
    buf = hurray.from_dlpack(a)
    for value, copies in [
        (True, True),
        (False, False),
        (None, False),
        (1, True),
        (0, False),
        ([], False),
        ([1], True),
        (np.True_, True),
        (np.False_, False),
        (np._CopyMode.ALWAYS, True),
        (np._CopyMode.NEVER, False),
        (np._CopyMode.IF_NEEDED, False),
    ]:
        # NumPy as the reference: does its own export copy?
        ref = np.from_dlpack(a, copy=value)  # type: ignore[arg-type]  # NumPy's stub: bool | None
        assert (not np.shares_memory(ref, a)) is copies, value
        out = np.from_dlpack(hurray.from_dlpack(buf, copy=value))
        assert (out.ctypes.data != a.ctypes.data) is copies, value
        cap = buf.__dlpack__(max_version=(1, 3), copy=value)
        assert bool(versioned_tensor_of(cap).flags & 2) is copies, value  # IS_COPIED
    for bad in ("yes", "", "False"):
        with pytest.raises(ValueError, match="str"):
            buf.__dlpack__(copy=bad)
        with pytest.raises(ValueError, match="str"):
            hurray.from_dlpack(a, copy=bad)
        with pytest.raises(ValueError):
            np.from_dlpack(a, copy=bad)  # type: ignore[arg-type]

    class NoTruth:
        def __bool__(self) -> bool:
            raise RuntimeError("no truth value")

    with pytest.raises(RuntimeError, match="no truth"):
        buf.__dlpack__(copy=NoTruth())


def test_copy_never_across_devices_is_buffer_error() -> None:
    with pytest.raises(BufferError):
        hurray.from_dlpack(np.arange(3.0), copy=np._CopyMode.NEVER, device=(2, 0))


# --- integers and dtypes as NumPy takes them --------------------------------------


class Index:
    def __init__(self, v: int) -> None:
        self.v = v

    def __index__(self) -> int:
        return self.v


def test_index_integers_accepted() -> None:
    buf = hurray.from_dlpack(np.arange(6.0))
    assert len(buf.share(np.int64(2))) == 2
    assert len(buf.share(Index(3))) == 3
    assert hurray.empty(np.int64(4)).shape == (4,)
    assert hurray.empty((Index(2), np.uint8(3))).shape == (2, 3)
    cap = buf.__dlpack__(max_version=(1, 3), dl_device=(np.int32(1), Index(0)))
    assert hurray.from_dlpack(cap).shape == (6,)
    assert hurray.from_dlpack(buf, device=(np.int64(1), 0)).device == (1, 0)
    with pytest.raises(TypeError):
        buf.share(2.0)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        buf.share(np.int64(0))
    with pytest.raises(TypeError):
        hurray.empty((2, 2.5))  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "dtype,name",
    [
        (np.float32, "float32"),
        (np.dtype(np.float32), "float32"),
        ("f4", "float32"),
        ("<f8", "float64"),
        (np.int8, "int8"),
        (np.uint64, "uint64"),
        (np.bool_, "bool"),
        (np.complex64, "complex64"),
        (np.dtype("complex128"), "complex128"),
        ("float16", "float16"),
        ("bfloat16", "bfloat16"),
        ("float32x4", "float32x4"),
        (bool, "bool"),
        (float, "float64"),
    ],
)
def test_dtype_as_numpy_accepts(dtype: Any, name: str) -> None:
    b = hurray.empty((2,), dtype)
    assert b.dtype == name
    if name not in ("bfloat16", "float32x4"):
        assert np.from_dlpack(b).dtype == np.dtype(dtype if dtype is not bool else np.bool_)


@pytest.mark.parametrize(
    "dtype",
    [
        np.dtype(">f4"),
        np.dtype("U2"),
        np.dtype([("a", "f4")]),
        np.dtype(object),
        np.dtype("datetime64[s]"),
        np.longdouble,
    ],
)
def test_dtype_without_dlpack_equivalent_is_value_error(dtype: Any) -> None:
    with pytest.raises(ValueError, match="NumPy dtype"):
        hurray.empty(2, dtype)
