# SPDX-License-Identifier: Apache-2.0
"""Where the C files of this install are, for build systems: the one
implementation behind the ``hurray-config`` console script and
``python -m hurray`` (like NumPy's ``numpy-config`` and tvm-ffi's
``tvm-ffi-config``). Prints one answer per option given, in the order
given, one per line::

    hurray-config --includedir     # -I folder (holds hurray/hurray.h)
    hurray-config --libdir         # folder of libhurray.so
    hurray-config --libfiles       # libhurray.so itself (also --libfile)
    hurray-config --cmakedir       # hurray_DIR for find_package(hurray)
    hurray-config --pkgconfigdir   # for PKG_CONFIG_PATH (folder of hurray.pc)
    hurray-config --cflags         # -I<includedir>
    hurray-config --libs           # -L<libdir> -lhurray -Wl,-rpath,<libdir>
    hurray-config --version

All paths are absolute and point into the installed package folder
(:mod:`hurray._paths`); nothing is looked up outside it.
"""

import argparse
import sys
from typing import List, Optional, Sequence

from . import _paths

# (flag, help); --libfile is the name python -m hurray first had, kept as an
# alias of tvm-ffi-config's --libfiles.
_OPTIONS = [
    ("--includedir", "the include folder (it holds hurray/hurray.h)"),
    ("--libdir", "the folder of libhurray.so"),
    ("--libfiles", "the path of libhurray.so"),
    ("--libfile", "the same as --libfiles"),
    ("--cmakedir", "the folder of hurrayConfig.cmake (hurray_DIR)"),
    ("--pkgconfigdir", "the folder of hurray.pc (PKG_CONFIG_PATH)"),
    ("--cflags", "compiler flags: -I<includedir>"),
    ("--libs", "linker flags: -L<libdir> -lhurray -Wl,-rpath,<libdir>"),
    ("--version", "the package version"),
]


def answer(flag: str) -> str:
    """The line printed for one option (a flag of ``_OPTIONS``). Raises
    ``KeyError`` for any other string."""
    libdir = _paths.get_lib_dir()
    if flag == "--includedir":
        return _paths.get_include()
    if flag == "--libdir":
        return libdir
    if flag in ("--libfiles", "--libfile"):
        return _paths.get_library()
    if flag == "--cmakedir":
        return _paths.get_cmake_dir()
    if flag == "--pkgconfigdir":
        return _paths.get_pkgconfig_dir()
    if flag == "--cflags":
        return f"-I{_paths.get_include()}"
    if flag == "--libs":
        return f"-L{libdir} -lhurray -Wl,-rpath,{libdir}"
    if flag == "--version":
        from . import __version__

        return __version__
    raise KeyError(flag)


def main(argv: Optional[Sequence[str]] = None, prog: str = "hurray-config") -> int:
    """Runs the command line: ``argv`` without the program name (default:
    ``sys.argv[1:]``). Returns the exit status: 0 after printing the answers
    to stdout; 2 with the usage on stderr when no option is given or one is
    unknown (argparse's status). Writes nothing else."""
    parser = argparse.ArgumentParser(
        prog=prog,
        description="Locations of libhurray's headers, library, CMake package and pkg-config "
        "file in this Python environment.",
    )
    for flag, text in _OPTIONS:
        parser.add_argument(flag, action="append_const", const=flag, dest="asked", help=text)
    try:
        args = parser.parse_args(None if argv is None else list(argv))
    except SystemExit as e:  # argparse's own exit: unknown option, or --help
        return e.code if isinstance(e.code, int) else 2
    asked: List[str] = args.asked or []
    if not asked:
        parser.print_help(sys.stderr)
        return 2
    for flag in asked:
        print(answer(flag))
    return 0
