#!/usr/bin/env bash
# Every output file of every command belongs to one live run, and ends on a whole line however
# full the disk:
#  1. a run holding --metrics, --trace, --save-init and --save-final: a second writer of any of
#     those files (by any output flag of meshtrain, generate --csv, prepare's OUT.h5, meshbench
#     --csv/--json, gemm_bench --csv, under another spelling of the path, on 1 or 2 ranks) is refused with status 2
#     and one message naming the flag, the file and the holder's pid; the holder's metrics stay
#     its own. Killed with SIGKILL, it leaves its locks, which are stale: the next run takes them
#     and, ending normally, removes them.
#  2. MESHTRAIN_FAULT_ENOSPC=N (data/linefile.h: a write past N bytes fails after storing the
#     bytes up to N) on --metrics (fresh, and appended by --resume), meshbench and gemm_bench --csv:
#     status 2, one message, and the file holds only whole lines, in order; generate --csv leaves
#     no file.
#  3. a real full disk (a small tmpfs; skipped where mount is not permitted): --metrics ends on a
#     whole line, --trace leaves no partial timeline and no per-rank part, generate --csv no file.
# usage: outputs.sh MPIEXEC MESHTRAIN MESHBENCH TEXT_FILE WORK_DIR
set -u
MPI=$1 MT=$2 MB=$3 TXT=$4 WORK=$5
GB=$(dirname "$MB")/gemm_bench # built beside meshbench
. "$(dirname "$0")/../common/one_error.sh"
rm -rf "$WORK" && mkdir -p "$WORK" && cd "$WORK" || exit 1
export MESHTRAIN_QUICK_START=1
S=(--layers 1 --d-model 16 --heads 2 --d-ff 32 --seq-len 16 --batch 4 --eval-every 0 --data "$TXT")
fails=0
pass() { echo "ok   $*"; }
fail() {
  echo "FAIL $*"
  fails=$((fails + 1))
}

# ---- 1. one live writer per file
"$MT" "${S[@]}" --steps 100000000 --quiet --metrics m.jsonl --trace t.json --save-init i.h5 \
  --save-final f.h5 >holder.log 2>&1 &
HOLDER=$!
held() { [ -e "$1" ] && ! flock -n "$1" true 2>/dev/null; }
for _ in $(seq 1200); do # the holder takes its locks before its first step
  held .m.jsonl.meshtrain-lock && held .t.json.meshtrain-lock && held .i.h5.meshtrain-lock &&
    held .f.h5.meshtrain-lock && [ -s m.jsonl ] && break
  kill -0 $HOLDER 2>/dev/null || break
  sleep 0.1
done
if ! kill -0 $HOLDER 2>/dev/null || ! [ -s m.jsonl ]; then
  fail "the holder run did not start"
  cat holder.log
  exit 1
fi

# refused NAME FRAGMENT CMD...: run CMD (concurrently with the others); collect must find status
# 2, one error line holding FRAGMENT and the holder's pid.
declare -a NAMES FRAGS
n=0
refused() {
  NAMES[n]=$1 FRAGS[n]=$2
  shift 2
  (timeout 120 "$@" >"out.$n" 2>"err.$n"; echo $? >"rc.$n") &
  n=$((n + 1))
}
HELD="is being written by another running job (pid $HOLDER"
T1=(--steps 1 --quiet)
refused "--metrics, same spelling" "--metrics m.jsonl $HELD" "$MT" "${S[@]}" "${T1[@]}" \
  --metrics m.jsonl
refused "--trace, another spelling" "--trace ./t.json $HELD" "$MT" "${S[@]}" "${T1[@]}" \
  --trace ./t.json
refused "--save-init over the holder's --save-final" "--save-init f.h5 $HELD" "$MT" "${S[@]}" \
  "${T1[@]}" --save-init f.h5
refused "--save-final by absolute path" "--save-final $WORK/i.h5 $HELD" "$MT" "${S[@]}" \
  "${T1[@]}" --save-final "$WORK/i.h5"
refused "--metrics on 2 ranks" "--metrics m.jsonl $HELD" "$MPI" --oversubscribe --bind-to none \
  -np 2 "$MT" "${S[@]}" "${T1[@]}" --metrics m.jsonl
refused "generate --csv" "--csv m.jsonl $HELD" "$MT" generate --layers 1 --d-model 16 --heads 2 \
  --d-ff 32 --seq-len 16 --bench --bench-batches 1 --bench-prompt 4 --tokens 2 --csv m.jsonl
refused "prepare's OUT.h5" "prepare: OUT.h5 f.h5 $HELD" "$MT" prepare "$TXT" f.h5
refused "meshbench --csv" "--csv t.json $HELD" "$MB" -b 4K -e 4K -n 1 -w 0 --csv t.json
refused "meshbench --json" "--json i.h5 $HELD" "$MB" -b 4K -e 4K -n 1 -w 0 --json i.h5
refused "gemm_bench --csv" "--csv m.jsonl $HELD" "$GB" --no-train --no-decode --csv m.jsonl
wait $(jobs -p | grep -v "^$HOLDER$") 2>/dev/null
for ((i = 0; i < n; i++)); do
  # meshbench names itself in its messages
  err_line=$(grep -m1 -E '^(meshtrain|meshbench|gemm_bench): error:' "err.$i")
  nerr=$(grep -cE '^(meshtrain|meshbench|gemm_bench): error:' "err.$i")
  if [ "$(cat "rc.$i")" = 2 ] && [ "$nerr" = 1 ] && grep -qF -- "${FRAGS[i]}" <<<"$err_line"; then
    pass "${NAMES[i]}: refused: ${err_line//$WORK/W}"
  else
    fail "${NAMES[i]}: status $(cat "rc.$i") (want 2), $nerr error lines, want \"${FRAGS[i]}\""
    sed 's/^/     | /' "err.$i" | head -5
  fi
done
kill -0 $HOLDER 2>/dev/null && pass "the holder runs on" || fail "the holder died"
kill -9 $HOLDER
wait $HOLDER 2>/dev/null
# the holder's metrics: its own steps 1, 2, 3, ... only, every line whole (no second writer)
steps_in_order() { # FILE: every line a whole record, steps 1..n in order; prints n
  awk '!/^\{"step":[0-9]+,.*\}$/ || substr($0, 9) + 0 != NR { bad = 1 }
       END { print NR; exit bad }' "$1"
}
if k=$(steps_in_order m.jsonl); then
  pass "the holder's --metrics: its $k steps alone, in order, every line whole"
else
  fail "the holder's --metrics was written by another run too"
fi
ls -A | grep -q 'meshtrain-lock' && pass "the killed holder left its locks" ||
  fail "the killed holder left no lock file (a test of staleness needs one)"
if "$MT" "${S[@]}" --steps 2 --quiet --metrics m.jsonl --trace t.json --save-init i.h5 \
  --save-final f.h5 >taker.log 2>&1 && [ "$(steps_in_order m.jsonl)" = 2 ] &&
  ! ls -A | grep -q 'meshtrain-lock'; then
  pass "a new run takes the killed run's stale locks, writes every file, and removes its locks"
else
  fail "a new run could not take over the stale locks (or left its own)"
  tail -3 taker.log
  ls -A
fi

# ---- 2. whole lines on a failing disk (the fault hook)
# whole FILE LIMIT LOG RC WHAT: status 2, one error line naming the flag and ENOSPC, and FILE
# within LIMIT bytes, empty or ending with a newline.
whole() {
  local file=$1 limit=$2 log=$3 rc=$4 what=$5 size last
  size=$(stat -c %s "$file" 2>/dev/null || echo 0)
  last=$(tail -c 1 "$file" 2>/dev/null | od -An -c | tr -d ' ')
  ERR_N=$(grep -cE '^(meshtrain|meshbench|gemm_bench): error:' "$log") # the benches name themselves
  ERR_LINE=$(grep -m1 -E '^(meshtrain|meshbench|gemm_bench): error:' "$log")
  if [ "$rc" = 2 ] && [ "$ERR_N" = 1 ] && grep -qF "No space left on device" <<<"$ERR_LINE" &&
     [ "$size" -le "$limit" ] &&
     { [ "$size" = 0 ] || [ "$last" = '\n' ]; }; then
    pass "$what: status 2, $size of $limit bytes, whole lines: ${ERR_LINE//$WORK/W}"
    return 0
  fi
  fail "$what: status $rc, $ERR_N error lines, $size bytes (limit $limit), last byte '$last'"
  tail -3 "$log"
  return 1
}
for limit in 1 150 777 2000; do
  MESHTRAIN_FAULT_ENOSPC=$limit "$MT" "${S[@]}" --steps 40 --quiet --metrics "w$limit.jsonl" \
    >"w$limit.log" 2>&1
  whole "w$limit.jsonl" "$limit" "w$limit.log" $? "--metrics at $limit bytes" &&
    { steps_in_order "w$limit.jsonl" >/dev/null || fail "w$limit.jsonl: a record is torn"; }
done
# appended by a resumed run: the first run's lines stay, the new ones are whole
"$MT" "${S[@]}" --steps 3 --quiet --save-every 3 --ckpt-dir ck --metrics r.jsonl >r1.log 2>&1 ||
  fail "the run to resume exited $?"
limit=$(($(stat -c %s r.jsonl) + 500))
MESHTRAIN_FAULT_ENOSPC=$limit "$MT" "${S[@]}" --steps 40 --quiet --resume latest --ckpt-dir ck \
  --metrics r.jsonl >r2.log 2>&1
whole r.jsonl "$limit" r2.log $? "--metrics appended by --resume" &&
  { k=$(steps_in_order r.jsonl) && [ "$k" -gt 3 ] ||
    fail "r.jsonl: the resumed run's lines do not continue the first run's"; }
MESHTRAIN_FAULT_ENOSPC=400 "$MB" -b 1K -e 1M -n 1 -w 0 --csv mb.csv >mb.log 2>&1
whole mb.csv 400 mb.log $? "meshbench --csv" &&
  { awk -F, 'NF != 16 { exit 1 }' mb.csv || fail "mb.csv: a row is torn"; }
MESHTRAIN_FAULT_ENOSPC=120 "$GB" --no-decode --rounds 1 --csv gb.csv >gb.log 2>&1
whole gb.csv 120 gb.log $? "gemm_bench --csv" &&
  { awk -F, 'NF != 8 { exit 1 }' gb.csv || fail "gb.csv: a row is torn"; }
GEN=(generate --layers 1 --d-model 16 --heads 2 --d-ff 32 --seq-len 16 --bench --bench-batches 1,2
     --bench-prompt 4 --tokens 2)
MESHTRAIN_FAULT_ENOSPC=100 "$MT" "${GEN[@]}" --csv g.csv >g.log 2>&1
rc=$?
if one_error 2 $rc g.log "--csv g.csv: writing it failed" && ! ls -A | grep -q '^g\.csv'; then
  pass "generate --csv on a failing disk: status 2, no file left: ${ERR_LINE//$WORK/W}"
else
  fail "generate --csv on a failing disk: status $rc, left: $(ls -A | grep '^g\.csv' | tr '\n' ' ')"
fi

# ---- 3. a real full disk
mkdir -p full
if mount -t tmpfs -o size=64k tmpfs full 2>/dev/null; then
  "$MT" "${S[@]}" --steps 100000 --quiet --metrics full/m.jsonl >fm.log 2>&1
  whole full/m.jsonl 65536 fm.log $? "--metrics on a full tmpfs" &&
    { steps_in_order full/m.jsonl >/dev/null || fail "full/m.jsonl: a record is torn"; }
  rm -f full/m.jsonl
  "$MT" "${S[@]}" --steps 30 --quiet --trace full/t.json >ft.log 2>&1
  rc=$?
  if one_error 2 $rc ft.log "--trace full/t.json" && [ -z "$(ls -A full)" ]; then
    pass "--trace on a full tmpfs: status 2, no partial timeline or part left: ${ERR_LINE//$WORK/W}"
  else
    fail "--trace on a full tmpfs: status $rc, left: $(ls -A full | tr '\n' ' ')"
    tail -3 ft.log
  fi
  head -c 60000 /dev/zero >full/filler 2>/dev/null
  "$MT" "${GEN[@]}" --csv full/g.csv >fg.log 2>&1
  rc=$?
  if one_error 2 $rc fg.log "--csv full/g.csv" && [ "$(ls -A full)" = filler ]; then
    pass "generate --csv on a full tmpfs: status 2, no file left: ${ERR_LINE//$WORK/W}"
  else
    fail "generate --csv on a full tmpfs: status $rc, left: $(ls -A full | tr '\n' ' ')"
    tail -3 fg.log
  fi
  umount full
else
  echo "skip the full tmpfs cases: mount is not permitted here"
fi
echo "outputs: $fails failure(s)"
[ "$fails" -eq 0 ]
