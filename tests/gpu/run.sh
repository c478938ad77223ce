#!/usr/bin/env bash
# Real-GPU suite for libhurray's CUDA back end: builds libhurray (Release)
# and tests/gpu/gpu_suite.cc, then runs it on the NVIDIA GPU(s) of this
# machine under a 5-minute limit and prints a summary. Needs the CUDA
# toolkit (>= 12, for cuda.h and the stub libcuda.so), CMake >= 3.25 and g++.
#
#   bash tests/gpu/run.sh               build and run
#   bash tests/gpu/run.sh --build-only  build only (works without a GPU: the
#                                       suite links the toolkit's stub libcuda)
#
# Environment: CUDA_HOME (default /usr/local/cuda), HURRAY_GPU_BUILD_DIR
# (default /tmp/build-gpu-real). Exit status: 0 all passed, 1 a check failed,
# 2 build error, 77 no usable GPU (the suite says why), 124 time limit hit.
set -uo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BUILD=${HURRAY_GPU_BUILD_DIR:-/tmp/build-gpu-real}
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
JOBS=$(nproc 2>/dev/null || echo 2)
start=$(date +%s)

stubs=""
for d in "$CUDA_HOME/lib64/stubs" "$CUDA_HOME/lib/stubs" "$CUDA_HOME/targets/x86_64-linux/lib/stubs"; do
  if [ -f "$d/libcuda.so" ]; then stubs=$d; break; fi
done
if [ ! -f "$CUDA_HOME/include/cuda.h" ] || [ -z "$stubs" ]; then
  echo "run.sh: no CUDA toolkit at CUDA_HOME=$CUDA_HOME (need include/cuda.h and lib64/stubs/libcuda.so)" >&2
  exit 2
fi

echo "== building libhurray in $BUILD"
cmake -S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release -DHURRAY_BUILD_TESTS=OFF \
  -DHURRAY_BUILD_BENCHMARKS=OFF -DHURRAY_WITH_CUDA=ON \
  -DHURRAY_CUDA_INCLUDE_DIR="$CUDA_HOME/include" >"$BUILD.configure.log" 2>&1 ||
  { cat "$BUILD.configure.log" >&2; exit 2; }
cmake --build "$BUILD" -j "$JOBS" --target hurray >"$BUILD.build.log" 2>&1 ||
  { cat "$BUILD.build.log" >&2; exit 2; }

echo "== building the suite"
# Linked against the stub only to resolve the few driver calls the suite
# makes itself (streams, contexts); no rpath to the stub, so at run time the
# loader finds the real libcuda.so.1. libhurray itself links no CUDA library.
g++ -O2 -std=c++17 -pthread \
  -I"$ROOT/include" -I"$BUILD/include" -I"$CUDA_HOME/include" \
  "$ROOT/tests/gpu/gpu_suite.cc" -o "$BUILD/gpu_suite" \
  -L"$BUILD" -lhurray -Wl,-rpath,"$BUILD" -L"$stubs" -lcuda || exit 2

if [ "${1:-}" = "--build-only" ]; then
  echo "built $BUILD/gpu_suite"
  exit 0
fi

# Without the NVIDIA driver the suite cannot even start (it links libcuda.so.1).
if ldd "$BUILD/gpu_suite" 2>/dev/null | grep -q 'libcuda.so.1 => not found'; then
  echo "SKIP: no NVIDIA driver on this machine (libcuda.so.1 is not on the loader's path)"
  exit 77
fi

echo "== running (limit 300 s)"
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
timeout 300 "$BUILD/gpu_suite"
rc=$?
echo "== summary: exit $rc after $(( $(date +%s) - start )) s in all (build included)"
exit $rc
