# SPDX-License-Identifier: Apache-2.0
"""The DLPack 1.3 C exchange API on both sides (docs/impl/python.md §7).

Producer: hurray.Buffer.__dlpack_c_exchange_api__, called directly through
ctypes (as a C consumer would, GIL held: ctypes.PYFUNCTYPE) and by tvm_ffi,
whose from_dlpack and function calls use a producer's table. Consumer:
hurray.from_dlpack on torch tensors (torch.Tensor has a table), tvm_ffi's
DLTensorTestWrapper (has one) and tvm_ffi.Tensor (has none). The private
hurray._native._exchange_api_stats() counts calls into the Buffer's table
and which path from_dlpack took, so each test shows the path it means.
"""

import ctypes
import pathlib
import re
from typing import Any, Dict, Tuple, Type

import pytest

import hurray
from hurray import _native

from conftest import CountingProducer, _api, versioned_tensor_of
from dlpack_ctypes import (
    ALLOCATOR,
    DLTENSOR_FROM_PY,
    FROM_PY,
    READ_ONLY,
    SET_ERROR,
    TO_PY,
    WORK_STREAM,
    DLManagedTensorVersioned,
    DLTensor,
    ExchangeAPI,
)

REPO = pathlib.Path(__file__).resolve().parents[2]

try:
    import torch
except ImportError as e:  # pragma: no cover - depends on the environment
    torch = None  # type: ignore[assignment]
    _torch_reason = f"torch cannot be imported: {e}"
try:
    import tvm_ffi
except ImportError as e:  # pragma: no cover
    tvm_ffi = None  # type: ignore[assignment]
    _tvm_reason = f"tvm_ffi cannot be imported: {e}"

needs_torch = pytest.mark.skipif(torch is None, reason=globals().get("_torch_reason", ""))
needs_tvm = pytest.mark.skipif(tvm_ffi is None, reason=globals().get("_tvm_reason", ""))

# --- the table, seen from C ------------------------------------------------


def table_of(cls: type) -> ExchangeAPI:
    cap = (
        cls.__dict__["__dlpack_c_exchange_api__"]
        if "__dlpack_c_exchange_api__" in cls.__dict__
        else getattr(cls, "__dlpack_c_exchange_api__")  # noqa: B009 (mypy does not know it)
    )
    ptr = _api.PyCapsule_GetPointer(cap, b"dlpack_exchange_api")
    return ExchangeAPI.from_address(ptr)


API = table_of(hurray.Buffer)
from_py = FROM_PY(API.managed_tensor_from_py_object_no_sync)
to_py = TO_PY(API.managed_tensor_to_py_object_no_sync)
dltensor_from_py = DLTENSOR_FROM_PY(API.dltensor_from_py_object_no_sync)
work_stream = WORK_STREAM(API.current_work_stream)
allocator = ALLOCATOR(API.managed_tensor_allocator)
_api.Py_DecRef.argtypes = [ctypes.c_void_p]


def stats() -> Dict[str, int]:
    return dict(_native._exchange_api_stats())


def delta(before: Dict[str, int]) -> Dict[str, int]:
    now = stats()
    return {k: now[k] - before[k] for k in now if now[k] != before[k]}


def export(buf: object) -> DLManagedTensorVersioned:
    out = ctypes.POINTER(DLManagedTensorVersioned)()
    assert from_py(buf, ctypes.byref(out)) == 0
    return out.contents


def take_tensor(cap: object) -> DLManagedTensorVersioned:
    """Takes the tensor out of an unused versioned capsule, as a consumer."""
    t = versioned_tensor_of(cap)
    _api.PyCapsule_SetName.argtypes = [ctypes.py_object, ctypes.c_char_p]
    _api.PyCapsule_SetName(cap, b"used_dltensor_versioned")
    return t


class CapsuleOnly:
    """Hides a producer's table: only __dlpack__/__dlpack_device__ remain."""

    def __init__(self, x: Any) -> None:
        self.x = x

    def __dlpack__(self, **kw: Any) -> Any:
        return self.x.__dlpack__(**kw)

    def __dlpack_device__(self) -> Any:
        return self.x.__dlpack_device__()


# --- producer ------------------------------------------------------------


def test_buffer_type_publishes_a_static_table() -> None:
    cap = hurray.Buffer.__dict__["__dlpack_c_exchange_api__"]
    assert type(cap).__name__ == "PyCapsule"
    assert _api.PyCapsule_GetName(cap) == b"dlpack_exchange_api"
    assert (API.header.major, API.header.minor) == (1, 3)
    assert API.header.prev_api is None
    for name, *_ in ExchangeAPI._fields_[1:]:
        assert getattr(API, name), name
    # One table for the process: every lookup gives the same pointer.
    assert ctypes.addressof(table_of(hurray.Buffer)) == ctypes.addressof(API)
    assert hurray.empty(1).__dlpack_c_exchange_api__ is cap


def test_from_py_object_shares(counting_producer: Type[CountingProducer]) -> None:
    # (A read-only Buffer is refused: test_exchange_refusals.py.)
    p = counting_producer(flags=0)
    buf = hurray.from_dlpack(p.capsule())
    before = stats()
    t = export(buf)
    assert delta(before) == {"managed_tensor_from_py_object_no_sync": 1}
    assert (t.version.major, t.version.minor) == (1, 3)
    assert not t.flags & READ_ONLY
    assert t.dl_tensor.data + t.dl_tensor.byte_offset == p.address
    assert t.dl_tensor.shape[0] == 8 and t.dl_tensor.strides[0] == 1
    assert (t.dl_tensor.dtype.code, t.dl_tensor.dtype.bits) == (2, 64)
    assert not buf.released and buf.data_ptr == p.address  # the Buffer stays usable
    buf.release()
    assert p.deleted == 0  # the exported tensor still holds a reference
    t.deleter(ctypes.pointer(t))
    assert p.deleted == 1


def test_from_py_object_errors_set_an_exception() -> None:
    with pytest.raises(TypeError, match="expected a hurray.Buffer"):
        export(object())
    b = hurray.empty(2)
    b.release()
    with pytest.raises(ValueError, match="released"):
        export(b)


def test_to_py_object_takes_ownership_on_success_only(
    counting_producer: Type[CountingProducer],
) -> None:
    p = counting_producer()
    t = take_tensor(p.capsule())
    out = ctypes.c_void_p()
    before = stats()
    assert to_py(ctypes.pointer(t), ctypes.byref(out)) == 0
    assert delta(before) == {"managed_tensor_to_py_object_no_sync": 1}
    buf = ctypes.cast(out, ctypes.py_object).value  # a new reference of its own
    _api.Py_DecRef(out)
    assert isinstance(buf, hurray.Buffer) and buf.data_ptr == p.address and buf.shape == (8,)
    assert p.deleted == 0
    del buf
    assert p.deleted == 1

    bad = take_tensor(counting_producer(version=(2, 0)).capsule())
    with pytest.raises(BufferError, match="version 2.0"):
        to_py(ctypes.pointer(bad), ctypes.byref(out))
    assert p.deleted == 1  # nothing deleted: the caller still owns `bad`


def test_dltensor_view_is_borrowed() -> None:
    a = hurray.empty((2, 3), dtype="int16")
    v = DLTensor()
    assert dltensor_from_py(a, ctypes.byref(v)) == 0
    assert v.data + v.byte_offset == a.data_ptr
    assert (v.device.device_type, v.device.device_id) == (1, 0)
    assert v.ndim == 2 and [v.shape[i] for i in range(2)] == [2, 3]
    assert [v.strides[i] for i in range(2)] == [3, 1]
    assert (v.dtype.code, v.dtype.bits, v.dtype.lanes) == (0, 16, 1)
    with pytest.raises(TypeError):
        dltensor_from_py(3, ctypes.byref(v))


@pytest.mark.parametrize("device", [(1, 0), (2, 0), (2, 1), (10, 0)])
def test_current_work_stream_is_the_default_stream(device: Tuple[int, int]) -> None:
    s = ctypes.c_void_p(1234)
    assert work_stream(*device, ctypes.byref(s)) == 0
    assert s.value is None


def test_allocator_allocates_and_reports_through_set_error() -> None:
    errors = []
    set_error = SET_ERROR(lambda ctx, kind, msg: errors.append((ctx, kind, msg)))
    shape = (ctypes.c_int64 * 2)(4, 5)
    proto = DLTensor()
    proto.device.device_type, proto.device.device_id = 1, 0
    proto.ndim, proto.shape = 2, shape
    proto.dtype.code, proto.dtype.bits, proto.dtype.lanes = 2, 32, 1
    out = ctypes.POINTER(DLManagedTensorVersioned)()
    assert allocator(ctypes.byref(proto), ctypes.byref(out), None, set_error) == 0
    assert errors == []
    t = out.contents
    assert [t.dl_tensor.shape[i] for i in range(2)] == [4, 5]
    assert [t.dl_tensor.strides[i] for i in range(2)] == [5, 1]
    assert (t.dl_tensor.data + t.dl_tensor.byte_offset) % 64 == 0
    ctypes.memset(t.dl_tensor.data + t.dl_tensor.byte_offset, 0, 80)  # writable, 80 bytes
    buf = hurray.from_dlpack(_api.PyCapsule_New(ctypes.addressof(t), b"dltensor_versioned", None))
    assert buf.shape == (4, 5) and not buf.readonly

    shape[1] = -5
    assert allocator(ctypes.byref(proto), ctypes.byref(out), 7, set_error) == -1
    assert len(errors) == 1 and errors[0][0] == 7 and errors[0][1] == b"ValueError"
    assert b"HURRAY_ERR_INVALID_ARGUMENT" in errors[0][2]
    shape[1] = 5
    proto.device.device_type = 99  # no such device in this build
    assert allocator(ctypes.byref(proto), ctypes.byref(out), None, set_error) == -1
    assert errors[1][1] == b"BufferError" and len(errors) == 2


@needs_tvm
def test_tvm_ffi_from_dlpack_goes_through_the_table(
    counting_producer: Type[CountingProducer],
) -> None:
    p = counting_producer(flags=0)
    buf = hurray.from_dlpack(p.capsule())
    before = stats()
    via_table = tvm_ffi.from_dlpack(buf)
    assert delta(before) == {"managed_tensor_from_py_object_no_sync": 1}
    via_capsule = tvm_ffi.from_dlpack(CapsuleOnly(buf))
    assert delta(before) == {"managed_tensor_from_py_object_no_sync": 1}
    for x in (via_table, via_capsule):
        assert x.data_ptr() == p.address
        assert x.shape == (8,) and x.strides == (1,) and str(x.dtype) == "float64"
    del x
    buf.release()
    del via_capsule
    assert p.deleted == 0
    del via_table
    assert p.deleted == 1  # exactly once, after the last holder


@needs_tvm
def test_tvm_ffi_function_round_trip_uses_both_directions() -> None:
    # A Python callback as a TVM FFI function: the Buffer argument goes in
    # through from_py_object, the tensor it returns comes back as a Buffer
    # through to_py_object (tvm_ffi uses the arguments' table).
    f = tvm_ffi.convert(lambda x: x)
    a = hurray.empty(3)
    before = stats()
    r = f(a)
    assert delta(before) == {
        "managed_tensor_from_py_object_no_sync": 1,
        "managed_tensor_to_py_object_no_sync": 1,
    }
    assert type(r) is hurray.Buffer and r.data_ptr == a.data_ptr and r.shape == (3,)


@needs_torch
def test_torch_from_dlpack_of_a_buffer_gives_the_same_results_either_way(
    counting_producer: Type[CountingProducer],
) -> None:
    # torch.from_dlpack (torch 2.15) calls __dlpack__; it never reads a
    # producer's table. The Buffer's export is the same either way.
    p = counting_producer(flags=0)
    buf = hurray.from_dlpack(p.capsule())
    before = stats()
    t = torch.utils.dlpack.from_dlpack(buf)
    assert delta(before).get("managed_tensor_from_py_object_no_sync", 0) == 0
    assert t.data_ptr() == p.address and t.shape == (8,) and t.stride() == (1,)
    assert t.dtype == torch.float64
    del buf
    assert p.deleted == 0
    del t
    assert p.deleted == 1


# --- consumer ------------------------------------------------------------


@needs_torch
def test_from_dlpack_of_torch_uses_torchs_table() -> None:
    t = torch.arange(12, dtype=torch.float32).reshape(3, 4)[:, 1:]
    before = stats()
    a = hurray.from_dlpack(t)
    assert delta(before) == {"consumer_table": 1}
    b = hurray.from_dlpack(CapsuleOnly(t))
    assert delta(before) == {"consumer_table": 1, "consumer_capsule": 1}
    for x in (a, b):
        assert x.data_ptr == t.data_ptr()
        assert x.shape == (3, 3) and x.strides == (4, 1) and x.dtype == "float32"
        assert x.device == (1, 0) and not x.readonly and not x.is_copied
    del t
    assert list(memoryview_of(a)) == [1.0, 2.0, 3.0]  # torch's storage kept alive


def memoryview_of(buf: Any) -> Any:
    import numpy as np

    return np.from_dlpack(buf)[0]


@needs_torch
def test_read_only_torch_tensor_is_read_only_on_both_paths() -> None:
    from torch.utils.dlpack import ReadOnlyTensorWrapper

    ro = ReadOnlyTensorWrapper(torch.arange(4.0))
    before = stats()
    # The wrapper's __torch_function__ refuses the requires_grad read that
    # torch's table needs: the table call declines and __dlpack__ is asked.
    assert hurray.from_dlpack(ro).readonly
    assert delta(before) == {
        "consumer_table": 1,
        "consumer_capsule": 1,
        "consumer_table_declined": 1,
    }
    assert hurray.from_dlpack(CapsuleOnly(ro)).readonly
    assert delta(before) == {
        "consumer_table": 1,
        "consumer_capsule": 2,
        "consumer_table_declined": 1,
    }


@needs_torch
def test_copy_and_device_keywords_choose_the_path() -> None:
    t = torch.arange(4.0)
    before = stats()
    c = hurray.from_dlpack(t, copy=True)  # the table cannot copy: capsule path
    assert c.is_copied and c.data_ptr != t.data_ptr()
    assert delta(before) == {"consumer_capsule": 1}
    z = hurray.from_dlpack(t, copy=False, device=(1, 0))  # already there: table
    assert z.data_ptr == t.data_ptr() and not z.is_copied
    assert delta(before) == {"consumer_capsule": 1, "consumer_table": 1}
    with pytest.raises(BufferError):  # elsewhere: capsule path, then no driver / no copy
        hurray.from_dlpack(t, device=(2, 0), copy=False)
    assert delta(before) == {"consumer_capsule": 2, "consumer_table": 1}


@needs_torch
def test_producer_errors_propagate() -> None:
    before = stats()
    # torch's table fails (RuntimeError); its __dlpack__ gives the error
    # (test_exchange_refusals.py has each case).
    with pytest.raises(BufferError, match="layout other than torch.strided"):
        hurray.from_dlpack(torch.zeros(2).to_sparse())
    assert delta(before) == {
        "consumer_table": 1,
        "consumer_capsule": 1,
        "consumer_table_declined": 1,
    }

    class Impostor:  # borrows the Buffer's table, which refuses anything else
        __dlpack_c_exchange_api__ = hurray.Buffer.__dlpack_c_exchange_api__

    with pytest.raises(TypeError, match="expected a hurray.Buffer, not Impostor"):
        hurray.from_dlpack(Impostor())


@needs_tvm
def test_tvm_ffi_tensors_with_and_without_a_table() -> None:
    x = tvm_ffi.from_dlpack(hurray.empty(5, dtype="int32"))
    before = stats()
    a = hurray.from_dlpack(tvm_ffi.core.DLTensorTestWrapper(x))  # has a table
    b = hurray.from_dlpack(x)  # tvm_ffi.Tensor has none: __dlpack__
    assert delta(before) == {"consumer_table": 1, "consumer_capsule": 1}
    assert a.data_ptr == b.data_ptr == x.data_ptr() and a.shape == b.shape == (5,)


def _fake_table(major: int) -> Any:
    """A table of an unusable version: the consumer must not call it."""
    t = ExchangeAPI()
    t.header.major, t.header.minor = major, 0
    t.managed_tensor_from_py_object_no_sync = 1  # never called
    return t, _api.PyCapsule_New(ctypes.addressof(t), b"dlpack_exchange_api", None)


def test_other_major_version_or_bad_attribute_falls_back(
    counting_producer: Type[CountingProducer],
) -> None:
    p = counting_producer()
    keep, cap = _fake_table(2)

    class V2:
        __dlpack_c_exchange_api__ = cap

        def __dlpack__(self, **kw: Any) -> Any:
            return p.capsule()

    class NotACapsule(V2):
        __dlpack_c_exchange_api__ = 12345

    before = stats()
    assert hurray.from_dlpack(V2()).data_ptr == p.address
    assert hurray.from_dlpack(NotACapsule()).data_ptr == p.address
    assert delta(before) == {"consumer_capsule": 2}


def test_cache_follows_changes_and_dying_types(counting_producer: Type[CountingProducer]) -> None:
    p = counting_producer()

    # The type's table appears later: seen at once (tp_version_tag changes).
    class Late(CapsuleOnly):
        pass

    src = hurray.from_dlpack(p.capsule())
    before = stats()
    hurray.from_dlpack(Late(src))
    setattr(Late, "__dlpack_c_exchange_api__", hurray.Buffer.__dlpack_c_exchange_api__)  # noqa: B010 (as B009)
    with pytest.raises(TypeError, match="expected a hurray.Buffer"):
        hurray.from_dlpack(Late(src))  # now the (borrowed) table is used
    delattr(Late, "__dlpack_c_exchange_api__")
    hurray.from_dlpack(Late(src))
    assert delta(before) == {
        "consumer_capsule": 2,
        "consumer_table": 1,
        "managed_tensor_from_py_object_no_sync": 1,
    }
    # Many short-lived types, alternating: each is judged by its own attribute
    # even when a new type reuses a dead one's address.
    before = stats()
    for i in range(200):
        ns = {"__dlpack_c_exchange_api__": hurray.Buffer.__dlpack_c_exchange_api__} if i % 2 else {}
        cls = type(f"T{i}", (CapsuleOnly,), ns)
        if i % 2:
            with pytest.raises(TypeError):
                hurray.from_dlpack(cls(src))
        else:
            hurray.from_dlpack(cls(src))
        del cls
    assert delta(before) == {
        "consumer_capsule": 100,
        "consumer_table": 100,
        "managed_tensor_from_py_object_no_sync": 100,
    }


# --- version ---------------------------------------------------------------


def test_version_is_the_cmake_project_version() -> None:
    text = (REPO / "CMakeLists.txt").read_text()
    m = re.search(r"project\(\s*hurray\s+VERSION\s+([0-9.]+)", text)
    assert m is not None
    assert hurray.__version__ == m.group(1) == _native.__version__
    assert "version" not in re.findall(
        r"^(\w+)\s*=", (REPO / "python/pyproject.toml").read_text(), re.M
    )
    from importlib import metadata

    try:
        assert metadata.version("libhurray") == m.group(1)
    except metadata.PackageNotFoundError:  # a plain CMake build on PYTHONPATH
        pass


# --- GPU streams (fake CUDA driver) -------------------------------------------


def test_gpu_tensor_from_a_table_records_its_event_on_the_producers_stream() -> None:
    from test_gpu_fake import FAKE, run

    if FAKE is None:
        pytest.skip("no fake CUDA driver build (see test_gpu_fake.py)")
    run(
        """
        api = ctypes.pythonapi
        api.PyCapsule_GetPointer.restype = ctypes.c_void_p
        api.PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
        api.PyCapsule_New.restype = ctypes.py_object
        api.PyCapsule_New.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
        OUT = ctypes.POINTER(ctypes.c_void_p)
        buf_table = (ctypes.c_void_p * 7).from_address(api.PyCapsule_GetPointer(
            hurray.Buffer.__dlpack_c_exchange_api__, b"dlpack_exchange_api"))
        buffer_from_py = ctypes.PYFUNCTYPE(ctypes.c_int, ctypes.py_object, OUT)(buf_table[3])
        seen = []

        # A GPU producer written with ctypes: exports an inner CUDA Buffer,
        # and says its pending work is on stream `stream`.
        @ctypes.CFUNCTYPE(ctypes.c_int, ctypes.py_object, OUT)
        def from_py(obj, out):
            return buffer_from_py(obj.inner, out)

        @ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int32, ctypes.c_int32, OUT)
        def work_stream(device_type, device_id, out):
            seen.append((device_type, device_id))
            out[0] = current[0]
            return 0

        table = (ctypes.c_void_p * 7)(1 | (3 << 32), None, None,
                                      ctypes.cast(from_py, ctypes.c_void_p).value, None, None,
                                      ctypes.cast(work_stream, ctypes.c_void_p).value)
        current = [None]

        class GpuProducer:
            __dlpack_c_exchange_api__ = api.PyCapsule_New(ctypes.addressof(table),
                                                          b"dlpack_exchange_api", None)
            def __init__(self, inner):
                self.inner = inner

        g = to_cuda(hurray.from_dlpack(np.arange(8, dtype=np.float64)))
        fake.fake_cuda_reset()
        for s in (None, 1, 0x5000):
            current[0] = s
            b = hurray.from_dlpack(GpuProducer(g))
            assert b.data_ptr == g.data_ptr and b.device == (2, 0)
        assert seen == [(2, 0)] * 3, seen
        # Each Buffer records its event where the producer's work is (NULL,
        # the legacy default stream, is logged as None); nothing waits yet
        # (docs/impl/python.md §4: a consumer's stream waits on the event).
        assert fake.fake_cuda_call_count(b"cuStreamWaitEvent") == 0
        records = [r.stream for r in calls("cuEventRecord")]
        assert records == [None, 1, 0x5000], records
        assert hurray._native._exchange_api_stats()["consumer_table"] == 3
        """
    )
