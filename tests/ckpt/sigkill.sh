#!/usr/bin/env bash
# A rank killed with SIGKILL ends the whole job (mpirun exits non-zero and no rank is left
# running) and never costs the user a checkpoint: the newest complete one survives intact, and
# `--resume latest` continues from it — past the temp file of a save the kill interrupted — to a
# final state bit-identical to an uninterrupted run on the same mesh (2 ranks, data parallel,
# --save-every 5 --keep 1). The kills are placed by test hooks, not by timing, so they land at the
# same point however loaded the machine:
#   mid-run   MESHTRAIN_FAULT_KILL_STEP=1:12 (train/cli/run.c): rank 1 dies as it begins step 13;
#             the directory then holds exactly step_000010.h5.
#   mid-save  the run resumed from step 10, MESHTRAIN_FAULT_KILL_SAVE=0:3 (data/h5array.c): rank 0
#             (the one that renames a finished file into place) dies at the 4th array of the save
#             of step 15; the directory then holds exactly step_000010.h5, unchanged, and the temp
#             file of step 15. A writer that wrote step_000015.h5 in place, or a --keep that
#             pruned step 10 before step 15 was complete, fails here.
# Then `--resume latest` runs to step 30, equal to the uninterrupted run, with no temp file left.
# usage: sigkill.sh MPIEXEC MESHTRAIN TEXT_FILE WORK_DIR
. "$(dirname "$0")/lib.sh"
ARGS=(--steps 30 --save-every 5 --keep 1 --quiet)
run 2 ref.log "${ARGS[@]}" --ckpt-dir "$WORK/ref"
must ref.log "uninterrupted run" $? || exit 1

# killed WHAT LOG RC WANT: the run (status RC, output in LOG) was killed by the hook (mpirun names
# signal 9), no rank is left (bounded wait: the survivor's teardown takes a moment under load),
# and the directory holds exactly WANT (a pattern for `ls`'s one line).
killed() {
  local what=$1 log=$2 rc=$3 want=$4 left has
  for _ in $(seq 300); do
    left=$(pgrep -f -- "--ckpt-dir $WORK/k( |$)")
    [ -z "$left" ] && break
    sleep 0.1
  done
  has=$(ls "$WORK/k" | tr '\n' ' ')
  # shellcheck disable=SC2053 # want is a pattern
  if [ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] && grep -q 'signal 9' "$WORK/$log" && [ -z "$left" ] &&
     [[ $has == $want ]]; then
    pass "$what: mpirun exited $rc, no rank left; the directory holds: $has"
  else
    fail "$what: mpirun status $rc (124: timed out), ranks left: '${left//$'\n'/ }', directory: $has (want $want)"
    sed 's/^/     | /' "$WORK/$log" | tail -8
  fi
}

MESHTRAIN_FAULT_KILL_STEP=1:12 run 2 step.log "${ARGS[@]}" --ckpt-dir "$WORK/k"
killed "rank 1 killed as it begins step 13" step.log $? "step_000010.h5 "
sum10=$(md5sum 2>/dev/null <"$WORK/k/step_000010.h5")

MESHTRAIN_FAULT_KILL_SAVE=0:3 run 2 save.log "${ARGS[@]}" --ckpt-dir "$WORK/k" --resume latest
killed "resumed from step 10, rank 0 killed while saving step 15" save.log $? \
  "step_000010.h5 step_000015.h5.tmp.* "
[ -n "$sum10" ] && [ "$(md5sum 2>/dev/null <"$WORK/k/step_000010.h5")" = "$sum10" ] &&
  pass "step_000010.h5 is byte-for-byte what it was before the kill mid-save" ||
  fail "step_000010.h5 changed or vanished during the killed save"

run 2 resume.log "${ARGS[@]}" --ckpt-dir "$WORK/k" --resume latest
if must resume.log "resume latest" $?; then
  if "$MT" ckpt diff "$WORK/ref/step_000030.h5" "$WORK/k/step_000030.h5" >"$WORK/diff" 2>&1; then
    pass "resumed from step 10: step 30 params, m, v bit-identical to the uninterrupted run"
  else
    fail "resumed run differs from the uninterrupted one"; tail -3 "$WORK/diff"
  fi
fi
no_temp_files "$WORK/k" || fail "temp files left after the resumed run's saves"
finish
