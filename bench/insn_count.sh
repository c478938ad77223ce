#!/usr/bin/env bash
# SPDX-License-Identifier: Apache-2.0
# Instructions per operation under callgrind (bench/insn_count.cc): each
# case at 1000 and 2000 repetitions, the difference / 1000, as a Markdown
# table. Usage: bench/insn_count.sh [BINARY] (default
# build/release/bench/hurray_insn_count; build it with
# `cmake --build --preset release --target hurray_insn_count`).
# Valgrind reports a CPU without AVX-512 (and with AVX2) to the program, so
# the counts are of the AVX2 wide path where the real CPU would take AVX-512;
# HURRAY_INTERNAL_WIDE_PATH=scalar in the environment counts the scalar one.
# INSN_OPS="export keep" limits the operations.
set -euo pipefail
bin=${1:-build/release/bench/hurray_insn_count}
ops=(${INSN_OPS:-import export keep share2 roundtrip validate reshare2 fanout8 share1})
ndims=(1 2 4 16 64)
count() {  # OP NDIM REPS -> instructions collected in run_op
  valgrind --tool=callgrind --toggle-collect='*run_op*' --callgrind-out-file=/dev/null \
    "$bin" "$1" "$2" "$3" 2>&1 | sed -n 's/.*Collected : *\([0-9]*\).*/\1/p'
}
printf '| op | %s |\n|---|%s\n' "$(printf 'ndim %s | ' "${ndims[@]}" | sed 's/ | $//')" \
  "$(printf -- '---:|%.0s' "${ndims[@]}")"
for op in "${ops[@]}"; do
  row="| $op |"
  for nd in "${ndims[@]}"; do
    a=$(count "$op" "$nd" 1000); b=$(count "$op" "$nd" 2000)
    row="$row $(( (b - a) / 1000 )) |"
  done
  echo "$row"
done
