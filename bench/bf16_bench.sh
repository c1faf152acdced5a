#!/usr/bin/env bash
# bf16 beside fp32, meshtrain beside PyTorch, on one rank and one thread: configs (a) L=4 D=256
# N=K=4 F=1024 T=128 B=16 and (b) L=8 D=512 N=K=8 F=2048 T=256 B=8 (bench/torch_ref.py's), four
# variants alternating round by round so that all see the same machine:
#   meshtrain --bench --compute-dtype fp32 | meshtrain --bench --compute-dtype bf16 |
#   torch_ref.py --bench (fp32) | torch_ref.py --bench --autocast (bf16 autocast, PyTorch's mixed
#   precision on the CPU: oneDNN's bf16 matmuls where the CPU has AVX512-BF16 or AMX).
# Each run reports its median step over STEPS timed steps (after 2 warm-up steps); the table gives
# the median and the minimum of those over ROUNDS rounds, each variant against PyTorch's bf16
# autocast, and meshtrain's share of its matmul-only bound (each of the step's products timed
# alone, in the run's precision). It names the CPU and the bf16 path meshtrain took
# (MESHTRAIN_BF16_PATH forces one).
#
# usage: bench/bf16_bench.sh [BUILD_DIR]     (default build; meshtrain must be built there)
# env:   ROUNDS=3 STEPS=10 CONFIGS="a b" OUT=bench/bf16_results.md PYTHON=/usr/bin/python3
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
: "${ROUNDS:=3}" "${STEPS:=10}" "${CONFIGS:=a b}" "${OUT:=bench/bf16_results.md}"
. bench/torch_preamble.sh bf16_bench

# VARIANTS: a subset to time (e.g. without pt_bf16 on a CPU without AVX512-BF16, where PyTorch's
# autocast runs at a few GFLOP/s: config (a)'s step takes about a minute there)
: "${VARIANTS:=mt_fp32 mt_bf16 pt_fp32 pt_bf16}"
declare -A tok bpct
path=""
for cfg in $CONFIGS; do
  for r in $(seq "$ROUNDS"); do
    for v in $VARIANTS; do
      echo "== config $cfg, round $r/$ROUNDS: $v" >&2
      case $v in
        mt_*)
          # shellcheck disable=SC2046
          out=$(mpirun --oversubscribe --bind-to none -np 1 "$MT" --bench --steps "$STEPS" \
                  --threads 1 --compute-dtype "${v#mt_}" $(ref_config_flags "$cfg") 2>&1)
          line=$(grep '^bench |' <<<"$out")
          [ "$v" = mt_bf16 ] && path=$(sed -n 's/.*bf16 path \([a-z0-9]*\) on.*/\1/p' <<<"$out" | head -1)
          b=$(field "$line" 'matmul bound')
          bpct[$cfg.$v]+="$(awk -v t="$(field "$line" 'tok/s median')" -v b="$b" \
                               'BEGIN { printf "%.1f", 100 * t / b }') " ;;
        pt_fp32) line=$("$PYTHON" bench/torch_ref.py --bench "$cfg" --steps "$STEPS" | grep '^torch |') ;;
        pt_bf16) line=$("$PYTHON" bench/torch_ref.py --bench "$cfg" --steps "$STEPS" --autocast |
                          grep '^torch |') ;;
      esac
      echo "$line" >&2
      tok[$cfg.$v]+="$(field "$line" 'tok/s median') "
    done
  done
done

stat() { tr ' ' '\n' <<<"$1" | grep . | "$2"; }
{
  echo "bf16 benchmark: $(date -u +%Y-%m-%d) on $(getconf _NPROCESSORS_ONLN) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')),"
  echo "meshtrain's bf16 path: ${path:-?}; 1 rank, 1 thread, $ROUNDS rounds x $STEPS timed steps,"
  echo "the variants alternating; tok/s = median step of a round, then median and min over rounds."
  echo "Command: ROUNDS=$ROUNDS STEPS=$STEPS CONFIGS=\"$CONFIGS\" VARIANTS=\"$VARIANTS\" bench/bf16_bench.sh"
  echo
  echo "| config | variant | tok/s (median / min) | vs PyTorch bf16 autocast | % of matmul-only bound |"
  echo "|---|---|---|---|---|"
  for cfg in $CONFIGS; do
    ref=$([ -n "${tok[$cfg.pt_bf16]:-}" ] && stat "${tok[$cfg.pt_bf16]}" median || echo 0)
    for v in $VARIANTS; do
      med=$(stat "${tok[$cfg.$v]}" median) mn=$(stat "${tok[$cfg.$v]}" minimum)
      b=$([ -n "${bpct[$cfg.$v]:-}" ] && stat "${bpct[$cfg.$v]}" median || echo "")
      name=$(sed 's/^mt_/meshtrain /; s/^pt_fp32/PyTorch fp32/; s/^pt_bf16/PyTorch bf16 autocast/' <<<"$v")
      awk -v c="$cfg" -v n="$name" -v m="$med" -v mn="$mn" -v r="$ref" -v b="$b" \
        'BEGIN { printf "| (%s) | %s | %.0f / %.0f | %s | %s |\n", c, n, m, mn,
                 (r > 0 ? sprintf("%.2fx", m / r) : "not timed"), (b == "" ? "" : b "%") }'
    done
  done
} | tee "$OUT"
echo "wrote $OUT" >&2
