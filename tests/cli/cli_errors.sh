#!/usr/bin/env bash
# End-to-end: meshtrain under mpirun at 2 ranks with bad input ends cleanly — exit status 2, and
# exactly one "meshtrain: error:" line (from rank 0) naming the problem — never a crash or a hang;
# --help prints once and exits 0.
# usage: cli_errors.sh MPIEXEC MESHTRAIN TEXT_FILE WORK_DIR
set -u
MPI=$1 MT=$2 TXT=$3 WORK=$4
. "$(dirname "$0")/../common/one_error.sh"
mkdir -p "$WORK"
printf 'abc\0\001\002def' >"$WORK/nul.txt"
fails=0

# The cases run concurrently, at most 3 at a time (each mostly waits for mpirun's start-up and
# teardown); verdicts are printed in order at the end.
export MESHTRAIN_QUICK_START=1
ncase=0
declare -a WANT FRAG WHAT
# case WANT_STATUS FRAGMENT ARGS...: FRAGMENT must appear in the single error line.
case_() {
  local i=$ncase
  WANT[i]=$1 FRAG[i]=$2
  shift 2
  WHAT[i]="$*"
  ncase=$((ncase + 1))
  while [ "$(jobs -rp | wc -l)" -ge 3 ]; do wait -n; done
  (timeout 60 "$MPI" --oversubscribe --bind-to none -np 2 "$MT" "$@" >"$WORK/out.$i" \
    2>"$WORK/err.$i"; echo $? >"$WORK/rc.$i") &
}

case_ 2 "unknown flag --layrs" --layrs 3
case_ 2 "--layers needs a value" --layers
case_ 2 "--steps: expected a whole number" --steps ten
case_ 2 "is not divisible by --kv-heads 4" --d-model 192 --heads 6 --kv-heads 4
case_ 2 "is odd" --head-dim 33
case_ 2 "--batch 10 is not a multiple of --micro-batch 4" --batch 10 --micro-batch 4
case_ 2 "--mesh 3 needs 3 ranks, got 2" --mesh 3 --data "$TXT"
case_ 2 "/no/such/file.txt" --data /no/such/file.txt
case_ 2 "--data $WORK: is a directory, not a file" --data "$WORK" --steps 1
case_ 2 "--resume $WORK: is a directory, not a file" --resume "$WORK" --steps 1
case_ 2 "nul.txt" --data "$WORK/nul.txt" --steps 1
case_ 2 "--vocab 300" --vocab 300 --data "$TXT" --steps 1
case_ 2 "--seq-len 500000 is too long" --seq-len 500000 --data "$TXT" --steps 1
case_ 2 "data shards" --batch 3 --data "$TXT" --steps 1
case_ 2 "prepare" prepare only-one-argument
case_ 2 "--compute-dtype fp8: expected fp32, bf16 or auto" --compute-dtype fp8 --data "$TXT"
MESHTRAIN_BF16_PATH=tiles case_ 2 "MESHTRAIN_BF16_PATH=tiles" --compute-dtype bf16 --data "$TXT" \
  --steps 1
MESHTRAIN_SGEMM=mkl case_ 2 "MESHTRAIN_SGEMM=mkl: unknown fp32 matmul library" --data "$TXT" \
  --steps 1
case_ 2 "--kv-dtype does nothing in training" --kv-dtype bf16 --data "$TXT" --steps 1
case_ 2 "--progress spin: expected thread, inline or auto" --progress spin --steps 1
case_ 2 "--progress sometimes: expected thread, inline or auto" --progress sometimes --steps 1
case_ 2 "--emulate verylongchipname: expected v3, v4p, v5e, v5p or v6e" --emulate verylongchipname
case_ 2 "--steps 99999999999999999999: must be between 0 and 1000000000000" \
  --steps 99999999999999999999
case_ 2 "--progress inline with --emulate" --progress inline --emulate v5p --overlap --steps 1
case_ 2 "--emulate-rate model needs --emulate CHIP" --emulate-rate model --steps 1
case_ 2 "--keep is given but unused: only --save-every N > 0" --keep 3 --steps 1
wait
for ((i = 0; i < ncase; i++)); do
  rc=$(cat "$WORK/rc.$i")
  if one_error "${WANT[i]}" "$rc" "$WORK/err.$i" "${FRAG[i]}"; then
    echo "ok   [${WHAT[i]}] -> $rc: $ERR_LINE"
  else
    echo "FAIL [${WHAT[i]}] -> status $rc (want ${WANT[i]}), $ERR_N error lines (want 1), want \"${FRAG[i]}\""
    sed 's/^/     | /' "$WORK/err.$i" | head -20
    fails=$((fails + 1))
  fi
done

timeout 60 "$MPI" --oversubscribe --bind-to none -np 2 "$MT" --help >"$WORK/out" 2>"$WORK/err"
rc=$?
n=$(grep -c '^usage:' "$WORK/out")
if [ "$rc" -eq 0 ] && [ "$n" -eq 1 ]; then echo "ok   [--help] -> 0, printed once"
else echo "FAIL [--help] -> status $rc, printed $n times"; fails=$((fails + 1)); fi

echo "cli_errors: $fails failure(s)"
[ "$fails" -eq 0 ]
