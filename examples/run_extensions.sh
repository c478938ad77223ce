#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Builds and tests the PyTorch and TVM FFI extension examples against an
# INSTALLED libhurray:
#
#   bash examples/run_extensions.sh [VENV [BUILD_DIR]]
#
#   VENV       Python venv to use (default: $HURRAY_VENV, else <repo>/.venv);
#              created if missing. torch, apache-tvm-ffi, numpy and pytest are
#              pip-installed into it only when they do not import (torch from
#              PyPI is large: it is installed once and reused).
#   BUILD_DIR  a libhurray build tree (default: <repo>/build/lib, which is
#              configured as the README's library-only build, Release with the
#              tests off, when it is not configured yet: users install that).
#
# Steps: build libhurray in BUILD_DIR, `cmake --install BUILD_DIR --prefix`
# into a fresh temporary prefix (removed at exit, so the modules built here
# load only during this run; set HURRAY_PREFIX to install into a prefix that
# is kept), build examples/torch_extension (setup.py)
# and examples/tvm_ffi_extension (CMake, find_package(hurray)) against that
# prefix into <repo>/build/extensions/, check that both load libhurray from
# the prefix, then run both pytest suites. Exits non-zero if anything fails,
# and also if a suite ran no test (pytest exit status 5).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/.." && pwd)"
venv="${1:-${HURRAY_VENV:-$repo/.venv}}"
build="${2:-$repo/build/lib}"
out="$repo/build/extensions"
abs() { case "$1" in /*) printf '%s\n' "$1" ;; *) printf '%s\n' "$PWD/$1" ;; esac; }
venv=$(abs "$venv")
build=$(abs "$build")
# shellcheck source=../python/scripts/env.sh
. "$repo/python/scripts/env.sh"
log() { printf '[extensions] %s\n' "$*" >&2; }

# --- Python: venv, Python.h, and the frameworks (only what is missing) ------
hurray_py_env "$venv"
py=$HURRAY_PY
need_pip() { ! "$py" -c "import $1" >/dev/null 2>&1; }
pkgs=()
need_pip numpy && pkgs+=("numpy")
need_pip pytest && pkgs+=("pytest")
need_pip setuptools && pkgs+=("setuptools")
need_pip tvm_ffi && pkgs+=("apache-tvm-ffi")
if [ ${#pkgs[@]} -gt 0 ]; then
  log "pip install ${pkgs[*]}"
  "$py" -m pip install -q "${pkgs[@]}"
fi
if need_pip torch; then
  log "pip install torch (large; installed once into $venv)"
  "$py" -m pip install -q torch
fi
"$py" -c 'import torch, tvm_ffi, numpy; print("torch", torch.__version__, "| tvm_ffi", tvm_ffi.__version__, "| numpy", numpy.__version__)'

# --- libhurray: build, then install into a fresh prefix ----------------------
if [ ! -f "$build/CMakeCache.txt" ]; then
  if [ "$build" = "$repo/build/lib" ]; then
    cmake -S "$repo" -B "$build" -DCMAKE_BUILD_TYPE=Release -DHURRAY_BUILD_TESTS=OFF
  else
    log "$build is not a configured libhurray build tree"; exit 2
  fi
fi
cmake --build "$build" --target hurray
if [ -n "${HURRAY_PREFIX:-}" ]; then
  prefix=$HURRAY_PREFIX  # kept afterwards: the built modules stay usable
  mkdir -p "$prefix"
  prefix="$(cd "$prefix" && pwd)"
else
  prefix="$(mktemp -d "${TMPDIR:-/tmp}/hurray-prefix.XXXXXX")"
  trap 'rm -rf "$prefix"' EXIT
fi
cmake --install "$build" --prefix "$prefix" >/dev/null
log "libhurray installed into $prefix"

# Each built module must resolve libhurray inside the prefix (its RUNPATH),
# not from the build tree.
check_links_prefix() {
  local so=$1 where
  where=$(ldd "$so" | awk '/libhurray\.so/ {print $3}')
  case "$where" in
    "$prefix"/*) log "$(basename "$so") loads $where" ;;
    *) log "$so loads libhurray from '${where:-nowhere}', not from $prefix"; return 1 ;;
  esac
}

# --- PyTorch extension (setup.py, torch.utils.cpp_extension) -----------------
log "building examples/torch_extension"
mkdir -p "$out/torch"
rm -f "$out"/torch/*.so
(cd "$repo/examples/torch_extension" &&
  HURRAY_PREFIX="$prefix" MAX_JOBS="${HURRAY_JOBS:-2}" "$py" setup.py -q build_ext \
    --build-lib "$out/torch" --build-temp "$out/torch/tmp")
torch_so=$(ls "$out"/torch/hurray_torch_example*.so)
check_links_prefix "$torch_so"

# --- TVM FFI module (CMake: find_package(hurray), find_package(tvm_ffi)) -----
log "building examples/tvm_ffi_extension"
rm -rf "$out/tvm_ffi"
cmake -S "$repo/examples/tvm_ffi_extension" -B "$out/tvm_ffi" \
  -DCMAKE_BUILD_TYPE=Release \
  -DCMAKE_PREFIX_PATH="$prefix" \
  -Dtvm_ffi_DIR="$("$py" -m tvm_ffi.config --cmakedir)" \
  -DPython_EXECUTABLE="$py" >/dev/null
cmake --build "$out/tvm_ffi"
tvm_so=$out/tvm_ffi/hurray_tvm_example.so
check_links_prefix "$tvm_so"

# --- tests ------------------------------------------------------------------
run_pytest() {
  local rc=0
  "$@" || rc=$?
  if [ "$rc" -eq 5 ]; then log "no test ran: $*"; return 1; fi
  return "$rc"
}
failed=0
log "pytest examples/torch_extension"
PYTHONPATH="$out/torch${PYTHONPATH:+:$PYTHONPATH}" \
  run_pytest "$py" -m pytest -p no:cacheprovider "$repo/examples/torch_extension" || failed=1
log "pytest examples/tvm_ffi_extension"
HURRAY_TVM_EXAMPLE="$tvm_so" \
  run_pytest "$py" -m pytest -p no:cacheprovider "$repo/examples/tvm_ffi_extension" || failed=1
exit "$failed"
