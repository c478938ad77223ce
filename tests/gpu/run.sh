#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Real-GPU suite for libhurray's CUDA back end: builds libhurray (Release)
# and the suite (tests/gpu/gpu_suite.cc, gpu_suite_strided.cc and
# gpu_suite_ipc.cc), then runs it on the NVIDIA GPU(s) of this machine and
# prints a summary. Needs the CUDA toolkit (>= 12, for cuda.h and
# the stub libcuda.so) and g++; no network. With CMake >= 3.25 and a build
# tool for it (Ninja when `ninja` is there or `make` is not: the lent GPU
# machines may have cmake and ninja only; else make) the library is built by
# CMake; without them (or with HURRAY_GPU_NO_CMAKE=1) by plain g++ command
# lines over the sources CMakeLists.txt lists (the fallback).
#
#   bash tests/gpu/run.sh               build and run
#   bash tests/gpu/run.sh --build-only  build only (works without a GPU: the
#                                       suite links the toolkit's stub libcuda)
#
# Environment: CUDA_HOME (default /usr/local/cuda), CXX (default g++),
# HURRAY_GPU_BUILD_DIR (default /tmp/build-gpu-real), HURRAY_GPU_JOBS (default:
# nproc), HURRAY_GPU_NO_CMAKE=1
# (force the fallback). Every log (build steps, nvidia-smi, the suite's
# output, a summary) lands in $HURRAY_GPU_BUILD_DIR/logs. Time limits: 180 s
# per build step and 300 s for the suite, each cut to what is left of 8
# minutes from the start, so the whole run ends within 8 minutes.
# Exit status: 0 all passed, 1 a check failed, 2 build error, 77 no usable
# GPU or no driver (the reason is printed), 124 time limit hit.
set -uo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
BUILD=${HURRAY_GPU_BUILD_DIR:-/tmp/build-gpu-real}
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
CXX=${CXX:-g++}
JOBS=${HURRAY_GPU_JOBS:-$(nproc 2>/dev/null || echo 2)}
LOGS=$BUILD/logs
start=$(date +%s)
DEADLINE=$((start + 480))  # 8 minutes in all
# Seconds a step may take: its own limit $1, or what is left before the
# deadline if that is less (at least 1, so timeout still runs it and fails).
limit() {
  local left=$((DEADLINE - $(date +%s)))
  [ "$left" -lt 1 ] && left=1
  if [ "$left" -lt "$1" ]; then echo "$left"; else echo "$1"; fi
}
mkdir -p "$LOGS" && rm -f "$LOGS"/* || exit 2
: >"$LOGS/summary.txt"

note() { echo "$*" | tee -a "$LOGS/summary.txt"; }
# Runs a build step under a time limit, its output in $LOGS/<name>.log (shown
# on failure).
step() {
  local name=$1
  shift
  timeout "$(limit 180)" "$@" >"$LOGS/$name.log" 2>&1
  local rc=$?
  if [ "$rc" -ne 0 ]; then
    tail -n 60 "$LOGS/$name.log" >&2
    note "build step '$name' failed (exit $rc; log: $LOGS/$name.log)"
    [ "$rc" -eq 124 ] && exit 124
    exit 2
  fi
}

stubs=""
for d in "$CUDA_HOME/lib64/stubs" "$CUDA_HOME/lib/stubs" "$CUDA_HOME/targets/x86_64-linux/lib/stubs" \
         "$CUDA_HOME/targets/sbsa-linux/lib/stubs"; do
  if [ -f "$d/libcuda.so" ]; then stubs=$d; break; fi
done
if [ ! -f "$CUDA_HOME/include/cuda.h" ] || [ ! -f "$CUDA_HOME/include/cudaTypedefs.h" ] || [ -z "$stubs" ]; then
  note "run.sh: no CUDA toolkit at CUDA_HOME=$CUDA_HOME (need cuda.h and cudaTypedefs.h in \$CUDA_HOME/include, and lib64/stubs/libcuda.so)"
  exit 2
fi
{
  echo "date: $(date -u)"
  echo "host: $(uname -a)"
  echo "source: $ROOT ($(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo 'no git'))"
  echo "compiler: $("$CXX" --version 2>&1 | head -n 1)"
  echo "CUDA toolkit: $CUDA_HOME ($(grep -m1 -o '"version" *: *"[^"]*"' "$CUDA_HOME/version.json" 2>/dev/null || echo 'version unknown'))"
  echo "cmake: $(cmake --version 2>/dev/null | head -n 1 || true)"
} >"$LOGS/environment.txt"

# CMake 3.25 or newer, unless told to use the fallback.
use_cmake=0
if [ "${HURRAY_GPU_NO_CMAKE:-0}" != 1 ] && command -v cmake >/dev/null 2>&1; then
  v=$(cmake --version 2>/dev/null | head -n 1 | grep -oE '[0-9]+\.[0-9]+' | head -n 1)
  major=${v%%.*}
  minor=${v#*.}
  if [ -n "$v" ] && { [ "$major" -gt 3 ] || { [ "$major" -eq 3 ] && [ "$minor" -ge 25 ]; }; }; then
    use_cmake=1
  fi
fi
# The generator: Ninja when ninja is there or make is not; neither: the
# fallback.
generator=()
if [ "$use_cmake" = 1 ]; then
  if command -v ninja >/dev/null 2>&1; then
    generator=(-G Ninja)
  elif command -v make >/dev/null 2>&1 || command -v gmake >/dev/null 2>&1; then
    generator=(-G "Unix Makefiles")
  else
    note "run.sh: neither ninja nor make is installed; building without CMake"
    use_cmake=0
  fi
fi

if [ "$use_cmake" = 1 ]; then
  # One build directory per generator: CMake refuses to switch one.
  case ${generator[1]} in Ninja) LIBDIR=$BUILD/cmake-ninja ;; *) LIBDIR=$BUILD/cmake ;; esac
  GEN_INCLUDE=$LIBDIR/include
  note "== building libhurray with CMake (${generator[1]}) in $LIBDIR"
  step configure cmake -S "$ROOT" -B "$LIBDIR" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release -DHURRAY_BUILD_TESTS=OFF \
    -DHURRAY_BUILD_BENCHMARKS=OFF -DHURRAY_WITH_CUDA=ON -DHURRAY_WITH_HIP=OFF \
    -DHURRAY_CUDA_INCLUDE_DIR="$CUDA_HOME/include"
  step build cmake --build "$LIBDIR" -j "$JOBS" --target hurray
else
  # The fallback: what CMakeLists.txt does for a Release libhurray with CUDA
  # only, as plain compiler command lines. The sources are the ones
  # add_library(hurray SHARED ...) and target_sources(hurray PRIVATE ...)
  # list, so the two cannot drift apart.
  LIBDIR=$BUILD/fallback
  GEN_INCLUDE=$LIBDIR/include
  note "== building libhurray without CMake (fallback) in $LIBDIR"
  mkdir -p "$GEN_INCLUDE/hurray" "$LIBDIR/obj" "$LIBDIR/generated" || exit 2
  sources=$(awk '/^(add_library\(hurray SHARED|target_sources\(hurray PRIVATE)/ {on=1; next}
    on && /^[ \t]*#/ {next}
    on {f=$1; done_=index($0, ")") > 0; sub(/\).*/, "", f); if (f != "") print f; if (done_) on=0}' \
    "$ROOT/CMakeLists.txt")
  version=$(grep -m1 -oE 'project\(hurray VERSION [0-9]+\.[0-9]+\.[0-9]+' "$ROOT/CMakeLists.txt" | awk '{print $3}')
  if [ -z "$sources" ] || [ -z "$version" ]; then
    note "run.sh: could not read the library's sources or version from CMakeLists.txt"
    exit 2
  fi
  IFS=. read -r vmaj vmin vpat <<<"$version"
  sed -e "s/@PROJECT_VERSION_MAJOR@/$vmaj/g" -e "s/@PROJECT_VERSION_MINOR@/$vmin/g" \
      -e "s/@PROJECT_VERSION_PATCH@/$vpat/g" -e "s/@PROJECT_VERSION@/$version/g" \
      "$ROOT/cmake/version.h.in" >"$GEN_INCLUDE/hurray/version.h" || exit 2
  # The PTX kernel as a string (CMake's configure_file of the same template).
  awk -v ptx="$ROOT/src/device/cuda/strided_kernel.ptx" '{
      m = "@HURRAY_STRIDED_KERNEL_PTX@"; i = index($0, m)
      if (i == 0) { print; next }
      printf "%s", substr($0, 1, i - 1)
      while ((getline line < ptx) > 0) print line
      print substr($0, i + length(m))
    }' "$ROOT/src/device/cuda/strided_kernel_ptx.cc.in" >"$LIBDIR/generated/strided_kernel_ptx.cc" || exit 2
  sources="$sources $LIBDIR/generated/strided_kernel_ptx.cc"
  flags=(-O2 -DNDEBUG -std=c++17 -fPIC -fvisibility=hidden -fvisibility-inlines-hidden
         -Wall -Wextra -Wpedantic -fno-exceptions -fno-rtti
         -DHURRAY_BUILDING_LIBRARY -DHURRAY_WITH_CUDA=1
         -I"$ROOT/include" -I"$GEN_INCLUDE" -I"$ROOT/src" -isystem "$CUDA_HOME/include")
  # One compiler per source, at most $JOBS at once; a source whose object is
  # missing afterwards failed (the compiler removes its output on errors).
  compile_all() {
    local s o missing=0
    rm -f "$LIBDIR"/obj/*.o
    for s in $sources; do
      case $s in /*) ;; *) s=$ROOT/$s ;; esac
      o=$LIBDIR/obj/$(echo "${s#"$ROOT"/}" | tr '/' '_').o
      echo "$CXX ${flags[*]} -c $s -o $o"
      timeout "$(limit 180)" "$CXX" "${flags[@]}" -c "$s" -o "$o" &
      while [ "$(jobs -rp | wc -l)" -ge "$JOBS" ]; do wait -n; done
    done
    wait
    for s in $sources; do
      case $s in /*) ;; *) s=$ROOT/$s ;; esac
      o=$LIBDIR/obj/$(echo "${s#"$ROOT"/}" | tr '/' '_').o
      [ -f "$o" ] || { echo "not compiled: $s"; missing=1; }
    done
    return $missing
  }
  if ! compile_all >"$LOGS/compile.log" 2>&1; then
    tail -n 60 "$LOGS/compile.log" >&2
    note "build step 'compile' failed (log: $LOGS/compile.log)"
    exit 2
  fi
  soname=libhurray.so.$vmaj.$vmin
  step link "$CXX" -shared -o "$LIBDIR/libhurray.so.$version" "$LIBDIR"/obj/*.o \
    -Wl,-soname,"$soname" -Wl,--no-undefined -Wl,-z,nodelete \
    -Wl,--version-script="$ROOT/cmake/hurray.map" -ldl -pthread
  ln -sf "libhurray.so.$version" "$LIBDIR/$soname"
  ln -sf "$soname" "$LIBDIR/libhurray.so"
fi

note "== building the suite"
# Linked against the stub only to resolve the few driver calls the suite
# makes itself (streams, contexts); no rpath to the stub, so at run time the
# loader finds the real libcuda.so.1. libhurray itself links no CUDA library.
step build-suite "$CXX" -O2 -std=c++17 -pthread \
  -I"$ROOT/include" -I"$GEN_INCLUDE" -I"$CUDA_HOME/include" \
  "$ROOT/tests/gpu/gpu_suite.cc" "$ROOT/tests/gpu/gpu_suite_strided.cc" \
  "$ROOT/tests/gpu/gpu_suite_ipc.cc" -o "$BUILD/gpu_suite" \
  -L"$LIBDIR" -lhurray -Wl,-rpath,"$LIBDIR" -L"$stubs" -lcuda

if [ "${1:-}" = "--build-only" ]; then
  note "built $BUILD/gpu_suite (logs: $LOGS)"
  exit 0
fi

# Without the NVIDIA driver the suite cannot even start (it links libcuda.so.1).
# (ldd's output is read whole first: with pipefail, `ldd | grep -q` fails
# whenever grep's early exit kills ldd with SIGPIPE.)
deps=$(ldd "$BUILD/gpu_suite" 2>/dev/null || true)
if [[ $deps == *"libcuda.so.1 => not found"* ]]; then
  note "SKIP: no NVIDIA driver on this machine (libcuda.so.1 is not on the loader's path)"
  exit 77
fi

if command -v nvidia-smi >/dev/null 2>&1; then
  timeout 30 nvidia-smi >"$LOGS/nvidia-smi.txt" 2>&1
  timeout 30 nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>&1 |
    tee -a "$LOGS/summary.txt"
fi
suite_limit=$(limit 300)
note "== running (limit $suite_limit s)"
timeout "$suite_limit" "$BUILD/gpu_suite" 2>&1 | tee "$LOGS/suite.log"
rc=${PIPESTATUS[0]}
note "== summary: exit $rc after $(( $(date +%s) - start )) s in all (build included); logs in $LOGS"
grep -E '^FAIL|passed, [0-9]+ failed|^SKIP' "$LOGS/suite.log" >>"$LOGS/summary.txt"
exit "$rc"
