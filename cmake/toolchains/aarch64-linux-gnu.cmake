# SPDX-License-Identifier: Apache-2.0
# Cross build for 64-bit Arm Linux (Grace, Graviton) with Debian's
# g++-aarch64-linux-gnu, run under qemu-aarch64-static (Debian's
# qemu-user-static; `bash tests/deps.sh cross` installs both):
#   cmake -S . -B build/cross-aarch64 -G Ninja \
#     -DCMAKE_TOOLCHAIN_FILE=cmake/toolchains/aarch64-linux-gnu.cmake
# What the cross stage builds and runs: tests/cross/run.sh.
set(HURRAY_CROSS_TRIPLET aarch64-linux-gnu)
set(HURRAY_CROSS_PROCESSOR aarch64)
set(HURRAY_CROSS_QEMU qemu-aarch64-static)
include("${CMAKE_CURRENT_LIST_DIR}/debian-cross.cmake")
