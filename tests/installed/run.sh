#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Tests the library as users get it (tests/installed/CMakeLists.txt):
#
#   bash tests/installed/run.sh [PREFIX]     (default: build/prefix)
#
# 1. builds libhurray exactly as the README's "Building only the library"
#    says (build/lib: Release, HURRAY_BUILD_TESTS=OFF) and installs it into
#    PREFIX, emptied first;
# 2. configures tests/installed against that prefix (build/installed), builds
#    it and runs its ctest suite.
# Later stages (python, extensions, bindings) use the same PREFIX.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
prefix="${1:-$repo/build/prefix}"
case "$prefix" in /*) ;; *) prefix="$PWD/$prefix" ;; esac
jobs="${HURRAY_JOBS:-2}"
cd "$repo"
echo "--- libhurray as the README builds it: build/lib -> $prefix"
cmake -S . -B build/lib -DCMAKE_BUILD_TYPE=Release -DHURRAY_BUILD_TESTS=OFF
cmake --build build/lib -j "$jobs"
rm -rf "$prefix"
cmake --install build/lib --prefix "$prefix"
grep -q -- '-O3' build/lib/compile_commands.json 2>/dev/null ||
  grep -q 'CMAKE_CXX_FLAGS_RELEASE:STRING=-O3' build/lib/CMakeCache.txt ||
  { echo "build/lib is not an -O3 Release build" >&2; exit 1; }
echo "--- tests/installed against $prefix"
cmake -S tests/installed -B build/installed -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DHURRAY_PREFIX="$prefix" -DHURRAY_LIB_BUILD_DIR="$repo/build/lib"
cmake --build build/installed -j "$jobs"
ctest --test-dir build/installed -j "$jobs" --output-on-failure --no-tests=error
