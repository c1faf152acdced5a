#!/usr/bin/env bash
# The collective matmul leaves no blocking TP collective beside a matmul. 2 layers, 3 steps; and
# --collective-matmul auto picks it where the cost model says it wins.
#  - ReduceScatter: with --collective-matmul on, every ReduceScatter of a TP run (each sublayer's
#    input gradient and the final norm's; the forward's are ring steps) is non-blocking in the
#    summary's async column; with off, none is, and the forward's 2·2·3 = 12 are ReduceScatters
#    too: (2·2 + 1)·3 = 15 backward ReduceScatters.
#  - AllGather (y = 2, where a ring step is the exchange: a non-blocking AllGather): per step
#    4 forward matmul-ReduceScatter exchanges (on), 4 gathers of a sublayer output (the next
#    sublayer's input; the last one the final norm's), 4 of the backward's residual gradient, and
#    3 that stay blocking (the loss's cross-entropy statistics, the embedding gradient's gather,
#    the step report's). With on: 15·3 = 45 calls, 12·3 = 36 non-blocking (24 while the forward's
#    sublayer-input gathers were blocking); with off: 11·3 = 33, none. On a ring or line of 3 or
#    more these are ppermutes, counted by par_cmatmul_*.
#  - --collective-matmul auto under --emulate v5p (bf16 on the wire), 1 layer, 1 step, y = 2: the
#    cost model (par_cmatmul_wins) turns it on for D=128 F=16384 T=128 (8 sequences) and off for
#    D=64 F=128 T=16, and the summary shows what ran (as above, with L = 1 layer and 1 step): on,
#    2L+1 = 3 of 3 ReduceScatters and 6L = 6 of 6L+3 = 9 AllGathers non-blocking; off, 4L+1 = 5
#    and 4L+3 = 7, none.
#    The verdict does not depend on start-up timing: the emulated links are scaled to the ranks'
#    mean sgemm rate, and the verdict times a block's matmul t at that same mean rate, so t and a
#    hop's predicted time h both scale as 1/rate and their ratio is the chip's and the shapes'
#    alone; the rate is the same on every rank, and so is each rank's own verdict, which the
#    line says ("the same on every rank"; where the ranks' verdicts differ it says so, and the
#    test fails). Per layer the plain collectives take 6h (3h a sublayer); with the collective
#    matmul the attention's blocks never hide (4h) and the MLP's expose
#    max(0,h−t) + 2·max(0,h−2t) + max(0,h−4t), so it wins while that stays below 2h: t > 2h/9.
#    At F=16384, t ≈ 1.1h: its exposure is 0.6597 of the plain collectives' in every run (at
#    rates 9.0e10 and 9.9e10 alike); at F=128, t ≈ 0.001h: 8h against 6h (1.3307).
# usage: cmm_async.sh MPIEXEC MESHTRAIN TEXT_FILE WORK_DIR
set -u
MPI=$1 MT=$2 TXT=$3 WORK=$4
mkdir -p "$WORK"
model=(--layers 2 --d-model 64 --heads 4 --d-ff 128 --seq-len 16 --batch 8 --steps 3
       --eval-every 0 --data "$TXT" --mesh y=2 --tensor y)
fails=0
fail() { echo "FAIL $*"; fails=$((fails + 1)); }
# row OP LOG WANT_CALLS WANT_ASYNC LABEL
row() {
  local r calls async
  r=$(grep -E "^  $1 " "$2")
  calls=$(awk '{print $2}' <<<"$r") async=$(awk '{print $3}' <<<"$r")
  [ "$calls" = "$3" ] && [ "$async" = "$4" ] &&
    echo "ok   $5: $async of $calls $1 non-blocking" ||
    fail "$5: $1 row: $r (want $3 calls, $4 async)"
}
# rs_ag LOG WHAT RS_CALLS RS_ASYNC AG_CALLS AG_ASYNC: the reduce_scatter and all_gather rows
rs_ag() {
  row reduce_scatter "$1" "$3" "$4" "$2"
  row all_gather "$1" "$5" "$6" "$2"
}
for cm in on off; do
  "$MPI" --oversubscribe --bind-to none -np 2 "$MT" "${model[@]}" --collective-matmul "$cm" \
    >"$WORK/$cm.log" 2>&1 || { echo "FAIL: --collective-matmul $cm: exited $?"; cat "$WORK/$cm.log"; exit 1; }
  if [ "$cm" = on ]; then rs_ag "$WORK/$cm.log" "--collective-matmul on" 15 15 45 36
  else rs_ag "$WORK/$cm.log" "--collective-matmul off" 27 0 33 0; fi
done
auto=(--layers 1 --heads 4 --batch 8 --steps 1 --eval-every 0 --data "$TXT" --mesh y=2 --tensor y
      --emulate v5p --comm-dtype bf16 --collective-matmul auto)
for want in on off; do
  if [ "$want" = on ]; then shape=(--d-model 128 --d-ff 16384 --seq-len 128)
  else shape=(--d-model 64 --d-ff 128 --seq-len 16); fi
  log="$WORK/auto_$want.log"
  "$MPI" --oversubscribe --bind-to none -np 2 "$MT" "${auto[@]}" "${shape[@]}" >"$log" 2>&1 ||
    { echo "FAIL: --collective-matmul auto (${shape[*]}): exited $?"; cat "$log"; exit 1; }
  grep -q "^collective matmul over y: $want (--collective-matmul auto: the cost model's choice, the same on every rank)$" \
    "$log" && echo "ok   --collective-matmul auto, ${shape[*]}: $want on every rank" ||
    fail "--collective-matmul auto, ${shape[*]}: want $want: $(grep '^collective matmul' "$log")"
  if [ "$want" = on ]; then rs_ag "$log" "auto (on)" 3 3 9 6
  else rs_ag "$log" "auto (off)" 5 0 7 0; fi
done
echo "cmm_async: $fails failure(s)"
[ "$fails" -eq 0 ]
