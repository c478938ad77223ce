# SPDX-License-Identifier: Apache-2.0
"""Type stubs of hurray._native, the CPython extension (docs/impl/python.md)."""

from types import TracebackType
from typing import (
    Any,
    ClassVar,
    Dict,
    Final,
    Iterable,
    List,
    Optional,
    Protocol,
    Sequence,
    SupportsIndex,
    Tuple,
    Type,
    Union,
)

from typing_extensions import Self

__version__: Final[str]
libhurray_version: Final[str]
DLPACK_MAJOR: Final[int]
DLPACK_MINOR: Final[int]
# Byte alignment of every tensor of empty_group (HURRAY_GROUP_ALIGNMENT).
GROUP_ALIGNMENT: Final[int]
CHECK_TRACK: Final[int]
CHECK_STDERR: Final[int]

def _check_enable(options: int, /) -> None: ...
def _check_state() -> Dict[str, int]: ...
def _check_live(since: int, /) -> List[Tuple[int, str, str, str, Tuple[int, int], int]]: ...

# A DLPack device: (device_type, device_id) with DLPack's values (CPU is (1, 0)),
# or the string "cpu".
_Device = Union[Tuple[SupportsIndex, SupportsIndex], List[SupportsIndex], str]
# What NumPy accepts for copy=: True, False, None, numpy._CopyMode, or any
# object with a truth value (not a str).
_Copy = Optional[object]
# A dtype: hurray's names ('float32', 'bfloat16', 'float8_e4m3fn', 'float32x4')
# or anything numpy.dtype() accepts (np.float32, np.dtype('<i8'), 'f4').
_DType = object

class _DLPackProducer(Protocol):
    def __dlpack__(
        self, *, stream: Any = ..., max_version: Any = ..., dl_device: Any = ..., copy: Any = ...
    ) -> Any: ...

class Buffer:
    """One consumer's hold on tensor memory (a libhurray handle)."""

    # The DLPack C exchange API table (a "dlpack_exchange_api" capsule).
    __dlpack_c_exchange_api__: ClassVar[object]
    # Not constructible directly: use from_dlpack(), empty() or share().
    def __init__(self, *args: Any, **kwargs: Any) -> None: ...
    @property
    def shape(self) -> Tuple[int, ...]: ...
    @property
    def strides(self) -> Tuple[int, ...]:
        """In elements, not bytes."""
    @property
    def ndim(self) -> int: ...
    @property
    def dtype(self) -> str: ...
    @property
    def device(self) -> Tuple[int, int]: ...
    @property
    def readonly(self) -> bool: ...
    @property
    def is_copied(self) -> bool: ...
    @property
    def data_ptr(self) -> int: ...
    @property
    def byte_offset(self) -> int: ...
    @property
    def size(self) -> int: ...
    @property
    def nbytes(self) -> int: ...
    @property
    def released(self) -> bool: ...
    def __dlpack__(
        self,
        stream: Optional[SupportsIndex] = None,
        *,
        max_version: Optional[Tuple[SupportsIndex, SupportsIndex]] = None,
        dl_device: Optional[_Device] = None,
        copy: _Copy = None,
    ) -> Any:
        """A DLPack capsule ('dltensor_versioned' or 'dltensor').

        stream: the consumer's stream, made to wait (on the device) for the
        Buffer's pending work: the event a GPU Buffer from from_dlpack carries
        (recorded on its producer's stream), else the device's default stream.
        None is the legacy default stream (CUDA) / the default stream (ROCm);
        -1 waits for nothing.
        """
    def __dlpack_device__(self) -> Tuple[int, int]: ...
    def share(self, n: SupportsIndex, /) -> List[Buffer]: ...
    def release(self) -> None: ...
    # Pickling: protocol 5 sends the memory out of band (pickle.PickleBuffer).
    def __reduce_ex__(self, protocol: SupportsIndex, /) -> Tuple[Any, ...]: ...
    def __enter__(self) -> Self: ...
    def __exit__(
        self,
        exc_type: Optional[Type[BaseException]],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
        /,
    ) -> bool: ...
    # The Python buffer protocol (CPU Buffers): memoryview(buf), np.asarray(buf).
    def __buffer__(self, flags: int, /) -> memoryview: ...
    def __release_buffer__(self, view: memoryview, /) -> None: ...
    # NumPy's fallback when the buffer protocol cannot serve.
    def __array__(self, dtype: Any = None, copy: Optional[bool] = None) -> Any: ...

def from_dlpack(
    obj: Union[_DLPackProducer, Buffer, Any],
    /,
    *,
    copy: _Copy = None,
    device: Optional[_Device] = None,
    stream: Optional[SupportsIndex] = None,
) -> Buffer: ...
def from_dlpack_many(
    objs: Iterable[Union[_DLPackProducer, Buffer, Any]],
    /,
    *,
    copy: _Copy = None,
    device: Optional[_Device] = None,
    stream: Optional[SupportsIndex] = None,
) -> List[Buffer]: ...
def empty(
    shape: Union[SupportsIndex, Tuple[SupportsIndex, ...], List[SupportsIndex]],
    dtype: _DType = "float32",
    *,
    device: _Device = "cpu",
    shared: bool = False,
) -> Buffer: ...

_Shape = Union[SupportsIndex, Tuple[SupportsIndex, ...], List[SupportsIndex]]

def empty_group(
    specs: Sequence[Union[Tuple[_Shape, _DType], _Shape]],
    *,
    device: _Device = "cpu",
    shared: bool = False,
) -> List[Buffer]: ...

# hurray.pack's native half: one group holding a compact copy of each source.
# dtypes[i] (not None): the dtype member i gets (an ml_dtypes NumPy dtype whose
# array was taken as unsigned integers of the same size).
def _pack(
    srcs: List[Buffer], shared: bool, dtypes: Optional[List[Any]] = None, /
) -> List[Buffer]: ...

# Unpickling (Buffer.__reduce_ex__): a Buffer over a received bytes-like object.
def _rebuild(
    obj: Any,
    dtype: Tuple[int, int, int],
    shape: Tuple[int, ...],
    strides: Tuple[int, ...],
    offset: int,
    flags: int,
    legacy_unsaid: bool,
    /,
) -> Buffer: ...
def _pickle_stats() -> Dict[str, int]: ...

# multiprocessing's reducer (hurray/_mp.py): descriptor, fds (the caller
# closes them), legacy_unsaid; and back (the fds are consumed in every case).
# With owner, the fds are also appended to that list before the call returns.
def _ipc_export(
    buf: Buffer, owner: Optional[List[int]] = None, /
) -> Tuple[bytes, Tuple[int, ...], bool]: ...
def _close_fds(fds: List[int], /) -> None: ...
def _move_fds(src: List[int], dst: List[int], /) -> None: ...
def _dup_fds(fds: Sequence[int], owner: List[int], /) -> None: ...
def _ipc_import(descriptor: bytes, fds: List[int], legacy_unsaid: bool, /) -> Buffer: ...

# One message for a set of Buffers (BufferDict / BufferList, hurray/_mp.py).
def _ipc_export_set(
    bufs: List[Buffer], owner: Optional[List[int]] = None, /
) -> Tuple[bytes, Tuple[int, ...], Tuple[bool, ...]]: ...
def _ipc_import_set(
    descriptor: bytes, fds: List[int], legacy_unsaid: Tuple[bool, ...], /
) -> List[Buffer]: ...
def _exchange_api_stats() -> dict[str, int]: ...
