# SPDX-License-Identifier: Apache-2.0
"""Shared helpers for the hurray Python tests.

`ctypes` is used to look inside capsules (name, version, flags) and to build
a DLPack producer whose deleter counts its calls, so that "released exactly
once" is observed directly rather than inferred.
"""

import ctypes
import gc
import os
import sys
import threading
from typing import Any, Iterator, List, Optional, Tuple, Type

import pytest

from dlpack_ctypes import (  # noqa: F401  (re-exported for the tests)
    VERSIONED_DELETER,
    DLDataType,
    DLDevice,
    DLManagedTensor,
    DLManagedTensorVersioned,
    DLPackVersion,
    DLTensor,
)
from native_build import build_test_aid

# The test-only native aid (tests/aid/hurray_test_aid.c), built against the
# installed package's headers and library; subprocesses find it through
# PYTHONPATH.
_AID_DIR = build_test_aid()
sys.path.insert(0, _AID_DIR)
os.environ["PYTHONPATH"] = os.pathsep.join(
    [_AID_DIR] + ([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else [])
)

_api = ctypes.pythonapi
_api.PyCapsule_GetName.restype = ctypes.c_char_p
_api.PyCapsule_GetName.argtypes = [ctypes.py_object]
_api.PyCapsule_GetPointer.restype = ctypes.c_void_p
_api.PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
_api.PyCapsule_New.restype = ctypes.py_object
_api.PyCapsule_New.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
_api.PyCapsule_IsValid.restype = ctypes.c_int
_api.PyCapsule_IsValid.argtypes = [ctypes.c_void_p, ctypes.c_char_p]


def capsule_name(cap: object) -> Optional[str]:
    name = _api.PyCapsule_GetName(cap)
    return name.decode() if name is not None else None


CAPSULE_DESTRUCTOR = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
# PyCapsule_New keeps the name pointer, not a copy: the bytes must outlive it.
_VERSIONED_NAME = b"dltensor_versioned"


def versioned_tensor_of(cap: object) -> DLManagedTensorVersioned:
    """The DLManagedTensorVersioned inside an unused 'dltensor_versioned' capsule."""
    ptr = _api.PyCapsule_GetPointer(cap, b"dltensor_versioned")
    return DLManagedTensorVersioned.from_address(ptr)


class CountingProducer:
    """A DLPack producer written with ctypes: a float64 vector whose deleter
    counts its calls (from any thread; ctypes takes the GIL for the callback).

    Each capsule() call makes a fresh tensor over the same memory; the
    capsule has the standard destructor (delete if still unused)."""

    def __init__(self, n: int = 8, version: Tuple[int, int] = (1, 3), flags: int = 0) -> None:
        self.memory = (ctypes.c_double * n)(*range(n))
        self.shape = (ctypes.c_int64 * 1)(n)
        self.strides = (ctypes.c_int64 * 1)(1)
        self.version = version
        self.flags = flags
        self.deleted = 0
        self.deleter_threads: List[int] = []
        self._lock = threading.Lock()
        self._tensors: List[DLManagedTensorVersioned] = []  # keep the ctypes structs alive

        def _deleter(ptr: Any) -> None:
            with self._lock:
                self.deleted += 1
                self.deleter_threads.append(threading.get_ident())

        self._deleter = VERSIONED_DELETER(_deleter)

        def _destructor(cap_ptr: Optional[int]) -> None:
            if _api.PyCapsule_IsValid(cap_ptr, b"dltensor_versioned"):
                _deleter(None)

        self._destructor = CAPSULE_DESTRUCTOR(_destructor)

    @property
    def address(self) -> int:
        return ctypes.addressof(self.memory)

    def capsule(self) -> object:
        t = DLManagedTensorVersioned()
        t.version = DLPackVersion(*self.version)
        t.deleter = self._deleter
        t.flags = self.flags
        t.dl_tensor.data = ctypes.addressof(self.memory)
        t.dl_tensor.device = DLDevice(1, 0)
        t.dl_tensor.ndim = 1
        t.dl_tensor.dtype = DLDataType(2, 64, 1)
        t.dl_tensor.shape = self.shape
        t.dl_tensor.strides = self.strides
        t.dl_tensor.byte_offset = 0
        self._tensors.append(t)
        return _api.PyCapsule_New(
            ctypes.addressof(t),
            _VERSIONED_NAME,
            ctypes.cast(self._destructor, ctypes.c_void_p),
        )


def pytest_report_header(config: pytest.Config) -> List[str]:
    import hurray

    lines = [
        f"hurray {hurray.__version__} from {hurray.__file__} (libhurray {hurray.libhurray_version})"
    ]
    for mod in ("numpy", "tvm_ffi", "jax"):
        try:
            m = __import__(mod)
            lines.append(f"{mod} {getattr(m, '__version__', '?')}")
        except ImportError:
            lines.append(f"{mod}: not installed (its tests skip)")
    return lines


@pytest.fixture
def counting_producer() -> Type["CountingProducer"]:
    return CountingProducer


def pytest_collection_finish(session: pytest.Session) -> None:
    """Every test module is imported now, and torch, JAX and TensorFlow with
    them: freeze what exists, so that the collection after each test scans
    only what the tests made (a full scan with all three loaded took about
    1.3 s, most of the suite's time)."""
    gc.collect()
    gc.freeze()


@pytest.fixture(autouse=True)
def _collect() -> Iterator[None]:
    yield
    gc.collect()


# For the multiprocessing tests (test_multiprocessing.py, test_buffer_sets_mp.py).
@pytest.fixture(params=["spawn", "fork"])
def ctx(request: pytest.FixtureRequest) -> Any:
    """Each test taking it runs under the spawn and the fork context."""
    import multiprocessing

    return multiprocessing.get_context(request.param)


@pytest.fixture
def strict_checking() -> Iterator[None]:
    """The checking mode on for the test, and no double release during it."""
    import hurray

    was = hurray.checking_enabled()
    hurray.enable_checking()
    before = hurray.double_releases()
    yield
    assert hurray.double_releases() == before
    if not was:
        hurray.disable_checking()


def optional_module(name: str) -> Tuple[Any, pytest.MarkDecorator]:
    """(the module, or None where it cannot be imported; a skipif mark for
    the tests that need it, giving the import error as the reason)."""
    import importlib

    try:
        return importlib.import_module(name), pytest.mark.skipif(False, reason=name)
    except ImportError as e:  # pragma: no cover - depends on the environment
        return None, pytest.mark.skipif(True, reason=f"{name} cannot be imported: {e}")
