#!/usr/bin/env bash
# Bad checkpoints and directories end cleanly: on 2 ranks, exit status 2 and exactly one
# "meshtrain: error:" line (from rank 0) naming the problem — never a crash or a hang — and
# nothing destroyed (the good checkpoint's bytes unchanged, no temp files). Cases: a missing file;
# a text file; a token file; a newer format version; a truncated file; a damaged superblock; one
# flipped bit in an array's data (the checksum); a shape in an array's header whose element count
# overflows to a small number (`ckpt info` once read past its buffer); model config and optimizer that disagree with the
# flags; a step past --steps; `latest` in an empty directory; an unwritable --ckpt-dir (under a
# regular file, and a read-only file system when mount is allowed); `ckpt info/diff` misuse.
# usage: bad_inputs.sh MPIEXEC MESHTRAIN TEXT_FILE WORK_DIR CKPT_MANGLE
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/../common/one_error.sh"
MANGLE=$5
run 2 good.log --steps 2 --save-every 2 --ckpt-dir "$WORK/good"
must good.log "writing the good checkpoint" $? || exit 1
GOOD=$WORK/good/step_000002.h5
sum_before=$(md5sum <"$GOOD")

# The cases run concurrently (each mostly waits for mpirun's start-up and teardown), at most 3 at a
# time: 6 at once gained little on 2 cores and, their ranks polling, slowed each case towards its
# timeout under load (measured at load 25-40: 6 at a time 60-64 s, 3 70-75 s, 2 76-100 s). Each
# case has 120 s, well inside the test's CTest TIMEOUT (300). Verdicts are printed in order at
# the end.
ncase=0
declare -a FRAG WHAT
# case FRAGMENT NP ARGS...: status 2, one error line, containing FRAGMENT.
case_() {
  local frag=$1 np=$2
  shift 2
  with_model "$@"
  launch "$frag" "$*" "$MPI" --oversubscribe --bind-to none -np "$np" "$MT" "${ARGV[@]}"
}
# cli FRAGMENT ARGS...: the same for `meshtrain ckpt ...` on 2 ranks.
cli() {
  local frag=$1
  shift
  launch "$frag" "ckpt $*" "$MPI" --oversubscribe --bind-to none -np 2 "$MT" ckpt "$@"
}
launch() {
  local i=$ncase
  FRAG[i]=$1 WHAT[i]=${2//$WORK/W}
  shift 2
  ncase=$((ncase + 1))
  while [ "$(jobs -rp | wc -l)" -ge 3 ]; do wait -n; done
  (timeout 120 "$@" >"$WORK/out.$i" 2>"$WORK/err.$i"; echo $? >"$WORK/rc.$i") &
}
check_all() {
  wait
  local i rc
  for ((i = 0; i < ncase; i++)); do
    rc=$(cat "$WORK/rc.$i")
    if one_error 2 "$rc" "$WORK/err.$i" "${FRAG[i]}"; then
      pass "[${WHAT[i]}] -> 2: ${ERR_LINE//$WORK/W}"
    else
      fail "[${WHAT[i]}] -> status $rc$([ "$rc" = 124 ] && echo ' (timed out after 120 s)') (want 2), $ERR_N error lines (want 1), want \"${FRAG[i]}\""
      sed 's/^/     | /' "$WORK/err.$i" | head -12
    fi
  done
}
R=(--steps 4)
case_ "cannot open" 2 "${R[@]}" --resume "$WORK/no/such.h5"
case_ "not an HDF5 file" 2 "${R[@]}" --resume "$TXT"
"$MT" prepare "$TXT" "$WORK/tokens.h5" >/dev/null 2>&1
case_ "not a meshtrain checkpoint (its format is 'meshtrain-tokens': a token file" 2 "${R[@]}" \
  --resume "$WORK/tokens.h5"
cp "$GOOD" "$WORK/v2.h5" && "$MANGLE" "$WORK/v2.h5" attr version 2 &&
  case_ "checkpoint format version 2 is newer than this meshtrain reads (up to 1)" 2 "${R[@]}" \
    --resume "$WORK/v2.h5"
head -c $(($(stat -c %s "$GOOD") / 2)) "$GOOD" >"$WORK/trunc.h5"
case_ "truncated or corrupt" 2 "${R[@]}" --resume "$WORK/trunc.h5"
cp "$GOOD" "$WORK/super.h5" && printf '\377\377\377\377\377\377\377\377' |
  dd of="$WORK/super.h5" bs=1 seek=40 conv=notrunc status=none
case_ "truncated or corrupt" 2 "${R[@]}" --resume "$WORK/super.h5"
cp "$GOOD" "$WORK/flip.h5" && "$MANGLE" "$WORK/flip.h5" flip /params/w_up >/dev/null &&
  case_ "corrupt checkpoint: the data of /params/w_up do not match its checksum" 2 "${R[@]}" \
    --resume "$WORK/flip.h5"
cli "corrupt checkpoint: 1 array fails the checksum" info "$WORK/flip.h5"
cp "$GOOD" "$WORK/shape.h5" && "$MANGLE" "$WORK/shape.h5" shape /params/wq 1 4611686018427387936 \
  >/dev/null || fail "ckpt_mangle shape"
big="dataset 'params/wq' has shape [2, 4611686018427387936, 32]: an empty extent or over"
case_ "shape.h5: $big" 2 "${R[@]}" --resume "$WORK/shape.h5"
cli "shape.h5: $big" info "$WORK/shape.h5"
cli "shape.h5: $big" diff "$GOOD" "$WORK/shape.h5"
case_ "checkpoint has --d-model 32, flags say 64" 2 "${R[@]}" --resume "$GOOD" --d-model 64
case_ "checkpoint has --layers 2, flags say 4" 2 "${R[@]}" --resume "$GOOD" --layers 4
MODEL_ADAMW=("${MODEL[@]}")
drop_from_model --eps # SGD has no epsilon
case_ "checkpoint has --optimizer adamw, flags say sgd" 2 "${R[@]}" --resume "$GOOD" \
  --optimizer sgd
MODEL=("${MODEL_ADAMW[@]}")
case_ "at step 2, past --steps 1" 2 --steps 1 --resume "$GOOD"
mkdir -p "$WORK/empty"
case_ "no checkpoint step_NNNNNN.h5 in" 2 "${R[@]}" --resume latest --ckpt-dir "$WORK/empty"
touch "$WORK/afile"
case_ "--ckpt-dir $WORK/afile/sub: cannot create" 2 "${R[@]}" --save-every 1 \
  --ckpt-dir "$WORK/afile/sub"
if mkdir -p "$WORK/ro" && mount -t tmpfs -o size=1m,ro tmpfs "$WORK/ro" 2>/dev/null; then
  case_ "cannot create a file there (Read-only file system)" 2 "${R[@]}" --save-every 1 \
    --ckpt-dir "$WORK/ro"
  umount_ro=1
else
  echo "skip read-only file system case: mount not permitted here"
fi
cli "ckpt diff takes two files A B, got 1 file" diff only-one
# a diff involving a corrupt file is an error naming the array and the file, not a difference
cli "flip.h5: corrupt checkpoint: params/w_up fails its checksum (stored " diff "$GOOD" \
  "$WORK/flip.h5"
cli "cannot open" info "$WORK/no/such.h5"
check_all
[ -n "${umount_ro:-}" ] && umount "$WORK/ro"
# diff of two different checkpoints: status 1 on every rank, no error; a NaN is never within a
# tolerance, --tol inf included (it once passed)
cp "$GOOD" "$WORK/nan.h5" && "$MANGLE" "$WORK/nan.h5" nan /params/w_up >/dev/null ||
  fail "ckpt_mangle nan"
for tol in "" "--tol 1e6" "--tol inf"; do
  # shellcheck disable=SC2086
  timeout 120 "$MPI" --oversubscribe --bind-to none -np 2 "$MT" ckpt diff "$GOOD" "$WORK/nan.h5" \
    $tol >"$WORK/out" 2>&1
  rc=$?
  if [ $rc -eq 1 ] && grep -q "params/w_up .*DIFFERENT, NON-FINITE (1 elements NaN or inf)" \
       "$WORK/out" && ! grep -q "meshtrain: error" "$WORK/out"; then
    pass "[ckpt diff GOOD NAN $tol] -> 1, names params/w_up and its NaN"
  else
    fail "[ckpt diff GOOD NAN $tol] -> $rc (want 1)"; tail -5 "$WORK/out"
  fi
done

[ "$(md5sum <"$GOOD")" = "$sum_before" ] && [ "$(ls "$WORK/good")" = step_000002.h5 ] ||
  fail "the good checkpoint changed"
no_temp_files "$WORK" || fail "temp files left behind"
finish
