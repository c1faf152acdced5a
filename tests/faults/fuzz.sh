#!/usr/bin/env bash
# fuzz.sh MPIEXEC MESHTRAIN TEXT WORK FUZZ_INPUTS: the fuzz pass, in well under a minute. In
# process (fuzz_inputs): 20000 random flag lines, 150 corrupted token files, 150 corrupted
# checkpoints, replays of seeds that once failed. Then whole runs on 2 ranks, each under
# `timeout`: random flag lines that parse, and runs fed a corrupted token file or checkpoint;
# every run must end by itself with status 0
# or 2 (2: exactly one error line), never a crash (other statuses) or a hang (124). The seed is
# $RANDOM unless FUZZ_SEED is set; it is printed, to replay a failure.
set -u
MPI=$1 MT=$2 TXT=$3 WORK=$4 FZ=$5
seed=${FUZZ_SEED:-$RANDOM}
RANDOM=$seed
echo "fuzz: seed $seed (FUZZ_SEED=$seed replays it)"
rm -rf "$WORK" && mkdir -p "$WORK" || exit 1
fails=0
fail() { echo "FAIL $*"; fails=$((fails + 1)); }
run1() { timeout 120 "$@"; } # in process: MPI's singleton start, no mpirun
SMALL=(--layers 1 --d-model 32 --heads 4 --seq-len 16 --batch 4 --eval-every 0)
"$MT" prepare "$TXT" "$WORK/tok.h5" >/dev/null || fail "prepare"
timeout 120 "$MT" --data "$WORK/tok.h5" "${SMALL[@]}" --steps 2 --save-every 2 --ckpt-dir "$WORK/ck" \
  --quiet >/dev/null 2>&1 || fail "reference run (1 rank, MPI's singleton start)"

run1 "$FZ" flags "$seed" 20000 >"$WORK/flags.log" 2>&1 || { fail "flags"; grep FAIL "$WORK/flags.log" | head; }
tail -1 "$WORK/flags.log" | sed 's/^/  /'; grep '^flags:' "$WORK/flags.log" | sed 's/^/  /'
for kind in tokens ckpt; do
  file=$WORK/tok.h5
  [ $kind = ckpt ] && file=$WORK/ck/step_000002.h5
  run1 "$FZ" $kind "$seed" 150 "$file" "$WORK" >"$WORK/$kind.log" 2>&1
  rc=$?
  [ $rc = 0 ] || { fail "$kind: fuzz_inputs exit $rc (124: a hang); last case:"; grep -v '^FAIL' "$WORK/$kind.log" | grep "case" | tail -1; grep FAIL "$WORK/$kind.log" | head; }
  grep "^$kind:" "$WORK/$kind.log" | sed 's/^/  /'
done
# Replays of seeds that once crashed or failed the in-process pass, up to the case that found it
# (each depends on the checkpoint's byte layout, so each bug also has a deterministic case in
# tests/ckpt/bad_inputs.sh where one could be made): 13434 case 13, an extent whose element count
# overflows to a small one; 167 case 93, a zeroed layout message read as empty compact storage;
# 128 case 57, HDF5's message quoting a damaged name with a newline in it.
for sn in 13434:14 167:94 128:58; do
  run1 "$FZ" ckpt "${sn%:*}" "${sn#*:}" "$WORK/ck/step_000002.h5" "$WORK" >"$WORK/replay.log" 2>&1 ||
    { fail "ckpt replay of seed ${sn%:*}: exit $?"; grep -v '^FAIL' "$WORK/replay.log" | grep case | tail -1; grep FAIL "$WORK/replay.log" | head -3; }
done

# whole runs: status 0 or 2 with one error line, never anything else
whole() { # WHAT ARGS...
  local what=$1 rc n
  shift
  # (no grace before mpirun's SIGKILL: a refused run's ranks are gone, one_error.sh says why)
  OMPI_MCA_odls_base_sigkill_timeout=0 timeout 120 "$MPI" --oversubscribe --bind-to none -np 2 \
    "$MT" "$@" >"$WORK/out" 2>"$WORK/err"
  rc=$? n=$(grep -c '^meshtrain: error:' "$WORK/err")
  if [ $rc = 0 ] || { [ $rc = 2 ] && [ "$n" = 1 ]; }; then
    echo "  ok   $what -> $rc $(grep -m1 '^meshtrain: error:' "$WORK/err" | cut -c1-110)"
  else
    fail "$what -> status $rc, $n error lines (want 0, or 2 with one)"; tail -5 "$WORK/err"
  fi
}
vals=(0 1 2 3 -1 1e-300 1e309 nan x 2x2 x=2 '' 64 0.5)
flags=(--lr --eps --mesh --dp --zero --micro-batch --warmup --clip --threads --keep --seed --top-k)
for i in 1 2; do
  f=${flags[RANDOM % ${#flags[@]}]} v=${vals[RANDOM % ${#vals[@]}]}
  whole "flags $f '$v'" --data "$WORK/tok.h5" "${SMALL[@]}" --steps 2 "$f" "$v"
done
for i in 1 2; do
  cp "$WORK/tok.h5" "$WORK/bad_tok.h5"
  size=$(stat -c %s "$WORK/bad_tok.h5")
  printf '\xff\x00\x13\x37' | dd of="$WORK/bad_tok.h5" bs=1 seek=$((RANDOM * 32768 % size + RANDOM % size)) conv=notrunc status=none
  [ $((RANDOM % 2)) = 0 ] && truncate -s $((RANDOM * RANDOM % size)) "$WORK/bad_tok.h5"
  whole "corrupted token file #$i" --data "$WORK/bad_tok.h5" "${SMALL[@]}" --steps 2
done
for i in 1; do
  ck=$WORK/ck/step_000002.h5
  cp "$ck" "$WORK/bad_ck.h5"
  size=$(stat -c %s "$ck")
  printf '\xff\x00\x13\x37' | dd of="$WORK/bad_ck.h5" bs=1 seek=$(((RANDOM * 32768 + RANDOM) % size)) conv=notrunc status=none
  whole "corrupted checkpoint #$i" --data "$WORK/tok.h5" "${SMALL[@]}" --steps 3 --resume "$WORK/bad_ck.h5"
done
echo "fuzz: $fails failure(s) (seed $seed)"
[ "$fails" -eq 0 ]
