#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The cross stage of the test command: libhurray and its C test suite
# cross-built for other processors with Debian's cross compilers and run
# under qemu-user (README, Prerequisites: 64-bit Linux; x86-64 runs all of
# tests/run_all.sh, these run this).
#
#   bash tests/cross/run.sh [ARCH...]     ARCH: aarch64, s390x (default: both)
#
# For each ARCH, in build/cross-ARCH: configure with
# cmake/toolchains/<ARCH>-linux-gnu.cmake (Debug with no debug information,
# which nothing here reads and which costs build time; tests and examples on,
# GoogleTest built for the target from /usr/src/googletest, warnings as
# errors), build, fail on any "warning" line of the build log (the linker's
# included), then run ctest: every test runs under qemu-<ARCH>-static -L
# /usr/<ARCH>-linux-gnu (CMAKE_CROSSCOMPILING_EMULATOR; no binfmt_misc
# needed), except what qemu-user cannot run (below).
#   aarch64  NVIDIA Grace and AWS Graviton hosts: the CUDA and HIP back ends
#            are compiled in (against the build machine's headers when it has
#            them; they are the same for every processor) and the device
#            suite runs against the fake drivers (ctest label gpu_fake).
#   s390x    64-bit and big-endian: the byte order no other target shows;
#            no GPU vendor ships for it, so the back ends stay off.
# Packages: `bash tests/deps.sh cross` (the compilers and qemu-user-static).
#
# Left out under qemu-user, each for a reason of the emulator, never of the
# library (ctest -E, by name: a GoogleTest case carries its program's labels,
# so no label can single it out):
#   ipc_message.IpcSocket.TooManyFdsAreClosed
#       sends more fds than the receiver's control buffer holds and checks the
#       kernel closed the ones that did not fit (MSG_CTRUNC). qemu-user
#       receives into a host buffer larger than the program's and truncates
#       the message itself without closing the extra fds, so one fd is always
#       left over under qemu; natively the test passes (dev, asan, tsan).
#   gpu_fake.{Cuda,Hip}PoolIpc.ChildImportsReadsWritesAndReturns,
#   gpu_fake.{Cuda,Hip}PoolIpc.PoolFdTravelsOncePerConnection,
#   gpu_fake.{Cuda,Hip}PoolIpc.KindSixAfterAFailedKindFiveImports,
#   gpu_fake.{Cuda,Hip}PoolIpc.TwoConnectionsShareOneImport,
#   gpu_fake.{Cuda,Hip}PoolIpc.ClosedUnreadConnectionDropsItsPool and
#   gpu_fake.CudaPoolIpc.KindSixAfterTheReceiversContextResetImports
#       count that a pool's fd travels once per connection, or what the
#       receiver keeps for a connection, which the library
#       knows by the socket's SO_COOKIE. qemu-user does not implement
#       getsockopt(SO_COOKIE) (EINVAL, checked with a static aarch64 program),
#       so under qemu every message carries the fd again (the correct
#       fallback, with no connection to remember) and the counts differ;
#       natively all pass (dev, asan, tsan).
# Nothing is left out by label: every label (core, gpu_fake, the unlabelled
# packaging and example tests) runs.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.." || exit 2
ROOT=$(pwd)
JOBS=${HURRAY_JOBS:-2}
ARCHES=("$@")
[ ${#ARCHES[@]} -gt 0 ] || ARCHES=(aarch64 s390x)

QEMU_EXCLUDE='^ipc_message\.IpcSocket\.TooManyFdsAreClosed$|^gpu_fake\.(Cuda|Hip)PoolIpc\.(ChildImportsReadsWritesAndReturns|PoolFdTravelsOncePerConnection|KindSixAfterAFailedKindFiveImports|TwoConnectionsShareOneImport|ClosedUnreadConnectionDropsItsPool|KindSixAfterTheReceiversContextResetImports)$'

log() { printf 'tests/cross/run.sh: %s\n' "$*" >&2; }

# cross ARCH: configure, build, check for warnings, ctest. Returns non-zero
# on the first step that fails.
cross() {
  local arch=$1 triplet=$1-linux-gnu build=$ROOT/build/cross-$1 start gpu=() t0
  local toolchain=$ROOT/cmake/toolchains/$triplet.cmake
  [ -f "$toolchain" ] || { log "no toolchain file $toolchain"; return 2; }
  command -v "$triplet-g++" >/dev/null && command -v "qemu-$arch-static" >/dev/null ||
    { log "$triplet-g++ or qemu-$arch-static missing (bash tests/deps.sh cross)"; return 2; }
  start=$(date +%s)
  if [ "$arch" = aarch64 ]; then
    # The GPU back ends compile against headers only. The HIP headers sit
    # in /usr/include, which must not reach the cross compiler whole (the
    # build machine's libc headers are there): a directory holding only a
    # link to hip/ stands in for it.
    local cuda=${CUDA_HOME:-${CUDA_PATH:-/usr/local/cuda}}/include
    if [ -f "$cuda/cudaTypedefs.h" ]; then
      gpu+=(-DHURRAY_WITH_CUDA=ON "-DHURRAY_CUDA_INCLUDE_DIR=$cuda")
    else
      gpu+=(-DHURRAY_WITH_CUDA=OFF)
    fi
    if [ -f /usr/include/hip/hip_runtime_api.h ]; then
      mkdir -p "$build/vendor-include"
      ln -sfn /usr/include/hip "$build/vendor-include/hip"
      gpu+=(-DHURRAY_WITH_HIP=ON "-DHURRAY_HIP_INCLUDE_DIR=$build/vendor-include")
    else
      gpu+=(-DHURRAY_WITH_HIP=OFF)
    fi
  else
    gpu+=(-DHURRAY_WITH_CUDA=OFF -DHURRAY_WITH_HIP=OFF)
  fi
  echo "== $arch: configure ($toolchain)"
  cmake -S "$ROOT" -B "$build" -G Ninja \
    "-DCMAKE_TOOLCHAIN_FILE=$toolchain" \
    -DCMAKE_BUILD_TYPE=Debug "-DCMAKE_C_FLAGS_DEBUG=-O0" "-DCMAKE_CXX_FLAGS_DEBUG=-O0" \
    -DCMAKE_COMPILE_WARNING_AS_ERROR=ON \
    -DHURRAY_BUILD_TESTS=ON -DHURRAY_BUILD_EXAMPLES=ON \
    -DHURRAY_BUILD_BENCHMARKS=OFF -DHURRAY_BUILD_PYTHON=OFF \
    -DHURRAY_GTEST_SOURCE_DIR=/usr/src/googletest \
    "${gpu[@]}" || return 1
  echo "== $arch: build (-j$JOBS)"
  t0=$(date +%s)
  cmake --build "$build" -j "$JOBS" 2>&1 | tee "$build/build.log"
  [ "${PIPESTATUS[0]}" -eq 0 ] || { log "$arch: the build failed"; return 1; }
  if grep -i 'warning' "$build/build.log"; then
    log "$arch: the build printed warnings (above); it must print none"
    return 1
  fi
  echo "== $arch: built in $(($(date +%s) - t0)) s, no warnings"
  echo "== $arch: ctest under $(command -v "qemu-$arch-static") (left out: $QEMU_EXCLUDE)"
  t0=$(date +%s)
  ctest --test-dir "$build" -j "$JOBS" --output-on-failure --no-tests=error \
    -E "$QEMU_EXCLUDE" || { log "$arch: ctest failed"; return 1; }
  echo "== $arch: ctest in $(($(date +%s) - t0)) s; $arch in all $(($(date +%s) - start)) s"
}

rc=0
for arch in "${ARCHES[@]}"; do
  case "$arch" in
    aarch64|s390x) cross "$arch" || rc=1 ;;
    *) log "unknown ARCH '$arch' (known: aarch64 s390x)"; rc=2 ;;
  esac
done
exit "$rc"
