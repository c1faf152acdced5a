#!/usr/bin/env bash
# The one-rank benchmark: meshtrain --bench beside the same model in PyTorch (bench/torch_ref.py), on
# configs (a) L=4 D=256 N=K=4 F=1024 T=128 B=16 and (b) L=8 D=512 N=K=8 F=2048 T=256 B=8, one rank
# and one BLAS/torch thread, the two alternating round by round so that both see the same machine.
# Each run reports its median step over STEPS timed steps (after 2 warm-up steps); the table gives
# the median and the minimum of those over ROUNDS rounds, meshtrain's MFU and its matmul-only bound
# (the sum of the sgemm times of the step's matmuls, each shape timed alone).
#
# usage: bench/run_bench.sh [BUILD_DIR]     (default build; meshtrain must be built there)
# env:   ROUNDS=3 STEPS=10 CONFIGS="a b" OUT=bench/results.md PYTHON=/usr/bin/python3
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
. bench/torch_preamble.sh run_bench
defaults ROUNDS=3 STEPS=10 "CONFIGS=a b" OUT=bench/results.md

declare -A mt pt mfu bound
for cfg in $CONFIGS; do
  for r in $(seq "$ROUNDS"); do
    echo "== config $cfg, round $r/$ROUNDS: meshtrain" >&2
    # shellcheck disable=SC2046
    line=$(mpirun --oversubscribe --bind-to none -np 1 "$MT" --bench --quiet --steps "$STEPS" \
             --threads 1 $(ref_config_flags "$cfg") | grep '^bench |')
    echo "$line" >&2
    mt[$cfg]+="$(field "$line" 'tok/s median') "
    mfu[$cfg]+="$(field "$line" 'MFU') "
    bound[$cfg]+="$(field "$line" 'matmul bound') "
    echo "== config $cfg, round $r/$ROUNDS: pytorch" >&2
    line=$("$PYTHON" bench/torch_ref.py --bench "$cfg" --steps "$STEPS" | grep '^torch |')
    echo "$line" >&2
    pt[$cfg]+="$(field "$line" 'tok/s median') "
  done
done

{
  echo "Benchmark: $(date -u +%Y-%m-%d) on $(getconf _NPROCESSORS_ONLN) cores ($CPU),"
  echo "1 rank, 1 thread, $ROUNDS rounds x $STEPS timed steps; tok/s = median step of a round,"
  echo "then median and min over rounds. Bound = sum of the sgemm times of the step's matmuls."
  echo
  echo "| config | meshtrain tok/s (median / min) | MFU | matmul-only bound tok/s | % of bound | PyTorch tok/s (median / min) | meshtrain / PyTorch |"
  echo "|---|---|---|---|---|---|---|"
  for cfg in $CONFIGS; do
    mmed=$(tr ' ' '\n' <<<"${mt[$cfg]}" | grep . | median)
    mmin=$(tr ' ' '\n' <<<"${mt[$cfg]}" | grep . | minimum)
    pmed=$(tr ' ' '\n' <<<"${pt[$cfg]}" | grep . | median)
    pmin=$(tr ' ' '\n' <<<"${pt[$cfg]}" | grep . | minimum)
    fmed=$(tr ' ' '\n' <<<"${mfu[$cfg]}" | grep . | median)
    bmed=$(tr ' ' '\n' <<<"${bound[$cfg]}" | grep . | median)
    awk -v c="$cfg" -v mm="$mmed" -v mn="$mmin" -v f="$fmed" -v b="$bmed" -v pm="$pmed" -v pn="$pmin" \
      'BEGIN { printf "| (%s) | %.0f / %.0f | %.0f%% | %.0f | %.0f%% | %.0f / %.0f | %.2fx |\n",
               c, mm, mn, f, b, 100 * mm / b, pm, pn, mm / pm }'
  done
} | tee "$OUT"
echo "wrote $OUT" >&2
