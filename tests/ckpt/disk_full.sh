#!/usr/bin/env bash
# A save that fails midway (a full disk) ends the run cleanly — status 2, one error line naming
# the file and the free space — and leaves the previous checkpoint intact, resumable, and no temp
# file; resuming it then gives the bit-identical result of the uninterrupted run. Two ways:
#  - a real full disk: a 1 MB tmpfs holds one checkpoint (0.59 MB) but not a second (--keep 1
#    deletes the old one only after the new one is complete), so the save of step 8 hits ENOSPC
#    inside HDF5/MPI-IO (skipped when mount is not permitted);
#  - MESHTRAIN_FAULT_SAVE=20: the save's 21st array write fails on every rank (always runs).
# usage: disk_full.sh MPIEXEC MESHTRAIN TEXT_FILE WORK_DIR
. "$(dirname "$0")/lib.sh"
STEPS=(--steps 8 --save-every 4 --keep 1)
run 2 ref.log --steps 8 --save-every 4 --ckpt-dir "$WORK/ref"
must ref.log "reference run" $? || exit 1

# fails_cleanly DIR NAME STATUS: the run into DIR must have failed cleanly, leaving only step 4
# (array for array the reference's); then (once) a resume from DIR/step_000004.h5 must reproduce
# the reference's step 8 bit for bit.
fails_cleanly() {
  local dir=$1 name=$2 rc=$3 n line
  n=$(grep -c '^meshtrain: error:' "$WORK/$name.log")
  line=$(grep -m1 '^meshtrain: error:' "$WORK/$name.log")
  if [ "$rc" -eq 2 ] && [ "$n" -eq 1 ] && grep -q "step_000008.h5" <<<"$line" &&
     [ "$(ls "$dir")" = step_000004.h5 ] &&
     "$MT" ckpt info "$dir/step_000004.h5" >/dev/null 2>&1 &&
     "$MT" ckpt diff "$WORK/ref/step_000004.h5" "$dir/step_000004.h5" >/dev/null 2>&1; then
    pass "$name: status 2, one error line, step_000004.h5 intact (checksums ok, arrays identical to the reference's), no temp file"
    echo "     ${line//$WORK/W}"
  else
    fail "$name: status $rc, $n error lines, left: $(ls -A "$dir")"
    tail -5 "$WORK/$name.log"
    return
  fi
  # the surviving file is the reference's step 4 in both cases: resuming it once proves it
  [ -n "${resumed:-}" ] && return
  resumed=1
  run 2 "$name.resume.log" --steps 8 --ckpt-dir "$WORK/$name.resumed" --save-every 4 \
    --resume "$dir/step_000004.h5"
  must "$name.resume.log" "$name resume" $? || return
  if "$MT" ckpt diff "$WORK/ref/step_000008.h5" "$WORK/$name.resumed/step_000008.h5" \
       >"$WORK/$name.diff" 2>&1; then
    pass "$name: resumed from the surviving checkpoint, step 8 bit-identical to the uninterrupted run"
  else
    fail "$name: resumed run differs"; tail -3 "$WORK/$name.diff"
  fi
}

mkdir -p "$WORK/tmpfs"
if mount -t tmpfs -o size=1m tmpfs "$WORK/tmpfs" 2>/dev/null; then
  run 2 tmpfs.log "${STEPS[@]}" --ckpt-dir "$WORK/tmpfs"
  fails_cleanly "$WORK/tmpfs" tmpfs $?
  umount "$WORK/tmpfs"
else
  echo "skip the tmpfs case: mount is not permitted here"
fi
# the injection fails every save: the run resumes from a copy of the reference's step 4 and the
# save of step 8 fails
mkdir -p "$WORK/inject" && cp "$WORK/ref/step_000004.h5" "$WORK/inject/"
MESHTRAIN_FAULT_SAVE=20 run 2 inject.log "${STEPS[@]}" --ckpt-dir "$WORK/inject" --resume latest
fails_cleanly "$WORK/inject" inject $?
finish
