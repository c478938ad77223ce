# SPDX-License-Identifier: Apache-2.0
"""Real peers from PyPI: apache-tvm-ffi's Tensor and JAX on CPU."""

import weakref
from types import ModuleType
from typing import Any, List, Tuple

import numpy as np
import pytest

import hurray


def _import(name: str, reason: str) -> ModuleType:
    mod: ModuleType = pytest.importorskip(name, reason=reason)
    return mod


def aligned(shape: Tuple[int, ...], dtype: Any = np.float32, alignment: int = 64) -> Any:
    """A NumPy array whose data is `alignment`-byte aligned (JAX imports CPU
    memory zero-copy only when it is aligned this way)."""
    dtype = np.dtype(dtype)
    n = int(np.prod(shape)) * dtype.itemsize
    raw = np.empty(n + alignment, dtype=np.uint8)
    off = (-raw.ctypes.data) % alignment
    return raw[off : off + n].view(dtype).reshape(shape)


SCALAR_NAMES = [
    "bool",
    "int8",
    "int16",
    "int32",
    "int64",
    "uint8",
    "uint16",
    "uint32",
    "uint64",
    "float16",
    "float32",
    "float64",
    "bfloat16",
    "complex64",
    "complex128",
    "float8_e3m4",
    "float8_e4m3",
    "float8_e4m3b11fnuz",
    "float8_e4m3fn",
    "float8_e4m3fnuz",
    "float8_e5m2",
    "float8_e5m2fnuz",
    "float8_e8m0fnu",
    "float6_e2m3fn",
    "float6_e3m2fn",
    "float4_e2m1fn",
]


@pytest.mark.parametrize("name", SCALAR_NAMES)
def test_dtype_names_round_trip(name: str) -> None:
    assert hurray.empty(3, name).dtype == name


# --------------------------------------------------------------------------
# apache-tvm-ffi
# --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tvm() -> ModuleType:
    return _import("tvm_ffi", "apache-tvm-ffi is not installed")


def test_tvm_ffi_consumes_a_buffer_zero_copy(tvm: ModuleType) -> None:
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    buf = hurray.from_dlpack(a)
    t = tvm.from_dlpack(buf)
    assert t.data_ptr() == a.ctypes.data
    assert tuple(t.shape) == (3, 4)
    assert str(t.dtype) == "float32"
    back = np.from_dlpack(t)
    back[2, 3] = -5
    assert a[2, 3] == -5


def test_tvm_ffi_tensor_as_a_producer(tvm: ModuleType) -> None:
    a = np.arange(10, dtype=np.int64)
    t = tvm.from_dlpack(a)
    buf = hurray.from_dlpack(t)
    assert buf.data_ptr == a.ctypes.data and buf.dtype == "int64"
    t2 = tvm.from_dlpack(buf)
    assert t2.data_ptr() == a.ctypes.data


def test_tvm_ffi_strided_views(tvm: ModuleType) -> None:
    a = np.arange(12, dtype=np.float32).reshape(3, 4).T
    t = tvm.from_dlpack(hurray.from_dlpack(a))
    assert tuple(t.strides) == (1, 4)
    assert t.data_ptr() == a.ctypes.data


@pytest.mark.parametrize(
    "name", ["bfloat16", "float8_e4m3fn", "float8_e5m2", "float4_e2m1fn", "bool"]
)
def test_tvm_ffi_exotic_dtypes_both_ways(tvm: ModuleType, name: str) -> None:
    buf = hurray.empty((2, 4), name)
    t = tvm.from_dlpack(buf)
    assert str(t.dtype) == name
    assert t.data_ptr() == buf.data_ptr
    back = hurray.from_dlpack(t)
    assert back.dtype == name and back.data_ptr == buf.data_ptr


def test_tvm_ffi_lifetime(tvm: ModuleType) -> None:
    a = np.arange(64, dtype=np.float32)
    fired: List[int] = []
    weakref.finalize(a, fired.append, 1)
    parts = hurray.from_dlpack(a).share(2)
    del a
    tensors = [tvm.from_dlpack(p) for p in parts]
    del parts
    assert not fired
    tensors.pop()
    assert not fired
    tensors.pop()
    assert fired == [1]


# --------------------------------------------------------------------------
# JAX (CPU)
# --------------------------------------------------------------------------


@pytest.fixture(scope="module")
def jax() -> ModuleType:
    jax = _import("jax", "jax[cpu] is not installed")
    return jax


def test_jax_consumes_a_buffer_zero_copy(jax: ModuleType) -> None:
    jnp = jax.numpy
    a = aligned((16, 16))
    a[...] = np.arange(256, dtype=np.float32).reshape(16, 16)
    buf = hurray.from_dlpack(a)
    j = jnp.from_dlpack(buf)
    assert j.unsafe_buffer_pointer() == a.ctypes.data
    a[3, 4] = 1234.0
    assert float(j[3, 4]) == 1234.0
    assert float(j.sum()) == float(a.sum())


def test_jax_array_as_a_producer(jax: ModuleType) -> None:
    jnp = jax.numpy
    j = jnp.arange(24, dtype=jnp.float32).reshape(4, 6)
    buf = hurray.from_dlpack(j)
    assert buf.data_ptr == j.unsafe_buffer_pointer()
    assert buf.shape == (4, 6) and buf.dtype == "float32"
    out = np.from_dlpack(buf)
    assert out.ctypes.data == j.unsafe_buffer_pointer()
    np.testing.assert_array_equal(out, np.asarray(j))


@pytest.mark.parametrize("name", ["bfloat16", "float8_e4m3fn", "float8_e5m2"])
def test_jax_exotic_dtypes(jax: ModuleType, name: str) -> None:
    jnp = jax.numpy
    j = jnp.zeros((2, 3), dtype=getattr(jnp, name))
    buf = hurray.from_dlpack(j)
    assert buf.dtype == name
    # JAX gives (and takes) only legacy capsules: its Buffer is read-only, as
    # NumPy would make it, and goes back to JAX as the legacy tensor it came
    # as, zero-copy.
    assert buf.readonly
    back = jnp.from_dlpack(buf)
    assert back.dtype == j.dtype
    assert back.unsafe_buffer_pointer() == j.unsafe_buffer_pointer()
    copied = jnp.from_dlpack(hurray.from_dlpack(buf, copy=True))
    assert copied.dtype == j.dtype and copied.unsafe_buffer_pointer() != j.unsafe_buffer_pointer()


def test_jax_lifetime(jax: ModuleType) -> None:
    jnp = jax.numpy
    a = aligned((128,))
    fired: List[int] = []
    weakref.finalize(a, fired.append, 1)
    parts = hurray.from_dlpack(a).share(2)
    addr = a.ctypes.data
    del a
    arrays = [jnp.from_dlpack(p) for p in parts]
    del parts
    assert all(x.unsafe_buffer_pointer() == addr for x in arrays)
    arrays.pop()
    assert not fired
    arrays.pop()
    import gc

    gc.collect()
    assert fired == [1]
