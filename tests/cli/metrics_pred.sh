#!/usr/bin/env bash
# The per-step prediction reaches the user: with several ranks every --metrics line carries a
# positive pred_ms and book_ms and a dominant term, and every step line ends with
# "| pred P ms (R x, TERM) | book B ms"; with one rank (no communication) neither appears.
# Runs DP over 2 ranks with bf16 on the wire, buckets and --overlap. A step with more events than
# the report's replay holds gets its plain-sum prediction and one note for the run: the same run
# with the replay cut to 8 events (MESHTRAIN_REPORT_EVENTS, a test hook), not one that makes
# 16384 collectives a step.
# usage: metrics_pred.sh MPIEXEC MESHTRAIN TEXT_FILE WORK_DIR
set -u
MPI=$1 MT=$2 TXT=$3 WORK=$4
mkdir -p "$WORK"
model=(--layers 2 --d-model 64 --heads 4 --d-ff 128 --seq-len 16 --batch 8 --steps 3
       --eval-every 0 --data "$TXT")
fails=0
fail() { echo "FAIL $*"; fails=$((fails + 1)); }
rm -f "$WORK/m2.jsonl" "$WORK/m1.jsonl"
"$MPI" --oversubscribe --bind-to none -np 2 "$MT" "${model[@]}" --mesh x=2 --dp x --overlap \
  --comm-dtype bf16 --bucket 8K --metrics "$WORK/m2.jsonl" >"$WORK/m2.log" 2>&1 ||
  { echo "FAIL: 2 ranks: meshtrain exited $?"; cat "$WORK/m2.log"; exit 1; }
n=$(grep -c . "$WORK/m2.jsonl")
good=$(grep -cE '"pred_ms":[0-9]*\.?[0-9]+([eE][-+]?[0-9]+)?,"book_ms":[0-9.eE+-]+,"dominant":"(compute|bandwidth|latency)"' "$WORK/m2.jsonl")
zero=$(grep -cE '"pred_ms":0(\.0+)?[,}]' "$WORK/m2.jsonl")
if [ "$n" -eq 3 ] && [ "$good" -eq 3 ] && [ "$zero" -eq 0 ]; then
  echo "ok   2 ranks: 3 metrics lines with pred_ms, book_ms and dominant"
else
  fail "2 ranks: $n metrics lines, $good with pred_ms/book_ms/dominant, $zero with pred_ms 0:"
  cat "$WORK/m2.jsonl"
fi
steps=$(grep -cE '^step +[0-9]+ .*\| pred [0-9]+ ms \([0-9.]+x, (compute|bandwidth|latency)\) \| book [0-9]+ ms' "$WORK/m2.log")
[ "$steps" -eq 3 ] && echo "ok   2 ranks: 3 step lines end with pred and book" ||
  { fail "2 ranks: $steps of 3 step lines end with pred and book:"; grep '^step' "$WORK/m2.log"; }
grep -q 'step: measured .* predicted .* the book.s idealised' "$WORK/m2.log" &&
  echo "ok   2 ranks: the summary's step line" || fail "2 ranks: no summary step line"
grep -q 'replay overflowed' "$WORK/m2.log" && fail "2 ranks: an overflow note without overflow"
# more events a step than the report's replay holds: one note for the run, though all 3 steps
# overflow; each still has a prediction. The replay holds 16384 events (a run that overflows it
# makes ~20000 collectives a step); MESHTRAIN_REPORT_EVENTS=8, the report's test hook, lowers that
# to 8, which every step of the 2-rank run above (gradient buckets, their waits) exceeds
MESHTRAIN_REPORT_EVENTS=8 "$MPI" --oversubscribe --bind-to none -np 2 "$MT" "${model[@]}" \
  --mesh x=2 --dp x --overlap --comm-dtype bf16 --bucket 8K >"$WORK/of.log" 2>&1 ||
  { echo "FAIL: overflow run: meshtrain exited $?"; cat "$WORK/of.log"; exit 1; }
note='^note: step 1 recorded more than 8 events on rank 0: the replay overflowed.*plain sum'
n=$(grep -c "$note" "$WORK/of.log") all=$(grep -c 'overflowed' "$WORK/of.log")
p=$(grep -cE '^step +[0-9]+ .*\| pred [0-9]+ ms' "$WORK/of.log")
if [ "$n" -eq 1 ] && [ "$all" -eq 1 ] && [ "$p" -eq 3 ]; then
  echo "ok   event overflow: one note for the run, 3 steps with a prediction"
else
  fail "event overflow: $n notes ($all lines say overflowed; want 1), $p step lines with pred" \
    "(want 3):"
  cat "$WORK/of.log"
fi
"$MPI" --oversubscribe --bind-to none -np 1 "$MT" "${model[@]}" --metrics "$WORK/m1.jsonl" \
  >"$WORK/m1.log" 2>&1 || { echo "FAIL: 1 rank: meshtrain exited $?"; cat "$WORK/m1.log"; exit 1; }
if grep -q 'pred_ms\|book_ms' "$WORK/m1.jsonl" || grep -q '| pred ' "$WORK/m1.log"; then
  fail "1 rank: a prediction of communication that does not exist"
else
  echo "ok   1 rank: no pred_ms, book_ms or pred column"
fi
echo "metrics_pred: $fails failure(s)"
[ "$fails" -eq 0 ]
