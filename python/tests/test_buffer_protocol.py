# SPDX-License-Identifier: Apache-2.0
"""The Python buffer protocol of CPU Buffers: memoryview,
np.asarray, bytes, array, struct; zero-copy, readonly honoured, the Buffer
kept alive by the view; clean refusals."""

import array
import gc
import struct
import weakref
from typing import Any, Callable, List, Type

import numpy as np
import pytest

import hurray

from conftest import CountingProducer

FORMATS = [
    (np.bool_, "?"),
    (np.int8, "b"),
    (np.int16, "h"),
    (np.int32, "i"),
    (np.int64, "q"),
    (np.uint8, "B"),
    (np.uint16, "H"),
    (np.uint32, "I"),
    (np.uint64, "Q"),
    (np.float16, "e"),
    (np.float32, "f"),
    (np.float64, "d"),
    (np.complex64, "Zf"),
    (np.complex128, "Zd"),
]


@pytest.mark.parametrize("dtype,fmt", FORMATS, ids=[f for _, f in FORMATS])
def test_memoryview_describes_every_dtype(dtype: Any, fmt: str) -> None:
    a = np.arange(24).astype(dtype).reshape(2, 3, 4)
    buf = hurray.from_dlpack(a)
    m = memoryview(buf)
    assert m.format == fmt
    assert m.itemsize == a.itemsize
    assert m.shape == a.shape and m.strides == a.strides  # bytes
    assert m.ndim == 3 and m.nbytes == a.nbytes and not m.readonly
    assert m.obj is buf
    out = np.asarray(buf)
    assert out.dtype == a.dtype and out.ctypes.data == a.ctypes.data  # zero-copy
    np.testing.assert_array_equal(out, a)
    assert bytes(buf) == a.tobytes()


@pytest.mark.parametrize(
    "make",
    [
        lambda: np.arange(12.0).reshape(3, 4).T,
        lambda: np.arange(10, dtype=np.int32)[::-3],
        lambda: np.array(2.5),
        lambda: np.zeros((0, 3), dtype=np.float32),
        lambda: np.lib.stride_tricks.as_strided(np.arange(3.0), shape=(4, 3), strides=(0, 8)),
    ],
    ids=["transposed", "negative", "0-d", "empty", "stride-0"],
)
def test_strided_layouts(make: Callable[[], Any]) -> None:
    a = make()
    buf = hurray.from_dlpack(a)
    m = memoryview(buf)
    assert m.shape == a.shape and m.strides == a.strides
    out = np.asarray(buf)
    assert out.strides == a.strides and out.shape == a.shape
    if a.size:
        assert out.ctypes.data == a.ctypes.data
    np.testing.assert_array_equal(out, a)
    assert m.tobytes() == a.tobytes()


def test_writes_go_through_and_readonly_is_honoured() -> None:
    a = np.zeros(4, dtype=np.float64)
    buf = hurray.from_dlpack(a)
    m = memoryview(buf)
    m[1] = 7.5  # type: ignore[call-overload]  # typeshed: memoryview items are ints
    struct.pack_into("d", buf, 16, 3.25)
    assert a.tolist() == [0.0, 7.5, 3.25, 0.0]
    ro = a.copy()
    ro.flags.writeable = False
    rbuf = hurray.from_dlpack(ro)
    rm = memoryview(rbuf)
    assert rm.readonly
    with pytest.raises(TypeError):
        rm[0] = 1.0  # type: ignore[call-overload]
    with pytest.raises(TypeError, match="read-write"):
        struct.pack_into("d", rbuf, 0, 1.0)  # CPython words our BufferError
    assert not np.asarray(rbuf).flags.writeable


def test_bytes_like_consumers() -> None:
    a = np.arange(4, dtype=np.int32)
    buf = hurray.from_dlpack(a)
    arr = array.array("i")
    arr.frombytes(buf)
    assert arr.tolist() == [0, 1, 2, 3]
    assert struct.unpack_from("4i", buf) == (0, 1, 2, 3)
    assert bytearray(buf) == a.tobytes()
    assert memoryview(buf).cast("B").tolist() == list(a.tobytes())


def test_non_contiguous_refused_for_contiguous_requests() -> None:
    a = np.arange(12.0).reshape(3, 4)[:, ::2]
    buf = hurray.from_dlpack(a)
    with pytest.raises(BufferError, match="contiguous"):
        array.array("d").frombytes(buf)
    assert bytes(buf) == a.tobytes()  # bytes() copies in C order, as for NumPy
    # A transposed buffer is Fortran-contiguous.
    t = hurray.from_dlpack(np.arange(12.0).reshape(3, 4).T)
    m = memoryview(t)
    assert m.f_contiguous and not m.c_contiguous


def test_view_keeps_buffer_and_memory_alive() -> None:
    a = np.arange(6.0)
    fired: List[int] = []
    weakref.finalize(a, fired.append, 1)
    buf = hurray.from_dlpack(a)
    del a
    m = memoryview(buf)
    ref = weakref.ref(buf)
    del buf
    gc.collect()
    assert ref() is not None  # the view holds the Buffer
    assert m.obj is ref()
    m.obj.release()  # the view has its own reference on the memory
    assert not fired
    assert m.tolist() == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
    m.release()
    gc.collect()
    assert fired == [1]


def test_each_view_is_one_reference_released_once(
    counting_producer: Type[CountingProducer],
) -> None:
    p = counting_producer(n=4)
    buf = hurray.from_dlpack(p.capsule())
    views = [memoryview(buf) for _ in range(3)]
    buf.release()
    assert p.deleted == 0
    for v in views[:2]:
        v.release()
    assert p.deleted == 0
    views[2].release()
    assert p.deleted == 1
    del views
    gc.collect()
    assert p.deleted == 1


@pytest.mark.parametrize(
    "dtype", ["bfloat16", "float8_e4m3fn", "float32x4", "float4_e2m1fn", "int4"]
)
def test_undescribable_dtypes_refused(dtype: Any) -> None:
    buf = hurray.empty(4, dtype)
    with pytest.raises(BufferError, match="struct format") as info:
        memoryview(buf)
    assert dtype in str(info.value)


def test_released_buffer_refused() -> None:
    buf = hurray.empty(4)
    buf.release()
    with pytest.raises(ValueError, match="released"):
        memoryview(buf)


def test_no_more_object_arrays() -> None:
    # np.asarray used to give a 0-d object array.
    out = np.asarray(hurray.from_dlpack(np.arange(3, dtype=np.int16)))
    assert out.dtype == np.int16 and out.shape == (3,)


def test_numpy_asarray_of_undescribable_dtype_is_a_clean_error() -> None:
    # NumPy ignores a buffer-protocol error and tries __array__, which goes
    # through DLPack: a clean error instead of a 0-d object array.
    with pytest.raises(Exception) as info:
        np.asarray(hurray.empty(4, "float32x4"))
    assert not isinstance(info.value, SystemError)
    assert np.asarray(hurray.empty(3, "float32"), dtype=np.float64).dtype == np.float64
