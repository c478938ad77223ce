# SPDX-License-Identifier: Apache-2.0
# Sourced by python/run_tests.sh and examples/run_demo.sh (bash).
#
# hurray_py_env VENV: makes sure a C/C++ toolchain, CMake and a Python with
# venv support and headers are present (tests/deps.sh installs the missing
# ones), then creates VENV if needed, and sets
# HURRAY_PY to its python. Nothing is installed that is already there.

hurray_py_log() { printf '[hurray] %s\n' "$*" >&2; }

# hurray_apt_install PACKAGE...: the missing ones, through tests/deps.sh (the
# one script that installs system packages).
_hurray_deps_sh="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)/tests/deps.sh"
hurray_apt_install() { bash "$_hurray_deps_sh" --packages "$@"; }

hurray_py_env() {
  local venv="$1"
  bash "$_hurray_deps_sh" python || return 1

  if [ ! -x "$venv/bin/python" ]; then
    if ! python3 -m venv "$venv" >/dev/null 2>&1; then
      rm -rf "$venv"
      hurray_apt_install python3-venv || return 1
      python3 -m venv "$venv" || return 1
    fi
    "$venv/bin/python" -m pip install -q --upgrade pip >&2 || true
  fi
  # The extension needs Python.h of the venv's interpreter; Debian's python3
  # keeps it in python3-dev.
  if ! "$venv/bin/python" -c 'import os, sysconfig, sys; sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))'; then
    hurray_apt_install python3-dev || return 1
  fi
  HURRAY_PY="$venv/bin/python"
  export CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-2}"
}

# hurray_py_install_module REPO [WHEEL]: installs the `hurray` package into
# the venv: the given wheel file (as made by scripts/build_wheel.sh), or else
# built from REPO/python by pip (scikit-build-core builds libhurray and the
# extension).
hurray_py_install_module() {
  local repo="$1" wheel="${2:-}"
  # The distribution is "libhurray" (the import name stays `hurray`); it was
  # once built as "hurray", a name that belongs to an unrelated project on
  # PyPI. A local build under the old name (the one whose files include
  # hurray/_native.pyi) is removed first: both would own the `hurray` package.
  if "$HURRAY_PY" -c 'import sys, importlib.metadata as m
d = m.distribution("hurray")
sys.exit(0 if any(str(f).endswith("hurray/_native.pyi") for f in (d.files or [])) else 1)' \
      >/dev/null 2>&1; then
    hurray_py_log "removing the old local build named hurray (now libhurray)"
    "$HURRAY_PY" -m pip uninstall -q -y hurray >&2 || return 1
  fi
  if [ -n "$wheel" ]; then
    hurray_py_log "installing ${wheel##*/}"
    "$HURRAY_PY" -m pip install -q --force-reinstall --no-deps "$wheel" >&2
    return
  fi
  hurray_py_log "building libhurray and hurray._native (pip install ./python)"
  "$HURRAY_PY" -m pip install -q --force-reinstall --no-deps "$repo/python" >&2
}

# A digest of everything the hurray module is built from (the library's
# sources and build files and the Python package), to tell whether the module
# installed in a venv is current.
hurray_py_source_digest() {
  local repo="$1"
  local d dirs=()
  for d in CMakeLists.txt cmake include src python third_party; do
    [ -e "$repo/$d" ] && dirs+=("$d")
  done
  # In a git checkout: the files git tracks plus untracked ones it does not
  # ignore (a local edit or a new source counts), never what the build
  # itself writes into the tree (python/LICENSE, python/hurray-src/: both
  # git-ignored), which made the first re-run after a clone rebuild.
  if git -C "$repo" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    (cd "$repo" && git ls-files -z --cached --others --exclude-standard -- "${dirs[@]}" |
       LC_ALL=C sort -zu | xargs -0 sha256sum 2>/dev/null | sha256sum | cut -d' ' -f1)
    return
  fi
  # Elsewhere (an unpacked archive): every file, less the build's own output.
  (cd "$repo" && find "${dirs[@]}" \
     -name build -prune -o -name dist -prune -o -path '*/__pycache__' -prune \
     -o -path python/hurray-src -prune -o -path python/LICENSE -prune -o -type f -print 2>/dev/null |
     LC_ALL=C sort | xargs sha256sum | sha256sum | cut -d' ' -f1)
}

# hurray_py_install_module_if_changed REPO: hurray_py_install_module, unless
# the venv's module was built from the same sources (a digest kept in
# VENV/.hurray-source-digest) and still imports. While it builds (about 45 s
# on 2 cores) a line every 10 s says how long it has been.
hurray_py_install_module_if_changed() {
  local repo="$1" stamp digest ticker rc
  stamp="$(dirname "$(dirname "$HURRAY_PY")")/.hurray-source-digest"
  digest=$(hurray_py_source_digest "$repo")
  if [ -n "$digest" ] && [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$digest" ] &&
     "$HURRAY_PY" -c 'import hurray' >/dev/null 2>&1; then
    hurray_py_log "hurray is already built from these sources: not rebuilding (delete $stamp to force it)"
    return 0
  fi
  rm -f "$stamp"
  ( s=0; while sleep 10; do s=$((s + 10)); hurray_py_log "  still building (${s} s; about 45 s on 2 cores)"; done ) &
  ticker=$!
  rc=0
  hurray_py_install_module "$repo" || rc=$?
  kill "$ticker" 2>/dev/null || true
  wait "$ticker" 2>/dev/null || true
  if [ "$rc" -eq 0 ] && [ -n "$digest" ]; then printf '%s\n' "$digest" > "$stamp"; fi
  return "$rc"
}
