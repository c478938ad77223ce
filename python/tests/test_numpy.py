# SPDX-License-Identifier: Apache-2.0
"""NumPy <-> hurray, both directions, versioned and legacy DLPack."""

from typing import Any, Callable, List, Tuple, Type

import numpy as np
import pytest

import hurray

from conftest import capsule_name, versioned_tensor_of

# Every dtype NumPy exports through DLPack, with hurray's name for it.
DTYPES = [
    (np.bool_, "bool"),
    (np.int8, "int8"),
    (np.int16, "int16"),
    (np.int32, "int32"),
    (np.int64, "int64"),
    (np.uint8, "uint8"),
    (np.uint16, "uint16"),
    (np.uint32, "uint32"),
    (np.uint64, "uint64"),
    (np.float16, "float16"),
    (np.float32, "float32"),
    (np.float64, "float64"),
    (np.complex64, "complex64"),
    (np.complex128, "complex128"),
]


class LegacyOnly:
    """A producer that only speaks the pre-1.0 protocol: __dlpack__(stream=None)
    raises TypeError on max_version and returns a 'dltensor' capsule."""

    def __init__(self, obj: Any) -> None:
        self.obj = obj
        self.calls = 0

    def __dlpack__(self, stream: Any = None) -> Any:
        self.calls += 1
        return self.obj.__dlpack__(stream=stream)

    def __dlpack_device__(self) -> Any:
        return self.obj.__dlpack_device__()


class LegacyView:
    """Hands a consumer (NumPy) the legacy capsule of a hurray.Buffer,
    whatever the consumer asks for."""

    def __init__(self, buf: hurray.Buffer) -> None:
        self.buf = buf

    def __dlpack__(self, **kwargs: Any) -> Any:
        return self.buf.__dlpack__()

    def __dlpack_device__(self) -> Any:
        return self.buf.__dlpack_device__()


def elem_strides(a: Any) -> Tuple[int, ...]:
    return tuple(s // a.itemsize for s in a.strides)


def sample(dtype: Any, shape: Tuple[int, ...] = (2, 3, 4)) -> Any:
    n = int(np.prod(shape))
    if dtype is np.bool_:
        return (np.arange(n) % 3 == 0).reshape(shape)
    return np.arange(n).astype(dtype).reshape(shape)


def to_hurray(a: Any, protocol: str) -> hurray.Buffer:
    if protocol == "versioned":
        return hurray.from_dlpack(a)
    if protocol == "legacy-object":
        return hurray.from_dlpack(LegacyOnly(a))
    cap = a.__dlpack__()  # legacy capsule from NumPy itself
    assert capsule_name(cap) == "dltensor"
    return hurray.from_dlpack(cap)


def to_numpy(buf: hurray.Buffer, protocol: str) -> Any:
    if protocol == "versioned":
        return np.from_dlpack(buf)
    return np.from_dlpack(LegacyView(buf))


def writable_view(buf: hurray.Buffer, out: Any) -> Any:
    """NumPy marks every array it imports from a legacy capsule read-only
    (the legacy struct cannot say whether writing is allowed); write through
    a versioned view of the same buffer then."""
    if out.flags.writeable:
        return out
    view = np.from_dlpack(buf)
    assert view.ctypes.data == out.ctypes.data
    return view


def check_same(a: Any, out: Any) -> None:
    assert out.ctypes.data == a.ctypes.data
    assert out.shape == a.shape
    assert out.strides == a.strides
    assert out.dtype == a.dtype
    np.testing.assert_array_equal(out, a)


PROTOCOLS = ["versioned", "legacy-object", "legacy-capsule"]


@pytest.mark.parametrize("dtype,name", DTYPES, ids=[n for _, n in DTYPES])
@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_every_dtype_round_trips_zero_copy(dtype: Any, name: str, protocol: str) -> None:
    a = sample(dtype)
    buf = to_hurray(a, protocol)
    assert buf.dtype == name
    assert buf.shape == a.shape
    assert buf.strides == elem_strides(a)
    assert buf.data_ptr == a.ctypes.data
    assert buf.nbytes == a.nbytes
    assert buf.size == a.size
    assert buf.ndim == a.ndim
    assert buf.device == (1, 0) == buf.__dlpack_device__()
    # A legacy capsule cannot say whether writing is allowed: like NumPy,
    # hurray takes it as read-only.
    assert buf.readonly is (protocol != "versioned")
    out = np.from_dlpack(buf)
    check_same(a, out)
    assert out.flags.writeable is (protocol == "versioned")
    # The legacy export direction, from a writable Buffer on the same memory.
    legacy_out = to_numpy(hurray.from_dlpack(a), "legacy")
    check_same(a, legacy_out)
    writer = out if out.flags.writeable else a
    # Writes go through both ways.
    one = np.ones((), dtype=dtype)
    writer[1, 2, 3] = one
    assert a[1, 2, 3] == one and out[1, 2, 3] == one
    zero = np.zeros((), dtype=dtype)
    a[0, 1, 2] = zero
    assert out[0, 1, 2] == zero


@pytest.mark.parametrize("protocol", ["versioned", "legacy"])
@pytest.mark.parametrize(
    "make",
    [
        pytest.param(lambda: np.array(3.5, dtype=np.float64), id="0-d"),
        pytest.param(lambda: np.zeros((0, 3), dtype=np.float32), id="empty-0x3"),
        pytest.param(lambda: np.zeros((4, 0, 2), dtype=np.int16), id="empty-4x0x2"),
        pytest.param(lambda: np.arange(12, dtype=np.int32).reshape(3, 4).T, id="transposed"),
        pytest.param(lambda: np.arange(10, dtype=np.float64)[::-1], id="negative-step"),
        pytest.param(
            lambda: np.arange(24, dtype=np.int64).reshape(4, 6)[1:, ::-2], id="offset-negative-step"
        ),
        pytest.param(
            lambda: np.arange(24, dtype=np.uint8).reshape(2, 3, 4)[:, ::2, 1:3], id="sliced"
        ),
        pytest.param(
            lambda: np.lib.stride_tricks.as_strided(
                np.arange(3, dtype=np.float32), shape=(4, 3), strides=(0, 4)
            ),
            id="broadcast-writable",
        ),
    ],
)
def test_layouts_keep_shape_strides_and_address(make: Callable[[], Any], protocol: str) -> None:
    a = make()
    buf = hurray.from_dlpack(a) if protocol == "versioned" else hurray.from_dlpack(a.__dlpack__())
    assert buf.shape == a.shape
    assert buf.strides == elem_strides(a)
    assert buf.data_ptr == a.ctypes.data
    assert buf.readonly is (protocol == "legacy" or not a.flags.writeable)
    out = to_numpy(buf if not buf.readonly else hurray.from_dlpack(a), protocol)
    check_same(a, out)
    if a.size:
        idx = (0,) * a.ndim
        writable_view(hurray.from_dlpack(a), out)[idx] = 7
        assert a[idx] == 7 and out[idx] == 7


def test_broadcast_view_stride_zero_is_read_only() -> None:
    base = np.arange(3, dtype=np.float32)
    a = np.broadcast_to(base, (4, 3))  # read-only, stride 0 on axis 0
    buf = hurray.from_dlpack(a)
    assert buf.strides == (0, 1)
    assert buf.readonly
    out = np.from_dlpack(buf)
    check_same(a, out)
    assert not out.flags.writeable
    base[1] = 9
    assert (out[:, 1] == 9).all()


def test_read_only_array_comes_back_read_only() -> None:
    a = np.arange(6, dtype=np.float64)
    a.flags.writeable = False
    buf = hurray.from_dlpack(a)
    assert buf.readonly is True
    cap = buf.__dlpack__(max_version=(1, 3))
    assert capsule_name(cap) == "dltensor_versioned"
    assert versioned_tensor_of(cap).flags & 1  # READ_ONLY
    out = np.from_dlpack(buf)
    assert out.ctypes.data == a.ctypes.data
    assert not out.flags.writeable
    with pytest.raises(ValueError):
        out[0] = 1
    # The legacy struct cannot carry the flag: refused rather than made writable.
    with pytest.raises(BufferError, match="read-only"):
        buf.__dlpack__()
    # ... unless a private copy is asked for.
    cap = buf.__dlpack__(copy=True)
    assert capsule_name(cap) == "dltensor"


def test_numpy_legacy_export_of_read_only_is_refused_by_numpy_itself() -> None:
    a = np.arange(3.0)
    a.flags.writeable = False
    with pytest.raises(BufferError):
        a.__dlpack__()


def test_versioned_and_legacy_capsule_names() -> None:
    buf = hurray.from_dlpack(np.arange(4.0))
    assert capsule_name(buf.__dlpack__()) == "dltensor"
    assert capsule_name(buf.__dlpack__(max_version=None)) == "dltensor"
    assert capsule_name(buf.__dlpack__(max_version=(0, 8))) == "dltensor"
    assert capsule_name(buf.__dlpack__(max_version=(1, 0))) == "dltensor_versioned"
    assert capsule_name(buf.__dlpack__(max_version=(1, 3))) == "dltensor_versioned"
    # A newer major than we know: we answer with the newest we have (1.3).
    cap = buf.__dlpack__(max_version=(2, 0))
    assert capsule_name(cap) == "dltensor_versioned"
    t = versioned_tensor_of(cap)
    assert (t.version.major, t.version.minor) == (1, 3)
    assert t.flags == 0


def test_our_capsule_imported_back_is_renamed_and_unwrapped() -> None:
    a = np.arange(4.0)
    buf = hurray.from_dlpack(a)
    cap = buf.__dlpack__(max_version=(1, 3))
    b2 = hurray.from_dlpack(cap)
    assert capsule_name(cap) == "used_dltensor_versioned"
    assert b2.data_ptr == buf.data_ptr == a.ctypes.data


def test_copy_true_makes_a_private_writable_copy() -> None:
    a = np.arange(12, dtype=np.float32).reshape(3, 4)[:, ::-1]
    a.flags.writeable = False
    buf = hurray.from_dlpack(a, copy=True)
    assert buf.data_ptr != a.ctypes.data
    assert buf.is_copied and not buf.readonly
    out = np.from_dlpack(buf)
    np.testing.assert_array_equal(out, a)
    assert out.flags.c_contiguous and out.flags.writeable
    out[0, 0] = -1
    assert a[0, 0] != -1


def test_export_copy_true_sets_is_copied() -> None:
    a = np.arange(6, dtype=np.int32).reshape(2, 3).T
    buf = hurray.from_dlpack(a)
    cap = buf.__dlpack__(max_version=(1, 3), copy=True)
    t = versioned_tensor_of(cap)
    assert t.flags & 2  # IS_COPIED
    assert t.dl_tensor.data != a.ctypes.data
    out = np.from_dlpack(buf, copy=True)
    assert out.ctypes.data != a.ctypes.data
    np.testing.assert_array_equal(out, a)


def test_copy_false_is_zero_copy_and_refuses_a_device_change() -> None:
    a = np.arange(5.0)
    buf = hurray.from_dlpack(a, copy=False)
    assert buf.data_ptr == a.ctypes.data
    out = np.from_dlpack(buf, copy=False)
    assert out.ctypes.data == a.ctypes.data
    with pytest.raises(BufferError, match="copy=False"):
        buf.__dlpack__(max_version=(1, 3), dl_device=(2, 0), copy=False)


def test_dl_device() -> None:
    a = np.arange(5.0)
    buf = hurray.from_dlpack(a)
    cap = buf.__dlpack__(max_version=(1, 3), dl_device=(1, 0))
    assert versioned_tensor_of(cap).dl_tensor.data == a.ctypes.data
    # CPU -> CUDA needs a copy: made by libhurray where a CUDA driver is
    # present, else refused with libhurray's own message.
    try:
        cap = buf.__dlpack__(max_version=(1, 3), dl_device=(2, 0))
    except BufferError as e:
        assert "HURRAY_ERR_UNSUPPORTED_DEVICE" in str(e)
    else:
        t = versioned_tensor_of(cap)
        assert (t.dl_tensor.device.device_type, t.dl_tensor.device.device_id) == (2, 0)
        assert t.flags & 2
    np.testing.assert_array_equal(np.from_dlpack(buf, device="cpu"), a)
    with pytest.raises(TypeError):
        buf.__dlpack__(dl_device=1)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        buf.__dlpack__(dl_device=(1, 0, 0))  # type: ignore[arg-type]


def test_from_dlpack_device_argument() -> None:
    a = np.arange(5.0)
    assert hurray.from_dlpack(a, device=(1, 0)).data_ptr == a.ctypes.data
    assert hurray.from_dlpack(a, device="cpu").data_ptr == a.ctypes.data
    # NumPy cannot export to CUDA, so hurray takes the array on the CPU and
    # copies it itself: done where a CUDA driver is present, else refused
    # with libhurray's message (never NumPy's "unsupported device requested").
    try:
        g = hurray.from_dlpack(a, device=(2, 0))
    except BufferError as e:
        assert str(e).startswith("hurray.from_dlpack (copy): "), str(e)
        assert "HURRAY_ERR_UNSUPPORTED_DEVICE" in str(e), str(e)
    else:
        assert g.device == (2, 0) and g.is_copied
    # Legacy producers cannot be asked: hurray does the copy / the refusal.
    with pytest.raises(BufferError):
        hurray.from_dlpack(a.__dlpack__(), device=(2, 0), copy=False)
    c = hurray.from_dlpack(LegacyOnly(a), copy=True)
    assert c.data_ptr != a.ctypes.data and c.is_copied


class OwnDeviceOnly:
    """A DLPack 1.x producer that exports only on its own device (the CPU):
    any dl_device keyword is refused, as NumPy does for non-CPU devices.
    Records the keywords of every __dlpack__ call."""

    def __init__(
        self, obj: Any, exc: Type[BaseException] = BufferError, has_device: bool = True
    ) -> None:
        self.obj, self.exc = obj, exc
        self.calls: List[Any] = []
        if has_device:
            self.__dlpack_device__ = obj.__dlpack_device__

    def __dlpack__(self, **kw: Any) -> Any:
        self.calls.append(kw)
        if "dl_device" in kw:
            raise self.exc("only my own device")
        return self.obj.__dlpack__(**kw)


@pytest.mark.parametrize("exc", [BufferError, NotImplementedError])
def test_from_dlpack_same_device_does_not_ask_for_dl_device(exc: Type[BaseException]) -> None:
    a = np.arange(5.0)
    p = OwnDeviceOnly(a, exc)
    for dev in ((1, 0), "cpu"):
        assert hurray.from_dlpack(p, device=dev).data_ptr == a.ctypes.data
        assert hurray.from_dlpack(p, device=dev, copy=False).data_ptr == a.ctypes.data
        c = hurray.from_dlpack(p, device=dev, copy=True)
        assert c.is_copied and c.data_ptr != a.ctypes.data
        np.testing.assert_array_equal(np.from_dlpack(c), a)
    assert not any("dl_device" in kw for kw in p.calls), p.calls


@pytest.mark.parametrize("exc", [BufferError, NotImplementedError])
def test_from_dlpack_retries_without_dl_device_when_refused(exc: Type[BaseException]) -> None:
    # No __dlpack_device__: hurray asks for the device first, and on refusal
    # takes the tensor where it is and copies it itself.
    a = np.arange(5.0)
    p = OwnDeviceOnly(a, exc, has_device=False)
    assert hurray.from_dlpack(p, device=(1, 0)).data_ptr == a.ctypes.data
    assert p.calls == [dict(max_version=(1, 3), dl_device=(1, 0)), dict(max_version=(1, 3))]
    p.calls.clear()
    c = hurray.from_dlpack(p, device="cpu", copy=True)
    assert c.is_copied and c.data_ptr != a.ctypes.data
    # The retry does not ask for copy=True: the producer's copy would be a
    # second one whenever hurray has to cross devices anyway.
    assert p.calls == [
        dict(max_version=(1, 3), dl_device=(1, 0), copy=True),
        dict(max_version=(1, 3)),
    ]
    p.calls.clear()
    assert hurray.from_dlpack(p, device="cpu", copy=False).data_ptr == a.ctypes.data
    assert p.calls[-1] == dict(max_version=(1, 3), copy=False)


def test_from_dlpack_other_device_copy_false_is_refused_without_asking() -> None:
    a = np.arange(5.0)
    p = OwnDeviceOnly(a)
    with pytest.raises(BufferError, match="copy=False") as info:
        hurray.from_dlpack(p, device=(2, 0), copy=False)
    assert "(1, 0)" in str(info.value) and "(2, 0)" in str(info.value)
    assert p.calls == []
    with pytest.raises(BufferError, match="copy=False"):
        hurray.from_dlpack(a, device=(2, 0), copy=False)


def test_from_dlpack_other_device_errors_of_the_producer_and_of_dlpack_device() -> None:
    class Broken:
        def __dlpack__(self, **kw: Any) -> Any:
            raise BufferError("first") if "dl_device" in kw else RuntimeError("second")

        def __dlpack_device__(self) -> Any:
            return (1, 0)

    # The retry's own failure is what the caller sees.
    with pytest.raises(RuntimeError, match="second"):
        hurray.from_dlpack(Broken(), device=(2, 0))

    class BadDevice(OwnDeviceOnly):
        def __init__(self, result: Any) -> None:
            super().__init__(np.arange(3.0), has_device=False)
            self.result = result

        def __dlpack_device__(self) -> Any:
            if isinstance(self.result, Exception):
                raise self.result
            return self.result

    with pytest.raises(KeyError, match="inner"):
        hurray.from_dlpack(BadDevice(KeyError("inner")), device="cpu")
    with pytest.raises(TypeError, match="__dlpack_device__"):
        hurray.from_dlpack(BadDevice("cuda"), device="cpu")
    with pytest.raises(ValueError, match="__dlpack_device__"):
        hurray.from_dlpack(BadDevice((1, 0, 0)), device="cpu")


def test_stream_rules_for_cpu() -> None:
    buf = hurray.from_dlpack(np.arange(3.0))
    buf.__dlpack__(stream=None)
    buf.__dlpack__(None)  # older callers pass it positionally
    # The CPU has no streams: the DLPack specification accepts only None
    # there, and NumPy refuses everything else, -1 included.
    for bad in (-1, 0, 1, 2, 7, np.int64(-1)):
        with pytest.raises(ValueError, match="stream"):
            buf.__dlpack__(stream=bad)
    with pytest.raises(TypeError):
        buf.__dlpack__(stream="default")  # type: ignore[arg-type]


def test_dlpack_argument_errors() -> None:
    buf = hurray.from_dlpack(np.arange(3.0))
    with pytest.raises(TypeError):
        buf.__dlpack__(max_version=1)  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        buf.__dlpack__(max_version=(1,))  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        buf.__dlpack__(foo=1)  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        buf.__dlpack__(None, None)  # type: ignore[call-arg]
    with pytest.raises(TypeError):
        buf.__dlpack__(None, stream=None)  # type: ignore[misc]


def test_legacy_producer_fallback() -> None:
    a = np.arange(6, dtype=np.int16)
    producer = LegacyOnly(a)
    buf = hurray.from_dlpack(producer)
    assert producer.calls == 1  # max_version rejected by the signature, retried once
    assert buf.data_ptr == a.ctypes.data


def test_raw_capsules_and_used_capsules() -> None:
    a = np.arange(6, dtype=np.int16)
    cap = a.__dlpack__(max_version=(1, 3))
    assert capsule_name(cap) == "dltensor_versioned"
    buf = hurray.from_dlpack(cap)
    assert capsule_name(cap) == "used_dltensor_versioned"
    assert buf.data_ptr == a.ctypes.data
    with pytest.raises(ValueError, match="already consumed"):
        hurray.from_dlpack(cap)
    legacy = a.__dlpack__()
    hurray.from_dlpack(legacy)
    assert capsule_name(legacy) == "used_dltensor"
    with pytest.raises(ValueError, match="already consumed"):
        hurray.from_dlpack(legacy)


def test_share_fan_out() -> None:
    a = np.arange(8, dtype=np.float32)
    buf = hurray.from_dlpack(a)
    parts = buf.share(3)
    assert isinstance(parts, list) and len(parts) == 3
    views = [np.from_dlpack(p) for p in parts + [buf]]
    assert {v.ctypes.data for v in views} == {a.ctypes.data}
    views[0][0] = 100
    assert all(v[0] == 100 for v in views)
    big = buf.share(50)
    assert len(big) == 50 and all(b.data_ptr == a.ctypes.data for b in big)
    with pytest.raises(ValueError):
        buf.share(0)
    with pytest.raises(ValueError):
        buf.share(-2)
    with pytest.raises(TypeError):
        buf.share("2")  # type: ignore[arg-type]


def test_release_context_manager_and_released_errors() -> None:
    a = np.arange(4.0)
    with hurray.from_dlpack(a) as buf:
        assert buf.shape == (4,)
        assert not buf.released
    assert buf.released
    assert repr(buf) == "<hurray.Buffer (released)>"
    buf.release()  # idempotent
    for attr in ("shape", "strides", "dtype", "device", "readonly", "data_ptr", "nbytes", "ndim"):
        with pytest.raises(ValueError, match="released"):
            getattr(buf, attr)
    with pytest.raises(ValueError, match="released"):
        buf.__dlpack__()
    with pytest.raises(ValueError, match="released"):
        buf.__dlpack_device__()
    with pytest.raises(ValueError, match="released"):
        buf.share(1)
    with pytest.raises(ValueError, match="released"):
        np.from_dlpack(buf)
    with pytest.raises(ValueError, match="released"):
        hurray.from_dlpack(buf)
    with pytest.raises(ValueError, match="released"):
        with buf:
            pass


def test_buffer_from_buffer_shares() -> None:
    a = np.arange(4.0)
    b = hurray.from_dlpack(a)
    c = hurray.from_dlpack(b)
    assert c.data_ptr == b.data_ptr == a.ctypes.data
    d = hurray.from_dlpack(b, copy=True)
    assert d.data_ptr != a.ctypes.data and d.is_copied


def test_repr_and_empty() -> None:
    b = hurray.empty((2, 3), "bfloat16")
    assert repr(b) == "<hurray.Buffer bfloat16[2, 3] cpu:0>"
    assert b.dtype == "bfloat16" and b.nbytes == 12 and b.data_ptr % 64 == 0
    assert hurray.empty(4, "float8_e4m3fn").dtype == "float8_e4m3fn"
    assert hurray.empty((), "float64").shape == ()
    assert hurray.empty(3, "float32x4").dtype == "float32x4"
    assert hurray.empty(5, "float4_e2m1fn").nbytes == 3  # packed: 5 x 4 bits
    out = np.from_dlpack(hurray.empty((3, 2), "int64"))
    assert out.shape == (3, 2) and out.dtype == np.int64
    with pytest.raises(ValueError, match="unknown dtype"):
        hurray.empty(3, "float31x")
    # What NumPy accepts for a dtype is accepted too.
    assert hurray.empty(3, np.float32).dtype == "float32"
    assert hurray.empty(3, np.dtype("<i8")).dtype == "int64"
    assert hurray.empty(3, "f2").dtype == "float16"
    with pytest.raises(ValueError, match="no DLPack equivalent"):
        hurray.empty(3, np.dtype("U3"))
    with pytest.raises(TypeError, match="dtype"):
        hurray.empty(3, 1.5)


def test_buffer_cannot_be_constructed_directly() -> None:
    with pytest.raises(TypeError):
        hurray.Buffer()
