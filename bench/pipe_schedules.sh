#!/usr/bin/env bash
# The pipeline schedules' bubble, measured beside calc's simulation: gpipe, 1f1b, interleaved (v
# chunks per rank), zb-h1 and zb-v on P pipeline ranks, for each number of micro-batches m in MS. Each
# point is a `meshtrain --bench` run whose "bench pipeline" line gives
#   measured  the stages' mean share of the timed steps spent waiting in a pipeline receive;
#   sim       calc's simulation of the run's table with the costs measured at start-up (each
#             stage's F, B, W per micro-batch from the kernels' times, a message at the pipeline
#             link's latency and rate: train/step/pipe_pred.h), the run's own prediction;
#   unit      the same table with unit costs (F = I = W = 1, B = 2, free messages): the formulas.
# The schedules alternate within each round, so that a change of the machine's load hits all of
# them; per point the min and the median of the measured bubble over the rounds. m values that a
# schedule refuses (interleaved: not a multiple of P) are skipped for it.
# Every rank needs a core of its own for the bubble to mean anything: P ranks on fewer cores wait
# for the CPU, not for their neighbours (the default P = 2 fits this 2-core machine).
# usage: bench/pipe_schedules.sh [BUILD_DIR]
#   env: P=2 MS="2 4 8 16" (M=… sets one value) V=2 ROUNDS=3 STEPS=6 LAYERS=8 SCHEDULES="gpipe
#        1f1b interleaved zb-h1 zb-v" EMULATE="" (e.g. v5p: the sends cost a TPU's link time)
#        OUT_DIR="" (writes pipe_bubble_pP.csv, .md and, with gnuplot (Debian: gnuplot-nox),
#        .svg: bubble against m per schedule, measured beside simulated and unit-cost; without
#        OUT_DIR the table goes to standard output)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
P=${P:-2} V=${V:-2} ROUNDS=${ROUNDS:-3} STEPS=${STEPS:-6} LAYERS=${LAYERS:-8}
MS=${M:-${MS:-2 4 8 16}}
SCHEDULES=${SCHEDULES:-gpipe 1f1b interleaved zb-h1 zb-v}
EMULATE=${EMULATE:-} OUT_DIR=${OUT_DIR:-}
. bench/lib.sh pipe_schedules
EXTRA=()
[ -n "$EMULATE" ] && EXTRA=(--emulate "$EMULATE")
declare -A bub sim unit
for r in $(seq 1 "$ROUNDS"); do
  for m in $MS; do
    for s in $SCHEDULES; do
      v=()
      if [ "$s" = interleaved ]; then
        [ $((m % P)) -eq 0 ] || continue
        v=(--virtual-stages "$V")
      fi
      out=$(mpiexec --oversubscribe --bind-to none -np "$P" "$MT" --bench --steps "$STEPS" \
        --layers "$LAYERS" --d-model 128 --heads 4 --d-ff 512 --seq-len 64 --batch $((2 * m)) \
        --mesh z="$P" --pipeline z --microbatches "$m" --schedule "$s" "${v[@]}" \
        "${EXTRA[@]}" 2>&1) || { echo "pipe_schedules: $s m=$m failed:" >&2; tail -5 <<<"$out" >&2; exit 1; }
      pl=$(grep '^bench pipeline' <<<"$out")
      bub[$s,$m]+="$(field "$pl" 'bubble') "
      sim[$s,$m]+="$(field "$pl" 'sim') "
      unit[$s,$m]=$(field "$pl" 'ideal')
      echo "round $r m=$m $s: $pl" >&2
    done
  done
done
title="P = $P ranks, $LAYERS layers (interleaved: v = $V), ${EMULATE:-real links}; $ROUNDS rounds of $STEPS timed steps; $CPU, $(getconf _NPROCESSORS_ONLN) CPUs"
# csv: schedule,m,unit,sim_median,measured_min,measured_median
csv() {
  echo "schedule,m,unit,sim_median,measured_min,measured_median"
  for s in $SCHEDULES; do
    for m in $MS; do
      [ -n "${bub[$s,$m]:-}" ] || continue
      echo "$s,$m,${unit[$s,$m]},$(tr ' ' '\n' <<<"${sim[$s,$m]}" | grep . | median)," \
        "$(tr ' ' '\n' <<<"${bub[$s,$m]}" | grep . | minimum),$(tr ' ' '\n' <<<"${bub[$s,$m]}" | grep . | median)" | tr -d ' '
    done
  done
}
table() { # the CSV as markdown
  echo "Pipeline bubble by schedule and micro-batches m: $title"
  echo
  echo "| schedule | m | unit costs | simulated (measured costs) | measured min | measured median | median / simulated |"
  echo "|---|---|---|---|---|---|---|"
  csv | tail -n +2 | awk -F, '{printf "| %s | %s | %s | %s | %s | %s | %s |\n", $1, $2, $3, $4, $5, $6, ($4 > 0 ? sprintf("%.2f", $6 / $4) : "-")}'
}
if [ -z "$OUT_DIR" ]; then
  table
  exit 0
fi
mkdir -p "$OUT_DIR"
base="$OUT_DIR/pipe_bubble_p$P"
csv >"$base.csv"
table >"$base.md"
if command -v gnuplot >/dev/null; then
  plot="" i=1
  for s in $SCHEDULES; do
    dat="$base.$s.dat"
    awk -F, -v s="$s" '$1 == s {print $2, $3, $4, $6}' "$base.csv" >"$dat"
    [ -s "$dat" ] || continue
    plot+="\"$dat\" using 1:4 with points pt 7 ps 1.2 lc $i title \"$s measured\", "
    plot+="\"$dat\" using 1:3 with lines lw 2 lc $i title \"$s simulated\", "
    plot+="\"$dat\" using 1:2 with lines dt 2 lc $i title \"$s unit costs\", "
    i=$((i + 1))
  done
  gnuplot <<GP
set terminal svg size 760,460 dynamic font "sans,11"
set output "$base.svg"
set title "Pipeline bubble against micro-batches m, $P stages (${EMULATE:-real links})"
set logscale x 2
set xlabel "micro-batches m"
set ylabel "bubble (idle share of the step)"
set key top right
set grid
plot ${plot%, }
GP
  rm -f "$base".*.dat
  echo "wrote $base.csv, $base.md, $base.svg" >&2
else
  echo "pipe_schedules: gnuplot not found (Debian: apt-get install gnuplot-nox); no SVG" >&2
  echo "wrote $base.csv, $base.md" >&2
fi
