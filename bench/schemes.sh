#!/usr/bin/env bash
# The parallelism-schemes and pipelining benchmarks, written to docs/schemes.md:
#  A. scaling: every scheme on 2 ranks (one per core) vs the same model on 1 rank, tokens/s and
#     efficiency = tok/s(2) / (2 · tok/s(1)); the variants alternate within each round;
#  B. pipeline bubble, measured vs the ideal (P−1)/(M+P−1), for M = 1..16 at P = 2 and 4.
# The emulated sweeps against the book's boundaries (B/X > α for DP and FSDP, F > |Y|·α for TP)
# are bench/fidelity.sh's, beside meshtrain's per-step prediction (docs/fidelity_results.md).
# usage: bench/schemes.sh [BUILD_DIR]   env: ROUNDS=3 STEPS=4 OUT=docs/schemes.md
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
. bench/lib.sh schemes
defaults ROUNDS=3 STEPS=4 OUT=docs/schemes.md
RUN() { local np=$1; shift; mpirun --oversubscribe --bind-to none -np "$np" "$MT" --bench --quiet --steps "$STEPS" "$@"; }
mkdir -p "$(dirname "$OUT")"
MODEL="--layers 4 --d-model 256 --heads 4 --kv-heads 4 --d-ff 1024 --seq-len 128 --batch 16"
exec 3>"$OUT"
cat >&3 <<HDR
# Schemes on real cores and pipeline bubbles

Measured by \`bench/schemes.sh $BUILD\` on $(date -u +%Y-%m-%d), $(getconf _NPROCESSORS_ONLN) vCPUs
($CPU), 1 BLAS thread per rank,
$STEPS timed steps per run after 2 warm-up steps; tok/s is the median step. The machine is noisy:
read ratios measured within a round, not absolute numbers.

## A. Scaling: 2 ranks (one per core) vs 1 rank

Model: \`$MODEL\` (config (a) of the single-rank benchmark). Efficiency = tok/s(2 ranks) /
(2 × tok/s(1 rank)); median over $ROUNDS rounds, the variants alternating in each round.

| scheme | flags | tok/s (median) | efficiency |
|---|---|---|---|
HDR
declare -A tps
variants=("1 rank|1|--mesh 1"
  "DP|2|--mesh x=2 --dp x"
  "DP --overlap|2|--mesh x=2 --dp x --overlap"
  "ZeRO-1|2|--mesh x=2 --dp x --zero 1"
  "ZeRO-2|2|--mesh x=2 --dp x --zero 2"
  "ZeRO-3 (FSDP)|2|--mesh x=2 --dp x --zero 3"
  "ZeRO-3 --overlap|2|--mesh x=2 --dp x --zero 3 --overlap"
  "TP|2|--mesh y=2 --tensor y"
  "TP, collective matmul|2|--mesh y=2 --tensor y --collective-matmul on"
  "pipeline GPipe M=4|2|--mesh z=2 --pipeline z --microbatches 4"
  "pipeline 1F1B M=4|2|--mesh z=2 --pipeline z --microbatches 4 --schedule 1f1b")
for r in $(seq "$ROUNDS"); do
  for v in "${variants[@]}"; do
    IFS='|' read -r name np flags <<<"$v"
    # shellcheck disable=SC2086
    line=$(RUN "$np" $MODEL $flags | grep '^bench |')
    tps[$name]+="$(field "$line" 'tok/s median') "
    echo "round $r: $name: $line" >&2
  done
done
one=$(tr ' ' '\n' <<<"${tps[1 rank]}" | grep . | median)
for v in "${variants[@]}"; do
  IFS='|' read -r name np flags <<<"$v"
  t=$(tr ' ' '\n' <<<"${tps[$name]}" | grep . | median)
  eff=$(awk -v t="$t" -v o="$one" -v n="$np" 'BEGIN{printf "%.2f", t/(n*o)}')
  echo "| $name | \`$flags\` | $t | $eff |" >&3
done

cat >&3 <<'HDR'

## B. Pipeline bubble: measured vs ideal (P−1)/(M+P−1)

Model L=4 D=128 T=128, micro-batches of 2 sequences (batch = 2M), `--mesh z=P --pipeline z`.
Measured bubble = the fraction of the step the stages spent blocked receiving from a neighbour
(mean over stages). With P = 4 the 4 ranks share 2 cores, so a stage also waits for its
neighbour to be scheduled: read those rows as an upper bound.

| P | M | ideal | GPipe measured | 1F1B measured | GPipe peak micro-batches held | 1F1B peak |
|---|---|---|---|---|---|---|
HDR
for P in 2 4; do
  for M in 1 2 4 8 16; do
    row="| $P | $M |"
    ideal=$(awk -v p="$P" -v m="$M" 'BEGIN{printf "%.3f", (p-1)/(m+p-1)}')
    row+=" $ideal |"; peaks=""
    for s in gpipe 1f1b; do
      out=$(RUN "$P" --layers 4 --d-model 128 --heads 4 --d-ff 512 --seq-len 128 --batch $((2 * M)) \
              --mesh z="$P" --pipeline z --microbatches "$M" --schedule "$s")
      pl=$(grep '^bench pipeline' <<<"$out")
      row+=" $(field "$pl" 'bubble') |"; peaks+=" $(field "$pl" 'in flight') |"
      echo "pipe P=$P M=$M $s: $pl" >&2
    done
    echo "$row$peaks" >&3
  done
done
echo "wrote $OUT" >&2
