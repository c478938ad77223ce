#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The external-dlpack stage of tests/run_all.sh: libhurray and its tests
# built against the upstream DLPack 1.3 header that PyPI's apache-tvm-ffi
# ships (HURRAY_DLPACK_INCLUDE_DIR, HURRAY_UPSTREAM_DLPACK_INCLUDE_DIR), in
# build/external-dlpack, then ctest.
#
#   bash tests/packaging/external_dlpack.sh VENV
#
# VENV is a venv to pip install apache-tvm-ffi into ($HURRAY_TVM_FFI_SPEC
# names another requirement). "DLPack M.m" goes to $STAGE_NOTE when set.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.." || exit 2
VENV=${1:?usage: external_dlpack.sh VENV}
JOBS=${HURRAY_JOBS:-2}
NOTE=${STAGE_NOTE:-/dev/null}
spec=${HURRAY_TVM_FFI_SPEC:-apache-tvm-ffi}
build=build/external-dlpack

# The include directory holding dlpack/dlpack.h in the apache-tvm-ffi install.
find_upstream_dlpack() {
  local pkg_dir h
  pkg_dir=$("$VENV/bin/python" -c 'import os, tvm_ffi; print(os.path.dirname(tvm_ffi.__file__))' 2>/dev/null)
  if [ -z "$pkg_dir" ]; then
    # The module would not import here; its files are still in site-packages.
    pkg_dir=$(ls -d "$VENV"/lib/python3*/site-packages/tvm_ffi 2>/dev/null | head -n 1)
  fi
  [ -n "$pkg_dir" ] || return 1
  # Prefer the header tvm_ffi exposes to users over its vendored copy.
  h=$pkg_dir/include/dlpack/dlpack.h
  [ -f "$h" ] || h=$(find "$pkg_dir" -path '*/dlpack/dlpack.h' | sort | head -n 1)
  [ -n "$h" ] && [ -f "$h" ] || return 1
  dirname "$(dirname "$h")"
}

"$VENV/bin/pip" install -q "$spec" || exit 1
"$VENV/bin/pip" show apache-tvm-ffi | sed -n 's/^Version: /apache-tvm-ffi /p'
dir=$(find_upstream_dlpack) || { echo "no dlpack/dlpack.h in the apache-tvm-ffi install" >&2; exit 1; }
header=$dir/dlpack/dlpack.h
major=$(sed -n 's/^#define DLPACK_MAJOR_VERSION \([0-9]*\).*/\1/p' "$header")
minor=$(sed -n 's/^#define DLPACK_MINOR_VERSION \([0-9]*\).*/\1/p' "$header")
echo "upstream header: $header (DLPack $major.$minor)"
echo "DLPack $major.$minor" > "$NOTE"
if [ "$major" != 1 ] || [ "${minor:-0}" -lt 3 ]; then
  echo "expected DLPack 1.3 (or a later 1.x) from apache-tvm-ffi, found '$major.$minor'" >&2
  exit 1
fi
[ "$minor" = 3 ] || echo "note: upstream header is newer than 1.3 (1.$minor)"

cmake --preset dev -B "$build" \
  -DHURRAY_DLPACK_INCLUDE_DIR="$dir" \
  -DHURRAY_UPSTREAM_DLPACK_INCLUDE_DIR="$dir" \
  -DHURRAY_BUILD_BENCHMARKS=OFF -DHURRAY_BUILD_EXAMPLES=OFF || exit 1
# Make sure the external header really is the one compiled against: it is
# force-included ahead of hurray/dlpack.h in every translation unit.
if ! grep -qF -- "-include $header" "$build/compile_commands.json"; then
  echo "$build does not compile with -include $header" >&2
  exit 1
fi
cmake --build "$build" -j "$JOBS" || exit 1
ctest --test-dir "$build" -j "$JOBS" --output-on-failure --no-tests=error
