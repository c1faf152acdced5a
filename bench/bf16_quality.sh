#!/usr/bin/env bash
# Training quality in bf16 against fp32 (#24's "Training quality"): the demo (`--demo`, 300
# steps on its 2x2 mesh of 4 ranks) and the nanoGPT-sized config (L4 H4 D128 T64 B12, STEPS
# steps on 1 rank) in each precision, from the same seed and data; prints each run's final
# validation loss, bf16's over fp32's, and the target: within 1% (|bf16/fp32 - 1| <= 0.01).
# The two 1-rank runs go side by side (one per core) when the machine has 2 cores or more.
# Names the CPU and meshtrain's bf16 path; writes OUT. Losses, not times: load only slows it.
# usage: bench/bf16_quality.sh [BUILD_DIR]
# env:   STEPS=2000 OUT=bench/bf16_quality.md DATA=data/tinyshakespeare.txt
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
. bench/lib.sh bf16_quality
defaults STEPS=2000 OUT=bench/bf16_quality.md DATA=data/tinyshakespeare.txt
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
NANO=(--layers 4 --heads 4 --d-model 128 --seq-len 64 --batch 12 --steps "$STEPS"
      --eval-every $((STEPS / 4)) --data "$DATA" --threads 1 --seed 1)
t0=$(date +%s)
# the last "val loss X" of a log
val() { sed -n 's/.*val loss \([0-9.]*\).*/\1/p' "$1" | tail -1; }
cores=$(getconf _NPROCESSORS_ONLN)
for dt in fp32 bf16; do
  if [ "$cores" -ge 2 ]; then
    "$MT" "${NANO[@]}" --compute-dtype "$dt" >"$work/nano_$dt.log" 2>&1 &
  else
    "$MT" "${NANO[@]}" --compute-dtype "$dt" >"$work/nano_$dt.log" 2>&1
  fi
done
wait
for dt in fp32 bf16; do
  mpirun --oversubscribe -np 4 "$MT" --demo --compute-dtype "$dt" >"$work/demo_$dt.log" 2>&1 || {
    echo "bf16_quality: the demo in $dt failed:" >&2; tail -5 "$work/demo_$dt.log" >&2; exit 1; }
done
for f in nano_fp32 nano_bf16 demo_fp32 demo_bf16; do
  [ -n "$(val "$work/$f.log")" ] || {
    echo "bf16_quality: $f printed no validation loss:" >&2; tail -5 "$work/$f.log" >&2; exit 1; }
done
path=$(sed -n 's/.*bf16 path \([a-z0-9]*\) on.*/\1/p' "$work/nano_bf16.log" | head -1)
{
  echo "# Training quality: bf16 against fp32"
  echo
  echo "\`STEPS=$STEPS bench/bf16_quality.sh\` on $(date -u +%Y-%m-%d), $cores vCPUs ($CPU),"
  echo "meshtrain's bf16 path: ${path:-?}; $(( $(date +%s) - t0 )) s. Final validation loss (the"
  echo "same fixed validation batches in both precisions):"
  echo
  echo "| run | fp32 | bf16 | bf16 / fp32 | within 1% |"
  echo "|---|---|---|---|---|"
  for run in "demo:--demo, 300 steps, 2x2 mesh of 4 ranks" \
             "nano:L4 H4 D128 T64 B12, $STEPS steps, 1 rank"; do
    k=${run%%:*} what=${run#*:}
    awk -v w="$what" -v a="$(val "$work/${k}_fp32.log")" -v b="$(val "$work/${k}_bf16.log")" \
      'BEGIN { r = b / a; printf "| %s | %.4f | %.4f | %.4f | %s |\n", w, a, b, r,
               (r - 1 <= 0.01 && 1 - r <= 0.01 ? "yes" : "**no**") }'
  done
} | tee "$OUT"
echo "wrote $OUT" >&2
