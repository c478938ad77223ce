# SPDX-License-Identifier: Apache-2.0
"""What a producer's __dlpack__ refuses, its exchange table must not let
through hurray, and no hurray route may make read-only memory writable
(docs/impl/python.md §7, "torch's table" and "Read-only Buffers and the
table").

Each torch case first does the hand-off without hurray
(`t.__dlpack__(max_version=(1, 3))`, what NumPy and torch's own
from_dlpack call) and requires hurray.from_dlpack(t), which takes torch's
C exchange table, to give the same error, or, where torch's own path gives
wrong values (a negative view), an error rather than those values.
"""

import ctypes
import warnings
from typing import Any, Callable, Dict, List, Tuple

import pytest

import hurray
from hurray import _native

from conftest import _api
from dlpack_ctypes import FROM_PY, DLManagedTensorVersioned, ExchangeAPI

try:
    import numpy as np
except ImportError as e:  # pragma: no cover - depends on the environment
    np = None  # type: ignore[assignment]
    _np_reason = f"numpy cannot be imported: {e}"
try:
    import torch
except ImportError as e:  # pragma: no cover
    torch = None  # type: ignore[assignment]
    _torch_reason = f"torch cannot be imported: {e}"
try:
    import tvm_ffi
except ImportError as e:  # pragma: no cover
    tvm_ffi = None  # type: ignore[assignment]
    _tvm_reason = f"tvm_ffi cannot be imported: {e}"

needs_np = pytest.mark.skipif(np is None, reason=globals().get("_np_reason", ""))
needs_torch = pytest.mark.skipif(torch is None, reason=globals().get("_torch_reason", ""))
needs_tvm = pytest.mark.skipif(tvm_ffi is None, reason=globals().get("_tvm_reason", ""))


def stats() -> Dict[str, int]:
    return dict(_native._exchange_api_stats())


def delta(before: Dict[str, int]) -> Dict[str, int]:
    now = stats()
    return {k: now[k] - before[k] for k in now if now[k] != before[k]}


def torch_error(t: Any) -> BaseException:
    """The exception torch's own __dlpack__ raises for t (it must raise)."""
    with pytest.raises(Exception) as info:
        t.__dlpack__(max_version=(1, 3))
    return info.value


def storage_uses(t: Any) -> int:
    return int(torch._C._storage_Use_Count(t.untyped_storage()._cdata))


# --- torch: what its __dlpack__ refuses, the table exports ----------------


def _conj() -> Any:
    return torch.tensor([1 + 2j, 3 + 4j]).conj()


def _requires_grad() -> Any:
    return torch.tensor([1.0, 2.0], requires_grad=True)


def _parameter() -> Any:
    return torch.nn.Parameter(torch.tensor([1.0, 2.0]))


def _grad_view() -> Any:  # a non-leaf view of a tensor that requires grad
    return torch.tensor([1.0, 2.0, 3.0], requires_grad=True)[1:]


LAZY: List[Tuple[str, Callable[[], Any]]] = [
    ("conj", _conj),
    ("requires_grad", _requires_grad),
    ("parameter", _parameter),
    ("grad_view", _grad_view),
]


@needs_torch
@pytest.mark.parametrize("name,make", LAZY, ids=[n for n, _ in LAZY])
def test_what_torchs_dlpack_refuses_is_refused_the_same(name: str, make: Callable[[], Any]) -> None:
    t = make()
    expected = torch_error(t)
    assert type(expected) is BufferError
    uses = storage_uses(t)
    before = stats()
    with pytest.raises(BufferError) as info:
        hurray.from_dlpack(t)
    assert str(info.value) == str(expected)
    # The table was called, its tensor deleted (torch's storage holds no
    # more references than before), and __dlpack__ asked.
    assert delta(before) == {
        "consumer_table": 1,
        "consumer_table_declined": 1,
        "consumer_capsule": 1,
    }
    assert storage_uses(t) == uses
    with pytest.raises(BufferError, match=str(expected)[:20]):
        hurray.from_dlpack(t, copy=False)


@needs_torch
def test_resolved_tensors_still_take_the_table() -> None:
    c = _conj()
    before = stats()
    b = hurray.from_dlpack(c.resolve_conj())
    d = hurray.from_dlpack(_requires_grad().detach())
    assert delta(before) == {"consumer_table": 2}
    assert np is None or np.from_dlpack(b).tolist() == [1 - 2j, 3 - 4j]
    assert d.shape == (2,) and not d.readonly


def _neg_view() -> Any:
    return torch._neg_view(torch.tensor([1.0, 2.0]))


def _imag_of_conj() -> Any:  # a public route to a negative view
    return torch.tensor([1 + 2j, 3 + 4j]).conj().imag


NEG: List[Tuple[str, Callable[[], Any]]] = [
    ("neg_view", _neg_view),
    ("imag_of_conj", _imag_of_conj),
]


@needs_torch
@pytest.mark.parametrize("name,make", NEG, ids=[n for n, _ in NEG])
def test_negative_views_are_refused_not_read_un_negated(name: str, make: Callable[[], Any]) -> None:
    t = make()
    assert t.is_neg()
    want = t.tolist()  # the values torch means: negated
    uses = storage_uses(t)
    before = stats()
    with pytest.raises(BufferError, match="negative bit"):
        hurray.from_dlpack(t)
    assert delta(before) == {"consumer_table": 1}
    assert storage_uses(t) == uses  # the table's tensor was deleted
    # The resolved tensor, and a copy, carry the right values.
    for b in (hurray.from_dlpack(t.resolve_neg()), hurray.from_dlpack(t, copy=True)):
        assert np is None or np.from_dlpack(b).tolist() == want


def _qint8() -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # quantised tensors are deprecated in torch 2.15
        return torch.quantize_per_tensor(torch.tensor([1.0, 2.0]), 0.1, 10, torch.qint8)


def _qint8_scalar() -> Any:  # the tensor of torch's test_dlpack_unsupported_dtype_error
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return torch.quantize_per_tensor(torch.randn(()), 0.1, 10, torch.qint8)


def _bits8() -> Any:
    return torch.zeros(2, dtype=torch.bits8)


def _sparse_coo() -> Any:
    return torch.tensor([[1.0, 0.0], [0.0, 2.0]]).to_sparse()


def _sparse_csr() -> Any:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return torch.tensor([[1.0, 0.0], [0.0, 2.0]]).to_sparse_csr()


def _meta() -> Any:
    return torch.empty(2, device="meta")


UNEXPORTABLE: List[Tuple[str, Callable[[], Any]]] = [
    ("qint8", _qint8),
    ("qint8_scalar", _qint8_scalar),
    ("bits8", _bits8),
    ("sparse_coo", _sparse_coo),
    ("sparse_csr", _sparse_csr),
    ("meta", _meta),
]
if torch is not None and torch.backends.mkldnn.is_available():  # type: ignore[no-untyped-call]
    UNEXPORTABLE.append(("mkldnn", lambda: torch.randn(2, 2).to_mkldnn()))


@needs_torch
@pytest.mark.parametrize("name,make", UNEXPORTABLE, ids=[n for n, _ in UNEXPORTABLE])
def test_tensors_torch_cannot_export_give_torchs_own_error(
    name: str, make: Callable[[], Any]
) -> None:
    t = make()
    expected = torch_error(t)
    before = stats()
    with pytest.raises(Exception) as info:
        hurray.from_dlpack(t)
    # The same type and the same one line as torch's __dlpack__, not the
    # table's RuntimeError with C++ frames.
    assert type(info.value) is type(expected)
    assert str(info.value) == str(expected)
    assert "\n" not in str(info.value)
    assert delta(before) == {
        "consumer_table": 1,
        "consumer_table_declined": 1,
        "consumer_capsule": 1,
    }


@needs_torch
def test_torch_suites_unsupported_dtype_error_through_hurray() -> None:
    # torch's test_dlpack_unsupported_dtype_error_cpu, with the producer
    # routed through hurray: torch.from_dlpack(hurray.from_dlpack(inp)).
    inp = _qint8_scalar()
    with pytest.raises(BufferError, match=".* types are not supported by dlpack"):
        torch.utils.dlpack.from_dlpack(hurray.from_dlpack(inp))


@needs_torch
def test_a_subclass_overriding_dlpack_is_asked_through_it() -> None:
    class Refusing(torch.Tensor):
        def __dlpack__(self, **kw: Any) -> Any:
            raise BufferError("Refusing says no")

    t = torch.arange(3.0).as_subclass(Refusing)
    assert hasattr(type(t), "__dlpack_c_exchange_api__")  # inherited from torch.Tensor
    before = stats()
    with pytest.raises(BufferError, match="Refusing says no"):
        hurray.from_dlpack(t)
    assert delta(before) == {"consumer_capsule": 1}

    class Plain(torch.Tensor):  # no override: the table, with torch's checks
        pass

    p = torch.arange(3.0).as_subclass(Plain)
    assert hurray.from_dlpack(p).data_ptr == p.data_ptr()
    with pytest.raises(BufferError, match="conjugate bit"):
        hurray.from_dlpack(_conj().as_subclass(Plain))
    assert delta(before) == {
        "consumer_capsule": 2,
        "consumer_table": 2,
        "consumer_table_declined": 1,
    }


# --- read-only memory through hurray's own table --------------------------


def _from_py() -> Any:
    cap = hurray.Buffer.__dict__["__dlpack_c_exchange_api__"]
    api = ExchangeAPI.from_address(_api.PyCapsule_GetPointer(cap, b"dlpack_exchange_api"))
    return FROM_PY(api.managed_tensor_from_py_object_no_sync)


@needs_np
def test_table_refuses_a_read_only_buffer() -> None:
    a = np.arange(4.0)
    a.flags.writeable = False
    buf = hurray.from_dlpack(a)
    assert buf.readonly
    out = ctypes.POINTER(DLManagedTensorVersioned)()
    before = stats()
    with pytest.raises(BufferError, match="read-only"):
        _from_py()(buf, ctypes.byref(out))
    assert delta(before) == {"managed_tensor_from_py_object_no_sync": 1}
    assert not out  # nothing handed out
    assert not buf.released  # the Buffer is unchanged and usable
    assert np.from_dlpack(buf).tolist() == [0.0, 1.0, 2.0, 3.0]


def _write_through(x: Any) -> None:
    """Writes 99 into element 0 of whatever a route gave, as a user would."""
    if tvm_ffi is not None and isinstance(x, tvm_ffi.Tensor):
        x = np.from_dlpack(x)
    if isinstance(x, hurray.Buffer):
        x = np.from_dlpack(x)
    if torch is not None and isinstance(x, torch.Tensor):
        x = x.numpy()
    x[0] = 99.0


@needs_np
@needs_tvm
def test_no_route_through_tvm_ffi_makes_a_read_only_array_writable() -> None:
    a = np.arange(4.0)
    a.flags.writeable = False
    # Without hurray, tvm_ffi refuses NumPy's read-only array.
    with pytest.raises(BufferError):
        tvm_ffi.from_dlpack(a)
    buf = hurray.from_dlpack(a)
    identity = tvm_ffi.convert(lambda x: x)
    routes: List[Tuple[str, Callable[[], Any]]] = [
        ("tvm_ffi.from_dlpack(buf)", lambda: tvm_ffi.from_dlpack(buf)),
        ("tvm_ffi function argument", lambda: identity(buf)),
        (
            "tvm_ffi.from_dlpack(hurray.from_dlpack(buf))",
            lambda: tvm_ffi.from_dlpack(hurray.from_dlpack(buf)),
        ),
        ("np.from_dlpack(buf)", lambda: np.from_dlpack(buf)),
        ("hurray.from_dlpack(buf)", lambda: hurray.from_dlpack(buf)),
    ]
    refused = []
    for name, route in routes:
        try:
            x = route()
        except BufferError:
            refused.append(name)
            continue
        with pytest.raises(ValueError, match="read-only"):
            _write_through(x)
    assert a.tolist() == [0.0, 1.0, 2.0, 3.0], "a write reached the read-only array"
    # tvm_ffi is refused as it refuses NumPy's array itself.
    assert refused[:3] == [n for n, _ in routes[:3]]
    # A private copy is handed over writable, and writes stay in it.
    c = tvm_ffi.from_dlpack(hurray.from_dlpack(buf, copy=True))
    _write_through(c)
    assert np.from_dlpack(c)[0] == 99.0 and a[0] == 0.0
