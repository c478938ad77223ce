# SPDX-License-Identifier: Apache-2.0
"""Tests of the example PyTorch extension (hurray_torch_example).

The module must be importable (built with setup.py, on sys.path or
PYTHONPATH). Every test reads the extension's cumulative counters before and
after, so the tests are independent of each other and of their order.
"""

import gc
import re
import threading
import weakref

import numpy as np
import pytest
import torch

import hurray_torch_example as ext  # noqa: E402  (built by setup.py; no skip: a missing build fails)


class Counts:
    """Differences of release_counts() since construction."""

    def __init__(self):
        gc.collect()  # let earlier tests' leftovers go first
        self.base = ext.release_counts()

    def __getattr__(self, key):
        gc.collect()
        return ext.release_counts()[key] - self.base[key]


def test_loaded_library_matches_headers():
    # The module's import ran hurray_check_version(HURRAY_VERSION).
    assert re.fullmatch(r"\d+\.\d+\.\d+", ext.hurray_version())


def test_views_share_memory_and_metadata():
    x = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    views = ext.fan_out(x, 4)
    assert len(views) == 4
    for v in views:
        assert v.data_ptr() == x.data_ptr()
        assert v.shape == x.shape and v.stride() == x.stride() and v.dtype == x.dtype
        assert v.device == x.device
        assert torch.equal(v, x)


def test_write_through_one_view_is_read_in_the_others():
    x = torch.zeros(5, dtype=torch.int64)
    a, b, c = ext.fan_out(x, 3)
    a[2] = 77
    assert b[2].item() == 77 and c[2].item() == 77 and x[2].item() == 77
    x[4] = -3
    assert a[4].item() == -3


def test_producer_deleter_runs_once_after_the_last_view():
    counts = Counts()
    views = ext.fan_out(torch.ones(8), 5)
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
    x = ext.counted_clone(torch.arange(6.0))
    views = ext.fan_out(x, 3)
    del x
    assert counts.storage_frees == 0, "storage freed while views were alive"
    views[1][0] = 5.0
    assert views[0][0].item() == 5.0
    del views[0], views[0]
    assert counts.storage_frees == 0
    del views
    assert counts.storage_frees == 1
    assert counts.producer_deletes == 1


def test_numpy_base_stays_alive_until_the_last_view():
    base = np.arange(10, dtype=np.int32)
    ref = weakref.ref(base)
    views = ext.fan_out(torch.from_numpy(base), 2)
    del base
    gc.collect()
    assert ref() is not None
    assert views[0].numpy().tolist() == list(range(10))
    del views[0]
    gc.collect()
    assert ref() is not None
    del views
    gc.collect()
    assert ref() is None


def test_source_freed_first_keeps_views_valid():
    counts = Counts()
    x = ext.counted_clone(torch.full((4, 4), 3.5, dtype=torch.float64))
    views = ext.fan_out(x, 2)
    del x
    assert counts.storage_frees == 0
    assert views[1].sum().item() == 3.5 * 16
    del views
    assert counts.storage_frees == 1


@pytest.mark.parametrize(
    "make",
    [
        lambda: torch.arange(24.0).reshape(4, 6).t(),  # transposed
        lambda: torch.arange(40).reshape(5, 8)[1:4, ::3],  # offset + step
        lambda: torch.arange(10.0)[3:],  # storage offset
        lambda: torch.arange(6.0).reshape(2, 3).expand(4, 2, 3),  # stride 0
        lambda: torch.tensor(2.5),  # 0-d
        lambda: torch.empty(0, 3),  # no elements
    ],
    ids=["transposed", "sliced", "offset", "broadcast", "scalar", "empty"],
)
def test_non_contiguous_and_odd_layouts(make):
    counts = Counts()
    x = make()
    views = ext.fan_out(x, 3)
    for v in views:
        assert v.shape == x.shape
        assert v.stride() == x.stride()
        assert v.data_ptr() == x.data_ptr()
        assert torch.equal(v, x)
    del v, views
    assert counts.view_releases == 3 and counts.producer_deletes == 1


@pytest.mark.parametrize(
    "dtype",
    [
        torch.bool,
        torch.uint8,
        torch.int8,
        torch.int16,
        torch.int32,
        torch.int64,
        torch.float16,
        torch.bfloat16,
        torch.float32,
        torch.float64,
        torch.complex64,
        torch.complex128,
    ],
)
def test_dtypes(dtype):
    x = (torch.arange(6) % 2).to(dtype)
    views = ext.fan_out(x, 2)
    for v in views:
        assert v.dtype == dtype
        assert v.data_ptr() == x.data_ptr()
        assert torch.equal(v, x)


def test_n_equal_one_moves_the_handle():
    counts = Counts()
    x = torch.arange(3)
    (v,) = ext.fan_out(x, 1)
    assert v.data_ptr() == x.data_ptr()
    del v
    assert counts.view_releases == 1 and counts.producer_deletes == 1


def test_n_zero_raises_and_releases_the_source_export_once():
    counts = Counts()
    x = torch.arange(4)
    with pytest.raises(ValueError, match="HURRAY_ERR_INVALID_ARGUMENT"):
        ext.fan_out(x, 0)
    # The DLPack tensor torch made was dropped (once); x itself is untouched.
    assert counts.producer_deletes == 1
    assert counts.view_releases == 0
    assert x.tolist() == [0, 1, 2, 3]


def test_negative_n_raises_before_anything_is_exported():
    counts = Counts()
    with pytest.raises(ValueError, match="n must be >= 0"):
        ext.fan_out(torch.arange(4), -1)
    assert counts.producer_deletes == 0


@pytest.mark.parametrize(
    "make, what",
    [
        (lambda: torch.tensor([1 + 2j, 3 + 4j]).conj(), "conjugate bit"),
        (lambda: torch.tensor([1 + 2j, 3 + 4j]).conj().imag, "negative bit"),
        (lambda: torch._neg_view(torch.arange(4.0)), "negative bit"),
        (lambda: torch.ones(3, requires_grad=True), "requires grad"),
    ],
)
def test_lazy_views_and_grad_tensors_are_refused_not_handed_on_wrong(make, what):
    # Their storage does not hold what they mean; a view of it would read
    # un-conjugated / un-negated values, or drop the autograd graph.
    before = ext.release_counts()
    with pytest.raises(BufferError, match=what):
        ext.fan_out(make(), 2)
    assert ext.release_counts() == before  # nothing was exported


def test_resolved_lazy_views_fan_out_with_their_values():
    z = torch.tensor([1 + 2j, 3 + 4j]).conj().resolve_conj()
    a, b = ext.fan_out(z, 2)
    assert a.tolist() == [1 - 2j, 3 - 4j] and b.tolist() == [1 - 2j, 3 - 4j]
    del a, b
    gc.collect()


def test_wrong_argument_types_raise_type_error():
    with pytest.raises(TypeError):
        ext.fan_out([1, 2, 3], 2)
    with pytest.raises(TypeError):
        ext.fan_out(torch.arange(3), "2")


def test_views_released_from_many_threads():
    counts = Counts()
    x = ext.counted_clone(torch.arange(1000.0))
    views = ext.fan_out(x, 16)
    del x
    start = threading.Barrier(16)
    holders = [[v] for v in views]
    del views

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


def test_fan_out_of_a_view_chains_a_second_producer():
    # A returned view is an ordinary torch tensor: fanning it out again
    # chains a second producer in front of the first view.
    counts = Counts()
    x = torch.arange(5)
    (a,) = ext.fan_out(x, 1)
    b, c = ext.fan_out(a, 2)
    assert b.data_ptr() == x.data_ptr()
    del a
    assert counts.producer_deletes == 0
    del b, c
    assert counts.producer_deletes == 2
    assert counts.view_releases == 3
