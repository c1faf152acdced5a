#!/usr/bin/env bash
# A rank killed with SIGKILL mid-run ends the whole job (mpirun exits non-zero and no rank is
# left running), and `--resume latest` continues from the last complete checkpoint — a temp file
# of a save the kill interrupted is ignored — to a final state bit-identical to an uninterrupted
# run on the same mesh (2 ranks, data parallel). The kill lands whenever checkpoint step 10
# appears: during a step or a save, depending on timing; both must be survivable.
# usage: sigkill.sh MPIEXEC MESHTRAIN TEXT_FILE WORK_DIR
. "$(dirname "$0")/lib.sh"
# ~50 ms steps, so that the kill lands mid-run
MODEL=(--layers 2 --d-model 128 --seq-len 64 --batch 8 --eval-every 0 --data "$TXT" --quiet)
ARGS=(--steps 30 --save-every 5 --keep 2)
run 2 ref.log "${ARGS[@]}" --ckpt-dir "$WORK/ref"
must ref.log "uninterrupted run" $? || exit 1

"$MPI" --oversubscribe --bind-to none -np 2 "$MT" "${MODEL[@]}" "${ARGS[@]}" \
  --ckpt-dir "$WORK/k" >"$WORK/killed.log" 2>&1 &
mpipid=$!
for _ in $(seq 600); do [ -e "$WORK/k/step_000010.h5" ] && break; sleep 0.02; done
ranks=$(pgrep -P "$mpipid" | sort -n)
victim=$(tail -1 <<<"$ranks")
if [ -z "$victim" ] || [ ! -e "$WORK/k/step_000010.h5" ]; then
  fail "no rank to kill (ranks: '$ranks') or no checkpoint 10 appeared"; kill "$mpipid"; finish
  exit
fi
kill -KILL "$victim"
for _ in $(seq 300); do kill -0 "$mpipid" 2>/dev/null || break; sleep 0.1; done
if kill -0 "$mpipid" 2>/dev/null; then
  fail "mpirun still running 30 s after rank pid $victim was killed"; kill -KILL "$mpipid"
fi
wait "$mpipid"
rc=$?
alive=0
for _ in $(seq 100); do # the other rank may take a moment to be torn down and reaped
  alive=0
  for p in $ranks; do kill -0 "$p" 2>/dev/null && alive=$((alive + 1)); done
  [ "$alive" -eq 0 ] && break
  sleep 0.1
done
latest=$(cd "$WORK/k" && ls step_*.h5 | sort | tail -1)
if [ "$rc" -ne 0 ] && [ "$alive" -eq 0 ] && [ "$latest" != step_000030.h5 ]; then
  pass "SIGKILL of rank pid $victim: mpirun exited $rc, no rank left; dir holds: $(ls "$WORK/k" | tr '\n' ' ')"
else
  fail "after SIGKILL: mpirun status $rc, $alive ranks alive, newest checkpoint $latest"
fi

run 2 resume.log "${ARGS[@]}" --ckpt-dir "$WORK/k" --resume latest
if must resume.log "resume latest" $?; then
  if "$MT" ckpt diff "$WORK/ref/step_000030.h5" "$WORK/k/step_000030.h5" >"$WORK/diff" 2>&1; then
    pass "resumed from $latest: step 30 params, m, v bit-identical to the uninterrupted run"
  else
    fail "resumed run differs from the uninterrupted one"; tail -3 "$WORK/diff"
  fi
fi
no_temp_files "$WORK/k" || fail "temp files left after the resumed run's saves"
finish
