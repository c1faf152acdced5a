#!/usr/bin/env bash
# The pipeline schedules' bubble, measured beside calc's: gpipe, 1f1b, interleaved (v chunks per
# rank) and zb-h1 on P pipeline ranks with M micro-batches, each a `meshtrain --bench` run whose
# "bench pipeline" line gives the measured bubble (the stages' mean share of the timed steps spent
# waiting in a pipeline receive) and calc's figure for the schedule's table (its simulation with
# unit costs: F = I = W = 1, B = 2). The schedules alternate within each round, so that a change
# of the machine's load hits all of them; per schedule the min and the median over the rounds.
# Every rank needs a core of its own for the bubble to mean anything: P ranks on fewer cores wait
# for the CPU, not for their neighbours (the default P = 2 fits this 2-core machine).
# usage: bench/pipe_schedules.sh [BUILD_DIR]
#   env: P=2 M=8 V=2 ROUNDS=3 STEPS=6 LAYERS=8 EMULATE="" (e.g. v5p: the sends cost a TPU's
#        link time) OUT="" (the table's file; standard output when empty)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
P=${P:-2} M=${M:-8} V=${V:-2} ROUNDS=${ROUNDS:-3} STEPS=${STEPS:-6} LAYERS=${LAYERS:-8}
EMULATE=${EMULATE:-} OUT=${OUT:-}
. bench/lib.sh pipe_schedules
MODEL=(--layers "$LAYERS" --d-model 128 --heads 4 --d-ff 512 --seq-len 64 --batch $((2 * M)))
EXTRA=()
[ -n "$EMULATE" ] && EXTRA=(--emulate "$EMULATE")
schedules=(gpipe 1f1b interleaved zb-h1)
declare -A bub ideal
for r in $(seq 1 "$ROUNDS"); do
  for s in "${schedules[@]}"; do
    v=()
    [ "$s" = interleaved ] && v=(--virtual-stages "$V")
    out=$(mpiexec --oversubscribe --bind-to none -np "$P" "$MT" --bench --steps "$STEPS" \
      "${MODEL[@]}" --mesh z="$P" --pipeline z --microbatches "$M" --schedule "$s" "${v[@]}" \
      "${EXTRA[@]}" 2>&1) || { echo "pipe_schedules: $s failed:" >&2; tail -5 <<<"$out" >&2; exit 1; }
    pl=$(grep '^bench pipeline' <<<"$out")
    bub[$s]+="$(field "$pl" 'bubble') "
    ideal[$s]=$(field "$pl" 'ideal')
    echo "round $r $s: $pl" >&2
  done
done
cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)
table() {
  echo "Pipeline bubble by schedule: P = $P ranks, M = $M micro-batches, $LAYERS layers" \
    "(interleaved: v = $V), ${EMULATE:-real links}; $ROUNDS rounds of $STEPS timed steps;" \
    "$cpu, $(getconf _NPROCESSORS_ONLN) CPUs"
  echo
  echo "| schedule | calc's bubble (unit costs) | measured min | measured median | median / calc |"
  echo "|---|---|---|---|---|"
  for s in "${schedules[@]}"; do
    mn=$(tr ' ' '\n' <<<"${bub[$s]}" | grep . | minimum)
    md=$(tr ' ' '\n' <<<"${bub[$s]}" | grep . | median)
    ratio=$(awk -v a="$md" -v b="${ideal[$s]}" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "-" }')
    echo "| $s | ${ideal[$s]} | $mn | $md | $ratio |"
  done
}
if [ -n "$OUT" ]; then table >"$OUT" && echo "wrote $OUT" >&2; else table; fi
