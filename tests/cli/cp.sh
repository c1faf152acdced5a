#!/usr/bin/env bash
# Context parallelism through the meshtrain command (--cp AXIS --cp-alg ALG):
#  - bad input ends with status 2 and one message from one rank: T not divisible by |axis|
#    (allgather and ring, on an odd axis of 3), ring on an open axis of 3 (no
#    wraparound link for its last hop), for ulysses query heads (also after --tensor) not
#    divisible by |axis| and kv heads (also after --tensor) that neither divide nor are divided
#    by it, an axis used
#    twice (--dp, --tensor), an unknown algorithm,
#    a name that is no axis, an axis the mesh lacks, --cp-alg without --cp, --cp with what it does
#    not compose with yet (--sample), --cp in generate --bench;
#  - a run on 3 ranks prints the context axis in its plan and the per-rank share of T;
#  - --bench with --cp-alg ring under --emulate v5p on 2 ranks prints its step and the step's
#    prediction (the ±15% is bench/cp_sweep.sh's, on an idle machine);
#  - a checkpoint saved under --cp with ZeRO-3 loads on 1 rank and saves again bit for bit.
# The numbers (losses, gradient norms, parameters against the 1-rank run) are test_equiv's
# (tests/parallel: equiv_cp_*).
# usage: cp.sh MPIEXEC MESHTRAIN TEXT_FILE WORK_DIR
set -u
. "$(dirname "$0")/../common/cli_case.sh"
# the cases run concurrently, at most 3 at a time (each mostly waits for mpirun's start-up),
# each in its own directory; their verdicts are printed in order at the end
ncase=0
case_() {
  local i=$ncase
  ncase=$((ncase + 1))
  while [ "$(jobs -rp | wc -l)" -ge 3 ]; do wait -n; done
  (WORK="$WORK/c$i" && mkdir -p "$WORK" && one_error_case "$@" >"$WORK/verdict") &
}

base=(--data "$TXT" --layers 2 --d-model 32 --heads 4 --kv-heads 2 --batch 4 --micro-batch 4
      --eval-every 0 --quiet --steps 1)
case_ 2 3 "--seq-len 32 is not divisible by |axis| = 3 (--cp x of 3 ranks, --cp-alg allgather)" \
  "${base[@]}" --seq-len 32 --mesh x=3 --cp x
case_ 2 3 "--seq-len 20 is not divisible by |axis| = 3 (--cp x of 3 ranks, --cp-alg ring)" \
  "${base[@]}" --seq-len 20 --mesh x=3 --cp x --cp-alg ring
case_ 2 3 "--cp-alg ulysses: the 4 query heads of a rank are not divisible by |x| = 3" \
  "${base[@]}" --seq-len 24 --mesh x=3 --cp x --cp-alg ulysses
six=(--data "$TXT" --layers 2 --d-model 48 --heads 6 --kv-heads 2 --batch 4 --micro-batch 4
     --eval-every 0 --quiet --steps 1)
case_ 2 3 "--cp-alg ulysses: the 2 kv heads of a rank neither divide nor are divided by |x| = 3" \
  "${six[@]}" --seq-len 24 --mesh x=3 --cp x --cp-alg ulysses
case_ 2 4 "the 3 query heads of a rank (after --tensor) are not divisible by |y| = 2" \
  "${six[@]}" --seq-len 32 --mesh x=2,y=2 --tensor x --cp y --cp-alg ulysses
case_ 2 4 "the 3 kv heads of a rank (after --tensor) neither divide nor are divided by |y| = 2" \
  --data "$TXT" --layers 2 --d-model 48 --heads 12 --kv-heads 6 --batch 4 --micro-batch 4 \
  --eval-every 0 --quiet --steps 1 --seq-len 32 --mesh x=2,y=2 --tensor x --cp y --cp-alg ulysses
case_ 2 3 "--cp-alg ring over x, an open axis of 3" "${base[@]}" --seq-len 24 --mesh x=3 \
  --open x --cp x --cp-alg ring
case_ 2 2 "--cp x is also the --dp axis: an axis is used twice" "${base[@]}" --seq-len 32 \
  --mesh x=2 --dp x --cp x
case_ 2 4 "--cp y is also the --tensor axis: an axis is used twice" "${base[@]}" --seq-len 32 \
  --mesh x=2,y=2 --tensor y --cp y
case_ 2 2 "--cp-alg zigzag: unknown (expected allgather, ring or ulysses)" "${base[@]}" \
  --seq-len 32 --mesh x=2 --cp x --cp-alg zigzag
case_ 2 2 "--cp w: give one axis, x, y or z" "${base[@]}" --seq-len 32 --cp w
case_ 2 2 "--cp z: the mesh has no axis z" "${base[@]}" --seq-len 32 --mesh x=2 --cp z
case_ 2 2 "--cp-alg is given but unused" "${base[@]}" --seq-len 32 --cp-alg allgather
case_ 2 2 "--cp with --sample is not implemented yet" "${base[@]}" --seq-len 32 --mesh x=2 \
  --cp x --sample 4
case_ 2 4 "--cp z is also the --pipeline axis: an axis is used twice" "${base[@]}" --seq-len 32 \
  --mesh x=2,z=2 --pipeline z --cp z
case_ 2 1 "--cp does nothing in meshtrain generate --bench" generate --bench --cp x

wait
for ((i = 0; i < ncase; i++)); do
  cat "$WORK/c$i/verdict"
  grep -q '^ok ' "$WORK/c$i/verdict" || fails=$((fails + 1))
done

# a run: the plan names the context axis and each rank's share
out=$(run 3 --data "$TXT" --layers 2 --d-model 32 --heads 4 --kv-heads 2 --batch 4 \
  --micro-batch 4 --eval-every 0 --seq-len 24 --mesh x=3 --cp x --steps 2 2>&1)
if grep -q "context over X (|C| = 3, --cp-alg allgather): each sequence's T = 24 tokens split zigzag (chunks i and 2|C|-1-i), 8 per rank" <<<"$out" &&
   grep -q "^done: 2 steps" <<<"$out"; then
  ok "3 ranks: the plan shows the context axis (T = 24 zigzag, 8 tokens per rank) and the run ends"
else
  bad "3 ranks: no context line or no end"
  head -20 <<<"$out" | sed 's/^/     | /'
fi

out=$(run 2 --bench --quiet --steps 1 --layers 2 --d-model 32 --heads 4 --kv-heads 2 --batch 2 \
  --micro-batch 2 --seq-len 32 --mesh x=2 --cp x --cp-alg ring --emulate v5p 2>&1)
if grep -q "^bench |" <<<"$out" && grep -qE "^bench split .*measured/predicted [0-9.]+" <<<"$out"; then
  ok "--bench --cp x --cp-alg ring --emulate v5p: $(grep -oE 'predicted [0-9.]+ ms/step \| measured/predicted [0-9.]+' <<<"$out")"
else
  bad "--bench with --cp: no summary or no prediction"
  head -20 <<<"$out" | sed 's/^/     | /'
fi

# checkpoints: saved under --cp ring with ZeRO-3 (the shards over the context axis), loaded and
# saved again on 1 rank: every parameter and AdamW moment bit-identical
if command -v h5diff >/dev/null; then
  ck=(--data "$TXT" --layers 2 --d-model 32 --heads 4 --kv-heads 2 --batch 4 --micro-batch 4
      --eval-every 0 --quiet --seq-len 32 --steps 2)
  rm -f "$WORK/cp.h5" "$WORK/one.h5"
  run 2 "${ck[@]}" --mesh x=2 --cp x --cp-alg ring --zero 3 --save-final "$WORK/cp.h5" \
    >/dev/null 2>&1 || bad "the --cp ZeRO-3 run exited $?"
  run 1 "${ck[@]}" --resume "$WORK/cp.h5" --save-final "$WORK/one.h5" >/dev/null 2>&1 ||
    bad "the 1-rank resume exited $?"
  same_h5 "$WORK/cp.h5" "$WORK/one.h5" "params optimizer/m optimizer/v" embed wq wk wv wo w_gate \
    w_up w_down attn_norm mlp_norm final_norm unembed &&
    ok "a checkpoint of --cp x --zero 3, loaded and saved on 1 rank: bit-identical" ||
    bad "a checkpoint of --cp x --zero 3, loaded and saved on 1 rank: differs"
fi

[ "$fails" -eq 0 ] && echo PASS || echo "FAIL ($fails)"
exit $((fails > 0))
