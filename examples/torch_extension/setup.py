# SPDX-License-Identifier: Apache-2.0
"""Builds the example PyTorch extension against an installed libhurray.

    HURRAY_PREFIX=/path/to/prefix python setup.py build_ext --inplace
    # or: HURRAY_PREFIX=... pip install --no-build-isolation .

HURRAY_PREFIX is the directory given to `cmake --install <build> --prefix`.
Its include/ and the lib directory holding libhurray.so are used, and that lib
directory is written into the extension's RUNPATH so it loads without
LD_LIBRARY_PATH.
"""

import os
import sys
from pathlib import Path

from setuptools import setup
from torch.utils.cpp_extension import BuildExtension, CppExtension


def hurray_dirs():
    prefix = os.environ.get("HURRAY_PREFIX")
    if not prefix:
        sys.exit("set HURRAY_PREFIX to libhurray's install prefix (cmake --install ... --prefix)")
    prefix = Path(prefix).resolve()
    include = prefix / "include"
    if not (include / "hurray" / "hurray.h").is_file():
        sys.exit(f"{include}/hurray/hurray.h not found: is {prefix} a libhurray install prefix?")
    # GNUInstallDirs may pick lib, lib64 or lib/<multiarch>.
    for lib in [prefix / "lib", prefix / "lib64", *sorted(prefix.glob("lib/*-linux-gnu"))]:
        if (lib / "libhurray.so").exists():
            return str(include), str(lib)
    sys.exit(f"no libhurray.so under {prefix}/lib*")


include_dir, lib_dir = hurray_dirs()

setup(
    name="hurray_torch_example",
    version="0.1.0",
    ext_modules=[
        CppExtension(
            "hurray_torch_example",
            ["hurray_torch_ext.cpp"],
            include_dirs=[include_dir],
            library_dirs=[lib_dir],
            libraries=["hurray"],
            extra_link_args=[f"-Wl,-rpath,{lib_dir}"],
        )
    ],
    cmdclass={"build_ext": BuildExtension},
)
