#!/usr/bin/env bash
# faults.sh MPIEXEC MESHTRAIN TEXT WORK TOK_MANGLE [PART]: one regression case per bug of the
# "nothing lost, nothing hung" round, end to end on 2 ranks. PART: inputs (trace, clobber, early,
# flags, tokens), ckptdir (a chain of runs, one after the other), or all (the default); two
# CTest entries run the two parts side by side. Each case checks the exit status, the one
# error line (from rank 0) and, where a file was at stake, that it is byte-for-byte unchanged.
#   trace        --trace never deletes what is at its path: not a file kept by a failed run, not
#                the data, not the resumed checkpoint; a full disk under --trace names ENOSPC
#                (tmpfs; skipped where mount is not permitted)
#   clobber      outputs never overwrite inputs: prepare T T, --metrics/--save-init/--save-final
#                naming --data or --resume, two outputs naming one file
#   early        --save-final into a directory fails before step 1
#   ckptdir      a second job on a --ckpt-dir in use is refused; kill -9 of the first (its ranks
#                waited for until they have ended) leaves no stuck lock (resume latest works); a
#                new run among another run's checkpoints and --resume latest of another run's
#                file are refused unless --take-over
#   flags        a flag twice, --mesh '', --eps 1e-300
#   tokens       an out-of-range token read first by rank 1 names the token on every rank count
set -u
MPI=$1 MT=$2 TXT=$3 WORK=$4 TOKM=$5 PART=${6:-all}
rm -rf "$WORK" && mkdir -p "$WORK" || exit 1
fails=0
SMALL=(--layers 1 --d-model 32 --heads 4 --seq-len 16 --batch 4 --eval-every 0)
pass() { echo "ok   $*"; }
fail() { echo "FAIL $*"; fails=$((fails + 1)); }
# mt ARGS...: meshtrain on 2 ranks. No job here is ended by a signal to mpirun (kill_tree kills
# every process itself), so mpirun gives ranks no grace before its SIGKILL: after a refused run it
# would sleep 2 s (1 s after SIGCONT, 1 s after SIGTERM) over ranks already gone.
mt() {
  OMPI_MCA_odls_base_sigkill_timeout=0 timeout 120 "$MPI" --oversubscribe --bind-to none -np 2 \
    "$MT" "$@"
}
# expect STATUS FRAGMENT ARGS...: meshtrain on 2 ranks exits STATUS with one error line holding
# FRAGMENT (STATUS 0: no error line).
expect() {
  local want=$1 frag=$2 rc n line
  shift 2
  mt "$@" >"$WORK/out${CASE:-}" 2>"$WORK/err${CASE:-}"
  rc=$?
  n=$(grep -c '^meshtrain: error:' "$WORK/err${CASE:-}")
  line=$(grep -m1 '^meshtrain: error:' "$WORK/err${CASE:-}")
  if [ "$rc" = "$want" ] && { [ "$want" = 0 ] && [ "$n" = 0 ] ||
     [ "$n" = 1 ] && grep -qF -- "$frag" <<<"$line"; }; then
    pass "[${*//$WORK/W}] -> $rc ${line//$WORK/W}"
  else
    fail "[${*//$WORK/W}] -> $rc (want $want), $n error lines, want '$frag'"
    sed 's/^/     | /' "$WORK/err${CASE:-}" | tail -5
  fi
}
# bg_expect STATUS FRAGMENT ARGS...: expect, run concurrently with the others launched before the
# next collect, its verdict printed there (launch.sh).
. "$(dirname "$0")/../common/launch.sh"
bg_expect() { launch expect "$@"; }
# tree PID: PID and all its descendants, leaves first, each as PID:START (its start time, so that
# a reused pid is never taken for it)
tree() {
  local c
  for c in $(pgrep -P "$1"); do tree "$c"; done
  echo "$1:$(started "$1")"
}
started() { sed 's/^.*) //' "/proc/$1/stat" 2>/dev/null | cut -d' ' -f20; }
# kill_tree PID: SIGKILL to PID and all its descendants, leaves first; then waits until every one
# of them has ended (gone, or a zombie: its files closed, so a flock it held released), at most
# 60 s: kill(2) returns before the kernel has torn the process down, and the next case must not
# find the lock still held.
kill_tree() {
  local procs p left state
  procs=$(tree "$1")
  for p in $procs; do kill -KILL "${p%%:*}" 2>/dev/null; done
  for _ in $(seq 600); do
    left=
    for p in $procs; do
      state=$(sed 's/^.*) //' "/proc/${p%%:*}/stat" 2>/dev/null | cut -d' ' -f1)
      [ -n "$state" ] && [ "$state" != Z ] && [ "$(started "${p%%:*}")" = "${p#*:}" ] &&
        left="$left ${p%%:*}"
    done
    [ -z "$left" ] && return 0
    sleep 0.1
  done
  fail "kill -9: processes$left still running 60 s later"
}
# same A B WHAT: files A and B are byte-identical
same() { cmp -s "$1" "$2" && pass "$3" || fail "$3"; }

cp "$TXT" "$WORK/data.txt" && cp "$TXT" "$WORK/data.orig"
D=(--data "$WORK/data.txt")
mt "${D[@]}" "${SMALL[@]}" --steps 2 --save-every 2 --ckpt-dir "$WORK/ck" --quiet >/dev/null 2>&1 ||
  fail "the reference run"
CK=$WORK/ck/step_000002.h5
cp "$CK" "$WORK/ck.orig"

part() { [ "$PART" = all ] || [ "$PART" = "$1" ]; }
if part inputs; then
# --- trace
echo keep >"$WORK/kept.json" && cp "$WORK/kept.json" "$WORK/kept.orig"
bg_expect 2 "no/such.txt: cannot open" --data "$WORK/no/such.txt" "${SMALL[@]}" --steps 1 \
  --trace "$WORK/kept.json"
bg_expect 2 "--trace $WORK/data.txt is also --data" "${D[@]}" "${SMALL[@]}" --steps 1 \
  --trace "$WORK/data.txt"
bg_expect 2 "is also --resume" "${D[@]}" "${SMALL[@]}" --steps 3 --resume "$CK" --trace "$CK"
collect
same "$WORK/kept.json" "$WORK/kept.orig" "a failed run leaves the file at --trace as it was"
same "$WORK/data.txt" "$WORK/data.orig" "--trace DATA: the data survives"
same "$CK" "$WORK/ck.orig" "--trace CKPT --resume CKPT: the checkpoint survives"
mkdir -p "$WORK/full"
if mount -t tmpfs -o size=32k tmpfs "$WORK/full" 2>/dev/null; then
  expect 2 "No space left on device" "${D[@]}" "${SMALL[@]}" --steps 20 \
    --trace "$WORK/full/t.json"
  umount "$WORK/full"
else
  echo "skip ENOSPC under --trace: mount is not permitted here"
fi

# --- clobber
bg_expect 2 "the output is the input text itself" prepare "$WORK/data.txt" "$WORK/./data.txt"
bg_expect 2 "--metrics $CK is also --resume" "${D[@]}" "${SMALL[@]}" --steps 3 --resume "$CK" \
  --metrics "$CK"
bg_expect 2 "--save-init $WORK/data.txt is also --data" "${D[@]}" "${SMALL[@]}" --steps 1 \
  --save-init "$WORK/data.txt"
bg_expect 2 "--save-final $CK is also --resume" "${D[@]}" "${SMALL[@]}" --steps 3 --resume "$CK" \
  --save-final "$CK"
bg_expect 2 "--save-init and --save-final both name" "${D[@]}" "${SMALL[@]}" --steps 1 \
  --save-init "$WORK/p.h5" --save-final "$WORK/./p.h5"
# --- flags (independent of the rest: concurrently with the clobber cases)
bg_expect 2 "--steps is given twice (--steps 3, then --steps 4)" "${D[@]}" "${SMALL[@]}" \
  --steps 3 --steps 4
bg_expect 2 "--mesh: the value is empty" "${D[@]}" "${SMALL[@]}" --steps 1 --mesh ''
bg_expect 2 "--eps 1e-300: below float32's smallest normal number" "${D[@]}" "${SMALL[@]}" \
  --steps 1 --eps 1e-300
collect
same "$WORK/data.txt" "$WORK/data.orig" "prepare T T: the text survives"
same "$CK" "$WORK/ck.orig" "the checkpoint survives every attempt"
same "$WORK/data.txt" "$WORK/data.orig" "the data survives every attempt"

# --- early
expect 2 "--save-final $WORK: cannot create it (is a directory)" "${D[@]}" "${SMALL[@]}" \
  --steps 3 --save-final "$WORK"
grep -q '^step ' "$WORK/out" && fail "--save-final DIR: steps ran before the error" ||
  pass "--save-final DIR: refused before step 1"

# --- tokens: row 1 of step 0 (sequential order) is rank 1's, tokens [T, 2T + 1)
"$MT" prepare "$WORK/data.txt" "$WORK/tok.h5" >/dev/null 2>&1 && "$TOKM" "$WORK/tok.h5" train 21 300 ||
  fail "making the bad token file"
expect 2 "tok.h5: token 300 at offset 21 of split 'train' is outside [0, 256)" \
  --data "$WORK/tok.h5" --layers 1 --d-model 32 --heads 4 --seq-len 16 --batch 2 \
  --data-order sequential --steps 1 --eval-every 0
fi

if part ckptdir; then
# --- ckptdir: a busy directory, and (concurrently) another run's file in one
busy_dir() {
local bg latest step
mt "${D[@]}" "${SMALL[@]}" --steps 100000000 --save-every 5 --ckpt-dir "$WORK/busy" \
  --quiet >"$WORK/busy.log" 2>&1 &
bg=$!
# its checkpoint 5 (so its claim and lock too); at most 120 s however loaded the machine
for _ in $(seq 1200); do
  [ -e "$WORK/busy/step_000005.h5" ] || ! kill -0 $bg 2>/dev/null && break
  sleep 0.1
done
[ -e "$WORK/busy/step_000005.h5" ] ||
  { fail "the busy job saved no step 5 (still running: $(kill -0 $bg 2>/dev/null && echo yes || echo no))"
    sed 's/^/     | /' "$WORK/busy.log" | tail -5; }
expect 2 "--ckpt-dir $WORK/busy is in use by a running job (run " "${D[@]}" "${SMALL[@]}" \
  --steps 4 --save-every 2 --ckpt-dir "$WORK/busy"
expect 2 "is in use by a running job" "${D[@]}" "${SMALL[@]}" --steps 4 --save-every 2 \
  --ckpt-dir "$WORK/busy" --take-over
kill_tree $bg # kill -9 of the job, ranks included (all gone when it returns): no lock outlives them
wait $bg 2>/dev/null
expect 2 "holds the checkpoints of run " "${D[@]}" "${SMALL[@]}" --steps 4 --save-every 2 \
  --ckpt-dir "$WORK/busy"
latest=$(ls "$WORK/busy"/step_*.h5 | tail -1)
step=$(basename "$latest" .h5) step=$((10#${step#step_}))
expect 0 "" "${D[@]}" "${SMALL[@]}" --steps $((step + 2)) --save-every 2 --ckpt-dir "$WORK/busy" \
  --resume latest --quiet
}
# another run's newer file dropped into the directory
other_file() {
cp "$CK" "$WORK/ck/step_000004.h5" 2>/dev/null
mkdir -p "$WORK/other" && mt "${D[@]}" "${SMALL[@]}" --steps 6 --save-every 6 \
  --ckpt-dir "$WORK/other" --quiet >/dev/null 2>&1
cp "$WORK/other/step_000006.h5" "$WORK/ck/"
expect 2 "is of run " "${D[@]}" "${SMALL[@]}" --steps 8 --save-every 2 --ckpt-dir "$WORK/ck" \
  --resume latest
expect 0 "" "${D[@]}" "${SMALL[@]}" --steps 8 --save-every 2 --ckpt-dir "$WORK/ck" \
  --resume latest --take-over --quiet
rm -f "$WORK/ck/step_000004.h5"
}
launch busy_dir
launch other_file
collect
fi

echo "faults ($PART): $fails failure(s)"
[ "$fails" -eq 0 ]
