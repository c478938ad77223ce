# SPDX-License-Identifier: Apache-2.0
"""Legacy (unversioned) DLPack in and out: what is KNOWN to be
read-only stays read-only on every route, and what came in as a legacy
tensor, with nothing said, may go on as a legacy tensor.

JAX and TensorFlow produce and take only legacy capsules. hurray marks a
legacy import read-only (as NumPy does), and used to refuse every legacy
export of a read-only Buffer, so JAX -> hurray -> JAX failed. A legacy
export of a legacy import makes nothing more writable than the producer's
own legacy capsule made it; a versioned READ_ONLY flag or a read-only NumPy
array is another matter, and is never handed to a consumer that cannot be
told.
"""

import ctypes
import gc
from typing import Any, Callable, List, Optional, Tuple

import numpy as np
import pytest

import hurray

from conftest import CAPSULE_DESTRUCTOR, _api, capsule_name, versioned_tensor_of
from dlpack_ctypes import LEGACY_DELETER, READ_ONLY, DLDataType, DLDevice, DLManagedTensor

try:
    import jax
    import jax.numpy as jnp

    jax.config.update("jax_platforms", "cpu")  # type: ignore[no-untyped-call]
except ImportError:  # pragma: no cover - depends on the environment
    jax = None  # type: ignore[assignment]

needs_jax = pytest.mark.skipif(jax is None, reason="jax cannot be imported")

_api.PyCapsule_SetName.restype = ctypes.c_int
_api.PyCapsule_SetName.argtypes = [ctypes.py_object, ctypes.c_char_p]
_LEGACY_NAME = b"dltensor"  # kept alive: PyCapsule_New keeps the pointer


class LegacyProducer:
    """A pre-1.0 DLPack producer written with ctypes: __dlpack__ takes only
    `stream` and returns 'dltensor' capsules of an int16 (2, 3) tensor, whose
    deleter counts its calls."""

    def __init__(self) -> None:
        self.memory = (ctypes.c_int16 * 6)(*range(6))
        self.shape = (ctypes.c_int64 * 2)(2, 3)
        self.strides = (ctypes.c_int64 * 2)(3, 1)
        self.deleted = 0
        self.asked: List[Any] = []
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

    def __dlpack__(self, stream: Any = None) -> object:
        self.asked.append(stream)
        t = DLManagedTensor()
        t.deleter = self._deleter
        t.dl_tensor.data = self.address
        t.dl_tensor.device = DLDevice(1, 0)
        t.dl_tensor.ndim = 2
        t.dl_tensor.dtype = DLDataType(0, 16, 1)
        t.dl_tensor.shape = self.shape
        t.dl_tensor.strides = self.strides
        t.dl_tensor.byte_offset = 0
        self._tensors.append(t)
        cap: object = _api.PyCapsule_New(
            ctypes.addressof(t), _LEGACY_NAME, ctypes.cast(self._destructor, ctypes.c_void_p)
        )
        return cap

    def __dlpack_device__(self) -> Tuple[int, int]:
        return (1, 0)


def consume_legacy(
    cap: object,
) -> Tuple[int, Tuple[int, ...], Tuple[int, ...], Tuple[int, int, int]]:
    """What a legacy-only consumer (JAX, TensorFlow) does with a capsule:
    takes the tensor, reads it, marks the capsule used and, done with the
    memory, calls the tensor's deleter. Returns (data, shape, strides, dtype)."""
    assert capsule_name(cap) == "dltensor"
    ptr = _api.PyCapsule_GetPointer(cap, b"dltensor")
    t = DLManagedTensor.from_address(ptr)
    d = t.dl_tensor
    seen = (
        d.data + d.byte_offset,
        tuple(d.shape[i] for i in range(d.ndim)),
        tuple(d.strides[i] for i in range(d.ndim)),
        (d.dtype.code, d.dtype.bits, d.dtype.lanes),
    )
    assert _api.PyCapsule_SetName(cap, b"used_dltensor") == 0
    t.deleter(ctypes.pointer(t))
    return seen


def read_only_numpy() -> Any:
    a = np.arange(6.0)
    a.flags.writeable = False
    return a


# --- JAX -----------------------------------------------------------------------


@needs_jax
@pytest.mark.parametrize("dtype", ["float32", "int8", "bool", "bfloat16", "complex64"])
def test_jax_to_hurray_to_jax_is_zero_copy(dtype: str) -> None:
    x = jnp.arange(12).reshape(3, 4).astype(dtype)
    buf = hurray.from_dlpack(x)
    assert buf.readonly  # as NumPy takes a legacy capsule
    assert buf.data_ptr == x.unsafe_buffer_pointer()
    routes = {
        "buf": buf,
        "share": buf.share(1)[0],
        "from_dlpack(buf)": hurray.from_dlpack(buf),
        # one of hurray's own legacy capsules, imported again
        "legacy capsule": hurray.from_dlpack(buf.__dlpack__()),
    }
    for name, b in routes.items():
        y = jnp.from_dlpack(b)
        assert y.unsafe_buffer_pointer() == x.unsafe_buffer_pointer(), name
        assert y.dtype == x.dtype and y.shape == x.shape, name
        assert bool(jnp.all(y == x)), name
        # Still read-only for every consumer that can be told so.
        assert b.readonly, name
        if dtype != "bfloat16":  # NumPy's DLPack import has no bfloat16
            assert not np.from_dlpack(b).flags.writeable, name
            assert memoryview(b).readonly, name
        cap = b.__dlpack__(max_version=(1, 0))
        assert versioned_tensor_of(cap).flags & READ_ONLY, name


@needs_jax
def test_jax_round_trip_keeps_jax_array_unchanged_and_released() -> None:
    x = jnp.arange(6.0)
    buf = hurray.from_dlpack(x)
    y = jnp.from_dlpack(buf)
    buf.release()
    del buf
    gc.collect()
    assert y.tolist() == x.tolist() == list(range(6))
    # NumPy still gets a read-only view of both.
    assert not np.from_dlpack(hurray.from_dlpack(y)).flags.writeable


# --- a fake legacy-only producer ---------------------------------------------


def test_legacy_producer_goes_on_legacy_zero_copy_and_is_released_once() -> None:
    p = LegacyProducer()
    buf = hurray.from_dlpack(p)
    assert p.asked == [None]  # asked again without the 1.0 keywords
    assert buf.readonly and buf.data_ptr == p.address
    assert buf.shape == (2, 3) and buf.strides == (3, 1) and buf.dtype == "int16"
    shares = buf.share(2)
    seen = [consume_legacy(b.__dlpack__()) for b in [buf, *shares, hurray.from_dlpack(buf)]]
    assert seen == [(p.address, (2, 3), (3, 1), (0, 16, 1))] * 4
    # Consumers that can be told get READ_ONLY; NumPy makes it read-only.
    assert versioned_tensor_of(buf.__dlpack__(max_version=(1, 3))).flags & READ_ONLY
    assert not np.from_dlpack(buf).flags.writeable
    with pytest.raises(ValueError, match="read-only"):
        np.from_dlpack(shares[0])[0, 0] = 7
    assert memoryview(buf).readonly
    assert list(p.memory) == list(range(6))
    assert p.deleted == 0
    del buf, shares
    gc.collect()
    assert p.deleted == 1


def test_raw_legacy_capsule_goes_on_legacy() -> None:
    p = LegacyProducer()
    buf = hurray.from_dlpack(p.__dlpack__())
    assert buf.readonly
    assert consume_legacy(buf.__dlpack__())[0] == p.address
    del buf
    gc.collect()
    assert p.deleted == 1


def test_legacy_import_copied_is_writable_and_known() -> None:
    p = LegacyProducer()
    c = hurray.from_dlpack(p, copy=True)
    assert c.is_copied and not c.readonly and c.data_ptr != p.address
    np.from_dlpack(c)[0, 0] = 9  # the private copy, not the producer's memory
    assert p.memory[0] == 0


# --- what is known to be read-only stays so ----------------------------------


def read_only_routes() -> List[Tuple[str, Callable[[], hurray.Buffer]]]:
    """Buffers of a read-only NumPy array by every route hurray offers."""

    def base() -> hurray.Buffer:
        return hurray.from_dlpack(read_only_numpy())

    return [
        ("from_dlpack", base),
        (
            "versioned capsule",
            lambda: hurray.from_dlpack(read_only_numpy().__dlpack__(max_version=(1, 0))),
        ),
        ("share", lambda: base().share(1)[0]),
        ("from_dlpack(buf)", lambda: hurray.from_dlpack(base())),
        (
            "via own versioned capsule",
            lambda: hurray.from_dlpack(base().__dlpack__(max_version=(1, 3))),
        ),
        ("from_dlpack(buf, copy=False)", lambda: hurray.from_dlpack(base(), copy=False)),
    ]


@pytest.mark.parametrize(
    "make", [m for _, m in read_only_routes()], ids=[n for n, _ in read_only_routes()]
)
def test_read_only_numpy_stays_read_only_on_every_route(make: Callable[[], hurray.Buffer]) -> None:
    b = make()
    assert b.readonly
    for x in [b, *b.share(1)]:
        with pytest.raises(BufferError, match="read-only"):
            x.__dlpack__()
        with pytest.raises(BufferError, match="read-only"):
            x.__dlpack__(max_version=None, copy=False)
        assert versioned_tensor_of(x.__dlpack__(max_version=(1, 0))).flags & READ_ONLY
        out = np.from_dlpack(x)
        assert not out.flags.writeable
        with pytest.raises(ValueError):
            out[0] = 1.0
        assert memoryview(x).readonly
        with pytest.raises(TypeError):
            (ctypes.c_char * 48).from_buffer(x)  # asks for a writable buffer
        assert np.asarray(x).flags.writeable is False
        # copy=True: a private copy, writable, the source untouched.
        c = x.__dlpack__(copy=True)
        assert capsule_name(c) == "dltensor"
    if jax is not None:
        with pytest.raises(BufferError, match="read-only"):
            jnp.from_dlpack(b)


def test_numpy_refuses_the_same_legacy_export() -> None:
    """The NumPy behaviour hurray matches for known read-only memory."""
    with pytest.raises(BufferError):
        read_only_numpy().__dlpack__()
