#!/usr/bin/env bash
# Context parallelism (--cp x on 2 ranks) swept over T, the three algorithms alternating round by
# round so that all see the same machine:
#  - under --emulate v5p: the step measured against the step predicted (the "measured/predicted"
#    of meshtrain's bench split line; the issue asks for ±15%), beside meshplan's verdict on the
#    ring's overlap at that T (a step's attention against one K, V block's transfer);
#  - without emulation: tokens per second of each algorithm against 2 × the 1-rank run at the same
#    T (the share of linear scaling).
# Each cell is the median over ROUNDS rounds of a run's median step (STEPS timed steps after 2
# warm-ups); the table names the CPU. Timings on a loaded machine are noise: take them idle.
#
# usage: bench/cp_sweep.sh [BUILD_DIR]     (default build; meshtrain and meshplan built there)
# env:   TS="256 512 1024 2048" ROUNDS=3 STEPS=3 ALGS="allgather ring ulysses" OUT=/dev/stdout
#        DTYPE=fp32 (--compute-dtype of every run, the 1-rank one too: bf16 for the bf16 kernels)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
: "${TS:=256 512 1024 2048}" "${ROUNDS:=3}" "${STEPS:=3}" "${ALGS:=allgather ring ulysses}"
: "${OUT:=/dev/stdout}" "${DTYPE:=fp32}"
. bench/lib.sh cp_sweep
MODEL=(--layers 2 --d-model 256 --heads 8 --kv-heads 8 --d-ff 768 --batch 2 --micro-batch 2)
bench_line() { # NP ARGS...: meshtrain --bench's summary lines
  local np=$1
  shift
  mpirun --oversubscribe --bind-to none -np "$np" "$MT" --bench --quiet --steps "$STEPS" \
    "${MODEL[@]}" --compute-dtype "$DTYPE" "$@" 2>&1 | grep -E '^bench (\||split)'
}
declare -A ratio tok one
for T in $TS; do
  for r in $(seq "$ROUNDS"); do
    echo "== T $T, round $r/$ROUNDS" >&2
    one[$T]+="$(field "$(bench_line 1 --seq-len "$T")" 'tok/s median') "
    for a in $ALGS; do
      out=$(bench_line 2 --seq-len "$T" --mesh x=2 --cp x --cp-alg "$a" --emulate v5p)
      ratio[$T.$a]+="$(field "$out" 'measured/predicted') "
      out=$(bench_line 2 --seq-len "$T" --mesh x=2 --cp x --cp-alg "$a")
      tok[$T.$a]+="$(field "$out" 'tok/s median') "
    done
  done
done
cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)
{
  echo "cp_sweep: $(date -u +%Y-%m-%d), $cpu, $(getconf _NPROCESSORS_ONLN) cores; 2 ranks, --cp x; L=2 D=256 N=K=8"
  echo "F=768 B=2, --compute-dtype $DTYPE; median of $ROUNDS rounds of $STEPS timed steps"
  echo
  printf '| T | ring overlap (meshplan, v5p) |'
  for a in $ALGS; do printf ' %s meas/pred (v5p) | %s of linear |' "$a" "$a"; done
  echo
  printf '|---|---|'
  for a in $ALGS; do printf -- '---|---|'; done
  echo
  for T in $TS; do
    ov=$("$BUILD/meshplan" --chip v5p --mesh x=2 --layers 2 --d-model 256 --heads 8 \
           --kv-heads 8 --head-dim 32 --d-ff 768 --vocab 256 --batch 2 --seq-len "$T" --cp x \
           --cp-alg ring 2>&1 | sed -n 's/.*ring overlap: .*-> \(.*\)/\1/p' || true)
    o=$(tr ' ' '\n' <<<"${one[$T]}" | median)
    printf '| %s | %s |' "$T" "${ov:-?}"
    for a in $ALGS; do
      m=$(tr ' ' '\n' <<<"${ratio[$T.$a]}" | median)
      t=$(tr ' ' '\n' <<<"${tok[$T.$a]}" | median)
      printf ' %s | %s |' "$m" "$(awk -v t="$t" -v o="$o" 'BEGIN { printf "%.2f", t / (2 * o) }')"
    done
    echo
  done
} >"$OUT"
