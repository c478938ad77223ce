# SPDX-License-Identifier: Apache-2.0
"""A whole set of Buffers across multiprocessing as ONE message
(hurray.BufferDict / BufferList, hurray_ipc_export_set; docs/impl/python.md
§13). A packed state_dict of 50 tensors crosses Queue, Pipe, Pool, Process
arguments and ProcessPoolExecutor under spawn and fork with two fds in
flight (the fd server's count), the worker maps the parent's one memfd and
its writes are seen by the parent; the sender's reference comes back
exactly once, after the worker lets go, exits, or is killed (within 1 s)."""

import concurrent.futures
import gc
import os
import signal
import time
from multiprocessing.reduction import ForkingPickler
from typing import Any, Dict

import numpy as np
import pytest

import hurray
from hurray import _fdshare

import mp_aid

TIMEOUT = 60
N = 50


# The contexts and the strict checking of every test here (conftest.py).
pytestmark = pytest.mark.usefixtures("strict_checking")
wait_for = mp_aid.wait_for


def state() -> Dict[str, Any]:
    return {f"layer{i}.weight": np.full((i % 7 + 1, 16), float(i), np.float32) for i in range(N)}


def packed() -> "hurray.BufferDict":
    d = hurray.pack(state())
    assert isinstance(d, hurray.BufferDict) and len(d) == N
    return d


def inode(b: hurray.Buffer) -> str:
    return " ".join(mp_aid.mapping_of(b.data_ptr).split()[:2])


def pending() -> int:
    s = _fdshare._server
    return 0 if s is None else s.npending


def expected_sums(add: float = 0.0) -> Dict[str, float]:
    return {k: float(v.sum()) + add * v.size for k, v in state().items()}


def test_one_message_two_fds_in_flight() -> None:
    d = packed()
    before = pending()
    data = ForkingPickler.dumps(d)
    assert pending() - before == 2  # one memfd + one lifetime fd for 50 tensors
    back = ForkingPickler.loads(data)
    assert pending() == before
    assert isinstance(back, hurray.BufferDict) and list(back) == list(d)
    assert {inode(b) for b in back.values()} == {inode(d["layer0.weight"])}
    for k in d:
        assert back[k].shape == d[k].shape and back[k].dtype == "float32"
    np.testing.assert_array_equal(np.from_dlpack(back["layer9.weight"]), 9.0)
    # The same 50 Buffers in a plain dict: one message each, 100 fds.
    plain = dict(d)
    data = ForkingPickler.dumps(plain)
    assert pending() - before == 2 * N
    assert len(ForkingPickler.loads(data)) == N
    assert pending() == before


def test_buffer_list_dedupes_allocations() -> None:
    a = hurray.empty(8, "float64", shared=True)
    b = hurray.empty(8, "float64", shared=True)
    lst = hurray.BufferList([a, a.share(1)[0], b, a])
    before = pending()
    data = ForkingPickler.dumps(lst)
    assert pending() - before == 4  # two allocations, two fds each
    back = ForkingPickler.loads(data)
    assert isinstance(back, hurray.BufferList) and len(back) == 4
    assert inode(back[0]) == inode(back[1]) == inode(back[3]) == inode(a) != inode(b)


def test_non_cpu_or_mixed_members_go_one_by_one() -> None:
    d = hurray.BufferDict(a=hurray.empty(4, shared=True), n=3)
    back = ForkingPickler.loads(ForkingPickler.dumps(d))
    assert isinstance(back, hurray.BufferDict) and back["n"] == 3
    assert back["a"].shape == (4,)
    assert ForkingPickler.loads(ForkingPickler.dumps(hurray.BufferDict())) == {}


def test_non_shareable_members_are_copied_once_into_one_region() -> None:
    arrays = [np.arange(10.0) * i for i in range(5)]
    lst = hurray.BufferList(hurray.from_dlpack_many(arrays))
    before = pending()
    data = ForkingPickler.dumps(lst)
    assert pending() - before == 2  # one copy region for all five
    back = ForkingPickler.loads(data)
    assert len({inode(b) for b in back}) == 1
    for a, b in zip(arrays, back):
        np.testing.assert_array_equal(np.from_dlpack(b), a)


def test_queue(ctx: Any) -> None:
    d = packed()
    q, results = ctx.Queue(), ctx.Queue()
    p = ctx.Process(target=mp_aid.set_from_queue, args=(q, results))
    p.start()
    try:
        q.put(d)
        out = results.get(timeout=TIMEOUT)
        assert out["type"] == "BufferDict" and out["keys"] == list(d)
        assert out["inodes"] == [inode(d["layer0.weight"])]  # the parent's memfd
        assert out["sums"] == expected_sums(1.0)
        # The worker's writes are the parent's memory.
        assert float(np.from_dlpack(d["layer3.weight"]).flat[0]) == 4.0
    finally:
        p.join(TIMEOUT)


def test_pipe_round_trip(ctx: Any) -> None:
    d = packed()
    parent, child = ctx.Pipe()
    p = ctx.Process(target=mp_aid.set_pipe_echo, args=(child,))
    p.start()
    child.close()
    try:
        parent.send(d)
        assert parent.poll(TIMEOUT)
        back = parent.recv()
        assert isinstance(back, hurray.BufferDict) and list(back) == list(d)
        assert {inode(b) for b in back.values()} == {inode(d["layer0.weight"])}
        for k in d:
            np.testing.assert_array_equal(np.from_dlpack(back[k]), np.from_dlpack(d[k]))
        assert float(np.from_dlpack(back["layer5.weight"]).flat[0]) == 6.0
    finally:
        parent.close()
        p.join(TIMEOUT)


def test_pool(ctx: Any) -> None:
    d = packed()
    with ctx.Pool(1) as pool:
        out = pool.apply(mp_aid.set_facts, (d,))
        outs = pool.map(mp_aid.set_facts, [d, hurray.BufferList(d.values())])
    assert out["type"] == "BufferDict" and out["sums"] == expected_sums()
    assert [o["type"] for o in outs] == ["BufferDict", "BufferList"]
    assert all(o["inodes"] == [inode(d["layer0.weight"])] for o in outs)


def test_process_argument(ctx: Any) -> None:
    d = packed()
    results = ctx.Queue()
    q = ctx.Queue()
    p = ctx.Process(target=mp_aid.set_from_queue, args=(q, results))
    p.start()
    q.put(d)
    out = results.get(timeout=TIMEOUT)
    p.join(TIMEOUT)
    assert out["sums"] == expected_sums(1.0)
    # And as an argument of the process itself.
    parent, child = ctx.Pipe()
    p = ctx.Process(target=mp_aid.set_hold, args=(child,))
    p.start()
    child.close()
    parent.send(d)
    assert parent.poll(TIMEOUT) and parent.recv() == N
    parent.send("go")
    assert parent.poll(TIMEOUT) and parent.recv() == "released"
    parent.close()
    p.join(TIMEOUT)


def test_process_pool_executor(ctx: Any) -> None:
    d = packed()
    with concurrent.futures.ProcessPoolExecutor(max_workers=1, mp_context=ctx) as ex:
        out = ex.submit(mp_aid.set_add_one, d).result(timeout=TIMEOUT)
    assert out["type"] == "BufferDict" and out["inodes"] == [inode(d["layer0.weight"])]
    assert out["sums"] == expected_sums(1.0)
    assert float(np.from_dlpack(d["layer1.weight"]).sum()) == 2.0 * 2 * 16


@pytest.mark.parametrize("how", ["release", "exit", "sigkill"])
def test_sender_reference_returns_once(ctx: Any, how: str) -> None:
    d = packed()
    where = mp_aid.mapping_of(d["layer0.weight"].data_ptr)
    parent, child = ctx.Pipe()
    p = ctx.Process(target=mp_aid.set_hold, args=(child,))
    p.start()
    child.close()
    before = pending()
    try:
        parent.send(d)
        assert parent.poll(TIMEOUT) and parent.recv() == N
        d.clear()  # the parent's own Buffers are gone; the worker holds the set
        gc.collect()
        assert mp_aid.inode_mapped(where)
        assert pending() == before  # fetched: nothing left in flight
        if how == "release":
            parent.send("go")
            assert parent.poll(TIMEOUT) and parent.recv() == "released"
        elif how == "exit":
            parent.send("exit")  # the worker exits holding the set
            p.join(TIMEOUT)
        else:
            assert p.pid is not None
            os.kill(p.pid, signal.SIGKILL)
            p.join(TIMEOUT)
        t0 = time.monotonic()
        assert wait_for(lambda: not mp_aid.inode_mapped(where), 5.0)
        if how == "sigkill":
            assert time.monotonic() - t0 < 1.0
    finally:
        if p.is_alive():
            p.kill()
        p.join(TIMEOUT)


def test_dict_mutated_while_pickling_keeps_keys_with_their_values(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Another thread may change a BufferDict between the moment its values
    # are taken and the moment its keys are (the GIL can switch between any
    # two bytecodes). Simulated at that point: the reducer must pair each
    # key with the value it had, not zip a later key list with earlier
    # values (which would hand the receiver "b" -> a's memory).
    from hurray import _sets

    a = hurray.empty(2, "float32", shared=True)
    b = hurray.empty(2, "float32", shared=True)
    c = hurray.empty(2, "float32", shared=True)
    for buf, v in ((a, 1.0), (b, 2.0), (c, 3.0)):
        np.from_dlpack(buf)[:] = v
    d = hurray.BufferDict(a=a, b=b)
    original = _sets.set_members

    def members_then_mutate(obj: Any) -> Any:
        got = original(obj)
        del d["a"]
        d["c"] = c
        return got

    monkeypatch.setattr(_sets, "set_members", members_then_mutate)
    back = ForkingPickler.loads(ForkingPickler.dumps(d))
    monkeypatch.undo()
    sums = {k: float(np.from_dlpack(v)[0]) for k, v in back.items()}
    assert sums in ({"a": 1.0, "b": 2.0}, {"b": 2.0, "c": 3.0}), sums
