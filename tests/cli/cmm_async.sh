#!/usr/bin/env bash
# The collective matmul leaves no blocking TP collective beside a matmul. 2 layers, 3 steps.
#  - ReduceScatter: with --collective-matmul on, every ReduceScatter of a TP run (each sublayer's
#    input gradient and the final norm's; the forward's are ring steps) is non-blocking in the
#    summary's async column; with off, none is, and the forward's 2·2·3 = 12 are ReduceScatters
#    too: (2·2 + 1)·3 = 15 backward ReduceScatters.
#  - AllGather, y = 2 (a ring step is the exchange, a non-blocking AllGather): per step the
#    forward's 4 gathers of a sublayer output (the next sublayer's input, the last one the final
#    norm's) and the backward's 4 of the residual gradient, plus the loss's (cross-entropy
#    statistics) and the embedding's gradient gather, which stay blocking: 10·3 = 30 calls, of
#    which 8·3 = 24 non-blocking with on, none with off.
#  - AllGather, y = 3 (a ring of ppermutes): with on only the loss's and the embedding's are
#    AllGathers, 2·3 = 6, all blocking.
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
for cm in on off; do
  "$MPI" --oversubscribe --bind-to none -np 2 "$MT" "${model[@]}" --collective-matmul "$cm" \
    >"$WORK/$cm.log" 2>&1 || { echo "FAIL: --collective-matmul $cm: exited $?"; cat "$WORK/$cm.log"; exit 1; }
  if [ "$cm" = on ]; then
    row reduce_scatter "$WORK/$cm.log" 15 15 "--collective-matmul on"
    row all_gather "$WORK/$cm.log" 30 24 "--collective-matmul on"
  else
    row reduce_scatter "$WORK/$cm.log" 27 0 "--collective-matmul off"
    row all_gather "$WORK/$cm.log" 30 0 "--collective-matmul off"
  fi
done
model3=(--layers 2 --d-model 48 --heads 3 --d-ff 96 --seq-len 16 --batch 6 --steps 3
        --eval-every 0 --data "$TXT" --mesh y=3 --tensor y --collective-matmul on)
"$MPI" --oversubscribe --bind-to none -np 3 "$MT" "${model3[@]}" >"$WORK/on3.log" 2>&1 ||
  { echo "FAIL: y=3 --collective-matmul on: exited $?"; cat "$WORK/on3.log"; exit 1; }
row all_gather "$WORK/on3.log" 6 0 "y=3 --collective-matmul on"
echo "cmm_async: $fails failure(s)"
[ "$fails" -eq 0 ]
