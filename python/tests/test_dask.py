# SPDX-License-Identifier: Apache-2.0
"""hurray.Buffer through Dask distributed (a LocalCluster of worker
processes started here, one per module): client.scatter and client.submit
carry the memory as protocol-5 out-of-band frames over the cluster's
connection (a copy by nature: TCP), and the Buffer that arrives in the
worker converts with np.from_dlpack and torch.from_dlpack, keeps the
content and the read-only flag, and releases the received frame once.

Heavy: marked `distributed`, run by tests/run_all.sh's `distributed` stage."""

import gc
import os
from typing import Any, Iterator, Type

import numpy as np
import pytest

import hurray

from conftest import CountingProducer
from distributed_aid import fill_and_return, inspect, make_buffer

distributed = pytest.importorskip("distributed")

pytestmark = pytest.mark.distributed

N = 1 << 17  # float64 elements: 1 MiB


@pytest.fixture(scope="module")
def client() -> Iterator[Any]:
    here = os.path.dirname(os.path.abspath(__file__))
    os.environ["PYTHONPATH"] = os.pathsep.join([here, os.environ.get("PYTHONPATH", "")])
    cluster = distributed.LocalCluster(
        n_workers=1,
        threads_per_worker=1,
        processes=True,
        dashboard_address=None,
        worker_dashboard_address=None,
    )
    c = distributed.Client(cluster, timeout=120)
    try:
        yield c
    finally:
        c.close()
        cluster.close()


def test_dask_scatter_and_submit(client: Any, counting_producer: Type[CountingProducer]) -> None:
    p = counting_producer(N)
    b = hurray.from_dlpack(p.capsule())
    fut = client.scatter(b)
    b.release()
    gc.collect()
    assert p.deleted == 1  # scatter serialised the bytes: the source is free
    out = client.submit(inspect, fut, pure=False).result(timeout=120)
    assert out["type"] == "Buffer" and out["shape"] == (N,)
    assert out["pid"] != os.getpid()
    assert out["sum"] == out["torch_sum"] == float(np.arange(N).sum())
    assert out["same"]  # NumPy, torch and the Buffer: one address in the worker
    assert not out["readonly"] and out["writeable"]  # a writable source stays writable
    assert out["released_now"] == 1


def test_dask_submit_argument_read_only_and_round_trip(client: Any) -> None:
    a = np.arange(N, dtype=np.float64)
    a.flags.writeable = False
    out = client.submit(inspect, hurray.from_dlpack(a), pure=False).result(timeout=120)
    assert out["readonly"] and not out["writeable"]
    assert out["sum"] == float(a.sum())
    # A writable Buffer goes to the worker, is written there and comes back.
    w = hurray.from_dlpack(np.zeros(1000, dtype=np.float32))
    back = client.submit(fill_and_return, w, 2.5, pure=False).result(timeout=120)
    assert isinstance(back, hurray.Buffer) and not back.readonly
    assert float(np.from_dlpack(back).sum()) == 2500.0
    assert float(np.from_dlpack(w).sum()) == 0.0  # another process: the sender's copy is untouched
    made = client.submit(make_buffer, 10, pure=False).result(timeout=120)
    assert made.dtype == "int32" and int(np.from_dlpack(made).sum()) == 30
