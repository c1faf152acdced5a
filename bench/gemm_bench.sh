#!/usr/bin/env bash
# The matmul rates behind the bf16 path choice: bench/gemm_bench (fp32 kern_gemm and each bf16
# path this CPU has) beside PyTorch's torch.mm in fp32 and bf16 (bench/torch_gemm.py), on the
# forward, dX and dW products of configs (a) and (b) and on decode's rows (M = 1, 8, 32) against a
# 256 MB bf16 weight (512 MB in fp32: far past the 32 MB L3), one thread. Each process alternates
# its variants REPS times; the two programs alternate ROUNDS times. The table gives, per product
# and variant, the minimum and the median of the per-process medians, as ms, GFLOP/s and (decode)
# GB/s of weight read, beside the read bandwidth of the machine (kern_measure_read_bw).
# PATHS: the bf16 paths timed (those this CPU lacks are left out); the portable path (plain C,
# 0.5-5 GFLOP/s here) is not among the default ones. Measured on the loaded 2-vCPU machine:
# ROUNDS=1 REPS=1 with the portable path and without PyTorch 1.3 minutes; ROUNDS=2 REPS=1 with
# both 7 minutes (PyTorch's bf16 runs near 4 GFLOP/s on a CPU without AVX-512).
#
# usage: bench/gemm_bench.sh [BUILD_DIR]
# env:   ROUNDS=3 REPS=5 DECODE_MB=256 TORCH=1 PATHS=amx,avx512bf16,avx512,avx2 OUT=bench/gemm_results.md
#        PYTHON=/usr/bin/python3
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
ROUNDS=${ROUNDS:-3}
REPS=${REPS:-5}
DECODE_MB=${DECODE_MB:-256}
TORCH=${TORCH:-1}
PATHS=${PATHS:-amx,avx512bf16,avx512,avx2}
OUT=${OUT:-bench/gemm_results.md}
PYTHON=${PYTHON:-/usr/bin/python3}
GB="$BUILD/gemm_bench"
[ -x "$GB" ] || { echo "gemm_bench.sh: $GB not found; build first (cmake --build $BUILD)" >&2; exit 2; }
if [ "$TORCH" = 1 ] && ! "$PYTHON" -c "import torch" 2>/dev/null; then
  echo "gemm_bench.sh: $PYTHON cannot import torch: PyTorch left out (TORCH=0)" >&2
  TORCH=0
fi
export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

for r in $(seq "$ROUNDS"); do
  echo "== round $r/$ROUNDS: gemm_bench" >&2
  "$GB" --rounds "$REPS" --decode-mb "$DECODE_MB" --paths "$PATHS" --csv "$tmp/c$r.csv" >&2 2>/dev/null
  if [ "$TORCH" = 1 ]; then
    echo "== round $r/$ROUNDS: torch_gemm.py" >&2
    "$PYTHON" bench/torch_gemm.py --rounds "$REPS" --decode-mb "$DECODE_MB" --csv "$tmp/t$r.csv" >&2
  fi
done

cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)
bw=$(awk -F, '$2 == "read_bw" {print $8}' "$tmp"/c*.csv | sort -g | tail -1)
{
  echo "# Matmul rates, fp32 and bf16 ($(date -u +%Y-%m-%d))"
  echo
  echo "CPU: $cpu; one thread; $ROUNDS rounds of $REPS alternating repetitions;" \
       "read bandwidth (best) $bw GB/s. Command: \`bench/gemm_bench.sh\`" \
       "(ROUNDS=$ROUNDS REPS=$REPS DECODE_MB=$DECODE_MB TORCH=$TORCH PATHS=$PATHS)."
  echo
  echo "| part | shape | product | variant | min ms | median ms | GFLOP/s (median) | GB/s (median) |"
  echo "|---|---|---|---|---:|---:|---:|---:|"
  # per (part, shape, product, variant): the min of the mins, the median of the medians; FLOPs
  # and bytes recovered from each row's rates (gflops·ms, gbs·ms)
  cat "$tmp"/*.csv | awk -F, '$1 != "part" && $2 != "read_bw" {
      k = $1 FS $2 FS $3 FS $4
      if (!(k in n)) order[++nk] = k
      n[k]++; med[k, n[k]] = $6
      if (!(k in mn) || $5 < mn[k]) mn[k] = $5
      fl[k] = $7 * $6; by[k] = $8 * $6
    } END {
      for (i = 1; i <= nk; i++) {
        k = order[i]; m = n[k]
        for (a = 1; a <= m; a++) v[a] = med[k, a]
        for (a = 1; a <= m; a++) for (b = a + 1; b <= m; b++) if (v[b] < v[a]) { t = v[a]; v[a] = v[b]; v[b] = t }
        md = m % 2 ? v[(m + 1) / 2] : (v[m / 2] + v[m / 2 + 1]) / 2
        split(k, f, FS)
        printf "| %s | %s | %s | %s | %.3f | %.3f | %.1f | %s |\n", f[1], f[2], f[3], f[4], mn[k], md,
               fl[k] / md, (by[k] > 0 ? sprintf("%.1f", by[k] / md) : "")
      }
    }' | sort -t'|' -k2,2 -k3,3 -k4,4 -s
} > "$OUT"
echo "gemm_bench.sh: wrote $OUT" >&2
