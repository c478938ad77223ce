# SPDX-License-Identifier: Apache-2.0
"""Where the wheel keeps libhurray's C files (docs/impl/python.md §6).

The package folder holds, besides the Python module::

    include/hurray/*.h           the C ABI headers (hurray.h, dlpack.h, version.h)
    lib/libhurray.so             the library (SONAME libhurray.so)
    lib/cmake/hurray/            the hurray::hurray CMake package
    lib/pkgconfig/hurray.pc      the pkg-config file

so a C or C++ extension built in the same environment (a PyTorch or TVM FFI
extension, a CMake project) compiles and links against exactly the library
the Python module uses, without a separate install.
"""

import os

_HERE = os.path.dirname(os.path.abspath(__file__))


def get_include() -> str:
    """The folder to put on the include path: it holds ``hurray/hurray.h``."""
    return os.path.join(_HERE, "include")


def get_lib_dir() -> str:
    """The folder that holds ``libhurray.so`` (for ``-L`` and rpaths)."""
    return os.path.join(_HERE, "lib")


def get_library() -> str:
    """The full path of ``libhurray.so``, the library ``hurray._native`` loads."""
    return os.path.join(get_lib_dir(), "libhurray.so")


def get_cmake_dir() -> str:
    """The folder of ``hurrayConfig.cmake``: pass it as ``-Dhurray_DIR=...``
    (or put it on ``CMAKE_PREFIX_PATH``) for ``find_package(hurray CONFIG)``,
    then link ``hurray::hurray``."""
    return os.path.join(get_lib_dir(), "cmake", "hurray")


def get_pkgconfig_dir() -> str:
    """The folder of ``hurray.pc``, for ``PKG_CONFIG_PATH``."""
    return os.path.join(get_lib_dir(), "pkgconfig")
