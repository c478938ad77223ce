"""``python -m hurray``: where the C files of this install are, like
``tvm-ffi-config``. Prints one answer per option given, in order::

    python -m hurray --includedir     # -I folder (holds hurray/hurray.h)
    python -m hurray --libdir         # folder of libhurray.so
    python -m hurray --libfile        # libhurray.so itself
    python -m hurray --cmakedir       # hurray_DIR for find_package(hurray)
    python -m hurray --pkgconfigdir   # for PKG_CONFIG_PATH
    python -m hurray --cflags         # -I<includedir>
    python -m hurray --libs           # -L<libdir> -lhurray -Wl,-rpath,<libdir>
    python -m hurray --version
"""
import argparse
import sys
from typing import List, Optional

from . import _paths


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m hurray",
        description="Locations of libhurray's headers, library, CMake package and pkg-config "
        "file in this Python environment.",
    )
    for flag, text in [
        ("--includedir", "the include folder (it holds hurray/hurray.h)"),
        ("--libdir", "the folder of libhurray.so"),
        ("--libfile", "the path of libhurray.so"),
        ("--cmakedir", "the folder of hurrayConfig.cmake (hurray_DIR)"),
        ("--pkgconfigdir", "the folder of hurray.pc (PKG_CONFIG_PATH)"),
        ("--cflags", "compiler flags"),
        ("--libs", "linker flags"),
        ("--version", "the package version"),
    ]:
        parser.add_argument(flag, action="append_const", const=flag, dest="asked", help=text)
    args = parser.parse_args(argv)
    if not args.asked:
        parser.print_help(sys.stderr)
        return 2
    libdir = _paths.get_lib_dir()
    for flag in args.asked:
        if flag == "--includedir":
            print(_paths.get_include())
        elif flag == "--libdir":
            print(libdir)
        elif flag == "--libfile":
            print(_paths.get_library())
        elif flag == "--cmakedir":
            print(_paths.get_cmake_dir())
        elif flag == "--pkgconfigdir":
            print(_paths.get_pkgconfig_dir())
        elif flag == "--cflags":
            print(f"-I{_paths.get_include()}")
        elif flag == "--libs":
            print(f"-L{libdir} -lhurray -Wl,-rpath,{libdir}")
        elif flag == "--version":
            from . import __version__

            print(__version__)
    return 0


if __name__ == "__main__":
    sys.exit(main())
