#!/usr/bin/env bash
# The project's test command: `bash tests/run_all.sh` (README; .ci/run runs it).
#
# On a fresh Debian 12 machine, as root, it installs what is missing and runs:
#   deps            apt packages (only the missing ones) and a venv in build/venv
#   dev             cmake --workflow --preset dev   (Debug; tests, examples, benches built)
#   asan            cmake --workflow --preset asan  (ASan + UBSan, any report fails)
#   tsan            cmake --workflow --preset tsan
#   fuzz            the libFuzzer targets of tests/fuzz/ (clang, build/fuzz): the DLPack
#                   one for 100 s on the seed corpus tests/fuzz/corpus, the
#                   cross-process descriptor one for 20 s on tests/fuzz/ipc_corpus,
#                   the checking mode's for 30 s (docs/impl/fuzzing.md)
#   installed       what users get (tests/installed/run.sh): libhurray built as the
#                   README says (build/lib: Release, tests off), installed into
#                   build/prefix, then dlopen'ed / loaded through an extension
#                   module with first calls on fresh threads, the examples and
#                   the README's C and C++ programs, all against that install
#   external-dlpack libhurray and its tests built against the upstream DLPack 1.3
#                   header that PyPI's apache-tvm-ffi ships (HURRAY_DLPACK_INCLUDE_DIR)
#   release         the release preset (configure, build, ctest): the whole suite
#                   once more against an optimised (-O3) library, and the
#                   side-by-side benchmark binary
#   bench-smoke     bench/side_by_side.py --quick: libhurray beside tvm-ffi (the
#                   release stage's binary, else a Release build in build/bench),
#                   run for a few seconds; no thresholds
#   python          bash python/run_tests.sh, when python/tests and that script exist
#   distributed     the Python tests that start a Ray or Dask cluster (pytest -m
#                   distributed; ray and distributed installed when missing), against
#                   a plain CMake build of the package in build/python-distributed
#   extensions      bash examples/run_extensions.sh: the PyTorch and TVM FFI
#                   extension examples built against libhurray installed
#                   (cmake --install) from build/lib (Release), and their pytest suites
#   bindings        bash bindings/run_tests.sh build/prefix: the Go and Java
#                   bindings against the installed Release library, each suite
#                   also once with HURRAY_CHECK=1
# Name stages to run only those (deps always runs first), e.g.
#   bash tests/run_all.sh dev tsan
#
# Every stage runs even if an earlier one failed; the summary at the end says
# which failed, and the exit status is non-zero if any did.
set -uo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 2
ROOT=$(pwd)
JOBS=${HURRAY_JOBS:-2}
export CMAKE_BUILD_PARALLEL_LEVEL=$JOBS
export CTEST_PARALLEL_LEVEL=$JOBS
export CTEST_OUTPUT_ON_FAILURE=1
export PIP_DISABLE_PIP_VERSION_CHECK=1
export DEBIAN_FRONTEND=noninteractive
VENV=$ROOT/build/venv
LOGS=$ROOT/build/logs

DEFAULT_STAGES=(dev asan tsan fuzz installed external-dlpack release bench-smoke python distributed extensions bindings)
if [ $# -gt 0 ]; then STAGES=("$@"); else STAGES=("${DEFAULT_STAGES[@]}"); fi

declare -a SUMMARY=()
N_PASSED=0
N_FAILED=0

say() { printf '\n=== %s\n' "$*"; }

# Runs one stage function, timing it and recording its outcome. The stage's
# output goes to the terminal and to build/logs/<stage>.log; a stage may write
# a short note for the summary to $STAGE_NOTE.
run_stage() {
  local name=$1 fn=$2 start rc secs detail note
  say "stage $name"
  start=$(date +%s)
  mkdir -p "$LOGS"
  STAGE_NOTE=$LOGS/$name.note
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
# deps: Debian packages (installed only when missing) and the venv.
# --------------------------------------------------------------------------
APT_PACKAGES=(cmake ninja-build gcc g++ clang binutils pkg-config
              libgtest-dev libgmock-dev libbenchmark-dev
              libamdhip64-dev
              python3 python3-venv python3-pip)

stage_deps() {
  local missing=() p
  for p in "${APT_PACKAGES[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
  done
  if [ ${#missing[@]} -eq 0 ]; then
    echo "apt: all ${#APT_PACKAGES[@]} packages present"
  else
    echo "apt: installing ${missing[*]}"
    local sudo=()
    if [ "$(id -u)" -ne 0 ]; then
      if command -v sudo >/dev/null && sudo -n true 2>/dev/null; then
        sudo=(sudo -n)
      else
        echo "not root and no password-less sudo: install ${missing[*]} first" >&2
        return 1
      fi
    fi
    "${sudo[@]}" apt-get update -q || return 1
    "${sudo[@]}" apt-get install -y -q --no-install-recommends "${missing[@]}" || return 1
  fi
  cmake --version | head -n 1
  g++ --version | head -n 1

  if [ ! -x "$VENV/bin/python" ]; then
    local py
    for py in python3 /usr/bin/python3; do
      if "$py" -m venv "$VENV"; then break; fi
      rm -rf "$VENV"
    done
    [ -x "$VENV/bin/python" ] || { echo "could not create a venv in $VENV" >&2; return 1; }
  fi
  "$VENV/bin/python" --version
}

# --------------------------------------------------------------------------
# Preset workflows: configure, build, ctest.
# --------------------------------------------------------------------------
workflow() { cmake --workflow --preset "$1"; }
stage_dev() { workflow dev; }
stage_asan() { workflow asan; }
stage_tsan() { workflow tsan; }
# The release preset, with the side-by-side benchmark against tvm-ffi built
# too when the venv has apache-tvm-ffi (bench-smoke then runs that binary
# instead of building a tree of its own).
stage_release() {
  local tvm=()
  "$VENV/bin/python" -c 'import tvm_ffi.config' 2>/dev/null && tvm=(-DHURRAY_TVM_FFI_PYTHON="$VENV/bin/python")
  cmake --preset release "${tvm[@]}" && cmake --build --preset release && ctest --preset release
}
stage_installed() { HURRAY_JOBS=$JOBS bash tests/installed/run.sh "$ROOT/build/prefix"; }

# --------------------------------------------------------------------------
# fuzz: the libFuzzer targets of tests/fuzz/ (docs/impl/fuzzing.md), built
# with clang in build/fuzz; HURRAY_FUZZ_SECONDS (120) is split between the
# DLPack target (5/6, on the checked-in seeds) and the cross-process
# descriptor target (1/6, on tests/fuzz/ipc_corpus), then the checking
# mode's runs for a quarter of it. New inputs go to build/fuzz/corpus (never the checked-in
# directory), crashes to build/fuzz/artifacts; any crash or sanitizer report
# fails the stage.
# --------------------------------------------------------------------------
stage_fuzz() {
  local build=$ROOT/build/fuzz secs=${HURRAY_FUZZ_SECONDS:-120} probe rc runs sudo=()
  # Clang's libFuzzer runtime: Debian ships it in libclang-rt-<major>-dev.
  probe=$(mktemp -d)
  printf 'extern "C" int LLVMFuzzerTestOneInput(const unsigned char *, unsigned long) { return 0; }\n' \
    > "$probe/p.cc"
  if ! clang++ -fsanitize=fuzzer "$probe/p.cc" -o "$probe/p" 2>/dev/null; then
    local major pkg
    major=$(clang++ -dumpversion | cut -d. -f1)
    pkg=libclang-rt-$major-dev
    echo "libFuzzer runtime missing: installing $pkg"
    if [ "$(id -u)" -ne 0 ]; then
      command -v sudo >/dev/null && sudo -n true 2>/dev/null || {
        echo "not root and no password-less sudo: install $pkg first" >&2; rm -rf "$probe"; return 1; }
      sudo=(sudo -n)
    fi
    "${sudo[@]}" apt-get install -y -q --no-install-recommends "$pkg" ||
      { "${sudo[@]}" apt-get update -q && "${sudo[@]}" apt-get install -y -q --no-install-recommends "$pkg"; } ||
      { rm -rf "$probe"; return 1; }
  fi
  rm -rf "$probe"
  python3 tests/fuzz/make_corpus.py --check || return 1
  cmake -S . -B "$build" -G Ninja -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
    -DCMAKE_BUILD_TYPE=RelWithDebInfo -DHURRAY_BUILD_FUZZERS=ON -DHURRAY_BUILD_TESTS=OFF \
    -DHURRAY_BUILD_BENCHMARKS=OFF -DHURRAY_BUILD_EXAMPLES=OFF -DHURRAY_BUILD_PYTHON=OFF || return 1
  cmake --build "$build" -j "$JOBS" --target hurray_dlpack_fuzz hurray_check_fuzz \
    hurray_ipc_descriptor_fuzz || return 1
  local isecs=$(( secs / 6 ))
  secs=$(( secs - isecs ))
  mkdir -p "$build/corpus" "$build/artifacts" "$build/run"
  rm -f "$build/run/fuzz-0.log"
  touch "$build/run/started"  # artifacts newer than this are this run's
  # -jobs=1: one worker whose log (build/fuzz/run/fuzz-0.log) is printed at
  # the end; the first corpus directory receives the new inputs.
  (cd "$build/run" &&
    ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:allocator_may_return_null=0 \
    UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
    "$build/tests/fuzz/hurray_dlpack_fuzz" -jobs=1 -max_total_time="$secs" -timeout=30 \
      -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$build/artifacts/" \
      "$build/corpus" "$ROOT/tests/fuzz/corpus")
  rc=$?
  runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$build/run/fuzz-0.log" | tail -n 1)
  echo "--- libFuzzer summary"
  grep -E '^stat::|^#[0-9]+ *DONE|^Done ' "$build/run/fuzz-0.log" | awk '!seen[$0]++'
  if [ "$rc" -ne 0 ] || [ -n "$(find "$build/artifacts" -type f -newer "$build/run/started")" ]; then
    echo "fuzz: the target failed (exit $rc); its inputs (replay: build/fuzz/tests/fuzz/hurray_dlpack_fuzz FILE):" >&2
    find "$build/artifacts" -type f -newer "$build/run/started" >&2
    echo "${runs:-?} inputs, FAILED; see build/fuzz/artifacts" > "$STAGE_NOTE"
    return 1
  fi
  # The cross-process descriptor decoder and import, corpus of its own.
  local iruns
  mkdir -p "$build/ipc-corpus"
  (cd "$build/run" &&
    ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:allocator_may_return_null=0 \
    UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
    "$build/tests/fuzz/hurray_ipc_descriptor_fuzz" -max_total_time="$isecs" -timeout=30 \
      -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$build/artifacts/ipc-" \
      "$build/ipc-corpus" "$ROOT/tests/fuzz/ipc_corpus" > "$build/run/ipc-fuzz.log" 2>&1)
  rc=$?
  iruns=$(sed -n 's/^stat::number_of_executed_units: *//p' "$build/run/ipc-fuzz.log" | tail -n 1)
  echo "--- libFuzzer summary (cross-process descriptors)"
  grep -E '^stat::|^Done ' "$build/run/ipc-fuzz.log" | awk '!seen[$0]++'
  if [ "$rc" -ne 0 ]; then
    tail -n 40 "$build/run/ipc-fuzz.log" >&2
    echo "fuzz: hurray_ipc_descriptor_fuzz failed (exit $rc); replay: build/fuzz/tests/fuzz/hurray_ipc_descriptor_fuzz FILE" >&2
    echo "${runs:-?} inputs; descriptors ${iruns:-?} inputs, FAILED; see build/fuzz/artifacts" > "$STAGE_NOTE"
    return 1
  fi
  # The checking mode's target (programs of handle operations; it needs no
  # seeds) for a quarter of the whole time, corpus of its own.
  local csecs=$(( (secs + isecs) / 4 )) cruns
  mkdir -p "$build/check-corpus"
  (cd "$build/run" &&
    ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:allocator_may_return_null=0 \
    UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
    "$build/tests/fuzz/hurray_check_fuzz" -max_total_time="$csecs" -timeout=30 \
      -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$build/artifacts/check-" \
      "$build/check-corpus" > "$build/run/check-fuzz.log" 2>&1)
  rc=$?
  cruns=$(sed -n 's/^stat::number_of_executed_units: *//p' "$build/run/check-fuzz.log" | tail -n 1)
  echo "--- libFuzzer summary (checking mode)"
  grep -E '^stat::|^Done ' "$build/run/check-fuzz.log" | awk '!seen[$0]++'
  if [ "$rc" -ne 0 ]; then
    tail -n 40 "$build/run/check-fuzz.log" >&2
    echo "fuzz: hurray_check_fuzz failed (exit $rc); replay: build/fuzz/tests/fuzz/hurray_check_fuzz FILE" >&2
    echo "${runs:-?} inputs; checking mode ${cruns:-?} inputs, FAILED; see build/fuzz/artifacts" > "$STAGE_NOTE"
    return 1
  fi
  echo "${runs:-?} inputs in ${secs}s, descriptors ${iruns:-?} in ${isecs}s, checking mode ${cruns:-?} in ${csecs}s, no crash; corpus build/fuzz/corpus: $(ls "$build/corpus" | wc -l) new" > "$STAGE_NOTE"
}

# --------------------------------------------------------------------------
# external-dlpack: build against the upstream header apache-tvm-ffi installs.
# --------------------------------------------------------------------------
find_upstream_dlpack() {
  local pkg_dir h
  pkg_dir=$("$VENV/bin/python" -c 'import os, tvm_ffi; print(os.path.dirname(tvm_ffi.__file__))' 2>/dev/null)
  if [ -z "$pkg_dir" ]; then
    # The module would not import here; its files are still in site-packages.
    pkg_dir=$(ls -d "$VENV"/lib/python3*/site-packages/tvm_ffi 2>/dev/null | head -n 1)
  fi
  [ -n "$pkg_dir" ] || return 1
  # Prefer the header tvm_ffi exposes to users over its vendored copy.
  h=$pkg_dir/include/dlpack/dlpack.h
  [ -f "$h" ] || h=$(find "$pkg_dir" -path '*/dlpack/dlpack.h' | sort | head -n 1)
  [ -n "$h" ] && [ -f "$h" ] || return 1
  dirname "$(dirname "$h")"
}

stage_external_dlpack() {
  local spec=${HURRAY_TVM_FFI_SPEC:-apache-tvm-ffi} dir header major minor build=build/external-dlpack
  "$VENV/bin/pip" install -q "$spec" || return 1
  "$VENV/bin/pip" show apache-tvm-ffi | sed -n 's/^Version: /apache-tvm-ffi /p'
  dir=$(find_upstream_dlpack) || { echo "no dlpack/dlpack.h in the apache-tvm-ffi install" >&2; return 1; }
  header=$dir/dlpack/dlpack.h
  major=$(sed -n 's/^#define DLPACK_MAJOR_VERSION \([0-9]*\).*/\1/p' "$header")
  minor=$(sed -n 's/^#define DLPACK_MINOR_VERSION \([0-9]*\).*/\1/p' "$header")
  echo "upstream header: $header (DLPack $major.$minor)"
  echo "DLPack $major.$minor" > "$STAGE_NOTE"
  if [ "$major" != 1 ] || [ "${minor:-0}" -lt 3 ]; then
    echo "expected DLPack 1.3 (or a later 1.x) from apache-tvm-ffi, found '$major.$minor'" >&2
    return 1
  fi
  [ "$minor" = 3 ] || echo "note: upstream header is newer than 1.3 (1.$minor)"

  cmake --preset dev -B "$build" \
    -DHURRAY_DLPACK_INCLUDE_DIR="$dir" \
    -DHURRAY_UPSTREAM_DLPACK_INCLUDE_DIR="$dir" \
    -DHURRAY_BUILD_BENCHMARKS=OFF -DHURRAY_BUILD_EXAMPLES=OFF || return 1
  # Make sure the external header really is the one compiled against: it is
  # force-included ahead of hurray/dlpack.h in every translation unit.
  if ! grep -qF -- "-include $header" "$build/compile_commands.json"; then
    echo "$build does not compile with -include $header" >&2
    return 1
  fi
  cmake --build "$build" -j "$JOBS" || return 1
  ctest --test-dir "$build" -j "$JOBS" --output-on-failure --no-tests=error
}

# --------------------------------------------------------------------------
# bench-smoke: the side-by-side benchmark against tvm-ffi (bench/side_by_side.py)
# builds and runs; its numbers are printed, never judged.
# --------------------------------------------------------------------------
stage_bench_smoke() {
  local spec=${HURRAY_TVM_FFI_SPEC:-apache-tvm-ffi}
  "$VENV/bin/python" -c 'import tvm_ffi.config' 2>/dev/null || "$VENV/bin/pip" install -q "$spec" || return 1
  local build=(--build-dir "$ROOT/build/bench")
  [ -x "$ROOT/build/release/bench/hurray_tvm_ffi_side_by_side" ] &&
    build=(--build-dir "$ROOT/build/release" --no-build)  # the release stage built it
  "$VENV/bin/python" bench/side_by_side.py --quick "${build[@]}" \
    --tvm-python "$VENV/bin/python" || return 1
  echo "smoke run, no thresholds" > "$STAGE_NOTE"
}

# --------------------------------------------------------------------------
# python: the bindings' own test script, once it exists.
# --------------------------------------------------------------------------
stage_python() {
  if [ ! -d python/tests ] || [ ! -f python/run_tests.sh ]; then
    echo "skipped: python/tests or python/run_tests.sh is not there yet"
    echo "skipped (no python/tests or python/run_tests.sh)" > "$STAGE_NOTE"
    return 0
  fi
  HURRAY_VENV=$VENV HURRAY_BUILD_DIR=$ROOT/build/dev bash python/run_tests.sh
}

# --------------------------------------------------------------------------
# distributed: hurray.Buffer through Ray and Dask clusters (issue 18).
# --------------------------------------------------------------------------
stage_distributed() {
  HURRAY_VENV=$VENV HURRAY_PY_DISTRIBUTED=1 HURRAY_PY_FROM_BUILD=1 \
    HURRAY_PY_BUILD_DIR=$ROOT/build/python-distributed bash python/run_tests.sh
}

# --------------------------------------------------------------------------
# extensions: C++ extensions of PyTorch and TVM FFI linking installed libhurray
# (the Release build of the installed stage; built here if that did not run).
# --------------------------------------------------------------------------
stage_extensions() {
  HURRAY_JOBS=$JOBS bash examples/run_extensions.sh "$VENV" "$ROOT/build/lib"
}

# --------------------------------------------------------------------------
# bindings: the Go (go test -race) and Java (JUnit 5) bindings and their
# interop test; the script installs golang-go, openjdk-17, junit5, maven and
# the Maven plugins bindings/java/pom.xml needs itself.
# --------------------------------------------------------------------------
stage_bindings() {
  local rc go_ok junit_ok junit_failed
  HURRAY_JOBS=$JOBS bash bindings/run_tests.sh "$ROOT/build/prefix"
  rc=$?
  go_ok=$(grep -Ec '^ok[[:space:]]' build/bindings/go-test.log 2>/dev/null)
  junit_ok=$(sed -n 's/^\[ *\([0-9]*\) tests successful.*/\1/p' build/bindings/java-test.log 2>/dev/null)
  junit_failed=$(sed -n 's/^\[ *\([0-9]*\) tests failed.*/\1/p' build/bindings/java-test.log 2>/dev/null)
  echo "go: ${go_ok:-0} package(s) ok; junit: ${junit_ok:-0} passed, ${junit_failed:-?} failed" > "$STAGE_NOTE"
  return "$rc"
}

# --------------------------------------------------------------------------
total_start=$(date +%s)
overall=0
run_stage deps stage_deps || {
  echo "dependencies could not be installed; not running the stages" >&2
  overall=1
  STAGES=()
}
for s in "${STAGES[@]}"; do
  case "$s" in
    dev|asan|tsan|release|installed|python|distributed) fn=stage_$s ;;
    fuzz) fn=stage_fuzz ;;
    external-dlpack) fn=stage_external_dlpack ;;
    bench-smoke) fn=stage_bench_smoke ;;
    extensions) fn=stage_extensions ;;
    bindings) fn=stage_bindings ;;
    *) echo "unknown stage '$s' (known: ${DEFAULT_STAGES[*]})" >&2
       N_FAILED=$((N_FAILED + 1)); SUMMARY+=("$(printf '%-16s FAIL  unknown stage' "$s")")
       overall=1; continue ;;
  esac
  run_stage "$s" "$fn" || overall=1
done

say "summary ($(( $(date +%s) - total_start ))s in all)"
for line in "${SUMMARY[@]}"; do echo "  $line"; done
echo "stages: $N_PASSED passed, $N_FAILED failed"
exit $overall
