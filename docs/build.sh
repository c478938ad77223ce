#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The API reference, generated from the sources:
#
#   bash docs/build.sh [OUT]        (OUT defaults to build/docs)
#
# writes OUT/html/index.html: the C and C++ headers through Doxygen
# (docs/Doxyfile; their plain C comments shown as documentation by
# docs/doxygen_filter.py) and the Python package through pydoc, into
# OUT/html/python/. Then tests/docs/check_reference.py checks that every
# public name (each hurray_* function, type and HURRAY_* constant, each
# hurray:: class, each name of hurray.__all__) is in the output with its
# documentation, and exits non-zero if one is not.
#
# Doxygen comes from Debian (tests/deps.sh docs). The Python pages need the
# hurray module: HURRAY_DOCS_PYTHON names a python that imports it (the test
# command passes its venv's); otherwise it is built into .venv (or
# $HURRAY_VENV) as the demo does, only when its sources changed.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
out="$(mkdir -p "${1:-$repo/build/docs}" && cd "${1:-$repo/build/docs}" && pwd)"
cd "$repo"
# shellcheck source=../python/scripts/env.sh
. "$repo/python/scripts/env.sh"

bash tests/deps.sh docs
version=$(sed -n 's/^project(hurray VERSION \([0-9.]*\).*/\1/p' CMakeLists.txt)
IFS=. read -r major minor patch <<< "$version"

# hurray/version.h as the build would generate it (cmake/version.h.in).
mkdir -p "$out/include/hurray"
sed -e "s/@PROJECT_VERSION_MAJOR@/$major/; s/@PROJECT_VERSION_MINOR@/$minor/" \
    -e "s/@PROJECT_VERSION_PATCH@/$patch/; s/@PROJECT_VERSION@/$version/" \
    cmake/version.h.in > "$out/include/hurray/version.h"

hurray_py_log "Doxygen: the C and C++ headers"
rm -rf "$out/html" "$out/xml"
HURRAY_DOCS_OUT="$out" HURRAY_DOCS_VERSION="$version" doxygen docs/Doxyfile

hurray_py_log "pydoc: the Python package"
if [ -n "${HURRAY_DOCS_PYTHON:-}" ]; then
  HURRAY_PY="$HURRAY_DOCS_PYTHON"
else
  hurray_py_env "${HURRAY_VENV:-$repo/.venv}"
  hurray_py_install_module_if_changed "$repo"
fi
mkdir -p "$out/html/python"
modules=$("$HURRAY_PY" -c 'import pkgutil, hurray
print(" ".join(["hurray"] + ["hurray." + m.name for m in pkgutil.iter_modules(hurray.__path__)]))')
# shellcheck disable=SC2086  # one word per module
(cd "$out/html/python" && "$HURRAY_PY" -m pydoc -w $modules >/dev/null)

python3 tests/docs/check_reference.py "$out" --python "$HURRAY_PY"
hurray_py_log "the reference: $out/html/index.html"
