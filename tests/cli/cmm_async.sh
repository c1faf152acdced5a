#!/usr/bin/env bash
# The collective matmul leaves no blocking TP collective beside a matmul. 2 layers, 3 steps.
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
    row all_gather "$WORK/$cm.log" 45 36 "--collective-matmul on"
  else
    row reduce_scatter "$WORK/$cm.log" 27 0 "--collective-matmul off"
    row all_gather "$WORK/$cm.log" 33 0 "--collective-matmul off"
  fi
done
echo "cmm_async: $fails failure(s)"
[ "$fails" -eq 0 ]
