# SPDX-License-Identifier: Apache-2.0
"""The quantized pair of issue 28 (FP4 values and their E8M0 block scales as
two tensors of one group) through torch, zero-copy both ways. torch keeps
FP4 packed two per byte (torch.float4_e2m1fn_x2, DLPack kDLFloat4_e2m1fn with
2 lanes), so the group's values are described that way here; the unpacked
ml_dtypes form is test_empty_group.py's test_ml_dtypes_members_quantized_pair."""

from typing import Any

import pytest

import hurray

import mp_aid

torch: Any = pytest.importorskip("torch", reason="torch is not installed")
if not hasattr(torch, "float4_e2m1fn_x2") or not hasattr(torch, "float8_e8m0fnu"):
    pytest.skip("this torch has no float4_e2m1fn_x2 / float8_e8m0fnu", allow_module_level=True)


def _pair() -> Any:
    # 4 rows of 32 FP4 values (16 bytes, two per byte) and one scale per row.
    return hurray.empty_group(
        [((4, 16), "float4_e2m1fnx2"), ((4, 1), "float8_e8m0fnu")], shared=True
    )


def test_the_pair_is_one_allocation_that_torch_takes_zero_copy() -> None:
    values, scales = _pair()
    assert values.dtype == "float4_e2m1fnx2" and scales.dtype == "float8_e8m0fnu"
    # 64 bytes of values, the scales at the next 256-byte boundary
    assert scales.data_ptr - values.data_ptr == hurray.GROUP_ALIGNMENT
    tv, ts = torch.from_dlpack(values), torch.from_dlpack(scales)
    assert tv.dtype == torch.float4_e2m1fn_x2 and tuple(tv.shape) == (4, 16)
    assert ts.dtype == torch.float8_e8m0fnu and tuple(ts.shape) == (4, 1)
    assert tv.data_ptr() == values.data_ptr and ts.data_ptr() == scales.data_ptr
    # Writes through torch land in the group's bytes.
    tv.view(torch.uint8).fill_(0x35)  # two FP4 codes per byte: 1.0 (0x5) and 1.5 (0x3)
    ts.view(torch.uint8).fill_(127)  # E8M0 127 is 2^0
    again = torch.from_dlpack(values.share(1)[0]).view(torch.uint8)
    assert again.data_ptr() == values.data_ptr and int(again[0, 0]) == 0x35
    assert int(torch.from_dlpack(scales.share(1)[0]).view(torch.uint8)[3, 0]) == 127


def test_torch_tensors_come_back_as_the_same_memory() -> None:
    values, scales = _pair()
    tv, ts = torch.from_dlpack(values), torch.from_dlpack(scales)
    back = hurray.from_dlpack_many([tv, ts])
    assert [b.dtype for b in back] == ["float4_e2m1fnx2", "float8_e8m0fnu"]
    assert [b.data_ptr for b in back] == [values.data_ptr, scales.data_ptr]
    assert [b.shape for b in back] == [(4, 16), (4, 1)]


def test_the_group_is_freed_once_after_torch_and_every_buffer_let_go() -> None:
    values, scales = _pair()
    m = mp_aid.mapping_of(values.data_ptr)
    assert "memfd:" in m and mp_aid.mapping_of(scales.data_ptr) == m, m
    tv, ts = torch.from_dlpack(values), torch.from_dlpack(scales)
    values.release()
    scales.release()
    assert mp_aid.inode_mapped(m)  # torch holds both
    del tv
    assert mp_aid.inode_mapped(m)  # the scales still hold the group
    del ts  # the last holder: the group goes, once
    assert not mp_aid.inode_mapped(m)
