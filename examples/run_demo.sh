#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The README's demo: swap one NumPy array between NumPy, TVM FFI and JAX
# through Hurray buffers, zero-copy, and show it is freed exactly once.
#
#   bash examples/run_demo.sh
#
# From a fresh clone, as root on Debian/Ubuntu it installs what is missing
# (cmake, g++, python3-venv / python3-dev with apt-get; NumPy, apache-tvm-ffi
# and jax[cpu] with pip into <repo>/.venv, or $HURRAY_VENV), builds libhurray
# and the hurray Python module (pip install ./python), then runs
# examples/swap_tensors.py. JAX is optional: without it a second NumPy view
# takes its place. Each step prints a line with the seconds so far; the module
# is rebuilt only when its sources changed since the last build into this venv.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/.." && pwd)"
venv="${HURRAY_VENV:-$repo/.venv}"
# shellcheck source=../python/scripts/env.sh
. "$repo/python/scripts/env.sh"

t0=$(date +%s)
step() { hurray_py_log "step $1/5 ($(($(date +%s) - t0)) s): $2"; }

step 1 "checking the toolchain and the venv $venv"
hurray_py_env "$venv"
step 2 "NumPy and apache-tvm-ffi (pip; a download only on the first run)"
"$HURRAY_PY" -m pip install -q "numpy>=2.1" apache-tvm-ffi >&2
step 3 "JAX (optional)"
if ! "$HURRAY_PY" -c 'import jax' >/dev/null 2>&1; then
  hurray_py_log "installing jax[cpu]"
  timeout 900 "$HURRAY_PY" -m pip install -q "jax[cpu]" >&2 \
    || hurray_py_log "jax[cpu] did not install: a second NumPy view stands in for JAX"
fi
step 4 "libhurray and the hurray module"
hurray_py_install_module_if_changed "$repo"
step 5 "the swap (examples/swap_tensors.py)"
echo >&2
exec "$HURRAY_PY" "$repo/examples/swap_tensors.py"
