# SPDX-License-Identifier: Apache-2.0
# Cross build for IBM Z Linux (s390x: 64-bit and big-endian, the byte order
# x86-64 and aarch64 never show) with Debian's g++-s390x-linux-gnu, run under
# qemu-s390x-static; `bash tests/deps.sh cross` installs both.
#   cmake -S . -B build/cross-s390x -G Ninja \
#     -DCMAKE_TOOLCHAIN_FILE=cmake/toolchains/s390x-linux-gnu.cmake
set(HURRAY_CROSS_TRIPLET s390x-linux-gnu)
set(HURRAY_CROSS_PROCESSOR s390x)
set(HURRAY_CROSS_QEMU qemu-s390x-static)
include("${CMAKE_CURRENT_LIST_DIR}/debian-cross.cmake")
