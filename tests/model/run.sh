#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# The model stage of tests/run_all.sh: the Promela models of the lifetime
# protocol (share.pml in process, ipc.pml across processes; what each step
# stands for: docs/impl/model.md), checked exhaustively with Spin, and the
# seeded mutations, each of which must give a counterexample.
#
#   bash tests/model/run.sh           the default bound (under 2 minutes on 2 cores)
#   bash tests/model/run.sh --large   a larger bound (docs/impl/model.md, "Bounds")
#
# Each check: spin -a with the check's -D macros, gcc on pan.c, then pan:
#   safety     gcc -DSAFETY -DNOCLAIM; pan: assertions (P1, P2, P4 and the
#              final or quiescent state's P3) and invalid end states
#   liveness   gcc -DNFAIR=3; pan -a -f: acceptance cycles of the LTL claim
#              `returned` (P1, P3) under weak fairness
# A clean check passes when pan reports 0 errors over a complete search
# (no "max search depth too small"); a mutant when pan reports an error.
# Every check's files (pan.c, the trail of a counterexample) stay in
# build/model/<check>/: `spin -t -p -D... model.pml` there replays a trail.
# The clean ipc.pml is compiled with -O2; the rest, whose searches are short
# (a mutant's stops at its first counterexample), with -O0 (a fifth of the
# compile time). Checks run $HURRAY_MODEL_JOBS at a time (default
# $HURRAY_JOBS, else 2), each printing its line when it ends.
#
# Installs spin when missing (tests/deps.sh model). Exits non-zero when a
# clean check fails or a mutant survives.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.." || exit 2
ROOT=$(pwd)
MODELS=$ROOT/tests/model
WORK=${HURRAY_MODEL_DIR:-$ROOT/build/model}
# checks run side by side (each pan is one process of a few hundred MB)
JOBS=${HURRAY_MODEL_JOBS:-${HURRAY_JOBS:-2}}
large=0
case "${1:-}" in
  --large) large=1 ;;
  "") ;;
  *) echo "usage: bash tests/model/run.sh [--large]" >&2; exit 2 ;;
esac

bash "$ROOT/tests/deps.sh" model || { echo "tests/model/run.sh: spin or gcc missing (tests/deps.sh model)" >&2; exit 1; }

start=$(date +%s)
n_ok=0 n_bad=0
failures=()

# counterexample DIR MODEL OUT [-DMACRO...]: what pan found, in a line: the
# assertion (its place in the model, from a replay of the trail) or the
# acceptance cycle, and the trail's length in steps.
counterexample() {
  local dir=$1 model=$2 out=$3 replay where text depth
  shift 3
  depth=$(grep -m1 -oE 'at depth [0-9]+' <<<"$out" | sed 's/at depth //')
  if grep -q 'acceptance cycle' <<<"$out"; then
    echo "an acceptance cycle of the LTL claim (a run that never returns everything), $depth steps"
    return
  fi
  replay=$(cd "$dir" && spin "$@" -t "$model" 2>&1)
  where=$(grep -m1 -oE "$model:[0-9]+" <<<"$replay")
  text=$(grep -m1 'text of failed assertion' <<<"$replay" | sed 's/.*assertion: //')
  [ ${#text} -gt 90 ] && text="${text:0:87}..."
  echo "$where $text, $depth steps"
}

# check NAME MODEL MODE EXPECT [-DMACRO...]: one pan run. MODE is safety or
# liveness, EXPECT pass (a clean model) or fail (a mutant).
check() {
  local name=$1 model=$2 mode=$3 expect=$4
  shift 4
  local dir=$WORK/$name t0 out errors opt=-O0 cflags=() pan_args=(-m20000 -n)
  # -O2 where the search is long (the clean ipc.pml); elsewhere the compile
  # costs more than it saves
  [ "$expect" = pass ] && [ "$model" = ipc.pml ] && opt=-O2
  [ "$large" = 1 ] && pan_args+=(-w26)
  if [ "$mode" = safety ]; then
    cflags=(-DSAFETY -DNOCLAIM)
  else
    cflags=(-DNFAIR=3)
    pan_args+=(-a -f)
  fi
  rm -rf "$dir"
  mkdir -p "$dir"
  cp "$MODELS/$model" "$dir/"
  t0=$(date +%s)
  out=$(cd "$dir" && spin "$@" -a "$model" 2>&1 && gcc -w "$opt" "${cflags[@]}" -o pan pan.c 2>&1 &&
        ./pan "${pan_args[@]}" 2>&1)
  printf '%s\n' "$out" > "$dir/pan.out"
  errors=$(sed -n 's/.*errors: \([0-9]*\).*/\1/p' <<<"$out" | tail -n 1)
  local states secs verdict what
  states=$(sed -n 's/^ *\([0-9.e+]*\) states, stored.*/\1/p' <<<"$out" | tail -n 1)
  secs=$(($(date +%s) - t0))
  if [ -z "$errors" ]; then
    verdict=FAIL what="spin, gcc or pan did not run to the end: $(tail -n 3 <<<"$out" | tr '\n' ' ')"
  elif [ "$expect" = pass ]; then
    if [ "$errors" = 0 ] && ! grep -q 'max search depth too small' <<<"$out"; then
      verdict=ok what="verified: $states states"
    else
      verdict=FAIL what="$(grep -m1 -E '^pan:|max search depth' <<<"$out")"
    fi
  else
    if [ "$errors" != 0 ]; then
      verdict=ok what="counterexample: $(counterexample "$dir" "$model" "$out" "$@")"
    else
      verdict=FAIL what="no counterexample: the mutant survived ($states states)"
    fi
  fi
  printf '%-4s %-30s %-9s %3ss  %s\n' "$verdict" "$name" "$mode" "$secs" "$what" | tee "$dir/result"
}

# launch CHECK-ARGS...: check in the background, at most $JOBS at once.
names=()
launch() {
  names+=("$1")
  while [ "$(jobs -rp | wc -l)" -ge "$JOBS" ]; do wait -n; done
  check "$@" &
}

if [ "$large" = 1 ]; then
  share_check=(-DCHECK=1 -DNHOLD=3)
  ipc_bound=(-DNR=3 -DKILLS=2)
  echo "model: the large bound (share.pml: 4 threads with the checking mode on; ipc.pml: 4 processes, 3 messages, 2 kills)"
else
  share_check=(-DCHECK=1)
  ipc_bound=(-DNR=2 -DKILLS=2)
  echo "model: the default bound (share.pml: 3 threads, and 3 with the checking mode on; ipc.pml: 3 processes, 2 messages, 2 kills)"
fi

# The clean models: every property, exhaustively within the bound (the
# longest first).
launch ipc-liveness ipc.pml liveness pass "${ipc_bound[@]}" -DLIVENESS
launch ipc ipc.pml safety pass "${ipc_bound[@]}"
launch share share.pml safety pass -DCHECK=0
launch share-liveness share.pml liveness pass -DCHECK=0
launch share-checking share.pml safety pass "${share_check[@]}"
launch share-checking-liveness share.pml liveness pass "${share_check[@]}"

# The mutants: each must give a counterexample (the default bound is enough).
launch mut-share-lost-decrement share.pml safety fail -DMUT_LOST_DEC
launch mut-share-lost-dec-liveness share.pml liveness fail -DMUT_LOST_DEC
launch mut-share-no-claim share.pml safety fail -DCHECK=1 -DMUT_NO_CLAIM
launch mut-ipc-lost-decrement ipc.pml safety fail -DMUT_LOST_DEC
launch mut-ipc-early-release ipc.pml safety fail -DMUT_EARLY_RELEASE
launch mut-ipc-double-return ipc.pml safety fail -DMUT_DOUBLE_RETURN
launch mut-ipc-abort-order ipc.pml safety fail -DMUT_ABORT_ORDER
launch mut-ipc-release-order ipc.pml safety fail -DMUT_RELEASE_ORDER
launch mut-ipc-fd-leak ipc.pml safety fail -DMUT_FD_LEAK -DNO_QUIESCENT

wait
for name in "${names[@]}"; do
  if [ "$(cut -c1-4 "$WORK/$name/result" 2>/dev/null)" = "ok  " ]; then
    n_ok=$((n_ok + 1))
  else
    n_bad=$((n_bad + 1))
    failures+=("$name")
  fi
done
echo "model: $n_ok checks ok, $n_bad failed, $(($(date +%s) - start))s${failures[*]:+ (failed: ${failures[*]})}"
[ "$n_bad" -eq 0 ]
