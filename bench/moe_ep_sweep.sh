#!/usr/bin/env bash
# Expert parallelism on 2 ranks (--dp x --expert x) under --emulate v5p, the batch swept across
# the point where an expert's compute stops being smaller than the tokens' AllToAlls. The book:
# an expert needs ~240 tokens to be FLOP-bound, so a batch must exceed ~240·E/k tokens; the
# AllToAlls' bytes grow with the batch as the experts' FLOPs do, so the same sweep shows where
# the MoE blocks' compute overtakes their AllToAlls on the emulated links. For each batch:
#  - tokens per expert copy a step, B·T·k/E (the book's (B/X)·Z·k/E with X = Z = 2), beside
#    meshplan's threshold for the chip (its "must exceed ... = N" line);
#  - the step measured against the step predicted (bench split's measured/predicted; the issue
#    asks for ±15%);
#  - the MLP's (MoE blocks') compute over its transfer, measured (bench parts compute-cpu and
#    transfer, forward + backward) and predicted (bench parts predicted-*): the crossover is
#    where they pass 1.
# Each cell is the median over ROUNDS rounds of a run's median step (STEPS timed steps after 2
# warm-ups). Writes OUT (markdown), OUT_DIR/moe_ep_sweep.csv and, with gnuplot (Debian:
# gnuplot-nox), OUT_DIR/moe_ep_sweep.svg. Timings on a loaded machine are noise: take them idle.
#
# usage: bench/moe_ep_sweep.sh [BUILD_DIR]  (default build; meshtrain and meshplan built there)
# env:   BS="4 16 64 256" ROUNDS=3 STEPS=3 OUT=/dev/stdout OUT_DIR=bench
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
: "${BS:=4 16 64 256}" "${ROUNDS:=3}" "${STEPS:=3}" "${OUT:=/dev/stdout}" "${OUT_DIR:=bench}"
. bench/lib.sh moe_ep_sweep
E=8 K=2 T=64
MODEL=(--layers 2 --d-model 128 --heads 4 --kv-heads 4 --d-ff 512 --seq-len $T --experts $E
       --moe-top-k $K)
bench_out() { # B: meshtrain --bench's lines on 2 ranks, experts over x, emulated v5p
  mpirun --oversubscribe --bind-to none -np 2 "$MT" --bench --quiet --steps "$STEPS" \
    "${MODEL[@]}" --batch "$1" --mesh x=2 --dp x --expert x --emulate v5p 2>&1 | grep -E '^bench'
}
mlp() { # LINE: fwd-mlp + bwd-mlp of a "bench parts" line
  awk -v a="$(field "$1" 'fwd-mlp')" -v b="$(field "$1" 'bwd-mlp')" 'BEGIN { print a + b }'
}
declare -A ratio cm pm
for B in $BS; do
  for r in $(seq "$ROUNDS"); do
    echo "== B $B, round $r/$ROUNDS" >&2
    out=$(bench_out "$B")
    ratio[$B]+="$(field "$(grep '^bench split' <<<"$out")" 'measured/predicted') "
    c=$(mlp "$(grep '^bench parts compute-cpu' <<<"$out")")
    x=$(mlp "$(grep '^bench parts transfer |' <<<"$out")")
    pc=$(mlp "$(grep '^bench parts predicted-compute' <<<"$out")")
    px=$(mlp "$(grep '^bench parts predicted-comm' <<<"$out")")
    cm[$B]+="$(awk -v c="$c" -v x="$x" 'BEGIN { printf "%.4g", (x > 0 ? c / x : 0) }') "
    pm[$B]+="$(awk -v c="$pc" -v x="$px" 'BEGIN { printf "%.4g", (x > 0 ? c / x : 0) }') "
  done
done
thr=$("$BUILD/meshplan" --chip v5p --mesh x=2 --dp x --layers 2 --d-model 128 --heads 4 \
        --kv-heads 4 --head-dim 32 --d-ff 512 --vocab 256 --seq-len $T --batch 2 --experts $E \
        --moe-top-k $K --expert x 2>&1 | sed -n 's/.*must exceed .*= \([0-9.]*\) (the book.*/\1/p' |
      head -1)
cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)
csv="$OUT_DIR/moe_ep_sweep.csv"
echo "batch,tokens_per_expert,meas_over_pred,mlp_compute_over_transfer,pred_mlp_compute_over_transfer" >"$csv"
{
  echo "moe_ep_sweep: $(date -u +%Y-%m-%d), $cpu, $(getconf _NPROCESSORS_ONLN) cores; 2 ranks, --dp x --expert x, --emulate v5p"
  echo "L=2 D=128 N=K=4 F=512 T=$T, E=$E top-$K; median of $ROUNDS rounds of $STEPS timed steps"
  echo "meshplan's batch threshold for an expert group on v5p (the book's ~240·E/k): ${thr:-?} tokens"
  echo
  echo "| B | tokens per expert copy (B·T·k/E) | measured/predicted step | MoE compute / transfer, measured | predicted |"
  echo "|---|---|---|---|---|"
  for B in $BS; do
    tpe=$((B * T * K / E))
    m=$(tr ' ' '\n' <<<"${ratio[$B]}" | median)
    c=$(tr ' ' '\n' <<<"${cm[$B]}" | median)
    p=$(tr ' ' '\n' <<<"${pm[$B]}" | median)
    echo "| $B | $tpe | $m | $c | $p |"
    echo "$B,$tpe,$m,$c,$p" >>"$csv"
  done
} >"$OUT"
if command -v gnuplot >/dev/null; then
  gnuplot <<GP
set terminal svg size 640,400
set output "$OUT_DIR/moe_ep_sweep.svg"
set datafile separator ","
set logscale x 2
set xlabel "tokens per expert copy a step (B·T·k/E)"
set ylabel "MoE blocks' compute / their transfer"
set title "EP on 2 ranks, --emulate v5p ($cpu)"
plot "$csv" every ::1 using 2:4 with linespoints title "measured", \
     "$csv" every ::1 using 2:5 with linespoints title "predicted", 1 with lines dt 2 title "crossover"
GP
else
  echo "moe_ep_sweep: gnuplot not found (Debian: apt-get install gnuplot-nox); no plot" >&2
fi
