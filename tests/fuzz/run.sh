#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The fuzz stage of tests/run_all.sh (docs/impl/fuzzing.md): the libFuzzer
# targets of tests/fuzz/, built with clang in build/fuzz. HURRAY_FUZZ_SECONDS
# (120) is split between the DLPack target (5/6, on the checked-in seeds
# tests/fuzz/corpus) and the cross-process descriptor target (1/6, on
# tests/fuzz/ipc_corpus); the checking mode's runs for a quarter of it. New inputs go to build/fuzz/corpus and
# build/fuzz/check-corpus (never the checked-in directory), crashes to
# build/fuzz/artifacts; any crash or sanitizer report fails it.
#
#   bash tests/fuzz/run.sh          (HURRAY_JOBS: build jobs, default 2)
#
# A one-line summary goes to $STAGE_NOTE when that is set (tests/run_all.sh).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.." || exit 2
ROOT=$(pwd)
JOBS=${HURRAY_JOBS:-2}
NOTE=${STAGE_NOTE:-/dev/null}
build=$ROOT/build/fuzz
secs=${HURRAY_FUZZ_SECONDS:-120}

bash tests/deps.sh fuzz || exit 1
python3 tests/fuzz/make_corpus.py --check || exit 1
cmake -S . -B "$build" -G Ninja -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DHURRAY_BUILD_FUZZERS=ON -DHURRAY_BUILD_TESTS=OFF \
  -DHURRAY_BUILD_BENCHMARKS=OFF -DHURRAY_BUILD_EXAMPLES=OFF -DHURRAY_BUILD_PYTHON=OFF || exit 1
cmake --build "$build" -j "$JOBS" --target hurray_dlpack_fuzz hurray_check_fuzz \
  hurray_ipc_descriptor_fuzz || exit 1
isecs=$(( secs / 6 ))
dsecs=$(( secs - isecs ))
mkdir -p "$build/corpus" "$build/artifacts" "$build/run"
rm -f "$build/run/fuzz-0.log"
touch "$build/run/started"  # artifacts newer than this are this run's
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1:allocator_may_return_null=0
export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1

# -jobs=1: one worker whose log (build/fuzz/run/fuzz-0.log) is printed at
# the end; the first corpus directory receives the new inputs.
(cd "$build/run" &&
  "$build/tests/fuzz/hurray_dlpack_fuzz" -jobs=1 -max_total_time="$dsecs" -timeout=30 \
    -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$build/artifacts/" \
    "$build/corpus" "$ROOT/tests/fuzz/corpus")
rc=$?
runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$build/run/fuzz-0.log" | tail -n 1)
echo "--- libFuzzer summary"
grep -E '^stat::|^#[0-9]+ *DONE|^Done ' "$build/run/fuzz-0.log" | awk '!seen[$0]++'
if [ "$rc" -ne 0 ] || [ -n "$(find "$build/artifacts" -type f -newer "$build/run/started")" ]; then
  echo "fuzz: the target failed (exit $rc); its inputs (replay: build/fuzz/tests/fuzz/hurray_dlpack_fuzz FILE):" >&2
  find "$build/artifacts" -type f -newer "$build/run/started" >&2
  echo "${runs:-?} inputs, FAILED; see build/fuzz/artifacts" > "$NOTE"
  exit 1
fi

# The cross-process descriptor decoder and import, corpus of its own.
mkdir -p "$build/ipc-corpus"
(cd "$build/run" &&
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
  echo "${runs:-?} inputs; descriptors ${iruns:-?} inputs, FAILED; see build/fuzz/artifacts" > "$NOTE"
  exit 1
fi

# The checking mode's target (programs of handle operations; it needs no
# seeds), corpus of its own.
csecs=$(( secs / 4 ))
mkdir -p "$build/check-corpus"
(cd "$build/run" &&
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
  echo "${runs:-?} inputs; checking mode ${cruns:-?} inputs, FAILED; see build/fuzz/artifacts" > "$NOTE"
  exit 1
fi
echo "${runs:-?} inputs in ${dsecs}s, descriptors ${iruns:-?} in ${isecs}s, checking mode ${cruns:-?} in ${csecs}s, no crash; corpus build/fuzz/corpus: $(ls "$build/corpus" | wc -l) new" > "$NOTE"
