# SPDX-License-Identifier: Apache-2.0
"""hurray.Buffer through Ray (a local cluster started here, one per module):
ray.put and task arguments carry the memory as a protocol-5 out-of-band
buffer, which Ray keeps in its object store; the Buffer that arrives is
read-only and views the object store's pages (zero-copy), converts with
np.from_dlpack and torch.from_dlpack, and releases its view once.

Heavy (a Ray cluster takes seconds to start): marked `distributed` and run by
tests/run_all.sh's `distributed` stage, which installs ray when missing."""

import gc
import os
from typing import Iterator, Tuple, Type

import numpy as np
import pytest

import hurray

from conftest import CountingProducer
from distributed_aid import in_object_store, inspect, make_buffer, mapping_of

ray = pytest.importorskip("ray")

pytestmark = pytest.mark.distributed

N = 1 << 17  # float64 elements: 1 MiB, above Ray's inline limit, so it goes to the object store


@pytest.fixture(scope="module")
def ray_cluster() -> Iterator[None]:
    # The workers import distributed_aid from this folder.
    here = os.path.dirname(os.path.abspath(__file__))
    os.environ["PYTHONPATH"] = os.pathsep.join([here, os.environ.get("PYTHONPATH", "")])
    ray.init(
        num_cpus=2,
        include_dashboard=False,
        log_to_driver=False,
        object_store_memory=200 * 1024 * 1024,
    )
    try:
        yield
    finally:
        ray.shutdown()


def _stats() -> Tuple[int, int]:
    s = hurray._native._pickle_stats()
    return s["rebuilt"], s["released"]


def test_ray_put_get_is_a_read_only_view_of_the_object_store(
    ray_cluster: None, counting_producer: Type[CountingProducer]
) -> None:
    p = counting_producer(N)
    b = hurray.from_dlpack(p.capsule())
    ref = ray.put(b)
    b.release()
    gc.collect()
    assert p.deleted == 1  # ray.put copied the bytes into the store: the source is free
    rebuilt0, released0 = _stats()
    got = ray.get(ref)
    assert isinstance(got, hurray.Buffer) and got.shape == (N,)
    assert got.readonly  # the store's memory is read-only: so is the Buffer
    a = np.from_dlpack(got)
    assert not a.flags.writeable
    assert a.ctypes.data == got.data_ptr
    np.testing.assert_array_equal(a, np.arange(N, dtype=np.float64))
    where = mapping_of(got.data_ptr)
    print("object store mapping:", where)
    assert where is not None and in_object_store(where), where
    # A second get maps the same object: the same address, no copy.
    again = ray.get(ref)
    assert again.data_ptr == got.data_ptr
    del a, got, again
    gc.collect()
    assert _stats() == (rebuilt0 + 2, released0 + 2)


def test_ray_task_argument_arrives_zero_copy_and_converts(ray_cluster: None) -> None:
    src = np.arange(N, dtype=np.float64)
    b = hurray.from_dlpack(src)
    remote = ray.remote(inspect)
    # Passed directly (Ray puts it into the store) and through ray.put.
    for arg in (b, ray.put(b)):
        out = ray.get(remote.remote(arg), timeout=120)
        assert out["type"] == "Buffer" and out["shape"] == (N,)
        assert out["readonly"] and not out["writeable"]
        assert out["sum"] == out["torch_sum"] == float(src.sum())
        assert out["same"]  # NumPy, torch and the Buffer: one address
        assert out["pid"] != os.getpid()
        assert in_object_store(out["mapping"]), out["mapping"]
        assert out["released_now"] == 1  # the worker's Buffer let go of the store's view once
    assert not b.released


def test_ray_task_returns_a_buffer(ray_cluster: None) -> None:
    got = ray.get(ray.remote(make_buffer).remote(N), timeout=120)
    assert got.dtype == "int32" and got.readonly
    assert int(np.from_dlpack(got).sum()) == 3 * N
