#!/usr/bin/env bash
# Expert parallelism on 2 ranks (--dp x --expert x) under --emulate v5p --emulate-rate model (the
# emulated chip runs this model's matmuls at its peak C, as the book's T_math = FLOPs/C assumes),
# the batch swept across the point where the MoE blocks' compute stops being smaller than their
# collectives. Per MoE block and rank of r tokens (the book's AllToAll: 1/4 of an AllGather of the
# same global array V, on 2 ranks V/(4w) with w a link's one-way rate):
#   compute  r·(18·k·D·F_e + 6·D·E)/C          (the experts' three products forward, six backward,
#                                                and the router's)
#   transfer 5·T_hop + 4·r·k·D·b/(2w)           (the counts' AllGather, latency only; dispatch and
#                                                return forward and backward, b bytes a value)
# Their ratio rises with r toward 9·F_e·w/(b·C) (+ the router's share): the bandwidth terms of
# both grow with the tokens, so above T_hop's reach the ratio is set by F_e, D and the link, not
# by the batch (at v5p's C/w = 5100 FLOPs a byte in fp32 it passes 1 only for F_e > 2267; the
# book's ~240·E/k is another threshold, an expert's FLOPs against loading its weights from HBM).
# With F_e above that, the ratio crosses 1 where the latency stops dominating, at
#   r* = 5·T_hop / ((18·k·D·F_e + 6·D·E)/C − 2·k·D·b/w)   tokens per rank, B·T·k/E per expert copy
# (T_hop·C = 4.59e8 FLOPs and C/w = 5100 on v5p whatever the CPU: the emulation keeps both).
# This sweeps B at F_e = 4096 (asymptote 1.8), where r* = 272 (B = 8.5 at T = 64), and prints:
#  - tokens per expert copy a step, B·T·k/E (the book's (B/X)·Z·k/E with X = Z = 2);
#  - the step measured against the step predicted (bench split's measured/predicted; the issue
#    asks for ±15%), and beside it (compute CPU + transfer-last)/predicted: the step as a rank
#    with its core would take it, which a loaded machine's descheduling does not inflate;
#  - the MoE blocks' compute over their transfer (fwd-mlp + bwd-mlp of the `bench parts` lines):
#    measured (compute-cpu over transfer-last: each collective from its last rank's start, without
#    the wait for a late peer), predicted (predicted-compute over predicted-comm) and the formula's
#    above (C, T_hop, w from the run's `bench emulate` line, b from its plan's AllToAll bytes);
#  - where each crosses 1 (log-linear between the points that bracket it).
# Each cell is the median over ROUNDS rounds (the batches in rotated order within a round) of a
# run's STEPS timed steps after 2 warm-ups. Writes OUT (markdown), OUT_DIR/moe_ep_sweep.csv and,
# with gnuplot (Debian: gnuplot-nox), OUT_DIR/moe_ep_sweep.svg. Timings on a loaded machine are
# noise: take them idle.
#
# usage: bench/moe_ep_sweep.sh [BUILD_DIR]  (default build; meshtrain built there)
# env:   BS="2 4 8 16 32" FE=4096 ROUNDS=3 STEPS=3 COMPUTE=fp32 OUT=/dev/stdout OUT_DIR=bench
#        LOG=/dev/null (every run's output appended there)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
. bench/lib.sh moe_ep_sweep
defaults BS="2 4 8 16 32" FE=4096 ROUNDS=3 STEPS=3 COMPUTE=fp32 OUT=/dev/stdout OUT_DIR=bench \
  LOG=/dev/null
E=8 K=2 T=64 D=128
MODEL=(--layers 2 --d-model $D --heads 4 --kv-heads 4 --d-ff 512 --seq-len $T --experts $E
       --moe-top-k $K --expert-d-ff "$FE" --compute-dtype "$COMPUTE")
run_b() { # B: meshtrain --bench on 2 ranks, experts over x, emulated v5p at the model's rate
  mpirun --oversubscribe --bind-to none -np 2 "$MT" --bench --no-matmul-bound --steps "$STEPS" \
    "${MODEL[@]}" --batch "$1" --mesh x=2 --dp x --expert x --emulate v5p --emulate-rate model 2>&1
}
mlp() { # LINE: fwd-mlp + bwd-mlp of a "bench parts" line
  awk -v a="$(field "$1" 'fwd-mlp')" -v b="$(field "$1" 'bwd-mlp')" 'BEGIN { print a + b }'
}
num() { sed -n "s|.*$2 \([0-9.e+-]*\) .*|\1|p" <<<"$1" | head -1; } # LINE KEY: 8.5e+10 too
med() { tr ' ' '\n' <<<"$1" | grep . | median; } # of a list of words (no empty lines)
ratio() { awk -v c="$1" -v x="$2" 'BEGIN { printf "%.4g", (x > 0 ? c / x : 0) }'; }
declare -A step cpu cm pm fm
for r in $(seq "$ROUNDS"); do
  read -r -a order <<<"$BS"
  for ((i = 0; i < ${#order[@]}; i++)); do
    B=${order[$(((i + r - 1) % ${#order[@]}))]}
    echo "== B $B, round $r/$ROUNDS" >&2
    out=$(run_b "$B") || { echo "$out" | tail -5 >&2; exit 1; }
    printf '== B %s, round %s\n%s\n' "$B" "$r" "$out" >>"$LOG"
    sp=$(grep '^bench split' <<<"$out")
    step[$B]+="$(field "$sp" 'measured/predicted') "
    pms=$(sed -n 's|.* predicted \([0-9.]*\) ms/step.*|\1|p' <<<"$sp")
    cpu[$B]+="$(ratio "$(awk -v a="$(field "$sp" 'compute-cpu')" -v b="$(field "$sp" 'transfer-last')" \
                 'BEGIN { print a + b }')" "$pms") "
    c=$(mlp "$(grep '^bench parts compute-cpu' <<<"$out")")
    x=$(mlp "$(grep '^bench parts transfer-last' <<<"$out")")
    cm[$B]+="$(ratio "$c" "$x") "
    pm[$B]+="$(ratio "$(mlp "$(grep '^bench parts predicted-compute' <<<"$out")")" \
                     "$(mlp "$(grep '^bench parts predicted-comm' <<<"$out")")") "
    em=$(grep '^bench emulate' <<<"$out")
    C=$(num "$em" 'rate') w=$(num "$em" 'links') hop=$(num "$em" 'hop')
    # b: the plan's forward AllToAll moves the global X[B·k, D], V = 2·r·k·D·b bytes (MB = 1e6)
    V=$(sed -n 's/.*forward  *all_to_all .* \([0-9.]*\) MB .*/\1/p' <<<"$out" | head -1)
    fm[$B]=$(awk -v C="$C" -v w="$w" -v hop="$hop" -v V="$V" -v B="$B" -v T=$T -v k=$K -v D=$D \
      -v E=$E -v F="$FE" 'BEGIN { r = B * T / 2; b = int(V * 1e6 / (2 * r * k * D) + 0.5);
        printf "%.4g %.4g %.4g %.4g %.4g", r * (18 * k * D * F + 6 * D * E) / C,
          5 * hop + 2 * r * k * D * b / w, C, w, hop; print " " b }')
  done
done
# cross COLUMN: the tokens per expert copy where column COLUMN of the CSV passes 1 (log-linear
# between the two points around it; "none" when it does not in the sweep)
cross() {
  awk -F, -v c="$1" 'NR > 1 { x = $2; y = $c
      if (NR > 2 && ((py < 1 && y >= 1) || (py >= 1 && y < 1)) && !done) {
        printf "%.0f", exp(log(px) + (log(x) - log(px)) * (1 - py) / (y - py)); done = 1 }
      px = x; py = y }
    END { if (!done) printf "none" }' "$csv"
}
csv="$OUT_DIR/moe_ep_sweep.csv"
echo "batch,tokens_per_expert,meas_over_pred,cpu_over_pred,mlp_compute_over_transfer,pred_compute_over_transfer,formula_compute_over_transfer" >"$csv"
last=""
for B in $BS; do
  read -r fc fx C w hop b <<<"${fm[$B]}"
  last="$C $w $hop $b"
  echo "$B,$((B * T * K / E)),$(med "${step[$B]}"),$(med "${cpu[$B]}"),$(med "${cm[$B]}"),$(med "${pm[$B]}"),$(ratio "$fc" "$fx")" >>"$csv"
done
read -r C w hop b <<<"$last"
formula=$(awk -v C="$C" -v w="$w" -v hop="$hop" -v b="$b" -v k=$K -v D=$D -v E=$E -v F="$FE" \
  -v T=$T 'BEGIN { d = (18 * k * D * F + 6 * D * E) / C - 2 * k * D * b / w
    if (d <= 0) { print "none (F_e below the bandwidth crossover)"; exit }
    r = 5 * hop / d; printf "%.0f (r* = %.0f tokens per rank, B* = %.1f)", r * k * 2 / E, r, 2 * r / T }')
{
  echo "moe_ep_sweep: $(date -u +%Y-%m-%d), $CPU, $(getconf _NPROCESSORS_ONLN) cores; 2 ranks, --dp x --expert x, --emulate v5p --emulate-rate model, $COMPUTE"
  echo "L=2 D=$D N=K=4 T=$T, E=$E top-$K, F_e=$FE; median of $ROUNDS rounds of $STEPS timed steps"
  echo "emulated: C $C FLOP/s, links $w B/s per direction, hop $hop s, $b bytes a value on the AllToAlls"
  echo
  echo "| B | tokens per expert copy (B·T·k/E) | measured/predicted step | (compute CPU + transfer-last)/predicted | MoE compute / transfer, measured | predicted | formula |"
  echo "|---|---|---|---|---|---|---|"
  tail -n +2 "$csv" | tr ',' ' ' | while read -r B tpe m u c p f; do echo "| $B | $tpe | $m | $u | $c | $p | $f |"; done
  echo
  echo "Crossover (tokens per expert copy where compute = transfer): measured $(cross 5), predicted $(cross 6), formula $formula"
  echo
  echo "Command: \`ROUNDS=$ROUNDS BS=\"$BS\" FE=$FE COMPUTE=$COMPUTE bench/moe_ep_sweep.sh $BUILD\`"
} >"$OUT"
if command -v gnuplot >/dev/null; then
  gnuplot <<GP
set terminal svg size 640,400
set output "$OUT_DIR/moe_ep_sweep.svg"
set datafile separator ","
set logscale x 2
set xlabel "tokens per expert copy a step (B·T·k/E)"
set ylabel "MoE blocks' compute / their transfer"
set title "EP on 2 ranks, --emulate v5p, F_e = $FE ($CPU)" noenhanced
set key left top
plot "$csv" every ::1 using 2:5 with linespoints title "measured", \
     "$csv" every ::1 using 2:6 with linespoints title "predicted", \
     "$csv" every ::1 using 2:7 with lines title "formula", 1 with lines dt 2 title "crossover"
GP
else
  echo "moe_ep_sweep: gnuplot not found (Debian: apt-get install gnuplot-nox); no plot" >&2
fi
