#!/usr/bin/env bash
# The pipeline schedules' bubble, measured beside calc's simulation and the closed forms: gpipe,
# 1f1b, interleaved (V chunks per rank), zb-h1 and zb-v on P pipeline ranks for each P in PS, for
# each number of micro-batches m in MS, under --emulate (the sends cost the chip's link time,
# scaled to this CPU). Each point is a `meshtrain --bench` run whose "bench pipeline" line gives,
# over the timed steps' pipeline phase (each rank from its first action to its last; the
# makespan is the longest rank's, as calc's simulator counts it):
#   measured  1 − Σ_ranks compute / (P · makespan), the compute the F, B, I and W actions' time;
#   sim       calc's simulation of the run's table with the costs measured at start-up (each
#             stage's F, B, W per micro-batch from the kernels' times, a message at the emulated
#             link's latency and rate: train/step/pipe_pred.h), the run's own prediction;
#   sim-run   the same table with the costs the run measured (each stage's mean F, B, W over its
#             micro-batches) and the same message time: it tells the cost model's error (sim
#             against sim-run) from the schedule model's (sim-run against measured);
#   unit      the same table with unit costs (F = I = W = 1, B = 2, free messages): the closed
#             forms, (P−1)/(m+P−1) for gpipe and 1f1b, (P−1)/(V·m+P−1) interleaved, …
# The schedules alternate within each round, so that a change of the machine's load hits all of
# them; per point the min and the median of the measured bubble over the rounds. m values that a
# schedule refuses (interleaved: not a multiple of P) are skipped for it, and interleaved on P > 2
# under an --emulate chip whose wraparound does not close a line of P (the run refuses): v3, v5e
# and v6e wrap only a full pod edge; v4p and v5p wrap an axis of a multiple of 4 (EMULATE=v5p). Each stage holds 4
# layers (LAYERS = 4·P), so that a message costs the same share of a stage's compute on 2 and 4
# ranks. P ranks on fewer cores share them: sim runs the ranks on the host's CPUs, each rank
# computing at its share of them while it computes (a rank waiting for a message naps: calc's
# sched_simulate_shared); sim-run's costs are the run's, stretched by whatever sharing they met.
# usage: bench/pipe_schedules.sh [BUILD_DIR]
#   env: PS="2 4" MS="2 4 8" V=2 ROUNDS=2 STEPS=4 LAYERS=4·P DMODEL=256 EMULATE=v3 SCHEDULES="gpipe
#        1f1b interleaved zb-h1 zb-v" OUT_DIR="" (writes pipe_bubble_pP.csv, .md and, with
#        gnuplot (Debian: gnuplot-nox), .svg: bubble against m per schedule, measured points
#        beside the closed-form lines; without OUT_DIR the tables go to standard output)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
PS=${PS:-${P:-2 4}} V=${V:-2} ROUNDS=${ROUNDS:-2} STEPS=${STEPS:-4} LAYERS=${LAYERS:-}
DMODEL=${DMODEL:-256} MS=${M:-${MS:-2 4 8}} EMULATE=${EMULATE-v3} OUT_DIR=${OUT_DIR:-}
SCHEDULES=${SCHEDULES:-gpipe 1f1b interleaved zb-h1 zb-v}
. bench/lib.sh pipe_schedules
EXTRA=()
[ -n "$EMULATE" ] && EXTRA=(--emulate "$EMULATE")
declare -A bub sim run unit
start=$(date +%s)
for r in $(seq 1 "$ROUNDS"); do
  for P in $PS; do
    for m in $MS; do
      for s in $SCHEDULES; do
        v=()
        if [ "$s" = interleaved ]; then
          [ $((m % P)) -eq 0 ] || continue
          # a line of P > 2 must wrap: v4p/v5p wrap an axis of a multiple of 4, v3/v5e/v6e none
          [ "$P" -le 2 ] || [ -z "$EMULATE" ] || { [[ "$EMULATE" =~ ^v[45]p$ ]] && [ $((P % 4)) -eq 0 ]; } ||
            continue
          v=(--virtual-stages "$V")
        fi
        out=$(mpiexec --oversubscribe --bind-to none -np "$P" "$MT" --bench --no-matmul-bound \
          --steps "$STEPS" --layers "${LAYERS:-$((4 * P))}" --d-model "$DMODEL" --heads 4 \
          --d-ff $((4 * DMODEL)) --seq-len 64 --batch $((2 * m)) --mesh z="$P" --pipeline z \
          --microbatches "$m" --schedule "$s" "${v[@]}" "${EXTRA[@]}" 2>&1) ||
          { echo "pipe_schedules: P=$P $s m=$m failed:" >&2; tail -5 <<<"$out" >&2; exit 1; }
        pl=$(grep '^bench pipeline' <<<"$out")
        k="$P,$s,$m"
        bub[$k]+="$(field "$pl" 'bubble') " sim[$k]+="$(field "$pl" 'sim') "
        run[$k]+="$(field "$pl" 'sim-run') " unit[$k]=$(field "$pl" 'ideal')
        echo "round $r P=$P m=$m $s: $(cut -c1-200 <<<"$pl")" >&2
      done
    done
  done
done
echo "pipe_schedules: $(($(date +%s) - start)) s" >&2
med() { tr ' ' '\n' <<<"$1" | grep . | median; }
# csv P: schedule,m,unit,sim_median,run_median,measured_min,measured_median
csv() {
  echo "schedule,m,unit,sim_median,run_median,measured_min,measured_median"
  for s in $SCHEDULES; do
    for m in $MS; do
      local k="$1,$s,$m"
      [ -n "${bub[$k]:-}" ] || continue
      echo "$s,$m,${unit[$k]},$(med "${sim[$k]}"),$(med "${run[$k]}"),$(tr ' ' '\n' <<<"${bub[$k]}" | grep . | minimum),$(med "${bub[$k]}")"
    done
  done
}
table() { # P: the CSV as markdown
  echo "Pipeline bubble by schedule and micro-batches m: P = $1 ranks, ${LAYERS:-$((4 * $1))} layers of d_model" \
    "$DMODEL (interleaved: v = $V), ${EMULATE:-real links}; $ROUNDS rounds of $STEPS timed steps;" \
    "$CPU, $(getconf _NPROCESSORS_ONLN) CPUs"
  echo
  echo "| schedule | m | closed form (unit costs) | simulated (start-up costs) | simulated (the run's costs) | measured min | measured median | median / simulated |"
  echo "|---|---|---|---|---|---|---|---|"
  csv "$1" | tail -n +2 | awk -F, '{printf "| %s | %s | %s | %s | %s | %s | %s | %s |\n", $1, $2, $3, $4, $5, $6, $7, ($4 > 0 ? sprintf("%.2f", $7 / $4) : "-")}'
}
plot() { # P base: the SVG of base.csv
  local plot="" i=1 dat
  for s in $SCHEDULES; do
    dat="$2.$s.dat"
    awk -F, -v s="$s" '$1 == s {print $2, $3, $4, $7}' "$2.csv" >"$dat"
    [ -s "$dat" ] || continue
    plot+="\"$dat\" using 1:4 with linespoints pt 7 ps 1.2 lw 1 lc $i title \"$s measured\", "
    plot+="\"$dat\" using 1:2 with lines dt 2 lw 2 lc $i title \"$s formula\", "
    i=$((i + 1))
  done
  gnuplot <<GP
set terminal svg size 760,460 dynamic font "sans,11"
set output "$2.svg"
set title "Pipeline bubble against micro-batches m, $1 stages, ${EMULATE:-real links} (measured: points; closed form: dashed)"
set logscale x 2
set xlabel "micro-batches m"
set ylabel "bubble: 1 - compute / (ranks x makespan)"
set key top right
set grid
plot ${plot%, }
GP
  rm -f "$2".*.dat
}
for P in $PS; do
  if [ -z "$OUT_DIR" ]; then
    table "$P"
    echo
    continue
  fi
  mkdir -p "$OUT_DIR"
  base="$OUT_DIR/pipe_bubble_p$P"
  csv "$P" >"$base.csv"
  table "$P" >"$base.md"
  if command -v gnuplot >/dev/null; then
    plot "$P" "$base"
    echo "wrote $base.csv, $base.md, $base.svg" >&2
  else
    echo "pipe_schedules: gnuplot not found (Debian: apt-get install gnuplot-nox); no SVG" >&2
    echo "wrote $base.csv, $base.md" >&2
  fi
done
