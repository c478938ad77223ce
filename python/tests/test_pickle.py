# SPDX-License-Identifier: Apache-2.0
"""Pickling of hurray.Buffer: protocol 5 out of band (zero-copy, what Ray
and Dask use), in band for older protocols, read-only kept, the received
memory released exactly once (docs/impl/python.md §10)."""

import copy
import gc
import pickle
from typing import Any, Callable, List, Tuple, Type

import numpy as np
import pytest

import hurray

from conftest import CountingProducer


def _stats() -> Tuple[int, int]:
    s = hurray._native._pickle_stats()
    return s["rebuilt"], s["released"]


def _out_of_band(buf: hurray.Buffer) -> Tuple[bytes, List[pickle.PickleBuffer]]:
    bufs: List[pickle.PickleBuffer] = []
    data = pickle.dumps(buf, protocol=5, buffer_callback=bufs.append)
    return data, bufs


def test_protocol5_out_of_band_is_zero_copy_and_released_once(
    counting_producer: Type[CountingProducer],
) -> None:
    p = counting_producer(8)
    b = hurray.from_dlpack(p.capsule())
    rebuilt0, released0 = _stats()
    data, bufs = _out_of_band(b)
    assert len(bufs) == 1 and len(data) < 200  # the 64 bytes went out of band
    r = pickle.loads(data, buffers=bufs)
    assert r.data_ptr == p.address and r.shape == (8,) and r.dtype == "float64"
    assert not r.readonly
    np.from_dlpack(r)[3] = 42.0
    assert p.memory[3] == 42.0  # the same pages
    b.release()
    del bufs, data
    gc.collect()
    assert p.deleted == 0  # r still holds the memory
    assert _stats() == (rebuilt0 + 1, released0)
    r.release()
    gc.collect()
    assert p.deleted == 1
    assert _stats() == (rebuilt0 + 1, released0 + 1)


@pytest.mark.parametrize("protocol", [0, 2, 4, 5])
def test_in_band_is_a_private_copy(
    protocol: int, counting_producer: Type[CountingProducer]
) -> None:
    p = counting_producer(6)
    b = hurray.from_dlpack(p.capsule())
    r = pickle.loads(pickle.dumps(b, protocol=protocol))
    assert r.data_ptr != p.address
    assert list(np.from_dlpack(r)) == list(range(6))
    assert not r.readonly
    np.from_dlpack(r)[0] = -1.0
    assert p.memory[0] == 0.0
    del b
    gc.collect()
    assert p.deleted == 1  # the pickle kept nothing of the source
    r.release()


def _ro_array() -> "np.ndarray[Any, Any]":
    a = np.arange(10, dtype=np.int32)
    a.flags.writeable = False
    return a


@pytest.mark.parametrize("route", ["out-of-band", "in-band", "protocol 2", "deepcopy"])
def test_read_only_stays_read_only(route: str) -> None:
    b = hurray.from_dlpack(_ro_array())
    assert b.readonly
    if route == "out-of-band":
        data, bufs = _out_of_band(b)
        assert bufs[0].raw().readonly
        r = pickle.loads(data, buffers=bufs)
        assert r.data_ptr == b.data_ptr
    elif route == "in-band":
        r = pickle.loads(pickle.dumps(b, protocol=5))
    elif route == "protocol 2":
        r = pickle.loads(pickle.dumps(b, protocol=2))
    else:
        r = copy.deepcopy(b)
    assert r.readonly
    assert not np.from_dlpack(r).flags.writeable
    with pytest.raises((BufferError, TypeError)):
        memoryview(r)[0] = 1
    assert list(np.from_dlpack(r)) == list(range(10))


def test_writable_source_arriving_read_only_is_read_only() -> None:
    """Ray's object store hands out read-only memoryviews: the Buffer over
    one must never be writable, whatever the source was."""
    b = hurray.from_dlpack(np.arange(4, dtype=np.float32))
    assert not b.readonly
    data, bufs = _out_of_band(b)
    ro = memoryview(bytes(bufs[0].raw()))
    assert ro.readonly
    r = pickle.loads(data, buffers=[ro])
    assert r.readonly
    assert not np.from_dlpack(r).flags.writeable
    # a writable bytearray arriving instead gives a writable Buffer
    w = pickle.loads(data, buffers=[bytearray(bufs[0].raw())])
    assert not w.readonly


_LAYOUTS: List[Tuple[str, Callable[[], "np.ndarray[Any, Any]"]]] = [
    ("2-d", lambda: np.arange(12, dtype=np.float64).reshape(3, 4)),
    ("transposed", lambda: np.arange(12, dtype=np.int16).reshape(3, 4).T),
    ("negative", lambda: np.arange(12, dtype=np.float32).reshape(3, 4)[::-1, ::2]),
    ("0-d", lambda: np.array(7.5)),
    ("empty", lambda: np.zeros((0, 3), dtype=np.uint8)),
    ("stride-0", lambda: np.broadcast_to(np.arange(3, dtype=np.int64), (4, 3))),
    ("complex", lambda: np.arange(6, dtype=np.complex128) * 1j),
    ("bool", lambda: np.array([True, False, True])),
]


@pytest.mark.parametrize("make", [m for _, m in _LAYOUTS], ids=[n for n, _ in _LAYOUTS])
@pytest.mark.parametrize("oob", [True, False], ids=["out-of-band", "in-band"])
def test_layouts_round_trip(make: Callable[[], "np.ndarray[Any, Any]"], oob: bool) -> None:
    a = make()
    b = hurray.from_dlpack(a)
    if oob:
        data, bufs = _out_of_band(b)
        r = pickle.loads(data, buffers=bufs)
    else:
        r = pickle.loads(pickle.dumps(b, protocol=5))
    assert (r.shape, r.strides, r.dtype, r.readonly) == (b.shape, b.strides, b.dtype, b.readonly)
    np.testing.assert_array_equal(np.from_dlpack(r), a)
    if oob and a.size:
        assert r.data_ptr == b.data_ptr  # element (0, ..., 0), the same address


def test_dtypes_numpy_cannot_describe() -> None:
    for dt in ("bfloat16", "float8_e4m3fn", "float32x4", "int4"):
        b = hurray.empty((2, 3), dt)
        data, bufs = _out_of_band(b)
        r = pickle.loads(data, buffers=bufs)
        assert (r.dtype, r.shape, r.data_ptr) == (dt, (2, 3), b.data_ptr)


def test_rebuild_refuses_too_few_bytes_and_releases_them() -> None:
    b = hurray.from_dlpack(np.arange(8, dtype=np.float64))
    fn, args = b.__reduce_ex__(5)
    rebuilt0, released0 = _stats()
    short = bytearray(63)
    with pytest.raises(ValueError, match="63 bytes arrived"):
        fn(short, *args[1:])
    assert _stats() == (rebuilt0 + 1, released0 + 1)
    short.extend(b"x")  # no buffer view of it is left behind
    with pytest.raises(ValueError, match="inconsistent layout"):
        hurray._native._rebuild(bytearray(64), (2, 64, 1), (8,), (1, 1), 0, 0, False)


def test_released_buffer_does_not_pickle() -> None:
    b = hurray.empty(3)
    b.release()
    with pytest.raises(ValueError, match="released"):
        pickle.dumps(b)


def test_empty_device_keyword() -> None:
    assert hurray.empty(3, device="cpu").device == (1, 0)
    assert hurray.empty((2, 2), np.int8, device=(1, 0)).dtype == "int8"
    with pytest.raises(ValueError):
        hurray.empty(3, device="nonsense")
    with pytest.raises(TypeError):
        hurray.empty(3, "float32", "cpu")  # type: ignore[call-arg]
