#!/usr/bin/env bash
# The ring's overlap point: --cp x --cp-alg ring on 2 ranks under --emulate v5p, T swept across
# the length where a zigzag step's attention outlasts the ppermute of the next K, V block.
# meshplan says where: hidden for T >= C·(C_chip/W_1)·a·K_Y/N_Y (and long enough for a step to
# outlast the hop latency T_min), its "hidden for T >= ..." line; the model is GQA with one kv
# head for 16 query heads, which brings that point down to ~1300 tokens (with N = K it would be
# 16× further, where a CPU's attention takes minutes a step). For each T:
#  - the step measured (bench's ms/step median) and predicted (bench predict's step, the
#    ppermutes replayed against the measured compute), and their ratio;
#  - the attention sublayers' compute over their transfer, measured (bench parts compute-cpu and
#    transfer, fwd-attn + bwd-attn) and predicted (predicted-compute over predicted-comm): the
#    ring's ppermutes run inside the attention, so the point where the transfer hides is where
#    the compute overtakes it;
#  - meshplan's verdict at that T (exposed / hidden).
# Each cell is the median over ROUNDS rounds of a run's STEPS timed steps (after 2 warm-ups).
# Writes OUT (markdown), OUT_DIR/cp_ring_sweep.csv and, with gnuplot (Debian: gnuplot-nox),
# OUT_DIR/cp_ring_sweep.svg: the steps against T with meshplan's point drawn. Timings on a loaded
# machine are noise: take them idle.
#
# usage: bench/cp_ring_sweep.sh [BUILD_DIR]   (default build; meshtrain and meshplan built there)
# env:   TS="512 1024 1536 2048 3072 4096" ROUNDS=3 STEPS=3 OUT=/dev/stdout OUT_DIR=bench
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
: "${TS:=512 1024 1536 2048 3072 4096}" "${ROUNDS:=3}" "${STEPS:=3}" "${OUT:=/dev/stdout}"
: "${OUT_DIR:=bench}"
. bench/lib.sh cp_ring_sweep
SHAPE=(--layers 2 --d-model 256 --heads 16 --kv-heads 1 --d-ff 768 --batch 2)
bench_out() { # T: meshtrain --bench's lines, ring over x of 2, emulated v5p
  mpirun --oversubscribe --bind-to none -np 2 "$MT" --bench --quiet --steps "$STEPS" \
    "${SHAPE[@]}" --micro-batch 2 --seq-len "$1" --mesh x=2 --cp x --cp-alg ring --emulate v5p \
    2>&1 | grep -E '^bench'
}
plan() { # T: meshplan's ring section for the same model on v5p
  "$BUILD/meshplan" --chip v5p --mesh x=2 "${SHAPE[@]}" --head-dim 16 --vocab 256 \
    --seq-len "$1" --cp x --cp-alg ring 2>&1
}
attn() { # LINE: fwd-attn + bwd-attn of a "bench parts" line
  awk -v a="$(field "$1" 'fwd-attn')" -v b="$(field "$1" 'bwd-attn')" 'BEGIN { print a + b }'
}
ratio_of() { awk -v c="$1" -v x="$2" 'BEGIN { printf "%.4g", (x > 0 ? c / x : 0) }'; }
declare -A meas pred cm pm
for T in $TS; do
  for r in $(seq "$ROUNDS"); do
    echo "== T $T, round $r/$ROUNDS" >&2
    out=$(bench_out "$T")
    meas[$T]+="$(field "$(grep '^bench |' <<<"$out")" 'ms/step median') "
    pred[$T]+="$(field "$(grep '^bench predict' <<<"$out")" 'step') "
    c=$(attn "$(grep '^bench parts compute-cpu' <<<"$out")")
    x=$(attn "$(grep '^bench parts transfer |' <<<"$out")")
    cm[$T]+="$(ratio_of "$c" "$x") "
    pc=$(attn "$(grep '^bench parts predicted-compute' <<<"$out")")
    px=$(attn "$(grep '^bench parts predicted-comm' <<<"$out")")
    pm[$T]+="$(ratio_of "$pc" "$px") "
  done
done
first=${TS%% *}
# meshplan's point: the larger of the bandwidth and the latency thresholds
hidden=$(plan "$first" | sed -n 's/.*hidden for T >= .* = \([0-9.]*\) tokens (and >= \([0-9.]*\) .*/\1 \2/p' |
         awk '{ printf "%.0f", ($1 > $2 ? $1 : $2) }')
csv="$OUT_DIR/cp_ring_sweep.csv"
echo "T,meshplan,measured_ms,predicted_ms,meas_over_pred,attn_compute_over_transfer,pred_attn_compute_over_transfer" >"$csv"
{
  echo "cp_ring_sweep: $(date -u +%Y-%m-%d), $CPU, $(getconf _NPROCESSORS_ONLN) cores; 2 ranks, --cp x --cp-alg ring, --emulate v5p"
  echo "L=2 D=256 N=16 K=1 H=16 F=768 B=2; median of $ROUNDS rounds of $STEPS timed steps"
  echo "meshplan: the ring's ppermute is hidden for T >= ${hidden:-?} tokens on v5p"
  echo
  echo "| T | meshplan (v5p) | measured ms/step | predicted ms/step | measured/predicted | attention compute / transfer, measured | predicted |"
  echo "|---|---|---|---|---|---|---|"
  for T in $TS; do
    v=$(plan "$T" | sed -n 's/.*ring overlap: .*-> \(.*\)/\1/p')
    m=$(tr ' ' '\n' <<<"${meas[$T]}" | median)
    p=$(tr ' ' '\n' <<<"${pred[$T]}" | median)
    q=$(ratio_of "$m" "$p")
    c=$(tr ' ' '\n' <<<"${cm[$T]}" | median)
    d=$(tr ' ' '\n' <<<"${pm[$T]}" | median)
    echo "| $T | ${v:-?} | $m | $p | $q | $c | $d |"
    echo "$T,${v:-?},$m,$p,$q,$c,$d" >>"$csv"
  done
  echo
  echo "Command: \`TS=\"$TS\" ROUNDS=$ROUNDS STEPS=$STEPS bench/cp_ring_sweep.sh $BUILD\`."
} >"$OUT"
if command -v gnuplot >/dev/null; then
  gnuplot <<GP
set terminal svg size 760,560 dynamic font "sans,11"
set output "$OUT_DIR/cp_ring_sweep.svg"
set datafile separator ","
set logscale x 2
set logscale y
set xlabel "T (tokens per sequence)"
set ylabel "ms per step"
set y2label "attention compute / its transfer"
set y2tics
set logscale y2
set key outside below
set title "ring attention on 2 ranks, --emulate v5p ($CPU)"
set arrow from ${hidden:-1},graph 0 to ${hidden:-1},graph 1 nohead dt 2 lc rgb "gray40"
set label "meshplan: hidden for T >= ${hidden:-?}" at ${hidden:-1},graph 0.95 offset 0.5,0
plot "$csv" every ::1 using 1:3 with linespoints pt 7 title "measured step", \
     "$csv" every ::1 using 1:4 with linespoints pt 6 title "predicted step", \
     "$csv" every ::1 using 1:6 axes x1y2 with linespoints dt 3 pt 5 title "attention compute/transfer, measured", \
     "$csv" every ::1 using 1:7 axes x1y2 with linespoints dt 3 pt 4 title "attention compute/transfer, predicted", \
     1 axes x1y2 with lines dt 4 lc rgb "gray60" title "compute = transfer"
GP
  echo "wrote $csv, $OUT_DIR/cp_ring_sweep.svg" >&2
else
  echo "cp_ring_sweep: gnuplot not found (Debian: apt-get install gnuplot-nox); no plot" >&2
fi
