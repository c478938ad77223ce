# SPDX-License-Identifier: Apache-2.0
# Shared part of the toolchain files beside it: a cross build with Debian's
# cross compilers (g++-<triplet>, whose libraries and headers live in the
# sysroot /usr/<triplet>), run under qemu-user. The including file sets
# HURRAY_CROSS_TRIPLET (aarch64-linux-gnu), HURRAY_CROSS_PROCESSOR
# (CMAKE_SYSTEM_PROCESSOR: aarch64) and HURRAY_CROSS_QEMU (qemu-aarch64-static).
#
# Programs built for the target run through CMAKE_CROSSCOMPILING_EMULATOR:
# ctest prefixes it to tests whose command is a target, gtest_discover_tests
# to its listing, and the tests' cmake -P scripts receive it as -DEMULATOR
# (tests/README.md). It is qemu-user with -L <sysroot>, so no binfmt_misc
# registration is needed; a test program that starts another program of the
# build must put the emulator before it too (tests/device/support.cc does,
# for its probe). Set CMAKE_CROSSCOMPILING_EMULATOR yourself to run the
# programs another way (or to the empty string to build only).
set(CMAKE_SYSTEM_NAME Linux)
set(CMAKE_SYSTEM_PROCESSOR "${HURRAY_CROSS_PROCESSOR}")

set(CMAKE_C_COMPILER "${HURRAY_CROSS_TRIPLET}-gcc")
set(CMAKE_CXX_COMPILER "${HURRAY_CROSS_TRIPLET}-g++")

# Libraries, headers and CMake packages come from the sysroot only (never
# the build machine's x86-64 ones); programs (pkg-config, readelf...) from
# the build machine.
set(HURRAY_CROSS_SYSROOT "/usr/${HURRAY_CROSS_TRIPLET}")
set(CMAKE_FIND_ROOT_PATH "${HURRAY_CROSS_SYSROOT}")
set(CMAKE_FIND_ROOT_PATH_MODE_PROGRAM NEVER)
set(CMAKE_FIND_ROOT_PATH_MODE_LIBRARY ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_INCLUDE ONLY)
set(CMAKE_FIND_ROOT_PATH_MODE_PACKAGE ONLY)

# binutils for the target (readelf -d and nm -D read any ELF, but the
# packaging checks then see the target's own tools).
set(CMAKE_READELF "${HURRAY_CROSS_TRIPLET}-readelf" CACHE FILEPATH "readelf for the target")
set(CMAKE_NM "${HURRAY_CROSS_TRIPLET}-nm" CACHE FILEPATH "nm for the target")

if(NOT DEFINED CMAKE_CROSSCOMPILING_EMULATOR)
  find_program(HURRAY_CROSS_QEMU_PROGRAM "${HURRAY_CROSS_QEMU}")
  if(HURRAY_CROSS_QEMU_PROGRAM)
    set(CMAKE_CROSSCOMPILING_EMULATOR "${HURRAY_CROSS_QEMU_PROGRAM};-L;${HURRAY_CROSS_SYSROOT}")
  endif()
endif()
