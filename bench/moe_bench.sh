#!/usr/bin/env bash
# The one-rank mixture-of-experts benchmark: meshtrain --bench with experts beside the same model
# in PyTorch (bench/torch_moe.py: the same conventions, a loop over the experts with index_add as
# PyTorch MoEs are commonly written), one rank and one BLAS/torch thread, the two alternating
# round by round so that both see the same machine. The config is (a)'s size, its MLP a mixture
# of 8 experts of F_e = 512, top-2: the same activated FLOPs per token as the dense (a)
# (L=4 D=256 N=K=4 F=1024 T=128 B=16), dropless, 4x its MLP parameters. Each run reports its
# median step over STEPS timed steps (after 2 warm-up steps); the table gives the median and the
# minimum of those over ROUNDS rounds, and meshtrain's matmul-only bound (balanced routing).
#
# usage: bench/moe_bench.sh [BUILD_DIR]     (default build; meshtrain must be built there)
# env:   ROUNDS=3 STEPS=10 OUT=bench/moe_results.md PYTHON=/usr/bin/python3
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
. bench/torch_preamble.sh moe_bench
defaults ROUNDS=3 STEPS=10 OUT=bench/moe_results.md

shape=(--layers 4 --d-model 256 --heads 4 --d-ff 1024 --seq-len 128 --batch 16 --experts 8
       --moe-top-k 2 --expert-d-ff 512)
mt=() pt=() bound=() mfu=()
for r in $(seq "$ROUNDS"); do
  echo "== round $r/$ROUNDS: meshtrain" >&2
  line=$(mpirun --oversubscribe --bind-to none -np 1 "$MT" --bench --quiet --steps "$STEPS" \
           --threads 1 --kv-heads 4 "${shape[@]}" | grep '^bench |')
  echo "$line" >&2
  mt+=("$(field "$line" 'tok/s median')") mfu+=("$(field "$line" 'MFU')")
  bound+=("$(field "$line" 'matmul bound')")
  echo "== round $r/$ROUNDS: pytorch" >&2
  line=$("$PYTHON" bench/torch_moe.py --bench --steps "$STEPS" "${shape[@]}" | grep '^torch-moe |')
  echo "$line" >&2
  pt+=("$(field "$line" 'tok/s median')")
done

list() { printf '%s\n' "$@" | grep .; }
{
  echo "MoE benchmark: $(date -u +%Y-%m-%d) on $(getconf _NPROCESSORS_ONLN) cores ($CPU),"
  echo "1 rank, 1 thread, $ROUNDS rounds x $STEPS timed steps, alternating; tok/s = median step of"
  echo "a round, then median and min over rounds. Config: (a)'s size with 8 experts of F_e 512,"
  echo "top-2 (the activated FLOPs of (a)), dropless. Bound = the step's sgemms, routing balanced."
  echo
  echo "Command: \`ROUNDS=$ROUNDS STEPS=$STEPS bench/moe_bench.sh $BUILD\` (target: meshtrain / PyTorch >= 1.2)"
  echo
  echo "| meshtrain tok/s (median / min) | MFU | matmul-only bound tok/s | PyTorch tok/s (median / min) | meshtrain / PyTorch | per round |"
  echo "|---|---|---|---|---|---|"
  rounds=$(paste -d/ <(list "${mt[@]}") <(list "${pt[@]}") | awk -F/ '{printf "%s%.2f", (NR > 1 ? ", " : ""), $1 / $2}')
  awk -v mm="$(list "${mt[@]}" | median)" -v mn="$(list "${mt[@]}" | minimum)" \
      -v f="$(list "${mfu[@]}" | median)" -v b="$(list "${bound[@]}" | median)" \
      -v pm="$(list "${pt[@]}" | median)" -v pn="$(list "${pt[@]}" | minimum)" -v rr="$rounds" \
      'BEGIN { printf "| %.0f / %.0f | %.0f%% | %.0f | %.0f / %.0f | %.2fx | %s |\n", mm, mn, f, b, pm, pn, mm / pm, rr }'
} | tee "$OUT"
echo "wrote $OUT" >&2
