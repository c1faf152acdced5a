#!/usr/bin/env bash
# The collective matmul's backward ReduceScatter runs beside the weight gradients: with
# --collective-matmul on, every ReduceScatter of a TP run (each sublayer's input gradient and the
# final norm's; the forward's are ring steps, ppermutes) is non-blocking in the summary's async
# column; with off, none is, and the forward's 2·2·3 = 12 are ReduceScatters too. 2 layers, 3
# steps: (2·2 + 1)·3 = 15 backward ReduceScatters.
# usage: cmm_async.sh MPIEXEC MESHTRAIN TEXT_FILE WORK_DIR
set -u
MPI=$1 MT=$2 TXT=$3 WORK=$4
mkdir -p "$WORK"
model=(--layers 2 --d-model 64 --heads 4 --d-ff 128 --seq-len 16 --batch 8 --steps 3
       --eval-every 0 --data "$TXT" --mesh y=2 --tensor y)
fails=0
fail() { echo "FAIL $*"; fails=$((fails + 1)); }
for cm in on off; do
  "$MPI" --oversubscribe --bind-to none -np 2 "$MT" "${model[@]}" --collective-matmul "$cm" \
    >"$WORK/$cm.log" 2>&1 || { echo "FAIL: --collective-matmul $cm: exited $?"; cat "$WORK/$cm.log"; exit 1; }
  row=$(grep -E '^  reduce_scatter ' "$WORK/$cm.log")
  calls=$(awk '{print $2}' <<<"$row") async=$(awk '{print $3}' <<<"$row")
  want=15 n=15
  [ "$cm" = off ] && want=0 n=27
  [ "$calls" = "$n" ] && [ "$async" = "$want" ] &&
    echo "ok   --collective-matmul $cm: $async of $calls ReduceScatters non-blocking" ||
    { fail "--collective-matmul $cm: reduce_scatter row: $row (want $n calls, $want async)"; }
done
echo "cmm_async: $fails failure(s)"
[ "$fails" -eq 0 ]
