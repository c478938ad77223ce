#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The project's test command: `bash tests/run_all.sh` (README; .ci/run runs it).
# Each stage is a line or a few here; what it does is in the script it calls
# (system packages: tests/deps.sh, the only script that installs any).
#
# On a fresh Debian 12 machine, as root, it installs what is missing and runs:
#   deps            apt packages (tests/deps.sh: only the missing ones) and a venv in build/venv
#   dev             cmake --workflow --preset dev   (Debug; tests, examples, benches built)
#   asan            cmake --workflow --preset asan  (ASan + UBSan, any report fails)
#   tsan            cmake --workflow --preset tsan
#   style           tests/style/check.sh: the SPDX licence line in every source,
#                   header, script and CMake file; clang-format-14 on C and C++;
#                   ruff format --check and ruff check on Python (ruff.toml); gofmt -l
#                   and go vet on bindings/go; the doc references (check_refs.py:
#                   paths, § numbers, quoted headings); then the self-tests
#                   (each check fails on a planted file)
#   model           tests/model/run.sh: the Promela models of the lifetime protocol
#                   (share.pml in process, ipc.pml across processes with kills)
#                   checked exhaustively with Spin at the default bound, and each
#                   seeded mutation must give a counterexample (docs/impl/model.md)
#   fuzz            tests/fuzz/run.sh: the libFuzzer targets (clang, build/fuzz): the DLPack
#                   one for 100 s on the seed corpus tests/fuzz/corpus, the
#                   cross-process descriptor one for 20 s on tests/fuzz/ipc_corpus,
#                   the checking mode's for 30 s (docs/impl/fuzzing.md)
#   installed       what users get (tests/installed/run.sh): libhurray built as the
#                   README says (build/lib: Release, tests off), installed into
#                   build/prefix, then dlopen'ed / loaded through an extension
#                   module with first calls on fresh threads, the examples and
#                   the README's C and C++ programs, all against that install
#   external-dlpack tests/packaging/external_dlpack.sh: libhurray and its tests built
#                   against the upstream DLPack 1.3 header that PyPI's apache-tvm-ffi
#                   ships (HURRAY_DLPACK_INCLUDE_DIR)
#   release         the release preset (configure, build, ctest): the whole suite
#                   once more against an optimised (-O3) library, and the
#                   side-by-side benchmark binary
#   bench-smoke     bench/side_by_side.py --quick: libhurray beside tvm-ffi (the
#                   release stage's binary, else a Release build in build/bench),
#                   run for a few seconds; no thresholds
#   python          bash python/run_tests.sh
#   docs            docs/build.sh: the API reference (Doxygen for the headers, pydoc
#                   for the python stage's module) in build/docs/html, and
#                   tests/docs/check_reference.py: every public C, C++ and Python
#                   name is in it with its documentation (and its self-test)
#   distributed     the Python tests that start a Ray or Dask cluster (pytest -m
#                   distributed; ray and distributed installed when missing), against
#                   a plain CMake build of the package in build/python-distributed
#   extensions      bash examples/run_extensions.sh: the PyTorch and TVM FFI
#                   extension examples built against libhurray installed
#                   (cmake --install) from build/lib (Release), and their pytest suites
#   bindings        bash bindings/run_tests.sh build/prefix: the Go and Java
#                   bindings against the installed Release library, each suite
#                   also once with HURRAY_CHECK=1
#   cross           tests/cross/run.sh: libhurray, its GoogleTest suite, the packaging
#                   and example tests cross-built for aarch64 (CUDA and HIP back ends
#                   on, the fake-driver suite too) and s390x (big-endian) with Debian's
#                   cross compilers, no warnings allowed, and run under qemu-user
#                   (tests/deps.sh cross); what qemu cannot run is named there
# Name stages to run only those (deps always runs first), e.g.
#   bash tests/run_all.sh dev tsan
#
# Each stage starts with "=== stage k/N name (elapsed time; failures so far)".
# Every stage runs even if an earlier one failed; the summary at the end says
# which failed, and the exit status is non-zero if any did.
set -uo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 2
ROOT=$(pwd)
export HURRAY_JOBS=${HURRAY_JOBS:-2}
JOBS=$HURRAY_JOBS
export CMAKE_BUILD_PARALLEL_LEVEL=$JOBS
export CTEST_PARALLEL_LEVEL=$JOBS
export CTEST_OUTPUT_ON_FAILURE=1
export PIP_DISABLE_PIP_VERSION_CHECK=1
VENV=$ROOT/build/venv
LOGS=$ROOT/build/logs

total_start=$(date +%s)
DEFAULT_STAGES=(dev asan tsan style model fuzz installed external-dlpack release bench-smoke python docs distributed extensions bindings cross)
if [ $# -gt 0 ]; then STAGES=("$@"); else STAGES=("${DEFAULT_STAGES[@]}"); fi

declare -a SUMMARY=()
STAGE_K=0 # the stage now running, 1-based, deps included
STAGE_N=$((${#STAGES[@]} + 1))
N_PASSED=0
N_FAILED=0

say() { printf '\n=== %s\n' "$*"; }
# Minutes and seconds since the test command started ("3m07s").
elapsed() {
  local s=$(($(date +%s) - total_start))
  printf '%dm%02ds' $((s / 60)) $((s % 60))
}

# Runs one stage function, timing it and recording its outcome. The stage's
# output goes to the terminal and to build/logs/<stage>.log; a stage may write
# a short note for the summary to $STAGE_NOTE.
run_stage() {
  local name=$1 fn=$2 start rc secs detail note
  STAGE_K=$((STAGE_K + 1))
  start=$(date +%s)
  say "stage $STAGE_K/$STAGE_N $name ($(elapsed) elapsed; ${N_FAILED} failed so far)"
  mkdir -p "$LOGS"
  export STAGE_NOTE=$LOGS/$name.note
  rm -f "$STAGE_NOTE"
  "$fn" 2>&1 | tee "$LOGS/$name.log"
  rc=${PIPESTATUS[0]}
  secs=$(( $(date +%s) - start ))
  detail=$(tests_line "$LOGS/$name.log")
  if [ -s "$STAGE_NOTE" ]; then
    note=$(cat "$STAGE_NOTE")
    detail="$note${detail:+; $detail}"
  fi
  if [ "$rc" -eq 0 ]; then
    N_PASSED=$((N_PASSED + 1))
    SUMMARY+=("$(printf '%-16s PASS %5ss  %s' "$name" "$secs" "$detail")")
  else
    N_FAILED=$((N_FAILED + 1))
    SUMMARY+=("$(printf '%-16s FAIL %5ss  %s (exit %s; log: build/logs/%s.log)' \
      "$name" "$secs" "$detail" "$rc" "$name")")
  fi
  return "$rc"
}

# The test totals of a log ("195 tests, 0 failed"), summed over its ctest
# runs and pytest runs.
tests_line() {
  awk '/tests passed, [0-9]+ tests? failed out of [0-9]+/ {
         for (i = 1; i <= NF; i++) {
           if ($i == "out") t += $(i + 2)
           if ($i == "failed" && $(i - 1) ~ /^tests?$/) f += $(i - 2)
         }
         n++
       }
       /^=+ .*[0-9]+ (passed|failed).* in [0-9.]+s/ {
         for (i = 2; i <= NF; i++) {
           w = $i; sub(/,$/, "", w)
           if (w == "passed" || w == "failed" || w ~ /^errors?$/) t += $(i - 1)
           if (w == "failed" || w ~ /^errors?$/) f += $(i - 1)
         }
         n++
       }
       END { if (n) printf "%d tests, %d failed", t, f }' "$1"
}

# --------------------------------------------------------------------------
# The stages. Each is a line or a few: the work is in the script it calls.
# --------------------------------------------------------------------------
# deps: the Debian packages (tests/deps.sh, only the missing ones) and the venv.
stage_deps() {
  bash tests/deps.sh core || return 1
  [ -x "$VENV/bin/python" ] || python3 -m venv "$VENV" ||
    { rm -rf "$VENV"; echo "could not create a venv in $VENV" >&2; return 1; }
  "$VENV/bin/python" --version
}

# Preset workflows: configure, build, ctest.
stage_dev() { cmake --workflow --preset dev; }
stage_asan() { cmake --workflow --preset asan; }
stage_tsan() { cmake --workflow --preset tsan; }
# The release preset, with the side-by-side benchmark against tvm-ffi built
# too when the venv has apache-tvm-ffi (bench-smoke then runs that binary
# instead of building a tree of its own).
stage_release() {
  local tvm=()
  "$VENV/bin/python" -c 'import tvm_ffi.config' 2>/dev/null && tvm=(-DHURRAY_TVM_FFI_PYTHON="$VENV/bin/python")
  cmake --preset release "${tvm[@]}" && cmake --build --preset release && ctest --preset release
}
stage_style() {
  local rc=0
  bash tests/style/check.sh || rc=1
  bash tests/style/check.sh --self-test || rc=1
  python3 tests/style/check_refs.py --self-test || rc=1
  return "$rc"
}
stage_model() { bash tests/model/run.sh; }
stage_fuzz() { bash tests/fuzz/run.sh; }
stage_installed() { bash tests/installed/run.sh "$ROOT/build/prefix"; }
stage_external_dlpack() { bash tests/packaging/external_dlpack.sh "$VENV"; }

# bench-smoke: bench/side_by_side.py builds and runs; its numbers are
# printed, never judged.
stage_bench_smoke() {
  local build=(--build-dir "$ROOT/build/bench")
  "$VENV/bin/python" -c 'import tvm_ffi.config' 2>/dev/null ||
    "$VENV/bin/pip" install -q "${HURRAY_TVM_FFI_SPEC:-apache-tvm-ffi}" || return 1
  [ -x "$ROOT/build/release/bench/hurray_tvm_ffi_side_by_side" ] &&
    build=(--build-dir "$ROOT/build/release" --no-build)  # the release stage built it
  "$VENV/bin/python" bench/side_by_side.py --quick "${build[@]}" --tvm-python "$VENV/bin/python" || return 1
  echo "smoke run, no thresholds" > "$STAGE_NOTE"
}

# python: the module's own test script, with the dev tree's fake CUDA driver.
stage_python() { HURRAY_VENV=$VENV HURRAY_BUILD_DIR=$ROOT/build/dev bash python/run_tests.sh; }
# docs: the reference, with the python stage's module when it imports.
stage_docs() {
  local py=()
  "$VENV/bin/python" -c 'import hurray' 2>/dev/null && py=(HURRAY_DOCS_PYTHON="$VENV/bin/python")
  env "${py[@]}" HURRAY_VENV="$VENV" bash docs/build.sh "$ROOT/build/docs" &&
    python3 tests/docs/check_reference.py --self-test
}
# distributed: hurray.Buffer through Ray and Dask clusters (pytest -m distributed).
stage_distributed() {
  HURRAY_VENV=$VENV HURRAY_PY_DISTRIBUTED=1 HURRAY_PY_FROM_BUILD=1 \
    HURRAY_PY_BUILD_DIR=$ROOT/build/python-distributed bash python/run_tests.sh
}
# extensions: the PyTorch and TVM FFI extensions against installed libhurray
# (the Release build of the installed stage; built here if that did not run).
stage_extensions() { bash examples/run_extensions.sh "$VENV" "$ROOT/build/lib"; }
# bindings: Go and Java against build/prefix; the note counts their suites.
stage_bindings() {
  local rc go_ok junit_ok junit_failed
  bash bindings/run_tests.sh "$ROOT/build/prefix"
  rc=$?
  go_ok=$(grep -Ec '^ok[[:space:]]' build/bindings/go-test.log 2>/dev/null)
  junit_ok=$(sed -n 's/^\[ *\([0-9]*\) tests successful.*/\1/p' build/bindings/java-test.log 2>/dev/null)
  junit_failed=$(sed -n 's/^\[ *\([0-9]*\) tests failed.*/\1/p' build/bindings/java-test.log 2>/dev/null)
  echo "go: ${go_ok:-0} package(s) ok; junit: ${junit_ok:-0} passed, ${junit_failed:-?} failed" > "$STAGE_NOTE"
  return "$rc"
}

# cross: aarch64 and s390x builds run under qemu-user (tests/cross/run.sh);
# HURRAY_CROSS_ARCHES="aarch64" runs one of them.
stage_cross() {
  local arches
  read -r -a arches <<< "${HURRAY_CROSS_ARCHES:-aarch64 s390x}"
  bash tests/deps.sh cross && bash tests/cross/run.sh "${arches[@]}"
}

# --------------------------------------------------------------------------
overall=0
run_stage deps stage_deps || {
  echo "dependencies could not be installed; not running the stages" >&2
  overall=1
  STAGES=()
}
for s in "${STAGES[@]}"; do
  case " ${DEFAULT_STAGES[*]} " in
    *" $s "*) fn=stage_${s//-/_} ;;
    *) echo "unknown stage '$s' (known: ${DEFAULT_STAGES[*]})" >&2
       N_FAILED=$((N_FAILED + 1)); SUMMARY+=("$(printf '%-16s FAIL  unknown stage' "$s")")
       overall=1; continue ;;
  esac
  run_stage "$s" "$fn" || overall=1
done

say "summary ($(( $(date +%s) - total_start ))s in all, $(elapsed))"
for line in "${SUMMARY[@]}"; do echo "  $line"; done
echo "stages: $N_PASSED passed, $N_FAILED failed"
exit $overall
