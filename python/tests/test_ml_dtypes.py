# SPDX-License-Identifier: Apache-2.0
"""ml_dtypes' types by their dtype objects, whatever kind NumPy reports for
them (float8_e5m2 says kind 'f' with itemsize 1, and
`hurray.empty(n, ml_dtypes.float8_e5m2)` raised "has no DLPack equivalent"
while the string worked), and back to NumPy with the dtype preserved."""

from typing import Any, Dict, List

import numpy as np
import pytest

import hurray

ml_dtypes = pytest.importorskip("ml_dtypes")

# ml_dtypes type -> hurray's (DLPack's) dtype name. Sub-byte types keep one
# element per byte in ml_dtypes: DLPack's SUBBYTE_PADDED layout.
WITH_CODE: Dict[str, str] = {
    "bfloat16": "bfloat16",  # kDLBfloat, 16
    "float8_e3m4": "float8_e3m4",  # kDLFloat8_e3m4 ...
    "float8_e4m3": "float8_e4m3",
    "float8_e4m3b11fnuz": "float8_e4m3b11fnuz",
    "float8_e4m3fn": "float8_e4m3fn",
    "float8_e4m3fnuz": "float8_e4m3fnuz",
    "float8_e5m2": "float8_e5m2",
    "float8_e5m2fnuz": "float8_e5m2fnuz",
    "float8_e8m0fnu": "float8_e8m0fnu",
    "float6_e2m3fn": "float6_e2m3fn",
    "float6_e3m2fn": "float6_e3m2fn",
    "float4_e2m1fn": "float4_e2m1fn",
    "int1": "int1",
    "int2": "int2",
    "int4": "int4",  # kDLInt, 1/2/4 bits
    "uint1": "uint1",
    "uint2": "uint2",
    "uint4": "uint4",  # kDLUInt
    "complex32": "complex32",  # kDLComplex, 32 bits: two float16s
}
# ml_dtypes types DLPack 1.3 has no code for.
WITHOUT_CODE = {"bcomplex32", "float8_e5m3fnu"}
SUB_BYTE = {
    "float6_e2m3fn",
    "float6_e3m2fn",
    "float4_e2m1fn",
    "int1",
    "int2",
    "int4",
    "uint1",
    "uint2",
    "uint4",
}


def ml_types() -> List[str]:
    """Every dtype ml_dtypes defines (by whether NumPy takes it as one)."""
    out = []
    for name in dir(ml_dtypes):
        if name.startswith("_") or name in ("finfo", "iinfo"):
            continue
        try:
            np.dtype(getattr(ml_dtypes, name))
        except TypeError:
            continue
        out.append(name)
    return out


def test_every_ml_dtypes_type_is_classified() -> None:
    found = set(ml_types())
    assert set(WITH_CODE) <= found
    # A type a later ml_dtypes adds must be mapped or listed here.
    assert found - set(WITH_CODE) - WITHOUT_CODE == set()


def sample(t: Any) -> Any:
    """(2, 3) values the type can hold (0 is NaN in float8_e8m0fnu; int1
    holds -1 and 0 only); compared bit for bit below."""
    if "int" in np.dtype(t).name:
        return np.array(
            [[0, -1, 0], [-1, -1, 0]] if np.dtype(t).name == "int1" else [[0, 1, 0], [1, 1, 0]]
        ).astype(t)
    return np.arange(1, 7, dtype=np.float32).reshape(2, 3).astype(t)


@pytest.mark.parametrize("name", sorted(WITH_CODE))
def test_ml_dtypes_type_round_trips_through_hurray_to_numpy(name: str) -> None:
    t = getattr(ml_dtypes, name)
    for spec in (t, np.dtype(t)):
        buf = hurray.empty((2, 3), spec)
        assert buf.dtype == WITH_CODE[name]
        assert buf.shape == (2, 3) and buf.strides == (3, 1)
        item = np.dtype(t).itemsize
        assert buf.nbytes == 6 * item  # one element per item, sub-byte ones padded
        a = np.asarray(buf)
        assert a.dtype == np.dtype(t)
        assert a.ctypes.data == buf.data_ptr  # zero-copy
        assert a.flags.writeable
        a[...] = sample(t)
        # Back through a share and a DLPack re-import: the same bits, same dtype.
        for other in (buf.share(1)[0], hurray.from_dlpack(buf)):
            b = np.asarray(other)
            assert b.dtype == np.dtype(t) and b.ctypes.data == buf.data_ptr
            assert b.view(np.uint8).tolist() == sample(t).view(np.uint8).tolist()
        # A copy NumPy is asked for is a copy, with the dtype kept.
        c = np.array(buf, copy=True)
        assert c.dtype == np.dtype(t) and c.ctypes.data != buf.data_ptr
    # The name means the same DLPack type (packed when it is sub-byte).
    named = hurray.empty((2, 3), WITH_CODE[name])
    assert named.dtype == WITH_CODE[name]
    if name in SUB_BYTE:
        assert named.nbytes < 6
    else:
        assert named.nbytes == 6 * np.dtype(t).itemsize


@pytest.mark.parametrize("name", sorted(WITHOUT_CODE))
def test_ml_dtypes_type_without_a_dlpack_code_is_refused(name: str) -> None:
    with pytest.raises(ValueError, match="no DLPack equivalent"):
        hurray.empty(3, getattr(ml_dtypes, name))


def test_packed_sub_byte_buffer_is_not_viewed_as_ml_dtypes() -> None:
    with pytest.raises(BufferError, match="packed"):
        np.asarray(hurray.empty(4, "int4"))


def test_read_only_ml_dtypes_view_stays_read_only() -> None:
    jax = pytest.importorskip("jax")
    jax.config.update("jax_platforms", "cpu")
    x = jax.numpy.arange(6, dtype=jax.numpy.bfloat16)
    buf = hurray.from_dlpack(x)
    a = np.asarray(buf)
    assert a.dtype == np.dtype(ml_dtypes.bfloat16) and not a.flags.writeable
    assert a.ctypes.data == x.unsafe_buffer_pointer()
    assert a.astype(np.float32).tolist() == list(range(6))
