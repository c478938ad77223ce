#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The style stage of tests/run_all.sh: every source, header, script and CMake
# file starts with the licence line (SPDX-License-Identifier: Apache-2.0, as
# LICENSE), and every C and C++ file is formatted as .clang-format says
# (clang-format-14).
#
#   bash tests/style/check.sh [--fix] [PATH...]
#
# PATHs (files or directories; default: the whole checkout) narrow the
# check. --fix adds the missing licence lines (after a #! line; a blank line
# after it in Go files, so that it is no package comment) and reformats in
# place. Files under third_party/ are never checked.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.." || exit 2
SPDX='SPDX-License-Identifier: Apache-2.0'
CLANG_FORMAT=${CLANG_FORMAT:-clang-format-14}
fix=0
if [ "${1:-}" = --fix ]; then fix=1; shift; fi

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

if ! command -v "$CLANG_FORMAT" >/dev/null; then
  echo "tests/style/check.sh: $CLANG_FORMAT not found (tests/deps.sh core installs it)" >&2
  exit 1
fi

n_files=0 n_bad=0
while IFS= read -r f; do
  [ -f "$f" ] || continue
  skipped "$f" && continue
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

if [ "$fix" = 1 ]; then
  echo "style: $n_files files checked and fixed"
  exit 0
fi
echo "style: $n_files files, $n_bad with problems"
[ "$n_bad" -eq 0 ]
