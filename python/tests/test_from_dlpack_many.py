# SPDX-License-Identifier: Apache-2.0
"""hurray.from_dlpack_many: the batch form of from_dlpack (docs/impl/python.md
§2, "from_dlpack_many"). Every element is asked as from_dlpack asks it (a
producer's exchange table where it has one), the tensors are imported with
one batched libhurray call per DLPack form, and a failed element leaves
nothing behind: no Buffer, every tensor given back (raw capsules unconsumed,
table tensors deleted), and the exception names the element. Releases are
counted with ctypes producers; pointers are compared with each framework's
own view."""

import ctypes
import gc
import sys
from typing import Any, Iterator, List, Optional, Tuple

import numpy as np
import pytest

import hurray
from hurray import _native

from conftest import CAPSULE_DESTRUCTOR, CountingProducer, _api, capsule_name, optional_module
from dlpack_ctypes import LEGACY_DELETER, DLDataType, DLDevice, DLManagedTensor

torch, needs_torch = optional_module("torch")
tvm_ffi, needs_tvm = optional_module("tvm_ffi")
jax, needs_jax = optional_module("jax")
jnp: Any = jax.numpy if jax is not None else None
# Notes (PEP 678) name the element of a producer's own error.
has_notes = sys.version_info >= (3, 11)

_LEGACY_NAME = b"dltensor"  # kept alive: PyCapsule_New keeps the pointer


class LegacyCounting:
    """A legacy-only producer (ctypes): 'dltensor' capsules of an int32
    vector whose deleter counts its calls."""

    def __init__(self, n: int = 4, ndim: int = 1) -> None:
        self.memory = (ctypes.c_int32 * n)(*range(n))
        self.shape = (ctypes.c_int64 * 1)(n)
        self.ndim = ndim
        self.deleted = 0
        self._tensors: List[DLManagedTensor] = []

        def _deleter(ptr: Any) -> None:
            self.deleted += 1

        self._deleter = LEGACY_DELETER(_deleter)

        def _destructor(cap_ptr: Optional[int]) -> None:
            if _api.PyCapsule_IsValid(cap_ptr, _LEGACY_NAME):
                _deleter(None)

        self._destructor = CAPSULE_DESTRUCTOR(_destructor)

    @property
    def address(self) -> int:
        return ctypes.addressof(self.memory)

    def capsule(self) -> object:
        t = DLManagedTensor()
        t.deleter = self._deleter
        t.dl_tensor.data = self.address
        t.dl_tensor.device = DLDevice(1, 0)
        t.dl_tensor.ndim = self.ndim
        t.dl_tensor.dtype = DLDataType(0, 32, 1)
        t.dl_tensor.shape = self.shape
        t.dl_tensor.strides = None
        self._tensors.append(t)
        cap: object = _api.PyCapsule_New(
            ctypes.addressof(t), _LEGACY_NAME, ctypes.cast(self._destructor, ctypes.c_void_p)
        )
        return cap


# Every ctypes producer stays alive for the whole module: a capsule kept by
# an exception's traceback (pytest.raises) may be collected after its
# producer, and its ctypes destructor must still exist then.
_KEEP: List[Any] = []


def counting(n: int = 4, **kw: Any) -> CountingProducer:
    p = CountingProducer(n, **kw)
    _KEEP.append(p)
    return p


def legacy_counting(n: int = 4, ndim: int = 1) -> "LegacyCounting":
    p = LegacyCounting(n, ndim)
    _KEEP.append(p)
    return p


def stats() -> dict:  # type: ignore[type-arg]
    return dict(_native._exchange_api_stats())


def notes(e: BaseException) -> List[str]:
    return list(getattr(e, "__notes__", []))


# --- success -----------------------------------------------------------------


def test_numpy_arrays_zero_copy_in_order() -> None:
    arrays = [np.arange(n, dtype=np.float32) + n for n in range(1, 9)]
    ro = np.arange(3.0)
    ro.flags.writeable = False
    bufs = hurray.from_dlpack_many(arrays + [ro])
    assert isinstance(bufs, list) and len(bufs) == 9
    for a, b in zip(arrays + [ro], bufs):
        assert isinstance(b, hurray.Buffer)
        assert b.data_ptr == a.ctypes.data
        assert b.shape == a.shape and b.dtype == str(a.dtype)
        assert np.from_dlpack(b).ctypes.data == a.ctypes.data
    assert [b.readonly for b in bufs] == [False] * 8 + [True]


def test_empty_sequence_and_iterables() -> None:
    assert hurray.from_dlpack_many([]) == []
    assert hurray.from_dlpack_many(()) == []
    a, b = np.arange(4), np.ones((2, 3))
    gen: Iterator[Any] = (x for x in (a, b))
    out = hurray.from_dlpack_many(gen)
    assert [x.data_ptr for x in out] == [a.ctypes.data, b.ctypes.data]
    assert [x.data_ptr for x in hurray.from_dlpack_many((a, b))] == [a.ctypes.data, b.ctypes.data]


def test_each_tensor_released_exactly_once() -> None:
    producers = [counting(4) for _ in range(6)]
    caps = [p.capsule() for p in producers]
    bufs = hurray.from_dlpack_many(caps)
    assert [capsule_name(c) for c in caps] == ["used_dltensor_versioned"] * 6
    assert [p.deleted for p in producers] == [0] * 6
    for p, b in zip(producers, bufs):
        assert b.data_ptr == p.address
    del caps
    for i in (3, 0, 5, 1, 4, 2):  # any order
        bufs[i].release()
        assert producers[i].deleted == 1
    del bufs
    assert [p.deleted for p in producers] == [1] * 6


@needs_torch
def test_torch_tensors_through_the_table_in_one_batch() -> None:
    ts = [torch.arange(n, dtype=torch.float32) for n in range(1, 9)]
    before = stats()
    bufs = hurray.from_dlpack_many(ts)
    after = stats()
    assert after["consumer_table"] - before["consumer_table"] == 8
    assert after["consumer_capsule"] == before["consumer_capsule"]
    for t, b in zip(ts, bufs):
        assert b.data_ptr == t.data_ptr()
        assert torch.utils.dlpack.from_dlpack(b).data_ptr() == t.data_ptr()
    # The Buffers hold torch's memory after the tensors are gone.
    ptrs = [t.data_ptr() for t in ts]
    del ts, t
    assert [b.data_ptr for b in bufs] == ptrs
    assert float(np.from_dlpack(bufs[7])[7]) == 7.0


@needs_torch
def test_torch_refusals_go_through_dlpack_as_the_single_form() -> None:
    ok = torch.ones(3)
    grad = torch.ones(3, requires_grad=True)
    with pytest.raises(BufferError) as single:
        hurray.from_dlpack(grad)
    with pytest.raises(BufferError) as many:
        hurray.from_dlpack_many([ok, grad])
    assert str(many.value) == str(single.value)
    if has_notes:
        assert notes(many.value) == [
            "hurray.from_dlpack_many: raised for objs[1] (Tensor); no Buffer was made, "
            "and every tensor taken so far was given back"
        ]


@needs_tvm
def test_tvm_ffi_tensors() -> None:
    arrays = [np.arange(6, dtype=np.int64).reshape(2, 3) * k for k in range(4)]
    tensors = [tvm_ffi.from_dlpack(a) for a in arrays]
    bufs = hurray.from_dlpack_many(tensors)
    for a, b in zip(arrays, bufs):
        assert b.data_ptr == a.ctypes.data and b.shape == (2, 3) and b.dtype == "int64"
        np.testing.assert_array_equal(np.from_dlpack(b), a)


@needs_jax
def test_jax_arrays_are_legacy_and_read_only_as_in_the_single_form() -> None:
    xs = [jnp.arange(5, dtype=jnp.float32) * k for k in range(3)]
    bufs = hurray.from_dlpack_many(xs)
    for x, b in zip(xs, bufs):
        single = hurray.from_dlpack(x)
        assert b.data_ptr == x.unsafe_buffer_pointer() == single.data_ptr
        assert b.readonly == single.readonly
        # legacy in, legacy out: JAX takes it back zero-copy
        assert jnp.from_dlpack(b).unsafe_buffer_pointer() == x.unsafe_buffer_pointer()


def test_mixed_producers_in_one_call() -> None:
    a = np.arange(8, dtype=np.float64)
    cp = counting(8)
    legacy = legacy_counting(4)
    src = hurray.empty((2, 2), "int16")
    objs: List[Any] = [a, cp.capsule(), legacy.capsule(), src]
    expect = [a.ctypes.data, cp.address, legacy.address, src.data_ptr]
    if torch is not None:
        t = torch.zeros(5, dtype=torch.bfloat16)
        objs.append(t)
        expect.append(t.data_ptr())
    if tvm_ffi is not None:
        v = np.arange(3, dtype=np.uint8)
        objs.append(tvm_ffi.from_dlpack(v))
        expect.append(v.ctypes.data)
    if jax is not None:
        x = jnp.ones(3)
        objs.append(x)
        expect.append(x.unsafe_buffer_pointer())
    bufs = hurray.from_dlpack_many(objs)
    assert [b.data_ptr for b in bufs] == expect
    assert bufs[2].readonly and bufs[2].dtype == "int32"  # legacy: read-only, as NumPy
    assert not bufs[0].readonly and not bufs[3].readonly
    if torch is not None:
        assert bufs[4].dtype == "bfloat16"
    del objs
    bufs.clear()
    assert (cp.deleted, legacy.deleted) == (1, 1)


def test_copy_and_device_apply_to_every_element() -> None:
    arrays = [np.arange(4.0), np.arange(6, dtype=np.int8)]
    copies = hurray.from_dlpack_many(arrays, copy=True)
    for a, c in zip(arrays, copies):
        assert c.data_ptr != a.ctypes.data and c.is_copied
        np.testing.assert_array_equal(np.from_dlpack(c), a)
    same = hurray.from_dlpack_many(arrays, device="cpu", copy=False)
    assert [b.data_ptr for b in same] == [a.ctypes.data for a in arrays]


# --- refusals: nothing taken stays taken --------------------------------------


def test_a_non_producer_leaves_every_capsule_unconsumed() -> None:
    producers = [counting(2) for _ in range(3)]
    caps = [p.capsule() for p in producers]
    with pytest.raises(TypeError) as e:
        hurray.from_dlpack_many([caps[0], caps[1], 42, caps[2]])
    assert str(e.value) == (
        "hurray.from_dlpack: int object does not support the DLPack protocol "
        "(no __dlpack__ method) and is not a DLPack capsule"
    )
    if has_notes:
        assert notes(e.value) == [
            "hurray.from_dlpack_many: raised for objs[2] (int); no Buffer was made, "
            "and every tensor taken so far was given back"
        ]
    assert [capsule_name(c) for c in caps] == ["dltensor_versioned"] * 3
    assert [p.deleted for p in producers] == [0, 0, 0]
    # They still import; each is deleted once.
    bufs = hurray.from_dlpack_many(caps)
    del caps, e
    bufs.clear()
    assert [p.deleted for p in producers] == [1, 1, 1]


def _bad_dtype_capsule(p: CountingProducer) -> object:
    cap = p.capsule()
    p._tensors[-1].dl_tensor.dtype = DLDataType(2, 13, 1)  # float13: no such type
    return cap


def _bad_ndim_capsule(p: CountingProducer) -> object:
    cap = p.capsule()
    p._tensors[-1].dl_tensor.ndim = -1
    return cap


@pytest.mark.parametrize(
    "make, kind, status",
    [
        (_bad_dtype_capsule, BufferError, "HURRAY_ERR_UNSUPPORTED_DTYPE"),
        (_bad_ndim_capsule, ValueError, "HURRAY_ERR_INVALID_ARGUMENT"),
    ],
)
def test_a_tensor_libhurray_refuses_names_its_index(make: Any, kind: type, status: str) -> None:
    good = [counting(3) for _ in range(3)]
    bad = counting(3)
    # The single form refuses it with the same exception type and status.
    # (The capsule is held in a variable: the ctypes destructor of a
    # temporary would run while the exception is pending.)
    bad_cap = make(bad)
    with pytest.raises(kind) as single:
        hurray.from_dlpack(bad_cap)
    assert status in str(single.value)
    del bad_cap
    a = np.arange(5.0)
    caps = [good[0].capsule(), good[1].capsule(), make(bad), good[2].capsule()]
    with pytest.raises(kind) as e:
        hurray.from_dlpack_many([a, caps[0], caps[1], caps[2], caps[3]])
    msg = str(e.value)
    assert msg.startswith("hurray.from_dlpack_many: objs[3] (PyCapsule): tensor."), msg
    assert msg.endswith(f"; nothing was imported [{status}]"), msg
    assert "ts[" not in msg
    assert [capsule_name(c) for c in caps] == ["dltensor_versioned"] * 4
    assert [p.deleted for p in good] == [0, 0, 0]
    # The wrappers came off: the producers' own deleters run, once each.
    del caps, e
    assert [p.deleted for p in good] == [1, 1, 1]
    assert bad.deleted == 2


def test_another_major_version_is_refused_with_the_capsules_words() -> None:
    ok = counting(2)
    v2 = counting(2, version=(2, 0))
    caps = [ok.capsule(), v2.capsule()]
    with pytest.raises(BufferError) as e:
        hurray.from_dlpack_many(caps)
    assert str(e.value) == (
        "hurray.from_dlpack_many: objs[1] (PyCapsule): the tensor is DLPack version 2.0, and "
        "only major version 1 can be read; the capsule was left unconsumed (still named "
        "'dltensor_versioned'), and its destructor deletes the tensor "
        "[HURRAY_ERR_UNSUPPORTED_VERSION]"
    )
    assert [capsule_name(c) for c in caps] == ["dltensor_versioned"] * 2
    del caps, e
    assert (ok.deleted, v2.deleted) == (1, 1)


def test_a_used_capsule_and_the_same_capsule_twice() -> None:
    p = counting(2)
    used = p.capsule()
    hurray.from_dlpack(used).release()
    fresh = p.capsule()
    with pytest.raises(ValueError, match="already consumed"):
        hurray.from_dlpack_many([fresh, used])
    assert capsule_name(fresh) == "dltensor_versioned"
    with pytest.raises(ValueError) as e:
        hurray.from_dlpack_many([fresh, np.arange(2), fresh])
    assert str(e.value) == (
        "hurray.from_dlpack_many: objs[2] is the same DLPack capsule as objs[0]; a capsule "
        "can be imported only once; nothing was imported"
    )
    assert capsule_name(fresh) == "dltensor_versioned"
    assert p.deleted == 1
    (b,) = hurray.from_dlpack_many([fresh])
    del fresh, b
    assert p.deleted == 2


def test_the_same_producer_twice_gives_two_references() -> None:
    a = np.arange(3.0)
    b1, b2 = hurray.from_dlpack_many([a, a])
    assert b1.data_ptr == b2.data_ptr == a.ctypes.data
    b1.release()
    assert np.from_dlpack(b2)[2] == 2.0


def test_a_legacy_refusal_after_the_versioned_batch_gives_everything_back() -> None:
    # Documented: versioned tensors are imported first; when the legacy
    # batch then refuses, their handles are released (each producer's
    # deleter once) and their capsules read as used.
    v = counting(2)
    good_legacy = legacy_counting(2)
    bad_legacy = legacy_counting(2, ndim=-1)
    caps = [v.capsule(), good_legacy.capsule(), bad_legacy.capsule()]
    with pytest.raises(ValueError) as e:
        hurray.from_dlpack_many(caps)
    assert str(e.value) == (
        "hurray.from_dlpack_many: objs[2] (PyCapsule): tensor.dl_tensor.ndim is -1 "
        "(allowed: 0..64); nothing was imported [HURRAY_ERR_INVALID_ARGUMENT]"
    )
    assert v.deleted == 1 and capsule_name(caps[0]) == "used_dltensor_versioned"
    assert capsule_name(caps[1]) == capsule_name(caps[2]) == "dltensor"
    assert (good_legacy.deleted, bad_legacy.deleted) == (0, 0)
    del caps, e
    assert (v.deleted, good_legacy.deleted, bad_legacy.deleted) == (1, 1, 1)


def test_argument_errors() -> None:
    with pytest.raises(TypeError, match="sequence or iterable"):
        hurray.from_dlpack_many(3)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="not str"):
        hurray.from_dlpack_many("ab")
    cap = counting(1).capsule()
    with pytest.raises(TypeError, match="not PyCapsule"):
        hurray.from_dlpack_many(cap)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="exactly 1 positional"):
        hurray.from_dlpack_many()  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="unexpected keyword argument 'bogus'"):
        hurray.from_dlpack_many([], bogus=1)  # type: ignore[call-arg]
    with pytest.raises(ValueError, match="strings are not allowed"):
        hurray.from_dlpack_many([], copy="yes")
    with pytest.raises(TypeError, match="stream must be an int or None"):
        hurray.from_dlpack_many([], stream=1.5)  # type: ignore[arg-type]
    # A CPU producer takes no stream: refused for the element, named.
    a = np.arange(2)
    with pytest.raises(ValueError, match="no streams") as e:
        hurray.from_dlpack_many([a], stream=5)
    if has_notes:
        assert "objs[0] (numpy.ndarray)" in notes(e.value)[0]


def test_a_released_buffer_element() -> None:
    live, dead = hurray.empty(3), hurray.empty(3)
    dead.release()
    with pytest.raises(ValueError, match="released hurray.Buffer") as e:
        hurray.from_dlpack_many([live, dead])
    if has_notes:
        assert "objs[1] (hurray.Buffer)" in notes(e.value)[0]
    (again,) = hurray.from_dlpack_many([live])
    assert again.data_ptr == live.data_ptr


def test_producer_exception_propagates_unchanged_with_a_note() -> None:
    class Boom:
        def __dlpack__(self, **kw: Any) -> Any:
            raise KeyError("boom")

        def __dlpack_device__(self) -> Tuple[int, int]:
            return (1, 0)

    p = counting(2)
    cap = p.capsule()
    err = KeyError("x")
    with pytest.raises(KeyError) as e:
        hurray.from_dlpack_many([cap, Boom()])
    err = e.value
    assert err.args == ("boom",)
    assert capsule_name(cap) == "dltensor_versioned"
    del cap, e, err
    assert p.deleted == 1


def test_a_producer_returning_one_capsule_twice_is_refused() -> None:
    # A producer that hands out one cached capsule from every __dlpack__
    # call (DLPack asks for a new one each time). The single form refuses
    # the second call (the capsule reads as used); the batch holds both
    # unconsumed until stage 2, so it must compare the capsules the
    # producers returned, not only raw capsules passed in: else one tensor
    # becomes two handles and its deleter runs twice.
    p = counting(2)

    class Cached:
        def __init__(self) -> None:
            self.cap = p.capsule()

        def __dlpack__(self, **kw: Any) -> Any:
            return self.cap

        def __dlpack_device__(self) -> Tuple[int, int]:
            return (1, 0)

    c = Cached()
    with pytest.raises(ValueError, match=r"objs\[1\].*same DLPack capsule as .*objs\[0\]"):
        hurray.from_dlpack_many([c, c])
    assert capsule_name(c.cap) == "dltensor_versioned"  # left unconsumed
    assert p.deleted == 0
    b = hurray.from_dlpack(c)  # still importable once
    del b
    gc.collect()
    assert p.deleted == 1
