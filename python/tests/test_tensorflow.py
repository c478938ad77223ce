# SPDX-License-Identifier: Apache-2.0
"""TensorFlow, the real peer: TensorFlow produces and takes only
legacy ('dltensor') capsules (tf.experimental.dlpack.to_dlpack and
from_dlpack), so every route here goes through hurray's legacy import and
export. What came in legacy with nothing said goes on legacy, zero-copy
(TF -> hurray -> TF, -> JAX, JAX -> hurray -> TF); NumPy, which can be told,
gets it read-only; and memory KNOWN to be read-only (a read-only NumPy
array) is still refused to TensorFlow, which cannot be told.

TensorFlow is imported once, here (it takes seconds); the module is skipped
when it cannot be imported (python/run_tests.sh installs tensorflow-cpu,
tolerating a failure).
"""

import ctypes
import gc
import os
from typing import Any, Tuple

import numpy as np
import pytest

import hurray

from conftest import _api, capsule_name
from dlpack_ctypes import DLManagedTensor

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # TF's start-up log lines, not errors
tf: Any = pytest.importorskip("tensorflow", reason="tensorflow cannot be imported")
to_dlpack = tf.experimental.dlpack.to_dlpack
tf_from_dlpack = tf.experimental.dlpack.from_dlpack

DTYPES = ["float32", "float16", "bfloat16", "int8", "uint64", "bool", "complex64"]


@pytest.fixture(scope="module")
def jnp() -> Any:
    jax: Any = pytest.importorskip("jax", reason="jax cannot be imported")
    jax.config.update("jax_platforms", "cpu")
    return jax.numpy


def tf_address(t: Any) -> int:
    """The address of a TensorFlow tensor's memory, as TF's own DLPack
    capsule says it (data + byte_offset). The capsule is left unused, so its
    destructor hands the tensor back to TF."""
    cap = to_dlpack(t)
    assert capsule_name(cap) == "dltensor"
    d = DLManagedTensor.from_address(_api.PyCapsule_GetPointer(cap, b"dltensor")).dl_tensor
    return int(d.data) + int(d.byte_offset)


def tf_tensor(dtype: str, shape: Tuple[int, ...] = (3, 4)) -> Any:
    n = int(np.prod(shape))
    return tf.reshape(tf.cast(tf.range(n) % 7, getattr(tf, dtype)), shape)


@pytest.mark.parametrize("dtype", DTYPES)
def test_tf_to_hurray_to_tf_is_zero_copy(dtype: str) -> None:
    t = tf_tensor(dtype)
    for buf in (hurray.from_dlpack(to_dlpack(t)), hurray.from_dlpack(t)):  # capsule, __dlpack__
        assert buf.readonly  # a legacy import, as NumPy takes one
        assert buf.data_ptr == tf_address(t)
        assert buf.shape == (3, 4) and buf.dtype == dtype
        for b in (buf, buf.share(1)[0], hurray.from_dlpack(buf)):
            cap = b.__dlpack__()  # legacy, as TF asks
            assert capsule_name(cap) == "dltensor"
            back = tf_from_dlpack(cap)
            assert back.dtype == t.dtype and tuple(back.shape) == (3, 4)
            assert tf_address(back) == tf_address(t)
            assert bool(tf.reduce_all(tf.equal(back, t)))


def test_tf_memory_outlives_the_tf_tensor_through_hurray() -> None:
    t = tf_tensor("float32")
    address = tf_address(t)
    buf = hurray.from_dlpack(t)
    back = tf_from_dlpack(buf.share(1)[0].__dlpack__())
    del t, buf
    gc.collect()
    assert tf_address(back) == address
    assert back.numpy().tolist() == [
        [float(i % 7) for i in range(r * 4, r * 4 + 4)] for r in range(3)
    ]


@pytest.mark.parametrize("dtype", ["float32", "int8", "bool", "bfloat16", "complex64"])
def test_tf_to_hurray_to_jax_is_zero_copy(jnp: Any, dtype: str) -> None:
    t = tf_tensor(dtype)
    buf = hurray.from_dlpack(t)
    y = jnp.from_dlpack(buf)
    assert y.unsafe_buffer_pointer() == tf_address(t)
    assert str(y.dtype) == dtype and y.shape == (3, 4)
    assert np.array_equal(np.asarray(y.astype("complex64")), tf.cast(t, tf.complex64).numpy())


@pytest.mark.parametrize("dtype", ["float32", "int8", "bool", "bfloat16", "complex64"])
def test_jax_to_hurray_to_tf_is_zero_copy(jnp: Any, dtype: str) -> None:
    x = (jnp.arange(12).reshape(3, 4) % 7).astype(dtype)
    buf = hurray.from_dlpack(x)
    t = tf_from_dlpack(buf.__dlpack__())
    assert tf_address(t) == x.unsafe_buffer_pointer()
    assert t.dtype.name == dtype and tuple(t.shape) == (3, 4)
    expect = np.asarray(x.astype("complex64"))
    del x, buf
    gc.collect()
    assert np.array_equal(tf.cast(t, tf.complex64).numpy(), expect)


def test_tf_to_hurray_to_numpy_is_read_only() -> None:
    t = tf_tensor("float64")
    buf = hurray.from_dlpack(t)
    for b in (buf, buf.share(1)[0]):
        a = np.from_dlpack(b)
        assert a.__array_interface__["data"][0] == tf_address(t)  # zero-copy
        assert not a.flags.writeable
        with pytest.raises(ValueError, match="read-only"):
            a[0, 0] = 1.0
        assert memoryview(b).readonly
        with pytest.raises(TypeError):
            (ctypes.c_char * 96).from_buffer(b)  # asks for a writable buffer
    assert float(t[0, 0]) == 0.0


def test_read_only_numpy_is_still_refused_to_tf() -> None:
    a = np.arange(6.0)
    a.flags.writeable = False
    with pytest.raises(BufferError):  # NumPy's own refusal of the same hand-off
        tf_from_dlpack(a.__dlpack__())
    buf = hurray.from_dlpack(a)
    for b in (buf, buf.share(1)[0], hurray.from_dlpack(buf)):
        with pytest.raises(BufferError, match="read-only"):
            tf_from_dlpack(b.__dlpack__())
    # A private copy is what TensorFlow can have.
    c = tf_from_dlpack(buf.__dlpack__(copy=True))
    assert tf_address(c) != a.__array_interface__["data"][0]
    assert c.numpy().tolist() == a.tolist()
