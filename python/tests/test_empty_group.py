# SPDX-License-Identifier: Apache-2.0
"""hurray.empty_group: several tensors in one allocation (hurray_alloc_group,
docs/impl/python.md, "Tensor groups"). Pointers are compared (each tensor at
a multiple of GROUP_ALIGNMENT, right after the one before), every Buffer
goes zero-copy to NumPy and torch, and the one allocation is freed once,
after the last holder: a shared group is one memfd mapping, which stays
while any Buffer, share or framework view of any member lives, and is gone
after the last, released in any order or from several threads."""

import threading
from typing import Any, List

import numpy as np
import pytest

import hurray

import mp_aid
from conftest import optional_module

torch, needs_torch = optional_module("torch")
ml_dtypes, needs_ml_dtypes = optional_module("ml_dtypes")

A = hurray.GROUP_ALIGNMENT


def align_up(x: int) -> int:
    return (x + A - 1) // A * A


def memfd_mappings(mapping: str) -> int:
    """How many mapping lines of this process show the memfd of `mapping`."""
    dev, inode = mapping.split()[:2]
    with open("/proc/self/maps") as f:
        return sum(1 for line in f if line.split()[3:5] == [dev, inode])


SPECS: List[Any] = [
    ((3, 4), "float32"),
    (5, "int8"),
    7,  # a bare shape: float32
    ((2, 2), np.float64),
    ((0,), "float32"),  # no elements: no bytes
    ((1,), np.dtype("<i2")),
    ((2, 3, 5), "uint64"),
]


def test_alignment_and_order() -> None:
    assert A == 256
    bufs = hurray.empty_group(SPECS)
    assert [b.shape for b in bufs] == [(3, 4), (5,), (7,), (2, 2), (0,), (1,), (2, 3, 5)]
    assert [b.dtype for b in bufs] == [
        "float32",
        "int8",
        "float32",
        "float64",
        "float32",
        "int16",
        "uint64",
    ]
    ptrs = [b.data_ptr for b in bufs]
    assert all(p % A == 0 for p in ptrs), ptrs
    for i in range(1, len(bufs)):
        assert ptrs[i] == align_up(ptrs[i - 1] + bufs[i - 1].nbytes), (i, ptrs)
    assert ptrs[5] == ptrs[4]  # the empty tensor took no bytes
    for b in bufs:
        # data_ptr is the element (0, ...) address: data + byte_offset
        assert b.device == (1, 0) and not b.readonly
        assert b.strides == tuple(int(np.prod(b.shape[k + 1 :])) for k in range(b.ndim))


def test_each_buffer_zero_copy_into_numpy() -> None:
    bufs = hurray.empty_group([((4,), "float32"), ((2, 3), "int64")])
    a, b = (np.from_dlpack(x) for x in bufs)
    assert a.ctypes.data == bufs[0].data_ptr and b.ctypes.data == bufs[1].data_ptr
    a[:] = [1, 2, 3, 4]
    b[:] = 7
    assert np.asarray(bufs[0]).tolist() == [1.0, 2.0, 3.0, 4.0]  # the buffer protocol too
    assert int(np.from_dlpack(bufs[1]).sum()) == 42


@needs_torch
def test_each_buffer_zero_copy_into_torch() -> None:
    bufs = hurray.empty_group([((8,), "float32"), ((3,), "bfloat16"), ((2, 2), "int32")])
    ts = [torch.utils.dlpack.from_dlpack(b) for b in bufs]
    assert [t.data_ptr() for t in ts] == [b.data_ptr for b in bufs]
    assert ts[1].dtype == torch.bfloat16 and ts[2].shape == (2, 2)
    ts[0].fill_(2.5)
    assert float(np.from_dlpack(bufs[0]).sum()) == 20.0


def test_shared_group_is_one_memfd_freed_once_after_the_last() -> None:
    bufs = hurray.empty_group(SPECS, shared=True)
    m = mp_aid.mapping_of(bufs[0].data_ptr)
    assert "memfd:" in m, m
    # One mapping holds every member.
    assert {mp_aid.mapping_of(b.data_ptr) for b in bufs if b.nbytes} == {m}
    assert memfd_mappings(m) == 1
    # Holders of every kind: a share, NumPy views, a capsule not yet consumed.
    extra = bufs[3].share(1)[0]
    view = np.from_dlpack(bufs[6])
    cap = bufs[1].__dlpack__(max_version=(1, 3))
    for i in (6, 0, 4, 2, 5, 3, 1):
        bufs[i].release()
        assert mp_aid.inode_mapped(m)
    del bufs
    extra.release()
    assert mp_aid.inode_mapped(m)
    del view
    assert mp_aid.inode_mapped(m)
    del cap  # the last holder: freed now, once
    assert not mp_aid.inode_mapped(m)


def test_released_from_several_threads() -> None:
    bufs = hurray.empty_group([((64,), "float64")] * 16, shared=True)
    m = mp_aid.mapping_of(bufs[0].data_ptr)
    shares = [b.share(1)[0] for b in bufs]
    start = threading.Barrier(8)

    def drop(mine: List[hurray.Buffer]) -> None:
        start.wait()
        for b in mine:
            b.release()

    threads = [threading.Thread(target=drop, args=((bufs + shares)[k::8],)) for k in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert all(b.released for b in bufs + shares)
    assert not mp_aid.inode_mapped(m)


def test_checking_mode_sees_one_handle_per_member() -> None:
    was = hurray.checking_enabled()
    hurray.enable_checking()
    try:
        mark = hurray.check_mark()
        bufs = hurray.empty_group([4, 5, 6])
        live = hurray.check_leaks(mark)
        assert len(live) == 3
        assert all("test_empty_group.py" in h.site for h in live), live
        del bufs
        assert hurray.check_leaks(mark) == []
    finally:
        if not was:
            hurray.disable_checking()


@needs_ml_dtypes
def test_ml_dtypes_members_quantized_pair() -> None:
    # The quantized case of issue 28: FP4 data (ml_dtypes' one element per
    # byte) and its FP8 (E8M0) block scales, two tensors of one group.
    data, scales = hurray.empty_group(
        [((4, 32), ml_dtypes.float4_e2m1fn), ((4, 1), ml_dtypes.float8_e8m0fnu)], shared=True
    )
    assert data.dtype == "float4_e2m1fn" and scales.dtype == "float8_e8m0fnu"
    assert scales.data_ptr == align_up(data.data_ptr + data.nbytes)
    d = np.asarray(data.__array__())
    assert d.dtype == ml_dtypes.float4_e2m1fn and d.ctypes.data == data.data_ptr
    d[...] = 1.5
    s = scales.__array__()
    s[...] = 2.0
    assert float(np.asarray(data.__array__(), dtype=np.float32).sum()) == 1.5 * 128
    assert float(scales.__array__().astype(np.float32).sum()) == 8.0


def test_empty_and_errors() -> None:
    assert hurray.empty_group([]) == []
    with pytest.raises(ValueError) as e:
        hurray.empty_group([4, ((2, -1), "float32")])
    assert str(e.value).startswith("hurray.empty_group (specs[1]): "), e.value
    assert "HURRAY_ERR_INVALID_ARGUMENT" in str(e.value)
    with pytest.raises(TypeError, match=r"specs\[1\]: shape must be an int or a sequence"):
        hurray.empty_group([4, ("a", "float32")])  # type: ignore[list-item]
    with pytest.raises(ValueError, match="unknown dtype name 'no-such-dtype'"):
        hurray.empty_group([(3, "no-such-dtype")])
    with pytest.raises(TypeError, match="sequence of"):
        hurray.empty_group("abc")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="sequence of"):
        hurray.empty_group(5)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="at most 64 dimensions"):
        hurray.empty_group([[1] * 65])
    with pytest.raises(BufferError, match="HURRAY_ERR_"):
        hurray.empty_group([4], device=(2, 0))  # no CUDA driver here, or a refusal


def test_a_2_tuple_of_integers_is_a_shape() -> None:
    (b,) = hurray.empty_group([(3, np.int64(4))])
    assert b.shape == (3, 4) and b.dtype == "float32"
