#!/usr/bin/env bash
# The ring's backward with and without --overlap (--cp x --cp-alg ring on 2 ranks under
# --emulate v5p, GQA 16/1 heads, T = 1536: near meshplan's overlap point, where a block's
# transfer is comparable to its attention). With --overlap each block's dK, dV travel while the
# next block's dQ half is computed (cp.c's ring_bwd); the numbers are the same either way
# (test_equiv's --overlap flip, cp_work_3). The variants alternate within each round, so that a
# change of the machine's load hits both; per variant the min and the median over the rounds of
# the run's median step (measured), its predicted step (the replay of its own events: what it
# left in flight overlaps), exposed communication a step and the backward attention's transfer
# left exposed (bench parts transfer-last, bwd-attn); and the median of the paired ratio
# step(--overlap) / step(off). On a loaded machine the times are only illustrative.
# usage: bench/cp_ring_overlap.sh [BUILD_DIR]   env: ROUNDS=5 STEPS=4 T=1536 EXTRA=""
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
. bench/lib.sh cp_ring_overlap
defaults ROUNDS=5 STEPS=4 T=1536 EXTRA=
SHAPE="--layers 2 --d-model 256 --heads 16 --kv-heads 1 --d-ff 768 --batch 2 --micro-batch 2"
RING="--mesh x=2 --cp x --cp-alg ring --emulate v5p --seq-len $T"
variants=("off|" "--overlap|--overlap")
declare -A ms pr xc bw
for r in $(seq "$ROUNDS"); do
  for v in "${variants[@]}"; do
    IFS='|' read -r name flags <<<"$v"
    # shellcheck disable=SC2086
    if ! out=$(bench_run "cp_ring_overlap $name" 2 --steps "$STEPS" $SHAPE $RING $flags $EXTRA); then
      ms[$name]+="- "; pr[$name]+="- "; xc[$name]+="- "; bw[$name]+="- " # keeps rounds paired
      continue
    fi
    ms[$name]+="$(field "$(grep '^bench |' <<<"$out")" 'ms/step median') "
    pr[$name]+="$(field "$(grep '^bench predict' <<<"$out")" 'step') "
    xc[$name]+="$(field "$(grep '^bench split' <<<"$out")" 'exposed comm') "
    bw[$name]+="$(field "$(grep '^bench parts transfer-last' <<<"$out")" 'bwd-attn') "
  done
done
stats() { # "median min" of the rounds' values (- for a failed run left out)
  local v
  v=$(tr ' ' '\n' <<<"$1" | grep -v '^-\?$' || true)
  if [ -z "$v" ]; then echo "- -"; else echo "$(median <<<"$v") $(minimum <<<"$v")"; fi
}
echo "cp_ring_overlap: $CPU, 2 ranks, T = $T, $ROUNDS rounds of $STEPS steps, load $(cut -d' ' -f1-3 /proc/loadavg)"
printf '%-10s %20s %20s %20s %22s %8s\n' variant "ms/step (med min)" "predicted (med min)" \
  "exposed comm (med min)" "bwd-attn exposed (med min)" "on/off"
for v in "${variants[@]}"; do
  name=${v%%|*}
  ratio=-
  if [ "$name" = --overlap ]; then
    # shellcheck disable=SC2206
    off=(${ms[off]}) on=(${ms[$name]})
    ratio=$(for i in "${!on[@]}"; do
      [ "${on[$i]}" != - ] && [ "${off[$i]:--}" != - ] && awk -v a="${on[$i]}" -v b="${off[$i]}" 'BEGIN {print a / b}'
    done | median || true)
    ratio=${ratio:--}
  fi
  printf '%-10s %20s %20s %20s %22s %8s\n' "$name" "$(stats "${ms[$name]}")" \
    "$(stats "${pr[$name]}")" "$(stats "${xc[$name]}")" "$(stats "${bw[$name]}")" "$ratio"
done
