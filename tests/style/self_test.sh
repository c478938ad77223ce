#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The style stage's self-test (bash tests/style/check.sh --self-test): each
# check of tests/style/check.sh fails on a file planted to break it, and
# --fix mends what it says it mends. Each case is a small temporary git
# checkout holding a copy of check.sh, tests/deps.sh, ruff.toml and
# .clang-format and the planted files; check.sh runs there with this
# checkout's venv (ruff) and caches, and must exit non-zero naming the
# check. A clean tree of every kind must pass, so that a failure is the
# plant's. Exits non-zero if any check missed its plant.
set -uo pipefail
# The partial trees here hold few of the files their docs name.
export HURRAY_STYLE_REFS=0
cd "$(dirname "${BASH_SOURCE[0]}")/../.." || exit 2
ROOT=$(pwd)
export HURRAY_VENV=${HURRAY_VENV:-$ROOT/build/venv}
export HURRAY_STYLE_CACHE=${HURRAY_STYLE_CACHE:-$ROOT/build/style}
TMP=$(mktemp -d "${TMPDIR:-/tmp}/hurray-style-self-test.XXXXXX") || exit 2
[ -n "${KEEP:-}" ] || trap 'rm -rf "$TMP"' EXIT
n_ok=0 n_failed=0

# Files that every check passes.
GOOD_PY='# SPDX-License-Identifier: Apache-2.0
import os


def cwd() -> str:
    return os.getcwd()
'
GOOD_GO='// SPDX-License-Identifier: Apache-2.0

package plant

import "fmt"

// Hello prints a greeting.
func Hello(name string) { fmt.Printf("hello %s\n", name) }
'
GOOD_CC='// SPDX-License-Identifier: Apache-2.0
int answer() { return 42; }
'

# tree NAME FILE CONTENT [FILE CONTENT]...: a fresh checkout with a Go module
# in go/ (its go.mod) and the given files.
tree() {
  local d=$TMP/$1
  shift
  mkdir -p "$d/tests/style" "$d/go"
  cp tests/style/check.sh tests/style/self_test.sh "$d/tests/style/"
  cp tests/deps.sh "$d/tests/"
  cp ruff.toml .clang-format .gitignore "$d/"
  printf 'module example.com/plant\n\ngo 1.19\n' > "$d/go/go.mod"
  while [ $# -ge 2 ]; do
    mkdir -p "$(dirname "$d/$1")"
    printf '%s' "$2" > "$d/$1"
    shift 2
  done
  git -C "$d" init -q
  echo "$d"
}

# expect NAME RC PATTERN DIR [ARGS]: check.sh in DIR exits RC (0, or 1 for
# any failure) and, for a failure, prints PATTERN (grep -E).
expect() {
  local name=$1 want=$2 pattern=$3 d=$4 out rc
  shift 4
  out=$(bash "$d/tests/style/check.sh" "$@" 2>&1)
  rc=$?
  if { [ "$want" = 0 ] && [ "$rc" -eq 0 ]; } ||
     { [ "$want" != 0 ] && [ "$rc" -ne 0 ] && grep -qE -- "$pattern" <<<"$out"; }; then
    echo "ok: $name"
    n_ok=$((n_ok + 1))
  else
    echo "FAILED: $name (exit $rc, wanted ${want/1/non-zero} and /$pattern/); its output:"
    sed 's/^/    /' <<<"$out"
    n_failed=$((n_failed + 1))
  fi
}

d=$(tree clean good.py "$GOOD_PY" go/good.go "$GOOD_GO" good.cc "$GOOD_CC")
expect "a clean tree passes" 0 '' "$d"

d=$(tree licence script.sh $'#!/bin/sh\necho hi\n')
expect "licence: a script without the SPDX line" 1 "script.sh: no 'SPDX" "$d"

d=$(tree licence-pml model.pml $'init { skip }\n')
expect "licence: a Promela model without the SPDX line" 1 "model.pml: no 'SPDX" "$d"

d=$(tree clang-format bad.cc $'// SPDX-License-Identifier: Apache-2.0\nint  answer( ){return 42;}\n')
expect "clang-format: a badly formatted .cc" 1 'bad.cc: not formatted as .clang-format says' "$d"

d=$(tree ruff-format bad.py $'# SPDX-License-Identifier: Apache-2.0\nx = [1,2]\n')
expect "ruff format: a badly formatted .py" 1 'failed: .*ruff format' "$d"

d=$(tree ruff-check bad.py $'# SPDX-License-Identifier: Apache-2.0\nimport os\n\nx = [1, 2]\n')
expect "ruff check: an unused import (F401)" 1 'F401'  "$d"

d=$(tree gofmt go/bad.go $'// SPDX-License-Identifier: Apache-2.0\n\npackage plant\n\nfunc  F( ) int {\nreturn 1 }\n')
expect "gofmt: a badly formatted .go" 1 'failed: .*gofmt' "$d"

d=$(tree go-vet go/bad.go $'// SPDX-License-Identifier: Apache-2.0\n\npackage plant\n\nimport "fmt"\n\n// F misformats.\nfunc F() { fmt.Printf("%d\\n", "not a number") }\n')
expect "go vet: a Printf with the wrong verb" 1 'failed: .*go vet' "$d"

# --fix mends the licence line, clang-format, the import order, ruff format
# and gofmt; the tree then passes.
d=$(tree fix script.sh $'#!/bin/sh\necho hi\n' \
  bad.cc $'// SPDX-License-Identifier: Apache-2.0\nint  answer( ){return 42;}\n' \
  bad.py $'# SPDX-License-Identifier: Apache-2.0\nimport sys\nimport os\nx = [os.sep,sys.argv]\n' \
  go/bad.go $'// SPDX-License-Identifier: Apache-2.0\n\npackage plant\n\nfunc  F( ) int {\nreturn 1 }\n')
if bash "$d/tests/style/check.sh" --fix >/dev/null 2>&1; then
  expect "--fix mends licence, clang-format, imports, ruff format and gofmt" 0 '' "$d"
else
  echo "FAILED: check.sh --fix exited non-zero"
  n_failed=$((n_failed + 1))
fi

echo "self-test: $n_ok passed, $n_failed failed"
[ "$n_failed" -eq 0 ]
