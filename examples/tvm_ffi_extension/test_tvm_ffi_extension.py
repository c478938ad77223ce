# SPDX-License-Identifier: Apache-2.0
"""Tests of the example TVM FFI module (hurray_tvm_example.so).

HURRAY_TVM_EXAMPLE names the built module (default:
build/tvm_ffi_extension/hurray_tvm_example.so under the repository root).
Inputs are NumPy arrays and torch tensors converted with tvm_ffi.from_dlpack.
Every test reads the module's cumulative counters before and after, so the
tests are independent of each other and of their order.
"""

import gc
import os
import re
import threading
import weakref
from pathlib import Path

import numpy as np
import pytest
import torch
import tvm_ffi

REPO = Path(__file__).resolve().parents[2]
MODULE_PATH = os.environ.get(
    "HURRAY_TVM_EXAMPLE", str(REPO / "build" / "tvm_ffi_extension" / "hurray_tvm_example.so")
)
mod = tvm_ffi.load_module(MODULE_PATH)


class Counts:
    """Differences of release_counts() since construction."""

    def __init__(self):
        gc.collect()  # let earlier tests' leftovers go first
        self.base = dict(mod.release_counts())

    def __getattr__(self, key):
        gc.collect()
        return mod.release_counts()[key] - self.base[key]


def np_ptr(a):
    return a.__array_interface__["data"][0]


def test_loaded_library_matches_headers():
    # hurray_version() runs hurray_check_version(HURRAY_VERSION) first.
    assert re.fullmatch(r"\d+\.\d+\.\d+", mod.hurray_version())


def test_views_share_memory_and_metadata_numpy():
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    x = tvm_ffi.from_dlpack(a)
    views = mod.fan_out(x, 4)
    assert len(views) == 4
    for v in views:
        assert isinstance(v, tvm_ffi.Tensor)
        assert v.data_ptr() == x.data_ptr() == np_ptr(a)
        assert tuple(v.shape) == (3, 4) and str(v.dtype) == "float32"
        back = np.from_dlpack(v)
        assert np_ptr(back) == np_ptr(a)
        assert np.array_equal(back, a)


def test_write_through_one_view_is_read_in_the_others():
    a = np.zeros(6, dtype=np.int64)
    v0, v1, v2 = mod.fan_out(tvm_ffi.from_dlpack(a), 3)
    np.from_dlpack(v0)[1] = 11
    torch.from_dlpack(v1)[4] = -4
    assert np.from_dlpack(v2).tolist() == [0, 11, 0, 0, -4, 0]
    assert a.tolist() == [0, 11, 0, 0, -4, 0]


def test_torch_input():
    t = torch.arange(20, dtype=torch.float64).reshape(4, 5)
    views = mod.fan_out(tvm_ffi.from_dlpack(t), 2)
    for v in views:
        tv = torch.from_dlpack(v)
        assert tv.data_ptr() == t.data_ptr()
        assert torch.equal(tv, t)
    torch.from_dlpack(views[0])[3, 4] = 99.0
    assert t[3, 4].item() == 99.0


def test_producer_deleter_runs_once_after_the_last_view():
    counts = Counts()
    views = list(mod.fan_out(tvm_ffi.from_dlpack(np.ones(8)), 5))
    assert counts.producer_deletes == 0
    for i in range(4):
        views.pop()
        assert counts.view_releases == i + 1
        assert counts.producer_deletes == 0, "source released while views were alive"
    views.pop()
    assert counts.view_releases == 5
    assert counts.producer_deletes == 1


def test_source_storage_freed_once_after_last_view_and_source():
    counts = Counts()
    src = mod.counted_copy(tvm_ffi.from_dlpack(np.arange(6.0)))
    views = list(mod.fan_out(src, 3))
    del src
    assert counts.storage_frees == 0, "storage freed while views were alive"
    np.from_dlpack(views[1])[0] = 5.0
    assert np.from_dlpack(views[2])[0] == 5.0
    del views[0], views[0]
    assert counts.storage_frees == 0
    del views
    assert counts.storage_frees == 1
    assert counts.producer_deletes == 1


def test_numpy_base_stays_alive_until_the_last_view():
    base = np.arange(10, dtype=np.int32)
    ref = weakref.ref(base)
    views = list(mod.fan_out(tvm_ffi.from_dlpack(base), 2))
    del base
    gc.collect()
    assert ref() is not None
    assert np.from_dlpack(views[0]).tolist() == list(range(10))
    del views[0]
    gc.collect()
    assert ref() is not None
    del views
    gc.collect()
    assert ref() is None


@pytest.mark.parametrize(
    "make",
    [
        lambda: np.arange(24.0).reshape(4, 6).T,  # transposed
        lambda: np.arange(40).reshape(5, 8)[1:4, ::3],  # offset + step
        lambda: np.arange(10.0)[::-1],  # negative stride
        lambda: torch.arange(6.0).reshape(2, 3).expand(4, 2, 3),  # stride 0
        lambda: np.array(2.5),  # 0-d
        lambda: np.empty((0, 3)),  # no elements
    ],
    ids=["transposed", "sliced", "reversed", "broadcast", "scalar", "empty"],
)
def test_non_contiguous_and_odd_layouts(make):
    counts = Counts()
    src = make()
    x = tvm_ffi.from_dlpack(src)
    ref = np.asarray(src) if isinstance(src, np.ndarray) else src.numpy()
    views = list(mod.fan_out(x, 3))
    for v in views:
        assert tuple(v.shape) == ref.shape
        assert v.data_ptr() == x.data_ptr()
        back = np.from_dlpack(v)
        assert back.strides == ref.strides
        assert np.array_equal(back, ref)
    del v, back, views
    assert counts.view_releases == 3 and counts.producer_deletes == 1


@pytest.mark.parametrize(
    "dtype",
    [
        np.bool_,
        np.uint8,
        np.int8,
        np.int16,
        np.int32,
        np.int64,
        np.uint64,
        np.float16,
        np.float32,
        np.float64,
        np.complex64,
        np.complex128,
    ],
)
def test_dtypes(dtype):
    a = (np.arange(6) % 2).astype(dtype)
    for v in mod.fan_out(tvm_ffi.from_dlpack(a), 2):
        back = np.from_dlpack(v)
        assert back.dtype == a.dtype
        assert np_ptr(back) == np_ptr(a)
        assert np.array_equal(back, a)


def test_bfloat16_from_torch():
    t = torch.arange(4, dtype=torch.bfloat16)
    (v,) = mod.fan_out(tvm_ffi.from_dlpack(t), 1)
    assert str(v.dtype) == "bfloat16"
    assert torch.equal(torch.from_dlpack(v), t)


def test_fan_out_each():
    counts = Counts()
    a, b = np.arange(3), np.arange(4.0)
    groups = mod.fan_out_each([tvm_ffi.from_dlpack(a), tvm_ffi.from_dlpack(b)], 2)
    assert len(groups) == 2 and all(len(g) == 2 for g in groups)
    assert all(v.data_ptr() == np_ptr(a) for v in groups[0])
    assert all(v.data_ptr() == np_ptr(b) for v in groups[1])
    del groups
    assert counts.view_releases == 4 and counts.producer_deletes == 2


def test_n_zero_raises_and_releases_the_source_export_once():
    counts = Counts()
    a = np.arange(4)
    with pytest.raises(ValueError, match="HURRAY_ERR_INVALID_ARGUMENT"):
        mod.fan_out(tvm_ffi.from_dlpack(a), 0)
    assert counts.producer_deletes == 1
    assert counts.view_releases == 0
    assert a.tolist() == [0, 1, 2, 3]


def test_negative_n_raises_before_anything_is_exported():
    counts = Counts()
    with pytest.raises(ValueError, match="n must be >= 0"):
        mod.fan_out(tvm_ffi.from_dlpack(np.arange(4)), -2)
    assert counts.producer_deletes == 0


def test_wrong_argument_types_raise_type_error():
    with pytest.raises(TypeError):
        mod.fan_out("not a tensor", 2)
    with pytest.raises(TypeError):
        mod.fan_out(tvm_ffi.from_dlpack(np.arange(3)), "2")


def test_views_released_from_many_threads():
    counts = Counts()
    src = mod.counted_copy(tvm_ffi.from_dlpack(np.arange(1000.0)))
    holders = [[v] for v in mod.fan_out(src, 16)]
    del src
    start = threading.Barrier(16)

    def drop(holder):
        start.wait()
        holder.clear()

    threads = [threading.Thread(target=drop, args=(h,)) for h in holders]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert counts.view_releases == 16
    assert counts.producer_deletes == 1
    assert counts.storage_frees == 1
