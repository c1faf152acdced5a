#!/usr/bin/env bash
# ZeRO-3 in bf16 compute (its gathered layers held in bf16, weights.c) on a shape whose matrix
# shards have odd counts (D=27, --d-ff 33 over 3 ranks: the bf16 gathers pad them to even), 4
# steps: with --bucket 0 (a gather per matrix), 1K (every matrix alone: shard over the cap) and
# 4K (3 buckets), each with and without --overlap, the step lines' losses and gradient norms are
# bit-identical (the gathers only move the same bf16 values), the plan lists the bf16 gathers
# bucketed as asked, and the losses are within 2e-3 of the 1-rank bf16 run's (gradients reduced
# in another order move the fp32 master weights by rounding only).
# usage: z3_bf16.sh MPIEXEC MESHTRAIN TEXT_FILE WORK_DIR
set -u
. "$(dirname "$0")/../common/cli_case.sh" "$@"
export MESHTRAIN_QUICK_START=1
M=(--layers 3 --d-model 27 --heads 3 --head-dim 6 --d-ff 33 --seq-len 16 --batch 6 --steps 4
  --warmup 0 --min-lr 1e-3 --compute-dtype bf16 --data "$TXT" --eval-every 0)
steps() { grep '^step' "$1" | sed 's/ | [0-9.]* ms | .*//'; }
run 1 "${M[@]}" >"$WORK/one.out" 2>&1 || bad "the 1-rank run: $(tail -2 "$WORK/one.out")"
for b in 0 1K 4K; do
  for ov in off on; do
    f="$WORK/z3_${b}_$ov.out"
    run 3 "${M[@]}" --mesh x=3 --dp x --zero 3 --bucket "$b" $([ $ov = on ] && echo --overlap) \
      >"$f" 2>&1 || bad "--bucket $b --overlap $ov: $(tail -2 "$f")"
  done
done
ref=$(steps "$WORK/z3_0_off.out")
[ "$(echo "$ref" | wc -l)" -eq 4 ] || bad "--bucket 0: 4 step lines expected, got: $ref"
for f in "$WORK"/z3_*.out; do
  [ "$(steps "$f")" = "$ref" ] && ok "$(basename "$f" .out): losses and gnorms = --bucket 0's" ||
    bad "$(basename "$f" .out): the step lines differ from --bucket 0's"
done
for b in 1K:7 4K:3; do
  n=$(grep -c "bf16 W\[D_X, ...\] → W\[D, ...\] (matrices, bucketed) *${b#*:}×" \
    "$WORK/z3_${b%:*}_off.out")
  [ "$n" -eq 1 ] && ok "--bucket ${b%:*}: ${b#*:} bucketed bf16 gathers a layer" ||
    bad "--bucket ${b%:*}: the plan does not list ${b#*:} bucketed bf16 gathers"
done
worst=$(paste <(grep '^step' "$WORK/one.out" | awk '{print $5}') \
  <(grep '^step' "$WORK/z3_4K_on.out" | awk '{print $5}') |
  awk '{d = $1 - $2; if (d < 0) d = -d; if (d > w) w = d} END {printf "%.5f", w}')
awk -v w="$worst" 'BEGIN {exit !(w <= 0.002)}' && ok "losses within $worst of 1 rank's (2e-3)" ||
  bad "losses $worst from the 1-rank run's (bound 2e-3)"
echo "z3_bf16: $fails failure(s)"
[ "$fails" -eq 0 ]
