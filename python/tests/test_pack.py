# SPDX-License-Identifier: Apache-2.0
"""hurray.pack: a mapping of tensors into one tensor group with one copy
(docs/impl/python.md §12, "hurray.pack"). Keys, order, dtypes, shapes and
values are kept; non-contiguous values come out compact; every Buffer is in
the one group (addresses at GROUP_ALIGNMENT, one memfd mapping); the
sources are released once, right after the copy."""

import sys
from typing import Any, Dict, List

import numpy as np
import pytest

import hurray

import mp_aid
from conftest import CountingProducer, optional_module

torch, needs_torch = optional_module("torch")
ml_dtypes, needs_ml_dtypes = optional_module("ml_dtypes")
A = hurray.GROUP_ALIGNMENT
_KEEP: List[Any] = []  # ctypes producers outlive any capsule a traceback keeps


def compact_strides(shape: Any) -> tuple:  # type: ignore[type-arg]
    return tuple(int(np.prod(shape[k + 1 :])) for k in range(len(shape)))


def check_one_group(bufs: List[hurray.Buffer]) -> None:
    ptrs = [b.data_ptr for b in bufs]
    assert all(p % A == 0 for p in ptrs), ptrs
    for i in range(1, len(bufs)):
        end = ptrs[i - 1] + bufs[i - 1].nbytes
        assert ptrs[i] == (end + A - 1) // A * A, (i, ptrs)


def test_dict_of_numpy_arrays_with_every_layout() -> None:
    base = np.arange(60, dtype=np.float32).reshape(3, 4, 5)
    ro = np.arange(4, dtype=np.int16)
    ro.flags.writeable = False
    arrays: Dict[str, Any] = {
        "contiguous": base,
        "transposed": base.transpose(2, 0, 1),
        "stepped": base[:, ::2, 1::3],
        "reversed": np.arange(10, dtype=np.int64)[::-1],
        "broadcast": np.broadcast_to(np.arange(3, dtype=np.uint8), (4, 3)),
        "scalar": np.array(2.5),
        "empty": np.zeros((0, 3), dtype=np.complex64),
        "read_only": ro,
        "bool": np.array([True, False, True]),
    }
    packed = hurray.pack(arrays)
    assert list(packed) == list(arrays)  # the same keys, in order
    for k, a in arrays.items():
        b = packed[k]
        assert b.shape == a.shape and b.dtype == str(a.dtype), k
        assert b.strides == compact_strides(a.shape), k  # packed contiguous
        assert not b.readonly, k  # a private copy
        out = np.from_dlpack(b)
        np.testing.assert_array_equal(out, a)
        if a.size:
            assert out.ctypes.data != a.ctypes.data, k  # copied
    check_one_group(list(packed.values()))
    # One copy: later writes on either side are not seen by the other.
    base[0, 0, 0] = -1
    assert float(np.from_dlpack(packed["contiguous"])[0, 0, 0]) == 0.0


def test_one_memfd_freed_after_the_last_buffer() -> None:
    packed = hurray.pack({f"w{i}": np.full((i + 1, 7), i, dtype=np.float32) for i in range(6)})
    m = mp_aid.mapping_of(packed["w0"].data_ptr)
    assert "memfd:" in m, m
    assert {mp_aid.mapping_of(b.data_ptr) for b in packed.values()} == {m}
    keep = np.from_dlpack(packed["w3"])
    packed.clear()
    assert mp_aid.inode_mapped(m)
    assert float(keep.sum()) == 3 * 4 * 7
    del keep
    assert not mp_aid.inode_mapped(m)


def test_not_shared_is_plain_memory() -> None:
    packed = hurray.pack({"a": np.arange(3.0)}, shared=False)
    assert "memfd:" not in mp_aid.mapping_of(packed["a"].data_ptr)
    np.testing.assert_array_equal(np.from_dlpack(packed["a"]), [0.0, 1.0, 2.0])


def test_sources_are_released_once_right_after_the_copy() -> None:
    producers = [CountingProducer(5) for _ in range(4)]
    _KEEP.extend(producers)
    packed = hurray.pack({i: p.capsule() for i, p in enumerate(producers)})
    assert [p.deleted for p in producers] == [1, 1, 1, 1]
    assert [float(np.from_dlpack(packed[i]).sum()) for i in range(4)] == [10.0] * 4
    del packed
    assert [p.deleted for p in producers] == [1, 1, 1, 1]


@needs_torch
def test_torch_state_dict_round_trip() -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Embedding(50, 16),
        torch.nn.LayerNorm(16),
        torch.nn.Linear(16, 32),
        torch.nn.Linear(32, 8, bias=False),
    )
    model.register_buffer("steps", torch.tensor(7, dtype=torch.int64))
    sd = model.to(torch.bfloat16).state_dict()
    sd["transposed"] = sd["2.weight"].t()
    packed = hurray.pack(sd)
    assert list(packed) == list(sd)
    for k, t in sd.items():
        b = packed[k]
        out = torch.utils.dlpack.from_dlpack(b)
        assert out.dtype == t.dtype and out.shape == t.shape, k
        assert out.is_contiguous(), k
        assert torch.equal(out, t), k
        assert out.data_ptr() == b.data_ptr != t.data_ptr(), k
    assert packed["0.weight"].dtype == "bfloat16"
    check_one_group(list(packed.values()))
    # Loads back into a model.
    fresh = torch.nn.Sequential(
        torch.nn.Embedding(50, 16),
        torch.nn.LayerNorm(16),
        torch.nn.Linear(16, 32),
        torch.nn.Linear(32, 8, bias=False),
    ).to(torch.bfloat16)
    fresh.register_buffer("steps", torch.tensor(0, dtype=torch.int64))
    loaded = {k: torch.utils.dlpack.from_dlpack(v) for k, v in packed.items() if k != "transposed"}
    fresh.load_state_dict(loaded)
    assert int(fresh.state_dict()["steps"]) == 7


@needs_ml_dtypes
def test_ml_dtypes_bfloat16_and_sub_byte_arrays() -> None:
    bf = (np.arange(12, dtype=np.float32) / 4).astype(ml_dtypes.bfloat16).reshape(3, 4)
    f8 = np.linspace(-2, 2, 9).astype(ml_dtypes.float8_e4m3fn)
    i4 = np.array([[-8, 7], [1, -1]], dtype=ml_dtypes.int4)
    packed = hurray.pack({"bf16": bf.T, "f8": f8[::2], "i4": i4})
    assert [b.dtype for b in packed.values()] == ["bfloat16", "float8_e4m3fn", "int4"]
    out = packed["bf16"].__array__()
    assert out.dtype == ml_dtypes.bfloat16 and out.shape == (4, 3)
    np.testing.assert_array_equal(out.astype(np.float32), bf.T.astype(np.float32))
    np.testing.assert_array_equal(
        packed["f8"].__array__().astype(np.float32), f8[::2].astype(np.float32)
    )
    np.testing.assert_array_equal(packed["i4"].__array__().astype(np.int8), i4.astype(np.int8))


@needs_torch
@needs_ml_dtypes
def test_bfloat16_from_torch_reads_the_same_in_ml_dtypes() -> None:
    t = torch.randn(4, 6).to(torch.bfloat16)
    packed = hurray.pack({"t": t})
    arr = packed["t"].__array__()
    assert arr.dtype == ml_dtypes.bfloat16
    np.testing.assert_array_equal(arr.astype(np.float32), t.float().numpy())


def test_errors() -> None:
    with pytest.raises(TypeError, match="expected a mapping of tensors"):
        hurray.pack([np.arange(3)])  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="does not support the DLPack protocol") as e:
        hurray.pack({"ok": np.arange(3), "bad": object()})
    if sys.version_info >= (3, 11):
        assert e.value.__notes__[-1] == "hurray.pack: objs[1] is the value of key 'bad'"
    assert hurray.pack({}) == {}
