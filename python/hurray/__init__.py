# SPDX-License-Identifier: Apache-2.0
"""hurray: hand tensor memory between Python frameworks with zero copies.

A :class:`Buffer` is one consumer's hold on tensor memory, backed by a
libhurray handle. Take memory from any DLPack producer with
:func:`from_dlpack`, fan it out with :meth:`Buffer.share`, and give each
Buffer to a framework through the DLPack protocol (``np.from_dlpack(buf)``,
``jax.numpy.from_dlpack(buf)``, ``tvm_ffi.from_dlpack(buf)``, ...). The
producer's memory is released exactly once, after the last holder lets go.

    >>> import numpy as np, hurray
    >>> a = np.arange(6, dtype=np.float32)
    >>> b1, b2 = hurray.from_dlpack(a).share(2)
    >>> np.from_dlpack(b1).ctypes.data == a.ctypes.data
    True

CPU Buffers also speak the Python buffer protocol (``memoryview(buf)``,
``np.asarray(buf)``). C and C++ code built in the same environment finds
libhurray with :func:`get_include`, :func:`get_library` and
:func:`get_cmake_dir` (or ``python -m hurray --includedir``).

Buffers pickle (protocol 5 sends the memory out of band, as Ray and Dask
use it) and cross :mod:`multiprocessing` and
:class:`concurrent.futures.ProcessPoolExecutor`: memory from
``empty(..., shared=True)`` is mapped by both processes (zero-copy), other
CPU memory is copied once into shareable memory; the producer's release
runs once, after the last process let go.

A checking mode (:func:`enable_checking`, or ``HURRAY_CHECK=1``) catches a
handle released twice and lists live ones (:func:`check_leaks`,
:mod:`hurray.testing`).

Ownership, threading and shutdown rules: docs/impl/python.md.
"""

from . import _mp
from ._check import (  # noqa: F401
    LiveHandle,
    check_leaks,
    check_mark,
    checking_enabled,
    disable_checking,
    double_releases,
    enable_checking,
    live_handles,
)
from ._native import (  # noqa: F401
    DLPACK_MAJOR,
    DLPACK_MINOR,
    GROUP_ALIGNMENT,
    Buffer,
    __version__,
    empty,
    empty_group,
    from_dlpack,
    from_dlpack_many,
    libhurray_version,
)
from ._pack import pack  # noqa: F401
from ._paths import (  # noqa: F401
    get_cmake_dir,
    get_include,
    get_lib_dir,
    get_library,
    get_pkgconfig_dir,
)
from ._sets import BufferDict, BufferList  # noqa: F401

# Registers the multiprocessing reducer once multiprocessing is imported.
_mp.install()

# __version__ is HURRAY_VERSION_STRING, compiled in from hurray/version.h,
# which the build generates from the root CMakeLists.txt's project(VERSION);
# the wheel's metadata version is read from the same line (pyproject.toml).
__all__ = [
    "Buffer",
    "from_dlpack",
    "from_dlpack_many",
    "empty",
    "empty_group",
    "GROUP_ALIGNMENT",
    "pack",
    "BufferDict",
    "BufferList",
    "libhurray_version",
    "__version__",
    "DLPACK_MAJOR",
    "DLPACK_MINOR",
    "get_include",
    "get_lib_dir",
    "get_library",
    "get_cmake_dir",
    "get_pkgconfig_dir",
    "enable_checking",
    "disable_checking",
    "checking_enabled",
    "check_mark",
    "check_leaks",
    "live_handles",
    "double_releases",
    "LiveHandle",
]
