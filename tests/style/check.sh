#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The style stage of tests/run_all.sh. Every language of the repository is
# formatted and linted:
#   licence      every source, header, script, CMake file and Promela model
#                starts with the licence line (SPDX-License-Identifier:
#                Apache-2.0, as LICENSE)
#   C, C++       clang-format-14 as .clang-format says
#   Python       ruff format --check and ruff check, as ruff.toml says (ruff
#                pinned below, installed into the venv when missing)
#   Go           gofmt -l prints nothing; go vet over each Go module
#                (bindings/go): cgo type-checks against include/ and a
#                version.h made from cmake/version.h.in, so no built library
#                is needed
#   references   every path under src/, tests/, docs/... that a doc or comment
#                names exists, and every "§N" or quoted heading it cites is
#                there (tests/style/check_refs.py; whole checkout only)
#
#   bash tests/style/check.sh [--fix] [PATH...]
#   bash tests/style/check.sh --self-test
#
# PATHs (files or directories; default: the whole checkout) narrow the
# check; go vet runs on each module that holds one of the Go files named.
# --fix adds the missing licence lines (after a #! line; a blank line after
# it in Go files, so that it is no package comment) and rewrites in place:
# clang-format -i, ruff check --fix (safe fixes: the import order), ruff
# format, gofmt -w; what no tool can fix (most lint, go vet) is still
# printed, and the exit status is then 1. --self-test plants a badly
# formatted or linted file of each kind in a temporary tree and fails unless each check catches its own (about
# ten seconds). Files under third_party/ are never checked.
#
# Installs what is missing: the Debian packages through tests/deps.sh style
# (clang-format-14, Go, gcc, python3-venv), ruff from PyPI into the venv
# $HURRAY_VENV (default build/venv, tests/run_all.sh's; made when missing).
# Caches (Go's build cache, ruff's) go to build/style/.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.." || exit 2
ROOT=$(pwd)
SPDX='SPDX-License-Identifier: Apache-2.0'
CLANG_FORMAT=${CLANG_FORMAT:-clang-format-14}
# The ruff every machine runs: a newer one may format or lint differently.
RUFF_VERSION=0.17.6
VENV=${HURRAY_VENV:-$ROOT/build/venv}
CACHE=${HURRAY_STYLE_CACHE:-$ROOT/build/style}
fix=0
case "${1:-}" in
  --fix) fix=1; shift ;;
  --self-test) exec bash "$ROOT/tests/style/self_test.sh" ;;
esac

# The files: tracked and untracked-but-not-ignored, or every file outside
# build/ when this is no git checkout.
list_files() {
  if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    git ls-files --cached --others --exclude-standard -- "$@"
  else
    find "${@:-.}" -path ./build -prune -o -path ./.git -prune -o -type f -print | sed 's|^\./||'
  fi
}
skipped() {
  case "$1" in third_party/*|*/third_party/*) return 0 ;; esac
  return 1
}

# The comment that carries the licence line in FILE, or nothing for a file
# that needs none.
licence_comment() {
  local name=${1##*/} first
  case "$name" in
    *.c|*.cc|*.cpp|*.h|*.hpp|*.go|*.java|*.c.in|*.cc.in|*.h.in) echo "// $SPDX" ;;
    *.sh|*.py|*.pyi|*.cmake|*.cmake.in|CMakeLists.txt) echo "# $SPDX" ;;
    *.pml) echo "/* $SPDX */" ;;  # Promela (tests/model): C comments
    *)
      # An extension-less script (.ci/run): by its #! line.
      if [ "$name" = "${name%.*}" ] && IFS= read -r first < "$1" 2>/dev/null && [ "${first#\#!}" != "$first" ]; then
        echo "# $SPDX"
      fi ;;
  esac
}

is_c_family() { case "$1" in *.c|*.cc|*.cpp|*.h|*.hpp) return 0 ;; *) return 1 ;; esac; }

add_licence() {
  local f=$1 line=$2 tmp first
  tmp=$(mktemp)
  IFS= read -r first < "$f" || first=
  {
    if [ "${first#\#!}" != "$first" ]; then
      printf '%s\n%s\n' "$first" "$line"
      tail -n +2 "$f"
    else
      printf '%s\n' "$line"
      case "$f" in *.go) printf '\n' ;; esac
      cat "$f"
    fi
  } > "$tmp"
  cat "$tmp" > "$f"  # keeps the file's mode
  rm -f "$tmp"
}

# --- the tools ----------------------------------------------------------------
bash "$ROOT/tests/deps.sh" style ||
  { echo "tests/style/check.sh: clang-format-14, Go, gcc or python3-venv missing (tests/deps.sh style)" >&2; exit 1; }
command -v "$CLANG_FORMAT" >/dev/null ||
  { echo "tests/style/check.sh: $CLANG_FORMAT not found" >&2; exit 1; }
# ruff, pinned, in the venv.
if [ "$("$VENV/bin/ruff" --version 2>/dev/null)" != "ruff $RUFF_VERSION" ]; then
  [ -x "$VENV/bin/python" ] || python3 -m venv "$VENV" ||
    { echo "tests/style/check.sh: could not create a venv in $VENV" >&2; exit 1; }
  echo "installing ruff $RUFF_VERSION into $VENV"
  PIP_DISABLE_PIP_VERSION_CHECK=1 "$VENV/bin/pip" install -q "ruff==$RUFF_VERSION" ||
    { echo "tests/style/check.sh: pip install ruff==$RUFF_VERSION failed" >&2; exit 1; }
fi
RUFF=$VENV/bin/ruff
export RUFF_CACHE_DIR=$CACHE/ruff-cache
# Go offline and on this machine's toolchain, as bindings/run_tests.sh.
export GOCACHE=$CACHE/go-cache GOPATH=$CACHE/go-path GOFLAGS= GO111MODULE=on GOPROXY=off \
  GOTOOLCHAIN=local CGO_ENABLED=1

# --- licence lines and clang-format, file by file; the Python and Go files
# are collected for their tools ---------------------------------------------
n_files=0 n_bad=0
py_files=() go_files=()
while IFS= read -r f; do
  [ -f "$f" ] || continue
  skipped "$f" && continue
  case "$f" in
    *.py|*.pyi) py_files+=("$f") ;;
    *.go) go_files+=("$f") ;;
  esac
  line=$(licence_comment "$f")
  [ -n "$line" ] || continue
  n_files=$((n_files + 1))
  if ! head -n 3 "$f" | grep -qF "$SPDX"; then
    if [ "$fix" = 1 ]; then
      add_licence "$f" "$line"
      echo "added the licence line: $f"
    else
      echo "$f: no '$SPDX' line in its first three lines (bash tests/style/check.sh --fix adds it)"
      n_bad=$((n_bad + 1))
    fi
  fi
  if is_c_family "$f"; then
    if [ "$fix" = 1 ]; then
      "$CLANG_FORMAT" -i --style=file "$f"
    elif ! "$CLANG_FORMAT" --dry-run --Werror --style=file "$f" 2>/dev/null; then
      echo "$f: not formatted as .clang-format says ($CLANG_FORMAT -i $f, or --fix):"
      "$CLANG_FORMAT" --style=file "$f" | diff -u "$f" - | head -n 20
      n_bad=$((n_bad + 1))
    fi
  fi
done < <(list_files "$@")

failed=()
# --- Python: ruff ---------------------------------------------------------------
if [ ${#py_files[@]} -gt 0 ]; then
  if [ "$fix" = 1 ]; then
    "$RUFF" check --fix --quiet "${py_files[@]}" || failed+=("ruff check (not fixable by itself)")
    "$RUFF" format --quiet "${py_files[@]}" || failed+=("ruff format")
  else
    if ! "$RUFF" format --check --quiet "${py_files[@]}"; then
      "$RUFF" format --diff --quiet "${py_files[@]}" 2>&1 | head -n 40
      echo "(ruff format, or --fix, rewrites them)"
      failed+=("ruff format")
    fi
    "$RUFF" check --quiet "${py_files[@]}" || failed+=("ruff check")
  fi
fi

# --- Go: gofmt and go vet -----------------------------------------------------
# The folder of FILE's go.mod (its module's root), or nothing.
module_of() {
  local d
  d=$(dirname "$1")
  while [ "$d" != . ] && [ "$d" != / ] && [ ! -f "$d/go.mod" ]; do d=$(dirname "$d"); done
  [ -f "$d/go.mod" ] && echo "$d"
}
# The cgo include path of the library's headers: include/ and a version.h
# as CMake's configure_file makes it from project(hurray VERSION x.y.z).
cgo_includes() {
  local v gen=$CACHE/include
  [ -f cmake/version.h.in ] || return 0
  v=$(sed -nE 's/^project\(hurray VERSION ([0-9]+)\.([0-9]+)\.([0-9]+).*/\1 \2 \3/p' CMakeLists.txt)
  set -- $v
  [ $# -eq 3 ] || { echo "tests/style/check.sh: no project(hurray VERSION x.y.z) in CMakeLists.txt" >&2; return 1; }
  mkdir -p "$gen/hurray"
  sed -e "s/@PROJECT_VERSION_MAJOR@/$1/; s/@PROJECT_VERSION_MINOR@/$2/" \
    -e "s/@PROJECT_VERSION_PATCH@/$3/; s/@PROJECT_VERSION@/$1.$2.$3/" \
    cmake/version.h.in > "$gen/hurray/version.h"
  echo "-I$ROOT/include -I$gen"
}
if [ ${#go_files[@]} -gt 0 ]; then
  if [ "$fix" = 1 ]; then
    gofmt -w "${go_files[@]}" || failed+=("gofmt")
  else
    unformatted=$(gofmt -l "${go_files[@]}")
    if [ -n "$unformatted" ]; then
      printf '%s: not formatted as gofmt says (gofmt -w, or --fix):\n' $unformatted
      gofmt -d $unformatted | head -n 40
      failed+=("gofmt")
    fi
  fi
  # go vet only type-checks: the headers are enough, no library is linked.
  # The hurray_no_pkgconfig tag takes them from CGO_CFLAGS (link_flags.go).
  if cflags=$(cgo_includes); then
    modules=$(for f in "${go_files[@]}"; do module_of "$f"; done | sort -u)
    for m in $modules; do
      (cd "$m" && CGO_CFLAGS="$cflags" go vet -tags hurray_no_pkgconfig ./...) ||
        failed+=("go vet ($m)")
    done
  else
    failed+=("go vet")
  fi
fi

# Doc references (tests/style/check_refs.py): every path a doc or comment
# names exists, every "§N" and quoted heading it cites is there. Over the
# whole checkout only: a reference's target may lie outside the PATHs. The
# self-test's partial trees turn it off (HURRAY_STYLE_REFS=0); it has a
# self-test of its own (check_refs.py --self-test, run by the style stage).
refs=""
if [ $# -eq 0 ] && [ "${HURRAY_STYLE_REFS:-1}" != 0 ]; then
  refs="; doc references"
  python3 tests/style/check_refs.py || failed+=("doc references (check_refs.py)")
fi

summary="${#py_files[@]} Python files (ruff), ${#go_files[@]} Go files (gofmt, go vet)$refs"
if [ "$fix" = 1 ]; then
  echo "style: $n_files files checked and fixed; $summary"
  [ ${#failed[@]} -eq 0 ] && exit 0
  echo "style: still to fix by hand: ${failed[*]}"
  exit 1
fi
echo "style: $n_files files (licence line, clang-format), $n_bad with problems; $summary"
if [ ${#failed[@]} -gt 0 ]; then
  echo "style: failed: $(IFS=,; echo "${failed[*]}" | sed 's/,/, /g')"
fi
[ "$n_bad" -eq 0 ] && [ ${#failed[@]} -eq 0 ]
