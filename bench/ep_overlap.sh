#!/usr/bin/env bash
# The expert axis's AllToAlls under --overlap on real cores: expert parallelism on 2 ranks
# (--mesh x=2 --dp x --expert x), config (a) with every block's MLP 8 experts of F_e 512, top-2,
# with one shared expert (--overlap leaves all four exchanges of a MoE block in flight beside its
# compute) and without (only the backward's return, beside the router's backward), each with
# and without --overlap. The variants alternate within each round, so that a change of the
# machine's load hits all of them; per variant the min and the median over the rounds of the
# run's median step and of its exposed communication per step (bench split), and the median of
# the paired ratio step(--overlap) / step(off). Numbers are the same either way (test_equiv);
# on a loaded machine the times are only illustrative.
# usage: bench/ep_overlap.sh [BUILD_DIR]   env: ROUNDS=5 STEPS=6 EXTRA="" (flags for every run)
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
. bench/lib.sh ep_overlap
defaults ROUNDS=5 STEPS=6 EXTRA=
MODEL="$(ref_config_flags a) --experts 8 --moe-top-k 2 --expert-d-ff 512"
EP="--mesh x=2 --dp x --expert x"
variants=()
for s in 1 0; do
  variants+=("S=$s off|--shared-experts $s" "S=$s --overlap|--shared-experts $s --overlap")
done
declare -A ms xc
for r in $(seq "$ROUNDS"); do
  for v in "${variants[@]}"; do
    IFS='|' read -r name flags <<<"$v"
    # shellcheck disable=SC2086
    out=$(timeout 600 mpirun --oversubscribe --bind-to none -np 2 "$MT" --bench --quiet \
      --steps "$STEPS" $MODEL $EP $flags $EXTRA 2>&1) || {
      echo "ep_overlap: run failed: $name" >&2
      echo "$out" | grep -v '^\(-\|$\)' | head -5 >&2
      ms[$name]+="- "; xc[$name]+="- " # keeps rounds paired
      continue
    }
    ms[$name]+="$(field "$(grep '^bench |' <<<"$out")" 'ms/step median') "
    xc[$name]+="$(field "$(grep '^bench split' <<<"$out")" 'exposed comm') "
  done
done
stats() { tr ' ' '\n' <<<"$1" | grep -v '^-\?$' | { tee >(minimum >&3) | median; } 3>&1 | tr '\n' ' '; }
echo "ep_overlap: $CPU, 2 ranks, $ROUNDS rounds of $STEPS steps, load $(cut -d' ' -f1-3 /proc/loadavg)"
printf '%-16s %22s %26s %12s\n' variant "ms/step (median min)" "exposed comm ms (med min)" "on/off"
for v in "${variants[@]}"; do
  name=${v%%|*}
  ratio=-
  if [[ $name == *--overlap ]]; then
    # shellcheck disable=SC2206
    off=(${ms[${name% --overlap} off]}) on=(${ms[$name]})
    ratio=$(for i in "${!on[@]}"; do
      [ "${on[$i]}" != - ] && [ "${off[$i]:--}" != - ] && awk -v a="${on[$i]}" -v b="${off[$i]}" 'BEGIN {print a / b}'
    done | median)
  fi
  printf '%-16s %22s %26s %12s\n' "$name" "$(stats "${ms[$name]}")" "$(stats "${xc[$name]}")" "$ratio"
done
